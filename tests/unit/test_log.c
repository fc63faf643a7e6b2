/* Unit tests for src/core/log.c: stderr is pointed at a temporary file. */

#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "slot/log.h"

static int saved_fd = -1;
static int cap_fd = -1;
static char cap_buf[8192];

static void
capture_begin(void)
{
	char path[] = "/tmp/test_log.XXXXXX";

	cap_fd = mkstemp(path);
	assert_true(cap_fd >= 0);
	unlink(path);
	saved_fd = dup(STDERR_FILENO);
	assert_true(saved_fd >= 0);
	assert_int_equal(dup2(cap_fd, STDERR_FILENO), STDERR_FILENO);
}

/* Restores stderr and returns what was written, NUL-terminated. */
static const char *
capture_end(void)
{
	ssize_t n;

	assert_int_equal(dup2(saved_fd, STDERR_FILENO), STDERR_FILENO);
	close(saved_fd);
	n = pread(cap_fd, cap_buf, sizeof(cap_buf) - 1, 0);
	assert_true(n >= 0);
	cap_buf[n] = '\0';
	close(cap_fd);
	return cap_buf;
}

static int
count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		if (*s == '\n')
			n++;
	return n;
}

static int
setup_plain(void **state)
{
	(void)state;
	unsetenv("JOURNAL_STREAM");
	log_init("test", SLOG_DEBUG);
	return 0;
}

static void
test_plain_format(void **state)
{
	regex_t re;
	const char *out;

	(void)state;
	capture_begin();
	log_info("hello %d", 42);
	out = capture_end();
	assert_int_equal(regcomp(&re, "^[0-9]{4}-[01][0-9]-[0-3][0-9]T[0-2][0-9]:"
	    "[0-5][0-9]:[0-6][0-9]\\.[0-9]{3} test info: hello 42\n$",
	    REG_EXTENDED), 0);
	if (regexec(&re, out, 0, NULL, 0) != 0)
		fail_msg("unexpected line: \"%s\"", out);
	regfree(&re);
}

static void
test_level_words(void **state)
{
	const char *out;

	(void)state;
	capture_begin();
	log_errorx("a");
	log_warnx("b");
	log_info("c");
	log_debug("d");
	out = capture_end();
	assert_non_null(strstr(out, " test error: a\n"));
	assert_non_null(strstr(out, " test warn: b\n"));
	assert_non_null(strstr(out, " test info: c\n"));
	assert_non_null(strstr(out, " test debug: d\n"));
	assert_int_equal(count_lines(out), 4);
}

static void
test_filtering(void **state)
{
	const char *out;

	(void)state;
	log_set_level(SLOG_WARN);
	assert_int_equal(log_get_level(), SLOG_WARN);
	capture_begin();
	log_debug("no-debug");
	log_info("no-info");
	log_warnx("yes-warn");
	log_errorx("yes-error");
	out = capture_end();
	assert_null(strstr(out, "no-"));
	assert_non_null(strstr(out, "yes-warn"));
	assert_non_null(strstr(out, "yes-error"));
	assert_int_equal(count_lines(out), 2);

	log_set_level(SLOG_ERROR);
	capture_begin();
	log_warnx("no-warn");
	log_errorx("yes-error");
	out = capture_end();
	assert_null(strstr(out, "no-warn"));
	assert_int_equal(count_lines(out), 1);

	log_set_level(SLOG_DEBUG);
	capture_begin();
	log_debug("yes-debug");
	out = capture_end();
	assert_non_null(strstr(out, "yes-debug"));
}

static void
test_errno_suffix(void **state)
{
	const char *out;
	char want[256];

	(void)state;
	capture_begin();
	errno = ENOENT;
	log_warn("open %s", "x");
	assert_int_equal(errno, ENOENT);	/* logging keeps errno */
	errno = EACCES;
	log_error("bind");
	errno = EPIPE;
	log_warnx("plain-warn");
	log_errorx("plain-error");
	out = capture_end();
	snprintf(want, sizeof(want), " warn: open x: %s\n", strerror(ENOENT));
	assert_non_null(strstr(out, want));
	snprintf(want, sizeof(want), " error: bind: %s\n", strerror(EACCES));
	assert_non_null(strstr(out, want));
	assert_non_null(strstr(out, " warn: plain-warn\n"));
	assert_non_null(strstr(out, " error: plain-error\n"));
	assert_null(strstr(out, strerror(EPIPE)));
}

