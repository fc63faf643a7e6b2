/* The directory client's reading of slot.list answers (dirc_list_read in
 * src/core/dirclient.c), on answers as xmlrpc-c parses them off the wire.
 * A malformed answer must fail cleanly: xmlrpc-c frees what it had
 * decomposed when a later member is missing or mistyped, and an answer
 * without "relays", or landmarks without "rtt", used to be freed twice
 * (found by tests/fuzz/fuzz_dirclient), and a landmark index that is not
 * an integer leaked its weight (LeakSanitizer in make asan-unit). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <xmlrpc-c/base.h>

#include "slot/dirclient.h"

/* The answer xml's result; fails the test on a parse error or a fault. */
static xmlrpc_value *
parse(const char *xml)
{
	xmlrpc_env env;
	xmlrpc_value *res = NULL;
	const char *fs = NULL;
	int fc = 0;

	xmlrpc_env_init(&env);
	xmlrpc_parse_response2(&env, xml, strlen(xml), &res, &fc, &fs);
	assert_false(env.fault_occurred);
	assert_null(fs);
	assert_non_null(res);
	xmlrpc_env_clean(&env);
	return res;
}

#define HEAD "<?xml version='1.0'?><methodResponse><params><param><value><struct>"
#define TAIL "</struct></value></param></params></methodResponse>"
#define MEMBER(n, v) "<member><name>" n "</name><value>" v "</value></member>"
#define VERSION MEMBER("version", "<string>0123456789abcdef-3</string>")
#define CHANGED MEMBER("changed", "<boolean>1</boolean>")
#define RELAY(ep, dp, g) "<value><struct>" MEMBER("relay", "<string>" ep "</string>") \
	MEMBER("data_port", "<int>" dp "</int>") MEMBER("group", "<int>" g "</int>") \
	"</struct></value>"
#define RELAYS MEMBER("relays", "<array><data>" RELAY("192.0.2.1:7600", "7601", "0") \
	RELAY("[2001:db8::3]:7600", "7602", "4") "</data></array>")
#define INDEX MEMBER("index", "<array><data><value><int>1</int></value></data></array>")
#define WEIGHT MEMBER("weight", "<array><data><value><double>2</double></value></data></array>")
/* Relay 0: 1.5 ms, relay 1: 0 (itself), little-endian units of 100 us. */
#define RTT MEMBER("rtt", "<base64>DwAAAA==</base64>")
#define LANDMARKS(m) MEMBER("landmarks", "<struct>" m "</struct>")

static int
read_answer(const char *xml, char *err, size_t errlen, size_t *n,
    struct dirc_relay **out, struct dirc_landmarks *land)
{
	xmlrpc_value *res = parse(xml);
	char ver[DIRC_VERSION_MAX];
	bool changed = false;
	int rc;

	rc = dirc_list_read(res, ver, &changed, out, n, land, err, errlen);
	xmlrpc_DECREF(res);
	return rc;
}

static void
test_valid(void **state)
{
	struct dirc_relay *r = NULL;
	struct dirc_landmarks land;
	char err[256], b[EP_STRLEN];
	size_t n = 0;
	(void)state;

	assert_int_equal(read_answer(HEAD VERSION CHANGED RELAYS LANDMARKS(INDEX WEIGHT RTT) TAIL,
	    err, sizeof(err), &n, &r, &land), 0);
	assert_int_equal(n, 2);
	assert_string_equal(ep_fmt(&r[1].relay, b), "[2001:db8::3]:7600");
	assert_int_equal(r[1].data_port, 7602);
	assert_int_equal(r[1].group, 4);
	assert_int_equal(land.nland, 1);
	assert_int_equal(land.index[0], 1);
	assert_int_equal(land.rtt[0], 15);
	assert_int_equal(land.rtt[1], 0);
	dirc_landmarks_free(&land);
	free(r);
}

/* Each answer is refused with the reason, and nothing is freed twice (ASan
 * in make asan-unit; glibc's own check aborts the plain build). */
static void
test_malformed(void **state)
{
	static const char *const bad[] = {
		HEAD VERSION CHANGED TAIL,					/* no relays */
		HEAD VERSION CHANGED MEMBER("relays", "<string>x</string>") TAIL,
		HEAD VERSION MEMBER("changed", "<int>1</int>") RELAYS TAIL,
		HEAD MEMBER("version", "<int>3</int>") CHANGED RELAYS TAIL,
		HEAD VERSION CHANGED RELAYS LANDMARKS(INDEX WEIGHT) TAIL,	/* no rtt */
		HEAD VERSION CHANGED RELAYS LANDMARKS(INDEX RTT) TAIL,		/* no weight */
		HEAD VERSION CHANGED RELAYS LANDMARKS(INDEX WEIGHT
		    MEMBER("rtt", "<string>x</string>")) TAIL,
		HEAD VERSION CHANGED RELAYS LANDMARKS(MEMBER("index", "<array><data><value>"
		    "<string>x</string></value></data></array>") WEIGHT RTT) TAIL,	/* leaked */
		HEAD VERSION CHANGED MEMBER("relays", "<array><data>"
		    "<value><struct>" MEMBER("relay", "<string>192.0.2.1:7600</string>")
		    MEMBER("data_port", "<string>7601</string>") "</struct></value>"
		    "</data></array>") TAIL,
	};
	(void)state;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct dirc_relay *r = (void *)1;
		struct dirc_landmarks land;
		char err[256] = "";
		size_t n = 99;

		assert_int_equal(read_answer(bad[i], err, sizeof(err), &n, &r, &land), -1);
		assert_null(r);
		assert_int_equal(n, 0);
		assert_int_equal(land.nland, 0);
		assert_true(err[0] != '\0');
	}
}

