/* slot-dird's state file loader (dsnap_parse, src/directory/dsnap.c): the
 * file is the directory's own, but a crash, a full disk or an operator's
 * editor can leave anything in it, and the daemon reads it at start. A
 * state it restores is written out again (dsnap_format) and must load back
 * with the same relays and RTTs. */
#include "../../src/directory/dsnap.h"
#include "fuzz.h"

#define NOW_MONO 5000000000ULL		/* 5000 s after boot */
#define NOW_WALL 1700000000000000ULL	/* 2023-11-14 */

static const struct dstate_params params = {
	.expire_after_us = 90000000ULL,
	.max_relays = 1000,
};

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
	struct dsnap_info info, again;
	struct dstate *s, *s2;
	char err[256], *buf = NULL;
	size_t len = 0;

	s = dsnap_parse((const char *)data, size, &params, NOW_MONO, NOW_WALL, 42, &info,
	    err, sizeof(err));
	if (s == NULL) {
		FUZZ_CHECK(err[0] != '\0');
		fuzz_say("dsnap", err);
		return 0;
	}
	FUZZ_CHECK(info.relays == dstate_count(s));
	FUZZ_CHECK(dsnap_format(s, NOW_MONO, NOW_WALL, info.clean,
	    DSNAP_RTT_BUDGET, &buf, &len, NULL) == 0);
	s2 = dsnap_parse(buf, len, &params, NOW_MONO, NOW_WALL, 42, &again, err, sizeof(err));
	if (s2 == NULL) {
		fprintf(stderr, "formatted state does not load: %s\n%s", err, buf);
		abort();
	}
	FUZZ_CHECK(again.relays == info.relays && again.dropped == 0);
	FUZZ_CHECK(again.rtts == info.rtts);
	dstate_free(s2);
	dstate_free(s);
	free(buf);
	return 0;
}
