/* slot-sim: replays relay selection on an RTT matrix through the selection
 * (sel_sample, sel_decide) and clustering (mcl_groups) code of the
 * daemons, and reports what it gives. See docs/evaluation.md. */

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "slot/errbuf.h"
#include "slot/mcl.h"
#include "slot/rttmat.h"
#include "decide.h"
#include "eval.h"
#include "report.h"
#include "roles.h"
#include "simmat.h"
#include "synth.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

#define EXIT_INPUT	2	/* bad input or bad options */
#define MAX_SWEEP	64
#define MAX_HOPS	8
#define CDF_POINTS	200

struct opts {
	const char *matrix;
	const char *format;		/* NULL: by the file name */
	const char *column;
	const char *names_csv;
	const char *save_matrix;
	struct synth_params synth;	/* synth.n > 0: synthesise */
	const char *clients, *relays, *servers;
	size_t split[3];		/* split[0] > 0: a random split */
	bool run[4];			/* Select-All, Random-k, RandGroup-k, Cover-k */
	size_t landmarks;		/* Cover-k's landmarks; 0: every relay */
	unsigned k;
	unsigned sweep[MAX_SWEEP];
	size_t nsweep;
	struct decide_model model;
	struct mcl_params mcl;
	unsigned hops;
	size_t sample_pairs;
	uint64_t seed;
	const char *out;
	bool per_pair;
	bool verbose;
	bool plain_rank;		/* chains: Cover-k ranks without lead-ins */
	double beside_ms;		/* --beside-rtt */
};

