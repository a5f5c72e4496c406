/*
 * scan_avx2.c - the scan kernel for AVX2 (built with -mavx2 -mfma -mbmi2).
 *
 * Layout (internal.h, "The blocked scan layout"): blocks of 32 vectors.
 *
 *   4-bit fields: field f of a block is a 16-byte row, byte j = vector j
 *   (low nibble) | vector j + 16 (high nibble).  Rows f and f + 1 are
 *   adjacent, and so are their 16-entry tables, so one 32-byte load of
 *   codes and one of tables put field f in lane 0 and field f + 1 in
 *   lane 1.  vpshufb looks up per 128-bit lane, so it applies each
 *   field's own table: vpshufb(table, x & 15) gives vectors 0..15 and
 *   vpshufb(table, (x >> 4) & 15) vectors 16..31 (there is no byte shift:
 *   a 16-bit shift and a mask).  The two lanes hold the same vectors and
 *   are added only when the u16 sums are flushed to u32.
 *
 *   6-bit fields: groups of four fields as three 32-byte rows A, B, C;
 *   A, B and C index fields f0, f1, f2 with their low 6 bits and their top
 *   two bits make f3.  AVX2 has no 64-entry byte lookup, so each lookup
 *   is four vpshufb, one per 16-byte quarter of the table (broadcast to
 *   both lanes by vbroadcasti128, a plain load), merged by vpblendvb on
 *   index bits 4 and 5, which a 16-bit left shift moves to each byte's
 *   bit 7 (the only bit vpblendvb reads).  For f3 the selector bits are
 *   C's bits 6 and 7 themselves, so f3 is never assembled in full.
 *
 * Accumulation is exact.  The u8 lookups are summed as u16 pairs the way
 * FAISS does it, with no unpacking: acc_all_u16 += v (as u16: even vector
 * in the low byte, odd vector in the high byte, wrapping), acc_odd_u16 +=
 * v >> 8; at a flush the even sums are acc_all - (acc_odd << 8).  Both are
 * exact while each accumulator has taken at most 257 additions of 255, so
 * each u16 lane is flushed into u32 after 256 additions: every 512 fields
 * for 4-bit (a lane sees every other field), every 64 groups (256 fields)
 * for 6-bit (four lookups per group land in the same lanes).
 *
 * Blocks are scanned one after the other, so the codes are read in address
 * order; the tables stay in L1 (24 KiB at 1536 4-bit fields).  A software
 * prefetch 1 KiB ahead, one per 64 bytes of codes, lifted a scan of 77 MB
 * of 4-bit codes from about 6 to about 8 GB/s on the development machine
 * (a Sapphire Rapids VM), the rate of a plain streaming sum there;
 * presumably the hardware prefetcher alone keeps too few lines in flight
 * behind this much arithmetic.  The 4-bit loop takes 64 bytes (four
 * fields) per step, for one prefetch per cache line.
 *
 * Measured in L2 (scripts/bench-kernels.c, "hot"): about 23 GB/s for 4-bit
 * fields (scalar: 1.5), 11 GB/s for 6-bit fields.  Both are above memory
 * bandwidth, so a scan from memory is bound by memory.  The 6-bit lookup is
 * the slow part (four vpshufb and three vpblendvb per 32 lookups); a
 * variant with XOR-differenced quarter tables (no blends) measured only
 * 3-5% faster and was not kept.
 *
 * The dot form (int8 queries times 7-bit levels, tq_scand_avx2) has its
 * own comment further down.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

/* Fields per u16 flush: 256 additions per lane. */
#define FLUSH4 512u
#define FLUSH6_GROUPS 64u

/* Software prefetch distance in the codes; see the opening comment. */
#define PREFETCH_AHEAD 1024u

