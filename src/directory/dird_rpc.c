/*
 * slot-dird's XML-RPC methods. They run on the connection threads (dhttp.c) and
 * touch the shared state only with d->mu held. Values are read into plain C
 * first, so no xmlrpc-c call happens under the lock.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>
#include <xmlrpc-c/abyss.h>	/* and abyss_unixsock.h, which has no guard */

#include "slot/clock.h"
#include "slot/dirclient.h"
#include "slot/dirproto.h"
#include "slot/log.h"
#include "dird_rpc.h"
#include "dland.h"

/* Longest string field we read: a certificate in hex; endpoints and
 * versions are far shorter. */
#define FIELD_MAX DIRP_CERT_HEX
/* dirp_verify's bound on the canonical text, less the header's room. */
#define BODY_MAX (64 * 1024 - 256)

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
bool drpc_fuzz_no_mac;
#endif

/* The authentication fields of a call: ts, nonce, and mac (shared mode) or
 * cert and sig (identity mode). */
struct stamp {
	const char *ts, *nonce, *mac, *cert, *sig;
};

/* Who called, once authenticated: in identity mode the caller's verified
 * certificate. */
struct caller {
	bool has_cert;
	struct ident_cert cert;
};

/* One call while its method runs: what the checks every method shares
 * (call_open, call_auth) read of it, and what call_close frees. */
struct call {
	struct dird *d;
	xmlrpc_env *env;
	void *ci;
	const char *method;
	xmlrpc_value *st;	/* the one struct parameter */
	struct stamp s;
	const char *arg;	/* the first field: relay, or version (slot.list) */
	struct caller who;
	struct endpoint ep;	/* a relay's call: arg parsed */
};

#define ROLES_RELAY IDENT_MASK(IDENT_ROLE_RELAY)
#define ROLES_LIST (IDENT_MASK(IDENT_ROLE_CLIENT) | IDENT_MASK(IDENT_ROLE_RELAY))

/* The peer's IPv4 address for debug lines. Abyss keeps the peer in a plain
 * struct sockaddr, too short for IPv6, so those show as "IPv6 peer". */
static const char *
peer_of(void *call_info, char *buf, size_t len)
{
	const struct abyss_unix_chaninfo *ci;
	void *info = NULL;

	snprintf(buf, len, "?");
	if (call_info == NULL)
		return buf;
	SessionGetChannelInfo(call_info, &info);
	if ((ci = info) == NULL)
		return buf;
	if (ci->peerAddr.sa_family == AF_INET) {
		struct sockaddr_in sin;
		memcpy(&sin, &ci->peerAddr, sizeof(sin));
		inet_ntop(AF_INET, &sin.sin_addr, buf, (socklen_t)len);
	} else if (ci->peerAddr.sa_family == AF_INET6)
		snprintf(buf, len, "IPv6 peer");
	return buf;
}

