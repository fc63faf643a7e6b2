#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/ctlsrv.h"

#define CTL_MAX_CLIENTS 16
#define CTL_DEADLINE 5.	/* seconds a client may take, reading and being read */

struct ctl_client {
	struct ctlsrv *s;
	int fd;
	ev_io io;
	ev_timer timeout;
	char line[128];
	size_t len;
	struct ctl_out out;
	size_t sent;
};

struct ctlsrv {
	struct ev_loop *loop;
	int fd;
	ev_io io;
	ev_timer retry;		/* accepting paused: out of descriptors */
	ctl_handler h;
	void *user;
	struct ctl_client *clients[CTL_MAX_CLIENTS];
};

void
ctl_printf(struct ctl_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->oom = true;
			return;
		}
		if (o->len + (size_t)n < o->cap) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = o->cap ? o->cap : 4096;
		while (cap <= o->len + (size_t)n)
			cap *= 2;
		char *b = realloc(o->buf, cap);
		if (b == NULL) {
			o->oom = true;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
}

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

static void
client_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	client_close(w->data);
}

static void
client_write_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)loop;
	(void)revents;

	while (c->sent < c->out.len) {
		ssize_t n = send(c->fd, c->out.buf + c->sent, c->out.len - c->sent,
		    MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			break;
		c->sent += (size_t)n;
	}
	client_close(c);
}

static void
client_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)revents;

	ssize_t n = read(c->fd, c->line + c->len, sizeof(c->line) - 1 - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_close(c);
		return;
	}
	c->len += (size_t)n;
	c->line[c->len] = '\0';
	char *nl = strchr(c->line, '\n');
	if (nl == NULL && c->len < sizeof(c->line) - 1)
		return;
	if (nl)
		*nl = '\0';
	if (nl && nl > c->line && nl[-1] == '\r')
		nl[-1] = '\0';
	c->s->h(c->s->user, c->line, &c->out);
	ev_io_stop(loop, &c->io);
	ev_io_init(&c->io, client_write_cb, c->fd, EV_WRITE);
	c->io.data = c;
	ev_io_start(loop, &c->io);
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctlsrv *s = w->data;
	int slot = -1;
	(void)revents;

	int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1) {
		/* The pending connection stays readable: pause rather than
		 * spin until a descriptor frees up. */
		if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
			ev_io_stop(loop, &s->io);
			ev_timer_start(loop, &s->retry);
		}
		return;
	}
	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i] == NULL)
			slot = i;
	struct ctl_client *c = slot < 0 ? NULL : calloc(1, sizeof(*c));
	if (c == NULL) {
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
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

struct ctlsrv *
ctlsrv_start(struct ev_loop *loop, int fd, ctl_handler h, void *user)
{
	struct ctlsrv *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		close(fd);
		return NULL;
	}
	s->loop = loop;
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
