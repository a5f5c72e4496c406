/*
 * bench-rotate.c - the cost of rotating vectors, by rotation kind and
 * dimension, single thread.
 *
 * A micro-benchmark, not a test: it prints figures.  Build from the top of
 * the tree after `make`:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib scripts/bench-rotate.c \
 *       build/lib/libtq.a $(pkg-config --libs openblas lapacke libzstd \
 *       libxxhash) -ldl -lm -pthread -o /tmp/bench-rotate
 *   /tmp/bench-rotate [dim ...]          (default 384 768 1536)
 *
 * For each dimension it makes the dense (up to 4096), the narrowest
 * structured (--rotation-block 1, the default from 256 dimensions until
 * the Hadamard one) and the Hadamard rotation of seed 42, and times
 * tq_rotate on 4096 random rows: one row a call (a single query), and all
 * the rows in one call (a batch, an encode), the kinds alternated fifteen
 * times, the best of each (this thread's CPU time).  A row a call reuses
 * the rotation from the caches; in a search the scan in between evicts a
 * structured or dense one, which then comes from L3 or memory (1.2 MB of
 * narrow blocks at 1536, 9.4 MB dense), so one query gains more than the
 * figures here say.  Prints a table, and a JSON line a dimension on
 * standard error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

#define ROWS 4096
#define REPS 15

static double
cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static struct tq_quantizer *
make(uint32_t d, enum tq_rotation kind, uint32_t width)
{
	struct tq_fit_params p;
	struct tq_quantizer *q = NULL;
	enum tq_status st;

	tq_fit_params_default(&p);
	p.dim = d;
	p.rotation = kind;
	p.rotation_block = width;
	if ((st = tq_quantizer_fit(&p, NULL, &q)) != TQ_OK) {
		fprintf(stderr, "bench-rotate: d=%u: %s\n", (unsigned)d,
		    tq_strerror(st));
		exit(1);
	}
	return q;
}

int
main(int argc, char **argv)
{
	static const uint32_t defdims[] = { 384, 768, 1536 };
	static const char *const name[] = { "dense", "narrow", "hadamard" };
	int nd = argc > 1 ? argc - 1 : 3, a, k, r;
	int first = 1;

	printf("%6s %-9s %9s %12s %10s\n", "dim", "rotation", "bytes",
	    "one (us)", "batch/row");
	for (a = 0; a < nd; a++) {
		uint32_t d = argc > 1 ? (uint32_t)strtoul(argv[a + 1], NULL,
		    10) : defdims[a];
		struct tq_quantizer *q[3] = { NULL, NULL, NULL };
		double one[3], batch[3];
		float *x, *y;
		size_t i;

		if (d < 1 || d > TQ_MAX_DIM) {
			fprintf(stderr, "bench-rotate: bad dimension\n");
			return 2;
		}
		if (d <= TQ_DENSE_MAX_DIM)
			q[0] = make(d, TQ_ROT_DENSE, 0);
		q[1] = make(d, TQ_ROT_STRUCTURED, 1);
		q[2] = make(d, TQ_ROT_HADAMARD, 0);
		x = malloc((size_t)ROWS * d * sizeof(float));
		y = malloc((size_t)ROWS * d * sizeof(float));
		if (x == NULL || y == NULL)
			return 1;
		srand(1);
		for (i = 0; i < (size_t)ROWS * d; i++)
			x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
		for (k = 0; k < 3; k++)
			one[k] = batch[k] = 1e30;
		for (r = 0; r < REPS; r++)
			for (k = 0; k < 3; k++) {
				double t;

				if (q[k] == NULL)
					continue;
				t = cpu_now();
				for (i = 0; i < 256; i++)
					tq_rotate(q[k], x + i * d, 1, y + i * d);
				t = (cpu_now() - t) / 256;
				one[k] = t < one[k] ? t : one[k];
				t = cpu_now();
				tq_rotate(q[k], x, ROWS, y);
				t = (cpu_now() - t) / ROWS;
				batch[k] = t < batch[k] ? t : batch[k];
			}
		for (k = 0; k < 3; k++)
			if (q[k] != NULL)
				printf("%6u %-9s %9zu %12.2f %10.2f\n",
				    (unsigned)d, name[k], q[k]->rot_len,
				    one[k] * 1e6, batch[k] * 1e6);
		fprintf(stderr, "%s{\"dim\":%u", first ? "" : "\n",
		    (unsigned)d);
		for (k = 0; k < 3; k++)
			if (q[k] != NULL)
				fprintf(stderr, ",\"%s\":{\"bytes\":%zu,"
				    "\"one_us\":%.3f,\"batch_us_per_row\":%.3f}",
				    name[k], q[k]->rot_len, one[k] * 1e6,
				    batch[k] * 1e6);
		fprintf(stderr, "}");
		first = 0;
		for (k = 0; k < 3; k++)
			tq_quantizer_free(q[k]);
		free(x);
		free(y);
	}
	fprintf(stderr, "\n");
	return 0;
}
