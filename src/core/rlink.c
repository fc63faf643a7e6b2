#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/sock.h"
#include "slot/rlink.h"

/* A relay that stops reading cannot make us buffer without end: beyond this
 * the link is dropped and reconnected. */
#define RL_OUT_MAX (1024 * 1024)

struct rl_req {
	uint32_t id;
	rlink_answer_cb cb;
	void *req;
	TAILQ_ENTRY(rl_req) link;
};
TAILQ_HEAD(rl_req_list, rl_req);

struct rlink {
	const struct rlink_env *env;
	struct endpoint control;
	char name[EP_STRLEN];
	rlink_state_cb cb;
	void *user;

	enum rlink_state state;
	bool connected;		/* the TCP connect completed */
	int fd;
	ev_io io;
	int events;
	ev_timer timer;		/* connect and keepalive-answer deadline, or backoff */
	ev_timer ka;		/* keepalive interval */
	bool ka_outstanding;
	uint32_t ka_id;
	unsigned failures;
	int err;		/* errno of the last failure */
	uint64_t backoff_ms;
	uint32_t next_id;

	uint8_t in[4 * PROTO_MAX_LEN];
	size_t inlen;
	uint8_t *out;
	size_t outlen, outcap;

	struct rl_req_list reqs;
	size_t nreqs;

	/* The relay's last OBSERVED: it takes pipe tokens, and sees our
	 * control connection from observed. */
	bool observed_ok;
	struct endpoint observed;
	/* The relay's last answer to a keepalive claimed CHAINS: it takes
	 * PIPE_ESTABLISH_CHAIN. */
	bool chains_ok;

	/* Identity mode: the relay's HELLO accepted on this connection. */
	bool authed;
	struct proto_pair pair;
	struct ident_cert cert;
};

static void rl_connect(struct rlink *l);
static void rl_io_cb(struct ev_loop *loop, ev_io *w, int revents);

static double
ms_to_s(uint64_t ms)
{
	return (double)ms / 1000.;
}

static void
rl_set_state(struct rlink *l, enum rlink_state st)
{
	if (l->state == st)
		return;
	l->state = st;
	if (l->cb)
		l->cb(l->user, l, st);
}

static void
rl_fail_requests(struct rlink *l)
{
	struct rl_req *q;

	/* Each callback may cancel others or free nothing of ours: take the
	 * head each time. */
	while ((q = TAILQ_FIRST(&l->reqs)) != NULL) {
		TAILQ_REMOVE(&l->reqs, q, link);
		l->nreqs--;
		rlink_answer_cb cb = q->cb;
		void *req = q->req;
		free(q);
		cb(req, NULL);
	}
}

static void
rl_close_fd(struct rlink *l)
{
	struct ev_loop *loop = l->env->loop;

	ev_io_stop(loop, &l->io);
	ev_timer_stop(loop, &l->timer);
	ev_timer_stop(loop, &l->ka);
	l->events = 0;
	if (l->fd >= 0)
		close(l->fd);
	l->fd = -1;
	l->connected = false;
	l->inlen = l->outlen = 0;
	l->ka_outstanding = false;
	l->authed = false;
	auth_key_wipe(&l->pair.key);
}

static void
rl_backoff_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	rl_connect(w->data);
}

/* Drops the connection and schedules the next attempt; err is the errno
 * behind it (rlink_error), set before the callbacks run. */
static void
rl_down_err(struct rlink *l, int err, const char *why)
{
	const struct rlink_env *e = l->env;
	uint64_t wait;

	if (l->state == RL_UP)
		log_warnx("relay %s: control connection lost: %s", l->name, why);
	else if (l->failures == 0)
		log_warnx("relay %s: cannot set up the control connection: %s", l->name, why);
	else
		log_debug("relay %s: attempt %u failed: %s", l->name, l->failures + 1, why);
	l->failures++;
	l->err = err;
	rl_close_fd(l);
	l->observed_ok = false;
	l->chains_ok = false;
	rl_set_state(l, RL_DOWN);
	rl_fail_requests(l);

	if (l->backoff_ms < e->reconnect_min_ms)
		l->backoff_ms = e->reconnect_min_ms;
	/* Jitter spreads the reconnections of many clients after a relay
	 * restart. */
	wait = l->backoff_ms / 2 + (uint64_t)arc4random_uniform((uint32_t)(l->backoff_ms / 2 + 1));
	l->backoff_ms = l->backoff_ms * 2 > e->reconnect_max_ms ? e->reconnect_max_ms :
	    l->backoff_ms * 2;
	ev_timer_init(&l->timer, rl_backoff_cb, ms_to_s(wait), 0.);
	l->timer.data = l;
	ev_timer_start(e->loop, &l->timer);
}

