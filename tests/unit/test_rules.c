/* slotd's rule rendering (src/client/rules.c): the exact text handed to
 * iptables-restore --noflush and to nft -f, and the backend choice. Applying it to a real kernel is tested in
 * tests/integration/test_rules.py; the removal's handling of a tool killed
 * by a signal here, against a stand-in iptables. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../src/client/rules.h"

static struct portset ports;
static struct cidr_list inc, exc;
static char buf[65536];

static struct rules_conf
conf(int family, const char *portspec, const char *incspec, const char *excspec)
{
	char err[128];
	struct rules_conf c = { .family = family, .queue = 7, .bypass_mark = 0x1000000,
	    .relay_mask = 0xffff, .ports = &ports, .include = &inc, .exclude = &exc,
	    .reused_direct = true };

	cidr_list_free(&inc);
	cidr_list_free(&exc);
	assert_int_equal(portset_parse(portspec, &ports, err, sizeof(err)), 0);
	assert_int_equal(cidr_list_parse(incspec, &inc, err, sizeof(err)), 0);
	assert_int_equal(cidr_list_parse(excspec, &exc, err, sizeof(err)), 0);
	return c;
}

static struct rules_relay
relay(uint32_t mark, const char *ep)
{
	struct rules_relay r = { .mark = mark };

	assert_int_equal(ep_parse(ep, 0, &r.data), 0);
	return r;
}

static void
test_ipv4_full(void **state)
{
	struct rules_conf c = conf(AF_INET, "80,443,8000-8099", "", "10.0.0.0/8, 2001:db8::/32");
	struct rules_relay r[] = { relay(1, "198.51.100.7:7601"), relay(2, "203.0.113.9:7601"),
	    relay(3, "[2001:db8::1]:7601") };
	(void)state;

	int n = rules_render(&c, r, 3, buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf,
	    "*mangle\n"
	    ":SLOT_HIJACK - [0:0]\n"
	    "-F SLOT_HIJACK\n"
	    "-A SLOT_HIJACK -m mark --mark 0x1000000/0x1000000 -j RETURN\n"
	    "-A SLOT_HIJACK -d 10.0.0.0/8 -j RETURN\n"
	    "-A SLOT_HIJACK -p tcp --syn -m conntrack --ctstate ESTABLISHED,DNAT -j MARK --or-mark 0x1000000\n"
	    "-A SLOT_HIJACK -p tcp --syn -m multiport --dports 80,443,8000:8099 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    ":SLOT_RUN - [0:0]\n"
	    "-F SLOT_RUN\n"
	    ":SLOT_SYNACK - [0:0]\n"
	    "-F SLOT_SYNACK\n"
	    "COMMIT\n"
	    "*nat\n"
	    ":SLOT_DNAT - [0:0]\n"
	    "-F SLOT_DNAT\n"
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x1/0xffff -j DNAT --to-destination 198.51.100.7:7601\n"
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x2/0xffff -j DNAT --to-destination 203.0.113.9:7601\n"
	    "COMMIT\n");
	assert_int_equal(n, (int)strlen(buf));
	/* A slotd without a conntrack socket cannot undo a reused direct
	 * entry: only DNAT ones are marked. */
	c.reused_direct = false;
	assert_true(rules_render(&c, r, 3, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf,
	    "-A SLOT_HIJACK -p tcp --syn -m conntrack --ctstate DNAT -j MARK --or-mark 0x1000000\n"));
	assert_null(strstr(buf, "ESTABLISHED"));
	c.reused_direct = true;
	/* synack_hold: the SYN-ACKs from each relay's data port of the family
	 * are queued too. */
	c.synack = true;
	assert_true(rules_render(&c, r, 3, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf,
	    ":SLOT_RUN - [0:0]\n"
	    "-F SLOT_RUN\n"
	    ":SLOT_SYNACK - [0:0]\n"
	    "-F SLOT_SYNACK\n"
	    "-A SLOT_SYNACK -s 198.51.100.7 -p tcp --sport 7601 --tcp-flags SYN,ACK,RST,FIN SYN,ACK -m conntrack --ctstate DNAT -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "-A SLOT_SYNACK -s 203.0.113.9 -p tcp --sport 7601 --tcp-flags SYN,ACK,RST,FIN SYN,ACK -m conntrack --ctstate DNAT -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "COMMIT\n*nat\n"));
	assert_null(strstr(buf, "2001:db8::1"));
}

