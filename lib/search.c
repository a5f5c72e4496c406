/*
 * search.c - query tables, the scan over all blocks, threads, re-rank.
 *
 * A query q is normalised (cosine), rotated (R q, many queries per
 * call) and turned into tables (tq_lut_build: u8 tables, one per field,
 * or the dot form's int8 query, or at 1 bit both).  The scan kernel sums
 * table entries or products for 32 vectors per block; the sums map back
 * to an estimate of <q, x>:
 *
 *     <q, x> ~= s * (scale * sum + bias) + b' + <q, c>
 *
 * with s, b' the vector's factors and c the quantizer's centre.  For l2 the
 * key is -(|q|^2 - 2 <q, x> + |x|^2).  The best candidates by key are kept
 * in a heap of row numbers; with re-rank their exact scores are computed
 * from the stored originals and the best k of those are returned.
 * Final results are ordered by (key, external id); the candidate heap
 * breaks ties at its boundary by row number.
 *
 * Threads take contiguous ranges of queries and scan them in tiles of
 * QTILE queries over slices of the codes, so the codes come from memory
 * once per tile.  Within a tile, 4-bit fields go through the multi-query
 * kernel where there is one (tq_scan4x: each block's codes are loaded and
 * split into nibbles once for up to eight queries on AVX-512, two on
 * AVX2), or the dot form's tile kernel (AMX), which at 1 bit gives the
 * lookup sums less a per-query constant (struct tq_lut).
 * With fewer queries than threads, each query's blocks are split between
 * the threads instead and their heaps merged.
 *
 * Results never depend on the number of threads.  Queries are prepared in
 * chunks whose boundaries depend only on nq and dim, so every query is
 * rotated in the same BLAS call whatever the thread count; each query's
 * keys are computed by the same expression in every thread; and the heaps
 * order (key, row) totally, so heaps filled over disjoint ranges of blocks
 * merge into exactly the heap of the whole scan.
 *
 * An IVF index keeps each list's rows together.  A query's probes (its
 * nearest lists, chosen deterministically in ivf.c) become segments: a
 * range of rows and the blocks that cover it (lists need not start on a
 * block boundary, so the rows of a shared block outside the list are
 * masked).  A flat index is one segment.  Each query scans its own
 * segments; one query alone has its segments' blocks split between the
 * threads.
 *
 * An index of several segments (appends, tq(5)) is searched as one: its
 * rows form one row space in which every segment starts on a block, the
 * scan ranges (struct seg) are cut per segment, since only a segment's
 * codes are contiguous, and the heaps see the rows of all of them, so the
 * results are those of the compacted index.
 *
 * Deleted rows (TOMB) and rows outside an allow-list are masked with one
 * 32-bit word per block: a block whose word is zero is not scanned, and a
 * masked row never reaches a heap.  Range search scans every query over
 * all blocks in one thread per query range and collects candidates in a
 * growable array instead of a heap.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "calib.h"
#include "internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif


/* Blocks per kernel call: 64 * 32 u32 sums stay in L1. */
#define SCAN_BLOCKS 64
/*
 * Query tiles: a thread scans a slice of about TILE_BYTES of codes for up
 * to QTILE (dot form, and 1 bit where AMX takes its batches) or, lookup
 * form, as many queries as have TILE_TABLES of tables, QTILE_LOOKUP_MIN
 * to QTILE_LOOKUP_MAX, before moving on, so the codes come from DRAM once
 * per tile instead of once per query (the scan is bound by memory
 * bandwidth otherwise).  The dot form's tables are 16 times smaller and
 * its tile kernel so fast that with 16 queries a tile it waited on memory
 * (perf: half its time at the loads of the codes, 100K x 1536, 4-bit).
 * Batch QPS there, 1 thread, by queries a tile: 16: 1010, 64: 1510, 128:
 * 1680, 256: 1790.  The 1-bit lookup tables (7.5 KiB a query at 1536
 * coordinates, with q8) gain from 64 queries too: batch CPU QPS, 1
 * thread, six alternated runs, 16 -> 64 queries, 100K x 1536 about 1780
 * -> 2015, Fashion-MNIST 4540 -> 4900 (Zen 4, no AMX).  3 bits' tables,
 * 64 entries a field, stay at 16 queries from dimension 512 up.
 */
#define QTILE 256
#define QTILE_LOOKUP_MIN 16
#define QTILE_LOOKUP_MAX 64
#define TILE_TABLES (512u << 10)
#define TILE_BYTES (256u << 10)
/*
 * Blocks per call of the multi-query kernel: the sums of a whole tile,
 * QTILE * MULTI_BLOCKS * 32 u32 (256 KiB), stay in L2.
 */
#define MULTI_BLOCKS 8
/* u32 sums per worker: one kernel call's, either kind. */
#define ACC_SUMS ((SCAN_BLOCKS > QTILE * MULTI_BLOCKS ? SCAN_BLOCKS : \
    QTILE * MULTI_BLOCKS) * TQ_BLOCK)
/* Fewest queries for which the tile kernel (AMX) runs instead of scand. */
#define TILE_MIN 4
/* Most queries prepared at once, and most floats per preparation buffer. */
#define QCHUNK_MAX 1024
#define QCHUNK_FLOATS (1u << 22)
/*
 * Without re-rank, the scan keeps REFINE * k candidates by the u8-table
 * estimate and re-scores them with the float tables (the same estimator
 * without the table rounding) before keeping k.  Measured on
 * Fashion-MNIST, 4-bit: recall@10 0.944 with u8 tables alone, 0.949 with
 * float tables; the refinement costs REFINE * k * dim operations a query.
 */
#define REFINE 4
/*
 * With a fixed re-rank of k * oversample candidates and the small form's
 * tables (1 and 2 bits: the query rounded to 5 or 6 bits, and at 2 bits
 * the levels to a uniform grid), the scan keeps PRERANK times as many
 * and the float tables pick the ones re-ranked.  Picked by the tables
 * alone, the candidates of text-384 at 2 bits reached recall@10 0.9264 at
 * oversample 1.5 where the dot form's 8-bit query had reached 0.9416;
 * picked so from 1.5 times as many, 0.9414 (twice: 0.9419, 1.25 times:
 * 0.9393).  The refinement has its cost: a 2-bit IVF query on
 * Fashion-MNIST (6 probes, oversample 2) took 97 us with 1.5 times, 106
 * with twice, 80 without (medians of eight runs).  The other forms round
 * less.
 */
#define PRERANK 1.5

/*
 * Candidates whose originals are requested ahead of the re-rank, and
 * candidates scored together (the f16 key kernels overlap their sums).
 */
#define RERANK_AHEAD 4
/*
 * --oversample auto over an index larger than memory: the originals asked
 * for in the first request, in multiples of k (finish_auto).
 */
#define ADVISE_FIRST 2u
#define RERANK_ROWS 4
/* Most candidates of a tile refined together (refine_tile). */
#define REFINE_TILE_MAX (1u << 18)
/* Rows the refinement scores at once. */
#define REFINE_ROWS 4

void
tq_search_params_default(struct tq_search_params *p)
{
	p->k = 10;
	p->oversample = 1.0f;
	p->threads = 0;
	p->allow = NULL;
	p->probes = 0;
	p->stats = NULL;
	p->auto_z = 0.0f;
}

/* Seconds of a monotonic clock, for struct tq_search_stats. */
static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/*
 * MSE distortion of a unit vector under the Lloyd-Max codebook of 1..4
 * bits (Gaussian limit of the coordinate law): |u - yhat|^2.
 */
static const double distortion[5] = { 0, 0.3634, 0.1175, 0.03454, 0.009497 };

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */

/*
 * The products rq[coord] * centroid[c] of field f's coordinates; the
 * coordinates past dim contribute nothing.
 */
static void
field_products(const struct tq_quantizer *q, const float *rq, uint32_t f,
    float prod[4][16])
{
	unsigned t, c;

	for (t = 0; t < q->coords_per_field; t++) {
		uint64_t coord = (uint64_t)f * q->coords_per_field + t;
		float r = coord < q->dim ? rq[coord] : 0.0f;

		for (c = 0; c < q->nlevels; c++)
			prod[t][c] = r * q->centroids[c];
	}
}

/*
 * Table entry v of a field: the sum of the products of its codes, taken
 * from v `bits` at a time, always added in the same order.
 */
static void
field_table(const struct tq_quantizer *q, float prod[4][16], float *tab)
{
	unsigned cpf = q->coords_per_field, bits = q->bits;
	unsigned entries = 1u << q->field_bits, mask = q->nlevels - 1;
	unsigned t, v;

	for (v = 0; v < entries; v++) {
		float s = prod[0][v & mask];

		for (t = 1; t < cpf; t++)
			s += prod[t][(v >> (t * bits)) & mask];
		tab[v] = s;
	}
}

/*
 * The smallest and largest entry of the table, without building it.
 * Rounding is monotone, so a float product is monotone in the centroid
 * (ascending) and a float sum in each term: the extremes of the table are
 * the sums, in the same order, of each coordinate's extreme products, and
 * they equal the minimum and maximum over the built table bit for bit.
 */
static void
field_range(const struct tq_quantizer *q, float prod[4][16], float *lo,
    float *hi)
{
	unsigned t, last = q->nlevels - 1;
	float a = 0.0f, b = 0.0f;

	for (t = 0; t < q->coords_per_field; t++) {
		float p0 = prod[t][0], p1 = prod[t][last];
		float mn = p0 < p1 ? p0 : p1, mx = p0 < p1 ? p1 : p0;

		a = t == 0 ? mn : a + mn;
		b = t == 0 ? mx : b + mx;
	}
	*lo = a;
	*hi = b;
}

/* The common table step from the widest range of any field. */
static float
lut_step(float widest)
{
	float delta = widest / 255.0f;

	return delta > 0.0f ? delta : 1.0f;
}

/*
 * x rounded to the nearest integer, ties to even, for |x| < 2^22: adding
 * and subtracting 2^23 (with x's sign) rounds in the default mode without
 * a library call (no -ffast-math: the compiler keeps it).
 */
static inline float
round_even(float x)
{
#if FLT_EVAL_METHOD == 0
	return x >= 0.0f ? (x + 0x1p23f) - 0x1p23f : (x - 0x1p23f) + 0x1p23f;
#else
	return (float)lrintf(x);
#endif
}

/*
 * |r| times the level word w[r < 0], without a branch (the signs of a
 * query's coordinates are a coin toss each); adds |r| to *neg if r < 0.
 */
static inline uint64_t
small_term(int r, const uint64_t w[2], uint32_t *neg)
{
	uint32_t n = (uint32_t)r >> 31;
	uint32_t a = ((uint32_t)r ^ (0u - n)) + n;

	*neg += a & (0u - n);
	return (uint64_t)a * w[n];
}

/* A field's 16 table entries from two words, entry v in byte v % 8. */
static inline void
table_words(uint8_t *out, uint64_t w0, uint64_t w1)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(out, &w0, 8);
	memcpy(out + 8, &w1, 8);
#else
	for (unsigned v = 0; v < 8; v++) {
		out[v] = (uint8_t)(w0 >> 8 * v);
		out[8 + v] = (uint8_t)(w1 >> 8 * v);
	}
#endif
}

/*
 * The small form's tables (internal.h, struct tq_lut) from its q8 row
 * (in the kernels' order) and levels lev: per field the offset o_f and
 * the 16 sums, each an exact integer in [0, TQ_LUT4_MAX].  Returns dotoff.
 *
 * Coordinate t's term o_t + r_t * level, with o_t = lmax * max(0, -r_t),
 * is |r_t| times the level (r_t >= 0) or times lmax less the level (r_t
 * < 0).  2 bits: each term at most 63; entry v is coordinate 0's term for
 * level v % 4 plus coordinate 1's for level v / 4.  So eight entries at a
 * time are |r_0| times a word of levels, [l0 l1 l2 l3 l0 l1 l2 l3], plus
 * |r_1| times [l0 l0 l0 l0 l1 l1 l1 l1] (then l2, l3), each byte at most
 * 126: no carry crosses a byte.  1 bit: four coordinates, bit t of the
 * entry the level of coordinate t, each term at most 31.  Byte by byte,
 * the 2-bit tables of 784 coordinates took 12.3 us, against 3.7 so and
 * 1.6 for the dot form's row alone (a microbenchmark, thread CPU time,
 * best of five).
 */
static uint32_t
small_tables(const struct tq_quantizer *q, const int8_t *q8,
    const uint8_t *lev, int lmax, uint8_t *lut)
{
	const unsigned planes = q->coords_per_field;
	uint32_t f, dotoff = 0;
	unsigned t, v;

	if (planes == 2) {
		/*
		 * Level words, as they are and complemented (r < 0): lmax
		 * in every byte less the word, no byte below 0.
		 */
		const uint64_t all = (uint64_t)lmax * 0x0101010101010101u;
		const uint64_t one_word[2] = { 1, 1 };
		uint64_t rep[2] = { 0 }, lo01[2] = { 0 }, hi23[2] = { 0 };

		for (v = 0; v < 8; v++) {
			rep[0] |= (uint64_t)lev[v % 4] << 8 * v;
			lo01[0] |= (uint64_t)lev[v / 4] << 8 * v;
			hi23[0] |= (uint64_t)lev[2 + v / 4] << 8 * v;
		}
		rep[1] = all - rep[0];
		lo01[1] = all - lo01[0];
		hi23[1] = all - hi23[0];
		for (f = 0; f < q->nfields; f++) {
			const int8_t *g = q8 + (size_t)f * 2 - f % 4;
			uint8_t *out = lut + (size_t)f * 16;
			uint32_t neg = 0, n1 = (uint32_t)(g[4] < 0);
			uint64_t base = small_term(g[0], rep, &neg), a1, w0, w1;

			a1 = small_term(g[4], one_word, &neg);
			w0 = base + a1 * lo01[n1];
			w1 = base + a1 * hi23[n1];
			table_words(out, w0, w1);
			dotoff += neg * (uint32_t)lmax;
		}
		return dotoff;
	}
	{
		/*
		 * 1 bit, the same way: coordinate t of a field is bit t of
		 * the entry, its term |r_t| times the level of that bit (r_t
		 * >= 0) or lmax less it; each at most 31, four at most 124.
		 * Level words of bits 0, 1 and 2 serve both halves of the
		 * table, bit 3 is level 0 in the first half, 1 in the second.
		 */
		const uint64_t all = (uint64_t)lmax * 0x0101010101010101u;
		const uint64_t one = 0x0101010101010101u;
		const uint64_t one_word[2] = { 1, 1 };
		uint64_t bw[3][2], b3[2][2];

		for (t = 0; t < 3; t++) {
			bw[t][0] = 0;
			for (v = 0; v < 8; v++)
				bw[t][0] |= (uint64_t)lev[v >> t & 1] << 8 * v;
			bw[t][1] = all - bw[t][0];
		}
		b3[0][0] = lev[0] * one;
		b3[0][1] = lev[1] * one;
		b3[1][0] = all - b3[0][0];
		b3[1][1] = all - b3[0][1];
		for (f = 0; f < q->nfields; f++) {
			const int8_t *g = q8 + (size_t)(f - f % 4) * 4 + f % 4;
			uint8_t *out = lut + (size_t)f * 16;
			uint32_t neg = 0, n3 = (uint32_t)(g[12] < 0);
			uint64_t base, a3, w0, w1;

			base = small_term(g[0], bw[0], &neg) +
			    small_term(g[4], bw[1], &neg) +
			    small_term(g[8], bw[2], &neg);
			a3 = small_term(g[12], one_word, &neg);
			w0 = base + a3 * b3[n3][0];
			w1 = base + a3 * b3[n3][1];
			dotoff += neg * (uint32_t)lmax;
			table_words(out, w0, w1);
		}
	}
	return dotoff;
}

/*
 * The grid of the dot and small forms: the sums use the levels
 * chat_v = sc c7_v + off, integers c7_v on a grid, for the centroids
 * cent_v, which they miss by a_v = cent_v - chat_v.  A row's sum errs by
 * sum_j rq_j a(c_j) (and the query's own rounding).  For the rows that
 * matter, the neighbours, rq is nearly a multiple of the row's unit
 * residual u, and sum_j u_j a(c_j) is close to d sum_v p_v cent_v a_v
 * (p_v: the level's share, q->cellp; E[u | level v] = cent_v): a bias of
 * every neighbour's sum, the same sign at every coordinate.  With the
 * grid spaced from end to end it is at its worst.  So sc and off are
 * fitted, the integers kept, for sum_v p_v a_v = 0 and
 * sum_v p_v cent_v a_v = 0: the level errors are then without mean and
 * unrelated to the level, and what is left of the row's error is a sum
 * of terms of either sign (tq(5) "Error bound").  Without the fit, the
 * rounding errors of the candidates an error-bounded re-rank refined
 * averaged -0.96 times round_width's width at 2 bits on Fashion-MNIST
 * (57 % beyond it; 4 bits: -0.30, 0.6 %); with it, -0.03 (0.03 %) and
 * -0.01 (0.0005 %).  Returns 0, sc and off as they were, when the
 * quantizer has no shares or the fit fails.
 */
int
tq_dot_grid(const struct tq_quantizer *q, const uint8_t *c7, float *sc,
    float *off)
{
	double p0 = 0, n1 = 0, c1 = 0, nc = 0, c2 = 0, det, s, o;

	for (unsigned v = 0; v < q->nlevels; v++) {
		double p = q->cellp[v], c = q->centroids[v], n = c7[v];

		p0 += p;
		n1 += p * n;
		c1 += p * c;
		nc += p * c * n;
		c2 += p * c * c;
	}
	det = n1 * c1 - p0 * nc;
	if (!(fabs(det) > 0.0))
		return 0;
	s = (c1 * c1 - p0 * c2) / det;
	o = (n1 * c2 - nc * c1) / det;
	if (!(s > 0.5 * *sc && s < 2.0 * *sc) || !isfinite(o))
		return 0;
	*sc = (float)s;
	*off = (float)o;
	return 1;
}

/*
 * The dot form of the tables (internal.h, struct tq_lut) for a quantizer
 * of 4-bit fields of 1 coordinate, and the small form (2 or 4: the query
 * and the levels as small integers, and the lookup tables made from
 * them).  Its error bound: per coordinate,
 * |r c - sq r8 chat| <= |r| |c - chat| + |chat| |r - sq r8|, with
 * chat = sc c7 + off the level the sum uses (tq_dot_grid); summed over the
 * coordinates with the largest level errors (err), and in quadrature,
 * the scale of the sum when its terms have either sign (rsd).
 */
