#ifndef SLOT_RELAY_RAUTH_H
#define SLOT_RELAY_RAUTH_H

#include <stdbool.h>

#include "slot/ident.h"
#include "slot/peertab.h"
#include "slot/proto.h"
#include "relay.h"

/* The relay's side of authentication (docs/keys.md): its own identity (or
 * the lab's shared key), the table of peers it has authenticated by their
 * HELLO, and revocation. ctrl.c, probe.c and peers.c ask it for keys. */

/* Peers remembered at once: clients of the control port and other relays. */
#define RAUTH_PEERS_MAX 16384

/* Loads what c's [auth] names into r (the identity, in identity mode) and
 * creates the peer table if needed. The mode is set once, at start (a
 * reload keeps it). On a reload of another identity, every
 * authenticated peer is forgotten (their pair keys were with the old key).
 * Returns 0, or -1 with the reason in err (r unchanged). */
int rauth_load(struct relay *r, const struct rconf *c, char *err, size_t errlen);
void rauth_free(struct relay *r);

static inline bool
rauth_identity(const struct relay *r)
{
	return r->auth_mode == IDENT_MODE_IDENTITY;
}

/* Stamps m (timestamp, nonce) and sets its sender: this relay's public key,
 * or zero in shared mode. */
void rauth_stamp(const struct relay *r, struct proto_msg *m);

/* proto_key_fn for datagrams (arg: the relay): the shared key for a zero
 * sender in shared mode, the pair key of a known peer in identity mode. */
const struct auth_key *rauth_key_fn(void *r, const struct proto_hdr *h);

/* Checks the certificate of a decoded HELLO against the CA, roles (an
 * IDENT_MASK set), its validity now and the revoked serials; then derives
 * the pair key into *key and remembers the peer. Returns 0, or -1 with the
 * reason in err. */
int rauth_admit(struct relay *r, const struct proto_msg *hello, unsigned roles,
    struct auth_key *key, char *err, size_t errlen);

/* Encodes this relay's HELLO answering id. Returns its length or -1. */
int rauth_hello(const struct relay *r, uint32_t id, uint8_t *buf, size_t cap);

/* The revocation hook (fed from the directory's list): remembers rev, so
 * that these certificates are refused from now on, and drops every peer
 * holding one: control connections close, table entries and the RTT
 * probing of such relays go. Returns how many peers (connections and table
 * entries) were dropped, or -1 if rev could not be copied (out of memory;
 * nothing changed). */
int relay_revoke(struct relay *r, const struct ident_revoked *rev);

#endif
