/* The cover ranking (src/core/cover.c): greedy choices on hand-made
 * overlays with known answers, landmarks by farthest point, and a brute
 * force check of the first choice on random overlays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "slot/cover.h"
#include "slot/rng.h"

#define N COVER_NONE

/* Relays: 0 a1 near the client but far from everything, 1 a2 a little
 * farther from the client but near the landmarks' region, 2 and 3 the
 * landmarks x and y (far from the client), 4 far from all. */
static const uint32_t cr5[5] = { 10, 20, 150, 160, 300 };
static const uint32_t land5[2] = { 2, 3 };
static const uint32_t rl5[5 * 2] = {
	140, 150,	/* a1 */
	30, 40,		/* a2 */
	0, 20,		/* x */
	20, 0,		/* y */
	250, 260,	/* far */
};

static void
test_rank_prefers_the_relay_on_the_way(void **state)
{
	struct cover_input in = { 5, cr5, 2, land5, NULL, rl5, NULL, 0, 0 };
	uint32_t out[5];
	size_t n, ng;
	(void)state;

	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(n, 5);
	/* a2 cuts both landmarks' paths to 30 and 40 ms; after it nobody adds
	 * anything, so the rest come nearest first. */
	assert_int_equal(ng, 1);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 0);
	assert_int_equal(out[2], 2);
	assert_int_equal(out[3], 3);
	assert_int_equal(out[4], 4);
	/* Truncated to max. */
	assert_int_equal(cover_rank(&in, 2, out, &n, NULL), 0);
	assert_int_equal(n, 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 0);
}

/* A server beside relay 3: landmark 5 is the nearest to relay 3 (2 ms), so
 * its row stands for the server, whatever landmark 4's says; the order is
 * by max(RTT(c,r), RTT(r, landmark 5)). */
static const uint32_t cr6[6] = { 10, 50, 100, 60, 150, 120 };
static const uint32_t land6[2] = { 4, 5 };
static const uint32_t rl6[6 * 2] = {
	20, 300,	/* 0: near landmark 4 */
	300, 40,	/* 1 */
	250, 20,	/* 2 */
	200, 2,		/* 3: beside the server */
	0, 250,		/* 4: landmark 4 */
	230, 0,		/* 5: landmark 5 */
};

static void
test_beside(void **state)
{
	struct cover_input in = { 6, cr6, 2, land6, NULL, rl6, NULL, 0, 0 };
	uint32_t out[6], cr[6], rl[6 * 2];
	(void)state;

	assert_int_equal(cover_beside(&in, 3, N, 6, out), 6);
	assert_int_equal(out[0], 1);	/* 50 */
	assert_int_equal(out[1], 3);	/* 60 */
	assert_int_equal(out[2], 2);	/* 100 */
	assert_int_equal(out[3], 5);	/* 120: the landmark itself, 0 from it */
	assert_int_equal(out[4], 4);	/* 250 */
	assert_int_equal(out[5], 0);	/* 300 */
	/* max: the best few only */
	assert_int_equal(cover_beside(&in, 3, N, 2, out), 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 3);
	assert_int_equal(cover_beside(&in, 3, N, 0, out), 0);
	/* Landmark 5 passed over (not_land): landmark 4, at 200 ms from
	 * relay 3, stands for the server instead. */
	assert_int_equal(cover_beside(&in, 3, 5, 1, out), 1);
	assert_int_equal(out[0], 0);	/* max(10, 20) */
	/* Beside a landmark: its own row (relay 4 is landmark 4). */
	assert_int_equal(cover_beside(&in, 4, N, 1, out), 1);
	assert_int_equal(out[0], 0);	/* max(10, 20) */
	/* Unknown RTTs: a relay slotd has no RTT for is left out, and a
	 * relay beside the server whose row is unknown gives nothing. */
	memcpy(cr, cr6, sizeof(cr));
	cr[1] = N;
	in.cr_us = cr;
	assert_int_equal(cover_beside(&in, 3, N, 1, out), 1);
	assert_int_equal(out[0], 3);
	memcpy(rl, rl6, sizeof(rl));
	rl[3 * 2] = rl[3 * 2 + 1] = N;
	in.rl_us = rl;
	assert_int_equal(cover_beside(&in, 3, N, 6, out), 0);
	assert_int_equal(cover_beside(&in, 6, N, 6, out), 0);	/* no such relay */
	/* Ties: the lower index first. */
	memcpy(cr, cr6, sizeof(cr));
	memcpy(rl, rl6, sizeof(rl));
	cr[2] = 50;
	rl[2 * 2 + 1] = 40;
	in.cr_us = cr;
	assert_int_equal(cover_beside(&in, 3, N, 2, out), 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 2);
}

