#include <stdio.h>
#include <string.h>

#include "slot/peertab.h"
#include "slot/proto.h"
#include "chain.h"
#include "dirlink.h"
#include "initcwnd.h"
#include "peers.h"
#include "pipe.h"
#include "probe.h"
#include "stats.h"

static void
counters(void *user, struct ctl_counters *cs)
{
	const struct relay *r = user;
	const struct relay_counters *c = &r->ctr;
	struct dirlink_counters d = { 0 };
	const struct synp_stats *syn = probe_syn_stats(r->probe);
	struct initcwnd_stats iw;

	if (r->dir)
		dirlink_get_counters(r->dir, &d);
	initcwnd_get_stats(r, &iw);
#define C(...) ctl_counter_add(cs, __VA_ARGS__)
	C("pipes_open", c->pipes_open, CTL_GAUGE, "Pipes joined and splicing.");
	C("pipes_pending", c->pipes_pending, CTL_GAUGE,
	    "Pipes connecting to the server or waiting for the client's data connection.");
	C("pipes_total", c->pipes_total, CTL_COUNTER, "Pipes joined since start.");
	C("pipes_failed", c->pipes_failed, CTL_COUNTER, "PIPE_FAIL answers.");
	C("pipes_expired", c->pipes_expired, CTL_COUNTER, "Pending pipes never joined.");
	C("pipes_reset", c->pipes_reset, CTL_COUNTER,
	    "Open pipes ended by a reset: both sides got a RST.");
	C("pipes_peer_timeout", c->pipes_peer_timeout, CTL_COUNTER,
	    "Pipes reset because a peer stopped answering (keepalive, TCP_USER_TIMEOUT).");
	C("pipes_idle_timeout", c->pipes_idle_timeout, CTL_COUNTER,
	    "Pipes reset by idle_timeout.");
	C("pipes_half_closed_timeout", c->pipes_half_closed_timeout, CTL_COUNTER,
	    "Half-closed pipes reset by half_closed_timeout.");
	C("bytes_client_to_server", c->bytes_client_to_server, CTL_COUNTER,
	    "Bytes relayed from clients to servers.");
	C("bytes_server_to_client", c->bytes_server_to_client, CTL_COUNTER,
	    "Bytes relayed from servers to clients.");
	C("probes_answered", c->probes_answered, CTL_COUNTER,
	    "Probes answered with a measurement, fresh or cached.");
	C("probes_refused", c->probes_refused, CTL_COUNTER,
	    "Probes answered POLICY, RATE_LIMITED or BUSY.");
	C("probes_dropped", c->probes_dropped, CTL_COUNTER,
	    "Probe datagrams dropped: malformed, unauthentic, stale or replayed.");
	C("probes_uncached", c->probes_uncached, CTL_COUNTER,
	    "Measurements that may hold a retransmission timeout: answered, not cached.");
	C("measure_syn", c->measure_syn, CTL_COUNTER,
	    "RTT measurements by a bare SYN, unseen by the server's application.");
	C("measure_connect", c->measure_connect, CTL_COUNTER,
	    "RTT measurements by a TCP connect, its last ACK deferred: handover on, "
	    "or no raw socket.");
	C("handovers", c->handovers, CTL_COUNTER,
	    "Measurements' connections taken by a pipe to their server: its connect saved.");
	C("handovers_unused", c->handovers_unused, CTL_COUNTER,
	    "Measurements' connections reset unused: handover's hold over, or pushed out.");
	C("handover_preconnects", c->handover_preconnects, CTL_COUNTER,
	    "Connects begun for handover on an answer from the RTT cache.");
	C("handovers_connecting", c->handovers_connecting, CTL_COUNTER,
	    "Handovers of a connect still under way: the pipe took its socket.");
	C("handovers_held", probe_handovers_held(r->probe), CTL_GAUGE,
	    "Measurements' connections held for a pipe now.");
	C("handover_kernel", probe_ack_state(r->probe), CTL_GAUGE,
	    "The start-up check that this kernel defers a connect's last ACK, which "
	    "handover needs: 0 to come, 1 checking, 2 deferred, 3 not deferred "
	    "(handover off), 4 could not tell.");
	C("syn_retransmits", syn ? syn->syns_sent - syn->probes : 0, CTL_COUNTER,
	    "SYNs of measurements sent again, each from a new port with a new ISN.");
	C("syn_skipped", syn ? syn->skipped : 0, CTL_COUNTER,
	    "SYN-ACKs set aside as maybe the server's retransmission.");
	C("control_conns", c->control_conns, CTL_GAUGE, "Control connections open.");
	C("control_errors", c->control_errors, CTL_COUNTER,
	    "ERROR messages sent on control connections.");
	C("control_refused", c->control_refused, CTL_COUNTER,
	    "Control connections closed at once: over the per-source or global cap.");
	C("control_evicted", c->control_evicted, CTL_COUNTER,
	    "Connections without a valid message yet, closed to make room at the global cap.");
	C("control_deadline", c->control_deadline, CTL_COUNTER,
	    "Control connections closed: no valid message before the first-message deadline.");
	C("control_unauthentic", c->control_unauthentic, CTL_COUNTER,
	    "Control connections closed unanswered on a malformed or unauthentic message.");
	C("control_rate_limited", c->control_rate_limited, CTL_COUNTER,
	    "Control messages refused over their source's rate.");
	C("data_rejected", c->data_rejected, CTL_COUNTER,
	    "Data connections reset for matching no pipe.");
	C("data_early", c->data_early, CTL_COUNTER,
	    "Data connections that arrived while their pipe was still connecting.");
	C("data_held", c->data_held, CTL_COUNTER,
	    "Data connections that matched no pipe on arrival, held for a late PIPE_ESTABLISH.");
	C("data_held_joined", c->data_held_joined, CTL_COUNTER,
	    "Held data connections that joined the pipe of a late PIPE_ESTABLISH.");
	C("data_held_expired", c->data_held_expired, CTL_COUNTER,
	    "Held data connections reset: no pipe for them within data_hold.");
	C("data_held_evicted", c->data_held_evicted, CTL_COUNTER,
	    "Held data connections reset early to make room in a full hold.");
	C("pipes_tokened", c->pipes_tokened, CTL_COUNTER,
	    "Pipes requested with a token (PIPE_ESTABLISH_TOKEN: clients behind NAT).");
	C("data_token", c->data_token, CTL_COUNTER,
	    "Data connections joined to their pipe by the token in their SYN.");
	C("data_token_unknown", c->data_token_unknown, CTL_COUNTER,
	    "Data connections reset: their SYN's token matches no pending pipe.");
	C("data_token_fallback", c->data_token_fallback, CTL_COUNTER,
	    "Data connections without a token joined to the one tokened pending pipe of their address.");
	C("kpipes_in_use", r->kpipes.in_use, CTL_GAUGE, "Kernel pipes holding bytes.");
	C("kpipes_free", r->kpipes.nfree, CTL_GAUGE, "Kernel pipes pooled.");
	C("kpipes_undersized", r->kpipes.undersized, CTL_COUNTER,
	    "Kernel pipes created smaller than pipe_size.");
	C("kpipes_reserved", r->kpipes.reserved, CTL_GAUGE,
	    "Kernel pipes accounted to pipes (two each), made only when bytes flow.");
	C("kpipes_refused", r->kpipes.refused, CTL_COUNTER,
	    "Pipes refused (PIPE_FAIL limit): their kernel pipes past max_kernel_pipes or the descriptor limit.");
	C("kpipe_waits", c->kpipe_waits, CTL_COUNTER,
	    "Times a direction paused reading for want of a kernel pipe.");
	C("congestion_checks", c->congestion_checks, CTL_COUNTER,
	    "Retransmission counts read from legs the relay sends on ([pipe] "
	    "congestion_on_loss).");
	C("congestion_switches", c->congestion_switches, CTL_COUNTER,
	    "Legs switched to congestion_on_loss after they retransmitted.");
	C("send_buffers_raised", c->send_buffers_raised, CTL_COUNTER,
	    "Legs whose send buffer was raised to [pipe] send_buffer when it first filled.");
	C("initcwnd_on", iw.on, CTL_GAUGE,
	    "1 while learned initial windows are on ([pipe] learn_initcwnd).");
	C("initcwnd_prefixes", iw.prefixes, CTL_GAUGE,
	    "Destination prefixes with a learned initial window.");
	C("initcwnd_applied", iw.applied, CTL_COUNTER,
	    "Connections that started with a learned initial window.");
	C("initcwnd_samples", iw.learn.samples, CTL_COUNTER,
	    "Sending sockets of ended pipes looked at for learning.");
	C("initcwnd_learned", iw.learn.learned, CTL_COUNTER,
	    "Clean transfers that set or moved a prefix's initial window.");
	C("initcwnd_shrunk", iw.learn.shrunk, CTL_COUNTER,
	    "Transfers with retransmissions that halved a prefix's initial window.");
	C("initcwnd_expired", iw.learn.expired, CTL_COUNTER,
	    "Prefixes forgotten by initcwnd_expiry or for room.");
	C("initcwnd_map_errors", iw.map_errors, CTL_COUNTER,
	    "Failed updates of the kernel's table of initial windows.");
	C("draining", r->draining, CTL_GAUGE, "1 while draining after SIGTERM.");
	C("peer_pings", c->peer_pings, CTL_COUNTER, "Other relays' RTT probes answered.");
	C("peers", c->peers, CTL_GAUGE, "Other relays in the directory's latest list.");
	C("peer_probes_sent", c->peer_probes_sent, CTL_COUNTER,
	    "RTT probes sent to other relays.");
	C("peer_probes_answered", c->peer_probes_answered, CTL_COUNTER,
	    "RTT probes to other relays answered.");
	C("peer_probes_lost", c->peer_probes_lost, CTL_COUNTER,
	    "RTT probes to other relays never answered.");
	C("hellos_accepted", c->hellos_accepted, CTL_COUNTER,
	    "Peers authenticated by their HELLO (control connections, other relays).");
	C("hellos_refused", c->hellos_refused, CTL_COUNTER,
	    "HELLOs refused (certificate, role, validity, revoked, stale) or missing.");
	C("hellos_throttled", c->hellos_throttled, CTL_COUNTER,
	    "HELLOs on the probe port dropped unverified: over 2,000 signature checks a second.");
	C("peers_known", r->known ? peertab_count(r->known) : 0, CTL_GAUGE,
	    "Authenticated peers remembered (identity mode).");
	C("peers_revoked", c->peers_revoked, CTL_COUNTER,
	    "Peers dropped because their certificate was revoked.");
	C("chains_requested", c->chains_requested, CTL_COUNTER,
	    "PIPE_ESTABLISH_CHAIN received: this relay first or in the middle of a chain.");
	C("chains_refused", c->chains_refused, CTL_COUNTER,
	    "Chain requests refused here: [chain] allow = no, or invalid hops.");
	C("chains_failed", c->chains_failed, CTL_COUNTER,
	    "Chain requests answered PIPE_FAIL, whatever the reason (also in pipes_failed).");
	C("chains_next_hop_failed", c->chains_next_hop_failed, CTL_COUNTER,
	    "Chain requests failed NEXT_HOP here: the next relay unreachable, not a relay, "
	    "or its data connection failed.");
	C("chains_joined", c->chains_joined, CTL_COUNTER,
	    "Chain pipes joined (also in pipes_total).");
	C("chain_links", chains_links(r), CTL_GAUGE,
	    "Control links to next relays of chains, up or connecting.");
	C("dir_registered", d.registered, CTL_GAUGE,
	    "Directories holding this relay's registration.");
	C("dir_registrations", d.registrations, CTL_COUNTER, "Successful slot.register calls.");
	C("dir_heartbeats", d.heartbeats, CTL_COUNTER, "Successful slot.heartbeat calls.");
	C("dir_reports", d.reports, CTL_COUNTER, "Successful slot.report calls.");
	C("dir_report_entries", d.report_entries, CTL_COUNTER,
	    "RTTs carried by slot.report calls.");
	C("dir_lists", d.lists, CTL_COUNTER, "Successful slot.list calls.");
	C("dir_calls_failed", d.calls_failed, CTL_COUNTER,
	    "Directory calls that failed (transport or fault).");
	C("dir_lists_refused", d.lists_refused, CTL_COUNTER,
	    "Listings refused: unsigned, or a signature or certificate that does not verify.");
	C("dir_revoked", r->revoked.n, CTL_GAUGE,
	    "Serials in the directory's revocation list held.");
#undef C
}

