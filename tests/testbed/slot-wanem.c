/*
 * slot-wanem: the WAN emulator of the test bed (see docs/testbed.md).
 *
 * Runs in a router namespace whose forwarded IPv4 and IPv6 packets an
 * iptables and an ip6tables rule send to NFQUEUE queue N:
 *
 *   iptables -t mangle -A FORWARD -j NFQUEUE --queue-num N
 *   ip6tables -t mangle -A FORWARD -j NFQUEUE --queue-num N
 *   slot-wanem --queue N --matrix FILE [--stats PATH] [--maxlen PACKETS]
 *       [--seed S] [--verbose]
 *
 * Each packet is held for the one-way delay of its (source, destination)
 * pair and dropped with the pair's loss probability, both from the matrix
 * file (format in wanem_matrix.h; read again on SIGHUP). A pair's packets
 * leave in the order they came. Only the first WM_COPY_RANGE bytes of each
 * packet cross to user space, and GSO packets stay whole (NFQA_CFG_F_GSO),
 * so the cost is per packet, not per byte. Packets of zero delay get their
 * verdict at once; verdicts are gathered and sent many to a sendto (those
 * of one wake-up, or of every WM_RX_CHECK packets read under load). The
 * queue does not fail open: while slot-wanem is not running, the rule drops
 * what it would have delayed, rather than passing it undelayed. On SIGTERM
 * or SIGINT every held packet is accepted first.
 *
 *   --queue N         NFQUEUE queue number (0..65535)
 *   --matrix FILE     delays and losses
 *   --stats PATH      unix socket for the counters below
 *   --maxlen PACKETS  packets the kernel queue and the delay line hold; more
 *                     are dropped (counted in kernel_queue_dropped). Default
 *                     42000: 1 Gbit/s for 500 ms in 1500-byte packets.
 *   --seed S          seed of the loss draws (default random; logged)
 *   --verbose         debug logging
 *
 * With --stats PATH, a client that connects to the unix socket and sends
 * "counters\n" reads "name value" lines until EOF:
 *   received          packets read from the queue
 *   held              packets put on the delay line (cumulative)
 *   holding           packets on the delay line now
 *   holding_max       the most ever at once
 *   released          packets accepted, at once or after their delay
 *   dropped_loss      dropped by the pair's loss probability
 *   dropped_overflow  dropped because the delay line was full
 *   ipv6              IPv6 packets among those received
 *   non_ip            accepted at once, neither IPv4 nor IPv6
 *   verdict_errors    verdicts the kernel refused or that could not be sent
 *   enobufs           times the socket reported lost messages
 *   late_us_max       lateness of held packets' releases vs their due time
 *   late_us_avg
 *   late_over_1ms     releases more than 1 ms late
 *   reloads           matrix reloads that succeeded
 *   reload_errors     and that failed (the old matrix stays)
 *   kernel_queue_total, kernel_queue_dropped, kernel_user_dropped
 *                     from /proc/net/netfilter/nfnetlink_queue: packets in
 *                     the kernel queue, dropped for a full queue, and
 *                     dropped for a full socket buffer
 * received = released + dropped_loss + dropped_overflow + holding.
 */

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/if_ether.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <sodium.h>

#include "slot/addr.h"
#include "slot/clock.h"
#include "slot/log.h"
#include "slot/nlq.h"
#include "slot/sock.h"

#include "wanem_delayq.h"
#include "wanem_matrix.h"

/* The IPv4 header with options, or the fixed IPv6 header, is all we read. */
#define WM_COPY_RANGE 64
/* 1 Gbit/s for 500 ms in 1500-byte packets: 1e9 * 0.5 / 8 / 1500. */
#define WM_MAXLEN_DEFAULT 42000
/* Socket buffer per queued packet: a message with 64 bytes of payload
 * takes well under 1 KiB of skb truesize. */
#define WM_RCVBUF_PER_PKT 1024
#define WM_RCVBUF_MIN (4 << 20)
/* Messages read per wake-up, so timers and signals are not starved. Every
 * WM_RX_CHECK messages the verdicts so far go out, with those of held
 * packets that fell due meanwhile: under load a wake-up's worth of verdicts
 * would otherwise wait for the whole budget (about 2 ms). */
