/* The directory's client: xmlrpc-c builds the calls and parses the
 * answers; libcurl carries them, so that an answer is capped while it
 * arrives and checked (slot/xmlguard.h) before xmlrpc-c's parser, which
 * expands entities, sees a byte of it. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <sodium.h>
#include <xmlrpc-c/base.h>

#include "slot/cmp.h"
#include "slot/dirclient.h"
#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "slot/xmlguard.h"

#define DIRC_MAX_RELAYS 100000

/* Nesting of XML-RPC values in an answer: slot.list's deepest is 3. */
#define DIRC_NESTING 16

struct dirclient {
	CURL *curl;
	struct curl_slist *headers;
	bool ident_mode;
	struct auth_key key;		/* shared mode */
	struct ident id;		/* identity mode */
	unsigned timeout_ms;
	/* The answer being received. */
	char *buf;
	size_t len, cap;
	bool too_big;
};

int
dirc_global_init(char *err, size_t errlen)
{
	CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);

	if (rc != CURLE_OK) {
		errbuf_set(err, errlen, "libcurl: %s", curl_easy_strerror(rc));
		return -1;
	}
	/* Global in xmlrpc-c: the answers we parse are ours to bound. */
	xmlrpc_limit_set(XMLRPC_XML_SIZE_LIMIT_ID, DIRC_MAX_ANSWER);
	xmlrpc_limit_set(XMLRPC_NESTING_LIMIT_ID, DIRC_NESTING);
	return 0;
}

void
dirc_global_fini(void)
{
	curl_global_cleanup();
}

static size_t
on_data(char *p, size_t size, size_t n, void *arg)
{
	struct dirclient *c = arg;
	size_t len = size * n;

	if (len > DIRC_MAX_ANSWER - c->len) {
		c->too_big = true;
		return 0;	/* libcurl stops: CURLE_WRITE_ERROR */
	}
	if (c->len + len > c->cap) {
		size_t cap = c->cap ? c->cap : 16384;
		while (cap < c->len + len)
			cap *= 2;
		if (cap > DIRC_MAX_ANSWER)
			cap = DIRC_MAX_ANSWER;
		char *b = realloc(c->buf, cap);
		if (b == NULL)
			return 0;
		c->buf = b;
		c->cap = cap;
	}
	memcpy(c->buf + c->len, p, len);
	c->len += len;
	return len;
}

struct dirclient *
dirc_new(const struct auth_key *key, unsigned timeout_ms, char *err, size_t errlen)
{
	struct dirclient *c = calloc(1, sizeof(*c));
	struct curl_slist *h;

	if (c == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	c->key = *key;
	c->timeout_ms = timeout_ms;
	if ((c->curl = curl_easy_init()) == NULL)
		goto fail;
	/* No "Expect: 100-continue" round trip for a large report. */
	if ((h = curl_slist_append(NULL, "Content-Type: text/xml")) == NULL)
		goto fail;
	c->headers = h;
	if ((h = curl_slist_append(c->headers, "Expect:")) == NULL)
		goto fail;
	c->headers = h;
	CURL *e = c->curl;
	if (curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https") != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_USERAGENT, "slot/1") != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)timeout_ms) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE,
	    (curl_off_t)DIRC_MAX_ANSWER) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data) != CURLE_OK ||
	    curl_easy_setopt(e, CURLOPT_WRITEDATA, c) != CURLE_OK)
		goto fail;
	return c;
fail:
	errbuf_set(err, errlen, "libcurl: cannot set up a handle");
	dirc_free(c);
	return NULL;
}

void
dirc_free(struct dirclient *c)
{
	if (c == NULL)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	curl_slist_free_all(c->headers);
	free(c->buf);
	auth_key_wipe(&c->key);
	ident_wipe(&c->id);
	free(c);
}

void
dirc_set_key(struct dirclient *c, const struct auth_key *key)
{
	c->key = *key;
	c->ident_mode = false;
}

void
dirc_set_ident(struct dirclient *c, const struct ident *id)
{
	c->id = *id;
	c->ident_mode = true;
}

/* Adds ts, nonce, and mac or cert and sig over body to the call's struct;
 * nonce_out (if not NULL) gets the nonce. */
static void
sign(struct dirclient *c, xmlrpc_env *env, xmlrpc_value *s, const char *method,
    const char *body, char *nonce_out)
{
	char ts[24], nonce[DIRP_NONCE_HEX + 1], mac[DIRP_SIG_HEX + 1];
	char cert[DIRP_CERT_HEX + 1];
	xmlrpc_value *v;
	int rc, n;

	dirp_stamp(ts, nonce);
	if (nonce_out != NULL)
		memcpy(nonce_out, nonce, sizeof(nonce));
	if (c->ident_mode) {
		rc = dirp_sign(&c->id, method, ts, nonce, body, mac);
		sodium_bin2hex(cert, sizeof(cert), c->id.cert.raw, IDENT_CERT_LEN);
	} else
		rc = dirp_mac(&c->key, method, ts, nonce, body, mac);
	if (rc == -1) {
		xmlrpc_faultf(env, "call too large to sign");
		return;
	}
	const char *k[4] = { "ts", "nonce", c->ident_mode ? "sig" : "mac", "cert" };
	const char *val[4] = { ts, nonce, mac, cert };
	n = c->ident_mode ? 4 : 3;
	for (int i = 0; i < n && !env->fault_occurred; i++) {
		v = xmlrpc_string_new(env, val[i]);
		if (!env->fault_occurred) {
			xmlrpc_struct_set_value(env, s, k[i], v);
			xmlrpc_DECREF(v);
		}
	}
}

/* POSTs the call's XML to url; the answer in c->buf, c->len. Returns 0, or
 * -1 with env's fault set. */
