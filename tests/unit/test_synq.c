/* slotd's SYN parser (syn_parse in src/client/synq.c). Its input is whatever
 * the kernel queues, cut to the NFQUEUE copy range, so besides the valid
 * cases every prefix and every one-byte corruption of a valid packet is fed
 * to it from an exactly sized heap buffer, where ASan sees any overread. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "../../src/client/synq.h"

#define SPORT 40000
#define DPORT 443
#define ISN 0xdeadbeefU

static const uint8_t src4[4] = { 192, 0, 2, 1 };
static const uint8_t dst4[4] = { 203, 0, 113, 5 };
static const uint8_t src6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7 };
static const uint8_t dst6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0xbe, 0xef, 0, 5 };

static void
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

/* A TCP SYN header with optlen bytes of options (a multiple of 4). */
static size_t
put_tcp(uint8_t *t, size_t optlen)
{
	static const uint8_t opts[] = { 2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0,
	    1, 3, 3, 7 };	/* MSS, SACK permitted, timestamps, NOP, window scale */

	memset(t, 0, 20 + optlen);
	put16(t, SPORT);
	put16(t + 2, DPORT);
	t[4] = (uint8_t)(ISN >> 24);
	t[5] = (uint8_t)(ISN >> 16);
	t[6] = (uint8_t)(ISN >> 8);
	t[7] = (uint8_t)ISN;
	t[12] = (uint8_t)(((20 + optlen) / 4) << 4);
	t[13] = 0x02;
	put16(t + 14, 64240);
	memcpy(t + 20, opts, optlen < sizeof(opts) ? optlen : sizeof(opts));
	return 20 + optlen;
}

/* IPv4 SYN with ipopt bytes of IP options and tcpopt bytes of TCP options.
 * Returns its length. */
static size_t
build4(uint8_t *p, size_t ipopt, size_t tcpopt)
{
	size_t ihl = 20 + ipopt, len;

	memset(p, 0, ihl);
	p[0] = (uint8_t)(0x40 | ihl / 4);
	p[8] = 64;
	p[9] = IPPROTO_TCP;
	put16(p + 6, 0x4000);	/* DF, as every Linux SYN carries */
	memcpy(p + 12, src4, 4);
	memcpy(p + 16, dst4, 4);
	if (ipopt > 0)
		memset(p + 20, 1, ipopt);	/* NOPs */
	len = ihl + put_tcp(p + ihl, tcpopt);
	put16(p + 2, (uint16_t)len);
	return len;
}

static size_t
build6(uint8_t *p, size_t tcpopt)
{
	size_t tlen;

	memset(p, 0, 40);
	p[0] = 0x60;
	p[6] = IPPROTO_TCP;
	p[7] = 64;
	memcpy(p + 8, src6, 16);
	memcpy(p + 24, dst6, 16);
	tlen = put_tcp(p + 40, tcpopt);
	put16(p + 4, (uint16_t)tlen);
	return 40 + tlen;
}

/* Parses a copy of pkt[0..len) in a buffer of exactly len bytes. */
static enum syn_parse
parse_exact(const uint8_t *pkt, size_t len, struct syn_info *out)
{
	uint8_t *b = malloc(len ? len : 1);
	enum syn_parse r;

	assert_non_null(b);
	memcpy(b, pkt, len);
	r = syn_parse(len ? b : NULL, len, len, out);
	free(b);
	return r;
}

static void
assert_syn4(const struct syn_info *si)
{
	assert_int_equal(si->src.addr.family, AF_INET);
	assert_int_equal(si->dst.addr.family, AF_INET);
	assert_memory_equal(si->src.addr.bytes, src4, 4);
	assert_memory_equal(si->dst.addr.bytes, dst4, 4);
	/* struct addr is compared with memcmp: unused bytes must stay zero. */
	for (int i = 4; i < 16; i++) {
		assert_int_equal(si->src.addr.bytes[i], 0);
		assert_int_equal(si->dst.addr.bytes[i], 0);
	}
	assert_int_equal(si->src.port, SPORT);
	assert_int_equal(si->dst.port, DPORT);
	assert_int_equal(si->seq, ISN);
}

