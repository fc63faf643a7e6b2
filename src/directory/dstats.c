#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/clock.h"
#include "dstats.h"

void
dstats_answer(struct dird *d, const struct dhttp_counters *hc, const char *cmd,
    struct ctl_out *out)
{
	bool json = strcmp(cmd, "json") == 0;
	struct dstate_entry *e = NULL;
	size_t n = 0, ngroups;
	char version[DSTATE_VERSION_LEN];
	struct dird_counters c;
	int rc = 0;

	if (!json && strcmp(cmd, "counters") != 0) {
		ctl_printf(out, "error: unknown command (try \"counters\" or \"json\")\n");
		return;
	}
	/* Copy under the lock, format after. */
	pthread_mutex_lock(&d->mu);
	c = d->ctr;
	ngroups = dstate_ngroups(d->state);
	dstate_version(d->state, version);
	if (json)
		rc = dstate_listing(d->state, clock_mono_us(), &e, &n);
	else
		n = dstate_count(d->state);
	pthread_mutex_unlock(&d->mu);

	const struct { const char *name; unsigned long long v; } v[] = {
		{ "relays", n },
		{ "groups", ngroups },
		{ "connections", hc->conns },
		{ "connections_active", hc->conns_active },
		{ "requests", hc->requests },
		{ "requests_refused", hc->refused },
		{ "calls_register", c.calls_register },
		{ "calls_heartbeat", c.calls_heartbeat },
		{ "calls_report", c.calls_report },
		{ "calls_list", c.calls_list },
		{ "faults_malformed", c.faults_malformed },
		{ "faults_auth", c.faults_auth },
		{ "faults_stale", c.faults_stale },
		{ "faults_unknown_relay", c.faults_unknown_relay },
		{ "faults_limit", c.faults_limit },
		{ "faults_internal", c.faults_internal },
		{ "relays_registered", c.relays_registered },
		{ "relays_expired", c.relays_expired },
		{ "report_entries", c.report_entries },
		{ "lists_full", c.lists_full },
		{ "lists_unchanged", c.lists_unchanged },
		{ "regroups", c.regroups },
		{ "regroup_errors", c.regroup_errors },
		{ "snapshots_written", c.snapshots_written },
		{ "snapshot_errors", c.snapshot_errors },
	};
	size_t nv = sizeof(v) / sizeof(v[0]);

	if (!json) {
		for (size_t i = 0; i < nv; i++)
			ctl_printf(out, "%s %llu\n", v[i].name, v[i].v);
		return;
	}
	if (rc == -1) {
		ctl_printf(out, "{\"error\":\"out of memory\"}\n");
		return;
	}
	ctl_printf(out, "{\"counters\":{");
	for (size_t i = 0; i < nv; i++)
		ctl_printf(out, "%s\"%s\":%llu", i ? "," : "", v[i].name, v[i].v);
	/* Versions and endpoints hold only hex digits, digits, '-', '.', ':'
	 * and brackets: nothing JSON must escape. */
	ctl_printf(out, "},\"version\":\"%s\",\"relays\":[", version);
	for (size_t i = 0; i < n; i++)
		ctl_printf(out, "%s{\"relay\":\"%s\",\"data_port\":%u,\"group\":%u,"
		    "\"age_s\":%.1f,\"rtts\":%zu}", i ? "," : "", e[i].relay,
		    (unsigned)e[i].data_port, (unsigned)e[i].group,
		    (double)e[i].age_us / 1e6, e[i].nrtt);
	ctl_printf(out, "]}\n");
	free(e);
}
