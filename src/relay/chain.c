/*
 * Chains: this relay as the first or a middle relay of a pipe through more
 * relays (chain.h, docs/relay.md "Chains"). pipe.c keeps the pipe's life
 * cycle; this module owns the links to next relays and the asking.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/log.h"
#include "slot/replay.h"
#include "slot/sock.h"
#include "chain.h"
#include "dirlink.h"
#include "nexthops.h"
#include "pipe.h"
#include "rauth.h"

/* Links answer the next relay's HELLO and keepalives within this; their
 * keepalives keep them well inside a relay's control_idle_timeout. */
#define LINK_KEEPALIVE_MS 30000
#define LINK_RECONNECT_MIN_MS 500
#define LINK_RECONNECT_MAX_MS 30000
/* Every next relay's answers and keepalives share it for twice the clock
 * skew: sized as the control connections' (relayd.c), for the thousands of
 * chain answers a second that relay_control_rate lets next relays send. */
#define LINK_REPLAY_CAPACITY ((size_t)1 << 18)

struct chain_link;
TAILQ_HEAD(chain_list, chain);

enum chain_state {
	CH_WAIT_LINK,	/* the link to the next relay is coming up */
	CH_ASKED,	/* request sent, no answer yet */
	CH_DONE,	/* answered (or failed): the link is no longer needed */
};

struct chain {
	struct relay *r;
	struct pipe *p;
	enum chain_state state;
	struct chain_link *lk;		/* while waiting or asked */
	uint32_t req_id;		/* while asked */
	int fd;				/* the data socket until handed to the pipe */
	int connecting;			/* its connect has been started */
	struct endpoint server;
	struct chain_spec s;
	TAILQ_ENTRY(chain) wlink;	/* lk->waiting, while CH_WAIT_LINK */
};

/* One control link to a next relay, shared by every chain through it. */
struct chain_link {
	struct chains *cs;
	struct endpoint ctl;
	struct rlink *l;
	size_t refs;			/* chains waiting or asked */
	ev_tstamp idle_since;		/* when refs last dropped to 0 */
	struct chain_list waiting;
	TAILQ_ENTRY(chain_link) link;
};
TAILQ_HEAD(link_list, chain_link);

struct chains {
	struct relay *r;
	struct rlink_env env;
	struct replay *replay;
	struct link_list links;
	size_t nlinks;
	ev_timer sweep;
};

static void chain_ask(struct chain *ch);

/* The link environment follows the running configuration and identity
 * (a reload may change either): set before each use. */
static void
env_update(struct chains *cs)
{
	struct relay *r = cs->r;

	cs->env.loop = r->loop;
	cs->env.key = &r->key;
	cs->env.id = rauth_identity(r) ? &r->id : NULL;
	cs->env.revoked = &r->revoked;
	cs->env.replay = cs->replay;
	cs->env.bypass_mark = 0;
	cs->env.keepalive_interval_ms = LINK_KEEPALIVE_MS;
	cs->env.keepalive_timeout_ms = r->conf.connect_timeout_ms;
	cs->env.reconnect_min_ms = LINK_RECONNECT_MIN_MS;
	cs->env.reconnect_max_ms = LINK_RECONNECT_MAX_MS;
	replay_set_window(cs->replay, r->conf.max_clock_skew_ms * 1000);
}

static void
link_free(struct chain_link *lk)
{
	struct chains *cs = lk->cs;

	TAILQ_REMOVE(&cs->links, lk, link);
	cs->nlinks--;
	rlink_free(lk->l);
	free(lk);
}

/* Closes the links nobody used for link_idle_timeout, and those down with
 * no chain on them: a link to an address that is no relay (or no longer
 * answers) would otherwise retry until it idles out. Never from within a
 * link's callback (sweep_soon): only here, in link_get and at exit are
 * links freed. */
static void
sweep_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct chains *cs = w->data;
	struct chain_link *lk, *next;
	double idle = (double)cs->r->conf.chain_link_idle_ms / 1000.;
	char b[EP_STRLEN];
	(void)revents;

	for (lk = TAILQ_FIRST(&cs->links); lk; lk = next) {
		next = TAILQ_NEXT(lk, link);
		if (lk->refs > 0)
			continue;
		if (rlink_state(lk->l) == RL_DOWN) {
			log_info("chain link to %s: down and unused, closed", ep_fmt(&lk->ctl, b));
		} else if (ev_now(loop) - lk->idle_since >= idle) {
			log_info("chain link to %s: unused for %.0f s, closed", ep_fmt(&lk->ctl, b),
			    ev_now(loop) - lk->idle_since);
		} else {
			continue;
		}
		link_free(lk);
	}
	ev_timer_stop(loop, w);
	ev_timer_set(w, idle / 4 < 1. ? 1. : idle / 4, 0.);
	ev_timer_start(loop, w);
}

