/*
 * The directory's registry (see dstate.h).
 *
 * Relays live in an array in registration order, each with an id that only
 * grows, so the array is sorted by id and an id finds its index by binary
 * search; a hash table on the endpoint finds a relay by address. Each relay
 * keeps its own reports as a vector sorted by the peer's id: a report of k
 * entries merges in O((k + m) log k), and removing a relay strikes it from
 * every other vector in O(n log m).
 */

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
#include "slot/errbuf.h"
#include "slot/grpstab.h"
#include "slot/htab.h"
#include "dstate.h"

struct drtt {
	uint64_t peer;		/* the peer's id */
	uint32_t rtt_us;
};

struct drelay {
	struct hnode hn;
	uint64_t id;
	struct endpoint ep;
	char name[EP_STRLEN];
	uint16_t data_port;
	uint32_t group;
	bool grouped;		/* by a regroup or a snapshot, not provisional */
	uint64_t last_seen;
	struct drtt *rtt;	/* sorted by peer, no duplicates */
	size_t nrtt;
	bool has_cert;		/* identity mode: bound to cert.pk */
	struct ident_cert cert;
};

struct dstate {
	struct dstate_params p;
	struct drelay **v;	/* registration order = ascending id */
	size_t n, cap;
	struct htab byep;
	uint8_t hkey[16];
	uint64_t next_id;
	uint64_t boot, counter;
	uint64_t gen;		/* moves with the relay set */
	uint32_t next_group;	/* for relays waiting for a regroup */
	bool regroup_pending;
	bool dirty;
};

struct dstate *
dstate_new(const struct dstate_params *p, uint64_t boot)
{
	struct dstate *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	if (htab_init(&s->byep, 64) == -1) {
		free(s);
		return NULL;
	}
	addr_hash_key(s->hkey);
	s->p = *p;
	s->boot = boot;
	s->next_id = 1;
	return s;
}

static void
relay_free(struct drelay *r)
{
	free(r->rtt);
	free(r);
}

void
dstate_free(struct dstate *s)
{
	if (s == NULL)
		return;
	for (size_t i = 0; i < s->n; i++)
		relay_free(s->v[i]);
	free(s->v);
	htab_destroy(&s->byep);
	free(s);
}

void
dstate_set_params(struct dstate *s, const struct dstate_params *p)
{
	s->p = *p;
}

static void
changed(struct dstate *s)
{
	s->counter++;
	s->dirty = true;
}

static struct drelay *
find(const struct dstate *s, const struct endpoint *ep)
{
	uint64_t h = ep_hash(ep, s->hkey);

	for (struct hnode *n = htab_first(&s->byep, h); n; n = htab_next(n, h)) {
		struct drelay *r = container_of(n, struct drelay, hn);
		if (ep_eq(&r->ep, ep))
			return r;
	}
	return NULL;
}

/* Index of the relay with this id, or -1. */
static long
index_of(const struct dstate *s, uint64_t id)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->v[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n && s->v[lo]->id == id ? (long)lo : -1;
}

static struct drelay *
append(struct dstate *s, const struct endpoint *ep, uint16_t data_port, uint32_t group,
    uint64_t last_seen)
{
	struct drelay *r;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		struct drelay **v = realloc(s->v, cap * sizeof(*v));
		if (v == NULL)
			return NULL;
		s->v = v;
		s->cap = cap;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	r->id = s->next_id++;
	r->ep = *ep;
	ep_fmt(ep, r->name);
	r->data_port = data_port;
	r->group = group;
	r->last_seen = last_seen;
	/* A failed grow leaves a working, if slower, table. */
	(void)htab_insert(&s->byep, &r->hn, ep_hash(ep, s->hkey));
	s->v[s->n++] = r;
	if (group >= s->next_group)
		s->next_group = group + 1;
	s->gen++;
	s->regroup_pending = true;
	s->dirty = true;
	return r;
}

