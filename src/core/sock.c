/* Socket helpers. They never log: failures return -1 with errno set, and
 * errno survives the cleanup on every error path. */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include "slot/addr.h"
#include "slot/clock.h"
#include "slot/errbuf.h"
#include "slot/sock.h"

static void
sock_close_keep_errno(int fd)
{
	int saved = errno;

	close(fd);
	errno = saved;
}

static int
sock_setint(int fd, int level, int name, int v)
{
	return setsockopt(fd, level, name, &v, sizeof(v));
}

static int
sock_new(int family, int type)
{
	return socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
}

/* A new socket of ep's family, with ep as a socket address in ss/len. */
static int
sock_for(const struct endpoint *ep, int type, struct sockaddr_storage *ss,
    socklen_t *len)
{
	if ((*len = ep_to_sockaddr(ep, ss)) == 0) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	return sock_new(ss->ss_family, type);
}

/* Socket for ep, bound to it. v6only keeps an IPv6 socket off the IPv4
 * space, so that IPv4 and IPv6 listeners on one port can coexist; except
 * on the unspecified address [::], which listens on both families (a
 * dual-stack relay: IPv4 peers come as ::ffff:a.b.c.d, which
 * ep_from_sockaddr stores as IPv4; answer them with ep_to_sockaddr_on). */
static int
sock_bound(const struct endpoint *ep, int type, bool reuse)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd;

	if ((fd = sock_for(ep, type, &ss, &len)) == -1)
		return -1;
	if (reuse && sock_setint(fd, SOL_SOCKET, SO_REUSEADDR, 1) == -1)
		goto fail;
	if (ss.ss_family == AF_INET6 && sock_setint(fd, IPPROTO_IPV6, IPV6_V6ONLY,
	    !(addr_classify(&ep->addr) & ADDR_C_UNSPECIFIED)) == -1)
		goto fail;
	if (bind(fd, (struct sockaddr *)&ss, len) == -1)
		goto fail;
	return fd;
fail:
	sock_close_keep_errno(fd);
	return -1;
}

int
sock_listen_tcp(const struct endpoint *ep, int backlog)
{
	int fd;

	if ((fd = sock_bound(ep, SOCK_STREAM, true)) == -1)
		return -1;
	if (listen(fd, backlog) == -1) {
		sock_close_keep_errno(fd);
		return -1;
	}
	return fd;
}

int
sock_bind_udp(const struct endpoint *ep)
{
	return sock_bound(ep, SOCK_DGRAM, false);
}

static int
connect_nb(const struct endpoint *dst, uint32_t mark, bool unacked)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd;

	if ((fd = sock_for(dst, SOCK_STREAM, &ss, &len)) == -1)
		return -1;
	if (mark != 0 && setsockopt(fd, SOL_SOCKET, SO_MARK, &mark,
	    sizeof(mark)) == -1)
		goto fail;
	/* On a connecting socket the option makes the kernel keep the ACK of
	 * the SYN-ACK back for data (tcp_rcv_synsent_state_process); its value
	 * matters only to listeners. */
	if (unacked && sock_setint(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, 1) == -1)
		goto fail;
	if (connect(fd, (struct sockaddr *)&ss, len) == -1 &&
	    errno != EINPROGRESS)
		goto fail;
	return fd;
fail:
	sock_close_keep_errno(fd);
	return -1;
}

int
sock_connect_nb(const struct endpoint *dst, uint32_t mark)
{
	return connect_nb(dst, mark, false);
}

int
sock_connect_unacked(const struct endpoint *dst, uint32_t mark)
{
	return connect_nb(dst, mark, true);
}

int
sock_ack_now(int fd)
{
	return sock_setint(fd, IPPROTO_TCP, TCP_QUICKACK, 1);
}

int
sock_ack_from_now(int fd)
{
	/* Cleared, a SYN-ACK still to come is acknowledged at once; QUICKACK
	 * sends the one already deferred (it does nothing while connecting). */
	if (sock_setint(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, 0) == -1)
		return -1;
	return sock_ack_now(fd);
}

