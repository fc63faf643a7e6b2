#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/conf.h"
#include "slot/confkeys.h"
#include "slot/ident.h"
#include "cconf.h"
#include "libsrv.h"

/* LAN, loopback, link-local and multicast traffic is never hijacked unless
 * the operator says so: a relay cannot reach it anyway. */
#define DEFAULT_EXCLUDE "127.0.0.0/8, 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, " \
	"169.254.0.0/16, 100.64.0.0/10, 224.0.0.0/4, ::1/128, fe80::/10, fc00::/7"

#define RELAY_PORT 7600
/* cconf_parse_relay's group when the line has none; the loader then puts
 * the relay's index there. */
#define GROUP_UNSET UINT32_MAX

#define DAY_MS (24ull * 3600 * 1000)
#define HOUR_MS (3600ull * 1000)

void
cconf_defaults(struct cconf *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->key_file, sizeof(c->key_file), "/etc/slot/key");
	snprintf(c->control_socket, sizeof(c->control_socket), "/run/slot/slotd.sock");
	c->log_level = SLOG_INFO;
	c->queue = 7600;
	c->queue_maxlen = 4096;
	c->bypass_mark = 0x10000000;
	c->relay_mask = 0x0fff0000;
	c->max_clock_skew_ms = 30000;
	snprintf(c->user, sizeof(c->user), "slot");
	snprintf(c->iptables, sizeof(c->iptables), "iptables");
	snprintf(c->nft, sizeof(c->nft), "nft");
	c->backend = CCONF_BACKEND_AUTO;
	c->mode = RULES_LOCAL;
	c->rules_timeout_ms = 10000;
	c->auth_mode = IDENT_MODE_IDENTITY;
	snprintf(c->id_key, sizeof(c->id_key), IDENT_DEFAULT_KEY("slotd"));
	snprintf(c->id_cert, sizeof(c->id_cert), IDENT_DEFAULT_CERT("slotd"));
	snprintf(c->id_ca, sizeof(c->id_ca), IDENT_DEFAULT_CA);

	/* ports: none, the file must say which. include: empty, i.e. all.
	 * Out of memory leaves exclude empty; cconf_load catches that. */
	if (cidr_list_parse(DEFAULT_EXCLUDE, &c->exclude, NULL, 0) == -1)
		c->exclude = (struct cidr_list){ NULL, 0 };

	sel_params_default(&c->sel);
	c->hold_timeout_ms = 5000;
	c->establish_timeout_ms = 3000;
	c->cache_ttl_ms = 10 * 60 * 1000;
	c->cache_size = 65536;
	/* Warm hits connect early, but only to a port the relay has reached
	 * (hold.c): cold decisions keep the paper's connect() meaning. */
	c->cache_early = true;
	/* Waiting for PIPE_OK at the SYN-ACK instead of the SYN: the same
	 * connect(), one client-relay round trip sooner. */
	c->synack_hold = true;
	c->max_held = 4096;
	c->seed = 0;
	/* An institution's network: a relay there is near its servers. */
	c->server_prefix = 24;
	c->server_prefix6 = 48;

	c->keepalive_interval_ms = 30000;
	c->keepalive_timeout_ms = 10000;
	c->reconnect_min_ms = 500;
	c->reconnect_max_ms = 30000;
	c->failure_quarantine_ms = 30000;

	snprintf(c->lib_socket, sizeof(c->lib_socket), "/run/slot/slotd-lib.sock");
	c->lib_socket_mode = 0666;
	c->lib_mark = 0x20000000;
	snprintf(c->run_cgroup, sizeof(c->run_cgroup), "slot.run");
	snprintf(c->attach_from, sizeof(c->attach_from), "/user.slice");

	c->dir_refresh_ms = 2 * HOUR_MS;
	c->dir_retry_ms = 30000;
	c->dir_timeout_ms = 5000;
	snprintf(c->dir_cache_file, sizeof(c->dir_cache_file), "/var/lib/slotd/relays");
}

void
cconf_free(struct cconf *c)
{
	cidr_list_free(&c->include);
	cidr_list_free(&c->exclude);
	free(c->relays);
	c->relays = NULL;
	c->nrelays = 0;
}

