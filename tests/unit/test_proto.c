/*
 * Wire codec tests. The byte-exact expectations come from
 * tests/unit/gen_proto_vectors.py (an independent Python encoder) through
 * proto_vectors.h; the same bytes are printed in docs/protocol.md, and
 * doc_matches_vectors makes sure the two copies never drift apart.
 */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/proto.h"

#include "proto_vectors.h"

#define NVEC (sizeof(proto_vectors) / sizeof(proto_vectors[0]))
#define TS 1700000000000000ULL
#define NONCE 0x0123456789abcd00ULL

static struct auth_key key;
/* Identity mode: the vectors' client and relay, and what each knows of the
 * other (its public key and their pair key, derived here by ident.c). */
static struct ident id_client, id_relay;
static struct proto_pair at_relay, at_client;

static struct endpoint
ep4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	struct endpoint e;

	memset(&e, 0, sizeof(e));
	e.addr.family = AF_INET;
	e.addr.bytes[0] = a;
	e.addr.bytes[1] = b;
	e.addr.bytes[2] = c;
	e.addr.bytes[3] = d;
	e.port = port;
	return e;
}

/* groups: the eight 16-bit groups of the address. */
static struct endpoint
ep6(const uint16_t g[8], uint16_t port)
{
	struct endpoint e;
	int i;

	memset(&e, 0, sizeof(e));
	e.addr.family = AF_INET6;
	for (i = 0; i < 8; i++) {
		e.addr.bytes[2 * i] = (uint8_t)(g[i] >> 8);
		e.addr.bytes[2 * i + 1] = (uint8_t)g[i];
	}
	e.port = port;
	return e;
}

static struct proto_msg
msg(uint8_t type, uint8_t nonce_lo, uint32_t id)
{
	struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.ts_us = TS;
	m.nonce = NONCE | nonce_lo;
	m.id = id;
	return m;
}

static const uint16_t target6[8] = { 0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10 };
static const uint16_t client6[8] = { 0x2001, 0xdb8, 1, 0, 0, 0, 0, 7 };
static const uint16_t server6[8] = { 0x2001, 0xdb8, 2, 0, 0, 0, 0xbeef, 5 };
static const uint16_t nat6[8] = { 0x2001, 0xdb8, 1, 0, 0, 0, 0, 0x77 };
static const uint8_t token[PROTO_TOKEN_LEN] = { 0x5a, 0x17, 0xc0, 0xff, 0xee, 0x0b, 0x5e, 0x01 };
static const uint16_t relay2_6[8] = { 0x2001, 0xdb8, 3, 0, 0, 0, 0, 0x20 };
static const uint16_t relay3_6[8] = { 0x2001, 0xdb8, 3, 0, 0, 0, 0, 0x30 };

/* A chain request: hop i is relay 2 or 3 at 192.0.2.20/30 (v4) or
 * 2001:db8:3::20/30 (v6), control port 7600, data port 7601. */
static void
chain_hop(struct proto_msg *m, unsigned i, int v6, unsigned relay)
{
	if (v6) {
		m->u.chain.hop_ctl[i] = ep6(relay == 2 ? relay2_6 : relay3_6, 7600);
		m->u.chain.hop_data[i] = ep6(relay == 2 ? relay2_6 : relay3_6, 7601);
	} else {
		m->u.chain.hop_ctl[i] = ep4(192, 0, 2, (uint8_t)(relay * 10), 7600);
		m->u.chain.hop_data[i] = ep4(192, 0, 2, (uint8_t)(relay * 10), 7601);
	}
}

/* The messages behind the valid vectors, written from the vector
 * descriptions, not from the generator. Returns -1 for an unknown name. */
static int
vector_msg(const char *name, struct proto_msg *m)
{
	if (strcmp(name, "probe_request_v4") == 0 ||
	    strcmp(name, "flags_ignored") == 0) {
		*m = msg(PROTO_PROBE_REQUEST, 0x01, 1);
		m->u.probe_req.target = ep4(203, 0, 113, 5, 443);
	} else if (strcmp(name, "probe_request_v6") == 0) {
		*m = msg(PROTO_PROBE_REQUEST, 0x02, 2);
		m->u.probe_req.target = ep6(target6, 8080);
	} else if (strcmp(name, "probe_reply_cached") == 0) {
		*m = msg(PROTO_PROBE_REPLY, 0x03, 1);
		m->u.probe_reply.status = PROBE_ST_OK;
		m->u.probe_reply.flags = PROBE_FLAG_CACHED;
		m->u.probe_reply.rtt_us = 23456;
		m->u.probe_reply.hold_us = 120;
		m->u.probe_reply.target = ep4(203, 0, 113, 5, 443);
	} else if (strcmp(name, "probe_reply_timeout_v6") == 0) {
		*m = msg(PROTO_PROBE_REPLY, 0x04, 2);
		m->u.probe_reply.status = PROBE_ST_TIMEOUT;
		m->u.probe_reply.hold_us = 2000150;
		m->u.probe_reply.target = ep6(target6, 8080);
	} else if (strcmp(name, "pipe_establish_v4") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH, 0x05, 7);
		m->u.establish.client = ep4(198, 51, 100, 7, 40000);
		m->u.establish.server = ep4(203, 0, 113, 5, 443);
	} else if (strcmp(name, "pipe_establish_v6") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH, 0x06, 8);
		m->u.establish.client = ep6(client6, 51000);
		m->u.establish.server = ep6(server6, 443);
	} else if (strcmp(name, "pipe_ok") == 0) {
		*m = msg(PROTO_PIPE_OK, 0x07, 7);
		m->u.ok.connect_us = 48213;
		m->u.ok.pending_ms = 10000;
	} else if (strcmp(name, "pipe_fail") == 0) {
		*m = msg(PROTO_PIPE_FAIL, 0x08, 8);
		m->u.fail.reason = FAIL_TIMEOUT;
		m->u.fail.detail = 110;
	} else if (strcmp(name, "keepalive") == 0) {
		*m = msg(PROTO_KEEPALIVE, 0x09, 9);
	} else if (strcmp(name, "keepalive_ack") == 0 ||
	    strcmp(name, "keepalive_ack_flags_unknown") == 0) {
		*m = msg(PROTO_KEEPALIVE_ACK, 0x0a, 9);
	} else if (strcmp(name, "keepalive_observe") == 0 ||
	    strcmp(name, "keepalive_flags_unknown") == 0) {
		*m = msg(PROTO_KEEPALIVE, 0x0c, 10);
		m->flags = PROTO_FLAG_OBSERVE;
	} else if (strcmp(name, "observed_v4") == 0) {
		*m = msg(PROTO_OBSERVED, 0x0d, 10);
		m->u.observed.addr = ep4(198, 51, 100, 77, 61234);
	} else if (strcmp(name, "keepalive_chains") == 0) {
		*m = msg(PROTO_KEEPALIVE, 0x16, 17);
		m->flags = PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS;
	} else if (strcmp(name, "keepalive_ack_chains") == 0) {
		*m = msg(PROTO_KEEPALIVE_ACK, 0x17, 17);
		m->flags = PROTO_FLAG_CHAINS;
	} else if (strcmp(name, "observed_chains") == 0) {
		*m = msg(PROTO_OBSERVED, 0x18, 17);
		m->flags = PROTO_FLAG_CHAINS;
		m->u.observed.addr = ep4(198, 51, 100, 77, 61234);
	} else if (strcmp(name, "observed_v6") == 0) {
		*m = msg(PROTO_OBSERVED, 0x0e, 10);
		m->u.observed.addr = ep6(nat6, 61234);
	} else if (strcmp(name, "pipe_establish_token_v4") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_TOKEN, 0x0f, 11);
		m->u.establish.client = ep4(192, 168, 1, 10, 40000);
		m->u.establish.server = ep4(203, 0, 113, 5, 443);
		memcpy(m->u.establish.token, token, PROTO_TOKEN_LEN);
	} else if (strcmp(name, "pipe_establish_token_v6") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_TOKEN, 0x10, 12);
		m->u.establish.client = ep6(client6, 51000);
		m->u.establish.server = ep6(server6, 443);
		memcpy(m->u.establish.token, token, PROTO_TOKEN_LEN);
	} else if (strcmp(name, "pipe_establish_chain2_v4") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_CHAIN, 0x11, 13);
		m->u.chain.client = ep4(198, 51, 100, 7, 40000);
		m->u.chain.server = ep4(203, 0, 113, 5, 443);
		m->u.chain.hops = 1;
		chain_hop(m, 0, 0, 2);
	} else if (strcmp(name, "pipe_establish_chain3_v4_token") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_CHAIN, 0x12, 14);
		m->u.chain.client = ep4(192, 168, 1, 10, 40000);
		m->u.chain.server = ep4(203, 0, 113, 5, 443);
		memcpy(m->u.chain.token, token, PROTO_TOKEN_LEN);
		m->u.chain.hops = 2;
		chain_hop(m, 0, 0, 2);
		chain_hop(m, 1, 0, 3);
	} else if (strcmp(name, "pipe_establish_chain3_v6") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_CHAIN, 0x13, 15);
		m->u.chain.client = ep6(client6, 51000);
		m->u.chain.server = ep6(server6, 443);
		m->u.chain.hops = 2;
		chain_hop(m, 0, 1, 2);
		chain_hop(m, 1, 1, 3);
	} else if (strcmp(name, "pipe_establish_chain2_v6_token") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH_CHAIN, 0x14, 16);
		m->u.chain.client = ep6(client6, 51000);
		m->u.chain.server = ep6(server6, 443);
		memcpy(m->u.chain.token, token, PROTO_TOKEN_LEN);
		m->u.chain.hops = 1;
		chain_hop(m, 0, 1, 2);
	} else if (strcmp(name, "pipe_fail_next_hop") == 0) {
		*m = msg(PROTO_PIPE_FAIL, 0x15, 13);
		m->u.fail.reason = FAIL_NEXT_HOP;
		m->u.fail.detail = 111;
	} else if (strcmp(name, "error_replay") == 0) {
		*m = msg(PROTO_ERROR, 0x0b, 7);
		m->u.error.code = ERR_REPLAY;
	} else if (strcmp(name, "hello_client") == 0) {
		*m = msg(PROTO_HELLO, 0x41, 0);
		memcpy(m->sender, id_client.cert.pk, PROTO_PK_LEN);
		m->u.hello.cert = id_client.cert;
	} else if (strcmp(name, "hello_relay") == 0) {
		*m = msg(PROTO_HELLO, 0x42, 0);
		memcpy(m->sender, id_relay.cert.pk, PROTO_PK_LEN);
		m->u.hello.cert = id_relay.cert;
	} else if (strcmp(name, "pipe_establish_identity") == 0) {
		*m = msg(PROTO_PIPE_ESTABLISH, 0x43, 7);
		memcpy(m->sender, id_client.cert.pk, PROTO_PK_LEN);
		m->u.establish.client = ep4(198, 51, 100, 7, 40000);
		m->u.establish.server = ep4(203, 0, 113, 5, 443);
	} else if (strcmp(name, "pipe_ok_identity") == 0) {
		*m = msg(PROTO_PIPE_OK, 0x44, 7);
		memcpy(m->sender, id_relay.cert.pk, PROTO_PK_LEN);
		m->u.ok.connect_us = 48213;
		m->u.ok.pending_ms = 10000;
	} else
		return -1;
	return 0;
}

