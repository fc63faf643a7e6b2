/*
 * RTT matrices from files: a CSV of directed pairs (WonderNetwork's pings)
 * and the plain N x N format. See include/slot/rttmat.h for the formats.
 *
 * Both loaders first fill a directed n x n matrix (NaN = not measured), then
 * symmetrise it into the result, so asymmetric input is treated alike. What
 * they take rather than refuse (zeros, values above the caller's bound,
 * asymmetric pairs) is counted in a struct rttmat_report, never printed.
 */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "slot/errbuf.h"
#include "slot/rttmat.h"

/* Above this a matrix of doubles no longer fits comfortably; it also keeps
 * n*n far from overflowing size_t and line numbers in uint32_t. */
#define RTTMAT_MAX_N 65536u

int
rttmat_init(struct rttmat *m, size_t n, char *err, size_t errlen)
{
	m->n = 0;
	m->d = NULL;
	m->names = NULL;
	if (n == 0 || n > RTTMAT_MAX_N) {
		errbuf_set(err, errlen, "bad matrix size %zu (1..%u)", n,
		    RTTMAT_MAX_N);
		return -1;
	}
	m->d = malloc(n * n * sizeof(*m->d));
	m->names = calloc(n, sizeof(*m->names));
	if (m->d == NULL || m->names == NULL) {
		free(m->d);
		free(m->names);
		m->d = NULL;
		m->names = NULL;
		errbuf_set(err, errlen, "out of memory for a %zu x %zu matrix", n, n);
		return -1;
	}
	for (size_t i = 0; i < n * n; i++)
		m->d[i] = NAN;
	for (size_t i = 0; i < n; i++)
		m->d[i * n + i] = 0.0;
	m->n = n;
	return 0;
}

void
rttmat_free(struct rttmat *m)
{
	if (m == NULL)
		return;
	if (m->names != NULL)
		for (size_t i = 0; i < m->n; i++)
			free(m->names[i]);
	free(m->names);
	free(m->d);
	m->n = 0;
	m->d = NULL;
	m->names = NULL;
}

double
rttmat_get(const struct rttmat *m, size_t i, size_t j)
{
	if (i >= m->n || j >= m->n)
		return NAN;
	return m->d[i * m->n + j];
}

long
rttmat_find(const struct rttmat *m, const char *name)
{
	for (size_t i = 0; i < m->n; i++)
		if (m->names != NULL && m->names[i] != NULL &&
		    strcmp(m->names[i], name) == 0)
			return (long)i;
	return -1;
}

/* A directed value v read at line, as the loaders keep it: a 0, or one
 * above max_ms (when > 0), becomes missing, counted in rep. */
static double
take_value(double v, double max_ms, unsigned long line,
    struct rttmat_report *rep)
{
	if (v == 0.0) {
		if (rep->zero++ == 0)
			rep->zero_line = line;
		return NAN;
	}
	if (max_ms > 0 && v > max_ms) {
		if (rep->above++ == 0)
			rep->above_line = line;
		if (v > rep->above_max)
			rep->above_max = v;
		return NAN;
	}
	return v;
}

/* Fills out (already initialised, n x n) from the directed matrix dir,
 * counting the pairs measured both ways, and the asymmetric ones, in rep. */
static void
symmetrise(const double *dir, struct rttmat *out, struct rttmat_report *rep)
{
	size_t n = out->n;

	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			double a = dir[i * n + j], b = dir[j * n + i], v;

			if (!isnan(a) && !isnan(b)) {
				rep->both++;
				if (a != b) {
					rep->asym++;
					if (fabs(a - b) > rep->asym_max)
						rep->asym_max = fabs(a - b);
				}
				v = (a + b) / 2.0;
			} else {
				v = isnan(a) ? b : a;
			}
			out->d[i * n + j] = v;
			out->d[j * n + i] = v;
		}
}

/* --- reading lines --- */

struct lines {
	const char *path;
	FILE *fp;
	char *buf;
	size_t bufsz;
	unsigned long line;
};

/* Next line without its line end (LF or CRLF) in *out. Returns 1, 0 at end
 * of file, -1 on a read error or a NUL byte (message in err). */
