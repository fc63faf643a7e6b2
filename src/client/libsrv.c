#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "client.h"
#include "closer.h"
#include "hold.h"
#include "libsrv.h"
#include "relays.h"

#define REQ_MAX 512		/* a request line, '\n' included */
#define CLIENTS_MAX 64		/* connections answered at once */
#define PENDING_MAX 4096	/* offered sockets whose SYN has not come */
#define CLIENT_TIMEOUT_S 2.
/* Every descriptor one recvmsg may bring (the kernel's SCM_MAX_FD): any the
 * control buffer had no room for, the kernel would close in slotd's thread,
 * and that close may block (closer.h). */
#define FDS_MAX 253
/* Passed descriptors waiting for the closing thread; beyond, they stay open. */
#define CLOSER_MAX 256
#define DRAIN_MAX 1024		/* reads of what a client left, at its close */
/* An offered socket's options wait this long for its SYN. */
#define PENDING_US (30ull * 1000000)

struct pending {
	uint16_t port;			/* the socket's local port */
	struct endpoint server;
	struct lib_opts o;
	uint64_t expires_us;
	TAILQ_ENTRY(pending) link;	/* oldest first */
};
TAILQ_HEAD(pending_list, pending);

struct lclient {
	struct libsrv *s;
	int fd;
	int passed;			/* the descriptor that came with the line; -1 */
	bool more_fds;			/* ...and others with it (dropped) */
	ev_io io;
	ev_timer timer;
	char buf[REQ_MAX];
	size_t len;
	TAILQ_ENTRY(lclient) link;
};
TAILQ_HEAD(lclient_list, lclient);

struct libsrv {
	struct slotd *d;
	int fd;
	ev_io io;
	struct lclient_list clients;
	size_t nclients;
	struct pending_list pending;
	size_t npending;
	struct closer *closer;		/* passed descriptors' last close */
	uint64_t closer_logged_us;	/* last "left open" warning */
	char cgroup[CCONF_PATH_MAX];	/* as the rules name it */
	char cgroup_dir[PATH_MAX];	/* "": no run cgroup */
	char mnt[PATH_MAX];		/* the cgroup v2 mount */
	int procs_fd;			/* its cgroup.procs, opened as root; -1 */
};

/* Where cgroup v2 is mounted ("/sys/fs/cgroup", or .../unified on a
 * hybrid host). Returns 0, or -1. */
static int
cgroup2_mount(char *out, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[1024];
	int rc = -1;

	if (f == NULL)
		return -1;
	while (rc == -1 && fgets(line, sizeof(line), f)) {
		/* "id parent maj:min root mountpoint opts [optional...] - fstype ..." */
		char mnt[512], *sep = strstr(line, " - ");
		if (sep == NULL || strncmp(sep + 3, "cgroup2 ", 8) != 0)
			continue;
		if (sscanf(line, "%*s %*s %*s %*s %511s", mnt) == 1 &&
		    (size_t)snprintf(out, len, "%s", mnt) < len)
			rc = 0;
	}
	fclose(f);
	return rc;
}

static struct libsrv *
srv_of(struct slotd *d)
{
	if (d->lib == NULL && (d->lib = calloc(1, sizeof(*d->lib))) != NULL) {
		if ((d->lib->closer = closer_new(CLOSER_MAX)) == NULL) {
			free(d->lib);
			d->lib = NULL;
			return NULL;
		}
		d->lib->d = d;
		d->lib->fd = -1;
		d->lib->procs_fd = -1;
		TAILQ_INIT(&d->lib->clients);
		TAILQ_INIT(&d->lib->pending);
	}
	return d->lib;
}

