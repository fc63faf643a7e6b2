/* The command socket server (src/core/ctlsrv.c) over a real unix socket,
 * and its HTTP mode over TCP on 127.0.0.1, with the clients driven from the
 * same event loop as the server; and the answer helpers (ctlout.c: tables,
 * key/value lists, counters, Prometheus metrics), the requests and the
 * command table (ctlcmd.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/addr.h"
#include "slot/ctlsrv.h"
#include "slot/sock.h"

#define WAIT_S 20.	/* generous: the server's own client deadline is 5 s */
#define NCLIENTS 16	/* CTL_MAX_CLIENTS */
#define BIG_LINES 10000	/* about 700 KB: several socket buffers */

static struct ev_loop *loop;
static struct ctlsrv *srv;
static char dir[64], path[128];
static uint16_t http_port;	/* non-zero: clients connect there over TCP */
static int http_fd;		/* the server's listening socket */
static bool expired;
static ev_timer deadline;
static bool metrics_fail;	/* the handler refuses "metrics" */
static bool metrics_small;	/* "metrics" gets a one-line answer */
static const char *bind_from;	/* HTTP clients connect from this address */
static int rcvbuf;		/* non-zero: HTTP clients' SO_RCVBUF */
static bool hold_answers;	/* new clients read nothing (cli_read_now) */

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
	bool hold;		/* reads nothing once its request is sent */
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
	/* "metrics" is what the HTTP mode asks for. */
	if (strcmp(cmd, "metrics") == 0 && metrics_small)
		ctl_printf(out, "m 1\n");
	else if (strcmp(cmd, "ping") == 0 || (strcmp(cmd, "metrics") == 0 && !metrics_fail)) {
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
			if (!c->hold)
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

/* Connects (the unix socket, or TCP in the HTTP tests); the test drives
 * the socket itself. */
static void
cli_connect(struct cli *c)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memset(c, 0, sizeof(*c));
	if (http_port) {
		struct sockaddr_storage ss;
		struct endpoint ep = { .port = http_port };
		assert_int_equal(addr_parse("127.0.0.1", &ep.addr), 0);
		socklen_t len = ep_to_sockaddr(&ep, &ss);
		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_true(c->fd >= 0);
		if (rcvbuf)
			assert_int_equal(setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
			    sizeof(rcvbuf)), 0);
		if (bind_from) {
			struct sockaddr_storage bs;
			struct endpoint b = { .port = 0 };
			assert_int_equal(addr_parse(bind_from, &b.addr), 0);
			socklen_t bl = ep_to_sockaddr(&b, &bs);
			assert_int_equal(bind(c->fd, (struct sockaddr *)&bs, bl), 0);
		}
		/* Blocking for the connect: the loopback handshake is done
		 * by the kernel, the server need not run. */
		assert_int_equal(connect(c->fd, (struct sockaddr *)&ss, len), 0);
		assert_int_equal(fcntl(c->fd, F_SETFL, O_NONBLOCK), 0);
	} else {
		strcpy(sun.sun_path, path);
		c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(c->fd >= 0);
		assert_int_equal(connect(c->fd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	}
	ev_io_init(&c->io, cli_cb, c->fd, EV_READ);
	c->io.data = c;
	c->hold = hold_answers;
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

/* ---------------------------------------------------------------- HTTP mode */

static int
setup_http(void **state)
{
	struct endpoint ep = { .port = 0 };
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd;
	(void)state;

	if ((loop = ev_loop_new(0)) == NULL)
		return -1;
	ev_timer_init(&deadline, deadline_cb, WAIT_S, 0.);
	if (addr_parse("127.0.0.1", &ep.addr) == -1 || (fd = sock_listen_tcp(&ep, 64)) == -1)
		return -1;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1 ||
	    ep_from_sockaddr((struct sockaddr *)&ss, sl, &ep) == -1)
		return -1;
	http_port = ep.port;
	http_fd = fd;
	if ((srv = ctlsrv_start_http(loop, fd, handler, NULL)) == NULL)
		return -1;
	calls = 0;
	last_cmd[0] = '\0';
	metrics_fail = false;
	metrics_small = false;
	bind_from = NULL;
	rcvbuf = 0;
	hold_answers = false;
	return 0;
}

static int
teardown_http(void **state)
{
	(void)state;
	ctlsrv_stop(srv);
	srv = NULL;
	ev_loop_destroy(loop);
	loop = NULL;
	http_port = 0;
	return 0;
}

/* The answer c got: status code, one header's value (want_header, NULL:
 * none), and where the body starts. Fails unless the head is well formed,
 * says HTTP/1.0 and Connection: close, and Content-Length is the body's. */
static int
http_parse(const struct cli *c, const char *want_header, char *value, size_t vlen,
    const char **body)
{
	char *head, *end, *line, *save = NULL;
	int status = 0;
	long clen = -1;

	assert_true(c->eof);
	assert_non_null(c->rx);
	head = strndup(c->rx, c->rxlen);
	assert_non_null(head);
	end = strstr(head, "\r\n\r\n");
	assert_non_null(end);
	*end = '\0';
	*body = c->rx + (end - head) + 4;
	bool close_seen = false;
	if (value)
		value[0] = '\0';
	for (line = strtok_r(head, "\r\n", &save); line; line = strtok_r(NULL, "\r\n", &save)) {
		if (status == 0) {
			assert_int_equal(sscanf(line, "HTTP/1.0 %d ", &status), 1);
			continue;
		}
		char *colon = strchr(line, ':');
		assert_non_null(colon);
		*colon = '\0';
		const char *v = colon + 1 + strspn(colon + 1, " ");
		if (strcasecmp(line, "Content-Length") == 0)
			clen = strtol(v, NULL, 10);
		if (strcasecmp(line, "Connection") == 0 && strcmp(v, "close") == 0)
			close_seen = true;
		if (want_header && strcasecmp(line, want_header) == 0)
			snprintf(value, vlen, "%s", v);
	}
	assert_true(close_seen);
	assert_int_equal(clen, (long)(c->rxlen - (size_t)(*body - c->rx)));
	free(head);
	return status;
}

static void
assert_http_status(const struct cli *c, int want)
{
	const char *body;

	assert_int_equal(http_parse(c, NULL, NULL, 0, &body), want);
}

static void
test_http_metrics(void **state)
{
	char type[128];
	const char *body;
	struct cli c;
	(void)state;

	cli_open(&c, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n");
	WAIT_FOR(c.eof);
	assert_int_equal(http_parse(&c, "Content-Type", type, sizeof(type), &body), 200);
	assert_string_equal(type, "text/plain; version=0.0.4; charset=utf-8");
	assert_int_equal(calls, 1);
	assert_string_equal(last_cmd, "metrics");
	assert_int_equal(c.rxlen - (size_t)(body - c.rx), expected_big_len);
	assert_memory_equal(body, expected_big, expected_big_len);
	cli_close(&c);
}

/* A query (Prometheus' params), bare newlines, a request in pieces. */
static void
test_http_variants(void **state)
{
	struct cli a, b, c;
	(void)state;

	cli_open(&a, "GET /metrics?module=slot&x=1 HTTP/1.0\r\n\r\n");
	cli_open(&b, "GET /metrics HTTP/1.0\n\n");
	WAIT_FOR(a.eof && b.eof);
	assert_http_status(&a, 200);
	assert_http_status(&b, 200);

	cli_open(&c, NULL);
	const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	for (size_t i = 0; req[i]; i++) {
		assert_int_equal(send(c.fd, req + i, 1, MSG_NOSIGNAL), 1);
		for (int k = 0; k < 3; k++)
			ev_run(loop, EVRUN_NOWAIT);
		if (req[i + 1])
			assert_true(cli_idle(&c));
	}
	WAIT_FOR(c.eof);
	assert_http_status(&c, 200);
	assert_int_equal(calls, 3);
	cli_close(&a);
	cli_close(&b);
	cli_close(&c);
}

static void
test_http_refusals(void **state)
{
	static const struct { const char *req; int status; } cases[] = {
		{ "GET / HTTP/1.1\r\n\r\n", 404 },
		{ "GET /metricsx HTTP/1.1\r\n\r\n", 404 },
		{ "GET /metrics/ HTTP/1.1\r\n\r\n", 404 },
		{ "POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd", 405 },
		{ "HEAD /metrics HTTP/1.1\r\n\r\n", 405 },
		{ "\x16\x03\x01\x02\x01\x01\xfc\x03\x03\r\n\r\n", 400 },
		{ "GET /metrics\r\n\r\n", 400 },
		{ "GET  /metrics HTTP/1.1\r\n\r\n", 400 },
		{ "GET /metrics HTTP/2.0\r\n\r\n", 400 },
		{ "GET /metrics HTTP/1.1 extra\r\n\r\n", 400 },
		{ "\r\n\r\n", 400 },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cli c;
		char allow[32];
		const char *body;
		cli_open(&c, cases[i].req);
		WAIT_FOR(c.eof);
		int st = http_parse(&c, "Allow", allow, sizeof(allow), &body);
		if (st != cases[i].status)
			fail_msg("case %zu: status %d, want %d", i, st, cases[i].status);
		if (st == 405)
			assert_string_equal(allow, "GET");
		cli_close(&c);
	}
	/* None reached the handler. */
	assert_int_equal(calls, 0);
}

/* A NUL inside the head, which C strings would hide. */
static void
test_http_nul_byte(void **state)
{
	static const char req[] = "GET /metrics\0 HTTP/1.1\r\n\r\n";
	struct cli c;
	(void)state;

	cli_open(&c, NULL);
	assert_int_equal(send(c.fd, req, sizeof(req) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(req) - 1);
	ev_io_start(loop, &c.io);
	WAIT_FOR(c.eof);
	assert_http_status(&c, 400);
	assert_int_equal(calls, 0);
	cli_close(&c);
}

/* Headers beyond 4 KiB: 431, and the rest of the request is read away so
 * the answer arrives whole. */
static void
test_http_oversize(void **state)
{
	char req[6000];
	struct cli c;
	(void)state;

	int n = snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(req + n, 'a', sizeof(req) - (size_t)n - 5);
	memcpy(req + sizeof(req) - 5, "\r\n\r\n", 5);
	cli_open(&c, req);
	WAIT_FOR(c.eof);
	assert_http_status(&c, 431);
	assert_int_equal(calls, 0);
	cli_close(&c);

	/* Just under the bound is fine. */
	n = snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\nX-Big: ");
	memset(req + n, 'a', 4096 - (size_t)n - 4);
	memcpy(req + 4096 - 4, "\r\n\r\n", 5);
	assert_int_equal(strlen(req), 4096);
	cli_open(&c, req);
	WAIT_FOR(c.eof);
	assert_http_status(&c, 200);
	cli_close(&c);
}

/* Junk after the request does not cut the answer short. */
static void
test_http_trailing_bytes(void **state)
{
	char req[70000];
	const char *body;
	struct cli c;
	(void)state;

	int n = snprintf(req, sizeof(req), "GET /metrics HTTP/1.1\r\n\r\n");
	memset(req + n, 'z', sizeof(req) - (size_t)n - 1);
	req[sizeof(req) - 1] = '\0';
	cli_open(&c, req);
	WAIT_FOR(c.eof);
	assert_int_equal(http_parse(&c, NULL, NULL, 0, &body), 200);
	assert_int_equal(c.rxlen - (size_t)(body - c.rx), expected_big_len);
	cli_close(&c);
}

static void
test_http_handler_error(void **state)
{
	struct cli c;
	(void)state;

	metrics_fail = true;
	cli_open(&c, "GET /metrics HTTP/1.1\r\n\r\n");
	WAIT_FOR(c.eof);
	assert_http_status(&c, 500);
	assert_int_equal(calls, 1);
	cli_close(&c);
}

/* A client that half-closes before its head is complete gets 400; one that
 * sends nothing and closes costs nothing. */
static void
test_http_half_closed(void **state)
{
	struct cli a, b;
	(void)state;

	cli_open(&a, NULL);
	assert_int_equal(send(a.fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL), 23);
	assert_int_equal(shutdown(a.fd, SHUT_WR), 0);
	cli_open(&b, NULL);
	assert_int_equal(shutdown(b.fd, SHUT_WR), 0);
	WAIT_FOR(a.eof && b.eof);
	assert_http_status(&a, 400);
	assert_int_equal(b.rxlen, 0);
	assert_int_equal(calls, 0);
	cli_close(&a);
	cli_close(&b);
}

/* Slowloris: a head never finished is cut at the deadline with 408. */
static void
test_http_slow_client_cut(void **state)
{
	struct cli c;
	(void)state;

	cli_open(&c, NULL);
	assert_int_equal(send(c.fd, "GET /metrics HTTP/1.1\r\nX-A: b\r\n", 31, MSG_NOSIGNAL), 31);
	WAIT_FOR(c.eof);
	assert_http_status(&c, 408);
	assert_int_equal(calls, 0);
	cli_close(&c);
}

/* Every slot held by clients that send nothing: a scraper still gets its
 * answer, in the slot of the oldest of them, which is closed. */
static void
test_http_full_server_evicts_oldest_sender(void **state)
{
	struct cli idle[NCLIENTS], late;
	(void)state;

	for (int i = 0; i < NCLIENTS; i++) {
		cli_open(&idle[i], NULL);
		/* One accept per loop pass; apart in time, so "oldest" is
		 * well defined. */
		for (int k = 0; k < 3; k++)
			ev_run(loop, EVRUN_NOWAIT);
		usleep(2000);
	}
	for (int i = 0; i < NCLIENTS; i++)
		assert_true(cli_idle(&idle[i]));
	cli_open(&late, "GET /metrics HTTP/1.1\r\n\r\n");
	WAIT_FOR(late.eof && idle[0].eof);
	assert_http_status(&late, 200);
	assert_int_equal(idle[0].rxlen, 0);
	for (int i = 1; i < NCLIENTS; i++)
		assert_true(cli_idle(&idle[i]));
	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&idle[i]);
	cli_close(&late);
}

/* Opens c (from bind_from if set) and lets the server accept it, a little
 * apart in time from the one before, so that "oldest" is well defined. */
static void
cli_open_apart(struct cli *c, const char *tx)
{
	cli_open(c, tx);
	for (int k = 0; k < 3; k++)
		ev_run(loop, EVRUN_NOWAIT);
	usleep(2000);
}

/* A held client starts reading. */
static void
cli_read_now(struct cli *c)
{
	assert_int_equal(c->sent, c->txlen);
	ev_io_stop(loop, &c->io);
	ev_io_set(&c->io, c->fd, EV_READ);
	ev_io_start(loop, &c->io);
}

/* The server has sent its whole answer and shut its half: c lingers. */
static bool
cli_got_fin(const struct cli *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLRDHUP);
}

/* After a byte from c: reset if the server had closed c, read away if not. */
static bool
cli_was_closed(struct cli *c)
{
	struct pollfd p = { .fd = c->fd, .events = POLLIN };

	(void)send(c->fd, "x", 1, MSG_NOSIGNAL);
	for (int k = 0; k < 20; k++) {
		ev_run(loop, EVRUN_NOWAIT);
		usleep(1000);
	}
	return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP));
}

