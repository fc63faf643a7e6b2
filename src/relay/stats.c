#include <stdio.h>
#include <string.h>

#include "dirlink.h"
#include "peers.h"
#include "stats.h"

size_t
stats_format(const struct relay *r, int json, char *buf, size_t cap)
{
	const struct relay_counters *c = &r->ctr;
	struct dirlink_counters d = { 0 };

	if (r->dir)
		dirlink_get_counters(r->dir, &d);
	const struct { const char *name; unsigned long long v; } v[] = {
		{ "pipes_open", c->pipes_open },
		{ "pipes_pending", c->pipes_pending },
		{ "pipes_total", c->pipes_total },
		{ "pipes_failed", c->pipes_failed },
		{ "pipes_expired", c->pipes_expired },
		{ "bytes_client_to_server", c->bytes_client_to_server },
		{ "bytes_server_to_client", c->bytes_server_to_client },
		{ "probes_answered", c->probes_answered },
		{ "probes_refused", c->probes_refused },
		{ "probes_dropped", c->probes_dropped },
		{ "control_conns", c->control_conns },
		{ "control_errors", c->control_errors },
		{ "data_rejected", c->data_rejected },
		{ "data_early", c->data_early },
		{ "kpipes_in_use", r->kpipes.in_use },
		{ "kpipes_free", r->kpipes.nfree },
		{ "kpipes_undersized", r->kpipes.undersized },
		{ "draining", (unsigned long long)r->draining },
		{ "peer_pings", c->peer_pings },
		{ "peers", c->peers },
		{ "peer_probes_sent", c->peer_probes_sent },
		{ "peer_probes_answered", c->peer_probes_answered },
		{ "peer_probes_lost", c->peer_probes_lost },
		{ "dir_registered", d.registered },
		{ "dir_registrations", d.registrations },
		{ "dir_heartbeats", d.heartbeats },
		{ "dir_reports", d.reports },
		{ "dir_report_entries", d.report_entries },
		{ "dir_lists", d.lists },
		{ "dir_calls_failed", d.calls_failed },
	};
	size_t n = 0, nv = sizeof(v) / sizeof(v[0]);

	buf[0] = '\0';
	for (size_t i = 0; i < nv && n < cap; i++) {
		int w = json ?
		    snprintf(buf + n, cap - n, "%s\"%s\":%llu%s", i ? "" : "{", v[i].name,
			v[i].v, i + 1 < nv ? "," : "}\n") :
		    snprintf(buf + n, cap - n, "%s %llu\n", v[i].name, v[i].v);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	return n < cap ? n : cap - 1;
}

void
stats_handle(void *user, const char *cmd, struct ctl_out *out)
{
	char buf[4096];

	if (strcmp(cmd, "counters") == 0 || strcmp(cmd, "json") == 0) {
		size_t n = stats_format(user, cmd[0] == 'j', buf, sizeof(buf));
		ctl_printf(out, "%.*s", (int)n, buf);
	} else if (strcmp(cmd, "peers") == 0) {
		peers_format(((struct relay *)user)->peers, out);
	} else {
		ctl_printf(out, "error: unknown command (try \"counters\", \"json\" or "
		    "\"peers\")\n");
	}
}
