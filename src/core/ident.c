/*
 * Per-host identities: certificates from the deployment's CA, key files,
 * pair keys and signatures (libsodium; see slot/ident.h and docs/keys.md).
 */

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "slot/be.h"
#include "slot/cmp.h"
#include "slot/errbuf.h"
#include "slot/ident.h"

#define CERT_MAGIC "SLC1"
#define CERT_CTX "slot-cert/1"
#define PAIR_CTX "slot-pair/1"
/* Key, certificate and CA files are one line of hex and a few comments. */
#define IDENT_FILE_MAX 4096
/* A revocation list: 17 bytes a serial; 1 MiB is ~60,000 serials. */
#define REVOKED_FILE_MAX (1u << 20)

_Static_assert(IDENT_PK_LEN == crypto_sign_PUBLICKEYBYTES, "pk length");
_Static_assert(IDENT_SK_LEN == crypto_sign_SECRETKEYBYTES, "sk length");
_Static_assert(IDENT_SEED_LEN == crypto_sign_SEEDBYTES, "seed length");
_Static_assert(IDENT_SIG_LEN == crypto_sign_BYTES, "sig length");

int
ident_mode_parse(const char *s)
{
	if (strcmp(s, "identity") == 0)
		return IDENT_MODE_IDENTITY;
	if (strcmp(s, "shared") == 0)
		return IDENT_MODE_SHARED;
	return -1;
}

const char *
ident_mode_str(int mode)
{
	return mode == IDENT_MODE_SHARED ? "shared" : "identity";
}

const char *
ident_role_str(uint8_t role)
{
	switch (role) {
	case IDENT_ROLE_CLIENT: return "client";
	case IDENT_ROLE_RELAY: return "relay";
	case IDENT_ROLE_DIRECTORY: return "directory";
	}
	return "unknown";
}

uint8_t
ident_role_parse(const char *s)
{
	if (strcmp(s, "client") == 0)
		return IDENT_ROLE_CLIENT;
	if (strcmp(s, "relay") == 0)
		return IDENT_ROLE_RELAY;
	if (strcmp(s, "directory") == 0)
		return IDENT_ROLE_DIRECTORY;
	return 0;
}

bool
ident_name_ok(const char *s)
{
	size_t i, n = strlen(s);

	if (n == 0 || n > IDENT_NAME_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '.' &&
		    s[i] != '_' && s[i] != '-')
			return false;
	return true;
}

void
ident_keygen(uint8_t seed[IDENT_SEED_LEN], uint8_t pk[IDENT_PK_LEN])
{
	randombytes_buf(seed, IDENT_SEED_LEN);
	ident_seed_pk(seed, pk);
}

void
ident_seed_pk(const uint8_t seed[IDENT_SEED_LEN], uint8_t pk[IDENT_PK_LEN])
{
	uint8_t sk[IDENT_SK_LEN];

	crypto_sign_seed_keypair(pk, sk, seed);
	sodium_memzero(sk, sizeof(sk));
}

/* Ed25519 over ctx NUL msg. */
static int
sign_ctx(const uint8_t sk[IDENT_SK_LEN], const char *ctx, const void *msg,
    size_t len, uint8_t sig[IDENT_SIG_LEN])
{
	size_t cl = strlen(ctx) + 1;
	uint8_t *buf = malloc(cl + len);

	if (buf == NULL)
		return -1;
	memcpy(buf, ctx, cl);
	if (len > 0)
		memcpy(buf + cl, msg, len);
	crypto_sign_detached(sig, NULL, buf, cl + len, sk);
	free(buf);
	return 0;
}

static bool
verify_ctx(const uint8_t pk[IDENT_PK_LEN], const char *ctx, const void *msg,
    size_t len, const uint8_t sig[IDENT_SIG_LEN])
{
	size_t cl = strlen(ctx) + 1;
	uint8_t *buf = malloc(cl + len);
	bool ok;

	if (buf == NULL)
		return false;
	memcpy(buf, ctx, cl);
	if (len > 0)
		memcpy(buf + cl, msg, len);
	ok = crypto_sign_verify_detached(sig, buf, cl + len, pk) == 0;
	free(buf);
	return ok;
}