static void
test_ipv4_syn(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	n = build4(p, 0, 0);
	assert_int_equal(n, 40);
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	assert_syn4(&si);

	n = build4(p, 0, 20);
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	assert_syn4(&si);

	/* IHL 8: the TCP header starts after the IP options. */
	n = build4(p, 12, 20);
	assert_int_equal(n, 72);
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	assert_syn4(&si);

	/* The largest IHL, 15 words. */
	n = build4(p, 40, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	assert_syn4(&si);
}

static void
test_ipv6_syn(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	for (size_t opt = 0; opt <= 20; opt += 20) {
		n = build6(p, opt);
		assert_int_equal(n, 60 + opt);
		assert_int_equal(parse_exact(p, n, &si), SYN_OK);
		assert_int_equal(si.src.addr.family, AF_INET6);
		assert_int_equal(si.dst.addr.family, AF_INET6);
		assert_memory_equal(si.src.addr.bytes, src6, 16);
		assert_memory_equal(si.dst.addr.bytes, dst6, 16);
		assert_int_equal(si.src.port, SPORT);
		assert_int_equal(si.dst.port, DPORT);
		assert_int_equal(si.seq, ISN);
	}
}

static void
test_extra_bytes_and_flags_tolerated(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	/* Link-layer padding after the datagram: lengths come from the header. */
	n = build4(p, 0, 0);
	memset(p + n, 0xee, 20);
	assert_int_equal(parse_exact(p, n + 20, &si), SYN_OK);
	assert_syn4(&si);

	/* ECN setup (SYN+ECE+CWR) and PSH still open a connection. */
	n = build4(p, 0, 0);
	p[33] = 0xc2;
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	p[33] = 0x0a;
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);

	/* DF clear is not a fragment either. */
	n = build4(p, 0, 0);
	put16(p + 6, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);

	/* A SYN with data (TCP Fast Open) parses like any other. */
	n = build4(p, 0, 0);
	memset(p + n, 'x', 16);
	put16(p + 2, (uint16_t)(n + 16));
	assert_int_equal(parse_exact(p, n + 16, &si), SYN_OK);
	assert_syn4(&si);

	/* Ports and the sequence number are read in network order. */
	n = build6(p, 0);
	put16(p + 40, 0x0102);
	put16(p + 42, 0xfffe);
	p[44] = 0;
	p[45] = 0;
	p[46] = 0;
	p[47] = 1;
	assert_int_equal(parse_exact(p, n, &si), SYN_OK);
	assert_int_equal(si.src.port, 0x0102);
	assert_int_equal(si.dst.port, 0xfffe);
	assert_int_equal(si.seq, 1);
}

static void
test_ipv4_bad_headers(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	assert_int_equal(parse_exact(p, 0, &si), SYN_MALFORMED);
	p[0] = 0x45;
	assert_int_equal(parse_exact(p, 1, &si), SYN_MALFORMED);

	n = build4(p, 0, 0);
	assert_int_equal(parse_exact(p, 19, &si), SYN_MALFORMED);

	/* What lies at the would-be TCP offset reads as a SYN, so only the IHL
	 * check can refuse these. */
	for (uint8_t ihl = 0; ihl < 5; ihl++) {
		n = build4(p, 0, 0);
		p[0] = (uint8_t)(0x40 | ihl);
		p[4] = 0x12;
		p[ihl * 4 + 12] = 0x50;
		p[ihl * 4 + 13] = 0x02;
		assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	}

	/* IHL claims IP options the datagram does not hold. */
	n = build4(p, 0, 0);
	p[0] = 0x4f;
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	n = build4(p, 0, 0);
	put16(p + 2, (uint16_t)(n + 1));
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	n = build4(p, 0, 0);
	put16(p + 2, 19);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	put16(p + 2, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	/* The bytes are there, but the datagram ends inside the TCP header. */
	n = build4(p, 0, 0);
	put16(p + 2, 39);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	put16(p + 2, 20);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	for (uint8_t v = 0; v < 16; v++) {
		if (v == 4 || v == 6)
			continue;
		n = build4(p, 0, 0);
		p[0] = (uint8_t)(v << 4 | 5);
		assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	}
}

static void
test_ipv4_not_tcp(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	n = build4(p, 0, 0);
	p[9] = IPPROTO_UDP;
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
	p[9] = IPPROTO_ICMP;
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);

	/* Fragments: more-fragments set, or any offset, DF or not. */
	n = build4(p, 0, 0);
	put16(p + 6, 0x2000);
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
	put16(p + 6, 0x0001);
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
	put16(p + 6, 0x4000 | 0x1fff);
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
	put16(p + 6, 0x6000);
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
}

