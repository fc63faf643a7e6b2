/* The relay's checks of a chain request (src/relay/chain.c, chain_check):
 * chains allowed, each hop's data address its control address, no hop that
 * is this relay, no address twice, no address the destination policy
 * refuses. The chain itself, end to end, is
 * tests/integration/test_chain.py's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/relay/chain.h"

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
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	R.conf.policy.self = NULL;
	R.conf.policy.nself = 0;
	rconf_free(&R.conf);
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_valid_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_public_address_is_self, setup, teardown),
		cmocka_unit_test_setup_teardown(test_policy_refused_hops, setup, teardown),
	};

	return cmocka_run_group_tests_name("chain", tests, NULL, NULL);
}
