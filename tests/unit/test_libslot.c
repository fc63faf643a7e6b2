/* libslot (src/lib/libslot.c), through its public header only: argument
 * checks against real descriptors, the fallback when slotd is out of reach
 * (a real TCP listener on loopback), and the wire protocol against a fake
 * slotd: a unix socket served by a thread that records the request and the
 * descriptor that came with it, and answers a scripted line. */
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/slot.h"

#define TIMEOUT_MS "300"	/* $SLOT_LIB_TIMEOUT_MS: the library's 2 s, shortened */

static char dir[64], fake_path[sizeof(((struct sockaddr_un *)0)->sun_path)], nowhere[160];

/* ---- helpers ---- */

/* A TCP listener on loopback, port chosen by the kernel; its address in sa.
 * Returns -1 where the family is missing (IPv6 off). */
static int
listener(int family, struct sockaddr_storage *sa, socklen_t *len)
{
	int l = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	memset(sa, 0, sizeof(*sa));
	if (l == -1)
		return -1;
	if (family == AF_INET) {
		struct sockaddr_in *sin = (struct sockaddr_in *)sa;

		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		*len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)sa;

		sin6->sin6_family = AF_INET6;
		sin6->sin6_addr = in6addr_loopback;
		*len = sizeof(*sin6);
	}
	if (bind(l, (struct sockaddr *)sa, *len) == -1 || listen(l, 8) == -1 ||
	    getsockname(l, (struct sockaddr *)sa, len) == -1) {
		close(l);
		return -1;
	}
	return l;
}

static int
tcp_socket(int family)
{
	int s = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(s >= 0);
	return s;
}

static unsigned int
port_of(const struct sockaddr_storage *sa)
{
	return ntohs(sa->ss_family == AF_INET ? ((const struct sockaddr_in *)sa)->sin_port :
	    ((const struct sockaddr_in6 *)sa)->sin6_port);
}

static unsigned int
local_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &sl), 0);
	return port_of(&ss);
}

static bool
is_connected(int fd)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	return getpeername(fd, (struct sockaddr *)&ss, &sl) == 0;
}

/* Accepts the connection fd made to listener l: it must be there. */
static void
assert_accepted(int l, int fd)
{
	struct sockaddr_storage peer;
	socklen_t pl = sizeof(peer);
	struct pollfd p = { .fd = l, .events = POLLIN };
	int a;

	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_true((a = accept(l, (struct sockaddr *)&peer, &pl)) >= 0);
	assert_int_equal(port_of(&peer), local_port(fd));
	close(a);
}

static void
assert_failed(int rc, int e, const char *text)
{
	int got = errno;

	assert_int_equal(rc, -1);
	if (got != e)
		fail_msg("errno %d (%s), expected %d (%s); slot_strerror: \"%s\"", got,
		    strerror(got), e, strerror(e), slot_strerror());
	assert_true(slot_strerror()[0] != '\0');
	if (text != NULL && strstr(slot_strerror(), text) == NULL)
		fail_msg("slot_strerror \"%s\" lacks \"%s\"", slot_strerror(), text);
}

static struct slot_opts *
opts_at(const char *path)
{
	struct slot_opts *o = slot_opts_new();

	assert_non_null(o);
	assert_int_equal(slot_opts_set_socket(o, path), 0);
	return o;
}

/* ---- the fake slotd ---- */

enum fake_mode {
	FAKE_ANSWER,	/* send the answer, close */
	FAKE_CLOSE,	/* close without answering */
	FAKE_HANG,	/* answer nothing until the client gives up */
};

struct fake {
	int lfd;
	enum fake_mode mode;
	const char *answer;
	char got[600];		/* the request */
	int npassed;		/* descriptors that came with it */
	struct stat passed_st;	/* the first one's */
	unsigned int passed_port; /* its local port, when it arrived */
	pthread_t th;
};

static void *
fake_serve(void *arg)
{
	struct fake *f = arg;
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(4 * sizeof(int))];
	} cm;
	size_t got = 0;
	int c;

	if ((c = accept(f->lfd, NULL, NULL)) == -1)
		return NULL;
	/* The request: one line; the descriptor comes with its first byte. */
	while (got < sizeof(f->got) - 1 && memchr(f->got, '\n', got) == NULL) {
		struct iovec iov = { f->got + got, sizeof(f->got) - 1 - got };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
		    .msg_controllen = sizeof(cm.b) };
		ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);

		if (n <= 0)
			break;
		for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
			if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				struct sockaddr_storage ss;
				socklen_t sl = sizeof(ss);

				memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof(int));
				if (f->npassed++ == 0) {
					(void)fstat(fd, &f->passed_st);
					if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
						f->passed_port = port_of(&ss);
				}
				close(fd);
			}
		}
		got += (size_t)n;
		f->got[got] = '\0';
	}
	switch (f->mode) {
	case FAKE_ANSWER:
		(void)send(c, f->answer, strlen(f->answer), MSG_NOSIGNAL);
		break;
	case FAKE_CLOSE:
		break;
	case FAKE_HANG: {
		/* Until the library closes its end (its time-out). */
		struct pollfd p = { .fd = c, .events = POLLIN };
		char b[64];

		while (poll(&p, 1, 5000) == 1 && read(c, b, sizeof(b)) > 0)
			;
		break;
	}
	}
	close(c);
	return NULL;
}

