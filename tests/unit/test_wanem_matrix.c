/* Unit tests for tests/testbed/wanem_matrix.c: the delay and loss matrix of
 * slot-wanem (parser with line numbers, defaults, duplicates, host lines
 * with IPv4 and IPv6 addresses, reload). */

#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/addr.h"

#include "../testbed/wanem_matrix.h"

static char tmpdir[64];

static int
group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_wanem_matrix.XXXXXX");
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

static const char *
write_file(const char *name, const char *text)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
	return path;
}

static uint32_t
ip(const char *s)
{
	struct in_addr a;

	assert_int_equal(inet_pton(AF_INET, s, &a), 1);
	return a.s_addr;
}

static struct wm_matrix *
parse_ok(const char *text)
{
	struct wm_matrix *m = NULL;
	char err[256] = "";

	if (wm_matrix_parse("m.txt", text, strlen(text), &m, err, sizeof(err)) != 0)
		fail_msg("unexpected error: %s", err);
	assert_non_null(m);
	return m;
}

static void
parse_bad(const char *text, const char *want)
{
	struct wm_matrix *m = NULL;
	char err[256] = "";

	assert_int_equal(wm_matrix_parse("m.txt", text, strlen(text), &m, err,
	    sizeof(err)), -1);
	assert_null(m);
	assert_string_equal(err, want);
}

static void
test_good(void **state)
{
	const struct wm_link *l;
	struct wm_matrix *m;

	(void)state;
	m = parse_ok(
	    "# test bed, 80 ms RTT\n"
	    "\n"
	    "10.0.1.2 10.0.2.2 40\n"
	    "10.0.2.2\t10.0.1.2   12.5 0.25   # comment after\n"
	    "   10.0.3.2 10.0.1.2 0 1\r\n"
	    "10.0.3.2 10.0.2.2 0.001 0.0\n"
	    "default 3 0.5");	/* no final newline */
	assert_int_equal(wm_matrix_count(m), 4);

	l = wm_matrix_lookup(m, ip("10.0.1.2"), ip("10.0.2.2"));
	assert_int_equal(l->delay_us, 40000);
	assert_true(l->loss == 0);
	l = wm_matrix_lookup(m, ip("10.0.2.2"), ip("10.0.1.2"));
	assert_int_equal(l->delay_us, 12500);
	assert_true(l->loss == 0.25);
	l = wm_matrix_lookup(m, ip("10.0.3.2"), ip("10.0.1.2"));
	assert_int_equal(l->delay_us, 0);
	assert_true(l->loss == 1);
	l = wm_matrix_lookup(m, ip("10.0.3.2"), ip("10.0.2.2"));
	assert_int_equal(l->delay_us, 1);

	/* Directions are separate: the reverse of a listed pair is not. */
	l = wm_matrix_lookup(m, ip("10.0.1.2"), ip("10.0.3.2"));
	assert_ptr_equal(l, wm_matrix_default(m));
	assert_int_equal(l->delay_us, 3000);
	assert_true(l->loss == 0.5);
	wm_matrix_free(m);
}

static void
test_defaults(void **state)
{
	const struct wm_link *l;
	struct wm_matrix *m;

	(void)state;
	/* Empty, comments only: everything 0 0. */
	m = parse_ok("");
	assert_int_equal(wm_matrix_count(m), 0);
	l = wm_matrix_lookup(m, ip("1.2.3.4"), ip("5.6.7.8"));
	assert_int_equal(l->delay_us, 0);
	assert_true(l->loss == 0);
	wm_matrix_free(m);

	m = parse_ok("# nothing\n\n   \n#\n");
	assert_int_equal(wm_matrix_count(m), 0);
	wm_matrix_free(m);

	/* A default line alone, loss omitted; the default line may come last
	 * or first. */
	m = parse_ok("default 20\n");
	l = wm_matrix_lookup(m, ip("1.2.3.4"), ip("5.6.7.8"));
	assert_int_equal(l->delay_us, 20000);
	assert_true(l->loss == 0);
	wm_matrix_free(m);

	m = parse_ok("1.1.1.1 2.2.2.2 5\ndefault 60000 1\n");
	assert_int_equal(wm_matrix_default(m)->delay_us, 60000000);
	assert_int_equal(wm_matrix_lookup(m, ip("1.1.1.1"), ip("2.2.2.2"))->delay_us, 5000);
	wm_matrix_free(m);
}

