/*
 * bench-kernels.c - how fast each scan kernel reads codes, single thread.
 *
 * A micro-benchmark, not a test: it prints figures and asserts nothing
 * (beyond a cross-check that each kernel agrees with the scalar one, so a
 * figure is never reported for wrong sums).  Build from the top of the tree
 * after `make`:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib scripts/bench-kernels.c \
 *       build/lib/libtq.a -lm -pthread -o /tmp/bench-kernels
 *   /tmp/bench-kernels [nvectors]
 *
 * For 100K x 1536 (the default) at 4, 2, 1 bits (4-bit fields: 1536, 768,
 * 384 of them) and 3 bits (768 6-bit fields), it reports GB/s of codes
 * scanned, best of several passes: "stream", one call over all blocks
 * (the codes come from L3 or memory), and "hot", the first 32 blocks over
 * and over (in L2: what the kernel can do when memory keeps up).  For
 * 4-bit fields the multi-query kernels (tq_scan4x, as batch tiles call
 * them, each query with its own copy of the table) are timed hot too for
 * 2, 4, 8 and 16 queries, in GB/s of codes per query, i.e. bytes times
 * queries over time.  These lookup-form rows are what 1-bit searches run
 * for single queries and on CPUs without AMX (4-bit fields of 4
 * coordinates, and 2-bit searches' 4-bit fields of 2 coordinates, their
 * "2-bit" rows); 4-bit searches run the dot form ("4-bit dot"), timed the
 * same way for 1 to 256 queries, with AMX where the machine has it, and
 * so do 2- and 1-bit batches on AMX and 2-bit single queries over codes
 * from memory ("2-bit dot", "1-bit dot" x16 and up: the one-query rows
 * show why single 1- and 2-bit queries in cache keep the lookup
 * kernels).  Codes and tables are 64-byte aligned, as in a
 * search (index sections are, and so are its tables).  Then the
 * machine's single-thread read bandwidth, a streaming sum over 1 GiB.
 * Times are this thread's CPU time (CLOCK_THREAD_CPUTIME_ID), best of
 * several passes, so that a busy machine that preempts the benchmark
 * inflates the figures less; it still shares caches and memory.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

void tq_scan_avx2(const uint8_t *, size_t, size_t, unsigned, unsigned,
    const uint8_t *, uint32_t *);
void tq_scan_avx512(const uint8_t *, size_t, size_t, unsigned, unsigned,
    const uint8_t *, uint32_t *);

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x2545f4914f6cdd1du;

static uint8_t
rnd8(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return (uint8_t)((rng * 0x2545f4914f6cdd1du) >> 56);
}

/* Best time of `reps` calls scanning nblocks blocks `inner` times each. */
static double
best_time(tq_scan_fn fn, const uint8_t *codes, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned fb, const uint8_t *lut,
    uint32_t *acc, int reps, int inner)
{
	double best = 1e30;
	int r, i;

	for (r = 0; r < reps; r++) {
		double t = now();

		for (i = 0; i < inner; i++)
			fn(codes, nblocks, block_bytes, nfields, fb, lut, acc);
		t = now() - t;
		if (t < best)
			best = t;
	}
	return best;
}

/*
 * Best time of `reps` multi-query calls (nq tables) over nblocks blocks,
 * `inner` times each; 0 if the sums differ from the oracle's (want).
 */
static double
best_time_multi(tq_scan4x_fn fn, const uint8_t *codes, size_t nblocks,
    size_t block_bytes, unsigned nfields, const uint8_t *const *luts,
    unsigned nq, uint32_t *acc, const uint32_t *want, int reps, int inner)
{
	size_t stride = nblocks * TQ_BLOCK;
	double best = 1e30;
	int r, i;

	fn(codes, nblocks, block_bytes, nfields, luts, nq, acc, stride);
	for (unsigned j = 0; j < nq; j++)
		if (memcmp(acc + j * stride, want, stride * sizeof(*acc)) != 0)
			return 0.0;
	for (r = 0; r < reps; r++) {
		double t = now();

		for (i = 0; i < inner; i++)
			fn(codes, nblocks, block_bytes, nfields, luts, nq, acc,
			    stride);
		t = now() - t;
		if (t < best)
			best = t;
	}
	return best;
}