/* Sixteen clients that sent their request and neither read their answer
 * nor close (the answer sent, they linger): a seventeenth scrape still gets
 * its answer, in the slot of the oldest of them. They were not evicted
 * before, so every new client was refused until the deadline. */
static void
test_http_full_of_lingering_clients(void **state)
{
	struct cli held[NCLIENTS], late;
	const char *body;
	(void)state;

	hold_answers = true;

	metrics_small = true;
	for (int i = 0; i < NCLIENTS; i++)
		cli_open_apart(&held[i], "GET /metrics HTTP/1.1\r\n\r\n");
	for (int i = 0; i < NCLIENTS; i++)
		WAIT_FOR(cli_got_fin(&held[i]));
	metrics_small = false;
	hold_answers = false;
	cli_open(&late, "GET /metrics HTTP/1.1\r\n\r\n");
	WAIT_FOR(late.eof);
	assert_int_equal(http_parse(&late, NULL, NULL, 0, &body), 200);
	assert_int_equal(late.rxlen - (size_t)(body - late.rx), expected_big_len);
	assert_true(cli_was_closed(&held[0]));
	for (int i = 1; i < NCLIENTS; i++)
		assert_false(cli_was_closed(&held[i]));
	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&held[i]);
	cli_close(&late);
}

/* The same with clients that stall their answer (they do not read, and
 * their receive buffer is small): the oldest writer is cut short, the
 * others are still served whole. */
