/* The kernel side of learned initial windows (src/relay/iwbpf.c), against
 * the kernel: the program the relay assembles loads, and gives connections
 * of its cgroup the window of their peer's prefix: active and passive,
 * IPv4, IPv6 and IPv4 through a dual-stack listener; passive ones only on
 * the data port; a deleted prefix gets the kernel's 10 again; a cgroup
 * shared with another process is refused. The test moves itself into a
 * cgroup of its own for the run (and back); skipped without root or
 * cgroup v2. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "../../src/relay/iwbpf.h"


static char mnt[256], home[512], mine[600];

static int
write_pid(const char *dir, pid_t pid)
{
	char p[700];
	FILE *f;
	int ok;

	if ((size_t)snprintf(p, sizeof(p), "%s/cgroup.procs", dir) >= sizeof(p) ||
	    (f = fopen(p, "w")) == NULL)
		return -1;
	ok = fprintf(f, "%ld\n", (long)pid) > 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* This process in a cgroup v2 of its own: the program acts on its cgroup. */
static int
setup(void **state)
{
	char line[1024];
	FILE *f;
	(void)state;

	if (geteuid() != 0)
		return 0;
	if ((f = fopen("/proc/self/mountinfo", "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *sep = strstr(line, " - ");
		if (sep && strncmp(sep, " - cgroup2 ", 11) == 0 &&
		    sscanf(line, "%*s %*s %*s %*s %255s", mnt) == 1)
			break;
		mnt[0] = '\0';
	}
	fclose(f);
	if (mnt[0] == '\0' || (f = fopen("/proc/self/cgroup", "r")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			if ((size_t)snprintf(home, sizeof(home), "%s%s", mnt, line + 3) >=
			    sizeof(home))
				home[0] = '\0';
		}
	fclose(f);
	if (home[0] == '\0' || (size_t)snprintf(mine, sizeof(mine), "%s/slot-test-iwbpf-%ld",
	    mnt, (long)getpid()) >= sizeof(mine) || (mkdir(mine, 0755) == -1 && errno != EEXIST) ||
	    write_pid(mine, getpid()) == -1) {
		rmdir(mine);
		mine[0] = '\0';
	}
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	if (mine[0]) {
		(void)write_pid(home, getpid());
		rmdir(mine);
	}
	return 0;
}

/* The program for data port port (the listeners' ports are the kernel's
 * choice: a fixed one may be some connection's ephemeral port). */
static struct iwbpf *
open_or_skip(uint16_t port)
{
	char err[512];
	struct iwbpf *b;

	if (mine[0] == '\0')
		skip();	/* not root, or no cgroup v2 */
	if ((b = iwbpf_open(port, 64, err, sizeof(err))) == NULL)
		fail_msg("iwbpf_open: %s", err);
	assert_int_equal(iwbpf_check(b, err, sizeof(err)), 0);
	return b;
}

/* A listener on a port of the kernel's choice. */
static int
listener(int family)
{
	uint16_t port = 0;
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
		.sin6_addr = IN6ADDR_ANY_INIT };
	struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int one = 1, zero = 0;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
	if (family == AF_INET6) {
		/* dual stack: IPv4 peers arrive as ::ffff:a.b.c.d */
		assert_int_equal(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)), 0);
		assert_int_equal(bind(fd, (struct sockaddr *)&s6, sizeof(s6)), 0);
	} else {
		assert_int_equal(bind(fd, (struct sockaddr *)&s4, sizeof(s4)), 0);
	}
	assert_int_equal(listen(fd, 8), 0);
	return fd;
}

static uint16_t
port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	assert_int_equal(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
	    ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static unsigned
cwnd(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
	return ti.tcpi_snd_cwnd;
}

/* Connects to port over loopback of family; the windows both ends start
 * with (nothing sent yet). */
static void
pair(int lfd, int family, uint16_t port, unsigned *active, unsigned *passive)
{
	struct sockaddr_in6 d6 = { .sin6_family = AF_INET6, .sin6_port = htons(port),
		.sin6_addr = IN6ADDR_LOOPBACK_INIT };
	struct sockaddr_in d4 = { .sin_family = AF_INET, .sin_port = htons(port),
		.sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int c = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0), s;

	assert_true(c >= 0);
	if (family == AF_INET6)
		assert_int_equal(connect(c, (struct sockaddr *)&d6, sizeof(d6)), 0);
	else
		assert_int_equal(connect(c, (struct sockaddr *)&d4, sizeof(d4)), 0);
	assert_true((s = accept(lfd, NULL, NULL)) >= 0);
	*active = cwnd(c);
	*passive = cwnd(s);
	close(c);
	close(s);
}

static const struct addr LO4 = { .family = AF_INET, .bytes = { 127, 0, 0, 0 } };
static const struct addr LO6 = { .family = AF_INET6,
	.bytes = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1 } };

