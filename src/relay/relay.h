#ifndef SLOT_RELAY_RELAY_H
#define SLOT_RELAY_RELAY_H

#include <sys/queue.h>
#include <ev.h>

#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/ctlsrv.h"
#include "slot/htab.h"
#include "slot/ident.h"
#include "admit.h"
#include "datahold.h"
#include "kpipe.h"
#include "rconf.h"

/* The state of one slot-relayd: configuration, key, tables and counters,
 * shared by the modules that make up the daemon (pipe, ctrl, probe, stats). */

struct relay_counters {
	unsigned long long pipes_open;		/* gauge: joined, splicing */
	unsigned long long pipes_pending;	/* gauge: connecting or waiting for data */
	unsigned long long pipes_total;		/* pipes joined since start */
	unsigned long long pipes_failed;	/* PIPE_FAIL answers */
	unsigned long long pipes_expired;	/* pending pipes never joined */
	unsigned long long pipes_reset;		/* open pipes ended by a reset (both sides RST) */
	unsigned long long pipes_peer_timeout;	/* ... because a peer stopped answering */
	unsigned long long pipes_idle_timeout;	/* ... by idle_timeout */
	unsigned long long pipes_half_closed_timeout;	/* ... by half_closed_timeout */
	unsigned long long kpipe_waits;		/* reading paused for want of a kernel pipe */
	unsigned long long congestion_checks;	/* legs' retransmissions read (ccwatch.h) */
	unsigned long long congestion_switches;	/* ... legs switched to congestion_on_loss */
	unsigned long long send_buffers_raised;	/* legs given [pipe] send_buffer when full */
	unsigned long long bytes_client_to_server;
	unsigned long long bytes_server_to_client;
	unsigned long long probes_answered;
	unsigned long long probes_refused;	/* answered with policy, rate or busy */
	unsigned long long probes_dropped;	/* malformed, unauthentic, stale, replayed */
	unsigned long long probes_uncached;	/* measured through a lost SYN: not cached */
	unsigned long long measure_syn;		/* measurements by a bare SYN */
	unsigned long long measure_connect;	/* by a TCP connect (handover, or no raw socket) */
	unsigned long long handovers;		/* measurements' connections taken by pipes */
	unsigned long long handovers_unused;	/* ... reset unused: hold over, or pushed out */
	unsigned long long handover_preconnects;	/* connects begun on a cache hit */
	unsigned long long handovers_connecting;	/* ...taken by a pipe still connecting */
	unsigned long long control_conns;	/* gauge */
	unsigned long long control_errors;	/* ERROR messages sent */
	unsigned long long control_refused;	/* connections over a cap, closed at once */
	unsigned long long control_evicted;	/* unauthenticated, pushed out at the global cap */
	unsigned long long control_deadline;	/* closed: no valid message in time */
	unsigned long long control_unauthentic;	/* closed, unanswered: bad message */
	unsigned long long control_rate_limited;	/* messages refused over the rate */
	unsigned long long data_rejected;	/* data connections with no pipe */
	unsigned long long data_early;		/* data connections before the server's connect */
	unsigned long long data_held;		/* matched no pipe on arrival: held (datahold.c) */
	unsigned long long data_held_joined;	/* ... then joined the pipe of a late PIPE_ESTABLISH */
	unsigned long long data_held_expired;	/* ... reset: nothing came for them in time */
	unsigned long long data_held_evicted;	/* ... reset: pushed out of a full hold */
	unsigned long long pipes_tokened;	/* PIPE_ESTABLISH_TOKEN accepted */
	unsigned long long data_token;		/* data connections joined by their SYN's token */
	unsigned long long data_token_unknown;	/* ... reset: a token no pending pipe has */
	unsigned long long data_token_fallback;	/* joined without a token: the one tokened
						 * pending pipe of their source address */
	unsigned long long peer_pings;		/* other relays' RTT probes answered */
	unsigned long long peers;		/* gauge: other relays listed */
	unsigned long long peer_probes_sent, peer_probes_answered, peer_probes_lost;
	unsigned long long hellos_accepted;	/* peers authenticated (control, UDP) */
	unsigned long long hellos_refused;	/* certificate, role, validity, revoked, replayed */
	unsigned long long hellos_throttled;	/* probe-port HELLOs over the global rate */
	unsigned long long peers_revoked;	/* dropped by relay_revoke */
	unsigned long long chains_requested;	/* PIPE_ESTABLISH_CHAIN received */
	unsigned long long chains_refused;	/* ... refused here: disabled, invalid hops */
	unsigned long long chains_failed;	/* ... answered PIPE_FAIL, any reason */
	unsigned long long chains_next_hop_failed;	/* ... NEXT_HOP: the next relay
						 * unreachable or unusable */
	unsigned long long chains_joined;	/* chain pipes joined (open) */
};

