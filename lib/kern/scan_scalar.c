/*
 * scan_scalar.c - the reference scan kernel, in portable C.
 *
 * Layout (internal.h, "The blocked scan layout"): vectors in blocks of 32,
 * fields of 4 or 6 bits, each field looked up in its own table of 16 or 64
 * u8 entries, lut[f * entries + value].
 *
 *   4-bit fields: a block is nfields rows of 16 bytes.  Byte j of row f
 *   holds field f of vector j in its low nibble and of vector j + 16 in
 *   its high nibble.
 *
 *   6-bit fields: a block is nfields / 4 groups of 96 bytes, one group per
 *   fields f0..f3, as three rows A, B, C of 32 bytes, byte j for vector j:
 *     A[j] = f0 | (f3 & 3) << 6
 *     B[j] = f1 | ((f3 >> 2) & 3) << 6
 *     C[j] = f2 | (f3 >> 4) << 6
 *
 * This kernel is the oracle every SIMD kernel is tested against, so it is
 * written to be obviously right: it decodes each field exactly as the
 * layout says and adds the table entry to a u32 per vector.  Sums never
 * overflow: at most 65536 fields of at most 255.  The only concessions to
 * speed are the loop orders, chosen by measurement (gcc 12, -O2): 4-bit
 * blocks are walked one vector pair at a time down the fields so both sums
 * stay in registers (2x faster than field by field); 6-bit blocks group
 * by group with the 32 sums side by side (1.5x faster than the other way).
 */
#include <string.h>

#include "internal.h"

/*
 * The 4-bit transposition of the AVX-512 and AMX kernels: byte 4j + k
 * takes byte 16k + j, so that dword j of 64 bytes of codes (four fields)
 * holds byte j of every field.  Here, in the one file every build
 * compiles, so that both kernels share it.
 */
const uint8_t tq_transpose4x16[64] __attribute__((aligned(64))) = {
	0, 16, 32, 48, 1, 17, 33, 49, 2, 18, 34, 50, 3, 19, 35, 51,
	4, 20, 36, 52, 5, 21, 37, 53, 6, 22, 38, 54, 7, 23, 39, 55,
	8, 24, 40, 56, 9, 25, 41, 57, 10, 26, 42, 58, 11, 27, 43, 59,
	12, 28, 44, 60, 13, 29, 45, 61, 14, 30, 46, 62, 15, 31, 47, 63
};

static void
scan_block4(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t acc[TQ_BLOCK])
{
	unsigned f, j;

	/*
	 * Vector pair by pair (j, j + 16), walking down the fields, so the
	 * two sums stay in registers.
	 */
	for (j = 0; j < 16; j++) {
		const uint8_t *p = block + j;
		const uint8_t *t = lut;
		uint32_t lo = 0, hi = 0;

		for (f = 0; f < nfields; f++, p += 16, t += 16) {
			lo += t[*p & 15];
			hi += t[*p >> 4];
		}
		acc[j] = lo;
		acc[j + 16] = hi;
	}
}

static void
scan_block6(const uint8_t *block, unsigned nfields, const uint8_t *lut,
    uint32_t acc[TQ_BLOCK])
{
	uint32_t sum[TQ_BLOCK] = { 0 };
	unsigned g, j;

	/* Group by group, the 32 vectors side by side (measured faster). */
	for (g = 0; g < nfields / 4; g++) {
		const uint8_t *a = block + (size_t)g * 96;
		const uint8_t *b = a + 32;
		const uint8_t *c = a + 64;
		const uint8_t *t0 = lut + (size_t)g * 4 * 64;
		const uint8_t *t1 = t0 + 64;
		const uint8_t *t2 = t0 + 128;
		const uint8_t *t3 = t0 + 192;

		for (j = 0; j < TQ_BLOCK; j++) {
			unsigned f3 = (unsigned)(a[j] >> 6) |
			    (unsigned)(b[j] >> 6) << 2 |
			    (unsigned)(c[j] >> 6) << 4;

			sum[j] += (uint32_t)t0[a[j] & 63] + t1[b[j] & 63] +
			    t2[c[j] & 63] + t3[f3];
		}
	}
	for (j = 0; j < TQ_BLOCK; j++)
		acc[j] = sum[j];
}

