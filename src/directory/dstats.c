#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/clock.h"
#include "dstats.h"

/* What dstats_answer's commands are given. */
struct dctl {
	const struct ctl_ident *id;
	struct dird *d;
	const struct dhttp_counters *hc;
};

/* What one answer needs from the shared state, copied under the lock so
 * that the formatting runs without it. */
struct snap {
	struct dird_counters c;
	size_t nrelays, ngroups;
	bool regroup_running, regroup_pending;
	char version[DSTATE_VERSION_LEN];
	struct dstate_entry *e;		/* with_listing only; malloc'ed */
	int listing_rc;
};

static void
take(struct dird *d, bool with_listing, struct snap *s)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_lock(&d->mu);
	s->c = d->ctr;
	s->regroup_running = d->regroup_running;
	s->regroup_pending = dstate_regroup_pending(d->state);
	s->ngroups = dstate_ngroups(d->state);
	dstate_version(d->state, s->version);
	if (with_listing)
		s->listing_rc = dstate_listing(d->state, clock_mono_us(), &s->e, &s->nrelays);
	else
		s->nrelays = dstate_count(d->state);
	pthread_mutex_unlock(&d->mu);
}

static void
snap_counters(const struct snap *s, const struct dhttp_counters *hc, struct ctl_counters *cs)
{
	const struct dird_counters *c = &s->c;
#define C(...) ctl_counter_add(cs, __VA_ARGS__)
	C("relays", s->nrelays, CTL_GAUGE, "Registered relays.");
	C("groups", s->ngroups, CTL_GAUGE, "Groups in the listing.");
	C("connections", hc->conns, CTL_COUNTER, "HTTP connections accepted.");
	C("connections_active", hc->conns_active, CTL_GAUGE, "HTTP connections being served.");
	C("connections_sources", hc->sources_active, CTL_GAUGE,
	    "Sources (IPv4 addresses, IPv6 /64s) of the connections being served.");
	C("connections_refused_source", hc->refused_source, CTL_COUNTER,
	    "HTTP connections refused (503): the source held max_conns_per_source.");
	C("connections_timed_out", hc->timed_out, CTL_COUNTER,
	    "HTTP connections cut at header_timeout or body_timeout.");
	C("requests", hc->requests, CTL_COUNTER, "XML-RPC request bodies received.");
	C("requests_refused", hc->refused, CTL_COUNTER,
	    "XML-RPC requests refused unparsed: not plain UTF-8 XML (a DTD, a BOM...).");
	C("calls_register", c->calls_register, CTL_COUNTER, "slot.register calls.");
	C("calls_heartbeat", c->calls_heartbeat, CTL_COUNTER, "slot.heartbeat calls.");
	C("calls_report", c->calls_report, CTL_COUNTER, "slot.report calls.");
	C("calls_list", c->calls_list, CTL_COUNTER, "slot.list calls.");
	C("faults_malformed", c->faults_malformed, CTL_COUNTER, "Calls refused as malformed.");
	C("faults_auth", c->faults_auth, CTL_COUNTER, "Calls refused: MAC or signature does "
	    "not verify, certificate refused (CA, validity, role, revoked), or the relay is "
	    "another key's.");
	C("faults_stale", c->faults_stale, CTL_COUNTER,
	    "Calls refused: timestamp out of the window, or replayed.");
	C("faults_unknown_relay", c->faults_unknown_relay, CTL_COUNTER,
	    "Heartbeats and reports from relays not registered.");
	C("faults_limit", c->faults_limit, CTL_COUNTER, "Registrations refused at max_relays.");
	C("faults_internal", c->faults_internal, CTL_COUNTER, "Calls failed internally.");
	C("relays_registered", c->relays_registered, CTL_COUNTER,
	    "Relays new to the directory.");
	C("relays_expired", c->relays_expired, CTL_COUNTER, "Relays expired for silence.");
	C("relays_revoked", c->relays_revoked, CTL_COUNTER,
	    "Relays removed for a revoked or expired certificate.");
	C("revoked", c->revoked, CTL_GAUGE, "Serials in the revocation list.");
	C("report_entries", c->report_entries, CTL_COUNTER, "RTT report entries stored.");
	C("lists_full", c->lists_full, CTL_COUNTER, "slot.list answered with the listing.");
	C("lists_unchanged", c->lists_unchanged, CTL_COUNTER, "slot.list answered \"unchanged\".");
	C("regroups", c->regroups, CTL_COUNTER, "Clusterings run.");
	C("regroup_errors", c->regroup_errors, CTL_COUNTER, "Clusterings that failed.");
	C("group_changes", c->group_changes, CTL_COUNTER,
	    "Relays whose group a regroup changed (relays grouped for the first time not "
	    "counted).");
	C("regroup_last_changes", c->regroup_last_changes, CTL_GAUGE,
	    "Relays whose group the last regroup applied changed.");
	C("regroup_last_ms", c->regroup_last_us / 1000, CTL_GAUGE,
	    "Milliseconds the last regroup took, snapshot to stable ids.");
	C("regroup_running", s->regroup_running, CTL_GAUGE,
	    "1 while the regroup thread clusters.");
	C("regroup_pending", s->regroup_pending, CTL_GAUGE,
	    "1 while changes wait for a regroup.");
	C("snapshots_written", c->snapshots_written, CTL_COUNTER, "State snapshots written.");
	C("snapshot_errors", c->snapshot_errors, CTL_COUNTER, "State snapshots that failed.");
#undef C
}

