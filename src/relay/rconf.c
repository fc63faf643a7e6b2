#include <stdio.h>
#include <string.h>

#include "slot/conf.h"
#include "slot/ident.h"
#include "rconf.h"

void
rconf_defaults(struct rconf *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->user, sizeof(c->user), "slot");
	snprintf(c->key_file, sizeof(c->key_file), "/etc/slot/key");
	ep_parse("0.0.0.0:7600", 0, &c->probe_listen);
	ep_parse("0.0.0.0:7600", 0, &c->control_listen);
	ep_parse("0.0.0.0:7601", 0, &c->data_listen);
	snprintf(c->stats_socket, sizeof(c->stats_socket), "/run/slot/relayd.sock");
	c->log_level = SLOG_INFO;

	c->max_pipes = 4096;
	c->max_pending_per_client = 256;
	c->connect_timeout_ms = 5000;
	c->pending_timeout_ms = 10000;
	c->idle_timeout_ms = 0;
	c->half_closed_timeout_ms = 60 * 60 * 1000;
	c->drain_timeout_ms = 30000;
	c->control_idle_timeout_ms = 120000;
	c->control_first_timeout_ms = 5000;
	c->max_control_conns = 1024;
	c->max_control_per_source = 16;
	c->control_rate = 200;
	c->control_burst = 400;
	c->max_kernel_pipes = 0;
	c->pipe_size = 256 * 1024;
	c->keepalive_idle_ms = 60000;
	c->keepalive_interval_ms = 10000;
	c->keepalive_count = 6;
	c->user_timeout_ms = 120000;

	policy_init(&c->policy);

	c->rtt_cache_ttl_ms = 5 * 60 * 1000;
	c->probe_timeout_ms = 2000;
	c->requester_rate = 50;
	c->requester_burst = 100;
	c->destination_rate = 5;
	c->destination_burst = 10;
	c->max_inflight = 1024;

	c->max_clock_skew_ms = 30000;
	c->auth_mode = IDENT_MODE_IDENTITY;
	snprintf(c->id_key, sizeof(c->id_key), IDENT_DEFAULT_KEY("relayd"));
	snprintf(c->id_cert, sizeof(c->id_cert), IDENT_DEFAULT_CERT("relayd"));
	snprintf(c->id_ca, sizeof(c->id_ca), IDENT_DEFAULT_CA);

	c->dir_timeout_ms = 5000;
	c->list_interval_ms = 5 * 60 * 1000;
	c->measure_interval_ms = 10 * 60 * 1000;
	c->measure_rate = 5;
}

void
rconf_free(struct rconf *c)
{
	policy_free(&c->policy);
}

#define DAY_MS (24ull * 3600 * 1000)

struct key_spec {
	const char *section, *name;
	enum { K_STR, K_EP, K_LEVEL, K_UINT, K_MS, K_MS_OFF, K_SIZE, K_DOUBLE, K_PORTS, K_CIDRS,
	    K_URLS, K_EP_OPT, K_AUTHMODE, K_ADVERTISE } kind;
	size_t off;
	uint64_t min, max;	/* K_UINT, K_MS, K_SIZE; K_STR: buffer size */
};

