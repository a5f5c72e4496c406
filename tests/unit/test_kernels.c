/*
 * test_kernels.c - every SIMD scan kernel the CPU can run must produce the
 * sums of tq_scan_scalar, bit for bit.
 *
 * Random codes with random tables, tables of the largest entries (255, or
 * TQ_LUT4_MAX for 4-bit fields: the largest sums, to catch a u16
 * accumulator flushed too late or a byte sum that overflows) and all-0
 * tables, over field
 * counts below, at and well past the flush intervals, and block counts that
 * exercise more than one block per call (and an odd count, for kernels
 * that take blocks in pairs).  Codes and tables are allocated to their
 * exact size, so a kernel that reads past either trips AddressSanitizer.
 */
#include <cpuid.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

static const struct {
	const char *name;
	tq_scan_fn fn;
	const char *need[4];
} kernels[] = {
	{ "avx2", tq_scan_avx2, { "avx2", "bmi2", NULL } },
	{ "avx512", tq_scan_avx512, { "avx512bw", "avx512vl", "avx512vbmi",
	    "avx512vnni" } },
};
#define NKERN (sizeof(kernels) / sizeof(kernels[0]))

static int runnable[NKERN];
static unsigned long ncalls[NKERN];

static const unsigned field_counts[] = {
	4, 8, 12, 16, 20, 32, 36, 64, 196, 260, 392, 400, 512, 516, 768,
	1024, 1028, 1536, 2048, 4096
};
static const size_t block_counts[] = { 1, 2, 3, 7, 33 };

enum lut_kind { LUT_RANDOM, LUT_MAX, LUT_ZERO, LUT_SMALL };

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint32_t
rnd(void)
{
	/* xorshift64*: reproducible across runs and platforms. */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint32_t)((rng * 0x2545f4914f6cdd1du) >> 32);
}

static int
cpu_has(const char *feature)
{
	/* __builtin_cpu_supports wants a literal. */
	if (strcmp(feature, "avx2") == 0)
		return __builtin_cpu_supports("avx2");
	if (strcmp(feature, "bmi2") == 0)
		return __builtin_cpu_supports("bmi2");
	if (strcmp(feature, "avx512bw") == 0)
		return __builtin_cpu_supports("avx512bw");
	if (strcmp(feature, "avx512vl") == 0)
		return __builtin_cpu_supports("avx512vl");
	if (strcmp(feature, "avx512vbmi") == 0)
		return __builtin_cpu_supports("avx512vbmi");
	if (strcmp(feature, "avx512vnni") == 0)
		return __builtin_cpu_supports("avx512vnni");
	if (strcmp(feature, "f16c") == 0) {
		/* Not a name clang 14's builtin knows: CPUID leaf 1, ECX 29. */
		unsigned a, b, c, d;

		return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
	}
	return 0;
}

/*
 * One case: codes and table at the end of their buffers, every runnable
 * kernel compared with the oracle.  The acc buffers are poisoned first so
 * an unwritten sum shows.
 */
static void
check_case(unsigned nfields, unsigned field_bits, size_t nblocks,
    enum lut_kind kind)
{
	size_t entries = field_bits == 4 ? 16 : 64;
	size_t block_bytes = field_bits == 4 ? (size_t)nfields * 16 :
	    (size_t)nfields / 4 * 96;
	size_t code_len = nblocks * block_bytes, lut_len = nfields * entries;
	size_t nacc = nblocks * TQ_BLOCK, i, k;
	/* 4-bit fields' entries are at most TQ_LUT4_MAX (tq_scan_fn). */
	unsigned lmax = field_bits == 4 ? TQ_LUT4_MAX : 255;
	uint8_t *codes = malloc(code_len), *lut = malloc(lut_len);
	uint32_t *want = malloc(nacc * sizeof(*want));
	uint32_t *got = malloc(nacc * sizeof(*got));

	CHECK(codes != NULL && lut != NULL && want != NULL && got != NULL);
	if (codes == NULL || lut == NULL || want == NULL || got == NULL)
		goto out;
	for (i = 0; i < code_len; i++)
		codes[i] = (uint8_t)rnd();
	for (i = 0; i < lut_len; i++)
		lut[i] = kind == LUT_MAX ? lmax : kind == LUT_ZERO ? 0 :
		    kind == LUT_SMALL ? (uint8_t)(rnd() & 3) :
		    (uint8_t)(rnd() % (lmax + 1u));

	memset(want, 0xa5, nacc * sizeof(*want));
	tq_scan_scalar(codes, nblocks, block_bytes, nfields, field_bits, lut,
	    want);
	if (kind == LUT_MAX)
		for (i = 0; i < nacc; i++)
			CHECK(want[i] == lmax * nfields);
	for (k = 0; k < NKERN; k++) {
		if (!runnable[k])
			continue;
		memset(got, 0x5a, nacc * sizeof(*got));
		kernels[k].fn(codes, nblocks, block_bytes, nfields,
		    field_bits, lut, got);
		ncalls[k]++;
		if (memcmp(want, got, nacc * sizeof(*got)) != 0) {
			for (i = 0; i < nacc && want[i] == got[i]; i++)
				;
			fprintf(stderr, "%s: bits %u nfields %u nblocks %zu "
			    "lut %d: acc[%zu] = %u, scalar %u\n",
			    kernels[k].name, field_bits, nfields, nblocks,
			    (int)kind, i, got[i], want[i]);
			CHECK(!"kernel differs from tq_scan_scalar");
		} else {
			CHECK(1);
		}
	}
out:
	free(codes);
	free(lut);
	free(want);
	free(got);
}

static void
test_fields(unsigned field_bits)
{
	size_t i, j;
	int kind;

	for (i = 0; i < sizeof(field_counts) / sizeof(field_counts[0]); i++)
		for (j = 0; j < sizeof(block_counts) / sizeof(block_counts[0]);
		    j++)
			for (kind = LUT_RANDOM; kind <= LUT_SMALL; kind++)
				check_case(field_counts[i], field_bits,
				    block_counts[j], (enum lut_kind)kind);
}

