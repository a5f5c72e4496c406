/*
 * exact.c - exact top-k by brute force, for ground truth and comparisons.
 *
 * The corpus is streamed in chunks of rows; for blocks of queries, sgemm
 * gives every <q, x> of the chunk.  Those float products only filter: a
 * row whose sgemm key, widened by a bound on its rounding error, cannot
 * reach the query's current k-th key is skipped, and every other row gets
 * its key recomputed in double from the vectors themselves (the same sums
 * as the re-rank in search.c).  So the result is the exact top-k of the
 * double keys rounded to float, ties broken by the smaller row, whatever
 * BLAS, the blocking or the thread count.  On integer data (pixels) the
 * double sums are exact, so the ties in the tail are real ties.
 *
 * The bound: a float dot product of length d computed in any order, with
 * or without fused multiply-adds, is within d * 2^-24 / (1 - d * 2^-24) of
 * sum |q_i x_i| <= |q| |x|; (d + 2) * 2^-23 covers it with room to spare.
 *
 * On a CPU with AVX512_BF16 (tq_bf16_kernel) and 64 queries or more, the
 * filter is the IVF list filter's bf16 product instead, with the same
 * kind of bound (ivf.c, above struct bfbound): with q~ and x~ rounded to
 * bf16,
 * |<q, x> - <q~, x~>_float| <= |q~| |x - x~| (1 + gb) + (|q - q~| +
 * gb |q~|) |x| + the flushed subnormals, gb = d 2^-23 / (1 - d 2^-23).
 * Rows and queries of norm 2^60 or more keep sgemm.  A few more rows are
 * re-checked; the result is the same.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define CHUNK_ROWS 4096
#define QBLOCK 256
/* Queries below this take sgemm: the chunk's bf16 copy would not pay. */
#define BF16_MIN_QUERIES 64

struct ectx {
	enum tq_metric m;
	uint32_t dim;
	double gamma;		/* relative error bound of a float dot */
	const float *qv;	/* queries, normalised for cosine */
	const double *qn2;	/* |q|^2 */
	const double *qnorm;	/* |q| */
	struct tq_topk *heaps;	/* one per query */
	/* The current chunk. */
	const float *x;		/* rows * dim, normalised for cosine */
	const double *xn2;
	const double *xnorm;
	size_t rows;
	uint64_t row0;
	const uint64_t *rowid;	/* the chunk's row ids, or NULL: row0 + r */
	/*
	 * The bf16 filter (NULL: sgemm): queries in bf16 rows of k2 words
	 * (padded with TQ_BF16_ROWS zero rows), |q~| and |q - q~|; the
	 * chunk in its blocks of 16 rows (rows64 of them, padded), and
	 * |x - x~| a row.  bf says whether this chunk takes it.
	 */
	const struct tq_bf16_kernel *bk;
	const uint32_t *qb;
	const double *qrn, *qdn;
	size_t k2;
	const void *xb;
	const double *xdn;
	uint32_t rows64;
	int bf;
	double gb;
};

struct eworker {
	const struct ectx *c;
	pthread_t tid;
	int started;
	size_t q0, q1;		/* queries [q0, q1) */
	float *prod;		/* QBLOCK * CHUNK_ROWS */
};

/*
 * The sums of tq_dot_lanes and tq_exact_key: coordinate d goes to lane
 * d % 8, the lanes are added pairwise at the end.  Eight independent
 * double chains instead of one: a single chain took four cycles (an add's
 * latency) per coordinate, and the lanes are what a vector unit holds, so
 * a compiler may run each lane in its own slot without changing a bit.
 */
static double
reduce8(const double s[8])
{
	return ((s[0] + s[1]) + (s[2] + s[3])) +
	    ((s[4] + s[5]) + (s[6] + s[7]));
}

/*
 * sum over d of a[d] * b[d], or with l2 of (a[d] - b[d])^2, in the lanes
 * of reduce8; inlined with l2 constant.
 */
