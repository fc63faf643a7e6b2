#include <stdlib.h>

#include "slot/chain.h"

void
chain_land_of(const struct chain_input *in, uint32_t *land_of)
{
	for (size_t i = 0; i < in->nrelay; i++)
		land_of[i] = CHAIN_NONE;
	for (size_t l = in->nland; l-- > 0; ) {
		uint32_t r = in->land_relay[l];

		if (r != CHAIN_NONE && r < in->nrelay)
			land_of[r] = (uint32_t)l;
	}
}

uint32_t
chain_rr(const struct chain_input *in, const uint32_t *land_of, size_t i, size_t j)
{
	size_t L = in->nland;
	uint32_t a = land_of[j] != CHAIN_NONE ? in->rl_us[i * L + land_of[j]] : CHAIN_NONE;
	uint32_t b = land_of[i] != CHAIN_NONE ? in->rl_us[j * L + land_of[i]] : CHAIN_NONE;

	if (i == j)
		return CHAIN_NONE;
	return a < b ? a : b;
}

static inline uint32_t
max32(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

/* The best and second-best lead-ins to a relay, by different last relays
 * before it: a longer lead-in may go through the best one's first relay. */
struct top2 {
	uint32_t v[2], m[2];
};

static inline void
offer(struct top2 *t, uint32_t v, uint32_t m)
{
	if (v < t->v[0] || (v == t->v[0] && m < t->m[0])) {
		if (t->m[0] != m) {
			t->v[1] = t->v[0];
			t->m[1] = t->m[0];
		}
		t->v[0] = v;
		t->m[0] = m;
	} else if (m != t->m[0] && (v < t->v[1] || (v == t->v[1] && m < t->m[1]))) {
		t->v[1] = v;
		t->m[1] = m;
	}
}

/* What a lead-in ending at j may take from the lead-in to m: prev's best to
 * m unless it starts at j (then the second best, which does not). first[]
 * is NULL for the client's own RTTs, which start nowhere. None when m may
 * not forward: it would be a relay before j. */
static inline uint32_t
from(const struct chain_input *in, const struct top2 *prev, const uint32_t *first,
    size_t m, size_t j)
{
	if (in->no_forward && in->no_forward[m])
		return CHAIN_NONE;
	if (first == NULL || first[m] != j)
		return prev[m].v[0];
	return prev[m].v[1];
}

/*
 * One relaxation: next[j] = min over relays m with a known RTT(m, j) of
 * max(lead-in to m, RTT(m, j)). RTT(m, j) is known only when m or j is a
 * landmark, so the two cases are scanned apart: for each j the landmarks m
 * (O(L)), and for each landmark j every m (O(n)): O(n L) in all, where the
 * whole matrix would be O(n^2). With prev's first relays (first[m], of its
 * best lead-in), a lead-in to j never comes back through j: lead-ins have
 * at most two relays, so only the first can be j.
 */
static void
relax(const struct chain_input *in, const uint32_t *land_of, const struct top2 *prev,
    const uint32_t *first, struct top2 *next)
{
	size_t n = in->nrelay, L = in->nland;

	for (size_t j = 0; j < n; j++)
		next[j] = (struct top2){ { CHAIN_NONE, CHAIN_NONE }, { CHAIN_NONE, CHAIN_NONE } };
	for (size_t j = 0; j < n; j++) {
		const uint32_t *row = in->rl_us + j * L;

		if (in->avoid && in->avoid[j])
			continue;
		/* m a landmark: RTT(j, m) from j's row. */
		for (size_t l = 0; l < L; l++) {
			uint32_t m = in->land_relay[l], p;

			if (m == CHAIN_NONE || m >= n || m == j || row[l] == CHAIN_NONE ||
			    (p = from(in, prev, first, m, j)) == CHAIN_NONE)
				continue;
			offer(&next[j], max32(p, row[l]), m);
		}
		/* j a landmark: RTT(m, j) from every m's row. */
		uint32_t lj = land_of[j];

		if (lj == CHAIN_NONE)
			continue;
		for (size_t m = 0; m < n; m++) {
			uint32_t rl = in->rl_us[m * L + lj], p;

			if (m == j || rl == CHAIN_NONE ||
			    (p = from(in, prev, first, m, j)) == CHAIN_NONE)
				continue;
			offer(&next[j], max32(p, rl), (uint32_t)m);
		}
	}
}

int
chain_reach(const struct chain_input *in, struct chain_lead *out)
{
	size_t n = in->nrelay;
	struct top2 *p0, *d1, *d2;
	uint32_t *land_of, *first;

	if (in->max_chain < 1 || in->max_chain > CHAIN_MAX)
		return -1;
	for (size_t j = 0; j < n; j++)
		out[j] = (struct chain_lead){ .us = CHAIN_NONE, .us1 = CHAIN_NONE,
		    .via1 = CHAIN_NONE };
	if (in->max_chain == 1 || n == 0)
		return 0;
	p0 = malloc(3 * n * sizeof(*p0));
	land_of = malloc(2 * n * sizeof(*land_of));
	if (p0 == NULL || land_of == NULL) {
		free(p0);
		free(land_of);
		return -1;
	}
	d1 = p0 + n;
	d2 = d1 + n;
	first = land_of + n;
	chain_land_of(in, land_of);
	/* The first relay of a lead-in is reached straight from the client. */
	for (size_t m = 0; m < n; m++)
		p0[m] = (struct top2){ { in->avoid && in->avoid[m] ? CHAIN_NONE : in->cr_us[m],
		    CHAIN_NONE }, { CHAIN_NONE, CHAIN_NONE } };
	relax(in, land_of, p0, NULL, d1);
	for (size_t j = 0; j < n; j++) {
		first[j] = d1[j].m[0];
		if (d1[j].v[0] != CHAIN_NONE)
			out[j] = (struct chain_lead){ .us = d1[j].v[0], .via = { d1[j].m[0] },
			    .nvia = 1, .us1 = d1[j].v[0], .via1 = d1[j].m[0] };
	}
	if (in->max_chain >= 3) {
		relax(in, land_of, d1, first, d2);
		/* Ties go to the shorter lead-in: a relay fewer. */
		for (size_t j = 0; j < n; j++) {
			uint32_t b = d2[j].m[0];

			if (d2[j].v[0] >= out[j].us)
				continue;
			out[j].us = d2[j].v[0];
			out[j].nvia = 2;
			out[j].via[0] = first[b] != j ? d1[b].m[0] : d1[b].m[1];
			out[j].via[1] = b;
		}
	}
	free(p0);
	free(land_of);
	return 0;
}