static void
test_http_full_of_stalled_readers(void **state)
{
	struct cli held[NCLIENTS], late;
	const char *body;
	(void)state;

	hold_answers = true;

	/* Small buffers both ways (the server's inherited from its listening
	 * socket): loopback's autotuning would take a whole answer. */
	int sndbuf = 16384;
	assert_int_equal(setsockopt(http_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)), 0);
	rcvbuf = 4096;
	for (int i = 0; i < NCLIENTS; i++)
		cli_open_apart(&held[i], "GET /metrics HTTP/1.1\r\n\r\n");
	rcvbuf = 0;
	/* Each has some of its answer: the server is writing to all. */
	for (int i = 0; i < NCLIENTS; i++) {
		int avail = 0;
		WAIT_FOR(ioctl(held[i].fd, FIONREAD, &avail) == 0 && avail > 0);
	}
	for (int k = 0; k < 20; k++)
		ev_run(loop, EVRUN_NOWAIT);
	hold_answers = false;
	cli_open(&late, "GET /metrics HTTP/1.1\r\n\r\n");
	WAIT_FOR(late.eof);
	assert_int_equal(http_parse(&late, NULL, NULL, 0, &body), 200);
	assert_int_equal(late.rxlen - (size_t)(body - late.rx), expected_big_len);

	/* Read now: the oldest got part of its answer, the newest all of it. */
	cli_read_now(&held[0]);
	cli_read_now(&held[NCLIENTS - 1]);
	WAIT_FOR(held[0].eof && held[NCLIENTS - 1].eof);
	assert_true(held[0].rxlen < late.rxlen);
	assert_int_equal(held[NCLIENTS - 1].rxlen, late.rxlen);
	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&held[i]);
	cli_close(&late);
}

