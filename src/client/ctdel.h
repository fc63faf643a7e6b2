#ifndef SLOT_CLIENT_CTDEL_H
#define SLOT_CLIENT_CTDEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* Forgets one TCP connection's conntrack entry (ctnetlink, libmnl), so that
 * the next SYN of that connection is a new one: slotd's way back to the
 * direct path for a SYN it had already sent towards a relay whose pipe then
 * failed (docs/slotd.md, "Cold decisions"). The entry is named by its
 * original tuple: the client's endpoint and the server's, as the SYN left
 * the client, before the DNAT to the relay. It can also read an entry's
 * status. */

struct ctdel;

/* NULL with a reason in err. */
struct ctdel *ctdel_open(char *err, size_t errlen);
void ctdel_close(struct ctdel *c);

/* Returns 0 when deleted, or -1 with errno (ENOENT: no such entry). */
int ctdel_tcp(struct ctdel *c, const struct endpoint *client, const struct endpoint *server);

/* The entry's IPS_* status bits into *status: 0, or -1 with errno (ENOENT:
 * no such entry in the table). Used to tell which NAT a reused entry
 * binds a new SYN to. */
int ctdel_status(struct ctdel *c, const struct endpoint *client, const struct endpoint *server,
    uint32_t *status);

/* The request alone (a delete, or with get the status query), into buf
 * (cap bytes, at least 256): for the tests. Returns its length, or 0 if
 * the endpoints' families differ or are neither IPv4 nor IPv6. */
size_t ctdel_build(void *buf, size_t cap, uint32_t seq, bool get,
    const struct endpoint *client, const struct endpoint *server);

#endif
