/*
 * slot-regroup-bench: times slot-dird's regroup (the sparse graph, MCL
 * with a row cap, the stable ids) on a square RTT matrix such as
 * `slot-sim --synthetic N --save-matrix FILE` writes, and reports its peak
 * memory. scripts/bench/dird_regroup.py drives it.
 *
 * The matrix is streamed: only the upper triangle is read (slot-sim's
 * synthetic matrices are symmetric), pair by pair into the graph builder,
 * so the process never holds n x n RTTs; --dense instead loads the whole
 * matrix and runs the exact dense-input MCL (mcl_groups), the old path.
 *
 * usage: slot-regroup-bench [--keep K] [--max-entries R] [--bound MS]
 *        [--inflation X] [--jitter F] [--dense] MATRIX
 * Prints one line of key=value pairs; --jitter F also regroups a second
 * time with every RTT scaled by a seeded factor in [1-F, 1+F] and reports
 * how many relays changed group.
 */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "slot/grpstab.h"
#include "slot/mcl.h"
#include "slot/rng.h"

static double
now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void
die(const char *what, const char *err)
{
	fprintf(stderr, "slot-regroup-bench: %s: %s\n", what, err);
	exit(1);
}

/* Reads the next token of the matrix: a number, or NaN for "x". Returns 0
 * at end of file. */
static int
next_value(FILE *f, double *v)
{
	char tok[64];
	int c;
	size_t k = 0;

	while ((c = getc(f)) != EOF) {
		if (c == '#') {
			while ((c = getc(f)) != EOF && c != '\n')
				;
			continue;
		}
		if (c != ' ' && c != '\n' && c != '\t' && c != '\r')
			break;
	}
	if (c == EOF)
		return 0;
	do {
		if (k + 1 < sizeof(tok))
			tok[k++] = (char)c;
	} while ((c = getc(f)) != EOF && c != ' ' && c != '\n' && c != '\t' && c != '\r');
	tok[k] = '\0';
	*v = strcmp(tok, "x") == 0 ? NAN : strtod(tok, NULL);
	return 1;
}

/* The node count: the values on the first data line. */
static size_t
count_nodes(FILE *f)
{
	char *line = NULL;
	size_t cap = 0, n = 0;
	ssize_t len;

	while ((len = getline(&line, &cap, f)) > 0 && line[0] == '#')
		;
	for (char *s = strtok(line, " \t\n"); len > 0 && s; s = strtok(NULL, " \t\n"))
		n++;
	free(line);
	rewind(f);
	return n;
}

static double
jittered(struct rng *r, double v, double jitter)
{
	return jitter > 0.0 ? v * (1.0 - jitter + 2.0 * jitter * rng_unit(r)) : v;
}

/* Streams the upper triangle of f into a graph. */
static void
load_graph(FILE *f, size_t n, const struct mcl_gparams *gp, double jitter, uint64_t seed,
    struct mcl_graph *g)
{
	struct mcl_gbuild *b;
	struct rng r;
	char err[256];
	double v;

	rng_seed(&r, seed);
	rewind(f);
	if ((b = mcl_gbuild_new(n, gp, err, sizeof(err))) == NULL)
		die("graph", err);
	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < n; j++) {
			if (!next_value(f, &v))
				die("matrix", "short");
			if (j > i && mcl_gbuild_pair(b, i, j, jittered(&r, v, jitter), err,
			    sizeof(err)) < 0)
				die("graph", err);
		}
	if (mcl_gbuild_finish(b, g, err, sizeof(err)) < 0)
		die("graph", err);
}

