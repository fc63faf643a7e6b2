#ifndef SLOT_DIRECTORY_DIRD_H
#define SLOT_DIRECTORY_DIRD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "slot/auth.h"
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
};

struct dird {
	pthread_mutex_t mu;
	struct dconf conf;		/* the running configuration */
	struct auth_key key;
	struct replay *replay;
	struct dstate *state;
	struct dird_counters ctr;
	bool regroup_running;		/* the regroup thread is clustering */
	struct dland land;
	char land_version[DSTATE_VERSION_LEN];	/* the version d->land was checked at */
	uint64_t land_at_us;			/* when, monotonic */		/* the landmarks of the version in force (dland.h) */
};

#endif
