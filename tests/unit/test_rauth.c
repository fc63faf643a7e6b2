/*
 * Identity mode end to end in one event loop: the relay's real control
 * server (src/relay/ctrl.c, rauth.c) on a loopback port, and slotd's real
 * control link (src/core/rlink.c) to it, each with its own certificate of
 * one CA. Covers the HELLO exchange, the refusals (another CA, revoked) and
 * both revocation hooks (relay_revoke, rlinks_revoke), and the peer table
 * (src/core/peertab.c) they use. Waits are for events, with a generous
 * deadline.
 */
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "slot/auth.h"
#include "slot/ident.h"
#include "slot/peertab.h"
#include "slot/proto.h"
#include "slot/replay.h"
#include "slot/sock.h"
#include "../../src/client/client.h"
#include "../../src/client/relays.h"
#include "slot/rlink.h"
#include "../../src/relay/ctrl.h"
#include "../../src/relay/pipe.h"
#include "../../src/relay/rauth.h"

#define WAIT_S 10.

static struct ev_loop *loop;
static struct relay R;
static struct slotd D;			/* only what rlinks_revoke uses */
static struct crelay CR;
static struct crelay *CRS[1] = { &CR };
static struct rlink *L;
static uint8_t ca_seed[IDENT_SEED_LEN], ca_pk[IDENT_PK_LEN];
static struct endpoint relay_ep;
static bool expired;
static ev_timer deadline;
static int ups, downs;

#define WAIT_FOR(cond) do {						\
	expired = false;						\
	ev_timer_set(&deadline, WAIT_S, 0.);				\
	ev_timer_start(loop, &deadline);				\
	while (!(cond) && !expired)					\
		ev_run(loop, EVRUN_ONCE);				\
	ev_timer_stop(loop, &deadline);					\
	if (!(cond))							\
		fail_msg("timed out waiting for %s", #cond);		\
} while (0)

/* relayd.c's, which this test does not link. */
void
relay_pipe_gone(struct relay *r)
{
	(void)r;
}

static void
deadline_cb(struct ev_loop *l, ev_timer *w, int revents)
{
	(void)l;
	(void)w;
	(void)revents;
	expired = true;
}

static void
run_for(double secs)
{
	expired = false;
	ev_timer_set(&deadline, secs, 0.);
	ev_timer_start(loop, &deadline);
	while (!expired)
		ev_run(loop, EVRUN_ONCE);
}

static void
state_cb(void *user, struct rlink *l, enum rlink_state st)
{
	(void)user;
	(void)l;
	if (st == RL_UP)
		ups++;
	if (st == RL_DOWN)
		downs++;
}

/* An identity of role from ca (another CA if ca is NULL). */
static void
make_ident(uint8_t role, const char *name, const uint8_t *ca, struct ident *out)
{
	uint8_t seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN], raw[IDENT_CERT_LEN];
	uint8_t other[IDENT_SEED_LEN], other_pk[IDENT_PK_LEN];
	uint64_t now = (uint64_t)time(NULL);
	char err[200];

	ident_keygen(seed, pk);
	ident_keygen(other, other_pk);
	assert_int_equal(ident_cert_issue(ca ? ca : other, role, name, arc4random(),
	    now - 60, now + 3600, pk, raw, err, sizeof(err)), 0);
	assert_int_equal(ident_from_parts(seed, raw, ca ? ca_pk : other_pk, IDENT_ANY_ROLE,
	    now, out, err, sizeof(err)), 0);
	/* Every host pins the deployment's CA, whoever signed its own. */
	memcpy(out->ca_pk, ca_pk, IDENT_PK_LEN);
}

static void
revoked_one(struct ident_revoked *rev, uint64_t serial)
{
	char text[32];

	snprintf(text, sizeof(text), "%016llx\n", (unsigned long long)serial);
	assert_int_equal(ident_revoked_parse(text, strlen(text), rev, NULL, 0), 0);
}

