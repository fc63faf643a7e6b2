#ifndef SLOT_RELAY_CTRL_H
#define SLOT_RELAY_CTRL_H

#include "relay.h"

/* The control server: persistent authenticated TCP connections from client
 * daemons, each carrying many requests by id (PIPE_ESTABLISH, KEEPALIVE).
 * Answers may come back in any order. */

/* Starts accepting on r->ctrl_fd. */
void ctrl_start(struct relay *r);
/* Stops accepting; open connections stay (a draining relay answers them). */
void ctrl_stop_accepting(struct relay *r);
/* Closes every connection. */
void ctrl_close_all(struct relay *r);
/* Closes every connection whose peer's certificate serial is in rev.
 * Returns how many. */
size_t ctrl_revoke(struct relay *r, const struct ident_revoked *rev);
/* Accepting was paused on EMFILE; resume. */
void ctrl_resume_accepting(struct relay *r);

#endif
