#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/chain.h"
#include "slot/cover.h"
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
	case EVAL_COVER:
		return "Cover";
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
	if (kind != EVAL_OPTIMAL)
		st->wait_ratio = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->wait_ratio));
	if (keep_paths)
		st->path_us = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->path_us));
	if (keep_via)
		st->via = malloc((npairs > 0 ? npairs : 1) * sizeof(*st->via));
	if (st->gain == NULL || (kind != EVAL_OPTIMAL && st->wait_ratio == NULL) ||
	    (keep_paths && st->path_us == NULL) ||
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
	free(st->wait_ratio);
	free(st->path_us);
	free(st->via);
	st->gain = NULL;
	st->wait_ratio = NULL;
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
	    kind == EVAL_RANDGROUP_K ? SEL_RANDGROUP_K :
	    kind == EVAL_COVER ? SEL_COVER : SEL_ALL;
}

/* RTT between relays i and j (relay columns), for cover_landmarks. */
static uint32_t
relay_rtt(void *arg, size_t i, size_t j)
{
	const struct eval_ctx *ctx = arg;
	float v = simmat_row(ctx->dr, ctx->roles->relay[i])[j];

	return isfinite(v) ? (uint32_t)v : COVER_NONE;
}

/* What a client knows before it probes, as slotd has it: its RTT to every
 * relay (measured) and every relay's RTT to the landmarks (from the
 * directory). */
struct cover_sim {
	uint32_t *land;		/* landmark -> relay column */
	float *weight;
	size_t nland;
	uint32_t *rl;		/* nrelay x nland */
	uint32_t *cr;		/* the client's row */
	uint32_t *rank;		/* the client's ranking */
	size_t nrank;
	uint32_t client;	/* whose ranking rank is; UINT32_MAX: none */
	/* Chains: the client's lead-ins, and their bottlenecks as a row of
	 * floats (+inf: none) padded for decide_probe. */
	struct chain_lead *reach;
	uint32_t *lead;
	float *leadf, *lead1f;
};

static void
cover_sim_free(struct cover_sim *cs)
{
	free(cs->land);
	free(cs->weight);
	free(cs->rl);
	free(cs->cr);
	free(cs->rank);
	free(cs->reach);
	free(cs->lead);
	free(cs->leadf);
	free(cs->lead1f);
	memset(cs, 0, sizeof(*cs));
}

static int
cover_sim_init(const struct eval_ctx *ctx, struct cover_sim *cs)
{
	size_t n = ctx->roles->nrelay;
	size_t max = ctx->nlandmarks > 0 && ctx->nlandmarks < n ? ctx->nlandmarks : n;

	memset(cs, 0, sizeof(*cs));
	cs->client = UINT32_MAX;
	cs->land = malloc((max ? max : 1) * sizeof(*cs->land));
	cs->weight = malloc((max ? max : 1) * sizeof(*cs->weight));
	cs->cr = malloc((n ? n : 1) * sizeof(*cs->cr));
	cs->rank = malloc((n ? n : 1) * sizeof(*cs->rank));
	if (ctx->model.sel.max_chain > 1) {
		cs->reach = malloc((n ? n : 1) * sizeof(*cs->reach));
		cs->lead = malloc((n ? n : 1) * sizeof(*cs->lead));
		cs->leadf = malloc((n + VECF_N) * sizeof(*cs->leadf));
		cs->lead1f = malloc((n + VECF_N) * sizeof(*cs->lead1f));
		if (cs->reach == NULL || cs->lead == NULL || cs->leadf == NULL ||
		    cs->lead1f == NULL)
			goto fail;
	}
	if (cs->land == NULL || cs->weight == NULL || cs->cr == NULL || cs->rank == NULL ||
	    cover_landmarks(n, relay_rtt, (void *)(uintptr_t)ctx, max, NULL, cs->land, cs->weight,
	    &cs->nland) < 0)
		goto fail;
	cs->rl = malloc((n * cs->nland > 0 ? n * cs->nland : 1) * sizeof(*cs->rl));
	if (cs->rl == NULL)
		goto fail;
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < cs->nland; l++)
			cs->rl[i * cs->nland + l] = i == cs->land[l] ? 0 :
			    relay_rtt((void *)(uintptr_t)ctx, i, cs->land[l]);
	return 0;
fail:
	cover_sim_free(cs);
	return -1;
}

/* The client's view as cover.h takes it (the client's row in cs->cr). */
static struct cover_input
cover_sim_input(const struct eval_ctx *ctx, const struct cover_sim *cs)
{
	return (struct cover_input){
		.nrelay = ctx->roles->nrelay, .cr_us = cs->cr, .nland = cs->nland,
		.land_relay = cs->land, .land_weight = cs->weight, .rl_us = cs->rl,
	};
}

/* Ranks for client c (node), ranking k + 2 relays: the pair's endpoints may
 * be relays, and are then skipped. */
