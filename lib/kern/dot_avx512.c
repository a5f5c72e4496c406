/*
 * dot_avx512.c - fixed-order dot products for AVX-512F (built with the
 * AVX-512 flags of the scan kernel; only AVX-512F is used, and no FMA:
 * see dot_scalar.c for the order).  One register holds the 16 lanes; its
 * 256-bit halves summed give t, the 128-bit halves of t give u.
 *
 * Four input rows times four outputs per step: sixteen accumulators,
 * each load of x or a used four times.
 *
 * Also the rows times block-diagonal matrices (tq_rowa_fn): masked loads
 * and stores cover a block of up to 32 columns in two registers.  Blocks
 * go side by side for one row, or (tq_rowa_rows_fn) rows side by side for
 * one block, whose matrix then stays in L1.
 *
 * Also the refinement's dot products with 4-bit rows (tq_dotq4_fn), which
 * pick nibbles with AVX512BW and VBMI byte permutes.
 */
#include <immintrin.h>

#include "internal.h"

static inline float
reduce(__m512 z)
{
	__m256 lo = _mm512_castps512_ps256(z);
	__m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(
	    _mm512_castps_pd(z), 1));
	__m256 t = _mm256_add_ps(lo, hi);
	__m128 u = _mm_add_ps(_mm256_castps256_ps128(t),
	    _mm256_extractf128_ps(t, 1));
	float v[4];

	_mm_storeu_ps(v, u);
	return (v[0] + v[1]) + (v[2] + v[3]);
}

#define MADD(acc, p, q) acc = _mm512_add_ps(acc, _mm512_mul_ps(p, q))
/* Prefetch distance of the one-row dot, in floats (four cache lines). */
#define DOT_AHEAD 64
/*
 * Prefetch distance of the narrow rowa groups, in rows of each block:
 * 440 KiB of blocks a query (d = 784, five rounds) stream from L2 at
 * best, and the hardware left each group waiting on them (a round of 28
 * blocks of 28 from L2: 48 ns a block without, 42 with four rows ahead,
 * 46 with eight).
 */
#define ROWA_AHEAD 4

