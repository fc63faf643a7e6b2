#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
#include "slot/errbuf.h"
#include "slot/rng.h"
#include "roles.h"

static uint32_t *
iota(size_t n)
{
	uint32_t *v = malloc((n > 0 ? n : 1) * sizeof(*v));

	if (v != NULL)
		for (size_t i = 0; i < n; i++)
			v[i] = (uint32_t)i;
	return v;
}

int
roles_all(struct roles *r, size_t n)
{
	memset(r, 0, sizeof(*r));
	r->client = iota(n);
	r->relay = iota(n);
	r->server = iota(n);
	if (r->client == NULL || r->relay == NULL || r->server == NULL) {
		roles_free(r);
		return -1;
	}
	r->nclient = r->nrelay = r->nserver = n;
	r->all_to_all = true;
	return 0;
}

void
roles_free(struct roles *r)
{
	free(r->client);
	free(r->relay);
	free(r->server);
	memset(r, 0, sizeof(*r));
}

/* Parses a decimal index < n at *s, advancing *s. */
static int
parse_index(const char **s, size_t n, size_t *out)
{
	char *end;
	unsigned long long v;

	if (**s < '0' || **s > '9')
		return -1;
	errno = 0;
	v = strtoull(*s, &end, 10);
	if (errno != 0 || v >= n)
		return -1;
	*s = end;
	*out = (size_t)v;
	return 0;
}

/* Appends i to v, marking it in seen; a node already there is an error. */
static int
add_node(uint32_t *v, size_t *nv, unsigned char *seen, size_t i)
{
	if (seen[i])
		return -1;
	seen[i] = 1;
	v[(*nv)++] = (uint32_t)i;
	return 0;
}

