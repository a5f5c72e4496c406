/*
 * test_blas.c - the BLAS core choice (a pure mapping from CPU features),
 * k-means seeding and iterations that give the same bytes on any number
 * of threads, and the fit's progress callback.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

/* tq_cpu_features() strings of real machines. */
#define F_ZEN3 "sse4.2 avx avx2 fma f16c bmi2"
#define F_SPR "sse4.2 avx avx2 fma f16c bmi2 avx512f avx512dq avx512cd " \
    "avx512bw avx512vl avx512vbmi avx512vnni amx-int8"
/* Knights Landing: AVX-512 F and CD only, no BW/VL/DQ. */
#define F_KNL "sse4.2 avx avx2 fma f16c bmi2 avx512f avx512cd"

static int
same(const char *a, const char *b)
{
	return a == NULL ? b == NULL : b != NULL && strcmp(a, b) == 0;
}

static void
test_core_for(void)
{
	CHECK(same(tq_blas_core_for(""), NULL));
	CHECK(same(tq_blas_core_for(NULL), NULL));
	CHECK(same(tq_blas_core_for("sse4.2"), "Nehalem"));
	CHECK(same(tq_blas_core_for("sse4.2 avx"), "Sandybridge"));
	CHECK(same(tq_blas_core_for("sse4.2 avx f16c"), "Sandybridge"));
	CHECK(same(tq_blas_core_for(F_ZEN3), "Haswell"));
	CHECK(same(tq_blas_core_for(F_SPR), "SkylakeX"));
	CHECK(same(tq_blas_core_for(F_KNL), "Haswell"));
	/* AVX2 without FMA is not Haswell. */
	CHECK(same(tq_blas_core_for("sse4.2 avx avx2"), "Sandybridge"));
	/* Whole words only: "avx512fp16" is not "avx512f". */
	CHECK(same(tq_blas_core_for("sse4.2 avx avx2 fma avx512fp16 "
	    "avx512dqx avx512cd avx512bw avx512vl"), "Haswell"));
}

static void
test_core_wider(void)
{
	/* The case of the issue: Sapphire Rapids given Prescott. */
	CHECK(same(tq_blas_core_wider(F_SPR, "Prescott"), "SkylakeX"));
	CHECK(same(tq_blas_core_wider(F_SPR, "Haswell"), "SkylakeX"));
	CHECK(same(tq_blas_core_wider(F_SPR, "Sandybridge"), "SkylakeX"));
	CHECK(same(tq_blas_core_wider(F_SPR, "SkylakeX"), NULL));
	CHECK(same(tq_blas_core_wider(F_SPR, "Cooperlake"), NULL));
	CHECK(same(tq_blas_core_wider(F_SPR, "SapphireRapids"), NULL));
	/* An AVX2 machine: Zen and Haswell are as wide as it gets. */
	CHECK(same(tq_blas_core_wider(F_ZEN3, "Zen"), NULL));
	CHECK(same(tq_blas_core_wider(F_ZEN3, "Haswell"), NULL));
	CHECK(same(tq_blas_core_wider(F_ZEN3, "Prescott"), "Haswell"));
	CHECK(same(tq_blas_core_wider(F_ZEN3, "Nehalem"), "Haswell"));
	CHECK(same(tq_blas_core_wider(F_ZEN3, "Core2"), "Haswell"));
	/* Never narrower than what runs, never past what the CPU has. */
	CHECK(same(tq_blas_core_wider("sse4.2", "Haswell"), NULL));
	CHECK(same(tq_blas_core_wider("", "Prescott"), NULL));
	CHECK(same(tq_blas_core_wider(F_KNL, "Prescott"), "Haswell"));
	/* A name it does not know is left alone; so is no name. */
	CHECK(same(tq_blas_core_wider(F_SPR, "Diamondrapids"), NULL));
	CHECK(same(tq_blas_core_wider(F_SPR, NULL), NULL));
}

static void
test_blas_info(void)
{
	struct tq_blas_info bi;

	tq_blas_info(&bi);
	CHECK(bi.library != NULL);
	CHECK(bi.threads >= 0);
	CHECK(same(bi.wider, bi.core == NULL ? NULL :
	    tq_blas_core_wider(tq_cpu_features(), bi.core)));
}

static uint64_t rng = 12345;

