/*
 * bench-keys.c - the cost of a block's keys from f32 factors (FACT,
 * tq_keys_*) and from compact ones (FACH, tq_keysh_*), single thread.
 *
 * A micro-benchmark, not a test: it prints figures.  Build from the top of
 * the tree after `make`:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib scripts/bench-keys.c \
 *       build/lib/libtq.a -lm -pthread -o /tmp/bench-keys
 *   /tmp/bench-keys [nblocks]
 *
 * Over nblocks blocks (default 30000, about 1M rows; the factors of
 * FACT, 11.5 MB, then come from memory or L3, those of FACH, 4.8 MB, more
 * often from L3) it runs each kernel of each instruction set the CPU has,
 * the two layouts alternated ten times, and prints the best time per block
 * in ns (this thread's CPU time), both metrics.  A scan of the same block
 * reads its codes too: at 4 bits and 784 dimensions 12.5 KB a block, at 1
 * bit and 100 dimensions 448 bytes, so the keys' share of a search is
 * largest for short codes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

static double
cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int
main(int argc, char **argv)
{
	size_t nb = argc > 1 ? strtoul(argv[1], NULL, 10) : 30000;
	const struct tq_kernels *k = tq_kernels();
	const struct {
		const char *name;
		tq_keys_fn keys;
		tq_keysh_fn keysh;
		int ok;
	} isa[] = {
		{ "scalar", tq_keys_scalar, tq_keysh_scalar, 1 },
		{ "avx2", tq_keys_avx2, tq_keysh_avx2,
		    __builtin_cpu_supports("avx2") &&
		    __builtin_cpu_supports("f16c") },
		{ "avx512", tq_keys_avx512, tq_keysh_avx512,
		    __builtin_cpu_supports("avx512f") &&
		    __builtin_cpu_supports("avx512bw") },
	};
	float *fs = malloc(nb * 3 * TQ_BLOCK * sizeof(float));
	uint8_t *fh = malloc(nb * TQ_FACH_BLOCK);
	uint32_t *acc = malloc(nb * TQ_BLOCK * sizeof(uint32_t));
	/* FACH keys a call: a run of RUN blocks, as one query's scan. */
	enum { RUN = 64 };
	float key[RUN * TQ_BLOCK];
	uint32_t above[RUN];
	volatile uint32_t sink = 0;

	if (fs == NULL || fh == NULL || acc == NULL)
		return 1;
	srand(1);
	for (size_t i = 0; i < nb * TQ_BLOCK; i++)
		acc[i] = (uint32_t)rand() % 60000;
	for (size_t b = 0; b < nb; b++) {
		float *f = fs + b * 3 * TQ_BLOCK;

		for (unsigned j = 0; j < TQ_BLOCK; j++) {
			f[j] = 1000.0f + (float)(rand() % 1000);
			f[TQ_BLOCK + j] = -1e5f * (float)(rand() % 100);
			f[2 * TQ_BLOCK + j] = 1e7f + (float)(rand() % 100000);
		}
		/* Canonical floats of each row, packed. */
		{
			float c[3 * TQ_BLOCK];

			for (unsigned j = 0; j < TQ_BLOCK; j++) {
				float r[3] = { f[j], f[TQ_BLOCK + j],
				    f[2 * TQ_BLOCK + j] };

				tq_fach_canon(r, 1, 1e7);
				c[j] = r[0];
				c[TQ_BLOCK + j] = r[1];
				c[2 * TQ_BLOCK + j] = r[2];
			}
			tq_fach_pack(c, 1, fh + b * TQ_FACH_BLOCK);
		}
	}
	printf("bench-keys: %zu blocks, dispatch %s; ns per block (32 rows), "
	    "best of 10\n", nb, k->name);
	printf("%-8s %-4s %10s %10s %8s\n", "isa", "l2", "FACT f32",
	    "FACH f16", "ratio");
	for (size_t d = 0; d < sizeof(isa) / sizeof(isa[0]); d++) {
		if (!isa[d].ok)
			continue;
		for (int l2 = 0; l2 < 2; l2++) {
			struct tq_keypar p = { 1e-3f, -5.0f, 3.0f, 1e7f, l2, 0,
			    -1e6f };
			double best[2] = { 1e30, 1e30 };

			for (int rep = 0; rep < 10; rep++)
				for (int lay = 0; lay < 2; lay++) {
					int which = (rep & 1) ? 1 - lay : lay;
					double t0 = cpu_now(), t;

					for (size_t b = 0; b < nb && which == 0;
					    b++)
						sink += isa[d].keys(acc + b *
						    TQ_BLOCK, fs + b * 3 *
						    TQ_BLOCK, &p, 0.0f, key);
					for (size_t b = 0; b < nb && which == 1;
					    b += RUN) {
						size_t r = nb - b < RUN ?
						    nb - b : RUN;

						isa[d].keysh(acc + b *
						    TQ_BLOCK, fh + b *
						    TQ_FACH_BLOCK, r, &p, 0.0f,
						    key, above);
						sink += above[0];
					}
					t = cpu_now() - t0;
					if (t < best[which])
						best[which] = t;
				}
			printf("%-8s %-4s %10.2f %10.2f %8.3f\n", isa[d].name,
			    l2 ? "yes" : "no", 1e9 * best[0] / (double)nb,
			    1e9 * best[1] / (double)nb, best[1] / best[0]);
		}
	}
	free(fs);
	free(fh);
	free(acc);
	return (int)(sink & 0);
}
