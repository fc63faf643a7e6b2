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
	assert_int_equal(pp.limit, SIZE_MAX);
	pp.limit = 4;
	/* A reservation is an account: no pipe is made for it. */
	assert_int_equal(kpipe_reserve(&pp, 2), 0);
	assert_int_equal(kpipe_reserve(&pp, 2), 0);
	assert_int_equal(pp.reserved, 4);
	assert_int_equal(pp.nfree, 0);
	assert_null(pp.free);
	/* Past the limit: refused, nothing promised. */
	assert_int_equal(kpipe_reserve(&pp, 2), -1);
	assert_int_equal(errno, EMFILE);
	assert_int_equal(pp.reserved, 4);
	assert_int_equal(pp.refused, 1);
	/* Pipes are made when bytes are to flow, at the pool's size. */
	a = kpipe_get(&pp);
	b = kpipe_get(&pp);
	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(fcntl(a->wfd, F_GETPIPE_SZ), 65536);
	assert_int_equal(a->size, 65536);
	assert_int_equal(pp.in_use, 2);
	/* Put back: one kept (max_free 1), the other closed. */
	kpipe_put(&pp, a, 0);
	kpipe_put(&pp, b, 0);
	assert_int_equal(pp.nfree, 1);
	/* A limit lowered under what is promised (a reload) refuses new
	 * reservations and keeps the old ones. */
	pp.limit = 2;
	assert_int_equal(kpipe_reserve(&pp, 2), -1);
	assert_int_equal(pp.refused, 2);
	kpipe_unreserve(&pp, 2);
	assert_int_equal(kpipe_reserve(&pp, 2), -1);
	kpipe_unreserve(&pp, 2);
	assert_int_equal(kpipe_reserve(&pp, 2), 0);
	kpipe_unreserve(&pp, 2);
	assert_int_equal(pp.reserved, 0);
	assert_int_equal(pp.in_use, 0);
	/* A limit of 0 (not one pipe's descriptors fit) refuses everything. */
	pp.limit = 0;
	assert_int_equal(kpipe_reserve(&pp, 2), -1);
	kpipe_pool_destroy(&pp);
	assert_int_equal(pp.nfree, 0);
}

static void
test_get_fails_cleanly(void **state)
{
	struct kpipe_pool pp;
	struct kpipe *kp[16];
	struct rlimit old, low;
	size_t n = 0;
	(void)state;

	/* The kernel refuses a pipe: get says why, and leaves nothing counted
	 * or leaked; a pipe put back makes the next get succeed. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 16;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	kpipe_pool_init(&pp, 0, 0);
	while (n < 16 && (kp[n] = kpipe_get(&pp)) != NULL)
		n++;
	assert_true(n > 0 && n < 16);
	assert_int_equal(errno, EMFILE);
	assert_int_equal(pp.in_use, n);
	kpipe_put(&pp, kp[--n], 0);	/* max_free 0: closed */
	assert_int_equal(pp.nfree, 0);
	assert_non_null(kp[n] = kpipe_get(&pp));
	n++;
	while (n > 0)
		kpipe_put(&pp, kp[--n], 0);
	assert_int_equal(pp.in_use, 0);
	kpipe_pool_destroy(&pp);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
}

static void
test_limit_from_descriptors(void **state)
{
	struct kpipe_budget b = {
		.nofile = 0, .max_pipes = 4096, .max_kernel_pipes = 0,
		.max_control = 1024, .max_inflight = 1024, .max_free = 32,
	};
	(void)state;

	/* No descriptor limit: max_kernel_pipes, or two per pipe. */
	assert_int_equal(kpipe_limit(&b), 8192);
	b.max_kernel_pipes = 100;
	assert_int_equal(kpipe_limit(&b), 100);
	b.max_kernel_pipes = 0;
	/* A large limit does not bind. */
	b.nofile = 1048576;
	assert_int_equal(kpipe_limit(&b), 8192);
	/* 65536 descriptors: 1024 + 1024 + 64 + 512 for the others leave
	 * 62912, 10485 pipes of six: more than max_pipes. */
	b.nofile = 65536;
	assert_int_equal(kpipe_limit(&b), 8192);
	/* 8192: 5568 left, 928 pipes, 1856 kernel pipes. */
	b.nofile = 8192;
	assert_int_equal(kpipe_limit(&b), 2 * ((8192 - 1024 - 1024 - 64 - KPIPE_FD_MARGIN) /
	    KPIPE_FDS_PER_PIPE));
	assert_int_equal(kpipe_limit(&b), 1856);
	/* The smaller of the two wins. */
	b.max_kernel_pipes = 1000;
	assert_int_equal(kpipe_limit(&b), 1000);
	b.max_kernel_pipes = 4000;
	assert_int_equal(kpipe_limit(&b), 1856);
	b.max_kernel_pipes = 0;
	/* Links to next relays are set aside as well. */
	b.max_links = 256;
	assert_int_equal(kpipe_limit(&b), 2 * ((8192 - 1024 - 1024 - 256 - 64 -
	    KPIPE_FD_MARGIN) / KPIPE_FDS_PER_PIPE));
	b.max_links = 0;
	/* Exactly one pipe fits, then none; never an underflow. */
	b.nofile = 1024 + 1024 + 64 + KPIPE_FD_MARGIN + KPIPE_FDS_PER_PIPE;
	assert_int_equal(kpipe_limit(&b), 2);
	b.nofile--;
	assert_int_equal(kpipe_limit(&b), 0);
	b.nofile = 1024;
	assert_int_equal(kpipe_limit(&b), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reuse_and_bound),
		cmocka_unit_test(test_dirty_pipe_not_reused),
		cmocka_unit_test(test_reservations),
		cmocka_unit_test(test_get_fails_cleanly),
		cmocka_unit_test(test_limit_from_descriptors),
	};
	return cmocka_run_group_tests_name("kpipe", tests, NULL, NULL);
}
