/* libslot: the client side of slotd's lib socket (docs/man/libslot.3).
 *
 * One request per connection to the lib socket: a line, with the
 * application's socket in SCM_RIGHTS for "connect", and one line back. The
 * library keeps no state but the calling thread's error text: no table of
 * descriptors, no cached connection to slotd. It depends on libc only and
 * exports nothing but the functions of slot.h (built -fvisibility=hidden). */

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "slot/slot.h"

#define SLOT_API __attribute__((visibility("default")))

#define EP_LEN		64	/* "[" INET6_ADDRSTRLEN "]:65535" fits */
#define LIB_LINE_MAX	512	/* a request or an answer, '\n' included */
#define TIMEOUT_MS	2000	/* each of connect, send and receive */

struct slot_opts {
	char relay[SLOT_CHAIN_MAX][EP_LEN];	/* a relay or a chain; "": slotd chooses */
	char avoid[SLOT_AVOID_MAX][EP_LEN];
	unsigned int navoid;
	unsigned int deadline_ms;		/* 0: slotd's own */
	bool fallback;
	char socket[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* "": default */
};

static const struct slot_opts defaults = { .fallback = true };

/* The one piece of state: the text for this thread's last failure. Large
 * enough for slotd's longest answer. */
static _Thread_local char lasterr[LIB_LINE_MAX + 128];

static int fail(int e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets the text and errno; returns -1, for "return fail(...)". */
static int
fail(int e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(lasterr, sizeof(lasterr), fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

static void trunc_fmt(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* snprintf into a fixed field of a public struct: cut if need be. */
static void
trunc_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, len, fmt, ap);
	va_end(ap);
}

/* strerror is not thread-safe; glibc's _GNU_SOURCE strerror_r returns the
 * text, the XSI one fills buf. */
static const char *
errtext(int e, char *buf, size_t len)
{
#if defined(__GLIBC__) && defined(_GNU_SOURCE)
	return strerror_r(e, buf, len);
#else
	if (strerror_r(e, buf, len) != 0)
		snprintf(buf, len, "error %d", e);
	return buf;
#endif
}

/* ---- endpoints ---- */

/* Parses "ADDR:PORT" or "[V6]:PORT" (numeric, port 1..65535) into the form
 * slotd writes, which compares as a string. Returns 0 or -1 (EINVAL). */
static int
ep_normalise(const char *s, char *out, size_t outlen)
{
	char host[INET6_ADDRSTRLEN], txt[INET6_ADDRSTRLEN];
	unsigned char bin[sizeof(struct in6_addr)];
	const char *end, *port;
	unsigned long p = 0;
	size_t hl;
	int family;

	if (s[0] == '[') {
		family = AF_INET6;
		if ((end = strchr(s, ']')) == NULL || end[1] != ':')
			return fail(EINVAL, "\"%s\": expected [IPV6]:PORT", s);
		s++;
		port = end + 2;
	} else {
		family = AF_INET;
		/* A bare IPv6 address has several colons: refuse, since
		 * its port could not be told from its last group. */
		if ((end = strchr(s, ':')) == NULL || strchr(end + 1, ':') != NULL)
			return fail(EINVAL, "\"%s\": expected IPV4:PORT or [IPV6]:PORT", s);
		port = end + 1;
	}
	hl = (size_t)(end - s);
	if (hl == 0 || hl >= sizeof(host))
		return fail(EINVAL, "\"%s\": no numeric address", s);
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (inet_pton(family, host, bin) != 1)
		return fail(EINVAL, "\"%s\" is no numeric IPv%c address", host,
		    family == AF_INET ? '4' : '6');
	if (*port == '\0' || strlen(port) > 5 || strspn(port, "0123456789") != strlen(port) ||
	    (p = strtoul(port, NULL, 10)) < 1 || p > 65535)
		return fail(EINVAL, "\"%s\": the port must be 1..65535", port);
	inet_ntop(family, bin, txt, sizeof(txt));
	snprintf(out, outlen, family == AF_INET ? "%s:%lu" : "[%s]:%lu", txt, p);
	return 0;
}

/* Writes a socket address as slotd does. A v4-mapped IPv6 address is written
 * as IPv4: that is what goes on the wire, and what slotd sees. */
static void
ep_format(const struct sockaddr *sa, char *out, size_t outlen)
{
	char txt[INET6_ADDRSTRLEN];

	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

		inet_ntop(AF_INET, &sin->sin_addr, txt, sizeof(txt));
		snprintf(out, outlen, "%s:%u", txt, ntohs(sin->sin_port));
		return;
	}
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

	if (IN6_IS_ADDR_V4MAPPED(&sin6->sin6_addr)) {
		inet_ntop(AF_INET, &sin6->sin6_addr.s6_addr[12], txt, sizeof(txt));
		snprintf(out, outlen, "%s:%u", txt, ntohs(sin6->sin6_port));
	} else {
		inet_ntop(AF_INET6, &sin6->sin6_addr, txt, sizeof(txt));
		snprintf(out, outlen, "[%s]:%u", txt, ntohs(sin6->sin6_port));
	}
}

/* ---- options ---- */

SLOT_API struct slot_opts *
slot_opts_new(void)
{
	struct slot_opts *o;

	lasterr[0] = '\0';
	if ((o = malloc(sizeof(*o))) == NULL) {
		fail(ENOMEM, "out of memory");
		return NULL;
	}
	*o = defaults;
	return o;
}

SLOT_API void
slot_opts_free(struct slot_opts *o)
{
	free(o);
}

SLOT_API int
slot_opts_set_relay(struct slot_opts *o, const char *endpoint)
{
	char eps[SLOT_CHAIN_MAX][EP_LEN], one[LIB_LINE_MAX];
	const char *s, *comma;
	unsigned int n = 0;
	size_t len;

	lasterr[0] = '\0';
	if (o == NULL)
		return fail(EINVAL, "slot_opts_set_relay: no options (NULL)");
	if (endpoint == NULL) {
		memset(o->relay, 0, sizeof(o->relay));
		return 0;
	}
	/* "EP1,EP2[,EP3]": a chain, first relay first. */
	for (s = endpoint;; s = comma + 1) {
		comma = strchr(s, ',');
		len = comma ? (size_t)(comma - s) : strlen(s);
		if (n == SLOT_CHAIN_MAX)
			return fail(E2BIG, "at most %d relays in a chain", SLOT_CHAIN_MAX);
		if (len >= sizeof(one))
			return fail(EINVAL, "\"%s\": endpoint too long", endpoint);
		memcpy(one, s, len);
		one[len] = '\0';
		if (ep_normalise(one, eps[n], sizeof(eps[n])) == -1)
			return -1;
		for (unsigned int i = 0; i < n; i++)
			if (strcmp(eps[i], eps[n]) == 0)
				return fail(EINVAL, "relay %s twice in the chain", eps[n]);
		n++;
		if (comma == NULL)
			break;
	}
	memset(o->relay, 0, sizeof(o->relay));
	memcpy(o->relay, eps, n * sizeof(eps[0]));
	return 0;
}

SLOT_API int
slot_opts_avoid_relay(struct slot_opts *o, const char *endpoint)
{
	char ep[EP_LEN];

	lasterr[0] = '\0';
	if (o == NULL)
		return fail(EINVAL, "slot_opts_avoid_relay: no options (NULL)");
	if (endpoint == NULL) {
		o->navoid = 0;
		return 0;
	}
	if (ep_normalise(endpoint, ep, sizeof(ep)) == -1)
		return -1;
	for (unsigned int i = 0; i < o->navoid; i++)
		if (strcmp(o->avoid[i], ep) == 0)
			return 0;
	if (o->navoid == SLOT_AVOID_MAX)
		return fail(E2BIG, "at most %d relays to avoid", SLOT_AVOID_MAX);
	memcpy(o->avoid[o->navoid++], ep, sizeof(ep));
	return 0;
}

SLOT_API int
slot_opts_set_deadline(struct slot_opts *o, unsigned int ms)
{
	lasterr[0] = '\0';
	if (o == NULL)
		return fail(EINVAL, "slot_opts_set_deadline: no options (NULL)");
	if (ms > SLOT_DEADLINE_MAX)
		return fail(EINVAL, "deadline %u ms: expected 0 (slotd's own) or 1..%d",
		    ms, SLOT_DEADLINE_MAX);
	o->deadline_ms = ms;
	return 0;
}

SLOT_API int
slot_opts_set_fallback(struct slot_opts *o, int direct)
{
	lasterr[0] = '\0';
	if (o == NULL)
		return fail(EINVAL, "slot_opts_set_fallback: no options (NULL)");
	o->fallback = direct != 0;
	return 0;
}

SLOT_API int
slot_opts_set_socket(struct slot_opts *o, const char *path)
{
	lasterr[0] = '\0';
	if (o == NULL)
		return fail(EINVAL, "slot_opts_set_socket: no options (NULL)");
	if (path == NULL) {
		o->socket[0] = '\0';
		return 0;
	}
	if (path[0] == '\0')
		return fail(EINVAL, "empty socket path (NULL means the default)");
	if (strlen(path) >= sizeof(o->socket))
		return fail(ENAMETOOLONG, "socket path longer than %zu bytes: %s",
		    sizeof(o->socket) - 1, path);
	memcpy(o->socket, path, strlen(path) + 1);
	return 0;
}

/* The caller's path, else $SLOT_LIB_SOCKET, else the default. secure_getenv:
 * a set-uid program must not be pointed at another "slotd". */
static const char *
lib_socket_path(const struct slot_opts *o)
{
	const char *env;

	if (o->socket[0] != '\0')
		return o->socket;
	if ((env = secure_getenv("SLOT_LIB_SOCKET")) != NULL && env[0] != '\0')
		return env;
	return SLOT_LIB_SOCKET_DEFAULT;
}

/* Undocumented for applications, for tests: $SLOT_LIB_TIMEOUT_MS
 * (1..60000) replaces the 2 s that each step with slotd may take. */
static unsigned int
lib_timeout_ms(void)
{
	const char *env = secure_getenv("SLOT_LIB_TIMEOUT_MS");
	unsigned long v;
	char *end;

	if (env == NULL || *env == '\0')
		return TIMEOUT_MS;
	errno = 0;
	v = strtoul(env, &end, 10);
	if (errno != 0 || *end != '\0' || v < 1 || v > 60000)
		return TIMEOUT_MS;
	return (unsigned int)v;
}

/* ---- one exchange with slotd ---- */

/* Connects to the lib socket. Returns the socket, or -1 with errno. */
static int
lib_dial(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	unsigned int ms = lib_timeout_ms();
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	int s, e;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	if ((s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	/* Before connect: SO_SNDTIMEO also bounds a connect that waits on a
	 * full backlog. A slotd that hangs must not hang the application. */
	if (setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) == -1 ||
	    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == -1)
		goto fail;
	while (connect(s, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		if (errno != EINTR)
			goto fail;
	return s;
fail:
	e = errno;
	close(s);
	errno = e;
	return -1;
}

/* Sends the request in one sendmsg, with fd in SCM_RIGHTS unless fd is -1.
 * Returns 0 or -1 with errno. */
static int
lib_send(int s, const char *req, size_t len, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} cm;
	struct iovec iov = { .iov_base = (void *)req, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;

	if (fd != -1) {
		memset(&cm, 0, sizeof(cm));
		msg.msg_control = cm.buf;
		msg.msg_controllen = sizeof(cm.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	while ((n = sendmsg(s, &msg, MSG_NOSIGNAL)) == -1)
		if (errno != EINTR)
			return -1;
	/* A unix stream socket takes 511 bytes whole; should it not, the
	 * rest goes without the descriptor, which travelled with the first. */
	while ((size_t)n < len) {
		ssize_t w = send(s, req + n, len - (size_t)n, MSG_NOSIGNAL);

		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1)
			return -1;
		n += w;
	}
	return 0;
}

enum ask {
	ASK_ANSWER,		/* the answer line is in the buffer */
	ASK_UNREACHABLE,	/* slotd cannot be reached: errno */
	ASK_FAILED,		/* no usable answer: errno and the text set */
};

/* Sends req (and fd) to the lib socket at path and reads the answer line,
 * without its '\n', into ans (LIB_LINE_MAX bytes). A connection refused, a
 * request that cannot be sent or an answer that does not come in time is
 * "unreachable" (ETIMEDOUT for the time-outs); an answer that is cut or too
 * long is EPROTO. */
static enum ask
lib_ask(const char *path, const char *req, int fd, char ans[LIB_LINE_MAX])
{
	size_t got = 0;
	char *nl = NULL;
	ssize_t n;
	int s, e;

	if ((s = lib_dial(path)) == -1)
		goto unreachable;
	if (lib_send(s, req, strlen(req), fd) == -1)
		goto unreachable_close;
	while (nl == NULL && got < LIB_LINE_MAX) {
		n = recv(s, ans + got, LIB_LINE_MAX - got, 0);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			errno = ETIMEDOUT;
			goto unreachable_close;
		}
		if (n == -1) {
			e = errno;
			close(s);
			fail(EPROTO, "slotd at %s: reading the answer: %s", path,
			    errtext(e, ans, LIB_LINE_MAX));
			return ASK_FAILED;
		}
		if (n == 0)
			break;
		nl = memchr(ans + got, '\n', (size_t)n);
		got += (size_t)n;
	}
	close(s);
	if (nl != NULL)
		*nl = '\0';
	else if (got == LIB_LINE_MAX) {
		fail(EPROTO, "slotd at %s: answer longer than %d bytes", path, LIB_LINE_MAX - 1);
		return ASK_FAILED;
	} else if (got == 0) {
		fail(EPROTO, "slotd at %s closed the connection without answering", path);
		return ASK_FAILED;
	} else
		ans[got] = '\0';	/* EOF ends the line too */
	return ASK_ANSWER;

unreachable_close:
	e = errno;
	close(s);
	errno = e;
unreachable:
	if (errno == EAGAIN || errno == EWOULDBLOCK)
		errno = ETIMEDOUT;
	return ASK_UNREACHABLE;
}

static const struct {
	const char *name;
	int e;
} errnames[] = {
	{ "EINVAL", EINVAL }, { "ENOENT", ENOENT }, { "EPERM", EPERM },
	{ "EOPNOTSUPP", EOPNOTSUPP }, { "EAGAIN", EAGAIN }, { "ENOTSOCK", ENOTSOCK },
	{ "EISCONN", EISCONN }, { "EAFNOSUPPORT", EAFNOSUPPORT }, { "EPROTO", EPROTO },
};

/* An answer that is not the one expected: "err NAME TEXT", or garbage.
 * Returns -1 with errno and the text set. */
static int
answer_error(const char *ans)
{
	char name[32], shown[80];
	const char *text;
	size_t nl, i;

	if (strncmp(ans, "err ", 4) != 0) {
		/* Quote a little of it, printable. */
		for (i = 0; ans[i] != '\0' && i < sizeof(shown) - 1; i++)
			shown[i] = ans[i] >= ' ' && ans[i] < 0x7f ? ans[i] : '?';
		shown[i] = '\0';
		return fail(EPROTO, "slotd: unexpected answer \"%s%s\"", shown,
		    ans[i] != '\0' ? "..." : "");
	}
	ans += 4;
	nl = strcspn(ans, " ");
	text = ans[nl] == ' ' ? ans + nl + 1 : ans;
	if (nl >= sizeof(name))
		nl = sizeof(name) - 1;
	memcpy(name, ans, nl);
	name[nl] = '\0';
	for (i = 0; i < sizeof(errnames) / sizeof(errnames[0]); i++)
		if (strcmp(name, errnames[i].name) == 0)
			return fail(errnames[i].e, "slotd: %s", text);
	return fail(EPROTO, "slotd: %s", text);
}

/* fail() for a failed system call on descriptor fd; errno is kept. */
static int
fail_sys(int fd, const char *what)
{
	char buf[128];
	int e = errno;

	return fail(e, "descriptor %d: %s: %s", fd, what, errtext(e, buf, sizeof(buf)));
}

static int
unreachable(const char *path)
{
	char buf[128];
	int e = errno;

	return fail(e, "slotd is not reachable at %s: %s", path, errtext(e, buf, sizeof(buf)));
}

/* ---- the calls ---- */

/* Checks that fd is a stream socket. */
static int
check_stream(int fd)
{
	int v;
	socklen_t vl = sizeof(v);

	if (fd < 0)
		return fail(EBADF, "%d is no descriptor", fd);
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &vl) == -1) {
		if (errno == ENOTSOCK)
			return fail(ENOTSOCK, "descriptor %d is not a socket", fd);
		return fail_sys(fd, "SO_TYPE");
	}
	if (v != SOCK_STREAM)
		return fail(EPROTOTYPE, "socket %d is not SOCK_STREAM", fd);
	return 0;
}

/* Checks that fd is an unconnected TCP socket of family. */
static int
check_fd(int fd, int family)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int v;
	socklen_t vl = sizeof(v);

	if (check_stream(fd) == -1)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &vl) == -1)
		return fail_sys(fd, "SO_DOMAIN");
	if (v != AF_INET && v != AF_INET6)
		return fail(EAFNOSUPPORT, "socket %d is neither AF_INET nor AF_INET6", fd);
	if (v != family)
		return fail(EAFNOSUPPORT, "socket %d is %s, the address %s", fd,
		    v == AF_INET ? "AF_INET" : "AF_INET6",
		    family == AF_INET ? "AF_INET" : "AF_INET6");
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
		return fail(EISCONN, "socket %d is already connected", fd);
	/* Neither connected nor closed: a connect under way, or a listener. */
#ifdef TCP_INFO
	{
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);

		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0) {
			if (ti.tcpi_state == TCP_LISTEN)
				return fail(EISCONN, "socket %d is listening", fd);
			if (ti.tcpi_state != TCP_CLOSE)
				return fail(EALREADY, "socket %d is already connecting", fd);
		}
	}
