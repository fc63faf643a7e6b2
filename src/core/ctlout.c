/* What the control commands answer, in text and JSON: the answer buffer,
 * key/value lists, tables, counters and the Prometheus text format. No
 * sockets: ctlsrv.c sends what this writes. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/ctlout.h"

/* Room for n more bytes and a NUL; false (o->oom) if it cannot be had. */
static bool
out_grow(struct ctl_out *o, size_t n)
{
	size_t cap = o->cap ? o->cap : 4096;

	while (cap <= o->len + n)
		cap *= 2;
	char *b = realloc(o->buf, cap);
	if (b == NULL) {
		o->oom = true;
		return false;
	}
	o->buf = b;
	o->cap = cap;
	return true;
}

void
ctl_printf(struct ctl_out *o, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (o->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			o->oom = true;
			return;
		}
		if (o->len + (size_t)n < o->cap) {
			o->len += (size_t)n;
			return;
		}
		if (!out_grow(o, (size_t)n))
			return;
	}
}

void
ctl_append(struct ctl_out *o, const char *p, size_t n)
{
	if (o->oom || (o->len + n >= o->cap && !out_grow(o, n)))
		return;
	memcpy(o->buf + o->len, p, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

void
ctl_error(struct ctl_out *o, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ctl_printf(o, "error: %s\n", msg);
}

/* ---------------------------------------------------------------- identity */

void
ctl_ident_init(struct ctl_ident *id, const char *daemon, const char *metrics,
    const char *version, const char *conf_path)
{
	id->daemon = daemon;
	id->metrics = metrics;
	id->version = version;
	/* "-c relayd.conf" means little to whoever asks later from elsewhere. */
	if (realpath(conf_path, id->conf_path) == NULL)
		snprintf(id->conf_path, sizeof(id->conf_path), "%s", conf_path);
	id->start_mono_us = clock_mono_us();
	id->start_real_us = clock_real_us();
}

void
ctl_json_open(struct ctl_out *o, const struct ctl_ident *id)
{
	ctl_printf(o, "{\"daemon\":");
	ctl_json_str(o, id->daemon);
}

void
ctl_json_close(struct ctl_out *o)
{
	ctl_printf(o, "}\n");
}

void
ctl_json_str(struct ctl_out *o, const char *s)
{
	if (s == NULL) {
		ctl_printf(o, "null");
		return;
	}
	ctl_printf(o, "\"");
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			ctl_printf(o, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			ctl_printf(o, "\\u%04x", ch);
		else
			ctl_printf(o, "%c", ch);
	}
	ctl_printf(o, "\"");
}

const char *
ctl_fmt_dur(uint64_t us, char buf[16])
{
	uint64_t s = us / 1000000;

	if (us < 1000000)
		snprintf(buf, 16, "%llums", (unsigned long long)(us / 1000));
	else if (s < 60)
		snprintf(buf, 16, "%.1fs", (double)(us / 100000) / 10.0);
	else if (s < 3600)
		snprintf(buf, 16, "%llum%02llus", (unsigned long long)(s / 60),
		    (unsigned long long)(s % 60));
	else if (s < 86400)
		snprintf(buf, 16, "%lluh%02llum", (unsigned long long)(s / 3600),
		    (unsigned long long)(s % 3600 / 60));
	else
		snprintf(buf, 16, "%llud%02lluh", (unsigned long long)(s / 86400),
		    (unsigned long long)(s % 86400 / 3600));
	return buf;
}

static void
fmt_rtt(uint64_t us, char buf[24])
{
	snprintf(buf, 24, "%.1fms", (double)us / 1000.0);
}

/* ---------------------------------------------------------------- key/value */

#define CTL_KV_WIDTH 20		/* longer keys push their value out */

static void
kv_text(struct ctl_kv *kv, const char *key, const char *v)
{
	ctl_printf(kv->o, "%-*s %s\n", CTL_KV_WIDTH - 1, key, v);
}

void
ctl_kv_str(struct ctl_kv *kv, const char *key, const char *v)
{
	if (!kv->json) {
		kv_text(kv, key, v && v[0] ? v : "-");
		return;
	}
	ctl_printf(kv->o, ",\"%s\":", key);
	ctl_json_str(kv->o, v);
}

void
ctl_kv_uint(struct ctl_kv *kv, const char *key, unsigned long long v)
{
	if (kv->json)
		ctl_printf(kv->o, ",\"%s\":%llu", key, v);
	else
		ctl_printf(kv->o, "%-*s %llu\n", CTL_KV_WIDTH - 1, key, v);
}

void
ctl_kv_bool(struct ctl_kv *kv, const char *key, bool v)
{
	if (kv->json)
		ctl_printf(kv->o, ",\"%s\":%s", key, v ? "true" : "false");
	else
		kv_text(kv, key, v ? "yes" : "no");
}

void
ctl_kv_dur(struct ctl_kv *kv, const char *key, uint64_t us)
{
	char b[16];

	if (kv->json)
		ctl_printf(kv->o, ",\"%s_s\":%.3f", key, (double)us / 1e6);
	else
		kv_text(kv, key, ctl_fmt_dur(us, b));
}

void
ctl_kv_ident(struct ctl_kv *kv, const struct ctl_ident *id)
{
	uint64_t now = clock_mono_us();

	if (!kv->json)		/* in JSON, ctl_json_open said it */
		ctl_kv_str(kv, "daemon", id->daemon);
	ctl_kv_str(kv, "version", id->version);
	ctl_kv_uint(kv, "pid", (unsigned long long)getpid());
	ctl_kv_dur(kv, "uptime", now > id->start_mono_us ? now - id->start_mono_us : 0);
	ctl_kv_str(kv, "config", id->conf_path);
}

/* ---------------------------------------------------------------- tables */

static const char *
kind_suffix(enum ctl_kind k)
{
	return k == CTL_DUR ? "_s" : k == CTL_RTT ? "_us" : "";
}

void
ctl_table_begin(struct ctl_table *t, struct ctl_out *o, bool json, const char *key,
    const struct ctl_col *cols, size_t ncols)
{
	memset(t, 0, sizeof(*t));
	t->o = o;
	t->json = json;
	t->cols = cols;
	t->ncols = ncols;
	if (json)
		ctl_printf(o, ",\"%s\":[", key);
}

void
ctl_answer_table_begin(struct ctl_table *t, struct ctl_out *o, bool json,
    const struct ctl_ident *id, const char *key, const struct ctl_col *cols, size_t ncols)
{
	if (json)
		ctl_json_open(o, id);
	ctl_table_begin(t, o, json, key, cols, ncols);
	t->whole = json;
}

/* Text mode: keeps one cell. */
static void
cell_keep(struct ctl_table *t, const char *s)
{
	if (t->oom)
		return;
	if (t->noff == t->offcap) {
		size_t cap = t->offcap ? t->offcap * 2 : 64;
		size_t *off = realloc(t->off, cap * sizeof(*off));
		if (off == NULL) {
			t->oom = true;
			return;
		}
		t->off = off;
		t->offcap = cap;
	}
	t->off[t->noff++] = t->cells.len;
	ctl_append(&t->cells, s, strlen(s) + 1);
	if (t->cells.oom)
		t->oom = true;
}

/* JSON mode: the member's name, after the row's opening or a comma. */
static void
cell_json_name(struct ctl_table *t)
{
	const struct ctl_col *c = &t->cols[t->col];

	ctl_printf(t->o, "%s", t->col == 0 ? (t->rows ? ",{" : "{") : ",");
	if (c->json)
		ctl_printf(t->o, "\"%s\":", c->json);
	else
		ctl_printf(t->o, "\"%s%s\":", c->name, kind_suffix(c->kind));
}

static void
cell_done(struct ctl_table *t)
{
	if (++t->col < t->ncols)
		return;
	t->col = 0;
	t->rows++;
	if (t->json)
		ctl_printf(t->o, "}");
}

/* One cell: written as it is in JSON, or kept as text. */
static void
cell_put(struct ctl_table *t, const char *json, const char *text)
{
	if (t->json) {
		cell_json_name(t);
		ctl_printf(t->o, "%s", json);
	} else
		cell_keep(t, text);
	cell_done(t);
}

void
ctl_cell_str(struct ctl_table *t, const char *s)
{
	if (t->json) {
		cell_json_name(t);
		ctl_json_str(t->o, s);
	} else
		cell_keep(t, s && s[0] ? s : "-");
	cell_done(t);
}

void
ctl_cell_uint(struct ctl_table *t, unsigned long long v)
{
	char b[24];

	snprintf(b, sizeof(b), "%llu", v);
	cell_put(t, b, b);
}

void
ctl_cell_us(struct ctl_table *t, uint64_t us)
{
	char j[24], b[24];

	if (t->cols[t->col].kind == CTL_DUR) {
		snprintf(j, sizeof(j), "%.3f", (double)us / 1e6);
		ctl_fmt_dur(us, b);
	} else {
		snprintf(j, sizeof(j), "%llu", (unsigned long long)us);
		fmt_rtt(us, b);
	}
	cell_put(t, j, b);
}

void
ctl_cell_bool(struct ctl_table *t, bool v)
{
	cell_put(t, v ? "true" : "false", v ? "yes" : "no");
}

void
ctl_cell_none(struct ctl_table *t)
{
	cell_put(t, "null", "-");
}

static void
text_line(struct ctl_table *t, const size_t *width, const char *const *cell)
{
	for (size_t i = 0; i < t->ncols; i++) {
		bool last = i + 1 == t->ncols;
		bool right = t->cols[i].kind != CTL_STR && t->cols[i].kind != CTL_BOOL;
		int w = (int)width[i];
		/* The last column is not padded: no trailing blanks. */
		if (right)
			ctl_printf(t->o, "%*s%s", w, cell[i], last ? "\n" : "  ");
		else if (last)
			ctl_printf(t->o, "%s\n", cell[i]);
		else
			ctl_printf(t->o, "%-*s  ", w, cell[i]);
	}
}

void
ctl_table_end(struct ctl_table *t)
{
	if (t->json) {
		ctl_printf(t->o, "]");
		if (t->whole)
			ctl_json_close(t->o);
		return;
	}
	size_t *width = calloc(t->ncols, sizeof(*width));
	const char **cell = calloc(t->ncols, sizeof(*cell));
	if (width == NULL || cell == NULL || t->oom || t->col != 0) {
		/* An answer cut short says so rather than lying by omission. */
		t->o->oom = true;
		goto done;
	}
	for (size_t i = 0; i < t->ncols; i++)
		width[i] = strlen(t->cols[i].name);
	for (size_t k = 0; k < t->noff; k++) {
		size_t w = strlen(t->cells.buf + t->off[k]);
		if (w > width[k % t->ncols])
			width[k % t->ncols] = w;
	}
	for (size_t i = 0; i < t->ncols; i++)
		cell[i] = t->cols[i].name;
	text_line(t, width, cell);
	for (size_t r = 0; r < t->rows; r++) {
		for (size_t i = 0; i < t->ncols; i++)
			cell[i] = t->cells.buf + t->off[r * t->ncols + i];
		text_line(t, width, cell);
	}
done:
	free(width);
	free(cell);
	free(t->cells.buf);
	free(t->off);
	t->cells.buf = NULL;
	t->off = NULL;
}

/* ---------------------------------------------------------------- counters */

void
ctl_counter_add(struct ctl_counters *c, const char *name, unsigned long long v,
    enum ctl_mtype type, const char *help)
{
	if (c->n < CTL_COUNTERS_MAX)
		c->v[c->n++] = (struct ctl_counter){ name, v, type, help };
}

void
ctl_counters_text(struct ctl_out *o, const struct ctl_counter *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ctl_printf(o, "%s %llu\n", v[i].name, v[i].v);
}

void
ctl_counters_json(struct ctl_out *o, const struct ctl_counter *v, size_t n)
{
	ctl_printf(o, "{");
	for (size_t i = 0; i < n; i++)
		ctl_printf(o, "%s\"%s\":%llu", i ? "," : "", v[i].name, v[i].v);
	ctl_printf(o, "}");
}

const char *
ctl_metric_name(const struct ctl_ident *id, const struct ctl_counter *c, char buf[128])
{
	size_t n = strlen(c->name);
	bool has_total = n >= 6 && strcmp(c->name + n - 6, "_total") == 0;

	snprintf(buf, 128, "%s_%s%s", id->metrics, c->name,
	    c->type == CTL_COUNTER && !has_total ? "_total" : "");
	return buf;
}

/* HELP text escapes backslash and newline; label values also the quote. */
static void
prom_escaped(struct ctl_out *o, const char *s, bool label)
{
	for (; *s; s++) {
		if (*s == '\\')
			ctl_printf(o, "\\\\");
		else if (*s == '\n')
			ctl_printf(o, "\\n");
		else if (label && *s == '"')
			ctl_printf(o, "\\\"");
		else
			ctl_printf(o, "%c", *s);
	}
}

static void
prom_head(struct ctl_out *o, const char *name, const char *type, const char *help)
{
	ctl_printf(o, "# HELP %s ", name);
	prom_escaped(o, help, false);
	ctl_printf(o, "\n# TYPE %s %s\n", name, type);
}

void
ctl_metrics(struct ctl_out *o, const struct ctl_ident *id, const struct ctl_counter *v,
    size_t n)
{
	char name[128];

	snprintf(name, sizeof(name), "%s_info", id->metrics);
	prom_head(o, name, "gauge", "Always 1; the labels say which build answers.");
	ctl_printf(o, "%s{daemon=\"", name);
	prom_escaped(o, id->daemon, true);
	ctl_printf(o, "\",version=\"");
	prom_escaped(o, id->version, true);
	ctl_printf(o, "\"} 1\n");
	snprintf(name, sizeof(name), "%s_start_time_seconds", id->metrics);
	prom_head(o, name, "gauge", "Start time of the daemon, seconds since the Unix epoch.");
	ctl_printf(o, "%s %.3f\n", name, (double)id->start_real_us / 1e6);
	for (size_t i = 0; i < n; i++) {
		ctl_metric_name(id, &v[i], name);
		prom_head(o, name, v[i].type == CTL_COUNTER ? "counter" : "gauge",
		    v[i].help ? v[i].help : v[i].name);
		ctl_printf(o, "%s %llu\n", name, v[i].v);
	}
}
