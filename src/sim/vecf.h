#ifndef SLOT_SIM_VECF_H
#define SLOT_SIM_VECF_H

/*
 * Four floats at a time for slot-sim's O(N^3) loops. gcc -O2 does not
 * vectorise float min/max loops by itself (NaN and signed-zero rules), and
 * slot-sim's matrices hold no NaN (missing is +inf), so the loops say what
 * they mean: SSE on x86, NEON on arm64, GCC vector extensions elsewhere.
 * memcpy keeps loads and stores legal at any alignment and compiles to
 * plain unaligned moves.
 */

#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
typedef __m128 vecf;
typedef __m128 vecm;		/* a lane mask: all ones or all zeros */
#elif defined(__ARM_NEON)
#include <arm_neon.h>
typedef float32x4_t vecf;
typedef uint32x4_t vecm;
#else
typedef float vecf __attribute__((vector_size(16)));
typedef int32_t vecm __attribute__((vector_size(16)));
#endif

#define VECF_N 4

static inline vecf
vecf_load(const float *p)
{
	vecf v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void
vecf_store(float *p, vecf v)
{
	memcpy(p, &v, sizeof(v));
}

/* The one of three spellings of an operation for the target: SSE, NEON or
 * GCC's vector extensions. The others are dropped before they compile. */
#if defined(__SSE2__)
#define VECF_PICK(sse, neon, gcc) (sse)
#elif defined(__ARM_NEON)
#define VECF_PICK(sse, neon, gcc) (neon)
#else
#define VECF_PICK(sse, neon, gcc) (gcc)
#endif

static inline vecf
vecf_set1(float x)
{
	return VECF_PICK(_mm_set1_ps(x), vdupq_n_f32(x), ((vecf){ x, x, x, x }));
}

/* Lane i of the result is a's where m is set, else b's. */
static inline vecf
vecf_blend(vecm m, vecf a, vecf b)
{
	return VECF_PICK(_mm_or_ps(_mm_and_ps(m, a), _mm_andnot_ps(m, b)), vbslq_f32(m, a, b),
	    (vecf)((m & (vecm)a) | (~m & (vecm)b)));
}

static inline vecf
vecf_min(vecf a, vecf b)
{
	return VECF_PICK(_mm_min_ps(a, b), vminq_f32(a, b), vecf_blend(a < b, a, b));
}

static inline vecf
vecf_max(vecf a, vecf b)
{
	return VECF_PICK(_mm_max_ps(a, b), vmaxq_f32(a, b), vecf_blend(a > b, a, b));
}

static inline vecf
vecf_add(vecf a, vecf b)
{
	return VECF_PICK(_mm_add_ps(a, b), vaddq_f32(a, b), a + b);
}

static inline vecm
vecf_lt(vecf a, vecf b)
{
	return VECF_PICK(_mm_cmplt_ps(a, b), vcltq_f32(a, b), a < b);
}

static inline vecm
vecf_le(vecf a, vecf b)
{
	return VECF_PICK(_mm_cmple_ps(a, b), vcleq_f32(a, b), a <= b);
}

static inline vecm
vecf_eq(vecf a, vecf b)
{
	return VECF_PICK(_mm_cmpeq_ps(a, b), vceqq_f32(a, b), a == b);
}

static inline vecm
vecm_or(vecm a, vecm b)
{
	return VECF_PICK(_mm_or_ps(a, b), vorrq_u32(a, b), a | b);
}

static inline vecm
vecm_and(vecm a, vecm b)
{
	return VECF_PICK(_mm_and_ps(a, b), vandq_u32(a, b), a & b);
}

static inline vecm
vecm_andnot(vecm a, vecm b)	/* b and not a */
{
	return VECF_PICK(_mm_andnot_ps(a, b), vbicq_u32(b, a), ~a & b);
}

/* Bit i set when lane i of m is. */
static inline unsigned
vecm_bits(vecm m)
{
#if defined(__SSE2__)
	return (unsigned)_mm_movemask_ps(m);
#else
	uint32_t l[VECF_N];
	unsigned bits = 0;

	memcpy(l, &m, sizeof(l));
	for (unsigned i = 0; i < VECF_N; i++)
		bits |= (l[i] >> 31) << i;
	return bits;
#endif
}

/* Lanes set in a vecm_bits result; a table, since without -mpopcnt
 * __builtin_popcount is a library call. */
static inline unsigned
vecm_count(unsigned bits)
{
	static const unsigned char n[16] = {
		0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
	};

	return n[bits & 15];
}

#endif
