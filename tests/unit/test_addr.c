/* Unit tests: addr (addresses, endpoints, CIDR, port sets) and clock. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>

#include "slot/addr.h"
#include "slot/clock.h"

static struct addr
A(const char *s)
{
	struct addr a;

	if (addr_parse(s, &a) == -1)
		fail_msg("addr_parse(\"%s\") failed", s);
	return a;
}

static void
test_addr_parse_v4(void **state)
{
	struct addr a;
	char buf[ADDR_STRLEN];
	uint8_t zero[12] = { 0 };

	(void)state;
	assert_int_equal(addr_parse("192.0.2.1", &a), 0);
	assert_int_equal(a.family, AF_INET);
	assert_int_equal(a.bytes[0], 192);
	assert_int_equal(a.bytes[3], 1);
	/* Unused bytes are zero so memcmp works. */
	assert_memory_equal(a.bytes + 4, zero, sizeof(zero));
	assert_string_equal(addr_fmt(&a, buf), "192.0.2.1");
	assert_int_equal(addr_parse("0.0.0.0", &a), 0);
	assert_int_equal(addr_parse("255.255.255.255", &a), 0);
	assert_string_equal(addr_fmt(&a, buf), "255.255.255.255");
}

static void
test_addr_parse_v6(void **state)
{
	struct addr a;
	char buf[ADDR_STRLEN];

	(void)state;
	assert_int_equal(addr_parse("2001:DB8::1", &a), 0);
	assert_int_equal(a.family, AF_INET6);
	assert_int_equal(a.bytes[0], 0x20);
	assert_int_equal(a.bytes[15], 1);
	assert_string_equal(addr_fmt(&a, buf), "2001:db8::1");
	assert_int_equal(addr_parse("::", &a), 0);
	assert_string_equal(addr_fmt(&a, buf), "::");
	assert_int_equal(addr_parse("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
	    &a), 0);
	assert_int_equal(addr_parse("::1.2.3.4", &a), 0);	/* compatible, not mapped */
	assert_int_equal(a.family, AF_INET6);
}

static void
test_addr_common_bits(void **state)
{
	struct addr a = A("192.0.2.7"), b = A("192.0.2.200"), c = A("192.0.3.7");
	struct addr d = A("2001:db8::1"), e = A("2001:db8:0:1::1");
	(void)state;

	assert_int_equal(addr_common_bits(&a, &a), 32);
	assert_int_equal(addr_common_bits(&a, &b), 24);	/* 7 = 00000111, 200 = 11001000 */
	assert_int_equal(addr_common_bits(&a, &c), 23);	/* 2 = 00000010, 3 = 00000011 */
	assert_int_equal(addr_common_bits(&d, &d), 128);
	assert_int_equal(addr_common_bits(&d, &e), 63);
	assert_int_equal(addr_common_bits(&a, &d), 0);		/* families differ */
}

static void
test_addr_source(void **state)
{
	struct addr a, s, want;
	(void)state;

	assert_int_equal(addr_parse("2001:db8:1:2:3:4:5:6", &a), 0);
	assert_int_equal(addr_parse("2001:db8:1:2::", &want), 0);
	s = addr_source(&a);
	assert_true(addr_eq(&s, &want));
	assert_int_equal(addr_parse("192.0.2.7", &a), 0);
	s = addr_source(&a);
	assert_true(addr_eq(&s, &a));
	assert_int_equal(addr_parse("::ffff:192.0.2.7", &a), 0);
	s = addr_source(&a);
	assert_true(addr_eq(&s, &a));
}

static void
test_addr_parse_mapped(void **state)
{
	struct addr a, b;
	char buf[ADDR_STRLEN];

	(void)state;
	assert_int_equal(addr_parse("::ffff:192.0.2.7", &a), 0);
	assert_int_equal(a.family, AF_INET);
	assert_string_equal(addr_fmt(&a, buf), "192.0.2.7");
	assert_int_equal(addr_parse("::FFFF:c000:0207", &b), 0);
	assert_true(addr_eq(&a, &b));
	assert_memory_equal(&a, &b, sizeof(a));
	/* Same address, same hash, whichever way it was written. */
	b = A("192.0.2.7");
	assert_memory_equal(&a, &b, sizeof(a));
	/* ::fffe:... is not mapped. */
	assert_int_equal(addr_parse("::fffe:192.0.2.7", &a), 0);
	assert_int_equal(a.family, AF_INET6);
}

