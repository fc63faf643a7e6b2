/* The command socket server (src/core/ctlsrv.c) over a real unix socket,
 * with its clients driven from the same event loop as the server. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/ctlsrv.h"
#include "slot/sock.h"

#define WAIT_S 20.	/* generous: the server's own client deadline is 5 s */
#define NCLIENTS 16	/* CTL_MAX_CLIENTS */
#define BIG_LINES 10000	/* about 700 KB: several socket buffers */

static struct ev_loop *loop;
static struct ctlsrv *srv;
static char dir[64], path[128];
static bool expired;
static ev_timer deadline;

/* What the handler saw. */
static int calls;
static char last_cmd[256];
static char *expected_big;
static size_t expected_big_len;

struct cli {
	int fd;
	ev_io io;
	const char *tx;
	size_t txlen, sent;
	char *rx;
	size_t rxlen, rxcap;
	bool eof;
};

static void
big_line(struct ctl_out *o, int i)
{
	ctl_printf(o, "line %06d: the quick brown fox jumps over the lazy dog %d\n", i, i * 7);
}

static void
handler(void *user, const char *cmd, struct ctl_out *out)
{
	(void)user;
	calls++;
	snprintf(last_cmd, sizeof(last_cmd), "%s", cmd);
	if (strcmp(cmd, "ping") == 0) {
		for (int i = 0; i < BIG_LINES; i++)
			big_line(out, i);
	} else
		ctl_printf(out, "error: unknown command '%s'\n", cmd);
}

static void
deadline_cb(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
	expired = true;
}

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

static void
cli_cb(struct ev_loop *l, ev_io *w, int revents)
{
	struct cli *c = w->data;
	ssize_t n;

	if ((revents & EV_WRITE) && c->sent < c->txlen) {
		n = send(c->fd, c->tx + c->sent, c->txlen - c->sent, MSG_NOSIGNAL);
		if (n > 0)
			c->sent += (size_t)n;
		else if (errno != EAGAIN)
			fail_msg("client send: %s", strerror(errno));
		if (c->sent == c->txlen) {
			ev_io_stop(l, &c->io);
			ev_io_set(&c->io, c->fd, EV_READ);
			ev_io_start(l, &c->io);
		}
		return;
	}
	if (!(revents & EV_READ))
		return;
	for (;;) {
		if (c->rxcap - c->rxlen < 4096) {
			c->rxcap = c->rxcap ? c->rxcap * 2 : 65536;
			c->rx = realloc(c->rx, c->rxcap);
			assert_non_null(c->rx);
		}
		n = recv(c->fd, c->rx + c->rxlen, c->rxcap - c->rxlen, 0);
		if (n > 0) {
			c->rxlen += (size_t)n;
			continue;
		}
		if (n == 0 || errno == ECONNRESET) {
			c->eof = true;
			ev_io_stop(l, &c->io);
		} else if (errno != EAGAIN)
			fail_msg("client recv: %s", strerror(errno));
		return;
	}
}