enum dstate_rc
dstate_register(struct dstate *s, const struct endpoint *relay, uint16_t data_port,
    uint64_t now)
{
	struct drelay *r = find(s, relay);

	if (r != NULL) {
		r->last_seen = now;
		s->dirty = true;
		if (r->data_port != data_port) {
			r->data_port = data_port;
			changed(s);
		}
		return DSTATE_OK;
	}
	if (s->n >= s->p.max_relays)
		return DSTATE_LIMIT;
	if (append(s, relay, data_port, s->next_group, now) == NULL)
		return DSTATE_NOMEM;
	changed(s);
	return DSTATE_NEW;
}

enum dstate_rc
dstate_heartbeat(struct dstate *s, const struct endpoint *relay, uint64_t now)
{
	struct drelay *r = find(s, relay);

	if (r == NULL)
		return DSTATE_UNKNOWN;
	r->last_seen = now;
	s->dirty = true;
	return DSTATE_OK;
}

static int
cmp_rtt(const void *a, const void *b)
{
	const struct drtt *x = a, *y = b;

	return x->peer < y->peer ? -1 : x->peer > y->peer;
}

/* A report entry being merged: pos orders duplicates. */
struct drtt_in {
	uint64_t peer;
	uint32_t rtt_us;
	size_t pos;
};

static int
cmp_rtt_in(const void *a, const void *b)
{
	const struct drtt_in *x = a, *y = b;

	/* By peer, and the last given first, so it wins. */
	if (x->peer != y->peer)
		return x->peer < y->peer ? -1 : 1;
	return x->pos > y->pos ? -1 : x->pos < y->pos;
}

enum dstate_rc
dstate_report(struct dstate *s, const struct endpoint *relay, const struct dstate_rtt_in *e,
    size_t n, size_t *accepted)
{
	struct drelay *r = find(s, relay);
	struct drtt_in *in;
	struct drtt *out;
	size_t k = 0, u = 0, m = 0, i, j;

	*accepted = 0;
	if (r == NULL)
		return DSTATE_UNKNOWN;
	if (n == 0)
		return DSTATE_OK;
	if ((in = malloc(n * sizeof(*in))) == NULL)
		return DSTATE_NOMEM;
	for (i = 0; i < n; i++) {
		struct drelay *p = find(s, &e[i].peer);
		if (p == NULL || p == r)
			continue;
		in[k].peer = p->id;
		in[k].rtt_us = e[i].rtt_us;
		in[k].pos = i;
		k++;
	}
	if (k == 0) {
		free(in);
		return DSTATE_OK;
	}
	qsort(in, k, sizeof(*in), cmp_rtt_in);
	for (i = 0; i < k; i++)
		if (u == 0 || in[u - 1].peer != in[i].peer)
			in[u++] = in[i];

	if ((out = malloc((r->nrtt + u) * sizeof(*out))) == NULL) {
		free(in);
		return DSTATE_NOMEM;
	}
	for (i = 0, j = 0; i < r->nrtt || j < u;) {
		if (j == u || (i < r->nrtt && r->rtt[i].peer < in[j].peer)) {
			out[m++] = r->rtt[i++];
			continue;
		}
		if (i < r->nrtt && r->rtt[i].peer == in[j].peer)
			i++;	/* replaced */
		out[m].peer = in[j].peer;
		out[m].rtt_us = in[j].rtt_us;
		m++;
		j++;
	}
	free(in);
	free(r->rtt);
	r->rtt = out;
	r->nrtt = m;
	*accepted = u;
	s->regroup_pending = true;
	s->dirty = true;
	return DSTATE_OK;
}

enum dstate_rc
dstate_owner(const struct dstate *s, const struct endpoint *relay,
    const uint8_t pk[IDENT_PK_LEN])
{
	const struct drelay *r = find(s, relay);

	if (r == NULL || !r->has_cert || memcmp(r->cert.pk, pk, IDENT_PK_LEN) == 0)
		return DSTATE_OK;
	return DSTATE_TAKEN;
}

enum dstate_rc
dstate_set_cert(struct dstate *s, const struct endpoint *relay,
    const uint8_t raw[IDENT_CERT_LEN])
{
	struct drelay *r = find(s, relay);
	struct ident_cert c;
	char err[128];

	if (r == NULL)
		return DSTATE_UNKNOWN;
	if (ident_cert_decode(raw, &c, err, sizeof(err)) == -1)
		return DSTATE_LIMIT;
	if (r->has_cert && memcmp(r->cert.pk, c.pk, IDENT_PK_LEN) != 0)
		return DSTATE_TAKEN;
	if (r->has_cert && memcmp(r->cert.raw, raw, IDENT_CERT_LEN) == 0)
		return DSTATE_OK;
	r->cert = c;
	r->has_cert = true;
	changed(s);
	return DSTATE_OK;
}