static void
test_fields4(void)
{
	test_fields(4);
}

static void
test_fields6(void)
{
	test_fields(6);
}

/*
 * The multi-query kernels: nq tables of their own kind each (random, all
 * TQ_LUT4_MAX, all 0, small), every query's sums equal to the oracle's for its
 * table; nq from 1 to 17 covers whole groups (of two on AVX2, up to
 * eight on AVX-512), every remainder and two full groups of eight.
 */
static void
test_multi(void)
{
	static const unsigned nfs[] = { 4, 8, 12, 196, 392, 516, 1028, 1536,
	    4096 };
	static const size_t nbs[] = { 1, 3, 8 };
	const struct {
		const char *name;
		tq_scan4x_fn fn;
		int run;
	} mk[] = {
		{ "avx2", tq_scan4x_avx2, runnable[0] },
		{ "avx512", tq_scan4x_avx512, runnable[1] },
	};
	const uint8_t *luts[17];
	uint8_t *lut[17];

	for (size_t d = 0; d < sizeof(mk) / sizeof(mk[0]); d++) {
		int bad = 0;
		unsigned runs = 0;

		if (!mk[d].run) {
			printf("multi-query kernel %s: skipped (CPU lacks "
			    "it)\n", mk[d].name);
			continue;
		}
		for (size_t a = 0; a < sizeof(nfs) / sizeof(nfs[0]); a++)
			for (size_t c = 0; c < sizeof(nbs) / sizeof(nbs[0]); c++)
				for (unsigned nq = 1; nq <= 17; nq++) {
					unsigned nf = nfs[a];
					size_t nb = nbs[c], bb = (size_t)nf * 16;
					size_t stride = nb * TQ_BLOCK + 5;
					uint8_t *codes = malloc(nb * bb);
					uint32_t *want = malloc(nb * TQ_BLOCK * 4);
					uint32_t *got = malloc(nq * stride * 4);

					for (size_t i = 0; i < nb * bb; i++)
						codes[i] = (uint8_t)rnd();
					for (unsigned j = 0; j < nq; j++) {
						lut[j] = malloc((size_t)nf * 16);
						for (size_t i = 0;
						    i < (size_t)nf * 16; i++)
							lut[j][i] = j % 4 == 1 ?
							    TQ_LUT4_MAX :
							    j % 4 == 2 ? 0 :
							    j % 4 == 3 ?
							    (uint8_t)(rnd() & 3) :
							    (uint8_t)(rnd() %
							    (TQ_LUT4_MAX + 1));
						luts[j] = lut[j];
					}
					memset(got, 0x5a, nq * stride * 4);
					mk[d].fn(codes, nb, bb, nf, luts, nq, got,
					    stride);
					for (unsigned j = 0; j < nq; j++) {
						tq_scan_scalar(codes, nb, bb, nf, 4,
						    lut[j], want);
						bad |= memcmp(want, got + j * stride,
						    nb * TQ_BLOCK * 4) != 0;
						/* The gap after each untouched. */
						bad |= got[j * stride + nb *
						    TQ_BLOCK] != 0x5a5a5a5au;
						free(lut[j]);
					}
					runs++;
					free(codes);
					free(want);
					free(got);
				}
		if (bad)
			fprintf(stderr, "multi-query kernel %s differs\n",
			    mk[d].name);
		CHECK(!bad);
		printf("multi-query kernel %s: ran, %u cases against scalar\n",
		    mk[d].name, runs);
	}
}

/*
 * Fills the stack below the caller with ones, so that a kernel called
 * next finds garbage in any local it leaves unset (the AMX tile
 * configuration once kept half of its memset only).
 */
static __attribute__((noinline)) void
dirty_stack(void)
{
	volatile uint8_t junk[65536];

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = 0xff;
}

/*
 * The dot form's kernels (AVX2, AVX-512, and AMX where the CPU and the
 * kernel allow it) against tq_scand_scalar, for fields of 1, 2 and 4
 * coordinates (planes): nq from 1 to 35 covers every group size of the
 * register kernels and the AMX tiles of 16 with every remainder; q8 rows
 * padded as the search pads them, at the padded width and at a wider
 * stride; query values random, all +127 and all -127 (the largest sums
 * either way), small (|value| <= 64, as a search's mostly are, where
 * AVX2 sums two planes as i16) and of |value| 64 to 66 (four of them
 * either side of its limit, DOT_PAIR_MAX), levels random and all 127.  Every query's sums must equal
 * the oracle's and the gap after them stay untouched.  Wide fields with
 * several planes run for fewer query counts, to keep the test quick.
 */
