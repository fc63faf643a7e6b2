#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cover.h"

struct byrtt {
	uint32_t rtt, idx;
};

static int
cmp_byrtt(const void *a, const void *b)
{
	const struct byrtt *x = a, *y = b;

	if (x->rtt != y->rtt)
		return x->rtt < y->rtt ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* The path to a server at a landmark RTT rl from relay i: through i alone,
 * or through the chain ending at i, counted at its path * chain_gain when
 * that is shorter and its reply comes in time; +inf when unknown. */
static inline float
via(const struct cover_input *in, size_t i, uint32_t rl, float direct)
{
	uint32_t cr = in->cr_us[i];
	float single, chain;

	if (rl == COVER_NONE)
		return INFINITY;
	single = (float)(rl > cr ? rl : cr);
	if (in->lead_us == NULL || in->lead_us[i] == COVER_NONE ||
	    (in->c_wait > 0 && (float)cr + (float)rl > (float)in->c_wait * direct))
		return single;
	chain = (float)(rl > in->lead_us[i] ? rl : in->lead_us[i]);
	return chain * (float)in->chain_gain < single ? chain * (float)in->chain_gain : single;
}

int
cover_rank(const struct cover_input *in, size_t max, uint32_t *out, size_t *nout,
    size_t *ngreedy)
{
	size_t n = in->nrelay, L = in->nland, nl = 0, k = 0;
	/* Per usable landmark: its column, the best path so far, and the
	 * weight over the direct RTT, so that a gain is one multiply. */
	size_t *col = malloc((L ? L : 1) * sizeof(*col));
	float *cur = malloc((L ? L : 1) * sizeof(*cur));
	float *scale = malloc((L ? L : 1) * sizeof(*scale));
	float *dir = malloc((L ? L : 1) * sizeof(*dir));
	bool *taken = calloc(n ? n : 1, sizeof(*taken));
	struct byrtt *rest = malloc((n ? n : 1) * sizeof(*rest));
	int rc = -1;

	if (col == NULL || cur == NULL || scale == NULL || dir == NULL || taken == NULL ||
	    rest == NULL)
		goto out;
	for (size_t l = 0; l < L; l++) {
		uint32_t r = in->land_relay[l];
		float w = in->land_weight ? in->land_weight[l] : 1.0f;

		if (r == COVER_NONE || r >= n || in->cr_us[r] == COVER_NONE ||
		    in->cr_us[r] == 0 || !(w > 0))
			continue;
		col[nl] = l;
		cur[nl] = (float)in->cr_us[r];
		dir[nl] = cur[nl];
		scale[nl] = w / (float)in->cr_us[r];
		nl++;
	}
	while (k < max) {
		double best = 0;
		size_t bi = SIZE_MAX;

		for (size_t i = 0; i < n; i++) {
			uint32_t cr = in->cr_us[i];
			const uint32_t *row = in->rl_us + i * L;
			double g = 0;

			if (taken[i] || cr == COVER_NONE)
				continue;
			/* No path through i is shorter than its first loop: the
			 * landmarks already closer are skipped at once. */
			float lo = in->lead_us && in->lead_us[i] < cr ?
			    (float)in->lead_us[i] : (float)cr;

			for (size_t x = 0; x < nl; x++) {
				if (lo >= cur[x])
					continue;
				float p = via(in, i, row[col[x]], dir[x]);

				if (p < cur[x])
					g += (double)((cur[x] - p) * scale[x]);
			}
			/* Ties: the nearer relay, then the lower index. */
			if (g > best || (g == best && g > 0 && bi != SIZE_MAX &&
			    cr < in->cr_us[bi]))
				best = g, bi = i;
		}
		if (bi == SIZE_MAX)
			break;
		taken[bi] = true;
		out[k++] = (uint32_t)bi;
		for (size_t x = 0; x < nl; x++) {
			float p = via(in, bi, in->rl_us[bi * L + col[x]], dir[x]);

			if (p < cur[x])
				cur[x] = p;
		}
	}
	if (ngreedy != NULL)
		*ngreedy = k;
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (!taken[i] && in->cr_us[i] != COVER_NONE)
			rest[m++] = (struct byrtt){ in->cr_us[i], (uint32_t)i };
	qsort(rest, m, sizeof(*rest), cmp_byrtt);
	for (size_t i = 0; i < m && k < max; i++)
		out[k++] = rest[i].idx;
	*nout = k;
	rc = 0;
out:
	free(col);
	free(cur);
	free(scale);
	free(dir);
	free(taken);
	free(rest);
	return rc;
}

/* Nodes sampled to judge how measured a node is and how central: a stride
 * over all, so that the cost is O(n) per node whatever the overlay. */
#define SAMPLE 64

size_t
cover_beside(const struct cover_input *in, size_t beside, uint32_t not_land, size_t max,
    uint32_t *out)
{
	size_t n = in->nrelay, L = in->nland, lb = SIZE_MAX, k = 0;
	uint32_t best = COVER_NONE;
	float direct = INFINITY;

	if (beside >= n || max == 0)
		return 0;
	for (size_t l = 0; l < L; l++) {
		uint32_t v = in->land_relay[l] == beside ? 0 : in->rl_us[beside * L + l];

		if (not_land != COVER_NONE && in->land_relay[l] == not_land)
			continue;
		if (v < best)
			best = v, lb = l;
	}
	if (lb == SIZE_MAX)
		return 0;
	if (in->land_relay[lb] != COVER_NONE && in->land_relay[lb] < n &&
	    in->cr_us[in->land_relay[lb]] != COVER_NONE)
		direct = (float)in->cr_us[in->land_relay[lb]];
	/* A partial selection: max is a few probes, n a few thousand relays. */
	float *score = malloc((max ? max : 1) * sizeof(*score));

	if (score == NULL)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (in->cr_us[i] == COVER_NONE)
			continue;
		float p = via(in, i, in->land_relay[lb] == i ? 0 : in->rl_us[i * L + lb], direct);
		size_t at = k;

		if (!isfinite(p) || (k == max && !(p < score[k - 1])))
			continue;
		while (at > 0 && p < score[at - 1])
			at--;
		if (k < max)
			k++;
		memmove(score + at + 1, score + at, (k - 1 - at) * sizeof(*score));
		memmove(out + at + 1, out + at, (k - 1 - at) * sizeof(*out));
		score[at] = p;
		out[at] = (uint32_t)i;
	}
	free(score);
	return k;
}

