#ifndef SLOT_CLIENT_CCONF_H
#define SLOT_CLIENT_CCONF_H

#include <stdbool.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/conf.h"
#include "slot/log.h"
#include "slot/select.h"
#include "rules.h"

/* slotd's configuration: defaults, INI keys, validation (etc/slotd.conf is
 * the reference and shows every default). The key itself is loaded by the
 * daemon; here only its path. */

#define CCONF_PATH_MAX 256
#define CCONF_MAX_RELAYS 4095	/* relay marks are 1..4095 within relay_mask */

/* Static groups are 0..CCONF_GROUP_MAX; the directory's group g becomes
 * CCONF_DIR_GROUP + g, so the two never share a group. */
#define CCONF_GROUP_MAX 0x7fffffffu
#define CCONF_DIR_GROUP 0x80000000u

#define CCONF_BACKEND_AUTO (-1)

struct cconf_relay {
	struct endpoint control;	/* probe (UDP) and control (TCP) port */
	uint16_t data_port;		/* default control port + 1 */
	uint32_t group;			/* default: its index in the list (one group per relay) */
};

/* The top bit of the group tells where a relay of the set came from. */
static inline bool
cconf_relay_from_dir(const struct cconf_relay *r)
{
	return (r->group & CCONF_DIR_GROUP) != 0;
}

/* [nat] mode: when a pipe is matched at the relay by a token in the SYN
 * rather than by the client endpoint (docs/slotd.md, "Clients behind NAT"). */
enum cconf_nat {
	CCONF_NAT_AUTO = 0,	/* when the relay sees another address than the SYN's source */
	CCONF_NAT_ON,		/* with every relay that takes tokens */
	CCONF_NAT_OFF,		/* never */
};

struct cconf {
	/* [slotd] */
	char key_file[CCONF_PATH_MAX];
	char control_socket[CCONF_PATH_MAX];	/* counters for slotctl */
	struct endpoint metrics_listen;	/* Prometheus over HTTP; family 0: off */
	enum slog_level log_level;
	uint16_t queue;			/* NFQUEUE number */
	uint32_t queue_maxlen;		/* packets the kernel may hold for us */
	uint32_t bypass_mark;		/* one bit */
	uint32_t relay_mask;		/* contiguous bits, disjoint from bypass_mark,
					 * room for the relays' marks */
	uint64_t max_clock_skew_ms;
	char user[64];			/* runs as this user once set up; "root": stays */
	char iptables[CCONF_PATH_MAX];	/* iptables, iptables-legacy, iptables-nft or a path */
	char nft[CCONF_PATH_MAX];	/* the nft tool */
	uint64_t rules_timeout_ms;	/* xtables lock wait of each run; killed 2 s later */
	/* [auth] */
	int auth_mode;			/* enum ident_mode */
	char id_key[CCONF_PATH_MAX];	/* this host's key, certificate, the CA */
	char id_cert[CCONF_PATH_MAX];
	char id_ca[CCONF_PATH_MAX];

	/* [hijack] */
	struct portset ports;		/* required: at least one port */
	struct cidr_list include;	/* empty: every destination */
	struct cidr_list exclude;
	int backend;			/* CCONF_BACKEND_AUTO or enum rules_backend */
	unsigned mode;			/* RULES_LOCAL | RULES_GATEWAY */
	char lan[RULES_LAN_MAX][RULES_IFNAME_MAX];	/* gateway: LAN interfaces */
	size_t nlan;

	/* [select] */
	struct sel_params sel;		/* strategy, k, c_wait, min_gain, repair_timeout */
	uint64_t hold_timeout_ms;	/* a SYN is held at most this long, then released direct */
	uint64_t establish_timeout_ms;	/* PIPE_ESTABLISH answer */
	uint64_t cache_ttl_ms;
	uint64_t cache_size;
	bool cache_early;		/* a hit on a port its relay reached: verdict
					 * without waiting for PIPE_OK */
	bool synack_hold;		/* a decision that waits for PIPE_OK releases
					 * the SYN at once and holds the relay's
					 * SYN-ACK instead */
	uint64_t max_held;		/* connections held at once; more go direct */
	uint64_t seed;			/* 0: from the system's random source */
	/* A relay whose address shares this many leading bits with the
	 * server's stands for the server's place (cover: half the probes go
	 * by it); 0: never. */
	uint64_t server_prefix, server_prefix6;

	/* [relays] */
	uint64_t keepalive_interval_ms;
	uint64_t keepalive_timeout_ms;
	uint64_t reconnect_min_ms;
	uint64_t reconnect_max_ms;
	uint64_t failure_quarantine_ms;	/* a relay that failed a pipe sits out this long */
	struct cconf_relay *relays;	/* "relay = ..." lines, in order */
	size_t nrelays;

	/* [nat] */
	int nat_mode;			/* enum cconf_nat */

	/* [lib]: libslot's socket and slotctl run (libsrv.h); start-up only */
	char lib_socket[CCONF_PATH_MAX];	/* "": neither */
	uint32_t lib_socket_mode;
	uint32_t lib_mark;		/* one bit: sockets offered to slotd, any port */
	char run_cgroup[CCONF_PATH_MAX];	/* cgroup v2 path of slotctl run; "": off */
	/* cgroups whose processes may attach (libsrv_cgroup_under); "": none.
	 * Also on reload. */
	char attach_from[CCONF_PATH_MAX];

	/* [directory] */
	struct conf_urls dir_urls;	/* none: no directory */
	uint64_t dir_refresh_ms;
	uint64_t dir_retry_ms;		/* after a failed fetch; doubles up to refresh */
	uint64_t dir_timeout_ms;	/* per call */
	char dir_cache_file[CCONF_PATH_MAX];	/* "": keep no copy */
};

/* Fills c with the defaults (those of etc/slotd.conf). */
void cconf_defaults(struct cconf *c);

/* Defaults, then path (NULL: defaults only), then the checks across keys.
 * Returns 0, or -1 with "path:line: reason" (or "path: reason" for a check
 * across keys) in err; c is then freed and must not be used. */
int cconf_load(struct cconf *c, const char *path, char *err, size_t errlen);

/* Parses one relay line, "ADDR[:PORT] [data=PORT] [group=N]" (PORT default
 * 7600). Without group=, out->group is UINT32_MAX (group= takes 0 to
 * CCONF_GROUP_MAX): the loader puts the relay's index there. Returns 0, or -1
 * with a reason in err. */
int cconf_parse_relay(const char *s, struct cconf_relay *out, char *err, size_t errlen);

void cconf_free(struct cconf *c);

#endif
