/* slotctl: asks a slot daemon (slotd, slot-relayd, slot-dird) over its unix
 * control socket and prints the answer. The daemon formats the answer, text
 * or JSON; slotctl picks the socket, sends "<command> [argument] [json]"
 * and maps the outcome to an exit status (docs/slotctl.md). "slotctl run"
 * instead asks slotd's lib socket to attach slotctl's own process, then
 * becomes the command. One file, no library: it must run on any host, next
 * to any of the daemons, so it speaks the lib socket's "attach" itself
 * rather than through libslot. */

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

/* Exit codes: what a script needs to tell apart. */
enum {
	EX_OK = 0,
	EX_DAEMON = 1,		/* refused the command ("error: ..."), or stdout failed */
	EX_USAGE = 2,
	EX_CONNECT = 3,		/* no daemon at the socket, or it did not answer in time */
};

#define CMD_MAX 31		/* the daemons take commands up to this long */
#define ARG_MAX 63		/* ...and arguments up to this long */
#define ANSWER_TIMEOUT_S 15	/* a daemon cuts its clients at 5 s; this is the backstop */
#define LIB_SOCKET_DEFAULT "/run/slot/slotd-lib.sock"	/* libslot's too */
#define LIB_LINE_MAX 512	/* an answer on the lib socket, '\n' included */

static const struct {
	const char *name, *alias, *path;
} daemons[] = {
	{ "slotd", "slotd", "/run/slot/slotd.sock" },
	{ "relayd", "slot-relayd", "/run/slot/relayd.sock" },
	{ "dird", "slot-dird", "/run/slot/dird.sock" },
};
#define NDAEMONS (sizeof(daemons) / sizeof(daemons[0]))

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: slotctl [-s socket | -d daemon] [-j] command [address]\n"
	    "       slotctl run [-L socket] -- program [argument ...]\n"
	    "  -s, --socket socket  the daemon's control socket\n"
	    "  -d, --daemon name    slotd, relayd or dird: that daemon's default socket\n"
	    "                       (/run/slot/slotd.sock, relayd.sock, dird.sock);\n"
	    "                       with neither, the first of them that answers\n"
	    "  -j, --json           the answer as one JSON object\n"
	    "  -L, --lib-socket socket\n"
	    "                       run: slotd's lib socket (else $SLOT_LIB_SOCKET,\n"
	    "                       else /run/slot/slotd-lib.sock)\n"
	    "  -h, --help           this text;  -V, --version  slotctl's version\n"
	    "commands:                                       slotd relayd dird\n"
	    "  status    version, uptime, key facts            x     x      x\n"
	    "  pipes     connections being relayed             x     x\n"
	    "  cache     slotd: selection cache; relayd: RTTs  x     x\n"
	    "  relays    relays, health, RTT, group            x     x      x\n"
	    "  rules     slotd's iptables rules and counters   x\n"
	    "  flush     slotd: empty the selection cache;     x\n"
	    "            \"flush ADDRESS\": forget that server only\n"
	    "  counters  every counter, \"name value\"           x     x      x\n"
	    "  metrics   counters, Prometheus text format      x     x      x\n"
	    "  run       run a program whose TCP connections,  x\n"
	    "            and its children's, go to slotd\n"
	    "exit status: 0 ok, 1 the daemon refused the command, 2 usage,\n"
	    "3 no daemon at the socket (or no answer in time);\n"
	    "run: the program's own, or 126 (cannot execute), 127 (not found)\n");
}

/* Commands are passed on as they are (a daemon may know more than this
 * version of slotctl); only their shape is checked here. */
static bool
valid_command(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > CMD_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-')
			return false;
	return true;
}

/* Commands that take an argument: any other gets none, so that two
 * commands in a row stay a usage error. */
static bool
takes_argument(const char *cmd)
{
	return strcmp(cmd, "flush") == 0;
}

/* An argument is one printable word: the daemon judges the rest. */
static bool
valid_argument(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > ARG_MAX)
		return false;
	for (; *s; s++)
		if (*s <= ' ' || *s >= 0x7f)
			return false;
	return true;
}

/* Connects to path. Returns the socket, or -1 with errno. */
static int
dial(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = ANSWER_TIMEOUT_S };
	int fd, e;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	/* A daemon that hangs must not hang the script that asked. */
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

static bool
write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return false;
		p += w;
		n -= (size_t)w;
	}
	return true;
}

