/*
 * ivf.c - coarse lists: the nearest lists of a vector (assignment when
 * building, probing when searching) and the k-means that fits them.
 *
 * The centroids live in the input space (after normalisation for cosine).
 * The rotation is orthogonal, so distances to them are the distances in
 * the rotated space the codes live in; keeping them unrotated lets builds
 * and searches compare raw vectors with one sgemm, without a rotation.
 *
 * Scores go through BLAS sgemm for speed, but sgemm rounds differently
 * with other thread counts and matrix shapes, and which list a vector
 * lands in must never depend on either.  So every choice is settled by
 * exact-order dot products (tq_dot_rows): sgemm only rules out the lists
 * whose score is below the p-th best by more than twice a bound on its
 * rounding error, and the remaining candidates are scored again in the
 * fixed order and ranked.  The result equals ranking every list by the
 * fixed-order scores, ties broken by the smaller list number.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Rows scored per sgemm call; fewer than NEAR_BLAS_MIN skip sgemm. */
#define NEAR_ROWS 256
#define NEAR_BLAS_MIN 8

enum tq_status
tq_ivf_prepare(struct tq_ivf *v, uint32_t dim)
{
	double mx = 0.0, m2 = 0.0;

	free(v->n2);
	if ((v->n2 = tq_mallocarray(v->nlist, sizeof(float))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "lists: out of memory");
	for (uint32_t o = 0; o < v->nlist; o++) {
		const float *c = v->cent + (size_t)o * dim;
		double s = 0.0;

		tq_dot_rows(c, dim, 1, c, 1, dim, &v->n2[o], 1);
		for (uint32_t d = 0; d < dim; d++)
			s += (double)c[d] * (double)c[d];
		if (s > mx)
			mx = s;
		if (v->n2[o] > m2)
			m2 = v->n2[o];
	}
	v->cmax = sqrt(mx);
	v->n2max = m2;
	return TQ_OK;
}

/* The score of list o for row x given <x, c_o> and x's scale. */
static inline float
list_score(const struct tq_ivf *v, uint32_t o, float dot, float inv, int ip)
{
	dot *= inv;
	return ip ? dot : 2.0f * dot - v->n2[o];
}

enum tq_status
tq_ivf_nearest(const struct tq_ivf *v, uint32_t dim, const float *x,
    size_t n, int normalise, int ip, uint32_t p, uint32_t *lists,
    float *scores)
{
	uint32_t nl = v->nlist, *cand = NULL;
	/* At most NEAR_ROWS rows, and about 64 MiB of scores, at a time. */
	size_t rb = ((size_t)16 << 20) / nl;

	if (rb > NEAR_ROWS)
		rb = NEAR_ROWS;
	if (rb < 1)
		rb = 1;
	if (rb > n)
		rb = n;
	float *s = NULL;
	struct tq_topk h;
	double u = 0x1p-24, gamma = (double)dim * u / (1.0 - (double)dim * u);
	enum tq_status st = TQ_OK;

	if (n == 0)
		return TQ_OK;
	if (p > nl)
		p = nl;
	memset(&h, 0, sizeof(h));
	s = tq_mallocarray(rb, (size_t)nl * sizeof(float));
	cand = tq_mallocarray(nl, sizeof(*cand));
	if (s == NULL || cand == NULL || tq_topk_init(&h, p) != TQ_OK) {
		st = tq_fail(TQ_ERR_NOMEM, "lists: out of memory");
		goto done;
	}
	for (size_t r0 = 0; r0 < n; r0 += rb) {
		size_t m = n - r0 < rb ? n - r0 : rb;
		/* A few rows (one query) are cheaper in the fixed order. */
		int exact = m < NEAR_BLAS_MIN;

		if (exact)
			tq_dot_rows(x + r0 * dim, dim, m, v->cent, nl, dim, s, nl);
		else
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)m, (int)nl, (int)dim, 1.0f, x + r0 * dim,
			    (int)dim, v->cent, (int)dim, 0.0f, s, (int)nl);
		for (size_t i = 0; i < m; i++) {
			const float *xi = x + (r0 + i) * dim, *si = s + i * nl;
			uint32_t *out = lists + (r0 + i) * p, nc = 0, o, t;
			double nx = 0.0, e;
			float inv = 1.0f, thr;

			for (uint32_t d = 0; d < dim; d++)
				nx += (double)xi[d] * (double)xi[d];
			nx = sqrt(nx);
			if (normalise)
				inv = nx > 0.0 ? (float)(1.0 / nx) : 0.0f;
			/*
			 * |sgemm - fixed order| <= 2 gamma |x| |c| for any
			 * summation order; the score doubles it for l2, and
			 * the few float operations after the dot add a few
			 * ulps of the largest magnitude involved.
			 */
			e = 2.0 * gamma * nx * (double)inv * v->cmax;
			e = (ip ? e : 2.0 * e) + 8.0 * u * (2.0 * nx *
			    (double)inv * v->cmax + v->n2max);
			e = exact ? 0.0 : 2.0 * e;

			tq_topk_reset(&h);
			for (o = 0; o < nl; o++)
				tq_topk_push(&h, list_score(v, o, si[o], inv, ip),
				    o);
			thr = (float)((double)h.key[0] - 2.0 * e);
			/*
			 * Written as "not below" so that NaN scores (from
			 * centroids so large their products overflow) stay
			 * candidates: at least p lists always come out.
			 */
			for (o = 0; o < nl; o++)
				if (!(list_score(v, o, si[o], inv, ip) < thr))
					cand[nc++] = o;
			tq_topk_reset(&h);
			for (t = 0; t < nc; t++) {
				float dot;

				o = cand[t];
				tq_dot_rows(xi, dim, 1, v->cent + (size_t)o * dim,
				    1, dim, &dot, 1);
				tq_topk_push(&h, list_score(v, o, dot, inv, ip),
				    o);
			}
			tq_topk_sort(&h);
			for (t = 0; t < p; t++) {
				out[t] = (uint32_t)h.id[t];
				if (scores != NULL)
					scores[(r0 + i) * p + t] = h.key[t];
			}
		}
	}