static inline __attribute__((always_inline)) double
lanes(const float *a, const float *b, uint32_t dim, int l2)
{
	double s[8] = { 0 };
	uint32_t d = 0, l;

#if defined(__SSE2__)
	/* Lanes 0-1, 2-3, 4-5, 6-7 in four registers: the same operations. */
	__m128d acc[4] = { _mm_setzero_pd(), _mm_setzero_pd(),
	    _mm_setzero_pd(), _mm_setzero_pd() };

	for (; d + 8 <= dim; d += 8) {
		__m128 a0 = _mm_loadu_ps(a + d), a1 = _mm_loadu_ps(a + d + 4);
		__m128 b0 = _mm_loadu_ps(b + d), b1 = _mm_loadu_ps(b + d + 4);
		__m128d x[4] = { _mm_cvtps_pd(a0),
		    _mm_cvtps_pd(_mm_movehl_ps(a0, a0)), _mm_cvtps_pd(a1),
		    _mm_cvtps_pd(_mm_movehl_ps(a1, a1)) };
		__m128d y[4] = { _mm_cvtps_pd(b0),
		    _mm_cvtps_pd(_mm_movehl_ps(b0, b0)), _mm_cvtps_pd(b1),
		    _mm_cvtps_pd(_mm_movehl_ps(b1, b1)) };

		for (l = 0; l < 4; l++) {
			__m128d e = l2 ? _mm_sub_pd(x[l], y[l]) : x[l];

			acc[l] = _mm_add_pd(acc[l], _mm_mul_pd(e, l2 ? e :
			    y[l]));
		}
	}
	for (l = 0; l < 4; l++)
		_mm_storeu_pd(s + 2 * l, acc[l]);
#endif
	/* The rest (all of it without SSE2), coordinate d in lane d % 8. */
	for (; d < dim; d++) {
		double e = (double)a[d] - (double)b[d];

		s[d % 8] += l2 ? e * e : (double)a[d] * (double)b[d];
	}
	return reduce8(s);
}

double
tq_dot_lanes(const float *a, const float *b, uint32_t dim)
{
	return lanes(a, b, dim, 0);
}

float
tq_exact_key(enum tq_metric m, const float *qv, const float *x, uint32_t dim)
{
	if (m == TQ_METRIC_L2)
		return (float)-lanes(qv, x, dim, 1);
	return (float)lanes(qv, x, dim, 0);
}

static void *
erun(void *arg)
{
	struct eworker *w = arg;
	const struct ectx *c = w->c;
	size_t dim = c->dim, rows = c->rows, b, i, r;
	int l2 = c->m == TQ_METRIC_L2;

	for (b = w->q0; b < w->q1; b += QBLOCK) {
		size_t mb = w->q1 - b < QBLOCK ? w->q1 - b : QBLOCK, lds = rows;

		if (c->bf) {
			/* Rows past mb (the next block's, or padding) too. */
			lds = c->rows64;
			c->bk->gemm(c->qb + b * c->k2, (mb + TQ_BF16_ROWS - 1) /
			    TQ_BF16_ROWS * TQ_BF16_ROWS, c->xb, c->rows64,
			    (uint32_t)c->k2, w->prod, lds);
		} else {
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)mb, (int)rows, (int)dim, 1.0f, c->qv + b * dim,
			    (int)dim, c->x, (int)dim, 0.0f, w->prod, (int)rows);
		}
		for (i = 0; i < mb; i++) {
			struct tq_topk *h = &c->heaps[b + i];
			const float *pr = w->prod + i * lds;
			const float *qv = c->qv + (b + i) * dim;
			double qn2 = c->qn2[b + i], s2 = l2 ? 2.0 : 1.0;
			double qerr = c->gamma * c->qnorm[b + i] * s2;
			/* bf16: err = ea |x - x~| + eb |x| + abs */
			double ea = 0.0, eb = 0.0;

			if (c->bf) {
				double rn = c->qrn[b + i], dn = c->qdn[b + i];

				ea = s2 * rn * (1.0 + c->gb) * (1.0 + 0x1p-20);
				eb = s2 * (dn + c->gb * rn) * (1.0 + 0x1p-20);
				qerr = s2 * 0x1p-120 * (double)dim;
			}
			for (r = 0; r < rows; r++) {
				double dot = pr[r], key;

				if (h->len == h->k) {
					double root = h->key[0], err;

					err = c->bf ? ea * c->xdn[r] + eb *
					    c->xnorm[r] + qerr : qerr *
					    c->xnorm[r];
					key = l2 ? -(qn2 - 2.0 * dot +
					    c->xn2[r]) : dot;
					if (key + err + fabs(root) * 0x1p-22 +
					    0x1p-100 < root)
						continue;
				}
				tq_topk_push(h, tq_exact_key(c->m, qv,
				    c->x + r * dim, c->dim), c->rowid != NULL ?
				    c->rowid[r] : c->row0 + r);
			}
		}
	}
	return NULL;
}