static void
test_bad(void **state)
{
	(void)state;
	parse_bad("10.0.0.1 10.0.0.2 40\n\n# x\n10.0.0.2 10.0.0.1 40 1.5\n",
	    "m.txt:4: bad loss '1.5' (0..1)");
	parse_bad("10.0.0.1 10.0.0.2 -1\n", "m.txt:1: bad delay '-1' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 60000.5\n",
	    "m.txt:1: bad delay '60000.5' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 40ms\n",
	    "m.txt:1: bad delay '40ms' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 inf\n", "m.txt:1: bad delay 'inf' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 1e3\n", "m.txt:1: bad delay '1e3' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 1.2.3\n", "m.txt:1: bad delay '1.2.3' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 .\n", "m.txt:1: bad delay '.' (milliseconds, 0..60000)");
	parse_bad("10.0.0.1 10.0.0.2 1 -0.1\n", "m.txt:1: bad loss '-0.1' (0..1)");
	parse_bad("10.0.0.1 10.0.0.2 1 nan\n", "m.txt:1: bad loss 'nan' (0..1)");
	parse_bad("\n10.0.0.1 10.0.0.2\n", "m.txt:2: missing delay");
	parse_bad("10.0.0.1\n", "m.txt:1: missing destination");
	parse_bad("10.0.0.1 10.0.0.2 1 0 5\n", "m.txt:1: too many fields");
	parse_bad("10.0.0.1 10.0.0.2 1 0 5 6 7\n", "m.txt:1: too many fields");
	parse_bad("default\n", "m.txt:1: missing delay");
	parse_bad("default 1 0 2\n", "m.txt:1: too many fields");
	parse_bad("10.0.0.256 10.0.0.2 1\n",
	    "m.txt:1: bad address '10.0.0.256' (IPv4 or IPv6)");
	parse_bad("2001:db8::g 10.0.0.2 1\n",
	    "m.txt:1: bad address '2001:db8::g' (IPv4 or IPv6)");
	parse_bad("Default 1\n", "m.txt:1: unknown host 'Default' (an address, or a name "
	    "from an earlier host line)");
	parse_bad("10.0.0.1 b 1\nhost b 10.0.0.2\n", "m.txt:1: unknown host 'b' (an "
	    "address, or a name from an earlier host line)");
	parse_bad("host a\n", "m.txt:1: host a: no address");
	parse_bad("host\n", "m.txt:1: bad host name '' (letters, digits, _ and -, at most "
	    "32; not host or default)");
	parse_bad("host a.b 10.0.0.1\n", "m.txt:1: bad host name 'a.b' (letters, digits, _ "
	    "and -, at most 32; not host or default)");
	parse_bad("host default 10.0.0.1\n", "m.txt:1: bad host name 'default' (letters, "
	    "digits, _ and -, at most 32; not host or default)");
	parse_bad("host a 10.0.0.1 fd00::1 fd00::x\n",
	    "m.txt:1: bad address 'fd00::x' (IPv4 or IPv6)");
	parse_bad("host a 10.0.0.1\nhost b 10.0.0.2 10.0.0.1\n", "m.txt:2: address "
	    "10.0.0.1 given before, on line 1 (an address belongs to one host)");
	parse_bad("10.0.0.1 10.0.0.2 1\nhost b 10.0.0.2\n", "m.txt:2: address "
	    "10.0.0.2 given before, on line 1 (an address belongs to one host)");
}

static struct addr
ad(const char *s)
{
	struct addr a;

	assert_int_equal(addr_parse(s, &a), 0);
	return a;
}

static const struct wm_link *
look(const struct wm_matrix *m, const char *s, const char *d, uint64_t *pair)
{
	struct addr sa = ad(s), da = ad(d);

	return wm_matrix_lookup_addr(m, &sa, &da, pair);
}

