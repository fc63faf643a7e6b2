/* The lib socket's "connect" arguments (src/client/libsrv.c): what any local
 * program may send slotd, cut as client_cb cuts it (at the first newline,
 * at most 511 bytes), parsed by libsrv_parse_connect. A parse that succeeds
 * must leave options slotd can act on. */
#include "../../src/client/libsrv.h"
#include "fuzz.h"

#define REQ_MAX_ 511		/* libsrv.c's REQ_MAX, less the newline */

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
	struct endpoint server;
	struct lib_opts o;
	char err[160], *line, *nl;

	if (size > REQ_MAX_)
		size = REQ_MAX_;
	line = fuzz_cstr(data, size);
	if ((nl = memchr(line, '\n', size)) != NULL)
		*nl = '\0';
	err[0] = '\0';
	if (libsrv_parse_connect(line, &server, &o, err, sizeof(err)) == 0) {
		FUZZ_CHECK(server.port != 0);
		FUZZ_CHECK(server.addr.family == AF_INET || server.addr.family == AF_INET6);
		FUZZ_CHECK(o.navoid <= LIB_AVOID_MAX);
		FUZZ_CHECK(o.deadline_ms <= LIB_DEADLINE_MAX_MS);
		FUZZ_CHECK(!o.has_relay || (o.relay.port != 0 && !lib_opts_avoids(&o, &o.relay)));
	} else {
		/* Every refusal says why. */
		FUZZ_CHECK(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
	}
	free(line);
	return 0;
}
