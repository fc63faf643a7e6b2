/* Unit tests for src/core/rttmat.c: both file formats, symmetrisation,
 * missing pairs, the id numbering, every refusal with its line number,
 * what the loaders take rather than refuse (zeros, values above a bound,
 * asymmetric pairs) and how they count it, and the real WonderNetwork data
 * set against the facts in its README. */

#include <math.h>
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

#include "slot/rttmat.h"

static char tmpdir[64];

static int
group_setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_rttmat.XXXXXX");
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

/* Writes text into a file of the temporary directory; returns its path
 * (a static buffer per name slot, so two paths can be alive at once). */
static const char *
write_file(const char *name, const char *text)
{
	static char paths[4][128];
	static unsigned next;
	char *path = paths[next++ % 4];
	FILE *f;

	snprintf(path, 128, "%s/%s", tmpdir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	return path;
}

static void
assert_near(double got, double want, double tol)
{
	if (!(fabs(got - want) <= tol))
		fail_msg("got %.9g, want %.9g (+-%g)", got, want, tol);
}

static void
assert_symmetric(const struct rttmat *m)
{
	for (size_t i = 0; i < m->n; i++) {
		assert_true(m->d[i * m->n + i] == 0.0);
		for (size_t j = 0; j < m->n; j++) {
			double a = m->d[i * m->n + j], b = m->d[j * m->n + i];

			assert_true((isnan(a) && isnan(b)) || a == b);
		}
	}
}

/* Checks that loading failed with "path:line: ...reason..." and left the
 * matrix empty. */
static void
assert_fails_at(int rc, const struct rttmat *m, const char *err,
    const char *path, int line, const char *reason)
{
	char prefix[256];

	assert_int_equal(rc, -1);
	assert_int_equal(m->n, 0);
	assert_null(m->d);
	assert_null(m->names);
	if (line > 0)
		snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
	else
		snprintf(prefix, sizeof(prefix), "%s: ", path);
	if (strncmp(err, prefix, strlen(prefix)) != 0 ||
	    strstr(err, reason) == NULL)
		fail_msg("error '%s', want '%s...%s'", err, prefix, reason);
}

/* --- pairs CSV --- */

static const char *const small_csv =
    "source,destination,min,avg,max,mdev\n"
    "1,2,9,10,11,0.5\n"
    "2,1,11,12,13,0.5\n"
    "1,3,20,30,40,1\n"
    "3,3,0,0.1,0.2,0\n"
    "\n";

static void
test_pairs_symmetrise(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("small.csv", small_csv);
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.names[0], "1");
	assert_string_equal(m.names[1], "2");
	assert_string_equal(m.names[2], "3");
	assert_near(rttmat_get(&m, 0, 1), 11.0, 1e-12);	/* mean of 10, 12 */
	assert_near(rttmat_get(&m, 0, 2), 30.0, 1e-12);	/* one direction */
	assert_true(isnan(rttmat_get(&m, 1, 2)));	/* neither */
	assert_true(rttmat_get(&m, 2, 2) == 0.0);	/* self row ignored */
	assert_true(isnan(rttmat_get(&m, 3, 0)));	/* out of range */
	assert_symmetric(&m);
	assert_int_equal(rttmat_find(&m, "3"), 2);
	assert_int_equal(rttmat_find(&m, "4"), -1);
	rttmat_free(&m);
	assert_int_equal(m.n, 0);
	rttmat_free(&m);	/* twice is harmless */
}

