#ifndef SLOT_SIM_REPORT_H
#define SLOT_SIM_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "eval.h"
#include "roles.h"

/*
 * slot-sim's output: readable tables on a stream, and CSV files (a header
 * line, comma-separated, numbers in fixed notation; the same input, options
 * and seed give the same bytes). The CSV writers return 0, or -1 with the
 * reason in err.
 */

/* Percentages of a Table 2 row; NAN where the base is 0. */
struct report_row {
	double benefit_pct;		/* of pairs with a direct RTT */
	double gt25_pct;
	double reduction_pct;		/* average path-RTT reduction */
	double worse_pct;
	double repaired_pct;		/* of pairs without a direct RTT */
	double median_gain, p90_gain;
	double probes;			/* relay probes per decision */
	double decide_ms;		/* mean decision time */
	double wait_ratio_median;	/* median of decision time / direct RTT */
};

/* The Table 2 view of the strategy runs. */
void report_table(FILE *f, const struct eval_stats *st, size_t n);

/* Sweep rows, with the fraction of ref's (Select-All's) average reduction
 * and benefit each achieves. */
void report_sweep_table(FILE *f, const struct eval_stats *st, size_t n,
    const struct eval_stats *ref);

/* Per run: the share of pairs through 0 (direct), 1, 2 and 3 relays, and
 * the wait over the direct RTT (median, 99th percentile, largest). */
void report_relays_table(FILE *f, const struct eval_stats *st, size_t n);

void report_phi_table(FILE *f, const struct eval_phi *phi, size_t n);

/* summary.csv: one row per run; ref (may be NULL) gives the frac_ columns. */
int report_summary_csv(const char *path, const struct eval_stats *st, size_t n,
    const struct eval_stats *ref, char *err, size_t errlen);

/* gain_cdf.csv: label,kind,k,gain_ratio,cdf; the gain ratio at points + 1
 * evenly spaced cumulative fractions (0 .. 1, nearest rank) per run. */
int report_cdf_csv(const char *path, const struct eval_stats *const *st,
    size_t n, unsigned points, char *err, size_t errlen);

/* phi.csv (one row per phi) and phi_cdf.csv (points + 1 quantiles each). */
int report_phi_csv(const char *path, const char *cdf_path,
    const struct eval_phi *phi, size_t n, unsigned points, char *err,
    size_t errlen);

/* groups.csv: relay,name,group. names may be NULL or hold NULL entries. */
int report_groups_csv(const char *path, const struct roles *ro,
    const uint32_t *group, char *const *names, char *err, size_t errlen);

/* pairs.csv: client,server (node indexes),client_name,server_name,
 * direct_ms, then <label>_ms per run, and <label>_via (the relay's node
 * index, empty for direct) for runs that chose one. names may be NULL. */
int report_pairs_csv(const char *path, const struct pairs *pr,
    char *const *names, const float *direct_us,
    const struct eval_stats *const *st, size_t n, char *err, size_t errlen);

#endif
