#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
#include "slot/select.h"

void
sel_params_default(struct sel_params *p)
{
	p->strategy = SEL_COVER;
	p->k = 20;
	p->c_wait = 1.25;
	p->min_gain = 1.1;
	p->repair_timeout_us = 3000000;
	/* Measured in slot-sim (docs/evaluation.md, "Chains of relays"). */
	p->max_chain = 3;
	p->chain_gain = 1.1;
}

static const char *const names[] = {
	[SEL_ALL] = "all", [SEL_RANDOM_K] = "random", [SEL_RANDGROUP_K] = "randgroup",
	[SEL_COVER] = "cover",
};

int
sel_strategy_parse(const char *s, enum sel_strategy *out)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(s, names[i]) == 0) {
			*out = (enum sel_strategy)i;
			return 0;
		}
	return -1;
}

const char *
sel_strategy_name(enum sel_strategy s)
{
	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

/* Moves k elements chosen uniformly to the front of v (partial
 * Fisher-Yates). */
static void
choose_front(uint32_t *v, size_t n, size_t k, struct rng *rng)
{
	for (size_t i = 0; i < k && i < n; i++) {
		size_t j = i + (size_t)rng_below(rng, n - i);
		uint32_t t = v[i];
		v[i] = v[j];
		v[j] = t;
	}
}

static int
cmp_by_group(const void *a, const void *b, void *arg)
{
	const struct sel_candidate *c = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t gx = c[x].group, gy = c[y].group;

	if (gx != gy)
		return gx < gy ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int
cmp_by_rank(const void *a, const void *b, void *arg)
{
	const struct sel_candidate *c = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (c[x].rank != c[y].rank)
		return c[x].rank < c[y].rank ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* SEL_COVER over the m usable relays in out: ranked ones first by rank,
 * then random unranked ones to make up k. */
static void
sample_cover(const struct sel_params *p, const struct sel_candidate *c, uint32_t *out,
    size_t m, struct rng *rng, size_t *nout)
{
	size_t r = 0, take = m < p->k ? m : p->k;

	for (size_t i = 0; i < m; i++)
		if (c[out[i]].rank != SEL_NO_RANK) {
			uint32_t t = out[r];
			out[r++] = out[i];
			out[i] = t;
		}
	qsort_r(out, r, sizeof(*out), cmp_by_rank, (void *)(uintptr_t)c);
	if (r < take)
		choose_front(out + r, m - r, take - r, rng);
	*nout = take;
	qsort(out, take, sizeof(*out), cmp_u32);
}

int
sel_sample(const struct sel_params *p, const struct sel_candidate *c, size_t n,
    struct rng *rng, uint32_t *out, size_t *nout)
{
	size_t m = 0;

	for (size_t i = 0; i < n; i++)
		if (c[i].usable)
			out[m++] = (uint32_t)i;
	if (p->strategy == SEL_COVER) {
		sample_cover(p, c, out, m, rng, nout);
		return 0;
	}
	if (p->strategy == SEL_ALL || (p->strategy == SEL_RANDOM_K && m <= p->k)) {
		*nout = m;
		return 0;
	}
	if (p->strategy == SEL_RANDOM_K) {
		choose_front(out, m, p->k, rng);
		*nout = p->k;
		qsort(out, *nout, sizeof(*out), cmp_u32);
		return 0;
	}

	/* RandGroup-k: usable relays sorted by group (then index, so the
	 * result depends only on the seed), runs of one group found, k runs
	 * chosen, one member drawn from each. */
	uint32_t *start = malloc((m ? m : 1) * sizeof(*start));
	if (start == NULL)
		return -1;
	qsort_r(out, m, sizeof(*out), cmp_by_group, (void *)(uintptr_t)c);
	size_t ng = 0;
	for (size_t i = 0; i < m; i++)
		if (i == 0 || c[out[i]].group != c[out[i - 1]].group)
			start[ng++] = (uint32_t)i;
	size_t take = ng < p->k ? ng : p->k;
	choose_front(start, ng, take, rng);
	uint32_t *pick = start;	/* reused in place: pick[i] overwrites start[i] */
	for (size_t i = 0; i < take; i++) {
		uint32_t s = start[i], e = s + 1;
		while (e < m && c[out[e]].group == c[out[s]].group)
			e++;
		pick[i] = out[s + (uint32_t)rng_below(rng, e - s)];
	}
	memcpy(out, pick, take * sizeof(*out));
	free(start);
	*nout = take;
	qsort(out, take, sizeof(*out), cmp_u32);
	return 0;
}

/* Path RTT through a relay: the slower of its two loops. */
static uint32_t
sel_path_rtt(const struct sel_reply *r)
{
	return r->rtt_cr_us > r->rtt_rs_us ? r->rtt_cr_us : r->rtt_rs_us;
}

#define NO_CHAIN UINT32_MAX

static uint32_t
max32(uint32_t a, uint32_t b)
{
	return a > b ? a : b;
}

/* The chain a reply ends, and its relays (*len; NO_CHAIN: none): through
 * its one-relay lead-in, or its two-relay one when max_chain allows and
 * that beats the shorter chain by chain_gain (each extra relay costs). */
static uint32_t
chain_rtt(const struct sel_params *p, const struct sel_reply *r, unsigned *len)
{
	uint32_t best = NO_CHAIN;

	*len = 0;
	if (r->rtt_lead1_us != SEL_NO_LEAD) {
		best = max32(r->rtt_lead1_us, r->rtt_rs_us);
		*len = 2;
	}
	if (p->max_chain >= 3 && r->rtt_lead_us != SEL_NO_LEAD &&
	    r->rtt_lead_us != r->rtt_lead1_us) {
		uint32_t c = max32(r->rtt_lead_us, r->rtt_rs_us);

		if (best == NO_CHAIN || (c < best && (double)c * p->chain_gain <= best)) {
			best = c;
			*len = 3;
		}
	}
	return best;
}

/* The path in hand: the best single relay (ties to the shorter first hop,
 * then the lower index, so results are stable), and the best chain (ties
 * to fewer relays, then the lower index), taken when it beats the single
 * relay by chain_gain. */
struct pick {
	const struct sel_reply *single, *chain;
	uint32_t chain_path;
	unsigned chain_len;
	bool use_chain;
	uint32_t path;		/* of the one taken */
};

static bool
chains_on(const struct sel_params *p)
{
	return p->max_chain > 1;
}

/* Among the replies that reached the server (by `until` if bounded). */
static void
pick_best(const struct sel_params *p, const struct sel_state *s, bool bounded,
    uint64_t until, struct pick *pk)
{
	const struct sel_reply *best = NULL, *ch = NULL;
	uint32_t cp = NO_CHAIN;
	unsigned cl = 0;

	for (size_t i = 0; i < s->nreplies; i++) {
		const struct sel_reply *r = &s->replies[i];
		if (!r->reached || (bounded && r->at_us > until))
			continue;
		if (best == NULL || sel_path_rtt(r) < sel_path_rtt(best) ||
		    (sel_path_rtt(r) == sel_path_rtt(best) &&
		    (r->rtt_cr_us < best->rtt_cr_us ||
		    (r->rtt_cr_us == best->rtt_cr_us && r->relay < best->relay))))
			best = r;
		if (!chains_on(p))
			continue;
		unsigned len;
		uint32_t v = chain_rtt(p, r, &len);

		if (v == NO_CHAIN)
			continue;
		if (ch == NULL || v < cp || (v == cp && (len < cl ||
		    (len == cl && r->relay < ch->relay)))) {
			ch = r;
			cp = v;
			cl = len;
		}
	}
	pk->single = best;
	pk->chain = ch;
	pk->chain_path = cp;
	pk->chain_len = cl;
	pk->use_chain = ch != NULL && cp < sel_path_rtt(best) &&
	    (double)cp * p->chain_gain <= (double)sel_path_rtt(best);
	pk->path = pk->use_chain ? cp : best ? sel_path_rtt(best) : 0;
}

static void
go(struct sel_result *o, enum sel_verdict v, const struct pick *pk, const char *why)
{
	const struct sel_reply *r = pk == NULL ? NULL : pk->use_chain ? pk->chain : pk->single;

	o->verdict = v;
	o->relay = r ? r->relay : 0;
	o->path_rtt_us = r ? pk->path : 0;
	o->chain = r != NULL && pk->use_chain ? pk->chain_len : 0;
	o->wake_us = 0;
	o->why = why;
}

static void
wait_until(struct sel_result *o, uint64_t t)
{
	o->verdict = SEL_WAIT;
	o->relay = 0;
	o->path_rtt_us = 0;
	o->chain = 0;
	o->wake_us = t;
	o->why = "waiting";
}

static uint64_t
max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* When the replies still due can no longer change the choice (0: all are
 * in; UINT64_MAX: nothing in hand yet).
 *
 * A reply still due at time t cannot beat a single-relay path of t/2: it
 * comes back after the client-relay round trip plus the relay's probe of
 * the server (cr + rs > t, so max(cr, rs) > t/2), or after cr alone when
 * the relay has the server's RTT cached (cr > t). Without this a decision
 * waited for the slowest relay probed, often one that could never win.
 *
 * That bound is not enough for chains: a relay near the server but far
 * from the client answers late, yet may end the best chain (its lead-in
 * avoids its long first hop). Its chain path is max(lead, rs) with
 * rs > t - cr, so at least max(lead, t - cr) with the caller's cr. Then:
 * - a single relay in hand (path S) stays the choice once no single reply
 *   can be shorter (t/2 >= S) and no chain can beat S by chain_gain
 *   (lead * gain > S, or (t - cr) * gain >= S);
 * - a chain in hand (path C) stays once no single reply can stop it
 *   (t/2 >= C * gain) and no chain can be shorter (lead > C, or
 *   t - cr >= C). */
static uint64_t
settled_at(const struct sel_params *p, const struct sel_state *s, const struct pick *pk,
    bool all_in)
{
	uint64_t t;

	if (all_in)
		return 0;
	if (pk->single == NULL)
		return UINT64_MAX;
	if (!chains_on(p))
		return 2 * (uint64_t)pk->path;
	double g = p->chain_gain, c = pk->path;

	t = pk->use_chain ? (uint64_t)ceil(2 * c * g) : 2 * (uint64_t)pk->path;
	for (size_t i = 0; i < s->ndue; i++) {
		const struct sel_due *d = &s->due[i];

		if (d->lead_us == SEL_NO_LEAD)
			continue;
		/* Unknown cr: only the lead-in bounds it, and it may end a
		 * better chain until its reply or the deadline. */
		uint64_t cr = d->cr_us ? d->cr_us : UINT64_MAX / 4;

		if (pk->use_chain && d->lead_us <= pk->path)
			t = max_u64(t, cr + pk->path);
		else if (!pk->use_chain && (double)d->lead_us * g <= c)
			t = max_u64(t, cr + (uint64_t)ceil(c / g));
	}
	return t;
}

static uint64_t
min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

void
sel_decide(const struct sel_params *p, const struct sel_state *s, struct sel_result *o)
{
	bool all_in = s->nreplies >= s->nprobed;
	struct pick pk;
	uint64_t settled;

	switch (s->direct) {
	case SEL_DIRECT_REFUSED:
		go(o, SEL_GO_DIRECT, NULL, "server refuses the port");
		return;
	case SEL_DIRECT_OK: {
		uint64_t deadline = (uint64_t)(p->c_wait * s->rtt_direct_us);
		pick_best(p, s, true, deadline, &pk);
		settled = settled_at(p, s, &pk, all_in);
		if (s->now_us < settled && s->now_us < deadline) {
			wait_until(o, min_u64(settled, deadline));
			return;
		}
		if (pk.single && (double)s->rtt_direct_us >= p->min_gain * pk.path)
			go(o, SEL_GO_RELAY, &pk, pk.use_chain ? "chain beats direct" :
			    "relay beats direct");
		else
			go(o, SEL_GO_DIRECT, NULL, pk.single ? "no relay gains enough" :
			    "no relay reached the server in time");
		return;
	}
	case SEL_DIRECT_PENDING:
		if (s->now_us < p->repair_timeout_us) {
			pick_best(p, s, false, 0, &pk);
			uint64_t sure = pk.single ?
			    (uint64_t)(p->min_gain * pk.path) : UINT64_MAX;
			settled = settled_at(p, s, &pk, all_in);
			uint64_t when = sure > settled ? sure : settled;
			if (pk.single && s->now_us >= when) {
				go(o, SEL_GO_RELAY, &pk, pk.use_chain ?
				    "chain beats a slower direct path" :
				    "relay beats a slower direct path");
				return;
			}
			wait_until(o, min_u64(when, p->repair_timeout_us));
			return;
		}
		/* Silent past repair_timeout: treat as failed. */
		/* FALLTHROUGH */
	case SEL_DIRECT_FAILED:
		pick_best(p, s, false, 0, &pk);
		settled = settled_at(p, s, &pk, all_in);
		if (s->now_us < settled && s->now_us < p->repair_timeout_us) {
			wait_until(o, min_u64(settled, p->repair_timeout_us));
			return;
		}
		if (pk.single)
			go(o, SEL_GO_RELAY, &pk, pk.use_chain ? "path repaired by a chain" :
			    "path repaired by a relay");
		else
			go(o, SEL_GO_DIRECT, NULL, "no path reaches the server");
		return;
	}
	go(o, SEL_GO_DIRECT, NULL, "unknown direct state");
}

size_t
sel_keep_family(struct sel_candidate *c, size_t n, int family)
{
	size_t same = 0;

	for (size_t i = 0; i < n; i++) {
		if (c[i].family == family)
			same++;
		else
			c[i].usable = false;
	}
	return same;
}
