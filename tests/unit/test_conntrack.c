/* The conntrack requests of conntrack.c (synack_hold's failure path deletes,
 * a reused entry's status is read): read back with libmnl as the kernel
 * would, both families. */
#include <arpa/inet.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include "../../src/client/conntrack.h"

struct seen {
	const struct nlattr *a[CTA_MAX + 1];
};

static int
keep(const struct nlattr *attr, void *data)
{
	struct seen *s = data;
	uint16_t t = mnl_attr_get_type(attr);

	if (t <= CTA_MAX)
		s->a[t] = attr;
	return MNL_CB_OK;
}

static void
check(const char *cs, uint16_t cport, const char *ss, uint16_t sport, int family, bool get)
{
	char buf[512];
	struct endpoint c, s;
	struct seen top = { 0 }, tuple = { 0 }, ip = { 0 }, proto = { 0 };
	size_t len, alen = family == AF_INET ? 4 : 16;

	assert_int_equal(addr_parse(cs, &c.addr), 0);
	assert_int_equal(addr_parse(ss, &s.addr), 0);
	c.port = cport;
	s.port = sport;
	len = conntrack_build(buf, sizeof(buf), 42, get, &c, &s);
	assert_true(len > 0);
	const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
	assert_int_equal(nlh->nlmsg_len, len);
	assert_int_equal(nlh->nlmsg_type, (NFNL_SUBSYS_CTNETLINK << 8) |
	    (get ? IPCTNL_MSG_CT_GET : IPCTNL_MSG_CT_DELETE));
	/* A get's answer is the entry or an error; an ACK would add a second. */
	assert_int_equal(nlh->nlmsg_flags, get ? NLM_F_REQUEST : NLM_F_REQUEST | NLM_F_ACK);
	assert_int_equal(nlh->nlmsg_seq, 42);
	const struct nfgenmsg *nfg = mnl_nlmsg_get_payload(nlh);
	assert_int_equal(nfg->nfgen_family, family);
	assert_true(mnl_attr_parse(nlh, sizeof(*nfg), keep, &top) >= 0);
	assert_non_null(top.a[CTA_TUPLE_ORIG]);
	assert_true(mnl_attr_parse_nested(top.a[CTA_TUPLE_ORIG], keep, &tuple) >= 0);
	assert_true(mnl_attr_parse_nested(tuple.a[CTA_TUPLE_IP], keep, &ip) >= 0);
	assert_true(mnl_attr_parse_nested(tuple.a[CTA_TUPLE_PROTO], keep, &proto) >= 0);
	int src = family == AF_INET ? CTA_IP_V4_SRC : CTA_IP_V6_SRC;
	int dst = family == AF_INET ? CTA_IP_V4_DST : CTA_IP_V6_DST;
	assert_int_equal(mnl_attr_get_payload_len(ip.a[src]), alen);
	assert_memory_equal(mnl_attr_get_payload(ip.a[src]), c.addr.bytes, alen);
	assert_memory_equal(mnl_attr_get_payload(ip.a[dst]), s.addr.bytes, alen);
	assert_int_equal(mnl_attr_get_u8(proto.a[CTA_PROTO_NUM]), 6);
	assert_int_equal(ntohs(mnl_attr_get_u16(proto.a[CTA_PROTO_SRC_PORT])), cport);
	assert_int_equal(ntohs(mnl_attr_get_u16(proto.a[CTA_PROTO_DST_PORT])), sport);
}

static void
test_request_both_families(void **state)
{
	(void)state;
	for (int get = 0; get < 2; get++) {
		check("192.0.2.10", 40001, "203.0.113.5", 80, AF_INET, get);
		check("2001:db8::10", 65535, "2001:db8:1::5", 443, AF_INET6, get);
	}
}

static void
test_refuses_mixed_families_and_small_buffers(void **state)
{
	char buf[512];
	struct endpoint c, s;
	(void)state;

	assert_int_equal(ep_parse("192.0.2.10:1", 0, &c), 0);
	assert_int_equal(ep_parse("[2001:db8::1]:2", 0, &s), 0);
	assert_int_equal(conntrack_build(buf, sizeof(buf), 1, false, &c, &s), 0);
	assert_int_equal(ep_parse("192.0.2.11:2", 0, &s), 0);
	assert_int_equal(conntrack_build(buf, 100, 1, true, &c, &s), 0);
	assert_true(conntrack_build(buf, sizeof(buf), 1, false, &c, &s) > 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_both_families),
		cmocka_unit_test(test_refuses_mixed_families_and_small_buffers),
	};

	return cmocka_run_group_tests_name("conntrack", tests, NULL, NULL);
}
