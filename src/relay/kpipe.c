#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "kpipe.h"

void
kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free)
{
	pp->free = NULL;
	pp->nfree = 0;
	pp->max_free = max_free;
	pp->in_use = 0;
	pp->size = size;
	pp->undersized = 0;
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

struct kpipe *
kpipe_get(struct kpipe_pool *pp)
{
	struct kpipe *kp;
	int fds[2];

	if ((kp = pp->free) != NULL) {
		pp->free = kp->next;
		pp->nfree--;
		pp->in_use++;
		return kp;
	}
	if ((kp = malloc(sizeof(*kp))) == NULL)
		return NULL;
	if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) == -1) {
		int e = errno;
		free(kp);
		errno = e;
		return NULL;
	}
	/* The kernel may grant less (pipe-user-pages-soft); the flow then
	 * sees a full pipe earlier, which is only slower. */
	if (pp->size && fcntl(fds[1], F_SETPIPE_SZ, (int)pp->size) < (int)pp->size)
		pp->undersized++;
	kp->rfd = fds[0];
	kp->wfd = fds[1];
	kp->next = NULL;
	pp->in_use++;
	return kp;
}

void
kpipe_put(struct kpipe_pool *pp, struct kpipe *kp, int dirty)
{
	pp->in_use--;
	if (dirty || pp->nfree >= pp->max_free) {
		kpipe_close(kp);
		return;
	}
	kp->next = pp->free;
	pp->free = kp;
	pp->nfree++;
}
