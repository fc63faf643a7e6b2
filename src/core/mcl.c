/*
 * Markov clustering (S. van Dongen, "Graph Clustering by Flow Simulation",
 * 2000) of nodes by RTT. The method is described in include/slot/mcl.h.
 *
 * The matrices are kept transposed and sparse: P = M^T is row-stochastic,
 * so that normalising a column of M walks a row of P, and expansion is
 * (M M)^T = P P. P[j][a] > 0 reads "node j is attracted to a". Rows are
 * stored compressed (columns ascending, values), and row i of P P is
 * accumulated in a dense scratch row over the non-zero P[i][k], in
 * ascending k: each entry is summed in the same order as a dense product
 * would (zeros add exactly +0.0), so mcl_groups gives bit for bit what the
 * former dense code gave.
 *
 * A round costs sum over rows i of sum over k in row i of |row k|: n^3 on a
 * complete graph without a cap, n * max_entries^2 with one. Measured on the
 * development machine (2-core AMD EPYC VM, gcc 12 -O2), see
 * docs/directory.md (Sizing) and docs/bench/dird_regroup.md.
 */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
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
	p->max_entries = 0;
}

/* ---- the graph ---- */

struct hent {
	uint32_t j;
	double rtt;
};

struct mcl_gbuild {
	struct mcl_gparams p;
	size_t n;
	/* keep > 0: a max-heap of each node's keep nearest, worst on top */
	struct hent *heap;
	uint32_t *hn;
	/* keep == 0: every edge, as pairs */
	uint32_t *ei, *ej;
	double *er;
	size_t ne, ecap;
	uint64_t *wide;
};

static size_t
wide_words(size_t n)
{
	return (n * n + 63) / 64;
}

struct mcl_gbuild *
mcl_gbuild_new(size_t n, const struct mcl_gparams *p, char *err, size_t errlen)
{
	struct mcl_gbuild *b;

	if (n == 0) {
		errbuf_set(err, errlen, "no nodes to cluster");
		return NULL;
	}
	/* Node numbers are uint32_t, and the wide bits n*n. */
	if (n >= UINT32_MAX || n > SIZE_MAX / n ||
	    (p->keep > 0 && n > SIZE_MAX / sizeof(struct hent) / p->keep)) {
		errbuf_set(err, errlen, "%zu nodes: too many", n);
		return NULL;
	}
	if ((b = calloc(1, sizeof(*b))) == NULL)
		goto nomem;
	b->p = *p;
	b->n = n;
	if (p->keep > 0 && ((b->heap = malloc(n * p->keep * sizeof(*b->heap))) == NULL ||
	    (b->hn = calloc(n, sizeof(*b->hn))) == NULL))
		goto nomem;
	if (p->wide_ms > 0.0 && (b->wide = calloc(wide_words(n), sizeof(*b->wide))) == NULL)
		goto nomem;
	return b;
nomem:
	mcl_gbuild_free(b);
	errbuf_set(err, errlen, "out of memory for a graph of %zu nodes", n);
	return NULL;
}

void
mcl_gbuild_free(struct mcl_gbuild *b)
{
	if (b == NULL)
		return;
	free(b->heap);
	free(b->hn);
	free(b->ei);
	free(b->ej);
	free(b->er);
	free(b->wide);
	free(b);
}

static void
wide_set(uint64_t *w, size_t n, size_t i, size_t j)
{
	w[(i * n + j) / 64] |= 1ull << ((i * n + j) % 64);
	w[(j * n + i) / 64] |= 1ull << ((j * n + i) % 64);
}

/* Whether a is a worse neighbour than b: farther, or as far and higher. */
static int
worse(const struct hent *a, const struct hent *b)
{
	return a->rtt > b->rtt || (a->rtt == b->rtt && a->j > b->j);
}

