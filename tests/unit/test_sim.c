/* slot-sim's library (src/sim): the replay of sel_decide on modelled times,
 * the optimal min-max paths, the Table 2 sums, roles and pairs, on
 * hand-made matrices with known answers; the shortcut of decide.c against
 * the exact replay; determinism; what slot-sim takes from its input and
 * says about it. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/mcl.h"
#include "slot/rng.h"
#include "slot/rttmat.h"
#include "../../src/sim/decide.h"
#include "../../src/sim/eval.h"
#include "../../src/sim/paths.h"
#include "../../src/sim/roles.h"
#include "../../src/sim/simmat.h"
#include "../../src/sim/synth.h"

#define X NAN		/* a missing pair */
#define MS 1000u

/* --- helpers --- */

/* An rttmat from n*n milliseconds (symmetric input assumed). */
static void
mat_of(struct rttmat *m, size_t n, const double *ms)
{
	char err[128];

	assert_int_equal(rttmat_init(m, n, err, sizeof(err)), 0);
	for (size_t i = 0; i < n; i++) {
		char name[24];

		snprintf(name, sizeof(name), "n%zu", i);
		m->names[i] = strdup(name);
		assert_non_null(m->names[i]);
		for (size_t j = 0; j < n; j++)
			if (i != j)
				m->d[i * n + j] = ms[i * n + j];
	}
}

static void
sim_of(struct simmat *d, size_t n, const double *ms)
{
	struct rttmat m;
	char err[256];

	mat_of(&m, n, ms);
	assert_int_equal(simmat_from_rttmat(&m, "test", d, err, sizeof(err)), 0);
	rttmat_free(&m);
}

/* Select-All for pair (c, s) of d, every node a relay. */
static void
decide_all(const struct decide_model *m, const struct simmat *d, uint32_t c,
    uint32_t s, struct decide_result *res)
{
	struct decide_scratch sc;
	struct decide_probe p = {
		.cr = simmat_row(d, c), .rs = simmat_row(d, s), .n = d->n,
		.skip = { (long)c, (long)s }, .direct = simmat_row(d, c)[s],
	};
	char err[128];

	decide_scratch_init(&sc);
	assert_int_equal(decide_pair(m, &p, &sc, res, err, sizeof(err)), 0);
	decide_scratch_free(&sc);
}

/* The same pair decided with and without the shortcut: must agree. */
static void
decide_both(const struct decide_model *m, const struct simmat *d, uint32_t c,
    uint32_t s, struct decide_result *res)
{
	struct decide_model e = *m;
	struct decide_result r2;

	e.exact = false;
	decide_all(&e, d, c, s, res);
	e.exact = true;
	decide_all(&e, d, c, s, &r2);
	assert_int_equal(res->verdict, r2.verdict);
	assert_int_equal(res->path_us, r2.path_us);
	assert_int_equal(res->at_us, r2.at_us);
	if (res->verdict == SEL_GO_RELAY)
		assert_int_equal(res->relay, r2.relay);
	assert_int_equal(res->nprobed, r2.nprobed);
}

/* --- the replay of sel_decide --- */

/* Node 0 the client, 1 the server; relays 2.. */
static void
test_triangle_violation(void **state)
{
	/* Direct 100 ms; relay 2 gives max(30, 40) = 40; relay 3 gives 60. */
	static const double ms[] = {
		0, 100, 30, 20,
		100, 0, 40, 60,
		30, 40, 0, 50,
		20, 60, 50, 0,
	};
	struct decide_model m;
	struct decide_result r;
	struct simmat d;
	(void)state;

	sim_of(&d, 4, ms);
	decide_model_default(&m);
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_RELAY);
	assert_int_equal(r.relay, 2);
	assert_int_equal(r.path_us, 40 * MS);
	assert_int_equal(r.nprobed, 2);
	/* Both replies are in by 80 ms (relay 3: 20 + 60), before the direct
	 * probe: the relay wins once all are in and t >= 1.0 * 40 ms. */
	assert_int_equal(r.at_us, 80 * MS);
	/* A pair that satisfies the triangle inequality stays direct. */
	decide_both(&m, &d, 0, 2, &r);
	assert_int_equal(r.verdict, SEL_GO_DIRECT);
	assert_int_equal(r.path_us, 30 * MS);
	simmat_free(&d);
}

static void
test_missing_direct_repaired(void **state)
{
	static const double ms[] = {
		0, X, 30, 20,
		X, 0, 40, X,
		30, 40, 0, 50,
		20, X, 50, 0,
	};
	struct decide_model m;
	struct decide_result r;
	struct simmat d;
	(void)state;

	sim_of(&d, 4, ms);
	decide_model_default(&m);
	decide_both(&m, &d, 0, 1, &r);
	/* Relay 3 cannot reach the server: its reply would say so at 20 ms +
	 * the 2 s probe timeout. Relay 2 (30 + 40, in at 70 ms) repairs the
	 * path once no reply still due can beat its 40 ms: at 2 * 40 ms. */
	assert_int_equal(r.verdict, SEL_GO_RELAY);
	assert_int_equal(r.relay, 2);
	assert_int_equal(r.path_us, 40 * MS);
	assert_int_equal(r.at_us, 80 * MS);
	/* No relay reaches the server either: no path. */
	static const double none[] = {
		0, X, 30,
		X, 0, X,
		30, X, 0,
	};
	struct simmat d2;

	sim_of(&d2, 3, none);
	decide_both(&m, &d2, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_DIRECT);
	assert_int_equal(r.path_us, DECIDE_NO_PATH);
	simmat_free(&d2);
	/* A black-holed direct path: sel_decide takes the relay once the
	 * replies still due cannot beat it and t >= min_gain * path. */
	m.silent_direct = true;
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_RELAY);
	assert_int_equal(r.relay, 2);
	simmat_free(&d);
}

