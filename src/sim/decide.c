/*
 * Replaying one relay selection through sel_decide (see decide.h for the
 * time model).
 *
 * The shortcut, used unless model.exact: sel_decide reads the replies only
 * through the best reply that reached the server among those that arrived
 * (by the deadline, once the direct RTT is known), and through whether
 * replies are still due (nprobed > nreplies). Let q be the reply of the
 * shortest path, the earliest of equals, arriving at T. A reply arriving
 * after T with a longer path, or one that did not reach the server, can
 * never be that best reply: q came no later and is better. So only the
 * replies arriving by T, or with q's path RTT (the set S), are handed to
 * sel_decide one by one. The others (U) matter only for "all replies in":
 * they count as one reply still due until the last of them arrives, and
 * sel_decide is called at that instant. The calls slotd makes at the other
 * arrivals of U change nothing but the time, and come before the wake_us
 * of the previous call, so sel_decide answers them with the same wait.
 * Finding q and S takes two vector passes over the relays; S is usually a
 * handful, so a Select-All decision costs O(relays), not O(relays^2).
 * test_sim.c checks the shortcut against the exact replay.
 */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "slot/errbuf.h"
#include "decide.h"
#include "vecf.h"

void
decide_model_default(struct decide_model *m)
{
	memset(m, 0, sizeof(*m));
	sel_params_default(&m->sel);
	m->sel.min_gain = 1.0;
	/* One relay, the paper's model and every figure before chains; with
	 * --max-chain, slotd's chain_gain. */
	m->sel.max_chain = 1;
	m->sel.chain_gain = 1.1;
	m->relay_timeout_us = 2000000;
}

void
decide_scratch_init(struct decide_scratch *sc)
{
	sc->rep = NULL;
	sc->due = NULL;
	sc->cap = 0;
}

void
decide_scratch_free(struct decide_scratch *sc)
{
	free(sc->rep);
	free(sc->due);
	decide_scratch_init(sc);
}

/* Which chunks of VECF_N entries hold a skipped entry (SIZE_MAX: none). */
struct chunks {
	size_t n;		/* chunks */
	size_t sq[2];
};

static void
chunks_init(const struct decide_probe *p, struct chunks *c)
{
	c->n = (p->n + VECF_N - 1) / VECF_N;
	for (int k = 0; k < 2; k++)
		c->sq[k] = p->skip[k] >= 0 && (size_t)p->skip[k] < p->n ?
		    (size_t)p->skip[k] / VECF_N : SIZE_MAX;
}

/* Entries skipped, counted once each. */
static size_t
nskipped(const struct decide_probe *p)
{
	bool a = p->skip[0] >= 0 && (size_t)p->skip[0] < p->n;
	bool b = p->skip[1] >= 0 && (size_t)p->skip[1] < p->n &&
	    p->skip[1] != p->skip[0];

	return (size_t)a + (size_t)b;
}

/* Chunk q of cr and rs, skipped entries made missing: a relay not probed
 * never answers. The branch is taken at most twice per pair. */
static inline void
load_chunk(const struct decide_probe *p, const struct chunks *c, size_t q,
    vecf *cr, vecf *rs)
{
	size_t j = q * VECF_N;

	if (q != c->sq[0] && q != c->sq[1]) {
		*cr = vecf_load(p->cr + j);
		*rs = vecf_load(p->rs + j);
		return;
	}
	float a[VECF_N], b[VECF_N];

	memcpy(a, p->cr + j, sizeof(a));
	memcpy(b, p->rs + j, sizeof(b));
	for (int k = 0; k < 2; k++)
		if (p->skip[k] >= 0 && (size_t)p->skip[k] / VECF_N == q)
			a[p->skip[k] % VECF_N] = b[p->skip[k] % VECF_N] = INFINITY;
	*cr = vecf_load(a);
	*rs = vecf_load(b);
}

/* Path RTT (+inf: not reached) and reply arrival (+inf: never) per lane. */
static inline void
lane_times(vecf cr, vecf rs, vecf to, bool warm, vecf *path, vecf *arrive)
{
	vecm reached = vecf_le(rs, to);

	*path = vecf_max(cr, vecf_blend(reached, rs, vecf_set1(INFINITY)));
	*arrive = warm ? cr : vecf_add(cr, vecf_min(rs, to));
}

struct best {
	float path;		/* shortest path RTT; +inf: no relay reached */
	float at;		/* earliest arrival of a reply with that path */
	size_t nsilent;		/* probed relays that never answer */
};