/* Has the sweep run on the next loop iteration. */
static void
sweep_soon(struct chains *cs)
{
	ev_timer_stop(cs->r->loop, &cs->sweep);
	ev_timer_set(&cs->sweep, 0., 0.);
	ev_timer_start(cs->r->loop, &cs->sweep);
}

int
chains_init(struct relay *r)
{
	struct chains *cs = calloc(1, sizeof(*cs));

	if (cs == NULL)
		return -1;
	if ((cs->replay = replay_new(LINK_REPLAY_CAPACITY,
	    r->conf.max_clock_skew_ms * 1000)) == NULL ||
	    (r->nexthops = nexthops_new()) == NULL) {
		replay_free(cs->replay);
		free(cs);
		return -1;
	}
	cs->r = r;
	TAILQ_INIT(&cs->links);
	env_update(cs);
	ev_timer_init(&cs->sweep, sweep_cb, 1., 0.);
	cs->sweep.data = cs;
	ev_timer_start(r->loop, &cs->sweep);
	r->chains = cs;
	return 0;
}

void
chains_destroy(struct relay *r)
{
	struct chains *cs = r->chains;
	struct chain_link *lk;

	if (cs == NULL)
		return;
	ev_timer_stop(r->loop, &cs->sweep);
	while ((lk = TAILQ_FIRST(&cs->links)) != NULL)
		link_free(lk);
	replay_free(cs->replay);
	free(cs);
	r->chains = NULL;
	nexthops_free(r->nexthops);
	r->nexthops = NULL;
}

void
chains_conf_note(const struct relay *r)
{
	if (r->conf.chain_allow && !r->conf.chain_any_hop && r->conf.dir_urls.n == 0)
		log_warnx("[chain] next_hops = listed and no [directory] urls: no listing "
		    "names the next relays, so every chain request is refused (set "
		    "next_hops = any to take any relay of the CA, at the data port the "
		    "request names)");
}

void
chains_drop_all(struct relay *r, const char *why)
{
	struct chain_link *lk;

	if (r->chains == NULL)
		return;
	TAILQ_FOREACH(lk, &r->chains->links, link)
		rlink_drop(lk->l, why);
	sweep_soon(r->chains);
}

void
chains_revoke(struct relay *r, const struct ident_revoked *rev)
{
	struct chain_link *lk;

	if (r->chains == NULL)
		return;
	TAILQ_FOREACH(lk, &r->chains->links, link)
		(void)rlink_revoke(lk->l, rev);
}

size_t
chains_links(const struct relay *r)
{
	return r->chains ? r->chains->nlinks : 0;
}

/* Whether ep is this relay's own control endpoint: one of its addresses
 * (the interfaces' or [policy] public_address) and its control port. */
static int
is_self(const struct relay *r, const struct endpoint *ep)
{
	return ep->port == r->conf.control_listen.port &&
	    policy_is_self(&r->conf.policy, &ep->addr);
}

int
chain_check(const struct relay *r, const struct chain_spec *s)
{
	unsigned i, j;

	if (!r->conf.chain_allow)
		return EPERM;
	if (s->nhops < 1 || s->nhops > PROTO_CHAIN_MAX_HOPS)
		return EINVAL;
	for (i = 0; i < s->nhops; i++) {
		/* Data goes only to a host that proved to be a relay on its
		 * control port. */
		if (!addr_eq(&s->hops[i].data.addr, &s->hops[i].control.addr))
			return EINVAL;
		if (is_self(r, &s->hops[i].control))
			return EINVAL;
		for (j = 0; j < i; j++)
			if (addr_eq(&s->hops[i].control.addr, &s->hops[j].control.addr))
				return EINVAL;
		/* Where a server could not be, no next relay is either: a
		 * chain must not reach the network behind this relay. */
		if (policy_check_addr(&r->conf.policy, &s->hops[i].control.addr) != POLICY_OK)
			return EACCES;
	}
	if (r->conf.chain_any_hop)
		return 0;
	for (i = 0; i < s->nhops; i++) {
		switch (nexthops_check(r->nexthops, &s->hops[i].control, s->hops[i].data.port)) {
		case NEXTHOP_LISTED:
			break;
		case NEXTHOP_OTHER_PORT:
			return EINVAL;
		case NEXTHOP_UNLISTED:
			return ENOENT;
		}
	}
	return 0;
}

