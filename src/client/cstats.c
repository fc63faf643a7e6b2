#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/select.h"
#include "slot/synprobe.h"
#include "cstats.h"
#include "dirsync.h"
#include "hold.h"
#include "relays.h"
#include "rules.h"
#include "rulesync.h"

static void
counters(void *user, struct ctl_counters *cs)
{
	struct slotd *d = user;
	const struct client_counters *c = &d->ctr;
	struct synq_stats qs = { 0 };
	struct dirsync_stats ds;
	const struct synp_stats *syn = d->synp ? synp_stats(d->synp) : NULL;
	struct rsync_stats rs = { 0 };
	size_t waiting = 0;

	if (d->q)
		synq_stats(d->q, &qs);
	if (d->rsync)
		rsync_get_stats(d->rsync, &rs);
	for (size_t i = 0; i < d->nrelays; i++)
		waiting += !relay_rules_in(d, d->relays[i]);
	dirsync_stats(d, &ds);
#define C(...) ctl_counter_add(cs, __VA_ARGS__)
	C("syn_received", c->syn_received, CTL_COUNTER, "SYNs read from the queue.");
	C("syn_retransmits_dropped", c->syn_retransmits_dropped, CTL_COUNTER,
	    "Retransmissions of a SYN still held, dropped.");
	C("syn_malformed", c->syn_malformed, CTL_COUNTER,
	    "Queued packets that were no first SYN, accepted untouched.");
	C("conns_held", d->nheld, CTL_GAUGE, "SYNs waiting for a verdict.");
	C("conns_lingering", d->nlinger, CTL_GAUGE,
	    "Decided connections kept for their SYN's retransmissions.");
	C("cache_hits", c->cache_hits, CTL_COUNTER, "Selection cache hits.");
	C("cache_misses", c->cache_misses, CTL_COUNTER, "Selection cache misses.");
	C("cache_entries", d->cache ? selc_count(d->cache) : 0, CTL_GAUGE,
	    "Entries in the selection cache.");
	C("probes_sent", c->probes_sent, CTL_COUNTER, "Probes sent to relays.");
	C("probe_replies", c->probe_replies, CTL_COUNTER, "Relay probe replies used.");
	C("probe_replies_dropped", c->probe_replies_dropped, CTL_COUNTER,
	    "Relay probe replies dropped: late, unknown, forged or malformed.");
	C("direct_probes", c->direct_probes, CTL_COUNTER,
	    "Direct-path probes: bare SYNs, or TCP connects.");
	C("direct_probes_connect", c->direct_probes_connect, CTL_COUNTER,
	    "Direct-path probes by TCP connect, reset before the handshake's last ACK: "
	    "a host without IPv6 for an IPv6 server, or no raw socket.");
	C("syn_retransmits", syn ? syn->syns_sent - syn->probes : 0, CTL_COUNTER,
	    "Probe SYNs sent again, each from a new port with a new ISN.");
	C("syn_skipped", syn ? syn->skipped : 0, CTL_COUNTER,
	    "SYN-ACKs set aside as maybe the server's retransmission.");
	C("decisions_direct", c->decisions_direct, CTL_COUNTER, "Connections sent direct.");
	C("direct_no_family_relay", c->direct_no_family_relay, CTL_COUNTER,
	    "Connections sent direct because no relay has a data endpoint of their "
	    "family (the kernel rewrites a destination only within a family).");
	C("decisions_chain", c->decisions_chain, CTL_COUNTER,
	    "Selections that chose a chain of relays (max_chain > 1).");
	C("decisions_relay", c->decisions_relay, CTL_COUNTER,
	    "Connections sent through a relay.");
	C("repairs", c->repairs, CTL_COUNTER,
	    "Relay taken because the direct probe failed or stayed silent.");
	C("relay_before_direct", c->relay_before_direct, CTL_COUNTER,
	    "Relay taken before the direct probe answered.");
	C("probes_beside", c->probes_beside, CTL_COUNTER,
	    "New servers probed first by the landmark of a relay in their prefix.");
	C("pipes_ok", c->pipes_ok, CTL_COUNTER, "PIPE_ESTABLISH answered PIPE_OK.");
	C("pipes_failed", c->pipes_failed, CTL_COUNTER,
	    "PIPE_ESTABLISH answered PIPE_FAIL or ERROR, or the link went down.");
	C("pipes_timeout", c->pipes_timeout, CTL_COUNTER,
	    "PIPE_ESTABLISH not answered in time.");
	C("early_verdicts", c->early_verdicts, CTL_COUNTER,
	    "Cache hits released before PIPE_OK (cache_early).");
	C("early_failures", c->early_failures, CTL_COUNTER,
	    "Early verdicts whose pipe then failed.");
	C("early_unreached", c->early_unreached, CTL_COUNTER,
	    "Cache hits that waited for PIPE_OK although cache_early is on: the relay "
	    "had not reached that server port in the entry's lifetime.");
	C("synack_waits", c->synack_waits, CTL_COUNTER,
	    "SYNs sent to the relay with PIPE_ESTABLISH, PIPE_OK awaited at the relay's "
	    "SYN-ACK (synack_hold).");
	C("synack_holds", c->synack_holds, CTL_COUNTER,
	    "Relays' SYN-ACKs held until PIPE_OK.");
	C("synack_passed", c->synack_passed, CTL_COUNTER,
	    "Relays' SYN-ACKs passed at once: no connection waited for them.");
	C("synack_dropped", c->synack_dropped, CTL_COUNTER,
	    "Relays' SYN-ACKs dropped: they answered a SYN whose pipe had failed.");
	C("synack_dropped_ct", c->synack_dropped_ct, CTL_COUNTER,
	    "Of those, dropped as they held their connection's DNAT conntrack entry.");
	C("stale_nat_drops", c->stale_nat_drops, CTL_COUNTER,
	    "New SYNs that took over the conntrack entry of a connection a relay reset, its "
	    "DNAT still bound: the entry deleted, the SYN dropped (its retransmission is new).");
	C("reused_ct_syns", c->reused_ct_syns, CTL_COUNTER,
	    "New SYNs that took over the conntrack entry of a connection reset from the "
	    "server's side (with or without DNAT).");
	C("reused_ct_drops", c->reused_ct_drops, CTL_COUNTER,
	    "Of those, SYNs on a direct connection's entry that slotd sent to a relay: the "
	    "entry deleted, the SYN dropped (its retransmission takes the relay).");
	C("synack_dropped_rule", c->synack_dropped_rule, CTL_COUNTER,
	    "Of those, dropped as the rules queue only SYN-ACKs with DNAT: the queue "
	    "attaches no conntrack entry.");
	C("synack_ct", c->synack_ct, CTL_COUNTER,
	    "Relays' SYN-ACKs read with their conntrack entry.");
	C("synack_failures", c->synack_failures, CTL_COUNTER,
	    "Waits at the SYN-ACK whose pipe failed: the SYN-ACK dropped, the conntrack "
	    "entry forgotten, the next SYN direct.");
	C("ct_delete_errors", c->ct_delete_errors, CTL_COUNTER,
	    "Conntrack entries that could not be forgotten after a failed pipe.");
	C("hold_timeouts", c->hold_timeouts, CTL_COUNTER, "SYNs released direct at hold_timeout.");
	C("token_pipes", c->token_pipes, CTL_COUNTER,
	    "Pipes requested with a token in the SYN (behind NAT, or [nat] mode on).");
	C("token_no_room", c->token_no_room, CTL_COUNTER,
	    "SYNs sent direct: a token was wanted and their options left no room for it.");
	C("token_unsupported", c->token_unsupported, CTL_COUNTER,
	    "Pipes that wanted a token through a relay that takes none: matched by endpoint.");
	C("lib_requests", c->lib_requests, CTL_COUNTER, "Requests on the lib socket.");
	C("lib_errors", c->lib_errors, CTL_COUNTER, "Lib socket requests answered with an error.");
	C("lib_offered", c->lib_offered, CTL_COUNTER,
	    "Sockets offered by their programs (libslot), any port.");
	C("lib_matched", c->lib_matched, CTL_COUNTER,
	    "SYNs of offered sockets that came with their program's options.");
	C("lib_attached", c->lib_attached, CTL_COUNTER,
	    "Processes moved into the run cgroup (slotctl run).");
	C("lib_close_deferred", c->lib_close_deferred, CTL_COUNTER,
	    "Passed descriptors other than TCP sockets, closed by the closing thread.");
	C("lib_close_overflow", c->lib_close_overflow, CTL_COUNTER,
	    "Passed descriptors left open: the closing thread's queue was full.");
	C("held_overflow", c->held_overflow, CTL_COUNTER,
	    "SYNs sent direct because max_held were held.");
	C("relays_configured", d->nrelays, CTL_GAUGE, "Relays in the set.");
	C("relays_up", d->relays_up, CTL_GAUGE, "Relays with a live control connection.");
	C("reloads", c->reloads, CTL_COUNTER, "Configurations put in force by SIGHUP.");
	C("reload_failures", c->reload_failures, CTL_COUNTER,
	    "Configurations refused on SIGHUP.");
	C("rules_applied", c->rules_applied, CTL_COUNTER, "Rule sets installed.");
	C("rules_pending", rs.wanted > rs.installed, CTL_GAUGE,
	    "1 while a rule set waits for the kernel (running, or failed and retried).");
	C("rules_failures", rs.failed, CTL_COUNTER,
	    "Rule sets whose tool (iptables-restore, ip6tables-restore, nft) failed, was "
	    "killed or did not start.");
	C("rules_lock_busy", rs.lock_busy, CTL_COUNTER,
	    "Of them, stopped by the xtables lock held past rules_timeout.");
	C("rules_killed", rs.killed, CTL_COUNTER,
	    "Of them, killed past rules_timeout plus 2 s.");
	C("relays_waiting_rules", waiting, CTL_GAUGE,
	    "Relays of the set left out until their DNAT rule is in the kernel.");
	C("decide_us_max", c->decide_us_max, CTL_GAUGE,
	    "Longest SYN-to-verdict time, microseconds.");
	C("queue_packets", qs.packets, CTL_COUNTER, "Packets read from NFQUEUE.");
	C("queue_overruns", qs.overruns, CTL_COUNTER,
	    "NFQUEUE socket overruns (packets the kernel could not hand over).");
	C("queue_verdict_errors", qs.verdict_errors, CTL_COUNTER, "Verdicts the kernel refused.");
	C("queue_conntrack", d->q ? synq_ct(d->q) : 0, CTL_GAUGE,
	    "1 when the kernel attaches their conntrack entry to queued packets "
	    "(CONFIG_NETFILTER_NETLINK_GLUE_CT).");
	C("dir_fetches_ok", ds.fetches_ok, CTL_COUNTER, "Directory fetches with a new listing.");
	C("dir_fetches_unchanged", ds.fetches_unchanged, CTL_COUNTER,
	    "Directory fetches answered \"unchanged\".");
	C("dir_fetches_failed", ds.fetches_failed, CTL_COUNTER,
	    "Directory fetches no URL answered.");
	C("dir_fetches_refused", ds.fetches_refused, CTL_COUNTER,
	    "Listings refused: unsigned, or a signature or certificate that does not verify.");
	C("dir_revoked", ds.revoked, CTL_GAUGE,
	    "Serials in the directory's revocation list held.");
	C("dir_relays", ds.relays, CTL_GAUGE, "Relays of the set from the directory.");
	C("relays_ranked", d->ranked, CTL_GAUGE,
	    "Relays in the cover ranking (strategy cover).");
	C("relays_ranked_by_landmarks", d->rank_greedy, CTL_GAUGE,
	    "Of them, chosen for the landmarks they cover (the rest: nearest first).");
	C("relays_with_lead_in", d->chain_ends, CTL_GAUGE,
	    "Relays a chain can end at: a lead-in through other relays is known (max_chain > 1).");
	C("dir_cache_loaded", ds.cache_loaded, CTL_GAUGE,
	    "1 if slotd started with the relays of its cache file.");
#undef C
}