int
ident_cert_issue(const uint8_t ca_seed[IDENT_SEED_LEN], uint8_t role,
    const char *name, uint64_t serial, uint64_t not_before,
    uint64_t not_after, const uint8_t pk[IDENT_PK_LEN],
    uint8_t raw[IDENT_CERT_LEN], char *err, size_t errlen)
{
	uint8_t ca_pk[IDENT_PK_LEN], ca_sk[IDENT_SK_LEN];
	int ret;

	if (role < IDENT_ROLE_CLIENT || role > IDENT_ROLE_DIRECTORY) {
		errbuf_set(err, errlen, "unknown role %u", (unsigned)role);
		return -1;
	}
	if (!ident_name_ok(name)) {
		errbuf_set(err, errlen, "name '%s' must be 1 to %d of the "
		    "characters A-Z a-z 0-9 . _ -", name, IDENT_NAME_MAX);
		return -1;
	}
	if (not_after <= not_before) {
		errbuf_set(err, errlen, "validity ends before it starts");
		return -1;
	}
	memset(raw, 0, IDENT_CERT_LEN);
	memcpy(raw, CERT_MAGIC, 4);
	raw[4] = role;
	put64(raw + 8, serial);
	put64(raw + 16, not_before);
	put64(raw + 24, not_after);
	memcpy(raw + 32, pk, IDENT_PK_LEN);
	memcpy(raw + 64, name, strlen(name));
	crypto_sign_seed_keypair(ca_pk, ca_sk, ca_seed);
	ret = sign_ctx(ca_sk, CERT_CTX, raw, IDENT_CERT_SIGNED, raw + IDENT_CERT_SIGNED);
	sodium_memzero(ca_sk, sizeof(ca_sk));
	if (ret == -1)
		errbuf_set(err, errlen, "out of memory");
	return ret;
}

int
ident_cert_decode(const uint8_t raw[IDENT_CERT_LEN], struct ident_cert *out,
    char *err, size_t errlen)
{
	size_t i, n;

	if (memcmp(raw, CERT_MAGIC, 4) != 0) {
		errbuf_set(err, errlen, "not a slot certificate (magic)");
		return -1;
	}
	if (raw[4] < IDENT_ROLE_CLIENT || raw[4] > IDENT_ROLE_DIRECTORY) {
		errbuf_set(err, errlen, "certificate has unknown role %u",
		    (unsigned)raw[4]);
		return -1;
	}
	if (raw[5] != 0 || raw[6] != 0 || raw[7] != 0) {
		errbuf_set(err, errlen, "certificate reserved bytes not zero");
		return -1;
	}
	/* The name: printable, then NUL padding only. */
	for (n = 0; n < IDENT_NAME_MAX && raw[64 + n] != 0; n++)
		;
	for (i = n; i < IDENT_NAME_MAX; i++)
		if (raw[64 + i] != 0) {
			errbuf_set(err, errlen, "certificate name not NUL padded");
			return -1;
		}
	memset(out, 0, sizeof(*out));
	memcpy(out->name, raw + 64, n);
	if (!ident_name_ok(out->name)) {
		errbuf_set(err, errlen, "certificate has an invalid name");
		return -1;
	}
	out->role = raw[4];
	out->serial = get64(raw + 8);
	out->not_before = get64(raw + 16);
	out->not_after = get64(raw + 24);
	memcpy(out->pk, raw + 32, IDENT_PK_LEN);
	memcpy(out->raw, raw, IDENT_CERT_LEN);
	return 0;
}

int
ident_cert_check(const struct ident_cert *c, const uint8_t ca_pk[IDENT_PK_LEN],
    unsigned role_mask, uint64_t now, const struct ident_revoked *rev,
    char *err, size_t errlen)
{
	char hex[17];

	if (!verify_ctx(ca_pk, CERT_CTX, c->raw, IDENT_CERT_SIGNED,
	    c->raw + IDENT_CERT_SIGNED)) {
		errbuf_set(err, errlen, "certificate '%s' is not signed by this "
		    "deployment's CA", c->name);
		return -1;
	}
	if ((role_mask & IDENT_MASK(c->role)) == 0) {
		errbuf_set(err, errlen, "certificate '%s' is a %s's, not allowed "
		    "here", c->name, ident_role_str(c->role));
		return -1;
	}
	if (now < c->not_before) {
		errbuf_set(err, errlen, "certificate '%s' is not valid yet",
		    c->name);
		return -1;
	}
	if (now >= c->not_after) {
		errbuf_set(err, errlen, "certificate '%s' has expired", c->name);
		return -1;
	}
	if (rev != NULL && ident_revoked_has(rev, c->serial)) {
		ident_serial_hex(c->serial, hex);
		errbuf_set(err, errlen, "certificate '%s' (serial %s) is revoked",
		    c->name, hex);
		return -1;
	}
	return 0;
}

