/*
 * tq_bench.c - in-process timing of tq_search for scripts/bench (not a test).
 *
 * Built by scripts/bench into $TQ_BENCH_DIR/bin:
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib bench/tq_bench.c build/lib/libtq.a \
 *      $(pkg-config --libs openblas lapacke libzstd libxxhash) -ldl -lm -pthread
 *
 *   tq_bench INDEX QUERIES [-k K] [-t THREADS] [-b NBATCH] [-s NSINGLE]
 *            [-w NWARM] [-o IDS.u64] [-p PROBES] [-f OVERSAMPLE]
 *
 * Prints one JSON object:
 *   open_s        tq_index_open wall time (a memory map: no work per vector)
 *   first_s       the first single query after the open (pages faulted in)
 *   batch_s       one tq_search call over the first NBATCH queries, after
 *                 NWARM single queries of warm-up; batch_qps = NBATCH/batch_s
 *   single_*      NSINGLE single-query tq_search calls (queries taken after
 *                 the batch ones, wrapping): p50/p95/p99/mean in seconds
 *   batch_cpu_s, single_cpu_p50_s, single_cpu_mean_s   the same as CPU
 *                 time of the whole process (user + system, every thread),
 *                 which a busy shared machine inflates less than wall time
 *   maxrss_kb     peak RSS of this process
 *   rss_anon_kb, rss_file_kb   resident memory at the end, anonymous and
 *                 file-backed (the mapped index pages touched)
 * Other times are CLOCK_MONOTONIC wall times.  The BLAS runs on one thread,
 * as in the programs, unless OPENBLAS_NUM_THREADS (or GOTO_NUM_THREADS,
 * OMP_NUM_THREADS) says otherwise: without them the program runs itself
 * again with OPENBLAS_NUM_THREADS=1.  With -o the ids of the batch
 * (NBATCH x K, u64 LE) are written for the recall computation.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "tq.h"

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double
cpu(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int
cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
pct(const double *s, size_t n, double p)
{
	size_t i = (size_t)(p * (double)(n - 1) + 0.5);

	return s[i < n ? i : n - 1];
}

static void
die(const char *what, enum tq_status st)
{
	fprintf(stderr, "tq_bench: %s: %s: %s\n", what, tq_strerror(st),
	    tq_errdetail());
	exit(1);
}

int
main(int argc, char **argv)
{
	const char *ixpath, *qpath, *out = NULL;
	unsigned k = 10, threads = 1, probes = 0;
	float oversample = 1;
	long anon = -1, file = -1;
	char line[256];
	FILE *status;
	size_t nbatch = 1000, nsingle = 200, nwarm = 5;
	struct tq_index *ix;
	struct tq_search_params sp;
	enum tq_status st;
	float *q, *scores;
	uint64_t *ids;
	uint32_t dim;
	size_t nq, i;
	double t0, c0, t_open, t_first, t_batch, c_batch, *lat, *clat;
	double sum = 0, csum = 0;
	struct rusage ru;
	int a;

	if (argc < 3) {
		fprintf(stderr, "usage: tq_bench INDEX QUERIES [-k K] [-t T] "
		    "[-b NBATCH] [-s NSINGLE] [-w NWARM] [-o IDS]\n");
		return 2;
	}
	/*
	 * The BLAS on one thread, as in the programs (cmd_init): tq runs its
	 * products on its own threads.  Set in the environment, by running
	 * this program again, because OpenBLAS starts its threads before
	 * main, and each spins (sched_yield) for about 0.1 s before it
	 * sleeps: the CPU clock of a short run counted a second core (seen:
	 * bench-ivf's single-query CPU p50 twice the wall p50 at few probes,
	 * batch CPU 1.3-2x the wall, with openblas_set_num_threads(1)
	 * alone).
	 */
	if (getenv("OPENBLAS_NUM_THREADS") == NULL &&
	    getenv("GOTO_NUM_THREADS") == NULL &&
	    getenv("OMP_NUM_THREADS") == NULL &&
	    setenv("OPENBLAS_NUM_THREADS", "1", 1) == 0) {
		execv("/proc/self/exe", argv);
		tq_blas_set_threads(1);	/* no re-run: the next best */
	}
	ixpath = argv[1];
	qpath = argv[2];
	for (a = 3; a + 1 < argc; a += 2) {
		const char *v = argv[a + 1];

		if (!strcmp(argv[a], "-k")) k = (unsigned)atoi(v);
		else if (!strcmp(argv[a], "-t")) threads = (unsigned)atoi(v);
		else if (!strcmp(argv[a], "-b")) nbatch = (size_t)atol(v);
		else if (!strcmp(argv[a], "-s")) nsingle = (size_t)atol(v);
		else if (!strcmp(argv[a], "-w")) nwarm = (size_t)atol(v);
		else if (!strcmp(argv[a], "-o")) out = v;
		else if (!strcmp(argv[a], "-p")) probes = (unsigned)atoi(v);
		else if (!strcmp(argv[a], "-f")) oversample = (float)atof(v);
		else { fprintf(stderr, "tq_bench: bad option %s\n", argv[a]); return 2; }
	}
	if ((st = tq_read_all(qpath, NULL, &q, &dim, &nq)) != TQ_OK)
		die(qpath, st);
	if (nbatch > nq)
		nbatch = nq;

	t0 = now();
	if ((st = tq_index_open(ixpath, &ix)) != TQ_OK)
		die(ixpath, st);
	t_open = now() - t0;

	tq_search_params_default(&sp);
	sp.k = k;
	sp.threads = threads;
	sp.oversample = oversample;
	sp.probes = probes;
	ids = malloc(sizeof(*ids) * k * (nbatch > 1 ? nbatch : 1));
	scores = malloc(sizeof(*scores) * k * (nbatch > 1 ? nbatch : 1));
	lat = malloc(sizeof(*lat) * (nsingle ? nsingle : 1));
	clat = malloc(sizeof(*clat) * (nsingle ? nsingle : 1));
	if (!ids || !scores || !lat || !clat)
		return 1;

	t0 = now();
	if ((st = tq_search(ix, q, 1, &sp, ids, scores)) != TQ_OK)
		die("search", st);
	t_first = now() - t0;

	for (i = 0; i < nwarm; i++)
		if ((st = tq_search(ix, q + (i % nq) * dim, 1, &sp, ids,
		    scores)) != TQ_OK)
			die("search", st);

	t_batch = c_batch = 0;
	if (nbatch) {
		c0 = cpu();
		t0 = now();
		if ((st = tq_search(ix, q, nbatch, &sp, ids, scores)) != TQ_OK)
			die("search", st);
		t_batch = now() - t0;
		c_batch = cpu() - c0;
		if (out) {
			FILE *f = fopen(out, "wb");

			if (!f || fwrite(ids, sizeof(*ids), nbatch * k, f) !=
			    nbatch * k || fclose(f)) {
				perror(out);
				return 1;
			}
		}
	}

	for (i = 0; i < nsingle; i++) {
		size_t r = (nbatch + i) % nq;

		c0 = cpu();
		t0 = now();
		if ((st = tq_search(ix, q + r * dim, 1, &sp, ids, scores)) != TQ_OK)
			die("search", st);
		lat[i] = now() - t0;
		clat[i] = cpu() - c0;
		sum += lat[i];
		csum += clat[i];
	}
	qsort(lat, nsingle, sizeof(*lat), cmpd);
	qsort(clat, nsingle, sizeof(*clat), cmpd);
	getrusage(RUSAGE_SELF, &ru);
	if ((status = fopen("/proc/self/status", "r")) != NULL) {
		while (fgets(line, sizeof(line), status) != NULL) {
			sscanf(line, "RssAnon: %ld", &anon);
			sscanf(line, "RssFile: %ld", &file);
		}
		fclose(status);
	}

	printf("{\"n\":%llu,\"dim\":%u,\"threads\":%u,\"k\":%u,"
	    "\"open_s\":%.9f,\"first_s\":%.9f,\"nbatch\":%zu,\"batch_s\":%.9f,"
	    "\"batch_qps\":%.3f,\"batch_cpu_s\":%.9f,\"nsingle\":%zu",
	    (unsigned long long)tq_index_count(ix), dim, threads, k, t_open,
	    t_first, nbatch, t_batch, t_batch > 0 ? (double)nbatch / t_batch : 0,
	    c_batch, nsingle);
	if (nsingle)
		printf(",\"single_p50_s\":%.9f,\"single_p95_s\":%.9f,"
		    "\"single_p99_s\":%.9f,\"single_mean_s\":%.9f",
		    pct(lat, nsingle, .5), pct(lat, nsingle, .95),
		    pct(lat, nsingle, .99), sum / (double)nsingle);
	if (nsingle)
		printf(",\"single_cpu_p50_s\":%.9f,\"single_cpu_mean_s\":%.9f",
		    pct(clat, nsingle, .5), csum / (double)nsingle);
	printf(",\"probes\":%u,\"oversample\":%g,\"maxrss_kb\":%ld,"
	    "\"rss_anon_kb\":%ld,\"rss_file_kb\":%ld}\n", probes,
	    (double)oversample, ru.ru_maxrss, anon, file);
	tq_index_close(ix);
	free(q);
	free(ids);
	free(scores);
	free(lat);
	free(clat);
	return 0;
}