static const char *
relay_source(const struct crelay *x)
{
	return cconf_relay_from_dir(&x->conf) ? "directory" : "static";
}

/* The first version's "json": counters, directory, relays and the recent
 * decisions in one object; kept as it was for the scripts that read it. */
static void
json(void *user, const struct ctl_req *q, struct ctl_out *o)
{
	struct slotd *d = user;
	struct ctl_counters cs = { 0 };
	uint64_t now = clock_mono_us();
	char a[EP_STRLEN], b[EP_STRLEN], r[EP_STRLEN];
	struct dirsync_stats ds;

	(void)q;
	counters(d, &cs);
	dirsync_stats(d, &ds);
	ctl_printf(o, "{\"counters\":");
	ctl_counters_json(o, cs.v, cs.n);
	ctl_printf(o, ",\"directory\":{\"version\":");
	ctl_json_str(o, ds.version);
	ctl_printf(o, ",\"url\":");
	ctl_json_str(o, ds.url);
	ctl_printf(o, "},\"relays\":[");
	for (size_t i = 0; i < d->nrelays; i++) {
		const struct crelay *x = d->relays[i];
		ctl_printf(o, "%s{\"control\":\"%s\",\"data_port\":%u,\"group\":%u,\"mark\":%u,"
		    "\"state\":\"%s\",\"quarantined\":%s,\"failures\":%u,\"probes\":%llu,"
		    "\"pipes_ok\":%llu,\"pipes_failed\":%llu,\"source\":\"%s\"}", i ? "," : "",
		    ep_fmt(&x->conf.control, a), x->conf.data_port, x->conf.group, x->mark,
		    relay_state_str(x), now < x->quarantine_until_us ? "true" : "false",
		    x->link ? rlink_failures(x->link) : 0, x->probes, x->pipes_ok,
		    x->pipes_failed, relay_source(x));
	}
	ctl_printf(o, "],\"recent\":[");
	for (size_t i = 0; i < d->nrecent; i++) {
		size_t k = (d->recent_next + RECENT_MAX - d->nrecent + i) % RECENT_MAX;
		const struct decision *x = &d->recent[k];
		char relay[EP_STRLEN + 2] = "null", chain[SEL_MAX_CHAIN * (EP_STRLEN + 3)];
		char beside[EP_STRLEN + 2] = "null";
		size_t cl = 0;
		if (x->relayed)
			snprintf(relay, sizeof(relay), "\"%s\"", ep_fmt(&x->relay, r));
		if (x->beside.addr.family != 0)
			snprintf(beside, sizeof(beside), "\"%s\"", ep_fmt(&x->beside, r));
		/* The relays after "relay" on a chain, in path order. */
		chain[cl++] = '[';
		for (unsigned j = 0; j < x->nnext; j++)
			cl += (size_t)snprintf(chain + cl, sizeof(chain) - cl, "%s\"%s\"",
			    j ? "," : "", ep_fmt(&x->next[j], r));
		snprintf(chain + cl, sizeof(chain) - cl, "]");
		ctl_printf(o, "%s{\"client\":\"%s\",\"server\":\"%s\",\"verdict\":\"%s\","
		    "\"relay\":%s,\"chain\":%s,\"why\":\"%s\",\"rtt_direct_us\":%u,\"path_rtt_us\":%u,"
		    "\"select_us\":%llu,\"decide_us\":%llu,\"probes\":%u,\"beside\":%s,"
		    "\"cached\":%s,\"early\":%s}",
		    i ? "," : "",
		    ep_fmt(&x->client, a), ep_fmt(&x->server, b),
		    x->relayed ? "relay" : "direct", relay, chain, x->why, x->rtt_direct_us,
		    x->path_rtt_us, (unsigned long long)x->select_us,
		    (unsigned long long)x->decide_us, x->probes, beside,
		    x->cached ? "true" : "false", x->early ? "true" : "false");
	}
	ctl_printf(o, "]}\n");
}

