/*
 * Replay protection: a set of (timestamp, nonce) pairs with a fixed number
 * of slots.
 *
 * - Lookup: open addressing with linear probing over a table at most half
 *   full, deletion by backward shift (no tombstones to accumulate).
 * - Expiry: a pair may be forgotten once its timestamp has left the window,
 *   since a copy of it would then be refused as stale anyway. Timestamps
 *   come from many senders' clocks and arrive out of order, so the entries
 *   are kept in a min-heap on timestamp; each check pops the expired ones.
 *   That is O(log n) per entry, once.
 * - The floor: the largest timestamp ever forgotten. A timestamp at or below
 *   it is refused as stale even if the window says otherwise, which can only
 *   happen after the window grew or the receiver's clock stepped back; both
 *   would otherwise reopen the door to pairs already forgotten. So a pair
 *   accepted once is never accepted again.
 *
 * Checks must come after the MAC is verified: only key holders can choose
 * nonces, so a fixed hash function is enough and the table cannot be filled
 * by strangers.
 */

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "slot/replay.h"

/* Keeps the hash table's slot numbers within uint32_t. */
#define REPLAY_MAX_CAPACITY ((size_t)1 << 30)

struct replay_ent {
	uint64_t ts;
	uint64_t nonce;
};

struct replay {
	uint64_t window;
	size_t cap;
	size_t n;			/* live entries, in the heap */
	struct replay_ent *ent;		/* cap entries */
	uint32_t *heap;			/* entry indices, smallest ts first */
	uint32_t *freel;		/* unused entry indices, cap - n of them */
	uint32_t *tab;			/* entry index + 1, or 0 if empty */
	size_t mask;			/* table size - 1 */
	uint64_t floor;
	bool has_floor;
};

