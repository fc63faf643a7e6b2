#ifndef SLOT_RELAY_IWBPF_H
#define SLOT_RELAY_IWBPF_H

#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* The kernel side of learned initial windows: a BPF sock_ops program,
 * attached to the relay's own cgroup, that gives a connection the initial
 * window of its peer's prefix in a map the relay fills (TCP_BPF_IW, once
 * the handshake is done and before any data went out). It acts on the
 * relay's connections only: those of its cgroup (which iwbpf_open checks
 * the relay is alone in), and of these on the passive side only the ones
 * accepted on the data port. Nothing else on the host changes: no route,
 * no rule, no sysctl.
 *
 * Loading and attaching need CAP_BPF and CAP_NET_ADMIN, at start only; the
 * map is then written through its descriptor, which needs no capability
 * (Linux 6.5 and later; iwbpf_check tells). The attachment is a BPF link
 * held by a descriptor: it ends with the process, even killed by SIGKILL,
 * so nothing is ever left installed. */

struct iwbpf;

/* Creates the map (room for max_prefixes), loads the program and attaches
 * it to the cgroup of this process. NULL with the reason in err. */
struct iwbpf *iwbpf_open(uint16_t data_port, size_t max_prefixes, char *err, size_t errlen);

/* After privileges were dropped: can the map still be written? 0, or -1
 * with the reason in err. */
int iwbpf_check(struct iwbpf *b, char *err, size_t errlen);

/* Sets or removes the window of prefix/plen. 0, or -1 with errno. */
int iwbpf_set(struct iwbpf *b, const struct addr *prefix, unsigned plen, uint32_t iw);
int iwbpf_del(struct iwbpf *b, const struct addr *prefix, unsigned plen);

/* Connections the program gave a learned window. */
unsigned long long iwbpf_applied(const struct iwbpf *b);
size_t iwbpf_capacity(const struct iwbpf *b);

/* Detaches the program (closes the link) and frees. NULL is fine. */
void iwbpf_close(struct iwbpf *b);

#endif
