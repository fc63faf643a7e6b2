#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/netfilter/nf_conntrack_common.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/proto.h"
#include "slot/select.h"
#include "slot/sock.h"
#include "slot/synprobe.h"
#include "slot/syntok.h"
#include "conntrack.h"
#include "rank.h"
#include "hold.h"
#include "libsrv.h"
#include "relays.h"
#include "rulesync.h"

/* A decided entry answers retransmissions of its SYN this long: Linux
 * retransmits a SYN after 1, 3, 7, 15, 31 and 63 s by default. */
#define LINGER_US (70ull * 1000000)
#define LINGER_MAX 65536
#define LINGER_TICK 1.
/* A refused port is remembered this long at most (cache_ttl if shorter):
 * long enough to spare the relay a burst of retries, short enough for a
 * service that is starting to be relayed soon. */
#define REFUSAL_TTL_US (30ull * 1000000)

struct hprobe {
	struct hnode node;	/* in d->probes by id */
	uint32_t id;
	struct hconn *c;
	uint32_t idx;		/* in c->cand */
	uint64_t sent_us;	/* when it left, monotonic: RTT(client, relay) counts
				 * from here, not from the first probe */
	bool answered;
};

enum hstate { HC_PROBING, HC_ESTABLISHING, HC_LINGER };

struct hconn {
	struct slotd *d;
	struct hnode node;		/* in d->conns by client endpoint */
	struct endpoint client, server;
	uint32_t seq;			/* ISN of the SYN */
	uint32_t pkt_id, pkt_mark;
	uint8_t pkt[SYNQ_COPY_RANGE];	/* the SYN, if whole (pktlen > 0): for a token */
	uint16_t pktlen;
	enum hstate state;
	uint64_t t0_us;			/* the SYN's arrival, monotonic */
	ev_timer timer;			/* decision wake-up, or establish deadline */
	ev_timer hold;			/* hold_timeout */

	/* probing */
	struct synp_probe *dsp;		/* the direct probe: a bare SYN, or... */
	int dfd;			/* ...a connect (IPv6, no raw socket) */
	ev_io dio;
	uint64_t dstart_us;
	enum sel_direct direct;
	uint32_t rtt_direct_us;
	struct crelay **cand;		/* probed relays (NULL once gone) */
	struct hprobe *pr;
	size_t ncand;
	struct sel_reply *rep;
	size_t nrep;
	struct sel_due *due;		/* room for ncand: replies due with a lead-in */
	uint32_t nprobes;		/* relay probes sent */
	uint64_t selected_us;		/* when the path was chosen, monotonic */
	struct endpoint beside;		/* the relay in the server's prefix whose
					 * landmark led the probes; family 0: none */

	/* establishing */
	struct crelay *via;
	/* A chain (docs/slotd.md, "Chains of relays"): the relays after via,
	 * in path order (PIPE_ESTABLISH_CHAIN), the last one the relay probed;
	 * nnext 0: via alone. A relay that leaves the set ends the chain. */
	struct crelay *next[PROTO_CHAIN_MAX_HOPS];
	unsigned nnext;
	uint32_t req_id;
	uint32_t path_rtt_us;
	const char *why;
	bool cached;
	bool repair;
	bool early;			/* released before the relay's answer (cache_early) */
	/* synack_hold: the SYN went to the relay with PIPE_ESTABLISH; the
	 * relay's SYN-ACK waits here for PIPE_OK instead */
	bool syn_out;
	bool synack_held;
	uint32_t synack_id;		/* its queue id, while held */

	/* offered by its program (libslot), with these wishes; NULL: none */
	struct lib_opts *lib;

	/* The SYN reuses a reset direct connection's conntrack entry, which
	 * binds it to no NAT: towards a relay it must be a new connection. */
	bool ct_reused;

	/* through a NAT: the relay matches the pipe by this token in the SYN */
	bool tokened;
	uint8_t token[PROTO_TOKEN_LEN];

	/* lingering */
	bool relayed;
	uint32_t mark;
	uint64_t linger_until_us;

	TAILQ_ENTRY(hconn) link;	/* d->held or d->linger */
};

static ev_timer linger_timer;

static uint64_t
id_hash(uint32_t id)
{
	return (uint64_t)id * 0x9e3779b97f4a7c15ull;
}

static struct hconn *
conn_find(struct slotd *d, const struct endpoint *client)
{
	uint64_t h = ep_hash(client, d->hkey);

	for (struct hnode *n = htab_first(&d->conns, h); n; n = htab_next(n, h)) {
		struct hconn *c = container_of(n, struct hconn, node);
		if (ep_eq(&c->client, client))
			return c;
	}
	return NULL;
}

static void
conn_stop_probing(struct hconn *c)
{
	struct slotd *d = c->d;

	if (c->dfd >= 0) {
		ev_io_stop(d->loop, &c->dio);
		sock_close_rst(c->dfd);	/* a FIN would complete its handshake */
		c->dfd = -1;
	}
	synp_cancel(d->synp, c->dsp);
	c->dsp = NULL;
	for (size_t i = 0; i < c->ncand; i++)
		if (c->pr[i].c)
			htab_remove(&d->probes, &c->pr[i].node);
	free(c->cand);
	free(c->pr);
	free(c->rep);
	free(c->due);
	c->cand = NULL;
	c->pr = NULL;
	c->rep = NULL;
	c->due = NULL;
	c->ncand = c->nrep = 0;
}

static void
conn_free(struct hconn *c)
{
	struct slotd *d = c->d;

	conn_stop_probing(c);
	ev_timer_stop(d->loop, &c->timer);
	ev_timer_stop(d->loop, &c->hold);
	if ((c->state == HC_ESTABLISHING || c->early) && c->req_id && c->via && c->via->link)
		rlink_cancel(c->via->link, c->req_id);
	htab_remove(&d->conns, &c->node);
	if (c->state == HC_LINGER) {
		TAILQ_REMOVE(&d->linger, c, link);
		d->nlinger--;
	} else {
		TAILQ_REMOVE(&d->held, c, link);
		d->nheld--;
	}
	free(c->lib);
	free(c);
}

static void
record(struct slotd *d, const struct hconn *c, uint64_t now)
{
	struct decision *x = &d->recent[d->recent_next];

	memset(x, 0, sizeof(*x));
	x->client = c->client;
	x->server = c->server;
	x->relayed = c->relayed;
	if (c->relayed && c->via) {
		x->relay = c->via->conf.control;
		for (unsigned i = 0; i < c->nnext; i++)
			if (c->next[i])
				x->next[x->nnext++] = c->next[i]->conf.control;
	}
	x->why = c->why ? c->why : "";
	x->rtt_direct_us = c->direct == SEL_DIRECT_OK ? c->rtt_direct_us : 0;
	x->path_rtt_us = c->path_rtt_us;
	x->decide_us = now - c->t0_us;
	x->select_us = (c->selected_us ? c->selected_us : now) - c->t0_us;
	x->probes = c->nprobes;
	x->cached = c->cached;
	x->early = c->early;
	x->beside = c->beside;
	d->recent_next = (d->recent_next + 1) % RECENT_MAX;
	if (d->nrecent < RECENT_MAX)
		d->nrecent++;
	if (x->decide_us > d->ctr.decide_us_max)
		d->ctr.decide_us_max = x->decide_us;
}

/* Accepts the SYN pkt[0..len) (or its retransmission) towards the relay
 * with mark, carrying c's token. */
static void
verdict_tokened(struct slotd *d, const struct hconn *c, uint32_t id, uint32_t mark,
    const uint8_t *pkt, size_t len)
{
	uint8_t buf[SYNQ_PKT_MAX];
	size_t nl;

	if (len > 0 && len <= SYNQ_COPY_RANGE) {
		memcpy(buf, pkt, len);
		if (syntok_insert(buf, len, sizeof(buf), c->token, &nl) == SYNTOK_OK) {
			synq_verdict_pkt(d->q, id, mark, buf, nl);
			return;
		}
	}
	/* Cannot happen for the SYN itself (checked in establish); a
	 * retransmission that changed shape goes without: the relay's
	 * fallback by address may still join it, else it resets it. */
	synq_verdict(d->q, id, true, true, mark);
}

/* Deletes the conntrack entry of client -> server (ENOENT: gone already).
 * Returns false, logged with what follows (`then`) and counted, when it
 * could not. */
