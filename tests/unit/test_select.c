/* Relay selection (src/core/select.c): sampling strategies and the
 * decision rule, on hand-made cases with known answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <sys/socket.h>

#include "slot/rng.h"
#include "slot/select.h"

#define MS 1000u

/* --- rng --- */

static void
test_rng_reproducible_and_bounded(void **state)
{
	struct rng a, b;
	(void)state;

	rng_seed(&a, 42);
	rng_seed(&b, 42);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(rng_next(&a), rng_next(&b));
	rng_seed(&b, 43);
	assert_true(rng_next(&a) != rng_next(&b));
	for (int i = 0; i < 10000; i++) {
		assert_true(rng_below(&a, 7) < 7);
		double u = rng_unit(&a);
		assert_true(u >= 0.0 && u < 1.0);
	}
	assert_int_equal(rng_below(&a, 1), 0);
}

static void
test_rng_below_is_uniform(void **state)
{
	struct rng r;
	unsigned hist[10] = { 0 };
	(void)state;

	rng_seed(&r, 7);
	for (int i = 0; i < 100000; i++)
		hist[rng_below(&r, 10)]++;
	/* Expected 10000 each, sd ~95: 6 sd either way. */
	for (int i = 0; i < 10; i++)
		assert_true(hist[i] > 9430 && hist[i] < 10570);
}

/* --- sampling --- */

static struct sel_params
params(enum sel_strategy s, unsigned k)
{
	struct sel_params p;

	sel_params_default(&p);
	p.strategy = s;
	p.k = k;
	return p;
}

static void
test_defaults_and_names(void **state)
{
	struct sel_params p;
	enum sel_strategy s;
	(void)state;

	sel_params_default(&p);
	assert_int_equal(p.strategy, SEL_COVER);
	assert_int_equal(p.k, 20);
	assert_int_equal(sel_strategy_parse("cover", &s), 0);
	assert_int_equal(s, SEL_COVER);
	assert_string_equal(sel_strategy_name(SEL_COVER), "cover");
	assert_true(p.c_wait == 1.25 && p.min_gain == 1.1);
	assert_true(p.max_chain == 3 && p.chain_gain == 1.1);
	assert_int_equal(sel_strategy_parse("randgroup", &s), 0);
	assert_int_equal(s, SEL_RANDGROUP_K);
	assert_int_equal(sel_strategy_parse("random", &s), 0);
	assert_int_equal(s, SEL_RANDOM_K);
	assert_int_equal(sel_strategy_parse("all", &s), 0);
	assert_int_equal(s, SEL_ALL);
	assert_int_equal(sel_strategy_parse("best", &s), -1);
	assert_string_equal(sel_strategy_name(SEL_RANDOM_K), "random");
}

static void
test_select_all_skips_unusable(void **state)
{
	struct sel_candidate c[5] = {
		{ 0, true, 0, 0 }, { 0, false, 0, 0 }, { 1, true, 0, 0 }, { 2, false, 0, 0 }, { 2, true, 0, 0 },
	};
	struct sel_params p = params(SEL_ALL, 1);
	struct rng r;
	uint32_t out[5];
	size_t n;
	(void)state;

	rng_seed(&r, 1);
	assert_int_equal(sel_sample(&p, c, 5, &r, out, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 2);
	assert_int_equal(out[2], 4);
}

/* A v6 connection samples only relays with a v6 data endpoint, whatever
 * their groups; with none, the filter says so (slotd goes direct with that
 * reason). */
static void
test_family_filter(void **state)
{
	struct sel_candidate c[5] = {
		{ 0, true, 0, AF_INET }, { 0, true, 0, AF_INET6 }, { 1, true, 0, AF_INET },
		{ 1, false, 0, AF_INET6 }, { 2, true, 0, AF_INET6 },
	};
	struct sel_candidate v4only[2] = { { 0, true, 0, AF_INET }, { 1, true, 0, AF_INET } };
	struct sel_params p = params(SEL_RANDGROUP_K, 3);
	struct rng r;
	uint32_t out[5];
	size_t n;
	(void)state;

	rng_seed(&r, 7);
	assert_int_equal(sel_keep_family(c, 5, AF_INET6), 3);
	assert_false(c[0].usable);
	assert_true(c[1].usable);
	assert_false(c[2].usable);
	assert_false(c[3].usable);	/* stays unusable */
	assert_true(c[4].usable);
	assert_int_equal(sel_sample(&p, c, 5, &r, out, &n), 0);
	assert_int_equal(n, 2);		/* group 1's only v6 relay is down */
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 4);
	/* no v6 relay at all */
	assert_int_equal(sel_keep_family(v4only, 2, AF_INET6), 0);
	assert_false(v4only[0].usable || v4only[1].usable);
	assert_int_equal(sel_sample(&p, v4only, 2, &r, out, &n), 0);
	assert_int_equal(n, 0);
}

