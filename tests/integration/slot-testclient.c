/*
 * slot-testclient: a small client of slot-relayd for the integration tests.
 *
 * Establishes one pipe over a control connection and then behaves like
 * netcat on the data connection (stdin -> socket, socket -> stdout), or sends
 * UDP probes, or misbehaves on request (stale, replayed or badly signed
 * messages, data connections without a pipe, resets, slow reading), or asks
 * for a chain (--hop, PIPE_ESTABLISH_CHAIN) and for a keepalive's answer
 * (--keepalive: its type and whether it claims CHAINS). With
 * --id-key, --id-cert and --ca it speaks [auth] mode identity: a HELLO with
 * a client certificate first, then the pair key it shares with the relay.
 *
 * stderr gets one line per event; the exit code says how it ended:
 *   0 clean close, 1 other error, 2 usage, 3 PIPE_FAIL, 4 ERROR reply or
 *   control connection closed, 5 connection reset.
 *
 * SIGUSR1 ends --pause-read early: a test keeps a reader paused for as long
 * as it needs (a long S as the bound) and then lets it read.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/clock.h"
#include "slot/ident.h"
#include "slot/proto.h"
#include "slot/sock.h"

enum {
	EXIT_CLEAN = 0,
	EXIT_OTHER = 1,
	EXIT_USAGE = 2,
	EXIT_PIPE_FAIL = 3,
	EXIT_ERROR = 4,
	EXIT_RESET = 5,
};

#define MAX_COUNT 1024
#define IOBUF 65536
#define DEFAULT_WAIT_US (30 * 1000000ULL)	/* for answers without --timeout */

struct opts {
	const char *key_file;
	const char *id_key, *id_cert, *ca;	/* identity mode */
	const char *wrong_key_file;
	struct endpoint relay;
	uint16_t data_port;
	uint16_t probe_port;
	struct endpoint server;
	bool have_relay, have_server, have_bind;
	struct addr bind;
	double stale_s;
	bool replay;
	bool no_pipe;
	bool probe;
	double pause_read_s;
	double connect_delay_s;
	double data_first_s;	/* connect the data socket this long before asking */
	bool data_first;
	double hold_s;		/* --no-connect: keep control open this long */
	bool no_connect;
	long long rst_after;	/* -1: never */
	int count;
	double timeout_s;
	/* --hop: PIPE_ESTABLISH_CHAIN through these relays after this one. */
	struct endpoint hop_ctl[PROTO_CHAIN_MAX_HOPS], hop_data[PROTO_CHAIN_MAX_HOPS];
	unsigned nhops;
	int ka_flags;		/* --keepalive: its header flags; -1: none sent */
};

static struct opts o;
static struct auth_key key, sign_key;
static struct ident id;			/* identity mode: ours */
static struct proto_pair pair;		/* and the relay's, once its HELLO came */
static bool have_id, have_pair;
static uint64_t deadline;	/* monotonic us; 0 = none */
/* SIGUSR1 came: --pause-read is over. SIGUSR1 is blocked but in pump's
 * ppoll, so that it cannot come between the check and the wait. */
static volatile sig_atomic_t resume_read;
static sigset_t pump_mask;

static void
on_usr1(int sig)
{
	(void)sig;
	resume_read = 1;
}

static void
say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
}

static void
usage(void)
{
	fprintf(stderr,
	    "usage: slot-testclient --key FILE --relay ADDR:PORT --server ADDR:PORT\n"
	    "           [--data-port P] [--bind ADDR] [--timeout S]\n"
	    "  identity mode, instead of --key: --id-key FILE --id-cert FILE --ca FILE\n"
	    "  hostile: --stale S  --replay  --wrong-key FILE  --no-pipe\n"
	    "           --pause-read S (SIGUSR1 ends it)  --rst-after BYTES  --count N\n"
	    "           --connect-delay S  --no-connect S  --data-first S\n"
	    "  chains:  --hop CONTROL=DATA (once or twice: PIPE_ESTABLISH_CHAIN)\n"
	    "  --keepalive FLAGS: after the answers, a KEEPALIVE with these header\n"
	    "           flags (1 OBSERVE, 2 CHAINS); prints its answer (--count 0: no pipe)\n"
	    "  probes:  --probe --probe-port P [--count N] (identity mode: after a hello\n"
	    "           on the control connection, kept open while they run)\n");
	exit(EXIT_USAGE);
}

