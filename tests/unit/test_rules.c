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
	struct rules_conf c = { family, 7, 0x1000000, 0xffff, &ports, &inc, &exc };

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
	};
	return cmocka_run_group_tests_name("rules", tests, NULL, teardown);
}
