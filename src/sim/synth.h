#ifndef SLOT_SIM_SYNTH_H
#define SLOT_SIM_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "slot/rttmat.h"

/*
 * A synthetic RTT matrix for sizes no data set has: n nodes at uniformly
 * random points of a sphere of the Earth's radius, and
 *   RTT(i,j) = a_i + a_j + 2 * gc(i,j) / 200 km/ms * (1 + x_ij),
 * with gc the great-circle distance, a_i an access delay uniform in
 * [0.5, 5] ms per node, and x_ij a route stretch per pair, exponential with
 * mean `stretch`: the per-pair detours are what break the triangle
 * inequality, as on the Internet. Each pair is missing with probability
 * `missing`. With sites > 0 the nodes are spread over that many random
 * sites instead (each node at a uniformly chosen one, within 10 km of it,
 * access delays of 0.1 to 0.5 ms), like PlanetLab's few machines per
 * campus. Nodes are named n0..n(n-1). Same parameters, same matrix.
 */

struct synth_params {
	size_t n;
	uint64_t seed;
	double stretch;		/* mean extra stretch; 0.5 */
	double missing;		/* fraction of pairs missing; 0 */
	size_t sites;		/* 0: every node its own place */
};

void synth_params_default(struct synth_params *p);

/* Returns 0 or -1 (bad parameters, out of memory) with the reason in err. */
int synth_matrix(const struct synth_params *p, struct rttmat *out, char *err,
    size_t errlen);

#endif
