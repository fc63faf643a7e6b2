#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <linux/filter.h>
#include <unistd.h>

#include "slot/be.h"
#include "slot/clock.h"
#include "slot/errbuf.h"
#include "slot/htab.h"
#include "slot/synprobe.h"

#define TH_SYN 0x02
#define TH_RST 0x04
#define TH_ACK 0x10

#define SYNP_READ_BATCH 64	/* packets read per wake-up */
#define SYNP_SNAPLEN 256	/* the longest IPv4 and TCP headers fit */

/* ---------------------------------------------------------------- pure */

static uint32_t
sum16(uint32_t sum, const uint8_t *p, size_t len)
{
	for (; len > 1; p += 2, len -= 2)
		sum += (uint32_t)p[0] << 8 | p[1];
	if (len)
		sum += (uint32_t)p[0] << 8;
	return sum;
}

static uint16_t
fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

uint16_t
synp_checksum(const uint8_t src[4], const uint8_t dst[4], const uint8_t *seg, size_t len)
{
	uint8_t ph[12];

	memcpy(ph, src, 4);
	memcpy(ph + 4, dst, 4);
	ph[8] = 0;
	ph[9] = IPPROTO_TCP;
	ph[10] = (uint8_t)(len >> 8);
	ph[11] = (uint8_t)len;
	return fold(sum16(sum16(0, ph, sizeof(ph)), seg, len));
}

uint16_t
synp_checksum6(const uint8_t src[16], const uint8_t dst[16], const uint8_t *seg, size_t len)
{
	uint8_t ph[40] = { 0 };

	memcpy(ph, src, 16);
	memcpy(ph + 16, dst, 16);
	put32(ph + 32, (uint32_t)len);
	ph[39] = IPPROTO_TCP;
	return fold(sum16(sum16(0, ph, sizeof(ph)), seg, len));
}

uint16_t
synp_ip_checksum(const uint8_t *p, size_t len)
{
	return fold(sum16(0, p, len));
}

/* The SYN segment with a zero checksum; the caller fills it in. */
static void
syn_segment(uint8_t *buf, uint16_t sport, uint16_t dport, uint32_t isn)
{
	/* The options a Linux connect() sends, bar timestamps: a SYN that
	 * looks like any other to middleboxes and SYN-flood defences. */
	static const uint8_t opts[12] = {
		2, 4, 0x05, 0xb4,	/* MSS 1460 */
		1, 3, 3, 7,		/* NOP, window scale 7 */
		1, 1, 4, 2,		/* NOP, NOP, SACK permitted */
	};

	memset(buf, 0, SYNP_SYN_LEN);
	put16(buf, sport);
	put16(buf + 2, dport);
	put32(buf + 4, isn);
	buf[12] = (SYNP_SYN_LEN / 4) << 4;
	buf[13] = TH_SYN;
	put16(buf + 14, 64240);
	memcpy(buf + 20, opts, sizeof(opts));
}

size_t
synp_build_syn(uint8_t *buf, size_t size, const uint8_t src[4], uint16_t sport,
    const uint8_t dst[4], uint16_t dport, uint32_t isn)
{
	if (size < SYNP_SYN_LEN)
		return 0;
	syn_segment(buf, sport, dport, isn);
	put16(buf + 16, synp_checksum(src, dst, buf, SYNP_SYN_LEN));
	return SYNP_SYN_LEN;
}

size_t
synp_build_syn6(uint8_t *buf, size_t size, const uint8_t src[16], uint16_t sport,
    const uint8_t dst[16], uint16_t dport, uint32_t isn)
{
	if (size < SYNP_SYN_LEN)
		return 0;
	syn_segment(buf, sport, dport, isn);
	put16(buf + 16, synp_checksum6(src, dst, buf, SYNP_SYN_LEN));
	return SYNP_SYN_LEN;
}