static int
ep_same(const struct endpoint *a, const struct endpoint *b)
{
	return a->addr.family == b->addr.family && a->port == b->port &&
	    memcmp(a->addr.bytes, b->addr.bytes, 16) == 0;
}

/* Field by field: struct padding is not guaranteed to be zero. */
static int
msg_same(const struct proto_msg *a, const struct proto_msg *b)
{
	if (a->type != b->type || a->flags != b->flags || a->ts_us != b->ts_us ||
	    a->nonce != b->nonce || a->id != b->id ||
	    memcmp(a->sender, b->sender, PROTO_PK_LEN) != 0)
		return 0;
	switch (a->type) {
	case PROTO_HELLO:
		return memcmp(a->u.hello.cert.raw, b->u.hello.cert.raw, IDENT_CERT_LEN) == 0 &&
		    a->u.hello.cert.serial == b->u.hello.cert.serial &&
		    a->u.hello.cert.role == b->u.hello.cert.role &&
		    strcmp(a->u.hello.cert.name, b->u.hello.cert.name) == 0;
	case PROTO_PROBE_REQUEST:
		return ep_same(&a->u.probe_req.target, &b->u.probe_req.target);
	case PROTO_PROBE_REPLY:
		return a->u.probe_reply.status == b->u.probe_reply.status &&
		    a->u.probe_reply.flags == b->u.probe_reply.flags &&
		    a->u.probe_reply.rtt_us == b->u.probe_reply.rtt_us &&
		    a->u.probe_reply.hold_us == b->u.probe_reply.hold_us &&
		    ep_same(&a->u.probe_reply.target, &b->u.probe_reply.target);
	case PROTO_PIPE_ESTABLISH:
		return ep_same(&a->u.establish.client, &b->u.establish.client) &&
		    ep_same(&a->u.establish.server, &b->u.establish.server);
	case PROTO_PIPE_ESTABLISH_TOKEN:
		return ep_same(&a->u.establish.client, &b->u.establish.client) &&
		    ep_same(&a->u.establish.server, &b->u.establish.server) &&
		    memcmp(a->u.establish.token, b->u.establish.token, PROTO_TOKEN_LEN) == 0;
	case PROTO_PIPE_ESTABLISH_CHAIN:
		return ep_same(&a->u.chain.client, &b->u.chain.client) &&
		    ep_same(&a->u.chain.server, &b->u.chain.server) &&
		    memcmp(a->u.chain.token, b->u.chain.token, PROTO_TOKEN_LEN) == 0 &&
		    a->u.chain.hops == b->u.chain.hops &&
		    ep_same(&a->u.chain.hop_ctl[0], &b->u.chain.hop_ctl[0]) &&
		    ep_same(&a->u.chain.hop_data[0], &b->u.chain.hop_data[0]) &&
		    ep_same(&a->u.chain.hop_ctl[1], &b->u.chain.hop_ctl[1]) &&
		    ep_same(&a->u.chain.hop_data[1], &b->u.chain.hop_data[1]);
	case PROTO_OBSERVED:
		return ep_same(&a->u.observed.addr, &b->u.observed.addr);
	case PROTO_PIPE_OK:
		return a->u.ok.connect_us == b->u.ok.connect_us &&
		    a->u.ok.pending_ms == b->u.ok.pending_ms;
	case PROTO_PIPE_FAIL:
		return a->u.fail.reason == b->u.fail.reason &&
		    a->u.fail.detail == b->u.fail.detail;
	case PROTO_KEEPALIVE:
	case PROTO_KEEPALIVE_ACK:
		return 1;
	case PROTO_ERROR:
		return a->u.error.code == b->u.error.code;
	}
	return 0;
}

static enum proto_result
dec(const uint8_t *buf, size_t len, struct proto_msg *m, size_t *used,
    enum proto_err *why)
{
	return proto_decode(buf, len, &key, m, used, why);
}

/* Decodes as the vector's receiver does. */
static enum proto_result
dec_at(enum proto_vector_at at, const uint8_t *buf, size_t len, struct proto_msg *m,
    size_t *used, enum proto_err *why)
{
	switch (at) {
	case PV_AT_RELAY:
		return proto_decode_with(buf, len, proto_key_pair, &at_relay, m, used, why);
	case PV_AT_CLIENT:
		return proto_decode_with(buf, len, proto_key_pair, &at_client, m, used, why);
	default:
		return dec(buf, len, m, used, why);
	}
}

/* Encodes as the vector's sender does. */
static int
enc_at(enum proto_vector_at at, const struct proto_msg *m, uint8_t *buf, size_t cap)
{
	if (m->type == PROTO_HELLO)
		return proto_encode_hello(m, at == PV_AT_RELAY ? &id_client : &id_relay, buf,
		    cap);
	return proto_encode(m, at == PV_SHARED ? &key : &at_relay.key, buf, cap);
}

static const struct proto_vector *
vec(const char *name)
{
	size_t i;

	for (i = 0; i < NVEC; i++)
		if (strcmp(proto_vectors[i].name, name) == 0)
			return &proto_vectors[i];
	fail_msg("no vector %s", name);
	return NULL;
}

/* Re-signs buf[0..len) in place after a test patched it. */
static void
resign(uint8_t *buf, size_t len)
{
	auth_mac(&key, buf, len - AUTH_MAC_LEN, buf + len - AUTH_MAC_LEN);
}

