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

/* An address's key (port 0). */
static struct endpoint
A(const char *s)
{
	struct endpoint e = { .port = 0 };

	assert_int_equal(addr_parse(s, &e.addr), 0);
	return e;
}

/* An address and port: a server as a SYN names it, or a port's key. */
static struct endpoint
P(const char *s)
{
	struct endpoint e;

	assert_int_equal(ep_parse(s, 0, &e), 0);
	return e;
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
	struct endpoint s = A("203.0.113.5"), s80 = P("203.0.113.5:80");
	(void)state;

	assert_non_null(c);
	assert_false(selc_get(c, &s80, 0, &got));
	assert_int_equal(selc_put(c, &s, &e, 100 * S, 60 * S), 0);
	/* Any port of the address finds the address's entry. */
	assert_true(selc_get(c, &s80, 159 * S, &got));
	assert_int_equal(got.choice, SELC_RELAY);
	assert_int_equal(got.why, SELC_SELECTED);
	assert_true(ep_eq(&got.relay, &e.relay));
	assert_int_equal(got.path_rtt_us, 40000);
	assert_int_equal(got.made_us, 100 * S);
	assert_int_equal(got.expires_us, 160 * S);
	assert_true(selc_get(c, &s, 159 * S, &got));
	/* Expired: a miss, and the entry is gone. */
	assert_false(selc_get(c, &s80, 160 * S, &got));
	assert_int_equal(selc_count(c), 0);
	selc_free(c);
}

static void
test_negative_entries(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry direct = { .choice = SELC_DIRECT }, got;
	struct endpoint s = A("2001:db8::5"), s22 = P("[2001:db8::5]:22");
	(void)state;

	assert_int_equal(selc_put(c, &s, &direct, 0, 10 * S), 0);
	assert_true(selc_get(c, &s22, 5 * S, &got));
	assert_int_equal(got.choice, SELC_DIRECT);
	selc_free(c);
}

static void
test_replace_refreshes(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry a = via("198.51.100.1:7600", 40), b = via("198.51.100.2:7600", 30), got;
	struct endpoint s = A("203.0.113.5"), s80 = P("203.0.113.5:80");
	(void)state;

	selc_put(c, &s, &a, 0, 10 * S);
	assert_true(selc_mark_reached(c, &s80, &a.relay, 1 * S));
	selc_put(c, &s, &b, 8 * S, 10 * S);
	assert_int_equal(selc_count(c), 1);
	assert_true(selc_get(c, &s80, 15 * S, &got));
	assert_true(ep_eq(&got.relay, &b.relay));
	/* A new decision has reached nothing yet. */
	assert_false(selc_reached(&got, 80));
	selc_free(c);
}

/* The bug of issue 13: a refusal on one port is about that port. It is
 * found before the address's entry, for that port only, and lives on its
 * own clock. */
static void
test_port_entry_is_about_one_port(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry r = via("198.51.100.1:7600", 40), got;
	struct selc_entry refused = { .choice = SELC_DIRECT, .why = SELC_REFUSED };
	struct endpoint s = A("203.0.113.5"), s80 = P("203.0.113.5:80"),
	    s9 = P("203.0.113.5:9"), t9 = P("203.0.113.6:9");
	(void)state;

	selc_put(c, &s, &r, 0, 600 * S);
	selc_put(c, &s9, &refused, 10 * S, 30 * S);
	assert_int_equal(selc_count(c), 2);
	assert_true(selc_get(c, &s9, 11 * S, &got));
	assert_int_equal(got.choice, SELC_DIRECT);
	assert_int_equal(got.why, SELC_REFUSED);
	assert_true(selc_get(c, &s80, 11 * S, &got));
	assert_int_equal(got.choice, SELC_RELAY);
	/* Another server's port 9 is not concerned. */
	assert_false(selc_get(c, &t9, 11 * S, &got));
	/* The port's entry expires first; the port then finds the address's. */
	assert_true(selc_get(c, &s9, 39 * S, &got));
	assert_int_equal(got.choice, SELC_DIRECT);
	assert_true(selc_get(c, &s9, 40 * S, &got));
	assert_int_equal(got.choice, SELC_RELAY);
	assert_int_equal(selc_count(c), 1);
	/* Without an address entry, a port entry is still only the port's. */
	selc_free(c);
	c = selc_new(10);
	selc_put(c, &s9, &refused, 0, 30 * S);
	assert_false(selc_get(c, &s80, 1 * S, &got));
	assert_false(selc_get(c, &s, 1 * S, &got));
	selc_free(c);
}

