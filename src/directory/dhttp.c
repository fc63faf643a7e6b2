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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <xmlrpc-c/abyss.h>	/* and abyss_unixsock.h, which has no guard */
#include <xmlrpc-c/base.h>
#include <xmlrpc-c/server_abyss.h>

#include "slot/clock.h"
#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "slot/log.h"
#include "slot/ratelimit.h"
#include "slot/xmlguard.h"
#include "dhttp.h"
#include "dsrc.h"

/* Stack of a connection thread: Abyss's request code plus xmlrpc-c's
 * parser, which recurses per nesting level (bounded by DHTTP_NESTING). */
#define DHTTP_STACK ((size_t)2 << 20)

/* Nesting of XML-RPC values (arrays, structs) xmlrpc-c accepts: the deepest
 * call (slot.report: struct, array, struct) needs 3. */
#define DHTTP_NESTING 16

/* Refusals are logged at most once a minute per source. */
#define DHTTP_LOG_EVERY_S 60.0
#define DHTTP_LOG_SOURCES 1024

/* Frees Abyss's error strings (exported by libxmlrpc_util, declared only in
 * its internal headers): one of them may be a static out-of-memory text
 * that free() must not see. */
void xmlrpc_strfree(const char *s);

/* What a connection is doing; the watchdog's deadline depends on it. */
enum conn_phase { PH_HEADERS, PH_BODY, PH_PROCESS, PH_ANSWER, PH_LINGER };

/* How long a connection's close waits for the peer's own, and how much it
 * reads meanwhile (linger): a misdirected request's body, not a flood. */
#define DHTTP_LINGER_MS 2000
#define DHTTP_LINGER_BYTES ((size_t)256 << 10)

struct conn {
	struct dhttp *h;
	int fd;
	struct addr src;		/* its source (dsrc_key) */
	char peer[ADDR_STRLEN];		/* its address, for the log */
	/* Under h->mu: */
	enum conn_phase phase;
	uint64_t deadline_us;		/* monotonic; 0: none */
	bool cut;			/* the watchdog shut it down */
	struct conn *prev, *next;	/* h->list */
};

struct dhttp {
	TServer srv;
	xmlrpc_registry *reg;
	int fd;
	int wake[2];		/* a byte here wakes the acceptor */
	unsigned max_conns, per_source;
	size_t max_header;
	uint64_t header_us, body_us;
	pthread_t acceptor;
	pthread_attr_t attr;	/* of connection threads */
	pthread_mutex_t mu;
	/* Under mu: */
	unsigned active;
	bool stopping;
	struct conn *list;	/* every connection being served */
	struct dsrc *src;
	struct ratelimit *logrl;
	uint64_t conns, requests, refused, refused_source, timed_out;	/* __atomic */
};

/* The connection this thread serves (process() is called on it). */
static __thread struct conn *cur_conn;

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

static uint64_t
now_us(void)
{
	return clock_mono_us();
}

/* Wakes the acceptor (a full pipe is awake already). */
static void
wake(struct dhttp *h)
{
	ssize_t w = write(h->wake[1], "", 1);
	(void)w;
}

/* Whether a refusal of src is to be logged now (once a minute per source). */
static bool
log_allowed(struct dhttp *h, const struct addr *src)
{
	bool ok;

	pthread_mutex_lock(&h->mu);
	ok = h->logrl != NULL && rl_allow(h->logrl, src, now_us());
	pthread_mutex_unlock(&h->mu);
	return ok;
}

/* Moves c to phase p with a deadline `after` us from now (0: none); wakes
 * the acceptor, whose watchdog may have to look sooner. */
static void
set_phase(struct conn *c, enum conn_phase p, uint64_t after)
{
	struct dhttp *h = c->h;

	pthread_mutex_lock(&h->mu);
	c->phase = p;
	c->deadline_us = after ? now_us() + after : 0;
	pthread_mutex_unlock(&h->mu);
	if (after)
		wake(h);
}

static void
fault_answer(xmlrpc_env *env, int code, const char *msg, xmlrpc_mem_block **out)
{
	xmlrpc_env f;

	xmlrpc_env_init(&f);
	xmlrpc_env_set_fault(&f, code, msg);
	*out = XMLRPC_MEMBLOCK_NEW(char, env, 0);
	if (!env->fault_occurred)
		xmlrpc_serialize_fault(env, *out, &f);
	if (env->fault_occurred && *out) {
		XMLRPC_MEMBLOCK_FREE(char, *out);
		*out = NULL;
	}
	xmlrpc_env_clean(&f);
}

