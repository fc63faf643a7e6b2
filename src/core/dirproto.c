#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "slot/clock.h"
#include "slot/dirproto.h"

#define DIRP_TEXT_MAX (64 * 1024)

static int
canonical(const char *method, const char *ts, const char *nonce, const char *body,
    char **out, size_t *len)
{
	size_t n = strlen(DIRP_TAG) + strlen(method) + strlen(ts) + strlen(nonce) +
	    strlen(body) + 5;
	char *t;

	if (n > DIRP_TEXT_MAX || (t = malloc(n)) == NULL)
		return -1;
	*len = (size_t)snprintf(t, n, "%s\n%s\n%s\n%s\n%s", DIRP_TAG, method, ts, nonce, body);
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

	if (canonical(method, ts, nonce, body, &t, &len) == -1)
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
	size_t got = 0;
	char *t;
	size_t len;
	int ok;

	if (mac_hex == NULL || strlen(mac_hex) != DIRP_MAC_HEX ||
	    sodium_hex2bin(mac, sizeof(mac), mac_hex, DIRP_MAC_HEX, NULL, &got, NULL) != 0 ||
	    got != sizeof(mac))
		return -1;
	if (canonical(method, ts, nonce, body, &t, &len) == -1)
		return -1;
	ok = auth_verify(key, t, len, mac);
	free(t);
	return ok ? 0 : -1;
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
	size_t i;

	if (ts == NULL || nonce == NULL || ts[0] == '\0' || strlen(ts) > 19 ||
	    strlen(nonce) != DIRP_NONCE_HEX)
		return -1;
	for (i = 0; ts[i]; i++) {
		if (ts[i] < '0' || ts[i] > '9')
			return -1;
		v = v * 10 + (uint64_t)(ts[i] - '0');
	}
	for (i = 0; nonce[i]; i++) {
		int c = nonce[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		nv = nv << 4 | (uint64_t)d;
	}
	*ts_us = v;
	*nonce_v = nv;
	return 0;
}