/* Milliseconds until t (monotonic us), for poll; -1 if t is 0. */
static int
ms_until(uint64_t t)
{
	uint64_t now = clock_mono_us();

	if (t == 0)
		return -1;
	if (now >= t)
		return 0;
	return (int)((t - now + 999) / 1000);
}

/* The earlier of two deadlines, 0 meaning none. */
static uint64_t
earlier(uint64_t a, uint64_t b)
{
	if (a == 0)
		return b;
	if (b == 0)
		return a;
	return a < b ? a : b;
}

static _Noreturn void
timed_out(void)
{
	say("timeout");
	exit(EXIT_OTHER);
}

/* Waits for ev on fd until the global deadline (or `until`). Returns revents,
 * 0 on timeout. */
static short
wait_fd(int fd, short ev, uint64_t until)
{
	struct pollfd p = { .fd = fd, .events = ev };
	int r;

	for (;;) {
		r = poll(&p, 1, ms_until(until));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			say("error poll: %s", strerror(errno));
			exit(EXIT_OTHER);
		}
		return r == 0 ? 0 : p.revents;
	}
}

/* Writes all of buf to a non-blocking socket. Returns 0, or an errno. */
static int
send_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = send(fd, p, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (wait_fd(fd, POLLOUT, deadline) == 0)
				timed_out();
			continue;
		}
		if (n < 0)
			return errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes all of buf to a blocking descriptor (stdout). Returns 0 or -1. */
static int
write_all(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	ssize_t n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		p += (size_t)n;
		len -= (size_t)n;
	}
	return 0;
}

static int
load_key(const char *path, struct auth_key *k)
{
	char err[256];

	if (auth_key_load(path, k, err, sizeof(err)) < 0) {
		say("error key %s: %s", path, err);
		return -1;
	}
	return 0;
}