static void
status(void *user, struct ctl_kv *kv)
{
	struct slotd *d = user;
	struct dirsync_stats ds;
	char b[EP_STRLEN];

	dirsync_stats(d, &ds);
	ctl_kv_uint(kv, "queue", d->conf.queue);
	ctl_kv_str(kv, "metrics_listen", d->conf.metrics_listen.addr.family ?
	    ep_fmt(&d->conf.metrics_listen, b) : NULL);
	ctl_kv_str(kv, "strategy", sel_strategy_name(d->conf.sel.strategy));
	ctl_kv_uint(kv, "k", d->conf.sel.k);
	ctl_kv_uint(kv, "relays_up", d->relays_up);
	ctl_kv_uint(kv, "relays_configured", d->nrelays);
	ctl_kv_uint(kv, "conns_held", d->nheld);
	ctl_kv_uint(kv, "conns_lingering", d->nlinger);
	ctl_kv_uint(kv, "cache_entries", d->cache ? selc_count(d->cache) : 0);
	ctl_kv_str(kv, "directory_url", ds.url[0] ? ds.url : NULL);
	ctl_kv_str(kv, "listing_version", ds.version[0] ? ds.version : NULL);
}

static const struct ctl_col pipe_cols[] = {
	{ "client", CTL_STR, NULL },
	{ "server", CTL_STR, NULL },
	{ "relay", CTL_STR, NULL },
	{ "state", CTL_STR, NULL },
	{ "age", CTL_DUR, NULL },
	{ "to_server", CTL_UINT, "bytes_to_server" },
	{ "to_client", CTL_UINT, "bytes_to_client" },
};

