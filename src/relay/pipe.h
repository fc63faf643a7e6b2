#ifndef SLOT_RELAY_PIPE_H
#define SLOT_RELAY_PIPE_H

#include <stdint.h>

#include "slot/addr.h"
#include "relay.h"

/* Pipes: one client connection joined to one server connection.
 *
 * Life of a pipe: CONNECTING (PIPE_ESTABLISH received, connect to the server
 * in progress) -> PENDING (PIPE_OK sent, waiting on the data port for the
 * client's connection from the announced endpoint) -> OPEN (splicing both
 * ways) -> closed. pipe_close() is the one place a pipe ends: it stops the
 * watchers, closes both sockets (with RST when the pipe was reset), updates
 * the counters, logs one line and frees it. */

/* Answers to a control connection, implemented by ctrl.c. */
void ctrl_send_ok(struct ctrl_conn *c, uint32_t id, uint32_t connect_us,
    uint32_t pending_ms);
void ctrl_send_fail(struct ctrl_conn *c, uint32_t id, uint8_t reason,
    uint32_t detail);
/* Address of the control connection's peer (for per-client limits). */
const struct addr *ctrl_peer_addr(const struct ctrl_conn *c);
/* Whether the peer authenticated with a relay certificate (identity mode):
 * it asks for the chains of all its clients. */
int ctrl_peer_is_relay(const struct ctrl_conn *c);

int pipes_init(struct relay *r);
void pipes_destroy(struct relay *r);	/* resets every pipe */

/* An authenticated PIPE_ESTABLISH on c (token: NULL, or PIPE_ESTABLISH_TOKEN's
 * PROTO_TOKEN_LEN bytes, which the data connection's SYN then carries). The answer (PIPE_OK or PIPE_FAIL)
 * goes back through ctrl_send_*, now or when the connect finishes. */
void pipe_establish(struct relay *r, struct ctrl_conn *c, uint32_t id,
    const struct endpoint *client, const struct endpoint *server,
    const uint8_t *token);

/* A connection accepted on the data port from peer: joined to its pending
 * pipe (by the token in its saved SYN if it has one, else by peer), or
 * reset. Takes ownership of fd. */
void pipe_accept_data(struct relay *r, int fd, const struct endpoint *peer);

/* Control connection c is closing: pipes still connecting for it are
 * cancelled (nobody would learn their answer); pending ones stay. */
void pipe_ctrl_gone(struct relay *r, struct ctrl_conn *c);

/* Drain deadline or exit: reset every pipe. */
void pipe_reset_all(struct relay *r);

/* What the control socket shows of one pipe ("pipes"). */
struct pipe_view {
	uint64_t id;
	const char *state;	/* connecting, pending, open, half-closed (one side
				 * sent EOF: the other direction still flows) */
	struct endpoint client, server;
	double age_s;		/* since PIPE_ESTABLISH; once open, since joined */
	double idle_s;		/* open: since bytes last moved; else 0 */
	unsigned long long to_server, to_client;	/* bytes written each way */
	struct endpoint next;	/* a chain's next relay (control); family 0: direct */
	unsigned hops;		/* relays after this one: 0 direct, 1 or 2 */
};

/* Calls fn for every pipe, oldest first. fn must not touch the pipes. */
void pipes_view(struct relay *r, void (*fn)(void *arg, const struct pipe_view *v),
    void *arg);

#endif