/* Listens at fake_path and serves one connection in a thread. */
static void
fake_start(struct fake *f, enum fake_mode mode, const char *answer)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };

	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->answer = answer;
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", fake_path);
	(void)unlink(fake_path);
	assert_true((f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(pthread_create(&f->th, NULL, fake_serve, f), 0);
}

static void
fake_join(struct fake *f)
{
	/* Unblocks an accept that no call came to. */
	shutdown(f->lfd, SHUT_RDWR);
	assert_int_equal(pthread_join(f->th, NULL), 0);
	close(f->lfd);
	unlink(fake_path);
}

/* One slot_connect to a fresh loopback listener, against the fake slotd
 * answering answer. Returns slot_connect's result, errno kept. */
static int
connect_against(const char *answer, struct fake *f, int *fdp, int *lp)
{
	struct sockaddr_storage sa;
	socklen_t len;
	struct slot_opts *o = opts_at(fake_path);
	int rc, e;

	assert_true((*lp = listener(AF_INET, &sa, &len)) >= 0);
	*fdp = tcp_socket(AF_INET);
	fake_start(f, FAKE_ANSWER, answer);
	rc = slot_connect(*fdp, (struct sockaddr *)&sa, len, o);
	e = errno;
	fake_join(f);
	slot_opts_free(o);
	errno = e;
	return rc;
}

/* ---- options ---- */

static void
test_version_and_no_error(void **state)
{
	(void)state;
	assert_string_equal(slot_version(), SLOT_LIB_VERSION);
	assert_string_equal(slot_strerror(), "");
}

static void
test_endpoints(void **state)
{
	static const char *bad[] = {
		"", "1.2.3.4", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4:99999",
		"1.2.3.4:8x", "1.2.3.4:-1", "1.2.3.4:+80", "1.2.3.4: 80", "host:80",
		"999.1.1.1:80", "1.2.3:80", " 1.2.3.4:80", "2001:db8::1:80", "[2001:db8::1]80",
		"[2001:db8::1]", "[2001:db8::1]:", "[1.2.3.4]:80", "[fe80::1%eth0]:80",
		"[]:80", ":80", "[2001:db8::1:80", "1.2.3.4:800000",
	};
	struct slot_opts *o = slot_opts_new();
	(void)state;

	assert_non_null(o);
	assert_int_equal(slot_opts_set_relay(o, "192.0.2.1:7000"), 0);
	assert_string_equal(slot_strerror(), "");
	assert_int_equal(slot_opts_set_relay(o, "[2001:db8::1]:443"), 0);
	assert_int_equal(slot_opts_set_relay(o, "1.2.3.4:65535"), 0);
	assert_int_equal(slot_opts_set_relay(o, NULL), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		errno = 0;
		if (slot_opts_set_relay(o, bad[i]) != -1 || errno != EINVAL)
			fail_msg("relay \"%s\" was taken", bad[i]);
		assert_true(slot_strerror()[0] != '\0');
		errno = 0;
		if (slot_opts_avoid_relay(o, bad[i]) != -1 || errno != EINVAL)
			fail_msg("avoid \"%s\" was taken", bad[i]);
	}
	/* A later success clears the text. */
	assert_int_equal(slot_opts_set_relay(o, "10.0.0.1:1"), 0);
	assert_string_equal(slot_strerror(), "");

	/* Chains: up to SLOT_CHAIN_MAX, each relay once, each checked. */
	assert_int_equal(slot_opts_set_relay(o, "10.0.0.1:1,[2001:db8::2]:2"), 0);
	assert_int_equal(slot_opts_set_relay(o, "10.0.0.1:1,10.0.0.2:1,10.0.0.3:1"), 0);
	assert_failed(slot_opts_set_relay(o, "10.0.0.1:1,10.0.0.2:1,10.0.0.3:1,10.0.0.4:1"),
	    E2BIG, "at most 3");
	assert_failed(slot_opts_set_relay(o, "10.0.0.1:1,10.0.0.1:1"), EINVAL, "twice");
	assert_failed(slot_opts_set_relay(o, "10.0.0.1:1,"), EINVAL, NULL);
	assert_failed(slot_opts_set_relay(o, "10.0.0.1:1,nowhere"), EINVAL, NULL);

	assert_failed(slot_opts_set_relay(NULL, "1.2.3.4:80"), EINVAL, NULL);
	assert_failed(slot_opts_avoid_relay(NULL, "1.2.3.4:80"), EINVAL, NULL);
	assert_failed(slot_opts_set_deadline(NULL, 10), EINVAL, NULL);
	assert_failed(slot_opts_set_fallback(NULL, 1), EINVAL, NULL);
	assert_failed(slot_opts_set_socket(NULL, "/x"), EINVAL, NULL);
	slot_opts_free(o);
	slot_opts_free(NULL);
}

static void
test_avoid_max(void **state)
{
	struct slot_opts *o = slot_opts_new();
	char ep[32];
	(void)state;

	for (int i = 1; i <= SLOT_AVOID_MAX; i++) {
		snprintf(ep, sizeof(ep), "192.0.2.%d:7000", i);
		assert_int_equal(slot_opts_avoid_relay(o, ep), 0);
	}
	/* The same relay again is no new one. */
	assert_int_equal(slot_opts_avoid_relay(o, "192.0.2.1:7000"), 0);
	assert_failed(slot_opts_avoid_relay(o, "192.0.2.99:7000"), E2BIG, "8");
	assert_int_equal(slot_opts_avoid_relay(o, NULL), 0);
	assert_int_equal(slot_opts_avoid_relay(o, "192.0.2.99:7000"), 0);
	slot_opts_free(o);
}

static void
test_deadline_and_socket(void **state)
{
	struct slot_opts *o = slot_opts_new();
	char longpath[200];
	(void)state;

	assert_int_equal(slot_opts_set_deadline(o, 0), 0);
	assert_int_equal(slot_opts_set_deadline(o, 1), 0);
	assert_int_equal(slot_opts_set_deadline(o, SLOT_DEADLINE_MAX), 0);
	assert_failed(slot_opts_set_deadline(o, SLOT_DEADLINE_MAX + 1), EINVAL, "60000");
	assert_failed(slot_opts_set_deadline(o, UINT_MAX), EINVAL, NULL);
	assert_int_equal(slot_opts_set_fallback(o, 0), 0);
	assert_int_equal(slot_opts_set_fallback(o, 7), 0);

	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	assert_failed(slot_opts_set_socket(o, longpath), ENAMETOOLONG, NULL);
	assert_failed(slot_opts_set_socket(o, ""), EINVAL, NULL);
	assert_int_equal(slot_opts_set_socket(o, "/tmp/x.sock"), 0);
	assert_int_equal(slot_opts_set_socket(o, NULL), 0);
	slot_opts_free(o);
}

/* ---- slot_connect's checks, before any word to slotd ---- */

static void
test_connect_bad_arguments(void **state)
{
	struct sockaddr_storage sa;
	struct sockaddr_in sin;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct slot_opts *o = opts_at(nowhere);
	socklen_t len;
	int l, fd, p[2], u, c;
	(void)state;

	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	memcpy(&sin, &sa, sizeof(sin));
	fd = tcp_socket(AF_INET);

	assert_failed(slot_connect(fd, NULL, len, o), EINVAL, "NULL");
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, 1, o), EINVAL, "short");
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, sizeof(sin) - 1, o), EINVAL,
	    "AF_INET");
	assert_failed(slot_connect(fd, (struct sockaddr *)&sun, sizeof(sun), o), EAFNOSUPPORT,
	    NULL);
	sin.sin_port = 0;
	assert_failed(slot_connect(fd, (struct sockaddr *)&sin, sizeof(sin), o), EINVAL,
	    "port");

	/* Descriptors that are no unconnected TCP socket. */
	assert_failed(slot_connect(-1, (struct sockaddr *)&sa, len, o), EBADF, NULL);
	c = tcp_socket(AF_INET);
	close(c);
	assert_failed(slot_connect(c, (struct sockaddr *)&sa, len, o), EBADF, NULL);
	assert_int_equal(pipe(p), 0);
	assert_failed(slot_connect(p[0], (struct sockaddr *)&sa, len, o), ENOTSOCK,
	    "not a socket");
	close(p[0]);
	close(p[1]);
	assert_true((u = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
	assert_failed(slot_connect(u, (struct sockaddr *)&sa, len, o), EPROTOTYPE, NULL);
	close(u);
	assert_true((u = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0);
	assert_failed(slot_connect(u, (struct sockaddr *)&sa, len, o), EAFNOSUPPORT, NULL);
	close(u);
	if ((u = socket(AF_INET6, SOCK_STREAM, 0)) >= 0) {
		assert_failed(slot_connect(u, (struct sockaddr *)&sa, len, o), EAFNOSUPPORT,
		    "AF_INET6");
		close(u);
	}
	/* Connected already, and listening. */
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), EISCONN, NULL);
	assert_failed(slot_connect(l, (struct sockaddr *)&sa, len, o), EISCONN, "listening");
	close(fd);
	close(l);
	slot_opts_free(o);
}

