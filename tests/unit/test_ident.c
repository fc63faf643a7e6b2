/* Unit tests for src/core/ident.c: certificates, key files, pair keys,
 * signatures and revocation lists. */

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
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/ident.h"

#define NOW 1800000000ull
#define YEAR (365ull * 86400)

static char tmpdir[64];
static uint8_t ca_seed[IDENT_SEED_LEN], ca_pk[IDENT_PK_LEN];

static int
group_setup(void **state)
{
	(void)state;
	if (auth_init() != 0)
		return -1;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_ident.XXXXXX");
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	ident_keygen(ca_seed, ca_pk);
	return 0;
}

static int
group_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A host with a fresh key and a certificate for role. */
static void
make_host(uint8_t role, const char *name, uint64_t serial, struct ident *id,
    uint8_t seed[IDENT_SEED_LEN])
{
	uint8_t pk[IDENT_PK_LEN], raw[IDENT_CERT_LEN];
	char err[256];

	ident_keygen(seed, pk);
	assert_int_equal(ident_cert_issue(ca_seed, role, name, serial, NOW - 10,
	    NOW + YEAR, pk, raw, err, sizeof(err)), 0);
	if (ident_from_parts(seed, raw, ca_pk, IDENT_MASK(role), NOW, id, err,
	    sizeof(err)) != 0)
		fail_msg("%s", err);
}

static void
test_cert_roundtrip(void **state)
{
	uint8_t seed[IDENT_SEED_LEN];
	struct ident id;
	struct ident_cert c;
	char err[256];

	(void)state;
	make_host(IDENT_ROLE_RELAY, "relay-1.example", 0x0123456789abcdefull, &id,
	    seed);
	assert_int_equal(ident_cert_verify(id.cert.raw, ca_pk,
	    IDENT_MASK(IDENT_ROLE_RELAY), NOW, NULL, &c, err, sizeof(err)), 0);
	assert_int_equal(c.role, IDENT_ROLE_RELAY);
	assert_string_equal(c.name, "relay-1.example");
	assert_true(c.serial == 0x0123456789abcdefull);
	assert_true(c.not_before == NOW - 10 && c.not_after == NOW + YEAR);
	assert_memory_equal(c.pk, id.cert.pk, IDENT_PK_LEN);
	assert_memory_equal(id.cert.raw, "SLC1\x02\0\0\0\x01\x23\x45\x67", 12);
	ident_wipe(&id);
}