static void
test_bad_tcp_header(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	for (uint8_t doff = 0; doff < 5; doff++) {
		n = build4(p, 0, 0);
		p[32] = (uint8_t)(doff << 4);
		assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
		n = build6(p, 0);
		p[52] = (uint8_t)(doff << 4);
		assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	}

	/* Data offset past the end of the datagram. */
	n = build4(p, 0, 20);
	p[32] = 11 << 4;
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	p[32] = 15 << 4;
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	n = build6(p, 0);
	p[52] = 6 << 4;
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	/* Past the IP total length, though within the captured bytes. */
	n = build4(p, 0, 20);
	put16(p + 2, 56);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
}

static void
test_not_a_first_syn(void **state)
{
	static const uint8_t flags[] = {
		0x13,	/* SYN+ACK+FIN */
		0x16,	/* SYN+ACK+RST */
		0x17,	/* SYN+ACK+RST+FIN */
		0x04,	/* RST */
		0x06,	/* SYN+RST */
		0x03,	/* SYN+FIN */
		0x10,	/* ACK */
		0x00,	/* nothing */
		0x01,	/* FIN */
		0x11,	/* FIN+ACK */
		0x18,	/* PSH+ACK */
		0xff,	/* everything */
	};
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	for (size_t i = 0; i < sizeof(flags); i++) {
		n = build4(p, 0, 0);
		p[33] = flags[i];
		assert_int_equal(parse_exact(p, n, &si), SYN_NOT_SYN);
		n = build6(p, 0);
		p[53] = flags[i];
		assert_int_equal(parse_exact(p, n, &si), SYN_NOT_SYN);
	}
}

/* A SYN-ACK (PSH and the other flags outside SYN, ACK, RST and FIN do not
 * matter): its own ISN and the ack of the SYN it answers. (With RST or FIN
 * it is none: test_not_a_first_syn.) */
static void
test_synack(void **state)
{
	static const uint8_t flags[] = { 0x12, 0x1a, 0x52 };
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	for (size_t i = 0; i < sizeof(flags); i++) {
		n = build4(p, 0, 0);
		p[33] = flags[i];
		p[28] = 0xde, p[29] = 0xad, p[30] = 0xbe, p[31] = 0xef;
		assert_int_equal(parse_exact(p, n, &si), SYN_SYNACK);
		assert_int_equal(si.ack, 0xdeadbeef);
		assert_int_equal(si.src.addr.family, AF_INET);
		n = build6(p, 0);
		p[53] = flags[i];
		p[48] = 0x01, p[49] = 0x02, p[50] = 0x03, p[51] = 0x04;
		assert_int_equal(parse_exact(p, n, &si), SYN_SYNACK);
		assert_int_equal(si.ack, 0x01020304);
		assert_int_equal(si.src.addr.family, AF_INET6);
	}
}