/* More than slotd's 511 bytes: eight long IPv6 relays avoided and a forced
 * one, to a long IPv6 server. */
static void
test_connect_request_too_long(void **state)
{
	struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(65535) };
	struct slot_opts *o;
	char ep[64];
	int fd;
	(void)state;

	if ((fd = socket(AF_INET6, SOCK_STREAM, 0)) == -1)
		skip();
	o = opts_at(nowhere);
	memset(&sin6.sin6_addr, 0xfe, sizeof(sin6.sin6_addr));
	assert_int_equal(slot_opts_set_relay(o, "[fefe:fefe:fefe:fefe:fefe:fefe:fefe:fefe]:65535"),
	    0);
	for (int i = 0; i < SLOT_AVOID_MAX; i++) {
		snprintf(ep, sizeof(ep), "[fefe:fefe:fefe:fefe:fefe:fefe:fefe:fe%02x]:65535", i);
		assert_int_equal(slot_opts_avoid_relay(o, ep), 0);
	}
	assert_int_equal(slot_opts_set_deadline(o, 60000), 0);
	assert_failed(slot_connect(fd, (struct sockaddr *)&sin6, sizeof(sin6), o), E2BIG, "511");
	assert_int_equal(local_port(fd), 0);	/* nothing done to it */
	close(fd);
	slot_opts_free(o);
}

