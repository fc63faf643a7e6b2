#ifndef SLOT_RELAY_PROBE_H
#define SLOT_RELAY_PROBE_H

#include "slot/synprobe.h"
#include "relay.h"

/* The UDP probe responder: answers an authenticated PROBE_REQUEST with the
 * relay's RTT to the target (from the RTT cache, else measured: by a TCP
 * connect whose handshake's last ACK is deferred, the connection then held
 * for a pipe to that target ([probe] handover) or reset; with handover off,
 * by a bare SYN timed to the SYN-ACK or RST; either way unseen by the
 * server's application) and how long it held the request. Requests for the
 * same target while a measurement runs wait for that one measurement;
 * requesters and targets are rate limited, so relays cannot be turned into a
 * flood against a server. */

/* fd: the bound UDP socket; synp: the raw socket for SYN measurements, or
 * NULL (both owned from now on). Returns NULL on failure. */
struct probe_srv *probe_start(struct relay *r, int fd, struct synp_sock *synp);
/* Applies changed rates (after a reload). */
void probe_reconfigure(struct probe_srv *ps);
/* Stops answering: closes the socket and abandons measurements. */
void probe_stop(struct probe_srv *ps);

/* A measurement's connection to target held for a pipe ([probe] handover),
 * its handshake's last ACK now sent: the caller owns it, connected. -1:
 * none (connect as usual). */
int probe_take(struct probe_srv *ps, const struct endpoint *target);

/* How many probe_take could hand out now. */
unsigned long long probe_handovers_held(const struct probe_srv *ps);

/* The start-up check of the kernel's ACK deferral that handover rests on
 * (sock_ackcheck). */
enum probe_ack_state {
	PROBE_ACK_PENDING,	/* not begun, or to be tried again */
	PROBE_ACK_CHECKING,
	PROBE_ACK_DEFERRED,	/* as handover needs */
	PROBE_ACK_EARLY,	/* not deferred: handover off */
	PROBE_ACK_UNSURE,	/* could not tell: handover as configured */
};
enum probe_ack_state probe_ack_state(const struct probe_srv *ps);

/* The SYN measurements' counters; NULL without a raw socket. */
const struct synp_stats *probe_syn_stats(const struct probe_srv *ps);

/* One entry of the RTT cache that is still answered from ("cache"). */
struct probe_cache_view {
	struct endpoint target;
	uint32_t rtt_us;	/* meaningful for PROBE_ST_OK and PROBE_ST_REFUSED */
	uint8_t status;		/* PROBE_ST_* */
	uint64_t age_us, ttl_left_us;
};

/* Calls fn for every live entry, oldest measurement first. */
void probe_cache_view(struct probe_srv *ps,
    void (*fn)(void *arg, const struct probe_cache_view *v), void *arg);

#endif