static inline __m256i
load_u8x32(const uint8_t *p)
{
	return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/*
 * Asks for the cache line PREFETCH_AHEAD bytes on.  The address is formed
 * as an integer: it may lie past the end of the codes, which is harmless
 * for a prefetch but not for C pointer arithmetic.  __builtin_prefetch,
 * not _mm_prefetch, and always inlined: gcc 12 left this function out of
 * line in scand_block, found that the prefetch in it had no effect and
 * deleted the call (seen in the assembly, twice: no prefetch at all, a
 * scan from memory 40% slower, or from L3 four times slower).
 */
static inline __attribute__((always_inline)) void
prefetch_ahead(const uint8_t *p)
{
	__builtin_prefetch((const void *)((uintptr_t)p + PREFETCH_AHEAD), 0,
	    3);
}

/*
 * Turns the FAISS pair of u16 sums into the even and odd vectors' sums,
 * interleaved back into vector order: lo_u16x16 gets vectors 0..7 (lane 0
 * from the even fields, lane 1 from the odd fields), hi_u16x16 vectors
 * 8..15, both relative to the 16 vectors this pair covers.
 */
static inline void
split_u16(__m256i all_u16x16, __m256i odd_u16x16, __m256i *lo_u16x16,
    __m256i *hi_u16x16)
{
	__m256i even_u16x16 = _mm256_sub_epi16(all_u16x16,
	    _mm256_slli_epi16(odd_u16x16, 8));

	*lo_u16x16 = _mm256_unpacklo_epi16(even_u16x16, odd_u16x16);
	*hi_u16x16 = _mm256_unpackhi_epi16(even_u16x16, odd_u16x16);
}

/* Widens both lanes of 8 u16 sums (same vectors) and adds them to u32. */
static inline __m256i
lanes_to_u32(__m256i sum_u32x8, __m256i v_u16x16)
{
	__m256i a_u32x8 = _mm256_cvtepu16_epi32(_mm256_castsi256_si128(v_u16x16));
	__m256i b_u32x8 = _mm256_cvtepu16_epi32(
	    _mm256_extracti128_si256(v_u16x16, 1));

	return _mm256_add_epi32(sum_u32x8, _mm256_add_epi32(a_u32x8, b_u32x8));
}

/* Adds 32 u8 lookups to a FAISS pair of u16 sums. */
static inline void
add_u8(__m256i *all_u16x16, __m256i *odd_u16x16, __m256i v_u8x32)
{
	*all_u16x16 = _mm256_add_epi16(*all_u16x16, v_u8x32);
	*odd_u16x16 = _mm256_add_epi16(*odd_u16x16,
	    _mm256_srli_epi16(v_u8x32, 8));
}

/* Adds two sets of 32 u8 lookups (for the same vectors) to a FAISS pair. */
static inline void
add_u8x2(__m256i *all_u16x16, __m256i *odd_u16x16, __m256i v_u8x32,
    __m256i w_u8x32)
{
	*all_u16x16 = _mm256_add_epi16(*all_u16x16,
	    _mm256_add_epi16(v_u8x32, w_u8x32));
	*odd_u16x16 = _mm256_add_epi16(*odd_u16x16, _mm256_add_epi16(
	    _mm256_srli_epi16(v_u8x32, 8), _mm256_srli_epi16(w_u8x32, 8)));
}

/*
 * Looks up fields f, f + 1 (codes at p, tables at t): vectors 0..15 into
 * *vlo_u8x32, vectors 16..31 into *vhi_u8x32, field f in lane 0.
 */
static inline void
lookup_pair(const uint8_t *p, const uint8_t *t, __m256i low4_u8x32,
    __m256i *vlo_u8x32, __m256i *vhi_u8x32)
{
	__m256i x_u8x32 = load_u8x32(p);
	__m256i tab_u8x32 = load_u8x32(t);

	*vlo_u8x32 = _mm256_shuffle_epi8(tab_u8x32,
	    _mm256_and_si256(x_u8x32, low4_u8x32));
	*vhi_u8x32 = _mm256_shuffle_epi8(tab_u8x32,
	    _mm256_and_si256(_mm256_srli_epi16(x_u8x32, 4), low4_u8x32));
}

static void
scan_block4(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t *out)
{
	const __m256i low4_u8x32 = _mm256_set1_epi8(0x0f);
	__m256i s0_u32x8 = _mm256_setzero_si256();	/* vectors 0..7 */
	__m256i s1_u32x8 = _mm256_setzero_si256();	/* 8..15 */
	__m256i s2_u32x8 = _mm256_setzero_si256();	/* 16..23 */
	__m256i s3_u32x8 = _mm256_setzero_si256();	/* 24..31 */
	unsigned f0;

	for (f0 = 0; f0 < nfields; f0 += FLUSH4) {
		unsigned n = nfields - f0 < FLUSH4 ? nfields - f0 : FLUSH4;
		const uint8_t *p = block + (size_t)f0 * 16;
		const uint8_t *t = lut + (size_t)f0 * 16;
		const uint8_t *end = p + (size_t)n * 16;
		__m256i lo_all_u16x16 = _mm256_setzero_si256();
		__m256i lo_odd_u16x16 = _mm256_setzero_si256();
		__m256i hi_all_u16x16 = _mm256_setzero_si256();
		__m256i hi_odd_u16x16 = _mm256_setzero_si256();
		__m256i a_u16x16, b_u16x16;

		/* Two pairs of fields per step, one prefetch per cache line. */
		for (; p + 64 <= end; p += 64, t += 64) {
			__m256i vlo0_u8x32, vhi0_u8x32, vlo1_u8x32, vhi1_u8x32;

			prefetch_ahead(p);
			lookup_pair(p, t, low4_u8x32, &vlo0_u8x32, &vhi0_u8x32);
			lookup_pair(p + 32, t + 32, low4_u8x32, &vlo1_u8x32,
			    &vhi1_u8x32);
			add_u8x2(&lo_all_u16x16, &lo_odd_u16x16, vlo0_u8x32,
			    vlo1_u8x32);
			add_u8x2(&hi_all_u16x16, &hi_odd_u16x16, vhi0_u8x32,
			    vhi1_u8x32);
		}
		/* nfields is a multiple of 4, so this runs only if it is not. */
		for (; p < end; p += 32, t += 32) {
			__m256i vlo_u8x32, vhi_u8x32;

			lookup_pair(p, t, low4_u8x32, &vlo_u8x32, &vhi_u8x32);
			add_u8(&lo_all_u16x16, &lo_odd_u16x16, vlo_u8x32);
			add_u8(&hi_all_u16x16, &hi_odd_u16x16, vhi_u8x32);
		}
		split_u16(lo_all_u16x16, lo_odd_u16x16, &a_u16x16, &b_u16x16);
		s0_u32x8 = lanes_to_u32(s0_u32x8, a_u16x16);
		s1_u32x8 = lanes_to_u32(s1_u32x8, b_u16x16);
		split_u16(hi_all_u16x16, hi_odd_u16x16, &a_u16x16, &b_u16x16);
		s2_u32x8 = lanes_to_u32(s2_u32x8, a_u16x16);
		s3_u32x8 = lanes_to_u32(s3_u32x8, b_u16x16);
	}
	_mm256_storeu_si256((__m256i *)(void *)out, s0_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 8), s1_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 16), s2_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 24), s3_u32x8);
}

/*
 * One 64-entry lookup for 32 vectors: idx_u8x32 holds the index in bits
 * 0..3 with bit 7 clear (vpshufb zeroes a byte whose index has bit 7 set),
 * sel4_u8x32 and sel5_u8x32 hold index bits 4 and 5 in their bit 7.
 */
