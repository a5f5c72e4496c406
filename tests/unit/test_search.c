/*
 * test_search.c - top-k heaps, the scalar scan kernel, query tables,
 * tq_search on a hand-assembled index and tq_exact_search.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

/*
 * TQ_TEST_QUICK=1 (for valgrind, where the QR of a dense 784-dimensional
 * rotation alone takes over a minute): the same code paths at smaller
 * sizes.
 */
static int quick;

static uint64_t
rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double
unif(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

static float
gauss(void)
{
	double u = unif(), v = unif();

	return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

struct pair {
	float key;
	uint64_t id;
};

/* Best first: higher key, then smaller id. */
static int
cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	if (x->key != y->key)
		return x->key > y->key ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* ------------------------------------------------------------------------ */
/* (1) top-k against sorting                                                 */

/* Do the first want entries of sorted top-k h equal those of s? */
static int
sorted_as(const struct tq_topk *h, const struct pair *s, uint32_t want)
{
	for (uint32_t i = 0; i < want && i < h->len; i++)
		if (h->key[i] != s[i].key || h->id[i] != s[i].id)
			return 0;
	return 1;
}

/*
 * The lazy top-k keeps what a heap keeps, both the k best: pushed in
 * random, ascending and descending order (the worst cases of a pivot
 * taken from one end),
 * with few distinct keys (ties broken by id) or many, keys on a coarse
 * grid (ties inside a bin of its selection), and infinite and NaN keys
 * among them, through its selections, a settle, a push after it, and
 * the sort.
 */
static void
test_topk_lazy(void)
{
	static const uint32_t ks[] = { 1, 2, 3, 10, 40, 160, 999, 1000, 1024,
	    1025, 5000 };
	const size_t nks = sizeof(ks) / sizeof(ks[0]);
	size_t n = 3000, i, ki, order;
	struct pair *all = malloc(n * sizeof(*all));
	struct pair *s = malloc(n * sizeof(*s));
	struct tq_topk h;

	for (order = 0; order < 6; order++) {
		for (i = 0; i < n; i++) {
			all[i].id = (i * 7919) % n;
			all[i].key = order == 3 ? (float)(rnd() % 5) :
			    order == 4 ? roundf(gauss() * 40.0f) / 40.0f :
			    gauss();
			if (order == 5 && rnd() % 50 == 0)
				all[i].key = rnd() % 3 == 0 ? INFINITY :
				    rnd() % 2 ? -INFINITY : NAN;
		}
		memcpy(s, all, n * sizeof(*s));
		/* The top-k takes a NaN for -infinity. */
		for (i = 0; i < n; i++)
			if (isnan(s[i].key))
				s[i].key = -INFINITY;
		qsort(s, n, sizeof(*s), cmp_pair);
		if (order == 1)		/* best first */
			memcpy(all, s, n * sizeof(*s));
		if (order == 2)		/* worst first */
			for (i = 0; i < n; i++)
				all[i] = s[n - 1 - i];
		for (ki = 0; ki < 2 * nks; ki++) {
			/* Every k lazy, then every k a heap. */
			int lazy = ki < nks;
			uint32_t k = ks[ki % nks];
			uint32_t want = k < n ? k : (uint32_t)n;
			int ok = 1;

			CHECK_ST(lazy ? tq_topk_init_lazy(&h, k) :
			    tq_topk_init(&h, k), TQ_OK);
			CHECK(lazy ? h.cap >= 2 * k : h.cap == k);
			for (i = 0; i + 1 < n; i++) {
				tq_topk_push(&h, all[i].key, all[i].id);
				if (h.len > h.cap)
					ok = 0;
			}
			tq_topk_settle(&h);
			CHECK(h.len == (want < n - 1 ? want : n - 1));
			tq_topk_push(&h, all[n - 1].key, all[n - 1].id);
			tq_topk_sort(&h);
			CHECK(h.len == want);
			CHECK(ok && sorted_as(&h, s, want));
			tq_topk_free(&h);
		}
	}
	free(all);
	free(s);
}

static void
test_topk(void)
{
	static const uint32_t ks[] = { 1, 2, 5, 17, 100, 250, 300 };
	struct pair *all;
	struct tq_topk h;
	size_t n = 250, i, trial, ki;

	all = malloc(n * sizeof(*all));
	for (trial = 0; trial < 20; trial++) {
		/* Distinct ids in random order; keys from a few values. */
		for (i = 0; i < n; i++)
			all[i].id = i * 3 + 1;
		for (i = n - 1; i > 0; i--) {
			size_t j = rnd() % (i + 1);
			uint64_t t = all[i].id;

			all[i].id = all[j].id;
			all[j].id = t;
		}
		for (i = 0; i < n; i++)
			all[i].key = trial % 2 ? (float)(rnd() % 4) :
			    gauss();
		for (ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++) {
			uint32_t k = ks[ki], want = k < n ? k : (uint32_t)n;
			struct pair *s = malloc(n * sizeof(*s));
			int ok = 1;

			CHECK_ST(tq_topk_init(&h, k), TQ_OK);
			for (i = 0; i < n; i++) {
				int adm = tq_topk_admits(&h, all[i].key,
				    all[i].id);
				uint32_t len = h.len;
				float root = h.len ? h.key[0] : 0;
				uint64_t rid = h.len ? h.id[0] : 0;

				tq_topk_push(&h, all[i].key, all[i].id);
				/* Admitted iff the heap changed. */
				if (adm != (h.len != len || h.key[0] != root ||
				    h.id[0] != rid))
					ok = 0;
				/* A heap: no entry better than its parent. */
				for (uint32_t e = 1; e < h.len; e++) {
					struct pair a = { h.key[(e - 1) / 2],
					    h.id[(e - 1) / 2] }, b = { h.key[e],
					    h.id[e] };

					if (cmp_pair(&a, &b) < 0)
						ok = 0;
				}
			}
			CHECK(ok);
			tq_topk_sort(&h);
			memcpy(s, all, n * sizeof(*s));
			qsort(s, n, sizeof(*s), cmp_pair);
			CHECK(h.len == want);
			CHECK(ok && sorted_as(&h, s, want));
			/* Reset and refill in reverse: same result. */
			tq_topk_reset(&h);
			for (i = n; i-- > 0;)
				tq_topk_push(&h, all[i].key, all[i].id);
			tq_topk_sort(&h);
			CHECK(ok && sorted_as(&h, s, want));
			tq_topk_free(&h);
			free(s);
		}
	}
	free(all);
	test_topk_lazy();

	/* NaN never beats a number; k = 0 admits nothing. */
	CHECK_ST(tq_topk_init(&h, 1), TQ_OK);
	tq_topk_push(&h, NAN, 1);
	tq_topk_push(&h, -1e30f, 2);
	CHECK(h.len == 1 && h.id[0] == 2);
	CHECK(!tq_topk_admits(&h, NAN, 0));
	tq_topk_free(&h);
	tq_topk_free(&h);
	CHECK_ST(tq_topk_init(&h, 0), TQ_OK);
	CHECK(!tq_topk_admits(&h, 1.0f, 0));
	tq_topk_push(&h, 1.0f, 0);
	CHECK(h.len == 0);
	tq_topk_sort(&h);
	tq_topk_free(&h);
}

/* ------------------------------------------------------------------------ */
/* (2) the scan kernels against a naive sum over unpacked codes              */

static void
layout(struct tq_quantizer *q, uint32_t dim, unsigned bits)
{
	memset(q, 0, sizeof(*q));
	q->dim = dim;
	q->bits = bits;
	q->nlevels = 1u << bits;
	q->metric = TQ_METRIC_IP;
	tq_quantizer_layout(q);
}

/* The field values of one vector's unpacked codes. */
static unsigned
field_value(const struct tq_quantizer *q, const uint8_t *codes, uint32_t f)
{
	unsigned t, v = 0;

	for (t = 0; t < q->coords_per_field; t++) {
		uint64_t c = (uint64_t)f * q->coords_per_field + t;

		if (c < q->dim)
			v |= (unsigned)codes[c] << (t * q->bits);
	}
	return v;
}

static void
test_scan(void)
{
	static const uint32_t dims[] = { 1, 3, 7, 8, 9, 15, 16, 17, 31, 32,
	    33, 64, 100, 784, 1536 };
	static const size_t counts[] = { 1, 31, 32, 33, 100 };
	tq_scan_fn kern = tq_scan_kernel();
	unsigned bits;
	size_t di, ci;

	for (bits = 1; bits <= 4; bits++)
	for (di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
	for (ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
		struct tq_quantizer q;
		uint32_t dim = dims[di], f;
		size_t n = counts[ci], nb = (n + 31) / 32, bb, i, b;
		unsigned entries, lmax;
		uint8_t *codes, *blocks, *lut, *row;
		uint32_t *acc, *acc2;
		int ok_codes = 1, ok_sum = 1, ok_kern = 1;

		layout(&q, dim, bits);
		CHECK(q.nfields % 4 == 0);
		CHECK(q.nfields * q.coords_per_field >= dim);
		entries = 1u << q.field_bits;
		bb = tq_block_bytes(&q);
		CHECK(bb == (q.field_bits == 4 ? q.nfields * 16 :
		    q.nfields / 4 * 96));
		codes = malloc(n * dim);
		blocks = malloc(nb * bb);
		lut = malloc((size_t)q.nfields * entries);
		row = malloc(dim);
		acc = malloc(nb * 32 * sizeof(*acc));
		acc2 = malloc(nb * 32 * sizeof(*acc2));
		for (i = 0; i < n * dim; i++)
			codes[i] = (uint8_t)(rnd() % q.nlevels);
		/* 4-bit fields' entries are at most TQ_LUT4_MAX. */
		lmax = q.field_bits == 4 ? TQ_LUT4_MAX : 255;
		for (i = 0; i < (size_t)q.nfields * entries; i++)
			lut[i] = (uint8_t)(rnd() % (lmax + 1));
		/* Some extremes: sums near the largest. */
		if (ci == 0)
			memset(lut, (int)lmax, (size_t)q.nfields * entries);
		for (b = 0; b < nb; b++)
			tq_pack_block(&q, codes + b * 32 * dim,
			    n - b * 32 < 32 ? n - b * 32 : 32,
			    blocks + b * bb);
		tq_scan_scalar(blocks, nb, bb, q.nfields, q.field_bits, lut,
		    acc);
		kern(blocks, nb, bb, q.nfields, q.field_bits, lut, acc2);
		for (i = 0; i < nb * 32; i++) {
			uint32_t want = 0;
			int real = i < n;

			tq_unpack_block_row(&q, blocks + (i / 32) * bb,
			    (unsigned)(i % 32), row);
			if (real && memcmp(row, codes + i * dim, dim) != 0)
				ok_codes = 0;
			for (f = 0; f < q.nfields; f++)
				want += lut[(size_t)f * entries +
				    (real ? field_value(&q, row, f) : 0)];
			if (acc[i] != want)
				ok_sum = 0;
			if (acc2[i] != acc[i])
				ok_kern = 0;
		}
		CHECK(ok_codes);
		CHECK(ok_sum);
		CHECK(ok_kern);
		if (!ok_codes || !ok_sum || !ok_kern)
			fprintf(stderr, "  scan: bits %u dim %u n %zu\n",
			    bits, dim, n);
		free(codes);
		free(blocks);
		free(lut);
		free(row);
		free(acc);
		free(acc2);
	}
}

/* ------------------------------------------------------------------------ */
/* (3) table quantisation error                                              */

static struct tq_quantizer *
fit(uint32_t dim, unsigned bits, enum tq_metric m)
{
	struct tq_fit_params p;
	struct tq_quantizer *q = NULL;

	tq_fit_params_default(&p);
	p.dim = dim;
	p.bits = bits;
	p.metric = m;
	p.seed = 7;
	if (tq_quantizer_fit(&p, NULL, &q) != TQ_OK) {
		fprintf(stderr, "  fit: %s\n", tq_errdetail());
		return NULL;
	}
	return q;
}

/*
 * The tables as specified, the slow way: every entry enumerated for the
 * minimum and maximum, lrintf for the rounding.
 */
static void
ref_lut(const struct tq_quantizer *q, const float *rq, uint8_t *lut,
    float *scale, float *bias)
{
	unsigned entries = 1u << q->field_bits, cpf = q->coords_per_field;
	unsigned mask = q->nlevels - 1, v, t;
	float *tab = malloc((size_t)q->nfields * entries * sizeof(*tab));
	float *lo = malloc(q->nfields * sizeof(*lo)), delta = 0;
	double b = 0;
	uint32_t f;

	for (f = 0; f < q->nfields; f++) {
		float mn = 0, mx = 0;

		for (v = 0; v < entries; v++) {
			float sum = 0;

			for (t = 0; t < cpf; t++) {
				uint64_t c = (uint64_t)f * cpf + t;
				float pr = (c < q->dim ? rq[c] : 0.0f) *
				    q->centroids[(v >> (t * q->bits)) & mask];

				sum = t == 0 ? pr : sum + pr;
			}
			tab[(size_t)f * entries + v] = sum;
			if (v == 0 || sum < mn)
				mn = sum;
			if (v == 0 || sum > mx)
				mx = sum;
		}
		lo[f] = mn;
		if (mx - mn > delta)
			delta = mx - mn;
	}
	delta /= 255.0f;
	if (delta == 0)
		delta = 1;
	for (f = 0; f < q->nfields; f++) {
		for (v = 0; v < entries; v++) {
			long r = lrintf((tab[(size_t)f * entries + v] -
			    lo[f]) / delta);

			lut[(size_t)f * entries + v] =
			    (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
		}
		b += lo[f];
	}
	*scale = delta;
	*bias = (float)b;
	free(tab);
	free(lo);
}

/*
 * The dot form as specified (internal.h, struct tq_lut), the slow way:
 * lrintf for the roundings, the maximum found by a plain loop, each
 * coordinate's value put straight where the kernels' order says.
 */
static void
ref_dot(const struct tq_quantizer *q, const float *rq, int8_t *q8,
    uint8_t lev[64], float *scale, float *bias)
{
	const float *c = q->centroids;
	unsigned np = q->coords_per_field, last = q->nlevels - 1;
	float m = 0, sq, sc, off;
	uint8_t c7[16];
	long qsum = 0;
	uint32_t f, d;

	for (d = 0; d < q->dim; d++)
		if (fabsf(rq[d]) > m)
			m = fabsf(rq[d]);
	sq = m > 0 ? m / 127.0f : 1.0f;
	memset(q8, 0, TQ_DOT_BYTES(q));
	for (f = 0; f < q->nfields; f++)
		for (unsigned t = 0; t < np; t++) {
			uint64_t coord = (uint64_t)f * np + t;
			long r = coord < q->dim ? lrintf(rq[coord] * (m > 0 ?
			    127.0f / m : 1.0f)) : 0;

			r = r < -127 ? -127 : r > 127 ? 127 : r;
			q8[(f - f % 4) * np + 4 * t + f % 4] = (int8_t)r;
			qsum += r;
		}
	sc = (c[last] - c[0]) / 127.0f;
	for (unsigned v = 0; v <= last; v++) {
		long r = lrintf((c[v] - c[0]) / sc);

		c7[v] = (uint8_t)(r < 0 ? 0 : r > 127 ? 127 : r);
	}
	off = c[0];
	(void)tq_dot_grid(q, c7, &sc, &off);	/* test_dot_grid */
	for (unsigned t = 0; t < np; t++)
		for (unsigned v = 0; v < 16; v++)
			lev[16 * t + v] = c7[(v >> (t * q->bits)) & last];
	*scale = sq * sc;
	*bias = sq * off * (float)qsum;
}

/*
 * The small form as specified (internal.h, struct tq_lut), the slow way:
 * lrintf for the roundings, q8 put straight where the kernels' order
 * says, every table entry summed from its coordinates' levels.  buf gets
 * the tables and q8 after them.
 */
static void
ref_small(const struct tq_quantizer *q, const float *rq, uint8_t *buf,
    uint8_t lev[64], float *scale, float *bias, uint32_t *dotoff)
{
	const float *c = q->centroids;
	const unsigned np = q->coords_per_field, last = q->nlevels - 1;
	const long lmax = (long)last, qmax = 127 / (long)(np * last);
	int8_t *q8 = (int8_t *)(void *)(buf + (size_t)q->nfields * 16);
	float m = 0, sq, sc, goff;
	long qsum = 0, off = 0;
	uint8_t c7[4];
	uint32_t f, d;
	unsigned t, v;

	for (d = 0; d < q->dim; d++)
		if (fabsf(rq[d]) > m)
			m = fabsf(rq[d]);
	sq = m > 0 ? m / (float)qmax : 1.0f;
	sc = (c[last] - c[0]) / (float)lmax;
	for (v = 0; v <= last; v++) {
		long r = lrintf((c[v] - c[0]) / sc);

		c7[v] = (uint8_t)(r < 0 ? 0 : r > lmax ? lmax : r);
	}
	goff = c[0];
	(void)tq_dot_grid(q, c7, &sc, &goff);	/* test_dot_grid */
	memset(q8, 0, TQ_DOT_BYTES(q));
	for (f = 0; f < q->nfields; f++) {
		long r[4], o = 0;

		for (t = 0; t < np; t++) {
			uint64_t coord = (uint64_t)f * np + t;

			r[t] = coord < q->dim ? lrintf(rq[coord] * (m > 0 ?
			    (float)qmax / m : 1.0f)) : 0;
			r[t] = r[t] < -qmax ? -qmax : r[t] > qmax ? qmax :
			    r[t];
			q8[(f - f % 4) * np + 4 * t + f % 4] = (int8_t)r[t];
			qsum += r[t];
			o += r[t] < 0 ? -r[t] * lmax : 0;
		}
		for (v = 0; v < 16; v++) {
			long e = o;

			for (t = 0; t < np; t++)
				e += r[t] * c7[(v >> (t * q->bits)) & last];
			buf[(size_t)f * 16 + v] = (uint8_t)e;
		}
		off += o;
	}
	for (t = 0; t < np; t++)
		for (v = 0; v < 16; v++)
			lev[16 * t + v] = c7[(v >> (t * q->bits)) & last];
	*scale = sq * sc;
	*bias = (float)((double)sq * goff * (double)qsum - (double)*scale *
	    (double)off);
	*dotoff = (uint32_t)off;
}

/* The dot sum of q8 rows (t->lut, or t->q8 for the small form). */
static int64_t
dot_sum(const struct tq_quantizer *q, const struct tq_lut *t,
    const uint8_t *codes)
{
	const int8_t *q8 = t->q8 != NULL ? t->q8 :
	    (const int8_t *)(const void *)t->lut;
	unsigned np = q->coords_per_field;
	int64_t sum = 0;

	for (uint32_t f = 0; f < q->nfields; f++) {
		unsigned v = field_value(q, codes, f);

		for (unsigned p = 0; p < np; p++)
			sum += (int64_t)q8[(f - f % 4) * np + 4 * p + f % 4] *
			    t->lev[16 * p + v];
	}
	return sum;
}

/* The integer sum the kernels compute for one row's codes. */
static int64_t
table_sum(const struct tq_quantizer *q, const struct tq_lut *t,
    const uint8_t *codes)
{
	int64_t sum = 0;
	uint32_t f;

	if (t->dot)
		return dot_sum(q, t, codes);
	for (f = 0; f < q->nfields; f++)
		sum += t->lut[(size_t)f * t->entries + field_value(q, codes,
		    f)];
	return sum;
}

/* The bytes tq_lut_build writes for q. */
static size_t
lut_bytes(const struct tq_quantizer *q)
{
	return TQ_LUT_BYTES(q);
}

/*
 * The dot and small forms' grid (tq_dot_grid): the shares q->cellp sum
 * to 1 and are symmetric; the level errors a_v = cent_v - chat_v have no
 * mean and no correlation with the level over them.  Then a query that
 * is a near neighbour of a row (rq close to a multiple of the row's unit
 * residual u), where the level errors add up, errs by little against
 * rsd, the scale the error-bounded re-rank takes z of: within 4 rsd
 * every time and within rsd / 2 on average.  On the grid spaced from end
 * to end such errors averaged about -2 rsd at 2 bits (Fashion-MNIST).
 */
static void
test_dot_grid(void)
{
	static const uint32_t dims[] = { 7, 100, 784 };

	for (unsigned bits = 1; bits <= 4; bits++)
	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		uint32_t dim = dims[di], d;
		struct tq_quantizer *q = fit(dim, bits, TQ_METRIC_IP);
		const float *c;
		unsigned last, lmax, v;
		double ps = 0, m0 = 0, m1 = 0, c2 = 0, mean = 0;
		float sc, off, *rq, *u;
		uint8_t c7[16], *codes;
		struct tq_lut t;
		int ok = 1, trial, ntrial = quick ? 50 : 200;

		CHECK(q != NULL);
		if (q == NULL)
			continue;
		if (!TQ_DOT_FORM(q) && !TQ_SMALL_FORM(q)) {
			tq_quantizer_free(q);
			continue;
		}
		c = q->centroids;
		last = q->nlevels - 1;
		lmax = TQ_SMALL_FORM(q) ? last : 127;
		for (v = 0; v <= last; v++) {
			ps += q->cellp[v];
			if (fabsf(q->cellp[v] - q->cellp[last - v]) > 1e-6f)
				ok = 0;
		}
		CHECK(fabs(ps - 1.0) < 1e-5);
		sc = (c[last] - c[0]) / (float)lmax;
		for (v = 0; v <= last; v++) {
			long r = lrintf((c[v] - c[0]) / sc);

			c7[v] = (uint8_t)(r < 0 ? 0 : r > (long)lmax ? lmax :
			    (unsigned)r);
		}
		off = c[0];
		CHECK(tq_dot_grid(q, c7, &sc, &off) == 1);
		for (v = 0; v <= last; v++) {
			double a = (double)c[v] - ((double)sc * c7[v] + off);

			m0 += q->cellp[v] * a;
			m1 += q->cellp[v] * c[v] * a;
			c2 += q->cellp[v] * c[v] * c[v];
		}
		CHECK(fabs(m0) <= 1e-5 * c[last]);
		CHECK(fabs(m1) <= 1e-5 * c2);
		if (dim < 100) {
			CHECK(ok);
			tq_quantizer_free(q);
			continue;
		}
		t.lut = malloc(TQ_LUT_BYTES(q));
		rq = malloc(dim * sizeof(*rq));
		u = malloc(dim * sizeof(*u));
		codes = malloc(dim);
		for (trial = 0; trial < ntrial; trial++) {
			double nn = 0, exact = 0, est, e;

			for (d = 0; d < dim; d++) {
				u[d] = (float)gauss();
				nn += (double)u[d] * u[d];
			}
			for (d = 0; d < dim; d++) {
				u[d] = (float)(u[d] / sqrt(nn));
				codes[d] = 0;
				for (v = 0; v < last; v++)
					codes[d] += u[d] > q->bounds[v];
				rq[d] = 3.0f * u[d] + (float)(0.3 * gauss() /
				    sqrt((double)dim));
				exact += (double)rq[d] * c[codes[d]];
			}
			tq_lut_build(q, rq, &t);
			if (!(t.rsd > 0.0f && t.rsd <= t.err * 1.00001f)) {
				ok = 0;
				break;
			}
			est = (double)t.scale *
			    (double)table_sum(q, &t, codes) + t.bias;
			e = (est - exact) / t.rsd;
			if (fabs(e) > 4.0)
				ok = 0;
			mean += e / ntrial;
		}
		CHECK(ok);
		CHECK(fabs(mean) < 0.5);
		if (!ok || !(fabs(mean) < 0.5))
			fprintf(stderr, "  dot_grid: bits %u dim %u "
			    "mean %.3f\n", bits, dim, mean);
		free(t.lut);
		free(rq);
		free(u);
		free(codes);
		tq_quantizer_free(q);
	}
}

/*
 * The three forms of the tables against their references, bit for bit;
 * the estimate within the bound err of the exact <rq, yhat> (and err not
 * far above the half step per field of the lookup form); the small
 * form's dot sum its lookup sum less dotoff; padding zero.
 */
static void
test_lut(void)
{
	static const uint32_t dims[] = { 1, 7, 33, 100, 784 };
	unsigned bits;
	size_t di;

	for (bits = 1; bits <= 4; bits++)
	for (di = 0; di < sizeof(dims) / sizeof(dims[0]); di++) {
		uint32_t dim = dims[di], d, f;
		struct tq_quantizer *q;
		struct tq_lut t;
		float *rq;
		uint8_t *codes;
		int trial, ok = 1, ok_pad = 1, ok_ref = 1, dot, small;
		uint8_t *ref;
		float rscale, rbias;
		uint32_t rdotoff = 0;
		size_t len;

		/* Quick: 100 has several fields and padding already. */
		if (quick && dim > 100)
			continue;
		q = fit(dim, bits, TQ_METRIC_IP);
		CHECK(q != NULL);
		if (q == NULL)
			continue;
		dot = TQ_DOT_FORM(q);
		small = TQ_SMALL_FORM(q);
		CHECK(dot == (bits == 4));
		CHECK(small == (bits <= 2));
		len = lut_bytes(q);
		t.lut = malloc(len);
		rq = malloc(dim * sizeof(*rq));
		codes = malloc(dim);
		ref = malloc(len);
		for (trial = 0; trial < 20; trial++) {
			double exact = 0.0, est;
			int64_t sum;
			uint8_t lev[64];

			for (d = 0; d < dim; d++)
				rq[d] = gauss() * (trial == 0 ? 0.0f :
				    trial == 1 ? 1e6f : 1.0f);
			memset(t.lut, 0xa5, len);
			tq_lut_build(q, rq, &t);
			if (dot) {
				ref_dot(q, rq, (int8_t *)(void *)ref, lev,
				    &rscale, &rbias);
				if (memcmp(ref, t.lut, len) != 0 ||
				    memcmp(lev, t.lev, 16 *
				    q->coords_per_field) != 0 ||
				    t.planes != q->coords_per_field)
					ok_ref = 0;
			} else if (small) {
				ref_small(q, rq, ref, lev, &rscale, &rbias,
				    &rdotoff);
				if (memcmp(ref, t.lut, len) != 0 ||
				    memcmp(lev, t.lev, 16 *
				    q->coords_per_field) != 0 ||
				    t.planes != q->coords_per_field || t.dotoff != rdotoff ||
				    t.q8 != (const int8_t *)(const void *)
				    (t.lut + (size_t)q->nfields * 16))
					ok_ref = 0;
				CHECK(t.entries == 16);
				/* Entries a kernel may add in a byte. */
				for (f = 0; f < q->nfields * 16; f++)
					if (t.lut[f] > TQ_LUT4_MAX)
						ok = 0;
			} else {
				ref_lut(q, rq, ref, &rscale, &rbias);
				if (memcmp(ref, t.lut, len) != 0)
					ok_ref = 0;
				CHECK(t.entries == 1u << q->field_bits);
				CHECK(t.q8 == NULL);
			}
			if (rscale != t.scale || rbias != t.bias)
				ok_ref = 0;
			CHECK(t.dot == dot);
			CHECK(t.scale > 0);
			for (d = 0; d < dim; d++) {
				codes[d] = (uint8_t)(rnd() % q->nlevels);
				exact += (double)rq[d] *
				    q->centroids[codes[d]];
			}
			sum = table_sum(q, &t, codes);
			if (small && dot_sum(q, &t, codes) + t.dotoff != sum)
				ok = 0;
			est = (double)t.scale * (double)sum + t.bias;
			if (fabs(est - exact) > t.err * (1 + 1e-4) + 1e-5 *
			    (fabs(exact) + fabs(t.bias) + t.scale *
			    fabs((double)sum)))
				ok = 0;
			/* A finite bound of the right scale. */
			if (!(t.err <= 127.0 * q->nfields *
			    q->coords_per_field * t.scale))
				ok = 0;
			/* Padding: zero entries, or zero query values. */
			if (dot || small) {
				const int8_t *v8 = small ? t.q8 : (const int8_t
				    *)(const void *)t.lut;
				unsigned np = q->coords_per_field;

				for (f = 0; f < TQ_DOT_BYTES(q); f++) {
					/* The coordinate of q8[f]. */
					uint32_t g = f / (4 * np), o = f % (4 *
					    np);
					uint64_t c = ((uint64_t)g * 4 + o % 4) *
					    np + o / 4;

					if (c >= dim && v8[f] != 0)
						ok_pad = 0;
				}
				if (dot)
					continue;
			}
			for (f = (dim + q->coords_per_field - 1) /
			    q->coords_per_field; f < q->nfields; f++) {
				unsigned v;

				for (v = 0; v < t.entries; v++)
					if (t.lut[(size_t)f * t.entries + v])
						ok_pad = 0;
			}
		}
		CHECK(ok);
		CHECK(ok_pad);
		CHECK(ok_ref);
		free(ref);
		if (!ok || !ok_ref || !ok_pad)
			fprintf(stderr, "  lut: bits %u dim %u (%d %d %d)\n",
			    bits, dim, ok, ok_ref, ok_pad);
		free(t.lut);
		free(rq);
		free(codes);
		tq_quantizer_free(q);
	}
}

/* ------------------------------------------------------------------------ */
/* (4) tq_search on a hand-made index                                        */

struct mem_index {
	struct tq_index ix;
	struct tq_part part[3];
	uint8_t *codes;
	float *factors;
	uint8_t *ids;
	uint8_t *orig;
	float *x;		/* the originals as floats (as stored) */
	uint8_t *ucodes;	/* unpacked codes */
	float *fac;		/* factors per row */
};

static void
normalise_rows(float *x, size_t rows, uint32_t dim)
{
	size_t i;
	uint32_t j;

	for (i = 0; i < rows; i++) {
		float *v = x + i * dim;
		double s = 0;

		for (j = 0; j < dim; j++)
			s += (double)v[j] * v[j];
		if (s > 0) {
			float inv = (float)(1.0 / sqrt(s));

			for (j = 0; j < dim; j++)
				v[j] *= inv;
		}
	}
}

static int
mem_index_make(struct mem_index *m, struct tq_quantizer *q, const float *x,
    size_t n, enum tq_originals orig)
{
	uint32_t dim = q->dim;
	size_t nb = (n + 31) / 32, bb = tq_block_bytes(q), b, i, j;
	enum tq_status st;

	memset(m, 0, sizeof(*m));
	m->ucodes = malloc(n * dim + 1);
	m->fac = malloc((n * TQ_NFACTORS + 1) * sizeof(float));
	m->codes = malloc(nb * bb + 1);
	m->factors = calloc(nb * 96 + 1, sizeof(float));
	m->ids = malloc(n * 8 + 1);
	m->orig = malloc(n * dim * 4 + 1);
	m->x = malloc((n * dim + 1) * sizeof(float));
	st = tq_encode_unpacked(q, x, n, m->ucodes, m->fac);
	if (st != TQ_OK) {
		fprintf(stderr, "  encode: %s\n", tq_errdetail());
		return -1;
	}
	for (b = 0; b < nb; b++) {
		size_t rows = n - b * 32 < 32 ? n - b * 32 : 32;

		tq_pack_block(q, m->ucodes + b * 32 * dim, rows,
		    m->codes + b * bb);
		for (j = 0; j < rows; j++) {
			m->factors[b * 96 + j] = m->fac[(b * 32 + j) * 3];
			m->factors[b * 96 + 32 + j] =
			    m->fac[(b * 32 + j) * 3 + 1];
			m->factors[b * 96 + 64 + j] =
			    m->fac[(b * 32 + j) * 3 + 2];
		}
	}
	/* External ids: decreasing, so row order and id order differ. */
	for (i = 0; i < n; i++)
		wr_le64(m->ids + 8 * i, 1000000 - 3 * (uint64_t)i);
	memcpy(m->x, x, n * dim * sizeof(float));
	if (q->metric == TQ_METRIC_COSINE)
		normalise_rows(m->x, n, dim);
	for (i = 0; i < n * dim; i++) {
		if (orig == TQ_ORIG_F16) {
			uint16_t h = tq_f32_to_f16(m->x[i]);

			wr_le16(m->orig + 2 * i, h);
			m->x[i] = tq_f16_to_f32(h);
		} else
			wr_lef32(m->orig + 4 * i, m->x[i]);
	}
	m->ix.q = q;
	m->ix.n = n;
	m->ix.nblocks = nb;
	m->ix.block_bytes = bb;
	m->ix.originals = orig;
	m->ix.live = n;
	m->ix.nparts = 1;
	m->ix.parts = m->part;
	m->part[0] = (struct tq_part){ .n = n, .nblocks = nb,
	    .codes = m->codes, .factors = m->factors, .ids = m->ids,
	    .idw = 8, .orig = orig == TQ_ORIG_NONE ? NULL : m->orig, .live = n };
	return 0;
}

static void
mem_index_free(struct mem_index *m)
{
	free(m->ucodes);
	free(m->fac);
	free(m->codes);
	free(m->factors);
	free(m->ids);
	free(m->orig);
	free(m->x);
}

/*
 * The library's exact sum, written out: sum over d of a[d] * b[d] (l2:
 * (a[d] - b[d])^2) in double, coordinate d in lane d % 8, the lanes added
 * pairwise at the end.
 */
static double
ref_sum(int l2, const float *a, const float *b, uint32_t dim)
{
	double s[8] = { 0 };
	uint32_t d;

	for (d = 0; d < dim; d++) {
		double e = (double)a[d] - (double)b[d];

		s[d % 8] += l2 ? e * e : (double)a[d] * (double)b[d];
	}
	return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) +
	    (s[6] + s[7]));
}

/* Exact top-k as tq_search's re-rank defines it, by sorting everything. */
static void
brute(const struct mem_index *m, const float *query, uint32_t k,
    uint64_t *ids, float *scores)
{
	const struct tq_quantizer *q = m->ix.q;
	uint32_t dim = q->dim, t;
	size_t n = m->ix.n, i;
	struct pair *all = malloc((n + 1) * sizeof(*all));
	float *qv = malloc(dim * sizeof(*qv));

	memcpy(qv, query, dim * sizeof(*qv));
	if (q->metric == TQ_METRIC_COSINE)
		normalise_rows(qv, 1, dim);
	for (i = 0; i < n; i++) {
		double s = ref_sum(q->metric == TQ_METRIC_L2, qv,
		    m->x + i * dim, dim);

		all[i].key = q->metric == TQ_METRIC_L2 ? (float)-s : (float)s;
		all[i].id = tq_index_id(&m->ix, i);
	}
	qsort(all, n, sizeof(*all), cmp_pair);
	for (t = 0; t < k; t++) {
		ids[t] = t < n ? all[t].id : UINT64_MAX;
		scores[t] = t >= n ? NAN : q->metric == TQ_METRIC_L2 ?
		    -all[t].key : all[t].key;
	}
	free(all);
	free(qv);
}

/*
 * The estimated score of every row for one query, computed the long way:
 * rotate, tables, unpack each row's codes from its block, sum, factors.
 */
static void
estimates(const struct mem_index *m, const float *query, float *est,
    float *estf)
{
	const struct tq_quantizer *q = m->ix.q;
	uint32_t dim = q->dim, d;
	float *qv = malloc(dim * sizeof(*qv)), *rq = malloc(dim * sizeof(*rq));
	float *yhat = malloc(dim * sizeof(*yhat));
	uint8_t *row = malloc(dim);
	struct tq_lut t;
	double qc = 0, qn2 = 0;
	size_t i;

	t.lut = malloc(lut_bytes(q));
	memcpy(qv, query, dim * sizeof(*qv));
	if (q->metric == TQ_METRIC_COSINE)
		normalise_rows(qv, 1, dim);
	for (d = 0; d < dim; d++) {
		qc += (double)qv[d] * q->centre[d];
		qn2 += (double)qv[d] * qv[d];
	}
	tq_rotate(q, qv, 1, rq);
	tq_lut_build(q, rq, &t);
	for (i = 0; i < m->ix.n; i++) {
		int64_t sum;
		double ip;

		tq_unpack_block_row(q, m->codes + (i / 32) * m->ix.block_bytes,
		    (unsigned)(i % 32), row);
		sum = table_sum(q, &t, row);
		ip = (double)m->fac[i * 3] * ((double)t.scale * (double)sum +
		    t.bias) +
		    m->fac[i * 3 + 1] + qc;
		est[i] = (float)(q->metric == TQ_METRIC_L2 ?
		    qn2 - 2 * ip + m->fac[i * 3 + 2] : ip);
		/* The same with float tables: what the refinement computes. */
		for (d = 0; d < dim; d++)
			yhat[d] = q->centroids[row[d]];
		ip = ref_sum(0, rq, yhat, dim);
		ip = (double)m->fac[i * 3] * ip + m->fac[i * 3 + 1] + qc;
		estf[i] = (float)(q->metric == TQ_METRIC_L2 ?
		    qn2 - 2 * ip + m->fac[i * 3 + 2] : ip);
	}
	free(t.lut);
	free(qv);
	free(rq);
	free(yhat);
	free(row);
}

static void
make_data(float *x, size_t n, uint32_t dim)
{
	size_t i;
	uint32_t d;

	/* A shared offset, clusters and noise. */
	for (i = 0; i < n; i++)
		for (d = 0; d < dim; d++)
			x[i * dim + d] = 0.5f + (float)((i % 7) == d % 5) +
			    0.3f * gauss();
}

static int
cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

static int
same_results(const uint64_t *ia, const float *sa, const uint64_t *ib,
    const float *sb, size_t cnt)
{
	size_t i;

	for (i = 0; i < cnt; i++)
		if (ia[i] != ib[i] || memcmp(&sa[i], &sb[i], sizeof(float)))
			return 0;
	return 1;
}

static void
test_search_one(uint32_t dim, unsigned bits, enum tq_metric metric,
    enum tq_originals orig, size_t n)
{
	static const unsigned threads[] = { 1, 2, 3, 7 };
	static const size_t nqs[] = { 1, 5 };
	struct tq_quantizer *q = fit(dim, bits, metric);
	struct tq_search_params p;
	struct mem_index m;
	const uint32_t k = 10;
	size_t nqmax = 5, i, ni, ti, j;
	float *x, *queries, *sc, *sc1, *bs, *est, *estf, *sorted;
	uint64_t *id, *id1, *bi;
	int ok_exact = 1, ok_threads = 1, ok_est = 1, ok_batch = 1;
	double recall = 0;
	size_t kk = n < k ? n : k;

	CHECK(q != NULL);
	if (q == NULL)
		return;
	x = malloc(n * dim * sizeof(*x));
	queries = malloc(nqmax * dim * sizeof(*queries));
	make_data(x, n, dim);
	for (i = 0; i < nqmax * dim; i++)
		queries[i] = 0.5f + gauss();
	if (mem_index_make(&m, q, x, n, orig) != 0) {
		CHECK(0);
		goto out;
	}
	id = malloc(nqmax * k * sizeof(*id));
	id1 = malloc(nqmax * k * sizeof(*id1));
	bi = malloc(k * sizeof(*bi));
	sc = malloc(nqmax * k * sizeof(*sc));
	sc1 = malloc(nqmax * k * sizeof(*sc1));
	bs = malloc(k * sizeof(*bs));
	est = malloc(n * sizeof(*est));
	estf = malloc(n * sizeof(*estf));
	sorted = malloc(n * sizeof(*sorted));

	tq_search_params_default(&p);
	CHECK(p.k == 10 && p.oversample == 1.0f && p.threads == 0);
	p.k = k;
	for (ni = 0; ni < 2; ni++) {
		size_t nq = nqs[ni];

		/* Re-rank of every vector: the exact top-k. */
		p.oversample = (float)n;
		for (ti = 0; ti < 4; ti++) {
			p.threads = threads[ti];
			CHECK(tq_search(&m.ix, queries, nq, &p, id, sc) ==
			    TQ_OK);
			if (ti == 0) {
				for (i = 0; i < nq; i++) {
					brute(&m, queries + i * dim, k, bi, bs);
					if (!same_results(id + i * k,
					    sc + i * k, bi, bs, k))
						ok_exact = 0;
				}
				memcpy(id1, id, nq * k * sizeof(*id));
				memcpy(sc1, sc, nq * k * sizeof(*sc));
			} else if (!same_results(id, sc, id1, sc1, nq * k))
				ok_threads = 0;
		}
		/* Estimates only. */
		p.oversample = 1.0f;
		for (ti = 0; ti < 4; ti++) {
			p.threads = threads[ti];
			CHECK(tq_search(&m.ix, queries, nq, &p, id, sc) ==
			    TQ_OK);
			if (ti == 0) {
				memcpy(id1, id, nq * k * sizeof(*id));
				memcpy(sc1, sc, nq * k * sizeof(*sc));
			} else if (!same_results(id, sc, id1, sc1, nq * k))
				ok_threads = 0;
		}
		if (nq == nqmax) {
			/* The first query alone gives the same results. */
			p.threads = 1;
			CHECK(tq_search(&m.ix, queries, 1, &p, id, sc) ==
			    TQ_OK);
			if (!same_results(id, sc, id1, sc1, k))
				ok_batch = 0;
		}
		/*
		 * Against the long way round: every score returned is the
		 * row's float-table estimate, and a row left out that
		 * estimates better than the k-th was not among the
		 * REFINE * k candidates of the u8-table scan.
		 */
		for (i = 0; i < nq; i++) {
			float kth, tol, cut;
			size_t hit = 0, kc = kk * 4 < n ? kk * 4 : n;
			int l2 = metric == TQ_METRIC_L2;

			estimates(&m, queries + i * dim, est, estf);
			brute(&m, queries + i * dim, k, bi, bs);
			kth = sc1[i * k + kk - 1];
			tol = 1e-4f * (fabsf(kth) + 1);
			memcpy(sorted, est, n * sizeof(*sorted));
			qsort(sorted, n, sizeof(*sorted), cmp_float);
			cut = l2 ? sorted[kc - 1] : sorted[n - kc];
			for (j = 0; j < kk; j++) {
				uint64_t row = (1000000 - id1[i * k + j]) / 3;
				size_t l;

				if (fabsf(estf[row] - sc1[i * k + j]) > tol)
					ok_est = 0;
				for (l = 0; l < k; l++)
						hit += bi[l] == id1[i * k + j];
			}
			for (j = 0; j < n; j++) {
				int better = l2 ? estf[j] < kth - tol :
				    estf[j] > kth + tol;
				int cand = l2 ? est[j] < cut - tol :
				    est[j] > cut + tol;
				int in = 0;
				size_t l;

				for (l = 0; l < k; l++)
					in |= id1[i * k + l] ==
					    tq_index_id(&m.ix, j);
				if (better && cand && !in)
					ok_est = 0;
			}
			recall += (double)hit / kk / nq / 2;
		}
	}
	CHECK(ok_exact);
	CHECK(ok_threads);
	CHECK(ok_est);
	CHECK(ok_batch);
	if (!ok_exact || !ok_threads || !ok_est || !ok_batch)
		fprintf(stderr, "  search: dim %u bits %u metric %s orig %d "
		    "n %zu: exact %d threads %d est %d batch %d\n", dim, bits,
		    tq_metric_name(metric), orig, n, ok_exact, ok_threads,
		    ok_est, ok_batch);
	if (getenv("TQ_TEST_VERBOSE"))
		fprintf(stderr, "  search: dim %u bits %u %s recall@10 "
		    "without re-rank %.3f\n", dim, bits,
		    tq_metric_name(metric), recall);

	/* Fewer vectors than k. */
	if (n < k) {
		p.oversample = 1.0f;
		p.threads = 2;
		CHECK_ST(tq_search(&m.ix, queries, 2, &p, id, sc), TQ_OK);
		for (j = n; j < k; j++)
			CHECK(id[j] == UINT64_MAX && isnan(sc[j]) &&
			    id[k + j] == UINT64_MAX && isnan(sc[k + j]));
		CHECK(id[0] != UINT64_MAX && !isnan(sc[0]));
	}
	free(id);
	free(id1);
	free(bi);
	free(sc);
	free(sc1);
	free(bs);
	free(est);
	free(estf);
	free(sorted);
out:
	mem_index_free(&m);
	free(x);
	free(queries);
	tq_quantizer_free(q);
}

static void
test_search_errors(void)
{
	struct tq_quantizer *q = fit(8, 4, TQ_METRIC_L2);
	struct tq_search_params p;
	struct mem_index m;
	float x[8 * 40], qv[16];
	uint64_t id[20];
	float sc[20];
	size_t i;

	CHECK(q != NULL);
	if (q == NULL)
		return;
	make_data(x, 40, 8);
	CHECK(mem_index_make(&m, q, x, 40, TQ_ORIG_NONE) == 0);
	for (i = 0; i < 16; i++)
		qv[i] = gauss();
	tq_search_params_default(&p);
	p.k = 0;
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_ERR_ARG);
	p.k = 10;
	qv[11] = NAN;
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_ERR_NONFINITE);
	CHECK_DETAIL("query 1, column 3: value is NaN or infinite");
	qv[11] = INFINITY;
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_ERR_NONFINITE);
	qv[11] = 0;
	p.oversample = 2;
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_ERR_NOORIG);
	p.oversample = 1;
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_OK);
	CHECK_ST(tq_search(&m.ix, qv, 0, &p, NULL, NULL), TQ_OK);
	/* A zero query is allowed (cosine keeps it zero). */
	memset(qv, 0, sizeof(qv));
	CHECK_ST(tq_search(&m.ix, qv, 2, &p, id, sc), TQ_OK);
	mem_index_free(&m);
	tq_quantizer_free(q);
}

