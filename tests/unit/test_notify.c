/* The service manager's notification protocol (src/core/notify.c), against
 * a real datagram socket standing in for systemd: a path and an abstract
 * name, READY=1, the watchdog's pings from a real event loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/notify.h"

/* A bound datagram socket; name is a path or "@abstract". */
static int
manager(const char *name)
{
	struct sockaddr_un sun;
	socklen_t len;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	assert_true(fd >= 0);
	assert_int_equal(notify_parse_addr(name, &sun, &len), 0);
	if (name[0] == '/')
		unlink(name);
	assert_int_equal(bind(fd, (struct sockaddr *)&sun, len), 0);
	return fd;
}

static int
recv_msg(int fd, char *buf, size_t len)
{
	ssize_t n = recv(fd, buf, len - 1, 0);

	if (n < 0)
		return -1;
	buf[n] = '\0';
	return (int)n;
}

static void
test_parse_addr(void **state)
{
	struct sockaddr_un sun;
	socklen_t len;
	char longp[200];
	(void)state;

	assert_int_equal(notify_parse_addr("/run/systemd/notify", &sun, &len), 0);
	assert_string_equal(sun.sun_path, "/run/systemd/notify");
	assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 20);
	assert_int_equal(notify_parse_addr("@abc", &sun, &len), 0);
	assert_int_equal(sun.sun_path[0], '\0');
	assert_memory_equal(sun.sun_path + 1, "abc", 3);
	assert_int_equal(len, offsetof(struct sockaddr_un, sun_path) + 4);
	assert_int_equal(notify_parse_addr("relative/path", &sun, &len), -1);
	assert_int_equal(notify_parse_addr("", &sun, &len), -1);
	assert_int_equal(notify_parse_addr("@", &sun, &len), -1);
	assert_int_equal(notify_parse_addr(NULL, &sun, &len), -1);
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(notify_parse_addr(longp, &sun, &len), -1);
}

static void
test_parse_watchdog(void **state)
{
	(void)state;
	assert_int_equal(notify_parse_watchdog("30000000", NULL, 42), 30000000);
	assert_int_equal(notify_parse_watchdog("30000000", "42", 42), 30000000);
	/* Meant for another process (our parent, say): not ours. */
	assert_int_equal(notify_parse_watchdog("30000000", "41", 42), 0);
	assert_int_equal(notify_parse_watchdog("30000000", "x", 42), 0);
	assert_int_equal(notify_parse_watchdog(NULL, NULL, 42), 0);
	assert_int_equal(notify_parse_watchdog("", NULL, 42), 0);
	assert_int_equal(notify_parse_watchdog("12ms", NULL, 42), 0);
	assert_int_equal(notify_parse_watchdog("-5", NULL, 42), 0);
}

static void
test_off_without_socket(void **state)
{
	struct notify n;
	char err[256];
	(void)state;

	unsetenv("NOTIFY_SOCKET");
	setenv("WATCHDOG_USEC", "1000", 1);
	assert_int_equal(notify_init(&n, err, sizeof(err)), 0);
	assert_int_equal(n.fd, -1);
	assert_int_equal(n.watchdog_us, 0);	/* nobody to hear it */
	assert_int_equal(notify_send(&n, "READY=1"), 0);
	assert_null(getenv("WATCHDOG_USEC"));
	notify_fini(&n);

	setenv("NOTIFY_SOCKET", "not-a-path", 1);
	assert_int_equal(notify_init(&n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not-a-path"));
	assert_int_equal(n.fd, -1);
	notify_fini(&n);
}

static void
ready_through(const char *name)
{
	struct notify n;
	char err[256], buf[256];
	int m = manager(name);

	setenv("NOTIFY_SOCKET", name, 1);
	unsetenv("WATCHDOG_USEC");
	assert_int_equal(notify_init(&n, err, sizeof(err)), 0);
	assert_true(n.fd >= 0);
	/* Taken out of the environment: programs we run are not us. */
	assert_null(getenv("NOTIFY_SOCKET"));
	assert_int_equal(notify_send(&n, "READY=1\nSTATUS=serving"), 0);
	assert_int_equal(recv_msg(m, buf, sizeof(buf)), 22);
	assert_string_equal(buf, "READY=1\nSTATUS=serving");
	assert_int_equal(notify_send(&n, "STOPPING=1"), 0);
	assert_int_equal(recv_msg(m, buf, sizeof(buf)), 10);
	assert_string_equal(buf, "STOPPING=1");
	notify_fini(&n);
	close(m);
	if (name[0] == '/')
		unlink(name);
}

static void
test_ready_to_a_path(void **state)
{
	char path[64];
	(void)state;

	snprintf(path, sizeof(path), "/tmp/slot-notify-test-%d", (int)getpid());
	ready_through(path);
}

static void
test_ready_to_an_abstract_socket(void **state)
{
	char name[64];
	(void)state;

	snprintf(name, sizeof(name), "@slot-notify-test-%d", (int)getpid());
	ready_through(name);
}

static void
stop_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void
test_watchdog_pings_from_the_loop(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct notify n;
	char err[256], buf[64], name[64], pid[24];
	ev_timer stop;
	int m, got = 0;
	(void)state;

	snprintf(name, sizeof(name), "@slot-notify-wd-%d", (int)getpid());
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	m = manager(name);
	setenv("NOTIFY_SOCKET", name, 1);
	setenv("WATCHDOG_USEC", "40000", 1);	/* a ping every 20 ms */
	setenv("WATCHDOG_PID", pid, 1);
	assert_int_equal(notify_init(&n, err, sizeof(err)), 0);
	assert_int_equal(n.watchdog_us, 40000);
	notify_watchdog_start(&n, loop);
	/* Ten periods of the loop. */
	ev_timer_init(&stop, stop_cb, 0.2, 0);
	ev_timer_start(loop, &stop);
	ev_run(loop, 0);
	while (recv_msg(m, buf, sizeof(buf)) > 0) {
		assert_string_equal(buf, "WATCHDOG=1");
		got++;
	}
	/* One at once, then about every 20 ms: at least a few, whatever
	 * the machine's load. */
	assert_true(got >= 3);
	assert_int_equal((unsigned long long)got, n.pings);
	notify_fini(&n);
	ev_timer_stop(loop, &stop);
	ev_loop_destroy(loop);
	close(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_addr),
		cmocka_unit_test(test_parse_watchdog),
		cmocka_unit_test(test_off_without_socket),
		cmocka_unit_test(test_ready_to_a_path),
		cmocka_unit_test(test_ready_to_an_abstract_socket),
		cmocka_unit_test(test_watchdog_pings_from_the_loop),
	};
	return cmocka_run_group_tests_name("notify", tests, NULL, NULL);
}