static void
test_rank_skips_unknown(void **state)
{
	uint32_t cr[5];
	struct cover_input in = { 5, cr, 2, land5, NULL, rl5, NULL, 0, 0 };
	uint32_t out[5];
	size_t n, ng;
	(void)state;

	/* a2 unmeasured: never ranked; a1 is then the best for both. */
	memcpy(cr, cr5, sizeof(cr));
	cr[1] = N;
	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(n, 4);
	assert_int_equal(out[0], 0);
	for (size_t i = 0; i < n; i++)
		assert_int_not_equal(out[i], 1);
	/* The landmarks' own RTTs unknown: no landmark counts, nearest first. */
	memcpy(cr, cr5, sizeof(cr));
	cr[2] = cr[3] = N;
	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(ng, 0);
	assert_int_equal(n, 3);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 1);
	assert_int_equal(out[2], 4);
	/* Landmarks that are no relay of ours are left out too. */
	uint32_t land[2] = { N, 7 };
	in.cr_us = cr5;
	in.land_relay = land;
	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(ng, 0);
}

static void
test_rank_weighs_landmarks(void **state)
{
	/* Relay 0 helps landmark 2 only, relay 1 landmark 3 only, by as much.
	 * Landmark 3 stands for five relays: relay 1 goes first. */
	uint32_t cr[4] = { 10, 10, 100, 100 };
	uint32_t land[2] = { 2, 3 };
	uint32_t rl[4 * 2] = { 20, N, N, 20, 0, N, N, 0 };
	float w[2] = { 1, 5 };
	struct cover_input in = { 4, cr, 2, land, w, rl, NULL, 0, 0 };
	uint32_t out[4];
	size_t n, ng;
	(void)state;

	assert_int_equal(cover_rank(&in, 4, out, &n, &ng), 0);
	assert_int_equal(ng, 2);
	assert_int_equal(out[0], 1);
	assert_int_equal(out[1], 0);
	w[1] = 0.5f;
	assert_int_equal(cover_rank(&in, 4, out, &n, &ng), 0);
	assert_int_equal(out[0], 0);
	/* Equal gains: the nearer relay first. */
	w[1] = 1;
	cr[1] = 9;
	assert_int_equal(cover_rank(&in, 4, out, &n, &ng), 0);
	assert_int_equal(out[0], 1);
}

/* On random overlays: the first choice has the largest gain of any single
 * relay (brute force), and every later choice adds something. */
static double
objective(const struct cover_input *in, const uint32_t *set, size_t k)
{
	double sum = 0;

	for (size_t l = 0; l < in->nland; l++) {
		uint32_t d = in->cr_us[in->land_relay[l]], best = d;

		for (size_t x = 0; x < k; x++) {
			uint32_t cr = in->cr_us[set[x]], rl = in->rl_us[set[x] * in->nland + l];
			uint32_t p = rl > cr ? rl : cr;
			if (p < best)
				best = p;
		}
		sum += (double)(d - best) / d;
	}
	return sum;
}

static void
test_rank_greedy_on_random_overlays(void **state)
{
	enum { R = 40, L = 12 };
	uint32_t cr[R], land[L], rl[R * L], out[R];
	struct rng g;
	(void)state;

	rng_seed(&g, 5);
	for (int round = 0; round < 50; round++) {
		struct cover_input in = { R, cr, L, land, NULL, rl, NULL, 0, 0 };
		size_t n, ng;

		for (int i = 0; i < R; i++)
			cr[i] = 1 + (uint32_t)rng_below(&g, 300000);
		for (int l = 0; l < L; l++)
			land[l] = (uint32_t)l;
		for (int i = 0; i < R; i++)
			for (int l = 0; l < L; l++)
				rl[i * L + l] = i == l ? 0 : 1 + (uint32_t)rng_below(&g, 300000);
		assert_int_equal(cover_rank(&in, 8, out, &n, &ng), 0);
		assert_int_equal(n, 8);
		double best = 0;
		for (uint32_t i = 0; i < R; i++) {
			double o = objective(&in, &i, 1);
			if (o > best)
				best = o;
		}
		if (ng > 0)
			assert_true(objective(&in, out, 1) >= best - 1e-6);
		for (size_t x = 1; x < ng; x++)
			assert_true(objective(&in, out, x + 1) > objective(&in, out, x));
	}
}

