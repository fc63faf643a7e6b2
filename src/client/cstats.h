#ifndef SLOT_CLIENT_CSTATS_H
#define SLOT_CLIENT_CSTATS_H

#include <stddef.h>

#include "slot/ctlsrv.h"
#include "client.h"

/* slotd's answers on its control socket (docs/slotctl.md): status, pipes
 * (connections held or relayed lately), cache (the selection cache),
 * relays, rules (its chains as the kernel holds them), counters, metrics
 * (Prometheus), and the first version's json (counters, directory, relays
 * and recent decisions in one object). Each but metrics and json in text
 * or, with " json" after the command, JSON. */

/* The control socket's handler (slot/ctlsrv.h); user is the slotd. Also
 * the metrics listener's. */
void cstats_handle(void *user, const char *cmd, struct ctl_out *out);

#endif