static void
test_ties(void **state)
{
	/* Relays 2 and 3 both give a 40 ms path. Relay 2's reply comes first
	 * (40 + 10 = 50 ms), relay 3's at 20 + 40 = 60 ms; sel_decide breaks
	 * the tie by the shorter first hop: relay 3. The shortcut must hand it
	 * over even though it arrives after the first best. */
	static const double ms[] = {
		0, 100, 40, 20, 45,
		100, 0, 10, 40, 45,
		40, 10, 0, 50, 50,
		20, 40, 50, 0, 50,
		45, 45, 50, 50, 0,
	};
	/* Equal paths and equal first hops: the lower index. */
	static const double same[] = {
		0, 100, 30, 30,
		100, 0, 40, 40,
		30, 40, 0, 50,
		30, 40, 50, 0,
	};
	struct decide_model m;
	struct decide_result r;
	struct simmat d;
	(void)state;

	sim_of(&d, 5, ms);
	decide_model_default(&m);
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_RELAY);
	assert_int_equal(r.relay, 3);
	assert_int_equal(r.path_us, 40 * MS);
	simmat_free(&d);

	sim_of(&d, 4, same);
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.relay, 2);
	assert_int_equal(r.path_us, 40 * MS);
	simmat_free(&d);
}

static void
test_wait_rule_excludes_slow_probe(void **state)
{
	/* Direct 100 ms, deadline 125 ms. Relay 2: path 90, reply at 100 ms.
	 * Relay 3: path 70, but its reply comes at 60 + 70 = 130 ms. */
	static const double ms[] = {
		0, 100, 10, 60,
		100, 0, 90, 70,
		10, 90, 0, 50,
		60, 70, 50, 0,
	};
	struct decide_model m;
	struct decide_result r;
	struct simmat d;
	(void)state;

	sim_of(&d, 4, ms);
	decide_model_default(&m);
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_RELAY);
	assert_int_equal(r.relay, 2);
	assert_int_equal(r.path_us, 90 * MS);
	assert_int_equal(r.at_us, 125 * MS);	/* decided at the deadline */
	/* Waiting longer lets the better relay count. */
	m.sel.c_wait = 1.5;
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.relay, 3);
	assert_int_equal(r.path_us, 70 * MS);
	assert_int_equal(r.at_us, 130 * MS);	/* all in */
	/* With min_gain 1.2, 100 / 90 is not enough: direct. */
	m.sel.c_wait = 1.25;
	m.sel.min_gain = 1.2;
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.verdict, SEL_GO_DIRECT);
	assert_int_equal(r.path_us, 100 * MS);
	/* Warm relay caches: replies at RTT(c, r), so relay 3 counts. */
	m.sel.min_gain = 1.0;
	m.warm = true;
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.relay, 3);
	simmat_free(&d);
}

static void
test_lost_probe_waits_for_deadline(void **state)
{
	/* RTT(0, 3) missing: relay 3's probe is lost, so "all in" never comes;
	 * relay 2's 40 ms path (in at 70 ms) settles the choice at 80 ms,
	 * before the 1.25 * 100 ms deadline. */
	static const double ms[] = {
		0, 100, 30, X,
		100, 0, 40, 60,
		30, 40, 0, 50,
		X, 60, 50, 0,
	};
	struct decide_model m;
	struct decide_result r;
	struct simmat d;
	(void)state;

	sim_of(&d, 4, ms);
	decide_model_default(&m);
	decide_both(&m, &d, 0, 1, &r);
	assert_int_equal(r.relay, 2);
	assert_int_equal(r.at_us, 80 * MS);
	assert_int_equal(r.nprobed, 2);
	simmat_free(&d);
}

/* The shortcut against the exact replay on random matrices with missing
 * pairs, whole-millisecond values (many ties), and every model knob. */
static void
test_shortcut_matches_exact(void **state)
{
	enum { N = 23 };
	double ms[N * N];
	struct rng rng;
	size_t checked = 0;
	(void)state;

	rng_seed(&rng, 7);
	for (int round = 0; round < 12; round++) {
		struct decide_model m;
		struct simmat d;

		for (size_t i = 0; i < N; i++)
			for (size_t j = i; j < N; j++) {
				double v = (double)(1 + rng_below(&rng, 300));

				if (rng_unit(&rng) < 0.1)
					v = X;
				ms[i * N + j] = ms[j * N + i] = i == j ? 0 : v;
			}
		sim_of(&d, N, ms);
		decide_model_default(&m);
		m.warm = round % 2 == 1;
		m.silent_direct = round % 3 == 1;
		m.sel.c_wait = round % 4 == 2 ? 0.9 : round % 4 == 3 ? 3.0 : 1.25;
		m.sel.min_gain = round % 5 == 4 ? 1.1 : 1.0;
		m.relay_timeout_us = round % 3 == 2 ? 150 * MS : 2000 * MS;
		m.sel.repair_timeout_us = round % 4 == 1 ? 250 * MS : 3000 * MS;
		for (uint32_t c = 0; c < N; c++)
			for (uint32_t s = 0; s < N; s++) {
				struct decide_result r;

				if (c == s)
					continue;
				decide_both(&m, &d, c, s, &r);
				checked++;
			}
		simmat_free(&d);
	}
	assert_int_equal(checked, 12 * N * (N - 1));
}