#define WM_RX_BUDGET 1024
#define WM_RX_CHECK 32
/* One verdict message is 32 bytes: 2048 per sendto. */
#define WM_VBUF_SIZE 65536
#define WM_POP_BATCH 256
#define WM_STATS_CLIENTS 8
#define WM_STATS_LINE 64

enum { WM_EV_NL, WM_EV_TIMER, WM_EV_SIGNAL, WM_EV_LISTEN, WM_EV_CLIENT };

/* verdict_errors and enobufs are the queue's (wm_qstats). */
struct wm_counters {
	uint64_t received, held, holding_max, released, dropped_loss;
	uint64_t dropped_overflow, non_ip, ipv6;
	uint64_t late_us_max, late_us_sum, late_n, late_over_1ms;
	uint64_t reloads, reload_errors;
};

struct wm_client {
	int fd;			/* -1: free slot */
	size_t len;
	char buf[WM_STATS_LINE];
};

struct wanem {
	uint16_t queue;
	const char *matrix_path;
	const char *stats_path;
	uint32_t maxlen;
	uint64_t rng;

	struct nlq *q;
	struct nlq_stats said;	/* the queue's counters as last logged */
	int epfd, tfd, sfd, lfd;
	uint64_t armed_us;	/* timer's expiry, UINT64_MAX if disarmed */

	struct wm_matrix *matrix;
	struct wm_dq *dq;
	struct wm_dq_item items[WM_POP_BATCH];


	bool exiting;
	struct wm_counters c;
	struct wm_client clients[WM_STATS_CLIENTS];
	unsigned evict;
};

static void
wm_usage(FILE *f)
{
	fprintf(f, "usage: slot-wanem --queue N --matrix FILE [--stats PATH] "
	    "[--maxlen PACKETS] [--seed S] [--verbose]\n");
}

