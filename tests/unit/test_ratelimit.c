/* Unit tests: ratelimit (token buckets keyed by address), with injected
 * time so every expectation is exact. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/addr.h"
#include "slot/ratelimit.h"

#define SEC UINT64_C(1000000)
#define T0 (100 * SEC)

static struct addr
A(const char *s)
{
	struct addr a;

	if (addr_parse(s, &a) == -1)
		fail_msg("addr_parse(\"%s\") failed", s);
	return a;
}

static struct addr
Ai(unsigned i)
{
	struct addr a;

	memset(&a, 0, sizeof(a));
	a.family = AF_INET;
	a.bytes[0] = 10;
	a.bytes[1] = (uint8_t)(i >> 16);
	a.bytes[2] = (uint8_t)(i >> 8);
	a.bytes[3] = (uint8_t)i;
	return a;
}

static void
test_new_args(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1");

	(void)state;
	assert_null(rl_new(0, 1, 1));
	/* A burst below one is raised to one: the first packet passes. */
	assert_non_null(rl = rl_new(4, 1, 0));
	assert_int_equal(rl_count(rl), 0);
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0));
	assert_int_equal(rl_count(rl), 1);
	rl_free(rl);
	rl_free(NULL);
}

static void
test_burst_and_refill(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1");

	(void)state;
	assert_non_null(rl = rl_new(16, 10, 3));	/* 10/s: a token per 100 ms */
	assert_true(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0 + 99999));
	assert_true(rl_allow(rl, &a, T0 + 100000));
	assert_false(rl_allow(rl, &a, T0 + 100000));
	/* Half a token is not enough... */
	assert_false(rl_allow(rl, &a, T0 + 150000));
	/* ...but a denied call does not lose the time it waited. */
	assert_true(rl_allow(rl, &a, T0 + 200000));
	assert_false(rl_allow(rl, &a, T0 + 200000));
	/* A long idle refills to the burst and no further. */
	assert_true(rl_allow(rl, &a, T0 + 60 * SEC));
	assert_true(rl_allow(rl, &a, T0 + 60 * SEC));
	assert_true(rl_allow(rl, &a, T0 + 60 * SEC));
	assert_false(rl_allow(rl, &a, T0 + 60 * SEC));
	rl_free(rl);
}

/* A use that keeps tokens for others takes only what lies above them,
 * and a denial takes nothing. */
static void
test_keep(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1");

	(void)state;
	assert_non_null(rl = rl_new(16, 10, 4));	/* 10/s: a token per 100 ms */
	assert_true(rl_allow_keep(rl, &a, T0, 2));
	assert_true(rl_allow_keep(rl, &a, T0, 2));
	assert_false(rl_allow_keep(rl, &a, T0, 2));
	/* The two kept are there for plain uses. */
	assert_true(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0));
	/* Refilled to three: one above the two kept. */
	assert_true(rl_allow_keep(rl, &a, T0 + 300000, 2));
	assert_false(rl_allow_keep(rl, &a, T0 + 300000, 2));
	assert_true(rl_allow(rl, &a, T0 + 300000));
	assert_true(rl_allow(rl, &a, T0 + 300000));
	assert_false(rl_allow(rl, &a, T0 + 300000));
	rl_free(rl);
}

/* Steady rate: over 10 s at one request per ms, 10/s + burst pass. */
static void
test_sustained_rate(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("198.51.100.7");
	uint64_t t;
	unsigned ok = 0;

	(void)state;
	assert_non_null(rl = rl_new(4, 10, 5));
	for (t = T0; t < T0 + 10 * SEC; t += 1000)
		ok += rl_allow(rl, &a, t);
	/* 5 burst + 10/s over 9.999 s (the last refill at +9.9 s). */
	assert_int_equal(ok, 5 + 99);
	rl_free(rl);
}

/* Ten refills of 0.1 token sum to 0.9999999999999999 in binary floating
 * point; after exactly 1/rate seconds a token must still be there. */
static void
test_refill_rounding(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1");
	uint64_t t;

	(void)state;
	assert_non_null(rl = rl_new(4, 10, 1));
	assert_true(rl_allow(rl, &a, T0));
	for (t = T0 + 10000; t < T0 + 100000; t += 10000)
		assert_false(rl_allow(rl, &a, t));
	assert_true(rl_allow(rl, &a, T0 + 100000));
	rl_free(rl);
}

static void
test_fractional_rate(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("203.0.113.9");

	(void)state;
	assert_non_null(rl = rl_new(4, 0.5, 1));	/* one every 2 s */
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0 + 2 * SEC - 1));
	assert_true(rl_allow(rl, &a, T0 + 2 * SEC));
	rl_free(rl);
}

static void
test_keys_independent(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1"), b = A("192.0.2.2");
	struct addr c = A("2001:db8::1"), m = A("::ffff:192.0.2.1");

	(void)state;
	assert_non_null(rl = rl_new(16, 1, 1));
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &b, T0));
	assert_true(rl_allow(rl, &c, T0));
	/* The mapped form is the same key as the IPv4 one. */
	assert_false(rl_allow(rl, &m, T0));
	assert_int_equal(rl_count(rl), 3);
	rl_free(rl);
}

