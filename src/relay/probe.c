#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/ratelimit.h"
#include "slot/rttcache.h"
#include "slot/sock.h"
#include "slot/synprobe.h"
#include "probe.h"
#include "rauth.h"

#define PROBE_MAX_WAITERS 64	/* requesters sharing one measurement */
#define PROBE_BATCH 64		/* datagrams read per wake-up */
#define PROBE_FAIL_TTL_MS 30000	/* failures are re-measured sooner */
/* A handover connect unanswered for this share of its SYN's retransmission
 * timeout (1 s, unless a BPF program set another) gives way to a bare SYN
 * before the kernel sends its SYN again: a SYN-ACK to that second SYN could
 * meet the connection already up and draw an ACK that completes it. */
#define PROBE_CONNECT_ALONE_SHARE 0.9
/* The kernel's ACK deferral is checked at start; a check that cannot tell
 * is tried again this often, this many times. */
#define PROBE_ACKCHECK_RETRY_S 1.0
#define PROBE_ACKCHECK_TRIES 3
/* Addresses with a bucket still refilling (about 2 s after use at the
 * default rates); beyond, new requesters or targets are refused. */
#define PROBE_RL_SLOTS 16384
/* HELLO signature checks on the probe port, all sources together: spoofed
 * sources each get a fresh per-source bucket, and a forged HELLO costs an
 * Ed25519 verification (~28 us), so 2,000/s bound them to ~6% of a core
 * while peers' few HELLOs (one before the first probe, one after a probe
 * unanswered) pass; one refused retries at its next probe. */
#define PROBE_HELLO_RATE 2000.
#define PROBE_HELLO_BURST 4000.
#define PROBE_CACHE_SLOTS 65536

struct waiter {
	struct endpoint from;
	uint32_t id;
	uint64_t t_recv;
	struct auth_key key;	/* the reply's MAC key: the requester's */
};

struct job {
	struct probe_srv *ps;
	struct hnode hn;
	struct endpoint target;
	struct synp_probe *sp;	/* the SYN measurement, or... */
	int fd;			/* ...the connect one (IPv6, no raw socket) */
	bool inexact;		/* the RTT may hold a retransmission: a SYN sent again,
				 * or a SYN-ACK that may be the server's own */
	bool pre;		/* begun for handover on a cached answer... */
	uint32_t expect_us;	/* ...whose RTT it was */
	uint32_t alone_us;	/* the connect's time before a bare SYN takes over */
	uint64_t t_start;
	ev_io io;
	ev_timer timer;
	ev_timer alone;		/* the handover connect's time before a bare SYN */
	size_t nw;
	struct waiter w[PROBE_MAX_WAITERS];
};

/* A measurement's connection, its handshake's last ACK still deferred,
 * kept for a pipe to its target ([probe] handover). */
struct handover {
	struct hnode hn;
	TAILQ_ENTRY(handover) link;
	struct endpoint target;
	int fd;
	uint64_t deadline_us;
};

struct probe_srv {
	struct relay *r;
	int fd;
	int fd_family;		/* the socket's: AF_INET6 also for a dual-stack one */
	ev_io io;
	struct htab jobs;	/* by target */
	size_t njobs;
	struct rttcache *cache;
	struct ratelimit *rl_dst;	/* requesters' rate: admit.h */
	struct ratelimit *rl_hello;	/* other relays' HELLOs, per source */
	struct ratelimit *rl_hello_all;	/* ... and all together (one key) */
	struct synp_sock *synp;	/* NULL: connect measurements only */
	struct htab ho;	/* struct handover by target */
	TAILQ_HEAD(ho_list, handover) ho_fifo;	/* nearest deadline first */
	size_t nho;
	ev_timer ho_timer;	/* the first one's deadline */
	struct sock_ackcheck ack;	/* the kernel's ACK deferral, checked at start */
	ev_timer ack_timer;
	int ack_tries;
	enum probe_ack_state ack_state;
};

/* Handover keeps measurements' connections on the kernel's deferral of
 * their last ACK: not where the start-up check saw it fail. */
static bool
handover_on(const struct probe_srv *ps)
{
	return ps->r->conf.handover_ms > 0 && ps->ack_state != PROBE_ACK_EARLY;
}