static void
test_cert_rejects(void **state)
{
	uint8_t seed[IDENT_SEED_LEN], raw[IDENT_CERT_LEN], other_seed[32], other_pk[32];
	struct ident id;
	struct ident_cert c;
	struct ident_revoked rev;
	char err[256];
	size_t i;

	(void)state;
	make_host(IDENT_ROLE_CLIENT, "laptop", 42, &id, seed);

	/* A client's certificate is no relay's. */
	assert_int_equal(ident_cert_verify(id.cert.raw, ca_pk,
	    IDENT_MASK(IDENT_ROLE_RELAY), NOW, NULL, &c, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "is a client's, not allowed here"));

	/* Time. */
	assert_int_equal(ident_cert_verify(id.cert.raw, ca_pk, IDENT_ANY_ROLE,
	    NOW - 11, NULL, &c, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not valid yet"));
	assert_int_equal(ident_cert_verify(id.cert.raw, ca_pk, IDENT_ANY_ROLE,
	    NOW + YEAR, NULL, &c, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "expired"));

	/* Another CA. */
	ident_keygen(other_seed, other_pk);
	assert_int_equal(ident_cert_verify(id.cert.raw, other_pk, IDENT_ANY_ROLE,
	    NOW, NULL, &c, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not signed by this deployment's CA"));

	/* Every single flipped bit of the signed part or the signature. */
	for (i = 0; i < IDENT_CERT_LEN * 8; i += 7) {
		memcpy(raw, id.cert.raw, sizeof(raw));
		raw[i / 8] ^= (uint8_t)(1u << (i % 8));
		if (ident_cert_verify(raw, ca_pk, IDENT_ANY_ROLE, NOW, NULL, &c,
		    err, sizeof(err)) == 0)
			fail_msg("bit %zu flipped still verifies", i);
	}

	/* Revoked. */
	assert_int_equal(ident_revoked_parse("# list\n000000000000002a\n"
	    "00000000000000FF  # old laptop\n\n", 47, &rev, err, sizeof(err)), 0);
	assert_int_equal((int)rev.n, 2);
	assert_int_equal(ident_cert_verify(id.cert.raw, ca_pk, IDENT_ANY_ROLE,
	    NOW, &rev, &c, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "(serial 000000000000002a) is revoked"));
	ident_revoked_free(&rev);

	/* A certificate for another key. */
	ident_keygen(other_seed, other_pk);
	memcpy(raw, id.cert.raw, sizeof(raw));
	assert_int_equal(ident_from_parts(other_seed, raw, ca_pk,
	    IDENT_ANY_ROLE, NOW, &id, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "is for another key"));

	/* Issuing: bad names, roles, validity. */
	assert_int_equal(ident_cert_issue(ca_seed, IDENT_ROLE_RELAY, "a b", 1, 0, 1,
	    other_pk, raw, err, sizeof(err)), -1);
	assert_int_equal(ident_cert_issue(ca_seed, IDENT_ROLE_RELAY,
	    "123456789012345678901234567890123", 1, 0, 1, other_pk, raw, err,
	    sizeof(err)), -1);
	assert_int_equal(ident_cert_issue(ca_seed, 9, "x", 1, 0, 1, other_pk, raw,
	    err, sizeof(err)), -1);
	assert_int_equal(ident_cert_issue(ca_seed, IDENT_ROLE_RELAY, "x", 1, 5, 5,
	    other_pk, raw, err, sizeof(err)), -1);
}

static void
test_pair_key(void **state)
{
	uint8_t sa[32], sb[32], sc[32], bad[IDENT_PK_LEN];
	struct ident a, b, c;
	struct auth_key ab, ba, ac, cb;

	(void)state;
	make_host(IDENT_ROLE_CLIENT, "a", 1, &a, sa);
	make_host(IDENT_ROLE_RELAY, "b", 2, &b, sb);
	make_host(IDENT_ROLE_RELAY, "c", 3, &c, sc);
	assert_int_equal(ident_pair_key(&a, b.cert.pk, &ab), 0);
	assert_int_equal(ident_pair_key(&b, a.cert.pk, &ba), 0);
	assert_memory_equal(ab.k, ba.k, AUTH_KEY_LEN);
	/* Another recipient, another key: a message for b is nothing to c. */
	assert_int_equal(ident_pair_key(&a, c.cert.pk, &ac), 0);
	assert_int_equal(ident_pair_key(&c, b.cert.pk, &cb), 0);
	assert_memory_not_equal(ab.k, ac.k, AUTH_KEY_LEN);
	assert_memory_not_equal(ab.k, cb.k, AUTH_KEY_LEN);
	/* A point that is no Ed25519 key, and the identity point (small
	 * order: a zero shared secret). */
	memset(bad, 0xff, sizeof(bad));
	assert_int_equal(ident_pair_key(&a, bad, &ab), -1);
	memset(bad, 0, sizeof(bad));
	bad[0] = 1;
	assert_int_equal(ident_pair_key(&a, bad, &ab), -1);
}

static void
test_sign(void **state)
{
	uint8_t s[32], sig[IDENT_SIG_LEN];
	struct ident a;
	const char msg[] = "slot.list\n1\n";

	(void)state;
	make_host(IDENT_ROLE_DIRECTORY, "dir", 7, &a, s);
	ident_sign(&a, "slot-list/1", msg, strlen(msg), sig);
	assert_true(ident_verify(a.cert.pk, "slot-list/1", msg, strlen(msg), sig));
	/* Another context or message does not verify. */
	assert_false(ident_verify(a.cert.pk, "slot-cert/1", msg, strlen(msg), sig));
	assert_false(ident_verify(a.cert.pk, "slot-list/1", msg, strlen(msg) - 1,
	    sig));
	ident_sign(&a, "x", "", 0, sig);
	assert_true(ident_verify(a.cert.pk, "x", "", 0, sig));
}

static const char *
write_tmp(const char *name, const char *text, mode_t mode)
{
	static char path[128];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(fchmod(fd, mode), 0);
	close(fd);
	return path;
}

static void
test_files(void **state)
{
	uint8_t seed[32], raw[IDENT_CERT_LEN], ca[32], got_seed[32];
	char text[1024], hex[2 * IDENT_CERT_LEN + 1], err[256];
	char kp[128], cp[128], ap[128];
	struct ident id, loaded;

	(void)state;
	/* Certificates for now: ident_load checks against the clock. */
	{
		uint8_t pk[32];
		uint64_t now = (uint64_t)time(NULL);

		ident_keygen(seed, pk);
		assert_int_equal(ident_cert_issue(ca_seed, IDENT_ROLE_RELAY, "r",
		    9, now - 60, now + YEAR, pk, raw, err, sizeof(err)), 0);
		assert_int_equal(ident_from_parts(seed, raw, ca_pk,
		    IDENT_MASK(IDENT_ROLE_RELAY), now, &id, err, sizeof(err)), 0);
	}
	sodium_bin2hex(hex, sizeof(hex), seed, 32);
	snprintf(text, sizeof(text), "# comment\nslot-key-1 %s\n", hex);
	snprintf(kp, sizeof(kp), "%s", write_tmp("host.key", text, 0600));
	sodium_bin2hex(hex, sizeof(hex), raw, IDENT_CERT_LEN);
	snprintf(text, sizeof(text), "slot-cert-1 %s\n", hex);
	snprintf(cp, sizeof(cp), "%s", write_tmp("host.cert", text, 0644));
	sodium_bin2hex(hex, sizeof(hex), ca_pk, 32);
	snprintf(text, sizeof(text), "\n  slot-ca-1 %s  \n# end\n", hex);
	snprintf(ap, sizeof(ap), "%s", write_tmp("ca.pub", text, 0644));

	assert_int_equal(ident_seed_load(kp, got_seed, err, sizeof(err)), 0);
	assert_memory_equal(seed, got_seed, 32);
	assert_int_equal(ident_ca_load(ap, ca, err, sizeof(err)), 0);
	assert_memory_equal(ca, ca_pk, 32);
	if (ident_load(kp, cp, ap, IDENT_MASK(IDENT_ROLE_RELAY), &loaded, err,
	    sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_memory_equal(loaded.sk, id.sk, IDENT_SK_LEN);
	/* The wrong role for this daemon. */
	assert_int_equal(ident_load(kp, cp, ap, IDENT_MASK(IDENT_ROLE_CLIENT),
	    &loaded, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "is a relay's, not allowed here"));

	/* A key readable by others, a key file with a shared key in it, a
	 * certificate file with two certificates, a CA file with a key tag. */
	chmod(kp, 0644);
	assert_int_equal(ident_seed_load(kp, got_seed, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "readable by group or others"));
	write_tmp("shared.key",
	    "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n",
	    0600);
	snprintf(kp, sizeof(kp), "%s/shared.key", tmpdir);
	assert_int_equal(ident_seed_load(kp, got_seed, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "must hold one line 'slot-key-1'"));
	snprintf(text, sizeof(text), "slot-cert-1 %s\nslot-cert-1 %s\n", hex, hex);
	assert_int_equal(ident_parse_text(text, strlen(text), "slot-cert-1", raw,
	    IDENT_CERT_LEN), -1);
	snprintf(text, sizeof(text), "slot-key-1 %s\n", hex);
	assert_int_equal(ident_parse_text(text, strlen(text), "slot-ca-1", ca, 32),
	    -1);
	/* Odd lengths and non-hex. */
	assert_int_equal(ident_parse_text("slot-ca-1 00", 12, "slot-ca-1", ca, 32),
	    -1);
	assert_int_equal(ident_parse_text("slot-ca-1", 9, "slot-ca-1", ca, 32), -1);
	assert_int_equal(ident_parse_text("", 0, "slot-ca-1", ca, 32), -1);
	ident_wipe(&id);
	ident_wipe(&loaded);
}

static void
test_revoked(void **state)
{
	struct ident_revoked r;
	char err[256];

	(void)state;
	assert_int_equal(ident_revoked_parse("", 0, &r, err, sizeof(err)), 0);
	assert_int_equal((int)r.n, 0);
	assert_false(ident_revoked_has(&r, 0));
	ident_revoked_free(&r);
	assert_int_equal(ident_revoked_parse("ffffffffffffffff\n0000000000000001\n"
	    "8000000000000000", 50, &r, err, sizeof(err)), 0);
	assert_int_equal((int)r.n, 3);
	assert_true(ident_revoked_has(&r, 1));
	assert_true(ident_revoked_has(&r, UINT64_MAX));
	assert_true(ident_revoked_has(&r, 1ull << 63));
	assert_false(ident_revoked_has(&r, 2));
	{
		struct ident_revoked c, none = { NULL, 0 };

		assert_int_equal(ident_revoked_copy(&r, &c), 0);
		assert_true(c.serial != r.serial);
		assert_true(ident_revoked_equal(&r, &c));
		c.serial[0]++;
		assert_false(ident_revoked_equal(&r, &c));
		assert_false(ident_revoked_equal(&r, &none));
		ident_revoked_free(&c);
		assert_int_equal(ident_revoked_copy(&none, &c), 0);
		assert_true(c.n == 0 && c.serial == NULL);
		assert_true(ident_revoked_equal(&none, &c));
	}
	ident_revoked_free(&r);
	assert_int_equal(ident_revoked_parse("0000000000000001\n123\n", 21, &r,
	    err, sizeof(err)), -1);
	assert_non_null(strstr(err, "line 2"));
	assert_int_equal(ident_revoked_parse("000000000000000g\n", 17, &r, err,
	    sizeof(err)), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cert_roundtrip),
		cmocka_unit_test(test_cert_rejects),
		cmocka_unit_test(test_pair_key),
		cmocka_unit_test(test_sign),
		cmocka_unit_test(test_files),
		cmocka_unit_test(test_revoked),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
