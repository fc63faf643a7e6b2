#ifndef SLOT_SELCACHE_H
#define SLOT_SELCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* The outcome of relay selection per server address, reused until it
 * expires, so that only the first connection to a server pays for probing
 * (the paper tied this to the DNS TTL; slotd uses a configured TTL).
 * Negative entries ("direct is best") are cached too. An entry is dropped
 * when a pipe through its relay fails, or when the relay goes away.
 * Bounded: when full, the entry put longest ago is evicted (with one TTL for
 * every entry, as slotd uses, that is the first to expire). */

enum selc_choice { SELC_DIRECT = 0, SELC_RELAY };

struct selc_entry {
	enum selc_choice choice;
	struct endpoint relay;		/* SELC_RELAY: the relay's control endpoint */
	uint32_t path_rtt_us;		/* the path RTT measured at selection */
	uint64_t expires_us;		/* monotonic */
};

struct selcache;

/* NULL with errno EINVAL (capacity 0) or ENOMEM. */
struct selcache *selc_new(size_t capacity);
void selc_free(struct selcache *c);

/* Inserts or replaces the entry of server, expiring at now_us + ttl_us.
 * Returns 0, or -1 on allocation failure. */
int selc_put(struct selcache *c, const struct addr *server, const struct selc_entry *e,
    uint64_t now_us, uint64_t ttl_us);

/* True with *out filled if server has an unexpired entry. An expired entry
 * is removed. */
bool selc_get(struct selcache *c, const struct addr *server, uint64_t now_us,
    struct selc_entry *out);

/* Forgets server (a pipe to it through the cached relay failed). */
void selc_invalidate(struct selcache *c, const struct addr *server);

/* Forgets every entry that uses relay (it left the relay set or its control
 * connection died). Returns how many went. */
size_t selc_invalidate_relay(struct selcache *c, const struct endpoint *relay);

size_t selc_count(const struct selcache *c);

/* Calls fn for every entry, expired ones included, in the order they were
 * put (for the control socket). fn must not change c. */
void selc_walk(const struct selcache *c, void (*fn)(void *arg, const struct addr *server,
    const struct selc_entry *e), void *arg);

#endif
