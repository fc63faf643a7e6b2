#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slot/sock.h"
#include "datahold.h"

static void
arm(struct datahold *dh)
{
	struct held *h = TAILQ_FIRST(&dh->q);
	double in;

	ev_timer_stop(dh->loop, &dh->timer);
	if (h == NULL)
		return;
	in = h->until - ev_now(dh->loop);
	ev_timer_set(&dh->timer, in > 0 ? in : 0., 0.);
	ev_timer_start(dh->loop, &dh->timer);
}

static void
drop(struct datahold *dh, struct held *h, enum held_end why)
{
	TAILQ_REMOVE(&dh->q, h, link);
	dh->n--;
	if (dh->gone)
		dh->gone(dh->arg, h, why);
	sock_close_rst(h->fd);
	free(h);
}

static void
timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct datahold *dh = w->data;
	struct held *h;
	(void)revents;

	while ((h = TAILQ_FIRST(&dh->q)) != NULL && h->until <= ev_now(loop))
		drop(dh, h, HELD_EXPIRED);
	arm(dh);
}

void
datahold_init(struct datahold *dh, struct ev_loop *loop, double hold_s,
    void (*gone)(void *arg, const struct held *h, enum held_end why), void *arg)
{
	dh->loop = loop;
	TAILQ_INIT(&dh->q);
	dh->n = 0;
	dh->hold_s = hold_s;
	dh->gone = gone;
	dh->arg = arg;
	ev_timer_init(&dh->timer, timer_cb, 0., 0.);
	dh->timer.data = dh;
}

void
datahold_set_time(struct datahold *dh, double hold_s)
{
	dh->hold_s = hold_s;
}

int
datahold_add(struct datahold *dh, int fd, const struct endpoint *peer,
    enum syntok_result tok, const uint8_t *token)
{
	struct held *h;
	struct addr src = addr_source(&peer->addr), hs;
	size_t same = 0;

	if (dh->hold_s <= 0)
		return -1;
	TAILQ_FOREACH(h, &dh->q, link) {
		hs = addr_source(&h->peer.addr);
		if (addr_eq(&hs, &src) && ++same >= DATAHOLD_PER_ADDR)
			return -1;
	}
	if ((h = calloc(1, sizeof(*h))) == NULL)
		return -1;
	if (dh->n >= DATAHOLD_MAX)
		drop(dh, TAILQ_FIRST(&dh->q), HELD_EVICTED);
	h->fd = fd;
	h->peer = *peer;
	h->tok = tok;
	if (tok == SYNTOK_OK)
		memcpy(h->token, token, PROTO_TOKEN_LEN);
	/* One hold time for all keeps the queue in deadline order (after a
	 * reload that shortens it, a newer one may wait for the older). */
	h->until = ev_now(dh->loop) + dh->hold_s;
	TAILQ_INSERT_TAIL(&dh->q, h, link);
	dh->n++;
	if (dh->n == 1)
		arm(dh);
	return 0;
}

struct held *
datahold_take(struct datahold *dh, int (*match)(void *arg, const struct held *h), void *arg)
{
	struct held *h;

	TAILQ_FOREACH(h, &dh->q, link) {
		if (!match(arg, h))
			continue;
		TAILQ_REMOVE(&dh->q, h, link);
		dh->n--;
		if (dh->gone)
			dh->gone(dh->arg, h, HELD_JOINED);
		arm(dh);
		return h;
	}
	return NULL;
}

void
datahold_free(struct held *h)
{
	free(h);
}

void
datahold_clear(struct datahold *dh)
{
	struct held *h;

	while ((h = TAILQ_FIRST(&dh->q)) != NULL)
		drop(dh, h, HELD_CLEARED);
	ev_timer_stop(dh->loop, &dh->timer);
}
