/* The control socket's command line (src/core/ctlcmd.c): what a client of
 * the unix socket sends, cut as ctlsrv.c's client_read_cb cuts it (at the
 * first newline, a CR before it dropped, at most 128 bytes), parsed by
 * ctl_req_parse and ctl_req_parse_arg, which every daemon's command table
 * (ctl_cmd_answer) calls. */
#include <ctype.h>

#include "slot/ctlsrv.h"
#include "fuzz.h"

#define LINE_MAX_ 128		/* ctlsrv.c's CTL_LINE_MAX */

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static void
check(const struct ctl_req *r)
{
	size_t n = strnlen(r->cmd, sizeof(r->cmd));

	FUZZ_CHECK(n > 0 && n < sizeof(r->cmd));
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(isalnum((unsigned char)r->cmd[i]) || r->cmd[i] == '_' ||
		    r->cmd[i] == '-');
	n = strnlen(r->arg, sizeof(r->arg));
	FUZZ_CHECK(n < sizeof(r->arg));
	for (size_t i = 0; i < n; i++)
		FUZZ_CHECK(r->arg[i] > ' ' && r->arg[i] < 0x7f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ctl_req r;
	char *line, *nl;

	if (size > LINE_MAX_)
		size = LINE_MAX_;
	line = fuzz_cstr(data, size);
	if ((nl = memchr(line, '\n', size)) != NULL) {
		*nl = '\0';
		if (nl > line && nl[-1] == '\r')
			nl[-1] = '\0';
	}
	memset(&r, 0x55, sizeof(r));
	if (ctl_req_parse(line, &r) == 0) {
		check(&r);
		FUZZ_CHECK(r.arg[0] == '\0');
	}
	memset(&r, 0x55, sizeof(r));
	if (ctl_req_parse_arg(line, &r) == 0)
		check(&r);
	free(line);
	return 0;
}
