/* slotd's directory side (src/client/dirsync.c), its pure parts: the merge
 * of static and directory relays, and the cache file (round trip, every
 * kind of damage named by file and line, what else may sit at its path). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "../../src/client/dirsync.h"

static struct cconf_relay
srelay(const char *ep, uint16_t data, uint32_t group)
{
	struct cconf_relay r = { .data_port = data, .group = group };

	assert_int_equal(ep_parse(ep, 0, &r.control), 0);
	return r;
}

static struct dirc_relay
drelay(const char *ep, uint16_t data, uint32_t group)
{
	struct dirc_relay r = { .data_port = data, .group = group };

	assert_int_equal(ep_parse(ep, 0, &r.relay), 0);
	return r;
}

static void
assert_ep(const struct endpoint *e, const char *want)
{
	char b[EP_STRLEN];

	assert_string_equal(ep_fmt(e, b), want);
}

/* ---------------------------------------------------------------- merge */

static void
test_merge_static_first_then_directory(void **state)
{
	struct cconf_relay st[] = { srelay("192.0.2.1:7600", 7601, 0),
	    srelay("192.0.2.2:7600", 9000, 5) };
	struct dirc_relay dr[] = { drelay("198.51.100.1:7600", 7601, 0),
	    drelay("192.0.2.2:7600", 7601, 3),	/* listed statically: static wins */
	    drelay("[2001:db8::1]:7600", 7601, 1),
	    drelay("198.51.100.1:7600", 7700, 9),	/* twice: the first counts */
	    drelay("198.51.100.2:7600", 7601, 0x7fffffff) };
	struct cconf_relay *m;
	size_t n, dropped;
	(void)state;

	assert_int_equal(dirsync_merge(st, 2, dr, 5, CCONF_MAX_RELAYS, &m, &n, &dropped), 0);
	assert_int_equal(n, 5);
	assert_int_equal(dropped, 0);
	assert_ep(&m[0].control, "192.0.2.1:7600");
	assert_int_equal(m[0].group, 0);
	assert_false(cconf_relay_from_dir(&m[0]));
	assert_ep(&m[1].control, "192.0.2.2:7600");
	assert_int_equal(m[1].data_port, 9000);
	assert_int_equal(m[1].group, 5);
	assert_false(cconf_relay_from_dir(&m[1]));
	assert_ep(&m[2].control, "198.51.100.1:7600");
	assert_int_equal(m[2].data_port, 7601);
	assert_int_equal(m[2].group, 0x80000000u);
	assert_true(cconf_relay_from_dir(&m[2]));
	assert_ep(&m[3].control, "[2001:db8::1]:7600");
	assert_int_equal(m[3].group, 0x80000001u);
	assert_ep(&m[4].control, "198.51.100.2:7600");
	assert_int_equal(m[4].group, 0xffffffffu);
	free(m);
}

static void
test_merge_same_address_other_port(void **state)
{
	/* Relays are named by address and port: another port is another relay. */
	struct cconf_relay st[] = { srelay("192.0.2.1:7600", 7601, 0) };
	struct dirc_relay dr[] = { drelay("192.0.2.1:7700", 7701, 0) };
	struct cconf_relay *m;
	size_t n, dropped;
	(void)state;

	assert_int_equal(dirsync_merge(st, 1, dr, 1, 10, &m, &n, &dropped), 0);
	assert_int_equal(n, 2);
	free(m);
}

static void
test_merge_cap(void **state)
{
	struct cconf_relay st[] = { srelay("192.0.2.1:7600", 7601, 0),
	    srelay("192.0.2.2:7600", 7601, 1) };
	struct dirc_relay dr[] = { drelay("198.51.100.1:7600", 7601, 0),
	    drelay("192.0.2.1:7600", 7601, 0),	/* a duplicate is not "dropped" */
	    drelay("198.51.100.2:7600", 7601, 0), drelay("198.51.100.3:7600", 7601, 0) };
	struct cconf_relay *m;
	size_t n, dropped;
	(void)state;

	assert_int_equal(dirsync_merge(st, 2, dr, 4, 3, &m, &n, &dropped), 0);
	assert_int_equal(n, 3);
	assert_int_equal(dropped, 2);
	assert_ep(&m[0].control, "192.0.2.1:7600");
	assert_ep(&m[1].control, "192.0.2.2:7600");
	assert_ep(&m[2].control, "198.51.100.1:7600");
	free(m);

	/* Static relays first, whatever the cap. */
	assert_int_equal(dirsync_merge(st, 2, dr, 4, 2, &m, &n, &dropped), 0);
	assert_int_equal(n, 2);
	assert_int_equal(dropped, 3);
	assert_int_equal(m[1].group, 1);
	free(m);
}