static inline __m256i
lookup64(const uint8_t *tab, __m256i idx_u8x32, __m256i sel4_u8x32,
    __m256i sel5_u8x32)
{
	const __m128i *q = (const __m128i *)(const void *)tab;
	__m256i q0_u8x32 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q));
	__m256i q1_u8x32 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q + 1));
	__m256i q2_u8x32 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q + 2));
	__m256i q3_u8x32 = _mm256_broadcastsi128_si256(_mm_loadu_si128(q + 3));
	__m256i r01_u8x32 = _mm256_blendv_epi8(
	    _mm256_shuffle_epi8(q0_u8x32, idx_u8x32),
	    _mm256_shuffle_epi8(q1_u8x32, idx_u8x32), sel4_u8x32);
	__m256i r23_u8x32 = _mm256_blendv_epi8(
	    _mm256_shuffle_epi8(q2_u8x32, idx_u8x32),
	    _mm256_shuffle_epi8(q3_u8x32, idx_u8x32), sel4_u8x32);

	return _mm256_blendv_epi8(r01_u8x32, r23_u8x32, sel5_u8x32);
}

/* Lookup of a field stored in the low 6 bits of each byte of x. */
static inline __m256i
lookup_row(const uint8_t *tab, __m256i x_u8x32, __m256i low4_u8x32)
{
	return lookup64(tab, _mm256_and_si256(x_u8x32, low4_u8x32),
	    _mm256_slli_epi16(x_u8x32, 3), _mm256_slli_epi16(x_u8x32, 2));
}

static void
scan_block6(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t *out)
{
	const __m256i low4_u8x32 = _mm256_set1_epi8(0x0f);
	const __m256i low2_u8x32 = _mm256_set1_epi8(0x03);
	const __m256i bits23_u8x32 = _mm256_set1_epi8(0x0c);
	unsigned ngroups = nfields / 4, g0;
	__m256i s0_u32x8 = _mm256_setzero_si256();	/* vectors 0..7 */
	__m256i s1_u32x8 = _mm256_setzero_si256();	/* 8..15 */
	__m256i s2_u32x8 = _mm256_setzero_si256();	/* 16..23 */
	__m256i s3_u32x8 = _mm256_setzero_si256();	/* 24..31 */

	for (g0 = 0; g0 < ngroups; g0 += FLUSH6_GROUPS) {
		unsigned n = ngroups - g0 < FLUSH6_GROUPS ? ngroups - g0 :
		    FLUSH6_GROUPS;
		const uint8_t *p = block + (size_t)g0 * 96;
		const uint8_t *t = lut + (size_t)g0 * 256;
		const uint8_t *end = p + (size_t)n * 96;
		/* Lane 0 = vectors 0..15, lane 1 = 16..31, one field each. */
		__m256i all_u16x16 = _mm256_setzero_si256();
		__m256i odd_u16x16 = _mm256_setzero_si256();
		__m256i even_u16x16, lo_u16x16, hi_u16x16;

		for (; p < end; p += 96, t += 256) {
			__m256i a_u8x32 = load_u8x32(p);
			__m256i b_u8x32 = load_u8x32(p + 32);
			__m256i c_u8x32 = load_u8x32(p + 64);
			/* f3 bits 0..3 = A bits 6,7 and B bits 6,7. */
			__m256i f3_u8x32 = _mm256_or_si256(
			    _mm256_and_si256(_mm256_srli_epi16(a_u8x32, 6),
			    low2_u8x32),
			    _mm256_and_si256(_mm256_srli_epi16(b_u8x32, 4),
			    bits23_u8x32));

			prefetch_ahead(p);
			prefetch_ahead(p + 64);
			add_u8(&all_u16x16, &odd_u16x16,
			    lookup_row(t, a_u8x32, low4_u8x32));
			add_u8(&all_u16x16, &odd_u16x16,
			    lookup_row(t + 64, b_u8x32, low4_u8x32));
			add_u8(&all_u16x16, &odd_u16x16,
			    lookup_row(t + 128, c_u8x32, low4_u8x32));
			/* f3 bits 4, 5 = C bits 6, 7. */
			add_u8(&all_u16x16, &odd_u16x16, lookup64(t + 192,
			    f3_u8x32, _mm256_slli_epi16(c_u8x32, 1), c_u8x32));
		}
		even_u16x16 = _mm256_sub_epi16(all_u16x16,
		    _mm256_slli_epi16(odd_u16x16, 8));
		/* Lane 0: vectors 0..7 then 8..15; lane 1: 16..23, 24..31. */
		lo_u16x16 = _mm256_unpacklo_epi16(even_u16x16, odd_u16x16);
		hi_u16x16 = _mm256_unpackhi_epi16(even_u16x16, odd_u16x16);
		s0_u32x8 = _mm256_add_epi32(s0_u32x8,
		    _mm256_cvtepu16_epi32(_mm256_castsi256_si128(lo_u16x16)));
		s1_u32x8 = _mm256_add_epi32(s1_u32x8,
		    _mm256_cvtepu16_epi32(_mm256_castsi256_si128(hi_u16x16)));
		s2_u32x8 = _mm256_add_epi32(s2_u32x8, _mm256_cvtepu16_epi32(
		    _mm256_extracti128_si256(lo_u16x16, 1)));
		s3_u32x8 = _mm256_add_epi32(s3_u32x8, _mm256_cvtepu16_epi32(
		    _mm256_extracti128_si256(hi_u16x16, 1)));
	}
	_mm256_storeu_si256((__m256i *)(void *)out, s0_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 8), s1_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 16), s2_u32x8);
	_mm256_storeu_si256((__m256i *)(void *)(out + 24), s3_u32x8);
}

void
tq_scan_avx2(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned field_bits, const uint8_t *lut, uint32_t *acc)
{
	size_t b;

	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		if (field_bits == 4)
			scan_block4(block, nfields, lut, acc + b * TQ_BLOCK);
		else
			scan_block6(block, nfields, lut, acc + b * TQ_BLOCK);
	}
}