void
tq_dot_avx512(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	uint32_t k16 = k - k % 16, o, j;
	size_t i = 0;

	for (; i + 4 <= n; i += 4) {
		const float *xr[4] = { x + i * ldx, x + (i + 1) * ldx,
		    x + (i + 2) * ldx, x + (i + 3) * ldx };

		for (o = 0; o + 4 <= m; o += 4) {
			const float *ar[4] = { a + (size_t)o * k,
			    a + (size_t)(o + 1) * k, a + (size_t)(o + 2) * k,
			    a + (size_t)(o + 3) * k };
			__m512 s[4][4];

			/* Fully unrolled, so the accumulators stay in registers. */
#pragma GCC unroll 4
			for (unsigned r = 0; r < 4; r++)
#pragma GCC unroll 4
				for (unsigned c = 0; c < 4; c++)
					s[r][c] = _mm512_setzero_ps();
			for (j = 0; j < k16; j += 16) {
				__m512 av[4];

#pragma GCC unroll 4
				for (unsigned c = 0; c < 4; c++)
					av[c] = _mm512_loadu_ps(ar[c] + j);
#pragma GCC unroll 4
				for (unsigned r = 0; r < 4; r++) {
					__m512 v = _mm512_loadu_ps(xr[r] + j);

#pragma GCC unroll 4
					for (unsigned c = 0; c < 4; c++)
						MADD(s[r][c], v, av[c]);
				}
			}
			for (unsigned r = 0; r < 4; r++)
				for (unsigned c = 0; c < 4; c++)
					y[(i + r) * ldy + o + c] = tq_dot_tail(
					    reduce(s[r][c]), xr[r], ar[c], k16,
					    k);
		}
		if (o < m)
			tq_dot_portable(xr[0], ldx, 4, a + (size_t)o * k,
			    m - o, k, y + i * ldy + o, ldy);
	}
	for (; i < n; i++) {
		const float *x0 = x + i * ldx;

		/*
		 * Eight outputs per step: with four, one query's scores of
		 * the IVF centroids waited on the adds' latency.  The eight
		 * rows are eight streams from L2 at best (245 x 784
		 * centroids are 750 KiB), which the hardware brought to L1
		 * too late: each is requested DOT_AHEAD floats ahead (past
		 * its end, the next row's start; a prefetch never faults).
		 */
		for (o = 0; o + 8 <= m; o += 8) {
			__m512 s[8];

#pragma GCC unroll 8
			for (unsigned c = 0; c < 8; c++)
				s[c] = _mm512_setzero_ps();
			for (j = 0; j < k16; j += 16) {
				__m512 v = _mm512_loadu_ps(x0 + j);

#pragma GCC unroll 8
				for (unsigned c = 0; c < 8; c++) {
					const float *ac = a + (size_t)(o + c) *
					    k + j;

					_mm_prefetch((const char *)(ac +
					    DOT_AHEAD), _MM_HINT_T0);
					MADD(s[c], v, _mm512_loadu_ps(ac));
				}
			}
			for (unsigned c = 0; c < 8; c++)
				y[i * ldy + o + c] = tq_dot_tail(reduce(s[c]), x0,
				    a + (size_t)(o + c) * k, k16, k);
		}
		for (; o + 4 <= m; o += 4) {
			const float *ar[4] = { a + (size_t)o * k,
			    a + (size_t)(o + 1) * k, a + (size_t)(o + 2) * k,
			    a + (size_t)(o + 3) * k };
			__m512 s[4];

#pragma GCC unroll 4
			for (unsigned c = 0; c < 4; c++)
				s[c] = _mm512_setzero_ps();
			for (j = 0; j < k16; j += 16) {
				__m512 v = _mm512_loadu_ps(x0 + j);

#pragma GCC unroll 4
				for (unsigned c = 0; c < 4; c++)
					MADD(s[c], v, _mm512_loadu_ps(ar[c] +
					    j));
			}
			for (unsigned c = 0; c < 4; c++)
				y[i * ldy + o + c] = tq_dot_tail(reduce(s[c]), x0,
				    ar[c], k16, k);
		}
		/* The last one to three (245 lists: one), one at a time. */
		for (; o < m; o++) {
			const float *ao = a + (size_t)o * k;
			__m512 s0 = _mm512_setzero_ps();

			for (j = 0; j < k16; j += 16)
				MADD(s0, _mm512_loadu_ps(x0 + j),
				    _mm512_loadu_ps(ao + j));
			y[i * ldy + o] = tq_dot_tail(reduce(s0), x0, ao, k16,
			    k);
		}
	}
}

/*
 * Rows times block-diagonal matrices (tq_rowa_fn).  Each output's chain
 * over o costs an add's latency per step, so one block of 28 (two
 * registers) would wait on it; g blocks side by side give g * nv
 * independent chains (up to sixteen registers), enough to keep both
 * vector units busy.  Columns past s are masked off in the loads and the
 * stores.
 * Columns j0 .. j0 + 16 nv of g consecutive blocks; the last register of
 * each block holds the columns tail selects.
 */
static inline __attribute__((always_inline)) void
rowa_group_strided(const float *y, size_t ys, const float *a, size_t as,
    uint32_t s, unsigned g, uint32_t j0, unsigned nv, __mmask16 tail,
    float *x, size_t xs)
{
	__m512 acc[16];
	unsigned b, q;

#pragma GCC unroll 16
	for (q = 0; q < g * nv; q++)
		acc[q] = _mm512_setzero_ps();
	for (uint32_t o = 0; o < s; o++) {
#pragma GCC unroll 8
		for (b = 0; b < g; b++) {
			__m512 c = _mm512_set1_ps(y[b * ys + o]);
			const float *ao = a + b * as + (size_t)o * s + j0;

			/*
			 * Narrow blocks: the row ROWA_AHEAD on (and past
			 * the group's end, the next group's first rows),
			 * every line of it (two for one register: a row
			 * of up to 16 floats may straddle two lines).
			 */
			if (nv <= 4) {
#pragma GCC unroll 4
				for (q = 0; q < (nv < 2 ? 2 : nv); q++)
					_mm_prefetch((const char *)(ao +
					    ROWA_AHEAD * s + 16 * q),
					    _MM_HINT_T0);
			}

#pragma GCC unroll 8
			for (q = 0; q < nv; q++)
				MADD(acc[b * nv + q], c, _mm512_maskz_loadu_ps(
				    q + 1 == nv ? tail : 0xffff, ao + 16 * q));
		}
	}
#pragma GCC unroll 8
	for (b = 0; b < g; b++)
#pragma GCC unroll 8
		for (q = 0; q < nv; q++)
			_mm512_mask_storeu_ps(x + b * xs + j0 + 16 * q,
			    q + 1 == nv ? tail : 0xffff, acc[b * nv + q]);
}

