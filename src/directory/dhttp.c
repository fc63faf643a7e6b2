/* Our accept loop around Abyss (see dhttp.h). */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <xmlrpc-c/abyss.h>	/* and abyss_unixsock.h, which has no guard */
#include <xmlrpc-c/base.h>
#include <xmlrpc-c/server_abyss.h>

#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "dhttp.h"

/* Request headers larger than this are refused (Abyss keeps them in a
 * buffer of this order anyway). */
#define DHTTP_HEADER_MAX 8192

/* Stack of a connection thread: Abyss's request code plus xmlrpc-c's
 * parser, which recurses per nesting level (at most 64 by its default). */
#define DHTTP_STACK ((size_t)2 << 20)

/* Frees Abyss's error strings (exported by libxmlrpc_util, declared only in
 * its internal headers): one of them may be a static out-of-memory text
 * that free() must not see. */
void xmlrpc_strfree(const char *s);

struct dhttp {
	TServer srv;
	xmlrpc_registry *reg;
	int fd;
	int wake[2];		/* a byte here ends the accept loop */
	unsigned max_conns;
	int timeout_ms;
	pthread_t acceptor;
	pthread_attr_t attr;	/* of connection threads */
	pthread_mutex_t mu;
	pthread_cond_t freed;	/* a connection ended */
	unsigned active;
	bool stopping;
	uint64_t conns, requests, refused;	/* __atomic */
};

struct conn {
	struct dhttp *h;
	int fd;
};

int
dhttp_global_init(char *err, size_t errlen)
{
	xmlrpc_env env;
	int rc = 0;

	xmlrpc_env_init(&env);
	xmlrpc_server_abyss_global_init(&env);
	if (env.fault_occurred) {
		errbuf_set(err, errlen, "xmlrpc-c: %s", env.fault_string);
		rc = -1;
	}
	xmlrpc_env_clean(&env);
	return rc;
}

void
dhttp_global_term(void)
{
	xmlrpc_server_abyss_global_term();
}

static bool
has_dtd(const char *xml, size_t len)
{
	/* XML-RPC has no use for a document type; without one there are no
	 * entity declarations to expand. */
	return memmem(xml, len, "<!DOCTYPE", 9) != NULL || memmem(xml, len, "<!ENTITY", 8) != NULL;
}

/* Abyss hands us each body whole, its length checked against the size
 * limit already. */
static void
process(xmlrpc_env *env, void *arg, const char *xml, size_t len, TSession *session,
    xmlrpc_mem_block **out)
{
	struct dhttp *h = arg;

	__atomic_add_fetch(&h->requests, 1, __ATOMIC_RELAXED);
	if (has_dtd(xml, len)) {
		xmlrpc_env f;

		__atomic_add_fetch(&h->refused, 1, __ATOMIC_RELAXED);
		xmlrpc_env_init(&f);
		xmlrpc_env_set_fault(&f, DIRP_FAULT_MALFORMED, "XML with a DTD is refused");
		*out = XMLRPC_MEMBLOCK_NEW(char, env, 0);
		if (!env->fault_occurred)
			xmlrpc_serialize_fault(env, *out, &f);
		if (env->fault_occurred && *out) {
			XMLRPC_MEMBLOCK_FREE(char, *out);
			*out = NULL;
		}
		xmlrpc_env_clean(&f);
		return;
	}
	xmlrpc_registry_process_call2(env, h->reg, xml, len, session, out);
}

static abyss_bool
not_found(TSession *session)
{
	ResponseStatus(session, 404);
	ResponseError2(session, "slot-dird serves XML-RPC at /RPC2 only");
	return 1;
}

static void
conn_done(struct dhttp *h)
{
	pthread_mutex_lock(&h->mu);
	h->active--;
	pthread_cond_broadcast(&h->freed);
	pthread_mutex_unlock(&h->mu);
}

