#ifndef SLOT_SIM_PATHS_H
#define SLOT_SIM_PATHS_H

#include <stddef.h>
#include <stdint.h>

#include "simmat.h"

/*
 * Optimal overlay paths under the min-max metric: the RTT of a path is that
 * of its slowest hop (the slowest of its TCP loops), and the best path with
 * at most i intermediaries is
 *   P_0 = D (the direct RTT),
 *   P_i[c][s] = min(P_{i-1}[c][s], min over relays r of max(P_{i-1}[c][r], D[r][s])),
 * a min-max ("bottleneck") matrix product, the relay r being the last
 * intermediary. Row c of P_i depends only on row c of P_{i-1}, so only the
 * clients' rows are computed: O(clients x relays x nodes) per level.
 */

/*
 * One more intermediary: for each of the nrow rows of prev (nrow x
 * d->stride, columns = the nodes of d), out = the row with paths through
 * one more relay among relay[0..nrelay). out is nrow x d->stride too and
 * must not overlap prev. Missing pairs are +inf.
 */
void paths_extend(const float *prev, size_t nrow, const struct simmat *d,
    const uint32_t *relay, size_t nrelay, float *out);

#endif