static int
setup(void **state)
{
	int i;

	(void)state;
	if (auth_init() == -1)
		return -1;
	for (i = 0; i < AUTH_KEY_LEN; i++)
		key.k[i] = (uint8_t)i;
	if (ident_from_parts(pv_client_seed, pv_client_cert, pv_ca_pk,
	    IDENT_MASK(IDENT_ROLE_CLIENT), PV_NOW, &id_client, NULL, 0) == -1 ||
	    ident_from_parts(pv_relay_seed, pv_relay_cert, pv_ca_pk,
	    IDENT_MASK(IDENT_ROLE_RELAY), PV_NOW, &id_relay, NULL, 0) == -1)
		return -1;
	memcpy(at_relay.pk, id_client.cert.pk, PROTO_PK_LEN);
	memcpy(at_client.pk, id_relay.cert.pk, PROTO_PK_LEN);
	if (ident_pair_key(&id_relay, at_relay.pk, &at_relay.key) == -1 ||
	    ident_pair_key(&id_client, at_client.pk, &at_client.key) == -1)
		return -1;
	return 0;
}

static void
vectors_encode(void **state)
{
	uint8_t buf[PROTO_MAX_LEN];
	struct proto_msg m;
	size_t i, n = 0;
	int len;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		if (v->result != PROTO_OK || strcmp(v->name, "flags_ignored") == 0 ||
		    strcmp(v->name, "keepalive_flags_unknown") == 0 ||
		    strcmp(v->name, "keepalive_ack_flags_unknown") == 0)
			continue;
		if (vector_msg(v->name, &m) == -1)
			fail_msg("valid vector %s has no message in the test", v->name);
		/* HELLOs too: Ed25519 signatures are deterministic. */
		len = enc_at(v->at, &m, buf, sizeof(buf));
		if (len < 0 || (size_t)len != v->len ||
		    memcmp(buf, v->bytes, v->len) != 0)
			fail_msg("%s: encoding differs from the vector", v->name);
		/* Exactly enough room is enough; one byte less is not. */
		assert_int_equal(enc_at(v->at, &m, buf, v->len), len);
		assert_int_equal(enc_at(v->at, &m, buf, v->len - 1), -1);
		n++;
	}
	/* Every type has a vector. */
	assert_true(n >= 9);
}

static void
vectors_decode(void **state)
{
	struct proto_msg m, want;
	enum proto_err why;
	enum proto_result r;
	size_t i, used;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		used = 12345;
		r = dec_at(v->at, v->bytes, v->len, &m, &used, &why);
		if (r != v->result || why != v->err)
			fail_msg("%s: got %d/%s, want %d/%s", v->name, r,
			    proto_err_str(why), v->result, proto_err_str(v->err));
		if (r != PROTO_OK) {
			assert_int_equal(used, 0);
			continue;
		}
		assert_int_equal(used, v->len);
		assert_int_equal(vector_msg(v->name, &want), 0);
		if (!msg_same(&m, &want))
			fail_msg("%s: decoded message differs", v->name);
	}
}

/* Every type of the header appears among the valid vectors. */
static void
vectors_cover_types(void **state)
{
	static const uint8_t types[] = { PROTO_PROBE_REQUEST, PROTO_PROBE_REPLY,
	    PROTO_PIPE_ESTABLISH, PROTO_PIPE_OK, PROTO_PIPE_FAIL,
	    PROTO_KEEPALIVE, PROTO_KEEPALIVE_ACK, PROTO_ERROR, PROTO_HELLO,
	    PROTO_OBSERVED, PROTO_PIPE_ESTABLISH_TOKEN, PROTO_PIPE_ESTABLISH_CHAIN };
	size_t i, j;
	int found;

	(void)state;
	for (i = 0; i < sizeof(types); i++) {
		found = 0;
		for (j = 0; j < NVEC; j++)
			if (proto_vectors[j].result == PROTO_OK &&
			    proto_vectors[j].bytes[3] == types[i])
				found = 1;
		if (!found)
			fail_msg("no vector for %s", proto_type_str(types[i]));
	}
}

/*
 * docs/protocol.md is looked for above the working directory and above the
 * test binary, so the test works from the repository root (make unit) and
 * from any build directory inside it.
 */
static FILE *
open_doc(void)
{
	char dir[4096], path[4200];
	const char *env;
	ssize_t n;
	char *p;
	FILE *f;
	int pass, up;

	if ((env = getenv("SLOT_SRCDIR")) != NULL) {
		snprintf(path, sizeof(path), "%s/docs/protocol.md", env);
		return fopen(path, "r");
	}
	for (pass = 0; pass < 2; pass++) {
		if (pass == 0) {
			if (getcwd(dir, sizeof(dir)) == NULL)
				continue;
		} else {
			if ((n = readlink("/proc/self/exe", dir, sizeof(dir) - 1)) < 0)
				continue;
			dir[n] = '\0';
			if ((p = strrchr(dir, '/')) != NULL)
				*p = '\0';
		}
		for (up = 0; up < 8; up++) {
			snprintf(path, sizeof(path), "%s/docs/protocol.md", dir);
			if ((f = fopen(path, "r")) != NULL)
				return f;
			if ((p = strrchr(dir, '/')) == NULL || p == dir)
				break;
			*p = '\0';
		}
	}
	return NULL;
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/*
 * Reads the vector "name" from the doc: after the heading "#### `name`", the
 * first fenced block; on each of its lines the leading hex token is data,
 * the rest a comment. Returns the byte count, or -1.
 */
static ssize_t
doc_vector(FILE *f, const char *name, uint8_t *out, size_t cap)
{
	char line[512], head[128];
	int state = 0, hi, lo;
	size_t n = 0;
	char *p;

	snprintf(head, sizeof(head), "#### `%s`\n", name);
	rewind(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		if (state == 0) {
			if (strcmp(line, head) == 0)
				state = 1;
		} else if (state == 1) {
			if (strncmp(line, "```", 3) == 0)
				state = 2;
			else if (strncmp(line, "####", 4) == 0)
				return -1;
		} else {
			if (strncmp(line, "```", 3) == 0)
				return (ssize_t)n;
			for (p = line; (hi = hexval(p[0])) >= 0; p += 2) {
				if ((lo = hexval(p[1])) < 0 || n == cap)
					return -1;
				out[n++] = (uint8_t)(hi << 4 | lo);
			}
			if (*p != ' ' && *p != '\n')
				return -1;
		}
	}
	return -1;
}

static void
doc_matches_vectors(void **state)
{
	uint8_t buf[PROTO_MAX_LEN];
	size_t i;
	ssize_t n;
	FILE *f;

	(void)state;
	if ((f = open_doc()) == NULL)
		fail_msg("docs/protocol.md not found (set SLOT_SRCDIR)");
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		n = doc_vector(f, v->name, buf, sizeof(buf));
		if (n < 0 || (size_t)n != v->len ||
		    memcmp(buf, v->bytes, v->len) != 0) {
			fclose(f);
			fail_msg("docs/protocol.md vector %s differs from "
			    "proto_vectors.h: rerun gen_proto_vectors.py", v->name);
		}
	}
	fclose(f);
}

/* A valid prefix is never an error, whatever its length. */
static void
truncation(void **state)
{
	struct proto_msg m;
	enum proto_err why;
	size_t i, k, used;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		if (v->result != PROTO_OK)
			continue;
		for (k = 0; k < v->len; k++) {
			used = 99;
			if (dec_at(v->at, v->bytes, k, &m, &used, &why) != PROTO_NEED_MORE)
				fail_msg("%s: prefix of %zu bytes is not NEED_MORE",
				    v->name, k);
			assert_int_equal(used, 0);
			assert_int_equal(why, PERR_NONE);
		}
	}
}

static void
expect_bad(const uint8_t *buf, size_t len, enum proto_err want)
{
	struct proto_msg m;
	enum proto_err why;
	size_t used = 99;

	assert_int_equal(dec(buf, len, &m, &used, &why), PROTO_BAD);
	assert_int_equal(why, want);
	assert_int_equal(used, 0);
}