static void
test_merge_empty(void **state)
{
	struct cconf_relay st[] = { srelay("192.0.2.1:7600", 7601, 0) };
	struct dirc_relay dr[] = { drelay("198.51.100.1:7600", 7601, 4) };
	struct cconf_relay *m = (void *)1;
	size_t n = 9, dropped = 9;
	(void)state;

	assert_int_equal(dirsync_merge(NULL, 0, NULL, 0, CCONF_MAX_RELAYS, &m, &n, &dropped), 0);
	assert_null(m);
	assert_int_equal(n, 0);
	assert_int_equal(dropped, 0);

	assert_int_equal(dirsync_merge(st, 1, NULL, 0, CCONF_MAX_RELAYS, &m, &n, &dropped), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(&m[0], &st[0], sizeof(st[0]));
	free(m);

	assert_int_equal(dirsync_merge(NULL, 0, dr, 1, CCONF_MAX_RELAYS, &m, &n, &dropped), 0);
	assert_int_equal(n, 1);
	assert_int_equal(m[0].group, 0x80000004u);
	assert_int_equal(m[0].data_port, 7601);
	free(m);
}

static void
test_merge_many(void **state)
{
	/* A large listing with every relay twice: linear-ish, and capped. */
	size_t nd = 20000;
	struct dirc_relay *dr = calloc(nd, sizeof(*dr));
	struct cconf_relay *m;
	size_t n, dropped;
	char b[EP_STRLEN];
	(void)state;

	assert_non_null(dr);
	for (size_t i = 0; i < nd; i++) {
		snprintf(b, sizeof(b), "10.%zu.%zu.1:7600", (i / 2) / 256, (i / 2) % 256);
		dr[i] = drelay(b, 7601, (uint32_t)i);
	}
	assert_int_equal(dirsync_merge(NULL, 0, dr, nd, CCONF_MAX_RELAYS, &m, &n, &dropped), 0);
	assert_int_equal(n, CCONF_MAX_RELAYS);
	assert_int_equal(dropped, nd / 2 - CCONF_MAX_RELAYS);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(m[i].group, 0x80000000u + 2 * i);
	free(m);
	free(dr);
}

/* ---------------------------------------------------------------- cache file */

static char dir[64];

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/slot-test-dirsync-XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int
teardown(void **state)
{
	char cmd[128];
	(void)state;

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
	return 0;
}

static const char *
file_in(const char *name)
{
	static char p[128];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

static void
write_text(const char *path, const char *text, size_t len)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
}

static char *
read_text(const char *path)
{
	static char buf[4096];
	FILE *f = fopen(path, "r");
	size_t n;

	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void
test_cache_roundtrip(void **state)
{
	struct dirc_relay dr[] = { drelay("192.0.2.1:7600", 7601, 0),
	    drelay("[2001:db8::3]:7600", 9000, 2), drelay("198.51.100.7:65535", 1, 0x7fffffff) };
	struct dirc_relay *out;
	char version[DIRC_VERSION_MAX], err[256], path[128];
	struct stat st;
	size_t n;
	(void)state;

	snprintf(path, sizeof(path), "%s", file_in("sub/dir/slotd.relays"));
	/* The directories are made. */
	assert_int_equal(dirsync_cache_write(path, "9f3c2a1b4d5e6f70-42", dr, 3, err,
	    sizeof(err)), 0);
	assert_string_equal(read_text(path),
	    "slot-relays 1 9f3c2a1b4d5e6f70-42\n"
	    "192.0.2.1:7600 7601 0\n"
	    "[2001:db8::3]:7600 9000 2\n"
	    "198.51.100.7:65535 1 2147483647\n");
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	assert_int_equal(stat(file_in("sub/dir"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(access(file_in("sub/dir/slotd.relays.tmp"), F_OK), -1);

	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), 0);
	assert_string_equal(version, "9f3c2a1b4d5e6f70-42");
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_true(ep_eq(&out[i].relay, &dr[i].relay));
		assert_int_equal(out[i].data_port, dr[i].data_port);
		assert_int_equal(out[i].group, dr[i].group);
	}
	free(out);

	/* Replaced whole; an empty listing is a listing. */
	assert_int_equal(dirsync_cache_write(path, "v2", NULL, 0, err, sizeof(err)), 0);
	assert_string_equal(read_text(path), "slot-relays 1 v2\n");
	out = (void *)1;
	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), 0);
	assert_string_equal(version, "v2");
	assert_int_equal(n, 0);
	assert_null(out);

	/* A version of 63 characters is the longest the protocol allows. */
	char longv[DIRC_VERSION_MAX];
	memset(longv, 'a', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	assert_int_equal(dirsync_cache_write(path, longv, dr, 1, err, sizeof(err)), 0);
	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), 0);
	assert_string_equal(version, longv);
	assert_int_equal(n, 1);
	free(out);
}