/* A client still sending its request goes after every lingering one, even
 * when it is the oldest. */
static void
test_http_evicts_lingering_before_sender(void **state)
{
	struct cli held[NCLIENTS], late;
	(void)state;

	hold_answers = true;

	metrics_small = true;
	cli_open_apart(&held[0], NULL);
	for (int i = 1; i < NCLIENTS; i++)
		cli_open_apart(&held[i], "GET /metrics HTTP/1.1\r\n\r\n");
	for (int i = 1; i < NCLIENTS; i++)
		WAIT_FOR(cli_got_fin(&held[i]));
	hold_answers = false;
	cli_open(&late, "GET /metrics HTTP/1.1\r\n\r\n");
	WAIT_FOR(late.eof);
	assert_http_status(&late, 200);
	assert_true(cli_idle(&held[0]));
	assert_true(cli_was_closed(&held[1]));
	for (int i = 2; i < NCLIENTS; i++)
		assert_false(cli_was_closed(&held[i]));
	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&held[i]);
	cli_close(&late);
}

/* One peer's clients make room among themselves: the peer holding most
 * slots loses its oldest, not the older client of another peer. */
static void
test_http_evicts_from_busiest_peer(void **state)
{
	struct cli held[NCLIENTS], late;
	(void)state;

	hold_answers = true;

	metrics_small = true;
	bind_from = "127.0.0.3";
	cli_open_apart(&held[0], "GET /metrics HTTP/1.1\r\n\r\n");
	bind_from = "127.0.0.2";
	for (int i = 1; i < NCLIENTS; i++)
		cli_open_apart(&held[i], "GET /metrics HTTP/1.1\r\n\r\n");
	for (int i = 0; i < NCLIENTS; i++)
		WAIT_FOR(cli_got_fin(&held[i]));
	bind_from = "127.0.0.4";
	hold_answers = false;
	cli_open(&late, "GET /metrics HTTP/1.1\r\n\r\n");
	bind_from = NULL;
	WAIT_FOR(late.eof);
	assert_http_status(&late, 200);
	assert_false(cli_was_closed(&held[0]));
	assert_true(cli_was_closed(&held[1]));
	for (int i = 2; i < NCLIENTS; i++)
		assert_false(cli_was_closed(&held[i]));
	for (int i = 0; i < NCLIENTS; i++)
		cli_close(&held[i]);
	cli_close(&late);
}