/* Sends the request and copies the answer out. Returns the exit status. */
static int
ask(int fd, const char *path, const char *cmd, const char *arg, bool json)
{
	char buf[65536], line[CMD_MAX + ARG_MAX + 16];
	size_t got = 0;
	bool refused = false, decided = false;
	ssize_t n;

	snprintf(line, sizeof(line), "%s%s%s%s\n", cmd, arg ? " " : "", arg ? arg : "",
	    json ? " json" : "");
	if (!write_all(fd, line, strlen(line))) {
		fprintf(stderr, "slotctl: %s: %s\n", path, strerror(errno));
		return EX_CONNECT;
	}
	(void)shutdown(fd, SHUT_WR);
	for (;;) {
		n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "slotctl: reading %s: %s\n", path,
			    errno == EAGAIN ? "no answer in time" : strerror(errno));
			return EX_CONNECT;
		}
		got += (size_t)n;
		/* A refusal starts with "error:": decide once that many bytes
		 * (or the whole answer) are in, then stream the rest. */
		if (!decided && (got >= 6 || n == 0)) {
			refused = got >= 6 && memcmp(buf, "error:", 6) == 0;
			decided = true;
		}
		if (decided && got > 0) {
			if (fwrite(buf, 1, got, refused ? stderr : stdout) != got) {
				fprintf(stderr, "slotctl: writing the answer: %s\n",
				    strerror(errno));
				return EX_DAEMON;
			}
			got = 0;
		}
		if (n == 0)
			break;
	}
	if (!refused && fflush(stdout) == EOF) {
		fprintf(stderr, "slotctl: writing the answer: %s\n", strerror(errno));
		return EX_DAEMON;
	}
	return refused ? EX_DAEMON : EX_OK;
}

/* slotctl run: moves this process into slotd's run cgroup (the lib socket's
 * "attach", by the pid the kernel gives slotd for this connection), then
 * execs the program, which keeps the pid and the cgroup, as its children
 * will. Returns an exit status only when it does not exec. */
static int
run(const char *lib, char **argv)
{
	char ans[LIB_LINE_MAX], *nl = NULL, *text;
	size_t got = 0;
	ssize_t n;
	int fd, e;

	if (lib == NULL && ((lib = getenv("SLOT_LIB_SOCKET")) == NULL || lib[0] == '\0'))
		lib = LIB_SOCKET_DEFAULT;
	if ((fd = dial(lib)) == -1) {
		e = errno;
		fprintf(stderr, "slotctl run: slotd is not reachable at %s: %s\n", lib,
		    strerror(e));
		return e == ENAMETOOLONG ? EX_USAGE : EX_CONNECT;
	}
	if (!write_all(fd, "attach\n", 7)) {
		fprintf(stderr, "slotctl run: slotd is not reachable at %s: %s\n", lib,
		    strerror(errno));
		close(fd);
		return EX_CONNECT;
	}
	while (nl == NULL && got < sizeof(ans) - 1) {
		n = read(fd, ans + got, sizeof(ans) - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "slotctl run: reading %s: %s\n", lib,
			    errno == EAGAIN ? "no answer in time" : strerror(errno));
			close(fd);
			return EX_CONNECT;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		ans[got] = '\0';
		nl = strchr(ans, '\n');
	}
	close(fd);
	if (got == 0) {
		fprintf(stderr, "slotctl run: slotd at %s closed the connection without "
		    "answering\n", lib);
		return EX_CONNECT;
	}
	ans[got] = '\0';
	if (nl != NULL)
		*nl = '\0';
	if (strncmp(ans, "err ", 4) == 0) {
		/* "err ENAME a sentence": the sentence is for people. */
		text = ans + 4 + strcspn(ans + 4, " ");
		fprintf(stderr, "slotctl run: slotd: %s\n", *text == ' ' ? text + 1 : ans + 4);
		return EX_DAEMON;
	}
	if (strcmp(ans, "ok") != 0 && strncmp(ans, "ok ", 3) != 0) {
		fprintf(stderr, "slotctl run: unexpected answer from slotd at %s: \"%.80s\"\n",
		    lib, ans);
		return EX_DAEMON;
	}
	execvp(argv[0], argv);
	e = errno;
	fprintf(stderr, "slotctl run: %s: %s\n", argv[0], strerror(e));
	/* As a shell says it: not found, or found and not executable. */
	return e == ENOENT ? 127 : 126;
}

/* "slotctl [options] run [-L socket] [--] program [argument ...]": run's own
 * options stop at the program's first word, so that the program's options
 * stay its own. */
