/*
 * bound.c - where a vector's true distance to a query can lie, given
 * its estimate: the interval of the error-bounded re-rank (tq(5),
 * "Error bound").
 *
 * With D the true squared distance |q - x|^2 (or, for cosine, 2 - 2
 * <q, x>, which is never below it) and D^ its estimate, the bound at
 * confidence z reads
 *
 *     |D^ - D| <= W(D) = A min(Q, sqrt(D)),  A = 2 z |s| rho / sqrt(d - 1),
 *
 * with Q = |q - c|.  W grows with D, so the D it allows form one interval:
 * D + W(D) >= D^ from its lower end on, and D - W(D) <= D^ up to its
 * upper end (D - W(D) falls below 0 only for sqrt(D) < A / 2, where it is
 * still <= D^ once D^ >= 0).  Each end is the tighter of the two forms of
 * the minimum: with h = A / 2 and t = sqrt(h^2 + D^),
 *
 *     lower: max(D^ - A Q, (t - h)^2),   upper: min(D^ + A Q, (t + h)^2).
 */
#include <math.h>

#include "internal.h"

void
tq_bound_dist(double dlo, double dhi, double a, double qn, double *lo,
    double *hi)
{
	double h = a / 2.0, t;

	/* A negative estimate says no more than 0 does (D >= 0). */
	if (dlo < 0.0)
		dlo = 0.0;
	if (dhi < 0.0)
		dhi = 0.0;
	t = sqrt(h * h + dlo);
	*lo = fmax(dlo - a * qn, (t - h) * (t - h));
	if (*lo < 0.0)
		*lo = 0.0;
	t = sqrt(h * h + dhi);
	*hi = fmin(dhi + a * qn, (t + h) * (t + h));
}
