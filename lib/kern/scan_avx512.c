/*
 * scan_avx512.c - the scan kernel for AVX-512 (built with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2; it uses BW, VL,
 * VBMI and VNNI, and the dispatcher requires all of those flags).
 *
 * Layout (internal.h, "The blocked scan layout"): blocks of 32 vectors.
 *
 *   4-bit fields: field f of a block is a 16-byte row, byte j = vector j
 *   (low nibble) | vector j + 16 (high nibble).  A 64-byte load takes four
 *   consecutive fields, one per 128-bit lane.  VBMI's vpermb transposes
 *   it so that dword j holds byte j of every lane, the four fields of
 *   vectors j and j + 16; each nibble, ORed with its field's place times
 *   16, indexes the four 16-entry tables as one 64-entry vpermb table
 *   (the 64 bytes of tables at field f, as stored); VNNI's vpdpbusd, with
 *   multipliers of 1, adds each dword's four looked-up u8 entries into a
 *   u32 sum.  Vector j's sum ends in dword j of one register and vector
 *   j + 16's in another: no widening and no flush.  The entries are at
 *   most TQ_LUT4_MAX, so the lookups of two consecutive 64-byte steps
 *   (the same vectors' next four fields, in the same bytes) are added as
 *   bytes first and one vpdpbusd widens both.  Per 64 bytes of codes a
 *   query costs two vpermb, one vpaddb and one vpdpbusd, where vpshufb
 *   lookups summed as FAISS's u16 pairs cost two vpshufb and six adds;
 *   the transposition and the nibble split are paid once for all the
 *   queries scanned together (up to eight, whose sums fill 16
 *   registers).  On a Zen 4 EPYC the byte adds raised a 1000-query 1-bit
 *   batch at 100K x 1536 from 1880 to 2130 QPS (six alternated pairs);
 *   there a vpermb and a vpdpbusd together took 1.3 times as long as
 *   either alone (a microbenchmark of independent chains).
 *
 *   6-bit fields: groups of four fields as three 32-byte rows A, B, C.
 *   vpermb (_mm512_permutexvar_epi8) is a 64-entry byte lookup that reads
 *   only the low 6 bits of each index, so A, B and C index the tables of
 *   f0, f1, f2 unmasked; f3 is A >> 6 | (B >> 6) << 2 | (C >> 6) << 4,
 *   built from three 16-bit shifts (AVX-512 has no byte shift) merged by
 *   two vpternlogd bit-selects, its junk bits 6 and 7 ignored by vpermb
 *   likewise.  A 512-bit vpermb covers 64 vectors, so two blocks are
 *   scanned at once, block b in the low 256 bits and b + 1 in the high;
 *   an odd last block is paired with itself.  (The 256-bit vpermb only
 *   has a 32-entry table.)  The u8 lookups are summed as u16 pairs the way
 *   FAISS does it: acc_all_u16 += v (as u16: even vector in the low byte,
 *   odd vector in the high byte, wrapping), acc_odd_u16 += v >> 8; at a
 *   flush the even sums are acc_all - (acc_odd << 8).  Both are exact
 *   while each accumulator has taken at most 257 additions of 255, so the
 *   u16 lanes are flushed into u32 every 64 groups (four lookups per
 *   group land in the same lanes).
 *
 * Accumulation is exact either way: the sums equal tq_scan_scalar's.
 *
 * Blocks are scanned in address order; the tables stay in L1 or L2.  A
 * software prefetch, one per 64 bytes of codes, brings a scan from memory
 * up to the machine's streaming read rate: 1 KiB ahead gave about 8 GB/s
 * on a Sapphire Rapids VM, against 6 to 7 without it.  On a Zen 4 EPYC
 * 4 KiB ahead did better than 1 (p50 of single queries, six alternated
 * pairs): 100K x 1536 from memory 1.01 -> 0.85 ms at 1 bit, 2.29 -> 2.00
 * at 2 bits, 4.7 -> 4.6 at 4; 2-bit IVF queries 6% faster on
 * Fashion-MNIST and text-384; in cache and in batches no change.
 *
 * Measured in L2 (scripts/bench-kernels.c, "hot", codes and tables 64-byte
 * aligned), when it was first written: 4-bit fields about 40 GB/s for one
 * query and 62 per query for eight (the u16-pair kernel this replaced: 27
 * and 39 for four; AVX2: 26), 6-bit fields about 44 GB/s (AVX2: 11, as
 * vpermb replaces four vpshufb and three blends).  Tables that straddle
 * cache lines cost a quarter of the multi-query speed: the search
 * allocates them 64-byte aligned.  With the byte adds and the runs of
 * fields, on the Zen 4 EPYC (bench-kernels 20000, 1536 coordinates): one
 * query 84-88 GB/s, eight 114-124 per query, 6-bit fields 47 (AVX2: 35
 * to 40 at 4-bit fields, 20 at 6).  Leaving the transposing vpermb out
 * (wrong sums, for the timing only) took one query from 87-89 to 97-98.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

/* 6-bit groups per u16 flush: 256 additions per lane. */
#define FLUSH6_GROUPS 64u