static int
parse_names(const char *list, char *const *names, size_t n, uint32_t *v,
    size_t *nv, unsigned char *seen, char *err, size_t errlen)
{
	const char *p = list;

	for (;;) {
		size_t len = strcspn(p, ",");
		size_t hit = n;

		if (len == 0) {
			errbuf_set(err, errlen, "empty name in '%s'", list);
			return -1;
		}
		for (size_t i = 0; i < n && names != NULL; i++)
			if (names[i] != NULL && strlen(names[i]) == len &&
			    memcmp(names[i], p, len) == 0) {
				hit = i;
				break;
			}
		if (hit == n) {
			errbuf_set(err, errlen, "no node named '%.*s'", (int)len, p);
			return -1;
		}
		if (add_node(v, nv, seen, hit) < 0) {
			errbuf_set(err, errlen, "node '%.*s' given twice", (int)len, p);
			return -1;
		}
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

static int
parse_indexes(const char *list, size_t n, uint32_t *v, size_t *nv,
    unsigned char *seen, char *err, size_t errlen)
{
	const char *p = list;

	for (;;) {
		size_t a, b;

		if (parse_index(&p, n, &a) < 0)
			goto bad;
		b = a;
		if (*p == '-') {
			p++;
			if (parse_index(&p, n, &b) < 0 || b < a)
				goto bad;
		}
		for (size_t i = a; i <= b; i++)
			if (add_node(v, nv, seen, i) < 0) {
				errbuf_set(err, errlen, "node %zu given twice in '%s'", i,
				    list);
				return -1;
			}
		if (*p == '\0')
			return 0;
		if (*p != ',')
			goto bad;
		p++;
	}
bad:
	errbuf_set(err, errlen, "bad node list '%s' at '%s': indexes 0-%zu, "
	    "ranges a-b, or name:NAME,...", list, p, n > 0 ? n - 1 : 0);
	return -1;
}

int
roles_parse(const char *spec, char *const *names, size_t n, uint32_t **out,
    size_t *nout, char *err, size_t errlen)
{
	uint32_t *v = malloc((n > 0 ? n : 1) * sizeof(*v));
	unsigned char *seen = calloc(n > 0 ? n : 1, 1);
	size_t nv = 0;
	int rc;

	*out = NULL;
	*nout = 0;
	if (v == NULL || seen == NULL) {
		errbuf_set(err, errlen, "out of memory");
		rc = -1;
	} else if (strncmp(spec, "name:", 5) == 0) {
		rc = parse_names(spec + 5, names, n, v, &nv, seen, err, errlen);
	} else {
		rc = parse_indexes(spec, n, v, &nv, seen, err, errlen);
	}
	free(seen);
	if (rc < 0) {
		free(v);
		return -1;
	}
	qsort(v, nv, sizeof(*v), cmp_u32);
	*out = v;
	*nout = nv;
	return 0;
}

int
roles_split(struct roles *r, size_t n, size_t nc, size_t nr, size_t ns,
    uint64_t seed, char *err, size_t errlen)
{
	uint32_t *perm;
	struct rng rng;

	memset(r, 0, sizeof(*r));
	if (nc == 0 || nr == 0 || ns == 0 || nc > n || nr > n || ns > n ||
	    nc + nr + ns > n) {
		errbuf_set(err, errlen, "split %zu:%zu:%zu: each at least 1, "
		    "together at most the %zu nodes", nc, nr, ns, n);
		return -1;
	}
	perm = iota(n);
	r->client = malloc(nc * sizeof(*r->client));
	r->relay = malloc(nr * sizeof(*r->relay));
	r->server = malloc(ns * sizeof(*r->server));
	if (perm == NULL || r->client == NULL || r->relay == NULL ||
	    r->server == NULL) {
		free(perm);
		roles_free(r);
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	rng_seed(&rng, seed);
	for (size_t i = 0; i + 1 < n; i++) {
		size_t j = i + (size_t)rng_below(&rng, n - i);
		uint32_t t = perm[i];

		perm[i] = perm[j];
		perm[j] = t;
	}
	memcpy(r->client, perm, nc * sizeof(*perm));
	memcpy(r->relay, perm + nc, nr * sizeof(*perm));
	memcpy(r->server, perm + nc + nr, ns * sizeof(*perm));
	free(perm);
	qsort(r->client, nc, sizeof(*r->client), cmp_u32);
	qsort(r->relay, nr, sizeof(*r->relay), cmp_u32);
	qsort(r->server, ns, sizeof(*r->server), cmp_u32);
	r->nclient = nc;
	r->nrelay = nr;
	r->nserver = ns;
	return 0;
}

int
roles_pairs(const struct roles *r, struct pairs *p, char *err, size_t errlen)
{
	size_t cap, k = 0;

	memset(p, 0, sizeof(*p));
	if (r->all_to_all)
		cap = r->nclient * (r->nclient > 0 ? r->nclient - 1 : 0) / 2;
	else
		cap = r->nclient * r->nserver;
	if (cap == 0) {
		errbuf_set(err, errlen, "no (client, server) pair to evaluate");
		return -1;
	}
	p->c = malloc(cap * sizeof(*p->c));
	p->s = malloc(cap * sizeof(*p->s));
	if (p->c == NULL || p->s == NULL) {
		roles_pairs_free(p);
		errbuf_set(err, errlen, "out of memory for %zu pairs", cap);
		return -1;
	}
	for (size_t a = 0; a < r->nclient; a++) {
		if (r->all_to_all) {
			for (size_t b = a + 1; b < r->nclient; b++) {
				p->c[k] = r->client[a];
				p->s[k++] = r->client[b];
			}
			continue;
		}
		for (size_t b = 0; b < r->nserver; b++)
			if (r->server[b] != r->client[a]) {
				p->c[k] = r->client[a];
				p->s[k++] = r->server[b];
			}
	}
	p->n = k;
	if (k == 0) {
		roles_pairs_free(p);
		errbuf_set(err, errlen, "no (client, server) pair to evaluate: "
		    "the only client is the only server");
		return -1;
	}
	return 0;
}

int
roles_pairs_sample(struct pairs *p, size_t k, uint64_t seed)
{
	unsigned char *keep;
	struct rng rng;
	size_t n = p->n, w = 0;

	if (k >= n)
		return 0;
	keep = calloc(n, 1);
	if (keep == NULL)
		return -1;
	/* Floyd's algorithm: k distinct indexes with k draws. */
	rng_seed(&rng, seed);
	for (size_t j = n - k; j < n; j++) {
		size_t t = (size_t)rng_below(&rng, j + 1);

		keep[keep[t] ? j : t] = 1;
	}
	for (size_t i = 0; i < n; i++)
		if (keep[i]) {
			p->c[w] = p->c[i];
			p->s[w++] = p->s[i];
		}
	free(keep);
	p->n = w;
	return 0;
}

void
roles_pairs_free(struct pairs *p)
{
	free(p->c);
	free(p->s);
	memset(p, 0, sizeof(*p));
}
