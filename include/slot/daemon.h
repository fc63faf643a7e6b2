#ifndef SLOT_DAEMON_H
#define SLOT_DAEMON_H

#include <stdbool.h>

#include <ev.h>

#include "slot/log.h"

/* What the three daemons do alike before and around their own work: the
 * command line (-c, -l, -t, -V, -h and their long forms), logging, the
 * crypto library, the log level the file or -l chooses, the signals. */

struct daemon_args {
	const char *conf_path;		/* -c; the daemon's default otherwise */
	bool check_only;		/* -t */
	bool has_level;			/* -l given: it wins over the file's */
	enum slog_level level;
};

/* Parses argv for name (slotd, slot-relayd, slot-dird), whose configuration
 * is default_conf and whose -t checks what check_what says; prints the
 * usage or the version and exits as asked (0; 2 for a bad command line);
 * then starts logging and libsodium (exits 1 if that fails). */
void daemon_start(const char *name, const char *default_conf, const char *check_what,
    int argc, char **argv, struct daemon_args *out);

/* The level to log at: -l's, else the file's, which *conf_level is; it is
 * set and stored back in *conf_level. */
void daemon_log_level(const struct daemon_args *a, enum slog_level *conf_level);

/* SIGHUP, SIGTERM and SIGINT to cb, with data, on loop. */
void daemon_signals(struct ev_loop *loop, ev_signal sig[3],
    void (*cb)(struct ev_loop *, ev_signal *, int), void *data);

#endif