/* ---- slotd out of reach ---- */

static void
test_unreachable_falls_back_to_direct(void **state)
{
	struct sockaddr_storage sa;
	struct slot_decision d;
	socklen_t len;
	int l, fd;
	(void)state;

	/* The default options, the path from the environment. */
	assert_int_equal(setenv("SLOT_LIB_SOCKET", nowhere, 1), 0);
	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	fd = tcp_socket(AF_INET);
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, NULL), 0);
	assert_accepted(l, fd);

	memset(&d, 0xff, sizeof(d));
	assert_int_equal(slot_decision(fd, &d, NULL), 0);
	assert_int_equal(d.state, SLOT_STATE_FALLBACK);
	assert_string_equal(d.relay, "");
	assert_int_equal(d.cached, 0);
	assert_non_null(strstr(d.why, "slotd not reachable at "));
	assert_non_null(strstr(d.why, nowhere));
	assert_int_equal(unsetenv("SLOT_LIB_SOCKET"), 0);
	close(fd);
	close(l);
}

static void
test_unreachable_without_fallback_fails(void **state)
{
	struct sockaddr_storage sa;
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct slot_opts *o = opts_at(nowhere);
	socklen_t len;
	int l, fd, dead;
	(void)state;

	assert_int_equal(slot_opts_set_fallback(o, 0), 0);
	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	fd = tcp_socket(AF_INET);
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), ENOENT, nowhere);
	assert_non_null(strstr(slot_strerror(), "slotd is not reachable at "));
	assert_false(is_connected(fd));
	/* slot_attach_self has no fallback. */
	assert_failed(slot_attach_self(o), ENOENT, nowhere);

	/* A socket file nobody listens on. */
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", fake_path);
	assert_true((dead = socket(AF_UNIX, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(bind(dead, (struct sockaddr *)&sun, sizeof(sun)), 0);
	assert_int_equal(slot_opts_set_socket(o, fake_path), 0);
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), ECONNREFUSED, fake_path);
	close(dead);
	unlink(fake_path);
	assert_false(is_connected(fd));
	close(fd);
	close(l);
	slot_opts_free(o);
}

/* ---- against the fake slotd ---- */

