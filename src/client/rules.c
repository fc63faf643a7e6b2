#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "slot/errbuf.h"
#include "slot/sock.h"
#include "rules.h"

/* iptables' multiport takes 15 ports, a range counting as two. */
#define MULTIPORT_SLOTS 15

struct out {
	char *buf;
	size_t cap, len;
	int overflow;
};

static void __attribute__((format(printf, 2, 3)))
put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->overflow)
		return;
	va_start(ap, fmt);
	n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= o->cap - o->len)
		o->overflow = 1;
	else
		o->len += (size_t)n;
}

static const char *
cidr_fmt(const struct cidr *c, char *buf)
{
	char a[ADDR_STRLEN];

	snprintf(buf, ADDR_STRLEN + 5, "%s/%u", addr_fmt(&c->addr, a), c->plen);
	return buf;
}

typedef char port_list[128];

/* The port set as multiport lists of at most MULTIPORT_SLOTS slots each
 * ("" alone for "every port"), in *out (to free). Returns how many, 0 for
 * no port, or (size_t)-1 if out of memory. */
static size_t
port_lists(const struct portset *ps, port_list **out)
{
	size_t nl = 0, slots = 0, nranges = 0;
	unsigned p = 1;
	int all = 1;
	port_list *lists;

	for (unsigned q = 1; q <= 65535; q++) {
		int in = portset_has(ps, (uint16_t)q);
		if (!in)
			all = 0;
		else if (q == 1 || !portset_has(ps, (uint16_t)(q - 1)))
			nranges++;
	}
	/* Every range takes at most one list of its own. */
	if ((*out = lists = calloc(nranges ? nranges : 1, sizeof(*lists))) == NULL)
		return (size_t)-1;
	if (all)
		return 1;
	while (p <= 65535) {
		if (!portset_has(ps, (uint16_t)p)) {
			p++;
			continue;
		}
		unsigned e = p;
		while (e < 65535 && portset_has(ps, (uint16_t)(e + 1)))
			e++;
		unsigned need = e > p ? 2 : 1;
		if (nl == 0 || slots + need > MULTIPORT_SLOTS) {
			lists[nl++][0] = '\0';
			slots = 0;
		}
		char *l = lists[nl - 1];
		size_t len = strlen(l);
		if (e > p)
			snprintf(l + len, 128 - len, "%s%u:%u", slots ? "," : "", p, e);
		else
			snprintf(l + len, 128 - len, "%s%u", slots ? "," : "", p);
		slots += need;
		p = e + 1;
	}
	return nl;
}

bool
rules_ifname_ok(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n >= RULES_IFNAME_MAX)
		return false;
	for (const char *p = name; *p; p++)
		if (!isalnum((unsigned char)*p) && strchr(".-_@", *p) == NULL)
			return false;
	return true;
}

static unsigned
mode_of(const struct rules_conf *c)
{
	return c->mode ? c->mode : RULES_LOCAL;
}

bool
rules_cgroup_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 200)
		return false;
	for (const char *p = s; *p;) {
		size_t part = strcspn(p, "/");
		if (part == 0 || (part == 1 && p[0] == '.') || (part == 2 && p[0] == '.' &&
		    p[1] == '.'))
			return false;
		for (size_t i = 0; i < part; i++)
			if (!isalnum((unsigned char)p[i]) && strchr("._-", p[i]) == NULL)
				return false;
		p += part;
		if (*p == '/' && *++p == '\0')
			return false;	/* a trailing '/' */
	}
	return true;
}

/* nft's socket cgroupv2 needs the path's depth. */
static unsigned
cgroup_level(const char *s)
{
	unsigned n = 1;

	for (; *s; s++)
		n += *s == '/';
	return n;
}

/* What both renderers refuse: marks that overlap or name no relay, a mode
 * outside the two, a gateway without (valid) LAN interfaces. */
static int
check_conf(const struct rules_conf *c, const struct rules_relay *r, size_t n)
{
	if (c->bypass_mark == 0 || (c->bypass_mark & c->relay_mask) != 0 ||
	    (c->mode & ~(RULES_LOCAL | RULES_GATEWAY)) != 0)
		return -1;
	if ((c->lib_mark & (c->lib_mark - 1)) != 0 ||
	    (c->lib_mark & (c->bypass_mark | c->relay_mask)) != 0)
		return -1;
	if (c->run_cgroup && (c->lib_mark == 0 || !rules_cgroup_ok(c->run_cgroup)))
		return -1;
	if ((c->mode & RULES_GATEWAY) && (c->nlan == 0 || c->nlan > RULES_LAN_MAX))
		return -1;
	for (size_t i = 0; (c->mode & RULES_GATEWAY) && i < c->nlan; i++)
		if (!rules_ifname_ok(c->lan[i]))
			return -1;
	for (size_t i = 0; i < n; i++)
		if ((c->family == AF_UNSPEC || r[i].data.addr.family == c->family) &&
		    (r[i].mark == 0 || (r[i].mark & ~c->relay_mask) != 0))
			return -1;
	return 0;
}

