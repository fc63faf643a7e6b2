/*
 * slot-bench-peer: the load tool of the throughput benchmark
 * (scripts/bench/relay_throughput.py).
 *
 *   slot-bench-peer sink --listen ADDR:PORT
 *       Accepts connections (one child process each) and discards what
 *       arrives: splice(2) into /dev/null, recv() into a 1 MiB buffer if the
 *       socket cannot splice. One line per connection on stdout:
 *         conn peer=EP bytes=N seconds=S gbps=G
 *
 *   slot-bench-peer send --connect ADDR:PORT --seconds S [--bind ADDR]
 *           [--relay ADDR:CTLPORT --data-port P --key FILE]
 *       Sends from a 256 KiB buffer with send(2) for S seconds, shuts the
 *       write half down and waits for the peer's EOF, so that the time covers
 *       the delivery of every byte. With --relay the connection goes through
 *       slot-relayd: a signed PIPE_ESTABLISH(client, --connect) on the control
 *       connection, then the data connection from the announced (bound)
 *       endpoint. The send path is the same with and without a relay, so only
 *       the middle box differs. Prints one line on stdout:
 *         send bytes=N seconds=S gbps=G
 *
 *   slot-bench-peer msink | swarm ...
 *       Many connections at once, for the scale benchmark
 *       (scripts/bench/e2e_scale.py): see "msink and swarm" below.
 *
 * Exit codes: 0 done, 1 error, 2 usage, 3 PIPE_FAIL, 4 ERROR or closed.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/clock.h"
#include "slot/proto.h"
#include "slot/sock.h"

#define SEND_BUF (256 * 1024)
#define SINK_BUF (1024 * 1024)
#define SINK_PIPE (1024 * 1024)
#define CTL_TIMEOUT_S 10

static void
usage(void)
{
	fprintf(stderr,
	    "usage: slot-bench-peer sink --listen ADDR:PORT\n"
	    "       slot-bench-peer send --connect ADDR:PORT --seconds S [--bind ADDR]\n"
	    "                            [--relay ADDR:CTLPORT --data-port P --key FILE]\n"
	    "       slot-bench-peer msink --listen ADDR:PORT [--expect N]\n"
	    "       slot-bench-peer swarm --connect ADDR:PORT --count N [--window W] [--seconds S]\n"
	    "                            [--bind ADDR] [--relay ADDR:CTLPORT --data-port P --key FILE]\n");
	exit(2);
}

static _Noreturn void
die(const char *what)
{
	fprintf(stderr, "slot-bench-peer: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void
set_timeouts(int fd, int s)
{
	struct timeval tv = { .tv_sec = s, .tv_usec = 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* A blocking TCP socket for ep's family, bound to `bind_to` if not NULL. */
static int
tcp_socket(int family, const struct endpoint *bind_to)
{
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		die("socket");
	if (bind_to) {
		struct sockaddr_storage ss;
		socklen_t sl = ep_to_sockaddr(bind_to, &ss);

		if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
			die("bind");
	}
	return fd;
}

static void
tcp_connect(int fd, const struct endpoint *dst, const char *what)
{
	struct sockaddr_storage ss;
	socklen_t sl = ep_to_sockaddr(dst, &ss);

	while (connect(fd, (struct sockaddr *)&ss, sl) < 0) {
		if (errno != EINTR)
			die(what);
	}
}

/* ---- sink ---- */

static void
sink_conn(int fd, const struct endpoint *peer)
{
	static uint8_t buf[SINK_BUF];
	unsigned long long bytes = 0;
	uint64_t t0 = clock_mono_us(), t1;
	int pfd[2] = { -1, -1 }, null = open("/dev/null", O_WRONLY | O_CLOEXEC);
	bool use_splice = null >= 0 && pipe2(pfd, O_CLOEXEC) == 0;
	char eb[EP_STRLEN];
	double s;

	if (use_splice)
		(void)fcntl(pfd[1], F_SETPIPE_SZ, SINK_PIPE);
	for (;;) {
		ssize_t n;

		if (use_splice) {
			n = splice(fd, NULL, pfd[1], NULL, SINK_PIPE, SPLICE_F_MOVE);
			if (n < 0 && errno == EINVAL && bytes == 0) {
				use_splice = false;
				continue;
			}
			if (n > 0) {
				ssize_t left = n;

				while (left > 0) {
					ssize_t m = splice(pfd[0], NULL, null, NULL, (size_t)left,
					    SPLICE_F_MOVE);
					if (m < 0 && errno == EINTR)
						continue;
					if (m <= 0)
						die("splice to /dev/null");
					left -= m;
				}
			}
		} else {
			n = recv(fd, buf, sizeof(buf), 0);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "slot-bench-peer: sink receive: %s\n", strerror(errno));
			break;
		}
		if (n == 0)
			break;
		bytes += (unsigned long long)n;
	}
	t1 = clock_mono_us();
	s = (double)(t1 - t0) / 1e6;
	printf("conn peer=%s bytes=%llu seconds=%.6f gbps=%.3f\n", ep_fmt(peer, eb), bytes, s,
	    s > 0 ? (double)bytes * 8 / s / 1e9 : 0.0);
	fflush(stdout);
	close(fd);
}