/* The TCP header's part of a parse; th holds at least 20 bytes. */
static enum synp_kind
parse_tcp(const uint8_t *th, struct synp_pkt *out)
{
	if ((th[12] >> 4) < 5)
		return SYNP_PKT_BAD;
	out->sport = get16(th);
	out->dport = get16(th + 2);
	out->seq = get32(th + 4);
	out->ack = get32(th + 8);
	out->flags = th[13];
	if ((out->flags & (TH_SYN | TH_ACK | TH_RST)) == (TH_SYN | TH_ACK))
		return SYNP_PKT_SYNACK;
	if ((out->flags & (TH_RST | TH_ACK | TH_SYN)) == (TH_RST | TH_ACK))
		return SYNP_PKT_RST;
	return SYNP_PKT_OTHER;
}

enum synp_kind
synp_parse(const uint8_t *p, size_t len, struct synp_pkt *out)
{
	size_t ihl;
	const uint8_t *th;

	if (len < 20 || (p[0] >> 4) != 4)
		return SYNP_PKT_BAD;
	ihl = (size_t)(p[0] & 0x0f) * 4;
	/* A fragment (MF set or an offset) has no whole TCP header to trust. */
	if (ihl < 20 || len < ihl + 20 || p[9] != IPPROTO_TCP || (get16(p + 6) & 0x3fff) ||
	    get16(p + 2) < ihl + 20)
		return SYNP_PKT_BAD;
	th = p + ihl;
	memset(out, 0, sizeof(*out));
	out->family = AF_INET;
	memcpy(out->src, p + 12, 4);
	memcpy(out->dst, p + 16, 4);
	return parse_tcp(th, out);
}

enum synp_kind
synp_parse6(const uint8_t *seg, size_t len, const uint8_t src[16], const uint8_t dst[16],
    struct synp_pkt *out)
{
	if (len < 20)
		return SYNP_PKT_BAD;
	memset(out, 0, sizeof(*out));
	out->family = AF_INET6;
	memcpy(out->src, src, 16);
	memcpy(out->dst, dst, 16);
	return parse_tcp(seg, out);
}

enum synp_match
synp_match(const struct synp_tx *tx, size_t ntx, enum synp_kind kind,
    const struct synp_pkt *pkt, uint64_t now_us, size_t *idx, uint32_t *rtt_us)
{
	size_t i;
	uint64_t rtt;

	if (kind != SYNP_PKT_SYNACK && kind != SYNP_PKT_RST)
		return SYNP_NO_MATCH;
	for (i = 0; i < ntx; i++)
		if (tx[i].sport != 0 && tx[i].sport == pkt->dport && pkt->ack == tx[i].isn + 1)
			break;
	if (i == ntx)
		return SYNP_NO_MATCH;
	rtt = now_us > tx[i].sent_us ? now_us - tx[i].sent_us : 1;
	*idx = i;
	*rtt_us = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
	/* Servers retransmit SYN-ACKs, never RSTs. */
	if (kind == SYNP_PKT_RST || rtt < SYNP_SERVER_RTO_US)
		return SYNP_EXACT;
	return i + 1 < ntx ? SYNP_SKIP : SYNP_INEXACT;
}

uint64_t
synp_tx_at_us(size_t n)
{
	return ((1ull << n) - 1) * 1000000;
}

/* ---------------------------------------------------------------- sockets */

/* One transmission's source port, held by a bound TCP socket. */
struct synp_port {
	struct hnode hn;	/* in s->ports by port */
	struct synp_probe *p;
	int fd;
};

struct synp_probe {
	struct synp_sock *s;
	TAILQ_ENTRY(synp_probe) link;
	struct endpoint dst;
	uint8_t src[16];	/* of dst's family; unused bytes zero */
	struct synp_tx tx[SYNP_MAX_TX];
	struct synp_port port[SYNP_MAX_TX];
	size_t ntx;		/* transmissions tried, failed ones included */
	synp_done_fn *fn;
	void *arg;
};

TAILQ_HEAD(synp_list, synp_probe);

struct synp_sock {
	struct ev_loop *loop;
	int fd, fd6;		/* IPv4, IPv6 raw sockets; fd6 -1 without IPv6 */
	uint32_t mark;
	ev_io io, io6;
	ev_timer timer;
	struct htab ports;
	struct synp_list probes;
	struct synp_stats st;
};

