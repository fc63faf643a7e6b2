/* The table-driven key parser the three daemons share (confkeys.h): each
 * common kind into its member, the bounds, the hook, and the errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "slot/addr.h"
#include "slot/conf.h"
#include "slot/confkeys.h"
#include "slot/log.h"

struct t {
	char s[8];
	int level, auth;
	uint16_t u16;
	uint32_t u32;
	uint64_t u64, ms, us, off, size, sizeoff;
	double d;
	bool b;
	struct endpoint ep, epo;
	struct portset ports;
	struct cidr_list cidrs;
	struct conf_urls urls;
	uint32_t bit, mask, mode;
	int own;
};

#define F(sec, name, kind, m) CONF_KEY(struct t, sec, name, kind, m)
static const struct conf_key keys[] = {
	{ F("a", "s", CK_STR, s) },
	{ F("a", "level", CK_LEVEL, level) },
	{ F("a", "auth", CK_AUTHMODE, auth) },
	{ F("a", "u16", CK_UINT, u16), .min = 1, .max = 65535 },
	{ F("a", "u32", CK_UINT, u32), .min = 0, .max = 100 },
	{ F("a", "u64", CK_UINT, u64), .min = 0, .max = UINT64_MAX },
	{ F("b", "ms", CK_MS, ms), .min = 100, .max = 5000 },
	{ F("b", "us", CK_US, us), .min = 1, .max = 10 },
	{ F("b", "off", CK_MS_OFF, off), .min = 1000, .max = 5000 },
	{ F("b", "size", CK_SIZE, size), .min = 4096, .max = 1 << 20 },
	{ F("b", "sizeoff", CK_SIZE_OFF, sizeoff), .min = 4096, .max = 1 << 20 },
	{ F("b", "d", CK_DOUBLE, d), .dmin = 1, .dmax = 2 },
	{ F("b", "b", CK_BOOL, b) },
	{ F("c", "ep", CK_EP, ep) },
	{ F("c", "epo", CK_EP_OPT, epo) },
	{ F("c", "ports", CK_PORTS, ports) },
	{ F("c", "cidrs", CK_CIDRS, cidrs) },
	{ F("c", "urls", CK_URLS, urls) },
	{ F("d", "bit", CK_BIT, bit) },
	{ F("d", "mask", CK_MASK, mask) },
	{ F("d", "mode", CK_FMODE, mode) },
	{ F("d", "own", CK_CUSTOM, own), .custom = 7 },
};
#undef F

static int
own(void *obj, const struct conf_key *k, const char *value, char *sub, size_t sublen)
{
	struct t *t = obj;

	if (k->custom != 7 || strcmp(value, "yes!") != 0) {
		snprintf(sub, sublen, "expected yes!");
		return -1;
	}
	t->own = 42;
	return 0;
}

static int
set(struct t *t, const char *sec, const char *name, const char *value, char *err)
{
	return conf_keys_set(keys, sizeof(keys) / sizeof(keys[0]), own, t, sec, name, value,
	    err, 256);
}

static void
ok(struct t *t, const char *sec, const char *name, const char *value)
{
	char err[256] = "";

	if (set(t, sec, name, value, err) != 0)
		fail_msg("[%s] %s = %s: %s", sec, name, value, err);
}

static void
bad(struct t *t, const char *sec, const char *name, const char *value, const char *want)
{
	char err[256] = "";

	if (set(t, sec, name, value, err) != -1)
		fail_msg("[%s] %s = %s was taken", sec, name, value);
	if (strstr(err, want) == NULL)
		fail_msg("\"%s\" lacks \"%s\"", err, want);
}

static void
test_each_kind(void **state)
{
	struct t t;
	struct endpoint ep;
	(void)state;

	memset(&t, 0, sizeof(t));
	ok(&t, "a", "s", "abc");
	assert_string_equal(t.s, "abc");
	ok(&t, "a", "level", "debug");
	assert_int_equal(t.level, SLOG_DEBUG);
	ok(&t, "a", "u16", "65535");
	assert_int_equal(t.u16, 65535);
	ok(&t, "a", "u32", "100");
	assert_int_equal(t.u32, 100);
	ok(&t, "a", "u64", "18446744073709551615");
	assert_true(t.u64 == UINT64_MAX);
	ok(&t, "b", "ms", "2s");
	assert_int_equal(t.ms, 2000);
	ok(&t, "b", "us", "5ms");
	assert_int_equal(t.us, 5000);
	ok(&t, "b", "off", "off");
	assert_int_equal(t.off, 0);
	ok(&t, "b", "off", "3s");
	assert_int_equal(t.off, 3000);
	ok(&t, "b", "size", "64k");
	assert_int_equal(t.size, 65536);
	ok(&t, "b", "sizeoff", "128k");
	assert_int_equal(t.sizeoff, 131072);
	ok(&t, "b", "sizeoff", "off");
	assert_int_equal(t.sizeoff, 0);
	ok(&t, "b", "sizeoff", "64k");
	ok(&t, "b", "sizeoff", "0");
	assert_int_equal(t.sizeoff, 0);
	ok(&t, "b", "d", "1.5");
	assert_true(t.d == 1.5);
	ok(&t, "b", "b", "yes");
	assert_true(t.b);
	ok(&t, "c", "ep", "192.0.2.1:80");
	assert_int_equal(ep_parse("192.0.2.1:80", 0, &ep), 0);
	assert_true(ep_eq(&t.ep, &ep));
	ok(&t, "c", "epo", "[2001:db8::1]:9");
	assert_int_equal(t.epo.port, 9);
	ok(&t, "c", "epo", "");
	assert_int_equal(t.epo.addr.family, 0);
	ok(&t, "c", "ports", "80, 8000-8001");
	assert_true(portset_has(&t.ports, 8001) && !portset_has(&t.ports, 81));
	ok(&t, "c", "cidrs", "10.0.0.0/8, 2001:db8::/32");
	assert_int_equal(t.cidrs.n, 2);
	ok(&t, "c", "cidrs", "");	/* replaced, not added to */
	assert_int_equal(t.cidrs.n, 0);
	ok(&t, "c", "urls", "http://192.0.2.1:7602/RPC2");
	assert_int_equal(t.urls.n, 1);
	ok(&t, "d", "bit", "0x100");
	assert_int_equal(t.bit, 0x100);
	ok(&t, "d", "mask", "0x0ff0");
	assert_int_equal(t.mask, 0xff0);
	ok(&t, "d", "mode", "0640");
	assert_int_equal(t.mode, 0640);
	ok(&t, "d", "own", "yes!");
	assert_int_equal(t.own, 42);
	cidr_list_free(&t.cidrs);
}

