/*
 * encode.c - vectors to codes and per-vector factors, and back; the row
 * (stream) and blocked (index) code layouts; code-stream headers.
 *
 * Encoding (TURBOQUANT.md, "Centring"): for cosine x <- x/|x| (zero stays
 * zero); r = x - c; u = R r / |r|; code_j = the level nearest u_j (ties to
 * the lower level); yhat_j = centroid[code_j]; then per vector
 *     s  = |r| / <u, yhat>
 *     b' = <c, r> - s <R c, yhat>
 *     |x|^2 (of the possibly normalised x)
 * so that <q, x> ~= s <R q, yhat> + b' + <q, c>.  |r| = 0 gives the
 * smallest positive level everywhere, s = 0 and b' = 0.  For the error
 * bound of the estimate (tq(5), "Error bound") an index also keeps
 *     rho = |yhat| sin angle(u, yhat) = sqrt(|yhat|^2 - <u, yhat>^2)
 * as an f16 rounded up (0 when |r| = 0): the error of s <R q', yhat> as
 * an estimate of <q', r> is |s| rho times <R q', the unit vector of
 * yhat's part orthogonal to u>.
 *
 * Rows are rotated in batches (tq_rotate computes every row in one fixed
 * order, so a row's bytes do not depend on the batch, the split of the
 * input into calls, or the number of threads).
 * Norms and dot products are accumulated in double.
 */
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* Rows per rotation call (bounds the scratch). */
static size_t
enc_batch(uint32_t dim)
{
	return dim <= 2048 ? 64 : 16;
}

/* Nearest level: the number of boundaries strictly below u. */
static unsigned
nearest(const float *bounds, unsigned nb, float u)
{
	unsigned k, c = 0;

	for (k = 0; k < nb; k++)
		c += u > bounds[k];
	return c;
}

#if defined(__x86_64__)
/*
 * nearest() for d coordinates, eight at a time: the same comparisons, so
 * the same codes.  The scalar loop was two thirds of encode_rows, a
 * sixth of a 1M x 768 IVF build's CPU time (perf).
 */
__attribute__((target("avx2"))) static void
nearest_row_avx2(const float *bounds, unsigned nb, const float *u, size_t d,
    uint8_t *c)
{
	size_t j = 0;

	for (; j + 8 <= d; j += 8) {
		__m256 v = _mm256_loadu_ps(u + j);
		__m256i n = _mm256_setzero_si256();
		int32_t t[8];

		for (unsigned k = 0; k < nb; k++)
			n = _mm256_sub_epi32(n, _mm256_castps_si256(
			    _mm256_cmp_ps(v, _mm256_set1_ps(bounds[k]),
			    _CMP_GT_OQ)));
		_mm256_storeu_si256((__m256i *)(void *)t, n);
		for (unsigned l = 0; l < 8; l++)
			c[j + l] = (uint8_t)t[l];
	}
	for (; j < d; j++)
		c[j] = (uint8_t)nearest(bounds, nb, u[j]);
}
#endif

/* The nearest levels of u[0 .. d) into c. */
static void
nearest_row(const float *bounds, unsigned nb, const float *u, size_t d,
    uint8_t *c)
{
#if defined(__x86_64__)
	/* A row's worth of work per call: no need to cache the answer. */
	if (__builtin_cpu_supports("avx2") &&
	    strcmp(tq_kernels()->name, "scalar") != 0) {
		nearest_row_avx2(bounds, nb, u, d, c);
		return;
	}
#endif
	for (size_t j = 0; j < d; j++)
		c[j] = (uint8_t)nearest(bounds, nb, u[j]);
}

/* ------------------------------------------------------------------------ */
/* Scale search                                                              */

/*
 * Among the codewords that are the nearest-level rounding of t*u for some
 * t > 0, picks the one maximising cos(u, yhat).  As t grows, coordinate j
 * steps from magnitude level m-1 to m at t = bound_m / |u_j|.  Sorting the
 * coordinates by |u_j| once makes each level's crossing times ascending,
 * so the events are a merge of K-1 sorted lists; the sweep keeps <u, yhat>
 * and |yhat|^2 up to date and remembers the best prefix.
 */
struct sweep {
	uint32_t *idx;	/* dim: coordinates by |u| descending */
	float *a;	/* dim: |u| */
	uint8_t *lev;	/* dim: magnitude level */
	uint32_t *ev;	/* dim * 7: coordinates in event order */
};

/* qsort has no context argument; a thread-local key keeps this reentrant. */
static _Thread_local const float *tl_key;

static int
cmp_desc(const void *pa, const void *pb)
{
	uint32_t i = *(const uint32_t *)pa, j = *(const uint32_t *)pb;
	float a = tl_key[i], b = tl_key[j];

	if (a != b)
		return a > b ? -1 : 1;
	return i < j ? -1 : i > j;
}

