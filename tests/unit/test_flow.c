/* The per-pipe state machine of the relay (src/relay/flow.c): every
 * transition of one direction, and the pair that makes a pipe. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../src/relay/flow.h"

static void
test_initial_reads(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	assert_int_equal(f.state, FLOW_READING);
	assert_true(flow_wants_read(&f));
	assert_false(flow_wants_write(&f));
	assert_false(flow_needs_kpipe(&f));
}

static void
test_read_then_full_flush(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	assert_int_equal(flow_on_read(&f, 1000, 0), FLOW_FLUSH);
	assert_int_equal(f.inflight, 1000);
	assert_true(flow_needs_kpipe(&f));
	assert_int_equal(flow_on_write(&f, 1000, 0), FLOW_NONE);
	assert_int_equal(f.inflight, 0);
	assert_int_equal(f.bytes, 1000);
	assert_false(flow_wants_write(&f));
	assert_true(flow_wants_read(&f));
}

static void
test_partial_write_asks_to_flush_again(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 3000, 0);
	assert_int_equal(flow_on_write(&f, 1000, 0), FLOW_FLUSH);
	assert_int_equal(f.inflight, 2000);
	/* Destination full: stop, and wait for it to be writable. */
	assert_int_equal(flow_on_write(&f, -1, EAGAIN), FLOW_NONE);
	assert_true(flow_wants_write(&f));
	/* Still room in the pipe: the source may go on filling it. */
	assert_true(flow_wants_read(&f));
}

static void
test_backpressure_at_capacity(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 4096);
	flow_on_read(&f, 4096, 0);
	flow_on_write(&f, -1, EAGAIN);
	/* The pipe is full and the peer takes nothing: no more reading. */
	assert_false(flow_wants_read(&f));
	assert_true(flow_wants_write(&f));
	flow_on_write(&f, 100, 0);
	assert_true(flow_wants_read(&f));
}

static void
test_pipe_full_before_cap(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 500, 0);
	flow_on_write(&f, -1, EAGAIN);
	/* EAGAIN from the read side with bytes in flight: the kernel pipe
	 * ran out of buffers before cap; reading must stop or it spins. */
	assert_int_equal(flow_on_read(&f, -1, EAGAIN), FLOW_NONE);
	assert_true(f.pipe_full);
	assert_false(flow_wants_read(&f));
	flow_on_write(&f, 200, 0);
	assert_false(f.pipe_full);
	assert_true(flow_wants_read(&f));
}

static void
test_eagain_on_empty_is_spurious(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	assert_int_equal(flow_on_read(&f, -1, EAGAIN), FLOW_NONE);
	assert_false(f.pipe_full);
	assert_true(flow_wants_read(&f));
}

static void
test_eof_with_nothing_in_flight_shuts(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	assert_int_equal(flow_on_read(&f, 0, 0), FLOW_SHUTDOWN);
	assert_int_equal(f.state, FLOW_SHUT);
	assert_false(flow_wants_read(&f));
	assert_false(flow_wants_write(&f));
}

static void
test_eof_drains_then_shuts(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 2000, 0);
	flow_on_write(&f, -1, EAGAIN);
	assert_int_equal(flow_on_read(&f, 0, 0), FLOW_FLUSH);
	assert_int_equal(f.state, FLOW_DRAINING);
	assert_false(flow_wants_read(&f));
	assert_true(flow_wants_write(&f));
	assert_int_equal(flow_on_write(&f, 1500, 0), FLOW_FLUSH);
	assert_int_equal(f.state, FLOW_DRAINING);
	assert_int_equal(flow_on_write(&f, 500, 0), FLOW_SHUTDOWN);
	assert_int_equal(f.state, FLOW_SHUT);
	assert_int_equal(f.bytes, 2000);
}

static void
test_read_errors_reset(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	assert_int_equal(flow_on_read(&f, -1, ECONNRESET), FLOW_RESET);
	flow_init(&f, 65536);
	assert_int_equal(flow_on_read(&f, -1, ETIMEDOUT), FLOW_RESET);
}

static void
test_write_errors_reset(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 10, 0);
	assert_int_equal(flow_on_write(&f, -1, EPIPE), FLOW_RESET);
	flow_init(&f, 65536);
	flow_on_read(&f, 10, 0);
	assert_int_equal(flow_on_write(&f, -1, ECONNRESET), FLOW_RESET);
}

static void
test_events_after_shut_are_ignored(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 0, 0);
	assert_int_equal(flow_on_read(&f, 100, 0), FLOW_NONE);
	assert_int_equal(flow_on_write(&f, 100, 0), FLOW_NONE);
	assert_int_equal(f.inflight, 0);
	assert_int_equal(f.state, FLOW_SHUT);
}

static void
test_overlong_write_never_underflows(void **state)
{
	struct flow f;
	(void)state;

	flow_init(&f, 65536);
	flow_on_read(&f, 10, 0);
	flow_on_write(&f, 50, 0);
	assert_int_equal(f.inflight, 0);
	assert_int_equal(f.bytes, 10);
}

/* A pipe: the client half-closes first, the server keeps sending, then
 * closes; the pipe is done only when both directions are shut. */
static void
test_pair_half_close_then_done(void **state)
{
	struct flow c2s, s2c;
	(void)state;

	flow_init(&c2s, 65536);
	flow_init(&s2c, 65536);
	assert_int_equal(flow_on_read(&c2s, 0, 0), FLOW_SHUTDOWN);
	assert_false(flow_pair_done(&c2s, &s2c));
	/* The other direction keeps flowing. */
	assert_true(flow_wants_read(&s2c));
	assert_int_equal(flow_on_read(&s2c, 4000, 0), FLOW_FLUSH);
	flow_on_write(&s2c, 4000, 0);
	assert_false(flow_pair_done(&c2s, &s2c));
	assert_int_equal(flow_on_read(&s2c, 0, 0), FLOW_SHUTDOWN);
	assert_true(flow_pair_done(&c2s, &s2c));
}

static void
test_state_names(void **state)
{
	(void)state;
	assert_string_equal(flow_state_str(FLOW_READING), "reading");
	assert_string_equal(flow_state_str(FLOW_DRAINING), "draining");
	assert_string_equal(flow_state_str(FLOW_SHUT), "shut");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_initial_reads),
		cmocka_unit_test(test_read_then_full_flush),
		cmocka_unit_test(test_partial_write_asks_to_flush_again),
		cmocka_unit_test(test_backpressure_at_capacity),
		cmocka_unit_test(test_pipe_full_before_cap),
		cmocka_unit_test(test_eagain_on_empty_is_spurious),
		cmocka_unit_test(test_eof_with_nothing_in_flight_shuts),
		cmocka_unit_test(test_eof_drains_then_shuts),
		cmocka_unit_test(test_read_errors_reset),
		cmocka_unit_test(test_write_errors_reset),
		cmocka_unit_test(test_events_after_shut_are_ignored),
		cmocka_unit_test(test_overlong_write_never_underflows),
		cmocka_unit_test(test_pair_half_close_then_done),
		cmocka_unit_test(test_state_names),
	};
	return cmocka_run_group_tests_name("flow", tests, NULL, NULL);
}