static void
test_ipv6_and_includes(void **state)
{
	struct rules_conf c = conf(AF_INET6, "all", "2001:db8:1::/48 192.0.2.0/24 2001:db8:2::/48", "");
	struct rules_relay r[] = { relay(0x10, "[2001:db8::1]:7601"), relay(0x11, "198.51.100.7:7601") };
	(void)state;

	assert_true(rules_render(&c, r, 2, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf,
	    "-A SLOT_HIJACK -p tcp --syn -d 2001:db8:1::/48 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "-A SLOT_HIJACK -p tcp --syn -d 2001:db8:2::/48 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    ":SLOT_RUN - [0:0]\n"
	    "-F SLOT_RUN\n"
	    ":SLOT_SYNACK - [0:0]\n"
	    "-F SLOT_SYNACK\n"
	    "COMMIT\n"));
	assert_null(strstr(buf, "192.0.2.0"));	/* the other family */
	assert_non_null(strstr(buf,
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x10/0xffff -j DNAT --to-destination [2001:db8::1]:7601\n"));
	assert_null(strstr(buf, "198.51.100.7"));
}

static void
test_many_ports_split_into_multiport_lists(void **state)
{
	/* 20 single ports: 15 in the first rule, 5 in the second. */
	struct rules_conf c = conf(AF_INET,
	    "1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31,33,35,37,39", "", "");
	(void)state;

	assert_true(rules_render(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "--dports 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29 -j"));
	assert_non_null(strstr(buf, "--dports 31,33,35,37,39 -j"));
	/* Ranges count twice: 8 ranges need two lists (7 + 1). */
	c = conf(AF_INET, "10-11,20-21,30-31,40-41,50-51,60-61,70-71,80-81", "", "");
	assert_true(rules_render(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "--dports 10:11,20:21,30:31,40:41,50:51,60:61,70:71 -j"));
	assert_non_null(strstr(buf, "--dports 80:81 -j"));
}

static void
test_bad_input(void **state)
{
	struct rules_conf c = conf(AF_INET, "80", "", "");
	struct rules_relay bad_mark[] = { relay(0x10000, "198.51.100.7:7601") };
	struct rules_relay zero_mark[] = { relay(0, "198.51.100.7:7601") };
	(void)state;

	errno = 0;
	assert_int_equal(rules_render(&c, bad_mark, 1, buf, sizeof(buf)), -1);
	assert_int_equal(errno, EINVAL);
	assert_int_equal(rules_render(&c, zero_mark, 1, buf, sizeof(buf)), -1);
	c.bypass_mark = 0x1;	/* overlaps the relay mask */
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	c = conf(AF_INET, "", "", "");	/* no port at all */
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	assert_int_equal(errno, EINVAL);
	c = conf(AF_INET, "80", "", "");
	c.family = AF_UNIX;
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	c.family = AF_INET;
	errno = 0;
	assert_int_equal(rules_render(&c, NULL, 0, buf, 40), -1);
	assert_int_equal(errno, ENOSPC);
}

/* What "slotctl rules" shows: our chains' rules and the jumps to them, with
 * their counters, out of iptables-save -c; nothing else of the table. */
static void
test_parse_saved(void **state)
{
	static const char mangle[] =
	    "# Generated by iptables-save v1.8.9 (nf_tables) on Mon Jan  1 00:00:00 2024\n"
	    "*mangle\n"
	    ":PREROUTING ACCEPT [10:1000]\n"
	    ":OUTPUT ACCEPT [20:2000]\n"
	    ":SLOT_HIJACK - [0:0]\n"
	    "[5:300] -A OUTPUT -p tcp -m owner --uid-owner 1000 -j MARK --set-xmark 0x1/0x1\n"
	    "[7:420] -A OUTPUT -j SLOT_HIJACK\n"
	    "[0:0] -A OUTPUT -j SLOT_HIJACKER\n"
	    "[1:60] -A SLOT_HIJACK -m mark --mark 0x10000000/0x10000000 -j RETURN\n"
	    "[3:180] -A SLOT_HIJACK -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN "
	    "-m multiport --dports 80,443 -j NFQUEUE --queue-num 7600 --queue-bypass\n"
	    "COMMIT\n";
	static const char nat[] =
	    "*nat\n"
	    ":SLOT_DNAT - [0:0]\n"
	    "[2:120] -A OUTPUT -j SLOT_DNAT\n"
	    "[2:120] -A SLOT_DNAT -p tcp -m mark --mark 0x10000/0xfff0000 "
	    "-j DNAT --to-destination 10.1.0.2:7601\n"
	    "[0:0] -A POSTROUTING -j SLOT_DNAT_NOT_OURS\n"
	    "COMMIT";		/* no final newline */
	struct rules_entry *v = NULL;
	size_t n = 0;
	(void)state;

	assert_int_equal(rules_parse_saved("mangle", mangle, &v, &n), 0);
	assert_int_equal(rules_parse_saved("nat", nat, &v, &n), 0);
	assert_int_equal(n, 5);
	assert_string_equal(v[0].table, "mangle");
	assert_int_equal(v[0].family, AF_INET);
	assert_string_equal(v[0].chain, "OUTPUT");
	assert_int_equal(v[0].packets, 7);
	assert_int_equal(v[0].bytes, 420);
	assert_string_equal(v[0].rule, "-A OUTPUT -j SLOT_HIJACK");
	assert_string_equal(v[1].chain, "SLOT_HIJACK");
	assert_string_equal(v[1].rule,
	    "-A SLOT_HIJACK -m mark --mark 0x10000000/0x10000000 -j RETURN");
	assert_int_equal(v[2].packets, 3);
	assert_non_null(strstr(v[2].rule, "--queue-num 7600 --queue-bypass"));
	assert_string_equal(v[3].table, "nat");
	assert_string_equal(v[3].rule, "-A OUTPUT -j SLOT_DNAT");
	assert_string_equal(v[4].chain, "SLOT_DNAT");
	assert_string_equal(v[4].rule, "-A SLOT_DNAT -p tcp -m mark --mark 0x10000/0xfff0000 "
	    "-j DNAT --to-destination 10.1.0.2:7601");
	assert_int_equal(v[4].bytes, 120);
	rules_list_free(v, n);

	/* No rules of ours: nothing, and no allocation. */
	v = NULL;
	n = 0;
	assert_int_equal(rules_parse_saved("nat", "*nat\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n", &v,
	    &n), 0);
	assert_int_equal(n, 0);
	assert_null(v);
}

static const char lan[][RULES_IFNAME_MAX] = { "lan0", "wlan.7" };

/* Gateway mode adds SLOT_GW: the SYNs that come in on a LAN interface go
 * to SLOT_HIJACK (the PREROUTING jumps are added by rules_apply). */
static void
test_iptables_gateway(void **state)
{
	struct rules_conf c = conf(AF_INET6, "443", "", "fc00::/7");
	struct rules_relay r[] = { relay(1, "[2001:db8::1]:7601") };
	(void)state;

	c.mode = RULES_GATEWAY;
	c.lan = lan;
	c.nlan = 2;
	c.synack = true;
	assert_true(rules_render(&c, r, 1, buf, sizeof(buf)) > 0);
	assert_string_equal(buf,
	    "*mangle\n"
	    ":SLOT_HIJACK - [0:0]\n"
	    "-F SLOT_HIJACK\n"
	    "-A SLOT_HIJACK -m mark --mark 0x1000000/0x1000000 -j RETURN\n"
	    "-A SLOT_HIJACK -d fc00::/7 -j RETURN\n"
	    "-A SLOT_HIJACK -p tcp --syn -m conntrack --ctstate ESTABLISHED,DNAT -j MARK --or-mark 0x1000000\n"
	    "-A SLOT_HIJACK -p tcp --syn -m multiport --dports 443 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    ":SLOT_GW - [0:0]\n"
	    "-F SLOT_GW\n"
	    "-A SLOT_GW -i lan0 -j SLOT_HIJACK\n"
	    "-A SLOT_GW -i wlan.7 -j SLOT_HIJACK\n"
	    ":SLOT_RUN - [0:0]\n"
	    "-F SLOT_RUN\n"
	    ":SLOT_SYNACK - [0:0]\n"
	    "-F SLOT_SYNACK\n"
	    "-A SLOT_SYNACK -s 2001:db8::1 -p tcp --sport 7601 --tcp-flags SYN,ACK,RST,FIN SYN,ACK -m conntrack --ctstate DNAT -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "COMMIT\n"
	    "*nat\n"
	    ":SLOT_DNAT - [0:0]\n"
	    "-F SLOT_DNAT\n"
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x1/0xffff -j DNAT --to-destination [2001:db8::1]:7601\n"
	    "COMMIT\n");
}

/* One table for both families: include, exclude, ports as a set, relays
 * of either family, the local and the gateway hooks. */
static void
test_nft_full(void **state)
{
	struct rules_conf c = conf(AF_UNSPEC, "80,443,8000-8099", "203.0.113.0/24, 2001:db8:1::/48",
	    "10.0.0.0/8, 2001:db8::/32, 192.168.0.0/16");
	struct rules_relay r[] = { relay(1, "198.51.100.7:7601"), relay(3, "[2001:db8::1]:7601") };
	(void)state;

	c.mode = RULES_LOCAL | RULES_GATEWAY;
	c.lan = lan;
	c.nlan = 2;
	c.synack = true;
	int n = rules_render_nft(&c, r, 2, buf, sizeof(buf));
	assert_true(n > 0);
	assert_string_equal(buf,
	    "table inet slot {}\n"
	    "delete table inet slot\n"
	    "table inet slot {\n"
	    "\tchain hijack {\n"
	    "\t\tmeta mark & 0x1000000 == 0x1000000 counter return\n"
	    "\t\tip daddr { 10.0.0.0/8, 192.168.0.0/16 } counter return\n"
	    "\t\tip6 daddr { 2001:db8::/32 } counter return\n"
	    "\t\ttcp flags & (fin | syn | rst | ack) == syn ct status dnat meta mark set meta mark | 0x1000000\n"
	    "\t\ttcp flags & (fin | syn | rst | ack) == syn ct state established meta mark set meta mark | 0x1000000\n"
	    "\t\tip daddr { 203.0.113.0/24 } tcp flags & (fin | syn | rst | ack) == syn tcp dport { 80, 443, 8000-8099 } counter queue num 7 bypass\n"
	    "\t\tip6 daddr { 2001:db8:1::/48 } tcp flags & (fin | syn | rst | ack) == syn tcp dport { 80, 443, 8000-8099 } counter queue num 7 bypass\n"
	    "\t}\n"
	    "\tchain to_relay {\n"
	    "\t\tmeta nfproto ipv4 meta l4proto tcp meta mark & 0xffff == 0x1 counter dnat ip to 198.51.100.7:7601\n"
	    "\t\tmeta nfproto ipv6 meta l4proto tcp meta mark & 0xffff == 0x3 counter dnat ip6 to [2001:db8::1]:7601\n"
	    "\t}\n"
	    "\tchain synack {\n"
	    "\t\tip saddr 198.51.100.7 tcp sport 7601 tcp flags & (fin | syn | rst | ack) == syn | ack ct status dnat counter queue num 7 bypass\n"
	    "\t\tip6 saddr 2001:db8::1 tcp sport 7601 tcp flags & (fin | syn | rst | ack) == syn | ack ct status dnat counter queue num 7 bypass\n"
	    "\t}\n"
	    "\tchain in_synack {\n"
	    "\t\ttype filter hook input priority mangle; policy accept;\n"
	    "\t\tjump synack\n"
	    "\t}\n"
	    "\tchain fwd_synack {\n"
	    "\t\ttype filter hook forward priority mangle; policy accept;\n"
	    "\t\tjump synack\n"
	    "\t}\n"
	    "\tchain out_queue {\n"
	    "\t\ttype filter hook output priority mangle; policy accept;\n"
	    "\t\tjump hijack\n"
	    "\t}\n"
	    "\tchain out_nat {\n"
	    "\t\ttype nat hook output priority -100; policy accept;\n"
	    "\t\tjump to_relay\n"
	    "\t}\n"
	    "\tchain pre_queue {\n"
	    "\t\ttype filter hook prerouting priority mangle; policy accept;\n"
	    "\t\tiifname { \"lan0\", \"wlan.7\" } jump hijack\n"
	    "\t}\n"
	    "\tchain pre_nat {\n"
	    "\t\ttype nat hook prerouting priority dstnat; policy accept;\n"
	    "\t\tiifname { \"lan0\", \"wlan.7\" } jump to_relay\n"
	    "\t}\n"
	    "}\n");
	assert_int_equal(n, (int)strlen(buf));
	c.reused_direct = false;
	assert_true(rules_render_nft(&c, r, 2, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "== syn ct status dnat meta mark set"));
	assert_null(strstr(buf, "ct state established"));
}

/* Every port, every destination, local only (mode 0): one queue rule for
 * both families, no dport match, no prerouting chains. */
static void
test_nft_all_ports_local(void **state)
{
	struct rules_conf c = conf(AF_INET, "all", "", "");
	(void)state;

	assert_true(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "\t\ttcp flags & (fin | syn | rst | ack) == syn counter "
	    "queue num 7 bypass\n"));
	assert_null(strstr(buf, "dport"));
	assert_null(strstr(buf, "daddr"));
	assert_non_null(strstr(buf, "chain out_queue"));
	assert_null(strstr(buf, "prerouting"));
	/* Only IPv6 destinations included: no IPv4 SYN is queued. */
	c = conf(AF_INET, "80", "2001:db8::/32", "");
	assert_true(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_null(strstr(buf, "ip daddr"));
	assert_non_null(strstr(buf, "ip6 daddr { 2001:db8::/32 } tcp flags"));
	assert_non_null(strstr(buf, "chain in_synack"));
	assert_null(strstr(buf, "chain fwd_synack"));
	assert_null(strstr(buf, "saddr"));	/* synack off: the chain is empty */
	/* Gateway alone: no output chains. */
	c.mode = RULES_GATEWAY;
	c.lan = lan;
	c.nlan = 1;
	assert_true(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_null(strstr(buf, "chain out_"));
	assert_null(strstr(buf, "chain in_synack"));
	assert_non_null(strstr(buf, "chain fwd_synack"));
	assert_non_null(strstr(buf, "iifname { \"lan0\" } jump hijack"));
}

static void
test_nft_bad_input(void **state)
{
	struct rules_conf c = conf(AF_UNSPEC, "80", "", "");
	struct rules_relay bad_mark[] = { relay(0x10000, "[2001:db8::1]:7601") };
	static const char bad_if[][RULES_IFNAME_MAX] = { "eth0\"; flush" };
	(void)state;

	errno = 0;
	assert_int_equal(rules_render_nft(&c, bad_mark, 1, buf, sizeof(buf)), -1);
	assert_int_equal(errno, EINVAL);
	c.family = AF_INET;	/* an IPv6 relay's bad mark counts all the same */
	assert_int_equal(rules_render_nft(&c, bad_mark, 1, buf, sizeof(buf)), -1);
	c.family = AF_UNSPEC;
	c.mode = RULES_GATEWAY;		/* without LAN interfaces */
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)), -1);
	c.lan = bad_if;			/* a name that would break out of the quotes */
	c.nlan = 1;
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)), -1);
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	c = conf(AF_UNSPEC, "80", "", "");
	c.mode = 4;
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)), -1);
	c = conf(AF_UNSPEC, "", "", "");	/* no port */
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)), -1);
	assert_int_equal(errno, EINVAL);
	c = conf(AF_UNSPEC, "80", "", "");
	errno = 0;
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, 40), -1);
	assert_int_equal(errno, ENOSPC);
	assert_true(rules_ifname_ok("eth0"));
	assert_true(rules_ifname_ok("br-lan.10"));
	assert_false(rules_ifname_ok(""));
	assert_false(rules_ifname_ok("sixteen-chars-xx"));
	assert_false(rules_ifname_ok("a b"));
	assert_false(rules_ifname_ok("a\"b"));
}

