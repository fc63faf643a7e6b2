#ifndef SLOT_RELAY_CCWATCH_H
#define SLOT_RELAY_CCWATCH_H

/* When a leg the relay sends on changes its congestion control on loss
 * ([pipe] congestion_on_loss, docs/relay.md). A leg starts with the legs'
 * algorithm (the host's default unless [pipe] congestion says otherwise),
 * whose slow start gets a short transfer going fastest on a clean path; once
 * the leg has retransmitted, the path loses packets and bbr, which does not
 * back off on every loss, moves more. The engine (pipe.c) asks ccwatch_due
 * after bytes went out on the leg; when due it reads the socket's
 * retransmission count (one getsockopt) and reports it to ccwatch_seen.
 *
 * The checks start CCWATCH_FIRST after the leg's first bytes and double
 * their gap up to CCWATCH_MAX while the leg stays clean: a lossy path is
 * found within about a quarter of a second, and a long clean transfer costs
 * one system call every few seconds. No I/O here: unit tested. */

#define CCWATCH_FIRST 0.25	/* seconds */
#define CCWATCH_MAX 4.0

struct ccwatch {
	double next;		/* when the next check is due; 0: not armed */
	double gap;		/* until the one after it */
	int done;		/* switched, or given up: no more checks */
};

void ccwatch_init(struct ccwatch *w);

/* Bytes went out on the leg at now: whether to read its retransmissions.
 * The first call only arms the watch. */
int ccwatch_due(struct ccwatch *w, double now);

/* The leg's retransmitted segments so far, read at now: 1 if it is time to
 * switch (the watch is then done), 0 to keep watching. */
int ccwatch_seen(struct ccwatch *w, double now, unsigned retrans);

/* The count could not be read, or the switch failed: stop watching. */
void ccwatch_stop(struct ccwatch *w);

#endif