void
chain_establish(struct relay *r, struct ctrl_conn *c, const struct proto_msg *m)
{
	struct chain_spec s = { .nhops = m->u.chain.hops };
	static const uint8_t zero[PROTO_TOKEN_LEN];
	const uint8_t *token = NULL;
	char b[EP_STRLEN], cb[EP_STRLEN], hb[128];
	struct chain tmp;
	int err;

	r->ctr.chains_requested++;
	for (unsigned i = 0; i < s.nhops && i < PROTO_CHAIN_MAX_HOPS; i++) {
		s.hops[i].control = m->u.chain.hop_ctl[i];
		s.hops[i].data = m->u.chain.hop_data[i];
	}
	if (memcmp(m->u.chain.token, zero, PROTO_TOKEN_LEN) != 0)
		token = m->u.chain.token;
	/* A draining relay says so, whatever the chain. */
	if (!r->draining && (err = chain_check(r, &s)) != 0) {
		r->ctr.chains_refused++;
		r->ctr.chains_failed++;
		r->ctr.pipes_failed++;
		tmp.s = s;
		log_info("chain %s -> %s via %s refused: %s", ep_fmt(&m->u.chain.client, cb),
		    ep_fmt(&m->u.chain.server, b), chain_fmt(&tmp, hb, sizeof(hb)),
		    err == EPERM ? "chains disabled ([chain] allow = no)" :
		    err == EACCES ? "a next relay's address refused by [policy] (as a "
		    "server's would be: allow_destinations, deny_destinations)" :
		    err == ENOENT ? (nexthops_have_listing(r->nexthops) ?
		    "a next relay not in the directory's listing ([chain] next_hops = listed)" :
		    "no directory listing yet to find the next relays in ([chain] next_hops "
		    "= listed)") :
		    "invalid hops (a data address not the control address, a data port not "
		    "the one the directory lists, this relay, or a relay twice)");
		ctrl_send_fail(c, m->id, FAIL_NEXT_HOP, (uint32_t)err);
		if (err == ENOENT)
			dirlink_list_soon(r->dir);
		return;
	}
	pipe_establish_chain(r, c, m->id, &m->u.chain.client, &m->u.chain.server, token, &s);
}

/* --- links --- */

static void
chain_release_link(struct chain *ch)
{
	struct chain_link *lk = ch->lk;

	if (lk == NULL)
		return;
	if (ch->state == CH_WAIT_LINK)
		TAILQ_REMOVE(&lk->waiting, ch, wlink);
	if (ch->state == CH_ASKED && ch->req_id != 0)
		rlink_cancel(lk->l, ch->req_id);
	ch->req_id = 0;
	if (--lk->refs == 0) {
		lk->idle_since = ev_now(ch->r->loop);
		/* The link went down under asked chains, answered after it
		 * said so (link_state_cb). */
		if (rlink_state(lk->l) == RL_DOWN)
			sweep_soon(lk->cs);
	}
	ch->lk = NULL;
}

/* The chain ends here with a failure: upstream gets reason/detail. ours:
 * the failure is reaching or using the next relay (NEXT_HOP, counted
 * here); else it is the next relay's answer, passed on unchanged. */
static void
chain_fail(struct chain *ch, bool ours, uint8_t reason, uint32_t detail)
{
	char b[128], nb[EP_STRLEN];

	chain_release_link(ch);
	ch->state = CH_DONE;
	if (ours) {
		ch->r->ctr.chains_next_hop_failed++;
		log_info("chain via %s: next relay %s failed: %s",
		    chain_fmt(ch, b, sizeof(b)), ep_fmt(&ch->s.hops[0].control, nb),
		    strerror((int)detail));
	} else {
		log_info("chain via %s: next relay %s answered PIPE_FAIL %s (detail %u)",
		    chain_fmt(ch, b, sizeof(b)), ep_fmt(&ch->s.hops[0].control, nb),
		    proto_fail_str(reason), detail);
	}
	pipe_chain_failed(ch->p, reason, detail);	/* frees ch */
}

