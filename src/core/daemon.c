#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "slot/auth.h"
#include "slot/daemon.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

static void
usage(FILE *f, const char *name, const char *default_conf, const char *check_what)
{
	fprintf(f,
	    "usage: %s [-c config] [-l level] [-t] [-V]\n"
	    "  -c, --config config  configuration file (default %s)\n"
	    "  -l, --level level    log level: error, warn, info, debug (overrides the file)\n"
	    "  -t, --check          check the configuration and %s, then exit\n"
	    "  -V, --version        print the version\n"
	    "  -h, --help           this text\n", name, default_conf, check_what);
}

void
daemon_start(const char *name, const char *default_conf, const char *check_what,
    int argc, char **argv, struct daemon_args *out)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "level", required_argument, NULL, 'l' },
		{ "check", no_argument, NULL, 't' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *level_arg = NULL;
	int ch;

	out->conf_path = default_conf;
	out->check_only = false;
	out->has_level = false;
	while ((ch = getopt_long(argc, argv, "c:l:tVh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			out->conf_path = optarg;
			break;
		case 'l':
			level_arg = optarg;
			break;
		case 't':
			out->check_only = true;
			break;
		case 'V':
			printf("%s %s\n", name, SLOT_VERSION);
			exit(0);
		case 'h':
			usage(stdout, name, default_conf, check_what);
			exit(0);
		default:
			usage(stderr, name, default_conf, check_what);
			exit(2);
		}
	}
	if (optind != argc) {
		usage(stderr, name, default_conf, check_what);
		exit(2);
	}
	log_init(name, SLOG_INFO);
	if (level_arg) {
		if (log_level_parse(level_arg, &out->level) == -1)
			fatalx("-l %s: expected error, warn, info or debug", level_arg);
		out->has_level = true;
	}
	if (auth_init() == -1)
		fatalx("libsodium failed to initialise");
}

void
daemon_log_level(const struct daemon_args *a, enum slog_level *conf_level)
{
	if (a->has_level)
		*conf_level = a->level;
	log_set_level(*conf_level);
}

void
daemon_signals(struct ev_loop *loop, ev_signal sig[3],
    void (*cb)(struct ev_loop *, ev_signal *, int), void *data)
{
	static const int signum[3] = { SIGHUP, SIGTERM, SIGINT };

	for (int i = 0; i < 3; i++) {
		ev_signal_init(&sig[i], cb, signum[i]);
		sig[i].data = data;
		ev_signal_start(loop, &sig[i]);
	}
}