/* ---------------------------------------------------------------- helpers */

static void
test_req_parse(void **state)
{
	static const struct { const char *line; int rc; const char *cmd; bool json; } cases[] = {
		{ "status", 0, "status", false },
		{ "pipes json", 0, "pipes", true },
		{ "  cache \t json  ", 0, "cache", true },
		{ "json", 0, "json", false },
		{ "slot-relays_2", 0, "slot-relays_2", false },
		{ "0123456789012345678901234567890", 0, "0123456789012345678901234567890", false },
		{ "01234567890123456789012345678901", -1, NULL, false },
		{ "", -1, NULL, false },
		{ "   ", -1, NULL, false },
		{ "status text", -1, NULL, false },
		{ "status json json", -1, NULL, false },
		{ "status jsonx", -1, NULL, false },
		{ "a;b", -1, NULL, false },
		{ "st\x01tus", -1, NULL, false },
		{ "GET /metrics HTTP/1.1", -1, NULL, false },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ctl_req r;
		int rc = ctl_req_parse(cases[i].line, &r);
		if (rc != cases[i].rc)
			fail_msg("\"%s\": rc %d", cases[i].line, rc);
		if (rc == 0) {
			assert_string_equal(r.cmd, cases[i].cmd);
			assert_int_equal(r.json, cases[i].json);
		}
	}
}

/* A command with one argument (slotd's "flush SERVER"). */
static void
test_req_parse_arg(void **state)
{
	static const struct {
		const char *line; int rc; const char *cmd, *arg; bool json;
	} cases[] = {
		{ "flush", 0, "flush", "", false },
		{ "flush json", 0, "flush", "", true },
		{ "flush 10.0.0.1", 0, "flush", "10.0.0.1", false },
		{ " flush\t2001:db8::1  json ", 0, "flush", "2001:db8::1", true },
		{ "flush 012345678901234567890123456789012345678901234567890123456789012", 0,
		    "flush", "012345678901234567890123456789012345678901234567890123456789012",
		    false },
		{ "flush 0123456789012345678901234567890123456789012345678901234567890123", -1,
		    NULL, NULL, false },
		{ "flush json 10.0.0.1", -1, NULL, NULL, false },
		{ "flush a b", -1, NULL, NULL, false },
		{ "flush a json json", -1, NULL, NULL, false },
		{ "flush a\x01", -1, NULL, NULL, false },
		{ "flush a\xc3\xa9", -1, NULL, NULL, false },
		{ "", -1, NULL, NULL, false },
	};
	struct ctl_req r;
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = ctl_req_parse_arg(cases[i].line, &r);
		if (rc != cases[i].rc)
			fail_msg("\"%s\": rc %d", cases[i].line, rc);
		if (rc == 0) {
			assert_string_equal(r.cmd, cases[i].cmd);
			assert_string_equal(r.arg, cases[i].arg);
			assert_int_equal(r.json, cases[i].json);
		}
	}
	/* Commands without one refuse it. */
	assert_int_equal(ctl_req_parse("flush 10.0.0.1", &r), -1);
}

static void
test_error_and_json_str(void **state)
{
	struct ctl_out o = { 0 };
	(void)state;

	ctl_error(&o, "no %s here", "pipes");
	ctl_json_str(&o, "a\"b\\c\n\x01\x7f" "d");
	ctl_printf(&o, " ");
	ctl_json_str(&o, NULL);
	assert_string_equal(o.buf,
	    "error: no pipes here\n\"a\\\"b\\\\c\\u000a\\u0001\\u007fd\" null");
	free(o.buf);
}

static void
test_fmt_dur(void **state)
{
	static const struct { uint64_t us; const char *want; } cases[] = {
		{ 0, "0ms" }, { 999, "0ms" }, { 850000, "850ms" }, { 1000000, "1.0s" },
		{ 12345678, "12.3s" }, { 59999999, "59.9s" }, { 60000000, "1m00s" },
		{ 245000000, "4m05s" }, { 7380000000ull, "2h03m" },
		{ (3 * 86400ull + 4 * 3600 + 59) * 1000000, "3d04h" },
	};
	char b[16];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(ctl_fmt_dur(cases[i].us, b), cases[i].want);
}