/* A failure with no errno behind it: the peer spoke something else. */
static void
rl_down(struct rlink *l, const char *why)
{
	rl_down_err(l, EPROTO, why);
}

static void
rl_set_events(struct rlink *l)
{
	int ev;

	if (l->fd < 0)
		return;
	if (!l->connected)
		ev = EV_WRITE;	/* the connect itself */
	else
		ev = EV_READ | (l->outlen > 0 ? EV_WRITE : 0);
	if (ev == l->events)
		return;
	ev_io_stop(l->env->loop, &l->io);
	l->events = ev;
	ev_io_set(&l->io, l->fd, ev);
	ev_io_start(l->env->loop, &l->io);
}

/* Writes what is queued. Returns -1 if the link went down. */
static int
rl_flush(struct rlink *l)
{
	while (l->connected && l->outlen > 0) {
		ssize_t n = send(l->fd, l->out, l->outlen, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == ENOTCONN))
			break;
		if (n <= 0) {
			rl_down_err(l, errno, strerror(errno));
			return -1;
		}
		memmove(l->out, l->out + n, l->outlen - (size_t)n);
		l->outlen -= (size_t)n;
	}
	rl_set_events(l);
	return 0;
}

/* Queues one message; returns its id, or 0. */
static uint32_t
rl_send(struct rlink *l, struct proto_msg *m)
{
	uint8_t buf[PROTO_MAX_LEN];
	int n;

	if (l->fd < 0)
		return 0;
	if (++l->next_id == 0)
		l->next_id = 1;
	m->id = l->next_id;
	proto_stamp(m);
	if (l->env->id == NULL)
		n = proto_encode(m, l->env->key, buf, sizeof(buf));
	else if (m->type == PROTO_HELLO)
		n = proto_encode_hello(m, l->env->id, buf, sizeof(buf));
	else if (l->authed) {
		memcpy(m->sender, l->env->id->cert.pk, PROTO_PK_LEN);
		n = proto_encode(m, &l->pair.key, buf, sizeof(buf));
	} else
		return 0;	/* nothing but a HELLO before the relay's */
	if (n < 0)
		return 0;
	if (l->outlen + (size_t)n > RL_OUT_MAX)
		return 0;
	if (l->outlen + (size_t)n > l->outcap) {
		size_t cap = l->outcap ? l->outcap * 2 : 4096;
		while (cap < l->outlen + (size_t)n)
			cap *= 2;
		uint8_t *o = realloc(l->out, cap);
		if (o == NULL)
			return 0;
		l->out = o;
		l->outcap = cap;
	}
	memcpy(l->out + l->outlen, buf, (size_t)n);
	l->outlen += (size_t)n;
	return m->id;
}

static void
rl_deadline_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct rlink *l = w->data;
	(void)loop;
	(void)revents;

	rl_down_err(l, ETIMEDOUT, l->env->id != NULL && !l->authed ?
	    "no HELLO from the relay in time" :
	    l->state == RL_CONNECTING ? "no answer to the first keepalive" :
	    "keepalive not answered in time");
}

static void
rl_arm_deadline(struct rlink *l)
{
	ev_timer_stop(l->env->loop, &l->timer);
	ev_timer_init(&l->timer, rl_deadline_cb, ms_to_s(l->env->keepalive_timeout_ms), 0.);
	l->timer.data = l;
	ev_timer_start(l->env->loop, &l->timer);
}

static void
rl_keepalive(struct rlink *l)
{
	/* Every keepalive asks what the relay sees: a NAT's mapping may
	 * change while the link lives. A relay that knows no tokens answers
	 * KEEPALIVE_ACK all the same. It asks too whether the relay takes
	 * chains, which a reload may change; an older relay ignores that. */
	struct proto_msg m = { .type = PROTO_KEEPALIVE,
	    .flags = PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS };

	if (l->ka_outstanding)
		return;
	if ((l->ka_id = rl_send(l, &m)) == 0) {
		rl_down(l, "cannot queue a keepalive");
		return;
	}
	l->ka_outstanding = true;
	rl_arm_deadline(l);
	(void)rl_flush(l);
}

static void
rl_ka_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	rl_keepalive(w->data);
}

