#ifndef SLOT_RELAY_ADMIT_H
#define SLOT_RELAY_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* What the relay lets in before doing any work for it, with no I/O, so that
 * every rule can be unit tested:
 *
 * - control connections: at most max_per_source from one address and
 *   max_conns in all;
 * - authenticated messages, per kind (probes, control messages): first a
 *   token bucket per source address, then the replay cache of that kind.
 *   The rate comes first so that no source can fill a replay cache faster
 *   than its rate, and each kind has its own cache so that a flood of probes
 *   cannot push out the nonces of control messages (or make their cache
 *   full, which refuses everything). A message over the rate is still
 *   looked up (not recorded): a stale or replayed one is that, not RATE,
 *   which the probe server answers.
 *
 * The caller verifies the MAC before admit_message: nothing unauthenticated
 * reaches a replay cache. */

enum admit_kind {
	ADMIT_PROBE = 0,
	ADMIT_CONTROL,
	ADMIT_RELAY,		/* control messages of a peer with a relay certificate:
				 * the chains of every client of that relay */
	ADMIT_KINDS
};

enum admit_verdict {
	ADMIT_OK = 0,		/* fresh and within the rate: now recorded */
	ADMIT_RATE,		/* over its source's rate, fresh and unseen (not recorded) */
	ADMIT_STALE,		/* timestamp outside the window */
	ADMIT_REPLAY,		/* seen before, or no room to remember it */
};

enum admit_conn {
	ADMIT_CONN_OK = 0,	/* counted */
	ADMIT_CONN_SOURCE,	/* its source is at max_per_source */
	ADMIT_CONN_GLOBAL,	/* max_conns reached */
};

struct admit_conf {
	size_t max_conns, max_per_source;
	double rate[ADMIT_KINDS], burst[ADMIT_KINDS];	/* per source */
	uint64_t window_us;	/* allowed clock skew */
};

struct admit;

/* replay_cap nonces and rl_slots source buckets per kind. NULL on failure. */
struct admit *admit_new(const struct admit_conf *c, size_t replay_cap, size_t rl_slots);
void admit_free(struct admit *a);
/* New limits (a reload); counts and caches stay. */
void admit_set(struct admit *a, const struct admit_conf *c);

enum admit_conn admit_conn_open(struct admit *a, const struct addr *src);
/* Forgets one connection counted by admit_conn_open for src. */
void admit_conn_close(struct admit *a, const struct addr *src);
size_t admit_conns(const struct admit *a);
size_t admit_conns_from(const struct admit *a, const struct addr *src);

/* An authenticated message of kind k from src. mono_us is the monotonic
 * clock (rates), real_us the wall clock (timestamps). */
enum admit_verdict admit_message(struct admit *a, enum admit_kind k, const struct addr *src,
    uint64_t ts_us, uint64_t nonce, uint64_t mono_us, uint64_t real_us);

/* Nonces remembered for kind k. */
size_t admit_remembered(const struct admit *a, enum admit_kind k);

#endif