/* Strikes reports about the relay with this id from r's vector. */
static void
forget_peer(struct drelay *r, uint64_t id)
{
	struct drtt key = { .peer = id }, *f;

	/* bsearch wants a non-null base even for no elements. */
	if (r->nrtt == 0 ||
	    (f = bsearch(&key, r->rtt, r->nrtt, sizeof(*r->rtt), cmp_rtt)) == NULL)
		return;
	memmove(f, f + 1, (size_t)(r->rtt + r->nrtt - (f + 1)) * sizeof(*f));
	r->nrtt--;
}

static void
view_of(const struct drelay *r, struct dstate_relay_view *out)
{
	out->relay = r->name;
	out->data_port = r->data_port;
	out->group = r->group;
	out->last_seen = r->last_seen;
	out->nrtt = r->nrtt;
	out->cert = r->has_cert ? &r->cert : NULL;
}

/* What dstate_expire and dstate_remove_if share: removes the relays for
 * which keep() is false. */
struct sweep {
	uint64_t now;			/* expire */
	dstate_gone_fn gone;
	dstate_drop_fn drop;		/* remove_if */
	dstate_dropped_fn dropped;
	void *user;
};

static bool
keep(const struct dstate *s, const struct drelay *r, const struct sweep *w)
{
	if (w->drop == NULL) {
		uint64_t age = w->now > r->last_seen ? w->now - r->last_seen : 0;

		if (age <= s->p.expire_after_us)
			return true;
		if (w->gone)
			w->gone(w->user, r->name, age);
		return false;
	}
	struct dstate_relay_view v;
	const char *why = "";

	view_of(r, &v);
	if (!w->drop(w->user, &v, &why))
		return true;
	if (w->dropped)
		w->dropped(w->user, r->name, why);
	return false;
}

static size_t
sweep(struct dstate *s, const struct sweep *w)
{
	size_t i, j, removed = 0;

	for (i = 0, j = 0; i < s->n; i++) {
		struct drelay *r = s->v[i];

		if (keep(s, r, w)) {
			s->v[j++] = r;
			continue;
		}
		htab_remove(&s->byep, &r->hn);
		/* The survivors before j already sit in place; those after i
		 * are struck below, with the others. */
		for (size_t q = 0; q < j; q++)
			forget_peer(s->v[q], r->id);
		for (size_t q = i + 1; q < s->n; q++)
			forget_peer(s->v[q], r->id);
		relay_free(r);
		removed++;
	}
	s->n = j;
	if (removed) {
		s->gen++;
		s->regroup_pending = true;
		changed(s);
	}
	return removed;
}

size_t
dstate_expire(struct dstate *s, uint64_t now, dstate_gone_fn gone, void *user)
{
	struct sweep w = { .now = now, .gone = gone, .user = user };

	return sweep(s, &w);
}

size_t
dstate_remove_if(struct dstate *s, dstate_drop_fn drop, dstate_dropped_fn gone, void *user)
{
	struct sweep w = { .drop = drop, .dropped = gone, .user = user };

	return sweep(s, &w);
}

void
dstate_version(const struct dstate *s, char v[DSTATE_VERSION_LEN])
{
	snprintf(v, DSTATE_VERSION_LEN, "%016" PRIx64 "-%" PRIu64, s->boot, s->counter);
}

uint64_t
dstate_boot(const struct dstate *s)
{
	return s->boot;
}

uint64_t
dstate_counter(const struct dstate *s)
{
	return s->counter;
}

size_t
dstate_count(const struct dstate *s)
{
	return s->n;
}

bool
dstate_has(const struct dstate *s, const struct endpoint *relay)
{
	return find(s, relay) != NULL;
}

