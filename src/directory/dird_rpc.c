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

#include <xmlrpc-c/abyss.h>	/* and abyss_unixsock.h, which has no guard */

#include "slot/clock.h"
#include "slot/dirproto.h"
#include "slot/log.h"
#include "dird_rpc.h"
#include "dland.h"

/* Longest string field we read: endpoints and versions are far shorter. */
#define FIELD_MAX 128
/* dirp_verify's bound on the canonical text, less the header's room. */
#define BODY_MAX (64 * 1024 - 256)

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
bool drpc_fuzz_no_mac;
#endif

struct stamp {
	const char *ts, *nonce, *mac;
};

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

static void fault(struct dird *d, xmlrpc_env *env, void *call_info, const char *method,
    enum dirp_fault code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* Sets the fault, counts it, and says it at debug level. */
static void
fault(struct dird *d, xmlrpc_env *env, void *call_info, const char *method,
    enum dirp_fault code, const char *fmt, ...)
{
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
	log_debug("%s from %s: fault %d: %s", method, peer_of(call_info, peer, sizeof(peer)),
	    (int)code, msg);
	xmlrpc_env_set_fault(env, (int)code, msg);
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
	memset(s, 0, sizeof(*s));
}

/* ts, nonce and mac: present and strings. Returns 0, or -1 with the fault
 * set. */
static int
get_stamp(struct dird *d, xmlrpc_env *env, void *ci, const char *method, xmlrpc_value *st,
    struct stamp *s)
{
	static const char *const names[] = { "ts", "nonce", "mac" };
	const char **dst[] = { &s->ts, &s->nonce, &s->mac };
	const char *why;

	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < 3; i++) {
		if (get_string(st, names[i], dst[i], &why) == -1) {
			fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field '%s': %s",
			    names[i], why);
			stamp_free(s);
			return -1;
		}
	}
	return 0;
}

/* The checks every call shares, after the types: the stamp's syntax, the
 * MAC over body, the clock window and the nonce. Returns 0, or -1 with the
 * fault set. */
static int
authenticate(struct dird *d, xmlrpc_env *env, void *ci, const char *method,
    const struct stamp *s, const char *body)
{
	uint64_t ts, nonce, skew_ms;
	struct auth_key key;
	enum replay_verdict v;
	int ok;

	if (dirp_parse_stamp(s->ts, s->nonce, &ts, &nonce) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "ts must be unix microseconds "
		    "in decimal, nonce 16 lowercase hex digits");
		return -1;
	}
	/* dirp_verify cannot check a longer text: say so rather than blame
	 * the key. */
	if (strlen(body) > BODY_MAX) {
		fault(d, env, ci, method, DIRP_FAULT_LIMIT, "call too large to authenticate "
		    "(%zu bytes of fields, at most %d): split it", strlen(body), BODY_MAX);
		return -1;
	}
	pthread_mutex_lock(&d->mu);
	key = d->key;
	pthread_mutex_unlock(&d->mu);
	ok = dirp_verify(&key, method, s->ts, s->nonce, body, s->mac) == 0;
	auth_key_wipe(&key);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
	ok = ok || drpc_fuzz_no_mac;
#endif
	if (!ok) {
		fault(d, env, ci, method, DIRP_FAULT_AUTH, "mac does not verify (another "
		    "deployment key?)");
		return -1;
	}
	pthread_mutex_lock(&d->mu);
	v = replay_check(d->replay, ts, nonce, clock_real_us());
	skew_ms = d->conf.max_clock_skew_ms;
	pthread_mutex_unlock(&d->mu);
	switch (v) {
	case REPLAY_OK:
		return 0;
	case REPLAY_STALE:
		fault(d, env, ci, method, DIRP_FAULT_STALE, "timestamp more than %" PRIu64
		    " ms from the directory's clock (run NTP)", skew_ms);
		return -1;
	case REPLAY_DUP:
		fault(d, env, ci, method, DIRP_FAULT_STALE, "replayed call (nonce seen before)");
		return -1;
	case REPLAY_FULL:
		break;
	}
	fault(d, env, ci, method, DIRP_FAULT_LIMIT, "too many calls in the clock window; "
	    "try again later");
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
parse_relay(struct dird *d, xmlrpc_env *env, void *ci, const char *method, const char *s,
    const char *field, struct endpoint *ep)
{
	if (ep_parse(s, 0, ep) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "%s '%s': expected ip:port "
		    "(port 1-65535, IPv6 in brackets)", field, s);
		return -1;
	}
	return 0;
}

