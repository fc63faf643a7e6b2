#include <errno.h>
#include <stdlib.h>
#include <sys/queue.h>

#include "slot/htab.h"
#include "slot/selcache.h"

struct selc_node {
	struct hnode hn;
	TAILQ_ENTRY(selc_node) link;
	struct addr server;
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
node_find(const struct selcache *c, const struct addr *server)
{
	uint64_t h = addr_hash(server, c->hkey);

	for (struct hnode *n = htab_first(&c->tab, h); n; n = htab_next(n, h)) {
		struct selc_node *s = container_of(n, struct selc_node, hn);
		if (addr_eq(&s->server, server))
			return s;
	}
	return NULL;
}

int
selc_put(struct selcache *c, const struct addr *server, const struct selc_entry *e,
    uint64_t now_us, uint64_t ttl_us)
{
	struct selc_node *n = node_find(c, server);

	if (n == NULL) {
		if (c->tab.n >= c->cap)
			node_drop(c, TAILQ_FIRST(&c->all));
		if ((n = calloc(1, sizeof(*n))) == NULL)
			return -1;
		n->server = *server;
		htab_insert(&c->tab, &n->hn, addr_hash(server, c->hkey));
	} else
		TAILQ_REMOVE(&c->all, n, link);
	/* Kept in the order of puts: with one TTL, the head expires first. */
	TAILQ_INSERT_TAIL(&c->all, n, link);
	n->e = *e;
	n->e.expires_us = now_us + ttl_us;
	return 0;
}

bool
selc_get(struct selcache *c, const struct addr *server, uint64_t now_us,
    struct selc_entry *out)
{
	struct selc_node *n = node_find(c, server);

	if (n == NULL)
		return false;
	if (now_us >= n->e.expires_us) {
		node_drop(c, n);
		return false;
	}
	*out = n->e;
	return true;
}

void
selc_invalidate(struct selcache *c, const struct addr *server)
{
	struct selc_node *n = node_find(c, server);

	if (n)
		node_drop(c, n);
}

size_t
selc_invalidate_relay(struct selcache *c, const struct endpoint *relay)
{
	struct selc_node *n, *next;
	size_t k = 0;

	for (n = TAILQ_FIRST(&c->all); n; n = next) {
		next = TAILQ_NEXT(n, link);
		if (n->e.choice == SELC_RELAY && ep_eq(&n->e.relay, relay)) {
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
selc_walk(const struct selcache *c, void (*fn)(void *arg, const struct addr *server,
    const struct selc_entry *e), void *arg)
{
	const struct selc_node *n;

	TAILQ_FOREACH(n, &c->all, link)
		fn(arg, &n->server, &n->e);
}