/* splitmix64: small, fast, and reproducible from --seed. */
static uint64_t
wm_rand(struct wanem *w)
{
	uint64_t z = (w->rng += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static bool
wm_lose(struct wanem *w, double loss)
{
	if (loss <= 0)
		return false;
	return (double)(wm_rand(w) >> 11) * 0x1.0p-53 < loss;
}

/* Says what the queue's counters tell since last time: the first refused
 * verdict and the first overrun (the counts say how often after), and any
 * truncated or malformed message. */
static void
wm_qlog(struct wanem *w)
{
	struct nlq_stats s;

	nlq_stats(w->q, &s);
	if (s.refused > 0 && w->said.refused == 0)
		log_warnx("kernel refused a verdict: %s", strerror(s.first_refusal));
	if (s.overruns > 0 && w->said.overruns == 0)
		log_warnx("netlink socket overran: the kernel dropped packets "
		    "(kernel_user_dropped counts them)");
	/* MSG_TRUNC: cannot happen with our copy range. */
	if (s.truncated > w->said.truncated)
		log_warnx("truncated message from the kernel");
	if (s.malformed > w->said.malformed)
		log_warnx("malformed packet message from the kernel");
	w->said = s;
}

/* Sends the verdicts gathered so far in one sendto. */
static void
wm_flush(struct wanem *w)
{
	size_t n = nlq_pending(w->q);

	/* The packets stay in the kernel queue; nothing to retry with that
	 * would not fail the same way. */
	if (nlq_flush(w->q) == -1)
		log_warn("sending %zu verdicts", n);
}

static void
wm_verdict(struct wanem *w, uint32_t id, int verdict)
{
	size_t n = nlq_pending(w->q);

	/* A full batch goes out first. */
	if (nlq_verdict(w->q, id, verdict) == -1)
		log_warn("sending %zu verdicts", n);
	if (verdict == NF_ACCEPT)
		w->c.released++;
}

/* Accepts every held packet due at now (all of them with UINT64_MAX). */
static void
wm_release(struct wanem *w, uint64_t now)
{
	size_t i, n;
	uint64_t late;

	do {
		n = wm_dq_pop_due(w->dq, now, w->items, WM_POP_BATCH);
		for (i = 0; i < n; i++) {
			wm_verdict(w, w->items[i].id, NF_ACCEPT);
			if (now == UINT64_MAX)
				continue;
			late = now - w->items[i].due_us;
			if (late > w->c.late_us_max)
				w->c.late_us_max = late;
			w->c.late_us_sum += late;
			w->c.late_over_1ms += late > 1000;
			w->c.late_n++;
		}
	} while (n == WM_POP_BATCH);
}

static void
wm_packet(void *user, const struct nlq_pkt *p)
{
	struct wanem *w = user;
	const struct wm_link *link;
	const uint8_t *ip = p->data;
	struct addr src = { 0 }, dst = { 0 };
	uint64_t due, pair;

	w->c.received++;
	if (w->exiting) {
		wm_verdict(w, p->id, NF_ACCEPT);
		return;
	}
	if (p->hw_protocol == ETH_P_IP && p->caplen >= 20 && ip[0] >> 4 == 4) {
		src.family = dst.family = AF_INET;
		memcpy(src.bytes, ip + 12, 4);
		memcpy(dst.bytes, ip + 16, 4);
	} else if (p->hw_protocol == ETH_P_IPV6 && p->caplen >= 40 && ip[0] >> 4 == 6) {
		src.family = dst.family = AF_INET6;
		memcpy(src.bytes, ip + 8, 16);
		memcpy(dst.bytes, ip + 24, 16);
		w->c.ipv6++;
	} else {
		w->c.non_ip++;
		wm_verdict(w, p->id, NF_ACCEPT);
		return;
	}
	link = wm_matrix_lookup_addr(w->matrix, &src, &dst, &pair);
	if (wm_lose(w, link->loss)) {
		w->c.dropped_loss++;
		wm_verdict(w, p->id, NF_DROP);
		return;
	}
	switch (wm_dq_push(w->dq, p->id, pair, clock_mono_us(), link->delay_us, &due)) {
	case WM_DQ_NOW:
		wm_verdict(w, p->id, NF_ACCEPT);
		break;
	case WM_DQ_HELD:
		w->c.held++;
		if (wm_dq_len(w->dq) > w->c.holding_max)
			w->c.holding_max = wm_dq_len(w->dq);
		break;
	default:
		w->c.dropped_overflow++;
		wm_verdict(w, p->id, NF_DROP);
		break;
	}
}

/* Reads what the socket holds, up to a budget. Returns 0, or -1 on a
 * socket error other than running dry. */
static int
wm_rx(struct wanem *w)
{
	uint64_t now;
	int i, rc;

	for (i = 0; i < WM_RX_BUDGET / WM_RX_CHECK; i++) {
		if ((rc = nlq_read(w->q, WM_RX_CHECK)) == -1)
			log_warn("reading the queue");
		wm_qlog(w);
		if (rc != 1)
			return rc;
		now = clock_mono_us();
		if (wm_dq_next_due(w->dq) <= now)
			wm_release(w, now);
		wm_flush(w);
	}
	return 0;
}

/* Opens the queue and binds it; packets that arrive meanwhile are
 * handled. */
static void
wm_nl_open(struct wanem *w)
{
	struct nlq_params p = {
		.num = w->queue,
		.maxlen = w->maxlen,
		.copy_range = WM_COPY_RANGE,
		/* GSO on: big packets stay whole and need no checksumming.
		 * Fail-open explicitly off. */
		.flags = NFQA_CFG_F_GSO,
		.mask = NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN,
		.vbuf = WM_VBUF_SIZE,
	};
	socklen_t len = sizeof(int);
	char err[256];
	uint64_t want;
	int got = 0;

	/* Room for a full queue's messages, so the kernel never drops for a
	 * slow reader before the queue itself is full. FORCE passes
	 * net.core.rmem_max (we are root). */
	want = (uint64_t)w->maxlen * WM_RCVBUF_PER_PKT;
	if (want < WM_RCVBUF_MIN)
		want = WM_RCVBUF_MIN;
	p.rcvbuf = want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;
	if ((w->q = nlq_open(&p, wm_packet, w, err, sizeof(err))) == NULL)
		fatalx("%s", err);
	/* The kernel grants twice what it was asked, for its bookkeeping. */
	(void)getsockopt(nlq_fd(w->q), SOL_SOCKET, SO_RCVBUF, &got, &len);
	if (got < p.rcvbuf)
		log_warnx("netlink receive buffer %d bytes, not %d", got, p.rcvbuf);
	else
		log_debug("netlink receive buffer %d bytes", got);
	if (nlq_bind(w->q, err, sizeof(err)) == -1)
		fatalx("%s", err);
}

static void
wm_timer_arm(struct wanem *w)
{
	struct itimerspec its = { 0 };
	uint64_t due = wm_dq_next_due(w->dq);

	if (due == w->armed_us)
		return;
	if (due != UINT64_MAX) {
		its.it_value.tv_sec = (time_t)(due / 1000000);
		its.it_value.tv_nsec = (long)(due % 1000000) * 1000;
	}
	if (timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &its, NULL) == -1) {
		log_warn("timerfd_settime");
		return;
	}
	w->armed_us = due;
}

static void
wm_reload(struct wanem *w)
{
	char err[256];

	if (wm_matrix_reload(&w->matrix, w->matrix_path, err, sizeof(err)) == -1) {
		w->c.reload_errors++;
		log_warnx("reload: %s; keeping the previous matrix", err);
		return;
	}
	w->c.reloads++;
	log_info("reloaded %s: %zu pairs, default %.3f ms loss %g", w->matrix_path,
	    wm_matrix_count(w->matrix),
	    (double)wm_matrix_default(w->matrix)->delay_us / 1000.0,
	    wm_matrix_default(w->matrix)->loss);
}

/* Kernel's view of our queue, from /proc (this namespace's). */
static void
wm_kernel_stats(const struct wanem *w, uint64_t out[3])
{
	unsigned q, pid, total, mode, range, qdrop, udrop;
	char line[256];
	FILE *f;

	out[0] = out[1] = out[2] = 0;
	if ((f = fopen("/proc/net/netfilter/nfnetlink_queue", "re")) == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "%u %u %u %u %u %u %u", &q, &pid, &total, &mode,
		    &range, &qdrop, &udrop) == 7 && q == w->queue) {
			out[0] = total;
			out[1] = qdrop;
			out[2] = udrop;
		}
	fclose(f);
}

