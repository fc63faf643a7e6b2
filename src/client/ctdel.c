#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include "slot/errbuf.h"
#include "ctdel.h"

/* A request is ~100 bytes; an error answer echoes it. */
#define CTDEL_BUF 8192

struct ctdel {
	struct mnl_socket *nl;
	uint32_t portid;
	uint32_t seq;
};

struct ctdel *
ctdel_open(char *err, size_t errlen)
{
	struct ctdel *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	if ((c->nl = mnl_socket_open(NETLINK_NETFILTER)) == NULL ||
	    mnl_socket_bind(c->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		errbuf_set(err, errlen, "conntrack netlink socket: %s", strerror(errno));
		ctdel_close(c);
		return NULL;
	}
	c->portid = mnl_socket_get_portid(c->nl);
	c->seq = arc4random();
	return c;
}

void
ctdel_close(struct ctdel *c)
{
	if (c == NULL)
		return;
	if (c->nl)
		mnl_socket_close(c->nl);
	free(c);
}

size_t
ctdel_build(void *buf, size_t cap, uint32_t seq, const struct endpoint *client,
    const struct endpoint *server)
{
	int fam = client->addr.family;
	struct nlmsghdr *nlh;
	struct nfgenmsg *nfg;
	struct nlattr *tuple, *ip, *proto;

	/* libmnl zeroes headers and padding as it puts them. */
	if (fam != server->addr.family || (fam != AF_INET && fam != AF_INET6) || cap < 256)
		return 0;
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = (uint8_t)fam;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = 0;
	tuple = mnl_attr_nest_start(nlh, CTA_TUPLE_ORIG);
	ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
	if (fam == AF_INET) {
		mnl_attr_put(nlh, CTA_IP_V4_SRC, 4, client->addr.bytes);
		mnl_attr_put(nlh, CTA_IP_V4_DST, 4, server->addr.bytes);
	} else {
		mnl_attr_put(nlh, CTA_IP_V6_SRC, 16, client->addr.bytes);
		mnl_attr_put(nlh, CTA_IP_V6_DST, 16, server->addr.bytes);
	}
	mnl_attr_nest_end(nlh, ip);
	proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
	mnl_attr_put_u8(nlh, CTA_PROTO_NUM, IPPROTO_TCP);
	mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(client->port));
	mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(server->port));
	mnl_attr_nest_end(nlh, proto);
	mnl_attr_nest_end(nlh, tuple);
	return nlh->nlmsg_len;
}

int
ctdel_tcp(struct ctdel *c, const struct endpoint *client, const struct endpoint *server)
{
	/* Zeroed: valgrind found uninitialised bytes sent in the request (the
	 * nests' padding, whatever libmnl's version leaves). */
	char buf[CTDEL_BUF] = { 0 };
	uint32_t seq = ++c->seq;
	size_t len = ctdel_build(buf, sizeof(buf), seq, client, server);
	ssize_t n;

	if (len == 0) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (mnl_socket_sendto(c->nl, buf, len) < 0)
		return -1;
	/* The kernel answers at once (NLM_F_ACK): an error message, 0 or not.
	 * Answers to earlier requests that timed out are skipped by seq. */
	for (;;) {
		n = mnl_socket_recvfrom(c->nl, buf, sizeof(buf));
		if (n < 0)
			return -1;
		int rc = mnl_cb_run(buf, (size_t)n, seq, c->portid, NULL, NULL);
		if (rc == -1 && errno == EPROTO)
			continue;	/* an older request's answer */
		return rc < 0 ? -1 : 0;
	}
}