static void
test_random_k(void **state)
{
	struct sel_candidate c[100];
	struct sel_params p = params(SEL_RANDOM_K, 10);
	struct rng r1, r2;
	uint32_t a[100], b[100];
	size_t na, nb;
	(void)state;

	for (int i = 0; i < 100; i++)
		c[i] = (struct sel_candidate){ (uint32_t)i, i % 10 != 3, 0, 0 };
	rng_seed(&r1, 9);
	rng_seed(&r2, 9);
	assert_int_equal(sel_sample(&p, c, 100, &r1, a, &na), 0);
	assert_int_equal(sel_sample(&p, c, 100, &r2, b, &nb), 0);
	assert_int_equal(na, 10);
	assert_memory_equal(a, b, sizeof(a[0]) * 10);	/* same seed, same sample */
	for (size_t i = 0; i < na; i++) {
		assert_true(c[a[i]].usable);
		if (i)
			assert_true(a[i] > a[i - 1]);	/* sorted, so distinct */
	}
	/* Fewer usable than k: all of them. */
	p.k = 1000;
	assert_int_equal(sel_sample(&p, c, 100, &r1, a, &na), 0);
	assert_int_equal(na, 90);
}

static void
test_randgroup_one_per_group(void **state)
{
	/* 12 groups of 5 relays; group 11 entirely unusable. */
	struct sel_candidate c[60];
	struct sel_params p = params(SEL_RANDGROUP_K, 4);
	struct rng r;
	uint32_t out[60];
	size_t n;
	(void)state;

	for (int i = 0; i < 60; i++)
		c[i] = (struct sel_candidate){ (uint32_t)(100 + i / 5), i / 5 != 11, 0, 0 };
	rng_seed(&r, 3);
	for (int trial = 0; trial < 200; trial++) {
		assert_int_equal(sel_sample(&p, c, 60, &r, out, &n), 0);
		assert_int_equal(n, 4);
		for (size_t i = 0; i < n; i++) {
			assert_true(c[out[i]].usable);
			for (size_t j = 0; j < i; j++)
				assert_true(c[out[i]].group != c[out[j]].group);
		}
	}
	/* More groups asked than exist: every usable group once. */
	p.k = 50;
	assert_int_equal(sel_sample(&p, c, 60, &r, out, &n), 0);
	assert_int_equal(n, 11);
}

static void
test_randgroup_is_fair(void **state)
{
	/* Group sizes 1, 2 and 7; k = 1: each group is chosen a third of the
	 * time whatever its size, and each member of a group equally often. */
	struct sel_candidate c[10];
	struct sel_params p = params(SEL_RANDGROUP_K, 1);
	struct rng r;
	unsigned per_group[3] = { 0 }, per_relay[10] = { 0 };
	uint32_t out[10];
	size_t n;
	(void)state;

	for (int i = 0; i < 10; i++)
		c[i] = (struct sel_candidate){ i == 0 ? 0u : i < 3 ? 1u : 2u, true, 0, 0 };
	rng_seed(&r, 11);
	for (int t = 0; t < 30000; t++) {
		assert_int_equal(sel_sample(&p, c, 10, &r, out, &n), 0);
		assert_int_equal(n, 1);
		per_group[c[out[0]].group]++;
		per_relay[out[0]]++;
	}
	for (int g = 0; g < 3; g++)	/* 10000 each, sd ~82 */
		assert_true(per_group[g] > 9500 && per_group[g] < 10500);
	for (int i = 3; i < 10; i++)	/* 10000/7 = 1429 each, sd ~37 */
		assert_true(per_relay[i] > 1200 && per_relay[i] < 1660);
}

