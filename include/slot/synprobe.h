#ifndef SLOT_SYNPROBE_H
#define SLOT_SYNPROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "slot/addr.h"

/* RTT probes a server's application never sees: a bare SYN from a raw
 * socket, timed to the SYN-ACK (open) or RST (refused). The SYN's source
 * port is held by an ordinary TCP socket bound to port 0 and never
 * connected, so no other connection takes the port, and the kernel answers
 * the SYN-ACK with a RST itself: the server drops its half-open entry and
 * its application never accepts anything, whatever is lost on the way.
 *
 * Each transmission (the first SYN and up to SYNP_MAX_TX - 1 more, after
 * 1, 3 and 7 s) has its own source port and ISN, so an answer names the
 * transmission it answers (Karn's ambiguity gone). A new port rather than
 * only a new ISN: a server still holding the half-open entry of a lost
 * SYN-ACK answers a second SYN on the same four-tuple with a bare ACK, not
 * a SYN-ACK (RFC 793 SYN-RECEIVED; Linux tcp_check_req). One ambiguity is
 * left: the server retransmits its own SYN-ACK after its RTO (1 s on
 * Linux), so a SYN-ACK that comes 1 s or more after its SYN may be that
 * retransmission. It is skipped while a later transmission is outstanding
 * (whose exact answer comes at the same time), else reported as inexact.
 *
 * IPv4 and IPv6, one raw socket each. An IPv6 raw socket neither takes
 * nor gives the IP header: the SYN goes out as a bare TCP segment whose
 * source is pinned (IPV6_PKTINFO) to the address its checksum covers, and
 * answers come in as TCP segments with their addresses beside them
 * (synp_parse6). ICMP errors are not read: an unreachable server is a
 * probe that never answers (the caller's timeout).
 *
 * The first part is pure (packets and matching, unit-tested); the second
 * owns the raw socket and its libev watchers. */

#define SYNP_MAX_TX 4
#define SYNP_SYN_LEN 32		/* TCP header with MSS, SACK-permitted, window scale */
/* A server's initial SYN-ACK retransmission timeout (RFC 6298, Linux). */
#define SYNP_SERVER_RTO_US 1000000u

/* ---- pure ---- */

/* TCP checksum of seg (header and payload, its checksum field taken as it
 * is) over the IPv4 pseudo-header; src, dst network order. Returns it as a
 * number, to be stored big-endian; over a segment that holds its right
 * checksum the result is 0. */
uint16_t synp_checksum(const uint8_t src[4], const uint8_t dst[4], const uint8_t *seg,
    size_t len);

/* The same over the IPv6 pseudo-header (RFC 8200 8.1). */
uint16_t synp_checksum6(const uint8_t src[16], const uint8_t dst[16], const uint8_t *seg,
    size_t len);

/* The Internet checksum (RFC 1071) of p[0..len): an IPv4 header's, its
 * checksum field zero. */
uint16_t synp_ip_checksum(const uint8_t *p, size_t len);

/* Writes the TCP SYN segment (no IP header) from src:sport to dst:dport with
 * sequence number isn into buf. Ports host order, addresses network order.
 * Returns its length (SYNP_SYN_LEN), or 0 if size is too small. */
size_t synp_build_syn(uint8_t *buf, size_t size, const uint8_t src[4], uint16_t sport,
    const uint8_t dst[4], uint16_t dport, uint32_t isn);
/* The same between IPv6 addresses. */
size_t synp_build_syn6(uint8_t *buf, size_t size, const uint8_t src[16], uint16_t sport,
    const uint8_t dst[16], uint16_t dport, uint32_t isn);

enum synp_kind {
	SYNP_PKT_BAD,		/* not a whole IP/TCP header, a fragment, or no TCP */
	SYNP_PKT_OTHER,		/* TCP, but neither a SYN-ACK nor a RST with ACK */
	SYNP_PKT_SYNACK,
	SYNP_PKT_RST,		/* RST with ACK: the answer to a SYN on a closed port */
};

struct synp_pkt {
	uint8_t family;		/* AF_INET (the first 4 bytes used) or AF_INET6 */
	uint8_t src[16], dst[16];	/* network order; unused bytes zero */
	uint16_t sport, dport;	/* host order */
	uint32_t seq, ack;
	uint8_t flags;
};