static void
lut_build_dot(const struct tq_quantizer *q, const float *rq,
    struct tq_lut *t)
{
	const float *cent = q->centroids;
	const unsigned planes = q->coords_per_field, last = q->nlevels - 1;
	const int small = TQ_SMALL_FORM(q);
	/* The largest level and query value. */
	const int lmax = small ? (int)last : 127;
	const int qmax = small ? (int)(TQ_LUT4_MAX / (planes * last)) : 127;
	const size_t tabbytes = small ? (size_t)q->nfields * 16 : 0;
	int8_t *q8 = (int8_t *)(void *)(t->lut + tabbytes);
	uint32_t f = 0;
	float m = 0.0f, inv, sq, sc, dc = 0.0f, cmax = 0.0f;
	float rsum = 0.0f, dsum = 0.0f, rsq = 0.0f, rdsum = 0.0f, dsq = 0.0f;
	float off;
	int fitted;
	int32_t qsum = 0;
	uint8_t c7[16];
	unsigned v, p;

#if defined(__SSE2__)
	{
		/* maxps gives its second operand for NaN: skipped, as below. */
		const __m128 absm = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
		__m128 m0 = _mm_setzero_ps(), m1 = m0;
		float l[8];

		for (; f + 8 <= q->dim; f += 8) {
			m0 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(rq + f), absm),
			    m0);
			m1 = _mm_max_ps(_mm_and_ps(_mm_loadu_ps(rq + f + 4),
			    absm), m1);
		}
		_mm_storeu_ps(l, m0);
		_mm_storeu_ps(l + 4, m1);
		for (v = 0; v < 8; v++)
			if (l[v] > m)
				m = l[v];
	}
#endif
	for (; f < q->dim; f++)
		if (fabsf(rq[f]) > m)
			m = fabsf(rq[f]);
	inv = m > 0.0f ? (float)qmax / m : 1.0f;
	sq = m > 0.0f ? m / (float)qmax : 1.0f;
	f = 0;
#if defined(__SSE2__)
	/*
	 * Sixteen at a time: cvtps2dq rounds to nearest, ties to even, as
	 * round_even does, so the values are the same; only the error
	 * bound's float sums run in another order.  Perf had the scalar loop
	 * at 6% of an IVF query.
	 */
	{
		const __m128 vinv = _mm_set1_ps(inv), vsq = _mm_set1_ps(sq);
		const __m128 absm = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
		const __m128i lo = _mm_set1_epi16((short)-qmax);
		const __m128i hi = _mm_set1_epi16((short)qmax);
		__m128 rs = _mm_setzero_ps(), ds = _mm_setzero_ps();
		__m128 r2 = _mm_setzero_ps(), rd = r2, d2 = r2;
		__m128i qs = _mm_setzero_si128();
		float l[4];
		int32_t li[4];

		for (; f + 16 <= q->dim; f += 16) {
			__m128i iv[4], w0, w1;

			for (unsigned u = 0; u < 4; u++) {
				__m128 x = _mm_loadu_ps(rq + f + 4 * u), ax, ad;

				iv[u] = _mm_cvtps_epi32(_mm_mul_ps(x, vinv));
				ax = _mm_and_ps(x, absm);
				ad = _mm_and_ps(_mm_sub_ps(x, _mm_mul_ps(vsq,
				    _mm_cvtepi32_ps(iv[u]))), absm);
				rs = _mm_add_ps(rs, ax);
				ds = _mm_add_ps(ds, ad);
				r2 = _mm_add_ps(r2, _mm_mul_ps(ax, ax));
				rd = _mm_add_ps(rd, _mm_mul_ps(ax, ad));
				d2 = _mm_add_ps(d2, _mm_mul_ps(ad, ad));
			}
			w0 = _mm_min_epi16(_mm_max_epi16(_mm_packs_epi32(iv[0],
			    iv[1]), lo), hi);
			w1 = _mm_min_epi16(_mm_max_epi16(_mm_packs_epi32(iv[2],
			    iv[3]), lo), hi);
			qs = _mm_add_epi32(qs, _mm_madd_epi16(w0,
			    _mm_set1_epi16(1)));
			qs = _mm_add_epi32(qs, _mm_madd_epi16(w1,
			    _mm_set1_epi16(1)));
			_mm_storeu_si128((__m128i *)(void *)(q8 + f),
			    _mm_packs_epi16(w0, w1));
		}
		_mm_storeu_ps(l, rs);
		rsum = (l[0] + l[1]) + (l[2] + l[3]);
		_mm_storeu_ps(l, ds);
		dsum = (l[0] + l[1]) + (l[2] + l[3]);
		_mm_storeu_ps(l, r2);
		rsq = (l[0] + l[1]) + (l[2] + l[3]);
		_mm_storeu_ps(l, rd);
		rdsum = (l[0] + l[1]) + (l[2] + l[3]);
		_mm_storeu_ps(l, d2);
		dsq = (l[0] + l[1]) + (l[2] + l[3]);
		_mm_storeu_si128((__m128i *)(void *)li, qs);
		qsum = (li[0] + li[1]) + (li[2] + li[3]);
	}
#endif
	for (; f < q->dim; f++) {
		float r = round_even(rq[f] * inv);
		/* NaN (from a damaged index) becomes -qmax, as cvtps2dq does. */
		int iv = !(r >= (float)-qmax) ? -qmax : r > (float)qmax ?
		    qmax : (int)r;

		float ax = fabsf(rq[f]), ad = fabsf(rq[f] - sq * (float)iv);

		q8[f] = (int8_t)iv;
		qsum += iv;
		rsum += ax;
		dsum += ad;
		rsq += ax * ax;
		rdsum += ax * ad;
		dsq += ad * ad;
	}
	memset(q8 + q->dim, 0, TQ_DOT_BYTES(q) - q->dim);
	/*
	 * Into the kernels' order: each four fields' values, coordinate by
	 * coordinate, become one run of four per plane.
	 */
	if (planes > 1) {
		for (f = 0; f < q->nfields; f += 4) {
			int8_t *g = q8 + (size_t)f * planes, tmp[16];

			for (v = 0; v < 4; v++)
				for (p = 0; p < planes; p++)
					tmp[4 * p + v] = g[v * planes + p];
			memcpy(g, tmp, 4 * planes);
		}
	}

	sc = (cent[last] - cent[0]) / (float)lmax;
	if (!(sc > 0.0f))
		sc = 1.0f;
	for (v = 0; v <= last; v++) {
		float r = round_even((cent[v] - cent[0]) / sc);

		c7[v] = (uint8_t)(r < 0.0f ? 0 : r > (float)lmax ? lmax :
		    (int)r);
	}
	off = cent[0];
	fitted = tq_dot_grid(q, c7, &sc, &off);
	for (v = 0; v <= last; v++) {
		float chat = sc * (float)c7[v] + off;

		if (fabsf(cent[v] - chat) > dc)
			dc = fabsf(cent[v] - chat);
		if (fabsf(chat) > cmax)
			cmax = fabsf(chat);
	}
	for (p = 0; p < planes; p++)
		for (v = 0; v < 16; v++)
			t->lev[16 * p + v] = c7[(v >> (p * q->bits)) & last];
	t->planes = planes;
	t->entries = 16;
	t->scale = sq * sc;
	/* Slack for the float rounding of the bound's own sums. */
	t->err = (rsum * dc + dsum * cmax) * 1.001f;
	/* Unfitted, the sum's error may have a mean: no smaller width. */
	t->rsd = fitted ? sqrtf(dc * dc * rsq + 2.0f * dc * cmax * rdsum +
	    cmax * cmax * dsq) * 1.001f : INFINITY;
	if (small) {
		t->dot = 0;
		t->q8 = q8;
		t->dotoff = small_tables(q, q8, t->lev, lmax, t->lut);
		/* In double, rounded to float once. */
		t->bias = (float)((double)sq * (double)off *
		    (double)qsum - (double)t->scale * (double)t->dotoff);
		return;
	}
	t->dot = 1;
	t->q8 = NULL;
	t->dotoff = 0;
	t->bias = sq * off * (float)qsum;
}

void
tq_lut_build(const struct tq_quantizer *q, const float *rq, struct tq_lut *t)
{
	if (TQ_DOT_FORM(q) || TQ_SMALL_FORM(q)) {
		lut_build_dot(q, rq, t);
		return;
	}

	unsigned entries = 1u << q->field_bits, v;
	float prod[4][16], tab[64], delta = 0.0f, lo, hi;
	double bias = 0.0;
	uint32_t f;


	/* Pass 1: the widest range of any field sets the common step. */
	for (f = 0; f < q->nfields; f++) {
		field_products(q, rq, f, prod);
		field_range(q, prod, &lo, &hi);
		if (hi - lo > delta)
			delta = hi - lo;
	}
	delta = lut_step(delta);

	/*
	 * Pass 2: entries relative to the field's minimum, in steps, rounded
	 * to nearest, ties to even.  The quotient lies in [0, 255 + tiny], and
	 * adding and subtracting 2^23 rounds such a float to an integer
	 * exactly as lrintf does in the default rounding mode, without a
	 * library call per entry (no -ffast-math: the compiler keeps it).
	 */
	for (f = 0; f < q->nfields; f++) {
		uint8_t *out = t->lut + (size_t)f * entries;

		field_products(q, rq, f, prod);
		field_range(q, prod, &lo, &hi);
		field_table(q, prod, tab);
		for (v = 0; v < entries; v++) {
			float r = (tab[v] - lo) / delta;

#if FLT_EVAL_METHOD == 0
			r = (r + 0x1p23f) - 0x1p23f;
#else
			r = (float)lrintf(r);
#endif
			out[v] = (uint8_t)(r < 0.0f ? 0 : r > 255.0f ? 255 :
			    (int)r);
		}
		bias += lo;
	}
	t->entries = entries;
	t->dot = 0;
	t->q8 = NULL;
	t->dotoff = 0;
	t->scale = delta;
	t->bias = (float)bias;
	/* Half a step per field. */
	t->err = 0.5f * delta * (float)q->nfields;
	t->rsd = 0.5f * delta * sqrtf((float)q->nfields);
}

/* ------------------------------------------------------------------------ */
/* Per-thread work                                                           */

/*
 * A query's terms of the centre c its rows were encoded about: the
 * quantizer's, or with residual codes a list's centroid (tq(5)).
 */
struct qterm {
	float qc;	/* <q, c> */
	float qk;	/* compact factors' base: l2 -|q - c|^2, else <q, c> */
	float qq;	/* |q - c|, a little over (the error bound) */
};

/*
 * Rows [r0, r1) of an index's row space, in blocks [b0, b1), all of
 * segment p: a kernel call never crosses a segment, whose codes alone
 * are contiguous.  With residual codes a segment is one probed list of
 * one query, and qt that query's terms of the list's centroid (else
 * unused: a flat segment serves a tile of queries).
 */
struct seg {
	uint64_t b0, b1, r0, r1;
	const struct tq_part *p;
	uint32_t list;		/* IVF: the list probed */
	struct qterm qt;
};

/* What every thread reads; fixed for one chunk of queries. */
struct ctx {
	const struct tq_index *ix;
	const struct tq_quantizer *q;
	const struct tq_kernels *kern;	/* the chosen instruction set's */
	enum tq_metric metric;
	uint32_t dim;
	uint32_t k;
	int rerank;
	int stream_dot;		/* stream_dot(): single scans take scand */
	/* Fixed re-rank picked by the float tables (PRERANK): candidates
	   re-ranked a query, fewer than the scan keeps; 0: no pick. */
	uint32_t kr;
	/* Rows to skip: deleted, or outside the allow-list. */
	int masked;
	const uint32_t *allow;	/* one word per block, or NULL */
	/* Range search: keys >= rkey pass; at most rmax results (0: all). */
	int range;
	float rkey;
	size_t rmax;
	float rsigma;		/* error std of <R q, yhat> per unit |q| */
	struct rres *rres;	/* results of the chunk's queries */
	/* The chunk: queries as scored (normalised for cosine), R q. */
	const float *qv;
	const float *rq;
	const float *qc;	/* <q, c> */
	const float *qn2;	/* |q|^2 */
	const float *qk;	/* compact factors: <q, c>, l2 -|q - c|^2 */
	uint64_t *ids;		/* output rows of the chunk's first query */
	float *scores;
	uint64_t tile_blocks;	/* blocks per slice of a query tile */
	size_t qtile;		/* queries per tile */
	/*
	 * IVF: probes lists a query, probe[i * probes ..] for query i, the
	 * nearest first; query i scans the first nprobe[i] of them, or all
	 * probes if nprobe is NULL.  probes may exceed the lists asked for
	 * (pmin), so that every query's lists can hold `want` rows, k
	 * results (search_pass; live: the rows of each list that count,
	 * those not deleted or, with an allow filter, those it allows).
	 */
	uint32_t probes, pmin;
	const uint32_t *probe;
	uint32_t *nprobe;
	uint64_t want;
	const uint64_t *live;
	/* Block mode: the one query, its tables and its segments. */
	size_t query;
	const struct tq_lut *lut;
	const struct seg *segs;
	size_t nseg;
	int timed;		/* stats asked: time the phases */
	/* Error-bounded re-rank: on; each query's |q - c| (a little over);
	   2 z / sqrt(d - 1) (a little over); rho of rows without their own. */
	int autor;
	int auto_set;		/* TQ_OVERSAMPLE_AUTO_SET: results unread */
	const float *qq;
	double az;
	float rho_g;
	double zr;		/* z of the rounding's width (round_width) */
	float *qerr;		/* each query's rounding width */
	/* Residual codes: each list's own centre (struct qterm). */
	int resid;
	/* The scan drops what cannot be a contender (struct prune): on;
	   the largest |s| and |s| rho of the rows (part_wmax). */
	int prune;
	double ps, psr;
	/*
	 * Error-bounded re-rank over several passes (search_auto): the
	 * exact keys an earlier pass read for each query of the chunk, or
	 * NULL; and where this pass leaves them for a query it marks for
	 * the next (its entry set), or NULL for no next pass.
	 */
	const struct known *const *known;
	struct known **known_out;
};

/*
 * Error-bounded re-rank's scan of one query: a row whose upper end lies
 * below the k-th best lower end can neither be a result nor settle one
 * (finish_auto).  With every row's interval widened to the widest of
 * any row (part_wmax), that holds of every row whose key is below tau,
 * a function of the k-th best key seen (prune_tau).  Such rows are not
 * kept: fewer enter the heap, and of those that did, the ones below the
 * final tau are dropped before the bounds (finish_auto).  The k-th best
 * key only rises, so the rows kept are those of the whole heap above the
 * final tau, whatever the threads and batches.
 */
struct prune {
	float *kb;		/* the k best keys pushed, ascending */
	uint32_t n;
	double h, T, qn2;	/* prune_widths */
	float tau;		/* keys below it are dropped */
};

/*
 * The width the error-bounded re-rank allows for the rounding of query
 * tables t (tq(5) "Error bound"): z times the scale of a sum of
 * independent terms of either sign, as the grid makes them (tq_dot_grid),
 * and never more than their worst case.  On Fashion-MNIST the rounding
 * errors of the candidates refined were at most 0.12 (4 bits) and 0.22
 * (2 bits) of the worst case, which as the width had the re-rank refine
 * 113 of a query's 160 candidates (2 bits: all); with this width, 19
 * and 71, the same originals read and the same recall.
 */
static float
round_width(const struct ctx *c, const struct tq_lut *t)
{
	float w = (float)(c->zr * (double)t->rsd);

	return w < t->err ? w : t->err;
}

/* Candidate t of query q of a tile, row `row`. */
struct rc {
	uint64_t row;
	uint32_t q, t;
};

struct worker {
	const struct ctx *c;
	pthread_t tid;
	int started;
	int by_blocks;		/* scan blocks [b0, b1) of c->query */
	size_t q0, q1;		/* else queries [q0, q1) of the chunk */
	uint64_t b0, b1;
	struct tq_lut lut[QTILE];	/* .lut: in lutmem, lutstride apart */
	uint8_t *lutmem;
	size_t lutstride;
	uint32_t *acc;		/* ACC_SUMS sums */
	struct tq_topk cand[QTILE];	/* (estimated key, row) */
	struct tq_topk fin;	/* results: (final key, external id) */
	struct tq_topk pick;	/* pre-rank: (refined key, row), kr of them */
	uint32_t kc;		/* candidates per query */
	struct rc *rcs;		/* a tile's candidates (refine_tile), */
	struct rc *rctmp;	/* as many more to sort them */
	float *rkey;		/* their refined keys, kc per query */
	uint8_t *codes;		/* dim unpacked codes: 3-bit refinement */
	float *row;		/* dim floats: an original being re-ranked */
	struct hit *hits;	/* range search candidates, growable */
	size_t nhits, caphits;
	int nomem;		/* a block-mode range scan ran out */
	struct seg *segs;	/* a query's segments (probes of them) */
	struct qterm *lq;	/* residual codes: nlist, the terms of the
				   lists of the query being finished */
	struct tq_search_stats st;	/* this worker's share */
	struct acand *ac;	/* auto re-rank: kc candidates, */
	struct acand *actmp;	/* as many more to sort them, */
	float *ups;		/* their upper ends, sorted, */
	float *ftmp;		/* kc more floats to sort those, */
	float *sel;		/* scratch for the k-th lower end */
	struct prune pr[QTILE];	/* the scan of each heap of cand */
	float *kbmem;		/* their kb, k apart */
};

/*
 * A candidate of the error-bounded re-rank: its score interval [lo, up],
 * its key (scan, refined or exact: state 0, 1, 2) and row.
 */
struct acand {
	float lo, up, key;
	uint32_t state;
	uint64_t row;
};

/*
 * Rows read by a pass of the error-bounded re-rank, with their exact
 * keys: a[0 .. n), rows ascending.
 */
struct known {
	uint32_t n;
	struct acand a[];
};

struct hit {
	float key;
	uint64_t id;
};

/* The range results of one query. */
struct rres {
	struct hit *h;
	size_t n;
	int nomem;
};

/* Bit j: row 32 b + j (of segment p) may be returned (live and allowed). */
static uint32_t
block_mask(const struct ctx *c, const struct tq_part *p, uint64_t b)
{
	uint32_t m = ~0u;

	if (p->tomb != NULL)
		m &= ~tq_tomb_word(p, b - p->block0);
	if (c->allow != NULL)
		m &= c->allow[b];
	return m;
}

/* Segment p's codes of block b of the row space. */
static inline const uint8_t *
blk_codes(const struct ctx *c, const struct tq_part *p, uint64_t b)
{
	return p->codes + (b - p->block0) * c->ix->block_bytes;
}

/* Segment p's factors of block b of the row space. */
static inline const float *
blk_factors(const struct tq_part *p, uint64_t b)
{
	return p->factors + (b - p->block0) * TQ_BLOCK * TQ_NFACTORS;
}

/* Row r's factor s, which scales its estimate (and its error). */
static inline float
part_row_s(const struct tq_part *p, uint64_t r)
{
	float s, t;

	if (p->fach == NULL)
		return blk_factors(p, r / TQ_BLOCK)[r % TQ_BLOCK];
	tq_fach_decode(p->fach + (r / TQ_BLOCK - p->block0) * TQ_FACH_BLOCK,
	    (unsigned)(r % TQ_BLOCK), &s, &t);
	return s;
}

/* The stored original of row r of the row space. */
static inline const uint8_t *
row_orig(const struct ctx *c, uint64_t r)
{
	const struct tq_part *p = tq_part_of_row(c->ix, r);

	return tq_part_orig(p, r - p->row0, tq_orig_bytes(c->ix->originals,
	    c->dim));
}

/* Bit j: row 32 blk + j lies in rows [r0, r1) (blk within their blocks). */
static inline uint32_t
row_window(uint64_t blk, uint64_t r0, uint64_t r1)
{
	uint64_t base = blk * TQ_BLOCK;
	uint32_t m = ~0u;

	if (r0 > base)
		m &= ~0u << (r0 - base);
	if (r1 < base + TQ_BLOCK)
		m &= (1u << (r1 - base)) - 1;
	return m;
}

