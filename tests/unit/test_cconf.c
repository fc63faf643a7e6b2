/* slotd configuration (src/client/cconf.c): defaults, every kind of key,
 * relay lines, checks across keys, and broken files with the line named. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../src/client/cconf.h"

static char path[64];

static const char *
write_conf(const char *text)
{
	snprintf(path, sizeof(path), "/tmp/slot-test-cconf-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

/* Loads text (ports set unless the text has its own [hijack] section). */
static int
load(struct cconf *c, const char *text, char *err, size_t errlen)
{
	char buf[8192];

	snprintf(buf, sizeof(buf), "%s%s", text,
	    strstr(text, "[hijack]") ? "" : "\n[hijack]\nports = 443\n");
	write_conf(buf);
	int rc = cconf_load(c, path, err, errlen);
	unlink(path);
	return rc;
}

static void
bad(const char *text, const char *want)
{
	struct cconf c;
	char err[256] = "";

	if (load(&c, text, err, sizeof(err)) != -1)
		fail_msg("\"%s\" loaded", text);
	if (strstr(err, want) == NULL)
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

static bool
excluded(const struct cconf *c, const char *s)
{
	struct addr a;

	assert_int_equal(addr_parse(s, &a), 0);
	return cidr_list_match(&c->exclude, &a);
}

static void
test_defaults(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	assert_int_equal(cconf_load(&c, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.key_file, "/etc/slot/key");
	assert_string_equal(c.control_socket, "/run/slot/slotd.sock");
	assert_int_equal(c.log_level, SLOG_INFO);
	assert_int_equal(c.queue, 7600);
	assert_int_equal(c.queue_maxlen, 4096);
	assert_int_equal(c.bypass_mark, 0x10000000);
	assert_int_equal(c.relay_mask, 0x0fff0000);
	assert_int_equal(c.max_clock_skew_ms, 30000);
	assert_false(portset_has(&c.ports, 443));
	assert_int_equal(c.include.n, 0);
	assert_int_equal(c.exclude.n, 10);
	assert_true(excluded(&c, "192.168.1.1"));
	assert_true(excluded(&c, "100.64.0.1"));
	assert_true(excluded(&c, "fe80::1"));
	assert_true(excluded(&c, "fd00::1"));
	assert_false(excluded(&c, "8.8.8.8"));
	assert_false(excluded(&c, "2001:db8::1"));
	assert_int_equal(c.sel.strategy, SEL_COVER);
	assert_int_equal(c.sel.k, 20);
	assert_true(c.sel.c_wait == 1.25);
	assert_true(c.sel.min_gain == 1.1);
	assert_int_equal(c.sel.max_chain, 3);
	assert_true(c.sel.chain_gain == 1.1);
	assert_int_equal(c.sel.repair_timeout_us, 3000000);
	assert_int_equal(c.hold_timeout_ms, 5000);
	assert_int_equal(c.establish_timeout_ms, 3000);
	assert_int_equal(c.cache_ttl_ms, 600000);
	assert_int_equal(c.cache_size, 65536);
	assert_true(c.cache_early);
	assert_true(c.synack_hold);
	assert_int_equal(c.max_held, 4096);
	assert_int_equal(c.seed, 0);
	assert_int_equal(c.keepalive_interval_ms, 30000);
	assert_int_equal(c.keepalive_timeout_ms, 10000);
	assert_int_equal(c.reconnect_min_ms, 500);
	assert_int_equal(c.reconnect_max_ms, 30000);
	assert_int_equal(c.failure_quarantine_ms, 30000);
	assert_null(c.relays);
	assert_int_equal(c.nrelays, 0);
	assert_int_equal(c.dir_urls.n, 0);
	assert_int_equal(c.dir_refresh_ms, 2 * 3600 * 1000);
	assert_int_equal(c.dir_retry_ms, 30000);
	assert_int_equal(c.dir_timeout_ms, 5000);
	assert_string_equal(c.dir_cache_file, "/var/lib/slotd/relays");
	cconf_free(&c);
	cconf_free(&c);		/* twice is fine */
}

static void
test_example_is_defaults(void **state)
{
	struct cconf c, d;
	char err[256];
	(void)state;

	/* etc/slotd.conf lists the defaults (plus ports): loading it changes
	 * nothing else. Run from the source tree, as make unit does. */
	if (cconf_load(&c, "etc/slotd.conf", err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(cconf_load(&d, NULL, err, sizeof(err)), 0);
	assert_true(portset_has(&c.ports, 80));
	assert_true(portset_has(&c.ports, 443));
	assert_false(portset_has(&c.ports, 22));
	assert_string_equal(c.key_file, d.key_file);
	assert_string_equal(c.control_socket, d.control_socket);
	assert_int_equal(c.metrics_listen.addr.family, 0);	/* off */
	assert_int_equal(d.metrics_listen.addr.family, 0);
	assert_int_equal(c.log_level, d.log_level);
	assert_int_equal(c.queue, d.queue);
	assert_int_equal(c.queue_maxlen, d.queue_maxlen);
	assert_int_equal(c.bypass_mark, d.bypass_mark);
	assert_int_equal(c.relay_mask, d.relay_mask);
	assert_int_equal(c.max_clock_skew_ms, d.max_clock_skew_ms);
	assert_int_equal(c.include.n, d.include.n);
	assert_int_equal(c.exclude.n, d.exclude.n);
	assert_memory_equal(c.exclude.v, d.exclude.v, d.exclude.n * sizeof(*d.exclude.v));
	assert_memory_equal(&c.sel, &d.sel, sizeof(d.sel));
	assert_int_equal(c.hold_timeout_ms, d.hold_timeout_ms);
	assert_int_equal(c.establish_timeout_ms, d.establish_timeout_ms);
	assert_int_equal(c.cache_ttl_ms, d.cache_ttl_ms);
	assert_int_equal(c.cache_size, d.cache_size);
	assert_int_equal(c.cache_early, d.cache_early);
	assert_int_equal(c.max_held, d.max_held);
	assert_int_equal(c.seed, d.seed);
	assert_int_equal(c.keepalive_interval_ms, d.keepalive_interval_ms);
	assert_int_equal(c.keepalive_timeout_ms, d.keepalive_timeout_ms);
	assert_int_equal(c.reconnect_min_ms, d.reconnect_min_ms);
	assert_int_equal(c.reconnect_max_ms, d.reconnect_max_ms);
	assert_int_equal(c.failure_quarantine_ms, d.failure_quarantine_ms);
	assert_int_equal(c.nrelays, 0);
	assert_int_equal(c.dir_urls.n, d.dir_urls.n);
	assert_int_equal(c.dir_refresh_ms, d.dir_refresh_ms);
	assert_int_equal(c.dir_retry_ms, d.dir_retry_ms);
	assert_int_equal(c.dir_timeout_ms, d.dir_timeout_ms);
	assert_string_equal(c.dir_cache_file, d.dir_cache_file);
	assert_string_equal(c.nft, d.nft);
	assert_int_equal(c.backend, CCONF_BACKEND_AUTO);
	assert_int_equal(d.backend, CCONF_BACKEND_AUTO);
	assert_int_equal(c.mode, RULES_LOCAL);
	assert_int_equal(d.mode, RULES_LOCAL);
	assert_int_equal(c.nlan, 0);
	cconf_free(&c);
	cconf_free(&d);
}

/* [hijack] backend, mode and lan_interfaces. */
static void
test_hijack_backend_and_mode(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	assert_int_equal(load(&c, "[hijack]\nports = 443\nbackend = nft\nmode = both\n"
	    "lan_interfaces = eth1, br-lan.10 wlan0\n[slotd]\nnft = /usr/sbin/nft\n", err,
	    sizeof(err)), 0);
	assert_int_equal(c.backend, RULES_NFT);
	assert_int_equal(c.mode, RULES_LOCAL | RULES_GATEWAY);
	assert_int_equal(c.nlan, 3);
	assert_string_equal(c.lan[0], "eth1");
	assert_string_equal(c.lan[1], "br-lan.10");
	assert_string_equal(c.lan[2], "wlan0");
	assert_string_equal(c.nft, "/usr/sbin/nft");
	cconf_free(&c);
	assert_int_equal(load(&c, "[hijack]\nports = 443\nbackend = iptables\nmode = gateway\n"
	    "lan_interfaces = lan0\n", err, sizeof(err)), 0);
	assert_int_equal(c.backend, RULES_IPTABLES);
	assert_int_equal(c.mode, RULES_GATEWAY);
	assert_int_equal(c.nlan, 1);
	cconf_free(&c);

	bad("[hijack]\nports = 443\nbackend = pf\n",
	    ":3: [hijack] backend = pf: expected auto, nft or iptables");
	bad("[hijack]\nports = 443\nmode = router\n",
	    ":3: [hijack] mode = router: expected local, gateway or both");
	bad("[hijack]\nports = 443\nlan_interfaces = eth0, \"x\"\n",
	    ":3: [hijack] lan_interfaces = eth0, \"x\": '\"x\"': expected interface names");
	bad("[hijack]\nports = 443\nlan_interfaces = a-very-long-interface\n",
	    "expected interface names (1 to 15");
	bad("[hijack]\nports = 443\nmode = gateway\n",
	    "[hijack] mode gateway needs lan_interfaces");
	bad("[hijack]\nports = 443\nmode = both\nlan_interfaces =\n",
	    "[hijack] mode both needs lan_interfaces");
	bad("[slotd]\nnft = my nft\n", "[slotd] nft must be set (one word)");
}

static void
test_values(void **state)
{
	struct cconf c;
	char err[256], b[EP_STRLEN];
	(void)state;

	write_conf("[slotd]\nkey_file = /k\ncontrol_socket = /s\nlog_level = debug\n"
	    "metrics_listen = 127.0.0.1:9760\n"
	    "queue = 0\nqueue_maxlen = 16\nbypass_mark = 1\nrelay_mask = 0xff00\n"
	    "max_clock_skew = 1h\n"
	    "[hijack]\nports = 80, 8000-8099\ninclude = 203.0.113.0/24, 2001:db8::/32\n"
	    "exclude = 203.0.113.7\n"
	    "[select]\nstrategy = random\nk = 7\nc_wait = 2.5\nmin_gain = 1\n"
	    "max_chain = 2\nchain_gain = 1.5\n"
	    "repair_timeout = 250ms\nhold_timeout = 250ms\nestablish_timeout = 1m\n"
	    "cache_ttl = 0\ncache_size = 10\nmax_held = 1\nseed = 18446744073709551615\n"
	    "[relays]\nkeepalive_interval = 5s\nkeepalive_timeout = 100ms\n"
	    "reconnect_min = 10ms\nreconnect_max = 10ms\nfailure_quarantine = 0\n"
	    "relay = 192.0.2.1\nrelay = [2001:db8::2]:9000 group=7 data=9100\n"
	    "[directory]\nurls = http://192.0.2.53:7602/RPC2, https://dir.example.org/RPC2\t"
	    "http://[2001:db8::53]:7602/RPC2\nrefresh = 10m\nretry = 10m\ntimeout = 100ms\n"
	    "cache_file = /tmp/x/relays\n");
	if (cconf_load(&c, path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	unlink(path);
	assert_string_equal(c.key_file, "/k");
	assert_string_equal(c.control_socket, "/s");
	assert_string_equal(ep_fmt(&c.metrics_listen, b), "127.0.0.1:9760");
	assert_int_equal(c.log_level, SLOG_DEBUG);
	assert_int_equal(c.queue, 0);
	assert_int_equal(c.queue_maxlen, 16);
	assert_int_equal(c.bypass_mark, 1);
	assert_int_equal(c.relay_mask, 0xff00);
	assert_int_equal(c.max_clock_skew_ms, 3600000);
	assert_true(portset_has(&c.ports, 80));
	assert_true(portset_has(&c.ports, 8050));
	assert_false(portset_has(&c.ports, 443));
	assert_int_equal(c.include.n, 2);
	assert_int_equal(c.exclude.n, 1);
	assert_true(excluded(&c, "203.0.113.7"));
	assert_false(excluded(&c, "10.0.0.1"));
	assert_int_equal(c.sel.strategy, SEL_RANDOM_K);
	assert_int_equal(c.sel.k, 7);
	assert_true(c.sel.c_wait == 2.5);
	assert_true(c.sel.min_gain == 1.0);
	assert_int_equal(c.sel.max_chain, 2);
	assert_true(c.sel.chain_gain == 1.5);
	assert_int_equal(c.sel.repair_timeout_us, 250000);
	assert_int_equal(c.hold_timeout_ms, 250);
	assert_int_equal(c.establish_timeout_ms, 60000);
	assert_int_equal(c.cache_ttl_ms, 0);
	assert_int_equal(c.cache_size, 10);
	assert_int_equal(c.max_held, 1);
	assert_true(c.seed == UINT64_MAX);
	assert_int_equal(c.keepalive_interval_ms, 5000);
	assert_int_equal(c.keepalive_timeout_ms, 100);
	assert_int_equal(c.reconnect_min_ms, 10);
	assert_int_equal(c.reconnect_max_ms, 10);
	assert_int_equal(c.failure_quarantine_ms, 0);
	assert_int_equal(c.nrelays, 2);
	assert_string_equal(ep_fmt(&c.relays[0].control, b), "192.0.2.1:7600");
	assert_int_equal(c.relays[0].data_port, 7601);
	assert_int_equal(c.relays[0].group, 0);
	assert_string_equal(ep_fmt(&c.relays[1].control, b), "[2001:db8::2]:9000");
	assert_int_equal(c.relays[1].data_port, 9100);
	assert_int_equal(c.relays[1].group, 7);
	assert_int_equal(c.dir_urls.n, 3);
	assert_string_equal(c.dir_urls.url[0], "http://192.0.2.53:7602/RPC2");
	assert_string_equal(c.dir_urls.url[1], "https://dir.example.org/RPC2");
	assert_string_equal(c.dir_urls.url[2], "http://[2001:db8::53]:7602/RPC2");
	assert_int_equal(c.dir_refresh_ms, 600000);
	assert_int_equal(c.dir_retry_ms, 600000);
	assert_int_equal(c.dir_timeout_ms, 100);
	assert_string_equal(c.dir_cache_file, "/tmp/x/relays");
	cconf_free(&c);
	assert_null(c.relays);
	assert_null(c.exclude.v);
	cconf_free(&c);
}

static void
test_parse_relay(void **state)
{
	struct cconf_relay r;
	char err[256], b[EP_STRLEN];
	(void)state;

	assert_int_equal(cconf_parse_relay("198.51.100.1", &r, err, sizeof(err)), 0);
	assert_string_equal(ep_fmt(&r.control, b), "198.51.100.1:7600");
	assert_int_equal(r.data_port, 7601);
	assert_int_equal(r.group, UINT32_MAX);	/* the loader's to fill */

	assert_int_equal(cconf_parse_relay("[::1]:9000", &r, err, sizeof(err)), 0);
	assert_string_equal(ep_fmt(&r.control, b), "[::1]:9000");
	assert_int_equal(r.data_port, 9001);

	assert_int_equal(cconf_parse_relay("::1", &r, err, sizeof(err)), 0);
	assert_int_equal(r.control.port, 7600);

	assert_int_equal(cconf_parse_relay("10.1.1.1:80  data=443\tgroup=0", &r,
	    err, sizeof(err)), 0);
	assert_int_equal(r.control.port, 80);
	assert_int_equal(r.data_port, 443);
	assert_int_equal(r.group, 0);

	/* The highest static group; above are the directory's. */
	assert_int_equal(cconf_parse_relay("10.1.1.1 group=2147483647", &r, err, sizeof(err)), 0);
	assert_int_equal(r.group, CCONF_GROUP_MAX);
	assert_false(cconf_relay_from_dir(&r));

	assert_int_equal(cconf_parse_relay("10.1.1.1:65535 data=1", &r, err, sizeof(err)), 0);
	assert_int_equal(r.data_port, 1);

	static const struct {
		const char *line, *want;
	} bads[] = {
		{ "", "expected ADDR" },
		{ "relay.example.org", "'relay.example.org'" },
		{ "10.1.1.1:0", "'10.1.1.1:0'" },
		{ "10.1.1.1:65535", "65536" },
		{ "10.1.1.1 port=7", "'port=7'" },
		{ "10.1.1.1 data=", "'data='" },
		{ "10.1.1.1 data=0", "'data=0'" },
		{ "10.1.1.1 data=65536", "'data=65536'" },
		{ "10.1.1.1 data=x1", "'data=x1'" },
		{ "10.1.1.1 data=1 data=2", "'data=2'" },
		{ "10.1.1.1 group=-1", "'group=-1'" },
		{ "10.1.1.1 group=4294967295", "'group=4294967295'" },
		{ "10.1.1.1 group=4294967294", "[0, 2147483647]" },
		{ "10.1.1.1 group=2147483648", "groups above 2147483647 are the directory's" },
		{ "10.1.1.1:7600 data=7600", "control port" },
	};
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		err[0] = '\0';
		if (cconf_parse_relay(bads[i].line, &r, err, sizeof(err)) != -1)
			fail_msg("\"%s\" parsed", bads[i].line);
		if (strstr(err, bads[i].want) == NULL)
			fail_msg("\"%s\": error \"%s\" lacks \"%s\"", bads[i].line,
			    err, bads[i].want);
	}
}

static void
test_relay_lines(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	/* Groups default to the index, whatever the explicit ones around. */
	assert_int_equal(load(&c, "[relays]\nrelay = 10.0.0.1\nrelay = 10.0.0.2 group=0\n"
	    "relay = 10.0.0.1:7700\n", err, sizeof(err)), 0);
	assert_int_equal(c.nrelays, 3);
	assert_int_equal(c.relays[0].group, 0);
	assert_int_equal(c.relays[1].group, 0);
	assert_int_equal(c.relays[2].group, 2);
	assert_int_equal(c.relays[2].data_port, 7701);
	cconf_free(&c);

	/* The same control endpoint however written. */
	bad("[relays]\nrelay = 10.0.0.1\nrelay = 10.0.0.2\nrelay = 10.0.0.1:7600 data=9\n",
	    ":4: [relays] relay = 10.0.0.1:7600 data=9: duplicates relay 0 (10.0.0.1:7600)");
	bad("[relays]\nrelay = [::ffff:10.0.0.1]\nrelay = 10.0.0.1\n", "duplicates relay 0");
	bad("[relays]\nrelay = 10.0.0.1 weight=3\n", ":2:");
	bad("[relays]\nrelay = 10.0.0.1 weight=3\n", "'weight=3'");
	bad("[relays]\n\nrelay = 10.0.0.1 group=x\n", ":3:");
	bad("[relays]\nrelay = 10.0.0.1 group=x\n", "'group=x'");
	bad("[relays]\nrelay =\n", ":2:");
}

static void
test_too_many_relays(void **state)
{
	struct cconf c;
	char err[256];
	size_t cap = (CCONF_MAX_RELAYS + 1) * 32 + 64, len;
	char *text = malloc(cap);
	(void)state;

	assert_non_null(text);
	len = (size_t)snprintf(text, cap, "[slotd]\nrelay_mask = 0xfff\n"
	    "[hijack]\nports = 1\n[relays]\n");
	for (unsigned i = 0; i < CCONF_MAX_RELAYS; i++)
		len += (size_t)snprintf(text + len, cap - len, "relay = 10.0.%u.%u\n",
		    i / 256, i % 256);
	write_conf(text);
	if (cconf_load(&c, path, err, sizeof(err)) != 0)
		fail_msg("%s", err);
	assert_int_equal(c.nrelays, CCONF_MAX_RELAYS);
	assert_int_equal(c.relays[CCONF_MAX_RELAYS - 1].group, CCONF_MAX_RELAYS - 1);
	cconf_free(&c);
	unlink(path);

	snprintf(text + len, cap - len, "relay = 10.99.0.1\n");
	write_conf(text);
	assert_int_equal(cconf_load(&c, path, err, sizeof(err)), -1);
	unlink(path);
	assert_non_null(strstr(err, "more than 4095 relays"));
	free(text);
}

static void
test_exclude_empty(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	assert_int_equal(load(&c, "[hijack]\nports = 443\nexclude =\n", err, sizeof(err)), 0);
	assert_int_equal(c.exclude.n, 0);
	assert_false(excluded(&c, "10.0.0.1"));
	cconf_free(&c);

	/* The last value wins; include empty means every destination. */
	assert_int_equal(load(&c, "[hijack]\nports = 443\nexclude = 10.0.0.0/8\n"
	    "exclude =\ninclude =\n", err, sizeof(err)), 0);
	assert_int_equal(c.exclude.n, 0);
	assert_int_equal(c.include.n, 0);
	cconf_free(&c);
}

/* [lib]: the socket, its mode (octal), the mark, the run cgroup, who may
 * attach. */
static void
test_lib(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	assert_int_equal(load(&c, "", err, sizeof(err)), 0);
	assert_string_equal(c.lib_socket, "/run/slot/slotd-lib.sock");
	assert_int_equal(c.lib_socket_mode, 0666);
	assert_int_equal(c.lib_mark, 0x20000000);
	assert_string_equal(c.run_cgroup, "slot.run");
	assert_string_equal(c.attach_from, "/user.slice");
	cconf_free(&c);
	assert_int_equal(load(&c, "[lib]\nattach_from = /user.slice, /system.slice/x.service\n",
	    err, sizeof(err)), 0);
	assert_string_equal(c.attach_from, "/user.slice, /system.slice/x.service");
	cconf_free(&c);
	assert_int_equal(load(&c, "[lib]\nattach_from =\n", err, sizeof(err)), 0);
	assert_string_equal(c.attach_from, "");
	cconf_free(&c);
	assert_int_equal(load(&c, "[lib]\nsocket = /tmp/x.sock\nsocket_mode = 0660\n"
	    "mark = 0x40000000\ncgroup = system.slice/slot-run\n", err, sizeof(err)), 0);
	assert_int_equal(c.lib_socket_mode, 0660);
	assert_int_equal(c.lib_mark, 0x40000000);
	assert_string_equal(c.run_cgroup, "system.slice/slot-run");
	cconf_free(&c);
	assert_int_equal(load(&c, "[lib]\ncgroup =\nsocket =\n", err, sizeof(err)), 0);
	assert_string_equal(c.run_cgroup, "");
	cconf_free(&c);

	assert_int_equal(load(&c, "[lib]\nsocket_mode = 0999\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "expected an octal file mode"));
	assert_int_equal(load(&c, "[lib]\nsocket_mode = 0400\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "at least 0600"));
	assert_int_equal(load(&c, "[lib]\nmark = 0x30000000\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "exactly one bit"));
	assert_int_equal(load(&c, "[lib]\nmark = 0x10000000\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "overlaps"));
	assert_int_equal(load(&c, "[lib]\ncgroup = ../escape\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "expected a relative cgroup v2 path"));
	assert_int_equal(load(&c, "[lib]\nattach_from = user.slice\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "[lib] attach_from: 'user.slice': expected a cgroup path"));
}

static void
test_marks(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	/* No bit left for [lib] mark: only without the lib socket. */
	assert_int_equal(load(&c, "[slotd]\nbypass_mark = 0x80000000\n"
	    "relay_mask = 0x7fffffff\n", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "[lib] mark 0x20000000 overlaps"));
	assert_int_equal(load(&c, "[slotd]\nbypass_mark = 0x80000000\n"
	    "relay_mask = 0x7fffffff\n[lib]\nsocket =\n", err, sizeof(err)), 0);
	assert_int_equal(c.bypass_mark, 0x80000000u);
	assert_int_equal(c.relay_mask, 0x7fffffff);
	cconf_free(&c);
	assert_int_equal(load(&c, "[slotd]\nbypass_mark = 256\nrelay_mask = 0xff\n"
	    "[relays]\nrelay = 10.0.0.1\n", err, sizeof(err)), 0);
	assert_int_equal(c.bypass_mark, 256);
	cconf_free(&c);

	bad("[slotd]\nbypass_mark = 0\n", ":2: [slotd] bypass_mark = 0: must be exactly one bit");
	bad("[slotd]\nbypass_mark = 0x3\n", "exactly one bit");
	bad("[slotd]\nbypass_mark = -1\n", "hex (0x...) or decimal");
	bad("[slotd]\nbypass_mark = 0x\n", "hex");
	bad("[slotd]\nbypass_mark = 0x100000000\n", "32-bit");
	bad("[slotd]\nbypass_mark = 99999999999999999999999\n", "32-bit");
	bad("[slotd]\nbypass_mark = 0x10 0\n", "32-bit");
	bad("[slotd]\nrelay_mask = 0\n", ":2: [slotd] relay_mask = 0: must be non-zero contiguous");
	bad("[slotd]\nrelay_mask = 0x0f0f0000\n", "contiguous");
	bad("[slotd]\nrelay_mask = 0x1fff0000\n", "overlaps");
	bad("[slotd]\nbypass_mark = 0x100\nrelay_mask = 0xfff\n", "overlaps");
	/* Room for the marks 1..nrelays. */
	bad("[slotd]\nrelay_mask = 0x30\n[relays]\nrelay = 10.0.0.1\nrelay = 10.0.0.2\n"
	    "relay = 10.0.0.3\nrelay = 10.0.0.4\n", "room for 3 relays, not 4");
	assert_int_equal(load(&c, "[slotd]\nrelay_mask = 0x30\n[relays]\nrelay = 10.0.0.1\n"
	    "relay = 10.0.0.2\nrelay = 10.0.0.3\n", err, sizeof(err)), 0);
	cconf_free(&c);
}

static void
test_nat_mode(void **state)
{
	static const struct { const char *v; int want; } t[] = {
		{ "auto", CCONF_NAT_AUTO }, { "on", CCONF_NAT_ON }, { "off", CCONF_NAT_OFF },
	};
	struct cconf c;
	char err[256], text[64];
	(void)state;

	cconf_defaults(&c);
	assert_int_equal(c.nat_mode, CCONF_NAT_AUTO);
	cconf_free(&c);
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		snprintf(text, sizeof(text), "[nat]\nmode = %s\n", t[i].v);
		assert_int_equal(load(&c, text, err, sizeof(err)), 0);
		assert_int_equal(c.nat_mode, t[i].want);
		cconf_free(&c);
	}
}

static void
test_errors_name_the_line(void **state)
{
	(void)state;
	bad("[slotd]\nqueue = 1\nbogus = 1\n", ":3: unknown key 'bogus' in section [slotd]");
	/* A section of another daemon: the section is what is wrong. */
	bad("[relay]\nrelay = 10.0.0.1\n", ":2: unknown section [relay]");
	/* Values that are wrong say what was expected, not only what they were. */
	bad("[hijack]\nports = 80, 70000\n", "[hijack] ports = 80, 70000: 70000: expected ports "
	    "(1 to 65535), ranges LOW-HIGH or all, separated by commas");
	bad("[hijack]\nports = 80\ninclude = 203.0.113.0/33\n", "[hijack] include = "
	    "203.0.113.0/33: 203.0.113.0/33: expected addresses or networks ADDRESS/PREFIX");
	bad("[slotd]\nlog_level = loud\n", ":2: [slotd] log_level = loud: expected error");
	bad("[slotd]\nmetrics_listen = 9760\n",
	    ":2: [slotd] metrics_listen = 9760: expected address:port");
	bad("[slotd]\n\nqueue = 65536\n", ":3:");
	bad("[slotd]\nqueue_maxlen = 15\n", ":2:");
	bad("[slotd]\nqueue_maxlen = lots\n", "invalid number");
	bad("[slotd]\nmax_clock_skew = 500ms\n", ":2: [slotd] max_clock_skew = 500ms: must be between");
	bad("[slotd]\nmax_clock_skew = 2h\n", ":2:");
	bad("[hijack]\nports = 80-70\n", ":2: [hijack] ports");
	bad("[hijack]\nports = 443\ninclude = 10.0.0.1/8\n", ":3: [hijack] include");
	bad("[hijack]\nports = 443\nexclude = 10.0.0.0/8,\n", ":3: [hijack] exclude");
	bad("[select]\nstrategy = best\n", ":2: [select] strategy = best: expected cover");
	bad("[select]\nk = 0\n", ":2: [select] k = 0:");
	bad("[select]\nk = 100001\n", ":2:");
	bad("[select]\nc_wait = 0.9\n", ":2: [select] c_wait");
	bad("[select]\nc_wait = 11\n", ":2:");
	bad("[select]\nmin_gain = nan\n", ":2: [select] min_gain");
	bad("[select]\nmin_gain = 101\n", ":2:");
	bad("[select]\nmax_chain = 0\n", ":2: [select] max_chain");
	bad("[select]\nmax_chain = 4\n", ":2: [select] max_chain");
	bad("[select]\nchain_gain = 0.9\n", ":2: [select] chain_gain");
	bad("[select]\nrepair_timeout = 99ms\n", ":2: [select] repair_timeout");
	bad("[select]\nrepair_timeout = 61s\n", ":2:");
	bad("[select]\nhold_timeout = 121s\n", ":2: [select] hold_timeout");
	bad("[select]\nestablish_timeout = 3\xc2\xb5s\n", ":2: [select] establish_timeout");
	bad("[select]\ncache_ttl = 8d\n", ":2: [select] cache_ttl");
	bad("[select]\ncache_size = 0\n", ":2: [select] cache_size");
	bad("[select]\nmax_held = 1000001\n", ":2: [select] max_held");
	bad("[select]\nseed = 18446744073709551616\n", ":2: [select] seed");
	bad("[relays]\nkeepalive_interval = 999ms\n", ":2: [relays] keepalive_interval");
	bad("[relays]\nkeepalive_timeout = 2h\n", ":2: [relays] keepalive_timeout");
	bad("[relays]\nreconnect_min = 9ms\n", ":2: [relays] reconnect_min");
	bad("[relays]\nfailure_quarantine = 61m\n", ":2: [relays] failure_quarantine");
	bad("[directory]\nurls = ftp://192.0.2.1/RPC2\n", ":2: [directory] urls = ftp://");
	bad("[directory]\nurls = http://192.0.2.1/RPC2 192.0.2.2:7602\n",
	    ":2: [directory] urls = http://192.0.2.1/RPC2 192.0.2.2:7602: '192.0.2.2:7602'");
	bad("[directory]\nurls = http://\n", ":2: [directory] urls");
	bad("[directory]\nurls = http://a/ http://b/ http://c/ http://d/ http://e/ http://f/ "
	    "http://g/ http://h/ http://i/\n", "at most 8 URLs");
	bad("[directory]\nrefresh = 0\n", ":2: [directory] refresh = 0: must be between");
	bad("[directory]\nrefresh = 8d\n", ":2: [directory] refresh");
	bad("[directory]\nretry = 0\n", ":2: [directory] retry");
	bad("[directory]\ntimeout = 0\n", ":2: [directory] timeout");
	bad("[directory]\ntimeout = 11m\n", ":2: [directory] timeout");
	bad("[directory]\nrefresh = 1h\nbogus = 1\n", ":3: unknown key 'bogus' in section [directory]");
	bad("[nat]\nmode = yes\n", ":2: [nat] mode = yes: expected auto, on or off");
	bad("this is not ini\n", ":1:");
	/* Nothing after the first error is applied or reported. */
	bad("[select]\nk = 0\nc_wait = 0\n", ":2:");
}

static void
test_checks_across_keys(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	bad("[select]\nrepair_timeout = 3s\nhold_timeout = 2999ms\n",
	    "hold_timeout must be at least repair_timeout");
	bad("[select]\nhold_timeout = 1s\n", "hold_timeout must be at least repair_timeout");
	assert_int_equal(load(&c, "[select]\nhold_timeout = 3s\n", err, sizeof(err)), 0);
	cconf_free(&c);
	bad("[relays]\nreconnect_min = 1m\n", "reconnect_max must be at least reconnect_min");
	bad("[slotd]\ncontrol_socket =\n", "must be set");
	bad("[directory]\nrefresh = 1m\nretry = 61s\n", "[directory] retry must be at most refresh");
	bad("[directory]\nrefresh = 10s\n", "[directory] retry must be at most refresh");
	assert_int_equal(load(&c, "[directory]\nrefresh = 1s\nretry = 1s\nurls =\n"
	    "cache_file =\n", err, sizeof(err)), 0);
	assert_int_equal(c.dir_urls.n, 0);
	assert_string_equal(c.dir_cache_file, "");
	cconf_free(&c);

	/* ports: required, and not empty. */
	write_conf("[slotd]\nqueue = 1\n");
	assert_int_equal(cconf_load(&c, path, err, sizeof(err)), -1);
	assert_non_null(strstr(err, path));
	assert_non_null(strstr(err, "[hijack] ports must be set"));
	unlink(path);
	bad("[hijack]\nports =\n", "[hijack] ports must be set");
	write_conf("");
	assert_int_equal(cconf_load(&c, path, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "[hijack] ports must be set"));
	unlink(path);
}

static void
test_missing_file(void **state)
{
	struct cconf c;
	char err[256];
	(void)state;

	assert_int_equal(cconf_load(&c, "/nonexistent/slotd.conf", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "/nonexistent/slotd.conf"));
	cconf_free(&c);		/* already freed: still safe */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_example_is_defaults),
		cmocka_unit_test(test_hijack_backend_and_mode),
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_parse_relay),
		cmocka_unit_test(test_relay_lines),
		cmocka_unit_test(test_too_many_relays),
		cmocka_unit_test(test_exclude_empty),
		cmocka_unit_test(test_marks),
		cmocka_unit_test(test_lib),
		cmocka_unit_test(test_nat_mode),
		cmocka_unit_test(test_errors_name_the_line),
		cmocka_unit_test(test_checks_across_keys),
		cmocka_unit_test(test_missing_file),
	};
	return cmocka_run_group_tests_name("cconf", tests, NULL, NULL);
}