static void
usage(FILE *f)
{
	fprintf(f,
"NAME\n"
"    slot-sim - what relay selection gives on an RTT matrix\n"
"\n"
"SYNOPSIS\n"
"    slot-sim [options] MATRIX\n"
"    slot-sim [options] --synthetic N\n"
"\n"
"DESCRIPTION\n"
"    Replays slotd's relay selection for every (client, server) pair of an RTT\n"
"    matrix, through the daemons' own code: sel_sample picks the relays to\n"
"    probe, sel_decide takes the replies in the order their modelled arrival\n"
"    times give (relay r answers at RTT(c,r) + RTT(r,s), the direct probe\n"
"    completes at RTT(c,s)), and mcl_groups forms RandGroup-k's groups as\n"
"    slot-dird does. Also computes the optimal min-max paths with up to\n"
"    --hops intermediaries. Prints the Slot paper's Table 2 figures per\n"
"    strategy: pairs with benefit (path RTT < direct), with more than 25%%\n"
"    reduction, the average path-RTT reduction, the median and 90th\n"
"    percentile gain ratio (direct / path RTT), pairs made worse, pairs\n"
"    without a direct RTT that a relay repaired, relay probes and the mean\n"
"    wait per decision; and phi(i,i+1) = P_i / P_(i+1), the ratio of the\n"
"    best path RTTs with i and i+1 intermediaries.\n"
"\n"
"INPUT\n"
"    MATRIX is a pairs CSV (header with source, destination and the RTT\n"
"    column; WonderNetwork's pings-*.csv) or a square matrix (one row per\n"
"    line, blank-separated milliseconds, nan/inf/-/x for missing, no\n"
"    header; node names are the 0-based indexes). Pairs are symmetrised.\n"
"    An RTT of 0 between two nodes or above 8389 ms is taken as missing;\n"
"    stderr says how many, and how many pairs differ between directions.\n"
"    -f, --format pairs|square  default: pairs for *.csv, else square\n"
"    -c, --column NAME          RTT column of a pairs CSV (default avg)\n"
"    -n, --names CSV            rename nodes from a servers CSV (id,name)\n"
"    --synthetic N              no MATRIX: N random points on a sphere, RTT\n"
"                               from great-circle distance with per-pair\n"
"                               stretch (seeded by --seed)\n"
"    --synth-stretch X          mean extra route stretch (default 0.5)\n"
"    --synth-missing F          fraction of pairs missing (default 0)\n"
"    --synth-sites S            nodes at S sites, a few hundred microseconds\n"
"                               apart within a site, like PlanetLab's\n"
"                               (default 0: every node its own place)\n"
"    --save-matrix FILE         write the matrix used, square format\n"
"\n"
"ROLES  (default: all-to-all, every unordered pair, every node a relay)\n"
"    --clients LIST, --relays LIST, --servers LIST\n"
"                               LIST: indexes and ranges (0-9,12) or\n"
"                               name:NAME,NAME; a role not given is every\n"
"                               node; pairs: each client with each server\n"
"    --split C:R:S              a seeded random split into C clients, R\n"
"                               relays and S servers, disjoint\n"
"    A pair's own endpoints are never its relays.\n"
"\n"
"SELECTION\n"
"    -s, --strategies LIST      of all, random, randgroup, cover (default all\n"
"                               four; cover is slotd's default)\n"
"    -k K                       relays probed by Random-k, RandGroup-k and\n"
"                               Cover-k (default 20, as slotd)\n"
"    --sweep K,K,...            also Random-k, RandGroup-k and Cover-k for\n"
"                               these k\n"
"    --landmarks N              Cover-k's landmarks among the relays\n"
"                               (default 256, as slot-dird; 0: every relay)\n"
"    --c-wait X                 wait at most X * RTT_direct (default 1.25)\n"
"    --min-gain X               relay only if direct / path >= X (default 1.0;\n"
"                               slotd's default is 1.1)\n"
"    --repair-timeout MS        direct failed: wait this long (default 3000)\n"
"    --relay-timeout MS         a relay's probe_timeout: a server it cannot\n"
"                               reach is reported then (default 2000)\n"
"    --warm                     relays answer from their RTT cache at once\n"
"    --silent-direct            a missing direct pair never answers (black\n"
"                               hole) instead of failing at once\n"
"    --exact                    hand sel_decide every single reply (slow;\n"
"                               the same verdicts, for checking)\n"
"    --max-chain N              relays on a path, 1 to 3 (default 1, the\n"
"                               paper's one relay; slotd's default is 3): a\n"
"                               chain ends at a relay probed, its lead-in\n"
"                               comes from RTT(c,r) and the relays' RTTs to\n"
"                               the landmarks (chain_reach)\n"
"    --chain-gain X             take a chain only if its path * X <= the best\n"
"                               single relay's (default 1.1, as slotd)\n"
"    --plain-rank               with chains, Cover-k ranks as without them\n"
"    --beside-rtt MS            a relay within MS of the server shares its\n"
"                               address prefix (slotd's [select]\n"
"                               server_prefix): Cover-k's first k/2 probes\n"
"                               go by that relay's landmark (default 1; 0:\n"
"                               never)\n"
"    --inflation X              MCL inflation (default 2.0, as slot-dird)\n"
"    --max-intra-rtt MS         split groups wider than MS (default 50, as\n"
"                               slot-dird; 0: no bound)\n"
"    -H, --hops I               optimal paths with up to I intermediaries\n"
"                               (default 4: phi(1,2), phi(2,3), phi(3,4);\n"
"                               0: none)\n"
"    --sample-pairs N           evaluate a seeded sample of N pairs\n"
"    --seed N                   seed of every random choice (default 1)\n"
"\n"
"OUTPUT\n"
"    Tables on stdout. With -o DIR, CSV files in DIR: summary.csv (a row per\n"
"    run), gain_cdf.csv (gain-ratio CDF per run), phi.csv, phi_cdf.csv,\n"
"    groups.csv, and with --per-pair pairs.csv (path RTT per pair and run).\n"
"    -o, --out DIR              write the CSV files (DIR is created)\n"
"    --per-pair                 also pairs.csv\n"
"    -v, --verbose              timings on stderr\n"
"    -h, --help                 this text;  -V, --version\n"
"\n"
"EXIT STATUS\n"
"    0 done; 1 out of memory or an output not written; 2 bad input or\n"
"    options (the message names the file and line).\n"
"\n"
"EXAMPLES\n"
"    slot-sim -n servers-2020-07-19.csv -o out \\\n"
"        pings-2020-07-19-2020-07-20-grouped.csv\n"
"    slot-sim --sweep 4,8,16,32,50,100,150 -H 0 -o out pings.csv\n"
"    slot-sim --relays name:Paris,Frankfurt,Singapore --clients 0-9 mine.txt\n"
"    slot-sim --synthetic 2000 --strategies all -v\n");
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --- options --- */

static int
bad_opt(const char *opt, const char *val, const char *want)
{
	fprintf(stderr, "slot-sim: %s '%s': %s\n", opt, val, want);
	return -1;
}

static int
parse_double(const char *opt, const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) {
		char want[96];

		snprintf(want, sizeof(want), "expected a number from %g to %g", lo, hi);
		return bad_opt(opt, s, want);
	}
	*out = v;
	return 0;
}

static int
parse_size(const char *opt, const char *s, unsigned long long lo,
    unsigned long long hi, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < lo ||
	    v > hi) {
		char want[96];

		snprintf(want, sizeof(want), "expected a whole number from %llu to %llu",
		    lo, hi);
		return bad_opt(opt, s, want);
	}
	*out = v;
	return 0;
}

static int
parse_ms_us(const char *opt, const char *s, double lo, double hi, uint64_t *us)
{
	double v;

	if (parse_double(opt, s, lo, hi, &v) < 0)
		return -1;
	*us = (uint64_t)llround(v * 1000.0);
	return 0;
}

static int
parse_strategies(const char *s, bool run[4])
{
	static const char *const names[] = { "all", "random", "randgroup", "cover" };
	const char *p = s;

	run[0] = run[1] = run[2] = run[3] = false;
	for (;;) {
		size_t len = strcspn(p, ","), i;

		for (i = 0; i < 4; i++)
			if (strlen(names[i]) == len && strncmp(p, names[i], len) == 0)
				break;
		if (i == 4)
			return bad_opt("--strategies", s,
			    "expected a list of all, random, randgroup, cover");
		run[i] = true;
		if (p[len] == '\0')
			return 0;
		p += len + 1;
	}
}