int
cover_landmarks(size_t n, cover_rtt_fn rtt, void *arg, size_t max, const bool *prefer,
    uint32_t *out, float *weight, size_t *nout)
{
	float *dmin = malloc((n ? n : 1) * sizeof(*dmin));
	bool *ok = calloc(n ? n : 1, sizeof(*ok));
	size_t ns = n < SAMPLE ? n : SAMPLE, k = 0, first = SIZE_MAX;
	size_t best_known = 0;

	if (dmin == NULL || ok == NULL) {
		free(dmin);
		free(ok);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t known = 0, asked = 0;

		for (size_t s = 0; s < ns; s++) {
			size_t j = s * n / ns;
			uint32_t v;

			if (j == i)
				continue;
			asked++;
			if ((v = rtt(arg, i, j)) != COVER_NONE)
				known++;
		}
		ok[i] = 2 * known >= asked;
		/* The best measured node first, the earlier of equals: a start
		 * that does not move with the jitter of RTTs, so that the same
		 * overlay keeps its landmarks. */
		if (ok[i] && (first == SIZE_MAX || known > best_known ||
		    (known == best_known && prefer && prefer[i] && !prefer[first]))) {
			best_known = known;
			first = i;
		}
		dmin[i] = INFINITY;
	}
	for (size_t next = first; next != SIZE_MAX && k < max; ) {
		out[k++] = (uint32_t)next;
		ok[next] = false;
		dmin[next] = -1;
		float far = -1, pfar = -1;
		size_t fi = SIZE_MAX, pi = SIZE_MAX;
		for (size_t j = 0; j < n; j++) {
			uint32_t v = j == next ? COVER_NONE : rtt(arg, next, j);

			if (v != COVER_NONE && (float)v < dmin[j])
				dmin[j] = (float)v;
			if (ok[j] && dmin[j] > far) {
				far = dmin[j];
				fi = j;
			}
			if (ok[j] && prefer && prefer[j] && dmin[j] > pfar) {
				pfar = dmin[j];
				pi = j;
			}
		}
		next = pi != SIZE_MAX && pfar >= 0.9f * far ? pi : fi;
	}
	for (size_t l = 0; l < k; l++)
		weight[l] = 0;
	for (size_t j = 0; j < n; j++) {
		uint32_t bv = COVER_NONE;
		size_t bl = SIZE_MAX;

		for (size_t l = 0; l < k && bv != 0; l++) {
			uint32_t v = out[l] == j ? 0 : rtt(arg, out[l], j);
			if (v != COVER_NONE && (bv == COVER_NONE || v < bv))
				bv = v, bl = l;
		}
		if (bl != SIZE_MAX)
			weight[bl] += 1.0f;
	}
	*nout = k;
	free(dmin);
	free(ok);
	return 0;
}
