/* Unit tests for src/core/grpstab.c (stable group ids and hysteresis) and
 * for the sparse graph of src/core/mcl.c it reads: the graph against the
 * dense matrix, capped MCL on sites, and repeated regroups on unchanged,
 * jittered and really changed RTTs. */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "slot/grpstab.h"
#include "slot/mcl.h"
#include "slot/rng.h"

/* A graph of every measured pair of d (n x n, symmetric), with wide bits
 * above bound when bound > 0; pairs above edge_max are no edge. */
static void
graph_of(const double *d, size_t n, size_t keep, double edge_max, double bound,
    struct mcl_graph *g)
{
	struct mcl_gparams gp = { .keep = keep, .edge_max_ms = edge_max, .wide_ms = bound };
	struct mcl_gbuild *b;
	char err[128] = "";

	b = mcl_gbuild_new(n, &gp, err, sizeof(err));
	assert_non_null(b);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++)
			assert_int_equal(mcl_gbuild_pair(b, i, j, d[i * n + j], err, sizeof(err)), 0);
	if (mcl_gbuild_finish(b, g, err, sizeof(err)) != 0)
		fail_msg("%s", err);
}

static void
set(double *d, size_t n, size_t i, size_t j, double v)
{
	d[i * n + j] = v;
	d[j * n + i] = v;
}

/* --- the graph --- */

static void
test_graph_keep(void **state)
{
	enum { N = 6 };
	double d[N * N];
	struct mcl_graph g;
	(void)state;

	/* Node i at position i on a line, 10 ms apart; 0-5 unmeasured. */
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			d[i * N + j] = 10.0 * (double)(i > j ? i - j : j - i);
	set(d, N, 0, 5, NAN);
	graph_of(d, N, 0, INFINITY, 0.0, &g);
	assert_int_equal(g.off[N], 2 * (N * (N - 1) / 2 - 1));
	assert_true(mcl_graph_rtt(&g, 1, 4) == 30.0);
	assert_true(isnan(mcl_graph_rtt(&g, 0, 5)));
	assert_false(mcl_graph_wide(&g, 1, 4));
	mcl_graph_free(&g);

	/* Each keeps its 1 nearest (ties to the lower node), union of both
	 * ends: 0-1, 1-0, 2-1, 3-2, 4-3, 5-4. Above 25 ms: wide, and pairs
	 * above 35 ms are no edge at all. */
	graph_of(d, N, 1, 35.0, 25.0, &g);
	assert_true(mcl_graph_rtt(&g, 0, 1) == 10.0);
	assert_true(mcl_graph_rtt(&g, 4, 5) == 10.0);
	assert_true(isnan(mcl_graph_rtt(&g, 0, 2)));
	assert_int_equal(g.off[N], 2 * 5);
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			assert_int_equal(mcl_graph_wide(&g, i, j),
			    i != j && !isnan(d[i * N + j]) && d[i * N + j] > 25.0);
	mcl_graph_free(&g);
}

static void
test_graph_errors(void **state)
{
	struct mcl_gparams gp = { .keep = 4, .edge_max_ms = INFINITY };
	struct mcl_gbuild *b;
	char err[128];
	(void)state;

	assert_null(mcl_gbuild_new(0, &gp, err, sizeof(err)));
	assert_string_equal(err, "no nodes to cluster");
	b = mcl_gbuild_new(3, &gp, err, sizeof(err));
	assert_non_null(b);
	assert_int_equal(mcl_gbuild_pair(b, 2, 1, -1.0, err, sizeof(err)), -1);
	assert_string_equal(err, "negative RTT -1 ms between nodes 1 and 2");
	assert_int_equal(mcl_gbuild_pair(b, 0, 1, INFINITY, err, sizeof(err)), 0);
	mcl_gbuild_free(b);
}

/* Sites of several relays around the world: a site is a point on a circle
 * of 400 ms circumference, its relays within 0.5 ms of it. pos[i] is
 * relay i's position; RTT = distance along the circle + 0.2 ms. */
static void
sites(double *d, size_t n, size_t nsites, uint64_t seed, double *pos)
{
	struct rng r;
	double site[64];

	rng_seed(&r, seed);
	for (size_t k = 0; k < nsites; k++)
		site[k] = 400.0 * (double)k / (double)nsites + 5.0 * rng_unit(&r);
	for (size_t i = 0; i < n; i++)
		pos[i] = site[i % nsites] + 0.5 * rng_unit(&r);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			double x = fabs(pos[i] - pos[j]);

			d[i * n + j] = i == j ? 0.0 : fmin(x, 400.0 - x) + 0.2;
		}
}

/* Every relay scaled by its own factor in [1 - f, 1 + f], per pair. */
static void
jitter(const double *d, double *out, size_t n, double f, uint64_t seed)
{
	struct rng r;

	rng_seed(&r, seed);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i; j < n; j++)
			set(out, n, i, j, i == j ? 0.0 :
			    d[i * n + j] * (1.0 - f + 2.0 * f * rng_unit(&r)));
}