static int
parse_sweep(const char *s, struct opts *o)
{
	const char *p = s;

	o->nsweep = 0;
	for (;;) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(p, &end, 10);
		if (p[0] < '0' || p[0] > '9' || errno != 0 || v < 1 || v > 100000 ||
		    (*end != ',' && *end != '\0') || o->nsweep == MAX_SWEEP)
			return bad_opt("--sweep", s, "expected up to 64 values of k "
			    "from 1 to 100000, comma-separated");
		o->sweep[o->nsweep++] = (unsigned)v;
		if (*end == '\0')
			return 0;
		p = end + 1;
	}
}

static int
parse_split(const char *s, size_t split[3])
{
	unsigned long long v[3];
	const char *p = s;

	for (int i = 0; i < 3; i++) {
		char *end;

		errno = 0;
		v[i] = strtoull(p, &end, 10);
		if (p[0] < '0' || p[0] > '9' || errno != 0 || v[i] == 0 ||
		    v[i] > 1000000 || *end != (i < 2 ? ':' : '\0'))
			return bad_opt("--split", s, "expected C:R:S, three counts of "
			    "at least 1");
		split[i] = (size_t)v[i];
		p = end + 1;
	}
	return 0;
}

enum {
	O_SYNTH = 256, O_SYNTH_STRETCH, O_SYNTH_MISSING, O_SAVE, O_CLIENTS,
	O_RELAYS, O_SERVERS, O_SPLIT, O_SWEEP, O_LANDMARKS, O_CWAIT, O_MINGAIN, O_REPAIR,
	O_RELAYTO, O_WARM, O_SILENT, O_EXACT, O_INFLATION, O_MAXINTRA, O_SAMPLE,
	O_SEED, O_PERPAIR, O_SYNTH_SITES, O_MAXCHAIN, O_CHAINGAIN, O_PLAINRANK, O_BESIDE,
};