void
libsrv_cgroup_open(struct slotd *d)
{
	struct libsrv *s = srv_of(d);
	char mnt[PATH_MAX], path[PATH_MAX];
	const char *cg = d->conf.run_cgroup;

	if (s == NULL || cg[0] == '\0' || d->conf.lib_socket[0] == '\0')
		return;
	if (cgroup2_mount(mnt, sizeof(mnt)) == -1) {
		log_warnx("slotctl run unavailable: no cgroup v2 mounted");
		return;
	}
	/* nft resolves a rule's cgroup path under /sys/fs/cgroup alone: on a
	 * hybrid host (v2 on .../unified) the whole table would fail. */
	if (d->rules_exec.backend == RULES_NFT && strcmp(mnt, "/sys/fs/cgroup") != 0) {
		log_warnx("slotctl run unavailable: cgroup v2 is mounted on %s, and nft looks "
		    "for cgroups under /sys/fs/cgroup only", mnt);
		return;
	}
	/* Each level in turn: [lib] cgroup may be nested. */
	for (const char *p = cg; *p;) {
		p += strcspn(p, "/");
		if ((size_t)snprintf(path, sizeof(path), "%s/%.*s", mnt, (int)(p - cg), cg) >=
		    sizeof(path))
			return;
		if (mkdir(path, 0755) == -1 && errno != EEXIST) {
			log_warn("slotctl run unavailable: creating cgroup %s", path);
			return;
		}
		if (*p == '/')
			p++;
	}
	snprintf(s->cgroup_dir, sizeof(s->cgroup_dir), "%s", path);
	snprintf(s->mnt, sizeof(s->mnt), "%s", mnt);
	snprintf(s->cgroup, sizeof(s->cgroup), "%s", cg);
	if ((size_t)snprintf(path, sizeof(path), "%s/cgroup.procs", s->cgroup_dir) >= sizeof(path) ||
	    (s->procs_fd = open(path, O_WRONLY | O_CLOEXEC)) == -1) {
		log_warn("slotctl run unavailable: %s", path);
		(void)rmdir(s->cgroup_dir);
		s->cgroup_dir[0] = '\0';
		return;
	}
	log_info("slotctl run: cgroup %s", s->cgroup_dir);
}

const char *
libsrv_cgroup(const struct slotd *d)
{
	return d->lib && d->lib->procs_fd >= 0 ? d->lib->cgroup : NULL;
}

bool
lib_opts_avoids(const struct lib_opts *o, const struct endpoint *relay)
{
	for (size_t i = 0; o && i < o->navoid; i++)
		if (ep_eq(&o->avoid[i], relay))
			return true;
	return false;
}

/* relay=EP1,EP2[,EP3]: a forced chain, first relay first; each relay once. */
static int
parse_chain(char *v, struct lib_opts *o, char *err, size_t errlen)
{
	struct endpoint eps[LIB_CHAIN_MAX];
	char *save = NULL, *t;
	size_t n = 0;

	for (t = strtok_r(v, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (n == LIB_CHAIN_MAX) {
			snprintf(err, errlen, "relay=: at most %d relays in a chain", LIB_CHAIN_MAX);
			return -1;
		}
		if (ep_parse(t, 0, &eps[n]) == -1) {
			snprintf(err, errlen, "relay=...%s: expected a relay's ADDRESS:PORT", t);
			return -1;
		}
		for (size_t j = 0; j < n; j++)
			if (ep_eq(&eps[j], &eps[n])) {
				snprintf(err, errlen, "relay=: %s twice in the chain", t);
				return -1;
			}
		n++;
	}
	if (n < 2) {
		snprintf(err, errlen, "relay=: expected ADDRESS:PORT[,ADDRESS:PORT]...");
		return -1;
	}
	o->has_relay = true;
	o->relay = eps[0];
	o->nnext = n - 1;
	memcpy(o->next, eps + 1, (n - 1) * sizeof(eps[0]));
	return 0;
}

int
libsrv_parse_connect(const char *args, struct endpoint *server, struct lib_opts *o,
    char *err, size_t errlen)
{
	char buf[REQ_MAX], *save = NULL, *t;
	bool first = true;

	memset(o, 0, sizeof(*o));
	if (strlen(args) >= sizeof(buf)) {
		snprintf(err, errlen, "request too long");
		return -1;
	}
	strcpy(buf, args);
	for (t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save), first = false) {
		char *v = strchr(t, '=');
		if (first) {
			if (v != NULL || ep_parse(t, 0, server) == -1) {
				snprintf(err, errlen, "'%s': expected the server's ADDRESS:PORT", t);
				return -1;
			}
			continue;
		}
		if (v == NULL) {
			snprintf(err, errlen, "'%s': expected KEY=VALUE", t);
			return -1;
		}
		*v++ = '\0';
		/* A second relay= would replace the first relay of a chain and
		 * escape parse_chain's "each once" (relay=A,B relay=B: B>B). */
		if (strcmp(t, "relay") == 0 && o->has_relay) {
			snprintf(err, errlen, "relay= twice: one relay=, with a relay or a chain "
			    "RELAY1,RELAY2[,RELAY3]");
			return -1;
		}
		if (strcmp(t, "relay") == 0 && strchr(v, ',') != NULL) {
			if (parse_chain(v, o, err, errlen) == -1)
				return -1;
		} else if (strcmp(t, "relay") == 0 || strcmp(t, "avoid") == 0) {
			struct endpoint ep;
			if (ep_parse(v, 0, &ep) == -1) {
				snprintf(err, errlen, "%s=%s: expected a relay's ADDRESS:PORT", t, v);
				return -1;
			}
			if (t[0] == 'r') {
				o->has_relay = true;
				o->relay = ep;
			} else if (o->navoid == LIB_AVOID_MAX) {
				snprintf(err, errlen, "at most %d avoid=", LIB_AVOID_MAX);
				return -1;
			} else {
				o->avoid[o->navoid++] = ep;
			}
		} else if (strcmp(t, "deadline_ms") == 0) {
			char *end;
			errno = 0;
			unsigned long ms = strtoul(v, &end, 10);
			if (v[0] < '0' || v[0] > '9' || *end || errno || ms < 1 ||
			    ms > LIB_DEADLINE_MAX_MS) {
				snprintf(err, errlen, "deadline_ms=%s: expected 1 to %d", v,
				    LIB_DEADLINE_MAX_MS);
				return -1;
			}
			o->deadline_ms = (uint32_t)ms;
		} else {
			snprintf(err, errlen, "unknown option '%s'", t);
			return -1;
		}
	}
	if (first) {
		snprintf(err, errlen, "expected the server's ADDRESS:PORT");
		return -1;
	}
	if (o->has_relay && lib_opts_avoids(o, &o->relay)) {
		snprintf(err, errlen, "relay= is also avoided");
		return -1;
	}
	for (size_t i = 0; i < o->nnext; i++)
		if (lib_opts_avoids(o, &o->next[i])) {
			snprintf(err, errlen, "a relay of relay= is also avoided");
			return -1;
		}
	return 0;
}