/*
 * A query's terms of a centre c from n2 = |q|^2 (before a cosine query's
 * normalisation), qc = <q, c> and cc = |c|^2: |q - c|^2 is that of the
 * query as scored (unit for cosine); its root a little over for the
 * rounding, the error bound's per-query part.
 */
static struct qterm
centre_qterm(enum tq_metric metric, double n2, double qc, double cc)
{
	double qq;

	if (metric == TQ_METRIC_COSINE)
		n2 = n2 > 0.0 ? 1.0 : 0.0;
	qq = n2 - 2.0 * qc + cc;
	return (struct qterm){ (float)qc, metric == TQ_METRIC_L2 ?
	    (float)-qq : (float)qc,
	    (float)(sqrt(qq > 0.0 ? qq : 0.0) * (1.0 + 1e-6)) };
}

/* Query i's terms of the quantizer's centre (prepare). */
static inline struct qterm
query_qterm(const struct ctx *c, size_t i)
{
	return (struct qterm){ c->qc[i], c->qk[i], c->qq[i] };
}

/*
 * Query i's terms of list l's centroid (residual codes): <q, c> summed by
 * tq_dot_rows, whatever the path, so that every search gives a row the
 * same key.
 */
static struct qterm
list_qterm(const struct ctx *c, size_t i, uint32_t l)
{
	const struct tq_ivf *v = &c->q->ivf;
	float qc;

	tq_dot_rows(c->qv + i * c->dim, c->dim, 1, v->cent + (size_t)l *
	    c->dim, 1, c->dim, &qc, 1);
	return centre_qterm(c->metric, (double)c->qn2[i], (double)qc,
	    (double)v->n2[l]);
}

/* The segments query i of the chunk scans; returns their number. */
static size_t
query_segs(const struct ctx *c, size_t i, struct seg *sg)
{
	const struct tq_index *ix = c->ix;
	size_t ns = 0;

	if (ix->nlist == 0) {
		for (uint32_t s = 0; s < ix->nparts; s++) {
			const struct tq_part *p = &ix->parts[s];

			sg[ns++] = (struct seg){ p->block0, p->block0 +
			    p->nblocks, p->row0, p->row0 + p->n, p, 0,
			    { 0.0f, 0.0f, 0.0f } };
		}
		return ns;
	}
	uint32_t np = c->nprobe != NULL ? c->nprobe[i] : c->probes;

	for (uint32_t t = 0; t < np; t++) {
		uint32_t l = c->probe[i * c->probes + t];
		struct qterm qt = c->resid ? list_qterm(c, i, l) :
		    (struct qterm){ 0.0f, 0.0f, 0.0f };

		for (uint32_t s = 0; s < ix->nparts; s++) {
			const struct tq_part *p = &ix->parts[s];
			uint64_t r0 = p->row0 + tq_list_off(p, l);
			uint64_t r1 = p->row0 + tq_list_off(p, l + 1);

			if (r0 < r1)
				sg[ns++] = (struct seg){ r0 / TQ_BLOCK,
				    (r1 + TQ_BLOCK - 1) / TQ_BLOCK, r0, r1, p,
				    l, qt };
		}
	}
	return ns;
}

/*
 * Residual codes: the terms of the lists of query i's segments sg[0 ..
 * ns) into w->lq, where row_qterm finds them for the candidates.
 */
static void
lq_fill(struct worker *w, const struct seg *sg, size_t ns)
{
	if (!w->c->resid)
		return;
	for (size_t e = 0; e < ns; e++)
		w->lq[sg[e].list] = sg[e].qt;
}

/*
 * The terms of query i for the rows of segment sg: those of the segment's
 * list (residual codes), or the query's own (a flat segment serves a tile
 * of queries, each with its own).
 */
static inline struct qterm
seg_qterm(const struct ctx *c, const struct seg *sg, size_t i)
{
	return c->resid ? sg->qt : query_qterm(c, i);
}

/*
 * The terms of query i for row r: its list's (residual codes; the row
 * lies in a list the query probed, whose terms lq_fill put in w->lq), or
 * the query's own.
 */
static inline struct qterm
row_qterm(const struct ctx *c, const struct worker *w, size_t i, uint64_t r)
{
	const struct tq_part *p;

	if (!c->resid)
		return query_qterm(c, i);
	p = tq_part_of_row(c->ix, r);
	return w->lq[tq_list_of_row(p, c->ix->nlist, r - p->row0)];
}

/* Asks the kernel to read bytes [a, a + len) ahead (madvise). */
static void
advise_range(const void *a, size_t len)
{
	tq_map_willneed(a, (const uint8_t *)a + len);
}

/*
 * An index larger than memory: the codes and factors of all of a query's
 * lists are asked for at once, so that a cold query waits for one round
 * of reads, not a page fault after another list by list.  A list whose
 * codes are in memory at both ends (every scan reads a list whole, so it
 * stays or leaves as one) is not asked for: on pages in memory the advice
 * only walks the page cache, which took 0.16-0.25 ms of a 0.8-1 ms warm
 * query (10M x 768, 4 probes).
 */
static void
advise_segs(const struct ctx *c, const struct seg *sg, size_t ns)
{
	if (!c->ix->beyond_memory || c->ix->nlist == 0)
		return;
	for (size_t e = 0; e < ns; e++) {
		const struct tq_part *p = sg[e].p;
		uint64_t nb = sg[e].b1 - sg[e].b0;
		const uint8_t *codes = blk_codes(c, p, sg[e].b0);
		size_t len = nb * c->ix->block_bytes;

		if (c->ix->file.residency &&
		    tq_map_resident(codes, codes + len))
			continue;
		advise_range(codes, len);
		if (p->fach != NULL)
			advise_range(p->fach + (sg[e].b0 - p->block0) *
			    TQ_FACH_BLOCK, nb * TQ_FACH_BLOCK);
		else
			advise_range(blk_factors(p, sg[e].b0),
			    nb * TQ_BLOCK * TQ_NFACTORS * sizeof(float));
		/* The list's map to its originals, read to re-rank. */
		if (c->rerank && p->omap != NULL)
			advise_range(p->omap + 4 * (sg[e].r0 - p->row0),
			    4 * (size_t)(sg[e].r1 - sg[e].r0));
	}
}

/* Asks the kernel to read the pages of row r's original (madvise). */
static void
advise_row(const struct ctx *c, uint64_t r)
{
	size_t len = tq_orig_bytes(c->ix->originals, c->dim);

	advise_range(row_orig(c, r), len);
}

/*
 * The next run of blocks to scan from *b (< b1): with a mask, blocks with
 * nothing to return are skipped and the run ends before the next such
 * block.  Returns the run's length (0: none left).
 */
static size_t
next_run(const struct ctx *c, const struct tq_part *p, uint64_t *b,
    uint64_t b1)
{
	size_t nb;

	if (!c->masked)
		return b1 - *b < SCAN_BLOCKS ? (size_t)(b1 - *b) : SCAN_BLOCKS;
	while (*b < b1 && block_mask(c, p, *b) == 0)
		(*b)++;
	for (nb = 0; nb < SCAN_BLOCKS && *b + nb < b1 &&
	    block_mask(c, p, *b + nb) != 0; nb++)
		;
	return nb;
}

/*
 * The rows of block blk of part p that a scan may return: the returned
 * count nj (the last block may be short), and *mask with bit j set for
 * rows j < nj that are live and allowed.
 */
static inline unsigned
block_rows(const struct ctx *c, const struct tq_part *p, uint64_t blk,
    uint32_t *mask)
{
	uint64_t row = (blk - p->block0) * TQ_BLOCK;
	unsigned nj = TQ_BLOCK;

	if (p->n - row < TQ_BLOCK)
		nj = (unsigned)(p->n - row);
	*mask = c->masked ? block_mask(c, p, blk) : ~0u;
	if (nj < TQ_BLOCK)
		*mask &= (1u << nj) - 1;
	return nj;
}

/*
 * The estimated keys of the rows of blocks [blk, blk + nb) of segment
 * sg's part for query i of the chunk (with sg's terms of the centre for
 * residual codes), from the kernel's sums acc (32 a block) plus off
 * (struct tq_keypar) and st, the blocks' compact factors decoded
 * (tq_fachdec_fn, 64 floats a block), or NULL: block b's keys into
 * key + 32 b, all 32 rows (a short block's padding rows have zero
 * factors), and above[b] with bit j set for keys >= thr (never NaN).
 * Higher keys are better (l2: -distance).
 */
static void
run_keys(const struct ctx *c, const struct seg *sg, const struct tq_lut *t,
    size_t i, uint64_t blk, size_t nb, const uint32_t *acc, uint32_t off,
    const float *st, float thr, float *key, uint32_t *above)
{
	const struct tq_part *p = sg->p;
	struct qterm qt = seg_qterm(c, sg, i);
	struct tq_keypar kp = { t->scale, t->bias, qt.qc, c->qn2[i],
	    c->metric == TQ_METRIC_L2, off, qt.qk };

	if (st == NULL && p->fach != NULL) {
		c->kern->keysh(acc, p->fach + (blk - p->block0) *
		    TQ_FACH_BLOCK, nb, &kp, thr, key, above);
		return;
	}
	for (size_t b = 0; b < nb; b++)
		above[b] = st != NULL ? c->kern->keysd(acc + b * TQ_BLOCK,
		    st + b * 2 * TQ_BLOCK, &kp, thr, key + b * TQ_BLOCK) :
		    c->kern->keys(acc + b * TQ_BLOCK, blk_factors(p, blk + b),
		    &kp, thr, key + b * TQ_BLOCK);
}

/*
 * Pushes candidate row r.  Copies of a vector in several lists have the
 * same codes, factors and id, so the same key: one already in the heap
 * keeps the other out, and the heap holds distinct vectors.
 */
static inline void
cand_push(const struct tq_index *ix, struct tq_topk *h, float key,
    uint64_t r)
{
	if (ix->dups > 1) {
		uint64_t id = tq_index_id(ix, r);

		for (uint32_t e = 0; e < h->len; e++)
			if (h->key[e] == key && h->id[e] != r &&
			    tq_index_id(ix, h->id[e]) == id)
				return;
	}
	tq_topk_push(h, key, r);
}

/*
 * The rows set in a block's mask.  Built for baseline x86-64, the library
 * has no popcnt instruction and __builtin_popcount is a call into libgcc
 * (1 % of a 1-bit query over Fashion-MNIST in perf); a whole block, by
 * far the most common, needs none.
 */
static inline unsigned
mask_rows(uint32_t mask)
{
	return mask == UINT32_MAX ? TQ_BLOCK :
	    (unsigned)__builtin_popcount(mask);
}

/* The key a candidate must reach once the top-k is full, else -infinity. */
static inline float
heap_thr(const struct tq_topk *h)
{
	return h->full ? h->thr : -INFINITY;
}

/*
 * Offers x to v[0 .. k), the best `have` values offered so far in
 * ascending order (v[0] the k-th best once have == k); returns have.
 */
static inline uint32_t
keep_best(float *v, uint32_t have, uint32_t k, float x)
{
	uint32_t e;

	if (have < k) {
		for (e = have++; e > 0 && v[e - 1] > x; e--)
			v[e] = v[e - 1];
		v[e] = x;
	} else if (x > v[0]) {
		for (e = 0; e + 1 < k && v[e + 1] < x; e++)
			v[e] = v[e + 1];
		v[e] = x;
	}
	return have;
}

/*
 * What pruning needs of query i of the chunk (struct prune): h, half
 * the widest a = az |s| rho of tq_bound_dist, and T, the widest
 * rounding term 2.002 |s| E of auto_bounds, with |s| rho and |s| at
 * their largest (part_wmax).
 */
static void
prune_widths(const struct ctx *c, size_t i, struct prune *pr)
{
	pr->h = c->az * c->psr / 2.0;
	pr->T = 2.002 * c->ps * (double)c->qerr[i];
	pr->qn2 = (double)c->qn2[i];
}

/* Starts the pruning of heap j of worker w for query i of the chunk. */
static void
prune_start(struct worker *w, size_t j, size_t i)
{
	const struct ctx *c = w->c;
	struct prune *pr = &w->pr[j];

	pr->n = 0;
	pr->tau = -INFINITY;
	if (c->prune) {
		prune_widths(c, i, pr);
		pr->kb = w->kbmem + j * c->k;
	}
}

/*
 * The lowest key a row may keep when the k-th best key is kk.  In
 * squared distances D (l2: -key; cosine: 2 - 2 key), tq_bound_dist
 * bounds a row's distance by (sqrt(h^2 + D - T) - h)^2 from below and
 * (sqrt(h^2 + D + T) + h)^2 from above, D its estimate (terms below 0
 * taken as 0); h and T at their largest only widen that.  So the k rows
 * of the best keys lie within U = (sqrt(h^2 + D_k + T) + h)^2, and a
 * row whose D - T exceeds (sqrt(h^2 + D_k + T) + 2 h)^2 - h^2 lies
 * beyond U: its upper end is below the k-th best lower end, so it is
 * neither a result nor counts against one (finish_auto).  The margin,
 * 1e-4 of the magnitudes, is ten times what auto_bounds allows for the
 * keys' own float rounding.
 */
static inline float
prune_tau(const struct ctx *c, float kk, const struct prune *pr)
{
	int l2 = c->metric == TQ_METRIC_L2;
	double dk = l2 ? -(double)kk : 2.0 - 2.0 * (double)kk, h = pr->h, t;

	dk += pr->T;
	t = sqrt(h * h + (dk > 0.0 ? dk : 0.0)) + 2.0 * h;
	dk = t * t - h * h + pr->T;
	dk += 1e-4 * (dk + pr->qn2 + 3.0);
	return (float)(l2 ? -dk : (2.0 - dk) / 2.0);
}

/*
 * The largest |s| and |s| rho of the rows of segment p (rho of WDTH, or
 * rho_g where it has none or an unusable value, as row_rho), each
 * +infinity if any is not finite.  Found once, by the first search that
 * prunes, and kept in p->wmax: it reads every row's factors, which a
 * flat scan reads anyway and an IVF search on a file held in memory
 * reads once.
 */
static void
part_wmax(struct tq_part *p, float rho_g, double *ms, double *msr)
{
	uint64_t v = atomic_load_explicit(&p->wmax, memory_order_acquire);
	float f[2] = { 0.0f, 0.0f };	/* |s|, |s| rho */
	uint32_t b[2];

	if (v == 0) {
		for (uint64_t t = 0; t < p->n; t++) {
			float a = fabsf(part_row_s(p, p->row0 + t));
			float rho = rho_g;

			if (p->wdth != NULL) {
				float x = tq_f16_to_f32(rd_le16(p->wdth +
				    2 * t));

				if (x >= 0.0f && x < INFINITY)
					rho = x;
			}
			if (!(a < INFINITY))
				a = INFINITY;
			f[0] = a > f[0] ? a : f[0];
			f[1] = a * rho > f[1] ? a * rho : f[1];
		}
		memcpy(b, f, sizeof(b));
		v = (uint64_t)1 << 63 | (uint64_t)b[0] << 32 | b[1];
		atomic_store_explicit(&p->wmax, v, memory_order_release);
	}
	b[0] = (uint32_t)(v >> 32) & 0x7fffffffu;
	b[1] = (uint32_t)v;
	memcpy(f, b, sizeof(f));
	*ms = f[0];
	*msr = f[1];
}

/*
 * Key x was pushed: the k best keys, and tau once there are k.  A NaN
 * key is -infinity, as in the heap.
 */
static inline void
prune_note(const struct ctx *c, struct prune *pr, float x)
{
	if (x != x)
		x = -INFINITY;
	if (pr->n == c->k && !(x > pr->kb[0]))
		return;
	pr->n = keep_best(pr->kb, pr->n, c->k, x);
	if (pr->n == c->k)
		pr->tau = prune_tau(c, pr->kb[0], pr);
}

/* The threshold of the kernel's keys: the heap's, or tau if higher. */
static inline float
scan_thr(const struct tq_topk *h, const struct prune *pr)
{
	float t = heap_thr(h);

	return pr->tau > t ? pr->tau : t;
}

/*
 * Offers the rows of block blk, their keys key and above (run_keys, for
 * a threshold no higher than the heap's root now), to heap h; rows
 * outside segment sg are skipped.  Returns the rows it may return.
 */
static inline unsigned
block_push(const struct ctx *c, uint64_t blk, const float *key,
    uint32_t above, const struct seg *sg, struct tq_topk *h,
    struct prune *pr)
{
	uint64_t row = blk * TQ_BLOCK;
	uint32_t mask;
	unsigned j, offered;

	(void)block_rows(c, sg->p, blk, &mask);
	mask &= row_window(blk, sg->r0, sg->r1);
	offered = mask_rows(mask);
	/*
	 * above is for the higher of the top-k's threshold and tau when the
	 * run began, which both only rise.
	 */
	if (h->full || pr->tau > -INFINITY)
		mask &= above;
	for (; mask != 0; mask &= mask - 1) {
		j = (unsigned)__builtin_ctz(mask);
		if ((h->full && key[j] < h->thr) || key[j] < pr->tau)
			continue;
		cand_push(c->ix, h, key[j], row + j);
		if (c->prune)
			prune_note(c, pr, key[j]);
	}
	return offered;
}

/*
 * block_push for the nb blocks of a run from blk, their keys key and
 * masks above for threshold thr (run_keys).  Returns the rows offered.
 * Once thr is above -infinity the heap is full or tau is set, and both
 * stay so: a block with no key at or above thr offers nothing, and one
 * lying whole in the segment's rows with none masked offers all 32, so
 * such a block needs no call.  In a 1-bit single query over
 * Fashion-MNIST, 92 % of the blocks are such blocks.
 */
static inline uint64_t
run_push(const struct ctx *c, uint64_t blk, size_t nb, const float *key,
    const uint32_t *above, float thr, const struct seg *sg,
    struct tq_topk *h, struct prune *pr)
{
	const struct tq_part *p = sg->p;
	uint64_t end = (blk + nb) * TQ_BLOCK, n = 0;
	int whole = thr > -INFINITY && !c->masked && blk * TQ_BLOCK >= sg->r0 &&
	    end <= sg->r1 && end - p->row0 <= p->n;

	for (size_t bi = 0; bi < nb; bi++) {
		if (whole && above[bi] == 0)
			n += TQ_BLOCK;
		else
			n += block_push(c, blk + bi, key + bi * TQ_BLOCK,
			    above[bi], sg, h, pr);
	}
	return n;
}

/*
 * The kernel's sums of blocks [b, b + nb) for one query's tables t.
 * Returns what the keys add to them first: the small form's dotoff when
 * its dot row was scanned (c->stream_dot), else 0.
 */