/* Most queries scanned together (their sums fill 16 registers). */
#define MULTI_MAX 8u

/* Software prefetch distance in the codes; see the opening comment. */
#define PREFETCH_AHEAD 4096u

/* vpternlogd immediate for "a ? b : c", bit by bit. */
#define TERN_SELECT 0xca

static inline __m512i
load_u8x64(const uint8_t *p)
{
	return _mm512_loadu_si512((const void *)p);
}

static inline __m256i
load_u8x32(const uint8_t *p)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/*
 * Asks for the cache line PREFETCH_AHEAD bytes on.  The address is formed
 * as an integer: it may lie past the end of the codes, which is harmless
 * for a prefetch but not for C pointer arithmetic.  __builtin_prefetch,
 * not _mm_prefetch: gcc 12 dropped the latter from the loop of
 * scan_block4_multi once inlined (seen in the assembly).
 */
static inline __attribute__((always_inline)) void
prefetch_ahead(const uint8_t *p)
{
	__builtin_prefetch((const void *)((uintptr_t)p + PREFETCH_AHEAD), 0,
	    3);
}

static inline void
store_u32x16(uint32_t *p, __m512i v_u32x16)
{
	_mm512_storeu_si512((void *)p, v_u32x16);
}

/* Adds 64 u8 lookups to a FAISS pair of u16 sums. */
static inline void
add_u8(__m512i *all_u16x32, __m512i *odd_u16x32, __m512i v_u8x64)
{
	*all_u16x32 = _mm512_add_epi16(*all_u16x32, v_u8x64);
	*odd_u16x32 = _mm512_add_epi16(*odd_u16x32,
	    _mm512_srli_epi16(v_u8x64, 8));
}

/*
 * The even and odd sums of a FAISS pair, interleaved back into vector
 * order: per 128-bit lane, *lo_u16x32 gets that lane's vectors 0..7 and
 * *hi_u16x32 its vectors 8..15.
 */
static inline void
split_u16(__m512i all_u16x32, __m512i odd_u16x32, __m512i *lo_u16x32,
    __m512i *hi_u16x32)
{
	__m512i even_u16x32 = _mm512_sub_epi16(all_u16x32,
	    _mm512_slli_epi16(odd_u16x32, 8));

	*lo_u16x32 = _mm512_unpacklo_epi16(even_u16x32, odd_u16x32);
	*hi_u16x32 = _mm512_unpackhi_epi16(even_u16x32, odd_u16x32);
}

/* vpternlogd immediate for (a & b) | c. */
#define TERN_AND_OR 0xea

/* The constants of a 4-bit scan. */
struct k4 {
	__m512i tr, low4, lane, ones;
};

static inline struct k4
k4_init(void)
{
	struct k4 k;

	k.tr = load_u8x64(tq_transpose4x16);
	k.low4 = _mm512_set1_epi8(0x0f);
	k.lane = _mm512_set1_epi32(0x30201000);	/* byte k of a dword: k << 4 */
	k.ones = _mm512_set1_epi8(1);
	return k;
}

/* The table indices of the 64 bytes at p: vectors 0..15 and 16..31. */
static inline void
k4_index(const struct k4 *k, const uint8_t *p, __m512i *lo_u8x64,
    __m512i *hi_u8x64)
{
	__m512i xt_u8x64 = _mm512_permutexvar_epi8(k->tr, load_u8x64(p));

	*lo_u8x64 = _mm512_ternarylogic_epi32(xt_u8x64, k->low4, k->lane,
	    TERN_AND_OR);
	*hi_u8x64 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(xt_u8x64, 4),
	    k->low4, k->lane, TERN_AND_OR);
}

/* sum_u32x16 += the four entries of table t that dword j of idx selects. */
static inline __m512i
k4_add(const struct k4 *k, __m512i sum_u32x16, __m512i idx_u8x64,
    __m512i t_u8x64)
{
	return _mm512_dpbusd_epi32(sum_u32x16,
	    _mm512_permutexvar_epi8(idx_u8x64, t_u8x64), k->ones);
}

/* sum_u32x16 += the entries that two steps' indices select, added as bytes. */
static inline __m512i
k4_add2(const struct k4 *k, __m512i sum_u32x16, __m512i idx0_u8x64,
    __m512i t0_u8x64, __m512i idx1_u8x64, __m512i t1_u8x64)
{
	return _mm512_dpbusd_epi32(sum_u32x16, _mm512_add_epi8(
	    _mm512_permutexvar_epi8(idx0_u8x64, t0_u8x64),
	    _mm512_permutexvar_epi8(idx1_u8x64, t1_u8x64)), k->ones);
}

