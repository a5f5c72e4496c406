/*
 * near_bf16.c - the products of the IVF list filter in bf16 (AVX512_BF16).
 *
 * Choosing a row's lists is a filter followed by a re-check: the filter's
 * scores only rule lists out, within a proven bound of their exact value,
 * and the lists left are scored again by the fixed-order dot products
 * (ivf.c).  Rounding the rows and the centroids to bf16 widens the bound
 * (2^-7 of |x| |c| instead of d 2^-24) but doubles the multiply-adds an
 * instruction does: vdpbf16ps adds two bf16 products to each of 16 float
 * lanes.  Whatever the filter's precision, the lists chosen are those of
 * the fixed-order products: a wider bound only leaves more to re-check.
 *
 * Layout (tq_bf16_row_avx512 here, tq_bf16_place in ivf.c): a row is
 * k2 = ceil(dim / 2) pairs of bf16, one 32-bit word a pair; the
 * centroids come in blocks of 16 lists, each block k2 vectors of 16
 * words: word j of vector k holds the pair k of list j.
 * One vdpbf16ps of a broadcast pair of a row and vector k of a block adds
 * that pair's products to the block's 16 scores.
 *
 * A tile is TQ_BF16_ROWS (6) rows times TQ_BF16_LISTS (64) lists, 24
 * accumulators: per pair, four loads of centroid vectors and six
 * broadcasts serve 24 vdpbf16ps.  The caller pads rows and lists.
 *
 * Rows and centroids are rounded here too (tq_bf16_row_avx512), in
 * integer lanes so that the residuals the bound needs are those of the
 * values the products read: to nearest even; NaN stays NaN; values below
 * 2^-126 become zero, as vdpbf16ps would read them.
 */
#include <immintrin.h>
#include <math.h>

#include "internal.h"

#define ACC4(r)								\
	__m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = a##r##0,	\
	    a##r##2 = a##r##0, a##r##3 = a##r##0
