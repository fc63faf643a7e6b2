/* slot-dird's registry (src/directory/dstate.c) and its snapshot
 * (src/directory/dsnap.c): registration, versions, reports, expiry, the
 * grouping input, and the state file's round trip and refusals. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <sodium.h>

#include "slot/mcl.h"
#include "slot/rng.h"
#include "../../src/directory/dsnap.h"
#include "../../src/directory/dstate.h"

#define S 1000000ull
#define BOOT 0x0123456789abcdefull

static const struct dstate_params params = { .expire_after_us = 120 * S, .max_relays = 100 };

static struct endpoint
E(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static struct endpoint
relay_n(int i)
{
	char b[32];

	snprintf(b, sizeof(b), "192.0.2.%d:7600", i);
	return E(b);
}

static struct dstate *
new_state(void)
{
	struct dstate *s = dstate_new(&params, BOOT);

	assert_non_null(s);
	return s;
}

static void
reg(struct dstate *s, int i, uint64_t now)
{
	struct endpoint e = relay_n(i);
	enum dstate_rc rc = dstate_register(s, &e, 7601, now);

	assert_true(rc == DSTATE_NEW || rc == DSTATE_OK);
}

static size_t
report(struct dstate *s, int from, int to, uint32_t rtt_us)
{
	struct endpoint f = relay_n(from);
	struct dstate_rtt_in in = { .peer = relay_n(to), .rtt_us = rtt_us };
	size_t acc = 99;

	assert_int_equal(dstate_report(s, &f, &in, 1, &acc), DSTATE_OK);
	return acc;
}

static void
test_register_and_versions(void **state)
{
	struct dstate *s = new_state();
	struct endpoint a = relay_n(1), b = relay_n(2);
	char v0[DSTATE_VERSION_LEN], v1[DSTATE_VERSION_LEN], v2[DSTATE_VERSION_LEN];
	struct dstate_entry *e;
	size_t n;
	(void)state;

	dstate_version(s, v0);
	assert_string_equal(v0, "0123456789abcdef-0");
	assert_int_equal(dstate_register(s, &a, 7601, 10 * S), DSTATE_NEW);
	assert_int_equal(dstate_register(s, &b, 7602, 11 * S), DSTATE_NEW);
	dstate_version(s, v1);
	assert_string_not_equal(v0, v1);
	assert_int_equal(dstate_count(s), 2);

	/* Registering again with the same data port, or a heartbeat: the
	 * listing is the same, so is the version. */
	assert_int_equal(dstate_register(s, &a, 7601, 12 * S), DSTATE_OK);
	assert_int_equal(dstate_heartbeat(s, &b, 13 * S), DSTATE_OK);
	dstate_version(s, v2);
	assert_string_equal(v1, v2);
	/* A new data port is a new listing. */
	assert_int_equal(dstate_register(s, &a, 9000, 14 * S), DSTATE_OK);
	dstate_version(s, v2);
	assert_string_not_equal(v1, v2);

	/* The listing: registration order, a group each until a regroup. */
	assert_int_equal(dstate_listing(s, 20 * S, &e, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(e[0].relay, "192.0.2.1:7600");
	assert_int_equal(e[0].data_port, 9000);
	assert_int_equal(e[0].age_us, 6 * S);
	assert_string_equal(e[1].relay, "192.0.2.2:7600");
	assert_int_equal(e[1].data_port, 7602);
	assert_int_equal(e[1].age_us, 7 * S);
	assert_int_not_equal(e[0].group, e[1].group);
	assert_int_equal(dstate_ngroups(s), 2);
	free(e);
	dstate_free(s);
}

static void
test_unknown_and_limit(void **state)
{
	struct dstate_params p = params;
	struct dstate *s;
	struct endpoint x = relay_n(9);
	size_t acc;
	(void)state;

	p.max_relays = 3;
	s = dstate_new(&p, BOOT);
	assert_int_equal(dstate_heartbeat(s, &x, 0), DSTATE_UNKNOWN);
	assert_int_equal(dstate_report(s, &x, NULL, 0, &acc), DSTATE_UNKNOWN);
	for (int i = 1; i <= 3; i++)
		reg(s, i, 0);
	assert_int_equal(dstate_register(s, &x, 7601, 0), DSTATE_LIMIT);
	/* A known relay may always register again. */
	struct endpoint a = relay_n(1);
	assert_int_equal(dstate_register(s, &a, 7601, 1), DSTATE_OK);
	assert_false(dstate_has(s, &x));
	assert_true(dstate_has(s, &a));
	dstate_free(s);
}

static void
test_report_merges(void **state)
{
	struct dstate *s = new_state();
	struct endpoint a = relay_n(1);
	size_t acc, peer;
	uint32_t rtt;
	struct dstate_relay_view v;
	(void)state;

	for (int i = 1; i <= 4; i++)
		reg(s, i, 0);
	struct dstate_rtt_in in[] = {
		{ relay_n(3), 3000 },
		{ relay_n(2), 2000 },
		{ relay_n(9), 9000 },	/* not registered: skipped */
		{ relay_n(1), 1 },	/* itself: skipped */
		{ relay_n(2), 2500 },	/* the later entry wins */
	};
	assert_int_equal(dstate_report(s, &a, in, 5, &acc), DSTATE_OK);
	assert_int_equal(acc, 2);
	dstate_relay_at(s, 0, &v);
	assert_int_equal(v.nrtt, 2);
	dstate_rtt_at(s, 0, 0, &peer, &rtt);
	assert_int_equal(peer, 1);
	assert_int_equal(rtt, 2500);
	dstate_rtt_at(s, 0, 1, &peer, &rtt);
	assert_int_equal(peer, 2);
	assert_int_equal(rtt, 3000);

	/* A second report replaces what it names and keeps the rest. */
	assert_int_equal(report(s, 1, 4, 4000), 1);
	assert_int_equal(report(s, 1, 3, 3300), 1);
	dstate_relay_at(s, 0, &v);
	assert_int_equal(v.nrtt, 3);
	dstate_rtt_at(s, 0, 1, &peer, &rtt);
	assert_int_equal(peer, 2);
	assert_int_equal(rtt, 3300);
	dstate_rtt_at(s, 0, 2, &peer, &rtt);
	assert_int_equal(peer, 3);
	assert_int_equal(rtt, 4000);
	dstate_free(s);
}

static void
test_matrix(void **state)
{
	struct dstate *s = new_state();
	double *m;
	size_t n;
	uint64_t gen;
	(void)state;

	for (int i = 1; i <= 3; i++)
		reg(s, i, 0);
	report(s, 1, 2, 10000);
	report(s, 2, 1, 20000);	/* both sides: the mean */
	report(s, 3, 1, 5000);	/* one side: that one */
	assert_true(dstate_regroup_pending(s));
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	assert_false(dstate_regroup_pending(s));
	assert_int_equal(n, 3);
	assert_true(m[0 * 3 + 1] == 15.0 && m[1 * 3 + 0] == 15.0);
	assert_true(m[0 * 3 + 2] == 5.0 && m[2 * 3 + 0] == 5.0);
	assert_true(isnan(m[1 * 3 + 2]) && isnan(m[2 * 3 + 1]));
	assert_true(m[0] == 0.0 && m[4] == 0.0 && m[8] == 0.0);
	free(m);
	dstate_free(s);
}

/* The sparse input holds the same pairs as the matrix, whatever reported
 * what, and says which relays were never grouped. */
static void
test_graph(void **state)
{
	enum { N = 12 };
	struct dstate *s = new_state();
	struct mcl_gparams gp = { .keep = 0, .edge_max_ms = INFINITY, .wide_ms = 40.0 };
	struct mcl_graph g;
	struct rng r;
	double *m;
	size_t n;
	uint64_t gen, gen2;
	uint32_t *old, grp[N];
	char err[128];
	(void)state;

	rng_seed(&r, 9);
	for (int i = 1; i <= N; i++)
		reg(s, i, 0);
	for (int i = 1; i <= N; i++)
		for (int j = 1; j <= N; j++)
			if (i != j && rng_below(&r, 3) != 0)
				report(s, i, j, 1000 + (uint32_t)rng_below(&r, 80000));
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	assert_int_equal(dstate_rtt_graph(s, &gp, &g, &old, &gen2, err, sizeof(err)), 0);
	assert_int_equal(gen, gen2);
	assert_false(dstate_regroup_pending(s));
	assert_int_equal(g.n, n);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(old[i], UINT32_MAX);
		for (size_t j = 0; j < n; j++) {
			double e = mcl_graph_rtt(&g, i, j);

			if (i == j || isnan(m[i * n + j]))
				assert_true(isnan(e));
			else
				assert_true(e == m[i * n + j]);
			assert_int_equal(mcl_graph_wide(&g, i, j),
			    i != j && !isnan(m[i * n + j]) && m[i * n + j] > 40.0);
		}
	}
	free(m);
	free(old);
	mcl_graph_free(&g);
	/* Once grouped, the groups come back as old. */
	for (size_t i = 0; i < n; i++)
		grp[i] = (uint32_t)(i / 3);
	assert_int_equal(dstate_apply_groups(s, gen, grp, n), 1);
	assert_int_equal(dstate_rtt_graph(s, &gp, &g, &old, &gen2, err, sizeof(err)), 0);
	assert_memory_equal(old, grp, n * sizeof(*old));
	free(old);
	mcl_graph_free(&g);
	dstate_free(s);
}