/* Offers j at rtt to node i's heap of its keep nearest. */
static void
heap_offer(struct mcl_gbuild *b, size_t i, uint32_t j, double rtt)
{
	struct hent *h = b->heap + i * b->p.keep, e = { j, rtt };
	size_t k = b->hn[i], c;

	if (k < b->p.keep) {
		/* sift up */
		while (k > 0 && worse(&e, &h[(k - 1) / 2])) {
			h[k] = h[(k - 1) / 2];
			k = (k - 1) / 2;
		}
		h[k] = e;
		b->hn[i]++;
		return;
	}
	if (!worse(&h[0], &e))
		return;
	/* replace the worst, sift down */
	k = 0;
	while ((c = 2 * k + 1) < b->p.keep) {
		if (c + 1 < b->p.keep && worse(&h[c + 1], &h[c]))
			c++;
		if (!worse(&h[c], &e))
			break;
		h[k] = h[c];
		k = c;
	}
	h[k] = e;
}

int
mcl_gbuild_pair(struct mcl_gbuild *b, size_t i, size_t j, double rtt_ms, char *err,
    size_t errlen)
{
	if (!isfinite(rtt_ms))
		return 0;
	if (rtt_ms < 0.0) {
		errbuf_set(err, errlen, "negative RTT %g ms between nodes %zu and %zu", rtt_ms,
		    i < j ? i : j, i < j ? j : i);
		return -1;
	}
	if (b->wide != NULL && rtt_ms > b->p.wide_ms)
		wide_set(b->wide, b->n, i, j);
	if (rtt_ms > b->p.edge_max_ms)
		return 0;
	if (b->p.keep > 0) {
		heap_offer(b, i, (uint32_t)j, rtt_ms);
		heap_offer(b, j, (uint32_t)i, rtt_ms);
		return 0;
	}
	if (b->ne == b->ecap) {
		size_t cap = b->ecap ? 2 * b->ecap : 1024;
		uint32_t *ei = realloc(b->ei, cap * sizeof(*ei)), *ej;
		double *er;

		if (ei != NULL)
			b->ei = ei;
		ej = realloc(b->ej, cap * sizeof(*ej));
		if (ej != NULL)
			b->ej = ej;
		er = realloc(b->er, cap * sizeof(*er));
		if (er != NULL)
			b->er = er;
		if (ei == NULL || ej == NULL || er == NULL) {
			errbuf_set(err, errlen, "out of memory for the graph's edges");
			return -1;
		}
		b->ecap = cap;
	}
	b->ei[b->ne] = (uint32_t)i;
	b->ej[b->ne] = (uint32_t)j;
	b->er[b->ne] = rtt_ms;
	b->ne++;
	return 0;
}

/* A row's entry: a column (a neighbour) and its value (an RTT, a
 * probability), for sorting by column. */
struct centry {
	uint32_t col;
	double val;
};

static int
cmp_col(const void *x, const void *y)
{
	const struct centry *a = x, *b = y;

	return a->col < b->col ? -1 : a->col > b->col;
}

/* Adds the directed edge i -> j to the graph being filled (pos: next slot
 * of each row). */
static void
put(struct mcl_graph *g, size_t *pos, size_t i, uint32_t j, double rtt)
{
	g->nbr[pos[i]] = j;
	g->rtt[pos[i]] = rtt;
	pos[i]++;
}

/* Sorts each row by neighbour and drops repeats (a pair both ends kept),
 * compacting the rows. */
static int
sort_rows(struct mcl_graph *g)
{
	size_t out = 0, maxdeg = 0;
	struct centry *t;

	for (size_t i = 0; i < g->n; i++)
		if (g->off[i + 1] - g->off[i] > maxdeg)
			maxdeg = g->off[i + 1] - g->off[i];
	if ((t = malloc((maxdeg ? maxdeg : 1) * sizeof(*t))) == NULL)
		return -1;
	for (size_t i = 0; i < g->n; i++) {
		size_t a = g->off[i], d = g->off[i + 1] - a, k = 0;
		int sorted = 1;

		for (size_t y = 0; y < d; y++) {
			t[y].col = g->nbr[a + y];
			t[y].val = g->rtt[a + y];
			if (y > 0 && t[y].col <= t[y - 1].col)
				sorted = 0;
		}
		if (!sorted)
			qsort(t, d, sizeof(*t), cmp_col);
		g->off[i] = out;
		for (size_t y = 0; y < d; y++) {
			if (k > 0 && t[y].col == g->nbr[out - 1])
				continue;
			g->nbr[out] = t[y].col;
			g->rtt[out] = t[y].val;
			out++;
			k++;
		}
	}
	g->off[g->n] = out;
	free(t);
	return 0;
}

