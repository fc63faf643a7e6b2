#ifndef SLOT_LOG_H
#define SLOT_LOG_H

#include <stdarg.h>

/* Levels, most severe first. Names avoid syslog.h's LOG_* macros. */
enum slog_level { SLOG_ERROR = 0, SLOG_WARN, SLOG_INFO, SLOG_DEBUG };

/* Sets the program name shown in each line and the threshold. Lines go to
 * stderr; under systemd (JOURNAL_STREAM set) they carry a "<N>" priority
 * prefix for journald instead of a timestamp. */
void log_init(const char *ident, enum slog_level level);
void log_set_level(enum slog_level level);
enum slog_level log_get_level(void);

/* Parses "error", "warn", "info" or "debug". Returns 0, or -1 if unknown. */
int log_level_parse(const char *s, enum slog_level *out);
const char *log_level_name(enum slog_level level);

/* The *_warn / fatal variants append ": strerror(errno)"; the *x ones do not. */
void log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_errorx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_warnx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Start-up only: log and exit(1). */
void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void fatalx(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

#endif
