#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slot/addr.h"
#include "slot/conf.h"
#include "slot/confkeys.h"
#include "slot/ident.h"
#include "slot/log.h"

/* A firewall mark, hex (0x...) or decimal. */
static int
conf_mark(const char *s, uint32_t *out, char *sub, size_t sublen)
{
	unsigned long long v;
	char *end;

	/* strtoull would take blanks and a sign. */
	errno = 0;
	if (!isdigit((unsigned char)*s) ||
	    (v = strtoull(s, &end, 0), *end != '\0') || errno == ERANGE ||
	    v > UINT32_MAX) {
		snprintf(sub, sublen, "expected a 32-bit number, hex (0x...) or decimal");
		return -1;
	}
	*out = (uint32_t)v;
	return 0;
}

/* Non-zero, and its bits in one run: shifted down, it is 2^n - 1. */
static bool
mask_contiguous(uint32_t m)
{
	uint32_t low = m >> conf_mask_shift(m);

	return m != 0 && (low & (low + 1)) == 0;
}

static void
store_uint(void *dst, size_t size, uint64_t v)
{
	switch (size) {
	case 2:
		*(uint16_t *)dst = (uint16_t)v;
		break;
	case 4:
		*(uint32_t *)dst = (uint32_t)v;
		break;
	default:
		*(uint64_t *)dst = v;
		break;
	}
}

/* A duration within the key's bounds (ms); CK_MS_OFF also takes "off" and 0. */
static int
duration(const struct conf_key *k, const char *value, uint64_t *v, char *sub, size_t sublen)
{
	bool off = k->kind == CK_MS_OFF;

	if (off && strcmp(value, "off") == 0)
		value = "0";
	if (conf_duration_ms(value, v, sub, sublen) == -1)
		return -1;
	if (!(off && *v == 0) && (*v < k->min || *v > k->max)) {
		snprintf(sub, sublen, "must be %sbetween %llu ms and %llu ms",
		    off ? "0 (off) or " : "", (unsigned long long)k->min,
		    (unsigned long long)k->max);
		return -1;
	}
	return 0;
}

/* The list parsers name the item they refused; say what a list holds. */
static int
list(const char *item_is, int rc, char *sub, size_t sublen)
{
	char item[64];

	if (rc == 0)
		return 0;
	/* The item is the value's own: cut, if long, to leave room for why. */
	snprintf(item, sizeof(item), "%s", sub);
	if (snprintf(sub, sublen, "%s: expected %s, separated by commas", item, item_is) < 0)
		sub[0] = '\0';
	return -1;
}

int
conf_key_parse(const struct conf_key *k, void *obj, const char *value, char *sub,
    size_t sublen)
{
	void *dst = (char *)obj + k->off;
	uint64_t v;
	uint32_t m;

	switch (k->kind) {
	case CK_STR:
		return conf_string(value, dst, k->size, sub, sublen);
	case CK_LEVEL:
		if (log_level_parse(value, dst) == -1) {
			snprintf(sub, sublen, "expected error, warn, info or debug");
			return -1;
		}
		return 0;
	case CK_AUTHMODE:
		if ((*(int *)dst = ident_mode_parse(value)) == -1) {
			snprintf(sub, sublen, "expected identity or shared");
			return -1;
		}
		return 0;
	case CK_UINT:
		if (conf_uint(value, k->min, k->max, &v, sub, sublen) == -1)
			return -1;
		store_uint(dst, k->size, v);
		return 0;
	case CK_MS:
	case CK_US:
	case CK_MS_OFF:
		if (duration(k, value, &v, sub, sublen) == -1)
			return -1;
		*(uint64_t *)dst = k->kind == CK_US ? v * 1000 : v;
		return 0;
	case CK_SIZE_OFF:
		if (strcmp(value, "off") == 0 || strcmp(value, "0") == 0) {
			*(uint64_t *)dst = 0;
			return 0;
		}
		if (conf_size(value, k->min, k->max, dst, sub, sublen) == -1) {
			size_t n = strlen(sub);
			snprintf(sub + n, sublen - n, "; or off");
			return -1;
		}
		return 0;
	case CK_SIZE:
		return conf_size(value, k->min, k->max, dst, sub, sublen);
	case CK_DOUBLE:
		return conf_double(value, k->dmin, k->dmax, dst, sub, sublen);
	case CK_BOOL:
		return conf_bool(value, dst, sub, sublen);
	case CK_EP_OPT:
		if (value[0] == '\0') {
			memset(dst, 0, sizeof(struct endpoint));
			return 0;
		}
		/* FALLTHROUGH */
	case CK_EP:
		if (ep_parse(value, 0, dst) == -1) {
			snprintf(sub, sublen, k->kind == CK_EP_OPT ?
			    "expected address:port, or nothing" : "expected address:port");
			return -1;
		}
		return 0;
	case CK_PORTS:
		return list("ports (1 to 65535), ranges LOW-HIGH or all",
		    portset_parse(value, dst, sub, sublen), sub, sublen);
	case CK_CIDRS: {
		/* "" is an empty list: "exclude =" excludes nothing. */
		struct cidr_list l = { 0 };
		if (list("addresses or networks ADDRESS/PREFIX",
		    cidr_list_parse(value, &l, sub, sublen), sub, sublen) == -1)
			return -1;
		cidr_list_free(dst);
		*(struct cidr_list *)dst = l;
		return 0;
	}
	case CK_URLS:
		return conf_urls(value, dst, sub, sublen);
	case CK_BIT:
		if (conf_mark(value, &m, sub, sublen) == -1)
			return -1;
		if (m == 0 || (m & (m - 1)) != 0) {
			snprintf(sub, sublen, "must be exactly one bit");
			return -1;
		}
		*(uint32_t *)dst = m;
		return 0;
	case CK_MASK:
		if (conf_mark(value, &m, sub, sublen) == -1)
			return -1;
		if (!mask_contiguous(m)) {
			snprintf(sub, sublen, "must be non-zero contiguous bits");
			return -1;
		}
		*(uint32_t *)dst = m;
		return 0;
	case CK_FMODE: {
		char *end;
		errno = 0;
		unsigned long fm = strtoul(value, &end, 8);
		if (value[0] < '0' || value[0] > '7' || *end != '\0' || errno || fm > 0777) {
			snprintf(sub, sublen, "expected an octal file mode, 0600 to 0777");
			return -1;
		}
		*(uint32_t *)dst = (uint32_t)fm;
		return 0;
	}
	case CK_CUSTOM:
		break;
	}
	snprintf(sub, sublen, "no parser for this key");
	return -1;
}

int
conf_keys_set(const struct conf_key *keys, size_t n, conf_custom_fn custom, void *obj,
    const char *section, const char *name, const char *value, char *err, size_t errlen)
{
	const struct conf_key *k = NULL;
	bool known_section = false;
	char sub[200] = "";
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (strcmp(keys[i].section, section) != 0)
			continue;
		known_section = true;
		if (strcmp(keys[i].name, name) == 0)
			k = &keys[i];
	}
	if (!known_section) {
		snprintf(err, errlen, "unknown section [%s]", section);
		return -1;
	}
	if (k == NULL) {
		snprintf(err, errlen, "unknown key '%s' in section [%s]", name, section);
		return -1;
	}
	if (k->kind == CK_CUSTOM)
		rc = custom ? custom(obj, k, value, sub, sizeof(sub)) : -1;
	else
		rc = conf_key_parse(k, obj, value, sub, sizeof(sub));
	if (rc == -1)
		snprintf(err, errlen, "[%s] %s = %s: %s", section, name, value, sub);
	return rc;
}
