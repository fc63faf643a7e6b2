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
	    "                            [--relay ADDR:CTLPORT --data-port P --key FILE]\n");
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