static void
test_cover_takes_lowest_ranks(void **state)
{
	struct sel_candidate c[8];
	struct sel_params p = params(SEL_COVER, 3);
	struct rng r;
	uint32_t out[8];
	size_t n;
	(void)state;

	/* Ranks 0..7 in reverse index order; the rank-0 relay is down. */
	for (int i = 0; i < 8; i++)
		c[i] = (struct sel_candidate){ 0, i != 7, (uint32_t)(7 - i), 0 };
	rng_seed(&r, 1);
	assert_int_equal(sel_sample(&p, c, 8, &r, out, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(out[0], 4);	/* ranks 3, 2, 1: sorted by index */
	assert_int_equal(out[1], 5);
	assert_int_equal(out[2], 6);
	/* Two ranked relays only: the third is a random unranked one. */
	for (int i = 0; i < 8; i++)
		c[i] = (struct sel_candidate){ 0, true, i == 2 ? 0 : i == 5 ? 1 : SEL_NO_RANK, 0 };
	for (int round = 0; round < 20; round++) {
		assert_int_equal(sel_sample(&p, c, 8, &r, out, &n), 0);
		assert_int_equal(n, 3);
		bool has2 = false, has5 = false;
		for (size_t i = 0; i < n; i++) {
			has2 |= out[i] == 2;
			has5 |= out[i] == 5;
			if (i)
				assert_true(out[i] > out[i - 1]);
		}
		assert_true(has2 && has5);
	}
	/* No ranking at all: Random-k. */
	for (int i = 0; i < 8; i++)
		c[i] = (struct sel_candidate){ 0, i % 2 == 0, SEL_NO_RANK, 0 };
	assert_int_equal(sel_sample(&p, c, 8, &r, out, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		assert_true(c[out[i]].usable);
	p.k = 10;
	assert_int_equal(sel_sample(&p, c, 8, &r, out, &n), 0);
	assert_int_equal(n, 4);
}

static void
test_sample_empty(void **state)
{
	struct sel_params p = params(SEL_RANDGROUP_K, 50);
	struct rng r;
	uint32_t out[1];
	size_t n = 99;
	(void)state;

	rng_seed(&r, 1);
	assert_int_equal(sel_sample(&p, NULL, 0, &r, out, &n), 0);
	assert_int_equal(n, 0);
}

/* --- decisions --- */

static struct sel_reply
reply(uint32_t relay, uint32_t cr_ms, uint32_t rs_ms, uint64_t at_ms)
{
	return (struct sel_reply){ .relay = relay, .reached = true, .rtt_cr_us = cr_ms * MS,
	    .rtt_rs_us = rs_ms * MS, .at_us = at_ms * MS };
}

static struct sel_result
decide(enum sel_direct d, uint32_t direct_ms, const struct sel_reply *rep, size_t nrep,
    size_t nprobed, uint64_t now_ms)
{
	struct sel_params p;
	struct sel_state s = { .direct = d, .rtt_direct_us = direct_ms * MS, .replies = rep,
	    .nreplies = nrep, .nprobed = nprobed, .now_us = now_ms * MS };
	struct sel_result r;

	sel_params_default(&p);
	sel_decide(&p, &s, &r);
	return r;
}

static void
test_triangle_picks_relay(void **state)
{
	/* Direct 80 ms; relay 40 + 40: the paper's triangle. */
	struct sel_reply r[] = { reply(7, 40, 40, 42) };
	struct sel_result o = decide(SEL_DIRECT_OK, 80, r, 1, 1, 80);
	(void)state;

	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 7);
	assert_int_equal(o.path_rtt_us, 40 * MS);
}

static void
test_min_gain_keeps_direct(void **state)
{
	/* 80 / 75 = 1.07 < 1.1: not worth it. 80 / 72 = 1.11: worth it. */
	struct sel_reply r[] = { reply(1, 75, 30, 76) };
	(void)state;

	assert_int_equal(decide(SEL_DIRECT_OK, 80, r, 1, 1, 80).verdict, SEL_GO_DIRECT);
	r[0] = reply(1, 72, 30, 73);
	assert_int_equal(decide(SEL_DIRECT_OK, 80, r, 1, 1, 80).verdict, SEL_GO_RELAY);
}

static void
test_min_max_not_sum(void **state)
{
	/* The path RTT is the slower loop, not the sum: 30/60 (max 60) beats
	 * 50/50 (max 50)? No: 50 < 60, the balanced relay wins. */
	struct sel_reply r[] = { reply(1, 30, 60, 31), reply(2, 50, 50, 51) };
	struct sel_result o = decide(SEL_DIRECT_OK, 200, r, 2, 2, 200);
	(void)state;

	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 2);
	assert_int_equal(o.path_rtt_us, 50 * MS);
}

static void
test_triangle_violation(void **state)
{
	/* A relay whose two legs are each shorter than the direct path, and
	 * whose sum is longer: still a win for loop shortening. */
	struct sel_reply r[] = { reply(4, 60, 60, 61) };
	struct sel_result o = decide(SEL_DIRECT_OK, 100, r, 1, 1, 100);
	(void)state;

	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.path_rtt_us, 60 * MS);
}

static void
test_waits_until_deadline(void **state)
{
	struct sel_reply r[] = { reply(1, 55, 30, 86) };
	(void)state;

	/* 2 probed, 1 in (path 55), before 1.25 * 80 = 100 ms: the other could
	 * still be better until 2 * 55 = 110 ms, past the deadline: wait until
	 * 100 ms. */
	struct sel_result o = decide(SEL_DIRECT_OK, 80, r, 1, 2, 90);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 100 * MS);
	/* At the deadline: decide with what came in. */
	o = decide(SEL_DIRECT_OK, 80, r, 1, 2, 100);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
}