static void
probe_reply(struct probe_srv *ps, const struct waiter *w, const struct endpoint *target,
    uint8_t status, uint8_t flags, uint32_t rtt_us)
{
	struct proto_msg m = { .type = PROTO_PROBE_REPLY, .id = w->id };
	struct sockaddr_storage ss;
	uint8_t buf[PROTO_MAX_LEN];
	int n;
	uint64_t now = clock_mono_us();

	rauth_stamp(ps->r, &m);
	m.u.probe_reply.status = status;
	m.u.probe_reply.flags = flags;
	m.u.probe_reply.rtt_us = rtt_us;
	m.u.probe_reply.hold_us = (uint32_t)(now - w->t_recv);
	m.u.probe_reply.target = *target;
	if ((n = proto_encode(&m, &w->key, buf, sizeof(buf))) < 0)
		return;
	socklen_t len = ep_to_sockaddr_on(&w->from, ps->fd_family, &ss);
	/* A full socket buffer loses the reply; the client treats it as a
	 * relay that did not answer, as it would a lost datagram. */
	(void)sendto(ps->fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&ss, len);
	if (status == PROBE_ST_POLICY || status == PROBE_ST_RATE_LIMITED ||
	    status == PROBE_ST_BUSY)
		ps->r->ctr.probes_refused++;
	else
		ps->r->ctr.probes_answered++;
}

/* A finished connect's RTT: the kernel's sample of its SYN to the SYN-ACK,
 * which the time the event loop took to get here does not inflate (else the
 * time since the connect). *retransmitted: its SYN had to be sent again, so
 * the time holds a retransmission timeout (1 s or more), not the path's
 * RTT. SYN measurements know which SYN was answered and need no such check. */
static uint32_t
connect_rtt(int fd, uint64_t t_start, bool *retransmitted)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	uint64_t us = clock_mono_us() - t_start;

	memset(&ti, 0, sizeof(ti));
	*retransmitted = false;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) {
		*retransmitted = ti.tcpi_total_retrans > 0;
		if (!*retransmitted && ti.tcpi_rtt > 0 && ti.tcpi_rtt <= us)
			return ti.tcpi_rtt;
	}
	return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void
handover_drop(struct probe_srv *ps, struct handover *h)
{
	htab_remove(&ps->ho, &h->hn);
	TAILQ_REMOVE(&ps->ho_fifo, h, link);
	ps->nho--;
	free(h);
}

static void
handover_arm(struct probe_srv *ps)
{
	struct handover *h = TAILQ_FIRST(&ps->ho_fifo);
	uint64_t now = clock_mono_us();

	ev_timer_stop(ps->r->loop, &ps->ho_timer);
	if (h == NULL)
		return;
	ev_timer_set(&ps->ho_timer, h->deadline_us > now ?
	    (double)(h->deadline_us - now) / 1e6 : 0., 0.);
	ev_timer_start(ps->r->loop, &ps->ho_timer);
}

/* Unused: reset before the kernel's deferred ACK would complete the
 * handshake (handover's bound is below SOCK_ACK_DEFER_MS), so that the
 * server's application never sees it. */
static void
handover_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct probe_srv *ps = w->data;
	uint64_t now = clock_mono_us();
	struct handover *h;
	(void)loop;
	(void)revents;

	while ((h = TAILQ_FIRST(&ps->ho_fifo)) != NULL && h->deadline_us <= now + 1000) {
		sock_close_rst(h->fd);
		ps->r->ctr.handovers_unused++;
		handover_drop(ps, h);
	}
	handover_arm(ps);
}

/* Keeps fd, a measurement's connection to target whose SYN-ACK came at
 * synack_us, for a pipe to target; at the cap the one nearest its deadline
 * goes. Closes fd if it cannot. The hold counts from the SYN-ACK, as the
 * kernel's deferred ACK does: counted from when the loop got here, a loop
 * running late would push the reset past that ACK and the server would
 * accept the measurement. ho_fifo stays in deadline order (SYN-ACKs may be
 * handled out of order; a reload may shorten the hold). */
static void
handover_add(struct probe_srv *ps, const struct endpoint *target, int fd, uint64_t synack_us)
{
	struct relay *r = ps->r;
	struct handover *h, *old, *prev;
	uint64_t deadline = synack_us + r->conf.handover_ms * 1000;

	if (deadline <= clock_mono_us() + 1000) {
		sock_close_rst(fd);
		r->ctr.handovers_unused++;
		return;
	}
	if (ps->nho >= r->conf.max_inflight && (old = TAILQ_FIRST(&ps->ho_fifo))) {
		sock_close_rst(old->fd);
		r->ctr.handovers_unused++;
		handover_drop(ps, old);
	}
	if ((h = calloc(1, sizeof(*h))) == NULL) {
		sock_close_rst(fd);
		return;
	}
	h->target = *target;
	h->fd = fd;
	h->deadline_us = deadline;
	htab_insert(&ps->ho, &h->hn, ep_hash(target, r->hkey));
	for (prev = TAILQ_LAST(&ps->ho_fifo, ho_list); prev && prev->deadline_us > deadline;
	    prev = TAILQ_PREV(prev, ho_list, link))
		;
	if (prev)
		TAILQ_INSERT_AFTER(&ps->ho_fifo, prev, h, link);
	else
		TAILQ_INSERT_HEAD(&ps->ho_fifo, h, link);
	ps->nho++;
	if (h == TAILQ_FIRST(&ps->ho_fifo))
		handover_arm(ps);
}

