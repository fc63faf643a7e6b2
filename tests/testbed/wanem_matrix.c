/* The delay and loss matrix of slot-wanem: parser and O(1) lookup. */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
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
#define WM_MAX_FIELDS 16	/* "host NAME" and 14 addresses */
#define WM_PAIR_FIELDS 4

struct wm_entry {		/* a pair of hosts */
	struct hnode hn;
	struct wm_entry *next_all;	/* for freeing */
	uint64_t pair;
	struct wm_link link;
	unsigned line;
};

struct wm_addr_ent {		/* an address, and the host it belongs to */
	struct hnode hn;
	struct wm_addr_ent *next_all;
	struct addr a;
	uint32_t host;
	unsigned line;
};

struct wm_name_ent {		/* a host named by a host line */
	struct hnode hn;
	struct wm_name_ent *next_all;
	char name[WM_NAME_MAX + 1];
	uint32_t host;
	unsigned line;
};

struct wm_matrix {
	struct htab tab;	/* wm_entry by pair of host numbers */
	struct htab addrs;	/* wm_addr_ent by address */
	struct htab names;	/* wm_name_ent by name (parsing only) */
	struct wm_entry *all;
	struct wm_addr_ent *all_addrs;
	struct wm_name_ent *all_names;
	uint32_t hosts;		/* host numbers given so far; 0 is "none" */
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

/* Names are hashed into the same key space with family 1 (parsing only: a
 * name longer than the 16 bytes hashed only shares a chain). */
static uint64_t
wm_name_hash(const char *name, const uint8_t key[16])
{
	struct addr a = { .family = 1 };
	size_t n = strlen(name);

	memcpy(a.bytes, name, n < sizeof(a.bytes) ? n : sizeof(a.bytes));
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

static struct wm_addr_ent *
wm_addr_find(const struct wm_matrix *m, const struct addr *a)
{
	uint64_t h = addr_hash(a, m->hkey);
	struct hnode *n;
	struct wm_addr_ent *e;

	for (n = htab_first(&m->addrs, h); n != NULL; n = htab_next(n, h)) {
		e = container_of(n, struct wm_addr_ent, hn);
		if (addr_eq(&e->a, a))
			return e;
	}
	return NULL;
}

static struct wm_name_ent *
wm_name_find(const struct wm_matrix *m, const char *name)
{
	uint64_t h = wm_name_hash(name, m->hkey);
	struct hnode *n;
	struct wm_name_ent *e;

	for (n = htab_first(&m->names, h); n != NULL; n = htab_next(n, h)) {
		e = container_of(n, struct wm_name_ent, hn);
		if (strcmp(e->name, name) == 0)
			return e;
	}
	return NULL;
}

const struct wm_link *
wm_matrix_lookup_addr(const struct wm_matrix *m, const struct addr *src,
    const struct addr *dst, uint64_t *pair)
{
	const struct wm_addr_ent *s, *d;
	const struct wm_entry *e;
	uint64_t key;

	/* Most matrices list few pairs; skip the hashes when there are none. */
	if (m->tab.n == 0) {
		if (pair != NULL)
			*pair = 0;
		return &m->def;
	}
	s = wm_addr_find(m, src);
	d = wm_addr_find(m, dst);
	key = wm_pair_key(s != NULL ? s->host : 0, d != NULL ? d->host : 0);
	if (pair != NULL)
		*pair = key;
	if (s == NULL || d == NULL)
		return &m->def;
	e = wm_matrix_find(m, key);
	return e != NULL ? &e->link : &m->def;
}

const struct wm_link *
wm_matrix_lookup(const struct wm_matrix *m, uint32_t src, uint32_t dst)
{
	struct addr s = { .family = AF_INET }, d = { .family = AF_INET };

	memcpy(s.bytes, &src, 4);
	memcpy(d.bytes, &dst, 4);
	return wm_matrix_lookup_addr(m, &s, &d, NULL);
}

size_t
wm_matrix_count(const struct wm_matrix *m)
{
	return m->tab.n;
}

size_t
wm_matrix_addrs(const struct wm_matrix *m)
{
	return m->addrs.n;
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
	struct wm_addr_ent *a, *anext;
	struct wm_name_ent *n, *nnext;

	if (m == NULL)
		return;
	for (e = m->all; e != NULL; e = next) {
		next = e->next_all;
		free(e);
	}
	for (a = m->all_addrs; a != NULL; a = anext) {
		anext = a->next_all;
		free(a);
	}
	for (n = m->all_names; n != NULL; n = nnext) {
		nnext = n->next_all;
		free(n);
	}
	htab_destroy(&m->tab);
	htab_destroy(&m->addrs);
	htab_destroy(&m->names);
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

/* A name is letters, digits, '_' and '-'; anything with '.' or ':' is meant
 * as an address. */
static bool
wm_is_name(const char *s)
{
	size_t n;

	for (n = 0; s[n] != '\0'; n++)
		if (!isalnum((unsigned char)s[n]) && s[n] != '_' && s[n] != '-')
			return false;
	return n > 0 && n <= WM_NAME_MAX;
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

static struct wm_addr_ent *
wm_addr_add(struct wm_matrix *m, const struct addr *a, uint32_t host, unsigned line)
{
	struct wm_addr_ent *e;

	if ((e = calloc(1, sizeof(*e))) == NULL)
		return NULL;
	e->a = *a;
	e->host = host;
	e->line = line;
	e->next_all = m->all_addrs;
	m->all_addrs = e;
	/* A failed grow leaves the entry in, with longer chains: fine. */
	(void)htab_insert(&m->addrs, &e->hn, addr_hash(a, m->hkey));
	return e;
}

/* host NAME ADDR...: f[0] is "host". */
static int
wm_parse_host(struct wm_matrix *m, const char *name, unsigned line, char **f,
    size_t n, char *err, size_t errlen)
{
	struct wm_name_ent *h;
	struct wm_addr_ent *dup;
	struct addr a;
	size_t i;

	if (n < 2 || !wm_is_name(f[1]) || strcmp(f[1], "host") == 0 ||
	    strcmp(f[1], "default") == 0) {
		errbuf_set(err, errlen, "%s:%u: bad host name '%.40s' (letters, digits, _ "
		    "and -, at most %d; not host or default)", name, line, n < 2 ? "" : f[1],
		    WM_NAME_MAX);
		return -1;
	}
	if (n < 3) {
		errbuf_set(err, errlen, "%s:%u: host %s: no address", name, line, f[1]);
		return -1;
	}
	if ((h = wm_name_find(m, f[1])) == NULL) {
		if ((h = calloc(1, sizeof(*h))) == NULL) {
			errbuf_set(err, errlen, "%s:%u: out of memory", name, line);
			return -1;
		}
		snprintf(h->name, sizeof(h->name), "%s", f[1]);
		h->host = ++m->hosts;
		h->line = line;
		h->next_all = m->all_names;
		m->all_names = h;
		(void)htab_insert(&m->names, &h->hn, wm_name_hash(h->name, m->hkey));
	}
	for (i = 2; i < n; i++) {
		if (addr_parse(f[i], &a) == -1) {
			errbuf_set(err, errlen, "%s:%u: bad address '%.40s' (IPv4 or IPv6)",
			    name, line, f[i]);
			return -1;
		}
		if ((dup = wm_addr_find(m, &a)) != NULL) {
			errbuf_set(err, errlen, "%s:%u: address %s given before, on line %u "
			    "(an address belongs to one host)", name, line, f[i], dup->line);
			return -1;
		}
		if (wm_addr_add(m, &a, h->host, line) == NULL) {
			errbuf_set(err, errlen, "%s:%u: out of memory", name, line);
			return -1;
		}
	}
	return 0;
}

/* A pair line's SRC or DST: a name from a host line, or an address (a host
 * of its own unless a host line has it). Sets *host. */
static int
wm_parse_end(struct wm_matrix *m, const char *name, unsigned line, const char *s,
    uint32_t *host, char *err, size_t errlen)
{
	const struct wm_name_ent *h;
	const struct wm_addr_ent *e;
	struct addr a;

	if (wm_is_name(s)) {
		if ((h = wm_name_find(m, s)) == NULL) {
			errbuf_set(err, errlen, "%s:%u: unknown host '%.40s' (an address, or "
			    "a name from an earlier host line)", name, line, s);
			return -1;
		}
		*host = h->host;
		return 0;
	}
	if (addr_parse(s, &a) == -1) {
		errbuf_set(err, errlen, "%s:%u: bad address '%.40s' (IPv4 or IPv6)",
		    name, line, s);
		return -1;
	}
	if ((e = wm_addr_find(m, &a)) == NULL &&
	    (e = wm_addr_add(m, &a, ++m->hosts, line)) == NULL) {
		errbuf_set(err, errlen, "%s:%u: out of memory", name, line);
		return -1;
	}
	*host = e->host;
	return 0;
}

static int
wm_parse_line(struct wm_matrix *m, const char *name, unsigned line, char *s,
    char *err, size_t errlen)
{
	char *f[WM_MAX_FIELDS + 1], *save = NULL, *tok, *hash;
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
	if (strcmp(f[0], "host") == 0)
		return wm_parse_host(m, name, line, f, n, err, errlen);

	if (n > WM_PAIR_FIELDS) {
		errbuf_set(err, errlen, "%s:%u: too many fields", name, line);
		return -1;
	}
	if (wm_parse_end(m, name, line, f[0], &src, err, errlen) == -1)
		return -1;
	if (n < 2) {
		errbuf_set(err, errlen, "%s:%u: missing destination", name, line);
		return -1;
	}
	if (wm_parse_end(m, name, line, f[1], &dst, err, errlen) == -1)
		return -1;
	if (wm_parse_link(name, line, f + 2, n - 2, &link, err, errlen) == -1)
		return -1;
	if ((dup = wm_matrix_find(m, wm_pair_key(src, dst))) != NULL) {
		errbuf_set(err, errlen, "%s:%u: duplicate pair %.40s %.40s (first on line %u)",
		    name, line, f[0], f[1], dup->line);
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

	if ((m = calloc(1, sizeof(*m))) == NULL || htab_init(&m->tab, 16) == -1 ||
	    htab_init(&m->addrs, 16) == -1 || htab_init(&m->names, 16) == -1) {
		if (m != NULL) {
			htab_destroy(&m->tab);
			htab_destroy(&m->addrs);
		}
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