static void
test_settled_before_the_rest(void **state)
{
	/* Direct 200 ms (deadline 250). Relay 1 (30 + 30) answered at 60 ms;
	 * 3 more probed. A reply still due at t has cr + rs > t, so a path
	 * above t/2: at 59 ms one could still beat 30 ms, from 60 ms none. */
	struct sel_reply r[] = { reply(1, 30, 30, 60) };
	struct sel_result o;
	(void)state;

	o = decide(SEL_DIRECT_OK, 200, r, 1, 4, 59);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 60 * MS);
	o = decide(SEL_DIRECT_OK, 200, r, 1, 4, 60);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 1);
	/* Direct still out at 60 ms (so RTT_direct > 60 >= 1.1 * 30): the relay
	 * wins now too, instead of waiting for the three stragglers. */
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 4, 60);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	/* A better relay that answered later is still taken while unsettled:
	 * relay 2 (20 + 25) at 45 ms; relay 1 not yet in. */
	struct sel_reply r2[] = { reply(2, 20, 25, 45), reply(1, 30, 30, 60) };
	o = decide(SEL_DIRECT_OK, 200, r2, 1, 4, 45);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 50 * MS);
	o = decide(SEL_DIRECT_OK, 200, r2, 2, 4, 60);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 2);
	/* Settled on a relay that does not gain enough: direct, at once. */
	struct sel_reply r3[] = { reply(3, 95, 10, 105) };
	o = decide(SEL_DIRECT_OK, 100, r3, 1, 4, 106);
	assert_int_equal(o.verdict, SEL_WAIT);	/* settles at 190, deadline 125 */
	assert_int_equal(o.wake_us, 125 * MS);
	/* No reply reached the server: nothing settles before the deadline. */
	r3[0].reached = false;
	o = decide(SEL_DIRECT_OK, 100, r3, 1, 4, 106);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 125 * MS);
}

static void
test_late_reply_ignored(void **state)
{
	/* The better relay answered after the deadline (1.25 * 80 = 100). */
	struct sel_reply r[] = { reply(1, 60, 60, 61), reply(2, 20, 20, 130) };
	struct sel_result o = decide(SEL_DIRECT_OK, 80, r, 2, 2, 130);
	(void)state;

	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 1);
}

static void
test_all_in_decides_early(void **state)
{
	struct sel_reply r[] = { reply(1, 40, 40, 41), reply(2, 45, 45, 46) };
	struct sel_result o = decide(SEL_DIRECT_OK, 80, r, 2, 2, 80);
	(void)state;

	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 1);
}

static void
test_no_relay_reached(void **state)
{
	struct sel_reply r[] = { reply(1, 10, 10, 11) };
	(void)state;

	r[0].reached = false;
	assert_int_equal(decide(SEL_DIRECT_OK, 80, r, 1, 1, 80).verdict, SEL_GO_DIRECT);
	assert_int_equal(decide(SEL_DIRECT_OK, 80, NULL, 0, 0, 80).verdict, SEL_GO_DIRECT);
}

