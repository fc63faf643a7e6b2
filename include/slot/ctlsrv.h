#ifndef SLOT_CTLSRV_H
#define SLOT_CTLSRV_H

#include <stdbool.h>
#include <stddef.h>

#include <ev.h>

/* The daemons' unix-socket command server, for slotctl and the tests: a
 * client sends one command line ("counters", "json", ...) and reads the
 * answer until EOF. Answers of any size are written as the socket drains;
 * clients are few and short-lived (a bounded number, each with a deadline). */

struct ctl_out {
	char *buf;
	size_t len, cap;
	bool oom;		/* an append failed: the answer is cut short */
};

void ctl_printf(struct ctl_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Writes the answer to cmd (the line without its newline) into out. */
typedef void (*ctl_handler)(void *user, const char *cmd, struct ctl_out *out);

struct ctlsrv;

/* fd: a listening unix socket (owned from now on). NULL on allocation
 * failure (fd closed). */
struct ctlsrv *ctlsrv_start(struct ev_loop *loop, int fd, ctl_handler h, void *user);
void ctlsrv_stop(struct ctlsrv *s);

#endif