int
ident_cert_verify(const uint8_t raw[IDENT_CERT_LEN],
    const uint8_t ca_pk[IDENT_PK_LEN], unsigned role_mask, uint64_t now,
    const struct ident_revoked *rev, struct ident_cert *out, char *err,
    size_t errlen)
{
	if (ident_cert_decode(raw, out, err, errlen) == -1)
		return -1;
	return ident_cert_check(out, ca_pk, role_mask, now, rev, err, errlen);
}

int
ident_parse_text(const char *text, size_t len, const char *tag, uint8_t *out,
    size_t outlen)
{
	size_t tl = strlen(tag), i = 0, start, end, binlen;
	const char *hexend;
	int found = 0;

	while (i < len) {
		start = i;
		while (i < len && text[i] != '\n')
			i++;
		end = i;
		if (i < len)
			i++;
		while (start < end && isspace((unsigned char)text[start]))
			start++;
		while (end > start && isspace((unsigned char)text[end - 1]))
			end--;
		if (start == end || text[start] == '#')
			continue;
		if (found++ > 0)
			return -1;	/* one data line only */
		if (end - start < tl + 1 || memcmp(text + start, tag, tl) != 0 ||
		    text[start + tl] != ' ')
			return -1;
		start += tl + 1;
		while (start < end && text[start] == ' ')
			start++;
		if (end - start != 2 * outlen)
			return -1;
		for (size_t k = start; k < end; k++)
			if (!isxdigit((unsigned char)text[k]))
				return -1;
		if (sodium_hex2bin(out, outlen, text + start, end - start, NULL,
		    &binlen, &hexend) != 0 || binlen != outlen ||
		    hexend != text + end)
			return -1;
	}
	return found == 1 ? 0 : -1;
}

static int
read_public(const char *path, const char *what, char *buf, size_t cap,
    size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");

	if (f == NULL) {
		errbuf_set(err, errlen, "%s %s: %s", what, path, strerror(errno));
		return -1;
	}
	*len = fread(buf, 1, cap, f);
	if (ferror(f)) {
		errbuf_set(err, errlen, "%s %s: read error", what, path);
		fclose(f);
		return -1;
	}
	fclose(f);
	if (*len == cap) {
		errbuf_set(err, errlen, "%s %s is too large", what, path);
		return -1;
	}
	return 0;
}

int
ident_seed_load(const char *path, uint8_t seed[IDENT_SEED_LEN], char *err,
    size_t errlen)
{
	char buf[IDENT_FILE_MAX];
	size_t len;
	int ret = 0;

	if (auth_read_private(path, "key file", buf, sizeof(buf), &len, err,
	    errlen) == -1)
		return -1;
	if (len == sizeof(buf) ||
	    ident_parse_text(buf, len, "slot-key-1", seed, IDENT_SEED_LEN) == -1) {
		errbuf_set(err, errlen, "key file %s must hold one line "
		    "'slot-key-1' and %d hex digits (make one with slot-keygen)",
		    path, 2 * IDENT_SEED_LEN);
		ret = -1;
	}
	sodium_memzero(buf, sizeof(buf));
	return ret;
}

/* A public file of one tagged hex line; hint says how to make one. */
static int
load_public(const char *path, const char *what, const char *tag, uint8_t *out,
    size_t outlen, const char *hint, char *err, size_t errlen)
{
	char buf[IDENT_FILE_MAX];
	size_t len;

	if (read_public(path, what, buf, sizeof(buf), &len, err, errlen) == -1)
		return -1;
	if (ident_parse_text(buf, len, tag, out, outlen) == -1) {
		errbuf_set(err, errlen, "%s %s must hold one line '%s' and %zu hex "
		    "digits (%s)", what, path, tag, 2 * outlen, hint);
		return -1;
	}
	return 0;
}

