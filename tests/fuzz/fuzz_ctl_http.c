/* The metrics listener's HTTP request head (src/core/ctlhttp.c), read as
 * ctlsrv.c's client_read_cb reads it: the input arrives in pieces (its first
 * byte, taken off, sets their size), the end of the head is looked for from
 * the last few old bytes on, and a complete head is routed
 * (ctl_http_route). A head that does not end within 4 KiB gets 431. */
#include "slot/ctlsrv.h"
#include "fuzz.h"

#define HEAD_MAX 4096		/* ctlsrv.c's CTL_HTTP_HEAD_MAX */

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
	char *req;
	size_t len = 0, piece;
	int status = 0;

	if (size < 1)
		return 0;
	piece = (size_t)data[0] % 64 + 1;
	data++;
	size--;
	req = malloc(HEAD_MAX + 1);
	FUZZ_CHECK(req != NULL);
	while (status == 0 && len < size) {
		size_t n = size - len < piece ? size - len : piece;
		size_t from = len > 3 ? len - 3 : 0;

		if (n > HEAD_MAX - len)
			n = HEAD_MAX - len;
		memcpy(req + len, data + len, n);
		len += n;
		req[len] = '\0';
		if (ctl_http_head_end(req + from, len - from) != NULL)
			status = ctl_http_route(req, len);
		else if (len == HEAD_MAX)
			status = 431;
	}
	FUZZ_CHECK(status == 0 || status == 200 || status == 400 || status == 404 ||
	    status == 405 || status == 431);
	if (status == 200)
		FUZZ_CHECK(len >= 12 && memcmp(req, "GET /metrics", 12) == 0);
	free(req);
	return 0;
}
