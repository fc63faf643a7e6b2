/* Chains of relays (src/core/chain.c): lead-ins on a hand-checked overlay,
 * the landmark rule (a relay-to-relay RTT is known only when one end is a
 * landmark), relays to avoid, relays that may end a chain but not forward
 * one, and a brute force over every lead-in of up to two relays on random
 * overlays. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "slot/chain.h"
#include "slot/rng.h"

#define N CHAIN_NONE

/* Four relays, 0 and 1 landmarks. The client is near 2 (cr 10) and far
 * from 3 (cr 200); 3 is near landmark 1 (30), 1 is near 2 (25) and far
 * from the client (120); 0 is in the middle (cr 60, 0-3 is 50). */
static const uint32_t cr4[4] = { 60, 120, 10, 200 };
static const uint32_t land4[2] = { 0, 1 };
static const uint32_t rl4[4 * 2] = {
	0, 90,		/* 0 */
	90, 0,		/* 1 */
	70, 25,		/* 2 */
	50, 30,		/* 3 */
};

static void
test_reach_by_hand(void **state)
{
	struct chain_input in = { 4, cr4, 2, land4, rl4, 2, NULL, NULL };
	struct chain_lead r[4];
	(void)state;

	/* One relay before: to 3 through 0 is max(60, 50) = 60, through 1
	 * max(120, 30) = 120, through 2: 2-3 unknown (neither a landmark). */
	assert_int_equal(chain_reach(&in, r), 0);
	assert_int_equal(r[3].us, 60);
	assert_int_equal(r[3].nvia, 1);
	assert_int_equal(r[3].via[0], 0);
	/* To 1: through 2 (a non-landmark, 1 is one) max(10, 25) = 25. */
	assert_int_equal(r[1].us, 25);
	assert_int_equal(r[1].via[0], 2);
	/* To 0: through 2, max(10, 70) = 70; through 3 (200) or 1 (120) worse. */
	assert_int_equal(r[0].us, 70);
	assert_int_equal(r[0].via[0], 2);
	/* To 2: through 0 max(60, 70) = 70, through 1 max(120, 25) = 120. */
	assert_int_equal(r[2].us, 70);
	assert_int_equal(r[2].via[0], 0);

	/* Two relays before: 3 through 2 then 1: max(10, 25, 30) = 30. */
	in.max_chain = 3;
	assert_int_equal(chain_reach(&in, r), 0);
	assert_int_equal(r[3].us, 30);
	assert_int_equal(r[3].nvia, 2);
	assert_int_equal(r[3].via[0], 2);
	assert_int_equal(r[3].via[1], 1);
	/* The best through one relay alone is kept beside it. */
	assert_int_equal(r[3].us1, 60);
	assert_int_equal(r[3].via1, 0);
	/* Ties go to fewer relays: 1 stays at 25 through 2 alone. */
	assert_int_equal(r[1].us, 25);
	assert_int_equal(r[1].nvia, 1);
	/* 0 through 2, 1: max(10, 25, 90) = 90 > 70: one relay stays. */
	assert_int_equal(r[0].us, 70);
	assert_int_equal(r[0].nvia, 1);

	/* No chains: no lead-ins. */
	in.max_chain = 1;
	assert_int_equal(chain_reach(&in, r), 0);
	for (int j = 0; j < 4; j++) {
		assert_int_equal(r[j].us, N);
		assert_int_equal(r[j].nvia, 0);
	}
	in.max_chain = 4;
	assert_int_equal(chain_reach(&in, r), -1);
}

