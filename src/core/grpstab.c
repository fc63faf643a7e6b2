/*
 * Stable group ids and hysteresis over successive clusterings (see
 * include/slot/grpstab.h). Everything is O(n log n) plus, per relay that
 * would change group, its degree and the size of its old group.
 */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
#include "slot/errbuf.h"
#include "slot/grpstab.h"

static void
grpstab_params_default(struct grpstab_params *p)
{
	p->margin = 0.25;
	p->slack_ms = 10.0;
}

/* Members of each group, by id: the relays sorted by id, and each relay's
 * run in that order. */
struct members {
	size_t *by;		/* relay indices sorted by (id, index) */
	size_t *pos;		/* pos[i]: where relay i sits in by */
	const uint32_t *id;
	size_t n;
};

static int
cmp_by_id(const void *x, const void *y, void *arg)
{
	const uint32_t *id = arg;
	size_t a = *(const size_t *)x, b = *(const size_t *)y;

	if (id[a] != id[b])
		return id[a] < id[b] ? -1 : 1;
	return a < b ? -1 : a > b;
}

/* Sorts the relays by id. Those with GRPSTAB_NONE (never in old, which is
 * all this is asked about them) form one run that nobody asks for. */
static void
members_sort(struct members *m, const uint32_t *id)
{
	m->id = id;
	for (size_t i = 0; i < m->n; i++)
		m->by[i] = i;
	qsort_r(m->by, m->n, sizeof(*m->by), cmp_by_id, (void *)(uintptr_t)id);
	for (size_t k = 0; k < m->n; k++)
		m->pos[m->by[k]] = k;
}

/* The run of i's group in m->by: [*lo, *hi). */
static void
members_of(const struct members *m, size_t i, size_t *lo, size_t *hi)
{
	size_t k = m->pos[i];
	uint32_t id = m->id[i];

	*lo = *hi = k;
	while (*lo > 0 && m->id[m->by[*lo - 1]] == id)
		(*lo)--;
	while (*hi < m->n && m->id[m->by[*hi]] == id)
		(*hi)++;
}

/* Whether relays i and j are measured above bound. */
static bool
over(const struct mcl_graph *g, double bound, size_t i, size_t j)
{
	double r;

	if (bound <= 0.0)
		return false;
	if (mcl_graph_wide(g, i, j))
		return true;
	r = mcl_graph_rtt(g, i, j);
	return !isnan(r) && r > bound;
}

/* Whether i is measured above bound from some other member of its group in
 * m. */
static bool
over_group(const struct mcl_graph *g, double bound, const struct members *m, size_t i)
{
	size_t lo, hi;

	if (bound <= 0.0)
		return false;
	members_of(m, i, &lo, &hi);
	for (size_t k = lo; k < hi; k++)
		if (m->by[k] != i && over(g, bound, i, m->by[k]))
			return true;
	return false;
}

struct overlap {
	size_t count;
	uint32_t old, fresh;
};

static int
cmp_overlap(const void *x, const void *y)
{
	const struct overlap *a = x, *b = y;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	if (a->old != b->old)
		return a->old < b->old ? -1 : 1;
	return a->fresh < b->fresh ? -1 : a->fresh > b->fresh;
}

/*
 * Step 1: an id per new cluster into id_of[fresh] (n entries). olds: the
 * distinct old ids, sorted (nold); used: scratch of nold flags. ov: scratch
 * of n overlaps.
 */
static void
match_ids(const uint32_t *old, const uint32_t *fresh, size_t n, const uint32_t *olds,
    size_t nold, unsigned char *used, uint32_t *id_of, struct overlap *ov)
{
	size_t nov = 0, nidx = 0, k;
	uint32_t next = 0;

	for (size_t i = 0; i < n; i++) {
		id_of[i] = GRPSTAB_NONE;
		if (old[i] != GRPSTAB_NONE) {
			ov[nidx].old = old[i];
			ov[nidx].fresh = fresh[i];
			ov[nidx].count = 1;
			nidx++;
		}
	}
	/* Count each (fresh, old) pair: sort by it, then collapse runs. */
	qsort(ov, nidx, sizeof(*ov), cmp_overlap);	/* count 1: by old, fresh */
	for (size_t i = 0; i < nidx; i++) {
		if (nov > 0 && ov[nov - 1].old == ov[i].old && ov[nov - 1].fresh == ov[i].fresh) {
			ov[nov - 1].count++;
			continue;
		}
		ov[nov++] = ov[i];
	}
	qsort(ov, nov, sizeof(*ov), cmp_overlap);
	memset(used, 0, nold);
	for (size_t i = 0; i < nov; i++) {
		size_t u = lower_u32(olds, 0, nold, ov[i].old);	/* olds holds it */

		if (id_of[ov[i].fresh] != GRPSTAB_NONE || used[u])
			continue;
		id_of[ov[i].fresh] = ov[i].old;
		used[u] = 1;
	}
	/* The rest: the lowest ids no old group holds, in order of each
	 * cluster's lowest member. */
	k = 0;
	for (size_t i = 0; i < n; i++) {
		if (id_of[fresh[i]] != GRPSTAB_NONE)
			continue;
		while (k < nold && olds[k] < next)
			k++;
		while (k < nold && olds[k] == next) {
			next++;
			k++;
		}
		id_of[fresh[i]] = next++;
	}
}

