/* Unit tests for src/core/auth.c: HMAC known answers, key parsing, and the
 * key file checks. */

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "slot/auth.h"

static char tmpdir[64];

static const char key_hex[] =
    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20";

static int
group_setup(void **state)
{
	(void)state;
	if (auth_init() != 0)
		return -1;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_auth.XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int
group_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static void
unhex(const char *hex, uint8_t *out, size_t len)
{
	size_t i;
	unsigned b;

	assert_int_equal(strlen(hex), 2 * len);
	for (i = 0; i < len; i++) {
		assert_int_equal(sscanf(hex + 2 * i, "%2x", &b), 1);
		out[i] = (uint8_t)b;
	}
}

/* Writes a key file with the given mode; returns its path. */
static const char *
key_file(const char *name, const void *data, size_t len, mode_t mode)
{
	static char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);	/* not subject to umask */
	close(fd);
	return path;
}

static void
test_hmac_vectors(void **state)
{
	/* RFC 4231 test cases 1 and 2 use keys shorter than 32 bytes. HMAC
	 * pads a short key with zeros to the block size, so the same key
	 * zero-padded to 32 bytes must give the RFC's answer. The third
	 * vector, with a full 32-byte key, comes from Python:
	 *   hmac.new(bytes(range(1, 33)), b"slot replay test vector",
	 *       hashlib.sha256).hexdigest() */
	static const struct {
		const char *key;
		const char *msg;
		const char *mac;
	} v[] = {
		{ "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b000000000000000000000000",
		  "Hi There",
		  "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
		{ "4a656665" "00000000000000000000000000000000000000000000000000000000",
		  "what do ya want for nothing?",
		  "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
		{ key_hex,
		  "slot replay test vector",
		  "71aed168f37957c328d33eb9fccc17ba77daa1ed38f6d0f8d72a511f2059e069" },
		{ key_hex,
		  "",
		  "462476a897ddfdbd40d1420e08a5bcfeeb25c3e2ade6a0a9083b327b9ef9fca1" },
	};
	struct auth_key key;
	uint8_t mac[AUTH_MAC_LEN], want[AUTH_MAC_LEN];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		assert_int_equal(strlen(v[i].key), 64);
		assert_int_equal(auth_key_parse_hex(v[i].key, &key), 0);
		unhex(v[i].mac, want, sizeof(want));
		auth_mac(&key, v[i].msg, strlen(v[i].msg), mac);
		assert_memory_equal(mac, want, sizeof(want));
		assert_true(auth_verify(&key, v[i].msg, strlen(v[i].msg), want));
	}
}

static void
test_verify_rejects(void **state)
{
	struct auth_key key, other;
	uint8_t msg[100], mac[AUTH_MAC_LEN], bad[AUTH_MAC_LEN];
	size_t i;

	(void)state;
	assert_int_equal(auth_key_parse_hex(key_hex, &key), 0);
	other = key;
	other.k[31] ^= 1;
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (uint8_t)(i * 7);
	auth_mac(&key, msg, sizeof(msg), mac);
	assert_true(auth_verify(&key, msg, sizeof(msg), mac));
	assert_false(auth_verify(&other, msg, sizeof(msg), mac));
	assert_false(auth_verify(&key, msg, sizeof(msg) - 1, mac));
	for (i = 0; i < AUTH_MAC_LEN; i++) {
		memcpy(bad, mac, sizeof(bad));
		bad[i] ^= 0x80;
		assert_false(auth_verify(&key, msg, sizeof(msg), bad));
	}
	msg[50] ^= 1;
	assert_false(auth_verify(&key, msg, sizeof(msg), mac));
}

static void
test_parse_hex(void **state)
{
	static const char *const bad[] = {
		"",
		"   \n",
		/* 63 and 65 digits */
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2",
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f200",
		/* a non-hex digit */
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2g",
		/* white space inside */
		"01020304050607 08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20",
		"0x02030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20",
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20 x",
		/* two keys */
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n"
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20",
	};
	struct auth_key key, want;
	char buf[200];
	size_t i;

	(void)state;
	for (i = 0; i < AUTH_KEY_LEN; i++)
		want.k[i] = (uint8_t)(i + 1);
	assert_int_equal(auth_key_parse_hex(key_hex, &key), 0);
	assert_memory_equal(key.k, want.k, AUTH_KEY_LEN);

	snprintf(buf, sizeof(buf), " \t\n%s\r\n\n", key_hex);
	memset(&key, 0, sizeof(key));
	assert_int_equal(auth_key_parse_hex(buf, &key), 0);
	assert_memory_equal(key.k, want.k, AUTH_KEY_LEN);

	assert_int_equal(auth_key_parse_hex(
	    "0102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F20",
	    &key), 0);
	assert_memory_equal(key.k, want.k, AUTH_KEY_LEN);

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&key, 0xee, sizeof(key));
		if (auth_key_parse_hex(bad[i], &key) != -1)
			fail_msg("accepted \"%s\"", bad[i]);
		assert_int_equal(key.k[0], 0xee);	/* untouched */
	}
	assert_int_equal(auth_key_parse_hex(NULL, &key), -1);
}