/* The settled rule with chains: deciding as soon as the replies still due
 * cannot change the choice gives what waiting for every reply up to the
 * deadline gives (computed here by hand), on random matrices and lead-ins
 * with missing pairs, many ties, warm and cold caches, and several gains. */
static void
test_chain_settled_matches_full_wait(void **state)
{
	enum { N = 14 };
	double ms[N * N];
	float lead[N + 16], lead1[N + 16];
	struct rng rng;
	size_t checked = 0, chains = 0, early = 0, threes = 0;
	(void)state;

	rng_seed(&rng, 11);
	for (int round = 0; round < 16; round++) {
		struct decide_model m;
		struct simmat d;

		for (size_t i = 0; i < N; i++)
			for (size_t j = i; j < N; j++) {
				double v = (double)(1 + rng_below(&rng, 200));

				if (rng_unit(&rng) < 0.1)
					v = X;
				ms[i * N + j] = ms[j * N + i] = i == j ? 0 : v;
			}
		sim_of(&d, N, ms);
		decide_model_default(&m);
		m.warm = round % 2 == 1;
		m.sel.max_chain = 3;
		m.sel.c_wait = round % 3 == 2 ? 3.0 : 1.25;
		m.sel.chain_gain = round % 4 == 0 ? 1.0 : round % 4 == 1 ? 1.1 : 1.5;
		m.sel.min_gain = round % 5 == 4 ? 1.1 : 1.0;
		for (uint32_t c = 0; c < N; c++) {
			/* A lead-in through one relay, and one through two that
			 * is shorter or the same (the best of both). */
			for (size_t j = 0; j < N + 16; j++) {
				lead1[j] = j < N && rng_below(&rng, 3) != 0 ?
				    (float)(1000 * (1 + rng_below(&rng, 150))) : INFINITY;
				lead[j] = j < N && rng_below(&rng, 2) != 0 ?
				    (float)(1000 * (1 + rng_below(&rng, 150))) : INFINITY;
				if (lead1[j] < lead[j])
					lead[j] = lead1[j];
			}
			for (uint32_t s = 0; s < N; s++) {
				const float *cr = simmat_row(&d, c), *rs = simmat_row(&d, s);
				float dir = cr[s];
				struct decide_probe p = {
					.cr = cr, .rs = rs, .n = N, .skip = { (long)c, (long)s },
					.direct = dir, .lead = lead, .lead1 = lead1,
				};
				struct decide_scratch sc;
				struct decide_result r;
				char err[128];

				if (c == s || !isfinite(dir))
					continue;
				decide_scratch_init(&sc);
				assert_int_equal(decide_pair(&m, &p, &sc, &r, err, sizeof(err)), 0);
				decide_scratch_free(&sc);
				/* Every reply in by the deadline. */
				uint64_t deadline = (uint64_t)(m.sel.c_wait * (uint32_t)dir);
				uint32_t S = UINT32_MAX, C = UINT32_MAX;

				for (uint32_t j = 0; j < N; j++) {
					if (j == c || j == s || !isfinite(cr[j]) ||
					    !(rs[j] <= (float)m.relay_timeout_us))
						continue;
					uint32_t a = (uint32_t)cr[j], b = (uint32_t)rs[j];
					uint64_t at = a + (m.warm ? 0 : b);

					if (at > deadline)
						continue;
					uint32_t v1 = a > b ? a : b;

					S = v1 < S ? v1 : S;
					/* Its chain: of two, or of three if that beats
					 * it by the gain. */
					uint32_t c2 = UINT32_MAX, c3 = UINT32_MAX, cj;

					if (isfinite(lead1[j]))
						c2 = (uint32_t)lead1[j] > b ? (uint32_t)lead1[j] : b;
					if (isfinite(lead[j]) && lead[j] != lead1[j])
						c3 = (uint32_t)lead[j] > b ? (uint32_t)lead[j] : b;
					cj = c3 != UINT32_MAX && (c2 == UINT32_MAX ||
					    (c3 < c2 && (double)c3 * m.sel.chain_gain <= c2)) ? c3 : c2;
					C = cj < C ? cj : C;
				}
				bool use_chain = C < S && (double)C * m.sel.chain_gain <= (double)S;
				uint32_t V = use_chain ? C : S;
				bool relay = S != UINT32_MAX &&
				    (double)(uint32_t)dir >= m.sel.min_gain * V;

				assert_int_equal(r.verdict, relay ? SEL_GO_RELAY : SEL_GO_DIRECT);
				assert_int_equal(r.path_us, relay ? V : (uint32_t)dir);
				if (relay)
					assert_int_equal(r.chain != 0, use_chain);
				assert_true(r.at_us <= deadline);
				chains += relay && use_chain;
				threes += relay && r.chain == 3;
				early += r.at_us < deadline;
				checked++;
			}
		}
		simmat_free(&d);
	}
	/* The cases are there: chains taken, decisions before the deadline. */
	assert_true(checked > 1000);
	assert_true(chains > 100);
	assert_true(threes > 10 && threes < chains);
	assert_true(early > 100);
}

/* --- optimal paths --- */

/* Brute force: best min-max path from a to b with at most h intermediaries. */
static double
brute(const double *ms, size_t n, size_t a, size_t b, unsigned h)
{
	double best = a == b ? 0 : isnan(ms[a * n + b]) ? INFINITY : ms[a * n + b];

	if (h == 0)
		return best;
	for (size_t r = 0; r < n; r++) {
		double first = r == a ? 0 : isnan(ms[a * n + r]) ? INFINITY : ms[a * n + r];
		double rest = brute(ms, n, r, b, h - 1);
		double v = first > rest ? first : rest;

		if (v < best)
			best = v;
	}
	return best;
}

