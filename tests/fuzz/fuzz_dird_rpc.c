/* slot-dird's XML-RPC methods (src/directory/dird_rpc.c) through xmlrpc-c's
 * registry, as dhttp.c hands them a request body: xmlrpc-c parses the XML,
 * dispatches on the method name, and the method checks its fields, the
 * stamp, the MAC, freshness and its values. The state starts each input
 * afresh (deterministic runs) with three relays registered and a few RTTs
 * reported, so heartbeat, report and list have something to act on.
 *
 * The MAC is checked here with the fixed key: the seeds carry valid MACs,
 * so mutations of what the MAC does not cover (the XML around the values,
 * member order, extra members, the method's answer path) get through.
 * fuzz_dird_rpc_nomac is the same target with any MAC accepted, to reach
 * the methods' value checks with mutated values. The replay window is as
 * wide as it goes, so seeds' old timestamps pass.
 *
 * Bodies that xmlg_check refuses are skipped, as dhttp.c refuses them
 * before xmlrpc-c sees them (xmlrpc-c expands entities): the guard runs on
 * every input, the methods only behind it. */
#include <string.h>

#include <xmlrpc-c/base.h>
#include <xmlrpc-c/server.h>

#include "slot/clock.h"
#include "slot/log.h"
#include "slot/xmlguard.h"
#include "../../src/directory/dird_rpc.h"
#include "fuzz.h"

static struct dird d;
static xmlrpc_registry *reg;
static struct dstate_params params;

static const char *const relays[] = { "192.0.2.1:7600", "192.0.2.2:7600", "[2001:db8::3]:7600" };

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	xmlrpc_env env;
	char err[256];

	(void)argc;
	(void)argv;
	FUZZ_CHECK(auth_init() == 0);
	log_set_level(SLOG_ERROR);
	FUZZ_CHECK(dconf_load(&d.conf, NULL, err, sizeof(err)) == 0);
	d.conf.landmarks = 2;
	/* The seeds are shared-mode calls (a mac); identity mode needs a CA. */
	d.mode = IDENT_MODE_SHARED;
	pthread_mutex_init(&d.mu, NULL);
	fuzz_key(&d.key);
	params.expire_after_us = d.conf.expire_after_ms * 1000;
	params.max_relays = d.conf.max_relays;
#ifdef FUZZ_NO_MAC
	drpc_fuzz_no_mac = true;
#endif
	xmlrpc_env_init(&env);
	reg = drpc_registry(&env, &d);
	FUZZ_CHECK(reg != NULL && !env.fault_occurred);
	xmlrpc_env_clean(&env);
	return 0;
}

/* A fresh state: three relays, each reporting its RTTs to the others. */
static void
reset(void)
{
	struct endpoint ep[3];
	struct dstate_rtt_in in[2];
	uint64_t now = clock_mono_us();
	size_t acc;

	if (d.replay)
		replay_free(d.replay);
	d.replay = replay_new(64, UINT64_MAX / 2);
	if (d.state)
		dstate_free(d.state);
	d.state = dstate_new(&params, 0x0123456789abcdefULL);
	FUZZ_CHECK(d.replay != NULL && d.state != NULL);
	dland_free(&d.land);
	memset(d.land_version, 0, sizeof(d.land_version));
	d.land_at_us = 0;
	for (int i = 0; i < 3; i++) {
		FUZZ_CHECK(ep_parse(relays[i], 0, &ep[i]) == 0);
		FUZZ_CHECK(dstate_register(d.state, &ep[i], 7601, now) == DSTATE_NEW);
	}
	for (int i = 0; i < 3; i++) {
		for (int j = 0, k = 0; j < 3; j++) {
			if (j == i)
				continue;
			in[k].peer = ep[j];
			in[k++].rtt_us = (uint32_t)(1000 * (i + j + 1));
		}
		FUZZ_CHECK(dstate_report(d.state, &ep[i], in, 2, &acc) == DSTATE_OK);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	xmlrpc_env env;
	xmlrpc_mem_block *out = NULL;

	if (xmlg_check(data, size, NULL) != XMLG_OK)
		return 0;
	reset();
	xmlrpc_env_init(&env);
	xmlrpc_registry_process_call2(&env, reg, (const char *)data, size, NULL, &out);
	/* Every call gets an answer: a result or a fault, never nothing. */
	FUZZ_CHECK(env.fault_occurred || out != NULL);
	if (out) {
		if (getenv("SLOT_FUZZ_VERBOSE"))
			fprintf(stderr, "%.*s\n", (int)XMLRPC_MEMBLOCK_SIZE(char, out),
			    XMLRPC_MEMBLOCK_CONTENTS(char, out));
		XMLRPC_MEMBLOCK_FREE(char, out);
	}
	xmlrpc_env_clean(&env);
	return 0;
}
