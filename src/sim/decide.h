#ifndef SLOT_SIM_DECIDE_H
#define SLOT_SIM_DECIDE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/select.h"

/*
 * One relay selection replayed through slotd's own sel_decide, with probe
 * times modelled from the matrix. All probes leave at time 0 (slotd sends
 * the direct probe and every relay probe at once), and then:
 * - the direct probe completes at RTT(c,s); a missing direct pair fails at
 *   once (SEL_DIRECT_FAILED: path repair), or with silent_direct never
 *   completes (a black hole: sel_decide treats it as failed at
 *   repair_timeout);
 * - relay r's reply arrives at RTT(c,r) + RTT(r,s): the request travels to
 *   r, r measures the server with a connect probe while the request waits
 *   (its RTT cache is cold), and the reply travels back. It carries
 *   RTT(c,r) and RTT(r,s), as slotd computes them (elapsed - hold, and the
 *   relay's measurement). With warm caches the reply arrives at RTT(c,r);
 * - a missing RTT(r,s), or one above the relay's probe_timeout, gives a
 *   "not reached" reply at RTT(c,r) + probe_timeout (at RTT(c,r) if warm);
 * - a missing RTT(c,r): the probe is lost, that reply never comes.
 * sel_decide is called as slotd's hold.c calls it: once when the probes
 * are out, on every reply, when the direct probe completes, and when the
 * timer set from its last wake_us fires. Events at the same instant are
 * taken in this order: the direct probe, replies (by relay index), the
 * timer.
 */

struct decide_model {
	struct sel_params sel;		/* strategy and k are not read here */
	uint32_t relay_timeout_us;	/* the relay's probe_timeout */
	bool warm;			/* relays answer from their RTT cache */
	bool silent_direct;		/* a missing direct pair never answers */
	/* Hand sel_decide every reply. Without it, replies that can never be
	 * chosen are not passed one by one (see decide.c); the verdicts are
	 * the same, and the unit tests check that they are. */
	bool exact;
};

/* sel_params_default, except min_gain 1.0: any shorter path is taken, so
 * "benefit" means a path shorter than the direct one; and max_chain 1 (one
 * relay, as the paper; slotd's default is 3) with slotd's chain_gain 1.1. Relay probe timeout
 * 2 s (slot-relayd's default), cold caches, failing direct probes. */
void decide_model_default(struct decide_model *m);

/* The relays probed for one pair, as rows of RTTs in microseconds (floats
 * holding whole numbers, +inf for missing, see simmat.h). cr and rs must be
 * readable, and +inf, up to n rounded up to a multiple of 4. */
struct decide_probe {
	const float *cr;	/* cr[j] = RTT(client, relay j) */
	const float *rs;	/* rs[j] = RTT(relay j, server) */
	size_t n;
	long skip[2];		/* entries not probed (the pair's endpoints), or -1 */
	float direct;		/* RTT(client, server), +inf when missing */
	/* Chains (sel.max_chain > 1): lead[j] = the best lead-in to relay j
	 * (chain_reach), lead1[j] its best through one relay alone, +inf:
	 * none; NULL: no chains. The replay is then exact, and every reply
	 * still due with a lead-in is handed to sel_decide with its cr (the
	 * client's estimate is the true RTT here). */
	const float *lead, *lead1;
};

#define DECIDE_NO_PATH UINT32_MAX

struct decide_result {
	enum sel_verdict verdict;	/* SEL_GO_DIRECT or SEL_GO_RELAY */
	uint32_t relay;		/* SEL_GO_RELAY: index j of the relay */
	uint32_t path_us;	/* RTT of the path taken; DECIDE_NO_PATH: none */
	unsigned chain;		/* SEL_GO_RELAY: 0, or relays on the chain (sel_result) */
	uint64_t at_us;		/* when sel_decide decided */
	uint32_t nprobed;	/* relay probes sent */
	uint32_t ncalls;	/* calls to sel_decide */
};

struct decide_scratch {
	struct sel_reply *rep;
	struct sel_due *due;
	size_t cap;
};

void decide_scratch_init(struct decide_scratch *sc);
void decide_scratch_free(struct decide_scratch *sc);

/* Replays one selection. Returns 0, or -1 when out of memory or when
 * sel_decide stops making progress (asks to wait for a time already past,
 * over and over; that would be a bug), with the reason in err. */
int decide_pair(const struct decide_model *m, const struct decide_probe *p,
    struct decide_scratch *sc, struct decide_result *out, char *err,
    size_t errlen);

#endif
