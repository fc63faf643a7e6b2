/* Connections per source (see dsrc.h): a small array scanned linearly. It
 * has one entry per connection slot at most (4096 by dconf's bound), and
 * is touched once per accept and once per close. */

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "dsrc.h"

struct dsrc_entry {
	struct addr key;
	unsigned n;		/* 0: free */
};

struct dsrc {
	struct dsrc_entry *e;
	unsigned cap, per_source, used;
};

struct dsrc *
dsrc_new(unsigned sources, unsigned per_source)
{
	struct dsrc *s;

	if (sources == 0 || per_source == 0)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	if ((s->e = calloc(sources, sizeof(*s->e))) == NULL) {
		free(s);
		return NULL;
	}
	s->cap = sources;
	s->per_source = per_source;
	return s;
}

void
dsrc_free(struct dsrc *s)
{
	if (s == NULL)
		return;
	free(s->e);
	free(s);
}

int
dsrc_key(const struct sockaddr *sa, socklen_t len, struct addr *out)
{
	struct endpoint ep;

	if (ep_from_sockaddr(sa, len, &ep) == -1)
		return -1;
	*out = ep.addr;
	/* A host gets a /64 to itself: counting its addresses one by one
	 * would give it 2^64 sources. */
	if (out->family == AF_INET6)
		memset(out->bytes + 8, 0, 8);
	return 0;
}

static struct dsrc_entry *
find(const struct dsrc *s, const struct addr *key)
{
	for (unsigned i = 0; i < s->cap; i++)
		if (s->e[i].n > 0 && addr_eq(&s->e[i].key, key))
			return &s->e[i];
	return NULL;
}

int
dsrc_take(struct dsrc *s, const struct addr *key)
{
	struct dsrc_entry *e = find(s, key);

	if (e != NULL) {
		if (e->n >= s->per_source)
			return -1;
		e->n++;
		return 0;
	}
	for (unsigned i = 0; i < s->cap; i++)
		if (s->e[i].n == 0) {
			s->e[i].key = *key;
			s->e[i].n = 1;
			s->used++;
			return 0;
		}
	return -1;
}

void
dsrc_put(struct dsrc *s, const struct addr *key)
{
	struct dsrc_entry *e = find(s, key);

	if (e != NULL && --e->n == 0)
		s->used--;
}

unsigned
dsrc_count(const struct dsrc *s, const struct addr *key)
{
	const struct dsrc_entry *e = find(s, key);

	return e ? e->n : 0;
}

unsigned
dsrc_sources(const struct dsrc *s)
{
	return s->used;
}