static void
test_dot_form(void)
{
	static const unsigned nfs[] = { 4, 8, 12, 60, 64, 68, 196, 392, 516,
	    1028, 1536, 4096 };
	static const unsigned nps[] = { 1, 2, 4 };
	static const size_t nbs[] = { 1, 3, 8 };
	const struct {
		const char *name;
		tq_scand_fn fn;
		int run;
	} dk[] = {
		{ "avx2", tq_scand_avx2, runnable[0] },
		{ "avx512", tq_scand_avx512, runnable[1] },
		{ "amx", tq_scand_amx, runnable[1] && tq_amx_usable() },
	};
	int bad[3] = { 0, 0, 0 };
	unsigned runs[3] = { 0, 0, 0 };

	for (size_t a = 0; a < sizeof(nfs) / sizeof(nfs[0]); a++)
	for (size_t e = 0; e < sizeof(nps) / sizeof(nps[0]); e++)
		for (size_t c = 0; c < sizeof(nbs) / sizeof(nbs[0]); c++)
			for (unsigned nq = 1; nq <= 35; nq += nq < 18 ? 1 : 17) {
				unsigned nf = nfs[a], np = nps[e];
				size_t nb = nbs[c], bb = (size_t)nf * 16;
				size_t pad = (nf + TQ_DOT_PAD - 1) / TQ_DOT_PAD *
				    TQ_DOT_PAD * np;
				size_t qs = pad + (nq % 2 ? 0 : 64);
				size_t stride = nb * TQ_BLOCK + 5;
				uint8_t *codes, lev[64];
				int8_t *q8;
				uint32_t *want, *got;

				if (np > 1 && nf > 600 && nq % 8 != 1)
					continue;
				codes = malloc(nb * bb);
				q8 = calloc(nq, qs);
				want = malloc(nq * stride * 4);
				got = malloc(nq * stride * 4);
				for (size_t i = 0; i < nb * bb; i++)
					codes[i] = (uint8_t)rnd();
				for (unsigned v = 0; v < 16 * np; v++)
					lev[v] = a % 3 == 1 ? 127 :
					    (uint8_t)(rnd() % 128);
				for (unsigned j = 0; j < nq; j++)
					for (size_t f = 0; f < nf * np; f++)
						q8[j * qs + f] = (int8_t)(j % 5 ==
						    1 ? 127 : j % 5 == 2 ? -127 :
						    j % 5 == 3 ? (int)(rnd() %
						    129) - 64 : j % 5 == 4 ?
						    (rnd() % 2 ? 1 : -1) * (int)(64 +
						    rnd() % 3) :
						    (int)(rnd() % 255) - 127);
				memset(want, 0x5a, nq * stride * 4);
				tq_scand_scalar(codes, nb, bb, nf, np, q8, qs, nq,
				    lev, want, stride);
				if (a % 3 == 1)
					for (unsigned j = 0; j < nq; j++)
						if (j % 5 == 1)
							CHECK(want[j * stride] ==
							    127u * 127u * nf * np);
				for (size_t d = 0; d < 3; d++) {
					if (!dk[d].run)
						continue;
					memset(got, 0x5a, nq * stride * 4);
					dirty_stack();
					dk[d].fn(codes, nb, bb, nf, np, q8, qs,
					    nq, lev, got, stride);
					bad[d] |= memcmp(want, got, nq * stride *
					    4) != 0;
					runs[d]++;
				}
				free(codes);
				free(q8);
				free(want);
				free(got);
			}
	for (size_t d = 0; d < 3; d++) {
		if (!dk[d].run) {
			printf("dot-form kernel %s: skipped (CPU or OS lacks "
			    "it)\n", dk[d].name);
			continue;
		}
		if (bad[d])
			fprintf(stderr, "dot-form kernel %s differs\n",
			    dk[d].name);
		CHECK(!bad[d]);
		printf("dot-form kernel %s: ran, %u cases against scalar\n",
		    dk[d].name, runs[d]);
	}
}

/*
 * The key kernels against tq_keys_scalar, bit for bit, keys and masks:
 * both metrics, random sums, offsets (that of scalar checked against sums
 * with the offset added) and factors of mixed magnitude, thresholds
 * from -inf to above every key, and factors that are NaN, infinite or
 * subnormal as a corrupt index could hold.
 */
static void
test_keys(void)
{
	const struct {
		const char *name;
		tq_keys_fn fn;
		int run;
	} kk[] = {
		{ "avx2", tq_keys_avx2, runnable[0] },
		{ "avx512", tq_keys_avx512, runnable[1] },
	};
	static const float odd[] = { NAN, INFINITY, -INFINITY, 1e-42f, -0.0f,
	    3.4e38f };
	uint32_t acc[TQ_BLOCK];
	float fs[TQ_NFACTORS * TQ_BLOCK], want[TQ_BLOCK], got[TQ_BLOCK];
	int bad[2] = { 0, 0 }, bad_off = 0;

	for (unsigned it = 0; it < 4000; it++) {
		struct tq_keypar p;
		float thr;
		uint32_t mw;

		for (unsigned j = 0; j < TQ_BLOCK; j++)
			acc[j] = rnd() % (it % 3 == 0 ? 256u : 1u << 24);
		for (unsigned j = 0; j < TQ_NFACTORS * TQ_BLOCK; j++)
			fs[j] = (float)((int32_t)rnd() % 100001) *
			    (j % 3 == 0 ? 1e-5f : 3.7e-2f);
		if (it % 7 == 0)
			fs[rnd() % (TQ_NFACTORS * TQ_BLOCK)] =
			    odd[rnd() % (sizeof(odd) / sizeof(odd[0]))];
		p.scale = (float)(rnd() % 1000 + 1) * 1e-4f;
		p.bias = (float)((int32_t)rnd() % 1000) * 1e-2f;
		p.qc = (float)((int32_t)rnd() % 1000) * 1e-3f;
		p.qn2 = (float)(rnd() % 1000) * 1e-1f;
		p.l2 = (int)(it & 1);
		/* An offset that makes some sums negative as int32, or none. */
		p.off = it % 4 == 0 ? 0 : it % 4 == 1 ? rnd() % 4096 :
		    (uint32_t)-(int32_t)(rnd() % 300);
		mw = tq_keys_scalar(acc, fs, &p, -INFINITY, want);
		/* A threshold among the keys, or at either end. */
		thr = it % 5 == 0 ? -INFINITY : it % 5 == 1 ? INFINITY :
		    want[rnd() % TQ_BLOCK];
		mw = tq_keys_scalar(acc, fs, &p, thr, want);
		/* The offset is the sums' own: the same keys as added first. */
		{
			struct tq_keypar p0 = p;
			uint32_t acc0[TQ_BLOCK];

			p0.off = 0;
			for (unsigned j = 0; j < TQ_BLOCK; j++)
				acc0[j] = acc[j] + p.off;
			memset(got, 0x5a, sizeof(got));
			bad_off |= tq_keys_scalar(acc0, fs, &p0, thr, got) !=
			    mw || memcmp(got, want, sizeof(got)) != 0;
		}
		for (size_t d = 0; d < 2; d++) {
			if (!kk[d].run)
				continue;
			memset(got, 0x5a, sizeof(got));
			bad[d] |= kk[d].fn(acc, fs, &p, thr, got) != mw ||
			    memcmp(got, want, sizeof(got)) != 0;
		}
	}
	for (size_t d = 0; d < 2; d++) {
		if (bad[d])
			fprintf(stderr, "key kernel %s differs\n", kk[d].name);
		CHECK(!bad[d]);
	}
	CHECK(!bad_off);
}

