/* Unit tests for src/core/dirproto.c: the canonical texts of slot-dird's
 * calls (shared-key MAC and identity signature) and of its signed listing,
 * with the worked examples of docs/directory.md; every field changed must
 * fail the check. */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/dirproto.h"
#include "slot/ident.h"

#define NOW 1800000000ull
#define TS "1700000000000000"
#define NONCE "0123456789abcdef"

/* The worked example's hosts: seeds are fixed bytes, so the signatures
 * (Ed25519 is deterministic) are too. */
static struct ident dir_id, relay_id;
static uint8_t ca_pk[IDENT_PK_LEN];

static void
seq(uint8_t *b, size_t n, uint8_t first)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(first + i);
}

static void
make(uint8_t role, const char *name, uint64_t serial, uint8_t first, struct ident *id)
{
	uint8_t ca_seed[IDENT_SEED_LEN], seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN];
	uint8_t raw[IDENT_CERT_LEN];
	char err[256];

	seq(ca_seed, sizeof(ca_seed), 0x80);
	ident_seed_pk(ca_seed, ca_pk);
	seq(seed, sizeof(seed), first);
	ident_seed_pk(seed, pk);
	assert_int_equal(ident_cert_issue(ca_seed, role, name, serial, 1700000000ull,
	    1900000000ull, pk, raw, err, sizeof(err)), 0);
	assert_int_equal(ident_from_parts(seed, raw, ca_pk, IDENT_MASK(role), NOW, id, err,
	    sizeof(err)), 0);
}

static int
group_setup(void **state)
{
	(void)state;
	if (auth_init() != 0)
		return -1;
	make(IDENT_ROLE_DIRECTORY, "dir1", 0x0102030405060708ull, 0x00, &dir_id);
	make(IDENT_ROLE_RELAY, "relay1", 0x1112131415161718ull, 0x20, &relay_id);
	return 0;
}

static void
hex(const uint8_t *b, size_t n, char *out)
{
	sodium_bin2hex(out, 2 * n + 1, b, n);
}

/* The shared-key example of docs/directory.md (unchanged since version 1). */
static void
test_mac_example(void **state)
{
	struct auth_key k;
	char mac[DIRP_MAC_HEX + 1];
	(void)state;

	seq(k.k, sizeof(k.k), 0);
	assert_int_equal(dirp_mac(&k, "slot.heartbeat", TS, NONCE, "192.0.2.1:7600", mac), 0);
	assert_string_equal(mac,
	    "9af83c61230ea3b7c32de536d9aa6da6fdad3312c7f34ed09687998c4c24bb5c");
	assert_int_equal(dirp_verify(&k, "slot.heartbeat", TS, NONCE, "192.0.2.1:7600", mac), 0);
	assert_int_equal(dirp_verify(&k, "slot.heartbeat", TS, NONCE, "192.0.2.1:7601", mac), -1);
	assert_int_equal(dirp_verify(&k, "slot.heartbeat", TS, NONCE, "192.0.2.1:7600", "00"), -1);
}

/* The identity example: relay1's signature over its heartbeat, checked
 * with its key; the text is the shared one with tag slot-dird/2. */
static void
test_sig_example(void **state)
{
	char sig[DIRP_SIG_HEX + 1], cert[DIRP_CERT_HEX + 1];
	const char *body = "192.0.2.1:7600";
	(void)state;

	assert_int_equal(dirp_sign(&relay_id, "slot.heartbeat", TS, NONCE, body, sig), 0);
	hex(relay_id.cert.raw, IDENT_CERT_LEN, cert);
	print_message("relay cert %s\nsig %s\n", cert, sig);
	assert_string_equal(sig,
	    "0479c04487490d5fc205162342159e76527539b402d0eb2187a8c4ca58940c66"
	    "3efdb07f7453931e8465c007ac0b9ab9407995c2611c8eb1f04d45050089ed0e");
	assert_int_equal(dirp_verify_sig(relay_id.cert.pk, "slot.heartbeat", TS, NONCE, body,
	    sig), 0);
}

/* Every part of the call's text counts: method, ts, nonce, body, the key,
 * any bit of the signature; and a MAC-mode text never verifies as a
 * signature (the tags differ). */