static void
test_cache_write_errors(void **state)
{
	struct dirc_relay dr[] = { drelay("192.0.2.1:7600", 7601, 0) };
	char err[256] = "";
	(void)state;

	assert_int_equal(dirsync_cache_write(file_in("a"), "two words", dr, 1, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "not one word"));
	assert_int_equal(dirsync_cache_write(file_in("a"), "", dr, 1, err, sizeof(err)), -1);
	assert_int_equal(access(file_in("a"), F_OK), -1);

	/* A file where a directory should be. */
	write_text(file_in("plain"), "x", 1);
	err[0] = '\0';
	assert_int_equal(dirsync_cache_write(file_in("plain/slotd.relays"), "v", dr, 1, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "plain"));
}

static void
test_cache_missing(void **state)
{
	struct dirc_relay *out;
	char version[DIRC_VERSION_MAX], err[256];
	size_t n;
	(void)state;

	assert_int_equal(dirsync_cache_read(file_in("none"), version, &out, &n, err,
	    sizeof(err)), 1);
	assert_null(out);
	assert_int_equal(n, 0);
}

static void
test_cache_bad_files(void **state)
{
	static const struct {
		const char *text;
		size_t len;		/* 0: strlen */
		const char *want;	/* after "path:" */
	} bads[] = {
		{ "", 0, " empty file" },
		{ "slot-relays 1 v1", 0, "1: truncated" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 0\n192.0.2.2:76", 0, "3: truncated" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601", 0, "2: truncated" },
		{ "slot-relays 2 v1\n192.0.2.1:7600 7601 0\n", 0, "1: unknown format version" },
		{ "slot-relays x v1\n", 0, "1: unknown format version" },
		{ "slot-dird-state 1\n", 0, "1: not a slot-relays file" },
		{ "\n", 0, "1: not a slot-relays file" },
		{ "slot-relays 1\n", 0, "1: expected \"slot-relays 1 <version>\"" },
		{ "slot-relays 1 v1 v2\n", 0, "1: expected" },
		{ "slot-relays  1 v1\n", 0, "1: expected" },
		{ "slot-relays 1 v1\n\n", 0, "2: expected <relay> <data_port> <group>" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601\n", 0, "2: expected <relay>" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 0 1\n", 0, "2: expected <relay>" },
		{ "slot-relays 1 v1\n192.0.2.1:7600  7601 0\n", 0, "2: fields must be separated" },
		{ "slot-relays 1 v1\n 192.0.2.1:7600 7601 0\n", 0, "2: fields must be separated" },
		{ "slot-relays 1 v1\nrelay.example:7600 7601 0\n", 0, "2: bad relay endpoint" },
		{ "slot-relays 1 v1\n192.0.2.1 7601 0\n", 0, "2: bad relay endpoint" },
		{ "slot-relays 1 v1\n192.0.2.1:0 7601 0\n", 0, "2: bad relay endpoint" },
		{ "slot-relays 1 v1\n2001:db8::1:7600 7601 0\n", 0, "2: bad relay endpoint" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 0 0\n", 0, "2: bad data port" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 65536 0\n", 0, "2: bad data port" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 +7601 0\n", 0, "2: bad data port" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 -1\n", 0, "2: bad group" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 2147483648\n", 0, "2: bad group" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 99999999999\n", 0, "2: bad group" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 0x1\n", 0, "2: bad group" },
		{ "slot-relays 1 v1\n192.0.2.1:7600 7601 0\r\n", 0, "2: bad group" },
		{ "slot-relays 1 v1\n192.0.2.1:7600\0 7601 0\n", 40, "2: NUL byte" },
	};
	char path[128];
	struct dirc_relay *out;
	char version[DIRC_VERSION_MAX], err[256], want[300];
	size_t n;
	(void)state;

	snprintf(path, sizeof(path), "%s", file_in("bad.relays"));
	for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
		write_text(path, bads[i].text, bads[i].len ? bads[i].len : strlen(bads[i].text));
		err[0] = '\0';
		out = (void *)1;
		if (dirsync_cache_read(path, version, &out, &n, err, sizeof(err)) != -1)
			fail_msg("case %zu read", i);
		assert_null(out);
		assert_int_equal(n, 0);
		snprintf(want, sizeof(want), "%s:%s", path, bads[i].want);
		if (strncmp(err, want, strlen(want)) != 0)
			fail_msg("case %zu: error \"%s\", want \"%s...\"", i, err, want);
	}

	/* A line far too long. */
	char big[300];
	int k = snprintf(big, sizeof(big), "slot-relays 1 v1\n192.0.2.1:7600 7601 ");
	memset(big + k, '1', sizeof(big) - (size_t)k - 2);
	big[sizeof(big) - 2] = '\n';
	big[sizeof(big) - 1] = '\0';
	write_text(path, big, strlen(big));
	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, ":2: line too long"));

	/* Not readable: a directory. */
	assert_int_equal(dirsync_cache_read(dir, version, &out, &n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, dir));
}

