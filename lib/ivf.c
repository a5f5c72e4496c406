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
 *
 * On a CPU with AVX512_BF16 the filter of each row's nearest list (the
 * assignment of a build, k-means) is tq's own bf16 product
 * (lib/kern/near_bf16.c) instead of sgemm: rows and centroids rounded to
 * bf16 (8 significant bits) move each score by at most |x~| |c - c~| +
 * |x - x~| |c| (bf16_candidates; about 2^-10 |x| |c|, at worst 2^-7), so
 * a few more lists are re-checked (1.2 to 1.8 a row instead of 1.0 on
 * Fashion-MNIST and text embeddings), but a bf16 multiply-add instruction
 * does twice the work of a float one, and the choice is the same.
 *
 * A quantizer fitted here stores its centroids in bf16, as offsets from
 * their mean (tq_ivf_round): the values every program uses are those the
 * offsets stand for, so nothing changes but the bytes, half those of f32,
 * and a search widens the rows it scores a block at a time
 * (tq_ivf_rows) instead of keeping an f32 copy, unless its filter rules
 * out too few lists for that to pay (wide_ready).  A single query's
 * filter reads the offsets where the file maps them (single_rows): no
 * copy of its own, and as they are exact in bf16 only the query's
 * rounding widens its bound, which leaves fewer lists to re-check.
 */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "internal.h"

/* Rows scored per sgemm call; fewer than NEAR_BLAS_MIN skip sgemm. */
#define NEAR_ROWS 256
#define NEAR_BLAS_MIN 8
/* Centroids widened from bf16 at a time (tq_ivf_rows), for sgemm. */
#define WIDEN_LISTS 64

/* Lists fewer than this are filtered by sgemm: padding would cost more. */
#define BF16_MIN_LISTS 64
/*
 * Rows scored one at a time (single queries) in the fixed order before
 * the bf16 filter's centroids are packed for them: packing costs as much
 * as the filter saves on some 25 (3162 lists of 768) to 80 (245 of 784)
 * such rows, so a process that asks a few queries does not pay it and
 * one that asks many pays at most about twice.
 */
#define BF16_SINGLE_AFTER 64

static void
bf16_release(struct tq_ivf *v)
{
	free(v->bfc);
	free(v->bfe);
	v->bfc = NULL;
	v->bfe = NULL;
	v->bfnl = 0;
	v->bfemax[0] = v->bfemax[1] = 0.0;
	v->bfmade = 0;
}

/*
 * The centroids in the bf16 filter's blocks (see near_bf16.c), and per
 * list the norms its bound needs (bf16_bound), with their largest values
 * (bf16_candidates' emax).
 */
static void
bf16_pack(struct tq_ivf *v, uint32_t dim)
{
	const struct tq_bf16_kernel *bk = tq_bf16_single_kernel();
	uint32_t k2 = (dim + 1) / 2, nlp;
	uint32_t *row, *w;
	float *tmp;

	if (bk == NULL || v->nlist < BF16_MIN_LISTS ||
	    !(v->cmax < TQ_BF16_MAX_NORM))
		return;
	nlp = (v->nlist + TQ_BF16_LISTS - 1) / TQ_BF16_LISTS * TQ_BF16_LISTS;
	/* Without the memory, sgemm filters: slower, the same lists. */
	row = tq_mallocarray(k2, sizeof(*row));
	tmp = tq_mallocarray(dim, sizeof(*tmp));
	v->bfe = tq_mallocarray(v->nlist, 2 * sizeof(*v->bfe));
	if (row == NULL || tmp == NULL || v->bfe == NULL ||
	    posix_memalign(&v->bfc, 64, (size_t)nlp * k2 *
	    sizeof(uint32_t)) != 0) {
		free(row);
		free(tmp);
		bf16_release(v);
		return;
	}
	w = v->bfc;
	memset(w, 0, (size_t)nlp * k2 * sizeof(uint32_t));
	for (uint32_t o = 0; o < v->nlist; o++) {
		double cn, dn;

		bk->row(tq_ivf_rows(v, dim, o, 1, tmp), dim, row, &cn, &dn);
		/* |c| from |bf16(c)| and the residual, rounded up. */
		v->bfe[2 * o] = dn;
		v->bfe[2 * o + 1] = (cn + dn) * (1.0 + 0x1p-40);
		for (int t = 0; t < 2; t++)
			if (v->bfe[2 * o + t] > v->bfemax[t])
				v->bfemax[t] = v->bfe[2 * o + t];
		tq_bf16_place(w, k2, o, row);
	}
	free(row);
	free(tmp);
	v->bfnl = nlp;
}

void
tq_bf16_place(uint32_t *blocks, uint32_t k2, size_t o, const uint32_t *row)
{
	uint32_t *w = blocks + o / 16 * k2 * 16 + o % 16;

	for (uint32_t k = 0; k < k2; k++)
		w[(size_t)k * 16] = row != NULL ? row[k] : 0;
}

const char *
tq_list_filter_name(void)
{
	const struct tq_bf16_kernel *b = tq_bf16_kernel();

	return b == NULL ? "sgemm" : b->name;
}

const char *
tq_single_filter_name(void)
{
	const struct tq_bf16_kernel *b = tq_bf16_single_kernel();

	return b == NULL ? "f32" : b->gemm != NULL ? "bf16" : "bf16-fma";
}

void
tq_ivf_release(struct tq_ivf *v)
{
	free(v->n2);
	v->n2 = NULL;
	free(v->wide);
	v->wide = NULL;
	v->widemade = 0;
	free(v->cbn);
	v->cbn = NULL;
	v->cbnmax[0] = v->cbnmax[1] = v->basen = 0.0;
	bf16_release(v);
	v->nsingle = 0;
}