static void
test_reach_avoids_and_unknowns(void **state)
{
	struct chain_input in = { 4, cr4, 2, land4, rl4, 3, NULL, NULL };
	bool avoid[4] = { false, true, false, false };
	uint32_t cr[4];
	struct chain_lead r[4];
	(void)state;

	/* Without relay 1, 3 is reached through 0 only (2-0-3 is 70). */
	in.avoid = avoid;
	assert_int_equal(chain_reach(&in, r), 0);
	assert_int_equal(r[3].us, 60);
	assert_int_equal(r[3].nvia, 1);
	assert_int_equal(r[1].us, N);	/* avoided: no lead-in to it */
	/* An unknown client RTT: the relay cannot start a lead-in. */
	memcpy(cr, cr4, sizeof(cr));
	cr[2] = N;
	in.avoid = NULL;
	in.cr_us = cr;
	assert_int_equal(chain_reach(&in, r), 0);
	/* 1 through 0 is max(60, 90); through 0 then 3 max(60, 50, 30). */
	assert_int_equal(r[1].us, 60);
	assert_int_equal(r[1].nvia, 2);
	assert_int_equal(r[1].via[0], 0);
	assert_int_equal(r[1].via[1], 3);
	/* Without landmarks nothing is known between relays. */
	in.cr_us = cr4;
	in.nland = 0;
	assert_int_equal(chain_reach(&in, r), 0);
	for (int j = 0; j < 4; j++)
		assert_int_equal(r[j].us, N);
}

/* A relay that does not take chains (slotd: it has not said so on its
 * link) is on no lead-in, but still ends one: the relay before it sends it
 * a plain PIPE_ESTABLISH. */
static void
test_reach_no_forward(void **state)
{
	struct chain_input in = { 4, cr4, 2, land4, rl4, 2, NULL, NULL };
	bool nofwd[4] = { true, false, false, false };
	struct chain_lead r[4];
	(void)state;

	/* 3 was best through 0 (60); now through 1 alone, max(120, 30). */
	in.no_forward = nofwd;
	assert_int_equal(chain_reach(&in, r), 0);
	assert_int_equal(r[3].us, 120);
	assert_int_equal(r[3].nvia, 1);
	assert_int_equal(r[3].via[0], 1);
	assert_int_equal(r[3].us1, 120);
	assert_int_equal(r[3].via1, 1);
	/* 0 itself still ends one, through 2 (70). */
	assert_int_equal(r[0].us, 70);
	assert_int_equal(r[0].via[0], 2);
	/* 2 was reached through 0 (70); through 1 now, max(120, 25). */
	assert_int_equal(r[2].us, 120);
	assert_int_equal(r[2].via[0], 1);

	/* Three relays: 3's best was 2 > 1 > 3 (30). With 1 forwarding
	 * nothing, 2 > 0 > 3 is max(10, 70, 50) = 70, worse than 0 alone
	 * (60): one relay before it. 1 still ends a lead-in through 2. */
	nofwd[0] = false;
	nofwd[1] = true;
	in.max_chain = 3;
	assert_int_equal(chain_reach(&in, r), 0);
	assert_int_equal(r[3].us, 60);
	assert_int_equal(r[3].nvia, 1);
	assert_int_equal(r[3].via[0], 0);
	assert_int_equal(r[1].us, 25);
	assert_int_equal(r[1].via[0], 2);
	/* No relay takes chains: no lead-ins at all. */
	for (int j = 0; j < 4; j++)
		nofwd[j] = true;
	assert_int_equal(chain_reach(&in, r), 0);
	for (int j = 0; j < 4; j++) {
		assert_int_equal(r[j].us, N);
		assert_int_equal(r[j].nvia, 0);
		assert_int_equal(r[j].us1, N);
	}
}

