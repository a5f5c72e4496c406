/*
 * codebook.c - Lloyd-Max quantizer for one coordinate of a uniformly
 * random unit vector in R^d.
 *
 * That coordinate t has density f(t) ~ (1 - t^2)^((d-3)/2) on [-1, 1].
 * With t = sin(theta) the measure becomes cos(theta)^(d-2) dtheta, which
 * has no endpoint singularity (at d = 2 it is the arcsine law, uniform in
 * theta).  The codebook is symmetric, so only theta in [0, theta_max] is
 * integrated, with theta_max = asin(min(1, 14/sqrt(d))): beyond 14
 * standard deviations the mass is below 1e-40.  Cumulative integrals of
 * g = cos^(d-2) and g sin are tabulated at NODES equal steps by 4-point
 * Gauss-Legendre per step; between nodes another 4-point rule integrates
 * up to the exact point, so the cell integrals are smooth functions of
 * the boundaries and the Lloyd iteration converges cleanly.
 *
 * d = 1 is degenerate: the coordinate is -1 or +1.  At 1 bit the
 * centroids are -1, +1; with more bits the 2^b levels are spread evenly
 * over [-1, 1] so the codes of +-1 are the extreme levels.
 */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define NODES 20000
#define MAX_ITER 100000
#define TOL 1e-12

struct law {
	double dm2;		/* d - 2 */
	double h;		/* step in theta */
	double tmax;		/* sin(theta_max) */
	double *f0, *f1;	/* cumulative integrals at the nodes */
};

static const double gl_x[4] = { -0.8611363115940526, -0.3399810435848563,
    0.3399810435848563, 0.8611363115940526 };
static const double gl_w[4] = { 0.3478548451374538, 0.6521451548625461,
    0.6521451548625461, 0.3478548451374538 };

static double
weight(const struct law *L, double th)
{
	double c = cos(th);

	if (L->dm2 == 0)
		return 1;
	return c > 0 ? exp(L->dm2 * log(c)) : 0;
}

/* Integrals of g and g sin over [a, b]. */
static void
gauss(const struct law *L, double a, double b, double *i0, double *i1)
{
	double m = 0.5 * (a + b), r = 0.5 * (b - a), s0 = 0, s1 = 0;
	int k;

	for (k = 0; k < 4; k++) {
		double th = m + r * gl_x[k], g = gl_w[k] * weight(L, th);

		s0 += g;
		s1 += g * sin(th);
	}
	*i0 = s0 * r;
	*i1 = s1 * r;
}

/* Integrals of g and g sin over theta in [0, asin(t)], t in [0, 1]. */
static void
cumul(const struct law *L, double t, double *m0, double *m1)
{
	double th, p0, p1;
	size_t i;

	if (t >= L->tmax) {
		*m0 = L->f0[NODES];
		*m1 = L->f1[NODES];
		return;
	}
	th = asin(t);
	i = (size_t)(th / L->h);
	if (i >= NODES)
		i = NODES - 1;
	gauss(L, (double)i * L->h, th, &p0, &p1);
	*m0 = L->f0[i] + p0;
	*m1 = L->f1[i] + p1;
}

static enum tq_status
degenerate(unsigned n, float *centroids, float *bounds)
{
	unsigned k;

	for (k = 0; k < n; k++)
		centroids[k] = (float)(-1.0 + 2.0 * k / (n - 1));
	for (k = 0; k + 1 < n; k++)
		bounds[k] = (float)(-1.0 + (2.0 * k + 1) / (n - 1));
	return TQ_OK;
}

enum tq_status
tq_codebook(uint32_t d, unsigned bits, float *centroids, float *bounds)
{
	struct law L;
	double c[8], b[9], m0[9], m1[9], total, thmax;
	unsigned n, K, k, it;
	size_t i;

	if (d < 1 || d > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "dimension %u out of range 1..%u",
		    (unsigned)d, (unsigned)TQ_MAX_DIM);
	if (bits < 1 || bits > 4)
		return tq_fail(TQ_ERR_ARG, "bits must be 1, 2, 3 or 4");
	n = 1u << bits;
	K = n / 2;
	if (d == 1)
		return degenerate(n, centroids, bounds);

	thmax = 14.0 / sqrt((double)d) >= 1 ? M_PI / 2 :
	    asin(14.0 / sqrt((double)d));
	L.dm2 = (double)d - 2;
	L.h = thmax / NODES;
	L.tmax = thmax >= M_PI / 2 ? 1.0 : sin(thmax);
	L.f0 = malloc((NODES + 1) * sizeof(double));
	L.f1 = malloc((NODES + 1) * sizeof(double));
	if (L.f0 == NULL || L.f1 == NULL) {
		free(L.f0);
		free(L.f1);
		return tq_fail(TQ_ERR_NOMEM, "codebook: out of memory");
	}
	L.f0[0] = L.f1[0] = 0;
	for (i = 0; i < NODES; i++) {
		double p0, p1;

		gauss(&L, (double)i * L.h, (double)(i + 1) * L.h, &p0, &p1);
		L.f0[i + 1] = L.f0[i] + p0;
		L.f1[i + 1] = L.f1[i] + p1;
	}
	total = L.f0[NODES];

	/* Start from the quantiles of the half-law (mass midpoints). */
	for (k = 0, i = 0; k < K; k++) {
		double want = total * (k + 0.5) / K, fr;

		while (i + 1 < NODES && L.f0[i + 1] < want)
			i++;
		fr = (want - L.f0[i]) / (L.f0[i + 1] - L.f0[i]);
		c[k] = sin(((double)i + fr) * L.h);
	}
	b[0] = 0;
	b[K] = 1;
	for (it = 0; it < MAX_ITER; it++) {
		double change = 0;

		for (k = 1; k < K; k++)
			b[k] = 0.5 * (c[k - 1] + c[k]);
		for (k = 0; k <= K; k++)
			cumul(&L, b[k], &m0[k], &m1[k]);
		for (k = 0; k < K; k++) {
			double mass = m0[k + 1] - m0[k], nc;

			if (!(mass > 0))
				continue;
			nc = (m1[k + 1] - m1[k]) / mass;
			if (fabs(nc - c[k]) > change)
				change = fabs(nc - c[k]);
			c[k] = nc;
		}
		if (change < TOL)
			break;
	}
	free(L.f0);
	free(L.f1);
	for (k = 1; k < K; k++)
		b[k] = 0.5 * (c[k - 1] + c[k]);

	for (k = 0; k < K; k++) {
		centroids[K + k] = (float)c[k];
		centroids[K - 1 - k] = (float)-c[k];
	}
	bounds[K - 1] = 0;
	for (k = 1; k < K; k++) {
		bounds[K - 1 + k] = (float)b[k];
		bounds[K - 1 - k] = (float)-b[k];
	}
	for (k = 0; k + 1 < n; k++)
		if (!(centroids[k] < bounds[k] && bounds[k] < centroids[k + 1]))
			return tq_fail(TQ_ERR_NUMERIC, "codebook: levels not "
			    "separated at dimension %u, %u bits", (unsigned)d,
			    bits);
	return TQ_OK;
}
