#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/sock.h"
#include "slot/syntok.h"
#include "ccwatch.h"
#include "chain.h"
#include "datahold.h"
#include "flow.h"
#include "initcwnd.h"
#include "pipe.h"
#include "probe.h"

enum pipe_state { PS_CONNECTING, PS_PENDING, PS_OPEN };

struct pipe;

struct half {
	struct pipe *p;
	int fd;			/* -1 when absent */
	ev_io io;
	int events;		/* what io is started with, 0 when stopped */
};

struct dir {
	struct flow f;
	struct half *src, *dst;
	struct kpipe *kp;	/* only while bytes are in flight */
	int kp_wait;		/* no kernel pipe to be had: reading paused */
	unsigned kp_tries;	/* ... failed tries in a row (logged once) */
	struct ccwatch ccw;	/* the destination leg's algorithm on loss */
	bool filled;		/* the destination's send buffer has been full */
};

struct pipe;

struct owner {			/* pending pipes of one control peer */
	struct hnode hn;
	struct addr addr;
	size_t n;
	TAILQ_HEAD(, pipe) tok;	/* ... those with a token */
};

struct pipe {
	struct relay *r;
	uint64_t id;
	enum pipe_state state;
	struct endpoint client, server;
	struct ctrl_conn *ctl;	/* while connecting: where the answer goes */
	uint32_t req_id;
	struct owner *owner;	/* while connecting or pending */
	struct hnode hn;	/* r->pending (or r->pending_tok if tokened), while
				 * connecting or pending */
	struct chain *chain;	/* NULL: the server is the next hop (chain.c) */
	int tokened;		/* matched by token, not by client endpoint */
	uint8_t token[PROTO_TOKEN_LEN];
	TAILQ_ENTRY(pipe) link;	/* r->pipes */
	TAILQ_ENTRY(pipe) tok_link;	/* owner->tok, while tokened and pending */
	struct half cli, srv;
	struct dir c2s, s2c;
	ev_timer timer;		/* connect, pending, idle or half-closed timeout */
	uint64_t limit_ms;	/* open: the inactivity limit timer runs for */
	ev_timer retry;		/* a direction waits for a kernel pipe */
	ev_timer later;		/* open: the server leg's keepalive and user
				 * timeout are due (half_attach) */
	int reserved;		/* holds its two kernel pipes' reservation */
	ev_tstamp started, connected, last_io;
};

enum close_how { CLOSE_CLEAN, CLOSE_RESET };

static void pipe_close(struct pipe *p, enum close_how how, const char *why);
static void half_cb(struct ev_loop *loop, ev_io *w, int revents);
static void timer_cb(struct ev_loop *loop, ev_timer *w, int revents);
static void later_cb(struct ev_loop *loop, ev_timer *w, int revents);
static void pipe_open(struct pipe *p);
static void adopt_held(struct pipe *p);
static void pipe_timer_update(struct pipe *p);
static uint64_t pipe_limit_ms(const struct pipe *p);

/* A data connection that matched no pipe is reset (by the caller): counted
 * and logged by what its SYN said. */
static void
data_unmatched_reset(struct relay *r, const struct endpoint *peer, enum syntok_result tok)
{
	char b[EP_STRLEN];

	if (tok == SYNTOK_OK) {
		r->ctr.data_token_unknown++;
		log_info("data connection from %s: unknown pipe token: reset", ep_fmt(peer, b));
	} else {
		r->ctr.data_rejected++;
		log_info("data connection from %s matches no pending pipe: reset",
		    ep_fmt(peer, b));
	}
}

/* A held data connection (datahold.h) leaves the hold. */
static void
held_gone(void *arg, const struct held *h, enum held_end why)
{
	struct relay *r = arg;
	char b[EP_STRLEN];

	switch (why) {
	case HELD_JOINED:
		r->ctr.data_held_joined++;
		log_info("data connection from %s joins the pipe that came after it",
		    ep_fmt(&h->peer, b));
		return;
	case HELD_EVICTED:
		r->ctr.data_held_evicted++;
		break;
	case HELD_EXPIRED:
		r->ctr.data_held_expired++;
		break;
	case HELD_CLEARED:
		break;
	}
	data_unmatched_reset(r, &h->peer, h->tok);
}

int
pipes_init(struct relay *r)
{
	TAILQ_INIT(&r->pipes);
	r->npipes = 0;
	r->next_pipe_id = 1;
	if (htab_init(&r->pending, 64) == -1)
		return -1;
	if (htab_init(&r->owners, 16) == -1) {
		htab_destroy(&r->pending);
		return -1;
	}
	if (htab_init(&r->pending_tok, 64) == -1) {
		htab_destroy(&r->pending);
		htab_destroy(&r->owners);
		return -1;
	}
	datahold_init(&r->hold, r->loop, (double)r->conf.data_hold_ms / 1000.0, held_gone, r);
	return 0;
}

void
pipes_destroy(struct relay *r)
{
	datahold_clear(&r->hold);
	pipe_reset_all(r);
	htab_destroy(&r->pending);
	htab_destroy(&r->owners);
	htab_destroy(&r->pending_tok);
}

/* --- pending table and per-client counts --- */

static struct pipe *
pending_find(struct relay *r, const struct endpoint *client)
{
	uint64_t h = ep_hash(client, r->hkey);

	for (struct hnode *n = htab_first(&r->pending, h); n; n = htab_next(n, h)) {
		struct pipe *p = container_of(n, struct pipe, hn);
		if (ep_eq(&p->client, client))
			return p;
	}
	return NULL;
}

