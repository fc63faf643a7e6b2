#ifndef SLOT_DIRECTORY_DLAND_H
#define SLOT_DIRECTORY_DLAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dstate.h"

/*
 * What clients need to rank relays by the cover strategy (slot/cover.h):
 * a few relays as landmarks, chosen by farthest point over the relays'
 * reported RTTs, their weights, and every relay's RTT to each landmark.
 * Sent with slot.list (docs/directory.md, "Landmarks"). RTTs on the wire
 * are 16-bit units of 100 us (DLAND_NONE: not measured), so n relays and L
 * landmarks take 2nL bytes: 128 KB for 250 relays, 5 MB for 10,000 with
 * the default 256 landmarks.
 */

#define DLAND_UNIT_US 100
#define DLAND_NONE 0xffffu

struct dland {
	size_t nrelay;		/* rows, in dstate index order (the listing's) */
	size_t nland;
	uint32_t *land;		/* relay index of landmark l */
	uint64_t *key;		/* landmark l's identity (a hash of its endpoint) */
	float *weight;		/* relays landmark l stands for */
	uint16_t *rtt;		/* nrelay x nland, DLAND_UNIT_US units */
	uint64_t digest;	/* of the relay count and the landmarks */
};

/*
 * Clients refuse a listing over 32 MiB (DIRC_MAX_ANSWER), and the rows grow
 * as relays times landmarks ([groups] landmarks allows 4,096, max_relays
 * 65,536): a listing sends no more landmarks than keep the rows within
 * DLAND_ROWS_MAX once in base64 (xmlrpc-c writes 78 bytes for every 57,
 * line ends included), and within what DLAND_ANSWER_MAX leaves after
 * DLAND_RELAY_BYTES per relay (a relay's struct in the answer, identity
 * mode's certificate and the longest endpoint included, takes 690 bytes
 * at most).
 */
#define DLAND_ROWS_MAX ((size_t)16 << 20)
#define DLAND_ANSWER_MAX ((size_t)28 << 20)
#define DLAND_RELAY_BYTES 720

/* The most landmarks, up to want, that a listing of nrelay relays may
 * carry (above). */
size_t dland_max(size_t nrelay, size_t want);

/* Computes the landmarks of s's relays (at most max), keeping those of prev
 * (NULL: none) where others are not clearly better (cover_landmarks).
 * RTT(i,j) is the mean of what i and j reported of each other, or the one
 * reported. Returns 0 or -1 (out of memory). */
int dland_compute(const struct dstate *s, size_t max, const struct dland *prev,
    struct dland *out);

/* Whether clients holding old should fetch new: other landmarks or
 * relays, or an RTT that moved by more than a tenth (and 1 ms), so that
 * the jitter of reports does not make every listing new. */
bool dland_moved(const struct dland *old, const struct dland *new_);

/* The rows as little-endian bytes (malloc'ed, 2 * nrelay * nland; NULL
 * and 0 when empty). Returns 0 or -1. */
int dland_encode(const struct dland *l, uint8_t **buf, size_t *len);

/* A deep copy of l into out. Returns 0 or -1 (out of memory, out empty). */
int dland_dup(const struct dland *l, struct dland *out);

void dland_free(struct dland *l);

#endif