static void
test_pairs_column_choice(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("small.csv", small_csv);
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "min", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_near(rttmat_get(&m, 1, 0), 10.0, 1e-12);
	assert_near(rttmat_get(&m, 2, 0), 20.0, 1e-12);
	rttmat_free(&m);
	assert_int_equal(rttmat_load_pairs(path, "max", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_near(rttmat_get(&m, 0, 1), 12.0, 1e-12);
	assert_near(rttmat_get(&m, 0, 2), 40.0, 1e-12);
	rttmat_free(&m);
}

static void
test_pairs_missing_values(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("missing.csv",
	    "source,destination,avg\n"
	    "a,b,nan\n"
	    "b,a,7\n"
	    "a,c,\n"
	    "c,a,-\n"
	    "b,c,X\n"
	    "c,b,Inf\n"
	    "z,z,1\n");	/* z only pings itself: not a node */
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(m.n, 3);
	assert_near(rttmat_get(&m, 0, 1), 7.0, 0);	/* only b->a measured */
	assert_true(isnan(rttmat_get(&m, 0, 2)));
	assert_true(isnan(rttmat_get(&m, 1, 2)));
	assert_symmetric(&m);
	rttmat_free(&m);
}

/* Loads a CSV and returns its names joined by spaces, and its matrix. */
static void
load_names(const char *name, const char *text, char *names, size_t len,
    struct rttmat *m)
{
	char err[256] = "";
	const char *path = write_file(name, text);

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, m,
	    NULL, err, sizeof(err)), 0);
	names[0] = '\0';
	for (size_t i = 0; i < m->n; i++) {
		strncat(names, m->names[i], len - strlen(names) - 1);
		strncat(names, " ", len - strlen(names) - 1);
	}
}

static void
test_pairs_id_order(void **state)
{
	struct rttmat a, b;
	char na[128], nb[128];
	(void)state;

	/* Integers sort by value (strcmp would put 100 before 9), whatever
	 * the row order. */
	load_names("ord1.csv", "source,destination,avg\n"
	    "100,9,1\n10,100,2\n9,10,3\n", na, sizeof(na), &a);
	load_names("ord2.csv", "source,destination,avg\n"
	    "10,9,3\n9,100,1\n100,10,2\n", nb, sizeof(nb), &b);
	assert_string_equal(na, "9 10 100 ");
	assert_string_equal(nb, na);
	assert_int_equal(a.n, b.n);
	assert_memory_equal(a.d, b.d, a.n * a.n * sizeof(double));
	assert_near(rttmat_get(&a, 0, 2), 1.0, 0);
	assert_near(rttmat_get(&a, 1, 2), 2.0, 0);
	assert_near(rttmat_get(&a, 0, 1), 3.0, 0);
	rttmat_free(&a);
	rttmat_free(&b);

	/* One non-integer id: all sort as strings. */
	load_names("ord3.csv", "source,destination,avg\n"
	    "100,9,1\nx,10,2\n-3,9,1\n", na, sizeof(na), &a);
	assert_string_equal(na, "-3 10 100 9 x ");
	rttmat_free(&a);

	/* Negative integers and different spellings of one value. */
	load_names("ord4.csv", "source,destination,avg\n"
	    "7,-2,1\n07,7,2\n", na, sizeof(na), &a);
	assert_string_equal(na, "-2 07 7 ");
	rttmat_free(&a);
}

static void
test_pairs_quotes_crlf_bom(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("quoted.csv",
	    "\xef\xbb\xbf" "source, \"destination\" ,\"avg\"\r\n"
	    "\"New York\",\"Paris, FR\",80\r\n"
	    " \"Paris, FR\" , \"New York\" , 82 \r\n"
	    "\"say \"\"hi\"\"\",\"New York\",5\r\n");
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.names[0], "New York");
	assert_string_equal(m.names[1], "Paris, FR");
	assert_string_equal(m.names[2], "say \"hi\"");
	assert_near(rttmat_get(&m, 0, 1), 81.0, 1e-12);
	assert_near(rttmat_get(&m, 2, 0), 5.0, 1e-12);
	rttmat_free(&m);
}

struct bad_case {
	const char *text;
	const char *column;
	int line;		/* 0: "path: reason" */
	const char *reason;
};

