#ifndef SLOT_DIRCLIENT_H
#define SLOT_DIRCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xmlrpc-c/base.h>

#include "slot/addr.h"
#include "slot/auth.h"

/* The client side of slot-dird's XML-RPC methods (docs/directory.md), for
 * slot-relayd (register, heartbeat, report) and slotd (list). Calls block
 * for up to the timeout: run them off the event loop. One dirclient per
 * thread. Errors: -1 with a reason in err; *fault (if not NULL) gets the
 * directory's fault code, 0 for a transport error. */

struct dirclient;

/* Answers larger than this are refused while they arrive. A listing of
 * 20,000 relays with 256 landmarks is ~17 MB of XML. Every answer must be
 * plain UTF-8 XML (slot/xmlguard.h), checked before it is parsed. */
#define DIRC_MAX_ANSWER (32u << 20)

/* Call dirc_global_init once, in the main thread, before any thread starts.
 * It sets xmlrpc-c's global limits (answer size, nesting) for the process. */
int dirc_global_init(char *err, size_t errlen);
void dirc_global_fini(void);

struct dirclient *dirc_new(const struct auth_key *key, unsigned timeout_ms, char *err,
    size_t errlen);
void dirc_free(struct dirclient *c);
/* Signs the next calls with key (after a reload). */
void dirc_set_key(struct dirclient *c, const struct auth_key *key);

int dirc_register(struct dirclient *c, const char *url, const struct endpoint *relay,
    uint16_t data_port, unsigned *heartbeat_s, unsigned *expire_s, int *fault,
    char *err, size_t errlen);
int dirc_heartbeat(struct dirclient *c, const char *url, const struct endpoint *relay,
    int *fault, char *err, size_t errlen);

struct dirc_rtt {
	struct endpoint peer;
	uint32_t rtt_us;
};
int dirc_report(struct dirclient *c, const char *url, const struct endpoint *relay,
    const struct dirc_rtt *rtts, size_t n, int *fault, char *err, size_t errlen);

struct dirc_relay {
	struct endpoint relay;
	uint16_t data_port;
	uint32_t group;
};
#define DIRC_VERSION_MAX 64

/* The landmarks that come with a listing (docs/directory.md, "Landmarks";
 * slot/cover.h): landmark l is relay index[l] of the listing and stands for
 * weight[l] relays; rtt[i * nland + l] is relay i's RTT to it in
 * DIRC_LAND_UNIT_US units, DIRC_LAND_NONE if not measured. */
#define DIRC_LAND_UNIT_US 100
#define DIRC_LAND_NONE 0xffffu
#define DIRC_MAX_LANDMARKS 4096
struct dirc_landmarks {
	size_t nland, nrelay;
	uint32_t *index;
	float *weight;
	uint16_t *rtt;
};
void dirc_landmarks_free(struct dirc_landmarks *l);

/* version: the listing we hold ("" for none). *changed false: ours is
 * current and *out is NULL. Else *out (malloc'ed, *n entries; free it) and
 * new_version, and with land (if not NULL) the landmarks, empty (nland 0)
 * when the directory sent none. A malformed landmarks member fails the
 * call, as a malformed listing does. */
int dirc_list(struct dirclient *c, const char *url, const char *version,
    char new_version[DIRC_VERSION_MAX], bool *changed, struct dirc_relay **out, size_t *n,
    struct dirc_landmarks *land, int *fault, char *err, size_t errlen);

/* dirc_list's reading of an answer res, the call's result as xmlrpc-c
 * parsed it (exposed for the fuzz target, tests/fuzz): the same outputs,
 * -1 with the reason in err for a malformed answer. */
int dirc_list_read(xmlrpc_value *res, char new_version[DIRC_VERSION_MAX], bool *changed,
    struct dirc_relay **out, size_t *n, struct dirc_landmarks *land, char *err, size_t errlen);

#endif
