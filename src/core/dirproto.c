#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "slot/be.h"
#include "slot/clock.h"
#include "slot/dirproto.h"

#define DIRP_TEXT_MAX (64 * 1024)

static int
canonical(const char *tag, const char *method, const char *ts, const char *nonce,
    const char *body, char **out, size_t *len)
{
	size_t n = strlen(tag) + strlen(method) + strlen(ts) + strlen(nonce) +
	    strlen(body) + 5;
	char *t;

	if (n > DIRP_TEXT_MAX || (t = malloc(n)) == NULL)
		return -1;
	*len = (size_t)snprintf(t, n, "%s\n%s\n%s\n%s\n%s", tag, method, ts, nonce, body);
	*out = t;
	return 0;
}

int
dirp_mac(const struct auth_key *key, const char *method, const char *ts, const char *nonce,
    const char *body, char mac_hex[DIRP_MAC_HEX + 1])
{
	uint8_t mac[AUTH_MAC_LEN];
	char *t;
	size_t len;

	if (canonical(DIRP_TAG, method, ts, nonce, body, &t, &len) == -1)
		return -1;
	auth_mac(key, t, len, mac);
	free(t);
	sodium_bin2hex(mac_hex, DIRP_MAC_HEX + 1, mac, sizeof(mac));
	return 0;
}

int
dirp_verify(const struct auth_key *key, const char *method, const char *ts, const char *nonce,
    const char *body, const char *mac_hex)
{
	uint8_t mac[AUTH_MAC_LEN];
	char *t;
	size_t len;
	int ok;

	if (mac_hex == NULL || dirp_unhex(mac_hex, mac, sizeof(mac)) == -1)
		return -1;
	if (canonical(DIRP_TAG, method, ts, nonce, body, &t, &len) == -1)
		return -1;
	ok = auth_verify(key, t, len, mac);
	free(t);
	return ok ? 0 : -1;
}

int
dirp_sign(const struct ident *id, const char *method, const char *ts, const char *nonce,
    const char *body, char sig_hex[DIRP_SIG_HEX + 1])
{
	uint8_t sig[IDENT_SIG_LEN];
	char *t;
	size_t len;

	if (canonical(DIRP_TAG_IDENT, method, ts, nonce, body, &t, &len) == -1)
		return -1;
	ident_sign(id, DIRP_CALL_CTX, t, len, sig);
	free(t);
	sodium_bin2hex(sig_hex, DIRP_SIG_HEX + 1, sig, sizeof(sig));
	return 0;
}

int
dirp_verify_sig(const uint8_t pk[IDENT_PK_LEN], const char *method, const char *ts,
    const char *nonce, const char *body, const char *sig_hex)
{
	uint8_t sig[IDENT_SIG_LEN];
	char *t;
	size_t len;
	bool ok;

	if (sig_hex == NULL || dirp_unhex(sig_hex, sig, sizeof(sig)) == -1)
		return -1;
	if (canonical(DIRP_TAG_IDENT, method, ts, nonce, body, &t, &len) == -1)
		return -1;
	ok = ident_verify(pk, DIRP_CALL_CTX, t, len, sig);
	free(t);
	return ok ? 0 : -1;
}

int
dirp_unhex(const char *hex, uint8_t *out, size_t len)
{
	size_t got = 0;

	if (hex == NULL || strlen(hex) != 2 * len ||
	    sodium_hex2bin(out, len, hex, 2 * len, NULL, &got, NULL) != 0 || got != len)
		return -1;
	return 0;
}

void
dirp_stamp(char ts[24], char nonce[DIRP_NONCE_HEX + 1])
{
	uint8_t b[DIRP_NONCE_HEX / 2];

	snprintf(ts, 24, "%" PRIu64, clock_real_us());
	randombytes_buf(b, sizeof(b));
	sodium_bin2hex(nonce, DIRP_NONCE_HEX + 1, b, sizeof(b));
}

