#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/ctlsrv.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/rng.h"
#include "dirlink.h"
#include "peers.h"
#include "rauth.h"

#define PEER_SAMPLES 3		/* the minimum of the last few filters queueing */
#define SETTLE_EXTRA_S 0.2	/* after the probe timeout, before reporting */

struct peer {
	struct endpoint ep;
	uint32_t sample[PEER_SAMPLES];
	uint8_t nsamples, next;
	bool due, waiting;
	uint32_t id;
	uint64_t sent_us;
	/* Identity mode: the peer's key, learnt from its answer to our HELLO
	 * (sent before the first probe, and again after a lost one: the peer
	 * may have restarted or forgotten us). */
	bool keyed, hello_out;
	struct proto_pair pair;
	uint64_t serial;
};

struct peers {
	struct relay *r;
	int fd[2];		/* IPv4, IPv6; -1 until needed */
	ev_io io[2];
	struct peer *v;		/* sorted by endpoint, each once */
	size_t n;
	struct endpoint self;
	ev_timer tick, round, settle;
	struct rng rng;
	uint32_t next_id;
};

static double
jitter(struct peers *p, double s, double spread)
{
	return s * (1.0 - spread + 2.0 * spread * rng_unit(&p->rng));
}

static void send_probe(struct peers *p, struct peer *x);

static int
peer_cmp(const void *a, const void *b)
{
	return ep_cmp(&((const struct peer *)a)->ep, &((const struct peer *)b)->ep);
}

/* The peer at endpoint from, if any: a binary search, as every reply and a
 * listing of many thousand relays ask. */
static struct peer *
peer_at(struct peers *p, const struct endpoint *from)
{
	struct peer key = { .ep = *from };

	return p->n ? bsearch(&key, p->v, p->n, sizeof(*p->v), peer_cmp) : NULL;
}

/* A peer's answer to our HELLO: a relay of our CA. Then the probe goes. */
static void
hello_answer(struct peers *p, struct peer *x, const struct proto_msg *m)
{
	struct relay *r = p->r;
	char err[256], b[EP_STRLEN];

	if (!x->hello_out || m->id != x->id ||
	    admit_message(r->admit, ADMIT_PROBE, &x->ep.addr, m->ts_us, m->nonce,
	    clock_mono_us(), clock_real_us()) != ADMIT_OK)
		return;
	x->hello_out = false;
	if (rauth_admit(r, m, IDENT_MASK(IDENT_ROLE_RELAY), &x->pair.key, err,
	    sizeof(err)) == -1) {
		r->ctr.hellos_refused++;
		log_warnx("peers: %s refused: %s", ep_fmt(&x->ep, b), err);
		return;
	}
	memcpy(x->pair.pk, m->sender, PROTO_PK_LEN);
	x->serial = m->u.hello.cert.serial;
	x->keyed = true;
	r->ctr.hellos_accepted++;
	send_probe(p, x);
}

static void
reply_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct peers *p = w->data;
	struct relay *r = p->r;
	int fd = w->fd;
	(void)loop;
	(void)revents;

	for (int i = 0; i < 64; i++) {
		uint8_t buf[PROTO_MAX_LEN + 1];
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), 0, (struct sockaddr *)&ss, &len);
		struct endpoint from;
		struct proto_msg m;
		struct peer *x;
		size_t used;
		enum proto_err why;
		enum proto_result res;

		if (n < 0)
			return;
		uint64_t now = clock_mono_us();
		/* Only from a listed peer: its endpoint names the key to check. */
		if (ep_from_sockaddr((struct sockaddr *)&ss, len, &from) == -1 ||
		    (x = peer_at(p, &from)) == NULL)
			continue;
		if (!rauth_identity(r))
			res = proto_decode(buf, (size_t)n, &r->key, &m, &used, &why);
		else if (n > 3 && buf[3] == PROTO_HELLO)
			res = proto_decode_with(buf, (size_t)n, rauth_key_fn, r, &m, &used, &why);
		else if (x->keyed)
			res = proto_decode_with(buf, (size_t)n, proto_key_pair, &x->pair, &m, &used,
			    &why);
		else
			continue;
		if (res != PROTO_OK || used != (size_t)n)
			continue;
		if (m.type == PROTO_HELLO && rauth_identity(r)) {
			hello_answer(p, x, &m);
			continue;
		}
		if (m.type != PROTO_PROBE_REPLY)
			continue;
		uint64_t real = clock_real_us(), skew = r->conf.max_clock_skew_ms * 1000;
		if (m.ts_us + skew < real || m.ts_us > real + skew)
			continue;
		/* Only the answer to the one request outstanding at that peer:
		 * a replayed or forged reply cannot plant an RTT. */
		if (!x->waiting || x->id != m.id)
			continue;
		x->waiting = false;
		uint64_t elapsed = now - x->sent_us;
		if (m.u.probe_reply.hold_us > elapsed)
			continue;
		uint64_t rtt = elapsed - m.u.probe_reply.hold_us;
		x->sample[x->next] = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
		x->next = (uint8_t)((x->next + 1) % PEER_SAMPLES);
		if (x->nsamples < PEER_SAMPLES)
			x->nsamples++;
		r->ctr.peer_probes_answered++;
	}
}

