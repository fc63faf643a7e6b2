#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/sock.h"
#include "chain.h"
#include "ctrl.h"
#include "pipe.h"
#include "rauth.h"

/* Answers queued beyond this stop the reading of requests until the client
 * takes them: a client that never reads cannot make us buffer without end. */
#define CTRL_OUT_HIGH (64 * 1024)

struct ctrl_conn {
	struct relay *r;
	int fd;
	struct endpoint peer;
	ev_io io;
	int events;
	ev_timer idle;
	ev_tstamp last_msg;
	uint8_t in[4 * PROTO_MAX_LEN];
	size_t inlen;
	uint8_t *out;
	size_t outlen, outcap;
	int closing;		/* answer sent, close once flushed */
	int authed;		/* a message passed its MAC: in r->ctrls, else r->ctrls_new */
	/* Identity mode: authed once its HELLO is accepted; then the peer's
	 * key, our pair key and its certificate's serial. */
	struct proto_pair pair;
	uint64_t serial;
	int relay_peer;		/* its certificate is a relay's: relay-class limits */
	TAILQ_ENTRY(ctrl_conn) link;
};

static void ctrl_io_cb(struct ev_loop *loop, ev_io *w, int revents);

int
ctrl_peer_is_relay(const struct ctrl_conn *c)
{
	return c->relay_peer;
}

const struct addr *
ctrl_peer_addr(const struct ctrl_conn *c)
{
	return &c->peer.addr;
}

enum ctrl_how { CTRL_FIN, CTRL_RST };

static void
ctrl_close(struct ctrl_conn *c, enum ctrl_how how, const char *why)
{
	struct relay *r = c->r;
	char b[EP_STRLEN];

	log_debug("control %s closed: %s", ep_fmt(&c->peer, b), why);
	/* Only an authenticated connection can have asked for pipes: the
	 * many that never are (a flood) cost no walk of the pipes. */
	if (c->authed)
		pipe_ctrl_gone(r, c);
	ev_io_stop(r->loop, &c->io);
	ev_timer_stop(r->loop, &c->idle);
	if (how == CTRL_RST)
		sock_close_rst(c->fd);	/* leaves no TIME_WAIT behind */
	else
		close(c->fd);
	TAILQ_REMOVE(c->authed ? &r->ctrls : &r->ctrls_new, c, link);
	admit_conn_close(r->admit, &c->peer.addr);
	auth_key_wipe(&c->pair.key);
	r->ctr.control_conns--;
	free(c->out);
	free(c);
}

static void
ctrl_set_events(struct ctrl_conn *c)
{
	int ev = 0;

	if (!c->closing && c->outlen < CTRL_OUT_HIGH)
		ev |= EV_READ;
	if (c->outlen > 0)
		ev |= EV_WRITE;
	if (ev == c->events)
		return;
	ev_io_stop(c->r->loop, &c->io);
	c->events = ev;
	if (ev) {
		ev_io_set(&c->io, c->fd, ev);
		ev_io_start(c->r->loop, &c->io);
	}
}

/* Writes what is queued. Returns -1 if the connection was closed. */
static int
ctrl_flush(struct ctrl_conn *c)
{
	while (c->outlen > 0) {
		ssize_t n = send(c->fd, c->out, c->outlen, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EAGAIN || errno == EINTR)
				break;
			ctrl_close(c, CTRL_FIN, strerror(errno));
			return -1;
		}
		memmove(c->out, c->out + n, c->outlen - (size_t)n);
		c->outlen -= (size_t)n;
	}
	if (c->closing && c->outlen == 0) {
		ctrl_close(c, CTRL_FIN, "after error");
		return -1;
	}
	ctrl_set_events(c);
	return 0;
}

