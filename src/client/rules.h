#ifndef SLOT_CLIENT_RULES_H
#define SLOT_CLIENT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* slotd's packet-filter rules, and only those (DESIGN.md, step 1 and 6),
 * through one of two backends.
 * iptables (and ip6tables for IPv6):
 * - mangle chain SLOT_HIJACK, jumped to from OUTPUT: queues the selected
 *   SYNs to NFQUEUE with --queue-bypass, so that traffic flows directly
 *   while slotd is down; slotd's own sockets carry the bypass mark;
 * - nat chain SLOT_DNAT, jumped to from OUTPUT: a connection whose SYN got a
 *   relay's mark in the verdict goes to that relay's data port;
 * - gateway mode: mangle chain SLOT_GW, jumped to from PREROUTING, sends the
 *   SYNs that come in on a LAN interface to SLOT_HIJACK, and nat PREROUTING
 *   jumps to SLOT_DNAT;
 * - sockets offered to slotd whatever their port (libslot) carry lib_mark:
 *   SLOT_HIJACK queues their SYNs after the exclusions; mangle chain
 *   SLOT_RUN, jumped to from OUTPUT before SLOT_HIJACK, gives that mark to
 *   the SYNs of run_cgroup's processes (slotctl run): the cgroup match is
 *   not allowed in PREROUTING, which reaches SLOT_HIJACK on a gateway;
 * - mangle chain SLOT_SYNACK, jumped to from INPUT (and FORWARD on a
 *   gateway): with synack set, queues the SYN-ACKs that come from a relay's
 *   data port and hold a conntrack entry with DNAT, so that slotd can hold
 *   a cold connection's SYN-ACK until the relay has connected to the server
 *   (before the reverse DNAT, which comes after mangle, so they still come
 *   from the relay). One that holds no such entry (a relay's retransmission
 *   after slotd deleted a failed pipe's entry) is not queued: the client's
 *   kernel resets it.
 * The chains are replaced atomically (iptables-restore --noflush, one
 * COMMIT per table); the jumps are added once. Nothing else is touched.
 * nft: the table inet RULES_NFT_TABLE, both families, the same rules in
 * chains of its own hooked at output and prerouting (mangle priority for
 * the queue, dstnat for the DNAT; input and forward for the SYN-ACKs),
 * replaced whole in one nft -f
 * transaction; nothing outside the table is touched. */

#define RULES_HIJACK "SLOT_HIJACK"
#define RULES_DNAT "SLOT_DNAT"
#define RULES_GW "SLOT_GW"
#define RULES_SYNACK "SLOT_SYNACK"
#define RULES_RUN "SLOT_RUN"
#define RULES_NFT_TABLE "slot"

enum rules_backend { RULES_IPTABLES, RULES_NFT };

/* Which connections: the host's own, or those forwarded from the LAN
 * interfaces (a gateway), or both. 0 counts as local. */
#define RULES_LOCAL 1u
#define RULES_GATEWAY 2u

#define RULES_IFNAME_MAX 16		/* IFNAMSIZ */
#define RULES_LAN_MAX 32

struct rules_conf {
	int family;			/* AF_INET, AF_INET6, or AF_UNSPEC: both */
	uint16_t queue;			/* NFQUEUE number */
	uint32_t bypass_mark;		/* one bit: slotd's own sockets */
	uint32_t relay_mask;		/* the mark bits that name a relay */
	const struct portset *ports;	/* hijacked destination ports */
	const struct cidr_list *include;	/* hijacked destinations; empty: all */
	const struct cidr_list *exclude;	/* never hijacked */
	unsigned mode;			/* RULES_LOCAL | RULES_GATEWAY; 0: local */
	const char (*lan)[RULES_IFNAME_MAX];	/* gateway: the LAN interfaces */
	size_t nlan;
	bool synack;			/* queue the relays' SYN-ACKs too */
	/* Mark the SYNs that reuse a reset direct connection's entry too
	 * (seen a reply, no DNAT): only a slotd that can read and delete
	 * entries can send them to a relay. */
	bool reused_direct;
	uint32_t lib_mark;		/* one bit; 0: no socket is offered by mark */
	const char *run_cgroup;		/* cgroup v2 path (slotctl run); NULL: none */
};

/* Whether name may be a LAN interface of the rules: 1 to 15 characters of
 * letters, digits and ".-_@" (what the tools quote safely). */
bool rules_ifname_ok(const char *name);

/* Whether s may be run_cgroup: a relative cgroup v2 path of letters,
 * digits and ._-, parts separated by single '/', no "..". It goes into the
 * rules as it is. */
bool rules_cgroup_ok(const char *s);

struct rules_relay {
	uint32_t mark;			/* non-zero, within relay_mask */
	struct endpoint data;		/* the relay's data port */
};

/* How the tools run. iptables names the family of tools: "iptables" (the
 * system's choice), "iptables-legacy", "iptables-nft" or a path to one;
 * -restore and -save are appended, and ip6 put in front for IPv6. Each run
 * waits at most wait_s for the xtables lock (-w wait_s; iptables-nft has no
 * lock) and is killed 2 s after that. NULL: iptables, RULES_WAIT_DEFAULT. */
struct rules_exec {
	const char *iptables;
	unsigned wait_s;
	enum rules_backend backend;	/* RULES_IPTABLES unless set */
	const char *nft;		/* the nft tool; NULL: "nft" */
};

#define RULES_WAIT_DEFAULT 10
#define RULES_TOOL_MAX 256
/* The rendered text of the largest relay set (4095 relays, a DNAT and a
 * SYN-ACK rule each) fits. */
#define RULES_TEXT_MAX (2u << 20)
/* run status of a tool killed at its deadline */
#define RULES_KILLED 1000
/* run status of a tool killed by a signal not ours (a service manager
 * signalling the whole cgroup as slotd stops): no answer, run again once */
#define RULES_SIGNALED 1001
/* The legacy tools' default; XTABLES_LOCKFILE overrides it for them. */
#define RULES_XTABLES_LOCK "/run/xtables.lock"

/* 1 if x's tools are iptables-legacy (a raw socket: CAP_NET_RAW; and the
 * xtables lock), 0 if iptables-nft, -1 if they do not run (err). */
int rules_is_legacy(const struct rules_exec *x, char *err, size_t errlen);

/* The command line of the restore that installs a rendered text (read on
 * its stdin) of family (AF_UNSPEC: nft's inet table): iptables-restore
 * --noflush, ip6tables-restore --noflush or nft -f -, by x's backend. argv
 * points into a. Returns 0, or -1 (name too long). */
struct rules_argv {
	char tool[RULES_TOOL_MAX];
	char wait[16];
	char *argv[5];
};
int rules_restore_argv(const struct rules_exec *x, int family, struct rules_argv *a);

/* What a rule set is made of for a backend: one text per tool run, run in
 * order (iptables: IPv4, then IPv6; nft: one for both families). Every
 * text replaces all of what it covers, so running them again is harmless. */
struct rules_job {
	int family;			/* AF_INET, AF_INET6; AF_UNSPEC: nft */
	char *text;			/* malloc'ed */
	size_t len;
};
struct rules_set {
	struct rules_job job[2];
	size_t n;
};

/* Renders c (c->family, or both for AF_UNSPEC: IPv4 alone where the
 * kernel has no IPv6) for backend into s.
 * Returns 0, or -1 with errno (EINVAL: c inconsistent; ENOSPC; ENOMEM). */
int rules_set_render(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    enum rules_backend backend, struct rules_set *s);
void rules_set_free(struct rules_set *s);

/* Renders the nft -f input that creates (or empties) and refills the table
 * inet RULES_NFT_TABLE, in one transaction, for both families whatever
 * c->family. Returns its length, or -1 (errno ENOSPC or EINVAL). */
int rules_render_nft(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *buf, size_t cap);

/* The backend choice of [hijack] backend = auto, from what the host runs:
 * nft if nft works, the kernel has nft's queue statement, and iptables is
 * absent or its nf_tables variant; iptables otherwise (nft missing, a
 * kernel without CONFIG_NFT_QUEUE, or iptables-legacy as the host's
 * firewall). The reason goes into why. */
struct rules_host {
	bool nft_works;			/* nft list tables ran */
	bool nft_queue;			/* the kernel takes "queue" rules (nft -c) */
	int iptables;			/* 1 legacy, 0 nf_tables, -1 absent or broken */
};
enum rules_backend rules_backend_auto(const struct rules_host *h, char *why, size_t len);

/* Looks at the host for rules_backend_auto: runs nft list tables, nft -c
 * of a queue rule (nothing is installed) and iptables -V with x's tools. */
void rules_host_probe(const struct rules_exec *x, struct rules_host *h);

/* A sealed-in-memory file (memfd, close-on-exec) holding text, at offset 0:
 * a tool's stdin that never blocks the writer. Returns it, or -1 (errno). */
int rules_input_fd(const char *text, size_t len);

/* Whether a tool's failure (exit status, message) is the xtables lock held
 * by someone else past the wait. */
bool rules_lock_busy(int status, const char *msg);

/* Who holds the flock of lockfile (NULL: $XTABLES_LOCKFILE or the
 * default), from /proc/locks: "pid N (comm)" in buf. Returns the pid, or -1
 * if nobody (or it cannot tell). */
int rules_lock_holder(const char *lockfile, char *buf, size_t len);

/* Renders the iptables-restore --noflush input that redefines both chains
 * for c->family (relays of the other family are skipped). Returns its
 * length, or -1 if it does not fit in cap or c is inconsistent (errno
 * ENOSPC or EINVAL). */
int rules_render(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *buf, size_t cap);

/* Replaces the chains (or nft's table) with the rendered rules, for
 * c->family or both (AF_UNSPEC), then adds each jump of c->mode unless
 * present (iptables; nft's table holds its own hooks). Idempotent. Runs the tools and waits for them (each
 * bounded by x's deadline): for start-up, before anything is hijacked; the
 * running daemon goes through rulesync.h. Returns 0, or -1 with the tool's
 * message in err (naming the lock's holder when the lock stopped it). */
int rules_apply(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    const struct rules_exec *x, char *err, size_t errlen);

/* Removes the jumps and the chains of family (AF_UNSPEC: both), or nft's
 * table, by x's backend (absent ones are fine), for
 * SIGTERM and for a start that fails after installing its own (a start
 * after a crash replaces the leftovers with rules_apply instead). Returns 0,
 * or -1 with err. */
int rules_remove(int family, const struct rules_exec *x, char *err, size_t errlen);

/* One installed rule of ours, as iptables-save -c shows it: a rule of
 * SLOT_HIJACK, SLOT_GW or SLOT_DNAT, or a jump to one of them from OUTPUT
 * or PREROUTING; or a rule of nft's table (nft -a list, with its counter). */
struct rules_entry {
	int family;			/* AF_INET, AF_INET6; AF_UNSPEC: nft's inet table */
	char table[16];			/* mangle, nat; nft: RULES_NFT_TABLE */
	char chain[32];
	unsigned long long packets, bytes;
	char *rule;			/* "-A CHAIN ...", without the counters */
};

/* What the kernel holds of our rules for family (AF_UNSPEC: both; the
 * iptables-save -c of the mangle and nat tables, filtered; or nft's table),
 * in the tool's order. *out is malloc'ed
 * (free with rules_list_free). Runs the tool and waits for it. Returns 0,
 * or -1 with the reason in err. */
int rules_list(int family, const struct rules_exec *x, struct rules_entry **out, size_t *n,
    char *err, size_t errlen);
void rules_list_free(struct rules_entry *v, size_t n);

/* The pure part: appends our rules of one table's iptables-save -c text to
 * *v (n entries, realloc'ed). Returns 0, or -1 out of memory. */
int rules_parse_saved(const char *table, const char *text, struct rules_entry **v, size_t *n);

/* The same for nft list table inet RULES_NFT_TABLE output: one entry per
 * rule, family AF_UNSPEC, table RULES_NFT_TABLE, its chain, the counter's
 * packets and bytes. */
int rules_parse_nft(const char *text, struct rules_entry **v, size_t *n);

#endif
