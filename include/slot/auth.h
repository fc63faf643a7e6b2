#ifndef SLOT_AUTH_H
#define SLOT_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The pre-shared deployment key and HMAC-SHA256 over it (libsodium). */

#define AUTH_KEY_LEN 32
#define AUTH_MAC_LEN 32

struct auth_key {
	uint8_t k[AUTH_KEY_LEN];
};

/* Call once before any other auth_ function (sodium_init). Returns 0 or -1. */
int auth_init(void);

/* Parses 64 hex digits, surrounding white space allowed. Returns 0 or -1. */
int auth_key_parse_hex(const char *s, struct auth_key *out);

/* Loads a key file holding 64 hex digits. Refuses (returns -1, reason in err)
 * a file that is not a regular file, is readable or writable by group or
 * others, or does not hold exactly one key. */
int auth_key_load(const char *path, struct auth_key *out, char *err, size_t errlen);

/* Reads a secret file into buf (at most cap bytes; *len == cap means the
 * file may be larger) with the checks of auth_key_load; what names the file
 * in errors ("key file"). On error buf is wiped. */
int auth_read_private(const char *path, const char *what, char *buf, size_t cap,
    size_t *len, char *err, size_t errlen);

/* Writes a fresh random key as hex (65 bytes with the NUL) into hex. */
void auth_key_generate_hex(char hex[2 * AUTH_KEY_LEN + 1]);

void auth_mac(const struct auth_key *key, const void *msg, size_t len,
    uint8_t mac[AUTH_MAC_LEN]);

/* Constant-time check of mac over msg. */
bool auth_verify(const struct auth_key *key, const void *msg, size_t len,
    const uint8_t mac[AUTH_MAC_LEN]);

/* Wipes a key from memory. */
void auth_key_wipe(struct auth_key *key);

#endif