static void fault(struct call *c, enum dirp_fault code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sets the fault, counts it, and says it at debug level. */
static void
fault(struct call *c, enum dirp_fault code, const char *fmt, ...)
{
	struct dird *d = c->d;
	char msg[256], peer[64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&d->mu);
	switch (code) {
	case DIRP_FAULT_MALFORMED: d->ctr.faults_malformed++; break;
	case DIRP_FAULT_AUTH: d->ctr.faults_auth++; break;
	case DIRP_FAULT_STALE: d->ctr.faults_stale++; break;
	case DIRP_FAULT_UNKNOWN_RELAY: d->ctr.faults_unknown_relay++; break;
	case DIRP_FAULT_LIMIT: d->ctr.faults_limit++; break;
	case DIRP_FAULT_INTERNAL: d->ctr.faults_internal++; break;
	}
	pthread_mutex_unlock(&d->mu);
	log_debug("%s from %s: fault %d: %s", c->method, peer_of(c->ci, peer, sizeof(peer)),
	    (int)code, msg);
	xmlrpc_env_set_fault(c->env, (int)code, msg);
}

/* The one struct parameter every method takes; NULL if there is none. The
 * caller DECREFs it. */
static xmlrpc_value *
the_struct(xmlrpc_value *params)
{
	xmlrpc_env e;
	xmlrpc_value *v = NULL;

	xmlrpc_env_init(&e);
	if (xmlrpc_value_type(params) == XMLRPC_TYPE_ARRAY &&
	    xmlrpc_array_size(&e, params) == 1 && !e.fault_occurred)
		xmlrpc_array_read_item(&e, params, 0, &v);
	if (!e.fault_occurred && v != NULL && xmlrpc_value_type(v) != XMLRPC_TYPE_STRUCT) {
		xmlrpc_DECREF(v);
		v = NULL;
	}
	if (e.fault_occurred)
		v = NULL;
	xmlrpc_env_clean(&e);
	return v;
}

/* Field name of st as a string (malloc'ed, at most FIELD_MAX bytes, no NUL
 * inside). Returns 0, or -1 with *why set. */
static int
get_string(xmlrpc_value *st, const char *name, const char **out, const char **why)
{
	xmlrpc_env e;
	xmlrpc_value *v = NULL;
	int rc = -1;

	*out = NULL;
	xmlrpc_env_init(&e);
	xmlrpc_struct_find_value(&e, st, name, &v);
	if (e.fault_occurred || v == NULL)
		*why = "missing";
	else if (xmlrpc_value_type(v) != XMLRPC_TYPE_STRING)
		*why = "must be a string";
	else {
		xmlrpc_read_string(&e, v, out);
		if (e.fault_occurred) {
			*out = NULL;
			*why = "unreadable string";
		} else if (strlen(*out) > FIELD_MAX) {
			free((void *)*out);
			*out = NULL;
			*why = "too long";
		} else
			rc = 0;
	}
	if (v)
		xmlrpc_DECREF(v);
	xmlrpc_env_clean(&e);
	return rc;
}

static int
get_int(xmlrpc_value *st, const char *name, int *out, const char **why)
{
	xmlrpc_env e;
	xmlrpc_value *v = NULL;
	int rc = -1;

	xmlrpc_env_init(&e);
	xmlrpc_struct_find_value(&e, st, name, &v);
	if (e.fault_occurred || v == NULL)
		*why = "missing";
	else if (xmlrpc_value_type(v) != XMLRPC_TYPE_INT)
		*why = "must be an int";
	else {
		xmlrpc_read_int(&e, v, out);
		if (e.fault_occurred)
			*why = "unreadable int";
		else
			rc = 0;
	}
	if (v)
		xmlrpc_DECREF(v);
	xmlrpc_env_clean(&e);
	return rc;
}

static void
stamp_free(struct stamp *s)
{
	free((void *)s->ts);
	free((void *)s->nonce);
	free((void *)s->mac);
	free((void *)s->cert);
	free((void *)s->sig);
	memset(s, 0, sizeof(*s));
}

/* ts, nonce, and mac or cert and sig by the mode: present and strings.
 * Returns 0, or -1 with the fault set. */
static int
get_stamp(struct call *c)
{
	static const char *const shared[] = { "ts", "nonce", "mac" };
	static const char *const ident[] = { "ts", "nonce", "cert", "sig" };
	struct stamp *s = &c->s;
	bool id = c->d->mode == IDENT_MODE_IDENTITY;
	const char *const *names = id ? ident : shared;
	const char **dst_shared[] = { &s->ts, &s->nonce, &s->mac };
	const char **dst_ident[] = { &s->ts, &s->nonce, &s->cert, &s->sig };
	const char ***dst = id ? dst_ident : dst_shared;
	size_t n = id ? 4 : 3;
	const char *why;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < n; i++) {
		if (get_string(c->st, names[i], dst[i], &why) == -1) {
			fault(c, DIRP_FAULT_MALFORMED, "field '%s': %s", names[i], why);
			stamp_free(s);
			return -1;
		}
	}
	return 0;
}

/* Identity mode: the caller's certificate (CA, validity, role in roles,
 * not revoked) and its signature over body. Returns 0 with c->who filled,
 * or -1 with the fault set. */
static int
check_identity(struct call *c, const char *body, unsigned roles)
{
	struct dird *d = c->d;
	const struct stamp *s = &c->s;
	struct caller *who = &c->who;
	uint8_t raw[IDENT_CERT_LEN], ca[IDENT_PK_LEN];
	char why[256], serial[17];
	bool revoked;

	if (dirp_unhex(s->cert, raw, sizeof(raw)) == -1) {
		fault(c, DIRP_FAULT_AUTH, "cert must be %d hex digits", DIRP_CERT_HEX);
		return -1;
	}
	pthread_mutex_lock(&d->mu);
	memcpy(ca, d->id.ca_pk, sizeof(ca));
	pthread_mutex_unlock(&d->mu);
	/* The CA's signature is checked without the lock; revocation under it. */
	if (ident_cert_verify(raw, ca, roles, clock_real_us() / 1000000, NULL, &who->cert, why,
	    sizeof(why)) == -1) {
		fault(c, DIRP_FAULT_AUTH, "%s (%s takes a %s certificate)", why, c->method,
		    roles == ROLES_RELAY ? "relay" : "client or relay");
		return -1;
	}
	pthread_mutex_lock(&d->mu);
	revoked = ident_revoked_has(&d->revoked, who->cert.serial);
	pthread_mutex_unlock(&d->mu);
	if (revoked) {
		ident_serial_hex(who->cert.serial, serial);
		fault(c, DIRP_FAULT_AUTH, "certificate '%s' (serial %s) is revoked",
		    who->cert.name, serial);
		return -1;
	}
	if (dirp_verify_sig(who->cert.pk, c->method, s->ts, s->nonce, body, s->sig) == -1) {
		fault(c, DIRP_FAULT_AUTH, "signature does not verify with the key of "
		    "certificate '%s'", who->cert.name);
		return -1;
	}
	who->has_cert = true;
	return 0;
}

