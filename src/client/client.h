#ifndef SLOT_CLIENT_CLIENT_H
#define SLOT_CLIENT_CLIENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <ev.h>

#include "slot/auth.h"
#include "slot/ctlsrv.h"
#include "slot/htab.h"
#include "slot/ident.h"
#include "slot/replay.h"
#include "slot/rng.h"
#include "slot/selcache.h"
#include "cconf.h"
#include "synq.h"
#include "slot/rlink.h"
#include "rules.h"

/* The state of one slotd, shared by its modules: hold (held SYNs, probing,
 * decisions), relays (the relay set, its links and marks), dirsync (relays
 * from the directory), cstats (the control socket) and slotd.c (start,
 * reload, stop). */

struct client_counters {
	unsigned long long syn_received;
	unsigned long long syn_retransmits_dropped;
	unsigned long long syn_malformed;	/* queued packets that were no first SYN */
	unsigned long long cache_hits, cache_misses;
	unsigned long long probes_sent, probe_replies, probe_replies_dropped;
	unsigned long long direct_probes;
	unsigned long long direct_probes_connect;	/* by connect: no raw socket for the family */
	unsigned long long decisions_direct, decisions_relay;
	unsigned long long decisions_chain;	/* of decisions_relay... chosen: a chain */
	unsigned long long direct_no_family_relay;	/* no relay of the connection's
							 * family (IPv6 through v4-only relays) */
	unsigned long long repairs;		/* relay taken: direct failed or silent past repair_timeout */
	unsigned long long relay_before_direct;	/* relay won before the direct probe answered */
	unsigned long long probes_beside;	/* probe sets led by a relay beside the server */
	unsigned long long pipes_ok, pipes_failed, pipes_timeout;
	unsigned long long early_verdicts;	/* cache_early: released before PIPE_OK */
	unsigned long long early_failures;	/* ...and the pipe then failed */
	unsigned long long early_unreached;	/* hits that waited: the relay had not reached the port */
	unsigned long long synack_waits;	/* SYNs sent with PIPE_ESTABLISH, PIPE_OK awaited
						 * at the relay's SYN-ACK (synack_hold) */
	unsigned long long synack_holds;	/* relays' SYN-ACKs held until PIPE_OK */
	unsigned long long synack_passed;	/* relays' SYN-ACKs that nothing waited for */
	unsigned long long synack_dropped;	/* ...that answered a SYN whose pipe had failed */
	unsigned long long synack_dropped_ct;	/* ...of those, as they held the DNAT entry */
	unsigned long long stale_nat_drops;	/* new SYNs that took over a reset connection's
						 * DNAT entry: entry deleted, SYN dropped */
	unsigned long long reused_ct_syns;	/* new SYNs on a reset connection's entry */
	unsigned long long reused_ct_drops;	/* ...without NAT, sent to a relay: entry
						 * deleted, SYN dropped */
	unsigned long long synack_dropped_rule;	/* ...as the rules queue only those (no
						 * conntrack from the queue) */
	unsigned long long synack_ct;		/* relays' SYN-ACKs read with their entry */
	unsigned long long synack_failures;	/* ...waits whose pipe failed: SYN-ACK dropped,
						 * conntrack entry forgotten, next SYN direct */
	unsigned long long ct_delete_errors;	/* conntrack entries that could not be forgotten */
	unsigned long long hold_timeouts;	/* released direct when hold_timeout passed */
	unsigned long long held_overflow;	/* released direct: max_held reached */
	unsigned long long token_pipes;		/* pipes requested with a token (NAT) */
	unsigned long long token_no_room;	/* released direct: no room in the SYN for it */
	unsigned long long token_unsupported;	/* wanted, but the relay takes none: by endpoint */
	unsigned long long lib_requests;	/* on the lib socket */
	unsigned long long lib_errors;		/* ...answered with an error */
	unsigned long long lib_offered;		/* sockets offered by programs (libslot) */
	unsigned long long lib_matched;		/* ...whose SYN came with their options */
	unsigned long long lib_attached;	/* processes moved into the run cgroup */
	unsigned long long lib_close_deferred;	/* passed fds closed by the closing thread */
	unsigned long long lib_close_overflow;	/* ...left open: its queue was full */
	unsigned long long reloads, reload_failures, rules_applied;
	unsigned long long decide_us_max;
};

