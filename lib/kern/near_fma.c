/*
 * near_fma.c - the IVF list filter's one-row products in bf16 on a CPU
 * without AVX512_BF16 (AVX2 and FMA).
 *
 * The layout and the rounding are near_bf16.c's: a row is k2 =
 * ceil(dim / 2) words, each a pair of bf16; the centroids come in blocks
 * of 16 lists, k2 vectors of 16 words.  Without vdpbf16ps a pair is
 * widened here: a bf16 is the high half of a float, so a word shifted
 * left by 16 is the pair's first value and the word with its low half
 * cleared the second.  A product of two bf16 is exact in float and each
 * FMA rounds once, so the sum is within the bound ivf.c takes for
 * vdpbf16ps (bf16_bound: any order, a faithful rounding of each add); and
 * nothing is flushed, which only makes it closer.  Half the bytes of the
 * f32 centroids, as with vdpbf16ps: a single query's lists at 10M rows
 * are 3162 centroids of 768, 4.9 MB in bf16.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "internal.h"

/* x rounded to bf16 as near_bf16.c rounds it (its high half as a word). */
static uint32_t
bf16_bits(float x)
{
	uint32_t u, a;

	memcpy(&u, &x, 4);
	a = u & 0x7fffffffu;
	if (a > 0x7f800000u)		/* NaN: kept, quiet */
		return (u | 0x400000u) & 0xffff0000u;
	if ((u & 0x7f800000u) == 0)	/* zero or below 2^-126: signed 0 */
		return u & 0x80000000u;
	/* To nearest, ties to even; past the largest, infinity. */
	return (u + 0x7fffu + (u >> 16 & 1)) & 0xffff0000u;
}

void
tq_bf16_row_avx2(const float *x, uint32_t dim, uint32_t *out, double *rn,
    double *dn)
{
	double r2 = 0.0, d2 = 0.0;
	uint32_t k2 = (dim + 1) / 2;

	memset(out, 0, (size_t)k2 * sizeof(*out));
	for (uint32_t d = 0; d < dim; d++) {
		uint32_t b = bf16_bits(x[d]);
		float bf, e;

		memcpy(&bf, &b, 4);
		/* x - bf16(x) is exact in float: they share 16 bits. */
		e = x[d] - bf;
		r2 += (double)bf * (double)bf;
		d2 += (double)e * (double)e;
		out[d / 2] |= d % 2 ? b : b >> 16;
	}
	*rn = sqrt(r2);
	*dn = sqrt(d2);
}

/*
 * Four blocks (64 lists) at a time, eight lists a register: per pair,
 * eight loads of 32 bytes, each widened to its two floats, and sixteen
 * FMAs into eight chains (each takes the pair's two products in turn),
 * the accumulators named so that they stay in registers.
 */
#define GEMV_STEP(a, off) do {						\
	__m256i w = _mm256_load_si256((const void *)(p + (off)));	\
	a = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(			\
	    _mm256_slli_epi32(w, 16)), a);				\
	a = _mm256_fmadd_ps(x1, _mm256_castsi256_ps(			\
	    _mm256_and_si256(w, hi)), a);				\
} while (0)

void
tq_bf16_gemv_avx2(const uint32_t *x, const void *cent, uint32_t nl,
    uint32_t k2, float *s)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	const size_t bs = (size_t)k2 * 16;	/* words a block */

	for (uint32_t l0 = 0; l0 < nl; l0 += TQ_BF16_LISTS) {
		const uint32_t *cp = (const uint32_t *)cent +
		    (size_t)(l0 / 16) * bs;
		__m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m256 a4 = a0, a5 = a0, a6 = a0, a7 = a0;

		for (uint32_t k = 0; k < k2; k++) {
			const uint32_t *p = cp + (size_t)k * 16;
			__m256 x0 = _mm256_castsi256_ps(_mm256_set1_epi32(
			    (int)(x[k] << 16)));
			__m256 x1 = _mm256_castsi256_ps(_mm256_set1_epi32(
			    (int)(x[k] & 0xffff0000u)));

			/* Block b's lists 0-7 and 8-15, b = 0 .. 3. */
			GEMV_STEP(a0, 0);
			GEMV_STEP(a1, 8);
			GEMV_STEP(a2, bs);
			GEMV_STEP(a3, bs + 8);
			GEMV_STEP(a4, 2 * bs);
			GEMV_STEP(a5, 2 * bs + 8);
			GEMV_STEP(a6, 3 * bs);
			GEMV_STEP(a7, 3 * bs + 8);
		}
		_mm256_storeu_ps(s + l0, a0);
		_mm256_storeu_ps(s + l0 + 8, a1);
		_mm256_storeu_ps(s + l0 + 16, a2);
		_mm256_storeu_ps(s + l0 + 24, a3);
		_mm256_storeu_ps(s + l0 + 32, a4);
		_mm256_storeu_ps(s + l0 + 40, a5);
		_mm256_storeu_ps(s + l0 + 48, a6);
		_mm256_storeu_ps(s + l0 + 56, a7);
	}
}

