#ifndef SLOT_CLIENT_CONNTRACK_H
#define SLOT_CLIENT_CONNTRACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* One TCP connection's conntrack entry, over ctnetlink (libmnl): forgets it,
 * so that the next SYN of that connection is a new one (slotd's way back to
 * the direct path for a SYN it had already sent towards a relay whose pipe
 * then failed, docs/slotd.md, "Cold decisions"), or reads its status. The
 * entry is named by its original tuple: the client's endpoint and the
 * server's, as the SYN left the client, before the DNAT to the relay. */

struct conntrack;

/* NULL with a reason in err. */
struct conntrack *conntrack_open(char *err, size_t errlen);
void conntrack_close(struct conntrack *c);

/* Returns 0 when deleted, or -1 with errno (ENOENT: no such entry). */
int conntrack_delete(struct conntrack *c, const struct endpoint *client,
    const struct endpoint *server);

/* The entry's IPS_* status bits into *status: 0, or -1 with errno (ENOENT:
 * no such entry in the table). Used to tell which NAT a reused entry
 * binds a new SYN to. */
int conntrack_status(struct conntrack *c, const struct endpoint *client,
    const struct endpoint *server, uint32_t *status);

/* The request alone (a delete, or with get the status query), into buf
 * (cap bytes, at least 256): for the tests. Returns its length, or 0 if
 * the endpoints' families differ or are neither IPv4 nor IPv6. */
size_t conntrack_build(void *buf, size_t cap, uint32_t seq, bool get,
    const struct endpoint *client, const struct endpoint *server);

#endif
