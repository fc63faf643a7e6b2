/*
 * Markov clustering (S. van Dongen, "Graph Clustering by Flow Simulation",
 * 2000) of nodes by RTT. The method is described in include/slot/mcl.h.
 *
 * The matrices are kept transposed: P = M^T is row-stochastic, so that
 * normalising a column of M walks a contiguous row of P, and expansion is
 * (M M)^T = P P. P[j][a] > 0 reads "node j is attracted to a".
 *
 * Expansion skips zero entries: row i of P P is the sum, over the non-zero
 * P[i][k], of P[i][k] times row k, and row k is walked through its list of
 * non-zero columns when it is sparse, or whole when it is dense. On a
 * complete graph the first rounds are dense (n^3 each); then pruning leaves
 * a few entries per row and a round costs about n^2.
 *
 * Measured on the development machine (2-core AMD EPYC VM, gcc 12 -O2, the
 * defaults, random points in a 1000 x 1000 square, RTT = 1 ms + 0.2 ms per
 * unit of distance, every pair measured): n = 250: 0.016 s (6 groups);
 * n = 1000: 0.78 s (2 groups; 5 dense rounds take nearly all of it). The
 * 250 WonderNetwork servers: about 0.02 s.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slot/errbuf.h"
#include "slot/mcl.h"

#define MCL_MIN_RTT_MS	0.1	/* below this 1/RTT grows without meaning */
#define MCL_EPSILON	1e-9	/* converged when no entry moves this much */

void
mcl_params_default(struct mcl_params *p)
{
	p->inflation = 2.0;
	p->prune = 1e-5;
	p->max_iter = 100;
	p->max_intra_rtt_ms = 0.0;
}

/* The RTT of the pair {i, j} (i != j) as the header defines it, NaN when
 * unmeasured. */
static double
pair_rtt(const double *rtt, size_t n, size_t i, size_t j)
{
	double a = rtt[i * n + j], b = rtt[j * n + i];
	int ha = isfinite(a), hb = isfinite(b);

	if (ha && hb)
		return (a + b) / 2.0;
	if (ha)
		return a;
	return hb ? b : NAN;
}

/* Inflates row q (length n, not all zero) in place, normalises it, prunes
 * it and normalises it again. */
static void
inflate_row(double *restrict q, size_t n, double inflation, double prune)
{
	double sum = 0.0, max = 0.0;
	size_t imax = 0;

	/* Scaled by the row's largest entry first, so that a high inflation
	 * cannot underflow the whole row to zero. */
	for (size_t c = 0; c < n; c++)
		if (q[c] > max) {
			max = q[c];
			imax = c;
		}
	for (size_t c = 0; c < n; c++)
		if (q[c] != 0.0) {
			double x = q[c] / max;

			q[c] = inflation == 2.0 ? x * x : pow(x, inflation);
			sum += q[c];
		}
	for (size_t c = 0; c < n; c++)
		q[c] /= sum;
	/* The largest entry stays, so no row can vanish whatever prune is. */
	sum = 0.0;
	for (size_t c = 0; c < n; c++) {
		if (q[c] < prune && c != imax)
			q[c] = 0.0;
		sum += q[c];
	}
	for (size_t c = 0; c < n; c++)
		q[c] /= sum;
}

/* Lists the non-zero columns of each row of p into nz (n per row). */
static void
index_rows(const double *p, size_t n, uint32_t *nz, size_t *cnt)
{
	for (size_t i = 0; i < n; i++) {
		const double *row = p + i * n;
		uint32_t *out = nz + i * n;
		size_t k = 0;

		for (size_t c = 0; c < n; c++)
			if (row[c] != 0.0)
				out[k++] = (uint32_t)c;
		cnt[i] = k;
	}
}

/* Two doubles at a time (SSE2 on x86-64, NEON on arm64): gcc -O2 does not
 * vectorise the dense loop by itself. memcpy keeps the accesses legal at
 * any alignment and compiles to plain unaligned loads and stores. */
typedef double v2d __attribute__((vector_size(16)));

static inline v2d
v2d_load(const double *s)
{
	v2d v;

	memcpy(&v, s, sizeof(v));
	return v;
}

static inline void
v2d_store(double *d, v2d v)
{
	memcpy(d, &v, sizeof(v));
}

/*
 * Rows i..i+3 of q = p p. Four rows at a time, so that each row k of p is
 * read once for four rows of q: the dense rounds are bound by reading p,
 * not by arithmetic. An entry P[i][k] of zero adds exactly +0.0, so the
 * result equals a row-by-row sum in the same order of k.
 */