static float
gauss(void)
{
	double u, v;

	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	u = ((double)(rng >> 11) + 0.5) * 0x1p-53;
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	v = (double)(rng >> 11) * 0x1p-53;
	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

struct calls {
	unsigned reading, seeding, kmeans, bad;
	uint64_t last_seed;
};

static void
count(void *arg, const char *step, uint64_t done, uint64_t total)
{
	struct calls *c = arg;

	if (strcmp(step, "reading") == 0)
		c->reading++;
	else if (strcmp(step, "seeding") == 0) {
		c->seeding++;
		c->bad += done <= c->last_seed || done > total;
		c->last_seed = done;
	} else if (strcmp(step, "k-means") == 0) {
		c->kmeans++;
		c->bad += done >= total;
	} else
		c->bad++;
}

/*
 * More lists than a seeding batch, on 1, 2 and 3 threads: the same bytes;
 * the seeding reports each batch, the iterations each round.
 */
static void
test_kmeans_threads(void)
{
	const uint32_t dim = 24, k = 150;
	const size_t n = 6000;
	float *x = malloc(n * dim * sizeof(float));
	float *c1 = malloc((size_t)k * dim * sizeof(float));
	float *c2 = malloc((size_t)k * dim * sizeof(float));
	struct calls calls;
	unsigned t;

	for (size_t i = 0; i < n * dim; i++)
		x[i] = gauss() + (float)((i / dim) % 37) * (i % dim == 0);
	for (t = 1; t <= 3; t++) {
		struct tq_kmeans_params kp = { t, count, &calls };

		memset(&calls, 0, sizeof(calls));
		CHECK_OK(tq_kmeans_run(x, n, dim, k, 5, 7, &kp,
		    t == 1 ? c1 : c2));
		if (t > 1)
			CHECK(memcmp(c1, c2, (size_t)k * dim *
			    sizeof(float)) == 0);
		CHECK(calls.seeding >= 3);	/* 1 + 64 + 64 + 21 */
		CHECK(calls.last_seed == k);
		CHECK(calls.kmeans >= 1 && calls.kmeans <= 5);
		CHECK(calls.bad == 0);
	}
	/* The old entry point is the same k-means on one thread. */
	CHECK_OK(tq_kmeans(x, n, dim, k, 5, 7, c2));
	CHECK(memcmp(c1, c2, (size_t)k * dim * sizeof(float)) == 0);
	free(x);
	free(c1);
	free(c2);
}

/* tq_quantizer_fit calls the progress callback for every step. */
static void
test_fit_progress(void)
{
	const uint32_t dim = 16;
	const uint32_t n = 3000;
	const char *path = unit_path("fit.bin");
	struct tq_fit_params p;
	struct tq_quantizer *q1 = NULL, *q2 = NULL;
	struct tq_reader *r;
	struct calls calls;
	FILE *f = fopen(path, "wb");
	uint32_t hdr[2] = { dim, n };

	CHECK(f != NULL);
	if (f == NULL)
		return;
	fwrite(hdr, sizeof(hdr), 1, f);
	for (uint32_t i = 0; i < n * dim; i++) {
		float v = gauss();

		fwrite(&v, sizeof(v), 1, f);
	}
	fclose(f);
	tq_fit_params_default(&p);
	p.lists = 40;
	p.progress = count;
	p.progress_arg = &calls;
	memset(&calls, 0, sizeof(calls));
	CHECK_OK(tq_reader_open(path, NULL, &r));
	CHECK_OK(tq_quantizer_fit(&p, r, &q1));
	tq_reader_close(r);
	CHECK(calls.reading >= 1);
	CHECK(calls.seeding >= 1 && calls.last_seed == 40);
	CHECK(calls.kmeans >= 1);
	CHECK(calls.bad == 0);
	/* Without a callback, on one thread: the same quantizer. */
	p.progress = NULL;
	p.threads = 1;
	CHECK_OK(tq_reader_open(path, NULL, &r));
	CHECK_OK(tq_quantizer_fit(&p, r, &q2));
	tq_reader_close(r);
	CHECK_OK(tq_quantizer_save(q1, unit_path("a.tq")));
	CHECK_OK(tq_quantizer_save(q2, unit_path("b.tq")));
	{
		FILE *a = fopen(unit_path("a.tq"), "rb");
		FILE *b = fopen(unit_path("b.tq"), "rb");
		int ca, cb, eq = a != NULL && b != NULL;

		while (eq && (ca = getc(a)) != EOF) {
			cb = getc(b);
			eq = ca == cb;
		}
		eq = eq && getc(b) == EOF;
		CHECK(eq);
		if (a != NULL)
			fclose(a);
		if (b != NULL)
			fclose(b);
	}
	tq_quantizer_free(q1);
	tq_quantizer_free(q2);
}

int
main(void)
{
	RUN(test_core_for);
	RUN(test_core_wider);
	RUN(test_blas_info);
	RUN(test_kmeans_threads);
	RUN(test_fit_progress);
	return unit_done();
}
