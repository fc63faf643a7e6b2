#ifndef SLOT_NOTIFY_H
#define SLOT_NOTIFY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include <ev.h>

/* The service manager's notification protocol (sd_notify(3), without
 * libsystemd): datagrams of "KEY=VALUE" lines to the unix socket named by
 * $NOTIFY_SOCKET (a path, or "@name" for an abstract socket). The daemons
 * say READY=1 once they serve, RELOADING=1 and READY=1 around SIGHUP,
 * STOPPING=1 on the way out, and WATCHDOG=1 from their event loop at half
 * of $WATCHDOG_USEC, so that a loop that stops turning gets the daemon
 * restarted (WatchdogSec= in the units). Without $NOTIFY_SOCKET every call
 * does nothing. Never logs: the caller does. */

struct notify {
	int fd;				/* connected; -1: no manager to tell */
	uint64_t watchdog_us;		/* 0: no watchdog asked for */
	struct ev_loop *loop;
	ev_timer wd;
	unsigned long long pings;	/* WATCHDOG=1 sent */
};

/* Parses a $NOTIFY_SOCKET value into *sun and its length. Returns 0, or -1
 * if it is neither an absolute path nor "@name", or too long. */
int notify_parse_addr(const char *s, struct sockaddr_un *sun, socklen_t *len);

/* $WATCHDOG_USEC as microseconds if it is meant for self ($WATCHDOG_PID
 * unset or self), else 0. */
uint64_t notify_parse_watchdog(const char *usec, const char *pid, pid_t self);

/* Reads the environment, connects the socket (so that messages still go
 * once the daemon has dropped privileges) and removes the three variables,
 * so that programs the daemon runs do not talk in its name. Returns 0
 * (n->fd -1 if there is no manager), or -1 with a reason in err (n is then
 * off, the daemon may go on). */
int notify_init(struct notify *n, char *err, size_t errlen);

/* Sends msg (one datagram, "READY=1\nSTATUS=..."). Returns 0 (also when
 * off), or -1 with errno. */
int notify_send(const struct notify *n, const char *msg);

/* Starts WATCHDOG=1 every watchdog_us / 2 from loop (nothing without a
 * watchdog). */
void notify_watchdog_start(struct notify *n, struct ev_loop *loop);

/* Stops the watchdog timer and closes the socket. */
void notify_fini(struct notify *n);

#endif
