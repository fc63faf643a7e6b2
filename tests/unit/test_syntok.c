/* The pipe token option in SYNs (src/core/syntok.c): insertion into IPv4
 * and IPv6 SYNs as slotd hands them back to NFQUEUE, checked against an
 * independent checksum; the no-room cases; reading it back from saved SYN
 * headers; every prefix and one-byte corruption from exactly sized heap
 * buffers, where ASan sees any overread. */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "slot/syntok.h"

static const uint8_t src4[4] = { 192, 168, 1, 10 };
static const uint8_t dst4[4] = { 203, 0, 113, 5 };
static const uint8_t src6[16] = { 0xfd, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7 };
static const uint8_t dst6[16] = { 0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, 0, 0, 0, 0, 0, 0xbe, 0xef, 0, 5 };
static const uint8_t tok[PROTO_TOKEN_LEN] = { 0x5a, 0x17, 0xc0, 0xff, 0xee, 0x0b, 0x5e, 0x01 };
/* What Linux puts in a SYN: MSS, SACK permitted, timestamps, NOP, window scale. */
static const uint8_t linux_opts[20] = { 2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0,
    1, 3, 3, 7 };

/* A plain RFC 1071 sum, written apart from the module's. */
static uint16_t
rfc1071(const uint8_t *p, size_t n, uint32_t acc)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		acc += (uint32_t)(p[i] << 8 | p[i + 1]);
	if (n & 1)
		acc += (uint32_t)p[n - 1] << 8;
	while (acc > 0xffff)
		acc = (acc & 0xffff) + (acc >> 16);
	return (uint16_t)acc;
}

/* True if the TCP checksum of the packet verifies (sum of pseudo-header
 * and segment, checksum included, is all ones). */
static int
tcp_ok(const uint8_t *pkt, size_t len)
{
	uint8_t ph[40];
	size_t ihl, phl, tlen;

	if ((pkt[0] >> 4) == 4) {
		ihl = (size_t)(pkt[0] & 15) * 4;
		tlen = len - ihl;
		memcpy(ph, pkt + 12, 8);
		ph[8] = 0;
		ph[9] = IPPROTO_TCP;
		ph[10] = (uint8_t)(tlen >> 8);
		ph[11] = (uint8_t)tlen;
		phl = 12;
	} else {
		ihl = 40;
		tlen = len - ihl;
		memcpy(ph, pkt + 8, 32);
		memset(ph + 32, 0, 8);
		ph[34] = (uint8_t)(tlen >> 8);
		ph[35] = (uint8_t)tlen;
		ph[39] = IPPROTO_TCP;
		phl = 40;
	}
	uint32_t acc = rfc1071(ph, phl, 0);
	return rfc1071(pkt + ihl, tlen, acc) == 0xffff;
}

static int
ip4_ok(const uint8_t *pkt)
{
	return rfc1071(pkt, (size_t)(pkt[0] & 15) * 4, 0) == 0xffff;
}

/* A SYN with optlen bytes of options (the first of linux_opts, then NOPs)
 * and datalen bytes of data. Returns its length. */
