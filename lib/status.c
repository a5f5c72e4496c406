/* status.c - status strings, the per-thread failure detail, small helpers. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

const char *
tq_strerror(enum tq_status st)
{
	switch (st) {
	case TQ_OK:		return "success";
	case TQ_ERR_NOMEM:	return "out of memory";
	case TQ_ERR_IO:		return "input/output error";
	case TQ_ERR_FORMAT:	return "malformed input";
	case TQ_ERR_CHECKSUM:	return "checksum mismatch";
	case TQ_ERR_VERSION:	return "unsupported format version";
	case TQ_ERR_ARG:	return "invalid argument";
	case TQ_ERR_MISMATCH:	return "mismatched parameters";
	case TQ_ERR_NONFINITE:	return "value is NaN, infinite or too large";
	case TQ_ERR_EMPTY:	return "no vectors";
	case TQ_ERR_OVERFLOW:	return "size overflow";
	case TQ_ERR_UNSUPPORTED: return "unsupported";
	case TQ_ERR_NUMERIC:	return "numerical failure";
	case TQ_ERR_NOORIG:	return "index has no originals";
	case TQ_ERR_BUSY:	return "index locked by another writer";
	case TQ_ERR_DUPLICATE:	return "duplicate id";
	}
	return "unknown error";
}

static _Thread_local char detail[512];

const char *
tq_errdetail(void)
{
	return detail;
}

void
tq_clear_detail(void)
{
	detail[0] = '\0';
}

enum tq_status
tq_fail(enum tq_status st, const char *fmt, ...)
{
	int saved = errno;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);
	errno = saved;
	return st;
}

void *
tq_mallocarray(size_t a, size_t b)
{
	size_t n;

	if (ck_mul(a, b, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	return malloc(n ? n : 1);
}

void *
tq_callocarray(size_t a, size_t b)
{
	if (a == 0 || b == 0)
		return calloc(1, 1);
	return calloc(a, b);
}

unsigned
tq_ncpu(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1u : n > 1024 ? 1024u : (unsigned)n;
}

enum tq_status
tq_norm_check(enum tq_metric m, double x2, const char *what, uint64_t n)
{
	if (m == TQ_METRIC_COSINE || x2 < TQ_MAX_NORM2)
		return TQ_OK;
	return tq_fail(TQ_ERR_NONFINITE, "%s %llu: norm %.3g is too large for "
	    "%s (above 2^62 = 4.6e18, scores overflow float; scale the data "
	    "down)", what, (unsigned long long)n, sqrt(x2),
	    tq_metric_name(m));
}

enum tq_status
tq_rows_check(enum tq_metric m, const float *x, size_t n, uint32_t dim,
    const char *what, uint64_t row0)
{
	for (size_t i = 0; i < n; i++) {
		const float *r = x + i * dim;
		double n2 = 0.0;

		for (uint32_t d = 0; d < dim; d++) {
			if (!isfinite(r[d]))
				return tq_fail(TQ_ERR_NONFINITE, "%s %llu, "
				    "column %u: value is NaN or infinite", what,
				    (unsigned long long)(row0 + i), d);
			n2 += (double)r[d] * (double)r[d];
		}
		TQ_TRY(tq_norm_check(m, n2, what, row0 + i));
	}
	return TQ_OK;
}

enum tq_status
tq_check_rows(enum tq_metric m, const float *x, size_t n, uint32_t dim,
    uint64_t row0)
{
	if (n > 0 && x == NULL)
		return tq_fail(TQ_ERR_ARG, "check rows: NULL argument");
	return tq_rows_check(m, x, n, dim, "row", row0);
}

const char *
tq_metric_name(enum tq_metric m)
{
	switch (m) {
	case TQ_METRIC_IP:	return "ip";
	case TQ_METRIC_COSINE:	return "cosine";
	case TQ_METRIC_L2:	return "l2";
	}
	return "?";
}

enum tq_status
tq_metric_parse(const char *name, enum tq_metric *out)
{
	if (strcmp(name, "ip") == 0 || strcmp(name, "dot") == 0)
		*out = TQ_METRIC_IP;
	else if (strcmp(name, "cosine") == 0 || strcmp(name, "angular") == 0)
		*out = TQ_METRIC_COSINE;
	else if (strcmp(name, "l2") == 0 || strcmp(name, "euclidean") == 0)
		*out = TQ_METRIC_L2;
	else
		return tq_fail(TQ_ERR_ARG, "unknown metric '%s' "
		    "(expected ip, cosine or l2)", name);
	return TQ_OK;
}

/* IEEE 754 binary16 conversions, round to nearest even. */
uint16_t
tq_f32_to_f16(float f)
{
	uint32_t x, sign, mant;
	int32_t exp;

	memcpy(&x, &f, 4);
	sign = (x >> 16) & 0x8000u;
	exp = (int32_t)((x >> 23) & 0xff);
	mant = x & 0x7fffffu;
	if (exp == 0xff)
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
	exp -= 127 - 15;
	if (exp >= 0x1f)
		return (uint16_t)(sign | 0x7c00u);
	if (exp <= 0) {
		uint32_t shift, half, r;

		if (exp < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = (uint32_t)(14 - exp);
		half = 1u << (shift - 1);
		r = mant >> shift;
		if ((mant & ((1u << shift) - 1)) > half ||
		    ((mant & ((1u << shift) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t h = sign | (uint32_t)exp << 10 | (mant >> 13);
		uint32_t rem = mant & 0x1fffu;

		if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
			h++;	/* may carry into the exponent: still correct */
		return (uint16_t)h;
	}
}

/*
 * The one normalisation used everywhere (encode, originals, queries,
 * ground truth), so that cosine scores computed in different places agree
 * bit for bit.  A zero vector stays zero.  Returns |out|^2.
 */
double
tq_normalise(const float *x, uint32_t dim, float *out)
{
	double s = 0.0;
	float inv;
	uint32_t d;

	for (d = 0; d < dim; d++)
		s += (double)x[d] * x[d];
	if (!(s > 0.0)) {
		memmove(out, x, dim * sizeof(*out));
		return s;
	}
	inv = (float)(1.0 / sqrt(s));
	s = 0.0;
	for (d = 0; d < dim; d++) {
		out[d] = x[d] * inv;
		s += (double)out[d] * out[d];
	}
	return s;
}

void
tq_normalize_rows(float *rows, size_t n, uint32_t dim)
{
	size_t i;

	for (i = 0; i < n; i++)
		tq_normalise(rows + i * dim, dim, rows + i * dim);
}