static const struct option longopts[] = {
	{ "format", required_argument, NULL, 'f' },
	{ "column", required_argument, NULL, 'c' },
	{ "names", required_argument, NULL, 'n' },
	{ "synthetic", required_argument, NULL, O_SYNTH },
	{ "synth-stretch", required_argument, NULL, O_SYNTH_STRETCH },
	{ "synth-missing", required_argument, NULL, O_SYNTH_MISSING },
	{ "synth-sites", required_argument, NULL, O_SYNTH_SITES },
	{ "save-matrix", required_argument, NULL, O_SAVE },
	{ "clients", required_argument, NULL, O_CLIENTS },
	{ "relays", required_argument, NULL, O_RELAYS },
	{ "servers", required_argument, NULL, O_SERVERS },
	{ "split", required_argument, NULL, O_SPLIT },
	{ "strategies", required_argument, NULL, 's' },
	{ "sweep", required_argument, NULL, O_SWEEP },
	{ "landmarks", required_argument, NULL, O_LANDMARKS },
	{ "c-wait", required_argument, NULL, O_CWAIT },
	{ "min-gain", required_argument, NULL, O_MINGAIN },
	{ "repair-timeout", required_argument, NULL, O_REPAIR },
	{ "relay-timeout", required_argument, NULL, O_RELAYTO },
	{ "warm", no_argument, NULL, O_WARM },
	{ "silent-direct", no_argument, NULL, O_SILENT },
	{ "exact", no_argument, NULL, O_EXACT },
	{ "max-chain", required_argument, NULL, O_MAXCHAIN },
	{ "chain-gain", required_argument, NULL, O_CHAINGAIN },
	{ "plain-rank", no_argument, NULL, O_PLAINRANK },
	{ "beside-rtt", required_argument, NULL, O_BESIDE },
	{ "inflation", required_argument, NULL, O_INFLATION },
	{ "max-intra-rtt", required_argument, NULL, O_MAXINTRA },
	{ "hops", required_argument, NULL, 'H' },
	{ "sample-pairs", required_argument, NULL, O_SAMPLE },
	{ "seed", required_argument, NULL, O_SEED },
	{ "out", required_argument, NULL, 'o' },
	{ "per-pair", no_argument, NULL, O_PERPAIR },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Returns 0 to run, 1 when done (help, version), -1 on a bad option. */
static int
parse_args(int argc, char **argv, struct opts *o)
{
	unsigned long long u;
	uint64_t us;
	double x;
	int ch;

	memset(o, 0, sizeof(*o));
	o->column = "avg";
	synth_params_default(&o->synth);
	o->run[0] = o->run[1] = o->run[2] = o->run[3] = true;
	o->landmarks = 256;
	o->beside_ms = 1;
	o->k = 20;
	decide_model_default(&o->model);
	mcl_params_default(&o->mcl);
	o->mcl.max_intra_rtt_ms = 50.0;		/* slot-dird's default */
	o->hops = 4;
	o->seed = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":f:c:n:s:k:H:o:vhV", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'f':
			if (strcmp(optarg, "pairs") != 0 && strcmp(optarg, "square") != 0)
				return bad_opt("--format", optarg, "expected pairs or square");
			o->format = optarg;
			break;
		case 'c':
			o->column = optarg;
			break;
		case 'n':
			o->names_csv = optarg;
			break;
		case O_SYNTH:
			if (parse_size("--synthetic", optarg, 2, 20000, &u) < 0)
				return -1;
			o->synth.n = (size_t)u;
			break;
		case O_SYNTH_STRETCH:
			if (parse_double("--synth-stretch", optarg, 0, 10, &o->synth.stretch) < 0)
				return -1;
			break;
		case O_SYNTH_MISSING:
			if (parse_double("--synth-missing", optarg, 0, 0.99,
			    &o->synth.missing) < 0)
				return -1;
			break;
		case O_SYNTH_SITES:
			if (parse_size("--synth-sites", optarg, 0, 20000, &u) < 0)
				return -1;
			o->synth.sites = (size_t)u;
			break;
		case O_SAVE:
			o->save_matrix = optarg;
			break;
		case O_CLIENTS:
			o->clients = optarg;
			break;
		case O_RELAYS:
			o->relays = optarg;
			break;
		case O_SERVERS:
			o->servers = optarg;
			break;
		case O_SPLIT:
			if (parse_split(optarg, o->split) < 0)
				return -1;
			break;
		case 's':
			if (parse_strategies(optarg, o->run) < 0)
				return -1;
			break;
		case 'k':
			if (parse_size("-k", optarg, 1, 100000, &u) < 0)
				return -1;
			o->k = (unsigned)u;
			break;
		case O_SWEEP:
			if (parse_sweep(optarg, o) < 0)
				return -1;
			break;
		case O_LANDMARKS:
			if (parse_size("--landmarks", optarg, 0, 100000, &u) < 0)
				return -1;
			o->landmarks = (size_t)u;
			break;
		case O_CWAIT:
			if (parse_double("--c-wait", optarg, 0.01, 100, &o->model.sel.c_wait) < 0)
				return -1;
			break;
		case O_MINGAIN:
			if (parse_double("--min-gain", optarg, 0.01, 100,
			    &o->model.sel.min_gain) < 0)
				return -1;
			break;
		case O_REPAIR:
			if (parse_ms_us("--repair-timeout", optarg, 1, 600000, &us) < 0)
				return -1;
			o->model.sel.repair_timeout_us = us;
			break;
		case O_RELAYTO:
			/* Arrival times stay below 2^24 us, exact in floats. */
			if (parse_ms_us("--relay-timeout", optarg, 1, 8000, &us) < 0)
				return -1;
			o->model.relay_timeout_us = (uint32_t)us;
			break;
		case O_WARM:
			o->model.warm = true;
			break;
		case O_SILENT:
			o->model.silent_direct = true;
			break;
		case O_EXACT:
			o->model.exact = true;
			break;
		case O_MAXCHAIN:
			if (parse_size("--max-chain", optarg, 1, SEL_MAX_CHAIN, &u) < 0)
				return -1;
			o->model.sel.max_chain = (unsigned)u;
			break;
		case O_CHAINGAIN:
			if (parse_double("--chain-gain", optarg, 1, 100,
			    &o->model.sel.chain_gain) < 0)
				return -1;
			break;
		case O_PLAINRANK:
			o->plain_rank = true;
			break;
		case O_BESIDE:
			if (parse_double("--beside-rtt", optarg, 0, 1000, &o->beside_ms) < 0)
				return -1;
			break;
		case O_INFLATION:
			if (parse_double("--inflation", optarg, 1.05, 10, &o->mcl.inflation) < 0)
				return -1;
			break;
		case O_MAXINTRA:
			if (parse_double("--max-intra-rtt", optarg, 0, 1e6, &x) < 0)
				return -1;
			o->mcl.max_intra_rtt_ms = x;
			break;
		case 'H':
			if (parse_size("--hops", optarg, 0, MAX_HOPS, &u) < 0)
				return -1;
			o->hops = (unsigned)u;
			break;
		case O_SAMPLE:
			if (parse_size("--sample-pairs", optarg, 1, 1ull << 40, &u) < 0)
				return -1;
			o->sample_pairs = (size_t)u;
			break;
		case O_SEED:
			if (parse_size("--seed", optarg, 0, UINT64_MAX, &u) < 0)
				return -1;
			o->seed = u;
			break;
		case 'o':
			o->out = optarg;
			break;
		case O_PERPAIR:
			o->per_pair = true;
			break;
		case 'v':
			o->verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf("slot-sim %s\n", SLOT_VERSION);
			return 1;
		case ':':
			fprintf(stderr, "slot-sim: %s needs a value (slot-sim -h)\n",
			    argv[optind - 1]);
			return -1;
		default:
			fprintf(stderr, "slot-sim: unknown option %s (slot-sim -h)\n",
			    argv[optind - 1]);
			return -1;
		}
	}
	if (o->synth.n > 0) {
		if (optind != argc) {
			fprintf(stderr, "slot-sim: --synthetic takes no MATRIX\n");
			return -1;
		}
		o->synth.seed = o->seed;
	} else if (optind + 1 != argc) {
		fprintf(stderr, "slot-sim: %s (slot-sim -h)\n", optind == argc ?
		    "no MATRIX given" : "one MATRIX only");
		return -1;
	} else {
		o->matrix = argv[optind];
	}
	if (o->split[0] > 0 && (o->clients || o->relays || o->servers)) {
		fprintf(stderr, "slot-sim: --split and --clients/--relays/--servers "
		    "exclude each other\n");
		return -1;
	}
	if (o->per_pair && o->out == NULL) {
		fprintf(stderr, "slot-sim: --per-pair needs --out DIR\n");
		return -1;
	}
	return 0;
}