static int
lines_next(struct lines *l, char **out, char *err, size_t errlen)
{
	ssize_t len;

	errno = 0;
	len = getline(&l->buf, &l->bufsz, l->fp);
	if (len < 0) {
		if (ferror(l->fp)) {
			errbuf_set(err, errlen, "%s: %s", l->path,
			    strerror(errno != 0 ? errno : EIO));
			return -1;
		}
		return 0;
	}
	l->line++;
	if (memchr(l->buf, '\0', (size_t)len) != NULL) {
		errbuf_set(err, errlen, "%s:%lu: NUL byte in line", l->path,
		    l->line);
		return -1;
	}
	if (len > 0 && l->buf[len - 1] == '\n')
		l->buf[--len] = '\0';
	if (len > 0 && l->buf[len - 1] == '\r')
		l->buf[--len] = '\0';
	*out = l->buf;
	/* A UTF-8 BOM is what some spreadsheet exports start with. */
	if (l->line == 1 && strncmp(*out, "\xef\xbb\xbf", 3) == 0)
		*out += 3;
	return 1;
}

static int
lines_open(struct lines *l, const char *path, char *err, size_t errlen)
{
	memset(l, 0, sizeof(*l));
	l->path = path;
	l->fp = fopen(path, "r");
	if (l->fp == NULL) {
		errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

static void
lines_close(struct lines *l)
{
	if (l->fp != NULL)
		fclose(l->fp);
	free(l->buf);
	l->fp = NULL;
	l->buf = NULL;
}

static int
is_blank(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return *s == '\0';
}

/* --- CSV fields --- */

struct fields {
	char **v;
	size_t n, cap;
};

static int
fields_push(struct fields *f, char *s)
{
	if (f->n == f->cap) {
		size_t cap = f->cap == 0 ? 16 : f->cap * 2;
		char **v = realloc(f->v, cap * sizeof(*v));

		if (v == NULL)
			return -1;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = s;
	return 0;
}

/*
 * Splits s in place at commas into f. A field may be double-quoted, with ""
 * standing for a quote inside; blanks around fields are dropped. Returns 0,
 * or -1 with the reason in *why.
 */
static int
csv_split(char *s, struct fields *f, const char **why)
{
	char *r = s;

	f->n = 0;
	for (;;) {
		char *start, c;

		while (*r == ' ' || *r == '\t')
			r++;
		if (*r == '"') {
			char *w;

			start = w = ++r;
			for (;;) {
				if (*r == '\0') {
					*why = "unterminated quote";
					return -1;
				}
				if (*r == '"') {
					if (r[1] != '"')
						break;
					r++;
				}
				*w++ = *r++;
			}
			r++;
			while (*r == ' ' || *r == '\t')
				r++;
			if (*r != ',' && *r != '\0') {
				*why = "text after a closing quote";
				return -1;
			}
			c = *r;
			*w = '\0';	/* w < r: the quotes were dropped */
		} else {
			char *e;

			start = r;
			while (*r != ',' && *r != '\0')
				r++;
			c = *r;
			for (e = r; e > start && (e[-1] == ' ' || e[-1] == '\t'); e--)
				;
			*e = '\0';
		}
		if (fields_push(f, start) < 0) {
			*why = "out of memory";
			return -1;
		}
		if (c == '\0')
			return 0;
		r++;
	}
}

static long
fields_find(const struct fields *f, const char *name)
{
	for (size_t i = 0; i < f->n; i++)
		if (strcmp(f->v[i], name) == 0)
			return (long)i;
	return -1;
}

/* --- values --- */

enum { VAL_BAD = -1, VAL_MISSING = 0, VAL_OK = 1 };

/* Parses one RTT. Missing markers and, if empty_missing, the empty string
 * give VAL_MISSING; a bad value gives VAL_BAD with the reason in *why. */
static int
parse_ms(const char *s, int empty_missing, double *v, const char **why)
{
	static const char *const missing[] = { "nan", "inf", "infinity", "-", "x" };
	char *end;

	if (*s == '\0') {
		if (empty_missing)
			return VAL_MISSING;
		*why = "empty value";
		return VAL_BAD;
	}
	for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++)
		if (strcasecmp(s, missing[i]) == 0)
			return VAL_MISSING;
	errno = 0;
	*v = strtod(s, &end);
	if (end == s || *end != '\0') {
		*why = "not a number";
		return VAL_BAD;
	}
	if (!isfinite(*v)) {
		*why = "not a finite number";
		return VAL_BAD;
	}
	if (*v < 0) {
		*why = "negative";
		return VAL_BAD;
	}
	*v += 0.0;	/* -0 becomes 0 */
	return VAL_OK;
}

/* 1 when s is values separated by blanks, tabs or commas (at least one a
 * number), as the first line of a square matrix would be. */
static int
looks_square(const char *s)
{
	char *buf = strdup(s), *save, *tok;
	int numbers = 0, bad = buf == NULL;
	double v;
	const char *why;

	for (tok = bad ? NULL : strtok_r(buf, " \t,", &save);
	    tok != NULL && !bad; tok = strtok_r(NULL, " \t,", &save)) {
		int pv = parse_ms(tok, 0, &v, &why);

		bad = pv == VAL_BAD;
		numbers += pv == VAL_OK;
	}
	free(buf);
	return !bad && numbers > 0;
}

/* --- pairs CSV --- */

struct pair_row {
	char *src, *dst;	/* owned */
	uint32_t si, di;	/* node numbers, once known */
	double v;
	int has;		/* v was measured */
	unsigned long line;
};

struct id_ref {
	const char *s;
	long long num;
	uint32_t *slot;		/* where the node number goes */
};

static int
is_integer(const char *s, long long *out)
{
	const char *p = s;
	char *end;

	if (*p == '+' || *p == '-')
		p++;
	if (!isdigit((unsigned char)*p))
		return 0;
	for (; *p != '\0'; p++)
		if (!isdigit((unsigned char)*p))
			return 0;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return errno == 0 && *end == '\0';
}

static int
cmp_id(const void *a, const void *b, void *arg)
{
	const struct id_ref *x = a, *y = b;
	const int *numeric = arg;

	/* Equal numbers with different spellings ("7", "07") stay distinct
	 * ids, ordered by strcmp, so the order is total. */
	if (*numeric && x->num != y->num)
		return x->num < y->num ? -1 : 1;
	return strcmp(x->s, y->s);
}

static void
rows_free(struct pair_row *rows, size_t nrows)
{
	for (size_t i = 0; i < nrows; i++) {
		free(rows[i].src);
		free(rows[i].dst);
	}
	free(rows);
}

/* Reads header and rows. Returns 0 or -1. */
static int
pairs_read(struct lines *l, const char *column, struct pair_row **rowsp,
    size_t *nrowsp, char *err, size_t errlen)
{
	struct fields f = { 0 };
	struct pair_row *rows = NULL;
	size_t nrows = 0, cap = 0, nhdr;
	long csrc, cdst, cval;
	const char *why;
	char *s;
	int r, square;

	do {
		r = lines_next(l, &s, err, errlen);
		if (r <= 0) {
			if (r == 0)
				errbuf_set(err, errlen, "%s: empty file", l->path);
			goto fail;
		}
	} while (is_blank(s));
	square = looks_square(s);
	if (csv_split(s, &f, &why) < 0) {
		errbuf_set(err, errlen, "%s:%lu: header: %s", l->path, l->line, why);
		goto fail;
	}
	nhdr = f.n;
	csrc = fields_find(&f, "source");
	cdst = fields_find(&f, "destination");
	cval = fields_find(&f, column);
	if (csrc < 0 || cdst < 0 || cval < 0) {
		errbuf_set(err, errlen, "%s:%lu: no column '%s' in the header%s",
		    l->path, l->line,
		    csrc < 0 ? "source" : cdst < 0 ? "destination" : column,
		    square ? " (it holds only numbers: a square matrix? That "
		    "format has no header and separates values with blanks or "
		    "tabs, not commas)" : "");
		goto fail;
	}
	while ((r = lines_next(l, &s, err, errlen)) > 0) {
		struct pair_row *row;
		double v = 0;
		int has;

		if (is_blank(s))
			continue;
		if (csv_split(s, &f, &why) < 0) {
			errbuf_set(err, errlen, "%s:%lu: %s", l->path, l->line, why);
			goto fail;
		}
		if (f.n != nhdr) {
			errbuf_set(err, errlen, "%s:%lu: %zu fields, the header has %zu",
			    l->path, l->line, f.n, nhdr);
			goto fail;
		}
		if (f.v[csrc][0] == '\0' || f.v[cdst][0] == '\0') {
			errbuf_set(err, errlen, "%s:%lu: empty %s id", l->path,
			    l->line, f.v[csrc][0] == '\0' ? "source" : "destination");
			goto fail;
		}
		has = parse_ms(f.v[cval], 1, &v, &why);
		if (has == VAL_BAD) {
			errbuf_set(err, errlen, "%s:%lu: %s '%.32s': %s", l->path,
			    l->line, column, f.v[cval], why);
			goto fail;
		}
		if (strcmp(f.v[csrc], f.v[cdst]) == 0)
			continue;	/* self pings say nothing about a pair */
		if (nrows == cap) {
			size_t ncap = cap == 0 ? 1024 : cap * 2;
			struct pair_row *nr = realloc(rows, ncap * sizeof(*nr));

			if (nr == NULL)
				goto nomem;
			rows = nr;
			cap = ncap;
		}
		row = &rows[nrows];
		memset(row, 0, sizeof(*row));
		nrows++;
		row->src = strdup(f.v[csrc]);
		row->dst = strdup(f.v[cdst]);
		if (row->src == NULL || row->dst == NULL)
			goto nomem;
		row->v = v;
		row->has = has == VAL_OK;
		row->line = l->line;
	}
	if (r < 0)
		goto fail;
	if (nrows == 0) {
		errbuf_set(err, errlen, "%s:%lu: no pairs after the header",
		    l->path, l->line);
		goto fail;
	}
	free(f.v);
	*rowsp = rows;
	*nrowsp = nrows;
	return 0;
nomem:
	errbuf_set(err, errlen, "%s:%lu: out of memory", l->path, l->line);
fail:
	free(f.v);
	rows_free(rows, nrows);
	return -1;
}

/* Numbers the ids of rows in sorted order. Returns the number of nodes, or
 * 0 when out of memory or too many. */
static size_t
pairs_number(struct pair_row *rows, size_t nrows)
{
	struct id_ref *refs;
	size_t nref = 2 * nrows, n = 0;
	int numeric = 1;

	refs = malloc(nref * sizeof(*refs));
	if (refs == NULL)
		return 0;
	for (size_t i = 0; i < nrows; i++) {
		refs[2 * i] = (struct id_ref){ rows[i].src, 0, &rows[i].si };
		refs[2 * i + 1] = (struct id_ref){ rows[i].dst, 0, &rows[i].di };
	}
	for (size_t i = 0; i < nref && numeric; i++)
		numeric = is_integer(refs[i].s, &refs[i].num);
	qsort_r(refs, nref, sizeof(*refs), cmp_id, &numeric);
	for (size_t i = 0; i < nref; i++) {
		if (i > 0 && strcmp(refs[i].s, refs[i - 1].s) != 0)
			n++;
		*refs[i].slot = (uint32_t)n;
	}
	free(refs);
	n++;
	return n <= RTTMAT_MAX_N ? n : 0;
}

int
rttmat_load_pairs(const char *path, const char *column, double max_ms,
    struct rttmat *out, struct rttmat_report *rep, char *err, size_t errlen)
{
	struct lines l;
	struct pair_row *rows = NULL;
	size_t nrows = 0, n;
	double *dir = NULL;
	uint32_t *seen = NULL;	/* line of the row that gave each pair, 0: none */
	struct rttmat_report got = { 0 };

	memset(out, 0, sizeof(*out));
	if (rep != NULL)
		memset(rep, 0, sizeof(*rep));
	if (lines_open(&l, path, err, errlen) < 0)
		return -1;
	if (pairs_read(&l, column, &rows, &nrows, err, errlen) < 0) {
		lines_close(&l);
		return -1;
	}
	lines_close(&l);
	n = pairs_number(rows, nrows);
	if (n == 0) {
		errbuf_set(err, errlen, "%s: out of memory, or more than %u nodes",
		    path, RTTMAT_MAX_N);
		goto fail;
	}
	dir = malloc(n * n * sizeof(*dir));
	seen = calloc(n * n, sizeof(*seen));
	if (dir == NULL || seen == NULL ||
	    rttmat_init(out, n, err, errlen) < 0) {
		errbuf_set(err, errlen, "%s: out of memory for %zu nodes", path, n);
		goto fail;
	}
	for (size_t i = 0; i < n * n; i++)
		dir[i] = NAN;
	for (size_t i = 0; i < nrows; i++) {
		size_t k = (size_t)rows[i].si * n + rows[i].di;

		if (seen[k] != 0) {
			errbuf_set(err, errlen,
			    "%s:%lu: duplicate pair %s -> %s (first at line %lu)",
			    path, rows[i].line, rows[i].src, rows[i].dst,
			    (unsigned long)seen[k]);
			goto fail;
		}
		seen[k] = rows[i].line <= UINT32_MAX ? (uint32_t)rows[i].line :
		    UINT32_MAX;
		if (rows[i].has)
			dir[k] = take_value(rows[i].v, max_ms, rows[i].line, &got);
	}
	symmetrise(dir, out, &got);
	/* Names: each row's strings are moved into the matrix once. */
	for (size_t i = 0; i < nrows; i++) {
		if (out->names[rows[i].si] == NULL) {
			out->names[rows[i].si] = rows[i].src;
			rows[i].src = NULL;
		}
		if (out->names[rows[i].di] == NULL) {
			out->names[rows[i].di] = rows[i].dst;
			rows[i].dst = NULL;
		}
	}
	free(dir);
	free(seen);
	rows_free(rows, nrows);
	if (rep != NULL)
		*rep = got;
	return 0;
fail:
	free(dir);
	free(seen);
	rows_free(rows, nrows);
	rttmat_free(out);
	return -1;
}

/* --- square matrix --- */

#define SEPS " \t\v\f"

static size_t
count_tokens(const char *s)
{
	size_t n = 0;

	for (;;) {
		s += strspn(s, SEPS);
		if (*s == '\0')
			return n;
		n++;
		s += strcspn(s, SEPS);
	}
}

int
rttmat_load_square(const char *path, double max_ms, struct rttmat *out,
    struct rttmat_report *rep, char *err, size_t errlen)
{
	struct lines l;
	double *dir = NULL;
	size_t n = 0, row = 0;
	unsigned long first_line = 0;
	struct rttmat_report got = { 0 };
	char *s;
	int r;

	memset(out, 0, sizeof(*out));
	if (rep != NULL)
		memset(rep, 0, sizeof(*rep));
	if (lines_open(&l, path, err, errlen) < 0)
		return -1;
	while ((r = lines_next(&l, &s, err, errlen)) > 0) {
		size_t cnt;
		char *save, *tok;

		s += strspn(s, SEPS);
		if (*s == '\0' || *s == '#')
			continue;
		cnt = count_tokens(s);
		if (dir == NULL) {
			if (cnt > RTTMAT_MAX_N) {
				errbuf_set(err, errlen, "%s:%lu: %zu columns, at most %u",
				    path, l.line, cnt, RTTMAT_MAX_N);
				goto fail;
			}
			n = cnt;
			first_line = l.line;
			dir = malloc(n * n * sizeof(*dir));
			if (dir == NULL) {
				errbuf_set(err, errlen, "%s:%lu: out of memory for %zu "
				    "columns", path, l.line, n);
				goto fail;
			}
		} else if (row == n) {
			errbuf_set(err, errlen, "%s:%lu: more than %zu rows: the matrix "
			    "must be square", path, l.line, n);
			goto fail;
		} else if (cnt != n) {
			errbuf_set(err, errlen, "%s:%lu: %zu values, expected %zu as on "
			    "line %lu", path, l.line, cnt, n, first_line);
			goto fail;
		}
		tok = strtok_r(s, SEPS, &save);
		for (size_t j = 0; j < n; j++, tok = strtok_r(NULL, SEPS, &save)) {
			const char *why;
			double v;
			int pv = parse_ms(tok, 0, &v, &why);

			if (pv == VAL_BAD) {
				errbuf_set(err, errlen, "%s:%lu: value %zu '%.32s': %s%s",
				    path, l.line, j + 1, tok, why,
				    strchr(tok, ',') == NULL ? "" : " (the square format "
				    "separates values with blanks or tabs; a comma is "
				    "neither a separator nor a decimal point)");
				goto fail;
			}
			if (pv != VAL_OK)
				v = NAN;
			else if (j != row)	/* the diagonal is not a pair */
				v = take_value(v, max_ms, l.line, &got);
			dir[row * n + j] = v;
		}
		row++;
	}
	if (r < 0)
		goto fail;
	if (dir == NULL) {
		if (l.line == 0)
			errbuf_set(err, errlen, "%s: empty file", path);
		else
			errbuf_set(err, errlen, "%s:%lu: no matrix rows", path,
			    l.line);
		goto fail;
	}
	if (row < n) {
		errbuf_set(err, errlen, "%s:%lu: end of file after %zu rows of %zu "
		    "values: the matrix must be square", path, l.line, row, n);
		goto fail;
	}
	if (rttmat_init(out, n, err, errlen) < 0) {
		errbuf_set(err, errlen, "%s: out of memory for %zu nodes", path, n);
		goto fail;
	}
	symmetrise(dir, out, &got);
	free(dir);
	lines_close(&l);
	if (rep != NULL)
		*rep = got;
	return 0;
fail:
	free(dir);
	lines_close(&l);
	return -1;
}

/* --- names --- */

struct server {
	char *id, *name;	/* owned */
	unsigned long line;
};

static int
cmp_server(const void *a, const void *b)
{
	const struct server *x = a, *y = b;
	int c = strcmp(x->id, y->id);

	if (c != 0)
		return c;
	return x->line < y->line ? -1 : x->line > y->line;
}

static int
cmp_server_id(const void *a, const void *b)
{
	return strcmp(((const struct server *)a)->id,
	    ((const struct server *)b)->id);
}

static void
servers_free(struct server *sv, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(sv[i].id);
		free(sv[i].name);
	}
	free(sv);
}

int
rttmat_names_from_servers(struct rttmat *m, const char *servers_csv,
    char *err, size_t errlen)
{
	struct lines l;
	struct fields f = { 0 };
	struct server *sv = NULL;
	char **newname = NULL;
	size_t nsv = 0, cap = 0, renamed = 0;
	long cid, cname;
	const char *why;
	char *s;
	int r;

	if (lines_open(&l, servers_csv, err, errlen) < 0)
		return -1;
	do {
		r = lines_next(&l, &s, err, errlen);
		if (r <= 0) {
			if (r == 0)
				errbuf_set(err, errlen, "%s: empty file", servers_csv);
			goto fail;
		}
	} while (is_blank(s));
	if (csv_split(s, &f, &why) < 0) {
		errbuf_set(err, errlen, "%s:%lu: header: %s", servers_csv, l.line, why);
		goto fail;
	}
	cid = fields_find(&f, "id");
	cname = fields_find(&f, "name");
	if (cid < 0 || cname < 0) {
		errbuf_set(err, errlen, "%s:%lu: no column '%s' in the header",
		    servers_csv, l.line, cid < 0 ? "id" : "name");
		goto fail;
	}
	while ((r = lines_next(&l, &s, err, errlen)) > 0) {
		size_t need = (size_t)(cid > cname ? cid : cname) + 1;

		if (is_blank(s))
			continue;
		if (csv_split(s, &f, &why) < 0) {
			errbuf_set(err, errlen, "%s:%lu: %s", servers_csv, l.line, why);
			goto fail;
		}
		if (f.n < need) {
			errbuf_set(err, errlen, "%s:%lu: %zu fields, the id and name "
			    "need %zu", servers_csv, l.line, f.n, need);
			goto fail;
		}
		if (f.v[cid][0] == '\0' || f.v[cname][0] == '\0')
			continue;
		if (nsv == cap) {
			size_t ncap = cap == 0 ? 256 : cap * 2;
			struct server *ns = realloc(sv, ncap * sizeof(*ns));

			if (ns == NULL)
				goto nomem;
			sv = ns;
			cap = ncap;
		}
		sv[nsv].id = strdup(f.v[cid]);
		sv[nsv].name = strdup(f.v[cname]);
		sv[nsv].line = l.line;
		nsv++;
		if (sv[nsv - 1].id == NULL || sv[nsv - 1].name == NULL)
			goto nomem;
	}
	if (r < 0)
		goto fail;
	/* No rows (a header alone): sv is NULL, which qsort and bsearch
	 * must not be given even with a count of 0. */
	if (nsv > 0)
		qsort(sv, nsv, sizeof(*sv), cmp_server);
	for (size_t i = 1; i < nsv; i++)
		if (strcmp(sv[i].id, sv[i - 1].id) == 0) {
			errbuf_set(err, errlen, "%s:%lu: id %s given twice (first at "
			    "line %lu)", servers_csv, sv[i].line, sv[i].id,
			    sv[i - 1].line);
			goto fail;
		}
	/* New names are made first, so that the matrix is unchanged on
	 * failure. */
	newname = calloc(m->n, sizeof(*newname));
	if (newname == NULL && m->n > 0)
		goto nomem;
	for (size_t i = 0; i < m->n; i++) {
		struct server key = { 0 }, *hit;

		if (nsv == 0 || m->names == NULL || m->names[i] == NULL)
			continue;
		key.id = m->names[i];
		/* Ids are unique, so comparing by id alone finds the one. */
		hit = bsearch(&key, sv, nsv, sizeof(*sv), cmp_server_id);
		if (hit == NULL)
			continue;
		newname[i] = strdup(hit->name);
		if (newname[i] == NULL)
			goto nomem;
	}
	for (size_t i = 0; i < m->n; i++)
		if (newname[i] != NULL) {
			free(m->names[i]);
			m->names[i] = newname[i];
			renamed++;
		}
	free(newname);
	free(f.v);
	servers_free(sv, nsv);
	lines_close(&l);
	return (int)(renamed < INT_MAX ? renamed : INT_MAX);
nomem:
	errbuf_set(err, errlen, "%s: out of memory", servers_csv);
fail:
	if (newname != NULL)
		for (size_t i = 0; i < m->n; i++)
			free(newname[i]);
	free(newname);
	free(f.v);
	servers_free(sv, nsv);
	lines_close(&l);
	return -1;
}

/* --- sub-matrix --- */

int
rttmat_select(const struct rttmat *m, const size_t *idx, size_t k,
    struct rttmat *out, char *err, size_t errlen)
{
	unsigned char *used;

	memset(out, 0, sizeof(*out));
	if (k == 0) {
		errbuf_set(err, errlen, "no nodes selected");
		return -1;
	}
	used = calloc(m->n > 0 ? m->n : 1, 1);
	if (used == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	for (size_t a = 0; a < k; a++) {
		if (idx[a] >= m->n || used[idx[a]]) {
			errbuf_set(err, errlen, idx[a] >= m->n ?
			    "node %zu out of range" : "node %zu selected twice", idx[a]);
			free(used);
			return -1;
		}
		used[idx[a]] = 1;
	}
	free(used);
	if (rttmat_init(out, k, err, errlen) < 0)
		return -1;
	for (size_t a = 0; a < k; a++) {
		for (size_t b = 0; b < k; b++)
			out->d[a * k + b] = m->d[idx[a] * m->n + idx[b]];
		if (m->names != NULL && m->names[idx[a]] != NULL) {
			out->names[a] = strdup(m->names[idx[a]]);
			if (out->names[a] == NULL) {
				rttmat_free(out);
				errbuf_set(err, errlen, "out of memory");
				return -1;
			}
		}
	}
	return 0;
}
