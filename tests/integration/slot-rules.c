/* Drives slotd's rule module (src/client/rules.c) for the namespace tests:
 *   slot-rules apply [-6|-b] [-n] [-g LANIFS [-l]] [-q QUEUE] [-p PORTS] [-i CIDRS]
 *       [-x CIDRS] [MARK=ADDR:PORT...]
 *   slot-rules remove [-6|-b] [-n]
 *   slot-rules render [-6|-b] [-n] ... (prints the restore's input)
 *   slot-rules list [-6|-b] [-n] (what rules_list reads back)
 * -6: IPv6 only; -b: both families; -n: the nft backend; -g: gateway mode
 * for these LAN interfaces (comma-separated), -l: and local too (both). */
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slot/addr.h"
#include "../../src/client/rules.h"

#define MAX_RELAYS 64

int
main(int argc, char **argv)
{
	struct portset ports;
	struct cidr_list inc = { 0 }, exc = { 0 };
	struct rules_relay relays[MAX_RELAYS];
	struct rules_conf c = { .family = AF_INET, .queue = 7, .bypass_mark = 0x1000000,
	    .relay_mask = 0xffff, .ports = &ports, .include = &inc, .exclude = &exc,
	    .reused_direct = true };
	struct rules_exec x = { .iptables = "iptables", .wait_s = RULES_WAIT_DEFAULT };
	static char lan[RULES_LAN_MAX][RULES_IFNAME_MAX];
	bool local = false;
	const char *portspec = "all";
	char err[1024];
	size_t n = 0;
	int ch, rc = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: slot-rules apply|remove|render [options]\n");
		return 2;
	}
	const char *cmd = argv[1];
	optind = 2;
	while ((ch = getopt(argc, argv, "6bng:lq:p:i:x:")) != -1) {
		switch (ch) {
		case '6': c.family = AF_INET6; break;
		case 'b': c.family = AF_UNSPEC; break;
		case 'n': x.backend = RULES_NFT; break;
		case 'l': local = true; break;
		case 'g': {
			char *save = NULL, *t;
			c.mode = RULES_GATEWAY;
			c.lan = lan;
			for (t = strtok_r(optarg, ",", &save); t && c.nlan < RULES_LAN_MAX;
			    t = strtok_r(NULL, ",", &save))
				snprintf(lan[c.nlan++], RULES_IFNAME_MAX, "%s", t);
			break;
		}
		case 'q': c.queue = (uint16_t)atoi(optarg); break;
		case 'p': portspec = optarg; break;
		case 'i':
			if (cidr_list_parse(optarg, &inc, err, sizeof(err)) == -1)
				goto bad;
			break;
		case 'x':
			if (cidr_list_parse(optarg, &exc, err, sizeof(err)) == -1)
				goto bad;
			break;
		default:
			return 2;
		}
	}
	if (portset_parse(portspec, &ports, err, sizeof(err)) == -1)
		goto bad;
	for (; optind < argc && n < MAX_RELAYS; optind++, n++) {
		char *eq = strchr(argv[optind], '=');
		if (eq == NULL || ep_parse(eq + 1, 0, &relays[n].data) == -1) {
			snprintf(err, sizeof(err), "bad relay %s (MARK=ADDR:PORT)", argv[optind]);
			goto bad;
		}
		relays[n].mark = (uint32_t)strtoul(argv[optind], NULL, 0);
	}
	if (local)
		c.mode |= RULES_LOCAL;
	if (strcmp(cmd, "apply") == 0)
		rc = rules_apply(&c, relays, n, &x, err, sizeof(err));
	else if (strcmp(cmd, "remove") == 0)
		rc = rules_remove(c.family, &x, err, sizeof(err));
	else if (strcmp(cmd, "render") == 0) {
		struct rules_set set;
		rc = rules_set_render(&c, relays, n, x.backend, &set);
		if (rc == 0) {
			for (size_t i = 0; i < set.n; i++)
				fputs(set.job[i].text, stdout);
			rules_set_free(&set);
		} else
			snprintf(err, sizeof(err), "cannot render");
	} else if (strcmp(cmd, "list") == 0) {
		struct rules_entry *v;
		size_t nv;
		rc = rules_list(c.family, &x, &v, &nv, err, sizeof(err));
		for (size_t i = 0; rc == 0 && i < nv; i++)
			printf("%s\t%s\t%s\t%llu\t%llu\t%s\n", v[i].family == AF_INET ? "ipv4" :
			    v[i].family == AF_INET6 ? "ipv6" : "inet", v[i].table, v[i].chain,
			    v[i].packets, v[i].bytes, v[i].rule);
		if (rc == 0)
			rules_list_free(v, nv);
	} else {
		snprintf(err, sizeof(err), "unknown command %s", cmd);
		goto bad;
	}
	cidr_list_free(&inc);
	cidr_list_free(&exc);
	if (rc != 0) {
		fprintf(stderr, "slot-rules: %s\n", err);
		return 1;
	}
	return 0;
bad:
	fprintf(stderr, "slot-rules: %s\n", err);
	cidr_list_free(&inc);
	cidr_list_free(&exc);
	return 2;
}
