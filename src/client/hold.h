#ifndef SLOT_CLIENT_HOLD_H
#define SLOT_CLIENT_HOLD_H

#include "client.h"
#include "slot/nlq.h"

/* Held SYNs (DESIGN.md, steps 2 to 6): the connection table keyed by the
 * client endpoint, the direct and relay probes, the decision, the pipe
 * request, the verdict. Decided entries linger a while so that a
 * retransmission of the same SYN (same ISN) gets the same verdict. */

/* Tables and probe sockets. Returns 0, or -1 with a reason in err. */
int hold_init(struct slotd *d, char *err, size_t errlen);
/* Releases every held SYN direct and frees everything. */
void hold_fini(struct slotd *d);

/* The NFQUEUE callback (user is the slotd). */
void hold_packet(void *user, uint32_t id, uint32_t mark, const uint8_t *pkt, size_t caplen,
    size_t wirelen, enum nlq_ct ct, uint32_t ct_status);

/* A relay's SYN-ACK that answers the SYN slotd sent with PIPE_ESTABLISH,
 * read after that pipe failed and its conntrack entry was deleted. */
enum synack_fate {
	SYNACK_DROP_CT,		/* it holds the DNAT entry (queued before the
				 * deletion): passed, the kernel would de-NAT it
				 * and complete a handshake with the relay */
	SYNACK_PASS_CT,		/* it holds no entry, or one without NAT: the
				 * client's kernel answers it with a reset */
	SYNACK_DROP_RULE,	/* the queue attaches no entry (no
				 * CONFIG_NETFILTER_NETLINK_GLUE_CT), but the
				 * rules (SLOT_SYNACK) queue only the SYN-ACKs
				 * whose entry has DNAT: so does this one's */
};
/* The decision, from what the queue said of the packet's entry. Pure. */
enum synack_fate synack_failed_fate(enum nlq_ct ct, uint32_t ct_status);

/* Relay r leaves the set: held connections stop waiting for it. */
void hold_relay_gone(struct slotd *d, struct crelay *r);

/* A connection as the control socket shows it ("pipes"). */
struct hold_view {
	struct endpoint client, server;
	const char *state;		/* probing, establishing, relayed */
	const struct endpoint *relay;	/* the relay's control endpoint; NULL: none
					 * (yet, or it left the set) */
	uint64_t age_us;		/* since the SYN */
};

/* How the connection client -> server went, for the program that made it
 * (the lib socket's "decision"). */
struct hold_answer {
	const char *state;		/* "pending", "relayed", "direct" */
	bool has_relay;
	struct endpoint relay;		/* its control endpoint */
	uint32_t path_rtt_us, direct_rtt_us;	/* 0: not known */
	bool cached;
	const char *why;
};

/* False: slotd knows no such connection (any more). */
bool hold_answer(struct slotd *d, const struct endpoint *client, const struct endpoint *server,
    struct hold_answer *out);

/* Calls fn for each held connection, then each relayed one that lingers
 * (oldest first); decisions to go direct are left out. */
void hold_view(struct slotd *d, void (*fn)(void *arg, const struct hold_view *v), void *arg);

#endif