static void
link_state_cb(void *user, struct rlink *l, enum rlink_state st)
{
	struct chain_link *lk = user;
	struct chain *ch;

	if (st == RL_UP) {
		/* Each ask may fail and free its chain: take the head. */
		while ((ch = TAILQ_FIRST(&lk->waiting)) != NULL) {
			TAILQ_REMOVE(&lk->waiting, ch, wlink);
			ch->state = CH_ASKED;
			chain_ask(ch);
		}
		return;
	}
	if (st != RL_DOWN)
		return;
	/* Never came up (asked chains hear it through their answer). */
	while ((ch = TAILQ_FIRST(&lk->waiting)) != NULL) {
		int err = rlink_error(l);
		TAILQ_REMOVE(&lk->waiting, ch, wlink);
		ch->state = CH_ASKED;	/* out of the waiting list, nothing to cancel */
		chain_fail(ch, true, FAIL_NEXT_HOP, (uint32_t)(err ? err : ECONNREFUSED));
	}
	if (lk->refs == 0)
		sweep_soon(lk->cs);
}

/* At [chain] max_links: closes the link unused the longest, if one is. */
static int
link_evict(struct chains *cs)
{
	struct chain_link *lk, *old = NULL;
	char b[EP_STRLEN];

	TAILQ_FOREACH(lk, &cs->links, link)
		if (lk->refs == 0 && (old == NULL || lk->idle_since < old->idle_since))
			old = lk;
	if (old == NULL)
		return -1;
	log_info("chain link to %s: closed for a new one ([chain] max_links %zu)",
	    ep_fmt(&old->ctl, b), (size_t)cs->r->conf.chain_max_links);
	link_free(old);
	return 0;
}

/* The link to ctl, up or coming up: an existing one, or a new one. A link
 * that is down (its last attempt failed, or the next relay dropped it) is
 * replaced by a fresh attempt rather than waiting out its backoff. NULL
 * with *err if it cannot even start. */
static struct chain_link *
link_get(struct chains *cs, const struct endpoint *ctl, int *err)
{
	struct chain_link *lk;

	TAILQ_FOREACH(lk, &cs->links, link)
		if (ep_eq(&lk->ctl, ctl))
			break;
	if (lk && rlink_state(lk->l) == RL_DOWN && lk->refs == 0) {
		link_free(lk);
		lk = NULL;
	}
	if (lk)
		return lk;
	if (cs->nlinks >= cs->r->conf.chain_max_links && link_evict(cs) == -1) {
		*err = EMFILE;
		return NULL;
	}
	if ((lk = calloc(1, sizeof(*lk))) == NULL) {
		*err = ENOMEM;
		return NULL;
	}
	lk->cs = cs;
	lk->ctl = *ctl;
	TAILQ_INIT(&lk->waiting);
	lk->idle_since = ev_now(cs->r->loop);
	TAILQ_INSERT_TAIL(&cs->links, lk, link);
	cs->nlinks++;
	env_update(cs);
	if ((lk->l = rlink_new(&cs->env, ctl, link_state_cb, lk)) == NULL) {
		TAILQ_REMOVE(&cs->links, lk, link);
		cs->nlinks--;
		free(lk);
		*err = ENOMEM;
		return NULL;
	}
	if (rlink_state(lk->l) == RL_DOWN) {
		/* Failed at once (no route): nothing waits on it yet. */
		*err = rlink_error(lk->l) ? rlink_error(lk->l) : ECONNREFUSED;
		link_free(lk);
		return NULL;
	}
	return lk;
}

/* --- asking --- */

/* Starts the data connection to the next relay, once. 0, or an errno. */
static int
chain_connect(struct chain *ch)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char b[EP_STRLEN];

	if (ch->connecting)
		return 0;
	len = ep_to_sockaddr(&ch->s.hops[0].data, &ss);
	if (connect(ch->fd, (struct sockaddr *)&ss, len) == -1 && errno != EINPROGRESS) {
		int err = errno;
		log_info("chain: data connection to %s: %s", ep_fmt(&ch->s.hops[0].data, b),
		    strerror(err));
		return err;
	}
	ch->connecting = 1;
	return 0;
}

