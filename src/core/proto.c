/*
 * Wire codec: encoding, strict decoding and HMAC of slot messages. The
 * normative format is docs/protocol.md; this file must agree with its test
 * vectors. Fields are written and read byte by byte in network order, never
 * through struct casts, so the layout does not depend on the compiler.
 *
 * The codec never logs and keeps no state: callers decide what a failure
 * means for their channel (drop a datagram, answer ERROR, close).
 */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "slot/be.h"
#include "slot/clock.h"
#include "slot/proto.h"

/* Body lengths per type. */
#define BODY_PROBE_REQUEST	PROTO_EP_LEN			/* target */
#define BODY_PROBE_REPLY	(12 + PROTO_EP_LEN)		/* status .. target */
#define BODY_PIPE_ESTABLISH	(2 * PROTO_EP_LEN)		/* client, server */
#define BODY_PIPE_OK		8
#define BODY_PIPE_FAIL		8
#define BODY_KEEPALIVE		0
#define BODY_OBSERVED		PROTO_EP_LEN			/* address */
#define BODY_PIPE_ESTABLISH_TOKEN (2 * PROTO_EP_LEN + PROTO_TOKEN_LEN)	/* client, server, token */
/* client, server, token, hops + 3 reserved, 2 x (control, data) */
#define BODY_PIPE_ESTABLISH_CHAIN (2 * PROTO_EP_LEN + PROTO_TOKEN_LEN + 4 + \
	2 * PROTO_CHAIN_MAX_HOPS * PROTO_EP_LEN)
#define BODY_ERROR		4
#define BODY_HELLO		IDENT_CERT_LEN			/* certificate */

/* Wire values of the endpoint family byte, independent of AF_* numbers. */
#define EP_FAM_V4 4
#define EP_FAM_V6 6

static int
all_zero(const uint8_t *p, size_t n)
{
	uint8_t acc = 0;

	while (n-- > 0)
		acc |= *p++;
	return acc == 0;
}

int
proto_body_len(uint8_t type)
{
	switch (type) {
	case PROTO_PROBE_REQUEST:
		return BODY_PROBE_REQUEST;
	case PROTO_PROBE_REPLY:
		return BODY_PROBE_REPLY;
	case PROTO_PIPE_ESTABLISH:
		return BODY_PIPE_ESTABLISH;
	case PROTO_PIPE_OK:
		return BODY_PIPE_OK;
	case PROTO_PIPE_FAIL:
		return BODY_PIPE_FAIL;
	case PROTO_KEEPALIVE:
	case PROTO_KEEPALIVE_ACK:
		return BODY_KEEPALIVE;
	case PROTO_ERROR:
		return BODY_ERROR;
	case PROTO_HELLO:
		return BODY_HELLO;
	case PROTO_OBSERVED:
		return BODY_OBSERVED;
	case PROTO_PIPE_ESTABLISH_TOKEN:
		return BODY_PIPE_ESTABLISH_TOKEN;
	case PROTO_PIPE_ESTABLISH_CHAIN:
		return BODY_PIPE_ESTABLISH_CHAIN;
	}
	return -1;
}

/* The header flags defined for a type: the others are ignored on receipt. */
static uint16_t
flags_known(uint8_t type)
{
	switch (type) {
	case PROTO_KEEPALIVE:
		return PROTO_FLAG_OBSERVE | PROTO_FLAG_CHAINS;
	case PROTO_KEEPALIVE_ACK:
	case PROTO_OBSERVED:
		return PROTO_FLAG_CHAINS;
	default:
		return 0;
	}
}

/* What ends a message: its MAC, or a HELLO's signature. */
static size_t
trailer_len(uint8_t type)
{
	return type == PROTO_HELLO ? IDENT_SIG_LEN : AUTH_MAC_LEN;
}

/* True if pk is all zero (a shared-mode sender). */
static int
proto_sender_is_zero(const uint8_t pk[PROTO_PK_LEN])
{
	return all_zero(pk, PROTO_PK_LEN);
}

static int
probe_status_valid(uint8_t st)
{
	return st <= PROBE_ST_BUSY;
}

static int
fail_reason_valid(uint8_t r)
{
	return r >= FAIL_REFUSED && r <= FAIL_NEXT_HOP;
}