#define F(m) offsetof(struct rconf, m)
static const struct key_spec keys[] = {
	{ "relay", "user", K_STR, F(user), 0, sizeof(((struct rconf *)0)->user) },
	{ "relay", "key_file", K_STR, F(key_file), 0, RCONF_PATH_MAX },
	{ "relay", "probe_listen", K_EP, F(probe_listen), 0, 0 },
	{ "relay", "control_listen", K_EP, F(control_listen), 0, 0 },
	{ "relay", "data_listen", K_EP, F(data_listen), 0, 0 },
	{ "relay", "stats_socket", K_STR, F(stats_socket), 0, RCONF_PATH_MAX },
	{ "relay", "metrics_listen", K_EP_OPT, F(metrics_listen), 0, 0 },
	{ "relay", "log_level", K_LEVEL, F(log_level), 0, 0 },
	{ "limits", "max_pipes", K_UINT, F(max_pipes), 1, 1000000 },
	{ "limits", "max_pending_per_client", K_UINT, F(max_pending_per_client), 1, 1000000 },
	{ "limits", "connect_timeout", K_MS, F(connect_timeout_ms), 100, 600000 },
	{ "limits", "pending_timeout", K_MS, F(pending_timeout_ms), 100, 600000 },
	{ "limits", "idle_timeout", K_MS_OFF, F(idle_timeout_ms), 1000, 365 * DAY_MS },
	{ "limits", "half_closed_timeout", K_MS_OFF, F(half_closed_timeout_ms), 1000,
	    365 * DAY_MS },
	{ "limits", "drain_timeout", K_MS, F(drain_timeout_ms), 0, DAY_MS },
	{ "limits", "control_idle_timeout", K_MS, F(control_idle_timeout_ms), 1000, DAY_MS },
	{ "limits", "control_first_message_timeout", K_MS, F(control_first_timeout_ms), 100,
	    600000 },
	{ "limits", "max_control_connections", K_UINT, F(max_control_conns), 1, 1000000 },
	{ "limits", "max_control_per_source", K_UINT, F(max_control_per_source), 1, 1000000 },
	{ "limits", "control_rate", K_DOUBLE, F(control_rate), 0, 0 },
	{ "limits", "control_burst", K_DOUBLE, F(control_burst), 0, 0 },
	{ "limits", "max_kernel_pipes", K_UINT, F(max_kernel_pipes), 0, 4000000 },
	{ "limits", "pipe_size", K_SIZE, F(pipe_size), 4096, 1 << 20 },
	{ "limits", "keepalive_idle", K_MS, F(keepalive_idle_ms), 1000, DAY_MS },
	{ "limits", "keepalive_interval", K_MS, F(keepalive_interval_ms), 1000, DAY_MS },
	{ "limits", "keepalive_count", K_UINT, F(keepalive_count), 1, 127 },
	{ "limits", "user_timeout", K_MS_OFF, F(user_timeout_ms), 1000, DAY_MS },
	{ "policy", "allowed_ports", K_PORTS, F(policy.ports), 0, 0 },
	{ "policy", "allow_destinations", K_CIDRS, F(policy.allow), 0, 0 },
	{ "policy", "deny_destinations", K_CIDRS, F(policy.deny), 0, 0 },
	{ "policy", "public_address", K_CIDRS, F(policy.public), 0, 0 },
	{ "probe", "rtt_cache_ttl", K_MS, F(rtt_cache_ttl_ms), 0, 7 * DAY_MS },
	{ "probe", "probe_timeout", K_MS, F(probe_timeout_ms), 10, 60000 },
	{ "probe", "requester_rate", K_DOUBLE, F(requester_rate), 0, 0 },
	{ "probe", "requester_burst", K_DOUBLE, F(requester_burst), 0, 0 },
	{ "probe", "destination_rate", K_DOUBLE, F(destination_rate), 0, 0 },
	{ "probe", "destination_burst", K_DOUBLE, F(destination_burst), 0, 0 },
	{ "probe", "max_inflight", K_UINT, F(max_inflight), 1, 100000 },
	{ "auth", "max_clock_skew", K_MS, F(max_clock_skew_ms), 1000, 3600000 },
	{ "auth", "mode", K_AUTHMODE, F(auth_mode), 0, 0 },
	{ "auth", "key", K_STR, F(id_key), 0, RCONF_PATH_MAX },
	{ "auth", "certificate", K_STR, F(id_cert), 0, RCONF_PATH_MAX },
	{ "auth", "ca", K_STR, F(id_ca), 0, RCONF_PATH_MAX },
	{ "directory", "urls", K_URLS, F(dir_urls), 0, 0 },
	{ "directory", "advertise", K_ADVERTISE, F(advertise), 0, 0 },
	{ "directory", "timeout", K_MS, F(dir_timeout_ms), 100, 120000 },
	{ "directory", "list_interval", K_MS, F(list_interval_ms), 100, DAY_MS },
	{ "directory", "measure_interval", K_MS, F(measure_interval_ms), 100, DAY_MS },
	{ "directory", "measure_rate", K_DOUBLE, F(measure_rate), 0, 0 },
};
#undef F

