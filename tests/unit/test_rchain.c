/* The relay's checks of a chain request (src/relay/chain.c, chain_check):
 * chains allowed, each hop's data address its control address, no hop that
 * is this relay, no address twice, no address the destination policy
 * refuses, and with [chain] next_hops = listed (the default) each hop a
 * relay of the directory's listing at its listed data port (nexthops.c).
 * The chain itself, end to end, is tests/integration/test_chain.py's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/relay/chain.h"
#include "../../src/relay/nexthops.h"

/* relayd.c's, which pipe.c calls: not linked into the tests. */
void
relay_pipe_gone(struct relay *r)
{
	(void)r;
}

static struct relay R;
static struct addr self_addrs[2];

static struct endpoint
ep(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static struct rlink_hop
hop(const char *ctl, const char *data)
{
	struct rlink_hop h = { .control = ep(ctl), .data = ep(data) };

	return h;
}

static int
setup(void **state)
{
	(void)state;
	memset(&R, 0, sizeof(R));
	rconf_defaults(&R.conf);
	R.conf.control_listen = ep("0.0.0.0:7600");
	/* This relay is 192.0.2.1 and 2001:db8::1 (its interfaces). */
	self_addrs[0] = ep("192.0.2.1:1").addr;
	self_addrs[1] = ep("[2001:db8::1]:1").addr;
	R.conf.policy.self = self_addrs;
	R.conf.policy.nself = 2;
	/* The documentation ranges stand for public relays here. */
	char err[128];
	assert_int_equal(cidr_list_parse("192.0.2.0/24,198.51.100.0/24,203.0.113.0/24,"
	    "2001:db8::/32", &R.conf.policy.allow, err, sizeof(err)), 0);
	/* The checks before the listing's: any relay of the CA. */
	R.conf.chain_any_hop = true;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	R.conf.policy.self = NULL;
	R.conf.policy.nself = 0;
	rconf_free(&R.conf);
	nexthops_free(R.nexthops);
	R.nexthops = NULL;
	return 0;
}

static void
test_valid_chains(void **state)
{
	struct chain_spec s = { .nhops = 1 };
	(void)state;

	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	assert_int_equal(chain_check(&R, &s), 0);
	/* the data port is the relay's own business */
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:9000");
	assert_int_equal(chain_check(&R, &s), 0);
	s.nhops = 2;
	s.hops[1] = hop("[2001:db8::30]:7600", "[2001:db8::30]:7601");
	assert_int_equal(chain_check(&R, &s), 0);
	/* our own address on another port is another relay */
	s.hops[1] = hop("192.0.2.1:7700", "192.0.2.1:7701");
	assert_int_equal(chain_check(&R, &s), 0);
}

static void
test_refused_chains(void **state)
{
	struct chain_spec s = { .nhops = 1 };
	(void)state;

	/* data elsewhere than the host that proves to be a relay */
	s.hops[0] = hop("192.0.2.20:7600", "203.0.113.5:443");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.hops[0] = hop("192.0.2.20:7600", "[2001:db8::20]:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	/* this relay itself, either family, first or second hop */
	s.hops[0] = hop("192.0.2.1:7600", "192.0.2.1:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.hops[0] = hop("[2001:db8::1]:7600", "[2001:db8::1]:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.nhops = 2;
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	s.hops[1] = hop("192.0.2.1:7600", "192.0.2.1:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	/* the same relay twice (even on other ports) */
	s.hops[1] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.hops[1] = hop("192.0.2.20:7800", "192.0.2.20:7801");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	/* hop counts the format cannot carry */
	s.nhops = 0;
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.nhops = 3;
	assert_int_equal(chain_check(&R, &s), EINVAL);
	/* [chain] allow = no: refused before anything else */
	s.nhops = 1;
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	R.conf.chain_allow = false;
	assert_int_equal(chain_check(&R, &s), EPERM);
}

/* A next relay must be where a server could be: not loopback, private,
 * link-local (a cloud's metadata service) or denied, unless allowed. */
static void
test_policy_refused_hops(void **state)
{
	static const char *const refused[] = {
		"127.0.0.1:22", "10.1.2.3:6379", "169.254.169.254:80", "[::1]:7600",
		"[fe80::1]:7600", "224.0.0.1:7600", "0.0.0.0:7600", "198.51.100.66:7600",
	};
	struct chain_spec s = { .nhops = 1 };
	char err[128];
	(void)state;

	assert_int_equal(cidr_list_parse("198.51.100.64/28", &R.conf.policy.deny, err,
	    sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		s.nhops = 1;
		s.hops[0] = hop(refused[i], refused[i]);
		assert_int_equal(chain_check(&R, &s), EACCES);
		/* as the second hop too */
		s.nhops = 2;
		s.hops[1] = s.hops[0];
		s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
		assert_int_equal(chain_check(&R, &s), EACCES);
	}
	/* An allow entry lets a relay in a private network be chained to. */
	cidr_list_free(&R.conf.policy.allow);
	assert_int_equal(cidr_list_parse("10.0.0.0/8", &R.conf.policy.allow, err,
	    sizeof(err)), 0);
	s.nhops = 1;
	s.hops[0] = hop("10.1.2.3:7600", "10.1.2.3:7601");
	assert_int_equal(chain_check(&R, &s), 0);
}

/* [policy] public_address is this relay too (1:1 NAT). */
static void
test_public_address_is_self(void **state)
{
	struct chain_spec s = { .nhops = 1 };
	char err[128];
	(void)state;

	assert_int_equal(cidr_list_parse("198.51.100.9", &R.conf.policy.public, err,
	    sizeof(err)), 0);
	s.hops[0] = hop("198.51.100.9:7600", "198.51.100.9:7601");
	assert_int_equal(chain_check(&R, &s), EINVAL);
}

/* next_hops = listed: a hop must be a relay of the listing, at the data
 * port it registered; without a listing, no chain. */
static void
test_listed_hops(void **state)
{
	struct chain_spec s = { .nhops = 1 };
	const struct endpoint ctl[] = { ep("192.0.2.20:7600"), ep("[2001:db8::30]:7600"),
	    ep("192.0.2.1:7700"), ep("192.0.2.20:7700") };
	const uint16_t data[] = { 7601, 7601, 7701, 8000 };
	(void)state;

	R.conf.chain_any_hop = false;
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	/* no listing yet (or no directory) */
	assert_int_equal(chain_check(&R, &s), ENOENT);
	assert_non_null(R.nexthops = nexthops_new());
	assert_false(nexthops_have_listing(R.nexthops));
	assert_int_equal(chain_check(&R, &s), ENOENT);
	assert_int_equal(nexthops_set(R.nexthops, ctl, data, 4), 0);
	assert_true(nexthops_have_listing(R.nexthops));
	assert_int_equal(chain_check(&R, &s), 0);
	/* another port of a listed relay's host: its ssh, its stats... */
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:22");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	/* the data port of the host's other relay is not this one's */
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:8000");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.hops[0] = hop("192.0.2.20:7700", "192.0.2.20:8000");
	assert_int_equal(chain_check(&R, &s), 0);
	/* a relay of the CA the listing does not name */
	s.hops[0] = hop("192.0.2.21:7600", "192.0.2.21:7601");
	assert_int_equal(chain_check(&R, &s), ENOENT);
	/* both hops are checked */
	s.nhops = 2;
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	s.hops[1] = hop("[2001:db8::30]:7600", "[2001:db8::30]:7601");
	assert_int_equal(chain_check(&R, &s), 0);
	s.hops[1] = hop("[2001:db8::30]:7600", "[2001:db8::30]:7602");
	assert_int_equal(chain_check(&R, &s), EINVAL);
	s.hops[1] = hop("198.51.100.7:7600", "198.51.100.7:7601");
	assert_int_equal(chain_check(&R, &s), ENOENT);
	/* a new listing replaces the old one */
	assert_int_equal(nexthops_set(R.nexthops, ctl + 1, data + 1, 1), 0);
	s.nhops = 1;
	s.hops[0] = hop("192.0.2.20:7600", "192.0.2.20:7601");
	assert_int_equal(chain_check(&R, &s), ENOENT);
	/* next_hops = any: the old rule, any data port */
	R.conf.chain_any_hop = true;
	assert_int_equal(chain_check(&R, &s), 0);
}

/* A relay listed twice (two registrations) is taken at either data port. */
static void
test_listed_twice(void **state)
{
	struct nexthops *h = nexthops_new();
	struct endpoint ctl[6];
	uint16_t data[6];
	(void)state;

	assert_non_null(h);
	for (int i = 0; i < 6; i++) {
		ctl[i] = ep(i % 2 ? "192.0.2.20:7600" : "192.0.2.10:7600");
		ctl[i].addr.bytes[3] = (uint8_t)(i < 4 ? (i % 2 ? 20 : 10) : 30 + i);
		data[i] = (uint16_t)(7601 + i);
	}
	assert_int_equal(nexthops_set(h, ctl, data, 6), 0);
	/* 192.0.2.20:7600 at 7602 and 7604, 192.0.2.10:7600 at 7601 and 7603 */
	assert_int_equal(nexthops_check(h, &ctl[1], 7602), NEXTHOP_LISTED);
	assert_int_equal(nexthops_check(h, &ctl[1], 7604), NEXTHOP_LISTED);
	assert_int_equal(nexthops_check(h, &ctl[1], 7601), NEXTHOP_OTHER_PORT);
	assert_int_equal(nexthops_check(h, &ctl[0], 7603), NEXTHOP_LISTED);
	assert_int_equal(nexthops_check(h, &ctl[4], 7605), NEXTHOP_LISTED);
	assert_int_equal(nexthops_check(h, &ctl[5], 7605), NEXTHOP_OTHER_PORT);
	/* an empty listing is a listing: nothing is listed */
	assert_int_equal(nexthops_set(h, NULL, NULL, 0), 0);
	assert_true(nexthops_have_listing(h));
	assert_int_equal(nexthops_check(h, &ctl[1], 7602), NEXTHOP_UNLISTED);
	nexthops_free(h);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_valid_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_public_address_is_self, setup, teardown),
		cmocka_unit_test_setup_teardown(test_policy_refused_hops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_listed_hops, setup, teardown),
		cmocka_unit_test(test_listed_twice),
	};

	return cmocka_run_group_tests_name("chain", tests, NULL, NULL);
}