int
rules_render(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *buf, size_t cap)
{
	struct out o = { buf, cap, 0, 0 };
	port_list *lists = NULL;
	char cb[ADDR_STRLEN + 5], ab[ADDR_STRLEN];
	size_t nl;

	if ((c->family != AF_INET && c->family != AF_INET6) || check_conf(c, r, n) == -1 ||
	    cap == 0) {
		errno = EINVAL;
		return -1;
	}
	if ((nl = port_lists(c->ports, &lists)) == (size_t)-1) {
		errno = ENOMEM;
		return -1;
	}
	if (nl == 0) {
		free(lists);
		errno = EINVAL;	/* no port selected: nothing to hijack */
		return -1;
	}

	put(&o, "*mangle\n:%s - [0:0]\n-F %s\n", RULES_HIJACK, RULES_HIJACK);
	put(&o, "-A %s -m mark --mark 0x%x/0x%x -j RETURN\n", RULES_HIJACK,
	    c->bypass_mark, c->bypass_mark);
	for (size_t i = 0; c->exclude && i < c->exclude->n; i++)
		if (c->exclude->v[i].addr.family == c->family)
			put(&o, "-A %s -d %s -j RETURN\n", RULES_HIJACK,
			    cidr_fmt(&c->exclude->v[i], cb));
	/* A SYN that took over a closed connection's conntrack entry (reset
	 * from the other side: the kernel keeps the entry in CLOSE for 10 s and
	 * a new SYN on the tuple reuses it, NAT and all; it has seen a reply,
	 * or it has DNAT) is queued with bypass_mark set, which slotd never
	 * otherwise sees on a queued packet: the entry's NAT binds the SYN
	 * whatever the verdict (hold.c). Without reused_direct, DNAT ones
	 * only. */
	put(&o, "-A %s -p tcp --syn -m conntrack --ctstate %s -j MARK --or-mark 0x%x\n",
	    RULES_HIJACK, c->reused_direct ? "ESTABLISHED,DNAT" : "DNAT", c->bypass_mark);
	/* Offered by their program: any port, any destination not excluded. */
	if (c->lib_mark)
		put(&o, "-A %s -p tcp --syn -m mark --mark 0x%x/0x%x -j NFQUEUE --queue-num %u "
		    "--queue-bypass\n", RULES_HIJACK, c->lib_mark, c->lib_mark, c->queue);
	size_t ninc = c->include ? c->include->n : 0;
	for (size_t i = 0; i < (ninc ? ninc : 1); i++) {
		const char *dst = "";
		char d[ADDR_STRLEN + 10] = "";
		if (ninc) {
			if (c->include->v[i].addr.family != c->family)
				continue;
			snprintf(d, sizeof(d), " -d %s", cidr_fmt(&c->include->v[i], cb));
			dst = d;
		}
		for (size_t j = 0; j < nl; j++) {
			put(&o, "-A %s -p tcp --syn%s%s%s -j NFQUEUE --queue-num %u --queue-bypass\n",
			    RULES_HIJACK, dst, lists[j][0] ? " -m multiport --dports " : "",
			    lists[j], c->queue);
		}
	}
	free(lists);
	if (c->mode & RULES_GATEWAY) {
		put(&o, ":%s - [0:0]\n-F %s\n", RULES_GW, RULES_GW);
		for (size_t i = 0; i < c->nlan; i++)
			put(&o, "-A %s -i %s -j %s\n", RULES_GW, c->lan[i], RULES_HIJACK);
	}
	put(&o, ":%s - [0:0]\n-F %s\n", RULES_RUN, RULES_RUN);
	if (c->run_cgroup)
		put(&o, "-A %s -p tcp --syn -m cgroup --path %s -j MARK --or-mark 0x%x\n",
		    RULES_RUN, c->run_cgroup, c->lib_mark);
	put(&o, ":%s - [0:0]\n-F %s\n", RULES_SYNACK, RULES_SYNACK);
	for (size_t i = 0; c->synack && i < n; i++) {
		if (r[i].data.addr.family != c->family)
			continue;
		put(&o, "-A %s -s %s -p tcp --sport %u --tcp-flags SYN,ACK,RST,FIN SYN,ACK "
		    "-m conntrack --ctstate DNAT -j NFQUEUE --queue-num %u --queue-bypass\n",
		    RULES_SYNACK,
		    addr_fmt(&r[i].data.addr, ab), r[i].data.port, c->queue);
	}
	put(&o, "COMMIT\n*nat\n:%s - [0:0]\n-F %s\n", RULES_DNAT, RULES_DNAT);
	for (size_t i = 0; i < n; i++) {
		if (r[i].data.addr.family != c->family)
			continue;
		addr_fmt(&r[i].data.addr, ab);
		put(&o, c->family == AF_INET6 ?
		    "-A %s -p tcp -m mark --mark 0x%x/0x%x -j DNAT --to-destination [%s]:%u\n" :
		    "-A %s -p tcp -m mark --mark 0x%x/0x%x -j DNAT --to-destination %s:%u\n",
		    RULES_DNAT, r[i].mark, c->relay_mask, ab, r[i].data.port);
	}
	put(&o, "COMMIT\n");
	if (o.overflow) {
		errno = ENOSPC;
		return -1;
	}
	return (int)o.len;
}

/* The port set as nft set elements, "80, 443, 8000-8099", into o; nothing
 * for every port. Returns whether the set has every port, -1 if none. */
static int
nft_ports(const struct portset *ps, struct out *o)
{
	unsigned p = 1, nr = 0;

	if (ps == NULL)
		return -1;
	for (unsigned q = 1; q <= 65535 && nr == 0; q++)
		if (!portset_has(ps, (uint16_t)q))
			nr = 1;
	if (nr == 0)
		return 1;
	nr = 0;
	while (p <= 65535) {
		if (!portset_has(ps, (uint16_t)p)) {
			p++;
			continue;
		}
		unsigned e = p;
		while (e < 65535 && portset_has(ps, (uint16_t)(e + 1)))
			e++;
		if (e > p)
			put(o, "%s%u-%u", nr ? ", " : "", p, e);
		else
			put(o, "%s%u", nr ? ", " : "", p);
		nr++;
		p = e + 1;
	}
	return nr ? 0 : -1;
}

static bool
has_family(const struct cidr_list *l, int family)
{
	for (size_t i = 0; l && i < l->n; i++)
		if (l->v[i].addr.family == family)
			return true;
	return false;
}

/* "ip daddr { a, b }" of l's entries of family, in o (at least one). */
static void
nft_daddrs(const struct cidr_list *l, int family, struct out *o)
{
	char cb[ADDR_STRLEN + 5];
	size_t k = 0;

	for (size_t i = 0; l && i < l->n; i++) {
		if (l->v[i].addr.family != family)
			continue;
		put(o, "%s%s", k++ ? ", " : (family == AF_INET ? "ip daddr { " : "ip6 daddr { "),
		    cidr_fmt(&l->v[i], cb));
	}
	put(o, " }");
}

static void
nft_lan(const struct rules_conf *c, struct out *o)
{
	put(o, "iifname { ");
	for (size_t i = 0; i < c->nlan; i++)
		put(o, "%s\"%s\"", i ? ", " : "", c->lan[i]);
	put(o, " }");
}