static int
setup(void **state)
{
	struct endpoint any;
	socklen_t len;
	struct sockaddr_storage ss;

	(void)state;
	ups = downs = 0;
	loop = ev_loop_new(EVFLAG_AUTO);
	ev_timer_init(&deadline, deadline_cb, WAIT_S, 0.);
	ident_keygen(ca_seed, ca_pk);

	memset(&R, 0, sizeof(R));
	R.loop = loop;
	rconf_defaults(&R.conf);
	R.auth_mode = IDENT_MODE_IDENTITY;
	make_ident(IDENT_ROLE_RELAY, "relay1", ca_seed, &R.id);
	R.known = peertab_new(RAUTH_PEERS_MAX);
	struct admit_conf ac = { .max_conns = 64, .max_per_source = 64,
	    .rate = { 1000, 1000 }, .burst = { 1000, 1000 }, .window_us = 30000000 };
	R.admit = admit_new(&ac, 1024, 64);
	assert_non_null(R.known);
	assert_non_null(R.admit);
	assert_int_equal(pipes_init(&R), 0);
	assert_int_equal(ep_parse("127.0.0.1:1", 0, &any), 0);
	any.port = 0;		/* any free port */
	R.ctrl_fd = sock_listen_tcp(&any, 16);
	R.data_fd = -1;
	assert_true(R.ctrl_fd >= 0);
	len = sizeof(ss);
	assert_int_equal(getsockname(R.ctrl_fd, (struct sockaddr *)&ss, &len), 0);
	assert_int_equal(ep_from_sockaddr((struct sockaddr *)&ss, len, &relay_ep), 0);
	ctrl_start(&R);

	memset(&D, 0, sizeof(D));
	D.loop = loop;
	D.auth_mode = IDENT_MODE_IDENTITY;
	make_ident(IDENT_ROLE_CLIENT, "client1", ca_seed, &D.id);
	D.replay = replay_new(1024, 30000000);
	D.env.loop = loop;
	D.env.key = &D.key;
	D.env.id = &D.id;
	D.env.revoked = &D.revoked;
	D.env.replay = D.replay;
	D.env.keepalive_interval_ms = 30000;
	D.env.keepalive_timeout_ms = 3000;
	D.env.reconnect_min_ms = 50;
	D.env.reconnect_max_ms = 100;
	D.relays = CRS;
	D.nrelays = 1;
	L = NULL;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	rlink_free(L);
	CR.link = NULL;
	ctrl_close_all(&R);
	ctrl_stop_accepting(&R);
	pipes_destroy(&R);
	admit_free(R.admit);
	rauth_free(&R);
	rconf_free(&R.conf);
	replay_free(D.replay);
	ident_wipe(&D.id);
	ident_revoked_free(&D.revoked);
	ev_loop_destroy(loop);
	return 0;
}

static void
link_start(void)
{
	L = rlink_new(&D.env, &relay_ep, state_cb, NULL);
	assert_non_null(L);
	CR.link = L;
}

static void
test_hello_exchange_brings_the_link_up(void **state)
{
	const struct proto_pair *p;
	const struct peertab_entry *e;

	(void)state;
	link_start();
	WAIT_FOR(rlink_state(L) == RL_UP);
	/* Each side has the other's key and the same pair key. */
	p = rlink_pair(L);
	assert_non_null(p);
	assert_memory_equal(p->pk, R.id.cert.pk, IDENT_PK_LEN);
	e = peertab_get(R.known, D.id.cert.pk, (uint64_t)time(NULL));
	assert_non_null(e);
	assert_memory_equal(e->key.k, p->key.k, AUTH_KEY_LEN);
	assert_int_equal(e->serial, D.id.cert.serial);
	assert_int_equal(R.ctr.hellos_accepted, 1);
	assert_string_equal(rlink_cert(L)->name, "relay1");
}

static void
test_client_of_another_ca_is_refused(void **state)
{
	(void)state;
	ident_wipe(&D.id);
	make_ident(IDENT_ROLE_CLIENT, "mallory", NULL, &D.id);
	link_start();
	WAIT_FOR(R.ctr.hellos_refused >= 1);
	run_for(0.3);
	assert_int_equal(ups, 0);
	assert_int_equal(R.ctr.hellos_accepted, 0);
	assert_int_equal(R.ctr.control_errors, 0);	/* closed without an ERROR */
	assert_int_equal(peertab_count(R.known), 0);
}

static void
test_relay_revoke_drops_the_client(void **state)
{
	struct ident_revoked rev;
	unsigned long long refused;

	(void)state;
	link_start();
	WAIT_FOR(rlink_state(L) == RL_UP);
	revoked_one(&rev, D.id.cert.serial);
	/* Its control connection and its table entry. */
	assert_int_equal(relay_revoke(&R, &rev), 2);
	ident_revoked_free(&rev);
	assert_int_equal(peertab_count(R.known), 0);
	assert_int_equal(R.ctr.control_conns, 0);
	WAIT_FOR(downs >= 1);
	/* It comes back, and is refused from now on. */
	refused = R.ctr.hellos_refused;
	WAIT_FOR(R.ctr.hellos_refused > refused + 1);
	assert_int_equal(ups, 1);
	/* Another client is not concerned. */
	assert_int_equal(relay_revoke(&R, &(struct ident_revoked){ NULL, 0 }), 0);
}

static void
test_rlinks_revoke_drops_the_relay(void **state)
{
	struct ident_revoked rev;
	unsigned long long accepted;

	(void)state;
	link_start();
	WAIT_FOR(rlink_state(L) == RL_UP);
	/* Someone else's serial: nothing happens. */
	revoked_one(&rev, R.id.cert.serial ^ 1);
	assert_int_equal(rlinks_revoke(&D, &rev), 0);
	ident_revoked_free(&rev);
	assert_int_equal(rlink_state(L), RL_UP);

	revoked_one(&rev, R.id.cert.serial);
	assert_int_equal(rlinks_revoke(&D, &rev), 1);
	ident_revoked_free(&rev);
	assert_int_equal(rlink_state(L), RL_DOWN);
	assert_true(D.env.revoked == &D.revoked && D.revoked.n == 1);
	/* It reconnects, the relay answers, and slotd refuses it every time. */
	accepted = R.ctr.hellos_accepted;
	WAIT_FOR(R.ctr.hellos_accepted >= accepted + 2);
	assert_int_equal(ups, 1);
	assert_int_not_equal(rlink_state(L), RL_UP);
	assert_null(rlink_pair(L));
}

