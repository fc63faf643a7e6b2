#ifndef SLOT_RELAY_POLICY_H
#define SLOT_RELAY_POLICY_H

#include <stdbool.h>
#include <stddef.h>

#include "slot/addr.h"

/* Where the relay agrees to connect. Special-purpose addresses (loopback,
 * link-local, private, reserved) are refused unless an allow CIDR covers
 * them, so that a relay cannot be used to reach the network behind it; its
 * own addresses, multicast, broadcast and deny CIDRs are refused always; the
 * port must be in the allowed set. Its own addresses are the interfaces'
 * (getifaddrs) and those the operator names ([policy] public_address): a
 * cloud VM's public address behind 1:1 NAT is on no interface. */

struct policy {
	struct portset ports;
	struct cidr_list allow;
	struct cidr_list deny;
	struct addr *self;	/* the host's own addresses (interfaces) */
	size_t nself;
	struct cidr_list public;	/* and those it is reached at (NAT) */
};

enum policy_verdict {
	POLICY_OK = 0,
	POLICY_ADDR,	/* address refused */
	POLICY_PORT,	/* port not allowed */
};

void policy_init(struct policy *p);
void policy_free(struct policy *p);

/* Reads the host's addresses (getifaddrs) into p->self. Returns 0 or -1. */
int policy_load_self(struct policy *p);

enum policy_verdict policy_check(const struct policy *p, const struct endpoint *dst);
/* The address part alone, this host's own addresses aside (a next relay of a
 * chain: its port is a relay's, not one of the servers' allowed ports, and
 * another relay may run on this host). */
enum policy_verdict policy_check_addr(const struct policy *p, const struct addr *a);

/* Whether a is one of the host's own addresses. */
bool policy_is_self(const struct policy *p, const struct addr *a);

#endif
