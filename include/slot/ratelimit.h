#ifndef SLOT_RATELIMIT_H
#define SLOT_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* Token buckets keyed by address, bounded in memory. A bucket that has
 * refilled completely carries no state and may be reused; when every slot
 * holds a bucket still refilling, a new address is refused (fail closed). */

struct ratelimit;

/* rate in tokens per second, burst in tokens (>= 1). NULL on failure. */
struct ratelimit *rl_new(size_t capacity, double rate, double burst);
void rl_free(struct ratelimit *rl);
void rl_set(struct ratelimit *rl, double rate, double burst);

/* Takes one token for key at now_us (monotonic). */
bool rl_allow(struct ratelimit *rl, const struct addr *key, uint64_t now_us);
/* The same, only while keep tokens would remain after it: for uses of
 * less weight than others of the same bucket. */
bool rl_allow_keep(struct ratelimit *rl, const struct addr *key, uint64_t now_us, double keep);

size_t rl_count(const struct ratelimit *rl);

#endif