/* The relay's answers and pipes are MACed for this client alone: a second
 * client sees nothing it could use (its own link gets its own key). */
static void
test_pair_keys_differ_per_client(void **state)
{
	struct rlink *l2;
	struct slotd d2;
	struct auth_key k1;

	(void)state;
	link_start();
	WAIT_FOR(rlink_state(L) == RL_UP);
	k1 = rlink_pair(L)->key;
	memset(&d2, 0, sizeof(d2));
	d2.env = D.env;
	make_ident(IDENT_ROLE_CLIENT, "client2", ca_seed, &d2.id);
	d2.env.id = &d2.id;
	l2 = rlink_new(&d2.env, &relay_ep, state_cb, NULL);
	assert_non_null(l2);
	WAIT_FOR(rlink_state(l2) == RL_UP);
	assert_memory_not_equal(rlink_pair(l2)->key.k, k1.k, AUTH_KEY_LEN);
	assert_int_equal(peertab_count(R.known), 2);
	rlink_free(l2);
	ident_wipe(&d2.id);
}

/* ---- the peer table alone ---- */

static struct ident_cert
cert_n(unsigned i, uint64_t not_after)
{
	struct ident_cert c;

	memset(&c, 0, sizeof(c));
	c.pk[0] = (uint8_t)i;
	c.pk[1] = (uint8_t)(i >> 8);
	c.serial = 1000 + i;
	c.not_after = not_after;
	c.role = IDENT_ROLE_CLIENT;
	snprintf(c.name, sizeof(c.name), "c%u", i);
	return c;
}

static void
test_peertab_lru_expiry_revoke(void **state)
{
	struct peertab *t = peertab_new(4);
	struct auth_key k;
	struct ident_cert c;
	struct ident_revoked rev;
	uint8_t pk[IDENT_PK_LEN];

	(void)state;
	assert_non_null(t);
	assert_null(peertab_new(0));
	for (unsigned i = 0; i < 4; i++) {
		c = cert_n(i, 100);
		memset(k.k, (int)i, sizeof(k.k));
		assert_int_equal(peertab_put(t, &c, &k), 0);
	}
	/* 0 is used, so 1 is the least recently used when 4 comes. */
	c = cert_n(0, 100);
	assert_non_null(peertab_get(t, c.pk, 50));
	c = cert_n(4, 100);
	assert_int_equal(peertab_put(t, &c, &k), 0);
	assert_int_equal(peertab_count(t), 4);
	assert_int_equal(peertab_evicted(t), 1);
	c = cert_n(1, 100);
	assert_null(peertab_get(t, c.pk, 50));
	c = cert_n(0, 100);
	assert_int_equal(peertab_get(t, c.pk, 50)->key.k[0], 0);
	/* A refresh replaces the key and keeps one entry. */
	memset(k.k, 9, sizeof(k.k));
	assert_int_equal(peertab_put(t, &c, &k), 0);
	assert_int_equal(peertab_count(t), 4);
	assert_int_equal(peertab_get(t, c.pk, 50)->key.k[0], 9);
	/* Expired certificates are forgotten on lookup. */
	assert_null(peertab_get(t, c.pk, 100));
	assert_int_equal(peertab_count(t), 3);
	/* Revocation by serial. */
	revoked_one(&rev, 1000 + 2);
	assert_int_equal(peertab_revoke(t, &rev), 1);
	ident_revoked_free(&rev);
	c = cert_n(2, 100);
	assert_null(peertab_get(t, c.pk, 50));
	c = cert_n(3, 100);
	assert_true(peertab_remove(t, c.pk));
	assert_false(peertab_remove(t, c.pk));
	assert_int_equal(peertab_count(t), 1);
	/* The key function: known sender only. */
	struct peertab_lookup q = { t, 50 };
	struct proto_hdr h = { .type = PROTO_KEEPALIVE, .sender = pk };
	memset(pk, 0, sizeof(pk));
	pk[0] = 4;
	assert_non_null(peertab_key_fn(&q, &h));
	pk[0] = 5;
	assert_null(peertab_key_fn(&q, &h));
	peertab_free(t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_hello_exchange_brings_the_link_up, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_client_of_another_ca_is_refused, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_relay_revoke_drops_the_client, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_rlinks_revoke_drops_the_relay, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_pair_keys_differ_per_client, setup,
		    teardown),
		cmocka_unit_test(test_peertab_lru_expiry_revoke),
	};

	if (auth_init() == -1)
		return 1;
	log_init("test_rauth", SLOG_ERROR);
	return cmocka_run_group_tests_name("rauth", tests, NULL, NULL);
}
