#ifndef SLOT_CMP_H
#define SLOT_CMP_H

#include <stddef.h>
#include <stdint.h>

/* Sorted arrays of unsigned integers: qsort and bsearch comparators
 * (ascending), and a binary search. */

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

/* The first position in [lo, hi) of the ascending v whose value is not
 * below x; hi if there is none. */
static inline size_t
lower_u32(const uint32_t *v, size_t lo, size_t hi, uint64_t x)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

#endif
