#ifndef SLOT_WANEM_DELAYQ_H
#define SLOT_WANEM_DELAYQ_H

#include <stddef.h>
#include <stdint.h>

/*
 * The delay line of slot-wanem: packets (by NFQUEUE id) wait until their
 * release time. A pair's packets never overtake each other: a packet is due
 * at max(now + delay, due time of the pair's previous packet still held), so
 * order holds when the pair's delay shrinks, e.g. across a matrix reload.
 * Equal due times leave in push order. Pure: time comes from the caller.
 *
 * Bounded: a full queue refuses a packet (WM_DQ_FULL), and the caller drops
 * it and counts the overflow, as a router with a full queue would. Push and
 * pop are O(log n) (a binary heap); the per-pair state is a hash table of
 * the pairs with packets held, so memory is fixed at creation.
 */

struct wm_dq;

struct wm_dq_item {
	uint32_t id;		/* as pushed */
	uint64_t due_us;	/* when it was due */
};

enum {
	WM_DQ_HELD = 0,		/* queued; due at *due_us */
	WM_DQ_NOW = 1,		/* delay 0 and none of the pair held: release now */
	WM_DQ_FULL = 2,		/* refused: capacity reached */
};

/* A queue for at most capacity packets (> 0). Returns NULL on allocation
 * failure or capacity 0 (errno ENOMEM or EINVAL). */
struct wm_dq *wm_dq_new(size_t capacity);
void wm_dq_free(struct wm_dq *q);

/* Holds packet id of pair (a wm_pair_key) for delay_us from now_us. Returns
 * WM_DQ_HELD with *due_us set, WM_DQ_NOW (not queued; *due_us = now_us), or
 * WM_DQ_FULL (not queued). now_us must not go backwards between calls. */
int wm_dq_push(struct wm_dq *q, uint32_t id, uint64_t pair, uint64_t now_us,
    uint64_t delay_us, uint64_t *due_us);

/* The earliest due time held, or UINT64_MAX if empty. */
uint64_t wm_dq_next_due(const struct wm_dq *q);

/* Removes up to max packets due at or before now_us into out, earliest
 * first. Returns how many. UINT64_MAX as now_us empties the queue. */
size_t wm_dq_pop_due(struct wm_dq *q, uint64_t now_us, struct wm_dq_item *out,
    size_t max);

size_t wm_dq_len(const struct wm_dq *q);
size_t wm_dq_capacity(const struct wm_dq *q);

/* Pairs with packets held (for tests and statistics). */
size_t wm_dq_pairs(const struct wm_dq *q);

#endif