static const struct ctl_col cols[] = {
	{ "name", CTL_STR, NULL },
	{ "n", CTL_UINT, "count" },
	{ "age", CTL_DUR, NULL },
	{ "rtt", CTL_RTT, NULL },
	{ "up", CTL_BOOL, NULL },
	{ "note", CTL_STR, NULL },
};

static void
table_rows(struct ctl_table *t)
{
	ctl_cell_str(t, "relay-long-name");
	ctl_cell_uint(t, 7);
	ctl_cell_us(t, 1500000);
	ctl_cell_us(t, 40125);
	ctl_cell_bool(t, true);
	ctl_cell_str(t, "first");

	ctl_cell_str(t, "b");
	ctl_cell_uint(t, 123456);
	ctl_cell_none(t);
	ctl_cell_us(t, 900);
	ctl_cell_bool(t, false);
	ctl_cell_str(t, NULL);
}

static void
test_table_text(void **state)
{
	struct ctl_out o = { 0 };
	struct ctl_table t;
	(void)state;

	ctl_table_begin(&t, &o, false, "rows", cols, sizeof(cols) / sizeof(cols[0]));
	table_rows(&t);
	ctl_table_end(&t);
	assert_false(o.oom);
	assert_string_equal(o.buf,
	    "name                  n   age     rtt  up   note\n"
	    "relay-long-name       7  1.5s  40.1ms  yes  first\n"
	    "b                123456     -   0.9ms  no   -\n");
	free(o.buf);

	/* No rows: the header alone. */
	memset(&o, 0, sizeof(o));
	ctl_table_begin(&t, &o, false, "rows", cols, sizeof(cols) / sizeof(cols[0]));
	ctl_table_end(&t);
	assert_string_equal(o.buf, "name  n  age  rtt  up  note\n");
	free(o.buf);
}

static void
test_table_json(void **state)
{
	struct ctl_out o = { 0 };
	struct ctl_table t;
	(void)state;

	ctl_printf(&o, "{\"daemon\":\"x\"");
	ctl_table_begin(&t, &o, true, "rows", cols, sizeof(cols) / sizeof(cols[0]));
	table_rows(&t);
	ctl_table_end(&t);
	ctl_json_close(&o);
	assert_string_equal(o.buf, "{\"daemon\":\"x\",\"rows\":["
	    "{\"name\":\"relay-long-name\",\"count\":7,\"age_s\":1.500,\"rtt_us\":40125,"
	    "\"up\":true,\"note\":\"first\"},"
	    "{\"name\":\"b\",\"count\":123456,\"age_s\":null,\"rtt_us\":900,\"up\":false,"
	    "\"note\":null}]}\n");
	free(o.buf);

	memset(&o, 0, sizeof(o));
	ctl_table_begin(&t, &o, true, "rows", cols, sizeof(cols) / sizeof(cols[0]));
	ctl_table_end(&t);
	assert_string_equal(o.buf, ",\"rows\":[]");
	free(o.buf);
}

/* Many rows: the text table keeps every cell (ASan checks the growth). */
static void
test_table_many_rows(void **state)
{
	static const struct ctl_col two[] = { { "k", CTL_STR, NULL }, { "v", CTL_UINT, NULL } };
	struct ctl_out o = { 0 };
	struct ctl_table t;
	char k[32], want[64];
	(void)state;

	ctl_table_begin(&t, &o, false, "x", two, 2);
	for (int i = 0; i < 5000; i++) {
		snprintf(k, sizeof(k), "key%d", i);
		ctl_cell_str(&t, k);
		ctl_cell_uint(&t, (unsigned long long)i * 1000);
	}
	ctl_table_end(&t);
	assert_false(o.oom);
	/* Widths: "key4999" (7) and "4999000" (7). */
	assert_memory_equal(o.buf, "k              v\nkey0           0\n", 34);
	snprintf(want, sizeof(want), "key4999  4999000\n");
	assert_string_equal(o.buf + o.len - strlen(want), want);
	free(o.buf);
}

static void
test_kv(void **state)
{
	struct ctl_ident id;
	struct ctl_out o = { 0 };
	struct ctl_kv kv = { &o, false };
	char want[256];
	(void)state;

	ctl_ident_init(&id, "slot-test", "slot_test", "1.2.3", "/nonexistent/slot-test.conf");
	ctl_kv_ident(&kv, &id);
	ctl_kv_str(&kv, "empty", "");
	ctl_kv_str(&kv, "none", NULL);
	ctl_kv_uint(&kv, "n", 42);
	ctl_kv_bool(&kv, "on", true);
	ctl_kv_dur(&kv, "wait", 2500000);
	snprintf(want, sizeof(want),
	    "daemon              slot-test\n"
	    "version             1.2.3\n"
	    "pid                 %d\n", (int)getpid());
	assert_memory_equal(o.buf, want, strlen(want));
	assert_non_null(strstr(o.buf, "\nuptime              0ms\n"));
	assert_non_null(strstr(o.buf, "\nconfig              /nonexistent/slot-test.conf\n"
	    "empty               -\nnone                -\nn                   42\n"
	    "on                  yes\nwait                2.5s\n"));
	free(o.buf);

	memset(&o, 0, sizeof(o));
	kv.json = true;
	ctl_json_open(&o, &id);
	ctl_kv_ident(&kv, &id);
	ctl_kv_str(&kv, "none", NULL);
	ctl_kv_uint(&kv, "n", 42);
	ctl_kv_bool(&kv, "on", false);
	ctl_kv_dur(&kv, "wait", 2500000);
	ctl_json_close(&o);
	snprintf(want, sizeof(want), "{\"daemon\":\"slot-test\",\"version\":\"1.2.3\",\"pid\":%d,"
	    "\"uptime_s\":", (int)getpid());
	assert_memory_equal(o.buf, want, strlen(want));
	assert_non_null(strstr(o.buf, ",\"config\":\"/nonexistent/slot-test.conf\",\"none\":null,"
	    "\"n\":42,\"on\":false,\"wait_s\":2.500}\n"));
	free(o.buf);
}

