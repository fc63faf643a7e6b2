/* The delay and loss matrix of slot-wanem: parser and O(1) lookup. */

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "slot/addr.h"
#include "slot/errbuf.h"
#include "slot/htab.h"

#include "wanem_matrix.h"

#define WM_LINE_MAX 512
#define WM_FILE_MAX (64u << 20)	/* a matrix of a million pairs fits */
#define WM_MAX_FIELDS 4

struct wm_entry {
	struct hnode hn;
	struct wm_entry *next_all;	/* for freeing */
	uint64_t pair;
	struct wm_link link;
	unsigned line;
};

struct wm_matrix {
	struct htab tab;
	struct wm_entry *all;
	struct wm_link def;
	unsigned def_line;	/* 0: no default line */
	uint8_t hkey[16];
};

uint64_t
wm_pair_hash(uint64_t pair, const uint8_t key[16])
{
	/* Family 0 keeps these apart from any real address. */
	struct addr a = { .family = 0 };

	memcpy(a.bytes, &pair, sizeof(pair));
	return addr_hash(&a, key);
}

static struct wm_entry *
wm_matrix_find(const struct wm_matrix *m, uint64_t pair)
{
	uint64_t h = wm_pair_hash(pair, m->hkey);
	struct hnode *n;
	struct wm_entry *e;

	for (n = htab_first(&m->tab, h); n != NULL; n = htab_next(n, h)) {
		e = container_of(n, struct wm_entry, hn);
		if (e->pair == pair)
			return e;
	}
	return NULL;
}

const struct wm_link *
wm_matrix_lookup(const struct wm_matrix *m, uint32_t src, uint32_t dst)
{
	const struct wm_entry *e;

	/* Most matrices list few pairs; skip the hash when there are none. */
	if (m->tab.n == 0)
		return &m->def;
	e = wm_matrix_find(m, wm_pair_key(src, dst));
	return e != NULL ? &e->link : &m->def;
}

size_t
wm_matrix_count(const struct wm_matrix *m)
{
	return m->tab.n;
}

const struct wm_link *
wm_matrix_default(const struct wm_matrix *m)
{
	return &m->def;
}

void
wm_matrix_free(struct wm_matrix *m)
{
	struct wm_entry *e, *next;

	if (m == NULL)
		return;
	for (e = m->all; e != NULL; e = next) {
		next = e->next_all;
		free(e);
	}
	htab_destroy(&m->tab);
	free(m);
}

/* Digits and at most one '.', at least one digit: strtod alone would also
 * take "inf", "0x1p3", "1e3" and leading blanks. */
static int
wm_parse_decimal(const char *s, double *out)
{
	size_t digits = 0, dots = 0;
	const char *p;

	for (p = s; *p != '\0'; p++) {
		if (*p >= '0' && *p <= '9')
			digits++;
		else if (*p == '.')
			dots++;
		else
			return -1;
	}
	if (digits == 0 || dots > 1 || p - s > 32)
		return -1;
	*out = strtod(s, NULL);
	return isfinite(*out) ? 0 : -1;
}

static int
wm_parse_ipv4(const char *s, uint32_t *out)
{
	struct in_addr in;

	if (inet_pton(AF_INET, s, &in) != 1)
		return -1;
	*out = in.s_addr;
	return 0;
}

/* Parses DELAY_MS [LOSS] from f[0], f[1] (NULL if absent). */
static int
wm_parse_link(const char *name, unsigned line, char **f, size_t n,
    struct wm_link *out, char *err, size_t errlen)
{
	double ms, loss = 0;

	if (n == 0) {
		errbuf_set(err, errlen, "%s:%u: missing delay", name, line);
		return -1;
	}
	if (n > 2) {
		errbuf_set(err, errlen, "%s:%u: too many fields", name, line);
		return -1;
	}
	if (wm_parse_decimal(f[0], &ms) == -1 || ms > WM_DELAY_MS_MAX) {
		errbuf_set(err, errlen, "%s:%u: bad delay '%.40s' (milliseconds, 0..%.0f)",
		    name, line, f[0], WM_DELAY_MS_MAX);
		return -1;
	}
	if (n == 2 && (wm_parse_decimal(f[1], &loss) == -1 || loss > 1)) {
		errbuf_set(err, errlen, "%s:%u: bad loss '%.40s' (0..1)", name, line, f[1]);
		return -1;
	}
	out->delay_us = (uint64_t)llround(ms * 1000.0);
	out->loss = loss;
	return 0;
}