static int
run_sink(const struct endpoint *listen_ep)
{
	struct sockaddr_storage ss;
	socklen_t sl = ep_to_sockaddr(listen_ep, &ss);
	int one = 1, lfd;

	signal(SIGCHLD, SIG_IGN);	/* children are reaped by the kernel */
	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0)
		die("socket");
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, sl) < 0 || listen(lfd, 64) < 0)
		die("listen");
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		struct sockaddr_storage ps;
		socklen_t pl = sizeof(ps);
		struct endpoint peer;
		int fd = accept4(lfd, (struct sockaddr *)&ps, &pl, SOCK_CLOEXEC);
		pid_t pid;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			die("accept");
		}
		if (ep_from_sockaddr((struct sockaddr *)&ps, pl, &peer) < 0)
			memset(&peer, 0, sizeof(peer));
		pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			close(lfd);
			sink_conn(fd, &peer);
			_exit(0);
		}
		close(fd);
	}
}

/* ---- relay control ---- */

static uint64_t
random_u64(void)
{
	uint64_t v = 0;

	while (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		;
	return v;
}

/* Establishes a pipe to `server` at the relay; returns the data socket,
 * bound to the announced client endpoint and connected to the data port.
 * *ctl_out keeps the control connection open until the end. */
static int
relay_open(const struct endpoint *relay, uint16_t data_port, const char *key_file,
    const struct endpoint *server, const struct addr *bind_addr, int *ctl_out)
{
	struct auth_key key;
	struct endpoint local, client, data_ep;
	struct proto_msg m = { .type = PROTO_PIPE_ESTABLISH };
	uint8_t buf[PROTO_MAX_LEN * 4];
	size_t have = 0;
	char err[256], eb[EP_STRLEN];
	int ctl, dfd, n;

	if (auth_init() < 0) {
		fprintf(stderr, "slot-bench-peer: sodium init failed\n");
		exit(1);
	}
	if (auth_key_load(key_file, &key, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-bench-peer: key %s: %s\n", key_file, err);
		exit(1);
	}
	ctl = tcp_socket(relay->addr.family == AF_INET ? AF_INET : AF_INET6, NULL);
	set_timeouts(ctl, CTL_TIMEOUT_S);
	tcp_connect(ctl, relay, "control connect");
	if (sock_local_ep(ctl, &local) < 0)
		die("getsockname");
	if (bind_addr)
		local.addr = *bind_addr;
	local.port = 0;
	dfd = tcp_socket(relay->addr.family == AF_INET ? AF_INET : AF_INET6, &local);
	if (sock_local_ep(dfd, &client) < 0)
		die("getsockname");

	m.ts_us = clock_real_us();
	m.nonce = random_u64();
	m.id = 1;
	m.u.establish.client = client;
	m.u.establish.server = *server;
	n = proto_encode(&m, &key, buf, sizeof(buf));
	if (n < 0) {
		fprintf(stderr, "slot-bench-peer: encode failed\n");
		exit(1);
	}
	if (send(ctl, buf, (size_t)n, MSG_NOSIGNAL) != n)
		die("control send");

	for (;;) {
		enum proto_err why = PERR_NONE;
		size_t used = 0;
		ssize_t r;

		switch (proto_decode(buf, have, &key, &m, &used, &why)) {
		case PROTO_OK:
			if (m.type == PROTO_PIPE_OK && m.id == 1)
				goto established;
			if (m.type == PROTO_PIPE_FAIL) {
				fprintf(stderr, "slot-bench-peer: PIPE_FAIL %s detail=%u\n",
				    proto_fail_str(m.u.fail.reason), m.u.fail.detail);
				exit(3);
			}
			if (m.type == PROTO_ERROR) {
				fprintf(stderr, "slot-bench-peer: ERROR %s\n",
				    proto_error_code_str(m.u.error.code));
				exit(4);
			}
			memmove(buf, buf + used, have - used);	/* e.g. a keepalive */
			have -= used;
			continue;
		case PROTO_BAD:
			fprintf(stderr, "slot-bench-peer: bad reply (%s)\n", proto_err_str(why));
			exit(1);
		case PROTO_NEED_MORE:
			break;
		}
		r = recv(ctl, buf + have, sizeof(buf) - have, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("control recv");
		if (r == 0) {
			fprintf(stderr, "slot-bench-peer: control connection closed\n");
			exit(4);
		}
		have += (size_t)r;
	}
established:
	auth_key_wipe(&key);
	data_ep = *relay;
	data_ep.port = data_port;
	tcp_connect(dfd, &data_ep, "data connect");
	fprintf(stderr, "slot-bench-peer: pipe %s -> %s established\n",
	    ep_fmt(&client, eb), ep_fmt(server, (char[EP_STRLEN]){ 0 }));
	*ctl_out = ctl;
	return dfd;
}

/* ---- send ---- */

static int
run_send(const struct endpoint *dst, double seconds, const struct addr *bind_addr,
    const struct endpoint *relay, uint16_t data_port, const char *key_file)
{
	static uint8_t buf[SEND_BUF];
	unsigned long long bytes = 0;
	uint64_t t0, t1, until;
	int fd, ctl = -1;
	double s;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131u + 7u);
	signal(SIGPIPE, SIG_IGN);
	if (relay) {
		fd = relay_open(relay, data_port, key_file, dst, bind_addr, &ctl);
	} else {
		struct endpoint b = { .port = 0 };

		if (bind_addr)
			b.addr = *bind_addr;
		fd = tcp_socket(dst->addr.family == AF_INET ? AF_INET : AF_INET6,
		    bind_addr ? &b : NULL);
		tcp_connect(fd, dst, "connect");
	}
	t0 = clock_mono_us();
	until = t0 + (uint64_t)(seconds * 1e6);
	while (clock_mono_us() < until) {
		ssize_t n = send(fd, buf, sizeof(buf), MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("send");
		bytes += (unsigned long long)n;
	}
	if (shutdown(fd, SHUT_WR) < 0)
		die("shutdown");
	set_timeouts(fd, 60);
	for (;;) {		/* the peer closes once it has every byte */
		ssize_t n = recv(fd, buf, sizeof(buf), 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("waiting for the peer's close");
		if (n == 0)
			break;
	}
	t1 = clock_mono_us();
	s = (double)(t1 - t0) / 1e6;
	printf("send bytes=%llu seconds=%.6f gbps=%.3f\n", bytes, s,
	    (double)bytes * 8 / s / 1e9);
	fflush(stdout);
	close(fd);
	if (ctl >= 0)
		close(ctl);
	return 0;
}

/* ---- msink and swarm: many connections at once (scripts/bench/e2e_scale.py) ----
 *
 *   slot-bench-peer msink --listen ADDR:PORT [--expect N]
 *       One process, epoll: accepts any number of connections and discards
 *       what arrives (splice(2) into /dev/null through one shared pipe;
 *       recv() if a socket cannot splice). When the N-th connection (since
 *       start or the last "expect") has delivered its first byte it prints
 *         firstbytes n=N us=T          (T: CLOCK_MONOTONIC, microseconds)
 *       Commands on stdin, one per line: "expect N" (count again from 0,
 *       answered "expecting n=N"), "stats" (prints: stats accepted=A open=O
 *       firsts=F bytes=B).
 *
 *   slot-bench-peer swarm --connect ADDR:PORT --count N [--window W]
 *           [--seconds S] [--bind ADDR]
 *           [--relay ADDR:CTLPORT --data-port P --key FILE]
 *       Sets up N connections, at most W (default 256) being set up at
 *       once, and writes one byte on each as soon as it is connected (the
 *       sink's "firstbytes" then marks the end of the set-up end to end).
 *       With --relay each is a pipe: PIPE_ESTABLISH on one control
 *       connection (requests pipelined by id), then the data connection from
 *       the announced endpoint once PIPE_OK is in. Prints
 *         setup n=N ok=K failed=F t0_us=T0 t1_us=T1 seconds=S rate=R cpu_us=C
 *       (T0, T1 monotonic: first request, last connect done; C: this
 *       process's user+system CPU between them, to tell whether the load
 *       generator is what bounds the rate). Then, with
 *       --seconds S > 0, sends on every connection for S seconds, shuts the
 *       write halves down and waits for every peer's close:
 *         send conns=K bytes=B seconds=S gbps=G
 *       With S = 0 (the default) it prints "ready" and holds the connections
 *       idle until a line or EOF on stdin; then it closes every connection
 *       with a reset (no TIME_WAIT anywhere) and prints "closed lost=L"
 *       (L: connections the peer ended while held).
 */

#include <sys/epoll.h>
#include <sys/resource.h>

#define SW_ID_CTL UINT64_MAX
#define SW_ID_STDIN (UINT64_MAX - 1)
#define SW_ID_LISTEN (UINT64_MAX - 2)
#define SW_SEND_CHUNK (64 * 1024)

static void
sw_raise_nofile(rlim_t want)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_max < want) {
		struct rlimit nr = { .rlim_cur = want, .rlim_max = want };

		if (setrlimit(RLIMIT_NOFILE, &nr) == 0)
			return;
	}
	rl.rlim_cur = rl.rlim_max;
	(void)setrlimit(RLIMIT_NOFILE, &rl);
}

static void
sw_epoll(int ep, int op, int fd, uint32_t events, uint64_t id)
{
	struct epoll_event ev = { .events = events, .data.u64 = id };

	if (epoll_ctl(ep, op, fd, &ev) < 0 && op != EPOLL_CTL_DEL)
		die("epoll_ctl");
}

static void
sw_close_rst(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };

	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

/* ---- msink ---- */

struct ms_conn {
	unsigned char open, first;
};

static int
run_msink(const struct endpoint *listen_ep, long expect)
{
	struct sockaddr_storage ss;
	socklen_t sl = ep_to_sockaddr(listen_ep, &ss);
	int one = 1, lfd, ep, pfd[2], null;
	size_t cap = 0;
	struct ms_conn *conns = NULL;
	unsigned long long accepted = 0, open_n = 0, firsts = 0, bytes = 0;
	static uint8_t buf[SINK_BUF];
	char line[256];
	size_t linelen = 0;
	bool stdin_on = true;

	signal(SIGPIPE, SIG_IGN);
	sw_raise_nofile(1 << 20);
	lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (lfd < 0)
		die("socket");
	(void)setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&ss, sl) < 0 || listen(lfd, 4096) < 0)
		die("listen");
	if (pipe2(pfd, O_CLOEXEC | O_NONBLOCK) < 0)
		die("pipe");
	(void)fcntl(pfd[1], F_SETPIPE_SZ, SINK_PIPE);
	if ((null = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
		die("/dev/null");
	if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	sw_epoll(ep, EPOLL_CTL_ADD, lfd, EPOLLIN, SW_ID_LISTEN);
	sw_epoll(ep, EPOLL_CTL_ADD, 0, EPOLLIN, SW_ID_STDIN);
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		struct epoll_event evs[256];
		int n = epoll_wait(ep, evs, 256, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		for (int i = 0; i < n; i++) {
			uint64_t id = evs[i].data.u64;

			if (id == SW_ID_LISTEN) {
				for (;;) {
					int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

					if (fd < 0) {
						if (errno == EAGAIN || errno == EINTR ||
						    errno == ECONNABORTED)
							break;
						if (errno == EMFILE || errno == ENFILE) {
							fprintf(stderr, "slot-bench-peer: accept: %s\n",
							    strerror(errno));
							break;
						}
						die("accept");
					}
					if ((size_t)fd >= cap) {
						size_t nc = cap ? cap : 1024;
						struct ms_conn *p;

						while (nc <= (size_t)fd)
							nc *= 2;
						p = realloc(conns, nc * sizeof(*conns));
						if (p == NULL)
							die("realloc");
						memset(p + cap, 0, (nc - cap) * sizeof(*p));
						conns = p;
						cap = nc;
					}
					conns[fd].open = 1;
					conns[fd].first = 0;
					accepted++;
					open_n++;
					sw_epoll(ep, EPOLL_CTL_ADD, fd, EPOLLIN, (uint64_t)fd);
				}
				continue;
			}
			if (id == SW_ID_STDIN) {
				ssize_t r = read(0, line + linelen, sizeof(line) - 1 - linelen);
				char *nl;

				if (r <= 0) {
					sw_epoll(ep, EPOLL_CTL_DEL, 0, 0, 0);
					stdin_on = false;
					continue;
				}
				linelen += (size_t)r;
				line[linelen] = '\0';
				while ((nl = strchr(line, '\n')) != NULL) {
					*nl = '\0';
					if (strncmp(line, "expect ", 7) == 0) {
						expect = strtol(line + 7, NULL, 10);
						firsts = 0;
						for (size_t k = 0; k < cap; k++)
							if (conns[k].open)
								conns[k].first = 1;
						printf("expecting n=%ld\n", expect);
						fflush(stdout);
					} else if (strcmp(line, "stats") == 0) {
						printf("stats accepted=%llu open=%llu firsts=%llu bytes=%llu\n",
						    accepted, open_n, firsts, bytes);
						fflush(stdout);
					}
					linelen -= (size_t)(nl + 1 - line);
					memmove(line, nl + 1, linelen + 1);
				}
				if (linelen >= sizeof(line) - 1)
					linelen = 0;
				continue;
			}
			{
				int fd = (int)id;
				ssize_t got = splice(fd, NULL, pfd[1], NULL, SINK_PIPE,
				    SPLICE_F_MOVE | SPLICE_F_NONBLOCK);

				if (got < 0 && errno == EINVAL)
					got = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
				if (got < 0 && (errno == EAGAIN || errno == EINTR))
					continue;
				if (got > 0) {
					ssize_t left = got;

					while (left > 0) {
						ssize_t m = splice(pfd[0], NULL, null, NULL, (size_t)left,
						    SPLICE_F_MOVE);

						if (m < 0 && errno == EINTR)
							continue;
						if (m <= 0)
							break;	/* recv()ed bytes: nothing in the pipe */
						left -= m;
					}
					bytes += (unsigned long long)got;
					if (!conns[fd].first) {
						conns[fd].first = 1;
						if (++firsts == (unsigned long long)expect) {
							printf("firstbytes n=%llu us=%llu\n", firsts,
							    (unsigned long long)clock_mono_us());
							fflush(stdout);
						}
					}
					continue;
				}
				/* EOF or error: close (a clean close after EOF) */
				sw_epoll(ep, EPOLL_CTL_DEL, fd, 0, 0);
				if (got == 0)
					close(fd);
				else
					sw_close_rst(fd);
				conns[fd].open = 0;
				open_n--;
			}
		}
		(void)stdin_on;
	}
}

/* ---- swarm ---- */

enum sw_state { SW_IDLE, SW_WAIT_OK, SW_CONNECTING, SW_UP, SW_SHUT, SW_DONE, SW_FAILED };

struct sw_conn {
	int fd;
	unsigned char state;
};

struct swarm {
	int ep, ctl;
	struct sw_conn *c;
	long n, window, launched, inflight, ok, failed, lost;
	bool relay;
	struct endpoint dst, data_ep, local;
	struct auth_key key;
	uint8_t *out;
	size_t out_len, out_cap;
	uint8_t in[PROTO_MAX_LEN * 8];
	size_t in_len;
	bool ctl_writing;
};

static void
sw_ctl_flush(struct swarm *s)
{
	while (s->out_len > 0) {
		ssize_t w = send(s->ctl, s->out, s->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w < 0)
			die("control send");
		memmove(s->out, s->out + w, s->out_len - (size_t)w);
		s->out_len -= (size_t)w;
	}
	if ((s->out_len > 0) != s->ctl_writing) {
		s->ctl_writing = s->out_len > 0;
		sw_epoll(s->ep, EPOLL_CTL_MOD, s->ctl, EPOLLIN | (s->ctl_writing ? EPOLLOUT : 0),
		    SW_ID_CTL);
	}
}

static void
sw_fail(struct swarm *s, long i)
{
	if (s->c[i].fd >= 0) {
		sw_epoll(s->ep, EPOLL_CTL_DEL, s->c[i].fd, 0, 0);
		close(s->c[i].fd);
		s->c[i].fd = -1;
	}
	if (s->c[i].state == SW_WAIT_OK || s->c[i].state == SW_CONNECTING) {
		s->inflight--;
		s->failed++;
	}
	s->c[i].state = SW_FAILED;
}

/* Non-blocking connect of conn i to dst (its socket may be bound already). */
static void
sw_connect(struct swarm *s, long i, const struct endpoint *dst)
{
	struct sockaddr_storage ss;
	socklen_t sl = ep_to_sockaddr(dst, &ss);

	if (connect(s->c[i].fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		fprintf(stderr, "slot-bench-peer: connect: %s\n", strerror(errno));
		sw_fail(s, i);
		return;
	}
	s->c[i].state = SW_CONNECTING;
	sw_epoll(s->ep, EPOLL_CTL_ADD, s->c[i].fd, EPOLLOUT, (uint64_t)i);
}

static void
sw_launch(struct swarm *s)
{
	while (s->launched < s->n && s->inflight < s->window) {
		long i = s->launched++;
		int fd = socket(s->dst.addr.family == AF_INET ? AF_INET : AF_INET6,
		    SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

		if (fd < 0)
			die("socket");
		s->c[i].fd = fd;
		s->inflight++;
		if (!s->relay) {
			sw_connect(s, i, &s->dst);
			continue;
		}
		{
			struct sockaddr_storage ss;
			socklen_t sl = ep_to_sockaddr(&s->local, &ss);
			struct proto_msg m = { .type = PROTO_PIPE_ESTABLISH };
			struct endpoint client;
			int len;

			if (bind(fd, (struct sockaddr *)&ss, sl) < 0)
				die("bind");
			if (sock_local_ep(fd, &client) < 0)
				die("getsockname");
			m.ts_us = clock_real_us();
			m.nonce = random_u64();
			m.id = (uint32_t)(i + 1);
			m.u.establish.client = client;
			m.u.establish.server = s->dst;
			if (s->out_cap - s->out_len < PROTO_MAX_LEN) {
				s->out_cap = s->out_cap ? s->out_cap * 2 : 65536;
				if ((s->out = realloc(s->out, s->out_cap)) == NULL)
					die("realloc");
			}
			len = proto_encode(&m, &s->key, s->out + s->out_len, s->out_cap - s->out_len);
			if (len < 0) {
				fprintf(stderr, "slot-bench-peer: encode failed\n");
				exit(1);
			}
			s->out_len += (size_t)len;
			s->c[i].state = SW_WAIT_OK;
		}
	}
	if (s->relay)
		sw_ctl_flush(s);
}

static void
sw_ctl_read(struct swarm *s)
{
	for (;;) {
		ssize_t r = recv(s->ctl, s->in + s->in_len, sizeof(s->in) - s->in_len, MSG_DONTWAIT);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r < 0)
			die("control recv");
		if (r == 0) {
			fprintf(stderr, "slot-bench-peer: control connection closed\n");
			exit(4);
		}
		s->in_len += (size_t)r;
		for (;;) {
			struct proto_msg m;
			enum proto_err why = PERR_NONE;
			size_t used = 0;
			enum proto_result pr = proto_decode(s->in, s->in_len, &s->key, &m, &used, &why);
			long i;

			if (pr == PROTO_NEED_MORE)
				break;
			if (pr == PROTO_BAD) {
				fprintf(stderr, "slot-bench-peer: bad reply (%s)\n", proto_err_str(why));
				exit(1);
			}
			memmove(s->in, s->in + used, s->in_len - used);
			s->in_len -= used;
			if (m.type == PROTO_ERROR) {
				fprintf(stderr, "slot-bench-peer: ERROR %s\n",
				    proto_error_code_str(m.u.error.code));
				exit(4);
			}
			if (m.type != PROTO_PIPE_OK && m.type != PROTO_PIPE_FAIL)
				continue;	/* keepalive */
			i = (long)m.id - 1;
			if (i < 0 || i >= s->launched || s->c[i].state != SW_WAIT_OK)
				continue;
			if (m.type == PROTO_PIPE_FAIL) {
				if (s->failed < 5)
					fprintf(stderr, "slot-bench-peer: PIPE_FAIL %s detail=%u\n",
					    proto_fail_str(m.u.fail.reason), m.u.fail.detail);
				sw_fail(s, i);
				continue;
			}
			sw_connect(s, i, &s->data_ep);
		}
	}
}

/* The connect of conn i finished: one byte goes out, then it is up. */
static void
sw_connected(struct swarm *s, long i)
{
	int fd = s->c[i].fd;

	if (sock_connect_result(fd) != 0 || send(fd, "x", 1, MSG_NOSIGNAL) != 1) {
		if (s->failed < 5)
			fprintf(stderr, "slot-bench-peer: connect: %s\n", strerror(errno));
		sw_fail(s, i);
		return;
	}
	s->c[i].state = SW_UP;
	s->inflight--;
	s->ok++;
	sw_epoll(s->ep, EPOLL_CTL_MOD, fd, EPOLLIN, (uint64_t)i);
}

/* Readable while held or sending: EOF or a reset from the far side. */
static void
sw_readable(struct swarm *s, long i, uint8_t *buf, size_t cap)
{
	ssize_t r = recv(s->c[i].fd, buf, cap, MSG_DONTWAIT);

	if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
		return;
	sw_epoll(s->ep, EPOLL_CTL_DEL, s->c[i].fd, 0, 0);
	if (s->c[i].state == SW_UP)
		s->lost++;
	s->c[i].state = r == 0 ? SW_DONE : SW_FAILED;
}

/* User+system CPU time, microseconds. */
static uint64_t
ru_us(const struct rusage *ru)
{
	return (uint64_t)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000000u +
	    (uint64_t)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
}

static int
run_swarm(const struct endpoint *dst, long count, long window, double seconds,
    const struct addr *bind_addr, const struct endpoint *relay, uint16_t data_port,
    const char *key_file)
{
	static uint8_t buf[SEND_BUF];
	struct swarm s = { .n = count, .window = window, .dst = *dst, .ctl = -1 };
	struct rusage ru0, ru1;
	uint64_t t0, t1;
	unsigned long long bytes = 0;

	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)(i * 131u + 7u);
	signal(SIGPIPE, SIG_IGN);
	sw_raise_nofile((rlim_t)count + 256);
	if ((s.c = calloc((size_t)count, sizeof(*s.c))) == NULL)
		die("calloc");
	for (long i = 0; i < count; i++)
		s.c[i].fd = -1;
	if ((s.ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	if (relay) {
		char err[256];
		int fl;

		s.relay = true;
		if (auth_init() < 0 || auth_key_load(key_file, &s.key, err, sizeof(err)) < 0) {
			fprintf(stderr, "slot-bench-peer: key %s: %s\n", key_file, err);
			exit(1);
		}
		s.ctl = tcp_socket(relay->addr.family == AF_INET ? AF_INET : AF_INET6, NULL);
		tcp_connect(s.ctl, relay, "control connect");
		if (sock_local_ep(s.ctl, &s.local) < 0)
			die("getsockname");
		if (bind_addr)
			s.local.addr = *bind_addr;
		s.local.port = 0;
		s.data_ep = *relay;
		s.data_ep.port = data_port;
		fl = fcntl(s.ctl, F_GETFL);
		(void)fcntl(s.ctl, F_SETFL, fl | O_NONBLOCK);
		(void)sock_set_nodelay(s.ctl);
		sw_epoll(s.ep, EPOLL_CTL_ADD, s.ctl, EPOLLIN, SW_ID_CTL);
	} else if (bind_addr) {
		s.local.addr = *bind_addr;	/* not used: direct connects pick their own */
	}

	/* set-up */
	getrusage(RUSAGE_SELF, &ru0);
	t0 = clock_mono_us();
	sw_launch(&s);
	while (s.ok + s.failed < s.n) {
		struct epoll_event evs[512];
		int n = epoll_wait(s.ep, evs, 512, 30000);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("epoll_wait");
		if (n == 0) {
			fprintf(stderr, "slot-bench-peer: set-up stalled: ok=%ld failed=%ld of %ld\n",
			    s.ok, s.failed, s.n);
			exit(1);
		}
		for (int k = 0; k < n; k++) {
			uint64_t id = evs[k].data.u64;

			if (id == SW_ID_CTL) {
				if (evs[k].events & EPOLLOUT)
					sw_ctl_flush(&s);
				if (evs[k].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
					sw_ctl_read(&s);
			} else if (s.c[id].state == SW_CONNECTING) {
				sw_connected(&s, (long)id);
			} else if (s.c[id].state == SW_UP) {
				sw_readable(&s, (long)id, buf, sizeof(buf));
			}
		}
		sw_launch(&s);
	}
	t1 = clock_mono_us();
	getrusage(RUSAGE_SELF, &ru1);
	printf("setup n=%ld ok=%ld failed=%ld t0_us=%llu t1_us=%llu seconds=%.6f rate=%.1f "
	    "cpu_us=%llu\n", s.n, s.ok, s.failed, (unsigned long long)t0, (unsigned long long)t1,
	    (double)(t1 - t0) / 1e6, (double)s.n / ((double)(t1 - t0) / 1e6),
	    (unsigned long long)(ru_us(&ru1) - ru_us(&ru0)));
	fflush(stdout);

	if (seconds > 0) {
		uint64_t until, tw, deadline;
		long open_n = 0;

		for (long i = 0; i < s.n; i++)
			if (s.c[i].state == SW_UP) {
				sw_epoll(s.ep, EPOLL_CTL_MOD, s.c[i].fd, EPOLLOUT, (uint64_t)i);
				bytes++;	/* the byte of the set-up */
			}
		tw = clock_mono_us();
		until = tw + (uint64_t)(seconds * 1e6);
		for (;;) {
			struct epoll_event evs[512];
			uint64_t now = clock_mono_us();
			int n;

			if (now >= until)
				break;
			n = epoll_wait(s.ep, evs, 512, (int)((until - now + 999) / 1000));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("epoll_wait");
			for (int k = 0; k < n; k++) {
				long i = (long)evs[k].data.u64;
				ssize_t w;

				if (s.c[i].state != SW_UP)
					continue;
				w = send(s.c[i].fd, buf, SW_SEND_CHUNK, MSG_NOSIGNAL | MSG_DONTWAIT);
				if (w > 0)
					bytes += (unsigned long long)w;
				else if (w < 0 && errno != EAGAIN && errno != EINTR) {
					sw_epoll(s.ep, EPOLL_CTL_DEL, s.c[i].fd, 0, 0);
					s.c[i].state = SW_FAILED;
					s.lost++;
				}
			}
		}
		for (long i = 0; i < s.n; i++)
			if (s.c[i].state == SW_UP) {
				if (shutdown(s.c[i].fd, SHUT_WR) < 0)
					die("shutdown");
				s.c[i].state = SW_SHUT;
				sw_epoll(s.ep, EPOLL_CTL_MOD, s.c[i].fd, EPOLLIN, (uint64_t)i);
				open_n++;
			}
		deadline = clock_mono_us() + 60 * 1000000ULL;
		while (open_n > 0 && clock_mono_us() < deadline) {
			struct epoll_event evs[512];
			int n = epoll_wait(s.ep, evs, 512, 1000);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("epoll_wait");
			for (int k = 0; k < n; k++) {
				long i = (long)evs[k].data.u64;
				ssize_t r;

				if (s.c[i].state != SW_SHUT)
					continue;
				r = recv(s.c[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
				if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EINTR)))
					continue;
				sw_epoll(s.ep, EPOLL_CTL_DEL, s.c[i].fd, 0, 0);
				s.c[i].state = r == 0 ? SW_DONE : SW_FAILED;
				if (r != 0)
					s.lost++;
				open_n--;
			}
		}
		t1 = clock_mono_us();
		printf("send conns=%ld bytes=%llu seconds=%.6f gbps=%.3f lost=%ld unfinished=%ld\n",
		    s.ok, bytes, (double)(t1 - tw) / 1e6,
		    (double)bytes * 8 / ((double)(t1 - tw) / 1e6) / 1e9, s.lost, open_n);
		fflush(stdout);
	} else {
		bool held = true;

		printf("ready\n");
		fflush(stdout);
		sw_epoll(s.ep, EPOLL_CTL_ADD, 0, EPOLLIN, SW_ID_STDIN);
		while (held) {
			struct epoll_event evs[512];
			int n = epoll_wait(s.ep, evs, 512, -1);

			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				die("epoll_wait");
			for (int k = 0; k < n; k++) {
				uint64_t id = evs[k].data.u64;

				if (id == SW_ID_STDIN)
					held = false;
				else if (id == SW_ID_CTL)
					sw_ctl_read(&s);
				else if (s.c[id].state == SW_UP)
					sw_readable(&s, (long)id, buf, sizeof(buf));
			}
		}
	}
	for (long i = 0; i < s.n; i++)
		if (s.c[i].fd >= 0)
			sw_close_rst(s.c[i].fd);
	if (s.ctl >= 0)
		close(s.ctl);
	printf("closed lost=%ld\n", s.lost);
	fflush(stdout);
	auth_key_wipe(&s.key);
	free(s.c);
	free(s.out);
	return 0;
}

/* Options of the two modes above (the others' parser stays as it was). */
static int
many_main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "expect", required_argument, NULL, 'e' },
		{ "connect", required_argument, NULL, 'c' },
		{ "count", required_argument, NULL, 'n' },
		{ "window", required_argument, NULL, 'w' },
		{ "seconds", required_argument, NULL, 's' },
		{ "bind", required_argument, NULL, 'b' },
		{ "relay", required_argument, NULL, 'r' },
		{ "data-port", required_argument, NULL, 'd' },
		{ "key", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	struct endpoint listen_ep, dst, relay;
	struct addr bind_addr;
	bool have_listen = false, have_dst = false, have_relay = false, have_bind = false;
	const char *key_file = NULL;
	long expect = 0, count = 0, window = 256, data_port = 0;
	double seconds = 0;
	int c;

	optind = 2;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (ep_parse(optarg, 0, &listen_ep) < 0)
				usage();
			have_listen = true;
			break;
		case 'e':
			expect = strtol(optarg, NULL, 10);
			break;
		case 'c':
			if (ep_parse(optarg, 0, &dst) < 0)
				usage();
			have_dst = true;
			break;
		case 'n':
			count = strtol(optarg, NULL, 10);
			break;
		case 'w':
			window = strtol(optarg, NULL, 10);
			break;
		case 's':
			seconds = strtod(optarg, NULL);
			if (seconds < 0)
				usage();
			break;
		case 'b':
			if (addr_parse(optarg, &bind_addr) < 0)
				usage();
			have_bind = true;
			break;
		case 'r':
			if (ep_parse(optarg, 0, &relay) < 0)
				usage();
			have_relay = true;
			break;
		case 'd':
			data_port = strtol(optarg, NULL, 10);
			if (data_port < 1 || data_port > 65535)
				usage();
			break;
		case 'k':
			key_file = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (strcmp(argv[1], "msink") == 0) {
		if (!have_listen)
			usage();
		return run_msink(&listen_ep, expect);
	}
	if (!have_dst || count < 1 || count > 1000000 || window < 1 ||
	    (have_relay && (data_port == 0 || key_file == NULL)))
		usage();
	return run_swarm(&dst, count, window, seconds, have_bind ? &bind_addr : NULL,
	    have_relay ? &relay : NULL, (uint16_t)data_port, key_file);
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "connect", required_argument, NULL, 'c' },
		{ "seconds", required_argument, NULL, 's' },
		{ "bind", required_argument, NULL, 'b' },
		{ "relay", required_argument, NULL, 'r' },
		{ "data-port", required_argument, NULL, 'd' },
		{ "key", required_argument, NULL, 'k' },
		{ NULL, 0, NULL, 0 },
	};
	struct endpoint listen_ep, dst, relay;
	struct addr bind_addr;
	bool have_listen = false, have_dst = false, have_relay = false, have_bind = false;
	const char *mode, *key_file = NULL;
	double seconds = 5;
	long data_port = 0;
	int c;

	if (argc < 2)
		usage();
	mode = argv[1];
	if (strcmp(mode, "msink") == 0 || strcmp(mode, "swarm") == 0)
		return many_main(argc, argv);
	optind = 2;
	while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			if (ep_parse(optarg, 0, &listen_ep) < 0)
				usage();
			have_listen = true;
			break;
		case 'c':
			if (ep_parse(optarg, 0, &dst) < 0)
				usage();
			have_dst = true;
			break;
		case 's':
			seconds = strtod(optarg, NULL);
			if (!(seconds > 0))
				usage();
			break;
		case 'b':
			if (addr_parse(optarg, &bind_addr) < 0)
				usage();
			have_bind = true;
			break;
		case 'r':
			if (ep_parse(optarg, 0, &relay) < 0)
				usage();
			have_relay = true;
			break;
		case 'd':
			data_port = strtol(optarg, NULL, 10);
			if (data_port < 1 || data_port > 65535)
				usage();
			break;
		case 'k':
			key_file = optarg;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	if (strcmp(mode, "sink") == 0) {
		if (!have_listen)
			usage();
		return run_sink(&listen_ep);
	}
	if (strcmp(mode, "send") == 0) {
		if (!have_dst || (have_relay && (data_port == 0 || key_file == NULL)))
			usage();
		return run_send(&dst, seconds, have_bind ? &bind_addr : NULL,
		    have_relay ? &relay : NULL, (uint16_t)data_port, key_file);
	}
	usage();
}