static uint64_t
port_hash(uint16_t port)
{
	return (uint64_t)port * 0x9e3779b97f4a7c15ull;
}

static size_t
family_len(int family)
{
	return family == AF_INET6 ? 16 : 4;
}

/* The socket address of a (family, bytes, port). */
static socklen_t
sa_make(int family, const uint8_t *a, uint16_t port, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (family == AF_INET6) {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(port);
		memcpy(&sin6->sin6_addr, a, 16);
		return sizeof(*sin6);
	}
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	memcpy(&sin->sin_addr, a, 4);
	return sizeof(*sin);
}

/* The source address the kernel routes dst from (with the mark): the
 * checksum covers it, and the raw socket does not say. */
static int
route_source(const struct synp_sock *s, const struct endpoint *dst, uint8_t src[16])
{
	struct sockaddr_storage ss;
	socklen_t len = sa_make(dst->addr.family, dst->addr.bytes, dst->port, &ss);
	int fd, e;

	if ((fd = socket(dst->addr.family, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if ((s->mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &s->mark, sizeof(s->mark)) == -1) ||
	    connect(fd, (struct sockaddr *)&ss, len) == -1 ||
	    getsockname(fd, (struct sockaddr *)&ss, &(socklen_t){ sizeof(ss) }) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	memset(src, 0, 16);
	if (dst->addr.family == AF_INET6)
		memcpy(src, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	else
		memcpy(src, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	return 0;
}

/* Binds a TCP socket to src, port 0: the kernel picks a port that no
 * connect() will take while the socket lives. Returns fd or -1. */
static int
port_reserve(int family, const uint8_t *src, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t len = sa_make(family, src, 0, &ss);
	int fd, e;

	if ((fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (bind(fd, (struct sockaddr *)&ss, len) == -1 ||
	    getsockname(fd, (struct sockaddr *)&ss, &len) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	*port = family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
	    ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* Sends seg to p's server from p's source. IPv6: the source is pinned, so
 * the kernel cannot pick another one than the checksum covers. */
static ssize_t
seg_send(struct synp_sock *s, const struct synp_probe *p, const uint8_t *seg, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sa_make(p->dst.addr.family, p->dst.addr.bytes, 0, &ss);
	union {
		struct cmsghdr h;
		uint8_t b[CMSG_SPACE(sizeof(struct in6_pktinfo))];
	} cm;
	struct iovec iov = { .iov_base = (void *)seg, .iov_len = len };
	struct msghdr mh = { .msg_name = &ss, .msg_namelen = sl, .msg_iov = &iov,
	    .msg_iovlen = 1 };
	struct in6_pktinfo pi = { 0 };

	if (p->dst.addr.family != AF_INET6)
		return sendto(s->fd, seg, len, MSG_DONTWAIT, (struct sockaddr *)&ss, sl);
	memset(&cm, 0, sizeof(cm));
	memcpy(&pi.ipi6_addr, p->src, 16);
	mh.msg_control = cm.b;
	mh.msg_controllen = sizeof(cm.b);
	cm.h.cmsg_level = IPPROTO_IPV6;
	cm.h.cmsg_type = IPV6_PKTINFO;
	cm.h.cmsg_len = CMSG_LEN(sizeof(pi));
	memcpy(CMSG_DATA(&cm.h), &pi, sizeof(pi));
	return sendmsg(s->fd6, &mh, MSG_DONTWAIT);
}

/* Sends transmission p->ntx. Returns 0, or -1 with errno set; either way
 * the transmission counts, so that the schedule moves on. */
static int
probe_send(struct synp_sock *s, struct synp_probe *p)
{
	struct synp_tx *t = &p->tx[p->ntx];
	struct synp_port *pt = &p->port[p->ntx];
	uint8_t seg[SYNP_SYN_LEN];
	int e;

	p->ntx++;
	if ((pt->fd = port_reserve(p->dst.addr.family, p->src, &t->sport)) == -1)
		return -1;
	t->isn = arc4random();
	if (p->dst.addr.family == AF_INET6)
		(void)synp_build_syn6(seg, sizeof(seg), p->src, t->sport, p->dst.addr.bytes,
		    p->dst.port, t->isn);
	else
		(void)synp_build_syn(seg, sizeof(seg), p->src, t->sport, p->dst.addr.bytes,
		    p->dst.port, t->isn);
	t->sent_us = clock_mono_us();
	if (seg_send(s, p, seg, sizeof(seg)) != (ssize_t)sizeof(seg)) {
		e = errno;
		close(pt->fd);
		pt->fd = -1;
		t->sport = 0;	/* matches nothing */
		errno = e;
		return -1;
	}
	pt->p = p;
	htab_insert(&s->ports, &pt->hn, port_hash(t->sport));
	s->st.syns_sent++;
	return 0;
}

static void
probe_free(struct synp_sock *s, struct synp_probe *p)
{
	for (size_t i = 0; i < p->ntx; i++) {
		if (p->port[i].fd < 0)
			continue;
		htab_remove(&s->ports, &p->port[i].hn);
		/* The port is free again: a late SYN-ACK to it meets no
		 * socket, and the kernel still answers it with a RST. */
		close(p->port[i].fd);
	}
	TAILQ_REMOVE(&s->probes, p, link);
	free(p);
}

static void
timer_arm(struct synp_sock *s)
{
	uint64_t next = UINT64_MAX, now = clock_mono_us();
	struct synp_probe *p;

	TAILQ_FOREACH(p, &s->probes, link) {
		if (p->ntx < SYNP_MAX_TX) {
			uint64_t due = p->tx[0].sent_us + synp_tx_at_us(p->ntx);
			if (due < next)
				next = due;
		}
	}
	ev_timer_stop(s->loop, &s->timer);
	if (next == UINT64_MAX)
		return;
	ev_timer_set(&s->timer, next > now ? (double)(next - now) / 1e6 : 0., 0.);
	ev_timer_start(s->loop, &s->timer);
}

static void
timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct synp_sock *s = w->data;
	uint64_t now = clock_mono_us();
	struct synp_probe *p;
	(void)loop;
	(void)revents;

	TAILQ_FOREACH(p, &s->probes, link) {
		/* A millisecond early is on time: no second wake-up for it. */
		if (p->ntx < SYNP_MAX_TX && p->tx[0].sent_us + synp_tx_at_us(p->ntx) <= now + 1000)
			(void)probe_send(s, p);	/* a failed one leaves a gap */
	}
	timer_arm(s);
}

static struct synp_probe *
probe_find(struct synp_sock *s, const struct synp_pkt *k)
{
	uint64_t h = port_hash(k->dport);
	size_t alen = family_len(k->family);

	for (struct hnode *n = htab_first(&s->ports, h); n; n = htab_next(n, h)) {
		struct synp_port *pt = container_of(n, struct synp_port, hn);
		struct synp_probe *p = pt->p;
		if (p->dst.addr.family == k->family && p->dst.port == k->sport &&
		    memcmp(p->dst.addr.bytes, k->src, alen) == 0 &&
		    memcmp(p->src, k->dst, alen) == 0)
			return p;
	}
	return NULL;
}

/* An answer of either family, parsed. */
static void
answer(struct synp_sock *s, enum synp_kind kind, const struct synp_pkt *k)
{
	struct synp_probe *p;
	enum synp_match m;
	synp_done_fn *fn;
	void *arg;
	size_t idx;
	uint32_t rtt;

	if ((kind != SYNP_PKT_SYNACK && kind != SYNP_PKT_RST) || (p = probe_find(s, k)) == NULL)
		return;		/* another connection's, or a late one */
	m = synp_match(p->tx, p->ntx, kind, k, clock_mono_us(), &idx, &rtt);
	if (m == SYNP_NO_MATCH)
		return;
	if (m == SYNP_SKIP) {
		s->st.skipped++;
		return;
	}
	fn = p->fn;
	arg = p->arg;
	s->st.answers++;
	if (m == SYNP_INEXACT)
		s->st.inexact++;
	probe_free(s, p);
	fn(arg, kind == SYNP_PKT_RST ? SYNP_REFUSED : SYNP_OPEN, rtt, m == SYNP_EXACT);
}

static void
read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct synp_sock *s = w->data;
	(void)loop;
	(void)revents;

	for (int i = 0; i < SYNP_READ_BATCH; i++) {
		uint8_t buf[SYNP_SNAPLEN];
		struct synp_pkt k;
		ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);

		if (n < 0)
			return;
		if (n > (ssize_t)sizeof(buf))
			n = sizeof(buf);
		answer(s, synp_parse(buf, (size_t)n, &k), &k);
	}
}

/* IPv6: the segment alone; the source from recvmsg, the destination (our
 * probe's source) from IPV6_PKTINFO. */
static void
read6_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct synp_sock *s = w->data;
	(void)loop;
	(void)revents;

	for (int i = 0; i < SYNP_READ_BATCH; i++) {
		uint8_t buf[SYNP_SNAPLEN], dst[16];
		struct sockaddr_in6 from;
		union {
			struct cmsghdr h;
			uint8_t b[CMSG_SPACE(sizeof(struct in6_pktinfo))];
		} cm;
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_name = &from, .msg_namelen = sizeof(from),
		    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
		    .msg_controllen = sizeof(cm.b) };
		struct cmsghdr *c;
		struct synp_pkt k;
		bool have_dst = false;
		ssize_t n = recvmsg(s->fd6, &mh, MSG_DONTWAIT | MSG_TRUNC);

		if (n < 0)
			return;
		if (n > (ssize_t)sizeof(buf))
			n = sizeof(buf);
		for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_PKTINFO &&
			    c->cmsg_len >= CMSG_LEN(sizeof(struct in6_pktinfo))) {
				struct in6_pktinfo pi;
				memcpy(&pi, CMSG_DATA(c), sizeof(pi));
				memcpy(dst, &pi.ipi6_addr, 16);
				have_dst = true;
			}
		}
		if (!have_dst || mh.msg_namelen < sizeof(from) || from.sin6_family != AF_INET6)
			continue;
		answer(s, synp_parse6(buf, (size_t)n, (const uint8_t *)&from.sin6_addr, dst, &k),
		    &k);
	}
}

/* A raw TCP socket of family with filter prog and s's mark. Returns fd, or
 * -1 with the reason in err. */
static int
raw_open(const struct synp_sock *s, int family, struct sock_fprog *prog, char *err,
    size_t errlen)
{
	const char *fam = family == AF_INET6 ? "IPv6" : "IPv4";
	uint8_t junk[SYNP_SNAPLEN];
	int fd;

	if ((fd = socket(family, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP)) == -1) {
		errbuf_set(err, errlen, "%s raw socket: %s", fam, strerror(errno));
		return -1;
	}
	if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, prog, sizeof(*prog)) == -1) {
		errbuf_set(err, errlen, "%s raw socket filter: %s", fam, strerror(errno));
		goto fail;
	}
	if (s->mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &s->mark, sizeof(s->mark)) == -1) {
		errbuf_set(err, errlen, "%s raw socket mark: %s", fam, strerror(errno));
		goto fail;
	}
	if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_RECVPKTINFO, &(int){ 1 },
	    sizeof(int)) == -1) {
		errbuf_set(err, errlen, "%s raw socket pktinfo: %s", fam, strerror(errno));
		goto fail;
	}
	/* What came in before the filter was attached. */
	while (recv(fd, junk, sizeof(junk), MSG_DONTWAIT) >= 0)
		;
	return fd;
