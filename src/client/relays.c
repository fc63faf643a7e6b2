#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/select.h"
#include "hold.h"
#include "rank.h"
#include "libsrv.h"
#include "relays.h"
#include "rules.h"
#include "rulesync.h"

static unsigned
mask_shift(uint32_t mask)
{
	return mask ? (unsigned)__builtin_ctz(mask) : 0;
}

static void
link_state_cb(void *user, struct rlink *l, enum rlink_state st)
{
	struct slotd *d = user;
	size_t up = 0;

	for (size_t i = 0; i < d->nrelays; i++)
		if (d->relays[i]->link && rlink_state(d->relays[i]->link) == RL_UP)
			up++;
	d->relays_up = up;
	/* Cached choices through a relay we cannot reach are worthless. */
	if (st == RL_DOWN && d->cache)
		(void)selc_invalidate_relay(d->cache, rlink_endpoint(l));
	/* A link up brings its RTT: rank with it soon (links come up in a
	 * burst at start, hence soon and not now). */
	if (st == RL_UP && l != NULL)
		rank_soon(d);
}

struct crelay *
relay_find(struct slotd *d, const struct endpoint *control)
{
	for (size_t i = 0; i < d->nrelays; i++)
		if (ep_eq(&d->relays[i]->conf.control, control))
			return d->relays[i];
	return NULL;
}

bool
relay_rules_in(const struct slotd *d, const struct crelay *r)
{
	return d->rsync == NULL || rsync_installed(d->rsync) >= r->rules_gen;
}

bool
relay_usable(const struct slotd *d, const struct crelay *r, uint64_t now_us)
{
	/* A relay whose DNAT rule is not in the kernel yet is left out: its
	 * mark would steer nowhere, or to the relay that had it before. */
	return r->link && rlink_state(r->link) == RL_UP && now_us >= r->quarantine_until_us &&
	    relay_rules_in(d, r);
}

bool
relay_takes_chains(const struct crelay *r)
{
	return r->link && rlink_chains(r->link);
}

void
relay_quarantine(struct slotd *d, struct crelay *r, const char *why)
{
	char b[EP_STRLEN];

	if (r == NULL || d->conf.failure_quarantine_ms == 0)
		return;
	r->quarantine_until_us = clock_mono_us() + d->conf.failure_quarantine_ms * 1000;
	log_warnx("relay %s: %s; left out for %llu ms", ep_fmt(&r->conf.control, b), why,
	    (unsigned long long)d->conf.failure_quarantine_ms);
	if (d->cache)
		(void)selc_invalidate_relay(d->cache, &r->conf.control);
}

const char *
relay_state_str(const struct crelay *r)
{
	if (r->link == NULL)
		return "down";
	switch (rlink_state(r->link)) {
	case RL_UP: return "up";
	case RL_CONNECTING: return "connecting";
	default: return "down";
	}
}

static void
crelay_free(struct crelay *r)
{
	if (r == NULL)
		return;
	rlink_free(r->link);
	free(r);
}