int
dstate_listing(const struct dstate *s, uint64_t now, struct dstate_entry **out, size_t *n)
{
	struct dstate_entry *e = NULL;

	*out = NULL;
	*n = 0;
	if (s->n == 0)
		return 0;
	if ((e = calloc(s->n, sizeof(*e))) == NULL)
		return -1;
	for (size_t i = 0; i < s->n; i++) {
		const struct drelay *r = s->v[i];
		memcpy(e[i].relay, r->name, sizeof(e[i].relay));
		e[i].data_port = r->data_port;
		e[i].group = r->group;
		e[i].age_us = now > r->last_seen ? now - r->last_seen : 0;
		e[i].nrtt = r->nrtt;
		e[i].has_cert = r->has_cert;
		if (r->has_cert)
			memcpy(e[i].cert, r->cert.raw, IDENT_CERT_LEN);
	}
	*out = e;
	*n = s->n;
	return 0;
}

size_t
dstate_ngroups(const struct dstate *s)
{
	uint32_t *g;
	size_t k = 0;

	if (s->n == 0 || (g = malloc(s->n * sizeof(*g))) == NULL)
		return 0;
	for (size_t i = 0; i < s->n; i++)
		g[i] = s->v[i]->group;
	qsort(g, s->n, sizeof(*g), cmp_u32);
	for (size_t i = 0; i < s->n; i++)
		if (i == 0 || g[i] != g[i - 1])
			k++;
	free(g);
	return k;
}

bool
dstate_regroup_pending(const struct dstate *s)
{
	return s->regroup_pending;
}

int
dstate_rtt_matrix(struct dstate *s, double **m, size_t *n, uint64_t *gen)
{
	size_t nn = s->n;
	double *d;

	*m = NULL;
	*n = nn;
	*gen = s->gen;
	if (nn == 0) {
		s->regroup_pending = false;
		return 0;
	}
	if (nn > SIZE_MAX / sizeof(double) / nn || (d = malloc(nn * nn * sizeof(*d))) == NULL)
		return -1;
	for (size_t i = 0; i < nn * nn; i++)
		d[i] = NAN;
	for (size_t i = 0; i < nn; i++) {
		const struct drelay *r = s->v[i];
		for (size_t q = 0; q < r->nrtt; q++) {
			long j = index_of(s, r->rtt[q].peer);
			if (j >= 0)
				d[i * nn + (size_t)j] = (double)r->rtt[q].rtt_us / 1000.0;
		}
	}
	for (size_t i = 0; i < nn; i++) {
		d[i * nn + i] = 0.0;
		for (size_t j = i + 1; j < nn; j++) {
			double a = d[i * nn + j], b = d[j * nn + i], v;
			if (isnan(a))
				v = b;
			else if (isnan(b))
				v = a;
			else
				v = (a + b) / 2.0;
			d[i * nn + j] = d[j * nn + i] = v;
		}
	}
	s->regroup_pending = false;
	*m = d;
	return 0;
}

/* The index of the relay with this id, searching from lo on (it is there):
 * galloping, since successive ids of one report are near each other. */
