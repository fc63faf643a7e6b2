#ifndef SLOT_DIRECTORY_DSTATS_H
#define SLOT_DIRECTORY_DSTATS_H

#include <stdint.h>

#include "slot/ctlsrv.h"
#include "dhttp.h"
#include "dird.h"

/* slot-dird's answers on its control socket (docs/slotctl.md): status,
 * relays (registered, with group, age and RTT reports), counters, metrics
 * (Prometheus), and the first version's json, one object {"counters":
 * {...}, "version": ..., "relays": [...]}. Each but metrics and json in
 * text or, with " json" after the command, JSON. id: who answers; hc: the
 * HTTP side's counters (dhttp_counters). Runs on the loop's thread, which
 * is the one that writes d->conf. */
void dstats_answer(const struct ctl_ident *id, struct dird *d, const struct dhttp_counters *hc,
    const char *cmd, struct ctl_out *out);

#endif
