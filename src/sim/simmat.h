#ifndef SLOT_SIM_SIMMAT_H
#define SLOT_SIM_SIMMAT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "slot/rttmat.h"

/*
 * The matrix slot-sim computes on: RTTs in whole microseconds held in
 * floats, +inf for a missing pair, 0 on the diagonal. Whole microseconds
 * below 2^23 are exact in a float, and so is the sum of two of them, so
 * min, max and the probe arrival time RTT(c,r) + RTT(r,s) are exact and
 * agree with the integer microseconds sel_decide works in. Rows are padded
 * with +inf to a multiple of SIMMAT_PAD columns, so vector loops need no
 * tail, and missing pairs need no test: max(x, inf) = inf, min(x, inf) = x.
 */

#define SIMMAT_PAD	8
#define SIMMAT_MAX_US	8388607.0	/* 2^23 - 1: sums stay exact */
#define SIMMAT_MAX_MS	(SIMMAT_MAX_US / 1000.0)	/* the loaders' max_ms */

struct simmat {
	size_t n;		/* nodes */
	size_t stride;		/* floats per row: n rounded up to SIMMAT_PAD */
	float *us;		/* n * stride, row-major */
};

/* Converts m (symmetric, milliseconds, NaN missing). Fails on fewer than 2
 * nodes, and on an RTT above SIMMAT_MAX_US once rounded, naming the two
 * nodes (loaders given SIMMAT_MAX_MS as max_ms leave none); src names the
 * file in the message. Returns 0 or -1; on failure out is empty. */
int simmat_from_rttmat(const struct rttmat *m, const char *src,
    struct simmat *out, char *err, size_t errlen);

/* Writes to f what a loader of the file src took rather than refused (rep),
 * one line per kind that occurred: "slot-sim: src: warning: ..." for zeros
 * and values above SIMMAT_MAX_MS taken as missing, "slot-sim: src: note:
 * ..." for asymmetric pairs averaged. Returns the number of lines. */
int simmat_report_input(FILE *f, const char *src,
    const struct rttmat_report *rep);

/* A matrix of nrow rows of the columns cols[0..ncol) of m: out row i,
 * column j is m[rows[i]][cols[j]]; rows NULL means rows 0..nrow-1. Padded
 * like any simmat (out->n = ncol, out->stride a multiple of SIMMAT_PAD).
 * Returns 0 or -1 (out of memory). */
int simmat_gather(const struct simmat *m, const uint32_t *rows, size_t nrow,
    const uint32_t *cols, size_t ncol, struct simmat *out);

void simmat_free(struct simmat *m);

static inline const float *
simmat_row(const struct simmat *m, size_t i)
{
	return m->us + i * m->stride;
}

#endif
