/*
 * near_amx.c - the IVF list filter's many-row products on AMX-BF16 (built
 * with -mamx-tile -mamx-bf16; the dispatcher offers it where the CPU has
 * AMX-BF16, AVX512_BF16 and the tile state, at the AMX level).
 *
 * tq_bf16_gemm_amx computes what tq_bf16_gemm_avx512 does (internal.h,
 * struct tq_bf16_kernel) with TDPBF16PS: a 16 x 32 bf16 tile of rows
 * (16 rows, 16 pairs each) times a 32 x 16 tile of centroids (16 pairs of
 * 16 lists, as pairs of bf16 in a 32-bit word) into 16 x 16 float sums.
 * The centroids' blocks (near_bf16.c) are already that tile's layout:
 * vector k of a block holds pair k of its 16 lists, so 16 vectors
 * k0 .. k0 + 15 are one tile, 64 bytes a row.  A row's k2 words are its
 * pairs in order, so 16 rows of 16 words, k2 words apart, are the other.
 * One TDPBF16PS does 16 x 16 x 32 multiply-adds, against 16 x 32 for a
 * 512-bit vdpbf16ps.
 *
 * The sums differ from vdpbf16ps's in order and rounding (float sums,
 * products of bf16 exact, inputs and results below 2^-126 flushed to
 * zero): ivf.c's bound is for any order of such sums, so the lists the
 * filter leaves to the re-check, and the lists chosen, are the same.
 *
 * Tiles: 0..3 the sums of 16 rows by the 4 blocks of a panel of 64
 * lists; 4 and 5 rows and centroids, 16 pairs; 6 and 7 the same for the
 * last k2 % 16 pairs.  Rows go 16 at a time, the last group with fewer
 * (the configuration's rows; loading a configuration zeroes the tiles,
 * so it changes only between groups).
 */
#include <immintrin.h>

#include "internal.h"
#include "amx.h"

#define ROWS 16u	/* rows a tile */
#define PAIRS 16u	/* pairs a tile product */

/* Tiles for mr rows (1 .. ROWS) and a tail of rem pairs (0 .. 15). */
static void
configure(unsigned mr, unsigned rem)
{
	struct tq_tilecfg cfg;
	unsigned t;

	tq_tilecfg_init(&cfg);
	for (t = 0; t < 5; t++) {	/* the sums and the rows */
		cfg.colsb[t] = 64;
		cfg.rows[t] = (uint8_t)mr;
	}
	cfg.colsb[5] = 64;
	cfg.rows[5] = PAIRS;
	if (rem != 0) {
		cfg.colsb[6] = (uint16_t)(4 * rem);
		cfg.rows[6] = (uint8_t)mr;
		cfg.colsb[7] = 64;
		cfg.rows[7] = (uint8_t)rem;
	}
	tq_tilecfg_load(&cfg);
}

/*
 * Pairs k .. of the rows (tile a) by the 4 blocks of the panel (tile b,
 * loaded in turn) into the sums, tiles 0..3.  The tile numbers must be
 * constants, hence a macro.
 */
#define PRODUCTS(a, b, k) do {						\
	_tile_loadd(a, x + (k), xs);					\
	_tile_loadd(b, cp + (k), 64);					\
	_tile_dpbf16ps(0, a, b);					\
	_tile_loadd(b, cp + k2 + (k), 64);				\
	_tile_dpbf16ps(1, a, b);					\
	_tile_loadd(b, cp + 2 * (size_t)k2 + (k), 64);			\
	_tile_dpbf16ps(2, a, b);					\
	_tile_loadd(b, cp + 3 * (size_t)k2 + (k), 64);			\
	_tile_dpbf16ps(3, a, b);					\
} while (0)

/* The 64 lists of cp (4 blocks of k2 vectors) for mr rows from x. */
static inline __attribute__((always_inline)) void
panel(const uint32_t *x, const __m512i *cp, uint32_t k2, unsigned rem,
    float *s, size_t lds)
{
	const size_t xs = (size_t)k2 * 4, ss = lds * 4;
	const uint32_t kf = k2 - rem;
	uint32_t k;

	_tile_zero(0);
	_tile_zero(1);
	_tile_zero(2);
	_tile_zero(3);
	for (k = 0; k < kf; k += PAIRS)
		PRODUCTS(4, 5, k);
	if (rem != 0)
		PRODUCTS(6, 7, kf);
	_tile_stored(0, s, ss);
	_tile_stored(1, s + 16, ss);
	_tile_stored(2, s + 32, ss);
	_tile_stored(3, s + 48, ss);
}

void
tq_bf16_gemm_amx(const uint32_t *x, size_t m, const void *cent, uint32_t nl,
    uint32_t k2, float *s, size_t lds)
{
	const __m512i *c = cent;
	const unsigned rem = k2 % PAIRS;
	const size_t mf = m / ROWS * ROWS;
	unsigned cfg_rows = 0;

	if (m == 0 || nl == 0)
		return;
	/*
	 * Lists outside, rows inside, as tq_bf16_gemm_avx512: a panel of 64
	 * lists stays in L2 while the rows pass it.  Full groups of rows
	 * first, then the last, so the configuration changes twice a panel
	 * at most.
	 */
	for (uint32_t l0 = 0; l0 < nl; l0 += TQ_BF16_LISTS) {
		const __m512i *cp = c + (size_t)(l0 / 16) * k2;

		if (mf > 0 && cfg_rows != ROWS) {
			configure(ROWS, rem);
			cfg_rows = ROWS;
		}
		for (size_t i = 0; i < mf; i += ROWS)
			panel(x + i * k2, cp, k2, rem, s + i * lds + l0, lds);
		if (mf < m) {
			if (cfg_rows != m - mf) {
				configure((unsigned)(m - mf), rem);
				cfg_rows = (unsigned)(m - mf);
			}
			panel(x + mf * k2, cp, k2, rem, s + mf * lds + l0,
			    lds);
		}
	}
	_tile_release();
}
