/* An NFQUEUE queue over netlink: one receive buffer, one batch of verdicts
 * per sendto, the config ack matched by sequence number. */

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "slot/errbuf.h"
#include "slot/nlq.h"

#define NLQ_RX_BUF (64 * 1024)
/* A verdict message with a mark, less its packet. */
#define NLQ_VMSG_MAX 64
/* Messages read per poll while waiting for the config ack. */
#define NLQ_CFG_BUDGET 64

struct nlq {
	struct mnl_socket *nl;
	int fd;
	struct nlq_params p;
	uint32_t cfg_seq;
	int cfg_result;		/* 1 while waiting for the config ack */
	bool bound;
	int ct;			/* nlq_ct */
	nlq_packet_cb cb;
	void *user;
	struct nlq_stats st;
	char rxbuf[NLQ_RX_BUF];
	size_t vlen, vcount;
	char vbuf[];		/* p.vbuf bytes */
};

struct nlq *
nlq_open(const struct nlq_params *p, nlq_packet_cb cb, void *user, char *err, size_t errlen)
{
	struct nlq *q = calloc(1, sizeof(*q) + p->vbuf);
	int one = 1, e;

	if (q == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	q->p = *p;
	q->cb = cb;
	q->user = user;
	if ((q->nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_NONBLOCK | SOCK_CLOEXEC)) == NULL ||
	    mnl_socket_bind(q->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		errbuf_set(err, errlen, "netlink socket: %s", strerror(errno));
		goto fail;
	}
	q->fd = mnl_socket_get_fd(q->nl);
	/* FORCE passes net.core.rmem_max where we may (CAP_NET_ADMIN). */
	if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &p->rcvbuf, sizeof(p->rcvbuf)) == -1)
		(void)setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &p->rcvbuf, sizeof(p->rcvbuf));
	/* Overruns show in the kernel's counters; errors would only interrupt. */
	(void)mnl_socket_setsockopt(q->nl, NETLINK_NO_ENOBUFS, &one, sizeof(one));
	return q;
fail:
	e = errno;
	if (q->nl != NULL)
		mnl_socket_close(q->nl);
	free(q);
	errno = e;
	return NULL;
}

int
nlq_fd(const struct nlq *q)
{
	return q->fd;
}

int
nlq_ct(const struct nlq *q)
{
	return q->ct;
}

size_t
nlq_pending(const struct nlq *q)
{
	return q->vcount;
}

void
nlq_stats(const struct nlq *q, struct nlq_stats *out)
{
	*out = q->st;
}

int
nlq_flush(struct nlq *q)
{
	ssize_t r;

	if (q->vlen == 0)
		return 0;
	do
		r = mnl_socket_sendto(q->nl, q->vbuf, q->vlen);
	while (r == -1 && errno == EINTR);
	if (r == -1) {
		/* The kernel is short of memory: the packets stay queued. */
		q->st.send_errors++;
		q->st.lost += q->vcount;
	}
	q->vlen = 0;
	q->vcount = 0;
	return r == -1 ? -1 : 0;
}

static int
put_verdict(struct nlq *q, uint32_t id, int verdict, const uint32_t *mark, const uint8_t *pkt,
    size_t len)
{
	size_t need = NLQ_VMSG_MAX + (pkt ? NLMSG_ALIGN(len) : 0);
	struct nlmsghdr *nlh;
	int rc = 0;

	if (need > q->p.vbuf) {
		errno = EMSGSIZE;
		return -1;
	}
	if (q->vlen + need > q->p.vbuf)
		rc = nlq_flush(q);
	nlh = nfq_nlmsg_put(q->vbuf + q->vlen, NFQNL_MSG_VERDICT, q->p.num);
	nfq_nlmsg_verdict_put(nlh, (int)id, verdict);
	if (mark != NULL)
		nfq_nlmsg_verdict_put_mark(nlh, *mark);
	if (pkt != NULL)
		nfq_nlmsg_verdict_put_pkt(nlh, pkt, (uint32_t)len);
	q->vlen += NLMSG_ALIGN(nlh->nlmsg_len);
	q->vcount++;
	return rc;
}

