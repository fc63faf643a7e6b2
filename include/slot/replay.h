#ifndef SLOT_REPLAY_H
#define SLOT_REPLAY_H

#include <stddef.h>
#include <stdint.h>

/* Freshness and replay protection for authenticated messages: a message is
 * accepted once, and only if its timestamp lies within +-window of the
 * receiver's clock. Nonces are remembered until their timestamp leaves the
 * window, so memory is bounded by capacity. */

enum replay_verdict {
	REPLAY_OK = 0,		/* fresh, now recorded */
	REPLAY_STALE,		/* timestamp outside the window */
	REPLAY_DUP,		/* (timestamp, nonce) seen before */
	REPLAY_FULL,		/* no room: every slot holds a live nonce */
};

struct replay;

/* Returns NULL on allocation failure. */
struct replay *replay_new(size_t capacity, uint64_t window_us);
void replay_free(struct replay *r);
void replay_set_window(struct replay *r, uint64_t window_us);

/* now_us and ts_us are wall-clock microseconds (clock_real_us()). */
enum replay_verdict replay_check(struct replay *r, uint64_t ts_us, uint64_t nonce,
    uint64_t now_us);
/* What replay_check would say (REPLAY_OK, _STALE or _DUP; never _FULL),
 * recording nothing. */
enum replay_verdict replay_peek(const struct replay *r, uint64_t ts_us, uint64_t nonce,
    uint64_t now_us);

size_t replay_count(const struct replay *r);
const char *replay_verdict_str(enum replay_verdict v);

#endif
