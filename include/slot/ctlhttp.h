#ifndef SLOT_CTLHTTP_H
#define SLOT_CTLHTTP_H

#include <stddef.h>

#include "slot/ctlout.h"

/* The metrics listener's HTTP (slot/ctlsrv.h, HTTP mode): one HTTP/1.x
 * request a connection, "GET /metrics" the only one served. */

/* Where the head in req[0..len) ends ("\r\n\r\n", or bare "\n\n"), or
 * NULL. */
const char *ctl_http_head_end(const char *req, size_t len);

/* The status for a complete head in req (len bytes, NUL-terminated): 200
 * for GET /metrics, else 400, 404 or 405. */
int ctl_http_route(const char *req, size_t len);

/* The whole response (HTTP/1.0, Connection: close) for status, into o.
 * 200: body is the "metrics" answer, served as text/plain; version=0.0.4,
 * or 500 if it is a refusal ("error:...") or was cut short. Any other
 * status: a short text page saying it; body is not read (may be NULL). */
void ctl_http_response(struct ctl_out *o, int status, const struct ctl_out *body);

#endif