static void
test_addr_parse_bad(void **state)
{
	static const char *bad[] = {
		"", " ", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1.2.3.4 ",
		" 1.2.3.4", "1.2.3.4x", "01.2.3.4", "1.2.3.-1", "1..2.3",
		"0x1.2.3.4", "1.2.3.4/32", "1.2.3.4:80", "[::1]", ":::",
		"1::2::3", "2001:db8::g", "fe80::1%eth0", "12345::",
		"1:2:3:4:5:6:7:8:9", "::ffff:1.2.3", "localhost",
		"0000:0000:0000:0000:0000:0000:0000:0000:0000:0000:0001",
	};
	struct addr a;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (addr_parse(bad[i], &a) != -1)
			fail_msg("addr_parse accepted \"%s\"", bad[i]);
	assert_int_equal(addr_parse(NULL, &a), -1);
}

static void
test_ep_parse_good(void **state)
{
	struct endpoint e;
	char buf[EP_STRLEN];

	(void)state;
	assert_int_equal(ep_parse("1.2.3.4:80", 0, &e), 0);
	assert_int_equal(e.addr.family, AF_INET);
	assert_int_equal(e.port, 80);
	assert_string_equal(ep_fmt(&e, buf), "1.2.3.4:80");

	assert_int_equal(ep_parse("[2001:db8::1]:65535", 0, &e), 0);
	assert_int_equal(e.addr.family, AF_INET6);
	assert_int_equal(e.port, 65535);
	assert_string_equal(ep_fmt(&e, buf), "[2001:db8::1]:65535");

	assert_int_equal(ep_parse("1.2.3.4:1", 0, &e), 0);
	assert_int_equal(e.port, 1);

	/* Default port where the port is omitted. */
	assert_int_equal(ep_parse("1.2.3.4", 7000, &e), 0);
	assert_int_equal(e.port, 7000);
	assert_int_equal(ep_parse("2001:db8::1", 7000, &e), 0);
	assert_int_equal(e.addr.family, AF_INET6);
	assert_int_equal(e.port, 7000);
	assert_int_equal(ep_parse("[2001:db8::1]", 7000, &e), 0);
	assert_int_equal(e.port, 7000);
	/* An explicit port wins over the default. */
	assert_int_equal(ep_parse("[::1]:22", 7000, &e), 0);
	assert_int_equal(e.port, 22);

	/* Mapped addresses come out as IPv4, formatted without brackets. */
	assert_int_equal(ep_parse("[::ffff:10.1.2.3]:443", 0, &e), 0);
	assert_int_equal(e.addr.family, AF_INET);
	assert_string_equal(ep_fmt(&e, buf), "10.1.2.3:443");

	/* The longest form fits EP_STRLEN. */
	assert_int_equal(ep_parse("[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535",
	    0, &e), 0);
	assert_string_equal(ep_fmt(&e, buf),
	    "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535");
}

static void
test_ep_parse_bad(void **state)
{
	static const char *bad[] = {
		"", ":", ":80", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536",
		"1.2.3.4:99999", "1.2.3.4:123456", "1.2.3.4:-1", "1.2.3.4:+80",
		"1.2.3.4: 80", "1.2.3.4:80 ", "1.2.3.4:80x", "1.2.3.4:0x50",
		"1.2.3.4:80:81", "[::1", "[::1]:", "[::1]80", "[::1]:0",
		"[::1]:65536", "[::1]:80x", "[::1]x", "[]:80", "[1.2.3.4]:80",
		"[[::1]]:80", "::1]:80", "host:80", "1.2.3:80", "[fe80::1%lo]:80",
		" 1.2.3.4:80",
	};
	struct endpoint e;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (ep_parse(bad[i], 0, &e) != -1)
			fail_msg("ep_parse accepted \"%s\"", bad[i]);
		if (ep_parse(bad[i], 80, &e) != -1)
			fail_msg("ep_parse accepted \"%s\" with default", bad[i]);
	}
	/* Without a default, the port is required. */
	assert_int_equal(ep_parse("1.2.3.4", 0, &e), -1);
	assert_int_equal(ep_parse("2001:db8::1", 0, &e), -1);
	assert_int_equal(ep_parse("[2001:db8::1]", 0, &e), -1);
	assert_int_equal(ep_parse(NULL, 80, &e), -1);
}