/* --- the run --- */

struct run {
	struct opts *o;
	const char *src;		/* the matrix, for messages */
	char src_buf[64];
	struct rttmat rm;
	struct simmat d, drbuf;
	const struct simmat *dr;
	struct roles roles;
	struct pairs pairs;
	long *relay_pos;
	uint32_t *group;
	size_t ngroups;
	struct eval_stats opt[MAX_HOPS];
	struct eval_phi phi[MAX_HOPS];
	struct eval_stats main_[4];
	size_t nmain;
	struct eval_stats sweep[3 * MAX_SWEEP];	/* runs of the sweep, owned */
	size_t nsweep;
	/* The sweep's rows in order; a k of the main run is that run's row. */
	const struct eval_stats *sweep_row[3 * MAX_SWEEP];
	size_t nsweep_row;
	struct eval_stats ref;		/* Select-All for the sweep, if not in main_ */
	bool have_ref;
	double t0;
};

static void
timing(const struct run *r, const char *what)
{
	if (r->o->verbose)
		fprintf(stderr, "slot-sim: %-28s %8.2f s\n", what, now_s() - r->t0);
}

static int
load(struct run *r, char *err, size_t errlen)
{
	struct opts *o = r->o;

	if (o->synth.n > 0) {
		snprintf(r->src_buf, sizeof(r->src_buf), "synthetic(%zu, seed %llu)",
		    o->synth.n, (unsigned long long)o->synth.seed);
		r->src = r->src_buf;
		return synth_matrix(&o->synth, &r->rm, err, errlen);
	}
	r->src = o->matrix;
	const char *fmt = o->format;
	size_t len = strlen(o->matrix);
	struct rttmat_report rep;

	if (fmt == NULL)
		fmt = len >= 4 && strcasecmp(o->matrix + len - 4, ".csv") == 0 ?
		    "pairs" : "square";
	if (strcmp(fmt, "pairs") == 0) {
		if (rttmat_load_pairs(o->matrix, o->column, SIMMAT_MAX_MS, &r->rm,
		    &rep, err, errlen) < 0)
			return -1;
		simmat_report_input(stderr, o->matrix, &rep);
		return 0;
	}
	if (rttmat_load_square(o->matrix, SIMMAT_MAX_MS, &r->rm, &rep, err,
	    errlen) < 0)
		return -1;
	simmat_report_input(stderr, o->matrix, &rep);
	/* Unnamed rows: their index is their name, so that name: lists and a
	 * servers CSV keyed by index work. */
	for (size_t i = 0; i < r->rm.n; i++) {
		char buf[24];

		snprintf(buf, sizeof(buf), "%zu", i);
		if ((r->rm.names[i] = strdup(buf)) == NULL) {
			errbuf_set(err, errlen, "out of memory");
			return -1;
		}
	}
	return 0;
}

static int
save_matrix(const struct run *r, const char *path)
{
	FILE *f = fopen(path, "w");
	size_t n = r->rm.n;

	if (f == NULL) {
		fprintf(stderr, "slot-sim: %s: %s\n", path, strerror(errno));
		return -1;
	}
	fprintf(f, "# %s: %zu nodes, RTT in ms, x = missing\n", r->src, n);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			double v = r->rm.d[i * n + j];

			if (isnan(v))
				fputs("x", f);
			else
				fprintf(f, "%.3f", v);
			fputc(j + 1 < n ? ' ' : '\n', f);
		}
	if (ferror(f) | (fclose(f) != 0)) {
		fprintf(stderr, "slot-sim: %s: write failed\n", path);
		return -1;
	}
	return 0;
}