static int
post(struct dirclient *c, xmlrpc_env *env, const char *url, const char *xml, size_t len)
{
	CURLcode rc;
	long status = 0;

	c->len = 0;
	c->too_big = false;
	if (curl_easy_setopt(c->curl, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, xml) != CURLE_OK ||
	    curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) != CURLE_OK) {
		xmlrpc_faultf(env, "libcurl: cannot set the URL or the body");
		return -1;
	}
	rc = curl_easy_perform(c->curl);
	if (c->too_big || rc == CURLE_FILESIZE_EXCEEDED) {
		xmlrpc_faultf(env, "answer larger than %u bytes: refused", DIRC_MAX_ANSWER);
		return -1;
	}
	if (rc != CURLE_OK) {
		xmlrpc_faultf(env, "%s", curl_easy_strerror(rc));
		return -1;
	}
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status != 200) {
		xmlrpc_faultf(env, "HTTP status %ld", status);
		return -1;
	}
	return 0;
}

/* The '<' in buf: at least the XML elements it opens. */
static size_t
count_tags(const char *buf, size_t len)
{
	size_t n = 0;

	for (const char *p = buf, *e = buf + len; (p = memchr(p, '<', (size_t)(e - p))) != NULL;
	    p++)
		n++;
	return n;
}

/* Calls method with the one struct s; returns the result or NULL with err
 * and *fault filled. */
static xmlrpc_value *
call(struct dirclient *c, const char *url, const char *method, xmlrpc_value *s, int *fault,
    char *err, size_t errlen)
{
	xmlrpc_env env;
	xmlrpc_value *params, *res = NULL;
	xmlrpc_mem_block *xml = NULL;
	int fcode = 0;
	const char *fstr = NULL;

	if (fault)
		*fault = 0;
	xmlrpc_env_init(&env);
	params = xmlrpc_array_new(&env);
	if (!env.fault_occurred)
		xmlrpc_array_append_item(&env, params, s);
	if (!env.fault_occurred)
		xml = XMLRPC_MEMBLOCK_NEW(char, &env, 0);
	if (!env.fault_occurred)
		xmlrpc_serialize_call2(&env, xml, method, params, xmlrpc_dialect_i8);
	if (!env.fault_occurred)
		post(c, &env, url, XMLRPC_MEMBLOCK_CONTENTS(char, xml),
		    XMLRPC_MEMBLOCK_SIZE(char, xml));
	if (!env.fault_occurred) {
		size_t at;
		enum xmlg_result g = xmlg_check(c->buf, c->len, &at);

		if (g != XMLG_OK) {
			const char *bom = g == XMLG_BOM ? xmlg_bom_name(c->buf, c->len) : NULL;
			xmlrpc_faultf(&env, "answer refused unparsed: %s%s%s at byte %zu of %zu "
			    "(not plain UTF-8 XML)", bom ? "a " : xmlg_strerror(g),
			    bom ? bom : "", bom ? " byte order mark" : "", at, c->len);
		}
	}
	/* xmlrpc-c's tree of an answer dense in elements takes ~55 times its
	 * XML (32 MiB of "<value/>": 1.8 GB), before any signature can be
	 * checked: past DIRC_MAX_TREE only a listing in its text form, a few
	 * dozen elements however large, is parsed. */
	if (!env.fault_occurred && c->len > DIRC_MAX_TREE) {
		size_t tags = count_tags(c->buf, c->len);

		if (tags > DIRC_MAX_TEXT_TAGS)
			xmlrpc_faultf(&env, "answer refused unparsed: %zu bytes in %zu XML tags; "
			    "only a listing in its text form may pass %u bytes (a slot-dird "
			    "older than this client? upgrade it)", c->len, tags, DIRC_MAX_TREE);
	}
	if (!env.fault_occurred) {
		xmlrpc_parse_response2(&env, c->buf, c->len, &res, &fcode, &fstr);
		if (!env.fault_occurred && fstr != NULL) {
			xmlrpc_env_set_fault_formatted(&env, fcode, "fault %d: %s", fcode, fstr);
			free((void *)fstr);
		}
	}
	/* A large answer's buffer is not kept between calls. */
	if (c->cap > 65536) {
		free(c->buf);
		c->buf = NULL;
		c->cap = 0;
	}
	c->len = 0;
	if (xml)
		XMLRPC_MEMBLOCK_FREE(char, xml);
	if (params)
		xmlrpc_DECREF(params);
	if (env.fault_occurred) {
		/* Transport errors come as faults too, with codes of their
		 * own (negative); the directory's are 1..6. */
		if (fault && env.fault_code > 0 && env.fault_code <= DIRP_FAULT_INTERNAL)
			*fault = env.fault_code;
		errbuf_set(err, errlen, "%s %s: %s", url, method, env.fault_string);
		if (res)
			xmlrpc_DECREF(res);
		res = NULL;
	}
	xmlrpc_env_clean(&env);
	return res;
}

/* The checked call every method makes: the struct that fmt and what
 * follows describe (xmlrpc_build_value), signed over body (nonce, if not
 * NULL, gets the stamp's nonce), posted to url, and the answer checked.
 * Returns 0 with the result in *res (if res is not NULL; the caller
 * DECREFs it), or -1 with err and *fault filled. */
static int
checked_call(struct dirclient *c, const char *url, const char *method, const char *body,
    char *nonce, xmlrpc_value **res, int *fault, char *err, size_t errlen, const char *fmt,
    ...)
{
	xmlrpc_env env;
	xmlrpc_value *s = NULL, *r = NULL;
	const char *tail;
	va_list ap;

	xmlrpc_env_init(&env);
	va_start(ap, fmt);
	xmlrpc_build_value_va(&env, fmt, ap, &s, &tail);
	va_end(ap);
	if (env.fault_occurred)
		s = NULL;
	else
		sign(c, &env, s, method, body, nonce);
	if (env.fault_occurred)
		errbuf_set(err, errlen, "building the call: %s", env.fault_string);
	else
		r = call(c, url, method, s, fault, err, errlen);
	if (s)
		xmlrpc_DECREF(s);
	xmlrpc_env_clean(&env);
	if (r != NULL && res != NULL)
		*res = r;
	else if (r != NULL)
		xmlrpc_DECREF(r);
	return r != NULL ? 0 : -1;
}

