#ifndef SLOT_SIM_ROLES_H
#define SLOT_SIM_ROLES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Which nodes of the matrix are clients, relays and servers, and the
 * (client, server) pairs slot-sim evaluates. A node may hold several roles;
 * a pair's own endpoints are never its relays.
 */

struct roles {
	uint32_t *client, *relay, *server;	/* node indexes, increasing */
	size_t nclient, nrelay, nserver;
	/* Every node in every role; pairs are then the unordered {a, b},
	 * a < b, since the matrix is symmetric. */
	bool all_to_all;
};

struct pairs {
	uint32_t *c, *s;	/* pair i is client c[i], server s[i] */
	size_t n;
};

/* Every node in every role. Returns 0 or -1 (out of memory). */
int roles_all(struct roles *r, size_t n);

/*
 * Parses a node list for one role into *out (sorted, no duplicates):
 * - indexes and ranges, "0-9,12" (0-based);
 * - "name:" then names, "name:Paris,London", looked up in names[0..n)
 *   (which may be NULL or hold NULL entries).
 * An unknown name, an index >= n, a node given twice or an empty list is an
 * error. Returns 0 or -1 with the reason in err.
 */
int roles_parse(const char *spec, char *const *names, size_t n, uint32_t **out,
    size_t *nout, char *err, size_t errlen);

/* A seeded random split into disjoint sets of nc clients, nr relays and ns
 * servers (nc + nr + ns <= n). Returns 0 or -1 with the reason in err. */
int roles_split(struct roles *r, size_t n, size_t nc, size_t nr, size_t ns,
    uint64_t seed, char *err, size_t errlen);

void roles_free(struct roles *r);

/* The pairs to evaluate: all_to_all gives {a < b}; otherwise every client
 * with every server other than itself. Returns 0, or -1 (out of memory, or
 * no pair at all, with the reason in err). */
int roles_pairs(const struct roles *r, struct pairs *p, char *err, size_t errlen);

/* Keeps a seeded uniform sample of k pairs (all if k >= p->n), in their
 * original order. Returns 0 or -1 (out of memory). */
int roles_pairs_sample(struct pairs *p, size_t k, uint64_t seed);

void roles_pairs_free(struct pairs *p);

#endif