static void
ctrl_queue_bytes(struct ctrl_conn *c, const uint8_t *buf, int n)
{
	if (c->outlen + (size_t)n > c->outcap) {
		size_t cap = c->outcap ? c->outcap * 2 : 1024;
		while (cap < c->outlen + (size_t)n)
			cap *= 2;
		uint8_t *o = realloc(c->out, cap);
		if (o == NULL) {
			log_warnx("control: out of memory, answer dropped");
			return;
		}
		c->out = o;
		c->outcap = cap;
	}
	memcpy(c->out + c->outlen, buf, (size_t)n);
	c->outlen += (size_t)n;
	/* Sent from the loop's write event, so that an answer produced inside
	 * another connection's callback never closes this one under it. */
	ctrl_set_events(c);
}

static void
ctrl_queue(struct ctrl_conn *c, struct proto_msg *m)
{
	uint8_t buf[PROTO_MAX_LEN];
	int n;

	rauth_stamp(c->r, m);
	n = proto_encode(m, rauth_identity(c->r) ? &c->pair.key : &c->r->key, buf,
	    sizeof(buf));
	if (n < 0) {
		log_warnx("control: cannot encode %s", proto_type_str(m->type));
		return;
	}
	ctrl_queue_bytes(c, buf, n);
}

void
ctrl_send_ok(struct ctrl_conn *c, uint32_t id, uint32_t connect_us, uint32_t pending_ms)
{
	struct proto_msg m = { .type = PROTO_PIPE_OK, .id = id };

	m.u.ok.connect_us = connect_us;
	m.u.ok.pending_ms = pending_ms;
	ctrl_queue(c, &m);
}

void
ctrl_send_fail(struct ctrl_conn *c, uint32_t id, uint8_t reason, uint32_t detail)
{
	struct proto_msg m = { .type = PROTO_PIPE_FAIL, .id = id };

	m.u.fail.reason = reason;
	m.u.fail.detail = detail;
	ctrl_queue(c, &m);
}

static void
ctrl_send_error(struct ctrl_conn *c, uint32_t id, uint8_t code, int fatal_)
{
	struct proto_msg m = { .type = PROTO_ERROR, .id = id };
	char b[EP_STRLEN];

	m.u.error.code = code;
	c->r->ctr.control_errors++;
	log_info("control %s: %s%s", ep_fmt(&c->peer, b), proto_error_code_str(code),
	    fatal_ ? ", closing" : "");
	ctrl_queue(c, &m);
	if (fatal_)
		c->closing = 1;
}

/* The first message that passed its MAC and was fresh: the peer holds the
 * key, so the first-message deadline is over and the idle limit applies. */
static void
ctrl_authenticated(struct ctrl_conn *c)
{
	struct relay *r = c->r;

	if (c->authed)
		return;
	TAILQ_REMOVE(&r->ctrls_new, c, link);
	TAILQ_INSERT_TAIL(&r->ctrls, c, link);
	c->authed = 1;
	c->last_msg = ev_now(r->loop);
	ev_timer_stop(r->loop, &c->idle);
	ev_timer_set(&c->idle, (double)r->conf.control_idle_timeout_ms / 1000.0, 0.);
	ev_timer_start(r->loop, &c->idle);
}

/*
 * Identity mode: the first message must be a valid, fresh HELLO of a client
 * or relay of this deployment's CA; we answer with ours, and from then on
 * every message both ways is MACed with the pair key. Anything else closes
 * the connection unanswered: we cannot MAC an answer for a peer we do not
 * know, and an unauthenticated peer learns nothing.
 */
