#ifndef SLOT_SYNTOK_H
#define SLOT_SYNTOK_H

#include <stddef.h>
#include <stdint.h>

#include "slot/proto.h"

/* The pipe token in a SYN (docs/protocol.md, "Pipe tokens"): slotd writes
 * it into the hijacked SYN as an experimental TCP option (RFC 6994: kind
 * 253, length 12, ExID 0x534c "SL", then the 8-byte token), which survives
 * NATs that rewrite the source endpoint; the relay reads it back from the
 * SYN the kernel saved for the accepted socket (TCP_SAVED_SYN). Pure: no
 * I/O, no state. */

#define SYNTOK_KIND 253
#define SYNTOK_EXID 0x534c
#define SYNTOK_OPT_LEN (4 + PROTO_TOKEN_LEN)

enum syntok_result {
	SYNTOK_OK = 0,
	SYNTOK_NO_ROOM,		/* the SYN's options leave less than 12 bytes
				 * (or the buffer does) */
	SYNTOK_ABSENT,		/* the SYN carries no token */
	SYNTOK_MALFORMED,	/* not a whole IPv4 or IPv6 TCP SYN header */
};

/* Inserts the token option in front of the TCP options of the IPv4 or IPv6
 * TCP SYN pkt[0..len), of which cap bytes are writable; fixes the IP length
 * (and IPv4 header checksum) and computes the TCP checksum in full (a
 * packet handed back to the kernel from NFQUEUE is taken as checksummed).
 * The packet must be whole (its IP length len), data (TCP Fast Open) and
 * all. On SYNTOK_OK, *newlen is the
 * packet's new length (len + 12); otherwise pkt is unchanged. */
enum syntok_result syntok_insert(uint8_t *pkt, size_t len, size_t cap,
    const uint8_t token[PROTO_TOKEN_LEN], size_t *newlen);

/* Looks for the token option in the headers of a SYN as TCP_SAVED_SYN gives
 * them (network header, then the TCP header with its options). Returns
 * SYNTOK_OK with the token in token, SYNTOK_ABSENT if the SYN carries none,
 * SYNTOK_MALFORMED if the headers do not parse. */
enum syntok_result syntok_find(const uint8_t *hdr, size_t len,
    uint8_t token[PROTO_TOKEN_LEN]);

const char *syntok_str(enum syntok_result r);

#endif