static void
test_ties(void **state)
{
	/* Equal path RTT: the shorter first hop, then the lower index. */
	struct sel_reply r[] = { reply(5, 40, 40, 41), reply(3, 30, 40, 31), reply(2, 30, 40, 32) };
	struct sel_result o = decide(SEL_DIRECT_OK, 100, r, 3, 3, 100);
	(void)state;

	assert_int_equal(o.relay, 2);
}

static void
test_refused_goes_direct(void **state)
{
	struct sel_reply r[] = { reply(1, 10, 10, 11) };
	(void)state;

	assert_int_equal(decide(SEL_DIRECT_REFUSED, 0, r, 1, 1, 20).verdict, SEL_GO_DIRECT);
}

static void
test_repair_when_direct_fails(void **state)
{
	struct sel_reply r[] = { reply(1, 50, 70, 71), reply(2, 40, 60, 61) };
	struct sel_result o;
	(void)state;

	/* Direct unreachable, one reply still due: wait until the one in hand
	 * (path 70) is settled, 140 ms (repair_timeout 3 s is later). */
	o = decide(SEL_DIRECT_FAILED, 0, r, 1, 2, 70);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 140 * MS);
	o = decide(SEL_DIRECT_FAILED, 0, r, 1, 2, 140);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 1);
	o = decide(SEL_DIRECT_FAILED, 0, NULL, 0, 2, 140);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 3000 * MS);
	/* All in: the best relay that reached the server. */
	o = decide(SEL_DIRECT_FAILED, 0, r, 2, 2, 75);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 2);
	/* Nobody reached it, at repair_timeout: direct, the app sees the error. */
	r[0].reached = r[1].reached = false;
	o = decide(SEL_DIRECT_FAILED, 0, r, 2, 3, 3000);
	assert_int_equal(o.verdict, SEL_GO_DIRECT);
}

static void
test_direct_pending_relay_sure_to_win(void **state)
{
	struct sel_reply r[] = { reply(1, 20, 20, 21) };
	struct sel_result o;
	(void)state;

	/* At 21 ms the direct probe is still out: RTT_direct > 21 ms, not yet
	 * enough to be sure (needs 1.1 * 20 = 22 ms). */
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 1, 21);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 22 * MS);
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 1, 22);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	/* Replies still due: wait until they cannot win (2 * 20 ms). */
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 2, 30);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 40 * MS);
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 2, 40);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	/* Nothing in hand: the repair timeout. */
	o = decide(SEL_DIRECT_PENDING, 0, NULL, 0, 2, 30);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 3000 * MS);
	/* Silent direct path at repair_timeout: repaired. */
	o = decide(SEL_DIRECT_PENDING, 0, r, 1, 2, 3000);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
}

/* --- chains --- */

static struct sel_reply
chain_reply(uint32_t relay, uint32_t cr_ms, uint32_t rs_ms, uint64_t at_ms, uint32_t lead_ms)
{
	struct sel_reply r = reply(relay, cr_ms, rs_ms, at_ms);

	r.rtt_lead_us = lead_ms * MS;
	return r;
}

static struct sel_result
decide_chain(unsigned max_chain, double gain, enum sel_direct d, uint32_t direct_ms,
    const struct sel_reply *rep, size_t nrep, size_t nprobed, const struct sel_due *due,
    size_t ndue, uint64_t now_ms)
{
	struct sel_params p;
	struct sel_state s = { .direct = d, .rtt_direct_us = direct_ms * MS, .replies = rep,
	    .nreplies = nrep, .nprobed = nprobed, .now_us = now_ms * MS, .due = due,
	    .ndue = ndue };
	struct sel_result r;

	sel_params_default(&p);
	p.max_chain = max_chain;
	p.chain_gain = gain;
	sel_decide(&p, &s, &r);
	return r;
}

