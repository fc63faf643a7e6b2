/* slotd's off-loop rule sets (src/client/rulesync.c) with sets of two
 * texts, as the iptables backend makes them (IPv4, then IPv6): run on a
 * real event loop against stand-in tools (shell scripts named like the
 * real ones) that record what they were given. */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/log.h"
#include "../../src/client/rulesync.h"

static char dir[64], tool[128];
static uint64_t done_gen;
static int done_calls;

/* A stand-in for NAME-restore: appends its stdin, a line with its name,
 * to DIR/log; fails (exit 1) while DIR/fail-NAME holds a number above 0,
 * counting it down; sleeps while DIR/slow exists. */
static void
script(const char *name)
{
	char path[192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s-restore", dir, name);
	assert_non_null(f = fopen(path, "w"));
	fprintf(f, "#!/bin/sh\n"
	    "d=%s\n"
	    "[ -e $d/slow ] && sleep 0.3\n"
	    "cat >> $d/log\n"
	    "echo '== %s' >> $d/log\n"
	    "n=$(cat $d/fail-%s 2>/dev/null || echo 0)\n"
	    "if [ \"$n\" -gt 0 ]; then echo $((n - 1)) > $d/fail-%s; echo 'no: %s' >&2; exit 1; fi\n"
	    "exit 0\n", dir, name, name, name, name);
	fclose(f);
	assert_int_equal(chmod(path, 0755), 0);
}

static void
put_file(const char *name, const char *text)
{
	char path[192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	assert_non_null(f = fopen(path, "w"));
	fputs(text, f);
	fclose(f);
}

static char *
read_log(void)
{
	static char buf[4096];
	char path[192];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/log", dir);
	buf[0] = '\0';
	if ((f = fopen(path, "r")) != NULL) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = '\0';
	return buf;
}

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/slot-test-rulesync-XXXXXX");
	assert_non_null(mkdtemp(dir));
	script("iptables");
	script("ip6tables");
	snprintf(tool, sizeof(tool), "%s/iptables", dir);
	log_init("test_rulesync", SLOG_ERROR);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd) == 0 ? 0 : -1;
}

static void
done_cb(void *user, uint64_t gen)
{
	(void)user;
	done_gen = gen;
	done_calls++;
	ev_break(EV_DEFAULT, EVBREAK_ALL);
}