static void
status(void *user, struct ctl_kv *kv)
{
	struct relay *r = user;
	struct dirlink_counters d = { 0 };
	const struct rconf *c = &r->conf;
	char b[EP_STRLEN];

	if (r->dir)
		dirlink_get_counters(r->dir, &d);
	ctl_kv_str(kv, "probe_listen", ep_fmt(&c->probe_listen, b));
	ctl_kv_str(kv, "control_listen", ep_fmt(&c->control_listen, b));
	ctl_kv_str(kv, "data_listen", ep_fmt(&c->data_listen, b));
	ctl_kv_str(kv, "metrics_listen", c->metrics_listen.addr.family ?
	    ep_fmt(&c->metrics_listen, b) : NULL);
	ctl_kv_uint(kv, "pipes_open", r->ctr.pipes_open);
	ctl_kv_uint(kv, "pipes_pending", r->ctr.pipes_pending);
	ctl_kv_uint(kv, "control_conns", r->ctr.control_conns);
	ctl_kv_uint(kv, "peers", peers_count(r->peers));
	ctl_kv_uint(kv, "directories", c->dir_urls.n);
	ctl_kv_uint(kv, "dir_registered", d.registered);
	ctl_kv_bool(kv, "draining", r->draining);
}

static const struct ctl_col pipe_cols[] = {
	{ "id", CTL_UINT, NULL },
	{ "client", CTL_STR, NULL },
	{ "server", CTL_STR, NULL },
	{ "state", CTL_STR, NULL },
	{ "age", CTL_DUR, NULL },
	{ "idle", CTL_DUR, NULL },
	{ "to_server", CTL_UINT, "bytes_to_server" },
	{ "to_client", CTL_UINT, "bytes_to_client" },
	{ "next", CTL_STR, NULL },	/* a chain's next relay */
	{ "hops", CTL_UINT, NULL },	/* relays after this one */
};

