#ifndef SLOT_RLINK_H
#define SLOT_RLINK_H

#include <stdbool.h>
#include <stdint.h>

#include <ev.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/proto.h"
#include "slot/replay.h"

/* A persistent, authenticated control connection to one relay
 * (docs/protocol.md, "Control connection"), slotd's to its relays and a
 * relay's to the next relay of a chain: connects with the bypass mark,
 * in identity mode introduces itself with a HELLO and takes the relay's
 * (a relay certificate of our CA, not revoked), proves the key with a
 * KEEPALIVE before calling itself up, carries
 * PIPE_ESTABLISH requests by id, keeps alive, and reconnects with
 * exponential backoff when anything goes wrong. */

enum rlink_state { RL_DOWN = 0, RL_CONNECTING, RL_UP };

/* Shared by every link; owned by the daemon, read on each use so a reload
 * takes effect at once. */
struct rlink_env {
	struct ev_loop *loop;
	const struct auth_key *key;	/* shared mode */
	const struct ident *id;		/* identity mode: ours; NULL: shared mode */
	const struct ident_revoked *revoked;	/* relays refused; NULL: none */
	struct replay *replay;
	uint32_t bypass_mark;
	uint64_t keepalive_interval_ms, keepalive_timeout_ms;
	uint64_t reconnect_min_ms, reconnect_max_ms;
};

struct rlink;

/* The answer to a request: PIPE_OK, PIPE_FAIL or ERROR; NULL if the link
 * went down (or was freed) first. */
typedef void (*rlink_answer_cb)(void *req, const struct proto_msg *m);
/* Up or down. */
typedef void (*rlink_state_cb)(void *user, struct rlink *l, enum rlink_state st);

/* Starts connecting at once. NULL on allocation failure. */
struct rlink *rlink_new(const struct rlink_env *env, const struct endpoint *control,
    rlink_state_cb cb, void *user);
/* Closes; pending requests are answered NULL first. */
void rlink_free(struct rlink *l);

enum rlink_state rlink_state(const struct rlink *l);
const struct endpoint *rlink_endpoint(const struct rlink *l);
/* Consecutive failed connection attempts (0 while up). */
unsigned rlink_failures(const struct rlink *l);
/* The kernel's smoothed RTT of the link while up (keepalives keep it
 * fresh), in microseconds; 0 when down or unknown. */
uint32_t rlink_rtt_us(const struct rlink *l);

/* Identity mode, once the relay's HELLO was accepted: its public key and
 * our pair key (the MAC key of probes to it too); else NULL. */
const struct proto_pair *rlink_pair(const struct rlink *l);
/* The relay's certificate while authenticated (identity mode), else NULL. */
const struct ident_cert *rlink_cert(const struct rlink *l);
/* Drops the connection if the relay's certificate serial is in rev (it
 * reconnects later, and env->revoked decides then). Returns true if so. */
bool rlink_revoke(struct rlink *l, const struct ident_revoked *rev);

/* Drops the connection now (our identity changed); it reconnects later. */
void rlink_drop(struct rlink *l, const char *why);

/* The errno of the link's last failure (ECONNREFUSED, ETIMEDOUT,
 * ECONNRESET; EACCES: the peer is not a relay of our CA; EPROTO: it spoke
 * something else); 0 before any. */
int rlink_error(const struct rlink *l);

/* While connected: the local endpoint of the control connection (the
 * address the relay reaches us at on this path). 0, or -1 if not
 * connected. */
int rlink_local(const struct rlink *l, struct endpoint *out);

/* Requests sent and not answered yet. */
size_t rlink_pending(const struct rlink *l);

/* Sends PIPE_ESTABLISH(client, server) if the link is up; cb(req, answer)
 * comes later, exactly once unless cancelled. Returns the request id (never
 * 0), or 0 if the link is not up or the message could not be queued. */
uint32_t rlink_establish(struct rlink *l, const struct endpoint *client,
    const struct endpoint *server, rlink_answer_cb cb, void *req);
/* The same, matched at the relay by token (PIPE_ESTABLISH_TOKEN): the SYN of
 * the data connection carries it (syntok.h). token: PROTO_TOKEN_LEN bytes,
 * not all zero; NULL: rlink_establish. */
uint32_t rlink_establish_token(struct rlink *l, const struct endpoint *client,
    const struct endpoint *server, const uint8_t *token, rlink_answer_cb cb, void *req);

/* One relay after the one a chain request goes to: its control and data
 * endpoints. */
struct rlink_hop {
	struct endpoint control, data;
};

/* PIPE_ESTABLISH_CHAIN: a pipe through this link's relay and then hops[0..
 * nhops) (1 or PROTO_CHAIN_MAX_HOPS), the last of which connects to server.
 * token: PROTO_TOKEN_LEN bytes matching the data connection's SYN as
 * rlink_establish_token's, or NULL (or all zero): matched by client
 * endpoint. Returns as rlink_establish; 0 also for an nhops out of range. */
uint32_t rlink_establish_chain(struct rlink *l, const struct endpoint *client,
    const struct endpoint *server, const uint8_t *token, const struct rlink_hop *hops,
    unsigned nhops, rlink_answer_cb cb, void *req);

/* While up: the source of our control connection as the relay sees it, if
 * the relay answered our keepalives with OBSERVED (it takes pipe tokens);
 * else NULL (an older relay, or down). */
const struct endpoint *rlink_observed(const struct rlink *l);

/* While up: whether the relay's last answer to our keepalives claimed
 * CHAINS (it takes PIPE_ESTABLISH_CHAIN, as the first or a middle relay of a
 * chain). false when down, before the first answer, and for an older relay,
 * which never claims it (docs/protocol.md, "KEEPALIVE"). */
bool rlink_chains(const struct rlink *l);

/* Forgets request id: its answer, if any comes, is dropped. */
void rlink_cancel(struct rlink *l, uint32_t id);

#endif