/* 128 bytes at p (two steps) with tables t into one query's sums. */
static inline void
k4_step2(const struct k4 *k, const uint8_t *p, const uint8_t *t,
    __m512i *lo_u32x16, __m512i *hi_u32x16)
{
	__m512i l0_u8x64, h0_u8x64, l1_u8x64, h1_u8x64;
	__m512i t0_u8x64 = load_u8x64(t), t1_u8x64 = load_u8x64(t + 64);

	k4_index(k, p, &l0_u8x64, &h0_u8x64);
	k4_index(k, p + 64, &l1_u8x64, &h1_u8x64);
	*lo_u32x16 = k4_add2(k, *lo_u32x16, l0_u8x64, t0_u8x64, l1_u8x64,
	    t1_u8x64);
	*hi_u32x16 = k4_add2(k, *hi_u32x16, h0_u8x64, t0_u8x64, h1_u8x64,
	    t1_u8x64);
}

static void
scan_block4(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t *out)
{
	const struct k4 k = k4_init();
	const size_t len = (size_t)nfields * 16;
	/* Two sums per half, for even and odd pairs: vpdpbusd's latency. */
	__m512i lo0 = _mm512_setzero_si512(), lo1 = _mm512_setzero_si512();
	__m512i hi0 = _mm512_setzero_si512(), hi1 = _mm512_setzero_si512();
	__m512i l_u8x64, h_u8x64;
	size_t off;

	for (off = 0; off + 256 <= len; off += 256) {
		prefetch_ahead(block + off);
		prefetch_ahead(block + off + 64);
		prefetch_ahead(block + off + 128);
		prefetch_ahead(block + off + 192);
		k4_step2(&k, block + off, lut + off, &lo0, &hi0);
		k4_step2(&k, block + off + 128, lut + off + 128, &lo1, &hi1);
	}
	if (off + 128 <= len) {
		k4_step2(&k, block + off, lut + off, &lo0, &hi0);
		off += 128;
	}
	if (off < len) {
		k4_index(&k, block + off, &l_u8x64, &h_u8x64);
		lo1 = k4_add(&k, lo1, l_u8x64, load_u8x64(lut + off));
		hi1 = k4_add(&k, hi1, h_u8x64, load_u8x64(lut + off));
	}
	store_u32x16(out, _mm512_add_epi32(lo0, lo1));
	store_u32x16(out + 16, _mm512_add_epi32(hi0, hi1));
}

/*
 * nq (2..8) queries over one 4-bit block, the codes transposed and split
 * once for all of them.  Inlined with nq constant, the sums in named
 * registers (16 for eight queries): with an array of them gcc 12 copied
 * every sum to another register once a step.
 */
#define K4_STEP(i)							\
	do {								\
		if ((i) < nq) {						\
			__m512i t_u8x64 = load_u8x64(lut[i] + base + off); \
									\
			lo##i = k4_add(&k, lo##i, l_u8x64, t_u8x64);	\
			hi##i = k4_add(&k, hi##i, h_u8x64, t_u8x64);	\
		}							\
	} while (0)
/*
 * Two steps at once: the lookups of fields f .. f + 3 and f + 4 .. f + 7
 * land in the same bytes (the same vector's dword), so with entries of at
 * most TQ_LUT4_MAX their sum fits a byte and one vpdpbusd adds both.
 */
#define K4_STEP2(i)							\
	do {								\
		if ((i) < nq) {						\
			__m512i t0_u8x64 = load_u8x64(lut[i] + base + off); \
			__m512i t1_u8x64 = load_u8x64(lut[i] + base + off + \
			    64);					\
									\
			lo##i = k4_add2(&k, lo##i, l0_u8x64, t0_u8x64,	\
			    l1_u8x64, t1_u8x64);			\
			hi##i = k4_add2(&k, hi##i, h0_u8x64, t0_u8x64,	\
			    h1_u8x64, t1_u8x64);			\
		}							\
	} while (0)