static bool
forget_ct(struct slotd *d, const struct endpoint *client, const struct endpoint *server,
    const char *then)
{
	char cb[EP_STRLEN], sb[EP_STRLEN];

	if (d->ct != NULL && (conntrack_delete(d->ct, client, server) == 0 || errno == ENOENT))
		return true;
	d->ctr.ct_delete_errors++;
	log_warnx("%s -> %s: cannot forget the connection's conntrack entry (%s): %s",
	    ep_fmt(client, cb), ep_fmt(server, sb),
	    d->ct ? strerror(errno) : "no conntrack socket", then);
	return false;
}

/* The SYN goes to relay via: marked for its DNAT rule, with c's token. A
 * SYN that reuses a direct connection's entry would go straight to the
 * server whatever its mark (NAT is bound when an entry is made): the entry
 * is deleted and the SYN dropped, and the application's retransmission (1 s),
 * a new connection, takes the relay (hold_packet, syn_out). */
static void
syn_to_relay(struct hconn *c, struct crelay *via)
{
	struct slotd *d = c->d;
	char cb[EP_STRLEN], sb[EP_STRLEN];

	c->mark = (c->pkt_mark & ~d->conf.relay_mask) | via->mark;
	if (c->ct_reused) {
		c->ct_reused = false;
		if (forget_ct(d, &c->client, &c->server,
		    "the SYN goes direct whatever the verdict (10 s at most)")) {
			d->ctr.reused_ct_drops++;
			synq_verdict(d->q, c->pkt_id, false, false, 0);
			log_info("%s -> %s: the port reuses a reset direct connection's conntrack "
			    "entry: entry forgotten, SYN dropped (its retransmission takes the relay)",
			    ep_fmt(&c->client, cb), ep_fmt(&c->server, sb));
			return;
		}
	}
	if (c->tokened)
		verdict_tokened(d, c, c->pkt_id, c->mark, c->pkt, c->pktlen);
	else
		synq_verdict(d->q, c->pkt_id, true, true, c->mark);
}

/* The end of a wait at the SYN-ACK (synack_hold): on PIPE_OK the held
 * SYN-ACK goes on and connect() returns. Otherwise it is dropped and the
 * connection's conntrack entry forgotten, so that the application's next
 * SYN is a new connection, which the rules queue again and the linger
 * entry sends direct: the failure costs the application one SYN timeout
 * (1 s) instead of the connection. */
static void
synack_settle(struct hconn *c, bool ok)
{
	struct slotd *d = c->d;

	if (c->synack_held)
		synq_verdict(d->q, c->synack_id, ok, false, 0);
	c->synack_held = false;
	if (ok)
		return;
	d->ctr.synack_failures++;
	(void)forget_ct(d, &c->client, &c->server,
	    "its next SYN goes to the relay, which resets it");
}

/* "R1 > R2 > R3": via and the chain's next relays, for log lines. */
static const char *
path_fmt(const struct hconn *c, const struct crelay *via, char *buf, size_t len)
{
	char rb[EP_STRLEN];
	size_t n;

	snprintf(buf, len, "%s", via ? ep_fmt(&via->conf.control, rb) : "a relay that left");
	for (unsigned i = 0; i < c->nnext; i++) {
		n = strlen(buf);
		snprintf(buf + n, len - n, " > %s", c->next[i] ?
		    ep_fmt(&c->next[i]->conf.control, rb) : "a relay that left");
	}
	return buf;
}

/* The verdict: the SYN goes on, through relay via (marked) or direct. */
static void
conn_release(struct hconn *c, struct crelay *via, const char *why)
{
	struct slotd *d = c->d;
	uint64_t now = clock_mono_us();
	char cb[EP_STRLEN], sb[EP_STRLEN], rb[3 * EP_STRLEN + 8];

	if (c->state == HC_ESTABLISHING && c->req_id != 0 && c->via && c->via->link)
		rlink_cancel(c->via->link, c->req_id);
	c->req_id = 0;
	c->relayed = via != NULL;
	c->via = via;
	c->why = why;
	if (c->syn_out)
		synack_settle(c, via != NULL);
	if (via) {
		if (!c->syn_out)
			syn_to_relay(c, via);
		d->ctr.decisions_relay++;
		char direct[48];
		if (c->direct == SEL_DIRECT_OK)
			snprintf(direct, sizeof(direct), "%.1f ms", c->rtt_direct_us / 1000.);
		else if (c->cached)
			snprintf(direct, sizeof(direct), "not probed");
		else
			snprintf(direct, sizeof(direct), "unknown, > %.1f ms",
			    (c->selected_us - c->t0_us) / 1000.);
		log_info("%s -> %s: via %s%s (path %.1f ms, direct %s; %s)",
		    ep_fmt(&c->client, cb), ep_fmt(&c->server, sb),
		    path_fmt(c, via, rb, sizeof(rb)), c->tokened ? " with a token" : "",
		    c->path_rtt_us / 1000., direct, why);
	} else {
		if (!c->syn_out)
			synq_verdict(d->q, c->pkt_id, true, false, 0);
		d->ctr.decisions_direct++;
		log_debug("%s -> %s: direct (%s)", ep_fmt(&c->client, cb),
		    ep_fmt(&c->server, sb), why);
	}
	record(d, c, now);
	conn_stop_probing(c);
	ev_timer_stop(d->loop, &c->timer);
	ev_timer_stop(d->loop, &c->hold);
	free(c->lib);		/* wishes for the verdict only */
	c->lib = NULL;
	TAILQ_REMOVE(&d->held, c, link);
	d->nheld--;
	c->state = HC_LINGER;
	c->linger_until_us = now + LINGER_US;
	TAILQ_INSERT_TAIL(&d->linger, c, link);
	d->nlinger++;
	while (d->nlinger > LINGER_MAX)
		conn_free(TAILQ_FIRST(&d->linger));
}

/* The key of the server's address (every port). */
static struct endpoint
addr_key(const struct hconn *c)
{
	struct endpoint k = c->server;

	k.port = 0;
	return k;
}

static bool
cache_on(const struct slotd *d)
{
	return d->cache != NULL && d->conf.cache_ttl_ms > 0;
}

/* A selection's outcome, for every port of the server: through via, or
 * direct (NULL). Not one a program narrowed (a forced or avoided relay):
 * that choice is its own, not everybody's. */
static void
cache_decision(struct slotd *d, const struct hconn *c, struct crelay *via)
{
	struct selc_entry e = { .choice = via ? SELC_RELAY : SELC_DIRECT, .why = SELC_SELECTED };
	struct endpoint k = addr_key(c);

	if (!cache_on(d) || (c->lib && (c->lib->has_relay || c->lib->navoid > 0)))
		return;
	if (via) {
		e.relay = via->conf.control;
		/* A chain is cached whole: a hit takes the same relays. */
		for (unsigned i = 0; i < c->nnext; i++) {
			if (c->next[i] == NULL)
				return;
			e.next[e.nnext++] = c->next[i]->conf.control;
		}
	}
	e.path_rtt_us = via ? c->path_rtt_us : c->rtt_direct_us;
	(void)selc_put(d->cache, &k, &e, clock_mono_us(), d->conf.cache_ttl_ms * 1000);
}

/* What one port said: it goes direct for ttl_us (at most cache_ttl); the
 * address's other ports keep their entry. */
static void
cache_port(struct slotd *d, const struct hconn *c, enum selc_why why, uint64_t ttl_us)
{
	struct selc_entry e = { .choice = SELC_DIRECT, .why = why };

	if (!cache_on(d) || c->server.port == 0)
		return;
	if (ttl_us > d->conf.cache_ttl_ms * 1000)
		ttl_us = d->conf.cache_ttl_ms * 1000;
	(void)selc_put(d->cache, &c->server, &e, clock_mono_us(), ttl_us);
}

/* Forgets the address's entry if it still goes through via. */
static void
cache_forget(struct slotd *d, const struct hconn *c, const struct crelay *via)
{
	struct endpoint k = addr_key(c);

	if (d->cache && via)
		(void)selc_invalidate(d->cache, &k, &via->conf.control);
}

/* PIPE_OK through via: a cold decision is cached (only one that worked),
 * and the port counts as reached, which lets later hits go early. A hit's
 * PIPE_OK leaves the entry's lifetime alone: the choice is made again after
 * cache_ttl, as the paper's DNS TTL would have it. */
