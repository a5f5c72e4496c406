/*
 * rotation.c - the seeded random orthogonal rotation R (y = R x).
 *
 * Random numbers come from a portable generator so that a seed means the
 * same stream everywhere: xoshiro256** seeded by four outputs of
 * splitmix64(seed), uniform doubles from the top 53 bits, and Gaussians by
 * the Marsaglia polar method (pairs; only sqrt and log are used).
 *
 * Dense (TQ_ROT_DENSE), d x d.  A d x d double matrix G is filled with
 * N(0,1) in column-major order (row index fastest: G[i + j*d] is the
 * (i + j*d)-th Gaussian).  G = Q R' (Householder QR); column i of Q
 * is multiplied by sign(R'_ii) so that Q is Haar distributed.  (The QR
 * is our own blocked Householder code, see qr_orthogonal(): the same
 * bytes on every CPU, whatever BLAS is installed.)  The
 * rotation is R = Q^T, stored row-major as f32: payload[i*d + j] = Q[j][i],
 * which is exactly Q's column-major buffer rounded to float.
 *
 * Structured (TQ_ROT_STRUCTURED), for dimensions where a dense matrix is
 * too large (d = 65536 would be 16 GiB), or where rotating must be cheap.
 * R is a product of three rounds (five with narrow blocks, see below);
 * round r maps x to M_r P_r x, where P_r is a permutation (a gather:
 * (P x)[i] = x[perm[i]]) and M_r is block diagonal with nb dense
 * Haar-random orthogonal blocks.  For a block width w (256 unless the
 * fit asks for another, 1 .. 256), nb = ceil(d / w), lowered while
 * nb * nb > d; block b has s_b = floor(d / nb) + (b < d % nb) rows, so
 * blocks are w wide or a little more and never narrower than nb.  The
 * file stores nb; a reader takes any nb with nb * nb <= d and blocks of
 * at most ROT_MAX_S rows.  Small blocks make rotating cheap: at d = 784,
 * w = 256 gives 4 blocks of 196 (461k multiply-adds over three rounds,
 * against 615k dense), w <= 28 gives 28 blocks of 28.  Blocks narrower
 * than the default mix less per round: with three rounds of 32 blocks of
 * 32 at d = 1024 the distortion on sparse and smooth inputs was 2 to 8%
 * above dense.  At 4 bits over seven seeds, four rounds were 0.7 to 2.3%
 * above, five 0.3% on average (at most 1.8%; the default layout: 0.3%,
 * at most 1.2%), so such layouts take five rounds (110k multiply-adds at
 * d = 784, against 615k dense; test_quantizer checks three seeds), and
 * their stored blocks H act transposed, v -> H^T v (H^T is as Haar-random
 * as H): then y_i = sum over j of v_j H[j][i] accumulates in the order
 * j = 0, 1, ... and vectorises across i exactly, where a dot product per
 * output in the fixed order of the dot kernels spent most of its time
 * reducing 16 lanes and in a scalar tail (s = 28: 16 + 12).
 * Rounds 0, 2 (3, 4) use uniformly random permutations.  Round 1 uses
 * the "transpose" permutation: positions are listed by offset within a
 * round-0 block first, block second (k = 0, 1, ...; b = 0 .. nb-1,
 * skipping k >= s_b), so every round-1 block takes at least one coordinate
 * of every round-0 block (this needs s_b >= nb, hence the choice of nb).
 * Every output therefore depends on every input.  Sign flips are not
 * needed: Haar blocks are invariant under them.
 *
 * Structured payload, all f32 (integers stored as exact float values):
 *     [0] rounds (3 or 5)   [1] nb
 *     then for each round r = 0 .. rounds-1:
 *         perm:   d values, a permutation of 0 .. d-1
 *         blocks: for b = 0 .. nb-1, s_b x s_b row-major (v_b -> M_b v_b)
 * so the length is 4 * (2 + rounds * (d + sum s_b^2)) bytes.
 * Random numbers are drawn in this order: round 0 perm (Fisher-Yates,
 * i = d-1 down to 1, j uniform in 0..i by rejection), round 0 blocks in
 * order (each as the dense construction above at size s_b), round 1
 * blocks, round 2 perm, round 2 blocks, and rounds 3 and 4 likewise.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "internal.h"

#define ROT_BLOCK TQ_ROT_BLOCK_MAX
/* Rounds with the default blocks, and with narrower ones. */
#define ROT_ROUNDS 3u
#define ROT_ROUNDS_NARROW 5u
/* Rows per step when a block is applied in place through a stack buffer. */
#define ROT_CHUNK 16u
#define ROT_MAX_S 260u
/* Largest dimension a narrow layout rotates row by row (a stack buffer). */
#define ROT_ROW_MAX 4096u

/* ------------------------------------------------------------------------ */
/* Random numbers                                                            */

struct rng {
	uint64_t s[4];
	double spare;
	int has_spare;
};

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(struct rng *g)
{
	uint64_t *s = g->s;
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

static void
rng_seed(struct rng *g, uint64_t seed)
{
	uint64_t x = seed;
	int i;

	for (i = 0; i < 4; i++)
		g->s[i] = splitmix64(&x);
	g->has_spare = 0;
	g->spare = 0;
}

/* Uniform in [-1, 1). */
static double
rng_sym(struct rng *g)
{
	return (double)(rng_next(g) >> 11) * 0x1.0p-52 - 1.0;
}

static double
rng_gauss(struct rng *g)
{
	double u, v, s, m;

	if (g->has_spare) {
		g->has_spare = 0;
		return g->spare;
	}
	do {
		u = rng_sym(g);
		v = rng_sym(g);
		s = u * u + v * v;
	} while (s >= 1.0 || s == 0.0);
	m = sqrt(-2.0 * log(s) / s);
	g->spare = v * m;
	g->has_spare = 1;
	return u * m;
}

/* Uniform integer in 0 .. n-1 (n >= 1), without modulo bias. */
static uint64_t
rng_below(struct rng *g, uint64_t n)
{
	uint64_t lim = UINT64_MAX - UINT64_MAX % n, r;

	do
		r = rng_next(g);
	while (r >= lim);
	return r % n;
}

/* ------------------------------------------------------------------------ */
/* Haar-random orthogonal matrices                                           */

/*
 * Householder QR of the n x n column-major A, then Q formed in place, in
 * panels of QR_PANEL columns (compact WY, as LAPACK dgeqrf/dorgqr).  Our
 * own code rather than LAPACK because dgeqrf's result was measured to
 * change with OPENBLAS_NUM_THREADS (d = 784: 1 and 2 threads gave other
 * bytes).  The panel products are ours too: OpenBLAS's dgemm sums in an
 * order of its kernel's choosing, and the Haswell kernel gave other bytes
 * than the Prescott and SkylakeX ones (d = 1536), so the same seed made
 * another quantizer on another CPU.  Here every element of a product is
 * a sum in one written order (no fused multiply-add: -ffp-contract=off),
 * and the loops vectorise only across independent elements, so the bytes
 * do not depend on the CPU, the compiler's vector width or BLAS.
 */
#define QR_PANEL 64
/*
 * The panel products (panel_times, panel_update) are compiled at -O3 in
 * clones for AVX-512, AVX2 and baseline x86-64, one chosen when the
 * library loads.  They give the same bits: see the comment above them.
 * test_quantizer pins the bytes of three rotations; -DTQ_NO_CLONES
 * builds the baseline alone, for comparison.
 */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(TQ_NO_CLONES)
#define QR_CLONES __attribute__((target_clones("avx512f", "avx2", "default"), \
    optimize("O3")))