/* Full of buckets that are still refilling: a new address is refused. */
static void
test_fail_closed(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1"), b = A("192.0.2.2"), c = A("192.0.2.3");

	(void)state;
	assert_non_null(rl = rl_new(2, 1, 2));
	assert_true(rl_allow(rl, &a, T0));	/* full again at T0 + 1 s */
	assert_true(rl_allow(rl, &b, T0));
	assert_false(rl_allow(rl, &c, T0));
	assert_false(rl_allow(rl, &c, T0 + SEC / 2));
	assert_false(rl_allow(rl, &c, T0 + SEC - 1));
	assert_int_equal(rl_count(rl), 2);
	/* Known addresses keep working meanwhile. */
	assert_true(rl_allow(rl, &a, T0 + SEC / 2));	/* 1.5 -> 0.5 */
	/* b has refilled by T0 + 1 s: its slot goes to c. */
	assert_true(rl_allow(rl, &c, T0 + SEC));
	assert_int_equal(rl_count(rl), 2);
	/* a was not the one reclaimed: it still owes (0.5 + 0.5 = 1 token). */
	assert_true(rl_allow(rl, &a, T0 + SEC));
	assert_false(rl_allow(rl, &a, T0 + SEC));
	rl_free(rl);
}

/* The reclaimed bucket is one that refilled, even when the least recently
 * used one has not. */
static void
test_reclaims_refilled_not_oldest(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1"), b = A("192.0.2.2"), c = A("192.0.2.3");

	(void)state;
	assert_non_null(rl = rl_new(2, 1, 2));
	assert_true(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &a, T0));		/* 0 tokens: full at +2 s */
	assert_true(rl_allow(rl, &b, T0 + SEC / 2));	/* 1 token: full at +1.5 s */
	assert_true(rl_allow(rl, &c, T0 + 1600000));	/* takes b's slot */
	assert_int_equal(rl_count(rl), 2);
	/* a kept its state: 1.6 tokens, so one more passes and then none. */
	assert_true(rl_allow(rl, &a, T0 + 1600000));
	assert_false(rl_allow(rl, &a, T0 + 1600000));
	/* b comes back: both slots are live, so it is refused. */
	assert_false(rl_allow(rl, &b, T0 + 1600000));
	rl_free(rl);
}

/* Refilled buckets are dropped as calls go by, so the count tracks the
 * addresses that still carry state. */
static void
test_count_shrinks(void **state)
{
	struct ratelimit *rl;
	struct addr k = A("198.51.100.1"), a;
	unsigned i;

	(void)state;
	assert_non_null(rl = rl_new(64, 100, 1));
	for (i = 0; i < 10; i++) {
		a = Ai(i);
		assert_true(rl_allow(rl, &a, T0));
	}
	assert_int_equal(rl_count(rl), 10);
	assert_true(rl_allow(rl, &k, T0 + SEC));
	assert_true(rl_count(rl) < 11);
	for (i = 0; i < 10; i++)
		(void)rl_allow(rl, &k, T0 + SEC + i);
	assert_int_equal(rl_count(rl), 1);
	rl_free(rl);
}

/* The table holds capacity buckets and no more, under a flood of new
 * addresses. */
static void
test_flood(void **state)
{
	struct ratelimit *rl;
	struct addr a;
	unsigned i, ok = 0;

	(void)state;
	assert_non_null(rl = rl_new(100, 1, 1));
	for (i = 0; i < 10000; i++) {
		a = Ai(i);
		ok += rl_allow(rl, &a, T0 + i);	/* 10 ms in all: nothing refills */
	}
	assert_int_equal(ok, 100);
	assert_int_equal(rl_count(rl), 100);
	/* After a second, the first hundred have refilled: room again. */
	a = Ai(20000);
	assert_true(rl_allow(rl, &a, T0 + 10000 + SEC));
	rl_free(rl);
}

static void
test_zero_rate(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1"), b = A("192.0.2.2");

	(void)state;
	assert_non_null(rl = rl_new(1, 0, 2));
	assert_true(rl_allow(rl, &a, T0));
	assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0 + 1000 * SEC));
	/* Never refills, so its slot is never free. */
	assert_false(rl_allow(rl, &b, UINT64_MAX - 1));
	rl_free(rl);
}

/* A monotonic clock should not step back, but if the caller's does, no
 * tokens appear and the last refill time is not moved back. */
static void
test_time_backwards(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1");

	(void)state;
	assert_non_null(rl = rl_new(4, 1, 1));
	assert_true(rl_allow(rl, &a, 10 * SEC));
	assert_false(rl_allow(rl, &a, 5 * SEC));
	assert_false(rl_allow(rl, &a, 10 * SEC + SEC / 2));
	assert_true(rl_allow(rl, &a, 11 * SEC));
	rl_free(rl);
}