static void
ctrl_hello(struct ctrl_conn *c, const struct proto_msg *m)
{
	struct relay *r = c->r;
	uint8_t buf[PROTO_MAX_LEN];
	char why[256], b[EP_STRLEN];
	int n;

	if (m->type != PROTO_HELLO) {
		snprintf(why, sizeof(why), "first message %s, not HELLO (client in "
		    "[auth] mode shared?)", proto_type_str(m->type));
		goto refuse;
	}
	if (admit_message(r->admit, ADMIT_CONTROL, &c->peer.addr, m->ts_us, m->nonce,
	    clock_mono_us(), clock_real_us()) != ADMIT_OK) {
		snprintf(why, sizeof(why), "stale, replayed or too frequent HELLO");
		goto refuse;
	}
	if (rauth_admit(r, m, IDENT_MASK(IDENT_ROLE_CLIENT) | IDENT_MASK(IDENT_ROLE_RELAY),
	    &c->pair.key, why, sizeof(why)) == -1)
		goto refuse;
	if ((n = rauth_hello(r, m->id, buf, sizeof(buf))) < 0) {
		snprintf(why, sizeof(why), "cannot encode our HELLO");
		goto refuse;
	}
	memcpy(c->pair.pk, m->sender, PROTO_PK_LEN);
	c->serial = m->u.hello.cert.serial;
	c->relay_peer = m->u.hello.cert.role == IDENT_ROLE_RELAY;
	ctrl_authenticated(c);
	r->ctr.hellos_accepted++;
	log_debug("control %s: %s '%s' authenticated", ep_fmt(&c->peer, b),
	    ident_role_str(m->u.hello.cert.role), m->u.hello.cert.name);
	ctrl_queue_bytes(c, buf, n);
	return;
refuse:
	r->ctr.hellos_refused++;
	log_info("control %s: refused: %s", ep_fmt(&c->peer, b), why);
	c->closing = 1;
	ctrl_set_events(c);
}

static void
ctrl_handle(struct ctrl_conn *c, const struct proto_msg *m)
{
	struct relay *r = c->r;

	if (rauth_identity(r) && !c->authed) {
		ctrl_hello(c, m);
		return;
	}
	/* A relay sends the chains of all its clients: its own rate. */
	switch (admit_message(r->admit, c->relay_peer ? ADMIT_RELAY : ADMIT_CONTROL,
	    &c->peer.addr, m->ts_us, m->nonce, clock_mono_us(), clock_real_us())) {
	case ADMIT_OK:
		break;
	case ADMIT_RATE:
		/* Not remembered, so not acted on. Every PIPE_ESTABLISH gets
		 * exactly one answer. */
		r->ctr.control_rate_limited++;
		if (m->type == PROTO_PIPE_ESTABLISH ||
		    m->type == PROTO_PIPE_ESTABLISH_TOKEN ||
		    m->type == PROTO_PIPE_ESTABLISH_CHAIN) {
			r->ctr.pipes_failed++;
			ctrl_send_fail(c, m->id, FAIL_CLIENT_LIMIT, 0);
		}
		return;
	case ADMIT_STALE:
		ctrl_send_error(c, m->id, ERR_STALE, 0);
		return;
	case ADMIT_REPLAY:
		/* Seen before, or the cache is full and it cannot be proven
		 * fresh (docs/protocol.md). */
		ctrl_send_error(c, m->id, ERR_REPLAY, 0);
		return;
	}
	/* Only a fresh message proves the peer holds the key: a captured
	 * one, replayed, would otherwise make a connection that cannot be
	 * evicted at the cap (ctrls_new) out of each copy. */
	ctrl_authenticated(c);
	c->last_msg = ev_now(r->loop);
	switch (m->type) {
	case PROTO_PIPE_ESTABLISH:
		pipe_establish(r, c, m->id, &m->u.establish.client, &m->u.establish.server,
		    NULL);
		break;
	case PROTO_PIPE_ESTABLISH_TOKEN:
		if (!r->save_syn) {
			ctrl_send_error(c, m->id, ERR_TYPE, 0);
			break;
		}
		pipe_establish(r, c, m->id, &m->u.establish.client, &m->u.establish.server,
		    m->u.establish.token);
		break;
	case PROTO_PIPE_ESTABLISH_CHAIN: {
		static const uint8_t zero[PROTO_TOKEN_LEN];
		/* A token needs saved SYNs, as PIPE_ESTABLISH_TOKEN does. */
		if (!r->save_syn && memcmp(m->u.chain.token, zero, PROTO_TOKEN_LEN) != 0) {
			ctrl_send_error(c, m->id, ERR_TYPE, 0);
			break;
		}
		chain_establish(r, c, m);
		break;
	}
	case PROTO_KEEPALIVE: {
		/* OBSERVE: the client learns whether it is behind NAT, and
		 * that this relay takes tokens. CHAINS: whether it may send
		 * us PIPE_ESTABLISH_CHAIN; answered only to a client that
		 * asks, and read again at every keepalive (a reload may
		 * change [chain] allow). */
		struct proto_msg a = { .type = PROTO_KEEPALIVE_ACK, .id = m->id };
		if ((m->flags & PROTO_FLAG_OBSERVE) && r->save_syn) {
			a.type = PROTO_OBSERVED;
			a.u.observed.addr = c->peer;
		}
		if ((m->flags & PROTO_FLAG_CHAINS) && r->conf.chain_allow)
			a.flags = PROTO_FLAG_CHAINS;
		ctrl_queue(c, &a);
		break;
	}
	default:
		ctrl_send_error(c, m->id, ERR_TYPE, 0);
		break;
	}
}

