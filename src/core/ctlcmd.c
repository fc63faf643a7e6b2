/* The control commands: a request line parsed, and answered from the
 * daemon's command table (slot/ctlcmd.h). */

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "slot/ctlcmd.h"

/* ---------------------------------------------------------------- requests */

static bool
is_cmd_char(char ch)
{
	return isalnum((unsigned char)ch) || ch == '_' || ch == '-';
}

static bool
is_arg_char(char ch)
{
	return ch > ' ' && ch < 0x7f;
}

static int
req_parse(const char *line, struct ctl_req *r, bool with_arg)
{
	const char *p = line, *w;
	size_t n;

	memset(r, 0, sizeof(*r));
	while (*p == ' ' || *p == '\t')
		p++;
	for (w = p; is_cmd_char(*p); p++)
		;
	n = (size_t)(p - w);
	if (n == 0 || n >= sizeof(r->cmd))
		return -1;
	memcpy(r->cmd, w, n);
	for (int words = 0; words < 2; words++) {
		while (*p == ' ' || *p == '\t')
			p++;
		for (w = p; is_arg_char(*p); p++)
			;
		n = (size_t)(p - w);
		if (n == 0)
			break;
		if (n == 4 && strncmp(w, "json", 4) == 0 && !r->json) {
			r->json = true;
			continue;
		}
		/* The argument comes before "json", once. */
		if (!with_arg || r->json || r->arg[0] || n >= sizeof(r->arg))
			return -1;
		memcpy(r->arg, w, n);
	}
	while (*p == ' ' || *p == '\t')
		p++;
	return *p == '\0' ? 0 : -1;
}

int
ctl_req_parse(const char *line, struct ctl_req *r)
{
	return req_parse(line, r, false);
}

int
ctl_req_parse_arg(const char *line, struct ctl_req *r)
{
	return req_parse(line, r, true);
}

/* ---------------------------------------------------------------- commands */

/* The names a daemon answers to, in its table's order. */
static const char *
cmd_list(const struct ctl_cmds *set, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < set->n; i++)
		if (set->cmd[i].refusal == NULL && n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "",
			    set->cmd[i].name);
	return buf;
}

static void
status(const struct ctl_cmds *set, void *daemon, const struct ctl_ident *id,
    const struct ctl_req *q, struct ctl_out *o)
{
	struct ctl_kv kv = { o, q->json };

	if (q->json)
		ctl_json_open(o, id);
	ctl_kv_ident(&kv, id);
	set->status(daemon, &kv);
	if (q->json)
		ctl_json_close(o);
}

static void
counters(const struct ctl_cmds *set, void *daemon, const struct ctl_ident *id,
    const struct ctl_req *q, struct ctl_out *o)
{
	struct ctl_counters c = { 0 };

	if (strcmp(q->cmd, "metrics") == 0 && q->json) {
		ctl_error(o, "metrics come in the Prometheus text format only "
		    "(\"counters json\" has them in JSON)");
		return;
	}
	set->counters(daemon, &c);
	if (strcmp(q->cmd, "metrics") == 0) {
		ctl_metrics(o, id, c.v, c.n);
	} else if (q->json) {
		ctl_json_open(o, id);
		ctl_printf(o, ",\"counters\":");
		ctl_counters_json(o, c.v, c.n);
		ctl_json_close(o);
	} else
		ctl_counters_text(o, c.v, c.n);
}

void
ctl_cmd_answer(const struct ctl_cmds *set, void *daemon, const struct ctl_ident *id,
    const char *line, struct ctl_out *out)
{
	const struct ctl_cmd *c = NULL, *with_arg = NULL;
	struct ctl_table t;
	struct ctl_req q;
	char list[256];

	for (size_t i = 0; i < set->n; i++)
		if (set->cmd[i].arg && with_arg == NULL)
			with_arg = &set->cmd[i];
	if (req_parse(line, &q, with_arg != NULL) == -1) {
		ctl_error(out, "bad request (expected a command, then \"json\" or nothing)");
		return;
	}
	for (size_t i = 0; i < set->n && c == NULL; i++)
		if (strcmp(set->cmd[i].name, q.cmd) == 0)
			c = &set->cmd[i];
	if (q.arg[0] && (c == NULL || c->arg == NULL)) {
		ctl_error(out, "\"%s\" takes no argument (only %s does: %s)", q.cmd,
		    with_arg->name, with_arg->arg);
		return;
	}
	if (c == NULL)
		ctl_error(out, "unknown command \"%s\" for %s; it answers %s", q.cmd,
		    id->daemon, cmd_list(set, list, sizeof(list)));
	else if (c->refusal)
		ctl_error(out, "%s; it answers %s", c->refusal, cmd_list(set, list, sizeof(list)));
	else if (c->fn)
		c->fn(daemon, &q, out);
	else if (c->rows) {
		ctl_answer_table_begin(&t, out, q.json, id, c->name, c->cols, c->ncols);
		c->rows(daemon, &t);
		ctl_table_end(&t);
	} else if (strcmp(c->name, "status") == 0)
		status(set, daemon, id, &q, out);
	else
		counters(set, daemon, id, &q, out);
}