static uint64_t
random_u64(void)
{
	uint64_t v = 0;

	while (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		;
	return v;
}

static uint64_t
msg_timestamp(void)
{
	return (uint64_t)((int64_t)clock_real_us() - (int64_t)(o.stale_s * 1e6));
}

/* A TCP socket bound to a:0 (non-blocking); its endpoint into *local. */
static int
bound_socket(const struct addr *a, struct endpoint *local)
{
	struct sockaddr_storage ss;
	struct endpoint ep = { .addr = *a, .port = 0 };
	socklen_t sl = ep_to_sockaddr(&ep, &ss);
	int fd;

	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&ss, sl) < 0 || sock_local_ep(fd, local) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Connects a non-blocking socket to dst and waits. Returns 0 or an errno. */
static int
connect_wait(int fd, const struct endpoint *dst)
{
	struct sockaddr_storage ss;
	socklen_t sl = ep_to_sockaddr(dst, &ss);

	if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
		return 0;
	if (errno != EINPROGRESS)
		return errno;
	if (wait_fd(fd, POLLOUT, deadline ? deadline : clock_mono_us() + DEFAULT_WAIT_US) == 0)
		timed_out();
	return sock_connect_result(fd);
}

static void
sleep_s(double s)
{
	uint64_t until = clock_mono_us() + (uint64_t)(s * 1e6);

	if (deadline && until > deadline) {
		poll(NULL, 0, ms_until(deadline));
		timed_out();
	}
	while (clock_mono_us() < until)
		poll(NULL, 0, ms_until(until));
}

/* The control connection's bytes read and not yet taken. */
struct rbuf {
	uint8_t b[4096];
	size_t len;
};

/* The control connection to o.relay in *ctl. Returns 0, or an exit code. */
static int
control_connect(int *ctl)
{
	int e;

	if ((*ctl = sock_connect_nb(&o.relay, 0)) < 0) {
		say("error control connect: %s", strerror(errno));
		return EXIT_OTHER;
	}
	if (wait_fd(*ctl, POLLOUT, deadline ? deadline : clock_mono_us() + DEFAULT_WAIT_US) == 0)
		timed_out();
	if ((e = sock_connect_result(*ctl)) != 0) {
		say("error control connect: %s", strerror(e));
		return EXIT_OTHER;
	}
	return 0;
}

static int hello(int ctl, struct rbuf *rb);

/* ---- probes ---- */

static int
run_probe(void)
{
	struct endpoint dst = o.relay;
	struct sockaddr_storage ss;
	socklen_t sl;
	uint64_t sent_at[MAX_COUNT];
	bool seen[MAX_COUNT] = { false };
	uint8_t buf[PROTO_MAX_LEN];
	int fd, n, got = 0;
	uint64_t until;
	int ctl = -1, e;

	/* Identity mode: probes are MACed with the pair key, which the
	 * relay knows of a client once its control connection said hello. */
	if (have_id) {
		struct rbuf rb = { .len = 0 };

		if ((e = control_connect(&ctl)) != 0 || (e = hello(ctl, &rb)) != 0)
			return e;
	}
	dst.port = o.probe_port;
	sl = ep_to_sockaddr(&dst, &ss);
	fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl) < 0) {
		say("error probe socket: %s", strerror(errno));
		return EXIT_OTHER;
	}
	for (int i = 0; i < o.count; i++) {
		struct proto_msg m = { .type = PROTO_PROBE_REQUEST };

		m.ts_us = msg_timestamp();
		m.nonce = random_u64();
		m.id = (uint32_t)i + 1;
		m.u.probe_req.target = o.server;
		if (have_id)
			memcpy(m.sender, id.cert.pk, PROTO_PK_LEN);
		n = proto_encode(&m, &sign_key, buf, sizeof(buf));
		if (n < 0) {
			say("error encode");
			return EXIT_OTHER;
		}
		sent_at[i] = clock_mono_us();
		if (send(fd, buf, (size_t)n, 0) < 0)
			say("error probe send: %s", strerror(errno));
	}
	until = deadline ? deadline : clock_mono_us() + 3000000;
	while (got < o.count) {
		struct proto_msg m;
		enum proto_err why;
		size_t used;
		ssize_t r;

		if (wait_fd(fd, POLLIN, until) == 0)
			break;
		r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			say("error probe recv: %s", strerror(errno));
			break;
		}
		if ((have_id ? proto_decode_with(buf, (size_t)r, proto_key_pair, &pair, &m, &used,
		    &why) : proto_decode(buf, (size_t)r, &key, &m, &used, &why)) != PROTO_OK) {
			say("bad reply (%s)", proto_err_str(why));
			continue;
		}
		if (m.type != PROTO_PROBE_REPLY || m.id < 1 || m.id > (uint32_t)o.count ||
		    seen[m.id - 1]) {
			say("unexpected %s id=%u", proto_type_str(m.type), m.id);
			continue;
		}
		seen[m.id - 1] = true;
		got++;
		say("probe status=%s rtt_us=%u hold_us=%u flags=%u elapsed_us=%llu"
		    " status_code=%u id=%u", proto_probe_status_str(m.u.probe_reply.status),
		    m.u.probe_reply.rtt_us, m.u.probe_reply.hold_us, m.u.probe_reply.flags,
		    (unsigned long long)(clock_mono_us() - sent_at[m.id - 1]),
		    m.u.probe_reply.status, m.id);
	}
	say("probes sent=%d replies=%d", o.count, got);
	close(fd);
	if (ctl >= 0)
		close(ctl);
	return got > 0 ? EXIT_CLEAN : EXIT_OTHER;
}

/* ---- the data connection, netcat style ---- */