static void
test_capped_mcl_finds_sites(void **state)
{
	enum { N = 120, S = 24 };
	static double d[N * N];
	double pos[N];
	uint32_t g[N];
	size_t ng;
	struct mcl_graph gr;
	struct mcl_params p;
	char err[128];
	(void)state;

	/* 24 sites ~17 ms apart, 5 relays each; within 10 ms bound, keep 8
	 * neighbours, 16 entries a row: one group per site. */
	sites(d, N, S, 3, pos);
	graph_of(d, N, 8, 10.0, 10.0, &gr);
	mcl_params_default(&p);
	p.max_intra_rtt_ms = 10.0;
	p.max_entries = 16;
	assert_int_equal(mcl_groups_graph(&gr, &p, g, &ng, err, sizeof(err)), 0);
	assert_int_equal(ng, S);
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			assert_int_equal(g[i] == g[j], i % S == j % S);
	mcl_graph_free(&gr);
}

/* --- stable ids --- */

static void
test_ids_follow_overlap(void **state)
{
	enum { N = 6 };
	double d[N * N];
	struct mcl_graph g;
	uint32_t old[N] = { 7, 7, 7, 3, 3, GRPSTAB_NONE }, out[N];
	uint32_t fresh[N] = { 1, 1, 1, 0, 0, 2 };
	size_t changed;
	char err[128];
	(void)state;

	for (size_t i = 0; i < N * N; i++)
		d[i] = 1.0;
	graph_of(d, N, 0, INFINITY, 0.0, &g);
	/* Other cluster numbers, same partition: the old ids; the relay never
	 * grouped gets the lowest id no old group holds, and is no change. */
	assert_int_equal(grpstab_apply(&g, old, fresh, 0.0, NULL, out, &changed, err,
	    sizeof(err)), 0);
	assert_int_equal(changed, 0);
	{
		static const uint32_t want[N] = { 7, 7, 7, 3, 3, 0 };

		assert_memory_equal(out, want, sizeof(want));
	}
	/* First grouping of all: ids in order of the lowest member. */
	for (size_t i = 0; i < N; i++)
		old[i] = GRPSTAB_NONE;
	assert_int_equal(grpstab_apply(&g, old, fresh, 0.0, NULL, out, &changed, err,
	    sizeof(err)), 0);
	{
		static const uint32_t want[N] = { 0, 0, 0, 1, 1, 2 };

		assert_memory_equal(out, want, sizeof(want));
	}
	mcl_graph_free(&g);
}

static void
test_hysteresis(void **state)
{
	enum { N = 6 };
	double d[N * N];
	struct mcl_graph g;
	uint32_t old[N] = { 0, 0, 0, 0, 1, 1 }, out[N];
	size_t changed;
	char err[128];
	(void)state;

	/* {0,1,2,3} at about 10 ms of each other, {4,5} 1 ms apart and 30 ms
	 * from the rest. */
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			d[i * N + j] = i == j ? 0.0 : (i < 4) == (j < 4) ? 10.0 : 30.0;
	set(d, N, 4, 5, 1.0);
	set(d, N, 2, 3, 9.0);
	graph_of(d, N, 0, INFINITY, 40.0, &g);

	/* A near tie splits {2,3} off: it stays (9 ms against 10). */
	{
		uint32_t fresh[N] = { 0, 0, 1, 1, 2, 2 };

		assert_int_equal(grpstab_apply(&g, old, fresh, 40.0, NULL, out, &changed, err,
		    sizeof(err)), 0);
		assert_memory_equal(out, old, sizeof(old));
		assert_int_equal(changed, 0);
	}
	/* The clustering puts 3 with {4,5} at 30 ms: not clearly better. */
	{
		uint32_t fresh[N] = { 0, 0, 0, 1, 1, 1 };

		assert_int_equal(grpstab_apply(&g, old, fresh, 40.0, NULL, out, &changed, err,
		    sizeof(err)), 0);
		assert_memory_equal(out, old, sizeof(old));
	}
	mcl_graph_free(&g);

	/* 3 really moved: 0.5 ms from 4 and 5, 38 ms from the others. */
	for (size_t j = 0; j < 3; j++)
		set(d, N, 3, j, 38.0);
	set(d, N, 3, 4, 0.5);
	set(d, N, 3, 5, 0.5);
	graph_of(d, N, 0, INFINITY, 40.0, &g);
	{
		uint32_t fresh[N] = { 0, 0, 0, 1, 1, 1 };
		static const uint32_t want[N] = { 0, 0, 0, 1, 1, 1 };

		assert_int_equal(grpstab_apply(&g, old, fresh, 40.0, NULL, out, &changed, err,
		    sizeof(err)), 0);
		assert_memory_equal(out, want, sizeof(want));
		assert_int_equal(changed, 1);
	}
	mcl_graph_free(&g);

	/* Over the bound with its old group: it must go, however close. */
	for (size_t j = 0; j < 3; j++)
		set(d, N, 3, j, 10.0);
	set(d, N, 3, 0, 41.0);
	set(d, N, 3, 4, 12.0);
	set(d, N, 3, 5, 12.0);
	graph_of(d, N, 0, INFINITY, 40.0, &g);
	{
		uint32_t fresh[N] = { 0, 0, 0, 1, 1, 1 };

		assert_int_equal(grpstab_apply(&g, old, fresh, 40.0, NULL, out, &changed, err,
		    sizeof(err)), 0);
		assert_int_equal(out[3], 1);
		assert_int_equal(changed, 1);
	}
	mcl_graph_free(&g);
}