static void
expand4(const double *restrict p, double *restrict q, size_t n, size_t i,
    const uint32_t *nz, const size_t *cnt, size_t dense)
{
	double *restrict q0 = q + i * n, *restrict q1 = q0 + n;
	double *restrict q2 = q1 + n, *restrict q3 = q2 + n;
	const double *p0 = p + i * n, *p1 = p0 + n, *p2 = p1 + n, *p3 = p2 + n;

	memset(q0, 0, 4 * n * sizeof(*q0));
	for (size_t k = 0; k < n; k++) {
		double a0 = p0[k], a1 = p1[k], a2 = p2[k], a3 = p3[k];
		const double *restrict pk = p + k * n;

		if (a0 == 0.0 && a1 == 0.0 && a2 == 0.0 && a3 == 0.0)
			continue;
		if (cnt[k] > dense) {
			size_t c = 0;
			v2d b0 = { a0, a0 }, b1 = { a1, a1 };
			v2d b2 = { a2, a2 }, b3 = { a3, a3 };

			for (; c + 2 <= n; c += 2) {
				v2d v = v2d_load(pk + c);

				v2d_store(q0 + c, v2d_load(q0 + c) + b0 * v);
				v2d_store(q1 + c, v2d_load(q1 + c) + b1 * v);
				v2d_store(q2 + c, v2d_load(q2 + c) + b2 * v);
				v2d_store(q3 + c, v2d_load(q3 + c) + b3 * v);
			}
			for (; c < n; c++) {
				double v = pk[c];

				q0[c] += a0 * v;
				q1[c] += a1 * v;
				q2[c] += a2 * v;
				q3[c] += a3 * v;
			}
		} else {
			const uint32_t *nzk = nz + k * n;

			for (size_t y = 0; y < cnt[k]; y++) {
				size_t c = nzk[y];
				double v = pk[c];

				q0[c] += a0 * v;
				q1[c] += a1 * v;
				q2[c] += a2 * v;
				q3[c] += a3 * v;
			}
		}
	}
}

/* Row i of q = p p. */
static void
expand1(const double *restrict p, double *restrict q, size_t n, size_t i,
    const uint32_t *nz, const size_t *cnt, size_t dense)
{
	double *restrict qi = q + i * n;
	const double *pi = p + i * n;

	memset(qi, 0, n * sizeof(*qi));
	for (size_t k = 0; k < n; k++) {
		double a = pi[k];
		const double *restrict pk = p + k * n;

		if (a == 0.0)
			continue;
		if (cnt[k] > dense) {
			for (size_t c = 0; c < n; c++)
				qi[c] += a * pk[c];
		} else {
			const uint32_t *nzk = nz + k * n;

			for (size_t y = 0; y < cnt[k]; y++)
				qi[nzk[y]] += a * pk[nzk[y]];
		}
	}
}

/* q = p p, walking each row k of p through its list of non-zero columns
 * when it is sparse, or whole when it has more than n/4 entries (there the
 * contiguous loop is cheaper than the indexed one). */
static void
expand(const double *p, double *q, size_t n, const uint32_t *nz,
    const size_t *cnt)
{
	size_t i = 0;

	for (; i + 4 <= n; i += 4)
		expand4(p, q, n, i, nz, cnt, n / 4);
	for (; i < n; i++)
		expand1(p, q, n, i, nz, cnt, n / 4);
}

static size_t
uf_find(size_t *parent, size_t x)
{
	while (parent[x] != x) {
		parent[x] = parent[parent[x]];
		x = parent[x];
	}
	return x;
}

/* Joins the sets of a and b; the lower index becomes the root, so a set's
 * root is its lowest member. */
static void
uf_union(size_t *parent, size_t a, size_t b)
{
	a = uf_find(parent, a);
	b = uf_find(parent, b);
	if (a < b)
		parent[b] = a;
	else if (b < a)
		parent[a] = b;
}

/* Renumbers labels (each a node index) into groups 0.. in order of the
 * lowest node of each group; uses map (n entries) as scratch. */
static size_t
number_groups(const size_t *label, size_t n, uint32_t *group, uint32_t *map)
{
	size_t ng = 0;

	for (size_t i = 0; i < n; i++)
		map[i] = UINT32_MAX;
	for (size_t i = 0; i < n; i++) {
		if (map[label[i]] == UINT32_MAX)
			map[label[i]] = (uint32_t)ng++;
		group[i] = map[label[i]];
	}
	return ng;
}

/* Reads the clusters off the final matrix p into label (a node index per
 * node); parent is scratch. */
