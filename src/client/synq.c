#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "slot/be.h"
#include "slot/errbuf.h"
#include "synq.h"

#define SYNQ_RX_BUF (64 * 1024)
#define SYNQ_RX_BUDGET 64
#define SYNQ_VMSG_MAX (64 + SYNQ_PKT_MAX)	/* one verdict message with a mark
						 * and maybe a packet */
#define SYNQ_VBUF (16 * 1024)

struct synq {
	struct mnl_socket *nl;
	int fd;
	uint16_t num;
	uint32_t cfg_seq;
	int cfg_result;		/* 1 while waiting for the config ack */
	synq_packet_cb cb;
	void *user;
	char *rxbuf;
	char vbuf[SYNQ_VBUF];
	size_t vlen;
	bool in_read;		/* verdicts batch until the read is done */
	struct synq_stats st;
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
	if (q->vlen == 0)
		return;
	/* Netlink sends all or nothing; a failure means the kernel is short
	 * of memory, and the packets stay queued until their bypass. */
	if (mnl_socket_sendto(q->nl, q->vbuf, q->vlen) == -1)
		q->st.verdict_errors++;
	q->vlen = 0;
}

void
synq_verdict(struct synq *q, uint32_t id, bool accept, bool set_mark, uint32_t mark)
{
	struct nlmsghdr *nlh;

	if (q->vlen + SYNQ_VMSG_MAX > sizeof(q->vbuf))
		synq_flush(q);
	nlh = nfq_nlmsg_put(q->vbuf + q->vlen, NFQNL_MSG_VERDICT, q->num);
	nfq_nlmsg_verdict_put(nlh, (int)id, accept ? NF_ACCEPT : NF_DROP);
	if (accept && set_mark)
		nfq_nlmsg_verdict_put_mark(nlh, mark);
	q->vlen += NLMSG_ALIGN(nlh->nlmsg_len);
	if (!q->in_read)
		synq_flush(q);
}

void
synq_verdict_pkt(struct synq *q, uint32_t id, uint32_t mark, const uint8_t *pkt, size_t len)
{
	struct nlmsghdr *nlh;

	if (len > SYNQ_PKT_MAX) {
		synq_verdict(q, id, true, true, mark);
		return;
	}
	if (q->vlen + SYNQ_VMSG_MAX > sizeof(q->vbuf))
		synq_flush(q);
	nlh = nfq_nlmsg_put(q->vbuf + q->vlen, NFQNL_MSG_VERDICT, q->num);
	nfq_nlmsg_verdict_put(nlh, (int)id, NF_ACCEPT);
	nfq_nlmsg_verdict_put_mark(nlh, mark);
	nfq_nlmsg_verdict_put_pkt(nlh, pkt, (uint32_t)len);
	q->vlen += NLMSG_ALIGN(nlh->nlmsg_len);
	if (!q->in_read)
		synq_flush(q);
}

static void
synq_packet(struct synq *q, const struct nlmsghdr *nlh)
{
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	const struct nfqnl_msg_packet_hdr *ph;
	uint32_t mark = 0;
	size_t caplen, wirelen;

	if (nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == NULL)
		return;
	ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	q->st.packets++;
	if (attr[NFQA_MARK])
		mark = ntohl(mnl_attr_get_u32(attr[NFQA_MARK]));
	if (attr[NFQA_PAYLOAD] == NULL) {
		q->cb(q->user, ntohl(ph->packet_id), mark, NULL, 0, 0);
		return;
	}
	caplen = mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]);
	/* CAP_LEN comes only with a packet longer than the copy range. */
	wirelen = attr[NFQA_CAP_LEN] ? ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN])) : caplen;
	q->cb(q->user, ntohl(ph->packet_id), mark, mnl_attr_get_payload(attr[NFQA_PAYLOAD]),
	    caplen, wirelen < caplen ? caplen : wirelen);
}

static void
synq_messages(struct synq *q, const char *buf, size_t len)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)(const void *)buf;
	int left = (int)len;

	for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
		if (nlh->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);

			if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*e)))
				continue;
			if (q->cfg_result == 1 && e->msg.nlmsg_seq == q->cfg_seq)
				q->cfg_result = e->error;
			else if (e->error != 0)
				q->st.verdict_errors++;
		} else if (nlh->nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) {
			synq_packet(q, nlh);
		}
	}
}

