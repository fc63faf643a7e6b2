/* SYN probes' packets and matching (src/core/synprobe.c, the pure part). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <sys/socket.h>

#include "slot/synprobe.h"

static const uint8_t SRC[4] = { 192, 0, 2, 1 };
static const uint8_t DST[4] = { 198, 51, 100, 7 };

/* 192.0.2.1:40000 -> 198.51.100.7:443, ISN 0x12345678, checksum computed
 * independently (Python, RFC 1071 sum over the pseudo-header). */
static const uint8_t SYN_VECTOR[SYNP_SYN_LEN] = {
	0x9c, 0x40, 0x01, 0xbb, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00,
	0x80, 0x02, 0xfa, 0xf0, 0x81, 0x3c, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
	0x01, 0x03, 0x03, 0x07, 0x01, 0x01, 0x04, 0x02,
};

static void
test_syn_matches_the_vector(void **state)
{
	uint8_t b[64];
	(void)state;

	assert_int_equal(synp_build_syn(b, sizeof(b), SRC, 40000, DST, 443, 0x12345678),
	    SYNP_SYN_LEN);
	assert_memory_equal(b, SYN_VECTOR, SYNP_SYN_LEN);
	/* a segment holding its checksum sums to zero */
	assert_int_equal(synp_checksum(SRC, DST, b, SYNP_SYN_LEN), 0);
	b[5] ^= 1;
	assert_int_not_equal(synp_checksum(SRC, DST, b, SYNP_SYN_LEN), 0);
}

/* 2001:db8::1 port 40000 -> 2001:db8:5::7 port 443, ISN 0x12345678, checksum over
 * the IPv6 pseudo-header computed independently (Python, RFC 8200 8.1). */
static const uint8_t SRC6[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
static const uint8_t DST6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 5, [15] = 7 };
static const uint8_t SYN6_VECTOR[SYNP_SYN_LEN] = {
	0x9c, 0x40, 0x01, 0xbb, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x00, 0x00,
	0x80, 0x02, 0xfa, 0xf0, 0x11, 0xfa, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4,
	0x01, 0x03, 0x03, 0x07, 0x01, 0x01, 0x04, 0x02,
};

static void
test_syn6_matches_the_vector(void **state)
{
	uint8_t b[64];
	(void)state;

	assert_int_equal(synp_build_syn6(b, sizeof(b), SRC6, 40000, DST6, 443, 0x12345678),
	    SYNP_SYN_LEN);
	assert_memory_equal(b, SYN6_VECTOR, SYNP_SYN_LEN);
	assert_int_equal(synp_checksum6(SRC6, DST6, b, SYNP_SYN_LEN), 0);
	/* the pseudo-header covers every byte of both addresses */
	uint8_t other[16];
	memcpy(other, SRC6, 16);
	other[9] ^= 0x40;
	assert_int_not_equal(synp_checksum6(other, DST6, b, SYNP_SYN_LEN), 0);
	assert_int_equal(synp_build_syn6(b, SYNP_SYN_LEN - 1, SRC6, 1, DST6, 2, 3), 0);
}

/* A TCP segment as an IPv6 raw socket gives it: no IP header. */
static size_t
segment6(uint8_t *t, uint8_t flags, uint32_t seq, uint32_t ack)
{
	memset(t, 0, 20);
	t[0] = 443 >> 8;
	t[1] = 443 & 0xff;
	t[2] = 40000 >> 8;
	t[3] = 40000 & 0xff;
	t[4] = (uint8_t)(seq >> 24);
	t[5] = (uint8_t)(seq >> 16);
	t[6] = (uint8_t)(seq >> 8);
	t[7] = (uint8_t)seq;
	t[8] = (uint8_t)(ack >> 24);
	t[9] = (uint8_t)(ack >> 16);
	t[10] = (uint8_t)(ack >> 8);
	t[11] = (uint8_t)ack;
	t[12] = 5 << 4;
	t[13] = flags;
	return 20;
}