static int
role(const struct run *r, const char *opt, const char *spec, uint32_t **v,
    size_t *nv)
{
	char err[256];

	if (spec == NULL) {
		*nv = r->rm.n;
		*v = malloc(r->rm.n * sizeof(**v));
		if (*v == NULL)
			return -1;
		for (size_t i = 0; i < r->rm.n; i++)
			(*v)[i] = (uint32_t)i;
		return 0;
	}
	if (roles_parse(spec, r->rm.names, r->rm.n, v, nv, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-sim: %s: %s: %s\n", r->src, opt, err);
		return -1;
	}
	return 0;
}

/* Roles, relay columns, groups and pairs. Returns 0, or the exit status. */
static int
setup(struct run *r)
{
	struct opts *o = r->o;
	struct roles *ro = &r->roles;
	char err[512];
	bool groups = o->run[2] || o->nsweep > 0;

	if (o->split[0] > 0) {
		if (roles_split(ro, r->rm.n, o->split[0], o->split[1], o->split[2],
		    o->seed, err, sizeof(err)) < 0) {
			fprintf(stderr, "slot-sim: %s: --split: %s\n", r->src, err);
			return EXIT_INPUT;
		}
	} else if (o->clients == NULL && o->relays == NULL && o->servers == NULL) {
		if (roles_all(ro, r->rm.n) < 0)
			return EXIT_FAILURE;
	} else {
		if (role(r, "--clients", o->clients, &ro->client, &ro->nclient) < 0 ||
		    role(r, "--relays", o->relays, &ro->relay, &ro->nrelay) < 0 ||
		    role(r, "--servers", o->servers, &ro->server, &ro->nserver) < 0)
			return EXIT_INPUT;
	}
	if (roles_pairs(ro, &r->pairs, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-sim: %s: %s\n", r->src, err);
		return EXIT_INPUT;
	}
	if (o->sample_pairs > 0 && roles_pairs_sample(&r->pairs, o->sample_pairs,
	    o->seed ^ 0x5eed5a3b1e9a1c5dull) < 0)
		return EXIT_FAILURE;
	r->relay_pos = malloc(r->rm.n * sizeof(*r->relay_pos));
	if (r->relay_pos == NULL)
		return EXIT_FAILURE;
	for (size_t i = 0; i < r->rm.n; i++)
		r->relay_pos[i] = -1;
	for (size_t j = 0; j < ro->nrelay; j++)
		r->relay_pos[ro->relay[j]] = (long)j;
	/* Every node a relay, in order: the relay columns are d's own. */
	if (ro->nrelay == r->d.n) {
		r->dr = &r->d;
	} else {
		if (simmat_gather(&r->d, NULL, r->d.n, ro->relay, ro->nrelay,
		    &r->drbuf) < 0)
			return EXIT_FAILURE;
		r->dr = &r->drbuf;
	}
	r->group = calloc(ro->nrelay, sizeof(*r->group));
	if (r->group == NULL)
		return EXIT_FAILURE;
	for (size_t j = 0; j < ro->nrelay; j++)
		r->group[j] = (uint32_t)j;
	r->ngroups = ro->nrelay;
	if (groups) {
		struct rttmat sub;
		size_t *idx = malloc(ro->nrelay * sizeof(*idx));
		int rc;

		if (idx == NULL)
			return EXIT_FAILURE;
		for (size_t j = 0; j < ro->nrelay; j++)
			idx[j] = ro->relay[j];
		rc = rttmat_select(&r->rm, idx, ro->nrelay, &sub, err, sizeof(err));
		free(idx);
		if (rc == 0)
			rc = mcl_groups(sub.d, sub.n, &o->mcl, r->group, &r->ngroups,
			    err, sizeof(err));
		rttmat_free(&sub);
		if (rc < 0) {
			fprintf(stderr, "slot-sim: groups: %s\n", err);
			return EXIT_FAILURE;
		}
		timing(r, "groups (MCL)");
	}
	return 0;
}

static void
header(const struct run *r)
{
	const struct opts *o = r->o;
	const struct roles *ro = &r->roles;
	size_t nmissing = 0;

	for (size_t i = 0; i < r->pairs.n; i++)
		nmissing += !isfinite(simmat_row(&r->d, r->pairs.c[i])[r->pairs.s[i]]);
	printf("slot-sim %s: %s", SLOT_VERSION, r->src);
	if (o->synth.n == 0) {
		bool pairs = o->format != NULL ? strcmp(o->format, "pairs") == 0 :
		    strlen(o->matrix) >= 4 &&
		    strcasecmp(o->matrix + strlen(o->matrix) - 4, ".csv") == 0;

		if (pairs)
			printf(" (pairs CSV, column %s)", o->column);
		else
			printf(" (square matrix)");
	} else {
		printf(" (stretch %g, missing %g, sites %zu)", o->synth.stretch,
		    o->synth.missing, o->synth.sites);
	}
	printf("\nnodes %zu; ", r->rm.n);
	if (ro->all_to_all)
		printf("all-to-all: ");
	else
		printf("%zu clients, %zu servers: ", ro->nclient, ro->nserver);
	printf("%zu pairs", r->pairs.n);
	if (o->sample_pairs > 0)
		printf(" (a sample)");
	printf(", %zu without a direct RTT; relays: %zu", nmissing, ro->nrelay);
	if (o->run[2] || o->nsweep > 0) {
		printf(", MCL groups: %zu (inflation %g, ", r->ngroups, o->mcl.inflation);
		if (o->mcl.max_intra_rtt_ms > 0)
			printf("max intra-group RTT %g ms)", o->mcl.max_intra_rtt_ms);
		else
			printf("no intra-group bound)");
	}
	printf("\nmodel: c_wait %g, min_gain %g, repair timeout %g ms, relay probe "
	    "timeout %g ms, %s relay RTT caches, missing direct %s%s; seed %llu\n",
	    o->model.sel.c_wait, o->model.sel.min_gain,
	    (double)o->model.sel.repair_timeout_us / 1000.0,
	    (double)o->model.relay_timeout_us / 1000.0, o->model.warm ? "warm" : "cold",
	    o->model.silent_direct ? "silent" : "fails", o->model.exact ? "; exact" : "",
	    (unsigned long long)o->seed);
	if (o->model.sel.max_chain > 1)
		printf("chains: up to %u relays, chain_gain %g, %s\n", o->model.sel.max_chain,
		    o->model.sel.chain_gain, o->plain_rank ? "Cover-k ranks without lead-ins" :
		    "Cover-k ranks with lead-ins");
}

static int
strategies(struct run *r, const struct eval_ctx *ctx)
{
	static const enum eval_kind kinds[4] = {
		EVAL_SELECT_ALL, EVAL_RANDOM_K, EVAL_RANDGROUP_K, EVAL_COVER,
	};
	struct opts *o = r->o;
	bool keep = o->per_pair;
	char err[512], what[64];

	for (int i = 0; i < 4; i++) {
		if (!o->run[i])
			continue;
		if (eval_strategy(ctx, kinds[i], o->k, keep, &r->main_[r->nmain], err,
		    sizeof(err)) < 0)
			goto fail;
		snprintf(what, sizeof(what), "%s", r->main_[r->nmain].label);
		r->nmain++;
		timing(r, what);
	}
	if (o->nsweep == 0)
		return 0;
	if (!o->run[0]) {
		if (eval_strategy(ctx, EVAL_SELECT_ALL, 0, false, &r->ref, err,
		    sizeof(err)) < 0)
			goto fail;
		r->have_ref = true;
		timing(r, "Select-All (sweep reference)");
	}
	for (int i = 1; i < 4; i++)
		for (size_t s = 0; s < o->nsweep; s++) {
			struct eval_stats *st = &r->sweep[r->nsweep];
			const struct eval_stats *same = NULL;

			for (size_t m = 0; m < r->nmain; m++)
				if (r->main_[m].kind == kinds[i] && r->main_[m].k == o->sweep[s])
					same = &r->main_[m];
			if (same != NULL) {
				r->sweep_row[r->nsweep_row++] = same;
				continue;
			}
			if (eval_strategy(ctx, kinds[i], o->sweep[s], false, st, err,
			    sizeof(err)) < 0)
				goto fail;
			r->nsweep++;
			r->sweep_row[r->nsweep_row++] = st;
			snprintf(what, sizeof(what), "sweep %s", st->label);
			timing(r, what);
		}
	return 0;
fail:
	fprintf(stderr, "slot-sim: %s\n", err);
	return -1;
}

static const struct eval_stats *
select_all(const struct run *r)
{
	for (size_t i = 0; i < r->nmain; i++)
		if (r->main_[i].kind == EVAL_SELECT_ALL)
			return &r->main_[i];
	return r->have_ref ? &r->ref : NULL;
}

static int
mkdir_p(const char *dir)
{
	char buf[4096];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, dir, len + 1);
	for (char *p = buf + 1; *p != '\0'; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -1;
			*p = '/';
		}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

static int
write_csvs(const struct run *r)
{
	const struct opts *o = r->o;
	const struct eval_stats *all[MAX_HOPS + 3 + 2 * MAX_SWEEP + 1];
	struct eval_stats rows[MAX_HOPS + 3 + 2 * MAX_SWEEP + 1];
	size_t n = 0;
	char path[4200], path2[4200], err[4400];
	float *direct = NULL;
	int rc = -1;

	if (mkdir_p(o->out) < 0) {
		fprintf(stderr, "slot-sim: %s: %s\n", o->out, strerror(errno));
		return -1;
	}
	for (unsigned h = 0; h < o->hops; h++)
		all[n++] = &r->opt[h];
	for (size_t i = 0; i < r->nmain; i++)
		all[n++] = &r->main_[i];
	if (r->have_ref)
		all[n++] = &r->ref;
	for (size_t i = 0; i < r->nsweep; i++)
		all[n++] = &r->sweep[i];
	/* Shallow copies: report_summary_csv takes an array of rows. */
	for (size_t i = 0; i < n; i++)
		rows[i] = *all[i];
	snprintf(path, sizeof(path), "%s/summary.csv", o->out);
	if (report_summary_csv(path, rows, n, select_all(r), err, sizeof(err)) < 0)
		goto fail;
	snprintf(path, sizeof(path), "%s/gain_cdf.csv", o->out);
	if (report_cdf_csv(path, all, n, CDF_POINTS, err, sizeof(err)) < 0)
		goto fail;
	if (o->hops > 1) {
		snprintf(path, sizeof(path), "%s/phi.csv", o->out);
		snprintf(path2, sizeof(path2), "%s/phi_cdf.csv", o->out);
		if (report_phi_csv(path, path2, r->phi, o->hops - 1, CDF_POINTS, err,
		    sizeof(err)) < 0)
			goto fail;
	}
	snprintf(path, sizeof(path), "%s/groups.csv", o->out);
	if (report_groups_csv(path, &r->roles, r->group, r->rm.names, err,
	    sizeof(err)) < 0)
		goto fail;
	if (o->per_pair) {
		size_t np = 0;

		direct = malloc((r->pairs.n > 0 ? r->pairs.n : 1) * sizeof(*direct));
		if (direct == NULL) {
			snprintf(err, sizeof(err), "out of memory");
			goto fail;
		}
		for (size_t i = 0; i < r->pairs.n; i++)
			direct[i] = simmat_row(&r->d, r->pairs.c[i])[r->pairs.s[i]];
		for (unsigned h = 0; h < o->hops; h++)
			all[np++] = &r->opt[h];
		for (size_t i = 0; i < r->nmain; i++)
			all[np++] = &r->main_[i];
		snprintf(path, sizeof(path), "%s/pairs.csv", o->out);
		if (report_pairs_csv(path, &r->pairs, r->rm.names, direct, all, np,
		    err, sizeof(err)) < 0)
			goto fail;
	}
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "slot-sim: %s\n", err);
out:
	free(direct);
	return rc;
}

static void
run_free(struct run *r)
{
	for (unsigned h = 0; h < MAX_HOPS; h++) {
		eval_stats_free(&r->opt[h]);
		eval_phi_free(&r->phi[h]);
	}
	for (size_t i = 0; i < r->nmain; i++)
		eval_stats_free(&r->main_[i]);
	for (size_t i = 0; i < r->nsweep; i++)
		eval_stats_free(&r->sweep[i]);
	eval_stats_free(&r->ref);
	free(r->relay_pos);
	free(r->group);
	roles_pairs_free(&r->pairs);
	roles_free(&r->roles);
	simmat_free(&r->drbuf);
	simmat_free(&r->d);
	rttmat_free(&r->rm);
}

static int
run(struct opts *o)
{
	struct run *r = calloc(1, sizeof(*r));
	struct eval_ctx ctx;
	char err[512];
	int rc;

	if (r == NULL) {
		fprintf(stderr, "slot-sim: out of memory\n");
		return EXIT_FAILURE;
	}
	r->o = o;
	r->t0 = now_s();
	if (load(r, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-sim: %s\n", err);
		rc = EXIT_INPUT;
		goto out;
	}
	if (o->names_csv != NULL &&
	    rttmat_names_from_servers(&r->rm, o->names_csv, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-sim: %s\n", err);
		rc = EXIT_INPUT;
		goto out;
	}
	timing(r, "load");
	if (o->save_matrix != NULL && save_matrix(r, o->save_matrix) < 0) {
		rc = EXIT_FAILURE;
		goto out;
	}
	if (simmat_from_rttmat(&r->rm, r->src, &r->d, err, sizeof(err)) < 0) {
		fprintf(stderr, "slot-sim: %s\n", err);
		rc = EXIT_INPUT;
		goto out;
	}
	if ((rc = setup(r)) != 0)
		goto out;
	ctx = (struct eval_ctx){
		.d = &r->d, .dr = r->dr, .roles = &r->roles, .pairs = &r->pairs,
		.relay_pos = r->relay_pos, .group = r->group, .model = o->model,
		.seed = o->seed, .nlandmarks = o->landmarks, .plain_rank = o->plain_rank,
		.beside_us = (float)(o->beside_ms * 1000),
	};
	if (o->hops > 0) {
		if (eval_optimal(&ctx, o->hops, o->per_pair, r->opt, r->phi, err,
		    sizeof(err)) < 0) {
			fprintf(stderr, "slot-sim: %s\n", err);
			rc = EXIT_FAILURE;
			goto out;
		}
		timing(r, "optimal paths");
	}
	if (strategies(r, &ctx) < 0) {
		rc = EXIT_FAILURE;
		goto out;
	}
	header(r);
	printf("\nTable 2 view (benefit: path RTT < direct; reductions and gains over "
	    "pairs with a direct RTT):\n");
	{
		struct eval_stats rows[1 + 3];
		size_t n = 0;

		if (o->hops > 0)
			rows[n++] = r->opt[0];
		for (size_t i = 0; i < r->nmain; i++)
			rows[n++] = r->main_[i];
		report_table(stdout, rows, n);
	}
	if (o->model.sel.max_chain > 1) {
		printf("\nRelays on the path taken (share of all pairs) and the wait:\n");
		report_relays_table(stdout, r->main_, r->nmain);
	}
	if (o->hops > 0) {
		printf("\nOptimal min-max paths, up to i intermediaries (no probing, no "
		    "wait rule):\n");
		report_table(stdout, r->opt, o->hops);
	}
	if (o->hops > 1) {
		printf("\nphi(i,i+1) = P_i / P_(i+1), best path RTT with up to i over "
		    "up to i+1 intermediaries:\n");
		report_phi_table(stdout, r->phi, o->hops - 1);
	}
	if (r->nsweep_row > 0) {
		struct eval_stats rows[3 * MAX_SWEEP];

		for (size_t i = 0; i < r->nsweep_row; i++)
			rows[i] = *r->sweep_row[i];
		printf("\nSweep of k (fractions of Select-All's average reduction and "
		    "benefit):\n");
		report_sweep_table(stdout, rows, r->nsweep_row, select_all(r));
	}
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "slot-sim: stdout: write failed\n");
		rc = EXIT_FAILURE;
		goto out;
	}
	if (o->out != NULL && write_csvs(r) < 0) {
		rc = EXIT_FAILURE;
		goto out;
	}
	timing(r, "done");
	rc = 0;
out:
	run_free(r);
	free(r);
	return rc;
}

int
main(int argc, char **argv)
{
	struct opts o;
	int rc = parse_args(argc, argv, &o);

	if (rc != 0)
		return rc > 0 ? 0 : EXIT_INPUT;
	return run(&o);
}
