/* Unit tests for src/core/replay.c, including a randomised comparison with a
 * naive model. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "slot/replay.h"

#define W	1000000ULL			/* 1 s window */
#define T0	1700000000000000ULL		/* some wall-clock time, us */

static void
test_fresh_and_dup(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(16, W);
	assert_non_null(r);
	assert_int_equal(replay_count(r), 0);
	assert_int_equal(replay_check(r, T0, 42, T0), REPLAY_OK);
	assert_int_equal(replay_count(r), 1);
	assert_int_equal(replay_check(r, T0, 42, T0), REPLAY_DUP);
	assert_int_equal(replay_check(r, T0, 42, T0 + W), REPLAY_DUP);
	/* The pair is the key: same nonce at another time, or another nonce
	 * at the same time, is a different message. */
	assert_int_equal(replay_check(r, T0 + 1, 42, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 43, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 0, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 0, T0), REPLAY_DUP);
	assert_int_equal(replay_count(r), 4);
	replay_free(r);
}

/* replay_peek tells what replay_check would, and records nothing. */
static void
test_peek(void **state)
{
	struct replay *r = replay_new(2, W);

	(void)state;
	assert_non_null(r);
	assert_int_equal(replay_peek(r, T0, 42, T0), REPLAY_OK);
	assert_int_equal(replay_count(r), 0);
	assert_int_equal(replay_check(r, T0, 42, T0), REPLAY_OK);
	assert_int_equal(replay_peek(r, T0, 42, T0), REPLAY_DUP);
	assert_int_equal(replay_peek(r, T0, 43, T0), REPLAY_OK);
	assert_int_equal(replay_peek(r, T0 - 2 * W, 1, T0), REPLAY_STALE);
	assert_int_equal(replay_peek(r, T0 + 2 * W, 1, T0), REPLAY_STALE);
	/* past its window, the recorded pair is stale, not a duplicate */
	assert_int_equal(replay_peek(r, T0, 42, T0 + 2 * W), REPLAY_STALE);
	/* full: a peek says OK where the check would say FULL */
	assert_int_equal(replay_check(r, T0, 44, T0), REPLAY_OK);
	assert_int_equal(replay_peek(r, T0, 45, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 45, T0), REPLAY_FULL);
	assert_int_equal(replay_count(r), 2);
	replay_free(r);
}

static void
test_window_bounds(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(16, W);
	assert_non_null(r);
	/* +-window inclusive. */
	assert_int_equal(replay_check(r, T0 - W, 1, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + W, 2, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 - W - 1, 3, T0), REPLAY_STALE);
	assert_int_equal(replay_check(r, T0 + W + 1, 4, T0), REPLAY_STALE);
	assert_int_equal(replay_check(r, 0, 5, T0), REPLAY_STALE);
	assert_int_equal(replay_check(r, UINT64_MAX, 6, T0), REPLAY_STALE);
	assert_int_equal(replay_count(r), 2);
	/* Stale messages are not recorded: once fresh they are accepted. */
	assert_int_equal(replay_check(r, T0 + W + 1, 4, T0 + 1), REPLAY_OK);
	replay_free(r);
}

static void
test_clock_edges(void **state)
{
	struct replay *r;

	(void)state;
	/* now < window: nothing is too old, no underflow. */
	r = replay_new(4, W);
	assert_non_null(r);
	assert_int_equal(replay_check(r, 0, 1, 10), REPLAY_OK);
	assert_int_equal(replay_check(r, W + 10, 2, 10), REPLAY_OK);
	assert_int_equal(replay_check(r, W + 11, 3, 10), REPLAY_STALE);
	replay_free(r);

	/* now + window past UINT64_MAX: nothing is too new, no overflow. */
	r = replay_new(4, W);
	assert_non_null(r);
	assert_int_equal(replay_check(r, UINT64_MAX, 1, UINT64_MAX - 10), REPLAY_OK);
	assert_int_equal(replay_check(r, UINT64_MAX - 10 - W, 2, UINT64_MAX - 10),
	    REPLAY_OK);
	assert_int_equal(replay_check(r, UINT64_MAX - 11 - W, 3, UINT64_MAX - 10),
	    REPLAY_STALE);
	replay_free(r);
}

