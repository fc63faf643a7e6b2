#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "slot/errbuf.h"
#include "report.h"

static double
pct(size_t a, size_t b)
{
	return b > 0 ? 100.0 * (double)a / (double)b : NAN;
}

static void
report_row_of(const struct eval_stats *st, struct report_row *r)
{
	r->benefit_pct = pct(st->nbenefit, st->ndirect);
	r->gt25_pct = pct(st->ngt25, st->ndirect);
	r->worse_pct = pct(st->nworse, st->ndirect);
	r->reduction_pct = st->ndirect > 0 ?
	    100.0 * st->sum_reduction / (double)st->ndirect : NAN;
	r->repaired_pct = pct(st->nrepaired, st->nmissing);
	r->median_gain = eval_quantile(st->gain, st->ndirect, 0.5);
	r->p90_gain = eval_quantile(st->gain, st->ndirect, 0.9);
	r->probes = st->ndecided > 0 ? st->sum_probes / (double)st->ndecided : NAN;
	r->decide_ms = st->ndecided > 0 ?
	    st->sum_decide_us / (double)st->ndecided / 1000.0 : NAN;
	r->wait_ratio_median = st->wait_ratio != NULL && st->ndecided > 0 ?
	    eval_quantile(st->wait_ratio, st->ndirect, 0.5) : NAN;
}

/* A number in a table cell: "-" when there is none. */
static void
cell(FILE *f, int width, int prec, double v, const char *unit)
{
	char buf[32];

	if (isnan(v))
		snprintf(buf, sizeof(buf), "-");
	else
		snprintf(buf, sizeof(buf), "%.*f%s", prec, v, unit);
	fprintf(f, " %*s", width, buf);
}

void
report_table(FILE *f, const struct eval_stats *st, size_t n)
{
	fprintf(f, "%-14s %7s %8s %8s %8s %7s %7s %6s %11s %8s %7s\n", "strategy",
	    "probes", "benefit", ">25%", "avg red", "median", "p90", "worse",
	    "repaired", "wait ms", "wait/D");
	for (size_t i = 0; i < n; i++) {
		struct report_row r;
		char rep[48];

		report_row_of(&st[i], &r);
		fprintf(f, "%-14s", st[i].label);
		cell(f, 7, 1, r.probes, "");
		cell(f, 8, 1, r.benefit_pct, "%");
		cell(f, 8, 1, r.gt25_pct, "%");
		cell(f, 8, 1, r.reduction_pct, "%");
		cell(f, 7, 3, r.median_gain, "");
		cell(f, 7, 3, r.p90_gain, "");
		cell(f, 6, 1, r.worse_pct, "%");
		snprintf(rep, sizeof(rep), "%zu/%zu", st[i].nrepaired, st[i].nmissing);
		fprintf(f, " %11s", rep);
		cell(f, 8, 1, r.decide_ms, "");
		cell(f, 7, 3, r.wait_ratio_median, "");
		fputc('\n', f);
	}
}

void
report_sweep_table(FILE *f, const struct eval_stats *st, size_t n,
    const struct eval_stats *ref)
{
	struct report_row rr;

	report_row_of(ref, &rr);
	fprintf(f, "%-14s %7s %8s %8s %8s %12s %12s %8s\n", "strategy", "probes",
	    "benefit", ">25%", "avg red", "of SA red.", "of SA benef.", "wait ms");
	for (size_t i = 0; i < n; i++) {
		struct report_row r;

		report_row_of(&st[i], &r);
		fprintf(f, "%-14s", st[i].label);
		cell(f, 7, 1, r.probes, "");
		cell(f, 8, 1, r.benefit_pct, "%");
		cell(f, 8, 1, r.gt25_pct, "%");
		cell(f, 8, 1, r.reduction_pct, "%");
		cell(f, 12, 1, 100.0 * r.reduction_pct / rr.reduction_pct, "%");
		cell(f, 12, 1, 100.0 * r.benefit_pct / rr.benefit_pct, "%");
		cell(f, 8, 1, r.decide_ms, "");
		cell(f, 7, 3, r.wait_ratio_median, "");
		fputc('\n', f);
	}
}

void
report_relays_table(FILE *f, const struct eval_stats *st, size_t n)
{
	fprintf(f, "%-14s %7s %8s %8s %8s %9s %8s %8s %8s\n", "strategy", "direct",
	    "1 relay", "2 relays", "3 relays", "chain gain", "wait/D", "p99", "max");
	for (size_t i = 0; i < n; i++) {
		const struct eval_stats *s = &st[i];

		fprintf(f, "%-14s", s->label);
		for (int h = 0; h <= SEL_MAX_CHAIN; h++)
			cell(f, h == 0 ? 7 : 8, 1, pct(s->nrelays[h], s->npairs), "%");
		cell(f, 9, 2, s->max_chain > 1 ? s->chain_gain : NAN, "");
		cell(f, 8, 3, eval_quantile(s->wait_ratio, s->ndirect, 0.5), "");
		cell(f, 8, 3, eval_quantile(s->wait_ratio, s->ndirect, 0.99), "");
		cell(f, 8, 3, eval_quantile(s->wait_ratio, s->ndirect, 1.0), "");
		fputc('\n', f);
	}
}

