/* Unit tests for tests/testbed/wanem_delayq.c: the delay line of slot-wanem
 * (release order, per-pair FIFO across delay changes, ties, capacity). */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sodium.h>

#include "../testbed/wanem_delayq.h"
#include "../testbed/wanem_matrix.h"

#define P1 wm_pair_key(0x0100000a, 0x0200000a)
#define P2 wm_pair_key(0x0200000a, 0x0100000a)
#define P3 wm_pair_key(0x0300000a, 0x0100000a)

static uint64_t
push_held(struct wm_dq *q, uint32_t id, uint64_t pair, uint64_t now, uint64_t delay)
{
	uint64_t due = 0;

	assert_int_equal(wm_dq_push(q, id, pair, now, delay, &due), WM_DQ_HELD);
	return due;
}

static void
test_empty(void **state)
{
	struct wm_dq_item it[4];
	struct wm_dq *q;

	(void)state;
	assert_null(wm_dq_new(0));
	q = wm_dq_new(4);
	assert_non_null(q);
	assert_int_equal(wm_dq_capacity(q), 4);
	assert_int_equal(wm_dq_len(q), 0);
	assert_true(wm_dq_next_due(q) == UINT64_MAX);
	assert_int_equal(wm_dq_pop_due(q, UINT64_MAX, it, 4), 0);
	wm_dq_free(q);
	wm_dq_free(NULL);
}

static void
test_order(void **state)
{
	struct wm_dq_item it[8];
	struct wm_dq *q = wm_dq_new(16);

	(void)state;
	assert_int_equal(push_held(q, 1, P1, 1000, 40000), 41000);
	assert_int_equal(push_held(q, 2, P2, 1000, 10000), 11000);
	assert_int_equal(push_held(q, 3, P3, 2000, 20000), 22000);
	assert_int_equal(push_held(q, 4, P2, 3000, 1), 11000);	/* behind id 2 */
	assert_int_equal(wm_dq_len(q), 4);
	assert_int_equal(wm_dq_pairs(q), 3);
	assert_int_equal(wm_dq_next_due(q), 11000);

	/* Nothing before its time. */
	assert_int_equal(wm_dq_pop_due(q, 10999, it, 8), 0);
	assert_int_equal(wm_dq_pop_due(q, 11000, it, 8), 2);
	assert_int_equal(it[0].id, 2);
	assert_int_equal(it[0].due_us, 11000);
	assert_int_equal(it[1].id, 4);
	assert_int_equal(wm_dq_pairs(q), 2);
	assert_int_equal(wm_dq_next_due(q), 22000);

	/* Late: everything due comes out, earliest first. */
	assert_int_equal(wm_dq_pop_due(q, 50000, it, 8), 2);
	assert_int_equal(it[0].id, 3);
	assert_int_equal(it[1].id, 1);
	assert_int_equal(it[1].due_us, 41000);
	assert_int_equal(wm_dq_len(q), 0);
	assert_int_equal(wm_dq_pairs(q), 0);
	assert_true(wm_dq_next_due(q) == UINT64_MAX);
	wm_dq_free(q);
}

/* A pair's delay shrinks (a reload): its later packets wait for the earlier
 * ones rather than overtake them; another pair is not held up. */
static void
test_fifo_across_delay_change(void **state)
{
	struct wm_dq_item it[8];
	struct wm_dq *q = wm_dq_new(16);
	uint64_t due;

	(void)state;
	assert_int_equal(push_held(q, 10, P1, 0, 40000), 40000);
	/* Zero delay, but the pair has a packet held: held behind it. */
	assert_int_equal(wm_dq_push(q, 11, P1, 10, 0, &due), WM_DQ_HELD);
	assert_int_equal(due, 40000);
	assert_int_equal(push_held(q, 12, P1, 20, 5000), 40000);
	assert_int_equal(push_held(q, 13, P1, 30, 45000), 45030);
	assert_int_equal(push_held(q, 14, P1, 40, 1000), 45030);
	/* Another pair with zero delay goes at once. */
	assert_int_equal(wm_dq_push(q, 20, P2, 50, 0, &due), WM_DQ_NOW);
	assert_int_equal(due, 50);
	assert_int_equal(push_held(q, 21, P2, 60, 100), 160);

	assert_int_equal(wm_dq_pop_due(q, 40000, it, 8), 4);
	assert_int_equal(it[0].id, 21);
	assert_int_equal(it[1].id, 10);
	assert_int_equal(it[2].id, 11);
	assert_int_equal(it[3].id, 12);
	assert_int_equal(wm_dq_pop_due(q, 45030, it, 8), 2);
	assert_int_equal(it[0].id, 13);
	assert_int_equal(it[1].id, 14);

	/* Once the pair has nothing held, zero delay is immediate again, and
	 * a new delay starts from now. */
	assert_int_equal(wm_dq_push(q, 15, P1, 50000, 0, &due), WM_DQ_NOW);
	assert_int_equal(push_held(q, 16, P1, 50000, 10), 50010);
	wm_dq_free(q);
}

static void
test_ties(void **state)
{
	struct wm_dq_item it[8];
	struct wm_dq *q = wm_dq_new(16);
	uint32_t i;

	(void)state;
	/* Same due time from different pairs and pushes: push order. */
	push_held(q, 5, P3, 0, 100);
	push_held(q, 6, P1, 50, 50);
	push_held(q, 7, P2, 90, 10);
	push_held(q, 8, P1, 100, 0);
	push_held(q, 9, P3, 100, 0);
	assert_int_equal(wm_dq_pop_due(q, 100, it, 8), 5);
	for (i = 0; i < 5; i++) {
		assert_int_equal(it[i].id, 5 + i);
		assert_int_equal(it[i].due_us, 100);
	}
	wm_dq_free(q);
}

