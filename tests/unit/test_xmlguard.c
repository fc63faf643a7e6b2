/* Unit tests: xmlguard, the check every XML-RPC body passes before xmlrpc-c
 * parses it: real calls and answers pass; every byte order mark, NUL, "<!"
 * form, invalid UTF-8 and foreign encoding is refused, at the right byte. */

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <xmlrpc-c/base.h>

#include "slot/xmlguard.h"

#define S(lit) (lit), sizeof(lit) - 1

static enum xmlg_result
chk(const char *buf, size_t len, size_t *at)
{
	return xmlg_check(buf, len, at);
}

/* What Python's xmlrpc.client sends and what xmlrpc-c answers. */
static const char py_call[] =
    "<?xml version='1.0'?>\n<methodCall>\n<methodName>slot.heartbeat</methodName>\n"
    "<params>\n<param>\n<value><struct>\n<member>\n<name>relay</name>\n"
    "<value><string>192.0.2.1:7600</string></value>\n</member>\n</struct></value>\n"
    "</param>\n</params>\n</methodCall>\n";
static const char c_answer[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<methodResponse>\r\n<params>\r\n"
    "<param><value><struct>\r\n<member><name>ok</name>\r\n<value><boolean>1</boolean>"
    "</value></member>\r\n</struct></value></param>\r\n</params>\r\n</methodResponse>\r\n";

static void
test_good_bodies_pass(void **state)
{
	size_t at = 99;

	(void)state;
	assert_int_equal(chk(S(py_call), &at), XMLG_OK);
	assert_int_equal(at, 0);
	assert_int_equal(chk(S(c_answer), NULL), XMLG_OK);
	/* No declaration at all; US-ASCII and lower case names; single quotes;
	 * standalone; spaces around '='. */
	assert_int_equal(chk(S("<methodCall><methodName>x</methodName></methodCall>"), NULL),
	    XMLG_OK);
	assert_int_equal(chk(S("<?xml version=\"1.0\" encoding='us-ascii'?><x/>"), NULL), XMLG_OK);
	assert_int_equal(chk(S("<?xml version=\"1.0\" encoding = \"utf-8\" standalone=\"yes\"?>"
	    "<x/>"), NULL), XMLG_OK);
	/* Multi-byte UTF-8 at every length, escaped markup in text. */
	assert_int_equal(chk(S("<s>\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf"
	    " &lt;!DOCTYPE &#60;!ENTITY</s>"), NULL), XMLG_OK);
	/* A '<' or '!' alone is not "<!". */
	assert_int_equal(chk(S("<a>!</a><b/>!<"), NULL), XMLG_OK);
}

static void
test_xmlrpc_c_serialized_call_passes(void **state)
{
	xmlrpc_env env;
	xmlrpc_mem_block *mb;
	xmlrpc_value *params;

	(void)state;
	xmlrpc_env_init(&env);
	mb = XMLRPC_MEMBLOCK_NEW(char, &env, 0);
	params = xmlrpc_build_value(&env, "({s:s,s:i,s:(d)})", "relay", "[2001:db8::1]:7600",
	    "data_port", 7601, "w", 0.5);
	assert_false(env.fault_occurred);
	xmlrpc_serialize_call2(&env, mb, "slot.register", params, xmlrpc_dialect_i8);
	assert_false(env.fault_occurred);
	assert_int_equal(xmlg_check(XMLRPC_MEMBLOCK_CONTENTS(char, mb),
	    XMLRPC_MEMBLOCK_SIZE(char, mb), NULL), XMLG_OK);
	xmlrpc_DECREF(params);
	XMLRPC_MEMBLOCK_FREE(char, mb);
	xmlrpc_env_clean(&env);
}

static void
test_every_bom_refused(void **state)
{
	static const struct {
		const char *b;
		size_t n;
		const char *name;
	} boms[] = {
		{ "\xef\xbb\xbf", 3, "UTF-8" },
		{ "\xff\xfe", 2, "UTF-16LE" },
		{ "\xfe\xff", 2, "UTF-16BE" },
		{ "\xff\xfe\0\0", 4, "UTF-32LE" },
		{ "\0\0\xfe\xff", 4, "UTF-32BE" },
	};
	char buf[64];

	(void)state;
	for (size_t i = 0; i < sizeof(boms) / sizeof(boms[0]); i++) {
		memcpy(buf, boms[i].b, boms[i].n);
		memcpy(buf + boms[i].n, "<x/>", 4);
		assert_int_equal(chk(buf, boms[i].n + 4, NULL), XMLG_BOM);
		assert_string_equal(xmlg_bom_name(buf, boms[i].n + 4), boms[i].name);
	}
	assert_null(xmlg_bom_name(S("<x/>")));
	assert_null(xmlg_bom_name(S("\xff")));
}

static void
test_nul_refused(void **state)
{
	/* UTF-16LE without a mark: "<?xml" as 16-bit units. */
	static const char u16[] = "<\0?\0x\0m\0l\0 \0";
	size_t at = 0;

	(void)state;
	assert_int_equal(chk(u16, sizeof(u16) - 1, &at), XMLG_NUL);
	assert_int_equal(at, 1);
	assert_int_equal(chk("<x>\0</x>", 8, &at), XMLG_NUL);
	assert_int_equal(at, 3);
	assert_int_equal(chk("\0", 1, &at), XMLG_NUL);
}

static void
test_markup_declarations_refused(void **state)
{
	static const char *const bad[] = {
		"<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaa\">]><l>&a;</l>",
		"<!DOCTYPE x SYSTEM \"file:///etc/passwd\"><x/>",
		"<x><!ENTITY a \"b\"></x>",
		"<x><!-- a comment --></x>",
		"<x><![CDATA[ text ]]></x>",
		"<x><!doctype lower></x>",
		"<x><!",
	};
	size_t at;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum xmlg_result r = chk(bad[i], strlen(bad[i]), &at);
		assert_int_equal(r, XMLG_MARKUP_DECL);
		assert_memory_equal(bad[i] + at, "<!", 2);
	}
	assert_int_equal(chk(S("<!DOCTYPE x>"), &at), XMLG_MARKUP_DECL);
	assert_int_equal(at, 0);
}