static int
parse_advertise(const char *value, struct rconf *c, char *sub, size_t sublen)
{
	struct endpoint e[2];
	char item[EP_STRLEN + 8];
	size_t n = 0;

	memset(e, 0, sizeof(e));
	for (const char *p = value; *p; ) {
		size_t l;
		p += strspn(p, ", \t");
		if ((l = strcspn(p, ", \t")) == 0)
			break;
		if (n == 2 || l >= sizeof(item)) {
			snprintf(sub, sublen, "expected one address:port, or two of different "
			    "families");
			return -1;
		}
		memcpy(item, p, l);
		item[l] = '\0';
		if (ep_parse(item, 0, &e[n]) == -1) {
			snprintf(sub, sublen, "expected address:port");
			return -1;
		}
		n++;
		p += l;
	}
	if (n == 2 && e[0].addr.family == e[1].addr.family) {
		snprintf(sub, sublen, "two endpoints of one family: expected one IPv4 and one "
		    "IPv6 address:port");
		return -1;
	}
	c->advertise = e[0];
	c->advertise2 = e[1];
	return 0;
}

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	struct rconf *c = user;
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
	case K_ADVERTISE:
		/* One endpoint, or two of different families: a dual-stack
		 * relay registers once per family (docs/relay.md "IPv6"). */
		rc = parse_advertise(value, c, sub, sizeof(sub));
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
	case K_MS_OFF:	/* K_MS, or 0 / "off": none */
	case K_MS: {
		uint64_t v;
		if (k->kind == K_MS_OFF && strcmp(value, "off") == 0)
			value = "0";
		rc = conf_duration_ms(value, &v, sub, sizeof(sub));
		if (rc == 0 && !(k->kind == K_MS_OFF && v == 0) &&
		    (v < k->min || v > k->max)) {
			snprintf(sub, sizeof(sub), "must be %sbetween %llu ms and %llu ms",
			    k->kind == K_MS_OFF ? "0 (off) or " : "",
			    (unsigned long long)k->min, (unsigned long long)k->max);
			rc = -1;
		}
		if (rc == 0)
			*(uint64_t *)dst = v;
		break;
	}
	case K_SIZE:
		rc = conf_size(value, k->min, k->max, dst, sub, sizeof(sub));
		break;
	case K_DOUBLE:
		rc = conf_double(value, 0.001, 1e6, dst, sub, sizeof(sub));
		break;
	case K_PORTS:
		rc = portset_parse(value, dst, sub, sizeof(sub));
		break;
	case K_URLS:
		rc = conf_urls(value, dst, sub, sizeof(sub));
		break;
	case K_CIDRS: {
		struct cidr_list l = { 0 };
		rc = cidr_list_parse(value, &l, sub, sizeof(sub));
		if (rc == 0) {
			cidr_list_free(dst);
			*(struct cidr_list *)dst = l;
		}
		break;
	}
	}
	if (rc == -1)
		snprintf(err, errlen, "[%s] %s = %s: %s", section, name, value, sub);
	return rc;
}

int
rconf_load(struct rconf *c, const char *path, char *err, size_t errlen)
{
	rconf_defaults(c);
	if (path == NULL)
		return 0;
	if (conf_load(path, set_key, c, err, errlen) == -1)
		goto fail;
	if (c->requester_burst < 1 || c->destination_burst < 1) {
		snprintf(err, errlen, "%s: [probe] bursts must be at least 1", path);
		goto fail;
	}
	if (c->control_burst < 1) {
		snprintf(err, errlen, "%s: [limits] control_burst must be at least 1", path);
		goto fail;
	}
	/* A relay is known to the directory and its clients by one endpoint,
	 * for probes (UDP) and control (TCP) alike. */
	if (c->dir_urls.n > 0 && c->probe_listen.port != c->control_listen.port) {
		snprintf(err, errlen, "%s: [directory] needs probe_listen and control_listen "
		    "on the same port", path);
		goto fail;
	}
	if (c->stats_socket[0] == '\0' || c->key_file[0] == '\0') {
		snprintf(err, errlen, "%s: [relay] key_file and stats_socket must be set", path);
		goto fail;
	}
	if (c->auth_mode == IDENT_MODE_IDENTITY &&
	    (c->id_key[0] == '\0' || c->id_cert[0] == '\0' || c->id_ca[0] == '\0')) {
		snprintf(err, errlen, "%s: [auth] mode identity needs key, certificate and ca",
		    path);
		goto fail;
	}
	return 0;
fail:
	rconf_free(c);
	return -1;
}