/* Reached ports: noted through the entry's relay only, most recent first,
 * bounded, without touching the entry's lifetime. */
static void
test_reached(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry r = via("198.51.100.1:7600", 40), other = via("198.51.100.2:7600", 30);
	struct selc_entry direct = { .choice = SELC_DIRECT }, got;
	struct selc_entry refused = { .choice = SELC_DIRECT, .why = SELC_REFUSED };
	struct endpoint s = A("203.0.113.5"), s80 = P("203.0.113.5:80"),
	    s443 = P("203.0.113.5:443"), u = A("203.0.113.7"), u80 = P("203.0.113.7:80");
	char b[32];
	(void)state;

	assert_false(selc_mark_reached(c, &s80, &r.relay, 0));		/* no entry */
	selc_put(c, &s, &r, 0, 60 * S);
	assert_true(selc_get(c, &s80, 1 * S, &got));
	assert_false(selc_reached(&got, 80));
	assert_false(selc_mark_reached(c, &s80, &other.relay, 1 * S));	/* another relay */
	assert_true(selc_mark_reached(c, &s80, &r.relay, 1 * S));
	assert_true(selc_mark_reached(c, &s443, &r.relay, 2 * S));
	assert_true(selc_mark_reached(c, &s80, &r.relay, 3 * S));	/* again: no duplicate */
	assert_true(selc_get(c, &s80, 4 * S, &got));
	assert_true(selc_reached(&got, 80));
	assert_true(selc_reached(&got, 443));
	assert_false(selc_reached(&got, 22));
	assert_false(selc_reached(&got, 0));
	assert_int_equal(got.reached[0], 80);
	assert_int_equal(got.reached[1], 443);
	assert_int_equal(got.reached[2], 0);
	assert_int_equal(got.expires_us, 60 * S);
	/* The least recently reached port goes first. */
	for (int p = 1000; p < 1000 + SELC_REACHED_MAX - 1; p++) {
		snprintf(b, sizeof(b), "203.0.113.5:%d", p);
		struct endpoint x = P(b);
		assert_true(selc_mark_reached(c, &x, &r.relay, 5 * S));
	}
	assert_true(selc_get(c, &s80, 6 * S, &got));
	assert_true(selc_reached(&got, 80));
	assert_false(selc_reached(&got, 443));
	/* A refusal of a reached port takes it out of the reached ones. */
	selc_put(c, &s80, &refused, 7 * S, 30 * S);
	assert_true(selc_get(c, &s, 8 * S, &got));
	assert_false(selc_reached(&got, 80));
	assert_true(selc_reached(&got, 1000));
	/* Expired: nothing is noted. */
	assert_false(selc_mark_reached(c, &s443, &r.relay, 60 * S));
	/* A direct entry reaches nothing. */
	selc_put(c, &u, &direct, 0, 60 * S);
	assert_false(selc_mark_reached(c, &u80, &r.relay, 1 * S));
	selc_free(c);
}

