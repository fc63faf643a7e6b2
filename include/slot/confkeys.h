#ifndef SLOT_CONFKEYS_H
#define SLOT_CONFKEYS_H

#include <stddef.h>
#include <stdint.h>

/* The daemons' configuration keys as tables: each key names its section,
 * its kind and where its value goes in the daemon's struct; one function
 * finds the key, parses the value by its kind and says what was expected
 * when it is wrong. Kinds only one daemon has go through its hook. */

enum conf_kind {
	CK_STR,		/* a string that fits the member */
	CK_LEVEL,	/* error, warn, info, debug */
	CK_AUTHMODE,	/* identity, shared */
	CK_UINT,	/* [min, max], stored in a member of 2, 4 or 8 bytes */
	CK_MS,		/* a duration within [min, max] ms, in ms (uint64_t) */
	CK_US,		/* the same, stored in us */
	CK_MS_OFF,	/* CK_MS, or "off" / 0: none */
	CK_SIZE,	/* bytes ("64k"), [min, max] (uint64_t) */
	CK_SIZE_OFF,	/* CK_SIZE, or "off" / 0: none */
	CK_DOUBLE,	/* [dmin, dmax] */
	CK_BOOL,
	CK_EP,		/* address:port */
	CK_EP_OPT,	/* address:port, or empty: none (all zero) */
	CK_PORTS,	/* struct portset */
	CK_CIDRS,	/* struct cidr_list, replaced */
	CK_URLS,	/* struct conf_urls */
	CK_BIT,		/* a firewall mark of exactly one bit (uint32_t) */
	CK_MASK,	/* contiguous mark bits (uint32_t) */
	CK_FMODE,	/* an octal file mode, 0600 to 0777 (uint32_t) */
	CK_CUSTOM,	/* the daemon's hook, told k->custom */
};

struct conf_key {
	const char *section, *name;
	enum conf_kind kind;
	size_t off, size;	/* of the member */
	uint64_t min, max;	/* CK_UINT, CK_SIZE(_OFF); CK_MS, CK_US, CK_MS_OFF in ms */
	double dmin, dmax;	/* CK_DOUBLE */
	int custom;		/* CK_CUSTOM: which, for the hook */
};

/* A key of section sec whose value goes to member m of struct type T, for
 * a table: { CONF_KEY(...), .min = 1, .max = 9 }. */
#define CONF_KEY(T, sec, nm, k, m) .section = (sec), .name = (nm), .kind = (k), \
	.off = offsetof(T, m), .size = sizeof(((T *)0)->m)

/* Parses value for k into obj; -1 with what was expected in sub. */
typedef int (*conf_custom_fn)(void *obj, const struct conf_key *k, const char *value,
    char *sub, size_t sublen);

/* Sets section.name = value in obj by the table keys[0..n). Returns 0, or -1
 * with "unknown section [s]", "unknown key 'k' in section [s]" or
 * "[s] k = value: what was expected" in err. custom may be NULL if no key
 * is CK_CUSTOM. */
int conf_keys_set(const struct conf_key *keys, size_t n, conf_custom_fn custom, void *obj,
    const char *section, const char *name, const char *value, char *err, size_t errlen);

/* Parses value by k's kind (not CK_CUSTOM) into obj. Returns 0, or -1 with
 * what was expected in sub. */
int conf_key_parse(const struct conf_key *k, void *obj, const char *value, char *sub,
    size_t sublen);

/* The lowest set bit's position (0 for 0). */
static inline unsigned
conf_mask_shift(uint32_t m)
{
	return m != 0 ? (unsigned)__builtin_ctz(m) : 0;
}

#endif