static void
test_pairs_bad_input(void **state)
{
	static const struct bad_case cases[] = {
		{ "", "avg", 0, "empty file" },
		{ "\n\n", "avg", 0, "empty file" },
		{ "source,destination,avg\n\n", "avg", 2, "no pairs after the header" },
		{ "source,destination,min\n1,2,3\n", "avg", 1,
		  "no column 'avg' in the header" },
		{ "src,destination,avg\n1,2,3\n", "avg", 1, "no column 'source'" },
		{ "source,dst,avg\n1,2,3\n", "avg", 1, "no column 'destination'" },
		{ "source,destination,avg,max\n1,2,3,4\n2,1,3\n", "avg", 3,
		  "3 fields, the header has 4" },
		{ "source,destination,avg\n1,2,3\n1,2,3,4\n", "avg", 3,
		  "4 fields, the header has 3" },
		{ "source,destination,avg\n1,2,abc\n", "avg", 2,
		  "avg 'abc': not a number" },
		{ "source,destination,avg\n1,2,3ms\n", "avg", 2, "not a number" },
		{ "source,destination,avg\n1,2,1e999\n", "avg", 2,
		  "not a finite number" },
		{ "source,destination,avg\n\n1,2,3\n2,1,-4\n", "avg", 4,
		  "avg '-4': negative" },
		{ "source,destination,avg\n1,2,3\n2,1,3\n1,3,1\n1,2,3\n", "avg", 5,
		  "duplicate pair 1 -> 2 (first at line 2)" },
		{ "source,destination,avg\n1,2,nan\n1,2,5\n", "avg", 3,
		  "duplicate pair 1 -> 2 (first at line 2)" },
		{ "source,destination,avg\n1,2,3\n,2,3\n", "avg", 3,
		  "empty source id" },
		{ "source,destination,avg\n1,\"\",3\n", "avg", 2,
		  "empty destination id" },
		{ "source,destination,avg\n1,\"2,3\n", "avg", 2,
		  "unterminated quote" },
		{ "source,destination,avg\n1,\"2\"x,3\n", "avg", 2,
		  "text after a closing quote" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rttmat m = { 0 };
		char err[256] = "";
		const char *path;
		int rc;

		path = write_file("bad.csv", cases[i].text);
		rc = rttmat_load_pairs(path, cases[i].column, 0, &m,
		    NULL, err, sizeof(err));
		assert_fails_at(rc, &m, err, path, cases[i].line, cases[i].reason);
	}
}

static void
test_nul_byte(void **state)
{
	static const char text[] = "source,destination,avg\n1,2,3\n2,1,4\0\n";
	struct rttmat m;
	char err[256] = "", path[128];
	FILE *f;
	(void)state;

	/* fputs would stop at the NUL: write the bytes. */
	snprintf(path, sizeof(path), "%s/nul.csv", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, sizeof(text) - 1, f), sizeof(text) - 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), -1);
	assert_fails_at(-1, &m, err, path, 3, "NUL byte");

	snprintf(path, sizeof(path), "%s/nul.txt", tmpdir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite("0 1\n1 0\0\n", 1, 9, f), 9);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), -1);
	assert_fails_at(-1, &m, err, path, 2, "NUL byte");
}

static void
test_pairs_no_file(void **state)
{
	struct rttmat m;
	char err[256] = "", path[128];
	(void)state;

	snprintf(path, sizeof(path), "%s/does-not-exist.csv", tmpdir);
	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), -1);
	assert_fails_at(-1, &m, err, path, 0, "No such file");
	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), -1);
	assert_fails_at(-1, &m, err, path, 0, "No such file");
}

/* --- square matrix --- */

