#ifndef SLOT_SELCACHE_H
#define SLOT_SELCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* The outcome of relay selection per server address, reused until it
 * expires, so that only the first connection to a server pays for probing
 * (the paper tied this to the DNS TTL; slotd uses a configured TTL).
 *
 * An entry's key is an endpoint. Port 0 stands for every port of the
 * address: the selection's outcome (a relay, or "direct is best"). A key
 * with a port holds what one port said (a refusal): it is about that port
 * only, and a lookup finds it before the address's entry. What a failure
 * means for the cache is the caller's to judge; this module only keeps
 * entries.
 *
 * Bounded: when full, the entry put longest ago is evicted (entries of one
 * kind share one TTL, so that is about the first to expire). */

enum selc_choice { SELC_DIRECT = 0, SELC_RELAY };

/* Why an entry says what it says. */
enum selc_why {
	SELC_SELECTED = 0,	/* address: the selection chose this (relay, or direct) */
	SELC_REFUSED,		/* port, direct: the server refused the port (RST) */
	SELC_POLICY_PORT,	/* port, direct: the relay's policy refuses the port */
};

/* Ports a relay entry remembers as reached (LRU beyond that). */
#define SELC_REACHED_MAX 8
/* Relays after the first on a cached chain (select.h's SEL_MAX_CHAIN - 1). */
#define SELC_NEXT_MAX 2

struct selc_entry {
	enum selc_choice choice;
	enum selc_why why;
	struct endpoint relay;		/* SELC_RELAY: the relay's control endpoint (a
					 * chain's first) */
	struct endpoint next[SELC_NEXT_MAX];	/* a chain: the relays after it */
	unsigned nnext;
	uint32_t path_rtt_us;		/* the path RTT measured at selection */
	uint64_t made_us;		/* monotonic; set by selc_put */
	uint64_t expires_us;		/* monotonic; set by selc_put */
	/* SELC_RELAY: the server's ports this relay connected to (PIPE_OK)
	 * since the entry was made, most recent first, 0 after the last one.
	 * Cleared by selc_put. */
	uint16_t reached[SELC_REACHED_MAX];
};

struct selcache;

/* NULL with errno EINVAL (capacity 0) or ENOMEM. */
struct selcache *selc_new(size_t capacity);
void selc_free(struct selcache *c);

/* Inserts or replaces the entry of key (port 0: the address), made at
 * now_us and expiring at now_us + ttl_us, with no port reached. A port key
 * also drops that port from the reached ports of its address's entry (it
 * says the port is not served through the relay now). Returns 0, or -1 on
 * allocation failure. */
int selc_put(struct selcache *c, const struct endpoint *key, const struct selc_entry *e,
    uint64_t now_us, uint64_t ttl_us);

/* True with *out filled if server (an address and port) has an unexpired
 * entry: the port's own, else the address's. Expired entries met on the way
 * are removed. */
bool selc_get(struct selcache *c, const struct endpoint *server, uint64_t now_us,
    struct selc_entry *out);

/* True if e reached port (e being a relay entry). */
bool selc_reached(const struct selc_entry *e, uint16_t port);

/* Notes that relay connected to server (PIPE_OK): server's port goes to the
 * front of the reached ports of its address's entry, if that entry is
 * unexpired and through relay; the entry's lifetime does not change.
 * Returns true if noted. */
bool selc_mark_reached(struct selcache *c, const struct endpoint *server,
    const struct endpoint *relay, uint64_t now_us);

/* Forgets key's entry (exactly that key); with relay non-NULL only if the
 * entry goes through relay (a newer decision may have replaced it). Returns
 * true if one went. */
bool selc_invalidate(struct selcache *c, const struct endpoint *key,
    const struct endpoint *relay);

/* Forgets every entry that uses relay, anywhere on its chain (it left the
 * relay set or its control connection died). Returns how many went. */
size_t selc_invalidate_relay(struct selcache *c, const struct endpoint *relay);

/* Forgets the entries of server, the address's and its ports', or with
 * server NULL every entry. Returns how many went. */
size_t selc_flush(struct selcache *c, const struct addr *server);

size_t selc_count(const struct selcache *c);

/* Calls fn for every entry, expired ones included, in the order they were
 * put (for the control socket); key's port is 0 for an address's entry.
 * fn must not change c. */
void selc_walk(const struct selcache *c, void (*fn)(void *arg, const struct endpoint *key,
    const struct selc_entry *e), void *arg);

#endif
