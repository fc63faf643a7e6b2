#ifndef SLOT_PEERTAB_H
#define SLOT_PEERTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/proto.h"

/* The peers a host has authenticated (identity mode): public key -> pair
 * key, certificate serial and expiry. A bounded table: beyond its size the
 * least recently used entry goes, so a flood of introductions costs a
 * bounded amount of memory and pushes out only idle peers. Time comes from
 * the caller (unix seconds). */

struct peertab;

struct peertab_entry {
	uint8_t pk[IDENT_PK_LEN];
	struct auth_key key;
	uint64_t serial;
	uint64_t not_after;
	uint8_t role;
	char name[IDENT_NAME_MAX + 1];
};

/* A table of at most max entries (max >= 1). NULL on allocation failure. */
struct peertab *peertab_new(size_t max);
void peertab_free(struct peertab *t);

/* Adds the holder of certificate c with pair key k, or refreshes it, and
 * makes it the most recently used. Returns 0, or -1 (out of memory). */
int peertab_put(struct peertab *t, const struct ident_cert *c, const struct auth_key *k);

/* The entry of pk, made the most recently used; NULL if unknown. An entry
 * whose certificate has expired by now is dropped and not returned. */
const struct peertab_entry *peertab_get(struct peertab *t, const uint8_t pk[IDENT_PK_LEN],
    uint64_t now);

/* Forgets pk. Returns true if it was there. */
bool peertab_remove(struct peertab *t, const uint8_t pk[IDENT_PK_LEN]);

/* Forgets every peer whose serial is in rev. Returns how many went. */
size_t peertab_revoke(struct peertab *t, const struct ident_revoked *rev);

size_t peertab_count(const struct peertab *t);
size_t peertab_evicted(const struct peertab *t);	/* pushed out since creation */

/* A proto_key_fn: arg is a struct peertab_lookup. */
struct peertab_lookup {
	struct peertab *t;
	uint64_t now;
};
const struct auth_key *peertab_key_fn(void *arg, const struct proto_hdr *h);

#endif
