/* slot-libget: a small program that uses libslot as an application would
 * (tests/integration/test_libslot.py): slot_connect() to a server on any
 * port, an HTTP/1.0 GET, the body to a file, then slot_decision(). Prints one
 * JSON line; exit 0 on a whole 200 answer, 2 if slot_connect failed, 1
 * otherwise.
 *
 * usage: slot-libget [-r RELAY[,RELAY...]] [-a RELAY]... [-d MS] [-n] [-s SOCKET]
 *                    ADDRESS PORT PATH OUTFILE
 * (-r with several relays forces that chain, first relay first) */

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "slot/slot.h"

static void
usage(void)
{
	fprintf(stderr, "usage: slot-libget [-r RELAY[,RELAY...]] [-a RELAY]... [-d MS] [-n] "
	    "[-s SOCKET] "
	    "ADDRESS PORT PATH OUTFILE\n");
	exit(64);
}

/* The JSON string s, escaped enough for the texts printed here. */
static void
json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s >= 0x20)
			putchar(*s);
	}
	putchar('"');
}

int
main(int argc, char **argv)
{
	struct slot_opts *o = slot_opts_new();
	struct sockaddr_storage ss;
	struct slot_decision dec;
	socklen_t sl;
	char buf[65536], req[512];
	long long body = 0;
	int ch, fd, status = 0;
	FILE *out;

	if (o == NULL)
		return 1;
	while ((ch = getopt(argc, argv, "r:a:d:ns:")) != -1) {
		int rc = 0;
		switch (ch) {
		case 'r':
			rc = slot_opts_set_relay(o, optarg);
			break;
		case 'a':
			rc = slot_opts_avoid_relay(o, optarg);
			break;
		case 'd':
			rc = slot_opts_set_deadline(o, (unsigned)atoi(optarg));
			break;
		case 'n':
			rc = slot_opts_set_fallback(o, 0);
			break;
		case 's':
			rc = slot_opts_set_socket(o, optarg);
			break;
		default:
			usage();
		}
		if (rc == -1) {
			fprintf(stderr, "slot-libget: -%c %s: %s\n", ch, optarg, slot_strerror());
			return 64;
		}
	}
	if (argc - optind != 4)
		usage();
	memset(&ss, 0, sizeof(ss));
	if (inet_pton(AF_INET, argv[optind], &((struct sockaddr_in *)&ss)->sin_addr) == 1) {
		ss.ss_family = AF_INET;
		((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)atoi(argv[optind + 1]));
		sl = sizeof(struct sockaddr_in);
	} else if (inet_pton(AF_INET6, argv[optind], &((struct sockaddr_in6 *)&ss)->sin6_addr) == 1) {
		ss.ss_family = AF_INET6;
		((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)atoi(argv[optind + 1]));
		sl = sizeof(struct sockaddr_in6);
	} else {
		usage();
	}
	if ((fd = socket(ss.ss_family, SOCK_STREAM, 0)) == -1)
		return 1;
	if (slot_connect(fd, (struct sockaddr *)&ss, sl, o) == -1) {
		int e = errno;
		printf("{\"connect\": \"failed\", \"errno\": %d, \"error\": ", e);
		json_str(slot_strerror());
		printf("}\n");
		return 2;
	}
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", argv[optind + 2],
	    argv[optind]);
	if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
		return 1;
	if ((out = fopen(argv[optind + 3], "wb")) == NULL)
		return 1;
	/* Headers first (up to the blank line), then the body to the file. */
	size_t have = 0;
	char *eoh = NULL;
	ssize_t n;
	while ((n = recv(fd, buf + have, sizeof(buf) - 1 - have, 0)) > 0 || (n == -1 && errno == EINTR)) {
		if (n <= 0)
			continue;
		if (eoh != NULL) {
			fwrite(buf, 1, (size_t)n, out);
			body += n;
			continue;
		}
		have += (size_t)n;
		buf[have] = '\0';
		if ((eoh = strstr(buf, "\r\n\r\n")) != NULL) {
			(void)sscanf(buf, "HTTP/%*s %d", &status);
			size_t rest = have - (size_t)(eoh + 4 - buf);
			fwrite(eoh + 4, 1, rest, out);
			body += (long long)rest;
			have = 0;
		} else if (have == sizeof(buf) - 1) {
			return 1;
		}
	}
	fclose(out);
	printf("{\"status\": %d, \"bytes\": %lld", status, body);
	if (slot_decision(fd, &dec, o) == 0) {
		static const char *const states[] = { [SLOT_STATE_RELAYED] = "relayed",
		    [SLOT_STATE_DIRECT] = "direct", [SLOT_STATE_PENDING] = "pending",
		    [SLOT_STATE_FALLBACK] = "fallback" };
		const char *st = dec.state >= 0 && (size_t)dec.state < sizeof(states) /
		    sizeof(states[0]) && states[dec.state] ? states[dec.state] : "?";
		printf(", \"state\": \"%s\", \"relay\": ", st);
		json_str(dec.relay);
		printf(", \"path_us\": %u, \"direct_us\": %u, \"cached\": %d, \"why\": ",
		    dec.path_rtt_us, dec.direct_rtt_us, dec.cached);
		json_str(dec.why);
	} else {
		printf(", \"decision_error\": ");
		json_str(slot_strerror());
	}
	printf("}\n");
	close(fd);
	slot_opts_free(o);
	return status == 200 ? 0 : 1;
}