/*
 * The compact-factor key kernels against tq_keysh_scalar, bit for bit:
 * blocks of random f16 s and t and exponents over the whole i8 range
 * (the clamp to -126 .. 127 included), some f16 values NaN, infinite or
 * subnormal as a corrupt index could hold, both metrics, offsets and
 * thresholds as in test_keys; and the scalar kernel against the
 * expression of internal.h with the row decoded by tq_fach_decode.  The
 * same for the two steps the batches take (tq_fachdec_fn, then
 * tq_keysd_fn), scalar and SIMD: the decoded s and t those of
 * tq_fach_decode, the keys those of tq_keysh_scalar.
 */
static void
test_keysh(void)
{
	enum { NB = 3 };	/* blocks a call: the run form */
	const struct {
		const char *name;
		tq_keysh_fn fn;
		tq_fachdec_fn dec;
		tq_keysd_fn keysd;
		int run;
	} kk[] = {
		{ "scalar", NULL, tq_fachdec_scalar, tq_keysd_scalar, 1 },
		{ "avx2", tq_keysh_avx2, tq_fachdec_avx2, tq_keysd_avx2,
		    runnable[0] },
		{ "avx512", tq_keysh_avx512, tq_fachdec_avx512,
		    tq_keysd_avx512, runnable[1] },
	};
	float st[2 * TQ_BLOCK];
	static const uint16_t odd[] = { 0x7e00u, 0x7c00u, 0xfc00u, 0x0001u,
	    0x8000u, 0x7bffu, 0x7d01u };
	uint8_t fh[NB * TQ_FACH_BLOCK];
	uint32_t acc[NB * TQ_BLOCK], mw[NB], mg[NB + 1];
	float want[NB * TQ_BLOCK], got[NB * TQ_BLOCK + 1];
	int bad[3] = { 0, 0, 0 }, bad_dec[3] = { 0, 0, 0 }, bad_ref = 0;
	unsigned ran[3] = { 0, 0, 0 };

	for (unsigned it = 0; it < 4000; it++) {
		struct tq_keypar p;
		/* Drawn, not it % NB: the cases below cycle on it % 3. */
		size_t nb = 1 + rnd() % NB;
		float thr;

		for (unsigned j = 0; j < NB * TQ_BLOCK; j++) {
			uint8_t *f = fh + j / TQ_BLOCK * TQ_FACH_BLOCK;
			unsigned r = j % TQ_BLOCK;

			acc[j] = rnd() % (it % 3 == 0 ? 256u : 1u << 24);
			/* Finite halves of either sign, 2^-14 .. 2^15. */
			wr_le16(f + 2 * r, (uint16_t)(rnd() % 0x7800u +
			    0x0400u) | (uint16_t)(rnd() & 1) << 15);
			wr_le16(f + 2 * TQ_BLOCK + 2 * r, (uint16_t)(rnd() %
			    0x7800u + 0x0400u) | (uint16_t)(rnd() & 1) << 15);
			f[4 * TQ_BLOCK + r] = it % 5 == 0 ? (uint8_t)rnd() :
			    (uint8_t)(int8_t)((int32_t)(rnd() % 61) - 40);
		}
		if (it % 7 == 0)
			wr_le16(fh + rnd() % NB * TQ_FACH_BLOCK + 2 * (rnd() %
			    (2 * TQ_BLOCK)), odd[rnd() % (sizeof(odd) /
			    sizeof(odd[0]))]);
		p.scale = (float)(rnd() % 1000 + 1) * 1e-4f;
		p.bias = (float)((int32_t)rnd() % 1000) * 1e-2f;
		p.qc = 0.0f;
		p.qn2 = 0.0f;
		/* qk 0 too, or it hides keys of the smallest exponents. */
		p.qk = it % 3 == 2 ? 0.0f : (float)((int32_t)rnd() % 100000) *
		    1e-3f;
		p.l2 = (int)(it & 1);
		p.off = it % 4 == 0 ? 0 : it % 4 == 1 ? rnd() % 4096 :
		    (uint32_t)-(int32_t)(rnd() % 300);
		tq_keysh_scalar(acc, fh, nb, &p, -INFINITY, want, mw);
		thr = it % 5 == 0 ? -INFINITY : it % 5 == 1 ? INFINITY :
		    want[rnd() % (nb * TQ_BLOCK)];
		tq_keysh_scalar(acc, fh, nb, &p, thr, want, mw);
		for (unsigned j = 0; j < nb * TQ_BLOCK; j++) {
			const uint8_t *f = fh + j / TQ_BLOCK * TQ_FACH_BLOCK;
			float s, t, d, k;

			tq_fach_decode(f, j % TQ_BLOCK, &s, &t);
			d = p.scale * (float)(int32_t)(acc[j] + p.off) + p.bias;
			if (p.l2)
				d = d + d;
			k = p.qk + s * (d + t);
			bad_ref |= memcmp(&k, &want[j], 4) != 0 &&
			    !(isnan(k) && isnan(want[j]));
			/* The mask: keys >= thr, never NaN. */
			bad_ref |= (int)(mw[j / TQ_BLOCK] >> j % TQ_BLOCK &
			    1) != (k >= thr);
		}
		for (size_t d = 0; d < 3; d++) {
			if (!kk[d].run)
				continue;
			if (kk[d].fn != NULL) {
				/* Nothing written past the run's blocks. */
				memset(got, 0x5a, sizeof(got));
				memset(mg, 0x5a, sizeof(mg));
				kk[d].fn(acc, fh, nb, &p, thr, got, mg);
				bad[d] |= memcmp(mg, mw, nb * 4) != 0 ||
				    mg[nb] != 0x5a5a5a5au;
				for (unsigned j = 0; j < nb * TQ_BLOCK; j++)
					bad[d] |= memcmp(&got[j], &want[j],
					    4) != 0 && !(isnan(got[j]) &&
					    isnan(want[j]));
				bad[d] |= memcmp(&got[nb * TQ_BLOCK],
				    "\x5a\x5a\x5a\x5a", 4) != 0;
			}
			for (size_t b = 0; b < nb; b++) {
				const float *w = want + b * TQ_BLOCK;

				memset(st, 0x5a, sizeof(st));
				kk[d].dec(fh + b * TQ_FACH_BLOCK, st);
				for (unsigned j = 0; j < TQ_BLOCK; j++) {
					float s, t;

					tq_fach_decode(fh + b * TQ_FACH_BLOCK,
					    j, &s, &t);
					bad_dec[d] |= (memcmp(&s, &st[j], 4) !=
					    0 && !(isnan(s) && isnan(st[j]))) ||
					    (memcmp(&t, &st[TQ_BLOCK + j], 4) !=
					    0 && !(isnan(t) &&
					    isnan(st[TQ_BLOCK + j])));
				}
				memset(got, 0x5a, sizeof(got));
				bad_dec[d] |= kk[d].keysd(acc + b * TQ_BLOCK,
				    st, &p, thr, got) != mw[b];
				for (unsigned j = 0; j < TQ_BLOCK; j++)
					bad_dec[d] |= memcmp(&got[j], &w[j],
					    4) != 0 && !(isnan(got[j]) &&
					    isnan(w[j]));
			}
			ran[d] += (unsigned)nb;
		}
	}
	for (size_t d = 0; d < 3; d++) {
		if (bad[d] || bad_dec[d])
			fprintf(stderr, "compact key kernel %s differs%s\n",
			    kk[d].name, bad_dec[d] ? " (decoded)" : "");
		CHECK(!bad[d]);
		CHECK(!bad_dec[d]);
		printf("compact key kernel %s: %u blocks against scalar\n",
		    kk[d].name, ran[d]);
	}
	CHECK(!bad_ref);
}