static void
test_processing_instructions_refused(void **state)
{
	size_t at;

	(void)state;
	assert_int_equal(chk(S("<x><?php x ?></x>"), &at), XMLG_PI);
	assert_int_equal(at, 3);
	assert_int_equal(chk(S("<?xml-stylesheet href=\"a\"?><x/>"), NULL), XMLG_PI);
	assert_int_equal(chk(S("<?xml?><x/>"), NULL), XMLG_PI);
	/* A second declaration is a processing instruction too. */
	assert_int_equal(chk(S("<?xml version='1.0'?><?xml version='1.0'?>"), &at), XMLG_PI);
	assert_int_equal(at, 21);
	/* A declaration that never ends. */
	assert_int_equal(chk(S("<?xml version='1.0' <x/>"), NULL), XMLG_XMLDECL);
}

static void
test_invalid_utf8_refused(void **state)
{
	static const struct {
		const char *s;
		size_t n, at;
	} bad[] = {
		{ "<s>\x80</s>", 8, 3 },		/* a lone continuation byte */
		{ "<s>\xc0\xbc</s>", 9, 3 },		/* overlong '<' */
		{ "<s>\xc1\xbf</s>", 9, 3 },
		{ "<s>\xe0\x80\xbc</s>", 10, 3 },	/* overlong, 3 bytes */
		{ "<s>\xf0\x80\x80\xbc</s>", 11, 3 },	/* overlong, 4 bytes */
		{ "<s>\xed\xa0\x80</s>", 10, 3 },	/* a surrogate, U+D800 */
		{ "<s>\xf4\x90\x80\x80</s>", 11, 3 },	/* U+110000 */
		{ "<s>\xf5\x80\x80\x80</s>", 11, 3 },
		{ "<s>\xff</s>", 8, 3 },
		{ "<s>\xc3</s>", 8, 3 },		/* cut short by '<' */
		{ "<s>\xe2\x82", 6, 3 },		/* cut short by the end */
		{ "<s>\xe9t\xe9</s>", 10, 3 },		/* ISO-8859-1 */
	};
	size_t at;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(chk(bad[i].s, bad[i].n, &at), XMLG_UTF8);
		assert_int_equal(at, bad[i].at);
	}
}

static void
test_foreign_encodings_refused(void **state)
{
	static const char *const bad[] = {
		"<?xml version=\"1.0\" encoding=\"UTF-16\"?><x/>",
		"<?xml version=\"1.0\" encoding=\"utf-16le\"?><x/>",
		"<?xml version=\"1.0\" encoding=\"UTF-32\"?><x/>",
		"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?><x/>",
		"<?xml version=\"1.0\" encoding=\"UTF-7\"?><x/>",
		"<?xml version=\"1.0\" encoding=\"UTF-8 \"?><x/>",
		"<?xml version=\"1.0\" encoding=\"UTF8\"?><x/>",
		"<?xml version=\"1.0\" encoding=UTF-8?><x/>",	/* unquoted */
		"<?xml version=\"1.0\" encoding?><x/>",
		"<?xml version=\"1.0\" encoding=\"UTF-8?><x/>",	/* unterminated */
	};
	size_t at;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(chk(bad[i], strlen(bad[i]), &at), XMLG_ENCODING);
		assert_memory_equal(bad[i] + at, "encoding", 8);
	}
	/* "encoding" outside the declaration is only text. */
	assert_int_equal(chk(S("<?xml version='1.0'?><s>encoding=\"UTF-16\"</s>"), NULL),
	    XMLG_OK);
}

static void
test_empty_and_names(void **state)
{
	(void)state;
	assert_int_equal(xmlg_check("", 0, NULL), XMLG_EMPTY);
	for (int r = XMLG_OK; r <= XMLG_ENCODING; r++)
		assert_true(strlen(xmlg_strerror((enum xmlg_result)r)) > 0);
	assert_string_equal(xmlg_strerror((enum xmlg_result)99), "?");
}

/* Every single-byte change of a good call either passes or is refused; the
 * check never reads out of bounds (ASan watches) whatever the bytes. */
static void
test_every_prefix_and_byte(void **state)
{
	char buf[sizeof(py_call)];

	(void)state;
	for (size_t n = 0; n <= sizeof(py_call) - 1; n++)
		(void)xmlg_check(py_call, n, NULL);
	for (size_t i = 0; i < sizeof(py_call) - 1; i++)
		for (int b = 0; b < 256; b += 7) {
			memcpy(buf, py_call, sizeof(py_call) - 1);
			buf[i] = (char)b;
			enum xmlg_result r = xmlg_check(buf, sizeof(py_call) - 1, NULL);
			assert_true(r <= XMLG_ENCODING);
			if (b == 0)
				assert_int_not_equal(r, XMLG_OK);
		}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_bodies_pass),
		cmocka_unit_test(test_xmlrpc_c_serialized_call_passes),
		cmocka_unit_test(test_every_bom_refused),
		cmocka_unit_test(test_nul_refused),
		cmocka_unit_test(test_markup_declarations_refused),
		cmocka_unit_test(test_processing_instructions_refused),
		cmocka_unit_test(test_invalid_utf8_refused),
		cmocka_unit_test(test_foreign_encodings_refused),
		cmocka_unit_test(test_empty_and_names),
		cmocka_unit_test(test_every_prefix_and_byte),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
