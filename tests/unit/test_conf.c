/* Unit tests for src/core/conf.c: loader errors with line numbers, and each
 * value parser at its boundaries. */

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "slot/conf.h"

static char tmpdir[64];

static int
group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_conf.XXXXXX");
	return mkdtemp(tmpdir) == NULL ? -1 : 0;
}

static int
group_teardown(void **state)
{
	char cmd[128];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* Writes text into a file of the temporary directory; returns its path. */
static const char *
write_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	return path;
}

#define MAX_SEEN 16

struct seen {
	int n;
	char entry[MAX_SEEN][256];	/* "section|name|value" */
	const char *fail_name;		/* handler fails on this name */
	const char *fail_msg;
};

static int
collect(void *user, const char *section, const char *name, const char *value,
    char *err, size_t errlen)
{
	struct seen *s = user;

	if (s->fail_name != NULL && strcmp(name, s->fail_name) == 0) {
		snprintf(err, errlen, "%s", s->fail_msg);
		return -1;
	}
	assert_true(s->n < MAX_SEEN);
	snprintf(s->entry[s->n++], sizeof(s->entry[0]), "%s|%s|%s", section,
	    name, value);
	return 0;
}

static void
test_load_good(void **state)
{
	struct seen s = { 0 };
	char err[256] = "";
	const char *path;

	(void)state;
	path = write_file("good.ini",
	    "; comment\n"
	    "# another comment\n"
	    "top = 1\n"
	    "\n"
	    "[relay]\n"
	    "listen = 0.0.0.0:7000 ; inline comment\n"
	    "  indented = yes\n"
	    "name: colon\n"
	    "semi = a;b\n"
	    "hash = a # b\n"
	    "empty =\n"
	    "[ other ]\n"
	    "spaced   =   value with spaces   \n"
	    "last = no newline");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 9);
	assert_string_equal(s.entry[0], "|top|1");
	assert_string_equal(s.entry[1], "relay|listen|0.0.0.0:7000");
	/* An indented key is a key, not a continuation of "listen". */
	assert_string_equal(s.entry[2], "relay|indented|yes");
	assert_string_equal(s.entry[3], "relay|name|colon");
	assert_string_equal(s.entry[4], "relay|semi|a;b");
	assert_string_equal(s.entry[5], "relay|hash|a # b");
	assert_string_equal(s.entry[6], "relay|empty|");
	assert_string_equal(s.entry[7], "other|spaced|value with spaces");
	assert_string_equal(s.entry[8], "other|last|no newline");
}

static void
test_load_crlf_and_empty(void **state)
{
	struct seen s = { 0 };
	char err[256] = "";
	const char *path;

	(void)state;
	path = write_file("crlf.ini", "[a]\r\nx = 1\r\ny = 2\r\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.entry[0], "a|x|1");
	assert_string_equal(s.entry[1], "a|y|2");

	memset(&s, 0, sizeof(s));
	path = write_file("empty.ini", "");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 0);
}

static void
test_load_syntax_error(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256];
	const char *path;

	(void)state;
	path = write_file("syntax.ini", "[a]\nx = 1\nthis line has no equals\ny = 2\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:3: syntax error", path);
	assert_string_equal(err, want);

	path = write_file("section.ini", "x = 1\n\n[broken\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:3: syntax error", path);
	assert_string_equal(err, want);

	/* What used to be a continuation line is now a line of its own. */
	path = write_file("cont.ini", "[a]\nx = 1\n   continued\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:3: syntax error", path);
	assert_string_equal(err, want);
}

static void
test_load_handler_error(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256];
	const char *path;

	(void)state;
	s.fail_name = "port";
	s.fail_msg = "port must be 1..65535";
	path = write_file("handler.ini",
	    "[a]\n; c\nx = 1\nport = 0\nafter = 1\n[b]\nmore = 2\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:4: port must be 1..65535", path);
	assert_string_equal(err, want);
	/* Nothing after the failing line reaches the handler. */
	assert_int_equal(s.n, 1);
	assert_string_equal(s.entry[0], "a|x|1");

	/* Without a reason the loader names the entry. */
	memset(&s, 0, sizeof(s));
	s.fail_name = "port";
	s.fail_msg = "";
	path = write_file("handler2.ini", "[net]\nport = x\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: invalid value for net.port", path);
	assert_string_equal(err, want);
}

static void
test_load_first_error_wins(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256];
	const char *path;

	(void)state;
	s.fail_name = "port";
	s.fail_msg = "bad port";
	path = write_file("first.ini", "[a]\ngarbage\nport = 1\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: syntax error", path);
	assert_string_equal(err, want);

	path = write_file("first2.ini", "[a]\nport = 1\ngarbage\n");
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: bad port", path);
	assert_string_equal(err, want);
}