/* Codes of all ones select each table's last entry: the layout's corners. */
static void
test_corners(void)
{
	static const unsigned bits[] = { 4, 6 };
	size_t b, k;

	for (b = 0; b < 2; b++) {
		unsigned nfields = 520, fb = bits[b];
		size_t entries = fb == 4 ? 16 : 64;
		size_t block_bytes = fb == 4 ? nfields * 16 : nfields / 4 * 96;
		uint8_t *codes = malloc(2 * block_bytes);
		uint8_t *lut = malloc(nfields * entries);
		uint32_t want[64], got[64];
		size_t i;

		CHECK(codes != NULL && lut != NULL);
		if (codes == NULL || lut == NULL) {
			free(codes);
			free(lut);
			continue;
		}
		memset(codes, 0xff, block_bytes);
		memset(codes + block_bytes, 0, block_bytes);
		for (i = 0; i < nfields * entries; i++)
			lut[i] = (uint8_t)((i * 7 + 3) % (fb == 4 ?
			    TQ_LUT4_MAX + 1 : 256));
		tq_scan_scalar(codes, 2, block_bytes, nfields, fb, lut, want);
		for (k = 0; k < NKERN; k++) {
			if (!runnable[k])
				continue;
			kernels[k].fn(codes, 2, block_bytes, nfields, fb, lut,
			    got);
			ncalls[k]++;
			CHECK(memcmp(want, got, sizeof(got)) == 0);
		}
		free(codes);
		free(lut);
	}
}

/*
 * The fixed-order dot kernels: SSE2, AVX2 and AVX-512 against the
 * portable oracle, bit for bit, for lengths around every multiple of 16,
 * row and output counts that leave remainders, strides wider than k, and
 * values of mixed magnitude (so a different order would round
 * differently); also a hand check of the order on k = 17.
 */
static void
test_dot(void)
{
	static const uint32_t ks[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33,
	    47, 48, 49, 64, 100, 784, 1024, 1537 };
	const struct {
		const char *name;
		tq_dot_fn fn;
		int run;
	} dk[] = {
		{ "sse2", tq_dot_sse2, 1 },
		{ "avx2", tq_dot_avx2, runnable[0] },
		{ "avx512", tq_dot_avx512, runnable[1] },
	};
	const size_t ld = 1600;
	float *x = malloc(9 * ld * sizeof(float));
	float *a = malloc(11 * 1537 * sizeof(float));
	float want[9 * 11], got[9 * 11];
	int bad[3] = { 0, 0, 0 };

	for (size_t i = 0; i < 9 * ld; i++)
		x[i] = (float)((int32_t)rnd() % 20001) * (rnd() % 2 ? 1e-3f :
		    7.1f);
	for (size_t i = 0; i < 11 * 1537; i++)
		a[i] = (float)((int32_t)rnd() % 20001) * 1e-4f;
	for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
		for (size_t n = 1; n <= 9; n += 2)
			for (uint32_t m = 1; m <= 11; m += 3) {
				tq_dot_portable(x, ld, n, a, m, ks[ki], want, 11);
				for (size_t d = 0; d < 3; d++) {
					if (!dk[d].run)
						continue;
					memset(got, 0xff, sizeof(got));
					dk[d].fn(x, ld, n, a, m, ks[ki], got, 11);
					for (size_t i = 0; i < n; i++)
						bad[d] |= memcmp(got + i * 11,
						    want + i * 11, m *
						    sizeof(float)) != 0;
				}
			}
	for (size_t d = 0; d < 3; d++) {
		if (bad[d])
			fprintf(stderr, "dot kernel %s differs\n", dk[d].name);
		CHECK(!bad[d]);
	}
	/* The order by hand: 16 lanes, the halving tree, then the tail. */
	{
		float xv[17], av[17], l[16], t[8], u[4], s, y;

		for (unsigned i = 0; i < 17; i++) {
			xv[i] = x[i];
			av[i] = a[i];
		}
		for (unsigned i = 0; i < 16; i++)
			l[i] = 0.0f + xv[i] * av[i];
		for (unsigned i = 0; i < 8; i++)
			t[i] = l[i] + l[i + 8];
		for (unsigned i = 0; i < 4; i++)
			u[i] = t[i] + t[i + 4];
		s = (u[0] + u[1]) + (u[2] + u[3]);
		s += xv[16] * av[16];
		tq_dot_portable(xv, 17, 1, av, 1, 17, &y, 1);
		CHECK(memcmp(&s, &y, sizeof(s)) == 0);
	}
	free(x);
	free(a);
}