static void
scan_best(const struct decide_model *m, const struct decide_probe *p,
    const struct chunks *c, struct best *b)
{
	vecf inf = vecf_set1(INFINITY), to = vecf_set1((float)m->relay_timeout_us);
	vecf bp = inf, bt = inf;
	size_t silent = 0;
	float lp[VECF_N], lt[VECF_N];

	for (size_t q = 0; q < c->n; q++) {
		vecf cr, rs, path, t;

		load_chunk(p, c, q, &cr, &rs);
		lane_times(cr, rs, to, m->warm, &path, &t);
		vecm shorter = vecf_lt(path, bp), same = vecf_eq(path, bp);

		/* Per lane: the shortest path so far, and the earliest reply
		 * with it. */
		bt = vecf_blend(shorter, t, vecf_blend(same, vecf_min(bt, t), bt));
		bp = vecf_min(bp, path);
		silent += VECF_N - vecm_count(vecm_bits(vecf_lt(t, inf)));
	}
	vecf_store(lp, bp);
	vecf_store(lt, bt);
	b->path = INFINITY;
	b->at = INFINITY;
	for (int k = 0; k < VECF_N; k++)
		if (lp[k] < b->path)
			b->path = lp[k];
	for (int k = 0; k < VECF_N; k++)
		if (lp[k] == b->path && lt[k] < b->at)
			b->at = lt[k];
	/* Padding and skipped entries read as missing. */
	b->nsilent = silent - (c->n * VECF_N - p->n) - nskipped(p);
}

static int
cmp_reply(const void *a, const void *b)
{
	const struct sel_reply *x = a, *y = b;

	if (x->at_us != y->at_us)
		return x->at_us < y->at_us ? -1 : 1;
	return x->relay < y->relay ? -1 : x->relay > y->relay;
}

static int
reserve(struct decide_scratch *sc, size_t n)
{
	if (n <= sc->cap)
		return 0;
	struct sel_reply *r = realloc(sc->rep, n * sizeof(*r));

	if (r == NULL)
		return -1;
	sc->rep = r;
	struct sel_due *d = realloc(sc->due, n * sizeof(*d));

	if (d == NULL)
		return -1;
	sc->due = d;
	sc->cap = n;
	return 0;
}

static bool
chains(const struct decide_model *m, const struct decide_probe *p)
{
	return p->lead != NULL && m->sel.max_chain > 1;
}

/* A lead-in in whole microseconds, never SEL_NO_LEAD (0). */
static uint32_t
lead_us(float v)
{
	return v >= 1.0f ? (uint32_t)v : 1;
}

/* The reply of relay j as slotd would record it. */
static void
make_reply(const struct decide_model *m, const struct decide_probe *p,
    size_t j, struct sel_reply *r)
{
	uint32_t cr = (uint32_t)p->cr[j];
	bool reached = p->rs[j] <= (float)m->relay_timeout_us;
	uint32_t rs = reached ? (uint32_t)p->rs[j] : 0;

	r->relay = (uint32_t)j;
	r->reached = reached;
	r->rtt_cr_us = cr;
	r->rtt_rs_us = rs;
	r->at_us = (uint64_t)cr + (m->warm ? 0 : reached ? rs : m->relay_timeout_us);
	r->rtt_lead_us = chains(m, p) && isfinite(p->lead[j]) ?
	    lead_us(p->lead[j]) : SEL_NO_LEAD;
	r->rtt_lead1_us = chains(m, p) && p->lead1 && isfinite(p->lead1[j]) ?
	    lead_us(p->lead1[j]) : SEL_NO_LEAD;
}

/* The shorter of a relay's two lead-ins; SEL_NO_LEAD: none. */
static uint32_t
min_lead(uint32_t a, uint32_t b)
{
	if (a == SEL_NO_LEAD)
		return b;
	return b == SEL_NO_LEAD || a < b ? a : b;
}

/* The replies still due at this step that may end a chain: those after
 * the first `passed` of S, and the relays that never answer (their cr
 * unknown to the bound). Exact replay only, so S is every reply. */
static size_t
collect_due(const struct decide_probe *p, const struct decide_scratch *sc, size_t ns,
    size_t passed)
{
	size_t k = 0;

	for (size_t i = passed; i < ns; i++) {
		uint32_t l = min_lead(sc->rep[i].rtt_lead_us, sc->rep[i].rtt_lead1_us);

		if (l != SEL_NO_LEAD)
			sc->due[k++] = (struct sel_due){ l, sc->rep[i].rtt_cr_us };
	}
	for (size_t j = 0; j < p->n; j++) {
		uint32_t l = min_lead(isfinite(p->lead[j]) ? lead_us(p->lead[j]) : SEL_NO_LEAD,
		    p->lead1 && isfinite(p->lead1[j]) ? lead_us(p->lead1[j]) : SEL_NO_LEAD);

		if (!isfinite(p->cr[j]) && l != SEL_NO_LEAD &&
		    (long)j != p->skip[0] && (long)j != p->skip[1])
			sc->due[k++] = (struct sel_due){ l, 0 };
	}
	return k;
}

/* Collects S into sc->rep (see the top of the file); *nu and *u_last give
 * the count and the last arrival of the others that answer. */
