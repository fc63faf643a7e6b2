#ifndef SLOT_CLIENT_RULES_H
#define SLOT_CLIENT_RULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/addr.h"

/* slotd's packet-filter rules, and only those (DESIGN.md, step 1 and 6):
 * - mangle chain SLOT_HIJACK, jumped to from OUTPUT: queues the selected
 *   SYNs to NFQUEUE with --queue-bypass, so that traffic flows directly
 *   while slotd is down; slotd's own sockets carry the bypass mark;
 * - nat chain SLOT_DNAT, jumped to from OUTPUT: a connection whose SYN got a
 *   relay's mark in the verdict goes to that relay's data port.
 * Both chains are replaced atomically (iptables-restore --noflush, one
 * COMMIT per table); the jumps are added once. Nothing else is touched. */

#define RULES_HIJACK "SLOT_HIJACK"
#define RULES_DNAT "SLOT_DNAT"

struct rules_conf {
	int family;			/* AF_INET or AF_INET6 */
	uint16_t queue;			/* NFQUEUE number */
	uint32_t bypass_mark;		/* one bit: slotd's own sockets */
	uint32_t relay_mask;		/* the mark bits that name a relay */
	const struct portset *ports;	/* hijacked destination ports */
	const struct cidr_list *include;	/* hijacked destinations; empty: all */
	const struct cidr_list *exclude;	/* never hijacked */
};

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
};

#define RULES_WAIT_DEFAULT 10
#define RULES_TOOL_MAX 256
/* The rendered text of the largest relay set (4095 relays) fits. */
#define RULES_TEXT_MAX (1u << 20)
/* run status of a tool killed at its deadline */
#define RULES_KILLED 1000
/* The legacy tools' default; XTABLES_LOCKFILE overrides it for them. */
#define RULES_XTABLES_LOCK "/run/xtables.lock"

/* The name of x's tool for family with suffix ("", "-restore", "-save") in
 * buf. Returns 0, or -1 if it does not fit. */
int rules_tool(const struct rules_exec *x, int family, const char *suffix, char *buf,
    size_t len);

/* 1 if x's tools are iptables-legacy (a raw socket: CAP_NET_RAW; and the
 * xtables lock), 0 if iptables-nft, -1 if they do not run (err). */
int rules_is_legacy(const struct rules_exec *x, char *err, size_t errlen);

/* The command line of the restore that installs a rendered text (read on
 * its stdin): argv points into a. Returns 0, or -1 (name too long). */
struct rules_argv {
	char tool[RULES_TOOL_MAX];
	char wait[16];
	char *argv[5];
};
int rules_restore_argv(const struct rules_exec *x, int family, struct rules_argv *a);

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

/* Replaces both chains with the rendered rules, then adds each OUTPUT jump
 * unless present. Idempotent. Runs the tools and waits for them (each
 * bounded by x's deadline): for start-up, before anything is hijacked; the
 * running daemon goes through rulesync.h. Returns 0, or -1 with the tool's
 * message in err (naming the lock's holder when the lock stopped it). */
int rules_apply(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    const struct rules_exec *x, char *err, size_t errlen);

/* Removes the jumps and both chains of family (absent ones are fine), for
 * SIGTERM and for a start that fails after installing its own (a start
 * after a crash replaces the leftovers with rules_apply instead). Returns 0,
 * or -1 with err. */
int rules_remove(int family, const struct rules_exec *x, char *err, size_t errlen);

/* One installed rule of ours, as iptables-save -c shows it: a rule of
 * SLOT_HIJACK or SLOT_DNAT, or a jump to one of them from OUTPUT. */
struct rules_entry {
	char table[8];			/* mangle, nat */
	char chain[32];
	unsigned long long packets, bytes;
	char *rule;			/* "-A CHAIN ...", without the counters */
};

/* What the kernel holds of our rules for family (iptables-save -c of the
 * mangle and nat tables, filtered), in the tool's order. *out is malloc'ed
 * (free with rules_list_free). Runs the tool and waits for it. Returns 0,
 * or -1 with the reason in err. */
int rules_list(int family, const struct rules_exec *x, struct rules_entry **out, size_t *n,
    char *err, size_t errlen);
void rules_list_free(struct rules_entry *v, size_t n);

/* The pure part: appends our rules of one table's iptables-save -c text to
 * *v (n entries, realloc'ed). Returns 0, or -1 out of memory. */
int rules_parse_saved(const char *table, const char *text, struct rules_entry **v, size_t *n);

#endif