int
ident_cert_load(const char *path, uint8_t raw[IDENT_CERT_LEN], char *err,
    size_t errlen)
{
	return load_public(path, "certificate file", "slot-cert-1", raw,
	    IDENT_CERT_LEN, "make one with slot-keygen", err, errlen);
}

int
ident_ca_load(const char *path, uint8_t ca_pk[IDENT_PK_LEN], char *err,
    size_t errlen)
{
	return load_public(path, "CA file", "slot-ca-1", ca_pk, IDENT_PK_LEN,
	    "slot-keygen ca makes it", err, errlen);
}

int
ident_from_parts(const uint8_t seed[IDENT_SEED_LEN],
    const uint8_t cert_raw[IDENT_CERT_LEN], const uint8_t ca_pk[IDENT_PK_LEN],
    unsigned role_mask, uint64_t now, struct ident *out, char *err,
    size_t errlen)
{
	uint8_t pk[IDENT_PK_LEN];

	memset(out, 0, sizeof(*out));
	if (ident_cert_verify(cert_raw, ca_pk, role_mask, now, NULL, &out->cert,
	    err, errlen) == -1)
		goto fail;
	crypto_sign_seed_keypair(pk, out->sk, seed);
	if (sodium_memcmp(pk, out->cert.pk, IDENT_PK_LEN) != 0) {
		errbuf_set(err, errlen, "certificate '%s' is for another key",
		    out->cert.name);
		goto fail;
	}
	if (crypto_sign_ed25519_sk_to_curve25519(out->xsk, out->sk) != 0) {
		errbuf_set(err, errlen, "key conversion failed");
		goto fail;
	}
	memcpy(out->ca_pk, ca_pk, IDENT_PK_LEN);
	return 0;
fail:
	ident_wipe(out);
	return -1;
}

int
ident_load(const char *key_path, const char *cert_path, const char *ca_path,
    unsigned role_mask, struct ident *out, char *err, size_t errlen)
{
	uint8_t seed[IDENT_SEED_LEN], raw[IDENT_CERT_LEN], ca[IDENT_PK_LEN];
	char why[256];
	int ret = -1;

	if (ident_ca_load(ca_path, ca, err, errlen) == -1 ||
	    ident_cert_load(cert_path, raw, err, errlen) == -1 ||
	    ident_seed_load(key_path, seed, err, errlen) == -1)
		goto done;
	if (ident_from_parts(seed, raw, ca, role_mask, (uint64_t)time(NULL), out,
	    why, sizeof(why)) == -1) {
		errbuf_set(err, errlen, "%s: %s", cert_path, why);
		goto done;
	}
	ret = 0;
done:
	sodium_memzero(seed, sizeof(seed));
	return ret;
}

void
ident_wipe(struct ident *id)
{
	sodium_memzero(id, sizeof(*id));
}

int
ident_pair_key(const struct ident *self, const uint8_t peer_pk[IDENT_PK_LEN],
    struct auth_key *out)
{
	uint8_t xpk[32], shared[32];
	const uint8_t *lo = self->cert.pk, *hi = peer_pk;
	crypto_generichash_state st;

	if (crypto_sign_ed25519_pk_to_curve25519(xpk, peer_pk) != 0)
		return -1;
	if (crypto_scalarmult(shared, self->xsk, xpk) != 0)
		return -1;
	/* Both public keys, in a fixed order, so the key is the same on both
	 * sides and belongs to this pair only. */
	if (memcmp(lo, hi, IDENT_PK_LEN) > 0) {
		lo = peer_pk;
		hi = self->cert.pk;
	}
	crypto_generichash_init(&st, NULL, 0, AUTH_KEY_LEN);
	crypto_generichash_update(&st, (const uint8_t *)PAIR_CTX, sizeof(PAIR_CTX));
	crypto_generichash_update(&st, shared, sizeof(shared));
	crypto_generichash_update(&st, lo, IDENT_PK_LEN);
	crypto_generichash_update(&st, hi, IDENT_PK_LEN);
	crypto_generichash_final(&st, out->k, AUTH_KEY_LEN);
	sodium_memzero(shared, sizeof(shared));
	return 0;
}

