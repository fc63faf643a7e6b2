#ifndef SLOT_CLIENT_SYNQ_H
#define SLOT_CLIENT_SYNQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/nlq.h"

/* The NFQUEUE side of slotd (DESIGN.md, steps 1, 2 and 6): reads the SYNs
 * SLOT_HIJACK queues, through the core's NFQUEUE reader (slot/nlq.h), and
 * sends verdicts. Only headers are copied: slotd never sees payload. */

/* The NFQUEUE copy range: a SYN's headers fit, options and all. */
#define SYNQ_COPY_RANGE 128
/* The longest packet handed back with a verdict: a whole SYN plus a token. */
#define SYNQ_PKT_MAX (SYNQ_COPY_RANGE + 16)

struct syn_info {
	struct endpoint src, dst;
	uint32_t seq;		/* the ISN: a retransmitted SYN repeats it */
	uint32_t ack;		/* SYN_SYNACK: the ISN of the SYN it answers + 1 */
};

enum syn_parse {
	SYN_OK = 0,
	SYN_NOT_TCP,		/* another protocol, or IPv6 extension headers */
	SYN_NOT_SYN,		/* a TCP segment other than a first SYN */
	SYN_SYNACK,		/* a SYN-ACK: a relay answering a released SYN */
	SYN_MALFORMED,		/* truncated or inconsistent headers */
};

/* Parses an IPv4 or IPv6 packet that should be a TCP SYN (or SYN-ACK), of wirelen bytes
 * of which the first caplen are in pkt (the queue copies headers only: a
 * SYN carrying data, as with TCP Fast Open, is longer). The headers must be
 * captured whole. Pure. */
enum syn_parse syn_parse(const uint8_t *pkt, size_t caplen, size_t wirelen,
    struct syn_info *out);
const char *syn_parse_str(enum syn_parse r);

struct synq;

/* Called for each queued packet: id for the verdict, the packet's current
 * mark, its first caplen bytes (headers at least), its length, and its
 * conntrack entry when the kernel attaches it (ct, with its IPS_* bits in
 * ct_status; see struct nlq_pkt). */
typedef void (*synq_packet_cb)(void *user, uint32_t id, uint32_t mark,
    const uint8_t *pkt, size_t caplen, size_t wirelen, enum nlq_ct ct, uint32_t ct_status);

/* Binds queue num (maxlen packets at most in the kernel). The kernel accepts
 * packets itself when the queue is full (fail-open), as it does with
 * --queue-bypass while nobody listens, and attaches each packet's conntrack
 * entry where it can (synq_ct). cb is never called before this returns:
 * packets queued while it binds are accepted unheld (bind_accepted). NULL
 * with a reason in err. */
struct synq *synq_open(uint16_t num, uint32_t maxlen, synq_packet_cb cb, void *user,
    char *err, size_t errlen);
int synq_fd(const struct synq *q);
/* True when packets come with their conntrack entry: false on a kernel
 * without CONFIG_NETFILTER_NETLINK_GLUE_CT, which refused to attach it. */
bool synq_ct(const struct synq *q);

/* Reads and dispatches what the socket holds, up to a budget. Returns 0, or
 * -1 on a socket error other than running dry (errno set). */
int synq_read(struct synq *q);

/* Sends a verdict; accept with set_mark sets the packet's mark to mark.
 * Verdicts given from the packet callback go out in one batch when
 * synq_read is done; others at once. */
void synq_verdict(struct synq *q, uint32_t id, bool accept, bool set_mark, uint32_t mark);
/* Accepts with mark, the packet replaced by pkt[0..len) (at most
 * SYNQ_PKT_MAX bytes), whose checksums must be whole (syntok_insert). */
void synq_verdict_pkt(struct synq *q, uint32_t id, uint32_t mark, const uint8_t *pkt,
    size_t len);
void synq_flush(struct synq *q);

/* Counters since open. */
struct synq_stats {
	unsigned long long packets, verdict_errors, overruns;
	unsigned long long bind_accepted;	/* queued during synq_open */
};
void synq_stats(const struct synq *q, struct synq_stats *out);

/* Unbinds and closes. Packets still held get no verdict from us: the kernel
 * drops them when the socket goes, and the applications retransmit. */
void synq_close(struct synq *q);

#endif
