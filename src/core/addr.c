/* Addresses, endpoints, prefixes and port sets: parsing, formatting,
 * hashing and classification. */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <sodium.h>

#include "slot/addr.h"

_Static_assert(crypto_shorthash_BYTES == 8, "shorthash yields 64 bits");
_Static_assert(crypto_shorthash_KEYBYTES == 16, "shorthash key is 16 bytes");

static const uint8_t v4mapped_prefix[12] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff
};

/* Fills a from 16 network-order bytes, folding ::ffff:a.b.c.d to IPv4.
 * Returns true if it folded. */
static bool
addr_set6(struct addr *a, const uint8_t b[16])
{
	memset(a, 0, sizeof(*a));
	if (memcmp(b, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0) {
		a->family = AF_INET;
		memcpy(a->bytes, b + 12, 4);
		return true;
	}
	a->family = AF_INET6;
	memcpy(a->bytes, b, 16);
	return false;
}

static void
addr_set4(struct addr *a, const void *b)
{
	memset(a, 0, sizeof(*a));
	a->family = AF_INET;
	memcpy(a->bytes, b, 4);
}

/* Like addr_parse; *mapped tells whether an IPv6 text became IPv4. */
static int
addr_parse_mapped(const char *s, struct addr *out, bool *mapped)
{
	uint8_t b[16];

	*mapped = false;
	if (s == NULL || strlen(s) >= ADDR_STRLEN)
		return -1;
	if (inet_pton(AF_INET, s, b) == 1) {
		addr_set4(out, b);
		return 0;
	}
	if (inet_pton(AF_INET6, s, b) == 1) {
		*mapped = addr_set6(out, b);
		return 0;
	}
	return -1;
}

int
addr_parse(const char *s, struct addr *out)
{
	bool mapped;

	return addr_parse_mapped(s, out, &mapped);
}

/* Strict decimal port, 1-65535: no sign, no space, no empty string. */
static int
port_parse(const char *s, size_t len, uint16_t *out)
{
	unsigned long v = 0;
	size_t i;

	if (len == 0 || len > 5)
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned long)(s[i] - '0');
	}
	if (v == 0 || v > 65535)
		return -1;
	*out = (uint16_t)v;
	return 0;
}

int
ep_parse(const char *s, uint16_t default_port, struct endpoint *out)
{
	char buf[ADDR_STRLEN];
	const char *host, *port = NULL, *end, *colon;
	size_t hlen, plen = 0;
	uint8_t b[16];
	struct endpoint e;

	if (s == NULL)
		return -1;
	memset(&e, 0, sizeof(e));
	if (s[0] == '[') {
		host = s + 1;
		if ((end = strchr(host, ']')) == NULL)
			return -1;
		hlen = (size_t)(end - host);
		if (end[1] == ':') {
			port = end + 2;
			plen = strlen(port);
		} else if (end[1] != '\0')
			return -1;
		if (hlen == 0 || hlen >= sizeof(buf))
			return -1;
		memcpy(buf, host, hlen);
		buf[hlen] = '\0';
		/* Brackets hold an IPv6 literal only, never "[1.2.3.4]". */
		if (inet_pton(AF_INET6, buf, b) != 1)
			return -1;
		addr_set6(&e.addr, b);
	} else {
		/* One colon separates a port; more mean a bare IPv6 address. */
		colon = strchr(s, ':');
		if (colon != NULL && strchr(colon + 1, ':') == NULL) {
			hlen = (size_t)(colon - s);
			port = colon + 1;
			plen = strlen(port);
		} else
			hlen = strlen(s);
		if (hlen == 0 || hlen >= sizeof(buf))
			return -1;
		memcpy(buf, s, hlen);
		buf[hlen] = '\0';
		if (addr_parse(buf, &e.addr) == -1)
			return -1;
	}
	if (port != NULL) {
		if (port_parse(port, plen, &e.port) == -1)
			return -1;
	} else if (default_port == 0)
		return -1;
	else
		e.port = default_port;
	*out = e;
	return 0;
}