static void
test_connect_request_and_descriptor(void **state)
{
	struct sockaddr_storage sa;
	struct slot_opts *o = opts_at(fake_path);
	struct fake f;
	struct stat st;
	socklen_t len;
	char want[512];
	int l, fd;
	(void)state;

	/* Normalised endpoints, avoid= in the order given, the deadline. */
	assert_int_equal(slot_opts_set_relay(o, "[2001:DB8:0:0::7]:07000"), 0);
	assert_int_equal(slot_opts_avoid_relay(o, "192.0.2.2:7000"), 0);
	assert_int_equal(slot_opts_avoid_relay(o, "[::ffff:192.0.2.1]:7000"), 0);
	assert_int_equal(slot_opts_avoid_relay(o, "192.0.2.2:7000"), 0);
	assert_int_equal(slot_opts_set_deadline(o, 1500), 0);
	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	fd = tcp_socket(AF_INET);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, o), 0);
	fake_join(&f);
	snprintf(want, sizeof(want), "connect 127.0.0.1:%u relay=[2001:db8::7]:7000 "
	    "avoid=192.0.2.2:7000 avoid=[::ffff:192.0.2.1]:7000 deadline_ms=1500\n",
	    port_of(&sa));
	assert_string_equal(f.got, want);

	/* The very socket, bound before it went: slotd knows it by its port. */
	assert_int_equal(f.npassed, 1);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISSOCK(f.passed_st.st_mode));
	assert_int_equal(f.passed_st.st_ino, st.st_ino);
	assert_int_equal(f.passed_st.st_dev, st.st_dev);
	assert_true(f.passed_port != 0);
	assert_int_equal(f.passed_port, local_port(fd));
	assert_accepted(l, fd);
	close(fd);

	/* A chain goes as one relay= list, normalised, first relay first. */
	assert_int_equal(slot_opts_set_relay(o, "192.0.2.7:7000,[2001:DB8::8]:7000"), 0);
	assert_int_equal(slot_opts_avoid_relay(o, NULL), 0);
	fd = tcp_socket(AF_INET);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, o), 0);
	fake_join(&f);
	snprintf(want, sizeof(want), "connect 127.0.0.1:%u relay=192.0.2.7:7000,"
	    "[2001:db8::8]:7000 deadline_ms=1500\n", port_of(&sa));
	assert_string_equal(f.got, want);
	assert_accepted(l, fd);
	close(fd);

	/* No options: the server alone; a bound socket keeps its port. */
	assert_int_equal(setenv("SLOT_LIB_SOCKET", fake_path, 1), 0);
	fd = tcp_socket(AF_INET);
	{
		struct sockaddr_in b = { .sin_family = AF_INET,
		    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		assert_int_equal(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0);
	}
	unsigned int bound = local_port(fd);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, NULL), 0);
	fake_join(&f);
	assert_int_equal(unsetenv("SLOT_LIB_SOCKET"), 0);
	snprintf(want, sizeof(want), "connect 127.0.0.1:%u\n", port_of(&sa));
	assert_string_equal(f.got, want);
	assert_int_equal(f.passed_port, bound);
	assert_accepted(l, fd);
	close(fd);
	close(l);
	slot_opts_free(o);
}

/* An IPv6 server is written in brackets; a v4-mapped one as IPv4, the
 * family of its SYN. */
static void
test_connect_ipv6(void **state)
{
	struct sockaddr_storage sa;
	struct sockaddr_in6 mapped;
	struct slot_opts *o;
	struct fake f;
	socklen_t len;
	char want[128];
	int l, l4, fd;
	(void)state;

	if ((l = listener(AF_INET6, &sa, &len)) == -1)
		skip();
	o = opts_at(fake_path);
	fd = tcp_socket(AF_INET6);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, o), 0);
	fake_join(&f);
	snprintf(want, sizeof(want), "connect [::1]:%u\n", port_of(&sa));
	assert_string_equal(f.got, want);
	assert_accepted(l, fd);
	close(fd);
	close(l);

	assert_true((l4 = listener(AF_INET, &sa, &len)) >= 0);
	memset(&mapped, 0, sizeof(mapped));
	mapped.sin6_family = AF_INET6;
	mapped.sin6_port = htons((uint16_t)port_of(&sa));
	assert_int_equal(inet_pton(AF_INET6, "::ffff:127.0.0.1", &mapped.sin6_addr), 1);
	fd = tcp_socket(AF_INET6);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&mapped, sizeof(mapped), o), 0);
	fake_join(&f);
	snprintf(want, sizeof(want), "connect 127.0.0.1:%u\n", port_of(&sa));
	assert_string_equal(f.got, want);
	assert_accepted(l4, fd);
	/* slot_decision writes both ends as IPv4 too. */
	{
		struct slot_decision d;

		fake_start(&f, FAKE_ANSWER, "decision state=direct relay=- path_us=1 "
		    "direct_us=1 cached=0 why=-\n");
		assert_int_equal(slot_decision(fd, &d, o), 0);
		fake_join(&f);
		snprintf(want, sizeof(want), "decision 127.0.0.1:%u 127.0.0.1:%u\n",
		    local_port(fd), port_of(&sa));
		assert_string_equal(f.got, want);
		assert_int_equal(d.state, SLOT_STATE_DIRECT);
	}
	close(fd);
	close(l4);
	slot_opts_free(o);
}

/* Once slotd said yes, slot_connect is connect(2): a non-blocking socket
 * gives EINPROGRESS, and then connects. */
