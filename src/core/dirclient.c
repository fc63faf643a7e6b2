/* The directory's client: xmlrpc-c builds the calls and parses the
 * answers; libcurl carries them, so that an answer is capped while it
 * arrives and checked (slot/xmlguard.h) before xmlrpc-c's parser, which
 * expands entities, sees a byte of it. */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <xmlrpc-c/base.h>

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
	struct auth_key key;
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
	free(c);
}

void
dirc_set_key(struct dirclient *c, const struct auth_key *key)
{
	c->key = *key;
}

/* Adds ts, nonce and mac over body to the call's struct. */
static void
sign(struct dirclient *c, xmlrpc_env *env, xmlrpc_value *s, const char *method,
    const char *body)
{
	char ts[24], nonce[DIRP_NONCE_HEX + 1], mac[DIRP_MAC_HEX + 1];
	xmlrpc_value *v;

	dirp_stamp(ts, nonce);
	if (dirp_mac(&c->key, method, ts, nonce, body, mac) == -1) {
		xmlrpc_faultf(env, "call too large to sign");
		return;
	}
	const char *k[3] = { "ts", "nonce", "mac" }, *val[3] = { ts, nonce, mac };
	for (int i = 0; i < 3 && !env->fault_occurred; i++) {
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

static xmlrpc_value *
new_struct(xmlrpc_env *env, const char *relay)
{
	xmlrpc_value *s = xmlrpc_struct_new(env), *v;

	if (env->fault_occurred || relay == NULL)
		return s;
	v = xmlrpc_string_new(env, relay);
	if (!env->fault_occurred) {
		xmlrpc_struct_set_value(env, s, "relay", v);
		xmlrpc_DECREF(v);
	}
	return s;
}

static int
env_failed(xmlrpc_env *env, xmlrpc_value *s, char *err, size_t errlen)
{
	if (!env->fault_occurred)
		return 0;
	errbuf_set(err, errlen, "building the call: %s", env->fault_string);
	if (s)
		xmlrpc_DECREF(s);
	xmlrpc_env_clean(env);
	return -1;
}

int
dirc_register(struct dirclient *c, const char *url, const struct endpoint *relay,
    uint16_t data_port, unsigned *heartbeat_s, unsigned *expire_s, int *fault, char *err,
    size_t errlen)
{
	char r[EP_STRLEN], body[EP_STRLEN + 16];
	xmlrpc_env env;
	xmlrpc_value *s, *v, *res;
	xmlrpc_bool ok = 0;
	int hb = 0, ex = 0;

	ep_fmt(relay, r);
	snprintf(body, sizeof(body), "%s\n%u", r, data_port);
	xmlrpc_env_init(&env);
	s = new_struct(&env, r);
	if (!env.fault_occurred) {
		v = xmlrpc_int_new(&env, data_port);
		if (!env.fault_occurred) {
			xmlrpc_struct_set_value(&env, s, "data_port", v);
			xmlrpc_DECREF(v);
		}
	}
	if (!env.fault_occurred)
		sign(c, &env, s, "slot.register", body);
	if (env_failed(&env, s, err, errlen))
		return -1;
	res = call(c, url, "slot.register", s, fault, err, errlen);
	xmlrpc_DECREF(s);
	if (res == NULL)
		return -1;
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
	xmlrpc_env env;
	xmlrpc_value *s, *res;

	ep_fmt(relay, r);
	xmlrpc_env_init(&env);
	s = new_struct(&env, r);
	if (!env.fault_occurred)
		sign(c, &env, s, "slot.heartbeat", r);
	if (env_failed(&env, s, err, errlen))
		return -1;
	res = call(c, url, "slot.heartbeat", s, fault, err, errlen);
	xmlrpc_DECREF(s);
	xmlrpc_env_clean(&env);
	if (res == NULL)
		return -1;
	xmlrpc_DECREF(res);
	return 0;
}

int
dirc_report(struct dirclient *c, const char *url, const struct endpoint *relay,
    const struct dirc_rtt *rtts, size_t n, int *fault, char *err, size_t errlen)
{
	char r[EP_STRLEN], p[EP_STRLEN];
	size_t cap = EP_STRLEN + 2 + n * (EP_STRLEN + 12), len;
	char *body = malloc(cap);
	xmlrpc_env env;
	xmlrpc_value *s, *arr = NULL, *e, *res;

	if (body == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	ep_fmt(relay, r);
	len = (size_t)snprintf(body, cap, "%s\n", r);
	xmlrpc_env_init(&env);
	s = new_struct(&env, r);
	if (!env.fault_occurred)
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
	if (!env.fault_occurred)
		xmlrpc_struct_set_value(&env, s, "rtts", arr);
	if (arr)
		xmlrpc_DECREF(arr);
	if (!env.fault_occurred)
		sign(c, &env, s, "slot.report", body);
	free(body);
	if (env_failed(&env, s, err, errlen))
		return -1;
	res = call(c, url, "slot.report", s, fault, err, errlen);
	xmlrpc_DECREF(s);
	xmlrpc_env_clean(&env);
	if (res == NULL)
		return -1;
	xmlrpc_DECREF(res);
	return 0;
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

int
dirc_list_read(xmlrpc_value *res, char new_version[DIRC_VERSION_MAX], bool *changed,
    struct dirc_relay **out, size_t *n, struct dirc_landmarks *land, char *err, size_t errlen)
{
	xmlrpc_env env;
	xmlrpc_value *arr = NULL;
	const char *ver = NULL;
	xmlrpc_bool ch = 0;
	struct dirc_relay *list = NULL;
	int count = 0;

	*out = NULL;
	*n = 0;
	if (land != NULL)
		memset(land, 0, sizeof(*land));
	xmlrpc_env_init(&env);
	xmlrpc_decompose_value(&env, res, "{s:s,s:b,s:A,*}", "version", &ver, "changed", &ch,
	    "relays", &arr);
	if (env.fault_occurred) {
		/* As in read_landmarks: freed already, the pointers left set
		 * (an answer without "relays" was a double free). */
		ver = NULL;
		arr = NULL;
	}
	if (!env.fault_occurred && (strlen(ver) == 0 || strlen(ver) >= DIRC_VERSION_MAX))
		xmlrpc_faultf(&env, "version of %zu characters", strlen(ver));
	if (!env.fault_occurred)
		count = xmlrpc_array_size(&env, arr);
	if (!env.fault_occurred && (count < 0 || count > DIRC_MAX_RELAYS))
		xmlrpc_faultf(&env, "%d relays", count);
	if (!env.fault_occurred && count > 0 &&
	    (list = calloc((size_t)count, sizeof(*list))) == NULL)
		xmlrpc_faultf(&env, "out of memory");
	for (int i = 0; i < count && !env.fault_occurred; i++) {
		xmlrpc_value *item;
		const char *relay = NULL;
		int dp = 0, g = 0;

		xmlrpc_array_read_item(&env, arr, i, &item);
		if (env.fault_occurred)
			break;
		xmlrpc_decompose_value(&env, item, "{s:s,s:i,s:i,*}", "relay", &relay,
		    "data_port", &dp, "group", &g);
		xmlrpc_DECREF(item);
		if (env.fault_occurred)
			break;
		if (ep_parse(relay, 0, &list[i].relay) == -1 || list[i].relay.port == 0 ||
		    dp < 1 || dp > 65535 || g < 0)
			xmlrpc_faultf(&env, "relay %d: bad entry (%s, %d, %d)", i, relay, dp, g);
		list[i].data_port = (uint16_t)dp;
		list[i].group = (uint32_t)g;
		free((void *)relay);
	}
	if (!env.fault_occurred && land != NULL && ch)
		read_landmarks(&env, res, (size_t)count, land);
	if (env.fault_occurred) {
		errbuf_set(err, errlen, "%s", env.fault_string);
		free(list);
		list = NULL;
	} else {
		snprintf(new_version, DIRC_VERSION_MAX, "%s", ver);
		*changed = ch;
		*out = list;
		*n = (size_t)count;
	}
	free((void *)ver);
	if (arr)
		xmlrpc_DECREF(arr);
	int failed = env.fault_occurred;
	xmlrpc_env_clean(&env);
	return failed ? -1 : 0;
}

int
dirc_list(struct dirclient *c, const char *url, const char *version,
    char new_version[DIRC_VERSION_MAX], bool *changed, struct dirc_relay **out, size_t *n,
    struct dirc_landmarks *land, int *fault, char *err, size_t errlen)
{
	xmlrpc_env env;
	xmlrpc_value *s, *v, *res;
	char why[512];
	int rc;

	*out = NULL;
	*n = 0;
	if (land != NULL)
		memset(land, 0, sizeof(*land));
	xmlrpc_env_init(&env);
	s = new_struct(&env, NULL);
	if (!env.fault_occurred) {
		v = xmlrpc_string_new(&env, version);
		if (!env.fault_occurred) {
			xmlrpc_struct_set_value(&env, s, "version", v);
			xmlrpc_DECREF(v);
		}
	}
	if (!env.fault_occurred)
		sign(c, &env, s, "slot.list", version);
	if (env_failed(&env, s, err, errlen))
		return -1;
	xmlrpc_env_clean(&env);
	res = call(c, url, "slot.list", s, fault, err, errlen);
	xmlrpc_DECREF(s);
	if (res == NULL)
		return -1;
	rc = dirc_list_read(res, new_version, changed, out, n, land, why, sizeof(why));
	if (rc == -1)
		errbuf_set(err, errlen, "%s slot.list: unexpected answer: %s", url, why);
	xmlrpc_DECREF(res);
	return rc;
}