/* The newest connection held for target: the furthest from its deadline. */
static struct handover *
handover_find(struct probe_srv *ps, const struct endpoint *target, uint64_t hv)
{
	struct handover *found = NULL;

	for (struct hnode *n = htab_first(&ps->ho, hv); n; n = htab_next(n, hv)) {
		struct handover *h = container_of(n, struct handover, hn);
		if (ep_eq(&h->target, target) && (!found || h->deadline_us > found->deadline_us))
			found = h;
	}
	return found;
}

static void
job_finish(struct job *j, uint8_t status, uint32_t rtt_us)
{
	struct probe_srv *ps = j->ps;
	/* A measurement inflated by a lost packet is answered but not cached,
	 * so the next request measures again instead of keeping that relay
	 * out of every choice for this server for rtt_cache_ttl. */
	bool cache = status != PROBE_ST_BUSY && !(status == PROBE_ST_OK && j->inexact);
	/* A pre-connect leaves the cache as it was, unless requesters came
	 * to wait for it (their entry had expired meanwhile). */
	bool put = cache && (!j->pre || j->nw > 0);

	ev_io_stop(ps->r->loop, &j->io);
	ev_timer_stop(ps->r->loop, &j->timer);
	ev_timer_stop(ps->r->loop, &j->alone);
	synp_cancel(ps->synp, j->sp);
	j->sp = NULL;
	/* A connection made: a pipe to the target soon may take it (its
	 * connect saved); else a RST, no FIN handshake, so that the server sees
	 * no more than for a bare SYN. Not one whose SYN went twice: the
	 * server may answer both, and the second SYN-ACK, meeting the
	 * connection up, would draw the ACK that completes it. */
	if (j->fd >= 0 && status == PROBE_ST_OK && handover_on(ps) && cache)
		handover_add(ps, &j->target, j->fd, j->t_start + rtt_us);
	else if (j->fd >= 0)
		sock_close_rst(j->fd);
	htab_remove(&ps->jobs, &j->hn);
	ps->njobs--;
	if (put)
		(void)rttc_put(ps->cache, &j->target, rtt_us, status, clock_mono_us());
	else if (!cache && status != PROBE_ST_BUSY)
		ps->r->ctr.probes_uncached++;
	for (size_t i = 0; i < j->nw; i++)
		probe_reply(ps, &j->w[i], &j->target, status, 0, rtt_us);
	free(j);
}

static void
job_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct job *j = w->data;
	uint64_t rtt = clock_mono_us() - j->t_start;
	int err = sock_connect_result(j->fd);
	(void)loop;
	(void)revents;

	if (rtt > UINT32_MAX)
		rtt = UINT32_MAX;
	if (err == 0)
		job_finish(j, PROBE_ST_OK, connect_rtt(j->fd, j->t_start, &j->inexact));
	else if (err == ECONNREFUSED)
		job_finish(j, PROBE_ST_REFUSED, (uint32_t)rtt);
	else if (err == ETIMEDOUT)
		job_finish(j, PROBE_ST_TIMEOUT, 0);
	else
		job_finish(j, PROBE_ST_UNREACHABLE, 0);
}

static void
job_syn_cb(void *arg, enum synp_status st, uint32_t rtt_us, bool exact)
{
	struct job *j = arg;

	j->sp = NULL;		/* already freed */
	j->inexact = !exact;
	job_finish(j, st == SYNP_OPEN ? PROBE_ST_OK : PROBE_ST_REFUSED, rtt_us);
}

/* Measures j with a bare SYN. Returns 0, or -1 when it could not start
 * (j is then answered and gone). */
static int
job_syn_start(struct job *j)
{
	struct probe_srv *ps = j->ps;
	int e;

	ps->r->ctr.measure_syn++;
	if ((j->sp = synp_start(ps->synp, &j->target, job_syn_cb, j)) != NULL)
		return 0;
	e = errno;
	job_finish(j, e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM ?
	    PROBE_ST_BUSY : PROBE_ST_UNREACHABLE, 0);
	return -1;
}

