#ifndef SLOT_RELAY_KPIPE_H
#define SLOT_RELAY_KPIPE_H

#include <stddef.h>

/* A pool of kernel pipes for splice(2). A flow holds a pipe only while bytes
 * are in flight and gives it back when it empties, so idle pipes cost no
 * kernel buffers; up to max_free empty pipes are kept for reuse. */

struct kpipe {
	int rfd, wfd;
	struct kpipe *next;	/* free list */
};

struct kpipe_pool {
	struct kpipe *free;
	size_t nfree, max_free;
	size_t in_use;
	size_t size;		/* requested pipe size */
	unsigned long long undersized;	/* pipes the kernel made smaller */
};

void kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free);
void kpipe_pool_destroy(struct kpipe_pool *pp);

/* Returns an empty pipe, or NULL with errno set (EMFILE, ENOMEM...). A pipe
 * the kernel refused to enlarge (an unprivileged user past
 * fs.pipe-user-pages-soft) still works, slower, and is counted. */
struct kpipe *kpipe_get(struct kpipe_pool *pp);

/* Returns a pipe. One that may still hold bytes (dirty) is closed instead
 * of being reused. */
void kpipe_put(struct kpipe_pool *pp, struct kpipe *kp, int dirty);

#endif