static void
rl_connect(struct rlink *l)
{
	const struct rlink_env *e = l->env;

	rl_close_fd(l);
	if ((l->fd = sock_connect_nb(&l->control, e->bypass_mark)) == -1) {
		rl_down_err(l, errno, strerror(errno));
		return;
	}
	(void)sock_set_nodelay(l->fd);
	(void)sock_set_keepalive(l->fd, 60, 10, 6);
	rl_set_state(l, RL_CONNECTING);
	ev_io_init(&l->io, rl_io_cb, l->fd, EV_WRITE);
	l->io.data = l;
	l->events = 0;
	if (l->env->id != NULL) {
		/* Identity mode: our HELLO goes out with the connect; the
		 * relay's answer brings its key, then the first keepalive. */
		struct proto_msg m = { .type = PROTO_HELLO };
		if (rl_send(l, &m) == 0) {
			rl_down(l, "cannot queue our HELLO");
			return;
		}
		rl_arm_deadline(l);
		(void)rl_flush(l);
		return;
	}
	/* The first keepalive goes out with the connect; its answer proves
	 * that the relay holds our key. */
	rl_keepalive(l);
}

/* Identity mode: the relay's answer to our HELLO. A relay certificate of
 * our CA, valid now and not revoked, for a key other than ours. Returns -1
 * if the link went down. */
static int
rl_hello(struct rlink *l, const struct proto_msg *m)
{
	const struct rlink_env *e = l->env;
	const struct ident_cert *c = &m->u.hello.cert;
	char why[256], b[320];

	if (m->type != PROTO_HELLO) {
		snprintf(b, sizeof(b), "relay's first message is %s, not HELLO (relay in "
		    "[auth] mode shared?)", proto_type_str(m->type));
		rl_down(l, b);
		return -1;
	}
	if (ident_cert_check(c, e->id->ca_pk, IDENT_MASK(IDENT_ROLE_RELAY),
	    (uint64_t)time(NULL), e->revoked, why, sizeof(why)) == -1 ||
	    memcmp(c->pk, e->id->cert.pk, IDENT_PK_LEN) == 0) {
		snprintf(b, sizeof(b), "relay refused: %s", why);
		rl_down_err(l, EACCES, b);
		return -1;
	}
	if (ident_pair_key(e->id, c->pk, &l->pair.key) == -1) {
		rl_down(l, "relay's key is unusable");
		return -1;
	}
	memcpy(l->pair.pk, c->pk, IDENT_PK_LEN);
	l->cert = *c;
	l->authed = true;
	log_debug("relay %s: is '%s' (serial %016llx)", l->name, c->name,
	    (unsigned long long)c->serial);
	ev_timer_stop(e->loop, &l->timer);
	rl_keepalive(l);
	return l->fd < 0 ? -1 : 0;
}

static struct rl_req *
rl_find(struct rlink *l, uint32_t id)
{
	struct rl_req *q;

	TAILQ_FOREACH(q, &l->reqs, link)
		if (q->id == id)
			return q;
	return NULL;
}

/* Handles one authentic message. Returns -1 if the link went down. */
static int
rl_message(struct rlink *l, const struct proto_msg *m)
{
	struct rl_req *q;
	char b[64], ob[EP_STRLEN];

	switch (replay_check(l->env->replay, m->ts_us, m->nonce, clock_real_us())) {
	case REPLAY_OK:
		break;
	case REPLAY_STALE:
		snprintf(b, sizeof(b), "stale message (clocks more than the allowed skew apart?)");
		rl_down(l, b);
		return -1;
	case REPLAY_FULL:
		/* It cannot be proven fresh, so it is not acted on; but the
		 * relay did nothing wrong, and the cache is shared by every
		 * link: the link stays (a lost answer times out). */
		log_warnx("relay %s: a message dropped: the replay cache is full", l->name);
		return 0;
	default:
		rl_down(l, "replayed message");
		return -1;
	}
	if (l->env->id != NULL && !l->authed)
		return rl_hello(l, m);
	switch (m->type) {
	case PROTO_KEEPALIVE_ACK:
	case PROTO_OBSERVED:
		if (!l->ka_outstanding || m->id != l->ka_id)
			break;
		l->ka_outstanding = false;
		if (m->type == PROTO_OBSERVED) {
			if (!l->observed_ok || !ep_eq(&l->observed, &m->u.observed.addr))
				log_info("relay %s: sees us from %s", l->name,
				    ep_fmt(&m->u.observed.addr, ob));
			l->observed = m->u.observed.addr;
			l->observed_ok = true;
		} else {
			l->observed_ok = false;
		}
		/* Said once a connection, and on each change (a reload). */
		if (l->state != RL_UP || l->chains_ok != ((m->flags & PROTO_FLAG_CHAINS) != 0))
			log_info("relay %s: %s chains", l->name,
			    m->flags & PROTO_FLAG_CHAINS ? "takes" : "does not take");
		l->chains_ok = (m->flags & PROTO_FLAG_CHAINS) != 0;
		ev_timer_stop(l->env->loop, &l->timer);
		if (l->state != RL_UP) {
			if (l->failures > 0)
				log_info("relay %s: control connection up after %u failed "
				    "attempts", l->name, l->failures);
			else
				log_info("relay %s: control connection up", l->name);
			l->failures = 0;
			l->backoff_ms = 0;
			rl_set_state(l, RL_UP);
		}
		ev_timer_stop(l->env->loop, &l->ka);
		ev_timer_init(&l->ka, rl_ka_cb, ms_to_s(l->env->keepalive_interval_ms), 0.);
		l->ka.data = l;
		ev_timer_start(l->env->loop, &l->ka);
		break;
	case PROTO_PIPE_OK:
	case PROTO_PIPE_FAIL:
	case PROTO_ERROR:
		if (m->type == PROTO_ERROR && (m->id == l->ka_id || m->id == 0)) {
			snprintf(b, sizeof(b), "relay answered ERROR %s",
			    proto_error_code_str(m->u.error.code));
			rl_down(l, b);
			return -1;
		}
		if ((q = rl_find(l, m->id)) == NULL)
			break;	/* cancelled */
		TAILQ_REMOVE(&l->reqs, q, link);
		l->nreqs--;
		rlink_answer_cb cb = q->cb;
		void *req = q->req;
		free(q);
		cb(req, m);
		break;
	default:
		snprintf(b, sizeof(b), "unexpected %s", proto_type_str(m->type));
		rl_down(l, b);
		return -1;
	}
	return 0;
}