/*
 * g chains side by side: g blocks of one row (y, a and x a block apart),
 * or one block of g rows (tq_rowa_rows_avx512: rows apart, a the same).
 */
static inline __attribute__((always_inline)) void
rowa_group(const float *y, const float *a, uint32_t s, unsigned g,
    uint32_t j0, unsigned nv, __mmask16 tail, float *x)
{
	rowa_group_strided(y, s, a, (size_t)s * s, s, g, j0, nv, tail, x, s);
}

/* Blocks 0 .. nb - 1 of s columns (nv registers), g at a time, then one. */
static inline __attribute__((always_inline)) void
rowa_blocks(const float *y, const float *a, uint32_t nb, uint32_t s,
    unsigned g, unsigned nv, __mmask16 tail, float *x)
{
	const size_t ss = (size_t)s * s;
	uint32_t b = 0;

	for (; b + g <= nb; b += g)
		rowa_group(y + b * s, a + b * ss, s, g, 0, nv, tail, x + b * s);
	for (; b < nb; b++)
		rowa_group(y + b * s, a + b * ss, s, 1, 0, nv, tail, x + b * s);
}

void
tq_rowa_avx512(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x)
{
	const size_t ss = (size_t)s * s;
	uint32_t b, j0;
	__mmask16 tail;

	if (s == 0)
		return;
	tail = (__mmask16)(0xffffu >> (15 - (s - 1) % 16));
	if (s <= 16) {
		rowa_blocks(y, a, nb, s, 8, 1, tail, x);
		return;
	}
	if (s <= 32) {
		rowa_blocks(y, a, nb, s, 4, 2, tail, x);
		return;
	}
	if (s <= 48) {
		rowa_blocks(y, a, nb, s, 4, 3, tail, x);
		return;
	}
	if (s <= 64) {
		rowa_blocks(y, a, nb, s, 4, 4, tail, x);
		return;
	}
	/*
	 * Wide blocks: 128 columns (eight chains) of one block at a time;
	 * the register count a constant in each call, so that the
	 * accumulators stay in registers.
	 */
#define ROWA_WIDE(nv, t) rowa_group(y + b * s, a + b * ss, s, 1, j0, nv, \
	    t, x + b * s)
	for (b = 0; b < nb; b++)
		for (j0 = 0; j0 < s; j0 += 128)
			switch (s - j0 >= 128 ? 0 : (s - j0 + 15) / 16) {
			case 0: ROWA_WIDE(8, 0xffff); break;
			case 1: ROWA_WIDE(1, tail); break;
			case 2: ROWA_WIDE(2, tail); break;
			case 3: ROWA_WIDE(3, tail); break;
			case 4: ROWA_WIDE(4, tail); break;
			case 5: ROWA_WIDE(5, tail); break;
			case 6: ROWA_WIDE(6, tail); break;
			case 7: ROWA_WIDE(7, tail); break;
			default: ROWA_WIDE(8, tail); break;
			}
#undef ROWA_WIDE
}

/* Rows of one block, g at a time, then one (tq_rowa_rows_avx512). */
static inline __attribute__((always_inline)) void
rowa_rows_g(const float *y, size_t ldy, const float *a, size_t n,
    uint32_t s, unsigned g, unsigned nv, __mmask16 tail, float *x,
    size_t ldx)
{
	size_t i = 0;

	for (; i + g <= n; i += g)
		rowa_group_strided(y + i * ldy, ldy, a, 0, s, g, 0, nv, tail,
		    x + i * ldx, ldx);
	for (; i < n; i++)
		rowa_group_strided(y + i * ldy, ldy, a, 0, s, 1, 0, nv, tail,
		    x + i * ldx, ldx);
}

/*
 * One block of s <= 64 columns for n rows (tq_rowa_rows_fn): the block's
 * matrix (at most 16 KiB) stays in L1 while the rows pass, where a row at
 * a time streams every block of a round from L2.  Rows go side by side as
 * blocks do in tq_rowa_avx512 (eight to sixteen chains), each output the
 * same chain, so the same bits.
 */
