#ifndef SLOT_IDENT_H
#define SLOT_IDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/auth.h"

/*
 * Per-host identities (docs/keys.md is normative). A deployment has one
 * certificate authority, an Ed25519 key pair whose secret half stays with the
 * operator (slot-keygen). Every host has its own Ed25519 key pair and a
 * certificate from the CA that names its role: a client may open pipes, a
 * relay may also register with the directory, a directory may sign relay
 * lists. Every daemon pins the CA's public key.
 *
 * Two hosts that know each other's public keys share a pair key without any
 * exchange (static-static X25519 of the converted keys, hashed with both
 * public keys): the MAC key of every wire message between them. A message
 * MACed with it can be verified by its one recipient only, so messages name
 * their recipient by construction.
 *
 * Certificate, 160 bytes:
 *    0  magic "SLC1"                        4
 *    4  role (1 client, 2 relay, 3 dir)     1
 *    5  zero                                3
 *    8  serial, big endian                  8
 *   16  not before, unix seconds, BE        8
 *   24  not after, unix seconds, BE         8
 *   32  the host's Ed25519 public key      32
 *   64  name, NUL padded                   32
 *   96  CA's Ed25519 signature over "slot-cert/1" NUL and bytes 0..95   64
 */

#define IDENT_PK_LEN 32
#define IDENT_SEED_LEN 32
#define IDENT_SK_LEN 64
#define IDENT_SIG_LEN 64
#define IDENT_NAME_MAX 32
#define IDENT_CERT_LEN 160
#define IDENT_CERT_SIGNED 96	/* bytes the CA signs */

enum ident_role {
	IDENT_ROLE_CLIENT = 1,
	IDENT_ROLE_RELAY = 2,
	IDENT_ROLE_DIRECTORY = 3,
};

/* Role masks for ident_cert_check. */
#define IDENT_MASK(role) (1u << (role))
#define IDENT_ANY_ROLE (IDENT_MASK(IDENT_ROLE_CLIENT) | \
    IDENT_MASK(IDENT_ROLE_RELAY) | IDENT_MASK(IDENT_ROLE_DIRECTORY))

struct ident_cert {
	uint8_t role;
	uint64_t serial;
	uint64_t not_before;
	uint64_t not_after;
	uint8_t pk[IDENT_PK_LEN];
	char name[IDENT_NAME_MAX + 1];
	uint8_t raw[IDENT_CERT_LEN];	/* the bytes as issued */
};

/* A host's own identity: secret key, its certificate, and the pinned CA. */
struct ident {
	uint8_t sk[IDENT_SK_LEN];
	uint8_t xsk[32];		/* the secret key as X25519 */
	struct ident_cert cert;
	uint8_t ca_pk[IDENT_PK_LEN];
};

/* Sorted serials of revoked certificates. */
struct ident_revoked {
	uint64_t *serial;
	size_t n;
};

/* How a daemon authenticates wire messages ([auth] mode). */
enum ident_mode {
	IDENT_MODE_IDENTITY = 0,	/* per-host keys and certificates */
	IDENT_MODE_SHARED = 1,		/* the lab's one pre-shared key */
};
/* "identity", "shared" -> the mode, else -1. */
int ident_mode_parse(const char *s);
const char *ident_mode_str(int mode);

/* Default paths of the identity files: one key and certificate per daemon
 * (a host may run several roles, and a certificate names one), named after
 * the daemon's configuration file; one CA for all. */
#define IDENT_DEFAULT_KEY(d) "/etc/slot/" d ".key"
#define IDENT_DEFAULT_CERT(d) "/etc/slot/" d ".cert"
#define IDENT_DEFAULT_CA "/etc/slot/ca.pub"

const char *ident_role_str(uint8_t role);
/* "client", "relay", "directory" -> role, else 0. */
uint8_t ident_role_parse(const char *s);

/* True if s is a valid certificate name: 1..32 of [A-Za-z0-9._-]. */
bool ident_name_ok(const char *s);

/* A fresh key pair (the seed is what a key file holds). */
void ident_keygen(uint8_t seed[IDENT_SEED_LEN], uint8_t pk[IDENT_PK_LEN]);

/* The public key of a seed. */
void ident_seed_pk(const uint8_t seed[IDENT_SEED_LEN], uint8_t pk[IDENT_PK_LEN]);

/* Issues a certificate signed by the CA's seed. Returns 0, or -1 (reason in
 * err) for a bad role, name or validity. */
int ident_cert_issue(const uint8_t ca_seed[IDENT_SEED_LEN], uint8_t role,
    const char *name, uint64_t serial, uint64_t not_before,
    uint64_t not_after, const uint8_t pk[IDENT_PK_LEN],
    uint8_t raw[IDENT_CERT_LEN], char *err, size_t errlen);