static void
answer(int fd, const char *status)
{
	char b[160];
	int n = snprintf(b, sizeof(b), "HTTP/1.1 %s\r\nConnection: close\r\n"
	    "Content-Length: 0\r\n\r\n", status);

	(void)send(fd, b, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

/*
 * Waits until the request's headers are all in the socket buffer, looking
 * without taking (MSG_PEEK), so that Abyss reads them at once. Abyss's own
 * timeout on half-received headers reads uninitialised memory and leaks the
 * headers read so far (xmlrpc-c 1.33); a slow sender never gets there.
 * SO_RCVLOWAT makes poll wait for more than what was seen already. Returns
 * 0, or -1 when the connection is to be closed (answered if useful).
 */
static int
wait_headers(int fd, int timeout_ms)
{
	char buf[DHTTP_HEADER_MAX];
	struct timespec t0, t;
	int low = 1, rc = -1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (n > 0) {
			if (memmem(buf, (size_t)n, "\r\n\r\n", 4) || memmem(buf, (size_t)n, "\n\n", 2)) {
				rc = 0;
				break;
			}
			if ((size_t)n == sizeof(buf)) {
				answer(fd, "431 Request Header Fields Too Large");
				break;
			}
			low = (int)n + 1;
			if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low)) == -1)
				break;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		long left = timeout_ms - ((t.tv_sec - t0.tv_sec) * 1000 +
		    (t.tv_nsec - t0.tv_nsec) / 1000000);
		struct pollfd pf = { .fd = fd, .events = POLLIN | POLLRDHUP };
		int pr = left > 0 ? poll(&pf, 1, (int)left) : 0;
		if (pr == 0) {
			answer(fd, "408 Request Timeout");
			break;
		}
		/* A peer gone half-way stays readable: do not spin on it. */
		if (pr < 0 ? errno != EINTR : (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
			break;
	}
	low = 1;
	if (rc == 0 && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low)) == -1)
		rc = -1;
	return rc;
}

static void *
conn_run(void *arg)
{
	struct conn *c = arg;
	struct dhttp *h = c->h;
	struct abyss_unix_chaninfo *info = NULL;
	TChannel *ch = NULL;
	const char *e = NULL;

	if (wait_headers(c->fd, h->timeout_ms) == 0) {
		/* The channel borrows the descriptor; we close it. */
		ChannelUnixCreateFd(c->fd, &ch, &info, &e);
		if (e == NULL) {
			ServerRunChannel(&h->srv, ch, info, &e);
			ChannelDestroy(ch);
			free(info);
		}
		if (e)
			xmlrpc_strfree(e);
	}
	close(c->fd);
	free(c);
	conn_done(h);
	return NULL;
}