static xmlrpc_value *
m_register(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	static const char method[] = "slot.register";
	struct dird *d = server_info;
	xmlrpc_value *st, *res = NULL;
	struct stamp s = { 0 };
	const char *relay = NULL, *why;
	struct endpoint ep;
	char body[FIELD_MAX + 32];
	int port, hb, exp;
	size_t max;
	enum dstate_rc rc;

	pthread_mutex_lock(&d->mu);
	d->ctr.calls_register++;
	pthread_mutex_unlock(&d->mu);
	if ((st = the_struct(params)) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "expected one struct parameter");
		return NULL;
	}
	if (get_stamp(d, env, ci, method, st, &s) == -1)
		goto out;
	if (get_string(st, "relay", &relay, &why) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field 'relay': %s", why);
		goto out;
	}
	if (get_int(st, "data_port", &port, &why) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field 'data_port': %s", why);
		goto out;
	}
	snprintf(body, sizeof(body), "%s\n%d", relay, port);
	if (authenticate(d, env, ci, method, &s, body) == -1 ||
	    parse_relay(d, env, ci, method, relay, "relay", &ep) == -1)
		goto out;
	if (port < 1 || port > 65535) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "data_port %d: expected 1-65535",
		    port);
		goto out;
	}

	pthread_mutex_lock(&d->mu);
	rc = dstate_register(d->state, &ep, (uint16_t)port, clock_mono_us());
	if (rc == DSTATE_NEW)
		d->ctr.relays_registered++;
	hb = secs(d->conf.heartbeat_interval_ms);
	exp = secs(d->conf.expire_after_ms);
	max = d->conf.max_relays;
	pthread_mutex_unlock(&d->mu);
	if (rc == DSTATE_LIMIT) {
		fault(d, env, ci, method, DIRP_FAULT_LIMIT, "directory full (%zu relays, "
		    "[limits] max_relays)", max);
		goto out;
	}
	if (rc == DSTATE_NOMEM) {
		fault(d, env, ci, method, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	if (rc == DSTATE_NEW) {
		char b[EP_STRLEN];
		log_info("relay %s registered, data port %d", ep_fmt(&ep, b), port);
	}
	res = xmlrpc_build_value(env, "{s:b,s:i,s:i}", "ok", (xmlrpc_bool)1,
	    "heartbeat_interval", hb, "expire_after", exp);
out:
	free((void *)relay);
	stamp_free(&s);
	xmlrpc_DECREF(st);
	return res;
}

static xmlrpc_value *
m_heartbeat(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	static const char method[] = "slot.heartbeat";
	struct dird *d = server_info;
	xmlrpc_value *st, *res = NULL;
	struct stamp s = { 0 };
	const char *relay = NULL, *why;
	struct endpoint ep;
	enum dstate_rc rc;
	int hb;

	pthread_mutex_lock(&d->mu);
	d->ctr.calls_heartbeat++;
	pthread_mutex_unlock(&d->mu);
	if ((st = the_struct(params)) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "expected one struct parameter");
		return NULL;
	}
	if (get_stamp(d, env, ci, method, st, &s) == -1)
		goto out;
	if (get_string(st, "relay", &relay, &why) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field 'relay': %s", why);
		goto out;
	}
	if (authenticate(d, env, ci, method, &s, relay) == -1 ||
	    parse_relay(d, env, ci, method, relay, "relay", &ep) == -1)
		goto out;
	pthread_mutex_lock(&d->mu);
	rc = dstate_heartbeat(d->state, &ep, clock_mono_us());
	hb = secs(d->conf.heartbeat_interval_ms);
	pthread_mutex_unlock(&d->mu);
	if (rc == DSTATE_UNKNOWN) {
		fault(d, env, ci, method, DIRP_FAULT_UNKNOWN_RELAY, "relay %s is not registered "
		    "(or expired): register again", relay);
		goto out;
	}
	res = xmlrpc_build_value(env, "{s:b,s:i}", "ok", (xmlrpc_bool)1,
	    "heartbeat_interval", hb);
out:
	free((void *)relay);
	stamp_free(&s);
	xmlrpc_DECREF(st);
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
	static const char method[] = "slot.report";
	struct dird *d = server_info;
	xmlrpc_value *st, *res = NULL;
	struct stamp s = { 0 };
	const char *relay = NULL, *why;
	struct entry *e = NULL;
	struct dstate_rtt_in *in = NULL;
	size_t n = 0, accepted = 0, max;
	struct endpoint ep;
	char *body = NULL, w[128];
	enum dstate_rc rc;

	pthread_mutex_lock(&d->mu);
	d->ctr.calls_report++;
	pthread_mutex_unlock(&d->mu);
	if ((st = the_struct(params)) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "expected one struct parameter");
		return NULL;
	}
	if (get_stamp(d, env, ci, method, st, &s) == -1)
		goto out;
	if (get_string(st, "relay", &relay, &why) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field 'relay': %s", why);
		goto out;
	}
	if (get_entries(st, &e, &n, w, sizeof(w)) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "%s", w);
		goto out;
	}
	if ((body = report_body(relay, e, n)) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	if (authenticate(d, env, ci, method, &s, body) == -1 ||
	    parse_relay(d, env, ci, method, relay, "relay", &ep) == -1)
		goto out;
	pthread_mutex_lock(&d->mu);
	max = d->conf.max_report_entries;
	pthread_mutex_unlock(&d->mu);
	if (n > max) {
		fault(d, env, ci, method, DIRP_FAULT_LIMIT, "%zu entries, at most %zu "
		    "([limits] max_report_entries)", n, max);
		goto out;
	}
	if (n > 0 && (in = calloc(n, sizeof(*in))) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		char field[32];
		snprintf(field, sizeof(field), "rtts[%zu].peer", i);
		if (parse_relay(d, env, ci, method, e[i].peer, field, &in[i].peer) == -1)
			goto out;
		if (e[i].rtt_us < 0) {
			fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "rtts[%zu].rtt_us %d: "
			    "must be >= 0", i, e[i].rtt_us);
			goto out;
		}
		in[i].rtt_us = (uint32_t)e[i].rtt_us;
	}
	pthread_mutex_lock(&d->mu);
	rc = dstate_report(d->state, &ep, in, n, &accepted);
	d->ctr.report_entries += accepted;
	pthread_mutex_unlock(&d->mu);
	if (rc == DSTATE_UNKNOWN) {
		fault(d, env, ci, method, DIRP_FAULT_UNKNOWN_RELAY, "relay %s is not registered "
		    "(or expired): register again", relay);
		goto out;
	}
	if (rc == DSTATE_NOMEM) {
		fault(d, env, ci, method, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	log_debug("%s: %s reported %zu rtts, %zu stored", method, relay, n, accepted);
	res = xmlrpc_build_value(env, "{s:b,s:i}", "ok", (xmlrpc_bool)1, "accepted",
	    (int)accepted);
out:
	free(in);
	free(body);
	entries_free(e, n);
	free((void *)relay);
	stamp_free(&s);
	xmlrpc_DECREF(st);
	return res;
}

/* How often slot.list computes the landmarks again while the version stays. */
#define LAND_REFRESH_US (10ull * 1000000)

/* The landmarks member of slot.list's answer (dland.h). */
static xmlrpc_value *
land_answer(xmlrpc_env *env, const struct dland *l)
{
	xmlrpc_value *idx = xmlrpc_array_new(env), *w = xmlrpc_array_new(env), *res = NULL;
	uint8_t *rows = NULL;
	size_t len = 0;

	for (size_t i = 0; i < l->nland && !env->fault_occurred; i++) {
		xmlrpc_value *a = xmlrpc_int_new(env, (int)l->land[i]);
		xmlrpc_value *b = a ? xmlrpc_double_new(env, l->weight[i]) : NULL;

		if (b != NULL) {
			xmlrpc_array_append_item(env, idx, a);
			xmlrpc_array_append_item(env, w, b);
		}
		if (a)
			xmlrpc_DECREF(a);
		if (b)
			xmlrpc_DECREF(b);
	}
	if (!env->fault_occurred && dland_encode(l, &rows, &len) < 0)
		xmlrpc_faultf(env, "out of memory");
	if (!env->fault_occurred)
		res = xmlrpc_build_value(env, "{s:A,s:A,s:6}", "index", idx, "weight", w,
		    "rtt", rows ? rows : (const uint8_t *)"", len);
	free(rows);
	if (idx)
		xmlrpc_DECREF(idx);
	if (w)
		xmlrpc_DECREF(w);
	return res;
}

/* The answer of slot.list: an empty array when unchanged. */
static xmlrpc_value *
list_answer(xmlrpc_env *env, const char *version, bool changed, const struct dstate_entry *e,
    size_t n, const struct dland *land)
{
	xmlrpc_value *arr, *res = NULL;

	if ((arr = xmlrpc_array_new(env)) == NULL)
		return NULL;
	for (size_t i = 0; i < n && !env->fault_occurred; i++) {
		xmlrpc_value *it = xmlrpc_build_value(env, "{s:s,s:i,s:i}", "relay", e[i].relay,
		    "data_port", (int)e[i].data_port, "group", (int)e[i].group);
		if (it == NULL)
			break;
		xmlrpc_array_append_item(env, arr, it);
		xmlrpc_DECREF(it);
	}
	if (!env->fault_occurred)
		res = xmlrpc_build_value(env, "{s:s,s:b,s:A}", "version", version, "changed",
		    (xmlrpc_bool)changed, "relays", arr);
	if (res != NULL && changed && land != NULL && land->nland > 0) {
		xmlrpc_value *lv = land_answer(env, land);

		if (lv != NULL) {
			xmlrpc_struct_set_value(env, res, "landmarks", lv);
			xmlrpc_DECREF(lv);
		}
		if (env->fault_occurred) {
			xmlrpc_DECREF(res);
			res = NULL;
		}
	}
	xmlrpc_DECREF(arr);
	return res;
}

static xmlrpc_value *
m_list(xmlrpc_env *env, xmlrpc_value *params, void *server_info, void *ci)
{
	static const char method[] = "slot.list";
	struct dird *d = server_info;
	xmlrpc_value *st, *res = NULL;
	struct stamp s = { 0 };
	const char *version = NULL, *why;
	char cur[DSTATE_VERSION_LEN];
	struct dstate_entry *e = NULL;
	struct dland land = { 0 };
	size_t n = 0;
	bool changed;
	int rc = 0;

	pthread_mutex_lock(&d->mu);
	d->ctr.calls_list++;
	pthread_mutex_unlock(&d->mu);
	if ((st = the_struct(params)) == NULL) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "expected one struct parameter");
		return NULL;
	}
	if (get_stamp(d, env, ci, method, st, &s) == -1)
		goto out;
	if (get_string(st, "version", &version, &why) == -1) {
		fault(d, env, ci, method, DIRP_FAULT_MALFORMED, "field 'version': %s", why);
		goto out;
	}
	if (authenticate(d, env, ci, method, &s, version) == -1)
		goto out;
	pthread_mutex_lock(&d->mu);
	/* Landmark RTTs move with reports, which do not move the version:
	 * a new version when they have moved, so that clients fetch them.
	 * Computed again only when the version moved or LAND_REFRESH_US
	 * passed (it costs O(n L log n) under the lock); in between, the
	 * landmarks of the version are served. */
	dstate_version(d->state, cur);
	uint64_t now = clock_mono_us();
	if (d->conf.landmarks > 0 && (d->land.nrelay != dstate_count(d->state) ||
	    strcmp(cur, d->land_version) != 0 || now - d->land_at_us >= LAND_REFRESH_US)) {
		rc = dland_compute(d->state, d->conf.landmarks, &d->land, &land);
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
	if (rc == 0 && d->conf.landmarks > 0 && strcmp(cur, version) != 0)
		rc = dland_dup(&d->land, &land);
	changed = strcmp(cur, version) != 0;
	if (changed && rc == 0)
		rc = dstate_listing(d->state, clock_mono_us(), &e, &n);
	if (rc == 0 && changed)
		d->ctr.lists_full++;
	else if (rc == 0)
		d->ctr.lists_unchanged++;
	pthread_mutex_unlock(&d->mu);
	if (rc == -1) {
		fault(d, env, ci, method, DIRP_FAULT_INTERNAL, "out of memory");
		goto out;
	}
	res = list_answer(env, cur, changed, e, n, &land);
out:
	dland_free(&land);
	free(e);
	free((void *)version);
	stamp_free(&s);
	xmlrpc_DECREF(st);
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