static void
test_ep_parse_keeps_out_on_error(void **state)
{
	struct endpoint e, before;

	(void)state;
	assert_int_equal(ep_parse("9.9.9.9:9", 0, &e), 0);
	before = e;
	assert_int_equal(ep_parse("1.2.3.4:0", 0, &e), -1);
	assert_true(ep_eq(&e, &before));
}

static void
test_eq(void **state)
{
	struct endpoint a, b;

	(void)state;
	assert_int_equal(ep_parse("1.2.3.4:80", 0, &a), 0);
	assert_int_equal(ep_parse("1.2.3.4:81", 0, &b), 0);
	assert_true(addr_eq(&a.addr, &b.addr));
	assert_false(ep_eq(&a, &b));
	b.port = 80;
	assert_true(ep_eq(&a, &b));
	assert_int_equal(ep_parse("[::ffff:1.2.3.5]:80", 0, &b), 0);
	assert_false(ep_eq(&a, &b));
	/* The same bytes in another family are another address. */
	b.addr = a.addr;
	b.addr.family = AF_INET6;
	assert_false(addr_eq(&a.addr, &b.addr));
	/* ep_cmp: a total order agreeing with ep_eq. */
	assert_true(ep_cmp(&a, &b) != 0 && ep_cmp(&a, &b) == -ep_cmp(&b, &a));
	assert_int_equal(ep_parse("1.2.3.4:81", 0, &b), 0);
	assert_true(ep_cmp(&a, &b) < 0);
	assert_int_equal(ep_parse("1.2.3.5:1", 0, &b), 0);
	assert_true(ep_cmp(&a, &b) < 0);
	assert_int_equal(ep_parse("1.2.3.4:80", 0, &b), 0);
	assert_int_equal(ep_cmp(&a, &b), 0);
}

static void
test_hash(void **state)
{
	uint8_t k1[16], k2[16];
	struct addr a = A("198.51.100.1"), b = A("198.51.100.2");
	struct endpoint e1, e2;

	(void)state;
	addr_hash_key(k1);
	addr_hash_key(k2);
	assert_memory_not_equal(k1, k2, 16);
	assert_int_equal(addr_hash(&a, k1), addr_hash(&a, k1));
	assert_int_not_equal(addr_hash(&a, k1), addr_hash(&b, k1));
	/* Another key gives another hash. */
	assert_int_not_equal(addr_hash(&a, k1), addr_hash(&a, k2));

	e1.addr = a;
	e1.port = 80;
	e2 = e1;
	assert_int_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	e2.port = 81;
	assert_int_not_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	/* Both port bytes count, in either position. */
	e2.port = 0x5000;
	assert_int_not_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	e1.port = 0x0150;
	assert_int_not_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	e2.port = 0x0250;
	assert_int_not_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	/* The family counts too. */
	e2 = e1;
	e2.addr.family = AF_INET6;
	assert_int_not_equal(ep_hash(&e1, k1), ep_hash(&e2, k1));
	assert_int_not_equal(addr_hash(&e1.addr, k1), addr_hash(&e2.addr, k1));

	/* Known answer: SipHash-2-4 over family byte + 16 address bytes. */
	{
		uint8_t in[17] = { AF_INET, 198, 51, 100, 1 };
		uint8_t out[8];
		uint64_t h;

		crypto_shorthash(out, in, sizeof(in), k1);
		memcpy(&h, out, 8);
		assert_int_equal(addr_hash(&a, k1), h);
	}
}