/* A token is a capability: compared in constant time. */
static struct pipe *
pending_tok_find(struct relay *r, const uint8_t token[PROTO_TOKEN_LEN])
{
	uint64_t h = bytes_hash(token, PROTO_TOKEN_LEN, r->hkey);

	for (struct hnode *n = htab_first(&r->pending_tok, h); n; n = htab_next(n, h)) {
		struct pipe *p = container_of(n, struct pipe, hn);
		if (sodium_memcmp(p->token, token, PROTO_TOKEN_LEN) == 0)
			return p;
	}
	return NULL;
}

/* A data connection whose SYN came without a token (a middlebox stripped
 * the option, or the SYN was not saved: syncookies): the one tokened pipe
 * still waiting for its data connection whose client's control connection
 * comes from the same address, if there is exactly one. NATs keep one
 * public address per host in practice (RFC 4787 "paired" pooling). */
static struct owner *owner_get(struct relay *r, const struct addr *a, int create);

static struct pipe *
tokened_by_addr(struct relay *r, const struct addr *a)
{
	struct owner *o = owner_get(r, a, 0);
	struct pipe *p, *found = NULL;

	/* Only that address's tokened pipes still pending are looked at:
	 * anyone may connect to the data port, and each connection without a
	 * token would otherwise cost a walk of many pipes (or of a table that
	 * a burst of tokened pipes once grew). */
	if (o == NULL)
		return NULL;
	TAILQ_FOREACH(p, &o->tok, tok_link) {
		if (p->state == PS_OPEN || p->cli.fd >= 0)
			continue;
		if (found)
			return NULL;
		found = p;
	}
	return found;
}

static struct owner *
owner_get(struct relay *r, const struct addr *a, int create)
{
	uint64_t h = addr_hash(a, r->hkey);
	struct owner *o;

	for (struct hnode *n = htab_first(&r->owners, h); n; n = htab_next(n, h)) {
		o = container_of(n, struct owner, hn);
		if (addr_eq(&o->addr, a))
			return o;
	}
	if (!create || (o = calloc(1, sizeof(*o))) == NULL)
		return NULL;
	o->addr = *a;
	TAILQ_INIT(&o->tok);
	htab_insert(&r->owners, &o->hn, h);
	return o;
}

/* The pipe stops being pending: out of the table, its owner's count down. */
static void
pending_leave(struct pipe *p)
{
	struct relay *r = p->r;

	if (p->owner == NULL)
		return;
	htab_remove(p->tokened ? &r->pending_tok : &r->pending, &p->hn);
	if (p->tokened)
		TAILQ_REMOVE(&p->owner->tok, p, tok_link);
	if (--p->owner->n == 0) {
		htab_remove(&r->owners, &p->owner->hn);
		free(p->owner);
	}
	p->owner = NULL;
	r->ctr.pipes_pending--;
}

/* --- watchers --- */

static void
half_set(struct half *h, int events)
{
	struct ev_loop *loop = h->p->r->loop;

	if (h->fd < 0 || h->events == events)
		return;
	if (h->events)
		ev_io_stop(loop, &h->io);
	h->events = events;
	if (events) {
		ev_io_set(&h->io, h->fd, events);
		ev_io_start(loop, &h->io);
	}
}

/* Recomputes what each socket waits for from the two flows: this is where
 * backpressure happens (no read interest while the peer is full). */
static void
pipe_update(struct pipe *p)
{
	int rc = flow_wants_read(&p->c2s.f) && !p->c2s.kp_wait;
	int rs = flow_wants_read(&p->s2c.f) && !p->s2c.kp_wait;

	half_set(&p->cli, (rc ? EV_READ : 0) |
	    (flow_wants_write(&p->s2c.f) ? EV_WRITE : 0));
	half_set(&p->srv, (rs ? EV_READ : 0) |
	    (flow_wants_write(&p->c2s.f) ? EV_WRITE : 0));
}

static void
half_init(struct pipe *p, struct half *h)
{
	h->p = p;
	h->fd = -1;
	h->events = 0;
	ev_io_init(&h->io, half_cb, -1, 0);
	h->io.data = h;
}

/* SO_LINGER {1, 0} while bytes bound for this socket may still be lost: if
 * the relay dies (even by SIGKILL) or drops the pipe, the kernel closes the
 * socket with a RST, so its peer never takes a cut stream for a complete one.
 * Disarmed once the direction into the socket is cleanly finished (EOF read
 * and everything written, FIN sent), so that the close then delivers what
 * the socket still buffers. */
