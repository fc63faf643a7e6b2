/* The NFQUEUE queue that slotd's synq.c and the test bed's slot-wanem share
 * (src/core/nlq.c), against the kernel: a queue nobody uses is bound, a
 * verdict about a packet the kernel never queued is refused and counted,
 * a second socket cannot take the queue, verdicts are batched, and asking
 * for conntrack binds with it or, where the kernel refuses, without it.
 * Skipped where the queue cannot be bound (no CAP_NET_ADMIN). The packet
 * parser (nlq_parse), on messages built here: the conntrack entry the
 * kernel attaches (NFQA_CT), and nests that are not to be trusted. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "slot/nlq.h"

static unsigned packets;

static void
on_packet(void *user, const struct nlq_pkt *p)
{
	(void)user;
	(void)p;
	packets++;
}

static struct nlq_params
params(size_t vbuf)
{
	return (struct nlq_params){
		/* A queue number no rule of a test uses. */
		.num = (uint16_t)(64000 + getpid() % 1000),
		.maxlen = 16,
		.copy_range = 64,
		.flags = NFQA_CFG_F_FAIL_OPEN,
		.mask = NFQA_CFG_F_FAIL_OPEN,
		.rcvbuf = 256 * 1024,
		.vbuf = vbuf,
	};
}

/* The queue bound, or NULL after skip() where this cannot be. */
static struct nlq *
bound(const struct nlq_params *p)
{
	char err[256];
	struct nlq *q = nlq_open(p, on_packet, NULL, err, sizeof(err));

	if (q == NULL)
		return NULL;
	if (nlq_bind(q, err, sizeof(err)) == -1) {
		assert_int_equal(strncmp(err, "binding NFQUEUE ", 16), 0);
		nlq_close(q);
		return NULL;
	}
	assert_true(nlq_fd(q) >= 0);
	return q;
}

static void
test_refused_verdict(void **state)
{
	struct nlq_params p = params(4096);
	struct nlq_stats st;
	struct nlq *q;
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	assert_int_equal(nlq_read(q, 8), 0);
	assert_int_equal(nlq_verdict(q, 0x7fffff00u, NF_ACCEPT), 0);
	assert_int_equal(nlq_pending(q), 1);
	assert_int_equal(nlq_flush(q), 0);
	assert_int_equal(nlq_pending(q), 0);
	/* The kernel answers a verdict it cannot apply at once. */
	assert_int_equal(nlq_read(q, 8), 0);
	nlq_stats(q, &st);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.first_refusal, ENOENT);
	assert_int_equal(st.packets + st.send_errors + st.lost, 0);
	assert_int_equal(packets, 0);
	nlq_close(q);
}

static void
test_taken(void **state)
{
	struct nlq_params p = params(4096);
	struct nlq *q, *q2;
	char err[256];
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	q2 = nlq_open(&p, on_packet, NULL, err, sizeof(err));
	assert_non_null(q2);
	assert_int_equal(nlq_bind(q2, err, sizeof(err)), -1);
	assert_true(errno == EBUSY || errno == EPERM);
	assert_non_null(strstr(err, "(another process has it?)"));
	nlq_close(q2);
	nlq_close(q);
}

static void
test_batches(void **state)
{
	struct nlq_params p = params(256);
	uint8_t pkt[512] = { 0 };
	struct nlq_stats st;
	struct nlq *q;
	size_t most = 0;
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	/* A batch of 256 bytes holds a few verdicts: the next sends them. */
	for (uint32_t id = 1; id <= 20; id++) {
		assert_int_equal(nlq_verdict_mark(q, 0x7fff0000u + id, NF_ACCEPT, 1, NULL, 0), 0);
		if (nlq_pending(q) > most)
			most = nlq_pending(q);
	}
	assert_true(most > 1 && most < 20);
	assert_int_equal(nlq_flush(q), 0);
	/* A packet that cannot fit is refused before anything is gathered. */
	assert_int_equal(nlq_verdict_mark(q, 1, NF_ACCEPT, 1, pkt, sizeof(pkt)), -1);
	assert_int_equal(errno, EMSGSIZE);
	assert_int_equal(nlq_pending(q), 0);
	while (nlq_read(q, 64) == 1)
		;
	nlq_stats(q, &st);
	assert_int_equal(st.refused, 20);
	nlq_close(q);
}

