/* The NFQUEUE queue that slotd's synq.c and the test bed's slot-wanem share
 * (src/core/nlq.c), against the kernel: a queue nobody uses is bound, a
 * verdict about a packet the kernel never queued is refused and counted,
 * a second socket cannot take the queue, and verdicts are batched. Skipped
 * where the queue cannot be bound (no CAP_NET_ADMIN). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>

#include "slot/nlq.h"

static unsigned packets;

static void
on_packet(void *user, const struct nlq_pkt *p)
{
	(void)user;
	(void)p;
	packets++;
}

static struct nlq_params
params(size_t vbuf)
{
	return (struct nlq_params){
		/* A queue number no rule of a test uses. */
		.num = (uint16_t)(64000 + getpid() % 1000),
		.maxlen = 16,
		.copy_range = 64,
		.flags = NFQA_CFG_F_FAIL_OPEN,
		.mask = NFQA_CFG_F_FAIL_OPEN,
		.rcvbuf = 256 * 1024,
		.vbuf = vbuf,
	};
}

/* The queue bound, or NULL after skip() where this cannot be. */
static struct nlq *
bound(const struct nlq_params *p)
{
	char err[256];
	struct nlq *q = nlq_open(p, on_packet, NULL, err, sizeof(err));

	if (q == NULL)
		return NULL;
	if (nlq_bind(q, err, sizeof(err)) == -1) {
		assert_int_equal(strncmp(err, "binding NFQUEUE ", 16), 0);
		nlq_close(q);
		return NULL;
	}
	assert_true(nlq_fd(q) >= 0);
	return q;
}

static void
test_refused_verdict(void **state)
{
	struct nlq_params p = params(4096);
	struct nlq_stats st;
	struct nlq *q;
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	assert_int_equal(nlq_read(q, 8), 0);
	assert_int_equal(nlq_verdict(q, 0x7fffff00u, NF_ACCEPT), 0);
	assert_int_equal(nlq_pending(q), 1);
	assert_int_equal(nlq_flush(q), 0);
	assert_int_equal(nlq_pending(q), 0);
	/* The kernel answers a verdict it cannot apply at once. */
	assert_int_equal(nlq_read(q, 8), 0);
	nlq_stats(q, &st);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.first_refusal, ENOENT);
	assert_int_equal(st.packets + st.send_errors + st.lost, 0);
	assert_int_equal(packets, 0);
	nlq_close(q);
}

static void
test_taken(void **state)
{
	struct nlq_params p = params(4096);
	struct nlq *q, *q2;
	char err[256];
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	q2 = nlq_open(&p, on_packet, NULL, err, sizeof(err));
	assert_non_null(q2);
	assert_int_equal(nlq_bind(q2, err, sizeof(err)), -1);
	assert_true(errno == EBUSY || errno == EPERM);
	assert_non_null(strstr(err, "(another process has it?)"));
	nlq_close(q2);
	nlq_close(q);
}

static void
test_batches(void **state)
{
	struct nlq_params p = params(256);
	uint8_t pkt[512] = { 0 };
	struct nlq_stats st;
	struct nlq *q;
	size_t most = 0;
	(void)state;

	if ((q = bound(&p)) == NULL)
		skip();
	/* A batch of 256 bytes holds a few verdicts: the next sends them. */
	for (uint32_t id = 1; id <= 20; id++) {
		assert_int_equal(nlq_verdict_mark(q, 0x7fff0000u + id, NF_ACCEPT, 1, NULL, 0), 0);
		if (nlq_pending(q) > most)
			most = nlq_pending(q);
	}
	assert_true(most > 1 && most < 20);
	assert_int_equal(nlq_flush(q), 0);
	/* A packet that cannot fit is refused before anything is gathered. */
	assert_int_equal(nlq_verdict_mark(q, 1, NF_ACCEPT, 1, pkt, sizeof(pkt)), -1);
	assert_int_equal(errno, EMSGSIZE);
	assert_int_equal(nlq_pending(q), 0);
	while (nlq_read(q, 64) == 1)
		;
	nlq_stats(q, &st);
	assert_int_equal(st.refused, 20);
	nlq_close(q);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_verdict),
		cmocka_unit_test(test_taken),
		cmocka_unit_test(test_batches),
	};

	return cmocka_run_group_tests_name("nlq", tests, NULL, NULL);
}