static void *
accept_loop(void *arg)
{
	struct dhttp *h = arg;
	struct pollfd pf[2] = {
		{ .fd = h->fd, .events = POLLIN },
		{ .fd = h->wake[0], .events = POLLIN },
	};

	for (;;) {
		pthread_mutex_lock(&h->mu);
		while (h->active >= h->max_conns && !h->stopping)
			pthread_cond_wait(&h->freed, &h->mu);
		bool stop = h->stopping;
		pthread_mutex_unlock(&h->mu);
		if (stop)
			break;
		if (poll(pf, 2, -1) == -1 && errno != EINTR)
			break;
		if (pf[1].revents)
			break;
		if (!(pf[0].revents & POLLIN))
			continue;
		/* The listener is non-blocking: a connection gone before we
		 * take it leaves accept with EAGAIN, not stuck. */
		int fd = accept4(h->fd, NULL, NULL, SOCK_CLOEXEC);
		if (fd == -1) {
			/* Out of descriptors: the connection stays queued;
			 * retrying at once would spin. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				poll(NULL, 0, 100);
			continue;
		}
		struct conn *c = malloc(sizeof(*c));
		pthread_t t;
		if (c == NULL) {
			close(fd);
			continue;
		}
		c->h = h;
		c->fd = fd;
		pthread_mutex_lock(&h->mu);
		h->active++;
		pthread_mutex_unlock(&h->mu);
		__atomic_add_fetch(&h->conns, 1, __ATOMIC_RELAXED);
		if (pthread_create(&t, &h->attr, conn_run, c) != 0) {
			close(fd);
			free(c);
			conn_done(h);
		}
	}
	return NULL;
}

struct dhttp *
dhttp_start(int fd, const struct dhttp_params *p, xmlrpc_registry *reg, char *err,
    size_t errlen)
{
	struct dhttp *h = calloc(1, sizeof(*h));
	xmlrpc_env env;
	sigset_t all, old;
	int rc;

	if (h == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	h->reg = reg;
	h->fd = fd;
	h->max_conns = p->max_conns;
	h->timeout_ms = (int)p->request_timeout_s * 1000;
	h->wake[0] = h->wake[1] = -1;
	xmlrpc_env_init(&env);
	/* Global in xmlrpc-c; set before any thread reads it. */
	xmlrpc_limit_set(XMLRPC_XML_SIZE_LIMIT_ID, p->max_body);
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == -1 ||
	    pipe2(h->wake, O_CLOEXEC) == -1) {
		errbuf_set(err, errlen, "%s", strerror(errno));
		goto fail;
	}
	if (!ServerCreateNoAccept(&h->srv, "slot-dird", NULL, NULL)) {
		errbuf_set(err, errlen, "Abyss: cannot create the server");
		goto fail;
	}
	ServerSetAdvertise(&h->srv, 0);
	/* Abyss waits "keepalive timeout" for a request's first byte (the
	 * first request's too), then "timeout" for the whole request. */
	ServerSetTimeout(&h->srv, p->request_timeout_s);
	ServerSetKeepaliveTimeout(&h->srv, p->request_timeout_s);
	ServerSetKeepaliveMaxConn(&h->srv, 1);

	xmlrpc_server_abyss_handler_parms hp = {
		.xml_processor = process,
		.xml_processor_arg = h,
		.xml_processor_max_stack = DHTTP_STACK / 2,
		.uri_path = "/RPC2",
		.chunk_response = 0,
	};
	xmlrpc_server_abyss_set_handler3(&env, &h->srv, &hp, XMLRPC_AHPSIZE(chunk_response));
	if (env.fault_occurred) {
		errbuf_set(err, errlen, "xmlrpc-c: %s", env.fault_string);
		ServerFree(&h->srv);
		goto fail;
	}
	ServerDefaultHandler(&h->srv, not_found);

	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->freed, NULL);
	pthread_attr_init(&h->attr);
	pthread_attr_setstacksize(&h->attr, DHTTP_STACK);
	pthread_attr_setdetachstate(&h->attr, PTHREAD_CREATE_DETACHED);
	/* Threads inherit the mask: the acceptor and every connection thread
	 * leave signals to the caller's thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&h->acceptor, NULL, accept_loop, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		errbuf_set(err, errlen, "pthread_create: %s", strerror(rc));
		pthread_attr_destroy(&h->attr);
		pthread_cond_destroy(&h->freed);
		pthread_mutex_destroy(&h->mu);
		ServerFree(&h->srv);
		goto fail;
	}
	xmlrpc_env_clean(&env);
	return h;
fail:
	if (h->wake[0] >= 0) {
		close(h->wake[0]);
		close(h->wake[1]);
	}
	xmlrpc_env_clean(&env);
	free(h);
	return NULL;
}

void
dhttp_stop(struct dhttp *h)
{
	if (h == NULL)
		return;
	pthread_mutex_lock(&h->mu);
	h->stopping = true;
	pthread_cond_broadcast(&h->freed);
	pthread_mutex_unlock(&h->mu);
	ssize_t w = write(h->wake[1], "", 1);	/* cannot fail: a fresh pipe */
	(void)w;
	pthread_join(h->acceptor, NULL);
	/* Connections finish within the timeouts; the threads tell us. */
	pthread_mutex_lock(&h->mu);
	while (h->active > 0)
		pthread_cond_wait(&h->freed, &h->mu);
	pthread_mutex_unlock(&h->mu);
	ServerFree(&h->srv);
	pthread_attr_destroy(&h->attr);
	pthread_cond_destroy(&h->freed);
	pthread_mutex_destroy(&h->mu);
	close(h->wake[0]);
	close(h->wake[1]);
	free(h);
}

void
dhttp_counters(struct dhttp *h, struct dhttp_counters *out)
{
	out->conns = __atomic_load_n(&h->conns, __ATOMIC_RELAXED);
	out->requests = __atomic_load_n(&h->requests, __ATOMIC_RELAXED);
	out->refused = __atomic_load_n(&h->refused, __ATOMIC_RELAXED);
	pthread_mutex_lock(&h->mu);
	out->conns_active = h->active;
	pthread_mutex_unlock(&h->mu);
}
