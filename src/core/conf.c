/*
 * INI loading over inih, and value parsers.
 *
 * What Debian's inih (55) does, with the defaults we keep (Debian's build
 * also exports them as globals, ini_max_line and friends, which upstream
 * inih does not have; we leave them alone):
 * - Lines are read into a buffer of INI_MAX_LINE = 200 bytes (on the stack),
 *   and the reader is asked for at most that many. Plain inih silently cuts a
 *   longer line in two and parses the rest as a line of its own; our reader
 *   refuses such a line instead ("line too long"). A line holds at most 197
 *   characters, not counting the line end.
 * - Comments: a line starting with ';' or '#'; inline, only ';' preceded by
 *   white space ("port = 80 ; web" gives "80", "a;b" stays "a;b", and "#"
 *   inside a value is kept).
 * - Names and values arrive with surrounding white space stripped; section
 *   names we strip (inih passes "[ relay ]" as " relay ") and inih silently
 *   cuts them to 49 characters. Quotes are not special. "name: value" works
 *   like "name = value"; a line with neither is a syntax error. "name =" gives
 *   an empty value. A UTF-8 BOM is skipped.
 * - Multi-line values (an indented line continues the previous value, as in
 *   Python's configparser) are on in inih. An operator indenting a key would
 *   silently rewrite the previous key with "name = value" as its value, so
 *   our reader strips leading white space: every line stands alone.
 * - inih does not stop at the first error and has no line number in its
 *   handler: the reader counts lines, and once a handler has failed it ends
 *   the input so that nothing after the error is applied. Lines after a
 *   syntax error still reach the handler; conf_load fails all the same.
 */

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>

#include "slot/errbuf.h"
#include "slot/conf.h"

struct conf_ctx {
	const char *path;
	FILE *fp;
	char *buf;		/* getline's */
	size_t bufsz;
	int line;		/* lines handed to inih so far */
	int stop;		/* end the input at the next read */
	int err_line;		/* line of the first handler/reader error, or 0 */
	int read_errno;		/* I/O error, or 0 */
	conf_handler h;
	void *user;
	char msg[256];
};

static char *
conf_reader(char *str, int num, void *stream)
{
	struct conf_ctx *c = stream;
	ssize_t n;
	char *p;
	size_t len;

	if (c->stop)
		return NULL;
	errno = 0;
	n = getline(&c->buf, &c->bufsz, c->fp);
	if (n < 0) {
		if (ferror(c->fp))
			c->read_errno = errno != 0 ? errno : EIO;
		return NULL;
	}
	c->line++;
	if (memchr(c->buf, '\0', (size_t)n) != NULL) {
		snprintf(c->msg, sizeof(c->msg), "NUL byte in line");
		goto fail;
	}
	p = c->buf;
	len = (size_t)n;
	while (len > 0 && (*p == ' ' || *p == '\t')) {
		p++;
		len--;
	}
	if (num <= 0 || len + 1 > (size_t)num) {
		snprintf(c->msg, sizeof(c->msg),
		    "line too long (at most %d characters)", num - 3);
		goto fail;
	}
	memcpy(str, p, len + 1);
	return str;
fail:
	c->err_line = c->line;
	c->stop = 1;
	return NULL;
}

static int
conf_ini_handler(void *user, const char *section, const char *name,
    const char *value)
{
	struct conf_ctx *c = user;
	char sec[64];
	size_t len;

	if (c->stop)
		return 0;
	/* inih keeps the blanks of "[ relay ]"; names and values it strips. */
	while (*section == ' ' || *section == '\t')
		section++;
	len = strlen(section);
	while (len > 0 && (section[len - 1] == ' ' || section[len - 1] == '\t'))
		len--;
	snprintf(sec, sizeof(sec), "%.*s", (int)len, section);
	section = sec;
	c->msg[0] = '\0';
	if (c->h(c->user, section, name, value, c->msg, sizeof(c->msg)) == 0)
		return 1;
	if (c->msg[0] == '\0')
		snprintf(c->msg, sizeof(c->msg), "invalid value for %s%s%s",
		    section, *section ? "." : "", name);
	c->err_line = c->line;
	c->stop = 1;
	return 0;
}

int
conf_load(const char *path, conf_handler h, void *user, char *err, size_t errlen)
{
	struct conf_ctx c;
	int rc, ret = -1;

	memset(&c, 0, sizeof(c));
	c.path = path;
	c.h = h;
	c.user = user;
	if ((c.fp = fopen(path, "re")) == NULL) {
		errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	rc = ini_parse_stream(conf_reader, &c, conf_ini_handler, &c);
	if (c.read_errno != 0)
		errbuf_set(err, errlen, "%s: %s", path, strerror(c.read_errno));
	else if (rc > 0 && (c.err_line == 0 || rc < c.err_line))
		/* inih found a malformed line before any handler error. */
		errbuf_set(err, errlen, "%s:%d: syntax error", path, rc);
	else if (c.err_line > 0)
		errbuf_set(err, errlen, "%s:%d: %s", path, c.err_line, c.msg);
	else if (rc != 0)
		errbuf_set(err, errlen, "%s: %s", path,
		    rc == -2 ? strerror(ENOMEM) : "parse error");
	else
		ret = 0;
	free(c.buf);
	fclose(c.fp);
	return ret;
}

/* Leading digits of s as an integer; *end is the first other character.
 * Returns 0, or -1 if there is no digit or the number overflows. */
static int
conf_digits(const char *s, uint64_t *out, const char **end)
{
	uint64_t v = 0;
	const char *p = s;

	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');

		if (v > (UINT64_MAX - d) / 10) {
			*end = p;
			errno = ERANGE;
			return -1;
		}
		v = v * 10 + d;
	}
	*out = v;
	*end = p;
	return 0;
}

