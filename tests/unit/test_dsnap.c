/* slot-dird's state file (src/directory/dsnap.c) when the reports do not
 * fit: the rtt lines are cut at a budget, every relay line stays, the end
 * line counts what was written, and the file reads back. (The round trip
 * and the refusals are in test_dstate.c.) */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <sodium.h>

#include "../../src/directory/dsnap.h"
#include "../../src/directory/dstate.h"

#define S 1000000ull

static const struct dstate_params params = { .expire_after_us = 120 * S,
	.max_relays = 1u << 20 };

static struct endpoint
relay_n(size_t i)
{
	struct endpoint e;
	char b[64];

	snprintf(b, sizeof(b), "10.%zu.%zu.%zu:7600", i >> 16, (i >> 8) & 255, i & 255);
	assert_int_equal(ep_parse(b, 0, &e), 0);
	return e;
}

/* The RTT relay i reports about j: distinct per pair, some equal ones. */
static uint32_t
rtt_of(size_t i, size_t j)
{
	return 1000 + (uint32_t)((i * 7919 + j * 104729) % 300000);
}

/* n relays, each reporting all the others: n(n-1) reports. */
static struct dstate *
mesh(size_t n)
{
	struct dstate *s = dstate_new(&params, 1);
	struct dstate_rtt_in *in = calloc(n, sizeof(*in));
	size_t acc;

	assert_non_null(s);
	assert_non_null(in);
	for (size_t i = 0; i < n; i++) {
		struct endpoint e = relay_n(i);
		assert_int_equal(dstate_register(s, &e, 7601, 10 * S), DSTATE_NEW);
	}
	for (size_t i = 0; i < n; i++) {
		struct endpoint e = relay_n(i);
		for (size_t j = 0; j < n; j++) {
			in[j].peer = relay_n(j);
			in[j].rtt_us = rtt_of(i, j);
		}
		assert_int_equal(dstate_report(s, &e, in, n, &acc), DSTATE_OK);
		assert_int_equal(acc, n - 1);
	}
	free(in);
	return s;
}

static size_t
count_lines(const char *buf, const char *prefix)
{
	size_t c = 0, pl = strlen(prefix);

	for (const char *p = buf; p != NULL && *p != '\0';) {
		if (strncmp(p, prefix, pl) == 0)
			c++;
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
	return c;
}

/* Bytes of the lines that start with prefix. */
static size_t
bytes_of(const char *buf, const char *prefix)
{
	size_t c = 0, pl = strlen(prefix);

	for (const char *p = buf; *p != '\0';) {
		const char *nl = strchr(p, '\n');
		if (strncmp(p, prefix, pl) == 0)
			c += (size_t)(nl - p) + 1;
		p = nl + 1;
	}
	return c;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Formatted with budget, the file holds every relay, at most budget bytes
 * of rtt lines, the k nearest peers of each relay, and reads back with the
 * counts of its end line. */
static void
check_cut(struct dstate *s, size_t n, size_t budget)
{
	struct dsnap_stats st;
	struct dsnap_info info;
	char *buf, err[256], end[64];
	size_t len, total = n * (n - 1);

	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, true, budget, &buf, &len, &st), 0);
	assert_int_equal(strlen(buf), len);
	assert_int_equal(st.relays, n);
	assert_int_equal(st.rtts + st.rtts_left_out, total);
	assert_true(st.rtts_left_out > 0);
	assert_true(st.rtts > 0);
	assert_int_equal(count_lines(buf, "relay "), n);
	assert_int_equal(count_lines(buf, "rtt "), st.rtts);
	assert_true(bytes_of(buf, "rtt ") <= budget);
	snprintf(end, sizeof(end), "\nend %zu %zu\n", n, st.rtts);
	assert_non_null(strstr(buf, end));

	/* Every relay kept the same number: its nearest peers. */
	size_t k = st.rtts / n;
	assert_int_equal(k * n, st.rtts);
	struct dstate *t = dsnap_parse(buf, len, &params, 20 * S, 1000 * S, 42, &info, err,
	    sizeof(err));
	if (t == NULL)
		fail_msg("%s", err);
	assert_int_equal(info.relays, n);
	assert_int_equal(info.dropped, 0);
	assert_int_equal(info.rtts, st.rtts);
	uint32_t *want = calloc(n, sizeof(*want)), *got = calloc(n, sizeof(*got));
	size_t *peer = calloc(n, sizeof(*peer));
	assert_non_null(want);
	assert_non_null(got);
	assert_non_null(peer);
	for (size_t i = 0; i < n; i++) {
		struct dstate_relay_view v;
		size_t m = 0;

		dstate_relay_at(t, i, &v);
		assert_int_equal(v.nrtt, k);
		for (size_t j = 0; j < n; j++)
			if (j != i)
				want[m++] = rtt_of(i, j);
		qsort(want, m, sizeof(*want), cmp_u32);
		dstate_rtt_row(t, i, peer, got);
		for (size_t j = 0; j < k; j++)
			assert_int_equal(got[j], rtt_of(i, peer[j]));
		qsort(got, k, sizeof(*got), cmp_u32);
		assert_memory_equal(got, want, k * sizeof(*got));
	}
	free(want);
	free(got);
	free(peer);
	dstate_free(t);
	free(buf);
}