/*
 * Two queries over one 4-bit block: the codes are loaded and split into
 * nibbles once for both tables (sixteen registers hold the two queries'
 * FAISS pairs, the nibbles and the mask, so two is the most).  The sums
 * are those of scan_block4 for each table, added in the same order.
 */
static void
scan_block4_x2(const uint8_t *block, unsigned nfields, const uint8_t *lut0,
    const uint8_t *lut1, uint32_t *out0, uint32_t *out1)
{
	const __m256i low4_u8x32 = _mm256_set1_epi8(0x0f);
	const uint8_t *lut[2] = { lut0, lut1 };
	uint32_t *out[2] = { out0, out1 };
	__m256i s_u32x8[2][4];
	unsigned f0, qi, i;

	for (qi = 0; qi < 2; qi++)
		for (i = 0; i < 4; i++)
			s_u32x8[qi][i] = _mm256_setzero_si256();
	for (f0 = 0; f0 < nfields; f0 += FLUSH4) {
		unsigned n = nfields - f0 < FLUSH4 ? nfields - f0 : FLUSH4;
		const uint8_t *p = block + (size_t)f0 * 16;
		const uint8_t *end = p + (size_t)n * 16;
		size_t off = (size_t)f0 * 16;
		__m256i la_u16x16[2], lo_u16x16[2], ha_u16x16[2], ho_u16x16[2];

		for (qi = 0; qi < 2; qi++) {
			la_u16x16[qi] = _mm256_setzero_si256();
			lo_u16x16[qi] = _mm256_setzero_si256();
			ha_u16x16[qi] = _mm256_setzero_si256();
			ho_u16x16[qi] = _mm256_setzero_si256();
		}
		for (; p + 64 <= end; p += 64, off += 64) {
			__m256i x0_u8x32 = load_u8x32(p);
			__m256i x1_u8x32 = load_u8x32(p + 32);
			__m256i l0_u8x32 = _mm256_and_si256(x0_u8x32,
			    low4_u8x32);
			__m256i h0_u8x32 = _mm256_and_si256(
			    _mm256_srli_epi16(x0_u8x32, 4), low4_u8x32);
			__m256i l1_u8x32 = _mm256_and_si256(x1_u8x32,
			    low4_u8x32);
			__m256i h1_u8x32 = _mm256_and_si256(
			    _mm256_srli_epi16(x1_u8x32, 4), low4_u8x32);

			prefetch_ahead(p);
#pragma GCC unroll 2
			for (qi = 0; qi < 2; qi++) {
				__m256i t0_u8x32 = load_u8x32(lut[qi] + off);
				__m256i t1_u8x32 = load_u8x32(lut[qi] + off +
				    32);

				add_u8x2(&la_u16x16[qi], &lo_u16x16[qi],
				    _mm256_shuffle_epi8(t0_u8x32, l0_u8x32),
				    _mm256_shuffle_epi8(t1_u8x32, l1_u8x32));
				add_u8x2(&ha_u16x16[qi], &ho_u16x16[qi],
				    _mm256_shuffle_epi8(t0_u8x32, h0_u8x32),
				    _mm256_shuffle_epi8(t1_u8x32, h1_u8x32));
			}
		}
		for (; p < end; p += 32, off += 32) {
			__m256i x_u8x32 = load_u8x32(p);
			__m256i l_u8x32 = _mm256_and_si256(x_u8x32, low4_u8x32);
			__m256i h_u8x32 = _mm256_and_si256(
			    _mm256_srli_epi16(x_u8x32, 4), low4_u8x32);

#pragma GCC unroll 2
			for (qi = 0; qi < 2; qi++) {
				__m256i t_u8x32 = load_u8x32(lut[qi] + off);

				add_u8(&la_u16x16[qi], &lo_u16x16[qi],
				    _mm256_shuffle_epi8(t_u8x32, l_u8x32));
				add_u8(&ha_u16x16[qi], &ho_u16x16[qi],
				    _mm256_shuffle_epi8(t_u8x32, h_u8x32));
			}
		}
		for (qi = 0; qi < 2; qi++) {
			__m256i a_u16x16, b_u16x16;

			split_u16(la_u16x16[qi], lo_u16x16[qi], &a_u16x16,
			    &b_u16x16);
			s_u32x8[qi][0] = lanes_to_u32(s_u32x8[qi][0], a_u16x16);
			s_u32x8[qi][1] = lanes_to_u32(s_u32x8[qi][1], b_u16x16);
			split_u16(ha_u16x16[qi], ho_u16x16[qi], &a_u16x16,
			    &b_u16x16);
			s_u32x8[qi][2] = lanes_to_u32(s_u32x8[qi][2], a_u16x16);
			s_u32x8[qi][3] = lanes_to_u32(s_u32x8[qi][3], b_u16x16);
		}
	}
	for (qi = 0; qi < 2; qi++)
		for (i = 0; i < 4; i++)
			_mm256_storeu_si256((__m256i *)(void *)(out[qi] + 8 * i),
			    s_u32x8[qi][i]);
}

void
tq_scan4x_avx2(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, const uint8_t *const *luts, unsigned nq,
    uint32_t *acc, size_t acc_stride)
{
	size_t b;
	unsigned j;

	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		for (j = 0; j + 2 <= nq; j += 2)
			scan_block4_x2(block, nfields, luts[j], luts[j + 1],
			    acc + j * acc_stride + b * TQ_BLOCK,
			    acc + (j + 1) * acc_stride + b * TQ_BLOCK);
		if (j < nq)
			scan_block4(block, nfields, luts[j],
			    acc + j * acc_stride + b * TQ_BLOCK);
	}
}