/*
 * The rows-times-block-diagonal kernels of the structured rotations: SSE2,
 * AVX2 and AVX-512 against the portable oracle, bit for bit, for block
 * sizes on both sides of every register and group width (28: the narrow
 * layout at d = 784; wide blocks whose last 64 or 128 columns are full,
 * short by one register or short by a few lanes), block counts that
 * leave every remainder of the groups, and values of mixed magnitude.
 * The matrices and rows end at their buffers' ends (AddressSanitizer sees a read past them) and the
 * output has a guard after it.  Then the order by hand.
 */
static void
test_rowa(void)
{
	static const uint32_t ss[] = { 1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 25,
	    27, 28, 29, 31, 32, 33, 40, 47, 48, 49, 56, 57, 63, 64, 65, 100,
	    121, 128, 129, 191, 196, 249, 260, 1000 };
	static const uint32_t nbs[] = { 1, 2, 3, 4, 5, 7, 8, 9, 17, 28 };
	const struct {
		const char *name;
		tq_rowa_fn fn;
		int run;
	} rk[] = {
		{ "sse2", tq_rowa_sse2, 1 },
		{ "avx2", tq_rowa_avx2, runnable[0] },
		{ "avx512", tq_rowa_avx512, runnable[1] },
	};
	int bad[3] = { 0, 0, 0 };

	for (size_t si = 0; si < sizeof(ss) / sizeof(ss[0]); si++)
		for (size_t ni = 0; ni < sizeof(nbs) / sizeof(nbs[0]); ni++) {
			uint32_t s = ss[si], nb = nbs[ni];
			size_t ny = (size_t)nb * s, na = ny * s;
			float *y, *a, *want, *got;

			if (na > (1u << 20))
				continue;
			y = malloc(ny * sizeof(float));
			a = malloc(na * sizeof(float));
			want = malloc(ny * sizeof(float));
			got = malloc((ny + 1) * sizeof(float));
			for (size_t i = 0; i < ny; i++)
				y[i] = (float)((int32_t)rnd() % 20001) *
				    (rnd() % 2 ? 1e-3f : 7.1f);
			for (size_t i = 0; i < na; i++)
				a[i] = (float)((int32_t)rnd() % 20001) * 1e-4f;
			tq_rowa_portable(y, a, nb, s, want);
			for (size_t d = 0; d < 3; d++) {
				if (!rk[d].run)
					continue;
				memset(got, 0xee, (ny + 1) * sizeof(float));
				rk[d].fn(y, a, nb, s, got);
				bad[d] |= memcmp(got, want, ny *
				    sizeof(float)) != 0;
				bad[d] |= memcmp(got + ny, "\xee\xee\xee\xee",
				    4) != 0;
			}
			free(y);
			free(a);
			free(want);
			free(got);
		}
	for (size_t d = 0; d < 3; d++) {
		if (bad[d])
			fprintf(stderr, "rowa kernel %s differs\n", rk[d].name);
		if (rk[d].run)
			CHECK(!bad[d]);
	}
	/*
	 * One block for many rows (rowa_rows, AVX2 and AVX-512): every row as
	 * tq_rowa_portable gives it alone, rows at awkward strides, row
	 * counts that leave every remainder of the groups of 8 and 4, and
	 * nothing written between or after the rows.
	 */
	for (int kk = 0; kk < 2; kk++) {
		static const uint32_t ns[] = { 1, 2, 3, 4, 5, 7, 8, 9, 16, 17,
		    33 };
		tq_rowa_rows_fn rows = kk ? tq_rowa_rows_avx512 :
		    tq_rowa_rows_avx2;
		int rbad = 0;

		if (!runnable[kk])
			continue;

		for (size_t si = 0; si < sizeof(ss) / sizeof(ss[0]); si++)
			for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]);
			    ni++) {
				uint32_t sz = ss[si], n = ns[ni];
				size_t ldy = sz + 3, ldx = sz + 5;
				float *y = malloc(n * ldy * sizeof(float));
				float *a = malloc((size_t)sz * sz *
				    sizeof(float));
				float *x = malloc((n * ldx + 1) * sizeof(float));
				float *want = malloc(sz * sizeof(float));

				for (size_t i = 0; i < n * ldy; i++)
					y[i] = (float)((int32_t)rnd() % 20001) *
					    (rnd() % 2 ? 1e-3f : 7.1f);
				for (size_t i = 0; i < (size_t)sz * sz; i++)
					a[i] = (float)((int32_t)rnd() % 20001) *
					    1e-4f;
				memset(x, 0xee, (n * ldx + 1) * sizeof(float));
				rows(y, ldy, a, n, sz, x, ldx);
				for (uint32_t t = 0; t < n; t++) {
					tq_rowa_portable(y + t * ldy, a, 1, sz,
					    want);
					rbad |= memcmp(x + t * ldx, want, sz *
					    sizeof(float)) != 0;
					for (size_t g = sz; g < ldx; g++)
						rbad |= memcmp(x + t * ldx + g,
						    "\xee\xee\xee\xee", 4) != 0;
				}
				rbad |= memcmp(x + n * ldx, "\xee\xee\xee\xee",
				    4) != 0;
				free(y);
				free(a);
				free(x);
				free(want);
			}
		if (rbad)
			fprintf(stderr, "rowa_rows kernel %s differs\n",
			    kk ? "avx512" : "avx2");
		CHECK(!rbad);
	}
	/* The order by hand: column j of block 1, a chain over o from +0. */
	{
		float y[6] = { 1e8f, 3.0f, -1e8f, 0.5f, 1e-3f, -2.0f };
		float a[18], x[6], want;

		for (unsigned i = 0; i < 18; i++)
			a[i] = (float)(i + 1) * 0.37f;
		want = 0.0f + y[3] * a[9 + 1];
		want += y[4] * a[9 + 3 + 1];
		want += y[5] * a[9 + 6 + 1];
		tq_rowa_portable(y, a, 2, 3, x);
		CHECK(memcmp(&x[4], &want, sizeof(want)) == 0);
	}
}