static void
half_linger_rst(struct half *h, int on)
{
	struct linger l = { .l_onoff = on, .l_linger = 0 };

	if (h->fd >= 0)
		(void)setsockopt(h->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
}

/* The direction d finished cleanly: FIN to its destination, which may then
 * close gracefully. */
static void
dir_shutdown(struct dir *d)
{
	(void)shutdown(d->dst->fd, SHUT_WR);
	half_linger_rst(d->dst, 0);
}

static void
half_close(struct half *h, enum close_how how)
{
	if (h->fd < 0)
		return;
	half_set(h, 0);
	if (how == CLOSE_RESET)
		sock_close_rst(h->fd);
	else
		close(h->fd);
	h->fd = -1;
}

/* --- splice engine --- */

static void
dir_release_kpipe(struct relay *r, struct dir *d)
{
	if (d->kp && !flow_needs_kpipe(&d->f)) {
		kpipe_put(&r->kpipes, d->kp, 0);
		d->kp = NULL;
	}
}

static unsigned long long *
dir_counter(struct pipe *p, struct dir *d)
{
	return d == &p->c2s ? &p->r->ctr.bytes_client_to_server :
	    &p->r->ctr.bytes_server_to_client;
}

/* A socket of the pipe failed with err: reset the other one too. A peer that
 * stopped answering (keepalive or TCP_USER_TIMEOUT ran out) is counted. */
static void
pipe_peer_failed(struct pipe *p, int err, const char *why)
{
	char b[96];

	if (err == ETIMEDOUT) {
		p->r->ctr.pipes_peer_timeout++;
		snprintf(b, sizeof(b), "%s (peer timed out)", why);
		why = b;
	}
	pipe_close(p, CLOSE_RESET, why);
}

/* Bytes went out on d's destination, a leg the relay sends on: once it has
 * retransmitted, it takes [pipe] congestion_on_loss (ccwatch.h). */
static void
dir_cc_watch(struct pipe *p, struct dir *d)
{
	static int warned;
	struct relay *r = p->r;
	ev_tstamp now = ev_now(r->loop);
	unsigned retrans;

	if (r->cc_on_loss[0] == '\0' || !ccwatch_due(&d->ccw, now))
		return;
	r->ctr.congestion_checks++;
	if (sock_retransmits(d->dst->fd, &retrans) == -1) {
		ccwatch_stop(&d->ccw);
		return;
	}
	if (!ccwatch_seen(&d->ccw, now, retrans))
		return;
	/* Checked at start and reload: only a sysctl changed since can fail. */
	if (sock_set_congestion(d->dst->fd, r->cc_on_loss) == -1) {
		if (!warned++)
			log_warn("pipe %llu: congestion control %s on the %s leg after %u "
			    "retransmissions (said once)", (unsigned long long)p->id,
			    r->cc_on_loss, d->dst == &p->cli ? "client" : "server", retrans);
		return;
	}
	r->ctr.congestion_switches++;
	log_debug("pipe %llu: %s leg to %s after %u retransmissions",
	    (unsigned long long)p->id, d->dst == &p->cli ? "client" : "server",
	    r->cc_on_loss, retrans);
}

/* The first time the destination's send buffer is full: raised to
 * [pipe] send_buffer. The kernel grows a send buffer when the writer found
 * it full and an ACK comes; a relay writes only what has arrived, so in
 * slow start a round can outgrow the buffer before that, and its tail then
 * waits one round trip (docs/relay.md). Returns whether to write again. */
static bool
dir_filled(struct pipe *p, struct dir *d)
{
	struct relay *r = p->r;
	int rc;

	if (d->filled)
		return false;
	d->filled = true;
	if (r->conf.send_buffer == 0)
		return false;
	if (r->sndbuf_ok == 0) {
		r->sndbuf_ok = sock_sndbuf_check(&r->sndbuf_force) == 0 ? 1 : -1;
		if (r->sndbuf_ok == -1)
			log_warn("[pipe] send_buffer off: this kernel cannot unlock a send "
			    "buffer once set (SO_BUF_LOCK, Linux 5.14): %s", strerror(errno));
	}
	if (r->sndbuf_ok == -1)
		return false;
	if ((rc = sock_raise_sndbuf(d->dst->fd, (int)r->conf.send_buffer, r->sndbuf_force)) == -1) {
		log_debug("pipe %llu: send buffer: %s", (unsigned long long)p->id,
		    strerror(errno));
		return false;
	}
	if (rc == 0)
		return false;	/* the kernel had grown it past send_buffer */
	r->ctr.send_buffers_raised++;
	return true;
}

/* Writes what is in flight. Returns -1 if the pipe was closed. */
static int
dir_flush(struct pipe *p, struct dir *d)
{
	size_t before = d->f.inflight;

	while (d->f.inflight > 0) {
		ssize_t n = splice(d->kp->rfd, NULL, d->dst->fd, NULL, d->f.inflight,
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		int err = errno;
		if (n < 0 && err == EAGAIN && dir_filled(p, d))
			continue;
		if (n > 0) {
			*dir_counter(p, d) += (unsigned long long)n;
			p->last_io = ev_now(p->r->loop);
		}
		switch (flow_on_write(&d->f, n, err)) {
		case FLOW_RESET:
			pipe_peer_failed(p, err, d == &p->c2s ?
			    "write to server failed" : "write to client failed");
			return -1;
		case FLOW_SHUTDOWN:
			dir_shutdown(d);
			break;
		case FLOW_FLUSH:
			continue;
		case FLOW_NONE:
			break;
		}
		break;
	}
	if (d->f.inflight < before)
		dir_cc_watch(p, d);
	dir_release_kpipe(p->r, d);
	return 0;
}

/* Bytes one direction may move per wake-up: enough to save event-loop trips
 * on a fast stream, bounded so that one stream cannot starve the others. */
#define PUMP_BUDGET (1u << 20)

/* Moves bytes from the source into the kernel pipe and on. Returns -1 if
 * the pipe was closed. */
static int
dir_pump(struct pipe *p, struct dir *d)
{
	unsigned long long start = d->f.bytes;

	while (flow_wants_read(&d->f) && !d->kp_wait && d->f.bytes - start < PUMP_BUDGET) {
		if (d->kp == NULL && (d->kp = kpipe_get(&p->r->kpipes)) == NULL) {
			/* The reservation kept the descriptors for it, so only
			 * the kernel refused (ENFILE, ENOMEM, pipe-user-pages-
			 * hard): wait and try again (retry), never reset a
			 * running transfer for it. */
			if (d->kp_tries++ == 0)
				log_warn("pipe %llu: no kernel pipe, reading paused (tried "
				    "again every 100 ms)", (unsigned long long)p->id);
			p->r->ctr.kpipe_waits++;
			d->kp_wait = 1;
			if (!ev_is_active(&p->retry))
				ev_timer_start(p->r->loop, &p->retry);
			break;
		}
		if (d->kp_tries) {
			log_info("pipe %llu: kernel pipe made after %u tries: reading resumed",
			    (unsigned long long)p->id, d->kp_tries);
			d->kp_tries = 0;
		}
		size_t want = d->f.cap - d->f.inflight;
		ssize_t n = splice(d->src->fd, NULL, d->kp->wfd, NULL, want,
		    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		int err = errno;
		if (n > 0)
			p->last_io = ev_now(p->r->loop);
		enum flow_action a = flow_on_read(&d->f, n, err);
		if (a == FLOW_RESET) {
			errno = err;
			pipe_peer_failed(p, err, d == &p->c2s ?
			    "client reset" : "server reset");
			return -1;
		}
		if (a == FLOW_SHUTDOWN) {
			dir_shutdown(d);
			break;
		}
		if (a == FLOW_FLUSH && dir_flush(p, d) == -1)
			return -1;
		/* Less than asked: the socket had no more just now. Another
		 * read would most likely only say EAGAIN (a system call per
		 * wake-up); the watcher is level-triggered, so bytes that came
		 * since wake it again. */
		if (a == FLOW_NONE || n == 0 || d->f.inflight > 0 || (size_t)n < want)
			break;
	}
	dir_release_kpipe(p->r, d);
	return 0;
}

static void
half_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct half *h = w->data;
	struct pipe *p = h->p;
	struct dir *in = h == &p->cli ? &p->c2s : &p->s2c;	/* h is its source */
	struct dir *out = h == &p->cli ? &p->s2c : &p->c2s;	/* h is its destination */

	(void)loop;
	if (p->state != PS_OPEN) {
		/* The server spoke (or closed) before the client's data
		 * connection came: left unread until pipe_open. */
		half_set(h, 0);
		return;
	}
	if ((revents & EV_WRITE) && dir_flush(p, out) == -1)
		return;
	if ((revents & EV_READ) && dir_pump(p, in) == -1)
		return;
	if (flow_pair_done(&p->c2s.f, &p->s2c.f)) {
		pipe_close(p, CLOSE_CLEAN, "closed");
		return;
	}
	pipe_update(p);
	pipe_timer_update(p);
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pipe *p = w->data;
	(void)loop;
	(void)revents;

	p->c2s.kp_wait = p->s2c.kp_wait = 0;
	pipe_update(p);
}

/* --- life cycle --- */

static const char *
state_str(enum pipe_state s)
{
	return s == PS_CONNECTING ? "connecting" : s == PS_PENDING ? "pending" : "open";
}

static void
pipe_close(struct pipe *p, enum close_how how, const char *why)
{
	struct relay *r = p->r;
	char cb[EP_STRLEN], sb[EP_STRLEN], via[128] = " via ";

	ev_timer_stop(r->loop, &p->timer);
	ev_timer_stop(r->loop, &p->retry);
	ev_timer_stop(r->loop, &p->later);
	if (p->state == PS_OPEN) {	/* what the sending sockets learned */
		initcwnd_pipe_done(r, p->cli.fd, p->s2c.f.bytes);
		initcwnd_pipe_done(r, p->srv.fd, p->c2s.f.bytes);
	}
	half_close(&p->cli, how);
	half_close(&p->srv, how);
	for (struct dir *d = &p->c2s; d; d = d == &p->c2s ? &p->s2c : NULL)
		if (d->kp) {
			kpipe_put(&r->kpipes, d->kp, d->f.inflight > 0);
			d->kp = NULL;
		}
	if (p->reserved)
		kpipe_unreserve(&r->kpipes, 2);
	if (p->chain) {
		/* The log line names the chain. */
		chain_fmt(p->chain, via + 5, sizeof(via) - 5);
		chain_free(p->chain);
		p->chain = NULL;
	}
	if (how == CLOSE_RESET && p->state == PS_OPEN)
		r->ctr.pipes_reset++;
	if (p->state == PS_OPEN)
		r->ctr.pipes_open--;
	else
		pending_leave(p);
	TAILQ_REMOVE(&r->pipes, p, link);
	r->npipes--;

	if (p->state == PS_OPEN)
		log_info("pipe %llu %s -> %s%s %s: client->server %llu, server->client %llu bytes, %.3f s",
		    (unsigned long long)p->id, ep_fmt(&p->client, cb), ep_fmt(&p->server, sb),
		    via[5] ? via : "", why, p->c2s.f.bytes, p->s2c.f.bytes,
		    ev_now(r->loop) - p->started);
	else
		log_info("pipe %llu %s -> %s%s %s while %s", (unsigned long long)p->id,
		    ep_fmt(&p->client, cb), ep_fmt(&p->server, sb), via[5] ? via : "", why,
		    state_str(p->state));
	free(p);
	relay_pipe_gone(r);
}

static uint8_t
fail_reason(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return FAIL_REFUSED;
	case ETIMEDOUT:
		return FAIL_TIMEOUT;
	case EMFILE: case ENFILE: case ENOMEM: case ENOBUFS:
		return FAIL_INTERNAL;
	default:	/* ENETUNREACH, EHOSTUNREACH, EHOSTDOWN, EACCES (a reject rule)... */
		return FAIL_UNREACHABLE;
	}
}

static void
pipe_fail(struct pipe *p, uint8_t reason, int err)
{
	p->r->ctr.pipes_failed++;
	if (p->chain)
		p->r->ctr.chains_failed++;
	if (p->ctl)
		ctrl_send_fail(p->ctl, p->req_id, reason, (uint32_t)err);
	pipe_close(p, CLOSE_RESET, proto_fail_str(reason));
}

/* One side sent EOF (or the pipe is draining towards it): the other
 * direction may still flow. */
static int
pipe_half_closed(const struct pipe *p)
{
	return p->c2s.f.state != FLOW_READING || p->s2c.f.state != FLOW_READING;
}

static void
timer_arm(struct pipe *p, uint64_t ms)
{
	ev_timer_stop(p->r->loop, &p->timer);
	ev_timer_set(&p->timer, (double)ms / 1000.0, 0.);
	ev_timer_start(p->r->loop, &p->timer);
}

static void
timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pipe *p = w->data;
	(void)revents;

	switch (p->state) {
	case PS_CONNECTING:
		/* A chain's next relay did not answer in time: that says
		 * nothing of the server. */
		pipe_fail(p, p->chain ? FAIL_NEXT_HOP : FAIL_TIMEOUT, ETIMEDOUT);
		return;
	case PS_PENDING:
		p->r->ctr.pipes_expired++;
		pipe_close(p, CLOSE_RESET, "expired");
		return;
	case PS_OPEN: {
		/* Activity does not re-arm the timer (that would cost a timer
		 * operation per splice); check here instead. A reload may
		 * have changed the limit. */
		if ((p->limit_ms = pipe_limit_ms(p)) == 0)
			return;
		double left = p->last_io + (double)p->limit_ms / 1000.0 - ev_now(loop);
		if (left > 0.001) {
			ev_timer_set(w, left, 0.);
			ev_timer_start(loop, w);
			return;
		}
		if (pipe_half_closed(p)) {
			p->r->ctr.pipes_half_closed_timeout++;
			pipe_close(p, CLOSE_RESET, "half-closed timeout");
		} else {
			p->r->ctr.pipes_idle_timeout++;
			pipe_close(p, CLOSE_RESET, "idle timeout");
		}
		return;
	}
	}
}