/* The keys of tq_keys_scalar, 8 rows per step, the same operations. */
uint32_t
tq_keys_avx2(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key)
{
	const __m256 scale = _mm256_set1_ps(p->scale);
	const __m256 bias = _mm256_set1_ps(p->bias);
	const __m256 qc = _mm256_set1_ps(p->qc);
	const __m256 qn2 = _mm256_set1_ps(p->qn2);
	const __m256 two = _mm256_set1_ps(2.0f);
	const __m256 t = _mm256_set1_ps(thr);
	const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(
	    (int)0x80000000u));
	const __m256i off = _mm256_set1_epi32((int)p->off);
	uint32_t m = 0;

	for (unsigned h = 0; h < TQ_BLOCK; h += 8) {
		__m256 a = _mm256_cvtepi32_ps(_mm256_add_epi32(
		    _mm256_loadu_si256((const __m256i *)(const void *)(acc +
		    h)), off));
		__m256 ip = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(
		    _mm256_loadu_ps(fs + h), _mm256_add_ps(_mm256_mul_ps(scale,
		    a), bias)), _mm256_loadu_ps(fs + TQ_BLOCK + h)), qc);

		if (p->l2) {
			__m256 x = _mm256_add_ps(_mm256_sub_ps(qn2,
			    _mm256_mul_ps(two, ip)),
			    _mm256_loadu_ps(fs + 2 * TQ_BLOCK + h));

			/* Negation flips the sign bit, as in C. */
			ip = _mm256_xor_ps(x, sign);
		}
		_mm256_storeu_ps(key + h, ip);
		m |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(ip, t,
		    _CMP_GE_OQ)) << h;
	}
	return m;
}

/*
 * The dot form (internal.h, struct tq_lut): the int32 sums of q8 values
 * times the levels of each plane, for up to DOT_MAX queries per pass
 * over a block.  Each plane is decoded and multiplied as a 4-bit field
 * would be (the 2-bit figures: one query 13.6 GB/s hot, 6.5 from L3,
 * eight 18.7 per query, against the lookup form's 28, 22 and 30: an
 * AVX2-only machine pays for the dot form at 2 bits).
 *
 * As in scan_avx512.c, each dword gathers four fields of one vector, so
 * that four fields' products end in that vector's int32 lane.  Two 32-byte
 * loads hold rows f .. f + 3, one per lane; vpunpck{l,h}bw pairs row f
 * with f + 2 and f + 1 with f + 3 (bytes 0..7, then 8..15), vpermq brings
 * both pairs of the same four bytes into one lane, and vpshufb (dot_tr4)
 * orders each dword as fields f, f + 1, f + 2, f + 3: two registers of
 * codes for vectors 0..15, in natural order, whose nibbles vpshufb turns
 * into the u8 levels of vectors 0..15 and 16..31.  That decode, ten
 * shuffles per 64 bytes, is shared by all the queries of a pass.
 *
 * A query then costs, per 64 bytes of codes, one broadcast of its four
 * int8 values (a plain load) and per register of levels vpmaddubsw (u8
 * level times s8 value, adjacent products summed to i16), vpmaddwd by
 * ones (the two i16 into i32) and vpaddd: AVX-VNNI's vpdpbusd in three
 * operations.  vpmaddubsw saturates, but cannot here: a level is at most
 * 127 and |q8| at most 128, so |a pair| <= 2 * 127 * 128 = 32512 < 32767.
 * The sums are exact and equal tq_scand_scalar's.
 *
 * Measured (development machine, 1536 fields; per query, in L2 / from
 * memory): 20 / 7 GB/s for one query, 28 / 12 for two, 37 / 33 for
 * sixteen; scalar 1.3 / 1.1.  Rejected: levels widened to i16 with
 * vpmovzxbw, two fields per dword, vpmaddwd against (q8[f], q8[f + 1]):
 * twice the vpaddd and a widening per register, 12 / 6 GB/s for one
 * query and 16 / 14 for sixteen.  Levels decoded once into a buffer, then
 * one query at a time over it: 14 / 6.5 and 24 / 21.  Four queries per
 * pass: no spills, but the decode paid twice as often, 33 / 29 for
 * sixteen.  With eight, most of the 32
 * sums live on the stack (vpaddd from memory and a store; the load and
 * store ports are idle), and named sums beat an array of them by a fifth.
 */

/* Most queries scanned together; see above. */
#define DOT_MAX 8u

/* Per lane: dword k takes bytes 2k, 8 + 2k, 2k + 1, 9 + 2k. */
static const uint8_t dot_tr4[32] __attribute__((aligned(32))) = {
	0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,
	0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15
};

/* Four int8 values at p, broadcast to every dword. */
static inline __m256i
q8x4(const int8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return _mm256_set1_epi32(v);
}

/* s + per dword the four products of u8 levels and s8 values. */
static inline __m256i
dot_s32(__m256i s_s32x8, __m256i lev_u8x32, __m256i q_s8x32,
    __m256i one_s16x16)
{
	return _mm256_add_epi32(s_s32x8, _mm256_madd_epi16(
	    _mm256_maddubs_epi16(lev_u8x32, q_s8x32), one_s16x16));
}

/*
 * s + per dword the products of levels a and values p and of levels b and
 * values r, the i16 pairs summed before widening: exact only where the
 * caller has checked the values (DOT_PAIR_MAX).
 */
static inline __m256i
dot2_s32(__m256i s_s32x8, __m256i a_u8x32, __m256i p_s8x32, __m256i b_u8x32,
    __m256i r_s8x32, __m256i one_s16x16)
{
	return _mm256_add_epi32(s_s32x8, _mm256_madd_epi16(_mm256_add_epi16(
	    _mm256_maddubs_epi16(a_u8x32, p_s8x32),
	    _mm256_maddubs_epi16(b_u8x32, r_s8x32)), one_s16x16));
}

static inline void
store_s32x8(uint32_t *p, __m256i v_s32x8)
{
	_mm256_storeu_si256((__m256i *)(void *)p, v_s32x8);
}

