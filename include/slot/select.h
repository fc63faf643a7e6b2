#ifndef SLOT_SELECT_H
#define SLOT_SELECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "slot/rng.h"

/* Relay selection (DESIGN.md, "One hijacked connection", steps 3 and 4):
 * which relays to probe, and which path to take as replies come in. Pure:
 * the caller supplies the time, the replies and the randomness, so slotd
 * and slot-sim run this same code. Times are microseconds since the probes
 * went out. */

enum sel_strategy {
	SEL_ALL = 0,		/* probe every usable relay */
	SEL_RANDOM_K,		/* k random relays */
	SEL_RANDGROUP_K,	/* one random relay from each of k random groups */
	SEL_COVER,		/* the first k usable relays of the client's cover
				 * ranking (slot/cover.h); Random-k without one */
};

struct sel_params {
	enum sel_strategy strategy;
	unsigned k;			/* default 20 */
	double c_wait;			/* wait at most c_wait * RTT_direct; default 1.25 */
	double min_gain;		/* relay only if RTT_direct / path >= min_gain; default 1.1 */
	uint64_t repair_timeout_us;	/* direct path failed or silent; default 3 s */
	/* Chains (slot/chain.h): relays on a path, 1 (no chains) ..
	 * SEL_MAX_CHAIN; a chain is taken over the best single relay only if
	 * its path * chain_gain <= the single relay's path (and shorter). */
	unsigned max_chain;
	double chain_gain;
};

#define SEL_MAX_CHAIN 3

void sel_params_default(struct sel_params *p);

/* "all", "random", "randgroup" or "cover". Returns 0, or -1 if unknown. */
int sel_strategy_parse(const char *s, enum sel_strategy *out);
const char *sel_strategy_name(enum sel_strategy s);

struct sel_candidate {
	uint32_t group;		/* relays of one group have low mutual RTT */
	bool usable;		/* healthy: control connection up, no recent failures */
	uint32_t rank;		/* place in the client's cover ranking (SEL_COVER);
				 * SEL_NO_RANK: not ranked */
	uint8_t family;		/* of its data endpoint (AF_INET, AF_INET6); 0:
				 * unknown, for callers that do not filter */
};

#define SEL_NO_RANK UINT32_MAX

/* Chooses the relays to probe among c[0..n): writes their indexes into out
 * (room for n) in increasing order and the count into *nout. Unusable
 * relays are never chosen; with fewer usable relays (Random-k) or groups
 * (RandGroup-k) than k, all are taken. SEL_COVER takes the k usable relays
 * of lowest rank; when fewer than k usable relays are ranked, the rest are
 * drawn at random from the unranked (a ranking that no longer fits the
 * relay set, or none at all: Random-k). Returns 0, or -1 if out of memory. */
int sel_sample(const struct sel_params *p, const struct sel_candidate *c, size_t n,
    struct rng *rng, uint32_t *out, size_t *nout);

/* The family filter, before sel_sample: a client's kernel rewrites a
 * connection's destination only within its family, so a relay is a
 * candidate only if its data endpoint has the connection's family. Marks
 * the others unusable. Returns how many candidates have that family
 * (usable or not): 0 means no relay could ever carry the connection. */
size_t sel_keep_family(struct sel_candidate *c, size_t n, int family);

enum sel_direct {
	SEL_DIRECT_PENDING = 0,	/* the direct probe has not finished */
	SEL_DIRECT_OK,		/* connected: rtt_direct_us is valid */
	SEL_DIRECT_REFUSED,	/* the server answered RST: it refuses the port */
	SEL_DIRECT_FAILED,	/* unreachable or timed out */
};

struct sel_reply {
	uint32_t relay;		/* the caller's relay index */
	bool reached;		/* the relay connected to the server */
	uint32_t rtt_cr_us;	/* client to relay (elapsed - hold) */
	uint32_t rtt_rs_us;	/* relay to server */
	uint64_t at_us;		/* when the reply arrived */
	/* The best lead-in to this relay through other relays (chain_reach):
	 * the longest loop before it; SEL_NO_LEAD: none, no chain ends here.
	 * rtt_lead1_us: the best through one relay alone (a chain of two);
	 * rtt_lead_us, when it differs, is through two (a chain of three),
	 * taken only if it beats the chain of two by chain_gain. */
	uint32_t rtt_lead_us;
	uint32_t rtt_lead1_us;
};

/* 0, so that a reply filled without chains in mind has no lead-in. */
#define SEL_NO_LEAD 0

/* A relay probed whose reply is still due, with a lead-in (the shorter of
 * its two): the chain it would end has a path of at least max(lead_us,
 * t - cr_us) at time t (its reply comes after cr + rs). cr_us is the
 * caller's estimate of RTT(c,r). */
struct sel_due {
	uint32_t lead_us;
	uint32_t cr_us;		/* 0: unknown, the bound is the lead-in alone */
};

struct sel_state {
	enum sel_direct direct;
	uint32_t rtt_direct_us;
	const struct sel_reply *replies;
	size_t nreplies;
	size_t nprobed;		/* relays probed: replies still due = nprobed - nreplies */
	uint64_t now_us;
	/* The replies still due whose relay has a lead-in (those not listed
	 * have none); only read with max_chain > 1. */
	const struct sel_due *due;
	size_t ndue;
};

enum sel_verdict { SEL_WAIT = 0, SEL_GO_DIRECT, SEL_GO_RELAY };

struct sel_result {
	enum sel_verdict verdict;
	uint32_t relay;		/* SEL_GO_RELAY: the chosen relay index */
	uint32_t path_rtt_us;	/* SEL_GO_RELAY: max(RTT(c,r), RTT(r,s)), or
				 * for a chain max(lead-in, RTT(r,s)) */
	/* SEL_GO_RELAY: 0 the relay alone, else a chain of this many relays
	 * (2: through its one-relay lead-in, 3: its two-relay one), relay last */
	unsigned chain;
	uint64_t wake_us;	/* SEL_WAIT: decide again by then at the latest */
	const char *why;	/* for the log line */
};

/* Decides now, or says until when to wait. Call again on every new reply,
 * when the direct probe finishes, and at wake_us. The path in hand: the
 * best single relay, or the best chain (a reply with a lead-in) when it
 * beats that by chain_gain. "Settled" below: all replies are in, or the
 * replies still due cannot change the choice: a reply still due at t has
 * a single-relay path above t/2 (cr + rs > t), and a chain path of at least
 * max(lead, t - cr) (see sel_due).
 * - direct OK: relay replies count if they arrived by c_wait * RTT_direct;
 *   decide when settled or at that deadline; take the best relay if
 *   RTT_direct / path >= min_gain, else go direct.
 * - direct still pending at time t means RTT_direct > t: once settled and
 *   t >= min_gain * best path, the relay wins whatever the direct RTT turns
 *   out to be (this also repairs a silently black-holed path).
 * - direct failed (or pending at repair_timeout): path repair, the best
 *   relay that reached the server once settled or at repair_timeout; none:
 *   direct, so the application sees what it would have seen without slot.
 * - direct refused: direct (the server refuses that port). */
void sel_decide(const struct sel_params *p, const struct sel_state *s,
    struct sel_result *out);

#endif