enum tq_status
tq_ivf_prepare(struct tq_ivf *v, uint32_t dim)
{
	double mx = 0.0, m2 = 0.0;
	float *tmp = NULL;

	tq_ivf_release(v);
	if ((v->n2 = tq_mallocarray(v->nlist, sizeof(float))) == NULL ||
	    (v->cent == NULL && ((tmp = tq_mallocarray(dim,
	    sizeof(*tmp))) == NULL || (v->cbn = tq_mallocarray(v->nlist,
	    2 * sizeof(*v->cbn))) == NULL))) {
		free(tmp);
		tq_ivf_release(v);
		return tq_fail(TQ_ERR_NOMEM, "lists: out of memory");
	}
	for (uint32_t o = 0; o < v->nlist; o++) {
		const float *c = tq_ivf_rows(v, dim, o, 1, tmp);
		double s = 0.0;

		tq_dot_rows(c, dim, 1, c, 1, dim, &v->n2[o], 1);
		for (uint32_t d = 0; d < dim; d++)
			s += (double)c[d] * (double)c[d];
		if (s > mx)
			mx = s;
		if (v->n2[o] > m2)
			m2 = v->n2[o];
		if (v->cbn != NULL) {
			const uint16_t *e = v->cb + (size_t)o * dim;
			double se = 0.0;

			for (uint32_t d = 0; d < dim; d++) {
				double f = (double)tq_bf16_to_f32(e[d]);

				se += f * f;
			}
			/* Rounded up: the sums in double are within 2^-40. */
			v->cbn[2 * o] = sqrt(se) * (1.0 + 0x1p-40);
			v->cbn[2 * o + 1] = sqrt(s) * (1.0 + 0x1p-40);
			for (int t = 0; t < 2; t++)
				if (v->cbn[2 * o + t] > v->cbnmax[t])
					v->cbnmax[t] = v->cbn[2 * o + t];
		}
	}
	if (v->cbn != NULL) {
		double sb = 0.0;

		for (uint32_t d = 0; d < dim; d++)
			sb += (double)v->cbase[d] * (double)v->cbase[d];
		v->basen = sqrt(sb) * (1.0 + 0x1p-40);
	}
	free(tmp);
	v->cmax = sqrt(mx);
	v->n2max = m2;
	return TQ_OK;
}

/*
 * The widening of tq_ivf_rows in clones for AVX-512, AVX2 and baseline
 * x86-64 at -O3, one chosen when the library loads: a single query
 * widens the few dozen lists it re-scores, where a scalar loop cost
 * more than their dot products (Fashion-MNIST, 32 probes).  Each value
 * is one f32 addition, the same bits in every clone.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(TQ_NO_CLONES)
#define WIDEN_CLONES __attribute__((target_clones("avx512f", "avx2", \
    "default"), optimize("O3")))
#else
#define WIDEN_CLONES
#endif

WIDEN_CLONES static void
widen(const uint16_t *restrict b, const float *restrict base, size_t n,
    uint32_t dim, float *restrict out)
{
	for (size_t r = 0; r < n; r++)
		for (uint32_t j = 0; j < dim; j++)
			out[r * dim + j] = base[j] + tq_bf16_to_f32(b[r * dim +
			    j]);
}

const float *
tq_ivf_rows(const struct tq_ivf *v, uint32_t dim, uint32_t o, uint32_t n,
    float *tmp)
{
	if (v->cent != NULL)
		return v->cent + (size_t)o * dim;
	widen(v->cb + (size_t)o * dim, v->cbase, n, dim, tmp);
	return tmp;
}

/* f to bf16, to nearest even (f finite). */
static uint16_t
bf16_even(float f)
{
	uint32_t w;

	memcpy(&w, &f, sizeof(w));
	return (uint16_t)((w + 0x7fffu + ((w >> 16) & 1u)) >> 16);
}

void
tq_ivf_round(float *c, size_t n, uint32_t dim, float *base, uint16_t *cb)
{
	for (uint32_t j = 0; j < dim; j++) {
		double s = 0.0;

		for (size_t o = 0; o < n; o++)
			s += (double)c[o * dim + j];
		base[j] = (float)(s / (double)n);
	}
	for (size_t o = 0; o < n; o++)
		for (uint32_t j = 0; j < dim; j++) {
			cb[o * dim + j] = bf16_even(c[o * dim + j] - base[j]);
			c[o * dim + j] = base[j] + tq_bf16_to_f32(cb[o * dim +
			    j]);
		}
}

static pthread_mutex_t bf16_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Makes one of v's caches of its own values (make sets it, or leaves it
 * NULL without the memory) on the first call, hence through a const
 * pointer, once, under a lock: rows may be chosen on several threads at
 * once.  *made is 1 once tried.
 */
