/* The relay's peer set (src/relay/peers.c): a listing replaces it, each
 * other relay once, this relay left out, sorted for lookups; a listing of
 * many thousand relays is merged in O(n log n) (the event loop runs no pipe
 * meanwhile). Probing and reporting are tests/integration's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/relay/peers.h"
#include "../../src/relay/rconf.h"

/* relayd.c's, which pipe.c calls: not linked into the tests. */
void
relay_pipe_gone(struct relay *r)
{
	(void)r;
}

static struct relay R;

static struct endpoint
ep(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static int
setup(void **state)
{
	(void)state;
	memset(&R, 0, sizeof(R));
	rconf_defaults(&R.conf);
	R.loop = ev_loop_new(EVFLAG_AUTO);
	return R.loop ? 0 : -1;
}

static int
teardown(void **state)
{
	(void)state;
	ev_loop_destroy(R.loop);
	rconf_free(&R.conf);
	return 0;
}

/* Peer i's endpoint, formatted. */
static const char *
peer_str(struct peers *p, size_t i, char *b)
{
	struct endpoint e;
	uint32_t rtt;
	unsigned ns;

	peers_get(p, i, &e, &rtt, &ns);
	assert_int_equal(ns, 0);
	return ep_fmt(&e, b);
}

static void
test_each_once_self_out(void **state)
{
	struct endpoint self = ep("192.0.2.1:7600");
	struct endpoint eps[] = {
		ep("192.0.2.9:7600"), ep("192.0.2.1:7600"), ep("[2001:db8::5]:7600"),
		ep("192.0.2.3:7600"), ep("192.0.2.9:7600"), ep("192.0.2.3:7601"),
		ep("192.0.2.1:7600"),
	};
	struct peers *p = peers_start(&R);
	char b[EP_STRLEN];
	(void)state;

	peers_set(p, &self, eps, sizeof(eps) / sizeof(eps[0]));
	assert_int_equal(peers_count(p), 4);
	assert_int_equal(R.ctr.peers, 4);
	/* each other relay once, whatever the listing's order */
	assert_string_equal(peer_str(p, 0, b), "192.0.2.3:7600");
	assert_string_equal(peer_str(p, 1, b), "192.0.2.3:7601");
	assert_string_equal(peer_str(p, 2, b), "192.0.2.9:7600");
	assert_string_equal(peer_str(p, 3, b), "[2001:db8::5]:7600");
	/* a new listing replaces it */
	peers_set(p, &self, eps + 3, 2);
	assert_int_equal(peers_count(p), 2);
	assert_string_equal(peer_str(p, 0, b), "192.0.2.3:7600");
	assert_string_equal(peer_str(p, 1, b), "192.0.2.9:7600");
	peers_set(p, &self, NULL, 0);
	assert_int_equal(peers_count(p), 0);
	peers_stop(p);
}

/* 65,536 relays listed twice over in reverse order, then a listing of half
 * of them: every one counted once. (Quadratic merging took minutes here.) */
static void
test_large_listing(void **state)
{
	const size_t n = 65536;
	struct endpoint *eps = calloc(2 * n, sizeof(*eps));
	struct endpoint self = ep("203.0.113.1:7600");
	struct peers *p = peers_start(&R);
	char s[64], b[EP_STRLEN];
	(void)state;

	assert_non_null(eps);
	for (size_t i = 0; i < n; i++) {
		snprintf(s, sizeof(s), "10.%zu.%zu.%zu:7600", 1 + (i >> 16), (i >> 8) & 255,
		    i & 255);
		eps[2 * n - 1 - i] = eps[n - 1 - i] = ep(s);
	}
	peers_set(p, &self, eps, 2 * n);
	assert_int_equal(peers_count(p), n);
	assert_string_equal(peer_str(p, 0, b), "10.1.0.0:7600");
	assert_string_equal(peer_str(p, n - 1, b), "10.1.255.255:7600");
	peers_set(p, &self, eps, n / 2);
	assert_int_equal(peers_count(p), n / 2);
	peers_stop(p);
	free(eps);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_each_once_self_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_listing, setup, teardown),
	};

	return cmocka_run_group_tests_name("peers", tests, NULL, NULL);
}