#endif
	return 0;
}

/* Binds fd to the wildcard address, port 0, unless it is bound: slotd
 * knows the connection by its local port before the SYN. */
static int
bind_if_unbound(int fd, int family)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT };
	in_port_t port;
	int r;

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1)
		return fail_sys(fd, "getsockname");
	port = family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
	    ((struct sockaddr_in6 *)&ss)->sin6_port;
	if (port != 0)
		return 0;
	if (family == AF_INET)
		r = bind(fd, (struct sockaddr *)&sin, sizeof(sin));
	else
		r = bind(fd, (struct sockaddr *)&sin6, sizeof(sin6));
	/* EINVAL: bound to an address without a port
	 * (IP_BIND_ADDRESS_NO_PORT), which slotd could not know it by. */
	if (r == -1)
		return fail_sys(fd, "binding it to a local port");
	return 0;
}

/* Checks addr and writes it as slotd does. */
static int
check_addr(const struct sockaddr *addr, socklen_t len, char *ep, size_t eplen)
{
	in_port_t port;

	if (addr == NULL)
		return fail(EINVAL, "no address (NULL)");
	if (len < sizeof(sa_family_t))
		return fail(EINVAL, "address length %u is too short", (unsigned int)len);
	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return fail(EAFNOSUPPORT, "address family %d is neither AF_INET nor AF_INET6",
		    addr->sa_family);
	if (addr->sa_family == AF_INET && len < sizeof(struct sockaddr_in))
		return fail(EINVAL, "address length %u is too short for AF_INET (%zu)",
		    (unsigned int)len, sizeof(struct sockaddr_in));
	if (addr->sa_family == AF_INET6 && len < sizeof(struct sockaddr_in6))
		return fail(EINVAL, "address length %u is too short for AF_INET6 (%zu)",
		    (unsigned int)len, sizeof(struct sockaddr_in6));
	port = addr->sa_family == AF_INET ? ((const struct sockaddr_in *)addr)->sin_port :
	    ((const struct sockaddr_in6 *)addr)->sin6_port;
	if (port == 0)
		return fail(EINVAL, "the server's port is 0");
	ep_format(addr, ep, eplen);
	return 0;
}

