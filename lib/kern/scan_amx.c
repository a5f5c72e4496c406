/*
 * scan_amx.c - the dot form's tile kernel on AMX (built with -mamx-tile
 * -mamx-int8 and the AVX-512 flags of scan_avx512.c; the dispatcher
 * requires all of them, the OS's tile state and the kernel's permission).
 *
 * The dot form (internal.h, struct tq_lut) is a product of int8 queries
 * and u8 levels, which is what AMX's TDPBSUD multiplies: a 16 x 64 int8
 * tile A times a 64 x 16 u8 tile B, stored as 16 rows of 16 groups of
 * four, into 16 x 16 int32 sums.  Here A is up to 16 queries' 64 values
 * (one step: 64 fields of one coordinate, or 32 of two), read straight
 * from their rows (row stride q8_stride), and B the matching levels for
 * 16 vectors: row r of B holds, per vector, the levels of one plane of
 * four fields, which is exactly what the AVX-512 kernel's transposition
 * and vpshufb make of 64 bytes of codes, and the order of q8.
 * One block takes two B tiles (vectors 0..15 from the low nibbles, 16..31
 * from the high) and two sum tiles, stored straight into acc, one row per
 * query.
 *
 * One TDPBSUD does 16 x 16 x 64 multiply-adds, against 16 x 64 for a
 * 512-bit vpdpbusd: the codes are decoded once per 16 queries and the
 * products cost almost nothing.  The decode goes to two alternating 2 KiB
 * buffers and tile registers, so decoding the next 64 fields overlaps the
 * tile products of these.  Sums are exact int32: the same as
 * tq_scand_scalar's.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "amx.h"

/* Queries per tile: the rows of A and of the sums. */
#define AMX_QUERIES 16u
/* Fields per tile product: the columns of A. */
#define AMX_FIELDS 64u
/*
 * Most steps of AMX_FIELDS decoded at once (up to 32 KiB of levels on
 * the stack, in L1), then multiplied by every group of queries: the
 * decode, not the tile products, was the kernel's cost (three quarters
 * of it, hot), so it is paid once per block for all the queries, not
 * once per 16.  Between chunks the sums go through acc, so a block's
 * steps go in as few chunks as this allows, of even length.
 */
#define CHUNK_STEPS 16u

/*
 * Tiles 0 and 1: the sums of vectors 0..15 and 16..31, a row per query;
 * 2 and 7: queries (even and odd steps); 3, 4 and 5, 6: the levels of
 * the low and high nibbles (even and odd steps).
 */
static void
configure(unsigned nq)
{
	struct tq_tilecfg cfg;
	unsigned t;

	tq_tilecfg_init(&cfg);
	for (t = 0; t < 8; t++) {
		cfg.colsb[t] = 64;
		cfg.rows[t] = t <= 2 || t == 7 ? (uint8_t)nq : 16;
	}
	tq_tilecfg_load(&cfg);
}

/*
 * One step's levels (AMX_FIELDS values per vector, the planes of
 * AMX_FIELDS / planes fields from f0), vectors 0..15 in lev[0] and 16..31
 * in lev[1]: row r, for the fields f0 + 4 * (r / planes) .. + 3, holds
 * plane r % planes, in the order of q8 (internal.h, struct tq_lut).
 * Fields past nfields (a multiple of 4) are zero, against zero query
 * values.
 */
static inline __attribute__((always_inline)) void
decode(const uint8_t *block, unsigned f0, unsigned nfields, unsigned planes,
    __m512i tr, __m512i low4, const __m512i *lv,
    uint8_t lev[2][AMX_FIELDS / 4][64])
{
	unsigned r = 0, f, t;

	for (f = f0; r < AMX_FIELDS / 4; f += 4) {
		__m512i xl = _mm512_setzero_si512(), xh = xl;
		int live = f < nfields;

		if (live) {
			__m512i xt;

			/* 1 KiB ahead, as tuned for AVX-512 on an SPR VM. */
			__builtin_prefetch((const void *)((uintptr_t)block +
			    (size_t)f * 16 + 1024), 0, 3);
			xt = _mm512_permutexvar_epi8(tr,
			    _mm512_loadu_si512((const void *)(block +
			    (size_t)f * 16)));
			xl = _mm512_and_si512(xt, low4);
			xh = _mm512_and_si512(_mm512_srli_epi16(xt, 4), low4);
		}
		for (t = 0; t < planes; t++, r++) {
			__m512i lo = _mm512_setzero_si512(), hi = lo;

			if (live) {
				lo = _mm512_shuffle_epi8(lv[t], xl);
				hi = _mm512_shuffle_epi8(lv[t], xh);
			}
			_mm512_store_si512((void *)lev[0][r], lo);
			_mm512_store_si512((void *)lev[1][r], hi);
		}
	}
}