static int
wm_counters_fmt(const struct wanem *w, char *buf, size_t len)
{
	const struct wm_counters *c = &w->c;
	struct nlq_stats q;
	uint64_t k[3];

	wm_kernel_stats(w, k);
	nlq_stats(w->q, &q);
	return snprintf(buf, len,
	    "received %" PRIu64 "\n" "held %" PRIu64 "\n" "holding %zu\n"
	    "holding_max %" PRIu64 "\n" "released %" PRIu64 "\n"
	    "dropped_loss %" PRIu64 "\n" "dropped_overflow %" PRIu64 "\n"
	    "ipv6 %" PRIu64 "\n" "non_ip %" PRIu64 "\n" "verdict_errors %" PRIu64 "\n"
	    "enobufs %" PRIu64 "\n" "late_us_max %" PRIu64 "\n"
	    "late_us_avg %" PRIu64 "\n" "late_over_1ms %" PRIu64 "\n"
	    "reloads %" PRIu64 "\n"
	    "reload_errors %" PRIu64 "\n" "kernel_queue_total %" PRIu64 "\n"
	    "kernel_queue_dropped %" PRIu64 "\n" "kernel_user_dropped %" PRIu64 "\n",
	    c->received, c->held, wm_dq_len(w->dq), c->holding_max, c->released,
	    c->dropped_loss, c->dropped_overflow, c->ipv6, c->non_ip,
	    (uint64_t)(q.refused + q.lost), (uint64_t)q.overruns, c->late_us_max, c->late_n > 0 ? c->late_us_sum / c->late_n : 0,
	    c->late_over_1ms, c->reloads, c->reload_errors, k[0], k[1], k[2]);
}

static void
wm_client_close(struct wm_client *cl)
{
	close(cl->fd);		/* also leaves the epoll set */
	cl->fd = -1;
}