/*
 * The dot form (4-bit fields of 4 / planes bits per coordinate, dim 1536:
 * what a 4, 2 or 1-bit search runs): one query streaming and hot, then nq
 * queries hot, all sharing one set of codes, every kernel checked against
 * the scalar one.  A query's values are shaped like a search's: roughly
 * Gaussian (a sum of four uniform bytes), scaled so the largest |value|
 * is 127, one row each.  (Uniform int8 would make most groups of the
 * AVX2 kernel's two-plane path fail its range check.)
 */
static int
bench_dot(size_t nblocks, size_t hot, unsigned planes)
{
	const unsigned nf = 1536 / planes, nqmax = 256, qs = 1536;
	const unsigned bits = 4 / planes;
	const size_t bb = (size_t)nf * 16, len = nblocks * bb;
	const struct {
		const char *name;
		tq_scand_fn fn;
		int ok;
	} dk[] = {
		{ "scalar", tq_scand_scalar, 1 },
		{ "avx2", tq_scand_avx2, __builtin_cpu_supports("avx2") },
		{ "avx512", tq_scand_avx512,
		    __builtin_cpu_supports("avx512vbmi") &&
		    __builtin_cpu_supports("avx512vnni") },
		{ "amx", tq_scand_amx, tq_amx_usable() },
	};
	static const unsigned nqs[] = { 1, 8, 16, 64, 256 };
	uint8_t *codes = aligned_alloc(64, len), lev[64];
	int8_t *q8 = aligned_alloc(64, (size_t)nqmax * qs);
	uint32_t *want = malloc((size_t)nqmax * hot * TQ_BLOCK * 4);
	uint32_t *acc = malloc((size_t)nqmax * nblocks * TQ_BLOCK * 4);
	int inner = (int)(nblocks / hot);

	if (codes == NULL || q8 == NULL || want == NULL || acc == NULL)
		return -1;
	for (size_t i = 0; i < len; i++)
		codes[i] = rnd8();
	for (size_t i = 0; i < nqmax; i++) {
		int g[1536], m = 1;

		for (unsigned j = 0; j < qs; j++) {
			g[j] = rnd8() + rnd8() + rnd8() + rnd8() - 510;
			if (abs(g[j]) > m)
				m = abs(g[j]);
		}
		for (unsigned j = 0; j < qs; j++)
			q8[i * qs + j] = (int8_t)lround(127.0 * g[j] / m);
	}
	for (unsigned t = 0; t < planes; t++)
		for (unsigned v = 0; v < 16; v++)
			lev[16 * t + v] = (uint8_t)(((v >> (t * bits)) &
			    ((1u << bits) - 1)) * 127 / ((1u << bits) - 1));
	tq_scand_scalar(codes, hot, bb, nf, planes, q8, qs, nqmax, lev, want,
	    hot * TQ_BLOCK);
	for (size_t k = 0; k < sizeof(dk) / sizeof(dk[0]); k++) {
		if (!dk[k].ok) {
			printf("%u-bit dot %4u %8.1f %9s  skipped (CPU lacks "
			    "it)\n", bits, nf, len / 1e6, dk[k].name);
			continue;
		}
		for (size_t qi = 0; qi < sizeof(nqs) / sizeof(nqs[0]); qi++) {
			unsigned nq = nqs[qi];
			size_t stride = hot * TQ_BLOCK;
			double best = 1e30, bs = 1e30;

			if (k == 0 && nq > 1)
				break;
			dk[k].fn(codes, hot, bb, nf, planes, q8, qs, nq, lev,
			    acc, stride);
			if (memcmp(acc, want, (size_t)nq * stride * 4) != 0) {
				printf("%u-bit dot %4u %8.1f %9s  x%-6u WRONG "
				    "SUMS\n", bits, nf, len / 1e6, dk[k].name,
				    nq);
				continue;
			}
			for (int r = 0; r < (k == 0 ? 2 : 10); r++) {
				double t = now();

				for (int i = 0; i < inner; i++)
					dk[k].fn(codes, hot, bb, nf, planes, q8,
					    qs, nq, lev, acc, stride);
				t = now() - t;
				if (t < best)
					best = t;
				if (nq > 1)
					continue;
				t = now();
				dk[k].fn(codes, nblocks, bb, nf, planes, q8,
				    qs, 1, lev, acc, nblocks * TQ_BLOCK);
				t = now() - t;
				if (t < bs)
					bs = t;
			}
			if (nq == 1)
				printf("%u-bit dot %4u %8.1f %9s  %-7s %8.2f "
				    "%8.2f\n", bits, nf, len / 1e6, dk[k].name,
				    "",
				    len / bs / 1e9, (double)hot * bb * inner /
				    best / 1e9);
			else
				printf("%u-bit dot %4u %8.1f %9s  x%-6u %8s "
				    "%8.2f per query\n", bits, nf, len / 1e6,
				    dk[k].name,
				    nq, "-", (double)hot * bb * inner * nq /
				    best / 1e9);
		}
	}
	free(codes);
	free(q8);
	free(want);
	free(acc);
	return 0;
}

