#ifndef SLOT_CLIENT_RANK_H
#define SLOT_CLIENT_RANK_H

#include "client.h"

/* slotd's cover ranking of its relays (slot/cover.h, docs/slotd.md,
 * "Relay selection"): from slotd's own RTT to each relay (the kernel's RTT
 * of its control link, kept fresh by keepalives; else its last probe
 * reply) and the relays' RTTs to the directory's landmarks, it sets each
 * relay's rank, which strategy = cover probes in order. Relays without a
 * known RTT, or all of them without landmarks, stay unranked (SEL_NO_RANK):
 * sel_sample then draws at random. */

/* Recomputes every rank now. */
void rank_update(struct slotd *d);

/* A timer recomputes the ranks every RANK_INTERVAL_S seconds, first soon
 * after start (links come up within a round trip). */
#define RANK_INTERVAL_S 10.0
void rank_start(struct slotd *d);
/* Within RANK_SOON_S seconds, not later than the timer would. */
#define RANK_SOON_S 0.2
void rank_soon(struct slotd *d);
void rank_stop(struct slotd *d);

/* For a server that shares its address prefix ([select] server_prefix,
 * server_prefix6) with one of the relays: up to max relays (indices in
 * d->relays) to probe first, by cover_beside over the last ranking's
 * inputs and that relay (the longest match; its index into *beside).
 * Returns how many; 0 without such a relay, landmarks, or a ranking of the
 * current set. */
size_t rank_beside(struct slotd *d, const struct addr *server, size_t max, uint32_t *out,
    size_t *beside);

#endif