static void
test_groups_apply(void **state)
{
	struct dstate *s = new_state();
	char v0[DSTATE_VERSION_LEN], v1[DSTATE_VERSION_LEN];
	double *m;
	size_t n;
	uint64_t gen;
	(void)state;

	for (int i = 1; i <= 3; i++)
		reg(s, i, 0);
	assert_int_equal(dstate_ngroups(s), 3);
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	free(m);
	uint32_t g[3] = { 0, 0, 1 };
	dstate_version(s, v0);
	assert_int_equal(dstate_apply_groups(s, gen, g, 3), 1);
	dstate_version(s, v1);
	assert_string_not_equal(v0, v1);
	assert_int_equal(dstate_ngroups(s), 2);
	/* The same groups again: nothing moves. */
	assert_int_equal(dstate_apply_groups(s, gen, g, 3), 0);
	dstate_version(s, v0);
	assert_string_equal(v0, v1);
	/* The relay set changed since the matrix: refused, pending again. */
	reg(s, 4, 0);
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	free(m);
	reg(s, 5, 0);
	uint32_t g4[4] = { 0, 0, 0, 0 };
	assert_int_equal(dstate_apply_groups(s, gen, g4, 4), -1);
	assert_true(dstate_regroup_pending(s));
	/* A newcomer's provisional group is one nobody else has. */
	struct dstate_entry *e;
	assert_int_equal(dstate_listing(s, 0, &e, &n), 0);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < 4; i++)
		assert_int_not_equal(e[4].group, e[i].group);
	free(e);
	dstate_free(s);
}

