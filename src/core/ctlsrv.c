#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/clock.h"
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

/* Appends n bytes as they are (they may hold NULs). */
static void
ctl_append(struct ctl_out *o, const char *p, size_t n)
{
	if (o->oom)
		return;
	if (o->len + n >= o->cap) {
		size_t cap = o->cap ? o->cap : 4096;
		while (cap <= o->len + n)
			cap *= 2;
		char *b = realloc(o->buf, cap);
		if (b == NULL) {
			o->oom = true;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

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

/* ---------------------------------------------------------------- HTTP */

static const char *
http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 431: return "Request Header Fields Too Large";
	default: return "Internal Server Error";
	}
}

/* A whole response: status line, headers, body. */
static void
http_respond(struct ctl_out *o, int status, const char *type, const char *body, size_t len)
{
	ctl_printf(o, "HTTP/1.0 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	    "%sConnection: close\r\n\r\n", status, http_reason(status), type, len,
	    status == 405 ? "Allow: GET\r\n" : "");
	ctl_append(o, body, len);
}

static void
http_error(struct ctl_out *o, int status)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", status, http_reason(status));

	http_respond(o, status, "text/plain; charset=utf-8", body, (size_t)n);
}

/* RFC 9110 tchar, which is what a method is made of. */
static bool
is_tchar(char ch)
{
	return isalnum((unsigned char)ch) || (ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch));
}

int
ctl_http_route(const char *req, size_t len)
{
	const char *p = req, *method, *target, *version;
	size_t mlen, tlen;

	if (memchr(req, '\0', len) != NULL)
		return 400;
	method = p;
	while (is_tchar(*p))
		p++;
	mlen = (size_t)(p - method);
	if (mlen == 0 || *p++ != ' ')
		return 400;
	target = p;
	while (*p > ' ' && *p != 0x7f)
		p++;
	tlen = (size_t)(p - target);
	if (tlen == 0 || *p++ != ' ')
		return 400;
	version = p;
	if (strncmp(version, "HTTP/1.", 7) != 0 || !isdigit((unsigned char)version[7]) ||
	    (version[8] != '\r' && version[8] != '\n'))
		return 400;
	if (mlen != 3 || memcmp(method, "GET", 3) != 0)
		return 405;
	/* A scraper may add a query (Prometheus "params"): it changes nothing. */
	size_t plen = tlen;
	const char *q = memchr(target, '?', tlen);
	if (q)
		plen = (size_t)(q - target);
	if (plen != 8 || memcmp(target, "/metrics", 8) != 0)
		return 404;
	return 200;
}

/* The head is complete (or cannot be): answer it. */
static void
http_request(struct ctl_client *c, int status)
{
	if (status == 0)
		status = ctl_http_route(c->req, c->len);
	if (status == 200) {
		struct ctl_out body = { 0 };
		c->s->h(c->s->user, "metrics", &body);
		if (body.oom || (body.len >= 6 && memcmp(body.buf, "error:", 6) == 0))
			http_error(&c->out, 500);
		else
			http_respond(&c->out, 200, "text/plain; version=0.0.4; charset=utf-8",
			    body.buf ? body.buf : "", body.len);
		free(body.buf);
	} else
		http_error(&c->out, status);
	if (c->out.oom) {
		client_close(c);
		return;
	}
	client_answer(c);
}

const char *
ctl_http_head_end(const char *req, size_t len)
{
	for (size_t i = 0; i + 1 < len; i++) {
		if (req[i] != '\n')
			continue;
		if (req[i + 1] == '\n' ||
		    (req[i + 1] == '\r' && i + 2 < len && req[i + 2] == '\n'))
			return req + i;
	}
	return NULL;
}

/* ---------------------------------------------------------------- reading */

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
		http_error(&o, 408);
		if (!o.oom)
			(void)send(c->fd, o.buf, o.len, MSG_NOSIGNAL | MSG_DONTWAIT);
		free(o.buf);
	}
	client_close(c);
}

static void
line_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)loop;
	(void)revents;

	ssize_t n = read(c->fd, c->req + c->len, c->cap - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		client_close(c);
		return;
	}
	c->len += (size_t)n;
	c->req[c->len] = '\0';
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