/* Decodes a certificate's fields; the signature is not checked. Returns 0,
 * or -1 for a wrong magic, role, reserved bytes or name. */
int ident_cert_decode(const uint8_t raw[IDENT_CERT_LEN], struct ident_cert *out,
    char *err, size_t errlen);

/* Everything a peer's certificate must pass: the CA's signature, a role in
 * role_mask, now (unix seconds) within its validity, its serial not revoked
 * (rev may be NULL). Returns 0 or -1 (reason in err). */
int ident_cert_check(const struct ident_cert *c, const uint8_t ca_pk[IDENT_PK_LEN],
    unsigned role_mask, uint64_t now, const struct ident_revoked *rev,
    char *err, size_t errlen);

/* The two in one: decode raw and check it. */
int ident_cert_verify(const uint8_t raw[IDENT_CERT_LEN],
    const uint8_t ca_pk[IDENT_PK_LEN], unsigned role_mask, uint64_t now,
    const struct ident_revoked *rev, struct ident_cert *out, char *err,
    size_t errlen);

/* Files. A key file (mode 0600, checked as auth_key_load does) holds
 * "slot-key-1 " and the seed in hex; a certificate file "slot-cert-1 " and
 * the certificate in hex; a CA file "slot-ca-1 " and the CA's public key in
 * hex. Lines starting with '#' and blank lines are ignored. Each returns 0,
 * or -1 with a reason naming the file. */
int ident_seed_load(const char *path, uint8_t seed[IDENT_SEED_LEN], char *err,
    size_t errlen);
int ident_cert_load(const char *path, uint8_t raw[IDENT_CERT_LEN], char *err,
    size_t errlen);
int ident_ca_load(const char *path, uint8_t ca_pk[IDENT_PK_LEN], char *err,
    size_t errlen);

/* Parses the same formats from memory (for tests and the fuzzers). */
int ident_parse_text(const char *text, size_t len, const char *tag,
    uint8_t *out, size_t outlen);

/* Loads a host's identity: its key, its certificate (which must carry the
 * key's public half and pass ident_cert_check for role_mask now) and the CA.
 * Returns 0 or -1 (reason in err). */
int ident_load(const char *key_path, const char *cert_path, const char *ca_path,
    unsigned role_mask, struct ident *out, char *err, size_t errlen);

/* Builds an identity from memory (tests, slot-keygen). */
int ident_from_parts(const uint8_t seed[IDENT_SEED_LEN],
    const uint8_t cert_raw[IDENT_CERT_LEN], const uint8_t ca_pk[IDENT_PK_LEN],
    unsigned role_mask, uint64_t now, struct ident *out, char *err,
    size_t errlen);

void ident_wipe(struct ident *id);

/* The pair key of self and the holder of peer_pk: the same on both sides.
 * Returns 0, or -1 for a public key that is not a valid Ed25519 point (or a
 * degenerate shared secret). */
int ident_pair_key(const struct ident *self, const uint8_t peer_pk[IDENT_PK_LEN],
    struct auth_key *out);

/* Ed25519 signature by self over ctx NUL msg (ctx: a fixed context string
 * naming what is signed, so a signature for one purpose is never valid for
 * another). */
void ident_sign(const struct ident *self, const char *ctx, const void *msg,
    size_t len, uint8_t sig[IDENT_SIG_LEN]);
bool ident_verify(const uint8_t pk[IDENT_PK_LEN], const char *ctx,
    const void *msg, size_t len, const uint8_t sig[IDENT_SIG_LEN]);

/* Revocation lists: text, one serial per line as 16 hex digits (a '#' starts a
 * comment). Returns 0, or -1 with the line at fault in err. */
int ident_revoked_parse(const char *text, size_t len, struct ident_revoked *out,
    char *err, size_t errlen);
int ident_revoked_load(const char *path, struct ident_revoked *out, char *err,
    size_t errlen);
bool ident_revoked_has(const struct ident_revoked *r, uint64_t serial);
/* The same serials. */
bool ident_revoked_equal(const struct ident_revoked *a, const struct ident_revoked *b);
/* *to becomes a copy of *from (to's old contents are not freed). Returns 0,
 * or -1 out of memory with *to empty. */
int ident_revoked_copy(const struct ident_revoked *from, struct ident_revoked *to);
void ident_revoked_free(struct ident_revoked *r);

/* 16 hex digits of a serial, NUL terminated. */
void ident_serial_hex(uint64_t serial, char out[17]);

#endif