static double
norm2(const float *x, uint32_t dim)
{
	double s = 0.0;
	uint32_t d;

	for (d = 0; d < dim; d++)
		s += (double)x[d] * (double)x[d];
	return s;
}

struct eres {
	float *qv, *x, *prod;
	double *qn2, *qnorm, *xn2, *xnorm;
	struct tq_topk *heaps;
	struct eworker *w;
	size_t nq;
	unsigned nw;
	/* The bf16 filter's (ectx): NULL without it. */
	uint32_t *qb, *xrow;
	void *xb;
	double *qrn, *qdn, *xdn;
};

static void
eres_free(struct eres *e)
{
	size_t i;

	if (e->heaps != NULL)
		for (i = 0; i < e->nq; i++)
			tq_topk_free(&e->heaps[i]);
	if (e->w != NULL)
		for (i = 0; i < e->nw; i++)
			free(e->w[i].prod);
	free(e->heaps);
	free(e->w);
	free(e->qv);
	free(e->x);
	free(e->qn2);
	free(e->qnorm);
	free(e->xn2);
	free(e->xnorm);
	free(e->qb);
	free(e->xrow);
	free(e->xb);
	free(e->qrn);
	free(e->qdn);
	free(e->xdn);
}

/*
 * The bf16 filter's buffers; 0 without the memory (sgemm filters then,
 * and eres_free frees what was allocated).
 */
static int
eres_alloc_bf16(struct eres *e, size_t nq, uint32_t dim)
{
	size_t k2 = ((size_t)dim + 1) / 2;

	e->qb = tq_callocarray((nq + TQ_BF16_ROWS) * k2, sizeof(uint32_t));
	e->xrow = tq_mallocarray(k2, sizeof(uint32_t));
	e->qrn = tq_mallocarray(nq, sizeof(double));
	e->qdn = tq_mallocarray(nq, sizeof(double));
	e->xdn = tq_mallocarray(CHUNK_ROWS, sizeof(double));
	if (posix_memalign(&e->xb, 64, (size_t)CHUNK_ROWS * k2 *
	    sizeof(uint32_t)) != 0)
		e->xb = NULL;
	return e->qb != NULL && e->xrow != NULL && e->qrn != NULL &&
	    e->qdn != NULL && e->xdn != NULL && e->xb != NULL;
}

static enum tq_status
eres_alloc(struct eres *e, size_t nq, uint32_t dim, uint32_t k, unsigned nw)
{
	size_t i;

	memset(e, 0, sizeof(*e));
	e->nq = nq;
	e->nw = nw;
	e->qv = tq_mallocarray(nq * dim, sizeof(float));
	e->qn2 = tq_mallocarray(nq, sizeof(double));
	e->qnorm = tq_mallocarray(nq, sizeof(double));
	e->x = tq_mallocarray((size_t)CHUNK_ROWS * dim, sizeof(float));
	e->xn2 = tq_mallocarray(CHUNK_ROWS, sizeof(double));
	e->xnorm = tq_mallocarray(CHUNK_ROWS, sizeof(double));
	e->heaps = tq_callocarray(nq, sizeof(*e->heaps));
	e->w = tq_callocarray(nw, sizeof(*e->w));
	if (e->qv == NULL || e->qn2 == NULL || e->qnorm == NULL ||
	    e->x == NULL || e->xn2 == NULL || e->xnorm == NULL ||
	    e->heaps == NULL || e->w == NULL)
		return tq_fail(TQ_ERR_NOMEM, "exact search buffers");
	for (i = 0; i < nq; i++)
		TQ_TRY(tq_topk_init(&e->heaps[i], k));
	/* The bf16 filter scores up to TQ_BF16_ROWS - 1 rows more. */
	for (i = 0; i < nw; i++) {
		e->w[i].prod = tq_mallocarray((size_t)(QBLOCK + TQ_BF16_ROWS) *
		    CHUNK_ROWS, sizeof(float));
		if (e->w[i].prod == NULL)
			return tq_fail(TQ_ERR_NOMEM, "exact search buffers");
	}
	return TQ_OK;
}