/* The inactivity limit of an open pipe: idle_timeout (0: none, the default:
 * an idle connection lives as long as it would direct, and keepalive finds
 * dead peers), or the shorter half_closed_timeout once one side sent EOF. */
static uint64_t
pipe_limit_ms(const struct pipe *p)
{
	const struct rconf *c = &p->r->conf;
	uint64_t lim = c->idle_timeout_ms;

	if (pipe_half_closed(p) && c->half_closed_timeout_ms &&
	    (lim == 0 || c->half_closed_timeout_ms < lim))
		lim = c->half_closed_timeout_ms;
	return lim;
}

/* Re-arms the inactivity timer when its limit changed (the pipe opened or
 * became half-closed). */
static void
pipe_timer_update(struct pipe *p)
{
	uint64_t lim = pipe_limit_ms(p);
	double left;

	if (p->state != PS_OPEN || lim == p->limit_ms)
		return;
	p->limit_ms = lim;
	ev_timer_stop(p->r->loop, &p->timer);
	if (lim == 0)
		return;
	left = p->last_io + (double)lim / 1000.0 - ev_now(p->r->loop);
	ev_timer_set(&p->timer, left > 0.001 ? left : 0.001, 0.);
	ev_timer_start(p->r->loop, &p->timer);
}

/* The connect to the server finished or failed. The socket is watched for
 * both readable and writable (connect_watch): a failed connect raises
 * EPOLLERR and EPOLLHUP, which libev reports as both; writable alone is a
 * connect that succeeded with no error pending, so SO_ERROR is read only
 * when readable too (a failure, or the server's first bytes already). */
