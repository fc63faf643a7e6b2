/* Destination policy of the relay (src/relay/policy.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "../../src/relay/policy.h"

static struct endpoint
ep(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static void
verdict(const struct policy *p, const char *dst, enum policy_verdict want)
{
	struct endpoint e = ep(dst);

	if (policy_check(p, &e) != want)
		fail_msg("%s: verdict %d, want %d", dst, policy_check(p, &e), want);
}

static void
test_default_refuses_special(void **state)
{
	struct policy p;
	(void)state;

	policy_init(&p);
	verdict(&p, "8.8.8.8:443", POLICY_OK);
	verdict(&p, "[2001:4860::1]:80", POLICY_OK);
	verdict(&p, "127.0.0.1:80", POLICY_ADDR);
	verdict(&p, "10.1.2.3:80", POLICY_ADDR);
	verdict(&p, "172.16.0.1:80", POLICY_ADDR);
	verdict(&p, "192.168.1.1:80", POLICY_ADDR);
	verdict(&p, "169.254.169.254:80", POLICY_ADDR);
	verdict(&p, "224.0.0.1:80", POLICY_ADDR);
	verdict(&p, "0.0.0.0:80", POLICY_ADDR);
	verdict(&p, "255.255.255.255:80", POLICY_ADDR);
	verdict(&p, "[::1]:80", POLICY_ADDR);
	verdict(&p, "[fe80::1]:80", POLICY_ADDR);
	verdict(&p, "[fd00::1]:80", POLICY_ADDR);
	verdict(&p, "[::ffff:127.0.0.1]:80", POLICY_ADDR);
	policy_free(&p);
}

/* RFC 6890's special-purpose registry and its updates: every prefix that
 * embeds an IPv4 address or is not globally reachable, refused by default;
 * their global neighbours relayed. */
static void
test_special_purpose_registry(void **state)
{
	static const char *const refused[] = {
		"[::]:80", "[::1]:80", "[::10.0.0.1]:80", "[::8.8.8.8]:80",	/* ::/96 */
		"[64:ff9b::10.0.0.1]:80", "[64:ff9b::808:808]:80",		/* NAT64 */
		"[64:ff9b:1::1]:80",						/* local NAT64 */
		"[2002:a00:1::1]:80", "[2002:808:808::1]:80",			/* 6to4 */
		"[2001::1]:80", "[2001:0:4136:e378::1]:80",			/* Teredo */
		"[100::1]:80",							/* discard */
		"[2001:2::1]:80",						/* benchmarking */
		"[2001:10::1]:80", "[2001:20::1]:80",				/* ORCHID */
		"[2001:db8::1]:80", "[3fff::1]:80", "[3fff:fff::1]:80",	/* documentation */
		"[5f00::1]:80",							/* SRv6 SIDs */
		"[fec0::1]:80", "[feff::1]:80",					/* site-local */
		"[fc00::1]:80", "[fe80::1]:80", "[ff02::1]:80",
		"192.0.0.1:80", "192.0.0.170:80",				/* IETF assignments */
		"192.88.99.1:80",						/* 6to4 anycast */
		"198.18.0.1:80", "198.19.255.255:80", "240.0.0.1:80",
		"192.0.2.1:80", "198.51.100.1:80", "203.0.113.1:80",
		"100.64.0.1:80",
	};
	static const char *const relayed[] = {
		"[2001:4860::8888]:80", "[2003::1]:80", "[2001:200::1]:80",
		"[64:ff9a::1]:80", "[64:ff9b:2::1]:80", "[1::1]:80", "[3ffe::1]:80",
		"[4000::1]:80", "[5f01::1]:80", "[fe00::1]:80", "[2001:30::1]:80",
		"[2001:3::1]:80",					/* AMT: global */
		"192.0.1.1:80", "192.88.98.1:80", "192.88.100.1:80", "198.20.0.1:80",
		"8.8.8.8:80", "1.1.1.1:443",
	};
	struct policy p;
	(void)state;

	policy_init(&p);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		verdict(&p, refused[i], POLICY_ADDR);
	for (size_t i = 0; i < sizeof(relayed) / sizeof(relayed[0]); i++)
		verdict(&p, relayed[i], POLICY_OK);
	policy_free(&p);
}

/* The address a relay is reached at behind 1:1 NAT is its own, although no
 * interface has it: never relayed to, whatever allow says. */