/* Whether the kernel's config (/proc/config.gz, where there is one) has
 * the conntrack glue of queues: 1 yes, 0 no, -1 unknown. */
static int
glue_ct_configured(void)
{
	FILE *f = popen("zcat /proc/config.gz 2>/dev/null", "r");
	char line[256];
	int r = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (r == -1)
			r = 0;	/* readable: unset unless named */
		if (strncmp(line, "CONFIG_NETFILTER_NETLINK_GLUE_CT=", 33) == 0)
			r = 1;
	}
	pclose(f);
	return r;
}

static void
test_ct_flag(void **state)
{
	struct nlq_params p = params(4096);
	struct nlq *q, *q2;
	char err[256];
	int glue = glue_ct_configured();
	(void)state;

	p.flags |= NFQA_CFG_F_CONNTRACK;
	p.mask |= NFQA_CFG_F_CONNTRACK;
	if ((q = bound(&p)) == NULL)
		skip();
	/* Granted, or refused and bound without it: bound either way. */
	assert_true(nlq_ct(q) == 1 || nlq_ct(q) == -1);
	if (glue != -1)
		assert_int_equal(nlq_ct(q), glue ? 1 : -1);
	q2 = nlq_open(&p, on_packet, NULL, err, sizeof(err));
	assert_non_null(q2);
	assert_int_equal(nlq_bind(q2, err, sizeof(err)), -1);
	assert_true(errno == EBUSY || errno == EPERM);
	nlq_close(q2);
	nlq_close(q);
	/* Not asked for. */
	p = params(4096);
	if ((q = bound(&p)) == NULL)
		skip();
	assert_int_equal(nlq_ct(q), 0);
	nlq_close(q);
}

/* Packet messages as the kernel sends them. */
#define MSG_BUF 1024
static const uint8_t payload[20] = { 0x45, 0, 0, 20 };

static struct nlmsghdr *
packet_msg(char *buf, uint32_t id)
{
	struct nfqnl_msg_packet_hdr ph = { .packet_id = htonl(id), .hw_protocol = htons(0x0800),
	    .hook = 1 };
	struct nlmsghdr *nlh;

	memset(buf, 0, MSG_BUF);
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_PACKET, 7);
	mnl_attr_put(nlh, NFQA_PACKET_HDR, sizeof(ph), &ph);
	mnl_attr_put_u32(nlh, NFQA_MARK, htonl(0x40));
	return nlh;
}

static void
put_payload(struct nlmsghdr *nlh)
{
	mnl_attr_put(nlh, NFQA_PAYLOAD, sizeof(payload), payload);
}

/* NFQA_CT as ctnetlink_glue_build makes it: tuples (nested), status, id,
 * then CTA_USE; status_len 4 is right, others are malformed. */
static void
put_ct(struct nlmsghdr *nlh, uint32_t status, size_t status_len, bool with_status)
{
	struct nlattr *ct = mnl_attr_nest_start(nlh, NFQA_CT), *t;
	uint32_t be[2] = { htonl(status), 0 };

	t = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
	mnl_attr_put_u8(nlh, CTA_TUPLE_PROTO, 6);
	mnl_attr_nest_end(nlh, t);
	assert_true(status_len <= sizeof(be));
	if (with_status)
		mnl_attr_put(nlh, CTA_STATUS, status_len, be);
	mnl_attr_put_u32(nlh, CTA_ID, htonl(0xc0ffee));
	mnl_attr_put_u32(nlh, CTA_USE, htonl(2));
	mnl_attr_nest_end(nlh, ct);
}

