/* Admission of the relay (src/relay/admit.c): connection caps per source and
 * in all, and per kind of message the rate before the replay cache. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/relay/admit.h"

#define W	30000000ULL			/* 30 s window */
#define T0	1700000000000000ULL		/* wall clock, us */
#define M0	5000000000ULL			/* monotonic clock, us */

static struct addr
ip(const char *s)
{
	struct addr a;

	assert_int_equal(addr_parse(s, &a), 0);
	return a;
}

static struct admit_conf
conf(void)
{
	struct admit_conf c = {
		.max_conns = 5,
		.max_per_source = 2,
		.rate = { [ADMIT_PROBE] = 10, [ADMIT_CONTROL] = 1, [ADMIT_RELAY] = 1 },
		.burst = { [ADMIT_PROBE] = 1000, [ADMIT_CONTROL] = 3, [ADMIT_RELAY] = 6 },
		.window_us = W,
	};
	return c;
}

static void
test_connection_caps(void **state)
{
	struct admit_conf c = conf();
	struct admit *a = admit_new(&c, 64, 64);
	struct addr x = ip("192.0.2.1"), y = ip("192.0.2.2"), z = ip("2001:db8::1");
	(void)state;

	assert_non_null(a);
	assert_int_equal(admit_conn_open(a, &x), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &x), ADMIT_CONN_OK);
	/* A third from x: its source is full, whatever the room in all. */
	assert_int_equal(admit_conn_open(a, &x), ADMIT_CONN_SOURCE);
	assert_int_equal(admit_conns_from(a, &x), 2);
	assert_int_equal(admit_conn_open(a, &y), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &y), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &z), ADMIT_CONN_OK);
	assert_int_equal(admit_conns(a), 5);
	/* The global cap, for a source with room of its own. */
	assert_int_equal(admit_conn_open(a, &z), ADMIT_CONN_GLOBAL);
	admit_conn_close(a, &x);
	assert_int_equal(admit_conns_from(a, &x), 1);
	assert_int_equal(admit_conn_open(a, &z), ADMIT_CONN_OK);
	assert_int_equal(admit_conns_from(a, &z), 2);
	/* Closing every connection of a source forgets it. */
	admit_conn_close(a, &y);
	admit_conn_close(a, &y);
	assert_int_equal(admit_conns_from(a, &y), 0);
	admit_conn_close(a, &y);	/* unknown: no effect */
	assert_int_equal(admit_conns(a), 3);
	/* A reload lowers the caps: counts stay, new ones are refused. */
	c.max_per_source = 1;
	admit_set(a, &c);
	assert_int_equal(admit_conn_open(a, &z), ADMIT_CONN_SOURCE);
	assert_int_equal(admit_conn_open(a, &y), ADMIT_CONN_OK);
	admit_free(a);	/* frees the sources still counted */
}

static void
test_rate_before_replay(void **state)
{
	struct admit_conf c = conf();
	struct admit *a = admit_new(&c, 64, 64);
	struct addr x = ip("192.0.2.1"), y = ip("192.0.2.2");
	(void)state;

	/* Burst 3: three control messages, then over the rate. */
	for (uint64_t n = 1; n <= 3; n++)
		assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, n, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 4, M0, T0), ADMIT_RATE);
	/* Refused by rate, it was not remembered: the same nonce is fresh
	 * once a token came back (1/s). */
	assert_int_equal(admit_remembered(a, ADMIT_CONTROL), 3);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 4, M0 + 1000000, T0), ADMIT_OK);
	/* Replays and stale messages spend a token too: a source cannot try
	 * the cache faster than its rate. */
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 1, M0 + 2000000, T0),
	    ADMIT_REPLAY);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 5, M0 + 2000000, T0),
	    ADMIT_RATE);
	/* Over the rate, a replay or a stale message is still one (never
	 * RATE, which a probe would be answered), and is not recorded. */
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 1, M0 + 2000000, T0),
	    ADMIT_REPLAY);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0 - 2 * W, 9, M0 + 2000000, T0),
	    ADMIT_STALE);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0 + 2 * W, 9, M0 + 2000000, T0),
	    ADMIT_STALE);
	assert_int_equal(admit_remembered(a, ADMIT_CONTROL), 4);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0 - 2 * W, 9, M0 + 3000000, T0),
	    ADMIT_STALE);
	/* Another source has its own bucket. */
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &y, T0, 100, M0 + 3000000, T0),
	    ADMIT_OK);
	admit_free(a);
}