static void
test_cut_small_budget(void **state)
{
	struct dstate *s = mesh(40);
	(void)state;

	/* 1560 reports, ~50 KB of rtt lines. */
	check_cut(s, 40, 16 << 10);
	check_cut(s, 40, 2000);	/* one each */
	dstate_free(s);
}

/* A budget that holds everything: nothing left out, and the bytes are what
 * the unbounded format wrote. */
static void
test_fits(void **state)
{
	struct dstate *s = mesh(30);
	struct dsnap_stats st;
	char *buf, *buf2;
	size_t len, len2;
	(void)state;

	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, false, DSNAP_RTT_BUDGET, &buf, &len,
	    &st), 0);
	assert_int_equal(st.rtts, 30 * 29);
	assert_int_equal(st.rtts_left_out, 0);
	/* Exactly the rtt lines' size is enough. */
	size_t need = bytes_of(buf, "rtt ");
	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, false, need, &buf2, &len2, &st), 0);
	assert_int_equal(st.rtts_left_out, 0);
	assert_int_equal(len2, len);
	assert_memory_equal(buf, buf2, len);
	free(buf2);
	/* One byte less cuts. */
	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, false, need - 1, &buf2, &len2, &st),
	    0);
	assert_true(st.rtts_left_out > 0);
	assert_true(len2 < len);
	free(buf2);
	free(buf);
	dstate_free(s);
}

/* Ties at the cut: the earlier peers (registration order) are kept. */
static void
test_cut_ties(void **state)
{
	struct dstate *s = dstate_new(&params, 1);
	struct dstate_rtt_in in[5];
	struct dsnap_stats st;
	char *buf;
	size_t len, acc;
	(void)state;

	for (size_t i = 0; i < 6; i++) {
		struct endpoint e = relay_n(i);
		assert_int_equal(dstate_register(s, &e, 7601, 10 * S), DSTATE_NEW);
	}
	/* Relay 0: 1 ms to 5, 2 ms to 1..4. */
	for (size_t j = 0; j < 5; j++) {
		in[j].peer = relay_n(j + 1);
		in[j].rtt_us = j == 4 ? 1000 : 2000;
	}
	struct endpoint a = relay_n(0);
	assert_int_equal(dstate_report(s, &a, in, 5, &acc), DSTATE_OK);
	/* Room for three lines, at their longest (two 10-digit RTTs' room
	 * spare): 5, then 1 and 2 of the tied. */
	size_t line = strlen("rtt 10.0.0.0:7600 10.0.0.1:7600 2000\n");
	size_t budget = 3 * line + 18;
	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, true, budget, &buf, &len, &st), 0);
	assert_int_equal(st.rtts, 3);
	assert_int_equal(st.rtts_left_out, 2);
	assert_non_null(strstr(buf, "\nrtt 10.0.0.0:7600 10.0.0.1:7600 2000\n"
	    "rtt 10.0.0.0:7600 10.0.0.2:7600 2000\n"
	    "rtt 10.0.0.0:7600 10.0.0.5:7600 1000\nend 6 3\n"));
	free(buf);
	/* No room for a line: relays only. */
	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, true, 10, &buf, &len, &st), 0);
	assert_int_equal(st.rtts, 0);
	assert_int_equal(count_lines(buf, "relay "), 6);
	assert_non_null(strstr(buf, "\nend 6 0\n"));
	free(buf);
	dstate_free(s);
}

/*
 * At the daemon's budget: a full mesh whose rtt lines pass DSNAP_RTT_BUDGET
 * (~80 MB uncut) gives a file that dsnap_read_file takes and that restores
 * every relay.
 */
static void
test_daemon_budget(void **state)
{
	size_t n = 1400;
	struct dstate *s = mesh(n), *t;
	struct dsnap_stats st;
	struct dsnap_info info;
	char path[] = "/tmp/test_dsnap.XXXXXX", *buf, *back, err[256];
	size_t len, blen;
	int fd;
	(void)state;

	assert_int_equal(dsnap_format(s, 20 * S, 1000 * S, true, DSNAP_RTT_BUDGET, &buf, &len,
	    &st), 0);
	assert_true(st.rtts_left_out > 0);
	assert_true(bytes_of(buf, "rtt ") <= DSNAP_RTT_BUDGET);
	assert_true(len <= DSNAP_MAX_BYTES);
	assert_true((fd = mkstemp(path)) >= 0);
	close(fd);
	if (dsnap_write_file(path, buf, len, err, sizeof(err)) == -1)
		fail_msg("%s", err);
	if (dsnap_read_file(path, &back, &blen, err, sizeof(err)) == -1)
		fail_msg("%s", err);
	unlink(path);
	assert_int_equal(blen, len);
	t = dsnap_parse(back, blen, &params, 20 * S, 1000 * S, 42, &info, err, sizeof(err));
	if (t == NULL)
		fail_msg("%s", err);
	assert_int_equal(info.relays, n);
	assert_int_equal(info.rtts, st.rtts);
	assert_true(info.clean);
	dstate_free(t);
	free(back);
	free(buf);
	dstate_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut_small_budget),
		cmocka_unit_test(test_fits),
		cmocka_unit_test(test_cut_ties),
		cmocka_unit_test(test_daemon_budget),
	};
	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests_name("dsnap", tests, NULL, NULL);
}