int
dirc_register(struct dirclient *c, const char *url, const struct endpoint *relay,
    uint16_t data_port, unsigned *heartbeat_s, unsigned *expire_s, int *fault, char *err,
    size_t errlen)
{
	char r[EP_STRLEN], body[EP_STRLEN + 16];
	xmlrpc_env env;
	xmlrpc_value *res;
	xmlrpc_bool ok = 0;
	int hb = 0, ex = 0;

	ep_fmt(relay, r);
	snprintf(body, sizeof(body), "%s\n%u", r, data_port);
	if (checked_call(c, url, "slot.register", body, NULL, &res, fault, err, errlen,
	    "{s:s,s:i}", "relay", r, "data_port", (xmlrpc_int32)data_port) == -1)
		return -1;
	xmlrpc_env_init(&env);
	xmlrpc_decompose_value(&env, res, "{s:b,s:i,s:i,*}", "ok", &ok, "heartbeat_interval", &hb,
	    "expire_after", &ex);
	xmlrpc_DECREF(res);
	if (env.fault_occurred || !ok || hb <= 0 || ex <= 0) {
		errbuf_set(err, errlen, "%s slot.register: unexpected answer%s%s", url,
		    env.fault_occurred ? ": " : "", env.fault_occurred ? env.fault_string : "");
		xmlrpc_env_clean(&env);
		return -1;
	}
	xmlrpc_env_clean(&env);
	if (heartbeat_s)
		*heartbeat_s = (unsigned)hb;
	if (expire_s)
		*expire_s = (unsigned)ex;
	return 0;
}

int
dirc_heartbeat(struct dirclient *c, const char *url, const struct endpoint *relay, int *fault,
    char *err, size_t errlen)
{
	char r[EP_STRLEN];

	ep_fmt(relay, r);
	return checked_call(c, url, "slot.heartbeat", r, NULL, NULL, fault, err, errlen,
	    "{s:s}", "relay", r);
}