static void
test_sockaddr(void **state)
{
	struct endpoint e, back;
	struct sockaddr_storage ss;
	struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
	struct sockaddr_un sun;
	socklen_t len;

	(void)state;
	assert_int_equal(ep_parse("192.0.2.9:8080", 0, &e), 0);
	len = ep_to_sockaddr(&e, &ss);
	assert_int_equal(len, sizeof(struct sockaddr_in));
	assert_int_equal(sin->sin_family, AF_INET);
	assert_int_equal(ntohs(sin->sin_port), 8080);
	assert_int_equal(ntohl(sin->sin_addr.s_addr), 0xc0000209);
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&ss, len, &back), 0);
	assert_true(ep_eq(&e, &back));

	assert_int_equal(ep_parse("[2001:db8::9]:53", 0, &e), 0);
	len = ep_to_sockaddr(&e, &ss);
	assert_int_equal(len, sizeof(struct sockaddr_in6));
	assert_int_equal(sin6->sin6_family, AF_INET6);
	assert_int_equal(ntohs(sin6->sin6_port), 53);
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&ss, len, &back), 0);
	assert_true(ep_eq(&e, &back));

	/* A mapped sockaddr_in6 (dual-stack accept) comes back as IPv4. */
	memset(&ss, 0, sizeof(ss));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(443);
	assert_int_equal(inet_pton(AF_INET6, "::ffff:203.0.113.5",
	    &sin6->sin6_addr), 1);
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&ss,
	    sizeof(*sin6), &back), 0);
	assert_int_equal(back.addr.family, AF_INET);
	assert_int_equal(ep_parse("203.0.113.5:443", 0, &e), 0);
	assert_memory_equal(&e, &back, sizeof(e));

	/* Short lengths and other families are refused. */
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&ss,
	    sizeof(struct sockaddr_in), &back), -1);
	memset(&sun, 0, sizeof(sun));
	sun.sun_family = AF_UNIX;
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&sun,
	    sizeof(sun), &back), -1);
	assert_int_equal(errno, EAFNOSUPPORT);

	/* An endpoint of no family converts to nothing. */
	memset(&e, 0, sizeof(e));
	assert_int_equal(ep_to_sockaddr(&e, &ss), 0);
}

struct class_case {
	const char *a;
	unsigned cls;
};