SLOT_API int
slot_connect(int fd, const struct sockaddr *addr, socklen_t len, const struct slot_opts *o)
{
	char server[EP_LEN], req[LIB_LINE_MAX + 1], ans[LIB_LINE_MAX], buf[128];
	const char *path;
	size_t n;
	int r;

	lasterr[0] = '\0';
	if (o == NULL)
		o = &defaults;
	if (check_addr(addr, len, server, sizeof(server)) == -1 ||
	    check_fd(fd, addr->sa_family) == -1)
		return -1;

	n = (size_t)snprintf(req, sizeof(req), "connect %s", server);
	for (unsigned int i = 0; i < SLOT_CHAIN_MAX && o->relay[i][0] != '\0' &&
	    n < sizeof(req); i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, i ? ",%s" : " relay=%s",
		    o->relay[i]);
	for (unsigned int i = 0; i < o->navoid && n < sizeof(req); i++)
		n += (size_t)snprintf(req + n, sizeof(req) - n, " avoid=%s", o->avoid[i]);
	if (o->deadline_ms != 0 && n < sizeof(req))
		n += (size_t)snprintf(req + n, sizeof(req) - n, " deadline_ms=%u", o->deadline_ms);
	if (n < sizeof(req))
		n += (size_t)snprintf(req + n, sizeof(req) - n, "\n");
	/* Eight long IPv6 relays to avoid and a forced one can pass it. */
	if (n >= LIB_LINE_MAX)
		return fail(E2BIG, "the request would be longer than slotd's %d bytes: "
		    "fewer relays to avoid", LIB_LINE_MAX - 1);

	if (bind_if_unbound(fd, addr->sa_family) == -1)
		return -1;
	path = lib_socket_path(o);
	switch (lib_ask(path, req, fd, ans)) {
	case ASK_ANSWER:
		if (strcmp(ans, "ok") != 0 && strncmp(ans, "ok ", 3) != 0)
			return answer_error(ans);
		break;
	case ASK_UNREACHABLE:
		if (!o->fallback)
			return unreachable(path);
		break;
	case ASK_FAILED:
		return -1;
	}
	if ((r = connect(fd, addr, len)) == -1) {
		int e = errno;

		fail(e, "connect: %s", errtext(e, buf, sizeof(buf)));
	}
	return r;
}

