/* closer.h: the last close of a descriptor a program passed never blocks
 * slotd's loop. The blocking close is real: a TCP socket with SO_LINGER
 * whose FIN cannot leave (its peer never reads), which close(2) would wait
 * LINGER seconds for. Timings are judged against LINGER, never tight. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../../src/client/closer.h"

#define LINGER 20

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A connected TCP socket whose close blocks LINGER s; *peer: the other
 * end, which has not read (read it to let the close finish). */
static int
lingering(int *peer)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	int small = 4096, snd = 65536, l = socket(AF_INET, SOCK_STREAM, 0), s;
	struct linger lg = { 1, LINGER };
	static char junk[65536];

	assert_true(l >= 0);
	assert_int_equal(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(l, 1), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
	assert_true((s = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(setsockopt(s, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd)), 0);
	assert_int_equal(connect(s, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_true((*peer = accept(l, NULL, NULL)) >= 0);
	close(l);
	while (send(s, junk, sizeof(junk), MSG_DONTWAIT) > 0)
		;
	usleep(200000);
	assert_int_equal(setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
	return s;
}

/* Reads the peer to its end: the blocked close then completes. */
static void
drain(int peer)
{
	static char buf[65536];

	while (recv(peer, buf, sizeof(buf), 0) > 0)
		;
	close(peer);
}

/* A unix socket with fd queued on it: its last close takes fd down too. */
static int
carrier(int fd)
{
	int sv[2];
	char b = 'x';
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} cb;
	struct iovec iov = { &b, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
	    .msg_controllen = sizeof(cb.b) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	assert_int_equal(sendmsg(sv[0], &mh, 0), 1);
	close(sv[0]);
	close(fd);
	return sv[1];
}

static void
test_lingering_tcp_closed_at_once(void **state)
{
	struct closer *c = closer_new(4);
	int peer, s = lingering(&peer);
	(void)state;

	double t = now_s();
	assert_int_equal(closer_close(c, s), CLOSER_NOW);
	/* closed as it was, it would take LINGER s */
	assert_true(now_s() - t < LINGER / 4.);
	assert_int_equal(fcntl(s, F_GETFD), -1);
	assert_int_equal(closer_free(c, 10000), 0);
	close(peer);
}

static void
test_others_to_the_thread(void **state)
{
	struct closer *c = closer_new(1);
	int peer, p1[2], p2[2], u = carrier(lingering(&peer));
	struct pollfd pfd;
	char b;
	(void)state;

	/* The unix socket's close blocks in the thread, not here. */
	double t = now_s();
	assert_int_equal(closer_close(c, u), CLOSER_QUEUED);
	assert_true(now_s() - t < LINGER / 4.);
	for (int i = 0; i < 500 && closer_queued(c) > 0; i++)
		usleep(10000);
	assert_int_equal(closer_queued(c), 0);

	/* While it is stuck: one waits in the queue, the next is left open. */
	assert_int_equal(pipe(p1), 0);
	assert_int_equal(pipe(p2), 0);
	assert_int_equal(closer_close(c, p1[1]), CLOSER_QUEUED);
	assert_int_equal(closer_close(c, p2[1]), CLOSER_FULL);
	assert_int_not_equal(fcntl(p2[1], F_GETFD), -1);
	close(p2[1]);

	/* Unstuck, the thread closes the queued pipe: its reader sees EOF. */
	drain(peer);
	pfd = (struct pollfd){ .fd = p1[0], .events = POLLIN };
	assert_int_equal(poll(&pfd, 1, 3 * LINGER * 1000), 1);
	assert_int_equal(read(p1[0], &b, 1), 0);
	close(p1[0]);
	close(p2[0]);
	assert_int_equal(closer_free(c, 10000), 0);
}

static void
test_free_leaves_a_stuck_thread(void **state)
{
	struct closer *c = closer_new(2);
	int peer, u = carrier(lingering(&peer));
	(void)state;

	assert_int_equal(closer_close(c, u), CLOSER_QUEUED);
	double t = now_s();
	assert_int_equal(closer_free(c, 200), -1);
	assert_true(now_s() - t < LINGER / 4.);
	/* the thread finishes on its own once the close completes */
	drain(peer);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lingering_tcp_closed_at_once),
		cmocka_unit_test(test_others_to_the_thread),
		cmocka_unit_test(test_free_leaves_a_stuck_thread),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
