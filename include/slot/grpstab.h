#ifndef SLOT_GRPSTAB_H
#define SLOT_GRPSTAB_H

#include <stddef.h>
#include <stdint.h>

#include "slot/mcl.h"

/*
 * Keeps a directory's groups stable from one clustering to the next: the
 * same RTTs give the same groups under the same ids, and near ties (RTTs
 * that moved a little, a clustering that tips the other way) move no one.
 * Pure: the caller gives the groups it serves now and a new clustering.
 *
 * 1. Ids: each new cluster takes the old id it shares most members with
 *    (pairs taken by overlap, largest first; ties to the lower old id, then
 *    the lower cluster); the others take the lowest ids no old group uses,
 *    in order of their lowest member.
 * 2. Hysteresis: a relay whose id would change stays in its old group
 *    unless the new clustering puts it clearly elsewhere: it moves when its
 *    mean RTT to its new group's members (edges of g only), times
 *    (1 + margin), plus slack_ms, is below its mean RTT to its old group's
 *    other members; when it has no edge to any of those; or when some pair
 *    with them is measured above bound_ms. A relay alone in its new group
 *    stays in the old one on any edge to it.
 * 3. The bound: a relay kept in its old group goes to its new one after
 *    all if some member of the result is measured above bound_ms from it,
 *    until none is. So every group keeps the clustering's promise.
 */

#define GRPSTAB_NONE UINT32_MAX	/* a relay not grouped before */

struct grpstab_params {
	double margin;		/* >= 0; 0.25 */
	double slack_ms;	/* >= 0; 10 (a fifth of the default 50 ms bound:
				 * two sites a few ms apart are one place) */
};

/*
 * g: the graph that was clustered (g->n relays; its edges and wide bits say
 * how far relays are). old[i]: relay i's current group id, GRPSTAB_NONE for
 * one never grouped (it neither keeps an id nor counts as changed). fresh[i]:
 * its cluster in the new clustering, numbered below n. bound_ms: the
 * intra-group bound, 0 for none. p may be NULL for the defaults.
 *
 * Writes the ids to serve into out[i] and the relays whose id changed (of
 * those with one) into *changed. Returns 0, or -1 out of memory (reason in
 * err).
 */
int grpstab_apply(const struct mcl_graph *g, const uint32_t *old, const uint32_t *fresh,
    double bound_ms, const struct grpstab_params *p, uint32_t *out, size_t *changed,
    char *err, size_t errlen);

#endif