/* Reads an unsigned decimal that fits an unsigned int. */
static bool
parse_uint(const char *s, size_t len, unsigned int *out)
{
	unsigned long long v = 0;

	if (len == 0 || len > 10)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned int)(s[i] - '0');
	}
	if (v > UINT_MAX)
		return false;
	*out = (unsigned int)v;
	return true;
}

/* "decision state=STATE relay=EP path_us=N direct_us=N cached=0|1 why=TEXT",
 * keys in any order, unknown ones skipped (a newer slotd), why= last. */
static int
parse_decision(const char *ans, struct slot_decision *out)
{
	const char *p = ans + strlen("decision"), *tok, *eq;
	size_t tl, kl;

	while (*p == ' ') {
		p++;
		if (strncmp(p, "why=", 4) == 0) {
			trunc_fmt(out->why, sizeof(out->why), "%s", p + 4);
			break;
		}
		tok = p;
		tl = strcspn(tok, " ");
		p = tok + tl;
		if ((eq = memchr(tok, '=', tl)) == NULL)
			goto bad;
		kl = (size_t)(eq - tok);
		eq++;
		tl -= kl + 1;
		if (kl == 5 && memcmp(tok, "state", 5) == 0) {
			if (tl == 7 && memcmp(eq, "relayed", 7) == 0)
				out->state = SLOT_STATE_RELAYED;
			else if (tl == 6 && memcmp(eq, "direct", 6) == 0)
				out->state = SLOT_STATE_DIRECT;
			else if (tl == 7 && memcmp(eq, "pending", 7) == 0)
				out->state = SLOT_STATE_PENDING;
			else
				goto bad;
		} else if (kl == 5 && memcmp(tok, "relay", 5) == 0) {
			if (tl >= sizeof(out->relay))
				goto bad;
			if (tl == 1 && eq[0] == '-')
				tl = 0;
			memcpy(out->relay, eq, tl);
			out->relay[tl] = '\0';
		} else if (kl == 7 && memcmp(tok, "path_us", 7) == 0) {
			if (!parse_uint(eq, tl, &out->path_rtt_us))
				goto bad;
		} else if (kl == 9 && memcmp(tok, "direct_us", 9) == 0) {
			if (!parse_uint(eq, tl, &out->direct_rtt_us))
				goto bad;
		} else if (kl == 6 && memcmp(tok, "cached", 6) == 0) {
			if (tl != 1 || (eq[0] != '0' && eq[0] != '1'))
				goto bad;
			out->cached = eq[0] - '0';
		}
	}
	if (*p != '\0' && strncmp(p, "why=", 4) != 0)
		goto bad;
	if (out->state == 0)
		goto bad;
	return 0;
bad:
	memset(out, 0, sizeof(*out));
	return answer_error(ans);
}

