#ifndef SLOT_SIM_EVAL_H
#define SLOT_SIM_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/select.h"
#include "decide.h"
#include "roles.h"
#include "simmat.h"

/*
 * Runs a strategy over every pair and sums up what it gives, in the terms
 * of the Slot paper's Table 2. For a pair with a direct RTT D whose chosen
 * path has RTT P (the direct path's, when the rule goes direct):
 * - reduction = 1 - P / D (0 when going direct), gain ratio = D / P;
 * - benefit: P < D; "more than 25%": reduction > 0.25;
 * and for a pair without a direct RTT: repaired when a path was found.
 */

enum eval_kind {
	EVAL_SELECT_ALL = 0,	/* probe every relay, the wait rule */
	EVAL_RANDOM_K,		/* k random relays, the wait rule */
	EVAL_RANDGROUP_K,	/* one relay of each of k random groups, the wait rule */
	EVAL_OPTIMAL,		/* best min-max path with up to k intermediaries, no probing */
	EVAL_COVER,		/* the first k of the client's cover ranking, the wait rule */
};

/* What the strategies run on. */
struct eval_ctx {
	const struct simmat *d;		/* every node */
	/* Rows: every node; columns: the relays, in roles->relay order (d
	 * itself when every node is a relay, in order). */
	const struct simmat *dr;
	const struct roles *roles;
	const struct pairs *pairs;
	const long *relay_pos;		/* node -> its column in dr, or -1 */
	const uint32_t *group;		/* group of the relay in column j */
	struct decide_model model;
	uint64_t seed;
	/* EVAL_COVER: landmarks among the relays (cover_landmarks), as
	 * slot-dird picks them; 0: every relay. */
	size_t nlandmarks;
	/* Chains (model.sel.max_chain > 1): Cover-k ranks with the lead-ins
	 * (cover_input.lead_us) unless plain_rank. */
	bool plain_rank;
	/* EVAL_COVER: a relay within this RTT of the server (or the server
	 * itself, when it is a relay) stands for one that shares the server's
	 * address prefix, as slotd's [select] server_prefix finds them: half
	 * the probes go by that relay's landmark (cover_beside); 0: never. */
	float beside_us;
};

struct eval_stats {
	char label[32];			/* "Select-All", "Random-50", "Optimal-2"... */
	enum eval_kind kind;
	unsigned k;			/* Random-k, RandGroup-k; intermediaries of Optimal */
	size_t npairs;
	size_t ndirect;			/* pairs with a direct RTT */
	size_t nbenefit, ngt25;
	size_t nworse;			/* path longer than the direct one */
	size_t nmissing, nrepaired;	/* pairs without a direct RTT; of them, with a path */
	double sum_reduction;		/* of 1 - P/D over the ndirect pairs */
	double sum_probes;		/* relay probes, summed over decisions */
	double sum_decide_us;		/* decision times, summed */
	size_t ndecided;		/* decisions (0 for Optimal) */
	float *gain;			/* ndirect gain ratios D/P, increasing */
	float *wait_ratio;		/* ndirect decision times / D, increasing (not
					 * for Optimal) */
	uint32_t *path_us;		/* per pair; DECIDE_NO_PATH: none; NULL unless asked */
	uint32_t *via;			/* per pair: relay node, or UINT32_MAX; with path_us */
	/* Pairs by relays on the path taken: nrelays[0] direct (or none),
	 * [h] through h relays; not for Optimal. */
	size_t nrelays[SEL_MAX_CHAIN + 1];
	unsigned max_chain;		/* the run's */
	double chain_gain;
};

/* Runs kind (not EVAL_OPTIMAL) with k over ctx->pairs, seeded from
 * ctx->seed, kind and k, so that a run does not depend on the others. With
 * keep_paths, st->path_us and st->via are filled. Returns 0 or -1 with the
 * reason in err. */
int eval_strategy(const struct eval_ctx *ctx, enum eval_kind kind, unsigned k,
    bool keep_paths, struct eval_stats *st, char *err, size_t errlen);

/*
 * The gain from one intermediary to the next: for a pair with finite best
 * path RTTs P_i and P_{i+1} (up to i and i+1 intermediaries), the ratio
 * phi = P_i / P_{i+1} >= 1. Pairs that have no path with i intermediaries
 * but one with i+1 are counted in nnew, not in the ratios.
 */
struct eval_phi {
	unsigned i;			/* phi(i, i+1) */
	size_t n;			/* ratios */
	size_t nimproved;		/* ratios > 1 */
	size_t nnew;
	double sum;
	float *ratio;			/* n ratios, increasing */
};

/* Optimal paths with 1..maxhops intermediaries over the relays (no
 * probing, no wait rule): st[h-1] for h intermediaries, and phi[h-1] for
 * phi(h, h+1), h = 1..maxhops-1 (phi(0, 1) is st[0]'s gain ratio). With
 * keep_paths, st[h-1].path_us is filled (via stays NULL). Returns 0 or -1
 * with the reason in err. */
int eval_optimal(const struct eval_ctx *ctx, unsigned maxhops, bool keep_paths,
    struct eval_stats *st, struct eval_phi *phi, char *err, size_t errlen);

/* The q-quantile (0..1) of n sorted values, nearest rank; NAN if n == 0. */
double eval_quantile(const float *v, size_t n, double q);

void eval_stats_free(struct eval_stats *st);
void eval_phi_free(struct eval_phi *phi);

#endif