int
dirc_report(struct dirclient *c, const char *url, const struct endpoint *relay,
    const struct dirc_rtt *rtts, size_t n, int *fault, char *err, size_t errlen)
{
	char r[EP_STRLEN], p[EP_STRLEN];
	size_t cap = EP_STRLEN + 2 + n * (EP_STRLEN + 12), len;
	char *body = malloc(cap);
	xmlrpc_env env;
	xmlrpc_value *arr, *e;
	int rc = -1;

	if (body == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	ep_fmt(relay, r);
	len = (size_t)snprintf(body, cap, "%s\n", r);
	xmlrpc_env_init(&env);
	arr = xmlrpc_array_new(&env);
	for (size_t i = 0; i < n && !env.fault_occurred; i++) {
		ep_fmt(&rtts[i].peer, p);
		len += (size_t)snprintf(body + len, cap - len, "%s %u\n", p, rtts[i].rtt_us);
		e = xmlrpc_build_value(&env, "{s:s,s:i}", "peer", p, "rtt_us",
		    (xmlrpc_int32)(rtts[i].rtt_us > INT32_MAX ? INT32_MAX : rtts[i].rtt_us));
		if (!env.fault_occurred) {
			xmlrpc_array_append_item(&env, arr, e);
			xmlrpc_DECREF(e);
		}
	}
	if (env.fault_occurred)
		errbuf_set(err, errlen, "building the call: %s", env.fault_string);
	else
		rc = checked_call(c, url, "slot.report", body, NULL, NULL, fault, err, errlen,
		    "{s:s,s:A}", "relay", r, "rtts", arr);
	if (arr)
		xmlrpc_DECREF(arr);
	xmlrpc_env_clean(&env);
	free(body);
	return rc;
}

void
dirc_landmarks_free(struct dirc_landmarks *l)
{
	free(l->index);
	free(l->weight);
	free(l->rtt);
	memset(l, 0, sizeof(*l));
}

/* The landmarks member of a listing of nrelay relays, if any. */
static void
read_landmarks(xmlrpc_env *env, xmlrpc_value *res, size_t nrelay, struct dirc_landmarks *l)
{
	xmlrpc_value *st = NULL, *idx = NULL, *w = NULL;
	const unsigned char *rows = NULL;
	size_t len = 0;
	int ni = 0, nw = 0;

	xmlrpc_struct_find_value(env, res, "landmarks", &st);
	if (env->fault_occurred || st == NULL)
		return;
	xmlrpc_decompose_value(env, st, "{s:A,s:A,s:6,*}", "index", &idx, "weight", &w,
	    "rtt", &rows, &len);
	if (env->fault_occurred) {
		/* xmlrpc-c has released what it had decomposed, and left the
		 * pointers set. */
		idx = w = NULL;
		rows = NULL;
	}
	if (!env->fault_occurred) {
		ni = xmlrpc_array_size(env, idx);
		nw = xmlrpc_array_size(env, w);
	}
	if (!env->fault_occurred && (ni != nw || ni < 0 || ni > DIRC_MAX_LANDMARKS ||
	    len != 2 * (size_t)ni * nrelay))
		xmlrpc_faultf(env, "landmarks: %d indexes, %d weights, %zu bytes of RTTs "
		    "for %zu relays", ni, nw, len, nrelay);
	if (!env->fault_occurred && ni > 0) {
		l->index = calloc((size_t)ni, sizeof(*l->index));
		l->weight = calloc((size_t)ni, sizeof(*l->weight));
		l->rtt = malloc(len);
		if (l->index == NULL || l->weight == NULL || l->rtt == NULL)
			xmlrpc_faultf(env, "out of memory");
	}
	for (int i = 0; i < ni && !env->fault_occurred; i++) {
		xmlrpc_value *a, *b;
		int x = -1;
		double y = -1;

		xmlrpc_array_read_item(env, idx, i, &a);
		if (env->fault_occurred)
			break;
		xmlrpc_read_int(env, a, &x);
		xmlrpc_DECREF(a);
		/* Not later: xmlrpc-c calls made with a fault set still run, and
		 * b's reference was then never dropped (a leak per answer). */
		if (env->fault_occurred)
			break;
		xmlrpc_array_read_item(env, w, i, &b);
		if (env->fault_occurred)
			break;
		xmlrpc_read_double(env, b, &y);
		xmlrpc_DECREF(b);
		if (!env->fault_occurred && (x < 0 || (size_t)x >= nrelay || !(y >= 0)))
			xmlrpc_faultf(env, "landmark %d: relay %d of %zu, weight %g", i, x,
			    nrelay, y);
		l->index[i] = (uint32_t)x;
		l->weight[i] = (float)y;
	}
	if (!env->fault_occurred) {
		for (size_t i = 0; i < len / 2; i++)
			l->rtt[i] = (uint16_t)(rows[2 * i] | rows[2 * i + 1] << 8);
		l->nland = (size_t)ni;
		l->nrelay = nrelay;
	} else {
		dirc_landmarks_free(l);
	}
	free((void *)rows);
	if (idx)
		xmlrpc_DECREF(idx);
	if (w)
		xmlrpc_DECREF(w);
	xmlrpc_DECREF(st);
}


void
dirc_listing_free(struct dirc_listing *l)
{
	free(l->relay);
	dirc_landmarks_free(&l->land);
	ident_revoked_free(&l->revoked);
	free(l->text);
	memset(l, 0, sizeof(*l));
}

/* 16 hex digits, as ident_serial_hex writes them. */
static int
parse_serial(const char *s, uint64_t *out)
{
	return s == NULL ? -1 : dirp_hex64(s, out);
}

/* v (n serials, malloc'ed, taken over) sorted into l->revoked, for
 * lookups; the text keeps the order sent. */
static int
set_revoked(struct dirc_listing *l, uint64_t *v, size_t n)
{
	l->revoked.serial = NULL;
	l->revoked.n = 0;
	if (n == 0) {
		free(v);
		return 0;
	}
	qsort(v, n, sizeof(*v), cmp_u64);
	l->revoked.serial = v;
	l->revoked.n = n;
	return 0;
}

/* The directory's certificate: decoded, from the CA, role directory, valid
 * now, and revoked in neither list. */
static int
check_dir_cert(const uint8_t raw[IDENT_CERT_LEN], const uint8_t ca_pk[IDENT_PK_LEN],
    uint64_t now, const struct ident_revoked *held, const struct ident_revoked *theirs,
    struct ident_cert *out, char *err, size_t errlen)
{
	char why[256];

	if (ident_cert_verify(raw, ca_pk, IDENT_MASK(IDENT_ROLE_DIRECTORY), now, held, out,
	    why, sizeof(why)) == -1 ||
	    ident_cert_check(out, ca_pk, IDENT_MASK(IDENT_ROLE_DIRECTORY), now, theirs, why,
	    sizeof(why)) == -1) {
		errbuf_set(err, errlen, "directory certificate refused: %s", why);
		return -1;
	}
	return 0;
}

/* Checks every relay's certificate (raw[i], NULL: none) and keeps those
 * that pass, in order; l->dropped counts the others. */
static void
check_relays(struct dirc_listing *l, const uint8_t (*raw)[IDENT_CERT_LEN], const bool *has,
    const uint8_t ca_pk[IDENT_PK_LEN], uint64_t now)
{
	size_t k = 0;
	char why[256];

	for (size_t i = 0; i < l->n; i++) {
		struct dirc_relay r = l->relay[i];

		if (!has[i] || ident_cert_verify(raw[i], ca_pk, IDENT_MASK(IDENT_ROLE_RELAY), now,
		    &l->revoked, &r.cert, why, sizeof(why)) == -1) {
			l->dropped++;
			continue;
		}
		r.has_cert = true;
		l->relay[k++] = r;
	}
	l->n = k;
}

/* The parts of an answer that go into the signed text, as read. */
struct answer {
	const char **relay;		/* as sent */
	uint8_t (*cert)[IDENT_CERT_LEN];
	bool *has_cert;
	uint64_t *revoked;		/* in the order sent */
	size_t nrevoked;
	uint8_t dir_cert[IDENT_CERT_LEN];
	uint8_t sig[IDENT_SIG_LEN];
};

static void
answer_free(struct answer *a, size_t n)
{
	for (size_t i = 0; a->relay != NULL && i < n; i++)
		free((void *)a->relay[i]);
	free(a->relay);
	free(a->cert);
	free(a->has_cert);
	free(a->revoked);
}

/* An optional string member of st; *out NULL if absent. */
static void
opt_string(xmlrpc_env *env, xmlrpc_value *st, const char *name, const char **out)
{
	xmlrpc_value *v = NULL;

	*out = NULL;
	xmlrpc_struct_find_value(env, st, name, &v);
	if (env->fault_occurred || v == NULL)
		return;
	xmlrpc_read_string(env, v, out);
	xmlrpc_DECREF(v);
}

/* The directory's cert and sig members, decoded; also_there: another
 * member the signed answer must have (false: one is missing). */
static void
read_cert_sig(xmlrpc_env *env, xmlrpc_value *res, bool also_there,
    uint8_t dir_cert[IDENT_CERT_LEN], uint8_t sig_out[IDENT_SIG_LEN])
{
	const char *cert = NULL, *sig = NULL;

	opt_string(env, res, "cert", &cert);
	if (!env->fault_occurred)
		opt_string(env, res, "sig", &sig);
	if (!env->fault_occurred && (!also_there || cert == NULL || sig == NULL))
		xmlrpc_faultf(env, "the answer is not signed (a directory in shared mode, or "
		    "not slot-dird)");
	if (!env->fault_occurred && (dirp_unhex(cert, dir_cert, IDENT_CERT_LEN) == -1 ||
	    dirp_unhex(sig, sig_out, IDENT_SIG_LEN) == -1))
		xmlrpc_faultf(env, "cert or sig is not hex of the right length");
	free((void *)cert);
	free((void *)sig);
}

/* The identity-mode members: revoked, cert, sig. */
static void
read_signature(xmlrpc_env *env, xmlrpc_value *res, struct answer *a)
{
	xmlrpc_value *arr = NULL;
	int n;

	xmlrpc_struct_find_value(env, res, "revoked", &arr);
	if (!env->fault_occurred)
		read_cert_sig(env, res, arr != NULL, a->dir_cert, a->sig);
	n = env->fault_occurred ? 0 : xmlrpc_array_size(env, arr);
	if (!env->fault_occurred && (n < 0 || n > DIRC_MAX_RELAYS))
		xmlrpc_faultf(env, "%d revoked serials", n);
	if (!env->fault_occurred && n > 0 &&
	    (a->revoked = calloc((size_t)n, sizeof(*a->revoked))) == NULL)
		xmlrpc_faultf(env, "out of memory");
	for (int i = 0; i < n && !env->fault_occurred; i++) {
		xmlrpc_value *it;
		const char *v = NULL;

		xmlrpc_array_read_item(env, arr, i, &it);
		if (env->fault_occurred)
			break;
		xmlrpc_read_string(env, it, &v);
		xmlrpc_DECREF(it);
		if (!env->fault_occurred && parse_serial(v, &a->revoked[i]) == -1)
			xmlrpc_faultf(env, "revoked[%d]: not a serial", i);
		free((void *)v);
	}
	if (!env->fault_occurred)
		a->nrevoked = (size_t)n;
	if (arr)
		xmlrpc_DECREF(arr);
}

/* Rebuilds the canonical text from what was parsed and checks the
 * directory's certificate and signature over it. */
static void
verify_answer(xmlrpc_env *env, const uint8_t *ca_pk, const char *nonce, struct answer *a,
    const struct ident_revoked *held, struct dirc_listing *l)
{
	struct dirp_list_relay *r = l->n ? calloc(l->n, sizeof(*r)) : NULL;
	uint8_t *rows = NULL;
	size_t nrows = 2 * l->land.nland * l->land.nrelay;
	uint64_t *sorted = NULL;
	char why[512];

	if ((l->n && r == NULL) || (nrows && (rows = malloc(nrows)) == NULL) ||
	    (a->nrevoked && (sorted = malloc(a->nrevoked * sizeof(*sorted))) == NULL)) {
		xmlrpc_faultf(env, "out of memory");
		goto out;
	}
	if (a->nrevoked)
		memcpy(sorted, a->revoked, a->nrevoked * sizeof(*sorted));
	set_revoked(l, sorted, a->nrevoked);
	sorted = NULL;
	if (check_dir_cert(a->dir_cert, ca_pk, (uint64_t)time(NULL), held, &l->revoked,
	    &l->dir, why, sizeof(why)) == -1) {
		xmlrpc_faultf(env, "%s", why);
		goto out;
	}
	for (size_t i = 0; i < l->n; i++)
		r[i] = (struct dirp_list_relay){ a->relay[i], l->relay[i].data_port,
		    l->relay[i].group, a->has_cert[i] ? a->cert[i] : NULL };
	/* The rows as they came: rtt[] holds them little-endian decoded. */
	for (size_t i = 0; i < nrows / 2; i++) {
		rows[2 * i] = (uint8_t)(l->land.rtt[i] & 0xff);
		rows[2 * i + 1] = (uint8_t)(l->land.rtt[i] >> 8);
	}
	struct dirp_listing dl = {
		.nonce = nonce, .version = l->version, .changed = l->changed,
		.relay = r, .nrelay = l->n,
		.land_index = l->land.index, .land_weight = l->land.weight,
		.nland = l->land.nland, .land_rtt = rows, .land_rtt_len = nrows,
		.revoked = a->revoked, .nrevoked = a->nrevoked,
	};
	if ((l->text = dirp_list_text(&dl, &l->text_len)) == NULL) {
		xmlrpc_faultf(env, "a relay or the version is not one printable word");
		goto out;
	}
	if (!dirp_list_verify(l->dir.pk, l->text, l->text_len, a->sig)) {
		xmlrpc_faultf(env, "signature does not verify with the key of directory "
		    "certificate '%s' (answer altered on the way?)", l->dir.name);
		goto out;
	}
	memcpy(l->sig, a->sig, sizeof(l->sig));
	l->is_signed = true;
out:
	free(sorted);
	free(rows);
	free(r);
}

/* dirc_fetch's reading of an answer res, the call's result as xmlrpc-c
 * parsed it (the fuzz target reaches it through dirc_list_read): ca_pk
 * NULL reads a shared-mode answer; else the identity-mode checks with the
 * call's nonce and held, as dirc_fetch describes. Returns 0 with *out, or -1
 * with the reason in err for a malformed or refused answer. */
static int
dirc_listing_read(xmlrpc_value *res, const uint8_t *ca_pk, const char *nonce, bool want_land,
    const struct ident_revoked *held, struct dirc_listing *out, char *err, size_t errlen)
{
	xmlrpc_env env;
	xmlrpc_value *arr = NULL;
	const char *ver = NULL;
	xmlrpc_bool ch = 0;
	struct answer a = { 0 };
	int count = 0;

	memset(out, 0, sizeof(*out));
	xmlrpc_env_init(&env);
	xmlrpc_decompose_value(&env, res, "{s:s,s:b,s:A,*}", "version", &ver, "changed", &ch,
	    "relays", &arr);
	if (env.fault_occurred) {
		/* As in read_landmarks: freed already, the pointers left set. */
		ver = NULL;
		arr = NULL;
	}
	if (!env.fault_occurred && (strlen(ver) == 0 || strlen(ver) >= DIRC_VERSION_MAX))
		xmlrpc_faultf(&env, "version of %zu characters", strlen(ver));
	if (!env.fault_occurred)
		count = xmlrpc_array_size(&env, arr);
	if (!env.fault_occurred && (count < 0 || count > DIRC_MAX_RELAYS))
		xmlrpc_faultf(&env, "%d relays", count);
	if (env.fault_occurred)
		count = 0;
	if (count > 0 &&
	    ((out->relay = calloc((size_t)count, sizeof(*out->relay))) == NULL ||
	    (a.relay = calloc((size_t)count, sizeof(*a.relay))) == NULL ||
	    (a.cert = calloc((size_t)count, sizeof(*a.cert))) == NULL ||
	    (a.has_cert = calloc((size_t)count, sizeof(*a.has_cert))) == NULL))
		xmlrpc_faultf(&env, "out of memory");
	for (int i = 0; i < count && !env.fault_occurred; i++) {
		struct dirc_relay *r = &out->relay[i];
		xmlrpc_value *item;
		const char *cert = NULL;
		int dp = 0, g = 0;

		xmlrpc_array_read_item(&env, arr, i, &item);
		if (env.fault_occurred)
			break;
		xmlrpc_decompose_value(&env, item, "{s:s,s:i,s:i,*}", "relay", &a.relay[i],
		    "data_port", &dp, "group", &g);
		if (env.fault_occurred)
			a.relay[i] = NULL;	/* freed already, left set */
		if (!env.fault_occurred && ca_pk != NULL)
			opt_string(&env, item, "cert", &cert);
		xmlrpc_DECREF(item);
		if (env.fault_occurred)
			break;
		if (ep_parse(a.relay[i], 0, &r->relay) == -1 || r->relay.port == 0 ||
		    dp < 1 || dp > 65535 || g < 0)
			xmlrpc_faultf(&env, "relay %d: bad entry (%s, %d, %d)", i, a.relay[i], dp,
			    g);
		else if (cert != NULL && dirp_unhex(cert, a.cert[i], IDENT_CERT_LEN) == -1)
			xmlrpc_faultf(&env, "relay %d: cert is not a certificate in hex", i);
		a.has_cert[i] = cert != NULL;
		free((void *)cert);
		r->data_port = (uint16_t)dp;
		r->group = (uint32_t)g;
	}
	if (!env.fault_occurred) {
		out->n = (size_t)count;
		out->changed = ch;
		snprintf(out->version, sizeof(out->version), "%s", ver);
	}
	/* The landmarks are signed: read them to check the signature even
	 * when the caller has no use for them. */
	if (!env.fault_occurred && ch && (want_land || ca_pk != NULL))
		read_landmarks(&env, res, (size_t)count, &out->land);
	if (!env.fault_occurred && ca_pk != NULL)
		read_signature(&env, res, &a);
	if (!env.fault_occurred && ca_pk != NULL)
		verify_answer(&env, ca_pk, nonce, &a, held, out);
	if (!env.fault_occurred && ca_pk != NULL)
		check_relays(out, (const uint8_t (*)[IDENT_CERT_LEN])a.cert, a.has_cert, ca_pk,
		    (uint64_t)time(NULL));
	if (!env.fault_occurred && !want_land)
		dirc_landmarks_free(&out->land);
	if (env.fault_occurred) {
		errbuf_set(err, errlen, "%s", env.fault_string);
		dirc_listing_free(out);
	}
	answer_free(&a, (size_t)count);
	free((void *)ver);
	if (arr)
		xmlrpc_DECREF(arr);
	int failed = env.fault_occurred;
	xmlrpc_env_clean(&env);
	return failed ? -1 : 0;
}

/* ---------------------------------------------------------------- the text read back */

/* Splits the next line of [*p, end) off (LF removed, NUL-terminated in
 * place). NULL at the end or for a line without LF. */
static char *
next_line(char **p, char *end)
{
	char *line = *p, *nl;

	if (line >= end || (nl = memchr(line, '\n', (size_t)(end - line))) == NULL)
		return NULL;
	*nl = '\0';
	*p = nl + 1;
	return line;
}

/* "key value": the value, or NULL. */
static const char *
field(const char *line, const char *key)
{
	size_t k = strlen(key);

	if (line == NULL || strncmp(line, key, k) != 0 || line[k] != ' ')
		return NULL;
	return line + k + 1;
}

static int
count_of(const char *s, size_t max, size_t *out)
{
	uint64_t v;

	if (s == NULL || dirp_dec64(s, max, &v) == -1)
		return -1;
	*out = (size_t)v;
	return 0;
}

/* The text read with what came beside it, for read_text. */
struct text_in {
	const char *nonce;		/* the call's; NULL: not checked (a cache) */
	const uint8_t *rows;		/* an answer's landmark rows */
	size_t rows_len;
	bool answer;			/* rows and landmark lines are checked */
	bool want_land;			/* and kept in out->land */
	const uint8_t *ca_pk;		/* NULL: shared mode, nothing signed */
	const struct ident_cert *dir;	/* identity mode: the signer, checked */
	uint64_t now;
};

/* "landmark <relay> <weight>" of a listing of n relays. */
static int
landmark_line(char *v, size_t n, uint32_t *index, float *weight)
{
	char *sp = v ? strchr(v, ' ') : NULL, *e;
	size_t x;
	double w;

	if (sp == NULL)
		return -1;
	*sp = '\0';
	errno = 0;
	w = strtod(sp + 1, &e);
	if (count_of(v, n ? n - 1 : 0, &x) == -1 || n == 0 || errno != 0 || e == sp + 1 ||
	    *e != '\0' || !(w >= 0) || w > 1e30)
		return -1;
	*index = (uint32_t)x;
	*weight = (float)w;
	return 0;
}

/* Reads the canonical text (dirp_list_text; its signature, if any, checked
 * already) into out, as in->... says. */
static int
read_text(const char *text, size_t len, const struct text_in *in, struct dirc_listing *out,
    char *err, size_t errlen)
{
	char *copy = NULL, *p, *end, *line;
	uint8_t (*raw)[IDENT_CERT_LEN] = NULL;
	bool *has = NULL;
	uint64_t *rev = NULL;
	size_t n = 0, nland = 0, nrev = 0;
	const char *v, *why = NULL;
	char e[512];

	memset(out, 0, sizeof(*out));
	if (memchr(text, '\0', len) != NULL || (copy = malloc(len + 1)) == NULL) {
		errbuf_set(err, errlen, "%s", copy ? "NUL byte" : "out of memory");
		return -1;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	p = copy;
	end = copy + len;
	line = next_line(&p, end);
	if (line == NULL || strcmp(line, DIRP_LIST_MAGIC) != 0) {
		why = "not a signed listing";
		goto bad;
	}
	v = field(next_line(&p, end), "nonce");
	/* The call's nonce: an old answer cannot pass for a fresh one. */
	if (v == NULL || (in->nonce != NULL && strcmp(v, in->nonce) != 0) ||
	    (v = field(next_line(&p, end), "version")) == NULL || strlen(v) == 0 ||
	    strlen(v) >= DIRC_VERSION_MAX) {
		why = "bad nonce or version line (not an answer to this call?)";
		goto bad;
	}
	snprintf(out->version, sizeof(out->version), "%s", v);
	v = field(next_line(&p, end), "changed");
	if (v == NULL || (strcmp(v, "0") != 0 && strcmp(v, "1") != 0)) {
		why = "bad changed line";
		goto bad;
	}
	out->changed = v[0] == '1';
	if (count_of(field(next_line(&p, end), "relays"), DIRC_MAX_RELAYS, &n) == -1) {
		why = "bad relays line";
		goto bad;
	}
	if (n > 0 && ((out->relay = calloc(n, sizeof(*out->relay))) == NULL ||
	    (raw = calloc(n, sizeof(*raw))) == NULL || (has = calloc(n, sizeof(*has))) == NULL)) {
		why = "out of memory";
		goto bad;
	}
	for (size_t i = 0; i < n; i++) {
		char *f[4], *save = NULL, *w;
		size_t nf = 0, dp, g;

		if ((v = field(next_line(&p, end), "relay")) == NULL) {
			why = "missing relay line";
			goto bad;
		}
		for (w = strtok_r((char *)v, " ", &save); w && nf < 4; w = strtok_r(NULL, " ", &save))
			f[nf++] = w;
		if (nf != 4 || w != NULL || ep_parse(f[0], 0, &out->relay[i].relay) == -1 ||
		    out->relay[i].relay.port == 0 || count_of(f[1], 65535, &dp) == -1 || dp == 0 ||
		    count_of(f[2], INT32_MAX, &g) == -1 ||
		    (strcmp(f[3], "-") != 0 && dirp_unhex(f[3], raw[i], IDENT_CERT_LEN) == -1)) {
			why = "bad relay line";
			goto bad;
		}
		out->relay[i].data_port = (uint16_t)dp;
		out->relay[i].group = (uint32_t)g;
		has[i] = strcmp(f[3], "-") != 0;
	}
	out->n = n;
	v = field(next_line(&p, end), "landmarks");
	char *sp = v ? strchr(v, ' ') : NULL;
	if (sp != NULL)
		*sp = '\0';
	if (sp == NULL || count_of(v, DIRC_MAX_LANDMARKS, &nland) == -1) {
		why = "bad landmarks line";
		goto bad;
	}
	if (in->answer) {
		/* The rows came beside the text: the text holds their hash. */
		uint8_t h[crypto_hash_sha256_BYTES];
		char hex[2 * sizeof(h) + 1];

		crypto_hash_sha256(h, in->rows ? in->rows : (const uint8_t *)"", in->rows_len);
		sodium_bin2hex(hex, sizeof(hex), h, sizeof(h));
		if (strcmp(sp + 1, hex) != 0 || in->rows_len != 2 * nland * n ||
		    (nland > 0 && !out->changed)) {
			why = "landmark rows of the wrong size or hash";
			goto bad;
		}
	}
	struct dirc_landmarks *l = &out->land;
	bool keep = in->answer && in->want_land && nland > 0;
	if (keep && ((l->index = calloc(nland, sizeof(*l->index))) == NULL ||
	    (l->weight = calloc(nland, sizeof(*l->weight))) == NULL ||
	    (l->rtt = malloc(in->rows_len)) == NULL)) {
		why = "out of memory";
		goto bad;
	}
	for (size_t i = 0; i < nland; i++) {
		uint32_t x = 0;
		float w = 0;

		v = field(next_line(&p, end), "landmark");
		if (v == NULL || (in->answer && landmark_line((char *)v, n, &x, &w) == -1)) {
			why = "missing or bad landmark line";
			goto bad;
		}
		if (keep) {
			l->index[i] = x;
			l->weight[i] = w;
		}
	}
	if (keep) {
		for (size_t i = 0; i < in->rows_len / 2; i++)
			l->rtt[i] = (uint16_t)(in->rows[2 * i] | in->rows[2 * i + 1] << 8);
		l->nland = nland;
		l->nrelay = n;
	}
	if (count_of(field(next_line(&p, end), "revoked"), DIRC_MAX_RELAYS, &nrev) == -1) {
		why = "bad revoked line";
		goto bad;
	}
	if (nrev > 0 && (rev = calloc(nrev, sizeof(*rev))) == NULL) {
		why = "out of memory";
		goto bad;
	}
	for (size_t i = 0; i < nrev; i++)
		if (parse_serial(field(next_line(&p, end), "serial"), &rev[i]) == -1) {
			why = "bad serial line";
			goto bad;
		}
	if (p != end) {
		why = "text after the revocation list";
		goto bad;
	}
	if (in->ca_pk == NULL) {
		/* Shared mode: nothing signed, no certificates to check. */
		free(rev);
		free(copy);
		free(raw);
		free(has);
		return 0;
	}
	set_revoked(out, rev, nrev);
	rev = NULL;
	/* The directory may have been revoked by its own list since. */
	if (ident_cert_check(in->dir, in->ca_pk, IDENT_MASK(IDENT_ROLE_DIRECTORY), in->now,
	    &out->revoked, e, sizeof(e)) == -1) {
		errbuf_set(err, errlen, "directory certificate refused: %s", e);
		goto fail;
	}
	check_relays(out, (const uint8_t (*)[IDENT_CERT_LEN])raw, has, in->ca_pk, in->now);
	memcpy(copy, text, len);
	out->text = copy;
	out->text_len = len;
	out->dir = *in->dir;
	out->is_signed = true;
	free(raw);
	free(has);
	return 0;
bad:
	errbuf_set(err, errlen, "listing text: %s", why);
fail:
	free(copy);
	free(raw);
	free(has);
	free(rev);
	dirc_listing_free(out);
	return -1;
}

/* The directory's certificate and signature over text, then read_text. */
static int
signed_text(const char *text, size_t len, const uint8_t cert[IDENT_CERT_LEN],
    const uint8_t sig[IDENT_SIG_LEN], const struct ident_revoked *held, struct text_in *in,
    struct dirc_listing *out, char *err, size_t errlen)
{
	struct ident_cert dir;

	memset(out, 0, sizeof(*out));
	/* The signature first: what follows reads only what the directory
	 * wrote. The revocation list inside is checked by read_text. */
	if (check_dir_cert(cert, in->ca_pk, in->now, held, NULL, &dir, err, errlen) == -1)
		return -1;
	if (!dirp_list_verify(dir.pk, text, len, sig)) {
		errbuf_set(err, errlen, "signature does not verify with the key of directory "
		    "certificate '%s' (altered?)", dir.name);
		return -1;
	}
	in->dir = &dir;
	if (read_text(text, len, in, out, err, errlen) == -1)
		return -1;
	memcpy(out->sig, sig, IDENT_SIG_LEN);
	return 0;
}

int
dirc_listing_from_text(const char *text, size_t len, const uint8_t cert[IDENT_CERT_LEN],
    const uint8_t sig[IDENT_SIG_LEN], const uint8_t ca_pk[IDENT_PK_LEN], uint64_t now,
    const struct ident_revoked *held, struct dirc_listing *out, char *err, size_t errlen)
{
	struct text_in in = { .ca_pk = ca_pk, .now = now };

	return signed_text(text, len, cert, sig, held, &in, out, err, errlen);
}

/* An optional base64 member of st: *out malloc'ed (NULL, 0 if absent). */
static void
opt_base64(xmlrpc_env *env, xmlrpc_value *st, const char *name, const unsigned char **out,
    size_t *len)
{
	xmlrpc_value *v = NULL;

	*out = NULL;
	*len = 0;
	xmlrpc_struct_find_value(env, st, name, &v);
	if (env->fault_occurred || v == NULL)
		return;
	xmlrpc_read_base64(env, v, len, out);
	if (env->fault_occurred) {
		*out = NULL;
		*len = 0;
	}
	xmlrpc_DECREF(v);
}

/* A slot.list answer in its text form (docs/directory.md): text, the
 * landmark rows beside it, and in identity mode the directory's cert and
 * sig over the text. As dirc_listing_read otherwise. */
static int
text_listing_read(xmlrpc_value *res, const uint8_t *ca_pk, const char *nonce, bool want_land,
    const struct ident_revoked *held, struct dirc_listing *out, char *err, size_t errlen)
{
	xmlrpc_env env;
	const unsigned char *text = NULL, *rows = NULL;
	uint8_t dcert[IDENT_CERT_LEN], dsig[IDENT_SIG_LEN];
	size_t tlen = 0, rlen = 0;
	int rc = -1;
	struct text_in in = {
		.nonce = nonce, .answer = true, .want_land = want_land, .ca_pk = ca_pk,
		.now = (uint64_t)time(NULL),
	};

	memset(out, 0, sizeof(*out));
	xmlrpc_env_init(&env);
	opt_base64(&env, res, "text", &text, &tlen);
	if (!env.fault_occurred)
		opt_base64(&env, res, "rtt", &rows, &rlen);
	if (!env.fault_occurred && ca_pk != NULL)
		read_cert_sig(&env, res, true, dcert, dsig);
	in.rows = rows;
	in.rows_len = rlen;
	if (env.fault_occurred)
		errbuf_set(err, errlen, "%s", env.fault_string);
	else if (text == NULL)
		errbuf_set(err, errlen, "text is missing");
	else if (ca_pk != NULL)
		rc = signed_text((const char *)text, tlen, dcert, dsig, held, &in, out, err,
		    errlen);
	else
		rc = read_text((const char *)text, tlen, &in, out, err, errlen);
	free((void *)text);
	free((void *)rows);
	xmlrpc_env_clean(&env);
	return rc;
}

/* Whether res is a listing in its text form. */
static bool
is_text(xmlrpc_value *res)
{
	xmlrpc_env env;
	xmlrpc_value *v = NULL;

	xmlrpc_env_init(&env);
	if (xmlrpc_value_type(res) == XMLRPC_TYPE_STRUCT)
		xmlrpc_struct_find_value(&env, res, "text", &v);
	xmlrpc_env_clean(&env);
	if (v)
		xmlrpc_DECREF(v);
	return v != NULL;
}

int
dirc_list_read(xmlrpc_value *res, char new_version[DIRC_VERSION_MAX], bool *changed,
    struct dirc_relay **out, size_t *n, struct dirc_landmarks *land, char *err, size_t errlen)
{
	struct dirc_listing l;

	*out = NULL;
	*n = 0;
	if (land != NULL)
		memset(land, 0, sizeof(*land));
	if ((is_text(res) ? text_listing_read : dirc_listing_read)(res, NULL, NULL, land != NULL,
	    NULL, &l, err, errlen) == -1)
		return -1;
	snprintf(new_version, DIRC_VERSION_MAX, "%s", l.version);
	*changed = l.changed;
	*out = l.relay;
	*n = l.n;
	l.relay = NULL;
	if (land != NULL) {
		*land = l.land;
		memset(&l.land, 0, sizeof(l.land));
	}
	dirc_listing_free(&l);
	return 0;
}

int
dirc_fetch(struct dirclient *c, const char *url, const char *version, bool want_land,
    const struct ident_revoked *held, struct dirc_listing *out, int *fault, char *err,
    size_t errlen)
{
	char nonce[DIRP_NONCE_HEX + 1], why[512];
	xmlrpc_value *res;
	int rc;

	memset(out, 0, sizeof(*out));
	/* format text: the listing as one signed text (not a tree of XML
	 * elements, see call()); a directory that does not know it sends the
	 * tree, read as before. */
	if (checked_call(c, url, "slot.list", version, nonce, &res, fault, err, errlen,
	    "{s:s,s:s}", "version", version, "format", "text") == -1)
		return -1;
	rc = (is_text(res) ? text_listing_read : dirc_listing_read)(res,
	    c->ident_mode ? c->id.ca_pk : NULL, nonce, want_land, held, out, why, sizeof(why));
	if (rc == -1) {
		errbuf_set(err, errlen, "%s slot.list: answer refused: %s", url, why);
		if (fault)
			*fault = DIRC_REFUSED;
	}
	xmlrpc_DECREF(res);
	return rc;
}
