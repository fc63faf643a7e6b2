#ifndef SLOT_RELAY_INITCWND_H
#define SLOT_RELAY_INITCWND_H

#include <stdbool.h>

#include "relay.h"
#include "iwlearn.h"

/* [pipe] learn_initcwnd in the daemon: the rules of iwlearn.c fed with the
 * TCP_INFO of the relay's sending sockets as pipes end, the kernel's side
 * (iwbpf.c) kept in step, forgetting on a timer, reload and counters.
 * r->iw is NULL when learning is off. */

/* At start, with privileges (loading BPF needs them): on if the
 * configuration says so and the kernel lets it; says why not otherwise. */
void initcwnd_open(struct relay *r);
/* Once privileges are dropped: off if the map cannot be written any more. */
void initcwnd_ready(struct relay *r);
/* r->conf was reloaded. Off keeps the program attached with an empty map
 * (on again needs no privileges); on when it was not loaded at start warns. */
void initcwnd_reload(struct relay *r);
/* Detaches the program and forgets everything. */
void initcwnd_close(struct relay *r);

/* A pipe ends: fd is one of its sockets, bytes_sent what the relay wrote
 * to it. Learns from it if it carried data. */
void initcwnd_pipe_done(struct relay *r, int fd, unsigned long long bytes_sent);

struct initcwnd_stats {
	bool on;
	unsigned long long prefixes;	/* gauge */
	unsigned long long applied;	/* connections given a learned window */
	unsigned long long map_errors;
	struct iwl_counters learn;
};
void initcwnd_get_stats(const struct relay *r, struct initcwnd_stats *s);

/* Calls fn for every learned prefix (nothing when off). */
void initcwnd_foreach(const struct relay *r,
    void (*fn)(void *arg, const struct iwl_entry *e), void *arg);

#endif
