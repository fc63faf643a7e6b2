#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "slot/chain.h"
#include "slot/clock.h"
#include "slot/cover.h"
#include "slot/log.h"
#include "slot/select.h"
#include "dirsync.h"
#include "rank.h"
#include "slot/rlink.h"
#include "relays.h"

struct row {
	const struct endpoint *ep;
	uint32_t idx;		/* in the listing */
};

static int
cmp_row(const void *x, const void *y)
{
	return ep_cmp(((const struct row *)x)->ep, ((const struct row *)y)->ep);
}

/* slotd's RTT to r now: the control link's, else its last probe reply. */
static uint32_t
estimate(const struct crelay *r)
{
	uint32_t v = r->link ? rlink_rtt_us(r->link) : 0;

	if (v == 0)
		v = r->rtt_us;
	return v ? v : COVER_NONE;
}

static void
view_free(struct slotd *d)
{
	free(d->rank_cr);
	free(d->rank_lr);
	free(d->rank_rl);
	d->rank_cr = d->rank_lr = d->rank_rl = NULL;
	d->rank_n = d->rank_nland = 0;
}

void
rank_update(struct slotd *d)
{
	size_t n = d->nrelays, nl = 0, L = 0, max = (size_t)d->conf.sel.k + 8;
	const struct dirc_landmarks *land = NULL;
	const struct dirc_relay *list = dirsync_listing(d, &nl, &land);
	uint32_t *cr = NULL, *lr = NULL, *rl = NULL, *out = NULL, *row_of = NULL;
	uint32_t *lead = NULL;
	struct chain_lead *reach = NULL;
	bool *avoid = NULL, *nofwd = NULL;
	struct row *rows = NULL;
	size_t nout = 0, ngreedy = 0, nchain = 0;
	bool cover = d->conf.sel.strategy == SEL_COVER, chains = d->conf.sel.max_chain > 1;
	uint64_t now = clock_mono_us();

	view_free(d);
	for (size_t i = 0; i < n; i++) {
		struct crelay *r = d->relays[i];

		r->rank = SEL_NO_RANK;
		r->rtt_est_us = 0;
		r->lead_us = r->lead1_us = 0;
		r->nlead = 0;
		r->lead1_via = NULL;
	}
	d->ranked = d->rank_greedy = 0;
	d->chain_ends = 0;
	if ((!cover && !chains) || n == 0)
		return;
	if (land != NULL && land->nland > 0 && land->nrelay == nl)
		L = land->nland;
	cr = malloc(n * sizeof(*cr));
	row_of = malloc(n * sizeof(*row_of));
	out = malloc((max < n ? max : n) * sizeof(*out));
	lr = malloc((L ? L : 1) * sizeof(*lr));
	rl = malloc((n * L > 0 ? n * L : 1) * sizeof(*rl));
	rows = malloc((nl ? nl : 1) * sizeof(*rows));
	if (chains) {
		lead = malloc(n * sizeof(*lead));
		reach = malloc(n * sizeof(*reach));
		avoid = malloc(n * sizeof(*avoid));
		nofwd = malloc(n * sizeof(*nofwd));
	}
	if (cr == NULL || row_of == NULL || out == NULL || lr == NULL || rl == NULL ||
	    rows == NULL || (chains && (lead == NULL || reach == NULL || avoid == NULL ||
	    nofwd == NULL))) {
		log_warnx("relay ranking: out of memory; probing relays at random");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		cr[i] = estimate(d->relays[i]);
		d->relays[i]->rtt_est_us = cr[i] == COVER_NONE ? 0 : cr[i];
	}
	/* Each relay's row in the listing, by its control endpoint (static
	 * relays the directory does not list have none). */
	for (size_t j = 0; j < nl; j++)
		rows[j] = (struct row){ &list[j].relay, (uint32_t)j };
	qsort(rows, nl, sizeof(*rows), cmp_row);
	for (size_t i = 0; i < n; i++) {
		struct row key = { &d->relays[i]->conf.control, 0 };
		const struct row *f = L ? bsearch(&key, rows, nl, sizeof(*rows), cmp_row) : NULL;

		row_of[i] = f ? f->idx : COVER_NONE;
	}
	/* Landmark l as a relay of ours. */
	for (size_t l = 0; l < L; l++) {
		lr[l] = COVER_NONE;
		for (size_t i = 0; i < n; i++)
			if (row_of[i] == land->index[l]) {
				lr[l] = (uint32_t)i;
				break;
			}
	}
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < L; l++) {
			uint16_t v = row_of[i] == COVER_NONE ? DIRC_LAND_NONE :
			    land->rtt[(size_t)row_of[i] * L + l];

			rl[i * L + l] = v == DIRC_LAND_NONE ? COVER_NONE :
			    (uint32_t)v * DIRC_LAND_UNIT_US;
		}
	/* Chains: every relay's best lead-in, once per ranking (chain.h). A
	 * relay out of use now starts or carries none; one that has not said
	 * on its link that it takes chains (an older relay, or [chain] allow =
	 * no) may only end one. hold.c checks the relays of a lead-in again
	 * when it takes one. */
	if (chains) {
		struct chain_input ch = {
			.nrelay = n, .cr_us = cr, .nland = L, .land_relay = lr, .rl_us = rl,
			.max_chain = d->conf.sel.max_chain, .avoid = avoid,
			.no_forward = nofwd,
		};

		for (size_t i = 0; i < n; i++) {
			avoid[i] = !relay_usable(d, d->relays[i], now);
			nofwd[i] = !relay_takes_chains(d->relays[i]);
		}
		if (chain_reach(&ch, reach) < 0) {
			log_warnx("relay ranking: out of memory for chains; single relays only");
			chains = false;
		}
		for (size_t i = 0; chains && i < n; i++) {
			struct crelay *r = d->relays[i];

			lead[i] = reach[i].us;
			if (reach[i].us == CHAIN_NONE)
				continue;
			/* 0 means none to sel_decide. */
			r->lead_us = reach[i].us ? reach[i].us : 1;
			r->nlead = reach[i].nvia;
			for (unsigned x = 0; x < reach[i].nvia; x++)
				r->lead_via[x] = d->relays[reach[i].via[x]];
			if (reach[i].us1 != CHAIN_NONE) {
				r->lead1_us = reach[i].us1 ? reach[i].us1 : 1;
				r->lead1_via = d->relays[reach[i].via1];
			}
			nchain++;
		}
		d->chain_ends = nchain;
	}
	if (!cover)
		goto out;
	struct cover_input in = {
		.nrelay = n, .cr_us = cr, .nland = L, .land_relay = lr,
		.land_weight = L ? land->weight : NULL, .rl_us = rl,
		.lead_us = chains ? lead : NULL, .chain_gain = d->conf.sel.chain_gain,
		.c_wait = d->conf.sel.c_wait,
	};
	if (cover_rank(&in, max < n ? max : n, out, &nout, &ngreedy) < 0) {
		log_warnx("relay ranking: out of memory; probing relays at random");
		goto out;
	}
	for (size_t x = 0; x < nout; x++)
		d->relays[out[x]]->rank = (uint32_t)x;
	d->ranked = nout;
	d->rank_greedy = ngreedy;
	log_debug("relay ranking: %zu relays, %zu landmarks, %zu ranked, %zu of them by "
	    "the landmarks, %zu with a lead-in", n, L, nout, ngreedy, nchain);
	if (L > 0) {
		/* Kept for rank_beside until the next ranking. */
		d->rank_n = n;
		d->rank_nland = L;
		d->rank_cr = cr;
		d->rank_lr = lr;
		d->rank_rl = rl;
		cr = lr = rl = NULL;
	}
