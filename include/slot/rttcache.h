#ifndef SLOT_RTTCACHE_H
#define SLOT_RTTCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* Measured RTTs to (address, port), with the outcome of the measurement
 * (a PROBE_ST_* value), so failures are cached too. Bounded: when full the
 * oldest entry goes. */

struct rttcache;

struct rttcache *rttc_new(size_t capacity);
void rttc_free(struct rttcache *c);

/* True if e has an entry measured less than ttl_us ago. */
bool rttc_get(struct rttcache *c, const struct endpoint *e, uint64_t now_us,
    uint64_t ttl_us, uint32_t *rtt_us, uint8_t *status);

/* Inserts or refreshes; returns 0, or -1 on allocation failure. */
int rttc_put(struct rttcache *c, const struct endpoint *e, uint32_t rtt_us,
    uint8_t status, uint64_t now_us);

size_t rttc_count(const struct rttcache *c);

/* Calls fn for every entry, expired ones included, oldest measurement
 * first (for the control socket). fn must not change c. */
void rttc_walk(const struct rttcache *c, void (*fn)(void *arg, const struct endpoint *e,
    uint32_t rtt_us, uint8_t status, uint64_t measured_us), void *arg);

#endif
