/* The directory client's reading of a slot.list answer (src/core/
 * dirclient.c), which slotd runs on whatever the directory's URL sends
 * back, as its call() does: xmlg_check, xmlrpc-c's methodResponse parser,
 * then dirc_list_read into relays, groups and landmarks. A listing it
 * accepts must be consistent. */
#include <string.h>
#include <sys/socket.h>

#include <xmlrpc-c/base.h>

#include "slot/dirclient.h"
#include "slot/xmlguard.h"
#include "fuzz.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	xmlrpc_env env;
	xmlrpc_value *res = NULL;
	const char *fault_string = NULL;
	int fault_code = 0;
	char ver[DIRC_VERSION_MAX], err[512];
	struct dirc_relay *list = NULL;
	struct dirc_landmarks land;
	bool changed = false;
	size_t n = 0;

	if (xmlg_check(data, size, NULL) != XMLG_OK)
		return 0;
	xmlrpc_env_init(&env);
	xmlrpc_parse_response2(&env, (const char *)data, size, &res, &fault_code,
	    &fault_string);
	if (env.fault_occurred || fault_string != NULL) {
		fuzz_say("dirclient", env.fault_occurred ? env.fault_string : fault_string);
		free((void *)fault_string);
		xmlrpc_env_clean(&env);
		return 0;
	}
	if (dirc_list_read(res, ver, &changed, &list, &n, &land, err, sizeof(err)) == 0) {
		FUZZ_CHECK(strlen(ver) > 0 && strlen(ver) < DIRC_VERSION_MAX);
		FUZZ_CHECK((n == 0) == (list == NULL));
		for (size_t i = 0; i < n; i++) {
			FUZZ_CHECK(list[i].relay.port != 0 && list[i].data_port != 0);
			FUZZ_CHECK(list[i].relay.addr.family == AF_INET ||
			    list[i].relay.addr.family == AF_INET6);
		}
		FUZZ_CHECK(land.nland == 0 || (changed && land.nrelay == n));
		for (size_t l = 0; l < land.nland; l++)
			FUZZ_CHECK(land.index[l] < n && land.weight[l] >= 0);
		/* Read every RTT, so ASan sees the rows' true size. */
		unsigned sum = 0;
		for (size_t i = 0; i < land.nland * land.nrelay; i++)
			sum += land.rtt[i];
		(void)sum;
		dirc_landmarks_free(&land);
		free(list);
	} else {
		FUZZ_CHECK(list == NULL && n == 0 && err[0] != '\0');
		fuzz_say("dirclient", err);
	}
	xmlrpc_DECREF(res);
	xmlrpc_env_clean(&env);
	return 0;
}