/*
 * The exact-key kernels against f16 rows: AVX2 and AVX-512 against the
 * f16 conversion and tq_exact_key, bit for bit, for both kinds of sum (l2
 * and inner product), lengths around every multiple of 8 and 16, row
 * counts that leave every remainder of the groups of four, and halves of
 * every kind but Inf and NaN (subnormals, the largest, both signs).  Each
 * row ends at its buffer's end.  A second query puts +-1e20 in lanes 0
 * and 1, against halves of 1: the inner products then cancel to what the
 * rounding in each lane left, which shows in the float key if a kernel
 * sums in another order.
 */
static void
test_keyf16(void)
{
	static const uint32_t dims[] = { 1, 3, 7, 8, 9, 15, 16, 17, 23, 31,
	    32, 33, 100, 784, 785 };
	const struct {
		const char *name;
		tq_keyf16_fn fn;
		int run;
	} kk[] = {
		{ "avx2", tq_keyf16_avx2, runnable[0] &&
		    cpu_has("f16c") },
		{ "avx512", tq_keyf16_avx512, runnable[1] },
	};
	int bad[2] = { 0, 0 };

	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		uint32_t dim = dims[di];
		float *qv = malloc(dim * sizeof(float));
		float *x = malloc(dim * sizeof(float));
		uint8_t *rows[9];
		float want[9], got[9];

		for (uint32_t d = 0; d < dim; d++)
			qv[d] = (float)((int32_t)rnd() % 20001) * (rnd() % 2 ?
			    1e-3f : 7.1f);
		for (unsigned t = 0; t < 9; t++) {
			rows[t] = malloc(2 * (size_t)dim);
			for (uint32_t d = 0; d < dim; d++) {
				uint16_t h = (uint16_t)rnd();

				/* No Inf or NaN: exponent 31 becomes 30. */
				if ((h & 0x7c00) == 0x7c00)
					h &= (uint16_t)~0x0400;
				rows[t][2 * d] = (uint8_t)h;
				rows[t][2 * d + 1] = (uint8_t)(h >> 8);
			}
		}
		for (int l2 = 0; l2 <= 3; l2++) {
			enum tq_metric m = l2 % 2 ? TQ_METRIC_L2 : TQ_METRIC_IP;

			if (l2 == 2 && dim >= 2) {
				qv[0] = 1e20f;
				qv[1] = -1e20f;
				for (unsigned t = 0; t < 9; t++) {
					rows[t][0] = rows[t][2] = 0x00;
					rows[t][1] = rows[t][3] = 0x3c;
				}
			}

			for (unsigned t = 0; t < 9; t++) {
				tq_f16_portable(rows[t], dim, x);
				want[t] = tq_exact_key(m, qv, x, dim);
			}
			for (size_t k = 0; k < 2; k++) {
				if (!kk[k].run)
					continue;
				for (unsigned n = 1; n <= 9; n++) {
					memset(got, 0xee, sizeof(got));
					kk[k].fn(m, qv, (const uint8_t *const *)
					    rows, n, dim, got);
					bad[k] |= memcmp(got, want, n *
					    sizeof(float)) != 0;
					/* Nothing written past key[n - 1]. */
					if (n < 9)
						bad[k] |= memcmp(got + n,
						    "\xee\xee\xee\xee", 4) != 0;
				}
			}
		}
		for (unsigned t = 0; t < 9; t++)
			free(rows[t]);
		free(qv);
		free(x);
	}
	for (size_t k = 0; k < 2; k++) {
		if (bad[k])
			fprintf(stderr, "keyf16 kernel %s differs\n", kk[k].name);
		if (kk[k].run)
			CHECK(!bad[k]);
	}
}

/*
 * The refinement's dot products with 4-bit rows: every kernel against
 * the layout of tq.5 decoded here, dequantized and summed by tq_dot_lanes,
 * bit for bit, for bits 1, 2 and 4, lengths around every multiple of 8
 * and 16, rows at block positions 0, 15, 16, 31 and others (both nibbles
 * of a byte), row counts that leave every remainder of the groups of four,
 * and a query per row or one for all.  Each block is allocated to its
 * exact size (the fields padded to a multiple of four), so a read past it
 * trips AddressSanitizer; the centroids past 2^bits are NaN, so a code
 * not masked to its bits shows.  One query puts +-1e20 in lanes 0 and 1,
 * so a sum in another order shows in the result.
 */
