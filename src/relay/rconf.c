#include <stdio.h>
#include <string.h>

#include "slot/conf.h"
#include "slot/confkeys.h"
#include "slot/ident.h"
#include "slot/sock.h"
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
	c->data_hold_ms = 3000;
	c->idle_timeout_ms = 0;
	c->chain_allow = true;
	c->chain_link_idle_ms = 5 * 60 * 1000;
	c->chain_max_links = 256;
	c->half_closed_timeout_ms = 60 * 60 * 1000;
	c->drain_timeout_ms = 30000;
	c->control_idle_timeout_ms = 120000;
	c->control_first_timeout_ms = 5000;
	c->max_control_conns = 1024;
	c->max_control_per_source = 16;
	c->control_rate = 200;
	c->control_burst = 400;
	c->relay_control_rate = 5000;
	c->relay_control_burst = 10000;
	c->max_pending_per_relay = 4096;
	c->max_kernel_pipes = 0;
	c->pipe_size = 256 * 1024;
	c->keepalive_idle_ms = 60000;
	c->keepalive_interval_ms = 10000;
	c->keepalive_count = 6;
	c->user_timeout_ms = 120000;
	/* Measured in docs/benchmarks.md (scenarios 2 and 4): under loss BBR
	 * keeps the leg the relay sends on at its window where cubic backs
	 * off; on a clean path the system's slow start (cubic's) gets a short
	 * transfer going sooner than BBR's paced start-up. */
	c->congestion[0] = '\0';
	snprintf(c->congestion_on_loss, sizeof(c->congestion_on_loss),
	    RCONF_CONGESTION_ON_LOSS_DEFAULT);

	/* Measured in docs/benchmarks.md (scenario 4): a relay writes what
	 * arrives, so a leg's send buffer fills in slow start before the
	 * kernel has grown it, and the rest of that round waits a round trip. */
	c->send_buffer = 256 * 1024;

	c->learn_initcwnd = false;
	c->initcwnd_max = 40;
	c->initcwnd_prefix4 = 24;
	c->initcwnd_prefix6 = 48;
	c->initcwnd_expiry_ms = 10 * 60 * 1000;
	c->initcwnd_max_prefixes = 4096;

	policy_init(&c->policy);

	c->rtt_cache_ttl_ms = 5 * 60 * 1000;
	c->probe_timeout_ms = 2000;
	c->handover_ms = 150;
	c->preconnect = true;
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
rconf_leg(const struct rconf *c, struct sock_leg *o)
{
	memset(o, 0, sizeof(*o));
	o->keepidle_s = (int)(c->keepalive_idle_ms / 1000);
	o->keepintvl_s = (int)(c->keepalive_interval_ms / 1000);
	o->keepcnt = (int)c->keepalive_count;
	o->user_timeout_ms = (unsigned int)c->user_timeout_ms;
	o->linger_rst = 1;
	o->congestion = c->congestion;
}

uint64_t
rconf_leg_later_ms(const struct rconf *c)
{
	uint64_t ms = c->keepalive_idle_ms;

	if (c->user_timeout_ms && c->user_timeout_ms < ms)
		ms = c->user_timeout_ms;
	return ms / 2;
}

void
rconf_free(struct rconf *c)
{
	policy_free(&c->policy);
}

#define DAY_MS (24ull * 3600 * 1000)

/* The kinds of this daemon's own, parsed by custom_key. */
enum { K_ADVERTISE = 1, K_CONGESTION, K_CONGESTION_ON_LOSS, K_NEXT_HOPS };