static void
cache_once(const struct tq_ivf *cv, uint32_t dim, int *made,
    void (*make)(struct tq_ivf *, uint32_t))
{
	if (!__atomic_load_n(made, __ATOMIC_ACQUIRE)) {
		pthread_mutex_lock(&bf16_lock);
		if (!*made) {
			make((struct tq_ivf *)(uintptr_t)cv, dim);
			__atomic_store_n(made, 1, __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&bf16_lock);
	}
}

/*
 * Whether v has the bf16 filter's centroids, packing them on the first
 * call (cache_once).  About 5 ms at 3162 lists of 768, which a process
 * that searches a few queries one by one does not pay.
 */
static int
bf16_ready(const struct tq_ivf *v, uint32_t dim)
{
	cache_once(v, dim, (int *)(uintptr_t)&v->bfmade, bf16_pack);
	return v->bfc != NULL;
}

static void
wide_make(struct tq_ivf *v, uint32_t dim)
{
	if ((v->wide = tq_mallocarray(v->nlist, (size_t)dim *
	    sizeof(*v->wide))) != NULL)
		tq_ivf_rows(v, dim, 0, v->nlist, v->wide);
}

/*
 * All of v's centroids in f32: v->cent, or the copy widened from the bf16
 * form on the first call (v->wide, cache_once), or NULL without the
 * memory (then the rows are widened one at a time: the same values).
 */
static const float *
wide_ready(const struct tq_ivf *v, uint32_t dim)
{
	if (v->cent != NULL)
		return v->cent;
	cache_once(v, dim, (int *)(uintptr_t)&v->widemade, wide_make);
	return v->wide;
}

/* The score of list o for row x given <x, c_o> and x's scale. */
static inline float
list_score(const struct tq_ivf *v, uint32_t o, float dot, float inv, int ip)
{
	dot *= inv;
	return ip ? dot : 2.0f * dot - v->n2[o];
}

/*
 * The nc lists cand of row x (scale inv) scored in the fixed order into h
 * (reset first), which keeps the best h->k.  Where a filter left an eighth
 * of the lists more than those (values far from 0, whose bf16 rounding
 * is large against the differences between lists), from the f32 copy of
 * bf16 centroids (wide_ready) instead of widening each row into tmp (dim
 * floats).
 */
static void
rescore(const struct tq_ivf *v, uint32_t dim, const float *x, float inv,
    int ip, const uint32_t *cand, uint32_t nc, struct tq_topk *h,
    float *tmp)
{
	const float *all = nc > h->k + v->nlist / 8 ? wide_ready(v, dim) :
	    v->cent;

	tq_topk_reset(h);
	for (uint32_t t = 0; t < nc; t++) {
		uint32_t o = cand[t];
		float dot;

		tq_dot_rows(x, dim, 1, all != NULL ? all + (size_t)o * dim :
		    tq_ivf_rows(v, dim, o, 1, tmp), 1, dim, &dot, 1);
		tq_topk_push(h, list_score(v, o, dot, inv, ip), o);
	}
}

/*
 * |x_i| for m rows of dim, each summed in double from the first coordinate
 * to the last (a cosine row's scale depends on it, so the order is fixed);
 * four rows at a time, so that four chains of additions overlap.
 */
static void
row_norms(const float *x, size_t m, uint32_t dim, double *out)
{
	size_t i = 0;

	for (; i + 4 <= m; i += 4) {
		const float *a = x + i * dim, *b = a + dim, *c = b + dim;
		const float *e = c + dim;
		double sa = 0.0, sb = 0.0, sc = 0.0, se = 0.0;

		for (uint32_t d = 0; d < dim; d++) {
			sa += (double)a[d] * (double)a[d];
			sb += (double)b[d] * (double)b[d];
			sc += (double)c[d] * (double)c[d];
			se += (double)e[d] * (double)e[d];
		}
		out[i] = sqrt(sa);
		out[i + 1] = sqrt(sb);
		out[i + 2] = sqrt(sc);
		out[i + 3] = sqrt(se);
	}
	for (; i < m; i++) {
		const float *a = x + i * dim;
		double sa = 0.0;

		for (uint32_t d = 0; d < dim; d++)
			sa += (double)a[d] * (double)a[d];
		out[i] = sqrt(sa);
	}
}

/*
 * The bound of the bf16 filter.  With x~ and c~ the vectors
 * rounded to bf16 (tq_bf16_kernel's row),
 *   <x, c> - <x~, c~> = <x~, c - c~> + <x - x~, c>,
 * at most |x~| |c - c~| + |x - x~| |c| (Cauchy-Schwarz, on the actual
 * residuals: about 2^-10 |x| |c| each, a quarter of the worst case).  The
 * products of bf16 are exact in float, and their sum, in whatever order
 * and rounding the instruction has (a faithful one: 2^-23), is within gb
 * |x~| |c~| of the exact one; the fixed order's own error is within
 * gamma |x| |c|; values the instruction flushes (below 2^-126: products,
 * sums) add at most 2 dim 2^-126.  So list o's filter score is within
 * E_o of its fixed-order one (doubled for l2, where the score is
 * 2 <x, c> - |c|^2, plus the few ulps of the float operations after the
 * dot, as for sgemm): E_o = ka |c_o - c~_o| + kb |c_o| + kc, with ka, kb
 * and kc a row's (bf16_bound) and the two norms a list's (v->bfe).  If L
 * is the largest of score - E_o, the best list has a fixed-order score of
 * at least L, so a filter score of at least L - E_o: the others cannot be
 * it (bf16_candidates).  single_rows has the bound of the filter that
 * reads bf16 centroids where they lie (bf16_bound_offsets).
 */
struct bfbound {
	double ka, kb, kc;
};

/* E_o from a list's two norms en[2 o], en[2 o + 1] (v->bfe or v->cbn). */
static inline double
bf16_err(const double *en, const struct bfbound *b, uint32_t o)
{
	return b->ka * en[2 * o] + b->kb * en[2 * o + 1] + b->kc;
}

static void
bf16_bound(const struct tq_ivf *v, uint32_t dim, double nx, double rn,
    double dn, float inv, int ip, struct bfbound *b)
{
	double u = 0x1p-24, gamma = (double)dim * u / (1.0 - (double)dim * u);
	double gb = (double)dim * 0x1p-23 / (1.0 - (double)dim * 0x1p-23);
	double sc = (ip ? 1.0 : 2.0) * (double)inv * (1.0 + 0x1p-20);

	/* The sum's gb |x~| |c~| is split by |c~| <= |c| + |c - c~|. */
	b->ka = sc * rn * (1.0 + gb);
	b->kb = sc * (dn + gb * rn + gamma * nx);
	b->kc = sc * 0x1p-120 * (double)dim + 8.0 * u * (2.0 * nx *
	    (double)inv * v->cmax + v->n2max);
}

/*
 * The bound of the one-row filter of bf16 centroids (IVFC encoding 1),
 * which reads their offsets e_o where they lie: it scores list o as
 * S_o = fl(xm + G_o), where xm is <x, m> (m = cbase) summed in double and
 * rounded to float, and G_o is <x~, e_o> as the kernel sums it.  The
 * fixed-order score is that of <x, c_o>, c_o = fl(m + e_o), so
 *   <x, c_o> - (xm + <x~, e_o>) = (<x, m> - xm) + <x - x~, e_o> +
 *       <x, c_o - m - e_o>,
 * at most (u + dim 2^-52) |x| |m| + |x - x~| |e_o| + u |x| |c_o|; the
 * kernel's sum is within gb |x~| |e_o| of the exact <x~, e_o> (bf16
 * products are exact in float), plus 2 dim 2^-126 for flushed products
 * and |x~| dim 2^-126 for offsets below 2^-126 it may read as 0; the
 * float addition of xm adds u (|xm| + |G_o|); and the fixed order's own
 * error is gamma |x| |c_o|.  With the list's two norms (v->cbn: |e_o|,
 * |c_o|) E_o = ka |e_o| + kb |c_o| + kc, scaled and with the same ulps of
 * the score's float operations as bf16_bound.  No term for rounding the
 * centroids: the filter reads the values the centroids stand for.
 */
static void
bf16_bound_offsets(const struct tq_ivf *v, uint32_t dim, double nx,
    double rn, double dn, float inv, int ip, struct bfbound *b)
{
	double u = 0x1p-24, gamma = (double)dim * u / (1.0 - (double)dim * u);
	double gb = (double)dim * 0x1p-23 / (1.0 - (double)dim * 0x1p-23);
	double sc = (ip ? 1.0 : 2.0) * (double)inv * (1.0 + 0x1p-20);

	b->ka = sc * (dn + (gb + 2.0 * u) * rn) * (1.0 + 0x1p-30);
	b->kb = sc * (gamma + u) * nx * (1.0 + 0x1p-30);
	b->kc = sc * (nx * v->basen * (3.0 * u + (double)dim * 0x1p-52) +
	    (2.0 + rn) * (double)dim * 0x1p-126) + 8.0 * u * (2.0 * nx *
	    (double)inv * v->cmax + v->n2max);
}

/*
 * The largest list_score of a row's products si (NaN ignored), four lists
 * at a time: the same operations as list_score, lane by lane.
 */
static float
best_score(const struct tq_ivf *v, const float *si, float inv, int ip)
{
	uint32_t nl = v->nlist, o = 0;
	float best = -INFINITY;

#if defined(__SSE2__)
	__m128 vb = _mm_set1_ps(-INFINITY), vi = _mm_set1_ps(inv);
	float l[4];

	for (; o + 4 <= nl; o += 4) {
		__m128 t = _mm_mul_ps(_mm_loadu_ps(si + o), vi);

		if (!ip)
			t = _mm_sub_ps(_mm_add_ps(t, t), _mm_loadu_ps(v->n2 + o));
		/* maxps gives its second operand when one is NaN. */
		vb = _mm_max_ps(t, vb);
	}
	_mm_storeu_ps(l, vb);
	for (int k = 0; k < 4; k++)
		if (l[k] > best)
			best = l[k];
#endif
	for (; o < nl; o++) {
		float sc = list_score(v, o, si[o], inv, ip);

		if (sc > best)
			best = sc;
	}
	return best;
}

/* The lists whose list_score is not below thr (NaN included), in order. */
static uint32_t
scores_not_below(const struct tq_ivf *v, const float *si, float inv, int ip,
    float thr, uint32_t *out)
{
	uint32_t nl = v->nlist, o = 0, n = 0;

#if defined(__SSE2__)
	__m128 vt = _mm_set1_ps(thr), vi = _mm_set1_ps(inv);

	for (; o + 4 <= nl; o += 4) {
		__m128 t = _mm_mul_ps(_mm_loadu_ps(si + o), vi);
		int bits;

		if (!ip)
			t = _mm_sub_ps(_mm_add_ps(t, t), _mm_loadu_ps(v->n2 + o));
		for (bits = _mm_movemask_ps(_mm_cmpnlt_ps(t, vt)); bits != 0;
		    bits &= bits - 1)
			out[n++] = o + (uint32_t)__builtin_ctz((unsigned)bits);
	}
#endif
	for (; o < nl; o++)
		if (!(list_score(v, o, si[o], inv, ip) < thr))
			out[n++] = o;
	return n;
}

/*
 * The lists whose filter scores si may be among the p best, p = h->k (a
 * heap of that many); emax >= every E_o.  With L the p-th largest of
 * score - E_o, at least p lists have a fixed-order score of at least L,
 * so each of the p best has one too, and a filter score of at least
 * L - E_o: the others cannot be among them.  L is at least A - emax, with
 * A the p-th largest filter score (for p = 1 the best, found four lists
 * at a time), so a first pass in float keeps the lists within 2 emax of
 * A (they hold the p largest score - E_o), and only they are bounded one
 * by one.  The heap takes floats: each score - E_o rounded down.
 */
static uint32_t
bf16_candidates(const struct tq_ivf *v, const float *si, float inv, int ip,
    const double *en, const struct bfbound *b, double emax,
    struct tq_topk *h, uint32_t *cand)
{
	uint32_t nl = v->nlist, nc = 0, npre, o, t;
	double thr, lim = -INFINITY;
	float tf;

	if (h->k == 1) {
		thr = (double)best_score(v, si, inv, ip);
	} else {
		tq_topk_reset(h);
		for (o = 0; o < nl; o++)
			tq_topk_push(h, list_score(v, o, si[o], inv, ip), o);
		thr = (double)h->key[0];
	}
	thr -= 2.0 * emax;
	/* Rounded down: a float not below it may be below thr. */
	tf = (float)thr;
	if ((double)tf > thr)
		tf = nextafterf(tf, -INFINITY);
	npre = scores_not_below(v, si, inv, ip, tf, cand);
	tq_topk_reset(h);
	for (t = 0; t < npre; t++) {
		double lo;
		float f;

		o = cand[t];
		lo = (double)list_score(v, o, si[o], inv, ip) -
		    bf16_err(en, b, o);
		if (h->k == 1) {
			if (lo > lim)
				lim = lo;
			continue;
		}
		f = (float)lo;
		if ((double)f > lo)
			f = nextafterf(f, -INFINITY);
		tq_topk_push(h, f, o);
	}
	if (h->k != 1)
		lim = (double)h->key[0];
	/* "Not below": NaN scores stay candidates (see nearest_rows). */
	for (t = 0; t < npre; t++) {
		o = cand[t];
		if (!((double)list_score(v, o, si[o], inv, ip) +
		    bf16_err(en, b, o) < lim))
			cand[nc++] = o;
	}
	return nc;
}

/*
 * The bf16 filter for rows scored one at a time, or NULL (fixed order for
 * all lists): for f32 centroids after BF16_SINGLE_AFTER such rows, or
 * once a batch has made their bf16 copy; for bf16 ones at once.
 */
static const struct tq_bf16_kernel *
single_filter(const struct tq_ivf *cv, uint32_t dim)
{
	struct tq_ivf *v = (struct tq_ivf *)(uintptr_t)cv;
	const struct tq_bf16_kernel *bk = tq_bf16_single_kernel();

	if (bk == NULL || cv->nlist < BF16_MIN_LISTS)
		return NULL;
	/*
	 * Centroids in bf16 have no f32 copy for the fixed order to read
	 * (wide_ready), and the filter reads them as they are: from the
	 * first row, nothing to make.
	 */
	if (cv->cbn != NULL)
		return cv->cbnmax[1] < TQ_BF16_MAX_NORM && cv->basen <
		    TQ_BF16_MAX_NORM ? bk : NULL;
	if (!__atomic_load_n(&v->bfmade,
	    __ATOMIC_ACQUIRE) && __atomic_add_fetch(&v->nsingle, 1,
	    __ATOMIC_RELAXED) <= BF16_SINGLE_AFTER)
		return NULL;
	return bf16_ready(cv, dim) ? bk : NULL;
}

/*
 * y[i * ldy + o] = <x_i, c_o> for the m rows of x and every list, as
 * tq_dot_rows or (sgemm != 0) cblas_sgemm sums them; tmp holds
 * WIDEN_LISTS * dim floats if v has no f32 centroids.
 */
static void
dot_lists(const struct tq_ivf *v, uint32_t dim, const float *x, size_t m,
    float *y, size_t ldy, int sgemm, float *tmp)
{
	/* Few rows: the f32 copy (wide_ready); many share each block. */
	const float *all = sgemm ? v->cent : wide_ready(v, dim);
	uint32_t nb = all != NULL ? v->nlist : WIDEN_LISTS;

	for (uint32_t o = 0; o < v->nlist; o += nb) {
		uint32_t b = v->nlist - o < nb ? v->nlist - o : nb;
		const float *c = all != NULL ? all + (size_t)o * dim :
		    tq_ivf_rows(v, dim, o, b, tmp);

		if (sgemm)
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans,
			    (int)m, (int)b, (int)dim, 1.0f, x, (int)dim, c,
			    (int)dim, 0.0f, y + o, (int)ldy);
		else
			tq_dot_rows(x, dim, m, c, b, dim, y + o, ldy);
	}
}