/* Garbage is refused as soon as the byte that shows it has arrived. */
static void
early_rejection(void **state)
{
	const uint8_t *ok = vec("probe_request_v4")->bytes;
	uint8_t b[8];

	(void)state;
	expect_bad((const uint8_t *)"\x00", 1, PERR_MAGIC);
	expect_bad((const uint8_t *)"GET / HTTP/1.1\r\n", 1, PERR_MAGIC);
	expect_bad((const uint8_t *)"\x16\x03\x01", 3, PERR_MAGIC);
	expect_bad((const uint8_t *)"SX", 2, PERR_MAGIC);
	expect_bad((const uint8_t *)"SL\x00", 3, PERR_VERSION);
	expect_bad((const uint8_t *)"SL\x01", 3, PERR_VERSION);
	expect_bad((const uint8_t *)"SL\x03", 3, PERR_VERSION);
	expect_bad((const uint8_t *)"SL\xff", 3, PERR_VERSION);
	expect_bad((const uint8_t *)"SL\x02\x00", 4, PERR_TYPE);
	expect_bad((const uint8_t *)"SL\x02\x03", 4, PERR_TYPE);
	expect_bad((const uint8_t *)"SL\x02\x21", 4, PERR_TYPE);
	expect_bad((const uint8_t *)"SL\x02\xff", 4, PERR_TYPE);

	/* Length is checked with 6 bytes, before the rest has come. */
	memcpy(b, ok, 6);
	b[4] = 0xff;
	b[5] = 0xff;
	expect_bad(b, 6, PERR_LENGTH);
	b[4] = 0x02;
	b[5] = 0x01;	/* 513 */
	expect_bad(b, 6, PERR_LENGTH);
	b[4] = 0;
	b[5] = 0;
	expect_bad(b, 6, PERR_LENGTH);
	b[5] = PROTO_MIN_LEN - 1;
	expect_bad(b, 6, PERR_LENGTH);
	b[5] = 113;
	expect_bad(b, 6, PERR_LENGTH);
	b[5] = 111;
	expect_bad(b, 6, PERR_LENGTH);
}

/* Wrong magic, version, type and length on whole, signed messages. */
static void
header_fields(void **state)
{
	uint8_t b[PROTO_MAX_LEN];
	size_t i, len;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		/* resign() makes shared-mode MACs (identity_fields below). */
		if (v->result != PROTO_OK || v->at != PV_SHARED)
			continue;
		len = v->len;
		memcpy(b, v->bytes, len);
		b[0] = 'X';
		resign(b, len);
		expect_bad(b, len, PERR_MAGIC);

		memcpy(b, v->bytes, len);
		b[1] = 'l';
		resign(b, len);
		expect_bad(b, len, PERR_MAGIC);

		memcpy(b, v->bytes, len);
		b[2] = 1;
		resign(b, len);
		expect_bad(b, len, PERR_VERSION);

		memcpy(b, v->bytes, len);
		b[3] = 0x21;
		resign(b, len);
		expect_bad(b, len, PERR_TYPE);

		/* A length that does not fit the type, even if the buffer does. */
		memset(b, 0, sizeof(b));
		memcpy(b, v->bytes, len);
		b[5] = (uint8_t)(len + 4);
		resign(b, len + 4);
		expect_bad(b, len + 4, PERR_LENGTH);
	}
}

/* Any single changed byte fails; from byte 6 on only the MAC can see it. */
static void
flipped_bytes(void **state)
{
	uint8_t b[PROTO_MAX_LEN];
	enum proto_err want;
	size_t i, k;
	int bl, bit;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		if (v->result != PROTO_OK || v->at != PV_SHARED)
			continue;
		for (k = 0; k < v->len; k++) {
			for (bit = 0; bit < 8; bit++) {
				memcpy(b, v->bytes, v->len);
				b[k] ^= (uint8_t)(1 << bit);
				if (k < 2)
					want = PERR_MAGIC;
				else if (k == 2)
					want = PERR_VERSION;
				else if (k == 3) {
					bl = proto_body_len(b[3]);
					if (bl < 0)
						want = PERR_TYPE;
					else if (bl != proto_body_len(v->bytes[3]))
						want = PERR_LENGTH;
					else
						want = PERR_MAC;
				} else if (k < 6)
					want = PERR_LENGTH;
				else if (k >= 28 && k < 60)
					want = PERR_SENDER;	/* not zero */
				else
					want = PERR_MAC;
				expect_bad(b, v->len, want);
			}
		}
	}
}

static void
wrong_key(void **state)
{
	struct auth_key other = key;
	struct proto_msg m;
	enum proto_err why;
	size_t i, used;

	(void)state;
	other.k[31] ^= 0x80;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];

		if (v->result != PROTO_OK || v->at != PV_SHARED)
			continue;
		assert_int_equal(proto_decode(v->bytes, v->len, &other, &m,
		    &used, &why), PROTO_BAD);
		assert_int_equal(why, PERR_MAC);
	}
}

/* Patches byte off of vector name to val, re-signs, expects PERR_BODY. */
static void
body_bad(const char *name, size_t off, uint8_t val)
{
	const struct proto_vector *v = vec(name);
	uint8_t b[PROTO_MAX_LEN];

	memcpy(b, v->bytes, v->len);
	b[off] = val;
	resign(b, v->len);
	expect_bad(b, v->len, PERR_BODY);
}

static void
body_fields(void **state)
{
	struct proto_msg m;
	enum proto_err why;
	uint8_t b[PROTO_MAX_LEN];
	size_t used, k;
	int v;

	(void)state;
	/* Endpoint at 60 of a probe request: family, reserved, port, addr. */
	body_bad("probe_request_v4", 60, 0);
	body_bad("probe_request_v4", 60, 5);
	body_bad("probe_request_v4", 60, 255);
	body_bad("probe_request_v4", 60, 2);	/* AF_INET is not the wire value */
	body_bad("probe_request_v4", 60, 10);	/* nor AF_INET6 */
	body_bad("probe_request_v4", 61, 1);
	body_bad("probe_request_v6", 61, 0x80);
	for (k = 68; k < 80; k++)
		body_bad("probe_request_v4", k, 1);	/* IPv4 padding */

	/* Port 0 needs both bytes zero. */
	memcpy(b, vec("probe_request_v4")->bytes, 112);
	b[62] = 0;
	b[63] = 0;
	resign(b, 112);
	expect_bad(b, 112, PERR_BODY);
	b[63] = 1;	/* port 1 is fine */
	resign(b, 112);
	assert_int_equal(dec(b, 112, &m, &used, &why), PROTO_OK);
	assert_int_equal(m.u.probe_req.target.port, 1);

	/* ::ffff:a.b.c.d under family 6. */
	memcpy(b, vec("probe_request_v6")->bytes, 112);
	memset(b + 64, 0, 16);
	b[74] = 0xff;
	b[75] = 0xff;
	b[76] = 192;
	resign(b, 112);
	expect_bad(b, 112, PERR_BODY);
	b[74] = 0xfe;	/* not mapped: a plain IPv6 address */
	resign(b, 112);
	assert_int_equal(dec(b, 112, &m, &used, &why), PROTO_OK);

	/* Probe reply: status 60, flags 61, reserved 62-63, target at 72. */
	for (v = PROBE_ST_BUSY + 1; v < 256; v++)
		body_bad("probe_reply_cached", 60, (uint8_t)v);
	for (v = 1; v < 8; v++)
		body_bad("probe_reply_cached", 61, (uint8_t)(1 << v));
	body_bad("probe_reply_cached", 62, 1);
	body_bad("probe_reply_cached", 63, 1);
	body_bad("probe_reply_cached", 72, 7);
	body_bad("probe_reply_timeout_v6", 73, 1);

	/* Both endpoints of an establish are checked. */
	body_bad("pipe_establish_v4", 60, 0);
	body_bad("pipe_establish_v4", 80, 0);
	body_bad("pipe_establish_v6", 81, 1);
	memcpy(b, vec("pipe_establish_v4")->bytes, 132);
	b[82] = 0;
	b[83] = 0;
	resign(b, 132);
	expect_bad(b, 132, PERR_BODY);

	/* Pipe fail: reason 60, reserved 61-63. */
	body_bad("pipe_fail", 60, 0);
	for (v = FAIL_NEXT_HOP + 1; v < 256; v++)
		body_bad("pipe_fail", 60, (uint8_t)v);

	/* Chain: client 60, server 80, token 100 (zero allowed), hops 108,
	 * reserved 109-111, hop 1 at 112/132, hop 2 at 152/172. */
	body_bad("pipe_establish_chain2_v4", 108, 0);
	body_bad("pipe_establish_chain2_v4", 108, 3);
	body_bad("pipe_establish_chain2_v4", 108, 255);
	for (k = 109; k < 112; k++)
		body_bad("pipe_establish_chain2_v4", k, 1);
	for (k = 152; k < 192; k++)	/* hop 2 must be zero when hops = 1 */
		body_bad("pipe_establish_chain2_v4", k, 1);
	body_bad("pipe_establish_chain3_v6", 112, 5);	/* every endpoint checked */
	body_bad("pipe_establish_chain3_v6", 133, 1);
	body_bad("pipe_establish_chain3_v6", 152, 0);
	body_bad("pipe_establish_chain3_v6", 172, 0);
	body_bad("pipe_establish_chain3_v4_token", 80, 0);
	memcpy(b, vec("pipe_establish_chain3_v6")->bytes, 224);
	b[108] = 1;	/* hops 1 with hop 2 left in: refused */
	resign(b, 224);
	expect_bad(b, 224, PERR_BODY);
	memset(b + 152, 0, 40);	/* hop 2 cleared: a valid 2-relay chain */
	resign(b, 224);
	assert_int_equal(dec(b, 224, &m, &used, &why), PROTO_OK);
	assert_int_equal(m.u.chain.hops, 1);
	assert_int_equal(m.u.chain.hop_ctl[1].addr.family, 0);
	for (k = 61; k < 64; k++)
		body_bad("pipe_fail", k, 1);

	/* Error: code 60, reserved 61-63. */
	body_bad("error_replay", 60, 0);
	for (v = ERR_TYPE + 1; v < 256; v++)
		body_bad("error_replay", 60, (uint8_t)v);
	for (k = 61; k < 64; k++)
		body_bad("error_replay", k, 0x40);

	/* Every defined value is accepted. */
	memcpy(b, vec("probe_reply_cached")->bytes, 124);
	for (v = PROBE_ST_OK; v <= PROBE_ST_BUSY; v++) {
		b[60] = (uint8_t)v;
		b[61] = (uint8_t)(v & 1);
		resign(b, 124);
		assert_int_equal(dec(b, 124, &m, &used, &why), PROTO_OK);
		assert_int_equal(m.u.probe_reply.status, v);
	}
	memcpy(b, vec("pipe_fail")->bytes, 100);
	for (v = FAIL_REFUSED; v <= FAIL_NEXT_HOP; v++) {
		b[60] = (uint8_t)v;
		resign(b, 100);
		assert_int_equal(dec(b, 100, &m, &used, &why), PROTO_OK);
		assert_int_equal(m.u.fail.reason, v);
	}
	memcpy(b, vec("error_replay")->bytes, 96);
	for (v = ERR_MALFORMED; v <= ERR_TYPE; v++) {
		b[60] = (uint8_t)v;
		resign(b, 96);
		assert_int_equal(dec(b, 96, &m, &used, &why), PROTO_OK);
		assert_int_equal(m.u.error.code, v);
	}
}