int
dirp_parse_stamp(const char *ts, const char *nonce, uint64_t *ts_us, uint64_t *nonce_v)
{
	uint64_t v = 0, nv = 0;

	/* DIRP_NONCE_HEX is dirp_hex64's 16 digits. */
	if (ts == NULL || nonce == NULL || strlen(ts) > 19 ||
	    dirp_dec64(ts, UINT64_MAX, &v) == -1 || dirp_hex64(nonce, &nv) == -1)
		return -1;
	*ts_us = v;
	*nonce_v = nv;
	return 0;
}

int
dirp_dec64(const char *s, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (*s == '\0')
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -1;
		unsigned d = (unsigned)(*s - '0');
		if (d > max || v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int
dirp_hex64(const char *s, uint64_t *out)
{
	uint8_t b[8];

	if (strlen(s) != 16 || strpbrk(s, "ABCDEF") != NULL ||
	    sodium_hex2bin(b, sizeof(b), s, 16, NULL, NULL, NULL) != 0)
		return -1;
	*out = get64(b);
	return 0;
}

bool
dirp_word_ok(const char *s)
{
	if (s == NULL || *s == '\0')
		return false;
	for (; *s; s++)
		if (*s <= ' ' || *s >= 0x7f)
			return false;
	return true;
}

char *
dirp_list_text(const struct dirp_listing *l, size_t *len)
{
	uint8_t h[crypto_hash_sha256_BYTES];
	char hex[2 * IDENT_CERT_LEN + 1], serial[17];
	char *buf = NULL;
	size_t blen = 0;
	FILE *f;
	int bad;

	*len = 0;
	if (!dirp_word_ok(l->nonce) || !dirp_word_ok(l->version))
		return NULL;
	for (size_t i = 0; i < l->nrelay; i++)
		if (!dirp_word_ok(l->relay[i].relay))
			return NULL;
	if ((f = open_memstream(&buf, &blen)) == NULL)
		return NULL;
	fprintf(f, DIRP_LIST_MAGIC "\nnonce %s\nversion %s\nchanged %d\nrelays %zu\n",
	    l->nonce, l->version, l->changed ? 1 : 0, l->nrelay);
	for (size_t i = 0; i < l->nrelay; i++) {
		const struct dirp_list_relay *r = &l->relay[i];

		if (r->cert != NULL)
			sodium_bin2hex(hex, sizeof(hex), r->cert, IDENT_CERT_LEN);
		fprintf(f, "relay %s %u %" PRIu32 " %s\n", r->relay, r->data_port, r->group,
		    r->cert != NULL ? hex : "-");
	}
	crypto_hash_sha256(h, l->land_rtt_len > 0 ? l->land_rtt : (const uint8_t *)"",
	    l->land_rtt_len);
	sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
	fprintf(f, "landmarks %zu %s\n", l->nland, hex);
	for (size_t i = 0; i < l->nland; i++)
		fprintf(f, "landmark %" PRIu32 " %.9g\n", l->land_index[i],
		    (double)l->land_weight[i]);
	fprintf(f, "revoked %zu\n", l->nrevoked);
	for (size_t i = 0; i < l->nrevoked; i++) {
		ident_serial_hex(l->revoked[i], serial);
		fprintf(f, "serial %s\n", serial);
	}
	bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(buf);
		return NULL;
	}
	*len = blen;
	return buf;
}

void
dirp_list_sign(const struct ident *id, const char *text, size_t len,
    uint8_t sig[IDENT_SIG_LEN])
{
	ident_sign(id, DIRP_LIST_CTX, text, len, sig);
}

bool
dirp_list_verify(const uint8_t pk[IDENT_PK_LEN], const char *text, size_t len,
    const uint8_t sig[IDENT_SIG_LEN])
{
	return ident_verify(pk, DIRP_LIST_CTX, text, len, sig);
}