static void
test_parse_ct(void **state)
{
	char buf[MSG_BUF];
	struct nlmsghdr *nlh;
	struct nlq_pkt p;
	(void)state;

	/* A held SYN-ACK of a DNATed connection: its entry, status and id. */
	nlh = packet_msg(buf, 42);
	put_ct(nlh, IPS_CONFIRMED | IPS_DST_NAT | IPS_DST_NAT_DONE | IPS_SEEN_REPLY, 4, true);
	put_payload(nlh);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.id, 42);
	assert_int_equal(p.mark, 0x40);
	assert_int_equal(p.hw_protocol, 0x0800);
	assert_int_equal(p.caplen, sizeof(payload));
	assert_memory_equal(p.data, payload, sizeof(payload));
	assert_int_equal(p.ct, NLQ_CT_ENTRY);
	assert_int_equal(p.ct_status,
	    IPS_CONFIRMED | IPS_DST_NAT | IPS_DST_NAT_DONE | IPS_SEEN_REPLY);
	assert_int_equal(p.ct_id, 0xc0ffee);

	/* The same from a queue bound without conntrack: not trusted. */
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, false, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);
	assert_int_equal(p.ct_status, 0);

	/* Asked for, none attached: the packet holds no entry. */
	nlh = packet_msg(buf, 43);
	put_payload(nlh);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.id, 43);
	assert_int_equal(p.ct, NLQ_CT_NONE);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, false, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);

	/* An entry without NAT. */
	nlh = packet_msg(buf, 44);
	put_ct(nlh, IPS_CONFIRMED, 4, true);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_ENTRY);
	assert_int_equal(p.ct_status, IPS_CONFIRMED);
}

static void
test_parse_ct_malformed(void **state)
{
	char buf[MSG_BUF];
	struct nlmsghdr *nlh;
	struct nlattr *ct;
	struct nlq_pkt p;
	(void)state;

	/* A status of 2 bytes, then of 8: the entry is ignored, the packet
	 * kept. */
	nlh = packet_msg(buf, 50);
	put_ct(nlh, IPS_DST_NAT, 2, true);
	put_payload(nlh);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.id, 50);
	assert_int_equal(p.caplen, sizeof(payload));
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);
	assert_int_equal(p.ct_status, 0);
	nlh = packet_msg(buf, 51);
	put_ct(nlh, IPS_DST_NAT, 8, true);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);

	/* No status. */
	nlh = packet_msg(buf, 52);
	put_ct(nlh, 0, 4, false);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);

	/* Its last attribute says it runs past the nest (the status before
	 * it parsed): the walk stops short, and nothing of it is trusted. */
	nlh = packet_msg(buf, 53);
	put_ct(nlh, IPS_DST_NAT, 4, true);
	ct = (struct nlattr *)(void *)((char *)nlh + mnl_nlmsg_size(sizeof(struct nfgenmsg)));
	while (mnl_attr_get_type(ct) != NFQA_CT)
		ct = mnl_attr_next(ct);
	{
		/* CTA_USE, the nest's last (8 bytes): claims 12. */
		struct nlattr *last = (struct nlattr *)(void *)((char *)ct + ct->nla_len - 8);

		assert_int_equal(mnl_attr_get_type(last), CTA_USE);
		last->nla_len = 12;
	}
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);

	/* NFQA_CT too short for a nest. */
	nlh = packet_msg(buf, 54);
	mnl_attr_put(nlh, NFQA_CT, 2, "ab");
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), 0);
	assert_int_equal(p.id, 54);
	assert_int_equal(p.ct, NLQ_CT_UNKNOWN);

	/* No packet header: the message is malformed. */
	memset(buf, 0, sizeof(buf));
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_PACKET, 7);
	put_ct(nlh, IPS_DST_NAT, 4, true);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len, true, &p), -1);
	/* Shorter than it says. */
	nlh = packet_msg(buf, 55);
	assert_int_equal(nlq_parse(nlh, nlh->nlmsg_len - 4, true, &p), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_verdict),
		cmocka_unit_test(test_taken),
		cmocka_unit_test(test_batches),
		cmocka_unit_test(test_ct_flag),
		cmocka_unit_test(test_parse_ct),
		cmocka_unit_test(test_parse_ct_malformed),
	};

	return cmocka_run_group_tests_name("nlq", tests, NULL, NULL);
}
