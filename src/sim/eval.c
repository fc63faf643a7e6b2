#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/errbuf.h"
#include "slot/rng.h"
#include "slot/select.h"
#include "eval.h"
#include "paths.h"
#include "vecf.h"

static int
cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

double
eval_quantile(const float *v, size_t n, double q)
{
	size_t i;

	if (n == 0)
		return NAN;
	i = (size_t)ceil(q * (double)n);
	return v[i > 0 ? (i <= n ? i - 1 : n - 1) : 0];
}

static const char *
kind_label(enum eval_kind kind)
{
	switch (kind) {
	case EVAL_SELECT_ALL:
		return "Select-All";
	case EVAL_RANDOM_K:
		return "Random";
	case EVAL_RANDGROUP_K:
		return "RandGroup";
	case EVAL_OPTIMAL:
		return "Optimal";
	}
	return "?";
}

static int
stats_init(struct eval_stats *st, enum eval_kind kind, unsigned k, size_t npairs,
    bool keep_paths, bool keep_via)
{
	memset(st, 0, sizeof(*st));
	st->kind = kind;
	st->k = k;
	st->npairs = npairs;
	if (kind == EVAL_SELECT_ALL)
		snprintf(st->label, sizeof(st->label), "%s", kind_label(kind));
	else
		snprintf(st->label, sizeof(st->label), "%s-%u", kind_label(kind), k);
	st->gain = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->gain));
	if (keep_paths)
		st->path_us = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->path_us));
	if (keep_via)
		st->via = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->via));
	if (st->gain == NULL || (keep_paths && st->path_us == NULL) ||
	    (keep_via && st->via == NULL)) {
		eval_stats_free(st);
		return -1;
	}
	return 0;
}

/* Counts one pair. direct: +inf when missing; path: DECIDE_NO_PATH when
 * none. Comparisons are on whole microseconds, so exact. */
static void
account(struct eval_stats *st, size_t pair, float direct, uint32_t path)
{
	if (st->path_us != NULL)
		st->path_us[pair] = path;
	if (!isfinite(direct)) {
		st->nmissing++;
		if (path != DECIDE_NO_PATH)
			st->nrepaired++;
		return;
	}
	uint64_t d = (uint64_t)direct, p = path;

	st->gain[st->ndirect++] = (float)((double)d / (double)p);
	st->sum_reduction += 1.0 - (double)p / (double)d;
	st->nbenefit += p < d;
	st->ngt25 += 4 * p < 3 * d;
	st->nworse += p > d;
}

void
eval_stats_free(struct eval_stats *st)
{
	free(st->gain);
	free(st->path_us);
	free(st->via);
	st->gain = NULL;
	st->path_us = NULL;
	st->via = NULL;
}

void
eval_phi_free(struct eval_phi *phi)
{
	free(phi->ratio);
	phi->ratio = NULL;
}

/* A seed per (kind, k), so that adding a run does not change the others. */
static uint64_t
run_seed(uint64_t seed, enum eval_kind kind, unsigned k)
{
	return seed ^ (0x9e3779b97f4a7c15ull * (1 + ((uint64_t)kind << 32) + k));
}

static enum sel_strategy
sel_kind(enum eval_kind kind)
{
	return kind == EVAL_RANDOM_K ? SEL_RANDOM_K :
	    kind == EVAL_RANDGROUP_K ? SEL_RANDGROUP_K : SEL_ALL;
}

