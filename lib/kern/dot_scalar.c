/*
 * dot_scalar.c - fixed-order dot products: the portable oracle and the
 * baseline x86-64 (SSE2) kernel.
 *
 * Rotations and list assignments must give the same bits on every
 * machine, thread count and batch size, so every dot product <x, a> of
 * length k is summed in one order, which every kernel reproduces exactly
 * with separate multiplies and adds (no FMA; ISO C mode and
 * -ffp-contract=off keep the compiler from contracting them):
 *
 *   16 lane sums: lane l adds x[j] a[j] for j = l, l + 16, l + 32, ...
 *     below k16 = k - k % 16, in increasing j, starting from +0;
 *   the lanes reduced as t[l] = L[l] + L[l + 8] (l < 8),
 *     u[l] = t[l] + t[l + 4] (l < 4), s = (u[0] + u[1]) + (u[2] + u[3]);
 *   then s += x[j] a[j] for j = k16 .. k - 1 in order.
 *
 * The order suits every vector width: an AVX-512 register holds the 16
 * lanes, two AVX2 registers lanes 0-7 and 8-15, four SSE2 registers
 * lanes 0-3, 4-7, 8-11, 12-15; the reduction is the halving each width
 * does naturally.  Measured on a 784 x 784 rotation of one vector: see
 * the closing note of the change that introduced it.
 *
 * Also the rows times block-diagonal matrices of the narrow structured
 * rotations (tq_rowa_fn), whose order needs no lanes at all: each output
 * is one chain of adds over the rows of its block.
 */
#include "internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

float
tq_dot_tail(float s, const float *x, const float *a, uint32_t j, uint32_t k)
{
	for (; j < k; j++)
		s += x[j] * a[j];
	return s;
}

float
tq_dot_reduce16(const float *l)
{
	float t[8], u[4];

	for (unsigned i = 0; i < 8; i++)
		t[i] = l[i] + l[i + 8];
	for (unsigned i = 0; i < 4; i++)
		u[i] = t[i] + t[i + 4];
	return (u[0] + u[1]) + (u[2] + u[3]);
}

void
tq_dot_portable(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	uint32_t k16 = k - k % 16;

	for (size_t i = 0; i < n; i++)
		for (uint32_t o = 0; o < m; o++) {
			const float *xi = x + i * ldx, *ao = a + (size_t)o * k;
			float l[16] = { 0 };

			for (uint32_t j = 0; j < k16; j += 16)
				for (unsigned t = 0; t < 16; t++)
					l[t] += xi[j + t] * ao[j + t];
			y[i * ldy + o] = tq_dot_tail(tq_dot_reduce16(l), xi, ao,
			    k16, k);
		}
}

#if defined(__SSE2__)
/* Lanes 0-3, 4-7, 8-11, 12-15 in four registers, reduced in the order. */
static inline float
reduce4(__m128 l0, __m128 l1, __m128 l2, __m128 l3)
{
	__m128 u = _mm_add_ps(_mm_add_ps(l0, l2), _mm_add_ps(l1, l3));
	float v[4];

	_mm_storeu_ps(v, u);
	return (v[0] + v[1]) + (v[2] + v[3]);
}

#define MADD(acc, p, q) acc = _mm_add_ps(acc, _mm_mul_ps(p, q))

void
tq_dot_sse2(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	uint32_t k16 = k - k % 16, o, j;

	for (size_t i = 0; i < n; i++) {
		const float *xi = x + i * ldx;

		for (o = 0; o + 2 <= m; o += 2) {
			const float *a0 = a + (size_t)o * k, *a1 = a0 + k;
			__m128 p0 = _mm_setzero_ps(), p1 = p0, p2 = p0, p3 = p0;
			__m128 q0 = p0, q1 = p0, q2 = p0, q3 = p0;

			for (j = 0; j < k16; j += 16) {
				__m128 v0 = _mm_loadu_ps(xi + j);
				__m128 v1 = _mm_loadu_ps(xi + j + 4);
				__m128 v2 = _mm_loadu_ps(xi + j + 8);
				__m128 v3 = _mm_loadu_ps(xi + j + 12);

				MADD(p0, v0, _mm_loadu_ps(a0 + j));
				MADD(p1, v1, _mm_loadu_ps(a0 + j + 4));
				MADD(p2, v2, _mm_loadu_ps(a0 + j + 8));
				MADD(p3, v3, _mm_loadu_ps(a0 + j + 12));
				MADD(q0, v0, _mm_loadu_ps(a1 + j));
				MADD(q1, v1, _mm_loadu_ps(a1 + j + 4));
				MADD(q2, v2, _mm_loadu_ps(a1 + j + 8));
				MADD(q3, v3, _mm_loadu_ps(a1 + j + 12));
			}
			y[i * ldy + o] = tq_dot_tail(reduce4(p0, p1, p2, p3),
			    xi, a0, k16, k);
			y[i * ldy + o + 1] = tq_dot_tail(reduce4(q0, q1, q2,
			    q3), xi, a1, k16, k);
		}
		if (o < m)
			tq_dot_portable(xi, ldx, 1, a + (size_t)o * k, m - o, k,
			    y + i * ldy + o, ldy);
	}
}
#endif