static void
pipe_row(void *arg, const struct pipe_view *v)
{
	struct ctl_table *t = arg;
	char b[EP_STRLEN];

	ctl_cell_uint(t, v->id);
	ctl_cell_str(t, ep_fmt(&v->client, b));
	ctl_cell_str(t, ep_fmt(&v->server, b));
	ctl_cell_str(t, v->state);
	ctl_cell_us(t, (uint64_t)(v->age_s * 1e6));
	if (strcmp(v->state, "open") == 0 || strcmp(v->state, "half-closed") == 0)
		ctl_cell_us(t, (uint64_t)(v->idle_s * 1e6));
	else
		ctl_cell_none(t);
	ctl_cell_uint(t, v->to_server);
	ctl_cell_uint(t, v->to_client);
	if (v->next.addr.family)
		ctl_cell_str(t, ep_fmt(&v->next, b));
	else
		ctl_cell_none(t);
	ctl_cell_uint(t, v->hops);
}

static void
pipes(void *user, struct ctl_table *t)
{
	pipes_view(user, pipe_row, t);
}

static const struct ctl_col cache_cols[] = {
	{ "target", CTL_STR, NULL },
	{ "status", CTL_STR, NULL },
	{ "rtt", CTL_RTT, NULL },
	{ "age", CTL_DUR, NULL },
	{ "ttl", CTL_DUR, NULL },
};

