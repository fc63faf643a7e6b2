/* The hold of data connections that came before their pipe (src/relay/datahold.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include <ev.h>

#include "../../src/relay/datahold.h"

struct ends {
	unsigned joined, expired, evicted, cleared;
};

static void
gone(void *arg, const struct held *h, enum held_end why)
{
	struct ends *e = arg;
	(void)h;

	switch (why) {
	case HELD_JOINED: e->joined++; break;
	case HELD_EXPIRED: e->expired++; break;
	case HELD_EVICTED: e->evicted++; break;
	case HELD_CLEARED: e->cleared++; break;
	}
}

/* A connected socket to hold (the other end closed: only its descriptor
 * matters here). */
static int
sock(void)
{
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	close(sv[1]);
	return sv[0];
}

static struct endpoint
ep(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static int
match_port(void *arg, const struct held *h)
{
	return h->peer.port == *(uint16_t *)arg;
}

static int
match_token(void *arg, const struct held *h)
{
	return h->tok == SYNTOK_OK && memcmp(h->token, arg, PROTO_TOKEN_LEN) == 0;
}

static void
test_take_by_match(void **state)
{
	struct ev_loop *loop = ev_loop_new(0);
	struct datahold dh;
	struct ends e = { 0 };
	struct endpoint a = ep("192.0.2.1:1000"), b = ep("192.0.2.1:1001");
	uint8_t tok[PROTO_TOKEN_LEN], other[PROTO_TOKEN_LEN];
	uint16_t port = 1001;
	struct held *h;
	(void)state;

	memset(tok, 7, sizeof(tok));
	memset(other, 8, sizeof(other));
	datahold_init(&dh, loop, 3.0, gone, &e);
	assert_int_equal(datahold_add(&dh, sock(), &a, SYNTOK_ABSENT, NULL), 0);
	assert_int_equal(datahold_add(&dh, sock(), &b, SYNTOK_OK, tok), 0);
	assert_int_equal(dh.n, 2);
	assert_null(datahold_take(&dh, match_token, other));
	h = datahold_take(&dh, match_token, tok);
	assert_non_null(h);
	assert_int_equal(h->peer.port, 1001);
	close(h->fd);
	datahold_free(h);
	assert_null(datahold_take(&dh, match_port, &port));	/* taken already */
	port = 1000;
	h = datahold_take(&dh, match_port, &port);
	assert_non_null(h);
	assert_int_equal(h->tok, SYNTOK_ABSENT);
	close(h->fd);
	datahold_free(h);
	assert_int_equal(dh.n, 0);
	assert_int_equal(e.joined, 2);
	datahold_clear(&dh);
	ev_loop_destroy(loop);
}

static void
test_off_and_bounds(void **state)
{
	struct ev_loop *loop = ev_loop_new(0);
	struct datahold dh;
	struct ends e = { 0 };
	char s[64];
	struct endpoint x;
	int fd;
	(void)state;

	datahold_init(&dh, loop, 0, gone, &e);
	x = ep("192.0.2.1:1000");
	fd = sock();
	assert_int_equal(datahold_add(&dh, fd, &x, SYNTOK_ABSENT, NULL), -1);	/* off */
	close(fd);

	datahold_set_time(&dh, 3.0);
	/* One address: its share, then refused (the newest, not the others). */
	for (int i = 0; i < DATAHOLD_PER_ADDR; i++) {
		snprintf(s, sizeof(s), "192.0.2.1:%d", 2000 + i);
		x = ep(s);
		assert_int_equal(datahold_add(&dh, sock(), &x, SYNTOK_ABSENT, NULL), 0);
	}
	x = ep("192.0.2.1:3000");
	fd = sock();
	assert_int_equal(datahold_add(&dh, fd, &x, SYNTOK_ABSENT, NULL), -1);
	close(fd);
	assert_int_equal(e.evicted, 0);
	/* An IPv6 /64 is one source, whichever of its addresses is used. */
	for (int i = 0; i < DATAHOLD_PER_ADDR; i++) {
		snprintf(s, sizeof(s), "[2001:db8:1:2::%x]:2000", i + 1);
		x = ep(s);
		assert_int_equal(datahold_add(&dh, sock(), &x, SYNTOK_ABSENT, NULL), 0);
	}
	x = ep("[2001:db8:1:2:ffff::1]:3000");
	fd = sock();
	assert_int_equal(datahold_add(&dh, fd, &x, SYNTOK_ABSENT, NULL), -1);
	close(fd);
	x = ep("[2001:db8:1:3::1]:3000");
	assert_int_equal(datahold_add(&dh, sock(), &x, SYNTOK_ABSENT, NULL), 0);
	assert_int_equal(e.evicted, 0);
	/* Many addresses: past DATAHOLD_MAX the oldest goes. */
	for (int i = 0; dh.n < DATAHOLD_MAX; i++) {
		snprintf(s, sizeof(s), "198.51.100.%d:%d", i % 200 + 1, 4000 + i);
		x = ep(s);
		assert_int_equal(datahold_add(&dh, sock(), &x, SYNTOK_ABSENT, NULL), 0);
	}
	x = ep("203.0.113.9:5000");
	assert_int_equal(datahold_add(&dh, sock(), &x, SYNTOK_ABSENT, NULL), 0);
	assert_int_equal(dh.n, DATAHOLD_MAX);
	assert_int_equal(e.evicted, 1);
	assert_int_equal(TAILQ_FIRST(&dh.q)->peer.port, 2001);	/* 2000 went */
	assert_int_equal(TAILQ_FIRST(&dh.q)->peer.addr.family, AF_INET);
	datahold_clear(&dh);
	assert_int_equal(e.cleared, DATAHOLD_MAX);
	assert_int_equal(dh.n, 0);
	ev_loop_destroy(loop);
}

static void
stop_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void
test_expiry(void **state)
{
	struct ev_loop *loop = ev_loop_new(0);
	struct datahold dh;
	struct ends e = { 0 };
	struct endpoint a = ep("192.0.2.1:1000"), b = ep("192.0.2.2:1000");
	ev_timer stop;
	(void)state;

	datahold_init(&dh, loop, 0.05, gone, &e);
	assert_int_equal(datahold_add(&dh, sock(), &a, SYNTOK_ABSENT, NULL), 0);
	datahold_set_time(&dh, 0.3);
	assert_int_equal(datahold_add(&dh, sock(), &b, SYNTOK_ABSENT, NULL), 0);
	/* Run until the first is due, not the second: only it goes. */
	ev_timer_init(&stop, stop_cb, 0.15, 0.);
	ev_timer_start(loop, &stop);
	ev_run(loop, 0);
	assert_int_equal(e.expired, 1);
	assert_int_equal(dh.n, 1);
	assert_true(addr_eq(&TAILQ_FIRST(&dh.q)->peer.addr, &b.addr));
	/* The rest, and the loop ends by itself once nothing is held. */
	ev_run(loop, 0);
	assert_int_equal(e.expired, 2);
	assert_int_equal(dh.n, 0);
	datahold_clear(&dh);
	ev_loop_destroy(loop);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_take_by_match),
		cmocka_unit_test(test_off_and_bounds),
		cmocka_unit_test(test_expiry),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