static void
learn_ok(struct slotd *d, const struct hconn *c, struct crelay *via)
{
	if (!c->cached)
		cache_decision(d, c, via);
	/* The entry's path (via alone, or the chain from via) reached it; a
	 * path the program forced may not be the entry's. */
	if (cache_on(d) && !(c->lib && c->lib->has_relay))
		(void)selc_mark_reached(d->cache, &c->server, &via->conf.control,
		    clock_mono_us());
}

/* What a failed PIPE_ESTABLISH says, and about what (docs/slotd.md, "What
 * the cache learns"): m is the answer, NULL if the link went down; via is
 * NULL once the relay left the set. Returns the reason, for the log and
 * the decision (static text). */
static const char *
learn_failure(struct slotd *d, const struct hconn *c, struct crelay *via,
    const struct proto_msg *m)
{
	uint8_t r = m && m->type == PROTO_PIPE_FAIL ? m->u.fail.reason : 0;
	const char *why, *then;
	char cb[EP_STRLEN], sb[EP_STRLEN], rb[3 * EP_STRLEN + 8];

	switch (r) {
	case FAIL_NEXT_HOP:
		/* A relay of the chain could not reach or use the next one:
		 * nothing about the server, nor about via itself. */
		why = "PIPE_FAIL: a relay of the chain could not reach the next one";
		then = "the cache is unchanged";
		break;
	case FAIL_REFUSED:
		/* The server answered, for this port only: the host is up and
		 * its other ports are relayed as before. */
		cache_port(d, c, SELC_REFUSED, REFUSAL_TTL_US);
		why = "PIPE_FAIL: the server refused the port";
		then = "this port goes direct for a while";
		break;
	case FAIL_POLICY_PORT:
		cache_port(d, c, SELC_POLICY_PORT, d->conf.cache_ttl_ms * 1000);
		why = "PIPE_FAIL: the relay's policy refuses the port";
		then = "this port goes direct";
		break;
	case FAIL_UNREACHABLE:
	case FAIL_TIMEOUT:
	case FAIL_POLICY_ADDR:
		/* The address, through this relay: choose again next time.
		 * The direct path may well work, but caching "direct" would
		 * be a guess. */
		cache_forget(d, c, via);
		why = r == FAIL_UNREACHABLE ? "PIPE_FAIL: server unreachable from the relay" :
		    r == FAIL_TIMEOUT ? "PIPE_FAIL: the relay's connect timed out" :
		    "PIPE_FAIL: the relay's policy refuses the address";
		then = "the server's choice is made again";
		break;
	case FAIL_CLIENT_LIMIT:
	case FAIL_DUPLICATE:
		/* This client's own burst, which clears as its pending pipes
		 * join: nothing learned about the server or the relay. */
		why = r == FAIL_CLIENT_LIMIT ?
		    "PIPE_FAIL: this client's pending pipes at the relay's limit" :
		    "PIPE_FAIL: a pending pipe with this client endpoint";
		then = "the cache is unchanged";
		break;
	default:
		/* The relay's own trouble (at its limits, draining, internal
		 * error, ERROR, lost link): it sits out for a while. */
		why = r == FAIL_LIMIT ? "PIPE_FAIL: the relay is at its pipe limit" :
		    r == FAIL_SHUTTING_DOWN ? "PIPE_FAIL: the relay is draining" :
		    r != 0 ? "PIPE_FAIL: the relay's internal error" :
		    m ? "relay answered ERROR" : "relay link lost";
		cache_forget(d, c, via);
		/* Through a chain the answer may be any relay's: via is not
		 * to blame for it. */
		if (via && c->nnext == 0) {
			relay_quarantine(d, via, why);
			then = "the relay sits out";
		} else
			then = "the cache is unchanged";
		break;
	}
	log_info("%s -> %s: via %s: %s%s; %s", ep_fmt(&c->client, cb), ep_fmt(&c->server, sb),
	    path_fmt(c, via, rb, sizeof(rb)),
	    why, c->early ? " (early: the relay resets the connection)" : "", then);
	return why;
}

static void establish_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents);

/* The answer to an early PIPE_ESTABLISH, after the verdict: the relay
 * resets the connection itself if it failed; we only learn from it. */
static void
early_answer(struct hconn *c, const struct proto_msg *m)
{
	struct slotd *d = c->d;
	struct crelay *via = c->via;	/* NULL once the relay left the set */

	c->req_id = 0;
	if (m && m->type == PROTO_PIPE_OK) {
		d->ctr.pipes_ok++;
		if (via) {
			via->pipes_ok++;
			learn_ok(d, c, via);
		}
		return;
	}
	d->ctr.pipes_failed++;
	d->ctr.early_failures++;
	if (via)
		via->pipes_failed++;
	(void)learn_failure(d, c, via, m);
}

/* The relay's answer to PIPE_ESTABLISH (NULL: its link went down). */
static void
establish_answer(void *req, const struct proto_msg *m)
{
	struct hconn *c = req;
	struct slotd *d = c->d;
	struct crelay *via = c->via;

	if (c->state != HC_ESTABLISHING) {
		if (c->early && c->req_id)
			early_answer(c, m);
		return;
	}
	c->req_id = 0;
	if (m && m->type == PROTO_PIPE_OK) {
		d->ctr.pipes_ok++;
		via->pipes_ok++;
		learn_ok(d, c, via);
		conn_release(c, via, c->why);
		return;
	}
	d->ctr.pipes_failed++;
	via->pipes_failed++;
	conn_release(c, NULL, learn_failure(d, c, via, m));
}

/* Whether the pipe through via is matched by a token ([nat] mode): auto
 * when via sees our control connection from another address than the
 * SYN's source (a NAT between, or a gateway's LAN host). */
static bool
want_token(struct slotd *d, const struct hconn *c, const struct crelay *via)
{
	const struct endpoint *obs;

	if (d->conf.nat_mode == CCONF_NAT_OFF || via->link == NULL)
		return false;
	if ((obs = rlink_observed(via->link)) == NULL) {
		/* A relay that takes no tokens: by endpoint, as before. */
		if (d->conf.nat_mode == CCONF_NAT_ON)
			d->ctr.token_unsupported++;
		return false;
	}
	return d->conf.nat_mode == CCONF_NAT_ON || !addr_eq(&obs->addr, &c->client.addr);
}

/* A fresh token, and room for it in the SYN. Returns false if there is
 * none (options full, or the SYN not whole in the queue: TCP Fast Open). */
static bool
token_new(struct hconn *c)
{
	uint8_t buf[SYNQ_PKT_MAX];
	size_t nl;

	do
		arc4random_buf(c->token, sizeof(c->token));
	while (c->token[0] == 0 && memcmp(c->token, c->token + 1, sizeof(c->token) - 1) == 0);
	if (c->pktlen == 0)
		return false;
	memcpy(buf, c->pkt, c->pktlen);
	return syntok_insert(buf, c->pktlen, sizeof(buf), c->token, &nl) == SYNTOK_OK;
}

/* synack_hold: a connection that waits for PIPE_OK sends its SYN now, with
 * PIPE_ESTABLISH, and waits at the relay's SYN-ACK instead (hold_synack):
 * connect() still returns only once the relay has connected to the server,
 * one client-relay round trip sooner. Off when slotd has no conntrack
 * socket to undo it with (d->ct), and then the rules queue no SYN-ACK, and
 * until a rule set that queues them is in the kernel. */
static void
synack_wait(struct hconn *c)
{
	struct slotd *d = c->d;

	if (!d->conf.synack_hold || d->ct == NULL || d->synack_gen == 0 ||
	    (d->rsync != NULL && rsync_installed(d->rsync) < d->synack_gen) ||
	    c->state != HC_ESTABLISHING || c->syn_out || c->early)
		return;
	syn_to_relay(c, c->via);
	c->syn_out = true;
	d->ctr.synack_waits++;
}

/* PIPE_ESTABLISH(_TOKEN) to via, or PIPE_ESTABLISH_CHAIN through via and
 * c->next: each next relay's control endpoint and its data endpoint (the
 * same address, its data port). Returns the request id, or 0. */