static void
test_search(void)
{
	static const enum tq_metric metrics[] = { TQ_METRIC_L2,
	    TQ_METRIC_IP, TQ_METRIC_COSINE };
	static const uint32_t dims[] = { 7, 33, 64 };
	unsigned bits;
	size_t mi, di;

	for (bits = 1; bits <= 4; bits++)
		for (mi = 0; mi < 3; mi++)
			for (di = 0; di < 3; di++)
				test_search_one(dims[di], bits, metrics[mi],
				    di == 1 ? TQ_ORIG_F16 : TQ_ORIG_F32,
				    di == 0 ? 100 : quick ? 300 : 1000);
	/*
	 * Large blocks: the scan of a query tile goes in several slices, the
	 * codes being more than a slice of 256 KiB (20 blocks at 784 x 4
	 * bits, 27 at 3 bits; quick: 64 and 85 blocks at dim 256).
	 */
	if (quick) {
		test_search_one(256, 4, TQ_METRIC_L2, TQ_ORIG_F32, 2200);
		test_search_one(256, 3, TQ_METRIC_IP, TQ_ORIG_F16, 2800);
	} else {
		test_search_one(784, 4, TQ_METRIC_L2, TQ_ORIG_F32, 1000);
		test_search_one(784, 3, TQ_METRIC_IP, TQ_ORIG_F16, 1000);
	}
	test_search_one(5, 4, TQ_METRIC_L2, TQ_ORIG_F32, 3);
	test_search_one(16, 2, TQ_METRIC_COSINE, TQ_ORIG_F32, 33);
	test_search_errors();
}