int
relays_apply(struct slotd *d, const struct cconf *conf, char *err, size_t errlen)
{
	size_t n = conf->nrelays, maxmark = conf->relay_mask >> mask_shift(conf->relay_mask);
	struct crelay **set = calloc(n ? n : 1, sizeof(*set));
	bool *reused = calloc(n ? n : 1, sizeof(*reused));
	bool *taken = calloc(maxmark + 1, sizeof(*taken));
	struct rules_relay *rr = calloc(n ? n : 1, sizeof(*rr));
	struct portset *ports = NULL;
	int rc = -1;

	if (set == NULL || reused == NULL || taken == NULL || rr == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	/* Relays that stay keep their link and their mark, if the mask still
	 * holds it and their data port is the same (so their rule in the
	 * kernel stays right while the new set is on its way). */
	for (size_t i = 0; i < n; i++) {
		struct crelay *old = relay_find(d, &conf->relays[i].control);
		if (old && (old->mark & ~conf->relay_mask) == 0 && old->mark != 0 &&
		    old->conf.data_port == conf->relays[i].data_port &&
		    !taken[old->mark >> mask_shift(conf->relay_mask)]) {
			set[i] = old;
			reused[i] = true;
			taken[old->mark >> mask_shift(conf->relay_mask)] = true;
		}
	}
	for (size_t i = 0, v = 1; i < n; i++) {
		if (set[i])
			continue;
		while (v <= maxmark && taken[v])
			v++;
		if (v > maxmark) {
			snprintf(err, errlen, "relay_mask has no room for %zu relays", n);
			goto out;
		}
		if ((set[i] = calloc(1, sizeof(**set))) == NULL) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		taken[v] = true;
		set[i]->mark = (uint32_t)v << mask_shift(conf->relay_mask);
		set[i]->rank = SEL_NO_RANK;
		set[i]->rules_gen = d->rules_gen + 1;
	}
	for (size_t i = 0; i < n; i++) {
		rr[i].mark = set[i]->mark;
		rr[i].data = conf->relays[i].control;
		rr[i].data.port = conf->relays[i].data_port;
	}
	struct rules_conf rc_ = {
		.family = AF_UNSPEC,	/* both */
		.queue = conf->queue,
		.bypass_mark = conf->bypass_mark,
		.relay_mask = conf->relay_mask,
		.ports = &conf->ports,
		.include = &conf->include,
		.exclude = &conf->exclude,
		.mode = conf->mode,
		.lan = conf->lan,
		.nlan = conf->nlan,
		.synack = d->ct != NULL && conf->synack_hold,
		.reused_direct = d->ct != NULL,
		.lib_mark = conf->lib_socket[0] ? conf->lib_mark : 0,
		.run_cgroup = conf->lib_socket[0] ? libsrv_cgroup(d) : NULL,
	};
	/* synack_hold waits until the SYN-ACKs are queued (hold.c). */
	if (!rc_.synack)
		d->synack_gen = 0;
	else if (d->synack_gen == 0)
		d->synack_gen = d->rules_gen + 1;
	if (d->rsync == NULL) {
		/* Start-up: nothing is hijacked before these rules exist. */
		if (rules_apply(&rc_, rr, n, &d->rules_exec, err, errlen) == -1)
			goto out;
		d->ctr.rules_applied++;
	} else {
		/* Running: the restore goes off the loop, and the new relays
		 * wait for it (relay_usable). */
		struct rules_set rs;
		if (rules_set_render(&rc_, rr, n, d->rules_exec.backend, &rs) == -1) {
			snprintf(err, errlen, "cannot render rules: %s", strerror(errno));
			goto out;
		}
		if (rsync_submit(d->rsync, &rs, d->rules_gen + 1) == -1) {
			snprintf(err, errlen, "rule generation out of order");
			goto out;
		}
	}
	d->rules_gen++;

	/* Committed: relays that left go, new ones start connecting. */
	for (size_t i = 0; i < d->nrelays; i++) {
		struct crelay *old = d->relays[i];
		bool kept = false;
		for (size_t j = 0; j < n; j++)
			if (set[j] == old)
				kept = true;
		if (kept)
			continue;
		hold_relay_gone(d, old);
		if (d->cache)
			(void)selc_invalidate_relay(d->cache, &old->conf.control);
		crelay_free(old);
	}
	free(d->relays);
	d->relays = set;
	d->nrelays = n;
	set = NULL;
	for (size_t i = 0; i < n; i++) {
		struct crelay *r = d->relays[i];
		r->conf = conf->relays[i];
		if (!reused[i] && (r->link = rlink_new(&d->env, &r->conf.control, link_state_cb,
		    d)) == NULL)
			log_warnx("out of memory for a relay link");
	}
	link_state_cb(d, NULL, RL_UP);
	rank_update(d);
	rc = 0;
out:
	if (set) {
		for (size_t i = 0; i < n; i++)
			if (!reused[i])
				crelay_free(set[i]);
		free(set);
	}
	free(reused);
	free(taken);
	free(rr);
	free(ports);
	return rc;
}

int
rlinks_revoke(struct slotd *d, const struct ident_revoked *rev)
{
	struct ident_revoked copy;
	int n = 0;

	if (ident_revoked_copy(rev, &copy) == -1)
		return -1;
	ident_revoked_free(&d->revoked);
	d->revoked = copy;
	d->env.revoked = &d->revoked;
	for (size_t i = 0; i < d->nrelays; i++)
		if (d->relays[i]->link && rlink_revoke(d->relays[i]->link, &d->revoked))
			n++;
	if (n > 0)
		log_warnx("revocation: %d relays dropped (%zu serials revoked)", n,
		    d->revoked.n);
	return n;
}

void
relays_rules_done(void *user, uint64_t gen)
{
	struct slotd *d = user;
	size_t now_in = 0;

	d->ctr.rules_applied++;
	for (size_t i = 0; i < d->nrelays; i++)
		if (d->relays[i]->rules_gen == gen)
			now_in++;
	log_info("rules: set %llu in place; %zu relays of %zu waited for it",
	    (unsigned long long)gen, now_in, d->nrelays);
	/* Relays whose rule just went in may be ranked and sampled. */
	rank_soon(d);
}

void
relays_free(struct slotd *d)
{
	for (size_t i = 0; i < d->nrelays; i++)
		crelay_free(d->relays[i]);
	free(d->relays);
	d->relays = NULL;
	d->nrelays = 0;
	d->relays_up = 0;
}