static void
test_connect_nonblocking(void **state)
{
	struct sockaddr_storage sa;
	struct slot_opts *o = opts_at(fake_path);
	struct fake f;
	struct pollfd p;
	socklen_t len, el = sizeof(int);
	int l, fd, err = -1;
	(void)state;

	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	assert_true((fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) >= 0);
	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), EINPROGRESS,
	    "connect: ");
	fake_join(&f);
	assert_int_equal(f.npassed, 1);
	p = (struct pollfd){ .fd = fd, .events = POLLOUT };
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el), 0);
	assert_int_equal(err, 0);
	/* A second call while it connects, or once connected. */
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), EISCONN, NULL);
	assert_accepted(l, fd);
	close(fd);
	close(l);
	slot_opts_free(o);
}

static void
test_connect_refused_by_slotd(void **state)
{
	static const struct {
		const char *name;
		int e;
	} names[] = {
		{ "EINVAL", EINVAL }, { "ENOENT", ENOENT }, { "EPERM", EPERM },
		{ "EOPNOTSUPP", EOPNOTSUPP }, { "EAGAIN", EAGAIN }, { "ENOTSOCK", ENOTSOCK },
		{ "EISCONN", EISCONN }, { "EAFNOSUPPORT", EAFNOSUPPORT }, { "EPROTO", EPROTO },
		{ "EWHATEVER", EPROTO }, { "ENOMEM", EPROTO },
	};
	struct fake f;
	char answer[128];
	int fd, l;
	(void)state;

	assert_failed(connect_against("err EINVAL deadline_ms=99999: expected 1 to 60000\n", &f,
	    &fd, &l), EINVAL, NULL);
	assert_string_equal(slot_strerror(), "slotd: deadline_ms=99999: expected 1 to 60000");
	/* Refused: the application's socket is left as it was. */
	assert_false(is_connected(fd));
	close(fd);
	close(l);

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(answer, sizeof(answer), "err %s a sentence for a human\n", names[i].name);
		assert_failed(connect_against(answer, &f, &fd, &l), names[i].e,
		    "slotd: a sentence for a human");
		close(fd);
		close(l);
	}
}

static void
test_connect_bad_answers(void **state)
{
	static const char *garbage[] = {
		"hello\n", "OK\n", "okay\n", "\n", "err\n", "decision state=direct\n",
		"\x01\x02\xff\n",
	};
	char big[700];
	struct fake f;
	int fd, l;
	(void)state;

	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		assert_failed(connect_against(garbage[i], &f, &fd, &l), EPROTO, "slotd");
		assert_false(is_connected(fd));
		close(fd);
		close(l);
	}
	assert_failed(connect_against("hello\n", &f, &fd, &l), EPROTO, "unexpected answer");
	close(fd);
	close(l);

	/* No line within 512 bytes. */
	memset(big, 'o', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_failed(connect_against(big, &f, &fd, &l), EPROTO, "longer than");
	close(fd);
	close(l);

	/* The end of the stream ends a line too. */
	assert_int_equal(connect_against("ok", &f, &fd, &l), 0);
	assert_accepted(l, fd);
	close(fd);
	close(l);
}

static void
test_connect_peer_closes(void **state)
{
	struct sockaddr_storage sa;
	struct slot_opts *o = opts_at(fake_path);
	struct fake f;
	socklen_t len;
	int l, fd;
	(void)state;

	/* slotd took the request and closed: that is no "unreachable", and
	 * no fallback either. */
	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	fd = tcp_socket(AF_INET);
	fake_start(&f, FAKE_CLOSE, NULL);
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), EPROTO,
	    "without answering");
	fake_join(&f);
	assert_int_equal(f.npassed, 1);
	assert_false(is_connected(fd));
	close(fd);
	close(l);
	slot_opts_free(o);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
test_connect_slotd_never_answers(void **state)
{
	struct sockaddr_storage sa;
	struct slot_opts *o = opts_at(fake_path);
	struct fake f;
	socklen_t len;
	double t0;
	int l, fd;
	(void)state;

	assert_true((l = listener(AF_INET, &sa, &len)) >= 0);
	assert_int_equal(slot_opts_set_fallback(o, 0), 0);
	fd = tcp_socket(AF_INET);
	fake_start(&f, FAKE_HANG, NULL);
	t0 = now_s();
	assert_failed(slot_connect(fd, (struct sockaddr *)&sa, len, o), ETIMEDOUT, fake_path);
	assert_true(now_s() - t0 < 1.5);	/* SLOT_LIB_TIMEOUT_MS, not 2 s */
	fake_join(&f);
	assert_false(is_connected(fd));

	/* With the fallback, a hung slotd is one out of reach. */
	assert_int_equal(slot_opts_set_fallback(o, 1), 0);
	fake_start(&f, FAKE_HANG, NULL);
	assert_int_equal(slot_connect(fd, (struct sockaddr *)&sa, len, o), 0);
	fake_join(&f);
	assert_accepted(l, fd);
	close(fd);
	close(l);
	slot_opts_free(o);
}