void
report_phi_table(FILE *f, const struct eval_phi *phi, size_t n)
{
	fprintf(f, "%-9s %8s %8s %8s %8s %8s %9s %9s\n", "", "mean", "median",
	    "p90", "p99", "max", "improved", "new path");
	for (size_t i = 0; i < n; i++) {
		const struct eval_phi *p = &phi[i];
		char name[32];

		snprintf(name, sizeof(name), "phi(%u,%u)", p->i, p->i + 1);
		fprintf(f, "%-9s", name);
		cell(f, 8, 3, p->n > 0 ? p->sum / (double)p->n : NAN, "");
		cell(f, 8, 3, eval_quantile(p->ratio, p->n, 0.5), "");
		cell(f, 8, 3, eval_quantile(p->ratio, p->n, 0.9), "");
		cell(f, 8, 3, eval_quantile(p->ratio, p->n, 0.99), "");
		cell(f, 8, 3, eval_quantile(p->ratio, p->n, 1.0), "");
		cell(f, 9, 1, pct(p->nimproved, p->n), "%");
		fprintf(f, " %9zu\n", p->nnew);
	}
}

/* --- CSV --- */

static FILE *
csv_open(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "w");

	if (f == NULL)
		errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
	return f;
}

static int
csv_close(FILE *f, const char *path, char *err, size_t errlen)
{
	int bad = ferror(f);

	if (fclose(f) != 0 || bad) {
		errbuf_set(err, errlen, "%s: write failed", path);
		return -1;
	}
	return 0;
}

/* A number, or an empty field when there is none. */
static void
num(FILE *f, int prec, double v)
{
	if (!isnan(v))
		fprintf(f, "%.*f", prec, v);
}

static const char *
kind_name(enum eval_kind k)
{
	static const char *const names[] = {
		[EVAL_SELECT_ALL] = "select-all", [EVAL_RANDOM_K] = "random",
		[EVAL_RANDGROUP_K] = "randgroup", [EVAL_OPTIMAL] = "optimal",
		[EVAL_COVER] = "cover",
	};

	return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "?";
}

int
report_summary_csv(const char *path, const struct eval_stats *st, size_t n,
    const struct eval_stats *ref, char *err, size_t errlen)
{
	FILE *f = csv_open(path, err, errlen);
	struct report_row rr;

	if (f == NULL)
		return -1;
	if (ref != NULL)
		report_row_of(ref, &rr);
	fprintf(f, "label,kind,k,pairs,direct_pairs,benefit_pct,gt25_pct,"
	    "avg_reduction_pct,worse_pct,median_gain,p90_gain,missing_direct,"
	    "repaired,repaired_pct,probes_per_decision,mean_decision_ms,"
	    "frac_select_all_reduction,frac_select_all_benefit,"
	    "median_wait_over_direct,max_chain,chain_gain,relays1_pct,relays2_pct,"
	    "relays3_pct,max_wait_over_direct\n");
	for (size_t i = 0; i < n; i++) {
		struct report_row r;

		report_row_of(&st[i], &r);
		fprintf(f, "%s,%s,%u,%zu,%zu,", st[i].label, kind_name(st[i].kind),
		    st[i].k, st[i].npairs, st[i].ndirect);
		num(f, 3, r.benefit_pct);
		fputc(',', f);
		num(f, 3, r.gt25_pct);
		fputc(',', f);
		num(f, 3, r.reduction_pct);
		fputc(',', f);
		num(f, 3, r.worse_pct);
		fputc(',', f);
		num(f, 4, r.median_gain);
		fputc(',', f);
		num(f, 4, r.p90_gain);
		fprintf(f, ",%zu,%zu,", st[i].nmissing, st[i].nrepaired);
		num(f, 3, r.repaired_pct);
		fputc(',', f);
		num(f, 2, r.probes);
		fputc(',', f);
		num(f, 3, r.decide_ms);
		fputc(',', f);
		num(f, 4, ref != NULL ? r.reduction_pct / rr.reduction_pct : NAN);
		fputc(',', f);
		num(f, 4, ref != NULL ? r.benefit_pct / rr.benefit_pct : NAN);
		fputc(',', f);
		num(f, 4, r.wait_ratio_median);
		fputc(',', f);
		/* Chains: empty for Optimal, whose paths are not chosen. */
		if (st[i].kind != EVAL_OPTIMAL) {
			fprintf(f, "%u,", st[i].max_chain);
			num(f, 3, st[i].max_chain > 1 ? st[i].chain_gain : NAN);
			for (int h = 1; h <= SEL_MAX_CHAIN; h++) {
				fputc(',', f);
				num(f, 3, pct(st[i].nrelays[h], st[i].npairs));
			}
			fputc(',', f);
			num(f, 4, st[i].wait_ratio != NULL ?
			    eval_quantile(st[i].wait_ratio, st[i].ndirect, 1.0) : NAN);
		} else {
			fputs(",,,,,", f);
		}
		fputc('\n', f);
	}
	return csv_close(f, path, err, errlen);
}