static void
test_sig_fields(void **state)
{
	char sig[DIRP_SIG_HEX + 1], bad[DIRP_SIG_HEX + 1];
	const uint8_t *pk = relay_id.cert.pk;
	const char *body = "192.0.2.1:7600\n7601";
	uint8_t raw[IDENT_SIG_LEN];
	(void)state;

	assert_int_equal(dirp_sign(&relay_id, "slot.register", TS, NONCE, body, sig), 0);
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, body, sig), 0);
	assert_int_equal(dirp_verify_sig(pk, "slot.heartbeat", TS, NONCE, body, sig), -1);
	assert_int_equal(dirp_verify_sig(pk, "slot.register", "1700000000000001", NONCE, body,
	    sig), -1);
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, "0123456789abcdee", body,
	    sig), -1);
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, "192.0.2.1:7600\n7602",
	    sig), -1);
	assert_int_equal(dirp_verify_sig(dir_id.cert.pk, "slot.register", TS, NONCE, body,
	    sig), -1);
	for (size_t bit = 0; bit < 8 * IDENT_SIG_LEN; bit += 37) {
		assert_int_equal(dirp_unhex(sig, raw, sizeof(raw)), 0);
		raw[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		hex(raw, sizeof(raw), bad);
		assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, body, bad), -1);
	}
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, body, NULL), -1);
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, body, "abcd"), -1);
	sig[5] = 'x';
	assert_int_equal(dirp_verify_sig(pk, "slot.register", TS, NONCE, body, sig), -1);
	/* Too large to sign: the text is bounded. */
	char *big = malloc(70000);
	assert_non_null(big);
	memset(big, 'a', 69999);
	big[69999] = '\0';
	assert_int_equal(dirp_sign(&relay_id, "slot.report", TS, NONCE, big, sig), -1);
	free(big);
}

static void
test_unhex(void **state)
{
	uint8_t b[2];
	(void)state;

	assert_int_equal(dirp_unhex("0aFf", b, 2), 0);
	assert_int_equal(b[0], 0x0a);
	assert_int_equal(b[1], 0xff);
	assert_int_equal(dirp_unhex("0aF", b, 2), -1);
	assert_int_equal(dirp_unhex("0aFf0", b, 2), -1);
	assert_int_equal(dirp_unhex("0g00", b, 2), -1);
	assert_int_equal(dirp_unhex(" aff", b, 2), -1);
}

/* The example listing of docs/directory.md. */
static const uint32_t ex_index[] = { 1 };
static const float ex_weight[] = { 2.0f };
static const uint8_t ex_rtt[] = { 0x0f, 0x00, 0x00, 0x00 };	/* 1.5 ms, 0 */
static const uint64_t ex_revoked[] = { 0x00000000000000ffull };

static void
example(struct dirp_listing *l, struct dirp_list_relay r[2])
{
	r[0] = (struct dirp_list_relay){ "192.0.2.1:7600", 7601, 0, relay_id.cert.raw };
	r[1] = (struct dirp_list_relay){ "[2001:db8::3]:7600", 7601, 1, NULL };
	*l = (struct dirp_listing){
		.nonce = NONCE, .version = "9f3c2a1b4d5e6f70-42", .changed = true,
		.relay = r, .nrelay = 2,
		.land_index = ex_index, .land_weight = ex_weight, .nland = 1,
		.land_rtt = ex_rtt, .land_rtt_len = sizeof(ex_rtt),
		.revoked = ex_revoked, .nrevoked = 1,
	};
}

