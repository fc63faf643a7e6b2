#ifndef SLOT_CLIENT_RULES_H
#define SLOT_CLIENT_RULES_H

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

/* Renders the iptables-restore --noflush input that redefines both chains
 * for c->family (relays of the other family are skipped). Returns its
 * length, or -1 if it does not fit in cap or c is inconsistent (errno
 * ENOSPC or EINVAL). */
int rules_render(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *buf, size_t cap);

/* Replaces both chains with the rendered rules, then adds each OUTPUT jump
 * unless present. Idempotent. Returns 0, or -1 with the tool's message in
 * err. */
int rules_apply(const struct rules_conf *c, const struct rules_relay *r, size_t n,
    char *err, size_t errlen);

/* Removes the jumps and both chains of family (absent ones are fine), for
 * SIGTERM and for a start after a crash. Returns 0, or -1 with err. */
int rules_remove(int family, char *err, size_t errlen);

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
int rules_list(int family, struct rules_entry **out, size_t *n, char *err, size_t errlen);
void rules_list_free(struct rules_entry *v, size_t n);

/* The pure part: appends our rules of one table's iptables-save -c text to
 * *v (n entries, realloc'ed). Returns 0, or -1 out of memory. */
int rules_parse_saved(const char *table, const char *text, struct rules_entry **v, size_t *n);

#endif