int
mcl_gbuild_finish(struct mcl_gbuild *b, struct mcl_graph *g, char *err, size_t errlen)
{
	size_t n = b->n, total = 0, *pos = NULL;

	memset(g, 0, sizeof(*g));
	g->n = n;
	if ((g->off = calloc(n + 1, sizeof(*g->off))) == NULL ||
	    (pos = malloc(n * sizeof(*pos))) == NULL)
		goto nomem;
	/* Degrees, both directions of every kept pair. */
	if (b->p.keep > 0) {
		for (size_t i = 0; i < n; i++) {
			const struct hent *h = b->heap + i * b->p.keep;

			for (size_t y = 0; y < b->hn[i]; y++) {
				g->off[i + 1]++;
				g->off[h[y].j + 1]++;
			}
		}
	} else {
		for (size_t e = 0; e < b->ne; e++) {
			g->off[b->ei[e] + 1]++;
			g->off[b->ej[e] + 1]++;
		}
	}
	for (size_t i = 0; i < n; i++)
		g->off[i + 1] += g->off[i];
	total = g->off[n];
	if ((g->nbr = malloc((total ? total : 1) * sizeof(*g->nbr))) == NULL ||
	    (g->rtt = malloc((total ? total : 1) * sizeof(*g->rtt))) == NULL)
		goto nomem;
	memcpy(pos, g->off, n * sizeof(*pos));
	if (b->p.keep > 0) {
		for (size_t i = 0; i < n; i++) {
			const struct hent *h = b->heap + i * b->p.keep;

			for (size_t y = 0; y < b->hn[i]; y++) {
				put(g, pos, i, h[y].j, h[y].rtt);
				put(g, pos, h[y].j, (uint32_t)i, h[y].rtt);
			}
		}
	} else {
		for (size_t e = 0; e < b->ne; e++) {
			put(g, pos, b->ei[e], b->ej[e], b->er[e]);
			put(g, pos, b->ej[e], b->ei[e], b->er[e]);
		}
	}
	if (sort_rows(g) < 0)
		goto nomem;
	g->wide = b->wide;
	g->wide_ms = b->p.wide_ms;
	b->wide = NULL;
	free(pos);
	mcl_gbuild_free(b);
	return 0;
nomem:
	free(pos);
	mcl_gbuild_free(b);
	mcl_graph_free(g);
	errbuf_set(err, errlen, "out of memory for a graph of %zu nodes", n);
	return -1;
}

void
mcl_graph_free(struct mcl_graph *g)
{
	free(g->off);
	free(g->nbr);
	free(g->rtt);
	free(g->wide);
	memset(g, 0, sizeof(*g));
}

/* Position of j in row i, or -1. */
static long
edge_at(const struct mcl_graph *g, size_t i, size_t j)
{
	size_t k = lower_u32(g->nbr, g->off[i], g->off[i + 1], j);

	return k < g->off[i + 1] && g->nbr[k] == j ? (long)k : -1;
}

double
mcl_graph_rtt(const struct mcl_graph *g, size_t i, size_t j)
{
	long k = edge_at(g, i, j);

	return k >= 0 ? g->rtt[k] : NAN;
}

bool
mcl_graph_wide(const struct mcl_graph *g, size_t i, size_t j)
{
	size_t b = i * g->n + j;

	return g->wide != NULL && (g->wide[b / 64] >> (b % 64) & 1);
}

/* ---- the flow ---- */