/* Loopback, v4 first: a host with IPv6 off has 127.0.0.1 all the same. */
static int
ackcheck_listen(struct endpoint *at)
{
	static const char *const lo[] = { "127.0.0.1", "::1" };
	int e = EADDRNOTAVAIL;

	for (size_t i = 0; i < sizeof(lo) / sizeof(lo[0]); i++) {
		int fd;

		if (addr_parse(lo[i], &at->addr) == -1)
			continue;
		at->port = 0;
		if ((fd = sock_listen_tcp(at, 1)) == -1) {
			e = errno;
			continue;
		}
		if (sock_local_ep(fd, at) == 0)
			return fd;
		e = errno;
		close(fd);
	}
	errno = e;
	return -1;
}

int
sock_ackcheck_begin(struct sock_ackcheck *c)
{
	struct endpoint at;

	c->cfd = -1;
	if ((c->lfd = ackcheck_listen(&at)) == -1)
		return -1;
	if ((c->cfd = sock_connect_unacked(&at, 0)) == -1) {
		sock_close_keep_errno(c->lfd);
		c->lfd = -1;
		return -1;
	}
	c->t0_us = clock_mono_us();
	return 0;
}

/* The kernel acknowledges on its delayed-ACK timer, TCP_DELACK_MAX
 * (SOCK_ACK_DEFER_MS) from the SYN-ACK, counted in jiffies: at 190 ms at
 * the earliest with HZ = 100. An ACK seen before this came sooner. */
#define ACKCHECK_EARLY_US ((SOCK_ACK_HOLD_MAX_MS + 8) * 1000ULL)

enum sock_ackcheck_result
sock_ackcheck_end(struct sock_ackcheck *c, uint64_t *held_us)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	enum sock_ackcheck_result res = SOCK_ACKCHECK_UNSURE;
	uint64_t before = clock_mono_us() - c->t0_us;
	int afd;

	*held_us = before;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(c->cfd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 &&
	    ti.tcpi_state == TCP_ESTABLISHED) {
		if ((afd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
			close(afd);
			/* Seen by now: the ACK went no later. A check that ran
			 * late cannot tell it from the timer's own. */
			if ((*held_us = clock_mono_us() - c->t0_us) < ACKCHECK_EARLY_US)
				res = SOCK_ACKCHECK_EARLY;
		} else if ((errno == EAGAIN || errno == EWOULDBLOCK) &&
		    before >= (uint64_t)SOCK_ACK_HOLD_MAX_MS * 1000) {
			/* Not yet seen, and already as long as any hold. */
			res = SOCK_ACKCHECK_DEFERRED;
		}
	}
	sock_close_rst(c->cfd);
	close(c->lfd);
	c->cfd = c->lfd = -1;
	return res;
}

uint32_t
sock_syn_rto_us(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_rto > 0)
		return ti.tcpi_rto;
	return SOCK_SYN_RTO_DEFAULT_US;
}

int
sock_connect_result(int fd)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == -1)
		return errno;
	return err;
}

int
sock_set_keepalive(int fd, int idle_s, int intvl_s, int cnt)
{
	if (sock_setint(fd, SOL_SOCKET, SO_KEEPALIVE, 1) == -1)
		return -1;
	/* Zero or less keeps the system default for that knob. */
	if (idle_s > 0 && sock_setint(fd, IPPROTO_TCP, TCP_KEEPIDLE,
	    idle_s) == -1)
		return -1;
	if (intvl_s > 0 && sock_setint(fd, IPPROTO_TCP, TCP_KEEPINTVL,
	    intvl_s) == -1)
		return -1;
	if (cnt > 0 && sock_setint(fd, IPPROTO_TCP, TCP_KEEPCNT, cnt) == -1)
		return -1;
	return 0;
}

int
sock_set_nodelay(int fd)
{
	return sock_setint(fd, IPPROTO_TCP, TCP_NODELAY, 1);
}

int
sock_set_congestion(int fd, const char *name)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name));
}

int
sock_retransmits(int fd, unsigned *out)
{
	struct tcp_info ti;
	/* Only as far as the field: the kernel copies no more than asked. */
	socklen_t len = (socklen_t)(offsetof(struct tcp_info, tcpi_total_retrans) +
	    sizeof(ti.tcpi_total_retrans));

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1)
		return -1;
	if (len < offsetof(struct tcp_info, tcpi_total_retrans) + sizeof(ti.tcpi_total_retrans)) {
		errno = EPROTO;
		return -1;
	}
	*out = ti.tcpi_total_retrans;
	return 0;
}