static int
wm_parse_line(struct wm_matrix *m, const char *name, unsigned line, char *s,
    char *err, size_t errlen)
{
	char *f[WM_MAX_FIELDS + 1], *save = NULL, *tok, *hash;
	char sbuf[ADDR_STRLEN], dbuf[ADDR_STRLEN];
	struct wm_entry *e, *dup;
	uint32_t src, dst;
	struct wm_link link;
	size_t n = 0;

	if ((hash = strchr(s, '#')) != NULL)
		*hash = '\0';
	for (tok = strtok_r(s, " \t\r\v\f", &save); tok != NULL;
	    tok = strtok_r(NULL, " \t\r\v\f", &save)) {
		if (n == WM_MAX_FIELDS) {
			errbuf_set(err, errlen, "%s:%u: too many fields", name, line);
			return -1;
		}
		f[n++] = tok;
	}
	if (n == 0)
		return 0;

	if (strcmp(f[0], "default") == 0) {
		if (m->def_line != 0) {
			errbuf_set(err, errlen, "%s:%u: duplicate default (first on line %u)",
			    name, line, m->def_line);
			return -1;
		}
		if (wm_parse_link(name, line, f + 1, n - 1, &m->def, err, errlen) == -1)
			return -1;
		m->def_line = line;
		return 0;
	}

	if (wm_parse_ipv4(f[0], &src) == -1) {
		errbuf_set(err, errlen, "%s:%u: bad address '%.40s' (IPv4, or 'default')",
		    name, line, f[0]);
		return -1;
	}
	if (n < 2) {
		errbuf_set(err, errlen, "%s:%u: missing destination", name, line);
		return -1;
	}
	if (wm_parse_ipv4(f[1], &dst) == -1) {
		errbuf_set(err, errlen, "%s:%u: bad address '%.40s' (IPv4)", name, line, f[1]);
		return -1;
	}
	if (wm_parse_link(name, line, f + 2, n - 2, &link, err, errlen) == -1)
		return -1;
	if ((dup = wm_matrix_find(m, wm_pair_key(src, dst))) != NULL) {
		inet_ntop(AF_INET, &src, sbuf, sizeof(sbuf));
		inet_ntop(AF_INET, &dst, dbuf, sizeof(dbuf));
		errbuf_set(err, errlen, "%s:%u: duplicate pair %s %s (first on line %u)",
		    name, line, sbuf, dbuf, dup->line);
		return -1;
	}
	if ((e = calloc(1, sizeof(*e))) == NULL) {
		errbuf_set(err, errlen, "%s:%u: out of memory", name, line);
		return -1;
	}
	e->pair = wm_pair_key(src, dst);
	e->link = link;
	e->line = line;
	e->next_all = m->all;
	m->all = e;
	/* A failed grow leaves the entry in, with longer chains: fine. */
	(void)htab_insert(&m->tab, &e->hn, wm_pair_hash(e->pair, m->hkey));
	return 0;
}

int
wm_matrix_parse(const char *name, const char *text, size_t len,
    struct wm_matrix **out, char *err, size_t errlen)
{
	char buf[WM_LINE_MAX];
	struct wm_matrix *m;
	const char *p = text, *end = text + len, *nl;
	unsigned line = 0;
	size_t ll;

	if ((m = calloc(1, sizeof(*m))) == NULL || htab_init(&m->tab, 16) == -1) {
		free(m);
		errbuf_set(err, errlen, "%s: out of memory", name);
		return -1;
	}
	addr_hash_key(m->hkey);
	while (p < end) {
		line++;
		nl = memchr(p, '\n', (size_t)(end - p));
		ll = (size_t)((nl != NULL ? nl : end) - p);
		if (ll >= sizeof(buf)) {
			errbuf_set(err, errlen, "%s:%u: line too long", name, line);
			goto fail;
		}
		if (memchr(p, '\0', ll) != NULL) {
			errbuf_set(err, errlen, "%s:%u: NUL byte", name, line);
			goto fail;
		}
		memcpy(buf, p, ll);
		buf[ll] = '\0';
		if (wm_parse_line(m, name, line, buf, err, errlen) == -1)
			goto fail;
		p += ll + (nl != NULL);
	}
	*out = m;
	return 0;
fail:
	wm_matrix_free(m);
	return -1;
}

int
wm_matrix_load(const char *path, struct wm_matrix **out, char *err, size_t errlen)
{
	char *text = NULL;
	size_t len = 0, cap = 0;
	ssize_t r;
	int fd, rc, saved;

	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	/* Read to EOF rather than trusting st_size: works for pipes too. */
	for (;;) {
		if (len == cap) {
			char *t;

			if (cap >= WM_FILE_MAX) {
				errbuf_set(err, errlen, "%s: larger than %u bytes", path,
				    WM_FILE_MAX);
				goto fail;
			}
			cap = cap == 0 ? 4096 : cap * 2;
			if ((t = realloc(text, cap)) == NULL) {
				errbuf_set(err, errlen, "%s: out of memory", path);
				goto fail;
			}
			text = t;
		}
		r = read(fd, text + len, cap - len);
		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	rc = wm_matrix_parse(path, text, len, out, err, errlen);
	free(text);
	return rc;
fail:
	saved = errno;
	close(fd);
	free(text);
	errno = saved;
	return -1;
}

int
wm_matrix_reload(struct wm_matrix **cur, const char *path, char *err, size_t errlen)
{
	struct wm_matrix *m;

	if (wm_matrix_load(path, &m, err, errlen) == -1)
		return -1;
	wm_matrix_free(*cur);
	*cur = m;
	return 0;
}