/* Connects; the test drives the socket itself. */
static void
cli_connect(struct cli *c)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memset(c, 0, sizeof(*c));
	strcpy(sun.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	assert_true(c->fd >= 0);
	assert_int_equal(connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	ev_io_init(&c->io, cli_cb, c->fd, EV_READ);
	c->io.data = c;
}

/* Connects and, from the loop, sends tx (may be NULL: nothing), then reads
 * until EOF. */
static void
cli_open(struct cli *c, const char *tx)
{
	cli_connect(c);
	c->tx = tx;
	c->txlen = tx ? strlen(tx) : 0;
	ev_io_set(&c->io, c->fd, c->txlen ? EV_WRITE : EV_READ);
	ev_io_start(loop, &c->io);
}

static void
cli_close(struct cli *c)
{
	ev_io_stop(loop, &c->io);
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	free(c->rx);
	c->rx = NULL;
}

/* True if the server has neither written to nor closed c. */
static bool
cli_idle(struct cli *c)
{
	char b;

	return recv(c->fd, &b, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN;
}

static void
assert_answer(const struct cli *c, const char *want)
{
	assert_true(c->eof);
	assert_int_equal(c->rxlen, strlen(want));
	assert_memory_equal(c->rx, want, c->rxlen);
}

static void
assert_big_answer(const struct cli *c)
{
	assert_true(c->eof);
	assert_int_equal(c->rxlen, expected_big_len);
	assert_memory_equal(c->rx, expected_big, expected_big_len);
}

static int
setup(void **state)
{
	int fd;
	(void)state;

	snprintf(dir, sizeof(dir), "/tmp/slot-ctlsrv-XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(path, sizeof(path), "%s/ctl.sock", dir);
	if ((loop = ev_loop_new(0)) == NULL)
		return -1;
	ev_timer_init(&deadline, deadline_cb, WAIT_S, 0.);
	if ((fd = sock_listen_unix(path, 0600, 64)) == -1)
		return -1;
	if ((srv = ctlsrv_start(loop, fd, handler, NULL)) == NULL)
		return -1;
	calls = 0;
	last_cmd[0] = '\0';
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	ctlsrv_stop(srv);
	srv = NULL;
	ev_loop_destroy(loop);
	loop = NULL;
	unlink(path);
	rmdir(dir);
	return 0;
}

static void
test_printf_formats(void **state)
{
	struct ctl_out o = { 0 };
	(void)state;

	ctl_printf(&o, "%s=%d %llu 0x%x %.1f %c|%5s|", "a", -3, 18446744073709551615ULL, 0xbeef,
	    2.5, 'z', "ab");
	assert_non_null(o.buf);
	assert_false(o.oom);
	assert_string_equal(o.buf, "a=-3 18446744073709551615 0xbeef 2.5 z|   ab|");
	assert_int_equal(o.len, strlen(o.buf));
	ctl_printf(&o, "%s", "");
	ctl_printf(&o, "\n");
	assert_string_equal(o.buf, "a=-3 18446744073709551615 0xbeef 2.5 z|   ab|\n");
	assert_int_equal(o.len, strlen(o.buf));
	free(o.buf);
}

/* Appends that land exactly on the capacity, the terminating NUL included. */
static void
test_printf_boundaries(void **state)
{
	struct ctl_out o = { 0 };
	char chunk[8192];
	(void)state;

	for (size_t first = 4090; first <= 4100; first++) {
		memset(&o, 0, sizeof(o));
		memset(chunk, 'a', first);
		chunk[first] = '\0';
		ctl_printf(&o, "%s", chunk);
		ctl_printf(&o, "%s", "xyz");
		ctl_printf(&o, "%s", chunk);
		assert_false(o.oom);
		assert_int_equal(o.len, 2 * first + 3);
		assert_true(o.cap > o.len);
		assert_memory_equal(o.buf, chunk, first);
		assert_memory_equal(o.buf + first, "xyz", 3);
		assert_memory_equal(o.buf + first + 3, chunk, first);
		assert_int_equal(o.buf[o.len], '\0');
		free(o.buf);
	}
}

static void
test_printf_grows_past_a_megabyte(void **state)
{
	struct ctl_out o = { 0 };
	char want[128];
	size_t off = 0;
	int n;
	(void)state;

	for (int i = 0; i < 20000; i++)
		ctl_printf(&o, "%06d %s\n", i, "0123456789abcdef0123456789abcdef0123456789abcdef");
	assert_false(o.oom);
	assert_int_equal(o.len, 20000 * 56);
	assert_true(o.len > 1024 * 1024);
	for (int i = 0; i < 20000; i++) {
		n = snprintf(want, sizeof(want), "%06d %s\n", i,
		    "0123456789abcdef0123456789abcdef0123456789abcdef");
		assert_memory_equal(o.buf + off, want, (size_t)n);
		off += (size_t)n;
	}
	assert_int_equal(off, o.len);
	free(o.buf);
}

static void
test_big_answer_round_trip(void **state)
{
	struct cli c;
	int sndbuf = 0;
	socklen_t sl = sizeof(sndbuf);
	(void)state;

	cli_open(&c, "ping\n");
	/* Otherwise one send could take it all. */
	assert_int_equal(getsockopt(c.fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl), 0);
	assert_true(expected_big_len > 2 * (size_t)sndbuf);
	WAIT_FOR(c.eof);
	assert_int_equal(calls, 1);
	assert_string_equal(last_cmd, "ping");
	assert_big_answer(&c);
	cli_close(&c);
}

static void
test_unknown_command_and_crlf(void **state)
{
	struct cli a, b;
	(void)state;

	cli_open(&a, "bogus arg\n");
	cli_open(&b, "ping\r\n");
	WAIT_FOR(a.eof && b.eof);
	assert_int_equal(calls, 2);
	assert_answer(&a, "error: unknown command 'bogus arg'\n");
	assert_big_answer(&b);
	cli_close(&a);
	cli_close(&b);
}

/* Only the first line counts; a command may arrive in pieces. */
static void
test_split_command(void **state)
{
	struct cli c;
	(void)state;

	cli_open(&c, NULL);
	assert_int_equal(send(c.fd, "pi", 2, MSG_NOSIGNAL), 2);
	for (int i = 0; i < 5; i++)
		ev_run(loop, EVRUN_NOWAIT);
	assert_int_equal(calls, 0);
	assert_true(cli_idle(&c));
	assert_int_equal(send(c.fd, "ng\nextra\n", 9, MSG_NOSIGNAL), 9);
	WAIT_FOR(c.eof);
	assert_int_equal(calls, 1);
	assert_string_equal(last_cmd, "ping");
	assert_big_answer(&c);
	cli_close(&c);
}

/* A line longer than the server's buffer is cut, not overrun. */
static void
test_overlong_line(void **state)
{
	char line[301], want[400];
	struct cli c;
	(void)state;

	memset(line, 'x', 300);
	line[300] = '\0';
	cli_open(&c, line);
	WAIT_FOR(c.eof);
	assert_int_equal(calls, 1);
	assert_true(strlen(last_cmd) > 0 && strlen(last_cmd) < 300);
	assert_int_equal(strspn(last_cmd, "x"), strlen(last_cmd));
	snprintf(want, sizeof(want), "error: unknown command '%s'\n", last_cmd);
	assert_answer(&c, want);
	cli_close(&c);
}

/* A client gone before its answer is written costs nothing. */
static void
test_client_leaves_early(void **state)
{
	struct cli a, b;
	(void)state;

	cli_connect(&a);
	assert_int_equal(send(a.fd, "ping\n", 5, MSG_NOSIGNAL), 5);
	cli_close(&a);
	cli_connect(&b);
	cli_close(&b);
	WAIT_FOR(calls == 1);
	for (int i = 0; i < 5; i++)
		ev_run(loop, EVRUN_NOWAIT);

	cli_open(&a, "ping\n");
	WAIT_FOR(a.eof);
	assert_big_answer(&a);
	cli_close(&a);
}

static void
test_full_server_refuses_then_recovers(void **state)
{
	struct cli idle[NCLIENTS], extra, late;
	(void)state;

	for (int i = 0; i < NCLIENTS; i++)
		cli_open(&idle[i], NULL);
	/* The backlog is first in, first out: the 17th is accepted last. */
	cli_open(&extra, NULL);
	WAIT_FOR(extra.eof);
	assert_int_equal(extra.rxlen, 0);
	for (int i = 0; i < NCLIENTS; i++)
		assert_true(cli_idle(&idle[i]));

	/* Slots come back as their clients go. Unix sockets deliver the
	 * close at once, so one loop pass sees it. */
	cli_close(&idle[0]);
	cli_close(&idle[1]);
	for (int i = 0; i < 5; i++)
		ev_run(loop, EVRUN_NOWAIT);
	cli_open(&late, "ping\n");
	WAIT_FOR(late.eof);
	assert_big_answer(&late);
	assert_int_equal(calls, 1);
	for (int i = 2; i < NCLIENTS; i++)
		assert_true(cli_idle(&idle[i]));

	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&idle[i]);
	cli_close(&extra);
	cli_close(&late);
}

/* A client that never finishes its line does not hold a slot for ever. */
static void
test_silent_client_cut_at_deadline(void **state)
{
	struct cli c;
	(void)state;

	cli_open(&c, NULL);
	assert_int_equal(send(c.fd, "pin", 3, MSG_NOSIGNAL), 3);
	WAIT_FOR(c.eof);
	assert_int_equal(c.rxlen, 0);
	assert_int_equal(calls, 0);
	cli_close(&c);
}

/* Stopping with clients connected, one of them mid-answer, frees them all
 * (ASan's leak check) and closes their sockets. */
static void
test_stop_with_clients(void **state)
{
	struct cli reader, idle;
	char buf[4096];
	ssize_t n;
	(void)state;

	cli_connect(&idle);
	cli_connect(&reader);
	assert_int_equal(send(reader.fd, "ping\n", 5, MSG_NOSIGNAL), 5);
	WAIT_FOR(calls == 1);
	for (int i = 0; i < 5; i++)
		ev_run(loop, EVRUN_NOWAIT);
	ctlsrv_stop(srv);
	srv = NULL;

	size_t got = 0;
	while ((n = recv(reader.fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		got += (size_t)n;
	assert_int_equal(n, 0);
	assert_true(got > 0 && got < expected_big_len);
	assert_int_equal(recv(idle.fd, buf, sizeof(buf), MSG_DONTWAIT), 0);
	cli_close(&reader);
	cli_close(&idle);
}

int
main(void)
{
	struct ctl_out o = { 0 };
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_printf_formats),
		cmocka_unit_test(test_printf_boundaries),
		cmocka_unit_test(test_printf_grows_past_a_megabyte),
		cmocka_unit_test_setup_teardown(test_big_answer_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_command_and_crlf, setup, teardown),
		cmocka_unit_test_setup_teardown(test_split_command, setup, teardown),
		cmocka_unit_test_setup_teardown(test_overlong_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_leaves_early, setup, teardown),
		cmocka_unit_test_setup_teardown(test_full_server_refuses_then_recovers, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_silent_client_cut_at_deadline, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_stop_with_clients, setup, teardown),
	};
	int r;

	/* The expected answer, built with the function under test but
	 * checked by test_printf_*. */
	for (int i = 0; i < BIG_LINES; i++)
		big_line(&o, i);
	expected_big = o.buf;
	expected_big_len = o.len;
	r = cmocka_run_group_tests_name("ctlsrv", tests, NULL, NULL);
	free(expected_big);
	return r;
}
