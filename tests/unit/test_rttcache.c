/* Unit tests: rttcache (bounded RTT cache per endpoint). */

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/addr.h"
#include "slot/proto.h"
#include "slot/rttcache.h"

#define SEC UINT64_C(1000000)
#define T0 (1000 * SEC)

static struct endpoint
E(const char *s)
{
	struct endpoint e;

	if (ep_parse(s, 0, &e) == -1)
		fail_msg("ep_parse(\"%s\") failed", s);
	return e;
}

static struct endpoint
Ei(unsigned i)
{
	struct endpoint e;

	memset(&e, 0, sizeof(e));
	e.addr.family = AF_INET;
	e.addr.bytes[0] = 10;
	e.addr.bytes[1] = (uint8_t)(i >> 16);
	e.addr.bytes[2] = (uint8_t)(i >> 8);
	e.addr.bytes[3] = (uint8_t)i;
	e.port = 80;
	return e;
}

static void
test_new(void **state)
{
	struct rttcache *c;
	struct endpoint e = E("192.0.2.1:80");

	(void)state;
	assert_null(rttc_new(0));
	assert_non_null(c = rttc_new(4));
	assert_int_equal(rttc_count(c), 0);
	assert_false(rttc_get(c, &e, T0, SEC, NULL, NULL));
	rttc_free(c);
	rttc_free(NULL);
}

static void
test_put_get(void **state)
{
	struct rttcache *c;
	struct endpoint e = E("192.0.2.1:80"), f = E("192.0.2.1:81");
	struct endpoint g = E("[2001:db8::1]:80");
	uint32_t rtt = 0;
	uint8_t st = 0xff;

	(void)state;
	assert_non_null(c = rttc_new(16));
	assert_int_equal(rttc_put(c, &e, 42000, PROBE_ST_OK, T0), 0);
	assert_int_equal(rttc_put(c, &g, 7, PROBE_ST_REFUSED, T0), 0);
	assert_int_equal(rttc_count(c), 2);
	assert_true(rttc_get(c, &e, T0, SEC, &rtt, &st));
	assert_int_equal(rtt, 42000);
	assert_int_equal(st, PROBE_ST_OK);
	assert_true(rttc_get(c, &g, T0, SEC, &rtt, &st));
	assert_int_equal(rtt, 7);
	assert_int_equal(st, PROBE_ST_REFUSED);
	/* Another port is another entry. */
	assert_false(rttc_get(c, &f, T0, SEC, &rtt, &st));
	/* NULL outputs are fine. */
	assert_true(rttc_get(c, &e, T0, SEC, NULL, NULL));
	rttc_free(c);
}

/* Failures are cached as well, with their status. */
static void
test_failure_cached(void **state)
{
	struct rttcache *c;
	struct endpoint e = E("203.0.113.5:443");
	uint32_t rtt = 1;
	uint8_t st = 0;

	(void)state;
	assert_non_null(c = rttc_new(4));
	assert_int_equal(rttc_put(c, &e, 0, PROBE_ST_TIMEOUT, T0), 0);
	assert_true(rttc_get(c, &e, T0 + 1, SEC, &rtt, &st));
	assert_int_equal(st, PROBE_ST_TIMEOUT);
	assert_int_equal(rtt, 0);
	rttc_free(c);
}

static void
test_ttl(void **state)
{
	struct rttcache *c;
	struct endpoint e = E("192.0.2.1:80");
	uint32_t rtt;

	(void)state;
	assert_non_null(c = rttc_new(4));
	assert_int_equal(rttc_put(c, &e, 1000, PROBE_ST_OK, T0), 0);
	assert_true(rttc_get(c, &e, T0 + SEC - 1, SEC, &rtt, NULL));
	/* "Less than ttl ago": exactly ttl is stale. */
	assert_false(rttc_get(c, &e, T0 + SEC, SEC, &rtt, NULL));
	/* The stale entry is still there for a caller with a longer TTL. */
	assert_true(rttc_get(c, &e, T0 + SEC, 2 * SEC, &rtt, NULL));
	assert_int_equal(rttc_count(c), 1);
	/* A time before the measurement counts as age zero. */
	assert_true(rttc_get(c, &e, T0 - SEC, 1, &rtt, NULL));
	/* TTL 0 never hits. */
	assert_false(rttc_get(c, &e, T0, 0, &rtt, NULL));
	/* A refresh restarts the clock and replaces the value. */
	assert_int_equal(rttc_put(c, &e, 2000, PROBE_ST_OK, T0 + 5 * SEC), 0);
	assert_int_equal(rttc_count(c), 1);
	assert_true(rttc_get(c, &e, T0 + 5 * SEC + SEC / 2, SEC, &rtt, NULL));
	assert_int_equal(rtt, 2000);
	rttc_free(c);
}