int
rules_render_nft(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *buf, size_t cap)
{
	static const int fams[] = { AF_INET, AF_INET6 };
	struct out o = { buf, cap, 0, 0 };
	char ab[ADDR_STRLEN];
	/* Every other port, "1, 3, 5...": 32768 elements of up to 7 bytes. */
	struct out po = { NULL, 256 * 1024, 0, 0 };
	unsigned mode = mode_of(c);
	struct rules_conf both = *c;
	int all;

	both.family = AF_UNSPEC;	/* every relay goes in, whatever c says */
	if (check_conf(&both, r, n) == -1 || cap == 0) {
		errno = EINVAL;
		return -1;
	}
	if ((po.buf = malloc(po.cap)) == NULL)
		return -1;
	po.buf[0] = '\0';
	if ((all = nft_ports(c->ports, &po)) == -1 || po.overflow) {
		free(po.buf);
		errno = po.overflow ? ENOSPC : EINVAL;
		return -1;
	}
	/* Created if absent, so that the delete cannot fail; then made anew:
	 * one transaction, so the kernel goes from the old table to the new
	 * one and packets never see a half or an absent one. */
	put(&o, "table inet %s {}\ndelete table inet %s\ntable inet %s {\n",
	    RULES_NFT_TABLE, RULES_NFT_TABLE, RULES_NFT_TABLE);
	put(&o, "\tchain hijack {\n");
	put(&o, "\t\tmeta mark & 0x%x == 0x%x counter return\n", c->bypass_mark, c->bypass_mark);
	for (size_t f = 0; f < 2; f++) {
		if (!has_family(c->exclude, fams[f]))
			continue;
		put(&o, "\t\t");
		nft_daddrs(c->exclude, fams[f], &o);
		put(&o, " counter return\n");
	}
	put(&o, "\t\ttcp flags & (fin | syn | rst | ack) == syn ct status dnat "
	    "meta mark set meta mark | 0x%x\n", c->bypass_mark);
	if (c->reused_direct)
		put(&o, "\t\ttcp flags & (fin | syn | rst | ack) == syn ct state established "
		    "meta mark set meta mark | 0x%x\n", c->bypass_mark);
	if (c->lib_mark)
		put(&o, "\t\tmeta mark & 0x%x == 0x%x tcp flags & (fin | syn | rst | ack) == syn "
		    "counter queue num %u bypass\n", c->lib_mark, c->lib_mark, c->queue);
	if (c->run_cgroup)
		put(&o, "\t\tsocket cgroupv2 level %u \"%s\" tcp flags & (fin | syn | rst | ack) "
		    "== syn counter queue num %u bypass\n", cgroup_level(c->run_cgroup),
		    c->run_cgroup, c->queue);
	size_t ninc = c->include ? c->include->n : 0;
	for (size_t f = 0; f < (ninc ? 2 : 1); f++) {
		if (ninc && !has_family(c->include, fams[f]))
			continue;
		put(&o, "\t\t");
		if (ninc) {
			nft_daddrs(c->include, fams[f], &o);
			put(&o, " ");
		}
		put(&o, "tcp flags & (fin | syn | rst | ack) == syn ");
		if (!all)
			put(&o, "tcp dport { %s } ", po.buf);
		put(&o, "counter queue num %u bypass\n", c->queue);
	}
	free(po.buf);
	put(&o, "\t}\n\tchain to_relay {\n");
	for (size_t i = 0; i < n; i++) {
		int v6 = r[i].data.addr.family == AF_INET6;
		if (r[i].data.addr.family != AF_INET && !v6)
			continue;
		addr_fmt(&r[i].data.addr, ab);
		put(&o, v6 ? "\t\tmeta nfproto ipv6 meta l4proto tcp meta mark & 0x%x == 0x%x "
		    "counter dnat ip6 to [%s]:%u\n" : "\t\tmeta nfproto ipv4 meta l4proto tcp "
		    "meta mark & 0x%x == 0x%x counter dnat ip to %s:%u\n", c->relay_mask,
		    r[i].mark, ab, r[i].data.port);
	}
	put(&o, "\t}\n\tchain synack {\n");
	for (size_t i = 0; c->synack && i < n; i++) {
		int v6 = r[i].data.addr.family == AF_INET6;
		if (r[i].data.addr.family != AF_INET && !v6)
			continue;
		put(&o, "\t\t%s saddr %s tcp sport %u tcp flags & (fin | syn | rst | ack) == "
		    "syn | ack ct status dnat counter queue num %u bypass\n", v6 ? "ip6" : "ip",
		    addr_fmt(&r[i].data.addr, ab), r[i].data.port, c->queue);
	}
	put(&o, "\t}\n");
	if (mode & RULES_LOCAL) {
		put(&o, "\tchain in_synack {\n\t\ttype filter hook input priority mangle; "
		    "policy accept;\n\t\tjump synack\n\t}\n");
	}
	if (mode & RULES_GATEWAY) {
		put(&o, "\tchain fwd_synack {\n\t\ttype filter hook forward priority mangle; "
		    "policy accept;\n\t\tjump synack\n\t}\n");
	}
	if (mode & RULES_LOCAL) {
		put(&o, "\tchain out_queue {\n\t\ttype filter hook output priority mangle; "
		    "policy accept;\n\t\tjump hijack\n\t}\n");
		/* -100: iptables' nat OUTPUT (nft names dstnat for prerouting
		 * only). */
		put(&o, "\tchain out_nat {\n\t\ttype nat hook output priority -100; "
		    "policy accept;\n\t\tjump to_relay\n\t}\n");
	}
	if (mode & RULES_GATEWAY) {
		put(&o, "\tchain pre_queue {\n\t\ttype filter hook prerouting priority "
		    "mangle; policy accept;\n\t\t");
		nft_lan(c, &o);
		put(&o, " jump hijack\n\t}\n");
		put(&o, "\tchain pre_nat {\n\t\ttype nat hook prerouting priority "
		    "dstnat; policy accept;\n\t\t");
		nft_lan(c, &o);
		put(&o, " jump to_relay\n\t}\n");
	}
	put(&o, "}\n");
	if (o.overflow) {
		errno = ENOSPC;
		return -1;
	}
	return (int)o.len;
}

/* Whether family f is one that AF_UNSPEC stands for here. */
static bool
unspec_has(int family, int f)
{
	if (family != AF_UNSPEC)
		return family == f;
	/* Not where the kernel has no IPv6 (ipv6.disable=1). */
	return f == AF_INET || sock_has_family(AF_INET6);
}

void
rules_set_free(struct rules_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->job[i].text);
	memset(s, 0, sizeof(*s));
}

int
rules_set_render(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    enum rules_backend backend, struct rules_set *s)
{
	static const int fams[] = { AF_INET, AF_INET6 };
	struct rules_conf one = *c;

	memset(s, 0, sizeof(*s));
	for (size_t f = 0; f < 2; f++) {
		if (backend == RULES_IPTABLES && !unspec_has(c->family, fams[f]))
			continue;
		if (backend == RULES_NFT && f > 0)
			break;
		struct rules_job *j = &s->job[s->n];
		int len;
		if ((j->text = malloc(RULES_TEXT_MAX)) == NULL) {
			rules_set_free(s);
			errno = ENOMEM;
			return -1;
		}
		s->n++;
		one.family = fams[f];
		j->family = backend == RULES_NFT ? AF_UNSPEC : fams[f];
		len = backend == RULES_NFT ? rules_render_nft(c, r, n, j->text, RULES_TEXT_MAX) :
		    rules_render(&one, r, n, j->text, RULES_TEXT_MAX);
		if (len < 0) {
			int e = errno;
			rules_set_free(s);
			errno = e;
			return -1;
		}
		j->len = (size_t)len;
		char *small = realloc(j->text, j->len + 1);
		if (small)
			j->text = small;
	}
	return 0;
}