#else
#define QR_CLONES
#endif

struct qr_work {
	double *v;	/* n * QR_PANEL: explicit V of a panel */
	double *vt;	/* n * QR_PANEL: V transposed (row r: V[r, 0..pw)) */
	double *w;	/* QR_PANEL * n */
	double *t;	/* QR_PANEL * QR_PANEL, upper triangular T */
	double *tau;	/* n */
	double *sgn;	/* n: sign of R's diagonal */
};

/* Householder reflector for A[k:, k] (length m); LAPACK dlarfg convention. */
static void
reflector(double *x, size_t m, double *tau, double *beta)
{
	double alpha = x[0], sigma = 0, norm, scale;
	size_t i;

	for (i = 1; i < m; i++)
		sigma += x[i] * x[i];
	if (sigma == 0) {
		*tau = 0;
		*beta = alpha;
		return;
	}
	norm = sqrt(alpha * alpha + sigma);
	*beta = alpha <= 0 ? norm : -norm;
	*tau = (*beta - alpha) / *beta;
	scale = 1.0 / (alpha - *beta);
	for (i = 1; i < m; i++)
		x[i] *= scale;
	x[0] = *beta;
}

/* Copies the explicit V of panel k0..k0+pw-1 (rows k0..n-1) and forms T. */
static void
panel_vt(const double *a, size_t n, size_t k0, size_t pw, struct qr_work *q)
{
	size_t m = n - k0, i, j, r;

	for (j = 0; j < pw; j++) {
		double *v = q->v + j * m;
		const double *col = a + (k0 + j) * n + k0;

		for (r = 0; r < m; r++)
			v[r] = r < j ? 0 : r == j ? 1 : col[r];
	}
	/* dlarft (forward, columnwise): T[0:i, i] = -tau_i T[0:i,0:i] V^T v_i */
	for (i = 0; i < pw; i++) {
		double *ti = q->t + i * QR_PANEL, tau = q->tau[k0 + i];
		const double *vi = q->v + i * m;

		for (j = 0; j < i; j++) {
			const double *vj = q->v + j * m;
			double s = 0;

			for (r = i; r < m; r++)
				s += vj[r] * vi[r];
			ti[j] = -tau * s;
		}
		for (j = 0; j < i; j++) {	/* ti[0:i] = T[0:i,0:i] ti[0:i] */
			double s = 0;

			for (r = j; r < i; r++)
				s += q->t[r * QR_PANEL + j] * ti[r];
			ti[j] = s;
		}
		ti[i] = tau;
	}
}

/*
 * The two panel products below hold nearly all of the O(n^3) work.  Each
 * element is one sum in a written order; the vectors (GCC's generic
 * vector extension: lane-wise multiplies and subtracts, never fused)
 * hold 8 independent elements, so every clone gives the same bits.
 */
typedef double qr_f64x8 __attribute__((vector_size(64), aligned(8)));

/* Unaligned 8-double moves (memcpy compiles to one vector move). */
#define QR_LOAD8(v, p) memcpy(&(v), (p), sizeof(qr_f64x8))
#define QR_STORE8(p, v) memcpy((p), &(v), sizeof(qr_f64x8))

/* W (pw x nc) <- V^T C: W[j, col] = sum over r = 0 .. m-1 of V[r, j] C[r, col]. */
QR_CLONES static void
panel_times(const double *c, size_t n, size_t m, size_t nc, size_t pw,
    struct qr_work *q)
{
	size_t col, r, j, t, b;

	for (r = 0; r < m; r++)
		for (j = 0; j < pw; j++)
			q->vt[r * pw + j] = q->v[j * m + r];
	for (col = 0; col + 4 <= nc; col += 4) {
		const double *c0 = c + col * n, *c1 = c0 + n, *c2 = c1 + n,
		    *c3 = c2 + n;
		double *w = q->w + col * pw;

		for (j = 0; j + 8 <= pw; j += 8) {
			qr_f64x8 a0 = { 0 }, a1 = { 0 }, a2 = { 0 }, a3 = { 0 };

			for (r = 0; r < m; r++) {
				qr_f64x8 v;

				QR_LOAD8(v, q->vt + r * pw + j);
				a0 += v * c0[r];
				a1 += v * c1[r];
				a2 += v * c2[r];
				a3 += v * c3[r];
			}
			QR_STORE8(w + j, a0);
			QR_STORE8(w + pw + j, a1);
			QR_STORE8(w + 2 * pw + j, a2);
			QR_STORE8(w + 3 * pw + j, a3);
		}
		for (b = 0; b < 4; b++)
			for (t = j; t < pw; t++) {
				const double *cb = c0 + b * n;
				double s = 0;

				for (r = 0; r < m; r++)
					s += q->vt[r * pw + t] * cb[r];
				w[b * pw + t] = s;
			}
	}
	for (; col < nc; col++)
		for (t = 0; t < pw; t++) {
			const double *cb = c + col * n;
			double s = 0;

			for (r = 0; r < m; r++)
				s += q->vt[r * pw + t] * cb[r];
			q->w[col * pw + t] = s;
		}
}

/*
 * C -= V W: C[r, col] minus V[r, j] W[j, col] for j = 0 .. pw-1 in
 * order.  Rows 8 at a time for 4 columns, held in registers over all j.
 */
