#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "closer.h"

struct closer {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	pthread_t thread;
	bool started, stop;
	bool done, orphan;	/* the thread has ended; it frees the closer itself */
	size_t max, head, n;	/* a ring of max descriptors */
	int q[];
};

static int
sock_int(int fd, int level, int name)
{
	int v = -1;
	socklen_t l = sizeof(v);

	return getsockopt(fd, level, name, &v, &l) == -1 ? -1 : v;
}

/* A TCP socket without an upper layer protocol (kTLS may wait for its
 * records at close): with lingering off its close never waits. */
static bool
plain_tcp(int fd)
{
	char ulp[16];
	socklen_t l = sizeof(ulp);
	int dom = sock_int(fd, SOL_SOCKET, SO_DOMAIN);

	return (dom == AF_INET || dom == AF_INET6) &&
	    sock_int(fd, SOL_SOCKET, SO_TYPE) == SOCK_STREAM &&
	    sock_int(fd, SOL_SOCKET, SO_PROTOCOL) == IPPROTO_TCP &&
	    getsockopt(fd, IPPROTO_TCP, TCP_ULP, ulp, &l) == 0 && (l == 0 || ulp[0] == '\0');
}

struct closer *
closer_new(size_t max)
{
	struct closer *c;

	if (max == 0 || (c = calloc(1, sizeof(*c) + max * sizeof(int))) == NULL)
		return NULL;
	c->max = max;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cond, NULL);
	return c;
}

static void *
worker(void *arg)
{
	struct closer *c = arg;

	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (c->n == 0 && !c->stop)
			pthread_cond_wait(&c->cond, &c->mu);
		if (c->n == 0)
			break;
		int fd = c->q[c->head];
		c->head = (c->head + 1) % c->max;
		c->n--;
		pthread_mutex_unlock(&c->mu);
		close(fd);
		pthread_mutex_lock(&c->mu);
	}
	c->done = true;
	bool orphan = c->orphan;
	pthread_mutex_unlock(&c->mu);
	if (orphan) {
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->mu);
		free(c);
	}
	return NULL;
}

enum closer_how
closer_close(struct closer *c, int fd)
{
	enum closer_how how = CLOSER_QUEUED;

	if (plain_tcp(fd)) {
		/* The program's SO_LINGER would make this close wait for the
		 * FIN's ACK; off, the kernel sends the rest on its own. */
		struct linger lg = { 0, 0 };
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(fd);
		return CLOSER_NOW;
	}
	pthread_mutex_lock(&c->mu);
	if (!c->started && !c->stop) {
		sigset_t all, old;
		/* Signals are the loop's business. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		c->started = pthread_create(&c->thread, NULL, worker, c) == 0;
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (!c->started || c->stop || c->n == c->max) {
		how = CLOSER_FULL;
	} else {
		c->q[(c->head + c->n) % c->max] = fd;
		c->n++;
		pthread_cond_signal(&c->cond);
	}
	pthread_mutex_unlock(&c->mu);
	return how;
}

size_t
closer_queued(struct closer *c)
{
	size_t n;

	pthread_mutex_lock(&c->mu);
	n = c->n;
	pthread_mutex_unlock(&c->mu);
	return n;
}

int
closer_free(struct closer *c, unsigned wait_ms)
{
	struct timespec ts;

	if (c == NULL)
		return 0;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->mu);
	if (c->started) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += wait_ms / 1000;
		ts.tv_nsec += (long)(wait_ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		if (pthread_timedjoin_np(c->thread, NULL, &ts) != 0) {
			pthread_mutex_lock(&c->mu);
			bool done = c->done;
			/* Stuck in a close: the thread frees c when it ends,
			 * or the process's exit ends both. */
			c->orphan = !done;
			pthread_mutex_unlock(&c->mu);
			if (!done) {
				pthread_detach(c->thread);
				return -1;
			}
			pthread_join(c->thread, NULL);
		}
	}
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
	return 0;
}