static void
interpret(const double *p, size_t n, size_t *label, size_t *parent)
{
	for (size_t i = 0; i < n; i++)
		parent[i] = i;
	for (size_t a = 0; a < n; a++) {
		if (p[a * n + a] == 0.0)
			continue;
		for (size_t b = 0; b < n; b++)
			if (b != a && p[a * n + b] != 0.0 && p[b * n + b] != 0.0)
				uf_union(parent, a, b);
	}
	for (size_t j = 0; j < n; j++) {
		if (p[j * n + j] != 0.0) {
			label[j] = uf_find(parent, j);
			continue;
		}
		label[j] = j;
		for (size_t a = 0; a < n; a++)
			if (p[j * n + a] != 0.0 && p[a * n + a] != 0.0) {
				label[j] = uf_find(parent, a);
				break;
			}
	}
}

struct by_rtt {
	const double *rtt;
	size_t n, seed;
};

/* Orders nodes by RTT to the seed, unmeasured last, then by index. */
static int
cmp_by_rtt(const void *x, const void *y, void *arg)
{
	const struct by_rtt *c = arg;
	size_t i = *(const size_t *)x, j = *(const size_t *)y;
	double ri = pair_rtt(c->rtt, c->n, c->seed, i);
	double rj = pair_rtt(c->rtt, c->n, c->seed, j);

	if (isnan(ri) != isnan(rj))
		return isnan(ri) ? 1 : -1;
	if (!isnan(ri) && ri != rj)
		return ri < rj ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* Largest measured RTT among the s nodes m[]. */
static double
max_pair(const double *rtt, size_t n, const size_t *m, size_t s)
{
	double max = 0.0;

	for (size_t a = 0; a < s; a++)
		for (size_t b = a + 1; b < s; b++) {
			double r = pair_rtt(rtt, n, m[a], m[b]);

			if (!isnan(r) && r > max)
				max = r;
		}
	return max;
}

/*
 * Splits the members m[0..s-1] (in index order) of one group wider than
 * bound, writing their new labels. Each new group starts from the
 * lowest-numbered member not yet placed and takes the others nearest it
 * first, each if it is within bound of every member so far, measured to at
 * least one of them (so that nodes never measured against each other are
 * not grouped on no evidence), and not beyond bound of any. Nearest first
 * keeps the new groups tight around their seeds; taking candidates in index
 * order instead left loose groups of leftovers on the WonderNetwork data.
 * cand and cur are scratch of s entries each.
 */
static void
split_group(const double *rtt, size_t n, double bound, const size_t *m,
    size_t s, size_t *label, unsigned char *placed, size_t *cand, size_t *cur)
{
	for (size_t a = 0; a < s; a++) {
		struct by_rtt ctx = { rtt, n, m[a] };
		size_t nc = 0, ncur = 0;

		if (placed[m[a]])
			continue;
		placed[m[a]] = 1;
		label[m[a]] = m[a];
		cur[ncur++] = m[a];
		for (size_t b = a + 1; b < s; b++)
			if (!placed[m[b]])
				cand[nc++] = m[b];
		qsort_r(cand, nc, sizeof(*cand), cmp_by_rtt, &ctx);
		for (size_t x = 0; x < nc; x++) {
			int ok = 1, measured = 0;

			for (size_t y = 0; y < ncur && ok; y++) {
				double r = pair_rtt(rtt, n, cand[x], cur[y]);

				if (!isnan(r)) {
					measured = 1;
					ok = r <= bound;
				}
			}
			if (ok && measured) {
				placed[cand[x]] = 1;
				label[cand[x]] = m[a];
				cur[ncur++] = cand[x];
			}
		}
	}
}

/*
 * Splits the groups wider than bound (see the header and split_group),
 * rewriting label. Members of each group are listed in index order through
 * order/start (a counting sort of the nodes by group); scratch holds 2n.
 */
static void
split_wide(const double *rtt, size_t n, double bound, const uint32_t *group,
    size_t ng, size_t *label, size_t *order, size_t *start,
    unsigned char *placed, size_t *scratch)
{
	for (size_t g = 0; g <= ng; g++)
		start[g] = 0;
	for (size_t i = 0; i < n; i++)
		start[group[i] + 1]++;
	for (size_t g = 0; g < ng; g++)
		start[g + 1] += start[g];
	for (size_t i = 0; i < n; i++)
		order[start[group[i]]++] = i;	/* start[g] moves to g's end */
	for (size_t g = ng; g > 0; g--)
		start[g] = start[g - 1];
	start[0] = 0;
	memset(placed, 0, n);

	for (size_t g = 0; g < ng; g++) {
		const size_t *m = order + start[g];
		size_t s = start[g + 1] - start[g];

		if (max_pair(rtt, n, m, s) > bound)
			split_group(rtt, n, bound, m, s, label, placed, scratch,
			    scratch + n);
	}
}

static int
check_params(const struct mcl_params *p, char *err, size_t errlen)
{
	if (!(p->inflation > 1.0) || !isfinite(p->inflation)) {
		errbuf_set(err, errlen, "inflation %g: must be above 1", p->inflation);
		return -1;
	}
	if (!(p->prune >= 0.0 && p->prune < 1.0)) {
		errbuf_set(err, errlen, "prune %g: must be in [0, 1)", p->prune);
		return -1;
	}
	if (p->max_iter == 0) {
		errbuf_set(err, errlen, "max_iter must be at least 1");
		return -1;
	}
	if (!(p->max_intra_rtt_ms >= 0.0) || !isfinite(p->max_intra_rtt_ms)) {
		errbuf_set(err, errlen, "max_intra_rtt_ms %g: must be >= 0",
		    p->max_intra_rtt_ms);
		return -1;
	}
	return 0;
}

/* Builds the starting matrix: row-normalised weights with self-loops.
 * Returns 0, or -1 on a negative RTT. */
static int
build(const double *rtt, size_t n, double *p, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		double *row = p + i * n, max = 0.0, sum = 0.0;

		for (size_t j = 0; j < n; j++) {
			double r;

			row[j] = 0.0;
			if (j == i)
				continue;
			r = pair_rtt(rtt, n, i, j);
			if (isnan(r))
				continue;
			if (r < 0.0) {
				errbuf_set(err, errlen, "negative RTT %g ms between "
				    "nodes %zu and %zu", r, i, j);
				return -1;
			}
			row[j] = 1.0 / (r < MCL_MIN_RTT_MS ? MCL_MIN_RTT_MS : r);
			if (row[j] > max)
				max = row[j];
		}
		row[i] = max > 0.0 ? max : 1.0;
		for (size_t j = 0; j < n; j++)
			sum += row[j];
		for (size_t j = 0; j < n; j++)
			row[j] /= sum;
	}
	return 0;
}