/* The most of a tool's output rules_list reads: iptables-save of a nat
 * table with a hundred thousand rules fits. */
#define CAPTURE_MAX (64u << 20)

/* A tool that outlives its -w wait by this much is killed. */
#define KILL_GRACE_MS 2000

static const struct rules_exec default_exec = { .iptables = "iptables",
    .wait_s = RULES_WAIT_DEFAULT };

static const struct rules_exec *
exec_or_default(const struct rules_exec *x)
{
	return x ? x : &default_exec;
}

/* The name of x's tool for family with suffix ("", "-restore", "-save") in
 * buf. Returns 0, or -1 if it does not fit. */
static int
rules_tool(const struct rules_exec *x, int family, const char *suffix, char *buf, size_t len)
{
	const char *name = x && x->iptables && x->iptables[0] ? x->iptables : "iptables";
	const char *base = strrchr(name, '/');
	size_t dir = base ? (size_t)(base + 1 - name) : 0;
	int n;

	base = name + dir;
	/* ip6tables, ip6tables-legacy...: the same family of tools for IPv6. */
	if (family == AF_INET6 && strncmp(base, "iptables", 8) == 0)
		n = snprintf(buf, len, "%.*sip6%s%s", (int)dir, name, base + 2, suffix);
	else
		n = snprintf(buf, len, "%s%s", name, suffix);
	if (n < 0 || (size_t)n >= len) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return 0;
}

int
rules_input_fd(const char *text, size_t len)
{
	int fd = memfd_create("slot-rules", MFD_CLOEXEC);

	if (fd == -1)
		return -1;
	while (len > 0) {
		ssize_t w = write(fd, text, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			close(fd);
			errno = e;
			return -1;
		}
		text += w;
		len -= (size_t)w;
	}
	if (lseek(fd, 0, SEEK_SET) == -1) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

int
rules_lock_holder(const char *lockfile, char *buf, size_t len)
{
	char line[256];
	struct stat st;
	FILE *f;
	int found = -1;

	buf[0] = '\0';
	if (lockfile == NULL || lockfile[0] == '\0')
		lockfile = getenv("XTABLES_LOCKFILE");
	if (lockfile == NULL || lockfile[0] == '\0')
		lockfile = RULES_XTABLES_LOCK;
	if (stat(lockfile, &st) == -1 || (f = fopen("/proc/locks", "re")) == NULL)
		return -1;
	/* "1: FLOCK  ADVISORY  WRITE 17353 fe:00:9773057 0 EOF"; a waiter's
	 * line has "->" after the number. */
	while (found == -1 && fgets(line, sizeof(line), f)) {
		char type[16], pidtok[24], dev[40];
		unsigned long long ino;
		long pid;
		if (sscanf(line, "%*s %15s %*s %*s %23s %39s", type, pidtok, dev) != 3 ||
		    strcmp(type, "FLOCK") != 0 || strcmp(pidtok, "->") == 0)
			continue;
		char *c = strrchr(dev, ':');
		if (c == NULL || sscanf(c + 1, "%llu", &ino) != 1 || ino != (unsigned long long)st.st_ino)
			continue;
		if ((pid = strtol(pidtok, NULL, 10)) <= 0)
			continue;
		found = (int)pid;
	}
	fclose(f);
	if (found <= 0)
		return -1;
	char path[64], comm[64] = "?";
	snprintf(path, sizeof(path), "/proc/%d/comm", found);
	if ((f = fopen(path, "re")) != NULL) {
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = '\0';
		fclose(f);
	}
	/* Outside our pid namespace the number means nothing here. */
	snprintf(buf, len, "pid %d (%s)", found, comm);
	return found;
}

bool
rules_lock_busy(int status, const char *msg)
{
	/* Status 4 is any "resource problem" (a lock file it may not open,
	 * too): the message tells the held lock apart. */
	return status == 4 && msg && strstr(msg, "holding the xtables lock") != NULL;
}

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Runs argv with input on its stdin (NULL: none), for at most deadline_ms
 * (then SIGKILL). Returns its exit status (0 = success), RULES_KILLED past
 * the deadline, RULES_SIGNALED if another signal ended it, or -1; its
 * output (stdout and stderr) goes into err (the start of it) and, with
 * capture, all of it into *capture (malloc'ed, NUL-terminated; NULL if out
 * of memory or beyond CAPTURE_MAX). */
static int
run_capture(char *const argv[], const char *input, int64_t deadline_ms, char *err,
    size_t errlen, char **capture)
{
	size_t caplen = 0, capcap = 0;
	int in = -1, errp[2], status;
	int64_t end = mono_ms() + deadline_ms;
	bool killed = false;
	pid_t pid;

	if (capture)
		*capture = NULL;
	/* A file, not a pipe: a tool that waits for the lock before reading
	 * cannot block us on a full pipe. */
	if (input && (in = rules_input_fd(input, strlen(input))) == -1)
		goto fail0;
	if (pipe2(errp, O_CLOEXEC) == -1)
		goto fail1;
	if ((pid = fork()) == -1)
		goto fail2;
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(in >= 0 ? in : null, 0);
		dup2(errp[1], 2);
		dup2(errp[1], 1);
		execvp(argv[0], argv);
		dprintf(2, "%s: %s", argv[0], strerror(errno));
		_exit(127);
	}
	if (in >= 0)
		close(in);
	close(errp[1]);
	size_t got = 0;
	char tmp[4096];
	for (;;) {
		struct pollfd pfd = { errp[0], POLLIN, 0 };
		int64_t left = end - mono_ms();
		if (left <= 0 && !killed) {
			kill(pid, SIGKILL);
			killed = true;
		}
		int pr = poll(&pfd, 1, killed ? -1 : (int)(left > 1000 ? 1000 : left));
		if (pr == -1 && errno != EINTR)
			break;
		if (pr <= 0)
			continue;
		ssize_t m = read(errp[0], tmp, sizeof(tmp));
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			break;
		if (err && got + 1 < errlen) {
			size_t k = (size_t)m < errlen - 1 - got ? (size_t)m : errlen - 1 - got;
			memcpy(err + got, tmp, k);
			got += k;
		}
		/* Past the bound or out of memory, read on (the tool must not
		 * block on a full pipe) but keep nothing: the caller says so. */
		if (capture && caplen != SIZE_MAX) {
			if (caplen + (size_t)m + 1 > capcap) {
				size_t nc = capcap ? capcap * 2 : 65536;
				while (nc < caplen + (size_t)m + 1)
					nc *= 2;
				char *b = nc <= CAPTURE_MAX ? realloc(*capture, nc) : NULL;
				if (b == NULL) {
					free(*capture);
					*capture = NULL;
					caplen = SIZE_MAX;
					continue;
				}
				*capture = b;
				capcap = nc;
			}
			memcpy(*capture + caplen, tmp, (size_t)m);
			caplen += (size_t)m;
			(*capture)[caplen] = '\0';
		}
	}
	close(errp[0]);
	if (capture && caplen == 0 && (*capture = strdup("")) == NULL)
		caplen = SIZE_MAX;
	if (err && errlen)
		err[got] = '\0';
	while (waitpid(pid, &status, 0) == -1)
		if (errno != EINTR)
			return -1;
	if (killed) {
		errbuf_set(err, errlen, "no answer within %lld ms: killed",
		    (long long)deadline_ms);
		return RULES_KILLED;
	}
	if (!WIFEXITED(status)) {
		int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
		errbuf_set(err, errlen, "killed by signal %d (%s)", sig, strsignal(sig));
		return RULES_SIGNALED;
	}
	return WEXITSTATUS(status);
fail2:
	close(errp[0]);
	close(errp[1]);
fail1:
	if (in >= 0)
		close(in);
fail0:
	errbuf_set(err, errlen, "cannot run %s: %s", argv[0], strerror(errno));
	return -1;
}