void
tq_rowa_rows_avx512(const float *y, size_t ldy, const float *a, size_t n,
    uint32_t s, float *x, size_t ldx)
{
	size_t i = 0;
	__mmask16 tail;

	if (s == 0)
		return;
	if (s > 64) {
		for (; i < n; i++)
			tq_rowa_avx512(y + i * ldy, a, 1, s, x + i * ldx);
		return;
	}
	tail = (__mmask16)(0xffffu >> (15 - (s - 1) % 16));
	if (s <= 16)
		rowa_rows_g(y, ldy, a, n, s, 8, 1, tail, x, ldx);
	else if (s <= 32)
		rowa_rows_g(y, ldy, a, n, s, 4, 2, tail, x, ldx);
	else if (s <= 48)
		rowa_rows_g(y, ldy, a, n, s, 4, 3, tail, x, ldx);
	else
		rowa_rows_g(y, ldy, a, n, s, 4, 4, tail, x, ldx);
}

/* f16 rows: vcvtph2ps is exact. */
void
tq_f16_avx512(const uint8_t *src, size_t n, float *dst)
{
	size_t i = 0;

	for (; i + 16 <= n; i += 16)
		_mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(
		    (const __m256i *)(const void *)(src + 2 * i))));
	tq_f16_portable(src + 2 * i, n - i, dst + i);
}

/*
 * Exact keys against f16 rows (tq_keyf16_fn).  One register holds the
 * eight double lanes of tq_exact_key, so coordinate d lands in lane d % 8
 * by position alone: 16 halves are converted at a time (vcvtph2ps,
 * exact), each half of the result widened to double (exact) and added in
 * the order d, d + 8.  A lane's chain costs an add's latency per step;
 * g rows side by side (up to four) overlap their chains and share the
 * query's conversions.  The last dim % 16 coordinates go through masked
 * loads and masked adds, which leave the other lanes as they are.
 */
static inline __attribute__((always_inline)) __m512d
lane_term(__m512d q, __m512d x, int l2)
{
	__m512d e = l2 ? _mm512_sub_pd(q, x) : q;

	return _mm512_mul_pd(e, l2 ? e : x);
}

static inline __attribute__((always_inline)) __m512d
lo_pd(__m512 f)
{
	return _mm512_cvtps_pd(_mm512_castps512_ps256(f));
}

static inline __attribute__((always_inline)) __m512d
hi_pd(__m512 f)
{
	return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(
	    _mm512_castps_pd(f), 1)));
}

