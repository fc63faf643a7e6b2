#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"

void
policy_init(struct policy *p)
{
	memset(p, 0, sizeof(*p));
	/* Default: every port. */
	memset(p->ports.bits, 0xff, sizeof(p->ports.bits));
	p->ports.bits[0] &= (uint8_t)~1u;	/* port 0 is never valid */
}

void
policy_free(struct policy *p)
{
	cidr_list_free(&p->allow);
	cidr_list_free(&p->deny);
	cidr_list_free(&p->public);
	free(p->self);
	p->self = NULL;
	p->nself = 0;
}

int
policy_load_self(struct policy *p)
{
	struct ifaddrs *ifa, *i;
	struct addr *v;
	size_t n = 0;
	struct endpoint ep;

	if (getifaddrs(&ifa) == -1)
		return -1;
	for (i = ifa; i; i = i->ifa_next)
		if (i->ifa_addr && (i->ifa_addr->sa_family == AF_INET ||
		    i->ifa_addr->sa_family == AF_INET6))
			n++;
	v = calloc(n ? n : 1, sizeof(*v));
	if (v == NULL) {
		freeifaddrs(ifa);
		return -1;
	}
	n = 0;
	for (i = ifa; i; i = i->ifa_next) {
		if (i->ifa_addr == NULL)
			continue;
		socklen_t len = i->ifa_addr->sa_family == AF_INET ?
		    sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
		if (ep_from_sockaddr(i->ifa_addr, len, &ep) == 0)
			v[n++] = ep.addr;
	}
	freeifaddrs(ifa);
	free(p->self);
	p->self = v;
	p->nself = n;
	return 0;
}

bool
policy_is_self(const struct policy *p, const struct addr *a)
{
	for (size_t i = 0; i < p->nself; i++)
		if (addr_eq(&p->self[i], a))
			return true;
	return cidr_list_match(&p->public, a);
}

enum policy_verdict
policy_check_addr(const struct policy *p, const struct addr *a)
{
	if (cidr_list_match(&p->deny, a))
		return POLICY_ADDR;
	if (addr_classify(a) != 0 && !cidr_list_match(&p->allow, a))
		return POLICY_ADDR;
	/* Multicast and broadcast cannot carry TCP even when allowed. */
	if (addr_classify(a) & (ADDR_C_MULTICAST | ADDR_C_BROADCAST | ADDR_C_UNSPECIFIED))
		return POLICY_ADDR;
	return POLICY_OK;
}

enum policy_verdict
policy_check(const struct policy *p, const struct endpoint *dst)
{
	/* Relaying to itself would loop; no allow entry overrides that. */
	if (policy_is_self(p, &dst->addr) || policy_check_addr(p, &dst->addr) != POLICY_OK)
		return POLICY_ADDR;
	if (!portset_has(&p->ports, dst->port))
		return POLICY_PORT;
	return POLICY_OK;
}