/* Identity mode: messages from the peer that introduced itself, MACed with
 * our pair key; none before its HELLO. */
static const struct auth_key *
ctrl_key_fn(void *arg, const struct proto_hdr *h)
{
	struct ctrl_conn *c = arg;

	return c->authed ? proto_key_pair(&c->pair, h) : NULL;
}

/* Reads and handles whole messages. Returns -1 if the connection closed. */
static int
ctrl_read(struct ctrl_conn *c)
{
	ssize_t n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen, 0);

	if (n == 0) {
		ctrl_close(c, CTRL_FIN, "closed by peer");
		return -1;
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		ctrl_close(c, CTRL_FIN, strerror(errno));
		return -1;
	}
	c->inlen += (size_t)n;

	size_t off = 0;
	while (!c->closing && off < c->inlen) {
		struct proto_msg m;
		size_t used;
		enum proto_err why;
		enum proto_result res;

		if (!rauth_identity(c->r))
			res = proto_decode(c->in + off, c->inlen - off, &c->r->key, &m,
			    &used, &why);
		else
			/* Before the HELLO no key is known: only a HELLO
			 * decodes. */
			res = proto_decode_with(c->in + off, c->inlen - off, ctrl_key_fn, c,
			    &m, &used, &why);
		if (res == PROTO_NEED_MORE)
			break;
		if (res == PROTO_BAD) {
			/* The stream cannot be trusted past a bad message, and
			 * nothing unauthenticated is worth a signed answer:
			 * close, unanswered. */
			char b[EP_STRLEN];
			c->r->ctr.control_unauthentic++;
			log_info("control %s: %s, closing unanswered", ep_fmt(&c->peer, b),
			    proto_err_str(why));
			ctrl_close(c, CTRL_RST, "bad message");
			return -1;
		}
		off += used;
		ctrl_handle(c, &m);
	}
	memmove(c->in, c->in + off, c->inlen - off);
	c->inlen -= off;
	return 0;
}

static void
ctrl_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctrl_conn *c = w->data;
	(void)loop;

	if ((revents & EV_READ) && ctrl_read(c) == -1)
		return;
	ctrl_flush(c);
}

static void
ctrl_idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct ctrl_conn *c = w->data;
	double limit = (double)c->r->conf.control_idle_timeout_ms / 1000.0;
	double left = c->last_msg + limit - ev_now(loop);
	(void)revents;

	if (!c->authed) {
		c->r->ctr.control_deadline++;
		ctrl_close(c, CTRL_RST, "no valid message before the deadline");
		return;
	}
	if (left > 0.001) {
		ev_timer_set(w, left, 0.);
		ev_timer_start(loop, w);
		return;
	}
	ctrl_close(c, CTRL_FIN, "idle");
}

/* Counts a new connection from peer against the caps. At the global cap,
 * the oldest connection that has not yet sent a valid message makes room:
 * a flood from many sources then cycles through its own connections, and
 * a client that authenticates promptly still gets in. Returns 0 or -1
 * (refused). */