static void
pipe_row(void *arg, const struct hold_view *v)
{
	struct ctl_table *t = arg;
	char b[EP_STRLEN];

	ctl_cell_str(t, ep_fmt(&v->client, b));
	ctl_cell_str(t, ep_fmt(&v->server, b));
	ctl_cell_str(t, v->relay ? ep_fmt(v->relay, b) : NULL);
	ctl_cell_str(t, v->state);
	ctl_cell_us(t, v->age_us);
	/* The bytes of a relayed connection cross the kernel's NAT, never
	 * slotd: the relay's "pipes" has them (docs/slotctl.md). */
	ctl_cell_none(t);
	ctl_cell_none(t);
}

static void
pipes(void *user, struct ctl_table *t)
{
	hold_view(user, pipe_row, t);
}

static const struct ctl_col cache_cols[] = {
	{ "server", CTL_STR, NULL },
	{ "choice", CTL_STR, NULL },
	{ "relay", CTL_STR, NULL },
	{ "path_rtt", CTL_RTT, NULL },
	{ "age", CTL_DUR, NULL },
	{ "ttl", CTL_DUR, NULL },
	{ "reached", CTL_STR, NULL },
	{ "why", CTL_STR, NULL },
};

struct cache_walk {
	struct ctl_table *t;
	uint64_t now;
};