/* The checks every call shares, after the types: the stamp's syntax, the
 * MAC (shared mode) or the certificate, its role and signature (identity
 * mode) over body, the clock window and the nonce. Returns 0, or -1 with the
 * fault set. */
static int
authenticate(struct call *c, const char *body, unsigned roles)
{
	struct dird *d = c->d;
	const struct stamp *s = &c->s;
	uint64_t ts, nonce, skew_ms;
	struct auth_key key;
	enum replay_verdict v;
	int ok;

	memset(&c->who, 0, sizeof(c->who));
	if (dirp_parse_stamp(s->ts, s->nonce, &ts, &nonce) == -1) {
		fault(c, DIRP_FAULT_MALFORMED, "ts must be unix microseconds in decimal, "
		    "nonce 16 lowercase hex digits");
		return -1;
	}
	/* dirp_verify cannot check a longer text: say so rather than blame
	 * the key. */
	if (strlen(body) > BODY_MAX) {
		fault(c, DIRP_FAULT_LIMIT, "call too large to authenticate (%zu bytes of "
		    "fields, at most %d): split it", strlen(body), BODY_MAX);
		return -1;
	}
	if (d->mode == IDENT_MODE_IDENTITY) {
		if (check_identity(c, body, roles) == -1)
			return -1;
	} else {
		pthread_mutex_lock(&d->mu);
		key = d->key;
		pthread_mutex_unlock(&d->mu);
		ok = dirp_verify(&key, c->method, s->ts, s->nonce, body, s->mac) == 0;
		auth_key_wipe(&key);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
		ok = ok || drpc_fuzz_no_mac;
#endif
		if (!ok) {
			fault(c, DIRP_FAULT_AUTH, "mac does not verify (another deployment "
			    "key?)");
			return -1;
		}
	}
	pthread_mutex_lock(&d->mu);
	v = replay_check(d->replay, ts, nonce, clock_real_us());
	skew_ms = d->conf.max_clock_skew_ms;
	pthread_mutex_unlock(&d->mu);
	switch (v) {
	case REPLAY_OK:
		return 0;
	case REPLAY_STALE:
		fault(c, DIRP_FAULT_STALE, "timestamp more than %" PRIu64 " ms from the "
		    "directory's clock (run NTP)", skew_ms);
		return -1;
	case REPLAY_DUP:
		fault(c, DIRP_FAULT_STALE, "replayed call (nonce seen before)");
		return -1;
	case REPLAY_FULL:
		break;
	}
	fault(c, DIRP_FAULT_LIMIT, "too many calls in the clock window; try again later");
	return -1;
}

/* Seconds for the answers, at least 1. */
static int
secs(uint64_t ms)
{
	uint64_t s = ms / 1000;

	return s < 1 ? 1 : s > INT32_MAX ? INT32_MAX : (int)s;
}

static int
parse_relay(struct call *c, const char *s, const char *field, struct endpoint *ep)
{
	if (ep_parse(s, 0, ep) == -1) {
		fault(c, DIRP_FAULT_MALFORMED, "%s '%s': expected ip:port (port 1-65535, "
		    "IPv6 in brackets)", field, s);
		return -1;
	}
	return 0;
}

/* The start every method shares: counts the call in *calls, then reads the
 * one struct parameter, the stamp and the string field arg into c. Returns
 * 0, or -1 with the fault set; call_close after either. */
static int
call_open(struct call *c, xmlrpc_env *env, void *ci, struct dird *d, const char *method,
    uint64_t *calls, xmlrpc_value *params, const char *arg)
{
	const char *why;

	*c = (struct call){ .d = d, .env = env, .ci = ci, .method = method };
	pthread_mutex_lock(&d->mu);
	(*calls)++;
	pthread_mutex_unlock(&d->mu);
	if ((c->st = the_struct(params)) == NULL) {
		fault(c, DIRP_FAULT_MALFORMED, "expected one struct parameter");
		return -1;
	}
	if (get_stamp(c) == -1)
		return -1;
	if (get_string(c->st, arg, &c->arg, &why) == -1) {
		fault(c, DIRP_FAULT_MALFORMED, "field '%s': %s", arg, why);
		return -1;
	}
	return 0;
}

/* What every method checks once its own fields are read: the stamp over
 * body (authenticate), and for a relay's call (roles ROLES_RELAY) its
 * endpoint, into c->ep. Returns 0, or -1 with the fault set. */
static int
call_auth(struct call *c, const char *body, unsigned roles)
{
	if (authenticate(c, body, roles) == -1)
		return -1;
	return roles == ROLES_RELAY ? parse_relay(c, c->arg, "relay", &c->ep) : 0;
}

/* Under d->mu: DSTATE_TAKEN if another key holds the relay's endpoint
 * (identity mode), else DSTATE_OK. */