/* Header flags are authenticated but otherwise ignored. */
static void
header_flags_ignored(void **state)
{
	const struct proto_vector *v = vec("probe_request_v4");
	struct proto_msg m, want;
	enum proto_err why;
	uint8_t b[112];
	size_t used;
	int f;

	(void)state;
	assert_int_equal(vector_msg("probe_request_v4", &want), 0);
	for (f = 0; f < 16; f++) {
		memcpy(b, v->bytes, 112);
		b[6] = (uint8_t)(0x80 >> (f & 7));
		b[7] = (uint8_t)(f * 17);
		resign(b, 112);
		assert_int_equal(dec(b, 112, &m, &used, &why), PROTO_OK);
		assert_true(msg_same(&m, &want));
	}
}

/* CHAINS (docs/protocol.md, "KEEPALIVE"): asked on a KEEPALIVE, claimed
 * on its answer, and nothing on any other type. An answer without the bit,
 * as every older relay sends, claims nothing; the bit where a type does not
 * define it reads as 0, as an older peer reads it. */
static void
chains_flag(void **state)
{
	static const uint8_t types[] = { PROTO_KEEPALIVE, PROTO_KEEPALIVE_ACK, PROTO_OBSERVED };
	uint8_t b[PROTO_MAX_LEN];
	struct proto_msg m, out;
	enum proto_err why;
	size_t used;
	int len;

	(void)state;
	for (size_t i = 0; i < sizeof(types); i++) {
		m = msg(types[i], 0x30, 5);
		m.u.observed.addr = ep4(198, 51, 100, 77, 61234);
		m.flags = PROTO_FLAG_CHAINS;
		assert_true((len = proto_encode(&m, &key, b, sizeof(b))) > 0);
		assert_int_equal(b[6], 0);
		assert_int_equal(b[7], PROTO_FLAG_CHAINS);
		assert_int_equal(dec(b, (size_t)len, &out, &used, &why), PROTO_OK);
		assert_int_equal(out.flags, PROTO_FLAG_CHAINS);
		assert_true(msg_same(&m, &out));
	}
	/* OBSERVE is a question: an answer cannot carry it. */
	m = msg(PROTO_KEEPALIVE_ACK, 0x31, 5);
	m.flags = PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS;
	assert_int_equal(proto_encode(&m, &key, b, sizeof(b)), -1);
	m = msg(PROTO_PIPE_FAIL, 0x32, 5);
	m.u.fail.reason = FAIL_NEXT_HOP;
	m.flags = PROTO_FLAG_CHAINS;
	assert_int_equal(proto_encode(&m, &key, b, sizeof(b)), -1);

	/* Without the bit: an older relay's answer, no chains. */
	assert_int_equal(dec(vec("keepalive_ack")->bytes, 92, &out, &used, &why), PROTO_OK);
	assert_int_equal(out.flags, 0);
	assert_int_equal(dec(vec("observed_v4")->bytes, 112, &out, &used, &why), PROTO_OK);
	assert_int_equal(out.flags, 0);

	/* The bit on a type that does not define it (PIPE_FAIL) is ignored. */
	memcpy(b, vec("pipe_fail_next_hop")->bytes, 100);
	b[7] = PROTO_FLAG_CHAINS;
	resign(b, 100);
	assert_int_equal(dec(b, 100, &out, &used, &why), PROTO_OK);
	assert_int_equal(out.flags, 0);
	assert_int_equal(out.u.fail.reason, FAIL_NEXT_HOP);
}

static void
back_to_back(void **state)
{
	const struct proto_vector *a = vec("pipe_establish_v6");
	const struct proto_vector *b = vec("keepalive");
	const struct proto_vector *c = vec("pipe_ok");
	uint8_t buf[3 * PROTO_MAX_LEN];
	struct proto_msg m;
	enum proto_err why;
	size_t n = 0, off = 0, used;

	(void)state;
	memcpy(buf + n, a->bytes, a->len);
	n += a->len;
	memcpy(buf + n, b->bytes, b->len);
	n += b->len;
	memcpy(buf + n, c->bytes, 10);	/* a third, still arriving */
	n += 10;

	assert_int_equal(dec(buf + off, n - off, &m, &used, &why), PROTO_OK);
	assert_int_equal(used, a->len);
	assert_int_equal(m.type, PROTO_PIPE_ESTABLISH);
	off += used;
	assert_int_equal(dec(buf + off, n - off, &m, &used, &why), PROTO_OK);
	assert_int_equal(used, b->len);
	assert_int_equal(m.type, PROTO_KEEPALIVE);
	off += used;
	assert_int_equal(dec(buf + off, n - off, &m, &used, &why),
	    PROTO_NEED_MORE);
	memcpy(buf + n, c->bytes + 10, c->len - 10);
	n += c->len - 10;
	assert_int_equal(dec(buf + off, n - off, &m, &used, &why), PROTO_OK);
	assert_int_equal(used, c->len);
	assert_int_equal(m.u.ok.pending_ms, 10000);

	/* Trailing garbage does not spoil the message before it. */
	memcpy(buf, b->bytes, b->len);
	memset(buf + b->len, 0xee, 40);
	assert_int_equal(dec(buf, b->len + 40, &m, &used, &why), PROTO_OK);
	assert_int_equal(used, b->len);
	expect_bad(buf + used, 40, PERR_MAGIC);
}