static void
wm_client_read(struct wanem *w, struct wm_client *cl)
{
	char out[1024];
	ssize_t r;
	char *nl;
	int i, n;

	r = read(cl->fd, cl->buf + cl->len, sizeof(cl->buf) - 1 - cl->len);
	if (r == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r == -1 || (r == 0 && cl->len == 0)) {
		wm_client_close(cl);
		return;
	}
	cl->len += (size_t)r;
	cl->buf[cl->len] = '\0';
	nl = strchr(cl->buf, '\n');
	if (nl == NULL && r == 0)	/* EOF ends the line too */
		nl = cl->buf + cl->len;
	if (nl == NULL && cl->len < sizeof(cl->buf) - 1)
		return;
	if (nl == NULL)
		n = snprintf(out, sizeof(out), "error line too long\n");
	else {
		*nl = '\0';
		if (nl > cl->buf && nl[-1] == '\r')
			nl[-1] = '\0';
		if (strcmp(cl->buf, "counters") == 0)
			n = wm_counters_fmt(w, out, sizeof(out));
		else
			n = snprintf(out, sizeof(out), "error unknown command (try counters)\n");
	}
	/* A fresh socket buffer takes this whole; a client that does not read
	 * loses the rest rather than stalling the emulator. */
	if (n > 0 && write(cl->fd, out, (size_t)n) == -1)
		log_debug("stats client: write: %s", strerror(errno));
	/* Closing with unread input would reset the connection and could
	 * discard the reply: read what is there first (non-blocking). */
	for (i = 0; i < 16 && read(cl->fd, out, sizeof(out)) > 0; i++)
		;
	wm_client_close(cl);
}

static void
wm_accept(struct wanem *w)
{
	struct epoll_event ev = { .events = EPOLLIN };
	size_t i;
	int fd;

	if ((fd = accept4(w->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) == -1)
		return;
	for (i = 0; i < WM_STATS_CLIENTS && w->clients[i].fd != -1; i++)
		;
	if (i == WM_STATS_CLIENTS) {
		/* All taken by clients that say nothing: the next in turn goes,
		 * so idle connections cannot lock the counters away. */
		i = w->evict++ % WM_STATS_CLIENTS;
		wm_client_close(&w->clients[i]);
	}
	ev.data.u64 = WM_EV_CLIENT | (uint64_t)i << 8;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) == -1) {
		close(fd);
		return;
	}
	w->clients[i].fd = fd;
	w->clients[i].len = 0;
}

static void
wm_epoll_add(struct wanem *w, int fd, uint64_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = tag };

	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) == -1)
		fatal("epoll_ctl");
}

static void
wm_signal(struct wanem *w)
{
	struct signalfd_siginfo si;

	while (read(w->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP)
			wm_reload(w);
		else {
			log_info("signal %u: releasing %zu held packets and exiting",
			    si.ssi_signo, wm_dq_len(w->dq));
			w->exiting = true;
		}
	}
}

static void
wm_setup(struct wanem *w)
{
	sigset_t mask;
	char err[256];
	size_t i;

	if (wm_matrix_load(w->matrix_path, &w->matrix, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if ((w->dq = wm_dq_new(w->maxlen)) == NULL)
		fatal("delay line of %u packets", w->maxlen);
	for (i = 0; i < WM_STATS_CLIENTS; i++)
		w->clients[i].fd = -1;
	w->armed_us = UINT64_MAX;
	w->lfd = -1;

	/* Timer slack would round our wake-ups up by 50 us by default. */
	if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == -1)
		log_warn("PR_SET_TIMERSLACK");
	sigemptyset(&mask);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) == -1)
		fatal("sigprocmask");
	signal(SIGPIPE, SIG_IGN);
	if ((w->epfd = epoll_create1(EPOLL_CLOEXEC)) == -1)
		fatal("epoll_create1");
	if ((w->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) == -1)
		fatal("signalfd");
	if ((w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) == -1)
		fatal("timerfd_create");
	wm_epoll_add(w, w->sfd, WM_EV_SIGNAL);
	wm_epoll_add(w, w->tfd, WM_EV_TIMER);
	if (w->stats_path != NULL) {
		if ((w->lfd = sock_listen_unix(w->stats_path, 0600, 16)) == -1)
			fatal("stats socket %s", w->stats_path);
		wm_epoll_add(w, w->lfd, WM_EV_LISTEN);
	}
	wm_nl_open(w);
	wm_epoll_add(w, nlq_fd(w->q), WM_EV_NL);
}