#define STEP(r) do {							\
	__m512bh xr = (__m512bh)_mm512_set1_epi32((int)x[(r) * ldx + k]); \
	a##r##0 = _mm512_dpbf16_ps(a##r##0, xr, c0);			\
	a##r##1 = _mm512_dpbf16_ps(a##r##1, xr, c1);			\
	a##r##2 = _mm512_dpbf16_ps(a##r##2, xr, c2);			\
	a##r##3 = _mm512_dpbf16_ps(a##r##3, xr, c3);			\
} while (0)
#define STORE(r) do {							\
	_mm512_storeu_ps(s + (r) * lds, a##r##0);			\
	_mm512_storeu_ps(s + (r) * lds + 16, a##r##1);			\
	_mm512_storeu_ps(s + (r) * lds + 32, a##r##2);			\
	_mm512_storeu_ps(s + (r) * lds + 48, a##r##3);			\
} while (0)

/* Six rows of x (ldx words apart) by the four blocks from c. */
static void
tile(const uint32_t *x, size_t ldx, const __m512i *c, uint32_t k2, float *s,
    size_t lds)
{
	ACC4(0);
	ACC4(1);
	ACC4(2);
	ACC4(3);
	ACC4(4);
	ACC4(5);

	for (uint32_t k = 0; k < k2; k++) {
		__m512bh c0 = (__m512bh)_mm512_load_si512(c + k);
		__m512bh c1 = (__m512bh)_mm512_load_si512(c + k2 + k);
		__m512bh c2 = (__m512bh)_mm512_load_si512(c + 2 * (size_t)k2 + k);
		__m512bh c3 = (__m512bh)_mm512_load_si512(c + 3 * (size_t)k2 + k);

		STEP(0);
		STEP(1);
		STEP(2);
		STEP(3);
		STEP(4);
		STEP(5);
	}
	STORE(0);
	STORE(1);
	STORE(2);
	STORE(3);
	STORE(4);
	STORE(5);
}

void
tq_bf16_row_avx512(const float *x, uint32_t dim, uint32_t *out, double *rn,
    double *dn)
{
	const __m512i odd = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49,
	    47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17,
	    15, 13, 11, 9, 7, 5, 3, 1);
	const __m512i abs = _mm512_set1_epi32(0x7fffffff);
	const __m512i inf = _mm512_set1_epi32(0x7f800000);
	const __m512i top = _mm512_set1_epi32((int)0xffff0000u);
	const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
	__m512d r2 = _mm512_setzero_pd(), d2 = _mm512_setzero_pd();
	uint32_t k2 = (dim + 1) / 2;

	for (uint32_t d = 0; d < dim; d += 32) {
		__m512i h[2];

		for (int j = 0; j < 2; j++) {
			uint32_t at = d + 16 * (uint32_t)j, left = at < dim ?
			    dim - at : 0;
			__mmask16 m = left >= 16 ? 0xffff :
			    (__mmask16)((1u << left) - 1);
			__m512i u = _mm512_maskz_loadu_epi32(m, x + at);
			__m512i a = _mm512_and_si512(u, abs), r;
			__m512 b, e;

			r = _mm512_add_epi32(u, _mm512_add_epi32(
			    _mm512_set1_epi32(0x7fff), _mm512_and_si512(
			    _mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))));
			r = _mm512_and_si512(r, top);
			r = _mm512_mask_mov_epi32(r, _mm512_cmpgt_epu32_mask(a,
			    inf), _mm512_and_si512(_mm512_or_si512(u,
			    _mm512_set1_epi32(0x400000)), top));
			r = _mm512_mask_mov_epi32(r, _mm512_testn_epi32_mask(u,
			    inf), _mm512_and_si512(u, sign));
			h[j] = r;
			/* x - bf16(x) is exact in float: they share 16 bits. */
			b = _mm512_castsi512_ps(r);
			e = _mm512_sub_ps(_mm512_castsi512_ps(u), b);
			for (int k = 0; k < 2; k++) {
				__m512d bd = _mm512_cvtps_pd(k == 0 ?
				    _mm512_castps512_ps256(b) :
				    _mm256_castpd_ps(_mm512_extractf64x4_pd(
				    _mm512_castps_pd(b), 1)));
				__m512d ed = _mm512_cvtps_pd(k == 0 ?
				    _mm512_castps512_ps256(e) :
				    _mm256_castpd_ps(_mm512_extractf64x4_pd(
				    _mm512_castps_pd(e), 1)));

				r2 = _mm512_add_pd(r2, _mm512_mul_pd(bd, bd));
				d2 = _mm512_add_pd(d2, _mm512_mul_pd(ed, ed));
			}
		}
		{
			uint32_t w = d / 2, left = k2 - w;
			__mmask16 m = left >= 16 ? 0xffff :
			    (__mmask16)((1u << left) - 1);

			/* The high halves, pairs in order: one word a pair. */
			_mm512_mask_storeu_epi32(out + w, m,
			    _mm512_permutex2var_epi16(h[0], odd, h[1]));
		}
	}
	*rn = sqrt(_mm512_reduce_add_pd(r2));
	*dn = sqrt(_mm512_reduce_add_pd(d2));
}

void
tq_bf16_gemm_avx512(const uint32_t *x, size_t m, const void *cent,
    uint32_t nl, uint32_t k2, float *s, size_t lds)
{
	const __m512i *c = cent;

	/*
	 * Lists outside, rows inside: a panel of 64 lists (k2 * 256 bytes,
	 * 96 KiB at d = 768) stays in L2 while every row passes it.
	 */
	for (uint32_t l0 = 0; l0 < nl; l0 += TQ_BF16_LISTS) {
		const __m512i *cp = c + (size_t)(l0 / 16) * k2;

		for (size_t i = 0; i < m; i += TQ_BF16_ROWS)
			tile(x + i * k2, k2, cp, k2, s + i * lds + l0, lds);
	}
}

/*
 * One row (a single query's lists): no tile to share the centroid loads
 * with, so the bound is the bytes read, half those of the floats.  Four
 * blocks (64 lists) at a time, pairs k and k + 1 in two sets of
 * accumulators so that eight chains of vdpbf16ps overlap; the two sets
 * are added at the end, one more order of the sum that the bound covers.
 * The accumulators are named, not an array, so that they stay in
 * registers (an array went through the stack on every step).
 */
#define GEMV_STEP(a, b, v) do {						\
	a = _mm512_dpbf16_ps(a, x0, (__m512bh)_mm512_load_si512(v));	\
	b = _mm512_dpbf16_ps(b, x1, (__m512bh)_mm512_load_si512((v) + 1)); \
} while (0)

void
tq_bf16_gemv_avx512(const uint32_t *x, const void *cent, uint32_t nl,
    uint32_t k2, float *s)
{
	const __m512i *c = cent;

	for (uint32_t l0 = 0; l0 < nl; l0 += TQ_BF16_LISTS) {
		const __m512i *c0 = c + (size_t)(l0 / 16) * k2, *c1 = c0 + k2;
		const __m512i *c2 = c1 + k2, *c3 = c2 + k2;
		__m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
		__m512 b0 = a0, b1 = a0, b2 = a0, b3 = a0;
		uint32_t k = 0;

		for (; k + 2 <= k2; k += 2) {
			__m512bh x0 = (__m512bh)_mm512_set1_epi32((int)x[k]);
			__m512bh x1 = (__m512bh)_mm512_set1_epi32((int)x[k + 1]);

			GEMV_STEP(a0, b0, c0 + k);
			GEMV_STEP(a1, b1, c1 + k);
			GEMV_STEP(a2, b2, c2 + k);
			GEMV_STEP(a3, b3, c3 + k);
		}
		if (k < k2) {
			__m512bh x0 = (__m512bh)_mm512_set1_epi32((int)x[k]);

			a0 = _mm512_dpbf16_ps(a0, x0,
			    (__m512bh)_mm512_load_si512(c0 + k));
			a1 = _mm512_dpbf16_ps(a1, x0,
			    (__m512bh)_mm512_load_si512(c1 + k));
			a2 = _mm512_dpbf16_ps(a2, x0,
			    (__m512bh)_mm512_load_si512(c2 + k));
			a3 = _mm512_dpbf16_ps(a3, x0,
			    (__m512bh)_mm512_load_si512(c3 + k));
		}
		_mm512_storeu_ps(s + l0, _mm512_add_ps(a0, b0));
		_mm512_storeu_ps(s + l0 + 16, _mm512_add_ps(a1, b1));
		_mm512_storeu_ps(s + l0 + 32, _mm512_add_ps(a2, b2));
		_mm512_storeu_ps(s + l0 + 48, _mm512_add_ps(a3, b3));
	}
}