/* ---- slot_decision ---- */

/* A connected pair over loopback: fd connects to l. */
static int
connected(int *lp, struct sockaddr_storage *sa)
{
	socklen_t len;
	int fd;

	assert_true((*lp = listener(AF_INET, sa, &len)) >= 0);
	fd = tcp_socket(AF_INET);
	assert_int_equal(connect(fd, (struct sockaddr *)sa, len), 0);
	return fd;
}

static int
decision_against(int fd, const char *answer, struct slot_decision *d, struct fake *f)
{
	struct slot_opts *o = opts_at(fake_path);
	int rc, e;

	fake_start(f, FAKE_ANSWER, answer);
	rc = slot_decision(fd, d, o);
	e = errno;
	fake_join(f);
	slot_opts_free(o);
	errno = e;
	return rc;
}

static void
test_decision_answers(void **state)
{
	struct sockaddr_storage sa;
	struct slot_decision d;
	struct fake f;
	char want[128];
	int l, fd;
	(void)state;

	fd = connected(&l, &sa);
	assert_int_equal(decision_against(fd, "decision state=relayed relay=198.51.100.7:7000 "
	    "path_us=87000 direct_us=295000 cached=1 why=best of 20 probes, 3.4x = shorter\n",
	    &d, &f), 0);
	snprintf(want, sizeof(want), "decision 127.0.0.1:%u 127.0.0.1:%u\n", local_port(fd),
	    port_of(&sa));
	assert_string_equal(f.got, want);
	assert_int_equal(f.npassed, 0);
	assert_int_equal(d.state, SLOT_STATE_RELAYED);
	assert_string_equal(d.relay, "198.51.100.7:7000");
	assert_int_equal(d.path_rtt_us, 87000);
	assert_int_equal(d.direct_rtt_us, 295000);
	assert_int_equal(d.cached, 1);
	assert_string_equal(d.why, "best of 20 probes, 3.4x = shorter");

	assert_int_equal(decision_against(fd, "decision state=direct relay=- path_us=295000 "
	    "direct_us=0 cached=0 why=no relay beats the direct path\n", &d, &f), 0);
	assert_int_equal(d.state, SLOT_STATE_DIRECT);
	assert_string_equal(d.relay, "");
	assert_int_equal(d.path_rtt_us, 295000);
	assert_int_equal(d.direct_rtt_us, 0);
	assert_int_equal(d.cached, 0);
	assert_string_equal(d.why, "no relay beats the direct path");

	/* Keys a newer slotd may add are skipped; why may be empty. */
	assert_int_equal(decision_against(fd, "decision state=pending relay=- path_us=0 "
	    "direct_us=0 cached=0 early=1 why=\n", &d, &f), 0);
	assert_int_equal(d.state, SLOT_STATE_PENDING);
	assert_string_equal(d.why, "");
	assert_int_equal(decision_against(fd, "decision state=relayed relay=[2001:db8::1]:7000 "
	    "path_us=4294967295 direct_us=1 cached=0 why=x", &d, &f), 0);
	assert_string_equal(d.relay, "[2001:db8::1]:7000");
	assert_int_equal(d.path_rtt_us, UINT_MAX);

	/* A long why is cut to the field. */
	{
		char ans[400];

		snprintf(ans, sizeof(ans), "decision state=direct why=%0300d\n", 0);
		assert_int_equal(decision_against(fd, ans, &d, &f), 0);
		assert_int_equal(strlen(d.why), sizeof(d.why) - 1);
	}
	close(fd);
	close(l);
}

static void
test_decision_bad_answers(void **state)
{
	static const char *bad[] = {
		"decision state=maybe relay=- path_us=0 direct_us=0 cached=0 why=x\n",
		"decision relay=- path_us=0 direct_us=0 cached=0 why=x\n",
		"decision state=direct path_us=x why=x\n",
		"decision state=direct path_us=4294967296 why=x\n",
		"decision state=direct path_us=-1 why=x\n",
		"decision state=direct cached=2 why=x\n",
		"decision state=direct  why=x\n",
		"decision state=direct garbage why=x\n",
		("decision state=direct relay=[2001:db8:1111:2222:3333:4444:5555:6666]:"
		    "7000000000000000000000000 why=x\n"),
		"decisions state=direct\n",
		"ok\n",
	};
	struct sockaddr_storage sa;
	struct slot_decision d;
	struct fake f;
	int l, fd;
	(void)state;

	fd = connected(&l, &sa);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&d, 0xff, sizeof(d));
		errno = 0;
		if (decision_against(fd, bad[i], &d, &f) != -1 || errno != EPROTO)
			fail_msg("\"%s\" taken (errno %d)", bad[i], errno);
		assert_int_equal(d.state, 0);
		assert_string_equal(d.why, "");
	}
	assert_failed(decision_against(fd, "err ENOENT slotd knows no connection a -> b\n", &d,
	    &f), ENOENT, "slotd: slotd knows no connection a -> b");
	close(fd);
	close(l);
}