static uint32_t
send_establish(struct hconn *c, struct crelay *via)
{
	struct rlink_hop hops[PROTO_CHAIN_MAX_HOPS];
	const uint8_t *tok = c->tokened ? c->token : NULL;

	if (c->nnext == 0)
		return rlink_establish_token(via->link, &c->client, &c->server, tok,
		    establish_answer, c);
	if (c->nnext > PROTO_CHAIN_MAX_HOPS)
		return 0;
	for (unsigned i = 0; i < c->nnext; i++) {
		if (c->next[i] == NULL)
			return 0;
		hops[i].control = c->next[i]->conf.control;
		hops[i].data = c->next[i]->conf.control;
		hops[i].data.port = c->next[i]->conf.data_port;
	}
	return rlink_establish_chain(via->link, &c->client, &c->server, tok, hops, c->nnext,
	    establish_answer, c);
}

static void
establish(struct hconn *c, struct crelay *via, uint32_t path_rtt_us, const char *why)
{
	struct slotd *d = c->d;

	conn_stop_probing(c);
	ev_timer_stop(d->loop, &c->timer);
	if ((c->tokened = want_token(d, c, via)) && !token_new(c)) {
		/* The relay could not match the connection: direct. */
		d->ctr.token_no_room++;
		c->tokened = false;
		conn_release(c, NULL, "no room for the pipe token in the SYN");
		return;
	}
	c->via = via;
	c->path_rtt_us = path_rtt_us;
	c->why = why;
	c->selected_us = clock_mono_us();
	c->state = HC_ESTABLISHING;
	if (via->link == NULL || (c->req_id = send_establish(c, via)) == 0) {
		c->req_id = 0;
		conn_release(c, NULL, c->nnext > 0 && via->link && rlink_state(via->link) == RL_UP ?
		    "a relay of the chain left the set" : "relay link not up");
		return;
	}
	if (c->tokened)
		d->ctr.token_pipes++;
	/* Each relay of a chain may take its own connect time: the answer
	 * about the server comes from the last one. */
	ev_timer_init(&c->timer, establish_timeout_cb,
	    (double)d->conf.establish_timeout_ms * (1 + c->nnext) / 1000., 0.);
	c->timer.data = c;
	ev_timer_start(d->loop, &c->timer);
	/* A hit may still go early (hold_start), and then does not wait. */
	if (!c->cached)
		synack_wait(c);
}

static void
establish_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct hconn *c = w->data;
	struct slotd *d = c->d;
	(void)loop;
	(void)revents;

	d->ctr.pipes_timeout++;
	cache_forget(d, c, c->via);
	/* Through a chain, any of its relays may be the slow one. */
	if (c->nnext == 0)
		relay_quarantine(d, c->via, "PIPE_ESTABLISH not answered in time");
	conn_release(c, NULL, "PIPE_ESTABLISH timed out");
}

static void decide_timer_cb(struct ev_loop *loop, ev_timer *w, int revents);
static bool lead_usable(const struct slotd *d, const struct hconn *c, const struct crelay *r,
    unsigned len, uint64_t now);
static void reply_leads(const struct slotd *d, const struct hconn *c, struct sel_reply *r,
    uint64_t now);

/* Runs the selection on what has come in so far. */
static void
evaluate(struct hconn *c)
{
	struct slotd *d = c->d;
	struct sel_state s = {
		.direct = c->direct,
		.rtt_direct_us = c->rtt_direct_us,
		.replies = c->rep,
		.nreplies = c->nrep,
		.nprobed = c->ncand,
	};
	struct sel_result res;
	uint64_t now = clock_mono_us();

	s.now_us = now - c->t0_us;
	/* The lead-ins as they are now: the ranking (every 10 s) may have
	 * moved them, and a relay of one may have become unusable since its
	 * reply, which must then be judged alone, against the direct path. */
	for (size_t i = 0; i < c->nrep; i++)
		reply_leads(d, c, &c->rep[i], now);
	/* The relays still due that may end a chain, with the RTT the
	 * ranking took for them: their chain is at least max(lead, t - cr). */
	for (size_t i = 0; c->due && i < c->ncand; i++)
		if (!c->pr[i].answered && c->cand[i] && c->cand[i]->lead_us)
			c->due[s.ndue++] = (struct sel_due){ c->cand[i]->lead_us,
			    c->cand[i]->rtt_est_us };	/* lead_us <= lead1_us */
	s.due = c->due;
	sel_decide(&d->conf.sel, &s, &res);
	switch (res.verdict) {
	case SEL_WAIT: {
		double after = res.wake_us > s.now_us ? (res.wake_us - s.now_us) / 1e6 : 0.;
		ev_timer_stop(d->loop, &c->timer);
		ev_timer_init(&c->timer, decide_timer_cb, after, 0.);
		c->timer.data = c;
		ev_timer_start(d->loop, &c->timer);
		return;
	}
	case SEL_GO_DIRECT:
		/* Only a measured direct path is worth remembering; a
		 * refusal is about its port alone. */
		if (c->direct == SEL_DIRECT_OK)
			cache_decision(d, c, NULL);
		else if (c->direct == SEL_DIRECT_REFUSED)
			cache_port(d, c, SELC_REFUSED, REFUSAL_TTL_US);
		conn_release(c, NULL, res.why);
		return;
	case SEL_GO_RELAY: {
		struct crelay *via = res.relay < c->ncand ? c->cand[res.relay] : NULL;
		if (via == NULL) {
			conn_release(c, NULL, "chosen relay left the set");
			return;
		}
		/* A chain: the client's SYN goes to the lead-in's first relay;
		 * the one probed comes last. */
		c->nnext = 0;
		/* The replies' lead-ins were checked just now (reply_leads). */
		if (res.chain && !lead_usable(d, c, via, res.chain, now)) {
			conn_release(c, NULL, "chosen chain's lead-in unusable");
			return;
		}
		if (res.chain == 2) {
			c->next[c->nnext++] = via;
			via = via->lead1_via;
		} else if (res.chain == 3) {
			struct crelay *last = via;

			via = last->lead_via[0];
			for (unsigned i = 1; i < last->nlead; i++)
				c->next[c->nnext++] = last->lead_via[i];
			c->next[c->nnext++] = last;
		}
		if (res.chain)
			d->ctr.decisions_chain++;
		/* A repair proper: the direct path failed, or stayed silent
		 * until repair_timeout. Otherwise the relay won before the
		 * direct probe answered, whatever it turns out to be. */
		if (c->direct == SEL_DIRECT_FAILED || (c->direct == SEL_DIRECT_PENDING &&
		    now - c->t0_us >= d->conf.sel.repair_timeout_us)) {
			c->repair = true;
			d->ctr.repairs++;
		} else if (c->direct == SEL_DIRECT_PENDING) {
			d->ctr.relay_before_direct++;
		}
		establish(c, via, res.path_rtt_us, res.why);
		return;
	}
	}
}

static void probe_read(struct slotd *d, int fd);

static void
decide_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct hconn *c = w->data;
	struct slotd *d = c->d;
	(void)loop;
	(void)revents;

	/* Answers that arrived before the deadline count, even when slotd was
	 * too busy to read them: read them first (each may decide c). */
	for (int i = 0; i < 2; i++)
		if (d->probe_fd[i] >= 0)
			probe_read(d, d->probe_fd[i]);
	if (c->state == HC_PROBING)
		evaluate(c);
}

static void
hold_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct hconn *c = w->data;
	(void)loop;
	(void)revents;

	c->d->ctr.hold_timeouts++;
	conn_release(c, NULL, c->lib && c->lib->deadline_ms &&
	    c->lib->deadline_ms < c->d->conf.hold_timeout_ms ? "the application's deadline" :
	    "hold_timeout");
}

static void
direct_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct hconn *c = w->data;
	int err = sock_connect_result(c->dfd);
	(void)revents;

	ev_io_stop(loop, &c->dio);
	if (err == 0) {
		c->direct = SEL_DIRECT_OK;
		c->rtt_direct_us = (uint32_t)(clock_mono_us() - c->dstart_us);
		if (c->rtt_direct_us == 0)
			c->rtt_direct_us = 1;
		/* The server keeps no state for a probe. */
		sock_close_rst(c->dfd);
	} else {
		c->direct = err == ECONNREFUSED ? SEL_DIRECT_REFUSED : SEL_DIRECT_FAILED;
		close(c->dfd);
	}
	c->dfd = -1;
	evaluate(c);
}

/* The direct SYN's answer. An inexact RTT (maybe a server's SYN-ACK
 * retransmission, 1 s or more) is still the best known: it may only make
 * the direct path look worse, which a relay must then beat. */