static void
encode_refuses(void **state)
{
	uint8_t buf[PROTO_MAX_LEN];
	struct proto_msg m, base;
	int t;

	(void)state;
	for (t = 0; t < 256; t++) {
		m = msg((uint8_t)t, 0, 1);
		m.u.probe_req.target = ep4(203, 0, 113, 5, 443);
		if (proto_body_len((uint8_t)t) < 0 || t == PROTO_HELLO)
			assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	}

	assert_int_equal(vector_msg("probe_request_v4", &base), 0);
	m = base;
	m.u.probe_req.target.addr.family = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m.u.probe_req.target.addr.family = AF_UNIX;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m.u.probe_req.target.addr.family = 4;	/* the wire value, not AF_INET */
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.probe_req.target.port = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.probe_req.target.addr.family = AF_INET6;
	memset(m.u.probe_req.target.addr.bytes, 0, 16);
	m.u.probe_req.target.addr.bytes[10] = 0xff;
	m.u.probe_req.target.addr.bytes[11] = 0xff;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	assert_int_equal(proto_encode(&base, &key, buf, 0), -1);
	assert_int_equal(proto_encode(&base, &key, buf, PROTO_HDR_LEN), -1);

	assert_int_equal(vector_msg("pipe_establish_v4", &base), 0);
	m = base;
	m.u.establish.client.port = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.establish.server.addr.family = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);

	assert_int_equal(vector_msg("probe_reply_cached", &base), 0);
	m = base;
	m.u.probe_reply.status = PROBE_ST_BUSY + 1;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.probe_reply.flags = 0x02;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.probe_reply.target.port = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);

	assert_int_equal(vector_msg("pipe_fail", &base), 0);
	m = base;
	m.u.fail.reason = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m.u.fail.reason = FAIL_NEXT_HOP + 1;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);

	/* Chain: hops 1 or 2, no hop beyond them, every endpoint valid. */
	assert_int_equal(vector_msg("pipe_establish_chain2_v4", &base), 0);
	assert_int_equal(proto_encode(&base, &key, buf, sizeof(buf)), 224);
	m = base;
	m.u.chain.hops = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m.u.chain.hops = 3;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.chain.hop_ctl[1] = base.u.chain.hop_ctl[0];
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.chain.hop_data[0].port = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m = base;
	m.u.chain.hops = 2;	/* hop 2 unset */
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);

	assert_int_equal(vector_msg("error_replay", &base), 0);
	m = base;
	m.u.error.code = 0;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
	m.u.error.code = ERR_TYPE + 1;
	assert_int_equal(proto_encode(&m, &key, buf, sizeof(buf)), -1);
}

/* IPv4 bytes beyond the first 4 are not carried (and decode as zero). */
static void
encode_ipv4_padding(void **state)
{
	uint8_t buf[PROTO_MAX_LEN], want[PROTO_MAX_LEN];
	struct proto_msg m;
	int len;

	(void)state;
	assert_int_equal(vector_msg("probe_request_v4", &m), 0);
	assert_int_equal(proto_encode(&m, &key, want, sizeof(want)), 112);
	memset(m.u.probe_req.target.addr.bytes + 4, 0xaa, 12);
	len = proto_encode(&m, &key, buf, sizeof(buf));
	assert_int_equal(len, 112);
	assert_memory_equal(buf, want, 112);
}

/* Deterministic xorshift64*, so a failure can be replayed. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

static struct endpoint
rnd_ep(void)
{
	struct endpoint e;
	uint64_t r = rnd();
	int i;

	memset(&e, 0, sizeof(e));
	e.port = (uint16_t)(r | 1);
	if (r & (1ULL << 20)) {
		e.addr.family = AF_INET;
		for (i = 0; i < 4; i++)
			e.addr.bytes[i] = (uint8_t)rnd();
	} else {
		e.addr.family = AF_INET6;
		for (i = 0; i < 16; i++)
			e.addr.bytes[i] = (uint8_t)rnd();
		e.addr.bytes[0] |= 0x20;	/* never ::ffff:0:0/96 */
	}
	return e;
}

static struct proto_msg
rnd_msg(void)
{
	static const uint8_t types[] = { PROTO_PROBE_REQUEST, PROTO_PROBE_REPLY,
	    PROTO_PIPE_ESTABLISH, PROTO_PIPE_OK, PROTO_PIPE_FAIL,
	    PROTO_KEEPALIVE, PROTO_KEEPALIVE_ACK, PROTO_ERROR, PROTO_OBSERVED,
	    PROTO_PIPE_ESTABLISH_TOKEN, PROTO_PIPE_ESTABLISH_CHAIN };
	struct proto_msg m;

	memset(&m, 0, sizeof(m));
	m.type = types[rnd() % sizeof(types)];
	m.ts_us = rnd();
	m.nonce = rnd();
	m.id = (uint32_t)rnd();
	switch (m.type) {
	case PROTO_PROBE_REQUEST:
		m.u.probe_req.target = rnd_ep();
		break;
	case PROTO_PROBE_REPLY:
		m.u.probe_reply.status = (uint8_t)(rnd() % (PROBE_ST_BUSY + 1));
		m.u.probe_reply.flags = (uint8_t)(rnd() & PROBE_FLAG_CACHED);
		m.u.probe_reply.rtt_us = (uint32_t)rnd();
		m.u.probe_reply.hold_us = (uint32_t)rnd();
		m.u.probe_reply.target = rnd_ep();
		break;
	case PROTO_PIPE_ESTABLISH:
		m.u.establish.client = rnd_ep();
		m.u.establish.server = rnd_ep();
		break;
	case PROTO_PIPE_ESTABLISH_TOKEN:
		m.u.establish.client = rnd_ep();
		m.u.establish.server = rnd_ep();
		for (size_t k = 0; k < PROTO_TOKEN_LEN; k++)
			m.u.establish.token[k] = (uint8_t)rnd();
		m.u.establish.token[0] |= 1;	/* never all zero */
		break;
	case PROTO_PIPE_ESTABLISH_CHAIN:
		m.u.chain.client = rnd_ep();
		m.u.chain.server = rnd_ep();
		if (rnd() & 1)
			for (size_t k = 0; k < PROTO_TOKEN_LEN; k++)
				m.u.chain.token[k] = (uint8_t)rnd();
		m.u.chain.hops = (uint8_t)(1 + rnd() % PROTO_CHAIN_MAX_HOPS);
		for (unsigned k = 0; k < m.u.chain.hops; k++) {
			m.u.chain.hop_ctl[k] = rnd_ep();
			m.u.chain.hop_data[k] = rnd_ep();
		}
		break;
	case PROTO_OBSERVED:
		m.u.observed.addr = rnd_ep();
		m.flags = (uint16_t)(rnd() & PROTO_FLAG_CHAINS);
		break;
	case PROTO_KEEPALIVE:
		m.flags = (uint16_t)(rnd() & (PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS));
		break;
	case PROTO_KEEPALIVE_ACK:
		m.flags = (uint16_t)(rnd() & PROTO_FLAG_CHAINS);
		break;
	case PROTO_PIPE_OK:
		m.u.ok.connect_us = (uint32_t)rnd();
		m.u.ok.pending_ms = (uint32_t)rnd();
		break;
	case PROTO_PIPE_FAIL:
		m.u.fail.reason = (uint8_t)(1 + rnd() % FAIL_NEXT_HOP);
		m.u.fail.detail = (uint32_t)rnd();
		break;
	case PROTO_ERROR:
		m.u.error.code = (uint8_t)(1 + rnd() % ERR_TYPE);
		break;
	}
	return m;
}

static void
roundtrip(void **state)
{
	uint8_t buf[PROTO_MAX_LEN];
	struct proto_msg m, d;
	enum proto_err why;
	size_t used;
	int i, len;

	(void)state;
	for (i = 0; i < 20000; i++) {
		m = rnd_msg();
		len = proto_encode(&m, &key, buf, sizeof(buf));
		assert_true(len >= PROTO_MIN_LEN && len <= PROTO_MAX_LEN);
		assert_int_equal(len, PROTO_HDR_LEN + proto_body_len(m.type) +
		    AUTH_MAC_LEN);
		assert_int_equal(dec(buf, (size_t)len, &d, &used, &why), PROTO_OK);
		assert_int_equal(used, (size_t)len);
		if (!msg_same(&m, &d))
			fail_msg("round trip %d (%s) differs", i,
			    proto_type_str(m.type));
	}
}

/* What any decode must satisfy, whatever the input. */
static void
check_decode(const uint8_t *buf, size_t len)
{
	uint8_t again[PROTO_MAX_LEN];
	struct proto_msg m;
	enum proto_err why;
	enum proto_result r;
	size_t used = 777;
	int n;

	r = dec(buf, len, &m, &used, &why);
	switch (r) {
	case PROTO_OK:
		assert_int_equal(why, PERR_NONE);
		assert_true(used >= PROTO_MIN_LEN && used <= len &&
		    used <= PROTO_MAX_LEN);
		/* What decodes re-encodes to the same bytes (flags aside). */
		n = proto_encode(&m, &key, again, sizeof(again));
		assert_int_equal(n, (int)used);
		if (buf[6] == 0 && buf[7] == 0)
			assert_memory_equal(again, buf, used);
		break;
	case PROTO_NEED_MORE:
		assert_int_equal(why, PERR_NONE);
		assert_int_equal(used, 0);
		assert_true(len < PROTO_MAX_LEN);
		break;
	case PROTO_BAD:
		assert_true(why > PERR_NONE && why <= PERR_SENDER);
		assert_int_equal(used, 0);
		break;
	default:
		fail_msg("result %d", r);
	}
}