static void
pending_expire(struct libsrv *s, uint64_t now)
{
	struct pending *p;

	while ((p = TAILQ_FIRST(&s->pending)) != NULL && p->expires_us <= now) {
		TAILQ_REMOVE(&s->pending, p, link);
		s->npending--;
		free(p);
	}
}

bool
libsrv_take(struct slotd *d, const struct endpoint *client, const struct endpoint *server,
    struct lib_opts *out)
{
	struct libsrv *s = d->lib;
	struct pending *p;

	if (s == NULL)
		return false;
	pending_expire(s, clock_mono_us());
	TAILQ_FOREACH(p, &s->pending, link) {
		if (p->port == client->port && ep_eq(&p->server, server)) {
			*out = p->o;
			TAILQ_REMOVE(&s->pending, p, link);
			s->npending--;
			free(p);
			d->ctr.lib_matched++;
			return true;
		}
	}
	return false;
}

/* "err NAME text": errno's name, for the library to map back. */
static void
answer(struct lclient *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void
answer(struct lclient *c, const char *fmt, ...)
{
	char line[REQ_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	if (strncmp(line, "err ", 4) == 0)
		c->s->d->ctr.lib_errors++;
	/* A few hundred bytes on a fresh socket: a client that does not
	 * read them loses them. */
	(void)send(c->fd, line, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static int
sock_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);

	return getsockopt(fd, level, name, &v, &l) == -1 ? -1 : v;
}

uint16_t
libsrv_check_socket(int fd, const struct endpoint *server, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	int dom;

	if ((dom = sock_int(fd, SOL_SOCKET, SO_DOMAIN)) == -1) {
		snprintf(err, errlen, "ENOTSOCK not a socket");
		return 0;
	}
	if ((dom != AF_INET && dom != AF_INET6) || sock_int(fd, SOL_SOCKET, SO_TYPE) != SOCK_STREAM ||
	    sock_int(fd, SOL_SOCKET, SO_PROTOCOL) != IPPROTO_TCP) {
		snprintf(err, errlen, "ENOTSOCK not a TCP socket");
		return 0;
	}
	if ((server->addr.family == AF_INET6 && dom != AF_INET6) ||
	    (server->addr.family == AF_INET && dom == AF_INET6 &&
	    sock_int(fd, IPPROTO_IPV6, IPV6_V6ONLY) == 1)) {
		snprintf(err, errlen, "EAFNOSUPPORT the socket cannot reach the server's family");
		return 0;
	}
	/* getpeername says ENOTCONN for a socket whose SYN is out (SYN_SENT)
	 * and for a listening one: the kernel's state tells them apart. */
	if ((getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 || errno != ENOTCONN) ||
	    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == -1 || ti.tcpi_state != TCP_CLOSE) {
		snprintf(err, errlen, "EISCONN the socket is connected (or connecting, or "
		    "listening) already");
		return 0;
	}
	sl = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &sl) == -1) {
		snprintf(err, errlen, "EPROTO getsockname: %s", strerror(errno));
		return 0;
	}
	uint16_t port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port) :
	    ntohs(((struct sockaddr_in *)&ss)->sin_port);
	if (port == 0)
		snprintf(err, errlen, "EINVAL bind the socket to a local port first (port 0 does)");
	return port;
}

/* The descriptor of a "connect" (libsrv_check_socket). Returns its port, or
 * 0 with an answer sent. */
