/* The rules of learned initial windows (src/relay/iwlearn.c): what a
 * transfer teaches, what loss and age take back, and that the kernel's
 * table (a recording sink here) follows every change. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "../../src/relay/iwlearn.h"

/* The sink: the kernel's table as the daemon's would be. */
#define NREC 64
struct rec {
	struct { struct addr p; unsigned plen; uint32_t iw; } e[NREC];
	size_t n;
	unsigned sets, dels;
};

static int
rec_find(struct rec *r, const struct addr *p, unsigned plen)
{
	for (size_t i = 0; i < r->n; i++)
		if (addr_eq(&r->e[i].p, p) && r->e[i].plen == plen)
			return (int)i;
	return -1;
}

static void
rec_set(void *arg, const struct iwl_entry *e)
{
	struct rec *r = arg;
	int i = rec_find(r, &e->prefix, e->plen);

	r->sets++;
	if (i < 0) {
		assert_true(r->n < NREC);
		i = (int)r->n++;
	}
	r->e[i].p = e->prefix;
	r->e[i].plen = e->plen;
	r->e[i].iw = e->iw;
}

static void
rec_del(void *arg, const struct iwl_entry *e)
{
	struct rec *r = arg;
	int i = rec_find(r, &e->prefix, e->plen);

	r->dels++;
	assert_true(i >= 0);	/* never told to delete what it was not given */
	r->e[i] = r->e[--r->n];
}

/* The window the kernel would give a in the recorded table, 0 if none. */
static uint32_t
rec_iw(struct rec *r, const char *a, unsigned plen)
{
	struct addr x, p;

	assert_int_equal(addr_parse(a, &x), 0);
	iwl_prefix(&x, plen, &p);
	int i = rec_find(r, &p, plen);
	return i < 0 ? 0 : r->e[i].iw;
}

static const struct iwl_conf CONF = {
	.cap = 40, .prefix4 = 24, .prefix6 = 48, .expiry_ms = 60000, .max_prefixes = 8,
};

static struct iwlearn *
mk(struct rec *r, const struct iwl_conf *c)
{
	struct iwl_sink s = { rec_set, rec_del, r };

	memset(r, 0, sizeof(*r));
	struct iwlearn *l = iwl_new(c ? c : &CONF, &s);
	assert_non_null(l);
	return l;
}

/* A transfer to a: cwnd at the end, segments delivered (of 1000 bytes),
 * retransmissions. */
static enum iwl_result
xfer(struct iwlearn *l, const char *a, uint32_t cwnd, uint64_t segs, uint32_t retrans,
    uint64_t now)
{
	struct iwl_sample s = { .snd_cwnd = cwnd, .snd_mss = 1000,
		.bytes_acked = segs * 1000, .total_retrans = retrans, .min_rtt_us = 40000 };

	assert_int_equal(addr_parse(a, &s.dst), 0);
	return iwl_learn(l, &s, now);
}

static uint32_t
look(struct iwlearn *l, const char *a)
{
	struct addr x;

	assert_int_equal(addr_parse(a, &x), 0);
	return iwl_lookup(l, &x);
}

static void
test_prefix(void **state)
{
	struct addr a, p;
	char b[ADDR_STRLEN];
	(void)state;

	assert_int_equal(addr_parse("10.1.2.3", &a), 0);
	iwl_prefix(&a, 24, &p);
	assert_string_equal(addr_fmt(&p, b), "10.1.2.0");
	iwl_prefix(&a, 12, &p);
	assert_string_equal(addr_fmt(&p, b), "10.0.0.0");
	iwl_prefix(&a, 32, &p);
	assert_string_equal(addr_fmt(&p, b), "10.1.2.3");
	assert_int_equal(addr_parse("2001:db8:abcd:1234::7", &a), 0);
	iwl_prefix(&a, 48, &p);
	assert_string_equal(addr_fmt(&p, b), "2001:db8:abcd::");
	iwl_prefix(&a, 52, &p);
	assert_string_equal(addr_fmt(&p, b), "2001:db8:abcd:1000::");
}