#define K4_STORE(i)							\
	do {								\
		if ((i) < nq) {						\
			store_u32x16(out[i], lo##i);			\
			store_u32x16(out[i] + 16, hi##i);		\
		}							\
	} while (0)

#define K4_LOAD(i)							\
	do {								\
		if ((i) < nq && base > 0) {				\
			lo##i = _mm512_loadu_si512((const void *)out[i]); \
			hi##i = _mm512_loadu_si512(			\
			    (const void *)(out[i] + 16));		\
		}							\
	} while (0)

/*
 * Fields base / 16 .. base / 16 + nfields - 1 of a block (block points
 * at the first; base is their byte offset in the block and the tables)
 * added to the sums in out, which start at zero when base is 0.
 */
static inline __attribute__((always_inline)) void
scan_block4_multi(const uint8_t *block, unsigned nfields, size_t base,
    const uint8_t *const *lut, unsigned nq, uint32_t *const *out)
{
	const struct k4 k = k4_init();
	const size_t len = (size_t)nfields * 16;
	__m512i lo0 = _mm512_setzero_si512(), hi0 = _mm512_setzero_si512();
	__m512i lo1 = _mm512_setzero_si512(), hi1 = _mm512_setzero_si512();
	__m512i lo2 = _mm512_setzero_si512(), hi2 = _mm512_setzero_si512();
	__m512i lo3 = _mm512_setzero_si512(), hi3 = _mm512_setzero_si512();
	__m512i lo4 = _mm512_setzero_si512(), hi4 = _mm512_setzero_si512();
	__m512i lo5 = _mm512_setzero_si512(), hi5 = _mm512_setzero_si512();
	__m512i lo6 = _mm512_setzero_si512(), hi6 = _mm512_setzero_si512();
	__m512i lo7 = _mm512_setzero_si512(), hi7 = _mm512_setzero_si512();
	__m512i l0_u8x64, h0_u8x64, l1_u8x64, h1_u8x64;
	size_t off;

	K4_LOAD(0);
	K4_LOAD(1);
	K4_LOAD(2);
	K4_LOAD(3);
	K4_LOAD(4);
	K4_LOAD(5);
	K4_LOAD(6);
	K4_LOAD(7);

	for (off = 0; off + 128 <= len; off += 128) {
		prefetch_ahead(block + off);
		prefetch_ahead(block + off + 64);
		k4_index(&k, block + off, &l0_u8x64, &h0_u8x64);
		k4_index(&k, block + off + 64, &l1_u8x64, &h1_u8x64);
		K4_STEP2(0);
		K4_STEP2(1);
		K4_STEP2(2);
		K4_STEP2(3);
		K4_STEP2(4);
		K4_STEP2(5);
		K4_STEP2(6);
		K4_STEP2(7);
	}
	if (off < len) {
		__m512i l_u8x64, h_u8x64;

		k4_index(&k, block + off, &l_u8x64, &h_u8x64);
		K4_STEP(0);
		K4_STEP(1);
		K4_STEP(2);
		K4_STEP(3);
		K4_STEP(4);
		K4_STEP(5);
		K4_STEP(6);
		K4_STEP(7);
	}
	K4_STORE(0);
	K4_STORE(1);
	K4_STORE(2);
	K4_STORE(3);
	K4_STORE(4);
	K4_STORE(5);
	K4_STORE(6);
	K4_STORE(7);
}

#undef K4_LOAD
#undef K4_STEP
#undef K4_STEP2

/* Row r (32 bytes) of block p0 in the low half, of block p1 in the high. */
static inline __m512i
load_pair(const uint8_t *p0, const uint8_t *p1)
{
	return _mm512_inserti64x4(_mm512_castsi256_si512(load_u8x32(p0)),
	    load_u8x32(p1), 1);
}

/*
 * Two blocks at once (b0 in bytes 0..31 of every register, b1 in 32..63);
 * b1 may equal b0, and then only out0 is written.
 */
static void
scan_pair6(const uint8_t *b0, const uint8_t *b1, unsigned nfields,
    const uint8_t *lut, uint32_t *out0, uint32_t *out1)
{
	const __m512i low2_u8x64 = _mm512_set1_epi8(0x03);
	const __m512i low4_u8x64 = _mm512_set1_epi8(0x0f);
	unsigned ngroups = nfields / 4, g0;
	/*
	 * s_lo: per 256-bit half, vectors 0..7 then 16..23 of its block;
	 * s_hi: vectors 8..15 then 24..31.
	 */
	__m512i s_lo0_u32x16 = _mm512_setzero_si512();
	__m512i s_hi0_u32x16 = _mm512_setzero_si512();
	__m512i s_lo1_u32x16 = _mm512_setzero_si512();
	__m512i s_hi1_u32x16 = _mm512_setzero_si512();

	for (g0 = 0; g0 < ngroups; g0 += FLUSH6_GROUPS) {
		unsigned n = ngroups - g0 < FLUSH6_GROUPS ? ngroups - g0 :
		    FLUSH6_GROUPS, g;
		size_t off = (size_t)g0 * 96;
		const uint8_t *t = lut + (size_t)g0 * 256;
		__m512i all_u16x32 = _mm512_setzero_si512();
		__m512i odd_u16x32 = _mm512_setzero_si512();
		__m512i lo_u16x32, hi_u16x32;

		for (g = 0; g < n; g++, off += 96, t += 256) {
			__m512i a_u8x64 = load_pair(b0 + off, b1 + off);
			__m512i b_u8x64 = load_pair(b0 + off + 32,
			    b1 + off + 32);
			__m512i c_u8x64 = load_pair(b0 + off + 64,
			    b1 + off + 64);
			/* Bits 0..3 from B >> 4 and A >> 6, 4..5 from C >> 2. */
			__m512i ab_u8x64 = _mm512_ternarylogic_epi32(low2_u8x64,
			    _mm512_srli_epi16(a_u8x64, 6),
			    _mm512_srli_epi16(b_u8x64, 4), TERN_SELECT);
			__m512i f3_u8x64 = _mm512_ternarylogic_epi32(low4_u8x64,
			    ab_u8x64, _mm512_srli_epi16(c_u8x64, 2),
			    TERN_SELECT);

			prefetch_ahead(b0 + off);
			prefetch_ahead(b0 + off + 64);
			prefetch_ahead(b1 + off);
			prefetch_ahead(b1 + off + 64);
			add_u8(&all_u16x32, &odd_u16x32,
			    _mm512_permutexvar_epi8(a_u8x64, load_u8x64(t)));
			add_u8(&all_u16x32, &odd_u16x32,
			    _mm512_permutexvar_epi8(b_u8x64,
			    load_u8x64(t + 64)));
			add_u8(&all_u16x32, &odd_u16x32,
			    _mm512_permutexvar_epi8(c_u8x64,
			    load_u8x64(t + 128)));
			add_u8(&all_u16x32, &odd_u16x32,
			    _mm512_permutexvar_epi8(f3_u8x64,
			    load_u8x64(t + 192)));
		}
		split_u16(all_u16x32, odd_u16x32, &lo_u16x32, &hi_u16x32);
		/* Lanes 0, 1 are block b0's vectors 0..15, 16..31. */
		s_lo0_u32x16 = _mm512_add_epi32(s_lo0_u32x16,
		    _mm512_cvtepu16_epi32(_mm512_castsi512_si256(lo_u16x32)));
		s_hi0_u32x16 = _mm512_add_epi32(s_hi0_u32x16,
		    _mm512_cvtepu16_epi32(_mm512_castsi512_si256(hi_u16x32)));
		s_lo1_u32x16 = _mm512_add_epi32(s_lo1_u32x16,
		    _mm512_cvtepu16_epi32(
		    _mm512_extracti64x4_epi64(lo_u16x32, 1)));
		s_hi1_u32x16 = _mm512_add_epi32(s_hi1_u32x16,
		    _mm512_cvtepu16_epi32(
		    _mm512_extracti64x4_epi64(hi_u16x32, 1)));
	}
	/* [lo.low | hi.low] = vectors 0..15, [lo.high | hi.high] = 16..31. */
	store_u32x16(out0, _mm512_shuffle_i64x2(s_lo0_u32x16, s_hi0_u32x16,
	    0x44));
	store_u32x16(out0 + 16, _mm512_shuffle_i64x2(s_lo0_u32x16,
	    s_hi0_u32x16, 0xee));
	if (out1 != NULL) {
		store_u32x16(out1, _mm512_shuffle_i64x2(s_lo1_u32x16,
		    s_hi1_u32x16, 0x44));
		store_u32x16(out1 + 16, _mm512_shuffle_i64x2(s_lo1_u32x16,
		    s_hi1_u32x16, 0xee));
	}
}

void
tq_scan_avx512(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned field_bits, const uint8_t *lut, uint32_t *acc)
{
	size_t b;

	if (field_bits == 4) {
		for (b = 0; b < nblocks; b++)
			scan_block4(blocks + b * block_bytes, nfields, lut,
			    acc + b * TQ_BLOCK);
		return;
	}
	for (b = 0; b + 1 < nblocks; b += 2)
		scan_pair6(blocks + b * block_bytes,
		    blocks + (b + 1) * block_bytes, nfields, lut,
		    acc + b * TQ_BLOCK, acc + (b + 1) * TQ_BLOCK);
	if (b < nblocks)
		scan_pair6(blocks + b * block_bytes, blocks + b * block_bytes,
		    nfields, lut, acc + b * TQ_BLOCK, NULL);
}

/*
 * Most fields a multi-query call takes at a time (in runs of equal size):
 * the tables of eight queries for them, at most 25 KiB, stay in L1 while
 * the call's blocks pass.
 */
#define MULTI_FIELDS 200u

/* One group size, for which scan_block4_multi is inlined with nq fixed. */
#define MULTI_CASE(n)							\
	case n:								\
		scan_block4_multi(block, nf, base, luts, n, out);	\
		break

/*
 * Fields base / 16 .. base / 16 + nf - 1 of every block for g (2..8)
 * queries, whose tables are luts[0 .. g) and sums acc, acc_stride apart.
 */
static void
scan_run4(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nf, size_t base, const uint8_t *const *luts, unsigned g,
    uint32_t *acc, size_t acc_stride)
{
	for (size_t b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes + base;
		uint32_t *out[MULTI_MAX];

		for (unsigned i = 0; i < g; i++)
			out[i] = acc + i * acc_stride + b * TQ_BLOCK;
		switch (g) {
		MULTI_CASE(2);
		MULTI_CASE(3);
		MULTI_CASE(4);
		MULTI_CASE(5);
		MULTI_CASE(6);
		MULTI_CASE(7);
		default:
			scan_block4_multi(block, nf, base, luts, MULTI_MAX,
			    out);
			break;
		}
	}
}

/*
 * Each group of up to eight queries takes all the call's blocks before the
 * next group does, a run of at most MULTI_FIELDS fields at a time, so that
 * its tables come from L2 once a call instead of once a block; what L2
 * gives again instead is the blocks' codes, eight times fewer bytes than
 * the group's tables.  A lone query takes each block whole.  The sums are
 * integers: the same in any order.  1-bit batches of 1000 queries, one
 * thread, Zen 4, alternated runs, against every group over each block in
 * turn (blocks outer): 100K x 1536 3100-3180 -> 3660-3735 QPS,
 * Fashion-MNIST 8210-8360 -> 9110-9410; groups outer with whole blocks
 * gave 3540-3620 at 1536, runs of 64 fields 3430-3570.
 */
void
tq_scan4x_avx512(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, const uint8_t *const *luts, unsigned nq,
    uint32_t *acc, size_t acc_stride)
{
	/* Runs of equal size in whole 64-byte steps (nfields: 4 k). */
	const unsigned runs = nfields > MULTI_FIELDS ?
	    (nfields + MULTI_FIELDS - 1) / MULTI_FIELDS : 1;
	const unsigned step = ((nfields + runs - 1) / runs + 3) & ~3u;
	unsigned j, g, f0, nf;

	for (j = 0; j < nq; j += g) {
		g = nq - j < MULTI_MAX ? nq - j : MULTI_MAX;
		if (g == 1) {
			tq_scan_avx512(blocks, nblocks, block_bytes, nfields,
			    4, luts[j], acc + j * acc_stride);
			continue;
		}
		/* At least one run: the first writes the sums. */
		f0 = 0;
		do {
			nf = nfields - f0 < step ? nfields - f0 : step;
			scan_run4(blocks, nblocks, block_bytes, nf,
			    (size_t)f0 * 16, luts + j, g, acc + j * acc_stride,
			    acc_stride);
			f0 += nf;
		} while (f0 < nfields);
	}
}

/*
 * The dot form (internal.h, struct tq_lut).  The transposition of the
 * lookup form puts the four fields of vector j (low nibbles) and j + 16
 * (high) in dword j; per plane, one vpshufb per half turns the nibbles
 * into that plane's 7-bit levels, once for all the queries scanned
 * together.  A query then costs one vpdpbusd per half and plane per 64
 * bytes of codes, its four int8 values of the plane broadcast from memory
 * (u8 levels times s8 query, four products summed into an int32 lane):
 * with one plane, two operations where the lookup form needs two vpermb
 * and two vpdpbusd.
 */
struct kd {
	__m512i tr, low4, lev[4];
};

static inline struct kd
kd_init(unsigned planes, const uint8_t *lev)
{
	struct kd k;

	k.tr = load_u8x64(tq_transpose4x16);
	k.low4 = _mm512_set1_epi8(0x0f);
	for (unsigned t = 0; t < 4; t++)
		k.lev[t] = _mm512_broadcast_i32x4(_mm_loadu_si128(
		    (const void *)(lev + 16 * (t < planes ? t : 0))));
	return k;
}

/* Four int8 values at p, broadcast to every dword. */
static inline __m512i
q8x4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return _mm512_set1_epi32(v);
}

