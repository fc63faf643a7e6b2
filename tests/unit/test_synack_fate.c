/* What slotd does with a relay's SYN-ACK read after its pipe failed
 * (synack_failed_fate in src/client/hold.c): keyed on the conntrack entry
 * the packet was queued with, as the queue tells it, or as the rules that
 * queued it imply where the queue tells nothing. Never on time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <linux/netfilter/nf_conntrack_common.h>

#include "../../src/client/hold.h"

static void
test_by_conntrack(void **state)
{
	const uint32_t nat = IPS_CONFIRMED | IPS_SEEN_REPLY | IPS_DST_NAT | IPS_DST_NAT_DONE;
	(void)state;

	/* Queued before the deletion: it holds the DNAT entry (dying since). */
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, nat), SYNACK_DROP_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, nat | IPS_DYING), SYNACK_DROP_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, IPS_DST_NAT), SYNACK_DROP_CT);
	/* An entry without destination NAT, or none: passed. */
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, IPS_CONFIRMED), SYNACK_PASS_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY,
	    IPS_CONFIRMED | IPS_SRC_NAT | IPS_SRC_NAT_DONE), SYNACK_PASS_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_NONE, 0), SYNACK_PASS_CT);
}

static void
test_by_rule(void **state)
{
	(void)state;

	/* The queue attaches nothing (or nothing to trust): SLOT_SYNACK
	 * queued it, so it holds DNAT; a status that came with no trusted
	 * entry is not looked at. */
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, 0), SYNACK_DROP_RULE);
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, IPS_CONFIRMED), SYNACK_DROP_RULE);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_by_conntrack),
		cmocka_unit_test(test_by_rule),
	};

	return cmocka_run_group_tests_name("synack_fate", tests, NULL, NULL);
}