static void
test_parse6(void **state)
{
	uint8_t t[40];
	struct synp_pkt k;
	(void)state;

	size_t n = segment6(t, 0x12, 0xabcdef01, 0x12345679);
	assert_int_equal(synp_parse6(t, n, DST6, SRC6, &k), SYNP_PKT_SYNACK);
	assert_int_equal(k.family, AF_INET6);
	assert_memory_equal(k.src, DST6, 16);
	assert_memory_equal(k.dst, SRC6, 16);
	assert_int_equal(k.sport, 443);
	assert_int_equal(k.dport, 40000);
	assert_int_equal(k.seq, 0xabcdef01);
	assert_int_equal(k.ack, 0x12345679);
	segment6(t, 0x14, 0, 7);
	assert_int_equal(synp_parse6(t, n, DST6, SRC6, &k), SYNP_PKT_RST);
	assert_int_equal(k.ack, 7);
	segment6(t, 0x04, 0, 0);		/* RST without ACK */
	assert_int_equal(synp_parse6(t, n, DST6, SRC6, &k), SYNP_PKT_OTHER);
	segment6(t, 0x02, 0, 0);		/* a SYN */
	assert_int_equal(synp_parse6(t, n, DST6, SRC6, &k), SYNP_PKT_OTHER);
	for (size_t len = 0; len < n; len++)	/* cut short of the TCP header */
		assert_int_equal(synp_parse6(t, len, DST6, SRC6, &k), SYNP_PKT_BAD);
	segment6(t, 0x12, 1, 2);
	t[12] = 4 << 4;				/* data offset 16 bytes */
	assert_int_equal(synp_parse6(t, n, DST6, SRC6, &k), SYNP_PKT_BAD);
}

static void
test_syn_needs_room(void **state)
{
	uint8_t b[SYNP_SYN_LEN - 1];
	(void)state;

	assert_int_equal(synp_build_syn(b, sizeof(b), SRC, 1, DST, 2, 3), 0);
}

static void
test_checksum_of_odd_length(void **state)
{
	/* the last byte is padded with a zero, as RFC 1071 says */
	const uint8_t a[3] = { 0x01, 0x02, 0x03 }, b[4] = { 0x01, 0x02, 0x03, 0x00 };
	(void)state;

	/* the pseudo-header's length differs, so compare against a sum
	 * with the same length field: recompute by hand */
	uint16_t ca = synp_checksum(SRC, DST, a, 3), cb = synp_checksum(SRC, DST, b, 4);
	assert_int_equal((uint16_t)(ca - cb), (uint16_t)1);	/* one less in the length word */
}

/* An IPv4 + TCP packet as a raw socket gives it. */
static size_t
packet(uint8_t *p, uint8_t flags, uint32_t seq, uint32_t ack, size_t ihl)
{
	size_t tot = ihl + 20;

	memset(p, 0, tot);
	p[0] = (uint8_t)(0x40 | ihl / 4);
	p[2] = (uint8_t)(tot >> 8);
	p[3] = (uint8_t)tot;
	p[6] = 0x40;		/* DF */
	p[8] = 64;
	p[9] = 6;
	memcpy(p + 12, DST, 4);	/* from the server */
	memcpy(p + 16, SRC, 4);
	uint8_t *t = p + ihl;
	t[0] = 443 >> 8;
	t[1] = 443 & 0xff;
	t[2] = 40000 >> 8;
	t[3] = 40000 & 0xff;
	t[4] = (uint8_t)(seq >> 24);
	t[5] = (uint8_t)(seq >> 16);
	t[6] = (uint8_t)(seq >> 8);
	t[7] = (uint8_t)seq;
	t[8] = (uint8_t)(ack >> 24);
	t[9] = (uint8_t)(ack >> 16);
	t[10] = (uint8_t)(ack >> 8);
	t[11] = (uint8_t)ack;
	t[12] = 5 << 4;
	t[13] = flags;
	return tot;
}