static void
direct_syn_cb(void *arg, enum synp_status st, uint32_t rtt_us, bool exact)
{
	struct hconn *c = arg;
	(void)exact;

	c->dsp = NULL;		/* already freed */
	if (st == SYNP_OPEN) {
		c->direct = SEL_DIRECT_OK;
		c->rtt_direct_us = rtt_us ? rtt_us : 1;
	} else {
		c->direct = SEL_DIRECT_REFUSED;
	}
	evaluate(c);
}

/* Starts the direct probe. A bare SYN when it can, else a connect reset
 * before its handshake's last ACK: the server's application sees neither.
 * Returns 0, or -1 with errno set for a local shortage. */
static int
direct_start(struct slotd *d, struct hconn *c)
{
	if (synp_has_family(d->synp, c->server.addr.family)) {
		if ((c->dsp = synp_start(d->synp, &c->server, direct_syn_cb, c)) != NULL)
			return 0;
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			return -1;
		/* No ICMP is read on this path: unreachable shows here or
		 * as silence. */
		c->direct = SEL_DIRECT_FAILED;
		return 0;
	}
	d->ctr.direct_probes_connect++;
	/* Its handshake stays unacknowledged: reset, the server's application
	 * never sees it. */
	if ((c->dfd = sock_connect_unacked(&c->server, d->conf.bypass_mark)) == -1) {
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			return -1;
		c->direct = errno == ECONNREFUSED ? SEL_DIRECT_REFUSED : SEL_DIRECT_FAILED;
		return 0;
	}
	ev_io_init(&c->dio, direct_cb, c->dfd, EV_WRITE);
	c->dio.data = c;
	ev_io_start(d->loop, &c->dio);
	return 0;
}

static void
probe_send(struct slotd *d, struct hconn *c, size_t i)
{
	struct crelay *r = c->cand[i];
	struct proto_msg m = { .type = PROTO_PROBE_REQUEST };
	struct sockaddr_storage ss;
	uint8_t buf[PROTO_MAX_LEN];
	socklen_t sl;
	int n, fd;

	const struct proto_pair *pair = NULL;

	fd = d->probe_fd[r->conf.control.addr.family == AF_INET6];
	if (++d->next_probe_id == 0)
		d->next_probe_id = 1;
	m.id = d->next_probe_id;
	proto_stamp(&m);
	m.u.probe_req.target = c->server;
	c->pr[i].id = m.id;
	c->pr[i].c = c;
	c->pr[i].idx = (uint32_t)i;
	htab_insert(&d->probes, &c->pr[i].node, id_hash(m.id));
	/* Identity mode: MACed for this relay alone, with the pair key of
	 * its control link (only relays whose link is up are probed). */
	if (d->env.id != NULL) {
		if (r->link == NULL || (pair = rlink_pair(r->link)) == NULL)
			return;
		memcpy(m.sender, d->id.cert.pk, PROTO_PK_LEN);
	}
	if (fd < 0 || (n = proto_encode(&m, pair ? &pair->key : &d->key, buf,
	    sizeof(buf))) < 0)
		return;		/* counts as a relay that never answers */
	sl = ep_to_sockaddr(&r->conf.control, &ss);
	c->pr[i].sent_us = clock_mono_us();
	if (sendto(fd, buf, (size_t)n, MSG_DONTWAIT, (struct sockaddr *)&ss, sl) == n) {
		d->ctr.probes_sent++;
		c->nprobes++;
		r->probes++;
	}
}

/* A server in a relay's prefix: the first half of the probes go by that
 * relay's landmark (rank_beside), then the ranking as usual. */
static void
beside_first(struct slotd *d, struct hconn *c, struct sel_candidate *cands)
{
	size_t h = ((size_t)d->conf.sel.k + 1) / 2, nb, b;
	uint32_t *first = calloc(h, sizeof(*first));

	if (first == NULL || (nb = rank_beside(d, &c->server.addr, h, first, &b)) == 0) {
		free(first);
		return;
	}
	for (size_t i = 0; i < d->nrelays; i++)
		if (cands[i].rank != SEL_NO_RANK)
			cands[i].rank += (uint32_t)nb;
	for (size_t x = 0; x < nb; x++)
		cands[first[x]].rank = (uint32_t)x;
	c->beside = d->relays[b]->conf.control;
	d->ctr.probes_beside++;
	free(first);
}

/* Probes all at once: the direct path, and one relay per sampled group. */
static void
start_probing(struct slotd *d, struct hconn *c)
{
	uint64_t now = clock_mono_us();
	struct sel_candidate *cands = NULL;
	uint32_t *idx = NULL;
	size_t n = d->nrelays, k = 0, same = 0;

	if (n > 0) {
		cands = calloc(n, sizeof(*cands));
		idx = calloc(n, sizeof(*idx));
		if (cands == NULL || idx == NULL)
			goto oom;
		for (size_t i = 0; i < n; i++) {
			cands[i].group = d->relays[i]->conf.group;
			cands[i].usable = relay_usable(d, d->relays[i], now) &&
			    !lib_opts_avoids(c->lib, &d->relays[i]->conf.control);
			cands[i].rank = d->relays[i]->rank;
			/* The data endpoint is the control address's. */
			cands[i].family = d->relays[i]->conf.control.addr.family;
		}
		same = sel_keep_family(cands, n, c->server.addr.family);
		if (d->conf.sel.strategy == SEL_COVER)
			beside_first(d, c, cands);
		if (sel_sample(&d->conf.sel, cands, n, &d->rng, idx, &k) == -1)
			goto oom;
	}
	if (k == 0) {
		free(cands);
		free(idx);
		if (n > 0 && same == 0) {
			/* The clear refusal: e.g. an IPv6 server behind
			 * v4-only relays goes direct, and says why. */
			d->ctr.direct_no_family_relay++;
			conn_release(c, NULL, c->server.addr.family == AF_INET6 ?
			    "no relay with an IPv6 data endpoint" :
			    "no relay with an IPv4 data endpoint");
			return;
		}
		conn_release(c, NULL, "no usable relay");
		return;
	}
	c->cand = calloc(k, sizeof(*c->cand));
	c->pr = calloc(k, sizeof(*c->pr));
	c->rep = calloc(k, sizeof(*c->rep));
	c->due = d->conf.sel.max_chain > 1 ? calloc(k, sizeof(*c->due)) : NULL;
	if (c->cand == NULL || c->pr == NULL || c->rep == NULL ||
	    (d->conf.sel.max_chain > 1 && c->due == NULL))
		goto oom;
	c->ncand = k;
	for (size_t i = 0; i < k; i++)
		c->cand[i] = d->relays[idx[i]];
	free(cands);
	free(idx);

	c->direct = SEL_DIRECT_PENDING;
	c->dstart_us = clock_mono_us();
	d->ctr.direct_probes++;
	if (direct_start(d, c) == -1) {
		/* Our shortage says nothing about the path. */
		log_warn("direct probe");
		conn_release(c, NULL, "no descriptor for the direct probe");
		return;
	}
	for (size_t i = 0; i < k; i++)
		probe_send(d, c, i);
	evaluate(c);
	return;
oom:
	free(cands);
	free(idx);
	log_warnx("out of memory while probing");
	conn_release(c, NULL, "out of memory");
}

/* A relay of r's lead-in, as it is now: usable, of r's family, and taking
 * chains (it forwards this one). */
static bool
via_usable(const struct slotd *d, const struct hconn *c, const struct crelay *r,
    const struct crelay *x, uint64_t now)
{
	/* A program's avoid= holds for every relay of a chain, not only the
	 * relays probed. */
	return x != NULL && relay_usable(d, x, now) && relay_takes_chains(x) &&
	    x->conf.control.addr.family == r->conf.control.addr.family &&
	    !lib_opts_avoids(c->lib, &x->conf.control);
}

/* Whether r's lead-in (set by the ranking) can be taken now, every relay
 * on it usable: len 2, its lead-in through one relay (lead1); len 3, its
 * best (lead). */
static bool
lead_usable(const struct slotd *d, const struct hconn *c, const struct crelay *r,
    unsigned len, uint64_t now)
{
	if (d->conf.sel.max_chain < len)
		return false;
	if (len == 2)
		return r->lead1_us != 0 && via_usable(d, c, r, r->lead1_via, now);
	if (r->lead_us == 0 || r->nlead == 0)
		return false;
	for (unsigned i = 0; i < r->nlead; i++)
		if (!via_usable(d, c, r, r->lead_via[i], now))
			return false;
	return true;
}

