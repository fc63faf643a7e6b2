#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "iwlearn.h"

TAILQ_HEAD(iwl_list, iwl_entry);

struct iwlearn {
	struct iwl_conf c;
	struct iwl_sink sink;
	struct htab tab;
	struct iwl_list lru;	/* least recently updated first */
	uint8_t hkey[16];
	struct iwl_counters ctr;
};

void
iwl_prefix(const struct addr *a, unsigned plen, struct addr *out)
{
	unsigned bits = a->family == AF_INET ? 32 : 128;

	memset(out, 0, sizeof(*out));
	out->family = a->family;
	if (plen > bits)
		plen = bits;
	memcpy(out->bytes, a->bytes, plen / 8);
	if (plen % 8)
		out->bytes[plen / 8] = a->bytes[plen / 8] & (uint8_t)(0xff00 >> (plen % 8));
}

static unsigned
plen_of(const struct iwlearn *l, const struct addr *a)
{
	return a->family == AF_INET ? l->c.prefix4 : l->c.prefix6;
}

struct iwlearn *
iwl_new(const struct iwl_conf *c, const struct iwl_sink *sink)
{
	struct iwlearn *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	if (htab_init(&l->tab, 64) == -1) {
		free(l);
		return NULL;
	}
	l->c = *c;
	l->sink = *sink;
	TAILQ_INIT(&l->lru);
	addr_hash_key(l->hkey);
	return l;
}

static struct iwl_entry *
find(const struct iwlearn *l, const struct addr *prefix, uint64_t h)
{
	for (struct hnode *n = htab_first(&l->tab, h); n; n = htab_next(n, h)) {
		struct iwl_entry *e = container_of(n, struct iwl_entry, hn);
		if (addr_eq(&e->prefix, prefix))
			return e;
	}
	return NULL;
}

static void
forget(struct iwlearn *l, struct iwl_entry *e)
{
	if (l->sink.del)
		l->sink.del(l->sink.arg, e);
	htab_remove(&l->tab, &e->hn);
	TAILQ_REMOVE(&l->lru, e, link);
	free(e);
}

static void
store(struct iwlearn *l, struct iwl_entry *e, uint64_t now_ms)
{
	e->updated_ms = now_ms;
	TAILQ_REMOVE(&l->lru, e, link);
	TAILQ_INSERT_TAIL(&l->lru, e, link);
	if (l->sink.set)
		l->sink.set(l->sink.arg, e);
}

void
iwl_flush(struct iwlearn *l)
{
	struct iwl_entry *e;

	while ((e = TAILQ_FIRST(&l->lru)) != NULL)
		forget(l, e);
}

void
iwl_free(struct iwlearn *l)
{
	if (l == NULL)
		return;
	iwl_flush(l);
	htab_destroy(&l->tab);
	free(l);
}

void
iwl_set_conf(struct iwlearn *l, const struct iwl_conf *c)
{
	struct iwl_entry *e;

	if (c->prefix4 != l->c.prefix4 || c->prefix6 != l->c.prefix6)
		iwl_flush(l);
	l->c = *c;
	TAILQ_FOREACH(e, &l->lru, link)
		if (e->iw > c->cap) {
			e->iw = c->cap;
			if (l->sink.set)
				l->sink.set(l->sink.arg, e);
		}
	while (iwl_count(l) > c->max_prefixes && (e = TAILQ_FIRST(&l->lru)) != NULL) {
		l->ctr.expired++;
		forget(l, e);
	}
}

enum iwl_result
iwl_learn(struct iwlearn *l, const struct iwl_sample *s, uint64_t now_ms)
{
	struct addr pfx;
	struct iwl_entry *e;
	uint64_t h, segs;
	uint32_t w;

	l->ctr.samples++;
	if (s->dst.family != AF_INET && s->dst.family != AF_INET6) {
		l->ctr.ignored++;
		return IWL_IGNORED;
	}
	iwl_prefix(&s->dst, plen_of(l, &s->dst), &pfx);
	h = addr_hash(&pfx, l->hkey);
	e = find(l, &pfx, h);

	if (s->total_retrans > 0) {
		/* Loss on the path: never learn from it, and back off what an
		 * earlier transfer taught (the window may have caused it). */
		if (e == NULL) {
			l->ctr.ignored++;
			return IWL_IGNORED;
		}
		l->ctr.shrunk++;
		e->samples++;
		if (e->iw / 2 <= IWL_DEFAULT) {
			forget(l, e);
			return IWL_FORGOTTEN;
		}
		e->iw /= 2;
		store(l, e, now_ms);
		return IWL_SHRUNK;
	}
	/* Segments delivered without loss: a window larger than the
	 * transfer was never tested. */
	segs = s->snd_mss ? s->bytes_acked / s->snd_mss : 0;
	w = s->snd_cwnd;
	if (segs < w)
		w = (uint32_t)segs;
	if (w <= IWL_DEFAULT) {
		l->ctr.ignored++;
		return IWL_IGNORED;
	}
	if (w > l->c.cap)
		w = l->c.cap;
	if (e == NULL) {
		if (l->c.max_prefixes == 0) {
			l->ctr.ignored++;
			return IWL_IGNORED;
		}
		if (iwl_count(l) >= l->c.max_prefixes) {
			l->ctr.expired++;
			forget(l, TAILQ_FIRST(&l->lru));
		}
		if ((e = calloc(1, sizeof(*e))) == NULL) {
			l->ctr.ignored++;
			return IWL_IGNORED;
		}
		e->prefix = pfx;
		e->plen = plen_of(l, &s->dst);
		e->iw = w;
		htab_insert(&l->tab, &e->hn, h);
		TAILQ_INSERT_TAIL(&l->lru, e, link);
	} else {
		/* The mean: one transfer that got lucky moves it half way. */
		e->iw = (uint32_t)(((uint64_t)e->iw + w + 1) / 2);
	}
	e->samples++;
	e->min_rtt_us = s->min_rtt_us;
	e->delivery_rate = s->delivery_rate;
	l->ctr.learned++;
	store(l, e, now_ms);
	return IWL_LEARNED;
}

size_t
iwl_expire(struct iwlearn *l, uint64_t now_ms)
{
	struct iwl_entry *e;
	size_t n = 0;

	while ((e = TAILQ_FIRST(&l->lru)) != NULL && now_ms - e->updated_ms >= l->c.expiry_ms) {
		forget(l, e);
		n++;
	}
	l->ctr.expired += n;
	return n;
}

uint32_t
iwl_lookup(const struct iwlearn *l, const struct addr *a)
{
	struct addr pfx;
	const struct iwl_entry *e;

	if (a->family != AF_INET && a->family != AF_INET6)
		return 0;
	iwl_prefix(a, plen_of(l, a), &pfx);
	e = find(l, &pfx, addr_hash(&pfx, l->hkey));
	return e ? e->iw : 0;
}

size_t
iwl_count(const struct iwlearn *l)
{
	return l->tab.n;
}

const struct iwl_counters *
iwl_counters(const struct iwlearn *l)
{
	return &l->ctr;
}

void
iwl_foreach(const struct iwlearn *l, void (*fn)(void *arg, const struct iwl_entry *e),
    void *arg)
{
	const struct iwl_entry *e;

	TAILQ_FOREACH(e, &l->lru, link)
		fn(arg, e);
}