/*
 * nq (1..8) queries over one block, as scan_block4_multi: inlined with nq
 * and planes constant, the sums in named registers.
 */
#define KD_STEP(i)							\
	do {								\
		if ((i) < nq) {						\
			__m512i q_s8x64 = q8x4(q8 + (i) * q8_stride + qo); \
									\
			lo##i = _mm512_dpbusd_epi32(lo##i, l_u8x64,	\
			    q_s8x64);					\
			hi##i = _mm512_dpbusd_epi32(hi##i, h_u8x64,	\
			    q_s8x64);					\
		}							\
	} while (0)

static inline __attribute__((always_inline)) void
scand_block(const struct kd *k, const uint8_t *block, unsigned nfields,
    unsigned planes, const int8_t *q8, size_t q8_stride, unsigned nq,
    uint32_t *const *out)
{
	__m512i lo0 = _mm512_setzero_si512(), hi0 = _mm512_setzero_si512();
	__m512i lo1 = _mm512_setzero_si512(), hi1 = _mm512_setzero_si512();
	__m512i lo2 = _mm512_setzero_si512(), hi2 = _mm512_setzero_si512();
	__m512i lo3 = _mm512_setzero_si512(), hi3 = _mm512_setzero_si512();
	__m512i lo4 = _mm512_setzero_si512(), hi4 = _mm512_setzero_si512();
	__m512i lo5 = _mm512_setzero_si512(), hi5 = _mm512_setzero_si512();
	__m512i lo6 = _mm512_setzero_si512(), hi6 = _mm512_setzero_si512();
	__m512i lo7 = _mm512_setzero_si512(), hi7 = _mm512_setzero_si512();
	unsigned f, t;

	for (f = 0; f < nfields; f += 4) {
		const uint8_t *p = block + (size_t)f * 16;
		__m512i xt_u8x64, xl_u8x64, xh_u8x64;

		prefetch_ahead(p);
		xt_u8x64 = _mm512_permutexvar_epi8(k->tr, load_u8x64(p));
		xl_u8x64 = _mm512_and_si512(xt_u8x64, k->low4);
		xh_u8x64 = _mm512_and_si512(_mm512_srli_epi16(xt_u8x64, 4),
		    k->low4);
		for (t = 0; t < planes; t++) {
			size_t qo = (size_t)f * planes + 4 * t;
			__m512i l_u8x64 = _mm512_shuffle_epi8(k->lev[t],
			    xl_u8x64);
			__m512i h_u8x64 = _mm512_shuffle_epi8(k->lev[t],
			    xh_u8x64);

			KD_STEP(0);
			KD_STEP(1);
			KD_STEP(2);
			KD_STEP(3);
			KD_STEP(4);
			KD_STEP(5);
			KD_STEP(6);
			KD_STEP(7);
		}
	}
	K4_STORE(0);
	K4_STORE(1);
	K4_STORE(2);
	K4_STORE(3);
	K4_STORE(4);
	K4_STORE(5);
	K4_STORE(6);
	K4_STORE(7);
}

