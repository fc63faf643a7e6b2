/* Token buckets keyed by address, in a fixed pool.
 *
 * Every bucket in use sits in a min-heap ordered by the time it will have
 * refilled completely. A full bucket is indistinguishable from a fresh one,
 * so the heap top can be reclaimed as soon as that time has passed; when the
 * pool is full and the top is still refilling, nothing can be reclaimed and
 * a new address is refused. All memory is allocated up front. */

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "slot/addr.h"
#include "slot/htab.h"
#include "slot/ratelimit.h"

/* Absorbs rounding in the refill sums, so that exactly 1/rate seconds
 * always earns a whole token. */
#define RL_EPSILON 1e-9

/* Reclaimed per call at most, so one call never walks the whole heap. */
#define RL_RECLAIM_MAX 2

struct rl_bucket {
	struct hnode hn;
	struct addr key;
	double tokens;		/* as of last_us */
	uint64_t last_us;
	uint64_t full_us;	/* when tokens reach burst; the heap key */
	size_t hidx;		/* index in heap */
};

struct ratelimit {
	struct htab tab;
	uint8_t hkey[16];
	struct rl_bucket *pool;
	/* heap[0, n) is the heap of buckets in use; heap[n, cap) the free ones. */
	struct rl_bucket **heap;
	size_t cap, n;
	double rate, burst;
};

static void
rl_params(struct ratelimit *rl, double rate, double burst)
{
	rl->rate = rate > 0 ? rate : 0;
	rl->burst = burst >= 1 ? burst : 1;
}

struct ratelimit *
rl_new(size_t capacity, double rate, double burst)
{
	struct ratelimit *rl;
	size_t i;

	if (capacity == 0) {
		errno = EINVAL;
		return NULL;
	}
	if ((rl = calloc(1, sizeof(*rl))) == NULL)
		return NULL;
	rl->pool = calloc(capacity, sizeof(*rl->pool));
	rl->heap = calloc(capacity, sizeof(*rl->heap));
	/* One bucket per slot at most: the table never has to grow. */
	if (rl->pool == NULL || rl->heap == NULL ||
	    htab_init(&rl->tab, capacity) == -1) {
		free(rl->pool);
		free(rl->heap);
		free(rl);
		return NULL;
	}
	for (i = 0; i < capacity; i++) {
		rl->heap[i] = &rl->pool[i];
		rl->pool[i].hidx = i;
	}
	rl->cap = capacity;
	addr_hash_key(rl->hkey);
	rl_params(rl, rate, burst);
	return rl;
}

void
rl_free(struct ratelimit *rl)
{
	if (rl == NULL)
		return;
	htab_destroy(&rl->tab);
	free(rl->pool);
	free(rl->heap);
	free(rl);
}

static void
rl_heap_set(struct ratelimit *rl, size_t i, struct rl_bucket *b)
{
	rl->heap[i] = b;
	b->hidx = i;
}

static void
rl_sift_up(struct ratelimit *rl, size_t i)
{
	struct rl_bucket *b = rl->heap[i];
	size_t parent;

	while (i > 0) {
		parent = (i - 1) / 2;
		if (rl->heap[parent]->full_us <= b->full_us)
			break;
		rl_heap_set(rl, i, rl->heap[parent]);
		i = parent;
	}
	rl_heap_set(rl, i, b);
}

static void
rl_sift_down(struct ratelimit *rl, size_t i)
{
	struct rl_bucket *b = rl->heap[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= rl->n)
			break;
		if (c + 1 < rl->n && rl->heap[c + 1]->full_us < rl->heap[c]->full_us)
			c++;
		if (b->full_us <= rl->heap[c]->full_us)
			break;
		rl_heap_set(rl, i, rl->heap[c]);
		i = c;
	}
	rl_heap_set(rl, i, b);
}

/* Restores the heap after b's key changed either way. */
static void
rl_fix(struct ratelimit *rl, struct rl_bucket *b)
{
	rl_sift_up(rl, b->hidx);
	rl_sift_down(rl, b->hidx);
}

