#ifndef SLOT_RELAY_DIRLINK_H
#define SLOT_RELAY_DIRLINK_H

#include <stddef.h>

#include <ev.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/dirclient.h"
#include "rconf.h"

/* The relay's side of slot-dird (docs/directory.md): a thread that registers
 * with every configured directory, keeps the registrations alive with
 * heartbeats (registering again when a directory forgot us), sends the RTTs
 * the relay measured, and fetches the list of the other relays. The calls
 * block, so they run off the event loop; the list reaches the loop through an
 * ev_async and the peers callback. */

struct dirlink;

struct dirlink_counters {
	unsigned long long registered;	/* gauge: directories holding our registration */
	unsigned long long registrations, heartbeats, reports, report_entries, lists;
	unsigned long long calls_failed;
	unsigned long long lists_refused;	/* listings refused: unsigned, forged */
};

/* Called on the loop's thread with the relay's own endpoint (as registered)
 * and the other relays of the latest list (self excluded, and in identity
 * mode the relays of the directory's revocation list too): peers[i] and
 * the data port it registered, data_ports[i]; rev is the revocation list
 * when it changed, else NULL. */
typedef void (*dirlink_peers_cb)(void *user, const struct endpoint *self,
    const struct endpoint *peers, const uint16_t *data_ports, size_t n,
    const struct ident_revoked *rev);

/* c->dir_urls must not be empty. dirc_global_init() must have run. id: our
 * identity (identity mode: calls signed with it, listings checked against
 * its CA), or NULL (shared mode: key). */
struct dirlink *dirlink_start(struct ev_loop *loop, const struct rconf *c,
    const struct auth_key *key, const struct ident *id, dirlink_peers_cb cb, void *user,
    char *err, size_t errlen);
/* Stops the thread (waits for a call in flight, up to the timeout). */
void dirlink_stop(struct dirlink *dl);

void dirlink_set_key(struct dirlink *dl, const struct auth_key *key);
/* Identity mode: the identity after a reload. */
void dirlink_set_ident(struct dirlink *dl, const struct ident *id);
/* A chain named a relay the listing lacks: list again soon (within 10 s of
 * the last list call). dl may be NULL (no directory). */
void dirlink_list_soon(struct dirlink *dl);
/* The RTTs to report from now on (replacing the earlier ones); sent to every
 * directory soon, and again after a new registration. */
int dirlink_report(struct dirlink *dl, const struct dirc_rtt *rtts, size_t n);
void dirlink_get_counters(struct dirlink *dl, struct dirlink_counters *out);

/* The endpoint to register as: c->advertise if set, else control_listen if
 * it is a specific address, else the address this host uses towards url's
 * host with control_listen's port. Returns 0, or -1 with a reason. */
int dirlink_advertise(const struct rconf *c, const char *url, struct endpoint *out,
    char *err, size_t errlen);

/* Host and port of "http[s]://host[:port]/...", the port defaulting to the
 * scheme's. Returns 0, or -1 if there is none or a buffer is too small. */
int dirlink_url_host(const char *url, char *host, size_t hostlen, char *port,
    size_t portlen);

#endif