#define F(sec, name, kind, m) CONF_KEY(struct rconf, sec, name, kind, m)
static const struct conf_key keys[] = {
	{ F("relay", "user", CK_STR, user) },
	{ F("relay", "key_file", CK_STR, key_file) },
	{ F("relay", "probe_listen", CK_EP, probe_listen) },
	{ F("relay", "control_listen", CK_EP, control_listen) },
	{ F("relay", "data_listen", CK_EP, data_listen) },
	{ F("relay", "stats_socket", CK_STR, stats_socket) },
	{ F("relay", "metrics_listen", CK_EP_OPT, metrics_listen) },
	{ F("relay", "log_level", CK_LEVEL, log_level) },
	{ F("limits", "max_pipes", CK_UINT, max_pipes), .min = 1, .max = 1000000 },
	{ F("limits", "max_pending_per_client", CK_UINT, max_pending_per_client),
	    .min = 1, .max = 1000000 },
	{ F("limits", "connect_timeout", CK_MS, connect_timeout_ms), .min = 100, .max = 600000 },
	{ F("limits", "pending_timeout", CK_MS, pending_timeout_ms), .min = 100, .max = 600000 },
	{ F("limits", "data_hold", CK_MS_OFF, data_hold_ms), .min = 100, .max = 60000 },
	{ F("limits", "idle_timeout", CK_MS_OFF, idle_timeout_ms),
	    .min = 1000, .max = 365 * DAY_MS },
	{ F("limits", "half_closed_timeout", CK_MS_OFF, half_closed_timeout_ms),
	    .min = 1000, .max = 365 * DAY_MS },
	{ F("limits", "drain_timeout", CK_MS, drain_timeout_ms), .min = 0, .max = DAY_MS },
	{ F("limits", "control_idle_timeout", CK_MS, control_idle_timeout_ms),
	    .min = 1000, .max = DAY_MS },
	{ F("limits", "control_first_message_timeout", CK_MS, control_first_timeout_ms),
	    .min = 100, .max = 600000 },
	{ F("limits", "max_control_connections", CK_UINT, max_control_conns),
	    .min = 1, .max = 1000000 },
	{ F("limits", "max_control_per_source", CK_UINT, max_control_per_source),
	    .min = 1, .max = 1000000 },
	{ F("limits", "control_rate", CK_DOUBLE, control_rate), .dmin = 0.001, .dmax = 1e6 },
	{ F("limits", "control_burst", CK_DOUBLE, control_burst), .dmin = 0.001, .dmax = 1e6 },
	{ F("limits", "relay_control_rate", CK_DOUBLE, relay_control_rate),
	    .dmin = 0.001, .dmax = 1e6 },
	{ F("limits", "relay_control_burst", CK_DOUBLE, relay_control_burst),
	    .dmin = 0.001, .dmax = 1e6 },
	{ F("limits", "max_pending_per_relay", CK_UINT, max_pending_per_relay),
	    .min = 1, .max = 1000000 },
	{ F("limits", "max_kernel_pipes", CK_UINT, max_kernel_pipes), .min = 0, .max = 4000000 },
	{ F("limits", "pipe_size", CK_SIZE, pipe_size), .min = 4096, .max = 1 << 20 },
	{ F("limits", "keepalive_idle", CK_MS, keepalive_idle_ms), .min = 1000, .max = DAY_MS },
	{ F("limits", "keepalive_interval", CK_MS, keepalive_interval_ms),
	    .min = 1000, .max = DAY_MS },
	{ F("limits", "keepalive_count", CK_UINT, keepalive_count), .min = 1, .max = 127 },
	{ F("limits", "user_timeout", CK_MS_OFF, user_timeout_ms), .min = 1000, .max = DAY_MS },
	{ F("chain", "allow", CK_BOOL, chain_allow) },
	{ F("chain", "next_hops", CK_CUSTOM, chain_any_hop), .custom = K_NEXT_HOPS },
	{ F("chain", "link_idle_timeout", CK_MS, chain_link_idle_ms), .min = 1000, .max = DAY_MS },
	{ F("chain", "max_links", CK_UINT, chain_max_links), .min = 1, .max = 65536 },
	{ F("pipe", "congestion", CK_CUSTOM, congestion), .custom = K_CONGESTION },
	{ F("pipe", "congestion_on_loss", CK_CUSTOM, congestion_on_loss),
	    .custom = K_CONGESTION_ON_LOSS },
	{ F("pipe", "send_buffer", CK_SIZE_OFF, send_buffer), .min = 64 * 1024,
	    .max = 64ull << 20 },
	{ F("pipe", "learn_initcwnd", CK_BOOL, learn_initcwnd) },
	/* Above 10, the kernel's own; 1000 segments is 1.4 MB in one burst. */
	{ F("pipe", "initcwnd_max", CK_UINT, initcwnd_max), .min = 11, .max = 1000 },
	{ F("pipe", "initcwnd_prefix4", CK_UINT, initcwnd_prefix4), .min = 8, .max = 32 },
	{ F("pipe", "initcwnd_prefix6", CK_UINT, initcwnd_prefix6), .min = 16, .max = 128 },
	{ F("pipe", "initcwnd_expiry", CK_MS, initcwnd_expiry_ms), .min = 1000, .max = DAY_MS },
	{ F("pipe", "initcwnd_max_prefixes", CK_UINT, initcwnd_max_prefixes),
	    .min = 1, .max = 1000000 },
	{ F("policy", "allowed_ports", CK_PORTS, policy.ports) },
	{ F("policy", "allow_destinations", CK_CIDRS, policy.allow) },
	{ F("policy", "deny_destinations", CK_CIDRS, policy.deny) },
	{ F("policy", "public_address", CK_CIDRS, policy.public) },
	{ F("probe", "rtt_cache_ttl", CK_MS, rtt_cache_ttl_ms), .min = 0, .max = 7 * DAY_MS },
	{ F("probe", "probe_timeout", CK_MS, probe_timeout_ms), .min = 10, .max = 60000 },
	{ F("probe", "handover", CK_MS_OFF, handover_ms), .min = 1,
	    .max = SOCK_ACK_HOLD_MAX_MS },
	{ F("probe", "preconnect", CK_BOOL, preconnect) },
	{ F("probe", "requester_rate", CK_DOUBLE, requester_rate), .dmin = 0.001, .dmax = 1e6 },
	{ F("probe", "requester_burst", CK_DOUBLE, requester_burst), .dmin = 0.001, .dmax = 1e6 },
	{ F("probe", "destination_rate", CK_DOUBLE, destination_rate), .dmin = 0.001, .dmax = 1e6 },
	{ F("probe", "destination_burst", CK_DOUBLE, destination_burst),
	    .dmin = 0.001, .dmax = 1e6 },
	{ F("probe", "max_inflight", CK_UINT, max_inflight), .min = 1, .max = 100000 },
	{ F("auth", "max_clock_skew", CK_MS, max_clock_skew_ms), .min = 1000, .max = 3600000 },
	{ F("auth", "mode", CK_AUTHMODE, auth_mode) },
	{ F("auth", "key", CK_STR, id_key) },
	{ F("auth", "certificate", CK_STR, id_cert) },
	{ F("auth", "ca", CK_STR, id_ca) },
	{ F("directory", "urls", CK_URLS, dir_urls) },
	{ F("directory", "advertise", CK_CUSTOM, advertise), .custom = K_ADVERTISE },
	{ F("directory", "timeout", CK_MS, dir_timeout_ms), .min = 100, .max = 120000 },
	{ F("directory", "list_interval", CK_MS, list_interval_ms), .min = 100, .max = DAY_MS },
	{ F("directory", "measure_interval", CK_MS, measure_interval_ms),
	    .min = 100, .max = DAY_MS },
	{ F("directory", "measure_rate", CK_DOUBLE, measure_rate), .dmin = 0.001, .dmax = 1e6 },
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

/* A kernel algorithm's name (whether this kernel has it is checked by the
 * daemon, with a test socket), or none: for congestion "system" (the
 * namespace's default), for congestion_on_loss "off" (no change). */
static int
parse_congestion(const char *value, char *dst, size_t size, const char *none,
    char *sub, size_t sublen)
{
	size_t l = strlen(value);

	if (strcmp(value, none) == 0) {
		dst[0] = '\0';
	} else if (l == 0 || l >= size ||
	    strspn(value, "abcdefghijklmnopqrstuvwxyz0123456789_-") != l ||
	    strcmp(value, "system") == 0 || strcmp(value, "off") == 0) {
		snprintf(sub, sublen, "expected an algorithm's name (bbr, cubic, reno...: "
		    "net.ipv4.tcp_available_congestion_control) or %s", none);
		return -1;
	} else {
		memcpy(dst, value, l + 1);
	}
	return 0;
}

static int
custom_key(void *obj, const struct conf_key *k, const char *value, char *sub, size_t sublen)
{
	struct rconf *c = obj;

	if (k->custom == K_CONGESTION)
		return parse_congestion(value, c->congestion, sizeof(c->congestion), "system",
		    sub, sublen);
	if (k->custom == K_NEXT_HOPS) {
		if (strcmp(value, "listed") == 0 || strcmp(value, "any") == 0) {
			c->chain_any_hop = strcmp(value, "any") == 0;
			return 0;
		}
		snprintf(sub, sublen, "must be listed (the relays of the directory's "
		    "listing, at their data port) or any");
		return -1;
	}
	if (k->custom == K_CONGESTION_ON_LOSS) {
		c->congestion_on_loss_set = 1;
		return parse_congestion(value, c->congestion_on_loss,
		    sizeof(c->congestion_on_loss), "off", sub, sublen);
	}
	/* One endpoint, or two of different families: a dual-stack relay
	 * registers once per family (docs/relay.md "IPv6"). */
	return parse_advertise(value, obj, sub, sublen);
}

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	return conf_keys_set(keys, sizeof(keys) / sizeof(keys[0]), custom_key, user, section,
	    name, value, err, errlen);
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
	if (c->relay_control_burst < 1) {
		snprintf(err, errlen, "%s: [limits] relay_control_burst must be at least 1", path);
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