/*
 * One row against nl rows of dim bf16 one after another (IVFC's offsets
 * where the file maps them), as near_bf16.c's tq_bf16_gemv_rows_avx512:
 * eight lists at a time from two bases a stride apart, one accumulator
 * each, sixteen values (32 bytes) a step, widened as the blocked gemv
 * widens a pair; the eight are folded into one vector by horizontal adds,
 * and the row's last dim % 16 values are added one by one.  The last
 * nl % 8 lists go one at a time.
 */
#define RACC(i) __m256 a##i = _mm256_setzero_ps()
/*
 * List 4 g + r of the group, r strides past base g: sixteen values, the
 * pairs' first ones (a word shifted left by 16) and second ones (its low
 * half cleared), as near_fma.c's blocked gemv widens them.
 */
#define RSTEP(i, g, r) do {						\
	__m256i w = _mm256_loadu_si256((const void *)(b##g + (r) * st)); \
	a##i = _mm256_fmadd_ps(xe, _mm256_castsi256_ps(			\
	    _mm256_slli_epi32(w, 16)), a##i);				\
	a##i = _mm256_fmadd_ps(xo, _mm256_castsi256_ps(			\
	    _mm256_and_si256(w, hi)), a##i);				\
} while (0)

/* The row's sixteen values from j: the pairs' first ones and second ones. */
#define X_PAIRS(j)							\
	__m256i xw = _mm256_loadu_si256((const void *)(xh + (j)));	\
	__m256 xe = _mm256_castsi256_ps(_mm256_slli_epi32(xw, 16));	\
	__m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xw, hi))

void
tq_bf16_gemv_rows_avx2(const uint32_t *x, const uint16_t *c, uint32_t nl,
    uint32_t dim, float *s)
{
	const __m256i hi = _mm256_set1_epi32((int)0xffff0000u);
	const uint16_t *xh = (const uint16_t *)x;
	const size_t st = dim;
	uint32_t d16 = dim / 16 * 16, l0 = 0;

	for (; l0 + 8 <= nl; l0 += 8) {
		const uint16_t *b0 = c + (size_t)l0 * dim, *b1 = b0 + 4 * st;
		RACC(0); RACC(1); RACC(2); RACC(3);
		RACC(4); RACC(5); RACC(6); RACC(7);
		__m256 u0, u1;
		float out[8];

		for (uint32_t j = 0; j < d16; j += 16) {
			X_PAIRS(j);

			RSTEP(0, 0, 0); RSTEP(1, 0, 1); RSTEP(2, 0, 2);
			RSTEP(3, 0, 3); RSTEP(4, 1, 0); RSTEP(5, 1, 1);
			RSTEP(6, 1, 2); RSTEP(7, 1, 3);
			b0 += 16;
			b1 += 16;
		}
		/* Lanes: lists 0-3 then 0-3 again (halves), 4-7 likewise. */
		u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1),
		    _mm256_hadd_ps(a2, a3));
		u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5),
		    _mm256_hadd_ps(a6, a7));
		_mm256_storeu_ps(out, _mm256_add_ps(
		    _mm256_permute2f128_ps(u0, u1, 0x20),
		    _mm256_permute2f128_ps(u0, u1, 0x31)));
		for (uint32_t i = 0; i < 8; i++) {
			const uint16_t *q = c + (size_t)(l0 + i) * dim;
			float t = out[i];

			for (uint32_t j = d16; j < dim; j++)
				t = fmaf(tq_bf16_to_f32(xh[j]), tq_bf16_to_f32(q[j]), t);
			s[l0 + i] = t;
		}
	}
	/* The last nl % 8 lists one at a time, widened the same way. */
	for (; l0 < nl; l0++) {
		const uint16_t *b0 = c + (size_t)l0 * dim;
		RACC(0);
		float out[8], t = 0.0f;

		for (uint32_t j = 0; j < d16; j += 16) {
			X_PAIRS(j);

			RSTEP(0, 0, 0);
			b0 += 16;
		}
		_mm256_storeu_ps(out, a0);
		for (int i = 0; i < 8; i++)
			t += out[i];
		b0 = c + (size_t)l0 * dim;
		for (uint32_t j = d16; j < dim; j++)
			t = fmaf(tq_bf16_to_f32(xh[j]), tq_bf16_to_f32(b0[j]), t);
		s[l0] = t;
	}
}