/* The handover connect had no answer in time: a bare SYN measures from
 * here (its own schedule, exact), and the connect goes without a packet
 * (resetting a connecting socket sends nothing; a late SYN-ACK to it
 * meets no socket and draws a RST). */
static void
job_alone_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct job *j = w->data;
	struct pollfd pfd = { .fd = j->fd, .events = POLLOUT };
	(void)revents;

	/* Answered in the same turn of the loop: the answer's callback may
	 * come after this one. */
	if (poll(&pfd, 1, 0) == 1) {
		job_io_cb(loop, &j->io, EV_WRITE);
		return;
	}
	ev_io_stop(loop, &j->io);
	sock_close_rst(j->fd);
	j->fd = -1;
	if (log_get_level() >= SLOG_DEBUG) {
		char b[EP_STRLEN];
		log_debug("measuring %s: no SYN-ACK to the connect within %u ms (0.9 of its SYN's "
		    "timeout): %s", ep_fmt(&j->target, b), j->alone_us / 1000,
		    j->pre && j->nw == 0 ? "reset, nobody waits" : "a bare SYN goes on");
	}
	/* A pre-connect nobody waits for has nothing to measure. */
	if (j->pre && j->nw == 0) {
		job_finish(j, PROBE_ST_BUSY, 0);
		return;
	}
	(void)job_syn_start(j);
}

static void
job_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	job_finish(w->data, PROBE_ST_TIMEOUT, 0);
}

static struct job *
job_find(struct probe_srv *ps, const struct endpoint *t, uint64_t h)
{
	for (struct hnode *n = htab_first(&ps->jobs, h); n; n = htab_next(n, h)) {
		struct job *j = container_of(n, struct job, hn);
		if (ep_eq(&j->target, t))
			return j;
	}
	return NULL;
}

/* A pipe that comes while the connect begun for it on a cached answer is
 * still under way takes that socket, instead of a connect of its own that
 * would start a relay-server round trip later; not one whose SYN looks
 * lost (older than its cached RTT and half again: a fresh SYN is then
 * sooner than the kernel's second at 1 s), nor one requesters wait on. */
static int
preconnect_take(struct probe_srv *ps, const struct endpoint *target, uint64_t hv)
{
	struct job *j = job_find(ps, target, hv);
	uint64_t age, slack;
	int fd;

	if (j == NULL || !j->pre || j->nw > 0 || j->fd < 0)
		return -1;
	age = clock_mono_us() - j->t_start;
	slack = j->expect_us / 2 > 10000 ? j->expect_us / 2 : 10000;
	if (age > j->expect_us + slack)
		return -1;
	fd = j->fd;
	j->fd = -1;
	job_finish(j, PROBE_ST_BUSY, 0);	/* no waiter, nothing cached */
	if (sock_ack_from_now(fd) == -1) {
		sock_close_rst(fd);
		return -1;
	}
	ps->r->ctr.handovers++;
	ps->r->ctr.handovers_connecting++;
	return fd;
}

int
probe_take(struct probe_srv *ps, const struct endpoint *target)
{
	struct handover *found;
	uint64_t hv;
	int fd;

	if (ps == NULL || (ps->nho == 0 && ps->njobs == 0))
		return -1;
	hv = ep_hash(target, ps->r->hkey);
	if (ps->nho == 0 || (found = handover_find(ps, target, hv)) == NULL)
		return ps->njobs > 0 ? preconnect_take(ps, target, hv) : -1;
	fd = found->fd;
	handover_drop(ps, found);
	handover_arm(ps);
	/* The server's application sees the connection from here on. */
	if (sock_ack_now(fd) == -1) {
		sock_close_rst(fd);
		return -1;
	}
	ps->r->ctr.handovers++;
	return fd;
}

/* Measures t for the requester w, or with none (NULL: a pre-connect on a
 * cached answer of expect_us). */
