#ifndef SLOT_MCL_H
#define SLOT_MCL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Groups nodes of low mutual RTT with Markov clustering (van Dongen's MCL),
 * edge weight 1/RTT: slot-dird's groups for RandGroup-k selection.
 *
 * Two entries: mcl_groups takes a dense n x n matrix and clusters every
 * measured pair (exact MCL, as the reference mcl program computes it);
 * mcl_groups_graph takes a sparse graph (struct mcl_graph, built pair by
 * pair with struct mcl_gbuild) and may cap the entries kept per row, as
 * mcl's own -S/-R resource limits do, so that memory and time grow with
 * n * neighbours instead of n^2 and n^3. The directory uses the second.
 *
 * What to expect: on a complete graph of one node per city, such as the
 * WonderNetwork data, 1/RTT weights differ too little between near and far
 * for MCL to make regional groups: the defaults give 5 groups of the 250
 * servers (2 of a spread 60), as the reference mcl program does. Higher
 * inflation helps little (16 groups at 6.0); max_intra_rtt_ms gives tight
 * groups. Sites of several nodes a fraction of a millisecond apart (as on
 * PlanetLab) are what MCL separates well.
 */

struct mcl_params {
	double inflation;	/* > 1; higher gives more, smaller groups; 2.0 */
	double prune;		/* in [0, 1): entries below are dropped; 1e-5 */
	unsigned max_iter;	/* >= 1; 100 */
	double max_intra_rtt_ms; /* > 0: split groups wider than this; 0: no */
	size_t max_entries;	/* per row after each round, the largest kept;
				 * 0: no cap (exact MCL); mcl_groups_graph only */
};

void mcl_params_default(struct mcl_params *p);

/*
 * A sparse, symmetric RTT graph over nodes 0..n-1. Node i's edges are
 * nbr[off[i]] .. nbr[off[i+1]-1], ascending, with their RTTs in ms (>= 0).
 * wide, when not NULL, is an n x n bit matrix (row-major, 64 bits a word):
 * bit (i, j) set means the pair was measured above wide_ms, whether or not
 * it is an edge; the split by max_intra_rtt_ms reads it, so it must be
 * there (with wide_ms equal to that bound) whenever the bound is used and
 * edges do not cover every measured pair.
 */
struct mcl_graph {
	size_t n;
	size_t *off;		/* n + 1 */
	uint32_t *nbr;
	double *rtt;
	uint64_t *wide;		/* NULL: no pair known above wide_ms */
	double wide_ms;
};

/* Which measured pairs a built graph keeps. */
struct mcl_gparams {
	size_t keep;		/* edges kept per node: its keep nearest (a
				 * pair stays if either end keeps it); 0: all */
	double edge_max_ms;	/* pairs above this are no edge (INFINITY: all) */
	double wide_ms;		/* > 0: record pairs above it in wide; 0: no */
};

struct mcl_gbuild;

/* Starts a graph of n nodes. Returns NULL with the reason in err (n == 0,
 * too many nodes, out of memory). Memory: n * keep edges, plus n^2 / 8
 * bytes with wide_ms > 0. */
struct mcl_gbuild *mcl_gbuild_new(size_t n, const struct mcl_gparams *p, char *err,
    size_t errlen);

/* Offers the pair {i, j} (i != j, both < n) measured at rtt_ms; offer each
 * pair at most once. NaN or infinity: not measured (ignored). Returns 0, or
 * -1 with the reason in err (a negative RTT, out of memory). */
int mcl_gbuild_pair(struct mcl_gbuild *b, size_t i, size_t j, double rtt_ms, char *err,
    size_t errlen);

/* Makes the graph and frees b (also on failure). Returns 0, or -1 out of
 * memory (reason in err). */
int mcl_gbuild_finish(struct mcl_gbuild *b, struct mcl_graph *g, char *err, size_t errlen);
void mcl_gbuild_free(struct mcl_gbuild *b);

/* Frees what mcl_gbuild_finish allocated; g may be all zero. */
void mcl_graph_free(struct mcl_graph *g);

/* The RTT of edge {i, j}, NaN when it is no edge. */
double mcl_graph_rtt(const struct mcl_graph *g, size_t i, size_t j);

/* Whether {i, j} is recorded as measured above wide_ms. */
bool mcl_graph_wide(const struct mcl_graph *g, size_t i, size_t j);

/*
 * Clusters the n nodes of rtt_ms (n*n, row-major, milliseconds). NaN or
 * infinity means not measured; a pair given differently in the two
 * directions counts as their mean (or the finite one). The diagonal is not
 * read. p may be NULL for the defaults; p->max_entries is ignored (every
 * measured pair is an edge and no row is capped).
 *
 * The method:
 * - weights w_ij = 1 / max(RTT_ij, 0.1 ms); no edge for a missing pair;
 * - a self-loop on each node weighing the largest weight of its column (the
 *   mcl program's default; 1 for a node with no edges), then every column
 *   normalised to sum 1;
 * - repeat: expansion M = M * M; inflation (each entry to the power
 *   inflation, columns normalised again); entries below prune dropped
 *   (except each column's largest) and columns normalised; with
 *   max_entries, only the largest max_entries of a column stay (ties to the
 *   lower node) and it is normalised again; until no entry moves by 1e-9 or
 *   more, or max_iter rounds;
 * - attractors are the nodes with a non-zero diagonal entry. Attractors that
 *   attract each other form one cluster; any other node joins the cluster of
 *   the lowest-numbered attractor it is attracted to, or, with none (only
 *   possible when max_iter stopped the process early), forms its own;
 * - a node with no measured RTT is a group of its own (no edges);
 * - with max_intra_rtt_ms > 0, a group in which some measured pair exceeds
 *   the bound is split greedily: the lowest-numbered member not yet placed
 *   starts a new group; the other unplaced members are tried nearest to it
 *   first (then by index) and each joins if its measured RTTs to the members
 *   so far are all within the bound and there is at least one (unmeasured
 *   pairs neither count against a node nor for it); repeat until all are
 *   placed. Every resulting group has all its measured pairs within the
 *   bound. (In a graph, "measured" is an edge or a wide bit; a wide pair
 *   that is no edge sorts after every edge.)
 *
 * Groups are numbered 0..ngroups-1 in order of their lowest node index, so
 * the result depends on the input only. On success group[i] is node i's
 * group, *ngroups the count, and 0 is returned; on failure -1 with the
 * reason in err (n == 0, bad parameters, a negative RTT, out of memory).
 * Memory: mcl_groups, the graph of every measured pair and two matrices of
 * up to n x n entries (12 bytes each); mcl_groups_graph, two of up to
 * n x max(max_entries, degree). Time: see src/core/mcl.c.
 */
int mcl_groups(const double *rtt_ms, size_t n, const struct mcl_params *p,
    uint32_t *group, size_t *ngroups, char *err, size_t errlen);
int mcl_groups_graph(const struct mcl_graph *g, const struct mcl_params *p,
    uint32_t *group, size_t *ngroups, char *err, size_t errlen);

#endif
