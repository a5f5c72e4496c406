/*
 * scan_avx512.c - the scan kernel for AVX-512 (built with -mavx512f
 * -mavx512bw -mavx512vl -mavx512vbmi -mavx512vnni -mbmi2; it uses BW, VL
 * and VBMI, and the dispatcher requires all of those flags).
 *
 * Layout (internal.h, "The blocked scan layout"): blocks of 32 vectors.
 *
 *   4-bit fields: field f of a block is a 16-byte row, byte j = vector j
 *   (low nibble) | vector j + 16 (high nibble).  One 64-byte load takes
 *   four consecutive fields, and one 64-byte load of the tables their four
 *   16-entry tables in the matching 128-bit lanes, so vpshufb (which looks
 *   up within each lane) applies each field's own table: vpshufb(table,
 *   x & 15) gives vectors 0..15, vpshufb(table, (x >> 4) & 15) vectors
 *   16..31.  The four lanes hold the same vectors and are added only at a
 *   flush.  vpermb is not used here: it needs the index masked just the
 *   same and would look all four fields up in one table.
 *
 *   6-bit fields: groups of four fields as three 32-byte rows A, B, C.
 *   VBMI's vpermb (_mm512_permutexvar_epi8) is a 64-entry byte lookup that
 *   reads only the low 6 bits of each index, so A, B and C index the
 *   tables of f0, f1, f2 unmasked; f3 is A >> 6 | (B >> 6) << 2 |
 *   (C >> 6) << 4, built from three 16-bit shifts (AVX-512 has no byte
 *   shift) merged by two vpternlogd bit-selects, its junk bits 6 and 7
 *   ignored by vpermb likewise.  A 512-bit vpermb covers 64 vectors, so
 *   two blocks are scanned at once, block b in the low 256 bits and b + 1
 *   in the high; an odd last block is paired with itself.  (The 256-bit
 *   vpermb only has a 32-entry table.)
 *
 * Accumulation is exact.  The u8 lookups are summed as u16 pairs the way
 * FAISS does it, with no unpacking: acc_all_u16 += v (as u16: even vector
 * in the low byte, odd vector in the high byte, wrapping), acc_odd_u16 +=
 * v >> 8; at a flush the even sums are acc_all - (acc_odd << 8).  Both are
 * exact while each accumulator has taken at most 257 additions of 255, so
 * each u16 lane is flushed into u32 after 256 additions: every 1024 fields
 * for 4-bit (a lane sees every fourth field), every 64 groups (256 fields)
 * for 6-bit (four lookups per group land in the same lanes).
 *
 * Blocks are scanned in address order; the tables stay in L1 or L2.  A
 * software prefetch 1 KiB ahead, one per 64 bytes of codes, brings a scan
 * from memory up to the machine's streaming read rate (about 8 GB/s on the
 * development machine, a Sapphire Rapids VM, against 6 to 7 without it).
 * The 4-bit loop takes 128 bytes (eight fields) per step: with one step of
 * 64 bytes gcc 12 put four register copies in the loop, and unrolling was
 * about 10% faster in L2.
 *
 * Measured in L2 (scripts/bench-kernels.c, "hot"): about 25 GB/s for 4-bit
 * fields (AVX2: 23; port 5 takes every vpshufb, so 512 bits buy little
 * here), about 31 GB/s for 6-bit fields (AVX2: 11, as vpermb replaces four
 * vpshufb and three blends).
 */
#include <immintrin.h>

#include "internal.h"

/* Fields (4-bit) or groups (6-bit) per u16 flush: 256 additions per lane. */
#define FLUSH4 1024u
#define FLUSH6_GROUPS 64u

/* Software prefetch distance in the codes; see the opening comment. */
#define PREFETCH_AHEAD 1024u

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
 * for a prefetch but not for C pointer arithmetic.
 */