static void
test_load_long_line(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256], text[1024];
	const char *path;
	int n;

	(void)state;
	/* 197 characters plus CR LF is the longest line inih takes whole. */
	n = snprintf(text, sizeof(text), "[a]\nk = ");
	memset(text + n, 'v', 197 - 4);
	snprintf(text + n + 197 - 4, sizeof(text) - (size_t)n - 193, "\r\nz = 1\n");
	path = write_file("long-ok.ini", text);
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 2);
	assert_int_equal(strlen(s.entry[0]), strlen("a|k|") + 193);

	n = snprintf(text, sizeof(text), "[a]\nx = 1\nk = ");
	memset(text + n, 'v', 400);
	snprintf(text + n + 400, sizeof(text) - (size_t)n - 400, "\nz = 1\n");
	path = write_file("long.ini", text);
	memset(&s, 0, sizeof(s));
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:3: line too long (at most 197 characters)",
	    path);
	assert_string_equal(err, want);
	assert_int_equal(s.n, 1);	/* the tail was not parsed as a line */
}

static void
test_load_nul_byte(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256], path[128];
	FILE *f;

	(void)state;
	snprintf(path, sizeof(path), "%s/nul.ini", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	fwrite("a = 1\nb = x\0y\n", 1, 14, f);
	fclose(f);
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: NUL byte in line", path);
	assert_string_equal(err, want);
}