QR_CLONES static void
panel_update(double *c, size_t n, size_t m, size_t nc, size_t pw,
    const struct qr_work *q)
{
	size_t col, r, j, t, b;

	for (col = 0; col + 4 <= nc; col += 4) {
		double *c0 = c + col * n, *c1 = c0 + n, *c2 = c1 + n,
		    *c3 = c2 + n;
		const double *w = q->w + col * pw;

		for (r = 0; r + 8 <= m; r += 8) {
			qr_f64x8 a0, a1, a2, a3;

			QR_LOAD8(a0, c0 + r);
			QR_LOAD8(a1, c1 + r);
			QR_LOAD8(a2, c2 + r);
			QR_LOAD8(a3, c3 + r);
			for (j = 0; j < pw; j++) {
				qr_f64x8 v;

				QR_LOAD8(v, q->v + j * m + r);
				a0 -= v * w[j];
				a1 -= v * w[pw + j];
				a2 -= v * w[2 * pw + j];
				a3 -= v * w[3 * pw + j];
			}
			QR_STORE8(c0 + r, a0);
			QR_STORE8(c1 + r, a1);
			QR_STORE8(c2 + r, a2);
			QR_STORE8(c3 + r, a3);
		}
		for (b = 0; b < 4; b++)
			for (t = r; t < m; t++) {
				double *cb = c0 + b * n, s = cb[t];

				for (j = 0; j < pw; j++)
					s -= q->v[j * m + t] * w[b * pw + j];
				cb[t] = s;
			}
	}
	for (; col < nc; col++) {
		double *cb = c + col * n;
		const double *w = q->w + col * pw;

		for (t = 0; t < m; t++) {
			double s = cb[t];

			for (j = 0; j < pw; j++)
				s -= q->v[j * m + t] * w[j];
			cb[t] = s;
		}
	}
}

/*
 * C (m x nc, leading dimension n) <- (I - V T V^T) C, or with T^T when
 * trans (that is, H^T = H_pw...H_1 for the factorization).
 */
static void
block_reflect(double *c, size_t n, size_t m, size_t nc, size_t pw,
    int trans, struct qr_work *q)
{
	size_t col, i, k;

	if (nc == 0)
		return;
	panel_times(c, n, m, nc, pw, q);
	for (col = 0; col < nc; col++) {
		double *w = q->w + col * pw;

		if (trans) {
			for (i = pw; i-- > 0;) {
				double s = 0;

				for (k = 0; k <= i; k++)
					s += q->t[i * QR_PANEL + k] * w[k];
				w[i] = s;
			}
		} else {
			for (i = 0; i < pw; i++) {
				double s = 0;

				for (k = i; k < pw; k++)
					s += q->t[k * QR_PANEL + i] * w[k];
				w[i] = s;
			}
		}
	}
	panel_update(c, n, m, nc, pw, q);
}

/* A (n x n, column-major) <- Q of its QR factorization, sign-corrected. */
static void
qr_orthogonal(double *a, size_t n, struct qr_work *q)
{
	size_t k0, k, j, i, np = (n + QR_PANEL - 1) / QR_PANEL, p;

	for (k0 = 0; k0 < n; k0 += QR_PANEL) {
		size_t pw = n - k0 < QR_PANEL ? n - k0 : QR_PANEL;

		for (k = k0; k < k0 + pw; k++) {
			double *x = a + k * n + k, beta, tau;

			reflector(x, n - k, &q->tau[k], &beta);
			q->sgn[k] = beta < 0 ? -1.0 : 1.0;
			tau = q->tau[k];
			if (tau == 0)
				continue;
			for (j = k + 1; j < k0 + pw; j++) {
				double *y = a + j * n + k, s = y[0];

				for (i = 1; i < n - k; i++)
					s += x[i] * y[i];
				s *= tau;
				y[0] -= s;
				for (i = 1; i < n - k; i++)
					y[i] -= s * x[i];
			}
		}
		if (k0 + pw < n) {
			panel_vt(a, n, k0, pw, q);
			block_reflect(a + (k0 + pw) * n + k0, n, n - k0,
			    n - k0 - pw, pw, 1, q);
		}
	}
	/* Q = H_1 ... H_n I, accumulated from the last panel backwards. */
	for (p = np; p-- > 0;) {
		size_t pw;

		k0 = p * QR_PANEL;
		pw = n - k0 < QR_PANEL ? n - k0 : QR_PANEL;
		panel_vt(a, n, k0, pw, q);
		for (j = k0; j < n; j++) {
			double *col = a + j * n;

			if (j < k0 + pw) {
				for (i = 0; i < n; i++)
					col[i] = i == j;
			} else {
				for (i = k0; i < k0 + pw; i++)
					col[i] = 0;
			}
		}
		block_reflect(a + k0 * n + k0, n, n - k0, n - k0, pw, 0, q);
	}
	for (j = 0; j < n; j++)
		if (q->sgn[j] < 0)
			for (i = 0; i < n; i++)
				a[j * n + i] = -a[j * n + i];
}

/*
 * Writes a Haar-random n x n orthogonal matrix, row-major f32, to out
 * (R = Q^T as described at the top).  work holds n*n doubles.
 */
static void
haar(struct rng *g, uint32_t n, double *work, struct qr_work *q, float *out)
{
	size_t nn = (size_t)n * n, i;

	for (i = 0; i < nn; i++)
		work[i] = rng_gauss(g);
	qr_orthogonal(work, n, q);
	/* Column j of Q (contiguous) is row j of R. */
	for (i = 0; i < nn; i++)
		out[i] = (float)work[i];
}

static void
qr_work_free(struct qr_work *q)
{
	free(q->v);
	free(q->vt);
	free(q->w);
	free(q->t);
	free(q->tau);
	free(q->sgn);
}

