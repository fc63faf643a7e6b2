/* dirc_fetch against a directory served from this process (a thread on
 * 127.0.0.1 answering each call with what the test builds for its nonce):
 * a listing's text form, large or signed, is taken whole; an answer past
 * DIRC_MAX_TREE dense in XML elements is refused before xmlrpc-c parses it
 * (its tree would take ~55 times the answer); a tree below it, the form of
 * a slot-dird that knows no text form, is still read; a text that answers
 * another call, rows that are not the ones hashed, and a signed text
 * altered on the way are refused. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <sodium.h>

#include "slot/dirclient.h"
#include "slot/dirproto.h"
#include "slot/ident.h"

/* What the served answer is made of, per test. */
enum shape { TEXT, TREE_FLOOD, TREE_SMALL, TEXT_OTHER_NONCE, TEXT_BAD_ROWS, SIGNED,
	SIGNED_ALTERED };

static struct {
	int lfd;
	uint16_t port;
	pthread_t thread;
	enum shape shape;
	size_t nrelay, nland;
	struct ident dir;		/* SIGNED*: the directory */
	uint8_t ca_pk[IDENT_PK_LEN];
	uint8_t ca_seed[IDENT_SEED_LEN];
	uint8_t (*rcert)[IDENT_CERT_LEN];	/* SIGNED*: the relays' */
} S;

/* Appends to a growing string. */
struct buf {
	char *p;
	size_t len, cap;
};

