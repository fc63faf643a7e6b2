/* Kernel pipe pool of the relay (src/relay/kpipe.c). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../src/relay/kpipe.h"

static void
test_reuse_and_bound(void **state)
{
	struct kpipe_pool pp;
	struct kpipe *a, *b, *c;
	(void)state;

	kpipe_pool_init(&pp, 65536, 1);
	a = kpipe_get(&pp);
	b = kpipe_get(&pp);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(pp.in_use, 2);
	assert_int_equal(fcntl(a->wfd, F_GETPIPE_SZ), 65536);
	assert_int_equal(pp.undersized, 0);
	assert_true(fcntl(a->rfd, F_GETFL) & O_NONBLOCK);
	kpipe_put(&pp, a, 0);
	kpipe_put(&pp, b, 0);	/* over max_free: closed */
	assert_int_equal(pp.nfree, 1);
	assert_int_equal(pp.in_use, 0);
	c = kpipe_get(&pp);
	assert_ptr_equal(c, a);
	assert_int_equal(pp.nfree, 0);
	kpipe_put(&pp, c, 0);
	kpipe_pool_destroy(&pp);
	assert_int_equal(pp.nfree, 0);
}

static void
test_dirty_pipe_not_reused(void **state)
{
	struct kpipe_pool pp;
	struct kpipe *a;
	int rfd;
	(void)state;

	kpipe_pool_init(&pp, 0, 8);
	a = kpipe_get(&pp);
	assert_non_null(a);
	rfd = a->rfd;
	assert_int_equal(write(a->wfd, "x", 1), 1);
	kpipe_put(&pp, a, 1);
	assert_int_equal(pp.nfree, 0);
	/* Its descriptors are gone, so stale bytes can never leak into
	 * another pipe. */
	assert_int_equal(fcntl(rfd, F_GETFD), -1);
	assert_int_equal(errno, EBADF);
	kpipe_pool_destroy(&pp);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse_and_bound),
		cmocka_unit_test(test_dirty_pipe_not_reused),
	};
	return cmocka_run_group_tests_name("kpipe", tests, NULL, NULL);
}
