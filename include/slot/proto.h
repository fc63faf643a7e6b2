#ifndef SLOT_PROTO_H
#define SLOT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/ident.h"

/* Wire codec, normative description in docs/protocol.md. Every message:
 *
 *   0  magic "SL" (0x53 0x4c)      2
 *   2  version (2)                 1
 *   3  type                        1
 *   4  length of the whole message 2   big endian, header + body + MAC
 *   6  flags (send 0, ignore)      2
 *   8  timestamp, unix us          8
 *  16  nonce                       8
 *  24  request id                  4
 *  28  sender's Ed25519 public key 32  zero in shared mode
 *  60  body                        fixed size per type
 *  ..  HMAC-SHA256(key, bytes 0 .. length-33)   32
 *
 * The MAC key is the deployment's shared key (shared mode, sender zero) or
 * the pair key of sender and recipient (identity mode, ident_pair_key). A
 * HELLO ends with an Ed25519 signature (64) instead of a MAC: its body is
 * the sender's certificate, and it introduces the sender.
 *
 * An endpoint in a body is 20 bytes: family (4 or 6), 0, port (2), address
 * (16, IPv4 in the first 4 bytes, the rest zero).
 *
 * Header flags are ignored on receipt but for the ones defined for a type:
 * KEEPALIVE's OBSERVE asks a relay that knows pipe tokens to answer with
 * OBSERVED (the address it sees the connection from) instead of
 * KEEPALIVE_ACK; a relay that does not ignores it (docs/protocol.md, "Pipe
 * tokens"). KEEPALIVE's CHAINS asks whether the relay takes
 * PIPE_ESTABLISH_CHAIN; a relay that does sets CHAINS on its answer
 * (KEEPALIVE_ACK or OBSERVED); an older one ignores the question and never
 * claims it. */

#define PROTO_MAGIC0 0x53
#define PROTO_MAGIC1 0x4c
#define PROTO_VERSION 2
#define PROTO_PK_LEN IDENT_PK_LEN
#define PROTO_HDR_LEN (28 + PROTO_PK_LEN)
#define PROTO_EP_LEN 20
#define PROTO_MIN_LEN (PROTO_HDR_LEN + AUTH_MAC_LEN)
#define PROTO_MAX_LEN 512	/* longest accepted; longer is malformed */
/* What a HELLO's signature covers, after this context string. */
#define PROTO_HELLO_CTX "slot-hello/2"
#define PROTO_TOKEN_LEN 8	/* a pipe token (PIPE_ESTABLISH_TOKEN, the SYN's option) */
#define PROTO_FLAG_OBSERVE 0x0001	/* KEEPALIVE: answer OBSERVED if you can */
/* KEEPALIVE: do you take PIPE_ESTABLISH_CHAIN? KEEPALIVE_ACK, OBSERVED: yes. */
#define PROTO_FLAG_CHAINS 0x0002

enum proto_type {
	PROTO_PROBE_REQUEST = 0x01,
	PROTO_PROBE_REPLY = 0x02,
	PROTO_PIPE_ESTABLISH = 0x10,
	PROTO_PIPE_OK = 0x11,
	PROTO_PIPE_FAIL = 0x12,
	PROTO_KEEPALIVE = 0x13,
	PROTO_KEEPALIVE_ACK = 0x14,
	PROTO_OBSERVED = 0x15,		/* KEEPALIVE_ACK with the peer's address */
	PROTO_PIPE_ESTABLISH_TOKEN = 0x16,	/* PIPE_ESTABLISH matched by token */
	PROTO_PIPE_ESTABLISH_CHAIN = 0x17,	/* a pipe through more relays */
	PROTO_ERROR = 0x1f,
	PROTO_HELLO = 0x20,
};