static int
collect(const struct decide_model *m, const struct decide_probe *p,
    const struct chunks *c, const struct best *b, struct decide_scratch *sc,
    size_t *ns, size_t *nu, uint64_t *u_last)
{
	vecf inf = vecf_set1(INFINITY), zero = vecf_set1(0.0f);
	vecf to = vecf_set1((float)m->relay_timeout_us);
	/* No relay reached the server: none can be chosen, S is empty. */
	vecf vt = vecf_set1(b->path < INFINITY ? b->at : -1.0f);
	vecf vp = vecf_set1(b->path < INFINITY ? b->path : -1.0f);
	vecf umax = zero;
	size_t k = 0, u = 0;
	float lu[VECF_N];

	if (reserve(sc, p->n > 0 ? p->n : 1) < 0)
		return -1;
	for (size_t q = 0; q < c->n; q++) {
		vecf cr, rs, path, t;

		load_chunk(p, c, q, &cr, &rs);
		lane_times(cr, rs, to, m->warm, &path, &t);
		vecm answers = vecf_lt(t, inf);
		vecm want = m->exact || chains(m, p) ? answers : vecm_and(answers,
		    vecm_or(vecf_le(t, vt), vecf_eq(path, vp)));
		vecm rest = vecm_andnot(want, answers);
		unsigned bits = vecm_bits(want);

		umax = vecf_max(umax, vecf_blend(rest, t, zero));
		u += vecm_count(vecm_bits(rest));
		while (bits != 0) {
			size_t j = q * VECF_N + (size_t)__builtin_ctz(bits);

			bits &= bits - 1;
			make_reply(m, p, j, &sc->rep[k++]);
		}
	}
	vecf_store(lu, umax);
	*u_last = 0;
	for (int l = 0; l < VECF_N; l++)
		if ((uint64_t)lu[l] > *u_last)
			*u_last = (uint64_t)lu[l];
	qsort(sc->rep, k, sizeof(*sc->rep), cmp_reply);
	*ns = k;
	*nu = u;
	return 0;
}

enum event { EV_DIRECT, EV_REPLY, EV_REST, EV_TIMER };

int
decide_pair(const struct decide_model *m, const struct decide_probe *p,
    struct decide_scratch *sc, struct decide_result *out, char *err,
    size_t errlen)
{
	struct chunks c;
	struct best b;
	struct sel_state st;
	struct sel_result res;
	size_t ns, nu, si = 0, stuck = 0;
	uint64_t u_last;
	bool direct_event = isfinite(p->direct), rest_due;

	chunks_init(p, &c);
	scan_best(m, p, &c, &b);
	if (collect(m, p, &c, &b, sc, &ns, &nu, &u_last) < 0) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	rest_due = nu > 0;
	memset(&st, 0, sizeof(st));
	st.direct = direct_event || m->silent_direct ? SEL_DIRECT_PENDING :
	    SEL_DIRECT_FAILED;
	st.replies = sc->rep;
	memset(out, 0, sizeof(*out));
	for (;;) {
		uint64_t next;
		enum event ev;

		st.nreplies = si;
		st.nprobed = ns + (rest_due ? 1 : 0) + b.nsilent;
		if (chains(m, p)) {
			st.due = sc->due;
			st.ndue = collect_due(p, sc, ns, si);
		}
		sel_decide(&m->sel, &st, &res);
		out->ncalls++;
		if (res.verdict != SEL_WAIT)
			break;
		/* The earliest event; at equal times the first listed wins. */
		next = res.wake_us;
		ev = EV_TIMER;
		if (rest_due && u_last <= next) {
			next = u_last;
			ev = EV_REST;
		}
		if (si < ns && sc->rep[si].at_us <= next) {
			next = sc->rep[si].at_us;
			ev = EV_REPLY;
		}
		if (direct_event && (uint64_t)p->direct <= next) {
			next = (uint64_t)p->direct;
			ev = EV_DIRECT;
		}
		/* A timer set for a time already past fires at once. Each
		 * other event happens once, so only timers can repeat. */
		if (next <= st.now_us) {
			next = st.now_us;
			stuck += ev == EV_TIMER;
		} else {
			stuck = 0;
		}
		if (stuck > 3 || out->ncalls > ns + 64) {
			errbuf_set(err, errlen, "sel_decide keeps waiting (for %llu us "
			    "at %llu us)", (unsigned long long)res.wake_us,
			    (unsigned long long)st.now_us);
			return -1;
		}
		st.now_us = next;
		switch (ev) {
		case EV_DIRECT:
			direct_event = false;
			st.direct = SEL_DIRECT_OK;
			st.rtt_direct_us = (uint32_t)p->direct;
			break;
		case EV_REPLY:
			si++;
			break;
		case EV_REST:
			rest_due = false;
			break;
		case EV_TIMER:
			break;
		}
	}
	out->verdict = res.verdict;
	out->at_us = st.now_us;
	out->nprobed = (uint32_t)(p->n - nskipped(p));
	if (res.verdict == SEL_GO_RELAY) {
		out->relay = res.relay;
		out->path_us = res.path_rtt_us;
		out->chain = res.chain;
	} else {
		out->path_us = isfinite(p->direct) ? (uint32_t)p->direct :
		    DECIDE_NO_PATH;
	}
	return 0;
}