int
eval_strategy(const struct eval_ctx *ctx, enum eval_kind kind, unsigned k,
    bool keep_paths, struct eval_stats *st, char *err, size_t errlen)
{
	const struct pairs *pr = ctx->pairs;
	size_t nrel = ctx->roles->nrelay, cap = nrel + VECF_N;
	struct decide_model model = ctx->model;
	struct sel_candidate *cand = NULL;
	struct decide_scratch sc;
	uint32_t *idx = NULL;
	float *cr = NULL, *rs = NULL;
	struct rng rng;
	int rc = -1;

	decide_scratch_init(&sc);
	if (stats_init(st, kind, k, pr->n, keep_paths, keep_paths) < 0) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	model.sel.strategy = sel_kind(kind);
	model.sel.k = k;
	rng_seed(&rng, run_seed(ctx->seed, kind, k));
	cand = calloc(nrel > 0 ? nrel : 1, sizeof(*cand));
	idx = calloc(nrel > 0 ? nrel : 1, sizeof(*idx));
	cr = malloc(cap * sizeof(*cr));
	rs = malloc(cap * sizeof(*rs));
	if (cand == NULL || idx == NULL || cr == NULL || rs == NULL) {
		errbuf_set(err, errlen, "out of memory");
		goto out;
	}
	for (size_t j = 0; j < nrel; j++) {
		cand[j].group = ctx->group != NULL ? ctx->group[j] : (uint32_t)j;
		cand[j].usable = true;
	}
	for (size_t i = 0; i < pr->n; i++) {
		uint32_t c = pr->c[i], s = pr->s[i];
		long jc = ctx->relay_pos[c], js = ctx->relay_pos[s];
		struct decide_probe probe = {
			.direct = simmat_row(ctx->d, c)[s],
			.skip = { -1, -1 },
		};
		struct decide_result res;
		size_t m = 0;

		if (kind == EVAL_SELECT_ALL) {
			/* The matrix is symmetric: RTT(r, s) is row s. */
			probe.cr = simmat_row(ctx->dr, c);
			probe.rs = simmat_row(ctx->dr, s);
			probe.n = nrel;
			probe.skip[0] = jc;
			probe.skip[1] = js;
		} else {
			/* A pair's endpoints are not its relays. */
			if (jc >= 0)
				cand[jc].usable = false;
			if (js >= 0)
				cand[js].usable = false;
			if (sel_sample(&model.sel, cand, nrel, &rng, idx, &m) < 0) {
				errbuf_set(err, errlen, "out of memory");
				goto out;
			}
			if (jc >= 0)
				cand[jc].usable = true;
			if (js >= 0)
				cand[js].usable = true;
			const float *rc_ = simmat_row(ctx->dr, c), *rs_ = simmat_row(ctx->dr, s);

			for (size_t x = 0; x < m; x++) {
				cr[x] = rc_[idx[x]];
				rs[x] = rs_[idx[x]];
			}
			for (size_t x = m; x < m + VECF_N && x < cap; x++)
				cr[x] = rs[x] = INFINITY;
			probe.cr = cr;
			probe.rs = rs;
			probe.n = m;
		}
		if (decide_pair(&model, &probe, &sc, &res, err, errlen) < 0)
			goto out;
		account(st, i, probe.direct, res.path_us);
		if (st->via != NULL) {
			uint32_t col = kind == EVAL_SELECT_ALL ? res.relay : idx[res.relay];

			st->via[i] = res.verdict == SEL_GO_RELAY ?
			    ctx->roles->relay[col] : UINT32_MAX;
		}
		st->sum_probes += res.nprobed;
		st->sum_decide_us += (double)res.at_us;
		st->ndecided++;
	}
	qsort(st->gain, st->ndirect, sizeof(*st->gain), cmp_float);
	rc = 0;
out:
	if (rc < 0)
		eval_stats_free(st);
	decide_scratch_free(&sc);
	free(cand);
	free(idx);
	free(cr);
	free(rs);
	return rc;
}

int
eval_optimal(const struct eval_ctx *ctx, unsigned maxhops, bool keep_paths,
    struct eval_stats *st, struct eval_phi *phi, char *err, size_t errlen)
{
	const struct roles *ro = ctx->roles;
	const struct pairs *pr = ctx->pairs;
	size_t stride = ctx->d->stride, nrow = ro->nclient;
	long *row_of = NULL;
	float *prev = NULL, *next = NULL;
	unsigned h;

	memset(st, 0, maxhops * sizeof(*st));
	if (maxhops > 1)
		memset(phi, 0, (maxhops - 1) * sizeof(*phi));
	row_of = malloc(ctx->d->n * sizeof(*row_of));
	prev = malloc(nrow * stride * sizeof(*prev));
	next = malloc(nrow * stride * sizeof(*next));
	if (row_of == NULL || prev == NULL || next == NULL)
		goto nomem;
	for (size_t i = 0; i < ctx->d->n; i++)
		row_of[i] = -1;
	for (size_t i = 0; i < nrow; i++) {
		row_of[ro->client[i]] = (long)i;
		memcpy(prev + i * stride, simmat_row(ctx->d, ro->client[i]),
		    stride * sizeof(*prev));
	}
	for (h = 1; h <= maxhops; h++) {
		struct eval_stats *s = &st[h - 1];
		struct eval_phi *f = h >= 2 ? &phi[h - 2] : NULL;
		float *t;

		paths_extend(prev, nrow, ctx->d, ro->relay, ro->nrelay, next);
		if (stats_init(s, EVAL_OPTIMAL, h, pr->n, keep_paths, false) < 0)
			goto nomem;
		if (f != NULL) {
			f->i = h - 1;
			f->ratio = malloc((pr->n > 0 ? pr->n : 1) * sizeof(*f->ratio));
			if (f->ratio == NULL)
				goto nomem;
		}
		for (size_t i = 0; i < pr->n; i++) {
			size_t off = (size_t)row_of[pr->c[i]] * stride + pr->s[i];
			float p = next[off];

			account(s, i, simmat_row(ctx->d, pr->c[i])[pr->s[i]],
			    isfinite(p) ? (uint32_t)p : DECIDE_NO_PATH);
			if (f == NULL || !isfinite(p))
				continue;
			if (!isfinite(prev[off])) {
				f->nnew++;
				continue;
			}
			f->ratio[f->n] = prev[off] / p;
			f->sum += f->ratio[f->n];
			f->nimproved += prev[off] > p;
			f->n++;
		}
		qsort(s->gain, s->ndirect, sizeof(*s->gain), cmp_float);
		if (f != NULL)
			qsort(f->ratio, f->n, sizeof(*f->ratio), cmp_float);
		t = prev;
		prev = next;
		next = t;
	}
	free(row_of);
	free(prev);
	free(next);
	return 0;
nomem:
	errbuf_set(err, errlen, "out of memory for the optimal paths");
	for (unsigned x = 0; x < maxhops; x++)
		eval_stats_free(&st[x]);
	for (unsigned x = 0; x + 1 < maxhops; x++)
		eval_phi_free(&phi[x]);
	free(row_of);
	free(prev);
	free(next);
	return -1;
}
