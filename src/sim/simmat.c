#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "slot/errbuf.h"
#include "simmat.h"

/* Microseconds from milliseconds as slot-sim rounds them: to the nearest
 * microsecond, at least 1 (slotd never measures 0). */
static float
simmat_us_from_ms(double ms)
{
	double us = nearbyint(ms * 1000.0);

	return us < 1.0 ? 1.0f : (float)us;
}

/* Aligned to a cache line so that vector loads of a row never split one
 * needlessly. */
static float *
alloc_rows(size_t nrow, size_t stride)
{
	size_t bytes = (nrow > 0 ? nrow : 1) * stride * sizeof(float);
	void *p = NULL;

	if (stride == 0 || nrow > SIZE_MAX / stride / sizeof(float))
		return NULL;
	bytes = (bytes + 63) & ~(size_t)63;
	if (posix_memalign(&p, 64, bytes) != 0)
		return NULL;
	return p;
}

static size_t
padded(size_t n)
{
	return (n + SIMMAT_PAD - 1) / SIMMAT_PAD * SIMMAT_PAD;
}

static const char *
name_of(const struct rttmat *m, size_t i, char *buf, size_t len)
{
	if (m->names != NULL && m->names[i] != NULL)
		return m->names[i];
	snprintf(buf, len, "#%zu", i);
	return buf;
}

int
simmat_from_rttmat(const struct rttmat *m, const char *src, struct simmat *out,
    char *err, size_t errlen)
{
	size_t n = m->n, stride = padded(n);

	out->n = out->stride = 0;
	out->us = NULL;
	if (n < 2) {
		errbuf_set(err, errlen, "%s: %zu node%s: slot-sim needs at least 2",
		    src, n, n == 1 ? "" : "s");
		return -1;
	}
	out->us = alloc_rows(n, stride);
	if (out->us == NULL) {
		errbuf_set(err, errlen, "%s: out of memory for %zu nodes", src, n);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		float *row = out->us + i * stride;

		for (size_t j = 0; j < n; j++) {
			double v = m->d[i * n + j];

			if (i == j) {
				row[j] = 0.0f;
			} else if (isnan(v)) {
				row[j] = INFINITY;
			} else if (nearbyint(v * 1000.0) > SIMMAT_MAX_US) {
				char a[32], b[32];

				errbuf_set(err, errlen, "%s: RTT %s - %s of %g ms is above "
				    "the %.0f ms slot-sim handles", src,
				    name_of(m, i, a, sizeof(a)), name_of(m, j, b, sizeof(b)),
				    v, SIMMAT_MAX_US / 1000.0);
				simmat_free(out);
				return -1;
			} else {
				row[j] = simmat_us_from_ms(v);
			}
		}
		for (size_t j = n; j < stride; j++)
			row[j] = INFINITY;
	}
	out->n = n;
	out->stride = stride;
	return 0;
}

int
simmat_report_input(FILE *f, const char *src, const struct rttmat_report *rep)
{
	int lines = 0;

	if (rep->zero > 0) {
		fprintf(f, "slot-sim: %s: warning: %zu RTT%s of 0 between distinct "
		    "nodes (first at line %lu) taken as missing\n", src, rep->zero,
		    rep->zero == 1 ? "" : "s", rep->zero_line);
		lines++;
	}
	if (rep->above > 0) {
		fprintf(f, "slot-sim: %s: warning: %zu RTT%s above the %.0f ms "
		    "slot-sim handles (first at line %lu, largest %g ms) taken as "
		    "missing\n", src, rep->above, rep->above == 1 ? "" : "s",
		    SIMMAT_MAX_MS, rep->above_line, rep->above_max);
		lines++;
	}
	if (rep->asym > 0) {
		fprintf(f, "slot-sim: %s: note: %zu of the %zu pairs measured both "
		    "ways %s two different RTTs (by up to %.3f ms); each is taken "
		    "as their mean\n", src, rep->asym, rep->both,
		    rep->asym == 1 ? "has" : "have", rep->asym_max);
		lines++;
	}
	return lines;
}

int
simmat_gather(const struct simmat *m, const uint32_t *rows, size_t nrow,
    const uint32_t *cols, size_t ncol, struct simmat *out)
{
	size_t stride = padded(ncol);

	out->n = out->stride = 0;
	out->us = alloc_rows(nrow, stride);
	if (out->us == NULL)
		return -1;
	for (size_t i = 0; i < nrow; i++) {
		const float *src = simmat_row(m, rows != NULL ? rows[i] : i);
		float *dst = out->us + i * stride;

		for (size_t j = 0; j < ncol; j++)
			dst[j] = src[cols[j]];
		for (size_t j = ncol; j < stride; j++)
			dst[j] = INFINITY;
	}
	out->n = ncol;
	out->stride = stride;
	return 0;
}

void
simmat_free(struct simmat *m)
{
	if (m == NULL)
		return;
	free(m->us);
	m->us = NULL;
	m->n = m->stride = 0;
}
