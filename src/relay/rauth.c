/*
 * The relay's side of authentication: identity, peer table, revocation.
 */

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "slot/errbuf.h"
#include "slot/log.h"
#include "ctrl.h"
#include "peers.h"
#include "chain.h"
#include "rauth.h"

int
rauth_load(struct relay *r, const struct rconf *c, char *err, size_t errlen)
{
	struct ident id;
	bool same;

	if (c->auth_mode == IDENT_MODE_SHARED) {
		if (r->auth_mode == IDENT_MODE_IDENTITY)
			chains_drop_all(r, "authentication mode changed to shared");
		r->auth_mode = IDENT_MODE_SHARED;
		return 0;
	}
	if (ident_load(c->id_key, c->id_cert, c->id_ca, IDENT_MASK(IDENT_ROLE_RELAY), &id,
	    err, errlen) == -1)
		return -1;
	if (r->known == NULL && (r->known = peertab_new(RAUTH_PEERS_MAX)) == NULL) {
		ident_wipe(&id);
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	same = memcmp(id.cert.pk, r->id.cert.pk, IDENT_PK_LEN) == 0 &&
	    memcmp(id.ca_pk, r->id.ca_pk, IDENT_PK_LEN) == 0;
	ident_wipe(&r->id);
	r->id = id;
	r->auth_mode = IDENT_MODE_IDENTITY;
	if (!same && peertab_count(r->known) > 0) {
		/* Pair keys were made with the old key, certificates checked
		 * against the old CA: everyone introduces itself again. */
		struct peertab *t = peertab_new(RAUTH_PEERS_MAX);
		if (t != NULL) {
			peertab_free(r->known);
			r->known = t;
		}
		ctrl_close_all(r);
		if (r->peers)
			peers_forget_keys(r->peers);
	}
	/* Links to next relays hold pair keys of the old key, and certificates
	 * checked against the old CA, whether or not anyone has called us. */
	if (!same)
		chains_drop_all(r, "our identity changed");
	return 0;
}

void
rauth_free(struct relay *r)
{
	peertab_free(r->known);
	r->known = NULL;
	ident_revoked_free(&r->revoked);
	ident_wipe(&r->id);
}

void
rauth_stamp(const struct relay *r, struct proto_msg *m)
{
	proto_stamp(m);
	if (rauth_identity(r))
		memcpy(m->sender, r->id.cert.pk, PROTO_PK_LEN);
	else
		memset(m->sender, 0, PROTO_PK_LEN);
}

const struct auth_key *
rauth_key_fn(void *arg, const struct proto_hdr *h)
{
	struct relay *r = arg;
	struct peertab_lookup q;

	if (!rauth_identity(r))
		return proto_key_shared(&r->key, h);
	q.t = r->known;
	q.now = (uint64_t)time(NULL);
	return peertab_key_fn(&q, h);
}

int
rauth_admit(struct relay *r, const struct proto_msg *hello, unsigned roles,
    struct auth_key *key, char *err, size_t errlen)
{
	const struct ident_cert *c = &hello->u.hello.cert;

	if (ident_cert_check(c, r->id.ca_pk, roles, (uint64_t)time(NULL), &r->revoked, err,
	    errlen) == -1)
		return -1;
	/* Our own key coming back is a reflection, never a peer. */
	if (memcmp(c->pk, r->id.cert.pk, IDENT_PK_LEN) == 0) {
		errbuf_set(err, errlen, "HELLO with this relay's own key");
		return -1;
	}
	if (ident_pair_key(&r->id, c->pk, key) == -1) {
		errbuf_set(err, errlen, "certificate '%s' has an unusable key", c->name);
		return -1;
	}
	if (peertab_put(r->known, c, key) == -1) {
		auth_key_wipe(key);
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

int
rauth_hello(const struct relay *r, uint32_t id, uint8_t *buf, size_t cap)
{
	struct proto_msg m = { .type = PROTO_HELLO, .id = id };

	proto_stamp(&m);
	return proto_encode_hello(&m, &r->id, buf, cap);
}

int
relay_revoke(struct relay *r, const struct ident_revoked *rev)
{
	struct ident_revoked copy;
	int n = 0;

	if (ident_revoked_copy(rev, &copy) == -1)
		return -1;
	ident_revoked_free(&r->revoked);
	r->revoked = copy;
	n += (int)ctrl_revoke(r, &r->revoked);
	if (r->known)
		n += (int)peertab_revoke(r->known, &r->revoked);
	if (r->peers)
		peers_revoke(r->peers, &r->revoked);
	chains_revoke(r, &r->revoked);
	if (n > 0)
		log_info("revocation: %d peers dropped (%zu serials revoked)", n, r->revoked.n);
	r->ctr.peers_revoked += (unsigned long long)n;
	return n;
}