static void
test_load_unreadable(void **state)
{
	struct seen s = { 0 };
	char err[256] = "", want[256], path[128];
	const char *p;

	(void)state;
	snprintf(path, sizeof(path), "%s/missing.ini", tmpdir);
	assert_int_equal(conf_load(path, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
	assert_string_equal(err, want);

	/* A directory opens but cannot be read. */
	assert_int_equal(conf_load(tmpdir, collect, &s, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s: %s", tmpdir, strerror(EISDIR));
	assert_string_equal(err, want);

	if (geteuid() != 0) {
		p = write_file("noperm.ini", "a = 1\n");
		assert_int_equal(chmod(p, 0), 0);
		assert_int_equal(conf_load(p, collect, &s, err, sizeof(err)), -1);
		snprintf(want, sizeof(want), "%s: %s", p, strerror(EACCES));
		assert_string_equal(err, want);
	}
	assert_int_equal(s.n, 0);
}

static void
test_duration(void **state)
{
	static const struct {
		const char *s;
		uint64_t ms;
	} good[] = {
		{ "0", 0 }, { "250ms", 250 }, { "5s", 5000 }, { "5", 5000 },
		{ "2m", 120000 }, { "1h", 3600000 }, { "1d", 86400000 },
		{ "0ms", 0 }, { "007s", 7000 },
		{ "18446744073709551615ms", UINT64_MAX },
		{ "18446744073709551s", 18446744073709551000ULL },
	};
	static const char *const bad[] = {
		"", "-5s", "-1", "+5s", "5x", "5 s", " 5s", "5s ", "s", "ms",
		"1.5s", "5S", "5sec", "5ms5", "0x10", "5mss",
		"18446744073709551616ms",	/* digits overflow */
		"18446744073709552s",		/* unit overflows */
		"18446744073709551615",		/* bare seconds overflow */
		"213503982335d",
	};
	char err[256];
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		if (conf_duration_ms(good[i].s, &v, err, sizeof(err)) != 0)
			fail_msg("\"%s\" refused: %s", good[i].s, err);
		assert_int_equal(v, good[i].ms);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		err[0] = '\0';
		if (conf_duration_ms(bad[i], &v, err, sizeof(err)) != -1)
			fail_msg("\"%s\" accepted", bad[i]);
		assert_int_equal(v, 12345);	/* untouched on error */
		assert_true(err[0] != '\0');
		assert_non_null(strstr(err, bad[i]));
	}
	/* 213503982334d is the largest whole number of days in uint64 ms. */
	assert_int_equal(conf_duration_ms("213503982334d", &v, err, sizeof(err)), 0);
	assert_int_equal(v, 213503982334ULL * 86400000ULL);
	/* A NULL err is allowed. */
	assert_int_equal(conf_duration_ms("x", &v, NULL, 0), -1);
}

static void
test_uint(void **state)
{
	static const char *const bad[] = {
		"", "-1", "+1", "1a", " 1", "1 ", "0x10", "1.0", "1e3", "a",
		"18446744073709551616",
	};
	char err[256];
	uint64_t v;
	size_t i;

	(void)state;
	assert_int_equal(conf_uint("1", 1, 65535, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1);
	assert_int_equal(conf_uint("65535", 1, 65535, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 65535);
	assert_int_equal(conf_uint("0080", 1, 65535, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 80);
	v = 7;
	assert_int_equal(conf_uint("0", 1, 65535, &v, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "out of range [1, 65535]"));
	assert_int_equal(conf_uint("65536", 1, 65535, &v, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "65536 is out of range"));
	assert_int_equal(v, 7);
	assert_int_equal(conf_uint("18446744073709551615", 0, UINT64_MAX, &v,
	    err, sizeof(err)), 0);
	assert_true(v == UINT64_MAX);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 7;
		if (conf_uint(bad[i], 0, UINT64_MAX, &v, err, sizeof(err)) != -1)
			fail_msg("\"%s\" accepted", bad[i]);
		assert_int_equal(v, 7);
	}
	assert_int_equal(conf_uint("abc", 0, 10, &v, err, sizeof(err)), -1);
	assert_string_equal(err, "invalid number \"abc\"");
}

static void
test_double(void **state)
{
	static const char *const bad[] = {
		"", "abc", "1.5x", " 1", "1 ", "nan", "inf", "-inf", "1,5", ".",
		"e3",
	};
	char err[256];
	double v;
	size_t i;

	(void)state;
	assert_int_equal(conf_double("1.25", 0, 10, &v, err, sizeof(err)), 0);
	assert_true(v == 1.25);
	assert_int_equal(conf_double("-0.5", -1, 1, &v, err, sizeof(err)), 0);
	assert_true(v == -0.5);
	assert_int_equal(conf_double("1e1", 0, 10, &v, err, sizeof(err)), 0);
	assert_true(v == 10.0);
	assert_int_equal(conf_double("0", 0, 10, &v, err, sizeof(err)), 0);
	assert_true(v == 0.0);
	v = 3;
	assert_int_equal(conf_double("10.0001", 0, 10, &v, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "out of range"));
	assert_int_equal(conf_double("-0.1", 0, 10, &v, err, sizeof(err)), -1);
	assert_int_equal(conf_double("1e999", 0, 1e300, &v, err, sizeof(err)), -1);
	assert_true(v == 3);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (conf_double(bad[i], -1e9, 1e9, &v, err, sizeof(err)) != -1)
			fail_msg("\"%s\" accepted", bad[i]);
		assert_true(v == 3);
		assert_non_null(strstr(err, "invalid number"));
	}
}

static void
test_bool(void **state)
{
	static const char *const t[] = { "yes", "true", "on", "1", "YES", "True" };
	static const char *const f[] = { "no", "false", "off", "0", "NO", "Off" };
	static const char *const bad[] = { "", "y", "n", "2", "yes ", "enable", "01" };
	char err[256];
	bool v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		v = false;
		assert_int_equal(conf_bool(t[i], &v, err, sizeof(err)), 0);
		assert_true(v);
	}
	for (i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		v = true;
		assert_int_equal(conf_bool(f[i], &v, err, sizeof(err)), 0);
		assert_false(v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = true;
		if (conf_bool(bad[i], &v, err, sizeof(err)) != -1)
			fail_msg("\"%s\" accepted", bad[i]);
		assert_true(v);
		assert_non_null(strstr(err, "invalid boolean"));
	}
}

static void
test_size(void **state)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
		{ "0", 0 }, { "65536", 65536 }, { "64k", 65536 }, { "64K", 65536 },
		{ "1M", 1048576 }, { "1m", 1048576 }, { "1G", 1073741824 },
		{ "17179869183G", 17179869183ULL << 30 },
	};
	static const char *const bad[] = {
		"", "k", "-1", "+1", "1T", "1kb", "1KiB", "1.5M", " 1k", "1k ",
		"1 k", "0x10",
		"17179869184G",			/* 2^64 */
		"18446744073709551616",
	};
	char err[256];
	uint64_t v;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 9;
		if (conf_size(good[i].s, 0, UINT64_MAX, &v, err, sizeof(err)) != 0)
			fail_msg("\"%s\" refused: %s", good[i].s, err);
		assert_true(v == good[i].v);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 9;
		if (conf_size(bad[i], 0, UINT64_MAX, &v, err, sizeof(err)) != -1)
			fail_msg("\"%s\" accepted", bad[i]);
		assert_int_equal(v, 9);
	}
	/* Range applies to the value after the suffix. */
	assert_int_equal(conf_size("4k", 4096, 65536, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 4096);
	assert_int_equal(conf_size("64k", 4096, 65536, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 65536);
	assert_int_equal(conf_size("4095", 4096, 65536, &v, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "out of range [4096, 65536]"));
	assert_int_equal(conf_size("65537", 4096, 65536, &v, err, sizeof(err)), -1);
	assert_int_equal(conf_size("1M", 4096, 65536, &v, err, sizeof(err)), -1);
	assert_int_equal(v, 65536);
}

static void
test_string(void **state)
{
	char out[8], err[256];

	(void)state;
	assert_int_equal(conf_string("1234567", out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "1234567");
	assert_int_equal(conf_string("", out, sizeof(out), err, sizeof(err)), 0);
	assert_string_equal(out, "");
	strcpy(out, "keep");
	assert_int_equal(conf_string("12345678", out, sizeof(out), err, sizeof(err)), -1);
	assert_string_equal(out, "keep");
	assert_string_equal(err, "value too long (at most 7 characters)");
	assert_int_equal(conf_string("", out, 0, err, sizeof(err)), -1);
}

static void
test_urls(void **state)
{
	struct conf_urls u;
	char err[256], many[600] = "", longurl[300];

	(void)state;
	assert_int_equal(conf_urls("", &u, err, sizeof(err)), 0);
	assert_int_equal(u.n, 0);
	assert_int_equal(conf_urls(" http://a:7602/RPC2, https://[2001:db8::1]/RPC2 ,,http://b ",
	    &u, err, sizeof(err)), 0);
	assert_int_equal(u.n, 3);
	assert_string_equal(u.url[0], "http://a:7602/RPC2");
	assert_string_equal(u.url[1], "https://[2001:db8::1]/RPC2");
	assert_string_equal(u.url[2], "http://b");
	/* a bad list leaves out untouched */
	assert_int_equal(conf_urls("http://a ftp://b", &u, err, sizeof(err)), -1);
	assert_string_equal(err, "'ftp://b': expected http://host[:port]/path");
	assert_int_equal(u.n, 3);
	assert_int_equal(conf_urls("http://", &u, err, sizeof(err)), -1);
	assert_int_equal(conf_urls("http:///RPC2", &u, err, sizeof(err)), -1);
	assert_int_equal(conf_urls("a.example:7602", &u, err, sizeof(err)), -1);
	for (int i = 0; i < CONF_URLS_MAX + 1; i++)
		strcat(many, "http://x/RPC2 ");
	assert_int_equal(conf_urls(many, &u, err, sizeof(err)), -1);
	assert_string_equal(err, "at most 8 URLs");
	memset(longurl, 'a', sizeof(longurl) - 1);
	longurl[sizeof(longurl) - 1] = '\0';
	memcpy(longurl, "http://", 7);
	assert_int_equal(conf_urls(longurl, &u, err, sizeof(err)), -1);
	assert_string_equal(err, "URL longer than 255 characters");
}

/* A handler built from the parsers, as daemons write them. */
struct demo {
	uint64_t port, timeout_ms, bufsize;
	bool splice;
};

static int
demo_handler(void *user, const char *section, const char *name,
    const char *value, char *err, size_t errlen)
{
	struct demo *d = user;

	(void)section;
	if (strcmp(name, "port") == 0)
		return conf_uint(value, 1, 65535, &d->port, err, errlen);
	if (strcmp(name, "timeout") == 0)
		return conf_duration_ms(value, &d->timeout_ms, err, errlen);
	if (strcmp(name, "bufsize") == 0)
		return conf_size(value, 4096, 1 << 30, &d->bufsize, err, errlen);
	if (strcmp(name, "splice") == 0)
		return conf_bool(value, &d->splice, err, errlen);
	snprintf(err, errlen, "unknown key \"%s\"", name);
	return -1;
}

static void
test_load_with_parsers(void **state)
{
	struct demo d = { 0 };
	char err[256], want[256];
	const char *path;

	(void)state;
	path = write_file("demo.ini", "[relay]\nport = 7000\ntimeout = 250ms\n"
	    "bufsize = 64k\nsplice = on\n");
	assert_int_equal(conf_load(path, demo_handler, &d, err, sizeof(err)), 0);
	assert_int_equal(d.port, 7000);
	assert_int_equal(d.timeout_ms, 250);
	assert_int_equal(d.bufsize, 65536);
	assert_true(d.splice);

	path = write_file("demo-bad.ini", "[relay]\nport = 7000\n\ntimeout = 5 min\n");
	assert_int_equal(conf_load(path, demo_handler, &d, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:4: invalid duration \"5 min\"", path);
	assert_memory_equal(err, want, strlen(want));

	path = write_file("demo-unknown.ini", "[relay]\nprot = 7000\n");
	assert_int_equal(conf_load(path, demo_handler, &d, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: unknown key \"prot\"", path);
	assert_string_equal(err, want);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_good),
		cmocka_unit_test(test_load_crlf_and_empty),
		cmocka_unit_test(test_load_syntax_error),
		cmocka_unit_test(test_load_handler_error),
		cmocka_unit_test(test_load_first_error_wins),
		cmocka_unit_test(test_load_long_line),
		cmocka_unit_test(test_load_nul_byte),
		cmocka_unit_test(test_load_unreadable),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_uint),
		cmocka_unit_test(test_double),
		cmocka_unit_test(test_bool),
		cmocka_unit_test(test_size),
		cmocka_unit_test(test_string),
		cmocka_unit_test(test_urls),
		cmocka_unit_test(test_load_with_parsers),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