static void
connect_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct half *h = w->data;
	struct pipe *p = h->p;
	int err;

	if ((revents & EV_READ) && (err = sock_connect_result(h->fd)) != 0) {
		/* A chain's data connection to the next relay. */
		pipe_fail(p, p->chain ? FAIL_NEXT_HOP : fail_reason(err), err);
		return;
	}
	p->connected = ev_now(loop);
	p->state = PS_PENDING;
	ev_set_cb(&h->io, half_cb);
	/* From writable to readable in one change within this callback: libev
	 * makes it one EPOLL_CTL_MOD before its next epoll_wait, where
	 * stopping the watcher now and starting it at pipe_open cost a DEL
	 * (libev defers it to the spurious wake-up that follows) and an ADD.
	 * pipe_open, or the client's data connection arriving early, keeps
	 * this mask; bytes from the server before the client is there stop
	 * the watcher (half_cb) until pipe_open. */
	half_set(h, EV_READ);
	timer_arm(p, p->r->conf.pending_timeout_ms);
	if (p->ctl) {
		double us = (p->connected - p->started) * 1e6;
		ctrl_send_ok(p->ctl, p->req_id, us > 4e9 ? UINT32_MAX : (uint32_t)us,
		    (uint32_t)p->r->conf.pending_timeout_ms);
		p->ctl = NULL;
	}
	if (p->cli.fd >= 0)
		pipe_open(p);	/* the client connected early */
}