/* The rows of a reader, numbered in order. */
static enum tq_status
reader_next(void *arg, float *x, size_t max, size_t *got,
    const uint64_t **rowid)
{
	*rowid = NULL;
	return tq_reader_read(arg, x, max, got);
}

/*
 * The chunk's rows for the bf16 filter, in blocks of 16 rows as
 * near_bf16.c reads them (the rows are its "lists"), padded with zero
 * rows to a multiple of TQ_BF16_LISTS; |x - x~| into xdn.
 */
static void
chunk_bf16(struct eres *e, struct ectx *c)
{
	size_t r;
	double rn;

	c->rows64 = (uint32_t)((c->rows + TQ_BF16_LISTS - 1) / TQ_BF16_LISTS *
	    TQ_BF16_LISTS);
	for (r = 0; r < c->rows64; r++) {
		if (r < c->rows)
			c->bk->row(e->x + r * c->dim, c->dim, e->xrow, &rn,
			    &e->xdn[r]);
		tq_bf16_place(e->xb, (uint32_t)c->k2, r, r < c->rows ?
		    e->xrow : NULL);
	}
}

static enum tq_status
exact_run(struct eres *e, tq_exact_next_fn next, void *arg, struct ectx *c,
    const float *queries)
{
	uint32_t dim = c->dim;
	size_t i, got;
	unsigned t;

	for (i = 0; i < e->nq; i++) {
		const float *q = queries + i * dim;

		if (c->m == TQ_METRIC_COSINE)
			tq_normalise(q, dim, e->qv + i * dim);
		else
			memcpy(e->qv + i * dim, q, dim * sizeof(float));
		e->qn2[i] = norm2(e->qv + i * dim, dim);
		e->qnorm[i] = sqrt(e->qn2[i]);
		if (c->bk != NULL && !(e->qnorm[i] < TQ_BF16_MAX_NORM))
			c->bk = NULL;
	}
	for (i = 0; c->bk != NULL && i < e->nq; i++)
		c->bk->row(e->qv + i * dim, dim, e->qb + i * c->k2, &e->qrn[i],
		    &e->qdn[i]);
	for (t = 0; t < e->nw; t++) {
		e->w[t].c = c;
		e->w[t].q0 = e->nq * t / e->nw;
		e->w[t].q1 = e->nq * (t + 1) / e->nw;
	}
	for (;;) {
		TQ_TRY(next(arg, e->x, CHUNK_ROWS, &got, &c->rowid));
		if (got == 0)
			break;
		c->bf = c->bk != NULL;
		for (i = 0; i < got; i++) {
			float *x = e->x + i * dim;

			if (c->m == TQ_METRIC_COSINE)
				tq_normalise(x, dim, x);
			e->xn2[i] = norm2(x, dim);
			TQ_TRY(tq_norm_check(c->m, e->xn2[i], "row",
			    c->row0 + i));
			e->xnorm[i] = sqrt(e->xn2[i]);
			/* Also false for NaN. */
			c->bf = c->bf && e->xnorm[i] < TQ_BF16_MAX_NORM;
		}
		c->rows = got;
		if (c->bf)
			chunk_bf16(e, c);
		/* Workers 1.. in threads; a failed create runs inline. */
		for (t = 1; t < e->nw; t++)
			e->w[t].started = pthread_create(&e->w[t].tid, NULL,
			    erun, &e->w[t]) == 0;
		erun(&e->w[0]);
		for (t = 1; t < e->nw; t++) {
			if (e->w[t].started)
				pthread_join(e->w[t].tid, NULL);
			else
				erun(&e->w[t]);
		}
		c->row0 += got;
	}
	if (c->row0 == 0)
		return tq_fail(TQ_ERR_EMPTY, "corpus has no vectors");
	return TQ_OK;
}