/*
 * Two planes at a time (planes == 2): the products of both planes' levels
 * for the same four fields, lev0 * q0 and lev1 * q1, are summed as i16
 * (vpaddw) before one vpmaddwd, which takes a vpmaddwd off ports 0 and 1
 * for every two vpmaddubsw; those ports bound the multi-query scan (two
 * of them multiply, and vpmaddubsw and vpmaddwd both need them).  The i16
 * sum of a word, four products, is exact only while 127 times the four
 * |q8| values behind it is at most 32767, i.e. while they sum to at most
 * DOT_PAIR_MAX; the bit of a group of four fields in `unsafe` (set for a
 * query group if any of its queries exceeds that in either word) sends
 * the group down the plane-by-plane path, so the sums stay exact for any
 * q8.  A query's r8 is scaled to a largest |value| of 127, so at dim 1536
 * nearly every group passes: four |values| sum to about 120 on average.
 */
#define DOT_PAIR_MAX 258

/* Query i's sums of vectors 0..7, 8..15, 16..23 and 24..31. */
#define KD_DECL(i)							\
	__m256i v0_##i = _mm256_setzero_si256(), v8_##i = v0_##i,	\
	    v16_##i = v0_##i, v24_##i = v0_##i

#define KD_STEP(i)							\
	do {								\
		if ((i) < nq) {						\
			__m256i q = q8x4(q8 + (i) * q8_stride + qo);	\
									\
			v0_##i = dot_s32(v0_##i, l0_u8x32, q, one);	\
			v8_##i = dot_s32(v8_##i, l8_u8x32, q, one);	\
			v16_##i = dot_s32(v16_##i, l16_u8x32, q, one);	\
			v24_##i = dot_s32(v24_##i, l24_u8x32, q, one);	\
		}							\
	} while (0)

/* Both planes of four fields at once; see DOT_PAIR_MAX. */
#define KD_PAIR(i)							\
	do {								\
		if ((i) < nq) {						\
			const int8_t *qi = q8 + (i) * q8_stride + qo;	\
			__m256i q0 = q8x4(qi), q1 = q8x4(qi + 4);	\
									\
			v0_##i = dot2_s32(v0_##i, a0_u8x32, q0, b0_u8x32, \
			    q1, one);					\
			v8_##i = dot2_s32(v8_##i, a8_u8x32, q0, b8_u8x32, \
			    q1, one);					\
			v16_##i = dot2_s32(v16_##i, a16_u8x32, q0,	\
			    b16_u8x32, q1, one);			\
			v24_##i = dot2_s32(v24_##i, a24_u8x32, q0,	\
			    b24_u8x32, q1, one);			\
		}							\
	} while (0)