const char *
addr_fmt(const struct addr *a, char *buf)
{
	if ((a->family != AF_INET && a->family != AF_INET6) ||
	    inet_ntop(a->family, a->bytes, buf, ADDR_STRLEN) == NULL)
		snprintf(buf, ADDR_STRLEN, "?");
	return buf;
}

const char *
ep_fmt(const struct endpoint *e, char *buf)
{
	char a[ADDR_STRLEN];

	addr_fmt(&e->addr, a);
	if (e->addr.family == AF_INET6)
		snprintf(buf, EP_STRLEN, "[%s]:%u", a, e->port);
	else
		snprintf(buf, EP_STRLEN, "%s:%u", a, e->port);
	return buf;
}

struct addr
addr_source(const struct addr *a)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	struct addr s = *a;

	if (s.family == AF_INET6 && memcmp(s.bytes, mapped, sizeof(mapped)) != 0)
		memset(s.bytes + 8, 0, 8);
	return s;
}

bool
addr_eq(const struct addr *a, const struct addr *b)
{
	return a->family == b->family &&
	    memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

int
ep_cmp(const struct endpoint *a, const struct endpoint *b)
{
	int c;

	if (a->addr.family != b->addr.family)
		return a->addr.family < b->addr.family ? -1 : 1;
	if ((c = memcmp(a->addr.bytes, b->addr.bytes, sizeof(a->addr.bytes))) != 0)
		return c;
	return a->port < b->port ? -1 : a->port > b->port;
}

bool
ep_eq(const struct endpoint *a, const struct endpoint *b)
{
	return a->port == b->port && addr_eq(&a->addr, &b->addr);
}

void
addr_hash_key(uint8_t key[16])
{
	randombytes_buf(key, crypto_shorthash_KEYBYTES);
}

static uint64_t
hash_bytes(const uint8_t *in, size_t len, const uint8_t key[16])
{
	uint8_t out[crypto_shorthash_BYTES];
	uint64_t h;

	crypto_shorthash(out, in, len, key);
	memcpy(&h, out, sizeof(h));
	return h;
}

uint64_t
bytes_hash(const uint8_t *in, size_t len, const uint8_t key[16])
{
	return hash_bytes(in, len, key);
}

uint64_t
addr_hash(const struct addr *a, const uint8_t key[16])
{
	uint8_t in[1 + 16];

	in[0] = a->family;
	memcpy(in + 1, a->bytes, 16);
	return hash_bytes(in, sizeof(in), key);
}

uint64_t
ep_hash(const struct endpoint *e, const uint8_t key[16])
{
	uint8_t in[1 + 16 + 2];

	in[0] = e->addr.family;
	memcpy(in + 1, e->addr.bytes, 16);
	in[17] = (uint8_t)(e->port >> 8);
	in[18] = (uint8_t)e->port;
	return hash_bytes(in, sizeof(in), key);
}

socklen_t
ep_to_sockaddr(const struct endpoint *e, struct sockaddr_storage *ss)
{
	struct sockaddr_in *sin;
	struct sockaddr_in6 *sin6;

	memset(ss, 0, sizeof(*ss));
	switch (e->addr.family) {
	case AF_INET:
		sin = (struct sockaddr_in *)ss;
		sin->sin_family = AF_INET;
		sin->sin_port = htons(e->port);
		memcpy(&sin->sin_addr, e->addr.bytes, 4);
		return sizeof(*sin);
	case AF_INET6:
		sin6 = (struct sockaddr_in6 *)ss;
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(e->port);
		memcpy(&sin6->sin6_addr, e->addr.bytes, 16);
		return sizeof(*sin6);
	}
	return 0;
}

socklen_t
ep_to_sockaddr_on(const struct endpoint *e, int sock_family, struct sockaddr_storage *ss)
{
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

	if (sock_family != AF_INET6 || e->addr.family != AF_INET)
		return ep_to_sockaddr(e, ss);
	memset(ss, 0, sizeof(*ss));
	sin6->sin6_family = AF_INET6;
	sin6->sin6_port = htons(e->port);
	sin6->sin6_addr.s6_addr[10] = sin6->sin6_addr.s6_addr[11] = 0xff;
	memcpy(&sin6->sin6_addr.s6_addr[12], e->addr.bytes, 4);
	return sizeof(*sin6);
}

int
ep_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct endpoint *out)
{
	const struct sockaddr_in *sin;
	const struct sockaddr_in6 *sin6;

	if (sa == NULL || len < sizeof(sa_family_t)) {
		errno = EINVAL;
		return -1;
	}
	memset(out, 0, sizeof(*out));
	switch (sa->sa_family) {
	case AF_INET:
		if (len < sizeof(*sin))
			break;
		sin = (const struct sockaddr_in *)(const void *)sa;
		addr_set4(&out->addr, &sin->sin_addr);
		out->port = ntohs(sin->sin_port);
		return 0;
	case AF_INET6:
		if (len < sizeof(*sin6))
			break;
		sin6 = (const struct sockaddr_in6 *)(const void *)sa;
		addr_set6(&out->addr, sin6->sin6_addr.s6_addr);
		out->port = ntohs(sin6->sin6_port);
		return 0;
	default:
		errno = EAFNOSUPPORT;
		return -1;
	}
	errno = EINVAL;
	return -1;
}