static inline void
prefetch_ahead(const uint8_t *p)
{
	_mm_prefetch((const char *)((uintptr_t)p + PREFETCH_AHEAD),
	    _MM_HINT_T0);
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

/* Adds two sets of 64 u8 lookups (for the same vectors) to a FAISS pair. */
static inline void
add_u8x2(__m512i *all_u16x32, __m512i *odd_u16x32, __m512i v_u8x64,
    __m512i w_u8x64)
{
	*all_u16x32 = _mm512_add_epi16(*all_u16x32,
	    _mm512_add_epi16(v_u8x64, w_u8x64));
	*odd_u16x32 = _mm512_add_epi16(*odd_u16x32, _mm512_add_epi16(
	    _mm512_srli_epi16(v_u8x64, 8), _mm512_srli_epi16(w_u8x64, 8)));
}

/*
 * Looks up fields f..f + 3 (codes at p, tables at t): vectors 0..15 into
 * *vlo_u8x64, vectors 16..31 into *vhi_u8x64, field f + i in lane i.
 */
static inline void
lookup_quad(const uint8_t *p, const uint8_t *t, __m512i low4_u8x64,
    __m512i *vlo_u8x64, __m512i *vhi_u8x64)
{
	__m512i x_u8x64 = load_u8x64(p);
	__m512i tab_u8x64 = load_u8x64(t);

	*vlo_u8x64 = _mm512_shuffle_epi8(tab_u8x64,
	    _mm512_and_si512(x_u8x64, low4_u8x64));
	*vhi_u8x64 = _mm512_shuffle_epi8(tab_u8x64,
	    _mm512_and_si512(_mm512_srli_epi16(x_u8x64, 4), low4_u8x64));
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

/* Adds the four lanes' 8 u16 sums, widened, into two u32 halves. */
static inline __m512i
lanes_to_u32(__m512i sum_u32x16, __m512i v_u16x32)
{
	__m512i a_u32x16 = _mm512_cvtepu16_epi32(
	    _mm512_castsi512_si256(v_u16x32));
	__m512i b_u32x16 = _mm512_cvtepu16_epi32(
	    _mm512_extracti64x4_epi64(v_u16x32, 1));

	return _mm512_add_epi32(sum_u32x16,
	    _mm512_add_epi32(a_u32x16, b_u32x16));
}

static inline __m256i
halves_u32(__m512i v_u32x16)
{
	return _mm256_add_epi32(_mm512_castsi512_si256(v_u32x16),
	    _mm512_extracti64x4_epi64(v_u32x16, 1));
}

static void
scan_block4(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t *out)
{
	const __m512i low4_u8x64 = _mm512_set1_epi8(0x0f);
	/* Vectors 0..7, 8..15, 16..23, 24..31, each in both halves. */
	__m512i s0_u32x16 = _mm512_setzero_si512();
	__m512i s1_u32x16 = _mm512_setzero_si512();
	__m512i s2_u32x16 = _mm512_setzero_si512();
	__m512i s3_u32x16 = _mm512_setzero_si512();
	unsigned f0;

	for (f0 = 0; f0 < nfields; f0 += FLUSH4) {
		unsigned n = nfields - f0 < FLUSH4 ? nfields - f0 : FLUSH4;
		const uint8_t *p = block + (size_t)f0 * 16;
		const uint8_t *t = lut + (size_t)f0 * 16;
		const uint8_t *end = p + (size_t)n * 16;
		__m512i lo_all_u16x32 = _mm512_setzero_si512();
		__m512i lo_odd_u16x32 = _mm512_setzero_si512();
		__m512i hi_all_u16x32 = _mm512_setzero_si512();
		__m512i hi_odd_u16x32 = _mm512_setzero_si512();
		__m512i a_u16x32, b_u16x32;

		/* Eight fields per step, one prefetch per cache line. */
		for (; p + 128 <= end; p += 128, t += 128) {
			__m512i vlo0_u8x64, vhi0_u8x64, vlo1_u8x64, vhi1_u8x64;

			prefetch_ahead(p);
			prefetch_ahead(p + 64);
			lookup_quad(p, t, low4_u8x64, &vlo0_u8x64, &vhi0_u8x64);
			lookup_quad(p + 64, t + 64, low4_u8x64, &vlo1_u8x64,
			    &vhi1_u8x64);
			add_u8x2(&lo_all_u16x32, &lo_odd_u16x32, vlo0_u8x64,
			    vlo1_u8x64);
			add_u8x2(&hi_all_u16x32, &hi_odd_u16x32, vhi0_u8x64,
			    vhi1_u8x64);
		}
		/* The last four fields when nfields is not a multiple of 8. */
		for (; p < end; p += 64, t += 64) {
			__m512i vlo_u8x64, vhi_u8x64;

			lookup_quad(p, t, low4_u8x64, &vlo_u8x64, &vhi_u8x64);
			add_u8(&lo_all_u16x32, &lo_odd_u16x32, vlo_u8x64);
			add_u8(&hi_all_u16x32, &hi_odd_u16x32, vhi_u8x64);
		}
		split_u16(lo_all_u16x32, lo_odd_u16x32, &a_u16x32, &b_u16x32);
		s0_u32x16 = lanes_to_u32(s0_u32x16, a_u16x32);
		s1_u32x16 = lanes_to_u32(s1_u32x16, b_u16x32);
		split_u16(hi_all_u16x32, hi_odd_u16x32, &a_u16x32, &b_u16x32);
		s2_u32x16 = lanes_to_u32(s2_u32x16, a_u16x32);
		s3_u32x16 = lanes_to_u32(s3_u32x16, b_u16x32);
	}
	_mm256_storeu_si256((__m256i *)(void *)out, halves_u32(s0_u32x16));
	_mm256_storeu_si256((__m256i *)(void *)(out + 8),
	    halves_u32(s1_u32x16));
	_mm256_storeu_si256((__m256i *)(void *)(out + 16),
	    halves_u32(s2_u32x16));
	_mm256_storeu_si256((__m256i *)(void *)(out + 24),
	    halves_u32(s3_u32x16));
}

/*
 * Four queries over one 4-bit block: the codes are loaded and split into
 * nibbles once for the four tables.  The sums are those of scan_block4
 * for each table, added in the same order.  With the nibble split shared,
 * a query costs 16 port-0/5 operations per 128 bytes of codes instead of
 * 22 (four lookups and twelve adds remain).
 */
static void
scan_block4_x4(const uint8_t *block, unsigned nfields,
    const uint8_t *const *lut, uint32_t *const *out)
{
	const __m512i low4_u8x64 = _mm512_set1_epi8(0x0f);
	__m512i s_u32x16[4][4];
	unsigned f0, qi, i;

	for (qi = 0; qi < 4; qi++)
		for (i = 0; i < 4; i++)
			s_u32x16[qi][i] = _mm512_setzero_si512();
	for (f0 = 0; f0 < nfields; f0 += FLUSH4) {
		unsigned n = nfields - f0 < FLUSH4 ? nfields - f0 : FLUSH4;
		const uint8_t *p = block + (size_t)f0 * 16;
		const uint8_t *end = p + (size_t)n * 16;
		size_t off = (size_t)f0 * 16;
		__m512i la_u16x32[4], lo_u16x32[4], ha_u16x32[4], ho_u16x32[4];

		for (qi = 0; qi < 4; qi++) {
			la_u16x32[qi] = _mm512_setzero_si512();
			lo_u16x32[qi] = _mm512_setzero_si512();
			ha_u16x32[qi] = _mm512_setzero_si512();
			ho_u16x32[qi] = _mm512_setzero_si512();
		}
		for (; p + 128 <= end; p += 128, off += 128) {
			__m512i x0_u8x64 = load_u8x64(p);
			__m512i x1_u8x64 = load_u8x64(p + 64);
			__m512i l0_u8x64 = _mm512_and_si512(x0_u8x64,
			    low4_u8x64);
			__m512i h0_u8x64 = _mm512_and_si512(
			    _mm512_srli_epi16(x0_u8x64, 4), low4_u8x64);
			__m512i l1_u8x64 = _mm512_and_si512(x1_u8x64,
			    low4_u8x64);
			__m512i h1_u8x64 = _mm512_and_si512(
			    _mm512_srli_epi16(x1_u8x64, 4), low4_u8x64);

			prefetch_ahead(p);
			prefetch_ahead(p + 64);
#pragma GCC unroll 4
			for (qi = 0; qi < 4; qi++) {
				__m512i t0_u8x64 = load_u8x64(lut[qi] + off);
				__m512i t1_u8x64 = load_u8x64(lut[qi] + off +
				    64);

				add_u8x2(&la_u16x32[qi], &lo_u16x32[qi],
				    _mm512_shuffle_epi8(t0_u8x64, l0_u8x64),
				    _mm512_shuffle_epi8(t1_u8x64, l1_u8x64));
				add_u8x2(&ha_u16x32[qi], &ho_u16x32[qi],
				    _mm512_shuffle_epi8(t0_u8x64, h0_u8x64),
				    _mm512_shuffle_epi8(t1_u8x64, h1_u8x64));
			}
		}
		for (; p < end; p += 64, off += 64) {
			__m512i x_u8x64 = load_u8x64(p);
			__m512i l_u8x64 = _mm512_and_si512(x_u8x64, low4_u8x64);
			__m512i h_u8x64 = _mm512_and_si512(
			    _mm512_srli_epi16(x_u8x64, 4), low4_u8x64);

#pragma GCC unroll 4
			for (qi = 0; qi < 4; qi++) {
				__m512i t_u8x64 = load_u8x64(lut[qi] + off);

				add_u8(&la_u16x32[qi], &lo_u16x32[qi],
				    _mm512_shuffle_epi8(t_u8x64, l_u8x64));
				add_u8(&ha_u16x32[qi], &ho_u16x32[qi],
				    _mm512_shuffle_epi8(t_u8x64, h_u8x64));
			}
		}
		for (qi = 0; qi < 4; qi++) {
			__m512i a_u16x32, b_u16x32;

			split_u16(la_u16x32[qi], lo_u16x32[qi], &a_u16x32,
			    &b_u16x32);
			s_u32x16[qi][0] = lanes_to_u32(s_u32x16[qi][0],
			    a_u16x32);
			s_u32x16[qi][1] = lanes_to_u32(s_u32x16[qi][1],
			    b_u16x32);
			split_u16(ha_u16x32[qi], ho_u16x32[qi], &a_u16x32,
			    &b_u16x32);
			s_u32x16[qi][2] = lanes_to_u32(s_u32x16[qi][2],
			    a_u16x32);
			s_u32x16[qi][3] = lanes_to_u32(s_u32x16[qi][3],
			    b_u16x32);
		}
	}
	for (qi = 0; qi < 4; qi++)
		for (i = 0; i < 4; i++)
			_mm256_storeu_si256((__m256i *)(void *)(out[qi] + 8 * i),
			    halves_u32(s_u32x16[qi][i]));
}

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

void
tq_scan4x_avx512(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, const uint8_t *const *luts, unsigned nq,
    uint32_t *acc, size_t acc_stride)
{
	size_t b;
	unsigned j;

	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		for (j = 0; j + 4 <= nq; j += 4) {
			uint32_t *out[4] = { acc + j * acc_stride + b * TQ_BLOCK,
			    acc + (j + 1) * acc_stride + b * TQ_BLOCK,
			    acc + (j + 2) * acc_stride + b * TQ_BLOCK,
			    acc + (j + 3) * acc_stride + b * TQ_BLOCK };

			scan_block4_x4(block, nfields, luts + j, out);
		}
		for (; j < nq; j++)
			scan_block4(block, nfields, luts[j],
			    acc + j * acc_stride + b * TQ_BLOCK);
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
	uint32_t m = 0;

	for (unsigned h = 0; h < TQ_BLOCK; h += 16) {
		__m512 a = _mm512_cvtepi32_ps(_mm512_loadu_si512(
		    (const void *)(acc + h)));
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
