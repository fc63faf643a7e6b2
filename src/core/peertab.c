/*
 * The peers a host has authenticated (slot/peertab.h): a hash table by
 * public key with a least-recently-used list through it.
 */

#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <sodium.h>

#include "slot/htab.h"
#include "slot/peertab.h"

struct pnode {
	struct hnode hn;
	TAILQ_ENTRY(pnode) lru;		/* head: most recently used */
	struct peertab_entry e;
};
TAILQ_HEAD(pnode_list, pnode);

struct peertab {
	struct htab h;
	struct pnode_list lru;
	size_t n, max, evicted;
	uint8_t hkey[crypto_shorthash_KEYBYTES];
};

static uint64_t
pk_hash(const struct peertab *t, const uint8_t pk[IDENT_PK_LEN])
{
	uint8_t out[crypto_shorthash_BYTES];
	uint64_t h = 0;

	crypto_shorthash(out, pk, IDENT_PK_LEN, t->hkey);
	memcpy(&h, out, sizeof(h));
	return h;
}

struct peertab *
peertab_new(size_t max)
{
	struct peertab *t = calloc(1, sizeof(*t));

	if (t == NULL || max == 0 || htab_init(&t->h, 64) == -1) {
		free(t);
		return NULL;
	}
	TAILQ_INIT(&t->lru);
	t->max = max;
	randombytes_buf(t->hkey, sizeof(t->hkey));
	return t;
}

static void
pnode_drop(struct peertab *t, struct pnode *p)
{
	htab_remove(&t->h, &p->hn);
	TAILQ_REMOVE(&t->lru, p, lru);
	t->n--;
	sodium_memzero(p, sizeof(*p));
	free(p);
}

void
peertab_free(struct peertab *t)
{
	struct pnode *p;

	if (t == NULL)
		return;
	while ((p = TAILQ_FIRST(&t->lru)) != NULL)
		pnode_drop(t, p);
	htab_destroy(&t->h);
	free(t);
}

static struct pnode *
find(const struct peertab *t, const uint8_t pk[IDENT_PK_LEN])
{
	uint64_t h = pk_hash(t, pk);

	for (struct hnode *n = htab_first(&t->h, h); n; n = htab_next(n, h)) {
		struct pnode *p = container_of(n, struct pnode, hn);
		if (memcmp(p->e.pk, pk, IDENT_PK_LEN) == 0)
			return p;
	}
	return NULL;
}

static void
touch(struct peertab *t, struct pnode *p)
{
	TAILQ_REMOVE(&t->lru, p, lru);
	TAILQ_INSERT_HEAD(&t->lru, p, lru);
}

int
peertab_put(struct peertab *t, const struct ident_cert *c, const struct auth_key *k)
{
	struct pnode *p = find(t, c->pk);

	if (p == NULL) {
		if ((p = calloc(1, sizeof(*p))) == NULL)
			return -1;
		memcpy(p->e.pk, c->pk, IDENT_PK_LEN);
		htab_insert(&t->h, &p->hn, pk_hash(t, c->pk));
		TAILQ_INSERT_HEAD(&t->lru, p, lru);
		t->n++;
	} else
		touch(t, p);
	p->e.key = *k;
	p->e.serial = c->serial;
	p->e.not_after = c->not_after;
	p->e.role = c->role;
	memcpy(p->e.name, c->name, sizeof(p->e.name));
	while (t->n > t->max) {
		pnode_drop(t, TAILQ_LAST(&t->lru, pnode_list));
		t->evicted++;
	}
	return 0;
}

const struct peertab_entry *
peertab_get(struct peertab *t, const uint8_t pk[IDENT_PK_LEN], uint64_t now)
{
	struct pnode *p = find(t, pk);

	if (p == NULL)
		return NULL;
	if (now >= p->e.not_after) {
		pnode_drop(t, p);
		return NULL;
	}
	touch(t, p);
	return &p->e;
}

bool
peertab_remove(struct peertab *t, const uint8_t pk[IDENT_PK_LEN])
{
	struct pnode *p = find(t, pk);

	if (p == NULL)
		return false;
	pnode_drop(t, p);
	return true;
}

size_t
peertab_revoke(struct peertab *t, const struct ident_revoked *rev)
{
	struct pnode *p, *next;
	size_t n = 0;

	for (p = TAILQ_FIRST(&t->lru); p != NULL; p = next) {
		next = TAILQ_NEXT(p, lru);
		if (ident_revoked_has(rev, p->e.serial)) {
			pnode_drop(t, p);
			n++;
		}
	}
	return n;
}

size_t
peertab_count(const struct peertab *t)
{
	return t->n;
}

size_t
peertab_evicted(const struct peertab *t)
{
	return t->evicted;
}

const struct auth_key *
peertab_key_fn(void *arg, const struct proto_hdr *h)
{
	struct peertab_lookup *q = arg;
	const struct peertab_entry *e = peertab_get(q->t, h->sender, q->now);

	return e ? &e->key : NULL;
}
