#include <errno.h>
#include <stdlib.h>

#include "slot/htab.h"
#include "slot/ratelimit.h"
#include "slot/replay.h"
#include "admit.h"

struct admit_src {		/* control connections from one address */
	struct hnode hn;
	struct addr addr;
	size_t n;
};

struct admit {
	struct admit_conf c;
	struct htab srcs;
	uint8_t hkey[16];
	size_t nconns;
	struct ratelimit *rl[ADMIT_KINDS];
	struct replay *replay[ADMIT_KINDS];
};

struct admit *
admit_new(const struct admit_conf *c, size_t replay_cap, size_t rl_slots)
{
	struct admit *a = calloc(1, sizeof(*a));

	if (a == NULL)
		return NULL;
	a->c = *c;
	addr_hash_key(a->hkey);
	if (htab_init(&a->srcs, 64) == -1) {
		free(a);
		return NULL;
	}
	for (int k = 0; k < ADMIT_KINDS; k++) {
		a->rl[k] = rl_new(rl_slots, c->rate[k], c->burst[k]);
		a->replay[k] = replay_new(replay_cap, c->window_us);
		if (a->rl[k] == NULL || a->replay[k] == NULL) {
			admit_free(a);
			errno = ENOMEM;
			return NULL;
		}
	}
	return a;
}

void
admit_free(struct admit *a)
{
	if (a == NULL)
		return;
	for (size_t i = 0; i < a->srcs.nb; i++) {
		struct hnode *n = a->srcs.b[i];
		while (n) {
			struct hnode *next = n->next;
			free(container_of(n, struct admit_src, hn));
			n = next;
		}
	}
	htab_destroy(&a->srcs);
	for (int k = 0; k < ADMIT_KINDS; k++) {
		rl_free(a->rl[k]);
		replay_free(a->replay[k]);
	}
	free(a);
}

void
admit_set(struct admit *a, const struct admit_conf *c)
{
	a->c = *c;
	for (int k = 0; k < ADMIT_KINDS; k++) {
		rl_set(a->rl[k], c->rate[k], c->burst[k]);
		replay_set_window(a->replay[k], c->window_us);
	}
}

static struct admit_src *
src_find(const struct admit *a, const struct addr *src, uint64_t h)
{
	for (struct hnode *n = htab_first(&a->srcs, h); n; n = htab_next(n, h)) {
		struct admit_src *s = container_of(n, struct admit_src, hn);
		if (addr_eq(&s->addr, src))
			return s;
	}
	return NULL;
}

enum admit_conn
admit_conn_open(struct admit *a, const struct addr *from)
{
	struct addr src = addr_source(from);
	uint64_t h = addr_hash(&src, a->hkey);
	struct admit_src *s = src_find(a, &src, h);

	if (s && s->n >= a->c.max_per_source)
		return ADMIT_CONN_SOURCE;
	if (a->nconns >= a->c.max_conns)
		return ADMIT_CONN_GLOBAL;
	if (s == NULL) {
		/* Out of memory: refused like a full relay. */
		if ((s = calloc(1, sizeof(*s))) == NULL)
			return ADMIT_CONN_GLOBAL;
		s->addr = src;
		htab_insert(&a->srcs, &s->hn, h);
	}
	s->n++;
	a->nconns++;
	return ADMIT_CONN_OK;
}

void
admit_conn_close(struct admit *a, const struct addr *from)
{
	struct addr src = addr_source(from);
	struct admit_src *s = src_find(a, &src, addr_hash(&src, a->hkey));

	if (s == NULL)
		return;
	a->nconns--;
	if (--s->n == 0) {
		htab_remove(&a->srcs, &s->hn);
		free(s);
	}
}

size_t
admit_conns(const struct admit *a)
{
	return a->nconns;
}

size_t
admit_conns_from(const struct admit *a, const struct addr *from)
{
	struct addr src = addr_source(from);
	struct admit_src *s = src_find(a, &src, addr_hash(&src, a->hkey));

	return s ? s->n : 0;
}

enum admit_verdict
admit_message(struct admit *a, enum admit_kind k, const struct addr *from, uint64_t ts_us,
    uint64_t nonce, uint64_t mono_us, uint64_t real_us)
{
	struct addr src = addr_source(from);

	if (!rl_allow(a->rl[k], &src, mono_us)) {
		/* Over the rate, a stale or replayed copy is still what it is:
		 * an answer of RATE_LIMITED to each copy of one captured
		 * request, from spoofed sources, would make the relay a
		 * reflector. Looked up only, so that no source fills the cache
		 * faster than its rate. */
		switch (replay_peek(a->replay[k], ts_us, nonce, real_us)) {
		case REPLAY_STALE:
			return ADMIT_STALE;
		case REPLAY_DUP:
			return ADMIT_REPLAY;
		default:
			return ADMIT_RATE;
		}
	}
	switch (replay_check(a->replay[k], ts_us, nonce, real_us)) {
	case REPLAY_OK:
		return ADMIT_OK;
	case REPLAY_STALE:
		return ADMIT_STALE;
	case REPLAY_DUP:
	case REPLAY_FULL:	/* cannot be proven fresh (docs/protocol.md) */
		break;
	}
	return ADMIT_REPLAY;
}

size_t
admit_remembered(const struct admit *a, enum admit_kind k)
{
	return replay_count(a->replay[k]);
}
