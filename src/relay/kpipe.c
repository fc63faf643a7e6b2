#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "kpipe.h"

size_t
kpipe_limit(const struct kpipe_budget *b)
{
	unsigned long long lim, others, fit;

	lim = b->max_kernel_pipes ? b->max_kernel_pipes : 2ull * b->max_pipes;
	if (b->nofile) {
		others = (unsigned long long)b->max_control + b->max_inflight +
		    b->max_links + 2ull * b->max_free + KPIPE_FD_MARGIN;
		fit = b->nofile > others ? (b->nofile - others) / KPIPE_FDS_PER_PIPE : 0;
		if (2 * fit < lim)
			lim = 2 * fit;
	}
	return lim > SIZE_MAX ? SIZE_MAX : (size_t)lim;
}

void
kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free)
{
	pp->free = NULL;
	pp->nfree = 0;
	pp->max_free = max_free;
	pp->in_use = 0;
	pp->reserved = 0;
	pp->limit = SIZE_MAX;
	pp->size = size;
	pp->undersized = 0;
	pp->refused = 0;
}

static void
kpipe_close(struct kpipe *kp)
{
	close(kp->rfd);
	close(kp->wfd);
	free(kp);
}

void
kpipe_pool_destroy(struct kpipe_pool *pp)
{
	struct kpipe *kp;

	while ((kp = pp->free) != NULL) {
		pp->free = kp->next;
		kpipe_close(kp);
	}
	pp->nfree = 0;
}

/* Sets the pipe's capacity; the kernel may grant less (or refuse to grow
 * past pipe-user-pages-soft), which is only slower. */
static void
kpipe_resize(struct kpipe *kp, size_t want)
{
	int got;

	/* F_SETPIPE_SZ answers the size granted: asked again only if it
	 * failed. */
	if ((got = fcntl(kp->wfd, F_SETPIPE_SZ, (int)want)) > 0 ||
	    (got = fcntl(kp->wfd, F_GETPIPE_SZ)) > 0)
		kp->size = (size_t)got;
}

static struct kpipe *
kpipe_new(void)
{
	struct kpipe *kp;
	int fds[2];

	if ((kp = malloc(sizeof(*kp))) == NULL)
		return NULL;
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
		int e = errno;
		free(kp);
		errno = e;
		return NULL;
	}
	kp->rfd = fds[0];
	kp->wfd = fds[1];
	kp->size = 0;
	kp->next = NULL;
	return kp;
}

int
kpipe_reserve(struct kpipe_pool *pp, size_t n)
{
	if (pp->reserved > pp->limit || n > pp->limit - pp->reserved) {
		pp->refused++;
		errno = EMFILE;
		return -1;
	}
	pp->reserved += n;
	return 0;
}

void
kpipe_unreserve(struct kpipe_pool *pp, size_t n)
{
	pp->reserved = pp->reserved > n ? pp->reserved - n : 0;
}

struct kpipe *
kpipe_get(struct kpipe_pool *pp)
{
	struct kpipe *kp;

	if ((kp = pp->free) != NULL) {
		pp->free = kp->next;
		pp->nfree--;
	} else if ((kp = kpipe_new()) == NULL)
		return NULL;
	kp->next = NULL;
	if (pp->size && kp->size != pp->size) {
		kpipe_resize(kp, pp->size);
		if (kp->size < pp->size)
			pp->undersized++;
	}
	pp->in_use++;
	return kp;
}

void
kpipe_put(struct kpipe_pool *pp, struct kpipe *kp, int dirty)
{
	pp->in_use--;
	if (!dirty && pp->nfree < pp->max_free) {
		kp->next = pp->free;
		pp->free = kp;
		pp->nfree++;
	} else
		kpipe_close(kp);
}
