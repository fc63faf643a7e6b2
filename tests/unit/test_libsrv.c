/* The lib socket's "connect" arguments (libsrv.h): what slotd takes from a
 * program, and the clear refusals. The exchange itself runs against a real
 * slotd in tests/integration/test_libslot.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../src/client/libsrv.h"

static void
test_parse_connect(void **state)
{
	struct endpoint server, ep;
	struct lib_opts o;
	char err[160];
	(void)state;

	assert_int_equal(libsrv_parse_connect("192.0.2.1:8080", &server, &o, err, sizeof(err)), 0);
	assert_int_equal(ep_parse("192.0.2.1:8080", 0, &ep), 0);
	assert_true(ep_eq(&server, &ep));
	assert_false(o.has_relay);
	assert_int_equal(o.navoid, 0);
	assert_int_equal(o.deadline_ms, 0);

	assert_int_equal(libsrv_parse_connect("[2001:db8::1]:22 relay=198.51.100.7:7600 "
	    "avoid=203.0.113.9:7600 avoid=[2001:db8::9]:7600 deadline_ms=250", &server, &o, err,
	    sizeof(err)), 0);
	assert_int_equal(server.addr.family, AF_INET6);
	assert_true(o.has_relay);
	assert_int_equal(ep_parse("198.51.100.7:7600", 0, &ep), 0);
	assert_true(ep_eq(&o.relay, &ep));
	assert_int_equal(o.navoid, 2);
	assert_int_equal(ep_parse("[2001:db8::9]:7600", 0, &ep), 0);
	assert_true(lib_opts_avoids(&o, &ep));
	assert_false(lib_opts_avoids(&o, &o.relay));
	assert_false(lib_opts_avoids(NULL, &ep));
	assert_int_equal(o.deadline_ms, 250);
	assert_int_equal(o.nnext, 0);

	/* A forced chain: the first relay is relay, the others follow. */
	assert_int_equal(libsrv_parse_connect("192.0.2.1:80 relay=198.51.100.7:7600,"
	    "[2001:db8::20]:7600,198.51.100.30:7000", &server, &o, err, sizeof(err)), 0);
	assert_true(o.has_relay);
	assert_int_equal(ep_parse("198.51.100.7:7600", 0, &ep), 0);
	assert_true(ep_eq(&o.relay, &ep));
	assert_int_equal(o.nnext, 2);
	assert_int_equal(ep_parse("[2001:db8::20]:7600", 0, &ep), 0);
	assert_true(ep_eq(&o.next[0], &ep));
	assert_int_equal(ep_parse("198.51.100.30:7000", 0, &ep), 0);
	assert_true(ep_eq(&o.next[1], &ep));
	assert_int_equal(libsrv_parse_connect("192.0.2.1:80 relay=198.51.100.7:7600,"
	    "198.51.100.8:7600", &server, &o, err, sizeof(err)), 0);
	assert_int_equal(o.nnext, 1);
}