static uint16_t
check_socket(struct lclient *c, const struct endpoint *server)
{
	char why[160];
	uint16_t port;

	if (c->passed < 0) {
		answer(c, "err EINVAL connect needs the socket, passed with the request");
		return 0;
	}
	if ((port = libsrv_check_socket(c->passed, server, why, sizeof(why))) == 0)
		answer(c, "err %s", why);
	return port;
}

static void
do_connect(struct lclient *c, const char *args)
{
	struct slotd *d = c->s->d;
	struct libsrv *s = c->s;
	struct endpoint server;
	struct lib_opts o;
	struct pending *p;
	char why[160], rb[EP_STRLEN];
	uint16_t port;
	uint32_t mark;
	socklen_t ml = sizeof(mark);

	if (libsrv_parse_connect(args, &server, &o, why, sizeof(why)) == -1) {
		answer(c, "err EINVAL %s", why);
		return;
	}
	if (o.has_relay && relay_find(d, &o.relay) == NULL) {
		answer(c, "err ENOENT no relay %s in slotd's set", ep_fmt(&o.relay, rb));
		return;
	}
	for (size_t i = 0; i < o.nnext; i++)
		if (relay_find(d, &o.next[i]) == NULL) {
			answer(c, "err ENOENT no relay %s in slotd's set", ep_fmt(&o.next[i], rb));
			return;
		}
	if ((port = check_socket(c, &server)) == 0)
		return;
	pending_expire(s, clock_mono_us());
	if (s->npending >= PENDING_MAX) {
		answer(c, "err EAGAIN too many sockets offered and not connected yet");
		return;
	}
	/* The program's own mark bits stay. */
	if (getsockopt(c->passed, SOL_SOCKET, SO_MARK, &mark, &ml) == -1)
		mark = 0;
	mark |= d->conf.lib_mark;
	if (setsockopt(c->passed, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == -1) {
		answer(c, "err EPERM cannot mark the socket: %s", strerror(errno));
		return;
	}
	/* A socket offered again for the same server replaces its options. */
	TAILQ_FOREACH(p, &s->pending, link)
		if (p->port == port && ep_eq(&p->server, &server))
			break;
	if (p != NULL) {
		TAILQ_REMOVE(&s->pending, p, link);
		s->npending--;
	} else if ((p = calloc(1, sizeof(*p))) == NULL) {
		answer(c, "err EAGAIN out of memory");
		return;
	}
	p->port = port;
	p->server = server;
	p->o = o;
	p->expires_us = clock_mono_us() + PENDING_US;
	TAILQ_INSERT_TAIL(&s->pending, p, link);
	s->npending++;
	d->ctr.lib_offered++;
	answer(c, "ok");
}

static void
do_decision(struct lclient *c, const char *args)
{
	struct endpoint client, server;
	struct hold_answer a;
	char cs[EP_STRLEN + 2], ss[EP_STRLEN + 2], rb[EP_STRLEN];

	if (sscanf(args, "%57s %57s", cs, ss) != 2 || ep_parse(cs, 0, &client) == -1 ||
	    ep_parse(ss, 0, &server) == -1) {
		answer(c, "err EINVAL expected: decision CLIENT SERVER (ADDRESS:PORT each)");
		return;
	}
	if (!hold_answer(c->s->d, &client, &server, &a)) {
		answer(c, "err ENOENT slotd knows no connection %s -> %s (not offered to slotd, "
		    "or decided too long ago)", cs, ss);
		return;
	}
	answer(c, "decision state=%s relay=%s path_us=%u direct_us=%u cached=%d why=%s", a.state,
	    a.has_relay ? ep_fmt(&a.relay, rb) : "-", a.path_rtt_us, a.direct_rtt_us,
	    a.cached ? 1 : 0, a.why && a.why[0] ? a.why : "-");
}

int
libsrv_attach_from_ok(const char *list, char *err, size_t errlen)
{
	const char *sep = ", \t";
	size_t n = 0;

	for (const char *p = list + strspn(list, sep); *p; p += strspn(p, sep)) {
		char t[CCONF_PATH_MAX], *save = NULL;
		size_t len = strcspn(p, sep);
		bool ok = p[0] == '/';

		snprintf(t, sizeof(t), "%.*s", (int)len, p);
		for (char *part = strtok_r(t, "/", &save); ok && part;
		    part = strtok_r(NULL, "/", &save))
			ok = strcmp(part, ".") != 0 && strcmp(part, "..") != 0;
		if (!ok) {
			snprintf(err, errlen, "'%.*s': expected a cgroup path from '/' (as "
			    "/proc/PID/cgroup shows it), without . or ..", (int)len, p);
			return -1;
		}
		if (++n > LIB_ATTACH_FROM_MAX) {
			snprintf(err, errlen, "at most %d cgroups", LIB_ATTACH_FROM_MAX);
			return -1;
		}
		p += len;
	}
	return 0;
}

/* Whether path is prefix (of plen bytes) or below it, part by part. */
static bool
path_under(const char *path, const char *prefix, size_t plen)
{
	while (plen > 1 && prefix[plen - 1] == '/')
		plen--;		/* "/a/" is "/a"; "/" stays */
	if (plen == 1)
		return path[0] == '/';
	return strncmp(path, prefix, plen) == 0 && (path[plen] == '\0' || path[plen] == '/');
}

bool
libsrv_cgroup_under(const char *cg, const char *list)
{
	const char *sep = ", \t";

	/* Outside our namespace the kernel writes the way up: "/../..". */
	if (cg[0] != '/' || strstr(cg, "/..") != NULL)
		return false;
	for (const char *p = list + strspn(list, sep); *p; p += strspn(p, sep)) {
		size_t len = strcspn(p, sep);
		if (path_under(cg, p, len))
			return true;
		p += len;
	}
	return false;
}

int
libsrv_proc_cgroup(int pid, char *out, size_t len)
{
	char path[64], line[PATH_MAX + 8];
	FILE *f;
	int rc = -1;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	errno = ENOENT;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if ((size_t)snprintf(out, len, "%s", line + 3) < len)
			rc = 0;
		else
			errno = ENAMETOOLONG;
		break;
	}
	fclose(f);
	return rc;
}