int
sock_raise_sndbuf(int fd, int bytes, bool force)
{
	int cur;
	socklen_t len = sizeof(cur);

	if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &cur, &len) == -1)
		return -1;
	if (cur >= bytes)
		return 0;
	/* The kernel doubles what it is given, for its own overhead. */
	if (sock_setint(fd, SOL_SOCKET, force ? SO_SNDBUFFORCE : SO_SNDBUF, bytes / 2) == -1 ||
	    sock_setint(fd, SOL_SOCKET, SO_BUF_LOCK, 0) == -1)
		return -1;
	return 1;
}

int
sock_sndbuf_check(bool *force)
{
	int fd = sock_new(AF_INET, SOCK_STREAM), v = -1;
	socklen_t len = sizeof(v);

	if (fd == -1)
		return -1;
	*force = sock_setint(fd, SOL_SOCKET, SO_SNDBUFFORCE, 4096) == 0;
	if (sock_setint(fd, SOL_SOCKET, SO_SNDBUF, 4096) == -1 ||
	    sock_setint(fd, SOL_SOCKET, SO_BUF_LOCK, 0) == -1 ||
	    getsockopt(fd, SOL_SOCKET, SO_BUF_LOCK, &v, &len) == -1) {
		sock_close_keep_errno(fd);
		return -1;
	}
	close(fd);
	if (v != 0) {
		errno = ENOPROTOOPT;
		return -1;
	}
	return 0;
}

int
sock_set_leg_later(int fd, const struct sock_leg *o)
{
	int e = 0;

	/* SO_KEEPALIVE before TCP_KEEPIDLE: the latter re-arms the keepalive
	 * timer from the last segment received, so a late call probes as
	 * early as one made at the connect would have. */
	if (sock_set_keepalive(fd, o->keepidle_s, o->keepintvl_s, o->keepcnt) == -1)
		e = errno;
	if ((o->user_timeout_ms || o->reset) && setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT,
	    &o->user_timeout_ms, sizeof(o->user_timeout_ms)) == -1 && !e)
		e = errno;
	errno = e;
	return e ? -1 : 0;
}

int
sock_set_leg(int fd, const struct sock_leg *o)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	int e = 0;

	if (sock_set_nodelay(fd) == -1)
		e = errno;
	if (!o->later && sock_set_leg_later(fd, o) == -1 && !e)
		e = errno;
	if (o->linger_rst && setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) == -1 && !e)
		e = errno;
	if (o->congestion && o->congestion[0] && sock_set_congestion(fd, o->congestion) == -1 &&
	    !e)
		e = errno;
	errno = e;
	return e ? -1 : 0;
}

