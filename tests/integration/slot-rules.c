/* Drives slotd's rule module (src/client/rules.c) for the namespace tests:
 *   slot-rules apply [-6] [-q QUEUE] [-p PORTS] [-i CIDRS] [-x CIDRS] [MARK=ADDR:PORT...]
 *   slot-rules remove [-6]
 *   slot-rules render [-6] ... (prints the iptables-restore input) */
#include <netinet/in.h>
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
	struct rules_conf c = { AF_INET, 7, 0x1000000, 0xffff, &ports, &inc, &exc };
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
	while ((ch = getopt(argc, argv, "6q:p:i:x:")) != -1) {
		switch (ch) {
		case '6': c.family = AF_INET6; break;
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
	if (strcmp(cmd, "apply") == 0)
		rc = rules_apply(&c, relays, n, NULL, err, sizeof(err));
	else if (strcmp(cmd, "remove") == 0)
		rc = rules_remove(c.family, NULL, err, sizeof(err));
	else if (strcmp(cmd, "render") == 0) {
		static char text[1 << 20];
		rc = rules_render(&c, relays, n, text, sizeof(text));
		if (rc >= 0) {
			fputs(text, stdout);
			rc = 0;
		} else
			snprintf(err, sizeof(err), "cannot render");
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