/* The kernel's pidfd interfaces, which Debian 12's headers lack. */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
struct lib_pidfd_info {			/* struct pidfd_info, PIDFD_INFO_SIZE_VER0 */
	uint64_t mask;
	uint64_t cgroupid;
	uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
	uint32_t spare0[1];
};
#define LIB_PIDFD_GET_INFO _IOWR(0xFF, 11, struct lib_pidfd_info)
#define LIB_PIDFD_INFO_CREDS (1ull << 1)
#define LIB_PIDFD_INFO_CGROUPID (1ull << 2)

/* Whether the process is still there (a zombie counts: its pid is still
 * its own). pidfd -1: by pid, which may have been reused. */
static bool
peer_alive(int pidfd, int pid)
{
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

	if (pidfd < 0)
		return kill(pid, 0) == 0 || errno == EPERM;
	if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) == 0 || errno == EPERM)
		return true;	/* EPERM: there, and not ours to signal */
	if (errno == ESRCH)
		return false;
	/* No pidfd_send_signal (valgrind lacks it): a pidfd turns readable
	 * once its process has exited. */
	return poll(&pfd, 1, 0) == 0;
}

/* The effective uid of process pid from /proc/PID/status; -1: unknown. */
static long long
proc_euid(int pid)
{
	char path[64], line[256];
	long long uid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if ((f = fopen(path, "re")) == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Uid: %*u %lld", &uid) == 1)
			break;
	fclose(f);
	return uid;
}

int
libsrv_peer_check(int pidfd, int pid, unsigned uid, char *err, size_t errlen)
{
	struct lib_pidfd_info pi = { .mask = LIB_PIDFD_INFO_CREDS };
	long long euid;

	if (!peer_alive(pidfd, pid)) {
		snprintf(err, errlen, "process %d has exited (its pid may name another process "
		    "now)", pid);
		return -1;
	}
	/* The pidfd's own view where the kernel has it (/proc/PID is hidden
	 * from slotd's user under ProtectProc=invisible); /proc/PID/status
	 * after a liveness check else, so that the pid is still the peer's. */
	if (pidfd >= 0 && ioctl(pidfd, LIB_PIDFD_GET_INFO, &pi) == 0 &&
	    (pi.mask & LIB_PIDFD_INFO_CREDS))
		euid = pi.euid;
	else
		euid = proc_euid(pid);
	if (!peer_alive(pidfd, pid)) {
		snprintf(err, errlen, "process %d has exited", pid);
		return -1;
	}
	if (euid == -1) {
		snprintf(err, errlen, "cannot read process %d's uid (/proc/%d/status)", pid, pid);
		return -1;
	}
	if (euid != (long long)uid) {
		snprintf(err, errlen, "process %d runs as uid %lld now, not %u as when it "
		    "connected", pid, euid, uid);
		return -1;
	}
	return 0;
}

/* nftw() has no argument for its callback: the loop's thread alone uses
 * these. */
static uint64_t cg_want;
static char cg_found[PATH_MAX];

static int
cg_visit(const char *path, const struct stat *sb, int flag, struct FTW *f)
{
	(void)f;
	/* A cgroup's id is its directory's inode number on cgroup2. */
	if (flag == FTW_D && (uint64_t)sb->st_ino == cg_want) {
		snprintf(cg_found, sizeof(cg_found), "%s", path);
		return 1;
	}
	return 0;
}

/* Whether cgroup id is one of list's cgroups or below one; its path, from
 * the mount's root, into out. */
static bool
cg_id_under(const struct libsrv *s, uint64_t id, const char *list, char *out, size_t len)
{
	const char *sep = ", \t";
	size_t ml = strlen(s->mnt);

	for (const char *p = list + strspn(list, sep); *p; p += strspn(p, sep)) {
		char top[PATH_MAX];
		size_t n = strcspn(p, sep), k = n;
		while (k > 0 && p[k - 1] == '/')
			k--;	/* "/" is the mount itself; "/a/" is "/a" */
		cg_want = id;
		if ((size_t)snprintf(top, sizeof(top), "%s%.*s", s->mnt, (int)k, p) < sizeof(top) &&
		    nftw(top, cg_visit, 16, FTW_PHYS | FTW_MOUNT) == 1) {
			snprintf(out, len, "%s", cg_found[ml] ? cg_found + ml : "/");
			return true;
		}
		p += n;
	}
	return false;
}

/* The caller's cgroup: whether the operator lets it attach (under
 * [lib] attach_from, or in the run cgroup already: a nested slotctl run),
 * and its path for the messages. By the peer's pidfd where the kernel has
 * PIDFD_GET_INFO: /proc/PID is hidden from slotd's user for other users'
 * processes under the unit's ProtectProc=invisible. Else by
 * /proc/PID/cgroup. Returns 0, or -1 with errno set. */
static int
peer_cgroup(const struct libsrv *s, int pidfd, int pid, char *cg, size_t len, bool *ok)
{
	struct lib_pidfd_info pi = { .mask = LIB_PIDFD_INFO_CGROUPID };
	char run[CCONF_PATH_MAX + 2];

	snprintf(run, sizeof(run), "/%s", s->cgroup);
	if (pidfd >= 0 && ioctl(pidfd, LIB_PIDFD_GET_INFO, &pi) == 0 &&
	    (pi.mask & LIB_PIDFD_INFO_CGROUPID)) {
		*ok = cg_id_under(s, pi.cgroupid, s->d->conf.attach_from, cg, len) ||
		    cg_id_under(s, pi.cgroupid, run, cg, len);
		/* Named for the refusal where /proc lets us. */
		if (!*ok && libsrv_proc_cgroup(pid, cg, len) == -1)
			snprintf(cg, len, "(id %llu)", (unsigned long long)pi.cgroupid);
		return 0;
	}
	if (pidfd >= 0 && errno == ESRCH)
		return -1;
	if (libsrv_proc_cgroup(pid, cg, len) == -1)
		return -1;
	*ok = libsrv_cgroup_under(cg, s->d->conf.attach_from) || libsrv_cgroup_under(cg, run);
	return 0;
}

/* The caller's own process into the run cgroup: by the pid the kernel
 * gives for the socket's peer, never one named in the request. */
static void
do_attach(struct lclient *c)
{
	struct libsrv *s = c->s;
	struct ucred cr;
	socklen_t l = sizeof(cr);
	char buf[32], cg[PATH_MAX], why[160];
	int n, pidfd = -1;
	bool ok;

	if (s->procs_fd < 0) {
		answer(c, "err EOPNOTSUPP slotd has no run cgroup (no cgroup v2, or [lib] cgroup "
		    "is empty); only the hijacked ports go through slot");
		return;
	}
	if (s->d->conf.attach_from[strspn(s->d->conf.attach_from, ", \t")] == '\0') {
		answer(c, "err EPERM attach is off: [lib] attach_from is empty");
		return;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) == -1 || cr.pid <= 0) {
		answer(c, "err EPROTO cannot tell the caller's process");
		return;
	}
	/* The peer's pidfd names the process itself, not a number that a new
	 * process may take once it exits (SO_PEERCRED's pid). ENOPROTOOPT
	 * (before Linux 6.5): by the pid alone, see peer_check. Any other
	 * error: the peer is gone. */
	l = sizeof(pidfd);
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &l) == -1) {
		pidfd = -1;
		if (errno != ENOPROTOOPT) {
			answer(c, "err EPERM process %d has exited (%s)", (int)cr.pid,
			    strerror(errno));
			return;
		}
	}
	if (libsrv_peer_check(pidfd, (int)cr.pid, (unsigned)cr.uid, why, sizeof(why)) == -1) {
		log_info("attach refused: %s", why);
		answer(c, "err EPERM %s", why);
		goto out;
	}
	/* Moving a process out of its cgroup lifts that cgroup's limits and
	 * filters (a service's, a container's): only from where the operator
	 * allows. */
	if (peer_cgroup(s, pidfd, (int)cr.pid, cg, sizeof(cg), &ok) == -1) {
		answer(c, "err EPERM cannot tell process %d's cgroup: %s", (int)cr.pid,
		    strerror(errno));
		goto out;
	}
	if (!ok) {
		log_info("attach refused: process %d (uid %u) is in cgroup %s, not under "
		    "[lib] attach_from (%s)", (int)cr.pid, (unsigned)cr.uid, cg,
		    s->d->conf.attach_from);
		answer(c, "err EPERM process %d is in cgroup %s, which [lib] attach_from (%s) "
		    "does not list: slotd moves no process out of another cgroup", (int)cr.pid, cg,
		    s->d->conf.attach_from);
		goto out;
	}
	n = snprintf(buf, sizeof(buf), "%d\n", (int)cr.pid);
	if (write(s->procs_fd, buf, (size_t)n) != n) {
		answer(c, "err EPERM moving process %d into %s: %s", (int)cr.pid, s->cgroup_dir,
		    strerror(errno));
		goto out;
	}
	/* Still there: the pid we wrote was its own all along (a process's
	 * pid is not reused before it is reaped). Gone: the pid may have
	 * named another process when we wrote it. */
	if (!peer_alive(pidfd, (int)cr.pid)) {
		log_warnx("attach: process %d (uid %u) exited while it was being moved; had its "
		    "pid been reused at once, another process would be in %s now", (int)cr.pid,
		    (unsigned)cr.uid, s->cgroup_dir);
		answer(c, "err EPERM process %d has exited", (int)cr.pid);
		goto out;
	}
	s->d->ctr.lib_attached++;
	log_info("process %d (uid %u) attached to %s", (int)cr.pid, (unsigned)cr.uid,
	    s->cgroup_dir);
	answer(c, "ok");
