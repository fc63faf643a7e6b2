#ifndef SLOT_ADDR_H
#define SLOT_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IPv4 or IPv6 address without port, compact and comparable with memcmp
 * (unused bytes are always zero). IPv4-mapped IPv6 addresses are stored as
 * IPv4 by every function that creates an addr. */
struct addr {
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint8_t bytes[16];	/* network order; IPv4 uses the first 4 */
};

struct endpoint {
	struct addr addr;
	uint16_t port;		/* host order */
};

#define ADDR_STRLEN 46		/* INET6_ADDRSTRLEN */
#define EP_STRLEN 56		/* "[" addr "]:" port */

/* Parses a numeric IPv4 or IPv6 address. Returns 0, or -1 if invalid. */
int addr_parse(const char *s, struct addr *out);

/* Parses "1.2.3.4:80", "[2001:db8::1]:80"; with default_port != 0 the port
 * may be omitted ("1.2.3.4", "2001:db8::1", "[2001:db8::1]"). Port 0 is
 * invalid. Returns 0, or -1. */
int ep_parse(const char *s, uint16_t default_port, struct endpoint *out);

/* Format into buf (ADDR_STRLEN / EP_STRLEN bytes); return buf. */
const char *addr_fmt(const struct addr *a, char *buf);
const char *ep_fmt(const struct endpoint *e, char *buf);

bool addr_eq(const struct addr *a, const struct addr *b);
/* The source a per-source limit counts a as: the address itself, but for
 * IPv6 its /64, since one host or subscriber commonly holds a whole /64
 * and could otherwise take a fresh source for each connection or message
 * (an IPv4-mapped address stays whole). */
struct addr addr_source(const struct addr *a);
/* How many leading bits a and b share: 0 when their families differ. */
unsigned addr_common_bits(const struct addr *a, const struct addr *b);
bool ep_eq(const struct endpoint *a, const struct endpoint *b);
/* A total order (family, address bytes, port), for sorting and searching. */
int ep_cmp(const struct endpoint *a, const struct endpoint *b);

/* Keyed hash (SipHash via libsodium), so remote peers cannot aim entries at
 * one bucket. key is 16 bytes, drawn once per table with addr_hash_key(). */
void addr_hash_key(uint8_t key[16]);
uint64_t addr_hash(const struct addr *a, const uint8_t key[16]);
uint64_t ep_hash(const struct endpoint *e, const uint8_t key[16]);
/* The same keyed hash of any bytes (a pipe token). */
uint64_t bytes_hash(const uint8_t *in, size_t len, const uint8_t key[16]);

/* Conversions to and from socket addresses. ep_from_sockaddr returns -1 for
 * families other than AF_INET/AF_INET6. */
socklen_t ep_to_sockaddr(const struct endpoint *e, struct sockaddr_storage *ss);
int ep_from_sockaddr(const struct sockaddr *sa, socklen_t len, struct endpoint *out);
/* ep_to_sockaddr for a socket of family sock_family: on an IPv6 socket (a
 * dual-stack one, bound to ::) an IPv4 endpoint becomes ::ffff:a.b.c.d. */
socklen_t ep_to_sockaddr_on(const struct endpoint *e, int sock_family,
    struct sockaddr_storage *ss);

/* Classes of special-purpose addresses, as a bit set. */
enum {
	ADDR_C_UNSPECIFIED = 1 << 0,	/* 0.0.0.0/8, :: */
	ADDR_C_LOOPBACK = 1 << 1,	/* 127/8, ::1 */
	ADDR_C_PRIVATE = 1 << 2,	/* 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7 */
	ADDR_C_LINKLOCAL = 1 << 3,	/* 169.254/16, fe80::/10 */
	ADDR_C_MULTICAST = 1 << 4,	/* 224/4, ff00::/8 */
	ADDR_C_BROADCAST = 1 << 5,	/* 255.255.255.255 */
	ADDR_C_RESERVED = 1 << 6,	/* 240/4 (not broadcast), documentation ranges,
					 * the rest of RFC 6890's registry (addr.c) */
};
unsigned addr_classify(const struct addr *a);

struct cidr {
	struct addr addr;	/* host bits are zero */
	uint8_t plen;
};

/* Parses "10.0.0.0/8", "2001:db8::/32", or a bare address (full length).
 * Host bits set beyond the prefix are an error. Returns 0, or -1. */
int cidr_parse(const char *s, struct cidr *out);
bool cidr_contains(const struct cidr *c, const struct addr *a);

struct cidr_list {
	struct cidr *v;
	size_t n;
};

/* Parses a list separated by commas and/or white space; empty is allowed.
 * On error returns -1 and writes which item is bad into err. */
int cidr_list_parse(const char *s, struct cidr_list *out, char *err, size_t errlen);
bool cidr_list_match(const struct cidr_list *l, const struct addr *a);
void cidr_list_free(struct cidr_list *l);

/* A set of TCP ports. */
struct portset {
	uint8_t bits[65536 / 8];
};

/* Parses "80,443,8000-8099" (commas and/or white space; "*" or "all" means
 * 1-65535). Returns 0, or -1 with the bad item in err. */
int portset_parse(const char *s, struct portset *out, char *err, size_t errlen);
bool portset_has(const struct portset *p, uint16_t port);

#endif