int
synq_read(struct synq *q)
{
	ssize_t r;

	q->in_read = true;
	for (int i = 0; i < SYNQ_RX_BUDGET; i++) {
		r = mnl_socket_recvfrom(q->nl, q->rxbuf, SYNQ_RX_BUF);
		if (r == -1) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			if (errno == EINTR)
				continue;
			if (errno == ENOBUFS || errno == ENOSPC) {
				/* Overrun: the kernel dropped messages; the
				 * applications retransmit their SYNs. */
				q->st.overruns++;
				continue;
			}
			q->in_read = false;
			synq_flush(q);
			return -1;
		}
		synq_messages(q, q->rxbuf, (size_t)r);
	}
	q->in_read = false;
	synq_flush(q);
	return 0;
}

/* Sends one config message and waits for its ack. Returns 0, or -1 with
 * errno. */
static int
synq_config(struct synq *q, struct nlmsghdr *nlh)
{
	struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
	int n;

	nlh->nlmsg_flags |= NLM_F_ACK;
	nlh->nlmsg_seq = ++q->cfg_seq;
	q->cfg_result = 1;
	if (mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len) == -1)
		return -1;
	while (q->cfg_result == 1) {
		n = poll(&pfd, 1, 5000);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0) {
			errno = n == 0 ? ETIMEDOUT : errno;
			return -1;
		}
		if (synq_read(q) == -1)
			return -1;
	}
	if (q->cfg_result != 0) {
		errno = -q->cfg_result;
		return -1;
	}
	return 0;
}

struct synq *
synq_open(uint16_t num, uint32_t maxlen, synq_packet_cb cb, void *user, char *err,
    size_t errlen)
{
	char buf[1024] = { 0 };
	struct nlmsghdr *nlh;
	struct synq *q;
	int one = 1, rcvbuf;

	if ((q = calloc(1, sizeof(*q))) == NULL || (q->rxbuf = malloc(SYNQ_RX_BUF)) == NULL) {
		if (q)
			free(q);
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	q->num = num;
	q->cb = cb;
	q->user = user;
	q->fd = -1;
	if ((q->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_NONBLOCK | SOCK_CLOEXEC)) == NULL ||
	    mnl_socket_bind(q->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		errbuf_set(err, errlen, "netlink socket: %s", strerror(errno));
		goto fail;
	}
	q->fd = mnl_socket_get_fd(q->nl);
	/* Room for a full queue of header-only messages: the kernel then
	 * never drops for a slow reader before the queue itself is full. */
	rcvbuf = maxlen > INT_MAX / 512 ? INT_MAX / 2 : (int)(maxlen * 512);
	if (rcvbuf < 256 * 1024)
		rcvbuf = 256 * 1024;
	if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) == -1)
		(void)setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	(void)mnl_socket_setsockopt(q->nl, NETLINK_NO_ENOBUFS, &one, sizeof(one));

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, num);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, SYNQ_COPY_RANGE);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, maxlen);
	/* Fail-open: a full queue lets SYNs through direct rather than drop
	 * them. */
	mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_FAIL_OPEN));
	mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_FAIL_OPEN));
	if (synq_config(q, nlh) == -1) {
		errbuf_set(err, errlen, "binding NFQUEUE %u: %s%s", num, strerror(errno),
		    errno == EPERM || errno == EBUSY ? " (another process has it?)" : "");
		goto fail;
	}
	return q;
fail:
	if (q->nl)
		mnl_socket_close(q->nl);
	free(q->rxbuf);
	free(q);
	return NULL;
}

int
synq_fd(const struct synq *q)
{
	return q->fd;
}

void
synq_stats(const struct synq *q, struct synq_stats *out)
{
	*out = q->st;
}

void
synq_close(struct synq *q)
{
	char buf[256] = { 0 };
	struct nlmsghdr *nlh;

	if (q == NULL)
		return;
	synq_flush(q);
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, q->num);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_UNBIND);
	(void)mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len);
	mnl_socket_close(q->nl);
	free(q->rxbuf);
	free(q);
}
