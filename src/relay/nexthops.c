#include <stdlib.h>

#include "nexthops.h"

struct entry {
	struct endpoint ctl;
	uint16_t data_port;
};

struct nexthops {
	struct entry *e;	/* sorted by ctl */
	size_t n;
	int listed;		/* a listing came */
};

static int
entry_cmp(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	return ep_cmp(&x->ctl, &y->ctl);
}

struct nexthops *
nexthops_new(void)
{
	return calloc(1, sizeof(struct nexthops));
}

void
nexthops_free(struct nexthops *h)
{
	if (h == NULL)
		return;
	free(h->e);
	free(h);
}

int
nexthops_set(struct nexthops *h, const struct endpoint *ctl, const uint16_t *data_port,
    size_t n)
{
	struct entry *e = malloc((n ? n : 1) * sizeof(*e));

	if (e == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		e[i].ctl = ctl[i];
		e[i].data_port = data_port[i];
	}
	qsort(e, n, sizeof(*e), entry_cmp);
	free(h->e);
	h->e = e;
	h->n = n;
	h->listed = 1;
	return 0;
}

int
nexthops_have_listing(const struct nexthops *h)
{
	return h != NULL && h->listed;
}

enum nexthop_verdict
nexthops_check(const struct nexthops *h, const struct endpoint *ctl, uint16_t data_port)
{
	struct entry key = { .ctl = *ctl };
	const struct entry *e;
	size_t i, j;

	if (h == NULL || h->n == 0 ||
	    (e = bsearch(&key, h->e, h->n, sizeof(*h->e), entry_cmp)) == NULL)
		return NEXTHOP_UNLISTED;
	/* A relay listed twice (by two registrations) may be at either port,
	 * and bsearch finds any one of its entries. */
	for (i = (size_t)(e - h->e); i > 0 && ep_eq(&h->e[i - 1].ctl, ctl); i--)
		;
	for (j = i; j < h->n && ep_eq(&h->e[j].ctl, ctl); j++)
		if (h->e[j].data_port == data_port)
			return NEXTHOP_LISTED;
	return NEXTHOP_OTHER_PORT;
}