static void
test_cache_too_many(void **state)
{
	char path[128];
	struct dirc_relay *out;
	char version[DIRC_VERSION_MAX], err[256];
	size_t n;
	(void)state;

	snprintf(path, sizeof(path), "%s", file_in("many.relays"));
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "slot-relays 1 v\n");
	for (unsigned i = 0; i < 100000; i++)
		fprintf(f, "10.%u.%u.%u:7600 7601 %u\n", i >> 16, (i >> 8) & 255, i & 255, i);
	fclose(f);
	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), 0);
	assert_int_equal(n, 100000);
	assert_int_equal(out[99999].group, 99999);
	free(out);

	f = fopen(path, "a");
	assert_non_null(f);
	fprintf(f, "10.99.0.1:7600 7601 0\n");
	fclose(f);
	assert_int_equal(dirsync_cache_read(path, version, &out, &n, err, sizeof(err)), -1);
	assert_non_null(strstr(err, ":100002: too many relays"));
}

/* slotd reads the cache as root before it drops privileges, from a
 * directory group slot may write: what a member could plant there is
 * refused at once, with what it is, and with no more memory than a file
 * of the largest size allowed. Without the checks a FIFO blocked the start
 * for good and /dev/zero grew getline's buffer without bound. */
static void
test_cache_hostile_files(void **state)
{
	struct dirc_relay dr[] = { drelay("192.0.2.1:7600", 7601, 0) };
	struct dirc_relay *out;
	struct dirc_listing l;
	struct rusage ru0, ru1;
	uint8_t ca_pk[IDENT_PK_LEN] = { 0 };
	char version[DIRC_VERSION_MAX], err[256], path[128], good[128];
	size_t n;
	(void)state;

	/* A read that blocks kills the test instead of hanging it. */
	alarm(20);
	assert_int_equal(getrusage(RUSAGE_SELF, &ru0), 0);
	snprintf(path, sizeof(path), "%s", file_in("hostile.relays"));
	snprintf(good, sizeof(good), "%s", file_in("good.relays"));
	assert_int_equal(dirsync_cache_write(good, "v1", dr, 1, err, sizeof(err)), 0);

	static const struct {
		const char *what;
		const char *want;
	} cases[] = {
		{ "fifo", ": a FIFO, not read (the cache file must be a regular file)" },
		{ "zero", ": a symbolic link, not followed" },
		{ "link", ": a symbolic link, not followed" },	/* even to a good file */
		{ "dir", ": a directory, not read" },
		{ "huge", ": too large (33558529 bytes, at most 33558528)" },
		{ "line", ":1: line too long" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *w = cases[i].what;
		char want[300];

		(void)unlink(path);
		(void)rmdir(path);
		if (strcmp(w, "fifo") == 0)
			assert_int_equal(mkfifo(path, 0644), 0);
		else if (strcmp(w, "zero") == 0)
			assert_int_equal(symlink("/dev/zero", path), 0);
		else if (strcmp(w, "link") == 0)
			assert_int_equal(symlink(good, path), 0);
		else if (strcmp(w, "dir") == 0)
			assert_int_equal(mkdir(path, 0755), 0);
		else if (strcmp(w, "huge") == 0) {
			/* Sparse: refused by its size, never read. */
			write_text(path, "slot-relays 1 v\n", 16);
			assert_int_equal(truncate(path, (32 << 20) + 4097), 0);
		} else {
			/* One megabyte without a newline. */
			size_t big = 1 << 20;
			char *b = malloc(big);
			assert_non_null(b);
			memset(b, '1', big);
			write_text(path, b, big);
			free(b);
		}
		snprintf(want, sizeof(want), "%s%s", path, cases[i].want);
		err[0] = '\0';
		out = (void *)1;
		if (dirsync_cache_read(path, version, &out, &n, err, sizeof(err)) != -1)
			fail_msg("%s: read", w);
		assert_null(out);
		assert_int_equal(n, 0);
		if (strncmp(err, want, strlen(want)) != 0)
			fail_msg("%s: error \"%s\", want \"%s...\"", w, err, want);
		if (strcmp(w, "line") == 0)
			continue;	/* the signed form has no line limit */
		err[0] = '\0';
		if (dirsync_cache_read_signed(path, ca_pk, 0, &l, err, sizeof(err)) != -1)
			fail_msg("%s: read signed", w);
		if (strncmp(err, want, strlen(want)) != 0)
			fail_msg("%s: signed: error \"%s\", want \"%s...\"", w, err, want);
	}
	alarm(0);
	/* The megabyte line, read whole, is the most any case took. */
	assert_int_equal(getrusage(RUSAGE_SELF, &ru1), 0);
	if (ru1.ru_maxrss - ru0.ru_maxrss > 16 * 1024)
		fail_msg("peak RSS grew by %ld KiB", ru1.ru_maxrss - ru0.ru_maxrss);

	/* The good file is still read. */
	assert_int_equal(dirsync_cache_read(good, version, &out, &n, err, sizeof(err)), 0);
	assert_string_equal(version, "v1");
	assert_int_equal(n, 1);
	free(out);
	(void)unlink(path);
}

/* What was left at cache_file.tmp is replaced, not opened: a FIFO there
 * blocked the worker's open for good, a symlink failed every write. */
static void
test_cache_write_over_planted_tmp(void **state)
{
	struct dirc_relay dr[] = { drelay("192.0.2.1:7600", 7601, 0) };
	char err[256], path[128], tmp[140], target[128];
	struct stat st;
	(void)state;

	alarm(20);
	snprintf(path, sizeof(path), "%s", file_in("planted.relays"));
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	snprintf(target, sizeof(target), "%s", file_in("planted.target"));
	assert_int_equal(mkfifo(tmp, 0644), 0);
	assert_int_equal(dirsync_cache_write(path, "v1", dr, 1, err, sizeof(err)), 0);
	assert_string_equal(read_text(path), "slot-relays 1 v1\n192.0.2.1:7600 7601 0\n");

	write_text(target, "x", 1);
	assert_int_equal(symlink(target, tmp), 0);
	assert_int_equal(dirsync_cache_write(path, "v2", dr, 1, err, sizeof(err)), 0);
	assert_string_equal(read_text(path), "slot-relays 1 v2\n192.0.2.1:7600 7601 0\n");
	assert_string_equal(read_text(target), "x");
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	alarm(0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_static_first_then_directory),
		cmocka_unit_test(test_merge_same_address_other_port),
		cmocka_unit_test(test_merge_cap),
		cmocka_unit_test(test_merge_empty),
		cmocka_unit_test(test_merge_many),
		cmocka_unit_test(test_cache_roundtrip),
		cmocka_unit_test(test_cache_write_errors),
		cmocka_unit_test(test_cache_missing),
		cmocka_unit_test(test_cache_bad_files),
		cmocka_unit_test(test_cache_too_many),
		cmocka_unit_test(test_cache_hostile_files),
		cmocka_unit_test(test_cache_write_over_planted_tmp),
	};
	return cmocka_run_group_tests_name("dirsync", tests, setup, teardown);
}