static void
cache_row(void *arg, const struct probe_cache_view *v)
{
	struct ctl_table *t = arg;
	char b[EP_STRLEN];

	ctl_cell_str(t, ep_fmt(&v->target, b));
	ctl_cell_str(t, proto_probe_status_str(v->status));
	/* A refusal (RST) is a round trip too; a timeout measured nothing. */
	if (v->status == PROBE_ST_OK || v->status == PROBE_ST_REFUSED)
		ctl_cell_us(t, v->rtt_us);
	else
		ctl_cell_none(t);
	ctl_cell_us(t, v->age_us);
	ctl_cell_us(t, v->ttl_left_us);
}

static void
cache(void *user, struct ctl_table *t)
{
	struct relay *r = user;

	/* Draining: the responder and its cache are gone. */
	if (r->probe)
		probe_cache_view(r->probe, cache_row, t);
}

static const struct ctl_col initcwnd_cols[] = {
	{ "prefix", CTL_STR, NULL },
	{ "initcwnd", CTL_UINT, NULL },
	{ "samples", CTL_UINT, NULL },
	{ "min_rtt", CTL_RTT, NULL },
	{ "age", CTL_DUR, NULL },
};

struct iw_rows {
	struct ctl_table *t;
	double now_ms;
};

static void
initcwnd_row(void *arg, const struct iwl_entry *e)
{
	struct iw_rows *w = arg;
	char b[ADDR_STRLEN + 8];
	double age = w->now_ms - (double)e->updated_ms;

	addr_fmt(&e->prefix, b);
	snprintf(b + strlen(b), sizeof(b) - strlen(b), "/%u", e->plen);
	ctl_cell_str(w->t, b);
	ctl_cell_uint(w->t, e->iw);
	ctl_cell_uint(w->t, e->samples);
	ctl_cell_us(w->t, e->min_rtt_us);
	ctl_cell_us(w->t, age > 0 ? (uint64_t)(age * 1000) : 0);
}

