/* Unit tests: htab (intrusive chained hash table). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "slot/htab.h"

struct item {
	int key;
	struct hnode hn;
};

/* A weak hash on purpose, so tests control collisions. */
static uint64_t
h_of(int key)
{
	return (uint64_t)key * UINT64_C(0x9e3779b97f4a7c15);
}

static struct item *
find(const struct htab *t, int key, uint64_t h)
{
	struct hnode *n;
	struct item *it;

	for (n = htab_first(t, h); n != NULL; n = htab_next(n, h)) {
		it = container_of(n, struct item, hn);
		if (it->key == key)
			return it;
	}
	return NULL;
}

/* Counts every node reachable from the buckets, checking each sits in the
 * bucket its hash names. */
static size_t
walk_all(const struct htab *t)
{
	struct hnode *n;
	size_t i, count = 0;

	for (i = 0; i < t->nb; i++)
		for (n = t->b[i]; n != NULL; n = n->next) {
			assert_int_equal(n->hash & (t->nb - 1), i);
			count++;
		}
	return count;
}

static void
test_init_rounding(void **state)
{
	struct htab t;

	(void)state;
	assert_int_equal(htab_init(&t, 0), 0);
	assert_true(t.nb >= 1);
	assert_int_equal(t.nb & (t.nb - 1), 0);
	assert_int_equal(t.n, 0);
	assert_null(htab_first(&t, 42));
	htab_destroy(&t);
	assert_null(t.b);

	assert_int_equal(htab_init(&t, 100), 0);
	assert_int_equal(t.nb, 128);
	htab_destroy(&t);
	assert_int_equal(htab_init(&t, 1024), 0);
	assert_int_equal(t.nb, 1024);
	htab_destroy(&t);
	assert_int_equal(htab_init(&t, 1025), 0);
	assert_int_equal(t.nb, 2048);
	htab_destroy(&t);
}

static void
test_insert_find_remove(void **state)
{
	struct htab t;
	struct item a = { .key = 1 }, b = { .key = 2 }, c = { .key = 3 };

	(void)state;
	assert_int_equal(htab_init(&t, 8), 0);
	assert_int_equal(htab_insert(&t, &a.hn, h_of(1)), 0);
	assert_int_equal(htab_insert(&t, &b.hn, h_of(2)), 0);
	assert_int_equal(htab_insert(&t, &c.hn, h_of(3)), 0);
	assert_int_equal(t.n, 3);
	assert_ptr_equal(find(&t, 1, h_of(1)), &a);
	assert_ptr_equal(find(&t, 2, h_of(2)), &b);
	assert_ptr_equal(find(&t, 3, h_of(3)), &c);
	assert_null(find(&t, 4, h_of(4)));
	assert_int_equal(a.hn.hash, h_of(1));

	htab_remove(&t, &b.hn);
	assert_int_equal(t.n, 2);
	assert_null(find(&t, 2, h_of(2)));
	assert_ptr_equal(find(&t, 1, h_of(1)), &a);
	assert_ptr_equal(find(&t, 3, h_of(3)), &c);
	htab_remove(&t, &a.hn);
	htab_remove(&t, &c.hn);
	assert_int_equal(t.n, 0);
	assert_int_equal(walk_all(&t), 0);
	htab_destroy(&t);
}

/* Several entries with one hash: all are found, each removable. */
static void
test_same_hash(void **state)
{
	struct htab t;
	struct item it[5];
	struct hnode *n;
	int i, seen;

	(void)state;
	assert_int_equal(htab_init(&t, 8), 0);
	for (i = 0; i < 5; i++) {
		it[i].key = i;
		assert_int_equal(htab_insert(&t, &it[i].hn, 77), 0);
	}
	seen = 0;
	for (n = htab_first(&t, 77); n != NULL; n = htab_next(n, 77))
		seen |= 1 << container_of(n, struct item, hn)->key;
	assert_int_equal(seen, 0x1f);
	for (i = 0; i < 5; i++)
		assert_ptr_equal(find(&t, i, 77), &it[i]);

	/* Remove from the middle, the head and the tail of the chain. */
	htab_remove(&t, &it[2].hn);
	htab_remove(&t, &it[4].hn);
	htab_remove(&t, &it[0].hn);
	assert_int_equal(t.n, 2);
	assert_null(find(&t, 2, 77));
	assert_null(find(&t, 4, 77));
	assert_null(find(&t, 0, 77));
	assert_ptr_equal(find(&t, 1, 77), &it[1]);
	assert_ptr_equal(find(&t, 3, 77), &it[3]);
	htab_destroy(&t);
}