/* Parses an IPv4 packet as a raw socket delivers it (IP header first; the
 * rest may be cut short after the TCP header). The TCP checksum is not
 * checked: received through veth or with offloads it may be partial; the
 * 32-bit ISN match is what rejects stray and forged packets. */
enum synp_kind synp_parse(const uint8_t *p, size_t len, struct synp_pkt *out);
/* Parses a TCP segment as an IPv6 raw socket delivers it (TCP header first;
 * the IPv6 header and its extensions already taken off, fragments already
 * reassembled), from src to dst (recvmsg's address and IPV6_PKTINFO). */
enum synp_kind synp_parse6(const uint8_t *seg, size_t len, const uint8_t src[16],
    const uint8_t dst[16], struct synp_pkt *out);

/* One transmission of a probe's SYN. */
struct synp_tx {
	uint16_t sport;
	uint32_t isn;
	uint64_t sent_us;	/* monotonic */
};

enum synp_match {
	SYNP_NO_MATCH,		/* answers none of them */
	SYNP_EXACT,		/* *rtt_us is the path's RTT */
	SYNP_SKIP,		/* maybe the server's retransmission; a later
				 * transmission's answer is due */
	SYNP_INEXACT,		/* *rtt_us may hold a server RTO */
};

/* Matches an answer (kind SYNACK or RST, from the probed server and port,
 * already checked by the caller) against the ntx transmissions sent so
 * far, tx[ntx - 1] the latest, received at now_us. Sets *idx and *rtt_us
 * unless SYNP_NO_MATCH. */
enum synp_match synp_match(const struct synp_tx *tx, size_t ntx, enum synp_kind kind,
    const struct synp_pkt *pkt, uint64_t now_us, size_t *idx, uint32_t *rtt_us);

/* The delay from the first transmission to transmission n (1..SYNP_MAX_TX-1):
 * 1, 3, 7 s, as the kernel's own SYN retransmissions. */
uint64_t synp_tx_at_us(size_t n);

/* ---- the raw socket ---- */

struct synp_sock;
struct synp_probe;

enum synp_status { SYNP_OPEN, SYNP_REFUSED };

/* Called once per probe with its answer; the probe is already freed. exact
 * false: rtt_us may hold a server's SYN-ACK retransmission timeout. It may
 * start and cancel probes, not close the socket. */
typedef void synp_done_fn(void *arg, enum synp_status st, uint32_t rtt_us, bool exact);

struct synp_stats {
	unsigned long long probes;	/* started */
	unsigned long long syns_sent;	/* transmissions, first ones included */
	unsigned long long answers;	/* SYN-ACKs and RSTs that finished a probe */
	unsigned long long inexact;	/* of those, maybe holding a server's RTO */
	unsigned long long skipped;	/* SYN-ACKs set aside for a later one */
};

/* Opens the raw sockets (needs CAP_NET_RAW: open it before dropping
 * privileges; a host without IPv6 gets the IPv4 one alone) with a filter that lets only SYN-ACKs and RSTs through, sets
 * mark on it and on the probes' route lookups (0: none; needs
 * CAP_NET_ADMIN), and starts its watchers on loop. Returns NULL with the
 * reason in err. */
struct synp_sock *synp_open(struct ev_loop *loop, uint32_t mark, char *err, size_t errlen);
/* Stops and frees everything; pending probes are dropped without a call. */
void synp_close(struct synp_sock *s);
const struct synp_stats *synp_stats(const struct synp_sock *s);

/* Whether s can probe family (AF_INET, AF_INET6). */
bool synp_has_family(const struct synp_sock *s, int family);

/* Sends the first SYN to dst and retransmits it until an answer, or
 * synp_cancel. fn is called from the loop, never from here. Returns NULL
 * with errno set (EAFNOSUPPORT for a family s cannot probe; EMFILE,
 * ENOBUFS...: a local shortage; ENETUNREACH, EADDRNOTAVAIL...: the
 * path). */
struct synp_probe *synp_start(struct synp_sock *s, const struct endpoint *dst,
    synp_done_fn *fn, void *arg);
/* Forgets a probe that has not answered; fn is not called. */
void synp_cancel(struct synp_sock *s, struct synp_probe *p);

#endif