static enum tq_status
qr_work_alloc(struct qr_work *q, size_t n)
{
	q->v = tq_mallocarray(n, QR_PANEL * sizeof(double));
	q->vt = tq_mallocarray(n, QR_PANEL * sizeof(double));
	q->w = tq_mallocarray(n, QR_PANEL * sizeof(double));
	q->t = tq_mallocarray(QR_PANEL * QR_PANEL, sizeof(double));
	q->tau = tq_mallocarray(n, sizeof(double));
	q->sgn = tq_mallocarray(n, sizeof(double));
	if (!q->v || !q->vt || !q->w || !q->t || !q->tau || !q->sgn) {
		qr_work_free(q);
		return tq_fail(TQ_ERR_NOMEM, "rotation: out of memory");
	}
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Structured layout                                                         */

static uint32_t
struct_nblocks(uint32_t d, uint32_t width)
{
	uint32_t nb = (d + width - 1) / width;

	while (nb > 1 && (uint64_t)nb * nb > d)
		nb--;
	return nb;
}

/* The rounds of a layout of nb blocks: one more when they are narrow. */
static uint32_t
struct_rounds(uint32_t d, uint32_t nb)
{
	return nb == struct_nblocks(d, ROT_BLOCK) ? ROT_ROUNDS :
	    ROT_ROUNDS_NARROW;
}

/*
 * The block count of a structured payload's header (rounds, nb), or 0 if
 * the header is not one this code makes: an integral nb >= 1 with
 * nb * nb <= d (the transposition needs blocks at least nb wide) and
 * blocks of at most ROT_MAX_S rows, and the rounds struct_rounds gives.
 */
static uint32_t
struct_nb_of(uint32_t d, const uint8_t *p)
{
	float r = rd_lef32(p), v = rd_lef32(p + 4);
	uint32_t nb;

	if (!(v >= 1.0f && v <= (float)d) || v != floorf(v))
		return 0;
	nb = (uint32_t)v;
	if ((uint64_t)nb * nb > d || (d + nb - 1) / nb > ROT_MAX_S ||
	    r != (float)struct_rounds(d, nb))
		return 0;
	return nb;
}

static uint32_t
struct_size(uint32_t d, uint32_t nb, uint32_t b)
{
	return d / nb + (b < d % nb);
}

/* Floats of the structured payload. */
static size_t
struct_floats(uint32_t d, uint32_t nb)
{
	size_t sq = 0;
	uint32_t b;

	for (b = 0; b < nb; b++) {
		size_t s = struct_size(d, nb, b);

		sq += s * s;
	}
	return 2 + struct_rounds(d, nb) * ((size_t)d + sq);
}

static void
transpose_perm(uint32_t d, uint32_t nb, float *perm)
{
	uint32_t smax = struct_size(d, nb, 0), k, b, p = 0;

	for (k = 0; k < smax; k++)
		for (b = 0; b < nb; b++)
			if (k < struct_size(d, nb, b))
				perm[p++] = (float)((uint64_t)b * (d / nb) +
				    (b < d % nb ? b : d % nb) + k);
}

/* A uniformly random permutation of 0 .. d-1 into p (Fisher-Yates). */
static void
random_perm(struct rng *g, uint32_t d, float *p)
{
	uint32_t i;

	for (i = 0; i < d; i++)
		p[i] = (float)i;
	for (i = d - 1; i > 0; i--) {
		uint32_t j = (uint32_t)rng_below(g, (uint64_t)i + 1);
		float t = p[i];

		p[i] = p[j];
		p[j] = t;
	}
}

static enum tq_status
make_structured(uint32_t d, uint32_t nb, struct rng *g, float *p)
{
	uint32_t smax = struct_size(d, nb, 0);
	uint32_t r, b;
	double *work;
	struct qr_work qw;

	if ((work = tq_mallocarray((size_t)smax * smax, sizeof(double))) ==
	    NULL)
		return tq_fail(TQ_ERR_NOMEM, "rotation: out of memory");
	if (qr_work_alloc(&qw, smax) != TQ_OK) {
		free(work);
		return TQ_ERR_NOMEM;
	}
	*p++ = (float)struct_rounds(d, nb);
	*p++ = (float)nb;
	for (r = 0; r < struct_rounds(d, nb); r++) {
		if (r == 1)
			transpose_perm(d, nb, p);
		else
			random_perm(g, d, p);
		p += d;
		for (b = 0; b < nb; b++) {
			uint32_t s = struct_size(d, nb, b);

			haar(g, s, work, &qw, p);
			p += (size_t)s * s;
		}
	}
	free(work);
	qr_work_free(&qw);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Hadamard layout                                                           */

/*
 * Hadamard (TQ_ROT_HADAMARD): no stored matrix.  With p the largest power
 * of two <= d, each of HAD_ROUNDS (4) rounds maps v to
 *
 *     v <- P v;  v <- A v;  v[0 .. p) <- H v[0 .. p);
 *     if p < d:  v <- B v;  v[d-p .. d) <- H v[d-p .. d)
 *
 * where P is a uniformly random permutation (a gather, as above), A and B
 * diagonal matrices of random signs and H the Walsh-Hadamard matrix of
 * order p divided by sqrt(p) (orthogonal and its own inverse).  As p >
 * d / 2 the two transforms overlap, so after one round every output
 * depends on every input.  Random signs before a Hadamard transform
 * spread any fixed vector: two to four rounds gave the quantizer's
 * distortion of a dense Haar rotation at 2 and 4 bits on Fashion-MNIST
 * (784), text-384 and GloVe-100 and on one-hot and smooth inputs at 256
 * to 1536 (mean and 99th percentile within 2 %).  Recall is the finer
 * test: 1-bit codes of text-384 (flat, no re-rank, eleven seeds) gave
 * recall@10 0.6641 with a dense rotation, 0.6617 with three rounds and
 * 0.6641 with four (standard error 0.001), hence four.  They cost about
 * 8 p log2 p additions and 4 d gathers (at d = 1536, 82k additions
 * against the narrowest structured layout's 300k multiply-adds from 1.2
 * MB of blocks, which a query after a scan reads from L3): one row took
 * 3.5, 7.2 and 14 us at d = 384, 784 and 1536 against 6.1, 14 and 33 us
 * (scripts/bench-rotate.c, AVX-512).
 *
 * Payload, all f32 (integers and signs as exact float values):
 *     [0] rounds (4)   [1] p
 *     then for each round: perm (d values, a permutation of 0 .. d-1),
 *     A (d values, each +1 or -1), and B (d values) if p < d,
 * so the length is 4 * (2 + 4 d (2 + (p < d))) bytes.  Random numbers are
 * drawn in this order, round by round: the permutation (as the
 * structured layout's), then A's signs and B's, one output of the
 * generator each (its top bit set: -1).
 *
 * The transform adds and subtracts in one fixed order and scales by the
 * float nearest 1 / sqrt(p); the loops vectorise only across independent
 * elements, so the bytes are the same on every CPU and instruction set.
 */
#define HAD_ROUNDS 4u
/* Largest dimension a row is permuted through a stack buffer. */
#define HAD_STACK 4096u

static uint32_t
had_p(uint32_t d)
{
	uint32_t p = 1;

	while (p <= d / 2)
		p *= 2;
	return p;
}

/* Floats of a round of the Hadamard payload. */
static size_t
had_round(uint32_t d)
{
	return (size_t)d * (had_p(d) < d ? 3 : 2);
}

static size_t
had_floats(uint32_t d)
{
	return 2 + (size_t)HAD_ROUNDS * had_round(d);
}

static void
make_hadamard(uint32_t d, struct rng *g, float *p)
{
	uint32_t r, i, ns = had_p(d) < d ? 2 : 1, k;

	*p++ = (float)HAD_ROUNDS;
	*p++ = (float)had_p(d);
	for (r = 0; r < HAD_ROUNDS; r++) {
		random_perm(g, d, p);
		p += d;
		for (k = 0; k < ns; k++, p += d)
			for (i = 0; i < d; i++)
				p[i] = rng_next(g) >> 63 ? -1.0f : 1.0f;
	}
}

/* ------------------------------------------------------------------------ */
/* Making and checking payloads                                              */

/*
 * Auto: a dense rotation below TQ_ROT_NARROW_MIN dimensions, where it
 * costs little, else the Hadamard one, which loses no recall against
 * the dense one on real sets (bench-rotation) and costs a small part of
 * it to apply: at d = 784, 37k additions from 37 KB against 615k
 * multiply-adds from 2.4 MB (and the narrowest structured layout, the
 * default before it, 110k from 0.45 MB).  A block width asks for a
 * structured rotation.
 */
enum tq_rotation
tq_rotation_resolve(uint32_t dim, enum tq_rotation kind, uint32_t width)
{
	if (kind == TQ_ROT_AUTO)
		return width != 0 ? TQ_ROT_STRUCTURED :
		    dim < TQ_ROT_NARROW_MIN ? TQ_ROT_DENSE : TQ_ROT_HADAMARD;
	return kind;
}

enum tq_status
tq_rotation_make(uint32_t dim, enum tq_rotation kind, uint32_t width,
    uint64_t seed, float **payload, size_t *len)
{
	struct rng g;
	size_t nf;
	float *p;
	enum tq_status st;

	*payload = NULL;
	*len = 0;
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "dimension %u out of range 1..%u",
		    (unsigned)dim, (unsigned)TQ_MAX_DIM);
	kind = tq_rotation_resolve(dim, kind, width);
	if (kind != TQ_ROT_DENSE && kind != TQ_ROT_STRUCTURED &&
	    kind != TQ_ROT_HADAMARD)
		return tq_fail(TQ_ERR_ARG, "unknown rotation kind %d",
		    (int)kind);
	if (kind == TQ_ROT_DENSE && dim > TQ_DENSE_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "a dense rotation is limited to "
		    "dimension %u", (unsigned)TQ_DENSE_MAX_DIM);
	if (width > ROT_BLOCK)
		return tq_fail(TQ_ERR_ARG, "rotation block width %u out of "
		    "range 1..%u", (unsigned)width, (unsigned)ROT_BLOCK);
	if (kind != TQ_ROT_STRUCTURED && width != 0)
		return tq_fail(TQ_ERR_ARG, "a block width needs a structured "
		    "rotation");
	if (width == 0)
		width = ROT_BLOCK;
	rng_seed(&g, seed);
	if (kind == TQ_ROT_DENSE) {
		double *work;
		struct qr_work qw;

		nf = (size_t)dim * dim;
		p = tq_mallocarray(nf, sizeof(float));
		work = tq_mallocarray(nf, sizeof(double));
		if (p == NULL || work == NULL) {
			free(p);
			free(work);
			return tq_fail(TQ_ERR_NOMEM, "rotation: out of memory");
		}
		if ((st = qr_work_alloc(&qw, dim)) == TQ_OK) {
			haar(&g, dim, work, &qw, p);
			qr_work_free(&qw);
		}
		free(work);
	} else if (kind == TQ_ROT_HADAMARD) {
		nf = had_floats(dim);
		if ((p = tq_mallocarray(nf, sizeof(float))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "rotation: out of memory");
		make_hadamard(dim, &g, p);
		st = TQ_OK;
	} else {
		uint32_t nb = struct_nblocks(dim, width);

		nf = struct_floats(dim, nb);
		if ((p = tq_mallocarray(nf, sizeof(float))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "rotation: out of memory");
		st = make_structured(dim, nb, &g, p);
	}
	if (st != TQ_OK) {
		free(p);
		return st;
	}
	*payload = p;
	*len = nf * sizeof(float);
	return TQ_OK;
}

/* Entries of an orthogonal matrix lie in [-1, 1]; allow f32 rounding. */
static int
unit_entry(float v)
{
	return v >= -1.001f && v <= 1.001f;
}

/* A Hadamard layout's signs. */
static int
sign_entry(float v)
{
	return v == 1.0f || v == -1.0f;
}

/* 1 if the d floats at p are a permutation of 0 .. d-1 (seen: d bytes). */
static int
is_perm(const uint8_t *p, uint32_t d, uint8_t *seen)
{
	memset(seen, 0, d);
	for (uint32_t i = 0; i < d; i++) {
		float v = rd_lef32(p + 4 * (size_t)i);

		/* Integral, in range and not seen before. */
		if (!(v >= 0 && v < (float)d) || v != floorf(v) ||
		    seen[(uint32_t)v]++)
			return 0;
	}
	return 1;
}

/*
 * The rounds of a structured or Hadamard payload p, from its third float:
 * each a permutation of 0 .. d-1, then `rest` entries that ok() accepts
 * (`what` says what they must be).
 */
static enum tq_status
check_rounds(const uint8_t *p, uint32_t d, uint32_t rounds, size_t rest,
    int (*ok)(float), const char *what)
{
	uint8_t *seen = malloc(d);
	size_t at = 2, e;
	uint32_t r;

	if (seen == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	for (r = 0; r < rounds; r++) {
		if (!is_perm(p + 4 * at, d, seen)) {
			free(seen);
			return tq_fail(TQ_ERR_FORMAT, "section ROTM: round %u "
			    "is not a permutation", r);
		}
		for (at += d, e = 0; e < rest; e++, at++)
			if (!ok(rd_lef32(p + 4 * at))) {
				free(seen);
				return tq_fail(TQ_ERR_FORMAT, "section ROTM: "
				    "entry %zu is not %s", at, what);
			}
	}
	free(seen);
	return TQ_OK;
}

enum tq_status
tq_rotation_check(uint32_t dim, enum tq_rotation kind, const void *payload,
    size_t len)
{
	const uint8_t *p = payload;
	size_t nf, i;
	uint32_t nb;

	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT, "section ROTM: dimension %u out "
		    "of range", (unsigned)dim);
	if (kind == TQ_ROT_DENSE) {
		if (dim > TQ_DENSE_MAX_DIM)
			return tq_fail(TQ_ERR_FORMAT, "section ROTM: dense "
			    "rotation at dimension %u", (unsigned)dim);
		nf = (size_t)dim * dim;
		if (len != nf * 4)
			return tq_fail(TQ_ERR_FORMAT, "section ROTM: length %zu, "
			    "expected %zu", len, nf * 4);
		for (i = 0; i < nf; i++)
			if (!unit_entry(rd_lef32(p + 4 * i)))
				return tq_fail(TQ_ERR_FORMAT, "section ROTM: "
				    "entry %zu is not in [-1, 1]", i);
		return TQ_OK;
	}
	if (kind == TQ_ROT_HADAMARD) {
		if (len < 8 || rd_lef32(p) != (float)HAD_ROUNDS ||
		    rd_lef32(p + 4) != (float)had_p(dim))
			return tq_fail(TQ_ERR_FORMAT, "section ROTM: bad "
			    "Hadamard header");
		nf = had_floats(dim);
	} else if (kind == TQ_ROT_STRUCTURED) {
		if (len < 8 || (nb = struct_nb_of(dim, p)) == 0)
			return tq_fail(TQ_ERR_FORMAT, "section ROTM: bad "
			    "structured header");
		nf = struct_floats(dim, nb);
	} else {
		return tq_fail(TQ_ERR_FORMAT, "unknown rotation kind %d",
		    (int)kind);
	}
	if (len != nf * 4)
		return tq_fail(TQ_ERR_FORMAT, "section ROTM: length %zu, "
		    "expected %zu", len, nf * 4);
	if (kind == TQ_ROT_HADAMARD)
		return check_rounds(p, dim, HAD_ROUNDS, had_round(dim) - dim,
		    sign_entry, "a sign");
	return check_rounds(p, dim, struct_rounds(dim, nb), (nf - 2) /
	    struct_rounds(dim, nb) - dim, unit_entry, "in [-1, 1]");
}

/* ------------------------------------------------------------------------ */
/* Applying                                                                  */

/*
 * Products with R are computed here rather than by sgemm: OpenBLAS was
 * measured to round differently with another thread count and for other
 * matrix shapes (OPENBLAS_NUM_THREADS=1 and =2 gave other codes for the
 * same rows), and the index must not depend on either.  Each output is a
 * dot product in the one fixed order of lib/kern/dot_scalar.c, which the
 * SSE2, AVX2 and AVX-512 kernels all reproduce bit for bit, so the bytes
 * are the same on every x86-64, instruction set and thread count.
 */
/*
 * Tiles of about 128 KiB of rows of a (outputs) times 128 KiB of rows of
 * x, so both stay in L2 while they meet.  Tiling changes nothing in the
 * result: every output is one dot product in the fixed order.
 */
static void
rows_times_at(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	uint32_t ob = (32768 / k + 4) & ~3u, o;
	size_t rb = (32768 / k + 4) & ~(size_t)3, i;
	tq_dot_fn dot = tq_dot_kernel();

	if (ob < 4)
		ob = 4;
	if (rb < 4)
		rb = 4;
	for (i = 0; i < n; i += rb)
		for (o = 0; o < m; o += ob)
			dot(x + i * ldx, ldx, n - i < rb ? n - i : rb,
			    a + (size_t)o * k, m - o < ob ? m - o : ob, k,
			    y + i * ldy + o, ldy);
}

/*
 * x[j] = sum over o of y[o] a[o*k + j] (the square k x k matrix a), for
 * each of n rows of y into the rows of x, in the order of the rowa
 * kernels (lib/kern/dot_scalar.c).
 */
static void
rows_times_a(const float *restrict y, size_t ldy, size_t n,
    const float *restrict a, uint32_t k, float *restrict x, size_t ldx)
{
	tq_rowa_fn rowa = tq_kernels()->rowa;

	for (size_t i = 0; i < n; i++)
		rowa(y + i * ldy, a, 1, k, x + i * ldx);
}


/* visited bitmap for in-place permutation of up to TQ_MAX_DIM entries */
#define BITMAP_WORDS (TQ_MAX_DIM / 64)

/* In place, v[i] = v[perm[i]] (gather). */
static void
permute_gather(float *v, const float *perm, uint32_t d, uint64_t *mark)
{
	uint32_t i, j, k;

	memset(mark, 0, ((d + 63) / 64) * sizeof(uint64_t));
	for (i = 0; i < d; i++) {
		float t;

		if (mark[i / 64] >> (i % 64) & 1)
			continue;
		t = v[i];
		j = i;
		for (;;) {
			mark[j / 64] |= 1ull << (j % 64);
			k = (uint32_t)perm[j];
			if (k == i) {
				v[j] = t;
				break;
			}
			v[j] = v[k];
			j = k;
		}
	}
}

/* In place, w[perm[i]] = v[i] (scatter, the inverse of the gather). */
static void
permute_scatter(float *v, const float *perm, uint32_t d, uint64_t *mark)
{
	uint32_t i, j, k;

	memset(mark, 0, ((d + 63) / 64) * sizeof(uint64_t));
	for (i = 0; i < d; i++) {
		float carry;

		if (mark[i / 64] >> (i % 64) & 1)
			continue;
		carry = v[i];
		j = i;
		do {
			float t;

			mark[j / 64] |= 1ull << (j % 64);
			k = (uint32_t)perm[j];
			t = v[k];
			v[k] = carry;
			carry = t;
			j = k;
		} while (j != i);
	}
}

/*
 * In place on the n x d row-major y: columns off .. off+s of every row
 * are replaced by M v (trans = 0) or M^T v (trans = 1), through a stack
 * buffer of ROT_CHUNK rows.
 */
static void
block_apply(float *y, size_t n, uint32_t d, uint32_t off, uint32_t s,
    const float *m, int trans)
{
	float in[ROT_CHUNK * ROT_MAX_S];
	size_t r0, r;

	for (r0 = 0; r0 < n; r0 += ROT_CHUNK) {
		size_t rows = n - r0 < ROT_CHUNK ? n - r0 : ROT_CHUNK;

		for (r = 0; r < rows; r++)
			memcpy(in + r * s, y + (r0 + r) * d + off,
			    s * sizeof(float));
		if (trans)
			rows_times_a(in, s, rows, m, s, y + r0 * d + off, d);
		else
			rows_times_at(in, s, rows, m, s, s, y + r0 * d + off,
			    d);
	}
}

/*
 * One row through a narrow layout (d <= ROT_ROW_MAX), through a buffer
 * so that the permutations are plain gathers and scatters.
 */
static void
narrow_row(const float *const *round, int nr, uint32_t nb, uint32_t d,
    float *v, int inv)
{
	float tmp[ROT_ROW_MAX];
	tq_rowa_fn rowa = tq_kernels()->rowa;
	uint32_t b, off, i;
	int r;

	for (r = inv ? nr - 1 : 0; r >= 0 && r < nr; r += inv ? -1 : 1) {
		const float *perm = round[r], *m = round[r] + d;

		if (!inv) {
			/*
			 * The blocks in their two runs of equal size (see
			 * struct_size), each one kernel call, which takes
			 * several blocks side by side.
			 */
			uint32_t big = d % nb, s1 = d / nb + 1;

			for (i = 0; i < d; i++)
				tmp[i] = v[(uint32_t)perm[i]];
			rowa(tmp, m, big, s1, v);
			off = big * s1;
			rowa(tmp + off, m + (size_t)big * s1 * s1, nb - big,
			    s1 - 1, v + off);
		} else {
			for (b = 0, off = 0; b < nb; b++) {
				uint32_t s = struct_size(d, nb, b);

				rows_times_at(v + off, s, 1, m, s, s, tmp + off,
				    s);
				m += (size_t)s * s;
				off += s;
			}
			for (i = 0; i < d; i++)
				v[(uint32_t)perm[i]] = tmp[i];
		}
	}
}

/* Rows a group of narrow_rows: 16 rows of 768 are 48 KiB of buffer. */
#define NARROW_GROUP 16u

/*
 * Many rows forward through a narrow layout, block by block for a group
 * of rows (the kernel's rowa_rows, AVX2 and AVX-512): each block's
 * matrix is read once for the group, where narrow_row streams a round's
 * matrices from L2 for every row (at d = 768, 86 KiB a round).  The same
 * products in the same order, so the same bits.  0 without the buffer's
 * memory (the caller then goes row by row).
 */
static int
narrow_rows(const float *const *round, int nr, uint32_t nb, uint32_t d,
    float *y, size_t n, tq_rowa_rows_fn rows)
{
	float *tmp = tq_mallocarray((size_t)NARROW_GROUP * d, sizeof(float));

	if (tmp == NULL)
		return 0;
	for (size_t t0 = 0; t0 < n; t0 += NARROW_GROUP) {
		size_t g = n - t0 < NARROW_GROUP ? n - t0 : NARROW_GROUP;
		float *v = y + t0 * d;

		for (int r = 0; r < nr; r++) {
			const float *perm = round[r], *m = round[r] + d;
			uint32_t off = 0;

			for (size_t t = 0; t < g; t++)
				for (uint32_t i = 0; i < d; i++)
					tmp[t * d + i] = v[t * d +
					    (uint32_t)perm[i]];
			for (uint32_t b = 0; b < nb; b++) {
				uint32_t s = struct_size(d, nb, b);

				rows(tmp + off, d, m, g, s, v + off, d);
				m += (size_t)s * s;
				off += s;
			}
		}
	}
	free(tmp);
	return 1;
}

static void
structured_apply(const float *rot, uint32_t d, float *y, size_t n, int inv)
{
	uint64_t mark[BITMAP_WORDS];
	uint32_t nb = (uint32_t)rot[1], b, off;	/* checked on load */
	const int nr = (int)rot[0];	/* checked on load */
	/*
	 * A narrow layout's block H acts as v -> H^T v (see the opening
	 * comment), computed as v^T H by rows_times_a.
	 */
	const int tr = nr == (int)ROT_ROUNDS_NARROW;
	const float *round[ROT_ROUNDS_NARROW];
	size_t per = (size_t)(struct_floats(d, nb) - 2) / (size_t)nr, t;
	int r;

	for (r = 0; r < nr; r++)
		round[r] = rot + 2 + (size_t)r * per;
	if (tr && d <= ROT_ROW_MAX) {
		tq_rowa_rows_fn rows = tq_kernels()->rowa_rows;

		if (!inv && n > 1 && rows != NULL &&
		    narrow_rows(round, nr, nb, d, y, n, rows))
			return;
		for (t = 0; t < n; t++)
			narrow_row(round, nr, nb, d, y + t * d, inv);
		return;
	}
	for (r = inv ? nr - 1 : 0; r >= 0 && r < nr; r += inv ? -1 : 1) {
		const float *perm = round[r], *m = round[r] + d;

		if (!inv)
			for (t = 0; t < n; t++)
				permute_gather(y + t * d, perm, d, mark);
		for (b = 0, off = 0; b < nb; b++) {
			uint32_t s = struct_size(d, nb, b);

			block_apply(y, n, d, off, s, m, inv ^ tr);
			m += (size_t)s * s;
			off += s;
		}
		if (inv)
			for (t = 0; t < n; t++)
				permute_scatter(y + t * d, perm, d, mark);
	}
}

/*
 * Two levels of butterflies at once, h and 2h, over n runs: with a, b, c,
 * e the values h apart, level h makes a + b, a - b, c + e, c - e and
 * level 2h adds and subtracts those, as the plain definition does; each
 * result is then multiplied by s (1, exact, or the final scale).
 */
static inline void
quad(float *restrict a, float *restrict b, float *restrict c,
    float *restrict e, uint32_t n, float s)
{
	for (uint32_t j = 0; j < n; j++) {
		float p = a[j] + b[j], m = a[j] - b[j];
		float q = c[j] + e[j], r = c[j] - e[j];

		a[j] = (p + q) * s;
		b[j] = (m + r) * s;
		c[j] = (p - q) * s;
		e[j] = (m - r) * s;
	}
}

/*
 * Levels h = 1, 2, 4 and 8 of the transform on the 16 values at `at`,
 * each then multiplied by s (1, exact, or the final scale), as whole
 * vectors (the vector extension of GCC and clang, which each clone
 * compiles to its own instructions; __builtin_shufflevector, not GCC's
 * __builtin_shuffle, which clang lacks): the partner of lane j is lane
 * j ^ h, and lane j becomes partner + v_j where bit h of j is clear
 * (v_j + v_{j+h}) and partner + (-v_j) where it is set (v_{j-h} - v_j):
 * the same sums as the plain definition, bit for bit (the sign is exact,
 * and x + (-y) is x - y).
 */
typedef float had_f32x16 __attribute__((vector_size(64)));

static inline void
had_levels16(float *restrict at, float s)
{
	static const had_f32x16 s1 = { 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1,
		-1, 1, -1, 1, -1 };
	static const had_f32x16 s2 = { 1, 1, -1, -1, 1, 1, -1, -1, 1, 1, -1,
		-1, 1, 1, -1, -1 };
	static const had_f32x16 s4 = { 1, 1, 1, 1, -1, -1, -1, -1, 1, 1, 1, 1,
		-1, -1, -1, -1 };
	static const had_f32x16 s8 = { 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1,
		-1, -1, -1, -1 };
	had_f32x16 v;

	memcpy(&v, at, sizeof(v));
	v = __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11,
	    10, 13, 12, 15, 14) + v * s1;
	v = __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8,
	    9, 14, 15, 12, 13) + v * s2;
	v = __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14,
	    15, 8, 9, 10, 11) + v * s4;
	v = (__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1,
	    2, 3, 4, 5, 6, 7) + v * s8) * s;
	memcpy(at, &v, sizeof(v));
}