static void
test_square_basic(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("sq.txt",
	    "# three nodes\n"
	    "\n"
	    "0\t10   NaN\n"
	    "  12 0.5 30\n"
	    "   # a comment line in between\n"
	    "-  x  0\r\n"
	    "\n");
	(void)state;

	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(m.n, 3);
	assert_near(rttmat_get(&m, 0, 1), 11.0, 1e-12);	/* mean of 10, 12 */
	assert_true(isnan(rttmat_get(&m, 0, 2)));	/* NaN and - */
	assert_near(rttmat_get(&m, 1, 2), 30.0, 1e-12);	/* 30 and x */
	assert_true(rttmat_get(&m, 1, 1) == 0.0);	/* 0.5 on the diagonal */
	assert_symmetric(&m);
	for (size_t i = 0; i < m.n; i++)
		assert_null(m.names[i]);
	rttmat_free(&m);

	path = write_file("one.txt", "7\n");
	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(m.n, 1);
	assert_true(rttmat_get(&m, 0, 0) == 0.0);
	rttmat_free(&m);

	/* 0 (or -0) between two nodes: not measured. */
	path = write_file("zero.txt", "0 -0\n-0 0\n");
	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_true(isnan(rttmat_get(&m, 0, 1)));
	rttmat_free(&m);

	path = write_file("inf.txt", "0 inf\nINFINITY 0\n");
	assert_int_equal(rttmat_load_square(path, 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_true(isnan(rttmat_get(&m, 0, 1)));
	rttmat_free(&m);
}

static void
test_square_bad_input(void **state)
{
	static const struct bad_case cases[] = {
		{ "", NULL, 0, "empty file" },
		{ "# only\n\n  \n", NULL, 3, "no matrix rows" },
		{ "0 1 2\n1 0\n2 1 0\n", NULL, 2, "2 values, expected 3 as on line 1" },
		{ "# x\n0 1\n\n1 0 5\n", NULL, 4, "3 values, expected 2 as on line 2" },
		{ "0 1\n1 zero\n", NULL, 2, "value 2 'zero': not a number" },
		{ "0 1\n1 1,5\n", NULL, 2, "not a number (the square format "
		  "separates values with blanks or tabs; a comma is neither a "
		  "separator nor a decimal point)" },
		{ "0,10,20\n10,0,30\n20,30,0\n", NULL, 1,
		  "value 1 '0,10,20': not a number (the square format" },
		{ "0, 10\n10, 0\n", NULL, 1, "value 1 '0,': not a number (the" },
		{ "0 -1\n1 0\n", NULL, 1, "value 2 '-1': negative" },
		{ "0 -inf\n1 0\n", NULL, 1, "not a finite number" },
		{ "0 1\n1 0\n1 1\n", NULL, 3, "more than 2 rows" },
		{ "0 1 2\n1 0 2\n\n", NULL, 3, "end of file after 2 rows of 3" },
		{ "0 1 2 3\n", NULL, 1, "end of file after 1 rows of 4" },
	};
	(void)state;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct rttmat m = { 0 };
		char err[256] = "";
		const char *path = write_file("bad.txt", cases[i].text);
		int rc = rttmat_load_square(path, 0, &m,
		    NULL, err, sizeof(err));

		assert_fails_at(rc, &m, err, path, cases[i].line, cases[i].reason);
	}
}

/* --- what the loaders take rather than refuse --- */

/* Nodes a b c d; the same directed values in both formats, with max_ms
 * 100: a->c and d->a are 0, b->c 150 and c->d 200 above the bound, a-b
 * (10, 12) asymmetric, b-d (30, 30) not. */
static const char *const report_csv =
    "source,destination,avg\n"
    "a,b,10\n"
    "b,a,12\n"
    "a,c,0\n"		/* line 4: the first zero */
    "c,a,5\n"
    "b,c,150\n"		/* line 6: the first above the bound */
    "c,b,20\n"
    "d,a,0\n"
    "c,d,200\n"
    "d,c,7\n"
    "b,d,30\n"
    "d,b,30\n"
    "d,d,0\n"		/* self rows: never counted */
    "c,c,999\n";

static const char *const report_txt =
    "# a b c d\n"
    "0 10 0 x\n"		/* line 2: the first zero */
    "12 0 150 30\n"		/* line 3: the first above the bound */
    "5 20 0 200\n"
    "0 30 7 999\n";		/* the diagonal: never counted */

static void
check_report_matrix(const struct rttmat *m)
{
	assert_int_equal(m->n, 4);
	assert_near(rttmat_get(m, 0, 1), 11.0, 0);	/* averaged */
	assert_near(rttmat_get(m, 0, 2), 5.0, 0);	/* a->c 0: c->a alone */
	assert_true(isnan(rttmat_get(m, 0, 3)));	/* d->a 0, a->d none */
	assert_near(rttmat_get(m, 1, 2), 20.0, 0);	/* b->c above: c->b */
	assert_near(rttmat_get(m, 1, 3), 30.0, 0);
	assert_near(rttmat_get(m, 2, 3), 7.0, 0);	/* c->d above: d->c */
	assert_symmetric(m);
}

static void
check_report(const struct rttmat_report *r, unsigned long zero_line,
    unsigned long above_line)
{
	assert_int_equal(r->zero, 2);
	assert_int_equal(r->zero_line, zero_line);
	assert_int_equal(r->above, 2);
	assert_int_equal(r->above_line, above_line);
	assert_near(r->above_max, 200.0, 0);
	assert_int_equal(r->both, 2);	/* a-b and b-d */
	assert_int_equal(r->asym, 1);	/* a-b */
	assert_near(r->asym_max, 2.0, 0);
}

static void
test_report_pairs(void **state)
{
	struct rttmat m;
	struct rttmat_report r;
	char err[256] = "";
	const char *path = write_file("report.csv", report_csv);
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 100, &m, &r, err,
	    sizeof(err)), 0);
	check_report_matrix(&m);
	check_report(&r, 4, 6);
	rttmat_free(&m);

	/* No bound: the large values count, and make two more pairs
	 * asymmetric (b-c 150/20, c-d 200/7). */
	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m, &r, err,
	    sizeof(err)), 0);
	assert_near(rttmat_get(&m, 1, 2), 85.0, 0);
	assert_near(rttmat_get(&m, 2, 3), 103.5, 0);
	assert_int_equal(r.zero, 2);
	assert_int_equal(r.above, 0);
	assert_int_equal(r.above_line, 0);
	assert_int_equal(r.both, 4);
	assert_int_equal(r.asym, 3);
	assert_near(r.asym_max, 193.0, 0);
	rttmat_free(&m);

	/* A value at the bound is kept. */
	path = write_file("bound.csv", "source,destination,avg\n1,2,100\n");
	assert_int_equal(rttmat_load_pairs(path, "avg", 100, &m, &r, err,
	    sizeof(err)), 0);
	assert_near(rttmat_get(&m, 0, 1), 100.0, 0);
	assert_int_equal(r.above + r.zero + r.both + r.asym, 0);
	rttmat_free(&m);

	/* On failure the report is zeroed. */
	memset(&r, 0xff, sizeof(r));
	path = write_file("bad.csv", "source,destination,avg\n1,2,0\n1,2,x\n");
	assert_int_equal(rttmat_load_pairs(path, "avg", 100, &m, &r, err,
	    sizeof(err)), -1);
	assert_int_equal(r.zero, 0);
	assert_int_equal(r.both, 0);
}