/* The learned initial windows, least recently updated first. */
static void
initcwnd(void *user, struct ctl_table *t)
{
	struct relay *r = user;
	struct iw_rows w = { t, ev_now(r->loop) * 1000.0 };

	initcwnd_foreach(r, initcwnd_row, &w);
}

static const struct ctl_col relay_cols[] = {
	{ "relay", CTL_STR, NULL },
	{ "rtt", CTL_RTT, NULL },
	{ "samples", CTL_UINT, NULL },
};

/* The other relays of the directory's list, as measured for it. */
static void
relays(void *user, struct ctl_table *t)
{
	struct relay *r = user;
	char b[EP_STRLEN];

	for (size_t i = 0; i < peers_count(r->peers); i++) {
		struct endpoint ep;
		uint32_t rtt;
		unsigned ns;
		peers_get(r->peers, i, &ep, &rtt, &ns);
		ctl_cell_str(t, ep_fmt(&ep, b));
		if (ns)
			ctl_cell_us(t, rtt);
		else
			ctl_cell_none(t);
		ctl_cell_uint(t, ns);
	}
}

/* The first version's command, kept as it was: the counters as one flat
 * object. */
static void
json(void *user, const struct ctl_req *q, struct ctl_out *o)
{
	struct ctl_counters cs = { 0 };

	(void)q;
	counters(user, &cs);
	ctl_counters_json(o, cs.v, cs.n);
	ctl_printf(o, "\n");
}

/* The first version's listing, which scripts parse; its JSON is that of
 * "relays". */
static void
peers(void *user, const struct ctl_req *q, struct ctl_out *o)
{
	struct relay *r = user;
	struct ctl_table t;

	if (!q->json) {
		peers_format(r->peers, o);
		return;
	}
	ctl_answer_table_begin(&t, o, true, &r->ident, "relays", relay_cols,
	    CTL_NCOLS(relay_cols));
	relays(r, &t);
	ctl_table_end(&t);
}

static const struct ctl_cmd cmds[] = {
	CTL_CMD_STATUS,
	CTL_CMD_TABLE("pipes", pipes, pipe_cols),
	CTL_CMD_TABLE("cache", cache, cache_cols),
	CTL_CMD_TABLE("relays", relays, relay_cols),
	CTL_CMD_TABLE("initcwnd", initcwnd, initcwnd_cols),
	CTL_CMD_COUNTERS,
	CTL_CMD_METRICS,
	CTL_CMD("json", json),
	CTL_CMD("peers", peers),
	CTL_CMD_REFUSED("rules", "slot-relayd installs no packet-filter rules (slotd does)"),
};

static const struct ctl_cmds cmdset = { cmds, CTL_NCMDS(cmds), status, counters };

void
stats_handle(void *user, const char *line, struct ctl_out *out)
{
	struct relay *r = user;

	ctl_cmd_answer(&cmdset, r, &r->ident, line, out);
}