/* ------------------------------------------------------------------------ */
/* (5) tq_exact_search against a naive double brute force                    */

static const char *
write_fixture(const float *x, uint32_t dim, uint32_t n)
{
	static char path[4200];
	static unsigned seq;
	uint8_t hdr[8];
	FILE *f;
	size_t i;

	snprintf(path, sizeof(path), "%s/fixture%u", unit_tmpdir(), seq++);
	if ((f = fopen(path, "wb")) == NULL)
		return NULL;
	wr_le32(hdr, dim);
	wr_le32(hdr + 4, n);
	fwrite(hdr, 1, 8, f);
	for (i = 0; i < (size_t)n * dim; i++) {
		uint8_t b[4];

		wr_lef32(b, x[i]);
		fwrite(b, 1, 4, f);
	}
	return fclose(f) == 0 ? path : NULL;
}

static void
naive_exact(enum tq_metric m, const float *x, size_t n, const float *query,
    uint32_t dim, uint32_t k, uint64_t *ids, float *scores)
{
	struct pair *all = malloc((n + 1) * sizeof(*all));
	float *qv = malloc(dim * sizeof(*qv)), *xv = malloc(dim * sizeof(*xv));
	size_t i;
	uint32_t t;

	memcpy(qv, query, dim * sizeof(*qv));
	if (m == TQ_METRIC_COSINE)
		normalise_rows(qv, 1, dim);
	for (i = 0; i < n; i++) {
		double s;

		memcpy(xv, x + i * dim, dim * sizeof(*xv));
		if (m == TQ_METRIC_COSINE)
			normalise_rows(xv, 1, dim);
		s = ref_sum(m == TQ_METRIC_L2, qv, xv, dim);
		all[i].key = m == TQ_METRIC_L2 ? (float)-s : (float)s;
		all[i].id = i;
	}
	qsort(all, n, sizeof(*all), cmp_pair);
	for (t = 0; t < k; t++) {
		ids[t] = t < n ? all[t].id : UINT64_MAX;
		scores[t] = t >= n ? NAN : m == TQ_METRIC_L2 ? -all[t].key :
		    all[t].key;
	}
	free(all);
	free(qv);
	free(xv);
}