static void
test_expiry(void **state)
{
	struct dstate *s = new_state();
	char v0[DSTATE_VERSION_LEN], v1[DSTATE_VERSION_LEN];
	struct dstate_relay_view v;
	size_t peer;
	uint32_t rtt;
	(void)state;

	reg(s, 1, 0);
	reg(s, 2, 100 * S);
	reg(s, 3, 0);
	report(s, 2, 1, 1000);
	report(s, 2, 3, 3000);
	report(s, 1, 2, 1000);
	dstate_version(s, v0);
	assert_int_equal(dstate_expire(s, 120 * S, NULL, NULL), 0);
	struct endpoint b = relay_n(2);
	assert_int_equal(dstate_heartbeat(s, &b, 121 * S), DSTATE_OK);
	/* 1 and 3 are silent for 121 s > 120 s; 2 spoke 0 s ago. */
	assert_int_equal(dstate_expire(s, 121 * S, NULL, NULL), 2);
	dstate_version(s, v1);
	assert_string_not_equal(v0, v1);
	assert_int_equal(dstate_count(s), 1);
	dstate_relay_at(s, 0, &v);
	assert_string_equal(v.relay, "192.0.2.2:7600");
	/* Its reports about the expired relays went with them. */
	assert_int_equal(v.nrtt, 0);
	assert_true(dstate_regroup_pending(s));
	/* The expired relay must register again. */
	struct endpoint a = relay_n(1);
	assert_int_equal(dstate_heartbeat(s, &a, 122 * S), DSTATE_UNKNOWN);
	reg(s, 1, 122 * S);
	report(s, 1, 2, 777);
	dstate_relay_at(s, 1, &v);
	assert_int_equal(v.nrtt, 1);
	dstate_rtt_at(s, 1, 0, &peer, &rtt);
	assert_int_equal(peer, 0);
	assert_int_equal(rtt, 777);
	dstate_free(s);
}

