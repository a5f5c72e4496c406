/*
 * test_threads.c - an open tq_index is read-only and may be searched from
 * any number of threads at once (tq.h): 8 threads search one index
 * concurrently, repeatedly, and every result must equal, bit for bit, the
 * serial search made before the threads started.  Both the plain scan and
 * the exact re-rank from the originals are exercised, each search itself
 * single-threaded or using the library's own threads.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>

#include "unit.h"

#define NTHREADS 8
#define NQ 24
#define K 10

static uint32_t dim = 32;
static uint32_t nrows = 4000;
static int rounds = 20;

struct run {
	const struct tq_index *ix;
	const float *queries;
	struct tq_search_params sp[2];
	const uint64_t *want_ids[2];
	const float *want_scores[2];
	int mismatches;
	int failures;
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float
gauss(void)
{
	double u1, u2;

	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	u1 = ((rng >> 11) + 1.0) / 9007199254740993.0;
	rng = rng * 6364136223846793005ull + 1442695040888963407ull;
	u2 = (rng >> 11) / 9007199254740992.0;
	return (float)(sqrt(-2 * log(u1)) * cos(2 * M_PI * u2));
}

/* A fixture file: u32 dim, u32 n, n*dim float32 (little-endian host). */
static int
write_fixture(const char *path, uint32_t d, uint32_t n)
{
	FILE *fp = fopen(path, "wb");
	uint64_t i;
	float x;

	if (fp == NULL)
		return -1;
	fwrite(&d, 4, 1, fp);
	fwrite(&n, 4, 1, fp);
	for (i = 0; i < (uint64_t)d * n; i++) {
		x = gauss() + (float)(i / d % 5);	/* a little structure */
		fwrite(&x, 4, 1, fp);
	}
	return fclose(fp);
}

static void *
worker(void *arg)
{
	struct run *r = arg;
	uint64_t ids[NQ * K];
	float scores[NQ * K];
	int i, s;

	for (i = 0; i < rounds; i++) {
		for (s = 0; s < 2; s++) {
			if (tq_search(r->ix, r->queries, NQ, &r->sp[s], ids,
			    scores) != TQ_OK) {
				__atomic_add_fetch(&r->failures, 1,
				    __ATOMIC_RELAXED);
				continue;
			}
			if (memcmp(ids, r->want_ids[s], sizeof(ids)) != 0 ||
			    memcmp(scores, r->want_scores[s],
			    sizeof(scores)) != 0)
				__atomic_add_fetch(&r->mismatches, 1,
				    __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static void
concurrent(unsigned lib_threads)
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *q = NULL;
	struct tq_reader *r = NULL;
	struct tq_index *ix = NULL;
	static uint64_t ids[2][NQ * K];
	static float scores[2][NQ * K];
	pthread_t th[NTHREADS];
	struct run run;
	float *queries;
	const char *corpus = unit_path("corpus.bin");
	const char *index = unit_path("threads.tqi");
	int t, s;

	CHECK(write_fixture(corpus, dim, nrows) == 0);
	tq_fit_params_default(&fp);
	CHECK_OK(tq_reader_open(corpus, NULL, &r));
	CHECK_OK(tq_quantizer_fit(&fp, r, &q));
	tq_reader_close(r);
	r = NULL;
	tq_build_params_default(&bp);
	bp.originals = TQ_ORIG_F32;
	CHECK_OK(tq_reader_open(corpus, NULL, &r));
	CHECK_OK(tq_build(q, r, NULL, &bp, index));
	tq_reader_close(r);
	CHECK_OK(tq_index_open(index, &ix));
	if (ix == NULL) {
		tq_quantizer_free(q);
		return;
	}

	queries = malloc(NQ * dim * sizeof(float));
	CHECK(queries != NULL);
	for (t = 0; t < (int)(NQ * dim); t++)
		queries[t] = gauss();

	memset(&run, 0, sizeof(run));
	run.ix = ix;
	run.queries = queries;
	for (s = 0; s < 2; s++) {
		tq_search_params_default(&run.sp[s]);
		run.sp[s].k = K;
		run.sp[s].threads = lib_threads;
		run.sp[s].oversample = s == 0 ? 1.0f : 4.0f;
		/* The serial reference. */
		CHECK_OK(tq_search(ix, queries, NQ, &run.sp[s], ids[s],
		    scores[s]));
		run.want_ids[s] = ids[s];
		run.want_scores[s] = scores[s];
	}
	/* The reference is a real result: distinct valid ids. */
	CHECK(ids[0][0] < nrows && ids[0][1] < nrows && ids[0][0] != ids[0][1]);

	for (t = 0; t < NTHREADS; t++)
		CHECK(pthread_create(&th[t], NULL, worker, &run) == 0);
	for (t = 0; t < NTHREADS; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK(run.failures == 0);
	CHECK(run.mismatches == 0);
	if (run.mismatches != 0)
		fprintf(stderr, "%d of %d concurrent searches (library "
		    "threads %u) differ from the serial one\n",
		    run.mismatches, NTHREADS * rounds * 2, lib_threads);

	free(queries);
	tq_index_close(ix);
	tq_quantizer_free(q);
}

static void
test_concurrent_single(void)
{
	concurrent(1);
}

static void
test_concurrent_multi(void)
{
	concurrent(2);
}

int
main(void)
{
	const char *quick = getenv("TQ_TEST_QUICK");

	/* TQ_TEST_QUICK=1 (valgrind): fewer rows and rounds. */
	if (quick != NULL && strcmp(quick, "1") == 0) {
		nrows = 600;
		rounds = 1;
	}
	RUN(test_concurrent_single);
	RUN(test_concurrent_multi);
	return unit_done();
}