fail:
	close(fd);
	return -1;
}

struct synp_sock *
synp_open(struct ev_loop *loop, uint32_t mark, char *err, size_t errlen)
{
	/* Only SYN-ACKs and RSTs of unfragmented packets reach us: a relay
	 * carries Gbit/s of pipe traffic through the same stack. The IPv4
	 * raw socket sees the packet from its IPv4 header on. */
	static struct sock_filter code[] = {
		BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),			/* flags, fragment offset */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x3fff, 6, 0),	/* MF or offset: drop */
		BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),			/* X = IP header length */
		BPF_STMT(BPF_LD | BPF_B | BPF_IND, 13),			/* TCP flags */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, TH_RST, 2, 0),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, TH_SYN | TH_ACK),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TH_SYN | TH_ACK, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SYNP_SNAPLEN),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	/* The IPv6 one sees the TCP header first (reassembled, extension
	 * headers gone). */
	static struct sock_filter code6[] = {
		BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),			/* TCP flags */
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, TH_RST, 2, 0),
		BPF_STMT(BPF_ALU | BPF_AND | BPF_K, TH_SYN | TH_ACK),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TH_SYN | TH_ACK, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SYNP_SNAPLEN),
		BPF_STMT(BPF_RET | BPF_K, 0),
	};
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	struct sock_fprog prog6 = { .len = sizeof(code6) / sizeof(code6[0]), .filter = code6 };
	struct synp_sock *s;
	int probe;

	if ((s = calloc(1, sizeof(*s))) == NULL || htab_init(&s->ports, 64) == -1) {
		free(s);
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	TAILQ_INIT(&s->probes);
	s->loop = loop;
	s->mark = mark;
	s->fd6 = -1;
	if ((s->fd = raw_open(s, AF_INET, &prog, err, errlen)) == -1)
		goto fail;
	/* A kernel without IPv6 (ipv6.disable=1) probes IPv4 alone. */
	if ((probe = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0)) >= 0) {
		close(probe);
		if ((s->fd6 = raw_open(s, AF_INET6, &prog6, err, errlen)) == -1)
			goto fail;
	}
	ev_io_init(&s->io, read_cb, s->fd, EV_READ);
	s->io.data = s;
	ev_io_start(loop, &s->io);
	if (s->fd6 >= 0) {
		ev_io_init(&s->io6, read6_cb, s->fd6, EV_READ);
		s->io6.data = s;
		ev_io_start(loop, &s->io6);
	}
	ev_init(&s->timer, timer_cb);
	s->timer.data = s;
	return s;