static void
job_begin(struct probe_srv *ps, const struct endpoint *t, uint64_t h, const struct waiter *w,
    uint32_t expect_us)
{
	struct relay *r = ps->r;
	bool raw = synp_has_family(ps->synp, t->addr.family);
	struct job *j;

	if ((j = calloc(1, sizeof(*j))) == NULL) {
		if (w)
			probe_reply(ps, w, t, PROBE_ST_BUSY, 0, 0);
		return;
	}
	j->ps = ps;
	j->fd = -1;
	j->target = *t;
	if (w) {
		j->w[0] = *w;
		j->nw = 1;
	} else {
		j->pre = true;
		j->expect_us = expect_us;
	}
	j->t_start = clock_mono_us();
	htab_insert(&ps->jobs, &j->hn, h);
	ps->njobs++;
	ev_init(&j->io, job_io_cb);
	j->io.data = j;
	ev_timer_init(&j->timer, job_timer_cb, (double)r->conf.probe_timeout_ms / 1000.0, 0.);
	j->timer.data = j;
	ev_init(&j->alone, job_alone_cb);
	j->alone.data = j;
	/* A bare SYN whose SYN-ACK the kernel resets, or a connect whose
	 * handshake stays unacknowledged until a pipe takes it or it is reset:
	 * either way the server's application never sees the measurement
	 * (docs/relay.md). Handover needs the connect. */
	if (!handover_on(ps) && raw) {
		if (job_syn_start(j) == 0)
			ev_timer_start(r->loop, &j->timer);
		return;
	}
	if (!j->pre)
		r->ctr.measure_connect++;
	if ((j->fd = sock_connect_unacked(t, 0)) == -1) {
		int e = errno;
		job_finish(j, e == EMFILE || e == ENFILE || e == ENOBUFS ? PROBE_ST_BUSY :
		    PROBE_ST_UNREACHABLE, 0);
		return;
	}
	ev_io_set(&j->io, j->fd, EV_WRITE);
	ev_io_start(r->loop, &j->io);
	ev_timer_start(r->loop, &j->timer);
	/* Without a raw socket the kernel's own SYN retransmissions go on:
	 * such a connection is then reset at once, never held. */
	if (handover_on(ps) && raw) {
		j->alone_us = (uint32_t)(PROBE_CONNECT_ALONE_SHARE * sock_syn_rto_us(j->fd));
		ev_timer_set(&j->alone, j->alone_us / 1e6, 0.);
		ev_timer_start(r->loop, &j->alone);
	}
}

/* A cached answer left no connection to hand over: a connect begins for
 * the pipe that may follow it, as a fresh measurement's would (the cache
 * keeps its entry). Only one per server at a time, none while one is
 * held, and only from the tokens of destination_rate above half its burst,
 * which stay for measurements the cache cannot answer. */
static void
preconnect(struct probe_srv *ps, const struct endpoint *t, uint32_t rtt_us, uint64_t now)
{
	struct relay *r = ps->r;
	uint64_t h = ep_hash(t, r->hkey);

	if (!r->conf.preconnect || !handover_on(ps) || job_find(ps, t, h) ||
	    handover_find(ps, t, h) || ps->njobs >= r->conf.max_inflight ||
	    !rl_allow_keep(ps->rl_dst, &t->addr, now, r->conf.destination_burst / 2))
		return;
	r->ctr.handover_preconnects++;
	job_begin(ps, t, h, NULL, rtt_us);
}

static void
probe_handle(struct probe_srv *ps, const struct proto_msg *m, const struct waiter *w)
{
	struct relay *r = ps->r;
	const struct endpoint *t = &m->u.probe_req.target;
	uint64_t now = w->t_recv;
	uint32_t rtt;
	uint8_t st;

	/* A probe for our own probe endpoint is another relay measuring its
	 * RTT to us (docs/protocol.md): answered at once, nothing connected. */
	if (t->port == r->conf.probe_listen.port &&
	    (addr_eq(&t->addr, &r->conf.probe_listen.addr) ||
	    policy_is_self(&r->conf.policy, &t->addr))) {
		r->ctr.peer_pings++;
		probe_reply(ps, w, t, PROBE_ST_OK, 0, 0);
		return;
	}
	if (r->draining || policy_check(&r->conf.policy, t) != POLICY_OK) {
		probe_reply(ps, w, t, r->draining ? PROBE_ST_BUSY : PROBE_ST_POLICY, 0, 0);
		return;
	}
	uint64_t ttl = r->conf.rtt_cache_ttl_ms * 1000;
	uint64_t fail_ttl = ttl < PROBE_FAIL_TTL_MS * 1000 ? ttl : PROBE_FAIL_TTL_MS * 1000;
	if (rttc_get(ps->cache, t, now, ttl, &rtt, &st)) {
		int measured = st == PROBE_ST_OK || st == PROBE_ST_REFUSED;
		if (measured || rttc_get(ps->cache, t, now, fail_ttl, &rtt, &st)) {
			probe_reply(ps, w, t, st, PROBE_FLAG_CACHED, rtt);
			if (st == PROBE_ST_OK)
				preconnect(ps, t, rtt, now);
			return;
		}
	}
	uint64_t h = ep_hash(t, r->hkey);
	struct job *j = job_find(ps, t, h);
	if (j) {
		if (j->nw == PROBE_MAX_WAITERS)
			probe_reply(ps, w, t, PROBE_ST_BUSY, 0, 0);
		else
			j->w[j->nw++] = *w;
		return;
	}
	if (ps->njobs >= r->conf.max_inflight) {
		probe_reply(ps, w, t, PROBE_ST_BUSY, 0, 0);
		return;
	}
	if (!rl_allow(ps->rl_dst, &t->addr, now)) {
		probe_reply(ps, w, t, PROBE_ST_RATE_LIMITED, 0, 0);
		return;
	}
	job_begin(ps, t, h, w, 0);
}