unsigned
addr_common_bits(const struct addr *a, const struct addr *b)
{
	size_t len = a->family == AF_INET ? 4 : 16;
	unsigned bits = 0;

	if (a->family != b->family)
		return 0;
	for (size_t i = 0; i < len; i++) {
		uint8_t x = a->bytes[i] ^ b->bytes[i];

		if (x != 0)
			return bits + (unsigned)__builtin_clz(x) - 24;
		bits += 8;
	}
	return bits;
}

/* True if the first plen bits of a and p are equal. */
static bool
prefix_eq(const uint8_t *a, const uint8_t *p, unsigned plen)
{
	unsigned whole = plen / 8, rest = plen % 8;
	uint8_t mask;

	if (memcmp(a, p, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	mask = (uint8_t)(0xff << (8 - rest));
	return (a[whole] & mask) == (p[whole] & mask);
}

struct class_range {
	uint8_t p[16];
	uint8_t plen;
	unsigned cls;
};

/* Order matters only for 255.255.255.255, which is listed before 240/4. */
static const struct class_range class4[] = {
	{ { 0 }, 8, ADDR_C_UNSPECIFIED },
	{ { 127 }, 8, ADDR_C_LOOPBACK },
	{ { 10 }, 8, ADDR_C_PRIVATE },
	{ { 172, 16 }, 12, ADDR_C_PRIVATE },
	{ { 192, 168 }, 16, ADDR_C_PRIVATE },
	{ { 100, 64 }, 10, ADDR_C_PRIVATE },
	{ { 169, 254 }, 16, ADDR_C_LINKLOCAL },
	{ { 224 }, 4, ADDR_C_MULTICAST },
	{ { 255, 255, 255, 255 }, 32, ADDR_C_BROADCAST },
	{ { 240 }, 4, ADDR_C_RESERVED },
	{ { 192, 0, 2 }, 24, ADDR_C_RESERVED },
	{ { 198, 51, 100 }, 24, ADDR_C_RESERVED },
	{ { 203, 0, 113 }, 24, ADDR_C_RESERVED },
	{ { 198, 18 }, 15, ADDR_C_RESERVED },
	/* RFC 6890: IETF protocol assignments; 6to4 relay anycast (RFC 7526). */
	{ { 192, 0, 0 }, 24, ADDR_C_RESERVED },
	{ { 192, 88, 99 }, 24, ADDR_C_RESERVED },
};

static const struct class_range class6[] = {
	{ { 0 }, 128, ADDR_C_UNSPECIFIED },
	{ { [15] = 1 }, 128, ADDR_C_LOOPBACK },
	{ { 0xfc }, 7, ADDR_C_PRIVATE },
	{ { 0xfe, 0x80 }, 10, ADDR_C_LINKLOCAL },
	{ { 0xff }, 8, ADDR_C_MULTICAST },
	{ { 0x20, 0x01, 0x0d, 0xb8 }, 32, ADDR_C_RESERVED },
	/* Prefixes that embed an IPv4 address (so they could reach a private
	 * one) or are not globally reachable (RFC 6890 and its updates):
	 * IPv4-compatible ::/96 (after :: and ::1 above), IPv4-mapped, NAT64
	 * well-known and local-use, 6to4, Teredo; discard-only, benchmarking,
	 * ORCHID and ORCHIDv2, documentation 3fff::/20, SRv6 SIDs, site-local. */
	{ { 0 }, 96, ADDR_C_RESERVED },
	{ { [10] = 0xff, [11] = 0xff }, 96, ADDR_C_RESERVED },
	{ { 0x00, 0x64, 0xff, 0x9b }, 96, ADDR_C_RESERVED },
	{ { 0x00, 0x64, 0xff, 0x9b, 0x00, 0x01 }, 48, ADDR_C_RESERVED },
	{ { 0x20, 0x02 }, 16, ADDR_C_RESERVED },
	{ { 0x20, 0x01, 0x00, 0x00 }, 32, ADDR_C_RESERVED },
	{ { 0x01, 0x00 }, 64, ADDR_C_RESERVED },
	{ { 0x20, 0x01, 0x00, 0x02, 0x00, 0x00 }, 48, ADDR_C_RESERVED },
	{ { 0x20, 0x01, 0x00, 0x10 }, 28, ADDR_C_RESERVED },
	{ { 0x20, 0x01, 0x00, 0x20 }, 28, ADDR_C_RESERVED },
	{ { 0x3f, 0xff }, 20, ADDR_C_RESERVED },
	{ { 0x5f, 0x00 }, 16, ADDR_C_RESERVED },
	{ { 0xfe, 0xc0 }, 10, ADDR_C_RESERVED },
};

unsigned
addr_classify(const struct addr *a)
{
	const struct class_range *r;
	size_t i, n;

	if (a->family == AF_INET) {
		r = class4;
		n = sizeof(class4) / sizeof(class4[0]);
	} else if (a->family == AF_INET6) {
		r = class6;
		n = sizeof(class6) / sizeof(class6[0]);
	} else
		return 0;
	for (i = 0; i < n; i++)
		if (prefix_eq(a->bytes, r[i].p, r[i].plen))
			return r[i].cls;
	return 0;
}

static unsigned
addr_bits(const struct addr *a)
{
	return a->family == AF_INET ? 32 : 128;
}

/* Parses a decimal prefix length of 1-3 digits. */
static int
plen_parse(const char *s, unsigned max, unsigned *out)
{
	unsigned v = 0;
	size_t i, len = strlen(s);

	if (len == 0 || len > 3)
		return -1;
	for (i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (unsigned)(s[i] - '0');
	}
	if (v > max)
		return -1;
	*out = v;
	return 0;
}

int
cidr_parse(const char *s, struct cidr *out)
{
	char buf[ADDR_STRLEN];
	const char *slash;
	size_t alen;
	unsigned plen, bits;
	bool mapped;
	struct cidr c;

	if (s == NULL)
		return -1;
	slash = strchr(s, '/');
	alen = slash != NULL ? (size_t)(slash - s) : strlen(s);
	if (alen == 0 || alen >= sizeof(buf))
		return -1;
	memcpy(buf, s, alen);
	buf[alen] = '\0';
	memset(&c, 0, sizeof(c));
	if (addr_parse_mapped(buf, &c.addr, &mapped) == -1)
		return -1;
	/* A mapped prefix is written over 128 bits but stored over 32. */
	bits = mapped ? 128 : addr_bits(&c.addr);
	if (slash == NULL)
		plen = bits;
	else if (plen_parse(slash + 1, bits, &plen) == -1)
		return -1;
	if (mapped) {
		if (plen < 96)
			return -1;
		plen -= 96;
	}
	/* Host bits beyond the prefix must be zero. */
	for (bits = plen; bits < addr_bits(&c.addr); bits++)
		if (c.addr.bytes[bits / 8] & (0x80 >> (bits % 8)))
			return -1;
	c.plen = (uint8_t)plen;
	*out = c;
	return 0;
}

bool
cidr_contains(const struct cidr *c, const struct addr *a)
{
	return c->addr.family == a->family &&
	    prefix_eq(a->bytes, c->addr.bytes, c->plen);
}

/* Longest list item accepted; anything longer is an error. */
#define LIST_ITEM_MAX 64

/* Calls fn on each item of a list separated by commas and/or white space.
 * An empty item between commas, or before or after one, is an error. On
 * error writes the item into err and returns -1. */
static int
list_walk(const char *s, int (*fn)(const char *, void *), void *arg,
    char *err, size_t errlen)
{
	char item[LIST_ITEM_MAX + 1];
	const char *p = s != NULL ? s : "", *start;
	size_t len;
	bool need_item = false;	/* just after a comma */
	bool any = false;	/* an item since the last comma */

	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (*p == '\0' || *p == ',') {
			/* An item was required here but there is none. */
			if (need_item || (*p == ',' && !any)) {
				if (err != NULL && errlen > 0)
					snprintf(err, errlen, "empty item");
				return -1;
			}
			if (*p == '\0')
				return 0;
			need_item = true;
			any = false;
			p++;
			continue;
		}
		start = p;
		while (*p != '\0' && *p != ',' && *p != ' ' && *p != '\t' &&
		    *p != '\n' && *p != '\r')
			p++;
		len = (size_t)(p - start);
		need_item = false;
		any = true;
		if (len <= LIST_ITEM_MAX) {
			memcpy(item, start, len);
			item[len] = '\0';
			if (fn(item, arg) == 0)
				continue;
		}
		if (err != NULL && errlen > 0)
			snprintf(err, errlen, "%.*s", (int)len, start);
		return -1;
	}
}

struct cidr_walk {
	struct cidr *v;
	size_t n, cap;
};

static int
cidr_walk_item(const char *item, void *arg)
{
	struct cidr_walk *w = arg;
	struct cidr c, *nv;
	size_t ncap;

	if (cidr_parse(item, &c) == -1)
		return -1;
	if (w->n == w->cap) {
		ncap = w->cap ? w->cap * 2 : 8;
		if ((nv = reallocarray(w->v, ncap, sizeof(*nv))) == NULL)
			return -1;
		w->v = nv;
		w->cap = ncap;
	}
	w->v[w->n++] = c;
	return 0;
}

int
cidr_list_parse(const char *s, struct cidr_list *out, char *err, size_t errlen)
{
	struct cidr_walk w = { NULL, 0, 0 };

	if (list_walk(s, cidr_walk_item, &w, err, errlen) == -1) {
		free(w.v);
		return -1;
	}
	out->v = w.v;
	out->n = w.n;
	return 0;
}

bool
cidr_list_match(const struct cidr_list *l, const struct addr *a)
{
	size_t i;

	if (l == NULL)
		return false;
	for (i = 0; i < l->n; i++)
		if (cidr_contains(&l->v[i], a))
			return true;
	return false;
}

void
cidr_list_free(struct cidr_list *l)
{
	if (l == NULL)
		return;
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

static void
portset_add(struct portset *p, unsigned lo, unsigned hi)
{
	unsigned i;

	for (i = lo; i <= hi; i++)
		p->bits[i / 8] |= (uint8_t)(1 << (i % 8));
}

static int
portset_item(const char *item, void *arg)
{
	struct portset *p = arg;
	const char *dash;
	uint16_t lo, hi;

	if (strcmp(item, "*") == 0 || strcmp(item, "all") == 0) {
		portset_add(p, 1, 65535);
		return 0;
	}
	if ((dash = strchr(item, '-')) == NULL) {
		if (port_parse(item, strlen(item), &lo) == -1)
			return -1;
		portset_add(p, lo, lo);
		return 0;
	}
	if (port_parse(item, (size_t)(dash - item), &lo) == -1 ||
	    port_parse(dash + 1, strlen(dash + 1), &hi) == -1 || lo > hi)
		return -1;
	portset_add(p, lo, hi);
	return 0;
}

int
portset_parse(const char *s, struct portset *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (list_walk(s, portset_item, out, err, errlen) == -1) {
		/* Never leave a half-filled set behind. */
		memset(out, 0, sizeof(*out));
		return -1;
	}
	return 0;
}

bool
portset_has(const struct portset *p, uint16_t port)
{
	return (p->bits[port / 8] >> (port % 8)) & 1;
}
