#ifndef SLOT_RELAY_KPIPE_H
#define SLOT_RELAY_KPIPE_H

#include <stddef.h>

/* A pool of kernel pipes for splice(2), with reservations.
 *
 * A pipe of the relay reserves the two kernel pipes it may need when it is
 * accepted (kpipe_reserve): they are created then, so that a transfer already
 * running never finds the descriptors or the kernel refusing it a pipe (the
 * new pipe is refused instead). A flow still holds a kernel pipe only while
 * bytes are in flight (kpipe_get, kpipe_put). Empty pipes wait in two lists:
 * up to max_free at full size for reuse, and the spares that back the
 * reservations, shrunk to one page so that idle reservations cost little of
 * the user's pipe-buffer budget (fs.pipe-user-pages-soft); a spare taken is
 * grown back to the pool's size. */

struct kpipe {
	int rfd, wfd;
	size_t size;		/* the pipe's capacity now */
	struct kpipe *next;	/* free or spare list */
};

struct kpipe_pool {
	struct kpipe *free, *spare;
	size_t nfree, nspare, max_free;
	size_t in_use;
	size_t reserved;	/* promised to pipes: in use or not */
	size_t limit;		/* most pipes that may be reserved; 0: no limit */
	size_t size;		/* requested pipe size */
	unsigned long long undersized;	/* pipes the kernel made smaller */
	unsigned long long refused;	/* reservations refused (limit or error) */
};

void kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free);
void kpipe_pool_destroy(struct kpipe_pool *pp);

/* Promises n more pipes, creating spares as needed. Returns 0, or -1 with
 * errno (EMFILE past the limit, or what pipe2 said) and nothing promised. */
int kpipe_reserve(struct kpipe_pool *pp, size_t n);

/* Gives back a promise of n pipes; spares no longer needed are closed. */
void kpipe_unreserve(struct kpipe_pool *pp, size_t n);

/* Returns an empty pipe, or NULL with errno set (EMFILE, ENOMEM...). Within
 * a reservation this takes a pooled pipe and cannot fail. A pipe the kernel
 * refused to enlarge (an unprivileged user past fs.pipe-user-pages-soft)
 * still works, slower, and is counted. */
struct kpipe *kpipe_get(struct kpipe_pool *pp);

/* Returns a pipe. One that may still hold bytes (dirty) is closed instead
 * of being reused. */
void kpipe_put(struct kpipe_pool *pp, struct kpipe *kp, int dirty);

#endif
