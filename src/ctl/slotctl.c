/* slotctl: asks a slot daemon (slotd, slot-relayd, slot-dird) over its unix
 * control socket and prints the answer. First version: the commands are the
 * daemon's own ("counters", "json", and slotd's "relays"). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* Exit codes: what a script needs to tell apart. */
enum { EX_OK = 0, EX_DAEMON = 1, EX_USAGE = 2, EX_CONNECT = 3 };

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: slotctl [-s socket] command\n"
	    "  -s socket  the daemon's control socket (default /run/slot/slotd.sock;\n"
	    "             slot-relayd: /run/slot/relayd.sock)\n"
	    "commands:\n"
	    "  counters   counters, one \"name value\" per line\n"
	    "  relays     slotd: relays with group, state and use\n"
	    "  json       everything, one JSON object\n"
	    "exit status: 0 ok, 1 the daemon refused the command, 2 usage, 3 no daemon\n");
}

int
main(int argc, char **argv)
{
	const char *path = "/run/slot/slotd.sock";
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	char buf[65536];
	int ch, fd, first = 1, refused = 0;
	ssize_t n;

	while ((ch = getopt(argc, argv, "s:h")) != -1) {
		switch (ch) {
		case 's':
			path = optarg;
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind + 1 != argc || strlen(argv[optind]) > 64 || strchr(argv[optind], '\n')) {
		usage(stderr);
		return EX_USAGE;
	}
	if (strlen(path) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "slotctl: %s: path too long\n", path);
		return EX_USAGE;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
	    connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		fprintf(stderr, "slotctl: %s: %s (is the daemon running?)\n", path,
		    strerror(errno));
		return EX_CONNECT;
	}
	dprintf(fd, "%s\n", argv[optind]);
	(void)shutdown(fd, SHUT_WR);
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if (first && n >= 6 && memcmp(buf, "error:", 6) == 0)
			refused = 1;
		first = 0;
		if (fwrite(buf, 1, (size_t)n, refused ? stderr : stdout) != (size_t)n)
			return EX_DAEMON;
	}
	if (n == -1) {
		fprintf(stderr, "slotctl: reading %s: %s\n", path, strerror(errno));
		return EX_CONNECT;
	}
	close(fd);
	return refused ? EX_DAEMON : EX_OK;
}