static void
test_invalidate(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry r1 = via("198.51.100.1:7600", 40), r2 = via("198.51.100.2:7600", 30);
	struct selc_entry direct = { .choice = SELC_DIRECT }, got;
	struct endpoint s1 = A("203.0.113.1"), s2 = A("203.0.113.2"), s3 = A("203.0.113.3"),
	    s4 = A("203.0.113.4");
	(void)state;

	selc_put(c, &s1, &r1, 0, 60 * S);
	selc_put(c, &s2, &r1, 0, 60 * S);
	selc_put(c, &s3, &r2, 0, 60 * S);
	selc_put(c, &s4, &direct, 0, 60 * S);
	/* Through another relay, or direct: a newer decision, kept. */
	assert_false(selc_invalidate(c, &s3, &r1.relay));
	assert_false(selc_invalidate(c, &s4, &r1.relay));
	assert_true(selc_get(c, &s3, 1, &got));
	assert_true(selc_invalidate(c, &s3, &r2.relay));
	assert_false(selc_get(c, &s3, 1, &got));
	assert_int_equal(selc_invalidate_relay(c, &r1.relay), 2);
	assert_false(selc_get(c, &s1, 1, &got));
	assert_false(selc_get(c, &s2, 1, &got));
	assert_true(selc_get(c, &s4, 1, &got));
	assert_int_equal(selc_count(c), 1);
	assert_false(selc_invalidate(c, &s1, NULL));	/* absent: harmless */
	assert_true(selc_invalidate(c, &s4, NULL));
	assert_int_equal(selc_count(c), 0);
	selc_free(c);
}

static void
test_flush(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry r = via("198.51.100.1:7600", 40), got;
	struct selc_entry direct = { .choice = SELC_DIRECT };
	struct selc_entry refused = { .choice = SELC_DIRECT, .why = SELC_REFUSED };
	struct endpoint s = A("203.0.113.5"), s9 = P("203.0.113.5:9"), s22 = P("203.0.113.5:22"),
	    t = A("203.0.113.6"), v = A("2001:db8::5"), v80 = P("[2001:db8::5]:80");
	struct addr none;
	(void)state;

	selc_put(c, &s, &r, 0, 60 * S);
	selc_put(c, &s9, &refused, 0, 30 * S);
	selc_put(c, &t, &direct, 0, 60 * S);
	selc_put(c, &s22, &refused, 0, 30 * S);
	selc_put(c, &v, &r, 0, 60 * S);
	assert_int_equal(selc_count(c), 5);
	/* One server: its address's entry and its ports'. */
	assert_int_equal(selc_flush(c, &s.addr), 3);
	assert_false(selc_get(c, &s9, 1, &got));
	assert_false(selc_get(c, &s22, 1, &got));
	assert_true(selc_get(c, &t, 1, &got));
	assert_true(selc_get(c, &v80, 1, &got));
	assert_int_equal(addr_parse("192.0.2.1", &none), 0);
	assert_int_equal(selc_flush(c, &none), 0);
	assert_int_equal(selc_flush(c, &s.addr), 0);
	/* All. */
	assert_int_equal(selc_flush(c, NULL), 2);
	assert_int_equal(selc_count(c), 0);
	assert_int_equal(selc_flush(c, NULL), 0);
	/* Usable after. */
	assert_int_equal(selc_put(c, &s, &r, 0, 60 * S), 0);
	assert_true(selc_get(c, &s22, 1, &got));
	selc_free(c);
}

static void
test_bounded_evicts_oldest_put(void **state)
{
	struct selcache *c = selc_new(3);
	struct selc_entry d = { .choice = SELC_DIRECT }, got;
	struct endpoint s[4] = { A("192.0.2.1"), A("192.0.2.2"), A("192.0.2.3"), A("192.0.2.4") };
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
		struct endpoint a = A(b);
		assert_int_equal(selc_put(c, &a, &d, (uint64_t)i, 1000 * S), 0);
	}
	assert_int_equal(selc_count(c), 5000);
	/* The first 1000 put went. */
	struct endpoint first = A("10.0.0.1"), last = A("10.23.111.1");
	assert_false(selc_get(c, &first, 0, &got));
	assert_true(selc_get(c, &last, 0, &got));
	assert_int_equal(selc_flush(c, NULL), 5000);
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
	char key[EP_STRLEN];
	enum selc_choice choice;
	uint64_t expires_us;
};