static int
pump(int fd)
{
	static uint8_t out[IOBUF], in[IOBUF];
	size_t off = 0, len = 0;
	bool stdin_done = false, sock_eof = false, shut = false;
	unsigned long long sent = 0, received = 0;
	uint64_t paused_until = 0;

	if (o.pause_read_s > 0)
		paused_until = clock_mono_us() + (uint64_t)(o.pause_read_s * 1e6);

	for (;;) {
		struct pollfd p[2];
		bool paused;
		int r;

		if (o.rst_after >= 0 && sent + received >= (unsigned long long)o.rst_after) {
			sock_close_rst(fd);
			say("rst sent=%llu received=%llu", sent, received);
			return EXIT_CLEAN;
		}
		if (stdin_done && len == 0 && !shut) {
			shutdown(fd, SHUT_WR);
			shut = true;
		}
		if (sock_eof && shut) {
			say("closed sent=%llu received=%llu", sent, received);
			return EXIT_CLEAN;
		}
		paused = paused_until && !resume_read && clock_mono_us() < paused_until;
		if (!paused)
			paused_until = 0;

		p[0].fd = (!stdin_done && len == 0) ? 0 : -1;
		p[0].events = POLLIN;
		p[1].fd = fd;
		p[1].events = (short)((len > 0 ? POLLOUT : 0) | (!sock_eof && !paused ? POLLIN : 0));
		if (p[1].events == 0)
			p[1].fd = -1;	/* nothing wanted: do not spin on POLLHUP */
		p[0].revents = p[1].revents = 0;

		int ms = ms_until(earlier(deadline, paused_until));
		struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

		r = ppoll(p, 2, ms < 0 ? NULL : &ts, &pump_mask);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			say("error poll: %s", strerror(errno));
			return EXIT_OTHER;
		}
		if (deadline && clock_mono_us() >= deadline)
			timed_out();

		if (p[0].revents) {
			ssize_t n = read(0, out, sizeof(out));

			if (n < 0 && errno != EINTR && errno != EAGAIN) {
				say("error stdin: %s", strerror(errno));
				return EXIT_OTHER;
			}
			if (n == 0)
				stdin_done = true;
			if (n > 0) {
				off = 0;
				len = (size_t)n;
			}
		}
		if (p[1].revents & (POLLOUT | POLLERR | POLLHUP) && len > 0) {
			ssize_t n = send(fd, out + off, len, MSG_NOSIGNAL);

			if (n < 0 && errno != EINTR && errno != EAGAIN) {
				if (errno == ECONNRESET || errno == EPIPE) {
					say("reset sent=%llu received=%llu (send: %s)", sent,
					    received, strerror(errno));
					return EXIT_RESET;
				}
				say("error send: %s", strerror(errno));
				return EXIT_OTHER;
			}
			if (n > 0) {
				off += (size_t)n;
				len -= (size_t)n;
				sent += (unsigned long long)n;
			}
		}
		if (p[1].revents & (POLLIN | POLLERR | POLLHUP) && !sock_eof && !paused) {
			ssize_t n = recv(fd, in, sizeof(in), 0);

			if (n < 0 && errno != EINTR && errno != EAGAIN) {
				if (errno == ECONNRESET || errno == EPIPE) {
					say("reset sent=%llu received=%llu", sent, received);
					return EXIT_RESET;
				}
				say("error recv: %s", strerror(errno));
				return EXIT_OTHER;
			}
			if (n == 0)
				sock_eof = true;
			if (n > 0) {
				received += (unsigned long long)n;
				if (write_all(1, in, (size_t)n) < 0) {
					say("error stdout: %s", strerror(errno));
					return EXIT_OTHER;
				}
			}
		}
	}
}

/* ---- control ---- */

/* Identity mode before the relay's HELLO: no sender is known (a HELLO needs
 * no key). */
static const struct auth_key *
no_key(void *arg, const struct proto_hdr *h)
{
	(void)arg;
	(void)h;
	return NULL;
}

/* Reads the next message from the control connection. Returns 1 with *m, 0
 * if the relay closed the connection, -1 on a bad message or socket error. */
static int
ctl_next(int fd, struct rbuf *rb, struct proto_msg *m)
{
	for (;;) {
		enum proto_err why = PERR_NONE;
		size_t used = 0;
		ssize_t n;
		enum proto_result r = !have_id ?
		    proto_decode(rb->b, rb->len, &key, m, &used, &why) :
		    proto_decode_with(rb->b, rb->len, have_pair ? proto_key_pair : no_key,
			&pair, m, &used, &why);

		switch (r) {
		case PROTO_OK:
			memmove(rb->b, rb->b + used, rb->len - used);
			rb->len -= used;
			return 1;
		case PROTO_BAD:
			say("error bad-reply (%s)", proto_err_str(why));
			return -1;
		case PROTO_NEED_MORE:
			break;
		}
		if (wait_fd(fd, POLLIN, deadline ? deadline : clock_mono_us() + DEFAULT_WAIT_US) == 0)
			timed_out();
		n = recv(fd, rb->b + rb->len, sizeof(rb->b) - rb->len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			if (errno == ECONNRESET)
				return 0;
			say("error control recv: %s", strerror(errno));
			return -1;
		}
		if (n == 0)
			return 0;
		rb->len += (size_t)n;
	}
}

/* Identity mode: our HELLO, then the relay's (a relay certificate of our
 * CA), whose key gives the pair key every later message is MACed with.
 * Returns 0, or an exit code. */