out:
	free(cr);
	free(row_of);
	free(out);
	free(lr);
	free(rl);
	free(rows);
	free(lead);
	free(reach);
	free(avoid);
	free(nofwd);
}

static void
rank_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	rank_update(w->data);
}

void
rank_start(struct slotd *d)
{
	ev_timer_init(&d->rank_timer, rank_timer_cb, 1.0, RANK_INTERVAL_S);
	d->rank_timer.data = d;
	ev_timer_start(d->loop, &d->rank_timer);
}

void
rank_soon(struct slotd *d)
{
	if (d->loop == NULL || !ev_is_active(&d->rank_timer) ||
	    ev_timer_remaining(d->loop, &d->rank_timer) <= RANK_SOON_S)
		return;
	ev_timer_stop(d->loop, &d->rank_timer);
	ev_timer_set(&d->rank_timer, RANK_SOON_S, RANK_INTERVAL_S);
	ev_timer_start(d->loop, &d->rank_timer);
}

void
rank_stop(struct slotd *d)
{
	ev_timer_stop(d->loop, &d->rank_timer);
	view_free(d);
}

size_t
rank_beside(struct slotd *d, const struct addr *server, size_t max, uint32_t *out,
    size_t *beside)
{
	unsigned want = server->family == AF_INET ? (unsigned)d->conf.server_prefix :
	    (unsigned)d->conf.server_prefix6, best = 0;
	size_t b = SIZE_MAX;

	if (want == 0 || d->rank_n != d->nrelays || d->rank_nland == 0)
		return 0;
	/* The longest match; of equals, the first relay. */
	for (size_t i = 0; i < d->nrelays; i++) {
		unsigned bits = addr_common_bits(&d->relays[i]->conf.control.addr, server);

		if (bits >= want && bits > best)
			best = bits, b = i;
	}
	if (b == SIZE_MAX)
		return 0;
	struct cover_input in = {
		.nrelay = d->rank_n, .cr_us = d->rank_cr, .nland = d->rank_nland,
		.land_relay = d->rank_lr, .rl_us = d->rank_rl,
	};
	*beside = b;
	return cover_beside(&in, b, COVER_NONE, max, out);
}