#define KD_STORE(i)							\
	do {								\
		if ((i) < nq) {						\
			store_s32x8(out + (i) * acc_stride, v0_##i);	\
			store_s32x8(out + (i) * acc_stride + 8, v8_##i); \
			store_s32x8(out + (i) * acc_stride + 16, v16_##i); \
			store_s32x8(out + (i) * acc_stride + 24, v24_##i); \
		}							\
	} while (0)

/*
 * nq (1..DOT_MAX) queries over one block, inlined with nq constant so that
 * the unused sums vanish.  A last group of fewer than four rows (nfields
 * % 4, which no quantizer makes so far) is copied to a zeroed buffer so
 * that no load passes the block; the missing fields meet q8's zero
 * padding.  The test costs nothing measurable.
 */
static inline __attribute__((always_inline)) void
scand_block(const uint8_t *block, unsigned nfields, unsigned planes,
    const int8_t *q8, size_t q8_stride, unsigned nq, const __m256i *lev,
    const uint64_t *unsafe, uint32_t *out, size_t acc_stride)
{
	const __m256i tr = load_u8x32(dot_tr4);
	const __m256i low4 = _mm256_set1_epi8(0x0f);
	const __m256i one = _mm256_set1_epi16(1);
	KD_DECL(0); KD_DECL(1); KD_DECL(2); KD_DECL(3);
	KD_DECL(4); KD_DECL(5); KD_DECL(6); KD_DECL(7);
	uint8_t tail[64];
	unsigned f, t;

	for (f = 0; f < nfields; f += 4) {
		const uint8_t *p = block + (size_t)f * 16;
		__m256i x0_u8x32, x1_u8x32, lo_u8x32, hi_u8x32;
		__m256i n0_u8x32, n8_u8x32, n16_u8x32, n24_u8x32;

		prefetch_ahead(p);
		if (nfields - f < 4) {
			memset(tail, 0, sizeof(tail));
			memcpy(tail, p, (size_t)(nfields - f) * 16);
			p = tail;
		}
		x0_u8x32 = load_u8x32(p);
		x1_u8x32 = load_u8x32(p + 32);
		/* Codes of vectors 0..7 and 8..15, fields f .. f + 3. */
		lo_u8x32 = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(
		    _mm256_unpacklo_epi8(x0_u8x32, x1_u8x32), 0xd8), tr);
		hi_u8x32 = _mm256_shuffle_epi8(_mm256_permute4x64_epi64(
		    _mm256_unpackhi_epi8(x0_u8x32, x1_u8x32), 0xd8), tr);
		/* The nibbles of vectors 0..7, 8..15, 16..23, 24..31. */
		n0_u8x32 = _mm256_and_si256(lo_u8x32, low4);
		n8_u8x32 = _mm256_and_si256(hi_u8x32, low4);
		n16_u8x32 = _mm256_and_si256(_mm256_srli_epi16(lo_u8x32, 4),
		    low4);
		n24_u8x32 = _mm256_and_si256(_mm256_srli_epi16(hi_u8x32, 4),
		    low4);
		if (planes == 2 && unsafe != NULL &&
		    (unsafe[f / 256] >> (f / 4 % 64) & 1) == 0) {
			size_t qo = (size_t)f * 2;
			__m256i a0_u8x32 = _mm256_shuffle_epi8(lev[0], n0_u8x32);
			__m256i a8_u8x32 = _mm256_shuffle_epi8(lev[0], n8_u8x32);
			__m256i a16_u8x32 = _mm256_shuffle_epi8(lev[0],
			    n16_u8x32);
			__m256i a24_u8x32 = _mm256_shuffle_epi8(lev[0],
			    n24_u8x32);
			__m256i b0_u8x32 = _mm256_shuffle_epi8(lev[1], n0_u8x32);
			__m256i b8_u8x32 = _mm256_shuffle_epi8(lev[1], n8_u8x32);
			__m256i b16_u8x32 = _mm256_shuffle_epi8(lev[1],
			    n16_u8x32);
			__m256i b24_u8x32 = _mm256_shuffle_epi8(lev[1],
			    n24_u8x32);

			KD_PAIR(0); KD_PAIR(1); KD_PAIR(2); KD_PAIR(3);
			KD_PAIR(4); KD_PAIR(5); KD_PAIR(6); KD_PAIR(7);
			continue;
		}
		for (t = 0; t < planes; t++) {
			size_t qo = (size_t)f * planes + 4 * t;
			__m256i l0_u8x32 = _mm256_shuffle_epi8(lev[t],
			    n0_u8x32);
			__m256i l8_u8x32 = _mm256_shuffle_epi8(lev[t],
			    n8_u8x32);
			__m256i l16_u8x32 = _mm256_shuffle_epi8(lev[t],
			    n16_u8x32);
			__m256i l24_u8x32 = _mm256_shuffle_epi8(lev[t],
			    n24_u8x32);

			KD_STEP(0); KD_STEP(1); KD_STEP(2); KD_STEP(3);
			KD_STEP(4); KD_STEP(5); KD_STEP(6); KD_STEP(7);
		}
	}
	KD_STORE(0); KD_STORE(1); KD_STORE(2); KD_STORE(3);
	KD_STORE(4); KD_STORE(5); KD_STORE(6); KD_STORE(7);
}

#undef KD_DECL
#undef KD_STEP
#undef KD_PAIR
#undef KD_STORE

/*
 * One group size, for which scand_block is inlined with nq fixed.  Two or
 * three queries ran 5-10% slower with both planes at once (hot, in L2),
 * so they always go plane by plane: a constant NULL drops the pair path.
 */
#define DOT_CASE(n)							\
	case n:								\
		scand_block(block, nfields, planes, q8, q8_stride, n,	\
		    lev, n == 2 || n == 3 ? NULL : unsafe, out,	\
		    acc_stride);					\
		break

/* One group of up to DOT_MAX queries, inlined with planes constant. */
static inline __attribute__((always_inline)) void
scand_group(const uint8_t *block, unsigned nfields, unsigned planes,
    const int8_t *q8, size_t q8_stride, unsigned g, const __m256i *lev,
    const uint64_t *unsafe, uint32_t *out, size_t acc_stride)
{
	switch (g) {
	DOT_CASE(1);
	DOT_CASE(2);
	DOT_CASE(3);
	DOT_CASE(4);
	DOT_CASE(5);
	DOT_CASE(6);
	DOT_CASE(7);
	default:
		scand_block(block, nfields, planes, q8, q8_stride, DOT_MAX,
		    lev, unsafe, out, acc_stride);
		break;
	}
}

/*
 * Words of `unsafe` bits (DOT_PAIR_MAX) for all the query groups of one
 * pass over the blocks, one bit per group of four fields, each query
 * group's bits starting a word: 8192 groups, 32768 2-bit fields, for one
 * query group; a wider scan runs plane by plane throughout.
 */
#define DOT_UNSAFE_WORDS 128u

/*
 * Sets bit g of u (ngroups bits, rounded up to words) if any of nq queries
 * has, in group g of four fields, four |values| behind one i16 word of
 * dot2_s32 that sum to more than DOT_PAIR_MAX.  A group's eight values
 * are plane 0's four, then plane 1's; vpmaddubsw by ones sums adjacent
 * pairs (|-128| is 128 as u8), and the word four bytes on holds the
 * matching pair of the other plane.  The 32-byte loads stay within the
 * row: it holds 2 * nfields rounded up to TQ_DOT_PAD values.
 */
static void
dot_unsafe(const int8_t *q8, size_t q8_stride, unsigned nq, unsigned ngroups,
    uint64_t *u)
{
	const __m256i one_s8x32 = _mm256_set1_epi8(1);
	const __m256i max_s16x16 = _mm256_set1_epi16(DOT_PAIR_MAX);
	unsigned g, i, k;

	memset(u, 0, (ngroups + 63) / 64 * sizeof(*u));
	for (i = 0; i < nq; i++) {
		const int8_t *qi = q8 + i * q8_stride;

		for (g = 0; g < ngroups; g += 4) {
			__m256i a_u8x32 = _mm256_abs_epi8(load_u8x32(
			    (const uint8_t *)(const void *)(qi + 8 * g)));
			__m256i w_s16x16 = _mm256_maddubs_epi16(a_u8x32,
			    one_s8x32);
			__m256i s_s16x16 = _mm256_add_epi16(w_s16x16,
			    _mm256_srli_epi64(w_s16x16, 32));
			uint32_t m = (uint32_t)_mm256_movemask_epi8(
			    _mm256_cmpgt_epi16(s_s16x16, max_s16x16));

			/* Group g + k: bytes 0..3 of qword k. */
			for (k = 0; k < 4; k++)
				if ((m >> (8 * k) & 0x0f) != 0)
					u[(g + k) / 64] |= (uint64_t)1 <<
					    ((g + k) % 64);
		}
	}
}

/* The blocks for queries [0, nq) through scand_group, planes constant. */
static inline __attribute__((always_inline)) void
scand_blocks(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const __m256i *lev, const uint64_t *unsafe, unsigned nw,
    uint32_t *acc, size_t acc_stride)
{
	size_t b;
	unsigned j, g;

	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		for (j = 0; j < nq; j += g) {
			g = nq - j < DOT_MAX ? nq - j : DOT_MAX;
			scand_group(block, nfields, planes, q8 + j * q8_stride,
			    q8_stride, g, lev, unsafe != NULL ? unsafe +
			    j / DOT_MAX * nw : NULL, acc + j * acc_stride +
			    b * TQ_BLOCK, acc_stride);
		}
	}
}

void
tq_scand_avx2(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const uint8_t *lev, uint32_t *acc, size_t acc_stride)
{
	uint64_t unsafe[DOT_UNSAFE_WORDS];
	unsigned ngroups = (nfields + 3) / 4, nw = (ngroups + 63) / 64;
	unsigned j0, n, k, per;
	__m256i lv[4];

	for (k = 0; k < 4; k++)
		lv[k] = _mm256_broadcastsi128_si256(_mm_loadu_si128(
		    (const __m128i *)(const void *)(lev + 16 *
		    (k < planes ? k : 0))));
	if (planes == 1) {
		scand_blocks(blocks, nblocks, block_bytes, nfields, 1, q8,
		    q8_stride, nq, lv, NULL, 0, acc, acc_stride);
		return;
	}
	if (planes == 4 || nw > DOT_UNSAFE_WORDS) {
		scand_blocks(blocks, nblocks, block_bytes, nfields, planes,
		    q8, q8_stride, nq, lv, NULL, 0, acc, acc_stride);
		return;
	}
	/* Two planes: as many query groups a pass as their bits allow. */
	per = DOT_UNSAFE_WORDS / nw * DOT_MAX;
	for (j0 = 0; j0 < nq; j0 += n) {
		n = nq - j0 < per ? nq - j0 : per;
		for (k = 0; k < n; k += DOT_MAX)
			dot_unsafe(q8 + (j0 + k) * q8_stride, q8_stride,
			    n - k < DOT_MAX ? n - k : DOT_MAX, ngroups,
			    unsafe + k / DOT_MAX * nw);
		scand_blocks(blocks, nblocks, block_bytes, nfields, 2,
		    q8 + j0 * q8_stride, q8_stride, n, lv, unsafe, nw,
		    acc + j0 * acc_stride, acc_stride);
	}
}

#undef DOT_CASE

/*
 * s and t of rows h .. h + 7 of compact block fh (in registers):
 * vcvtph2ps widens the f16 s and t exactly, and 2^E is made in the
 * exponent field of a float from the sign-extended, clamped E, so the
 * products are those of the scalar code.
 */
static inline void
fachdec8(const uint8_t *fh, unsigned h, __m256 *s, __m256 *t)
{
	__m256i e = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
	    (const __m128i *)(const void *)(fh + 4 * TQ_BLOCK + h)));
	__m256 p2;

	e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(-126)),
	    _mm256_set1_epi32(127));
	p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e,
	    _mm256_set1_epi32(127)), 23));
	*s = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
	    (const __m128i *)(const void *)(fh + 2 * h))), p2);
	*t = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(
	    (const __m128i *)(const void *)(fh + 2 * TQ_BLOCK + 2 * h))), p2);
}

