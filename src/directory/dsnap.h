#ifndef SLOT_DIRECTORY_DSNAP_H
#define SLOT_DIRECTORY_DSNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/ident.h"
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

/* Bytes of rtt lines the daemon writes at most. Relays report every peer
 * they probe, so rtt lines grow as n^2 (256 MiB at ~2,500 relays in a full
 * mesh) while relay lines grow as n (DSNAP_RELAY_LINE_MAX each: 27 MB for
 * 65,536 relays): a quarter of the read limit leaves room for every relay
 * line. The RTTs left out come back with the relays' next reports. */
#define DSNAP_RTT_BUDGET ((size_t)64 << 20)

/* Longest relay line: "relay", endpoint, data port, group, last seen and
 * the certificate in hex, with their separators. */
#define DSNAP_RELAY_LINE_MAX (6 + EP_STRLEN + 6 + 11 + 21 + 2 * IDENT_CERT_LEN + 1)

struct dsnap_stats {
	size_t relays;		/* relay lines written: every relay */
	size_t rtts;		/* rtt lines written */
	size_t rtts_left_out;	/* report entries not written (the budget) */
};

/*
 * Formats s into *buf (malloc'ed, *len bytes, NUL-terminated), with at most
 * rtt_budget bytes of rtt lines and never more than DSNAP_MAX_BYTES in all,
 * so that dsnap_read_file takes back whatever is written. Every relay line
 * is written; when the reports do not fit, each relay keeps its k nearest
 * peers (lowest RTT; ties in peer order), k the largest that fits, since
 * the nearest are what grouping uses. The end line counts what was written.
 * st (may be NULL) says what was written and left out. Returns 0, or -1
 * with errno ENOMEM, or EFBIG when the relay lines alone would pass
 * DSNAP_MAX_BYTES (more relays than max_relays allows).
 */
int dsnap_format(const struct dstate *s, uint64_t now_mono, uint64_t now_wall, bool clean,
    size_t rtt_budget, char **buf, size_t *len, struct dsnap_stats *st);

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