static void
test_parse_synack(void **state)
{
	uint8_t p[80];
	struct synp_pkt k;
	(void)state;

	size_t n = packet(p, 0x12, 0xabcdef01, 0x12345679, 20);
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_SYNACK);
	assert_memory_equal(k.src, DST, 4);
	assert_memory_equal(k.dst, SRC, 4);
	assert_int_equal(k.sport, 443);
	assert_int_equal(k.dport, 40000);
	assert_int_equal(k.seq, 0xabcdef01);
	assert_int_equal(k.ack, 0x12345679);
	/* IP options move the TCP header */
	n = packet(p, 0x12, 1, 2, 24);
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_SYNACK);
	assert_int_equal(k.ack, 2);
	assert_int_equal(k.dport, 40000);
	/* ECN bits and PSH do not matter */
	n = packet(p, 0x12 | 0x40 | 0x08, 1, 2, 20);
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_SYNACK);
}

static void
test_parse_rst_and_others(void **state)
{
	uint8_t p[80];
	struct synp_pkt k;
	(void)state;

	size_t n = packet(p, 0x14, 0, 0x12345679, 20);
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_RST);
	assert_int_equal(k.ack, 0x12345679);
	packet(p, 0x04, 0, 0, 20);		/* RST without ACK answers no SYN */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_OTHER);
	packet(p, 0x10, 0, 0, 20);		/* a bare ACK */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_OTHER);
	packet(p, 0x02, 0, 0, 20);		/* a SYN */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_OTHER);
	packet(p, 0x16, 0, 0, 20);		/* SYN+RST+ACK is no SYN-ACK */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_OTHER);
}

/* The v4 parse says its family and leaves the rest of the addresses zero,
 * so that matching by memcmp over 16 bytes cannot mix the families. */
static void
test_parse_v4_family(void **state)
{
	uint8_t p[80];
	struct synp_pkt k;
	static const uint8_t zero[12];
	(void)state;

	memset(&k, 0xff, sizeof(k));
	size_t n = packet(p, 0x12, 1, 2, 20);
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_SYNACK);
	assert_int_equal(k.family, AF_INET);
	assert_memory_equal(k.src + 4, zero, 12);
	assert_memory_equal(k.dst + 4, zero, 12);
}

static void
test_parse_rejects_bad_packets(void **state)
{
	uint8_t p[80];
	struct synp_pkt k;
	(void)state;

	size_t n = packet(p, 0x12, 1, 2, 20);
	for (size_t len = 0; len < n; len++)	/* every cut short of the TCP header */
		assert_int_equal(synp_parse(p, len, &k), SYNP_PKT_BAD);
	p[0] = 0x65;				/* IPv6 */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[0] = 0x44;				/* IHL 16 bytes */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[9] = 17;				/* UDP */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[6] = 0x20;				/* more fragments */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[7] = 0x01;				/* a fragment offset */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[3] = 39;				/* total length short of the headers */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	packet(p, 0x12, 1, 2, 20);
	p[20 + 12] = 4 << 4;			/* TCP data offset 16 bytes */
	assert_int_equal(synp_parse(p, n, &k), SYNP_PKT_BAD);
	/* IHL 24 with only 40 bytes: the TCP header is cut */
	n = packet(p, 0x12, 1, 2, 24);
	assert_int_equal(synp_parse(p, n - 1, &k), SYNP_PKT_BAD);
}

static const struct synp_tx TX[3] = {
	{ .sport = 40000, .isn = 1000, .sent_us = 0 },
	{ .sport = 40001, .isn = 0xffffffff, .sent_us = 1000000 },
	{ .sport = 40002, .isn = 3000, .sent_us = 3000000 },
};

static struct synp_pkt
answer(uint16_t dport, uint32_t ack)
{
	struct synp_pkt k = { .sport = 443, .dport = dport, .ack = ack };
	return k;
}

