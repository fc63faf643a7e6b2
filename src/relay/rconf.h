#ifndef SLOT_RELAY_RCONF_H
#define SLOT_RELAY_RCONF_H

#include <stdbool.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/conf.h"
#include "slot/log.h"
#include "slot/sock.h"
#include "policy.h"

/* slot-relayd's configuration: defaults, INI keys, validation. The key
 * itself is loaded by the daemon (it needs privileges); here only its path. */

#define RCONF_PATH_MAX 256
/* [pipe] congestion_on_loss when the file says nothing ([pipe] congestion:
 * the system's). */
#define RCONF_CONGESTION_ON_LOSS_DEFAULT "bbr"

struct rconf {
	/* [relay] */
	char user[64];
	char key_file[RCONF_PATH_MAX];
	struct endpoint probe_listen;
	struct endpoint control_listen;
	struct endpoint data_listen;
	char stats_socket[RCONF_PATH_MAX];
	struct endpoint metrics_listen;	/* Prometheus over HTTP; family 0: off */
	enum slog_level log_level;

	/* [limits] */
	uint64_t max_pipes;
	uint64_t max_pending_per_client;
	uint64_t connect_timeout_ms;
	uint64_t pending_timeout_ms;
	uint64_t data_hold_ms;		/* 0: a data connection with no pipe is reset at once */
	uint64_t idle_timeout_ms;	/* 0: never */
	uint64_t half_closed_timeout_ms;	/* 0: never */
	uint64_t drain_timeout_ms;
	uint64_t control_idle_timeout_ms;
	uint64_t control_first_timeout_ms;	/* a new connection's first valid message */
	uint64_t max_control_conns;
	uint64_t max_control_per_source;
	double control_rate, control_burst;	/* messages per source */
	double relay_control_rate, relay_control_burst;	/* ... from a relay (identity) */
	uint64_t max_pending_per_relay;	/* pending pipes of a relay (identity): chains */
	uint64_t max_kernel_pipes;	/* reservations; 0: 2 * max_pipes */
	uint64_t pipe_size;
	uint64_t keepalive_idle_ms;
	uint64_t keepalive_interval_ms;
	uint64_t keepalive_count;
	uint64_t user_timeout_ms;	/* TCP_USER_TIMEOUT; 0: the kernel's */

	/* [chain] */
	bool chain_allow;		/* be the first or a middle relay of chains */
	bool chain_any_hop;		/* next_hops = any: not only the listed relays */
	uint64_t chain_link_idle_ms;	/* an unused link to a next relay closes */
	uint64_t chain_max_links;	/* links to next relays at once */
	/* [pipe] */
	char congestion[SOCK_CC_NAME_MAX];	/* of the legs the relay sends on;
						 * "": the system's default */
	char congestion_on_loss[SOCK_CC_NAME_MAX];	/* a leg's algorithm once it
						 * has retransmitted; "": off */
	int congestion_on_loss_set;	/* written in the file (else the default:
					 * see relayd.c) */
	uint64_t send_buffer;		/* a leg's send buffer once it first
					 * fills (bytes); 0: the kernel's alone */

	/* [pipe]: learned initial windows (iwlearn.h, docs/relay.md) */
	bool learn_initcwnd;
	uint64_t initcwnd_max;		/* segments */
	uint64_t initcwnd_prefix4, initcwnd_prefix6;	/* bits */
	uint64_t initcwnd_expiry_ms;
	uint64_t initcwnd_max_prefixes;

	/* [policy] */
	struct policy policy;	/* ports, allow, deny; self filled by the daemon */

	/* [probe] */
	uint64_t rtt_cache_ttl_ms;
	uint64_t probe_timeout_ms;
	uint64_t handover_ms;		/* a measurement's connection kept for a pipe; 0: off */
	bool preconnect;		/* with handover: a cached answer begins a connect */
	double requester_rate, requester_burst;
	double destination_rate, destination_burst;
	uint64_t max_inflight;

	/* [auth] */
	uint64_t max_clock_skew_ms;
	int auth_mode;			/* enum ident_mode */
	char id_key[RCONF_PATH_MAX];	/* this host's key, certificate, the CA */
	char id_cert[RCONF_PATH_MAX];
	char id_ca[RCONF_PATH_MAX];

	/* [directory] */
	struct conf_urls dir_urls;	/* none: no directory */
	struct endpoint advertise;	/* family 0: derived (see rconf_load) */
	struct endpoint advertise2;	/* a dual-stack relay's endpoint of the other
					 * family, registered too; family 0: none */
	uint64_t dir_timeout_ms;
	uint64_t list_interval_ms;
	uint64_t measure_interval_ms;
	double measure_rate;		/* peer probes per second, at most */
};

/* The socket options of a pipe's legs (keepalive, user timeout, RST on
 * loss, congestion control): the data listener carries them for the client
 * legs it accepts, a server leg gets them at its connect. o->congestion
 * points into c. */
void rconf_leg(const struct rconf *c, struct sock_leg *o);

/* How long a pipe is open before its server leg gets keepalive and the
 * user timeout (sock_set_leg_later): half the shorter of keepalive_idle
 * and user_timeout, so that neither finds a dead peer later than if it
 * had been set at the connect (pipe.c, half_attach). */
uint64_t rconf_leg_later_ms(const struct rconf *c);

/* Fills c with the defaults (those of etc/relayd.conf). */
void rconf_defaults(struct rconf *c);

/* Defaults, then path (NULL: defaults only). Returns 0, or -1 with
 * "path:line: reason" in err; c is then freed and must not be used. */
int rconf_load(struct rconf *c, const char *path, char *err, size_t errlen);

void rconf_free(struct rconf *c);

#endif