/*
 * Identity mode: another relay introduces itself before probing us
 * (peers.c). Only relays do so here (clients introduce themselves on their
 * control connection); the answer is our own HELLO, no larger than the
 * request and within the requester's rate, so the port is no amplifier.
 */
static void
probe_hello(struct probe_srv *ps, const uint8_t *buf, size_t n, const struct endpoint *from,
    uint64_t now)
{
	struct relay *r = ps->r;
	struct proto_msg m;
	struct auth_key key;
	struct sockaddr_storage ss;
	uint8_t out[PROTO_MAX_LEN];
	enum proto_err why;
	size_t used;
	char err[256], b[EP_STRLEN];
	int len;

	static const struct addr all;
	struct addr src = addr_source(&from->addr);

	/* The rates before the signature check, which costs more than a MAC;
	 * the replay cache once it is authentic. */
	if (!rl_allow(ps->rl_hello, &src, now)) {
		r->ctr.probes_dropped++;
		return;
	}
	if (!rl_allow(ps->rl_hello_all, &all, now)) {
		r->ctr.hellos_throttled++;
		return;
	}
	if (proto_decode_with(buf, n, rauth_key_fn, r, &m, &used, &why) != PROTO_OK ||
	    used != n || admit_message(r->admit, ADMIT_PROBE, &from->addr, m.ts_us, m.nonce,
	    now, clock_real_us()) != ADMIT_OK) {
		r->ctr.probes_dropped++;
		return;
	}
	if (rauth_admit(r, &m, IDENT_MASK(IDENT_ROLE_RELAY), &key, err, sizeof(err)) == -1) {
		r->ctr.hellos_refused++;
		log_info("HELLO from %s refused: %s", ep_fmt(from, b), err);
		return;
	}
	auth_key_wipe(&key);
	r->ctr.hellos_accepted++;
	if ((len = rauth_hello(r, m.id, out, sizeof(out))) < 0)
		return;
	socklen_t sl = ep_to_sockaddr_on(from, ps->fd_family, &ss);
	(void)sendto(ps->fd, out, (size_t)len, MSG_DONTWAIT, (struct sockaddr *)&ss, sl);
}

static void
probe_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct probe_srv *ps = w->data;
	struct relay *r = ps->r;
	(void)loop;
	(void)revents;

	for (int i = 0; i < PROBE_BATCH; i++) {
		uint8_t buf[PROTO_MAX_LEN + 1];
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		ssize_t n = recvfrom(ps->fd, buf, sizeof(buf), 0, (struct sockaddr *)&ss, &len);
		if (n < 0)
			return;	/* EAGAIN, or an ICMP error queued by an earlier reply */

		struct waiter wt = { .t_recv = clock_mono_us() };
		struct proto_msg m;
		struct proto_hdr h;
		const struct auth_key *k;
		size_t used;
		enum proto_err why;
		if (ep_from_sockaddr((struct sockaddr *)&ss, len, &wt.from) == -1) {
			r->ctr.probes_dropped++;
			continue;
		}
		if (rauth_identity(r) && n > 3 && buf[3] == PROTO_HELLO) {
			probe_hello(ps, buf, (size_t)n, &wt.from, wt.t_recv);
			continue;
		}
		/* An unknown sender is dropped like a forgery. */
		if (proto_decode_with(buf, (size_t)n, rauth_key_fn, r, &m, &used, &why) != PROTO_OK ||
		    used != (size_t)n || m.type != PROTO_PROBE_REQUEST) {
			/* Silently: an answer would help scanners and reflectors. */
			r->ctr.probes_dropped++;
			continue;
		}
		h.type = m.type;
		h.id = m.id;
		h.sender = m.sender;
		if ((k = rauth_key_fn(r, &h)) == NULL) {
			r->ctr.probes_dropped++;
			continue;
		}
		wt.key = *k;
		wt.id = m.id;
		/* The requester's rate before the replay cache, so that no
		 * source fills it faster than its rate (admit.h). */
		switch (admit_message(r->admit, ADMIT_PROBE, &wt.from.addr, m.ts_us, m.nonce,
		    wt.t_recv, clock_real_us())) {
		case ADMIT_OK:
			probe_handle(ps, &m, &wt);
			break;
		case ADMIT_RATE:
			probe_reply(ps, &wt, &m.u.probe_req.target, PROBE_ST_RATE_LIMITED, 0, 0);
			break;
		case ADMIT_STALE:
		case ADMIT_REPLAY:
			r->ctr.probes_dropped++;
			break;
		}
	}
}

