#ifndef SLOT_RELAY_FLOW_H
#define SLOT_RELAY_FLOW_H

#include <stdbool.h>
#include <stddef.h>

/* The state machine of one direction of a pipe (source socket -> kernel pipe
 * -> destination socket), with no I/O in it, so every transition can be unit
 * tested. The splice engine (pipe.c) performs the syscalls and reports their
 * results here; the answers tell it what to do next and which events each
 * socket must wait for.
 *
 *   READING --EOF, nothing in flight--> SHUT (peer's write half shut down)
 *   READING --EOF, bytes in flight----> DRAINING --flushed--> SHUT
 *
 * Backpressure: a flow wants to read only while its bytes in flight are below
 * the pipe's capacity and the kernel pipe has room, so a destination that does
 * not take data stops its source from being read at all. */

enum flow_state {
	FLOW_READING = 0,
	FLOW_DRAINING,	/* source at EOF, bytes still to write */
	FLOW_SHUT,	/* destination's write half shut down: done */
};

/* What the engine must do after reporting a result. */
enum flow_action {
	FLOW_NONE = 0,
	FLOW_FLUSH,	/* write what is in flight to the destination */
	FLOW_SHUTDOWN,	/* shutdown(destination, SHUT_WR) */
	FLOW_RESET,	/* error: reset both sides of the pipe */
};

struct flow {
	enum flow_state state;
	size_t inflight;	/* bytes in the kernel pipe */
	size_t cap;		/* the kernel pipe's size */
	bool pipe_full;		/* the pipe refused more though inflight < cap */
	unsigned long long bytes;	/* total written to the destination */
};

void flow_init(struct flow *f, size_t cap);

/* The source socket should be watched for reading. */
bool flow_wants_read(const struct flow *f);
/* The destination socket should be watched for writing. */
bool flow_wants_write(const struct flow *f);
/* The flow holds bytes, so it needs a kernel pipe. */
bool flow_needs_kpipe(const struct flow *f);

/* Result of splicing source -> kernel pipe: n > 0 bytes moved, n == 0 EOF,
 * n < 0 with err: EAGAIN (nothing to read, or the pipe is full), anything
 * else is fatal. */
enum flow_action flow_on_read(struct flow *f, long n, int err);

/* Result of splicing kernel pipe -> destination: n >= 0 bytes written, or
 * n < 0 with err (EAGAIN: destination full; anything else is fatal). */
enum flow_action flow_on_write(struct flow *f, long n, int err);

const char *flow_state_str(enum flow_state s);

/* A pipe is two flows; it is finished when both are SHUT. */
bool flow_pair_done(const struct flow *a, const struct flow *b);

#endif
