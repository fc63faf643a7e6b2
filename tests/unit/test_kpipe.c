/* Kernel pipe pool of the relay (src/relay/kpipe.c). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
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

static void
test_reservations(void **state)
{
	struct kpipe_pool pp;
	struct kpipe *a, *b;
	(void)state;

	kpipe_pool_init(&pp, 65536, 1);
	pp.limit = 4;
	/* Promised pipes exist at once, as one-page spares. */
	assert_int_equal(kpipe_reserve(&pp, 2), 0);
	assert_int_equal(pp.reserved, 2);
	assert_int_equal(pp.nspare, 2);
	assert_int_equal(fcntl(pp.spare->wfd, F_GETPIPE_SZ), 4096);
	assert_int_equal(kpipe_reserve(&pp, 2), 0);
	assert_int_equal(pp.nspare, 4);
	/* Past the limit: refused, nothing promised. */
	assert_int_equal(kpipe_reserve(&pp, 2), -1);
	assert_int_equal(errno, EMFILE);
	assert_int_equal(pp.reserved, 4);
	assert_int_equal(pp.refused, 1);
	/* Within the reservation a get takes a spare, grown to the pool's
	 * size: no pipe2 that could fail. */
	a = kpipe_get(&pp);
	b = kpipe_get(&pp);
	assert_int_equal(pp.nspare, 2);
	assert_int_equal(fcntl(a->wfd, F_GETPIPE_SZ), 65536);
	assert_int_equal(a->size, 65536);
	/* Put back: one to the full-size list (max_free 1), one still needed
	 * by a reservation goes back as a spare. */
	kpipe_put(&pp, a, 0);
	assert_int_equal(pp.nfree, 1);
	kpipe_put(&pp, b, 0);
	assert_int_equal(pp.nfree + pp.nspare, 4);
	assert_int_equal(fcntl(b->wfd, F_GETPIPE_SZ), 4096);
	/* A dirty pipe is closed and replaced while its reservation holds. */
	a = kpipe_get(&pp);
	assert_int_equal(write(a->wfd, "x", 1), 1);
	kpipe_put(&pp, a, 1);
	assert_int_equal(pp.nfree + pp.nspare, 4);
	/* Giving reservations back closes the spares no longer needed; the
	 * full-size cache stays. */
	kpipe_unreserve(&pp, 2);
	assert_int_equal(pp.nfree + pp.nspare, 2);
	kpipe_unreserve(&pp, 2);
	assert_int_equal(pp.reserved, 0);
	assert_int_equal(pp.nspare, 0);
	assert_true(pp.nfree <= 1);
	assert_int_equal(pp.in_use, 0);
	kpipe_pool_destroy(&pp);
}

static void
test_reserve_fails_cleanly(void **state)
{
	struct kpipe_pool pp;
	struct rlimit old, low;
	(void)state;

	/* Descriptors run out: the reservation fails with the kernel's error
	 * and leaves nothing promised or leaked. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 16;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	kpipe_pool_init(&pp, 0, 0);
	int rc = 0;
	size_t promised = 0;
	while ((rc = kpipe_reserve(&pp, 2)) == 0)
		promised += 2;
	assert_int_equal(errno, EMFILE);
	assert_int_equal(pp.reserved, promised);
	assert_int_equal(pp.nspare, promised);
	assert_int_equal(pp.refused, 1);
	kpipe_unreserve(&pp, promised);
	assert_int_equal(pp.nspare, 0);
	kpipe_pool_destroy(&pp);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse_and_bound),
		cmocka_unit_test(test_dirty_pipe_not_reused),
		cmocka_unit_test(test_reservations),
		cmocka_unit_test(test_reserve_fails_cleanly),
	};
	return cmocka_run_group_tests_name("kpipe", tests, NULL, NULL);
}