void
tq_scan_scalar(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
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

uint32_t
tq_keys_scalar(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key)
{
	float scale = p->scale, bias = p->bias, qc = p->qc, qn2 = p->qn2;
	uint32_t m = 0, off = p->off;
	unsigned j;

	/*
	 * Sums stay below 2^31, so the signed conversion gives the same
	 * float as the unsigned one.  The metric is tested once: loops the
	 * compiler turns into vector code.
	 */
	if (p->l2) {
		for (j = 0; j < TQ_BLOCK; j++) {
			float ip = fs[j] * (scale * (float)(int32_t)(acc[j] + off) +
			    bias) + fs[TQ_BLOCK + j] + qc;

			key[j] = -(qn2 - 2.0f * ip + fs[2 * TQ_BLOCK + j]);
		}
	} else {
		for (j = 0; j < TQ_BLOCK; j++)
			key[j] = fs[j] * (scale * (float)(int32_t)(acc[j] + off) +
			    bias) + fs[TQ_BLOCK + j] + qc;
	}
	for (j = 0; j < TQ_BLOCK; j++)
		m |= (uint32_t)(key[j] >= thr) << j;
	return m;
}

/*
 * The dot form's reference (internal.h, struct tq_lut): for each query
 * and block, vector pair by pair (j, j + 16) down the fields, as
 * scan_block4, with int8 times 7-bit products in place of table entries,
 * one per plane of the field.  The sums are exact integers, so any order
 * gives the same result.
 */
void
tq_scand_scalar(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned planes, const int8_t *q8, size_t q8_stride,
    unsigned nq, const uint8_t *lev, uint32_t *acc, size_t acc_stride)
{
	for (unsigned i = 0; i < nq; i++) {
		const int8_t *qi = q8 + i * q8_stride;

		for (size_t b = 0; b < nblocks; b++) {
			const uint8_t *block = blocks + b * block_bytes;
			uint32_t *out = acc + i * acc_stride + b * TQ_BLOCK;

			for (unsigned j = 0; j < 16; j++) {
				const uint8_t *p = block + j;
				int32_t lo = 0, hi = 0;

				for (unsigned f = 0; f < nfields; f++, p += 16) {
					const int8_t *qf = qi + (f - f % 4) *
					    planes + f % 4;

					for (unsigned t = 0; t < planes; t++) {
						const uint8_t *l = lev + 16 * t;

						lo += qf[4 * t] *
						    (int32_t)l[*p & 15];
						hi += qf[4 * t] *
						    (int32_t)l[*p >> 4];
					}
				}
				out[j] = (uint32_t)lo;
				out[j + 16] = (uint32_t)hi;
			}
		}
	}
}

/*
 * An f16 widened exactly without branches on the common path: the
 * exponent and mantissa bits moved into place are a float 2^-112 times
 * the value (subnormal halves become subnormal floats, exactly), so one
 * multiplication by 2^112 rescales; infinities and NaNs take the float's
 * all-ones exponent instead.  tq_f16_to_f32's loop over subnormals made
 * the scalar keys three times slower than those of FACT.
 */
static inline float
f16_widen(uint16_t h)
{
	uint32_t u = (uint32_t)(h & 0x7fffu) << 13, v, m;
	float f;

	/* m: all ones for infinities and NaNs; selected without a branch. */
	m = (uint32_t)0 - (uint32_t)((h & 0x7c00u) == 0x7c00u);
	memcpy(&f, &u, 4);
	f *= 0x1p112f;
	memcpy(&v, &f, 4);
	v = (v & ~m) | ((u | 0x7f800000u) & m);
	v |= (uint32_t)(h & 0x8000u) << 16;
	memcpy(&f, &v, 4);
	return f;
}

/*
 * The keys from a compact factor block (internal.h, tq_keysh_fn): the
 * f16 s and t of each row widened exactly and scaled by the row's power
 * of two, then one expression for every metric.
 */
void
tq_fachdec_scalar(const uint8_t *fh, float *st)
{
	/* A loop the compiler vectorizes. */
	for (unsigned j = 0; j < TQ_BLOCK; j++) {
		int32_t e = (int8_t)fh[4 * TQ_BLOCK + j];
		uint32_t eb;
		float ef;

		e = e < -126 ? -126 : e;
		eb = (uint32_t)(e + 127) << 23;
		memcpy(&ef, &eb, 4);
		st[j] = f16_widen(rd_le16(fh + 2 * j)) * ef;
		st[TQ_BLOCK + j] = f16_widen(rd_le16(fh + 2 * TQ_BLOCK +
		    2 * j)) * ef;
	}
}

void
tq_keysh_scalar(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above)
{
	float st[2 * TQ_BLOCK];

	/* Decoded first, keys after: loops the compiler vectorizes. */
	for (size_t b = 0; b < nblk; b++) {
		tq_fachdec_scalar(fh + b * TQ_FACH_BLOCK, st);
		above[b] = tq_keysd_scalar(acc + b * TQ_BLOCK, st, p, thr,
		    key + b * TQ_BLOCK);
	}
}

uint32_t
tq_keysd_scalar(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key)
{
	float scale = p->scale, bias = p->bias, qk = p->qk;
	const float *s = st, *t = st + TQ_BLOCK;
	uint32_t m = 0, off = p->off;
	unsigned j;

	if (p->l2) {
		for (j = 0; j < TQ_BLOCK; j++) {
			float d = scale * (float)(int32_t)(acc[j] + off) + bias;

			key[j] = qk + s[j] * ((d + d) + t[j]);
		}
	} else {
		for (j = 0; j < TQ_BLOCK; j++) {
			float d = scale * (float)(int32_t)(acc[j] + off) + bias;

			key[j] = qk + s[j] * (d + t[j]);
		}
	}
	for (j = 0; j < TQ_BLOCK; j++)
		m |= (uint32_t)(key[j] >= thr) << j;
	return m;
}