static int
hello(int ctl, struct rbuf *rb)
{
	struct proto_msg m = { .type = PROTO_HELLO };
	uint8_t buf[PROTO_MAX_LEN];
	char why[256];
	int n, e, r;

	m.ts_us = msg_timestamp();
	m.nonce = random_u64();
	if ((n = proto_encode_hello(&m, &id, buf, sizeof(buf))) < 0) {
		say("error encode hello");
		return EXIT_OTHER;
	}
	if ((e = send_all(ctl, buf, (size_t)n)) != 0) {
		say("error control send: %s", strerror(e));
		return EXIT_ERROR;
	}
	if ((r = ctl_next(ctl, rb, &m)) <= 0) {
		say("error %s", r == 0 ? "closed" : "hello");
		return r == 0 ? EXIT_ERROR : EXIT_OTHER;
	}
	if (m.type != PROTO_HELLO) {
		say("error %s before the relay's hello", proto_type_str(m.type));
		return EXIT_ERROR;
	}
	if (ident_cert_check(&m.u.hello.cert, id.ca_pk, IDENT_MASK(IDENT_ROLE_RELAY),
	    (uint64_t)time(NULL), NULL, why, sizeof(why)) == -1 ||
	    ident_pair_key(&id, m.u.hello.cert.pk, &pair.key) == -1) {
		say("error relay refused: %s", why);
		return EXIT_ERROR;
	}
	memcpy(pair.pk, m.u.hello.cert.pk, PROTO_PK_LEN);
	key = sign_key = pair.key;
	have_pair = true;
	say("hello ok relay=%s", m.u.hello.cert.name);
	return 0;
}

/* A KEEPALIVE with o.ka_flags, and its answer: proves the connection open
 * and tells whether the relay claims CHAINS. Returns 0, or an exit code. */
static int
keepalive(int ctl, struct rbuf *rb)
{
	struct proto_msg m = { .type = PROTO_KEEPALIVE, .flags = (uint16_t)o.ka_flags };
	uint8_t buf[PROTO_MAX_LEN];
	int n, e, r;

	m.ts_us = msg_timestamp();
	m.nonce = random_u64();
	m.id = 0x4b41;
	if (have_id)
		memcpy(m.sender, id.cert.pk, PROTO_PK_LEN);
	if ((n = proto_encode(&m, &sign_key, buf, sizeof(buf))) < 0) {
		say("error encode keepalive");
		return EXIT_OTHER;
	}
	if ((e = send_all(ctl, buf, (size_t)n)) != 0) {
		say("error control send: %s", strerror(e));
		return EXIT_ERROR;
	}
	if ((r = ctl_next(ctl, rb, &m)) <= 0) {
		say("error %s", r == 0 ? "closed" : "keepalive");
		return r == 0 ? EXIT_ERROR : EXIT_OTHER;
	}
	if ((m.type != PROTO_KEEPALIVE_ACK && m.type != PROTO_OBSERVED) || m.id != 0x4b41) {
		say("error unexpected %s id=%u to the keepalive", proto_type_str(m.type), m.id);
		return EXIT_ERROR;
	}
	say("keepalive answer=%s chains=%s", proto_type_str(m.type),
	    m.flags & PROTO_FLAG_CHAINS ? "yes" : "no");
	return 0;
}

/* --hop CONTROL=DATA */
static void
hop_arg(const char *s)
{
	char b[2 * EP_STRLEN];
	char *eq;

	if (o.nhops == PROTO_CHAIN_MAX_HOPS || strlen(s) >= sizeof(b))
		usage();
	strcpy(b, s);
	if ((eq = strchr(b, '=')) == NULL)
		usage();
	*eq = '\0';
	if (ep_parse(b, 0, &o.hop_ctl[o.nhops]) < 0 || ep_parse(eq + 1, 0, &o.hop_data[o.nhops]) < 0)
		usage();
	o.nhops++;
}