static void
test_clean_transfer_teaches_its_window(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	/* cwnd 30 after 70 segments without loss: 30. */
	assert_int_equal(xfer(l, "10.1.2.3", 30, 70, 0, 1000), IWL_LEARNED);
	assert_int_equal(look(l, "10.1.2.3"), 30);
	/* The whole /24, not one host; not the next /24. */
	assert_int_equal(look(l, "10.1.2.200"), 30);
	assert_int_equal(look(l, "10.1.3.3"), 0);
	assert_int_equal(rec_iw(&r, "10.1.2.0", 24), 30);
	assert_int_equal(r.n, 1);
	assert_int_equal(iwl_counters(l)->learned, 1);
	iwl_free(l);
	assert_int_equal(r.n, 0);	/* freeing empties the kernel's table */
}

static void
test_window_never_beyond_what_was_delivered(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	/* cwnd 35 but only 20 segments delivered: 20 went out cleanly, not 35. */
	assert_int_equal(xfer(l, "10.1.2.3", 35, 20, 0, 1000), IWL_LEARNED);
	assert_int_equal(look(l, "10.1.2.3"), 20);
	iwl_free(l);
}

static void
test_short_transfers_teach_nothing(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	/* Within the kernel's own initial window: nothing to learn. */
	assert_int_equal(xfer(l, "10.1.2.3", 10, 500, 0, 1000), IWL_IGNORED);
	assert_int_equal(xfer(l, "10.1.2.3", 80, 10, 0, 1000), IWL_IGNORED);
	assert_int_equal(xfer(l, "10.1.2.3", 80, 0, 0, 1000), IWL_IGNORED);
	assert_int_equal(look(l, "10.1.2.3"), 0);
	assert_int_equal(r.sets, 0);
	assert_int_equal(iwl_counters(l)->ignored, 3);
	assert_int_equal(iwl_counters(l)->samples, 3);
	iwl_free(l);
}

static void
test_cap(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	assert_int_equal(xfer(l, "10.1.2.3", 400, 800, 0, 1000), IWL_LEARNED);
	assert_int_equal(look(l, "10.1.2.3"), 40);
	assert_int_equal(rec_iw(&r, "10.1.2.0", 24), 40);
	iwl_free(l);
}

static void
test_mean_of_old_and_new(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	xfer(l, "10.1.2.3", 20, 100, 0, 1000);
	/* One lucky transfer moves it half way: (20 + 40) / 2. */
	xfer(l, "10.1.2.9", 40, 100, 0, 2000);
	assert_int_equal(look(l, "10.1.2.3"), 30);
	assert_int_equal(rec_iw(&r, "10.1.2.0", 24), 30);
	/* A smaller clean one pulls it down the same way, rounding up. */
	xfer(l, "10.1.2.9", 15, 100, 0, 3000);
	assert_int_equal(look(l, "10.1.2.3"), 23);
	iwl_free(l);
}

static void
test_loss_halves_then_forgets(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	/* Loss where nothing was learned: nothing to take back. */
	assert_int_equal(xfer(l, "10.1.2.3", 50, 100, 3, 500), IWL_IGNORED);
	assert_int_equal(r.sets, 0);
	xfer(l, "10.1.2.3", 40, 100, 0, 1000);
	/* A lossy transfer never teaches, whatever its window: it halves. */
	assert_int_equal(xfer(l, "10.1.2.3", 200, 1000, 1, 2000), IWL_SHRUNK);
	assert_int_equal(look(l, "10.1.2.3"), 20);
	assert_int_equal(rec_iw(&r, "10.1.2.0", 24), 20);
	assert_int_equal(iwl_counters(l)->shrunk, 1);
	/* 20 / 2 is the kernel's own: the prefix is forgotten, and the
	 * kernel's table told. */
	assert_int_equal(xfer(l, "10.1.2.3", 30, 100, 2, 3000), IWL_FORGOTTEN);
	assert_int_equal(look(l, "10.1.2.3"), 0);
	assert_int_equal(r.n, 0);
	assert_int_equal(r.dels, 1);
	iwl_free(l);
}