static int
sock_for(struct peers *p, int family)
{
	int i = family == AF_INET6;

	if (p->fd[i] >= 0)
		return p->fd[i];
	p->fd[i] = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->fd[i] < 0)
		return -1;
	ev_io_init(&p->io[i], reply_cb, p->fd[i], EV_READ);
	p->io[i].data = p;
	ev_io_start(p->r->loop, &p->io[i]);
	return p->fd[i];
}

static void
send_probe(struct peers *p, struct peer *x)
{
	struct relay *r = p->r;
	struct proto_msg m = { .type = PROTO_PROBE_REQUEST };
	struct sockaddr_storage ss;
	uint8_t buf[PROTO_MAX_LEN];
	int n, fd;

	x->due = false;
	m.id = x->id = ++p->next_id;
	rauth_stamp(r, &m);
	m.u.probe_req.target = x->ep;
	if ((fd = sock_for(p, x->ep.addr.family)) < 0)
		return;
	if (rauth_identity(r) && !x->keyed) {
		/* Introduce ourselves first; the probe follows the answer. */
		if ((n = rauth_hello(r, m.id, buf, sizeof(buf))) < 0)
			return;
		socklen_t sl = ep_to_sockaddr(&x->ep, &ss);
		if (sendto(fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&ss, sl) == n)
			x->hello_out = true;
		return;
	}
	if ((n = proto_encode(&m, rauth_identity(r) ? &x->pair.key : &r->key, buf,
	    sizeof(buf))) < 0)
		return;
	socklen_t len = ep_to_sockaddr(&x->ep, &ss);
	x->sent_us = clock_mono_us();
	if (sendto(fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&ss, len) == n) {
		x->waiting = true;
		r->ctr.peer_probes_sent++;
	}
}

static uint32_t
best_rtt(const struct peer *x)
{
	uint32_t best = x->sample[0];

	for (unsigned j = 1; j < x->nsamples; j++)
		if (x->sample[j] < best)
			best = x->sample[j];
	return best;
}

static void
report(struct peers *p)
{
	struct dirc_rtt *v = calloc(p->n ? p->n : 1, sizeof(*v));
	size_t k = 0;

	if (v == NULL || p->r->dir == NULL) {
		free(v);
		return;
	}
	for (size_t i = 0; i < p->n; i++) {
		const struct peer *x = &p->v[i];
		if (x->nsamples == 0)
			continue;
		v[k].peer = x->ep;
		v[k++].rtt_us = best_rtt(x);
	}
	if (k > 0 && dirlink_report(p->r->dir, v, k) == -1)
		log_warnx("peers: out of memory for the report");
	free(v);
}

static void
settle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct peers *p = w->data;
	(void)loop;
	(void)revents;

	for (size_t i = 0; i < p->n; i++) {
		if (p->v[i].waiting) {
			p->v[i].waiting = false;
			/* It may have forgotten us: introduce ourselves again. */
			p->v[i].keyed = false;
			p->r->ctr.peer_probes_lost++;
		}
		p->v[i].hello_out = false;
	}
	report(p);
}

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct peers *p = w->data;
	const struct rconf *c = &p->r->conf;
	size_t start = p->n ? (size_t)rng_below(&p->rng, p->n) : 0;
	(void)revents;

	for (size_t k = 0; k < p->n; k++) {
		struct peer *x = &p->v[(start + k) % p->n];
		if (!x->due)
			continue;
		send_probe(p, x);
		/* Half the interval spreads the round; the rate caps it. */
		double gap = (double)c->measure_interval_ms / 2000.0 / (double)p->n;
		if (gap < 1.0 / c->measure_rate)
			gap = 1.0 / c->measure_rate;
		ev_timer_set(w, jitter(p, gap, 0.5), 0.);
		ev_timer_start(loop, w);
		return;
	}
	/* Round done: report once the last answers had their chance. */
	ev_timer_set(&p->settle, (double)c->probe_timeout_ms / 1000.0 + SETTLE_EXTRA_S, 0.);
	ev_timer_start(loop, &p->settle);
}

static void
start_tick(struct peers *p, double delay)
{
	if (!ev_is_active(&p->tick)) {
		ev_timer_set(&p->tick, delay, 0.);
		ev_timer_start(p->r->loop, &p->tick);
	}
}