/* Two sites of three relays: 1 ms inside, 60 ms between. */
static void
test_two_sites_group(void **state)
{
	struct dstate *s = new_state();
	struct mcl_params mp;
	double *m;
	size_t n, ngroups;
	uint64_t gen;
	uint32_t g[6];
	char err[128];
	struct dstate_entry *e;
	(void)state;

	for (int i = 1; i <= 6; i++)
		reg(s, i, 0);
	for (int i = 1; i <= 6; i++)
		for (int j = 1; j <= 6; j++)
			if (i != j)
				report(s, i, j, (i <= 3) == (j <= 3) ? 1000 : 60000);
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	mcl_params_default(&mp);
	assert_int_equal(mcl_groups(m, n, &mp, g, &ngroups, err, sizeof(err)), 0);
	free(m);
	assert_int_equal(ngroups, 2);
	assert_int_equal(dstate_apply_groups(s, gen, g, n), 1);
	assert_int_equal(dstate_listing(s, 0, &e, &n), 0);
	assert_int_equal(e[0].group, e[1].group);
	assert_int_equal(e[0].group, e[2].group);
	assert_int_equal(e[3].group, e[4].group);
	assert_int_equal(e[3].group, e[5].group);
	assert_int_not_equal(e[0].group, e[3].group);
	free(e);
	dstate_free(s);
}

/* A state of three relays with reports and groups, seen at mono 50 s,
 * wall 1000 s. */
static struct dstate *
sample(void)
{
	struct dstate *s = new_state();
	double *m;
	size_t n;
	uint64_t gen;

	reg(s, 1, 40 * S);
	reg(s, 2, 45 * S);
	struct endpoint c = E("[2001:db8::3]:7700");
	assert_int_equal(dstate_register(s, &c, 7701, 50 * S), DSTATE_NEW);
	report(s, 1, 2, 1500);
	struct endpoint a = relay_n(1);
	struct dstate_rtt_in in[] = { { c, 90000 } };
	size_t acc;
	assert_int_equal(dstate_report(s, &a, in, 1, &acc), DSTATE_OK);
	assert_int_equal(dstate_rtt_matrix(s, &m, &n, &gen), 0);
	free(m);
	uint32_t g[3] = { 0, 0, 1 };
	assert_int_equal(dstate_apply_groups(s, gen, g, 3), 1);
	return s;
}