int
nlq_verdict(struct nlq *q, uint32_t id, int verdict)
{
	return put_verdict(q, id, verdict, NULL, NULL, 0);
}

int
nlq_verdict_mark(struct nlq *q, uint32_t id, int verdict, uint32_t mark, const uint8_t *pkt,
    size_t len)
{
	return put_verdict(q, id, verdict, &mark, pkt, len);
}

/* NFQA_CT: the entry's attributes as ctnetlink dumps them (CTA_*). */
struct ct_nest {
	uint32_t status, id;
	bool has_status;
	size_t seen;		/* bytes of the nest walked */
};

static int
ct_attr(const struct nlattr *a, void *data)
{
	struct ct_nest *cn = data;

	cn->seen += MNL_ALIGN(a->nla_len);
	switch (mnl_attr_get_type(a)) {
	case CTA_STATUS:
		if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
			return MNL_CB_ERROR;
		cn->status = ntohl(mnl_attr_get_u32(a));
		cn->has_status = true;
		break;
	case CTA_ID:
		if (mnl_attr_validate(a, MNL_TYPE_U32) < 0)
			return MNL_CB_ERROR;
		cn->id = ntohl(mnl_attr_get_u32(a));
		break;
	}
	return MNL_CB_OK;
}

/* A nest that is cut short, holds a short CTA_STATUS or CTA_ID, or has no
 * status at all leaves p->ct unknown: a guess would decide a verdict. */
static void
parse_ct(const struct nlattr *nest, struct nlq_pkt *p)
{
	struct ct_nest cn = { 0 };

	if (mnl_attr_validate(nest, MNL_TYPE_NESTED) < 0 ||
	    mnl_attr_parse_nested(nest, ct_attr, &cn) != MNL_CB_OK ||
	    cn.seen < mnl_attr_get_payload_len(nest) || !cn.has_status)
		return;
	p->ct = NLQ_CT_ENTRY;
	p->ct_status = cn.status;
	p->ct_id = cn.id;
}

int
nlq_parse(const void *msg, size_t len, bool ct, struct nlq_pkt *out)
{
	const struct nlmsghdr *nlh = msg;
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	const struct nfqnl_msg_packet_hdr *ph;
	struct nlq_pkt p = { 0 };

	*out = p;
	if (len > INT32_MAX || !mnl_nlmsg_ok(nlh, (int)len) ||
	    nlh->nlmsg_len < mnl_nlmsg_size(sizeof(struct nfgenmsg)) ||
	    nfq_nlmsg_parse(nlh, attr) < 0 || attr[NFQA_PACKET_HDR] == NULL ||
	    mnl_attr_get_payload_len(attr[NFQA_PACKET_HDR]) < sizeof(*ph))
		return -1;
	ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	p.id = ntohl(ph->packet_id);
	p.hw_protocol = ntohs(ph->hw_protocol);
	if (attr[NFQA_MARK])
		p.mark = ntohl(mnl_attr_get_u32(attr[NFQA_MARK]));
	if (attr[NFQA_PAYLOAD] != NULL) {
		p.data = mnl_attr_get_payload(attr[NFQA_PAYLOAD]);
		p.caplen = mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]);
		/* CAP_LEN comes only with a packet longer than the copy range. */
		p.wirelen = attr[NFQA_CAP_LEN] ? ntohl(mnl_attr_get_u32(attr[NFQA_CAP_LEN])) : 0;
		if (p.wirelen < p.caplen)
			p.wirelen = p.caplen;
	}
	/* Asked for, the kernel attaches the entry whenever the packet holds
	 * one: its absence means none. */
	if (ct)
		p.ct = NLQ_CT_NONE;
	if (ct && attr[NFQA_CT] != NULL) {
		p.ct = NLQ_CT_UNKNOWN;
		parse_ct(attr[NFQA_CT], &p);
	}
	*out = p;
	return 0;
}