static inline __attribute__((always_inline)) void
scand_amx(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const uint8_t *levels, uint32_t *acc, size_t acc_stride)
{
	uint8_t lev[CHUNK_STEPS][2][AMX_FIELDS / 4][64]
	    __attribute__((aligned(64)));
	const __m512i tr = _mm512_load_si512((const void *)tq_transpose4x16);
	const __m512i low4 = _mm512_set1_epi8(0x0f);
	const size_t cstride = acc_stride * sizeof(*acc);
	const unsigned fstep = AMX_FIELDS / planes;
	const unsigned steps = (nfields + fstep - 1) / fstep;
	/* The steps in nchunks even chunks of at most CHUNK_STEPS. */
	const unsigned nchunks = (steps + CHUNK_STEPS - 1) / CHUNK_STEPS;
	unsigned chunk, j, g, s, s0, ns, t, rows = 0;
	__m512i lv[4];
	size_t b;

	if (steps == 0)
		return;
	chunk = (steps + nchunks - 1) / nchunks;
	for (t = 0; t < planes; t++)
		lv[t] = _mm512_broadcast_i32x4(_mm_loadu_si128(
		    (const void *)(levels + 16 * t)));
	for (b = 0; b < nblocks; b++) {
		const uint8_t *block = blocks + b * block_bytes;

		for (s0 = 0; s0 < steps; s0 += ns) {
			ns = steps - s0 < chunk ? steps - s0 : chunk;
			for (s = 0; s < ns; s++)
				decode(block, (s0 + s) * fstep, nfields, planes,
				    tr, low4, lv, lev[s]);
			for (j = 0; j < nq; j += g) {
				const int8_t *qj = q8 + j * q8_stride +
				    (size_t)s0 * AMX_FIELDS;
				uint32_t *out = acc + j * acc_stride +
				    b * TQ_BLOCK;

				g = nq - j < AMX_QUERIES ? nq - j :
				    AMX_QUERIES;
				if (g != rows) {
					configure(g);
					rows = g;
				}
				if (s0 == 0) {
					_tile_zero(0);
					_tile_zero(1);
				} else {
					_tile_loadd(0, out, cstride);
					_tile_loadd(1, out + 16, cstride);
				}
				for (s = 0; s < ns; s += 2) {
					_tile_loadd(2, qj + (size_t)s *
					    AMX_FIELDS, q8_stride);
					_tile_loadd(3, lev[s][0], 64);
					_tile_loadd(4, lev[s][1], 64);
					_tile_dpbsud(0, 2, 3);
					_tile_dpbsud(1, 2, 4);
					if (s + 1 == ns)
						break;
					_tile_loadd(7, qj + (size_t)(s + 1) *
					    AMX_FIELDS, q8_stride);
					_tile_loadd(5, lev[s + 1][0], 64);
					_tile_loadd(6, lev[s + 1][1], 64);
					_tile_dpbsud(0, 7, 5);
					_tile_dpbsud(1, 7, 6);
				}
				_tile_stored(0, out, cstride);
				_tile_stored(1, out + 16, cstride);
			}
		}
	}
	if (rows != 0)
		_tile_release();
}

void
tq_scand_amx(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const uint8_t *lev, uint32_t *acc, size_t acc_stride)
{
	/* Inlined with planes constant, so decode's plane loop unrolls. */
	if (planes == 1)
		scand_amx(blocks, nblocks, block_bytes, nfields, 1, q8,
		    q8_stride, nq, lev, acc, acc_stride);
	else if (planes == 2)
		scand_amx(blocks, nblocks, block_bytes, nfields, 2, q8,
		    q8_stride, nq, lev, acc, acc_stride);
	else
		scand_amx(blocks, nblocks, block_bytes, nfields, 4, q8,
		    q8_stride, nq, lev, acc, acc_stride);
}