static int
run_establish(void)
{
	static int dfd[MAX_COUNT];
	static struct endpoint cep[MAX_COUNT];
	static uint8_t answered[MAX_COUNT];	/* 0 none, else message type */
	static uint64_t sent_us[MAX_COUNT];	/* when each request went */
	struct rbuf rb = { .len = 0 };
	uint8_t first[PROTO_MAX_LEN];
	int first_len = 0;
	struct endpoint local, data_ep;
	int ctl, expect, got = 0, e;
	bool any_error = false, any_fail = false, closed = false;

	if ((e = control_connect(&ctl)) != 0)
		return e;
	if (sock_local_ep(ctl, &local) < 0) {
		say("error getsockname: %s", strerror(errno));
		return EXIT_OTHER;
	}
	if (o.have_bind)
		local.addr = o.bind;
	if (have_id && (e = hello(ctl, &rb)) != 0)
		return e;

	for (int i = 0; i < o.count; i++) {
		struct proto_msg m = { .type = o.nhops ? PROTO_PIPE_ESTABLISH_CHAIN :
		    PROTO_PIPE_ESTABLISH };
		uint8_t buf[PROTO_MAX_LEN];
		char s[EP_STRLEN];
		int n;

		dfd[i] = bound_socket(&local.addr, &cep[i]);
		if (dfd[i] < 0) {
			say("error bind %s: %s", addr_fmt(&local.addr, s), strerror(errno));
			return EXIT_OTHER;
		}
		if (o.data_first) {
			/* As a PIPE_ESTABLISH lost and retransmitted would:
			 * the relay sees the data connection first. */
			struct endpoint dep = o.relay;

			dep.port = o.data_port;
			if ((e = connect_wait(dfd[i], &dep)) != 0) {
				say(e == ECONNRESET ? "reset (connect)" : "error data connect: %s",
				    strerror(e));
				return e == ECONNRESET ? EXIT_RESET : EXIT_OTHER;
			}
			say("data connected first");
			sleep_s(o.data_first_s);
		}
		m.ts_us = msg_timestamp();
		m.nonce = random_u64();
		m.id = (uint32_t)i + 1;
		if (o.nhops) {
			m.u.chain.client = cep[i];
			m.u.chain.server = o.server;
			m.u.chain.hops = (uint8_t)o.nhops;
			for (unsigned h = 0; h < o.nhops; h++) {
				m.u.chain.hop_ctl[h] = o.hop_ctl[h];
				m.u.chain.hop_data[h] = o.hop_data[h];
			}
		} else {
			m.u.establish.client = cep[i];
			m.u.establish.server = o.server;
		}
		if (have_id)
			memcpy(m.sender, id.cert.pk, PROTO_PK_LEN);
		n = proto_encode(&m, &sign_key, buf, sizeof(buf));
		if (n < 0) {
			say("error encode");
			return EXIT_OTHER;
		}
		if (i == 0) {
			memcpy(first, buf, (size_t)n);
			first_len = n;
		}
		sent_us[i] = clock_mono_us();
		if ((e = send_all(ctl, buf, (size_t)n)) != 0) {
			say("error control send: %s", strerror(e));
			return EXIT_ERROR;
		}
	}
	expect = o.count;
	if (o.replay) {
		if ((e = send_all(ctl, first, (size_t)first_len)) != 0) {
			say("error control send: %s", strerror(e));
			return EXIT_ERROR;
		}
		expect++;
	}

	while (got < expect) {
		struct proto_msg m;
		int r = ctl_next(ctl, &rb, &m);

		if (r < 0)
			return EXIT_OTHER;
		if (r == 0) {
			say("error closed");
			closed = true;
			break;
		}
		if (m.type == PROTO_ERROR && m.id == 0) {
			/* MALFORMED, AUTH, VERSION: not tied to a request, the relay closes. */
			say("error %s code=%u id=0", proto_error_code_str(m.u.error.code),
			    m.u.error.code);
			any_error = true;
			break;
		}
		if (m.id < 1 || m.id > (uint32_t)o.count ||
		    (answered[m.id - 1] && !o.replay)) {
			say("bad id %u (%s)", m.id, proto_type_str(m.type));
			return EXIT_OTHER;
		}
		switch (m.type) {
		case PROTO_PIPE_OK:
			say("pipe ok connect_us=%u pending_ms=%u id=%u", m.u.ok.connect_us,
			    m.u.ok.pending_ms, m.id);
			break;
		case PROTO_PIPE_FAIL:
			/* after_us: from the request to the answer, without
			 * this process's start (tests tell a refusal from a
			 * connect timeout by it) */
			say("pipe fail %s detail=%u reason=%u id=%u after_us=%llu",
			    proto_fail_str(m.u.fail.reason), m.u.fail.detail,
			    m.u.fail.reason, m.id,
			    (unsigned long long)(clock_mono_us() - sent_us[m.id - 1]));
			any_fail = true;
			break;
		case PROTO_ERROR:
			say("error %s code=%u id=%u", proto_error_code_str(m.u.error.code),
			    m.u.error.code, m.id);
			any_error = true;
			break;
		default:
			say("unexpected %s id=%u", proto_type_str(m.type), m.id);
			return EXIT_OTHER;
		}
		if (!answered[m.id - 1] || m.type != PROTO_PIPE_OK)
			answered[m.id - 1] = m.type;
		got++;
	}
	if (o.ka_flags >= 0 && !closed && !any_error && (e = keepalive(ctl, &rb)) != 0)
		return e;
	if (o.count == 0) {
		close(ctl);
		return EXIT_CLEAN;
	}
	if (o.replay || any_error || closed)
		return (any_error || closed) ? EXIT_ERROR : any_fail ? EXIT_PIPE_FAIL : EXIT_CLEAN;

	data_ep = o.relay;
	data_ep.port = o.data_port;

	if (o.no_connect) {
		sleep_s(o.hold_s);
		close(ctl);
		return any_fail ? EXIT_PIPE_FAIL : EXIT_CLEAN;
	}
	if (o.connect_delay_s > 0)
		sleep_s(o.connect_delay_s);

	if (o.count > 1) {
		/* Several pipes: connect each data socket, then close them all. */
		int nok = 0;

		for (int i = 0; i < o.count; i++) {
			if (answered[i] != PROTO_PIPE_OK)
				continue;
			if ((e = connect_wait(dfd[i], &data_ep)) != 0) {
				say("error data connect id=%d: %s", i + 1, strerror(e));
				return EXIT_OTHER;
			}
			nok++;
		}
		for (int i = 0; i < o.count; i++)
			close(dfd[i]);
		say("pipes ok=%d of %d", nok, o.count);
		close(ctl);
		return any_fail ? EXIT_PIPE_FAIL : EXIT_CLEAN;
	}
	if (any_fail)
		return EXIT_PIPE_FAIL;

	if (!o.data_first && (e = connect_wait(dfd[0], &data_ep)) != 0) {
		if (e == ECONNRESET) {
			say("reset (connect)");
			return EXIT_RESET;
		}
		say("error data connect: %s", strerror(e));
		return EXIT_OTHER;
	}
	e = pump(dfd[0]);
	close(ctl);
	return e;
}