int
mcl_groups(const double *rtt_ms, size_t n, const struct mcl_params *p,
    uint32_t *group, size_t *ngroups, char *err, size_t errlen)
{
	struct mcl_params def;
	double *a = NULL, *b = NULL;
	uint32_t *nz = NULL, *map = NULL;
	size_t *cnt = NULL, *label = NULL, *parent = NULL, *order = NULL;
	size_t *scratch = NULL;
	unsigned char *placed = NULL;
	int rc = -1;

	if (p == NULL) {
		mcl_params_default(&def);
		p = &def;
	}
	if (check_params(p, err, errlen) < 0)
		return -1;
	if (n == 0) {
		errbuf_set(err, errlen, "no nodes to cluster");
		return -1;
	}
	/* Node numbers are uint32_t, and n*n doubles must be addressable. */
	if (n >= UINT32_MAX || n > SIZE_MAX / sizeof(double) / n) {
		errbuf_set(err, errlen, "%zu nodes: too many", n);
		return -1;
	}
	a = malloc(n * n * sizeof(*a));
	b = malloc(n * n * sizeof(*b));
	nz = malloc(n * n * sizeof(*nz));
	cnt = malloc(n * sizeof(*cnt));
	label = malloc(n * sizeof(*label));
	parent = malloc((n + 1) * sizeof(*parent));
	map = malloc(n * sizeof(*map));
	order = malloc(n * sizeof(*order));
	scratch = malloc(2 * n * sizeof(*scratch));
	placed = malloc(n);
	if (a == NULL || b == NULL || nz == NULL || cnt == NULL ||
	    label == NULL || parent == NULL || map == NULL || order == NULL ||
	    scratch == NULL || placed == NULL) {
		errbuf_set(err, errlen, "out of memory for %zu nodes", n);
		goto out;
	}
	if (build(rtt_ms, n, a, err, errlen) < 0)
		goto out;

	for (unsigned it = 0; it < p->max_iter; it++) {
		double change = 0.0, *t;

		index_rows(a, n, nz, cnt);
		expand(a, b, n, nz, cnt);
		for (size_t i = 0; i < n; i++)
			inflate_row(b + i * n, n, p->inflation, p->prune);
		for (size_t i = 0; i < n * n; i++) {
			double d = fabs(b[i] - a[i]);

			if (d > change)
				change = d;
		}
		t = a;
		a = b;
		b = t;
		if (change < MCL_EPSILON)
			break;
	}

	interpret(a, n, label, parent);
	*ngroups = number_groups(label, n, group, map);
	if (p->max_intra_rtt_ms > 0.0) {
		/* parent (n + 1 entries) is free again: it holds the group
		 * offsets, ngroups + 1 <= n + 1 of them. */
		split_wide(rtt_ms, n, p->max_intra_rtt_ms, group, *ngroups,
		    label, order, parent, placed, scratch);
		*ngroups = number_groups(label, n, group, map);
	}
	rc = 0;
out:
	free(a);
	free(b);
	free(nz);
	free(cnt);
	free(label);
	free(parent);
	free(map);
	free(order);
	free(scratch);
	free(placed);
	return rc;
}