/* What each backend runs: iptables, one text per family in order; nft, one
 * text for both. */
static void
test_set_render(void **state)
{
	struct rules_conf c = conf(AF_UNSPEC, "80", "", "");
	struct rules_relay r[] = { relay(1, "198.51.100.7:7601"), relay(2, "[2001:db8::1]:7601") };
	struct rules_set s;
	struct rules_argv a;
	struct rules_exec x = { .iptables = "/sbin/iptables-nft", .wait_s = 5 };
	(void)state;

	assert_int_equal(rules_set_render(&c, r, 2, RULES_IPTABLES, &s), 0);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.job[0].family, AF_INET);
	assert_int_equal(s.job[1].family, AF_INET6);
	assert_non_null(strstr(s.job[0].text, "198.51.100.7:7601"));
	assert_null(strstr(s.job[0].text, "2001:db8::1"));
	assert_non_null(strstr(s.job[1].text, "[2001:db8::1]:7601"));
	assert_int_equal(s.job[1].len, strlen(s.job[1].text));
	assert_int_equal(rules_restore_argv(&x, s.job[1].family, &a), 0);
	assert_string_equal(a.argv[0], "/sbin/ip6tables-nft-restore");
	assert_string_equal(a.argv[3], "--noflush");
	rules_set_free(&s);
	assert_int_equal(s.n, 0);

	assert_int_equal(rules_set_render(&c, r, 2, RULES_NFT, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.job[0].family, AF_UNSPEC);
	assert_non_null(strstr(s.job[0].text, "dnat ip to 198.51.100.7:7601"));
	assert_non_null(strstr(s.job[0].text, "dnat ip6 to [2001:db8::1]:7601"));
	x.backend = RULES_NFT;
	assert_int_equal(rules_restore_argv(&x, AF_UNSPEC, &a), 0);
	assert_string_equal(a.argv[0], "nft");
	assert_string_equal(a.argv[1], "-f");
	assert_string_equal(a.argv[2], "-");
	assert_null(a.argv[3]);
	x.nft = "/usr/sbin/nft";
	assert_int_equal(rules_restore_argv(&x, AF_UNSPEC, &a), 0);
	assert_string_equal(a.argv[0], "/usr/sbin/nft");
	rules_set_free(&s);

	/* One family only, for the iptables backend. */
	c.family = AF_INET6;
	assert_int_equal(rules_set_render(&c, r, 2, RULES_IPTABLES, &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.job[0].family, AF_INET6);
	rules_set_free(&s);
	/* Bad input: nothing is left allocated. */
	c.bypass_mark = 0x1;
	assert_int_equal(rules_set_render(&c, r, 2, RULES_NFT, &s), -1);
	assert_int_equal(s.n, 0);
}

/* [hijack] backend = auto. */
/* Sockets offered by their program (libslot) and slotctl run's cgroup: any
 * port, after the exclusions; the cgroup only in SLOT_RUN (xt_cgroup is not
 * allowed in PREROUTING, which reaches SLOT_HIJACK on a gateway). */
static void
test_lib_and_run(void **state)
{
	struct rules_conf c = conf(AF_INET, "80", "192.0.2.0/24", "10.0.0.0/8");
	(void)state;

	c.lib_mark = 0x20000000;
	c.run_cgroup = "slot.run";
	assert_true(rules_render(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf,
	    "-A SLOT_HIJACK -d 10.0.0.0/8 -j RETURN\n"
	    "-A SLOT_HIJACK -p tcp --syn -m conntrack --ctstate ESTABLISHED,DNAT -j MARK --or-mark 0x1000000\n"
	    "-A SLOT_HIJACK -p tcp --syn -m mark --mark 0x20000000/0x20000000 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "-A SLOT_HIJACK -p tcp --syn -d 192.0.2.0/24 -m multiport --dports 80 -j NFQUEUE"));
	assert_non_null(strstr(buf, ":SLOT_RUN - [0:0]\n-F SLOT_RUN\n"
	    "-A SLOT_RUN -p tcp --syn -m cgroup --path slot.run -j MARK --or-mark 0x20000000\n"));
	assert_true(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "ip daddr { 10.0.0.0/8 } counter return\n"
	    "\t\ttcp flags & (fin | syn | rst | ack) == syn ct status dnat meta mark set meta mark | 0x1000000\n"
	    "\t\ttcp flags & (fin | syn | rst | ack) == syn ct state established meta mark set meta mark | 0x1000000\n"
	    "\t\tmeta mark & 0x20000000 == 0x20000000 tcp flags & (fin | syn | rst | ack) == syn "
	    "counter queue num 7 bypass\n"
	    "\t\tsocket cgroupv2 level 1 \"slot.run\" tcp flags & (fin | syn | rst | ack) == syn "
	    "counter queue num 7 bypass\n"));
	c.run_cgroup = "a/b-c/d_e.f";
	assert_true(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_non_null(strstr(buf, "socket cgroupv2 level 3 \"a/b-c/d_e.f\""));

	/* Nothing to render without them. */
	c.lib_mark = 0;
	c.run_cgroup = NULL;
	assert_true(rules_render(&c, NULL, 0, buf, sizeof(buf)) > 0);
	assert_null(strstr(buf, "0x20000000"));
	assert_non_null(strstr(buf, ":SLOT_RUN - [0:0]\n-F SLOT_RUN\n:SLOT_SYNACK"));

	/* Refused: a cgroup without the mark, a mark of two bits or one that
	 * names relays, paths that would escape or break the rule. */
	c.run_cgroup = "slot.run";
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	c.lib_mark = 0x30000000;
	assert_int_equal(rules_render(&c, NULL, 0, buf, sizeof(buf)), -1);
	c.lib_mark = 0x1;
	assert_int_equal(rules_render_nft(&c, NULL, 0, buf, sizeof(buf)), -1);
	static const char *const bad[] = { "", "/slot", "slot/", "a//b", "..", "a/../b",
	    "a/.", "slot run", "slot\"", "a;b" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(rules_cgroup_ok(bad[i]));
	assert_true(rules_cgroup_ok("slot.run"));
	assert_true(rules_cgroup_ok("system.slice/slot-run"));
	assert_true(rules_cgroup_ok("..a/b.."));
}

static void
test_backend_auto(void **state)
{
	static const struct {
		struct rules_host h;
		enum rules_backend want;
		const char *why;
	} cases[] = {
		{ { true, true, 0 }, RULES_NFT, "nf_tables variant" },
		{ { true, true, -1 }, RULES_NFT, "iptables is absent" },
		{ { true, true, 1 }, RULES_IPTABLES, "legacy" },
		{ { true, false, 0 }, RULES_IPTABLES, "CONFIG_NFT_QUEUE" },
		{ { false, false, 0 }, RULES_IPTABLES, "nft is missing" },
		{ { false, false, -1 }, RULES_IPTABLES, "and so is iptables" },
	};
	char why[160];
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		why[0] = '\0';
		assert_int_equal(rules_backend_auto(&cases[i].h, why, sizeof(why)), cases[i].want);
		if (strstr(why, cases[i].why) == NULL)
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why, cases[i].why);
	}
}

/* "slotctl rules" under nft: the table's rules with their counters. */
static void
test_parse_nft(void **state)
{
	static const char text[] =
	    "table inet slot {\n"
	    "\tchain hijack {\n"
	    "\t\tmeta mark & 0x10000000 == 0x10000000 counter packets 4 bytes 240 return\n"
	    "\t\ttcp flags syn / fin,syn,rst,ack tcp dport { 80, 443 } counter packets 3 bytes 180 queue flags bypass to 7600\n"
	    "\t}\n"
	    "\n"
	    "\tchain out_queue {\n"
	    "\t\ttype filter hook output priority mangle; policy accept;\n"
	    "\t\tjump hijack\n"
	    "\t}\n"
	    "}";
	struct rules_entry *v = NULL;
	size_t n = 0;
	(void)state;

	assert_int_equal(rules_parse_nft(text, &v, &n), 0);
	assert_int_equal(n, 3);
	assert_int_equal(v[0].family, AF_UNSPEC);
	assert_string_equal(v[0].table, "slot");
	assert_string_equal(v[0].chain, "hijack");
	assert_int_equal(v[0].packets, 4);
	assert_int_equal(v[0].bytes, 240);
	assert_string_equal(v[0].rule, "meta mark & 0x10000000 == 0x10000000 return");
	assert_int_equal(v[1].packets, 3);
	assert_string_equal(v[1].rule, "tcp flags syn / fin,syn,rst,ack tcp dport { 80, 443 } "
	    "queue flags bypass to 7600");
	assert_string_equal(v[2].chain, "out_queue");
	assert_string_equal(v[2].rule, "jump hijack");
	assert_int_equal(v[2].packets, 0);
	rules_list_free(v, n);
}

/* A stand-in iptables in a new directory: logs its arguments to DIR/log;
 * SIGTERMs itself while DIR/term<op> (term-C, term-F...) holds a number
 * above 0, counting it down (a service manager's stop catching it); -C
 * finds mangle OUTPUT's jump to SLOT_HIJACK while DIR/jump exists, -D
 * removes it; -F finds no chain. */
static void
fake_iptables(char *dir, size_t dirlen, char *tool, size_t toollen)
{
	char path[192];
	FILE *f;

	snprintf(dir, dirlen, "/tmp/slot-test-rules-XXXXXX");
	assert_non_null(mkdtemp(dir));
	snprintf(tool, toollen, "%s/iptables", dir);
	assert_non_null(f = fopen(tool, "w"));
	/* $1 -w, $2 secs, $3 -t, $4 table, $5 op, $6 chain, $7 -j, $8 target */
	fprintf(f, "#!/bin/sh\n"
	    "d=%s\n"
	    "echo \"$*\" >> $d/log\n"
	    "n=$(cat $d/term$5 2>/dev/null || echo 0)\n"
	    "if [ \"$n\" -gt 0 ]; then echo $((n - 1)) > $d/term$5; kill -TERM $$; fi\n"
	    "case $5 in\n"
	    "-C) [ \"$4 $6 $8\" = 'mangle OUTPUT SLOT_HIJACK' ] && [ -e $d/jump ] && exit 0\n"
	    "    echo 'iptables: Bad rule' >&2; exit 1;;\n"
	    "-D) rm $d/jump; exit 0;;\n"
	    "-F) echo 'iptables: No chain/target/match by that name.' >&2; exit 1;;\n"
	    "esac\n"
	    "exit 0\n", dir);
	fclose(f);
	assert_int_equal(chmod(tool, 0755), 0);
	snprintf(path, sizeof(path), "%s/jump", dir);
	assert_non_null(f = fopen(path, "w"));
	fclose(f);
}

static void
put_count(const char *dir, const char *name, int n)
{
	char path[192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "%d\n", n);
	fclose(f);
}

static void
rm_dir(const char *dir)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

/* The first -C dies by SIGTERM (systemd's control-group kill reaching the
 * tool slotd forked on its own SIGTERM): it is asked again, and the jump
 * goes. Read as "no jump" it stayed, and its chain could not be deleted. */
static void
test_remove_retries_signalled_check(void **state)
{
	char dir[64], tool[96], path[192], err[256] = "";
	struct rules_exec x = { tool, 1, RULES_IPTABLES, NULL };
	(void)state;

	fake_iptables(dir, sizeof(dir), tool, sizeof(tool));
	put_count(dir, "term-C", 1);
	assert_int_equal(rules_remove(AF_INET, &x, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/jump", dir);
	assert_int_equal(access(path, F_OK), -1);
	rm_dir(dir);
}

/* A -F signalled twice has no answer: a failure, not "no such chain". */
static void
test_remove_reports_signalled_flush(void **state)
{
	char dir[64], tool[96], err[256] = "";
	struct rules_exec x = { tool, 1, RULES_IPTABLES, NULL };
	(void)state;

	fake_iptables(dir, sizeof(dir), tool, sizeof(tool));
	put_count(dir, "term-F", 2);
	assert_int_equal(rules_remove(AF_INET, &x, err, sizeof(err)), -1);
	if (strstr(err, "killed by signal 15") == NULL)
		fail_msg("\"%s\" lacks the signal", err);
	rm_dir(dir);
}

static int
teardown(void **state)
{
	(void)state;
	cidr_list_free(&inc);
	cidr_list_free(&exc);
	return 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4_full),
		cmocka_unit_test(test_ipv6_and_includes),
		cmocka_unit_test(test_many_ports_split_into_multiport_lists),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_parse_saved),
		cmocka_unit_test(test_iptables_gateway),
		cmocka_unit_test(test_nft_full),
		cmocka_unit_test(test_nft_all_ports_local),
		cmocka_unit_test(test_nft_bad_input),
		cmocka_unit_test(test_set_render),
		cmocka_unit_test(test_lib_and_run),
		cmocka_unit_test(test_backend_auto),
		cmocka_unit_test(test_parse_nft),
		cmocka_unit_test(test_remove_retries_signalled_check),
		cmocka_unit_test(test_remove_reports_signalled_flush),
	};
	return cmocka_run_group_tests_name("rules", tests, NULL, teardown);
}