static void
http_read_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *c = w->data;
	(void)loop;
	(void)revents;

	ssize_t n = read(c->fd, c->req + c->len, c->cap - c->len);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n < 0 || (n == 0 && c->len == 0)) {
		client_close(c);
		return;
	}
	if (n == 0) {		/* half-closed before the end of its head */
		http_request(c, 400);
		return;
	}
	/* Look again only where the end may be: the last few old bytes on. */
	size_t from = c->len > 3 ? c->len - 3 : 0;
	c->len += (size_t)n;
	c->req[c->len] = '\0';
	if (ctl_http_head_end(c->req + from, c->len - from) != NULL)
		http_request(c, 0);
	else if (c->len == c->cap)
		http_request(c, 431);
}

/* ---------------------------------------------------------------- accepting */

/* A free slot; in HTTP mode, failing that, the slot of the oldest client
 * still sending its request. -1 if none. */
static int
client_slot(struct ctlsrv *s)
{
	int oldest = -1;

	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i] == NULL)
			return i;
	if (s->mode != CTL_MODE_HTTP)
		return -1;
	for (int i = 0; i < CTL_MAX_CLIENTS; i++)
		if (s->clients[i]->phase == CTL_READING && (oldest < 0 ||
		    s->clients[i]->accepted < s->clients[oldest]->accepted))
			oldest = i;
	if (oldest >= 0)
		client_close(s->clients[oldest]);
	return oldest;
}

static void
accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctlsrv *s = w->data;
	size_t cap = s->mode == CTL_MODE_HTTP ? CTL_HTTP_HEAD_MAX : CTL_LINE_MAX - 1;
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
	int slot = client_slot(s);
	struct ctl_client *c = slot < 0 ? NULL : calloc(1, sizeof(*c) + cap + 1);
	if (c == NULL) {
		close(fd);
		return;
	}
	c->s = s;
	c->fd = fd;
	c->cap = cap;
	c->phase = CTL_READING;
	c->accepted = ev_now(loop);
	s->clients[slot] = c;
	ev_io_init(&c->io, s->mode == CTL_MODE_HTTP ? http_read_cb : line_read_cb, fd, EV_READ);
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

/* ---------------------------------------------------------------- requests */

static bool
is_cmd_char(char ch)
{
	return isalnum((unsigned char)ch) || ch == '_' || ch == '-';
}

static bool
is_arg_char(char ch)
{
	return ch > ' ' && ch < 0x7f;
}

static int
req_parse(const char *line, struct ctl_req *r, bool with_arg)
{
	const char *p = line, *w;
	size_t n;

	memset(r, 0, sizeof(*r));
	while (*p == ' ' || *p == '\t')
		p++;
	for (w = p; is_cmd_char(*p); p++)
		;
	n = (size_t)(p - w);
	if (n == 0 || n >= sizeof(r->cmd))
		return -1;
	memcpy(r->cmd, w, n);
	for (int words = 0; words < 2; words++) {
		while (*p == ' ' || *p == '\t')
			p++;
		for (w = p; is_arg_char(*p); p++)
			;
		n = (size_t)(p - w);
		if (n == 0)
			break;
		if (n == 4 && strncmp(w, "json", 4) == 0 && !r->json) {
			r->json = true;
			continue;
		}
		/* The argument comes before "json", once. */
		if (!with_arg || r->json || r->arg[0] || n >= sizeof(r->arg))
			return -1;
		memcpy(r->arg, w, n);
	}
	while (*p == ' ' || *p == '\t')
		p++;
	return *p == '\0' ? 0 : -1;
}

int
ctl_req_parse(const char *line, struct ctl_req *r)
{
	return req_parse(line, r, false);
}

int
ctl_req_parse_arg(const char *line, struct ctl_req *r)
{
	return req_parse(line, r, true);
}

void
ctl_error(struct ctl_out *o, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ctl_printf(o, "error: %s\n", msg);
}

/* ---------------------------------------------------------------- identity */

void
ctl_ident_init(struct ctl_ident *id, const char *daemon, const char *metrics,
    const char *version, const char *conf_path)
{
	id->daemon = daemon;
	id->metrics = metrics;
	id->version = version;
	/* "-c relayd.conf" means little to whoever asks later from elsewhere. */
	if (realpath(conf_path, id->conf_path) == NULL)
		snprintf(id->conf_path, sizeof(id->conf_path), "%s", conf_path);
	id->start_mono_us = clock_mono_us();
	id->start_real_us = clock_real_us();
}

void
ctl_json_open(struct ctl_out *o, const struct ctl_ident *id)
{
	ctl_printf(o, "{\"daemon\":");
	ctl_json_str(o, id->daemon);
}

