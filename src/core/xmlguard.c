/* Plain UTF-8 XML without declarations (see xmlguard.h). */

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "slot/xmlguard.h"

const char *
xmlg_bom_name(const void *buf, size_t len)
{
	const uint8_t *p = buf;

	/* UTF-32LE before UTF-16LE: its mark starts with UTF-16LE's. */
	if (len >= 4 && p[0] == 0xff && p[1] == 0xfe && p[2] == 0 && p[3] == 0)
		return "UTF-32LE";
	if (len >= 4 && p[0] == 0 && p[1] == 0 && p[2] == 0xfe && p[3] == 0xff)
		return "UTF-32BE";
	if (len >= 3 && p[0] == 0xef && p[1] == 0xbb && p[2] == 0xbf)
		return "UTF-8";
	if (len >= 2 && p[0] == 0xff && p[1] == 0xfe)
		return "UTF-16LE";
	if (len >= 2 && p[0] == 0xfe && p[1] == 0xff)
		return "UTF-16BE";
	return NULL;
}

const char *
xmlg_strerror(enum xmlg_result r)
{
	switch (r) {
	case XMLG_OK:
		return "plain UTF-8 XML";
	case XMLG_EMPTY:
		return "an empty body";
	case XMLG_BOM:
		return "a byte order mark";
	case XMLG_NUL:
		return "a NUL byte (UTF-16 or UTF-32?)";
	case XMLG_UTF8:
		return "invalid UTF-8";
	case XMLG_MARKUP_DECL:
		return "a markup declaration (\"<!\": DOCTYPE, ENTITY, comment or CDATA)";
	case XMLG_PI:
		return "a processing instruction";
	case XMLG_XMLDECL:
		return "an unterminated XML declaration";
	case XMLG_ENCODING:
		return "an encoding other than UTF-8 or US-ASCII";
	}
	return "?";
}

/* Length of the valid UTF-8 sequence at p (n bytes left), 0 if invalid. */
static size_t
utf8_len(const uint8_t *p, size_t n)
{
	uint8_t c = p[0];
	size_t len;
	uint32_t cp, min;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
		min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
		min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
		min = 0x10000;
	} else {
		return 0;	/* a continuation byte, 0xc0/0xc1, or 0xf5.. */
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

static bool
is_space(uint8_t c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The XML declaration at p[0, n), which starts "<?xml" and a space and ends
 * before its "?>": the encoding, if named, must be UTF-8 or US-ASCII. */
static enum xmlg_result
check_decl(const uint8_t *p, size_t n, size_t *at)
{
	static const char kw[] = "encoding";
	const size_t kwlen = sizeof(kw) - 1;

	for (size_t i = 5; i + kwlen <= n; i++) {
		if (memcmp(p + i, kw, kwlen) != 0 || !is_space(p[i - 1]))
			continue;
		size_t j = i + kwlen, v;
		while (j < n && is_space(p[j]))
			j++;
		if (j >= n || p[j] != '=')
			break;
		j++;
		while (j < n && is_space(p[j]))
			j++;
		if (j >= n || (p[j] != '"' && p[j] != '\''))
			break;
		uint8_t q = p[j++];
		for (v = j; v < n && p[v] != q; v++)
			;
		if (v >= n)
			break;
		if ((v - j == 5 && strncasecmp((const char *)p + j, "UTF-8", 5) == 0) ||
		    (v - j == 8 && strncasecmp((const char *)p + j, "US-ASCII", 8) == 0))
			return XMLG_OK;
		break;
	}
	/* No "encoding" keyword at all: UTF-8 by default. Otherwise it was
	 * another encoding, or one we could not read. */
	for (size_t i = 5; i + kwlen <= n; i++)
		if (memcmp(p + i, kw, kwlen) == 0) {
			if (at)
				*at = i;
			return XMLG_ENCODING;
		}
	return XMLG_OK;
}

enum xmlg_result
xmlg_check(const void *buf, size_t len, size_t *at)
{
	const uint8_t *p = buf;
	size_t i = 0, decl_end = 0;

	if (at)
		*at = 0;
	if (len == 0)
		return XMLG_EMPTY;
	if (xmlg_bom_name(p, len) != NULL)
		return XMLG_BOM;
	/* An XML declaration is "<?xml" and a space, at byte 0 only. */
	if (len >= 6 && memcmp(p, "<?xml", 5) == 0 && is_space(p[5])) {
		const uint8_t *e = memmem(p, len, "?>", 2);
		if (e == NULL)
			return XMLG_XMLDECL;
		decl_end = (size_t)(e - p) + 2;
	}
	while (i < len) {
		uint8_t c = p[i];

		if (c == 0) {
			if (at)
				*at = i;
			return XMLG_NUL;
		}
		if (c == '<' && i + 1 < len && (p[i + 1] == '!' || (p[i + 1] == '?' && i > 0))) {
			if (at)
				*at = i;
			return p[i + 1] == '!' ? XMLG_MARKUP_DECL : XMLG_PI;
		}
		size_t n = utf8_len(p + i, len - i);
		if (n == 0) {
			if (at)
				*at = i;
			return XMLG_UTF8;
		}
		i += n;
	}
	/* A "<?" at 0 that is not "<?xml" and a space: a processing
	 * instruction (checked after NUL and UTF-8, which come first). */
	if (len >= 2 && p[0] == '<' && p[1] == '?' && decl_end == 0)
		return XMLG_PI;
	if (decl_end > 0)
		return check_decl(p, decl_end - 2, at);
	return XMLG_OK;
}