static void
test_list_text(void **state)
{
	struct dirp_listing l;
	struct dirp_list_relay r[2];
	char cert[DIRP_CERT_HEX + 1], want[2048], sighex[DIRP_SIG_HEX + 1];
	uint8_t sig[IDENT_SIG_LEN];
	size_t len;
	char *t;
	(void)state;

	example(&l, r);
	hex(relay_id.cert.raw, IDENT_CERT_LEN, cert);
	snprintf(want, sizeof(want),
	    "slot-listing/1\n"
	    "nonce 0123456789abcdef\n"
	    "version 9f3c2a1b4d5e6f70-42\n"
	    "changed 1\n"
	    "relays 2\n"
	    "relay 192.0.2.1:7600 7601 0 %s\n"
	    "relay [2001:db8::3]:7600 7601 1 -\n"
	    "landmarks 1 "
	    "972b8373b897c65c4f631c6bdf2443d0d817a88f224b54d8e593fdcf32488d60\n"
	    "landmark 1 2\n"
	    "revoked 1\n"
	    "serial 00000000000000ff\n", cert);
	t = dirp_list_text(&l, &len);
	assert_non_null(t);
	print_message("%s", t);
	assert_string_equal(t, want);
	assert_int_equal(len, strlen(want));
	dirp_list_sign(&dir_id, t, len, sig);
	hex(sig, sizeof(sig), sighex);
	print_message("listing sig %s\n", sighex);
	assert_string_equal(sighex,
	    "d8fcd17d95c195bbea363f7fe718e9a2d35a6f297f5350e246bbcdcb78d3b293"
	    "68e5d1e1cc873cb81f2ad57797c9995a1037685d83baac6d9dc67f51677a670c");
	assert_true(dirp_list_verify(dir_id.cert.pk, t, len, sig));
	assert_false(dirp_list_verify(relay_id.cert.pk, t, len, sig));
	/* A call's signature context is not a listing's. */
	assert_false(ident_verify(dir_id.cert.pk, DIRP_CALL_CTX, t, len, sig));
	free(t);

	/* An empty listing: no relays, no landmarks, no revocations. */
	l = (struct dirp_listing){ .nonce = NONCE, .version = "v", .changed = false };
	t = dirp_list_text(&l, &len);
	assert_non_null(t);
	assert_string_equal(t, "slot-listing/1\nnonce 0123456789abcdef\nversion v\n"
	    "changed 0\nrelays 0\nlandmarks 0 "
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\nrevoked 0\n");
	free(t);
}

/* Signs the example, changes one field, and checks the signature fails. */
static void
test_list_fields(void **state)
{
	struct dirp_listing l, m;
	struct dirp_list_relay r[2], q[2];
	uint8_t sig[IDENT_SIG_LEN], cert2[IDENT_CERT_LEN], rtt2[sizeof(ex_rtt)];
	uint32_t idx2[] = { 0 };
	float w2[] = { 2.0001f };
	uint64_t rev2[] = { 0x00000000000000feull };
	size_t len, n;
	char *t;
	(void)state;

	example(&l, r);
	t = dirp_list_text(&l, &len);
	assert_non_null(t);
	dirp_list_sign(&dir_id, t, len, sig);
	free(t);
	memcpy(cert2, relay_id.cert.raw, sizeof(cert2));
	cert2[10] ^= 1;
	memcpy(rtt2, ex_rtt, sizeof(rtt2));
	rtt2[3] = 1;

	for (int k = 0; k < 15; k++) {
		m = l;
		memcpy(q, r, sizeof(q));
		m.relay = q;
		switch (k) {
		case 0: m.nonce = "0123456789abcdee"; break;
		case 1: m.version = "9f3c2a1b4d5e6f70-43"; break;
		case 2: m.changed = false; break;
		case 3: q[0].relay = "192.0.2.9:7600"; break;
		case 4: q[0].data_port = 7602; break;
		case 5: q[1].group = 0; break;
		case 6: q[0].cert = cert2; break;
		case 7: q[0].cert = NULL; break;
		case 8: m.nrelay = 1; break;
		case 9: m.land_index = idx2; break;
		case 10: m.land_weight = w2; break;
		case 11: m.land_rtt = rtt2; break;
		case 12: m.nland = 0; m.land_rtt_len = 0; break;
		case 13: m.revoked = rev2; break;
		case 14: m.nrevoked = 0; break;
		}
		t = dirp_list_text(&m, &n);
		assert_non_null(t);
		if (dirp_list_verify(dir_id.cert.pk, t, n, sig))
			fail_msg("change %d still verifies", k);
		free(t);
	}
	/* Strings that could make the text read two ways are refused. */
	m = l;
	m.version = "a b";
	assert_null(dirp_list_text(&m, &n));
	m = l;
	m.version = "";
	assert_null(dirp_list_text(&m, &n));
	m = l;
	memcpy(q, r, sizeof(q));
	m.relay = q;
	q[1].relay = "192.0.2.1:7600\nrelay";
	assert_null(dirp_list_text(&m, &n));
	assert_true(dirp_word_ok("[2001:db8::3]:7600"));
	assert_false(dirp_word_ok("caf\xc3\xa9"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mac_example),
		cmocka_unit_test(test_sig_example),
		cmocka_unit_test(test_sig_fields),
		cmocka_unit_test(test_unhex),
		cmocka_unit_test(test_list_text),
		cmocka_unit_test(test_list_fields),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
