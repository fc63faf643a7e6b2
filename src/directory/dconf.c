#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "slot/conf.h"
#include "slot/confkeys.h"
#include "slot/ident.h"
#include "dconf.h"

#define DAY_MS (24ull * 3600 * 1000)

void
dconf_defaults(struct dconf *c)
{
	memset(c, 0, sizeof(*c));
	ep_parse("0.0.0.0:7602", 0, &c->listen);
	snprintf(c->key_file, sizeof(c->key_file), "/etc/slot/key");
	snprintf(c->state_file, sizeof(c->state_file), "/var/lib/slot/dird.state");
	snprintf(c->control_socket, sizeof(c->control_socket), "/run/slot/dird.sock");
	c->log_level = SLOG_INFO;
	c->max_clock_skew_ms = 30000;
	c->auth_mode = IDENT_MODE_IDENTITY;
	snprintf(c->id_key, sizeof(c->id_key), IDENT_DEFAULT_KEY("dird"));
	snprintf(c->id_cert, sizeof(c->id_cert), IDENT_DEFAULT_CERT("dird"));
	snprintf(c->id_ca, sizeof(c->id_ca), IDENT_DEFAULT_CA);

	c->max_body = 64 * 1024;
	c->max_header = 8 * 1024;
	c->max_conns = 64;
	c->max_conns_per_source = 8;
	c->header_timeout_ms = 5000;
	c->body_timeout_ms = 5000;
	c->max_relays = 4096;
	c->max_report_entries = 4096;

	c->heartbeat_interval_ms = 30000;
	c->expire_after_ms = 120000;

	c->inflation = 2.0;
	c->max_intra_rtt_ms = 50.0;
	c->regroup_interval_ms = 10000;
	c->landmarks = 256;
}

/* The kinds of this daemon's own, parsed by custom_key. */
enum { K_TIMEOUTS = 1 };

#define F(sec, name, kind, m) CONF_KEY(struct dconf, sec, name, kind, m)
static const struct conf_key keys[] = {
	{ F("dird", "listen", CK_EP, listen) },
	{ F("dird", "key_file", CK_STR, key_file) },
	{ F("dird", "state_file", CK_STR, state_file) },
	{ F("dird", "control_socket", CK_STR, control_socket) },
	{ F("dird", "metrics_listen", CK_EP_OPT, metrics_listen) },
	{ F("dird", "log_level", CK_LEVEL, log_level) },
	{ F("dird", "max_clock_skew", CK_MS, max_clock_skew_ms), .min = 1000, .max = 3600000 },
	{ F("auth", "mode", CK_AUTHMODE, auth_mode) },
	{ F("auth", "key", CK_STR, id_key) },
	{ F("auth", "certificate", CK_STR, id_cert) },
	{ F("auth", "ca", CK_STR, id_ca) },
	{ F("auth", "revoked", CK_STR, revoked) },
	/* Below 4k not even a register call with its XML fits. */
	{ F("limits", "max_body", CK_SIZE, max_body), .min = 4096, .max = 64ull << 20 },
	/* Below 512 not even a request line and Content-Length fit. */
	{ F("limits", "max_header", CK_SIZE, max_header), .min = 512, .max = 1 << 20 },
	{ F("limits", "max_conns", CK_UINT, max_conns), .min = 1, .max = 4096 },
	{ F("limits", "max_conns_per_source", CK_UINT, max_conns_per_source),
	    .min = 1, .max = 4096 },
	{ F("limits", "header_timeout", CK_MS, header_timeout_ms), .min = 100, .max = 3600000 },
	{ F("limits", "body_timeout", CK_MS, body_timeout_ms), .min = 100, .max = 3600000 },
	/* The older name: both at once. */
	{ F("limits", "request_timeout", CK_CUSTOM, header_timeout_ms), .custom = K_TIMEOUTS },
	{ F("limits", "max_relays", CK_UINT, max_relays), .min = 1,
	    .max = DCONF_MAX_RELAYS },
	{ F("limits", "max_report_entries", CK_UINT, max_report_entries), .min = 1, .max = 65536 },
	{ F("relays", "heartbeat_interval", CK_MS, heartbeat_interval_ms),
	    .min = 1000, .max = DAY_MS },
	{ F("relays", "expire_after", CK_MS, expire_after_ms), .min = 1000, .max = 7 * DAY_MS },
	{ F("groups", "inflation", CK_DOUBLE, inflation), .dmin = 1.05, .dmax = 10.0 },
	{ F("groups", "max_intra_rtt", CK_DOUBLE, max_intra_rtt_ms), .dmin = 0.0, .dmax = 1e6 },
	{ F("groups", "regroup_interval", CK_MS, regroup_interval_ms), .min = 0, .max = DAY_MS },
	{ F("groups", "landmarks", CK_UINT, landmarks), .min = 0,
	    .max = DCONF_MAX_LANDMARKS },
};
#undef F

/* request_timeout, the older name of header_timeout and body_timeout:
 * both at once. */
static int
custom_key(void *obj, const struct conf_key *k, const char *value, char *sub, size_t sublen)
{
	struct dconf *c = obj;
	struct conf_key ms = *k;

	ms.kind = CK_MS;
	ms.min = 100;
	ms.max = 3600000;
	if (conf_key_parse(&ms, c, value, sub, sublen) == -1)
		return -1;
	c->body_timeout_ms = c->header_timeout_ms;
	return 0;
}

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	return conf_keys_set(keys, sizeof(keys) / sizeof(keys[0]), custom_key, user, section,
	    name, value, err, errlen);
}

int
dconf_load(struct dconf *c, const char *path, char *err, size_t errlen)
{
	dconf_defaults(c);
	if (path == NULL)
		return 0;
	if (conf_load(path, set_key, c, err, errlen) == -1)
		return -1;
	if (c->auth_mode == IDENT_MODE_IDENTITY &&
	    (c->id_key[0] == '\0' || c->id_cert[0] == '\0' || c->id_ca[0] == '\0')) {
		snprintf(err, errlen, "%s: [auth] mode identity needs key, certificate and ca",
		    path);
		return -1;
	}
	if (c->key_file[0] == '\0' || c->control_socket[0] == '\0') {
		snprintf(err, errlen, "%s: [dird] key_file and control_socket must be set", path);
		return -1;
	}
	/* One late heartbeat must not expire a relay. */
	if (c->expire_after_ms <= c->heartbeat_interval_ms) {
		snprintf(err, errlen, "%s: [relays] expire_after (%llu ms) must be greater "
		    "than heartbeat_interval (%llu ms)", path,
		    (unsigned long long)c->expire_after_ms,
		    (unsigned long long)c->heartbeat_interval_ms);
		return -1;
	}
	return 0;
}
