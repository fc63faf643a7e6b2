#ifndef SLOT_RELAY_NEXTHOPS_H
#define SLOT_RELAY_NEXTHOPS_H

#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* The relays a chain may name as next hops ([chain] next_hops = listed):
 * those of the directory's latest listing, each at the data port it
 * registered. A hop's control connection proves it is a relay of our CA,
 * but nothing proves its data port, which the request names: checked
 * against the listing, a chain cannot make this relay connect to another
 * port of a relay's host (its ssh, its stats, a second service). */

struct nexthops;

enum nexthop_verdict {
	NEXTHOP_LISTED,		/* listed, at this data port */
	NEXTHOP_UNLISTED,	/* not listed (or no listing yet) */
	NEXTHOP_OTHER_PORT,	/* listed with another data port */
};

struct nexthops *nexthops_new(void);
void nexthops_free(struct nexthops *h);
/* Replaces the listing: relay i's control endpoint ctl[i], its data port
 * data_port[i]. Returns 0, or -1 (out of memory: the old one stays). */
int nexthops_set(struct nexthops *h, const struct endpoint *ctl, const uint16_t *data_port,
    size_t n);
/* Whether a listing came (none: every hop is unlisted). */
int nexthops_have_listing(const struct nexthops *h);
enum nexthop_verdict nexthops_check(const struct nexthops *h, const struct endpoint *ctl,
    uint16_t data_port);

#endif
