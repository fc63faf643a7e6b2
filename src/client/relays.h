#ifndef SLOT_CLIENT_RELAYS_H
#define SLOT_CLIENT_RELAYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"

/* The relay set: one control link per relay, a mark per relay (kept across
 * reloads, so a relay's SLOT_DNAT rule does not move under live
 * connections), health (link up, not quarantined after a failure), and the
 * rules that go with the set. */

/* Makes conf's relays the set, with conf's rules. At start-up (d->rsync
 * NULL) the rules are installed in place, and on failure (-1, reason in
 * err) nothing changes. Running, the set changes at once and its rules go
 * to d->rsync: a new relay is used only once its rule is in the kernel,
 * relays that left are no longer used, and -1 means the rules could not
 * even be rendered (nothing changed). Links of relays that stay are kept. */
int relays_apply(struct slotd *d, const struct cconf *conf, char *err, size_t errlen);

/* rulesync's callback (user: the slotd): rule set gen is in the kernel. */
void relays_rules_done(void *user, uint64_t gen);

/* Whether r's DNAT rule is in the kernel. */
bool relay_rules_in(const struct slotd *d, const struct crelay *r);

/* Closes every link and frees the set (the rules are left alone). */
void relays_free(struct slotd *d);

struct crelay *relay_find(struct slotd *d, const struct endpoint *control);
bool relay_usable(const struct slotd *d, const struct crelay *r, uint64_t now_us);
/* Whether r may be sent PIPE_ESTABLISH_CHAIN, that is be the first or a
 * middle relay of a chain: it said so on its current control link
 * (rlink_chains). Unknown (down, an older relay) is no. */
bool relay_takes_chains(const struct crelay *r);
/* Keeps r out of samples for failure_quarantine. */
void relay_quarantine(struct slotd *d, struct crelay *r, const char *why);

const char *relay_state_str(const struct crelay *r);

/* The revocation hook (fed from the directory's list): remembers rev, so
 * that relays holding these certificates are refused from now on, and drops
 * the control link of every relay whose certificate is in it (it keeps
 * retrying, and is refused, until the relay has a new certificate). Returns
 * how many links were dropped, or -1 if rev could not be copied (out of
 * memory; nothing changed). */
int rlinks_revoke(struct slotd *d, const struct ident_revoked *rev);

#endif
