/* Error buffers of the core (src/core/errbuf.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "slot/errbuf.h"

static void
test_formats(void **state)
{
	char b[64];
	(void)state;

	errbuf_set(b, sizeof(b), "%s:%d: %s", "f.conf", 12, "bad");
	assert_string_equal(b, "f.conf:12: bad");
}

static void
test_truncates_and_terminates(void **state)
{
	char b[8];
	(void)state;

	memset(b, 'x', sizeof(b));
	errbuf_set(b, sizeof(b), "%s", "a long message");
	assert_string_equal(b, "a long ");
}

static void
test_null_or_empty_buffer_is_ignored(void **state)
{
	char b[4] = "abc";
	(void)state;

	errbuf_set(NULL, 10, "x");
	errbuf_set(b, 0, "zzz");
	assert_string_equal(b, "abc");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_formats),
		cmocka_unit_test(test_truncates_and_terminates),
		cmocka_unit_test(test_null_or_empty_buffer_is_ignored),
	};
	return cmocka_run_group_tests_name("errbuf", tests, NULL, NULL);
}
