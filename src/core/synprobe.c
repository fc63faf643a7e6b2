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

uint16_t
synp_checksum(const uint8_t src[4], const uint8_t dst[4], const uint8_t *seg, size_t len)
{
	uint8_t ph[12];
	uint32_t sum;

	memcpy(ph, src, 4);
	memcpy(ph + 4, dst, 4);
	ph[8] = 0;
	ph[9] = IPPROTO_TCP;
	ph[10] = (uint8_t)(len >> 8);
	ph[11] = (uint8_t)len;
	sum = sum16(sum16(0, ph, sizeof(ph)), seg, len);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

size_t
synp_build_syn(uint8_t *buf, size_t size, const uint8_t src[4], uint16_t sport,
    const uint8_t dst[4], uint16_t dport, uint32_t isn)
{
	/* The options a Linux connect() sends, bar timestamps: a SYN that
	 * looks like any other to middleboxes and SYN-flood defences. */
	static const uint8_t opts[12] = {
		2, 4, 0x05, 0xb4,	/* MSS 1460 */
		1, 3, 3, 7,		/* NOP, window scale 7 */
		1, 1, 4, 2,		/* NOP, NOP, SACK permitted */
	};

	if (size < SYNP_SYN_LEN)
		return 0;
	memset(buf, 0, SYNP_SYN_LEN);
	put16(buf, sport);
	put16(buf + 2, dport);
	put32(buf + 4, isn);
	buf[12] = (SYNP_SYN_LEN / 4) << 4;
	buf[13] = TH_SYN;
	put16(buf + 14, 64240);
	memcpy(buf + 20, opts, sizeof(opts));
	put16(buf + 16, synp_checksum(src, dst, buf, SYNP_SYN_LEN));
	return SYNP_SYN_LEN;
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
	if ((th[12] >> 4) < 5)
		return SYNP_PKT_BAD;
	memcpy(out->src, p + 12, 4);
	memcpy(out->dst, p + 16, 4);
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
	uint8_t src[4];
	struct synp_tx tx[SYNP_MAX_TX];
	struct synp_port port[SYNP_MAX_TX];
	size_t ntx;		/* transmissions tried, failed ones included */
	synp_done_fn *fn;
	void *arg;
};

TAILQ_HEAD(synp_list, synp_probe);

struct synp_sock {
	struct ev_loop *loop;
	int fd;
	uint32_t mark;
	ev_io io;
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

/* The source address the kernel routes dst from (with the mark): the
 * checksum covers it, and the raw socket does not say. */
static int
route_source(const struct synp_sock *s, const struct endpoint *dst, uint8_t src[4])
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(dst->port) };
	socklen_t len = sizeof(sin);
	int fd, e;

	if ((fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	memcpy(&sin.sin_addr, dst->addr.bytes, 4);
	if ((s->mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &s->mark, sizeof(s->mark)) == -1) ||
	    connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	memcpy(src, &sin.sin_addr, 4);
	return 0;
}

/* Binds a TCP socket to src, port 0: the kernel picks a port that no
 * connect() will take while the socket lives. Returns fd or -1. */
static int
port_reserve(const uint8_t src[4], uint16_t *port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	socklen_t len = sizeof(sin);
	int fd, e;

	if ((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	memcpy(&sin.sin_addr, src, 4);
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == -1 ||
	    getsockname(fd, (struct sockaddr *)&sin, &len) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	*port = ntohs(sin.sin_port);
	return fd;
}

/* Sends transmission p->ntx. Returns 0, or -1 with errno set; either way
 * the transmission counts, so that the schedule moves on. */
static int
probe_send(struct synp_sock *s, struct synp_probe *p)
{
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct synp_tx *t = &p->tx[p->ntx];
	struct synp_port *pt = &p->port[p->ntx];
	uint8_t seg[SYNP_SYN_LEN];
	int e;

	p->ntx++;
	if ((pt->fd = port_reserve(p->src, &t->sport)) == -1)
		return -1;
	t->isn = arc4random();
	(void)synp_build_syn(seg, sizeof(seg), p->src, t->sport, p->dst.addr.bytes,
	    p->dst.port, t->isn);
	memcpy(&sin.sin_addr, p->dst.addr.bytes, 4);
	t->sent_us = clock_mono_us();
	if (sendto(s->fd, seg, sizeof(seg), MSG_DONTWAIT, (struct sockaddr *)&sin,
	    sizeof(sin)) != (ssize_t)sizeof(seg)) {
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

	for (struct hnode *n = htab_first(&s->ports, h); n; n = htab_next(n, h)) {
		struct synp_port *pt = container_of(n, struct synp_port, hn);
		struct synp_probe *p = pt->p;
		if (p->dst.port == k->sport && memcmp(p->dst.addr.bytes, k->src, 4) == 0 &&
		    memcmp(p->src, k->dst, 4) == 0)
			return p;
	}
	return NULL;
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
		struct synp_probe *p;
		enum synp_kind kind;
		enum synp_match m;
		synp_done_fn *fn;
		void *arg;
		size_t idx;
		uint32_t rtt;
		ssize_t n = recv(s->fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);

		if (n < 0)
			return;
		if (n > (ssize_t)sizeof(buf))
			n = sizeof(buf);
		kind = synp_parse(buf, (size_t)n, &k);
		if ((kind != SYNP_PKT_SYNACK && kind != SYNP_PKT_RST) ||
		    (p = probe_find(s, &k)) == NULL)
			continue;	/* another connection's, or a late one */
		m = synp_match(p->tx, p->ntx, kind, &k, clock_mono_us(), &idx, &rtt);
		if (m == SYNP_NO_MATCH)
			continue;
		if (m == SYNP_SKIP) {
			s->st.skipped++;
			continue;
		}
		fn = p->fn;
		arg = p->arg;
		s->st.answers++;
		if (m == SYNP_INEXACT)
			s->st.inexact++;
		probe_free(s, p);
		fn(arg, kind == SYNP_PKT_RST ? SYNP_REFUSED : SYNP_OPEN, rtt, m == SYNP_EXACT);
	}
}

struct synp_sock *
synp_open(struct ev_loop *loop, uint32_t mark, char *err, size_t errlen)
{
	/* Only SYN-ACKs and RSTs of unfragmented packets reach us: a relay
	 * carries Gbit/s of pipe traffic through the same stack. The raw
	 * socket sees the packet from its IPv4 header on. */
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
	struct sock_fprog prog = { .len = sizeof(code) / sizeof(code[0]), .filter = code };
	struct synp_sock *s;
	uint8_t junk[SYNP_SNAPLEN];

	if ((s = calloc(1, sizeof(*s))) == NULL || htab_init(&s->ports, 64) == -1) {
		free(s);
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	TAILQ_INIT(&s->probes);
	s->loop = loop;
	s->mark = mark;
	if ((s->fd = socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    IPPROTO_TCP)) == -1) {
		errbuf_set(err, errlen, "raw socket: %s", strerror(errno));
		goto fail;
	}
	if (setsockopt(s->fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) == -1) {
		errbuf_set(err, errlen, "raw socket filter: %s", strerror(errno));
		goto fail;
	}
	if (mark && setsockopt(s->fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == -1) {
		errbuf_set(err, errlen, "raw socket mark: %s", strerror(errno));
		goto fail;
	}
	/* What came in before the filter was attached. */
	while (recv(s->fd, junk, sizeof(junk), MSG_DONTWAIT) >= 0)
		;
	ev_io_init(&s->io, read_cb, s->fd, EV_READ);
	s->io.data = s;
	ev_io_start(loop, &s->io);
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
	htab_destroy(&s->ports);
	free(s);
}

const struct synp_stats *
synp_stats(const struct synp_sock *s)
{
	return &s->st;
}

struct synp_probe *
synp_start(struct synp_sock *s, const struct endpoint *dst, synp_done_fn *fn, void *arg)
{
	struct synp_probe *p;
	int e;

	if (dst->addr.family != AF_INET) {
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
