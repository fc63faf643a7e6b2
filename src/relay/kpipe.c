#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "kpipe.h"

/* The smallest pipe the kernel makes: one page. */
#define KPIPE_SPARE_SIZE 4096

void
kpipe_pool_init(struct kpipe_pool *pp, size_t size, size_t max_free)
{
	pp->free = pp->spare = NULL;
	pp->nfree = pp->nspare = 0;
	pp->max_free = max_free;
	pp->in_use = 0;
	pp->reserved = 0;
	pp->limit = 0;
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
	while ((kp = pp->spare) != NULL) {
		pp->spare = kp->next;
		kpipe_close(kp);
	}
	pp->nfree = pp->nspare = 0;
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

/* Pipes that must wait in the lists to back the reservations. */
static size_t
kpipe_needed(const struct kpipe_pool *pp)
{
	return pp->reserved > pp->in_use ? pp->reserved - pp->in_use : 0;
}

static void
kpipe_push_spare(struct kpipe_pool *pp, struct kpipe *kp)
{
	if (kp->size != KPIPE_SPARE_SIZE)
		kpipe_resize(kp, KPIPE_SPARE_SIZE);
	kp->next = pp->spare;
	pp->spare = kp;
	pp->nspare++;
}

/* Closes spares beyond what the reservations need. */
static void
kpipe_trim(struct kpipe_pool *pp)
{
	struct kpipe *kp;

	while (pp->nspare > 0 && pp->nfree + pp->nspare > kpipe_needed(pp)) {
		kp = pp->spare;
		pp->spare = kp->next;
		pp->nspare--;
		kpipe_close(kp);
	}
}

int
kpipe_reserve(struct kpipe_pool *pp, size_t n)
{
	struct kpipe *kp;

	if (pp->limit && pp->reserved + n > pp->limit) {
		pp->refused++;
		errno = EMFILE;
		return -1;
	}
	pp->reserved += n;
	while (pp->nfree + pp->nspare < kpipe_needed(pp)) {
		if ((kp = kpipe_new()) == NULL) {
			int e = errno;
			pp->reserved -= n;
			kpipe_trim(pp);
			pp->refused++;
			errno = e;
			return -1;
		}
		kpipe_push_spare(pp, kp);
	}
	return 0;
}

void
kpipe_unreserve(struct kpipe_pool *pp, size_t n)
{
	pp->reserved = pp->reserved > n ? pp->reserved - n : 0;
	kpipe_trim(pp);
}

struct kpipe *
kpipe_get(struct kpipe_pool *pp)
{
	struct kpipe *kp;

	if ((kp = pp->free) != NULL) {
		pp->free = kp->next;
		pp->nfree--;
	} else if ((kp = pp->spare) != NULL) {
		pp->spare = kp->next;
		pp->nspare--;
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
	if (dirty) {
		kpipe_close(kp);
		/* Keep the reservations backed; if this fails, kpipe_get
		 * tries again when the pipe is needed. */
		if (pp->nfree + pp->nspare < kpipe_needed(pp) &&
		    (kp = kpipe_new()) != NULL)
			kpipe_push_spare(pp, kp);
		return;
	}
	if (pp->nfree < pp->max_free) {
		kp->next = pp->free;
		pp->free = kp;
		pp->nfree++;
	} else if (pp->nfree + pp->nspare < kpipe_needed(pp))
		kpipe_push_spare(pp, kp);
	else
		kpipe_close(kp);
}
