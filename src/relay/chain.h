#ifndef SLOT_RELAY_CHAIN_H
#define SLOT_RELAY_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"
#include "slot/proto.h"
#include "slot/rlink.h"
#include "relay.h"

/* Chains (docs/relay.md "Chains"): this relay as the first or a middle relay
 * of a pipe through more relays. On PIPE_ESTABLISH_CHAIN it checks the hops,
 * then, for the pipe pipe.c creates, asks the next relay for the rest of the
 * chain over an authenticated control link (rlink, shared per next relay,
 * created on demand, closed after [chain] link_idle_timeout unused), with a
 * data socket bound to the link's local address so that its endpoint can be
 * announced. On the next relay's PIPE_OK the data socket connects to it and
 * becomes the pipe's server side (pipe_chain_ready); on a failure the pipe
 * answers PIPE_FAIL (pipe_chain_failed): the next relay's reason as it is,
 * or NEXT_HOP when the next relay could not be reached or used. */

struct chain;
struct pipe;

/* The rest of a chain as a request names it: the relays after this one. */
struct chain_spec {
	unsigned nhops;		/* 1 or PROTO_CHAIN_MAX_HOPS */
	struct rlink_hop hops[PROTO_CHAIN_MAX_HOPS];
};

int chains_init(struct relay *r);
/* After pipes_destroy: no pipe holds a chain any more. */
void chains_destroy(struct relay *r);
/* The revocation list changed: links to revoked relays are dropped. */
void chains_revoke(struct relay *r, const struct ident_revoked *rev);
/* Our identity changed: every link reconnects (pair keys are the old key's). */
void chains_drop_all(struct relay *r, const char *why);
/* Control links to next relays (up or not). */
size_t chains_links(const struct relay *r);

/* The checks of a chain request, in this order (docs/relay.md): chains
 * allowed here, each hop's data address equal to its control address, no
 * hop that is this relay, no relay twice, each hop's address one [policy]
 * takes, and unless [chain] next_hops = any each hop a relay of the
 * directory's listing at its listed data port. 0, or the errno a PIPE_FAIL
 * NEXT_HOP carries (EPERM: chains disabled here; EINVAL: the hops, or a
 * data port not the listed one; EACCES: the policy; ENOENT: a hop not
 * listed, or no listing). */
int chain_check(const struct relay *r, const struct chain_spec *s);
/* Warns of a configuration that refuses every chain (at start and reload). */
void chains_conf_note(const struct relay *r);

/* An authenticated PIPE_ESTABLISH_CHAIN on c: checked, counted, and handed
 * to pipe.c (pipe_establish_chain), or answered PIPE_FAIL. */
void chain_establish(struct relay *r, struct ctrl_conn *c, const struct proto_msg *m);

/* For pipe.c. Starts asking the next relay for pipe p's rest of the chain
 * to server. Returns the chain, or NULL with *err (an errno) when it cannot
 * even start: the pipe then fails NEXT_HOP. The answer comes later through
 * pipe_chain_ready or pipe_chain_failed, never from within this call. */
struct chain *chain_start(struct relay *r, struct pipe *p, const struct chain_spec *s,
    const struct endpoint *server, int *err);
/* The pipe is gone: cancels what is in flight, closes what is not handed
 * over. NULL is fine. */
void chain_free(struct chain *ch);
/* The next relay's control endpoint. */
const struct endpoint *chain_next(const struct chain *ch);
/* "via A > B": the relays after this one, for log lines. */
const char *chain_fmt(const struct chain *ch, char *buf, size_t len);
unsigned chain_nhops(const struct chain *ch);

/* Implemented by pipe.c, called by chain.c only from the event loop. The
 * next relay took the rest of the chain: fd, connecting to its data port,
 * is the pipe's server side (the pipe owns it now). */
void pipe_chain_ready(struct pipe *p, int fd);
/* The chain failed: PIPE_FAIL reason/detail upstream, the pipe closes
 * (and frees its chain). */
void pipe_chain_failed(struct pipe *p, uint8_t reason, uint32_t detail);
/* pipe_establish with the rest of the chain in s (pipe.c). */
void pipe_establish_chain(struct relay *r, struct ctrl_conn *c, uint32_t id,
    const struct endpoint *client, const struct endpoint *server,
    const uint8_t *token, const struct chain_spec *s);

#endif