/* Both legs of a pipe: keepalive and TCP_USER_TIMEOUT find a dead peer
 * (an idle one by keepalive, one that stopped acknowledging by the user
 * timeout) in minutes, so idle pipes need no idle timeout; the RST on loss
 * armed (see half_linger_rst); the relay's congestion control on the leg
 * it sends on. An accepted client socket inherited all of it from the data
 * listener (relayd.c): no system call for it here.
 *
 * The server leg, a socket of its own, gets TCP_NODELAY and the RST on loss
 * now, and the congestion control unless it is the netns's default (what
 * the socket has already). Keepalive and the user timeout (five system
 * calls) only act after keepalive_idle of silence or user_timeout of
 * unacknowledged bytes, and count from the socket's own timestamps: they
 * are set when the pipe has been open rconf_leg_later_ms (later_cb), which
 * most pipes never live to see. */
static void
half_attach(struct half *h, int fd)
{
	static int warned;
	struct relay *r = h->p->r;
	struct sock_leg o;

	h->fd = fd;
	if (h == &h->p->cli)
		return;
	rconf_leg(&r->conf, &o);
	o.later = 1;
	if (strcmp(o.congestion, r->cc_default) == 0)
		o.congestion = NULL;
	/* Checked at start and reload: only a sysctl changed since can fail. */
	if (sock_set_leg(fd, &o) == -1 && !warned) {
		warned = 1;
		log_warn("pipe %llu: options of the server leg (congestion control %s)",
		    (unsigned long long)h->p->id, r->conf.congestion[0] ? r->conf.congestion :
		    "system");
	}
}

/* The pipe has been open long enough for keepalive and the user timeout
 * of its server leg to matter (half_attach). */
static void
later_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	static int warned;
	struct pipe *p = w->data;
	struct sock_leg o;
	(void)loop;
	(void)revents;

	rconf_leg(&p->r->conf, &o);
	if (p->srv.fd >= 0 && sock_set_leg_later(p->srv.fd, &o) == -1 && !warned) {
		warned = 1;
		log_warn("pipe %llu: keepalive and user timeout of the server leg",
		    (unsigned long long)p->id);
	}
}

/* Watches a connecting server leg for the connect's end (connect_cb). */
static void
connect_watch(struct pipe *p, int fd)
{
	half_attach(&p->srv, fd);
	ev_set_cb(&p->srv.io, connect_cb);
	half_set(&p->srv, EV_READ | EV_WRITE);
}

/* A pipe to server, or through the rest of chain s (NULL: direct). */
static void
establish(struct relay *r, struct ctrl_conn *c, uint32_t id,
    const struct endpoint *client, const struct endpoint *server,
    const uint8_t *token, const struct chain_spec *s)
{
	struct pipe *p;
	struct owner *o;
	uint8_t reason = 0;
	int fd = -1, err = 0;

	if (r->draining)
		reason = FAIL_SHUTTING_DOWN;
	else if (client->port == 0)
		reason = FAIL_POLICY_ADDR;
	else if (s != NULL)
		;	/* the policy is the last relay's, for the server it connects to */
	else switch (policy_check(&r->conf.policy, server)) {
	case POLICY_ADDR:
		reason = FAIL_POLICY_ADDR;
		break;
	case POLICY_PORT:
		reason = FAIL_POLICY_PORT;
		break;
	case POLICY_OK:
		break;
	}
	if (!reason && r->npipes >= r->conf.max_pipes)
		reason = FAIL_LIMIT;
	o = owner_get(r, ctrl_peer_addr(c), 0);
	if (!reason && o && o->n >= (ctrl_peer_is_relay(c) ? r->conf.max_pending_per_relay :
	    r->conf.max_pending_per_client))
		reason = FAIL_CLIENT_LIMIT;
	if (!reason && (token ? pending_tok_find(r, token) != NULL :
	    pending_find(r, client) != NULL))
		reason = FAIL_DUPLICATE;
	if (reason) {
		r->ctr.pipes_failed++;
		r->ctr.chains_failed += s != NULL;
		ctrl_send_fail(c, id, reason, 0);
		return;
	}
	/* The descriptors for the kernel pipes it may need, accounted now or
	 * never: running out of them later would stall a running transfer. */
	if (kpipe_reserve(&r->kpipes, 2) == -1) {
		err = errno;
		log_warn("pipe refused: no kernel pipes to reserve (max_kernel_pipes or "
		    "the descriptor limit)");
		r->ctr.pipes_failed++;
		r->ctr.chains_failed += s != NULL;
		ctrl_send_fail(c, id, FAIL_LIMIT, (uint32_t)err);
		return;
	}
	/* A measurement's connection to the server, made moments ago for the
	 * client's probe, saves the connect (docs/relay.md, handover). */
	if (s == NULL && (fd = probe_take(r->probe, server)) == -1 &&
	    (fd = sock_connect_nb(server, 0)) == -1) {
		err = errno;
		kpipe_unreserve(&r->kpipes, 2);
		r->ctr.pipes_failed++;
		ctrl_send_fail(c, id, fail_reason(err), (uint32_t)err);
		return;
	}
	if ((p = calloc(1, sizeof(*p))) == NULL ||
	    (o = owner_get(r, ctrl_peer_addr(c), 1)) == NULL) {
		free(p);
		if (fd >= 0)
			close(fd);
		kpipe_unreserve(&r->kpipes, 2);
		r->ctr.pipes_failed++;
		r->ctr.chains_failed += s != NULL;
		ctrl_send_fail(c, id, FAIL_INTERNAL, ENOMEM);
		return;
	}
	p->r = r;
	p->id = r->next_pipe_id++;
	p->state = PS_CONNECTING;
	p->client = *client;
	p->server = *server;
	p->ctl = c;
	p->req_id = id;
	p->reserved = 1;
	p->owner = o;
	o->n++;
	if (token) {
		/* Behind NAT the client endpoint is the client's own, not
		 * what the data connection will come from: only the token
		 * identifies it. */
		p->tokened = 1;
		memcpy(p->token, token, PROTO_TOKEN_LEN);
		htab_insert(&r->pending_tok, &p->hn, bytes_hash(token, PROTO_TOKEN_LEN,
		    r->hkey));
		TAILQ_INSERT_TAIL(&o->tok, p, tok_link);
		r->ctr.pipes_tokened++;
	} else {
		htab_insert(&r->pending, &p->hn, ep_hash(client, r->hkey));
	}
	TAILQ_INSERT_TAIL(&r->pipes, p, link);
	r->npipes++;
	r->ctr.pipes_pending++;
	half_init(p, &p->cli);
	half_init(p, &p->srv);
	flow_init(&p->c2s.f, r->conf.pipe_size);
	flow_init(&p->s2c.f, r->conf.pipe_size);
	ccwatch_init(&p->c2s.ccw);
	ccwatch_init(&p->s2c.ccw);
	p->c2s.src = p->s2c.dst = &p->cli;
	p->c2s.dst = p->s2c.src = &p->srv;
	p->started = ev_now(r->loop);
	ev_timer_init(&p->timer, timer_cb, 0., 0.);
	p->timer.data = p;
	ev_timer_init(&p->retry, retry_cb, 0.1, 0.);
	p->retry.data = p;
	ev_timer_init(&p->later, later_cb, 0., 0.);
	p->later.data = p;

	if (s != NULL) {
		/* Each relay of the chain has its own connect timeout: ours
		 * covers theirs, so that the answer about the server (or a
		 * relay further on) comes before our NEXT_HOP timeout. */
		timer_arm(p, r->conf.connect_timeout_ms * (1 + s->nhops));
		if ((p->chain = chain_start(r, p, s, server, &err)) == NULL) {
			r->ctr.chains_failed++;
			r->ctr.chains_next_hop_failed++;
			pipe_fail(p, FAIL_NEXT_HOP, err);
			return;
		}
		adopt_held(p);
		return;
	}
	connect_watch(p, fd);
	timer_arm(p, r->conf.connect_timeout_ms);
	adopt_held(p);
}