static size_t
mk_syn(uint8_t *p, int v6, size_t optlen, size_t datalen)
{
	size_t ihl = v6 ? 40 : 20, len = ihl + 20 + optlen + datalen, i;
	uint8_t *t = p + ihl;

	memset(p, 0, len);
	if (v6) {
		p[0] = 0x60;
		p[4] = (uint8_t)((len - 40) >> 8);
		p[5] = (uint8_t)(len - 40);
		p[6] = IPPROTO_TCP;
		p[7] = 64;
		memcpy(p + 8, src6, 16);
		memcpy(p + 24, dst6, 16);
	} else {
		p[0] = 0x45;
		p[2] = (uint8_t)(len >> 8);
		p[3] = (uint8_t)len;
		p[6] = 0x40;	/* DF */
		p[8] = 64;
		p[9] = IPPROTO_TCP;
		memcpy(p + 12, src4, 4);
		memcpy(p + 16, dst4, 4);
	}
	t[0] = 0x9c;	/* 40000 */
	t[1] = 0x40;
	t[2] = 0x01;	/* 443 */
	t[3] = 0xbb;
	t[4] = 0xde;
	t[5] = 0xad;
	t[6] = 0xbe;
	t[7] = 0xef;
	t[12] = (uint8_t)(((20 + optlen) / 4) << 4);
	t[13] = 0x02;
	t[14] = 0xfa;
	t[15] = 0xf0;
	for (i = 0; i < optlen; i++)
		t[20 + i] = i < sizeof(linux_opts) ? linux_opts[i] : 1;
	for (i = 0; i < datalen; i++)
		t[20 + optlen + i] = (uint8_t)(0xa0 + i);
	/* A partial checksum, as the kernel leaves for offload: never to be
	 * trusted by syntok_insert. */
	t[16] = 0x12;
	t[17] = 0x34;
	return len;
}

static void
check_inserted(int v6, size_t optlen, size_t datalen)
{
	uint8_t orig[200], p[200], got[PROTO_TOKEN_LEN];
	size_t ihl = v6 ? 40 : 20, len = mk_syn(orig, v6, optlen, datalen), nl = 0;

	memcpy(p, orig, len);
	assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_OK);
	assert_int_equal(nl, len + SYNTOK_OPT_LEN);
	if (v6) {
		assert_int_equal(p[4] << 8 | p[5], nl - 40);
	} else {
		assert_int_equal(p[2] << 8 | p[3], nl);
		assert_true(ip4_ok(p));
	}
	assert_true(tcp_ok(p, nl));
	/* Data offset up by three words; the option first; the old options
	 * and the data after it unchanged; ports and ISN untouched. */
	assert_int_equal(p[ihl + 12] >> 4, (20 + optlen + 12) / 4);
	assert_int_equal(p[ihl + 20], 253);
	assert_int_equal(p[ihl + 21], 12);
	assert_int_equal(p[ihl + 22], 0x53);
	assert_int_equal(p[ihl + 23], 0x4c);
	assert_memory_equal(p + ihl + 24, tok, PROTO_TOKEN_LEN);
	assert_memory_equal(p + ihl + 32, orig + ihl + 20, optlen + datalen);
	assert_memory_equal(p + ihl, orig + ihl, 12);
	assert_memory_equal(p + (v6 ? 8 : 12), orig + (v6 ? 8 : 12), v6 ? 32 : 8);
	/* What the relay reads back, from the whole packet or its headers. */
	assert_int_equal(syntok_find(p, nl, got), SYNTOK_OK);
	assert_memory_equal(got, tok, PROTO_TOKEN_LEN);
	assert_int_equal(syntok_find(p, nl - datalen, got), SYNTOK_OK);
}

static void
insert_v4(void **state)
{
	(void)state;
	check_inserted(0, 20, 0);	/* Linux's SYN */
	check_inserted(0, 0, 0);
	check_inserted(0, 28, 0);	/* the most that leaves room */
	check_inserted(0, 20, 5);	/* with data (TCP Fast Open), odd length */
}

static void
insert_v6(void **state)
{
	(void)state;
	check_inserted(1, 20, 0);
	check_inserted(1, 28, 0);
	check_inserted(1, 8, 3);
}

/* No room: options over 28 bytes, or the buffer too short. The packet is
 * left as it was. */
static void
no_room(void **state)
{
	uint8_t orig[200], p[200];
	size_t len, nl = 0;
	(void)state;

	for (int v6 = 0; v6 < 2; v6++) {
		len = mk_syn(orig, v6, 32, 0);
		memcpy(p, orig, len);
		assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_NO_ROOM);
		assert_memory_equal(p, orig, len);
		len = mk_syn(orig, v6, 40, 0);
		memcpy(p, orig, len);
		assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_NO_ROOM);
		assert_memory_equal(p, orig, len);
		len = mk_syn(orig, v6, 20, 0);
		memcpy(p, orig, len);
		assert_int_equal(syntok_insert(p, len, len + 11, tok, &nl), SYNTOK_NO_ROOM);
		assert_memory_equal(p, orig, len);
		assert_int_equal(syntok_insert(p, len, len + 12, tok, &nl), SYNTOK_OK);
	}
}