void
ctl_json_close(struct ctl_out *o)
{
	ctl_printf(o, "}\n");
}

void
ctl_json_str(struct ctl_out *o, const char *s)
{
	if (s == NULL) {
		ctl_printf(o, "null");
		return;
	}
	ctl_printf(o, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			ctl_printf(o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			ctl_printf(o, "\\u%04x", ch);
		else
			ctl_printf(o, "%c", ch);
	}
	ctl_printf(o, "\"");
}

const char *
ctl_fmt_dur(uint64_t us, char buf[16])
{
	uint64_t s = us / 1000000;

	if (us < 1000000)
		snprintf(buf, 16, "%llums", (unsigned long long)(us / 1000));
	else if (s < 60)
		snprintf(buf, 16, "%.1fs", (double)(us / 100000) / 10.0);
	else if (s < 3600)
		snprintf(buf, 16, "%llum%02llus", (unsigned long long)(s / 60),
		    (unsigned long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, 16, "%lluh%02llum", (unsigned long long)(s / 3600),
		    (unsigned long long)(s % 3600 / 60));
	else
		snprintf(buf, 16, "%llud%02lluh", (unsigned long long)(s / 86400),
		    (unsigned long long)(s % 86400 / 3600));
	return buf;
}

static void
fmt_rtt(uint64_t us, char buf[24])
{
	snprintf(buf, 24, "%.1fms", (double)us / 1000.0);
}

/* ---------------------------------------------------------------- key/value */

#define CTL_KV_WIDTH 20		/* longer keys push their value out */

static void
kv_text(struct ctl_kv *kv, const char *key, const char *v)
{
	ctl_printf(kv->o, "%-*s %s\n", CTL_KV_WIDTH - 1, key, v);
}

void
ctl_kv_str(struct ctl_kv *kv, const char *key, const char *v)
{
	if (!kv->json) {
		kv_text(kv, key, v && v[0] ? v : "-");
		return;
	}
	ctl_printf(kv->o, ",\"%s\":", key);
	ctl_json_str(kv->o, v);
}

void
ctl_kv_uint(struct ctl_kv *kv, const char *key, unsigned long long v)
{
	if (kv->json)
		ctl_printf(kv->o, ",\"%s\":%llu", key, v);
	else
		ctl_printf(kv->o, "%-*s %llu\n", CTL_KV_WIDTH - 1, key, v);
}

void
ctl_kv_bool(struct ctl_kv *kv, const char *key, bool v)
{
	if (kv->json)
		ctl_printf(kv->o, ",\"%s\":%s", key, v ? "true" : "false");
	else
		kv_text(kv, key, v ? "yes" : "no");
}

void
ctl_kv_dur(struct ctl_kv *kv, const char *key, uint64_t us)
{
	char b[16];

	if (kv->json)
		ctl_printf(kv->o, ",\"%s_s\":%.3f", key, (double)us / 1e6);
	else
		kv_text(kv, key, ctl_fmt_dur(us, b));
}

void
ctl_kv_ident(struct ctl_kv *kv, const struct ctl_ident *id)
{
	uint64_t now = clock_mono_us();

	if (!kv->json)		/* in JSON, ctl_json_open said it */
		ctl_kv_str(kv, "daemon", id->daemon);
	ctl_kv_str(kv, "version", id->version);
	ctl_kv_uint(kv, "pid", (unsigned long long)getpid());
	ctl_kv_dur(kv, "uptime", now > id->start_mono_us ? now - id->start_mono_us : 0);
	ctl_kv_str(kv, "config", id->conf_path);
}

/* ---------------------------------------------------------------- tables */

static const char *
kind_suffix(enum ctl_kind k)
{
	return k == CTL_DUR ? "_s" : k == CTL_RTT ? "_us" : "";
}

void
ctl_table_begin(struct ctl_table *t, struct ctl_out *o, bool json, const char *key,
    const struct ctl_col *cols, size_t ncols)
{
	memset(t, 0, sizeof(*t));
	t->o = o;
	t->json = json;
	t->cols = cols;
	t->ncols = ncols;
	if (json)
		ctl_printf(o, ",\"%s\":[", key);
}

void
ctl_answer_table_begin(struct ctl_table *t, struct ctl_out *o, bool json,
    const struct ctl_ident *id, const char *key, const struct ctl_col *cols, size_t ncols)
{
	if (json)
		ctl_json_open(o, id);
	ctl_table_begin(t, o, json, key, cols, ncols);
	t->whole = json;
}

/* Text mode: keeps one cell. */
static void
cell_keep(struct ctl_table *t, const char *s)
{
	if (t->oom)
		return;
	if (t->noff == t->offcap) {
		size_t cap = t->offcap ? t->offcap * 2 : 64;
		size_t *off = realloc(t->off, cap * sizeof(*off));
		if (off == NULL) {
			t->oom = true;
			return;
		}
		t->off = off;
		t->offcap = cap;
	}
	t->off[t->noff++] = t->cells.len;
	ctl_append(&t->cells, s, strlen(s) + 1);
	if (t->cells.oom)
		t->oom = true;
}

/* JSON mode: the member's name, after the row's opening or a comma. */
static void
cell_json_name(struct ctl_table *t)
{
	const struct ctl_col *c = &t->cols[t->col];

	ctl_printf(t->o, "%s", t->col == 0 ? (t->rows ? ",{" : "{") : ",");
	if (c->json)
		ctl_printf(t->o, "\"%s\":", c->json);
	else
		ctl_printf(t->o, "\"%s%s\":", c->name, kind_suffix(c->kind));
}

static void
cell_done(struct ctl_table *t)
{
	if (++t->col < t->ncols)
		return;
	t->col = 0;
	t->rows++;
	if (t->json)
		ctl_printf(t->o, "}");
}

void
ctl_cell_str(struct ctl_table *t, const char *s)
{
	if (t->json) {
		cell_json_name(t);
		ctl_json_str(t->o, s);
	} else
		cell_keep(t, s && s[0] ? s : "-");
	cell_done(t);
}

void
ctl_cell_uint(struct ctl_table *t, unsigned long long v)
{
	char b[24];

	if (t->json) {
		cell_json_name(t);
		ctl_printf(t->o, "%llu", v);
	} else {
		snprintf(b, sizeof(b), "%llu", v);
		cell_keep(t, b);
	}
	cell_done(t);
}

void
ctl_cell_us(struct ctl_table *t, uint64_t us)
{
	enum ctl_kind k = t->cols[t->col].kind;
	char b[24];

	if (t->json) {
		cell_json_name(t);
		if (k == CTL_DUR)
			ctl_printf(t->o, "%.3f", (double)us / 1e6);
		else
			ctl_printf(t->o, "%llu", (unsigned long long)us);
	} else if (k == CTL_DUR) {
		cell_keep(t, ctl_fmt_dur(us, b));
	} else {
		fmt_rtt(us, b);
		cell_keep(t, b);
	}
	cell_done(t);
}

void
ctl_cell_bool(struct ctl_table *t, bool v)
{
	if (t->json) {
		cell_json_name(t);
		ctl_printf(t->o, "%s", v ? "true" : "false");
	} else
		cell_keep(t, v ? "yes" : "no");
	cell_done(t);
}

void
ctl_cell_none(struct ctl_table *t)
{
	if (t->json) {
		cell_json_name(t);
		ctl_printf(t->o, "null");
	} else
		cell_keep(t, "-");
	cell_done(t);
}

static void
text_line(struct ctl_table *t, const size_t *width, const char *const *cell)
{
	for (size_t i = 0; i < t->ncols; i++) {
		bool last = i + 1 == t->ncols;
		bool right = t->cols[i].kind != CTL_STR && t->cols[i].kind != CTL_BOOL;
		int w = (int)width[i];
		/* The last column is not padded: no trailing blanks. */
		if (right)
			ctl_printf(t->o, "%*s%s", w, cell[i], last ? "\n" : "  ");
		else if (last)
			ctl_printf(t->o, "%s\n", cell[i]);
		else
			ctl_printf(t->o, "%-*s  ", w, cell[i]);
	}
}

void
ctl_table_end(struct ctl_table *t)
{
	if (t->json) {
		ctl_printf(t->o, "]");
		if (t->whole)
			ctl_json_close(t->o);
		return;
	}
	size_t *width = calloc(t->ncols, sizeof(*width));
	const char **cell = calloc(t->ncols, sizeof(*cell));
	if (width == NULL || cell == NULL || t->oom || t->col != 0) {
		/* An answer cut short says so rather than lying by omission. */
		t->o->oom = true;
		goto done;
	}
	for (size_t i = 0; i < t->ncols; i++)
		width[i] = strlen(t->cols[i].name);
	for (size_t k = 0; k < t->noff; k++) {
		size_t w = strlen(t->cells.buf + t->off[k]);
		if (w > width[k % t->ncols])
			width[k % t->ncols] = w;
	}
	for (size_t i = 0; i < t->ncols; i++)
		cell[i] = t->cols[i].name;
	text_line(t, width, cell);
	for (size_t r = 0; r < t->rows; r++) {
		for (size_t i = 0; i < t->ncols; i++)
			cell[i] = t->cells.buf + t->off[r * t->ncols + i];
		text_line(t, width, cell);
	}
done:
	free(width);
	free(cell);
	free(t->cells.buf);
	free(t->off);
	t->cells.buf = NULL;
	t->off = NULL;
}

/* ---------------------------------------------------------------- counters */

void
ctl_counters_text(struct ctl_out *o, const struct ctl_counter *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ctl_printf(o, "%s %llu\n", v[i].name, v[i].v);
}

void
ctl_counters_json(struct ctl_out *o, const struct ctl_counter *v, size_t n)
{
	ctl_printf(o, "{");
	for (size_t i = 0; i < n; i++)
		ctl_printf(o, "%s\"%s\":%llu", i ? "," : "", v[i].name, v[i].v);
	ctl_printf(o, "}");
}

const char *
ctl_metric_name(const struct ctl_ident *id, const struct ctl_counter *c, char buf[128])
{
	size_t n = strlen(c->name);
	bool has_total = n >= 6 && strcmp(c->name + n - 6, "_total") == 0;

	snprintf(buf, 128, "%s_%s%s", id->metrics, c->name,
	    c->type == CTL_COUNTER && !has_total ? "_total" : "");
	return buf;
}

/* HELP text escapes backslash and newline; label values also the quote. */
static void
prom_escaped(struct ctl_out *o, const char *s, bool label)
{
	for (; *s; s++) {
		if (*s == '\\')
			ctl_printf(o, "\\\\");
		else if (*s == '\n')
			ctl_printf(o, "\\n");
		else if (label && *s == '"')
			ctl_printf(o, "\\\"");
		else
			ctl_printf(o, "%c", *s);
	}
}

static void
prom_head(struct ctl_out *o, const char *name, const char *type, const char *help)
{
	ctl_printf(o, "# HELP %s ", name);
	prom_escaped(o, help, false);
	ctl_printf(o, "\n# TYPE %s %s\n", name, type);
}

void
ctl_metrics(struct ctl_out *o, const struct ctl_ident *id, const struct ctl_counter *v,
    size_t n)
{
	char name[128];

	snprintf(name, sizeof(name), "%s_info", id->metrics);
	prom_head(o, name, "gauge", "Always 1; the labels say which build answers.");
	ctl_printf(o, "%s{daemon=\"", name);
	prom_escaped(o, id->daemon, true);
	ctl_printf(o, "\",version=\"");
	prom_escaped(o, id->version, true);
	ctl_printf(o, "\"} 1\n");
	snprintf(name, sizeof(name), "%s_start_time_seconds", id->metrics);
	prom_head(o, name, "gauge", "Start time of the daemon, seconds since the Unix epoch.");
	ctl_printf(o, "%s %.3f\n", name, (double)id->start_real_us / 1e6);
	for (size_t i = 0; i < n; i++) {
		ctl_metric_name(id, &v[i], name);
		prom_head(o, name, v[i].type == CTL_COUNTER ? "counter" : "gauge",
		    v[i].help ? v[i].help : v[i].name);
		ctl_printf(o, "%s %llu\n", name, v[i].v);
	}
}

bool
ctl_answer_counters(struct ctl_out *o, const struct ctl_ident *id, const struct ctl_req *q,
    const struct ctl_counter *v, size_t n)
{
	if (strcmp(q->cmd, "counters") == 0) {
		if (q->json) {
			ctl_json_open(o, id);
			ctl_printf(o, ",\"counters\":");
			ctl_counters_json(o, v, n);
			ctl_json_close(o);
		} else
			ctl_counters_text(o, v, n);
		return true;
	}
	if (strcmp(q->cmd, "metrics") == 0) {
		if (q->json)
			ctl_error(o, "metrics come in the Prometheus text format only "
			    "(\"counters json\" has them in JSON)");
		else
			ctl_metrics(o, id, v, n);
		return true;
	}
	return false;
}
