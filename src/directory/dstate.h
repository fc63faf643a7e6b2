#ifndef SLOT_DIRECTORY_DSTATE_H
#define SLOT_DIRECTORY_DSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/ident.h"
#include "slot/mcl.h"

/*
 * slot-dird's registry: the relays, their RTT reports, their groups and the
 * listing's version. Pure: time comes from the caller (monotonic
 * microseconds, "now"), nothing here locks, logs or does I/O; the daemon
 * holds one mutex around every call.
 *
 * Relays are kept in registration order, which is the order of the listing,
 * of the grouping matrix and of the snapshot, so a restored state groups the
 * same way.
 *
 * The version is "<boot id, 16 hex digits>-<counter>". The counter moves
 * whenever the listing (relay set, data ports, groups) changes; the boot id
 * is drawn at a start that cannot vouch for the last version served.
 */

#define DSTATE_VERSION_LEN 48	/* "%016x-%llu" and the NUL */

struct dstate_params {
	uint64_t expire_after_us;	/* since the last register or heartbeat */
	size_t max_relays;
};

/* One report entry, already parsed. */
struct dstate_rtt_in {
	struct endpoint peer;
	uint32_t rtt_us;
};

/* One relay of a listing. */
struct dstate_entry {
	char relay[EP_STRLEN];		/* ep_fmt of its endpoint */
	uint16_t data_port;
	uint32_t group;
	uint64_t age_us;		/* since its last register or heartbeat */
	size_t nrtt;			/* peers it has reported about */
	bool has_cert;			/* identity mode: the relay's certificate */
	uint8_t cert[IDENT_CERT_LEN];
};

enum dstate_rc {
	DSTATE_OK = 0,
	DSTATE_NEW,		/* register: a relay not known before */
	DSTATE_UNKNOWN,		/* heartbeat, report: not registered (or expired) */
	DSTATE_LIMIT,		/* register: max_relays reached */
	DSTATE_NOMEM,
	DSTATE_TAKEN,		/* the endpoint is bound to another key */
};

struct dstate;

/* Returns NULL on allocation failure. The version starts at "<boot>-0". */
struct dstate *dstate_new(const struct dstate_params *p, uint64_t boot);
void dstate_free(struct dstate *s);

/* Takes effect from the next call (a lower max_relays removes no one). */
void dstate_set_params(struct dstate *s, const struct dstate_params *p);

/* Register (or register again): DSTATE_NEW, DSTATE_OK (known; data_port
 * updated), DSTATE_LIMIT or DSTATE_NOMEM. A new relay gets a group of its
 * own until the next regroup. */
enum dstate_rc dstate_register(struct dstate *s, const struct endpoint *relay,
    uint16_t data_port, uint64_t now);

/* DSTATE_OK or DSTATE_UNKNOWN. */
enum dstate_rc dstate_heartbeat(struct dstate *s, const struct endpoint *relay,
    uint64_t now);

/* Stores relay's RTTs to the peers in e (n entries, in order: a later entry
 * about the same peer wins); each replaces relay's earlier report about that
 * peer, and reports about other peers stay. Entries about unregistered peers
 * or about relay itself are skipped. *accepted counts the entries stored.
 * DSTATE_OK, DSTATE_UNKNOWN or DSTATE_NOMEM (nothing stored). */
enum dstate_rc dstate_report(struct dstate *s, const struct endpoint *relay,
    const struct dstate_rtt_in *e, size_t n, size_t *accepted);

/*
 * Identity mode: a relay's endpoint is bound to the public key of the
 * certificate it registered with, until it expires.
 *
 * dstate_owner: DSTATE_OK if a caller holding pk may register, heartbeat or
 * report for relay (it is not registered, or registered without a
 * certificate, or with one for pk), DSTATE_TAKEN if another key holds it.
 * dstate_set_cert: the certificate of a registered relay (raw, decodable by
 * ident_cert_decode), after the owner check and dstate_register; a new
 * certificate (a renewal, the same key) changes the listing. DSTATE_OK,
 * DSTATE_UNKNOWN, DSTATE_TAKEN (another key: nothing changed) or
 * DSTATE_LIMIT (raw does not decode).
 */
enum dstate_rc dstate_owner(const struct dstate *s, const struct endpoint *relay,
    const uint8_t pk[IDENT_PK_LEN]);
enum dstate_rc dstate_set_cert(struct dstate *s, const struct endpoint *relay,
    const uint8_t raw[IDENT_CERT_LEN]);

/* Called for each relay dstate_expire removes. */
typedef void (*dstate_gone_fn)(void *user, const char *relay, uint64_t age_us);

/* Removes the relays silent for longer than expire_after, with their reports
 * and every report about them. Returns how many. */
size_t dstate_expire(struct dstate *s, uint64_t now, dstate_gone_fn gone, void *user);

/* Removes the relays for which drop(user, view) is true (a revoked or
 * expired certificate, none where one is needed), as dstate_expire does,
 * calling gone (may be NULL) for each with why(user, view)'s reason.
 * Returns how many. */