static void
test_match_names_the_transmission(void **state)
{
	struct synp_pkt k;
	size_t idx = 99;
	uint32_t rtt = 0;
	(void)state;

	/* the second transmission's SYN-ACK (its ISN wraps): exact from its
	 * own send time, not the first's */
	k = answer(40001, 0);
	assert_int_equal(synp_match(TX, 2, SYNP_PKT_SYNACK, &k, 1080000, &idx, &rtt),
	    SYNP_EXACT);
	assert_int_equal(idx, 1);
	assert_int_equal(rtt, 80000);
	/* the first's, before the second was sent */
	k = answer(40000, 1001);
	assert_int_equal(synp_match(TX, 1, SYNP_PKT_SYNACK, &k, 80000, &idx, &rtt), SYNP_EXACT);
	assert_int_equal(idx, 0);
	assert_int_equal(rtt, 80000);
	/* a refusal */
	k = answer(40002, 3001);
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_RST, &k, 3050000, &idx, &rtt), SYNP_EXACT);
	assert_int_equal(idx, 2);
	assert_int_equal(rtt, 50000);
}

static void
test_match_rejects_strangers(void **state)
{
	struct synp_pkt k;
	size_t idx;
	uint32_t rtt;
	(void)state;

	k = answer(40000, 1000);		/* ack = ISN, not ISN + 1 */
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_SYNACK, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	k = answer(40001, 1001);		/* the first's ack on the second's port */
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_SYNACK, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	k = answer(40003, 1001);		/* another port */
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_SYNACK, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	k = answer(40002, 3001);		/* a transmission not sent yet */
	assert_int_equal(synp_match(TX, 2, SYNP_PKT_SYNACK, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	k = answer(40000, 1001);		/* neither SYN-ACK nor RST */
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_OTHER, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	assert_int_equal(synp_match(TX, 3, SYNP_PKT_BAD, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
	/* a transmission that could not be sent (port 0) matches nothing */
	struct synp_tx t = { .sport = 0, .isn = 5 };
	k = answer(0, 6);
	assert_int_equal(synp_match(&t, 1, SYNP_PKT_SYNACK, &k, 50000, &idx, &rtt),
	    SYNP_NO_MATCH);
}

static void
test_match_sets_aside_a_maybe_retransmitted_synack(void **state)
{
	struct synp_pkt k;
	size_t idx;
	uint32_t rtt;
	(void)state;

	/* the first's SYN-ACK 1.08 s late: the server's retransmission or a
	 * slow path; the second's answer is due, so wait for it */
	k = answer(40000, 1001);
	assert_int_equal(synp_match(TX, 2, SYNP_PKT_SYNACK, &k, 1080000, &idx, &rtt), SYNP_SKIP);
	/* with nothing later to wait for it is reported, as inexact */
	assert_int_equal(synp_match(TX, 1, SYNP_PKT_SYNACK, &k, 1080000, &idx, &rtt),
	    SYNP_INEXACT);
	assert_int_equal(rtt, 1080000);
	/* RSTs are never retransmitted by the server: exact however late */
	assert_int_equal(synp_match(TX, 2, SYNP_PKT_RST, &k, 1500000, &idx, &rtt), SYNP_EXACT);
	assert_int_equal(rtt, 1500000);
	/* just under the server's RTO is exact */
	assert_int_equal(synp_match(TX, 2, SYNP_PKT_SYNACK, &k, SYNP_SERVER_RTO_US - 1, &idx,
	    &rtt), SYNP_EXACT);
}

static void
test_retransmission_schedule(void **state)
{
	(void)state;
	assert_int_equal(synp_tx_at_us(1), 1000000);
	assert_int_equal(synp_tx_at_us(2), 3000000);
	assert_int_equal(synp_tx_at_us(3), 7000000);
	assert_int_equal(SYNP_MAX_TX, 4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_syn_matches_the_vector),
		cmocka_unit_test(test_syn_needs_room),
		cmocka_unit_test(test_syn6_matches_the_vector),
		cmocka_unit_test(test_parse6),
		cmocka_unit_test(test_parse_v4_family),
		cmocka_unit_test(test_checksum_of_odd_length),
		cmocka_unit_test(test_parse_synack),
		cmocka_unit_test(test_parse_rst_and_others),
		cmocka_unit_test(test_parse_rejects_bad_packets),
		cmocka_unit_test(test_match_names_the_transmission),
		cmocka_unit_test(test_match_rejects_strangers),
		cmocka_unit_test(test_match_sets_aside_a_maybe_retransmitted_synack),
		cmocka_unit_test(test_retransmission_schedule),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