static void
test_set(void **state)
{
	struct ratelimit *rl;
	struct addr a = A("192.0.2.1"), b = A("192.0.2.2");
	int i;

	(void)state;
	assert_non_null(rl = rl_new(1, 10, 10));
	for (i = 0; i < 10; i++)
		assert_true(rl_allow(rl, &a, T0));
	assert_false(rl_allow(rl, &a, T0));
	/* Slower: one token per second. */
	rl_set(rl, 1, 2);
	assert_false(rl_allow(rl, &a, T0 + SEC / 2));
	assert_true(rl_allow(rl, &a, T0 + SEC));
	/* Lower burst caps what a long idle gives. */
	assert_true(rl_allow(rl, &a, T0 + 100 * SEC));
	assert_true(rl_allow(rl, &a, T0 + 100 * SEC));
	assert_false(rl_allow(rl, &a, T0 + 100 * SEC));
	/* Full at T0 + 102 s under these parameters; with a faster rate the
	 * slot frees earlier, so b gets in at +100.2 s. */
	assert_false(rl_allow(rl, &b, T0 + 100 * SEC + 200000));
	rl_set(rl, 10, 2);
	assert_true(rl_allow(rl, &b, T0 + 100 * SEC + 200000));
	rl_free(rl);
}

/* A model with the same arithmetic but no heap or table: a flat array
 * scanned on every call. */
struct model_bucket {
	struct addr key;
	double tokens;
	uint64_t last;
	bool used;
};

static uint64_t
model_full_at(const struct model_bucket *b, double rate, double burst)
{
	double deficit = burst - b->tokens;

	if (deficit <= 1e-9)
		return b->last;
	return b->last + (uint64_t)ceil(deficit * 1e6 / rate);
}

static bool
model_allow(struct model_bucket *m, size_t cap, const struct addr *key,
    uint64_t now, double rate, double burst)
{
	struct model_bucket *b = NULL;
	size_t i;

	for (i = 0; i < cap; i++)
		if (m[i].used && addr_eq(&m[i].key, key))
			b = &m[i];
	if (b != NULL && model_full_at(b, rate, burst) <= now)
		b->used = false, b = NULL;	/* refilled: same as fresh */
	if (b == NULL) {
		for (i = 0; i < cap && b == NULL; i++)
			if (!m[i].used || model_full_at(&m[i], rate, burst) <= now)
				b = &m[i];
		if (b == NULL)
			return false;
		b->used = true;
		b->key = *key;
		b->tokens = burst;
		b->last = now;
	} else if (now > b->last) {
		b->tokens += (double)(now - b->last) * rate / 1e6;
		if (b->tokens > burst)
			b->tokens = burst;
		b->last = now;
	}
	if (b->tokens >= 1 - 1e-9) {
		b->tokens -= 1;
		if (b->tokens < 0)
			b->tokens = 0;
		return true;
	}
	return false;
}

static uint64_t
xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void
test_against_model(void **state)
{
	enum { CAP = 32, KEYS = 80, STEPS = 200000 };
	struct model_bucket m[CAP];
	struct ratelimit *rl;
	struct addr a;
	uint64_t seed = 0x12345678, now = T0, r;
	unsigned i, allowed = 0, refused = 0;
	bool got, want;

	(void)state;
	memset(m, 0, sizeof(m));
	assert_non_null(rl = rl_new(CAP, 5, 3));
	for (i = 0; i < STEPS; i++) {
		r = xorshift(&seed);
		now += r % 3000;
		a = Ai((unsigned)((r >> 20) % KEYS));
		got = rl_allow(rl, &a, now);
		want = model_allow(m, CAP, &a, now, 5, 3);
		if (got != want)
			fail_msg("step %u: key %u at %llu: got %d, want %d", i,
			    (unsigned)((r >> 20) % KEYS),
			    (unsigned long long)now, got, want);
		assert_true(rl_count(rl) <= CAP);
		if (got)
			allowed++;
		else
			refused++;
	}
	/* The mix exercises both outcomes heavily. */
	assert_true(allowed > STEPS / 10);
	assert_true(refused > STEPS / 10);
	rl_free(rl);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_args),
		cmocka_unit_test(test_burst_and_refill),
		cmocka_unit_test(test_keep),
		cmocka_unit_test(test_sustained_rate),
		cmocka_unit_test(test_refill_rounding),
		cmocka_unit_test(test_fractional_rate),
		cmocka_unit_test(test_keys_independent),
		cmocka_unit_test(test_fail_closed),
		cmocka_unit_test(test_reclaims_refilled_not_oldest),
		cmocka_unit_test(test_count_shrinks),
		cmocka_unit_test(test_flood),
		cmocka_unit_test(test_zero_rate),
		cmocka_unit_test(test_time_backwards),
		cmocka_unit_test(test_set),
		cmocka_unit_test(test_against_model),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
