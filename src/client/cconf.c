#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/conf.h"
#include "slot/ident.h"
#include "cconf.h"

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

	c->keepalive_interval_ms = 30000;
	c->keepalive_timeout_ms = 10000;
	c->reconnect_min_ms = 500;
	c->reconnect_max_ms = 30000;
	c->failure_quarantine_ms = 30000;

	snprintf(c->lib_socket, sizeof(c->lib_socket), "/run/slot/slotd-lib.sock");
	c->lib_socket_mode = 0666;
	c->lib_mark = 0x20000000;
	snprintf(c->run_cgroup, sizeof(c->run_cgroup), "slot.run");

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

/* A mark or mask: hex ("0x...") or decimal, 32 bits. */
static int
parse_mark(const char *s, uint32_t *out, char *sub, size_t sublen)
{
	unsigned long long v;
	char *end;

	/* strtoull would take blanks and a sign. */
	errno = 0;
	if (!isdigit((unsigned char)*s) ||
	    (v = strtoull(s, &end, 0), *end != '\0') || errno == ERANGE ||
	    v > UINT32_MAX) {
		snprintf(sub, sublen, "expected a 32-bit number, hex (0x...) or decimal");
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

static unsigned
mask_shift(uint32_t m)
{
	return m != 0 ? (unsigned)__builtin_ctz(m) : 0;
}

/* Non-zero, and its bits in one run: shifted down, it is 2^n - 1. */
static bool
mask_contiguous(uint32_t m)
{
	uint32_t low = m >> mask_shift(m);

	return m != 0 && (low & (low + 1)) == 0;
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

struct key_spec {
	const char *section, *name;
	enum {
		K_STR, K_LEVEL, K_UINT, K_MS, K_US, K_DOUBLE, K_BIT, K_MASK,
		K_STRATEGY, K_PORTS, K_CIDRS, K_RELAY, K_URLS, K_BOOL, K_EP_OPT,
		K_AUTHMODE, K_BACKEND, K_HMODE, K_IFACES, K_NATMODE, K_FMODE,
	} kind;
	size_t off, size;	/* of the member; K_UINT stores 2, 4 or 8 bytes */
	uint64_t min, max;	/* K_UINT, K_DOUBLE; K_MS and K_US in ms */
};

#define F(m) offsetof(struct cconf, m), sizeof(((struct cconf *)0)->m)
static const struct key_spec keys[] = {
	{ "slotd", "key_file", K_STR, F(key_file), 0, 0 },
	{ "slotd", "control_socket", K_STR, F(control_socket), 0, 0 },
	{ "slotd", "metrics_listen", K_EP_OPT, F(metrics_listen), 0, 0 },
	{ "slotd", "log_level", K_LEVEL, F(log_level), 0, 0 },
	{ "slotd", "queue", K_UINT, F(queue), 0, 65535 },
	{ "slotd", "queue_maxlen", K_UINT, F(queue_maxlen), 16, 1000000 },
	{ "slotd", "bypass_mark", K_BIT, F(bypass_mark), 0, 0 },
	{ "slotd", "relay_mask", K_MASK, F(relay_mask), 0, 0 },
	{ "slotd", "max_clock_skew", K_MS, F(max_clock_skew_ms), 1000, HOUR_MS },
	{ "slotd", "user", K_STR, F(user), 0, 0 },
	{ "slotd", "iptables", K_STR, F(iptables), 0, 0 },
	{ "slotd", "nft", K_STR, F(nft), 0, 0 },
	{ "slotd", "rules_timeout", K_MS, F(rules_timeout_ms), 1000, 600000 },
	{ "auth", "mode", K_AUTHMODE, F(auth_mode), 0, 0 },
	{ "auth", "key", K_STR, F(id_key), 0, 0 },
	{ "auth", "certificate", K_STR, F(id_cert), 0, 0 },
	{ "auth", "ca", K_STR, F(id_ca), 0, 0 },
	{ "hijack", "ports", K_PORTS, F(ports), 0, 0 },
	{ "hijack", "include", K_CIDRS, F(include), 0, 0 },
	{ "hijack", "exclude", K_CIDRS, F(exclude), 0, 0 },
	{ "hijack", "backend", K_BACKEND, F(backend), 0, 0 },
	{ "hijack", "mode", K_HMODE, F(mode), 0, 0 },
	{ "hijack", "lan_interfaces", K_IFACES, F(lan), 0, 0 },
	{ "select", "strategy", K_STRATEGY, F(sel.strategy), 0, 0 },
	{ "select", "k", K_UINT, F(sel.k), 1, 100000 },
	{ "select", "c_wait", K_DOUBLE, F(sel.c_wait), 1, 10 },
	{ "select", "min_gain", K_DOUBLE, F(sel.min_gain), 1, 100 },
	{ "select", "repair_timeout", K_US, F(sel.repair_timeout_us), 100, 60000 },
	{ "select", "hold_timeout", K_MS, F(hold_timeout_ms), 100, 120000 },
	{ "select", "establish_timeout", K_MS, F(establish_timeout_ms), 100, 60000 },
	{ "select", "cache_ttl", K_MS, F(cache_ttl_ms), 0, 7 * DAY_MS },
	{ "select", "cache_size", K_UINT, F(cache_size), 1, 10000000 },
	{ "select", "cache_early", K_BOOL, F(cache_early), 0, 0 },
	{ "select", "synack_hold", K_BOOL, F(synack_hold), 0, 0 },
	{ "select", "max_held", K_UINT, F(max_held), 1, 1000000 },
	{ "select", "seed", K_UINT, F(seed), 0, UINT64_MAX },
	{ "relays", "keepalive_interval", K_MS, F(keepalive_interval_ms), 1000, HOUR_MS },
	{ "relays", "keepalive_timeout", K_MS, F(keepalive_timeout_ms), 100, HOUR_MS },
	{ "relays", "reconnect_min", K_MS, F(reconnect_min_ms), 10, HOUR_MS },
	{ "relays", "reconnect_max", K_MS, F(reconnect_max_ms), 10, HOUR_MS },
	{ "relays", "failure_quarantine", K_MS, F(failure_quarantine_ms), 0, HOUR_MS },
	{ "relays", "relay", K_RELAY, F(relays), 0, 0 },
	{ "nat", "mode", K_NATMODE, F(nat_mode), 0, 0 },
	{ "lib", "socket", K_STR, F(lib_socket), 0, 0 },
	{ "lib", "socket_mode", K_FMODE, F(lib_socket_mode), 0, 0 },
	{ "lib", "mark", K_BIT, F(lib_mark), 0, 0 },
	{ "lib", "cgroup", K_STR, F(run_cgroup), 0, 0 },
	{ "directory", "urls", K_URLS, F(dir_urls), 0, 0 },
	{ "directory", "refresh", K_MS, F(dir_refresh_ms), 100, 7 * DAY_MS },
	{ "directory", "retry", K_MS, F(dir_retry_ms), 100, 7 * DAY_MS },
	{ "directory", "timeout", K_MS, F(dir_timeout_ms), 100, 10 * 60 * 1000 },
	{ "directory", "cache_file", K_STR, F(dir_cache_file), 0, 0 },
};
#undef F

static void
store_uint(void *dst, size_t size, uint64_t v)
{
	switch (size) {
	case 2:
		*(uint16_t *)dst = (uint16_t)v;
		break;
	case 4:
		*(uint32_t *)dst = (uint32_t)v;
		break;
	default:
		*(uint64_t *)dst = v;
		break;
	}
}

static int
set_key(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	struct cconf *c = user;
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
	uint64_t v;
	uint32_t m;

	switch (k->kind) {
	case K_STR:
		rc = conf_string(value, dst, k->size, sub, sizeof(sub));
		break;
	case K_BACKEND:
		if (strcmp(value, "auto") == 0)
			*(int *)dst = CCONF_BACKEND_AUTO;
		else if (strcmp(value, "nft") == 0)
			*(int *)dst = RULES_NFT;
		else if (strcmp(value, "iptables") == 0)
			*(int *)dst = RULES_IPTABLES;
		else {
			snprintf(sub, sizeof(sub), "expected auto, nft or iptables");
			rc = -1;
		}
		break;
	case K_HMODE:
		if (strcmp(value, "local") == 0)
			*(unsigned *)dst = RULES_LOCAL;
		else if (strcmp(value, "gateway") == 0)
			*(unsigned *)dst = RULES_GATEWAY;
		else if (strcmp(value, "both") == 0)
			*(unsigned *)dst = RULES_LOCAL | RULES_GATEWAY;
		else {
			snprintf(sub, sizeof(sub), "expected local, gateway or both");
			rc = -1;
		}
		break;
	case K_IFACES:
		rc = parse_ifaces(c, value, sub, sizeof(sub));
		break;
	case K_NATMODE:
		if (strcmp(value, "auto") == 0)
			*(int *)dst = CCONF_NAT_AUTO;
		else if (strcmp(value, "on") == 0)
			*(int *)dst = CCONF_NAT_ON;
		else if (strcmp(value, "off") == 0)
			*(int *)dst = CCONF_NAT_OFF;
		else {
			snprintf(sub, sizeof(sub), "expected auto, on or off");
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
		rc = conf_uint(value, k->min, k->max, &v, sub, sizeof(sub));
		if (rc == 0)
			store_uint(dst, k->size, v);
		break;
	case K_MS:
	case K_US:
		rc = conf_duration_ms(value, &v, sub, sizeof(sub));
		if (rc == 0 && (v < k->min || v > k->max)) {
			snprintf(sub, sizeof(sub), "must be between %llu ms and %llu ms",
			    (unsigned long long)k->min, (unsigned long long)k->max);
			rc = -1;
		}
		if (rc == 0)
			*(uint64_t *)dst = k->kind == K_US ? v * 1000 : v;
		break;
	case K_BOOL:
		rc = conf_bool(value, dst, sub, sizeof(sub));
		break;
	case K_DOUBLE:
		rc = conf_double(value, (double)k->min, (double)k->max, dst,
		    sub, sizeof(sub));
		break;
	case K_FMODE: {
		char *end;
		errno = 0;
		unsigned long fm = strtoul(value, &end, 8);
		if (value[0] < '0' || value[0] > '7' || *end != '\0' || errno || fm > 0777) {
			snprintf(sub, sizeof(sub), "expected an octal file mode, 0600 to 0777");
			rc = -1;
		} else {
			*(uint32_t *)dst = (uint32_t)fm;
		}
		break;
	}
	case K_BIT:
		rc = parse_mark(value, &m, sub, sizeof(sub));
		if (rc == 0 && (m == 0 || (m & (m - 1)) != 0)) {
			snprintf(sub, sizeof(sub), "must be exactly one bit");
			rc = -1;
		}
		if (rc == 0)
			*(uint32_t *)dst = m;
		break;
	case K_MASK:
		rc = parse_mark(value, &m, sub, sizeof(sub));
		if (rc == 0 && !mask_contiguous(m)) {
			snprintf(sub, sizeof(sub), "must be non-zero contiguous bits");
			rc = -1;
		}
		if (rc == 0)
			*(uint32_t *)dst = m;
		break;
	case K_STRATEGY:
		if (sel_strategy_parse(value, dst) == -1) {
			snprintf(sub, sizeof(sub), "expected cover, all, random or randgroup");
			rc = -1;
		}
		break;
	case K_PORTS:
		rc = portset_parse(value, dst, sub, sizeof(sub));
		break;
	case K_CIDRS: {
		/* "" parses to an empty list: "exclude =" hijacks LAN traffic too. */
		struct cidr_list l = { 0 };
		rc = cidr_list_parse(value, &l, sub, sizeof(sub));
		if (rc == 0) {
			cidr_list_free(dst);
			*(struct cidr_list *)dst = l;
		}
		break;
	}
	case K_RELAY:
		rc = add_relay(c, value, sub, sizeof(sub));
		break;
	case K_URLS:
		rc = conf_urls(value, dst, sub, sizeof(sub));
		break;
	case K_EP_OPT:
		/* Empty: off. */
		if (value[0] == '\0')
			memset(dst, 0, sizeof(struct endpoint));
		else if (ep_parse(value, 0, dst) == -1) {
			snprintf(sub, sizeof(sub), "expected address:port, or nothing");
			rc = -1;
		}
		break;
	}
	if (rc == -1)
		snprintf(err, errlen, "[%s] %s = %s: %s", section, name, value, sub);
	return rc;
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
	/* Relay i gets mark (i + 1) << shift. */
	if ((c->relay_mask >> mask_shift(c->relay_mask)) < c->nrelays) {
		snprintf(err, errlen, "%s: [slotd] relay_mask 0x%08x has room for "
		    "%u relays, not %zu", path, c->relay_mask,
		    c->relay_mask >> mask_shift(c->relay_mask), c->nrelays);
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