static inline uint32_t
scan_one(const struct ctx *c, const struct tq_part *p, const struct tq_lut *t,
    uint64_t b, size_t nb, uint32_t *acc)
{
	const struct tq_index *ix = c->ix;
	const struct tq_quantizer *q = c->q;

	if (t->dot || (c->stream_dot && t->q8 != NULL)) {
		c->kern->scand(blk_codes(c, p, b), nb,
		    ix->block_bytes, q->nfields, t->planes,
		    t->dot ? (const int8_t *)(const void *)t->lut : t->q8, 0,
		    1, t->lev, acc, 0);
		return t->dot ? 0 : t->dotoff;
	}
	c->kern->scan(blk_codes(c, p, b), nb,
	    ix->block_bytes, q->nfields, q->field_bits, t->lut, acc);
	return 0;
}

/*
 * Do single queries of index ix at `probes` read their 2-bit codes
 * through the dot kernel?  Both give the same sums.  From memory the
 * AVX-512 dot kernel was the faster: 100K x 1536 (38 MB of codes), p50
 * 2.24 ms against 2.50 for the lookup tables (six alternated pairs on a
 * Zen 4 EPYC); in cache the lookup tables were (10 000 rows: 0.18 ms
 * against 0.23; Fashion-MNIST's 12 MB: 0.48 against 0.67).  So the dot
 * kernel takes scans of STREAM_DOT_BYTES a query or more, or of
 * $TQ_STREAM_DOT bytes (a number >= 0; tests set 0).
 */
#define STREAM_DOT_BYTES (16u << 20)
static int
stream_dot(const struct tq_index *ix, uint32_t probes,
    const struct tq_kernels *kern)
{
	const struct tq_quantizer *q = ix->q;
	double bytes = (double)ix->nblocks * (double)ix->block_bytes;
	double limit = STREAM_DOT_BYTES;
	const char *e;

	if (!kern->stream_dot || !TQ_SMALL_FORM(q) ||
	    q->coords_per_field != 2)
		return 0;
	if ((e = getenv("TQ_STREAM_DOT")) != NULL && *e != '\0') {
		char *end;
		double v = strtod(e, &end);

		if (*end == '\0' && v >= 0.0)
			limit = v;
	}
	if (ix->nlist > 0 && probes > 0 && probes < ix->nlist)
		bytes *= (double)probes / (double)ix->nlist;
	return bytes >= limit;
}

/*
 * Scans blocks [b0, b1) of segment sg for query i of the chunk into heap
 * h; rows outside the segment are skipped.
 */
static void
scan_range(struct worker *w, const struct tq_lut *t, size_t i, uint64_t b0,
    uint64_t b1, const struct seg *sg, struct tq_topk *h)
{
	const struct ctx *c = w->c;
	struct prune *pr = &w->pr[h - w->cand];
	float key[SCAN_BLOCKS * TQ_BLOCK];
	uint32_t above[SCAN_BLOCKS];
	uint64_t b;
	size_t nb;

	for (b = b0; (nb = next_run(c, sg->p, &b, b1)) > 0; b += nb) {
		uint32_t off = scan_one(c, sg->p, t, b, nb, w->acc);

		/* The keys of the run at once, for the root as it was. */
		float thr = scan_thr(h, pr);

		run_keys(c, sg, t, i, b, nb, w->acc, off, NULL, thr, key,
		    above);
		w->st.rows_scanned += run_push(c, b, nb, key, above, thr, sg,
		    h, pr);
	}
}

/*
 * scan_range for queries i .. i + m - 1 of the chunk at once (tables
 * t[0 .. m), heaps h[0 .. m)), through the multi-query kernel in runs of
 * MULTI_BLOCKS: each heap sees its blocks in the same order as alone.
 */
static void
scan_range_multi(struct worker *w, const struct tq_lut *t, size_t i,
    size_t m, uint64_t b0, uint64_t b1, const struct seg *sg,
    struct tq_topk *h)
{
	const struct ctx *c = w->c;
	const struct tq_index *ix = c->ix;
	const uint8_t *luts[QTILE];
	const size_t stride = MULTI_BLOCKS * TQ_BLOCK;
	/* Compact factors, decoded once for all the queries (or NULL). */
	float decbuf[MULTI_BLOCKS * 2 * TQ_BLOCK];
	float *dec = sg->p->fach != NULL ? decbuf : NULL;
	float key[MULTI_BLOCKS * TQ_BLOCK];
	uint32_t above[MULTI_BLOCKS];
	uint64_t b;
	size_t nb, j;

	for (j = 0; j < m; j++)
		luts[j] = t[j].lut;
	for (b = b0; (nb = next_run(c, sg->p, &b, b1)) > 0; b += nb) {
		int tiled = 0;	/* small-form sums from the tile kernel */

		if (nb > MULTI_BLOCKS)
			nb = MULTI_BLOCKS;
		if (t[0].dot) {
			/* The tables of a worker lie lutstride bytes apart. */
			tq_scand_fn fn = c->kern->scand_tile != NULL &&
			    m >= TILE_MIN ? c->kern->scand_tile :
			    c->kern->scand;

			fn(blk_codes(c, sg->p, b), nb,
			    ix->block_bytes, c->q->nfields, t[0].planes,
			    (const int8_t *)(const void *)t[0].lut, w->lutstride,
			    (unsigned)m, t[0].lev, w->acc, stride);
		} else if (t[0].q8 != NULL && c->kern->scand_tile != NULL &&
		    m >= TILE_MIN) {
			/* The small form: dot sums; the keys add dotoff. */
			c->kern->scand_tile(blk_codes(c, sg->p, b), nb,
			    ix->block_bytes, c->q->nfields, t[0].planes,
			    t[0].q8, w->lutstride, (unsigned)m, t[0].lev,
			    w->acc, stride);
			tiled = 1;
		} else {
			c->kern->scan4x(blk_codes(c, sg->p, b), nb,
			    ix->block_bytes, c->q->nfields, luts, (unsigned)m,
			    w->acc, stride);
		}
		if (dec != NULL)
			for (size_t bi = 0; bi < nb; bi++)
				c->kern->fachdec(sg->p->fach + (b + bi -
				    sg->p->block0) * TQ_FACH_BLOCK,
				    dec + bi * 2 * TQ_BLOCK);
		for (j = 0; j < m; j++) {
			float thr = scan_thr(&h[j], &w->pr[j]);

			run_keys(c, sg, &t[j], i + j, b, nb,
			    w->acc + j * stride, tiled ? t[j].dotoff : 0, dec,
			    thr, key, above);
			w->st.rows_scanned += run_push(c, b, nb, key, above,
			    thr, sg, &h[j], &w->pr[j]);
		}
	}
}

/*
 * The exact key of stored row r for query vector qv.  An f16 row is
 * converted whole first (exactly, by the f16 kernel), so the sum below
 * runs without a call in its dependency chain.  An f32 row on a
 * little-endian host is summed where it lies (the mapping's bytes have
 * no declared type) when aligned, as tq(5)'s 64-byte aligned sections
 * make it: the copy a coordinate at a time that it replaced was 13 % of
 * a 4-bit IVF single query on Fashion-MNIST (8 probes, oversample 2).
 */
static float
exact_key(const struct ctx *c, struct worker *w, const float *qv, uint64_t r)
{
	const uint8_t *src = row_orig(c, r);

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	if (c->ix->originals == TQ_ORIG_F32 &&
	    (uintptr_t)src % _Alignof(float) == 0)
		return tq_exact_key(c->metric, qv, (const float *)(const void *)
		    src, c->dim);
#endif
	tq_orig_row(c->kern, c->ix->originals, src, c->dim, w->row);
	return tq_exact_key(c->metric, qv, w->row, c->dim);
}

/*
 * The exact keys of stored rows r[0 .. n) (n <= RERANK_ROWS) for query
 * vector qv: f16 originals through the kernel that converts as it sums,
 * where there is one; the same bits as exact_key.
 */
static void
exact_keys(const struct ctx *c, struct worker *w, const float *qv,
    const uint64_t *r, unsigned n, float *key)
{
	const struct tq_index *ix = c->ix;
	const uint8_t *rows[RERANK_ROWS];
	unsigned t;

	if (ix->originals == TQ_ORIG_F16 && c->kern->keyf16 != NULL) {
		for (t = 0; t < n; t++)
			rows[t] = row_orig(c, r[t]);
		c->kern->keyf16(c->metric, qv, rows, n, c->dim, key);
		return;
	}
	for (t = 0; t < n; t++)
		key[t] = exact_key(c, w, qv, r[t]);
}

/*
 * Row r's centroids, dequantized into y: the refinement of 6-bit fields
 * (3-bit codes); 4-bit fields go through the dotq4 kernels.
 */
static void
dequantize(const struct ctx *c, struct worker *w, uint64_t r, float *y)
{
	const struct tq_quantizer *q = c->q;

	const struct tq_part *p = tq_part_of_row(c->ix, r);

	tq_unpack_block_row(q, blk_codes(c, p, r / TQ_BLOCK),
	    (unsigned)(r % TQ_BLOCK), w->codes);
	for (uint32_t d = 0; d < c->dim; d++)
		y[d] = q->centroids[w->codes[d]];
}

/*
 * The estimated key of stored row r for query i of the chunk with float
 * tables, from dot = <R q, yhat> summed in double (the lanes of
 * tq_exact_key) instead of through the integer tables.
 */
static float
refined_key(const struct ctx *c, const struct worker *w, size_t i, uint64_t r,
    double dot)
{
	const struct tq_part *p = tq_part_of_row(c->ix, r);
	unsigned j = (unsigned)(r % TQ_BLOCK);
	struct qterm qt = row_qterm(c, w, i, r);
	const float *fs;
	double ip;

	if (p->fach != NULL) {
		float s, t;

		tq_fach_decode(p->fach + (r / TQ_BLOCK - p->block0) *
		    TQ_FACH_BLOCK, j, &s, &t);
		return (float)((double)qt.qk + (double)s *
		    ((c->metric == TQ_METRIC_L2 ? 2.0 : 1.0) * dot +
		    (double)t));
	}
	fs = blk_factors(p, r / TQ_BLOCK);
	ip = (double)fs[j] * dot + (double)fs[TQ_BLOCK + j] + (double)qt.qc;
	if (c->metric == TQ_METRIC_L2)
		return (float)-((double)c->qn2[i] - 2.0 * ip +
		    (double)fs[2 * TQ_BLOCK + j]);
	return (float)ip;
}

/*
 * The refined keys of rows r[t] for queries qi[t] of the chunk, t < n
 * (n <= REFINE_ROWS), into key[t].  4-bit fields: the dotq4 kernel reads
 * each row's nibbles straight from its block (they lie 16 bytes apart
 * across it) and sums in the lanes of tq_dot_lanes, so the keys are those
 * of the dequantized rows; several rows at once overlap their loads and
 * their chains of adds.  Gathering the nibbles into bytes, dequantizing
 * into floats and summing those (tq_dot_lanes) took as long as the whole
 * scan of an IVF query (Fashion-MNIST, 4 probes).
 */
static void
refined_keys(const struct ctx *c, struct worker *w, const size_t *qi,
    const uint64_t *r, unsigned n, float *key)
{
	const struct tq_quantizer *q = c->q;
	const float *rq[REFINE_ROWS] = { NULL };
	const uint8_t *blk[REFINE_ROWS] = { NULL };
	unsigned pos[REFINE_ROWS] = { 0 }, t;
	double dot[REFINE_ROWS];

	if (q->field_bits != 4) {
		for (t = 0; t < n; t++) {
			dequantize(c, w, r[t], w->row);
			key[t] = refined_key(c, w, qi[t], r[t], tq_dot_lanes(
			    c->rq + qi[t] * c->dim, w->row, c->dim));
		}
		return;
	}
	for (t = 0; t < n; t++) {
		rq[t] = c->rq + qi[t] * c->dim;
		blk[t] = blk_codes(c, tq_part_of_row(c->ix, r[t]),
		    r[t] / TQ_BLOCK);
		pos[t] = (unsigned)(r[t] % TQ_BLOCK);
	}
	c->kern->dotq4(rq, blk, pos, n, c->dim, q->bits, q->centroids, dot);
	for (t = 0; t < n; t++)
		key[t] = refined_key(c, w, qi[t], r[t], dot[t]);
}

/*
 * Orders the n candidates a of a tile by block (row / 32), the order in
 * which refine_tile reads them: a few by insertion, more by an LSD radix
 * sort of 8-bit digits, as many as the largest block number has, through
 * tmp (n more).  glibc's qsort, a merge sort through a comparison call,
 * was 3.3 % of a 1-bit batch over Fashion-MNIST in perf.
 */
