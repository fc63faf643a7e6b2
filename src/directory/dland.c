#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "slot/cmp.h"
#include "slot/cover.h"
#include "dland.h"

/* Relay i's report about j: reports are sorted by the peer's id, and ids
 * grow with the index, so by index too. */
static uint32_t
reported(const struct dstate *s, size_t i, size_t j, size_t nrtt)
{
	size_t lo = 0, hi = nrtt;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2, peer;
		uint32_t rtt;

		dstate_rtt_at(s, i, mid, &peer, &rtt);
		if (peer == j)
			return rtt;
		if (peer < j)
			lo = mid + 1;
		else
			hi = mid;
	}
	return COVER_NONE;
}

static uint64_t
fnv(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

struct lookup {
	const struct dstate *s;
	size_t *nrtt;
};

static uint32_t
rtt_of(void *arg, size_t i, size_t j)
{
	const struct lookup *k = arg;
	uint32_t a = reported(k->s, i, j, k->nrtt[i]);
	uint32_t b = reported(k->s, j, i, k->nrtt[j]);

	if (a == COVER_NONE)
		return b;
	if (b == COVER_NONE)
		return a;
	return (uint32_t)(((uint64_t)a + b) / 2);
}


size_t
dland_max(size_t nrelay, size_t want)
{
	size_t relays, rows, fit;

	if (nrelay == 0)
		return want;
	/* Relays that fill the answer leave no room (and no overflow). */
	if (nrelay >= DLAND_ANSWER_MAX / DLAND_RELAY_BYTES)
		return 0;
	relays = nrelay * DLAND_RELAY_BYTES;
	rows = DLAND_ANSWER_MAX - relays;
	if (rows > DLAND_ROWS_MAX)
		rows = DLAND_ROWS_MAX;
	/* Whole base64 lines of 57 bytes, 78 each; 2 bytes per relay and
	 * landmark. */
	fit = rows / 78 * 57 / (2 * nrelay);
	return want < fit ? want : fit;
}

int
dland_compute(const struct dstate *s, size_t max, const struct dland *prev,
    struct dland *out)
{
	size_t n = dstate_count(s), np = prev ? prev->nland : 0;
	struct lookup k = { s, calloc(n ? n : 1, sizeof(size_t)) };
	uint64_t *keys = calloc(n ? n : 1, sizeof(*keys));
	uint64_t *old = malloc((np ? np : 1) * sizeof(*old));
	bool *prefer = calloc(n ? n : 1, sizeof(*prefer));

	memset(out, 0, sizeof(*out));
	if (k.nrtt == NULL || keys == NULL || old == NULL || prefer == NULL)
		goto fail;
	if (max > n)
		max = n;
	out->land = malloc((max ? max : 1) * sizeof(*out->land));
	out->key = malloc((max ? max : 1) * sizeof(*out->key));
	out->weight = malloc((max ? max : 1) * sizeof(*out->weight));
	if (out->land == NULL || out->key == NULL || out->weight == NULL)
		goto fail;
	if (np > 0)
		memcpy(old, prev->key, np * sizeof(*old));
	qsort(old, np, sizeof(*old), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		struct dstate_relay_view v;

		dstate_relay_at(s, i, &v);
		k.nrtt[i] = v.nrtt;
		keys[i] = fnv(0xcbf29ce484222325ull, v.relay, strlen(v.relay));
		prefer[i] = np > 0 && bsearch(&keys[i], old, np, sizeof(*old), cmp_u64);
	}
	if (cover_landmarks(n, rtt_of, &k, max, prefer, out->land, out->weight,
	    &out->nland) < 0)
		goto fail;
	/* In relay order: the order they were picked in means nothing to a
	 * client, and would make a reshuffle look like news. */
	for (size_t l = 1; l < out->nland; l++)
		for (size_t m = l; m > 0 && out->land[m - 1] > out->land[m]; m--) {
			uint32_t t = out->land[m];
			float w = out->weight[m];

			out->land[m] = out->land[m - 1];
			out->weight[m] = out->weight[m - 1];
			out->land[m - 1] = t;
			out->weight[m - 1] = w;
		}
	for (size_t l = 0; l < out->nland; l++)
		out->key[l] = keys[out->land[l]];
	out->nrelay = n;
	out->rtt = malloc((n * out->nland > 0 ? n * out->nland : 1) * sizeof(*out->rtt));
	if (out->rtt == NULL)
		goto fail;
	for (size_t i = 0; i < n; i++)
		for (size_t l = 0; l < out->nland; l++) {
			uint32_t v = i == out->land[l] ? 0 : rtt_of(&k, i, out->land[l]);
			uint64_t u = ((uint64_t)v + DLAND_UNIT_US / 2) / DLAND_UNIT_US;

			out->rtt[i * out->nland + l] = v == COVER_NONE ? DLAND_NONE :
			    u >= DLAND_NONE ? DLAND_NONE - 1 : (uint16_t)u;
		}
	uint64_t h = 0xcbf29ce484222325ull;
	h = fnv(h, &n, sizeof(n));
	h = fnv(h, out->land, out->nland * sizeof(*out->land));
	out->digest = h;
	free(k.nrtt);
	free(keys);
	free(old);
	free(prefer);
	return 0;
fail:
	free(k.nrtt);
	free(keys);
	free(old);
	free(prefer);
	dland_free(out);
	return -1;
}

bool
dland_moved(const struct dland *old, const struct dland *new_)
{
	size_t n = new_->nrelay * new_->nland;

	if (old->digest != new_->digest || old->nrelay != new_->nrelay ||
	    old->nland != new_->nland)
		return true;
	for (size_t i = 0; i < n; i++) {
		unsigned a = old->rtt[i], b = new_->rtt[i], d = a > b ? a - b : b - a;
		unsigned tol = a / 10 > 1000 / DLAND_UNIT_US ? a / 10 : 1000 / DLAND_UNIT_US;

		if ((a == DLAND_NONE) != (b == DLAND_NONE) || (a != DLAND_NONE && d > tol))
			return true;
	}
	return false;
}

int
dland_encode(const struct dland *l, uint8_t **buf, size_t *len)
{
	size_t n = l->nrelay * l->nland;

	*buf = NULL;
	*len = 0;
	if (n == 0)
		return 0;
	if ((*buf = malloc(2 * n)) == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		(*buf)[2 * i] = (uint8_t)(l->rtt[i] & 0xff);
		(*buf)[2 * i + 1] = (uint8_t)(l->rtt[i] >> 8);
	}
	*len = 2 * n;
	return 0;
}

int
dland_dup(const struct dland *l, struct dland *out)
{
	size_t L = l->nland ? l->nland : 1, n = l->nrelay * l->nland;

	*out = *l;
	out->land = malloc(L * sizeof(*out->land));
	out->key = malloc(L * sizeof(*out->key));
	out->weight = malloc(L * sizeof(*out->weight));
	out->rtt = malloc((n > 0 ? n : 1) * sizeof(*out->rtt));
	if (out->land == NULL || out->key == NULL || out->weight == NULL ||
	    out->rtt == NULL) {
		dland_free(out);
		return -1;
	}
	memcpy(out->land, l->land, l->nland * sizeof(*out->land));
	memcpy(out->key, l->key, l->nland * sizeof(*out->key));
	memcpy(out->weight, l->weight, l->nland * sizeof(*out->weight));
	memcpy(out->rtt, l->rtt, n * sizeof(*out->rtt));
	return 0;
}

void
dland_free(struct dland *l)
{
	free(l->land);
	free(l->key);
	free(l->weight);
	free(l->rtt);
	memset(l, 0, sizeof(*l));
}