static void
test_eviction_oldest(void **state)
{
	struct rttcache *c;
	struct endpoint e[4];
	uint32_t rtt;
	int i;

	(void)state;
	for (i = 0; i < 4; i++)
		e[i] = Ei((unsigned)i);
	assert_non_null(c = rttc_new(3));
	for (i = 0; i < 3; i++)
		assert_int_equal(rttc_put(c, &e[i], 100 + (uint32_t)i,
		    PROBE_ST_OK, T0 + (uint64_t)i), 0);
	assert_int_equal(rttc_count(c), 3);
	/* Refresh e[0]: now e[1] is the oldest. */
	assert_int_equal(rttc_put(c, &e[0], 500, PROBE_ST_OK, T0 + 10), 0);
	assert_int_equal(rttc_count(c), 3);
	/* A read does not count as a refresh. */
	assert_true(rttc_get(c, &e[1], T0 + 10, SEC, &rtt, NULL));
	assert_int_equal(rttc_put(c, &e[3], 103, PROBE_ST_OK, T0 + 11), 0);
	assert_int_equal(rttc_count(c), 3);
	assert_false(rttc_get(c, &e[1], T0 + 11, SEC, &rtt, NULL));
	assert_true(rttc_get(c, &e[0], T0 + 11, SEC, &rtt, NULL));
	assert_int_equal(rtt, 500);
	assert_true(rttc_get(c, &e[2], T0 + 11, SEC, &rtt, NULL));
	assert_int_equal(rtt, 102);
	assert_true(rttc_get(c, &e[3], T0 + 11, SEC, &rtt, NULL));
	assert_int_equal(rtt, 103);
	/* Next to go is e[2], then e[0]. */
	assert_int_equal(rttc_put(c, &e[1], 1, PROBE_ST_OK, T0 + 12), 0);
	assert_false(rttc_get(c, &e[2], T0 + 12, SEC, &rtt, NULL));
	assert_true(rttc_get(c, &e[0], T0 + 12, SEC, &rtt, NULL));
	assert_int_equal(rttc_put(c, &e[2], 1, PROBE_ST_OK, T0 + 13), 0);
	assert_false(rttc_get(c, &e[0], T0 + 13, SEC, &rtt, NULL));
	rttc_free(c);
}

/* Many more endpoints than slots: the newest capacity ones remain, and the
 * table (which grows past its first size) finds each. */
static void
test_many(void **state)
{
	enum { CAP = 500, N = 5000 };
	struct rttcache *c;
	struct endpoint e;
	uint32_t rtt;
	unsigned i;

	(void)state;
	assert_non_null(c = rttc_new(CAP));
	for (i = 0; i < N; i++) {
		e = Ei(i);
		assert_int_equal(rttc_put(c, &e, i, PROBE_ST_OK, T0 + i), 0);
		assert_true(rttc_count(c) <= CAP);
	}
	assert_int_equal(rttc_count(c), CAP);
	for (i = 0; i < N; i++) {
		e = Ei(i);
		if (i < N - CAP)
			assert_false(rttc_get(c, &e, T0 + N, 100 * SEC, &rtt, NULL));
		else {
			assert_true(rttc_get(c, &e, T0 + N, 100 * SEC, &rtt, NULL));
			assert_int_equal(rtt, i);
		}
	}
	rttc_free(c);
}

struct walked {
	size_t n;
	struct endpoint ep[4];
	uint32_t rtt[4];
	uint8_t st[4];
	uint64_t at[4];
};

static void
walk_cb(void *arg, const struct endpoint *e, uint32_t rtt_us, uint8_t status,
    uint64_t measured_us)
{
	struct walked *w = arg;

	assert_true(w->n < 4);
	w->ep[w->n] = *e;
	w->rtt[w->n] = rtt_us;
	w->st[w->n] = status;
	w->at[w->n++] = measured_us;
}

/* The control socket's view: oldest measurement first; a refresh moves an
 * entry to the end. */
static void
test_walk(void **state)
{
	struct rttcache *c = rttc_new(8);
	struct endpoint a = E("192.0.2.1:80"), b = E("[2001:db8::1]:443");
	struct walked w = { 0 };
	(void)state;

	assert_int_equal(rttc_put(c, &a, 40000, PROBE_ST_OK, T0), 0);
	assert_int_equal(rttc_put(c, &b, 0, PROBE_ST_TIMEOUT, T0 + SEC), 0);
	assert_int_equal(rttc_put(c, &a, 41000, PROBE_ST_OK, T0 + 2 * SEC), 0);
	rttc_walk(c, walk_cb, &w);
	assert_int_equal(w.n, 2);
	assert_true(ep_eq(&w.ep[0], &b));
	assert_int_equal(w.st[0], PROBE_ST_TIMEOUT);
	assert_int_equal(w.at[0], T0 + SEC);
	assert_true(ep_eq(&w.ep[1], &a));
	assert_int_equal(w.rtt[1], 41000);
	assert_int_equal(w.at[1], T0 + 2 * SEC);
	rttc_free(c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new),
		cmocka_unit_test(test_put_get),
		cmocka_unit_test(test_failure_cached),
		cmocka_unit_test(test_ttl),
		cmocka_unit_test(test_eviction_oldest),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_walk),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
