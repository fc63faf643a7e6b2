/* The RTT matrix loaders of src/core/rttmat.c (slot-dird's grouping input,
 * slot-sim's data sets): the first byte, taken off, picks the loader and
 * its bound: a pairs CSV (column "avg"), a square matrix, or a servers CSV
 * renaming the nodes of a small pairs matrix. A matrix loaded must be
 * symmetric, with a zero diagonal and values finite, >= 0 and within the
 * bound, or NaN. */
#include <math.h>

#include "slot/rttmat.h"
#include "fuzz.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

static void
check(const struct rttmat *m, double max_ms)
{
	for (size_t i = 0; i < m->n; i++) {
		FUZZ_CHECK(rttmat_get(m, i, i) == 0);
		for (size_t j = 0; j < i; j++) {
			double v = rttmat_get(m, i, j), w = rttmat_get(m, j, i);
			FUZZ_CHECK((isnan(v) && isnan(w)) || v == w);
			FUZZ_CHECK(isnan(v) || (v > 0 && (max_ms == 0 || v <= max_ms)));
		}
		if (m->names && m->names[i])
			FUZZ_CHECK(rttmat_find(m, m->names[i]) >= 0);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char pairs[] = "source,destination,avg\na,b,10\nb,c,20\nc,a,5\n";
	struct rttmat m = { 0 };
	struct rttmat_report rep;
	char err[512];
	double max_ms;
	int sel;

	if (size < 1)
		return 0;
	sel = data[0] % 3;
	max_ms = data[0] & 0x80 ? 0 : 1000;
	data++;
	size--;
	switch (sel) {
	case 0:
		if (rttmat_load_pairs(fuzz_file(data, size), "avg", max_ms, &m, &rep, err,
		    sizeof(err)) == 0)
			check(&m, max_ms);
		else
			fuzz_say("pairs", err);
		break;
	case 1:
		if (rttmat_load_square(fuzz_file(data, size), max_ms, &m, &rep, err,
		    sizeof(err)) == 0)
			check(&m, max_ms);
		else
			fuzz_say("square", err);
		break;
	default:
		FUZZ_CHECK(rttmat_load_pairs(fuzz_file((const uint8_t *)pairs, sizeof(pairs) - 1),
		    "avg", 0, &m, &rep, err, sizeof(err)) == 0);
		if (rttmat_names_from_servers(&m, fuzz_file(data, size), err, sizeof(err)) >= 0)
			check(&m, 0);
		else
			fuzz_say("servers", err);
		break;
	}
	rttmat_free(&m);
	return 0;
}
