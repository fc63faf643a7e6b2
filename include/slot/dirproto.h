#ifndef SLOT_DIRPROTO_H
#define SLOT_DIRPROTO_H

#include <stddef.h>
#include <stdint.h>

#include "slot/auth.h"

/* Authentication of slot-dird's XML-RPC calls (docs/directory.md is
 * normative). Every call carries, besides its own fields, "ts" (unix
 * microseconds, decimal string), "nonce" (16 hex digits) and "mac" (64 hex
 * digits): HMAC-SHA256 with the deployment key over the canonical text
 *
 *   "slot-dird/1\n" method "\n" ts "\n" nonce "\n" body
 *
 * where body is the method's fields in a fixed order, one per line (see
 * docs/directory.md). XML-RPC integers are 32-bit, so 64-bit values travel
 * as decimal strings. */

#define DIRP_TAG "slot-dird/1"
#define DIRP_NONCE_HEX 16
#define DIRP_MAC_HEX (2 * AUTH_MAC_LEN)

/* Fault codes of slot-dird. */
enum dirp_fault {
	DIRP_FAULT_MALFORMED = 1,	/* missing field, wrong type, bad value */
	DIRP_FAULT_AUTH = 2,		/* MAC does not verify */
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

/* Fresh ts (now, decimal) and nonce (random hex) for a call. */
void dirp_stamp(char ts[24], char nonce[DIRP_NONCE_HEX + 1]);

/* Parses ts and nonce as a server must: decimal digits only, 16 hex digits.
 * Returns 0 with *ts_us and *nonce set, or -1. */
int dirp_parse_stamp(const char *ts, const char *nonce, uint64_t *ts_us, uint64_t *nonce_v);

#endif