/*
 * nq queries: 64 or more take the bf16 filter where the CPU has it
 * (tq-inspect --cpu: list-filter), fewer sgemm; both must give the exact
 * answer.
 */
static void
test_exact_one(uint32_t dim, uint32_t n, uint32_t k, int integer, size_t nq)
{
	static const enum tq_metric metrics[] = { TQ_METRIC_L2,
	    TQ_METRIC_IP, TQ_METRIC_COSINE };
	static const unsigned threads[] = { 1, 2, 3 };
	size_t i, mi, ti;
	float *x = malloc(((size_t)n * dim + 1) * sizeof(*x));
	float *qs = malloc(nq * dim * sizeof(*qs));
	uint64_t *id = malloc(nq * k * sizeof(*id)), *bi = malloc(k * 8);
	float *sc = malloc(nq * k * sizeof(*sc)), *bs = malloc(k * 4);
	const char *path;
	int ok = 1;

	for (i = 0; i < (size_t)n * dim; i++)
		x[i] = integer ? (float)(rnd() % 3) * 40 : gauss();
	/* Duplicate rows: exact ties. */
	for (i = 0; i + 5 < n; i += 5)
		memcpy(x + (i + 5) * dim, x + i * dim, dim * sizeof(*x));
	/*
	 * Near ties, closer than bf16 rounding moves a product: a filter
	 * that trusted its products would order them wrong.
	 */
	for (i = 1; !integer && i + 1 < n; i += 5)
		for (uint32_t d = 0; d < dim; d++)
			x[(i + 1) * dim + d] = x[i * dim + d] *
			    (1.0f + 1e-5f * gauss());
	for (i = 0; i < nq * dim; i++)
		qs[i] = integer ? (float)(rnd() % 3) * 40 : gauss();
	if (n > 0)
		memcpy(qs, x, dim * sizeof(*qs));	/* a query in the corpus */
	path = write_fixture(x, dim, n);
	CHECK(path != NULL);
	if (path == NULL)
		goto out;
	for (mi = 0; mi < 3; mi++)
		for (ti = 0; ti < 3; ti++) {
			struct tq_reader *r = NULL;
			enum tq_status st;

			st = tq_reader_open(path, NULL, &r);
			if (st != TQ_OK) {
				/* An empty fixture may be refused at open. */
				CHECK(n == 0);
				continue;
			}
			st = tq_exact_search(r, metrics[mi], qs, nq, dim, k,
			    threads[ti], id, sc);
			tq_reader_close(r);
			if (n == 0) {
				CHECK(st == TQ_ERR_EMPTY);
				continue;
			}
			CHECK(st == TQ_OK);
			for (i = 0; i < nq; i++) {
				naive_exact(metrics[mi], x, n, qs + i * dim,
				    dim, k, bi, bs);
				if (!same_results(id + i * k, sc + i * k, bi,
				    bs, k))
					ok = 0;
			}
		}
	CHECK(ok);
	if (!ok)
		fprintf(stderr, "  exact: dim %u n %u k %u\n", dim, n, k);
	if (n > 0) {
		struct tq_reader *r = NULL;

		CHECK_ST(tq_reader_open(path, NULL, &r), TQ_OK);
		if (r != NULL) {
			CHECK_ST(tq_exact_search(r, TQ_METRIC_L2, qs, 1, dim + 1,
			    k, 1, id, sc), TQ_ERR_MISMATCH);
			{
				char want[128];

				snprintf(want, sizeof(want), "corpus "
				    "dimension %u does not match queries (%u)",
				    dim, dim + 1);
				CHECK_DETAIL(want);
			}
			tq_reader_close(r);
		}
	}
out:
	free(x);
	free(qs);
	free(id);
	free(bi);
	free(sc);
	free(bs);
}