static void
test_dotq4(void)
{
	static const uint32_t dims[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17,
	    23, 31, 32, 33, 63, 64, 65, 100, 784, 1024, 1025 };
	static const unsigned bitss[] = { 1, 2, 4 };
	static const unsigned posv[] = { 0, 15, 16, 31, 5, 20, 0, 31, 16 };
	const struct {
		const char *name;
		tq_dotq4_fn fn;
		int run;
	} kk[] = {
		{ "portable", tq_dotq4_portable, 1 },
		{ "avx2", tq_dotq4_avx2, runnable[0] },
		{ "avx512", tq_dotq4_avx512, runnable[1] },
	};
	int bad[3] = { 0, 0, 0 };
	float cent[16];

	for (size_t bi = 0; bi < sizeof(bitss) / sizeof(bitss[0]); bi++)
	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		unsigned bits = bitss[bi], cpf = 4 / bits, t;
		uint32_t dim = dims[di], nf = ((dim + cpf - 1) / cpf + 3) / 4 * 4;
		float *rq[9], *y = malloc(dim * sizeof(float));
		const float *one[9];
		uint8_t *blk[9];
		double want[2][9], got[9];

		for (unsigned c = 0; c < 16; c++)
			cent[c] = c < (1u << bits) ? (float)((int32_t)rnd() %
			    20001) * 1e-4f : NAN;
		for (t = 0; t < 9; t++) {
			rq[t] = malloc(dim * sizeof(float));
			for (uint32_t d = 0; d < dim; d++)
				rq[t][d] = (float)((int32_t)rnd() % 20001) *
				    (rnd() % 2 ? 1e-3f : 7.1f);
			blk[t] = malloc((size_t)nf * 16);
			for (size_t b = 0; b < (size_t)nf * 16; b++)
				blk[t][b] = (uint8_t)rnd();
		}
		for (int big = 0; big <= 1; big++) {
			if (big && dim >= 2) {
				rq[3][0] = 1e20f;
				rq[3][1] = -1e20f;
			}
			for (t = 0; t < 9; t++) {
				unsigned j = posv[t];

				for (uint32_t d = 0; d < dim; d++) {
					unsigned v = blk[t][(size_t)(d / cpf) *
					    16 + j % 16] >> (j < 16 ? 0 : 4);

					y[d] = cent[v >> (d % cpf * bits) &
					    ((1u << bits) - 1)];
				}
				want[0][t] = tq_dot_lanes(rq[t], y, dim);
				want[1][t] = tq_dot_lanes(rq[3], y, dim);
				one[t] = rq[3];
			}
			/* A query per row, and one query for all (shared). */
			for (size_t k = 0; k < 3; k++)
			for (int sh = 0; sh <= 1; sh++) {
				if (!kk[k].run)
					continue;
				for (unsigned n = 1; n <= 9; n++) {
					memset(got, 0xee, sizeof(got));
					kk[k].fn(sh ? one : (const float *const
					    *)rq, (const uint8_t *const *)blk,
					    posv, n, dim, bits, cent, got);
					bad[k] |= memcmp(got, want[sh], n *
					    sizeof(double)) != 0;
					/* Nothing written past dot[n - 1]. */
					if (n < 9)
						bad[k] |= memcmp(got + n,
						    "\xee\xee\xee\xee\xee\xee"
						    "\xee\xee", 8) != 0;
				}
			}
		}
		for (t = 0; t < 9; t++) {
			free(rq[t]);
			free(blk[t]);
		}
		free(y);
	}
	for (size_t k = 0; k < 3; k++) {
		if (bad[k])
			fprintf(stderr, "dotq4 kernel %s differs\n",
			    kk[k].name);
		if (kk[k].run)
			CHECK(!bad[k]);
	}
}

/*
 * The f16 kernels against the portable one on all 65536 values, at
 * lengths that leave every tail (a NaN need only stay a NaN: hardware
 * quietens a signalling one), and the portable one against hand values.
 */
static void
test_f16(void)
{
	const struct {
		const char *name;
		tq_f16_fn fn;
		int run;
	} fk[] = {
		{ "avx2", tq_f16_avx2, runnable[0] &&
		    cpu_has("f16c") },
		{ "avx512", tq_f16_avx512, runnable[1] },
	};
	static const struct { uint16_t h; float f; } hand[] = {
		{ 0x0000, 0.0f }, { 0x3c00, 1.0f }, { 0xc000, -2.0f },
		{ 0x7bff, 65504.0f }, { 0x0001, 5.9604644775390625e-8f },
		{ 0x03ff, 6.0975551605224609e-5f }, { 0x0400, 6.103515625e-5f },
		{ 0x3555, 0.333251953125f },
	};
	uint8_t *src = malloc(2 * 65536 + 2);
	float *want = malloc(65537 * sizeof(float));
	float *got = malloc(65537 * sizeof(float));
	static const size_t lens[] = { 0, 1, 7, 8, 9, 15, 16, 17, 31, 33,
	    65536 };

	for (uint32_t v = 0; v < 65536; v++) {
		src[2 * v] = (uint8_t)v;
		src[2 * v + 1] = (uint8_t)(v >> 8);
	}
	for (size_t i = 0; i < sizeof(hand) / sizeof(hand[0]); i++) {
		uint8_t b[2] = { (uint8_t)hand[i].h, (uint8_t)(hand[i].h >> 8) };
		float f;

		tq_f16_portable(b, 1, &f);
		CHECK(memcmp(&f, &hand[i].f, 4) == 0);
	}
	tq_f16_portable(src, 65536, want);
	for (size_t d = 0; d < sizeof(fk) / sizeof(fk[0]); d++) {
		int bad = 0;

		if (!fk[d].run)
			continue;
		for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
			for (size_t off = 0; off + lens[l] <= 65536;
			    off += lens[l] > 0 ? 65536 / 3 : 1 << 17) {
				memset(got, 0xee, 65537 * sizeof(float));
				fk[d].fn(src + 2 * off, lens[l], got);
				for (size_t i = 0; i < lens[l]; i++)
					bad |= want[off + i] != want[off + i] ?
					    got[i] == got[i] : memcmp(got + i,
					    want + off + i, 4) != 0;
				/* Nothing written past the end. */
				bad |= memcmp(got + lens[l], "\xee\xee\xee\xee",
				    4) != 0;
			}
		if (bad)
			fprintf(stderr, "f16 kernel %s differs\n", fk[d].name);
		CHECK(!bad);
	}
	free(src);
	free(want);
	free(got);
}

int
main(void)
{
	size_t k, n;

	__builtin_cpu_init();
	for (k = 0; k < NKERN; k++) {
		runnable[k] = 1;
		for (n = 0; n < 4 && kernels[k].need[n] != NULL; n++)
			if (!cpu_has(kernels[k].need[n]))
				runnable[k] = 0;
	}
	RUN(test_fields4);
	RUN(test_fields6);
	RUN(test_corners);
	RUN(test_dot);
	RUN(test_rowa);
	RUN(test_f16);
	RUN(test_keyf16);
	RUN(test_dotq4);
	RUN(test_multi);
	RUN(test_dot_form);
	RUN(test_keys);
	RUN(test_keysh);
	for (k = 0; k < NKERN; k++)
		if (runnable[k])
			printf("kernel %s: ran, %lu cases against scalar\n",
			    kernels[k].name, ncalls[k]);
		else
			printf("kernel %s: skipped (CPU lacks it)\n",
			    kernels[k].name);
	return unit_done();
}