out:
	if (pidfd >= 0)
		close(pidfd);
}

/* A descriptor a program passed: closed without blocking the loop. */
static void
drop_fd(struct libsrv *s, int fd)
{
	switch (closer_close(s->closer, fd)) {
	case CLOSER_NOW:
		break;
	case CLOSER_QUEUED:
		s->d->ctr.lib_close_deferred++;
		break;
	case CLOSER_FULL: {
		uint64_t now = clock_mono_us();
		s->d->ctr.lib_close_overflow++;
		if (s->closer_logged_us == 0 || now - s->closer_logged_us >= 10000000) {
			s->closer_logged_us = now;
			log_warnx("lib socket: %llu passed descriptors left open so far: the "
			    "thread that closes them is stuck in a close (%zu waiting)",
			    s->d->ctr.lib_close_overflow, closer_queued(s->closer));
		}
		break;
	}
	}
}

union ctlbuf {
	struct cmsghdr h;
	char b[CMSG_SPACE(FDS_MAX * sizeof(int))];
};

size_t
libsrv_msg_fds(struct msghdr *mh, ssize_t n, int *fds, size_t max)
{
	size_t k = 0;

	/* A failed recvmsg leaves the control buffer and msg_controllen as
	 * they were: uninitialised bytes, not descriptors. */
	if (n < 0)
		return 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS ||
		    cm->cmsg_len < CMSG_LEN(0))
			continue;
		size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nfd && k < max; i++)
			memcpy(&fds[k++], CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
	}
	return k;
}