static int
run_main(int argc, char **argv, const char *lib)
{
	static const struct option longopts[] = {
		{ "lib-socket", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static char name[] = "slotctl run";	/* getopt's messages name argv[0] */
	int ch;

	argv[0] = name;
	optind = 0;	/* glibc: start afresh */
	while ((ch = getopt_long(argc, argv, "+L:h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'L':
			lib = optarg;
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind == argc) {
		fprintf(stderr, "slotctl run: which program? (slotctl run -- program "
		    "[argument ...])\n");
		return EX_USAGE;
	}
	return run(lib, argv + optind);
}

/* Where the command word stands: a pass over the options that stops at the
 * first word that is none, without a word about errors (the real pass
 * reports them). */
static int
command_index(int argc, char **argv, const struct option *longopts)
{
	int saved = opterr, i;

	opterr = 0;
	optind = 0;
	while (getopt_long(argc, argv, "+s:d:jhVL:", longopts, NULL) != -1)
		;
	i = optind;
	opterr = saved;
	optind = 0;
	return i;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "daemon", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "lib-socket", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	const char *path = NULL, *cmd, *arg = NULL, *lib = NULL;
	bool json = false, is_run;
	int ch, fd = -1, rc, ci, nopts;

	/* Options may follow a command, but not "run": what follows it is the
	 * program's. */
	ci = command_index(argc, argv, longopts);
	is_run = ci < argc && strcmp(argv[ci], "run") == 0;
	nopts = is_run ? ci : argc;
	while ((ch = getopt_long(nopts, argv, "s:d:jhVL:", longopts, NULL)) != -1) {
		switch (ch) {
		case 's':
			if (path) {
				fprintf(stderr, "slotctl: -s and -d both name a socket\n");
				return EX_USAGE;
			}
			path = optarg;
			break;
		case 'd': {
			size_t i;
			for (i = 0; i < NDAEMONS; i++)
				if (strcmp(optarg, daemons[i].name) == 0 ||
				    strcmp(optarg, daemons[i].alias) == 0)
					break;
			if (i == NDAEMONS) {
				fprintf(stderr, "slotctl: -d %s: expected slotd, relayd or dird\n",
				    optarg);
				return EX_USAGE;
			}
			if (path) {
				fprintf(stderr, "slotctl: -s and -d both name a socket\n");
				return EX_USAGE;
			}
			path = daemons[i].path;
			break;
		}
		case 'j':
			json = true;
			break;
		case 'L':
			lib = optarg;
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		case 'V':
			printf("slotctl %s\n", SLOT_VERSION);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (is_run) {
		if (path != NULL || json) {
			fprintf(stderr, "slotctl: run talks to slotd's lib socket: -L names it, "
			    "not -s, -d or -j\n");
			return EX_USAGE;
		}
		return run_main(argc - ci, argv + ci, lib);
	}
	if (lib != NULL) {
		fprintf(stderr, "slotctl: -L is for run only\n");
		return EX_USAGE;
	}
	if (optind == argc || argc - optind > 2) {
		usage(stderr);
		return EX_USAGE;
	}
	cmd = argv[optind];
	if (!valid_command(cmd)) {
		fprintf(stderr, "slotctl: \"%s\" is no command (see slotctl -h)\n", cmd);
		return EX_USAGE;
	}
	if (argc - optind == 2) {
		arg = argv[optind + 1];
		if (!takes_argument(cmd)) {
			usage(stderr);
			return EX_USAGE;
		}
		if (!valid_argument(arg)) {
			fprintf(stderr, "slotctl: \"%s\" is no argument of %s\n", arg, cmd);
			return EX_USAGE;
		}
	}

	if (path) {
		if ((fd = dial(path)) == -1) {
			fprintf(stderr, "slotctl: %s: %s (is the daemon running?)\n", path,
			    strerror(errno));
			return errno == ENAMETOOLONG ? EX_USAGE : EX_CONNECT;
		}
	} else {
		/* One host usually runs one daemon: whichever answers. */
		for (size_t i = 0; i < NDAEMONS && fd == -1; i++)
			if ((fd = dial(daemons[i].path)) != -1)
				path = daemons[i].path;
		if (fd == -1) {
			fprintf(stderr, "slotctl: no daemon at %s, %s or %s (is one running? "
			    "-s names another socket)\n", daemons[0].path, daemons[1].path,
			    daemons[2].path);
			return EX_CONNECT;
		}
	}
	rc = ask(fd, path, cmd, arg, json);
	close(fd);
	return rc;
}