static void
counters(void *user, struct ctl_counters *cs)
{
	struct dctl *x = user;
	struct snap s;

	take(x->d, false, &s);
	snap_counters(&s, x->hc, cs);
}

static void
status(void *user, struct ctl_kv *kv)
{
	struct dctl *x = user;
	struct snap s;
	char b[EP_STRLEN];

	take(x->d, false, &s);
	ctl_kv_str(kv, "listen", ep_fmt(&x->d->conf.listen, b));
	ctl_kv_str(kv, "metrics_listen", x->d->conf.metrics_listen.addr.family ?
	    ep_fmt(&x->d->conf.metrics_listen, b) : NULL);
	ctl_kv_uint(kv, "relays", s.nrelays);
	ctl_kv_uint(kv, "groups", s.ngroups);
	ctl_kv_str(kv, "listing_version", s.version);
	ctl_kv_uint(kv, "connections_active", x->hc->conns_active);
}

static const struct ctl_col relay_cols[] = {
	{ "relay", CTL_STR, NULL },
	{ "data", CTL_UINT, "data_port" },
	{ "group", CTL_UINT, NULL },
	{ "age", CTL_DUR, NULL },
	{ "rtts", CTL_UINT, NULL },
};

static void
relays(void *user, const struct ctl_req *q, struct ctl_out *out)
{
	struct dctl *x = user;
	struct ctl_table t;
	struct snap s;

	take(x->d, true, &s);
	if (s.listing_rc == -1) {
		ctl_error(out, "out of memory");
		return;
	}
	ctl_answer_table_begin(&t, out, q->json, x->id, "relays", relay_cols,
	    CTL_NCOLS(relay_cols));
	for (size_t i = 0; i < s.nrelays; i++) {
		ctl_cell_str(&t, s.e[i].relay);
		ctl_cell_uint(&t, s.e[i].data_port);
		ctl_cell_uint(&t, s.e[i].group);
		ctl_cell_us(&t, s.e[i].age_us);
		ctl_cell_uint(&t, s.e[i].nrtt);
	}
	ctl_table_end(&t);
	free(s.e);
}

/* The first version's object, kept as it was. Versions and endpoints hold
 * only hex digits, digits, '-', '.', ':' and brackets: nothing JSON must
 * escape. */
static void
json(void *user, const struct ctl_req *q, struct ctl_out *out)
{
	struct dctl *x = user;
	struct ctl_counters cs = { 0 };
	struct snap s;

	(void)q;
	take(x->d, true, &s);
	if (s.listing_rc == -1) {
		ctl_error(out, "out of memory");
		return;
	}
	snap_counters(&s, x->hc, &cs);
	ctl_printf(out, "{\"counters\":");
	ctl_counters_json(out, cs.v, cs.n);
	ctl_printf(out, ",\"version\":\"%s\",\"relays\":[", s.version);
	for (size_t i = 0; i < s.nrelays; i++)
		ctl_printf(out, "%s{\"relay\":\"%s\",\"data_port\":%u,\"group\":%u,"
		    "\"age_s\":%.1f,\"rtts\":%zu}", i ? "," : "", s.e[i].relay,
		    (unsigned)s.e[i].data_port, (unsigned)s.e[i].group,
		    (double)s.e[i].age_us / 1e6, s.e[i].nrtt);
	ctl_printf(out, "]}\n");
	free(s.e);
}

#define ABSENT(name) CTL_CMD_REFUSED(name, "slot-dird has no " name " (relays and slotd do)")

static const struct ctl_cmd cmds[] = {
	CTL_CMD_STATUS,
	CTL_CMD("relays", relays),
	CTL_CMD_COUNTERS,
	CTL_CMD_METRICS,
	CTL_CMD("json", json),
	ABSENT("pipes"),
	ABSENT("cache"),
	ABSENT("rules"),
};

static const struct ctl_cmds cmdset = { cmds, CTL_NCMDS(cmds), status, counters };

void
dstats_answer(const struct ctl_ident *id, struct dird *d, const struct dhttp_counters *hc,
    const char *line, struct ctl_out *out)
{
	struct dctl x = { id, d, hc };

	ctl_cmd_answer(&cmdset, &x, id, line, out);
}