static void
refused(void **state)
{
	uint8_t p[200];
	size_t len, nl;
	(void)state;

	/* A SYN-ACK, a truncated packet, a length that disagrees, UDP. */
	len = mk_syn(p, 0, 20, 0);
	p[33] = 0x12;
	assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_MALFORMED);
	len = mk_syn(p, 0, 20, 0);
	assert_int_equal(syntok_insert(p, len - 1, sizeof(p), tok, &nl), SYNTOK_MALFORMED);
	p[9] = IPPROTO_UDP;
	assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_MALFORMED);
	len = mk_syn(p, 1, 20, 0);
	p[6] = 0;	/* hop-by-hop options header */
	assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_MALFORMED);
}

static void
find_absent_and_bad(void **state)
{
	uint8_t p[200], got[PROTO_TOKEN_LEN];
	size_t len, ihl = 20;
	(void)state;

	len = mk_syn(p, 0, 20, 0);
	assert_int_equal(syntok_find(p, len, got), SYNTOK_ABSENT);
	/* Another experiment's kind 253 option (other ExID), then ours. */
	len = mk_syn(p, 0, 24, 0);
	memcpy(p + ihl + 20, (const uint8_t[]){ 253, 4, 0x12, 0x34 }, 4);
	assert_int_equal(syntok_find(p, len, got), SYNTOK_ABSENT);
	/* An option running past the header; a zero length. */
	len = mk_syn(p, 0, 20, 0);
	p[ihl + 20 + 16] = 3;
	p[ihl + 20 + 17] = 9;
	assert_int_equal(syntok_find(p, len, got), SYNTOK_MALFORMED);
	p[ihl + 20 + 17] = 0;
	assert_int_equal(syntok_find(p, len, got), SYNTOK_MALFORMED);
	/* End of list stops the walk. */
	len = mk_syn(p, 0, 20, 0);
	p[ihl + 20] = 0;
	p[ihl + 21] = 253;
	assert_int_equal(syntok_find(p, len, got), SYNTOK_ABSENT);
}

/* Every prefix and every one-byte change of a tokened SYN, from an exact
 * heap copy: no overread (ASan), and a found token is only ever the one
 * written or a changed copy of it. */
static void
prefixes_and_flips(void **state)
{
	uint8_t p[200], got[PROTO_TOKEN_LEN];
	size_t len, nl, n, i;
	(void)state;

	for (int v6 = 0; v6 < 2; v6++) {
		len = mk_syn(p, v6, 20, 0);
		assert_int_equal(syntok_insert(p, len, sizeof(p), tok, &nl), SYNTOK_OK);
		for (n = 0; n <= nl; n++) {
			uint8_t *b = malloc(n ? n : 1);
			memcpy(b, p, n);
			(void)syntok_find(b, n, got);
			free(b);
		}
		for (i = 0; i < nl; i++) {
			for (int bit = 0; bit < 8; bit++) {
				uint8_t *b = malloc(nl + 12);
				size_t l2;
				memcpy(b, p, nl);
				b[i] ^= (uint8_t)(1 << bit);
				(void)syntok_find(b, nl, got);
				(void)syntok_insert(b, nl, nl + 12, tok, &l2);
				free(b);
			}
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(insert_v4),
		cmocka_unit_test(insert_v6),
		cmocka_unit_test(no_room),
		cmocka_unit_test(refused),
		cmocka_unit_test(find_absent_and_bad),
		cmocka_unit_test(prefixes_and_flips),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
