/*
 * The min-max product of paths.h. Rows are taken four at a time, so that
 * each relay's row of D is read once for four output rows: the loop is
 * bound by reading D, not by the two vector operations per element. A
 * relay that cannot shorten any of the four rows (its first hop is no
 * shorter than the longest path the row has) is skipped; that test is
 * exact, since rows only ever get shorter, and the longest paths are
 * measured again every REFRESH relays as they shrink.
 *
 * Measured on the development machine (2-core AMD EPYC VM, gcc 12 -O2,
 * SSE2): see docs/evaluation.md, "Speed".
 */

#include <math.h>
#include <string.h>

#include "paths.h"
#include "vecf.h"

#define REFRESH 32

static float
row_max(const float *row, size_t n)
{
	float m = 0.0f;

	for (size_t j = 0; j < n; j++)
		if (row[j] > m)
			m = row[j];
	return m;
}

static void
extend4(const float *prev, const struct simmat *d, const uint32_t *relay,
    size_t nrelay, float *out)
{
	size_t stride = d->stride;
	float *o0 = out, *o1 = o0 + stride, *o2 = o1 + stride, *o3 = o2 + stride;
	const float *p0 = prev, *p1 = p0 + stride, *p2 = p1 + stride;
	const float *p3 = p2 + stride;
	float m0, m1, m2, m3;

	memcpy(out, prev, 4 * stride * sizeof(*out));
	m0 = row_max(p0, d->n);
	m1 = row_max(p1, d->n);
	m2 = row_max(p2, d->n);
	m3 = row_max(p3, d->n);
	for (size_t k = 0; k < nrelay; k++) {
		size_t r = relay[k];
		float a0 = p0[r], a1 = p1[r], a2 = p2[r], a3 = p3[r];

		if (k % REFRESH == REFRESH - 1) {
			m0 = row_max(o0, d->n);
			m1 = row_max(o1, d->n);
			m2 = row_max(o2, d->n);
			m3 = row_max(o3, d->n);
		}
		if (a0 >= m0 && a1 >= m1 && a2 >= m2 && a3 >= m3)
			continue;
		const float *dr = simmat_row(d, r);
		vecf b0 = vecf_set1(a0), b1 = vecf_set1(a1);
		vecf b2 = vecf_set1(a2), b3 = vecf_set1(a3);

		for (size_t s = 0; s < stride; s += VECF_N) {
			vecf v = vecf_load(dr + s);

			vecf_store(o0 + s, vecf_min(vecf_load(o0 + s), vecf_max(b0, v)));
			vecf_store(o1 + s, vecf_min(vecf_load(o1 + s), vecf_max(b1, v)));
			vecf_store(o2 + s, vecf_min(vecf_load(o2 + s), vecf_max(b2, v)));
			vecf_store(o3 + s, vecf_min(vecf_load(o3 + s), vecf_max(b3, v)));
		}
	}
}

static void
extend1(const float *prev, const struct simmat *d, const uint32_t *relay,
    size_t nrelay, float *out)
{
	float m = row_max(prev, d->n);

	memcpy(out, prev, d->stride * sizeof(*out));
	for (size_t k = 0; k < nrelay; k++) {
		float a = prev[relay[k]];

		if (k % REFRESH == REFRESH - 1)
			m = row_max(out, d->n);
		if (a >= m)
			continue;
		const float *dr = simmat_row(d, relay[k]);
		vecf b = vecf_set1(a);

		for (size_t s = 0; s < d->stride; s += VECF_N)
			vecf_store(out + s, vecf_min(vecf_load(out + s),
			    vecf_max(b, vecf_load(dr + s))));
	}
}

void
paths_extend(const float *prev, size_t nrow, const struct simmat *d,
    const uint32_t *relay, size_t nrelay, float *out)
{
	size_t i = 0, stride = d->stride;

	for (; i + 4 <= nrow; i += 4)
		extend4(prev + i * stride, d, relay, nrelay, out + i * stride);
	for (; i < nrow; i++)
		extend1(prev + i * stride, d, relay, nrelay, out + i * stride);
}