int
conf_duration_ms(const char *s, uint64_t *out, char *err, size_t errlen)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {
		{ "ms", 1 },
		{ "s", 1000 },
		{ "", 1000 },
		{ "m", 60 * 1000 },
		{ "h", 60 * 60 * 1000 },
		{ "d", 24 * 60 * 60 * 1000 },
	};
	const char *end;
	uint64_t v;
	size_t i;

	errno = 0;
	if (conf_digits(s, &v, &end) == -1) {
		if (errno == ERANGE)
			goto range;
		goto bad;
	}
	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].unit) != 0)
			continue;
		if (v > UINT64_MAX / units[i].ms)
			goto range;
		*out = v * units[i].ms;
		return 0;
	}
bad:
	errbuf_set(err, errlen, "invalid duration \"%s\" (a whole number with "
	    "ms, s, m, h or d, e.g. 250ms or 5s)", s);
	return -1;
range:
	errbuf_set(err, errlen, "duration \"%s\" is too large", s);
	return -1;
}

int
conf_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen)
{
	const char *end;
	uint64_t v;

	errno = 0;
	if (conf_digits(s, &v, &end) == -1 || *end != '\0') {
		if (errno == ERANGE)
			goto range;
		errbuf_set(err, errlen, "invalid number \"%s\"", s);
		return -1;
	}
	if (v < min || v > max)
		goto range;
	*out = v;
	return 0;
range:
	errbuf_set(err, errlen, "%s is out of range [%llu, %llu]", s,
	    (unsigned long long)min, (unsigned long long)max);
	return -1;
}

int
conf_double(const char *s, double min, double max, double *out,
    char *err, size_t errlen)
{
	char *end;
	double v;

	/* strtod would skip leading blanks and take "nan" or "inf". */
	if (*s == '\0' || isspace((unsigned char)*s))
		goto bad;
	errno = 0;
	v = strtod(s, &end);
	if (end == s || *end != '\0' || !isfinite(v))
		goto bad;
	if (errno == ERANGE || v < min || v > max) {
		errbuf_set(err, errlen, "%s is out of range [%g, %g]", s, min, max);
		return -1;
	}
	*out = v;
	return 0;
bad:
	errbuf_set(err, errlen, "invalid number \"%s\"", s);
	return -1;
}

int
conf_bool(const char *s, bool *out, char *err, size_t errlen)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };
	size_t i;

	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	errbuf_set(err, errlen, "invalid boolean \"%s\" (yes/no, true/false, "
	    "on/off, 1/0)", s);
	return -1;
}

int
conf_size(const char *s, uint64_t min, uint64_t max, uint64_t *out,
    char *err, size_t errlen)
{
	const char *end;
	uint64_t v, mult;

	errno = 0;
	if (conf_digits(s, &v, &end) == -1) {
		if (errno == ERANGE)
			goto range;
		goto bad;
	}
	switch (*end) {
	case '\0':
		mult = 1;
		break;
	case 'k': case 'K':
		mult = 1ULL << 10;
		break;
	case 'm': case 'M':
		mult = 1ULL << 20;
		break;
	case 'g': case 'G':
		mult = 1ULL << 30;
		break;
	default:
		goto bad;
	}
	if (*end != '\0' && end[1] != '\0')
		goto bad;
	if (v > UINT64_MAX / mult)
		goto range;
	v *= mult;
	if (v < min || v > max)
		goto range;
	*out = v;
	return 0;
bad:
	errbuf_set(err, errlen, "invalid size \"%s\" (bytes, or with k, M or G)", s);
	return -1;
range:
	errbuf_set(err, errlen, "size %s is out of range [%llu, %llu] bytes", s,
	    (unsigned long long)min, (unsigned long long)max);
	return -1;
}

int
conf_string(const char *s, char *out, size_t outlen, char *err, size_t errlen)
{
	size_t len = strlen(s);

	if (len >= outlen) {
		errbuf_set(err, errlen, "value too long (at most %zu characters)",
		    outlen > 0 ? outlen - 1 : 0);
		return -1;
	}
	memcpy(out, s, len + 1);
	return 0;
}

int
conf_urls(const char *s, struct conf_urls *out, char *err, size_t errlen)
{
	struct conf_urls v = { .n = 0 };

	while (*s) {
		size_t len = strcspn(s, ", \t");
		if (len == 0) {
			s++;
			continue;
		}
		const char *host = strncmp(s, "http://", 7) == 0 ? s + 7 :
		    strncmp(s, "https://", 8) == 0 ? s + 8 : NULL;
		if (host == NULL || host >= s + len || *host == '/' || *host == ':') {
			errbuf_set(err, errlen, "'%.*s': expected http://host[:port]/path", (int)len,
			    s);
			return -1;
		}
		if (v.n == CONF_URLS_MAX) {
			errbuf_set(err, errlen, "at most %d URLs", CONF_URLS_MAX);
			return -1;
		}
		if (len >= CONF_URL_LEN) {
			errbuf_set(err, errlen, "URL longer than %d characters", CONF_URL_LEN - 1);
			return -1;
		}
		memcpy(v.url[v.n], s, len);
		v.url[v.n][len] = '\0';
		v.n++;
		s += len;
	}
	*out = v;
	return 0;
}