static void
nlq_packet(struct nlq *q, const struct nlmsghdr *nlh)
{
	struct nlq_pkt p;

	if (nlq_parse(nlh, nlh->nlmsg_len, q->ct == 1, &p) == -1) {
		q->st.malformed++;
		return;
	}
	q->st.packets++;
	q->cb(q->user, &p);
}

static void
nlq_messages(struct nlq *q, const char *buf, size_t len)
{
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)(const void *)buf;
	int left = (int)len;

	for (; mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left)) {
		if (nlh->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);

			if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(*e)))
				continue;
			if (q->cfg_result == 1 && e->msg.nlmsg_seq == q->cfg_seq)
				q->cfg_result = e->error;	/* 0 or -errno */
			else if (e->error != 0 && q->st.refused++ == 0)
				q->st.first_refusal = -e->error;
		} else if (nlh->nlmsg_type == ((NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET)) {
			nlq_packet(q, nlh);
		}
	}
}

int
nlq_read(struct nlq *q, int budget)
{
	ssize_t r;

	for (int i = 0; i < budget; i++) {
		r = mnl_socket_recvfrom(q->nl, q->rxbuf, NLQ_RX_BUF);
		if (r == -1) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			if (errno == EINTR)
				continue;
			/* Overrun: the kernel dropped messages (and with them
			 * packets); truncated: cannot happen with a copy range
			 * below the buffer. */
			if (errno == ENOBUFS) {
				q->st.overruns++;
				continue;
			}
			if (errno == ENOSPC) {
				q->st.truncated++;
				continue;
			}
			return -1;
		}
		nlq_messages(q, q->rxbuf, (size_t)r);
	}
	return 1;
}

/* Sends the config (bind, copy mode and range, length, flags: one message,
 * one ack) and waits for the ack. Returns 0 or -1 with errno. */
static int
configure(struct nlq *q, uint32_t flags, uint32_t mask)
{
	/* Zeroed: the attributes' padding goes to the kernel as it is. */
	char buf[1024] = { 0 };
	struct pollfd pfd = { .fd = q->fd, .events = POLLIN };
	struct nlmsghdr *nlh;
	int n;

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, q->p.num);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, (int)q->p.copy_range);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, q->p.maxlen);
	mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(flags));
	mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(mask));
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
		if (nlq_read(q, NLQ_CFG_BUDGET) == -1)
			return -1;
	}
	(void)nlq_flush(q);
	if (q->cfg_result != 0) {
		errno = -q->cfg_result;
		return -1;
	}
	return 0;
}

int
nlq_bind(struct nlq *q, char *err, size_t errlen)
{
	uint32_t flags = q->p.flags, mask = q->p.mask;
	int rc, e;

	q->ct = (flags & mask & NFQA_CFG_F_CONNTRACK) != 0;
	rc = configure(q, flags, mask);
	/* The kernel checks the flags before it binds (nfqnl_recv_config):
	 * refused, nothing is bound, and the same message without the flag
	 * binds. */
	if (rc == -1 && q->ct == 1 && errno == EOPNOTSUPP) {
		q->ct = -1;
		rc = configure(q, flags & ~(uint32_t)NFQA_CFG_F_CONNTRACK,
		    mask & ~(uint32_t)NFQA_CFG_F_CONNTRACK);
	}
	if (rc == 0) {
		q->bound = true;
		return 0;
	}
	e = errno;
	errbuf_set(err, errlen, "binding NFQUEUE %u: %s%s", q->p.num, strerror(e),
	    e == EPERM || e == EBUSY ? " (another process has it?)" : "");
	errno = e;
	return -1;
}

void
nlq_close(struct nlq *q)
{
	char buf[256] = { 0 };
	struct nlmsghdr *nlh;

	if (q == NULL)
		return;
	(void)nlq_flush(q);
	if (q->bound) {
		nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, q->p.num);
		nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_UNBIND);
		(void)mnl_socket_sendto(q->nl, nlh, nlh->nlmsg_len);
	}
	mnl_socket_close(q->nl);
	free(q);
}
