#ifndef SLOT_CTLCMD_H
#define SLOT_CTLCMD_H

#include <stdbool.h>
#include <stddef.h>

#include "slot/ctlout.h"

/* The control commands (docs/slotctl.md). A client sends one line, "<cmd>"
 * for text or "<cmd> json" for JSON; the daemon answers from its table of
 * commands. An answer that starts with "error:" is a refusal. */

/* ---- requests ---- */

#define CTL_CMD_MAX 32
#define CTL_ARG_MAX 64

struct ctl_req {
	char cmd[CTL_CMD_MAX];	/* letters, digits, '_' and '-' */
	char arg[CTL_ARG_MAX];	/* ctl_req_parse_arg: "<cmd> <arg>"; "" if none */
	bool json;		/* "<cmd> json" */
};

/* Parses "<cmd>" or "<cmd> json" (blanks around are fine). Returns 0, or -1
 * for anything else. */
int ctl_req_parse(const char *line, struct ctl_req *r);

/* The same for a command that may take one argument: "<cmd>", "<cmd> json",
 * "<cmd> <arg>" or "<cmd> <arg> json"; the argument is printable ASCII
 * without blanks, shorter than CTL_ARG_MAX. Returns 0, or -1. */
int ctl_req_parse_arg(const char *line, struct ctl_req *r);

/* ---- a daemon's commands ---- */

/* Writes the answer to q into out; daemon: as given to ctl_cmd_answer. */
typedef void (*ctl_cmd_fn)(void *daemon, const struct ctl_req *q, struct ctl_out *out);

/* One command; written with the macros below. Without fn the core answers:
 * a table (rows), a refusal, or one of the commands common to all. */
struct ctl_cmd {
	const char *name;
	ctl_cmd_fn fn;
	const char *arg;	/* takes one argument: its usage ("flush [SERVER]") */
	const char *refusal;	/* another daemon's command: why not this one's */
	/* A table that is the whole answer, keyed by the name in JSON: the
	 * core begins and ends it, rows fills it. */
	void (*rows)(void *daemon, struct ctl_table *t);
	const struct ctl_col *cols;
	size_t ncols;
};

#define CTL_CMD(n, f) { .name = (n), .fn = (f) }
#define CTL_CMD_ARG(n, f, usage) { .name = (n), .fn = (f), .arg = (usage) }
#define CTL_CMD_TABLE(n, r, c) { .name = (n), .rows = (r), .cols = (c), .ncols = CTL_NCOLS(c) }
/* A command the daemon refuses with "error: <why>; it answers <list>". */
#define CTL_CMD_REFUSED(n, why) { .name = (n), .refusal = (why) }
/* The commands every daemon answers alike, from its ctl_cmds. */
#define CTL_CMD_STATUS { .name = "status" }
#define CTL_CMD_COUNTERS { .name = "counters" }
#define CTL_CMD_METRICS { .name = "metrics" }

#define CTL_NCMDS(cmds) (sizeof(cmds) / sizeof((cmds)[0]))

struct ctl_cmds {
	const struct ctl_cmd *cmd;	/* in the order the refusals list them */
	size_t n;
	/* "status": the daemon's keys after the common head (ctl_kv_ident). */
	void (*status)(void *daemon, struct ctl_kv *kv);
	/* "counters" (text or JSON) and "metrics" (Prometheus). */
	void (*counters)(void *daemon, struct ctl_counters *c);
};

/* Answers one request line into out, or refuses it: a line that does not
 * parse, an argument to a command that takes none, a command not in set
 * (naming id->daemon and the commands it answers). */
void ctl_cmd_answer(const struct ctl_cmds *set, void *daemon, const struct ctl_ident *id,
    const char *line, struct ctl_out *out);

#endif