static const char *
cache_why(enum selc_why w)
{
	switch (w) {
	case SELC_SELECTED:
		return "selected";
	case SELC_REFUSED:
		return "refused";
	case SELC_POLICY_PORT:
		return "policy-port";
	}
	return "unknown";
}

static void
cache_row(void *arg, const struct endpoint *key, const struct selc_entry *e)
{
	struct cache_walk *w = arg;
	char b[EP_STRLEN], ports[SELC_REACHED_MAX * 6 + 1];
	size_t n = 0;

	/* Expired entries wait for their next lookup to go: not in force. */
	if (w->now >= e->expires_us)
		return;
	/* An address's entry is for every port; a port's names its port. */
	ctl_cell_str(w->t, key->port ? ep_fmt(key, b) : addr_fmt(&key->addr, b));
	ctl_cell_str(w->t, e->choice == SELC_RELAY ? "relay" : "direct");
	if (e->choice == SELC_RELAY) {
		/* A chain: its relays in path order. */
		char path[SEL_MAX_CHAIN * (EP_STRLEN + 3)];
		size_t pl = (size_t)snprintf(path, sizeof(path), "%s", ep_fmt(&e->relay, b));

		for (unsigned i = 0; i < e->nnext; i++)
			pl += (size_t)snprintf(path + pl, sizeof(path) - pl, " > %s",
			    ep_fmt(&e->next[i], b));
		ctl_cell_str(w->t, path);
	} else {
		ctl_cell_str(w->t, NULL);
	}
	if (e->path_rtt_us)
		ctl_cell_us(w->t, e->path_rtt_us);
	else
		ctl_cell_none(w->t);
	ctl_cell_us(w->t, w->now > e->made_us ? w->now - e->made_us : 0);
	ctl_cell_us(w->t, e->expires_us - w->now);
	ports[0] = '\0';
	for (size_t i = 0; i < SELC_REACHED_MAX && e->reached[i]; i++)
		n += (size_t)snprintf(ports + n, sizeof(ports) - n, "%s%u", i ? "," : "",
		    e->reached[i]);
	ctl_cell_str(w->t, ports[0] ? ports : NULL);
	ctl_cell_str(w->t, cache_why(e->why));
}