static void
test_chain_taken_by_gain(void **state)
{
	/* Direct 200 ms. Relay 1: 100 + 100. Relay 2 is near the server (30)
	 * but 180 from the client; its lead-in is 40: chain path 40. */
	struct sel_reply r[] = { reply(1, 100, 100, 200), chain_reply(2, 180, 30, 210, 40) };
	struct sel_result o;
	(void)state;

	o = decide_chain(3, 1.25, SEL_DIRECT_OK, 300, r, 2, 2, NULL, 0, 210);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_int_equal(o.relay, 2);
	assert_true(o.chain);
	assert_int_equal(o.path_rtt_us, 40 * MS);
	/* 40 * 2.5 = 100 <= 100 still; 40 * 2.6 > 100: the single relay. */
	o = decide_chain(3, 2.5, SEL_DIRECT_OK, 300, r, 2, 2, NULL, 0, 210);
	assert_true(o.chain && o.relay == 2);
	o = decide_chain(3, 2.6, SEL_DIRECT_OK, 300, r, 2, 2, NULL, 0, 210);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_false(o.chain);
	assert_int_equal(o.relay, 1);
	assert_int_equal(o.path_rtt_us, 100 * MS);
	/* max_chain 1: lead-ins are not read. */
	o = decide_chain(1, 1.0, SEL_DIRECT_OK, 300, r, 2, 2, NULL, 0, 210);
	assert_false(o.chain);
	assert_int_equal(o.relay, 1);
	/* A chain never ties a single relay: lead 100 gives path 100. */
	r[1].rtt_lead_us = 100 * MS;
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 300, r, 2, 2, NULL, 0, 210);
	assert_false(o.chain);
	/* The chain's path counts against min_gain: direct 44 / 40 = 1.1. */
	r[1].rtt_lead_us = 40 * MS;
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 44, r, 2, 2, NULL, 0, 210);
	assert_int_equal(o.verdict, SEL_GO_DIRECT);	/* arrived after 1.25 * 44 */
	r[1].at_us = 50 * MS;
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 44, r + 1, 1, 1, NULL, 0, 50);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_true(o.chain);
}

static void
test_chain_settled_waits_for_late_chain_end(void **state)
{
	/* Direct 400 ms. Relay 1 answered at 50: path 25. Relay 2 is due:
	 * 200 ms from the client, lead-in 20: its chain may reach 20. The
	 * single-relay rule alone would settle at 2 * 25 = 50. */
	struct sel_reply r[] = { reply(1, 25, 25, 50), chain_reply(2, 200, 15, 215, 20) };
	struct sel_due due[] = { { 20 * MS, 200 * MS } };
	struct sel_result o;
	(void)state;

	o = decide_chain(1, 1.0, SEL_DIRECT_OK, 400, r, 1, 2, due, 1, 50);
	assert_int_equal(o.verdict, SEL_GO_RELAY);	/* no chains: settled */
	/* With chains (gain 1): its chain path is at least t - 200, which
	 * reaches 25 at t = 225. */
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 400, r, 1, 2, due, 1, 50);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 225 * MS);
	/* Its reply at 215: the chain, 20. */
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 400, r, 2, 2, NULL, 0, 215);
	assert_true(o.verdict == SEL_GO_RELAY && o.chain && o.relay == 2);
	assert_int_equal(o.path_rtt_us, 20 * MS);
	/* Gain 2: 20 * 2 > 25 would never be taken: settled at once. */
	o = decide_chain(3, 2.0, SEL_DIRECT_OK, 400, r, 1, 2, due, 1, 50);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_false(o.chain);
	/* Gain 1.2: 20 * 1.2 = 24 <= 25: waits until 200 + 25 / 1.2 = 221 ms
	 * (rounded up to the microsecond). */
	o = decide_chain(3, 1.2, SEL_DIRECT_OK, 400, r, 1, 2, due, 1, 50);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 200 * MS + 20834);
	o = decide_chain(3, 1.2, SEL_DIRECT_OK, 400, r, 1, 2, due, 1, 221);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	/* The wait rule still bounds it: direct 100, deadline 125. */
	o = decide_chain(3, 1.0, SEL_DIRECT_OK, 100, r, 1, 2, due, 1, 50);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 125 * MS);
}