static void
test_multihop_chain(void **state)
{
	/* A chain 0 - 1 - 2 - 3 - 4, 10 ms per link, nothing else measured:
	 * 0 reaches 4 only through three intermediaries. */
	enum { N = 5 };
	double ms[N * N];
	struct rttmat m;
	struct simmat d;
	struct roles ro;
	struct pairs pr;
	struct eval_stats st[4];
	struct eval_phi phi[3];
	long pos[N];
	char err[256];
	struct eval_ctx ctx = { 0 };
	(void)state;

	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			ms[i * N + j] = i == j ? 0 : (i + 1 == j || j + 1 == i) ? 10 : X;
	mat_of(&m, N, ms);
	assert_int_equal(simmat_from_rttmat(&m, "chain", &d, err, sizeof(err)), 0);
	assert_int_equal(roles_all(&ro, N), 0);
	assert_int_equal(roles_pairs(&ro, &pr, err, sizeof(err)), 0);
	assert_int_equal(pr.n, 10);
	for (size_t i = 0; i < N; i++)
		pos[i] = (long)i;
	ctx.d = &d;
	ctx.dr = &d;
	ctx.roles = &ro;
	ctx.pairs = &pr;
	ctx.relay_pos = pos;
	decide_model_default(&ctx.model);
	assert_int_equal(eval_optimal(&ctx, 4, true, st, phi, err, sizeof(err)), 0);
	/* Pairs without a direct RTT: 6 (all but the 4 links). Repaired with
	 * 1, 2, 3 intermediaries: distance 2 (3 pairs), 3 (2), 4 (1). */
	assert_int_equal(st[0].nmissing, 6);
	assert_int_equal(st[0].nrepaired, 3);
	assert_int_equal(st[1].nrepaired, 5);
	assert_int_equal(st[2].nrepaired, 6);
	assert_int_equal(st[3].nrepaired, 6);
	for (size_t i = 0; i < pr.n; i++) {
		size_t a = pr.c[i], b = pr.s[i];

		assert_int_equal(st[2].path_us[i], 10 * MS);
		assert_int_equal(st[0].path_us[i], b - a <= 2 ? 10 * MS : DECIDE_NO_PATH);
	}
	/* The links gain nothing; phi(i, i+1) sees only new paths. */
	assert_int_equal(st[0].ndirect, 4);
	assert_int_equal(st[0].nbenefit, 0);
	assert_int_equal(phi[0].i, 1);
	assert_int_equal(phi[0].nnew, 2);
	assert_int_equal(phi[1].nnew, 1);
	assert_int_equal(phi[2].nnew, 0);
	assert_int_equal(phi[2].nimproved, 0);
	for (int h = 0; h < 4; h++)
		eval_stats_free(&st[h]);
	for (int h = 0; h < 3; h++)
		eval_phi_free(&phi[h]);
	roles_pairs_free(&pr);
	roles_free(&ro);
	simmat_free(&d);
	rttmat_free(&m);
}

static void
test_multihop_matches_brute_force(void **state)
{
	/* 13 nodes: an odd count, so paths_extend's four-row blocks leave a
	 * tail, and the rows carry padding. */
	enum { N = 13, H = 3 };
	double ms[N * N];
	uint32_t relay[N];
	float *prev, *next;
	struct simmat d;
	struct rng rng;
	(void)state;

	rng_seed(&rng, 11);
	for (size_t i = 0; i < N; i++)
		for (size_t j = i; j < N; j++) {
			double v = (double)(1 + rng_below(&rng, 500));

			if (rng_unit(&rng) < 0.3)
				v = X;
			ms[i * N + j] = ms[j * N + i] = i == j ? 0 : v;
		}
	sim_of(&d, N, ms);
	for (size_t i = 0; i < N; i++)
		relay[i] = (uint32_t)i;
	prev = malloc(N * d.stride * sizeof(*prev));
	next = malloc(N * d.stride * sizeof(*next));
	assert_non_null(prev);
	assert_non_null(next);
	memcpy(prev, d.us, N * d.stride * sizeof(*prev));
	for (unsigned h = 1; h <= H; h++) {
		float *t;

		paths_extend(prev, N, &d, relay, N, next);
		for (size_t a = 0; a < N; a++)
			for (size_t b = 0; b < N; b++) {
				double want = brute(ms, N, a, b, h);
				float got = next[a * d.stride + b];

				if (isinf(want))
					assert_true(isinf(got));
				else
					assert_true(got == (float)(want * MS));
			}
		t = prev;
		prev = next;
		next = t;
	}
	free(prev);
	free(next);
	simmat_free(&d);
}

/* --- Table 2 sums, determinism --- */

struct world {
	struct rttmat m;
	struct simmat d;
	struct roles ro;
	struct pairs pr;
	long *pos;
	uint32_t *group;
	struct eval_ctx ctx;
};

