#ifndef SLOT_DIRECTORY_DCONF_H
#define SLOT_DIRECTORY_DCONF_H

#include <stdint.h>

#include "slot/addr.h"
#include "slot/log.h"

/* slot-dird's configuration: defaults, INI keys, validation (etc/dird.conf is
 * the reference and shows every default). The key itself is loaded by the
 * daemon; here only its path. */

#define DCONF_PATH_MAX 256
/* Upper bounds of [limits] max_relays and [groups] landmarks. */
#define DCONF_MAX_RELAYS 65536
#define DCONF_MAX_LANDMARKS 4096

struct dconf {
	/* [dird] */
	struct endpoint listen;
	char key_file[DCONF_PATH_MAX];
	char state_file[DCONF_PATH_MAX];	/* "" : no snapshot */
	char control_socket[DCONF_PATH_MAX];
	struct endpoint metrics_listen;	/* Prometheus over HTTP; family 0: off */
	enum slog_level log_level;
	uint64_t max_clock_skew_ms;

	/* [auth] */
	int auth_mode;			/* enum ident_mode */
	char id_key[DCONF_PATH_MAX];	/* this host's key, certificate, the CA */
	char id_cert[DCONF_PATH_MAX];
	char id_ca[DCONF_PATH_MAX];
	char revoked[DCONF_PATH_MAX];	/* revoked serials; "": none */

	/* [limits] */
	uint64_t max_body;		/* bytes of one XML-RPC request */
	uint64_t max_header;		/* bytes of its request line and headers */
	uint64_t max_conns;		/* HTTP connections served at once */
	uint64_t max_conns_per_source;	/* of those, from one IPv4 address or IPv6 /64 */
	uint64_t header_timeout_ms;	/* from accept to the end of the headers */
	uint64_t body_timeout_ms;	/* then for the body; then for the answer
					 * (request_timeout sets both) */
	uint64_t max_relays;
	uint64_t max_report_entries;

	/* [relays] */
	uint64_t heartbeat_interval_ms;
	uint64_t expire_after_ms;

	/* [groups] */
	double inflation;
	double max_intra_rtt_ms;	/* 0: no bound */
	uint64_t regroup_interval_ms;
	uint64_t landmarks;		/* sent with slot.list for the cover ranking; 0: none */
};

/* Fills c with the defaults (those of etc/dird.conf). */
void dconf_defaults(struct dconf *c);

/* Defaults, then path (NULL: defaults only). Returns 0, or -1 with
 * "path:line: reason" (or "path: reason") in err. */
int dconf_load(struct dconf *c, const char *path, char *err, size_t errlen);

#endif