static void
ackcheck_begin(struct probe_srv *ps)
{
	struct ev_loop *loop = ps->r->loop;
	double wait = PROBE_ACKCHECK_RETRY_S;

	ps->ack_tries++;
	if (sock_ackcheck_begin(&ps->ack) == 0) {
		ps->ack_state = PROBE_ACK_CHECKING;
		/* From now, not from the loop's cached time, which may be
		 * older: the check must not end before its bound. */
		ev_now_update(loop);
		wait = (SOCK_ACK_HOLD_MAX_MS + 2) / 1000.0;
	} else if (ps->ack_tries >= PROBE_ACKCHECK_TRIES) {
		ps->ack_state = PROBE_ACK_UNSURE;
		log_warn("cannot check on loopback that this kernel defers a connect's last ACK "
		    "(%s); [probe] handover stays as configured", strerror(errno));
		return;
	}
	ev_timer_set(&ps->ack_timer, wait, 0.);
	ev_timer_start(loop, &ps->ack_timer);
}

static void
ackcheck_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct probe_srv *ps = w->data;
	uint64_t held_us;
	(void)loop;
	(void)revents;

	if (ps->ack_state != PROBE_ACK_CHECKING) {	/* could not begin: again */
		ackcheck_begin(ps);
		return;
	}
	switch (sock_ackcheck_end(&ps->ack, &held_us)) {
	case SOCK_ACKCHECK_DEFERRED:
		ps->ack_state = PROBE_ACK_DEFERRED;
		log_debug("the kernel deferred a connect's last ACK %llu ms: handover can hold "
		    "measurements' connections", (unsigned long long)held_us / 1000);
		return;
	case SOCK_ACKCHECK_EARLY:
		ps->ack_state = PROBE_ACK_EARLY;
		log_warn("handover off: this kernel completed a connect's deferred handshake "
		    "within %llu ms, so a server's application could accept a measurement; "
		    "measuring by bare SYN, or by a connect reset at once",
		    (unsigned long long)held_us / 1000);
		return;
	case SOCK_ACKCHECK_UNSURE:
		break;
	}
	if (ps->ack_tries >= PROBE_ACKCHECK_TRIES) {
		ps->ack_state = PROBE_ACK_UNSURE;
		log_warn("could not tell on loopback whether this kernel defers a connect's last "
		    "ACK (%d tries); [probe] handover stays as configured", ps->ack_tries);
		return;
	}
	ps->ack_state = PROBE_ACK_PENDING;
	ev_timer_set(&ps->ack_timer, PROBE_ACKCHECK_RETRY_S, 0.);
	ev_timer_start(ps->r->loop, &ps->ack_timer);
}

struct probe_srv *
probe_start(struct relay *r, int fd, struct synp_sock *synp)
{
	struct probe_srv *ps = calloc(1, sizeof(*ps));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (ps == NULL)
		goto fail;
	ps->r = r;
	ps->fd = fd;
	ps->fd_family = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 ? ss.ss_family :
	    AF_INET;
	ps->synp = synp;
	TAILQ_INIT(&ps->ho_fifo);
	ev_timer_init(&ps->ho_timer, handover_cb, 0., 0.);
	ps->ho_timer.data = ps;
	ev_timer_init(&ps->ack_timer, ackcheck_cb, 0., 0.);
	ps->ack_timer.data = ps;
	if (htab_init(&ps->jobs, 64) == -1 || htab_init(&ps->ho, 64) == -1)
		goto fail;
	ps->cache = rttc_new(PROBE_CACHE_SLOTS);
	ps->rl_dst = rl_new(PROBE_RL_SLOTS, r->conf.destination_rate, r->conf.destination_burst);
	ps->rl_hello = rl_new(PROBE_RL_SLOTS, r->conf.requester_rate, r->conf.requester_burst);
	ps->rl_hello_all = rl_new(1, PROBE_HELLO_RATE, PROBE_HELLO_BURST);
	if (!ps->cache || !ps->rl_dst || !ps->rl_hello || !ps->rl_hello_all)
		goto fail;
	ev_io_init(&ps->io, probe_read_cb, fd, EV_READ);
	ps->io.data = ps;
	ev_io_start(r->loop, &ps->io);
	/* Measurements meanwhile trust the deferral, as before the check:
	 * no start waits for it. */
	ackcheck_begin(ps);
	return ps;
fail:
	if (ps) {
		rttc_free(ps->cache);
		rl_free(ps->rl_dst);
		rl_free(ps->rl_hello);
		rl_free(ps->rl_hello_all);
		htab_destroy(&ps->jobs);
		htab_destroy(&ps->ho);
		free(ps);
	}
	close(fd);
	synp_close(synp);
	return NULL;
}