static void
test_counters_and_metrics(void **state)
{
	const struct ctl_counter v[] = {
		{ "pipes_open", 3, CTL_GAUGE, "Pipes open." },
		{ "bytes_in", 18446744073709551615ULL, CTL_COUNTER, "Bytes\\in\nnow." },
		{ "pipes_total", 9, CTL_COUNTER, NULL },
	};
	struct ctl_ident id;
	struct ctl_out o = { 0 };
	char name[128], want[2048];
	(void)state;

	ctl_counters_text(&o, v, 3);
	assert_string_equal(o.buf, "pipes_open 3\nbytes_in 18446744073709551615\npipes_total 9\n");
	free(o.buf);
	memset(&o, 0, sizeof(o));
	ctl_counters_json(&o, v, 3);
	assert_string_equal(o.buf,
	    "{\"pipes_open\":3,\"bytes_in\":18446744073709551615,\"pipes_total\":9}");
	free(o.buf);

	ctl_ident_init(&id, "slot-test", "slot_test", "1.0 \"beta\"\\x", "/");
	id.start_real_us = 1700000000123456ull;
	assert_string_equal(ctl_metric_name(&id, &v[0], name), "slot_test_pipes_open");
	assert_string_equal(ctl_metric_name(&id, &v[1], name), "slot_test_bytes_in_total");
	assert_string_equal(ctl_metric_name(&id, &v[2], name), "slot_test_pipes_total");
	memset(&o, 0, sizeof(o));
	ctl_metrics(&o, &id, v, 3);
	snprintf(want, sizeof(want),
	    "# HELP slot_test_info Always 1; the labels say which build answers.\n"
	    "# TYPE slot_test_info gauge\n"
	    "slot_test_info{daemon=\"slot-test\",version=\"1.0 \\\"beta\\\"\\\\x\"} 1\n"
	    "# HELP slot_test_start_time_seconds Start time of the daemon, seconds since the "
	    "Unix epoch.\n"
	    "# TYPE slot_test_start_time_seconds gauge\n"
	    "slot_test_start_time_seconds 1700000000.123\n"
	    "# HELP slot_test_pipes_open Pipes open.\n"
	    "# TYPE slot_test_pipes_open gauge\n"
	    "slot_test_pipes_open 3\n"
	    "# HELP slot_test_bytes_in_total Bytes\\\\in\\nnow.\n"
	    "# TYPE slot_test_bytes_in_total counter\n"
	    "slot_test_bytes_in_total 18446744073709551615\n"
	    "# HELP slot_test_pipes_total pipes_total\n"
	    "# TYPE slot_test_pipes_total counter\n"
	    "slot_test_pipes_total 9\n");
	assert_string_equal(o.buf, want);
	free(o.buf);
}

/* ---- the command table (ctl_cmd_answer) ---- */

static void
cmd_echo(void *daemon, const struct ctl_req *q, struct ctl_out *out)
{
	ctl_printf(out, "%s %s [%s]%s\n", (const char *)daemon, q->cmd, q->arg,
	    q->json ? " json" : "");
}

static void
cmd_status(void *daemon, struct ctl_kv *kv)
{
	ctl_kv_str(kv, "who", daemon);
}

static void
cmd_counters(void *daemon, struct ctl_counters *c)
{
	(void)daemon;
	ctl_counter_add(c, "pipes_open", 3, CTL_GAUGE, "Pipes open.");
	ctl_counter_add(c, "pipes_total", 9, CTL_COUNTER, "Pipes.");
}

static const struct ctl_col cmd_cols[] = {
	{ "name", CTL_STR, NULL },
	{ "n", CTL_UINT, NULL },
};

static void
cmd_rows(void *daemon, struct ctl_table *t)
{
	ctl_cell_str(t, daemon);
	ctl_cell_uint(t, 7);
}

static char *
cmd_answer(const struct ctl_cmds *set, const struct ctl_ident *id, const char *line)
{
	struct ctl_out o = { 0 };

	ctl_cmd_answer(set, "d", id, line, &o);
	assert_false(o.oom);
	assert_non_null(o.buf);
	return o.buf;
}

