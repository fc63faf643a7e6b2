#ifndef SLOT_RTTMAT_H
#define SLOT_RTTMAT_H

#include <stddef.h>

/*
 * A symmetric matrix of round-trip times between named nodes, in
 * milliseconds; NaN marks a pair never measured, the diagonal is 0. Read
 * from published data sets for slot-dird's grouping and for slot-sim.
 *
 * Both loaders symmetrise: D[i][j] = D[j][i] = the mean of the i->j and
 * j->i values, or the one that exists, or NaN when neither does. Values must
 * be finite and >= 0. Errors name the place: "path:line: reason" (or
 * "path: reason" when no line applies). On failure *out is left empty
 * (n == 0, no allocations), so rttmat_free on it is harmless.
 *
 * Some input is taken rather than refused, and counted in a struct
 * rttmat_report for the caller to tell (the loaders never print): a 0 off
 * the diagonal is taken as missing (no RTT between two distinct nodes is
 * 0; data sets write 0 for "not measured"), and so is a value above the
 * caller's max_ms; a pair measured both ways with two different values is
 * averaged, as above, and counted.
 */

struct rttmat {
	size_t n;
	double *d;		/* n*n, row-major */
	char **names;		/* n entries; an entry may be NULL */
};

/* What a loader took instead of refusing. A "value" is one direction of a
 * pair: a row of a pairs CSV, an off-diagonal cell of a square matrix. */
struct rttmat_report {
	size_t zero;		/* values of 0: taken as missing */
	unsigned long zero_line;	/* line of the first, 0: none */
	size_t above;		/* values above max_ms: taken as missing */
	unsigned long above_line;	/* line of the first, 0: none */
	double above_max;	/* the largest of them, ms */
	size_t both;		/* pairs with a value each way (after the above) */
	size_t asym;		/* of them, with two different values: averaged */
	double asym_max;	/* the largest |i->j - j->i| among them, ms */
};

/* Allocates an n x n matrix with every pair missing (NaN), a zero diagonal
 * and no names. Returns 0, or -1 (n == 0, too large, out of memory). */
int rttmat_init(struct rttmat *m, size_t n, char *err, size_t errlen);

/* Frees what m holds and leaves it empty; safe on an empty matrix. */
void rttmat_free(struct rttmat *m);

/* D[i][j]; NaN when missing or when i or j is out of range. */
double rttmat_get(const struct rttmat *m, size_t i, size_t j);

/* Index of the node named name, or -1. Linear search. */
long rttmat_find(const struct rttmat *m, const char *name);

/*
 * A CSV of directed pairs: a header line naming the columns, of which
 * "source", "destination" and column (e.g. "avg" or "min") are used, then
 * one row per (source, destination). Fields may be double-quoted; blank
 * lines are skipped; CRLF line ends and a UTF-8 BOM are accepted.
 *
 * Node ids are strings. They are numbered 0..N-1 in sorted order: by
 * integer value when every id is a decimal integer, else by strcmp, so the
 * numbering does not depend on row order; names[i] is the id. Rows with
 * source == destination are skipped (only their value is checked), so an
 * id seen only in such rows is not a node. An empty
 * value field or a missing marker (see rttmat_load_square) means that
 * direction was not measured. A directed pair given twice is an error, even
 * with the same value: two sources mixed into one file should not pass
 * silently. A value above max_ms (> 0; 0: no bound) or of 0 is taken as
 * missing (self rows aside) and counted in *rep, with the asymmetric pairs;
 * rep may be NULL. Returns 0 or -1 (then *rep is zeroed).
 */
int rttmat_load_pairs(const char *path, const char *column, double max_ms,
    struct rttmat *out, struct rttmat_report *rep, char *err, size_t errlen);

/*
 * The plain N x N format: one row per line, values separated by blanks or
 * tabs, no header. Lines that are empty or start with '#' (after blanks) are
 * skipped. Missing markers (any case): "nan", "inf", "infinity", "-", "x".
 * A comma is neither a separator nor a decimal point: a value holding one is
 * refused with a message that says so. The diagonal is read and checked but
 * stored as 0. Every row must have as many values as the first, and there
 * must be as many rows as values per row. Nodes are unnamed. max_ms and rep
 * as for rttmat_load_pairs. Returns 0 or -1.
 */
int rttmat_load_square(const char *path, double max_ms, struct rttmat *out,
    struct rttmat_report *rep, char *err, size_t errlen);

/*
 * Renames nodes from a servers CSV with a header naming at least "id" and
 * "name" (WonderNetwork's servers-*.csv): a node whose current name equals
 * an id there gets that row's name. Others keep theirs. Returns the number
 * of nodes renamed, or -1 (the matrix is unchanged on error).
 */
int rttmat_names_from_servers(struct rttmat *m, const char *servers_csv,
    char *err, size_t errlen);

/* The sub-matrix of the k nodes idx[0..k-1], in that order, names copied.
 * Indices must be < m->n and distinct. Returns 0 or -1. */
int rttmat_select(const struct rttmat *m, const size_t *idx, size_t k,
    struct rttmat *out, char *err, size_t errlen);

#endif
