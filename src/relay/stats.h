#ifndef SLOT_RELAY_STATS_H
#define SLOT_RELAY_STATS_H

#include <stddef.h>

#include "slot/ctlsrv.h"
#include "relay.h"

/* Counters over a unix socket, for slotctl: a client sends one command line,
 * "counters" (text: "name value" lines) or "json" (one object), and reads
 * the answer until EOF. */

/* The control socket's handler (slot/ctlsrv.h); user is the relay. */
void stats_handle(void *user, const char *cmd, struct ctl_out *out);

/* Formats the counters; json selects the format. Returns the length
 * (truncated to cap - 1). */
size_t stats_format(const struct relay *r, int json, char *buf, size_t cap);

#endif
