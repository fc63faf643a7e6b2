#ifndef SLOT_CTLOUT_H
#define SLOT_CTLOUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The answers of the control commands (docs/slotctl.md), in text or JSON:
 * an answer is built in a ctl_out, which the command server (slot/ctlsrv.h)
 * then sends. */

struct ctl_out {
	char *buf;
	size_t len, cap;
	bool oom;		/* an append failed: the answer is cut short */
};

void ctl_printf(struct ctl_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends n bytes as they are (they may hold NULs). */
void ctl_append(struct ctl_out *o, const char *p, size_t n);

/* A refusal: "error: " and the message, then a newline. */
void ctl_error(struct ctl_out *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ---- who answers ---- */

struct ctl_ident {
	const char *daemon;	/* "slotd", "slot-relayd", "slot-dird" */
	const char *metrics;	/* metric name prefix: "slot_slotd", ... */
	const char *version;
	char conf_path[PATH_MAX];	/* absolute, when it could be resolved */
	uint64_t start_mono_us, start_real_us;
};

/* Fills id, the start time being now. daemon, metrics and version must
 * outlive id. */
void ctl_ident_init(struct ctl_ident *id, const char *daemon, const char *metrics,
    const char *version, const char *conf_path);

/* A JSON answer's opening, '{"daemon":"<daemon>"'; the caller adds
 * ',"key":...' members and closes with ctl_json_close. */
void ctl_json_open(struct ctl_out *o, const struct ctl_ident *id);
void ctl_json_close(struct ctl_out *o);	/* "}\n" */

/* s as a JSON string, quoted and escaped; NULL gives null. */
void ctl_json_str(struct ctl_out *o, const char *s);

/* A duration for people: "850ms", "12.3s", "4m05s", "2h03m", "3d04h". */
const char *ctl_fmt_dur(uint64_t us, char buf[16]);

/* ---- key/value answers ("status") ----
 * Text: one "key value" line each, the values aligned. JSON: members of the
 * answer's object (after ctl_json_open). Durations are "<key>_s" in JSON
 * (seconds), RTTs "<key>_us" (microseconds). */

struct ctl_kv {
	struct ctl_out *o;
	bool json;
};

void ctl_kv_str(struct ctl_kv *kv, const char *key, const char *v);	/* NULL: null, "-" */
void ctl_kv_uint(struct ctl_kv *kv, const char *key, unsigned long long v);
void ctl_kv_bool(struct ctl_kv *kv, const char *key, bool v);
void ctl_kv_dur(struct ctl_kv *kv, const char *key, uint64_t us);
/* The common head of every status: daemon, version, pid, uptime, config. */
void ctl_kv_ident(struct ctl_kv *kv, const struct ctl_ident *id);

/* ---- tables ("pipes", "cache", "relays", "rules") ----
 * Text: a header line, then one line per row, columns aligned (numbers to
 * the right). JSON: '"<key>":[{...},...]' inside the answer's object, one
 * object per row, named by the columns. A cell given as none is "-" in text
 * and null in JSON. */

enum ctl_kind {
	CTL_STR,		/* left aligned */
	CTL_UINT,
	CTL_DUR,		/* us; text like ctl_fmt_dur, JSON "<name>_s": seconds */
	CTL_RTT,		/* us; text "40.1ms", JSON "<name>_us": microseconds */
	CTL_BOOL,		/* text yes/no */
};

struct ctl_col {
	const char *name;	/* the text header */
	enum ctl_kind kind;
	const char *json;	/* the JSON name; NULL: name, with the kind's suffix */
};

struct ctl_table {
	struct ctl_out *o;
	bool json;
	const struct ctl_col *cols;
	size_t ncols, col, rows;
	struct ctl_out cells;	/* text: every cell, NUL-terminated, row by row */
	size_t *off;		/* text: where each cell starts in cells */
	size_t noff, offcap;
	bool oom;
	bool whole;		/* JSON: the table is the whole answer's object */
};

void ctl_table_begin(struct ctl_table *t, struct ctl_out *o, bool json, const char *key,
    const struct ctl_col *cols, size_t ncols);
/* One cell, in column order; a row ends with its last column. */
void ctl_cell_str(struct ctl_table *t, const char *s);	/* NULL: none */
void ctl_cell_uint(struct ctl_table *t, unsigned long long v);
void ctl_cell_us(struct ctl_table *t, uint64_t us);	/* CTL_DUR, CTL_RTT columns */
void ctl_cell_bool(struct ctl_table *t, bool v);
void ctl_cell_none(struct ctl_table *t);
/* A table that is the whole answer: in JSON the answer's object (opened
 * with id, closed by ctl_table_end) holding the array key. */
void ctl_answer_table_begin(struct ctl_table *t, struct ctl_out *o, bool json,
    const struct ctl_ident *id, const char *key, const struct ctl_col *cols, size_t ncols);
#define CTL_NCOLS(cols) (sizeof(cols) / sizeof((cols)[0]))
/* Writes the text table (or closes the JSON array, and the answer's object
 * after ctl_answer_table_begin) and frees t's memory. */
void ctl_table_end(struct ctl_table *t);

/* ---- counters, and metrics in the Prometheus text format ---- */

enum ctl_mtype { CTL_COUNTER, CTL_GAUGE };

struct ctl_counter {
	const char *name;
	unsigned long long v;
	enum ctl_mtype type;
	const char *help;
};

/* Room for every counter of a daemon, with some to spare. */
#define CTL_COUNTERS_MAX 128

/* A daemon's counters, as ctl_counter_add lists them. */
struct ctl_counters {
	size_t n;
	struct ctl_counter v[CTL_COUNTERS_MAX];
};

/* Appends one counter; past CTL_COUNTERS_MAX it is left out. */
void ctl_counter_add(struct ctl_counters *c, const char *name, unsigned long long v,
    enum ctl_mtype type, const char *help);

/* "name value" lines: the "counters" answer. */
void ctl_counters_text(struct ctl_out *o, const struct ctl_counter *v, size_t n);
/* {"name":value,...} (an object, no newline). */
void ctl_counters_json(struct ctl_out *o, const struct ctl_counter *v, size_t n);

/* The "metrics" answer (exposition format 0.0.4): <prefix>_info{version=...}
 * 1 and <prefix>_start_time_seconds, then each counter as <prefix>_<name>
 * with # HELP and # TYPE; counters get the "_total" suffix Prometheus
 * expects of them (unless their name has it already). */
void ctl_metrics(struct ctl_out *o, const struct ctl_ident *id, const struct ctl_counter *v,
    size_t n);

/* The name a counter has in the metrics, into buf (at most 128 bytes). */
const char *ctl_metric_name(const struct ctl_ident *id, const struct ctl_counter *c,
    char buf[128]);

#endif