static void
test_report_square(void **state)
{
	struct rttmat m;
	struct rttmat_report r;
	char err[256] = "";
	const char *path = write_file("report.txt", report_txt);
	(void)state;

	assert_int_equal(rttmat_load_square(path, 100, &m, &r, err,
	    sizeof(err)), 0);
	check_report_matrix(&m);
	check_report(&r, 2, 3);
	rttmat_free(&m);

	memset(&r, 0xff, sizeof(r));
	path = write_file("bad.txt", "0 0\n1\n");
	assert_int_equal(rttmat_load_square(path, 100, &m, &r, err,
	    sizeof(err)), -1);
	assert_int_equal(r.zero, 0);
	assert_int_equal(r.above, 0);
}

/* A square matrix given to the pairs loader (a *.csv to slot-sim): the
 * error says what the first line looks like. */
static void
test_square_as_pairs(void **state)
{
	static const char *const squares[] = {
		"0,10,20\n10,0,30\n20,30,0\n",
		"0 10\n10 0\n",
		"0\tnan\nnan\t0\n",
	};
	struct rttmat m;
	char err[256] = "";
	const char *path;
	(void)state;

	for (size_t i = 0; i < sizeof(squares) / sizeof(squares[0]); i++) {
		path = write_file("sq.csv", squares[i]);
		assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m, NULL, err,
		    sizeof(err)), -1);
		assert_fails_at(-1, &m, err, path, 1, "no column 'source' in the "
		    "header (it holds only numbers: a square matrix? That format "
		    "has no header and separates values with blanks or tabs, not "
		    "commas)");
	}
	/* A header that is not numbers gets no such hint. */
	path = write_file("hdr.csv", "src,dst,avg\n1,2,3\n");
	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m, NULL, err,
	    sizeof(err)), -1);
	assert_null(strstr(err, "square"));
	path = write_file("hdr.csv", "x,-,nan\n1,2,3\n");
	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m, NULL, err,
	    sizeof(err)), -1);
	assert_null(strstr(err, "square"));
}

/* --- select, names --- */