#undef KD_STEP
#undef K4_STORE

/*
 * One query over one block.  vpdpbusd's latency (5 cycles) bounds a
 * single chain of sums, so each half keeps a sum per plane and per even
 * and odd group of four fields (two per plane if one plane), added at the
 * end: exact integers, the same result.  Hot (bench-kernels, 1536
 * coordinates): one chain per half gave 40 GB/s at 4 bits and 21 at 2,
 * the split sums 47 and 33.
 */
/* Four fields at p into the sums of scand_one; odd selects the set. */
static inline __attribute__((always_inline)) void
scand_one_group(const struct kd *k, const uint8_t *p, const int8_t *q8,
    unsigned planes, unsigned odd, __m512i *lo, __m512i *hi)
{
	__m512i xt_u8x64, xl_u8x64, xh_u8x64;
	unsigned t, u;

	prefetch_ahead(p);
	xt_u8x64 = _mm512_permutexvar_epi8(k->tr, load_u8x64(p));
	xl_u8x64 = _mm512_and_si512(xt_u8x64, k->low4);
	xh_u8x64 = _mm512_and_si512(_mm512_srli_epi16(xt_u8x64, 4), k->low4);
	for (t = 0; t < planes; t++) {
		__m512i q_s8x64 = q8x4(q8 + 4 * t);

		u = (odd * planes + t) % 4;
		lo[u] = _mm512_dpbusd_epi32(lo[u], _mm512_shuffle_epi8(k->lev[t],
		    xl_u8x64), q_s8x64);
		hi[u] = _mm512_dpbusd_epi32(hi[u], _mm512_shuffle_epi8(k->lev[t],
		    xh_u8x64), q_s8x64);
	}
}