/*
 * v[0 .. p) <- H v / sqrt(p), in place: the first four levels on each 16
 * consecutive values (the first two on fours when p < 16), then two
 * levels a pass, the last pass scaling what it writes: every element
 * sees the additions of the plain definition in its order, then the one
 * multiplication (tq(5)).
 */
QR_CLONES static void
fwht(float *restrict v, uint32_t p)
{
	const float sc = (float)(1.0 / sqrt((double)p));
	uint32_t h, i;

	if (p >= 16) {
		for (i = 0; i < p; i += 16)
			had_levels16(v + i, p == 16 ? sc : 1.0f);
		h = 16;
	} else if (p >= 4) {
		for (i = 0; i < p; i += 4) {
			float s4 = p == 4 ? sc : 1.0f;
			float a = v[i] + v[i + 1], b = v[i] - v[i + 1];
			float c = v[i + 2] + v[i + 3], e = v[i + 2] - v[i + 3];

			v[i] = (a + c) * s4;
			v[i + 1] = (b + e) * s4;
			v[i + 2] = (a - c) * s4;
			v[i + 3] = (b - e) * s4;
		}
		h = 4;
	} else {
		for (i = 0; i + 1 < p; i += 2) {
			float x = v[i], y = v[i + 1];

			v[i] = (x + y) * sc;
			v[i + 1] = (x - y) * sc;
		}
		if (p == 1)
			v[0] *= sc;
		return;
	}
	for (; h < p; h *= 4) {
		if (2 * h == p) {	/* one level left */
			float *restrict x = v, *restrict y = v + h;

			for (i = 0; i < h; i++) {
				float t = x[i], u = y[i];

				x[i] = (t + u) * sc;
				y[i] = (t - u) * sc;
			}
			break;
		}
		for (i = 0; i < p; i += 4 * h)
			quad(v + i, v + i + h, v + i + 2 * h, v + i + 3 * h, h,
			    4 * h == p ? sc : 1.0f);
	}
}