static void
test_stay_respects_bound(void **state)
{
	enum { N = 4 };
	double d[N * N];
	struct mcl_graph g;
	uint32_t old[N] = { 0, 0, 1, 1 }, fresh[N] = { 0, 0, 0, 1 }, out[N];
	size_t changed;
	char err[128];
	(void)state;

	/* 2 joins {0,1} in the clustering (clearly: 1 ms against 20); 3 would
	 * stay in 1 with nobody, and keeps it. Then 3 wants to stay with 2's
	 * old group while 2 leaves: fine. But if 1 had stayed... the bound
	 * holds in the result whatever stays. */
	for (size_t i = 0; i < N * N; i++)
		d[i] = 20.0;
	set(d, N, 0, 1, 1.0);
	set(d, N, 0, 2, 1.0);
	set(d, N, 1, 2, 1.0);
	set(d, N, 3, 0, 50.0);
	graph_of(d, N, 0, INFINITY, 30.0, &g);
	assert_int_equal(grpstab_apply(&g, old, fresh, 30.0, NULL, out, &changed, err,
	    sizeof(err)), 0);
	for (size_t i = 0; i < N; i++)
		for (size_t j = 0; j < N; j++)
			if (i != j && out[i] == out[j])
				assert_true(d[i * N + j] <= 30.0);
	assert_int_equal(out[2], out[0]);
	mcl_graph_free(&g);
}

/* The directory's loop, as slot-dird runs it: graph (keep 16, bound 30 ms),
 * capped MCL, stable ids; regroup after regroup. */
static size_t
regroup(const double *d, size_t n, uint32_t *ids)
{
	struct mcl_graph g;
	struct mcl_params p;
	uint32_t *fresh = malloc(n * sizeof(*fresh)), *out = malloc(n * sizeof(*out));
	size_t ng, changed;
	char err[128];

	assert_non_null(fresh);
	assert_non_null(out);
	graph_of(d, n, 16, 30.0, 30.0, &g);
	mcl_params_default(&p);
	p.max_intra_rtt_ms = 30.0;
	p.max_entries = 32;
	assert_int_equal(mcl_groups_graph(&g, &p, fresh, &ng, err, sizeof(err)), 0);
	assert_int_equal(grpstab_apply(&g, ids, fresh, 30.0, NULL, out, &changed, err,
	    sizeof(err)), 0);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			if (i != j && out[i] == out[j])
				assert_true(d[i * n + j] <= 30.0);
	memcpy(ids, out, n * sizeof(*out));
	mcl_graph_free(&g);
	free(fresh);
	free(out);
	return changed;
}

static void
test_repeated_regroups(void **state)
{
	enum { N = 150, S = 30 };
	static double d[N * N], dj[N * N];
	double pos[N];
	uint32_t ids[N], first[N];
	size_t moved = 0;
	(void)state;

	/* 30 sites ~13 ms apart, 5 relays each: neighbouring sites are near
	 * ties for a 30 ms bound. */
	sites(d, N, S, 5, pos);
	for (size_t i = 0; i < N; i++)
		ids[i] = GRPSTAB_NONE;
	assert_int_equal(regroup(d, N, ids), 0);
	memcpy(first, ids, sizeof(ids));

	/* Unchanged RTTs: the same groups under the same ids. */
	for (int k = 0; k < 3; k++) {
		assert_int_equal(regroup(d, N, ids), 0);
		assert_memory_equal(ids, first, sizeof(ids));
	}
	/* RTTs jittered by up to 5%, twenty times: no one moves. */
	for (uint64_t k = 1; k <= 20; k++) {
		jitter(d, dj, N, 0.05, k);
		moved += regroup(dj, N, ids);
	}
	assert_int_equal(moved, 0);
	assert_memory_equal(ids, first, sizeof(ids));

	/* Relay 0 moves to relay 15's site (another group): followed, and
	 * it alone changes. */
	assert_int_not_equal(first[0], first[15]);
	for (size_t j = 1; j < N; j++) {
		double x = fabs(pos[15] - pos[j]);

		set(d, N, 0, j, j == 15 ? 0.3 : fmin(x, 400.0 - x) + 0.2);
	}
	assert_int_equal(regroup(d, N, ids), 1);
	assert_int_equal(ids[0], first[15]);
	for (size_t i = 1; i < N; i++)
		assert_int_equal(ids[i], first[i]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_graph_keep),
		cmocka_unit_test(test_graph_errors),
		cmocka_unit_test(test_capped_mcl_finds_sites),
		cmocka_unit_test(test_ids_follow_overlap),
		cmocka_unit_test(test_hysteresis),
		cmocka_unit_test(test_stay_respects_bound),
		cmocka_unit_test(test_repeated_regroups),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
