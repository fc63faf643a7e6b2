#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>

#include "slot/be.h"
#include "slot/errbuf.h"
#include "slot/log.h"
#include "slot/nlq.h"
#include "synq.h"

#define SYNQ_RX_BUDGET 64
#define SYNQ_VBUF (16 * 1024)

struct synq {
	struct nlq *nq;
	synq_packet_cb cb;
	void *user;
	bool in_read;		/* verdicts batch until the read is done */
	bool binding;		/* in synq_open: the caller is not ready */
	unsigned long long bind_accepted;	/* packets let through meanwhile */
};

enum syn_parse
syn_parse(const uint8_t *pkt, size_t len, size_t wirelen, struct syn_info *out)
{
	const uint8_t *tcp;
	size_t ihl, tlen;

	memset(out, 0, sizeof(*out));
	if (wirelen < len)
		return SYN_MALFORMED;
	if (len < 1)
		return SYN_MALFORMED;
	switch (pkt[0] >> 4) {
	case 4:
		if (len < 20)
			return SYN_MALFORMED;
		ihl = (size_t)(pkt[0] & 0x0f) * 4;
		tlen = get16(pkt + 2);
		if (ihl < 20 || ihl > len || tlen < ihl || tlen > wirelen)
			return SYN_MALFORMED;
		if (pkt[9] != IPPROTO_TCP)
			return SYN_NOT_TCP;
		/* A fragment carries no whole TCP header to steer by. */
		if ((get16(pkt + 6) & 0x3fff) != 0)
			return SYN_NOT_TCP;
		out->src.addr.family = out->dst.addr.family = AF_INET;
		memcpy(out->src.addr.bytes, pkt + 12, 4);
		memcpy(out->dst.addr.bytes, pkt + 16, 4);
		break;
	case 6:
		if (len < 40)
			return SYN_MALFORMED;
		ihl = 40;
		tlen = 40 + (size_t)get16(pkt + 4);
		if (tlen > wirelen)
			return SYN_MALFORMED;
		if (pkt[6] != IPPROTO_TCP)
			return SYN_NOT_TCP;
		out->src.addr.family = out->dst.addr.family = AF_INET6;
		memcpy(out->src.addr.bytes, pkt + 8, 16);
		memcpy(out->dst.addr.bytes, pkt + 24, 16);
		break;
	default:
		return SYN_MALFORMED;
	}
	tcp = pkt + ihl;
	/* Only the fixed TCP header must be captured; its options may be cut. */
	if (tlen - ihl < 20 || ihl + 20 > len || (size_t)(tcp[12] >> 4) * 4 < 20 ||
	    (size_t)(tcp[12] >> 4) * 4 > tlen - ihl)
		return SYN_MALFORMED;
	/* SYN without ACK, RST or FIN: the first segment of a connection;
	 * SYN and ACK alone: its answer. */
	if ((tcp[13] & 0x17) != 0x02 && (tcp[13] & 0x17) != 0x12)
		return SYN_NOT_SYN;
	out->src.port = get16(tcp);
	out->dst.port = get16(tcp + 2);
	if (out->src.port == 0 || out->dst.port == 0)
		return SYN_MALFORMED;
	out->seq = get32(tcp + 4);
	if ((tcp[13] & 0x17) == 0x12) {
		out->ack = get32(tcp + 8);
		return SYN_SYNACK;
	}
	return SYN_OK;
}

const char *
syn_parse_str(enum syn_parse r)
{
	switch (r) {
	case SYN_OK: return "ok";
	case SYN_NOT_TCP: return "not TCP";
	case SYN_NOT_SYN: return "not a SYN";
	case SYN_SYNACK: return "a SYN-ACK";
	case SYN_MALFORMED: return "malformed";
	}
	return "?";
}

void
synq_flush(struct synq *q)
{
	/* A failure means the kernel is short of memory: the packets stay
	 * queued until their bypass (counted in verdict_errors). */
	(void)nlq_flush(q->nq);
}

