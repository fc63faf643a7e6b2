#ifndef SLOT_HTAB_H
#define SLOT_HTAB_H

#include <stddef.h>
#include <stdint.h>

/* Intrusive chained hash table. Entries embed a struct hnode; the caller
 * computes hashes (addr_hash/ep_hash, keyed) and compares keys itself:
 *
 *   for (n = htab_first(t, h); n; n = htab_next(n, h))
 *           if (key_eq(container_of(n, ...), key)) ...
 *
 * The table grows by doubling when the load passes 1; it never allocates in
 * lookups or removals. */

struct hnode {
	struct hnode *next;
	uint64_t hash;
};

struct htab {
	struct hnode **b;
	size_t nb;	/* bucket count, a power of two */
	size_t n;	/* entries */
};

/* Returns 0, or -1 on allocation failure. */
int htab_init(struct htab *t, size_t initial_buckets);
void htab_destroy(struct htab *t);	/* frees buckets, not entries */

/* Returns 0, or -1 if growing failed (the node is inserted all the same). */
int htab_insert(struct htab *t, struct hnode *n, uint64_t hash);
void htab_remove(struct htab *t, struct hnode *n);

struct hnode *htab_first(const struct htab *t, uint64_t hash);
struct hnode *htab_next(const struct hnode *n, uint64_t hash);

#ifndef container_of
#define container_of(ptr, type, member) \
	((type *)(void *)((char *)(ptr) - offsetof(type, member)))
#endif

#endif
