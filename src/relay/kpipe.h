#ifndef SLOT_RELAY_KPIPE_H
#define SLOT_RELAY_KPIPE_H

#include <stddef.h>

/* A pool of kernel pipes for splice(2), with reservations.
 *
 * A flow holds a kernel pipe only while bytes are in flight (kpipe_get,
 * kpipe_put); the pipe is made then, lazily, or taken from up to max_free
 * empty ones kept for reuse. A pipe of the relay reserves the two kernel
 * pipes it may need when it is accepted (kpipe_reserve), but a reservation
 * is only an account: the limit is derived from the descriptor limit
 * (kpipe_limit), so that an admitted pipe always finds descriptors for its
 * kernel pipes. Only the kernel itself (ENFILE, ENOMEM,
 * fs.pipe-user-pages-hard) can then refuse one; the caller pauses that
 * direction and tries again, and never resets a running transfer for it. */

struct kpipe {
	int rfd, wfd;
	size_t size;		/* the pipe's capacity now */
	struct kpipe *next;	/* free list */
};

struct kpipe_pool {
	struct kpipe *free;
	size_t nfree, max_free;
	size_t in_use;
	size_t reserved;	/* promised to pipes: in use or not */
	size_t limit;		/* most pipes that may be reserved */
	size_t size;		/* requested pipe size */
	unsigned long long undersized;	/* pipes the kernel made smaller */
	unsigned long long refused;	/* reservations refused past the limit */
};

/* Descriptors each admitted pipe may hold: two sockets, two kernel pipes. */
#define KPIPE_FDS_PER_PIPE 6
/* Descriptors kept for users without a cap of their own: listeners, the
 * directory link, logs, and the data connections held
 * before their pipe (at most DATAHOLD_MAX, 256: datahold.h). */
#define KPIPE_FD_MARGIN 512

/* What else may hold descriptors, each under its cap. */
struct kpipe_budget {
	unsigned long long nofile;	/* RLIMIT_NOFILE; 0: no limit */
	size_t max_pipes;
	size_t max_kernel_pipes;	/* 0: two per pipe */
	size_t max_control;		/* control connections, one each */
	size_t max_inflight;		/* measurements' descriptors, all told */
	size_t max_links;		/* links to next relays, one each */
	size_t max_free;		/* pooled kernel pipes, two each */
};

/* The most kernel pipes the pipes may reserve: max_kernel_pipes (or two per
 * pipe), and no more than the descriptors left by the others allow, two
 * per pipe that fits in KPIPE_FDS_PER_PIPE. 0 when not one pipe fits. */
size_t kpipe_limit(const struct kpipe_budget *b);

/* limit: no limit until set. */
void kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free);
void kpipe_pool_destroy(struct kpipe_pool *pp);

/* Promises n more pipes. Returns 0, or -1 with errno EMFILE past the limit
 * and nothing promised. */
int kpipe_reserve(struct kpipe_pool *pp, size_t n);

/* Gives back a promise of n pipes. */
void kpipe_unreserve(struct kpipe_pool *pp, size_t n);

/* Returns an empty pipe, pooled or made, or NULL with errno set (ENFILE,
 * ENOMEM...). A pipe the kernel refused to enlarge (an unprivileged user
 * past fs.pipe-user-pages-soft) still works, slower, and is counted. */
struct kpipe *kpipe_get(struct kpipe_pool *pp);

/* Returns a pipe: kept for reuse up to max_free, closed otherwise. One that
 * may still hold bytes (dirty) is always closed. */
void kpipe_put(struct kpipe_pool *pp, struct kpipe *kp, int dirty);

#endif