/* How long a tool may take: the xtables lock wait, then a grace. */
static int64_t
tool_deadline_ms(const struct rules_exec *x)
{
	return (int64_t)x->wait_s * 1000 + KILL_GRACE_MS;
}

/* run_capture with x's deadline, once more if a signal not ours ended the
 * tool: a stop under systemd's control-group kill signals every process of
 * the unit, and a tool forked while it does dies without an answer (a -C
 * read as "no jump" left the jump behind). Checks, removals, listings and
 * restores (each text flushes the chains it fills) may run twice; an
 * insert may not (see jump). */
static int
run_tool(const struct rules_exec *x, char *const argv[], const char *input, char *err,
    size_t errlen, char **capture)
{
	int64_t deadline = tool_deadline_ms(x);
	int rc = run_capture(argv, input, deadline, err, errlen, capture);

	if (rc == RULES_SIGNALED) {
		if (capture) {
			free(*capture);
			*capture = NULL;
		}
		rc = run_capture(argv, input, deadline, err, errlen, capture);
	}
	return rc;
}

static int
run(const struct rules_exec *x, char *const argv[], const char *input, char *err,
    size_t errlen)
{
	return run_tool(x, argv, input, err, errlen, NULL);
}

/* The tool's message after a failure, with the lock's holder if it is the
 * xtables lock that stopped it. */
static void
explain(const char *tool, int rc, const char *msg, char *err, size_t errlen)
{
	char who[96];

	if (rc > 0 && rules_lock_busy(rc, msg)) {
		if (rules_lock_holder(NULL, who, sizeof(who)) > 0)
			errbuf_set(err, errlen, "xtables lock held by %s: %s", who, msg);
		else
			errbuf_set(err, errlen, "xtables lock held: %s", msg);
	} else if (rc == RULES_KILLED || rc == RULES_SIGNALED) {
		errbuf_set(err, errlen, "%s: %s", tool, msg);
	} else {
		errbuf_set(err, errlen, "%s failed (%d): %s", tool, rc, msg);
	}
}

/* A hook's jump to one of our chains, for the iptables backend. */
struct hook_jump {
	const char *table, *hook, *chain;
	unsigned mode;			/* installed in this mode */
};
static const struct hook_jump hook_jumps[] = {
	{ "mangle", "OUTPUT", RULES_HIJACK, RULES_LOCAL },
	/* After SLOT_HIJACK's, so inserted before it (both at the top). */
	{ "mangle", "OUTPUT", RULES_RUN, RULES_LOCAL },
	{ "nat", "OUTPUT", RULES_DNAT, RULES_LOCAL },
	{ "mangle", "PREROUTING", RULES_GW, RULES_GATEWAY },
	{ "nat", "PREROUTING", RULES_DNAT, RULES_GATEWAY },
	{ "mangle", "INPUT", RULES_SYNACK, RULES_LOCAL },
	{ "mangle", "FORWARD", RULES_SYNACK, RULES_GATEWAY },
};
#define NJUMPS (sizeof(hook_jumps) / sizeof(hook_jumps[0]))

static int
jump(const struct rules_exec *x, int family, const struct hook_jump *j, const char *op,
    char *err, size_t errlen)
{
	char ipt[RULES_TOOL_MAX], w[16];
	char *argv[] = { ipt, "-w", w, "-t", (char *)j->table, (char *)op,
	    (char *)j->hook, "-j", (char *)j->chain, NULL, NULL, NULL };

	if (rules_tool(x, family, "", ipt, sizeof(ipt)) == -1) {
		errbuf_set(err, errlen, "tool name too long");
		return -1;
	}
	snprintf(w, sizeof(w), "%u", x->wait_s);
	if (strcmp(op, "-I") == 0) {	/* first, so earlier ACCEPTs cannot skip it */
		argv[7] = "1";
		argv[8] = "-j";
		argv[9] = (char *)j->chain;
		/* Not again: one that was signalled after its commit would
		 * leave the jump twice. */
		return run_capture(argv, NULL, tool_deadline_ms(x), err, errlen, NULL);
	}
	return run(x, argv, NULL, err, errlen);
}

int
rules_is_legacy(const struct rules_exec *x, char *err, size_t errlen)
{
	char ipt[RULES_TOOL_MAX], msg[256];
	char *argv[] = { ipt, "-V", NULL };
	int rc;

	x = exec_or_default(x);
	if (rules_tool(x, AF_INET, "", ipt, sizeof(ipt)) == -1) {
		errbuf_set(err, errlen, "tool name too long");
		return -1;
	}
	/* "iptables v1.8.9 (legacy)", "iptables v1.8.9 (nf_tables)" */
	if ((rc = run(x, argv, NULL, msg, sizeof(msg))) != 0) {
		explain(ipt, rc, msg, err, errlen);
		return -1;
	}
	return strstr(msg, "(legacy)") != NULL;
}

