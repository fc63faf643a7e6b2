/* The command server: the unix control socket (line mode) and the metrics
 * listener (HTTP mode), on the daemon's loop. What a request means is the
 * handler's (slot/ctlcmd.h) or ctlhttp.c's; this reads, sends and keeps
 * clients to their deadline. */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/addr.h"
#include "slot/ctlsrv.h"

#define CTL_MAX_CLIENTS 16
#define CTL_DEADLINE 5.	/* seconds a client may take, reading and being read */
#define CTL_LINE_MAX 128	/* a command line; longer ones are cut */
#define CTL_HTTP_HEAD_MAX 4096	/* request line and headers; beyond: 431 */

enum ctl_mode { CTL_MODE_LINE, CTL_MODE_HTTP };

enum ctl_phase {
	CTL_READING,		/* the request */
	CTL_WRITING,		/* the answer */
	CTL_LINGERING,		/* HTTP: answer sent, write half shut, reading to EOF */
};

struct ctl_client {
	struct ctlsrv *s;
	int fd;
	ev_io io;
	ev_timer timeout;
	ev_tstamp accepted;
	bool has_peer;
	struct addr peer;	/* HTTP: where it connects from */
	enum ctl_phase phase;
	size_t len, cap;	/* of req, the terminating NUL excluded */
	struct ctl_out out;
	size_t sent;
	char req[];
};

struct ctlsrv {
	struct ev_loop *loop;
	enum ctl_mode mode;
	int fd;
	ev_io io;
	ev_timer retry;		/* accepting paused: out of descriptors */
	ctl_handler h;
	void *user;
	struct ctl_client *clients[CTL_MAX_CLIENTS];
};

/* ---------------------------------------------------------------- clients */

static void
client_close(struct ctl_client *c)
{
	struct ctlsrv *s = c->s;

	ev_io_stop(s->loop, &c->io);
	ev_timer_stop(s->loop, &c->timeout);
	close(c->fd);
	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i] == c)
			s->clients[i] = NULL;
	free(c->out.buf);
	free(c);
}

static void client_write_cb(struct ev_loop *loop, ev_io *w, int revents);

/* The answer is in c->out: write it as the socket drains. */
static void
client_answer(struct ctl_client *c)
{
	struct ev_loop *loop = c->s->loop;

	c->phase = CTL_WRITING;
	ev_io_stop(loop, &c->io);
	ev_io_init(&c->io, client_write_cb, c->fd, EV_WRITE);
	c->io.data = c;
	ev_io_start(loop, &c->io);
}

static void
linger_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	char sink[4096];
	(void)loop;
	(void)revents;

	/* A bounded share per wake-up: a client that keeps sending must not
	 * hold the loop; the deadline ends it. */
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(c->fd, sink, sizeof(sink));
		if (n > 0 || (n < 0 && errno == EINTR))
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		client_close(c);
		return;
	}
}

static void
client_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)revents;

	while (c->sent < c->out.len) {
		ssize_t n = send(c->fd, c->out.buf + c->sent, c->out.len - c->sent,
		    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			client_close(c);
			return;
		}
		c->sent += (size_t)n;
	}
	if (c->s->mode == CTL_MODE_LINE) {
		client_close(c);
		return;
	}
	/* Closing with unread request bytes (a body, pipelined junk) would
	 * send a RST that can destroy the answer still in flight: shut our
	 * half and read the rest until the client closes or the deadline. */
	(void)shutdown(c->fd, SHUT_WR);
	c->phase = CTL_LINGERING;
	ev_io_stop(loop, &c->io);
	ev_io_init(&c->io, linger_read_cb, c->fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
}

/* ---------------------------------------------------------------- reading */

/* The head is complete (or cannot be): answer it. */
static void
http_request(struct ctl_client *c, int status)
{
	struct ctl_out body = { 0 };

	if (status == 0)
		status = ctl_http_route(c->req, c->len);
	if (status == 200)
		c->s->h(c->s->user, "metrics", &body);
	ctl_http_response(&c->out, status, &body);
	free(body.buf);
	if (c->out.oom) {
		client_close(c);
		return;
	}
	client_answer(c);
}

static void
client_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)loop;
	(void)revents;

	/* An HTTP client still sending its head hears why it is cut off, if
	 * its socket takes a few bytes now; nobody waits for that. */
	if (c->s->mode == CTL_MODE_HTTP && c->phase == CTL_READING && c->len > 0) {
		struct ctl_out o = { 0 };
		ctl_http_response(&o, 408, NULL);
		if (!o.oom)
			(void)send(c->fd, o.buf, o.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		free(o.buf);
	}
	client_close(c);
}

/* The request so far: a line, or an HTTP head. */
static void
client_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	bool http = c->s->mode == CTL_MODE_HTTP;
	(void)loop;
	(void)revents;

	ssize_t n = read(c->fd, c->req + c->len, c->cap - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0 || (n == 0 && (!http || c->len == 0))) {
		client_close(c);
		return;
	}
	if (n == 0) {		/* half-closed before the end of its head */
		http_request(c, 400);
		return;
	}
	/* HTTP looks again only where the end may be: the last few old bytes
	 * on. */
	size_t from = c->len > 3 ? c->len - 3 : 0;
	c->len += (size_t)n;
	c->req[c->len] = '\0';
	if (http) {
		if (ctl_http_head_end(c->req + from, c->len - from) != NULL)
			http_request(c, 0);
		else if (c->len == c->cap)
			http_request(c, 431);
		return;
	}
	/* memchr: a NUL in the line must not hide its end (the handler then
	 * sees the line cut at the NUL, and refuses it). */
	char *nl = memchr(c->req, '\n', c->len);
	if (nl == NULL && c->len < c->cap)
		return;
	if (nl)
		*nl = '\0';
	if (nl && nl > c->req && nl[-1] == '\r')
		nl[-1] = '\0';
	c->s->h(c->s->user, c->req, &c->out);
	client_answer(c);
}

