/* Selection cache (src/core/selcache.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <sodium.h>

#include "slot/selcache.h"

#define S 1000000ull

static struct addr
A(const char *s)
{
	struct addr a;

	assert_int_equal(addr_parse(s, &a), 0);
	return a;
}

static struct selc_entry
via(const char *relay, uint32_t rtt_ms)
{
	struct selc_entry e = { .choice = SELC_RELAY, .path_rtt_us = rtt_ms * 1000 };

	assert_int_equal(ep_parse(relay, 0, &e.relay), 0);
	return e;
}

static void
test_hit_miss_and_expiry(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry e = via("198.51.100.1:7600", 40), got;
	struct addr s = A("203.0.113.5");
	(void)state;

	assert_non_null(c);
	assert_false(selc_get(c, &s, 0, &got));
	assert_int_equal(selc_put(c, &s, &e, 100 * S, 60 * S), 0);
	assert_true(selc_get(c, &s, 159 * S, &got));
	assert_int_equal(got.choice, SELC_RELAY);
	assert_true(ep_eq(&got.relay, &e.relay));
	assert_int_equal(got.path_rtt_us, 40000);
	assert_int_equal(got.expires_us, 160 * S);
	/* Expired: a miss, and the entry is gone. */
	assert_false(selc_get(c, &s, 160 * S, &got));
	assert_int_equal(selc_count(c), 0);
	selc_free(c);
}

static void
test_negative_entries(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry direct = { .choice = SELC_DIRECT }, got;
	struct addr s = A("2001:db8::5");
	(void)state;

	assert_int_equal(selc_put(c, &s, &direct, 0, 10 * S), 0);
	assert_true(selc_get(c, &s, 5 * S, &got));
	assert_int_equal(got.choice, SELC_DIRECT);
	selc_free(c);
}

static void
test_replace_refreshes(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry a = via("198.51.100.1:7600", 40), b = via("198.51.100.2:7600", 30), got;
	struct addr s = A("203.0.113.5");
	(void)state;

	selc_put(c, &s, &a, 0, 10 * S);
	selc_put(c, &s, &b, 8 * S, 10 * S);
	assert_int_equal(selc_count(c), 1);
	assert_true(selc_get(c, &s, 15 * S, &got));
	assert_true(ep_eq(&got.relay, &b.relay));
	selc_free(c);
}

static void
test_invalidate(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry r1 = via("198.51.100.1:7600", 40), r2 = via("198.51.100.2:7600", 30);
	struct selc_entry direct = { .choice = SELC_DIRECT }, got;
	struct addr s1 = A("203.0.113.1"), s2 = A("203.0.113.2"), s3 = A("203.0.113.3"),
	    s4 = A("203.0.113.4");
	(void)state;

	selc_put(c, &s1, &r1, 0, 60 * S);
	selc_put(c, &s2, &r1, 0, 60 * S);
	selc_put(c, &s3, &r2, 0, 60 * S);
	selc_put(c, &s4, &direct, 0, 60 * S);
	selc_invalidate(c, &s3);
	assert_false(selc_get(c, &s3, 1, &got));
	assert_int_equal(selc_invalidate_relay(c, &r1.relay), 2);
	assert_false(selc_get(c, &s1, 1, &got));
	assert_false(selc_get(c, &s2, 1, &got));
	assert_true(selc_get(c, &s4, 1, &got));
	assert_int_equal(selc_count(c), 1);
	selc_invalidate(c, &s1);	/* absent: harmless */
	selc_free(c);
}

static void
test_bounded_evicts_oldest_put(void **state)
{
	struct selcache *c = selc_new(3);
	struct selc_entry d = { .choice = SELC_DIRECT }, got;
	struct addr s[4] = { A("192.0.2.1"), A("192.0.2.2"), A("192.0.2.3"), A("192.0.2.4") };
	(void)state;

	selc_put(c, &s[0], &d, 0, 30 * S);
	selc_put(c, &s[1], &d, 1 * S, 30 * S);	/* the oldest once s[0] is refreshed */
	selc_put(c, &s[2], &d, 2 * S, 30 * S);
	selc_put(c, &s[0], &d, 3 * S, 30 * S);
	selc_put(c, &s[3], &d, 4 * S, 30 * S);
	assert_int_equal(selc_count(c), 3);
	assert_false(selc_get(c, &s[1], 5 * S, &got));
	assert_true(selc_get(c, &s[0], 5 * S, &got));
	assert_true(selc_get(c, &s[2], 2 * S, &got));
	assert_true(selc_get(c, &s[3], 2 * S, &got));
	selc_free(c);
}

static void
test_many_servers(void **state)
{
	struct selcache *c = selc_new(5000);
	struct selc_entry d = { .choice = SELC_DIRECT }, got;
	char b[32];
	(void)state;

	for (int i = 0; i < 6000; i++) {
		snprintf(b, sizeof(b), "10.%d.%d.1", i / 256, i % 256);
		struct addr a = A(b);
		assert_int_equal(selc_put(c, &a, &d, (uint64_t)i, 1000 * S), 0);
	}
	assert_int_equal(selc_count(c), 5000);
	/* The first 1000 put went. */
	struct addr first = A("10.0.0.1"), last = A("10.23.111.1");
	assert_false(selc_get(c, &first, 0, &got));
	assert_true(selc_get(c, &last, 0, &got));
	selc_free(c);
}

static void
test_zero_capacity(void **state)
{
	(void)state;
	errno = 0;
	assert_null(selc_new(0));
	assert_int_equal(errno, EINVAL);
}

static int
setup(void **state)
{
	(void)state;
	return sodium_init() < 0 ? -1 : 0;
}

struct walked {
	char server[ADDR_STRLEN];
	enum selc_choice choice;
	uint64_t expires_us;
};

static void
walk_cb(void *arg, const struct addr *server, const struct selc_entry *e)
{
	struct walked *w = arg;

	while (w->server[0])
		w++;
	addr_fmt(server, w->server);
	w->choice = e->choice;
	w->expires_us = e->expires_us;
}

/* The control socket's view: every entry, in the order of puts, expired
 * ones included (the walk changes nothing). */
static void
test_walk(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry e = via("198.51.100.1:7600", 40), d = { .choice = SELC_DIRECT };
	struct addr a = A("203.0.113.5"), b = A("203.0.113.6");
	struct walked w[4];
	(void)state;

	assert_int_equal(selc_put(c, &a, &e, 100 * S, 10 * S), 0);
	assert_int_equal(selc_put(c, &b, &d, 105 * S, 10 * S), 0);
	memset(w, 0, sizeof(w));
	selc_walk(c, walk_cb, w);
	assert_string_equal(w[0].server, "203.0.113.5");
	assert_int_equal(w[0].choice, SELC_RELAY);
	assert_int_equal(w[0].expires_us, 110 * S);
	assert_string_equal(w[1].server, "203.0.113.6");
	assert_int_equal(w[1].choice, SELC_DIRECT);
	assert_int_equal(w[2].server[0], '\0');
	assert_int_equal(selc_count(c), 2);
	selc_free(c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss_and_expiry),
		cmocka_unit_test(test_negative_entries),
		cmocka_unit_test(test_replace_refreshes),
		cmocka_unit_test(test_invalidate),
		cmocka_unit_test(test_bounded_evicts_oldest_put),
		cmocka_unit_test(test_many_servers),
		cmocka_unit_test(test_zero_capacity),
		cmocka_unit_test(test_walk),
	};
	return cmocka_run_group_tests_name("selcache", tests, setup, NULL);
}
