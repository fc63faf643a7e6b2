/* The delay line of slot-wanem: a binary min-heap of packets ordered by
 * (due time, push sequence), and per pair the due time of its last packet
 * held. */

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "slot/addr.h"
#include "slot/htab.h"

#include "wanem_delayq.h"
#include "wanem_matrix.h"

struct wm_dq_pair {
	struct hnode hn;
	uint64_t pair;
	uint64_t last_due;	/* due time of the pair's newest packet held */
	uint32_t held;		/* packets of this pair in the heap */
	uint32_t next_free;	/* free list link, by index */
};

struct wm_dq_ent {
	uint64_t due_us;
	uint64_t seq;		/* breaks ties: push order */
	uint32_t id;
	uint32_t pidx;		/* index into pairs[] */
};

struct wm_dq {
	struct wm_dq_ent *heap;
	size_t n, cap;
	uint64_t seq;
	/* Every held packet holds its pair, so cap pair slots always suffice
	 * and the pair table never needs to allocate after creation. */
	struct wm_dq_pair *pairs;
	uint32_t free_head;
	struct htab tab;
	uint8_t hkey[16];
};

#define WM_DQ_NIL UINT32_MAX

struct wm_dq *
wm_dq_new(size_t capacity)
{
	struct wm_dq *q;
	size_t i;

	if (capacity == 0 || capacity >= WM_DQ_NIL) {
		errno = EINVAL;
		return NULL;
	}
	if ((q = calloc(1, sizeof(*q))) == NULL)
		return NULL;
	q->cap = capacity;
	q->heap = calloc(capacity, sizeof(*q->heap));
	q->pairs = calloc(capacity, sizeof(*q->pairs));
	/* Buckets for every slot: the load never passes 1, so no growing. */
	if (q->heap == NULL || q->pairs == NULL || htab_init(&q->tab, capacity) == -1) {
		free(q->heap);
		free(q->pairs);
		free(q);
		errno = ENOMEM;
		return NULL;
	}
	for (i = 0; i < capacity; i++)
		q->pairs[i].next_free = i + 1 < capacity ? (uint32_t)(i + 1) : WM_DQ_NIL;
	q->free_head = 0;
	addr_hash_key(q->hkey);
	return q;
}

void
wm_dq_free(struct wm_dq *q)
{
	if (q == NULL)
		return;
	htab_destroy(&q->tab);
	free(q->heap);
	free(q->pairs);
	free(q);
}

size_t
wm_dq_len(const struct wm_dq *q)
{
	return q->n;
}

size_t
wm_dq_capacity(const struct wm_dq *q)
{
	return q->cap;
}

size_t
wm_dq_pairs(const struct wm_dq *q)
{
	return q->tab.n;
}

uint64_t
wm_dq_next_due(const struct wm_dq *q)
{
	return q->n > 0 ? q->heap[0].due_us : UINT64_MAX;
}

static struct wm_dq_pair *
wm_dq_find(const struct wm_dq *q, uint64_t pair, uint64_t h)
{
	struct hnode *n;
	struct wm_dq_pair *p;

	for (n = htab_first(&q->tab, h); n != NULL; n = htab_next(n, h)) {
		p = container_of(n, struct wm_dq_pair, hn);
		if (p->pair == pair)
			return p;
	}
	return NULL;
}

static bool
wm_dq_before(const struct wm_dq_ent *a, const struct wm_dq_ent *b)
{
	return a->due_us < b->due_us || (a->due_us == b->due_us && a->seq < b->seq);
}

static void
wm_dq_sift_up(struct wm_dq *q, size_t i)
{
	struct wm_dq_ent e = q->heap[i];
	size_t parent;

	while (i > 0) {
		parent = (i - 1) / 2;
		if (!wm_dq_before(&e, &q->heap[parent]))
			break;
		q->heap[i] = q->heap[parent];
		i = parent;
	}
	q->heap[i] = e;
}

static void
wm_dq_sift_down(struct wm_dq *q, size_t i)
{
	struct wm_dq_ent e = q->heap[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= q->n)
			break;
		if (c + 1 < q->n && wm_dq_before(&q->heap[c + 1], &q->heap[c]))
			c++;
		if (!wm_dq_before(&q->heap[c], &e))
			break;
		q->heap[i] = q->heap[c];
		i = c;
	}
	q->heap[i] = e;
}

int
wm_dq_push(struct wm_dq *q, uint32_t id, uint64_t pair, uint64_t now_us,
    uint64_t delay_us, uint64_t *due_us)
{
	uint64_t h = wm_pair_hash(pair, q->hkey), due;
	struct wm_dq_pair *p;
	struct wm_dq_ent *e;
	uint32_t pidx;

	p = q->tab.n > 0 ? wm_dq_find(q, pair, h) : NULL;
	if (p == NULL && delay_us == 0) {
		*due_us = now_us;
		return WM_DQ_NOW;
	}
	if (q->n == q->cap)
		return WM_DQ_FULL;
	due = delay_us > UINT64_MAX - now_us ? UINT64_MAX : now_us + delay_us;
	if (p == NULL) {
		/* n < cap, so fewer than cap pairs are in use: a slot is free. */
		pidx = q->free_head;
		p = &q->pairs[pidx];
		q->free_head = p->next_free;
		p->pair = pair;
		p->held = 0;
		p->last_due = 0;
		(void)htab_insert(&q->tab, &p->hn, h);
	} else {
		pidx = (uint32_t)(p - q->pairs);
		if (due < p->last_due)
			due = p->last_due;
	}
	p->last_due = due;
	p->held++;
	e = &q->heap[q->n];
	e->due_us = due;
	e->seq = q->seq++;
	e->id = id;
	e->pidx = pidx;
	wm_dq_sift_up(q, q->n++);
	*due_us = due;
	return WM_DQ_HELD;
}

size_t
wm_dq_pop_due(struct wm_dq *q, uint64_t now_us, struct wm_dq_item *out, size_t max)
{
	struct wm_dq_pair *p;
	size_t k = 0;

	while (k < max && q->n > 0 && q->heap[0].due_us <= now_us) {
		out[k].id = q->heap[0].id;
		out[k].due_us = q->heap[0].due_us;
		k++;
		p = &q->pairs[q->heap[0].pidx];
		if (--p->held == 0) {
			htab_remove(&q->tab, &p->hn);
			p->next_free = q->free_head;
			q->free_head = (uint32_t)(p - q->pairs);
		}
		q->heap[0] = q->heap[--q->n];
		if (q->n > 0)
			wm_dq_sift_down(q, 0);
	}
	return k;
}