/*
 * The p lists of the single row x (|x| = nx, scale inv) through the bf16
 * filter of bk, into h (unsorted); s holds v->bfnl or nlist floats
 * (whichever is more), xb (dim + 1) / 2 words and tmp dim floats.  Only
 * the lists the filter cannot rule out are scored in the fixed order,
 * which decides among them as it would among all: the same lists,
 * reading half the bytes and a few rows again.  bf16 centroids are read
 * where they lie, as a mean and offsets (bf16_bound_offsets); f32 ones
 * from the filter's bf16 copy.
 */
static void
single_rows(const struct tq_ivf *v, uint32_t dim,
    const struct tq_bf16_kernel *bk, const float *x, double nx, float inv,
    int ip, struct tq_topk *h, float *s, uint32_t *xb, uint32_t *cand,
    float *tmp)
{
	struct bfbound bb;
	double rn, dn;
	uint32_t nc;

	const double *en, *emax;

	bk->row(x, dim, xb, &rn, &dn);
	if (v->cbn != NULL) {
		double xm = 0.0;
		float xmf;

		for (uint32_t d = 0; d < dim; d++)
			xm += (double)x[d] * (double)v->cbase[d];
		xmf = (float)xm;
		bk->gemv_rows(xb, v->cb, v->nlist, dim, s);
		for (uint32_t o = 0; o < v->nlist; o++)
			s[o] += xmf;
		bf16_bound_offsets(v, dim, nx, rn, dn, inv, ip, &bb);
		en = v->cbn;
		emax = v->cbnmax;
	} else {
		bk->gemv(xb, v->bfc, v->bfnl, (dim + 1) / 2, s);
		bf16_bound(v, dim, nx, rn, dn, inv, ip, &bb);
		en = v->bfe;
		emax = v->bfemax;
	}
	nc = bf16_candidates(v, s, inv, ip, en, &bb, (bb.ka * emax[0] +
	    bb.kb * emax[1] + bb.kc) * (1.0 + 0x1p-30), h, cand);
	rescore(v, dim, x, inv, ip, cand, nc, h, tmp);
}

