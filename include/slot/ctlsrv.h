#ifndef SLOT_CTLSRV_H
#define SLOT_CTLSRV_H

#include <ev.h>

#include "slot/ctlcmd.h"
#include "slot/ctlhttp.h"
#include "slot/ctlout.h"

/* The daemons' command server, for slotctl, the tests and Prometheus.
 *
 * Line mode (a unix socket): a client sends one command line, "<cmd>" for
 * text or "<cmd> json" for JSON (docs/slotctl.md), and reads the answer
 * until EOF. An answer that starts with "error:" is a refusal.
 *
 * HTTP mode (a TCP listener, metrics_listen): a client sends one HTTP/1.x
 * request; "GET /metrics" is answered with the handler's answer to
 * "metrics" (HTTP/1.0 200, text/plain; version=0.0.4), other paths get 404,
 * other methods 405, headers over 4 KiB 431, anything unparsable 400, a
 * request not complete within the deadline 408. One request per connection.
 *
 * Answers of any size are written as the socket drains; clients are few and
 * short-lived (a bounded number, each with a deadline). When every slot is
 * taken, a unix client is refused (closed) while an HTTP client always
 * takes the slot of another, closed for it (client_slot: from the peer
 * holding most slots, then one lingering after its answer, one still
 * sending its request, one not reading its answer; the oldest), so neither
 * slow senders nor clients that never read or close can lock scrapers out.
 *
 * This header brings the parts with it: the answers (slot/ctlout.h), the
 * commands (slot/ctlcmd.h) and the HTTP of HTTP mode (slot/ctlhttp.h). */

/* Writes the answer to cmd (the line without its newline) into out: a
 * daemon's ctl_cmd_answer (slot/ctlcmd.h). */
typedef void (*ctl_handler)(void *user, const char *cmd, struct ctl_out *out);

struct ctlsrv;

/* fd: a listening unix socket (owned from now on). NULL on allocation
 * failure (fd closed). */
struct ctlsrv *ctlsrv_start(struct ev_loop *loop, int fd, ctl_handler h, void *user);
/* The same in HTTP mode; fd: a listening TCP socket. h is called with
 * "metrics" only. */
struct ctlsrv *ctlsrv_start_http(struct ev_loop *loop, int fd, ctl_handler h, void *user);
void ctlsrv_stop(struct ctlsrv *s);

#endif