/* Identity mode: the relay's messages, MACed with our pair key, once its
 * HELLO is in; before, only its HELLO decodes. */
static const struct auth_key *
rl_key_fn(void *arg, const struct proto_hdr *h)
{
	struct rlink *l = arg;

	return l->authed ? proto_key_pair(&l->pair, h) : NULL;
}

static void
rl_read(struct rlink *l)
{
	struct proto_msg m;
	enum proto_err why;
	size_t used, off = 0;
	ssize_t n;

	n = recv(l->fd, l->in + l->inlen, sizeof(l->in) - l->inlen, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		rl_down_err(l, n == 0 ? ECONNRESET : errno,
		    n == 0 ? "closed by the relay" : strerror(errno));
		return;
	}
	l->inlen += (size_t)n;
	while (off < l->inlen) {
		enum proto_result r = l->env->id == NULL ?
		    proto_decode(l->in + off, l->inlen - off, l->env->key, &m, &used, &why) :
		    proto_decode_with(l->in + off, l->inlen - off, rl_key_fn, l, &m, &used,
		    &why);
		if (r == PROTO_NEED_MORE)
			break;
		if (r == PROTO_BAD) {
			char b[120];
			snprintf(b, sizeof(b), "bad message from the relay: %s (%s)",
			    proto_err_str(why), l->env->id == NULL ?
			    "is the deployment key the same?" :
			    "is the relay in [auth] mode identity?");
			rl_down(l, b);
			return;
		}
		off += used;
		if (rl_message(l, &m) == -1)
			return;
	}
	memmove(l->in, l->in + off, l->inlen - off);
	l->inlen -= off;
}

static void
rl_io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct rlink *l = w->data;
	int err;
	(void)loop;

	if (!l->connected) {
		if ((err = sock_connect_result(l->fd)) != 0) {
			rl_down_err(l, err, strerror(err));
			return;
		}
		l->connected = true;
	}
	if (revents & EV_WRITE) {
		if (rl_flush(l) == -1)
			return;
	}
	if (revents & EV_READ)
		rl_read(l);
}

struct rlink *
rlink_new(const struct rlink_env *env, const struct endpoint *control, rlink_state_cb cb,
    void *user)
{
	struct rlink *l = calloc(1, sizeof(*l));

	if (l == NULL)
		return NULL;
	l->env = env;
	l->control = *control;
	ep_fmt(control, l->name);
	l->cb = cb;
	l->user = user;
	l->fd = -1;
	TAILQ_INIT(&l->reqs);
	ev_init(&l->io, rl_io_cb);
	l->io.data = l;
	ev_init(&l->timer, rl_deadline_cb);
	l->timer.data = l;
	ev_init(&l->ka, rl_ka_cb);
	l->ka.data = l;
	rl_connect(l);
	return l;
}

void
rlink_free(struct rlink *l)
{
	if (l == NULL)
		return;
	l->cb = NULL;
	rl_close_fd(l);
	rl_fail_requests(l);
	free(l->out);
	free(l);
}

