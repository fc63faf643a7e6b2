#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "slot/conf.h"
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

struct key_spec {
	const char *section, *name;
	enum { K_STR, K_EP, K_EP_OPT, K_LEVEL, K_UINT, K_MS, K_TIMEOUTS, K_SIZE, K_DOUBLE,
	    K_AUTHMODE } kind;
	size_t off;
	uint64_t min, max;	/* K_UINT, K_MS, K_SIZE; K_STR: buffer size */
	double dmin, dmax;	/* K_DOUBLE */
};

#define F(m) offsetof(struct dconf, m)
static const struct key_spec keys[] = {
	{ "dird", "listen", K_EP, F(listen), 0, 0, 0, 0 },
	{ "dird", "key_file", K_STR, F(key_file), 0, DCONF_PATH_MAX, 0, 0 },
	{ "dird", "state_file", K_STR, F(state_file), 0, DCONF_PATH_MAX, 0, 0 },
	{ "dird", "control_socket", K_STR, F(control_socket), 0, DCONF_PATH_MAX, 0, 0 },
	{ "dird", "metrics_listen", K_EP_OPT, F(metrics_listen), 0, 0, 0, 0 },
	{ "dird", "log_level", K_LEVEL, F(log_level), 0, 0, 0, 0 },
	{ "dird", "max_clock_skew", K_MS, F(max_clock_skew_ms), 1000, 3600000, 0, 0 },
	{ "auth", "mode", K_AUTHMODE, F(auth_mode), 0, 0, 0, 0 },
	{ "auth", "key", K_STR, F(id_key), 0, DCONF_PATH_MAX, 0, 0 },
	{ "auth", "certificate", K_STR, F(id_cert), 0, DCONF_PATH_MAX, 0, 0 },
	{ "auth", "ca", K_STR, F(id_ca), 0, DCONF_PATH_MAX, 0, 0 },
	{ "auth", "revoked", K_STR, F(revoked), 0, DCONF_PATH_MAX, 0, 0 },
	/* Below 4k not even a register call with its XML fits. */
	{ "limits", "max_body", K_SIZE, F(max_body), 4096, 64ull << 20, 0, 0 },
	/* Below 512 not even a request line and Content-Length fit. */
	{ "limits", "max_header", K_SIZE, F(max_header), 512, 1 << 20, 0, 0 },
	{ "limits", "max_conns", K_UINT, F(max_conns), 1, 4096, 0, 0 },
	{ "limits", "max_conns_per_source", K_UINT, F(max_conns_per_source), 1, 4096, 0, 0 },
	{ "limits", "header_timeout", K_MS, F(header_timeout_ms), 100, 3600000, 0, 0 },
	{ "limits", "body_timeout", K_MS, F(body_timeout_ms), 100, 3600000, 0, 0 },
	/* The older name: both at once. */
	{ "limits", "request_timeout", K_TIMEOUTS, F(header_timeout_ms), 100, 3600000, 0, 0 },
	{ "limits", "max_relays", K_UINT, F(max_relays), 1, 65536, 0, 0 },
	{ "limits", "max_report_entries", K_UINT, F(max_report_entries), 1, 65536, 0, 0 },
	{ "relays", "heartbeat_interval", K_MS, F(heartbeat_interval_ms), 1000, DAY_MS, 0, 0 },
	{ "relays", "expire_after", K_MS, F(expire_after_ms), 1000, 7 * DAY_MS, 0, 0 },
	{ "groups", "inflation", K_DOUBLE, F(inflation), 0, 0, 1.05, 10.0 },
	{ "groups", "max_intra_rtt", K_DOUBLE, F(max_intra_rtt_ms), 0, 0, 0.0, 1e6 },
	{ "groups", "regroup_interval", K_MS, F(regroup_interval_ms), 0, DAY_MS, 0, 0 },
	{ "groups", "landmarks", K_UINT, F(landmarks), 0, 4096, 0, 0 },
};
#undef F

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	struct dconf *c = user;
	const struct key_spec *k = NULL;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
		if (strcmp(keys[i].section, section) == 0 &&
		    strcmp(keys[i].name, name) == 0)
			k = &keys[i];
	if (k == NULL) {
		snprintf(err, errlen, "unknown key '%s' in section [%s]", name, section);
		return -1;
	}
	void *dst = (char *)c + k->off;
	int rc = 0;
	char sub[200] = "";

	switch (k->kind) {
	case K_STR:
		rc = conf_string(value, dst, k->max, sub, sizeof(sub));
		break;
	case K_EP_OPT:
		/* Empty: off. */
		if (value[0] == '\0') {
			memset(dst, 0, sizeof(struct endpoint));
			break;
		}
		/* FALLTHROUGH */
	case K_EP:
		if (ep_parse(value, 0, dst) == -1) {
			snprintf(sub, sizeof(sub), "expected address:port");
			rc = -1;
		}
		break;
	case K_AUTHMODE:
		if ((*(int *)dst = ident_mode_parse(value)) == -1) {
			snprintf(sub, sizeof(sub), "expected identity or shared");
			rc = -1;
		}
		break;
	case K_LEVEL:
		if (log_level_parse(value, dst) == -1) {
			snprintf(sub, sizeof(sub), "expected error, warn, info or debug");
			rc = -1;
		}
		break;
	case K_UINT:
		rc = conf_uint(value, k->min, k->max, dst, sub, sizeof(sub));
		break;
	case K_MS:
	case K_TIMEOUTS: {
		uint64_t v;
		rc = conf_duration_ms(value, &v, sub, sizeof(sub));
		if (rc == 0 && (v < k->min || v > k->max)) {
			snprintf(sub, sizeof(sub), "must be between %llu ms and %llu ms",
			    (unsigned long long)k->min, (unsigned long long)k->max);
			rc = -1;
		}
		if (rc == 0)
			*(uint64_t *)dst = v;
		if (rc == 0 && k->kind == K_TIMEOUTS)
			c->body_timeout_ms = v;
		break;
	}
	case K_SIZE:
		rc = conf_size(value, k->min, k->max, dst, sub, sizeof(sub));
		break;
	case K_DOUBLE:
		rc = conf_double(value, k->dmin, k->dmax, dst, sub, sizeof(sub));
		break;
	}
	if (rc == -1)
		snprintf(err, errlen, "[%s] %s = %s: %s", section, name, value, sub);
	return rc;
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