/* Abyss hands us each body whole, its length checked against the size
 * limit already. Nothing but plain UTF-8 XML reaches xmlrpc-c's parser
 * (slot/xmlguard.h): a DTD's entities would blow the body up. */
static void
process(xmlrpc_env *env, void *arg, const char *xml, size_t len, TSession *session,
    xmlrpc_mem_block **out)
{
	struct dhttp *h = arg;
	struct conn *c = cur_conn;
	enum xmlg_result r;
	size_t at;

	if (c)
		set_phase(c, PH_PROCESS, 0);
	__atomic_add_fetch(&h->requests, 1, __ATOMIC_RELAXED);
	if ((r = xmlg_check(xml, len, &at)) != XMLG_OK) {
		const char *bom = r == XMLG_BOM ? xmlg_bom_name(xml, len) : NULL;
		char msg[160];

		__atomic_add_fetch(&h->refused, 1, __ATOMIC_RELAXED);
		snprintf(msg, sizeof(msg), "refused unparsed: %s%s%s at byte %zu; XML-RPC "
		    "bodies must be plain UTF-8 XML", bom ? "a " : xmlg_strerror(r),
		    bom ? bom : "", bom ? " byte order mark" : "", at);
		if (c && log_allowed(h, &c->src))
			log_warnx("request from %s %s (%zu bytes; more refusals from this "
			    "source are logged once a minute)", c->peer, msg, len);
		fault_answer(env, DIRP_FAULT_MALFORMED, msg, out);
	} else {
		xmlrpc_registry_process_call2(env, h->reg, xml, len, session, out);
	}
	/* The answer must be taken within body_timeout too. */
	if (c)
		set_phase(c, PH_ANSWER, h->body_us);
}

static abyss_bool
not_found(TSession *session)
{
	ResponseStatus(session, 404);
	ResponseError2(session, "slot-dird serves XML-RPC at /RPC2 only");
	return 1;
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
 * 0, -1 when the connection is to be closed (answered if useful), or -2
 * when it is closed for being too slow.
 */
static int
wait_headers(struct dhttp *h, int fd)
{
	char *buf = malloc(h->max_header);
	uint64_t t0 = now_us();
	int low = 1, rc = -1;

	if (buf == NULL) {
		answer(fd, "503 Service Unavailable");
		return -1;
	}
	for (;;) {
		ssize_t n = recv(fd, buf, h->max_header, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			break;
		if (n > 0) {
			if (memmem(buf, (size_t)n, "\r\n\r\n", 4) || memmem(buf, (size_t)n, "\n\n", 2)) {
				rc = 0;
				break;
			}
			if ((size_t)n == h->max_header) {
				answer(fd, "431 Request Header Fields Too Large");
				break;
			}
			low = (int)n + 1;
			if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low)) == -1)
				break;
		}
		uint64_t spent = now_us() - t0;
		long left = spent < h->header_us ? (long)((h->header_us - spent + 999) / 1000) : 0;
		struct pollfd pf = { .fd = fd, .events = POLLIN | POLLRDHUP };
		int pr = left > 0 ? poll(&pf, 1, (int)left) : 0;
		if (pr == 0) {
			__atomic_add_fetch(&h->timed_out, 1, __ATOMIC_RELAXED);
			answer(fd, "408 Request Timeout");
			rc = -2;
			break;
		}
		/* A peer gone half-way stays readable: do not spin on it. */
		if (pr < 0 ? errno != EINTR : (pf.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
			break;
	}
	low = 1;
	if (rc == 0 && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof(low)) == -1)
		rc = -1;
	free(buf);
	return rc;
}

static void
conn_unlink(struct dhttp *h, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		h->list = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

/*
 * Waits for the peer to stop sending before the close. An answer given
 * before the request was read whole (404, "request too large", 431) leaves
 * bytes unread, and a close on unread bytes sends a reset, which can
 * overtake the answer and make the peer's kernel drop it. So the write side
 * goes first (the peer gets the answer, then EOF), and what still comes is
 * read and dropped until the peer closes, for at most DHTTP_LINGER_MS and
 * DHTTP_LINGER_BYTES (HTTP's "lingering close"; a flood gets the reset).
 * The connection keeps its slot meanwhile; the caller closes.
 */
static void
linger(int fd)
{
	char b[4096];
	uint64_t end = now_us() + (uint64_t)DHTTP_LINGER_MS * 1000;
	size_t got = 0;

	if (shutdown(fd, SHUT_WR) == 0) {
		while (got < DHTTP_LINGER_BYTES) {
			ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);

			if (n > 0) {
				got += (size_t)n;
				continue;
			}
			if (n < 0 && errno == EINTR)
				continue;
			if (n == 0 || errno != EAGAIN)
				break;
			uint64_t now = now_us();
			struct pollfd pf = { .fd = fd, .events = POLLIN | POLLRDHUP };

			if (now >= end || poll(&pf, 1, (int)((end - now + 999) / 1000)) == 0)
				break;
		}
	}
}