void
pipe_establish(struct relay *r, struct ctrl_conn *c, uint32_t id,
    const struct endpoint *client, const struct endpoint *server,
    const uint8_t *token)
{
	establish(r, c, id, client, server, token, NULL);
}

void
pipe_establish_chain(struct relay *r, struct ctrl_conn *c, uint32_t id,
    const struct endpoint *client, const struct endpoint *server,
    const uint8_t *token, const struct chain_spec *s)
{
	establish(r, c, id, client, server, token, s);
}

/* The next relay took the rest of the chain: the data connection to it is
 * the server side, connecting; its result is the connect's (connect_cb),
 * and the PIPE_OK upstream waits for it, so that a data connection that
 * fails is a PIPE_FAIL NEXT_HOP, not a pipe reset later. */
void
pipe_chain_ready(struct pipe *p, int fd)
{
	connect_watch(p, fd);
}

void
pipe_chain_failed(struct pipe *p, uint8_t reason, uint32_t detail)
{
	pipe_fail(p, reason, (int)detail);
}


/* Both sockets are there: splice. */
static void
pipe_open(struct pipe *p)
{
	struct relay *r = p->r;

	pending_leave(p);
	p->state = PS_OPEN;
	r->ctr.pipes_open++;
	r->ctr.pipes_total++;
	r->ctr.chains_joined += p->chain != NULL;
	p->started = p->last_io = ev_now(r->loop);
	ev_timer_stop(r->loop, &p->timer);
	p->limit_ms = 0;
	pipe_timer_update(p);
	ev_timer_set(&p->later, (double)rconf_leg_later_ms(&r->conf) / 1000.0, 0.);
	ev_timer_start(r->loop, &p->later);
	pipe_update(p);
}

/* The pipe token of the data connection fd's SYN. */
static enum syntok_result
data_token(struct relay *r, int fd, uint8_t token[PROTO_TOKEN_LEN])
{
	uint8_t syn[512];
	socklen_t len = sizeof(syn);

	if (!r->save_syn || getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, syn, &len) == -1 ||
	    len == 0)
		return SYNTOK_ABSENT;
	return syntok_find(syn, len, token);
}

/* How a data connection found its pipe. */
enum data_match { BY_ENDPOINT, BY_TOKEN, BY_ADDRESS };

/* The connection fd joins p (now, or at the server's connect if early). */
static void
data_join(struct relay *r, struct pipe *p, int fd, enum data_match by)
{
	if (by == BY_TOKEN)
		r->ctr.data_token++;
	else if (by == BY_ADDRESS)
		r->ctr.data_token_fallback++;
	half_attach(&p->cli, fd);
}

/* A data connection that matches no pipe: held for the PIPE_ESTABLISH that
 * may still come for it (datahold.h; adopt_held), else reset. */
static void
data_unmatched(struct relay *r, int fd, const struct endpoint *peer,
    enum syntok_result tr, const uint8_t *token)
{
	char b[EP_STRLEN];