static inline __attribute__((always_inline)) void
scand_one(const struct kd *k, const uint8_t *block, unsigned nfields,
    unsigned planes, const int8_t *q8, uint32_t *out)
{
	__m512i lo[4], hi[4];
	unsigned f, u;

	for (u = 0; u < 4; u++)
		lo[u] = hi[u] = _mm512_setzero_si512();
	for (f = 0; f + 8 <= nfields; f += 8) {
		scand_one_group(k, block + (size_t)f * 16, q8 + (size_t)f *
		    planes, planes, 0, lo, hi);
		scand_one_group(k, block + (size_t)(f + 4) * 16, q8 +
		    (size_t)(f + 4) * planes, planes, 1, lo, hi);
	}
	if (f < nfields)
		scand_one_group(k, block + (size_t)f * 16, q8 + (size_t)f *
		    planes, planes, 0, lo, hi);
	store_u32x16(out, _mm512_add_epi32(_mm512_add_epi32(lo[0], lo[1]),
	    _mm512_add_epi32(lo[2], lo[3])));
	store_u32x16(out + 16, _mm512_add_epi32(_mm512_add_epi32(hi[0],
	    hi[1]), _mm512_add_epi32(hi[2], hi[3])));
}

/* One group size, for which scand_block is inlined with nq fixed. */
#define DOT_CASE(n)							\
	case n:								\
		scand_block(k, block, nfields, planes, q8, q8_stride, n, \
		    out);						\
		break

/* One group of up to MULTI_MAX queries, inlined with planes constant. */
static inline __attribute__((always_inline)) void
scand_group(const struct kd *k, const uint8_t *block, unsigned nfields,
    unsigned planes, const int8_t *q8, size_t q8_stride, unsigned g,
    uint32_t *const *out)
{
	switch (g) {
	case 1:
		scand_one(k, block, nfields, planes, q8, out[0]);
		break;
	DOT_CASE(2);
	DOT_CASE(3);
	DOT_CASE(4);
	DOT_CASE(5);
	DOT_CASE(6);
	DOT_CASE(7);
	default:
		scand_block(k, block, nfields, planes, q8, q8_stride,
		    MULTI_MAX, out);
		break;
	}
}

#undef DOT_CASE

void
tq_scand_avx512(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const uint8_t *lev, uint32_t *acc, size_t acc_stride)
{
	const struct kd k = kd_init(planes, lev);
	size_t b;
	unsigned j, g, i;

	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		for (j = 0; j < nq; j += g) {
			const int8_t *qj = q8 + j * q8_stride;
			uint32_t *out[MULTI_MAX];

			g = nq - j < MULTI_MAX ? nq - j : MULTI_MAX;
			for (i = 0; i < g; i++)
				out[i] = acc + (j + i) * acc_stride +
				    b * TQ_BLOCK;
			if (planes == 1)
				scand_group(&k, block, nfields, 1, qj,
				    q8_stride, g, out);
			else if (planes == 2)
				scand_group(&k, block, nfields, 2, qj,
				    q8_stride, g, out);
			else
				scand_group(&k, block, nfields, 4, qj,
				    q8_stride, g, out);
		}
	}
}