static void
wm_loop(struct wanem *w)
{
	struct epoll_event evs[16];
	uint64_t exp, now;
	int i, n;

	while (!w->exiting) {
		n = epoll_wait(w->epfd, evs, 16, -1);
		if (n == -1) {
			if (errno == EINTR)
				continue;
			fatal("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			switch (tag & 0xff) {
			case WM_EV_NL:
				if (wm_rx(w) == -1)
					w->exiting = true;
				break;
			case WM_EV_TIMER:
				if (read(w->tfd, &exp, sizeof(exp)) == -1 && errno != EAGAIN)
					log_warn("timerfd read");
				/* Fired, so it is no longer armed. */
				w->armed_us = UINT64_MAX;
				break;
			case WM_EV_SIGNAL:
				wm_signal(w);
				break;
			case WM_EV_LISTEN:
				wm_accept(w);
				break;
			case WM_EV_CLIENT:
				if (w->clients[tag >> 8].fd != -1)
					wm_client_read(w, &w->clients[tag >> 8]);
				break;
			}
		}
		now = clock_mono_us();
		if (wm_dq_next_due(w->dq) <= now)
			wm_release(w, now);
		wm_flush(w);
		wm_timer_arm(w);
	}
}

/* Accepts everything held and everything still unread, so stopping the
 * emulator loses nothing it had. */
static void
wm_shutdown(struct wanem *w)
{
	size_t held = wm_dq_len(w->dq);
	uint64_t before = w->c.received;
	struct nlq_stats q;
	size_t i;

	w->exiting = true;
	wm_release(w, UINT64_MAX);
	(void)wm_rx(w);
	wm_flush(w);
	nlq_stats(w->q, &q);
	log_info("released %zu held and %" PRIu64 " unread packets; received %" PRIu64
	    " released %" PRIu64 " dropped_loss %" PRIu64 " dropped_overflow %" PRIu64
	    " verdict_errors %llu", held, w->c.received - before, w->c.received,
	    w->c.released, w->c.dropped_loss, w->c.dropped_overflow, q.refused + q.lost);
	nlq_close(w->q);
	for (i = 0; i < WM_STATS_CLIENTS; i++)
		if (w->clients[i].fd != -1)
			wm_client_close(&w->clients[i]);
	if (w->lfd != -1) {
		close(w->lfd);
		unlink(w->stats_path);
	}
	close(w->tfd);
	close(w->sfd);
	close(w->epfd);
	wm_dq_free(w->dq);
	wm_matrix_free(w->matrix);
}

static uint64_t
wm_parse_uint(const char *opt, const char *s, uint64_t min, uint64_t max)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' || v < min || v > max)
		fatalx("--%s: bad value '%s' (%" PRIu64 "..%" PRIu64 ")", opt, s, min, max);
	return v;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "queue", required_argument, NULL, 'q' },
		{ "matrix", required_argument, NULL, 'm' },
		{ "stats", required_argument, NULL, 's' },
		{ "maxlen", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 'S' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct wanem w;	/* large buffers: not on the stack */
	bool have_queue = false, have_seed = false;
	int ch;

	log_init(argv[0], SLOG_INFO);
	/* The hash tables draw their keys from libsodium. */
	if (sodium_init() < 0)
		fatalx("sodium_init");
	w.maxlen = WM_MAXLEN_DEFAULT;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'q':
			w.queue = (uint16_t)wm_parse_uint("queue", optarg, 0, 65535);
			have_queue = true;
			break;
		case 'm':
			w.matrix_path = optarg;
			break;
		case 's':
			w.stats_path = optarg;
			break;
		case 'l':
			w.maxlen = (uint32_t)wm_parse_uint("maxlen", optarg, 1, 1u << 24);
			break;
		case 'S':
			w.rng = wm_parse_uint("seed", optarg, 0, UINT64_MAX);
			have_seed = true;
			break;
		case 'v':
			log_set_level(SLOG_DEBUG);
			break;
		case 'h':
			wm_usage(stdout);
			return 0;
		default:
			wm_usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !have_queue || w.matrix_path == NULL) {
		wm_usage(stderr);
		return 2;
	}
	if (!have_seed && getrandom(&w.rng, sizeof(w.rng), 0) != (ssize_t)sizeof(w.rng))
		w.rng = clock_real_us() ^ (uint64_t)getpid();

	wm_setup(&w);
	log_info("queue %u: %zu pairs, default %.3f ms loss %g, maxlen %u, seed %" PRIu64,
	    w.queue, wm_matrix_count(w.matrix),
	    (double)wm_matrix_default(w.matrix)->delay_us / 1000.0,
	    wm_matrix_default(w.matrix)->loss, w.maxlen, w.rng);
	wm_loop(&w);
	wm_shutdown(&w);
	return 0;
}