static const char *
nft_tool(const struct rules_exec *x)
{
	return x->nft && x->nft[0] ? x->nft : "nft";
}

void
rules_host_probe(const struct rules_exec *x, struct rules_host *h)
{
	char nft[RULES_TOOL_MAX], msg[256];
	char *list[] = { nft, "list", "tables", NULL };
	char *check[] = { nft, "-c", "-f", "-", NULL };
	/* -c: the kernel checks the batch and commits nothing. */
	static const char probe[] = "table inet slot_probe {\n\tchain c {\n"
	    "\t\ttcp dport 9 queue num 9 bypass\n\t}\n}\n";

	x = exec_or_default(x);
	snprintf(nft, sizeof(nft), "%s", nft_tool(x));
	h->nft_works = run(x, list, NULL, msg, sizeof(msg)) == 0;
	h->nft_queue = h->nft_works && run(x, check, probe, msg, sizeof(msg)) == 0;
	h->iptables = rules_is_legacy(x, msg, sizeof(msg));
}

enum rules_backend
rules_backend_auto(const struct rules_host *h, char *why, size_t len)
{
	if (!h->nft_works) {
		errbuf_set(why, len, "nft is missing or does not work%s",
		    h->iptables == -1 ? " (and so is iptables)" : "");
		return RULES_IPTABLES;
	}
	if (!h->nft_queue) {
		errbuf_set(why, len, "the kernel has no nft queue (CONFIG_NFT_QUEUE); iptables "
		    "reaches NFQUEUE through xtables");
		return RULES_IPTABLES;
	}
	if (h->iptables == 1) {
		errbuf_set(why, len, "iptables is the legacy variant: the firewall is xtables");
		return RULES_IPTABLES;
	}
	errbuf_set(why, len, h->iptables == 0 ? "nft works and iptables is its nf_tables "
	    "variant" : "nft works and iptables is absent");
	return RULES_NFT;
}

int
rules_restore_argv(const struct rules_exec *x, int family, struct rules_argv *a)
{
	x = exec_or_default(x);
	if (x->backend == RULES_NFT) {
		/* nft has no lock: its run is bounded by the same deadline. */
		if ((size_t)snprintf(a->tool, sizeof(a->tool), "%s", nft_tool(x)) >= sizeof(a->tool))
			return -1;
		a->wait[0] = '\0';
		a->argv[0] = a->tool;
		a->argv[1] = "-f";
		a->argv[2] = "-";
		a->argv[3] = NULL;
		return 0;
	}
	if (rules_tool(x, family, "-restore", a->tool, sizeof(a->tool)) == -1)
		return -1;
	snprintf(a->wait, sizeof(a->wait), "%u", x->wait_s);
	a->argv[0] = a->tool;
	a->argv[1] = "-w";
	a->argv[2] = a->wait;
	a->argv[3] = "--noflush";
	a->argv[4] = NULL;
	return 0;
}

/* Runs one job of a set, synchronously. */
static int
run_job(const struct rules_exec *x, const struct rules_job *j, char *err, size_t errlen)
{
	struct rules_argv a;
	char msg[512];
	int rc;

	if (rules_restore_argv(x, j->family, &a) == -1) {
		errbuf_set(err, errlen, "tool name too long");
		return -1;
	}
	if ((rc = run(x, a.argv, j->text, msg, sizeof(msg))) != 0) {
		explain(a.tool, rc, msg, err, errlen);
		return -1;
	}
	return 0;
}

