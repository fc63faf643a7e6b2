/* slotd's control link to a relay (src/core/rlink.c) against a fake relay
 * in the same event loop: a loopback TCP listener that decodes what the link
 * sends and answers as each test tells it to. Waits are for events, with a
 * generous deadline; nothing asserts how long anything took. */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/auth.h"
#include "slot/clock.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/replay.h"
#include "slot/sock.h"
#include "slot/rlink.h"

#define WAIT_S 10.
#define KA_TIMEOUT_MS 3000	/* long enough never to fire by accident */
/* Long by default, so that no keepalive flushes what a test expects the
 * link to send by itself. */
#define KA_INTERVAL_MS 30000

static struct ev_loop *loop;
static struct rlink_env env;
static struct auth_key key, other_key;
static struct rlink *L;
static bool expired;
static ev_timer deadline;

#define WAIT_FOR(cond) do {						\
	expired = false;						\
	ev_timer_set(&deadline, WAIT_S, 0.);				\
	ev_timer_start(loop, &deadline);				\
	while (!(cond) && !expired)					\
		ev_run(loop, EVRUN_ONCE);				\
	ev_timer_stop(loop, &deadline);					\
	if (!(cond))							\
		fail_msg("timed out waiting for %s", #cond);		\
} while (0)

/* Loopback delivers at once: a few passes see whatever was sent before.
 * Only used before asserting that something did NOT happen. */
static void
settle(void)
{
	for (int i = 0; i < 10; i++)
		ev_run(loop, EVRUN_NOWAIT);
}

/* Lets the loop run for a while, for checks that nothing happens. */
static void
run_for(double secs)
{
	expired = false;
	ev_timer_set(&deadline, secs, 0.);
	ev_timer_start(loop, &deadline);
	while (!expired)
		ev_run(loop, EVRUN_ONCE);
}

static void
deadline_cb(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
	expired = true;
}

/* The link's state callback. */
#define MAXST 256
static enum rlink_state states[MAXST];
static size_t nstates;
static int user_token;
static struct rlink *cb_link;

static void
state_cb(void *user, struct rlink *l, enum rlink_state st)
{
	assert_ptr_equal(user, &user_token);
	cb_link = l;
	if (nstates < MAXST)
		states[nstates] = st;
	nstates++;
}

static size_t
count_state(enum rlink_state st)
{
	size_t n = 0;

	for (size_t i = 0; i < nstates && i < MAXST; i++)
		n += states[i] == st;
	return n;
}

static void
assert_states(const enum rlink_state *want, size_t n)
{
	assert_int_equal(nstates, n);
	for (size_t i = 0; i < n; i++)
		if (states[i] != want[i])
			fail_msg("state %zu is %d, want %d", i, states[i], want[i]);
}

/* One request as the daemon would hold it. */
struct ans {
	int calls;
	bool null;
	struct proto_msg m;
	uint32_t cancel;	/* cancel this id from the callback */
	bool reissue;		/* call rlink_establish from the callback */
	uint32_t reissued;
	struct ans *next;	/* request for the reissue */
};

static struct endpoint client_ep, server_ep;
/* Set once a test is over: requests it left behind point into its gone
 * stack frame. */
static bool tearing_down;

static void
answer_cb(void *req, const struct proto_msg *m)
{
	struct ans *a = req;

	if (tearing_down)
		return;
	a->calls++;
	a->null = m == NULL;
	if (m)
		a->m = *m;
	if (a->cancel)
		rlink_cancel(L, a->cancel);
	if (a->reissue)
		a->reissued = rlink_establish(L, &client_ep, &server_ep, answer_cb, a->next);
}

static uint32_t
establish(struct ans *a)
{
	return rlink_establish(L, &client_ep, &server_ep, answer_cb, a);
}

/* The fake relay. */
enum ka_mode { KA_ANSWER, KA_HOLD, KA_IGNORE, KA_OBSERVED };
enum pipe_mode { PM_OK, PM_FAIL, PM_ERROR, PM_HOLD };

static struct relay {
	int lfd;
	ev_io lio;
	struct endpoint ep;
	int fd;			/* the current control connection, or -1 */
	ev_io io;
	uint8_t in[8192];
	size_t inlen;
	int accepts, peer_closes, bad;
	const struct auth_key *sign;
	enum ka_mode ka;
	enum pipe_mode pipe;
	bool trickle;		/* write answers one byte per loop pass */
	uint8_t out[4096];
	size_t outlen, outoff;
	ev_io wio;
	int nka, nest;
	uint16_t ka_flags;	/* of the last keepalive */
	uint16_t ans_flags;	/* on our answers to keepalives (CHAINS) */
	struct endpoint seen;	/* KA_OBSERVED: what OBSERVED says */
	uint32_t held_ka;
	uint32_t held[16];
	size_t nheld;
	struct proto_msg last_est;
	uint8_t last_sent[PROTO_MAX_LEN];
	size_t last_sent_len;
} R;

static void
relay_drop(void)
{
	if (R.fd < 0)
		return;
	ev_io_stop(loop, &R.io);
	ev_io_stop(loop, &R.wio);
	close(R.fd);
	R.fd = -1;
	R.inlen = R.outlen = R.outoff = 0;
}

