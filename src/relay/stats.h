#ifndef SLOT_RELAY_STATS_H
#define SLOT_RELAY_STATS_H

#include <stddef.h>

#include "slot/ctlsrv.h"
#include "relay.h"

/* slot-relayd's answers on its control socket (docs/slotctl.md): status,
 * pipes, cache (the RTT cache), relays (the directory's other relays, as
 * measured), counters, metrics (Prometheus), and the first version's json
 * (the counters as one flat object) and peers ("endpoint rtt samples"
 * lines). Each but metrics, json and peers in text or, with " json" after
 * the command, JSON. */

/* The control socket's handler (slot/ctlsrv.h); user is the relay. Also
 * the metrics listener's. */
void stats_handle(void *user, const char *cmd, struct ctl_out *out);

#endif
