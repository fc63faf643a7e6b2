#ifndef SLOT_CLIENT_RULESYNC_H
#define SLOT_CLIENT_RULESYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <ev.h>

#include "rules.h"

/* The running slotd's rule sets reach the kernel off the event loop: each
 * text of a set (rules.h, struct rules_set) is handed to its tool
 * (iptables-restore, then ip6tables-restore; or one nft -f) as a child
 * process that the loop watches (ev_child, a pipe for its messages, a
 * deadline), so SYNs keep being decided while another program holds the
 * xtables lock. A set is in once all its texts are.
 *
 * Sets are numbered by generation. Only the newest set matters: one that
 * arrives while a restore runs waits for it and replaces any set still
 * waiting (every set is the whole truth, so an older one would only be
 * undone). A restore that fails (the lock held past its wait, killed at its
 * deadline, any error) is logged, naming the lock's holder, and retried
 * after 1 s, 2 s, 4 s... up to 30 s, unless a newer set comes first. The
 * callback tells the owner which generation the kernel holds, so that it
 * uses only relays whose DNAT rule is in place. */

struct rulesync;

/* gen is in the kernel (every earlier generation is superseded). */
typedef void rsync_done_fn(void *user, uint64_t gen);

struct rsync_stats {
	unsigned long long runs;	/* restores started */
	unsigned long long ok, failed;	/* failed includes the two below */
	unsigned long long lock_busy;	/* the xtables lock held past the wait */
	unsigned long long killed;	/* past the deadline */
	unsigned long long superseded;	/* sets replaced before they ran */
	uint64_t installed;		/* newest generation in the kernel */
	uint64_t wanted;		/* newest generation submitted */
	bool running;			/* a restore runs now */
};

/* loop must be the default loop (ev_child). Returns NULL out of memory. */
struct rulesync *rsync_new(struct ev_loop *loop, rsync_done_fn *done, void *user);

/* The backend, its tools and their wait, for restores started from now on
 * (copied). */
int rsync_set_exec(struct rulesync *s, const struct rules_exec *x);

/* gen went in synchronously (at start-up, rules_apply): nothing to run. */
void rsync_mark_installed(struct rulesync *s, uint64_t gen);

/* Takes the texts of rs (owned by s from here, also on failure; *rs is
 * left empty) as the set of generation gen. gen must be above every earlier
 * one. Returns 0, or -1 if gen is not new or rs is empty (rs freed). */
int rsync_submit(struct rulesync *s, struct rules_set *rs, uint64_t gen);

uint64_t rsync_installed(const struct rulesync *s);
void rsync_get_stats(const struct rulesync *s, struct rsync_stats *out);

/* Kills a running restore (SIGKILL) and reaps it; drops what waits. */
void rsync_free(struct rulesync *s);

#endif