static void
test_exact(void)
{
	test_exact_one(7, 300, 10, 1, 7);
	/* The corpus in chunks of 4096 rows: two, then three (quick: two). */
	test_exact_one(33, 5000, 10, 0, 7);
	test_exact_one(20, quick ? 4200 : 9000, 25, 1, 7);
	test_exact_one(3, 4, 10, 0, 7);
	test_exact_one(4, 0, 3, 0, 7);
	/* The bf16 filter: an odd dim, a short last chunk, integer data. */
	test_exact_one(33, 5000, 10, 0, 70);
	test_exact_one(20, 4200, 25, 1, 64);
}

/* ------------------------------------------------------------------------ */
/* (6) the interval of the error-bounded re-rank (lib/bound.c)               */

/* W(D) = a min(qn, sqrt(D)): the error the bound allows at distance D. */
static double
bound_w(double a, double qn, double d)
{
	return a * fmin(qn, sqrt(d > 0 ? d : 0));
}

/*
 * Exact algebra: every D whose error |D^ - D| is within W(D) lies in the
 * interval of D^, the ends are attained (the interval is no wider than
 * the bound), and a D just outside either end breaks the bound.
 */
static void
test_bound_algebra(void)
{
	int bad_in = 0, bad_end = 0, bad_out = 0, n = 0;

	for (int trial = 0; trial < 200000; trial++) {
		double a = trial % 7 == 0 ? 0 : 10 * unif() * unif();
		double qn = trial % 11 == 0 ? 0 : 10 * unif();
		double d = trial % 13 == 0 ? 0 : 100 * unif() * unif();
		double w = bound_w(a, qn, d), u = 2 * unif() - 1;
		double dh = d + (trial % 5 == 0 ? (u < 0 ? -w : w) : u * w);
		double lo, hi, tol = 1e-9 * (1 + d + w);

		tq_bound_dist(dh, dh, a, qn, 0, &lo, &hi);
		n++;
		bad_in += !(lo <= d + tol && d <= hi + tol);
		/* The ends: D^ = D + W(D) has lower end D, D^ = D - W(D)
		   upper end D (where D - W(D) still grows, D^ >= 0). */
		tq_bound_dist(d + w, d + w, a, qn, 0, &lo, &hi);
		bad_end += fabs(lo - d) > tol;
		if (d - w >= 0 && (sqrt(d) >= a / 2 || d >= qn * qn)) {
			tq_bound_dist(d - w, d - w, a, qn, 0, &lo, &hi);
			bad_end += fabs(hi - d) > tol;
		}
		/* Outside the ends, the bound fails. */
		tq_bound_dist(dh, dh, a, qn, 0, &lo, &hi);
		if (lo > 1e-6) {
			double x = lo * (1 - 1e-6);

			bad_out += fabs(dh - x) <= bound_w(a, qn, x);
		}
		{
			double x = hi * (1 + 1e-6) + 1e-9;

			bad_out += fabs(dh - x) <= bound_w(a, qn, x);
		}
	}
	CHECK(bad_in == 0);
	CHECK(bad_end == 0);
	CHECK(bad_out == 0);
	CHECK(n == 200000);
	/*
	 * With an error u that does not shrink with D, in quadrature:
	 * |D^ - D| <= sqrt(W(D)^2 + u^2).  Every D within it is inside,
	 * the ends are attained, just outside them the bound fails, and u
	 * counts at the end's own D: D^ = u + D at D near 0 (where W
	 * vanishes) has lower end about D, not D^ - u's quadrature with
	 * W(D^).
	 */
	bad_in = bad_end = bad_out = 0;
	for (int trial = 0; trial < 200000; trial++) {
		double a = trial % 7 == 0 ? 0 : 10 * unif() * unif();
		double qn = trial % 11 == 0 ? 0 : 10 * unif();
		double d = trial % 13 == 0 ? 0 : 100 * unif() * unif() * unif();
		double uu = trial % 3 == 0 ? 0 : unif() * unif();
		double w = hypot(bound_w(a, qn, d), uu), v = 2 * unif() - 1;
		double dh = d + (trial % 5 == 0 ? (v < 0 ? -w : w) : v * w);
		double lo, hi, tol = 1e-9 * (1 + d + w), x;

		tq_bound_dist(dh, dh, a, qn, uu, &lo, &hi);
		bad_in += !(lo <= d + tol && d <= hi + tol);
		tq_bound_dist(d + w, d + w, a, qn, uu, &lo, &hi);
		bad_end += fabs(lo - d) > tol && d + w > 0;
		tq_bound_dist(dh, dh, a, qn, uu, &lo, &hi);
		x = lo * (1 - 1e-6);
		if (lo > 1e-6)
			bad_out += fabs(dh - x) <= hypot(bound_w(a, qn, x), uu);
		x = hi * (1 + 1e-6) + 1e-9;
		bad_out += fabs((dh > 0 ? dh : 0) - x) <=
		    hypot(bound_w(a, qn, x), uu);
	}
	CHECK(bad_in == 0);
	CHECK(bad_end == 0);
	CHECK(bad_out == 0);
	{
		double lo1, hi1;

		/* d = 1e-8 with W(d) = 1e-4 and u = 1e-3: D^ = d + 1.005e-3
		   has lower end d; u added at D^'s W would give far less. */
		tq_bound_dist(1e-8 + hypot(1e-4, 1e-3), 1, 1, 10, 1e-3,
		    &lo1, &hi1);
		CHECK(fabs(lo1 - 1e-8) < 1e-12);
	}
	/* A wider estimate range gives a wider interval; D^ < 0 is 0. */
	{
		double lo1, hi1, lo2, hi2;

		tq_bound_dist(4, 4, 1, 3, 0, &lo1, &hi1);
		tq_bound_dist(3, 5, 1, 3, 0, &lo2, &hi2);
		CHECK(lo2 < lo1 && hi2 > hi1);
		/* sqrt(D) + 1/2 = sqrt(4.25): lo = (sqrt(4.25) - 0.5)^2. */
		CHECK(fabs(lo1 - pow(sqrt(4.25) - 0.5, 2)) < 1e-12);
		CHECK(fabs(hi1 - pow(sqrt(4.25) + 0.5, 2)) < 1e-12);
		/* Far (sqrt(D) > Q): the any-angle form, D^ +- a Q. */
		tq_bound_dist(100, 100, 1, 2, 0, &lo1, &hi1);
		CHECK(fabs(lo1 - 98) < 1e-12 && fabs(hi1 - 102) < 1e-12);
		tq_bound_dist(-5, -1, 2, 3, 0, &lo1, &hi1);
		CHECK(lo1 == 0 && fabs(hi1 - 4) < 1e-12);
	}
}