static enum dstate_rc
call_owner(const struct call *c)
{
	return c->who.has_cert ? dstate_owner(c->d->state, &c->ep, c->who.cert.pk) : DSTATE_OK;
}

/* A relay's call the state refused: -1 with the fault set for DSTATE_TAKEN,
 * DSTATE_UNKNOWN and DSTATE_NOMEM, 0 for the others. */
static int
call_refused(struct call *c, enum dstate_rc rc)
{
	switch (rc) {
	case DSTATE_TAKEN:
		fault(c, DIRP_FAULT_AUTH, "relay %s is registered with another key "
		    "(certificate '%s' is not its)", c->arg, c->who.cert.name);
		return -1;
	case DSTATE_UNKNOWN:
		fault(c, DIRP_FAULT_UNKNOWN_RELAY, "relay %s is not registered (or expired): "
		    "register again", c->arg);
		return -1;
	case DSTATE_NOMEM:
		fault(c, DIRP_FAULT_INTERNAL, "out of memory");
		return -1;
	default:
		return 0;
	}
}

static void
call_close(struct call *c)
{
	free((void *)c->arg);
	stamp_free(&c->s);
	if (c->st)
		xmlrpc_DECREF(c->st);
}

static xmlrpc_value *
m_register(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	struct dird *d = server_info;
	xmlrpc_value *res = NULL;
	char body[FIELD_MAX + 32];
	const char *why;
	int port, hb, exp;
	size_t max;
	enum dstate_rc rc;
	struct call c;

	if (call_open(&c, env, ci, d, "slot.register", &d->ctr.calls_register, params,
	    "relay") == -1)
		goto out;
	if (get_int(c.st, "data_port", &port, &why) == -1) {
		fault(&c, DIRP_FAULT_MALFORMED, "field 'data_port': %s", why);
		goto out;
	}
	snprintf(body, sizeof(body), "%s\n%d", c.arg, port);
	if (call_auth(&c, body, ROLES_RELAY) == -1)
		goto out;
	if (port < 1 || port > 65535) {
		fault(&c, DIRP_FAULT_MALFORMED, "data_port %d: expected 1-65535", port);
		goto out;
	}

	pthread_mutex_lock(&d->mu);
	/* An endpoint is its first key's until it expires: another key's
	 * certificate cannot take over a relay's place in the listing. */
	rc = call_owner(&c);
	if (rc == DSTATE_OK)
		rc = dstate_register(d->state, &c.ep, (uint16_t)port, clock_mono_us());
	if ((rc == DSTATE_OK || rc == DSTATE_NEW) && c.who.has_cert &&
	    dstate_set_cert(d->state, &c.ep, c.who.cert.raw) != DSTATE_OK)
		rc = DSTATE_NOMEM;	/* cannot happen: the owner was checked */
	if (rc == DSTATE_NEW)
		d->ctr.relays_registered++;
	hb = secs(d->conf.heartbeat_interval_ms);
	exp = secs(d->conf.expire_after_ms);
	max = d->conf.max_relays;
	pthread_mutex_unlock(&d->mu);
	if (rc == DSTATE_LIMIT) {
		fault(&c, DIRP_FAULT_LIMIT, "directory full (%zu relays, [limits] max_relays)",
		    max);
		goto out;
	}
	if (call_refused(&c, rc) == -1)
		goto out;
	if (rc == DSTATE_NEW) {
		char b[EP_STRLEN], serial[17];

		if (c.who.has_cert) {
			ident_serial_hex(c.who.cert.serial, serial);
			log_info("relay %s registered, data port %d, certificate '%s' serial %s",
			    ep_fmt(&c.ep, b), port, c.who.cert.name, serial);
		} else
			log_info("relay %s registered, data port %d", ep_fmt(&c.ep, b), port);
	}
	res = xmlrpc_build_value(env, "{s:b,s:i,s:i}", "ok", (xmlrpc_bool)1,
	    "heartbeat_interval", hb, "expire_after", exp);
out:
	call_close(&c);
	return res;
}

static xmlrpc_value *
m_heartbeat(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	struct dird *d = server_info;
	xmlrpc_value *res = NULL;
	enum dstate_rc rc;
	struct call c;
	int hb;

	if (call_open(&c, env, ci, d, "slot.heartbeat", &d->ctr.calls_heartbeat, params,
	    "relay") == -1 || call_auth(&c, c.arg, ROLES_RELAY) == -1)
		goto out;
	pthread_mutex_lock(&d->mu);
	rc = call_owner(&c);
	if (rc == DSTATE_OK)
		rc = dstate_heartbeat(d->state, &c.ep, clock_mono_us());
	hb = secs(d->conf.heartbeat_interval_ms);
	pthread_mutex_unlock(&d->mu);
	if (call_refused(&c, rc) == -1)
		goto out;
	res = xmlrpc_build_value(env, "{s:b,s:i}", "ok", (xmlrpc_bool)1,
	    "heartbeat_interval", hb);
out:
	call_close(&c);
	return res;
}