static void *
conn_run(void *arg)
{
	struct conn *c = arg;
	struct dhttp *h = c->h;
	struct abyss_unix_chaninfo *info = NULL;
	TChannel *ch = NULL;
	const char *e = NULL;

	cur_conn = c;
	int waited = wait_headers(h, c->fd);

	if (waited == 0) {
		set_phase(c, PH_BODY, h->body_us);
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
	cur_conn = NULL;
	/* A peer cut off for being slow gets no more of our time. */
	pthread_mutex_lock(&h->mu);
	bool slow = waited == -2 || c->cut;
	pthread_mutex_unlock(&h->mu);
	if (!slow) {
		set_phase(c, PH_LINGER, 0);
		linger(c->fd);
	}
	/* Out of the list before the close: the watchdog only ever shuts
	 * down descriptors that are still ours. */
	pthread_mutex_lock(&h->mu);
	conn_unlink(h, c);
	dsrc_put(h->src, &c->src);
	bool wake_acceptor = h->active-- >= h->max_conns || h->stopping;
	pthread_mutex_unlock(&h->mu);
	close(c->fd);
	free(c);
	if (wake_acceptor)
		wake(h);
	return NULL;
}

/*
 * Cuts connections past their deadline: a body or an answer that trickles
 * would hold its slot as long as the peer likes, since Abyss's timeout
 * counts per read. A body cut gets 408 first. Under h->mu. Returns the
 * poll timeout until the next deadline (ms, -1: none).
 */
static int
watchdog(struct dhttp *h, uint64_t now)
{
	uint64_t next = 0;

	for (struct conn *c = h->list; c; c = c->next) {
		if (c->deadline_us == 0 || c->cut)
			continue;
		if (c->deadline_us > now) {
			if (next == 0 || c->deadline_us < next)
				next = c->deadline_us;
			continue;
		}
		c->cut = true;
		__atomic_add_fetch(&h->timed_out, 1, __ATOMIC_RELAXED);
		if (c->phase == PH_BODY)
			answer(c->fd, "408 Request Timeout");
		shutdown(c->fd, SHUT_RDWR);
	}
	return next == 0 ? -1 : (int)((next - now + 999) / 1000);
}

/* Refuses a connection of a source that holds its share of the slots. */
static void
refuse_source(struct dhttp *h, int fd, const struct addr *src)
{
	char a[ADDR_STRLEN];

	__atomic_add_fetch(&h->refused_source, 1, __ATOMIC_RELAXED);
	answer(fd, "503 Service Unavailable");
	close(fd);
	if (log_allowed(h, src))
		log_warnx("connection from %s refused: it holds %u connections already "
		    "([limits] max_conns_per_source; more refusals from this source are "
		    "logged once a minute)", addr_fmt(src, a), h->per_source);
}

static void
drain(int fd)
{
	char b[64];

	while (read(fd, b, sizeof(b)) > 0)
		;
}

/*
 * Accepts while a slot is free and the source holds fewer than its share;
 * runs the watchdog between. After dhttp_stop it accepts no more and
 * returns once every connection has ended.
 */
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
		int tmo = watchdog(h, now_us());
		bool stop = h->stopping, full = h->active >= h->max_conns;
		unsigned active = h->active;
		pthread_mutex_unlock(&h->mu);
		if (stop && active == 0)
			break;
		pf[0].events = stop || full ? 0 : POLLIN;
		if (poll(pf, 2, tmo) == -1) {
			if (errno != EINTR)
				poll(NULL, 0, 100);
			continue;
		}
		if (pf[1].revents)
			drain(h->wake[0]);
		if (!(pf[0].revents & POLLIN))
			continue;
		/* The listener is non-blocking: a connection gone before we
		 * take it leaves accept with EAGAIN, not stuck. */
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(h->fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
		if (fd == -1) {
			/* Out of descriptors: the connection stays queued;
			 * retrying at once would spin. */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				poll(NULL, 0, 100);
			continue;
		}
		__atomic_add_fetch(&h->conns, 1, __ATOMIC_RELAXED);
		struct conn *c = calloc(1, sizeof(*c));
		if (c == NULL || dsrc_key((struct sockaddr *)&ss, sl, &c->src) == -1) {
			free(c);
			close(fd);
			continue;
		}
		struct endpoint ep;
		if (ep_from_sockaddr((struct sockaddr *)&ss, sl, &ep) == 0)
			addr_fmt(&ep.addr, c->peer);
		c->h = h;
		c->fd = fd;
		/* wait_headers answers 408 at header_timeout; the watchdog
		 * is its backstop. */
		c->phase = PH_HEADERS;
		c->deadline_us = now_us() + h->header_us + 1000000;
		pthread_mutex_lock(&h->mu);
		if (dsrc_take(h->src, &c->src) == -1) {
			pthread_mutex_unlock(&h->mu);
			refuse_source(h, fd, &c->src);
			free(c);
			continue;
		}
		h->active++;
		c->next = h->list;
		if (h->list)
			h->list->prev = c;
		h->list = c;
		pthread_mutex_unlock(&h->mu);
		/* A blocked send (a peer that reads nothing) ends at the
		 * watchdog's deadline anyway; this bounds one call too. */
		struct timeval tv = { .tv_sec = (time_t)(h->body_us / 1000000),
		    .tv_usec = (suseconds_t)(h->body_us % 1000000) };
		(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		pthread_t t;
		if (pthread_create(&t, &h->attr, conn_run, c) != 0) {
			pthread_mutex_lock(&h->mu);
			conn_unlink(h, c);
			dsrc_put(h->src, &c->src);
			h->active--;
			pthread_mutex_unlock(&h->mu);
			close(fd);
			free(c);
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
	h->per_source = p->max_conns_per_source;
	h->max_header = p->max_header;
	h->header_us = p->header_timeout_ms * 1000;
	h->body_us = p->body_timeout_ms * 1000;
	h->wake[0] = h->wake[1] = -1;
	xmlrpc_env_init(&env);
	/* Global in xmlrpc-c; set before any thread reads it. */
	xmlrpc_limit_set(XMLRPC_XML_SIZE_LIMIT_ID, p->max_body);
	xmlrpc_limit_set(XMLRPC_NESTING_LIMIT_ID, DHTTP_NESTING);
	if (p->max_conns == 0 || p->max_header < 64 || h->header_us == 0 || h->body_us == 0) {
		errbuf_set(err, errlen, "dhttp: a zero limit");
		goto fail;
	}
	if ((h->src = dsrc_new(p->max_conns, p->max_conns_per_source)) == NULL ||
	    (h->logrl = rl_new(DHTTP_LOG_SOURCES, 1.0 / DHTTP_LOG_EVERY_S, 1)) == NULL) {
		errbuf_set(err, errlen, "out of memory");
		goto fail;
	}
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == -1 ||
	    pipe2(h->wake, O_CLOEXEC | O_NONBLOCK) == -1) {
		errbuf_set(err, errlen, "%s", strerror(errno));
		goto fail;
	}
	if (!ServerCreateNoAccept(&h->srv, "slot-dird", NULL, NULL)) {
		errbuf_set(err, errlen, "Abyss: cannot create the server");
		goto fail;
	}
	ServerSetAdvertise(&h->srv, 0);
	/* Abyss waits "keepalive timeout" for a request's first byte (the
	 * first request's too), then "timeout" for each read of the rest;
	 * the headers are in by then, and the watchdog bounds the whole. */
	unsigned body_s = (unsigned)((p->body_timeout_ms + 999) / 1000);
	ServerSetTimeout(&h->srv, body_s);
	ServerSetKeepaliveTimeout(&h->srv, body_s);
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
	dsrc_free(h->src);
	rl_free(h->logrl);
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
	pthread_mutex_unlock(&h->mu);
	wake(h);
	/* The acceptor returns once the connections open have ended, each
	 * within its deadlines (the watchdog keeps running till then). */
	pthread_join(h->acceptor, NULL);
	ServerFree(&h->srv);
	pthread_attr_destroy(&h->attr);
	pthread_mutex_destroy(&h->mu);
	close(h->wake[0]);
	close(h->wake[1]);
	dsrc_free(h->src);
	rl_free(h->logrl);
	free(h);
}

void
dhttp_counters(struct dhttp *h, struct dhttp_counters *out)
{
	out->conns = __atomic_load_n(&h->conns, __ATOMIC_RELAXED);
	out->requests = __atomic_load_n(&h->requests, __ATOMIC_RELAXED);
	out->refused = __atomic_load_n(&h->refused, __ATOMIC_RELAXED);
	out->refused_source = __atomic_load_n(&h->refused_source, __ATOMIC_RELAXED);
	out->timed_out = __atomic_load_n(&h->timed_out, __ATOMIC_RELAXED);
	pthread_mutex_lock(&h->mu);
	out->conns_active = h->active;
	out->sources_active = dsrc_sources(h->src);
	pthread_mutex_unlock(&h->mu);
}