static void
world_sites(struct world *w, size_t n, uint64_t seed, size_t sites)
{
	struct synth_params sp;
	struct mcl_params mp;
	size_t ng;
	char err[256];

	memset(w, 0, sizeof(*w));
	synth_params_default(&sp);
	sp.n = n;
	sp.seed = seed;
	sp.sites = sites;
	sp.missing = 0.02;
	assert_int_equal(synth_matrix(&sp, &w->m, err, sizeof(err)), 0);
	assert_int_equal(simmat_from_rttmat(&w->m, "synthetic", &w->d, err,
	    sizeof(err)), 0);
	assert_int_equal(roles_all(&w->ro, n), 0);
	assert_int_equal(roles_pairs(&w->ro, &w->pr, err, sizeof(err)), 0);
	w->pos = malloc(n * sizeof(*w->pos));
	w->group = malloc(n * sizeof(*w->group));
	assert_non_null(w->pos);
	assert_non_null(w->group);
	for (size_t i = 0; i < n; i++)
		w->pos[i] = (long)i;
	mcl_params_default(&mp);
	mp.max_intra_rtt_ms = 50;
	assert_int_equal(mcl_groups(w->m.d, n, &mp, w->group, &ng, err,
	    sizeof(err)), 0);
	w->ctx.d = &w->d;
	w->ctx.dr = &w->d;
	w->ctx.roles = &w->ro;
	w->ctx.pairs = &w->pr;
	w->ctx.relay_pos = w->pos;
	w->ctx.group = w->group;
	decide_model_default(&w->ctx.model);
	w->ctx.seed = 42;
}

static void
world_synthetic(struct world *w, size_t n, uint64_t seed)
{
	world_sites(w, n, seed, 0);
}

static void
world_free(struct world *w)
{
	free(w->pos);
	free(w->group);
	roles_pairs_free(&w->pr);
	roles_free(&w->ro);
	simmat_free(&w->d);
	rttmat_free(&w->m);
}

static void
test_table2_sums(void **state)
{
	struct world w;
	struct eval_stats opt, all;
	struct eval_phi phi;
	char err[256];
	(void)state;

	world_synthetic(&w, 60, 3);
	assert_int_equal(eval_optimal(&w.ctx, 1, false, &opt, &phi, err,
	    sizeof(err)), 0);
	/* One relay: bounded by Optimal-1 (chains below). */
	w.ctx.model.sel.max_chain = 1;
	assert_int_equal(eval_strategy(&w.ctx, EVAL_SELECT_ALL, 0, true, &all, err,
	    sizeof(err)), 0);
	assert_int_equal(all.nrelays[0] + all.nrelays[1], all.npairs);
	assert_int_equal(all.npairs, 60 * 59 / 2);
	assert_int_equal(all.ndirect + all.nmissing, all.npairs);
	assert_true(all.nmissing > 0);
	assert_int_equal(all.ndecided, all.npairs);
	assert_true(all.sum_probes == (double)all.npairs * 58);
	/* The wait rule can only lose against the optimum, never be worse
	 * than direct with min_gain 1. */
	assert_true(all.nbenefit <= opt.nbenefit);
	assert_true(all.sum_reduction <= opt.sum_reduction + 1e-9);
	assert_int_equal(all.nworse, 0);
	assert_true(all.ngt25 <= all.nbenefit);
	for (size_t i = 1; i < all.ndirect; i++)
		assert_true(all.gain[i - 1] <= all.gain[i]);
	assert_true(all.gain[0] >= 1.0f);
	for (size_t i = 0; i < all.npairs; i++)
		if (all.via[i] != UINT32_MAX)
			assert_true(all.via[i] != w.pr.c[i] && all.via[i] != w.pr.s[i]);
	eval_stats_free(&opt);
	eval_stats_free(&all);
	world_free(&w);
}

/* Chains in the evaluation: within the optimum of up to three relays, no
 * worse than direct, better than one relay on average, and every pair
 * counted once by relays on its path. */
static void
test_table2_chains(void **state)
{
	struct world w;
	struct eval_stats opt[3], one, all, cov;
	struct eval_phi phi[2];
	char err[256];
	(void)state;

	world_synthetic(&w, 60, 3);
	assert_int_equal(eval_optimal(&w.ctx, 3, false, opt, phi, err, sizeof(err)), 0);
	w.ctx.model.sel.max_chain = 1;
	assert_int_equal(eval_strategy(&w.ctx, EVAL_SELECT_ALL, 0, false, &one, err,
	    sizeof(err)), 0);
	w.ctx.model.sel.max_chain = 3;
	w.ctx.model.sel.chain_gain = 1.0;
	assert_int_equal(eval_strategy(&w.ctx, EVAL_SELECT_ALL, 0, true, &all, err,
	    sizeof(err)), 0);
	assert_int_equal(eval_strategy(&w.ctx, EVAL_COVER, 8, false, &cov, err,
	    sizeof(err)), 0);
	assert_string_equal(all.label, "Select-All+3");
	assert_string_equal(cov.label, "Cover-8+3");
	assert_true(all.sum_reduction <= opt[2].sum_reduction + 1e-9);
	assert_true(all.sum_reduction > one.sum_reduction);
	assert_int_equal(all.nworse, 0);
	assert_int_equal(cov.nworse, 0);
	assert_true(all.nrelays[2] + all.nrelays[3] > 0);
	assert_int_equal(all.nrelays[0] + all.nrelays[1] + all.nrelays[2] + all.nrelays[3],
	    all.npairs);
	assert_int_equal(cov.nrelays[0] + cov.nrelays[1] + cov.nrelays[2] + cov.nrelays[3],
	    cov.npairs);
	/* The wait rule holds with chains: no decision after c_wait * D. */
	assert_true(all.wait_ratio[all.ndirect - 1] <= 1.25f + 1e-6f);
	assert_true(cov.wait_ratio[cov.ndirect - 1] <= 1.25f + 1e-6f);
	for (size_t i = 0; i < all.npairs; i++)
		if (all.via[i] != UINT32_MAX)
			assert_true(all.via[i] != w.pr.c[i] && all.via[i] != w.pr.s[i]);
	for (int h = 0; h < 3; h++)
		eval_stats_free(&opt[h]);
	for (int h = 0; h < 2; h++)
		eval_phi_free(&phi[h]);
	eval_stats_free(&one);
	eval_stats_free(&all);
	eval_stats_free(&cov);
	world_free(&w);
}