static void
test_capacity(void **state)
{
	struct wm_dq_item it[4];
	struct wm_dq *q = wm_dq_new(3);
	uint64_t due = 7;

	(void)state;
	push_held(q, 1, P1, 0, 10);
	push_held(q, 2, P2, 0, 10);
	push_held(q, 3, P3, 0, 10);
	assert_int_equal(wm_dq_push(q, 4, P1, 0, 10, &due), WM_DQ_FULL);
	assert_int_equal(wm_dq_push(q, 5, wm_pair_key(9, 9), 0, 10, &due), WM_DQ_FULL);
	/* Zero delay for an idle pair needs no room. */
	assert_int_equal(wm_dq_push(q, 6, wm_pair_key(9, 9), 0, 0, &due), WM_DQ_NOW);
	/* But zero delay behind held packets does. */
	assert_int_equal(wm_dq_push(q, 7, P1, 0, 0, &due), WM_DQ_FULL);
	assert_int_equal(wm_dq_len(q), 3);

	/* pop_due respects max; room comes back. */
	assert_int_equal(wm_dq_pop_due(q, 10, it, 1), 1);
	assert_int_equal(it[0].id, 1);
	push_held(q, 8, wm_pair_key(9, 9), 5, 10);
	assert_int_equal(wm_dq_push(q, 9, P2, 5, 10, &due), WM_DQ_FULL);
	assert_int_equal(wm_dq_pop_due(q, UINT64_MAX, it, 4), 3);
	assert_int_equal(it[0].id, 2);
	assert_int_equal(it[1].id, 3);
	assert_int_equal(it[2].id, 8);
	wm_dq_free(q);
}

/* Overflowing times saturate rather than wrap to the front. */
static void
test_saturate(void **state)
{
	struct wm_dq_item it[2];
	struct wm_dq *q = wm_dq_new(2);

	(void)state;
	assert_true(push_held(q, 1, P1, 10, UINT64_MAX - 5) == UINT64_MAX);
	push_held(q, 2, P2, 10, 5);
	assert_int_equal(wm_dq_pop_due(q, 1000, it, 2), 1);
	assert_int_equal(it[0].id, 2);
	wm_dq_free(q);
}

/* Random pushes and pops, checked against what must hold: nothing leaves
 * early or out of due order, a pair's packets leave in push order, each
 * due time is max(now + delay, the pair's previous), and every packet
 * leaves exactly once. Many distinct pairs exercise slot reuse. */
#define NPAIR 37
#define CAP 64
static void
test_random(void **state)
{
	struct wm_dq *q = wm_dq_new(CAP);
	struct wm_dq_item it[CAP];
	uint64_t last_due[NPAIR] = { 0 }, now = 0, due, prev_due;
	uint32_t last_pushed[NPAIR], last_popped[NPAIR], id = 0;
	uint32_t *pair_of, popped = 0, held = 0;
	size_t i, n, max, round;
	int r;

	(void)state;
	pair_of = calloc(200000, sizeof(*pair_of));
	assert_non_null(pair_of);
	memset(last_pushed, 0xff, sizeof(last_pushed));
	memset(last_popped, 0xff, sizeof(last_popped));
	srandom(42);
	for (round = 0; round < 20000; round++) {
		uint32_t p = (uint32_t)(random() % NPAIR);
		uint64_t delay = random() % 4 == 0 ? 0 : (uint64_t)(random() % 500);
		uint64_t key = wm_pair_key(p * 7919u, p);

		now += (uint64_t)(random() % 20);
		r = wm_dq_push(q, id, key, now, delay, &due);
		if (r == WM_DQ_FULL) {
			assert_int_equal(held, CAP);
		} else if (r == WM_DQ_NOW) {
			assert_int_equal(delay, 0);
			assert_true(last_pushed[p] == last_popped[p]);
		} else {
			uint64_t want = now + delay;

			if (delay == 0)
				assert_true(last_pushed[p] != last_popped[p]);
			if (last_pushed[p] != last_popped[p] && last_due[p] > want)
				want = last_due[p];
			assert_int_equal(due, want);
			last_due[p] = due;
			last_pushed[p] = id;
			pair_of[id] = p;
			held++;
		}
		id++;

		if (random() % 3 == 0) {
			max = (size_t)(random() % CAP) + 1;
			n = wm_dq_pop_due(q, now, it, max);
			prev_due = 0;
			for (i = 0; i < n; i++) {
				assert_true(it[i].due_us <= now);
				assert_true(it[i].due_us >= prev_due);
				prev_due = it[i].due_us;
				p = pair_of[it[i].id];
				assert_true(last_popped[p] == UINT32_MAX ||
				    it[i].id > last_popped[p]);
				last_popped[p] = it[i].id;
			}
			popped += (uint32_t)n;
			held -= (uint32_t)n;
			assert_int_equal(wm_dq_len(q), held);
			if (n < max)
				assert_true(wm_dq_next_due(q) > now);
		}
	}
	n = wm_dq_pop_due(q, UINT64_MAX, it, CAP);
	assert_int_equal(n, held);
	assert_int_equal(wm_dq_pairs(q), 0);
	free(pair_of);
	wm_dq_free(q);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_fifo_across_delay_change),
		cmocka_unit_test(test_ties),
		cmocka_unit_test(test_capacity),
		cmocka_unit_test(test_saturate),
		cmocka_unit_test(test_random),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