#define RC_BLOCK(x) ((x).row / TQ_BLOCK)
static void
rc_sort(struct rc *a, size_t n, struct rc *tmp)
{
	struct rc *src = a, *dst = tmp, *x;
	uint64_t top = 0;
	size_t i, j;

	if (n <= 32) {
		for (i = 1; i < n; i++) {
			struct rc v = a[i];

			for (j = i; j > 0 && RC_BLOCK(a[j - 1]) > RC_BLOCK(v);
			    j--)
				a[j] = a[j - 1];
			a[j] = v;
		}
		return;
	}
	for (i = 0; i < n; i++)
		top |= RC_BLOCK(a[i]);
	for (unsigned sh = 0; sh < 64 && top >> sh != 0; sh += 8) {
		size_t pos[256] = { 0 }, sum = 0;

		for (i = 0; i < n; i++)
			pos[RC_BLOCK(src[i]) >> sh & 255]++;
		if (pos[RC_BLOCK(src[0]) >> sh & 255] == n)
			continue;	/* one digit: already in order */
		for (i = 0; i < 256; i++) {
			size_t c = pos[i];

			pos[i] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
			dst[pos[RC_BLOCK(src[i]) >> sh & 255]++] = src[i];
		x = src;
		src = dst;
		dst = x;
	}
	if (src != a)
		memcpy(a, src, n * sizeof(*a));
}

/*
 * The refined keys of every candidate of queries i .. i + m - 1 of the
 * chunk (heaps w->cand), into w->rkey[j * kc + t] for candidate t of query
 * i + j.  One query's candidates lie in as many blocks, each read from
 * memory for one row; a tile's candidates, taken in row order, read each
 * block once for all the rows and queries that need it, in address
 * order.  The keys are those of refined_keys, whatever the order.
 */
static void
refine_tile(struct worker *w, size_t i, size_t m)
{
	const struct ctx *c = w->c;
	size_t n = 0, e;

	for (size_t j = 0; j < m; j++) {
		tq_topk_settle(&w->cand[j]);
		for (uint32_t t = 0; t < w->cand[j].len; t++)
			w->rcs[n++] = (struct rc){ w->cand[j].id[t],
			    (uint32_t)j, t };
	}
	rc_sort(w->rcs, n, w->rctmp);
	for (e = 0; e < n; e += REFINE_ROWS) {
		unsigned nr = n - e < REFINE_ROWS ? (unsigned)(n - e) :
		    REFINE_ROWS, t;
		size_t qi[REFINE_ROWS];
		uint64_t rows[REFINE_ROWS];
		float key[REFINE_ROWS];

		for (t = 0; t < nr; t++) {
			qi[t] = i + w->rcs[e + t].q;
			rows[t] = w->rcs[e + t].row;
		}
		refined_keys(c, w, qi, rows, nr, key);
		for (t = 0; t < nr; t++)
			w->rkey[(size_t)w->rcs[e + t].q * w->kc +
			    w->rcs[e + t].t] = key[t];
	}
}

/* Does heap h hold id? */
static int
has_id(const struct tq_topk *h, uint64_t id)
{
	for (uint32_t t = 0; t < h->len; t++)
		if (h->id[t] == id)
			return 1;
	return 0;
}

/*
 * Asks for the original of row r, every cache line of it: the rows of a
 * query's candidates lie anywhere in the file, each a fresh miss.
 */
static void
prefetch_original(const struct ctx *c, uint64_t r)
{
	size_t len = tq_orig_bytes(c->ix->originals, c->dim), o;
	uintptr_t p = (uintptr_t)row_orig(c, r);

	for (o = 0; o < len; o += 64)
		__builtin_prefetch((const void *)(p + o));
}

/* Writes the results of query i from w->fin, best first. */
static void
finish_out(struct worker *w, size_t i)
{
	const struct ctx *c = w->c;
	uint64_t *ids = c->ids + i * c->k;
	float *scores = c->scores + i * c->k;

	tq_topk_sort(&w->fin);
	for (uint32_t t = 0; t < c->k; t++) {
		if (t < w->fin.len) {
			ids[t] = w->fin.id[t];
			scores[t] = c->metric == TQ_METRIC_L2 ?
			    -w->fin.key[t] : w->fin.key[t];
		} else {
			ids[t] = UINT64_MAX;
			scores[t] = NAN;
		}
	}
	w->st.results += w->fin.len < c->k ? w->fin.len : c->k;
}

/* Row r's rho (WDTH), or the global one where it has none. */
static inline float
row_rho(const struct ctx *c, uint64_t r)
{
	const struct tq_part *p = tq_part_of_row(c->ix, r);
	float v;

	if (p->wdth == NULL)
		return c->rho_g;
	v = tq_f16_to_f32(rd_le16(p->wdth + 2 * (r - p->row0)));
	return v >= 0.0f && v < INFINITY ? v : c->rho_g;
}

/*
 * The score interval of candidate a of query i from its key (a->key):
 * tq(5) "Error bound".  Every metric is bounded through a squared
 * distance D that is never below |q - x|^2 (the bound's width grows with
 * it): l2 the key's own, cosine 2 - 2 <q, x>, ip |q|^2 + |x|^2 - 2 <q, x>;
 * the estimate of D errs by twice that of <q, x>.  A scan key (state 0)
 * also errs by the rounding of the query's tables, |s| E (twice in D).
 * The keys' own float rounding is allowed for with a relative margin.
 */
/*
 * Asks for what auto_bounds reads of row r: its factors (s; for ip with
 * f32 factors |x|^2) and its width.  The candidates lie in as many
 * blocks, long evicted from the caches by the scan.
 */
#define BOUNDS_AHEAD 8
static inline void
prefetch_bounds(const struct ctx *c, uint64_t r)
{
	const struct tq_part *p = tq_part_of_row(c->ix, r);
	unsigned j = (unsigned)(r % TQ_BLOCK);

	if (p->fach != NULL) {
		const uint8_t *fh = p->fach + (r / TQ_BLOCK - p->block0) *
		    TQ_FACH_BLOCK;

		__builtin_prefetch(fh + 2 * j);
		__builtin_prefetch(fh + 2 * TQ_BLOCK + 2 * j);
		__builtin_prefetch(fh + 4 * TQ_BLOCK + j);
	} else {
		const float *fs = blk_factors(p, r / TQ_BLOCK);

		__builtin_prefetch(fs + j);
		__builtin_prefetch(fs + 2 * TQ_BLOCK + j);
	}
	if (p->wdth != NULL)
		__builtin_prefetch(p->wdth + 2 * (r - p->row0));
}

/*
 * What the rounding of the compact factors, at most e, adds to a bound
 * of half-width w of the codes' error: the two errors are independent,
 * the rounding's about uniform on [-e, e] (standard deviation e /
 * sqrt(3)), so at the codes' confidence their sum is within
 * sqrt(w^2 + (z_u e)^2), z_u = 2 / sqrt(3) (z = 2 of the default); z_u
 * e is at least e, so the rounding is covered where the codes' error
 * vanishes (d = 1: w = 0).
 */
#define FACT_ZU 1.1548

static inline double
fact_width(double w, double e)
{
	double u = FACT_ZU * e;

	return sqrt(w * w + u * u) - w;
}

static void
auto_bounds(const struct ctx *c, const struct worker *w, size_t i,
    struct acand *a)
{
	const struct tq_part *p = tq_part_of_row(c->ix, a->row);
	unsigned j = (unsigned)(a->row % TQ_BLOCK);
	/* Compact factors (FACH) keep no |x|^2: 0 where it is not needed. */
	double s, x2 = p->fach == NULL ?
	    (double)blk_factors(p, a->row / TQ_BLOCK)[2 * TQ_BLOCK + j] : 0.0;
	double qn2 = (double)c->qn2[i], beta, dh, eps, ef = 0.0, t, wa, lo, hi;
	struct qterm qt = row_qterm(c, w, i, a->row);
	double qq = (double)qt.qq;
	int l2 = c->metric == TQ_METRIC_L2;

	if (p->fach != NULL) {
		float fs, ft;

		tq_fach_decode(p->fach + (a->row / TQ_BLOCK - p->block0) *
		    TQ_FACH_BLOCK, j, &fs, &ft);
		s = fabs((double)fs);
		/*
		 * The f16 rounding of s and t moves the key by at most
		 * 2^-11 (|key - base| + |s t|) (tq(5) FACH), with a little
		 * over for the float operations: far below the codes'
		 * error, except where the codes are all but exact (d = 1)
		 * and the neighbours close.  It joins the codes' error as
		 * the sum of two independent ones (fact_width).
		 */
		ef = 0x1.002p-11 * (fabs((double)a->key - (double)qt.qk) + s *
		    fabs((double)ft));
	} else {
		s = fabs((double)part_row_s(p, a->row));
	}

	if (c->metric == TQ_METRIC_IP && p->fach != NULL) {
		/*
		 * ip without |x|^2: no distance to narrow the width with,
		 * so the width of any angle, A |q'| / 2 on the key.
		 */
		double key = (double)a->key, wd;

		t = a->state == 0 ? 1.001 * s * (double)c->qerr[i] : 0.0;
		wd = c->az * s * (double)row_rho(c, a->row) * qq / 2.0;
		wd += fact_width(wd, ef) + t + 1e-5 * (fabs(key) + qn2) +
		    1e-30;
		a->up = (float)(key + wd);
		a->lo = (float)(key - wd);
		goto sane;
	}
	if (l2)
		beta = 0.0;
	else if (c->metric == TQ_METRIC_COSINE)
		beta = 2.0;
	else
		beta = qn2 + fabs(x2);
	dh = l2 ? -(double)a->key : beta - 2.0 * (double)a->key;
	eps = 1e-5 * (fabs(dh) + beta + qn2 + fabs(x2)) + 1e-30;
	t = a->state == 0 ? 2.0 * 1.001 * s * (double)c->qerr[i] : 0.0;
	wa = c->az * s * (double)row_rho(c, a->row);
	/* The factors' rounding, z_u e (fact_width), in quadrature. */
	tq_bound_dist(dh - t - eps, dh + t + eps, wa, qq,
	    FACT_ZU * (l2 ? ef : 2.0 * ef), &lo, &hi);
	if (l2) {
		a->up = (float)-lo;
		a->lo = (float)-hi;
	} else {
		a->up = (float)((beta - lo) / 2.0);
		a->lo = (float)((beta - hi) / 2.0);
	}
	/*
	 * A hostile file's factors can make the ends NaN, which would break
	 * the sorted upper ends: such a candidate may be anything.
	 */
sane:
	if (a->up != a->up || a->lo != a->lo) {
		a->up = INFINITY;
		a->lo = -INFINITY;
	}
}

/*
 * The sorts of finish_auto: a merge sort, runs of SORT_RUN by insertion
 * first, with the order written inline.  glibc's qsort (a merge sort
 * through a call per comparison) of some 150 candidates, three times a
 * query, was 2.8 % of single 2-bit queries over text-384 with
 * --oversample auto (perf).  Equal elements (equal floats) are
 * interchangeable, and candidates are never equal (distinct rows), so
 * the result is the one order, whatever the algorithm.
 */
#define SORT_RUN 8
#define DEFINE_MERGE_SORT(name, type, before)				\
static void								\
name(type *a, size_t n, type *tmp)					\
{									\
	type *src = a, *dst = tmp, *x;					\
	size_t i, j, o, w, lo, mid, hi;					\
									\
	for (lo = 0; lo < n; lo += SORT_RUN) {				\
		hi = n - lo < SORT_RUN ? n : lo + SORT_RUN;		\
		for (i = lo + 1; i < hi; i++) {				\
			type v = a[i];					\
									\
			for (j = i; j > lo && before(&v, &a[j - 1]); j--) \
				a[j] = a[j - 1];			\
			a[j] = v;					\
		}							\
	}								\
	for (w = SORT_RUN; w < n; w *= 2) {				\
		for (lo = 0; lo < n; lo += 2 * w) {			\
			mid = n - lo < w ? n : lo + w;			\
			hi = n - lo < 2 * w ? n : lo + 2 * w;		\
			for (i = lo, j = mid, o = lo; o < hi; o++)	\
				dst[o] = j < hi && (i == mid ||		\
				    before(&src[j], &src[i])) ?		\
				    src[j++] : src[i++];		\
		}							\
		x = src;						\
		src = dst;						\
		dst = x;						\
	}								\
	if (src != a)							\
		memcpy(a, src, n * sizeof(*a));				\
}

/* Descending floats (no NaN). */
static inline int
f_before(const float *x, const float *y)
{
	return *x > *y;
}

DEFINE_MERGE_SORT(sort_fdesc, float, f_before)

/*
 * The k best lower ends of ac[0 .. n) (n >= k) into w->sel, ascending,
 * so that w->sel[0] is the k-th best.  For small k an insertion into the
 * k kept is a few compares a candidate (most fall below the k-th); the
 * qsorts of finish_auto, this one among them, were 7.6 % of the perf
 * samples of single 4-bit IVF queries on Fashion-MNIST.
 */
#define FLOOR_INSERT_K 64u
static void
floor_init(struct worker *w, uint32_t n, uint32_t k)
{
	float *v = w->sel;
	uint32_t t, e;

	if (k > FLOOR_INSERT_K) {
		for (t = 0; t < n; t++)
			v[t] = w->ac[t].lo;
		sort_fdesc(v, n, w->ftmp);
		for (t = 0; t < k / 2; t++) {
			float x = v[t];

			v[t] = v[k - 1 - t];
			v[k - 1 - t] = x;
		}
		return;
	}
	for (t = 0, e = 0; t < n; t++)
		e = keep_best(v, e, k, w->ac[t].lo);
}

/*
 * A lower end rose from old to nv: the k best lower ends (w->sel[0 .. k),
 * ascending) as a multiset of values.  If old was one of them, one copy
 * of it gives way to nv; else nv displaces the smallest, if larger.
 * Returns -1 if old was one of them and nv < old (the exact key of a
 * candidate below its bound): the caller starts them again.
 */
static int
floor_raise(struct worker *w, uint32_t k, float old, float nv)
{
	float *v = w->sel;
	uint32_t e;

	if (old >= v[0]) {
		if (nv < old)
			return -1;
		for (e = 0; e < k && v[e] != old; e++)
			;
		if (e == k)
			return -1;	/* not reached */
	} else if (nv > v[0]) {
		e = 0;
	} else {
		return 0;
	}
	while (e + 1 < k && v[e + 1] < nv) {
		v[e] = v[e + 1];
		e++;
	}
	v[e] = nv;
	return 0;
}

/* How many of ups[0 .. n) (descending) are >= x. */
static uint32_t
count_at_least(const float *ups, uint32_t n, float x)
{
	uint32_t l = 0, r = n;

	while (l < r) {
		uint32_t mid = l + (r - l) / 2;

		if (ups[mid] >= x)
			l = mid + 1;
		else
			r = mid;
	}
	return l;
}

/*
 * Replaces the value old of ups[0 .. n) (descending) by nv: lower, or
 * higher when an exact key lies above its bound.
 */
static void
ups_replace(float *ups, uint32_t n, float old, float nv)
{
	uint32_t e = count_at_least(ups, n, old);

	if (e == 0)
		return;		/* not there: never, with the ends made sane */
	e--;			/* a slot of old */
	while (e + 1 < n && ups[e + 1] > nv) {
		ups[e] = ups[e + 1];
		e++;
	}
	while (e > 0 && ups[e - 1] < nv) {
		ups[e] = ups[e - 1];
		e--;
	}
	ups[e] = nv;
}

/*
 * Larger than memory: asks the kernel for the originals of at most max
 * candidates of ac[from .. m) that the walk of finish_auto may read (more
 * than k upper ends reach their lower end), in walk order.  Returns where
 * the next such request starts.
 */
static uint32_t
advise_open(const struct worker *w, uint32_t from, uint32_t m, uint32_t nu,
    uint32_t k, uint32_t max)
{
	uint32_t t, e = 0;

	for (t = from; t < m && e < max; t++)
		if (count_at_least(w->ups, nu, w->ac[t].lo) > k) {
			advise_row(w->c, w->ac[t].row);
			e++;
		}
	return t;
}

/* Higher upper end first, then smaller row (ends are never NaN). */
static inline int
acand_before(const struct acand *x, const struct acand *y)
{
	return x->up > y->up || (x->up == y->up && x->row < y->row);
}

DEFINE_MERGE_SORT(sort_acand, struct acand, acand_before)

/* Moves the candidates of ac[0 .. n) with up >= fl to the front. */
static uint32_t
contenders(struct acand *ac, uint32_t n, float fl)
{
	uint32_t m = 0;

	for (uint32_t t = 0; t < n; t++)
		if (ac[t].up >= fl) {
			struct acand x = ac[m];

			ac[m++] = ac[t];
			ac[t] = x;
		}
	return m;
}

/*
 * The stage of finish_auto over ac[0 .. n), whose intervals are set:
 * refines and reads until no candidate can go either way, and returns
 * m, with the results among ac[0 .. m) (those whose upper end reaches
 * w->sel[0]).  Candidates already refined (state 1) or read (state 2) by
 * an earlier stage keep their intervals: none is refined or read twice.
 */
static uint32_t
auto_stage(struct worker *w, size_t i, uint32_t n, uint32_t k,
    uint32_t *done, double *tr)
{
	const struct ctx *c = w->c;
	double t0 = tr != NULL ? now() : 0.0;
	const float *qv = c->qv + i * c->dim;
	struct acand *ac = w->ac;
	uint32_t t, e, m, pf, ns, nu, adv, nr = 0;
	float fl;
	size_t qi[REFINE_ROWS] = { i, i, i, i };

	floor_init(w, n, k);
	/*
	 * Only those reaching the k-th best lower end are walked, so only
	 * they are sorted; the rest only if that end falls below where it
	 * started (a refined lower end below its scan one).
	 */
	fl = w->sel[0];
	ns = contenders(ac, n, fl);
	sort_acand(ac, ns, w->actmp);

	/*
	 * Best scan upper end first, those that still reach the k-th best
	 * lower end are scored again with unrounded tables, a few rows at a
	 * time; the tighter lower ends raise it.
	 */
	for (m = 0;;) {
		uint64_t rows[REFINE_ROWS];
		uint32_t at[REFINE_ROWS];
		float rk[REFINE_ROWS];
		unsigned u;

		if (ns < n && w->sel[0] < fl) {
			sort_acand(ac + ns, n - ns, w->actmp);
			ns = n;
		}
		if (m >= n || ac[m].up < w->sel[0])
			break;
		for (e = 0; e < REFINE_ROWS && m < n &&
		    ac[m].up >= w->sel[0]; m++)
			if (ac[m].state == 0) {
				at[e] = m;
				rows[e++] = ac[m].row;
			}
		if (e == 0)
			continue;
		refined_keys(c, w, qi, rows, e, rk);
		nr += e;
		for (u = 0; u < e; u++) {
			struct acand *a = &ac[at[u]];
			float old = a->lo;

			a->key = rk[u];
			a->state = 1;
			auto_bounds(c, w, i, a);
			if (floor_raise(w, k, old, a->lo) != 0)
				floor_init(w, n, k);
		}
	}
	w->st.refined += nr;
	floor_init(w, m, k);
	m = contenders(ac, m, w->sel[0]);
	sort_acand(ac, m, w->actmp);
	/*
	 * Every candidate's upper end counts against the others', but only
	 * those at or above the lowest lower end of the contenders can
	 * count (count_at_least is asked of their lower ends, which do not
	 * change until they are read).
	 */
	fl = INFINITY;
	for (t = 0; t < m; t++)
		fl = ac[t].lo < fl ? ac[t].lo : fl;
	for (t = 0, nu = 0; t < n; t++)
		if (ac[t].up >= fl)
			w->ups[nu++] = ac[t].up;
	sort_fdesc(w->ups, nu, w->ftmp);
	if (tr != NULL)
		*tr += now() - t0;

	/*
	 * The originals of the next RERANK_AHEAD candidates not settled
	 * when they were looked at are requested while others are scored
	 * (those settled later are requested for nothing).
	 */
	/*
	 * Larger than memory: the first ADVISE_FIRST x k of those that may be
	 * read are asked for at once, then k more of those still open each
	 * time the walk passes the last one asked for.  Reads settle others:
	 * asking for every open one at the start read from disk about twice
	 * the originals the walk used at 2 bits (text-384: 212 KiB a query
	 * against 133-143 now, 24.6 originals used).
	 */
	adv = c->ix->beyond_memory ? advise_open(w, 0, m, nu, k,
	    ADVISE_FIRST * k) : m;
	for (pf = 0, e = 0; pf < m && e < RERANK_AHEAD; pf++)
		if (ac[pf].state != 2 &&
		    count_at_least(w->ups, nu, ac[pf].lo) > k) {
			prefetch_original(c, ac[pf].row);
			e++;
		}
	for (t = 0; t < m && ac[t].up >= w->sel[0]; t++) {
		struct acand *a = &ac[t];
		float key;

		if (a->state == 2 || count_at_least(w->ups, nu, a->lo) <= k)
			continue;	/* a result, whatever the others */
		if (t >= adv)
			adv = advise_open(w, t, m, nu, k, k);
		for (pf = pf > t ? pf : t + 1; pf < m; pf++)
			if (ac[pf].state != 2 &&
			    count_at_least(w->ups, nu, ac[pf].lo) > k) {
				prefetch_original(c, ac[pf++].row);
				break;
			}
		exact_keys(c, w, qv, &a->row, 1, &key);
		if (key != key)		/* a hostile file's NaN original */
			key = -INFINITY;
		(*done)++;
		ups_replace(w->ups, nu, a->up, key);
		e = floor_raise(w, k, a->lo, key) != 0;
		a->key = a->lo = a->up = key;
		a->state = 2;
		if (e)
			floor_init(w, m, k);
	}
	return m;
}

/* The exact key of row r in x, or NaN if x has none. */
static float
known_key(const struct known *x, uint64_t r)
{
	uint32_t lo = 0, hi = x->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (x->a[mid].row < r)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < x->n && x->a[lo].row == r ? x->a[lo].key : NAN;
}

/* Rows ascending, for known_key. */
static inline int
known_before(const struct acand *x, const struct acand *y)
{
	return x->row < y->row;
}

DEFINE_MERGE_SORT(sort_known, struct acand, known_before)

/*
 * Keeps the candidates read (state 2) of ac[0 .. n) for query i's next
 * pass, in c->known_out[i]; without the memory, none (the next pass reads
 * them again).
 */
static void
keep_known(struct worker *w, size_t i, uint32_t n)
{
	const struct acand *ac = w->ac;
	struct known *x;
	uint32_t t, e;

	for (t = 0, e = 0; t < n; t++)
		e += ac[t].state == 2;
	x = malloc(sizeof(*x) + (size_t)e * sizeof(x->a[0]));
	if (x == NULL)
		return;
	for (t = 0, x->n = 0; t < n; t++)
		if (ac[t].state == 2)
			x->a[x->n++] = ac[t];
	sort_known(x->a, x->n, w->actmp);	/* free after auto_stage */
	w->c->known_out[i] = x;
}

/*
 * Reads the originals of the results that the walk of auto_stage settled
 * without them, so that every result's key is exact and the results are
 * ranked by it.  They are the contenders of ac[0 .. m) not read (upper
 * end at least w->sel[0]): the walk read or settled every contender it
 * passed, and what it had not reached has its upper end below w->sel[0],
 * so at most k.  A read key lies within the interval it replaces, so the
 * k-th best lower end, w->sel[0], still holds, but a key beyond its
 * bound may fall below it: those read here are marked state 3, results
 * whatever their key, so that there are still k.
 */
static void
read_settled(struct worker *w, size_t i, uint32_t m, uint32_t *done)
{
	const struct ctx *c = w->c;
	const float *qv = c->qv + i * c->dim;
	struct acand *ac = w->ac;
	uint64_t rows[RERANK_ROWS];
	uint32_t at[RERANK_ROWS], t, u, e;
	float key[RERANK_ROWS];

	if (c->ix->beyond_memory)
		for (t = 0; t < m; t++)
			if (ac[t].state != 2 && ac[t].up >= w->sel[0])
				advise_row(c, ac[t].row);
	for (t = 0; t < m;) {
		for (e = 0; e < RERANK_ROWS && t < m; t++)
			if (ac[t].state != 2 && ac[t].up >= w->sel[0]) {
				at[e] = t;
				rows[e++] = ac[t].row;
			}
		if (e == 0)
			break;
		exact_keys(c, w, qv, rows, e, key);
		for (u = 0; u < e; u++) {
			struct acand *a = &ac[at[u]];

			/* a hostile file's NaN original ranks last */
			a->key = a->lo = a->up = key[u] == key[u] ? key[u] :
			    -INFINITY;
			a->state = 3;
		}
		*done += e;
	}
}

/*
 * Error-bounded re-rank of query i's candidates (tq.h, tq(5) "Error
 * bound").  Every candidate gets a score interval from its scan key
 * (auto_bounds); with L the k-th best lower end, one whose upper end is
 * below L cannot be a result (k others are surely better).  The others
 * are scored again with unrounded tables, which narrows them.  Then they
 * are walked best upper end first: a candidate that fewer than k others
 * could beat (at most k upper ends, its own included, reach its lower
 * end) is a result as it is; otherwise its original is read, its interval
 * becomes its exact key, and L may rise.  Upper ends only fall and lower
 * ends only rise, so a candidate settled stays settled, and the walk ends
 * at the first upper end below L.  The results are then the best k by key
 * of those left; a candidate settled without its original lies among them
 * whatever the keys of the others.
 *
 * The scan kept at most c->kc candidates.  The rows it left out had keys
 * at most the lowest kept, kmin.  If kmin plus the mean reach of the
 * candidates' upper ends above it (had they kmin's key, below) still
 * reaches the final L, rows
 * like them could be results: the query is marked for a pass with more
 * room (search_auto), which knows the exact keys read here.
 */
static void
finish_auto(struct worker *w, size_t i, const struct tq_topk *cand)
{
	const struct ctx *c = w->c;
	struct acand *ac = w->ac;
	const struct known *kn = c->known != NULL ? c->known[i] : NULL;
	uint32_t n = cand->len, k = c->k < n ? c->k : n, t, e, m;
	uint32_t done = 0;
	float fl, kmin;
	double reach, tr = 0.0;
	double t0 = c->timed ? now() : 0.0;
	int capped;

	tq_topk_reset(&w->fin);
	if (n == 0)
		goto out;
	/*
	 * The scan pruned with the k-th best key it had seen; the rows the
	 * final one prunes are dropped here, so that those kept do not
	 * depend on the order they came in (struct prune).
	 */
	fl = -INFINITY;
	if (c->prune && n >= c->k) {
		struct prune pr;

		for (t = 0, e = 0; t < n; t++)
			e = keep_best(w->sel, e, k, cand->key[t]);
		prune_widths(c, i, &pr);
		fl = prune_tau(c, w->sel[0], &pr);
	}
	capped = c->known_out != NULL && n >= cand->k &&
	    (uint64_t)cand->k < c->ix->n;
	kmin = INFINITY;
	for (t = 0, e = 0; t < n; t++) {
		if (t + BOUNDS_AHEAD < n)
			prefetch_bounds(c, cand->id[t + BOUNDS_AHEAD]);
		kmin = cand->key[t] < kmin ? cand->key[t] : kmin;
		if (cand->key[t] < fl)
			continue;
		ac[e].row = cand->id[t];
		ac[e].key = cand->key[t];
		ac[e].state = 0;
		auto_bounds(c, w, i, &ac[e]);
		if (kn != NULL) {
			/* Read by an earlier pass: exact. */
			float x = known_key(kn, ac[e].row);

			if (x == x) {
				ac[e].key = ac[e].lo = ac[e].up = x;
				ac[e].state = 2;
			}
		}
		e++;
	}
	if (kmin < fl || e == 0)
		capped = 0;
	/*
	 * How far a row left out could reach: the mean of what the
	 * candidates' upper ends would be at kmin's estimate, not at their
	 * own.  The bound widens with the distance, so at their own (nearer)
	 * estimates it understated the rows below them: 2-d cosine
	 * neighbours at D 1e-6 against a kmin at D 1e-2 kept queries from a
	 * second pass that would have found the nearest.  An estimate past
	 * the best score there is (cosine above 1, l2 below 0) has its upper
	 * end clamped below it; such a row reaches at least 0 beyond it.
	 */
	reach = 0.0;
	if (capped) {
		for (t = 0; t < e; t++) {
			struct acand x = { .key = kmin, .row = ac[t].row };

			auto_bounds(c, w, i, &x);
			reach += fmax((double)x.up - (double)kmin, 0.0);
		}
		reach /= e;
	}
	n = e;
	if (c->timed)
		tr = now() - t0;	/* the bounds count as refinement */
	m = auto_stage(w, i, n, k, &done, c->timed ? &tr : NULL);
	if (capped && (double)kmin + reach >= (double)w->sel[0])
		keep_known(w, i, n);
	/* Unless searched again, or only the set is asked for. */
	if (!c->auto_set && (c->known_out == NULL || c->known_out[i] == NULL))
		read_settled(w, i, m, &done);
	for (t = 0; t < m; t++) {
		uint64_t id;

		if (ac[t].up < w->sel[0] && ac[t].state != 3)
			continue;
		id = tq_index_id(c->ix, ac[t].row);
		if (c->ix->dups > 1 && has_id(&w->fin, id))
			continue;
		tq_topk_push(&w->fin, ac[t].key, id);
	}
out:
	w->st.candidates += n;
	w->st.reranked += done;
	w->st.originals_read += done;
	w->st.originals_bytes += (uint64_t)done *
	    tq_orig_bytes(c->ix->originals, c->dim);
	finish_out(w, i);
	if (c->timed) {
		w->st.t_refine += tr;
		w->st.t_rerank += now() - t0 - tr;
	}
}

/*
 * Pre-rank: the c->kr candidates of query i with the best refined keys
 * (pre's, or computed here), into w->pick as (refined key, row).  Ties go
 * to the lower row, so the choice does not depend on the heap's order.
 */
static void
pick_rerank(struct worker *w, size_t i, const struct tq_topk *cand,
    const float *pre)
{
	const struct ctx *c = w->c;
	float rk[REFINE_ROWS];
	size_t qi[REFINE_ROWS] = { i, i, i, i };
	uint32_t t;

	tq_topk_reset(&w->pick);
	for (t = 0; t < cand->len; t++) {
		float key;

		if (pre != NULL) {
			key = pre[t];
		} else {
			unsigned u = t % REFINE_ROWS;

			if (u == 0)
				refined_keys(c, w, qi, cand->id + t,
				    cand->len - t < REFINE_ROWS ?
				    cand->len - t : REFINE_ROWS, rk);
			key = rk[u];
		}
		tq_topk_push(&w->pick, key, cand->id[t]);
	}
}

/*
 * Turns the candidates of query i into its k results, best first; pre,
 * if not NULL, holds the candidates' refined keys (refine_tile).
 */
static void
finish(struct worker *w, size_t i, struct tq_topk *cand,
    const float *pre)
{
	const struct ctx *c = w->c;
	const float *qv = c->qv + i * c->dim;
	float rk[REFINE_ROWS];	/* refined keys of candidates t - t % 4 .. */
	float xk[RERANK_ROWS];	/* exact keys of candidates t - t % 4 .. */
	size_t qi[REFINE_ROWS] = { i, i, i, i };
	/* The candidates to score: the heap's, or the pre-rank's pick. */
	const uint64_t *rows = cand->id;
	uint32_t n, t, e;
	double t0, tr = 0.0;

	tq_topk_settle(cand);	/* its k best, as a heap holds them */
	n = cand->len;
	if (c->autor) {
		finish_auto(w, i, cand);
		return;
	}
	t0 = c->timed ? now() : 0.0;
	tq_topk_reset(&w->fin);
	w->st.candidates += cand->len;
	if (c->kr > 0 && cand->len > c->kr) {
		pick_rerank(w, i, cand, pre);
		rows = w->pick.id;
		n = w->pick.len;
		w->st.refined += cand->len;
		if (c->timed)
			tr = now() - t0;
	}
	if (c->rerank) {
		w->st.reranked += n;
		w->st.originals_read += n;
		w->st.originals_bytes += (uint64_t)n *
		    tq_orig_bytes(c->ix->originals, c->dim);
	} else {
		w->st.refined += n;
	}
	/*
	 * Re-rank: the originals of the next RERANK_AHEAD candidates are
	 * requested while others are scored, so their misses overlap.  The
	 * candidates' ids, read below, are just as scattered.
	 */
	if (c->rerank) {
		/* Larger than memory: all the originals asked for at once. */
		if (c->ix->beyond_memory)
			for (t = 0; t < n; t++)
				advise_row(c, rows[t]);
		for (t = 0; t < n; t++) {
			const struct tq_part *p = tq_part_of_row(c->ix,
			    rows[t]);

			__builtin_prefetch((const void *)(p->ids + p->idw *
			    (rows[t] - p->row0)));
		}
		for (t = 0; t < n && t < RERANK_AHEAD; t++)
			prefetch_original(c, rows[t]);
	}
	for (t = 0; t < n; t++) {
		float key;

		if (c->rerank) {
			unsigned u = t % RERANK_ROWS, nr = n - t <
			    RERANK_ROWS ? n - t : RERANK_ROWS;

			if (u == 0) {
				for (e = t + RERANK_AHEAD; e < n && e <
				    t + RERANK_AHEAD + nr; e++)
					prefetch_original(c, rows[e]);
				exact_keys(c, w, qv, rows + t, nr, xk);
			}
			key = xk[u];
		} else if (pre != NULL) {
			key = pre[t];
		} else {
			unsigned u = t % REFINE_ROWS;

			if (u == 0)
				refined_keys(c, w, qi, rows + t,
				    n - t < REFINE_ROWS ?
				    n - t : REFINE_ROWS, rk);
			key = rk[u];
		}
		uint64_t id = tq_index_id(c->ix, rows[t]);

		/* A vector copied to several lists counts once. */
		if (c->ix->dups > 1 && has_id(&w->fin, id))
			continue;
		tq_topk_push(&w->fin, key, id);
	}
	finish_out(w, i);
	if (c->timed) {
		if (c->rerank) {
			w->st.t_refine += tr;
			w->st.t_rerank += now() - t0 - tr;
		} else {
			w->st.t_refine += now() - t0;
		}
	}
}

/* Best first: higher key, then smaller id. */
static int
cmp_hit(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;

	if (x->key != y->key)
		return x->key > y->key ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static int
add_hit(struct worker *w, float key, uint64_t id)
{
	if (w->nhits == w->caphits) {
		size_t cap = w->caphits ? 2 * w->caphits : 256;
		struct hit *h;

		if (cap > SIZE_MAX / sizeof(*h) ||
		    (h = realloc(w->hits, cap * sizeof(*h))) == NULL)
			return -1;
		w->hits = h;
		w->caphits = cap;
	}
	w->hits[w->nhits].key = key;
	w->hits[w->nhits].id = id;
	w->nhits++;
	return 0;
}

/*
 * Range search of query i of the chunk.  Every returnable row whose
 * estimated key passes the radius loosened by a margin becomes a
 * candidate; the margin is, scaled by the row's s, RANGE_Z standard
 * deviations of the estimator's error for a random rotation plus the
 * worst case of the table rounding (tq_lut's err).  Candidates
 * are then scored exactly (originals) or with float tables.
 */
#define RANGE_Z 6.0
/*
 * The margin of query i, tables t, in segment sg: see above.  The
 * estimator errs by s <R (q - c), yhat - <u, yhat> u> (encode.c), so its
 * deviation scales with |q - c|, c the point the rows are encoded about
 * (the centre, or with residual codes the segment's list centroid), not
 * with |q|: that was wider than needed where the data lie off the origin
 * and narrower for a query farther from c than from the origin.
 */
static float
range_margin(const struct ctx *c, const struct tq_lut *t, size_t i,
    const struct seg *sg)
{
	return (float)((double)c->rsigma * (double)seg_qterm(c, sg, i).qq +
	    (double)t->err);
}

/*
 * Adds to w->hits the rows of segment sg's blocks [b0, b1) whose
 * estimated key for query i (tables t) passes the loosened radius.
 * Returns -1 when out of memory.
 */
static int
range_collect(struct worker *w, const struct tq_lut *t, size_t i,
    uint64_t b0, uint64_t b1, const struct seg *sg)
{
	const struct ctx *c = w->c;
	int l2 = c->metric == TQ_METRIC_L2;
	float qn2 = c->qn2[i], margin_q = range_margin(c, t, i, sg);
	float keys[SCAN_BLOCKS * TQ_BLOCK];
	uint32_t above[SCAN_BLOCKS];
	uint64_t b;
	size_t nb;

	for (b = b0; (nb = next_run(c, sg->p, &b, b1)) > 0; b += nb) {
		uint32_t off = scan_one(c, sg->p, t, b, nb, w->acc);

		run_keys(c, sg, t, i, b, nb, w->acc, off, NULL, -INFINITY,
		    keys, above);
		for (size_t bi = 0; bi < nb; bi++) {
			uint64_t row = (b + bi) * TQ_BLOCK;
			const float *key = keys + bi * TQ_BLOCK;
			uint32_t mask;
			unsigned j, nj = block_rows(c, sg->p, b + bi, &mask);

			mask &= row_window(b + bi, sg->r0, sg->r1);
			w->st.rows_scanned += mask_rows(mask);
			for (j = 0; j < nj; j++) {
				float m;

				if ((mask >> j & 1) == 0)
					continue;
				m = fabsf(part_row_s(sg->p, row + j)) *
				    margin_q;
				m = (l2 ? 2.0f * m : m) +
				    1e-4f * (fabsf(key[j]) + fabsf(qn2)) + 1e-6f;
				if (key[j] + m >= c->rkey &&
				    add_hit(w, key[j], row + j) != 0)
					return -1;
			}
		}
	}
	return 0;
}

/*
 * Scores the candidates in w->hits (rows) of query i exactly (or with
 * float tables), keeps those within the radius, best first, one per id,
 * at most rmax, into c->rres[i].
 */
static void
range_finish(struct worker *w, size_t i)
{
	const struct ctx *c = w->c;
	const struct tq_index *ix = c->ix;
	struct rres *res = &c->rres[i];
	size_t e, kept = 0;
	double t0 = c->timed ? now() : 0.0;

	w->st.candidates += w->nhits;
	if (ix->originals != TQ_ORIG_NONE) {
		w->st.reranked += w->nhits;
		w->st.originals_read += w->nhits;
		w->st.originals_bytes += (uint64_t)w->nhits *
		    tq_orig_bytes(ix->originals, c->dim);
	} else {
		w->st.refined += w->nhits;
	}
	for (e = 0; e < w->nhits; e++) {
		uint64_t r = w->hits[e].id;
		float key;

		if (ix->originals != TQ_ORIG_NONE)
			key = exact_key(c, w, c->qv + i * c->dim, r);
		else
			refined_keys(c, w, &i, &r, 1, &key);

		if (key >= c->rkey) {
			w->hits[kept].key = key;
			w->hits[kept].id = tq_index_id(ix, r);
			kept++;
		}
	}
	qsort(w->hits, kept, sizeof(*w->hits), cmp_hit);
	if (ix->dups > 1 && kept > 1) {
		/* Copies of a vector have equal keys: now adjacent. */
		size_t u = 1;

		for (e = 1; e < kept; e++)
			if (w->hits[e].id != w->hits[u - 1].id)
				w->hits[u++] = w->hits[e];
		kept = u;
	}
	if (c->rmax > 0 && kept > c->rmax)
		kept = c->rmax;
	res->n = kept;
	w->st.results += kept;
	if (c->timed) {
		if (ix->originals != TQ_ORIG_NONE)
			w->st.t_rerank += now() - t0;
		else
			w->st.t_refine += now() - t0;
	}
	if (kept > 0) {
		if ((res->h = tq_mallocarray(kept, sizeof(*res->h))) == NULL) {
			res->nomem = 1;
			return;
		}
		memcpy(res->h, w->hits, kept * sizeof(*res->h));
	}
}

/* Range search of query i of the chunk, in this worker alone. */
static void
range_one(struct worker *w, size_t i)
{
	const struct ctx *c = w->c;
	struct tq_lut *t = &w->lut[0];
	size_t nseg;
	double t0 = c->timed ? now() : 0.0, t1;

	tq_lut_build(c->q, c->rq + i * c->dim, t);
	t1 = c->timed ? now() : 0.0;
	w->st.t_tables += t1 - t0;
	w->nhits = 0;
	nseg = query_segs(c, i, w->segs);
	advise_segs(c, w->segs, nseg);
	lq_fill(w, w->segs, nseg);
	for (size_t e = 0; e < nseg; e++)
		if (range_collect(w, t, i, w->segs[e].b0,
		    w->segs[e].b1, &w->segs[e]) != 0) {
			c->rres[i].nomem = 1;
			return;
		}
	if (c->timed)
		w->st.t_scan += now() - t1;
	range_finish(w, i);
}

static void *
run(void *arg)
{
	struct worker *w = arg;
	const struct ctx *c = w->c;
	size_t i, ns;

	if (c->range && !w->by_blocks) {
		for (i = w->q0; i < w->q1; i++)
			range_one(w, i);
		return NULL;
	}
	if (w->by_blocks) {
		/* Blocks [b0, b1) of the concatenated segments. */
		uint64_t v = 0;
		double t0 = c->timed ? now() : 0.0;

		tq_topk_reset(&w->cand[0]);
		prune_start(w, 0, c->query);
		w->nhits = 0;
		w->nomem = 0;
		for (size_t e = 0; e < c->nseg; e++) {
			const struct seg *sg = &c->segs[e];
			uint64_t len = sg->b1 - sg->b0;
			uint64_t lo = w->b0 > v ? w->b0 : v;
			uint64_t hi = w->b1 < v + len ? w->b1 : v + len;

			if (lo < hi && c->range)
				w->nomem |= range_collect(w, c->lut, c->query,
				    sg->b0 + lo - v,
				    sg->b0 + hi - v, sg) != 0;
			else if (lo < hi)
				scan_range(w, c->lut, c->query, sg->b0 + lo - v,
				    sg->b0 + hi - v, sg, &w->cand[0]);
			v += len;
		}
		if (c->timed)
			w->st.t_scan += now() - t0;
		return NULL;
	}
	if (c->ix->nlist > 0) {
		/* IVF: every query its own lists. */
		for (i = w->q0; i < w->q1; i++) {
			double t0 = c->timed ? now() : 0.0, t1;

			ns = query_segs(c, i, w->segs);
			advise_segs(c, w->segs, ns);
			lq_fill(w, w->segs, ns);

			tq_lut_build(c->q, c->rq + i * c->dim, &w->lut[0]);
			c->qerr[i] = round_width(c, &w->lut[0]);
			t1 = c->timed ? now() : 0.0;
			w->st.t_tables += t1 - t0;
			tq_topk_reset(&w->cand[0]);
			prune_start(w, 0, i);
			for (size_t e = 0; e < ns; e++)
				scan_range(w, &w->lut[0], i, w->segs[e].b0,
				    w->segs[e].b1, &w->segs[e], &w->cand[0]);
			if (c->timed)
				w->st.t_scan += now() - t1;
			finish(w, i, &w->cand[0], NULL);
		}
		return NULL;
	}
	ns = query_segs(c, 0, w->segs);	/* flat: every row */
	for (i = w->q0; i < w->q1; i += c->qtile) {
		size_t m = w->q1 - i < c->qtile ? w->q1 - i : c->qtile, j;
		int refine;
		uint64_t b, step = c->tile_blocks;
		double t0 = c->timed ? now() : 0.0, t1;

		for (j = 0; j < m; j++) {
			tq_lut_build(c->q, c->rq + (i + j) * c->dim,
			    &w->lut[j]);
			c->qerr[i + j] = round_width(c, &w->lut[j]);
			tq_topk_reset(&w->cand[j]);
			prune_start(w, j, i + j);
		}
		t1 = c->timed ? now() : 0.0;
		w->st.t_tables += t1 - t0;
		for (size_t g = 0; g < ns; g++) {
			const struct seg *sg = &w->segs[g];

			for (b = sg->b0; b < sg->b1; b += step) {
				uint64_t e = sg->b1 - b < step ? sg->b1 :
				    b + step;

				if (m >= 2 && (w->lut[0].dot ||
				    (c->kern->scan4x != NULL &&
				    c->q->field_bits == 4)))
					scan_range_multi(w, w->lut, i, m, b, e,
					    sg, w->cand);
				else
					for (j = 0; j < m; j++)
						scan_range(w, &w->lut[j], i + j,
						    b, e, sg, &w->cand[j]);
			}
		}
		t0 = c->timed ? now() : 0.0;
		w->st.t_scan += t0 - t1;
		/* Every candidate refined: no re-rank, or its pick. */
		refine = (!c->rerank || c->kr > 0) && w->rcs != NULL;
		if (refine) {
			refine_tile(w, i, m);
			if (c->timed)
				w->st.t_refine += now() - t0;
		}
		for (j = 0; j < m; j++)
			finish(w, i + j, &w->cand[j], refine ? w->rkey + j *
			    w->kc : NULL);
	}
	return NULL;
}

/*
 * Runs workers 0..n-1: 1..n-1 in threads, 0 in the caller.  A thread that
 * cannot be created has its share run by the caller instead: the work of
 * each worker is fixed in advance, so the results are the same.
 */
static void
run_all(struct worker *w, unsigned n)
{
	unsigned t;

	for (t = 1; t < n; t++)
		w[t].started = pthread_create(&w[t].tid, NULL, run, &w[t]) == 0;
	run(&w[0]);
	for (t = 1; t < n; t++) {
		if (w[t].started)
			pthread_join(w[t].tid, NULL);
		else
			run(&w[t]);
		w[t].started = 0;
	}
}

/* ------------------------------------------------------------------------ */
/* Search                                                                    */

static enum tq_status
check_queries(const float *queries, size_t nq, uint32_t dim,
    enum tq_metric m)
{
	return tq_rows_check(m, queries, nq, dim, "query", 0);
}

struct scratch {
	struct worker *w;
	unsigned nw;
	float *qv, *rq, *qc, *qn2, *qk;
	float *qq;		/* auto re-rank: see struct ctx */
	float *qerr;
	uint32_t *probe;	/* chunk * probes */
	uint32_t *nprobe;	/* chunk, or NULL (struct ctx) */
	uint64_t lists;		/* lists the queries scanned */
	struct seg *segs;	/* probes */
	size_t ntab;		/* heaps of a worker's cand[] in use */
};

static void
scratch_free(struct scratch *s)
{
	unsigned t, j;

	if (s->w != NULL)
		for (t = 0; t < s->nw; t++) {
			/*
			 * Only the heaps a tile uses: all QTILE of them were
			 * 512 calls of free a single query (1.6 % of one
			 * over Fashion-MNIST's IVF).
			 */
			for (j = 0; j < s->ntab; j++)
				tq_topk_free(&s->w[t].cand[j]);
			free(s->w[t].lutmem);
			free(s->w[t].rcs);
			free(s->w[t].rctmp);
			free(s->w[t].rkey);
			free(s->w[t].acc);
			free(s->w[t].segs);
			free(s->w[t].lq);
			free(s->w[t].codes);
			free(s->w[t].row);
			free(s->w[t].hits);
			free(s->w[t].ac);
			free(s->w[t].actmp);
			free(s->w[t].ftmp);
			free(s->w[t].ups);
			free(s->w[t].sel);
			free(s->w[t].kbmem);
			tq_topk_free(&s->w[t].fin);
			tq_topk_free(&s->w[t].pick);
		}
	free(s->w);
	free(s->qv);
	free(s->rq);
	free(s->qc);
	free(s->qn2);
	free(s->qk);
	free(s->qq);
	free(s->qerr);
	free(s->probe);
	free(s->nprobe);
	free(s->segs);
}

/*
 * Queries a tile: the dot form's, or the small form's where its batches
 * take the tile kernel; the lookup form's by the size of its tables.
 */
static size_t
query_tile(const struct tq_quantizer *q)
{
	size_t n;

	if (TQ_DOT_FORM(q) || (TQ_SMALL_FORM(q) &&
	    tq_kernels()->scand_tile != NULL))
		return QTILE;
	n = TILE_TABLES / TQ_LUT_BYTES(q);
	return n < QTILE_LOOKUP_MIN ? QTILE_LOOKUP_MIN :
	    n > QTILE_LOOKUP_MAX ? QTILE_LOOKUP_MAX : n;
}

static enum tq_status
scratch_alloc(struct scratch *s, const struct tq_quantizer *q, unsigned nw,
    size_t chunk, uint32_t kc, uint32_t kf, uint32_t kr, int cosine,
    uint32_t probes, uint32_t nparts, int autor, int lazy)
{
	size_t nseg = (probes > 0 ? probes : 1) * (size_t)nparts;

	/*
	 * Tables on 64-byte boundaries: the AVX-512 kernels load them 64
	 * bytes at a time, and a load across two cache lines made the
	 * multi-query kernel a quarter slower (bench-kernels).
	 */
	size_t lutbytes = TQ_LUT_BYTES(q);
	size_t ntab = query_tile(q);
	unsigned t, j;

	if (ntab > chunk)
		ntab = chunk;
	lutbytes = (lutbytes + 63) & ~(size_t)63;
	/*
	 * Lazy top-ks while their room stays small (a tile of 256 tables
	 * at k = 1024, or the few queries of a wider pass of --oversample
	 * auto at k = 4096): on GloVe-100 at 2 bits flat the sifts of the
	 * heaps those passes had were 17 % of the batch (topk.c).
	 */
	lazy = lazy && (uint64_t)ntab * kc <= TQ_TOPK_LAZY_ROOM;

	memset(s, 0, sizeof(*s));
	s->w = tq_callocarray(nw, sizeof(*s->w));
	if (s->w == NULL)
		return tq_fail(TQ_ERR_NOMEM, "search: %u workers", nw);
	s->nw = nw;
	s->ntab = ntab;
	for (t = 0; t < nw; t++) {
		struct worker *w = &s->w[t];

		/*
		 * One table a worker (single queries, IVF queries) never
		 * takes the multi-query kernel: one call's sums, 8 KiB,
		 * instead of a tile's 256 KiB, which malloc maps and the
		 * kernel zero-fills again for every tq_search call.
		 */
		w->acc = aligned_alloc(64, (ntab >= 2 ? ACC_SUMS :
		    SCAN_BLOCKS * TQ_BLOCK) * sizeof(*w->acc));
		w->codes = malloc(q->dim);
		w->row = tq_mallocarray(q->dim, sizeof(*w->row));
		w->segs = tq_mallocarray(nseg, sizeof(*w->segs));
		if (w->acc == NULL || w->codes == NULL || w->row == NULL ||
		    w->segs == NULL)
			return tq_fail(TQ_ERR_NOMEM, "search: sums");
		if ((q->flags & TQ_QFLAG_RESIDUAL) && (w->lq = tq_mallocarray(
		    q->ivf.nlist, sizeof(*w->lq))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "search: list terms");
		/*
		 * A tile never holds more queries than a chunk.  The tables
		 * are one allocation, so the dot form's tile kernels can take
		 * them as rows of one matrix.
		 */
		w->lutmem = aligned_alloc(64, ntab * lutbytes);
		if (w->lutmem == NULL)
			return tq_fail(TQ_ERR_NOMEM, "search: tables");
		w->lutstride = lutbytes;
		for (j = 0; j < ntab; j++) {
			w->lut[j].lut = w->lutmem + j * lutbytes;
			TQ_TRY(lazy ? tq_topk_init_lazy(&w->cand[j], kc) :
			    tq_topk_init(&w->cand[j], kc));
		}
		TQ_TRY(tq_topk_init(&w->fin, kf));
		if (kr > 0)
			TQ_TRY(tq_topk_init(&w->pick, kr));
		if (autor) {
			w->ac = tq_mallocarray(kc, sizeof(*w->ac));
			w->actmp = tq_mallocarray(kc, sizeof(*w->actmp));
			w->ups = tq_mallocarray(kc, sizeof(*w->ups));
			w->ftmp = tq_mallocarray(kc, sizeof(*w->ftmp));
			w->sel = tq_mallocarray(kc, sizeof(*w->sel));
			if (w->ac == NULL || w->actmp == NULL ||
			    w->ups == NULL || w->ftmp == NULL ||
			    w->sel == NULL)
				return tq_fail(TQ_ERR_NOMEM, "search: "
				    "candidates");
			if (kf <= FLOOR_INSERT_K && (w->kbmem =
			    tq_mallocarray(ntab * kf, sizeof(*w->kbmem))) ==
			    NULL)
				return tq_fail(TQ_ERR_NOMEM, "search: "
				    "candidates");
		}
		/*
		 * A tile's candidates for refine_tile, unless that is a lot of
		 * memory (large k): then each query refines its own.
		 */
		w->kc = kc;
		if ((uint64_t)ntab * kc <= REFINE_TILE_MAX) {
			w->rcs = tq_mallocarray(ntab * kc, sizeof(*w->rcs));
			w->rctmp = tq_mallocarray(ntab * kc,
			    sizeof(*w->rctmp));
			w->rkey = tq_mallocarray(ntab * kc, sizeof(*w->rkey));
			if (w->rcs == NULL || w->rctmp == NULL ||
			    w->rkey == NULL)
				return tq_fail(TQ_ERR_NOMEM, "search: "
				    "candidates");
		}
	}
	s->rq = tq_mallocarray(chunk * q->dim, sizeof(*s->rq));
	s->qc = tq_mallocarray(chunk, sizeof(*s->qc));
	s->qn2 = tq_mallocarray(chunk, sizeof(*s->qn2));
	s->qk = tq_mallocarray(chunk, sizeof(*s->qk));
	s->qq = tq_mallocarray(chunk, sizeof(*s->qq));
	s->qerr = tq_mallocarray(chunk, sizeof(*s->qerr));
	if (s->qq == NULL || s->qerr == NULL)
		return tq_fail(TQ_ERR_NOMEM, "search: query buffers");
	if (cosine)
		s->qv = tq_mallocarray(chunk * q->dim, sizeof(*s->qv));
	s->segs = tq_mallocarray(nseg, sizeof(*s->segs));
	if (probes > 0)
		s->probe = tq_mallocarray(chunk, probes * sizeof(*s->probe));
	if (s->rq == NULL || s->qc == NULL || s->qn2 == NULL ||
	    s->qk == NULL || (cosine && s->qv == NULL) || s->segs == NULL ||
	    (probes > 0 && s->probe == NULL))
		return tq_fail(TQ_ERR_NOMEM, "search: query buffers");
	return TQ_OK;
}

/*
 * Prepares m queries: normalised (cosine), <q, c>, |q|^2, R q and (IVF)
 * the lists to probe into the scratch, and points c at them.
 */
static enum tq_status
prepare(const struct tq_quantizer *q, const float *qv, size_t m,
    struct scratch *s, struct ctx *c)
{
	uint32_t dim = q->dim;
	int cosine = q->metric == TQ_METRIC_COSINE;

	double cc = q->cc;

	for (size_t i = 0; i < m; i++) {
		const float *x = qv + i * dim;
		double qc = 0.0, n2 = 0.0;
		struct qterm qt;
		uint32_t d;

		/*
		 * Each sum in double, in the order of the coordinates; the
		 * two chains of dependent adds side by side in one loop
		 * (prepare was 2 % of a Fashion-MNIST IVF query's samples,
		 * 1.2 % after this and |c|^2 kept in q->cc).
		 */
		if (cosine) {
			n2 = tq_normalise(x, dim, s->qv + i * dim);
			x = s->qv + i * dim;
			if (q->centre != NULL)
				for (d = 0; d < dim; d++)
					qc += (double)x[d] *
					    (double)q->centre[d];
		} else if (q->centre != NULL) {
			for (d = 0; d < dim; d++) {
				n2 += (double)x[d] * (double)x[d];
				qc += (double)x[d] * (double)q->centre[d];
			}
		} else {
			for (d = 0; d < dim; d++)
				n2 += (double)x[d] * (double)x[d];
		}
		qt = centre_qterm(q->metric, n2, qc, cc);
		s->qc[i] = qt.qc;
		s->qn2[i] = (float)n2;
		s->qk[i] = qt.qk;
		s->qq[i] = qt.qq;
	}
	if (cosine)
		qv = s->qv;
	tq_rotate(q, qv, m, s->rq);
	c->qv = qv;
	c->qq = s->qq;
	c->qerr = s->qerr;
	if (c->probes == 0)
		return TQ_OK;
	TQ_TRY(tq_ivf_nearest(&q->ivf, dim, qv, m, 0,
	    q->metric == TQ_METRIC_IP, c->probes, s->probe, NULL, s->nw));
	if (c->nprobe == NULL) {
		s->lists += (uint64_t)m * c->probes;
		return TQ_OK;
	}
	/* The lists asked for, then more, nearest first, to hold want rows. */
	for (size_t i = 0; i < m; i++) {
		const uint32_t *pl = s->probe + i * c->probes;
		uint64_t rows = 0;
		uint32_t t = 0;

		for (; t < c->probes && (t < c->pmin || rows < c->want); t++)
			rows += c->live[pl[t]];
		c->nprobe[i] = t;
		s->lists += t;
	}
	return TQ_OK;
}

/* The counts and times of the work after preparing: a's, added to *to. */
static void
stats_add_work(struct tq_search_stats *to, const struct tq_search_stats *a)
{
	to->rows_scanned += a->rows_scanned;
	to->candidates += a->candidates;
	to->refined += a->refined;
	to->reranked += a->reranked;
	to->originals_read += a->originals_read;
	to->originals_bytes += a->originals_bytes;
	to->t_tables += a->t_tables;
	to->t_scan += a->t_scan;
	to->t_refine += a->t_refine;
	to->t_rerank += a->t_rerank;
}

/*
 * Fills *out (if not NULL) with the sum of the workers' stats, the
 * queries, the lists probed and the time of preparing the queries.
 */
static void
stats_collect(const struct scratch *s, struct tq_search_stats *out,
    size_t nq, double t_prepare)
{
	if (out == NULL)
		return;
	memset(out, 0, sizeof(*out));
	out->queries = nq;
	out->lists_probed = s->lists;
	out->t_prepare = t_prepare;
	for (unsigned t = 0; t < s->nw; t++) {
		stats_add_work(out, &s->w[t].st);
		out->results += s->w[t].st.results;
	}
}

/* Lists a query probes: p->probes, or the default share; <= nlist. */
static uint32_t
resolve_probes(const struct tq_index *ix, const struct tq_search_params *p)
{
	uint32_t nl = ix->nlist, pr = p->probes;

	if (nl == 0)
		return 0;
	if (pr == 0)
		pr = (nl + TQ_PROBES_AUTO_DIV - 1) / TQ_PROBES_AUTO_DIV;
	return pr > nl ? nl : pr;
}

/*
 * Query i alone: its tables built in worker 0, c pointed at them and at
 * the query's segments, whose blocks are split between the workers, which
 * then run (k-NN into their candidate heaps, range search into their
 * hits).  Returns the number of workers that ran.
 */
static unsigned
run_split(struct ctx *c, struct scratch *s, size_t i)
{
	struct worker *w0 = &s->w[0];
	uint64_t vb = 0;
	unsigned n = s->nw, t;
	double t0 = c->timed ? now() : 0.0;

	tq_lut_build(c->q, c->rq + i * c->dim, &w0->lut[0]);
	c->qerr[i] = round_width(c, &w0->lut[0]);
	c->query = i;
	c->lut = &w0->lut[0];
	if (c->timed)
		w0->st.t_tables += now() - t0;
	c->nseg = query_segs(c, i, s->segs);
	advise_segs(c, s->segs, c->nseg);
	c->segs = s->segs;
	for (size_t e = 0; e < c->nseg; e++)
		vb += s->segs[e].b1 - s->segs[e].b0;
	if (vb < n)
		n = vb > 0 ? (unsigned)vb : 1;
	lq_fill(&s->w[0], s->segs, c->nseg);	/* w0 finishes the query */
	for (t = 0; t < n; t++) {
		s->w[t].by_blocks = 1;
		s->w[t].b0 = vb * t / n;
		s->w[t].b1 = vb * (t + 1) / n;
	}
	run_all(s->w, n);
	return n;
}

/*
 * Queries per chunk, cut so that their probe lists (chunk * probes u32)
 * stay within about 64 MiB; probes <= TQ_MAX_LISTS = 2^24 leaves >= 1.
 */
static size_t
probe_chunk(size_t chunk, uint32_t probes)
{
	size_t most = probes > 0 ? ((size_t)16 << 20) / probes : chunk;

	return chunk < most ? chunk : most;
}

/* Searches one prepared chunk of m queries with up to nw workers. */
static void
search_chunk(struct ctx *c, struct scratch *s, size_t m)
{
	unsigned nw = s->nw, t;
	size_t i;

	if (m >= nw) {
		/* Contiguous ranges of queries, one per worker. */
		for (t = 0; t < nw; t++) {
			s->w[t].by_blocks = 0;
			s->w[t].q0 = m * t / nw;
			s->w[t].q1 = m * (t + 1) / nw;
		}
		run_all(s->w, nw);
		return;
	}

	/* Few queries: split each query's blocks, merge the heaps. */
	for (i = 0; i < m; i++) {
		struct worker *w0 = &s->w[0];
		unsigned n = run_split(c, s, i);

		for (t = 1; t < n; t++) {
			const struct tq_topk *h = &s->w[t].cand[0];
			uint32_t e;

			for (e = 0; e < h->len; e++)
				cand_push(c->ix, &w0->cand[0], h->key[e],
				    h->id[e]);
		}
		finish(w0, i, &w0->cand[0], NULL);
	}
}

enum tq_status
tq_search(const struct tq_index *ix, const float *queries, size_t nq,
    const struct tq_search_params *p, uint64_t *ids, float *scores)
{
	return tq_search_refine(ix, queries, nq, p, REFINE, 1, ids, scores);
}

/*
 * tq_search, with `refine` * k candidates refined by the float tables
 * when there is no re-rank (tq_search: REFINE).  The calibration takes 1:
 * it asks for hundreds of candidates, ranks them all by the float
 * tables itself, and the scan's heap of 4 times as many cost it a third
 * of its time.
 */
/* want candidates a query, at most n (and UINT32_MAX). */
static uint32_t
cap_cands(double want, uint64_t n)
{
	if (want > (double)n)
		want = (double)n;
	return want > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)want;
}

/*
 * One pass of tq_search_refine: the error-bounded re-rank keeps k * cap
 * candidates a query; known and known_out (nq entries, or NULL) as in
 * struct ctx.
 */
static enum tq_status
search_pass(const struct tq_index *ix, const float *queries, size_t nq,
    const struct tq_search_params *p, unsigned refine, int fill,
    unsigned cap, const struct known *const *known,
    struct known **known_out, uint64_t *ids, float *scores)
{
	const struct tq_quantizer *q;
	struct scratch s;
	struct ctx c;
	uint32_t dim, kc, kf, kr;
	size_t chunk, c0, i;
	unsigned nw;
	uint32_t probes, pneed;
	uint64_t krows = 0;
	const uint64_t *live;
	int cosine;
	double tprep = 0.0, t0;
	enum tq_status st;

	if (p->k < 1)
		return tq_fail(TQ_ERR_ARG, "k must be at least 1");
	if (isnan(p->oversample))
		return tq_fail(TQ_ERR_ARG, "oversample is NaN");
	if (!(p->auto_z >= 0.0f && p->auto_z < INFINITY))
		return tq_fail(TQ_ERR_ARG, "auto_z is not a finite number >= 0");
	if (p->oversample < 0.0f && ix->originals == TQ_ORIG_NONE)
		return tq_fail(TQ_ERR_NOORIG, "re-rank (oversample auto) needs "
		    "the originals, and the index has none");
	if (p->oversample > 1.0f && ix->originals == TQ_ORIG_NONE)
		return tq_fail(TQ_ERR_NOORIG, "re-rank (oversample %g) needs "
		    "the originals, and the index has none",
		    (double)p->oversample);
	if (p->allow != NULL && p->allow->ix != ix)
		return tq_fail(TQ_ERR_ARG, "the filter was made for another "
		    "index");
	q = ix->q;
	dim = q->dim;
	TQ_TRY(check_queries(queries, nq, dim, q->metric));
	if (nq == 0) {
		if (p->stats != NULL)
			memset(p->stats, 0, sizeof(*p->stats));
		return TQ_OK;
	}

	/*
	 * Candidates: k * oversample for re-rank (PRERANK times as many for
	 * a fixed oversample in the small form, kr of them re-ranked), else
	 * k * REFINE for the float-table refinement; never more than n.
	 */
	kf = ix->n < p->k ? (uint32_t)ix->n : p->k;
	kc = kf;
	kr = 0;
	{
		double want = tq_k_times(p->k, p->oversample < 0.0f ?
		    (double)cap : p->oversample > 1.0f ?
		    (double)p->oversample : (double)refine);

		if (cap_cands(want, ix->n) > kc)
			kc = cap_cands(want, ix->n);
		if (p->oversample > 1.0f && TQ_SMALL_FORM(ix->q)) {
			kr = kc;
			kc = cap_cands(ceil((double)kr * PRERANK), ix->n);
			if (kc <= kr)
				kr = 0;
		}
	}

	/* Chunk boundaries depend on nq and dim only (see the top). */
	chunk = QCHUNK_FLOATS / dim;
	if (chunk > QCHUNK_MAX)
		chunk = QCHUNK_MAX;
	if (chunk < 1)
		chunk = 1;
	if (chunk > nq)
		chunk = nq;
	probes = resolve_probes(ix, p);
	/*
	 * Lists enough for k results: where the lists asked for may hold
	 * fewer than k live rows (k times the copies of a vector), each
	 * query ranks as many lists as any would need and scans more of
	 * them, nearest first, until they do (prepare).  The same lists
	 * whatever the batch; as before wherever the lists are large.
	 */
	pneed = probes;
	live = NULL;
	if (fill && probes > 0 && probes < ix->nlist) {
		krows = (uint64_t)p->k * (ix->dups > 1 ? ix->dups : 1);
		/* The rows the filter allows, or the live ones. */
		if (p->allow != NULL) {
			live = p->allow->lcount;
			pneed = tq_lists_holding(p->allow->lsum, ix->nlist,
			    krows);
		} else {
			pneed = tq_index_lists_holding(ix, krows);
			live = ix->listlive;
		}
		if (pneed < probes)
			pneed = probes;
	}
	chunk = probe_chunk(chunk, pneed);
	nw = p->threads ? p->threads : tq_ncpu();
	if (nw > 1024)
		nw = 1024;
	if (nw > nq && nw > ix->nblocks)
		nw = (unsigned)(nq > ix->nblocks ? nq :
		    ix->nblocks > 0 ? ix->nblocks : 1);
	cosine = q->metric == TQ_METRIC_COSINE;

	/*
	 * Lazy candidate top-ks (topk.c) unless copies of a vector may
	 * meet: cand_push keeps a second copy out by the first one held,
	 * which a lazy top-k may still hold after a heap had dropped it.
	 */
	st = scratch_alloc(&s, q, nw, chunk, kc, kf, kr, cosine, pneed,
	    ix->nparts, p->oversample < 0.0f, ix->dups <= 1);
	if (st == TQ_OK && pneed > probes && (s.nprobe = tq_mallocarray(chunk,
	    sizeof(*s.nprobe))) == NULL)
		st = tq_fail(TQ_ERR_NOMEM, "search: %zu queries", chunk);
	if (st != TQ_OK) {
		scratch_free(&s);
		return st;
	}
	memset(&c, 0, sizeof(c));
	c.ix = ix;
	c.q = q;
	c.kern = tq_kernels();
	c.metric = q->metric;
	c.dim = dim;
	c.k = p->k;
	c.rerank = p->oversample > 1.0f || p->oversample < 0.0f;
	c.kr = kr;
	c.stream_dot = stream_dot(ix, probes, c.kern);
	c.resid = (q->flags & TQ_QFLAG_RESIDUAL) != 0;
	c.autor = p->oversample < 0.0f;
	c.auto_set = p->oversample == TQ_OVERSAMPLE_AUTO_SET;
	c.zr = p->auto_z > 0.0f ? (double)p->auto_z : TQ_AUTO_Z;
	c.az = 2.0 * c.zr * (1.0 + 1e-6) /
	    sqrt(dim > 1 ? (double)dim - 1.0 : 1.0);
	{
		double dd = distortion[q->bits];

		c.rho_g = (float)sqrt(dd / (1.0 - dd));
	}
	/*
	 * Pruning the scan (struct prune): where the auto re-rank has room
	 * for the k best keys (scratch_alloc: k <= FLOOR_INSERT_K), for l2
	 * and cosine (ip's widths have no distance to bound them by),
	 * vectors stored once, k the k best keys are kept for, and files
	 * held in memory.
	 */
	if (s.w[0].kbmem != NULL && q->metric != TQ_METRIC_IP &&
	    ix->dups <= 1 && kf == p->k && !ix->beyond_memory) {
		c.prune = 1;
		for (uint32_t e = 0; e < ix->nparts; e++) {
			double ms, msr;

			part_wmax(&ix->parts[e], c.rho_g, &ms, &msr);
			c.ps = ms > c.ps ? ms : c.ps;
			c.psr = msr > c.psr ? msr : c.psr;
		}
		c.prune = c.ps < INFINITY && c.psr < INFINITY;
	}
	c.allow = p->allow != NULL ? p->allow->words : NULL;
	c.masked = c.allow != NULL || ix->live < ix->n;
	c.rq = s.rq;
	c.qc = s.qc;
	c.qn2 = s.qn2;
	c.qk = s.qk;
	c.qtile = query_tile(q);
	c.tile_blocks = TILE_BYTES / ix->block_bytes;
	if (c.tile_blocks < 1)
		c.tile_blocks = 1;
	c.probes = pneed;
	c.pmin = probes;
	c.probe = s.probe;
	c.nprobe = s.nprobe;
	c.want = krows;
	c.live = live;
	c.timed = p->stats != NULL;
	for (i = 0; i < nw; i++)
		s.w[i].c = &c;

	for (c0 = 0; c0 < nq; c0 += chunk) {
		size_t m = nq - c0 < chunk ? nq - c0 : chunk;

		t0 = c.timed ? now() : 0.0;
		st = prepare(q, queries + c0 * dim, m, &s, &c);
		if (c.timed)
			tprep += now() - t0;
		if (st != TQ_OK)
			break;
		c.ids = ids + c0 * p->k;
		c.scores = scores + c0 * p->k;
		c.known = known != NULL ? known + c0 : NULL;
		c.known_out = known_out != NULL ? known_out + c0 : NULL;
		search_chunk(&c, &s, m);
	}
	stats_collect(&s, p->stats, nq, tprep);
	scratch_free(&s);
	return st;
}

/* The stats of a pass again over some queries, added to *to. */
static void
stats_add_again(struct tq_search_stats *to,
    const struct tq_search_stats *a)
{
	stats_add_work(to, a);
	to->lists_probed += a->lists_probed;
	to->widened += a->queries;
	to->t_prepare += a->t_prepare;
}

static void
known_free(struct known **x, size_t n)
{
	if (x == NULL)
		return;
	for (size_t j = 0; j < n; j++)
		free(x[j]);
	free(x);
}

/* May a pass with room for k * cap candidates be followed by a wider? */
static int
wider(const struct tq_index *ix, uint32_t k, unsigned cap)
{
	return tq_k_times(k, (double)cap * TQ_AUTO_WIDEN) <= TQ_AUTO_WIDE_MAX &&
	    tq_k_times(k, cap) < (double)ix->n;
}

/*
 * The error-bounded re-rank: a pass with room for k * TQ_AUTO_CAP
 * candidates a query (TQ_AUTO_WIDEN times that where the calibration says
 * so: tq_calib_auto_cap); then the queries whose candidates the room may
 * have cut short (finish_auto) again, with TQ_AUTO_WIDEN times the room
 * and the exact keys already read, while the room stays within
 * TQ_AUTO_WIDE_MAX candidates and below the rows.  A query's mark
 * depends on it alone, so the results still do not depend on threads or
 * batches.
 */
static enum tq_status
search_auto(const struct tq_index *ix, const float *queries, size_t nq,
    const struct tq_search_params *p, unsigned refine, uint64_t *ids,
    float *scores)
{
	struct tq_search_params p2 = *p;
	struct tq_search_stats st2;
	struct known **kin = NULL, **kout = NULL;
	size_t *map = NULL, *at = NULL, cur = nq, m, j, t;
	size_t d = ix->q->dim, k = p->k;
	float *qs = NULL, *sc2 = NULL;
	uint64_t *id2 = NULL;
	unsigned cap = TQ_AUTO_CAP;
	enum tq_status st;

	/* The calibration may say to start wider (tq_calib_auto_cap). */
	if (wider(ix, p->k, cap))
		cap = tq_calib_auto_cap(ix, p->k, resolve_probes(ix, p));
	if (wider(ix, p->k, cap) && (kout = calloc(nq, sizeof(*kout))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "search: %zu queries", nq);
	st = search_pass(ix, queries, nq, p, refine, 1, cap, NULL, kout, ids,
	    scores);
	p2.stats = p->stats != NULL ? &st2 : NULL;
	while (st == TQ_OK && kout != NULL) {
		for (m = 0, j = 0; j < cur; j++)
			m += kout[j] != NULL;
		if (m == 0)
			break;
		cap *= TQ_AUTO_WIDEN;
		free(qs);
		free(id2);
		free(sc2);
		at = tq_mallocarray(m, sizeof(*at));
		qs = tq_mallocarray(m * d, sizeof(*qs));
		id2 = tq_mallocarray(m * k, sizeof(*id2));
		sc2 = tq_mallocarray(m * k, sizeof(*sc2));
		kin = calloc(m, sizeof(*kin));
		if (at == NULL || qs == NULL || id2 == NULL || sc2 == NULL ||
		    kin == NULL) {
			free(kin);	/* empty: the marks are still kout's */
			kin = NULL;
			st = tq_fail(TQ_ERR_NOMEM, "search: %zu queries to "
			    "search again", m);
			break;
		}
		/* The marked queries, by where they are in the caller's. */
		for (t = 0, j = 0; j < cur; j++)
			if (kout[j] != NULL) {
				at[t] = map != NULL ? map[j] : j;
				memcpy(qs + t * d, queries + at[t] * d,
				    d * sizeof(*qs));
				kin[t++] = kout[j];
				kout[j] = NULL;
			}
		free(kout);
		kout = NULL;
		free(map);
		map = at;
		at = NULL;
		cur = m;
		if (wider(ix, p->k, cap) && (kout = calloc(m, sizeof(*kout))) == NULL) {
			st = tq_fail(TQ_ERR_NOMEM, "search: %zu queries", m);
			break;
		}
		st = search_pass(ix, qs, m, &p2, refine, 1, cap,
		    (const struct known *const *)kin, kout, id2, sc2);
		known_free(kin, m);
		kin = NULL;
		if (st != TQ_OK)
			break;
		for (j = 0; j < m; j++) {
			memcpy(ids + map[j] * k, id2 + j * k, k * sizeof(*ids));
			memcpy(scores + map[j] * k, sc2 + j * k,
			    k * sizeof(*scores));
		}
		if (p->stats != NULL)
			stats_add_again(p->stats, &st2);
	}
	known_free(kin, cur);
	known_free(kout, cur);
	free(map);
	free(at);
	free(qs);
	free(id2);
	free(sc2);
	return st;
}

enum tq_status
tq_search_refine(const struct tq_index *ix, const float *queries, size_t nq,
    const struct tq_search_params *p, unsigned refine, int fill,
    uint64_t *ids, float *scores)
{
	struct tq_search_params def;

	if (ix == NULL || (nq > 0 && (queries == NULL || ids == NULL ||
	    scores == NULL)))
		return tq_fail(TQ_ERR_ARG, "search: NULL argument");
	if (p == NULL) {
		tq_search_params_default(&def);
		p = &def;
	}
	if (p->oversample < 0.0f && nq > 0 && p->k >= 1 &&
	    ix->originals != TQ_ORIG_NONE)
		return search_auto(ix, queries, nq, p, refine, ids, scores);
	return search_pass(ix, queries, nq, p, refine, fill, TQ_AUTO_CAP,
	    NULL, NULL, ids, scores);
}

/* ------------------------------------------------------------------------ */
/* Range search                                                              */


void
tq_range_free(struct tq_range *r)
{
	if (r == NULL)
		return;
	free(r->off);
	free(r->ids);
	free(r->scores);
	memset(r, 0, sizeof(*r));
}

/*
 * Range search of query i alone: its segments' blocks split between the
 * workers, their candidates gathered in worker 0 and scored there.
 */
static void
range_split(struct ctx *c, struct scratch *s, size_t i)
{
	struct worker *w0 = &s->w[0];
	unsigned n = run_split(c, s, i), t;

	for (t = 0; t < n; t++) {
		const struct worker *w = &s->w[t];

		if (w->nomem) {
			c->rres[i].nomem = 1;
			return;
		}
		for (size_t e = 0; t > 0 && e < w->nhits; e++)
			if (add_hit(w0, w->hits[e].key, w->hits[e].id) != 0) {
				c->rres[i].nomem = 1;
				return;
			}
	}
	range_finish(w0, i);
}

enum tq_status
tq_search_range(const struct tq_index *ix, const float *queries, size_t nq,
    const struct tq_search_params *p, float radius, size_t max,
    struct tq_range *out)
{
	struct tq_search_params def;
	const struct tq_quantizer *q;
	struct scratch s;
	struct ctx c;
	struct rres *rres = NULL;
	size_t chunk, c0, i, total = 0, cap = 0;
	unsigned nw, t;
	double dd, tprep = 0.0, t0;
	enum tq_status st;

	if (out == NULL)
		return tq_fail(TQ_ERR_ARG, "search: NULL argument");
	memset(out, 0, sizeof(*out));
	if (ix == NULL || (nq > 0 && queries == NULL))
		return tq_fail(TQ_ERR_ARG, "search: NULL argument");
	if (p == NULL) {
		tq_search_params_default(&def);
		p = &def;
	}
	if (isnan(radius))
		return tq_fail(TQ_ERR_ARG, "radius is NaN");
	if (p->allow != NULL && p->allow->ix != ix)
		return tq_fail(TQ_ERR_ARG, "the filter was made for another "
		    "index");
	q = ix->q;
	TQ_TRY(check_queries(queries, nq, q->dim, q->metric));
	out->nq = nq;
	if ((out->off = tq_callocarray(nq + 1, sizeof(size_t))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	if (nq == 0) {
		if (p->stats != NULL)
			memset(p->stats, 0, sizeof(*p->stats));
		return TQ_OK;
	}

	chunk = QCHUNK_FLOATS / q->dim;
	if (chunk > QCHUNK_MAX)
		chunk = QCHUNK_MAX;
	if (chunk < 1)
		chunk = 1;
	if (chunk > nq)
		chunk = nq;
	chunk = probe_chunk(chunk, resolve_probes(ix, p));
	nw = p->threads ? p->threads : tq_ncpu();
	if (nw > 1024)
		nw = 1024;
	st = scratch_alloc(&s, q, nw, chunk, 1, 1, 0,
	    q->metric == TQ_METRIC_COSINE, resolve_probes(ix, p), ix->nparts,
	    0, 0);
	if (st == TQ_OK && (rres = tq_callocarray(chunk, sizeof(*rres))) ==
	    NULL)
		st = tq_fail(TQ_ERR_NOMEM, "out of memory");
	if (st != TQ_OK)
		goto fail;

	memset(&c, 0, sizeof(c));
	c.ix = ix;
	c.q = q;
	c.kern = tq_kernels();
	c.metric = q->metric;
	c.dim = q->dim;
	c.rq = s.rq;
	c.qc = s.qc;
	c.qn2 = s.qn2;
	c.qk = s.qk;
	c.allow = p->allow != NULL ? p->allow->words : NULL;
	c.masked = c.allow != NULL || ix->live < ix->n;
	c.range = 1;
	c.resid = (q->flags & TQ_QFLAG_RESIDUAL) != 0;
	c.probes = resolve_probes(ix, p);
	c.stream_dot = stream_dot(ix, c.probes, c.kern);
	c.probe = s.probe;
	c.rkey = q->metric == TQ_METRIC_L2 ? -radius : radius;
	c.rmax = max;
	c.rres = rres;
	c.timed = p->stats != NULL;
	/* Error std of <R q, yhat> s / |q|: sqrt(D / (1 - D) / d). */
	dd = distortion[q->bits];
	c.rsigma = (float)(RANGE_Z * sqrt(dd / (1.0 - dd) / (double)q->dim));
	if (c.rsigma > sqrt(dd / (1.0 - dd)))
		c.rsigma = (float)sqrt(dd / (1.0 - dd));
	for (t = 0; t < nw; t++)
		s.w[t].c = &c;

	for (c0 = 0; c0 < nq; c0 += chunk) {
		size_t m = nq - c0 < chunk ? nq - c0 : chunk;
		unsigned n = nw < m ? nw : (unsigned)m;

		t0 = c.timed ? now() : 0.0;
		st = prepare(q, queries + c0 * q->dim, m, &s, &c);
		if (c.timed)
			tprep += now() - t0;
		if (st != TQ_OK)
			break;
		memset(rres, 0, m * sizeof(*rres));
		if (m >= nw) {
			for (t = 0; t < n; t++) {
				s.w[t].by_blocks = 0;
				s.w[t].q0 = m * t / n;
				s.w[t].q1 = m * (t + 1) / n;
			}
			run_all(s.w, n);
		} else {
			for (i = 0; i < m; i++)
				range_split(&c, &s, i);
		}
		for (i = 0; i < m && st == TQ_OK; i++) {
			if (rres[i].nomem) {
				st = tq_fail(TQ_ERR_NOMEM, "range search: out "
				    "of memory");
				break;
			}
			if (total + rres[i].n > cap) {
				size_t nc = 2 * cap > total + rres[i].n ?
				    2 * cap : total + rres[i].n + 1024;
				uint64_t *ni = realloc(out->ids,
				    nc * sizeof(*ni));
				float *ns;

				if (ni != NULL)
					out->ids = ni;
				ns = ni == NULL ? NULL :
				    realloc(out->scores, nc * sizeof(*ns));
				if (ns == NULL) {
					st = tq_fail(TQ_ERR_NOMEM, "range "
					    "search: out of memory");
					break;
				}
				out->scores = ns;
				cap = nc;
			}
			for (size_t e = 0; e < rres[i].n; e++) {
				out->ids[total + e] = rres[i].h[e].id;
				out->scores[total + e] = q->metric ==
				    TQ_METRIC_L2 ? -rres[i].h[e].key :
				    rres[i].h[e].key;
			}
			total += rres[i].n;
			out->off[c0 + i + 1] = total;
		}
		for (i = 0; i < m; i++)
			free(rres[i].h);
		if (st != TQ_OK)
			break;
	}
	stats_collect(&s, p->stats, nq, tprep);
fail:
	free(rres);
	scratch_free(&s);
	if (st != TQ_OK)
		tq_range_free(out);
	return st;
}
