#include <errno.h>

#include "flow.h"

void
flow_init(struct flow *f, size_t cap)
{
	f->state = FLOW_READING;
	f->inflight = 0;
	f->cap = cap;
	f->pipe_full = false;
	f->bytes = 0;
}

bool
flow_wants_read(const struct flow *f)
{
	return f->state == FLOW_READING && f->inflight < f->cap && !f->pipe_full;
}

bool
flow_wants_write(const struct flow *f)
{
	/* After every flush attempt, bytes left in flight mean the destination
	 * said EAGAIN. */
	return f->inflight > 0 && f->state != FLOW_SHUT;
}

bool
flow_needs_kpipe(const struct flow *f)
{
	return f->inflight > 0;
}

enum flow_action
flow_on_read(struct flow *f, long n, int err)
{
	if (f->state != FLOW_READING)
		return FLOW_NONE;
	if (n > 0) {
		f->inflight += (size_t)n;
		return FLOW_FLUSH;
	}
	if (n == 0) {
		if (f->inflight > 0) {
			f->state = FLOW_DRAINING;
			return FLOW_FLUSH;
		}
		f->state = FLOW_SHUT;
		return FLOW_SHUTDOWN;
	}
	if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) {
		/* A kernel pipe counts buffers, not bytes: partly filled pages
		 * can fill it before inflight reaches cap. Stop reading until a
		 * write makes room, or a readable socket would spin. */
		if (f->inflight > 0)
			f->pipe_full = true;
		return FLOW_NONE;
	}
	return FLOW_RESET;
}

enum flow_action
flow_on_write(struct flow *f, long n, int err)
{
	if (f->state == FLOW_SHUT)
		return FLOW_NONE;
	if (n < 0) {
		if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR)
			return FLOW_NONE;
		return FLOW_RESET;
	}
	if ((size_t)n > f->inflight)	/* cannot happen; never underflow */
		n = (long)f->inflight;
	f->inflight -= (size_t)n;
	f->bytes += (unsigned long long)n;
	if (n > 0)
		f->pipe_full = false;
	if (f->inflight > 0)
		return n > 0 ? FLOW_FLUSH : FLOW_NONE;
	if (f->state == FLOW_DRAINING) {
		f->state = FLOW_SHUT;
		return FLOW_SHUTDOWN;
	}
	return FLOW_NONE;
}

const char *
flow_state_str(enum flow_state s)
{
	switch (s) {
	case FLOW_READING:
		return "reading";
	case FLOW_DRAINING:
		return "draining";
	case FLOW_SHUT:
		return "shut";
	}
	return "?";
}

bool
flow_pair_done(const struct flow *a, const struct flow *b)
{
	return a->state == FLOW_SHUT && b->state == FLOW_SHUT;
}