/* PROBE_REPLY status */
enum proto_probe_status {
	PROBE_ST_OK = 0,		/* rtt_us is the relay's RTT to the target */
	PROBE_ST_REFUSED = 1,		/* target answered with RST; rtt_us valid */
	PROBE_ST_UNREACHABLE = 2,	/* ICMP unreachable or local routing error */
	PROBE_ST_TIMEOUT = 3,		/* no answer within the probe timeout */
	PROBE_ST_POLICY = 4,		/* relay will not relay to that address or port */
	PROBE_ST_RATE_LIMITED = 5,	/* requester or target over its rate */
	PROBE_ST_BUSY = 6,		/* too many probes in flight at the relay */
};
#define PROBE_FLAG_CACHED 0x01	/* answer came from the relay's RTT cache */

/* PIPE_FAIL reason */
enum proto_fail_reason {
	FAIL_REFUSED = 1,	/* server answered the connect with RST */
	FAIL_UNREACHABLE = 2,	/* ICMP unreachable, no route */
	FAIL_TIMEOUT = 3,	/* connect timeout */
	FAIL_POLICY_ADDR = 4,	/* destination address not allowed */
	FAIL_POLICY_PORT = 5,	/* destination port not allowed */
	FAIL_LIMIT = 6,		/* relay at its maximum number of pipes */
	FAIL_CLIENT_LIMIT = 7,	/* this client at its maximum pending pipes */
	FAIL_DUPLICATE = 8,	/* a pending pipe with that client endpoint exists */
	FAIL_SHUTTING_DOWN = 9,	/* relay is draining */
	FAIL_INTERNAL = 10,	/* local resource error (descriptors, memory) */
	FAIL_NEXT_HOP = 11,	/* chain: the next relay could not be reached or used */
};

/* PIPE_ESTABLISH_CHAIN: at most this many relays after the one asked. */
#define PROTO_CHAIN_MAX_HOPS 2

/* ERROR code */
enum proto_error_code {
	ERR_MALFORMED = 1,
	ERR_AUTH = 2,
	ERR_STALE = 3,
	ERR_REPLAY = 4,
	ERR_VERSION = 5,
	ERR_TYPE = 6,		/* type not valid on this channel */
};

struct proto_msg {
	uint8_t type;
	uint16_t flags;		/* the type's defined header flags; others read as 0 */
	uint64_t ts_us;
	uint64_t nonce;
	uint32_t id;
	uint8_t sender[PROTO_PK_LEN];	/* all zero in shared mode */
	union {
		struct {
			struct endpoint target;
		} probe_req;
		struct {
			uint8_t status;
			uint8_t flags;
			uint32_t rtt_us;
			uint32_t hold_us;	/* time the relay held the request */
			struct endpoint target;
		} probe_reply;
		struct {
			struct endpoint client;
			struct endpoint server;
			/* PIPE_ESTABLISH_TOKEN only: never all zero */
			uint8_t token[PROTO_TOKEN_LEN];
		} establish;
		struct {
			struct endpoint client;
			struct endpoint server;		/* the final destination */
			/* all zero: none (matched by client endpoint) */
			uint8_t token[PROTO_TOKEN_LEN];
			uint8_t hops;	/* relays after the receiver: 1 or 2 */
			/* control and data endpoints of the next relays;
			 * [1] all zero when hops is 1 */
			struct endpoint hop_ctl[PROTO_CHAIN_MAX_HOPS];
			struct endpoint hop_data[PROTO_CHAIN_MAX_HOPS];
		} chain;
		struct {
			/* the source of the control connection, as the relay
			 * sees it */
			struct endpoint addr;
		} observed;
		struct {
			uint32_t connect_us;	/* relay's connect time to the server */
			uint32_t pending_ms;	/* how long the relay waits for the data connection */
		} ok;
		struct {
			uint8_t reason;
			uint32_t detail;	/* errno at the relay, 0 if none */
		} fail;
		struct {
			uint8_t code;
		} error;
		struct {
			/* Decoded, its signature not checked: the caller
			 * checks it against the CA (ident_cert_check). */
			struct ident_cert cert;
		} hello;
	} u;
};

/* The framing fields of a message, read before its MAC is checked: what a
 * key lookup may use to find the sender's key. Unauthenticated. */
struct proto_hdr {
	uint8_t type;
	uint32_t id;
	const uint8_t *sender;		/* PROTO_PK_LEN bytes */
};