/*
 * Inputs go into a heap buffer of exactly their length, so ASan catches
 * any read past the end.
 */
static void
fuzz_one(const uint8_t *src, size_t len)
{
	uint8_t *p = malloc(len ? len : 1);

	assert_non_null(p);
	memcpy(p, src, len);
	check_decode(p, len);
	free(p);
}

static void
fuzz(void **state)
{
	uint8_t b[PROTO_MAX_LEN + 64];
	struct proto_msg m, d;
	enum proto_result r;
	enum proto_err why;
	size_t len, k, i, used;
	int it, n, nmut, bl;

	(void)state;
	/* Random bytes, sometimes behind a plausible header. */
	for (it = 0; it < 200000; it++) {
		len = rnd() % sizeof(b);
		for (k = 0; k < len; k++)
			b[k] = (uint8_t)rnd();
		if (it & 1 && len >= 6) {
			b[0] = PROTO_MAGIC0;
			b[1] = PROTO_MAGIC1;
			b[2] = PROTO_VERSION;
			if (it & 2 && (bl = proto_body_len(b[3])) >= 0) {
				b[4] = 0;
				b[5] = (uint8_t)(PROTO_HDR_LEN + bl + AUTH_MAC_LEN);
			}
		}
		fuzz_one(b, len);
	}

	/* Mutations of valid messages: bit flips, byte sets, cuts, growth. */
	for (it = 0; it < 200000; it++) {
		m = rnd_msg();
		n = proto_encode(&m, &key, b, sizeof(b));
		assert_true(n > 0);
		len = (size_t)n;
		nmut = 1 + (int)(rnd() % 4);
		while (nmut-- > 0) {
			switch (rnd() % 4) {
			case 0:
				b[rnd() % len] ^= (uint8_t)(1 << (rnd() % 8));
				break;
			case 1:
				b[rnd() % len] = (uint8_t)rnd();
				break;
			case 2:
				len = rnd() % (len + 1);
				break;
			case 3:
				k = rnd() % 40;
				for (i = 0; i < k && len < sizeof(b); i++)
					b[len++] = (uint8_t)rnd();
				break;
			}
			if (len == 0)
				break;
		}
		fuzz_one(b, len);
	}

	/*
	 * Signed messages with random bodies: past the MAC, the body parser
	 * itself must stay within bounds and refuse only as PERR_BODY.
	 */
	for (it = 0; it < 200000; it++) {
		m = rnd_msg();
		n = proto_encode(&m, &key, b, sizeof(b));
		len = (size_t)n;
		for (k = PROTO_HDR_LEN; k < len - AUTH_MAC_LEN; k++)
			if (rnd() % 4 == 0)
				b[k] = (uint8_t)(rnd() % 4 == 0 ? rnd() : 0);
		resign(b, len);
		r = dec(b, len, &d, &used, &why);
		assert_true(r == PROTO_OK || (r == PROTO_BAD && why == PERR_BODY));
		fuzz_one(b, len);
	}
}

static void
body_lengths(void **state)
{
	int t, n = 0, bl;

	(void)state;
	assert_int_equal(proto_body_len(PROTO_PROBE_REQUEST), 20);
	assert_int_equal(proto_body_len(PROTO_PROBE_REPLY), 32);
	assert_int_equal(proto_body_len(PROTO_PIPE_ESTABLISH), 40);
	assert_int_equal(proto_body_len(PROTO_PIPE_OK), 8);
	assert_int_equal(proto_body_len(PROTO_PIPE_FAIL), 8);
	assert_int_equal(proto_body_len(PROTO_KEEPALIVE), 0);
	assert_int_equal(proto_body_len(PROTO_KEEPALIVE_ACK), 0);
	assert_int_equal(proto_body_len(PROTO_ERROR), 4);
	assert_int_equal(proto_body_len(PROTO_HELLO), IDENT_CERT_LEN);
	assert_int_equal(proto_body_len(PROTO_OBSERVED), 20);
	assert_int_equal(proto_body_len(PROTO_PIPE_ESTABLISH_TOKEN), 48);
	assert_int_equal(proto_body_len(PROTO_PIPE_ESTABLISH_CHAIN), 132);
	for (t = 0; t < 256; t++) {
		if ((bl = proto_body_len((uint8_t)t)) < 0) {
			assert_string_equal(proto_type_str((uint8_t)t), "unknown");
			continue;
		}
		n++;
		assert_true(PROTO_HDR_LEN + bl + IDENT_SIG_LEN <= PROTO_MAX_LEN);
		assert_string_not_equal(proto_type_str((uint8_t)t), "unknown");
	}
	assert_int_equal(n, 12);
}

static void
strings(void **state)
{
	int v;

	(void)state;
	for (v = 0; v < 256; v++) {
		assert_non_null(proto_type_str((uint8_t)v));
		assert_non_null(proto_fail_str((uint8_t)v));
		assert_non_null(proto_probe_status_str((uint8_t)v));
		assert_non_null(proto_error_code_str((uint8_t)v));
	}
	for (v = FAIL_REFUSED; v <= FAIL_NEXT_HOP; v++)
		assert_string_not_equal(proto_fail_str((uint8_t)v), "unknown");
	for (v = PROBE_ST_OK; v <= PROBE_ST_BUSY; v++)
		assert_string_not_equal(proto_probe_status_str((uint8_t)v),
		    "unknown");
	for (v = ERR_MALFORMED; v <= ERR_TYPE; v++)
		assert_string_not_equal(proto_error_code_str((uint8_t)v),
		    "unknown");
	for (v = PERR_NONE; v <= PERR_SENDER; v++)
		assert_string_not_equal(proto_err_str((enum proto_err)v),
		    "unknown");
	assert_string_equal(proto_fail_str(0), "unknown");
	assert_string_equal(proto_fail_str(FAIL_NEXT_HOP + 1), "unknown");
	assert_string_equal(proto_fail_str(FAIL_NEXT_HOP), "next-hop");
	assert_string_equal(proto_type_str(PROTO_PIPE_ESTABLISH_CHAIN),
	    "PIPE_ESTABLISH_CHAIN");
	assert_string_equal(proto_probe_status_str(PROBE_ST_BUSY + 1), "unknown");
	assert_string_equal(proto_error_code_str(0), "unknown");
	assert_string_equal(proto_type_str(PROTO_PIPE_ESTABLISH),
	    "PIPE_ESTABLISH");
	assert_string_equal(proto_fail_str(FAIL_DUPLICATE), "duplicate");
	assert_string_equal(proto_probe_status_str(PROBE_ST_RATE_LIMITED),
	    "rate-limited");
	assert_string_equal(proto_error_code_str(ERR_REPLAY), "replay");

	assert_int_equal(proto_error_for(PERR_NONE), 0);
	assert_int_equal(proto_error_for(PERR_MAGIC), ERR_MALFORMED);
	assert_int_equal(proto_error_for(PERR_VERSION), ERR_VERSION);
	assert_int_equal(proto_error_for(PERR_LENGTH), ERR_MALFORMED);
	assert_int_equal(proto_error_for(PERR_TYPE), ERR_MALFORMED);
	assert_int_equal(proto_error_for(PERR_BODY), ERR_MALFORMED);
	assert_int_equal(proto_error_for(PERR_MAC), ERR_AUTH);
	assert_int_equal(proto_error_for(PERR_SENDER), ERR_AUTH);
	assert_string_equal(proto_type_str(PROTO_HELLO), "HELLO");
}

/*
 * Identity mode, every byte of every message flipped: whatever changes
 * after the framing fields fails, as an unknown sender (a changed key names
 * nobody the receiver knows), a bad MAC or signature; never as a body
 * error, so nothing unauthenticated is parsed.
 */
