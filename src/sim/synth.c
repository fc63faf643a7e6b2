#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/errbuf.h"
#include "slot/rng.h"
#include "synth.h"

#define EARTH_RADIUS_KM	6371.0
#define FIBRE_KM_PER_MS	200.0	/* light in glass, one way */
#define SITE_KM		10.0	/* the radius of a site */

void
synth_params_default(struct synth_params *p)
{
	p->n = 0;
	p->seed = 1;
	p->stretch = 0.5;
	p->missing = 0.0;
	p->sites = 0;
}

/* A uniformly random point of the unit sphere: z uniform in [-1, 1],
 * longitude uniform. */
static void
sphere_point(struct rng *rng, double *v)
{
	double z = 2.0 * rng_unit(rng) - 1.0, lon = 2.0 * M_PI * rng_unit(rng);
	double rxy = sqrt(1.0 - z * z);

	v[0] = rxy * cos(lon);
	v[1] = rxy * sin(lon);
	v[2] = z;
}

int
synth_matrix(const struct synth_params *p, struct rttmat *out, char *err,
    size_t errlen)
{
	double *xyz = NULL, *access = NULL, *site = NULL;
	struct rng rng;
	size_t n = p->n;

	memset(out, 0, sizeof(*out));
	if (n < 2 || !(p->stretch >= 0.0) || !(p->missing >= 0.0 && p->missing < 1.0)) {
		errbuf_set(err, errlen, "synthetic matrix: need n >= 2, stretch >= 0, "
		    "0 <= missing < 1");
		return -1;
	}
	if (rttmat_init(out, n, err, errlen) < 0)
		return -1;
	xyz = malloc(3 * n * sizeof(*xyz));
	access = malloc(n * sizeof(*access));
	if (xyz == NULL || access == NULL)
		goto nomem;
	rng_seed(&rng, p->seed);
	if (p->sites > 0) {
		site = malloc(3 * p->sites * sizeof(*site));
		if (site == NULL)
			goto nomem;
		for (size_t k = 0; k < p->sites; k++)
			sphere_point(&rng, site + 3 * k);
	}
	for (size_t i = 0; i < n; i++) {
		char name[32];

		if (site != NULL) {
			const double *c = site + 3 * rng_below(&rng, p->sites);
			double off[3], len;

			/* Up to SITE_KM away: a random direction, then back onto
			 * the sphere. */
			sphere_point(&rng, off);
			for (int a = 0; a < 3; a++)
				off[a] = c[a] + off[a] * SITE_KM / EARTH_RADIUS_KM * rng_unit(&rng);
			len = sqrt(off[0] * off[0] + off[1] * off[1] + off[2] * off[2]);
			for (int a = 0; a < 3; a++)
				xyz[3 * i + a] = off[a] / len;
			access[i] = 0.1 + 0.4 * rng_unit(&rng);
		} else {
			sphere_point(&rng, xyz + 3 * i);
			access[i] = 0.5 + 4.5 * rng_unit(&rng);
		}
		snprintf(name, sizeof(name), "n%zu", i);
		out->names[i] = strdup(name);
		if (out->names[i] == NULL)
			goto nomem;
	}
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			double dot = xyz[3 * i] * xyz[3 * j] +
			    xyz[3 * i + 1] * xyz[3 * j + 1] + xyz[3 * i + 2] * xyz[3 * j + 2];
			double gc = EARTH_RADIUS_KM * acos(fmax(-1.0, fmin(1.0, dot)));
			/* Exponential by inversion; 1 - u is in (0, 1]. */
			double x = -p->stretch * log(1.0 - rng_unit(&rng));
			double v = access[i] + access[j] + 2.0 * gc / FIBRE_KM_PER_MS * (1.0 + x);

			/* Drawn for every pair, so that `missing` does not change the
			 * RTTs of the pairs that stay. */
			if (rng_unit(&rng) < p->missing)
				v = NAN;
			out->d[i * n + j] = out->d[j * n + i] = v;
		}
	free(xyz);
	free(access);
	free(site);
	return 0;
nomem:
	free(xyz);
	free(access);
	free(site);
	rttmat_free(out);
	errbuf_set(err, errlen, "out of memory for a synthetic matrix of %zu nodes", n);
	return -1;
}