static void
test_decision_bad_arguments(void **state)
{
	struct slot_decision d;
	struct slot_opts *o = opts_at(nowhere);
	int fd, p[2], u;
	(void)state;

	fd = tcp_socket(AF_INET);
	assert_failed(slot_decision(fd, NULL, o), EINVAL, NULL);
	assert_failed(slot_decision(fd, &d, o), ENOTCONN, "not connected");
	close(fd);
	assert_failed(slot_decision(fd, &d, o), EBADF, NULL);
	assert_int_equal(pipe(p), 0);
	assert_failed(slot_decision(p[0], &d, o), ENOTSOCK, NULL);
	close(p[0]);
	close(p[1]);
	assert_true((u = socket(AF_INET, SOCK_DGRAM, 0)) >= 0);
	assert_failed(slot_decision(u, &d, o), EPROTOTYPE, NULL);
	close(u);
	slot_opts_free(o);
}

/* ---- slot_attach_self ---- */

static void
test_attach(void **state)
{
	struct slot_opts *o = opts_at(fake_path);
	struct fake f;
	(void)state;

	fake_start(&f, FAKE_ANSWER, "ok\n");
	assert_int_equal(slot_attach_self(o), 0);
	fake_join(&f);
	assert_string_equal(f.got, "attach\n");
	assert_int_equal(f.npassed, 0);

	fake_start(&f, FAKE_ANSWER, "err EOPNOTSUPP slotd has no run cgroup (no cgroup v2)\n");
	assert_failed(slot_attach_self(o), EOPNOTSUPP, "slotd: slotd has no run cgroup");
	fake_join(&f);
	slot_opts_free(o);
}

/* ---- the error text is per thread ---- */

static void *
fail_in_thread(void *arg)
{
	(void)arg;
	(void)slot_opts_set_deadline(NULL, 1);
	return strstr(slot_strerror(), "NULL") != NULL ? (void *)1 : NULL;
}

static void
test_error_text_per_thread(void **state)
{
	struct slot_opts *o = slot_opts_new();
	pthread_t th;
	void *ok = NULL;
	(void)state;

	assert_failed(slot_opts_set_deadline(o, SLOT_DEADLINE_MAX + 1), EINVAL, "deadline");
	assert_int_equal(pthread_create(&th, NULL, fail_in_thread, NULL), 0);
	assert_int_equal(pthread_join(th, &ok), 0);
	assert_ptr_equal(ok, (void *)1);
	assert_non_null(strstr(slot_strerror(), "deadline"));
	slot_opts_free(o);
}

static int
group_setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/test_libslot.XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(fake_path, sizeof(fake_path), "%s/lib.sock", dir);
	snprintf(nowhere, sizeof(nowhere), "%s/no-such-dir/slotd-lib.sock", dir);
	setenv("SLOT_LIB_TIMEOUT_MS", TIMEOUT_MS, 1);
	/* Never the host's own slotd. */
	unsetenv("SLOT_LIB_SOCKET");
	return 0;
}

static int
group_teardown(void **state)
{
	(void)state;
	unlink(fake_path);
	rmdir(dir);
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version_and_no_error),
		cmocka_unit_test(test_endpoints),
		cmocka_unit_test(test_avoid_max),
		cmocka_unit_test(test_deadline_and_socket),
		cmocka_unit_test(test_connect_bad_arguments),
		cmocka_unit_test(test_connect_request_too_long),
		cmocka_unit_test(test_unreachable_falls_back_to_direct),
		cmocka_unit_test(test_unreachable_without_fallback_fails),
		cmocka_unit_test(test_connect_request_and_descriptor),
		cmocka_unit_test(test_connect_ipv6),
		cmocka_unit_test(test_connect_nonblocking),
		cmocka_unit_test(test_connect_refused_by_slotd),
		cmocka_unit_test(test_connect_bad_answers),
		cmocka_unit_test(test_connect_peer_closes),
		cmocka_unit_test(test_connect_slotd_never_answers),
		cmocka_unit_test(test_decision_answers),
		cmocka_unit_test(test_decision_bad_answers),
		cmocka_unit_test(test_decision_bad_arguments),
		cmocka_unit_test(test_attach),
		cmocka_unit_test(test_error_text_per_thread),
	};
	return cmocka_run_group_tests_name("libslot", tests, group_setup, group_teardown);
}
