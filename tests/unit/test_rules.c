/* slotd's rule rendering (src/client/rules.c): the exact text handed to
 * iptables-restore --noflush. Applying it to a real kernel is tested in
 * tests/integration/test_rules.py. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
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
	    .relay_mask = 0xffff, .ports = &ports, .include = &inc, .exclude = &exc };

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
	    "-A SLOT_HIJACK -p tcp --syn -m multiport --dports 80,443,8000:8099 -j NFQUEUE --queue-num 7 --queue-bypass\n"
	    "COMMIT\n"
	    "*nat\n"
	    ":SLOT_DNAT - [0:0]\n"
	    "-F SLOT_DNAT\n"
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x1/0xffff -j DNAT --to-destination 198.51.100.7:7601\n"
	    "-A SLOT_DNAT -p tcp -m mark --mark 0x2/0xffff -j DNAT --to-destination 203.0.113.9:7601\n"
	    "COMMIT\n");
	assert_int_equal(n, (int)strlen(buf));
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
	};
	return cmocka_run_group_tests_name("rules", tests, NULL, teardown);
}
