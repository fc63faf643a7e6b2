/* Unit tests: dsrc, slot-dird's connections per source: the cap per
 * source, the table bound, IPv6 sources by /64, IPv4-mapped as IPv4. */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "slot/addr.h"
#include "../../src/directory/dsrc.h"

static struct addr
key_of(const char *ip)
{
	struct sockaddr_storage ss;
	struct addr a;
	socklen_t len;

	memset(&ss, 0, sizeof(ss));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
		s6->sin6_family = AF_INET6;
		assert_int_equal(inet_pton(AF_INET6, ip, &s6->sin6_addr), 1);
		len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
		s4->sin_family = AF_INET;
		assert_int_equal(inet_pton(AF_INET, ip, &s4->sin_addr), 1);
		len = sizeof(*s4);
	}
	assert_int_equal(dsrc_key((struct sockaddr *)&ss, len, &a), 0);
	return a;
}

static void
test_cap_per_source(void **state)
{
	struct dsrc *s = dsrc_new(16, 3);
	struct addr a = key_of("192.0.2.1"), b = key_of("192.0.2.2");

	(void)state;
	assert_non_null(s);
	for (int i = 0; i < 3; i++)
		assert_int_equal(dsrc_take(s, &a), 0);
	assert_int_equal(dsrc_take(s, &a), -1);		/* a's share is taken */
	assert_int_equal(dsrc_count(s, &a), 3);
	assert_int_equal(dsrc_take(s, &b), 0);		/* b is not affected */
	assert_int_equal(dsrc_sources(s), 2);
	dsrc_put(s, &a);
	assert_int_equal(dsrc_take(s, &a), 0);		/* a freed one: one more */
	for (int i = 0; i < 3; i++)
		dsrc_put(s, &a);
	assert_int_equal(dsrc_count(s, &a), 0);
	assert_int_equal(dsrc_sources(s), 1);
	dsrc_put(s, &a);				/* unknown: no effect */
	assert_int_equal(dsrc_count(s, &b), 1);
	dsrc_free(s);
}

static void
test_table_bound(void **state)
{
	struct dsrc *s = dsrc_new(4, 8);
	struct addr k[5];
	char ip[32];

	(void)state;
	for (int i = 0; i < 5; i++) {
		snprintf(ip, sizeof(ip), "198.51.100.%d", i + 1);
		k[i] = key_of(ip);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(dsrc_take(s, &k[i]), 0);
	assert_int_equal(dsrc_take(s, &k[4]), -1);	/* every entry taken */
	assert_int_equal(dsrc_take(s, &k[0]), 0);	/* known ones still count */
	dsrc_put(s, &k[2]);
	assert_int_equal(dsrc_take(s, &k[4]), 0);	/* the freed entry is reused */
	assert_int_equal(dsrc_sources(s), 4);
	dsrc_free(s);
}

static void
test_ipv6_by_64_and_mapped(void **state)
{
	struct dsrc *s = dsrc_new(8, 2);
	struct addr a1 = key_of("2001:db8:1:2::1"), a2 = key_of("2001:db8:1:2:ffff::9"),
	    other = key_of("2001:db8:1:3::1"), m = key_of("::ffff:192.0.2.7"),
	    v4 = key_of("192.0.2.7");

	(void)state;
	assert_true(addr_eq(&a1, &a2));			/* one /64, one source */
	assert_false(addr_eq(&a1, &other));
	assert_true(addr_eq(&m, &v4));			/* mapped: IPv4 */
	assert_int_equal(dsrc_take(s, &a1), 0);
	assert_int_equal(dsrc_take(s, &a2), 0);
	assert_int_equal(dsrc_take(s, &a1), -1);
	assert_int_equal(dsrc_take(s, &other), 0);
	assert_int_equal(dsrc_take(s, &m), 0);
	assert_int_equal(dsrc_count(s, &v4), 1);
	dsrc_free(s);
}

static void
test_bad_args(void **state)
{
	struct sockaddr sa = { .sa_family = AF_UNIX };
	struct addr a;

	(void)state;
	assert_null(dsrc_new(0, 1));
	assert_null(dsrc_new(1, 0));
	assert_int_equal(dsrc_key(&sa, sizeof(sa), &a), -1);
	dsrc_free(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cap_per_source),
		cmocka_unit_test(test_table_bound),
		cmocka_unit_test(test_ipv6_by_64_and_mapped),
		cmocka_unit_test(test_bad_args),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