void
probe_reconfigure(struct probe_srv *ps)
{
	rl_set(ps->rl_dst, ps->r->conf.destination_rate, ps->r->conf.destination_burst);
	rl_set(ps->rl_hello, ps->r->conf.requester_rate, ps->r->conf.requester_burst);
}

void
probe_stop(struct probe_srv *ps)
{
	if (ps == NULL)
		return;
	ev_io_stop(ps->r->loop, &ps->io);
	close(ps->fd);
	ps->fd = -1;
	/* Waiters get no answer; their clients stop waiting after C_wait. */
	for (size_t b = 0; b < ps->jobs.nb; b++) {
		struct hnode *n;
		while ((n = ps->jobs.b[b]) != NULL) {
			struct job *j = container_of(n, struct job, hn);
			j->nw = 0;
			job_finish(j, PROBE_ST_BUSY, 0);
		}
	}
	htab_destroy(&ps->jobs);
	ev_timer_stop(ps->r->loop, &ps->ho_timer);
	while (ps->nho > 0) {
		struct handover *h = TAILQ_FIRST(&ps->ho_fifo);
		sock_close_rst(h->fd);
		handover_drop(ps, h);
	}
	htab_destroy(&ps->ho);
	ev_timer_stop(ps->r->loop, &ps->ack_timer);
	if (ps->ack_state == PROBE_ACK_CHECKING) {
		uint64_t held_us;
		(void)sock_ackcheck_end(&ps->ack, &held_us);
	}
	synp_close(ps->synp);
	rttc_free(ps->cache);
	rl_free(ps->rl_dst);
	rl_free(ps->rl_hello);
	rl_free(ps->rl_hello_all);
	free(ps);
}

unsigned long long
probe_handovers_held(const struct probe_srv *ps)
{
	return ps ? ps->nho : 0;
}

enum probe_ack_state
probe_ack_state(const struct probe_srv *ps)
{
	return ps ? ps->ack_state : PROBE_ACK_PENDING;
}

const struct synp_stats *
probe_syn_stats(const struct probe_srv *ps)
{
	return ps && ps->synp ? synp_stats(ps->synp) : NULL;
}

struct cache_walk {
	void (*fn)(void *arg, const struct probe_cache_view *v);
	void *arg;
	uint64_t now, ttl, fail_ttl;
};

static void
cache_walk_cb(void *arg, const struct endpoint *e, uint32_t rtt_us, uint8_t status,
    uint64_t measured_us)
{
	struct cache_walk *w = arg;
	/* The TTLs probe_handle answers with: failures are measured again
	 * sooner. */
	uint64_t ttl = status == PROBE_ST_OK || status == PROBE_ST_REFUSED ? w->ttl : w->fail_ttl;
	uint64_t age = w->now > measured_us ? w->now - measured_us : 0;
	struct probe_cache_view v = { .target = *e, .rtt_us = rtt_us, .status = status,
	    .age_us = age };

	if (age >= ttl)
		return;
	v.ttl_left_us = ttl - age;
	w->fn(w->arg, &v);
}

void
probe_cache_view(struct probe_srv *ps, void (*fn)(void *arg, const struct probe_cache_view *v),
    void *arg)
{
	uint64_t ttl = ps->r->conf.rtt_cache_ttl_ms * 1000;
	struct cache_walk w = { fn, arg, clock_mono_us(), ttl,
	    ttl < PROBE_FAIL_TTL_MS * 1000 ? ttl : PROBE_FAIL_TTL_MS * 1000 };

	rttc_walk(ps->cache, cache_walk_cb, &w);
}