/* A reply's lead-ins: the probed relay's, where every relay on them can be
 * taken now by this connection; else none. */
static void
reply_leads(const struct slotd *d, const struct hconn *c, struct sel_reply *r, uint64_t now)
{
	const struct crelay *x = r->relay < c->ncand ? c->cand[r->relay] : NULL;

	r->rtt_lead_us = x && lead_usable(d, c, x, 3, now) ? x->lead_us : SEL_NO_LEAD;
	r->rtt_lead1_us = x && lead_usable(d, c, x, 2, now) ? x->lead1_us : SEL_NO_LEAD;
}

/* A reply counts only as the answer to a request still outstanding, once:
 * that and the timestamp window stop replays without a nonce table, which
 * bursts of probe replies would fill. */
static bool
fresh(const struct slotd *d, uint64_t ts_us)
{
	uint64_t now = clock_real_us(), win = d->conf.max_clock_skew_ms * 1000;

	return ts_us + win >= now && ts_us <= now + win;
}

/* Identity mode: a reply is MACed with the pair key of the relay we asked,
 * found by the request id it carries. */
static const struct auth_key *
reply_key_fn(void *arg, const struct proto_hdr *h)
{
	struct slotd *d = arg;
	uint64_t hh = id_hash(h->id);

	for (struct hnode *x = htab_first(&d->probes, hh); x; x = htab_next(x, hh)) {
		struct hprobe *q = container_of(x, struct hprobe, node);
		const struct crelay *r;
		const struct proto_pair *pair;

		if (q->id != h->id || (r = q->c->cand[q->idx]) == NULL || r->link == NULL ||
		    (pair = rlink_pair(r->link)) == NULL)
			continue;
		return proto_key_pair((void *)pair, h);
	}
	return NULL;
}

/* When the datagram of mh reached the host (the kernel's SO_TIMESTAMPNS), on
 * the monotonic clock; now if it does not say. A reply counts from its
 * arrival, not from when a busy slotd got round to it. */
static uint64_t
rx_mono_us(struct msghdr *mh, uint64_t now)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_TIMESTAMPNS ||
		    cm->cmsg_len < CMSG_LEN(sizeof(struct timespec)))
			continue;
		struct timespec ts;
		memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
		uint64_t at = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
		uint64_t real = clock_real_us();
		/* Only a plausible age: a clock step makes it nonsense. */
		if (at <= real && real - at < 10000000 && real - at <= now)
			return now - (real - at);
	}
	return now;
}

/* Reads the relays' answers waiting on fd. */
static void
probe_read(struct slotd *d, int fd)
{
	struct sockaddr_storage ss;
	struct proto_msg m;
	struct endpoint from;
	enum proto_err why;
	uint8_t buf[PROTO_MAX_LEN + 1];
	union {
		char b[CMSG_SPACE(sizeof(struct timespec))];
		struct cmsghdr align;
	} ctl;
	size_t used;

	for (int budget = 0; budget < 256; budget++) {
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_name = &ss, .msg_namelen = sizeof(ss), .msg_iov = &iov,
		    .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
		ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
		if (n < 0)
			return;
		socklen_t sl = mh.msg_namelen;
		uint64_t now = rx_mono_us(&mh, clock_mono_us());
		if (ep_from_sockaddr((struct sockaddr *)&ss, sl, &from) == -1 ||
		    (d->env.id == NULL ?
		    proto_decode(buf, (size_t)n, &d->key, &m, &used, &why) :
		    proto_decode_with(buf, (size_t)n, reply_key_fn, d, &m, &used, &why)) !=
		    PROTO_OK ||
		    used != (size_t)n || m.type != PROTO_PROBE_REPLY || !fresh(d, m.ts_us)) {
			d->ctr.probe_replies_dropped++;
			continue;
		}
		struct hprobe *p = NULL;
		uint64_t h = id_hash(m.id);
		for (struct hnode *x = htab_first(&d->probes, h); x; x = htab_next(x, h)) {
			struct hprobe *q = container_of(x, struct hprobe, node);
			if (q->id == m.id)
				p = q;
		}
		/* Late (decided already), unknown, or not from the relay we
		 * asked about the server we asked. */
		if (p == NULL || p->answered || p->c->cand[p->idx] == NULL ||
		    !ep_eq(&from, &p->c->cand[p->idx]->conf.control) ||
		    !ep_eq(&m.u.probe_reply.target, &p->c->server)) {
			d->ctr.probe_replies_dropped++;
			continue;
		}
		struct hconn *c = p->c;
		uint64_t elapsed = now > p->sent_us ? now - p->sent_us : 0;
		struct sel_reply *r = &c->rep[c->nrep++];
		p->answered = true;
		d->ctr.probe_replies++;
		r->relay = p->idx;
		r->reached = m.u.probe_reply.status == PROBE_ST_OK;
		r->rtt_cr_us = elapsed > m.u.probe_reply.hold_us ?
		    (uint32_t)(elapsed - m.u.probe_reply.hold_us) : 1;
		r->rtt_rs_us = m.u.probe_reply.rtt_us;
		r->at_us = now > c->t0_us ? now - c->t0_us : 0;
		c->cand[p->idx]->rtt_us = r->rtt_cr_us;		/* for "slotctl relays" */
		evaluate(c);	/* which sets the reply's lead-ins (reply_leads) */
	}
}

static void
probe_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	probe_read(w->data, w->fd);
}

/* The program named the relay, or a chain of relays (libslot): no probe,
 * no cache; the pipe is still set up as any other, and a failure still goes
 * direct. The first relay needs its link up; the next ones need only be in
 * the set (the first relay connects to them). */
static void
forced(struct slotd *d, struct hconn *c, uint64_t now)
{
	struct crelay *r = relay_find(d, &c->lib->relay);
	char rb[EP_STRLEN];

	if (r == NULL || !relay_usable(d, r, now)) {
		log_info("forced relay %s: %s", ep_fmt(&c->lib->relay, rb),
		    r ? "not usable now" : "not in the set");
		conn_release(c, NULL, r ? "the forced relay is not usable now" :
		    "the forced relay is not in the set");
		return;
	}
	if (r->conf.control.addr.family != c->server.addr.family) {
		conn_release(c, NULL, "the forced relay has no data endpoint of the server's family");
		return;
	}
	c->nnext = 0;
	for (size_t i = 0; i < c->lib->nnext && i < PROTO_CHAIN_MAX_HOPS; i++) {
		struct crelay *n = relay_find(d, &c->lib->next[i]);
		if (n == NULL) {
			log_info("forced chain: relay %s not in the set",
			    ep_fmt(&c->lib->next[i], rb));
			c->nnext = 0;
			conn_release(c, NULL, "a relay of the forced chain is not in the set");
			return;
		}
		c->next[c->nnext++] = n;
	}
	/* Every relay but the last forwards the chain: one that has not said
	 * it takes chains (an older relay would close our link) is not sent
	 * one. */
	for (unsigned i = 0; i < c->nnext; i++) {
		const struct crelay *f = i == 0 ? r : c->next[i - 1];

		if (!relay_takes_chains(f)) {
			log_info("forced chain: relay %s does not take chains",
			    ep_fmt(&f->conf.control, rb));
			c->nnext = 0;
			conn_release(c, NULL, "a relay of the forced chain does not take chains");
			return;
		}
	}
	establish(c, r, 0, c->nnext ? "chain forced by the application" :
	    "forced by the application");
}