static void
test_chain_in_hand_settles(void **state)
{
	/* Gain 1.3. Relay 2 (cr 50, rs 10, lead-in 30) answers first: chain
	 * 30 against its own single path 50. A single reply still due beats
	 * the chain only while t/2 < 30 * 1.3 = 39; a chain due (lead 25, cr
	 * 100) while t - 100 < 30. */
	struct sel_reply r[] = { chain_reply(2, 50, 10, 60, 30), reply(1, 40, 40, 80) };
	struct sel_due due[] = { { 25 * MS, 100 * MS } };
	struct sel_result o;
	(void)state;

	o = decide_chain(3, 1.3, SEL_DIRECT_FAILED, 0, r, 1, 3, NULL, 0, 70);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 78 * MS);
	/* Relay 1's single path 40 is in: 30 * 1.3 <= 40, the chain stays. */
	o = decide_chain(3, 1.3, SEL_DIRECT_FAILED, 0, r, 2, 3, NULL, 0, 80);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_true(o.chain);
	o = decide_chain(3, 1.3, SEL_DIRECT_FAILED, 0, r, 2, 3, due, 1, 80);
	assert_int_equal(o.verdict, SEL_WAIT);
	assert_int_equal(o.wake_us, 130 * MS);
	o = decide_chain(3, 1.3, SEL_DIRECT_FAILED, 0, r, 2, 3, due, 1, 130);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
	assert_true(o.chain);
	assert_int_equal(o.relay, 2);
	assert_string_equal(o.why, "path repaired by a chain");
	/* A lead-in above the chain in hand cannot beat it: settled. */
	due[0].lead_us = 31 * MS;
	o = decide_chain(3, 1.3, SEL_DIRECT_FAILED, 0, r, 2, 3, due, 1, 80);
	assert_int_equal(o.verdict, SEL_GO_RELAY);
}

static void
test_chain_of_three_pays_the_gain(void **state)
{
	/* Relay 1 alone 100; its lead-in through one relay 50, through two
	 * 44: 44 * 1.1 = 48.4 <= 50, three relays; 46 * 1.1 > 50, two. */
	struct sel_reply r[] = { chain_reply(1, 100, 20, 120, 44) };
	struct sel_result o;
	(void)state;

	r[0].rtt_lead1_us = 50 * MS;
	o = decide_chain(3, 1.1, SEL_DIRECT_OK, 300, r, 1, 1, NULL, 0, 120);
	assert_int_equal(o.chain, 3);
	assert_int_equal(o.path_rtt_us, 44 * MS);
	r[0].rtt_lead_us = 46 * MS;
	o = decide_chain(3, 1.1, SEL_DIRECT_OK, 300, r, 1, 1, NULL, 0, 120);
	assert_int_equal(o.chain, 2);
	assert_int_equal(o.path_rtt_us, 50 * MS);
	/* max_chain 2: never three. */
	r[0].rtt_lead_us = 30 * MS;
	o = decide_chain(2, 1.1, SEL_DIRECT_OK, 300, r, 1, 1, NULL, 0, 120);
	assert_int_equal(o.chain, 2);
	assert_int_equal(o.path_rtt_us, 50 * MS);
	/* The server loop dominates both: the shorter chain, 60. */
	r[0].rtt_rs_us = 60 * MS;
	o = decide_chain(3, 1.1, SEL_DIRECT_OK, 300, r, 1, 1, NULL, 0, 120);
	assert_int_equal(o.chain, 2);
	assert_int_equal(o.path_rtt_us, 60 * MS);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_chain_taken_by_gain),
		cmocka_unit_test(test_chain_settled_waits_for_late_chain_end),
		cmocka_unit_test(test_chain_in_hand_settles),
		cmocka_unit_test(test_chain_of_three_pays_the_gain),
		cmocka_unit_test(test_rng_reproducible_and_bounded),
		cmocka_unit_test(test_rng_below_is_uniform),
		cmocka_unit_test(test_defaults_and_names),
		cmocka_unit_test(test_select_all_skips_unusable),
		cmocka_unit_test(test_family_filter),
		cmocka_unit_test(test_random_k),
		cmocka_unit_test(test_randgroup_one_per_group),
		cmocka_unit_test(test_randgroup_is_fair),
		cmocka_unit_test(test_sample_empty),
		cmocka_unit_test(test_triangle_picks_relay),
		cmocka_unit_test(test_min_gain_keeps_direct),
		cmocka_unit_test(test_min_max_not_sum),
		cmocka_unit_test(test_triangle_violation),
		cmocka_unit_test(test_waits_until_deadline),
		cmocka_unit_test(test_settled_before_the_rest),
		cmocka_unit_test(test_late_reply_ignored),
		cmocka_unit_test(test_all_in_decides_early),
		cmocka_unit_test(test_no_relay_reached),
		cmocka_unit_test(test_cover_takes_lowest_ranks),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_refused_goes_direct),
		cmocka_unit_test(test_repair_when_direct_fails),
		cmocka_unit_test(test_direct_pending_relay_sure_to_win),
	};
	return cmocka_run_group_tests_name("select", tests, NULL, NULL);
}