static void
test_full_then_freed(void **state)
{
	struct replay *r;
	uint64_t i;

	(void)state;
	r = replay_new(4, W);
	assert_non_null(r);
	for (i = 0; i < 4; i++)
		assert_int_equal(replay_check(r, T0 + i, 100 + i, T0), REPLAY_OK);
	assert_int_equal(replay_count(r), 4);
	assert_int_equal(replay_check(r, T0, 999, T0), REPLAY_FULL);
	/* A duplicate is still recognised as one when full. */
	assert_int_equal(replay_check(r, T0 + 2, 102, T0), REPLAY_DUP);
	/* T0 + 0 is still live at T0 + W ... */
	assert_int_equal(replay_check(r, T0 + W, 999, T0 + W), REPLAY_FULL);
	/* ... and gone at T0 + W + 1; exactly one slot frees. */
	assert_int_equal(replay_check(r, T0 + W, 999, T0 + W + 1), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + W, 998, T0 + W + 1), REPLAY_FULL);
	assert_int_equal(replay_count(r), 4);
	/* The forgotten pair is now refused as stale, never accepted. */
	assert_int_equal(replay_check(r, T0, 100, T0 + W + 1), REPLAY_STALE);
	/* Much later everything has expired. */
	for (i = 0; i < 4; i++)
		assert_int_equal(replay_check(r, T0 + 10 * W, i, T0 + 10 * W),
		    REPLAY_OK);
	assert_int_equal(replay_count(r), 4);
	replay_free(r);
}

static void
test_out_of_order(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(3, W);
	assert_non_null(r);
	/* Arrival order differs from timestamp order: the first to arrive
	 * (from a sender whose clock runs ahead) expires last. */
	assert_int_equal(replay_check(r, T0 + W, 1, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 2, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 - W, 3, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 4, T0), REPLAY_FULL);
	/* One microsecond later only nonce 3 has expired. */
	assert_int_equal(replay_check(r, T0 + 1, 4, T0 + 1), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + 1, 5, T0 + 1), REPLAY_FULL);
	assert_int_equal(replay_check(r, T0 + W, 1, T0 + 1), REPLAY_DUP);
	assert_int_equal(replay_check(r, T0, 2, T0 + 1), REPLAY_DUP);
	/* At T0 + W + 1 nonce 2 goes; nonce 1 stays until T0 + 2W. */
	assert_int_equal(replay_check(r, T0 + W, 5, T0 + W + 1), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + W, 1, T0 + 2 * W), REPLAY_DUP);
	assert_int_equal(replay_check(r, T0 + W, 1, T0 + 2 * W + 1), REPLAY_STALE);
	replay_free(r);
}

static void
test_window_growth_keeps_refusing(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(8, W);
	assert_non_null(r);
	assert_int_equal(replay_check(r, T0, 7, T0), REPLAY_OK);
	/* Another check after the window purges the pair. */
	assert_int_equal(replay_check(r, T0 + 2 * W, 8, T0 + 2 * W), REPLAY_OK);
	assert_int_equal(replay_count(r), 1);
	/* With a wider window T0 would be fresh again, but the pair was
	 * forgotten: it must not be accepted a second time. */
	replay_set_window(r, 10 * W);
	assert_int_equal(replay_check(r, T0, 7, T0 + 2 * W), REPLAY_STALE);
	assert_int_equal(replay_check(r, T0 + 1, 9, T0 + 2 * W), REPLAY_OK);
	replay_free(r);
}

static void
test_clock_step_back(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(8, W);
	assert_non_null(r);
	assert_int_equal(replay_check(r, T0, 7, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + 5 * W, 8, T0 + 5 * W), REPLAY_OK);
	/* The receiver's clock steps back to T0: the forgotten pair is
	 * refused, and fresh traffic after it still passes. */
	assert_int_equal(replay_check(r, T0, 7, T0), REPLAY_STALE);
	assert_int_equal(replay_check(r, T0 + 1, 10, T0), REPLAY_OK);
	replay_free(r);
}

static void
test_window_shrink(void **state)
{
	struct replay *r;

	(void)state;
	r = replay_new(2, 10 * W);
	assert_non_null(r);
	assert_int_equal(replay_check(r, T0, 1, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0, 2, T0), REPLAY_OK);
	assert_int_equal(replay_check(r, T0 + W, 3, T0 + 2 * W), REPLAY_FULL);
	replay_set_window(r, W);
	assert_int_equal(replay_check(r, T0 + W, 3, T0 + 2 * W), REPLAY_OK);
	assert_int_equal(replay_count(r), 1);
	replay_free(r);
}