static void
test_snapshot_round_trip(void **state)
{
	struct dstate *s = sample(), *t;
	struct dsnap_info info;
	char *buf, *buf2, err[256], v0[DSTATE_VERSION_LEN], v1[DSTATE_VERSION_LEN];
	size_t len, len2;
	(void)state;

	assert_int_equal(dsnap_format(s, 50 * S, 1000 * S, true,
	    DSNAP_RTT_BUDGET, &buf, &len, NULL), 0);
	assert_int_equal(strlen(buf), len);
	assert_non_null(strstr(buf, "slot-dird-state 1\nboot 0123456789abcdef\n"));
	assert_non_null(strstr(buf, "\nclean 1\n"));
	assert_non_null(strstr(buf, "\nrelay 192.0.2.1:7600 7601 0 990000000\n"));
	assert_non_null(strstr(buf, "\nrelay [2001:db8::3]:7700 7701 1 1000000000\n"));
	assert_non_null(strstr(buf, "\nrtt 192.0.2.1:7600 [2001:db8::3]:7700 90000\n"));
	assert_non_null(strstr(buf, "\nend 3 2\n"));

	/* Restored 30 s later, the monotonic clock at 100 s: same listing,
	 * same version since it was saved at exit. */
	t = dsnap_parse(buf, len, &params, 100 * S, 1030 * S, 42, &info, err, sizeof(err));
	if (t == NULL)
		fail_msg("%s", err);
	assert_true(info.clean);
	assert_int_equal(info.relays, 3);
	assert_int_equal(info.rtts, 2);
	assert_int_equal(info.dropped, 0);
	dstate_version(s, v0);
	dstate_version(t, v1);
	assert_string_equal(v0, v1);
	struct dstate_entry *e;
	size_t n;
	assert_int_equal(dstate_listing(t, 100 * S, &e, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(e[2].relay, "[2001:db8::3]:7700");
	assert_int_equal(e[2].group, 1);
	assert_int_equal(e[0].age_us, 40 * S);	/* 10 s before the save, 30 s down */
	assert_int_equal(e[2].age_us, 30 * S);
	free(e);
	/* Saved again at that instant: the same records. */
	assert_int_equal(dsnap_format(t, 100 * S, 1030 * S, true,
	    DSNAP_RTT_BUDGET, &buf2, &len2, NULL), 0);
	assert_string_equal(strstr(buf2, "\nrelay"), strstr(buf, "\nrelay"));
	free(buf2);
	dstate_free(t);

	/* A monotonic clock younger than the downtime (a rebooted host):
	 * the relays are kept, not taken for fresh by mistake nor dropped. */
	t = dsnap_parse(buf, len, &params, 5 * S, 1030 * S, 42, &info, err, sizeof(err));
	assert_non_null(t);
	assert_int_equal(info.relays, 3);
	dstate_free(t);

	/* Not saved at exit: a new boot id, so a new version. */
	free(buf);
	assert_int_equal(dsnap_format(s, 50 * S, 1000 * S, false,
	    DSNAP_RTT_BUDGET, &buf, &len, NULL), 0);
	t = dsnap_parse(buf, len, &params, 5 * S, 1030 * S, 42, &info, err, sizeof(err));
	assert_non_null(t);
	assert_false(info.clean);
	dstate_version(t, v1);
	assert_string_equal(v1, "000000000000002a-4");
	assert_string_not_equal(v0, v1);
	dstate_free(t);
	free(buf);
	dstate_free(s);
}

static void
test_snapshot_drops_expired(void **state)
{
	struct dstate *s = sample(), *t;
	struct dsnap_info info;
	char *buf, err[256], v0[DSTATE_VERSION_LEN], v1[DSTATE_VERSION_LEN];
	size_t len;
	(void)state;

	assert_int_equal(dsnap_format(s, 50 * S, 1000 * S, true,
	    DSNAP_RTT_BUDGET, &buf, &len, NULL), 0);
	/* 115 s later: relay 1 (seen at 990 s) is 125 s old, the others 120
	 * s and 115 s: only relay 1 goes, with its two reports. */
	t = dsnap_parse(buf, len, &params, 5 * S, 1115 * S, 42, &info, err, sizeof(err));
	if (t == NULL)
		fail_msg("%s", err);
	assert_int_equal(info.relays, 2);
	assert_int_equal(info.dropped, 1);
	assert_int_equal(info.rtts, 0);
	dstate_version(s, v0);
	dstate_version(t, v1);
	assert_string_not_equal(v0, v1);
	struct endpoint a = relay_n(1);
	assert_false(dstate_has(t, &a));
	dstate_free(t);
	free(buf);
	dstate_free(s);
}

static void
corrupt(const char *text, const char *want)
{
	struct dsnap_info info;
	char err[256] = "";
	struct dstate *t = dsnap_parse(text, strlen(text), &params, 5 * S, 1000 * S, 42, &info,
	    err, sizeof(err));

	if (t != NULL)
		fail_msg("accepted: %s", text);
	if (strstr(err, want) == NULL)
		fail_msg("error \"%s\" lacks \"%s\"", err, want);
}

#define HEAD "slot-dird-state 1\nboot 0123456789abcdef\ncounter 7\nclean 1\nsaved 1\n"
#define R1 "relay 192.0.2.1:7600 7601 0 999000000\n"
#define R2 "relay 192.0.2.2:7600 7601 0 999000000\n"

static void
test_snapshot_corrupt(void **state)
{
	(void)state;
	corrupt("", "line 1: no end line");
	corrupt("garbage\n", "line 1: not a slot-dird state file");
	corrupt("slot-dird-state 2\n" "boot 0\n", "line 1:");
	corrupt(HEAD R1 R2, "no end line");
	corrupt(HEAD R1 R2 "end 2 0", "last line cut short");
	corrupt(HEAD R1 R2 "end 3 0\n", "end line counts");
	corrupt(HEAD R1 R2 "rtt 192.0.2.1:7600 192.0.2.2:7600 5\nend 2 0\n", "end line counts");
	corrupt(HEAD R1 "rtt 192.0.2.1:7600 192.0.2.9:7600 5\nend 1 1\n", "line 7: rtt line names");
	corrupt(HEAD R1 R1 "end 2 0\n", "line 7: relay 192.0.2.1:7600 listed twice");
	corrupt(HEAD R1 "relay 192.0.2.3:7600 0 0 1\nend 2 0\n", "line 7: bad relay line");
	corrupt(HEAD R1 "relay 192.0.2.3 7601 0 1\nend 2 0\n", "bad relay line");
	corrupt(HEAD R1 "rtt 192.0.2.1:7600 192.0.2.1:7600 -5\nend 1 1\n", "bad rtt line");
	corrupt(HEAD R1 "weird 1\nend 1 0\n", "unknown record");
	corrupt(HEAD R1 "end 1 0\nrelay 192.0.2.5:7600 1 0 1\n", "text after the end line");
	corrupt(HEAD R1 "rtt 192.0.2.1:7600 192.0.2.1:7600 5\n" R2 "end 2 1\n",
	    "relay line after rtt lines");
	corrupt("slot-dird-state 1\nboot 012345\ncounter 7\n", "line 2: bad boot value");
	corrupt("slot-dird-state 1\ncounter 7\n", "line 2: expected \"boot\"");
	corrupt("slot-dird-state 1\nboot 0123456789abcdef\ncounter 7\nclean 2\n",
	    "line 4: bad clean value");
	corrupt(HEAD R1 " end 1 0\n", "malformed line");

	/* A NUL byte. */
	char text[] = HEAD R1 "end 1 0\n";
	struct dsnap_info info;
	char err[128];
	text[3] = '\0';
	assert_null(dsnap_parse(text, sizeof(text) - 1, &params, 0, 0, 1, &info, err,
	    sizeof(err)));
	assert_non_null(strstr(err, "NUL"));

	/* And the good one parses. */
	struct dstate *t = dsnap_parse(HEAD R1 R2 "end 2 0\n", strlen(HEAD R1 R2 "end 2 0\n"),
	    &params, 5 * S, 1000 * S, 42, &info, err, sizeof(err));
	assert_non_null(t);
	char v[DSTATE_VERSION_LEN];
	dstate_version(t, v);
	assert_string_equal(v, "0123456789abcdef-7");
	dstate_free(t);
}

/* An rtt pair given twice, in two runs of lines (no file dsnap_format writes,
 * but an edited one): the later value is kept, and counted once (the count
 * said 3 here; found by tests/fuzz/fuzz_dsnap). */
static void
test_snapshot_pair_twice(void **state)
{
	static const char text[] =
	    "slot-dird-state 1\nboot 0123456789abcdef\ncounter 7\nclean 1\n"
	    "saved 1000000000\n"
	    "relay 192.0.2.1:7600 7601 0 1000000000\n"
	    "relay 192.0.2.2:7600 7601 0 1000000000\n"
	    "relay 192.0.2.3:7600 7601 0 1000000000\n"
	    "rtt 192.0.2.1:7600 192.0.2.2:7600 1500\n"
	    "rtt 192.0.2.2:7600 192.0.2.3:7600 61000\n"
	    "rtt 192.0.2.1:7600 192.0.2.2:7600 1600\n"
	    "end 3 3\n";
	struct dsnap_info info;
	struct dstate *t;
	char err[256];
	size_t peer;
	uint32_t rtt;
	(void)state;

	t = dsnap_parse(text, sizeof(text) - 1, &params, 100 * S, 1000 * S, 42, &info, err,
	    sizeof(err));
	if (t == NULL)
		fail_msg("%s", err);
	assert_int_equal(info.relays, 3);
	assert_int_equal(info.rtts, 2);
	dstate_rtt_at(t, 0, 0, &peer, &rtt);
	assert_int_equal(peer, 1);
	assert_int_equal(rtt, 1600);
	dstate_free(t);
}

static void
test_snapshot_file(void **state)
{
	char dir[] = "/tmp/slot-test-dsnap-XXXXXX", path[128], tmp[140], err[256], *buf;
	struct stat st;
	size_t len;
	(void)state;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/dird.state", dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	assert_int_equal(dsnap_read_file(path, &buf, &len, err, sizeof(err)), -1);
	assert_int_equal(errno, ENOENT);
	assert_int_equal(dsnap_write_file(path, "one\n", 4, err, sizeof(err)), 0);
	assert_int_equal(dsnap_write_file(path, "two lines\n", 10, err, sizeof(err)), 0);
	assert_int_equal(stat(tmp, &st), -1);	/* renamed away */
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(dsnap_read_file(path, &buf, &len, err, sizeof(err)), 0);
	assert_int_equal(len, 10);
	assert_string_equal(buf, "two lines\n");
	free(buf);
	/* A directory that does not exist: an error, not a crash. */
	assert_int_equal(dsnap_write_file("/nonexistent/dir/dird.state", "x", 1, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "/nonexistent/dir/dird.state.tmp"));
	unlink(path);
	rmdir(dir);
}

/* A relay certificate for key seed byte k, serial k (CA seed all 0x80). */
static void
cert_n(uint8_t k, uint8_t raw[IDENT_CERT_LEN], uint8_t pk[IDENT_PK_LEN])
{
	uint8_t ca[IDENT_SEED_LEN], seed[IDENT_SEED_LEN];
	char err[128];

	memset(ca, 0x80, sizeof(ca));
	memset(seed, k, sizeof(seed));
	ident_seed_pk(seed, pk);
	assert_int_equal(ident_cert_issue(ca, IDENT_ROLE_RELAY, "r", k, 1, 2000000000ull, pk,
	    raw, err, sizeof(err)), 0);
}

static bool
drop_serial(void *user, const struct dstate_relay_view *v, const char **why)
{
	uint64_t *serial = user;

	*why = "revoked";
	return v->cert != NULL && v->cert->serial == *serial;
}

/* Identity mode: an endpoint is bound to its first key; a renewal with the
 * same key changes the listing; remove_if drops by certificate; the
 * snapshot keeps the certificates. */
static void
test_cert_binding(void **state)
{
	struct dstate *s = new_state(), *t;
	uint8_t c1[IDENT_CERT_LEN], c2[IDENT_CERT_LEN], c3[IDENT_CERT_LEN];
	uint8_t pk1[IDENT_PK_LEN], pk2[IDENT_PK_LEN], pk3[IDENT_PK_LEN];
	struct endpoint a = relay_n(1), b = relay_n(2);
	char v1[DSTATE_VERSION_LEN], v2[DSTATE_VERSION_LEN], err[256];
	struct dstate_entry *e;
	struct dsnap_info info;
	uint64_t serial = 2;
	size_t n, len;
	char *buf;
	(void)state;

	cert_n(1, c1, pk1);
	cert_n(2, c2, pk2);
	cert_n(3, c3, pk3);
	assert_int_equal(dstate_owner(s, &a, pk1), DSTATE_OK);	/* free */
	assert_int_equal(dstate_set_cert(s, &a, c1), DSTATE_UNKNOWN);
	reg(s, 1, 0);
	assert_int_equal(dstate_set_cert(s, &a, c1), DSTATE_OK);
	assert_int_equal(dstate_owner(s, &a, pk1), DSTATE_OK);
	assert_int_equal(dstate_owner(s, &a, pk2), DSTATE_TAKEN);
	assert_int_equal(dstate_set_cert(s, &a, c2), DSTATE_TAKEN);
	/* Not a certificate. */
	uint8_t junk[IDENT_CERT_LEN] = { 0 };
	assert_int_equal(dstate_set_cert(s, &a, junk), DSTATE_LIMIT);
	/* Same key, new certificate (serial 3 with pk1's key): a new version. */
	uint8_t ca[IDENT_SEED_LEN], renewed[IDENT_CERT_LEN];
	memset(ca, 0x80, sizeof(ca));
	assert_int_equal(ident_cert_issue(ca, IDENT_ROLE_RELAY, "r", 9, 1, 2000000000ull, pk1,
	    renewed, err, sizeof(err)), 0);
	dstate_version(s, v1);
	assert_int_equal(dstate_set_cert(s, &a, c1), DSTATE_OK);
	dstate_version(s, v2);
	assert_string_equal(v1, v2);
	assert_int_equal(dstate_set_cert(s, &a, renewed), DSTATE_OK);
	dstate_version(s, v2);
	assert_string_not_equal(v1, v2);

	reg(s, 2, 0);
	assert_int_equal(dstate_set_cert(s, &b, c2), DSTATE_OK);
	assert_int_equal(dstate_listing(s, 0, &e, &n), 0);
	assert_int_equal(n, 2);
	assert_true(e[0].has_cert && memcmp(e[0].cert, renewed, IDENT_CERT_LEN) == 0);
	assert_true(e[1].has_cert && memcmp(e[1].cert, c2, IDENT_CERT_LEN) == 0);
	free(e);

	/* The snapshot keeps them, and the binding with them. */
	assert_int_equal(dsnap_format(s, 10 * S, 1000 * S, true,
	    DSNAP_RTT_BUDGET, &buf, &len, NULL), 0);
	t = dsnap_parse(buf, len, &params, 10 * S, 1000 * S, 42, &info, err, sizeof(err));
	assert_non_null(t);
	assert_int_equal(dstate_owner(t, &b, pk2), DSTATE_OK);
	assert_int_equal(dstate_owner(t, &b, pk3), DSTATE_TAKEN);
	/* A bad certificate in the file refuses it whole. */
	char *p = strstr(buf, "534c4331");
	assert_non_null(p);
	p[1] = '0';
	assert_null(dsnap_parse(buf, len, &params, 10 * S, 1000 * S, 42, &info, err,
	    sizeof(err)));
	assert_non_null(strstr(err, "not a certificate"));
	free(buf);

	/* remove_if: relay 2 goes, with the reports about it. */
	dstate_version(t, v1);
	assert_int_equal(dstate_remove_if(t, drop_serial, NULL, &serial), 1);
	assert_false(dstate_has(t, &b));
	assert_true(dstate_has(t, &a));
	dstate_version(t, v2);
	assert_string_not_equal(v1, v2);
	assert_int_equal(dstate_remove_if(t, drop_serial, NULL, &serial), 0);
	/* Gone, the endpoint is free for another key. */
	assert_int_equal(dstate_owner(t, &b, pk3), DSTATE_OK);
	dstate_free(t);
	dstate_free(s);
}

/* dstate_rtt_row gives what dstate_rtt_at gives, entry by entry: full rows,
 * sparse ones, and after relays left (gaps in the ids). */
static void
test_rtt_row(void **state)
{
	struct dstate *s = new_state();
	size_t peer[64], p1;
	uint32_t rtt[64], r1;
	(void)state;

	for (int i = 1; i <= 60; i++)
		reg(s, i, (i % 3 == 0 ? 1 : 50) * S);
	for (int i = 1; i <= 60; i++)
		for (int j = 1; j <= 60; j++)
			if (i != j && (i < 5 || j % i == 0 || (i * j) % 7 == 1))
				assert_int_equal(report(s, i, j, (uint32_t)(i * 100 + j)), 1);
	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < dstate_count(s); i++) {
			struct dstate_relay_view v;

			dstate_relay_at(s, i, &v);
			dstate_rtt_row(s, i, peer, rtt);
			for (size_t j = 0; j < v.nrtt; j++) {
				dstate_rtt_at(s, i, j, &p1, &r1);
				assert_int_equal(peer[j], p1);
				assert_int_equal(rtt[j], r1);
			}
		}
		/* Every third relay falls silent. */
		if (pass == 0)
			assert_int_equal(dstate_expire(s, 125 * S, NULL, NULL), 20);
	}
	dstate_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_register_and_versions),
		cmocka_unit_test(test_unknown_and_limit),
		cmocka_unit_test(test_report_merges),
		cmocka_unit_test(test_matrix),
		cmocka_unit_test(test_graph),
		cmocka_unit_test(test_groups_apply),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_two_sites_group),
		cmocka_unit_test(test_snapshot_round_trip),
		cmocka_unit_test(test_snapshot_drops_expired),
		cmocka_unit_test(test_snapshot_corrupt),
		cmocka_unit_test(test_snapshot_pair_twice),
		cmocka_unit_test(test_snapshot_file),
		cmocka_unit_test(test_cert_binding),
		cmocka_unit_test(test_rtt_row),
	};
	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests_name("dstate", tests, NULL, NULL);
}