/* Each descriptor of a message recvmsg took (n: its result), to drop_fd. */
static void
drop_fds(struct libsrv *s, struct msghdr *mh, ssize_t n)
{
	int fds[FDS_MAX];
	size_t k = libsrv_msg_fds(mh, n, fds, FDS_MAX);

	for (size_t i = 0; i < k; i++)
		drop_fd(s, fds[i]);
}

/* Closes a client's connection. What it left unread goes first: closed
 * with bytes unread a unix socket resets its peer, which may then lose the
 * answer; and descriptors still queued on it would get their last close in
 * this thread, inside close(2) (closer.h). */
static void
conn_close(struct libsrv *s, int fd)
{
	char buf[2048];
	union ctlbuf cb;

	/* Nothing more may come in while we read what is there. */
	(void)shutdown(fd, SHUT_RD);
	for (int i = 0; i < DRAIN_MAX; i++) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
		    .msg_controllen = sizeof(cb.b) };
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n == -1 && errno == EINTR)
			continue;
		drop_fds(s, &mh, n);
		if (n <= 0) {
			/* Empty (EAGAIN, EOF, or an error, which comes only
			 * once the queue is empty). */
			close(fd);
			return;
		}
	}
	drop_fd(s, fd);
}

static void
client_free(struct lclient *c)
{
	struct libsrv *s = c->s;

	ev_io_stop(s->d->loop, &c->io);
	ev_timer_stop(s->d->loop, &c->timer);
	conn_close(s, c->fd);
	if (c->passed >= 0)
		drop_fd(s, c->passed);
	TAILQ_REMOVE(&s->clients, c, link);
	s->nclients--;
	free(c);
}

