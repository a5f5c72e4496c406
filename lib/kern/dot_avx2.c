/*
 * dot_avx2.c - fixed-order dot products for AVX2 (built with -mavx2
 * -mfma; FMA is never used: the order of dot_scalar.c needs separate
 * rounding of the multiply and the add, and ISO C mode keeps the compiler
 * from fusing them).  Two registers hold lanes 0-7 and 8-15; their sum
 * is t, the two halves of t summed give u.
 *
 * Two input rows times two outputs per step reuse each load twice.
 *
 * Also the rows times block-diagonal matrices (tq_rowa_fn), and one
 * block for many rows (tq_rowa_rows_fn), whose matrix then stays in L1.
 *
 * Also the f16 rows (built with -mf16c as well: vcvtph2ps is exact),
 * and the refinement's dot products with 4-bit rows (tq_dotq4_fn).
 */
#include <immintrin.h>

#include "internal.h"

static inline float
reduce(__m256 lo, __m256 hi)
{
	__m256 t = _mm256_add_ps(lo, hi);
	__m128 u = _mm_add_ps(_mm256_castps256_ps128(t),
	    _mm256_extractf128_ps(t, 1));
	float v[4];

	_mm_storeu_ps(v, u);
	return (v[0] + v[1]) + (v[2] + v[3]);
}

#define MADD(acc, p, q) acc = _mm256_add_ps(acc, _mm256_mul_ps(p, q))

void
tq_dot_avx2(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	uint32_t k16 = k - k % 16, o, j;
	size_t i = 0;

	for (; i + 2 <= n; i += 2) {
		const float *x0 = x + i * ldx, *x1 = x0 + ldx;

		for (o = 0; o + 2 <= m; o += 2) {
			const float *a0 = a + (size_t)o * k, *a1 = a0 + k;
			__m256 s00l = _mm256_setzero_ps(), s00h = s00l;
			__m256 s01l = s00l, s01h = s00l, s10l = s00l;
			__m256 s10h = s00l, s11l = s00l, s11h = s00l;

			for (j = 0; j < k16; j += 16) {
				__m256 al = _mm256_loadu_ps(a0 + j);
				__m256 ah = _mm256_loadu_ps(a0 + j + 8);
				__m256 bl = _mm256_loadu_ps(a1 + j);
				__m256 bh = _mm256_loadu_ps(a1 + j + 8);
				__m256 vl = _mm256_loadu_ps(x0 + j);
				__m256 vh = _mm256_loadu_ps(x0 + j + 8);

				MADD(s00l, vl, al);
				MADD(s00h, vh, ah);
				MADD(s01l, vl, bl);
				MADD(s01h, vh, bh);
				vl = _mm256_loadu_ps(x1 + j);
				vh = _mm256_loadu_ps(x1 + j + 8);
				MADD(s10l, vl, al);
				MADD(s10h, vh, ah);
				MADD(s11l, vl, bl);
				MADD(s11h, vh, bh);
			}
			y[i * ldy + o] = tq_dot_tail(reduce(s00l, s00h), x0, a0,
			    k16, k);
			y[i * ldy + o + 1] = tq_dot_tail(reduce(s01l, s01h), x0,
			    a1, k16, k);
			y[(i + 1) * ldy + o] = tq_dot_tail(reduce(s10l, s10h),
			    x1, a0, k16, k);
			y[(i + 1) * ldy + o + 1] = tq_dot_tail(reduce(s11l,
			    s11h), x1, a1, k16, k);
		}
		if (o < m)
			tq_dot_portable(x0, ldx, 2, a + (size_t)o * k, m - o, k,
			    y + i * ldy + o, ldy);
	}
	for (; i < n; i++) {
		const float *x0 = x + i * ldx;

		for (o = 0; o + 4 <= m; o += 4) {
			const float *a0 = a + (size_t)o * k, *a1 = a0 + k;
			const float *a2 = a1 + k, *a3 = a2 + k;
			__m256 s0l = _mm256_setzero_ps(), s0h = s0l, s1l = s0l;
			__m256 s1h = s0l, s2l = s0l, s2h = s0l, s3l = s0l;
			__m256 s3h = s0l;

			for (j = 0; j < k16; j += 16) {
				__m256 vl = _mm256_loadu_ps(x0 + j);
				__m256 vh = _mm256_loadu_ps(x0 + j + 8);

				MADD(s0l, vl, _mm256_loadu_ps(a0 + j));
				MADD(s0h, vh, _mm256_loadu_ps(a0 + j + 8));
				MADD(s1l, vl, _mm256_loadu_ps(a1 + j));
				MADD(s1h, vh, _mm256_loadu_ps(a1 + j + 8));
				MADD(s2l, vl, _mm256_loadu_ps(a2 + j));
				MADD(s2h, vh, _mm256_loadu_ps(a2 + j + 8));
				MADD(s3l, vl, _mm256_loadu_ps(a3 + j));
				MADD(s3h, vh, _mm256_loadu_ps(a3 + j + 8));
			}
			y[i * ldy + o] = tq_dot_tail(reduce(s0l, s0h), x0, a0,
			    k16, k);
			y[i * ldy + o + 1] = tq_dot_tail(reduce(s1l, s1h), x0, a1,
			    k16, k);
			y[i * ldy + o + 2] = tq_dot_tail(reduce(s2l, s2h), x0, a2,
			    k16, k);
			y[i * ldy + o + 3] = tq_dot_tail(reduce(s3l, s3h), x0, a3,
			    k16, k);
		}
		if (o < m)
			tq_dot_portable(x0, ldx, 1, a + (size_t)o * k, m - o, k,
			    y + i * ldy + o, ldy);
	}
}