/* Nodes on a line in three clusters: RTT = distance + 1. */
static const int pos[8] = { 0, 1, 2, 50, 51, 200, 201, 202 };

static uint32_t
line_rtt(void *arg, size_t i, size_t j)
{
	const bool *unmeasured = arg;

	if (unmeasured != NULL && (unmeasured[i] || unmeasured[j]))
		return N;
	return (uint32_t)abs(pos[i] - pos[j]) + 1;
}

static void
test_landmarks_spread_and_weights(void **state)
{
	uint32_t lm[8];
	float w[8];
	size_t n;
	(void)state;

	assert_int_equal(cover_landmarks(8, line_rtt, NULL, 3, NULL, lm, w, &n), 0);
	assert_int_equal(n, 3);
	/* The best measured first (all equal: node 0), then the farthest
	 * from it (202), then the middle: one per cluster. */
	assert_int_equal(lm[0], 0);
	assert_int_equal(lm[1], 7);
	assert_true(lm[2] == 3 || lm[2] == 4);
	float sum = 0;
	for (size_t l = 0; l < n; l++)
		sum += w[l];
	assert_true(sum == 8.0f);
	assert_true(w[0] == 3.0f && w[1] == 3.0f && w[2] == 2.0f);
	/* Last time's landmarks are kept over nodes hardly farther: node 6
	 * (201) over 7 (202), node 1 over 0 (all equally measured). */
	bool prefer[8] = { false, true, false, false, false, false, true, false };
	assert_int_equal(cover_landmarks(8, line_rtt, NULL, 3, prefer, lm, w, &n), 0);
	assert_int_equal(lm[0], 1);
	assert_int_equal(lm[1], 6);
	/* More than there are nodes: every node, each for itself. */
	assert_int_equal(cover_landmarks(8, line_rtt, NULL, 20, NULL, lm, w, &n), 0);
	assert_int_equal(n, 8);
	for (size_t l = 0; l < n; l++)
		assert_true(w[l] == 1.0f);
	/* A node nobody has measured is never a landmark, and counts for none. */
	bool unmeasured[8] = { false };
	unmeasured[7] = true;
	assert_int_equal(cover_landmarks(8, line_rtt, unmeasured, 20, NULL, lm, w, &n), 0);
	assert_int_equal(n, 7);
	sum = 0;
	for (size_t l = 0; l < n; l++) {
		assert_int_not_equal(lm[l], 7);
		sum += w[l];
	}
	assert_true(sum == 7.0f);
	assert_int_equal(cover_landmarks(0, line_rtt, NULL, 4, NULL, lm, w, &n), 0);
	assert_int_equal(n, 0);
}

/* With lead-ins, a relay far from the client but near the landmarks
 * counts as the end of a chain: "far" (cr 300) next to both landmarks (10)
 * with a lead-in of 25 reduces both landmarks' paths to 25, better than a2
 * (30 and 40). Without lead-ins it is not ranked first. */
static void
test_rank_with_lead_ins(void **state)
{
	static const uint32_t rl[5 * 2] = { 140, 150, 30, 40, 0, 20, 20, 0, 10, 10 };
	uint32_t lead[5] = { N, N, N, N, 25 };
	struct cover_input in = { 5, cr5, 2, land5, NULL, rl, NULL, 1.0, 0 };
	uint32_t out[5];
	size_t n, ng;
	(void)state;

	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(out[0], 1);
	in.lead_us = lead;
	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(out[0], 4);
	/* A gain the chain does not meet against the relay alone (25 * 13 >
	 * 300): it counts alone again. */
	in.chain_gain = 13;
	assert_int_equal(cover_rank(&in, 5, out, &n, &ng), 0);
	assert_int_equal(out[0], 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rank_prefers_the_relay_on_the_way),
		cmocka_unit_test(test_rank_skips_unknown),
		cmocka_unit_test(test_beside),
		cmocka_unit_test(test_rank_with_lead_ins),
		cmocka_unit_test(test_rank_weighs_landmarks),
		cmocka_unit_test(test_rank_greedy_on_random_overlays),
		cmocka_unit_test(test_landmarks_spread_and_weights),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