static uint32_t
mx(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

/* Every lead-in of one or two relays, checked against chain_reach, and
 * the lead-in it names has the bottleneck it says. */
static void
test_reach_brute_force(void **state)
{
	struct rng rng;
	(void)state;

	rng_seed(&rng, 17);
	for (int round = 0; round < 60; round++) {
		size_t n = 2 + (size_t)rng_below(&rng, 14), L = (size_t)rng_below(&rng, n + 1);
		uint32_t *cr = malloc(n * sizeof(*cr)), *lr = malloc((L + 1) * sizeof(*lr));
		uint32_t *rl = malloc((n * L + 1) * sizeof(*rl)), *lo = malloc(n * sizeof(*lo));
		struct chain_lead *r = malloc(n * sizeof(*r));
		bool *avoid = calloc(n, sizeof(*avoid)), *nofwd = calloc(n, sizeof(*nofwd));
		size_t *perm = malloc(n * sizeof(*perm));

		assert_non_null(cr);
		assert_non_null(lr);
		assert_non_null(rl);
		assert_non_null(lo);
		assert_non_null(r);
		assert_non_null(avoid);
		assert_non_null(nofwd);
		assert_non_null(perm);
		for (size_t i = 0; i < n; i++)
			perm[i] = i;
		for (size_t i = 0; i < n; i++) {
			size_t j = i + (size_t)rng_below(&rng, n - i), t = perm[i];
			perm[i] = perm[j];
			perm[j] = t;
			cr[i] = rng_below(&rng, 8) == 0 ? N : 1 + (uint32_t)rng_below(&rng, 300);
			avoid[i] = rng_below(&rng, 10) == 0;
			nofwd[i] = rng_below(&rng, 4) == 0;
		}
		for (size_t l = 0; l < L; l++)
			lr[l] = (uint32_t)perm[l];
		for (size_t i = 0; i < n; i++)
			for (size_t l = 0; l < L; l++)
				rl[i * L + l] = lr[l] == i ? 0 : rng_below(&rng, 8) == 0 ? N :
				    1 + (uint32_t)rng_below(&rng, 300);
		for (unsigned mc = 2; mc <= 3; mc++) {
			struct chain_input in = { n, cr, L, lr, rl, mc, round % 2 ? avoid : NULL,
			    round % 3 ? nofwd : NULL };
			const bool *nf = in.no_forward;

			assert_int_equal(chain_reach(&in, r), 0);
			chain_land_of(&in, lo);
			for (size_t j = 0; j < n; j++) {
				uint32_t best = N;
				bool ok = !(in.avoid && in.avoid[j]);

				for (size_t a = 0; a < n && ok; a++) {
					if (a == j || (in.avoid && in.avoid[a]) || cr[a] == N ||
					    (nf && nf[a]))
						continue;
					uint32_t aj = chain_rr(&in, lo, a, j);
					if (aj != N && mx(cr[a], aj) < best)
						best = mx(cr[a], aj);
					for (size_t b = 0; b < n && mc == 3; b++) {
						if (b == a || b == j || (in.avoid && in.avoid[b]) ||
						    (nf && nf[b]))
							continue;
						uint32_t ab = chain_rr(&in, lo, a, b),
						    bj = chain_rr(&in, lo, b, j);
						if (ab != N && bj != N &&
						    mx(mx(cr[a], ab), bj) < best)
							best = mx(mx(cr[a], ab), bj);
					}
				}
				assert_int_equal(r[j].us, best);
				assert_true(r[j].us <= r[j].us1);
				if (r[j].us1 != N)
					assert_int_equal(r[j].us1, mx(cr[r[j].via1],
					    chain_rr(&in, lo, r[j].via1, j)));
				if (best == N) {
					assert_int_equal(r[j].nvia, 0);
					continue;
				}
				/* The lead-in named has that bottleneck. */
				uint32_t v = cr[r[j].via[0]], prev = r[j].via[0];
				assert_true(r[j].nvia >= 1 && r[j].nvia <= mc - 1);
				for (unsigned x = 1; x <= r[j].nvia; x++) {
					uint32_t nx = x < r[j].nvia ? r[j].via[x] : (uint32_t)j;
					assert_true(nx != prev);
					/* prev forwards the chain. */
					assert_false(nf && nf[prev]);
					v = mx(v, chain_rr(&in, lo, prev, nx));
					prev = nx;
				}
				assert_int_equal(v, best);
			}
		}
		free(cr);
		free(lr);
		free(rl);
		free(lo);
		free(r);
		free(avoid);
		free(nofwd);
		free(perm);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reach_by_hand),
		cmocka_unit_test(test_reach_avoids_and_unknowns),
		cmocka_unit_test(test_reach_no_forward),
		cmocka_unit_test(test_reach_brute_force),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