static bool
starts_with(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

#define assert_cmd(set, id, line, want) do {					\
	char *a_ = cmd_answer(set, id, line);					\
	assert_string_equal(a_, want);						\
	free(a_);								\
} while (0)

static void
test_cmd_table(void **state)
{
	static const struct ctl_cmd with_arg[] = {
		CTL_CMD_STATUS,
		CTL_CMD("echo", cmd_echo),
		CTL_CMD_ARG("flush", cmd_echo, "flush [SERVER]"),
		CTL_CMD_TABLE("rows", cmd_rows, cmd_cols),
		CTL_CMD_COUNTERS,
		CTL_CMD_METRICS,
		CTL_CMD_REFUSED("rules", "slot-test has no rules (slotd does)"),
	};
	static const struct ctl_cmd no_arg[] = {
		CTL_CMD("echo", cmd_echo),
		CTL_CMD_COUNTERS,
	};
	const struct ctl_cmds a = { with_arg, CTL_NCMDS(with_arg), cmd_status, cmd_counters };
	const struct ctl_cmds b = { no_arg, CTL_NCMDS(no_arg), cmd_status, cmd_counters };
	struct ctl_ident id;
	char *m;
	(void)state;

	ctl_ident_init(&id, "slot-test", "slot_test", "1.0", "/");
	assert_cmd(&a, &id, " echo json ", "d echo [] json\n");
	assert_cmd(&a, &id, "flush 10.0.0.1 json", "d flush [10.0.0.1] json\n");
	assert_cmd(&a, &id, "echo 10.0.0.1",
	    "error: \"echo\" takes no argument (only flush does: flush [SERVER])\n");
	assert_cmd(&a, &id, "bogus x",
	    "error: \"bogus\" takes no argument (only flush does: flush [SERVER])\n");
	assert_cmd(&a, &id, "bogus", "error: unknown command \"bogus\" for slot-test; it "
	    "answers status, echo, flush, rows, counters, metrics\n");
	assert_cmd(&a, &id, "rules json", "error: slot-test has no rules (slotd does); it "
	    "answers status, echo, flush, rows, counters, metrics\n");
	assert_cmd(&a, &id, "",
	    "error: bad request (expected a command, then \"json\" or nothing)\n");
	/* No command takes an argument: one is a bad request. */
	assert_cmd(&b, &id, "echo x",
	    "error: bad request (expected a command, then \"json\" or nothing)\n");
	assert_cmd(&b, &id, "status", "error: unknown command \"status\" for slot-test; it "
	    "answers echo, counters\n");

	assert_cmd(&a, &id, "rows", "name  n\nd     7\n");
	assert_cmd(&a, &id, "rows json",
	    "{\"daemon\":\"slot-test\",\"rows\":[{\"name\":\"d\",\"n\":7}]}\n");
	assert_cmd(&a, &id, "counters", "pipes_open 3\npipes_total 9\n");
	assert_cmd(&a, &id, "counters json",
	    "{\"daemon\":\"slot-test\",\"counters\":{\"pipes_open\":3,\"pipes_total\":9}}\n");
	assert_cmd(&a, &id, "metrics json", "error: metrics come in the Prometheus text format "
	    "only (\"counters json\" has them in JSON)\n");
	m = cmd_answer(&a, &id, "metrics");
	assert_non_null(strstr(m,
	    "\n# TYPE slot_test_pipes_total counter\nslot_test_pipes_total 9\n"));
	free(m);

	m = cmd_answer(&a, &id, "status");
	assert_true(starts_with(m, "daemon              slot-test\nversion             1.0\n"));
	assert_non_null(strstr(m, "\nwho                 d\n"));
	free(m);
	m = cmd_answer(&a, &id, "status json");
	assert_true(starts_with(m, "{\"daemon\":\"slot-test\",\"version\":\"1.0\",\"pid\":"));
	assert_non_null(strstr(m, ",\"who\":\"d\"}\n"));
	free(m);
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
		cmocka_unit_test_setup_teardown(test_http_metrics, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_variants, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_refusals, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_nul_byte, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_oversize, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_trailing_bytes, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_handler_error, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_half_closed, setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_slow_client_cut, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_full_server_evicts_oldest_sender,
		    setup_http, teardown_http),
		cmocka_unit_test_setup_teardown(test_http_full_of_lingering_clients, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_full_of_stalled_readers, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_evicts_lingering_before_sender, setup_http,
		    teardown_http),
		cmocka_unit_test_setup_teardown(test_http_evicts_from_busiest_peer, setup_http,
		    teardown_http),
		cmocka_unit_test(test_req_parse),
		cmocka_unit_test(test_req_parse_arg),
		cmocka_unit_test(test_error_and_json_str),
		cmocka_unit_test(test_fmt_dur),
		cmocka_unit_test(test_table_text),
		cmocka_unit_test(test_table_json),
		cmocka_unit_test(test_table_many_rows),
		cmocka_unit_test(test_kv),
		cmocka_unit_test(test_counters_and_metrics),
		cmocka_unit_test(test_cmd_table),
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
