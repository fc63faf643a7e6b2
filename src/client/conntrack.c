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
#include "conntrack.h"

/* A request is ~100 bytes; an error answer echoes it. */
#define CONNTRACK_BUF 8192

struct status_ans {
	bool found;
	uint32_t status;
};

struct conntrack {
	struct mnl_socket *nl;
	uint32_t portid;
	uint32_t seq;
};

struct conntrack *
conntrack_open(char *err, size_t errlen)
{
	struct conntrack *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	if ((c->nl = mnl_socket_open(NETLINK_NETFILTER)) == NULL ||
	    mnl_socket_bind(c->nl, 0, MNL_SOCKET_AUTOPID) == -1) {
		errbuf_set(err, errlen, "conntrack netlink socket: %s", strerror(errno));
		conntrack_close(c);
		return NULL;
	}
	c->portid = mnl_socket_get_portid(c->nl);
	c->seq = arc4random();
	return c;
}

void
conntrack_close(struct conntrack *c)
{
	if (c == NULL)
		return;
	if (c->nl)
		mnl_socket_close(c->nl);
	free(c);
}

size_t
conntrack_build(void *buf, size_t cap, uint32_t seq, bool get, const struct endpoint *client,
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
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) |
	    (get ? IPCTNL_MSG_CT_GET : IPCTNL_MSG_CT_DELETE);
	/* A get is answered by the entry or by an error, never both. */
	nlh->nlmsg_flags = get ? NLM_F_REQUEST : NLM_F_REQUEST | NLM_F_ACK;
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

static int
status_attr(const struct nlattr *attr, void *data)
{
	if (mnl_attr_get_type(attr) == CTA_STATUS &&
	    mnl_attr_validate(attr, MNL_TYPE_U32) == 0)
		*(uint32_t *)data = ntohl(mnl_attr_get_u32(attr));
	return MNL_CB_OK;
}

static int
status_cb(const struct nlmsghdr *nlh, void *data)
{
	struct status_ans *a = data;

	if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), status_attr, &a->status) < 0)
		return MNL_CB_ERROR;
	a->found = true;
	return MNL_CB_OK;
}

/* One request, its answer: 0, or -1 with errno. With ans, a get whose
 * entry is parsed into it. */
static int
request(struct conntrack *c, const struct endpoint *client, const struct endpoint *server,
    struct status_ans *ans)
{
	/* Zeroed: valgrind found uninitialised bytes sent in the request (the
	 * nests' padding, whatever libmnl's version leaves). */
	char buf[CONNTRACK_BUF] = { 0 };
	uint32_t seq = ++c->seq;
	size_t len = conntrack_build(buf, sizeof(buf), seq, ans != NULL, client, server);
	ssize_t n;

	if (len == 0) {
		errno = EAFNOSUPPORT;
		return -1;
	}
	if (mnl_socket_sendto(c->nl, buf, len) < 0)
		return -1;
	/* The kernel answers at once: the entry (a get) or an error message,
	 * 0 or not. Answers to earlier requests that timed out are skipped
	 * by seq. */
	for (;;) {
		n = mnl_socket_recvfrom(c->nl, buf, sizeof(buf));
		if (n < 0)
			return -1;
		int rc = mnl_cb_run(buf, (size_t)n, seq, c->portid, ans ? status_cb : NULL, ans);
		if (rc == -1 && errno == EPROTO)
			continue;	/* an older request's answer */
		if (rc < 0)
			return -1;
		if (ans != NULL && !ans->found) {
			errno = EPROTO;
			return -1;
		}
		return 0;
	}
}

int
conntrack_delete(struct conntrack *c, const struct endpoint *client,
    const struct endpoint *server)
{
	return request(c, client, server, NULL);
}

int
conntrack_status(struct conntrack *c, const struct endpoint *client,
    const struct endpoint *server, uint32_t *status)
{
	struct status_ans a = { false, 0 };

	if (request(c, client, server, &a) == -1)
		return -1;
	*status = a.status;
	return 0;
}
