/* slotd's relay list cache file (dirsync_cache_read, src/client/dirsync.c),
 * which slotd starts from when the directory is down: read through its own
 * fopen/getline code from a memfd. */
#include <sys/socket.h>

#include "../../src/client/dirsync.h"
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
	char ver[DIRC_VERSION_MAX], err[512];
	struct dirc_relay *r = NULL;
	size_t n = 0;
	int rc;

	rc = dirsync_cache_read(fuzz_file(data, size), ver, &r, &n, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -1);
	if (rc == 0) {
		FUZZ_CHECK(strlen(ver) > 0 && strlen(ver) < DIRC_VERSION_MAX);
		FUZZ_CHECK((n == 0) == (r == NULL));
		for (size_t i = 0; i < n; i++)
			FUZZ_CHECK(r[i].relay.port != 0 && r[i].data_port != 0 &&
			    (r[i].relay.addr.family == AF_INET ||
			    r[i].relay.addr.family == AF_INET6));
		free(r);
	} else {
		FUZZ_CHECK(r == NULL && n == 0 && err[0] != '\0');
		fuzz_say("dirsync", err);
	}
	return 0;
}