static void
handle(struct lclient *c, char *line)
{
	c->s->d->ctr.lib_requests++;
	if (strncmp(line, "connect ", 8) == 0)
		do_connect(c, line + 8);
	else if (strncmp(line, "decision ", 9) == 0)
		do_decision(c, line + 9);
	else if (strcmp(line, "attach") == 0)
		do_attach(c);
	else
		answer(c, "err EINVAL unknown request (connect, decision, attach)");
}

/* Keeps one descriptor that came with the data (n: recvmsg's result);
 * any other is closed. */
static void
take_fds(struct lclient *c, struct msghdr *mh, ssize_t n)
{
	int fds[FDS_MAX];
	size_t k = libsrv_msg_fds(mh, n, fds, FDS_MAX);

	for (size_t i = 0; i < k; i++) {
		if (c->passed < 0)
			c->passed = fds[i];
		else {
			c->more_fds = true;
			drop_fd(c->s, fds[i]);
		}
	}
}

static void
client_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct lclient *c = w->data;
	union ctlbuf cbuf;
	struct iovec iov = { c->buf + c->len, sizeof(c->buf) - 1 - c->len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.b,
	    .msg_controllen = sizeof(cbuf.b) };
	ssize_t n;
	char *nl;
	(void)loop;
	(void)revents;

	n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n == -1 && (errno == EAGAIN || errno == EINTR))
		return;
	take_fds(c, &mh, n);
	if (n <= 0) {
		client_free(c);
		return;
	}
	c->len += (size_t)n;
	c->buf[c->len] = '\0';
	if ((nl = memchr(c->buf, '\n', c->len)) == NULL) {
		if (c->len == sizeof(c->buf) - 1) {
			answer(c, "err EINVAL request longer than %d bytes", REQ_MAX - 1);
			client_free(c);
		}
		return;
	}
	*nl = '\0';
	if ((mh.msg_flags & MSG_CTRUNC) || c->more_fds)
		answer(c, "err EINVAL one descriptor at most");
	else
		handle(c, c->buf);
	client_free(c);
}

static void
client_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	client_free(w->data);
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct libsrv *s = w->data;
	struct lclient *c;
	int fd;
	(void)revents;

	while ((fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		if (s->nclients >= CLIENTS_MAX || (c = calloc(1, sizeof(*c))) == NULL) {
			static const char busy[] = "err EAGAIN slotd is busy, try again\n";
			(void)send(fd, busy, sizeof(busy) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
			conn_close(s, fd);
			continue;
		}
		c->s = s;
		c->fd = fd;
		c->passed = -1;
		ev_io_init(&c->io, client_cb, fd, EV_READ);
		c->io.data = c;
		ev_io_start(loop, &c->io);
		ev_timer_init(&c->timer, client_timeout_cb, CLIENT_TIMEOUT_S, 0.);
		c->timer.data = c;
		ev_timer_start(loop, &c->timer);
		TAILQ_INSERT_TAIL(&s->clients, c, link);
		s->nclients++;
	}
}

int
libsrv_start(struct slotd *d, int fd)
{
	struct libsrv *s = srv_of(d);

	if (s == NULL)
		return -1;
	s->fd = fd;
	ev_io_init(&s->io, accept_cb, fd, EV_READ);
	s->io.data = s;
	ev_io_start(d->loop, &s->io);
	return 0;
}

void
libsrv_stop(struct slotd *d)
{
	struct libsrv *s = d->lib;
	struct pending *p;

	if (s == NULL)
		return;
	while (!TAILQ_EMPTY(&s->clients))
		client_free(TAILQ_FIRST(&s->clients));
	while ((p = TAILQ_FIRST(&s->pending)) != NULL) {
		TAILQ_REMOVE(&s->pending, p, link);
		free(p);
	}
	if (s->fd >= 0) {
		ev_io_stop(d->loop, &s->io);
		close(s->fd);
	}
	/* The cgroup stays: slotd no longer may remove it, programs may
	 * still run in it, and the next start takes it again. */
	if (s->procs_fd >= 0)
		close(s->procs_fd);
	if (closer_free(s->closer, 2000) == -1)
		log_warnx("lib socket: a passed descriptor's close still blocks; left to the exit");
	free(s);
	d->lib = NULL;
}