int
rules_apply(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    const struct rules_exec *x, char *err, size_t errlen)
{
	struct rules_set set;
	char msg[512];
	int rc;

	x = exec_or_default(x);
	if (rules_set_render(c, r, n, x->backend, &set) == -1) {
		errbuf_set(err, errlen, "cannot render rules: %s", strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < set.n; i++)
		if (run_job(x, &set.job[i], err, errlen) == -1) {
			rules_set_free(&set);
			return -1;
		}
	for (size_t i = 0; x->backend == RULES_IPTABLES && i < set.n; i++) {
		int fam = set.job[i].family;
		for (size_t k = 0; k < NJUMPS; k++) {
			const struct hook_jump *j = &hook_jumps[k];
			/* A jump of another mode, left by a run that crashed: its
			 * chains are ours again, so it would hijack what this
			 * mode leaves alone. */
			if ((j->mode & mode_of(c)) == 0) {
				for (int t = 0; t < 16 && jump(x, fam, j, "-C", msg, sizeof(msg)) == 0;
				    t++)
					if (jump(x, fam, j, "-D", msg, sizeof(msg)) != 0)
						break;
				continue;
			}
			if (jump(x, fam, j, "-C", msg, sizeof(msg)) == 0)
				continue;
			if ((rc = jump(x, fam, j, "-I", msg, sizeof(msg))) != 0) {
				char why[600];
				explain(fam == AF_INET6 ? "ip6tables" : "iptables", rc, msg, why,
				    sizeof(why));
				errbuf_set(err, errlen, "adding the jump to %s in %s %s: %s",
				    j->chain, j->table, j->hook, why);
				rules_set_free(&set);
				return -1;
			}
		}
	}
	rules_set_free(&set);
	return 0;
}

/* The table removed in one transaction; absent is fine. */
static int
remove_nft(const struct rules_exec *x, char *err, size_t errlen)
{
	char text[128];
	struct rules_job j = { AF_UNSPEC, text, 0 };

	j.len = (size_t)snprintf(text, sizeof(text), "table inet %s {}\ndelete table inet %s\n",
	    RULES_NFT_TABLE, RULES_NFT_TABLE);
	return run_job(x, &j, err, errlen);
}

/*
 * Deletes, by their saved text, the rules of the hooks that still jump to
 * our chains once the exact jumps are gone: another shape (an older
 * version's, a sysadmin's copy) that -C does not match would keep a chain
 * referenced, and the chain could not go. Rules with quoted text are left
 * alone (they would need the shell's splitting). Best effort.
 */
static void
remove_strays(int family, const struct rules_exec *x)
{
	struct rules_entry *v = NULL;
	size_t n = 0;
	char err[256], ipt[RULES_TOOL_MAX], w[16];

	if (rules_tool(x, family, "", ipt, sizeof(ipt)) == -1 ||
	    rules_list(family, x, &v, &n, err, sizeof(err)) == -1)
		return;
	snprintf(w, sizeof(w), "%u", x->wait_s);
	for (size_t i = 0; i < n; i++) {
		char *argv[64] = { ipt, "-w", w, "-t", v[i].table, NULL };
		size_t k = 5;
		char *save = NULL, *tok;

		if (strcmp(v[i].chain, "OUTPUT") != 0 && strcmp(v[i].chain, "PREROUTING") != 0 &&
		    strcmp(v[i].chain, "INPUT") != 0 && strcmp(v[i].chain, "FORWARD") != 0)
			continue;
		if (strchr(v[i].rule, '"') != NULL || strncmp(v[i].rule, "-A ", 3) != 0)
			continue;
		v[i].rule[1] = 'D';
		for (tok = strtok_r(v[i].rule, " ", &save); tok && k < 63;
		    tok = strtok_r(NULL, " ", &save))
			argv[k++] = tok;
		if (tok != NULL)
			continue;
		argv[k] = NULL;
		char msg[512];
		(void)run(x, argv, NULL, msg, sizeof(msg));
	}
	rules_list_free(v, n);
}

static int
remove_family(int family, const struct rules_exec *x, char *err, size_t errlen)
{
	/* SLOT_GW refers to SLOT_HIJACK: it goes first. */
	static const char *const chains[][2] = { { "mangle", RULES_GW },
	    { "mangle", RULES_HIJACK }, { "mangle", RULES_RUN }, { "mangle", RULES_SYNACK },
	    { "nat", RULES_DNAT } };
	char msg[512], ipt[RULES_TOOL_MAX], w[16];
	int fail = 0, rc = 0;
	bool strays = false;

	if (rules_tool(x, family, "", ipt, sizeof(ipt)) == -1) {
		errbuf_set(err, errlen, "tool name too long");
		return -1;
	}
	snprintf(w, sizeof(w), "%u", x->wait_s);
	/* Every jump whatever the mode: a run in another mode may have left
	 * its own. */
	for (size_t i = 0; i < NJUMPS; i++) {
		const struct hook_jump *j = &hook_jumps[i];
		/* A crash between two inserts could leave the jump twice. */
		for (int k = 0; k < 16 && (rc = jump(x, family, j, "-C", msg, sizeof(msg))) == 0;
		    k++)
			if ((rc = jump(x, family, j, "-D", msg, sizeof(msg))) != 0)
				break;
		/* Held lock or deadline: every other run would wait as long. */
		if (rc == RULES_KILLED || rules_lock_busy(rc, msg)) {
			char why[600];
			explain(ipt, rc, msg, why, sizeof(why));
			errbuf_set(err, errlen, "removing the jump to %s from %s %s: %s", j->chain,
			    j->table, j->hook, why);
			return -1;
		}
		/* Signalled twice: no answer, so not "no jump"; the chains go on. */
		if (rc == RULES_SIGNALED) {
			char why[600];
			explain(ipt, rc, msg, why, sizeof(why));
			errbuf_set(err, errlen, "removing the jump to %s from %s %s: %s", j->chain,
			    j->table, j->hook, why);
			fail = 1;
		}
	}
	for (size_t i = 0; i < sizeof(chains) / sizeof(chains[0]); i++) {
		const char *t = chains[i][0], *ch = chains[i][1];
		char *flush[] = { ipt, "-w", w, "-t", (char *)t, "-F", (char *)ch, NULL };
		char *del[] = { ipt, "-w", w, "-t", (char *)t, "-X", (char *)ch, NULL };
		rc = run(x, flush, NULL, msg, sizeof(msg));
		/* An absent chain is fine; a lock, a deadline or a signal is not. */
		if (rc == 0) {
			rc = run(x, del, NULL, msg, sizeof(msg));
			/* Still referenced: by a jump of another shape. */
			if (rc != 0 && rc != RULES_KILLED && !rules_lock_busy(rc, msg) && !strays) {
				strays = true;
				remove_strays(family, x);
				rc = run(x, del, NULL, msg, sizeof(msg));
			}
		} else if (rc != RULES_KILLED && rc != RULES_SIGNALED && !rules_lock_busy(rc, msg)) {
			rc = 0;
		}
		if (rc != 0) {
			char why[600];
			explain(ipt, rc, msg, why, sizeof(why));
			errbuf_set(err, errlen, "removing %s from %s: %s", ch, t, why);
			fail = 1;
		}
	}
	return fail ? -1 : 0;
}

int
rules_remove(int family, const struct rules_exec *x, char *err, size_t errlen)
{
	int fail = 0;
	char e6[512];

	x = exec_or_default(x);
	if (x->backend == RULES_NFT)
		return remove_nft(x, err, errlen);
	if (unspec_has(family, AF_INET) && remove_family(AF_INET, x, err, errlen) == -1)
		fail = 1;
	/* Both tried, the first failure reported. */
	if (unspec_has(family, AF_INET6) && remove_family(AF_INET6, x, fail ? e6 : err,
	    fail ? sizeof(e6) : errlen) == -1)
		fail = 1;
	return fail ? -1 : 0;
}

/* True if rule (after "-A OUTPUT ") jumps to chain: "... -j CHAIN" at its
 * end or before another option. */
static int
jumps_to(const char *rule, const char *chain)
{
	char want[48];
	const char *p;
	size_t n = (size_t)snprintf(want, sizeof(want), "-j %s", chain);

	for (p = strstr(rule, want); p; p = strstr(p + 1, want))
		if ((p == rule || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
			return 1;
	return 0;
}

int
rules_parse_saved(const char *table, const char *text, struct rules_entry **v, size_t *n)
{
	const char *line = text, *end;

	for (; line && *line; line = *end ? end + 1 : end) {
		unsigned long long pk = 0, by = 0;
		char chain[32];
		int off = 0;

		end = strchr(line, '\n');
		if (end == NULL)
			end = line + strlen(line);
		/* "[packets:bytes] -A CHAIN rule..." */
		if (sscanf(line, "[%llu:%llu] -A %31s %n", &pk, &by, chain, &off) != 3 || off == 0)
			continue;
		size_t len = (size_t)(end - line);
		const char *rule = strstr(line, "-A ");
		char *text_rule = rule ? strndup(rule, len - (size_t)(rule - line)) : NULL;
		if (text_rule == NULL)
			return -1;
		bool hook = strcmp(chain, "OUTPUT") == 0 || strcmp(chain, "PREROUTING") == 0 ||
		    strcmp(chain, "INPUT") == 0 || strcmp(chain, "FORWARD") == 0;
		if (strcmp(chain, RULES_HIJACK) != 0 && strcmp(chain, RULES_DNAT) != 0 &&
		    strcmp(chain, RULES_GW) != 0 && strcmp(chain, RULES_SYNACK) != 0 &&
		    strcmp(chain, RULES_RUN) != 0 &&
		    !(hook && (jumps_to(text_rule, RULES_HIJACK) ||
		    jumps_to(text_rule, RULES_DNAT) || jumps_to(text_rule, RULES_GW) ||
		    jumps_to(text_rule, RULES_SYNACK) || jumps_to(text_rule, RULES_RUN)))) {
			free(text_rule);
			continue;
		}
		struct rules_entry *nv = realloc(*v, (*n + 1) * sizeof(**v));
		if (nv == NULL) {
			free(text_rule);
			return -1;
		}
		*v = nv;
		struct rules_entry *e = &nv[(*n)++];
		memset(e, 0, sizeof(*e));
		e->family = AF_INET;	/* rules_list says which */
		snprintf(e->table, sizeof(e->table), "%s", table);
		snprintf(e->chain, sizeof(e->chain), "%s", chain);
		e->packets = pk;
		e->bytes = by;
		e->rule = text_rule;
	}
	return 0;
}

void
rules_list_free(struct rules_entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].rule);
	free(v);
}

int
rules_parse_nft(const char *text, struct rules_entry **v, size_t *n)
{
	char chain[32] = "";
	const char *line = text, *end;

	for (; line && *line; line = *end ? end + 1 : end) {
		end = strchr(line, '\n');
		if (end == NULL)
			end = line + strlen(line);
		while (line < end && (*line == ' ' || *line == '\t'))
			line++;
		size_t len = (size_t)(end - line);
		if (len == 0 || strncmp(line, "table ", 6) == 0 || strncmp(line, "type ", 5) == 0 ||
		    strncmp(line, "policy ", 7) == 0)
			continue;
		if (strncmp(line, "chain ", 6) == 0) {
			if (sscanf(line + 6, "%31s", chain) != 1)
				chain[0] = '\0';
			continue;
		}
		if (*line == '}') {
			chain[0] = '\0';
			continue;
		}
		if (chain[0] == '\0')
			continue;
		char *rule = strndup(line, len);
		if (rule == NULL)
			return -1;
		unsigned long long pk = 0, by = 0;
		/* "... counter packets 3 bytes 180 queue ...": the counter goes to
		 * its columns, the rest is the rule. */
		char *ctr = strstr(rule, "counter packets ");
		int off = 0;
		if (ctr && sscanf(ctr, "counter packets %llu bytes %llu%n", &pk, &by, &off) == 2 &&
		    off > 0) {
			const char *rest = ctr + off;
			while (*rest == ' ')
				rest++;
			memmove(ctr, rest, strlen(rest) + 1);
			size_t rl = strlen(rule);
			while (rl > 0 && rule[rl - 1] == ' ')
				rule[--rl] = '\0';
		}
		struct rules_entry *nv = realloc(*v, (*n + 1) * sizeof(**v));
		if (nv == NULL) {
			free(rule);
			return -1;
		}
		*v = nv;
		struct rules_entry *e = &nv[(*n)++];
		memset(e, 0, sizeof(*e));
		e->family = AF_UNSPEC;
		snprintf(e->table, sizeof(e->table), "%s", RULES_NFT_TABLE);
		snprintf(e->chain, sizeof(e->chain), "%s", chain);
		e->packets = pk;
		e->bytes = by;
		e->rule = rule;
	}
	return 0;
}

/* The output of argv into *text (malloc'ed), or -1 with err. */
static int
capture(const struct rules_exec *x, char *const argv[], char **text, char *err, size_t errlen)
{
	char msg[512];
	int rc = run_tool(x, argv, NULL, msg, sizeof(msg), text);

	if (rc != 0) {
		free(*text);
		*text = NULL;
		errbuf_set(err, errlen, "%s %s failed (%d): %s", argv[0], argv[1], rc, msg);
		return rc;
	}
	if (*text == NULL) {
		errbuf_set(err, errlen, "%s: output too large or out of memory", argv[0]);
		return -1;
	}
	return 0;
}

static int
list_nft(const struct rules_exec *x, struct rules_entry **out, size_t *n, char *err,
    size_t errlen)
{
	char nft[RULES_TOOL_MAX], msg[512];
	char *argv[] = { nft, "list", "table", "inet", RULES_NFT_TABLE, NULL };
	char *text = NULL;

	snprintf(nft, sizeof(nft), "%s", nft_tool(x));
	if (capture(x, argv, &text, msg, sizeof(msg)) != 0) {
		/* No table: nothing of ours is installed. */
		if (strstr(msg, "No such file or directory"))
			return 0;
		errbuf_set(err, errlen, "%s", msg);
		return -1;
	}
	int rc = rules_parse_nft(text, out, n);
	free(text);
	if (rc == -1)
		errbuf_set(err, errlen, "out of memory");
	return rc;
}

int
rules_list(int family, const struct rules_exec *x, struct rules_entry **out, size_t *n,
    char *err, size_t errlen)
{
	static const char *const tables[] = { "mangle", "nat" };
	static const int fams[] = { AF_INET, AF_INET6 };
	char save[RULES_TOOL_MAX];

	*out = NULL;
	*n = 0;
	x = exec_or_default(x);
	if (x->backend == RULES_NFT) {
		if (list_nft(x, out, n, err, errlen) == 0)
			return 0;
		goto fail;
	}
	for (size_t f = 0; f < 2; f++) {
		if (!unspec_has(family, fams[f]))
			continue;
		if (rules_tool(x, fams[f], "-save", save, sizeof(save)) == -1) {
			errbuf_set(err, errlen, "tool name too long");
			goto fail;
		}
		for (size_t i = 0; i < 2; i++) {
			char *argv[] = { save, "-c", "-t", (char *)tables[i], NULL };
			char *text = NULL;
			size_t before = *n;
			if (capture(x, argv, &text, err, errlen) != 0)
				goto fail;
			int rc = rules_parse_saved(tables[i], text, out, n);
			free(text);
			for (size_t k = before; rc == 0 && k < *n; k++)
				(*out)[k].family = fams[f];
			if (rc == -1) {
				errbuf_set(err, errlen, "out of memory");
				goto fail;
			}
		}
	}
	return 0;
fail:
	rules_list_free(*out, *n);
	*out = NULL;
	*n = 0;
	return -1;
}