static void
give_up(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

/* Runs the loop until the set is in, or 10 s. */
static void
run_until_done(void)
{
	ev_timer t;

	ev_timer_init(&t, give_up, 10., 0.);
	ev_timer_start(EV_DEFAULT, &t);
	ev_run(EV_DEFAULT, 0);
	ev_timer_stop(EV_DEFAULT, &t);
}

static struct rules_set
two(const char *v4, const char *v6)
{
	struct rules_set s = { .n = 2 };

	s.job[0] = (struct rules_job){ AF_INET, strdup(v4), strlen(v4) };
	s.job[1] = (struct rules_job){ AF_INET6, strdup(v6), strlen(v6) };
	return s;
}

static struct rulesync *
fresh(void)
{
	struct rules_exec x = { .iptables = tool, .wait_s = 5 };
	struct rulesync *s = rsync_new(EV_DEFAULT, done_cb, NULL);

	assert_non_null(s);
	assert_int_equal(rsync_set_exec(s, &x), 0);
	put_file("log", "");
	done_calls = 0;
	done_gen = 0;
	return s;
}

/* Both texts go in, IPv4's first; the set counts once. */
static void
test_both_tools_in_order(void **state)
{
	struct rulesync *s = fresh();
	struct rules_set rs = two("v4 one\n", "v6 one\n");
	struct rsync_stats st;
	(void)state;

	assert_int_equal(rsync_submit(s, &rs, 1), 0);
	assert_int_equal(rs.n, 0);		/* taken */
	run_until_done();
	assert_int_equal(done_calls, 1);
	assert_int_equal(done_gen, 1);
	assert_string_equal(read_log(), "v4 one\n== iptables\nv6 one\n== ip6tables\n");
	rsync_get_stats(s, &st);
	assert_int_equal(st.runs, 1);
	assert_int_equal(st.ok, 1);
	assert_int_equal(st.installed, 1);
	assert_false(st.running);
	rsync_free(s);
}

/* IPv6's tool fails once: not installed meanwhile, and the retry runs the
 * whole set again, IPv4's text first. */
static void
test_second_tool_fails_then_the_whole_set_again(void **state)
{
	struct rulesync *s = fresh();
	struct rules_set rs = two("v4 two\n", "v6 two\n");
	struct rsync_stats st;
	(void)state;

	put_file("fail-ip6tables", "1\n");
	assert_int_equal(rsync_submit(s, &rs, 5), 0);
	run_until_done();
	assert_int_equal(done_calls, 1);
	assert_int_equal(done_gen, 5);
	assert_string_equal(read_log(), "v4 two\n== iptables\nv6 two\n== ip6tables\n"
	    "v4 two\n== iptables\nv6 two\n== ip6tables\n");
	rsync_get_stats(s, &st);
	assert_int_equal(st.runs, 2);
	assert_int_equal(st.failed, 1);
	assert_int_equal(st.ok, 1);
	assert_int_equal(st.installed, 5);
	rsync_free(s);
}

/* A newer set that arrives while the first tool of an older one runs: the
 * older one stops after that tool, the newer one goes in whole, and only
 * the newer generation is reported. */
static void
test_newer_set_supersedes_between_tools(void **state)
{
	struct rulesync *s = fresh();
	struct rules_set a = two("v4 a\n", "v6 a\n"), b = two("v4 b\n", "v6 b\n");
	struct rsync_stats st;
	char path[192];
	(void)state;

	put_file("slow", "");
	assert_int_equal(rsync_submit(s, &a, 1), 0);
	assert_int_equal(rsync_submit(s, &b, 2), 0);	/* a's IPv4 tool runs */
	run_until_done();
	snprintf(path, sizeof(path), "%s/slow", dir);
	unlink(path);
	assert_int_equal(done_calls, 1);
	assert_int_equal(done_gen, 2);
	assert_string_equal(read_log(), "v4 a\n== iptables\nv4 b\n== iptables\nv6 b\n"
	    "== ip6tables\n");
	rsync_get_stats(s, &st);
	assert_int_equal(st.superseded, 1);
	assert_int_equal(st.installed, 2);
	assert_int_equal(st.wanted, 2);
	/* Not newer: refused, and freed. */
	struct rules_set old = two("x\n", "y\n");
	assert_int_equal(rsync_submit(s, &old, 2), -1);
	assert_int_equal(old.n, 0);
	rsync_free(s);
}

/* One text, as nft's: "nft -f -" with it on stdin. */
static void
test_nft_one_text(void **state)
{
	char nft[192];
	FILE *f;
	(void)state;

	snprintf(nft, sizeof(nft), "%s/nft", dir);
	assert_non_null(f = fopen(nft, "w"));
	fprintf(f, "#!/bin/sh\n[ \"$1 $2\" = \"-f -\" ] || exit 2\ncat >> %s/log\n"
	    "echo '== nft' >> %s/log\n", dir, dir);
	fclose(f);
	assert_int_equal(chmod(nft, 0755), 0);
	struct rulesync *s = fresh();
	struct rules_exec x = { .iptables = tool, .wait_s = 5, .backend = RULES_NFT, .nft = nft };
	assert_int_equal(rsync_set_exec(s, &x), 0);
	struct rules_set rs = { .n = 1 };
	rs.job[0] = (struct rules_job){ AF_UNSPEC, strdup("table inet slot {}\n"), 19 };
	assert_int_equal(rsync_submit(s, &rs, 3), 0);
	run_until_done();
	assert_int_equal(done_gen, 3);
	assert_string_equal(read_log(), "table inet slot {}\n== nft\n");
	rsync_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_both_tools_in_order),
		cmocka_unit_test(test_second_tool_fails_then_the_whole_set_again),
		cmocka_unit_test(test_newer_set_supersedes_between_tools),
		cmocka_unit_test(test_nft_one_text),
	};
	return cmocka_run_group_tests_name("rulesync", tests, setup, teardown);
}