static void
test_port_zero(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	n = build4(p, 0, 0);
	put16(p + 20, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	n = build4(p, 0, 0);
	put16(p + 22, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	n = build6(p, 0);
	put16(p + 42, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
}

static void
test_ipv6_bad(void **state)
{
	static const uint8_t ext[] = { 0, 43, 44, 60, 51, 50, 135, 59 };
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	/* Extension headers (hop-by-hop, routing, fragment, ...) and no
	 * next header are not walked. */
	for (size_t i = 0; i < sizeof(ext); i++) {
		n = build6(p, 0);
		p[6] = ext[i];
		assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);
	}
	n = build6(p, 0);
	p[6] = IPPROTO_UDP;
	assert_int_equal(parse_exact(p, n, &si), SYN_NOT_TCP);

	n = build6(p, 0);
	put16(p + 4, 21);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	put16(p + 4, 0xffff);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	/* The payload length ends inside the TCP header. */
	put16(p + 4, 19);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);
	put16(p + 4, 0);
	assert_int_equal(parse_exact(p, n, &si), SYN_MALFORMED);

	n = build6(p, 0);
	assert_int_equal(parse_exact(p, 39, &si), SYN_MALFORMED);
	assert_int_equal(parse_exact(p, 40, &si), SYN_MALFORMED);
}

/* Every prefix of a valid SYN: a cut packet is never taken for a SYN. */
static void
test_every_truncation(void **state)
{
	uint8_t p[128] = { 0 };
	struct syn_info si;
	size_t n;
	(void)state;

	for (int kind = 0; kind < 4; kind++) {
		switch (kind) {
		case 0: n = build4(p, 0, 0); break;
		case 1: n = build4(p, 12, 20); break;
		case 2: n = build6(p, 0); break;
		default: n = build6(p, 20); break;
		}
		assert_int_equal(parse_exact(p, n, &si), SYN_OK);
		for (size_t len = 0; len < n; len++) {
			enum syn_parse r = parse_exact(p, len, &si);
			if (r == SYN_OK)
				fail_msg("kind %d cut to %zu bytes parsed as a SYN", kind, len);
		}
	}
}

/* Every byte of valid packets set to every value: no overread, and what
 * still parses as a SYN is self-consistent. */
static void
test_every_byte_corrupted(void **state)
{
	uint8_t p[128], q[128];
	struct syn_info si;
	size_t n;
	(void)state;

	for (int kind = 0; kind < 2; kind++) {
		n = kind == 0 ? build4(p, 12, 20) : build6(p, 20);
		for (size_t i = 0; i < n; i++) {
			for (unsigned v = 0; v < 256; v++) {
				memcpy(q, p, n);
				q[i] = (uint8_t)v;
				if (parse_exact(q, n, &si) != SYN_OK)
					continue;
				assert_int_equal(si.src.addr.family, kind == 0 ? AF_INET : AF_INET6);
				assert_int_equal(si.src.addr.family, si.dst.addr.family);
				assert_true(si.src.port != 0 && si.dst.port != 0);
			}
		}
	}
}

static void
test_parse_str(void **state)
{
	const enum syn_parse all[] = { SYN_OK, SYN_NOT_TCP, SYN_NOT_SYN, SYN_SYNACK,
	    SYN_MALFORMED };
	(void)state;

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		const char *s = syn_parse_str(all[i]);
		assert_non_null(s);
		assert_true(s[0] != '\0');
		for (size_t j = 0; j < i; j++)
			assert_string_not_equal(s, syn_parse_str(all[j]));
	}
	assert_non_null(syn_parse_str((enum syn_parse)99));
}

/* A SYN with data (TCP Fast Open) is longer than the queue's copy range:
 * the headers captured are enough. */
static void
test_captured_headers_of_a_longer_syn(void **state)
{
	uint8_t p[1500];
	struct syn_info si;
	size_t len = build4(p, 0, 20);
	(void)state;

	put16(p + 2, (uint16_t)(len + 1000));	/* 1000 bytes of data not captured */
	assert_int_equal(syn_parse(p, len, len + 1000, &si), SYN_OK);
	assert_syn4(&si);
	/* The fixed TCP header itself must be captured... */
	assert_int_equal(syn_parse(p, 39, len + 1000, &si), SYN_MALFORMED);
	/* ...the datagram must fit the wire length... */
	assert_int_equal(syn_parse(p, len, len + 999, &si), SYN_MALFORMED);
	/* ...and the capture cannot exceed the wire. */
	assert_int_equal(syn_parse(p, len, len - 1, &si), SYN_MALFORMED);

	len = build6(p, 20);
	put16(p + 4, (uint16_t)(len - 40 + 500));
	assert_int_equal(syn_parse(p, len, len + 500, &si), SYN_OK);
	assert_int_equal(si.dst.port, DPORT);
	assert_int_equal(syn_parse(p, 59, len + 500, &si), SYN_MALFORMED);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4_syn),
		cmocka_unit_test(test_captured_headers_of_a_longer_syn),
		cmocka_unit_test(test_ipv6_syn),
		cmocka_unit_test(test_extra_bytes_and_flags_tolerated),
		cmocka_unit_test(test_ipv4_bad_headers),
		cmocka_unit_test(test_ipv4_not_tcp),
		cmocka_unit_test(test_bad_tcp_header),
		cmocka_unit_test(test_not_a_first_syn),
		cmocka_unit_test(test_synack),
		cmocka_unit_test(test_port_zero),
		cmocka_unit_test(test_ipv6_bad),
		cmocka_unit_test(test_every_truncation),
		cmocka_unit_test(test_every_byte_corrupted),
		cmocka_unit_test(test_parse_str),
	};
	return cmocka_run_group_tests_name("synq", tests, NULL, NULL);
}