/*
 * The keys of rows h .. h + 7 from their s and t (tq_keysd_scalar's
 * operations) into key + h; returns the mask of keys >= thr.
 */
static inline uint32_t
keys8(const uint32_t *acc, unsigned h, __m256 s, __m256 t,
    const struct tq_keypar *p, float thr, float *key)
{
	__m256 d, k;

	d = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(p->scale),
	    _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_loadu_si256(
	    (const __m256i *)(const void *)(acc + h)),
	    _mm256_set1_epi32((int)p->off)))), _mm256_set1_ps(p->bias));
	if (p->l2)
		d = _mm256_add_ps(d, d);
	k = _mm256_add_ps(_mm256_set1_ps(p->qk), _mm256_mul_ps(s,
	    _mm256_add_ps(d, t)));
	_mm256_storeu_ps(key + h, k);
	return (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(k,
	    _mm256_set1_ps(thr), _CMP_GE_OQ)) << h;
}

/* The keys of tq_keysh_scalar, 8 rows per step. */
void
tq_keysh_avx2(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above)
{
	for (size_t b = 0; b < nblk; b++) {
		uint32_t m = 0;

		for (unsigned h = 0; h < TQ_BLOCK; h += 8) {
			__m256 s, t;

			fachdec8(fh + b * TQ_FACH_BLOCK, h, &s, &t);
			m |= keys8(acc + b * TQ_BLOCK, h, s, t, p, thr,
			    key + b * TQ_BLOCK);
		}
		above[b] = m;
	}
}

/* tq_fachdec_scalar, 8 rows per step. */
void
tq_fachdec_avx2(const uint8_t *fh, float *st)
{
	for (unsigned h = 0; h < TQ_BLOCK; h += 8) {
		__m256 s, t;

		fachdec8(fh, h, &s, &t);
		_mm256_storeu_ps(st + h, s);
		_mm256_storeu_ps(st + TQ_BLOCK + h, t);
	}
}

/* tq_keysd_scalar, 8 rows per step. */
uint32_t
tq_keysd_avx2(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key)
{
	uint32_t m = 0;

	for (unsigned h = 0; h < TQ_BLOCK; h += 8)
		m |= keys8(acc, h, _mm256_loadu_ps(st + h),
		    _mm256_loadu_ps(st + TQ_BLOCK + h), p, thr, key);
	return m;
}