/*
 * Rows times block-diagonal matrices (tq_rowa_fn), as in dot_avx512.c:
 * g blocks side by side, nv registers of 8 columns each, so that eight
 * chains of adds are in flight; the last register of each block takes
 * the columns of tail (vmaskmov: masked lanes are neither read nor
 * written).
 */
static inline __attribute__((always_inline)) __m256
load_cols(const float *p, int full, __m256i tail)
{
	return full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail);
}

static inline __attribute__((always_inline)) void
rowa_group_strided(const float *y, size_t ys, const float *a, size_t as,
    uint32_t s, unsigned g, uint32_t j0, unsigned nv, int full,
    __m256i tail, float *x, size_t xs)
{
	__m256 acc[8];
	unsigned b, q;

#pragma GCC unroll 8
	for (q = 0; q < 8; q++)
		acc[q] = _mm256_setzero_ps();
	for (uint32_t o = 0; o < s; o++) {
#pragma GCC unroll 8
		for (b = 0; b < g; b++) {
			__m256 c = _mm256_set1_ps(y[b * ys + o]);
			const float *ao = a + b * as + (size_t)o * s + j0;

#pragma GCC unroll 8
			for (q = 0; q < nv; q++)
				MADD(acc[b * nv + q], c, load_cols(ao + 8 * q,
				    full || q + 1 < nv, tail));
		}
	}
#pragma GCC unroll 8
	for (b = 0; b < g; b++)
#pragma GCC unroll 8
		for (q = 0; q < nv; q++) {
			float *xq = x + b * xs + j0 + 8 * q;

			if (full || q + 1 < nv)
				_mm256_storeu_ps(xq, acc[b * nv + q]);
			else
				_mm256_maskstore_ps(xq, tail, acc[b * nv + q]);
		}
}

/* g blocks of one row, or (tq_rowa_rows_avx2) one block of g rows. */
static inline __attribute__((always_inline)) void
rowa_group(const float *y, const float *a, uint32_t s, unsigned g,
    uint32_t j0, unsigned nv, int full, __m256i tail, float *x)
{
	rowa_group_strided(y, s, a, (size_t)s * s, s, g, j0, nv, full, tail,
	    x, s);
}

/* Blocks 0 .. nb - 1 of s columns (nv registers), g at a time, then one. */
static inline __attribute__((always_inline)) void
rowa_blocks(const float *y, const float *a, uint32_t nb, uint32_t s,
    unsigned g, unsigned nv, __m256i tail, float *x)
{
	const size_t ss = (size_t)s * s;
	uint32_t b = 0;

	for (; b + g <= nb; b += g)
		rowa_group(y + b * s, a + b * ss, s, g, 0, nv, 0, tail,
		    x + b * s);
	for (; b < nb; b++)
		rowa_group(y + b * s, a + b * ss, s, 1, 0, nv, 0, tail,
		    x + b * s);
}

void
tq_rowa_avx2(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x)
{
	const size_t ss = (size_t)s * s;
	uint32_t b, j0;
	__m256i tail;

	if (s == 0)
		return;
	/* Lanes below (s - 1) % 8 + 1 set. */
	tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)((s - 1) % 8 + 1)),
	    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	/* Groups of blocks that keep eight registers of sums, or nearly. */
	if (s <= 8) {
		rowa_blocks(y, a, nb, s, 8, 1, tail, x);
		return;
	}
	if (s <= 16) {
		rowa_blocks(y, a, nb, s, 4, 2, tail, x);
		return;
	}
	if (s <= 24) {
		rowa_blocks(y, a, nb, s, 2, 3, tail, x);
		return;
	}
	if (s <= 32) {
		rowa_blocks(y, a, nb, s, 2, 4, tail, x);
		return;
	}
	/* Wide blocks: 64 columns of one block at a time (see avx512). */
