/* Intrusive chained hash table with power-of-two bucket counts. */

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "slot/htab.h"

#define HTAB_MIN_BUCKETS 8

static size_t
htab_roundup(size_t n)
{
	size_t nb = HTAB_MIN_BUCKETS;

	while (nb < n && nb <= SIZE_MAX / 2)
		nb *= 2;
	return nb;
}

int
htab_init(struct htab *t, size_t initial_buckets)
{
	t->nb = htab_roundup(initial_buckets);
	t->n = 0;
	if ((t->b = calloc(t->nb, sizeof(*t->b))) == NULL) {
		t->nb = 0;
		return -1;
	}
	return 0;
}

void
htab_destroy(struct htab *t)
{
	free(t->b);
	t->b = NULL;
	t->nb = 0;
	t->n = 0;
}

static int
htab_grow(struct htab *t)
{
	struct hnode **nb, *n, *next;
	size_t i, nnb, mask;

	if (t->nb > SIZE_MAX / 2 / sizeof(*nb)) {
		errno = ENOMEM;
		return -1;
	}
	nnb = t->nb * 2;
	if ((nb = calloc(nnb, sizeof(*nb))) == NULL)
		return -1;
	mask = nnb - 1;
	for (i = 0; i < t->nb; i++)
		for (n = t->b[i]; n != NULL; n = next) {
			next = n->next;
			n->next = nb[n->hash & mask];
			nb[n->hash & mask] = n;
		}
	free(t->b);
	t->b = nb;
	t->nb = nnb;
	return 0;
}

int
htab_insert(struct htab *t, struct hnode *n, uint64_t hash)
{
	struct hnode **b = &t->b[hash & (t->nb - 1)];

	n->hash = hash;
	n->next = *b;
	*b = n;
	t->n++;
	/* A failed grow only lengthens the chains; the table stays valid. */
	if (t->n > t->nb)
		return htab_grow(t);
	return 0;
}

void
htab_remove(struct htab *t, struct hnode *n)
{
	struct hnode **pp;

	for (pp = &t->b[n->hash & (t->nb - 1)]; *pp != NULL;
	    pp = &(*pp)->next)
		if (*pp == n) {
			/* n->next is kept, so a walk may go on past n. */
			*pp = n->next;
			t->n--;
			return;
		}
}

struct hnode *
htab_first(const struct htab *t, uint64_t hash)
{
	struct hnode *n;

	if (t->nb == 0)
		return NULL;
	for (n = t->b[hash & (t->nb - 1)]; n != NULL; n = n->next)
		if (n->hash == hash)
			return n;
	return NULL;
}

struct hnode *
htab_next(const struct hnode *n, uint64_t hash)
{
	for (n = n->next; n != NULL; n = n->next)
		if (n->hash == hash)
			return (struct hnode *)(uintptr_t)n;
	return NULL;
}
