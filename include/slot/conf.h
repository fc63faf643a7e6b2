#ifndef SLOT_CONF_H
#define SLOT_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* INI files (inih) with line numbers in every error, and value parsers.
 * Parsers return 0, or -1 with a short reason in err. */

/* Called for each name = value. Return 0 to go on, -1 to stop with the
 * reason written into err (the loader adds "path:line: "). */
typedef int (*conf_handler)(void *user, const char *section, const char *name,
    const char *value, char *err, size_t errlen);

/* Reads path and calls h for each entry. Returns 0, or -1 with
 * "path:line: reason" (or "path: strerror") in err. */
int conf_load(const char *path, conf_handler h, void *user, char *err, size_t errlen);

/* "250ms", "5s", "2m", "1h", "1d"; a bare number is seconds. */
int conf_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen);

/* Decimal integer within [min, max]. */
int conf_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen);

/* Floating point within [min, max]. */
int conf_double(const char *s, double min, double max, double *out,
    char *err, size_t errlen);

/* "yes/no", "true/false", "on/off", "1/0". */
int conf_bool(const char *s, bool *out, char *err, size_t errlen);

/* Byte size: "65536", "64k", "1M", "1G" (powers of 1024). */
int conf_size(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen);

/* Copies a string value; -1 if it does not fit. */
int conf_string(const char *s, char *out, size_t outlen, char *err, size_t errlen);

/* A list of http:// or https:// URLs (slot-dird's), separated by commas or
 * blanks; empty: none. */
#define CONF_URLS_MAX 8
#define CONF_URL_LEN 256
struct conf_urls {
	char url[CONF_URLS_MAX][CONF_URL_LEN];
	size_t n;
};
int conf_urls(const char *s, struct conf_urls *out, char *err, size_t errlen);

#endif
