/* Bounded cache of measured RTTs per endpoint. Entries are kept in the
 * order they were measured, so the oldest measurement is the one evicted. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/queue.h>

#include "slot/addr.h"
#include "slot/htab.h"
#include "slot/rttcache.h"

#define RTTC_INITIAL_BUCKETS 64

struct rttc_entry {
	struct hnode hn;
	TAILQ_ENTRY(rttc_entry) age;	/* oldest first */
	struct endpoint ep;
	uint64_t measured_us;
	uint32_t rtt_us;
	uint8_t status;
};

TAILQ_HEAD(rttc_list, rttc_entry);

struct rttcache {
	struct htab tab;
	struct rttc_list list;
	uint8_t hkey[16];
	size_t cap;
};

struct rttcache *
rttc_new(size_t capacity)
{
	struct rttcache *c;

	if (capacity == 0) {
		errno = EINVAL;
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	if (htab_init(&c->tab, capacity < RTTC_INITIAL_BUCKETS ?
	    capacity : RTTC_INITIAL_BUCKETS) == -1) {
		free(c);
		return NULL;
	}
	TAILQ_INIT(&c->list);
	addr_hash_key(c->hkey);
	c->cap = capacity;
	return c;
}

void
rttc_free(struct rttcache *c)
{
	struct rttc_entry *e;

	if (c == NULL)
		return;
	while ((e = TAILQ_FIRST(&c->list)) != NULL) {
		TAILQ_REMOVE(&c->list, e, age);
		free(e);
	}
	htab_destroy(&c->tab);
	free(c);
}

static struct rttc_entry *
rttc_lookup(const struct rttcache *c, const struct endpoint *ep, uint64_t h)
{
	struct hnode *n;
	struct rttc_entry *e;

	for (n = htab_first(&c->tab, h); n != NULL; n = htab_next(n, h)) {
		e = container_of(n, struct rttc_entry, hn);
		if (ep_eq(&e->ep, ep))
			return e;
	}
	return NULL;
}

bool
rttc_get(struct rttcache *c, const struct endpoint *ep, uint64_t now_us,
    uint64_t ttl_us, uint32_t *rtt_us, uint8_t *status)
{
	struct rttc_entry *e;
	uint64_t age;

	if ((e = rttc_lookup(c, ep, ep_hash(ep, c->hkey))) == NULL)
		return false;
	/* Expired entries stay: another caller may accept a longer TTL, and
	 * the capacity bound evicts them in time. */
	age = now_us > e->measured_us ? now_us - e->measured_us : 0;
	if (age >= ttl_us)
		return false;
	if (rtt_us != NULL)
		*rtt_us = e->rtt_us;
	if (status != NULL)
		*status = e->status;
	return true;
}

int
rttc_put(struct rttcache *c, const struct endpoint *ep, uint32_t rtt_us,
    uint8_t status, uint64_t now_us)
{
	struct rttc_entry *e;
	uint64_t h = ep_hash(ep, c->hkey);

	if ((e = rttc_lookup(c, ep, h)) != NULL)
		TAILQ_REMOVE(&c->list, e, age);
	else if (c->tab.n >= c->cap) {
		/* Full: recycle the oldest entry for the new endpoint. */
		e = TAILQ_FIRST(&c->list);
		TAILQ_REMOVE(&c->list, e, age);
		htab_remove(&c->tab, &e->hn);
		e->ep = *ep;
		(void)htab_insert(&c->tab, &e->hn, h);
	} else {
		if ((e = calloc(1, sizeof(*e))) == NULL)
			return -1;
		e->ep = *ep;
		/* A failed grow leaves the entry in place, on a longer chain. */
		(void)htab_insert(&c->tab, &e->hn, h);
	}
	e->rtt_us = rtt_us;
	e->status = status;
	e->measured_us = now_us;
	TAILQ_INSERT_TAIL(&c->list, e, age);
	return 0;
}

size_t
rttc_count(const struct rttcache *c)
{
	return c->tab.n;
}

void
rttc_walk(const struct rttcache *c, void (*fn)(void *arg, const struct endpoint *e,
    uint32_t rtt_us, uint8_t status, uint64_t measured_us), void *arg)
{
	const struct rttc_entry *e;

	TAILQ_FOREACH(e, &c->list, age)
		fn(arg, &e->ep, e->rtt_us, e->status, e->measured_us);
}
