#ifndef SLOT_DIRECTORY_DSTATS_H
#define SLOT_DIRECTORY_DSTATS_H

#include <stdint.h>

#include "slot/ctlsrv.h"
#include "dhttp.h"
#include "dird.h"

/* slot-dird's answers on the counters socket: "counters" gives "name value"
 * lines, "json" one object {"counters": {...}, "version": ..., "relays":
 * [...]}. hc: the HTTP side's counters (dhttp_counters). */
void dstats_answer(struct dird *d, const struct dhttp_counters *hc, const char *cmd,
    struct ctl_out *out);

#endif
