/* The XML guard (xmlg_check, src/core/xmlguard.c) that slot-dird runs on
 * every request body and slotd and slot-relayd on every directory answer
 * before xmlrpc-c parses them. What it passes must hold none of what it
 * promises to refuse, and an offset it names must lie within the input. */
#include "slot/xmlguard.h"
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
	uint8_t *buf = malloc(size ? size : 1);	/* exactly sized, for ASan */
	size_t at = (size_t)-1;
	enum xmlg_result r;

	FUZZ_CHECK(buf != NULL);
	memcpy(buf, data, size);
	r = xmlg_check(buf, size, &at);
	(void)xmlg_strerror(r);
	(void)xmlg_bom_name(buf, size);
	if (r == XMLG_OK) {
		FUZZ_CHECK(size > 0);
		FUZZ_CHECK(memchr(buf, '\0', size) == NULL);
		FUZZ_CHECK(memmem(buf, size, "<!", 2) == NULL);
		FUZZ_CHECK(xmlg_bom_name(buf, size) == NULL);
		/* "<?" only at byte 0, the XML declaration. */
		const uint8_t *pi = memmem(buf, size, "<?", 2);
		FUZZ_CHECK(pi == NULL || (pi == buf &&
		    memmem(buf + 2, size - 2, "<?", 2) == NULL));
	} else if (r != XMLG_EMPTY) {
		FUZZ_CHECK(at <= size);
	}
	free(buf);
	return 0;
}
