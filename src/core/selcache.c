#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include "slot/htab.h"
#include "slot/selcache.h"

struct selc_node {
	struct hnode hn;
	TAILQ_ENTRY(selc_node) link;
	struct endpoint key;		/* port 0: the address's entry */
	struct selc_entry e;
};

TAILQ_HEAD(selc_list, selc_node);

struct selcache {
	struct htab tab;
	struct selc_list all;
	uint8_t hkey[16];
	size_t cap;
};

struct selcache *
selc_new(size_t capacity)
{
	struct selcache *c;

	if (capacity == 0) {
		errno = EINVAL;
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	if (htab_init(&c->tab, 64) == -1) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	TAILQ_INIT(&c->all);
	addr_hash_key(c->hkey);
	c->cap = capacity;
	return c;
}

static void
node_drop(struct selcache *c, struct selc_node *n)
{
	htab_remove(&c->tab, &n->hn);
	TAILQ_REMOVE(&c->all, n, link);
	free(n);
}

void
selc_free(struct selcache *c)
{
	struct selc_node *n;

	if (c == NULL)
		return;
	while ((n = TAILQ_FIRST(&c->all)) != NULL)
		node_drop(c, n);
	htab_destroy(&c->tab);
	free(c);
}

static struct selc_node *
node_find(const struct selcache *c, const struct endpoint *key)
{
	uint64_t h = ep_hash(key, c->hkey);

	for (struct hnode *n = htab_first(&c->tab, h); n; n = htab_next(n, h)) {
		struct selc_node *s = container_of(n, struct selc_node, hn);
		if (ep_eq(&s->key, key))
			return s;
	}
	return NULL;
}

static struct endpoint
addr_key(const struct endpoint *server)
{
	struct endpoint k = *server;

	k.port = 0;
	return k;
}

/* The unexpired entry of key, or NULL (an expired one is removed). */
static struct selc_node *
node_live(struct selcache *c, const struct endpoint *key, uint64_t now_us)
{
	struct selc_node *n = node_find(c, key);

	if (n && now_us >= n->e.expires_us) {
		node_drop(c, n);
		n = NULL;
	}
	return n;
}

static void
reached_remove(struct selc_entry *e, uint16_t port)
{
	size_t i, j;

	for (i = j = 0; i < SELC_REACHED_MAX; i++)
		if (e->reached[i] != port)
			e->reached[j++] = e->reached[i];
	while (j < SELC_REACHED_MAX)
		e->reached[j++] = 0;
}

int
selc_put(struct selcache *c, const struct endpoint *key, const struct selc_entry *e,
    uint64_t now_us, uint64_t ttl_us)
{
	struct selc_node *n = node_find(c, key);

	if (n == NULL) {
		if (c->tab.n >= c->cap)
			node_drop(c, TAILQ_FIRST(&c->all));
		if ((n = calloc(1, sizeof(*n))) == NULL)
			return -1;
		n->key = *key;
		htab_insert(&c->tab, &n->hn, ep_hash(key, c->hkey));
	} else
		TAILQ_REMOVE(&c->all, n, link);
	/* Kept in the order of puts: with one TTL, the head expires first. */
	TAILQ_INSERT_TAIL(&c->all, n, link);
	n->e = *e;
	n->e.made_us = now_us;
	n->e.expires_us = now_us + ttl_us;
	memset(n->e.reached, 0, sizeof(n->e.reached));
	if (key->port != 0) {
		struct endpoint ak = addr_key(key);
		struct selc_node *a = node_find(c, &ak);
		if (a)
			reached_remove(&a->e, key->port);
	}
	return 0;
}

bool
selc_get(struct selcache *c, const struct endpoint *server, uint64_t now_us,
    struct selc_entry *out)
{
	struct endpoint ak = addr_key(server);
	struct selc_node *n = NULL;

	if (server->port != 0)
		n = node_live(c, server, now_us);
	if (n == NULL)
		n = node_live(c, &ak, now_us);
	if (n == NULL)
		return false;
	*out = n->e;
	return true;
}

bool
selc_reached(const struct selc_entry *e, uint16_t port)
{
	if (e->choice != SELC_RELAY || port == 0)
		return false;
	for (size_t i = 0; i < SELC_REACHED_MAX && e->reached[i]; i++)
		if (e->reached[i] == port)
			return true;
	return false;
}

bool
selc_mark_reached(struct selcache *c, const struct endpoint *server,
    const struct endpoint *relay, uint64_t now_us)
{
	struct endpoint ak = addr_key(server);
	struct selc_node *n = node_live(c, &ak, now_us);

	if (n == NULL || n->e.choice != SELC_RELAY || !ep_eq(&n->e.relay, relay) ||
	    server->port == 0)
		return false;
	reached_remove(&n->e, server->port);
	memmove(&n->e.reached[1], &n->e.reached[0],
	    (SELC_REACHED_MAX - 1) * sizeof(n->e.reached[0]));
	n->e.reached[0] = server->port;
	return true;
}

bool
selc_invalidate(struct selcache *c, const struct endpoint *key, const struct endpoint *relay)
{
	struct selc_node *n = node_find(c, key);

	if (n == NULL || (relay && (n->e.choice != SELC_RELAY || !ep_eq(&n->e.relay, relay))))
		return false;
	node_drop(c, n);
	return true;
}

static bool
uses(const struct selc_entry *e, const struct endpoint *relay)
{
	if (ep_eq(&e->relay, relay))
		return true;
	for (unsigned i = 0; i < e->nnext && i < SELC_NEXT_MAX; i++)
		if (ep_eq(&e->next[i], relay))
			return true;
	return false;
}

size_t
selc_invalidate_relay(struct selcache *c, const struct endpoint *relay)
{
	struct selc_node *n, *next;
	size_t k = 0;

	for (n = TAILQ_FIRST(&c->all); n; n = next) {
		next = TAILQ_NEXT(n, link);
		if (n->e.choice == SELC_RELAY && uses(&n->e, relay)) {
			node_drop(c, n);
			k++;
		}
	}
	return k;
}

size_t
selc_flush(struct selcache *c, const struct addr *server)
{
	struct selc_node *n, *next;
	size_t k = 0;

	/* A walk: ports are not indexed by address, and flushing is rare. */
	for (n = TAILQ_FIRST(&c->all); n; n = next) {
		next = TAILQ_NEXT(n, link);
		if (server == NULL || addr_eq(&n->key.addr, server)) {
			node_drop(c, n);
			k++;
		}
	}
	return k;
}

size_t
selc_count(const struct selcache *c)
{
	return c->tab.n;
}

void
selc_walk(const struct selcache *c, void (*fn)(void *arg, const struct endpoint *key,
    const struct selc_entry *e), void *arg)
{
	const struct selc_node *n;

	TAILQ_FOREACH(n, &c->all, link)
		fn(arg, &n->key, &n->e);
}