int
main(int argc, char **argv)
{
	struct mcl_gparams gp = { .keep = 32, .edge_max_ms = INFINITY };
	struct mcl_params mp;
	struct mcl_graph g;
	struct rusage ru;
	double bound = 50.0, jitter = 0.0, t0, t1, t2, t3;
	int dense = 0, a;
	uint32_t *fresh, *old, *group;
	size_t n, ng = 0, changed = 0, edges;
	char err[256];
	FILE *f;

	mcl_params_default(&mp);
	mp.max_entries = 64;
	for (a = 1; a < argc - 1; a++) {
		if (strcmp(argv[a], "--keep") == 0)
			gp.keep = strtoul(argv[++a], NULL, 10);
		else if (strcmp(argv[a], "--max-entries") == 0)
			mp.max_entries = strtoul(argv[++a], NULL, 10);
		else if (strcmp(argv[a], "--bound") == 0)
			bound = strtod(argv[++a], NULL);
		else if (strcmp(argv[a], "--inflation") == 0)
			mp.inflation = strtod(argv[++a], NULL);
		else if (strcmp(argv[a], "--jitter") == 0)
			jitter = strtod(argv[++a], NULL);
		else if (strcmp(argv[a], "--dense") == 0)
			dense = 1;
		else
			break;
	}
	if (a != argc - 1) {
		fprintf(stderr, "usage: slot-regroup-bench [--keep K] [--max-entries R] "
		    "[--bound MS] [--inflation X] [--jitter F] [--dense] MATRIX\n");
		return 2;
	}
	if ((f = fopen(argv[a], "r")) == NULL)
		die(argv[a], strerror(errno));
	if ((n = count_nodes(f)) < 2)
		die(argv[a], "fewer than 2 nodes");
	mp.max_intra_rtt_ms = bound;
	if (bound > 0.0) {
		gp.edge_max_ms = bound;
		gp.wide_ms = bound;
	}
	if ((fresh = calloc(n, sizeof(*fresh))) == NULL ||
	    (old = calloc(n, sizeof(*old))) == NULL ||
	    (group = calloc(n, sizeof(*group))) == NULL)
		die("memory", "out of memory");

	if (dense) {
		double *d = malloc(n * n * sizeof(*d));

		if (d == NULL)
			die("memory", "out of memory");
		for (size_t i = 0; i < n * n; i++)
			if (!next_value(f, &d[i]))
				die("matrix", "short");
		t0 = now_s();
		if (mcl_groups(d, n, &mp, fresh, &ng, err, sizeof(err)) < 0)
			die("mcl", err);
		t1 = now_s();
		getrusage(RUSAGE_SELF, &ru);
		printf("mode=dense n=%zu groups=%zu cluster_s=%.3f maxrss_kb=%ld\n", n, ng,
		    t1 - t0, ru.ru_maxrss);
		return 0;
	}

	t0 = now_s();
	load_graph(f, n, &gp, 0.0, 1, &g);
	t1 = now_s();
	edges = g.off[n] / 2;
	if (mcl_groups_graph(&g, &mp, fresh, &ng, err, sizeof(err)) < 0)
		die("mcl", err);
	t2 = now_s();
	for (size_t i = 0; i < n; i++)
		old[i] = GRPSTAB_NONE;
	if (grpstab_apply(&g, old, fresh, bound, NULL, group, &changed, err, sizeof(err)) < 0)
		die("grpstab", err);
	t3 = now_s();
	mcl_graph_free(&g);
	printf("mode=sparse n=%zu keep=%zu max_entries=%zu bound=%g edges=%zu groups=%zu "
	    "read_build_s=%.3f cluster_s=%.3f stable_s=%.3f", n, gp.keep, mp.max_entries,
	    bound, edges, ng, t1 - t0, t2 - t1, t3 - t2);

	if (jitter > 0.0) {
		uint32_t *again = calloc(n, sizeof(*again));

		if (again == NULL)
			die("memory", "out of memory");
		load_graph(f, n, &gp, jitter, 7, &g);
		t0 = now_s();
		if (mcl_groups_graph(&g, &mp, fresh, &ng, err, sizeof(err)) < 0 ||
		    grpstab_apply(&g, group, fresh, bound, NULL, again, &changed, err,
		    sizeof(err)) < 0)
			die("regroup", err);
		t1 = now_s();
		/* Of those, the relays the bound forced out: now measured above
		 * it from a member of their group. */
		size_t forced = 0;

		for (size_t i = 0; i < n; i++) {
			int w = 0;

			for (size_t j = 0; j < n && again[i] != group[i] && !w; j++)
				w = j != i && group[j] == group[i] && mcl_graph_wide(&g, i, j);
			forced += (size_t)w;
		}
		printf(" jitter=%g jitter_regroup_s=%.3f jitter_changed=%zu jitter_forced=%zu",
		    jitter, t1 - t0, changed, forced);
		mcl_graph_free(&g);
		free(again);
	}
	getrusage(RUSAGE_SELF, &ru);
	printf(" maxrss_kb=%ld\n", ru.ru_maxrss);
	fclose(f);
	free(fresh);
	free(old);
	free(group);
	return 0;
}