static void
answer_cb(void *req, const struct proto_msg *m)
{
	struct chain *ch = req;
	int err, fd;

	ch->req_id = 0;
	if (m == NULL) {
		err = rlink_error(ch->lk->l);
		chain_fail(ch, true, FAIL_NEXT_HOP, (uint32_t)(err ? err : ECONNRESET));
		return;
	}
	switch (m->type) {
	case PROTO_PIPE_OK:
		chain_release_link(ch);
		ch->state = CH_DONE;
		/* The next relay's pipe is pending now; our data connection
		 * went with the request (chain_send). Its result is the
		 * pipe's to see, as a connect to a server would be
		 * (pipe_chain_ready). */
		if ((err = chain_connect(ch)) != 0) {
			chain_fail(ch, true, FAIL_NEXT_HOP, (uint32_t)err);
			return;
		}
		fd = ch->fd;
		ch->fd = -1;
		pipe_chain_ready(ch->p, fd);
		return;
	case PROTO_PIPE_FAIL:
		/* The next relay's reason, unchanged: about the server, or
		 * about a relay further on. */
		chain_fail(ch, false, m->u.fail.reason, m->u.fail.detail);
		return;
	default:	/* ERROR */
		chain_fail(ch, true, FAIL_NEXT_HOP, EPROTO);
		return;
	}
}

/* Binds the data socket where the link leaves from, so that its endpoint,
 * announced to the next relay, is the one the data connection comes from;
 * then sends the request. 0, or an errno. */
static int
chain_send(struct chain *ch)
{
	struct rlink *l = ch->lk->l;
	struct endpoint me;
	struct sockaddr_storage ss;
	socklen_t len;
	uint32_t id;

	if (rlink_local(l, &me) == -1)
		return ENOTCONN;
	me.port = 0;
	if (ch->fd < 0) {
		if ((ch->fd = socket(me.addr.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
		    0)) == -1)
			return errno;
		len = ep_to_sockaddr(&me, &ss);
		if (bind(ch->fd, (struct sockaddr *)&ss, len) == -1)
			return errno;
	}
	if (sock_local_ep(ch->fd, &me) == -1)
		return errno;
	if (ch->s.nhops == 1)
		id = rlink_establish(l, &me, &ch->server, answer_cb, ch);
	else
		id = rlink_establish_chain(l, &me, &ch->server, NULL, ch->s.hops + 1,
		    ch->s.nhops - 1, answer_cb, ch);
	if (id == 0)
		return ENOBUFS;
	ch->req_id = id;
	ch->state = CH_ASKED;
	/* The data connection goes right behind the request, as a client
	 * with a warm cache does (cache_early): its handshake overlaps the
	 * next relay's connect, where waiting for PIPE_OK cost one more
	 * round trip between the relays. The next relay joins it to the
	 * pipe while connecting, or holds it if it overtook the request
	 * (data_hold). A failure here is seen at PIPE_OK, as before. */
	(void)chain_connect(ch);
	return 0;
}

/* From the link's state callback: the link is up. */
static void
chain_ask(struct chain *ch)
{
	int err;

	if ((err = chain_send(ch)) != 0)
		chain_fail(ch, true, FAIL_NEXT_HOP, (uint32_t)err);
}

struct chain *
chain_start(struct relay *r, struct pipe *p, const struct chain_spec *s,
    const struct endpoint *server, int *err)
{
	struct chain *ch;
	struct chain_link *lk;

	if ((ch = calloc(1, sizeof(*ch))) == NULL) {
		*err = ENOMEM;
		return NULL;
	}
	ch->r = r;
	ch->p = p;
	ch->fd = -1;
	ch->server = *server;
	ch->s = *s;
	if ((lk = link_get(r->chains, &s->hops[0].control, err)) == NULL) {
		free(ch);
		return NULL;
	}
	ch->lk = lk;
	lk->refs++;
	if (rlink_state(lk->l) != RL_UP) {
		ch->state = CH_WAIT_LINK;
		TAILQ_INSERT_TAIL(&lk->waiting, ch, wlink);
		return ch;
	}
	if ((*err = chain_send(ch)) != 0) {
		ch->state = CH_DONE;	/* nothing asked: chain_free releases */
		chain_free(ch);
		return NULL;
	}
	return ch;
}

void
chain_free(struct chain *ch)
{
	if (ch == NULL)
		return;
	chain_release_link(ch);
	if (ch->fd >= 0)
		close(ch->fd);
	free(ch);
}

const struct endpoint *
chain_next(const struct chain *ch)
{
	return &ch->s.hops[0].control;
}

unsigned
chain_nhops(const struct chain *ch)
{
	return ch->s.nhops;
}

const char *
chain_fmt(const struct chain *ch, char *buf, size_t len)
{
	char a[EP_STRLEN], b[EP_STRLEN];

	if (ch->s.nhops > 1)
		snprintf(buf, len, "%s > %s", ep_fmt(&ch->s.hops[0].control, a),
		    ep_fmt(&ch->s.hops[1].control, b));
	else
		snprintf(buf, len, "%s", ep_fmt(&ch->s.hops[0].control, a));
	return buf;
}
