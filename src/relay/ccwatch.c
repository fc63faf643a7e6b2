#include "ccwatch.h"

void
ccwatch_init(struct ccwatch *w)
{
	w->next = 0;
	w->gap = CCWATCH_FIRST;
	w->done = 0;
}

int
ccwatch_due(struct ccwatch *w, double now)
{
	if (w->done)
		return 0;
	if (w->next == 0) {
		w->next = now + w->gap;
		return 0;
	}
	return now >= w->next;
}

int
ccwatch_seen(struct ccwatch *w, double now, unsigned retrans)
{
	if (retrans > 0) {
		w->done = 1;
		return 1;
	}
	w->gap *= 2;
	if (w->gap > CCWATCH_MAX)
		w->gap = CCWATCH_MAX;
	w->next = now + w->gap;
	return 0;
}

void
ccwatch_stop(struct ccwatch *w)
{
	w->done = 1;
}