static void
test_parse_connect_refusals(void **state)
{
	static const struct {
		const char *args, *says;
	} bad[] = {
		{ "", "expected the server's ADDRESS:PORT" },
		{ "example.com:80", "expected the server's ADDRESS:PORT" },
		{ "192.0.2.1", "expected the server's ADDRESS:PORT" },	/* no port */
		{ "192.0.2.1:0", "expected the server's ADDRESS:PORT" },
		{ "relay=192.0.2.1:1", "expected the server's ADDRESS:PORT" },
		{ "192.0.2.1:80 relay", "expected KEY=VALUE" },
		{ "192.0.2.1:80 relay=nowhere", "expected a relay's ADDRESS:PORT" },
		{ "192.0.2.1:80 speed=fast", "unknown option 'speed'" },
		{ "192.0.2.1:80 deadline_ms=0", "expected 1 to 60000" },
		{ "192.0.2.1:80 deadline_ms=60001", "expected 1 to 60000" },
		{ "192.0.2.1:80 deadline_ms=-5", "expected 1 to 60000" },
		{ "192.0.2.1:80 deadline_ms=5x", "expected 1 to 60000" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600 avoid=192.0.2.9:7600", "also avoided" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600,192.0.2.8:7600 avoid=192.0.2.8:7600",
		  "also avoided" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600,192.0.2.8:7600,192.0.2.7:7600,"
		  "192.0.2.6:7600", "at most 3 relays" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600,192.0.2.9:7600", "twice in the chain" },
		/* a second relay= would make the chain 192.0.2.8 > 192.0.2.8 */
		{ "192.0.2.1:80 relay=192.0.2.9:7600,192.0.2.8:7600 relay=192.0.2.8:7600",
		  "relay= twice" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600 relay=192.0.2.8:7600", "relay= twice" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600 relay=192.0.2.8:7600,192.0.2.7:7600",
		  "relay= twice" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600,", "expected ADDRESS:PORT[,ADDRESS:PORT]" },
		{ "192.0.2.1:80 relay=192.0.2.9:7600,nowhere", "expected a relay's ADDRESS:PORT" },
		{ "192.0.2.1:80 avoid=192.0.2.1:1 avoid=192.0.2.1:2 avoid=192.0.2.1:3 "
		  "avoid=192.0.2.1:4 avoid=192.0.2.1:5 avoid=192.0.2.1:6 avoid=192.0.2.1:7 "
		  "avoid=192.0.2.1:8 avoid=192.0.2.1:9", "at most 8 avoid=" },
	};
	struct endpoint server;
	struct lib_opts o;
	char err[160], longreq[700];
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(libsrv_parse_connect(bad[i].args, &server, &o, err, sizeof(err)), -1);
		if (strstr(err, bad[i].says) == NULL)
			fail_msg("'%s': said '%s', not '%s'", bad[i].args, err, bad[i].says);
	}
	memset(longreq, 'a', sizeof(longreq) - 1);
	longreq[sizeof(longreq) - 1] = '\0';
	assert_int_equal(libsrv_parse_connect(longreq, &server, &o, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "too long"));
}

/* [lib] attach_from: which cgroups' processes may leave for the run cgroup. */
static void
test_attach_from(void **state)
{
	char err[200], cg[4096];
	(void)state;

	assert_int_equal(libsrv_attach_from_ok("/user.slice", err, sizeof(err)), 0);
	assert_int_equal(libsrv_attach_from_ok("", err, sizeof(err)), 0);
	assert_int_equal(libsrv_attach_from_ok("/, /a/b.scope\t/c/", err, sizeof(err)), 0);
	assert_int_equal(libsrv_attach_from_ok("user.slice", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "'user.slice': expected a cgroup path from '/'"));
	assert_int_equal(libsrv_attach_from_ok("/a/../b", err, sizeof(err)), -1);
	assert_int_equal(libsrv_attach_from_ok("/a/.", err, sizeof(err)), -1);
	assert_int_equal(libsrv_attach_from_ok("/1 /2 /3 /4 /5 /6 /7 /8 /9", err, sizeof(err)), -1);
	assert_non_null(strstr(err, "at most 8"));

	assert_true(libsrv_cgroup_under("/user.slice", "/user.slice"));
	assert_true(libsrv_cgroup_under("/user.slice/user-1000.slice/session-2.scope",
	    "/system.slice,/user.slice"));
	assert_true(libsrv_cgroup_under("/user.slice/x", "/user.slice/"));
	assert_false(libsrv_cgroup_under("/user.slicex", "/user.slice"));
	assert_false(libsrv_cgroup_under("/system.slice/sshd.service", "/user.slice"));
	assert_false(libsrv_cgroup_under("/user.slice", ""));
	assert_true(libsrv_cgroup_under("/", "/"));
	assert_true(libsrv_cgroup_under("/system.slice/a.service", "/"));
	/* outside slotd's cgroup namespace: under nothing, "/" included */
	assert_false(libsrv_cgroup_under("/../../x", "/"));
	assert_false(libsrv_cgroup_under("/user.slice/../../x", "/user.slice"));

	/* our own: the "0::" line, whatever the v1 lines before it */
	assert_int_equal(libsrv_proc_cgroup((int)getpid(), cg, sizeof(cg)), 0);
	assert_int_equal(cg[0], '/');
	assert_null(strchr(cg, '\n'));
	assert_int_equal(libsrv_proc_cgroup(-5, cg, sizeof(cg)), -1);
}

/* A "connect" socket must be fresh: neither connected, connecting (its SYN
 * out: getpeername says ENOTCONN then too) nor listening. */
static void
test_check_socket(void **state)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sin);
	struct endpoint server;
	char err[160];
	int l = socket(AF_INET, SOCK_STREAM, 0), fresh = socket(AF_INET, SOCK_STREAM, 0);
	int first = socket(AF_INET, SOCK_STREAM, 0), syn = socket(AF_INET, SOCK_STREAM, 0);
	struct tcp_info ti;
	socklen_t tl = sizeof(ti);
	(void)state;

	/* A backlog of 0 holds one connection: the next one's SYN is
	 * dropped, and that socket stays in SYN_SENT. */
	assert_int_equal(bind(l, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(listen(l, 0), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &sl), 0);
	assert_int_equal(ep_parse("192.0.2.1:80", 0, &server), 0);

	sin.sin_port = 0;
	assert_int_equal(bind(fresh, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_not_equal(libsrv_check_socket(fresh, &server, err, sizeof(err)), 0);
	assert_int_equal(getsockname(l, (struct sockaddr *)&sin, &sl), 0);

	assert_int_equal(connect(first, (struct sockaddr *)&sin, sizeof(sin)), 0);
	assert_int_equal(libsrv_check_socket(first, &server, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "EISCONN"));

	assert_int_equal(fcntl(syn, F_SETFL, O_NONBLOCK), 0);
	assert_int_equal(connect(syn, (struct sockaddr *)&sin, sizeof(sin)), -1);
	assert_int_equal(errno, EINPROGRESS);
	usleep(100000);
	assert_int_equal(getsockopt(syn, IPPROTO_TCP, TCP_INFO, &ti, &tl), 0);
	assert_int_equal(ti.tcpi_state, TCP_SYN_SENT);
	assert_int_equal(libsrv_check_socket(syn, &server, err, sizeof(err)), 0);
	assert_string_equal(err, "EISCONN the socket is connected (or connecting, or listening) "
	    "already");

	assert_int_equal(libsrv_check_socket(l, &server, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "EISCONN"));

	assert_int_equal(libsrv_check_socket(0 + STDERR_FILENO + 100, &server, err, sizeof(err)), 0);
	assert_non_null(strstr(err, "ENOTSOCK"));
	close(l);
	close(fresh);
	close(first);
	close(syn);
}

/* A failed recvmsg leaves the control buffer as it was: stale bytes that
 * may look like SCM_RIGHTS, naming descriptors slotd would then close. */
static void
test_msg_fds(void **state)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(2 * sizeof(int))];
	} cb;
	char data[16];
	struct iovec iov = { data, sizeof(data) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb.b,
	    .msg_controllen = sizeof(cb.b) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	int stale[2] = { 7, 9 }, fds[4], p[2];
	ssize_t n;
	(void)state;

	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(stale));
	memcpy(CMSG_DATA(cm), stale, sizeof(stale));

	/* recvmsg on a pipe fails (ENOTSOCK), msg_controllen untouched */
	assert_int_equal(pipe(p), 0);
	n = recvmsg(p[0], &mh, MSG_DONTWAIT);
	assert_int_equal(n, -1);
	assert_int_equal(mh.msg_controllen, sizeof(cb.b));
	assert_int_equal(libsrv_msg_fds(&mh, n, fds, 4), 0);
	close(p[0]);
	close(p[1]);

	/* as the kernel writes it (n >= 0, EOF included): taken, up to max */
	assert_int_equal(libsrv_msg_fds(&mh, 0, fds, 4), 2);
	assert_int_equal(fds[0], 7);
	assert_int_equal(fds[1], 9);
	assert_int_equal(libsrv_msg_fds(&mh, 5, fds, 1), 1);
	mh.msg_controllen = 0;
	assert_int_equal(libsrv_msg_fds(&mh, 5, fds, 4), 0);
}

