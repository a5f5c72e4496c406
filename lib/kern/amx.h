/*
 * amx.h - the tile configuration shared by the AMX kernels (scan_amx.c,
 * near_amx.c), for files built with -mamx-tile.
 */
#ifndef TQ_KERN_AMX_H
#define TQ_KERN_AMX_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The tile configuration: palette 1, 16 tiles' bytes per row and rows. */
struct tq_tilecfg {
	uint8_t palette;
	uint8_t start_row;
	uint8_t reserved[14];
	uint16_t colsb[16];
	uint8_t rows[16];
};

/* A configuration of palette 1 with every tile unused (no rows). */
static inline void
tq_tilecfg_init(struct tq_tilecfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->palette = 1;
}

/* Loads cfg (which zeroes every tile). */
static inline void
tq_tilecfg_load(const struct tq_tilecfg *cfg)
{
	/*
	 * gcc 12 does not count ldtilecfg as a reader of all 64 bytes and
	 * dropped the memset of tiles 8..15: their stack garbage made
	 * ldtilecfg fault (SIGSEGV, now and then, as the stack held).
	 */
	__asm__ volatile("" : : "r"(cfg) : "memory");
	_tile_loadconfig(cfg);
}

#endif