static uint64_t
replay_hash(uint64_t ts, uint64_t nonce)
{
	/* splitmix64's finaliser over both halves of the key. */
	uint64_t x = nonce ^ (ts * 0x9e3779b97f4a7c15ULL);

	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

struct replay *
replay_new(size_t capacity, uint64_t window_us)
{
	struct replay *r;
	size_t i, tsize = 8;

	if (capacity == 0 || capacity > REPLAY_MAX_CAPACITY) {
		errno = EINVAL;
		return NULL;
	}
	while (tsize < 2 * capacity)
		tsize <<= 1;
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return NULL;
	r->window = window_us;
	r->cap = capacity;
	r->mask = tsize - 1;
	r->ent = calloc(capacity, sizeof(*r->ent));
	r->heap = calloc(capacity, sizeof(*r->heap));
	r->freel = calloc(capacity, sizeof(*r->freel));
	r->tab = calloc(tsize, sizeof(*r->tab));
	if (r->ent == NULL || r->heap == NULL || r->freel == NULL ||
	    r->tab == NULL) {
		replay_free(r);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < capacity; i++)
		r->freel[i] = (uint32_t)(capacity - 1 - i);
	return r;
}

void
replay_free(struct replay *r)
{
	if (r == NULL)
		return;
	free(r->ent);
	free(r->heap);
	free(r->freel);
	free(r->tab);
	free(r);
}

void
replay_set_window(struct replay *r, uint64_t window_us)
{
	/* Growing is safe thanks to the floor; shrinking frees slots at the
	 * next check. */
	r->window = window_us;
}

size_t
replay_count(const struct replay *r)
{
	return r->n;
}

const char *
replay_verdict_str(enum replay_verdict v)
{
	switch (v) {
	case REPLAY_OK:
		return "ok";
	case REPLAY_STALE:
		return "stale";
	case REPLAY_DUP:
		return "replayed";
	case REPLAY_FULL:
		return "replay cache full";
	}
	return "unknown";
}

/* True if ts lies before now - window: stale, and forgettable. */
static bool
replay_too_old(const struct replay *r, uint64_t ts, uint64_t now)
{
	return now > r->window && ts < now - r->window;
}

static bool
replay_too_new(const struct replay *r, uint64_t ts, uint64_t now)
{
	return now <= UINT64_MAX - r->window && ts > now + r->window;
}

/* Slot of the pair in the table, or of the empty slot ending its chain. */
static size_t
replay_slot(const struct replay *r, uint64_t ts, uint64_t nonce)
{
	size_t i = (size_t)replay_hash(ts, nonce) & r->mask;
	const struct replay_ent *e;

	while (r->tab[i] != 0) {
		e = &r->ent[r->tab[i] - 1];
		if (e->ts == ts && e->nonce == nonce)
			break;
		i = (i + 1) & r->mask;
	}
	return i;
}

static void
replay_tab_remove(struct replay *r, size_t i)
{
	size_t j = i, home;
	const struct replay_ent *e;

	/* Backward shift: move later members of the probe run into the hole
	 * unless their home slot lies cyclically in (hole, j]. */
	for (;;) {
		j = (j + 1) & r->mask;
		if (r->tab[j] == 0)
			break;
		e = &r->ent[r->tab[j] - 1];
		home = (size_t)replay_hash(e->ts, e->nonce) & r->mask;
		if (((j - home) & r->mask) >= ((j - i) & r->mask)) {
			r->tab[i] = r->tab[j];
			i = j;
		}
	}
	r->tab[i] = 0;
}

static bool
replay_heap_less(const struct replay *r, size_t a, size_t b)
{
	return r->ent[r->heap[a]].ts < r->ent[r->heap[b]].ts;
}

static void
replay_heap_swap(struct replay *r, size_t a, size_t b)
{
	uint32_t t = r->heap[a];

	r->heap[a] = r->heap[b];
	r->heap[b] = t;
}

static void
replay_heap_push(struct replay *r, uint32_t idx)
{
	size_t i = r->n++, parent;

	r->heap[i] = idx;
	while (i > 0) {
		parent = (i - 1) / 2;
		if (!replay_heap_less(r, i, parent))
			break;
		replay_heap_swap(r, i, parent);
		i = parent;
	}
}

static uint32_t
replay_heap_pop(struct replay *r)
{
	uint32_t top = r->heap[0];
	size_t i = 0, c;

	r->heap[0] = r->heap[--r->n];
	for (;;) {
		c = 2 * i + 1;
		if (c >= r->n)
			break;
		if (c + 1 < r->n && replay_heap_less(r, c + 1, c))
			c++;
		if (!replay_heap_less(r, c, i))
			break;
		replay_heap_swap(r, i, c);
		i = c;
	}
	return top;
}

static void
replay_purge(struct replay *r, uint64_t now)
{
	const struct replay_ent *e;
	uint32_t idx;

	while (r->n > 0) {
		e = &r->ent[r->heap[0]];
		if (!replay_too_old(r, e->ts, now))
			break;
		if (!r->has_floor || e->ts > r->floor)
			r->floor = e->ts;
		r->has_floor = true;
		replay_tab_remove(r, replay_slot(r, e->ts, e->nonce));
		idx = replay_heap_pop(r);
		r->freel[r->cap - r->n - 1] = idx;
	}
}

enum replay_verdict
replay_peek(const struct replay *r, uint64_t ts_us, uint64_t nonce, uint64_t now_us)
{
	if (replay_too_old(r, ts_us, now_us) || replay_too_new(r, ts_us, now_us) ||
	    (r->has_floor && ts_us <= r->floor))
		return REPLAY_STALE;
	/* An entry not yet purged is one whose message is stale by now, which
	 * the window check above already said. */
	return r->tab[replay_slot(r, ts_us, nonce)] != 0 ? REPLAY_DUP : REPLAY_OK;
}

enum replay_verdict
replay_check(struct replay *r, uint64_t ts_us, uint64_t nonce, uint64_t now_us)
{
	size_t slot;
	uint32_t idx;

	if (replay_too_old(r, ts_us, now_us) || replay_too_new(r, ts_us, now_us))
		return REPLAY_STALE;
	if (r->has_floor && ts_us <= r->floor)
		return REPLAY_STALE;
	replay_purge(r, now_us);
	slot = replay_slot(r, ts_us, nonce);
	if (r->tab[slot] != 0)
		return REPLAY_DUP;
	if (r->n == r->cap)
		return REPLAY_FULL;
	idx = r->freel[r->cap - r->n - 1];
	r->ent[idx].ts = ts_us;
	r->ent[idx].nonce = nonce;
	r->tab[slot] = idx + 1;
	replay_heap_push(r, idx);
	return REPLAY_OK;
}