/* attach moves a pid: it must still be the peer's, of the peer's uid. */
static void
test_peer_check(void **state)
{
	char err[200];
	int me = pidfd_open(getpid(), 0), pidfd;
	pid_t kid;
	(void)state;

	assert_true(me >= 0);
	assert_int_equal(libsrv_peer_check(me, getpid(), geteuid(), err, sizeof(err)), 0);
	assert_int_equal(libsrv_peer_check(-1, getpid(), geteuid(), err, sizeof(err)), 0);
	assert_int_equal(libsrv_peer_check(me, getpid(), geteuid() + 1, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "runs as uid"));
	assert_int_equal(libsrv_peer_check(-1, getpid(), geteuid() + 1, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "runs as uid"));
	close(me);

	/* A peer that has exited, as SO_PEERCRED still names it. */
	assert_true((kid = fork()) >= 0);
	if (kid == 0)
		_exit(0);
	assert_true((pidfd = pidfd_open(kid, 0)) >= 0);
	assert_int_equal(waitpid(kid, NULL, 0), kid);
	assert_int_equal(libsrv_peer_check(pidfd, kid, geteuid(), err, sizeof(err)), -1);
	assert_non_null(strstr(err, "has exited"));
	/* by the pid alone (no SO_PEERPIDFD): as long as it is not reused */
	assert_int_equal(libsrv_peer_check(-1, kid, geteuid(), err, sizeof(err)), -1);
	assert_non_null(strstr(err, "has exited"));
	close(pidfd);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_connect),
		cmocka_unit_test(test_parse_connect_refusals),
		cmocka_unit_test(test_attach_from),
		cmocka_unit_test(test_peer_check),
		cmocka_unit_test(test_check_socket),
		cmocka_unit_test(test_msg_fds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