/* A sparse square matrix, rows compressed, columns ascending. */
struct smat {
	size_t *off;		/* n + 1 */
	uint32_t *col;
	double *val;
	size_t cap;
};

static int
smat_reserve(struct smat *m, size_t need)
{
	size_t cap = m->cap ? m->cap : 1024;
	uint32_t *c;
	double *v;

	if (need <= m->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if ((c = realloc(m->col, cap * sizeof(*c))) == NULL)
		return -1;
	m->col = c;
	if ((v = realloc(m->val, cap * sizeof(*v))) == NULL)
		return -1;
	m->val = v;
	m->cap = cap;
	return 0;
}

static void
smat_free(struct smat *m)
{
	free(m->off);
	free(m->col);
	free(m->val);
}

/* The value at (i, j), 0 if none. */
static double
smat_at(const struct smat *m, size_t i, size_t j)
{
	size_t k = lower_u32(m->col, m->off[i], m->off[i + 1], j);

	return k < m->off[i + 1] && m->col[k] == j ? m->val[k] : 0.0;
}

/* Builds the starting matrix: row-normalised weights with self-loops. */
static int
build(const struct mcl_graph *g, struct smat *p)
{
	size_t n = g->n;

	if ((p->off = malloc((n + 1) * sizeof(*p->off))) == NULL ||
	    smat_reserve(p, g->off[n] + n) < 0)
		return -1;
	p->off[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t a = g->off[i], d = g->off[i + 1] - a, o = p->off[i], k = 0;
		double max = 0.0, sum = 0.0;
		int self = 0;

		for (size_t y = 0; y <= d; y++) {
			double w;
			uint32_t c;

			if (!self && (y == d || g->nbr[a + y] > i)) {
				self = 1;
				p->col[o + k] = (uint32_t)i;
				p->val[o + k++] = -1.0;	/* set below */
			}
			if (y == d)
				break;
			c = g->nbr[a + y];
			w = 1.0 / (g->rtt[a + y] < MCL_MIN_RTT_MS ? MCL_MIN_RTT_MS :
			    g->rtt[a + y]);
			if (w > max)
				max = w;
			p->col[o + k] = c;
			p->val[o + k++] = w;
		}
		for (size_t y = 0; y < k; y++) {
			if (p->val[o + y] < 0.0)
				p->val[o + y] = max > 0.0 ? max : 1.0;
			sum += p->val[o + y];
		}
		for (size_t y = 0; y < k; y++)
			p->val[o + y] /= sum;
		p->off[i + 1] = o + k;
	}
	return 0;
}

/* Inflates the m entries of one row in place, normalises, prunes and
 * normalises again; returns the entries left (zeros dropped). */
static size_t
inflate_row(uint32_t *col, double *q, size_t m, double inflation, double prune)
{
	double sum = 0.0, max = 0.0;
	size_t imax = 0, k = 0;

	/* Scaled by the row's largest entry first, so that a high inflation
	 * cannot underflow the whole row to zero. */
	for (size_t c = 0; c < m; c++)
		if (q[c] > max) {
			max = q[c];
			imax = c;
		}
	for (size_t c = 0; c < m; c++) {
		double x = q[c] / max;

		q[c] = inflation == 2.0 ? x * x : pow(x, inflation);
		sum += q[c];
	}
	for (size_t c = 0; c < m; c++)
		q[c] /= sum;
	/* The largest entry stays, so no row can vanish whatever prune is. */
	sum = 0.0;
	for (size_t c = 0; c < m; c++) {
		if (q[c] < prune && c != imax)
			q[c] = 0.0;
		sum += q[c];
	}
	for (size_t c = 0; c < m; c++) {
		q[c] /= sum;
		if (q[c] != 0.0) {
			col[k] = col[c];
			q[k++] = q[c];
		}
	}
	return k;
}

/* Whether a ranks below b: smaller, or as large and a higher column. */
static int
below(const struct centry *a, const struct centry *b)
{
	return a->val < b->val || (a->val == b->val && a->col > b->col);
}

/* Keeps the cap largest of m entries (ties to the lower column) through a
 * heap of cap entries, smallest on top; then puts the row in column order,
 * normalised. t is scratch of cap entries. Returns the entries left. */
static size_t
cap_row(uint32_t *col, double *q, size_t m, size_t cap, struct centry *t)
{
	size_t k = 0;
	double sum = 0.0;

	for (size_t c = 0; c < m; c++) {
		struct centry e = { col[c], q[c] };
		size_t x, y;

		if (k < cap) {
			for (x = k++; x > 0 && below(&e, &t[(x - 1) / 2]); x = (x - 1) / 2)
				t[x] = t[(x - 1) / 2];
			t[x] = e;
			continue;
		}
		if (!below(&t[0], &e))
			continue;
		for (x = 0; (y = 2 * x + 1) < cap; x = y) {
			if (y + 1 < cap && below(&t[y + 1], &t[y]))
				y++;
			if (!below(&t[y], &e))
				break;
			t[x] = t[y];
		}
		t[x] = e;
	}
	qsort(t, k, sizeof(*t), cmp_col);
	for (size_t c = 0; c < k; c++)
		sum += t[c].val;
	for (size_t c = 0; c < k; c++) {
		col[c] = t[c].col;
		q[c] = t[c].val / sum;
	}
	return k;
}

/* Scratch of one expansion: a dense accumulator row and the columns it
 * touched. */
struct spa {
	double *acc;
	unsigned char *mark;
	uint32_t *touched;
	struct centry *tmp;
};

/*
 * One round: q = inflate(p p), then prune and cap. Returns the largest
 * change of an entry against p, or -1 out of memory.
 */
static double
round_once(const struct smat *p, struct smat *q, size_t n, const struct mcl_params *mp,
    struct spa *s)
{
	double change = 0.0;

	q->off[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t t = 0, o = q->off[i], m;

		for (size_t y = p->off[i]; y < p->off[i + 1]; y++) {
			size_t k = p->col[y];
			double a = p->val[y];

			for (size_t z = p->off[k]; z < p->off[k + 1]; z++) {
				uint32_t c = p->col[z];

				if (!s->mark[c]) {
					s->mark[c] = 1;
					s->acc[c] = 0.0;
					s->touched[t++] = c;
				}
				s->acc[c] += a * p->val[z];
			}
		}
		if (smat_reserve(q, o + t) < 0)
			return -1.0;
		/* Columns ascending: scan the marks when most are touched. A
		 * capped row is put in order after the cap, on fewer entries
		 * (its sums then run in the order the columns were reached,
		 * which depends on the input only). */
		if (mp->max_entries > 0) {
			/* as reached */
		} else if (t > n / 8) {
			m = 0;
			for (size_t c = 0; c < n; c++)
				if (s->mark[c])
					s->touched[m++] = (uint32_t)c;
		} else {
			qsort(s->touched, t, sizeof(*s->touched), cmp_u32);
		}
		m = 0;
		for (size_t y = 0; y < t; y++) {
			uint32_t c = s->touched[y];

			s->mark[c] = 0;
			if (s->acc[c] != 0.0) {
				q->col[o + m] = c;
				q->val[o + m++] = s->acc[c];
			}
		}
		m = inflate_row(q->col + o, q->val + o, m, mp->inflation, mp->prune);
		if (mp->max_entries > 0)
			m = cap_row(q->col + o, q->val + o, m, mp->max_entries, s->tmp);
		q->off[i + 1] = o + m;

		/* The change against p's row, over the union of both. */
		for (size_t a = p->off[i], b = o; a < p->off[i + 1] || b < o + m;) {
			double d;

			if (b == o + m || (a < p->off[i + 1] && p->col[a] < q->col[b]))
				d = p->val[a++];
			else if (a == p->off[i + 1] || q->col[b] < p->col[a])
				d = q->val[b++];
			else
				d = p->val[a++] - q->val[b++];
			if (fabs(d) > change)
				change = fabs(d);
		}
	}
	return change;
}

/* ---- reading the result, splitting ---- */

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
 * node); parent and diag are scratch. */