static int
cover_sim_rank(const struct eval_ctx *ctx, struct cover_sim *cs, uint32_t c, unsigned k)
{
	size_t n = ctx->roles->nrelay;
	const float *row = simmat_row(ctx->dr, c);
	struct cover_input in = cover_sim_input(ctx, cs);
	struct chain_input ch = {
		.nrelay = n, .cr_us = cs->cr, .nland = cs->nland, .land_relay = cs->land,
		.rl_us = cs->rl, .max_chain = ctx->model.sel.max_chain,
	};

	in.chain_gain = ctx->model.sel.chain_gain;
	in.c_wait = ctx->model.warm ? 0 : ctx->model.sel.c_wait;
	if (cs->client == c)
		return 0;
	for (size_t j = 0; j < n; j++)
		cs->cr[j] = ctx->roles->relay[j] == c || !isfinite(row[j]) ? COVER_NONE :
		    (uint32_t)row[j];
	if (cs->reach != NULL) {
		if (chain_reach(&ch, cs->reach) < 0)
			return -1;
		for (size_t j = 0; j < n; j++) {
			cs->lead[j] = cs->reach[j].us;
			cs->leadf[j] = cs->lead[j] == CHAIN_NONE ? INFINITY : (float)cs->lead[j];
			cs->lead1f[j] = cs->reach[j].us1 == CHAIN_NONE ? INFINITY :
			    (float)cs->reach[j].us1;
		}
		for (size_t j = n; j < n + VECF_N; j++)
			cs->leadf[j] = cs->lead1f[j] = INFINITY;
		if (!ctx->plain_rank)
			in.lead_us = cs->lead;
	}
	cs->nrank = 0;
	if (k > 0 && cover_rank(&in, (size_t)k + 2 < n ? (size_t)k + 2 : n, cs->rank,
	    &cs->nrank, NULL) < 0)
		return -1;
	cs->client = c;
	return 0;
}

/* The relay column that stands for a relay sharing server s's prefix: the
 * nearest within beside_us, not s itself (js) when it is a relay: servers
 * that are relays are rare outside a simulation, and slotd would know
 * their place exactly; -1: none. */
static long
beside_of(const struct eval_ctx *ctx, uint32_t s, long js)
{
	const float *rs = simmat_row(ctx->dr, s);
	long best = -1;

	for (size_t j = 0; j < ctx->roles->nrelay; j++)
		if ((long)j != js && rs[j] < ctx->beside_us && (best < 0 || rs[j] < rs[best]))
			best = (long)j;
	return best;
}

/* Cover-k's ranks for one pair into cand: with a relay beside the server,
 * the first half of k by its landmark, then the client's ranking. */
static void
cover_pair_ranks(const struct eval_ctx *ctx, const struct cover_sim *cs, uint32_t s,
    long js, unsigned k, struct sel_candidate *cand, uint32_t *beside, size_t *nbeside)
{
	long b = ctx->beside_us > 0 ? beside_of(ctx, s, js) : -1;
	struct cover_input in = cover_sim_input(ctx, cs);

	*nbeside = b >= 0 ? cover_beside(&in, (size_t)b, js >= 0 ? (uint32_t)js : COVER_NONE,
	    (k + 1) / 2, beside) : 0;
	for (size_t x = 0; x < cs->nrank; x++)
		cand[cs->rank[x]].rank = (uint32_t)(x + *nbeside);
	for (size_t x = 0; x < *nbeside; x++)
		cand[beside[x]].rank = (uint32_t)x;
}

/* Relay j's lead-in for the pair whose endpoints are relay columns jc and
 * js (-1: not relays): none if it passes through either (a lead-in is
 * computed once per client, and through the server it would not be a
 * path to it). */
static float
pair_lead(const struct cover_sim *cs, size_t j, long jc, long js)
{
	const struct chain_lead *r = &cs->reach[j];

	for (unsigned x = 0; x < r->nvia; x++)
		if ((long)r->via[x] == jc || (long)r->via[x] == js)
			return INFINITY;
	return cs->leadf[j];
}

/* The same for its lead-in through one relay alone. */
static float
pair_lead1(const struct cover_sim *cs, size_t j, long jc, long js)
{
	const struct chain_lead *r = &cs->reach[j];

	if (r->us1 == CHAIN_NONE || (long)r->via1 == jc || (long)r->via1 == js)
		return INFINITY;
	return cs->lead1f[j];
}

/* The RTT of the chain client -> via... -> relay column j -> server: its
 * longest loop, from the matrix. */
