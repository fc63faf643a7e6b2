#ifndef SLOT_CAPS_H
#define SLOT_CAPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* A daemon's privileges once it is set up: another user, and a few
 * capabilities (masks of 1 << CAP_x): slotd keeps CAP_NET_ADMIN,
 * slot-relayd none. */

/* Looks user up: its uid and primary gid. Returns 0, or -1 with a reason
 * in err. "root" is uid 0, gid 0. */
int caps_lookup(const char *user, uid_t *uid, gid_t *gid, char *err, size_t errlen);

/* Switches to uid/gid (no supplementary groups; uid 0: stays root) and
 * keeps only these capabilities: eff in the effective set; eff | amb in the
 * permitted, inheritable, ambient and bounding sets. Ambient, so that the
 * programs slotd runs (iptables-restore) get them although the user is not
 * root: amb holds those only they need (CAP_NET_RAW for iptables-legacy).
 * Needs CAP_SETPCAP, CAP_SETUID and CAP_SETGID, which it drops. Returns 0,
 * or -1 with a reason in err (the process is then in no defined state: the
 * caller exits). */
int caps_drop(uid_t uid, gid_t gid, uint64_t eff, uint64_t amb, char *err, size_t errlen);

#endif
