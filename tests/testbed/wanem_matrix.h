#ifndef SLOT_WANEM_MATRIX_H
#define SLOT_WANEM_MATRIX_H

#include <stddef.h>
#include <stdint.h>

/*
 * The delay and loss matrix of slot-wanem: per one-way (source, destination)
 * pair of hosts, how long a packet is held and how likely it is dropped. A
 * host is one address, or a name standing for several (IPv4 and IPv6 alike),
 * so that a dual-stack host's two addresses, and the addresses of a LAN
 * routed behind it, share its delays. The file is text, one entry per line;
 * '#' starts a comment, blank lines are ignored, fields are separated by
 * blanks:
 *
 *   host NAME ADDR [ADDR...]
 *	the IPv4 or IPv6 addresses ADDR belong to host NAME (letters, digits,
 *	'_' and '-', at most WM_NAME_MAX; not "host" or "default"). A name may
 *	be given on several lines, each adding addresses; an address belongs
 *	to one host only, and must be given before a pair line uses it.
 *   SRC DST DELAY_MS [LOSS]
 *	packets from SRC to DST, each a host NAME from an earlier host line or
 *	an address (one not in any host line is a host of its own), are held
 *	DELAY_MS milliseconds (one way; a decimal >= 0, e.g. 40 or 12.5; at
 *	most WM_DELAY_MS_MAX) and dropped with probability LOSS (0..1, default
 *	0). The reverse direction is a separate line.
 *   default DELAY_MS [LOSS]
 *	the same for every pair not listed (without this line: 0 0).
 *
 * Example, 80 ms RTT between two dual-stack hosts, 1% loss towards b:
 *
 *   default 0
 *   host a 10.0.1.2 fd00:0:1::2
 *   host b 10.0.2.2 fd00:0:2::2
 *   a b 40 0.01
 *   b a 40
 *
 * A pair listed twice (by name or by address), or two default lines, is an
 * error. Errors name the line: "matrix.txt:7: bad loss '1.5' (0..1)".
 * Lookups are O(1).
 */

#define WM_DELAY_MS_MAX 60000.0
#define WM_NAME_MAX 32

struct addr;

struct wm_link {
	uint64_t delay_us;
	double loss;		/* 0..1 */
};

struct wm_matrix;

/* A 64-bit key for a pair of 32-bit host numbers (wm_matrix_lookup_addr's
 * *pair, or two IPv4 addresses). */
static inline uint64_t
wm_pair_key(uint32_t src, uint32_t dst)
{
	return (uint64_t)src << 32 | dst;
}

/* Keyed hash of a pair key (SipHash through addr_hash), for hash tables
 * whose key was drawn with addr_hash_key(). */
uint64_t wm_pair_hash(uint64_t pair, const uint8_t key[16]);

/* Parses text (len bytes, need not be NUL-terminated); name is the file
 * name used in error messages. Returns 0 with a new matrix in *out, or -1
 * with "name:line: reason" in err (errno ENOMEM on allocation failure). */
int wm_matrix_parse(const char *name, const char *text, size_t len,
    struct wm_matrix **out, char *err, size_t errlen);

/* Reads and parses the file at path. Returns 0 or -1 as wm_matrix_parse, or
 * -1 with "path: strerror" if the file cannot be read. */
int wm_matrix_load(const char *path, struct wm_matrix **out, char *err,
    size_t errlen);

/* Loads path into a new matrix and, only if the whole file parsed, frees
 * *cur and puts the new one in its place. Returns 0, or -1 with *cur
 * untouched and the reason in err. */
int wm_matrix_reload(struct wm_matrix **cur, const char *path, char *err,
    size_t errlen);

void wm_matrix_free(struct wm_matrix *m);

/* The link for a pair of addresses (IPv4 or IPv6): the line of their hosts'
 * pair, or the default. *pair (if pair is not NULL) is set to a key of the
 * pair of hosts, the same for every packet between the two (an address in no
 * line counts as host 0). Never NULL; valid until the matrix is freed. */
const struct wm_link *wm_matrix_lookup_addr(const struct wm_matrix *m,
    const struct addr *src, const struct addr *dst, uint64_t *pair);

/* The same for IPv4 addresses in network order. */
const struct wm_link *wm_matrix_lookup(const struct wm_matrix *m, uint32_t src,
    uint32_t dst);

/* Number of pairs listed (the default line not counted). */
size_t wm_matrix_count(const struct wm_matrix *m);

/* Number of addresses known (in host lines or pair lines). */
size_t wm_matrix_addrs(const struct wm_matrix *m);

/* The default link. */
const struct wm_link *wm_matrix_default(const struct wm_matrix *m);

#endif
