/* The relay's directory link (src/relay/dirlink.c): the URL's host and the
 * endpoint a relay registers as. The calls themselves run against a real
 * slot-dird in tests/integration/test_relay_dir.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "../../src/relay/dirlink.h"

static void
host_is(const char *url, const char *host, const char *port)
{
	char h[64], p[16];

	if (dirlink_url_host(url, h, sizeof(h), p, sizeof(p)) != 0)
		fail_msg("%s: not parsed", url);
	assert_string_equal(h, host);
	assert_string_equal(p, port);
}

static void
test_url_host(void **state)
{
	char h[8], p[4];

	(void)state;
	host_is("http://192.0.2.53:7602/RPC2", "192.0.2.53", "7602");
	host_is("http://dir.example/RPC2", "dir.example", "80");
	host_is("https://dir.example", "dir.example", "443");
	host_is("http://[2001:db8::1]:7602/RPC2", "2001:db8::1", "7602");
	host_is("http://[2001:db8::1]/RPC2", "2001:db8::1", "80");
	host_is("http://d:1?x", "d", "1");
	assert_int_equal(dirlink_url_host("http://[2001:db8::1/RPC2", h, sizeof(h), p,
	    sizeof(p)), -1);
	assert_int_equal(dirlink_url_host("http:///RPC2", h, sizeof(h), p, sizeof(p)), -1);
	assert_int_equal(dirlink_url_host("http://d:/RPC2", h, sizeof(h), p, sizeof(p)), -1);
	assert_int_equal(dirlink_url_host("http://toolonghost/", h, sizeof(h), p, sizeof(p)), -1);
	assert_int_equal(dirlink_url_host("http://d:123456/", h, sizeof(h), p, sizeof(p)), -1);
}

static void
test_advertise(void **state)
{
	struct rconf c;
	struct endpoint e;
	char err[256], b[EP_STRLEN];

	(void)state;
	rconf_defaults(&c);
	/* Wildcard listener: the address towards the directory. */
	assert_int_equal(dirlink_advertise(&c, "http://127.0.0.1:7602/RPC2", &e, err,
	    sizeof(err)), 0);
	assert_string_equal(ep_fmt(&e, b), "127.0.0.1:7600");
	/* A specific listener is what we register. */
	assert_int_equal(ep_parse("192.0.2.9:7700", 0, &c.control_listen), 0);
	assert_int_equal(dirlink_advertise(&c, "http://127.0.0.1/", &e, err, sizeof(err)), 0);
	assert_string_equal(ep_fmt(&e, b), "192.0.2.9:7700");
	/* advertise wins over both (a relay behind a port mapping). */
	assert_int_equal(ep_parse("198.51.100.1:17600", 0, &c.advertise), 0);
	assert_int_equal(dirlink_advertise(&c, "http://127.0.0.1/", &e, err, sizeof(err)), 0);
	assert_string_equal(ep_fmt(&e, b), "198.51.100.1:17600");
	/* Nothing to derive from. */
	rconf_defaults(&c);
	assert_int_equal(dirlink_advertise(&c, "http://no-such-host.invalid/", &e, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "no-such-host.invalid"));
	rconf_free(&c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_host),
		cmocka_unit_test(test_advertise),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