/* One word of a relay line after "name=": a whole number in [min, max]. */
static int
relay_num(const char *word, const char *num, uint64_t min, uint64_t max,
    uint64_t *out, char *err, size_t errlen)
{
	char sub[120];

	if (conf_uint(num, min, max, out, sub, sizeof(sub)) == 0)
		return 0;
	snprintf(err, errlen, "bad number in '%s': %s", word, sub);
	return -1;
}

int
cconf_parse_relay(const char *s, struct cconf_relay *out, char *err, size_t errlen)
{
	char buf[256], *save = NULL, *w;
	bool have_data = false, have_group = false;
	uint64_t v;

	if (strlen(s) >= sizeof(buf)) {
		snprintf(err, errlen, "relay line too long");
		return -1;
	}
	memcpy(buf, s, strlen(s) + 1);
	memset(out, 0, sizeof(*out));
	out->group = GROUP_UNSET;

	if ((w = strtok_r(buf, " \t", &save)) == NULL) {
		snprintf(err, errlen, "expected ADDR[:PORT] [data=PORT] [group=N]");
		return -1;
	}
	if (ep_parse(w, RELAY_PORT, &out->control) == -1) {
		snprintf(err, errlen, "bad relay address '%s' (expected ADDR[:PORT], "
		    "IPv6 in brackets)", w);
		return -1;
	}
	while ((w = strtok_r(NULL, " \t", &save)) != NULL) {
		if (strncmp(w, "data=", 5) == 0 && !have_data) {
			if (relay_num(w, w + 5, 1, 65535, &v, err, errlen) == -1)
				return -1;
			out->data_port = (uint16_t)v;
			have_data = true;
		} else if (strncmp(w, "group=", 6) == 0 && !have_group) {
			/* Groups above CCONF_GROUP_MAX are the directory's. */
			if (relay_num(w, w + 6, 0, CCONF_GROUP_MAX, &v, err, errlen) == -1) {
				size_t len = strlen(err);
				snprintf(err + len, errlen - len, " (groups above %u are the "
				    "directory's)", CCONF_GROUP_MAX);
				return -1;
			}
			out->group = (uint32_t)v;
			have_group = true;
		} else {
			snprintf(err, errlen, "unexpected '%s' (expected data=PORT or "
			    "group=N, each at most once)", w);
			return -1;
		}
	}
	if (!have_data) {
		if (out->control.port == 65535) {
			snprintf(err, errlen, "data port would be 65536: set data=PORT");
			return -1;
		}
		out->data_port = (uint16_t)(out->control.port + 1);
	}
	/* One relay serves control and data on separate TCP ports. */
	if (out->data_port == out->control.port) {
		snprintf(err, errlen, "data port %u is the control port", out->data_port);
		return -1;
	}
	return 0;
}

