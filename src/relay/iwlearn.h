#ifndef SLOT_RELAY_IWLEARN_H
#define SLOT_RELAY_IWLEARN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "slot/addr.h"
#include "slot/htab.h"

/* Learned initial congestion windows, per destination prefix (TCP/SPAND's
 * idea: hosts share what recent transfers found out about a path). The
 * rules, and nothing of the kernel: what a finished transfer teaches
 * (iwl_learn), when a window is forgotten (iwl_expire), and what changes
 * the kernel's table must follow, told to a sink (iwbpf.c in the daemon, a
 * recorder in the tests).
 *
 * - A clean transfer (no retransmission) that delivered N segments and ended
 *   with a congestion window W supports an initial window of min(W, N): so
 *   many segments went out in one window's time without loss. The prefix's
 *   window becomes the mean of the old one and that, capped by cap.
 *   Windows at or below IWL_DEFAULT teach nothing (the kernel's own).
 * - A transfer with a retransmission halves the prefix's window; at or
 *   below IWL_DEFAULT the prefix is forgotten.
 * - A prefix not updated for expiry_ms is forgotten; beyond max_prefixes
 *   the least recently updated one is. */

#define IWL_DEFAULT 10	/* segments: the kernel's initial window (RFC 6928) */

struct iwl_conf {
	uint32_t cap;		/* segments, > IWL_DEFAULT */
	unsigned prefix4, prefix6;	/* bits, 1..32 and 1..128 */
	uint64_t expiry_ms;
	size_t max_prefixes;
};

/* What the relay's sending socket said (TCP_INFO) as its transfer ended. */
struct iwl_sample {
	struct addr dst;
	uint32_t snd_cwnd;	/* segments */
	uint32_t snd_mss;
	uint64_t bytes_acked;
	uint32_t total_retrans;
	uint32_t min_rtt_us;
	uint64_t delivery_rate;	/* bytes/s */
};

struct iwl_entry {
	struct hnode hn;
	TAILQ_ENTRY(iwl_entry) link;	/* least recently updated first */
	struct addr prefix;	/* host bits zero */
	unsigned plen;
	uint32_t iw;		/* segments */
	uint64_t updated_ms;
	uint32_t min_rtt_us;	/* of the latest sample: shown, not used */
	uint64_t delivery_rate;
	unsigned long long samples;
};

/* The kernel's table follows: set (add or replace) or delete a prefix. */
struct iwl_sink {
	void (*set)(void *arg, const struct iwl_entry *e);
	void (*del)(void *arg, const struct iwl_entry *e);
	void *arg;
};

struct iwl_counters {
	unsigned long long samples;	/* transfers looked at */
	unsigned long long learned;	/* clean ones that set a window */
	unsigned long long shrunk;	/* lossy ones that halved one */
	unsigned long long expired;	/* prefixes forgotten by age or room */
	unsigned long long ignored;	/* too short to teach anything */
};

enum iwl_result { IWL_IGNORED, IWL_LEARNED, IWL_SHRUNK, IWL_FORGOTTEN };

struct iwlearn;

/* NULL on ENOMEM. */
struct iwlearn *iwl_new(const struct iwl_conf *c, const struct iwl_sink *sink);
/* Forgets everything (the sink is told) and frees. */
void iwl_free(struct iwlearn *l);

/* A new configuration: a changed prefix length forgets everything; a
 * lower cap lowers the windows above it. */
void iwl_set_conf(struct iwlearn *l, const struct iwl_conf *c);

enum iwl_result iwl_learn(struct iwlearn *l, const struct iwl_sample *s, uint64_t now_ms);

/* Forgets prefixes older than expiry_ms. Returns how many. */
size_t iwl_expire(struct iwlearn *l, uint64_t now_ms);
/* Forgets every prefix. */
void iwl_flush(struct iwlearn *l);

/* The window learned for a's prefix, 0 if none. */
uint32_t iwl_lookup(const struct iwlearn *l, const struct addr *a);
size_t iwl_count(const struct iwlearn *l);
const struct iwl_counters *iwl_counters(const struct iwlearn *l);

/* Calls fn for every prefix, least recently updated first. */
void iwl_foreach(const struct iwlearn *l, void (*fn)(void *arg, const struct iwl_entry *e),
    void *arg);

/* a with every bit past plen cleared. */
void iwl_prefix(const struct addr *a, unsigned plen, struct addr *out);

#endif