#define ROWA_WIDE(nv, full) rowa_group(y + b * s, a + b * ss, s, 1, j0, \
	    nv, full, tail, x + b * s)
	for (b = 0; b < nb; b++)
		for (j0 = 0; j0 < s; j0 += 64)
			switch (s - j0 >= 64 ? 0 : (s - j0 + 7) / 8) {
			case 0: ROWA_WIDE(8, 1); break;
			case 1: ROWA_WIDE(1, 0); break;
			case 2: ROWA_WIDE(2, 0); break;
			case 3: ROWA_WIDE(3, 0); break;
			case 4: ROWA_WIDE(4, 0); break;
			case 5: ROWA_WIDE(5, 0); break;
			case 6: ROWA_WIDE(6, 0); break;
			case 7: ROWA_WIDE(7, 0); break;
			default: ROWA_WIDE(8, 0); break;
			}
#undef ROWA_WIDE
}

/* Rows of one block, g at a time, then one (tq_rowa_rows_avx2). */
static inline __attribute__((always_inline)) void
rowa_rows_g(const float *y, size_t ldy, const float *a, size_t n,
    uint32_t s, unsigned g, unsigned nv, __m256i tail, float *x,
    size_t ldx)
{
	size_t i = 0;

	for (; i + g <= n; i += g)
		rowa_group_strided(y + i * ldy, ldy, a, 0, s, g, 0, nv, 0,
		    tail, x + i * ldx, ldx);
	for (; i < n; i++)
		rowa_group_strided(y + i * ldy, ldy, a, 0, s, 1, 0, nv, 0,
		    tail, x + i * ldx, ldx);
}

/*
 * One block of s <= 32 columns for n rows (tq_rowa_rows_fn), rows side
 * by side as blocks are in tq_rowa_avx2, so the block's matrix stays in
 * L1 while the rows pass; the same chains, so the same bits.
 */
void
tq_rowa_rows_avx2(const float *y, size_t ldy, const float *a, size_t n,
    uint32_t s, float *x, size_t ldx)
{
	__m256i tail;

	if (s == 0)
		return;
	if (s > 32) {
		for (size_t i = 0; i < n; i++)
			tq_rowa_avx2(y + i * ldy, a, 1, s, x + i * ldx);
		return;
	}
	tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)((s - 1) % 8 + 1)),
	    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
	if (s <= 8)
		rowa_rows_g(y, ldy, a, n, s, 8, 1, tail, x, ldx);
	else if (s <= 16)
		rowa_rows_g(y, ldy, a, n, s, 4, 2, tail, x, ldx);
	else if (s <= 24)
		rowa_rows_g(y, ldy, a, n, s, 2, 3, tail, x, ldx);
	else
		rowa_rows_g(y, ldy, a, n, s, 2, 4, tail, x, ldx);
}

void
tq_f16_avx2(const uint8_t *src, size_t n, float *dst)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8)
		_mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
		    (const __m128i *)(const void *)(src + 2 * i))));
	tq_f16_portable(src + 2 * i, n - i, dst + i);
}

/*
 * Exact keys against f16 rows (tq_keyf16_fn): two registers hold double
 * lanes 0-3 and 4-7 of tq_exact_key; eight halves are converted at a
 * time (vcvtph2ps, exact) and widened (exact).  Up to four rows side by
 * side overlap their chains of adds; the last dim % 8 coordinates are
 * added lane by lane as exact.c adds them.
 */
static inline __attribute__((always_inline)) __m256d
lane_term(__m256d q, __m256d x, int l2)
{
	__m256d e = l2 ? _mm256_sub_pd(q, x) : q;

	return _mm256_mul_pd(e, l2 ? e : x);
}

