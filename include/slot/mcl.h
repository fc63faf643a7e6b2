#ifndef SLOT_MCL_H
#define SLOT_MCL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Groups nodes of low mutual RTT with Markov clustering (van Dongen's MCL),
 * edge weight 1/RTT: slot-dird's groups for RandGroup-k selection.
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
};

void mcl_params_default(struct mcl_params *p);

/*
 * Clusters the n nodes of rtt_ms (n*n, row-major, milliseconds). NaN or
 * infinity means not measured; a pair given differently in the two
 * directions counts as their mean (or the finite one). The diagonal is not
 * read. p may be NULL for the defaults.
 *
 * The method:
 * - weights w_ij = 1 / max(RTT_ij, 0.1 ms); no edge for a missing pair;
 * - a self-loop on each node weighing the largest weight of its column (the
 *   mcl program's default; 1 for a node with no edges), then every column
 *   normalised to sum 1;
 * - repeat: expansion M = M * M; inflation (each entry to the power
 *   inflation, columns normalised again); entries below prune dropped
 *   (except each column's largest) and columns normalised; until no entry
 *   moves by 1e-9 or more, or max_iter rounds;
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
 *   bound.
 *
 * Groups are numbered 0..ngroups-1 in order of their lowest node index, so
 * the result depends on the input only. On success group[i] is node i's
 * group, *ngroups the count, and 0 is returned; on failure -1 with the
 * reason in err (n == 0, bad parameters, a negative RTT, out of memory).
 * Memory: three n x n arrays (two of doubles), freed before returning.
 * Time: see src/core/mcl.c.
 */
int mcl_groups(const double *rtt_ms, size_t n, const struct mcl_params *p,
    uint32_t *group, size_t *ngroups, char *err, size_t errlen);

#endif