void
synq_verdict(struct synq *q, uint32_t id, bool accept, bool set_mark, uint32_t mark)
{
	if (accept && set_mark)
		(void)nlq_verdict_mark(q->nq, id, NF_ACCEPT, mark, NULL, 0);
	else
		(void)nlq_verdict(q->nq, id, accept ? NF_ACCEPT : NF_DROP);
	if (!q->in_read)
		synq_flush(q);
}

void
synq_verdict_pkt(struct synq *q, uint32_t id, uint32_t mark, const uint8_t *pkt, size_t len)
{
	if (len > SYNQ_PKT_MAX) {
		synq_verdict(q, id, true, true, mark);
		return;
	}
	(void)nlq_verdict_mark(q->nq, id, NF_ACCEPT, mark, pkt, len);
	if (!q->in_read)
		synq_flush(q);
}

static void
synq_packet(void *user, const struct nlq_pkt *p)
{
	struct synq *q = user;

	/* The queue is live from the bind on, and the bind reads until the
	 * kernel's ack: a SYN queued by rules left from a previous run, or by
	 * a sysadmin's, may come before the caller can hold it. It goes
	 * direct, as the rule's queue-bypass sent it before the bind. */
	if (q->binding) {
		(void)nlq_verdict(q->nq, p->id, NF_ACCEPT);
		q->bind_accepted++;
		return;
	}
	q->cb(q->user, p->id, p->mark, p->data, p->caplen, p->wirelen, p->ct, p->ct_status);
}

int
synq_read(struct synq *q)
{
	int rc, e;

	q->in_read = true;
	rc = nlq_read(q->nq, SYNQ_RX_BUDGET);
	e = errno;
	q->in_read = false;
	synq_flush(q);
	errno = e;
	return rc == -1 ? -1 : 0;
}

struct synq *
synq_open(uint16_t num, uint32_t maxlen, synq_packet_cb cb, void *user, char *err,
    size_t errlen)
{
	struct nlq_params p = {
		.num = num,
		.maxlen = maxlen,
		.copy_range = SYNQ_COPY_RANGE,
		/* Fail-open: a full queue lets SYNs through direct rather
		 * than drop them. Conntrack: whether a relay's SYN-ACK read
		 * after its pipe failed still holds the DNAT entry
		 * (hold_synack). */
		.flags = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_CONNTRACK,
		.mask = NFQA_CFG_F_FAIL_OPEN | NFQA_CFG_F_CONNTRACK,
		.vbuf = SYNQ_VBUF,
	};
	struct synq *q;
	int rc;

	/* Room for a full queue of header-only messages: the kernel then
	 * never drops for a slow reader before the queue itself is full. */
	p.rcvbuf = maxlen > INT_MAX / 512 ? INT_MAX / 2 : (int)(maxlen * 512);
	if (p.rcvbuf < 256 * 1024)
		p.rcvbuf = 256 * 1024;
	if ((q = calloc(1, sizeof(*q))) == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	q->cb = cb;
	q->user = user;
	if ((q->nq = nlq_open(&p, synq_packet, q, err, errlen)) == NULL)
		goto fail;
	q->in_read = q->binding = true;
	rc = nlq_bind(q->nq, err, errlen);
	q->in_read = q->binding = false;
	if (rc == -1)
		goto fail;
	synq_flush(q);
	if (q->bind_accepted > 0)
		log_info("NFQUEUE %u: %llu packets queued while binding went through unheld",
		    num, q->bind_accepted);
	return q;
fail:
	nlq_close(q->nq);
	free(q);
	return NULL;
}

int
synq_fd(const struct synq *q)
{
	return nlq_fd(q->nq);
}

bool
synq_ct(const struct synq *q)
{
	return nlq_ct(q->nq) == 1;
}

void
synq_stats(const struct synq *q, struct synq_stats *out)
{
	struct nlq_stats s;

	nlq_stats(q->nq, &s);
	out->packets = s.packets;
	out->bind_accepted = q->bind_accepted;
	out->verdict_errors = s.refused + s.send_errors;
	out->overruns = s.overruns + s.truncated;
}

void
synq_close(struct synq *q)
{
	if (q == NULL)
		return;
	nlq_close(q->nq);
	free(q);
}