/* Cover-k with a relay beside the server (ctx.beside_us): on an overlay of
 * sites, the first k/2 probes go by the landmark nearest a site-mate of
 * the server; no pair is made worse, no more than k probes go out, a pair's
 * endpoints are never its relays, and on this seeded overlay the choice
 * gets better than the ranking's alone. */
static void
test_cover_beside(void **state)
{
	struct world w;
	struct eval_stats off, on;
	char err[256];
	size_t changed = 0;
	(void)state;

	world_sites(&w, 80, 7, 25);
	w.ctx.model.sel.max_chain = 1;
	w.ctx.nlandmarks = 0;
	assert_int_equal(eval_strategy(&w.ctx, EVAL_COVER, 4, true, &off, err,
	    sizeof(err)), 0);
	w.ctx.beside_us = 1000;
	assert_int_equal(eval_strategy(&w.ctx, EVAL_COVER, 4, true, &on, err,
	    sizeof(err)), 0);
	assert_int_equal(on.nworse, 0);
	assert_int_equal(on.ndecided, on.npairs);
	assert_true(on.sum_probes <= 4.0 * (double)on.npairs);
	for (size_t i = 0; i < on.npairs; i++) {
		if (on.via[i] != UINT32_MAX)
			assert_true(on.via[i] != w.pr.c[i] && on.via[i] != w.pr.s[i]);
		changed += on.via[i] != off.via[i];
	}
	assert_true(changed > 0);
	assert_true(on.sum_reduction > off.sum_reduction);
	eval_stats_free(&off);
	eval_stats_free(&on);
	world_free(&w);
}

static void
test_determinism(void **state)
{
	static const enum eval_kind kinds[] = {
		EVAL_SELECT_ALL, EVAL_RANDOM_K, EVAL_RANDGROUP_K,
	};
	struct world w;
	char err[256];
	(void)state;

	world_synthetic(&w, 50, 5);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		struct eval_stats a, b, c;

		assert_int_equal(eval_strategy(&w.ctx, kinds[i], 5, true, &a, err,
		    sizeof(err)), 0);
		assert_int_equal(eval_strategy(&w.ctx, kinds[i], 5, true, &b, err,
		    sizeof(err)), 0);
		assert_memory_equal(a.path_us, b.path_us, a.npairs * sizeof(*a.path_us));
		assert_memory_equal(a.via, b.via, a.npairs * sizeof(*a.via));
		assert_true(a.sum_reduction == b.sum_reduction);
		if (kinds[i] != EVAL_SELECT_ALL) {
			/* Another seed draws other relays. */
			w.ctx.seed = 43;
			assert_int_equal(eval_strategy(&w.ctx, kinds[i], 5, true, &c, err,
			    sizeof(err)), 0);
			assert_true(memcmp(a.via, c.via, a.npairs * sizeof(*a.via)) != 0);
			assert_true(c.sum_probes == 5.0 * (double)c.npairs);
			eval_stats_free(&c);
			w.ctx.seed = 42;
		}
		eval_stats_free(&a);
		eval_stats_free(&b);
	}
	/* The synthetic matrix itself is a function of its seed. */
	struct world w2;

	world_synthetic(&w2, 50, 5);
	assert_memory_equal(w.d.us, w2.d.us, 50 * w.d.stride * sizeof(float));
	world_free(&w2);
	world_free(&w);
}

static void
test_random_k_all_when_few(void **state)
{
	/* k at least the relays: Random-k is Select-All, relay for relay. */
	struct world w;
	struct eval_stats a, r;
	char err[256];
	(void)state;

	world_synthetic(&w, 30, 9);
	assert_int_equal(eval_strategy(&w.ctx, EVAL_SELECT_ALL, 0, true, &a, err,
	    sizeof(err)), 0);
	assert_int_equal(eval_strategy(&w.ctx, EVAL_RANDOM_K, 100, true, &r, err,
	    sizeof(err)), 0);
	assert_memory_equal(a.path_us, r.path_us, a.npairs * sizeof(*a.path_us));
	assert_memory_equal(a.via, r.via, a.npairs * sizeof(*a.via));
	eval_stats_free(&a);
	eval_stats_free(&r);
	world_free(&w);
}

/* --- roles, pairs, matrices --- */