static uint32_t
chain_true_path(const struct eval_ctx *ctx, const struct chain_lead *r, unsigned len,
    size_t j, uint32_t c, uint32_t s)
{
	const uint32_t *node = ctx->roles->relay;
	const uint32_t *via = len == 2 ? &r->via1 : r->via;
	unsigned nvia = len - 1;
	float v = simmat_row(ctx->d, c)[node[via[0]]];

	for (unsigned x = 0; x < nvia; x++) {
		size_t next = x + 1 < nvia ? via[x + 1] : j;
		float h = simmat_row(ctx->d, node[via[x]])[node[next]];

		v = h > v ? h : v;
	}
	float last = simmat_row(ctx->d, node[j])[s];

	v = last > v ? last : v;
	return isfinite(v) ? (uint32_t)v : DECIDE_NO_PATH;
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
	uint32_t *idx = NULL, *beside = NULL;
	size_t nbeside = 0;
	float *cr = NULL, *rs = NULL, *lead = NULL, *lead1 = NULL;
	struct rng rng;
	struct cover_sim cs;
	bool chains = ctx->model.sel.max_chain > 1;
	int rc = -1;

	memset(&cs, 0, sizeof(cs));
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
	beside = calloc(k / 2 + 1, sizeof(*beside));
	cr = malloc(cap * sizeof(*cr));
	rs = malloc(cap * sizeof(*rs));
	if (cand == NULL || idx == NULL || beside == NULL || cr == NULL || rs == NULL) {
		errbuf_set(err, errlen, "out of memory");
		goto out;
	}
	for (size_t j = 0; j < nrel; j++) {
		cand[j].group = ctx->group != NULL ? ctx->group[j] : (uint32_t)j;
		cand[j].usable = true;
		cand[j].rank = SEL_NO_RANK;
	}
	if (chains) {
		size_t len = strlen(st->label);

		snprintf(st->label + len, sizeof(st->label) - len, "+%u",
		    model.sel.max_chain);
		st->max_chain = model.sel.max_chain;
		st->chain_gain = model.sel.chain_gain;
		lead = malloc(cap * sizeof(*lead));
		lead1 = malloc(cap * sizeof(*lead1));
		if (lead == NULL || lead1 == NULL) {
			errbuf_set(err, errlen, "out of memory");
			goto out;
		}
	} else {
		st->max_chain = 1;
	}
	if ((kind == EVAL_COVER || chains) && cover_sim_init(ctx, &cs) < 0) {
		errbuf_set(err, errlen, "out of memory for the cover ranking");
		goto out;
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

		if ((kind == EVAL_COVER || chains) &&
		    cover_sim_rank(ctx, &cs, c, kind == EVAL_COVER ? k : 0) < 0) {
			errbuf_set(err, errlen, "out of memory");
			goto out;
		}
		if (kind == EVAL_SELECT_ALL) {
			/* The matrix is symmetric: RTT(r, s) is row s. */
			probe.cr = simmat_row(ctx->dr, c);
			probe.rs = simmat_row(ctx->dr, s);
			probe.n = nrel;
			probe.skip[0] = jc;
			probe.skip[1] = js;
			if (chains) {
				for (size_t x = 0; x < nrel + VECF_N; x++) {
					lead[x] = x < nrel ? pair_lead(&cs, x, jc, js) : INFINITY;
					lead1[x] = x < nrel ? pair_lead1(&cs, x, jc, js) : INFINITY;
				}
				probe.lead = lead;
				probe.lead1 = lead1;
			}
		} else {
			if (kind == EVAL_COVER)
				cover_pair_ranks(ctx, &cs, s, js, k, cand, beside, &nbeside);
			else
				for (size_t x = 0; x < cs.nrank; x++)
					cand[cs.rank[x]].rank = (uint32_t)x;
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
			for (size_t x = 0; x < cs.nrank; x++)
				cand[cs.rank[x]].rank = SEL_NO_RANK;
			for (size_t x = 0; x < nbeside; x++)
				cand[beside[x]].rank = SEL_NO_RANK;
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
			if (chains) {
				for (size_t x = 0; x < m + VECF_N && x < cap; x++) {
					lead[x] = x < m ? pair_lead(&cs, idx[x], jc, js) :
					    INFINITY;
					lead1[x] = x < m ? pair_lead1(&cs, idx[x], jc, js) :
					    INFINITY;
				}
				probe.lead = lead;
				probe.lead1 = lead1;
			}
		}
		if (decide_pair(&model, &probe, &sc, &res, err, errlen) < 0)
			goto out;
		uint32_t col = kind == EVAL_SELECT_ALL ? res.relay : idx[res.relay];

		if (res.verdict == SEL_GO_RELAY && res.chain) {
			/* What the chain really gives: the longest of its loops. */
			res.path_us = chain_true_path(ctx, &cs.reach[col], res.chain, col, c, s);
			st->nrelays[res.chain]++;
		} else {
			st->nrelays[res.verdict == SEL_GO_RELAY]++;
		}
		account(st, i, probe.direct, res.path_us);
		if (isfinite(probe.direct))
			st->wait_ratio[st->ndirect - 1] =
			    (float)((double)res.at_us / (double)probe.direct);
		if (st->via != NULL) {
			st->via[i] = res.verdict == SEL_GO_RELAY ?
			    ctx->roles->relay[col] : UINT32_MAX;
		}
		st->sum_probes += res.nprobed;
		st->sum_decide_us += (double)res.at_us;
		st->ndecided++;
	}
	qsort(st->gain, st->ndirect, sizeof(*st->gain), cmp_float);
	qsort(st->wait_ratio, st->ndirect, sizeof(*st->wait_ratio), cmp_float);
	rc = 0;
out:
	if (rc < 0)
		eval_stats_free(st);
	decide_scratch_free(&sc);
	cover_sim_free(&cs);
	free(cand);
	free(idx);
	free(beside);
	free(cr);
	free(rs);
	free(lead);
	free(lead1);
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