static void
test_expiry(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	xfer(l, "10.1.2.3", 30, 100, 0, 1000);
	xfer(l, "10.9.9.9", 30, 100, 0, 30000);
	assert_int_equal(iwl_expire(l, 60999), 0);
	/* The first is 60 s old: gone; the second stays. */
	assert_int_equal(iwl_expire(l, 61000), 1);
	assert_int_equal(look(l, "10.1.2.3"), 0);
	assert_int_equal(look(l, "10.9.9.9"), 30);
	assert_int_equal(r.n, 1);
	/* Learning again renews it. */
	xfer(l, "10.9.9.9", 30, 100, 0, 80000);
	assert_int_equal(iwl_expire(l, 100000), 0);
	assert_int_equal(iwl_expire(l, 140000), 1);
	assert_int_equal(iwl_count(l), 0);
	assert_int_equal(r.n, 0);
	assert_int_equal(iwl_counters(l)->expired, 2);
	iwl_free(l);
}

static void
test_room_evicts_least_recently_updated(void **state)
{
	struct rec r;
	struct iwl_conf c = CONF;
	char a[32];
	(void)state;

	c.max_prefixes = 3;
	struct iwlearn *l = mk(&r, &c);
	for (int i = 1; i <= 3; i++) {
		snprintf(a, sizeof(a), "10.0.%d.1", i);
		xfer(l, a, 20 + i, 100, 0, (uint64_t)i * 1000);
	}
	/* 10.0.1.0/24 is updated again: 10.0.2.0/24 is now the oldest. */
	xfer(l, "10.0.1.1", 21, 100, 0, 5000);
	xfer(l, "10.0.4.1", 24, 100, 0, 6000);
	assert_int_equal(iwl_count(l), 3);
	assert_int_equal(look(l, "10.0.2.1"), 0);
	assert_int_equal(look(l, "10.0.1.1"), 21);
	assert_int_equal(look(l, "10.0.4.1"), 24);
	assert_int_equal(r.n, 3);
	iwl_free(l);
}

static void
test_ipv6_prefix(void **state)
{
	struct rec r;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	xfer(l, "2001:db8:1:2::5", 25, 100, 0, 1000);
	assert_int_equal(look(l, "2001:db8:1:ffff::1"), 25);	/* the same /48 */
	assert_int_equal(look(l, "2001:db8:2::1"), 0);
	assert_int_equal(rec_iw(&r, "2001:db8:1::", 48), 25);
	/* The families never mix. */
	assert_int_equal(look(l, "32.1.13.184"), 0);
	iwl_free(l);
}

static void
test_reconfigure(void **state)
{
	struct rec r;
	struct iwl_conf c = CONF;
	struct iwlearn *l = mk(&r, NULL);
	(void)state;

	xfer(l, "10.1.2.3", 40, 100, 0, 1000);
	xfer(l, "10.1.3.3", 20, 100, 0, 1000);
	/* A lower cap lowers the windows above it, in the kernel too. */
	c.cap = 30;
	iwl_set_conf(l, &c);
	assert_int_equal(look(l, "10.1.2.3"), 30);
	assert_int_equal(rec_iw(&r, "10.1.2.0", 24), 30);
	assert_int_equal(look(l, "10.1.3.3"), 20);
	/* Another prefix length: what was learned per /24 means nothing. */
	c.prefix4 = 16;
	iwl_set_conf(l, &c);
	assert_int_equal(iwl_count(l), 0);
	assert_int_equal(r.n, 0);
	xfer(l, "10.1.2.3", 25, 100, 0, 2000);
	assert_int_equal(look(l, "10.1.200.1"), 25);
	assert_int_equal(rec_iw(&r, "10.1.0.0", 16), 25);
	iwl_flush(l);
	assert_int_equal(r.n, 0);
	iwl_free(l);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_prefix),
		cmocka_unit_test(test_clean_transfer_teaches_its_window),
		cmocka_unit_test(test_window_never_beyond_what_was_delivered),
		cmocka_unit_test(test_short_transfers_teach_nothing),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_mean_of_old_and_new),
		cmocka_unit_test(test_loss_halves_then_forgets),
		cmocka_unit_test(test_expiry),
		cmocka_unit_test(test_room_evicts_least_recently_updated),
		cmocka_unit_test(test_ipv6_prefix),
		cmocka_unit_test(test_reconfigure),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
