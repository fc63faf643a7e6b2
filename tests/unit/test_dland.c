/* The directory's landmarks (src/directory/dland.c): rows from the relays'
 * reports, the mean of two directions, missing pairs, the wire encoding,
 * and when a change is worth a new listing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/directory/dland.h"

static struct endpoint
ep(int i)
{
	struct endpoint e;
	char s[32];

	snprintf(s, sizeof(s), "192.0.2.%d:7600", i + 1);
	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
}

static void
report(struct dstate *s, int from, int to, uint32_t us)
{
	struct dstate_rtt_in in = { ep(to), us };
	struct endpoint f = ep(from);
	size_t acc;

	assert_int_equal(dstate_report(s, &f, &in, 1, &acc), DSTATE_OK);
	assert_int_equal(acc, 1);
}

/* Four relays: 0 and 1 a site (1 ms), 2 and 3 another (1 ms), 50 ms apart;
 * relay 3 has not reported yet and nobody reported about it but 2. */
static struct dstate *
overlay(void)
{
	struct dstate_params p = { 60000000, 100 };
	struct dstate *s = dstate_new(&p, 1);

	assert_non_null(s);
	for (int i = 0; i < 4; i++) {
		struct endpoint e = ep(i);
		assert_int_equal(dstate_register(s, &e, 7601, 1000), DSTATE_NEW);
	}
	report(s, 0, 1, 1000);
	report(s, 1, 0, 1200);		/* mean 1.1 ms */
	report(s, 0, 2, 50000);
	report(s, 1, 2, 51000);
	report(s, 2, 0, 50000);
	report(s, 2, 1, 51000);
	report(s, 2, 3, 1000);
	return s;
}

static void
test_rows(void **state)
{
	struct dstate *s = overlay();
	struct dland l;
	(void)state;

	assert_int_equal(dland_compute(s, 256, NULL, &l), 0);
	assert_int_equal(l.nrelay, 4);
	/* Relay 3 is known to one peer of three: not a landmark. */
	assert_int_equal(l.nland, 3);
	float sum = 0;
	for (size_t x = 0; x < l.nland; x++) {
		assert_true(l.land[x] != 3);
		sum += l.weight[x];
	}
	assert_true(sum == 4.0f);	/* relay 3 counts for landmark 2 */
	for (size_t x = 0; x < l.nland; x++) {
		uint32_t r = l.land[x];

		assert_int_equal(l.rtt[r * l.nland + x], 0);	/* itself */
		if (r == 0) {
			assert_int_equal(l.rtt[1 * l.nland + x], 11);	/* 1.1 ms */
			assert_int_equal(l.rtt[2 * l.nland + x], 500);
			assert_int_equal(l.rtt[3 * l.nland + x], DLAND_NONE);
		}
		if (r == 2)
			assert_int_equal(l.rtt[3 * l.nland + x], 10);
	}
	uint8_t *buf;
	size_t len;
	assert_int_equal(dland_encode(&l, &buf, &len), 0);
	assert_int_equal(len, 2 * 4 * l.nland);
	for (size_t i = 0; i < 4 * l.nland; i++)
		assert_int_equal(buf[2 * i] | buf[2 * i + 1] << 8, l.rtt[i]);
	free(buf);
	/* Fewer landmarks than asked for, never more. */
	struct dland one;
	assert_int_equal(dland_compute(s, 1, NULL, &one), 0);
	assert_int_equal(one.nland, 1);
	assert_true(one.weight[0] == 4.0f);
	dland_free(&one);
	dland_free(&l);
	dstate_free(s);
}

static void
test_moved(void **state)
{
	struct dstate *s = overlay();
	struct dland a, b, c;
	(void)state;

	assert_int_equal(dland_compute(s, 256, NULL, &a), 0);
	assert_int_equal(dland_dup(&a, &c), 0);
	assert_false(dland_moved(&a, &c));
	/* Jitter: 50 -> 52 ms is less than a tenth. */
	report(s, 0, 2, 54000);
	assert_int_equal(dland_compute(s, 256, &a, &b), 0);
	assert_false(dland_moved(&a, &b));
	dland_free(&b);
	/* 50 -> 70 ms is news. */
	report(s, 0, 2, 90000);
	assert_int_equal(dland_compute(s, 256, &a, &b), 0);
	assert_true(dland_moved(&a, &b));
	dland_free(&b);
	/* So is a pair measured for the first time. */
	report(s, 0, 2, 50000);
	report(s, 0, 3, 51000);
	assert_int_equal(dland_compute(s, 256, &a, &b), 0);
	assert_true(dland_moved(&a, &b));
	/* Nothing against nothing. */
	struct dland empty = { 0 };
	assert_true(dland_moved(&empty, &a));
	dland_free(&a);
	dland_free(&b);
	dland_free(&c);
	dstate_free(s);
}

/* Bytes of n bytes in xmlrpc-c's base64: lines of 57 bytes, 78 each. */
static size_t
b64(size_t n)
{
	return (n + 56) / 57 * 78;
}

/* The landmarks a listing may carry: as many as asked while the rows fit,
 * then the most that fit, down to none when the relays alone fill the
 * answer; what is sent always fits under what clients take. */
static void
test_max(void **state)
{
	(void)state;

	assert_int_equal(dland_max(0, 256), 256);
	assert_int_equal(dland_max(4, 256), 256);
	assert_int_equal(dland_max(4, 0), 0);
	/* The documented sizes: 10,000 relays with 256 landmarks. */
	assert_int_equal(dland_max(10000, 256), 256);
	assert_int_equal(dland_max(20000, 256), 256);
	/* The configuration's bounds: nothing near 32 MiB goes out. */
	assert_int_equal(dland_max(65536, 4096), 0);
	assert_int_equal(dland_max(SIZE_MAX / 2, 4096), 0);
	for (size_t n = 1; n <= 65536; n = n * 3 + 1) {
		size_t l = dland_max(n, 4096), rel = n * DLAND_RELAY_BYTES;

		assert_true(l <= 4096);
		assert_true(b64(2 * n * l) <= DLAND_ROWS_MAX);
		if (l > 0)
			assert_true(b64(2 * n * l) + rel <= DLAND_ANSWER_MAX);
		/* The most: one more would not fit. */
		if (l < 4096)
			assert_true(b64(2 * n * (l + 1)) > DLAND_ROWS_MAX ||
			    b64(2 * n * (l + 1)) + rel > DLAND_ANSWER_MAX);
	}
	/* 4,096 relays (max_relays' default) with 4,096 landmarks would be 45
	 * MB of rows: cut to what 16 MiB hold. */
	size_t l = dland_max(4096, 4096);
	assert_true(l > 1000 && l < 1500);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rows),
		cmocka_unit_test(test_moved),
		cmocka_unit_test(test_max),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