/* ---------------------------------------------------------------- accepting */

/* Whether a and b come from one peer: one IPv4 address, one IPv6 /64 (a
 * host gets a whole /64 as easily as one address). */
static bool
same_peer(const struct ctl_client *a, const struct addr *b)
{
	if (!a->has_peer || b == NULL || a->peer.family != b->family)
		return false;
	return addr_common_bits(&a->peer, b) >= (b->family == AF_INET ? 32u : 64u);
}

/* Which client goes first when an HTTP client finds every slot taken: one
 * whose answer is sent (it only lingers to read what it sent too much),
 * then one still sending its request, then one being written to (stalled,
 * but a new request matters more than a reader that does not read). */
static int
phase_rank(enum ctl_phase p)
{
	return p == CTL_LINGERING ? 0 : p == CTL_READING ? 1 : 2;
}

/* A free slot. Failing that, in HTTP mode, the slot of a client closed for
 * the newcomer (from peer, may be NULL): one of the peer holding most slots
 * (the newcomer counted), so that one peer's clients make room among
 * themselves rather than push out others'; among those, by phase_rank,
 * then the oldest. -1 if none (line mode). */
static int
client_slot(struct ctlsrv *s, const struct addr *peer)
{
	int best = -1, best_n = 0, best_rank = 0;

	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i] == NULL)
			return i;
	if (s->mode != CTL_MODE_HTTP)
		return -1;
	for (int i = 0; i < CTL_MAX_CLIENTS; i++) {
		struct ctl_client *c = s->clients[i];
		int n = same_peer(c, peer), rank = phase_rank(c->phase);

		for (int j = 0; j < CTL_MAX_CLIENTS; j++)
			n += j == i || (c->has_peer && same_peer(s->clients[j], &c->peer));
		if (best < 0 || n > best_n || (n == best_n && (rank < best_rank ||
		    (rank == best_rank && c->accepted < s->clients[best]->accepted)))) {
			best = i;
			best_n = n;
			best_rank = rank;
		}
	}
	client_close(s->clients[best]);
	return best;
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctlsrv *s = w->data;
	size_t cap = s->mode == CTL_MODE_HTTP ? CTL_HTTP_HEAD_MAX : CTL_LINE_MAX - 1;
	(void)revents;

	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	struct endpoint from;
	int fd = accept4(s->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1) {
		/* The pending connection stays readable: pause rather than
		 * spin until a descriptor frees up. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			ev_io_stop(loop, &s->io);
			ev_timer_start(loop, &s->retry);
		}
		return;
	}
	bool has_peer = s->mode == CTL_MODE_HTTP &&
	    ep_from_sockaddr((struct sockaddr *)&ss, sl, &from) == 0;
	int slot = client_slot(s, has_peer ? &from.addr : NULL);
	struct ctl_client *c = slot < 0 ? NULL : calloc(1, sizeof(*c) + cap + 1);
	if (c == NULL) {
		close(fd);
		return;
	}
	c->s = s;
	c->has_peer = has_peer;
	if (has_peer)
		c->peer = from.addr;
	c->fd = fd;
	c->cap = cap;
	c->phase = CTL_READING;
	c->accepted = ev_now(loop);
	s->clients[slot] = c;
	ev_io_init(&c->io, client_read_cb, fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
	ev_timer_init(&c->timeout, client_timeout_cb, CTL_DEADLINE, 0.);
	c->timeout.data = c;
	ev_timer_start(loop, &c->timeout);
}

static void
retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct ctlsrv *s = w->data;
	(void)revents;

	ev_io_start(loop, &s->io);
}

static struct ctlsrv *
start(struct ev_loop *loop, int fd, ctl_handler h, void *user, enum ctl_mode mode)
{
	struct ctlsrv *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		close(fd);
		return NULL;
	}
	s->loop = loop;
	s->mode = mode;
	s->fd = fd;
	s->h = h;
	s->user = user;
	ev_io_init(&s->io, accept_cb, fd, EV_READ);
	s->io.data = s;
	ev_io_start(loop, &s->io);
	ev_timer_init(&s->retry, retry_cb, 0.5, 0.);
	s->retry.data = s;
	return s;
}

struct ctlsrv *
ctlsrv_start(struct ev_loop *loop, int fd, ctl_handler h, void *user)
{
	return start(loop, fd, h, user, CTL_MODE_LINE);
}

struct ctlsrv *
ctlsrv_start_http(struct ev_loop *loop, int fd, ctl_handler h, void *user)
{
	return start(loop, fd, h, user, CTL_MODE_HTTP);
}

void
ctlsrv_stop(struct ctlsrv *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i])
			client_close(s->clients[i]);
	ev_io_stop(s->loop, &s->io);
	ev_timer_stop(s->loop, &s->retry);
	close(s->fd);
	free(s);
}