static void
put(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void
put_b64(struct buf *b, const void *bin, size_t n)
{
	size_t cap = sodium_base64_encoded_len(n, sodium_base64_VARIANT_ORIGINAL);
	char *s = malloc(cap);

	assert_non_null(s);
	sodium_bin2base64(s, cap, bin, n, sodium_base64_VARIANT_ORIGINAL);
	puts_(b, s);
	free(s);
}

static void
member(struct buf *b, const char *name, const char *type, const char *val)
{
	puts_(b, "<member><name>");
	puts_(b, name);
	puts_(b, "</name><value><");
	puts_(b, type);
	puts_(b, ">");
	puts_(b, val);
	puts_(b, "</");
	puts_(b, type);
	puts_(b, "></value></member>");
}

#define HEAD "<?xml version='1.0'?><methodResponse><params><param><value>"
#define TAIL "</value></param></params></methodResponse>"

/* Relay i's RTT to landmark l, units of 100 us. */
static uint16_t
rtt_of(size_t i, size_t l)
{
	return (uint16_t)((i * 7 + l * 13) % 60000);
}

/* The text-form answer to the call with this nonce. */
static void
text_answer(struct buf *b, const char *nonce)
{
	size_t n = S.nrelay, L = S.nland;
	struct dirp_list_relay *r = calloc(n ? n : 1, sizeof(*r));
	char (*ep)[32] = calloc(n ? n : 1, sizeof(*ep));
	uint32_t *idx = calloc(L ? L : 1, sizeof(*idx));
	float *w = calloc(L ? L : 1, sizeof(*w));
	uint8_t *rows = malloc(2 * n * L + 1);
	size_t len;

	assert_true(r && ep && idx && w && rows);
	for (size_t i = 0; i < n; i++) {
		snprintf(ep[i], sizeof(ep[i]), "10.%zu.%zu.%zu:7600", i >> 16, (i >> 8) & 255,
		    i & 255);
		r[i] = (struct dirp_list_relay){ ep[i], 7601, (uint32_t)(i % 50), NULL };
		if (S.shape == SIGNED || S.shape == SIGNED_ALTERED)
			r[i].cert = S.rcert[i];
	}
	for (size_t l = 0; l < L; l++) {
		idx[l] = (uint32_t)(l * 3 % n);
		w[l] = (float)(l + 1) / 3;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < L; l++) {
			uint16_t v = rtt_of(i, l);

			rows[2 * (i * L + l)] = (uint8_t)v;
			rows[2 * (i * L + l) + 1] = (uint8_t)(v >> 8);
		}
	struct dirp_listing dl = {
		.nonce = S.shape == TEXT_OTHER_NONCE ? "0000000000000000" : nonce,
		.version = "v1", .changed = true, .relay = r, .nrelay = n,
		.land_index = idx, .land_weight = w, .nland = L,
		.land_rtt = rows, .land_rtt_len = 2 * n * L,
	};
	char *text = dirp_list_text(&dl, &len);

	assert_non_null(text);
	puts_(b, HEAD "<struct>");
	member(b, "format", "string", "text");
	if (S.shape == SIGNED || S.shape == SIGNED_ALTERED) {
		uint8_t sig[IDENT_SIG_LEN];
		char hex[2 * IDENT_CERT_LEN + 1];

		dirp_list_sign(&S.dir, text, len, sig);
		sodium_bin2hex(hex, sizeof(hex), sig, sizeof(sig));
		member(b, "sig", "string", hex);
		sodium_bin2hex(hex, sizeof(hex), S.dir.cert.raw, IDENT_CERT_LEN);
		member(b, "cert", "string", hex);
		if (S.shape == SIGNED_ALTERED)
			text[strlen(DIRP_LIST_MAGIC) + 20] ^= 1;	/* in the version line */
	}
	puts_(b, "<member><name>text</name><value><base64>");
	put_b64(b, text, len);
	puts_(b, "</base64></value></member>");
	if (L > 0) {
		if (S.shape == TEXT_BAD_ROWS)
			rows[0] ^= 1;
		puts_(b, "<member><name>rtt</name><value><base64>");
		put_b64(b, rows, 2 * n * L);
		puts_(b, "</base64></value></member>");
	}
	puts_(b, "</struct>" TAIL);
	free(text);
	free(r);
	free(ep);
	free(idx);
	free(w);
	free(rows);
}

static void
answer(struct buf *b, const char *nonce)
{
	switch (S.shape) {
	case TREE_FLOOD:
		/* Elements only, past DIRC_MAX_TREE. */
		puts_(b, HEAD "<array><data>");
		while (b->len < DIRC_MAX_TREE + 4096)
			puts_(b, "<value/><value/><value/><value/><value/><value/><value/><value/>");
		puts_(b, "</data></array>" TAIL);
		return;
	case TREE_SMALL:
		puts_(b, HEAD "<struct>");
		member(b, "version", "string", "v2");
		member(b, "changed", "boolean", "1");
		puts_(b, "<member><name>relays</name><value><array><data><value><struct>");
		member(b, "relay", "string", "192.0.2.1:7600");
		member(b, "data_port", "int", "7601");
		member(b, "group", "int", "3");
		puts_(b, "</struct></value></data></array></value></member></struct>" TAIL);
		return;
	default:
		text_answer(b, nonce);
	}
}

/* The nonce of the call in req ("<name>nonce</name><value><string>HEX"). */
static void
nonce_of(const char *req, char out[DIRP_NONCE_HEX + 1])
{
	const char *p = strstr(req, "<name>nonce</name>");

	out[0] = '\0';
	if (p != NULL && (p = strstr(p, "<string>")) != NULL) {
		memcpy(out, p + 8, DIRP_NONCE_HEX);
		out[DIRP_NONCE_HEX] = '\0';
	}
}

static void *
serve(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(S.lfd, NULL, NULL);
		char req[65536], nonce[DIRP_NONCE_HEX + 1], head[200];
		size_t got = 0;
		struct buf b = { 0 };

		if (fd < 0)
			return NULL;
		/* The whole call: headers, then Content-Length bytes. */
		for (;;) {
			ssize_t k = read(fd, req + got, sizeof(req) - 1 - got);
			char *h, *cl;

			if (k <= 0)
				break;
			got += (size_t)k;
			req[got] = '\0';
			if ((h = strstr(req, "\r\n\r\n")) != NULL &&
			    (cl = strcasestr(req, "content-length:")) != NULL &&
			    got >= (size_t)(h + 4 - req) + strtoul(cl + 15, NULL, 10))
				break;
		}
		nonce_of(req, nonce);
		answer(&b, nonce);
		int hl = snprintf(head, sizeof(head), "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\n"
		    "Content-Length: %zu\r\nConnection: close\r\n\r\n", b.len);
		if (write(fd, head, (size_t)hl) == hl) {
			for (size_t off = 0; off < b.len;) {
				ssize_t k = write(fd, b.p + off, b.len - off);
				if (k <= 0)
					break;
				off += (size_t)k;
			}
		}
		free(b.p);
		close(fd);
	}
}

