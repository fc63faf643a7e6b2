#ifndef SLOT_DIRPROTO_H
#define SLOT_DIRPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/auth.h"
#include "slot/ident.h"

/* Authentication of slot-dird's XML-RPC calls and answers (docs/directory.md
 * is normative). Every call carries, besides its own fields, "ts" (unix
 * microseconds, decimal string) and "nonce" (16 hex digits), and either
 *
 *  - identity mode: "cert" (the caller's certificate, hex) and "sig" (hex):
 *    its Ed25519 signature (ident_sign, context DIRP_CALL_CTX) over
 *      "slot-dird/2\n" method "\n" ts "\n" nonce "\n" body
 *  - shared mode (a lab): "mac" (64 hex digits), HMAC-SHA256 with the
 *    deployment key over
 *      "slot-dird/1\n" method "\n" ts "\n" nonce "\n" body
 *
 * where body is the method's fields in a fixed order, one per line (see
 * docs/directory.md). XML-RPC integers are 32-bit, so 64-bit values travel
 * as decimal strings.
 *
 * In identity mode slot.list's answer is signed by the directory: "cert"
 * (its certificate) and "sig" over dirp_list_text (context DIRP_LIST_CTX).
 */

#define DIRP_TAG "slot-dird/1"
#define DIRP_TAG_IDENT "slot-dird/2"
#define DIRP_CALL_CTX "slot-dird call"
#define DIRP_LIST_CTX "slot-dird listing"
#define DIRP_LIST_MAGIC "slot-listing/1"
#define DIRP_NONCE_HEX 16
#define DIRP_MAC_HEX (2 * AUTH_MAC_LEN)
#define DIRP_SIG_HEX (2 * IDENT_SIG_LEN)
#define DIRP_CERT_HEX (2 * IDENT_CERT_LEN)

/* Fault codes of slot-dird. */
enum dirp_fault {
	DIRP_FAULT_MALFORMED = 1,	/* missing field, wrong type, bad value */
	DIRP_FAULT_AUTH = 2,		/* MAC or signature does not verify, wrong role,
					   revoked, or the endpoint is another key's */
	DIRP_FAULT_STALE = 3,		/* timestamp outside the window, or replayed */
	DIRP_FAULT_UNKNOWN_RELAY = 4,	/* heartbeat or report before register */
	DIRP_FAULT_LIMIT = 5,		/* too many relays, entries, or requests */
	DIRP_FAULT_INTERNAL = 6,
};

/* Writes the MAC (hex, NUL-terminated) over the canonical text. Returns 0,
 * or -1 if the text would exceed the internal bound (64 KiB). */
int dirp_mac(const struct auth_key *key, const char *method, const char *ts,
    const char *nonce, const char *body, char mac_hex[DIRP_MAC_HEX + 1]);

/* Constant-time check of mac_hex. Returns 0 if it verifies, else -1. */
int dirp_verify(const struct auth_key *key, const char *method, const char *ts,
    const char *nonce, const char *body, const char *mac_hex);

/* Identity mode: the caller's signature (hex, NUL-terminated) over the
 * canonical text with DIRP_TAG_IDENT. Returns 0, or -1 as dirp_mac. */
int dirp_sign(const struct ident *id, const char *method, const char *ts,
    const char *nonce, const char *body, char sig_hex[DIRP_SIG_HEX + 1]);

/* Checks sig_hex against the public key pk. Returns 0 if it verifies. */
int dirp_verify_sig(const uint8_t pk[IDENT_PK_LEN], const char *method, const char *ts,
    const char *nonce, const char *body, const char *sig_hex);

/* Fresh ts (now, decimal) and nonce (random hex) for a call. */
void dirp_stamp(char ts[24], char nonce[DIRP_NONCE_HEX + 1]);

/* Parses ts and nonce as a server must: decimal digits only, 16 hex digits.
 * Returns 0 with *ts_us and *nonce set, or -1. */
int dirp_parse_stamp(const char *ts, const char *nonce, uint64_t *ts_us, uint64_t *nonce_v);

/* Exactly 2 * len lowercase or uppercase hex digits into out. Returns 0 or
 * -1. */
int dirp_unhex(const char *hex, uint8_t *out, size_t len);

/* Exactly 16 lowercase hex digits (a nonce, a serial, a boot id: one
 * spelling only) as a number. Returns 0, or -1. */
int dirp_hex64(const char *s, uint64_t *out);

/* Decimal digits only (no sign, no blank), at most max, as a number.
 * Returns 0, or -1. */
int dirp_dec64(const char *s, uint64_t max, uint64_t *out);

/*
 * The signed listing. dirp_list_text builds the canonical text of a
 * slot.list answer from its fields: slot-dird signs it, and the client
 * builds it again from the fields it parsed and checks the signature, so
 * the two cannot disagree about what was signed. The text (docs/directory.md,
 * "Signed answers"):
 *
 *   slot-listing/1
 *   nonce <the call's nonce>
 *   version <version>
 *   changed 0|1
 *   relays <n>
 *   relay <endpoint> <data_port> <group> <certificate hex, or "-">   (n lines)
 *   landmarks <L> <SHA-256 of the rtt bytes, hex>
 *   landmark <index> <weight, %.9g of the float>                     (L lines)
 *   revoked <k>
 *   serial <16 hex digits>                                           (k lines)
 *
 * each line ending in LF. Strings must be one word of printable ASCII (no
 * space or control byte), so the text reads back one way only.
 */
struct dirp_list_relay {
	const char *relay;		/* the endpoint as sent */
	unsigned data_port;
	uint32_t group;
	const uint8_t *cert;		/* IDENT_CERT_LEN bytes; NULL: none */
};

struct dirp_listing {
	const char *nonce;		/* of the call answered */
	const char *version;
	bool changed;
	const struct dirp_list_relay *relay;
	size_t nrelay;
	const uint32_t *land_index;	/* nland each */
	const float *land_weight;
	size_t nland;
	const uint8_t *land_rtt;	/* as sent (little-endian rows) */
	size_t land_rtt_len;
	const uint64_t *revoked;	/* ascending */
	size_t nrevoked;
};

/* The canonical text (malloc'ed, NUL-terminated, *len without the NUL).
 * NULL for a string that is not one printable word, or out of memory. */
char *dirp_list_text(const struct dirp_listing *l, size_t *len);

/* Signs and checks the text (context DIRP_LIST_CTX). */
void dirp_list_sign(const struct ident *id, const char *text, size_t len,
    uint8_t sig[IDENT_SIG_LEN]);
bool dirp_list_verify(const uint8_t pk[IDENT_PK_LEN], const char *text, size_t len,
    const uint8_t sig[IDENT_SIG_LEN]);

/* True if s is one printable word (what dirp_list_text accepts). */
bool dirp_word_ok(const char *s);

#endif