static int
error_code_valid(uint8_t c)
{
	return c >= ERR_MALFORMED && c <= ERR_TYPE;
}

/*
 * The encoder refuses exactly what the decoder would reject, so a message
 * that leaves this host always decodes on the other side. An IPv4-mapped
 * IPv6 address is refused rather than converted: every addr constructor
 * already stores those as IPv4, so one here is a bug upstream.
 */
static int
ep_put(uint8_t *p, const struct endpoint *e)
{
	static const uint8_t v4mapped[12] =
	    { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (e->port == 0)
		return -1;
	memset(p, 0, PROTO_EP_LEN);
	switch (e->addr.family) {
	case AF_INET:
		p[0] = EP_FAM_V4;
		memcpy(p + 4, e->addr.bytes, 4);
		break;
	case AF_INET6:
		if (memcmp(e->addr.bytes, v4mapped, sizeof(v4mapped)) == 0)
			return -1;
		p[0] = EP_FAM_V6;
		memcpy(p + 4, e->addr.bytes, 16);
		break;
	default:
		return -1;
	}
	put16(p + 2, e->port);
	return 0;
}

static int
ep_get(const uint8_t *p, struct endpoint *e)
{
	static const uint8_t v4mapped[12] =
	    { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	memset(e, 0, sizeof(*e));
	if (p[1] != 0)
		return -1;
	e->port = get16(p + 2);
	if (e->port == 0)
		return -1;
	switch (p[0]) {
	case EP_FAM_V4:
		/* One spelling per address: the padding must be zero. */
		if (!all_zero(p + 8, 12))
			return -1;
		e->addr.family = AF_INET;
		memcpy(e->addr.bytes, p + 4, 4);
		return 0;
	case EP_FAM_V6:
		if (memcmp(p + 4, v4mapped, sizeof(v4mapped)) == 0)
			return -1;
		e->addr.family = AF_INET6;
		memcpy(e->addr.bytes, p + 4, 16);
		return 0;
	}
	return -1;
}

/*
 * PIPE_ESTABLISH_CHAIN body: client 0, server 20, token 40, hops 48,
 * reserved 49-51, hop 1 control 52 and data 72, hop 2 control 92 and data
 * 112. The codec checks the format only (hops 1 or 2, an unused hop all
 * zero, reserved zero); whether the hops make sense (data address equal to
 * the control address, no relay twice) is the relay's check (chain.c).
 */
#define CH_TOKEN	(2 * PROTO_EP_LEN)
#define CH_HOPS		(CH_TOKEN + PROTO_TOKEN_LEN)
#define CH_HOP(i)	(CH_HOPS + 4 + (i) * 2 * PROTO_EP_LEN)

static int
chain_put(uint8_t *b, const struct proto_msg *m)
{
	unsigned i;

	if (m->u.chain.hops < 1 || m->u.chain.hops > PROTO_CHAIN_MAX_HOPS)
		return -1;
	if (ep_put(b, &m->u.chain.client) == -1 ||
	    ep_put(b + PROTO_EP_LEN, &m->u.chain.server) == -1)
		return -1;
	memcpy(b + CH_TOKEN, m->u.chain.token, PROTO_TOKEN_LEN);
	b[CH_HOPS] = m->u.chain.hops;
	for (i = 0; i < PROTO_CHAIN_MAX_HOPS; i++) {
		if (i >= m->u.chain.hops) {
			/* A hop set beyond hops is a caller's mistake. */
			if (m->u.chain.hop_ctl[i].addr.family != 0 ||
			    m->u.chain.hop_data[i].addr.family != 0)
				return -1;
			continue;
		}
		if (ep_put(b + CH_HOP(i), &m->u.chain.hop_ctl[i]) == -1 ||
		    ep_put(b + CH_HOP(i) + PROTO_EP_LEN, &m->u.chain.hop_data[i]) == -1)
			return -1;
	}
	return 0;
}

static int
chain_get(const uint8_t *b, struct proto_msg *m)
{
	unsigned i, hops = b[CH_HOPS];

	if (hops < 1 || hops > PROTO_CHAIN_MAX_HOPS || !all_zero(b + CH_HOPS + 1, 3))
		return -1;
	if (ep_get(b, &m->u.chain.client) == -1 ||
	    ep_get(b + PROTO_EP_LEN, &m->u.chain.server) == -1)
		return -1;
	memcpy(m->u.chain.token, b + CH_TOKEN, PROTO_TOKEN_LEN);
	m->u.chain.hops = (uint8_t)hops;
	for (i = 0; i < PROTO_CHAIN_MAX_HOPS; i++) {
		if (i >= hops) {
			/* One spelling: an unused hop is all zero. */
			if (!all_zero(b + CH_HOP(i), 2 * PROTO_EP_LEN))
				return -1;
			continue;
		}
		if (ep_get(b + CH_HOP(i), &m->u.chain.hop_ctl[i]) == -1 ||
		    ep_get(b + CH_HOP(i) + PROTO_EP_LEN, &m->u.chain.hop_data[i]) == -1)
			return -1;
	}
	return 0;
}

static void
put_header(const struct proto_msg *m, size_t len, uint8_t *buf)
{
	buf[0] = PROTO_MAGIC0;
	buf[1] = PROTO_MAGIC1;
	buf[2] = PROTO_VERSION;
	buf[3] = m->type;
	put16(buf + 4, (uint16_t)len);
	put16(buf + 6, m->flags);
	put64(buf + 8, m->ts_us);
	put64(buf + 16, m->nonce);
	put32(buf + 24, m->id);
	memcpy(buf + 28, m->sender, PROTO_PK_LEN);
}

int
proto_encode(const struct proto_msg *m, const struct auth_key *key,
    uint8_t *buf, size_t cap)
{
	uint8_t *b;
	int blen;
	size_t len;

	/* A HELLO is signed, not MACed: proto_encode_hello. */
	if ((blen = proto_body_len(m->type)) < 0 || m->type == PROTO_HELLO ||
	    (m->flags & ~flags_known(m->type)) != 0)
		return -1;
	len = PROTO_HDR_LEN + (size_t)blen + AUTH_MAC_LEN;
	if (cap < len)
		return -1;

	put_header(m, len, buf);

	b = buf + PROTO_HDR_LEN;
	memset(b, 0, (size_t)blen);	/* reserved bytes */
	switch (m->type) {
	case PROTO_PROBE_REQUEST:
		if (ep_put(b, &m->u.probe_req.target) == -1)
			return -1;
		break;
	case PROTO_PROBE_REPLY:
		if (!probe_status_valid(m->u.probe_reply.status) ||
		    (m->u.probe_reply.flags & ~PROBE_FLAG_CACHED) != 0)
			return -1;
		b[0] = m->u.probe_reply.status;
		b[1] = m->u.probe_reply.flags;
		put32(b + 4, m->u.probe_reply.rtt_us);
		put32(b + 8, m->u.probe_reply.hold_us);
		if (ep_put(b + 12, &m->u.probe_reply.target) == -1)
			return -1;
		break;
	case PROTO_PIPE_ESTABLISH:
	case PROTO_PIPE_ESTABLISH_TOKEN:
		if (ep_put(b, &m->u.establish.client) == -1 ||
		    ep_put(b + PROTO_EP_LEN, &m->u.establish.server) == -1)
			return -1;
		if (m->type == PROTO_PIPE_ESTABLISH)
			break;
		if (all_zero(m->u.establish.token, PROTO_TOKEN_LEN))
			return -1;
		memcpy(b + 2 * PROTO_EP_LEN, m->u.establish.token, PROTO_TOKEN_LEN);
		break;
	case PROTO_PIPE_ESTABLISH_CHAIN:
		if (chain_put(b, m) == -1)
			return -1;
		break;
	case PROTO_OBSERVED:
		if (ep_put(b, &m->u.observed.addr) == -1)
			return -1;
		break;
	case PROTO_PIPE_OK:
		put32(b, m->u.ok.connect_us);
		put32(b + 4, m->u.ok.pending_ms);
		break;
	case PROTO_PIPE_FAIL:
		if (!fail_reason_valid(m->u.fail.reason))
			return -1;
		b[0] = m->u.fail.reason;
		put32(b + 4, m->u.fail.detail);
		break;
	case PROTO_KEEPALIVE:
	case PROTO_KEEPALIVE_ACK:
		break;
	case PROTO_ERROR:
		if (!error_code_valid(m->u.error.code))
			return -1;
		b[0] = m->u.error.code;
		break;
	}

	auth_mac(key, buf, len - AUTH_MAC_LEN, buf + len - AUTH_MAC_LEN);
	return (int)len;
}

int
proto_encode_hello(const struct proto_msg *m, const struct ident *self,
    uint8_t *buf, size_t cap)
{
	struct proto_msg h = *m;
	size_t len = PROTO_HDR_LEN + BODY_HELLO + IDENT_SIG_LEN;

	if (cap < len)
		return -1;
	h.type = PROTO_HELLO;
	h.flags = 0;
	memcpy(h.sender, self->cert.pk, PROTO_PK_LEN);
	put_header(&h, len, buf);
	memcpy(buf + PROTO_HDR_LEN, self->cert.raw, IDENT_CERT_LEN);
	ident_sign(self, PROTO_HELLO_CTX, buf, len - IDENT_SIG_LEN,
	    buf + len - IDENT_SIG_LEN);
	return (int)len;
}

/* Parses a body whose MAC has already been checked. Returns 0 or -1. */
static int
body_get(const uint8_t *b, struct proto_msg *m)
{
	switch (m->type) {
	case PROTO_PROBE_REQUEST:
		return ep_get(b, &m->u.probe_req.target);
	case PROTO_PROBE_REPLY:
		if (!probe_status_valid(b[0]) ||
		    (b[1] & ~PROBE_FLAG_CACHED) != 0 || !all_zero(b + 2, 2))
			return -1;
		m->u.probe_reply.status = b[0];
		m->u.probe_reply.flags = b[1];
		m->u.probe_reply.rtt_us = get32(b + 4);
		m->u.probe_reply.hold_us = get32(b + 8);
		return ep_get(b + 12, &m->u.probe_reply.target);
	case PROTO_PIPE_ESTABLISH:
	case PROTO_PIPE_ESTABLISH_TOKEN:
		if (ep_get(b, &m->u.establish.client) == -1 ||
		    ep_get(b + PROTO_EP_LEN, &m->u.establish.server) == -1)
			return -1;
		if (m->type == PROTO_PIPE_ESTABLISH)
			return 0;
		/* Zero would match what no SYN carries: never sent. */
		if (all_zero(b + 2 * PROTO_EP_LEN, PROTO_TOKEN_LEN))
			return -1;
		memcpy(m->u.establish.token, b + 2 * PROTO_EP_LEN, PROTO_TOKEN_LEN);
		return 0;
	case PROTO_PIPE_ESTABLISH_CHAIN:
		return chain_get(b, m);
	case PROTO_OBSERVED:
		return ep_get(b, &m->u.observed.addr);
	case PROTO_PIPE_OK:
		m->u.ok.connect_us = get32(b);
		m->u.ok.pending_ms = get32(b + 4);
		return 0;
	case PROTO_PIPE_FAIL:
		if (!fail_reason_valid(b[0]) || !all_zero(b + 1, 3))
			return -1;
		m->u.fail.reason = b[0];
		m->u.fail.detail = get32(b + 4);
		return 0;
	case PROTO_KEEPALIVE:
	case PROTO_KEEPALIVE_ACK:
		return 0;
	case PROTO_ERROR:
		if (!error_code_valid(b[0]) || !all_zero(b + 1, 3))
			return -1;
		m->u.error.code = b[0];
		return 0;
	case PROTO_HELLO:
		/* The certificate must be well formed and for the key that
		 * signed the HELLO. */
		if (ident_cert_decode(b, &m->u.hello.cert, NULL, 0) == -1 ||
		    memcmp(m->u.hello.cert.pk, m->sender, PROTO_PK_LEN) != 0)
			return -1;
		return 0;
	}
	return -1;
}

/*
 * Checks run in wire order as soon as each field is available, so a peer
 * speaking something else is refused on its first bytes instead of holding
 * a buffer open waiting for a length it never meant. The MAC is checked
 * before the body is parsed: nothing unauthenticated is interpreted beyond
 * the framing fields needed to find the MAC, and a forged body reports
 * PERR_MAC, never PERR_BODY.
 */
enum proto_result
proto_decode_with(const uint8_t *buf, size_t len, proto_key_fn key_fn,
    void *arg, struct proto_msg *m, size_t *used, enum proto_err *why)
{
	enum proto_err e = PERR_NONE;
	const struct auth_key *key;
	struct proto_hdr h;
	size_t mlen, tlen;
	int blen;

	*used = 0;
	*why = PERR_NONE;

	if ((len >= 1 && buf[0] != PROTO_MAGIC0) ||
	    (len >= 2 && buf[1] != PROTO_MAGIC1)) {
		e = PERR_MAGIC;
		goto bad;
	}
	if (len >= 3 && buf[2] != PROTO_VERSION) {
		e = PERR_VERSION;
		goto bad;
	}
	if (len < 4)
		return PROTO_NEED_MORE;
	if ((blen = proto_body_len(buf[3])) < 0) {
		e = PERR_TYPE;
		goto bad;
	}
	if (len < 6)
		return PROTO_NEED_MORE;
	mlen = get16(buf + 4);
	tlen = trailer_len(buf[3]);
	if (mlen < PROTO_MIN_LEN || mlen > PROTO_MAX_LEN ||
	    mlen != PROTO_HDR_LEN + (size_t)blen + tlen) {
		e = PERR_LENGTH;
		goto bad;
	}
	if (len < mlen)
		return PROTO_NEED_MORE;

	if (buf[3] == PROTO_HELLO) {
		/* Signed by the key it names as its sender. */
		if (!ident_verify(buf + 28, PROTO_HELLO_CTX, buf, mlen - tlen,
		    buf + mlen - tlen)) {
			e = PERR_MAC;
			goto bad;
		}
	} else {
		h.type = buf[3];
		h.id = get32(buf + 24);
		h.sender = buf + 28;
		if ((key = key_fn(arg, &h)) == NULL) {
			e = PERR_SENDER;
			goto bad;
		}
		if (!auth_verify(key, buf, mlen - tlen, buf + mlen - tlen)) {
			e = PERR_MAC;
			goto bad;
		}
	}

	memset(m, 0, sizeof(*m));
	m->type = buf[3];
	/* Header flags (bytes 6-7) the type does not define are ignored:
	 * reserved for later versions. */
	m->flags = get16(buf + 6) & flags_known(m->type);
	m->ts_us = get64(buf + 8);
	m->nonce = get64(buf + 16);
	m->id = get32(buf + 24);
	memcpy(m->sender, buf + 28, PROTO_PK_LEN);
	if (body_get(buf + PROTO_HDR_LEN, m) == -1) {
		e = PERR_BODY;
		goto bad;
	}
	*used = mlen;
	return PROTO_OK;

bad:
	*why = e;
	return PROTO_BAD;
}

const struct auth_key *
proto_key_shared(void *key, const struct proto_hdr *h)
{
	return proto_sender_is_zero(h->sender) ? key : NULL;
}

const struct auth_key *
proto_key_pair(void *pair, const struct proto_hdr *h)
{
	const struct proto_pair *p = pair;

	return memcmp(h->sender, p->pk, PROTO_PK_LEN) == 0 ? &p->key : NULL;
}

enum proto_result
proto_decode(const uint8_t *buf, size_t len, const struct auth_key *key,
    struct proto_msg *m, size_t *used, enum proto_err *why)
{
	return proto_decode_with(buf, len, proto_key_shared, (void *)key, m,
	    used, why);
}

const char *
proto_type_str(uint8_t type)
{
	switch (type) {
	case PROTO_PROBE_REQUEST:
		return "PROBE_REQUEST";
	case PROTO_PROBE_REPLY:
		return "PROBE_REPLY";
	case PROTO_PIPE_ESTABLISH:
		return "PIPE_ESTABLISH";
	case PROTO_PIPE_OK:
		return "PIPE_OK";
	case PROTO_PIPE_FAIL:
		return "PIPE_FAIL";
	case PROTO_KEEPALIVE:
		return "KEEPALIVE";
	case PROTO_KEEPALIVE_ACK:
		return "KEEPALIVE_ACK";
	case PROTO_ERROR:
		return "ERROR";
	case PROTO_HELLO:
		return "HELLO";
	case PROTO_OBSERVED:
		return "OBSERVED";
	case PROTO_PIPE_ESTABLISH_TOKEN:
		return "PIPE_ESTABLISH_TOKEN";
	case PROTO_PIPE_ESTABLISH_CHAIN:
		return "PIPE_ESTABLISH_CHAIN";
	}
	return "unknown";
}

const char *
proto_err_str(enum proto_err e)
{
	switch (e) {
	case PERR_NONE:
		return "none";
	case PERR_MAGIC:
		return "bad magic";
	case PERR_VERSION:
		return "unsupported version";
	case PERR_LENGTH:
		return "bad length";
	case PERR_TYPE:
		return "unknown type";
	case PERR_BODY:
		return "invalid body";
	case PERR_MAC:
		return "bad MAC";
	case PERR_SENDER:
		return "unknown sender";
	}
	return "unknown";
}

const char *
proto_fail_str(uint8_t reason)
{
	switch (reason) {
	case FAIL_REFUSED:
		return "refused";
	case FAIL_UNREACHABLE:
		return "unreachable";
	case FAIL_TIMEOUT:
		return "timeout";
	case FAIL_POLICY_ADDR:
		return "policy-address";
	case FAIL_POLICY_PORT:
		return "policy-port";
	case FAIL_LIMIT:
		return "relay-limit";
	case FAIL_CLIENT_LIMIT:
		return "client-limit";
	case FAIL_DUPLICATE:
		return "duplicate";
	case FAIL_SHUTTING_DOWN:
		return "shutting-down";
	case FAIL_INTERNAL:
		return "internal";
	case FAIL_NEXT_HOP:
		return "next-hop";
	}
	return "unknown";
}

const char *
proto_probe_status_str(uint8_t status)
{
	switch (status) {
	case PROBE_ST_OK:
		return "ok";
	case PROBE_ST_REFUSED:
		return "refused";
	case PROBE_ST_UNREACHABLE:
		return "unreachable";
	case PROBE_ST_TIMEOUT:
		return "timeout";
	case PROBE_ST_POLICY:
		return "policy";
	case PROBE_ST_RATE_LIMITED:
		return "rate-limited";
	case PROBE_ST_BUSY:
		return "busy";
	}
	return "unknown";
}

const char *
proto_error_code_str(uint8_t code)
{
	switch (code) {
	case ERR_MALFORMED:
		return "malformed";
	case ERR_AUTH:
		return "auth";
	case ERR_STALE:
		return "stale";
	case ERR_REPLAY:
		return "replay";
	case ERR_VERSION:
		return "version";
	case ERR_TYPE:
		return "type";
	}
	return "unknown";
}

/*
 * An unknown type is MALFORMED, not TYPE: ERR_TYPE is for an authentic,
 * well-formed message that does not belong on the channel, after which the
 * stream is still in sync; after an unknown type it is not.
 */
uint8_t
proto_error_for(enum proto_err e)
{
	switch (e) {
	case PERR_NONE:
		return 0;
	case PERR_VERSION:
		return ERR_VERSION;
	case PERR_MAC:
	case PERR_SENDER:
		return ERR_AUTH;
	case PERR_MAGIC:
	case PERR_LENGTH:
	case PERR_TYPE:
	case PERR_BODY:
		return ERR_MALFORMED;
	}
	return ERR_MALFORMED;
}

/* Nonces come from the kernel's CSPRNG, NONCE_BATCH at a time: one
 * getrandom() per batch instead of one per 32 bits (each arc4random() is a
 * system call with this glibc), and as unpredictable. Per thread; a forked
 * child drops its parent's batch, never to send the parent's next nonces. */
#define NONCE_BATCH 64

static _Thread_local struct {
	uint64_t v[NONCE_BATCH];
	unsigned int left;
} nonces;
static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;

static void
nonce_atfork_child(void)
{
	nonces.left = 0;
}

static void
nonce_init(void)
{
	(void)pthread_atfork(NULL, NULL, nonce_atfork_child);
}

static uint64_t
nonce_next(void)
{
	if (nonces.left == 0) {
		(void)pthread_once(&nonce_once, nonce_init);
		arc4random_buf(nonces.v, sizeof(nonces.v));
		nonces.left = NONCE_BATCH;
	}
	return nonces.v[--nonces.left];
}

void
proto_stamp(struct proto_msg *m)
{
	m->ts_us = clock_real_us();
	m->nonce = nonce_next();
}
