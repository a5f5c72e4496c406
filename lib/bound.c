/*
 * bound.c - where a vector's true distance to a query can lie, given
 * its estimate: the interval of the error-bounded re-rank (tq(5),
 * "Error bound").
 *
 * With D the true squared distance |q - x|^2 (or, for cosine, 2 - 2
 * <q, x>, which is never below it) and D^ its estimate, the bound at
 * confidence z reads
 *
 *     |D^ - D| <= sqrt(W(D)^2 + u^2),  W(D) = A min(Q, sqrt(D)),
 *     A = 2 z |s| rho / sqrt(d - 1),
 *
 * with Q = |q - c| and u an error that does not shrink with D (the
 * compact factors' rounding), independent of the codes' and so added in
 * quadrature, at the D where the bound is applied: at the D of each end,
 * not at D^ (where W can be far wider: 2-d cosine neighbours at D^ =
 * 7e-4 whose true D was 2e-8 fell outside).  D + sqrt(W^2 + u^2) grows
 * with D, and D - sqrt(W^2 + u^2) is convex and -u <= D^ at D = 0, so
 * the D allowed form one interval.  With W^2 = min(A^2 D,
 * A^2 Q^2), each end is the tighter of the two forms: the near form
 * solves (D^ - D)^2 = A^2 D + u^2, the roots of
 *
 *     D^2 - (2 D^ + A^2) D + (D^)^2 - u^2 = 0,
 *     r = sqrt(4 D^ A^2 + A^4 + 4 u^2),
 *
 * and the far form is D^ -+ sqrt(A^2 Q^2 + u^2):
 *
 *     lower: max(D^ - sqrt(A^2 Q^2 + u^2), (2 D^ + A^2 - r) / 2),
 *     upper: min(D^ + sqrt(A^2 Q^2 + u^2), (2 D^ + A^2 + r) / 2).
 *
 * With u = 0 the near forms are (t -+ h)^2, h = A / 2, t = sqrt(h^2 +
 * D^).
 */
#include <math.h>

#include "internal.h"

void
tq_bound_dist(double dlo, double dhi, double a, double qn, double u,
    double *lo, double *hi)
{
	double a2 = a * a, far = sqrt(a2 * qn * qn + u * u), b, c, r;

	/* A negative estimate says no more than 0 does (D >= 0). */
	if (dlo < 0.0)
		dlo = 0.0;
	if (dhi < 0.0)
		dhi = 0.0;
	/* The smaller root, as 2c / (b + r): no cancellation near 0. */
	b = 2.0 * dlo + a2;
	c = dlo * dlo - u * u;
	r = sqrt(4.0 * dlo * a2 + a2 * a2 + 4.0 * u * u);
	*lo = fmax(dlo - far, 2.0 * c / (b + r));
	if (!(*lo > 0.0))
		*lo = 0.0;
	b = 2.0 * dhi + a2;
	r = sqrt(4.0 * dhi * a2 + a2 * a2 + 4.0 * u * u);
	*hi = fmin(dhi + far, (b + r) / 2.0);
}