static void
round_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct peers *p = w->data;
	(void)revents;

	for (size_t i = 0; i < p->n; i++)
		p->v[i].due = true;
	start_tick(p, 0.);
	ev_timer_set(w, jitter(p, (double)p->r->conf.measure_interval_ms / 1000.0, 0.1), 0.);
	ev_timer_start(loop, w);
}

struct peers *
peers_start(struct relay *r)
{
	struct peers *p = calloc(1, sizeof(*p));

	if (p == NULL)
		return NULL;
	p->r = r;
	p->fd[0] = p->fd[1] = -1;
	rng_seed(&p->rng, (uint64_t)arc4random() << 32 | arc4random());
	p->next_id = arc4random();
	ev_timer_init(&p->tick, tick_cb, 0., 0.);
	ev_timer_init(&p->round, round_cb, 0., 0.);
	ev_timer_init(&p->settle, settle_cb, 0., 0.);
	p->tick.data = p->round.data = p->settle.data = p;
	return p;
}

void
peers_set(struct peers *p, const struct endpoint *self, const struct endpoint *eps, size_t n)
{
	struct peer *v = calloc(n ? n : 1, sizeof(*v));
	size_t k = 0;
	bool fresh = false;

	if (v == NULL) {
		log_warnx("peers: out of memory; keeping %zu peers", p->n);
		return;
	}
	p->self = *self;
	/* Sorted, duplicates and ourselves out, then each matched with what
	 * we knew of it: O(n log n) for a listing of n relays. */
	for (size_t i = 0; i < n; i++)
		if (!ep_eq(&eps[i], self))
			v[k++].ep = eps[i];
	qsort(v, k, sizeof(*v), peer_cmp);
	size_t w = 0;
	for (size_t i = 0; i < k; i++) {
		if (w > 0 && ep_eq(&v[w - 1].ep, &v[i].ep))
			continue;
		struct peer *old = peer_at(p, &v[i].ep);
		if (old != NULL) {
			v[w] = *old;
		} else {
			v[w] = (struct peer){ .ep = v[i].ep, .due = true };
			fresh = true;
		}
		w++;
	}
	k = w;
	free(p->v);
	p->v = v;
	p->n = k;
	p->r->ctr.peers = k;
	log_info("peers: %zu other relays listed", k);
	/* New relays are measured soon, so the directory can group them. */
	if (fresh)
		start_tick(p, jitter(p, 0.5, 0.9));
	if (!ev_is_active(&p->round)) {
		ev_timer_set(&p->round, jitter(p, (double)p->r->conf.measure_interval_ms /
		    1000.0, 0.1), 0.);
		ev_timer_start(p->r->loop, &p->round);
	}
}

void
peers_forget_keys(struct peers *p)
{
	for (size_t i = 0; i < p->n; i++) {
		p->v[i].keyed = false;
		auth_key_wipe(&p->v[i].pair.key);
	}
}

size_t
peers_revoke(struct peers *p, const struct ident_revoked *rev)
{
	size_t n = 0;

	for (size_t i = 0; i < p->n; i++)
		if (p->v[i].keyed && ident_revoked_has(rev, p->v[i].serial)) {
			p->v[i].keyed = false;
			auth_key_wipe(&p->v[i].pair.key);
			n++;
		}
	return n;
}

void
peers_stop(struct peers *p)
{
	if (p == NULL)
		return;
	ev_timer_stop(p->r->loop, &p->tick);
	ev_timer_stop(p->r->loop, &p->round);
	ev_timer_stop(p->r->loop, &p->settle);
	for (int i = 0; i < 2; i++)
		if (p->fd[i] >= 0) {
			ev_io_stop(p->r->loop, &p->io[i]);
			close(p->fd[i]);
		}
	free(p->v);
	free(p);
}

void
peers_format(const struct peers *p, struct ctl_out *o)
{
	char b[EP_STRLEN];

	for (size_t i = 0; p && i < p->n; i++) {
		const struct peer *x = &p->v[i];
		if (x->nsamples)
			ctl_printf(o, "%s %u %u\n", ep_fmt(&x->ep, b), best_rtt(x), x->nsamples);
		else
			ctl_printf(o, "%s - 0\n", ep_fmt(&x->ep, b));
	}
}

size_t
peers_count(const struct peers *p)
{
	return p ? p->n : 0;
}

void
peers_get(const struct peers *p, size_t i, struct endpoint *ep, uint32_t *rtt_us,
    unsigned *nsamples)
{
	const struct peer *x = &p->v[i];

	*ep = x->ep;
	*nsamples = x->nsamples;
	*rtt_us = x->nsamples ? best_rtt(x) : 0;
}