static enum tq_status
nearest_rows(const struct tq_ivf *v, uint32_t dim, const float *x,
    size_t n, int normalise, int ip, uint32_t p, uint32_t *lists,
    float *scores)
{
	uint32_t nl = v->nlist, *cand = NULL, *xb = NULL, *xb1 = NULL;
	uint32_t k2 = (dim + 1) / 2;
	/*
	 * The bf16 filter for the nearest list of many rows (assignment,
	 * k-means): for several (probes of a batch of queries) its wider
	 * bound leaves more lists to re-check than it saves (Fashion-MNIST,
	 * 245 lists, 32 probes: 5 % fewer queries a second), and sgemm
	 * filters.  A single row (b1) has no sgemm to share the centroids'
	 * loads with: the filter halves them whatever p.
	 */
	const struct tq_bf16_kernel *bfk = p == 1 && n >= NEAR_BLAS_MIN &&
	    tq_bf16_kernel() != NULL && bf16_ready(v, dim) ? tq_bf16_kernel() :
	    NULL, *b1 = NULL;
	/* At most NEAR_ROWS rows, and about 64 MiB of scores, at a time. */
	size_t rb = ((size_t)16 << 20) / (bfk != NULL ? v->bfnl : nl), rb6;

	if (rb > NEAR_ROWS)
		rb = NEAR_ROWS;
	if (rb < 1)
		rb = 1;
	if (rb > n)
		rb = n;
	rb6 = (rb + TQ_BF16_ROWS - 1) / TQ_BF16_ROWS * TQ_BF16_ROWS;
	float *s = NULL, *s1 = NULL, *tmp = NULL;
	/* Per row: |x|; bf16 filter: |bf16(x)|, |x - bf16(x)|. */
	double *nx = NULL, *rn, *dn;
	struct tq_topk h;
	double u = 0x1p-24, gamma = (double)dim * u / (1.0 - (double)dim * u);
	enum tq_status st = TQ_OK;

	if (n == 0)
		return TQ_OK;
	if (p > nl)
		p = nl;
	memset(&h, 0, sizeof(h));
	s = tq_mallocarray(bfk != NULL ? rb6 : rb, (size_t)(bfk != NULL ?
	    v->bfnl : nl) * sizeof(float));
	nx = tq_mallocarray(rb, 3 * sizeof(*nx));
	rn = nx + rb;
	dn = nx + 2 * rb;
	cand = tq_mallocarray(nl, sizeof(*cand));
	if (bfk != NULL)
		xb = tq_mallocarray(rb6, (size_t)k2 * sizeof(*xb));
	if (v->cent == NULL)
		tmp = tq_mallocarray(WIDEN_LISTS, (size_t)dim * sizeof(*tmp));
	if (s == NULL || nx == NULL || cand == NULL || (bfk != NULL &&
	    xb == NULL) || (v->cent == NULL && tmp == NULL) ||
	    tq_topk_init(&h, p) != TQ_OK) {
		st = tq_fail(TQ_ERR_NOMEM, "lists: out of memory");
		goto done;
	}
	/* One row alone: the bf16 filter, once it pays (single_filter). */
	if (n == 1 && (b1 = single_filter(v, dim)) != NULL) {
		s1 = tq_mallocarray(v->bfnl > nl ? v->bfnl : nl,
		    sizeof(*s1));
		xb1 = tq_mallocarray(k2, sizeof(*xb1));
		if (s1 == NULL || xb1 == NULL)
			b1 = NULL;	/* the fixed order: the same lists */
	}
	for (size_t r0 = 0; r0 < n; r0 += rb) {
		size_t m = n - r0 < rb ? n - r0 : rb, ls = nl;
		/* A few rows (one query) are cheaper in the fixed order. */
		int exact = m < NEAR_BLAS_MIN, bf = bfk != NULL && !exact;

		row_norms(x + r0 * dim, m, dim, nx);
		for (size_t i = 0; i < m; i++)
			/* Also false for NaN: such rows go to sgemm. */
			bf = bf && nx[i] < TQ_BF16_MAX_NORM;
		/* Also false for NaN: the fixed order for all lists. */
		if (b1 != NULL && !(nx[0] < TQ_BF16_MAX_NORM))
			b1 = NULL;
		if (b1 != NULL) {
			/* single_rows, in the loop below */
		} else if (exact) {
			dot_lists(v, dim, x + r0 * dim, m, s, nl, 0, tmp);
		} else if (bf) {
			for (size_t i = 0; i < rb6; i++)
				if (i < m)
					bfk->row(x + (r0 + i) * dim, dim,
					    xb + i * k2, &rn[i], &dn[i]);
				else
					memset(xb + i * k2, 0, k2 * sizeof(*xb));
			bfk->gemm(xb, rb6, v->bfc, v->bfnl, k2, s, v->bfnl);
			ls = v->bfnl;
		} else {
			dot_lists(v, dim, x + r0 * dim, m, s, nl, 1, tmp);
		}
		for (size_t i = 0; i < m; i++) {
			const float *xi = x + (r0 + i) * dim, *si = s + i * ls;
			uint32_t *out = lists + (r0 + i) * p, nc, o, t;
			double e;
			float inv = 1.0f, thr;

			if (normalise)
				inv = nx[i] > 0.0 ? (float)(1.0 / nx[i]) : 0.0f;
			if (b1 != NULL) {
				single_rows(v, dim, b1, xi, nx[i], inv, ip, &h,
				    s1, xb1, cand, tmp);
				goto ranked;
			}
			if (exact) {
				/*
				 * The scores are already the fixed-order ones
				 * (a dot product does not depend on the rows
				 * beside it), and the heap orders (score,
				 * list) totally, NaN as -inf: its p lists are
				 * the answer, without a second pass.
				 */
				tq_topk_reset(&h);
				for (o = 0; o < nl; o++)
					tq_topk_push(&h, list_score(v, o, si[o],
					    inv, ip), o);
				goto ranked;
			}
			if (bf) {
				struct bfbound bb;

				bf16_bound(v, dim, nx[i], rn[i], dn[i], inv,
				    ip, &bb);
				nc = bf16_candidates(v, si, inv, ip, v->bfe,
				    &bb, (bb.ka * v->bfemax[0] + bb.kb *
				    v->bfemax[1] + bb.kc) * (1.0 + 0x1p-30),
				    &h, cand);
			} else {
				/*
				 * |sgemm - fixed order| <= 2 gamma |x| |c| for
				 * any summation order; the score doubles it
				 * for l2, and the few float operations after
				 * the dot add a few ulps of the largest
				 * magnitude involved.
				 */
				e = 2.0 * gamma * nx[i] * (double)inv * v->cmax;
				e = 2.0 * ((ip ? e : 2.0 * e) + 8.0 * u * (2.0 *
				    nx[i] * (double)inv * v->cmax + v->n2max));
				if (p == 1) {
					/* The heap's root for one list. */
					thr = (float)((double)best_score(v, si,
					    inv, ip) - 2.0 * e);
				} else {
					tq_topk_reset(&h);
					for (o = 0; o < nl; o++)
						tq_topk_push(&h, list_score(v,
						    o, si[o], inv, ip), o);
					thr = (float)((double)h.key[0] - 2.0 *
					    e);
				}
				/*
				 * "Not below", so that NaN scores (from
				 * centroids so large their products overflow)
				 * stay candidates: at least p lists come out.
				 */
				nc = scores_not_below(v, si, inv, ip, thr,
				    cand);
			}
			rescore(v, dim, xi, inv, ip, cand, nc, &h, tmp);
ranked:
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
	free(tmp);
	free(s1);
	free(xb1);
	free(s);
	free(nx);
	free(xb);
	free(cand);
	return st;
}

/*
 * Many rows with a single-threaded BLAS (the programs make it so: its
 * threads spin between calls and slow tq's own) are split over up to
 * `threads` threads here (0: as many as a multi-threaded BLAS would have
 * used; tq_ivf_nearest_threads keeps fewer than 512 rows on one).
 */
enum tq_status
tq_ivf_nearest(const struct tq_ivf *v, uint32_t dim, const float *x,
    size_t n, int normalise, int ip, uint32_t p, uint32_t *lists,
    float *scores, unsigned threads)
{
	if (tq_blas_threads() == 1)
		return tq_ivf_nearest_threads(v, dim, x, n, normalise, ip, p,
		    lists, scores, threads);
	return nearest_rows(v, dim, x, n, normalise, ip, p, lists, scores);
}

struct near_job {
	const struct tq_ivf *v;
	uint32_t dim, p;
	const float *x;
	size_t n;
	int normalise, ip;
	uint32_t *lists;
	float *scores;
	enum tq_status st;
	pthread_t tid;
	int started;
};

static void *
near_run(void *arg)
{
	struct near_job *j = arg;

	j->st = nearest_rows(j->v, j->dim, j->x, j->n, j->normalise, j->ip,
	    j->p, j->lists, j->scores);
	return NULL;
}

/*
 * tq_ivf_nearest on up to `threads` threads (0: one a CPU), each a
 * contiguous range of rows.  A row's lists do not depend on the rows
 * scored beside it, so the result is the same as on one thread.
 */
enum tq_status
tq_ivf_nearest_threads(const struct tq_ivf *v, uint32_t dim, const float *x,
    size_t n, int normalise, int ip, uint32_t p, uint32_t *lists,
    float *scores, unsigned threads)
{
	struct near_job job[64];
	unsigned nt = threads ? threads : tq_ncpu(), t;
	enum tq_status st = TQ_OK;

	if (p > v->nlist)
		p = v->nlist;
	if (nt > 64)
		nt = 64;
	/* At least one whole sgemm block a thread. */
	if (nt > n / NEAR_ROWS)
		nt = (unsigned)(n / NEAR_ROWS);
	if (nt <= 1)
		return nearest_rows(v, dim, x, n, normalise, ip, p, lists,
		    scores);
	for (t = 0; t < nt; t++) {
		size_t r0 = n * t / nt, r1 = n * (t + 1) / nt;

		job[t] = (struct near_job){ v, dim, p, x + r0 * dim, r1 - r0,
		    normalise, ip, lists + r0 * p,
		    scores != NULL ? scores + r0 * p : NULL, TQ_OK, 0, 0 };
	}
	for (t = 1; t < nt; t++)
		job[t].started = pthread_create(&job[t].tid, NULL, near_run,
		    &job[t]) == 0;
	near_run(&job[0]);
	for (t = 1; t < nt; t++) {
		if (job[t].started)
			pthread_join(job[t].tid, NULL);
		else
			near_run(&job[t]);
	}
	for (t = 0; t < nt; t++)
		if (job[t].st != TQ_OK && st == TQ_OK)
			st = job[t].st;
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
 *
 * Done one centre at a time this reads the whole subsample once per
 * centre (3 162 passes over 155 MB for 3 162 lists at d = 768), a
 * matrix-vector product bound by memory.  So the centres come in batches
 * of up to SEED_BATCH, and the distances are brought up to date once per
 * batch, a product of the rows with the batch's centres in tiles that
 * stay in cache, split between threads by rows.  Within a batch the draw
 * stays exactly k-means++: a row is drawn from the distances as the batch
 * started, d0, and kept with probability d / d0, d its distance to the
 * centres drawn so far including the batch's (rejection sampling: the
 * kept rows follow d exactly).  A long run of rejections (the batch took
 * most of the remaining mass) closes the batch early.
 *
 * Every distance is float fixed-order dot products (tq_dot_rows) combined
 * in double, so the draws, and the centres, are the same bits whatever
 * the thread count, the BLAS or the blocking.
 */
#define SEED_BATCH 64
#define SEED_REJECT 256
#define SEED_ROWS 128

struct seed_ctx {
	const float *x;		/* ms rows */
	const float *xn2;	/* their squared norms */
	uint32_t dim;
	const float *bc;	/* the batch's nb centres */
	const float *bn2;	/* their squared norms */
	uint32_t nb;
	double *dist;		/* squared distance to the nearest centre */
};

struct seed_job {
	const struct seed_ctx *c;
	size_t r0, r1;
	float *dot;		/* SEED_ROWS * SEED_BATCH */
	pthread_t tid;
	int started;
};

/* The squared distance of a row to a centre from their float products. */
static inline double
seed_d2(float xn2, float dot, float cn2)
{
	double d = (double)xn2 - 2.0 * (double)dot + (double)cn2;

	return d < 0.0 ? 0.0 : d;
}

static void *
seed_update(void *arg)
{
	struct seed_job *j = arg;
	const struct seed_ctx *c = j->c;
	uint32_t nb = c->nb, b;

	for (size_t r = j->r0; r < j->r1; r += SEED_ROWS) {
		size_t mr = j->r1 - r < SEED_ROWS ? j->r1 - r : SEED_ROWS;

		tq_dot_rows(c->x + r * c->dim, c->dim, mr, c->bc, nb, c->dim,
		    j->dot, nb);
		for (size_t i = 0; i < mr; i++) {
			double d = c->dist[r + i];

			for (b = 0; b < nb; b++) {
				double e = seed_d2(c->xn2[r + i],
				    j->dot[i * nb + b], c->bn2[b]);

				if (e < d)
					d = e;
			}
			c->dist[r + i] = d;
		}
	}
	return NULL;
}

/* seed_update over all ms rows on nt threads (the caller is one). */
static void
seed_update_all(const struct seed_ctx *c, size_t ms, struct seed_job *job,
    unsigned nt)
{
	unsigned t;

	for (t = 0; t < nt; t++) {
		job[t].c = c;
		job[t].r0 = ms * t / nt;
		job[t].r1 = ms * (t + 1) / nt;
	}
	for (t = 1; t < nt; t++)
		job[t].started = pthread_create(&job[t].tid, NULL, seed_update,
		    &job[t]) == 0;
	seed_update(&job[0]);
	for (t = 1; t < nt; t++) {
		if (job[t].started)
			pthread_join(job[t].tid, NULL);
		else
			seed_update(&job[t]);
	}
}

static enum tq_status
seed_plusplus(const float *x, size_t ms, uint32_t dim, uint32_t k,
    uint64_t *g, unsigned nt, const struct tq_kmeans_params *kp,
    float *cent)
{
	double *dist = tq_mallocarray(ms, sizeof(double));
	double *cum = tq_mallocarray(ms, sizeof(double));
	float *xn2 = tq_mallocarray(ms, sizeof(float));
	float *bn2 = tq_mallocarray(SEED_BATCH, sizeof(float));
	float *tmp = tq_mallocarray(SEED_BATCH, sizeof(float));
	struct seed_job *job = tq_callocarray(nt, sizeof(*job));
	struct seed_ctx sc;
	enum tq_status st = TQ_OK;
	size_t i, pick;
	uint32_t c = 0, nb, b;
	unsigned t;

	for (t = 0; job != NULL && t < nt; t++)
		if ((job[t].dot = tq_mallocarray((size_t)SEED_ROWS *
		    SEED_BATCH, sizeof(float))) == NULL)
			break;
	if (dist == NULL || cum == NULL || xn2 == NULL || bn2 == NULL ||
	    tmp == NULL || job == NULL || t < nt) {
		st = tq_fail(TQ_ERR_NOMEM, "k-means: out of memory");
		goto done;
	}
	for (i = 0; i < ms; i++) {
		tq_dot_rows(x + i * dim, dim, 1, x + i * dim, 1, dim, &xn2[i], 1);
		dist[i] = INFINITY;
	}
	sc = (struct seed_ctx){ x, xn2, dim, NULL, bn2, 0, dist };
	/* The first batch is one uniform row. */
	pick = (size_t)tq_rand_below(g, ms);
	memcpy(cent, x + pick * dim, dim * sizeof(float));
	bn2[0] = xn2[pick];
	nb = 1;
	for (;;) {
		double total = 0.0;
		unsigned rejects = 0;

		sc.bc = cent + (size_t)c * dim;
		sc.nb = nb;
		seed_update_all(&sc, ms, job, nt);
		c += nb;
		if (kp->progress != NULL)
			kp->progress(kp->progress_arg, "seeding", c, k);
		if (c == k)
			break;
		for (i = 0; i < ms; i++) {
			total += dist[i];
			cum[i] = total;
		}
		if (!(total > 0.0)) {
			/* Every row sits on a centre: take the next rows. */
			for (; c < k; c++) {
				pick = (pick + 1) % ms;
				memcpy(cent + (size_t)c * dim, x + pick * dim,
				    dim * sizeof(float));
			}
			break;
		}
		nb = 0;
		while (nb < SEED_BATCH && c + nb < k && rejects < SEED_REJECT) {
			double r = unit(g) * total, d0, d;
			size_t lo = 0, hi = ms;

			/* The first row whose running sum passes r. */
			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;

				if (cum[mid] > r)
					hi = mid;
				else
					lo = mid + 1;
			}
			if (lo == ms)	/* rounding: the last row drawable */
				for (lo = ms; lo-- > 0 && !(dist[lo] > 0.0);)
					;
			d = d0 = dist[lo];
			if (nb > 0)
				tq_dot_rows(x + lo * dim, dim, 1,
				    cent + (size_t)c * dim, nb, dim, tmp, nb);
			for (b = 0; b < nb; b++) {
				double e = seed_d2(xn2[lo], tmp[b], bn2[b]);

				if (e < d)
					d = e;
			}
			if (!(unit(g) * d0 < d)) {
				rejects++;
				continue;
			}
			rejects = 0;
			pick = lo;
			memcpy(cent + (size_t)(c + nb) * dim, x + pick * dim,
			    dim * sizeof(float));
			bn2[nb++] = xn2[pick];
		}
	}
done:
	for (t = 0; job != NULL && t < nt; t++)
		free(job[t].dot);
	free(job);
	free(dist);
	free(cum);
	free(xn2);
	free(bn2);
	free(tmp);
	return st;
}

/*
 * Lloyd iterations: assign (tq_ivf_nearest), then each centroid becomes
 * the mean of its rows, summed in double in row order.  An empty list
 * takes half of the largest one: that centroid is split into two copies
 * nudged apart, as FAISS does.
 */
enum tq_status
tq_kmeans_run(const float *x, size_t m, uint32_t dim, uint32_t k,
    unsigned iters, uint64_t seed, const struct tq_kmeans_params *kp,
    float *cent)
{
	unsigned nt = kp->threads ? kp->threads : tq_ncpu();
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
	if (nt > 64)
		nt = 64;
	TQ_TRY(seed_plusplus(x, ms, dim, k, &g, nt, kp, cent));

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

		if (kp->progress != NULL)
			kp->progress(kp->progress_arg, "k-means", it, iters);
		if ((st = tq_ivf_prepare(&v, dim)) != TQ_OK ||
		    (st = tq_ivf_nearest_threads(&v, dim, x, m, 0, 0, 1, lab,
		    NULL, nt)) != TQ_OK)
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
	tq_ivf_release(&v);
	free(lab);
	free(prev);
	free(cnt);
	free(sum);
	return st;
}

enum tq_status
tq_kmeans(const float *x, size_t m, uint32_t dim, uint32_t k,
    unsigned iters, uint64_t seed, float *cent)
{
	struct tq_kmeans_params kp = { 1, NULL, NULL };

	return tq_kmeans_run(x, m, dim, k, iters, seed, &kp, cent);
}
