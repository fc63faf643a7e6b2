#ifndef SLOT_WANEM_MATRIX_H
#define SLOT_WANEM_MATRIX_H

#include <stddef.h>
#include <stdint.h>

/*
 * The delay and loss matrix of slot-wanem: per one-way (source, destination)
 * pair of IPv4 addresses, how long a packet is held and how likely it is
 * dropped. The file is text, one entry per line; '#' starts a comment, blank
 * lines are ignored, fields are separated by blanks:
 *
 *   SRC DST DELAY_MS [LOSS]
 *	packets from IPv4 address SRC to IPv4 address DST are held DELAY_MS
 *	milliseconds (one way; a decimal >= 0, e.g. 40 or 12.5; at most
 *	WM_DELAY_MS_MAX) and dropped with probability LOSS (0..1, default 0).
 *	The reverse direction is a separate line.
 *   default DELAY_MS [LOSS]
 *	the same for every pair not listed (without this line: 0 0).
 *
 * Example, 80 ms RTT between two hosts, 1% loss towards 10.0.2.2:
 *
 *   default 0
 *   10.0.1.2 10.0.2.2 40 0.01
 *   10.0.2.2 10.0.1.2 40
 *
 * A pair listed twice, or two default lines, is an error. Errors name the
 * line: "matrix.txt:7: bad loss '1.5' (0..1)". Lookups are O(1).
 */

#define WM_DELAY_MS_MAX 60000.0

struct wm_link {
	uint64_t delay_us;
	double loss;		/* 0..1 */
};

struct wm_matrix;

/* A 64-bit key for the pair; src and dst are IPv4 addresses in network
 * order, as they appear in the IP header. */
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

/* The link for a pair (network order addresses): its own line, or the
 * default. Never NULL; valid until the matrix is freed. */
const struct wm_link *wm_matrix_lookup(const struct wm_matrix *m, uint32_t src,
    uint32_t dst);

/* Number of pairs listed (the default line not counted). */
size_t wm_matrix_count(const struct wm_matrix *m);

/* The default link. */
const struct wm_link *wm_matrix_default(const struct wm_matrix *m);

#endif