static void
walk_cb(void *arg, const struct endpoint *key, const struct selc_entry *e)
{
	struct walked *w = arg;

	while (w->key[0])
		w++;
	if (key->port)
		ep_fmt(key, w->key);
	else
		addr_fmt(&key->addr, w->key);
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
	struct endpoint a = A("203.0.113.5"), b = A("203.0.113.6"), a9 = P("203.0.113.5:9");
	struct walked w[4];
	(void)state;

	assert_int_equal(selc_put(c, &a, &e, 100 * S, 10 * S), 0);
	assert_int_equal(selc_put(c, &b, &d, 105 * S, 10 * S), 0);
	assert_int_equal(selc_put(c, &a9, &d, 106 * S, 1 * S), 0);
	memset(w, 0, sizeof(w));
	selc_walk(c, walk_cb, w);
	assert_string_equal(w[0].key, "203.0.113.5");
	assert_int_equal(w[0].choice, SELC_RELAY);
	assert_int_equal(w[0].expires_us, 110 * S);
	assert_string_equal(w[1].key, "203.0.113.6");
	assert_int_equal(w[1].choice, SELC_DIRECT);
	assert_string_equal(w[2].key, "203.0.113.5:9");
	assert_int_equal(w[2].expires_us, 107 * S);
	assert_int_equal(w[3].key[0], '\0');
	assert_int_equal(selc_count(c), 3);
	selc_free(c);
}

/* A chain's entry keeps its relays, and goes when any of them goes. */
static void
test_chain_entry(void **state)
{
	struct selcache *c = selc_new(10);
	struct selc_entry ch = via("198.51.100.1:7600", 40), one = via("198.51.100.3:7600", 50);
	struct selc_entry got;
	struct endpoint s1 = A("203.0.113.1"), s2 = A("203.0.113.2");
	struct endpoint mid = P("198.51.100.2:7600"), last = P("198.51.100.3:7600");
	(void)state;

	ch.next[0] = mid;
	ch.next[1] = last;
	ch.nnext = 2;
	selc_put(c, &s1, &ch, 0, 60 * S);
	selc_put(c, &s2, &one, 0, 60 * S);
	assert_true(selc_get(c, &s1, 1, &got));
	assert_int_equal(got.nnext, 2);
	assert_true(ep_eq(&got.next[0], &mid) && ep_eq(&got.next[1], &last));
	/* Its middle relay goes: the chain's entry goes, not the other. */
	assert_int_equal(selc_invalidate_relay(c, &mid), 1);
	assert_false(selc_get(c, &s1, 1, &got));
	assert_true(selc_get(c, &s2, 1, &got));
	/* Its last relay, also the first of another entry: both go. */
	selc_put(c, &s1, &ch, 0, 60 * S);
	assert_int_equal(selc_invalidate_relay(c, &last), 2);
	assert_int_equal(selc_count(c), 0);
	selc_free(c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hit_miss_and_expiry),
		cmocka_unit_test(test_negative_entries),
		cmocka_unit_test(test_replace_refreshes),
		cmocka_unit_test(test_port_entry_is_about_one_port),
		cmocka_unit_test(test_reached),
		cmocka_unit_test(test_invalidate),
		cmocka_unit_test(test_chain_entry),
		cmocka_unit_test(test_flush),
		cmocka_unit_test(test_bounded_evicts_oldest_put),
		cmocka_unit_test(test_many_servers),
		cmocka_unit_test(test_zero_capacity),
		cmocka_unit_test(test_walk),
	};
	return cmocka_run_group_tests_name("selcache", tests, setup, NULL);
}