enum tq_status
tq_exact_search(struct tq_reader *corpus, enum tq_metric m,
    const float *queries, size_t nq, uint32_t dim, uint32_t k,
    unsigned threads, uint64_t *ids, float *scores)
{
	if (corpus == NULL || (nq > 0 && (queries == NULL || ids == NULL ||
	    scores == NULL)))
		return tq_fail(TQ_ERR_ARG, "exact search: NULL argument");
	if (tq_reader_dim(corpus) != dim)
		return tq_fail(TQ_ERR_MISMATCH, "corpus dimension %u does not "
		    "match queries (%u)", tq_reader_dim(corpus), dim);
	return tq_exact_source(reader_next, corpus, m, queries, nq, dim, k,
	    threads, ids, scores);
}

enum tq_status
tq_exact_source(tq_exact_next_fn next, void *arg, enum tq_metric m,
    const float *queries, size_t nq, uint32_t dim, uint32_t k,
    unsigned threads, uint64_t *ids, float *scores)
{
	struct ectx c;
	struct eres e;
	enum tq_status st;
	unsigned nw;
	size_t i;
	uint32_t t;

	if (k < 1)
		return tq_fail(TQ_ERR_ARG, "k must be at least 1");
	if (m != TQ_METRIC_IP && m != TQ_METRIC_COSINE && m != TQ_METRIC_L2)
		return tq_fail(TQ_ERR_ARG, "unknown metric %d", (int)m);
	TQ_TRY(tq_rows_check(m, queries, nq, dim, "query", 0));
	if ((size_t)dim * CHUNK_ROWS > INT32_MAX)
		return tq_fail(TQ_ERR_UNSUPPORTED, "dimension %u too large "
		    "for exact search", dim);

	nw = threads ? threads : tq_ncpu();
	if (nw > 1024)
		nw = 1024;
	if (nw > nq)
		nw = nq > 0 ? (unsigned)nq : 1;

	memset(&c, 0, sizeof(c));
	c.m = m;
	c.dim = dim;
	c.gamma = (double)(dim + 2) * 0x1p-23;
	c.gb = (double)dim * 0x1p-23 / (1.0 - (double)dim * 0x1p-23);
	c.k2 = ((size_t)dim + 1) / 2;
	st = eres_alloc(&e, nq, dim, k, nw);
	if (st == TQ_OK && nq >= BF16_MIN_QUERIES &&
	    (c.bk = tq_bf16_kernel()) != NULL) {
		if (!eres_alloc_bf16(&e, nq, dim))
			c.bk = NULL;
		c.qb = e.qb;
		c.qrn = e.qrn;
		c.qdn = e.qdn;
		c.xb = e.xb;
		c.xdn = e.xdn;
	}
	if (st == TQ_OK) {
		c.qv = e.qv;
		c.qn2 = e.qn2;
		c.qnorm = e.qnorm;
		c.heaps = e.heaps;
		c.x = e.x;
		c.xn2 = e.xn2;
		c.xnorm = e.xnorm;
		st = exact_run(&e, next, arg, &c, queries);
	}
	if (st == TQ_OK)
		for (i = 0; i < nq; i++) {
			struct tq_topk *h = &e.heaps[i];

			tq_topk_sort(h);
			for (t = 0; t < k; t++) {
				ids[i * k + t] = t < h->len ? h->id[t] :
				    UINT64_MAX;
				scores[i * k + t] = t >= h->len ? NAN :
				    m == TQ_METRIC_L2 ? -h->key[t] : h->key[t];
			}
		}
	eres_free(&e);
	return st;
}