static int
setup(void **state)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	char err[200];

	(void)state;
	assert_int_equal(dirc_global_init(err, sizeof(err)), 0);
	S.lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(S.lfd >= 0);
	assert_int_equal(bind(S.lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(S.lfd, 8), 0);
	assert_int_equal(getsockname(S.lfd, (struct sockaddr *)&a, &al), 0);
	S.port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&S.thread, NULL, serve, NULL), 0);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	shutdown(S.lfd, SHUT_RDWR);
	close(S.lfd);
	pthread_join(S.thread, NULL);
	ident_wipe(&S.dir);
	dirc_global_fini();
	return 0;
}

/* dirc_fetch in shared mode, or in identity mode when ident is set. */
static int
fetch(struct dirc_listing *l, char *err, size_t errlen, bool ident)
{
	struct auth_key key = { { 0 } };
	char url[64];
	struct dirclient *c = dirc_new(&key, 20000, err, errlen);
	int rc, fault = 0;

	assert_non_null(c);
	if (ident) {
		struct ident me;
		uint8_t seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN], raw[IDENT_CERT_LEN];
		uint64_t now = (uint64_t)time(NULL);

		ident_keygen(seed, pk);
		assert_int_equal(ident_cert_issue(S.ca_seed, IDENT_ROLE_CLIENT, "client", 7,
		    now - 60, now + 3600, pk, raw, err, errlen), 0);
		assert_int_equal(ident_from_parts(seed, raw, S.ca_pk, IDENT_ANY_ROLE, now, &me,
		    err, errlen), 0);
		dirc_set_ident(c, &me);
		ident_wipe(&me);
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/RPC2", S.port);
	err[0] = '\0';
	rc = dirc_fetch(c, url, "", true, NULL, l, &fault, err, errlen);
	dirc_free(c);
	return rc;
}

static void
test_large_text_taken(void **state)
{
	struct dirc_listing l;
	char err[600];

	(void)state;
	/* Rows of 3,000 x 700 x 2 bytes: 5.6 MB of base64, past DIRC_MAX_TREE. */
	S.shape = TEXT;
	S.nrelay = 3000;
	S.nland = 700;
	assert_true(2 * S.nrelay * S.nland * 4 / 3 > DIRC_MAX_TREE);
	assert_int_equal(fetch(&l, err, sizeof(err), false), 0);
	assert_string_equal(l.version, "v1");
	assert_true(l.changed);
	assert_int_equal(l.n, 3000);
	assert_int_equal(l.relay[2999].data_port, 7601);
	assert_int_equal(l.relay[2999].group, 2999 % 50);
	assert_int_equal(l.land.nland, 700);
	assert_int_equal(l.land.nrelay, 3000);
	assert_int_equal(l.land.index[5], 15);
	assert_true(l.land.weight[5] == (float)6 / 3);
	assert_int_equal(l.land.rtt[1234 * 700 + 321], rtt_of(1234, 321));
	assert_false(l.is_signed);
	dirc_listing_free(&l);
}

static void
test_tree_flood_refused_unparsed(void **state)
{
	struct dirc_listing l;
	char err[600];

	(void)state;
	S.shape = TREE_FLOOD;
	assert_int_equal(fetch(&l, err, sizeof(err), false), -1);
	assert_non_null(strstr(err, "answer refused unparsed"));
	assert_non_null(strstr(err, "XML tags"));
	assert_int_equal(l.n, 0);
}