static void
cache(void *user, struct ctl_table *t)
{
	struct slotd *d = user;
	struct cache_walk w = { t, clock_mono_us() };

	if (d->cache)
		selc_walk(d->cache, cache_row, &w);
}

/* Empties the selection cache, or forgets one server (its address's entry
 * and its ports'): the next connection chooses afresh. */
static void
flush(void *user, const struct ctl_req *q, struct ctl_out *o)
{
	struct slotd *d = user;
	struct ctl_kv kv = { o, q->json };
	struct addr a;
	size_t n;

	if (q->arg[0] && addr_parse(q->arg, &a) == -1) {
		ctl_error(o, "flush: \"%s\" is not an IP address", q->arg);
		return;
	}
	n = d->cache ? selc_flush(d->cache, q->arg[0] ? &a : NULL) : 0;
	if (n)
		log_info("control: flushed %zu cache entr%s (%s)", n, n == 1 ? "y" : "ies",
		    q->arg[0] ? q->arg : "all");
	if (q->json)
		ctl_json_open(o, &d->ident);
	ctl_kv_str(&kv, "server", q->arg[0] ? q->arg : NULL);
	ctl_kv_uint(&kv, "flushed", n);
	ctl_kv_uint(&kv, "cache_entries", d->cache ? selc_count(d->cache) : 0);
	if (q->json)
		ctl_json_close(o);
}

/* The first nine columns are the first version's, which scripts parse. */
static const struct ctl_col relay_cols[] = {
	{ "relay", CTL_STR, NULL },
	{ "data", CTL_UINT, "data_port" },
	{ "group", CTL_UINT, NULL },
	{ "state", CTL_STR, NULL },
	{ "fails", CTL_UINT, "failures" },
	{ "probes", CTL_UINT, NULL },
	{ "pipes", CTL_UINT, "pipes_ok" },
	{ "failed", CTL_UINT, "pipes_failed" },
	{ "source", CTL_STR, NULL },
	{ "rtt", CTL_RTT, NULL },
	{ "quarantine", CTL_DUR, NULL },
	{ "rank", CTL_UINT, NULL },
	{ "rtt_est", CTL_RTT, NULL },
	{ "seen_as", CTL_STR, "observed" },
	{ "chains", CTL_BOOL, "takes_chains" },
};