/*
 * Rows times block-diagonal matrices (tq_rowa_fn): each output is its own
 * chain over o, so columns vectorise exactly and need no reduction.
 */
static void
rowa_cols(const float *y, const float *a, uint32_t s, uint32_t j,
    float *x)
{
	for (; j < s; j++) {
		float acc = 0;

		for (uint32_t o = 0; o < s; o++)
			acc += y[o] * a[(size_t)o * s + j];
		x[j] = acc;
	}
}

void
tq_rowa_portable(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x)
{
	for (uint32_t b = 0; b < nb; b++, y += s, x += s, a += (size_t)s * s)
		rowa_cols(y, a, s, 0, x);
}

#if defined(__SSE2__)
/*
 * 32 columns at a time are held in registers through the whole sum
 * (reloading them per o cost 9% of a single IVF query with a narrow
 * rotation); the last s % 4 one by one.
 */
void
tq_rowa_sse2(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x)
{
	for (uint32_t b = 0; b < nb; b++, y += s, x += s, a += (size_t)s * s) {
		uint32_t j0 = 0, o;

		for (; j0 + 4 <= s; j0 += 32) {
			uint32_t nv = (s - j0) / 4 < 8 ? (s - j0) / 4 : 8, q;
			__m128 acc[8];

#pragma GCC unroll 8
			for (q = 0; q < 8; q++)
				acc[q] = _mm_setzero_ps();
			for (o = 0; o < s; o++) {
				__m128 c = _mm_set1_ps(y[o]);
				const float *ao = a + (size_t)o * s + j0;

#pragma GCC unroll 8
				for (q = 0; q < 8; q++)
					if (q < nv)
						MADD(acc[q], c, _mm_loadu_ps(ao +
						    4 * q));
			}
#pragma GCC unroll 8
			for (q = 0; q < 8; q++)
				if (q < nv)
					_mm_storeu_ps(x + j0 + 4 * q, acc[q]);
			if (nv < 8) {
				j0 += 4 * nv;
				break;
			}
		}
		rowa_cols(y, a, s, j0, x);
	}
}
#endif

void
tq_f16_portable(const uint8_t *src, size_t n, float *dst)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = tq_f16_to_f32(rd_le16(src + 2 * i));
}

/*
 * The refinement's dot products with 4-bit rows (tq_dotq4_fn), in the
 * lanes of tq_dot_lanes: coordinate d in lane d % 8, each lane summed in
 * increasing d from +0 with a separate multiply and add, the lanes added
 * pairwise at the end.  A row's nibbles lie 16 bytes apart across its
 * block; eight coordinates a step with the lanes in named variables keep
 * the sums in registers, and a prefetch DOTQ4_AHEAD bytes on lets the
 * misses of a block the scan left long ago overlap (the loads do not
 * depend on the adds).  Specialised on bits, so the field and shift of
 * each coordinate of a step are constants.
 */
#define DOTQ4_AHEAD 2048u

static inline __attribute__((always_inline)) double
dotq4_row(const float *rq, const uint8_t *blk, unsigned pos, uint32_t dim,
    unsigned bits, const float *cent)
{
	const unsigned cpf = 4 / bits, mask = (1u << bits) - 1;
	const uint8_t *p = blk + pos % 16;
	unsigned sh = pos < 16 ? 0 : 4, l;
	double s[8] = { 0 };
	uint32_t d = 0;

	for (; d + 8 <= dim; d += 8) {
		const uint8_t *fp = p + (size_t)(d / cpf) * 16;

		if (d / cpf % 4 == 0)
			__builtin_prefetch((const void *)((uintptr_t)fp +
			    DOTQ4_AHEAD));
#pragma GCC unroll 8
		for (l = 0; l < 8; l++) {
			unsigned v = (unsigned)fp[l / cpf * 16] >> (sh +
			    l % cpf * bits) & mask;

			s[l] += (double)rq[d + l] * (double)cent[v];
		}
	}
	for (; d < dim; d++) {
		unsigned v = (unsigned)p[(size_t)(d / cpf) * 16] >> (sh +
		    d % cpf * bits) & mask;

		s[d % 8] += (double)rq[d] * (double)cent[v];
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) +
	    (s[6] + s[7]));
}

void
tq_dotq4_portable(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot)
{
	for (unsigned t = 0; t < n; t++) {
		if (bits == 4)
			dot[t] = dotq4_row(rq[t], blk[t], pos[t], dim, 4, cent);
		else if (bits == 2)
			dot[t] = dotq4_row(rq[t], blk[t], pos[t], dim, 2, cent);
		else
			dot[t] = dotq4_row(rq[t], blk[t], pos[t], dim, 1, cent);
	}
}