/* idx[i] = perm[i] for n stored indices, as whole vectors. */
QR_CLONES static void
perm_index(int32_t *restrict idx, const float *restrict perm, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		idx[i] = (int32_t)perm[i];
}

/*
 * out[i] = v[perm[i]], the indices converted a run at a time first.  The
 * loads are not a clone: at -O3 the compiler emulated a vector gather
 * with a load and an insert a lane, slower than these scalar loads
 * (perf, d = 768: 48 % of a rotation).
 */
#define HAD_RUN 256u
static void
gather(float *restrict out, const float *restrict v,
    const float *restrict perm, uint32_t d)
{
	int32_t idx[HAD_RUN];

	for (uint32_t i0 = 0; i0 < d; i0 += HAD_RUN) {
		uint32_t n = d - i0 < HAD_RUN ? d - i0 : HAD_RUN, i;

		perm_index(idx, perm + i0, n);
		for (i = 0; i < n; i++)
			out[i0 + i] = v[idx[i]];
	}
}

QR_CLONES static void
signs(float *restrict v, const float *restrict sg, uint32_t d)
{
	for (uint32_t i = 0; i < d; i++)
		v[i] *= sg[i];
}

/*
 * One row in place: the rounds forward (inv = 0) or undone (inv = 1).
 * Forward through tmp, the gathers go from one buffer to the other and
 * the row ends where it began (HAD_ROUNDS is even).
 */