/*
 * One row against nl rows of dim bf16 laid out one after another (IVFC's
 * offsets where the file maps them: no copy, no alignment).  Sixteen
 * lists at a time, one accumulator each, 32 values (64 bytes) a step,
 * the row's last step masked; then the sixteen are folded into one
 * vector by four rounds of pairs (pair_f32x16).  The rows come from four
 * bases a stride apart, so that each load is one address form (base +
 * index * scale) without arithmetic of its own.  The last nl % 16 lists
 * are summed one at a time.
 */
static inline __m512
pair_f32x16(__m512 a, __m512 b)
{
	const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16,
	    14, 12, 10, 8, 6, 4, 2, 0);
	const __m512i od = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17,
	    15, 13, 11, 9, 7, 5, 3, 1);

	/* Lanes 0-7: a's pairs summed; 8-15: b's. */
	return _mm512_add_ps(_mm512_permutex2var_ps(a, ev, b),
	    _mm512_permutex2var_ps(a, od, b));
}

/* The masks of the step at j of a row of dim: values, and x's words. */
#define ROW_MASKS(j)							\
	uint32_t left = dim - (j);					\
	__mmask32 mc = left >= 32 ? 0xffffffffu :			\
	    (__mmask32)((1u << left) - 1);				\
	__mmask16 mx = left >= 32 ? 0xffff :				\
	    (__mmask16)((1u << (left + 1) / 2) - 1);			\
	__m512bh xv = (__m512bh)_mm512_maskz_loadu_epi32(mx, x + (j) / 2)

#define RACC(i) __m512 a##i = _mm512_setzero_ps()
/* List 4 g + r of the group: r strides past base g. */
#define RSTEP(i, g, r) a##i = _mm512_dpbf16_ps(a##i, xv,		\
	(__m512bh)_mm512_maskz_loadu_epi16(mc, b##g + (r) * st))

void
tq_bf16_gemv_rows_avx512(const uint32_t *x, const uint16_t *c, uint32_t nl,
    uint32_t dim, float *s)
{
	const size_t st = dim;
	uint32_t l0 = 0;

	for (; l0 + 16 <= nl; l0 += 16) {
		const uint16_t *b0 = c + (size_t)l0 * dim, *b1 = b0 + 4 * st;
		const uint16_t *b2 = b1 + 4 * st, *b3 = b2 + 4 * st;
		RACC(0); RACC(1); RACC(2); RACC(3); RACC(4); RACC(5);
		RACC(6); RACC(7); RACC(8); RACC(9); RACC(10); RACC(11);
		RACC(12); RACC(13); RACC(14); RACC(15);

		for (uint32_t j = 0; j < dim; j += 32) {
			ROW_MASKS(j);

			RSTEP(0, 0, 0); RSTEP(1, 0, 1); RSTEP(2, 0, 2);
			RSTEP(3, 0, 3); RSTEP(4, 1, 0); RSTEP(5, 1, 1);
			RSTEP(6, 1, 2); RSTEP(7, 1, 3); RSTEP(8, 2, 0);
			RSTEP(9, 2, 1); RSTEP(10, 2, 2); RSTEP(11, 2, 3);
			RSTEP(12, 3, 0); RSTEP(13, 3, 1); RSTEP(14, 3, 2);
			RSTEP(15, 3, 3);
			b0 += 32;
			b1 += 32;
			b2 += 32;
			b3 += 32;
		}
		_mm512_storeu_ps(s + l0, pair_f32x16(
		    pair_f32x16(pair_f32x16(pair_f32x16(a0, a1),
		    pair_f32x16(a2, a3)), pair_f32x16(pair_f32x16(a4, a5),
		    pair_f32x16(a6, a7))),
		    pair_f32x16(pair_f32x16(pair_f32x16(a8, a9),
		    pair_f32x16(a10, a11)), pair_f32x16(pair_f32x16(a12, a13),
		    pair_f32x16(a14, a15)))));
	}
	for (; l0 < nl; l0++) {
		const uint16_t *b0 = c + (size_t)l0 * dim;
		RACC(0);

		for (uint32_t j = 0; j < dim; j += 32) {
			ROW_MASKS(j);

			RSTEP(0, 0, 0);
			b0 += 32;
		}
		s[l0] = _mm512_reduce_add_ps(a0);
	}
}
