#ifndef SLOT_DIRCLIENT_H
#define SLOT_DIRCLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <xmlrpc-c/base.h>

#include "slot/addr.h"
#include "slot/auth.h"
#include "slot/ident.h"

/* The client side of slot-dird's XML-RPC methods (docs/directory.md), for
 * slot-relayd (register, heartbeat, report) and slotd (list). Calls block
 * for up to the timeout: run them off the event loop. One dirclient per
 * thread. Errors: -1 with a reason in err; *fault (if not NULL) gets the
 * directory's fault code, 0 for a transport error. */

struct dirclient;

/* *fault of dirc_fetch when the answer came but was refused: malformed,
 * unsigned, or a signature or certificate that does not verify. */
#define DIRC_REFUSED (-1)

/* Answers larger than this are refused while they arrive. A listing of
 * 20,000 relays with 256 landmarks is ~17 MB of XML. Every answer must be
 * plain UTF-8 XML (slot/xmlguard.h), checked before it is parsed. */
#define DIRC_MAX_ANSWER (32u << 20)
/* An answer larger than this is parsed only if it holds at most
 * DIRC_MAX_TEXT_TAGS '<': a listing in its text form (dirc_fetch), not a
 * tree of elements, which xmlrpc-c holds at up to ~55 times its size. A
 * tree of 4 MiB is a listing of ~6,000 relays from a slot-dird that sends
 * no text form. */
#define DIRC_MAX_TREE (4u << 20)
#define DIRC_MAX_TEXT_TAGS 256

/* Call dirc_global_init once, in the main thread, before any thread starts.
 * It sets xmlrpc-c's global limits (answer size, nesting) for the process. */
int dirc_global_init(char *err, size_t errlen);
void dirc_global_fini(void);

/* A client in shared mode (key: the lab's deployment key); dirc_set_ident
 * makes it an identity-mode client. */
struct dirclient *dirc_new(const struct auth_key *key, unsigned timeout_ms, char *err,
    size_t errlen);
void dirc_free(struct dirclient *c);
/* Shared mode: signs the next calls with key (after a reload). */
void dirc_set_key(struct dirclient *c, const struct auth_key *key);
/* Identity mode from now on: calls are signed with id's key and carry its
 * certificate; slot.list answers must be signed by a directory certificate
 * of id's CA (dirc_fetch). Also after a reload. */
void dirc_set_ident(struct dirclient *c, const struct ident *id);

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
	bool has_cert;			/* identity mode: its certificate, checked */
	struct ident_cert cert;		/* against the CA (the relay's key: cert.pk) */
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

/* A listing as fetched (dirc_fetch) or read back from a cache
 * (dirc_listing_from_text). */
struct dirc_listing {
	char version[DIRC_VERSION_MAX];
	bool changed;			/* false: ours is current, no relays */
	struct dirc_relay *relay;	/* malloc'ed, n entries */
	size_t n;
	size_t dropped;			/* relays left out: certificate refused */
	struct dirc_landmarks land;	/* nland 0: none sent (or not asked) */
	/* Identity mode: what the directory signed. */
	bool is_signed;
	struct ident_revoked revoked;	/* the directory's revocation list */
	struct ident_cert dir;		/* the directory's certificate */
	char *text;			/* the canonical text (dirp_list_text) */
	size_t text_len;
	uint8_t sig[IDENT_SIG_LEN];	/* the directory's signature over it */
};
void dirc_listing_free(struct dirc_listing *l);

/*
 * slot.list, asking for the text form (docs/directory.md); an answer in the
 * older form of members is read too (up to DIRC_MAX_TREE). version: the
 * listing we hold ("" for none). want_land: read the landmarks (a malformed
 * landmarks member fails the call, as a malformed listing does). In
 * identity mode the answer must carry a directory certificate that passes
 * the CA, its validity, and both held (the revocation list we hold, may be
 * NULL) and the answer's own list, and a signature over the canonical text
 * (the text form's, checked before it is read; else rebuilt from what was
 * parsed), with this call's nonce (so an old answer cannot pass for a
 * fresh one); otherwise the
 * call fails ("not signed", "signature does not verify"...). Each relay's
 * certificate is then checked (CA, role relay, validity, not revoked):
 * relays failing it are left out and counted in out->dropped. Returns 0 with
 * *out filled (free it with dirc_listing_free), or -1.
 */
int dirc_fetch(struct dirclient *c, const char *url, const char *version, bool want_land,
    const struct ident_revoked *held, struct dirc_listing *out, int *fault, char *err,
    size_t errlen);

/* A signed listing read back (slotd's cache file): checks the directory's
 * certificate (cert, against ca_pk, now in unix seconds, and held and the
 * text's own revocation list) and the signature over text, then reads the
 * relays, the version and the revocation list from the text, checking each
 * relay's certificate as dirc_fetch does. Landmarks are not kept. Returns 0
 * with *out filled (the text copied into it), or -1 with the reason. */
int dirc_listing_from_text(const char *text, size_t len, const uint8_t cert[IDENT_CERT_LEN],
    const uint8_t sig[IDENT_SIG_LEN], const uint8_t ca_pk[IDENT_PK_LEN], uint64_t now,
    const struct ident_revoked *held, struct dirc_listing *out, char *err, size_t errlen);

/* The same for a shared-mode answer, into plain outputs: *out (malloc'ed,
 * *n entries), new_version, *changed, and with land (if not NULL) the
 * landmarks. */
int dirc_list_read(xmlrpc_value *res, char new_version[DIRC_VERSION_MAX], bool *changed,
    struct dirc_relay **out, size_t *n, struct dirc_landmarks *land, char *err, size_t errlen);

#endif
