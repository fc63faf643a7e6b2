#ifndef SLOT_RNG_H
#define SLOT_RNG_H

#include <stdint.h>

/* A small seeded generator (xoshiro256**, seeded by splitmix64), so that
 * sampling in slotd and in slot-sim is reproducible with a seed. Not for
 * keys or nonces (those come from libsodium). */

struct rng {
	uint64_t s[4];
};

void rng_seed(struct rng *r, uint64_t seed);
uint64_t rng_next(struct rng *r);
/* Uniform in [0, n), without modulo bias; n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Uniform in [0, 1). */
double rng_unit(struct rng *r);

#endif