fail:
	if (s->fd >= 0)
		close(s->fd);
	htab_destroy(&s->ports);
	free(s);
	return NULL;
}

void
synp_close(struct synp_sock *s)
{
	struct synp_probe *p;

	if (s == NULL)
		return;
	ev_io_stop(s->loop, &s->io);
	ev_timer_stop(s->loop, &s->timer);
	while ((p = TAILQ_FIRST(&s->probes)) != NULL)
		probe_free(s, p);
	close(s->fd);
	if (s->fd6 >= 0) {
		ev_io_stop(s->loop, &s->io6);
		close(s->fd6);
	}
	htab_destroy(&s->ports);
	free(s);
}

const struct synp_stats *
synp_stats(const struct synp_sock *s)
{
	return &s->st;
}

bool
synp_has_family(const struct synp_sock *s, int family)
{
	return s != NULL && (family == AF_INET || (family == AF_INET6 && s->fd6 >= 0));
}

struct synp_probe *
synp_start(struct synp_sock *s, const struct endpoint *dst, synp_done_fn *fn, void *arg)
{
	struct synp_probe *p;
	int e;

	if (!synp_has_family(s, dst->addr.family)) {
		errno = EAFNOSUPPORT;
		return NULL;
	}
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	for (size_t i = 0; i < SYNP_MAX_TX; i++)
		p->port[i].fd = -1;
	p->s = s;
	p->dst = *dst;
	p->fn = fn;
	p->arg = arg;
	if (route_source(s, dst, p->src) == -1) {
		e = errno;
		free(p);
		errno = e;
		return NULL;
	}
	TAILQ_INSERT_TAIL(&s->probes, p, link);
	if (probe_send(s, p) == -1) {
		e = errno;
		probe_free(s, p);
		errno = e;
		return NULL;
	}
	s->st.probes++;
	/* Its retransmission is due in 1 s: no earlier than any other's, so
	 * a running timer stays right (and a burst costs no scans). */
	if (!ev_is_active(&s->timer))
		timer_arm(s);
	return p;
}

void
synp_cancel(struct synp_sock *s, struct synp_probe *p)
{
	if (p == NULL)
		return;
	probe_free(s, p);
	/* The timer may now fire with nothing due: it re-arms itself. */
}
