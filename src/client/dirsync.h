#ifndef SLOT_CLIENT_DIRSYNC_H
#define SLOT_CLIENT_DIRSYNC_H

#include <stdbool.h>
#include <stddef.h>

#include "slot/auth.h"
#include "slot/dirclient.h"
#include "client.h"

/* slotd's side of the directory (docs/slotd.md, "Directory"): a worker
 * thread fetches the listing from slot-dird at start and every refresh,
 * keeps the last one in the cache file, and hands changes to the event
 * loop, which merges them with the static relays into the relay set. The
 * loop never waits for the directory: at start the set comes from the
 * static relays and the cache file. */

/* Loads the cache file if [directory] urls is set (a bad or missing file is
 * logged and skipped). Sets d->dir; NULL without urls. Returns 0, or -1 with
 * err (out of memory). */
int dirsync_init(struct slotd *d, char *err, size_t errlen);

/* Makes conf's static relays plus the directory's the relay set
 * (relays_apply: atomic, links and marks of relays that stay are kept). */
int dirsync_apply(struct slotd *d, const struct cconf *conf, char *err, size_t errlen);

/* Starts the worker (after the capabilities are dropped: threads inherit
 * them). Nothing without d->dir. Returns 0, or -1 with err. */
int dirsync_start(struct slotd *d, char *err, size_t errlen);

/* SIGHUP, before nc is applied: [directory] keys keep their running values
 * (with a warning when they differ). */
void dirsync_reload_conf(const struct slotd *d, struct cconf *nc);
/* SIGHUP, after: the next calls are signed with key (shared mode), or with
 * id (identity mode). */
void dirsync_set_key(struct slotd *d, const struct auth_key *key);
void dirsync_set_ident(struct slotd *d, const struct ident *id);

/* Stops and joins the worker (a call in flight may take up to timeout) and
 * frees everything. */
void dirsync_stop(struct slotd *d);

struct dirsync_stats {
	unsigned long long fetches_ok;		/* a new listing */
	unsigned long long fetches_unchanged;	/* "unchanged" */
	unsigned long long fetches_failed;	/* no URL answered */
	unsigned long long fetches_refused;	/* answers refused: unsigned, forged */
	size_t revoked;				/* serials in the revocation list held */
	size_t relays;				/* directory relays in the set */
	bool cache_loaded;			/* started from the cache file */
	char version[DIRC_VERSION_MAX];		/* of the listing in force, "" if none */
	char url[CONF_URL_LEN];			/* that answered last, "" if none */
};
void dirsync_stats(struct slotd *d, struct dirsync_stats *st);

/* The listing in force and its landmarks (NULL and 0 without a directory
 * or before the first listing; *land NULL without a directory). Valid
 * until the next listing is applied. */
const struct dirc_relay *dirsync_listing(const struct slotd *d, size_t *n,
    const struct dirc_landmarks **land);

/* Pure parts, for the tests. */

/* The relay set: static relays first, in order, then the directory's whose
 * control endpoint is not listed yet, group g as CCONF_DIR_GROUP + g; at
 * most max in all. *out is malloc'ed (NULL if empty); *dropped counts the
 * directory relays left out for max. Returns 0, or -1 (out of memory). */
int dirsync_merge(const struct cconf_relay *st, size_t nst, const struct dirc_relay *dr,
    size_t ndr, size_t max, struct cconf_relay **out, size_t *n, size_t *dropped);

/* The cache file: "slot-relays 1 <version>", then "<relay> <data_port>
 * <group>" per relay. Written to path.tmp (whatever was there removed first),
 * fsynced, renamed (mode 0644; the directory is made, 0755, if missing).
 * Returns 0, or -1 with err. */
int dirsync_cache_write(const char *path, const char *version, const struct dirc_relay *r,
    size_t n, char *err, size_t errlen);
/* Returns 0 with *out (malloc'ed, NULL if empty), *n and version; 1 if there
 * is no file; -1 with "path:line: reason" (or "path: reason") in err. */
int dirsync_cache_read(const char *path, char version[DIRC_VERSION_MAX],
    struct dirc_relay **out, size_t *n, char *err, size_t errlen);
/* The same for the signed form (identity mode): "slot-relays 2" and what the
 * directory signed, checked again (against ca_pk, at now) into *out. */
int dirsync_cache_read_signed(const char *path, const uint8_t ca_pk[IDENT_PK_LEN],
    uint64_t now, struct dirc_listing *out, char *err, size_t errlen);
/* Both read the file through this: a regular file only, not through a
 * symlink, at most 32 MiB + 4 KiB, never blocking; anything else is refused
 * with what it is ("path: a FIFO, not read ..."). Returns 0 with *buf
 * (malloc'ed, NUL-terminated) and *len, 1 if there is no file, -1 with err. */
int dirsync_cache_load(const char *path, char **buf, size_t *len, char *err, size_t errlen);

#endif