static inline __attribute__((always_inline)) void
keyf16_group(const float *qv, const uint8_t *const *rows, unsigned g,
    uint32_t dim, int l2, float *key)
{
	__m256d lo[4], hi[4];
	uint32_t d = 0, e;
	unsigned t;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
		lo[t] = hi[t] = _mm256_setzero_pd();
	for (; d + 8 <= dim; d += 8) {
		__m256 qf = _mm256_loadu_ps(qv + d);
		__m256d q0 = _mm256_cvtps_pd(_mm256_castps256_ps128(qf));
		__m256d q1 = _mm256_cvtps_pd(_mm256_extractf128_ps(qf, 1));

#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			__m256 xf = _mm256_cvtph_ps(_mm_loadu_si128(
			    (const __m128i *)(const void *)(rows[t] + 2 * d)));

			lo[t] = _mm256_add_pd(lo[t], lane_term(q0,
			    _mm256_cvtps_pd(_mm256_castps256_ps128(xf)), l2));
			hi[t] = _mm256_add_pd(hi[t], lane_term(q1,
			    _mm256_cvtps_pd(_mm256_extractf128_ps(xf, 1)), l2));
		}
	}
	for (t = 0; t < g; t++) {
		double s[8], sum;

		_mm256_storeu_pd(s, lo[t]);
		_mm256_storeu_pd(s + 4, hi[t]);
		for (e = d; e < dim; e++) {
			double q = (double)qv[e], x = (double)tq_f16_to_f32(
			    rd_le16(rows[t] + 2 * (size_t)e)), v = q - x;

			s[e % 8] += l2 ? v * v : q * x;
		}
		/* The pairwise reduction of exact.c. */
		sum = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) +
		    (s[6] + s[7]));
		key[t] = l2 ? (float)-sum : (float)sum;
	}
}

/* n rows, four at a time, then one by one. */
static inline __attribute__((always_inline)) void
keyf16_rows(const float *qv, const uint8_t *const *rows, unsigned n,
    uint32_t dim, int l2, float *key)
{
	unsigned t = 0;

	for (; t + 4 <= n; t += 4)
		keyf16_group(qv, rows + t, 4, dim, l2, key + t);
	for (; t < n; t++)
		keyf16_group(qv, rows + t, 1, dim, l2, key + t);
}

void
tq_keyf16_avx2(enum tq_metric metric, const float *qv,
    const uint8_t *const *rows, unsigned n, uint32_t dim, float *key)
{
	/* The metric a constant in each copy. */
	if (metric == TQ_METRIC_L2)
		keyf16_rows(qv, rows, n, dim, 1, key);
	else
		keyf16_rows(qv, rows, n, dim, 0, key);
}

/*
 * The refinement's dot products with 4-bit rows (tq_dotq4_fn).  Eight
 * coordinates a step in the two registers of double lanes 0-3 and 4-7,
 * as keyf16 adds them.  The step's 8 / cpf fields (cpf = 4 / bits
 * coordinates a field) lie 16 bytes apart, so one vpgatherdd fetches, for
 * each coordinate, the aligned dword of its field that holds byte
 * pos % 16 (never past the field); vpsrlvd moves the coordinate's code
 * to the bottom (that byte, the row's nibble, then the coordinate within
 * the field).  AVX2 has no 16-entry float lookup: vpermps in the low and
 * the high eight centroids, merged by vblendvps on code bit 3, which a
 * shift moves to the sign bit (bits 1 and 2 never need the high half).
 * At 1 and 2 bits a step's two or four fields are read as dwords and
 * spread to their lanes by vpermd, not gathered: on a Zen 4 (perf of
 * single Fashion-MNIST queries, TQ_ISA=avx2) the refinement went from
 * 12.3 to 3.1 % of a 1-bit query and from 7.4 to 2.0 % of a 2-bit one.
 * The eight fields of a 4-bit step loaded one by one were no faster than
 * the gather (4.1 against 3.8 %), so 4 bits gathers.
 * Widened to double (exact), multiplied by the query and added; g rows
 * side by side (up to four) overlap their chains and their gathers.  The
 * last dim % 8 coordinates are added lane by lane as exact.c adds them.
 * The fields are prefetched DOTQ4_AHEAD bytes on (a row's nibbles are
 * spread over its whole block, which the scan left in cache long ago).
 */
#define DOTQ4_AHEAD 2048u

static inline __attribute__((always_inline)) double
dotq4_tail(double *s, const float *rq, const uint8_t *blk, unsigned pos,
    uint32_t d, uint32_t dim, unsigned bits, const float *cent)
{
	const unsigned cpf = 4 / bits, mask = (1u << bits) - 1;
	unsigned sh = pos < 16 ? 0 : 4;

	for (; d < dim; d++) {
		unsigned v = (unsigned)blk[(size_t)(d / cpf) * 16 + pos % 16] >>
		    (sh + d % cpf * bits) & mask;

		s[d % 8] += (double)rq[d] * (double)cent[v];
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) +
	    (s[6] + s[7]));
}

/*
 * What the gather of dotq4_group fetches at 1 and 2 bits: the dwords at
 * p, p + 16 (and p + 32, p + 48 at 2 bits), the step's fields, each in
 * the lanes of its 4 / bits coordinates.
 */
