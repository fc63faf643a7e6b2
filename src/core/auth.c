/*
 * The deployment key and HMAC-SHA256 (libsodium). crypto_auth_hmacsha256
 * with its 32-byte key is plain RFC 2104 HMAC-SHA256, so other
 * implementations (Python's hmac, openssl) interoperate; the unit test
 * checks a known answer.
 */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "slot/errbuf.h"
#include "slot/auth.h"

/* A key file is 64 digits and some white space; anything much larger is
 * not a key file. */
#define AUTH_FILE_MAX 256

_Static_assert(AUTH_KEY_LEN == crypto_auth_hmacsha256_KEYBYTES, "key length");
_Static_assert(AUTH_MAC_LEN == crypto_auth_hmacsha256_BYTES, "mac length");

int
auth_init(void)
{
	return sodium_init() >= 0 ? 0 : -1;
}

/* Parses len bytes of s (no NUL needed). */
static int
auth_key_parse_buf(const char *s, size_t len, struct auth_key *out)
{
	uint8_t k[AUTH_KEY_LEN];
	size_t i, binlen;
	const char *end;
	int ret = -1;

	while (len > 0 && isspace((unsigned char)*s)) {
		s++;
		len--;
	}
	while (len > 0 && isspace((unsigned char)s[len - 1]))
		len--;
	if (len != 2 * AUTH_KEY_LEN)
		return -1;
	for (i = 0; i < len; i++)
		if (!isxdigit((unsigned char)s[i]))
			return -1;
	if (sodium_hex2bin(k, sizeof(k), s, len, NULL, &binlen, &end) == 0 &&
	    binlen == AUTH_KEY_LEN && end == s + len) {
		memcpy(out->k, k, sizeof(out->k));
		ret = 0;
	}
	sodium_memzero(k, sizeof(k));
	return ret;
}

int
auth_key_parse_hex(const char *s, struct auth_key *out)
{
	if (s == NULL)
		return -1;
	return auth_key_parse_buf(s, strlen(s), out);
}

int
auth_read_private(const char *path, const char *what, char *buf, size_t cap,
    size_t *len_out, char *err, size_t errlen)
{
	struct stat st;
	size_t len = 0;
	ssize_t n;
	int fd, ret = -1;

	/* O_NOFOLLOW: a symlink could point the daemon at any file it can
	 * read. O_NONBLOCK: opening a FIFO must not hang before fstat. */
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd == -1) {
		if (errno == ELOOP)
			errbuf_set(err, errlen, "%s %s is a symbolic link; "
			    "refusing it", what, path);
		else
			errbuf_set(err, errlen, "%s %s: %s", what, path,
			    strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		errbuf_set(err, errlen, "%s %s: %s", what, path, strerror(errno));
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		errbuf_set(err, errlen, "%s %s is not a regular file", what, path);
		goto done;
	}
	if ((st.st_mode & 077) != 0) {
		errbuf_set(err, errlen, "%s %s is %s by group or others "
		    "(mode %04o); chmod 600 it", what, path,
		    (st.st_mode & 044) ? "readable" :
		    (st.st_mode & 022) ? "writable" : "accessible",
		    (unsigned)(st.st_mode & 07777));
		goto done;
	}
	for (;;) {
		n = read(fd, buf + len, cap - len);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			errbuf_set(err, errlen, "%s %s: %s", what, path,
			    strerror(errno));
			goto done;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len == cap)
			break;	/* the caller sees len == cap: too large */
	}
	*len_out = len;
	ret = 0;
done:
	if (ret == -1)
		sodium_memzero(buf, cap);
	close(fd);
	return ret;
}

int
auth_key_load(const char *path, struct auth_key *out, char *err, size_t errlen)
{
	char buf[AUTH_FILE_MAX + 1];
	size_t len = 0;
	int ret = -1;

	if (auth_read_private(path, "key file", buf, sizeof(buf), &len, err,
	    errlen) == -1)
		return -1;
	if (len > AUTH_FILE_MAX || auth_key_parse_buf(buf, len, out) == -1)
		errbuf_set(err, errlen, "key file %s must hold exactly %d hex "
		    "digits", path, 2 * AUTH_KEY_LEN);
	else
		ret = 0;
	sodium_memzero(buf, sizeof(buf));
	return ret;
}

void
auth_key_generate_hex(char hex[2 * AUTH_KEY_LEN + 1])
{
	uint8_t k[AUTH_KEY_LEN];

	randombytes_buf(k, sizeof(k));
	sodium_bin2hex(hex, 2 * AUTH_KEY_LEN + 1, k, sizeof(k));
	sodium_memzero(k, sizeof(k));
}

void
auth_mac(const struct auth_key *key, const void *msg, size_t len,
    uint8_t mac[AUTH_MAC_LEN])
{
	crypto_auth_hmacsha256(mac, msg, len, key->k);
}

bool
auth_verify(const struct auth_key *key, const void *msg, size_t len,
    const uint8_t mac[AUTH_MAC_LEN])
{
	uint8_t want[AUTH_MAC_LEN];
	bool ok;

	crypto_auth_hmacsha256(want, msg, len, key->k);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof(want));
	return ok;
}

void
auth_key_wipe(struct auth_key *key)
{
	sodium_memzero(key, sizeof(*key));
}