/* The keys of tq_keys_scalar, 16 rows per step, the same operations. */
uint32_t
tq_keys_avx512(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key)
{
	const __m512 scale = _mm512_set1_ps(p->scale);
	const __m512 bias = _mm512_set1_ps(p->bias);
	const __m512 qc = _mm512_set1_ps(p->qc);
	const __m512 qn2 = _mm512_set1_ps(p->qn2);
	const __m512 two = _mm512_set1_ps(2.0f);
	const __m512 t = _mm512_set1_ps(thr);
	const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
	const __m512i off = _mm512_set1_epi32((int)p->off);
	uint32_t m = 0;

	for (unsigned h = 0; h < TQ_BLOCK; h += 16) {
		__m512 a = _mm512_cvtepi32_ps(_mm512_add_epi32(
		    _mm512_loadu_si512((const void *)(acc + h)), off));
		__m512 ip = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(
		    _mm512_loadu_ps(fs + h), _mm512_add_ps(_mm512_mul_ps(scale,
		    a), bias)), _mm512_loadu_ps(fs + TQ_BLOCK + h)), qc);

		if (p->l2) {
			__m512 x = _mm512_add_ps(_mm512_sub_ps(qn2,
			    _mm512_mul_ps(two, ip)),
			    _mm512_loadu_ps(fs + 2 * TQ_BLOCK + h));

			/* Negation flips the sign bit, as in C. */
			ip = _mm512_castsi512_ps(_mm512_xor_si512(
			    _mm512_castps_si512(x), sign));
		}
		_mm512_storeu_ps(key + h, ip);
		m |= (uint32_t)_mm512_cmp_ps_mask(ip, t, _CMP_GE_OQ) << h;
	}
	return m;
}

/*
 * s and t of rows h .. h + 15 of compact block fh, as tq_fachdec_avx2
 * decodes them (in registers).
 */
static inline void
fachdec16(const uint8_t *fh, unsigned h, __m512 *s, __m512 *t)
{
	__m512i e = _mm512_cvtepi8_epi32(_mm_loadu_si128(
	    (const __m128i *)(const void *)(fh + 4 * TQ_BLOCK + h)));
	__m512 p2;

	e = _mm512_min_epi32(_mm512_max_epi32(e, _mm512_set1_epi32(-126)),
	    _mm512_set1_epi32(127));
	p2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e,
	    _mm512_set1_epi32(127)), 23));
	*s = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
	    (const __m256i *)(const void *)(fh + 2 * h))), p2);
	*t = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256(
	    (const __m256i *)(const void *)(fh + 2 * TQ_BLOCK + 2 * h))), p2);
}

/*
 * The keys of rows h .. h + 15 from their s and t (tq_keysd_scalar's
 * operations) into key + h; returns the mask of keys >= thr.
 */
static inline uint32_t
keys16(const uint32_t *acc, unsigned h, __m512 s, __m512 t,
    const struct tq_keypar *p, float thr, float *key)
{
	__m512 d, k;

	d = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(p->scale),
	    _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_loadu_si512(
	    (const void *)(acc + h)), _mm512_set1_epi32((int)p->off)))),
	    _mm512_set1_ps(p->bias));
	if (p->l2)
		d = _mm512_add_ps(d, d);
	k = _mm512_add_ps(_mm512_set1_ps(p->qk), _mm512_mul_ps(s,
	    _mm512_add_ps(d, t)));
	_mm512_storeu_ps(key + h, k);
	return (uint32_t)_mm512_cmp_ps_mask(k, _mm512_set1_ps(thr),
	    _CMP_GE_OQ) << h;
}

/* The keys of tq_keysh_scalar, 16 rows per step. */
void
tq_keysh_avx512(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above)
{
	for (size_t b = 0; b < nblk; b++) {
		uint32_t m = 0;

		for (unsigned h = 0; h < TQ_BLOCK; h += 16) {
			__m512 s, t;

			fachdec16(fh + b * TQ_FACH_BLOCK, h, &s, &t);
			m |= keys16(acc + b * TQ_BLOCK, h, s, t, p, thr,
			    key + b * TQ_BLOCK);
		}
		above[b] = m;
	}
}

/* tq_fachdec_scalar, 16 rows per step. */
void
tq_fachdec_avx512(const uint8_t *fh, float *st)
{
	for (unsigned h = 0; h < TQ_BLOCK; h += 16) {
		__m512 s, t;

		fachdec16(fh, h, &s, &t);
		_mm512_storeu_ps(st + h, s);
		_mm512_storeu_ps(st + TQ_BLOCK + h, t);
	}
}

/* tq_keysd_scalar, 16 rows per step. */
uint32_t
tq_keysd_avx512(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key)
{
	uint32_t m = 0;

	for (unsigned h = 0; h < TQ_BLOCK; h += 16)
		m |= keys16(acc, h, _mm512_loadu_ps(st + h),
		    _mm512_loadu_ps(st + TQ_BLOCK + h), p, thr, key);
	return m;
}