static void
test_public_address_is_self(void **state)
{
	struct policy p;
	char err[128];
	struct addr a;
	(void)state;

	policy_init(&p);
	verdict(&p, "198.51.99.7:80", POLICY_OK);
	assert_int_equal(cidr_list_parse("198.51.99.7, 2a00:1450::/64", &p.public, err,
	    sizeof(err)), 0);
	assert_int_equal(cidr_list_parse("0.0.0.0/0, ::/0", &p.allow, err, sizeof(err)), 0);
	verdict(&p, "198.51.99.7:80", POLICY_ADDR);
	verdict(&p, "198.51.99.7:443", POLICY_ADDR);
	verdict(&p, "198.51.99.8:80", POLICY_OK);
	verdict(&p, "[2a00:1450::1]:80", POLICY_ADDR);
	verdict(&p, "[2a00:1450:0:1::1]:80", POLICY_OK);
	assert_int_equal(addr_parse("198.51.99.7", &a), 0);
	assert_true(policy_is_self(&p, &a));
	policy_free(&p);
}

static void
test_allow_overrides_special_but_not_multicast(void **state)
{
	struct policy p;
	char err[128];
	(void)state;

	policy_init(&p);
	assert_int_equal(cidr_list_parse("10.0.0.0/8, 224.0.0.0/4", &p.allow, err, sizeof(err)), 0);
	verdict(&p, "10.1.2.3:80", POLICY_OK);
	verdict(&p, "192.168.1.1:80", POLICY_ADDR);
	verdict(&p, "224.0.0.1:80", POLICY_ADDR);
	policy_free(&p);
}

static void
test_deny_wins(void **state)
{
	struct policy p;
	char err[128];
	(void)state;

	policy_init(&p);
	assert_int_equal(cidr_list_parse("10.0.0.0/8", &p.allow, err, sizeof(err)), 0);
	assert_int_equal(cidr_list_parse("10.9.0.0/16 8.8.8.8", &p.deny, err, sizeof(err)), 0);
	verdict(&p, "10.1.0.1:80", POLICY_OK);
	verdict(&p, "10.9.0.1:80", POLICY_ADDR);
	verdict(&p, "8.8.8.8:53", POLICY_ADDR);
	verdict(&p, "8.8.4.4:53", POLICY_OK);
	policy_free(&p);
}

static void
test_self_always_refused(void **state)
{
	struct policy p;
	char err[128];
	(void)state;

	policy_init(&p);
	assert_int_equal(cidr_list_parse("0.0.0.0/0", &p.allow, err, sizeof(err)), 0);
	p.self = calloc(1, sizeof(*p.self));
	assert_non_null(p.self);
	assert_int_equal(addr_parse("198.51.100.7", &p.self[0]), 0);
	p.nself = 1;
	verdict(&p, "198.51.100.7:80", POLICY_ADDR);
	verdict(&p, "198.51.100.8:80", POLICY_OK);
	policy_free(&p);
}

static void
test_load_self_includes_loopback(void **state)
{
	struct policy p;
	(void)state;

	policy_init(&p);
	assert_int_equal(policy_load_self(&p), 0);
	assert_true(p.nself >= 1);
	/* lo is up in every namespace the tests run in. */
	verdict(&p, "127.0.0.1:80", POLICY_ADDR);
	policy_free(&p);
}

static void
test_ports(void **state)
{
	struct policy p;
	char err[128];
	(void)state;

	policy_init(&p);
	verdict(&p, "8.8.8.8:1", POLICY_OK);
	verdict(&p, "8.8.8.8:65535", POLICY_OK);
	assert_int_equal(portset_parse("80,443,8000-8099", &p.ports, err, sizeof(err)), 0);
	verdict(&p, "8.8.8.8:80", POLICY_OK);
	verdict(&p, "8.8.8.8:8050", POLICY_OK);
	verdict(&p, "8.8.8.8:22", POLICY_PORT);
	verdict(&p, "8.8.8.8:8100", POLICY_PORT);
	/* Address refusal is reported before the port. */
	verdict(&p, "10.0.0.1:22", POLICY_ADDR);
	policy_free(&p);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_refuses_special),
		cmocka_unit_test(test_special_purpose_registry),
		cmocka_unit_test(test_public_address_is_self),
		cmocka_unit_test(test_allow_overrides_special_but_not_multicast),
		cmocka_unit_test(test_deny_wins),
		cmocka_unit_test(test_self_always_refused),
		cmocka_unit_test(test_load_self_includes_loopback),
		cmocka_unit_test(test_ports),
	};
	return cmocka_run_group_tests_name("policy", tests, NULL, NULL);
}