/* Host lines: both addresses of a dual-stack host, and a LAN routed behind
 * it, share the host's pairs; IPv6 addresses alone work as hosts too. */
static void
test_hosts(void **state)
{
	struct wm_matrix *m;
	uint64_t p1, p2, p3;

	(void)state;
	m = parse_ok(
	    "default 1\n"
	    "host a 10.0.1.2 fd00:0:1::2\n"
	    "host b 10.0.2.2 fd00:0:2::2\n"
	    "host a 192.168.1.2 fd01:0:1::2   # a LAN host routed behind a\n"
	    "host v6only fd00:0:3::2\n"
	    "a b 40 0.25\n"
	    "b a 30\n"
	    "v6only a 5\n"
	    "fd00:9::1 2001:db8::2 7\n"
	    "10.0.2.2 fd00:0:3::2 9\n");
	assert_int_equal(wm_matrix_count(m), 5);
	assert_int_equal(wm_matrix_addrs(m), 9);
	assert_int_equal(look(m, "10.0.1.2", "10.0.2.2", &p1)->delay_us, 40000);
	assert_int_equal(look(m, "fd00:0:1::2", "fd00:0:2::2", &p2)->delay_us, 40000);
	assert_true(look(m, "fd00:0:1::2", "fd00:0:2::2", NULL)->loss == 0.25);
	assert_int_equal(look(m, "fd01:0:1::2", "fd00:0:2::2", &p3)->delay_us, 40000);
	/* One key per pair of hosts, whatever the address: one FIFO. */
	assert_true(p1 == p2 && p2 == p3);
	assert_int_equal(look(m, "192.168.1.2", "10.0.2.2", NULL)->delay_us, 40000);
	assert_int_equal(look(m, "fd00:0:2::2", "fd01:0:1::2", &p2)->delay_us, 30000);
	assert_true(p1 != p2);
	assert_int_equal(look(m, "fd00:0:3::2", "fd00:0:1::2", NULL)->delay_us, 5000);
	assert_int_equal(look(m, "fd00:9::1", "2001:db8::2", NULL)->delay_us, 7000);
	/* A pair line by address reaches the host that address belongs to. */
	assert_int_equal(look(m, "fd00:0:2::2", "fd00:0:3::2", NULL)->delay_us, 9000);
	assert_int_equal(look(m, "10.0.2.2", "fd00:0:3::2", NULL)->delay_us, 9000);
	/* Unlisted pairs and unknown addresses: the default. */
	assert_ptr_equal(look(m, "fd00:0:1::2", "fd00:0:3::2", NULL), wm_matrix_default(m));
	assert_ptr_equal(look(m, "fd00:0:1::99", "fd00:0:2::2", NULL), wm_matrix_default(m));
	assert_ptr_equal(look(m, "10.0.1.2", "10.0.2.3", NULL), wm_matrix_default(m));
	/* The IPv4 form finds the same lines. */
	assert_int_equal(wm_matrix_lookup(m, ip("192.168.1.2"), ip("10.0.2.2"))->delay_us,
	    40000);
	wm_matrix_free(m);

	/* The same pair by name and by address is a duplicate. */
	parse_bad("host a 10.0.0.1\nhost b fd00::2\na b 1\n10.0.0.1 fd00::2 2\n",
	    "m.txt:4: duplicate pair 10.0.0.1 fd00::2 (first on line 3)");
}

static void
test_nul_and_long(void **state)
{
	struct wm_matrix *m = NULL;
	char err[256] = "", text[1024];
	static const char nul[] = "default 1\n10.0.0.1 10.0.0.2 1\0\n";

	(void)state;
	assert_int_equal(wm_matrix_parse("m.txt", nul, sizeof(nul) - 1, &m, err,
	    sizeof(err)), -1);
	assert_string_equal(err, "m.txt:2: NUL byte");

	memset(text, ' ', sizeof(text));
	memcpy(text, "default 1\n# ", 12);
	text[sizeof(text) - 1] = '\n';
	assert_int_equal(wm_matrix_parse("m.txt", text, sizeof(text), &m, err,
	    sizeof(err)), -1);
	assert_string_equal(err, "m.txt:2: line too long");
	assert_null(m);
}

