#ifndef SLOT_COVER_H
#define SLOT_COVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Which relays a client should probe, chosen before any server is known
 * (docs/evaluation.md, "The cover strategy"). The server of a future
 * connection is unknown, but servers sit where the Internet is, and the
 * relays are a sample of it: so take a few relays as landmarks, stand-ins
 * for where servers may be, each weighted by the relays it stands for.
 * For a server at landmark l, relay r gives the path max(RTT(c,r),
 * RTT(r,l)) against the direct RTT(c,l). The client measures RTT(c,r) to
 * every relay itself; RTT(r,l) comes from the relays' measurements of each
 * other, through the directory. cover_rank picks greedily the relay that
 * adds most to the weighted mean path-RTT reduction over the landmarks,
 * then the next given the first, and so on: a max-coverage greedy, within
 * 1 - 1/e of the best set of that size for the landmarks (the objective is
 * submodular). A client probes the first k usable relays of the ranking
 * for every new server. Pure: no I/O, no clock, no randomness.
 */

#define COVER_NONE UINT32_MAX

struct cover_input {
	size_t nrelay;
	const uint32_t *cr_us;		/* RTT(client, relay i); COVER_NONE: unknown */
	size_t nland;
	/* Landmark l is relay land_relay[l] (COVER_NONE: not a relay of this
	 * set, and then it is left out: its direct RTT is unknown). */
	const uint32_t *land_relay;
	const float *land_weight;	/* NULL: every landmark weighs 1 */
	/* rl_us[i * nland + l] = RTT(relay i, landmark l); COVER_NONE: unknown. */
	const uint32_t *rl_us;
	/* Chains (slot/chain.h): NULL, or lead_us[i] = the best lead-in to
	 * relay i through other relays (COVER_NONE: none). Relay i then stands
	 * for the better of itself alone and the chain ending at it, the chain
	 * counted at its path * chain_gain (the price the selection asks of a
	 * chain, so that high gains do not spend probes on chain ends the
	 * decision then refuses). A relay near the server but far from the
	 * client is a good chain end. */
	const uint32_t *lead_us;
	double chain_gain;
	/* With lead_us: the wait rule's c_wait (0: none). A chain's relay is
	 * probed from the client, so its reply comes after RTT(c,r) + RTT(r,s),
	 * and counts for a landmark only by c_wait * its direct RTT. */
	double c_wait;
};

/* Ranks up to max relays into out (room for max): first the greedy
 * choices while one adds to the reduction, then the remaining relays with a
 * known RTT(c,r) nearest first (cheap insurance when the landmarks are
 * few). Relays with an unknown RTT(c,r) are not ranked. *ngreedy (if not
 * NULL) gets how many came from the greedy. Returns 0, or -1 out of memory. */
int cover_rank(const struct cover_input *in, size_t max, uint32_t *out, size_t *nout,
    size_t *ngreedy);

/* The probes for one server that shares its address prefix with relay
 * `beside` (docs/evaluation.md, "A relay beside the server"): the landmark
 * nearest that relay stands for the server, which no landmark row knows,
 * and the relays of the shortest path to it, max(RTT(c,r), RTT(r,l)) (or
 * the chain ending at r, as cover_rank counts it), go first. Writes up to
 * max relay indices into out, best first, and returns how many: none when
 * beside's landmark row is unknown. Ties: the lower index. A landmark that
 * is relay not_land is passed over (COVER_NONE: none), so that slot-sim can
 * keep a server that is also a relay from standing for itself. */
size_t cover_beside(const struct cover_input *in, size_t beside, uint32_t not_land, size_t max,
    uint32_t *out);

/* RTT between nodes i and j of an overlay; COVER_NONE: not measured. */
typedef uint32_t (*cover_rtt_fn)(void *arg, size_t i, size_t j);

/* Picks up to max landmarks among n nodes by farthest-point sampling (each
 * next landmark is the node farthest from the landmarks so far), starting
 * from the best measured node (the first of equals, so that jitter does not
 * move it), so that every region of the overlay has one
 * near it. Nodes with fewer than half of their RTTs known are not taken (a
 * relay that has just joined). Each node then counts towards its nearest
 * landmark: weight[l] = how many nodes it stands for. prefer (NULL: none)
 * marks the landmarks of last time: one of them is taken instead of the
 * farthest node when it is within a tenth as far, so that near-equal nodes
 * (two machines of a site) do not swap roles with every jitter of RTTs.
 * Writes node indexes
 * into out (room for max), increasing by choice order. Deterministic.
 * Returns 0, or -1 out of memory. */
int cover_landmarks(size_t n, cover_rtt_fn rtt, void *arg, size_t max,
    const bool *prefer, uint32_t *out, float *weight, size_t *nout);

#endif