/* The text form (format "text"): relays 192.0.2.1:7600 (7601, group 0) and
 * [2001:db8::3]:7600 (7602, group 4), landmark relay 1 of weight 2, the rows
 * RTT above with their SHA-256 in the landmarks line. TEXT_BAD_INDEX names
 * landmark relay 2 of 2. */
#define TEXT_OK "c2xvdC1saXN0aW5nLzEKbm9uY2UgMDEyMzQ1Njc4OWFiY2RlZgp2ZXJzaW9uIDAxMjM0" \
	"NTY3ODlhYmNkZWYtMwpjaGFuZ2VkIDEKcmVsYXlzIDIKcmVsYXkgMTkyLjAuMi4xOjc2MDAgNzYwMSAw" \
	"IC0KcmVsYXkgWzIwMDE6ZGI4OjozXTo3NjAwIDc2MDIgNCAtCmxhbmRtYXJrcyAxIDk3MmI4MzczYjg5" \
	"N2M2NWM0ZjYzMWM2YmRmMjQ0M2QwZDgxN2E4OGYyMjRiNTRkOGU1OTNmZGNmMzI0ODhkNjAKbGFuZG1h" \
	"cmsgMSAyCnJldm9rZWQgMAo="
#define TEXT_BAD_INDEX "c2xvdC1saXN0aW5nLzEKbm9uY2UgMDEyMzQ1Njc4OWFiY2RlZgp2ZXJzaW9uIDAx" \
	"MjM0NTY3ODlhYmNkZWYtMwpjaGFuZ2VkIDEKcmVsYXlzIDIKcmVsYXkgMTkyLjAuMi4xOjc2MDAgNzYw" \
	"MSAwIC0KcmVsYXkgWzIwMDE6ZGI4OjozXTo3NjAwIDc2MDIgNCAtCmxhbmRtYXJrcyAxIDk3MmI4Mzcz" \
	"Yjg5N2M2NWM0ZjYzMWM2YmRmMjQ0M2QwZDgxN2E4OGYyMjRiNTRkOGU1OTNmZGNmMzI0ODhkNjAKbGFu" \
	"ZG1hcmsgMiAyCnJldm9rZWQgMAo="
#define TEXT(t) MEMBER("format", "<string>text</string>") MEMBER("text", "<base64>" t \
	"</base64>")

static void
test_text_form(void **state)
{
	static const char *const bad[] = {
		HEAD TEXT(TEXT_OK) TAIL,				/* rows missing */
		HEAD TEXT(TEXT_OK) MEMBER("rtt", "<base64>DwAAAQ==</base64>") TAIL,
		HEAD TEXT(TEXT_OK) MEMBER("rtt", "<base64>DwAAAAAA</base64>") TAIL,
		HEAD TEXT(TEXT_BAD_INDEX) RTT TAIL,
		HEAD TEXT("c2xvdA==") RTT TAIL,				/* "slot" */
		HEAD MEMBER("text", "<string>x</string>") TAIL,
	};
	struct dirc_relay *r = NULL;
	struct dirc_landmarks land;
	char err[256];
	size_t n = 0;

	(void)state;
	assert_int_equal(read_answer(HEAD TEXT(TEXT_OK) RTT TAIL, err, sizeof(err), &n, &r,
	    &land), 0);
	assert_int_equal(n, 2);
	assert_int_equal(r[1].relay.port, 7600);
	assert_int_equal(r[1].data_port, 7602);
	assert_int_equal(r[1].group, 4);
	assert_int_equal(land.nland, 1);
	assert_int_equal(land.index[0], 1);
	assert_true(land.weight[0] == 2);
	assert_int_equal(land.rtt[0], 15);
	assert_int_equal(land.rtt[1], 0);
	free(r);
	dirc_landmarks_free(&land);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = (void *)1;
		n = 99;
		err[0] = '\0';
		assert_int_equal(read_answer(bad[i], err, sizeof(err), &n, &r, &land), -1);
		assert_null(r);
		assert_int_equal(n, 0);
		assert_int_equal(land.nland, 0);
		assert_true(err[0] != '\0');
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_text_form),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