static void
identity_flipped(void **state)
{
	uint8_t b[PROTO_MAX_LEN];
	struct proto_msg m;
	enum proto_err why, want;
	size_t i, k, used, n = 0;
	int bit;

	(void)state;
	for (i = 0; i < NVEC; i++) {
		const struct proto_vector *v = &proto_vectors[i];
		int hello;

		if (v->result != PROTO_OK || v->at == PV_SHARED)
			continue;
		hello = v->bytes[3] == PROTO_HELLO;
		n++;
		for (k = 6; k < v->len; k++)
			for (bit = 0; bit < 8; bit++) {
				memcpy(b, v->bytes, v->len);
				b[k] ^= (uint8_t)(1 << bit);
				want = !hello && k >= 28 && k < 60 ? PERR_SENDER : PERR_MAC;
				assert_int_equal(dec_at(v->at, b, v->len, &m, &used, &why),
				    PROTO_BAD);
				if (why != want)
					fail_msg("%s byte %zu bit %d: %s, want %s", v->name, k,
					    bit, proto_err_str(why), proto_err_str(want));
			}
	}
	assert_true(n >= 4);
}

/* A message for one recipient verifies nowhere else, and not in shared
 * mode; a shared-mode message is not accepted in identity mode. */
static void
identity_recipients(void **state)
{
	const struct proto_vector *e = vec("pipe_establish_identity");
	const struct proto_vector *ok = vec("pipe_ok_identity");
	struct proto_pair other = at_relay;
	struct proto_msg m;
	enum proto_err why;
	size_t used;

	(void)state;
	/* The relay accepts the client's; the client does not take it back. */
	assert_int_equal(dec_at(PV_AT_RELAY, e->bytes, e->len, &m, &used, &why), PROTO_OK);
	assert_int_equal(dec_at(PV_AT_CLIENT, e->bytes, e->len, &m, &used, &why), PROTO_BAD);
	assert_int_equal(why, PERR_SENDER);
	assert_int_equal(dec_at(PV_AT_RELAY, ok->bytes, ok->len, &m, &used, &why), PROTO_BAD);
	assert_int_equal(why, PERR_SENDER);
	/* Another key for the same sender (another relay's pair key). */
	other.key.k[0] ^= 1;
	assert_int_equal(proto_decode_with(e->bytes, e->len, proto_key_pair, &other, &m,
	    &used, &why), PROTO_BAD);
	assert_int_equal(why, PERR_MAC);
	/* Shared mode refuses any sender. */
	assert_int_equal(proto_decode(e->bytes, e->len, &at_relay.key, &m, &used, &why),
	    PROTO_BAD);
	assert_int_equal(why, PERR_SENDER);
	e = vec("pipe_establish_v4");
	assert_int_equal(dec_at(PV_AT_RELAY, e->bytes, e->len, &m, &used, &why), PROTO_BAD);
	assert_int_equal(why, PERR_SENDER);
}

/*
 * A HELLO proves possession of the certificate's key, and nothing about
 * the certificate: a well-formed HELLO with a certificate of another CA
 * decodes, and ident_cert_check is what refuses it.
 */
static void
hello_forgery(void **state)
{
	uint8_t ca2[IDENT_SEED_LEN], ca2_pk[IDENT_PK_LEN], seed[IDENT_SEED_LEN];
	uint8_t pk[IDENT_PK_LEN], raw[IDENT_CERT_LEN], b[PROTO_MAX_LEN];
	struct proto_msg m = msg(PROTO_HELLO, 0x60, 3), d;
	struct ident other;
	enum proto_err why;
	size_t used;
	char err[200];
	int n;

	(void)state;
	ident_keygen(ca2, ca2_pk);
	ident_keygen(seed, pk);
	assert_int_equal(ident_cert_issue(ca2, IDENT_ROLE_CLIENT, "mallory", 99, PV_NOW - 10,
	    PV_NOW + 10, pk, raw, NULL, 0), 0);
	assert_int_equal(ident_from_parts(seed, raw, ca2_pk, IDENT_ANY_ROLE, PV_NOW, &other,
	    NULL, 0), 0);
	n = proto_encode_hello(&m, &other, b, sizeof(b));
	assert_int_equal(n, PROTO_HDR_LEN + IDENT_CERT_LEN + IDENT_SIG_LEN);
	assert_int_equal(proto_decode_with(b, (size_t)n, proto_key_pair, &at_relay, &d, &used,
	    &why), PROTO_OK);
	assert_memory_equal(d.sender, pk, PROTO_PK_LEN);
	assert_int_equal(ident_cert_check(&d.u.hello.cert, pv_ca_pk, IDENT_ANY_ROLE, PV_NOW,
	    NULL, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not signed by this deployment's CA"));

	/* The client's own certificate in a HELLO signed by another key. */
	memcpy(b + PROTO_HDR_LEN, pv_client_cert, IDENT_CERT_LEN);
	ident_sign(&other, PROTO_HELLO_CTX, b, (size_t)n - IDENT_SIG_LEN,
	    b + n - IDENT_SIG_LEN);
	assert_int_equal(proto_decode_with(b, (size_t)n, proto_key_pair, &at_relay, &d, &used,
	    &why), PROTO_BAD);
	assert_int_equal(why, PERR_BODY);
	/* ... or naming the client as sender: its signature fails. */
	memcpy(b + 28, id_client.cert.pk, PROTO_PK_LEN);
	assert_int_equal(proto_decode_with(b, (size_t)n, proto_key_pair, &at_relay, &d, &used,
	    &why), PROTO_BAD);
	assert_int_equal(why, PERR_MAC);
	/* A signature for another purpose is not a HELLO's. */
	ident_sign(&id_client, "slot-other/1", b, (size_t)n - IDENT_SIG_LEN,
	    b + n - IDENT_SIG_LEN);
	assert_int_equal(proto_decode_with(b, (size_t)n, proto_key_pair, &at_relay, &d, &used,
	    &why), PROTO_BAD);
	assert_int_equal(why, PERR_MAC);
	ident_sign(&id_client, PROTO_HELLO_CTX, b, (size_t)n - IDENT_SIG_LEN,
	    b + n - IDENT_SIG_LEN);
	assert_int_equal(proto_decode_with(b, (size_t)n, proto_key_pair, &at_relay, &d, &used,
	    &why), PROTO_OK);
	ident_wipe(&other);
}

/* The pair key of ident.c is the one the Python reading computes. */
static void
pair_key_matches(void **state)
{
	(void)state;
	assert_memory_equal(at_relay.key.k, pv_pair_key, AUTH_KEY_LEN);
	assert_memory_equal(at_client.key.k, pv_pair_key, AUTH_KEY_LEN);
}

/* Nonces are drawn in batches from the kernel's CSPRNG: all distinct, and a
 * forked child never sends the nonces its parent has in store. */
static void
stamp_nonces(void **state)
{
	enum { N = 1000 };
	static uint64_t seen[N];
	struct proto_msg m;
	uint64_t child;
	int fds[2], st;
	pid_t pid;

	(void)state;
	for (int i = 0; i < N; i++) {
		proto_stamp(&m);
		assert_true(m.ts_us > 0);
		for (int j = 0; j < i; j++)
			assert_true(seen[j] != m.nonce);
		seen[i] = m.nonce;
	}
	/* Mid-batch: the parent's next nonces are in memory. */
	assert_int_equal(pipe(fds), 0);
	if ((pid = fork()) == 0) {
		proto_stamp(&m);
		_exit(write(fds[1], &m.nonce, sizeof(m.nonce)) == sizeof(m.nonce) ? 0 : 1);
	}
	assert_true(pid > 0);
	assert_int_equal(read(fds[0], &child, sizeof(child)), (ssize_t)sizeof(child));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	for (int i = 0; i < 64; i++) {
		proto_stamp(&m);
		assert_true(m.nonce != child);
	}
	close(fds[0]);
	close(fds[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stamp_nonces),
		cmocka_unit_test(vectors_encode),
		cmocka_unit_test(vectors_decode),
		cmocka_unit_test(vectors_cover_types),
		cmocka_unit_test(doc_matches_vectors),
		cmocka_unit_test(truncation),
		cmocka_unit_test(early_rejection),
		cmocka_unit_test(header_fields),
		cmocka_unit_test(flipped_bytes),
		cmocka_unit_test(wrong_key),
		cmocka_unit_test(body_fields),
		cmocka_unit_test(header_flags_ignored),
		cmocka_unit_test(chains_flag),
		cmocka_unit_test(back_to_back),
		cmocka_unit_test(encode_refuses),
		cmocka_unit_test(encode_ipv4_padding),
		cmocka_unit_test(roundtrip),
		cmocka_unit_test(fuzz),
		cmocka_unit_test(body_lengths),
		cmocka_unit_test(strings),
		cmocka_unit_test(identity_flipped),
		cmocka_unit_test(identity_recipients),
		cmocka_unit_test(hello_forgery),
		cmocka_unit_test(pair_key_matches),
	};

	return cmocka_run_group_tests_name("proto", tests, setup, NULL);
}