static void
had_row(const float *rot, uint32_t d, float *v, float *tmp, uint64_t *mark,
    int inv)
{
	uint32_t p = (uint32_t)rot[1], i;	/* checked on load */
	size_t per = had_round(d);
	float *cur = v;
	int r;

	for (r = inv ? (int)HAD_ROUNDS - 1 : 0; r >= 0 &&
	    r < (int)HAD_ROUNDS; r += inv ? -1 : 1) {
		const float *perm = rot + 2 + (size_t)r * per;
		const float *a = perm + d, *b = a + d;

		if (!inv) {
			if (tmp != NULL) {
				float *to = cur == v ? tmp : v;

				gather(to, cur, perm, d);
				cur = to;
			} else {
				permute_gather(cur, perm, d, mark);
			}
			signs(cur, a, d);
			fwht(cur, p);
			if (p < d) {
				signs(cur, b, d);
				fwht(cur + (d - p), p);
			}
		} else {
			if (p < d) {
				fwht(v + (d - p), p);
				signs(v, b, d);
			}
			fwht(v, p);
			signs(v, a, d);
			if (tmp != NULL) {
				for (i = 0; i < d; i++)
					tmp[(uint32_t)perm[i]] = v[i];
				memcpy(v, tmp, (size_t)d * sizeof(*v));
			} else {
				permute_scatter(v, perm, d, mark);
			}
		}
	}
	if (cur != v)
		memcpy(v, cur, (size_t)d * sizeof(*v));
}