void
ident_sign(const struct ident *self, const char *ctx, const void *msg,
    size_t len, uint8_t sig[IDENT_SIG_LEN])
{
	if (sign_ctx(self->sk, ctx, msg, len, sig) == -1)
		memset(sig, 0, IDENT_SIG_LEN);	/* verifies nowhere */
}

bool
ident_verify(const uint8_t pk[IDENT_PK_LEN], const char *ctx, const void *msg,
    size_t len, const uint8_t sig[IDENT_SIG_LEN])
{
	return verify_ctx(pk, ctx, msg, len, sig);
}

int
ident_revoked_parse(const char *text, size_t len, struct ident_revoked *out,
    char *err, size_t errlen)
{
	size_t i = 0, start, end, cap = 0, n = 0, line = 0;
	uint64_t *v = NULL, *nv, s;
	uint8_t b[8];
	char hex[17];

	memset(out, 0, sizeof(*out));
	while (i < len) {
		start = i;
		while (i < len && text[i] != '\n')
			i++;
		end = i;
		if (i < len)
			i++;
		line++;
		for (size_t k = start; k < end; k++)
			if (text[k] == '#') {
				end = k;
				break;
			}
		while (start < end && isspace((unsigned char)text[start]))
			start++;
		while (end > start && isspace((unsigned char)text[end - 1]))
			end--;
		if (start == end)
			continue;
		/* Either case; without hex_end, hex2bin fails short of all 16. */
		if (end - start != 16 ||
		    sodium_hex2bin(b, sizeof(b), text + start, 16, NULL, NULL, NULL) != 0)
			goto bad;
		s = get64(b);
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			if ((nv = realloc(v, cap * sizeof(*v))) == NULL) {
				errbuf_set(err, errlen, "out of memory");
				free(v);
				return -1;
			}
			v = nv;
		}
		v[n++] = s;
	}
	if (n > 0)
		qsort(v, n, sizeof(*v), cmp_u64);
	out->serial = v;
	out->n = n;
	return 0;
bad:
	snprintf(hex, sizeof(hex), "%.*s", (int)(end - start < 16 ? end - start : 16),
	    text + start);
	errbuf_set(err, errlen, "line %zu: '%s...' is not a serial (16 hex "
	    "digits)", line, hex);
	free(v);
	return -1;
}

int
ident_revoked_load(const char *path, struct ident_revoked *out, char *err,
    size_t errlen)
{
	char *buf, why[160];
	FILE *f;
	size_t len;
	int ret;

	if ((f = fopen(path, "re")) == NULL) {
		errbuf_set(err, errlen, "revocation list %s: %s", path,
		    strerror(errno));
		return -1;
	}
	if ((buf = malloc(REVOKED_FILE_MAX)) == NULL) {
		fclose(f);
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	len = fread(buf, 1, REVOKED_FILE_MAX, f);
	if (ferror(f) || len == REVOKED_FILE_MAX) {
		errbuf_set(err, errlen, "revocation list %s: %s", path,
		    ferror(f) ? "read error" : "larger than 1 MiB");
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	ret = ident_revoked_parse(buf, len, out, why, sizeof(why));
	if (ret == -1)
		errbuf_set(err, errlen, "revocation list %s: %s", path, why);
	free(buf);
	return ret;
}

bool
ident_revoked_has(const struct ident_revoked *r, uint64_t serial)
{
	/* bsearch wants a non-null base even for no elements. */
	return r->n > 0 && bsearch(&serial, r->serial, r->n, sizeof(*r->serial),
	    cmp_u64) != NULL;
}

bool
ident_revoked_equal(const struct ident_revoked *a, const struct ident_revoked *b)
{
	return a->n == b->n && (a->n == 0 ||
	    memcmp(a->serial, b->serial, a->n * sizeof(*a->serial)) == 0);
}

int
ident_revoked_copy(const struct ident_revoked *from, struct ident_revoked *to)
{
	memset(to, 0, sizeof(*to));
	if (from->n == 0)
		return 0;
	if ((to->serial = malloc(from->n * sizeof(*to->serial))) == NULL)
		return -1;
	memcpy(to->serial, from->serial, from->n * sizeof(*to->serial));
	to->n = from->n;
	return 0;
}

void
ident_revoked_free(struct ident_revoked *r)
{
	free(r->serial);
	r->serial = NULL;
	r->n = 0;
}

void
ident_serial_hex(uint64_t serial, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)serial);
}
