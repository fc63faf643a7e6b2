/* When a leg the relay sends on reads its retransmissions and switches its
 * congestion control (src/relay/ccwatch.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/relay/ccwatch.h"

/* The first bytes only arm it; the first check is CCWATCH_FIRST later. */
static void
test_first_bytes_arm(void **state)
{
	struct ccwatch w;
	(void)state;

	ccwatch_init(&w);
	assert_false(ccwatch_due(&w, 100.0));
	assert_false(ccwatch_due(&w, 100.0 + CCWATCH_FIRST - 0.01));
	assert_true(ccwatch_due(&w, 100.0 + CCWATCH_FIRST));
}

/* A clean leg is read again after a gap that doubles up to CCWATCH_MAX. */
static void
test_clean_leg_backs_off(void **state)
{
	struct ccwatch w;
	double now = 10.0, gap = CCWATCH_FIRST;
	int checks = 0;
	(void)state;

	ccwatch_init(&w);
	assert_false(ccwatch_due(&w, now));
	for (int i = 0; i < 8; i++) {
		now += gap;
		assert_false(ccwatch_due(&w, now - 0.001));
		assert_true(ccwatch_due(&w, now));
		assert_false(ccwatch_seen(&w, now, 0));
		checks++;
		gap = gap * 2 > CCWATCH_MAX ? CCWATCH_MAX : gap * 2;
	}
	assert_true(gap == CCWATCH_MAX);
	/* Eight checks cover 0.25 + 0.5 + 1 + 2 + 4 * 4 = 19.75 s. */
	assert_true(now > 29.7 && now < 29.8);
	assert_int_equal(checks, 8);
	assert_false(ccwatch_due(&w, now + CCWATCH_MAX - 0.001));
	assert_true(ccwatch_due(&w, now + CCWATCH_MAX));
}

/* One retransmission switches it, once: then no more checks. */
static void
test_loss_switches_once(void **state)
{
	struct ccwatch w;
	(void)state;

	ccwatch_init(&w);
	assert_false(ccwatch_due(&w, 0.5));
	assert_true(ccwatch_due(&w, 0.8));
	assert_false(ccwatch_seen(&w, 0.8, 0));
	assert_true(ccwatch_due(&w, 1.3));
	assert_true(ccwatch_seen(&w, 1.3, 1));
	assert_false(ccwatch_due(&w, 2.0));
	assert_false(ccwatch_due(&w, 1000.0));
}

/* A count that cannot be read stops the watch: no system call per write. */
static void
test_stop(void **state)
{
	struct ccwatch w;
	(void)state;

	ccwatch_init(&w);
	assert_false(ccwatch_due(&w, 1.0));
	ccwatch_stop(&w);
	assert_false(ccwatch_due(&w, 5.0));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_bytes_arm),
		cmocka_unit_test(test_clean_leg_backs_off),
		cmocka_unit_test(test_loss_switches_once),
		cmocka_unit_test(test_stop),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