static void
hold_start(struct slotd *d, uint32_t id, uint32_t mark, const struct syn_info *si,
    const uint8_t *pkt, size_t caplen, size_t wirelen, bool ct_reused)
{
	struct hconn *c = calloc(1, sizeof(*c));
	struct selc_entry e;
	uint64_t now = clock_mono_us();

	if (c == NULL) {
		synq_verdict(d->q, id, true, false, 0);
		return;
	}
	c->d = d;
	c->client = si->src;
	c->server = si->dst;
	c->seq = si->seq;
	c->pkt_id = id;
	c->pkt_mark = mark & ~d->conf.bypass_mark;
	c->ct_reused = ct_reused;
	if (caplen == wirelen && caplen <= sizeof(c->pkt)) {
		memcpy(c->pkt, pkt, caplen);
		c->pktlen = (uint16_t)caplen;
	}
	c->t0_us = now;
	c->dfd = -1;
	c->state = HC_PROBING;
	htab_insert(&d->conns, &c->node, ep_hash(&c->client, d->hkey));
	TAILQ_INSERT_TAIL(&d->held, c, link);
	d->nheld++;
	uint64_t hold_ms = d->conf.hold_timeout_ms;
	struct lib_opts lo;
	if ((mark & d->conf.lib_mark) && libsrv_take(d, &c->client, &c->server, &lo) &&
	    (c->lib = malloc(sizeof(*c->lib))) != NULL) {
		*c->lib = lo;
		if (lo.deadline_ms && lo.deadline_ms < hold_ms)
			hold_ms = lo.deadline_ms;
	}
	ev_timer_init(&c->hold, hold_timeout_cb, hold_ms / 1000., 0.);
	c->hold.data = c;
	ev_timer_start(d->loop, &c->hold);
	ev_init(&c->timer, decide_timer_cb);
	c->timer.data = c;

	if (c->lib && c->lib->has_relay) {
		forced(d, c, now);
		return;
	}
	if (cache_on(d) && selc_get(d->cache, &c->server, now, &e) &&
	    !(e.choice == SELC_RELAY && lib_opts_avoids(c->lib, &e.relay))) {
		if (e.choice == SELC_DIRECT) {
			d->ctr.cache_hits++;
			c->cached = true;
			conn_release(c, NULL, e.why == SELC_REFUSED ?
			    "cached: the server refused the port" :
			    e.why == SELC_POLICY_PORT ? "cached: the relay's policy refuses the port" :
			    "cached: direct is best");
			return;
		}
		struct crelay *r = relay_find(d, &e.relay);
		/* A cached chain: every relay of it still in the set and usable. */
		c->nnext = 0;
		for (unsigned i = 0; r && i < e.nnext && i < SEL_MAX_CHAIN - 1; i++) {
			struct crelay *x = relay_find(d, &e.next[i]);

			if (x == NULL || !relay_usable(d, x, now) ||
			    lib_opts_avoids(c->lib, &e.next[i]))
				r = NULL;
			c->next[c->nnext++] = x;
		}
		/* ... and every relay of it but the last still taking chains. */
		for (unsigned i = 0; r && i < c->nnext; i++)
			if (!relay_takes_chains(i == 0 ? r : c->next[i - 1]))
				r = NULL;
		if (r == NULL)
			c->nnext = 0;
		if (r && relay_usable(d, r, now)) {
			d->ctr.cache_hits++;
			c->cached = true;
			establish(c, r, e.path_rtt_us, "cached decision");
			if (!d->conf.cache_early || c->state != HC_ESTABLISHING) {
				synack_wait(c);
				return;
			}
			if (!selc_reached(&e, c->server.port)) {
				/* connect() keeps its meaning until this relay
				 * has connected to this port of the server. */
				d->ctr.early_unreached++;
				synack_wait(c);
				return;
			}
			/* The request stays outstanding past the verdict: the
			 * relay holds the early data connection until its
			 * connect to the server is done. */
			uint32_t req = c->req_id;
			c->req_id = 0;
			c->early = true;
			conn_release(c, r, "cached decision, early");
			c->req_id = req;
			d->ctr.early_verdicts++;
			return;
		}
		struct endpoint k = addr_key(c);
		(void)selc_invalidate(d->cache, &k, NULL);
	}
	d->ctr.cache_misses++;
	start_probing(d, c);
}

enum synack_fate
synack_failed_fate(enum nlq_ct ct, uint32_t ct_status)
{
	switch (ct) {
	case NLQ_CT_ENTRY:
		/* The entry the packet was queued with, deleted or not: its
		 * DNAT is what the kernel applies when the packet goes on. */
		return (ct_status & IPS_DST_NAT) ? SYNACK_DROP_CT : SYNACK_PASS_CT;
	case NLQ_CT_NONE:
		return SYNACK_PASS_CT;
	case NLQ_CT_UNKNOWN:
		break;
	}
	return SYNACK_DROP_RULE;
}

/* A SYN-ACK from a relay's data port (the rules' SLOT_SYNACK): held while
 * its connection waits for PIPE_OK (synack_wait), else passed at once. Only
 * the answer to the SYN slotd sent (its ISN + 1) is held; a second copy (the
 * relay's retransmission) is dropped, the first one still being here. */
static void
hold_synack(struct slotd *d, uint32_t id, const struct syn_info *si, enum nlq_ct ct,
    uint32_t ct_status)
{
	struct hconn *c = conn_find(d, &si->dst);
	/* The answer to the SYN slotd sent with PIPE_ESTABLISH. */
	bool ours = c != NULL && c->syn_out && si->ack == c->seq + 1;

	if (ct == NLQ_CT_ENTRY)
		d->ctr.synack_ct++;
	if (ours && c->state == HC_LINGER && !c->relayed) {
		/* Its pipe has failed and its conntrack entry was deleted. One
		 * queued before the deletion still holds that entry: passed, it
		 * would complete a handshake, de-NATed, that the direct path's
		 * server knows nothing of; dropped, the application's next SYN
		 * goes direct. The relay's retransmissions, later, hold no
		 * entry: the client's kernel answers them with a reset, which
		 * frees the relay's half-open connection. */
		switch (synack_failed_fate(ct, ct_status)) {
		case SYNACK_DROP_CT:
			d->ctr.synack_dropped_ct++;
			break;
		case SYNACK_DROP_RULE:
			d->ctr.synack_dropped_rule++;
			break;
		case SYNACK_PASS_CT:
			d->ctr.synack_passed++;
			synq_verdict(d->q, id, true, false, 0);
			return;
		}
		d->ctr.synack_dropped++;
		synq_verdict(d->q, id, false, false, 0);
		return;
	}
	if (!ours || c->state != HC_ESTABLISHING || c->via == NULL ||
	    !addr_eq(&si->src.addr, &c->via->conf.control.addr)) {
		d->ctr.synack_passed++;
		synq_verdict(d->q, id, true, false, 0);
		return;
	}
	if (c->synack_held) {
		synq_verdict(d->q, id, false, false, 0);
		return;
	}
	c->synack_held = true;
	c->synack_id = id;
	d->ctr.synack_holds++;
}

/* A new SYN the rules marked with bypass_mark: it took over the conntrack
 * entry of an earlier connection on the same tuple that was reset from the
 * other side (by a relay, or a relay's death): the kernel keeps such an
 * entry in CLOSE for 10 s and reuses it for a new SYN, DNAT and all, so
 * whatever slotd decided, this SYN would go to that relay. The entry is
 * deleted and the SYN dropped: the application's retransmission (1 s) is a
 * new connection, which slotd decides afresh. An entry without DNAT (a
 * direct connection the server reset) is held as any SYN instead: only a
 * relay verdict needs a new entry (syn_to_relay). */
static void
stale_nat_syn(struct slotd *d, uint32_t id, const struct syn_info *si)
{
	char cb[EP_STRLEN], sb[EP_STRLEN];

	d->ctr.stale_nat_drops++;
	synq_verdict(d->q, id, false, false, 0);
	if (!forget_ct(d, &si->src, &si->dst,
	    "its SYNs go to the old relay until the kernel drops it (10 s)"))
		return;
	log_info("%s -> %s: the port reuses a reset connection's conntrack entry, still "
	    "NATed to its relay: entry forgotten, SYN dropped (the next one is decided anew)",
	    ep_fmt(&si->src, cb), ep_fmt(&si->dst, sb));
}

/* Whether a reused entry (a SYN the rules marked) binds the SYN to a
 * DNAT: the queue's copy of the entry says, or else conntrack does. When
 * neither can, it is taken to: the safe way, a new entry. */
static bool
reused_entry_nat(struct slotd *d, const struct syn_info *si, enum nlq_ct ct, uint32_t ct_status)
{
	uint32_t st;

	if (ct == NLQ_CT_ENTRY)
		return (ct_status & IPS_DST_NAT) != 0;
	if (d->ct == NULL || conntrack_status(d->ct, &si->src, &si->dst, &st) == -1)
		return true;
	return (st & IPS_DST_NAT) != 0;
}

