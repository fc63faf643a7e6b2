#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/log.h"
#include "stats.h"

#define STATS_MAX_CLIENTS 16

struct stats_client {
	struct stats_srv *s;
	int fd;
	ev_io io;
	ev_timer timeout;
	char line[64];
	size_t len;
};

struct stats_srv {
	struct relay *r;
	int fd;
	ev_io io;
	struct stats_client *clients[STATS_MAX_CLIENTS];
};

size_t
stats_format(const struct relay *r, int json, char *buf, size_t cap)
{
	const struct relay_counters *c = &r->ctr;
	const struct { const char *name; unsigned long long v; } v[] = {
		{ "pipes_open", c->pipes_open },
		{ "pipes_pending", c->pipes_pending },
		{ "pipes_total", c->pipes_total },
		{ "pipes_failed", c->pipes_failed },
		{ "pipes_expired", c->pipes_expired },
		{ "bytes_client_to_server", c->bytes_client_to_server },
		{ "bytes_server_to_client", c->bytes_server_to_client },
		{ "probes_answered", c->probes_answered },
		{ "probes_refused", c->probes_refused },
		{ "probes_dropped", c->probes_dropped },
		{ "control_conns", c->control_conns },
		{ "control_errors", c->control_errors },
		{ "data_rejected", c->data_rejected },
		{ "kpipes_in_use", r->kpipes.in_use },
		{ "kpipes_free", r->kpipes.nfree },
		{ "kpipes_undersized", r->kpipes.undersized },
		{ "draining", (unsigned long long)r->draining },
	};
	size_t n = 0, nv = sizeof(v) / sizeof(v[0]);

	buf[0] = '\0';
	for (size_t i = 0; i < nv && n < cap; i++) {
		int w = json ?
		    snprintf(buf + n, cap - n, "%s\"%s\":%llu%s", i ? "" : "{", v[i].name,
			v[i].v, i + 1 < nv ? "," : "}\n") :
		    snprintf(buf + n, cap - n, "%s %llu\n", v[i].name, v[i].v);
		if (w < 0)
			break;
		n += (size_t)w;
	}
	return n < cap ? n : cap - 1;
}

static void
client_close(struct stats_client *c)
{
	struct stats_srv *s = c->s;

	ev_io_stop(s->r->loop, &c->io);
	ev_timer_stop(s->r->loop, &c->timeout);
	close(c->fd);
	for (int i = 0; i < STATS_MAX_CLIENTS; i++)
		if (s->clients[i] == c)
			s->clients[i] = NULL;
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
client_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct stats_client *c = w->data;
	char out[4096];
	(void)loop;
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
	size_t len;
	if (strcmp(c->line, "counters") == 0 || strcmp(c->line, "json") == 0)
		len = stats_format(c->s->r, c->line[0] == 'j', out, sizeof(out));
	else
		len = (size_t)snprintf(out, sizeof(out),
		    "error: unknown command (try \"counters\" or \"json\")\n");
	/* The answer fits any unix socket buffer; one send is enough. */
	(void)send(c->fd, out, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	client_close(c);
}

static void
stats_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct stats_srv *s = w->data;
	int slot = -1;
	(void)revents;

	int fd = accept4(s->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd == -1)
		return;
	for (int i = 0; i < STATS_MAX_CLIENTS; i++)
		if (s->clients[i] == NULL)
			slot = i;
	struct stats_client *c = slot < 0 ? NULL : calloc(1, sizeof(*c));
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
	ev_timer_init(&c->timeout, client_timeout_cb, 5., 0.);
	c->timeout.data = c;
	ev_timer_start(loop, &c->timeout);
}

struct stats_srv *
stats_start(struct relay *r, int fd)
{
	struct stats_srv *s = calloc(1, sizeof(*s));

	if (s == NULL) {
		close(fd);
		return NULL;
	}
	s->r = r;
	s->fd = fd;
	ev_io_init(&s->io, stats_accept_cb, fd, EV_READ);
	s->io.data = s;
	ev_io_start(r->loop, &s->io);
	return s;
}

void
stats_stop(struct stats_srv *s)
{
	if (s == NULL)
		return;
	for (int i = 0; i < STATS_MAX_CLIENTS; i++)
		if (s->clients[i])
			client_close(s->clients[i]);
	ev_io_stop(s->r->loop, &s->io);
	close(s->fd);
	free(s);
}