static int
run_no_pipe(void)
{
	struct endpoint data_ep = o.relay, local;
	struct addr any = { .family = o.relay.addr.family };
	int fd, e;

	data_ep.port = o.data_port;
	fd = bound_socket(o.have_bind ? &o.bind : &any, &local);
	if (fd < 0) {
		say("error bind: %s", strerror(errno));
		return EXIT_OTHER;
	}
	if ((e = connect_wait(fd, &data_ep)) != 0) {
		if (e == ECONNRESET) {
			say("reset (connect)");
			return EXIT_RESET;
		}
		say("error data connect: %s", strerror(e));
		return EXIT_OTHER;
	}
	return pump(fd);
}

static double
num_arg(const char *s, double min)
{
	char *end;
	double v = strtod(s, &end);

	if (*s == '\0' || *end != '\0' || v < min)
		usage();
	return v;
}

static uint16_t
port_arg(const char *s)
{
	double v = num_arg(s, 1);

	if (v > 65535 || v != (double)(uint16_t)v)
		usage();
	return (uint16_t)v;
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "key", required_argument, NULL, 'k' },
		{ "relay", required_argument, NULL, 'r' },
		{ "data-port", required_argument, NULL, 'd' },
		{ "server", required_argument, NULL, 's' },
		{ "bind", required_argument, NULL, 'b' },
		{ "stale", required_argument, NULL, 'S' },
		{ "replay", no_argument, NULL, 'R' },
		{ "wrong-key", required_argument, NULL, 'W' },
		{ "no-pipe", no_argument, NULL, 'N' },
		{ "pause-read", required_argument, NULL, 'P' },
		{ "probe", no_argument, NULL, 'p' },
		{ "probe-port", required_argument, NULL, 'q' },
		{ "count", required_argument, NULL, 'n' },
		{ "timeout", required_argument, NULL, 't' },
		{ "rst-after", required_argument, NULL, 'X' },
		{ "connect-delay", required_argument, NULL, 'D' },
		{ "no-connect", required_argument, NULL, 'C' },
		{ "data-first", required_argument, NULL, 'F' },
		{ "id-key", required_argument, NULL, 'I' },
		{ "id-cert", required_argument, NULL, 'J' },
		{ "ca", required_argument, NULL, 'A' },
		{ "hop", required_argument, NULL, 'H' },
		{ "keepalive", required_argument, NULL, 'K' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	/* First: a SIGUSR1 early must not end the process. */
	struct sigaction sa = { .sa_handler = on_usr1 };
	sigset_t usr1;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, &pump_mask);
	sigdelset(&pump_mask, SIGUSR1);

	o.rst_after = -1;
	o.count = 1;
	o.ka_flags = -1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'k': o.key_file = optarg; break;
		case 'W': o.wrong_key_file = optarg; break;
		case 'r':
			if (ep_parse(optarg, 0, &o.relay) < 0)
				usage();
			o.have_relay = true;
			break;
		case 's':
			if (ep_parse(optarg, 0, &o.server) < 0)
				usage();
			o.have_server = true;
			break;
		case 'b':
			if (addr_parse(optarg, &o.bind) < 0)
				usage();
			o.have_bind = true;
			break;
		case 'd': o.data_port = port_arg(optarg); break;
		case 'q': o.probe_port = port_arg(optarg); break;
		case 'S': o.stale_s = strtod(optarg, NULL); break;
		case 'R': o.replay = true; break;
		case 'N': o.no_pipe = true; break;
		case 'p': o.probe = true; break;
		case 'P': o.pause_read_s = num_arg(optarg, 0); break;
		case 'n': o.count = (int)num_arg(optarg, 0); break;
		case 't': o.timeout_s = num_arg(optarg, 0); break;
		case 'X': o.rst_after = (long long)num_arg(optarg, 0); break;
		case 'D': o.connect_delay_s = num_arg(optarg, 0); break;
		case 'C': o.no_connect = true; o.hold_s = num_arg(optarg, 0); break;
		case 'F': o.data_first = true; o.data_first_s = num_arg(optarg, 0); break;
		case 'I': o.id_key = optarg; break;
		case 'J': o.id_cert = optarg; break;
		case 'A': o.ca = optarg; break;
		case 'H': hop_arg(optarg); break;
		case 'K': o.ka_flags = (int)num_arg(optarg, 0); break;
		default: usage();
		}
	}
	if (optind != argc || !o.have_relay || o.count > MAX_COUNT ||
	    (o.data_first && (o.count != 1 || o.no_connect || o.replay)) ||
	    (o.count == 0 && o.ka_flags < 0) || o.ka_flags > 0xffff)
		usage();
	have_id = o.id_key || o.id_cert || o.ca;
	if (have_id && (!o.id_key || !o.id_cert || !o.ca || o.key_file || o.wrong_key_file))
		usage();
	if (!o.no_pipe && ((!o.key_file && !have_id) || (!o.have_server && o.count > 0)))
		usage();
	if ((o.no_pipe || (!o.probe && !o.replay && !o.no_connect && o.count > 0)) &&
	    o.data_port == 0)
		usage();
	if (o.probe && o.probe_port == 0)
		o.probe_port = o.relay.port;

	signal(SIGPIPE, SIG_IGN);
	if (auth_init() < 0) {
		say("error auth_init");
		return EXIT_OTHER;
	}
	if (o.key_file && load_key(o.key_file, &key) < 0)
		return EXIT_OTHER;
	if (have_id) {
		char err[256];

		if (ident_load(o.id_key, o.id_cert, o.ca, IDENT_MASK(IDENT_ROLE_CLIENT) | IDENT_MASK(IDENT_ROLE_RELAY), &id,
		    err, sizeof(err)) == -1) {
			say("error identity: %s", err);
			return EXIT_OTHER;
		}
	}
	sign_key = key;
	if (o.wrong_key_file && load_key(o.wrong_key_file, &sign_key) < 0)
		return EXIT_OTHER;
	if (o.timeout_s > 0)
		deadline = clock_mono_us() + (uint64_t)(o.timeout_s * 1e6);

	if (o.probe)
		return run_probe();
	if (o.no_pipe)
		return run_no_pipe();
	return run_establish();
}