static void
hadamard_apply(const float *rot, uint32_t d, float *y, size_t n, int inv)
{
	float buf[HAD_STACK];
	uint64_t mark[BITMAP_WORDS];
	float *tmp = d <= HAD_STACK ? buf : NULL;

	for (size_t t = 0; t < n; t++)
		had_row(rot, d, y + t * d, tmp, mark, inv);
}

void
tq_rotate(const struct tq_quantizer *q, const float *x, size_t n, float *y)
{
	uint32_t d = q->dim;

	if (n == 0)
		return;
	if (q->rotation == TQ_ROT_DENSE) {
		rows_times_at(x, d, n, q->rot, d, d, y, d);
		return;
	}
	memcpy(y, x, n * d * sizeof(float));
	if (q->rotation == TQ_ROT_HADAMARD)
		hadamard_apply(q->rot, d, y, n, 0);
	else
		structured_apply(q->rot, d, y, n, 0);
}

void
tq_rotate_inv(const struct tq_quantizer *q, const float *y, size_t n,
    float *x)
{
	uint32_t d = q->dim;

	if (n == 0)
		return;
	if (q->rotation == TQ_ROT_DENSE) {
		rows_times_a(y, d, n, q->rot, d, x, d);
		return;
	}
	memcpy(x, y, n * d * sizeof(float));
	if (q->rotation == TQ_ROT_HADAMARD)
		hadamard_apply(q->rot, d, x, n, 1);
	else
		structured_apply(q->rot, d, x, n, 1);
}

void
tq_dot_rows(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy)
{
	if (n > 0 && m > 0)
		rows_times_at(x, ldx, n, a, m, k, y, ldy);
}