SLOT_API int
slot_decision(int fd, struct slot_decision *out, const struct slot_opts *o)
{
	struct sockaddr_storage local, peer;
	socklen_t ll = sizeof(local), pl = sizeof(peer);
	char client[EP_LEN], server[EP_LEN], req[LIB_LINE_MAX], ans[LIB_LINE_MAX], buf[128];
	const char *path;

	lasterr[0] = '\0';
	if (o == NULL)
		o = &defaults;
	if (out == NULL)
		return fail(EINVAL, "no struct slot_decision (NULL)");
	memset(out, 0, sizeof(*out));
	if (check_stream(fd) == -1)
		return -1;
	if (getsockname(fd, (struct sockaddr *)&local, &ll) == -1)
		return fail_sys(fd, "getsockname");
	if (local.ss_family != AF_INET && local.ss_family != AF_INET6)
		return fail(EAFNOSUPPORT, "socket %d is neither AF_INET nor AF_INET6", fd);
	if (getpeername(fd, (struct sockaddr *)&peer, &pl) == -1) {
		if (errno == ENOTCONN)
			return fail(ENOTCONN, "socket %d is not connected", fd);
		return fail_sys(fd, "getpeername");
	}
	ep_format((struct sockaddr *)&local, client, sizeof(client));
	ep_format((struct sockaddr *)&peer, server, sizeof(server));
	snprintf(req, sizeof(req), "decision %s %s\n", client, server);

	path = lib_socket_path(o);
	switch (lib_ask(path, req, -1, ans)) {
	case ASK_ANSWER:
		break;
	case ASK_UNREACHABLE:
		/* No table of descriptors: slotd out of reach now is taken to
		 * be why slot_connect went direct. */
		out->state = SLOT_STATE_FALLBACK;
		trunc_fmt(out->why, sizeof(out->why), "slotd not reachable at %s: %s", path,
		    errtext(errno, buf, sizeof(buf)));
		return 0;
	case ASK_FAILED:
		return -1;
	}
	if (strncmp(ans, "decision", 8) != 0 || (ans[8] != ' ' && ans[8] != '\0'))
		return answer_error(ans);
	return parse_decision(ans, out);
}

SLOT_API int
slot_attach_self(const struct slot_opts *o)
{
	char ans[LIB_LINE_MAX];
	const char *path;

	lasterr[0] = '\0';
	if (o == NULL)
		o = &defaults;
	path = lib_socket_path(o);
	switch (lib_ask(path, "attach\n", -1, ans)) {
	case ASK_ANSWER:
		break;
	case ASK_UNREACHABLE:
		return unreachable(path);
	case ASK_FAILED:
		return -1;
	}
	if (strcmp(ans, "ok") != 0 && strncmp(ans, "ok ", 3) != 0)
		return answer_error(ans);
	return 0;
}

SLOT_API const char *
slot_strerror(void)
{
	return lasterr;
}

SLOT_API const char *
slot_version(void)
{
	return SLOT_LIB_VERSION;
}