static inline __m256i
step_fields(const uint8_t *p, unsigned bits)
{
	int32_t w[4];
	__m128i x;

	memcpy(&w[0], p, 4);
	memcpy(&w[1], p + 16, 4);
	x = _mm_insert_epi32(_mm_cvtsi32_si128(w[0]), w[1], 1);
	if (bits == 1)
		return _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(x),
		    _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
	memcpy(&w[2], p + 32, 4);
	memcpy(&w[3], p + 48, 4);
	x = _mm_insert_epi32(_mm_insert_epi32(x, w[2], 2), w[3], 3);
	return _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(x),
	    _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

static inline __attribute__((always_inline)) void
dotq4_group(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned g, uint32_t dim, unsigned bits,
    const float *cent, double *dot)
{
	const unsigned cpf = 4 / bits;
	const __m256 clo = _mm256_loadu_ps(cent), chi = _mm256_loadu_ps(cent +
	    8);
	const __m256i mask = _mm256_set1_epi32((int)((1u << bits) - 1));
	__m256i off[4], shv[4];
	__m256d lo[4], hi[4];
	uint32_t d = 0;
	unsigned t, k;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		int32_t ob[8], sb[8];

		lo[t] = hi[t] = _mm256_setzero_pd();
		off[t] = shv[t] = _mm256_setzero_si256();
		if (t >= g)
			continue;
		for (k = 0; k < 8; k++) {
			ob[k] = (int32_t)(16 * (k / cpf) + (pos[t] & 12));
			sb[k] = (int32_t)(8 * (pos[t] & 3) + (pos[t] < 16 ?
			    0 : 4) + k % cpf * bits);
		}
		off[t] = _mm256_loadu_si256((const __m256i *)(const void *)ob);
		shv[t] = _mm256_loadu_si256((const __m256i *)(const void *)sb);
	}
	for (; d + 8 <= dim; d += 8) {
		size_t fo = (size_t)(d / cpf) * 16;

#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			__m256i c = bits == 4 ? _mm256_i32gather_epi32(
			    (const int *)(const void *)(blk[t] + fo), off[t],
			    1) : step_fields(blk[t] + fo + (pos[t] & 12), bits);
			__m256 qf = _mm256_loadu_ps(rq[t] + d), y;

			for (k = 0; k < 8 / cpf; k += 4)
				_mm_prefetch((const char *)blk[t] + fo + 16 * k +
				    DOTQ4_AHEAD, _MM_HINT_T0);
			c = _mm256_and_si256(_mm256_srlv_epi32(c, shv[t]),
			    mask);
			y = _mm256_permutevar8x32_ps(clo, c);
			if (bits == 4)
				y = _mm256_blendv_ps(y,
				    _mm256_permutevar8x32_ps(chi, c),
				    _mm256_castsi256_ps(_mm256_slli_epi32(c,
				    28)));
			lo[t] = _mm256_add_pd(lo[t], _mm256_mul_pd(
			    _mm256_cvtps_pd(_mm256_castps256_ps128(qf)),
			    _mm256_cvtps_pd(_mm256_castps256_ps128(y))));
			hi[t] = _mm256_add_pd(hi[t], _mm256_mul_pd(
			    _mm256_cvtps_pd(_mm256_extractf128_ps(qf, 1)),
			    _mm256_cvtps_pd(_mm256_extractf128_ps(y, 1))));
		}
	}
	for (t = 0; t < g; t++) {
		double s[8];

		_mm256_storeu_pd(s, lo[t]);
		_mm256_storeu_pd(s + 4, hi[t]);
		dot[t] = dotq4_tail(s, rq[t], blk[t], pos[t], d, dim, bits,
		    cent);
	}
}

/* n rows, four at a time, then one by one; bits a constant in each. */
static inline __attribute__((always_inline)) void
dotq4_rows(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot)
{
	unsigned t = 0;

	for (; t + 4 <= n; t += 4)
		dotq4_group(rq + t, blk + t, pos + t, 4, dim, bits, cent,
		    dot + t);
	for (; t < n; t++)
		dotq4_group(rq + t, blk + t, pos + t, 1, dim, bits, cent,
		    dot + t);
}

void
tq_dotq4_avx2(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot)
{
	if (bits == 4)
		dotq4_rows(rq, blk, pos, n, dim, 4, cent, dot);
	else if (bits == 2)
		dotq4_rows(rq, blk, pos, n, dim, 2, cent, dot);
	else
		dotq4_rows(rq, blk, pos, n, dim, 1, cent, dot);
}