/* Drops bucket b: out of the table, out of the heap, into the free part. */
static void
rl_release(struct ratelimit *rl, struct rl_bucket *b)
{
	size_t i = b->hidx;
	struct rl_bucket *last;

	htab_remove(&rl->tab, &b->hn);
	rl->n--;
	last = rl->heap[rl->n];
	rl_heap_set(rl, rl->n, b);
	if (i != rl->n) {
		rl_heap_set(rl, i, last);
		rl_fix(rl, last);
	}
}

static uint64_t
rl_full_at(const struct ratelimit *rl, const struct rl_bucket *b)
{
	double deficit = rl->burst - b->tokens, us;

	if (deficit <= RL_EPSILON)
		return b->last_us;
	if (rl->rate <= 0)
		return UINT64_MAX;
	us = ceil(deficit * 1e6 / rl->rate);
	/* Beyond 2^63 us is never; below it the conversion is exact enough. */
	if (!(us < 9.2e18) || (uint64_t)us > UINT64_MAX - b->last_us)
		return UINT64_MAX;
	return b->last_us + (uint64_t)us;
}

static void
rl_refill(const struct ratelimit *rl, struct rl_bucket *b, uint64_t now_us)
{
	/* A clock that steps back earns nothing and moves nothing. */
	if (now_us <= b->last_us)
		return;
	b->tokens += (double)(now_us - b->last_us) * rl->rate / 1e6;
	if (b->tokens > rl->burst)
		b->tokens = rl->burst;
	b->last_us = now_us;
}

static struct rl_bucket *
rl_lookup(struct ratelimit *rl, const struct addr *key, uint64_t h)
{
	struct hnode *n;
	struct rl_bucket *b;

	for (n = htab_first(&rl->tab, h); n != NULL; n = htab_next(n, h)) {
		b = container_of(n, struct rl_bucket, hn);
		if (addr_eq(&b->key, key))
			return b;
	}
	return NULL;
}

bool
rl_allow(struct ratelimit *rl, const struct addr *key, uint64_t now_us)
{
	return rl_allow_keep(rl, key, now_us, 0);
}

bool
rl_allow_keep(struct ratelimit *rl, const struct addr *key, uint64_t now_us, double keep)
{
	struct rl_bucket *b;
	uint64_t h;
	bool ok;
	int i;

	/* Drop buckets that have refilled, a few per call: this keeps the
	 * count near the number of addresses that still carry state, and
	 * frees a slot whenever one can be freed at all. */
	for (i = 0; i < RL_RECLAIM_MAX && rl->n > 0 &&
	    rl->heap[0]->full_us <= now_us; i++)
		rl_release(rl, rl->heap[0]);

	h = addr_hash(key, rl->hkey);
	if ((b = rl_lookup(rl, key, h)) == NULL) {
		/* Still full, so the heap top is refilling: all are live. */
		if (rl->n == rl->cap)
			return false;
		b = rl->heap[rl->n];
		b->key = *key;
		b->tokens = rl->burst;
		b->last_us = now_us;
		b->full_us = now_us;
		rl_heap_set(rl, rl->n, b);
		rl->n++;
		/* Cannot fail: the table was sized for the whole pool. */
		(void)htab_insert(&rl->tab, &b->hn, h);
	} else
		rl_refill(rl, b, now_us);

	ok = b->tokens >= keep + 1 - RL_EPSILON;
	if (ok) {
		b->tokens -= 1;
		if (b->tokens < 0)
			b->tokens = 0;
	}
	b->full_us = rl_full_at(rl, b);
	rl_fix(rl, b);
	return ok;
}

void
rl_set(struct ratelimit *rl, double rate, double burst)
{
	struct rl_bucket *b;
	size_t i;

	rl_params(rl, rate, burst);
	for (i = 0; i < rl->n; i++) {
		b = rl->heap[i];
		if (b->tokens > rl->burst)
			b->tokens = rl->burst;
		b->full_us = rl_full_at(rl, b);
	}
	/* Rebuild the heap bottom up. */
	for (i = rl->n / 2; i-- > 0;)
		rl_sift_down(rl, i);
}

size_t
rl_count(const struct ratelimit *rl)
{
	return rl->n;
}