static void
relays(void *user, struct ctl_table *t)
{
	struct slotd *d = user;
	uint64_t now = clock_mono_us();
	char a[EP_STRLEN];

	for (size_t i = 0; i < d->nrelays; i++) {
		const struct crelay *x = d->relays[i];
		bool quarantined = now < x->quarantine_until_us;
		ctl_cell_str(t, ep_fmt(&x->conf.control, a));
		ctl_cell_uint(t, x->conf.data_port);
		ctl_cell_uint(t, x->conf.group);
		ctl_cell_str(t, quarantined ? "quarantine" : relay_state_str(x));
		ctl_cell_uint(t, x->link ? rlink_failures(x->link) : 0);
		ctl_cell_uint(t, x->probes);
		ctl_cell_uint(t, x->pipes_ok);
		ctl_cell_uint(t, x->pipes_failed);
		ctl_cell_str(t, relay_source(x));
		if (x->rtt_us)
			ctl_cell_us(t, x->rtt_us);
		else
			ctl_cell_none(t);
		if (quarantined)
			ctl_cell_us(t, x->quarantine_until_us - now);
		else
			ctl_cell_none(t);
		if (x->rank != SEL_NO_RANK)
			ctl_cell_uint(t, x->rank);
		else
			ctl_cell_none(t);
		if (x->rtt_est_us)
			ctl_cell_us(t, x->rtt_est_us);
		else
			ctl_cell_none(t);
		/* Where the relay sees us from (its OBSERVED): another address
		 * than ours means a NAT, and pipe tokens ([nat] mode). */
		const struct endpoint *obs = x->link ? rlink_observed(x->link) : NULL;
		if (obs)
			ctl_cell_str(t, ep_fmt(obs, a));
		else
			ctl_cell_none(t);
		/* Whether it may start or carry on a chain (its answer to
		 * keepalives); unknown while down. */
		if (x->link && rlink_state(x->link) == RL_UP)
			ctl_cell_bool(t, rlink_chains(x->link));
		else
			ctl_cell_none(t);
	}
}

static const struct ctl_col rule_cols[] = {
	{ "family", CTL_STR, NULL },
	{ "table", CTL_STR, NULL },
	{ "chain", CTL_STR, NULL },
	{ "packets", CTL_UINT, NULL },
	{ "bytes", CTL_UINT, NULL },
	{ "rule", CTL_STR, NULL },
};

/* What the kernel holds, not what slotd meant to install: a rule someone
 * deleted or a jump that is missing shows as it is. */
static void
rules(void *user, const struct ctl_req *q, struct ctl_out *o)
{
	struct slotd *d = user;
	struct rules_entry *v;
	struct ctl_table t;
	char err[600];
	size_t n;

	if (rules_list(AF_UNSPEC, &d->rules_exec, &v, &n, err, sizeof(err)) == -1) {
		ctl_error(o, "cannot read the rules: %s", err);
		return;
	}
	ctl_answer_table_begin(&t, o, q->json, &d->ident, "rules", rule_cols, CTL_NCOLS(rule_cols));
	for (size_t i = 0; i < n; i++) {
		/* IPv4's rules, then IPv6's; nft's table holds both. */
		ctl_cell_str(&t, v[i].family == AF_INET ? "ipv4" : v[i].family == AF_INET6 ?
		    "ipv6" : "inet");
		ctl_cell_str(&t, v[i].table);
		ctl_cell_str(&t, v[i].chain);
		ctl_cell_uint(&t, v[i].packets);
		ctl_cell_uint(&t, v[i].bytes);
		ctl_cell_str(&t, v[i].rule);
	}
	ctl_table_end(&t);
	rules_list_free(v, n);
}

static const struct ctl_cmd cmds[] = {
	CTL_CMD_STATUS,
	CTL_CMD_TABLE("pipes", pipes, pipe_cols),
	CTL_CMD_TABLE("cache", cache, cache_cols),
	CTL_CMD_ARG("flush", flush, "flush [SERVER]"),
	CTL_CMD_TABLE("relays", relays, relay_cols),
	CTL_CMD("rules", rules),
	CTL_CMD_COUNTERS,
	CTL_CMD_METRICS,
	CTL_CMD("json", json),
};

static const struct ctl_cmds cmdset = { cmds, CTL_NCMDS(cmds), status, counters };

void
cstats_handle(void *user, const char *line, struct ctl_out *out)
{
	struct slotd *d = user;

	ctl_cmd_answer(&cmdset, d, &d->ident, line, out);
}