struct entry {
	const char *peer;
	int rtt_us;
};

static void
entries_free(struct entry *e, size_t n)
{
	if (e == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		free((void *)e[i].peer);
	free(e);
}

/* The rtts array: every item a struct with a string peer and an int
 * rtt_us. Returns 0 with *out (n entries), or -1 with *why. */
static int
get_entries(xmlrpc_value *st, struct entry **out, size_t *n, char *why, size_t whylen)
{
	xmlrpc_env e;
	xmlrpc_value *a = NULL;
	struct entry *v = NULL;
	size_t i = 0, cnt = 0;
	const char *w;
	int sz;

	*out = NULL;
	*n = 0;
	xmlrpc_env_init(&e);
	xmlrpc_struct_find_value(&e, st, "rtts", &a);
	if (e.fault_occurred || a == NULL) {
		snprintf(why, whylen, "field 'rtts': missing");
		goto fail;
	}
	if (xmlrpc_value_type(a) != XMLRPC_TYPE_ARRAY) {
		snprintf(why, whylen, "field 'rtts': must be an array");
		goto fail;
	}
	sz = xmlrpc_array_size(&e, a);
	if (e.fault_occurred || sz < 0) {
		snprintf(why, whylen, "field 'rtts': unreadable array");
		goto fail;
	}
	cnt = (size_t)sz;
	if (cnt > 0 && (v = calloc(cnt, sizeof(*v))) == NULL) {
		snprintf(why, whylen, "out of memory");
		goto fail;
	}
	for (i = 0; i < cnt; i++) {
		xmlrpc_value *it = NULL;
		xmlrpc_array_read_item(&e, a, (unsigned)i, &it);
		if (e.fault_occurred || it == NULL || xmlrpc_value_type(it) != XMLRPC_TYPE_STRUCT) {
			snprintf(why, whylen, "rtts[%zu]: must be a struct", i);
			if (it)
				xmlrpc_DECREF(it);
			goto fail;
		}
		if (get_string(it, "peer", &v[i].peer, &w) == -1) {
			snprintf(why, whylen, "rtts[%zu].peer: %s", i, w);
			xmlrpc_DECREF(it);
			goto fail;
		}
		if (get_int(it, "rtt_us", &v[i].rtt_us, &w) == -1) {
			snprintf(why, whylen, "rtts[%zu].rtt_us: %s", i, w);
			xmlrpc_DECREF(it);
			goto fail;
		}
		xmlrpc_DECREF(it);
	}
	xmlrpc_DECREF(a);
	xmlrpc_env_clean(&e);
	*out = v;
	*n = cnt;
	return 0;
fail:
	entries_free(v, cnt);
	if (a)
		xmlrpc_DECREF(a);
	xmlrpc_env_clean(&e);
	return -1;
}

/* relay "\n" then peer " " rtt_us "\n" per entry. NULL: out of memory. */
static char *
report_body(const char *relay, const struct entry *e, size_t n)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int bad;

	if (f == NULL)
		return NULL;
	fprintf(f, "%s\n", relay);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "%s %d\n", e[i].peer, e[i].rtt_us);
	bad = ferror(f);
	if (fclose(f) != 0 || bad) {
		free(buf);
		return NULL;
	}
	return buf;
}