static inline __attribute__((always_inline)) void
keyf16_group(const float *qv, const uint8_t *const *rows, unsigned g,
    uint32_t dim, int l2, float *key)
{
	__m512d acc[4];
	uint32_t d = 0, rem;
	unsigned t;

#pragma GCC unroll 4
	for (t = 0; t < 4; t++)
		acc[t] = _mm512_setzero_pd();
	for (; d + 16 <= dim; d += 16) {
		__m512 qf = _mm512_loadu_ps(qv + d);
		__m512d q0 = lo_pd(qf), q1 = hi_pd(qf);

#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			__m512 xf = _mm512_cvtph_ps(_mm256_loadu_si256(
			    (const __m256i *)(const void *)(rows[t] + 2 * d)));

			acc[t] = _mm512_add_pd(acc[t], lane_term(q0, lo_pd(xf),
			    l2));
			acc[t] = _mm512_add_pd(acc[t], lane_term(q1, hi_pd(xf),
			    l2));
		}
	}
	if ((rem = dim - d) > 0) {
		__mmask16 m = (__mmask16)((1u << rem) - 1);
		__mmask8 m0 = (__mmask8)m, m1 = (__mmask8)(m >> 8);
		__m512 qf = _mm512_maskz_loadu_ps(m, qv + d);
		__m512d q0 = lo_pd(qf), q1 = hi_pd(qf);

#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			__m512 xf = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m,
			    rows[t] + 2 * d));

			acc[t] = _mm512_mask_add_pd(acc[t], m0, acc[t],
			    lane_term(q0, lo_pd(xf), l2));
			acc[t] = _mm512_mask_add_pd(acc[t], m1, acc[t],
			    lane_term(q1, hi_pd(xf), l2));
		}
	}
	for (t = 0; t < g; t++) {
		double s[8], sum;

		_mm512_storeu_pd(s, acc[t]);
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
tq_keyf16_avx512(enum tq_metric metric, const float *qv,
    const uint8_t *const *rows, unsigned n, uint32_t dim, float *key)
{
	/* The metric a constant in each copy. */
	if (metric == TQ_METRIC_L2)
		keyf16_rows(qv, rows, n, dim, 1, key);
	else
		keyf16_rows(qv, rows, n, dim, 0, key);
}

/*
 * The refinement's dot products with 4-bit rows (tq_dotq4_fn).  Sixteen
 * coordinates a step, in one register of eight double lanes as keyf16
 * adds them (coordinate d in lane d % 8 by position, d before d + 8).
 * The step's 16 / cpf fields (cpf = 4 / bits coordinates a field) are
 * 4 / cpf aligned 64-byte loads of the block.  For each half of the step
 * (eight coordinates) one vpermb / vpermt2b (VBMI) with a zeroing mask
 * puts byte pos % 16 of each coordinate's field in the low byte of its
 * qword, vpsrlvq shifts the coordinate's code to the bottom (pos >= 16:
 * the high nibble), and vpermt2pd looks it up in the 16 centroids held
 * as doubles (exact), reading only the low four bits: with bits 1 and 2
 * the table repeats its 2^bits centroids, so the bits above the code
 * need no mask.  Then a multiply by the query widened to double (exact)
 * and an add.  This keeps port 5 (shuffles, conversions) to four
 * operations a row and step: with float lookups widened afterwards it
 * was ten, and the bound.  g rows side by side (up to four) overlap their
 * chains of adds and their loads, which miss in L1 (a row's nibbles are
 * spread over its whole block) and are prefetched DOTQ4_AHEAD bytes on;
 * when the rows share one query (`shared`) its conversions are shared
 * too.  The last dim % 16 coordinates load the groups of fields that
 * exist and add under a mask.
 */
#define DOTQ4_AHEAD 2048u

/* Eight coordinates' centroids from the step's loads a, b (see above). */
static inline __attribute__((always_inline)) __m512d
dotq4_half(__m512i a, __m512i b, __m512i idx, __m512i shv, __m512d tlo,
    __m512d thi, unsigned cpf)
{
	const __mmask64 q0 = (__mmask64)0x0101010101010101ull;
	__m512i c = cpf == 1 ? _mm512_maskz_permutex2var_epi8(q0, a, idx, b) :
	    _mm512_maskz_permutexvar_epi8(q0, idx, a);

	return _mm512_permutex2var_pd(tlo, _mm512_srlv_epi64(c, shv), thi);
}

/* The centroids of a step's 16 coordinates: *lo the first 8, *hi the rest. */
static inline __attribute__((always_inline)) void
dotq4_step(const uint8_t *p, unsigned nl, __m512i ilo, __m512i ihi,
    __m512i shv, __m512d tlo, __m512d thi, unsigned cpf, __m512d *lo,
    __m512d *hi)
{
	__m512i z = _mm512_setzero_si512();
	__m512i l0 = nl > 0 ? _mm512_loadu_si512(p) : z;

	if (cpf == 4) {
		*lo = dotq4_half(l0, z, ilo, shv, tlo, thi, cpf);
		*hi = dotq4_half(l0, z, ihi, shv, tlo, thi, cpf);
	} else if (cpf == 2) {
		__m512i l1 = nl > 1 ? _mm512_loadu_si512(p + 64) : z;

		*lo = dotq4_half(l0, z, ilo, shv, tlo, thi, cpf);
		*hi = dotq4_half(l1, z, ilo, shv, tlo, thi, cpf);
	} else {
		__m512i l1 = nl > 1 ? _mm512_loadu_si512(p + 64) : z;
		__m512i l2 = nl > 2 ? _mm512_loadu_si512(p + 128) : z;
		__m512i l3 = nl > 3 ? _mm512_loadu_si512(p + 192) : z;

		*lo = dotq4_half(l0, l1, ilo, shv, tlo, thi, cpf);
		*hi = dotq4_half(l2, l3, ilo, shv, tlo, thi, cpf);
	}
}

static inline __attribute__((always_inline)) void
dotq4_group(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned g, uint32_t dim, unsigned bits,
    const float *cent, int shared, double *dot)
{
	const unsigned cpf = 4 / bits, nl = 4 / cpf;
	__m512i ilo[4], ihi[4], shv[4];
	__m512d acc[4], tlo, thi, q0, q1, y0, y1;
	double tb[16];
	uint32_t d = 0, rem;
	unsigned t, k, l;

	for (k = 0; k < 16; k++)
		tb[k] = (double)cent[k & ((1u << bits) - 1)];
	tlo = _mm512_loadu_pd(tb);
	thi = _mm512_loadu_pd(tb + 8);
#pragma GCC unroll 4
	for (t = 0; t < 4; t++) {
		uint8_t il[64] = { 0 }, ih[64] = { 0 };
		uint64_t sb[8];

		acc[t] = _mm512_setzero_pd();
		ilo[t] = ihi[t] = shv[t] = _mm512_setzero_si512();
		if (t >= g)
			continue;
		for (k = 0; k < 8; k++) {
			/* Coordinate k of each half; with cpf 4 both in l0. */
			il[8 * k] = (uint8_t)(16 * (k / cpf) + pos[t] % 16);
			ih[8 * k] = (uint8_t)(16 * ((8 + k) / cpf) + pos[t] %
			    16);
			sb[k] = (pos[t] < 16 ? 0 : 4) + k % cpf * bits;
		}
		ilo[t] = _mm512_loadu_si512(il);
		ihi[t] = _mm512_loadu_si512(ih);
		shv[t] = _mm512_loadu_si512(sb);
	}
	for (; d + 16 <= dim; d += 16) {
		size_t off = (size_t)(d / cpf) * 16;

		if (shared) {
			__m512 qf = _mm512_loadu_ps(rq[0] + d);

			q0 = lo_pd(qf);
			q1 = hi_pd(qf);
		}
#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			const uint8_t *p = blk[t] + off;

			if (!shared) {
				__m512 qf = _mm512_loadu_ps(rq[t] + d);

				q0 = lo_pd(qf);
				q1 = hi_pd(qf);
			}
			for (l = 0; l < nl; l++)
				_mm_prefetch((const char *)p + DOTQ4_AHEAD +
				    64 * l, _MM_HINT_T0);
			dotq4_step(p, nl, ilo[t], ihi[t], shv[t], tlo, thi, cpf,
			    &y0, &y1);
			acc[t] = _mm512_add_pd(acc[t], _mm512_mul_pd(q0, y0));
			acc[t] = _mm512_add_pd(acc[t], _mm512_mul_pd(q1, y1));
		}
	}
	if ((rem = dim - d) > 0) {
		__mmask16 m = (__mmask16)((1u << rem) - 1);
		__mmask8 m0 = (__mmask8)m, m1 = (__mmask8)(m >> 8);
		/* Groups of four fields that hold coordinates below dim. */
		unsigned nr = ((rem + cpf - 1) / cpf + 3) / 4;
		size_t off = (size_t)(d / cpf) * 16;

#pragma GCC unroll 4
		for (t = 0; t < g; t++) {
			__m512 qf = _mm512_maskz_loadu_ps(m, rq[t] + d);

			dotq4_step(blk[t] + off, nr, ilo[t], ihi[t], shv[t],
			    tlo, thi, cpf, &y0, &y1);
			acc[t] = _mm512_mask_add_pd(acc[t], m0, acc[t],
			    _mm512_mul_pd(lo_pd(qf), y0));
			acc[t] = _mm512_mask_add_pd(acc[t], m1, acc[t],
			    _mm512_mul_pd(hi_pd(qf), y1));
		}
	}
	for (t = 0; t < g; t++) {
		double s[8];

		_mm512_storeu_pd(s, acc[t]);
		/* The pairwise reduction of exact.c. */
		dot[t] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) +
		    (s[6] + s[7]));
	}
}

/*
 * n rows, four at a time, then one by one; bits and whether a group's
 * rows share their query constants in each copy.
 */
static inline __attribute__((always_inline)) void
dotq4_rows(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot)
{
	unsigned t = 0;

	for (; t + 4 <= n; t += 4)
		if (rq[t] == rq[t + 1] && rq[t] == rq[t + 2] &&
		    rq[t] == rq[t + 3])
			dotq4_group(rq + t, blk + t, pos + t, 4, dim, bits,
			    cent, 1, dot + t);
		else
			dotq4_group(rq + t, blk + t, pos + t, 4, dim, bits,
			    cent, 0, dot + t);
	for (; t < n; t++)
		dotq4_group(rq + t, blk + t, pos + t, 1, dim, bits, cent, 1,
		    dot + t);
}

void
tq_dotq4_avx512(const float *const *rq, const uint8_t *const *blk,
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