static size_t
index_from(const struct dstate *s, size_t lo, uint64_t id)
{
	size_t step = 1, hi;

	while (lo + step < s->n && s->v[lo + step]->id <= id) {
		lo += step;
		step *= 2;
	}
	hi = lo + step < s->n ? lo + step : s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->v[mid]->id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int
dstate_rtt_graph(struct dstate *s, const struct mcl_gparams *gp, struct mcl_graph *g,
    uint32_t **old, uint64_t *gen, char *err, size_t errlen)
{
	size_t nn = s->n, *cur = NULL;
	struct mcl_gbuild *b = NULL;
	uint32_t *o = NULL;

	memset(g, 0, sizeof(*g));
	*old = NULL;
	*gen = s->gen;
	if (nn == 0) {
		s->regroup_pending = false;
		return 0;
	}
	if ((cur = calloc(nn, sizeof(*cur))) == NULL || (o = malloc(nn * sizeof(*o))) == NULL) {
		errbuf_set(err, errlen, "out of memory for %zu relays", nn);
		goto fail;
	}
	if ((b = mcl_gbuild_new(nn, gp, err, errlen)) == NULL)
		goto fail;
	/*
	 * Every pair once, as the mean of both reports or the one there is.
	 * Reports are sorted by the peer's id and relays by id, so while i
	 * walks up, what it seeks in a peer's report (i's own id) only grows:
	 * cur[j] walks each report once, and the whole pass is O(reports).
	 */
	for (size_t i = 0; i < nn; i++) {
		const struct drelay *r = s->v[i];
		size_t j = 0;

		o[i] = r->grouped ? r->group : GRPSTAB_NONE;
		for (size_t q = 0; q < r->nrtt; q++) {
			const struct drelay *p;
			double v = (double)r->rtt[q].rtt_us / 1000.0;

			j = index_from(s, j, r->rtt[q].peer);
			p = s->v[j];
			while (cur[j] < p->nrtt && p->rtt[cur[j]].peer < r->id)
				cur[j]++;
			if (cur[j] < p->nrtt && p->rtt[cur[j]].peer == r->id) {
				if (j < i)
					continue;	/* offered from j's side */
				v = (v + (double)p->rtt[cur[j]].rtt_us / 1000.0) / 2.0;
			}
			if (mcl_gbuild_pair(b, i, j, v, err, errlen) < 0)
				goto fail;
		}
	}
	free(cur);
	cur = NULL;
	if (mcl_gbuild_finish(b, g, err, errlen) < 0) {
		b = NULL;
		goto fail;
	}
	s->regroup_pending = false;
	*old = o;
	return 0;
fail:
	mcl_gbuild_free(b);
	free(cur);
	free(o);
	return -1;
}

int
dstate_apply_groups(struct dstate *s, uint64_t gen, const uint32_t *group, size_t n)
{
	bool diff = false;

	if (gen != s->gen || n != s->n) {
		s->regroup_pending = true;
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (s->v[i]->group != group[i])
			diff = true;
		s->v[i]->group = group[i];
		s->v[i]->grouped = true;
	}
	s->next_group = 0;
	for (size_t i = 0; i < n; i++)
		if (group[i] >= s->next_group)
			s->next_group = group[i] + 1;
	if (diff)
		changed(s);
	return diff ? 1 : 0;
}

bool
dstate_dirty(const struct dstate *s)
{
	return s->dirty;
}

void
dstate_mark_saved(struct dstate *s)
{
	s->dirty = false;
}

void
dstate_relay_at(const struct dstate *s, size_t i, struct dstate_relay_view *out)
{
	view_of(s->v[i], out);
}

void
dstate_rtt_at(const struct dstate *s, size_t i, size_t j, size_t *peer, uint32_t *rtt_us)
{
	const struct drtt *t = &s->v[i]->rtt[j];
	long k = index_of(s, t->peer);

	/* Vectors only ever name live relays (forget_peer), so k >= 0. */
	*peer = k >= 0 ? (size_t)k : 0;
	*rtt_us = t->rtt_us;
}

void
dstate_rtt_row(const struct dstate *s, size_t i, size_t *peer, uint32_t *rtt_us)
{
	const struct drelay *r = s->v[i];
	size_t lo = 0;

	/* Peers are sorted by id, and so is s->v: each search starts where
	 * the last one ended and gallops, a step when every peer is there. */
	for (size_t j = 0; j < r->nrtt; j++) {
		lo = index_from(s, lo, r->rtt[j].peer);
		/* Vectors only ever name live relays (forget_peer). */
		peer[j] = lo < s->n ? lo : 0;
		rtt_us[j] = r->rtt[j].rtt_us;
	}
}

enum dstate_rc
dstate_restore_relay(struct dstate *s, const struct endpoint *relay, uint16_t data_port,
    uint32_t group, uint64_t last_seen)
{
	struct drelay *r;

	if (find(s, relay) != NULL)
		return DSTATE_LIMIT;
	if ((r = append(s, relay, data_port, group, last_seen)) == NULL)
		return DSTATE_NOMEM;
	/* Its group was served before the restart: keep it stable. */
	r->grouped = true;
	return DSTATE_OK;
}

void
dstate_restore_counter(struct dstate *s, uint64_t counter)
{
	s->counter = counter;
}

void
dstate_set_boot(struct dstate *s, uint64_t boot)
{
	s->boot = boot;
	s->dirty = true;
}

void
dstate_bump(struct dstate *s)
{
	changed(s);
}