static void
interpret(const struct smat *p, size_t n, size_t *label, size_t *parent, double *diag)
{
	for (size_t i = 0; i < n; i++) {
		parent[i] = i;
		diag[i] = smat_at(p, i, i);
	}
	for (size_t a = 0; a < n; a++) {
		if (diag[a] == 0.0)
			continue;
		for (size_t y = p->off[a]; y < p->off[a + 1]; y++) {
			size_t b = p->col[y];

			if (b != a && diag[b] != 0.0)
				uf_union(parent, a, b);
		}
	}
	for (size_t j = 0; j < n; j++) {
		if (diag[j] != 0.0) {
			label[j] = uf_find(parent, j);
			continue;
		}
		label[j] = j;
		for (size_t y = p->off[j]; y < p->off[j + 1]; y++) {
			size_t a = p->col[y];

			if (diag[a] != 0.0) {
				label[j] = uf_find(parent, a);
				break;
			}
		}
	}
}

/* The RTT of {i, j} for the split: the edge's; +inf for a pair known only
 * to be wider than the bound; NaN unmeasured. */
static double
split_rtt(const struct mcl_graph *g, size_t i, size_t j)
{
	double r = mcl_graph_rtt(g, i, j);

	return isnan(r) && mcl_graph_wide(g, i, j) ? INFINITY : r;
}