/* One relay of the set, by its control endpoint. */
struct crelay {
	struct cconf_relay conf;
	uint32_t mark;			/* within relay_mask; stable across reloads */
	struct rlink *link;
	uint64_t quarantine_until_us;	/* monotonic; sits out of samples until then */
	unsigned long long pipes_ok, pipes_failed, probes;
	uint32_t rtt_us;		/* RTT(client, relay) of its last probe reply; 0: none */
	uint32_t rtt_est_us;		/* what the ranking took for RTT(client, relay); 0: none */
	uint32_t rank;			/* in the cover ranking (rank.h); SEL_NO_RANK: none */
	/* Chains (rank.h): the best lead-in to this relay through other
	 * relays, set with the ranking: its longest loop (0: none) and the
	 * relays on it, in path order. */
	uint32_t lead_us;
	struct crelay *lead_via[SEL_MAX_CHAIN - 1];
	unsigned nlead;
	uint32_t lead1_us;		/* the best through one relay alone (0: none) */
	struct crelay *lead1_via;
	uint64_t rules_gen;		/* the first rule set with its DNAT rule: it is
					 * used only once that set is in the kernel */
};

#define RECENT_MAX 256

struct decision {
	struct endpoint client, server;
	bool relayed;
	struct endpoint relay;
	struct endpoint next[SEL_MAX_CHAIN - 1];	/* a chain: the relays after relay */
	unsigned nnext;
	const char *why;
	uint32_t rtt_direct_us, path_rtt_us;
	uint64_t select_us;		/* SYN to the choice of path */
	uint64_t decide_us;		/* SYN to the verdict (pipe set up included) */
	uint32_t probes;
	bool cached;
	bool early;			/* released before PIPE_OK (a warm hit) */
	struct endpoint beside;		/* the relay in the server's prefix that led
					 * the probes; family 0: none */
};

struct hconn;
struct synp_sock;
TAILQ_HEAD(hconn_list, hconn);
struct dirsync;
struct rulesync;
struct libsrv;

struct slotd {
	struct ev_loop *loop;
	struct cconf conf;
	const char *conf_path;
	struct auth_key key;		/* shared mode; the directory's calls */
	int auth_mode;			/* enum ident_mode, set at start */
	struct ident id;		/* identity mode: ours */
	struct ident_revoked revoked;	/* relays refused (rlinks_revoke) */
	struct replay *replay;		/* probe replies and control messages */
	struct rng rng;
	uint8_t hkey[16];
	struct rlink_env env;
	struct client_counters ctr;
	struct ctl_ident ident;		/* name, version, start: for slotctl and metrics */

	struct synq *q;
	ev_io q_io;
	struct conntrack *ct;		/* synack_hold's way back to direct; NULL:
					 * unavailable */

	struct crelay **relays;		/* the set: static relays in config order,
					 * then the directory's */
	size_t nrelays;
	size_t relays_up;
	struct dirsync *dir;		/* NULL: no directory configured */
	struct rulesync *rsync;		/* rule sets off the loop; NULL: at start-up,
					 * when rules_apply runs them in place */
	uint64_t rules_gen;		/* the newest rule set's generation */
	uint64_t synack_gen;		/* the first rule set that queues the relays'
					 * SYN-ACKs (synack_hold); 0: the newest does not */
	struct rules_exec rules_exec;	/* from conf: tools, wait */

	struct htab conns;		/* held and lingering, by client endpoint */
	struct hconn_list held;		/* waiting for a verdict */
	struct hconn_list linger;	/* decided, oldest first */
	size_t nheld, nlinger;
	struct htab probes;		/* relay probes in flight, by request id */
	uint32_t next_probe_id;
	int probe_fd[2];		/* UDP, bypass-marked: IPv4, IPv6 (-1: none) */
	ev_io probe_io[2];
	struct selcache *cache;
	struct synp_sock *synp;		/* direct probes by bare SYN; NULL: by connect */

	struct decision recent[RECENT_MAX];
	size_t nrecent, recent_next;

	struct ctlsrv *ctl;
	struct libsrv *lib;		/* the lib socket and run cgroup; NULL: none */
	struct ctlsrv *metrics;		/* HTTP; NULL: no metrics_listen */
	ev_signal sig[3];		/* SIGHUP, SIGTERM, SIGINT (daemon_signals) */
	bool stopping;

	ev_timer rank_timer;		/* rank.h */
	size_t ranked, rank_greedy;	/* relays ranked; of them by the landmarks */
	size_t chain_ends;		/* relays with a lead-in (rank.c) */
	/* The last ranking's inputs, for rank_beside: over rank_n relays in
	 * d->relays' order then (every change of the set ranks again). */
	size_t rank_n, rank_nland;
	uint32_t *rank_cr, *rank_lr, *rank_rl;
};

#endif
