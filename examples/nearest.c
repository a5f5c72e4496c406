/*
 * nearest - an example program of libtq, using only <tq.h>.
 *
 *	nearest [vectors]
 *
 * Fits a 4-bit quantizer to the vectors of the file given (any format
 * tq-build reads), or to 1000 random vectors of dimension 16 made here,
 * builds an index of them in a temporary directory, searches it with the
 * first three vectors as queries, and prints the five nearest of each,
 * re-ranked exactly, one "query<TAB>rank<TAB>id<TAB>score" line each.  A
 * query's nearest vector is itself, at distance 0.
 *
 * Build it against an installed libtq with pkg-config:
 *
 *	cc -o nearest nearest.c $(pkg-config --cflags --libs libtq)
 *
 * or, to link libtq.a rather than libtq.so (-l:libtq.a asks the linker
 * for that file by name; the libraries libtq needs come after it):
 *
 *	cc -o nearest nearest.c $(pkg-config --cflags libtq) \
 *	    $(pkg-config --static --libs libtq | sed 's/-ltq /-l:libtq.a /')
 *
 * The vectors must be a file, not standard input: they are read twice,
 * to fit the quantizer and to build the index.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <tq.h>

#define DIM	16
#define ROWS	1000
#define QUERIES	3
#define K	5

static char dir[4096];		/* the temporary directory, "" if none */
static char corpus[4200], index_path[4200];

/* Prints why a library call failed: its detail, else errno or the status. */
static int
fail(const char *what, enum tq_status st)
{
	const char *d = tq_errdetail();

	if (d == NULL || d[0] == '\0')
		d = st == TQ_ERR_IO && errno != 0 ? strerror(errno) :
		    tq_strerror(st);
	fprintf(stderr, "nearest: %s: %s\n", what, d);
	return 1;
}

/* Writes ROWS pseudo-random vectors (a fixed seed: the same every run). */
static enum tq_status
make_corpus(const char *path)
{
	struct tq_writer *w;
	enum tq_status st;
	uint64_t s = 0x9e3779b97f4a7c15u;
	float row[DIM];
	int i, j;

	if ((st = tq_writer_open(path, TQ_VEC_FVECS, DIM, ROWS, &w)) != TQ_OK)
		return st;
	for (i = 0; i < ROWS; i++) {
		for (j = 0; j < DIM; j++) {
			s = s * 6364136223846793005u + 1442695040888963407u;
			row[j] = (float)(s >> 40) / (float)(1u << 24) - 0.5f;
		}
		if ((st = tq_writer_write(w, row, 1)) != TQ_OK) {
			tq_writer_abort(w);
			return st;
		}
	}
	return tq_writer_commit(w);
}

/* Fits the quantizer to the corpus and builds the index. */
static int
build(const char *vectors)
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *q = NULL;
	struct tq_reader *r = NULL;
	enum tq_status st;

	tq_fit_params_default(&fp);
	if ((st = tq_reader_open(vectors, NULL, &r)) != TQ_OK)
		return fail(vectors, st);
	st = tq_quantizer_fit(&fp, r, &q);
	tq_reader_close(r);
	if (st != TQ_OK)
		return fail(vectors, st);

	/* The fit read the corpus; the build reads it again from the start. */
	tq_build_params_default(&bp);
	if ((st = tq_reader_open(vectors, NULL, &r)) != TQ_OK) {
		tq_quantizer_free(q);
		return fail(vectors, st);
	}
	st = tq_build(q, r, NULL, &bp, index_path);
	tq_reader_close(r);
	tq_quantizer_free(q);
	if (st != TQ_OK)
		return fail(index_path, st);
	return 0;
}

static int
search(const char *vectors)
{
	struct tq_search_params sp;
	struct tq_index *ix;
	enum tq_status st;
	uint64_t *ids = NULL;
	float *x = NULL, *scores = NULL;
	uint32_t dim;
	size_t n, nq, i;
	int rc = 1;

	if ((st = tq_index_open(index_path, &ix)) != TQ_OK)
		return fail(index_path, st);
	/* The queries are the first vectors of the corpus. */
	if ((st = tq_read_all(vectors, NULL, &x, &dim, &n)) != TQ_OK) {
		fail(vectors, st);
		goto out;
	}
	nq = n < QUERIES ? n : QUERIES;
	tq_search_params_default(&sp);
	sp.k = tq_index_live(ix) < K ? (uint32_t)tq_index_live(ix) : K;
	sp.oversample = 4;	/* re-rank 4k candidates by their exact score */
	ids = calloc(nq * sp.k, sizeof(*ids));
	scores = calloc(nq * sp.k, sizeof(*scores));
	if (ids == NULL || scores == NULL) {
		fprintf(stderr, "nearest: out of memory\n");
		goto out;
	}
	if ((st = tq_search(ix, x, nq, &sp, ids, scores)) != TQ_OK) {
		fail(index_path, st);
		goto out;
	}
	for (i = 0; i < nq * sp.k; i++)
		printf("%zu\t%zu\t%llu\t%.4f\n", i / sp.k, i % sp.k + 1,
		    (unsigned long long)ids[i], scores[i]);
	if (fflush(stdout) == EOF || ferror(stdout)) {
		fprintf(stderr, "nearest: stdout: %s\n", strerror(errno));
		goto out;
	}
	rc = 0;
out:
	free(ids);
	free(scores);
	free(x);
	tq_index_close(ix);
	return rc;
}

int
main(int argc, char *argv[])
{
	const char *tmp = getenv("TMPDIR"), *vectors;
	enum tq_status st;
	int rc;

	if (argc > 2) {
		fprintf(stderr, "usage: nearest [vectors]\n");
		return 2;
	}
	if (tmp == NULL || tmp[0] == '\0')
		tmp = "/tmp";
	if ((size_t)snprintf(dir, sizeof(dir), "%s/nearest.XXXXXX", tmp) >=
	    sizeof(dir) || mkdtemp(dir) == NULL) {
		fprintf(stderr, "nearest: %s: %s\n", tmp, strerror(errno));
		return 1;
	}
	snprintf(corpus, sizeof(corpus), "%s/corpus.fvecs", dir);
	snprintf(index_path, sizeof(index_path), "%s/index.tqi", dir);

	if (argc == 2) {
		vectors = argv[1];
	} else {
		vectors = corpus;
		if ((st = make_corpus(corpus)) != TQ_OK) {
			rmdir(dir);
			return fail(corpus, st);
		}
	}
	rc = build(vectors);
	if (rc == 0)
		rc = search(vectors);

	unlink(index_path);
	unlink(corpus);
	if (rmdir(dir) == -1) {
		fprintf(stderr, "nearest: %s: %s\n", dir, strerror(errno));
		rc = 1;
	}
	return rc;
}