static void
test_ipv4_both_ends(void **state)
{
	unsigned a, p;
	int l = listener(AF_INET);
	uint16_t port = port_of(l);
	struct iwbpf *b = open_or_skip(port);
	(void)state;

	pair(l, AF_INET, port, &a, &p);
	assert_int_equal(a, 10);	/* nothing learned: the kernel's own */
	assert_int_equal(p, 10);
	assert_int_equal(iwbpf_set(b, &LO4, 8, 37), 0);
	pair(l, AF_INET, port, &a, &p);
	assert_int_equal(a, 37);
	assert_int_equal(p, 37);
	assert_int_equal(iwbpf_applied(b), 2);
	/* Forgotten: the kernel's own again. */
	assert_int_equal(iwbpf_del(b, &LO4, 8), 0);
	assert_int_equal(iwbpf_del(b, &LO4, 8), 0);	/* not there: fine */
	pair(l, AF_INET, port, &a, &p);
	assert_int_equal(a, 10);
	assert_int_equal(p, 10);
	close(l);
	iwbpf_close(b);
}

static void
test_passive_only_on_the_data_port(void **state)
{
	unsigned a, p;
	int data = listener(AF_INET), l = listener(AF_INET);
	struct iwbpf *b = open_or_skip(port_of(data));
	(void)state;

	assert_int_equal(iwbpf_set(b, &LO4, 8, 25), 0);
	pair(l, AF_INET, port_of(l), &a, &p);
	/* The relay's own connect gets it; another listener's connections
	 * (control connections) do not. */
	assert_int_equal(a, 25);
	assert_int_equal(p, 10);
	close(l);
	close(data);
	iwbpf_close(b);
}

static void
test_ipv6_and_mapped_ipv4(void **state)
{
	unsigned a, p;
	int l = listener(AF_INET6);
	uint16_t port = port_of(l);
	struct iwbpf *b = open_or_skip(port);
	(void)state;

	assert_int_equal(iwbpf_set(b, &LO6, 128, 33), 0);
	assert_int_equal(iwbpf_set(b, &LO4, 8, 21), 0);
	pair(l, AF_INET6, port, &a, &p);
	assert_int_equal(a, 33);
	assert_int_equal(p, 33);
	/* An IPv4 peer of the dual-stack listener is looked up as IPv4. */
	pair(l, AF_INET, port, &a, &p);
	assert_int_equal(a, 21);
	assert_int_equal(p, 21);
	close(l);
	iwbpf_close(b);
}

static void
test_longest_prefix_wins(void **state)
{
	struct addr host = { .family = AF_INET, .bytes = { 127, 0, 0, 1 } };
	unsigned a, p;
	int l = listener(AF_INET);
	struct iwbpf *b = open_or_skip(port_of(l));
	(void)state;

	assert_int_equal(iwbpf_set(b, &LO4, 8, 20), 0);
	assert_int_equal(iwbpf_set(b, &host, 32, 30), 0);
	pair(l, AF_INET, port_of(l), &a, &p);
	assert_int_equal(a, 30);
	close(l);
	iwbpf_close(b);
}

static void
test_refused_in_a_shared_cgroup(void **state)
{
	char err[512];
	pid_t child;
	int st;
	(void)state;

	if (mine[0] == '\0')
		skip();
	/* A second process in the cgroup: the program would act on it too. */
	if ((child = fork()) == 0) {
		pause();
		_exit(0);
	}
	assert_true(child > 0);
	assert_null(iwbpf_open(7601, 64, err, sizeof(err)));
	kill(child, SIGKILL);
	waitpid(child, &st, 0);
	if (strstr(err, "1 other process") == NULL)
		fail_msg("unexpected reason: %s", err);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ipv4_both_ends),
		cmocka_unit_test(test_passive_only_on_the_data_port),
		cmocka_unit_test(test_ipv6_and_mapped_ipv4),
		cmocka_unit_test(test_longest_prefix_wins),
		cmocka_unit_test(test_refused_in_a_shared_cgroup),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