static void
test_misc(void **state)
{
	(void)state;
	errno = 0;
	assert_null(replay_new(0, W));
	assert_int_equal(errno, EINVAL);
	assert_string_equal(replay_verdict_str(REPLAY_OK), "ok");
	assert_string_equal(replay_verdict_str(REPLAY_STALE), "stale");
	assert_string_equal(replay_verdict_str(REPLAY_DUP), "replayed");
	assert_string_equal(replay_verdict_str(REPLAY_FULL), "replay cache full");
	replay_free(NULL);
}

/* The naive model: a list, scanned in full at every check. */
struct model {
	uint64_t ts[256], nonce[256];
	size_t n, cap;
	uint64_t window, floor;
	bool has_floor;
};

static enum replay_verdict
model_check(struct model *m, uint64_t ts, uint64_t nonce, uint64_t now)
{
	size_t i;

	if ((now > m->window && ts < now - m->window) || ts > now + m->window)
		return REPLAY_STALE;
	if (m->has_floor && ts <= m->floor)
		return REPLAY_STALE;
	for (i = 0; i < m->n;) {
		if (now > m->window && m->ts[i] < now - m->window) {
			if (!m->has_floor || m->ts[i] > m->floor)
				m->floor = m->ts[i];
			m->has_floor = true;
			m->ts[i] = m->ts[m->n - 1];
			m->nonce[i] = m->nonce[m->n - 1];
			m->n--;
		} else
			i++;
	}
	for (i = 0; i < m->n; i++)
		if (m->ts[i] == ts && m->nonce[i] == nonce)
			return REPLAY_DUP;
	if (m->n == m->cap)
		return REPLAY_FULL;
	m->ts[m->n] = ts;
	m->nonce[m->n++] = nonce;
	return REPLAY_OK;
}

static uint64_t rng_state = 0x123456789abcdefULL;

static uint64_t
rng(void)
{
	/* xorshift64*: deterministic, so a failure can be reproduced. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static void
test_against_model(void **state)
{
	const uint64_t w = 1000;
	struct model m;
	struct replay *r;
	uint64_t now = 1000000, ts, nonce;
	size_t cap, i, counts[4] = { 0 };
	enum replay_verdict got, want;

	(void)state;
	for (cap = 1; cap <= 256; cap = cap * 2 + 1) {
		memset(&m, 0, sizeof(m));
		m.cap = cap;
		m.window = w;
		r = replay_new(cap, w);
		assert_non_null(r);
		for (i = 0; i < 100000; i++) {
			/* About 250 pairs live at a time: small tables
			 * fill up, the largest rarely does. */
			now += rng() % 16;
			ts = now - w - 2 + rng() % (2 * w + 5);
			/* Few nonces and coarse timestamps: many duplicates
			 * and many hash collisions. */
			ts -= ts % 3;
			nonce = rng() % 5;
			if (rng() % 1000 == 0) {
				uint64_t nw = 200 + rng() % 2000;

				replay_set_window(r, nw);
				m.window = nw;
			}
			want = model_check(&m, ts, nonce, now);
			got = replay_check(r, ts, nonce, now);
			if (got != want)
				fail_msg("cap %zu step %zu: ts %llu nonce %llu now "
				    "%llu: got %s, want %s", cap, i,
				    (unsigned long long)ts,
				    (unsigned long long)nonce,
				    (unsigned long long)now,
				    replay_verdict_str(got),
				    replay_verdict_str(want));
			assert_int_equal(replay_count(r), m.n);
			counts[got]++;
		}
		replay_free(r);
	}
	/* The run exercised every verdict. */
	for (i = 0; i < 4; i++)
		assert_true(counts[i] > 100);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fresh_and_dup),
		cmocka_unit_test(test_peek),
		cmocka_unit_test(test_window_bounds),
		cmocka_unit_test(test_clock_edges),
		cmocka_unit_test(test_full_then_freed),
		cmocka_unit_test(test_out_of_order),
		cmocka_unit_test(test_window_growth_keeps_refusing),
		cmocka_unit_test(test_clock_step_back),
		cmocka_unit_test(test_window_shrink),
		cmocka_unit_test(test_misc),
		cmocka_unit_test(test_against_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
