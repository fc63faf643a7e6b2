#ifndef SLOT_DIRECTORY_DSNAP_H
#define SLOT_DIRECTORY_DSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dstate.h"

/*
 * The snapshot of slot-dird's state: a text file, one record per line
 * (docs/directory.md, "State file"):
 *
 *   slot-dird-state 1
 *   boot <16 hex digits>
 *   counter <decimal>
 *   clean <0|1>
 *   saved <wall-clock unix microseconds>
 *   relay <ip:port> <data_port> <group> <last seen, wall-clock unix us>
 *   ...
 *   rtt <from ip:port> <to ip:port> <rtt_us>
 *   ...
 *   end <relay lines> <rtt lines>
 *
 * Monotonic times in the state become wall-clock times in the file and back,
 * so the daemon's downtime counts towards expiry. "clean 1" marks the file
 * written at exit: only then is its version the last one served, and kept.
 */

/* Largest file dsnap_read_file accepts. */
#define DSNAP_MAX_BYTES ((size_t)256 << 20)

/* Formats s into *buf (malloc'ed, *len bytes, NUL-terminated). Returns 0 or
 * -1 (out of memory). */
int dsnap_format(const struct dstate *s, uint64_t now_mono, uint64_t now_wall, bool clean,
    char **buf, size_t *len);

struct dsnap_info {
	size_t relays;		/* restored */
	size_t dropped;		/* silent for longer than expire_after */
	size_t rtts;		/* report entries restored */
	bool clean;		/* written at exit: boot id and counter kept */
};

/* Builds a state from a snapshot's text. Relays silent for longer than
 * p->expire_after_us are dropped (with their reports; the version moves).
 * The boot id is the file's when it says "clean 1", else fresh_boot.
 * Returns the state, or NULL with "line N: reason" in err. */
struct dstate *dsnap_parse(const char *text, size_t len, const struct dstate_params *p,
    uint64_t now_mono, uint64_t now_wall, uint64_t fresh_boot, struct dsnap_info *info,
    char *err, size_t errlen);

/* Writes buf to path atomically: path.tmp, fsync, rename, fsync of the
 * directory. Returns 0, or -1 with the reason in err. */
int dsnap_write_file(const char *path, const char *buf, size_t len, char *err,
    size_t errlen);

/* Reads path (at most DSNAP_MAX_BYTES) into *buf (malloc'ed, NUL-terminated).
 * Returns 0, or -1 with the reason in err and errno set (ENOENT: no file). */
int dsnap_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen);

#endif