static void
test_select(void **state)
{
	struct rttmat m, s;
	char err[256] = "";
	const char *path = write_file("small.csv", small_csv);
	size_t idx[] = { 2, 0 }, dup[] = { 1, 1 }, far[] = { 0, 3 };
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(rttmat_select(&m, idx, 2, &s, err, sizeof(err)), 0);
	assert_int_equal(s.n, 2);
	assert_string_equal(s.names[0], "3");
	assert_string_equal(s.names[1], "1");
	assert_near(rttmat_get(&s, 0, 1), 30.0, 0);
	assert_true(rttmat_get(&s, 1, 1) == 0.0);
	assert_true(s.names[0] != m.names[2]);	/* copies */
	rttmat_free(&s);

	assert_int_equal(rttmat_select(&m, dup, 2, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "node 1 selected twice"));
	assert_int_equal(s.n, 0);
	assert_int_equal(rttmat_select(&m, far, 2, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "node 3 out of range"));
	assert_int_equal(rttmat_select(&m, idx, 0, &s, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no nodes"));
	rttmat_free(&m);
}

static void
test_names_from_servers(void **state)
{
	struct rttmat m;
	char err[256] = "";
	const char *path = write_file("small.csv", small_csv);
	const char *srv;
	(void)state;

	assert_int_equal(rttmat_load_pairs(path, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	srv = write_file("servers.csv",
	    "id,name,title,,extra\n"
	    "3,Paris,Paris FR,,\n"
	    "1,Melbourne,Melbourne AU,,\n"
	    "9,Nowhere,,,\n"
	    "2,,no name,,\n");
	assert_int_equal(rttmat_names_from_servers(&m, srv, err, sizeof(err)), 2);
	assert_string_equal(m.names[0], "Melbourne");
	assert_string_equal(m.names[1], "2");	/* empty name: kept */
	assert_string_equal(m.names[2], "Paris");

	/* Errors leave the names as they were. */
	srv = write_file("servers-bad.csv", "id,title\n1,x\n");
	assert_int_equal(rttmat_names_from_servers(&m, srv, err, sizeof(err)), -1);
	assert_non_null(strstr(err, ":1: no column 'name'"));
	srv = write_file("servers-dup.csv", "id,name\n2,A\n\n2,B\n");
	assert_int_equal(rttmat_names_from_servers(&m, srv, err, sizeof(err)), -1);
	assert_non_null(strstr(err, ":4: id 2 given twice (first at line 2)"));
	srv = write_file("servers-short.csv", "id,x,name\n2,A\n");
	assert_int_equal(rttmat_names_from_servers(&m, srv, err, sizeof(err)), -1);
	assert_non_null(strstr(err, ":2: 2 fields, the id and name need 3"));
	assert_string_equal(m.names[1], "2");
	assert_string_equal(m.names[2], "Paris");
	/* A header and no usable row renames nothing (qsort and bsearch were
	 * handed NULL: UBSan in make asan-unit; found by fuzz_rttmat). */
	srv = write_file("servers-none.csv", "id,name\n\n,NoId\n");
	assert_int_equal(rttmat_names_from_servers(&m, srv, err, sizeof(err)), 0);
	assert_string_equal(m.names[0], "Melbourne");
	rttmat_free(&m);
}

/* --- the WonderNetwork data set --- */

/* The shared data directory: $SLOT_DATA, ../shared/data (tests run from
 * the repository root), or /work/shared/data; NULL if none has the file. */
static const char *
data_file(const char *rel, char *buf, size_t len)
{
	const char *dirs[] = { getenv("SLOT_DATA"), "../shared/data",
	    "/work/shared/data" };

	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (dirs[i] == NULL)
			continue;
		snprintf(buf, len, "%s/%s", dirs[i], rel);
		if (access(buf, R_OK) == 0)
			return buf;
	}
	return NULL;
}

#define WN_PINGS "wondernetwork/pings-2020-07-19-2020-07-20-grouped.csv"
#define WN_SERVERS "wondernetwork/servers-2020-07-19.csv"

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double
at(const struct rttmat *m, const char *a, const char *b)
{
	long i = rttmat_find(m, a), j = rttmat_find(m, b);

	assert_true(i >= 0 && j >= 0);
	return rttmat_get(m, (size_t)i, (size_t)j);
}

static void
test_wondernetwork(void **state)
{
	struct rttmat m, sq;
	char err[256] = "", buf[512], sbuf[512], sqpath[160];
	const char *pings = data_file(WN_PINGS, buf, sizeof(buf));
	const char *servers;
	double *v, sum_red = 0;
	size_t nv = 0, better = 0, n;
	FILE *f;
	(void)state;

	if (pings == NULL) {
		print_message("no " WN_PINGS " under $SLOT_DATA, ../shared/data "
		    "or /work/shared/data: skipped\n");
		skip();
	}
	assert_int_equal(rttmat_load_pairs(pings, "avg", 0, &m,
	    NULL, err, sizeof(err)), 0);
	n = m.n;
	assert_int_equal(n, 250);
	assert_symmetric(&m);
	assert_string_equal(m.names[0], "0");
	assert_string_equal(m.names[n - 1], "295");
	/* Rows "0,1,...,288.722,..." and "1,0,...,288.74699999999996,...". */
	assert_near(at(&m, "0", "1"), (288.722 + 288.74699999999996) / 2, 1e-9);
	/* "2,49,...,99.64,..." and "49,2,...,99.629,...". */
	assert_near(at(&m, "49", "2"), (99.64 + 99.629) / 2, 1e-9);
	/* Only "0,221,...,299.8195,..." exists; 31 and 75 have no row. */
	assert_near(at(&m, "221", "0"), 299.8195, 1e-9);
	assert_true(isnan(at(&m, "31", "75")));

	/* The README's facts: 31,097 measured unordered pairs, median 139.8
	 * ms; a relay beats the direct path for 98.9% of them, and the best
	 * of relay and direct shortens the path by 39.4% on average. */
	v = malloc(n * n * sizeof(*v));
	assert_non_null(v);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			double d = m.d[i * n + j], best = d;

			if (isnan(d))
				continue;
			v[nv++] = d;
			for (size_t k = 0; k < n; k++) {
				double a = m.d[i * n + k], b = m.d[k * n + j];

				if (k == i || k == j || isnan(a) || isnan(b))
					continue;
				if ((a > b ? a : b) < best)
					best = a > b ? a : b;
			}
			better += best < d;
			sum_red += 1 - best / d;
		}
	assert_int_equal(nv, 31097);
	qsort(v, nv, sizeof(*v), cmp_double);
	assert_near(v[nv / 2], 139.8, 1.0);
	assert_near(100.0 * (double)better / (double)nv, 98.9, 0.05);
	assert_near(100.0 * sum_red / (double)nv, 39.4, 0.05);
	free(v);

	/* The same matrix through the square format, NaN written as "nan". */
	snprintf(sqpath, sizeof(sqpath), "%s/wn.txt", tmpdir);
	f = fopen(sqpath, "w");
	assert_non_null(f);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++)
			fprintf(f, "%.17g%c", m.d[i * n + j], j + 1 < n ? ' ' : '\n');
	assert_int_equal(fclose(f), 0);
	assert_int_equal(rttmat_load_square(sqpath, 0, &sq,
	    NULL, err, sizeof(err)), 0);
	assert_int_equal(sq.n, n);
	for (size_t i = 0; i < n * n; i++)
		assert_true((isnan(sq.d[i]) && isnan(m.d[i])) || sq.d[i] == m.d[i]);
	rttmat_free(&sq);

	/* City names: 246 of the 250 ids have a row in the servers file. */
	servers = data_file(WN_SERVERS, sbuf, sizeof(sbuf));
	if (servers != NULL) {
		assert_int_equal(rttmat_names_from_servers(&m, servers, err,
		    sizeof(err)), 246);
		assert_string_equal(m.names[1], "Melbourne");	/* id 1 */
		assert_near(at(&m, "Melbourne", "SaoPaulo"),
		    (323.9895 + 323.91949999999997) / 2, 1e-9);
		assert_int_equal(rttmat_find(&m, "295"), (long)n - 1);
	}
	rttmat_free(&m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pairs_symmetrise),
		cmocka_unit_test(test_pairs_column_choice),
		cmocka_unit_test(test_pairs_missing_values),
		cmocka_unit_test(test_pairs_id_order),
		cmocka_unit_test(test_pairs_quotes_crlf_bom),
		cmocka_unit_test(test_pairs_bad_input),
		cmocka_unit_test(test_nul_byte),
		cmocka_unit_test(test_pairs_no_file),
		cmocka_unit_test(test_square_basic),
		cmocka_unit_test(test_square_bad_input),
		cmocka_unit_test(test_report_pairs),
		cmocka_unit_test(test_report_square),
		cmocka_unit_test(test_square_as_pairs),
		cmocka_unit_test(test_select),
		cmocka_unit_test(test_names_from_servers),
		cmocka_unit_test(test_wondernetwork),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