/* A one-line file of /proc/sys into buf, without its newline. */
static int
read_line(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd == -1)
		return -1;
	n = read(fd, buf, len - 1);
	sock_close_keep_errno(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

/* Whether word is one of the space-separated words of list. */
static bool
word_in(const char *list, const char *word)
{
	size_t l = strlen(word);

	for (const char *p = list; *p; ) {
		size_t n;
		p += strspn(p, " \t");
		n = strcspn(p, " \t");
		if (n == l && strncmp(p, word, l) == 0)
			return true;
		p += n;
	}
	return false;
}

#define CC_SYSCTL "/proc/sys/net/ipv4/tcp_"

int
sock_congestion_default(char *buf, size_t len)
{
	return read_line(CC_SYSCTL "congestion_control", buf, len);
}

int
sock_congestion_check(const char *name, char *err, size_t errlen)
{
	char avail[512], allowed[512], def[SOCK_CC_NAME_MAX + 8];
	int fd, e;

	if (read_line(CC_SYSCTL "available_congestion_control", avail, sizeof(avail)) == -1 ||
	    read_line(CC_SYSCTL "allowed_congestion_control", allowed, sizeof(allowed)) == -1 ||
	    sock_congestion_default(def, sizeof(def)) == -1) {
		snprintf(err, errlen, "congestion control %s: cannot read %s*congestion_control: "
		    "%s", name, CC_SYSCTL, strerror(errno));
		return -1;
	}
	/* Root could load a module here, but the relay drops to its user: ask
	 * for what that user will be able to set. */
	if (!word_in(avail, name)) {
		snprintf(err, errlen, "congestion control %s is not available in this kernel "
		    "(net.ipv4.tcp_available_congestion_control = %s; its module, tcp_%s, may "
		    "need loading)", name, avail, name);
		return -1;
	}
	if (!word_in(allowed, name) && strcmp(def, name) != 0) {
		snprintf(err, errlen, "congestion control %s is not allowed to unprivileged "
		    "sockets (net.ipv4.tcp_allowed_congestion_control = %s): add it there",
		    name, allowed);
		return -1;
	}
	if ((fd = sock_new(AF_INET, SOCK_STREAM)) == -1 &&
	    (fd = sock_new(AF_INET6, SOCK_STREAM)) == -1) {
		snprintf(err, errlen, "congestion control %s: test socket: %s", name,
		    strerror(errno));
		return -1;
	}
	e = sock_set_congestion(fd, name) == -1 ? errno : 0;
	close(fd);
	if (e) {
		snprintf(err, errlen, "congestion control %s: refused by the kernel: %s", name,
		    strerror(e));
		return -1;
	}
	return 0;
}

void
sock_close_rst(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	int saved = errno;

	if (fd < 0)
		return;
	/* Best effort: if this fails the peer gets a FIN, which is still a close. */
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
	errno = saved;
}

/* Removes a socket file nobody listens on. A live socket (EADDRINUSE) or
 * anything that is not a socket (EEXIST) is left alone. */
static int
sock_unlink_stale(const struct sockaddr_un *sun)
{
	struct stat st;
	int fd, r;

	if (lstat(sun->sun_path, &st) == -1)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode)) {
		errno = EEXIST;
		return -1;
	}
	if ((fd = sock_new(AF_UNIX, SOCK_STREAM)) == -1)
		return -1;
	r = connect(fd, (const struct sockaddr *)sun, sizeof(*sun));
	if (r == 0 || errno == EAGAIN || errno == EINPROGRESS) {
		/* Somebody answers (or has a full backlog): not stale. */
		close(fd);
		errno = EADDRINUSE;
		return -1;
	}
	close(fd);
	if (unlink(sun->sun_path) == -1 && errno != ENOENT)
		return -1;
	return 0;
}

int
sock_listen_unix(const char *path, mode_t mode, int backlog)
{
	struct sockaddr_un sun;
	int fd, saved;

	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	if (path == NULL || path[0] == '\0') {
		errno = EINVAL;
		return -1;
	}
	if (strlen(path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sun.sun_path, path);
	if (sock_unlink_stale(&sun) == -1)
		return -1;
	if ((fd = sock_new(AF_UNIX, SOCK_STREAM)) == -1)
		return -1;
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
		goto fail;
	/* Before listen(), so nobody connects while the umask's mode holds. */
	if (chmod(path, mode) == -1 || listen(fd, backlog) == -1) {
		saved = errno;
		unlink(path);
		errno = saved;
		goto fail;
	}
	return fd;
fail:
	sock_close_keep_errno(fd);
	return -1;
}

int
sock_listen_unix_mkdir(const char *what, const char *path, mode_t mode, char *err,
    size_t errlen)
{
	char dir[PATH_MAX], *slash;
	int fd;

	snprintf(dir, sizeof(dir), "%s", path);
	if ((slash = strrchr(dir, '/')) != NULL && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
			errbuf_set(err, errlen, "%s directory %s: %s", what, dir, strerror(errno));
			return -1;
		}
	}
	if ((fd = sock_listen_unix(path, mode, 16)) == -1)
		errbuf_set(err, errlen, "%s %s: %s", what, path, strerror(errno));
	return fd;
}

static int
sock_ep(int fd, bool peer, struct endpoint *out)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r;

	if (peer)
		r = getpeername(fd, (struct sockaddr *)&ss, &len);
	else
		r = getsockname(fd, (struct sockaddr *)&ss, &len);
	if (r == -1)
		return -1;
	return ep_from_sockaddr((struct sockaddr *)&ss, len, out);
}

int
sock_local_ep(int fd, struct endpoint *out)
{
	return sock_ep(fd, false, out);
}

int
sock_peer_ep(int fd, struct endpoint *out)
{
	return sock_ep(fd, true, out);
}

void
sock_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

bool
sock_has_family(int family)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd == -1)
		return errno != EAFNOSUPPORT;
	close(fd);
	return true;
}
