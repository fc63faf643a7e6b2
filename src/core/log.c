/*
 * Logging to stderr. Each line is formatted into one buffer and written with
 * a single write(2), so lines from several processes sharing stderr (or a
 * journald stream) never interleave. Under systemd (JOURNAL_STREAM set)
 * lines carry a "<N>" syslog priority and no timestamp: journald adds both
 * the time and the identifier itself.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "slot/log.h"

#define LOG_LINE_MAX 2048

static char log_ident[64] = "slot";
/* Read by every thread (slot-dird's request threads, the directory threads),
 * written on SIGHUP by the main one. */
static _Atomic int log_level = SLOG_INFO;
static int log_journal = -1;	/* -1: not looked at yet */

static const char *const log_names[] = {
	[SLOG_ERROR] = "error",
	[SLOG_WARN] = "warn",
	[SLOG_INFO] = "info",
	[SLOG_DEBUG] = "debug",
};

/* syslog priorities: LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG. */
static const int log_prio[] = {
	[SLOG_ERROR] = 3,
	[SLOG_WARN] = 4,
	[SLOG_INFO] = 6,
	[SLOG_DEBUG] = 7,
};

static enum slog_level
log_clamp(enum slog_level level)
{
	if ((int)level < SLOG_ERROR)
		return SLOG_ERROR;
	if (level > SLOG_DEBUG)
		return SLOG_DEBUG;
	return level;
}

void
log_init(const char *ident, enum slog_level level)
{
	const char *js;

	if (ident != NULL) {
		const char *slash = strrchr(ident, '/');

		/* argv[0] may be a path; only its last part names us. */
		if (slash != NULL && slash[1] != '\0')
			ident = slash + 1;
		snprintf(log_ident, sizeof(log_ident), "%s", ident);
	}
	log_level = log_clamp(level);
	js = getenv("JOURNAL_STREAM");
	log_journal = js != NULL && *js != '\0';
}

void
log_set_level(enum slog_level level)
{
	log_level = log_clamp(level);
}

enum slog_level
log_get_level(void)
{
	return (enum slog_level)log_level;
}

int
log_level_parse(const char *s, enum slog_level *out)
{
	size_t i;

	if (s == NULL)
		return -1;
	for (i = 0; i < sizeof(log_names) / sizeof(log_names[0]); i++) {
		if (strcasecmp(s, log_names[i]) == 0) {
			*out = (enum slog_level)i;
			return 0;
		}
	}
	return -1;
}

const char *
log_level_name(enum slog_level level)
{
	return log_names[log_clamp(level)];
}

static size_t
log_prefix(char *buf, size_t len, enum slog_level level)
{
	struct timeval tv;
	struct tm tm;
	size_t n;
	int r;

	if (log_journal) {
		r = snprintf(buf, len, "<%d>", log_prio[level]);
		return r < 0 ? 0 : (size_t)r;
	}
	gettimeofday(&tv, NULL);
	if (localtime_r(&tv.tv_sec, &tm) == NULL)
		memset(&tm, 0, sizeof(tm));
	n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	r = snprintf(buf + n, len - n, ".%03ld %s %s: ",
	    (long)(tv.tv_usec / 1000), log_ident, log_names[level]);
	return r < 0 ? n : n + (size_t)r;
}

/* Control characters (say, a newline in a peer-supplied name) would let one
 * message forge further log lines; they become '?'. */
static void
log_sanitize(char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			s[i] = '?';
	}
}

static void
log_write(const char *buf, size_t len)
{
	ssize_t w;

	while (len > 0) {
		w = write(STDERR_FILENO, buf, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += w;
		len -= (size_t)w;
	}
}

static void
log_vline(enum slog_level level, int err, const char *fmt, va_list ap)
{
	static const char trunc[] = "...";
	char buf[LOG_LINE_MAX];
	size_t n, room;
	int r;

	if (log_journal < 0) {
		const char *js = getenv("JOURNAL_STREAM");

		log_journal = js != NULL && *js != '\0';
	}
	/* Leave room for "...\n" after the message. */
	room = sizeof(buf) - sizeof(trunc);
	n = log_prefix(buf, room, level);
	if (n >= room)
		n = room - 1;
	r = vsnprintf(buf + n, room - n, fmt, ap);
	if (r > 0) {
		size_t m = (size_t)r < room - n ? (size_t)r : room - n - 1;

		log_sanitize(buf + n, m);
		n += m;
	}
	if (err >= 0 && n < room - 1) {
		r = snprintf(buf + n, room - n, ": %s", strerror(err));
		if (r > 0)
			n += (size_t)r < room - n ? (size_t)r : room - n - 1;
	}
	if (n >= room - 1) {
		memcpy(buf + n, trunc, sizeof(trunc) - 1);
		n += sizeof(trunc) - 1;
	}
	buf[n++] = '\n';
	log_write(buf, n);
}

#define LOG_BODY(lvl, with_errno) do {					\
	int saved = errno;						\
	va_list ap;							\
									\
	if ((int)(lvl) <= log_level) {					\
		va_start(ap, fmt);					\
		log_vline((lvl), (with_errno) ? saved : -1, fmt, ap);	\
		va_end(ap);						\
	}								\
	errno = saved;							\
} while (0)

void
log_error(const char *fmt, ...)
{
	LOG_BODY(SLOG_ERROR, 1);
}

void
log_errorx(const char *fmt, ...)
{
	LOG_BODY(SLOG_ERROR, 0);
}

void
log_warn(const char *fmt, ...)
{
	LOG_BODY(SLOG_WARN, 1);
}

void
log_warnx(const char *fmt, ...)
{
	LOG_BODY(SLOG_WARN, 0);
}

void
log_info(const char *fmt, ...)
{
	LOG_BODY(SLOG_INFO, 0);
}

void
log_debug(const char *fmt, ...)
{
	LOG_BODY(SLOG_DEBUG, 0);
}

void
fatal(const char *fmt, ...)
{
	LOG_BODY(SLOG_ERROR, 1);
	exit(1);
}

void
fatalx(const char *fmt, ...)
{
	LOG_BODY(SLOG_ERROR, 0);
	exit(1);
}
