#ifndef SLOT_CLIENT_CLOSER_H
#define SLOT_CLIENT_CLOSER_H

#include <stddef.h>

/* The last close of a descriptor a local program passed to slotd. Such a
 * close may block: a TCP socket with SO_LINGER whose FIN cannot leave waits
 * up to its linger time, a FUSE file waits for its daemon, a unix socket
 * takes the descriptors queued on it down with it. slotd's loop must not
 * wait for any of them. */

struct closer;

enum closer_how {
	CLOSER_NOW,		/* closed by the caller: a plain TCP socket, lingering off */
	CLOSER_QUEUED,		/* handed to the closing thread */
	CLOSER_FULL,		/* the thread's queue is full: the descriptor stays open */
};

/* A closer whose queue holds up to max descriptors (its thread starts at
 * the first one). NULL: out of memory. */
struct closer *closer_new(size_t max);
/* Closes fd without blocking the caller (see enum closer_how). */
enum closer_how closer_close(struct closer *c, int fd);
/* Descriptors waiting in the queue. */
size_t closer_queued(struct closer *c);
/* Frees c once its thread has closed the queue; waits for it up to
 * wait_ms. A thread still stuck in a close then is left to finish and free
 * c itself (or to the process's exit). Returns 0, or -1 when it was left. */
int closer_free(struct closer *c, unsigned wait_ms);

#endif
