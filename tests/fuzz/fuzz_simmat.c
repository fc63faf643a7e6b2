/* slot-sim's matrix (src/sim/simmat.c) from a loaded file, as slot-sim does
 * it: rttmat_load_square or _pairs with SIMMAT_MAX_MS (the first byte picks),
 * simmat_from_rttmat, then a gather of every other row. Every cell must be
 * +inf (missing) or a whole number of microseconds within SIMMAT_MAX_US,
 * the diagonal 0, the padding +inf. */
#include <math.h>

#include "../../src/sim/simmat.h"
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
	struct rttmat m = { 0 };
	struct rttmat_report rep;
	struct simmat s = { 0 }, g = { 0 };
	char err[512];
	int rc;

	if (size < 1)
		return 0;
	if (data[0] & 1)
		rc = rttmat_load_pairs(fuzz_file(data + 1, size - 1), "avg", SIMMAT_MAX_MS, &m,
		    &rep, err, sizeof(err));
	else
		rc = rttmat_load_square(fuzz_file(data + 1, size - 1), SIMMAT_MAX_MS, &m, &rep,
		    err, sizeof(err));
	if (rc == -1) {
		fuzz_say("load", err);
		return 0;
	}
	if (simmat_from_rttmat(&m, "fuzz", &s, err, sizeof(err)) == 0) {
		FUZZ_CHECK(s.n == m.n && s.stride >= s.n && s.stride % SIMMAT_PAD == 0);
		for (size_t i = 0; i < s.n; i++) {
			const float *row = simmat_row(&s, i);
			FUZZ_CHECK(row[i] == 0);
			for (size_t j = 0; j < s.stride; j++) {
				float v = row[j];
				if (j >= s.n)
					FUZZ_CHECK(isinf(v));
				else
					FUZZ_CHECK(isinf(v) || (v >= 0 && v <= SIMMAT_MAX_US &&
					    v == floorf(v)));
			}
		}
		uint32_t *idx = calloc(s.n, sizeof(*idx));
		size_t k = 0;
		FUZZ_CHECK(idx != NULL);
		for (size_t i = 0; i < s.n; i += 2)
			idx[k++] = (uint32_t)i;
		FUZZ_CHECK(simmat_gather(&s, idx, k, idx, k, &g) == 0);
		for (size_t i = 0; i < k; i++)
			FUZZ_CHECK(simmat_row(&g, i)[i] == 0);
		free(idx);
		simmat_free(&g);
		simmat_free(&s);
	} else {
		fuzz_say("simmat", err);
	}
	rttmat_free(&m);
	return 0;
}
