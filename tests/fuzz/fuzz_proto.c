/* The wire codec (src/core/proto.c), as the relay's control stream and the
 * probe sockets use it: proto_decode over a buffer, message after message,
 * with the fixed key. Most inputs fail the MAC, so each input is decoded a
 * second time with a valid MAC written in (the length field says where):
 * that reaches the body decoders. A message that decodes is encoded again,
 * and must decode to the same fields. */
#include "slot/proto.h"
#include "fuzz.h"

static struct auth_key key;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	FUZZ_CHECK(auth_init() == 0);
	fuzz_key(&key);
	return 0;
}

static void
roundtrip(const struct proto_msg *m)
{
	uint8_t buf[PROTO_MAX_LEN];
	struct proto_msg again;
	enum proto_err why;
	size_t used;
	int n;

	(void)proto_type_str(m->type);
	/* A HELLO is signed with its sender's secret key, which we do not
	 * have: it cannot be encoded again, but what decodes must name the
	 * certificate's key as its sender. */
	if (m->type == PROTO_HELLO) {
		FUZZ_CHECK(memcmp(m->sender, m->u.hello.cert.pk, PROTO_PK_LEN) == 0);
		return;
	}
	n = proto_encode(m, &key, buf, sizeof(buf));
	FUZZ_CHECK(n > 0);
	FUZZ_CHECK(proto_decode(buf, (size_t)n, &key, &again, &used, &why) == PROTO_OK);
	FUZZ_CHECK(used == (size_t)n);
	FUZZ_CHECK(memcmp(m, &again, sizeof(again)) == 0);
}

/* Decodes buf as a stream: messages until one is not OK. */
static void
stream(const uint8_t *buf, size_t len)
{
	struct proto_msg m;
	enum proto_err why;
	enum proto_result r;
	size_t used;

	while (len > 0) {
		r = proto_decode(buf, len, &key, &m, &used, &why);
		if (r == PROTO_BAD) {
			FUZZ_CHECK(why != PERR_NONE);
			(void)proto_err_str(why);
			(void)proto_error_for(why);
			return;
		}
		if (r == PROTO_NEED_MORE)
			return;
		FUZZ_CHECK(used >= PROTO_MIN_LEN && used <= len);
		roundtrip(&m);
		buf += used;
		len -= used;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy;
	size_t mlen;

	stream(data, size);
	if (size < 6 || size > 4 * PROTO_MAX_LEN)
		return 0;
	/* Sign the first message where its length field puts the MAC. */
	mlen = (size_t)data[4] << 8 | data[5];
	if (mlen < PROTO_MIN_LEN || mlen > size)
		return 0;
	copy = malloc(size);
	FUZZ_CHECK(copy != NULL);
	memcpy(copy, data, size);
	auth_mac(&key, copy, mlen - AUTH_MAC_LEN, copy + mlen - AUTH_MAC_LEN);
	stream(copy, size);
	free(copy);
	return 0;
}
