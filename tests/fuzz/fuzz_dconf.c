/* slot-dird's (etc/dird.conf) configuration file, through dconf_load: the core's INI
 * reader (src/core/conf.c over inih, from a memfd, with its line checks),
 * the key table and the value parsers (durations, sizes, endpoints, CIDR
 * and port lists, URLs), then the cross-checks. */
#include "../../src/directory/dconf.h"
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
	struct dconf c;
	char err[512];

	err[0] = '\0';
	if (dconf_load(&c, fuzz_file(data, size), err, sizeof(err)) == -1) {
		FUZZ_CHECK(err[0] != '\0');
		fuzz_say("dconf", err);
	}
	return 0;
}