/* Different hashes in one bucket do not show up in each other's walk. */
static void
test_bucket_collision(void **state)
{
	struct htab t;
	struct item a = { .key = 1 }, b = { .key = 2 };
	uint64_t ha = 5, hb = 5 + 8;	/* same bucket of 8 */

	(void)state;
	assert_int_equal(htab_init(&t, 8), 0);
	assert_int_equal(t.nb, 8);
	assert_int_equal(htab_insert(&t, &a.hn, ha), 0);
	assert_int_equal(htab_insert(&t, &b.hn, hb), 0);
	assert_ptr_equal(htab_first(&t, ha), &a.hn);
	assert_null(htab_next(&a.hn, ha));
	assert_ptr_equal(htab_first(&t, hb), &b.hn);
	assert_null(htab_next(&b.hn, hb));
	assert_null(htab_first(&t, 5 + 16));
	htab_destroy(&t);
}

static void
test_growth(void **state)
{
	enum { N = 5000 };
	struct htab t;
	struct item *it;
	size_t nb_prev;
	int i, grew = 0;

	(void)state;
	assert_non_null(it = calloc(N, sizeof(*it)));
	assert_int_equal(htab_init(&t, 8), 0);
	for (i = 0; i < N; i++) {
		it[i].key = i;
		nb_prev = t.nb;
		assert_int_equal(htab_insert(&t, &it[i].hn, h_of(i)), 0);
		if (t.nb != nb_prev) {
			assert_int_equal(t.nb, nb_prev * 2);
			grew++;
		}
		/* Load never passes 1 after an insert. */
		assert_true(t.n <= t.nb);
	}
	assert_int_equal(t.n, N);
	assert_true(grew >= 9);	/* 8 -> 8192 */
	assert_int_equal(walk_all(&t), N);
	for (i = 0; i < N; i++)
		assert_ptr_equal(find(&t, i, h_of(i)), &it[i]);

	/* Remove every other entry; the rest stays reachable. */
	for (i = 0; i < N; i += 2)
		htab_remove(&t, &it[i].hn);
	assert_int_equal(t.n, N / 2);
	assert_int_equal(walk_all(&t), N / 2);
	for (i = 0; i < N; i++) {
		if (i % 2 == 0)
			assert_null(find(&t, i, h_of(i)));
		else
			assert_ptr_equal(find(&t, i, h_of(i)), &it[i]);
	}
	/* Removal never shrinks (no allocation). */
	assert_int_equal(t.nb, 8192);
	/* Re-insert works after removal. */
	assert_int_equal(htab_insert(&t, &it[0].hn, h_of(0)), 0);
	assert_ptr_equal(find(&t, 0, h_of(0)), &it[0]);
	htab_destroy(&t);
	free(it);
}

/* Removing the current node while walking a chain, then going on. */
static void
test_remove_while_walking(void **state)
{
	struct htab t;
	struct item it[6];
	struct hnode *n, *next;
	int i, left = 0;

	(void)state;
	assert_int_equal(htab_init(&t, 8), 0);
	for (i = 0; i < 6; i++) {
		it[i].key = i;
		assert_int_equal(htab_insert(&t, &it[i].hn, 9), 0);
	}
	for (n = htab_first(&t, 9); n != NULL; n = next) {
		next = htab_next(n, 9);
		if (container_of(n, struct item, hn)->key % 2)
			htab_remove(&t, n);
	}
	for (n = htab_first(&t, 9); n != NULL; n = htab_next(n, 9)) {
		assert_int_equal(container_of(n, struct item, hn)->key % 2, 0);
		left++;
	}
	assert_int_equal(left, 3);
	assert_int_equal(t.n, 3);
	htab_destroy(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rounding),
		cmocka_unit_test(test_insert_find_remove),
		cmocka_unit_test(test_same_hash),
		cmocka_unit_test(test_bucket_collision),
		cmocka_unit_test(test_growth),
		cmocka_unit_test(test_remove_while_walking),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