static void
test_roles_parse(void **state)
{
	static char *names[] = { "Paris", "London", NULL, "Tokyo", "Lima" };
	uint32_t *v;
	size_t n;
	char err[256];
	(void)state;

	assert_int_equal(roles_parse("3,0-1", names, 5, &v, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[1], 1);
	assert_int_equal(v[2], 3);
	free(v);
	assert_int_equal(roles_parse("name:Tokyo,Paris", names, 5, &v, &n, err,
	    sizeof(err)), 0);
	assert_int_equal(n, 2);
	assert_int_equal(v[0], 0);
	assert_int_equal(v[1], 3);
	free(v);
	assert_int_equal(roles_parse("name:Berlin", names, 5, &v, &n, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "no node named 'Berlin'"));
	assert_null(v);
	assert_int_equal(roles_parse("0-5", names, 5, &v, &n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "bad node list"));
	assert_int_equal(roles_parse("1,1", names, 5, &v, &n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "given twice"));
	assert_int_equal(roles_parse("", names, 5, &v, &n, err, sizeof(err)), -1);
	assert_int_equal(roles_parse("2-1", names, 5, &v, &n, err, sizeof(err)), -1);
	assert_int_equal(roles_parse("1,", names, 5, &v, &n, err, sizeof(err)), -1);
	assert_int_equal(roles_parse("name:", names, 5, &v, &n, err, sizeof(err)), -1);
}

static void
test_roles_split_and_pairs(void **state)
{
	struct roles a, b;
	struct pairs p, q;
	unsigned char seen[40] = { 0 };
	char err[256];
	(void)state;

	assert_int_equal(roles_split(&a, 40, 5, 10, 20, 77, err, sizeof(err)), 0);
	assert_int_equal(roles_split(&b, 40, 5, 10, 20, 77, err, sizeof(err)), 0);
	assert_memory_equal(a.relay, b.relay, 10 * sizeof(uint32_t));
	roles_free(&b);
	for (size_t i = 0; i < 5; i++)
		seen[a.client[i]]++;
	for (size_t i = 0; i < 10; i++)
		seen[a.relay[i]]++;
	for (size_t i = 0; i < 20; i++)
		seen[a.server[i]]++;
	for (size_t i = 0; i < 40; i++)
		assert_true(seen[i] <= 1);
	assert_int_equal(roles_pairs(&a, &p, err, sizeof(err)), 0);
	assert_int_equal(p.n, 100);
	assert_int_equal(roles_split(&b, 40, 20, 20, 1, 1, err, sizeof(err)), -1);
	roles_free(&b);

	/* A sample keeps the original order and is a function of the seed. */
	assert_int_equal(roles_pairs(&a, &q, err, sizeof(err)), 0);
	assert_int_equal(roles_pairs_sample(&p, 30, 5), 0);
	assert_int_equal(roles_pairs_sample(&q, 30, 5), 0);
	assert_int_equal(p.n, 30);
	assert_memory_equal(p.c, q.c, 30 * sizeof(uint32_t));
	assert_memory_equal(p.s, q.s, 30 * sizeof(uint32_t));
	for (size_t i = 1; i < p.n; i++)
		assert_true(p.c[i - 1] < p.c[i] ||
		    (p.c[i - 1] == p.c[i] && p.s[i - 1] < p.s[i]));
	roles_pairs_free(&p);
	roles_pairs_free(&q);
	roles_free(&a);

	/* The only client is the only server: no pair. */
	assert_int_equal(roles_all(&a, 1), 0);
	assert_int_equal(roles_pairs(&a, &p, err, sizeof(err)), -1);
	roles_free(&a);
}

static void
test_simmat_conversion(void **state)
{
	static const double ms[] = {
		0, 0.0004, 12.3456,
		0.0004, 0, X,
		12.3456, X, 0,
	};
	struct rttmat m;
	struct simmat d;
	char err[256];
	(void)state;

	mat_of(&m, 3, ms);
	assert_int_equal(simmat_from_rttmat(&m, "f", &d, err, sizeof(err)), 0);
	assert_int_equal(d.stride % SIMMAT_PAD, 0);
	assert_true(simmat_row(&d, 0)[1] == 1.0f);	/* at least 1 us */
	assert_true(simmat_row(&d, 0)[2] == 12346.0f);
	assert_true(isinf(simmat_row(&d, 1)[2]));
	assert_true(simmat_row(&d, 2)[2] == 0.0f);
	for (size_t j = 3; j < d.stride; j++)
		assert_true(isinf(simmat_row(&d, 1)[j]));
	simmat_free(&d);
	m.d[1] = m.d[3] = 9000.0;	/* above what floats hold exactly */
	assert_int_equal(simmat_from_rttmat(&m, "big.csv", &d, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "big.csv: RTT n0 - n1 of 9000 ms"));
	/* The bound the loaders are given: at it, converted; a rounded
	 * microsecond more, refused. */
	m.d[1] = m.d[3] = SIMMAT_MAX_MS;
	assert_int_equal(simmat_from_rttmat(&m, "f", &d, err, sizeof(err)), 0);
	assert_true(simmat_row(&d, 0)[1] == (float)SIMMAT_MAX_US);
	simmat_free(&d);
	m.d[1] = m.d[3] = SIMMAT_MAX_MS + 0.0006;
	assert_int_equal(simmat_from_rttmat(&m, "f", &d, err, sizeof(err)), -1);
	rttmat_free(&m);

	/* One node: nothing to simulate, and the file is named. */
	assert_int_equal(rttmat_init(&m, 1, err, sizeof(err)), 0);
	assert_int_equal(simmat_from_rttmat(&m, "one.txt", &d, err, sizeof(err)),
	    -1);
	assert_string_equal(err, "one.txt: 1 node: slot-sim needs at least 2");
	assert_null(d.us);
	rttmat_free(&m);
}

/* Writes text to a temporary file; the caller unlinks path. */
static void
temp_file(char *path, size_t len, const char *text)
{
	int fd;
	FILE *f;

	snprintf(path, len, "/tmp/test_sim.XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

/* What slot-sim says about its input: one line per kind, with the counts
 * and the file; nothing when the input needed nothing. */
static void
test_input_report(void **state)
{
	struct rttmat_report rep = { 0 };
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	(void)state;

	assert_non_null(f);
	assert_int_equal(simmat_report_input(f, "m.txt", &rep), 0);
	assert_int_equal(fflush(f), 0);
	assert_int_equal(len, 0);
	rep = (struct rttmat_report){
		.zero = 3, .zero_line = 5, .above = 1, .above_line = 9,
		.above_max = 9000.5, .both = 40, .asym = 12, .asym_max = 1.25,
	};
	assert_int_equal(simmat_report_input(f, "m.txt", &rep), 3);
	assert_int_equal(fclose(f), 0);
	assert_string_equal(buf,
	    "slot-sim: m.txt: warning: 3 RTTs of 0 between distinct nodes (first at "
	    "line 5) taken as missing\n"
	    "slot-sim: m.txt: warning: 1 RTT above the 8389 ms slot-sim handles "
	    "(first at line 9, largest 9000.5 ms) taken as missing\n"
	    "slot-sim: m.txt: note: 12 of the 40 pairs measured both ways have "
	    "two different RTTs (by up to 1.250 ms); each is taken as their "
	    "mean\n");
	free(buf);
}

/* A file with a zero and an RTT above the bound loads, and converts, with
 * both taken as missing. */
static void
test_input_taken_as_missing(void **state)
{
	struct rttmat m;
	struct rttmat_report rep;
	struct simmat d;
	char err[256], path[64];
	(void)state;

	temp_file(path, sizeof(path), "0 0 20\n0 0 9000\n22 9000 0\n");
	assert_int_equal(rttmat_load_square(path, SIMMAT_MAX_MS, &m, &rep, err,
	    sizeof(err)), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rep.zero, 2);
	assert_int_equal(rep.above, 2);
	assert_int_equal(rep.asym, 1);
	assert_int_equal(simmat_from_rttmat(&m, path, &d, err, sizeof(err)), 0);
	assert_true(isinf(simmat_row(&d, 0)[1]));
	assert_true(isinf(simmat_row(&d, 1)[2]));
	assert_true(simmat_row(&d, 0)[2] == 21000.0f);
	simmat_free(&d);
	rttmat_free(&m);

	temp_file(path, sizeof(path), "source,destination,avg\n"
	    "a,b,0\nb,a,0\na,c,8390\nc,a,8388\n");
	assert_int_equal(rttmat_load_pairs(path, "avg", SIMMAT_MAX_MS, &m, &rep,
	    err, sizeof(err)), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rep.zero, 2);
	assert_int_equal(rep.above, 1);
	assert_int_equal(rep.above_line, 4);
	assert_int_equal(simmat_from_rttmat(&m, path, &d, err, sizeof(err)), 0);
	assert_true(isinf(simmat_row(&d, 0)[1]));
	assert_true(simmat_row(&d, 0)[2] == 8388000.0f);
	simmat_free(&d);
	rttmat_free(&m);
}

static void
test_synthetic_matrix(void **state)
{
	struct synth_params p;
	struct rttmat m;
	char err[256];
	size_t violations = 0;
	(void)state;

	synth_params_default(&p);
	p.n = 40;
	assert_int_equal(synth_matrix(&p, &m, err, sizeof(err)), 0);
	for (size_t i = 0; i < 40; i++)
		for (size_t j = 0; j < 40; j++) {
			double v = m.d[i * 40 + j];

			assert_true(v == m.d[j * 40 + i]);
			assert_true(i == j ? v == 0 : v > 1.0 && v < 2000.0);
			for (size_t k = 0; k < 40; k++)
				violations += i != j && k != i && k != j &&
				    m.d[i * 40 + k] + m.d[k * 40 + j] < v;
		}
	/* Per-pair stretch breaks the triangle inequality somewhere. */
	assert_true(violations > 0);
	rttmat_free(&m);

	/* At 3 sites: every node has a neighbour within 2 ms, MCL finds the
	 * sites (at most 3 groups), and far pairs remain. */
	struct mcl_params mp;
	uint32_t g[30];
	size_t ng, far = 0;

	p.n = 30;
	p.sites = 3;
	assert_int_equal(synth_matrix(&p, &m, err, sizeof(err)), 0);
	for (size_t i = 0; i < 30; i++) {
		size_t near = 0;

		for (size_t j = 0; j < 30; j++)
			if (i != j && m.d[i * 30 + j] < 2.0)
				near++;
			else if (i != j)
				far++;
		assert_true(near > 0);
	}
	assert_true(far > 0);
	mcl_params_default(&mp);
	assert_int_equal(mcl_groups(m.d, 30, &mp, g, &ng, err, sizeof(err)), 0);
	assert_true(ng <= 3);
	rttmat_free(&m);
	p.n = 1;
	assert_int_equal(synth_matrix(&p, &m, err, sizeof(err)), -1);
}

static void
test_quantile(void **state)
{
	static const float v[] = { 1, 2, 3, 4 };
	(void)state;

	assert_true(eval_quantile(v, 4, 0.0) == 1);
	assert_true(eval_quantile(v, 4, 0.5) == 2);
	assert_true(eval_quantile(v, 4, 0.51) == 3);
	assert_true(eval_quantile(v, 4, 1.0) == 4);
	assert_true(isnan(eval_quantile(v, 0, 0.5)));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_triangle_violation),
		cmocka_unit_test(test_missing_direct_repaired),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_wait_rule_excludes_slow_probe),
		cmocka_unit_test(test_lost_probe_waits_for_deadline),
		cmocka_unit_test(test_shortcut_matches_exact),
		cmocka_unit_test(test_multihop_chain),
		cmocka_unit_test(test_multihop_matches_brute_force),
		cmocka_unit_test(test_table2_sums),
		cmocka_unit_test(test_table2_chains),
		cmocka_unit_test(test_cover_beside),
		cmocka_unit_test(test_chain_settled_matches_full_wait),
		cmocka_unit_test(test_determinism),
		cmocka_unit_test(test_random_k_all_when_few),
		cmocka_unit_test(test_roles_parse),
		cmocka_unit_test(test_roles_split_and_pairs),
		cmocka_unit_test(test_simmat_conversion),
		cmocka_unit_test(test_input_report),
		cmocka_unit_test(test_input_taken_as_missing),
		cmocka_unit_test(test_synthetic_matrix),
		cmocka_unit_test(test_quantile),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
