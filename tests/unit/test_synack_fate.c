/* What slotd does with a relay's SYN-ACK read after its pipe failed
 * (synack_failed_fate in src/client/hold.c): keyed on the conntrack entry
 * the packet was queued with when the queue says it, on the time since the
 * failure only when it says nothing. */
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

	/* Queued before the deletion: it holds the DNAT entry (dying since),
	 * however late it is read. */
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, nat, 0), SYNACK_DROP_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, nat | IPS_DYING, 10 * SYNACK_LATE_US),
	    SYNACK_DROP_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, IPS_DST_NAT, UINT64_MAX),
	    SYNACK_DROP_CT);
	/* An entry without destination NAT, or none: passed, however soon. */
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY, IPS_CONFIRMED, 0), SYNACK_PASS_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_ENTRY,
	    IPS_CONFIRMED | IPS_SRC_NAT | IPS_SRC_NAT_DONE, 0), SYNACK_PASS_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_NONE, 0, 0), SYNACK_PASS_CT);
	assert_int_equal(synack_failed_fate(NLQ_CT_NONE, 0, 10 * SYNACK_LATE_US), SYNACK_PASS_CT);
}

static void
test_by_time(void **state)
{
	(void)state;

	/* The queue attaches nothing (or nothing to trust). */
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, 0, 0), SYNACK_DROP_LATE);
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, 0, SYNACK_LATE_US - 1),
	    SYNACK_DROP_LATE);
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, 0, SYNACK_LATE_US), SYNACK_PASS_LATE);
	/* A status that came with no trusted entry is not looked at. */
	assert_int_equal(synack_failed_fate(NLQ_CT_UNKNOWN, IPS_DST_NAT, SYNACK_LATE_US),
	    SYNACK_PASS_LATE);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_by_conntrack),
		cmocka_unit_test(test_by_time),
	};

	return cmocka_run_group_tests_name("synack_fate", tests, NULL, NULL);
}