/*
 * Step 2 for relay i (old id valid, proposal r0[i] different): whether it
 * stays in its old group.
 */
static bool
stays(const struct mcl_graph *g, const uint32_t *old, const uint32_t *r0, size_t i,
    double bound, const struct grpstab_params *p, const struct members *mold)
{
	double so = 0.0, sn = 0.0;
	size_t co = 0, cn = 0;

	for (size_t y = g->off[i]; y < g->off[i + 1]; y++) {
		size_t j = g->nbr[y];

		if (old[j] == old[i]) {
			so += g->rtt[y];
			co++;
		}
		if (r0[j] == r0[i]) {
			sn += g->rtt[y];
			cn++;
		}
	}
	if (co == 0 || over_group(g, bound, mold, i))
		return false;
	if (cn == 0)
		return true;
	return (sn / (double)cn) * (1.0 + p->margin) + p->slack_ms >= so / (double)co;
}

int
grpstab_apply(const struct mcl_graph *g, const uint32_t *old, const uint32_t *fresh,
    double bound_ms, const struct grpstab_params *p, uint32_t *out, size_t *changed,
    char *err, size_t errlen)
{
	struct grpstab_params def;
	size_t n = g->n, nold = 0;
	uint32_t *olds = NULL, *id_of = NULL, *r0 = NULL;
	unsigned char *used = NULL, *stay = NULL;
	struct overlap *ov = NULL;
	struct members mold = { .n = n }, mres = { .n = n };
	int rc = -1;

	if (p == NULL) {
		grpstab_params_default(&def);
		p = &def;
	}
	*changed = 0;
	olds = malloc((n ? n : 1) * sizeof(*olds));
	id_of = malloc((n ? n : 1) * sizeof(*id_of));
	r0 = malloc((n ? n : 1) * sizeof(*r0));
	used = malloc(n ? n : 1);
	stay = calloc(n ? n : 1, 1);
	ov = malloc((n ? n : 1) * sizeof(*ov));
	mold.by = malloc((n ? n : 1) * sizeof(*mold.by));
	mold.pos = malloc((n ? n : 1) * sizeof(*mold.pos));
	mres.by = malloc((n ? n : 1) * sizeof(*mres.by));
	mres.pos = malloc((n ? n : 1) * sizeof(*mres.pos));
	if (olds == NULL || id_of == NULL || r0 == NULL || used == NULL || stay == NULL ||
	    ov == NULL || mold.by == NULL || mold.pos == NULL ||
	    mres.by == NULL || mres.pos == NULL) {
		errbuf_set(err, errlen, "out of memory for %zu relays", n);
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (old[i] != GRPSTAB_NONE)
			olds[nold++] = old[i];
	qsort(olds, nold, sizeof(*olds), cmp_u32);
	{
		size_t u = 0;

		for (size_t i = 0; i < nold; i++)
			if (u == 0 || olds[u - 1] != olds[i])
				olds[u++] = olds[i];
		nold = u;
	}
	match_ids(old, fresh, n, olds, nold, used, id_of, ov);
	for (size_t i = 0; i < n; i++)
		out[i] = r0[i] = id_of[fresh[i]];

	members_sort(&mold, old);
	for (size_t i = 0; i < n; i++)
		if (old[i] != GRPSTAB_NONE && old[i] != r0[i] &&
		    stays(g, old, r0, i, bound_ms, p, &mold)) {
			stay[i] = 1;
			out[i] = old[i];
		}

	/* Step 3: whoever stayed leaves again if the result breaks the bound
	 * with it. Each pass only sends relays to their proposal, so it ends. */
	for (bool again = bound_ms > 0.0; again;) {
		again = false;
		members_sort(&mres, out);
		for (size_t i = 0; i < n; i++)
			if (stay[i] && over_group(g, bound_ms, &mres, i)) {
				stay[i] = 0;
				out[i] = r0[i];
				again = true;
			}
	}
	for (size_t i = 0; i < n; i++)
		if (old[i] != GRPSTAB_NONE && out[i] != old[i])
			(*changed)++;
	rc = 0;
out:
	free(olds);
	free(id_of);
	free(r0);
	free(used);
	free(stay);
	free(ov);
	free(mold.by);
	free(mold.pos);
	free(mres.by);
	free(mres.pos);
	return rc;
}
