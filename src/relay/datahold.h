#ifndef SLOT_RELAY_DATAHOLD_H
#define SLOT_RELAY_DATAHOLD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <ev.h>

#include "slot/addr.h"
#include "slot/proto.h"
#include "slot/syntok.h"

/* Data connections that matched no pipe, held unread for a while before they
 * are reset. A client with a warm cache connects to the data port as soon as
 * it has sent PIPE_ESTABLISH (cache_early, docs/protocol.md): when that
 * message is lost and retransmitted on the control connection, the data
 * connection arrives first. Held, it joins the pipe the late message makes
 * (pipe.c) instead of being reset.
 *
 * Bounded: at most DATAHOLD_MAX connections, DATAHOLD_PER_ADDR from one
 * address (a full address has its newest refused, so that one source cannot
 * push out the others); past DATAHOLD_MAX the oldest goes. Nothing is read
 * from a held connection: its bytes wait in the kernel. */

#define DATAHOLD_MAX 256
#define DATAHOLD_PER_ADDR 32

struct held {
	TAILQ_ENTRY(held) link;
	int fd;
	struct endpoint peer;
	enum syntok_result tok;	/* what its saved SYN said of a pipe token */
	uint8_t token[PROTO_TOKEN_LEN];	/* tok SYNTOK_OK: the token */
	ev_tstamp until;
};

TAILQ_HEAD(held_list, held);

enum held_end {
	HELD_JOINED,		/* taken by a pipe */
	HELD_EXPIRED,		/* nothing came for it in time: reset */
	HELD_EVICTED,		/* pushed out by a newer one: reset */
	HELD_CLEARED,		/* relay draining or exiting: reset */
};

struct datahold {
	struct ev_loop *loop;
	struct held_list q;	/* oldest first */
	size_t n;
	double hold_s;		/* 0: nothing is held */
	ev_timer timer;		/* the oldest one's deadline */
	/* Called as each held connection leaves but by datahold_take, before
	 * its descriptor is reset and it is freed (counters, log). */
	void (*gone)(void *arg, const struct held *h, enum held_end why);
	void *arg;
};

void datahold_init(struct datahold *dh, struct ev_loop *loop, double hold_s,
    void (*gone)(void *arg, const struct held *h, enum held_end why), void *arg);

/* Changes the hold time for connections held from now on (reload). */
void datahold_set_time(struct datahold *dh, double hold_s);

/* Holds fd (tok: what its saved SYN said; token, if SYNTOK_OK). Returns 0, or -1 when
 * holding is off or the peer's address has its share: the caller resets fd. */
int datahold_add(struct datahold *dh, int fd, const struct endpoint *peer,
    enum syntok_result tok, const uint8_t *token);

/* The oldest held connection for which match(arg, h) is true, out of the
 * hold (the caller owns its fd and frees it with datahold_free), or NULL. */
struct held *datahold_take(struct datahold *dh,
    int (*match)(void *arg, const struct held *h), void *arg);
void datahold_free(struct held *h);

/* Resets every held connection (drain, exit). */
void datahold_clear(struct datahold *dh);

#endif