static void
test_journal_prefix(void **state)
{
	const char *out;
	char want[256];

	(void)state;
	setenv("JOURNAL_STREAM", "8:12345", 1);
	log_init("test", SLOG_DEBUG);
	capture_begin();
	log_errorx("e1");
	errno = ENOENT;
	log_warn("w1");
	log_info("i1");
	log_debug("d1");
	out = capture_end();
	unsetenv("JOURNAL_STREAM");
	log_init("test", SLOG_DEBUG);
	snprintf(want, sizeof(want), "<3>e1\n<4>w1: %s\n<6>i1\n<7>d1\n",
	    strerror(ENOENT));
	assert_string_equal(out, want);
}

static void
test_ident_basename(void **state)
{
	const char *out;

	(void)state;
	log_init("/usr/sbin/slot-relayd", SLOG_INFO);
	capture_begin();
	log_info("x");
	out = capture_end();
	log_init("test", SLOG_DEBUG);
	assert_non_null(strstr(out, " slot-relayd info: x\n"));
	assert_null(strstr(out, "/usr"));
}

static void
test_control_chars(void **state)
{
	const char *out;

	(void)state;
	capture_begin();
	log_info("a\nfake line\rb");
	out = capture_end();
	assert_int_equal(count_lines(out), 1);
	assert_non_null(strstr(out, "a?fake line?b\n"));
}

static void
test_truncation(void **state)
{
	char big[5000];
	const char *out;
	size_t len;

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	capture_begin();
	errno = ENOENT;
	log_warn("%s", big);
	out = capture_end();
	len = strlen(out);
	assert_int_equal(count_lines(out), 1);
	assert_true(len <= 2048);
	assert_true(len > 1000);
	assert_string_equal(out + len - 4, "...\n");
}

static void
test_level_parse(void **state)
{
	enum slog_level l;

	(void)state;
	assert_int_equal(log_level_parse("error", &l), 0);
	assert_int_equal(l, SLOG_ERROR);
	assert_int_equal(log_level_parse("warn", &l), 0);
	assert_int_equal(l, SLOG_WARN);
	assert_int_equal(log_level_parse("info", &l), 0);
	assert_int_equal(l, SLOG_INFO);
	assert_int_equal(log_level_parse("DEBUG", &l), 0);
	assert_int_equal(l, SLOG_DEBUG);
	l = SLOG_INFO;
	assert_int_equal(log_level_parse("verbose", &l), -1);
	assert_int_equal(log_level_parse("", &l), -1);
	assert_int_equal(log_level_parse("inf", &l), -1);
	assert_int_equal(l, SLOG_INFO);
	assert_string_equal(log_level_name(SLOG_ERROR), "error");
	assert_string_equal(log_level_name(SLOG_WARN), "warn");
	assert_string_equal(log_level_name(SLOG_INFO), "info");
	assert_string_equal(log_level_name(SLOG_DEBUG), "debug");
}

static void
test_fatal_exits(void **state)
{
	int fds[2], status;
	char buf[512];
	ssize_t n;
	pid_t pid;

	(void)state;
	assert_int_equal(pipe(fds), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		errno = EINVAL;
		fatal("cannot start %s", "now");
	}
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_non_null(strstr(buf, " test error: cannot start now: "));
	assert_non_null(strstr(buf, strerror(EINVAL)));

	assert_int_equal(pipe(fds), 0);
	fflush(stdout);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fds[1], STDERR_FILENO);
		fatalx("bad config");
	}
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 1);
	assert_non_null(strstr(buf, " test error: bad config\n"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_plain_format, setup_plain),
		cmocka_unit_test_setup(test_level_words, setup_plain),
		cmocka_unit_test_setup(test_filtering, setup_plain),
		cmocka_unit_test_setup(test_errno_suffix, setup_plain),
		cmocka_unit_test_setup(test_journal_prefix, setup_plain),
		cmocka_unit_test_setup(test_ident_basename, setup_plain),
		cmocka_unit_test_setup(test_control_chars, setup_plain),
		cmocka_unit_test_setup(test_truncation, setup_plain),
		cmocka_unit_test(test_level_parse),
		cmocka_unit_test_setup(test_fatal_exits, setup_plain),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
