#ifndef SLOT_CLIENT_CSTATS_H
#define SLOT_CLIENT_CSTATS_H

#include "slot/ctlsrv.h"
#include "client.h"

/* slotd's answers on its control socket: "counters" (text, "name value"
 * lines), "json" (counters, relays and recent decisions in one object). */
void cstats_handle(void *user, const char *cmd, struct ctl_out *out);

#endif
