#ifndef SLOT_XMLGUARD_H
#define SLOT_XMLGUARD_H

#include <stddef.h>

/*
 * Is this plain UTF-8 XML without declarations? XML-RPC needs nothing more,
 * and everything more is how an XML parser is attacked: a document type
 * declaration brings entities, which xmlrpc-c's parser expands (a 1 KB body
 * becomes gigabytes), and another encoding (a byte order mark, UTF-16,
 * an encoding named in the XML declaration) hides them from a byte search.
 * So both ends check every XML-RPC body with this before any parser sees
 * it: slot-dird its requests, slotd and slot-relayd the directory's answers
 * (docs/directory.md, "Transport").
 *
 * A body passes when it has
 * - no byte order mark (UTF-8, UTF-16 LE/BE, UTF-32 LE/BE) and no NUL byte;
 * - valid UTF-8 throughout (no overlong forms, surrogates, or code points
 *   beyond U+10FFFF);
 * - no "<!" anywhere: no DOCTYPE, ENTITY, comment or CDATA section (a
 *   literal '<' cannot occur in XML character data, so every "<!" is
 *   markup);
 * - no "<?" except one XML declaration at byte 0, which names no encoding
 *   or UTF-8 or US-ASCII, and ends with "?>".
 */

enum xmlg_result {
	XMLG_OK = 0,
	XMLG_EMPTY,		/* no bytes at all */
	XMLG_BOM,		/* a byte order mark */
	XMLG_NUL,		/* a NUL byte (UTF-16/32 without a mark) */
	XMLG_UTF8,		/* not valid UTF-8 */
	XMLG_MARKUP_DECL,	/* "<!": DOCTYPE, ENTITY, comment, CDATA */
	XMLG_PI,		/* "<?" other than the XML declaration */
	XMLG_XMLDECL,		/* an XML declaration without its "?>" */
	XMLG_ENCODING,		/* the declaration names another encoding */
};

/* Checks len bytes at buf. Returns XMLG_OK, or the first reason to refuse
 * with *at (if not NULL) the offset of the offending byte. */
enum xmlg_result xmlg_check(const void *buf, size_t len, size_t *at);

/* A short description of r, e.g. "a UTF-16LE byte order mark". For a BOM,
 * xmlg_bom_name() says which. */
const char *xmlg_strerror(enum xmlg_result r);

/* The encoding whose byte order mark starts buf ("UTF-8", "UTF-16LE",
 * "UTF-16BE", "UTF-32LE", "UTF-32BE"), or NULL. */
const char *xmlg_bom_name(const void *buf, size_t len);

#endif