/* An IPv6 /64 is one source for every per-source limit: a host holding a
 * /64 cannot take a fresh source for each connection or message. */
static void
test_ipv6_source_is_its_64(void **state)
{
	struct admit_conf c = conf();
	struct admit *a = admit_new(&c, 64, 64);
	struct addr x = ip("2001:db8:1:2::1"), y = ip("2001:db8:1:2:ffff::9"),
	    z = ip("2001:db8:1:3::1"), m = ip("::ffff:192.0.2.1"), n = ip("::ffff:192.0.2.2");
	(void)state;

	assert_int_equal(admit_conn_open(a, &x), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &y), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &y), ADMIT_CONN_SOURCE);	/* max_per_source 2 */
	assert_int_equal(admit_conns_from(a, &x), 2);
	assert_int_equal(admit_conn_open(a, &z), ADMIT_CONN_OK);	/* another /64 */
	admit_conn_close(a, &y);
	assert_int_equal(admit_conns_from(a, &x), 1);
	/* IPv4-mapped addresses stay whole */
	assert_int_equal(admit_conn_open(a, &m), ADMIT_CONN_OK);
	assert_int_equal(admit_conn_open(a, &n), ADMIT_CONN_OK);
	/* one bucket for the /64: burst 3 */
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 1, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &y, T0, 2, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 3, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &y, T0, 4, M0, T0), ADMIT_RATE);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &z, T0, 5, M0, T0), ADMIT_OK);
	admit_free(a);
}

/* A relay's control messages (the chains of all its clients) have their own
 * rate: the client rate of its address is not spent by them. */
static void
test_relay_rate_is_its_own(void **state)
{
	struct admit_conf c = conf();
	struct admit *a = admit_new(&c, 64, 64);
	struct addr x = ip("192.0.2.1");
	(void)state;

	for (uint64_t n = 1; n <= 6; n++)
		assert_int_equal(admit_message(a, ADMIT_RELAY, &x, T0, n, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_RELAY, &x, T0, 7, M0, T0), ADMIT_RATE);
	/* the control bucket of the same address is untouched (burst 3) */
	for (uint64_t n = 1; n <= 3; n++)
		assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 100 + n, M0, T0), ADMIT_OK);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 104, M0, T0), ADMIT_RATE);
	assert_int_equal(admit_remembered(a, ADMIT_RELAY), 6);
	admit_free(a);
}

static void
test_kinds_have_their_own_caches(void **state)
{
	struct admit_conf c = conf();
	struct admit *a = admit_new(&c, 8, 64);
	struct addr x = ip("192.0.2.1"), p = ip("198.51.100.7");
	(void)state;

	/* One control message remembered. */
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 77, M0, T0), ADMIT_OK);
	/* The same (timestamp, nonce) as a probe is another kind's message. */
	assert_int_equal(admit_message(a, ADMIT_PROBE, &p, T0, 77, M0, T0), ADMIT_OK);
	/* A probe flood fills the probe cache (8 nonces) to refusal... */
	for (uint64_t n = 1; n < 8; n++)
		assert_int_equal(admit_message(a, ADMIT_PROBE, &p, T0, 1000 + n, M0, T0), ADMIT_OK);
	assert_int_equal(admit_remembered(a, ADMIT_PROBE), 8);
	assert_int_equal(admit_message(a, ADMIT_PROBE, &p, T0, 5000, M0, T0), ADMIT_REPLAY);
	/* ...and the control cache still holds its nonce and takes new ones. */
	assert_int_equal(admit_remembered(a, ADMIT_CONTROL), 1);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 77, M0, T0), ADMIT_REPLAY);
	assert_int_equal(admit_message(a, ADMIT_CONTROL, &x, T0, 78, M0, T0), ADMIT_OK);
	/* The window moves on: both caches forget, one by one. */
	assert_int_equal(admit_message(a, ADMIT_PROBE, &p, T0 + 2 * W, 1, M0 + 1000000,
	    T0 + 2 * W), ADMIT_OK);
	assert_int_equal(admit_remembered(a, ADMIT_PROBE), 1);
	assert_int_equal(admit_remembered(a, ADMIT_CONTROL), 2);
	admit_free(a);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connection_caps),
		cmocka_unit_test(test_rate_before_replay),
		cmocka_unit_test(test_ipv6_source_is_its_64),
		cmocka_unit_test(test_kinds_have_their_own_caches),
		cmocka_unit_test(test_relay_rate_is_its_own),
	};
	return cmocka_run_group_tests_name("admit", tests, NULL, NULL);
}
