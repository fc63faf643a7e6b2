#include <stdio.h>
#include <string.h>

#include "slot/clock.h"
#include "cstats.h"
#include "dirsync.h"
#include "hold.h"
#include "relays.h"

struct counter {
	const char *name;
	unsigned long long v;
};

static size_t
counters(struct slotd *d, struct counter *v)
{
	const struct client_counters *c = &d->ctr;
	struct synq_stats qs = { 0 };
	struct dirsync_stats ds;
	size_t n = 0;

	if (d->q)
		synq_stats(d->q, &qs);
	dirsync_stats(d, &ds);
#define C(name, val) v[n++] = (struct counter){ name, (unsigned long long)(val) }
	C("syn_received", c->syn_received);
	C("syn_retransmits_dropped", c->syn_retransmits_dropped);
	C("syn_malformed", c->syn_malformed);
	C("conns_held", d->nheld);
	C("conns_lingering", d->nlinger);
	C("cache_hits", c->cache_hits);
	C("cache_misses", c->cache_misses);
	C("cache_entries", d->cache ? selc_count(d->cache) : 0);
	C("probes_sent", c->probes_sent);
	C("probe_replies", c->probe_replies);
	C("probe_replies_dropped", c->probe_replies_dropped);
	C("direct_probes", c->direct_probes);
	C("decisions_direct", c->decisions_direct);
	C("decisions_relay", c->decisions_relay);
	C("repairs", c->repairs);
	C("relay_before_direct", c->relay_before_direct);
	C("pipes_ok", c->pipes_ok);
	C("pipes_failed", c->pipes_failed);
	C("pipes_timeout", c->pipes_timeout);
	C("early_verdicts", c->early_verdicts);
	C("early_failures", c->early_failures);
	C("hold_timeouts", c->hold_timeouts);
	C("held_overflow", c->held_overflow);
	C("relays_configured", d->nrelays);
	C("relays_up", d->relays_up);
	C("reloads", c->reloads);
	C("reload_failures", c->reload_failures);
	C("rules_applied", c->rules_applied);
	C("decide_us_max", c->decide_us_max);
	C("queue_packets", qs.packets);
	C("queue_overruns", qs.overruns);
	C("queue_verdict_errors", qs.verdict_errors);
	C("dir_fetches_ok", ds.fetches_ok);
	C("dir_fetches_unchanged", ds.fetches_unchanged);
	C("dir_fetches_failed", ds.fetches_failed);
	C("dir_relays", ds.relays);
	C("dir_cache_loaded", ds.cache_loaded);
#undef C
	return n;
}

static const char *
relay_source(const struct crelay *x)
{
	return cconf_relay_from_dir(&x->conf) ? "directory" : "static";
}

/* A JSON string; the URL comes from the config file and may hold anything. */
static void
json_str(struct ctl_out *o, const char *s)
{
	ctl_printf(o, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			ctl_printf(o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			ctl_printf(o, "\\u%04x", ch);
		else
			ctl_printf(o, "%c", ch);
	}
	ctl_printf(o, "\"");
}

static void
json(struct slotd *d, struct ctl_out *o)
{
	struct counter v[64];
	size_t n = counters(d, v);
	uint64_t now = clock_mono_us();
	char a[EP_STRLEN], b[EP_STRLEN], r[EP_STRLEN];
	struct dirsync_stats ds;

	dirsync_stats(d, &ds);
	ctl_printf(o, "{\"counters\":{");
	for (size_t i = 0; i < n; i++)
		ctl_printf(o, "%s\"%s\":%llu", i ? "," : "", v[i].name, v[i].v);
	ctl_printf(o, "},\"directory\":{\"version\":");
	json_str(o, ds.version);
	ctl_printf(o, ",\"url\":");
	json_str(o, ds.url);
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
		char relay[EP_STRLEN + 2] = "null";
		if (x->relayed)
			snprintf(relay, sizeof(relay), "\"%s\"", ep_fmt(&x->relay, r));
		ctl_printf(o, "%s{\"client\":\"%s\",\"server\":\"%s\",\"verdict\":\"%s\","
		    "\"relay\":%s,\"why\":\"%s\",\"rtt_direct_us\":%u,\"path_rtt_us\":%u,"
		    "\"select_us\":%llu,\"decide_us\":%llu,\"probes\":%u,\"cached\":%s}",
		    i ? "," : "",
		    ep_fmt(&x->client, a), ep_fmt(&x->server, b),
		    x->relayed ? "relay" : "direct", relay, x->why, x->rtt_direct_us,
		    x->path_rtt_us, (unsigned long long)x->select_us,
		    (unsigned long long)x->decide_us, x->probes,
		    x->cached ? "true" : "false");
	}
	ctl_printf(o, "]}\n");
}

static void
relays(struct slotd *d, struct ctl_out *o)
{
	uint64_t now = clock_mono_us();
	char a[EP_STRLEN];

	ctl_printf(o, "%-24s %5s %10s %-10s %5s %8s %8s %8s %s\n", "relay", "data", "group",
	    "state", "fails", "probes", "pipes", "failed", "source");
	for (size_t i = 0; i < d->nrelays; i++) {
		const struct crelay *x = d->relays[i];
		ctl_printf(o, "%-24s %5u %10u %-10s %5u %8llu %8llu %8llu %s\n",
		    ep_fmt(&x->conf.control, a), x->conf.data_port, x->conf.group,
		    now < x->quarantine_until_us ? "quarantine" : relay_state_str(x),
		    x->link ? rlink_failures(x->link) : 0, x->probes, x->pipes_ok,
		    x->pipes_failed, relay_source(x));
	}
}

void
cstats_handle(void *user, const char *cmd, struct ctl_out *out)
{
	struct slotd *d = user;
	struct counter v[64];

	if (strcmp(cmd, "counters") == 0) {
		size_t n = counters(d, v);
		for (size_t i = 0; i < n; i++)
			ctl_printf(out, "%s %llu\n", v[i].name, v[i].v);
	} else if (strcmp(cmd, "json") == 0) {
		json(d, out);
	} else if (strcmp(cmd, "relays") == 0) {
		relays(d, out);
	} else {
		ctl_printf(out, "error: unknown command (try \"counters\", \"relays\" or "
		    "\"json\")\n");
	}
}
