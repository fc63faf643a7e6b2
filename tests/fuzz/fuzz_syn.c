/* The packet parsers of packets from the network: slotd's SYN parser
 * (syn_parse, src/client/synq.c: what NFQUEUE hands over, cut to the copy
 * range), the RTT prober's (synp_parse, synp_parse6, src/core/synprobe.c:
 * what the raw sockets read, an IPv4 packet or an IPv6 TCP segment), and the
 * pipe token's (syntok_find on what TCP_SAVED_SYN gives the relay;
 * syntok_insert, which slotd runs on the queued SYN). The input is the
 * captured bytes; the first byte, taken off, says how much longer the packet
 * was on the wire. */
#include <sys/socket.h>

#include "slot/synprobe.h"
#include "slot/syntok.h"
#include "../../src/client/synq.h"
#include "fuzz.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct syn_info si;
	struct synp_pkt sp;
	static const uint8_t v6a[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 1 };
	static const uint8_t v6b[16] = { 0x20, 0x01, 0x0d, 0xb8, [15] = 2 };
	enum syn_parse r;
	static const uint8_t tok[PROTO_TOKEN_LEN] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	uint8_t got[PROTO_TOKEN_LEN];
	uint8_t *pkt;
	size_t extra, nl;

	if (size < 1)
		return 0;
	extra = data[0];
	data++;
	size--;
	/* An exactly sized copy, so ASan sees a read past the end. */
	pkt = malloc(size ? size : 1);
	FUZZ_CHECK(pkt != NULL);
	memcpy(pkt, data, size);

	r = syn_parse(pkt, size, size + extra, &si);
	(void)syn_parse_str(r);
	if (r == SYN_OK) {
		FUZZ_CHECK(si.src.addr.family == si.dst.addr.family);
		FUZZ_CHECK(si.src.addr.family == AF_INET || si.src.addr.family == AF_INET6);
	}
	if (synp_parse(pkt, size, &sp) != SYNP_PKT_BAD)
		FUZZ_CHECK(size >= 40);
	/* The IPv6 raw socket's segments: the same bytes as a TCP header. */
	if (synp_parse6(pkt, size, v6a, v6b, &sp) != SYNP_PKT_BAD)
		FUZZ_CHECK(size >= 20 && sp.family == AF_INET6);
	(void)syntok_str(syntok_find(pkt, size, got));
	free(pkt);

	/* Inserted, the token is found again where the relay looks. */
	pkt = malloc(size + SYNTOK_OPT_LEN);
	FUZZ_CHECK(pkt != NULL);
	memcpy(pkt, data, size);
	if (syntok_insert(pkt, size, size + SYNTOK_OPT_LEN, tok, &nl) == SYNTOK_OK) {
		FUZZ_CHECK(nl == size + SYNTOK_OPT_LEN);
		FUZZ_CHECK(syntok_find(pkt, nl, got) == SYNTOK_OK);
		FUZZ_CHECK(memcmp(got, tok, PROTO_TOKEN_LEN) == 0);
	}
	free(pkt);
	return 0;
}