static void
test_load_ok(void **state)
{
	struct auth_key key, want;
	char text[100], err[256] = "";
	const char *path;

	(void)state;
	assert_int_equal(auth_key_parse_hex(key_hex, &want), 0);
	snprintf(text, sizeof(text), "%s\n", key_hex);
	path = key_file("ok", text, strlen(text), 0600);
	memset(&key, 0, sizeof(key));
	assert_int_equal(auth_key_load(path, &key, err, sizeof(err)), 0);
	assert_memory_equal(key.k, want.k, AUTH_KEY_LEN);

	/* Read-only for the owner is fine too; no newline is fine. */
	path = key_file("ro", key_hex, strlen(key_hex), 0400);
	memset(&key, 0, sizeof(key));
	assert_int_equal(auth_key_load(path, &key, err, sizeof(err)), 0);
	assert_memory_equal(key.k, want.k, AUTH_KEY_LEN);
}

static void
test_load_modes(void **state)
{
	static const struct {
		mode_t mode;
		const char *word;
	} refused[] = {
		{ 0644, "readable" }, { 0640, "readable" }, { 0604, "readable" },
		{ 0620, "writable" }, { 0602, "writable" }, { 0610, "accessible" },
		{ 0666, "readable" },
	};
	struct auth_key key;
	char text[100], err[256], want[256];
	const char *path;
	size_t i;

	(void)state;
	snprintf(text, sizeof(text), "%s\n", key_hex);
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		path = key_file("mode", text, strlen(text), refused[i].mode);
		memset(&key, 0xee, sizeof(key));
		err[0] = '\0';
		assert_int_equal(auth_key_load(path, &key, err, sizeof(err)), -1);
		snprintf(want, sizeof(want), "key file %s is %s by group or others "
		    "(mode %04o); chmod 600 it", path, refused[i].word,
		    (unsigned)refused[i].mode);
		assert_string_equal(err, want);
		assert_int_equal(key.k[0], 0xee);
	}
}

static void
test_load_symlink(void **state)
{
	struct auth_key key;
	char text[100], err[256], target[128], link[128];

	(void)state;
	snprintf(text, sizeof(text), "%s\n", key_hex);
	snprintf(target, sizeof(target), "%s", key_file("target", text,
	    strlen(text), 0600));
	snprintf(link, sizeof(link), "%s/link", tmpdir);
	unlink(link);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(auth_key_load(target, &key, err, sizeof(err)), 0);
	assert_int_equal(auth_key_load(link, &key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "symbolic link"));
	assert_non_null(strstr(err, link));
}

static void
test_load_not_regular(void **state)
{
	struct auth_key key;
	char err[256], fifo[128];

	(void)state;
	assert_int_equal(chmod(tmpdir, 0700), 0);
	assert_int_equal(auth_key_load(tmpdir, &key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not a regular file"));

	/* A FIFO must be refused, not waited on. */
	snprintf(fifo, sizeof(fifo), "%s/fifo", tmpdir);
	unlink(fifo);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(auth_key_load(fifo, &key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not a regular file"));
}

static void
test_load_bad_contents(void **state)
{
	static const char *const bad[] = {
		"",
		"\n",
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n",
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f2021\n",
		"zz02030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n",
		"key=0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n",
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n"
		"0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n",
	};
	struct auth_key key;
	char err[256], want[256], big[4096], absent[96];
	const char *path;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		path = key_file("bad", bad[i], strlen(bad[i]), 0600);
		err[0] = '\0';
		if (auth_key_load(path, &key, err, sizeof(err)) != -1)
			fail_msg("accepted \"%s\"", bad[i]);
		snprintf(want, sizeof(want), "key file %s must hold exactly 64 "
		    "hex digits", path);
		assert_string_equal(err, want);
	}

	/* A key followed by a lot of white space is still too big to be a
	 * key file, and must not be read without bound. */
	memset(big, ' ', sizeof(big));
	memcpy(big, key_hex, 64);
	path = key_file("big", big, sizeof(big), 0600);
	assert_int_equal(auth_key_load(path, &key, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "must hold exactly 64 hex digits"));

	snprintf(absent, sizeof(absent), "%s/absent", tmpdir);
	assert_int_equal(auth_key_load(absent, &key, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "key file %s: %s", absent, strerror(ENOENT));
	assert_string_equal(err, want);
}

static void
test_generate_and_wipe(void **state)
{
	char a[2 * AUTH_KEY_LEN + 1], b[2 * AUTH_KEY_LEN + 1];
	struct auth_key key;
	size_t i;

	(void)state;
	memset(a, 'Z', sizeof(a));
	auth_key_generate_hex(a);
	auth_key_generate_hex(b);
	assert_int_equal(strlen(a), 64);
	for (i = 0; i < 64; i++)
		assert_non_null(strchr("0123456789abcdef", a[i]));
	assert_string_not_equal(a, b);
	assert_int_equal(auth_key_parse_hex(a, &key), 0);

	auth_key_wipe(&key);
	for (i = 0; i < AUTH_KEY_LEN; i++)
		assert_int_equal(key.k[i], 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hmac_vectors),
		cmocka_unit_test(test_verify_rejects),
		cmocka_unit_test(test_parse_hex),
		cmocka_unit_test(test_load_ok),
		cmocka_unit_test(test_load_modes),
		cmocka_unit_test(test_load_symlink),
		cmocka_unit_test(test_load_not_regular),
		cmocka_unit_test(test_load_bad_contents),
		cmocka_unit_test(test_generate_and_wipe),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
