#ifndef SLOT_RELAY_PEERS_H
#define SLOT_RELAY_PEERS_H

#include <stddef.h>

#include "slot/addr.h"
#include "slot/ident.h"
#include "relay.h"

/* RTTs to the other relays of the directory, for its grouping. Each peer gets
 * an authenticated PROBE_REQUEST naming the peer itself, which the peer
 * answers at once (a ping); RTT = reply time - the hold the peer reports.
 * Every peer is probed once per measure_interval, in a random order, spread
 * over half the interval and never faster than measure_rate; new peers are
 * probed soon after they appear. After each round the minimum of the last
 * samples per peer goes to the directory (dirlink_report). */

struct peers;

/* Opens the UDP sockets (one per family, on demand). NULL on failure. */
struct peers *peers_start(struct relay *r);
/* Replaces the peer set; peers that stay keep their samples. */
void peers_set(struct peers *p, const struct endpoint *self, const struct endpoint *eps,
    size_t n);
void peers_stop(struct peers *p);

/* Identity mode: forgets every peer's key (our own identity changed), or
 * those of peers whose serial is in rev (returns how many). Such peers are
 * introduced to again before their next probe, and a revoked one refused. */
void peers_forget_keys(struct peers *p);
size_t peers_revoke(struct peers *p, const struct ident_revoked *rev);

struct ctl_out;
/* One line per peer: endpoint, RTT reported (us, "-" none yet), samples. */
void peers_format(const struct peers *p, struct ctl_out *o);

/* The peers, for the control socket: how many, and peer i's endpoint, the
 * RTT it is reported with (the minimum of its last samples) and how many
 * samples there are (0: no answer yet, *rtt_us undefined). p may be NULL
 * (no directory): none. */
size_t peers_count(const struct peers *p);
void peers_get(const struct peers *p, size_t i, struct endpoint *ep, uint32_t *rtt_us,
    unsigned *nsamples);

#endif
