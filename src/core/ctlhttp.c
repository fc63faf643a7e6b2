/* The metrics listener's HTTP/1.x: reading a request head and writing the
 * whole response. No I/O: ctlsrv.c reads and sends. */

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "slot/ctlhttp.h"

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

void
ctl_http_response(struct ctl_out *o, int status, const struct ctl_out *body)
{
	if (status != 200)
		http_error(o, status);
	else if (body->oom || (body->len >= 6 && memcmp(body->buf, "error:", 6) == 0))
		http_error(o, 500);
	else
		http_respond(o, 200, "text/plain; version=0.0.4; charset=utf-8",
		    body->buf ? body->buf : "", body->len);
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