int
report_cdf_csv(const char *path, const struct eval_stats *const *st, size_t n,
    unsigned points, char *err, size_t errlen)
{
	FILE *f = csv_open(path, err, errlen);

	if (f == NULL)
		return -1;
	fprintf(f, "label,kind,k,gain_ratio,cdf\n");
	for (size_t i = 0; i < n; i++) {
		if (st[i]->ndirect == 0)
			continue;
		for (unsigned p = 0; p <= points; p++) {
			double q = (double)p / points;

			fprintf(f, "%s,%s,%u,%.5f,%.5f\n", st[i]->label,
			    kind_name(st[i]->kind), st[i]->k,
			    eval_quantile(st[i]->gain, st[i]->ndirect, q), q);
		}
	}
	return csv_close(f, path, err, errlen);
}

int
report_phi_csv(const char *path, const char *cdf_path, const struct eval_phi *phi,
    size_t n, unsigned points, char *err, size_t errlen)
{
	FILE *f = csv_open(path, err, errlen);

	if (f == NULL)
		return -1;
	fprintf(f, "phi,i,pairs,improved,improved_pct,new_paths,mean,median,p90,"
	    "p99,max\n");
	for (size_t i = 0; i < n; i++) {
		const struct eval_phi *p = &phi[i];

		fprintf(f, "phi_%u_%u,%u,%zu,%zu,", p->i, p->i + 1, p->i, p->n,
		    p->nimproved);
		num(f, 3, pct(p->nimproved, p->n));
		fprintf(f, ",%zu,", p->nnew);
		num(f, 5, p->n > 0 ? p->sum / (double)p->n : NAN);
		fputc(',', f);
		num(f, 5, eval_quantile(p->ratio, p->n, 0.5));
		fputc(',', f);
		num(f, 5, eval_quantile(p->ratio, p->n, 0.9));
		fputc(',', f);
		num(f, 5, eval_quantile(p->ratio, p->n, 0.99));
		fputc(',', f);
		num(f, 5, eval_quantile(p->ratio, p->n, 1.0));
		fputc('\n', f);
	}
	if (csv_close(f, path, err, errlen) < 0)
		return -1;
	if ((f = csv_open(cdf_path, err, errlen)) == NULL)
		return -1;
	fprintf(f, "i,ratio,cdf\n");
	for (size_t i = 0; i < n; i++) {
		if (phi[i].n == 0)
			continue;
		for (unsigned p = 0; p <= points; p++) {
			double q = (double)p / points;

			fprintf(f, "%u,%.5f,%.5f\n", phi[i].i,
			    eval_quantile(phi[i].ratio, phi[i].n, q), q);
		}
	}
	return csv_close(f, cdf_path, err, errlen);
}

/* A name as a CSV field: quoted when it holds a comma or a quote. */
static void
field(FILE *f, const char *s)
{
	if (s == NULL)
		return;
	if (strpbrk(s, ",\"\r\n") == NULL) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s != '\0'; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int
report_groups_csv(const char *path, const struct roles *ro, const uint32_t *group,
    char *const *names, char *err, size_t errlen)
{
	FILE *f = csv_open(path, err, errlen);

	if (f == NULL)
		return -1;
	fprintf(f, "relay,name,group\n");
	for (size_t j = 0; j < ro->nrelay; j++) {
		fprintf(f, "%u,", ro->relay[j]);
		field(f, names != NULL ? names[ro->relay[j]] : NULL);
		fprintf(f, ",%u\n", group[j]);
	}
	return csv_close(f, path, err, errlen);
}

static void
ms(FILE *f, double us)
{
	if (isfinite(us))
		fprintf(f, "%.3f", us / 1000.0);
}

int
report_pairs_csv(const char *path, const struct pairs *pr, char *const *names,
    const float *direct_us, const struct eval_stats *const *st, size_t n,
    char *err, size_t errlen)
{
	FILE *f = csv_open(path, err, errlen);

	if (f == NULL)
		return -1;
	fprintf(f, "client,server,client_name,server_name,direct_ms");
	for (size_t j = 0; j < n; j++) {
		fprintf(f, ",%s_ms", st[j]->label);
		if (st[j]->via != NULL)
			fprintf(f, ",%s_via", st[j]->label);
	}
	fputc('\n', f);
	for (size_t i = 0; i < pr->n; i++) {
		fprintf(f, "%u,%u,", pr->c[i], pr->s[i]);
		field(f, names != NULL ? names[pr->c[i]] : NULL);
		fputc(',', f);
		field(f, names != NULL ? names[pr->s[i]] : NULL);
		fputc(',', f);
		ms(f, direct_us[i]);
		for (size_t j = 0; j < n; j++) {
			uint32_t p = st[j]->path_us[i];

			fputc(',', f);
			ms(f, p == DECIDE_NO_PATH ? INFINITY : (double)p);
			if (st[j]->via != NULL) {
				fputc(',', f);
				if (st[j]->via[i] != UINT32_MAX)
					fprintf(f, "%u", st[j]->via[i]);
			}
		}
		fputc('\n', f);
	}
	return csv_close(f, path, err, errlen);
}
