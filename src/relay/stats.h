#ifndef SLOT_RELAY_STATS_H
#define SLOT_RELAY_STATS_H

#include <stddef.h>

#include "relay.h"

/* Counters over a unix socket, for slotctl: a client sends one command line,
 * "counters" (text: "name value" lines) or "json" (one object), and reads
 * the answer until EOF. */

/* fd: the listening unix socket (owned from now on). NULL on failure. */
struct stats_srv *stats_start(struct relay *r, int fd);
void stats_stop(struct stats_srv *s);

/* Formats the counters; json selects the format. Returns the length
 * (truncated to cap - 1). */
size_t stats_format(const struct relay *r, int json, char *buf, size_t cap);

#endif