static void
test_classify(void **state)
{
	static const struct class_case cases[] = {
		/* 0/8 */
		{ "0.0.0.0", ADDR_C_UNSPECIFIED },
		{ "0.255.255.255", ADDR_C_UNSPECIFIED },
		{ "1.0.0.0", 0 },
		/* 10/8 */
		{ "9.255.255.255", 0 },
		{ "10.0.0.0", ADDR_C_PRIVATE },
		{ "10.255.255.255", ADDR_C_PRIVATE },
		{ "11.0.0.0", 0 },
		/* 100.64/10 */
		{ "100.63.255.255", 0 },
		{ "100.64.0.0", ADDR_C_PRIVATE },
		{ "100.127.255.255", ADDR_C_PRIVATE },
		{ "100.128.0.0", 0 },
		/* 127/8 */
		{ "126.255.255.255", 0 },
		{ "127.0.0.0", ADDR_C_LOOPBACK },
		{ "127.0.0.1", ADDR_C_LOOPBACK },
		{ "127.255.255.255", ADDR_C_LOOPBACK },
		{ "128.0.0.0", 0 },
		/* 169.254/16 */
		{ "169.253.255.255", 0 },
		{ "169.254.0.0", ADDR_C_LINKLOCAL },
		{ "169.254.255.255", ADDR_C_LINKLOCAL },
		{ "169.255.0.0", 0 },
		/* 172.16/12 */
		{ "172.15.255.255", 0 },
		{ "172.16.0.0", ADDR_C_PRIVATE },
		{ "172.31.255.255", ADDR_C_PRIVATE },
		{ "172.32.0.0", 0 },
		/* 192.0.2/24 */
		{ "192.0.1.255", 0 },
		{ "192.0.2.0", ADDR_C_RESERVED },
		{ "192.0.2.255", ADDR_C_RESERVED },
		{ "192.0.3.0", 0 },
		/* 192.168/16 */
		{ "192.167.255.255", 0 },
		{ "192.168.0.0", ADDR_C_PRIVATE },
		{ "192.168.255.255", ADDR_C_PRIVATE },
		{ "192.169.0.0", 0 },
		/* 198.18/15 */
		{ "198.17.255.255", 0 },
		{ "198.18.0.0", ADDR_C_RESERVED },
		{ "198.19.255.255", ADDR_C_RESERVED },
		{ "198.20.0.0", 0 },
		/* 198.51.100/24 */
		{ "198.51.99.255", 0 },
		{ "198.51.100.0", ADDR_C_RESERVED },
		{ "198.51.100.255", ADDR_C_RESERVED },
		{ "198.51.101.0", 0 },
		/* 203.0.113/24 */
		{ "203.0.112.255", 0 },
		{ "203.0.113.0", ADDR_C_RESERVED },
		{ "203.0.113.255", ADDR_C_RESERVED },
		{ "203.0.114.0", 0 },
		/* 224/4 */
		{ "223.255.255.255", 0 },
		{ "224.0.0.0", ADDR_C_MULTICAST },
		{ "239.255.255.255", ADDR_C_MULTICAST },
		/* 240/4 and broadcast */
		{ "240.0.0.0", ADDR_C_RESERVED },
		{ "255.255.255.254", ADDR_C_RESERVED },
		{ "255.255.255.255", ADDR_C_BROADCAST },
		{ "8.8.8.8", 0 },
		/* 192.0.0/24 (IETF protocol assignments), 192.88.99/24 (6to4 relay) */
		{ "191.255.255.255", 0 },
		{ "192.0.0.0", ADDR_C_RESERVED },
		{ "192.0.0.255", ADDR_C_RESERVED },
		{ "192.0.1.0", 0 },
		{ "192.88.98.255", 0 },
		{ "192.88.99.0", ADDR_C_RESERVED },
		{ "192.88.99.255", ADDR_C_RESERVED },
		{ "192.88.100.0", 0 },
		/* IPv6 */
		{ "::", ADDR_C_UNSPECIFIED },
		{ "::1", ADDR_C_LOOPBACK },
		/* ::/96, IPv4-compatible (deprecated): embeds an IPv4 address */
		{ "::2", ADDR_C_RESERVED },
		{ "::a00:1", ADDR_C_RESERVED },
		{ "::1:0:0", 0 },
		{ "64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		{ "64:ff9b::", ADDR_C_RESERVED },
		{ "64:ff9b::ffff:ffff", ADDR_C_RESERVED },
		{ "64:ff9b::1:0:0", 0 },
		{ "64:ff9b:1::", ADDR_C_RESERVED },
		{ "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", ADDR_C_RESERVED },
		{ "64:ff9b:2::", 0 },
		{ "100::", ADDR_C_RESERVED },
		{ "100::1:0:0:0:0", 0 },
		{ "2001::", ADDR_C_RESERVED },
		{ "2001:0:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_RESERVED },
		{ "2001:1::", 0 },
		{ "2001:2::", ADDR_C_RESERVED },
		{ "2001:2:1::", 0 },
		{ "2001:10::", ADDR_C_RESERVED },
		{ "2001:2f:ffff::", ADDR_C_RESERVED },
		{ "2001:30::", 0 },
		{ "2001:ffff::", 0 },
		{ "2002::", ADDR_C_RESERVED },
		{ "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_RESERVED },
		{ "2003::", 0 },
		{ "3ffe:ffff::", 0 },
		{ "3fff::", ADDR_C_RESERVED },
		{ "3fff:fff:ffff::", ADDR_C_RESERVED },
		{ "3fff:1000::", 0 },
		{ "5f00::", ADDR_C_RESERVED },
		{ "5f01::", 0 },
		{ "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		{ "fc00::", ADDR_C_PRIVATE },
		{ "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_PRIVATE },
		{ "fe00::", 0 },
		{ "fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		{ "fe80::", ADDR_C_LINKLOCAL },
		{ "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_LINKLOCAL },
		{ "fec0::", ADDR_C_RESERVED },	/* site-local, deprecated */
		{ "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_RESERVED },
		{ "ff00::", ADDR_C_MULTICAST },
		{ "ff02::1", ADDR_C_MULTICAST },
		{ "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_MULTICAST },
		{ "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", 0 },
		{ "2001:db8::", ADDR_C_RESERVED },
		{ "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", ADDR_C_RESERVED },
		{ "2001:db9::", 0 },
		{ "2606:4700::1111", 0 },
		/* Mapped addresses classify as the IPv4 address they are. */
		{ "::ffff:127.0.0.1", ADDR_C_LOOPBACK },
		{ "::ffff:10.1.1.1", ADDR_C_PRIVATE },
		{ "::ffff:0.0.0.0", ADDR_C_UNSPECIFIED },
		{ "::ffff:255.255.255.255", ADDR_C_BROADCAST },
	};
	struct addr a;
	size_t i;
	unsigned got;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		a = A(cases[i].a);
		got = addr_classify(&a);
		if (got != cases[i].cls)
			fail_msg("%s: class %#x, want %#x", cases[i].a, got,
			    cases[i].cls);
	}
	memset(&a, 0, sizeof(a));
	assert_int_equal(addr_classify(&a), 0);
}

static void
test_cidr_parse(void **state)
{
	struct cidr c;
	char buf[ADDR_STRLEN];

	(void)state;
	assert_int_equal(cidr_parse("10.0.0.0/8", &c), 0);
	assert_int_equal(c.plen, 8);
	assert_string_equal(addr_fmt(&c.addr, buf), "10.0.0.0");
	assert_int_equal(cidr_parse("0.0.0.0/0", &c), 0);
	assert_int_equal(c.plen, 0);
	assert_int_equal(cidr_parse("192.0.2.1", &c), 0);
	assert_int_equal(c.plen, 32);
	assert_int_equal(cidr_parse("192.0.2.1/32", &c), 0);
	assert_int_equal(cidr_parse("172.16.0.0/12", &c), 0);
	assert_int_equal(cidr_parse("2001:db8::/32", &c), 0);
	assert_int_equal(c.addr.family, AF_INET6);
	assert_int_equal(c.plen, 32);
	assert_int_equal(cidr_parse("::/0", &c), 0);
	assert_int_equal(cidr_parse("::1", &c), 0);
	assert_int_equal(c.plen, 128);
	assert_int_equal(cidr_parse("fe80::/10", &c), 0);
	assert_int_equal(cidr_parse("2001:db8::1/128", &c), 0);
	/* Mapped prefixes become IPv4 prefixes. */
	assert_int_equal(cidr_parse("::ffff:10.0.0.0/104", &c), 0);
	assert_int_equal(c.addr.family, AF_INET);
	assert_int_equal(c.plen, 8);
	assert_int_equal(cidr_parse("::ffff:10.1.2.3", &c), 0);
	assert_int_equal(c.addr.family, AF_INET);
	assert_int_equal(c.plen, 32);
}

static void
test_cidr_parse_bad(void **state)
{
	static const char *bad[] = {
		"", "/", "/8", "10.0.0.0/", "10.0.0.0/33", "10.0.0.0/128",
		"10.0.0.1/8", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/8x",
		"10.0.0.0/ 8", "10.0.0.0 /8", "10.0.0.0/8/8", "10.0.0.0/0008",
		"10.0.0.0/1000", "192.168.1.0/23", "172.16.0.0/11",
		"2001:db8::/129", "2001:db8::1/64", "2001:db8::/200",
		"fe80::/8", "10.0.0/8", "x/8", "::ffff:10.0.0.0/95",
		"::ffff:10.0.0.0/96x", "::ffff:10.0.0.1/104", "[::1]/128",
	};
	struct cidr c;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cidr_parse(bad[i], &c) != -1)
			fail_msg("cidr_parse accepted \"%s\"", bad[i]);
	assert_int_equal(cidr_parse(NULL, &c), -1);
}

static void
test_cidr_contains(void **state)
{
	struct cidr c;
	struct addr a;

	(void)state;
	assert_int_equal(cidr_parse("172.16.0.0/12", &c), 0);
	a = A("172.16.0.0");
	assert_true(cidr_contains(&c, &a));
	a = A("172.31.255.255");
	assert_true(cidr_contains(&c, &a));
	a = A("172.32.0.0");
	assert_false(cidr_contains(&c, &a));
	a = A("172.15.255.255");
	assert_false(cidr_contains(&c, &a));
	a = A("::ffff:172.20.1.1");
	assert_true(cidr_contains(&c, &a));
	/* Families never match each other. */
	a = A("ac10::");
	assert_false(cidr_contains(&c, &a));

	assert_int_equal(cidr_parse("0.0.0.0/0", &c), 0);
	a = A("255.255.255.255");
	assert_true(cidr_contains(&c, &a));
	a = A("::");
	assert_false(cidr_contains(&c, &a));

	assert_int_equal(cidr_parse("2001:db8:8000::/33", &c), 0);
	a = A("2001:db8:8000::1");
	assert_true(cidr_contains(&c, &a));
	a = A("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff");
	assert_true(cidr_contains(&c, &a));
	a = A("2001:db8:7fff:ffff:ffff:ffff:ffff:ffff");
	assert_false(cidr_contains(&c, &a));

	assert_int_equal(cidr_parse("192.0.2.1/32", &c), 0);
	a = A("192.0.2.1");
	assert_true(cidr_contains(&c, &a));
	a = A("192.0.2.0");
	assert_false(cidr_contains(&c, &a));
}

static void
test_cidr_list(void **state)
{
	struct cidr_list l;
	struct addr a;
	char err[64];

	(void)state;
	assert_int_equal(cidr_list_parse("10.0.0.0/8, 192.168.0.0/16\t2001:db8::/32\n"
	    "127.0.0.1", &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 4);
	a = A("10.9.9.9");
	assert_true(cidr_list_match(&l, &a));
	a = A("192.168.255.1");
	assert_true(cidr_list_match(&l, &a));
	a = A("2001:db8::42");
	assert_true(cidr_list_match(&l, &a));
	a = A("127.0.0.1");
	assert_true(cidr_list_match(&l, &a));
	a = A("127.0.0.2");
	assert_false(cidr_list_match(&l, &a));
	a = A("11.0.0.0");
	assert_false(cidr_list_match(&l, &a));
	cidr_list_free(&l);
	assert_null(l.v);
	assert_int_equal(l.n, 0);
	cidr_list_free(&l);	/* twice is harmless */

	/* Many items, past any initial allocation. */
	assert_int_equal(cidr_list_parse("1.0.0.0/8 2.0.0.0/8 3.0.0.0/8 4.0.0.0/8 "
	    "5.0.0.0/8 6.0.0.0/8 7.0.0.0/8 8.0.0.0/8 9.0.0.0/8 11.0.0.0/8 "
	    "12.0.0.0/8 13.0.0.0/8", &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 12);
	a = A("13.1.1.1");
	assert_true(cidr_list_match(&l, &a));
	cidr_list_free(&l);

	/* Empty lists are allowed and match nothing. */
	assert_int_equal(cidr_list_parse("", &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 0);
	assert_false(cidr_list_match(&l, &a));
	cidr_list_free(&l);
	assert_int_equal(cidr_list_parse("  \t ", &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 0);
	cidr_list_free(&l);
	assert_int_equal(cidr_list_parse(NULL, &l, err, sizeof(err)), 0);
	assert_int_equal(l.n, 0);
	cidr_list_free(&l);
	assert_false(cidr_list_match(NULL, &a));
}

static void
test_cidr_list_bad(void **state)
{
	struct cidr_list l = { NULL, 0 };
	char err[64];

	(void)state;
	assert_int_equal(cidr_list_parse("10.0.0.0/8, 10.0.0.1/8, 1.2.3.4",
	    &l, err, sizeof(err)), -1);
	assert_string_equal(err, "10.0.0.1/8");
	assert_int_equal(cidr_list_parse("10.0.0.0/8 1.2.3.4/33", &l, err,
	    sizeof(err)), -1);
	assert_string_equal(err, "1.2.3.4/33");
	assert_int_equal(cidr_list_parse("10.0.0.0/8,,1.2.3.4", &l, err,
	    sizeof(err)), -1);
	assert_string_equal(err, "empty item");
	assert_int_equal(cidr_list_parse("10.0.0.0/8, ,1.2.3.4", &l, err,
	    sizeof(err)), -1);
	assert_int_equal(cidr_list_parse(",10.0.0.0/8", &l, err, sizeof(err)), -1);
	assert_int_equal(cidr_list_parse("10.0.0.0/8,", &l, err, sizeof(err)), -1);
	assert_int_equal(cidr_list_parse(",", &l, err, sizeof(err)), -1);
	assert_int_equal(cidr_list_parse("10.0.0.0/8;1.2.3.4", &l, err,
	    sizeof(err)), -1);
	assert_string_equal(err, "10.0.0.0/8;1.2.3.4");
	/* A long bad item is reported truncated to the buffer. */
	assert_int_equal(cidr_list_parse("1.1.1.1 "
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
	    &l, err, 8), -1);
	assert_string_equal(err, "aaaaaaa");
	/* NULL err is allowed. */
	assert_int_equal(cidr_list_parse("bogus", &l, NULL, 0), -1);
	/* Nothing was handed out on error. */
	assert_null(l.v);
	assert_int_equal(l.n, 0);
}

static void
test_portset(void **state)
{
	struct portset p;
	char err[64];

	(void)state;
	assert_int_equal(portset_parse("80,443 8000-8099\t1", &p, err,
	    sizeof(err)), 0);
	assert_true(portset_has(&p, 80));
	assert_true(portset_has(&p, 443));
	assert_true(portset_has(&p, 8000));
	assert_true(portset_has(&p, 8050));
	assert_true(portset_has(&p, 8099));
	assert_true(portset_has(&p, 1));
	assert_false(portset_has(&p, 0));
	assert_false(portset_has(&p, 79));
	assert_false(portset_has(&p, 81));
	assert_false(portset_has(&p, 7999));
	assert_false(portset_has(&p, 8100));
	assert_false(portset_has(&p, 65535));

	assert_int_equal(portset_parse("*", &p, err, sizeof(err)), 0);
	assert_false(portset_has(&p, 0));
	assert_true(portset_has(&p, 1));
	assert_true(portset_has(&p, 65535));
	assert_int_equal(portset_parse("all", &p, err, sizeof(err)), 0);
	assert_true(portset_has(&p, 12345));

	assert_int_equal(portset_parse("65535, 5-5", &p, err, sizeof(err)), 0);
	assert_true(portset_has(&p, 65535));
	assert_true(portset_has(&p, 5));
	assert_false(portset_has(&p, 4));
	assert_false(portset_has(&p, 6));

	/* A fresh parse forgets the previous set. */
	assert_int_equal(portset_parse("22", &p, err, sizeof(err)), 0);
	assert_false(portset_has(&p, 65535));
	assert_true(portset_has(&p, 22));

	assert_int_equal(portset_parse("", &p, err, sizeof(err)), 0);
	assert_false(portset_has(&p, 22));
}

static void
test_portset_bad(void **state)
{
	static const char *bad[] = {
		"0", "65536", "99999", "-1", "80-", "-80", "90-80", "0-10",
		"1-65536", "80-90-100", "8o", "80 x", "80,,81", ",80", "80,",
		"80 , , 81", "1 - 2", "+80", "0x50", "ALL", "**", "80;81",
		"100000-100001",
	};
	struct portset p;
	char err[64];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (portset_parse(bad[i], &p, err, sizeof(err)) != -1)
			fail_msg("portset_parse accepted \"%s\"", bad[i]);
	assert_int_equal(portset_parse("80, 90-80", &p, err, sizeof(err)), -1);
	assert_string_equal(err, "90-80");
	/* An error leaves an empty set, never a partial one. */
	assert_false(portset_has(&p, 80));
}

static void
test_clock(void **state)
{
	uint64_t m1, m2, r;
	struct timespec ts = { 0, 2000000 };

	(void)state;
	m1 = clock_mono_us();
	nanosleep(&ts, NULL);
	m2 = clock_mono_us();
	assert_true(m2 >= m1 + 2000);
	assert_true(m2 < m1 + 2000000);
	/* Wall clock in microseconds: after 2020 and before 2100. */
	r = clock_real_us();
	assert_true(r > UINT64_C(1577836800) * 1000000);
	assert_true(r < UINT64_C(4102444800) * 1000000);
	assert_true(llabs((long long)(r / 1000000) - (long long)time(NULL)) <= 1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_addr_parse_v4),
		cmocka_unit_test(test_addr_parse_v6),
		cmocka_unit_test(test_addr_parse_mapped),
		cmocka_unit_test(test_addr_source),
		cmocka_unit_test(test_addr_common_bits),
		cmocka_unit_test(test_addr_parse_bad),
		cmocka_unit_test(test_ep_parse_good),
		cmocka_unit_test(test_ep_parse_bad),
		cmocka_unit_test(test_ep_parse_keeps_out_on_error),
		cmocka_unit_test(test_eq),
		cmocka_unit_test(test_hash),
		cmocka_unit_test(test_sockaddr),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_cidr_parse),
		cmocka_unit_test(test_cidr_parse_bad),
		cmocka_unit_test(test_cidr_contains),
		cmocka_unit_test(test_cidr_list),
		cmocka_unit_test(test_cidr_list_bad),
		cmocka_unit_test(test_portset),
		cmocka_unit_test(test_portset_bad),
		cmocka_unit_test(test_clock),
	};

	if (sodium_init() < 0)
		return 1;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