struct pipe;
struct ctrl_conn;
struct probe_srv;
struct dirlink;
struct nexthops;
struct peers;
struct peertab;
struct chains;
struct initcwnd;

TAILQ_HEAD(pipe_list, pipe);
TAILQ_HEAD(ctrl_list, ctrl_conn);

struct relay {
	struct ev_loop *loop;
	struct rconf conf;
	const char *conf_path;
	struct auth_key key;		/* shared mode; the directory's calls */
	int auth_mode;			/* enum ident_mode */
	struct ident id;		/* identity mode: this relay's */
	struct peertab *known;		/* identity mode: authenticated peers */
	struct ident_revoked revoked;	/* refused serials (relay_revoke) */
	struct admit *admit;		/* control connection caps; rate, then replay, per kind */
	struct kpipe_pool kpipes;
	struct relay_counters ctr;
	struct ctl_ident ident;		/* name, version, start: for slotctl and metrics */
	uint8_t hkey[16];		/* hash key of the tables below */

	struct pipe_list pipes;		/* every pipe */
	size_t npipes;
	struct htab pending;		/* connecting or pending, by client endpoint */
	struct htab owners;		/* pending count per control peer address */
	struct htab pending_tok;	/* connecting or pending, by pipe token */
	struct datahold hold;		/* data connections that came before their pipe */
	int save_syn;			/* the data listener saves SYNs: tokens work */
	char cc_default[SOCK_CC_NAME_MAX];	/* the netns's congestion control,
						 * read at start and reload ("":
						 * unknown): what a new socket gets */
	char cc_on_loss[SOCK_CC_NAME_MAX];	/* a leg that retransmits switches
						 * to it ("": none; relayd.c) */
	int sndbuf_ok;			/* the kernel unlocks a raised send buffer:
					 * 1, -1 not, 0 not asked yet (at the first
					 * raise: with the privileges pipes run with) */
	bool sndbuf_force;		/* ... past net.core.wmem_max (CAP_NET_ADMIN) */
	uint64_t next_pipe_id;

	struct ctrl_list ctrls;		/* authenticated control connections */
	struct ctrl_list ctrls_new;	/* not yet: oldest first */
	int ctrl_fd, data_fd;
	ev_io ctrl_accept, data_accept;
	ev_timer accept_retry;		/* paused accepting on EMFILE */

	struct probe_srv *probe;
	struct ctlsrv *stats;
	struct ctlsrv *metrics;		/* HTTP; NULL: no metrics_listen */
	struct dirlink *dir;		/* NULL: no directory configured */
	struct peers *peers;
	struct chains *chains;		/* links to next relays (chain.c) */
	struct nexthops *nexthops;	/* the relays a chain may name (nexthops.c) */
	struct initcwnd *iw;		/* learned initial windows; NULL: off */

	int draining;
	ev_timer drain_timer;
	ev_signal sig[3];		/* SIGHUP, SIGTERM, SIGINT (daemon_signals) */
};

/* Called whenever a pipe goes away: ends a drain once nothing is left. */
void relay_pipe_gone(struct relay *r);

#endif