static void
relay_trickle_cb(struct ev_loop *l, ev_io *w, int revents)
{
	(void)revents;
	if (R.outoff < R.outlen && send(R.fd, R.out + R.outoff, 1, MSG_NOSIGNAL) == 1)
		R.outoff++;
	if (R.outoff == R.outlen) {
		R.outoff = R.outlen = 0;
		ev_io_stop(l, w);
	}
}

static void
relay_write(const void *buf, size_t len)
{
	ssize_t n;

	assert_true(R.fd >= 0);
	if (R.trickle) {
		assert_true(R.outlen + len <= sizeof(R.out));
		memcpy(R.out + R.outlen, buf, len);
		R.outlen += len;
		ev_io_start(loop, &R.wio);
		return;
	}
	/* The link may have hung up already; small writes are never short,
	 * and of a big blob of junk the start is enough. */
	n = send(R.fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	assert_true(n < 0 || (size_t)n == len || len > 4096);
}

static struct proto_msg
relay_msg(uint8_t type, uint32_t id)
{
	struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.id = id;
	m.ts_us = clock_real_us();
	m.nonce = (uint64_t)arc4random() << 32 | arc4random();
	return m;
}

static size_t
relay_encode(const struct proto_msg *m, uint8_t *buf)
{
	int n = proto_encode(m, R.sign, buf, PROTO_MAX_LEN);

	assert_true(n > 0);
	return (size_t)n;
}

static void
relay_send(const struct proto_msg *m)
{
	R.last_sent_len = relay_encode(m, R.last_sent);
	relay_write(R.last_sent, R.last_sent_len);
}

static void
relay_send_ka_ack(uint32_t id)
{
	struct proto_msg m = relay_msg(PROTO_KEEPALIVE_ACK, id);

	m.flags = R.ans_flags;
	relay_send(&m);
}

static struct proto_msg
pipe_answer(enum pipe_mode pm, uint32_t id)
{
	struct proto_msg m;

	switch (pm) {
	case PM_FAIL:
		m = relay_msg(PROTO_PIPE_FAIL, id);
		m.u.fail.reason = FAIL_POLICY_PORT;
		m.u.fail.detail = 13;
		break;
	case PM_ERROR:
		m = relay_msg(PROTO_ERROR, id);
		m.u.error.code = ERR_TYPE;
		break;
	default:
		m = relay_msg(PROTO_PIPE_OK, id);
		m.u.ok.connect_us = 4242;
		m.u.ok.pending_ms = 10000;
		break;
	}
	return m;
}

static void
relay_message(const struct proto_msg *m)
{
	switch (m->type) {
	case PROTO_KEEPALIVE:
		R.nka++;
		R.ka_flags = m->flags;
		if (R.ka == KA_ANSWER)
			relay_send_ka_ack(m->id);
		else if (R.ka == KA_OBSERVED) {
			struct proto_msg a = relay_msg(PROTO_OBSERVED, m->id);
			a.u.observed.addr = R.seen;
			a.flags = R.ans_flags;
			relay_send(&a);
		}
		else if (R.ka == KA_HOLD)
			R.held_ka = m->id;
		break;
	case PROTO_PIPE_ESTABLISH:
	case PROTO_PIPE_ESTABLISH_TOKEN:
	case PROTO_PIPE_ESTABLISH_CHAIN:
		R.nest++;
		R.last_est = *m;
		if (R.pipe == PM_HOLD) {
			assert_true(R.nheld < 16);
			R.held[R.nheld++] = m->id;
		} else {
			struct proto_msg a = pipe_answer(R.pipe, m->id);
			relay_send(&a);
		}
		break;
	default:
		fail_msg("the link sent a %s", proto_type_str(m->type));
	}
}

static void
relay_read_cb(struct ev_loop *l, ev_io *w, int revents)
{
	struct proto_msg m;
	enum proto_err why;
	size_t used, off = 0;
	ssize_t n;
	(void)l;
	(void)w;
	(void)revents;

	n = recv(R.fd, R.in + R.inlen, sizeof(R.in) - R.inlen, MSG_DONTWAIT);
	if (n < 0 && errno == EAGAIN)
		return;
	if (n <= 0) {
		R.peer_closes++;
		relay_drop();
		return;
	}
	R.inlen += (size_t)n;
	while (off < R.inlen) {
		enum proto_result r = proto_decode(R.in + off, R.inlen - off, &key, &m, &used,
		    &why);
		if (r == PROTO_NEED_MORE)
			break;
		if (r == PROTO_BAD) {
			R.bad++;
			relay_drop();
			return;
		}
		off += used;
		relay_message(&m);
		if (R.fd < 0)
			return;
	}
	memmove(R.in, R.in + off, R.inlen - off);
	R.inlen -= off;
}

static void
relay_accept_cb(struct ev_loop *l, ev_io *w, int revents)
{
	char b;
	int fd;
	ssize_t n;
	(void)w;
	(void)revents;

	if ((fd = accept4(R.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) == -1)
		return;
	/* The link holds one connection at a time: an old one is finished,
	 * whether or not its end was read yet. */
	if (R.fd >= 0) {
		n = recv(R.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			R.peer_closes++;
		relay_drop();
	}
	(void)sock_set_nodelay(fd);
	R.fd = fd;
	R.accepts++;
	ev_io_init(&R.io, relay_read_cb, fd, EV_READ);
	ev_io_start(l, &R.io);
	ev_io_init(&R.wio, relay_trickle_cb, fd, EV_WRITE);
}

/* A loopback port nobody listens on. */
static struct endpoint
closed_port(void)
{
	struct endpoint ep;
	int fd;

	assert_int_equal(ep_parse("127.0.0.1:1", 0, &ep), 0);
	ep.port = 0;
	fd = sock_listen_tcp(&ep, 1);
	assert_true(fd >= 0);
	assert_int_equal(sock_local_ep(fd, &ep), 0);
	close(fd);
	return ep;
}

static int
setup(void **state)
{
	struct endpoint any;
	(void)state;

	if ((loop = ev_loop_new(0)) == NULL)
		return -1;
	ev_timer_init(&deadline, deadline_cb, WAIT_S, 0.);
	memset(&env, 0, sizeof(env));
	env.loop = loop;
	env.key = &key;
	if ((env.replay = replay_new(1024, 30 * 1000000ULL)) == NULL)
		return -1;
	env.bypass_mark = 0;
	env.keepalive_interval_ms = KA_INTERVAL_MS;
	env.keepalive_timeout_ms = KA_TIMEOUT_MS;
	env.reconnect_min_ms = 20;
	env.reconnect_max_ms = 200;

	memset(&R, 0, sizeof(R));
	R.fd = -1;
	R.sign = &key;
	if (ep_parse("127.0.0.1:1", 0, &any) == -1)
		return -1;
	any.port = 0;
	if ((R.lfd = sock_listen_tcp(&any, 16)) == -1 || sock_local_ep(R.lfd, &R.ep) == -1)
		return -1;
	ev_io_init(&R.lio, relay_accept_cb, R.lfd, EV_READ);
	ev_io_start(loop, &R.lio);

	L = NULL;
	cb_link = NULL;
	nstates = 0;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	tearing_down = true;
	rlink_free(L);
	tearing_down = false;
	L = NULL;
	relay_drop();
	ev_io_stop(loop, &R.lio);
	close(R.lfd);
	replay_free(env.replay);
	ev_loop_destroy(loop);
	loop = NULL;
	return 0;
}

static void
bring_up(void)
{
	L = rlink_new(&env, &R.ep, state_cb, &user_token);
	assert_non_null(L);
	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_ptr_equal(cb_link, L);
	assert_int_equal(rlink_failures(L), 0);
}

static void
test_up_only_after_keepalive_ack(void **state)
{
	static const enum rlink_state want[] = { RL_CONNECTING, RL_UP };
	struct ans a = { 0 };
	(void)state;

	R.ka = KA_HOLD;
	L = rlink_new(&env, &R.ep, state_cb, &user_token);
	assert_non_null(L);
	assert_true(ep_eq(rlink_endpoint(L), &R.ep));
	WAIT_FOR(R.nka == 1);
	assert_int_equal(rlink_state(L), RL_CONNECTING);
	assert_states(want, 1);
	/* Not up yet: nothing can be sent. */
	assert_int_equal(establish(&a), 0);
	assert_int_equal(rlink_pending(L), 0);

	/* An answer to another keepalive proves nothing. */
	relay_send_ka_ack(R.held_ka + 1000);
	settle();
	assert_int_equal(rlink_state(L), RL_CONNECTING);

	relay_send_ka_ack(R.held_ka);
	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_states(want, 2);
	assert_ptr_equal(cb_link, L);
	assert_int_equal(rlink_failures(L), 0);
	assert_int_equal(R.accepts, 1);
	assert_int_equal(a.calls, 0);
}

/* Every keepalive asks what the relay sees. An older relay answers
 * KEEPALIVE_ACK: no tokens through it. */
static void
test_no_observed_from_older_relay(void **state)
{
	(void)state;

	bring_up();
	assert_int_equal(R.ka_flags, PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS);
	assert_null(rlink_observed(L));
	/* Nor does it claim CHAINS: no chain is sent through it. */
	assert_false(rlink_chains(L));
}

/* Every keepalive asks whether the relay takes chains; the last answer
 * tells, with KEEPALIVE_ACK or OBSERVED alike (a reload may change it),
 * and a link down tells nothing. */
static void
test_chains_claimed(void **state)
{
	int n;
	(void)state;

	env.keepalive_interval_ms = 50;
	R.ans_flags = PROTO_FLAG_CHAINS;
	bring_up();
	assert_true(rlink_chains(L));
	/* It stops claiming it (a reload with [chain] allow = no). */
	R.ans_flags = 0;
	n = R.nka;
	WAIT_FOR(R.nka >= n + 2);
	assert_false(rlink_chains(L));
	assert_int_equal(rlink_state(L), RL_UP);
	/* OBSERVED carries it as well. */
	R.ka = KA_OBSERVED;
	assert_int_equal(ep_parse("198.51.100.77:61234", 0, &R.seen), 0);
	R.ans_flags = PROTO_FLAG_CHAINS;
	WAIT_FOR(rlink_chains(L));
	assert_non_null(rlink_observed(L));
	relay_drop();
	WAIT_FOR(rlink_state(L) != RL_UP);
	assert_false(rlink_chains(L));
}

/* A relay that answers OBSERVED: the link is up on it, tells what the relay
 * sees, and carries PIPE_ESTABLISH_TOKEN with the token. */
static void
test_observed_and_token(void **state)
{
	static const uint8_t tok[PROTO_TOKEN_LEN] = { 9, 8, 7, 6, 5, 4, 3, 2 };
	const struct endpoint *seen;
	struct ans a = { 0 };
	uint32_t id;
	(void)state;

	R.ka = KA_OBSERVED;
	assert_int_equal(ep_parse("198.51.100.77:61234", 0, &R.seen), 0);
	bring_up();
	assert_non_null(seen = rlink_observed(L));
	assert_true(ep_eq(seen, &R.seen));
	R.pipe = PM_OK;
	id = rlink_establish_token(L, &client_ep, &server_ep, tok, answer_cb, &a);
	assert_int_not_equal(id, 0);
	WAIT_FOR(a.calls == 1);
	assert_int_equal(R.last_est.type, PROTO_PIPE_ESTABLISH_TOKEN);
	assert_int_equal(R.last_est.id, id);
	assert_memory_equal(R.last_est.u.establish.token, tok, PROTO_TOKEN_LEN);
	assert_true(ep_eq(&R.last_est.u.establish.client, &client_ep));
	assert_int_equal(a.m.type, PROTO_PIPE_OK);
	/* Down, it tells nothing. */
	relay_drop();
	WAIT_FOR(rlink_state(L) != RL_UP);
	assert_null(rlink_observed(L));
}

/* A chain request carries the hops in order, the token or none, and its
 * answer (a PIPE_FAIL NEXT_HOP here) comes back as any other's; hop counts
 * the format cannot carry are refused before anything is sent. */
static void
test_establish_chain(void **state)
{
	static const uint8_t tok[PROTO_TOKEN_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct rlink_hop hops[3];
	struct endpoint local;
	struct ans a = { 0 }, b = { 0 };
	uint32_t id;
	(void)state;

	assert_int_equal(ep_parse("192.0.2.20:7600", 0, &hops[0].control), 0);
	assert_int_equal(ep_parse("192.0.2.20:7601", 0, &hops[0].data), 0);
	assert_int_equal(ep_parse("192.0.2.30:7600", 0, &hops[1].control), 0);
	assert_int_equal(ep_parse("192.0.2.30:7601", 0, &hops[1].data), 0);
	hops[2] = hops[1];
	bring_up();
	/* The local end of the control connection: the fake relay's family,
	 * a port of ours. */
	assert_int_equal(rlink_local(L, &local), 0);
	assert_int_equal(local.addr.family, R.ep.addr.family);
	assert_int_not_equal(local.port, 0);
	assert_int_equal(rlink_establish_chain(L, &client_ep, &server_ep, NULL, hops, 0,
	    answer_cb, &a), 0);
	assert_int_equal(rlink_establish_chain(L, &client_ep, &server_ep, NULL, hops, 3,
	    answer_cb, &a), 0);
	assert_int_equal(rlink_pending(L), 0);

	R.pipe = PM_OK;
	id = rlink_establish_chain(L, &client_ep, &server_ep, tok, hops, 2, answer_cb, &a);
	assert_int_not_equal(id, 0);
	WAIT_FOR(a.calls == 1);
	assert_int_equal(R.last_est.type, PROTO_PIPE_ESTABLISH_CHAIN);
	assert_int_equal(R.last_est.id, id);
	assert_int_equal(R.last_est.u.chain.hops, 2);
	assert_memory_equal(R.last_est.u.chain.token, tok, PROTO_TOKEN_LEN);
	assert_true(ep_eq(&R.last_est.u.chain.client, &client_ep));
	assert_true(ep_eq(&R.last_est.u.chain.server, &server_ep));
	assert_true(ep_eq(&R.last_est.u.chain.hop_ctl[0], &hops[0].control));
	assert_true(ep_eq(&R.last_est.u.chain.hop_data[0], &hops[0].data));
	assert_true(ep_eq(&R.last_est.u.chain.hop_ctl[1], &hops[1].control));
	assert_true(ep_eq(&R.last_est.u.chain.hop_data[1], &hops[1].data));
	assert_int_equal(a.m.type, PROTO_PIPE_OK);

	R.pipe = PM_FAIL;
	id = rlink_establish_chain(L, &client_ep, &server_ep, NULL, hops + 1, 1, answer_cb, &b);
	assert_int_not_equal(id, 0);
	WAIT_FOR(b.calls == 1);
	assert_int_equal(R.last_est.u.chain.hops, 1);
	assert_true(ep_eq(&R.last_est.u.chain.hop_ctl[0], &hops[1].control));
	assert_int_equal(R.last_est.u.chain.hop_ctl[1].addr.family, 0);
	static const uint8_t zero[PROTO_TOKEN_LEN];
	assert_memory_equal(R.last_est.u.chain.token, zero, PROTO_TOKEN_LEN);
	assert_int_equal(b.m.type, PROTO_PIPE_FAIL);

	/* Down: the failure's errno is kept, and there is no local end. */
	relay_drop();
	WAIT_FOR(rlink_state(L) != RL_UP);
	assert_int_equal(rlink_local(L, &local), -1);
	assert_int_equal(rlink_error(L), ECONNRESET);
}

static void
test_establish_ok(void **state)
{
	struct ans a = { 0 }, b = { 0 };
	uint32_t id;
	(void)state;

	bring_up();
	R.pipe = PM_OK;
	id = establish(&a);
	assert_int_not_equal(id, 0);
	assert_int_equal(rlink_pending(L), 1);
	/* The answer never comes before the id. */
	assert_int_equal(a.calls, 0);
	WAIT_FOR(a.calls == 1);
	assert_int_equal(R.nest, 1);
	assert_int_equal(R.last_est.id, id);
	assert_true(ep_eq(&R.last_est.u.establish.client, &client_ep));
	assert_true(ep_eq(&R.last_est.u.establish.server, &server_ep));
	assert_false(a.null);
	assert_int_equal(a.m.type, PROTO_PIPE_OK);
	assert_int_equal(a.m.id, id);
	assert_int_equal(a.m.u.ok.connect_us, 4242);
	assert_int_equal(a.m.u.ok.pending_ms, 10000);
	assert_int_equal(rlink_pending(L), 0);

	/* A second request gets a new id; the first is not answered again. */
	uint32_t id2 = establish(&b);
	assert_int_not_equal(id2, 0);
	assert_int_not_equal(id2, id);
	WAIT_FOR(b.calls == 1);
	assert_int_equal(b.m.id, id2);
	assert_int_equal(a.calls, 1);
	assert_int_equal(count_state(RL_DOWN), 0);
}

/* PIPE_FAIL and ERROR reach the caller as they are, and the link
 * stays up. */
static void
test_fail_and_error_passed_through(void **state)
{
	struct ans a = { 0 }, b = { 0 };
	uint32_t ida, idb;
	(void)state;

	bring_up();
	R.pipe = PM_FAIL;
	ida = establish(&a);
	assert_int_not_equal(ida, 0);
	WAIT_FOR(a.calls == 1);
	assert_int_equal(a.m.type, PROTO_PIPE_FAIL);
	assert_int_equal(a.m.id, ida);
	assert_int_equal(a.m.u.fail.reason, FAIL_POLICY_PORT);
	assert_int_equal(a.m.u.fail.detail, 13);

	R.pipe = PM_ERROR;
	idb = establish(&b);
	assert_int_not_equal(idb, 0);
	WAIT_FOR(b.calls == 1);
	assert_int_equal(b.m.type, PROTO_ERROR);
	assert_int_equal(b.m.id, idb);
	assert_int_equal(b.m.u.error.code, ERR_TYPE);

	settle();
	assert_int_equal(rlink_state(L), RL_UP);
	assert_int_equal(count_state(RL_DOWN), 0);
	assert_int_equal(R.accepts, 1);
}

/* Answers come in any order, several in one segment, matched by id. */
static void
test_answers_matched_by_id(void **state)
{
	struct ans a[3] = { { 0 } };
	uint32_t id[3];
	uint8_t buf[3 * PROTO_MAX_LEN];
	size_t len = 0;
	struct proto_msg m;
	(void)state;

	bring_up();
	R.pipe = PM_HOLD;
	for (int i = 0; i < 3; i++) {
		id[i] = establish(&a[i]);
		assert_int_not_equal(id[i], 0);
	}
	assert_int_not_equal(id[0], id[1]);
	assert_int_not_equal(id[1], id[2]);
	assert_int_not_equal(id[0], id[2]);
	assert_int_equal(rlink_pending(L), 3);
	WAIT_FOR(R.nheld == 3);

	m = pipe_answer(PM_ERROR, id[2]);
	len += relay_encode(&m, buf + len);
	m = pipe_answer(PM_OK, id[0]);
	len += relay_encode(&m, buf + len);
	m = pipe_answer(PM_FAIL, id[1]);
	len += relay_encode(&m, buf + len);
	relay_write(buf, len);
	WAIT_FOR(a[0].calls && a[1].calls && a[2].calls);
	assert_int_equal(a[0].m.type, PROTO_PIPE_OK);
	assert_int_equal(a[1].m.type, PROTO_PIPE_FAIL);
	assert_int_equal(a[2].m.type, PROTO_ERROR);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(a[i].calls, 1);
		assert_int_equal(a[i].m.id, id[i]);
	}
	assert_int_equal(rlink_pending(L), 0);
	assert_int_equal(rlink_state(L), RL_UP);
}

static void
test_cancelled_answer_dropped(void **state)
{
	struct ans a = { 0 }, b = { 0 };
	struct proto_msg m;
	uint32_t ida, idb;
	(void)state;

	bring_up();
	R.pipe = PM_HOLD;
	ida = establish(&a);
	idb = establish(&b);
	assert_int_not_equal(ida, 0);
	assert_int_not_equal(idb, 0);
	WAIT_FOR(R.nheld == 2);
	rlink_cancel(L, ida);
	assert_int_equal(rlink_pending(L), 1);
	/* Unknown ids are no-ops. */
	rlink_cancel(L, ida);
	rlink_cancel(L, 0);
	rlink_cancel(L, idb + 1000);
	assert_int_equal(rlink_pending(L), 1);

	/* Answers arrive in order: once b's is in, a's was read and dropped. */
	m = pipe_answer(PM_OK, ida);
	relay_send(&m);
	m = pipe_answer(PM_OK, idb);
	relay_send(&m);
	WAIT_FOR(b.calls == 1);
	assert_int_equal(a.calls, 0);
	assert_int_equal(b.m.id, idb);
	assert_int_equal(rlink_pending(L), 0);
	assert_int_equal(rlink_state(L), RL_UP);

	/* A duplicate answer for an id already answered is dropped too. */
	m = pipe_answer(PM_OK, idb);
	relay_send(&m);
	settle();
	assert_int_equal(b.calls, 1);
	assert_int_equal(rlink_state(L), RL_UP);
}

/* Callbacks may send and cancel from inside the link's read. */
static void
test_callback_reentry(void **state)
{
	struct ans a = { 0 }, b = { 0 }, c = { 0 };
	uint32_t idb;
	(void)state;

	bring_up();
	R.pipe = PM_HOLD;
	a.reissue = true;
	a.next = &c;
	assert_int_not_equal(establish(&a), 0);
	idb = establish(&b);
	assert_int_not_equal(idb, 0);
	a.cancel = idb;
	WAIT_FOR(R.nheld == 2);
	R.pipe = PM_OK;
	struct proto_msg m = pipe_answer(PM_OK, R.held[0]);
	relay_send(&m);
	WAIT_FOR(c.calls == 1);
	assert_int_equal(a.calls, 1);
	assert_int_not_equal(a.reissued, 0);
	assert_int_equal(c.m.id, a.reissued);
	assert_false(c.null);

	/* b was cancelled by a's callback: its answer is dropped. */
	m = pipe_answer(PM_OK, idb);
	relay_send(&m);
	settle();
	assert_int_equal(b.calls, 0);
	assert_int_equal(rlink_pending(L), 0);
	assert_int_equal(rlink_state(L), RL_UP);
}

static void
test_wrong_key_never_up(void **state)
{
	(void)state;

	R.sign = &other_key;
	L = rlink_new(&env, &R.ep, state_cb, &user_token);
	assert_non_null(L);
	WAIT_FOR(rlink_failures(L) >= 3);
	assert_int_equal(count_state(RL_UP), 0);
	assert_true(nstates >= 2);
	assert_int_equal(states[0], RL_CONNECTING);
	assert_int_equal(states[1], RL_DOWN);
	/* It did retry, and the relay saw valid keepalives each time. */
	assert_true(R.accepts >= 3);
	assert_true(R.nka >= 3);
	assert_int_equal(R.bad, 0);
	unsigned f = rlink_failures(L);
	WAIT_FOR(rlink_failures(L) > f);

	/* Once the keys agree the next attempt succeeds. */
	R.sign = &key;
	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_int_equal(rlink_failures(L), 0);
}

static void
test_relay_closes(void **state)
{
	static const enum rlink_state want[] = { RL_CONNECTING, RL_UP, RL_DOWN,
	    RL_CONNECTING, RL_UP };
	struct ans a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	(void)state;

	bring_up();
	R.pipe = PM_HOLD;
	assert_int_not_equal(establish(&a), 0);
	assert_int_not_equal(establish(&b), 0);
	/* A caller that retries at once from its callback gets nothing. */
	a.reissue = true;
	a.next = &d;
	WAIT_FOR(R.nheld == 2);
	relay_drop();
	WAIT_FOR(a.calls && b.calls);
	assert_true(a.null);
	assert_true(b.null);
	assert_int_equal(a.reissued, 0);
	assert_int_equal(rlink_pending(L), 0);
	assert_int_equal(count_state(RL_DOWN), 1);
	assert_true(rlink_failures(L) > 0);
	assert_int_equal(establish(&c), 0);

	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_int_equal(R.accepts, 2);
	assert_states(want, 5);
	assert_int_equal(rlink_failures(L), 0);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);

	R.pipe = PM_OK;
	assert_int_not_equal(establish(&c), 0);
	WAIT_FOR(c.calls == 1);
	assert_int_equal(c.m.type, PROTO_PIPE_OK);
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	assert_int_equal(d.calls, 0);
	assert_int_equal(R.nest, 3);
}

static void
test_keepalive_timeout(void **state)
{
	struct ans a = { 0 };
	(void)state;

	env.keepalive_interval_ms = 50;
	bring_up();
	int before = R.nka;
	WAIT_FOR(R.nka >= before + 2);
	assert_int_equal(rlink_state(L), RL_UP);

	R.pipe = PM_HOLD;
	assert_int_not_equal(establish(&a), 0);
	/* The environment is read on each use. */
	env.keepalive_timeout_ms = 100;
	R.ka = KA_IGNORE;
	WAIT_FOR(count_state(RL_DOWN) >= 1);
	assert_int_equal(a.calls, 1);
	assert_true(a.null);
	/* The link closed its end, though the relay did not. */
	WAIT_FOR(R.peer_closes >= 1);

	env.keepalive_timeout_ms = KA_TIMEOUT_MS;
	R.ka = KA_ANSWER;
	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_true(R.accepts >= 2);
	assert_int_equal(a.calls, 1);
}

static void
garbage_takes_link_down(const void *junk, size_t len)
{
	size_t downs = count_state(RL_DOWN);
	int closes = R.peer_closes;

	WAIT_FOR(rlink_state(L) == RL_UP && R.fd >= 0);
	relay_write(junk, len);
	WAIT_FOR(count_state(RL_DOWN) == downs + 1);
	WAIT_FOR(R.peer_closes == closes + 1);
}

static void
test_garbage_from_relay(void **state)
{
	static const char http[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
	uint8_t buf[65536], msg[PROTO_MAX_LEN];
	struct proto_msg m;
	size_t n;
	(void)state;

	bring_up();
	garbage_takes_link_down(http, sizeof(http) - 1);

	memset(buf, 0, 100);
	garbage_takes_link_down(buf, 100);

	/* Right magic and version, length beyond the limit. */
	memcpy(buf, "SL\x01\x11\xff\xff", 6);
	garbage_takes_link_down(buf, 6);

	/* More than the link's input buffer holds, in one go. */
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)arc4random();
	buf[0] = 0x53;
	buf[1] = 0x4c;
	buf[2] = 0x01;
	buf[3] = PROTO_PIPE_OK;
	garbage_takes_link_down(buf, sizeof(buf));

	/* A good answer with one MAC bit flipped. */
	m = pipe_answer(PM_OK, 1);
	n = relay_encode(&m, msg);
	msg[n - 1] ^= 1;
	garbage_takes_link_down(msg, n);

	/* A request type is not an answer. */
	m = relay_msg(PROTO_KEEPALIVE, 7);
	n = relay_encode(&m, msg);
	garbage_takes_link_down(msg, n);
	m = relay_msg(PROTO_PROBE_REPLY, 7);
	assert_int_equal(ep_parse("203.0.113.5:443", 0, &m.u.probe_reply.target), 0);
	n = relay_encode(&m, msg);
	garbage_takes_link_down(msg, n);

	/* An ERROR not tied to a request is about the link itself. */
	m = relay_msg(PROTO_ERROR, 0);
	m.u.error.code = ERR_AUTH;
	n = relay_encode(&m, msg);
	garbage_takes_link_down(msg, n);

	WAIT_FOR(rlink_state(L) == RL_UP);
	assert_int_equal(R.bad, 0);
}

/* An ERROR answering the keepalive: the relay refuses the link. */
static void
test_error_for_keepalive(void **state)
{
	static const enum rlink_state want[] = { RL_CONNECTING, RL_DOWN };
	struct proto_msg m;
	(void)state;

	R.ka = KA_HOLD;
	L = rlink_new(&env, &R.ep, state_cb, &user_token);
	assert_non_null(L);
	WAIT_FOR(R.nka == 1);
	m = relay_msg(PROTO_ERROR, R.held_ka);
	m.u.error.code = ERR_STALE;
	relay_send(&m);
	WAIT_FOR(count_state(RL_DOWN) == 1);
	assert_states(want, 2);
	assert_int_equal(rlink_failures(L), 1);
}

/* Keepalives go out again and again, and their answers keep the link up. */
static void
test_keepalives_keep_link_up(void **state)
{
	(void)state;

	env.keepalive_interval_ms = 50;
	bring_up();
	int before = R.nka;
	WAIT_FOR(R.nka >= before + 10);
	assert_int_equal(count_state(RL_DOWN), 0);
	assert_int_equal(rlink_state(L), RL_UP);
	assert_int_equal(R.accepts, 1);
}

/* The answer to the first keepalive ends its deadline: an idle link with
 * the next keepalive far away stays up. */
static void
test_idle_link_stays_up(void **state)
{
	size_t n;
	(void)state;

	env.keepalive_timeout_ms = 200;
	bring_up();
	n = nstates;
	run_for(1.);
	assert_int_equal(nstates, n);
	assert_int_equal(rlink_state(L), RL_UP);
}

/* Authentic but not fresh: a replayed copy, or a timestamp out of the
 * window either way. */
static void
test_replayed_and_stale_answers(void **state)
{
	uint8_t copy[PROTO_MAX_LEN];
	size_t len;
	struct proto_msg m;
	(void)state;

	R.ka = KA_HOLD;
	L = rlink_new(&env, &R.ep, state_cb, &user_token);
	assert_non_null(L);
	WAIT_FOR(R.nka == 1);
	relay_send_ka_ack(R.held_ka);
	len = R.last_sent_len;
	memcpy(copy, R.last_sent, len);
	R.ka = KA_ANSWER;
	WAIT_FOR(rlink_state(L) == RL_UP);
	settle();
	assert_int_equal(count_state(RL_DOWN), 0);
	garbage_takes_link_down(copy, len);
	WAIT_FOR(rlink_state(L) == RL_UP);
	m = pipe_answer(PM_OK, 1);
	m.ts_us -= 60 * 1000000ULL;
	len = relay_encode(&m, copy);
	garbage_takes_link_down(copy, len);

	m = pipe_answer(PM_OK, 1);
	m.ts_us += 60 * 1000000ULL;
	len = relay_encode(&m, copy);
	garbage_takes_link_down(copy, len);
	WAIT_FOR(rlink_state(L) == RL_UP);
}

/* Answers cut into one-byte segments are put back together. */
static void
test_trickled_answers(void **state)
{
	struct ans a = { 0 }, b = { 0 };
	uint32_t ida, idb;
	(void)state;

	R.trickle = true;
	bring_up();
	R.pipe = PM_HOLD;
	ida = establish(&a);
	idb = establish(&b);
	WAIT_FOR(R.nheld == 2);
	struct proto_msg m = pipe_answer(PM_FAIL, idb);
	relay_send(&m);
	m = pipe_answer(PM_OK, ida);
	relay_send(&m);
	WAIT_FOR(a.calls && b.calls);
	assert_int_equal(a.m.type, PROTO_PIPE_OK);
	assert_int_equal(b.m.type, PROTO_PIPE_FAIL);
	assert_int_equal(b.m.u.fail.reason, FAIL_POLICY_PORT);
	assert_int_equal(count_state(RL_DOWN), 0);
}

static void
test_free_answers_pending(void **state)
{
	struct ans a = { 0 }, b = { 0 };
	size_t n;
	(void)state;

	bring_up();
	R.pipe = PM_HOLD;
	assert_int_not_equal(establish(&a), 0);
	assert_int_not_equal(establish(&b), 0);
	WAIT_FOR(R.nheld == 2);
	n = nstates;
	rlink_free(L);
	L = NULL;
	assert_int_equal(a.calls, 1);
	assert_int_equal(b.calls, 1);
	assert_true(a.null);
	assert_true(b.null);
	/* The owner is going away: no state callback into it. */
	assert_int_equal(nstates, n);
	WAIT_FOR(R.peer_closes == 1);
	settle();
	assert_int_equal(R.accepts, 1);
}

/* Nobody listens: the link stays down and keeps trying. */
static void
test_nothing_listening(void **state)
{
	struct endpoint dead = closed_port();
	struct ans a = { 0 };
	(void)state;

	L = rlink_new(&env, &dead, state_cb, &user_token);
	assert_non_null(L);
	WAIT_FOR(rlink_failures(L) >= 3);
	assert_int_equal(count_state(RL_UP), 0);
	assert_true(count_state(RL_DOWN) >= 1);
	assert_true(rlink_state(L) != RL_UP);
	assert_int_equal(establish(&a), 0);
	assert_int_equal(rlink_pending(L), 0);
	unsigned f = rlink_failures(L);
	WAIT_FOR(rlink_failures(L) > f);
	assert_int_equal(a.calls, 0);
}

/* A replay cache that is full (every nonce still inside the window) cannot
 * prove a message fresh: that message is dropped, unanswered, and the
 * link stays, since the relay did nothing wrong and the cache may be
 * shared by many links (chain.c). It was taken for a replay and the link
 * dropped. */
static void
test_replay_cache_full_drops_the_message_not_the_link(void **state)
{
	struct ans a;
	int answered = 0;
	(void)state;

	replay_free(env.replay);
	assert_non_null(env.replay = replay_new(8, 30 * 1000000ULL));
	R.pipe = PM_FAIL;
	bring_up();
	for (int i = 0; i < 12; i++) {
		memset(&a, 0, sizeof(a));
		assert_int_not_equal(establish(&a), 0);
		WAIT_FOR(R.nest == i + 1);
		settle();
		if (a.calls == 0)
			break;		/* the cache is full: dropped */
		assert_false(a.null);
		answered++;
	}
	assert_true(answered > 0 && answered < 12);
	assert_int_equal(a.calls, 0);
	assert_int_equal(rlink_state(L), RL_UP);
	assert_int_equal(rlink_failures(L), 0);
	assert_int_equal(rlink_pending(L), 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
		    test_replay_cache_full_drops_the_message_not_the_link, setup, teardown),
		cmocka_unit_test_setup_teardown(test_up_only_after_keepalive_ack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_establish_ok, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fail_and_error_passed_through, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_answers_matched_by_id, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancelled_answer_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_callback_reentry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrong_key_never_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_relay_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keepalive_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_from_relay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_for_keepalive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keepalives_keep_link_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_idle_link_stays_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replayed_and_stale_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_trickled_answers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_answers_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_listening, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_observed_from_older_relay, setup, teardown),
		cmocka_unit_test_setup_teardown(test_observed_and_token, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chains_claimed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_establish_chain, setup, teardown),
	};

	if (auth_init() == -1)
		return 1;
	log_init("test_rlink", SLOG_ERROR);
	for (int i = 0; i < AUTH_KEY_LEN; i++) {
		key.k[i] = (uint8_t)(0xa0 + i);
		other_key.k[i] = (uint8_t)(0x50 + i);
	}
	if (ep_parse("198.51.100.7:40000", 0, &client_ep) == -1 ||
	    ep_parse("203.0.113.5:443", 0, &server_ep) == -1)
		return 1;
	return cmocka_run_group_tests_name("rlink", tests, NULL, NULL);
}