static xmlrpc_value *
m_report(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	struct dird *d = server_info;
	xmlrpc_value *res = NULL;
	struct entry *e = NULL;
	struct dstate_rtt_in *in = NULL;
	size_t n = 0, accepted = 0, max;
	char *body = NULL, w[128];
	enum dstate_rc rc;
	struct call c;

	if (call_open(&c, env, ci, d, "slot.report", &d->ctr.calls_report, params,
	    "relay") == -1)
		goto out;
	if (get_entries(c.st, &e, &n, w, sizeof(w)) == -1) {
		fault(&c, DIRP_FAULT_MALFORMED, "%s", w);
		goto out;
	}
	if ((body = report_body(c.arg, e, n)) == NULL) {
		fault(&c, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	if (call_auth(&c, body, ROLES_RELAY) == -1)
		goto out;
	pthread_mutex_lock(&d->mu);
	max = d->conf.max_report_entries;
	pthread_mutex_unlock(&d->mu);
	if (n > max) {
		fault(&c, DIRP_FAULT_LIMIT, "%zu entries, at most %zu ([limits] "
		    "max_report_entries)", n, max);
		goto out;
	}
	if (n > 0 && (in = calloc(n, sizeof(*in))) == NULL) {
		fault(&c, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char field[32];
		snprintf(field, sizeof(field), "rtts[%zu].peer", i);
		if (parse_relay(&c, e[i].peer, field, &in[i].peer) == -1)
			goto out;
		if (e[i].rtt_us < 0) {
			fault(&c, DIRP_FAULT_MALFORMED, "rtts[%zu].rtt_us %d: must be >= 0", i,
			    e[i].rtt_us);
			goto out;
		}
		in[i].rtt_us = (uint32_t)e[i].rtt_us;
	}
	pthread_mutex_lock(&d->mu);
	rc = call_owner(&c);
	if (rc == DSTATE_OK)
		rc = dstate_report(d->state, &c.ep, in, n, &accepted);
	d->ctr.report_entries += accepted;
	pthread_mutex_unlock(&d->mu);
	if (call_refused(&c, rc) == -1)
		goto out;
	log_debug("%s: %s reported %zu rtts, %zu stored", c.method, c.arg, n, accepted);
	res = xmlrpc_build_value(env, "{s:b,s:i}", "ok", (xmlrpc_bool)1, "accepted",
	    (int)accepted);
out:
	free(in);
	free(body);
	entries_free(e, n);
	call_close(&c);
	return res;
}

/* How often slot.list computes the landmarks again while the version stays. */
#define LAND_REFRESH_US (10ull * 1000000)
/* dland_max leaves room under what clients take, for the revocation list
 * and the rest of the answer. */
_Static_assert(DLAND_ANSWER_MAX + ((size_t)4 << 20) <= DIRC_MAX_ANSWER,
    "landmark rows sized for a larger answer than clients take");
/* How often it says that it sends fewer landmarks than configured. */
#define LAND_WARN_US (600ull * 1000000)

/* The landmarks member of slot.list's answer (dland.h); rows are the
 * encoded RTTs (dland_encode). */
static xmlrpc_value *
land_answer(xmlrpc_env *env, const struct dland *l, const uint8_t *rows, size_t len)
{
	xmlrpc_value *idx = xmlrpc_array_new(env), *w = xmlrpc_array_new(env), *res = NULL;

	for (size_t i = 0; i < l->nland && !env->fault_occurred; i++) {
		xmlrpc_value *a = xmlrpc_int_new(env, (int)l->land[i]);
		/* A float's value exactly, so the client reads back what we
		 * signed. */
		xmlrpc_value *b = a ? xmlrpc_double_new(env, (double)l->weight[i]) : NULL;

		if (b != NULL) {
			xmlrpc_array_append_item(env, idx, a);
			xmlrpc_array_append_item(env, w, b);
		}
		if (a)
			xmlrpc_DECREF(a);
		if (b)
			xmlrpc_DECREF(b);
	}
	if (!env->fault_occurred)
		res = xmlrpc_build_value(env, "{s:A,s:A,s:6}", "index", idx, "weight", w,
		    "rtt", rows ? rows : (const uint8_t *)"", len);
	if (idx)
		xmlrpc_DECREF(idx);
	if (w)
		xmlrpc_DECREF(w);
	return res;
}

/* Everything a slot.list answer holds, gathered under the lock. */
struct list_out {
	const char *nonce;
	char version[DSTATE_VERSION_LEN];
	bool changed;
	struct dstate_entry *e;
	size_t n;
	struct dland land;		/* nland 0: none sent */
	uint8_t *rows;			/* land's RTTs as sent */
	size_t rows_len;
	struct ident_revoked rev;	/* identity mode: a copy of the list */
	bool sign;
	struct ident id;		/* identity mode: a copy of ours */
};

static void
list_out_free(struct list_out *o)
{
	free(o->e);
	dland_free(&o->land);
	free(o->rows);
	free(o->rev.serial);
	ident_wipe(&o->id);
}

static void
set_member(xmlrpc_env *env, xmlrpc_value *st, const char *name, xmlrpc_value *v)
{
	if (v == NULL)
		return;
	if (!env->fault_occurred)
		xmlrpc_struct_set_value(env, st, name, v);
	xmlrpc_DECREF(v);
}

/* The canonical text (dirp_list_text) of o, malloc'ed; NULL with the
 * fault set. */
static char *
answer_text(xmlrpc_env *env, const struct list_out *o, size_t *len)
{
	struct dirp_list_relay *r = o->n ? calloc(o->n, sizeof(*r)) : NULL;
	uint32_t *idx = o->land.nland ? calloc(o->land.nland, sizeof(*idx)) : NULL;
	char *text = NULL;

	if ((o->n && r == NULL) || (o->land.nland && idx == NULL)) {
		xmlrpc_faultf(env, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < o->n; i++)
		r[i] = (struct dirp_list_relay){ o->e[i].relay, o->e[i].data_port,
		    o->e[i].group, o->e[i].has_cert ? o->e[i].cert : NULL };
	for (size_t i = 0; i < o->land.nland; i++)
		idx[i] = o->land.land[i];
	struct dirp_listing l = {
		.nonce = o->nonce, .version = o->version, .changed = o->changed,
		.relay = r, .nrelay = o->n,
		.land_index = idx, .land_weight = o->land.weight, .nland = o->land.nland,
		.land_rtt = o->rows, .land_rtt_len = o->rows_len,
		.revoked = o->rev.serial, .nrevoked = o->rev.n,
	};
	if ((text = dirp_list_text(&l, len)) == NULL)
		xmlrpc_faultf(env, "cannot build the listing's text");
out:
	free(r);
	free(idx);
	return text;
}

/* cert and sig over text. */
static void
sign_answer(xmlrpc_env *env, xmlrpc_value *res, const struct list_out *o, const char *text,
    size_t len)
{
	char cert[DIRP_CERT_HEX + 1], sig[DIRP_SIG_HEX + 1];
	uint8_t raw[IDENT_SIG_LEN];

	dirp_list_sign(&o->id, text, len, raw);
	sodium_bin2hex(sig, sizeof(sig), raw, sizeof(raw));
	sodium_bin2hex(cert, sizeof(cert), o->id.cert.raw, IDENT_CERT_LEN);
	set_member(env, res, "cert", xmlrpc_string_new(env, cert));
	set_member(env, res, "sig", xmlrpc_string_new(env, sig));
}

/* The answer in its text form (format "text"): the canonical text, the
 * landmark rows it holds the hash of, and in identity mode cert and sig:
 * a handful of XML elements whatever the listing's size, so that a client
 * parses a few times the answer's size, not the ~55 times of a tree. */
static xmlrpc_value *
text_answer(xmlrpc_env *env, const struct list_out *o)
{
	size_t len = 0;
	char *text = answer_text(env, o, &len);
	xmlrpc_value *res = NULL;

	if (text == NULL)
		return NULL;
	res = xmlrpc_build_value(env, "{s:s,s:6}", "format", "text", "text",
	    (const unsigned char *)text, len);
	if (res != NULL && o->rows_len > 0)
		set_member(env, res, "rtt", xmlrpc_base64_new(env, o->rows_len, o->rows));
	if (res != NULL && o->sign && !env->fault_occurred)
		sign_answer(env, res, o, text, len);
	free(text);
	if (res != NULL && env->fault_occurred) {
		xmlrpc_DECREF(res);
		res = NULL;
	}
	return res;
}

/* The answer of slot.list: an empty array when unchanged. In identity mode
 * every relay carries its certificate, the answer the revocation list, and
 * the directory's certificate and signature. */
static xmlrpc_value *
list_answer(xmlrpc_env *env, const struct list_out *o)
{
	xmlrpc_value *arr, *res = NULL;
	char cert[DIRP_CERT_HEX + 1], serial[17];

	if ((arr = xmlrpc_array_new(env)) == NULL)
		return NULL;
	for (size_t i = 0; i < o->n && !env->fault_occurred; i++) {
		const struct dstate_entry *e = &o->e[i];
		xmlrpc_value *it = xmlrpc_build_value(env, "{s:s,s:i,s:i}", "relay", e->relay,
		    "data_port", (int)e->data_port, "group", (int)e->group);
		if (it == NULL)
			break;
		if (e->has_cert) {
			sodium_bin2hex(cert, sizeof(cert), e->cert, IDENT_CERT_LEN);
			set_member(env, it, "cert", xmlrpc_string_new(env, cert));
		}
		xmlrpc_array_append_item(env, arr, it);
		xmlrpc_DECREF(it);
	}
	if (!env->fault_occurred)
		res = xmlrpc_build_value(env, "{s:s,s:b,s:A}", "version", o->version, "changed",
		    (xmlrpc_bool)o->changed, "relays", arr);
	xmlrpc_DECREF(arr);
	if (res != NULL && o->land.nland > 0)
		set_member(env, res, "landmarks", land_answer(env, &o->land, o->rows,
		    o->rows_len));
	if (res != NULL && o->sign) {
		xmlrpc_value *rv = xmlrpc_array_new(env);

		for (size_t i = 0; rv != NULL && i < o->rev.n && !env->fault_occurred; i++) {
			xmlrpc_value *v;

			ident_serial_hex(o->rev.serial[i], serial);
			if ((v = xmlrpc_string_new(env, serial)) != NULL) {
				xmlrpc_array_append_item(env, rv, v);
				xmlrpc_DECREF(v);
			}
		}
		set_member(env, res, "revoked", rv);
		size_t len = 0;
		char *text = env->fault_occurred ? NULL : answer_text(env, o, &len);

		if (text != NULL)
			sign_answer(env, res, o, text, len);
		free(text);
	}
	if (res != NULL && env->fault_occurred) {
		xmlrpc_DECREF(res);
		res = NULL;
	}
	return res;
}

static xmlrpc_value *
m_list(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	struct dird *d = server_info;
	xmlrpc_value *res = NULL;
	struct list_out o = { 0 };
	char *cur = o.version;
	const char *format = NULL, *why = NULL;
	bool text = false;
	struct call c;
	int rc = 0;

	if (call_open(&c, env, ci, d, "slot.list", &d->ctr.calls_list, params,
	    "version") == -1 || call_auth(&c, c.arg, ROLES_LIST) == -1)
		goto out;
	/* Not signed: one stripped on the way brings the tree, which clients
	 * parse only up to DIRC_MAX_TREE. */
	if (get_string(c.st, "format", &format, &why) == 0) {
		text = strcmp(format, "text") == 0;
		if (!text) {
			fault(&c, DIRP_FAULT_MALFORMED, "field 'format': \"%s\" is not \"text\"",
			    format);
			goto out;
		}
	} else if (strcmp(why, "missing") != 0) {
		fault(&c, DIRP_FAULT_MALFORMED, "field 'format': %s", why);
		goto out;
	}
	o.nonce = c.s.nonce;
	o.sign = d->mode == IDENT_MODE_IDENTITY;
	pthread_mutex_lock(&d->mu);
	/* Landmark RTTs move with reports, which do not move the version:
	 * a new version when they have moved, so that clients fetch them.
	 * Computed again only when the version moved or LAND_REFRESH_US
	 * passed (it costs O(n L log n) under the lock); in between, the
	 * landmarks of the version are served. */
	dstate_version(d->state, cur);
	uint64_t now = clock_mono_us();
	size_t nrelay = dstate_count(d->state), nland = 0;
	bool warn = false;
	if (d->conf.landmarks > 0 && (d->land.nrelay != nrelay ||
	    strcmp(cur, d->land_version) != 0 || now - d->land_at_us >= LAND_REFRESH_US)) {
		struct dland land = { 0 };

		/* Fewer landmarks than configured rather than a listing that
		 * every client refuses. */
		nland = dland_max(nrelay, d->conf.landmarks);
		if (nland < d->conf.landmarks && (d->land_warned_us == 0 ||
		    now - d->land_warned_us >= LAND_WARN_US)) {
			d->land_warned_us = now;
			warn = true;
		}
		rc = dland_compute(d->state, nland, &d->land, &land);
		if (rc == 0 && dland_moved(&d->land, &land)) {
			if (d->land.nrelay > 0 && strcmp(cur, d->land_version) == 0)
				dstate_bump(d->state);
			dland_free(&d->land);
			d->land = land;
			memset(&land, 0, sizeof(land));
			dstate_version(d->state, cur);
		}
		dland_free(&land);
		memcpy(d->land_version, cur, sizeof(d->land_version));
		d->land_at_us = now;
	}
	o.changed = strcmp(cur, c.arg) != 0;
	if (rc == 0 && d->conf.landmarks > 0 && o.changed && d->land.nland > 0)
		rc = dland_dup(&d->land, &o.land);
	if (o.changed && rc == 0)
		rc = dstate_listing(d->state, clock_mono_us(), &o.e, &o.n);
	if (rc == 0 && o.sign) {
		o.id = d->id;
		if (ident_revoked_copy(&d->revoked, &o.rev) == -1)
			rc = -1;
	}
	if (rc == 0 && o.changed)
		d->ctr.lists_full++;
	else if (rc == 0)
		d->ctr.lists_unchanged++;
	uint64_t want = d->conf.landmarks;
	pthread_mutex_unlock(&d->mu);
	if (warn)
		log_warnx("listing: %zu landmarks sent, not the %" PRIu64 " of [groups] "
		    "landmarks: %zu relays with more would pass the %u MiB clients "
		    "take (DIRC_MAX_ANSWER)", nland, want, nrelay, DIRC_MAX_ANSWER >> 20);
	if (rc == 0 && o.land.nland > 0 && dland_encode(&o.land, &o.rows, &o.rows_len) < 0)
		rc = -1;
	if (rc == -1) {
		fault(&c, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	res = text ? text_answer(env, &o) : list_answer(env, &o);
out:
	free((void *)format);
	list_out_free(&o);
	call_close(&c);
	return res;
}

xmlrpc_registry *
drpc_registry(xmlrpc_env *env, struct dird *d)
{
	static const struct {
		const char *name;
		xmlrpc_method2 fn;
		const char *help;
	} m[] = {
		{ "slot.register", m_register, "Register a relay (docs/directory.md)." },
		{ "slot.heartbeat", m_heartbeat, "Keep a registered relay listed." },
		{ "slot.report", m_report, "A relay's RTTs to other relays." },
		{ "slot.list", m_list, "The relays and their groups." },
	};
	xmlrpc_registry *reg = xmlrpc_registry_new(env);

	if (reg == NULL)
		return NULL;
	/* system.listMethods and friends tell strangers nothing they need. */
	xmlrpc_registry_disable_introspection(reg);
	for (size_t i = 0; i < sizeof(m) / sizeof(m[0]) && !env->fault_occurred; i++) {
		struct xmlrpc_method_info3 mi = {
			.methodName = m[i].name,
			.methodFunction = m[i].fn,
			.serverInfo = d,
			.stackSize = 0,
			/* Types are checked by the methods, with our fault codes. */
			.signatureString = NULL,
			.help = m[i].help,
		};
		xmlrpc_registry_add_method3(env, reg, &mi);
	}
	if (env->fault_occurred) {
		xmlrpc_registry_free(reg);
		return NULL;
	}
	return reg;
}
