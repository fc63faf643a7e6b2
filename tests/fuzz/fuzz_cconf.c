/* slotd's (etc/slotd.conf) configuration file, through cconf_load: the core's INI
 * reader (src/core/conf.c over inih, from a memfd, with its line checks),
 * the key table and the value parsers (durations, sizes, endpoints, CIDR
 * and port lists, URLs), then the cross-checks. */
#include "../../src/client/cconf.h"
#include "fuzz.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cconf c;
	char err[512];

	err[0] = '\0';
	if (cconf_load(&c, fuzz_file(data, size), err, sizeof(err)) == 0) {
		cconf_free(&c);
	} else {
		FUZZ_CHECK(err[0] != '\0');
		fuzz_say("cconf", err);
	}
	return 0;
}
