#ifndef SLOT_CHAIN_H
#define SLOT_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Chains of relays (docs/evaluation.md, "Chains of relays"): a path
 * client -> R1 -> ... -> Rh -> server whose RTT is its longest loop. Only
 * the last relay is probed (its RTT to the server is measured); the
 * lead-in before it is computed from what the client already knows: its
 * own RTT to every relay, and every relay's RTT to the directory's
 * landmarks (landmarks are relays), so the RTT between relays i and j is
 * known when either is a landmark. chain_reach finds, for every relay j,
 * the lead-in of lowest bottleneck that arrives at j through 1 ..
 * max_chain - 1 relays before it. It runs once per ranking, not per
 * connection: each extra relay is one relaxation over the known
 * relay-to-relay RTTs, O(nrelay * nland). Pure: no I/O, no clock.
 */

#define CHAIN_MAX 3		/* relays on a path, at most */
#define CHAIN_NONE UINT32_MAX	/* unknown RTT; no lead-in */

struct chain_input {
	size_t nrelay;
	const uint32_t *cr_us;		/* RTT(client, relay i); CHAIN_NONE: unknown */
	size_t nland;
	/* Landmark l is relay land_relay[l]; CHAIN_NONE: not one of ours. */
	const uint32_t *land_relay;
	/* rl_us[i * nland + l] = RTT(relay i, landmark l); CHAIN_NONE: unknown. */
	const uint32_t *rl_us;
	unsigned max_chain;		/* relays on a path: 1 (no chains) .. CHAIN_MAX */
	const bool *avoid;		/* NULL, or relays a lead-in must not use */
	/* NULL, or relays that may end a chain but not forward one (slotd:
	 * those that have not said they take PIPE_ESTABLISH_CHAIN; slot-sim
	 * has none): never on a lead-in, still given one of their own. */
	const bool *no_forward;
};

struct chain_lead {
	/* max(RTT(c, via[0]), RTT(via[0], via[1]), ..., RTT(via[nvia-1], j)):
	 * the longest loop before j; CHAIN_NONE: no lead-in. */
	uint32_t us;
	uint32_t via[CHAIN_MAX - 1];	/* the relays before j, in path order */
	uint8_t nvia;			/* 0 when us is CHAIN_NONE */
	/* The best lead-in through one relay alone (equal to us when that is
	 * the best): a longer chain must beat it by chain_gain. */
	uint32_t us1;
	uint32_t via1;
};

/* Fills out[0..nrelay) with each relay's best lead-in, and its best
 * through one relay alone. Ties go to fewer relays. A lead-in never passes through its own end. Returns 0, or -1 out
 * of memory (or max_chain out of range). */
int chain_reach(const struct chain_input *in, struct chain_lead *out);

/* The RTT between relays i and j from the landmark rows: the smaller of
 * RTT(i, j as landmark) and RTT(j, i as landmark); CHAIN_NONE when neither
 * is a landmark or neither is measured. land_of[x] is x's landmark index
 * or CHAIN_NONE (see chain_land_of). */
uint32_t chain_rr(const struct chain_input *in, const uint32_t *land_of, size_t i,
    size_t j);

/* land_of[0..nrelay): the landmark index of each relay, CHAIN_NONE if it is
 * none (the first landmark when a relay is listed twice). */
void chain_land_of(const struct chain_input *in, uint32_t *land_of);

/* The path RTT of a chain whose last relay has RTT rs_us to the server. */
static inline uint32_t
chain_path(uint32_t lead_us, uint32_t rs_us)
{
	return lead_us > rs_us ? lead_us : rs_us;
}

#endif