static void
test_small_tree_still_read(void **state)
{
	struct dirc_listing l;
	char err[600];

	(void)state;
	S.shape = TREE_SMALL;
	assert_int_equal(fetch(&l, err, sizeof(err), false), 0);
	assert_string_equal(l.version, "v2");
	assert_int_equal(l.n, 1);
	assert_int_equal(l.relay[0].group, 3);
	dirc_listing_free(&l);
}

static void
test_text_refused(void **state)
{
	struct dirc_listing l;
	char err[600];

	(void)state;
	S.nrelay = 4;
	S.nland = 2;
	S.shape = TEXT_OTHER_NONCE;
	assert_int_equal(fetch(&l, err, sizeof(err), false), -1);
	assert_non_null(strstr(err, "not an answer to this call"));
	S.shape = TEXT_BAD_ROWS;
	assert_int_equal(fetch(&l, err, sizeof(err), false), -1);
	assert_non_null(strstr(err, "landmark rows of the wrong size or hash"));
	S.shape = TEXT;
	assert_int_equal(fetch(&l, err, sizeof(err), false), 0);
	assert_int_equal(l.n, 4);
	assert_int_equal(l.land.nland, 2);
	dirc_listing_free(&l);
}

static void
test_signed_text(void **state)
{
	uint8_t seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN], raw[IDENT_CERT_LEN];
	uint64_t now = (uint64_t)time(NULL);
	struct dirc_listing l;
	char err[600];

	(void)state;
	ident_keygen(S.ca_seed, S.ca_pk);
	ident_keygen(seed, pk);
	assert_int_equal(ident_cert_issue(S.ca_seed, IDENT_ROLE_DIRECTORY, "dir", 9, now - 60,
	    now + 3600, pk, raw, err, sizeof(err)), 0);
	assert_int_equal(ident_from_parts(seed, raw, S.ca_pk, IDENT_ANY_ROLE, now, &S.dir, err,
	    sizeof(err)), 0);
	S.nrelay = 50;
	S.nland = 5;
	S.rcert = calloc(S.nrelay, sizeof(*S.rcert));
	assert_non_null(S.rcert);
	/* Relay 7's certificate from another CA: left out. */
	for (size_t i = 0; i < S.nrelay; i++) {
		uint8_t other[IDENT_SEED_LEN], opk[IDENT_PK_LEN];

		ident_keygen(other, opk);
		assert_int_equal(ident_cert_issue(i == 7 ? other : S.ca_seed, IDENT_ROLE_RELAY,
		    "relay", 100 + i, now - 60, now + 3600, pk, S.rcert[i], err, sizeof(err)), 0);
	}
	S.shape = SIGNED;
	assert_int_equal(fetch(&l, err, sizeof(err), true), 0);
	assert_true(l.is_signed);
	assert_string_equal(l.dir.name, "dir");
	assert_int_equal(l.land.nland, 5);
	assert_int_equal(l.n, 49);
	assert_int_equal(l.dropped, 1);
	assert_true(l.relay[7].has_cert && l.relay[7].cert.serial == 108);
	assert_non_null(l.text);
	dirc_listing_free(&l);
	S.shape = SIGNED_ALTERED;
	assert_int_equal(fetch(&l, err, sizeof(err), true), -1);
	assert_non_null(strstr(err, "signature does not verify"));
	/* Unsigned text to a client in identity mode. */
	S.shape = TEXT;
	assert_int_equal(fetch(&l, err, sizeof(err), true), -1);
	assert_non_null(strstr(err, "not signed"));
	free(S.rcert);
	S.rcert = NULL;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_large_text_taken),
		cmocka_unit_test(test_tree_flood_refused_unparsed),
		cmocka_unit_test(test_small_tree_still_read),
		cmocka_unit_test(test_text_refused),
		cmocka_unit_test(test_signed_text),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