	if (!r->draining && datahold_add(&r->hold, fd, peer, tr, token) == 0) {
		r->ctr.data_held++;
		log_debug("data connection from %s matches no pipe yet: held",
		    ep_fmt(peer, b));
		return;
	}
	data_unmatched_reset(r, peer, tr);
	sock_close_rst(fd);
}

/* Whether held connection h is the data connection of the new pipe arg,
 * by the rules pipe_accept_data applies on arrival. */
static int
held_matches(void *arg, const struct held *h)
{
	struct pipe *p = arg;

	if (h->tok == SYNTOK_OK)
		return p->tokened && sodium_memcmp(p->token, h->token, PROTO_TOKEN_LEN) == 0;
	if (!p->tokened)
		return ep_eq(&h->peer, &p->client);
	return h->tok == SYNTOK_ABSENT && pending_find(p->r, &h->peer) == NULL &&
	    tokened_by_addr(p->r, &h->peer.addr) == p;
}

/* A new pipe takes its data connection if it came first and was held. */
static void
adopt_held(struct pipe *p)
{
	struct relay *r = p->r;
	struct held *h;

	if (r->hold.n == 0 || (h = datahold_take(&r->hold, held_matches, p)) == NULL)
		return;
	data_join(r, p, h->fd, h->tok == SYNTOK_OK ? BY_TOKEN :
	    ep_eq(&h->peer, &p->client) && !p->tokened ? BY_ENDPOINT : BY_ADDRESS);
	r->ctr.data_early++;
	datahold_free(h);
}

void
pipe_accept_data(struct relay *r, int fd, const struct endpoint *peer)
{
	uint8_t token[PROTO_TOKEN_LEN];
	enum syntok_result tr = SYNTOK_ABSENT;
	enum data_match by = BY_ENDPOINT;
	struct pipe *p = NULL;
	char b[EP_STRLEN];

	/* The saved SYN (a getsockopt) is read only where its token can
	 * change the outcome. While no tokened pipe is pending, a token can
	 * name none: a connection from the endpoint of a pending pipe joins
	 * it, as one from there without a token always did (the endpoint is
	 * what such pipes trust). While tokened pipes are pending the token
	 * comes first, endpoint match or not: else a client could announce
	 * the public endpoint of a NAT and take the data connection of a
	 * tokened client behind it (docs/protocol.md, "Pipe tokens"). */
	if (r->pending_tok.n == 0 && (p = pending_find(r, peer)) != NULL)
		;
	else if ((tr = data_token(r, fd, token)) == SYNTOK_OK) {
		/* An unknown token is not matched by endpoint either (the
		 * SYN is read for it only when no pending pipe has the
		 * endpoint, or while tokened pipes are pending): it was meant
		 * for a pipe that is gone (expired, or used) or forged. */
		if ((p = pending_tok_find(r, token)) == NULL) {
			data_unmatched(r, fd, peer, tr, token);
			return;
		}
		by = BY_TOKEN;
	} else if (r->pending_tok.n > 0 && (p = pending_find(r, peer)) == NULL &&
	    tr == SYNTOK_ABSENT &&
	    (p = tokened_by_addr(r, &peer->addr)) != NULL) {
		by = BY_ADDRESS;
		log_info("data connection from %s without a token: the one tokened pipe "
		    "of its address", ep_fmt(peer, b));
	}

	/* A client with a warm cache connects without waiting for PIPE_OK
	 * (docs/protocol.md): its data connection may find the pipe still
	 * connecting. It waits, unread, for the server's connect. */
	if (p && p->state == PS_CONNECTING && p->cli.fd < 0) {
		data_join(r, p, fd, by);
		r->ctr.data_early++;
		return;
	}
	if (p == NULL) {
		data_unmatched(r, fd, peer, tr, token);
		return;
	}
	if (p->state != PS_PENDING || p->cli.fd >= 0) {
		r->ctr.data_rejected++;
		log_info("data connection from %s matches no pending pipe: reset",
		    ep_fmt(peer, b));
		sock_close_rst(fd);
		return;
	}
	data_join(r, p, fd, by);
	pipe_open(p);
}

void
pipe_ctrl_gone(struct relay *r, struct ctrl_conn *c)
{
	struct pipe *p, *next;

	for (p = TAILQ_FIRST(&r->pipes); p; p = next) {
		next = TAILQ_NEXT(p, link);
		if (p->ctl != c)
			continue;
		p->ctl = NULL;
		if (p->state == PS_CONNECTING)
			pipe_close(p, CLOSE_RESET, "control connection closed");
	}
}

void
pipe_reset_all(struct relay *r)
{
	struct pipe *p;

	while ((p = TAILQ_FIRST(&r->pipes)) != NULL)
		pipe_close(p, CLOSE_RESET, "relay shutting down");
}

void
pipes_view(struct relay *r, void (*fn)(void *arg, const struct pipe_view *v), void *arg)
{
	ev_tstamp now = ev_now(r->loop);
	struct pipe *p;

	TAILQ_FOREACH(p, &r->pipes, link) {
		struct pipe_view v = {
			.id = p->id,
			.state = state_str(p->state),
			.client = p->client,
			.server = p->server,
			.age_s = now - p->started,
			.to_server = p->c2s.f.bytes,
			.to_client = p->s2c.f.bytes,
		};
		if (p->chain) {
			v.next = *chain_next(p->chain);
			v.hops = chain_nhops(p->chain);
		}
		if (p->state == PS_OPEN) {
			v.idle_s = now - p->last_io;
			/* One side said EOF: the other direction still flows. */
			if (pipe_half_closed(p))
				v.state = "half-closed";
		}
		fn(arg, &v);
	}
}