static void
scale_search(const struct tq_quantizer *q, const float *u, struct sweep *w,
    uint8_t *codes)
{
	unsigned K = q->nlevels / 2, m, head[8], mmin;
	uint32_t d = q->dim, nz = 0, j;
	const float *pb = q->bounds + K - 1;	/* pb[m], m = 1 .. K-1 */
	const float *cm = q->centroids + K;	/* magnitudes, m = 0 .. K-1 */
	double dot = 0, nn, best, t, tm[8];
	size_t ev = 0, nev, best_ev = 0;

	for (j = 0; j < d; j++) {
		w->a[j] = fabsf(u[j]);
		if (w->a[j] > 0)
			w->idx[nz++] = j;
		dot += (double)w->a[j] * cm[0];
	}
	nn = (double)d * cm[0] * cm[0];
	best = dot * dot / nn;
	nev = (size_t)nz * (K - 1);
	if (nev > 0) {
		tl_key = w->a;
		qsort(w->idx, nz, sizeof(uint32_t), cmp_desc);
		for (m = 1; m < K; m++) {
			head[m] = 0;
			tm[m] = pb[m] / (double)w->a[w->idx[0]];
		}
	}
	while (ev < nev) {
		/* Apply every event at the smallest time t, then score. */
		mmin = 0;
		t = INFINITY;
		for (m = 1; m < K; m++)
			if (tm[m] < t) {
				t = tm[m];
				mmin = m;
			}
		for (m = mmin; m < K; m++)
			while (tm[m] == t) {
				double a = w->a[w->idx[head[m]]];

				dot += a * ((double)cm[m] - cm[m - 1]);
				nn += (double)cm[m] * cm[m] -
				    (double)cm[m - 1] * cm[m - 1];
				w->ev[ev++] = w->idx[head[m]];
				tm[m] = ++head[m] < nz ?
				    pb[m] / (double)w->a[w->idx[head[m]]] :
				    INFINITY;
			}
		if (dot * dot / nn > best) {
			best = dot * dot / nn;
			best_ev = ev;
		}
	}
	/* Replay the best prefix: each event raises its coordinate a level. */
	memset(w->lev, 0, d);
	for (ev = 0; ev < best_ev; ev++)
		w->lev[w->ev[ev]]++;
	for (j = 0; j < d; j++)
		codes[j] = (uint8_t)(u[j] > 0 ? K + w->lev[j] :
		    u[j] < 0 ? K - 1 - w->lev[j] : K - 1);
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */

/* x as an f16 no smaller than x (x >= 0; +inf past the largest). */
uint16_t
tq_f16_up(float x)
{
	uint16_t h = tq_f32_to_f16(x);

	if (tq_f16_to_f32(h) < x && h < 0x7c00u)
		h++;
	return h;
}

/*
 * row0 only numbers the rows in failure details; rho, if not NULL,
 * receives each row's rho (see the top) as f16 bits.  el, if not NULL,
 * gives each row's list: the row is encoded about that list's centroid
 * instead of the centre (residual codes), el->rcent its rotation.
 */
static enum tq_status
encode_rows(const struct tq_quantizer *q, const float *x, size_t n,
    size_t row0, const struct tq_enc_lists *el, uint8_t *codes,
    float *factors, uint16_t *rho)
{
	size_t d = q->dim, B = enc_batch(q->dim), s0, i, j;
	unsigned L = q->nlevels, K = L / 2;
	float *rb = NULL, *ub = NULL, *u = NULL;
	double *meta = NULL;	/* per row: |r|, <c, r>, |x|^2 */
	struct sweep w = { NULL, NULL, NULL, NULL };
	int search = (q->flags & TQ_QFLAG_SCALE_SEARCH) != 0;
	enum tq_status st = TQ_OK;

	if (n == 0)
		return TQ_OK;
	rb = tq_mallocarray(B * d, sizeof(float));
	ub = tq_mallocarray(B * d, sizeof(float));
	u = tq_mallocarray(d, sizeof(float));
	meta = tq_mallocarray(3 * B, sizeof(double));
	if (search) {
		w.idx = tq_mallocarray(d, sizeof(uint32_t));
		w.a = tq_mallocarray(d, sizeof(float));
		w.lev = tq_mallocarray(d, 1);
		w.ev = tq_mallocarray(d, (K - 1) * sizeof(uint32_t));
	}
	if (!rb || !ub || !u || !meta ||
	    (search && (!w.idx || !w.a || !w.lev || !w.ev))) {
		st = tq_fail(TQ_ERR_NOMEM, "encode: out of memory");
		goto out;
	}
	for (s0 = 0; s0 < n; s0 += B) {
		size_t m = n - s0 < B ? n - s0 : B;

		for (i = 0; i < m; i++) {
			const float *xi = x + (s0 + i) * d;
			const float *cen = el != NULL ? q->ivf.cent +
			    (size_t)el->list[s0 + i] * d : q->centre;
			float *r = rb + i * d;
			double scale = 1, x2 = 0, r2 = 0, cr = 0;

			for (j = 0; j < d; j++)
				if (!isfinite(xi[j])) {
					st = tq_fail(TQ_ERR_NONFINITE, "row %zu: "
					    "value is NaN or infinite", row0 + s0 + i);
					goto out;
				}
			if (q->metric == TQ_METRIC_COSINE) {
				double nn = 0;

				for (j = 0; j < d; j++)
					nn += (double)xi[j] * xi[j];
				scale = nn > 0 ? 1 / sqrt(nn) : 0;
			}
			for (j = 0; j < d; j++) {
				float xv = q->metric == TQ_METRIC_COSINE ?
				    (float)(xi[j] * scale) : xi[j];

				r[j] = xv - cen[j];
				x2 += (double)xv * xv;
				r2 += (double)r[j] * r[j];
				cr += (double)cen[j] * r[j];
			}
			if ((st = tq_norm_check(q->metric, x2, "row",
			    row0 + s0 + i)) != TQ_OK)
				goto out;
			meta[3 * i] = sqrt(r2);
			meta[3 * i + 1] = cr;
			meta[3 * i + 2] = x2;
		}
		tq_rotate(q, rb, m, ub);
		for (i = 0; i < m; i++) {
			uint8_t *c = codes + (s0 + i) * d;
			float *f = factors + (s0 + i) * TQ_NFACTORS;
			const float *ur = ub + i * d;
			const float *rc = el != NULL ? el->rcent +
			    (size_t)el->list[s0 + i] * d : q->rcentre;
			double rn = meta[3 * i], inv, dot = 0, ryc = 0, s;
			double yy = 0;

			if (rn == 0) {
				memset(c, K, d);
				f[0] = 0;
				f[1] = 0;
				f[2] = (float)meta[3 * i + 2];
				if (rho != NULL)
					rho[s0 + i] = 0;
				continue;
			}
			inv = 1 / rn;
			for (j = 0; j < d; j++)
				u[j] = (float)(ur[j] * inv);
			if (search && K > 1)
				scale_search(q, u, &w, c);
			else
				nearest_row(q->bounds, L - 1, u, d, c);
			for (j = 0; j < d; j++) {
				double y = q->centroids[c[j]];

				dot += (double)u[j] * y;
				ryc += (double)rc[j] * y;
				yy += y * y;
			}
			s = dot > 0 ? rn / dot : 0;
			if (rho != NULL) {
				/* A little over, for the sums' own rounding. */
				double r2 = yy - dot * dot;

				rho[s0 + i] = s == 0 ? 0x7c00u : tq_f16_up(
				    (float)(sqrt(r2 > 0 ? r2 : 0) * (1 + 1e-6) +
				    1e-7));
			}
			f[0] = (float)s;
			f[1] = (float)(meta[3 * i + 1] - s * ryc);
			f[2] = (float)meta[3 * i + 2];
		}
	}
out:
	free(rb);
	free(ub);
	free(u);
	free(meta);
	free(w.idx);
	free(w.a);
	free(w.lev);
	free(w.ev);
	return st;
}

/*
 * The public encoders encode about the centre: a residual quantizer's
 * codes depend on each row's list, which only an index build chooses.
 */
static enum tq_status
not_residual(const struct tq_quantizer *q, const char *what)
{
	if (q->flags & TQ_QFLAG_RESIDUAL)
		return tq_fail(TQ_ERR_ARG, "%s: the quantizer has residual "
		    "codes (each row's about its list's centroid), which "
		    "only an index build makes", what);
	return TQ_OK;
}

enum tq_status
tq_encode_unpacked(const struct tq_quantizer *q, const float *x, size_t n,
    uint8_t *codes, float *factors)
{
	TQ_TRY(not_residual(q, "encode"));
	return encode_rows(q, x, n, 0, NULL, codes, factors, NULL);
}

/* Rows encoded per internal call of tq_encode (bounds the scratch). */
#define PACK_CHUNK 256u

/* n rows into packed codes, PACK_CHUNK rows of unpacked scratch at a time. */
static enum tq_status
encode_packed(const struct tq_quantizer *q, const float *x, size_t n,
    size_t row0, uint8_t *codes, float *factors)
{
	size_t d = q->dim, cb = tq_code_bytes(q), s0, i;
	uint8_t *un;
	enum tq_status st = TQ_OK;

	if (n == 0)
		return TQ_OK;
	if ((un = tq_mallocarray(PACK_CHUNK, d)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "encode: out of memory");
	for (s0 = 0; s0 < n && st == TQ_OK; s0 += PACK_CHUNK) {
		size_t m = n - s0 < PACK_CHUNK ? n - s0 : PACK_CHUNK;

		st = encode_rows(q, x + s0 * d, m, row0 + s0, NULL, un,
		    factors + s0 * TQ_NFACTORS, NULL);
		for (i = 0; i < m && st == TQ_OK; i++)
			tq_pack_row(q, un + i * d, codes + (s0 + i) * cb);
	}
	free(un);
	return st;
}

struct encode_job {
	const struct tq_quantizer *q;
	const float *x;
	uint8_t *codes;
	float *factors;
	uint16_t *rho;
	size_t rows, row0;
	int packed;
	enum tq_status rc;
	char detail[256];
	struct tq_enc_lists el;		/* its rows' lists, or list NULL */
};

static void *
encode_worker(void *arg)
{
	struct encode_job *j = arg;

	j->rc = j->packed ?
	    encode_packed(j->q, j->x, j->rows, j->row0, j->codes, j->factors) :
	    encode_rows(j->q, j->x, j->rows, j->row0, j->el.list != NULL ?
	    &j->el : NULL, j->codes, j->factors, j->rho);
	if (j->rc != TQ_OK)
		snprintf(j->detail, sizeof(j->detail), "%s", tq_errdetail());
	return NULL;
}

/*
 * n rows on up to `threads` threads (0: one a CPU, at most 64), each a
 * range of whole 32-row blocks.  The split does not change the bytes:
 * encoding is row-wise.  A thread that cannot be started runs its range
 * on the calling thread.  The first failing range's detail is kept.
 */
static enum tq_status
encode_split(const struct tq_quantizer *q, const float *x, size_t n,
    unsigned threads, int packed, const struct tq_enc_lists *el,
    uint8_t *codes, float *factors, uint16_t *rho)
{
	struct encode_job job[64];
	pthread_t tid[64];
	int started[64];
	size_t nblk = (n + TQ_BLOCK - 1) / TQ_BLOCK, per, at = 0;
	size_t cw = packed ? tq_code_bytes(q) : q->dim;
	unsigned t, nt = threads ? threads : tq_ncpu();

	if (nt > 64)
		nt = 64;
	if (nt > nblk)
		nt = (unsigned)nblk;
	if (nt <= 1)
		return packed ? encode_packed(q, x, n, 0, codes, factors) :
		    encode_rows(q, x, n, 0, el, codes, factors, rho);
	per = (nblk + nt - 1) / nt * TQ_BLOCK;
	for (t = 0; t < nt; t++) {
		size_t len = n - at < per ? n - at : per;

		job[t] = (struct encode_job){ q, x + at * q->dim,
		    codes + at * cw, factors + at * TQ_NFACTORS,
		    rho != NULL ? rho + at : NULL, len, at, packed, TQ_OK,
		    "", { el != NULL ? el->list + at : NULL,
		    el != NULL ? el->rcent : NULL } };
		at += len;
		started[t] = t > 0 && len > 0 &&
		    pthread_create(&tid[t], NULL, encode_worker, &job[t]) == 0;
	}
	for (t = 0; t < nt; t++)
		if (!started[t] && job[t].rows > 0)
			encode_worker(&job[t]);
	for (t = 0; t < nt; t++)
		if (started[t])
			pthread_join(tid[t], NULL);
	for (t = 0; t < nt; t++)
		if (job[t].rc != TQ_OK)
			return tq_fail(job[t].rc, "%s", job[t].detail);
	return TQ_OK;
}

enum tq_status
tq_encode_threads(const struct tq_quantizer *q, const float *x, size_t n,
    unsigned threads, uint8_t *codes, float *factors)
{
	TQ_TRY(not_residual(q, "encode"));
	return encode_split(q, x, n, threads, 1, NULL, codes, factors, NULL);
}

enum tq_status
tq_encode(const struct tq_quantizer *q, const float *x, size_t n,
    uint8_t *codes, float *factors)
{
	TQ_TRY(not_residual(q, "encode"));
	return encode_packed(q, x, n, 0, codes, factors);
}

enum tq_status
tq_encode_unpacked_threads(const struct tq_quantizer *q, const float *x,
    size_t n, unsigned threads, uint8_t *codes, float *factors)
{
	TQ_TRY(not_residual(q, "encode"));
	return encode_split(q, x, n, threads, 0, NULL, codes, factors, NULL);
}

enum tq_status
tq_encode_unpacked_rho(const struct tq_quantizer *q, const float *x,
    size_t n, unsigned threads, const struct tq_enc_lists *el,
    uint8_t *codes, float *factors, uint16_t *rho)
{
	if (el == NULL)
		TQ_TRY(not_residual(q, "encode"));
	return encode_split(q, x, n, threads, 0, el, codes, factors, rho);
}

enum tq_status
tq_enc_lists_make(const struct tq_quantizer *q, float **rcent)
{
	size_t nl = q->ivf.nlist;

	*rcent = NULL;
	if (nl == 0)
		return tq_fail(TQ_ERR_ARG, "residual codes need lists");
	if ((*rcent = tq_mallocarray(nl, (size_t)q->dim * sizeof(float))) ==
	    NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory for %zu rotated "
		    "centroids", nl);
	tq_rotate(q, q->ivf.cent, nl, *rcent);
	return TQ_OK;
}

/*
 * Decoding is approximate: x^ = c + |r|^ R^T yhat with |r|^ = s <yhat,
 * yhat>, because the exact <u, yhat> is not stored and its expectation
 * is |yhat|^2 (each centroid is the mean of its cell).  For cosine the
 * result approximates the normalised vector.
 */
enum tq_status
tq_decode(const struct tq_quantizer *q, const uint8_t *codes,
    const float *factors, size_t n, float *out)
{
	TQ_TRY(not_residual(q, "decode"));
	return tq_decode_about(q, codes, factors, n, q->centre, out);
}

enum tq_status
tq_decode_about(const struct tq_quantizer *q, const uint8_t *codes,
    const float *factors, size_t n, const float *centre, float *out)
{
	size_t d = q->dim, cb = tq_code_bytes(q), B = enc_batch(q->dim), s0,
	    i, j;
	uint8_t *un;
	float *yb;

	if (n == 0)
		return TQ_OK;
	un = tq_mallocarray(d, 1);
	yb = tq_mallocarray(B * d, sizeof(float));
	if (un == NULL || yb == NULL) {
		free(un);
		free(yb);
		return tq_fail(TQ_ERR_NOMEM, "decode: out of memory");
	}
	for (s0 = 0; s0 < n; s0 += B) {
		size_t m = n - s0 < B ? n - s0 : B;

		for (i = 0; i < m; i++) {
			float *y = yb + i * d;
			double nn = 0, scale;

			tq_unpack_row(q, codes + (s0 + i) * cb, un);
			for (j = 0; j < d; j++) {
				y[j] = q->centroids[un[j]];
				nn += (double)y[j] * y[j];
			}
			scale = (double)factors[(s0 + i) * TQ_NFACTORS] * nn;
			for (j = 0; j < d; j++)
				y[j] = (float)(y[j] * scale);
		}
		tq_rotate_inv(q, yb, m, out + s0 * d);
		for (i = 0; i < m; i++)
			for (j = 0; j < d; j++)
				out[(s0 + i) * d + j] += centre[j];
	}
	free(un);
	free(yb);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Row layout: coordinate j at bits [j*bits, (j+1)*bits), little-endian.    */

/*
 * Widths that divide 8 go a byte at a time (a tenth of an IVF append was
 * the bit-serial loop below); 3 bits straddle bytes.
 */
void
tq_pack_row(const struct tq_quantizer *q, const uint8_t *codes,
    uint8_t *packed)
{
	unsigned bits = q->bits, mask = q->nlevels - 1, nacc = 0;
	uint32_t acc = 0, j;
	size_t o = 0;

	if (bits != 3) {
		unsigned per = 8 / bits, i;

		for (j = 0; j < q->dim; j += per, o++) {
			unsigned v = 0;

			for (i = 0; i < per && j + i < q->dim; i++)
				v |= (codes[j + i] & mask) << (i * bits);
			packed[o] = (uint8_t)v;
		}
		return;
	}
	for (j = 0; j < q->dim; j++) {
		acc |= (uint32_t)(codes[j] & mask) << nacc;
		nacc += bits;
		while (nacc >= 8) {
			packed[o++] = (uint8_t)acc;
			acc >>= 8;
			nacc -= 8;
		}
	}
	if (nacc > 0)
		packed[o++] = (uint8_t)acc;
}

void
tq_unpack_row(const struct tq_quantizer *q, const uint8_t *packed,
    uint8_t *codes)
{
	unsigned bits = q->bits, mask = q->nlevels - 1, nacc = 0;
	uint32_t acc = 0, j;
	size_t o = 0;

	if (bits != 3) {
		unsigned per = 8 / bits, i;

		for (j = 0; j < q->dim; j += per, o++)
			for (i = 0; i < per && j + i < q->dim; i++)
				codes[j + i] = (uint8_t)(packed[o] >>
				    (i * bits) & mask);
		return;
	}
	for (j = 0; j < q->dim; j++) {
		if (nacc < bits) {
			acc |= (uint32_t)packed[o++] << nacc;
			nacc += 8;
		}
		codes[j] = (uint8_t)(acc & mask);
		acc >>= bits;
		nacc -= bits;
	}
}

/* ------------------------------------------------------------------------ */
/* Blocked layout (internal.h)                                               */

size_t
tq_block_bytes(const struct tq_quantizer *q)
{
	return q->field_bits == 4 ? (size_t)q->nfields * 16 :
	    (size_t)q->nfields / 4 * 96;
}

/* Field f of one vector's unpacked codes (padding coordinates are 0). */
static unsigned
field_of(const struct tq_quantizer *q, const uint8_t *c, uint32_t f)
{
	unsigned i, v = 0, cpf = q->coords_per_field, mask = q->nlevels - 1;
	uint32_t j = f * cpf;

	for (i = 0; i < cpf && j + i < q->dim; i++)
		v |= (c[j + i] & mask) << (i * q->bits);
	return v;
}

void
tq_pack_block(const struct tq_quantizer *q, const uint8_t *codes,
    size_t rows, uint8_t *block)
{
	size_t d = q->dim;
	uint32_t f, j;

	memset(block, 0, tq_block_bytes(q));
	if (q->field_bits == 4 && q->coords_per_field == 1) {
		/* Row by row, the codes read in order. */
		for (j = 0; j < rows && j < TQ_BLOCK; j++) {
			const uint8_t *c = codes + j * d;
			uint8_t *o = block + (j & 15);
			unsigned sh = j < 16 ? 0 : 4;

			for (f = 0; f < d; f++)
				o[f * 16] |= (uint8_t)((c[f] & 15u) << sh);
		}
		return;
	}
	if (q->field_bits == 4) {
		for (f = 0; f < q->nfields; f++)
			for (j = 0; j < rows && j < TQ_BLOCK; j++) {
				unsigned v = field_of(q, codes + j * d, f);

				block[f * 16 + (j & 15)] |=
				    (uint8_t)(j < 16 ? v : v << 4);
			}
		return;
	}
	for (f = 0; f < q->nfields; f += 4) {
		uint8_t *A = block + f / 4 * 96, *B = A + 32, *C = A + 64;

		for (j = 0; j < rows && j < TQ_BLOCK; j++) {
			const uint8_t *c = codes + j * d;
			unsigned f0 = field_of(q, c, f), f1 = field_of(q, c, f + 1);
			unsigned f2 = field_of(q, c, f + 2);
			unsigned f3 = field_of(q, c, f + 3);

			A[j] = (uint8_t)(f0 | (f3 & 3) << 6);
			B[j] = (uint8_t)(f1 | ((f3 >> 2) & 3) << 6);
			C[j] = (uint8_t)(f2 | (f3 >> 4) << 6);
		}
	}
}

void
tq_unpack_block_row(const struct tq_quantizer *q, const uint8_t *block,
    unsigned j, uint8_t *codes)
{
	unsigned cpf = q->coords_per_field, mask = q->nlevels - 1, i;
	uint32_t f;

	if (q->field_bits == 4 && cpf == 1) {
		const uint8_t *p = block + (j & 15);
		unsigned sh = j < 16 ? 0 : 4;

		for (f = 0; f < q->dim; f++)
			codes[f] = (uint8_t)(p[f * 16] >> sh & 15u);
		return;
	}
	for (f = 0; f < q->nfields; f++) {
		unsigned v;

		if (q->field_bits == 4) {
			uint8_t b = block[f * 16 + (j & 15)];

			v = j < 16 ? b & 15u : (unsigned)b >> 4;
		} else {
			const uint8_t *A = block + f / 4 * 96;
			unsigned k = f % 4;

			v = k < 3 ? A[k * 32 + j] & 63u :
			    (unsigned)(A[j] >> 6 | (A[32 + j] >> 6) << 2 |
			    (A[64 + j] >> 6) << 4);
		}
		for (i = 0; i < cpf; i++)
			if ((size_t)f * cpf + i < q->dim)
				codes[f * cpf + i] =
				    (uint8_t)(v >> (i * q->bits) & mask);
	}
}

/*
 * Row j of a block from one row in the row layout (tq_pack_row), without
 * unpacking it: a field is coords_per_field consecutive coordinates, so
 * field f is the bit string [f * w, f * w + w) of the row, w = cpf * bits
 * (4 or 6).  Bits past the row's bytes are the padding's zeros.
 */
static unsigned
row_field6(const uint8_t *packed, size_t cb, uint32_t f)
{
	size_t bit = (size_t)f * 6, o = bit / 8;
	unsigned v;

	if (o >= cb)
		return 0;
	v = packed[o];
	if (o + 1 < cb)
		v |= (unsigned)packed[o + 1] << 8;
	return v >> (bit % 8) & 63u;
}

void
tq_block_put_row(const struct tq_quantizer *q, const uint8_t *packed,
    unsigned j, uint8_t *block)
{
	size_t cb = tq_code_bytes(q), i;
	uint32_t f;

	if (q->field_bits == 4) {
		/* Byte i of the row is fields 2i and 2i + 1; 2 cb <= nfields. */
		uint8_t *o = block + (j & 15);
		unsigned sh = j < 16 ? 0 : 4, keep = j < 16 ? 0xf0u : 0x0fu;

		for (i = 0; i < cb; i++) {
			o[32 * i] = (uint8_t)((o[32 * i] & keep) |
			    (packed[i] & 15u) << sh);
			o[32 * i + 16] = (uint8_t)((o[32 * i + 16] & keep) |
			    (unsigned)(packed[i] >> 4) << sh);
		}
		for (f = (uint32_t)(2 * cb); f < q->nfields; f++)
			o[16 * f] &= (uint8_t)keep;
		return;
	}
	for (f = 0; f < q->nfields; f += 4) {
		uint8_t *A = block + f / 4 * 96;
		unsigned f0 = row_field6(packed, cb, f);
		unsigned f1 = row_field6(packed, cb, f + 1);
		unsigned f2 = row_field6(packed, cb, f + 2);
		unsigned f3 = row_field6(packed, cb, f + 3);

		A[j] = (uint8_t)(f0 | (f3 & 3) << 6);
		A[32 + j] = (uint8_t)(f1 | ((f3 >> 2) & 3) << 6);
		A[64 + j] = (uint8_t)(f2 | (f3 >> 4) << 6);
	}
}

/*
 * Moving a run of rows between blocks at another offset mod 32 (an IVF
 * append moves each old list this way) without unpacking them.
 *
 * 4-bit fields: byte k of a field holds rows k and k + 16.  Over two
 * source blocks A and B (rows 0..63 of the run's source) the 48 bytes
 *	Y = A[0..15], M[0..15], B[0..15],   M[i] = A[i] >> 4 | B[i] << 4
 * hold rows k and k + 16 in byte k for every k < 48.  So when row j of
 * the destination block is source row j + t (0 <= t < 32), its field is
 * Y[t .. t + 15]: a byte shift, done on 64-bit words, then merged under
 * the mask of the rows the run covers.
 */
#define NIBBLES_LO 0x0f0f0f0f0f0f0f0full

/*
 * Eight bytes as a little-endian word, so that shifts move whole rows.
 * GCC does not merge wr_le64's byte stores here: on a little-endian host
 * the words are plain loads and stores.
 */
static inline uint64_t
ld_word(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
#else
	return rd_le64(p);
#endif
}

static inline void
st_word(uint8_t *p, uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(p, &v, 8);
#else
	wr_le64(p, v);
#endif
}

/*
 * The fields of one destination block: its bytes start at byte 8k of y
 * plus r bits (t = 8k + r / 8).  k is a constant in each caller, so y
 * stays in registers.  (x << 1) << (63 - r) is x << (64 - r) without the
 * undefined shift by 64 when r is 0.
 */
static inline __attribute__((always_inline)) void
shift_fields4(const uint8_t *a, const uint8_t *b, uint8_t *o, uint32_t nf,
    unsigned k, unsigned r, uint64_t m0, uint64_t m1)
{
	/* Most destination blocks of a long run are whole: nothing to keep. */
	int full = (m0 & m1) == UINT64_MAX;

	for (uint32_t f = 0; f < nf; f++) {
		const uint8_t *pa = a + 16 * (size_t)f, *pb = b + 16 * (size_t)f;
		uint8_t *po = o + 16 * (size_t)f;
		uint64_t y[6], v0, v1, o0, o1;

		y[0] = ld_word(pa);
		y[1] = ld_word(pa + 8);
		y[4] = ld_word(pb);
		y[5] = ld_word(pb + 8);
		y[2] = (y[0] >> 4 & NIBBLES_LO) | (y[4] << 4 & ~NIBBLES_LO);
		y[3] = (y[1] >> 4 & NIBBLES_LO) | (y[5] << 4 & ~NIBBLES_LO);
		v0 = y[k] >> r | (y[k + 1] << 1) << (63 - r);
		v1 = y[k + 1] >> r | (y[k + 2] << 1) << (63 - r);
		if (full) {
			st_word(po, v0);
			st_word(po + 8, v1);
			continue;
		}
		o0 = ld_word(po);
		o1 = ld_word(po + 8);
		st_word(po, (o0 & ~m0) | (v0 & m0));
		st_word(po + 8, (o1 & ~m1) | (v1 & m1));
	}
}

static void
copy_rows4(const struct tq_quantizer *q, const uint8_t *a, const uint8_t *b,
    unsigned t, unsigned j0, unsigned n, uint8_t *o)
{
	unsigned r = t % 8 * 8, j;
	uint8_t mb[16];
	uint64_t m0, m1;

	for (j = 0; j < 16; j++)
		mb[j] = (uint8_t)((j >= j0 && j < j0 + n ? 0x0fu : 0) |
		    (j + 16 >= j0 && j + 16 < j0 + n ? 0xf0u : 0));
	m0 = rd_le64(mb);
	m1 = rd_le64(mb + 8);
	switch (t / 8) {
	case 0:
		shift_fields4(a, b, o, q->nfields, 0, r, m0, m1);
		break;
	case 1:
		shift_fields4(a, b, o, q->nfields, 1, r, m0, m1);
		break;
	case 2:
		shift_fields4(a, b, o, q->nfields, 2, r, m0, m1);
		break;
	default:
		shift_fields4(a, b, o, q->nfields, 3, r, m0, m1);
		break;
	}
}

/* 6-bit fields: a byte per row, so rows move by plain copies. */
static void
copy_rows6(const struct tq_quantizer *q, const uint8_t *a, const uint8_t *b,
    unsigned sj, unsigned j0, unsigned n, uint8_t *o)
{
	unsigned na = n < 32 - sj ? n : 32 - sj;	/* rows from a */
	size_t k;

	for (k = 0; k < (size_t)q->nfields / 4 * 3; k++) {
		memcpy(o + 32 * k + j0, a + 32 * k + sj, na);
		if (n > na)
			memcpy(o + 32 * k + j0 + na, b + 32 * k, n - na);
	}
}

void
tq_block_copy_rows(const struct tq_quantizer *q, const uint8_t *src,
    uint64_t s, uint8_t *dst, uint64_t d, size_t len)
{
	size_t bb = tq_block_bytes(q);

	while (len > 0) {
		/* Rows [j0, j0 + n) of one destination block, from row sj. */
		unsigned j0 = (unsigned)(d % TQ_BLOCK);
		unsigned sj = (unsigned)(s % TQ_BLOCK);
		unsigned n = len < TQ_BLOCK - j0 ? (unsigned)len :
		    TQ_BLOCK - j0;
		const uint8_t *a = src + s / TQ_BLOCK * bb;
		const uint8_t *b = sj + n > TQ_BLOCK ? a + bb : a;
		uint8_t *o = dst + d / TQ_BLOCK * bb;

		if (n == TQ_BLOCK && sj == 0)
			memcpy(o, a, bb);
		else if (q->field_bits != 4)
			copy_rows6(q, a, b, sj, j0, n, o);
		else if (sj >= j0)
			copy_rows4(q, a, b, sj - j0, j0, n, o);
		else	/* every row from a, as rows 32.. of the pair (a, a) */
			copy_rows4(q, a, a, sj + TQ_BLOCK - j0, j0, n, o);
		s += n;
		d += n;
		len -= n;
	}
}

/* ------------------------------------------------------------------------ */
/* Code streams                                                              */

#define CODES_MAGIC "TQCODES1"
#define CODES_VERSION 1u

size_t
tq_codes_record_bytes(const struct tq_quantizer *q)
{
	return tq_code_bytes(q) + 4 * TQ_NFACTORS;
}

void
tq_codes_header(const struct tq_quantizer *q, uint64_t n,
    uint8_t hdr[TQ_CODES_HEADER])
{
	memset(hdr, 0, TQ_CODES_HEADER);
	memcpy(hdr, CODES_MAGIC, 8);
	wr_le32(hdr + 8, CODES_VERSION);
	wr_le32(hdr + 12, q->dim);
	wr_le32(hdr + 16, q->bits);
	wr_le32(hdr + 20, (uint32_t)q->metric);
	wr_le32(hdr + 24, (uint32_t)tq_codes_record_bytes(q));
	wr_le32(hdr + 28, 0);
	wr_le64(hdr + 32, n);
	wr_le64(hdr + 40, tq_quantizer_fingerprint(q));
}

enum tq_status
tq_codes_check(const struct tq_quantizer *q,
    const uint8_t hdr[TQ_CODES_HEADER], uint64_t *n)
{
	if (memcmp(hdr, CODES_MAGIC, 8) != 0)
		return tq_fail(TQ_ERR_FORMAT, "not a tq code stream (bad "
		    "magic)");
	if (rd_le32(hdr + 8) != CODES_VERSION)
		return tq_fail(TQ_ERR_VERSION, "code stream version %u is not "
		    "supported", (unsigned)rd_le32(hdr + 8));
	if (rd_le32(hdr + 28) != 0)
		return tq_fail(TQ_ERR_FORMAT, "code stream: reserved field is "
		    "not zero");
	if (rd_le32(hdr + 12) != q->dim || rd_le32(hdr + 16) != q->bits ||
	    rd_le32(hdr + 20) != (uint32_t)q->metric)
		return tq_fail(TQ_ERR_MISMATCH, "code stream: dim %u, %u bits, "
		    "metric %u; the quantizer has dim %u, %u bits, metric %u",
		    (unsigned)rd_le32(hdr + 12), (unsigned)rd_le32(hdr + 16),
		    (unsigned)rd_le32(hdr + 20), (unsigned)q->dim, q->bits,
		    (unsigned)q->metric);
	if (rd_le32(hdr + 24) != tq_codes_record_bytes(q))
		return tq_fail(TQ_ERR_FORMAT, "code stream: record size %u, "
		    "expected %zu", (unsigned)rd_le32(hdr + 24),
		    tq_codes_record_bytes(q));
	if (rd_le64(hdr + 40) != tq_quantizer_fingerprint(q))
		return tq_fail(TQ_ERR_MISMATCH, "code stream: made by another "
		    "quantizer (fingerprint differs)");
	*n = rd_le64(hdr + 32);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Compact factors (tq(5) FACH)                                              */

double
tq_centre_norm2(const struct tq_quantizer *q)
{
	double cc = 0.0;

	if (q->centre != NULL)
		for (uint32_t d = 0; d < q->dim; d++)
			cc += (double)q->centre[d] * (double)q->centre[d];
	return cc;
}

const float *
tq_row_centre(const struct tq_quantizer *q, const struct tq_part *p,
    uint64_t r, double cc_centre, double *cc)
{
	uint32_t l;

	if (!(q->flags & TQ_QFLAG_RESIDUAL)) {
		*cc = cc_centre;
		return q->centre;
	}
	l = tq_list_of_row(p, q->ivf.nlist, r);
	*cc = (double)q->ivf.n2[l];
	return q->ivf.cent + (size_t)l * q->dim;
}

/*
 * s and t share one exponent E, chosen so that the larger of |s| and |t|
 * lies in [2^14, 2^15] after scaling by 2^-E: it keeps all 11 bits of
 * its significand and stays below f16's largest finite value, 65504, for
 * any E up to 111 (the largest scaled value then times 2^E is below
 * 2^127).  Both are lengths, so one exponent fits every scale of data
 * (raw pixels: |x|^2 about 1e7 never appears, its part in the key is
 * s t).  The rounding of s then changes a key by at most 2^-12 |s dot|,
 * that of t by at most 2^-11 |s| max(|s|, |t|).
 */
void
tq_fach_canon(float f[3], int l2, double cc)
{
	double s = f[0], t, m;
	int e = 0;

	t = l2 ? (2.0 * f[1] - (double)f[2] + cc) : (double)f[1];
	t = s != 0.0 ? t / s : 0.0;
	m = fabs(s) > fabs(t) ? fabs(s) : fabs(t);
	if (m > 0.0 && isfinite(m)) {
		e = ilogb(m) - 14;
		e = e < -126 ? -126 : e > 111 ? 111 : e;
	}
	f[0] = tq_f16_to_f32(tq_f32_to_f16((float)ldexp(s, -e)));
	f[1] = tq_f16_to_f32(tq_f32_to_f16((float)ldexp(t, -e)));
	f[2] = (float)e;
}

void
tq_fach_row(const uint8_t *blk, unsigned j, float f[3])
{
	f[0] = tq_f16_to_f32(rd_le16(blk + 2 * j));
	f[1] = tq_f16_to_f32(rd_le16(blk + 2 * TQ_BLOCK + 2 * j));
	f[2] = (float)(int8_t)blk[4 * TQ_BLOCK + j];
}

void
tq_fach_uncanon(float f[3], int l2, double cc)
{
	float e = tq_fach_pow2((int)f[2]);
	double s = (double)(f[0] * e), st = s * (double)(f[1] * e);

	f[0] = (float)s;
	f[1] = l2 ? 0.0f : (float)st;
	f[2] = l2 ? (float)(cc - st) : 0.0f;
}

void
tq_fach_pack(const float *fb, size_t nblk, uint8_t *out)
{
	for (size_t k = 0; k < nblk; k++, fb += 3 * TQ_BLOCK,
	    out += TQ_FACH_BLOCK)
		for (unsigned j = 0; j < TQ_BLOCK; j++) {
			wr_le16(out + 2 * j, tq_f32_to_f16(fb[j]));
			wr_le16(out + 2 * TQ_BLOCK + 2 * j,
			    tq_f32_to_f16(fb[TQ_BLOCK + j]));
			out[4 * TQ_BLOCK + j] = (uint8_t)(int8_t)fb[2 *
			    TQ_BLOCK + j];
		}
}

void
tq_fach_decode(const uint8_t *blk, unsigned j, float *s, float *t)
{
	float e = tq_fach_pow2((int8_t)blk[4 * TQ_BLOCK + j]);

	*s = tq_f16_to_f32(rd_le16(blk + 2 * j)) * e;
	*t = tq_f16_to_f32(rd_le16(blk + 2 * TQ_BLOCK + 2 * j)) * e;
}