static void
test_duplicates(void **state)
{
	(void)state;
	parse_bad("10.0.0.1 10.0.0.2 40\n10.0.0.2 10.0.0.1 40\n# again\n10.0.0.1 10.0.0.2 41\n",
	    "m.txt:4: duplicate pair 10.0.0.1 10.0.0.2 (first on line 1)");
	parse_bad("default 1\n\ndefault 1\n", "m.txt:3: duplicate default (first on line 1)");
}

/* Enough pairs for the table to grow several times; every one found. */
static void
test_many(void **state)
{
	struct wm_matrix *m;
	char *text, *p;
	size_t i, n = 3000, cap = n * 48;
	uint32_t s, d;

	(void)state;
	text = p = malloc(cap);
	assert_non_null(text);
	for (i = 0; i < n; i++)
		p += sprintf(p, "10.1.%zu.%zu 10.2.%zu.%zu %zu\n", i / 256, i % 256,
		    i % 256, i / 256, i);
	m = parse_ok(text);
	assert_int_equal(wm_matrix_count(m), n);
	for (i = 0; i < n; i++) {
		s = htonl(0x0a010000u | (uint32_t)i);
		d = htonl(0x0a020000u | (uint32_t)((i % 256) << 8 | i / 256));
		assert_int_equal(wm_matrix_lookup(m, s, d)->delay_us, i * 1000);
		assert_ptr_equal(wm_matrix_lookup(m, d, s), wm_matrix_default(m));
	}
	free(text);
	wm_matrix_free(m);
}

static void
test_load_and_reload(void **state)
{
	struct wm_matrix *m = NULL, *before;
	char err[256] = "", want[300], missing[128];
	const char *path;

	(void)state;
	path = write_file("matrix.txt", "10.0.0.1 10.0.0.2 40\ndefault 5\n");
	assert_int_equal(wm_matrix_load(path, &m, err, sizeof(err)), 0);
	assert_int_equal(wm_matrix_lookup(m, ip("10.0.0.1"), ip("10.0.0.2"))->delay_us, 40000);

	/* A bad file leaves the current matrix in place. */
	write_file("matrix.txt", "10.0.0.1 10.0.0.2 20\n10.0.0.2 10.0.0.1 20 2\n");
	before = m;
	assert_int_equal(wm_matrix_reload(&m, path, err, sizeof(err)), -1);
	snprintf(want, sizeof(want), "%s:2: bad loss '2' (0..1)", path);
	assert_string_equal(err, want);
	assert_ptr_equal(m, before);
	assert_int_equal(wm_matrix_lookup(m, ip("10.0.0.1"), ip("10.0.0.2"))->delay_us, 40000);
	assert_int_equal(wm_matrix_default(m)->delay_us, 5000);

	/* A good one replaces it whole: the default is back to 0. */
	write_file("matrix.txt", "10.0.0.1 10.0.0.2 20\n10.0.0.2 10.0.0.1 20 0.5\n");
	assert_int_equal(wm_matrix_reload(&m, path, err, sizeof(err)), 0);
	assert_int_equal(wm_matrix_count(m), 2);
	assert_int_equal(wm_matrix_lookup(m, ip("10.0.0.1"), ip("10.0.0.2"))->delay_us, 20000);
	assert_true(wm_matrix_lookup(m, ip("10.0.0.2"), ip("10.0.0.1"))->loss == 0.5);
	assert_int_equal(wm_matrix_default(m)->delay_us, 0);

	/* A missing file: the reason names it. */
	snprintf(missing, sizeof(missing), "%s/nope", tmpdir);
	snprintf(want, sizeof(want), "%s: No such file or directory", missing);
	before = m;
	assert_int_equal(wm_matrix_reload(&m, missing, err, sizeof(err)), -1);
	assert_string_equal(err, want);
	assert_ptr_equal(m, before);
	wm_matrix_free(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_bad),
		cmocka_unit_test(test_hosts),
		cmocka_unit_test(test_nul_and_long),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_many),
		cmocka_unit_test(test_load_and_reload),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