enum rlink_state
rlink_state(const struct rlink *l)
{
	return l->state;
}

uint32_t
rlink_rtt_us(const struct rlink *l)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (l->state != RL_UP || l->fd < 0 ||
	    getsockopt(l->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
		return 0;
	return ti.tcpi_rtt;
}

const struct endpoint *
rlink_endpoint(const struct rlink *l)
{
	return &l->control;
}

unsigned
rlink_failures(const struct rlink *l)
{
	return l->failures;
}

int
rlink_error(const struct rlink *l)
{
	return l->err;
}

int
rlink_local(const struct rlink *l, struct endpoint *out)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (l->fd < 0 || !l->connected ||
	    getsockname(l->fd, (struct sockaddr *)&ss, &len) == -1)
		return -1;
	return ep_from_sockaddr((struct sockaddr *)&ss, len, out);
}

size_t
rlink_pending(const struct rlink *l)
{
	return l->nreqs;
}

const struct proto_pair *
rlink_pair(const struct rlink *l)
{
	return l->authed ? &l->pair : NULL;
}

const struct ident_cert *
rlink_cert(const struct rlink *l)
{
	return l->authed ? &l->cert : NULL;
}

void
rlink_drop(struct rlink *l, const char *why)
{
	if (l->fd >= 0)
		rl_down(l, why);
}

bool
rlink_revoke(struct rlink *l, const struct ident_revoked *rev)
{
	if (!l->authed || !ident_revoked_has(rev, l->cert.serial))
		return false;
	rl_down(l, "certificate revoked");
	return true;
}

bool
rlink_chains(const struct rlink *l)
{
	return l->state == RL_UP && l->chains_ok;
}

const struct endpoint *
rlink_observed(const struct rlink *l)
{
	return l->state == RL_UP && l->observed_ok ? &l->observed : NULL;
}

uint32_t
rlink_establish(struct rlink *l, const struct endpoint *client, const struct endpoint *server,
    rlink_answer_cb cb, void *req)
{
	return rlink_establish_token(l, client, server, NULL, cb, req);
}

/* Sends request m (a PIPE_ESTABLISH of some kind) and remembers cb. */
static uint32_t
rl_request(struct rlink *l, struct proto_msg *m, rlink_answer_cb cb, void *req)
{
	struct rl_req *q;

	if (l->state != RL_UP || (q = calloc(1, sizeof(*q))) == NULL)
		return 0;
	if ((q->id = rl_send(l, m)) == 0) {
		free(q);
		return 0;
	}
	q->cb = cb;
	q->req = req;
	TAILQ_INSERT_TAIL(&l->reqs, q, link);
	l->nreqs++;
	/* The flush may take the link down, which answers q NULL at once:
	 * the caller sees its callback before the id. Defer the write to the
	 * loop instead, so the id always comes first. */
	rl_set_events(l);
	return q->id;
}

uint32_t
rlink_establish_token(struct rlink *l, const struct endpoint *client,
    const struct endpoint *server, const uint8_t *token, rlink_answer_cb cb, void *req)
{
	struct proto_msg m = { .type = token ? PROTO_PIPE_ESTABLISH_TOKEN : PROTO_PIPE_ESTABLISH };

	m.u.establish.client = *client;
	m.u.establish.server = *server;
	if (token)
		memcpy(m.u.establish.token, token, PROTO_TOKEN_LEN);
	return rl_request(l, &m, cb, req);
}

uint32_t
rlink_establish_chain(struct rlink *l, const struct endpoint *client,
    const struct endpoint *server, const uint8_t *token, const struct rlink_hop *hops,
    unsigned nhops, rlink_answer_cb cb, void *req)
{
	struct proto_msg m = { .type = PROTO_PIPE_ESTABLISH_CHAIN };

	if (nhops < 1 || nhops > PROTO_CHAIN_MAX_HOPS)
		return 0;
	m.u.chain.client = *client;
	m.u.chain.server = *server;
	if (token)
		memcpy(m.u.chain.token, token, PROTO_TOKEN_LEN);
	m.u.chain.hops = (uint8_t)nhops;
	for (unsigned i = 0; i < nhops; i++) {
		m.u.chain.hop_ctl[i] = hops[i].control;
		m.u.chain.hop_data[i] = hops[i].data;
	}
	return rl_request(l, &m, cb, req);
}

void
rlink_cancel(struct rlink *l, uint32_t id)
{
	struct rl_req *q = rl_find(l, id);

	if (q == NULL)
		return;
	TAILQ_REMOVE(&l->reqs, q, link);
	l->nreqs--;
	free(q);
}