/* The MAC key of a message's sender, or NULL if the sender is not known
 * (the message is then BAD, PERR_SENDER). */
typedef const struct auth_key *(*proto_key_fn)(void *arg, const struct proto_hdr *h);

enum proto_result {
	PROTO_OK = 0,
	PROTO_NEED_MORE = 1,	/* not a whole message yet */
	PROTO_BAD = -1,		/* malformed or not authentic */
};

/* Why a message was BAD. */
enum proto_err {
	PERR_NONE = 0,
	PERR_MAGIC,
	PERR_VERSION,
	PERR_LENGTH,	/* length field out of range or wrong for the type */
	PERR_TYPE,	/* unknown type */
	PERR_BODY,	/* field value invalid (family, reserved bytes, port 0...) */
	PERR_MAC,	/* MAC, or a HELLO's signature, does not verify */
	PERR_SENDER,	/* no key for the sender (unknown, or the wrong mode) */
};

/* Sets m's timestamp (now, wall clock) and a fresh random nonce, as every
 * message sent needs. */
void proto_stamp(struct proto_msg *m);

/* Encodes m into buf and MACs it with key; m->sender goes on the wire as it
 * is (zero in shared mode, this host's public key in identity mode). Returns
 * the message length, or -1 if cap is too small or m holds a value the
 * format cannot carry (unknown type, HELLO, bad family, port 0). */
int proto_encode(const struct proto_msg *m, const struct auth_key *key,
    uint8_t *buf, size_t cap);

/* Encodes a HELLO introducing self: m's timestamp, nonce and id, self's
 * public key as sender, self's certificate as body, and self's signature
 * over header and body (context PROTO_HELLO_CTX). Returns its length or
 * -1 if cap is too small. */
int proto_encode_hello(const struct proto_msg *m, const struct ident *self,
    uint8_t *buf, size_t cap);

/* Decodes the message at the start of buf[0..len). key_fn(arg, header)
 * gives the MAC key of the sender (not called for a HELLO, whose signature
 * is checked with the public key in its sender field, which must be the
 * certificate's). PROTO_OK: *m is filled, the MAC or signature checked,
 * *used is its length. PROTO_NEED_MORE: fewer bytes than the header or its
 * length field says (header fields already read are checked first, so
 * garbage is BAD as early as possible). PROTO_BAD: *why says why; a stream
 * carrying it cannot be resynchronised. Freshness (timestamp, nonce) is the
 * caller's job, with replay_check(); whether the certificate of a HELLO is
 * acceptable is too (ident_cert_check). */
enum proto_result proto_decode_with(const uint8_t *buf, size_t len,
    proto_key_fn key_fn, void *arg, struct proto_msg *m, size_t *used,
    enum proto_err *why);

/* Shared mode: proto_decode_with where every sender must be zero and every
 * MAC is under key. */
enum proto_result proto_decode(const uint8_t *buf, size_t len,
    const struct auth_key *key, struct proto_msg *m, size_t *used,
    enum proto_err *why);

/* One known peer: the key lookup of a connection whose other end has
 * introduced itself (proto_key_pair with arg a struct proto_pair *):
 * messages must come from pk, MACed with key. */
struct proto_pair {
	uint8_t pk[PROTO_PK_LEN];
	struct auth_key key;
};
const struct auth_key *proto_key_pair(void *pair, const struct proto_hdr *h);
/* Shared mode (arg a const struct auth_key *): the sender must be zero. */
const struct auth_key *proto_key_shared(void *key, const struct proto_hdr *h);

/* Expected body length for a type, or -1 if the type is unknown. */
int proto_body_len(uint8_t type);

const char *proto_type_str(uint8_t type);
const char *proto_err_str(enum proto_err e);
const char *proto_fail_str(uint8_t reason);
const char *proto_probe_status_str(uint8_t status);
const char *proto_error_code_str(uint8_t code);

/* The ERROR code that answers a decode failure. */
uint8_t proto_error_for(enum proto_err e);

#endif
