#ifndef SLOT_CMP_H
#define SLOT_CMP_H

#include <stdint.h>

/* qsort and bsearch comparators of unsigned integers, ascending. */

static inline int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static inline int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

#endif