static int
add_relay(struct cconf *c, const char *value, char *err, size_t errlen)
{
	struct cconf_relay r, *nv;
	char b[EP_STRLEN];

	if (cconf_parse_relay(value, &r, err, errlen) == -1)
		return -1;
	if (c->nrelays >= CCONF_MAX_RELAYS) {
		snprintf(err, errlen, "more than %d relays", CCONF_MAX_RELAYS);
		return -1;
	}
	for (size_t i = 0; i < c->nrelays; i++)
		if (ep_eq(&c->relays[i].control, &r.control)) {
			snprintf(err, errlen, "duplicates relay %zu (%s), counting "
			    "relay lines from 0", i, ep_fmt(&c->relays[i].control, b));
			return -1;
		}
	if ((nv = reallocarray(c->relays, c->nrelays + 1, sizeof(*nv))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (r.group == GROUP_UNSET)
		r.group = (uint32_t)c->nrelays;
	nv[c->nrelays++] = r;
	c->relays = nv;
	return 0;
}

/* "eth1, eth2" (commas or blanks): the LAN interfaces of gateway mode. */
static int
parse_ifaces(struct cconf *c, const char *value, char *err, size_t errlen)
{
	char buf[1024], *save = NULL;

	if (strlen(value) >= sizeof(buf)) {
		snprintf(err, errlen, "too long");
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", value);
	c->nlan = 0;
	for (char *t = strtok_r(buf, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
		if (!rules_ifname_ok(t)) {
			snprintf(err, errlen, "'%s': expected interface names (1 to %d letters, "
			    "digits or .-_@), separated by commas", t, RULES_IFNAME_MAX - 1);
			return -1;
		}
		if (c->nlan == RULES_LAN_MAX) {
			snprintf(err, errlen, "at most %d interfaces", RULES_LAN_MAX);
			return -1;
		}
		snprintf(c->lan[c->nlan++], RULES_IFNAME_MAX, "%s", t);
	}
	return 0;
}

/* The kinds of slotd's own, parsed by custom_key. */
enum { K_STRATEGY = 1, K_RELAY, K_BACKEND, K_HMODE, K_IFACES, K_NATMODE };

#define F(sec, name, kind, m) CONF_KEY(struct cconf, sec, name, kind, m)
static const struct conf_key keys[] = {
	{ F("slotd", "key_file", CK_STR, key_file) },
	{ F("slotd", "control_socket", CK_STR, control_socket) },
	{ F("slotd", "metrics_listen", CK_EP_OPT, metrics_listen) },
	{ F("slotd", "log_level", CK_LEVEL, log_level) },
	{ F("slotd", "queue", CK_UINT, queue), .min = 0, .max = 65535 },
	{ F("slotd", "queue_maxlen", CK_UINT, queue_maxlen), .min = 16, .max = 1000000 },
	{ F("slotd", "bypass_mark", CK_BIT, bypass_mark) },
	{ F("slotd", "relay_mask", CK_MASK, relay_mask) },
	{ F("slotd", "max_clock_skew", CK_MS, max_clock_skew_ms), .min = 1000, .max = HOUR_MS },
	{ F("slotd", "user", CK_STR, user) },
	{ F("slotd", "iptables", CK_STR, iptables) },
	{ F("slotd", "nft", CK_STR, nft) },
	{ F("slotd", "rules_timeout", CK_MS, rules_timeout_ms), .min = 1000, .max = 600000 },
	{ F("auth", "mode", CK_AUTHMODE, auth_mode) },
	{ F("auth", "key", CK_STR, id_key) },
	{ F("auth", "certificate", CK_STR, id_cert) },
	{ F("auth", "ca", CK_STR, id_ca) },
	{ F("hijack", "ports", CK_PORTS, ports) },
	{ F("hijack", "include", CK_CIDRS, include) },
	{ F("hijack", "exclude", CK_CIDRS, exclude) },
	{ F("hijack", "backend", CK_CUSTOM, backend), .custom = K_BACKEND },
	{ F("hijack", "mode", CK_CUSTOM, mode), .custom = K_HMODE },
	{ F("hijack", "lan_interfaces", CK_CUSTOM, lan), .custom = K_IFACES },
	{ F("select", "strategy", CK_CUSTOM, sel.strategy), .custom = K_STRATEGY },
	{ F("select", "k", CK_UINT, sel.k), .min = 1, .max = 100000 },
	{ F("select", "c_wait", CK_DOUBLE, sel.c_wait), .dmin = 1, .dmax = 10 },
	{ F("select", "min_gain", CK_DOUBLE, sel.min_gain), .dmin = 1, .dmax = 100 },
	{ F("select", "max_chain", CK_UINT, sel.max_chain), .min = 1, .max = SEL_MAX_CHAIN },
	{ F("select", "chain_gain", CK_DOUBLE, sel.chain_gain), .dmin = 1, .dmax = 100 },
	{ F("select", "repair_timeout", CK_US, sel.repair_timeout_us), .min = 100, .max = 60000 },
	{ F("select", "hold_timeout", CK_MS, hold_timeout_ms), .min = 100, .max = 120000 },
	{ F("select", "establish_timeout", CK_MS, establish_timeout_ms), .min = 100, .max = 60000 },
	{ F("select", "cache_ttl", CK_MS, cache_ttl_ms), .min = 0, .max = 7 * DAY_MS },
	{ F("select", "cache_size", CK_UINT, cache_size), .min = 1, .max = 10000000 },
	{ F("select", "cache_early", CK_BOOL, cache_early) },
	{ F("select", "synack_hold", CK_BOOL, synack_hold) },
	{ F("select", "max_held", CK_UINT, max_held), .min = 1, .max = 1000000 },
	{ F("select", "seed", CK_UINT, seed), .min = 0, .max = UINT64_MAX },
	{ F("select", "server_prefix", CK_UINT, server_prefix), .min = 0, .max = 32 },
	{ F("select", "server_prefix6", CK_UINT, server_prefix6), .min = 0, .max = 128 },
	{ F("relays", "keepalive_interval", CK_MS, keepalive_interval_ms), .min = 1000, .max = HOUR_MS },
	{ F("relays", "keepalive_timeout", CK_MS, keepalive_timeout_ms), .min = 100, .max = HOUR_MS },
	{ F("relays", "reconnect_min", CK_MS, reconnect_min_ms), .min = 10, .max = HOUR_MS },
	{ F("relays", "reconnect_max", CK_MS, reconnect_max_ms), .min = 10, .max = HOUR_MS },
	{ F("relays", "failure_quarantine", CK_MS, failure_quarantine_ms), .min = 0, .max = HOUR_MS },
	{ F("relays", "relay", CK_CUSTOM, relays), .custom = K_RELAY },
	{ F("nat", "mode", CK_CUSTOM, nat_mode), .custom = K_NATMODE },
	{ F("lib", "socket", CK_STR, lib_socket) },
	{ F("lib", "socket_mode", CK_FMODE, lib_socket_mode) },
	{ F("lib", "mark", CK_BIT, lib_mark) },
	{ F("lib", "cgroup", CK_STR, run_cgroup) },
	{ F("lib", "attach_from", CK_STR, attach_from) },
	{ F("directory", "urls", CK_URLS, dir_urls) },
	{ F("directory", "refresh", CK_MS, dir_refresh_ms), .min = 100, .max = 7 * DAY_MS },
	{ F("directory", "retry", CK_MS, dir_retry_ms), .min = 100, .max = 7 * DAY_MS },
	{ F("directory", "timeout", CK_MS, dir_timeout_ms), .min = 100, .max = 10 * 60 * 1000 },
	{ F("directory", "cache_file", CK_STR, dir_cache_file) },
};
#undef F

static int
custom_key(void *obj, const struct conf_key *k, const char *value, char *sub, size_t sublen)
{
	struct cconf *c = obj;
	void *dst = (char *)c + k->off;

	switch (k->custom) {
	case K_BACKEND:
		if (strcmp(value, "auto") == 0)
			*(int *)dst = CCONF_BACKEND_AUTO;
		else if (strcmp(value, "nft") == 0)
			*(int *)dst = RULES_NFT;
		else if (strcmp(value, "iptables") == 0)
			*(int *)dst = RULES_IPTABLES;
		else
			break;
		return 0;
	case K_HMODE:
		if (strcmp(value, "local") == 0)
			*(unsigned *)dst = RULES_LOCAL;
		else if (strcmp(value, "gateway") == 0)
			*(unsigned *)dst = RULES_GATEWAY;
		else if (strcmp(value, "both") == 0)
			*(unsigned *)dst = RULES_LOCAL | RULES_GATEWAY;
		else
			break;
		return 0;
	case K_NATMODE:
		if (strcmp(value, "auto") == 0)
			*(int *)dst = CCONF_NAT_AUTO;
		else if (strcmp(value, "on") == 0)
			*(int *)dst = CCONF_NAT_ON;
		else if (strcmp(value, "off") == 0)
			*(int *)dst = CCONF_NAT_OFF;
		else
			break;
		return 0;
	case K_STRATEGY:
		if (sel_strategy_parse(value, dst) == 0)
			return 0;
		break;
	case K_IFACES:
		return parse_ifaces(c, value, sub, sublen);
	case K_RELAY:
		return add_relay(c, value, sub, sublen);
	}
	snprintf(sub, sublen, "expected %s", k->custom == K_BACKEND ? "auto, nft or iptables" :
	    k->custom == K_HMODE ? "local, gateway or both" :
	    k->custom == K_NATMODE ? "auto, on or off" : "cover, all, random or randgroup");
	return -1;
}

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	return conf_keys_set(keys, sizeof(keys) / sizeof(keys[0]), custom_key, user, section,
	    name, value, err, errlen);
}

static bool
portset_empty(const struct portset *p)
{
	for (size_t i = 0; i < sizeof(p->bits); i++)
		if (p->bits[i] != 0)
			return false;
	return true;
}

int
cconf_load(struct cconf *c, const char *path, char *err, size_t errlen)
{
	cconf_defaults(c);
	if (c->exclude.n == 0) {
		snprintf(err, errlen, "%s: out of memory", path ? path : "defaults");
		goto fail;
	}
	if (path == NULL)
		return 0;
	if (conf_load(path, set_key, c, err, errlen) == -1)
		goto fail;
	if (portset_empty(&c->ports)) {
		snprintf(err, errlen, "%s: [hijack] ports must be set", path);
		goto fail;
	}
	if (c->key_file[0] == '\0' || c->control_socket[0] == '\0') {
		snprintf(err, errlen, "%s: [slotd] key_file and control_socket must be set",
		    path);
		goto fail;
	}
	if (c->user[0] == '\0' || c->iptables[0] == '\0' ||
	    c->iptables[strcspn(c->iptables, " \t")] != '\0') {
		snprintf(err, errlen, "%s: [slotd] user and iptables must be set (one word each)",
		    path);
		goto fail;
	}
	if (c->nft[0] == '\0' || c->nft[strcspn(c->nft, " \t")] != '\0') {
		snprintf(err, errlen, "%s: [slotd] nft must be set (one word)", path);
		goto fail;
	}
	if ((c->mode & RULES_GATEWAY) && c->nlan == 0) {
		snprintf(err, errlen, "%s: [hijack] mode %s needs lan_interfaces (the interfaces "
		    "the LAN's connections come in on)", path,
		    c->mode & RULES_LOCAL ? "both" : "gateway");
		goto fail;
	}
	if (c->auth_mode == IDENT_MODE_IDENTITY &&
	    (c->id_key[0] == '\0' || c->id_cert[0] == '\0' || c->id_ca[0] == '\0')) {
		snprintf(err, errlen, "%s: [auth] mode identity needs key, certificate and ca",
		    path);
		goto fail;
	}
	if ((c->bypass_mark & c->relay_mask) != 0) {
		snprintf(err, errlen, "%s: [slotd] bypass_mark 0x%08x overlaps "
		    "relay_mask 0x%08x", path, c->bypass_mark, c->relay_mask);
		goto fail;
	}
	if (c->lib_socket[0] && (c->lib_mark & (c->bypass_mark | c->relay_mask)) != 0) {
		snprintf(err, errlen, "%s: [lib] mark 0x%08x overlaps [slotd] bypass_mark or "
		    "relay_mask: choose another bit (or socket = , no lib socket)", path, c->lib_mark);
		goto fail;
	}
	if (c->lib_socket[0] && (c->lib_socket_mode & 0600) != 0600) {
		snprintf(err, errlen, "%s: [lib] socket_mode 0%o: slotd's own user needs "
		    "read and write (at least 0600)", path, c->lib_socket_mode);
		goto fail;
	}
	if (c->run_cgroup[0] && !rules_cgroup_ok(c->run_cgroup)) {
		snprintf(err, errlen, "%s: [lib] cgroup '%s': expected a relative cgroup v2 path "
		    "of letters, digits and ._-, its parts separated by single '/', or empty "
		    "(off)", path, c->run_cgroup);
		goto fail;
	}
	char sub[160];
	if (libsrv_attach_from_ok(c->attach_from, sub, sizeof(sub)) == -1) {
		snprintf(err, errlen, "%s: [lib] attach_from: %s", path, sub);
		goto fail;
	}
	/* Relay i gets mark (i + 1) << shift. */
	if ((c->relay_mask >> conf_mask_shift(c->relay_mask)) < c->nrelays) {
		snprintf(err, errlen, "%s: [slotd] relay_mask 0x%08x has room for "
		    "%u relays, not %zu", path, c->relay_mask,
		    c->relay_mask >> conf_mask_shift(c->relay_mask), c->nrelays);
		goto fail;
	}
	if (c->hold_timeout_ms * 1000 < c->sel.repair_timeout_us) {
		snprintf(err, errlen, "%s: [select] hold_timeout must be at least "
		    "repair_timeout", path);
		goto fail;
	}
	if (c->reconnect_max_ms < c->reconnect_min_ms) {
		snprintf(err, errlen, "%s: [relays] reconnect_max must be at least "
		    "reconnect_min", path);
		goto fail;
	}
	if (c->dir_retry_ms > c->dir_refresh_ms) {
		snprintf(err, errlen, "%s: [directory] retry must be at most refresh", path);
		goto fail;
	}
	return 0;
fail:
	cconf_free(c);
	return -1;
}