/*
 * On real codes: random rotations (seeds), centred data, queries near
 * their vector and far from it.  The share of pairs whose true squared
 * distance falls outside the interval at z = 3 must be that of a normal
 * beyond 3 sigma (0.27%) or less, up to sampling; at z = 1 near that of
 * 1 sigma (31.7%), so the bound is not vacuously wide; and near pairs
 * must get intervals much narrower than the any-angle bound gives them.
 */
static void
test_bound_codes(void)
{
	const uint32_t dim = 64, n = quick ? 500 : 2000;
	float *x = malloc(sizeof(float) * dim * n), *rq = malloc(4 * dim);
	float *qv = malloc(sizeof(float) * dim);
	float *fac = malloc(sizeof(float) * TQ_NFACTORS * n);
	uint8_t *codes = malloc((size_t)dim * n);
	uint16_t *rho = malloc(sizeof(uint16_t) * n);

	for (unsigned bits = 2; bits <= 4; bits += 2) {
		double out3[2] = { 0, 0 }, out1[2] = { 0, 0 }, cnt[2] = { 0, 0 };
		double narrow = 0;

		for (uint64_t seed = 1; seed <= 4; seed++) {
			struct tq_fit_params p;
			struct tq_quantizer *q = NULL;

			tq_fit_params_default(&p);
			p.dim = dim;
			p.bits = bits;
			p.metric = TQ_METRIC_L2;
			p.seed = seed;
			CHECK_OK(tq_quantizer_fit(&p, NULL, &q));
			if (q == NULL)
				continue;
			/* A centre, as the data's mean would give. */
			for (uint32_t d = 0; d < dim; d++)
				q->centre[d] = 0.5f + 0.1f * (float)(d % 5);
			tq_rotate(q, q->centre, 1, q->rcentre);
			for (size_t e = 0; e < (size_t)dim * n; e++)
				x[e] = q->centre[e % dim] + gauss();
			CHECK_OK(tq_encode_unpacked_rho(q, x, n, 1, NULL, codes, fac,
			    rho));
			for (uint32_t r = 0; r < n; r++) {
				int near = r % 2 == 0;
				double qc = 0, qq = 0, dot = 0, dd = 0, dh, s, a;
				double lo, hi, x2 = fac[r * TQ_NFACTORS + 2];
				double qn2 = 0;

				for (uint32_t d = 0; d < dim; d++) {
					qv[d] = near ? x[r * dim + d] + 0.15f *
					    gauss() : q->centre[d] + gauss();
					qc += (double)qv[d] * q->centre[d];
					qq += ((double)qv[d] - q->centre[d]) *
					    ((double)qv[d] - q->centre[d]);
					qn2 += (double)qv[d] * qv[d];
					dd += ((double)qv[d] - x[r * dim + d]) *
					    ((double)qv[d] - x[r * dim + d]);
				}
				tq_rotate(q, qv, 1, rq);
				for (uint32_t d = 0; d < dim; d++)
					dot += (double)rq[d] *
					    q->centroids[codes[(size_t)r * dim +
					    d]];
				s = fabs(fac[r * TQ_NFACTORS]);
				dh = qn2 - 2 * (s * dot + fac[r * TQ_NFACTORS +
				    1] + qc) + x2;
				a = 2 * s * tq_f16_to_f32(rho[r]) /
				    sqrt(dim - 1.0);
				tq_bound_dist(dh, dh, 3 * a, sqrt(qq), 0, &lo,
				    &hi);
				out3[near] += dd < lo || dd > hi;
				tq_bound_dist(dh, dh, a, sqrt(qq), 0, &lo,
				    &hi);
				out1[near] += dd < lo || dd > hi;
				cnt[near]++;
				if (near)
					narrow += fmin(sqrt(qq), sqrt(dd)) /
					    sqrt(qq);
			}
			tq_quantizer_free(q);
		}
		for (int near = 0; near < 2; near++) {
			if (getenv("TQ_TEST_VERBOSE"))
				fprintf(stderr, "  bound, %u bits, %s: outside "
				    "%.3f%% (z 3), %.2f%% (z 1)\n", bits,
				    near ? "near" : "far",
				    100 * out3[near] / cnt[near],
				    100 * out1[near] / cnt[near]);
			CHECK(out3[near] / cnt[near] < 0.0075);
			CHECK(out1[near] / cnt[near] > 0.15 &&
			    out1[near] / cnt[near] < 0.40);
		}
		/* Near: widths a fifth or less of the any-angle ones. */
		CHECK(narrow / cnt[1] < 0.2);
	}
	free(x);
	free(rq);
	free(qv);
	free(fac);
	free(codes);
	free(rho);
}

int
main(void)
{
	const char *e = getenv("TQ_TEST_QUICK");

	quick = e != NULL && strcmp(e, "1") == 0;
	if (getenv("TQ_TEST_VERBOSE"))
		fprintf(stderr, "kernel %s, cpu: %s\n", tq_kernel_name(),
		    tq_cpu_features());
	RUN(test_topk);
	RUN(test_scan);
	RUN(test_lut);
	RUN(test_dot_grid);
	RUN(test_search);
	RUN(test_exact);
	RUN(test_bound_algebra);
	RUN(test_bound_codes);
	return unit_done();
}