void
hold_packet(void *user, uint32_t id, uint32_t mark, const uint8_t *pkt, size_t caplen,
    size_t wirelen, enum nlq_ct ct, uint32_t ct_status)
{
	struct slotd *d = user;
	struct syn_info si;
	struct hconn *c;
	enum syn_parse r = SYN_MALFORMED;

	if (pkt != NULL && (r = syn_parse(pkt, caplen, wirelen, &si)) == SYN_SYNACK) {
		hold_synack(d, id, &si, ct, ct_status);
		return;
	}
	if (pkt == NULL || r != SYN_OK) {
		/* Not ours to judge: a sysadmin's rule queued it. */
		d->ctr.syn_malformed++;
		synq_verdict(d->q, id, true, false, 0);
		return;
	}
	d->ctr.syn_received++;
	if ((c = conn_find(d, &si.src)) != NULL) {
		if (ep_eq(&c->server, &si.dst) && c->seq == si.seq) {
			bool to_relay = c->state == HC_LINGER ? c->relayed : c->syn_out;
			if (c->state != HC_LINGER && !c->syn_out) {
				/* The application's retransmission: the first
				 * SYN still waits for its verdict. */
				d->ctr.syn_retransmits_dropped++;
				synq_verdict(d->q, id, false, false, 0);
			} else if (to_relay && c->tokened) {
				/* The same token: the kernel retransmits the
				 * SYN it built, not the one we handed back. */
				verdict_tokened(d, c, id, c->mark, pkt,
				    caplen == wirelen ? caplen : 0);
			} else {
				synq_verdict(d->q, id, true, to_relay, c->mark);
			}
			return;
		}
		/* The port was reused for a new connection. */
		if (c->state != HC_LINGER)
			conn_release(c, NULL, "superseded by a new SYN");
		conn_free(c);
	}
	bool reused = (mark & d->conf.bypass_mark) != 0;
	if (reused)
		d->ctr.reused_ct_syns++;
	if (reused && reused_entry_nat(d, &si, ct, ct_status)) {
		stale_nat_syn(d, id, &si);
		return;
	}
	if (d->stopping || d->nheld >= d->conf.max_held) {
		if (!d->stopping)
			d->ctr.held_overflow++;
		synq_verdict(d->q, id, true, false, 0);
		return;
	}
	hold_start(d, id, mark, &si, pkt, caplen, wirelen, reused);
}

bool
hold_answer(struct slotd *d, const struct endpoint *client, const struct endpoint *server,
    struct hold_answer *out)
{
	struct hconn *c = conn_find(d, client);

	memset(out, 0, sizeof(*out));
	if (c != NULL && ep_eq(&c->server, server)) {
		out->cached = c->cached;
		out->why = c->why;
		if (c->state != HC_LINGER) {
			out->state = "pending";
			return true;
		}
		out->state = c->relayed ? "relayed" : "direct";
		out->has_relay = c->relayed && c->via != NULL;
		if (out->has_relay)
			out->relay = c->via->conf.control;
		out->path_rtt_us = c->relayed ? c->path_rtt_us : 0;
		out->direct_rtt_us = c->direct == SEL_DIRECT_OK ? c->rtt_direct_us : 0;
		return true;
	}
	/* Gone from the table (70 s): the recent decisions, newest first. */
	for (size_t k = 0; k < d->nrecent; k++) {
		const struct decision *x = &d->recent[(d->recent_next + RECENT_MAX - 1 - k) %
		    RECENT_MAX];
		if (!ep_eq(&x->client, client) || !ep_eq(&x->server, server))
			continue;
		out->state = x->relayed ? "relayed" : "direct";
		out->has_relay = x->relayed;
		out->relay = x->relay;
		out->path_rtt_us = x->relayed ? x->path_rtt_us : 0;
		out->direct_rtt_us = x->rtt_direct_us;
		out->cached = x->cached;
		out->why = x->why;
		return true;
	}
	return false;
}

void
hold_relay_gone(struct slotd *d, struct crelay *r)
{
	struct hconn *c, *t;

	for (c = TAILQ_FIRST(&d->held); c; c = t) {
		t = TAILQ_NEXT(c, link);
		bool in_chain = false;
		for (unsigned i = 0; i < c->nnext; i++)
			in_chain |= c->next[i] == r;
		if (c->state == HC_ESTABLISHING && (c->via == r || in_chain)) {
			conn_release(c, NULL, "relay left the set");
			continue;
		}
		for (size_t i = 0; i < c->ncand; i++)
			if (c->cand[i] == r)
				c->cand[i] = NULL;
		for (unsigned i = 0; i < c->nnext; i++)
			if (c->next[i] == r)
				c->next[i] = NULL;
	}
	TAILQ_FOREACH(c, &d->linger, link) {
		if (c->via == r)
			c->via = NULL;
		for (unsigned i = 0; i < c->nnext; i++)
			if (c->next[i] == r)
				c->next[i] = NULL;
	}
}

/* Releases every held SYN direct now (shutting down). */
static void
hold_release_all(struct slotd *d, const char *why)
{
	struct hconn *c;

	while ((c = TAILQ_FIRST(&d->held)) != NULL)
		conn_release(c, NULL, why);
	synq_flush(d->q);
}

static void
linger_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct slotd *d = w->data;
	uint64_t now = clock_mono_us();
	struct hconn *c;
	(void)loop;
	(void)revents;

	while ((c = TAILQ_FIRST(&d->linger)) != NULL && c->linger_until_us <= now)
		conn_free(c);
}

static int
probe_socket(int family, uint32_t mark)
{
	int fd = socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd == -1)
		return -1;
	if (mark && setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == -1) {
		close(fd);
		return -1;
	}
	/* Arrival times of the answers (rx_mono_us); without them, read times. */
	(void)setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &(int){ 1 }, sizeof(int));
	return fd;
}

int
hold_init(struct slotd *d, char *err, size_t errlen)
{
	TAILQ_INIT(&d->held);
	TAILQ_INIT(&d->linger);
	if (htab_init(&d->conns, 1024) == -1 || htab_init(&d->probes, 1024) == -1) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	d->probe_fd[0] = probe_socket(AF_INET, d->conf.bypass_mark);
	if (d->probe_fd[0] == -1) {
		snprintf(err, errlen, "probe socket: %s", strerror(errno));
		return -1;
	}
	/* IPv6 may be off in this namespace: then IPv6 relays never answer. */
	d->probe_fd[1] = probe_socket(AF_INET6, d->conf.bypass_mark);
	for (int i = 0; i < 2; i++) {
		if (d->probe_fd[i] < 0)
			continue;
		ev_io_init(&d->probe_io[i], probe_read_cb, d->probe_fd[i], EV_READ);
		d->probe_io[i].data = d;
		ev_io_start(d->loop, &d->probe_io[i]);
	}
	/* Ids of a previous run's requests are not ours. */
	d->next_probe_id = arc4random();
	ev_timer_init(&linger_timer, linger_cb, LINGER_TICK, LINGER_TICK);
	linger_timer.data = d;
	ev_timer_start(d->loop, &linger_timer);
	return 0;
}

void
hold_fini(struct slotd *d)
{
	struct hconn *c;

	if (d->q)
		hold_release_all(d, "slotd stopping");
	while ((c = TAILQ_FIRST(&d->linger)) != NULL)
		conn_free(c);
	ev_timer_stop(d->loop, &linger_timer);
	for (int i = 0; i < 2; i++) {
		if (d->probe_fd[i] < 0)
			continue;
		ev_io_stop(d->loop, &d->probe_io[i]);
		close(d->probe_fd[i]);
		d->probe_fd[i] = -1;
	}
	htab_destroy(&d->conns);
	htab_destroy(&d->probes);
}

void
hold_view(struct slotd *d, void (*fn)(void *arg, const struct hold_view *v), void *arg)
{
	uint64_t now = clock_mono_us();
	struct hconn *c;

	TAILQ_FOREACH(c, &d->held, link) {
		struct hold_view v = { .client = c->client, .server = c->server,
		    .age_us = now - c->t0_us };
		v.state = c->state == HC_PROBING ? "probing" : "establishing";
		if (c->state == HC_ESTABLISHING && c->via)
			v.relay = &c->via->conf.control;
		fn(arg, &v);
	}
	TAILQ_FOREACH(c, &d->linger, link) {
		if (!c->relayed)
			continue;
		struct hold_view v = { .client = c->client, .server = c->server,
		    .state = "relayed", .age_us = now - c->t0_us };
		if (c->via)
			v.relay = &c->via->conf.control;
		fn(arg, &v);
	}
}