struct dstate_relay_view;
typedef bool (*dstate_drop_fn)(void *user, const struct dstate_relay_view *v,
    const char **why);
typedef void (*dstate_dropped_fn)(void *user, const char *relay, const char *why);
size_t dstate_remove_if(struct dstate *s, dstate_drop_fn drop, dstate_dropped_fn gone,
    void *user);

/* Writes the current version into v. */
void dstate_version(const struct dstate *s, char v[DSTATE_VERSION_LEN]);
uint64_t dstate_boot(const struct dstate *s);
uint64_t dstate_counter(const struct dstate *s);
size_t dstate_count(const struct dstate *s);
bool dstate_has(const struct dstate *s, const struct endpoint *relay);

/* The listing, in registration order: *out is malloc'ed (NULL when empty).
 * Returns 0, or -1 out of memory. */
int dstate_listing(const struct dstate *s, uint64_t now, struct dstate_entry **out,
    size_t *n);

/* Number of distinct groups in the listing. */
size_t dstate_ngroups(const struct dstate *s);

/*
 * Grouping. dstate_regroup_pending says whether the relay set or a report
 * changed since the last dstate_rtt_matrix. dstate_rtt_matrix clears that
 * and returns the symmetric RTT matrix in milliseconds (n x n, row-major,
 * registration order, NaN for a pair neither side reported, mean of the two
 * reports when both did, zero diagonal), malloc'ed, with the generation of
 * the relay set it describes (*m NULL when n == 0). Returns 0 or -1 (out of
 * memory; the regroup stays pending).
 *
 * The caller runs the clustering without the lock, then hands the result
 * (group[i] for relay i of the matrix) to dstate_apply_groups, which also
 * marks every relay as grouped. Returns 1 if
 * the groups changed (the version moves), 0 if not, -1 if the relay set
 * changed meanwhile (nothing applied; the regroup is pending again).
 */
bool dstate_regroup_pending(const struct dstate *s);
int dstate_rtt_matrix(struct dstate *s, double **m, size_t *n, uint64_t *gen);

/*
 * The same input, sparse, for regrouping many relays: the pairs (RTT as in
 * dstate_rtt_matrix) go through an mcl_gbuild with gp into g (g->n relays,
 * registration order; with no relay g->n is 0 and nothing is allocated).
 * *old (malloc'ed, g->n entries) holds each relay's group as served now, or
 * UINT32_MAX (GRPSTAB_NONE) for a relay no regroup or snapshot grouped yet.
 * Clears the pending flag like dstate_rtt_matrix. Time O(n + reports) plus
 * the builder's; memory that of the graph (see mcl.h). Returns 0, or -1
 * with the reason in err (the regroup stays pending).
 */
int dstate_rtt_graph(struct dstate *s, const struct mcl_gparams *gp, struct mcl_graph *g,
    uint32_t **old, uint64_t *gen, char *err, size_t errlen);
int dstate_apply_groups(struct dstate *s, uint64_t gen, const uint32_t *group, size_t n);

/* Something a snapshot would hold changed since dstate_mark_saved. */
bool dstate_dirty(const struct dstate *s);
void dstate_mark_saved(struct dstate *s);

/*
 * For the snapshot (dsnap.c): iteration in registration order, and building
 * a state back.
 */
struct dstate_relay_view {
	const char *relay;		/* ep_fmt */
	uint16_t data_port;
	uint32_t group;
	uint64_t last_seen;		/* monotonic, as given to register/heartbeat */
	size_t nrtt;
	const struct ident_cert *cert;	/* decoded; NULL: none */
};

/* Relay i (0 <= i < dstate_count). */
void dstate_relay_at(const struct dstate *s, size_t i, struct dstate_relay_view *out);

/* Relay i's report j (0 <= j < nrtt): the peer's index and the RTT. */
void dstate_rtt_at(const struct dstate *s, size_t i, size_t j, size_t *peer, uint32_t *rtt_us);

/* All of relay i's reports at once (nrtt entries, in peer index order):
 * the peers' indexes and the RTTs. O(nrtt log(n / nrtt)), where nrtt calls
 * of dstate_rtt_at take O(nrtt log n): for readers of every report. */
void dstate_rtt_row(const struct dstate *s, size_t i, size_t *peer, uint32_t *rtt_us);

/* Appends a relay as it was (no limit check, no version change). Returns
 * DSTATE_OK, DSTATE_NEW is never returned; DSTATE_LIMIT if it is already
 * there (a corrupt snapshot), DSTATE_NOMEM. */
enum dstate_rc dstate_restore_relay(struct dstate *s, const struct endpoint *relay,
    uint16_t data_port, uint32_t group, uint64_t last_seen);

/* Sets the counter (the boot id is given to dstate_new). */
void dstate_restore_counter(struct dstate *s, uint64_t counter);

/* Replaces the boot id (the version changes with it). */
void dstate_set_boot(struct dstate *s, uint64_t boot);

/* Moves the version on, as if the listing had changed (relays dropped while
 * restoring). */
void dstate_bump(struct dstate *s);

#endif
