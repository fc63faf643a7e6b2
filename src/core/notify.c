#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/errbuf.h"
#include "slot/notify.h"

int
notify_parse_addr(const char *s, struct sockaddr_un *sun, socklen_t *len)
{
	size_t n = s ? strlen(s) : 0;

	memset(sun, 0, sizeof(*sun));
	sun->sun_family = AF_UNIX;
	if (n < 2 || (s[0] != '/' && s[0] != '@') || n >= sizeof(sun->sun_path))
		return -1;
	memcpy(sun->sun_path, s, n);
	if (s[0] == '@') {
		/* Abstract: a leading NUL, and the length says where it ends. */
		sun->sun_path[0] = '\0';
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else {
		*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	}
	return 0;
}

uint64_t
notify_parse_watchdog(const char *usec, const char *pid, pid_t self)
{
	char *end;
	unsigned long long v;

	if (usec == NULL || usec[0] == '\0')
		return 0;
	if (pid && pid[0]) {
		errno = 0;
		long p = strtol(pid, &end, 10);
		if (errno || *end || p != (long)self)
			return 0;
	}
	errno = 0;
	v = strtoull(usec, &end, 10);
	if (errno || *end || usec[0] == '-')
		return 0;
	return v;
}

int
notify_init(struct notify *n, char *err, size_t errlen)
{
	const char *s = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun;
	socklen_t len;
	int rc = 0;

	memset(n, 0, sizeof(*n));
	n->fd = -1;
	n->watchdog_us = notify_parse_watchdog(getenv("WATCHDOG_USEC"), getenv("WATCHDOG_PID"),
	    getpid());
	if (s && s[0]) {
		if (notify_parse_addr(s, &sun, &len) == -1) {
			errbuf_set(err, errlen, "NOTIFY_SOCKET=%s: not a unix socket address", s);
			rc = -1;
		} else if ((n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1 ||
		    connect(n->fd, (struct sockaddr *)&sun, len) == -1) {
			errbuf_set(err, errlen, "NOTIFY_SOCKET=%s: %s", s, strerror(errno));
			if (n->fd >= 0)
				close(n->fd);
			n->fd = -1;
			rc = -1;
		}
	}
	/* A watchdog nobody hears would only cost wake-ups. */
	if (n->fd == -1)
		n->watchdog_us = 0;
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_USEC");
	unsetenv("WATCHDOG_PID");
	return rc;
}

int
notify_send(const struct notify *n, const char *msg)
{
	ssize_t w;

	if (n->fd == -1)
		return 0;
	do
		w = send(n->fd, msg, strlen(msg), MSG_NOSIGNAL);
	while (w == -1 && errno == EINTR);
	return w == -1 ? -1 : 0;
}

static void
wd_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct notify *n = w->data;
	(void)loop;
	(void)revents;

	/* The loop turned: that is all the watchdog asks. */
	if (notify_send(n, "WATCHDOG=1") == 0)
		n->pings++;
}

void
notify_watchdog_start(struct notify *n, struct ev_loop *loop)
{
	if (n->watchdog_us == 0 || n->fd == -1)
		return;
	double every = (double)n->watchdog_us / 2e6;
	n->loop = loop;
	ev_timer_init(&n->wd, wd_cb, every, every);
	n->wd.data = n;
	ev_timer_start(loop, &n->wd);
	wd_cb(loop, &n->wd, 0);
}

void
notify_fini(struct notify *n)
{
	if (n->loop)
		ev_timer_stop(n->loop, &n->wd);
	n->loop = NULL;
	if (n->fd >= 0)
		close(n->fd);
	n->fd = -1;
}