done:
	tq_topk_free(&h);
	free(s);
	free(cand);
	return st;
}

/* ------------------------------------------------------------------------ */
/* k-means                                                                   */

static uint64_t
mix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A uniform double in [0, 1). */
static double
unit(uint64_t *g)
{
	return (double)(mix64(g) >> 11) * 0x1p-53;
}

uint64_t
tq_rand_below(uint64_t *g, uint64_t n)
{
	/* Lemire's nearly divisionless method, rejection keeps it exact. */
	__uint128_t m = (__uint128_t)mix64(g) * n;
	uint64_t lo = (uint64_t)m;

	if (lo < n) {
		uint64_t t = -n % n;

		while (lo < t) {
			m = (__uint128_t)mix64(g) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/*
 * k-means++ seeding on the first ms rows (the rows are already a uniform
 * sample): each next centre is a row drawn with probability proportional
 * to its squared distance to the nearest centre so far.
 */
static enum tq_status
seed_plusplus(const float *x, size_t ms, uint32_t dim, uint32_t k,
    uint64_t *g, float *cent)
{
	double *dist = tq_mallocarray(ms, sizeof(double));
	float *dot = tq_mallocarray(ms, sizeof(float));
	float *xn2 = tq_mallocarray(ms, sizeof(float));
	size_t i, pick;
	uint32_t c;

	if (dist == NULL || dot == NULL || xn2 == NULL) {
		free(dist);
		free(dot);
		free(xn2);
		return tq_fail(TQ_ERR_NOMEM, "k-means: out of memory");
	}
	for (i = 0; i < ms; i++) {
		tq_dot_rows(x + i * dim, dim, 1, x + i * dim, 1, dim, &xn2[i], 1);
		dist[i] = INFINITY;
	}
	pick = (size_t)tq_rand_below(g, ms);
	for (c = 0; c < k; c++) {
		const float *cc = x + pick * dim;
		float cn2;
		double total = 0.0, r, acc = 0.0;

		memcpy(cent + (size_t)c * dim, cc, dim * sizeof(float));
		if (c + 1 == k)
			break;
		tq_dot_rows(cc, dim, 1, cc, 1, dim, &cn2, 1);
		tq_dot_rows(x, dim, ms, cc, 1, dim, dot, 1);
		for (i = 0; i < ms; i++) {
			double d = (double)xn2[i] - 2.0 * (double)dot[i] +
			    (double)cn2;

			if (d < 0.0)
				d = 0.0;
			if (d < dist[i])
				dist[i] = d;
			total += dist[i];
		}
		if (!(total > 0.0)) {
			/* Every row sits on a centre: take the next row. */
			pick = (pick + 1) % ms;
			continue;
		}
		r = unit(g) * total;
		for (i = 0; i < ms; i++) {
			acc += dist[i];
			if (acc > r && dist[i] > 0.0)
				break;
		}
		if (i == ms)	/* rounding: the last row that can be drawn */
			for (i = ms; i-- > 0 && !(dist[i] > 0.0);)
				;
		pick = i;
	}
	free(dist);
	free(dot);
	free(xn2);
	return TQ_OK;
}

/*
 * Lloyd iterations: assign (tq_ivf_nearest), then each centroid becomes
 * the mean of its rows, summed in double in row order.  An empty list
 * takes half of the largest one: that centroid is split into two copies
 * nudged apart, as FAISS does.
 */
enum tq_status
tq_kmeans(const float *x, size_t m, uint32_t dim, uint32_t k,
    unsigned iters, uint64_t seed, float *cent)
{
	struct tq_ivf v;
	uint32_t *lab = NULL, *prev = NULL;
	uint64_t *cnt = NULL, g = seed ^ 0x6b6d65616e73ull;
	double *sum = NULL;
	size_t ms, i;
	enum tq_status st;

	if (k < 1 || m < k)
		return tq_fail(TQ_ERR_ARG, "k-means: %zu rows for %u lists; "
		    "need at least one row per list", m, (unsigned)k);
	/* Seeding costs k * ms * dim: a subsample of 16 rows a list. */
	ms = (size_t)k * 16 > 4096 ? (size_t)k * 16 : 4096;
	if (ms > m)
		ms = m;
	TQ_TRY(seed_plusplus(x, ms, dim, k, &g, cent));

	memset(&v, 0, sizeof(v));
	v.nlist = k;
	v.cent = cent;
	lab = tq_mallocarray(m, sizeof(*lab));
	prev = tq_mallocarray(m, sizeof(*prev));
	cnt = tq_mallocarray(k, sizeof(*cnt));
	sum = tq_mallocarray((size_t)k * dim, sizeof(*sum));
	if (lab == NULL || prev == NULL || cnt == NULL || sum == NULL) {
		st = tq_fail(TQ_ERR_NOMEM, "k-means: out of memory");
		goto done;
	}
	for (unsigned it = 0; it < iters; it++) {
		int changed = it == 0;

		if ((st = tq_ivf_prepare(&v, dim)) != TQ_OK ||
		    (st = tq_ivf_nearest(&v, dim, x, m, 0, 0, 1, lab, NULL)) !=
		    TQ_OK)
			goto done;
		for (i = 0; i < m && !changed; i++)
			changed = lab[i] != prev[i];
		if (!changed)
			break;
		memcpy(prev, lab, m * sizeof(*lab));
		memset(cnt, 0, k * sizeof(*cnt));
		memset(sum, 0, (size_t)k * dim * sizeof(*sum));
		for (i = 0; i < m; i++) {
			double *sc = sum + (size_t)lab[i] * dim;
			const float *xi = x + i * dim;

			cnt[lab[i]]++;
			for (uint32_t d = 0; d < dim; d++)
				sc[d] += (double)xi[d];
		}
		for (uint32_t c = 0; c < k; c++)
			if (cnt[c] > 0)
				for (uint32_t d = 0; d < dim; d++)
					cent[(size_t)c * dim + d] = (float)(sum[
					    (size_t)c * dim + d] / (double)cnt[c]);
		for (uint32_t c = 0; c < k; c++) {
			uint32_t big = 0;
			float *cb, *ce;

			if (cnt[c] > 0)
				continue;
			for (uint32_t b = 1; b < k; b++)
				if (cnt[b] > cnt[big])
					big = b;
			cb = cent + (size_t)big * dim;
			ce = cent + (size_t)c * dim;
			for (uint32_t d = 0; d < dim; d++) {
				float eps = (d % 2 ? -1.0f : 1.0f) / 1024.0f;

				ce[d] = cb[d] * (1.0f + eps);
				cb[d] = cb[d] * (1.0f - eps);
			}
			cnt[c] = cnt[big] / 2;
			cnt[big] -= cnt[c];
		}
	}
	st = TQ_OK;
done:
	free(v.n2);
	free(lab);
	free(prev);
	free(cnt);
	free(sum);
	return st;
}