static double
stream_sum_gbs(unsigned long long *checksum)
{
	size_t len = (size_t)1 << 30, n = len / sizeof(uint64_t), i;
	uint64_t *buf = malloc(len), best_sum = 0;
	double best = 1e30;
	int r;

	if (buf == NULL)
		return 0.0;
	memset(buf, 1, len);
	for (r = 0; r < 3; r++) {
		uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
		double t = now();

		for (i = 0; i < n; i += 4) {
			s0 += buf[i];
			s1 += buf[i + 1];
			s2 += buf[i + 2];
			s3 += buf[i + 3];
		}
		t = now() - t;
		best_sum = s0 + s1 + s2 + s3;
		if (t < best)
			best = t;
	}
	free(buf);
	*checksum = best_sum;
	return (double)len / best / 1e9;
}

int
main(int argc, char **argv)
{
	static const struct {
		const char *label;
		unsigned nfields, field_bits;
	} widths[] = {
		{ "4-bit", 1536, 4 },
		{ "2-bit", 768, 4 },
		{ "1-bit", 384, 4 },
		{ "3-bit", 768, 6 },
	};
	struct {
		const char *name;
		tq_scan_fn fn;
		int ok;
	} kern[] = {
		{ "scalar", tq_scan_scalar, 1 },
		{ "avx2", tq_scan_avx2, 0 },
		{ "avx512", tq_scan_avx512, 0 },
	};
	size_t nvec = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
	size_t nblocks = (nvec + TQ_BLOCK - 1) / TQ_BLOCK, hot = 32;
	size_t w, k;
	unsigned long long sum = 0;
	double gbs;

	__builtin_cpu_init();
	kern[1].ok = __builtin_cpu_supports("avx2") &&
	    __builtin_cpu_supports("bmi2");
	kern[2].ok = __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512vbmi");
	if (hot > nblocks)
		hot = nblocks;

	printf("%zu vectors (%zu blocks), dim 1536, single thread, GB/s of "
	    "codes\n", nblocks * TQ_BLOCK, nblocks);
	printf("%-6s %6s %8s %9s  %-7s %8s %8s\n", "bits", "fields", "MB",
	    "kernel", "", "stream", "hot");
	for (w = 0; w < sizeof(widths) / sizeof(widths[0]); w++) {
		unsigned nf = widths[w].nfields, fb = widths[w].field_bits;
		size_t entries = fb == 4 ? 16 : 64;
		size_t bb = fb == 4 ? (size_t)nf * 16 : (size_t)nf / 4 * 96;
		size_t len = nblocks * bb, i;
		uint8_t *codes = aligned_alloc(64, len);
		uint8_t *lut = aligned_alloc(64, nf * entries);
		uint32_t *want = malloc(nblocks * TQ_BLOCK * sizeof(uint32_t));
		uint32_t *acc = malloc(nblocks * TQ_BLOCK * sizeof(uint32_t));

		if (codes == NULL || lut == NULL || want == NULL ||
		    acc == NULL) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		for (i = 0; i < len; i++)
			codes[i] = rnd8();
		/* 4-bit tables keep within TQ_LUT4_MAX, as real ones do. */
		for (i = 0; i < nf * entries; i++)
			lut[i] = fb == 4 ? rnd8() % (TQ_LUT4_MAX + 1) : rnd8();
		tq_scan_scalar(codes, nblocks, bb, nf, fb, lut, want);

		for (k = 0; k < sizeof(kern) / sizeof(kern[0]); k++) {
			double ts, th;
			int inner;

			if (!kern[k].ok) {
				printf("%-6s %6u %8.1f %9s  skipped (CPU lacks "
				    "it)\n", widths[w].label, nf, len / 1e6,
				    kern[k].name);
				continue;
			}
			kern[k].fn(codes, nblocks, bb, nf, fb, lut, acc);
			if (memcmp(acc, want, nblocks * TQ_BLOCK *
			    sizeof(uint32_t)) != 0) {
				printf("%-6s %6u %8.1f %9s  WRONG SUMS\n",
				    widths[w].label, nf, len / 1e6,
				    kern[k].name);
				continue;
			}
			ts = best_time(kern[k].fn, codes, nblocks, bb, nf, fb,
			    lut, acc, k == 0 ? 3 : 20, 1);
			inner = (int)(nblocks / hot);
			th = best_time(kern[k].fn, codes, hot, bb, nf, fb, lut,
			    acc, k == 0 ? 3 : 20, inner);
			printf("%-6s %6u %8.1f %9s  %-7s %8.2f %8.2f\n",
			    widths[w].label, nf, len / 1e6, kern[k].name, "",
			    len / ts / 1e9,
			    (double)hot * bb * inner / th / 1e9);
		}
		for (k = 1; fb == 4 && k < sizeof(kern) / sizeof(kern[0]);
		    k++) {
			/*
			 * Every query gets its own copy of the same table, so
			 * the sums are known and the tables take the cache
			 * space a batch tile's would.
			 */
			static const unsigned nqs[] = { 2, 4, 8, 16 };
			const uint8_t *luts[16];
			uint8_t *copies;
			int inner = (int)(nblocks / hot);

			if (!kern[k].ok)
				continue;
			copies = aligned_alloc(64, 16 * (nf * entries + 256));
			if (copies == NULL)
				return 1;
			for (i = 0; i < 16; i++) {
				memcpy(copies + i * (nf * entries + 256), lut,
				    nf * entries);
				luts[i] = copies + i * (nf * entries + 256);
			}
			for (size_t qi = 0; qi < sizeof(nqs) / sizeof(nqs[0]);
			    qi++) {
				unsigned nq = nqs[qi];
				uint32_t *macc;
				double th;

				macc = malloc(nq * hot * TQ_BLOCK *
				    sizeof(*macc));
				if (macc == NULL)
					return 1;
				th = best_time_multi(k == 1 ? tq_scan4x_avx2 :
				    tq_scan4x_avx512, codes, hot, bb, nf, luts,
				    nq, macc, want, 20, inner);
				if (th == 0.0)
					printf("%-6s %6u %8.1f %9s  x%-6u WRONG "
					    "SUMS\n", widths[w].label, nf,
					    len / 1e6, kern[k].name, nq);
				else
					printf("%-6s %6u %8.1f %9s  x%-6u %8s "
					    "%8.2f per query\n",
					    widths[w].label, nf, len / 1e6,
					    kern[k].name, nq, "-", (double)hot *
					    bb * inner * nq / th / 1e9);
				free(macc);
			}
			free(copies);
		}
		free(codes);
		free(lut);
		free(want);
		free(acc);
	}
	for (unsigned planes = 1; planes <= 4; planes *= 2)
		if (bench_dot(nblocks, hot, planes) != 0) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
	gbs = stream_sum_gbs(&sum);
	/* The sum is printed so that the loop cannot be dropped. */
	printf("memory read bandwidth (streaming sum, 1 GiB): %.2f GB/s "
	    "(sum %llu)\n", gbs, sum);
	return 0;
}