static void
test_errors_say_what_was_expected(void **state)
{
	struct t t;
	(void)state;

	memset(&t, 0, sizeof(t));
	bad(&t, "z", "s", "x", "unknown section [z]");
	bad(&t, "a", "zz", "x", "unknown key 'zz' in section [a]");
	bad(&t, "a", "s", "too long for it", "[a] s = too long for it: ");
	bad(&t, "a", "level", "loud", "[a] level = loud: expected error, warn, info or debug");
	bad(&t, "a", "auth", "none", "expected identity or shared");
	bad(&t, "a", "u16", "0", "out of range [1, 65535]");
	bad(&t, "a", "u32", "101", "out of range [0, 100]");
	bad(&t, "b", "ms", "10ms", "must be between 100 ms and 5000 ms");
	bad(&t, "b", "off", "10ms", "must be 0 (off) or between 1000 ms and 5000 ms");
	bad(&t, "b", "size", "1k", "[b] size = 1k: ");
	bad(&t, "b", "size", "off", "[b] size = off: ");
	bad(&t, "b", "sizeoff", "1k", "out of range [4096, 1048576] bytes; or off");
	bad(&t, "b", "d", "3", "[b] d = 3: ");
	bad(&t, "b", "b", "maybe", "[b] b = maybe: ");
	bad(&t, "c", "ep", "", "expected address:port");
	bad(&t, "c", "epo", "x", "expected address:port, or nothing");
	bad(&t, "c", "ports", "80, 70000", "70000: expected ports (1 to 65535), ranges LOW-HIGH "
	    "or all, separated by commas");
	bad(&t, "c", "cidrs", "10.0.0.0/33", "10.0.0.0/33: expected addresses or networks");
	bad(&t, "d", "bit", "0x3", "must be exactly one bit");
	bad(&t, "d", "bit", "-1", "expected a 32-bit number");
	bad(&t, "d", "mask", "0x101", "must be non-zero contiguous bits");
	bad(&t, "d", "mode", "0800", "expected an octal file mode");
	bad(&t, "d", "own", "no", "[d] own = no: expected yes!");
	/* A refused value leaves the member as it was. */
	assert_int_equal(t.u16, 0);
	assert_int_equal(t.ports.bits[80 / 8], 0);
	assert_int_equal(t.cidrs.n, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_kind),
		cmocka_unit_test(test_errors_say_what_was_expected),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