struct by_rtt {
	const struct mcl_graph *g;
	size_t seed;
};

/* Orders nodes by RTT to the seed, unmeasured last, then by index. */
static int
cmp_by_rtt(const void *x, const void *y, void *arg)
{
	const struct by_rtt *c = arg;
	size_t i = *(const size_t *)x, j = *(const size_t *)y;
	double ri = split_rtt(c->g, c->seed, i);
	double rj = split_rtt(c->g, c->seed, j);

	if (isnan(ri) != isnan(rj))
		return isnan(ri) ? 1 : -1;
	if (!isnan(ri) && ri != rj)
		return ri < rj ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* Whether some measured pair among the s nodes m[] is wider than bound. */
static int
too_wide(const struct mcl_graph *g, double bound, const size_t *m, size_t s)
{
	for (size_t a = 0; a < s; a++)
		for (size_t b = a + 1; b < s; b++) {
			double r = split_rtt(g, m[a], m[b]);

			if (!isnan(r) && r > bound)
				return 1;
		}
	return 0;
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
split_group(const struct mcl_graph *g, double bound, const size_t *m, size_t s,
    size_t *label, unsigned char *placed, size_t *cand, size_t *cur)
{
	for (size_t a = 0; a < s; a++) {
		struct by_rtt ctx = { g, m[a] };
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
				double r = split_rtt(g, cand[x], cur[y]);

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
split_wide(const struct mcl_graph *g, double bound, const uint32_t *group, size_t ng,
    size_t *label, size_t *order, size_t *start, unsigned char *placed, size_t *scratch)
{
	size_t n = g->n;

	for (size_t k = 0; k <= ng; k++)
		start[k] = 0;
	for (size_t i = 0; i < n; i++)
		start[group[i] + 1]++;
	for (size_t k = 0; k < ng; k++)
		start[k + 1] += start[k];
	for (size_t i = 0; i < n; i++)
		order[start[group[i]]++] = i;	/* start[k] moves to k's end */
	for (size_t k = ng; k > 0; k--)
		start[k] = start[k - 1];
	start[0] = 0;
	memset(placed, 0, n);

	for (size_t k = 0; k < ng; k++) {
		const size_t *m = order + start[k];
		size_t s = start[k + 1] - start[k];

		if (too_wide(g, bound, m, s))
			split_group(g, bound, m, s, label, placed, scratch, scratch + n);
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

int
mcl_groups_graph(const struct mcl_graph *g, const struct mcl_params *p, uint32_t *group,
    size_t *ngroups, char *err, size_t errlen)
{
	struct mcl_params def;
	struct smat a = { 0 }, b = { 0 }, t;
	struct spa s = { 0 };
	uint32_t *map = NULL;
	size_t n = g->n, *label = NULL, *parent = NULL, *order = NULL, *scratch = NULL;
	unsigned char *placed = NULL;
	double *diag = NULL;
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
	if (n >= UINT32_MAX) {
		errbuf_set(err, errlen, "%zu nodes: too many", n);
		return -1;
	}
	b.off = malloc((n + 1) * sizeof(*b.off));
	s.acc = malloc(n * sizeof(*s.acc));
	s.mark = calloc(n, 1);
	s.touched = malloc(n * sizeof(*s.touched));
	s.tmp = malloc(n * sizeof(*s.tmp));
	label = malloc(n * sizeof(*label));
	parent = malloc((n + 1) * sizeof(*parent));
	map = malloc(n * sizeof(*map));
	order = malloc(n * sizeof(*order));
	scratch = malloc(2 * n * sizeof(*scratch));
	placed = malloc(n);
	diag = malloc(n * sizeof(*diag));
	if (b.off == NULL || s.acc == NULL || s.mark == NULL || s.touched == NULL ||
	    s.tmp == NULL || label == NULL || parent == NULL || map == NULL ||
	    order == NULL || scratch == NULL || placed == NULL || diag == NULL ||
	    build(g, &a) < 0)
		goto nomem;

	for (unsigned it = 0; it < p->max_iter; it++) {
		double change = round_once(&a, &b, n, p, &s);

		if (change < 0.0)
			goto nomem;
		t = a;
		a = b;
		b = t;
		if (change < MCL_EPSILON)
			break;
	}

	interpret(&a, n, label, parent, diag);
	*ngroups = number_groups(label, n, group, map);
	if (p->max_intra_rtt_ms > 0.0) {
		/* parent (n + 1 entries) is free again: it holds the group
		 * offsets, ngroups + 1 <= n + 1 of them. */
		split_wide(g, p->max_intra_rtt_ms, group, *ngroups, label, order, parent,
		    placed, scratch);
		*ngroups = number_groups(label, n, group, map);
	}
	rc = 0;
	goto out;
nomem:
	errbuf_set(err, errlen, "out of memory for %zu nodes", n);
out:
	smat_free(&a);
	smat_free(&b);
	free(s.acc);
	free(s.mark);
	free(s.touched);
	free(s.tmp);
	free(label);
	free(parent);
	free(map);
	free(order);
	free(scratch);
	free(placed);
	free(diag);
	return rc;
}

int
mcl_groups(const double *rtt_ms, size_t n, const struct mcl_params *p, uint32_t *group,
    size_t *ngroups, char *err, size_t errlen)
{
	struct mcl_params def;
	struct mcl_gparams gp = { .keep = 0, .edge_max_ms = INFINITY };
	struct mcl_gbuild *b;
	struct mcl_graph g;
	int rc;

	if (p == NULL) {
		mcl_params_default(&def);
		p = &def;
	}
	if (check_params(p, err, errlen) < 0)
		return -1;
	/* Every edge is kept, and the split reads edges; wide bits would
	 * only repeat them. No nodes: mcl_gbuild_new says so. */
	if ((b = mcl_gbuild_new(n, &gp, err, errlen)) == NULL)
		return -1;
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			double x = rtt_ms[i * n + j], y = rtt_ms[j * n + i], r;

			if (isfinite(x) && isfinite(y))
				r = (x + y) / 2.0;
			else
				r = isfinite(x) ? x : y;
			if (mcl_gbuild_pair(b, i, j, r, err, errlen) < 0) {
				mcl_gbuild_free(b);
				return -1;
			}
		}
	if (mcl_gbuild_finish(b, &g, err, errlen) < 0)
		return -1;
	def = *p;
	def.max_entries = 0;
	rc = mcl_groups_graph(&g, &def, group, ngroups, err, errlen);
	mcl_graph_free(&g);
	return rc;
}
