#ifndef SLOT_NLQ_H
#define SLOT_NLQ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An NFQUEUE queue over netlink (libmnl, and libnetfilter_queue's message
 * helpers): the reading loop, the batched verdicts and the counters that
 * slotd's queue (src/client/synq.c) and the test bed's slot-wanem share.
 * Never logs: it reports through return values and counters, and the
 * caller decides what to say. Link with libnetfilter_queue and libmnl. */

struct nlq;

/* What the kernel said of a packet's conntrack entry (NFQA_CT), on a queue
 * bound with NFQA_CFG_F_CONNTRACK. */
enum nlq_ct {
	NLQ_CT_UNKNOWN = 0,	/* not asked for, refused at bind, or a nest that
				 * did not parse (never trusted) */
	NLQ_CT_NONE,		/* asked for, none attached: the packet holds no
				 * entry (untracked, or invalid for conntrack) */
	NLQ_CT_ENTRY,		/* ct_status and ct_id are the entry's */
};

/* One queued packet: id for the verdict, its current mark, its hardware
 * protocol (ETH_P_IP, ETH_P_IPV6), its first caplen bytes (data NULL and
 * both lengths 0 when none were copied), its length (at least caplen) and
 * its conntrack entry as it was when the packet was queued: the entry the
 * packet holds a reference to, even if since deleted from the table. */
struct nlq_pkt {
	uint32_t id, mark;
	uint16_t hw_protocol;
	const uint8_t *data;
	size_t caplen, wirelen;
	enum nlq_ct ct;
	uint32_t ct_status;	/* IPS_* bits (linux/netfilter/nf_conntrack_common.h) */
	uint32_t ct_id;		/* CTA_ID; 0 if the kernel gave none */
};

/* Called for each queued packet, from nlq_read and nlq_bind. */
typedef void (*nlq_packet_cb)(void *user, const struct nlq_pkt *p);

struct nlq_params {
	uint16_t num;		/* queue number */
	uint32_t maxlen;	/* packets the kernel queue holds at most */
	uint32_t copy_range;	/* bytes of each packet copied to us */
	uint32_t flags, mask;	/* NFQA_CFG_F_* set, of those in mask; a
				 * kernel without conntrack for queues (no
				 * CONFIG_NETFILTER_NETLINK_GLUE_CT) refuses
				 * NFQA_CFG_F_CONNTRACK: nlq_bind then binds
				 * without it (nlq_ct says which) */
	int rcvbuf;		/* socket receive buffer asked for, bytes */
	size_t vbuf;		/* room for the verdicts of one sendto, bytes */
};

/* A netlink socket (non-blocking, close-on-exec), with a receive buffer of
 * p->rcvbuf bytes where the kernel allows it (else its default) and
 * NETLINK_NO_ENOBUFS; nlq_bind then binds the queue. NULL with a reason in
 * err (and errno). */
struct nlq *nlq_open(const struct nlq_params *p, nlq_packet_cb cb, void *user, char *err,
    size_t errlen);

/* Binds queue p->num with p's copy range, length and flags, and waits up
 * to 5 s for the kernel's ack; packets that arrive meanwhile go to the
 * callback, and their verdicts out before it returns. Returns 0, or -1 with
 * a reason in err (and errno: EPERM or EBUSY when another socket has it). */
int nlq_bind(struct nlq *q, char *err, size_t errlen);

int nlq_fd(const struct nlq *q);

/* After nlq_bind: 1 when packets come with their conntrack entry (asked
 * for and granted), 0 when not asked for, -1 when the kernel refused. */
int nlq_ct(const struct nlq *q);

/* Parses one NFQNL_MSG_PACKET message of len bytes into *out (pointing
 * into msg); ct says whether the queue was bound with
 * NFQA_CFG_F_CONNTRACK. Returns 0, or -1 for a message without a packet
 * header. What nlq_read does with each message; for the tests. */
int nlq_parse(const void *msg, size_t len, bool ct, struct nlq_pkt *out);

/* Reads and dispatches up to budget messages. Returns 0 once the socket
 * ran dry, 1 when the budget ran out first (more may wait), or -1 on a
 * socket error other than an overrun or a truncated message (errno set). */
int nlq_read(struct nlq *q, int budget);

/* Gathers a verdict (NF_ACCEPT or NF_DROP); nlq_verdict_mark also sets
 * the packet's mark, and replaces the packet by pkt[0..len) if pkt is not
 * NULL (checksums whole). Gathered verdicts go out in one sendto with
 * nlq_flush, or first when no more fit. Returns 0, or -1 with errno when
 * sending those first failed (nlq_flush), or EMSGSIZE and nothing gathered
 * for a pkt longer than the batch. */
int nlq_verdict(struct nlq *q, uint32_t id, int verdict);
int nlq_verdict_mark(struct nlq *q, uint32_t id, int verdict, uint32_t mark,
    const uint8_t *pkt, size_t len);

/* Sends the gathered verdicts (nlq_pending of them) in one sendto. Returns
 * 0, or -1 with errno: netlink sends all or nothing, and they are lost
 * (counted), the packets left queued. */
int nlq_flush(struct nlq *q);
size_t nlq_pending(const struct nlq *q);

/* Counters since open. */
struct nlq_stats {
	unsigned long long packets;	/* packet messages read */
	unsigned long long malformed;	/* packet messages without a header */
	unsigned long long refused;	/* verdicts the kernel answered with an error */
	int first_refusal;		/* the first one's errno */
	unsigned long long send_errors;	/* nlq_flush's sendtos that failed */
	unsigned long long lost;	/* the verdicts they held */
	unsigned long long overruns;	/* ENOBUFS: the kernel dropped messages */
	unsigned long long truncated;	/* ENOSPC: a message cut short */
};
void nlq_stats(const struct nlq *q, struct nlq_stats *out);

/* Sends what is gathered, unbinds the queue and closes. Packets still held
 * get no verdict from us: the kernel drops them when the socket goes. */
void nlq_close(struct nlq *q);

#endif
