#ifndef SLOT_DIRECTORY_DIRD_H
#define SLOT_DIRECTORY_DIRD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/replay.h"
#include "dconf.h"
#include "dland.h"
#include "dstate.h"

/*
 * What slot-dird's threads share. Abyss runs the XML-RPC methods on threads
 * of its own, one per connection; the main thread runs the libev loop
 * (signals, timers, the counters socket). Every field below mu is read and
 * written with mu held, by both sides.
 */

struct dird_counters {
	uint64_t calls_register, calls_heartbeat, calls_report, calls_list;
	uint64_t faults_malformed, faults_auth, faults_stale;
	uint64_t faults_unknown_relay, faults_limit, faults_internal;
	uint64_t relays_registered;	/* relays new to the directory */
	uint64_t relays_expired;
	uint64_t report_entries;	/* entries stored */
	uint64_t lists_full, lists_unchanged;
	uint64_t regroups, regroup_errors;
	uint64_t group_changes;		/* relays whose group a regroup changed */
	uint64_t regroup_last_changes;	/* gauges: of the last regroup applied */
	uint64_t regroup_last_us;	/* its time, snapshot to stabilised ids */
	uint64_t snapshots_written, snapshot_errors;
	uint64_t relays_revoked;	/* removed for a revoked or expired certificate */
	uint64_t revoked;		/* gauge: serials in the revocation list */
};

struct dird {
	/* Set at start, read-only afterwards (a change needs a restart). */
	int mode;			/* enum ident_mode */

	pthread_mutex_t mu;
	struct dconf conf;		/* the running configuration */
	struct auth_key key;		/* shared mode */
	struct ident id;		/* identity mode: ours, and the CA */
	struct ident_revoked revoked;	/* [auth] revoked as last read */
	struct replay *replay;
	struct dstate *state;
	struct dird_counters ctr;
	bool regroup_running;		/* the regroup thread is clustering */
	struct dland land;		/* the landmarks of the version in force (dland.h) */
	char land_version[DSTATE_VERSION_LEN];	/* the version d->land was checked at */
	uint64_t land_at_us;			/* when, monotonic */
	uint64_t land_warned_us;		/* said that landmarks were cut; 0: never */
};

#endif