static int
ctrl_admit(struct relay *r, const struct addr *peer)
{
	struct ctrl_conn *old;

	for (;;) {
		switch (admit_conn_open(r->admit, peer)) {
		case ADMIT_CONN_OK:
			return 0;
		case ADMIT_CONN_SOURCE:
			return -1;
		case ADMIT_CONN_GLOBAL:
			if ((old = TAILQ_FIRST(&r->ctrls_new)) == NULL)
				return -1;
			r->ctr.control_evicted++;
			ctrl_close(old, CTRL_RST, "evicted at the connection cap");
			break;
		}
	}
}

static void
ctrl_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct relay *r = w->data;
	(void)revents;

	for (int i = 0; i < 16; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(r->ctrl_fd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EMFILE || errno == ENFILE) {
				log_warn("control accept paused");
				ev_io_stop(loop, w);
				ev_timer_start(loop, &r->accept_retry);
			} else if (errno != EAGAIN && errno != EINTR &&
			    errno != ECONNABORTED)
				log_warn("control accept");
			return;
		}
		struct ctrl_conn *c = calloc(1, sizeof(*c));
		if (c == NULL || ep_from_sockaddr((struct sockaddr *)&ss, len, &c->peer) == -1) {
			free(c);
			close(fd);
			continue;
		}
		if (ctrl_admit(r, &c->peer.addr) == -1) {
			char b[EP_STRLEN];
			r->ctr.control_refused++;
			log_debug("control %s refused: connection cap", ep_fmt(&c->peer, b));
			free(c);
			sock_close_rst(fd);
			continue;
		}
		c->r = r;
		c->fd = fd;
		(void)sock_set_nodelay(fd);
		(void)sock_set_keepalive(fd, (int)(r->conf.keepalive_idle_ms / 1000),
		    (int)(r->conf.keepalive_interval_ms / 1000),
		    (int)r->conf.keepalive_count);
		ev_io_init(&c->io, ctrl_io_cb, fd, 0);
		c->io.data = c;
		/* Until its first authentic message: a short deadline. */
		ev_timer_init(&c->idle, ctrl_idle_cb,
		    (double)r->conf.control_first_timeout_ms / 1000.0, 0.);
		c->idle.data = c;
		c->last_msg = ev_now(loop);
		ev_timer_start(loop, &c->idle);
		TAILQ_INSERT_TAIL(&r->ctrls_new, c, link);
		r->ctr.control_conns++;
		ctrl_set_events(c);
	}
}

void
ctrl_start(struct relay *r)
{
	TAILQ_INIT(&r->ctrls);
	TAILQ_INIT(&r->ctrls_new);
	ev_io_init(&r->ctrl_accept, ctrl_accept_cb, r->ctrl_fd, EV_READ);
	r->ctrl_accept.data = r;
	ev_io_start(r->loop, &r->ctrl_accept);
}

void
ctrl_resume_accepting(struct relay *r)
{
	if (r->ctrl_fd >= 0 && !r->draining)
		ev_io_start(r->loop, &r->ctrl_accept);
}

void
ctrl_stop_accepting(struct relay *r)
{
	ev_io_stop(r->loop, &r->ctrl_accept);
	if (r->ctrl_fd >= 0) {
		close(r->ctrl_fd);
		r->ctrl_fd = -1;
	}
}

size_t
ctrl_revoke(struct relay *r, const struct ident_revoked *rev)
{
	struct ctrl_conn *c, *next;
	size_t n = 0;

	for (c = TAILQ_FIRST(&r->ctrls); c != NULL; c = next) {
		next = TAILQ_NEXT(c, link);
		if (rauth_identity(r) && ident_revoked_has(rev, c->serial)) {
			ctrl_close(c, CTRL_FIN, "certificate revoked");
			n++;
		}
	}
	return n;
}

void
ctrl_close_all(struct relay *r)
{
	struct ctrl_conn *c;

	while ((c = TAILQ_FIRST(&r->ctrls)) != NULL)
		ctrl_close(c, CTRL_FIN, "relay exiting");
	while ((c = TAILQ_FIRST(&r->ctrls_new)) != NULL)
		ctrl_close(c, CTRL_FIN, "relay exiting");
}
