/*
 * test_index.c - mutable indexes: allow-list filters and range search
 * against brute force, deletion (TOMB) and its validation, append and
 * compact against fresh builds.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"
#include "unit.h"

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t
rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static float
gauss(void)
{
	double u = ((double)(rnd() >> 11) + 0.5) * 0x1p-53;
	double v = (double)(rnd() >> 11) * 0x1p-53;

	return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* n rows of dim <= 64: a few clusters, so that distances vary. */
static float *
make_data(size_t n, uint32_t dim)
{
	float *x = malloc(n * dim * sizeof(float)), cent[8][64];

	for (int c = 0; c < 8; c++)
		for (uint32_t d = 0; d < dim; d++)
			cent[c][d] = 3.0f * gauss();
	for (size_t i = 0; i < n; i++) {
		int c = (int)(rnd() % 8);

		for (uint32_t d = 0; d < dim; d++)
			x[i * dim + d] = cent[c][d] + gauss();
	}
	return x;
}

/* unit_path() into a buffer of the caller (it rotates four of its own). */
static const char *
path_of(char *buf, const char *name)
{
	snprintf(buf, 4096, "%s", unit_path(name));
	return buf;
}

static void
write_fixture(const char *path, const float *x, size_t n, uint32_t dim)
{
	FILE *fp = fopen(path, "wb");
	uint8_t h[8];

	wr_le32(h, dim);
	wr_le32(h + 4, (uint32_t)n);
	fwrite(h, 1, 8, fp);
	fwrite(x, sizeof(float), n * dim, fp);
	fclose(fp);
}

static void
write_ids(const char *path, const uint64_t *ids, size_t n)
{
	FILE *fp = fopen(path, "w");

	for (size_t i = 0; i < n; i++)
		fprintf(fp, "%llu\n", (unsigned long long)ids[i]);
	fclose(fp);
}

/* Builds an index of x (ids from idpath if not NULL) with quantizer q. */
static enum tq_factors build_factors = TQ_FACTORS_DEFAULT;

static enum tq_status
build(const struct tq_quantizer *q, const float *x, size_t n,
    const char *idpath, enum tq_originals o, const char *path)
{
	struct tq_build_params bp;
	struct tq_reader *r;
	struct tq_ids_reader *ids = NULL;
	enum tq_status st;

	write_fixture(unit_path("build.bin"), x, n, tq_quantizer_dim(q));
	TQ_TRY(tq_reader_open(unit_path("build.bin"), NULL, &r));
	if (idpath != NULL && (st = tq_ids_open(idpath, &ids)) != TQ_OK) {
		tq_reader_close(r);
		return st;
	}
	tq_build_params_default(&bp);
	bp.originals = o;
	bp.threads = 2;
	bp.factors = build_factors;
	st = tq_build(q, r, ids, &bp, path);
	tq_ids_close(ids);
	tq_reader_close(r);
	return st;
}

static struct tq_quantizer *
fit(uint32_t dim, unsigned bits, enum tq_metric m)
{
	struct tq_fit_params fp;
	struct tq_quantizer *q = NULL;

	tq_fit_params_default(&fp);
	fp.dim = dim;
	fp.bits = bits;
	fp.metric = m;
	CHECK_OK(tq_quantizer_fit(&fp, NULL, &q));
	return q;
}

/* A quantizer fitted on x (centre and, if lists > 0, lists). */
static struct tq_quantizer *
fit_data(const float *x, size_t n, uint32_t dim, unsigned bits,
    enum tq_metric m, uint32_t lists)
{
	struct tq_fit_params fp;
	struct tq_quantizer *q = NULL;
	struct tq_reader *r;

	write_fixture(unit_path("fit.bin"), x, n, dim);
	CHECK_OK(tq_reader_open(unit_path("fit.bin"), NULL, &r));
	tq_fit_params_default(&fp);
	fp.bits = bits;
	fp.metric = m;
	fp.lists = lists;
	CHECK_OK(tq_quantizer_fit(&fp, r, &q));
	tq_reader_close(r);
	return q;
}

/* Exact score (metric convention) of x for query y. */
static double
score(enum tq_metric m, const float *y, const float *x, uint32_t dim)
{
	double s = 0, ny = 0, nx = 0;

	for (uint32_t d = 0; d < dim; d++) {
		if (m == TQ_METRIC_L2)
			s += ((double)y[d] - x[d]) * ((double)y[d] - x[d]);
		else
			s += (double)y[d] * x[d];
		ny += (double)y[d] * y[d];
		nx += (double)x[d] * x[d];
	}
	if (m == TQ_METRIC_COSINE)
		s = ny > 0 && nx > 0 ? s / sqrt(ny) / sqrt(nx) : 0;
	return s;
}

static int
files_equal(const char *a, const char *b)
{
	FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
	int ca, cb, eq = fa != NULL && fb != NULL;

	while (eq) {
		ca = getc(fa);
		cb = getc(fb);
		if (ca != cb)
			eq = 0;
		if (ca == EOF)
			break;
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	return eq;
}

/* ------------------------------------------------------------------------ */

struct cand {
	double s;
	uint64_t id;
};

static enum tq_metric sort_metric;

static int
cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->s != y->s)
		return (sort_metric == TQ_METRIC_L2) == (x->s < y->s) ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/*
 * Filtered search re-ranking every row equals brute force over the
 * allowed rows; k beyond them pads with UINT64_MAX / NaN.
 */
static void
test_filter_one(enum tq_metric m)
{
	const uint32_t dim = 24, n = 300, nq = 5, k = 10;
	struct tq_quantizer *q = fit(dim, 4, m);
	struct tq_index *ix;
	struct tq_filter *f;
	struct tq_search_params sp;
	float *x = make_data(n, dim), *qs = make_data(nq, dim), sc[300];
	uint64_t allow[80], ids[300], na = 0;
	struct cand c[300];
	unsigned char in[300] = { 0 };

	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F32, unit_path("f.tqi")));
	CHECK_OK(tq_index_open(unit_path("f.tqi"), &ix));
	for (size_t i = 0; i < 60; i++) {
		uint64_t r = rnd() % n;

		allow[na++] = r;
		in[r] = 1;
	}
	allow[na++] = 100000;	/* not in the index: ignored */
	CHECK_OK(tq_filter_create(ix, allow, na, &f));
	tq_search_params_default(&sp);
	sp.k = k;
	sp.oversample = (float)n;	/* re-rank every candidate */
	sp.allow = f;
	sp.threads = 3;
	CHECK_OK(tq_search(ix, qs, nq, &sp, ids, sc));
	sort_metric = m;
	for (size_t i = 0; i < nq; i++) {
		size_t nc = 0;

		for (uint64_t r = 0; r < n; r++)
			if (in[r]) {
				c[nc].s = score(m, qs + i * dim, x + r * dim,
				    dim);
				c[nc++].id = r;
			}
		qsort(c, nc, sizeof(*c), cmp_cand);
		for (size_t j = 0; j < k; j++) {
			CHECK(ids[i * k + j] == c[j].id);
			CHECK(fabs(sc[i * k + j] - c[j].s) <=
			    1e-4 * (1 + fabs(c[j].s)));
		}
	}
	/* More than allowed: padding. */
	sp.k = (uint32_t)tq_filter_count(f) + 3;
	{
		uint64_t *id2 = malloc(sp.k * sizeof(*id2));
		float *s2 = malloc(sp.k * sizeof(*s2));

		CHECK_OK(tq_search(ix, qs, 1, &sp, id2, s2));
		for (uint32_t j = 0; j < sp.k; j++)
			if (j < tq_filter_count(f))
				CHECK(id2[j] < n && in[id2[j]]);
			else
				CHECK(id2[j] == UINT64_MAX && isnan(s2[j]));
		/* Without re-rank the filter holds too. */
		sp.oversample = 1;
		CHECK_OK(tq_search(ix, qs, 1, &sp, id2, s2));
		for (uint32_t j = 0; j < tq_filter_count(f); j++)
			CHECK(id2[j] < n && in[id2[j]]);
		free(id2);
		free(s2);
	}
	tq_filter_free(f);
	/* An empty allow-list returns nothing. */
	CHECK_OK(tq_filter_create(ix, NULL, 0, &f));
	CHECK(tq_filter_count(f) == 0);
	sp.allow = f;
	sp.k = 3;
	CHECK_OK(tq_search(ix, qs, 1, &sp, ids, sc));
	CHECK(ids[0] == UINT64_MAX && ids[2] == UINT64_MAX);
	tq_filter_free(f);
	tq_filter_free(NULL);
	tq_index_close(ix);
	tq_quantizer_free(q);
	free(x);
	free(qs);
}

static void
test_filter(void)
{
	test_filter_one(TQ_METRIC_L2);
	test_filter_one(TQ_METRIC_IP);
	test_filter_one(TQ_METRIC_COSINE);
}

/* A filter made for one index is refused by another. */
static void
test_filter_other(void)
{
	struct tq_quantizer *q = fit(8, 4, TQ_METRIC_L2);
	float *x = make_data(40, 8), sc[2];
	struct tq_index *a, *b;
	struct tq_filter *f;
	struct tq_search_params sp;
	uint64_t id = 3, ids[2];

	CHECK_OK(build(q, x, 40, NULL, TQ_ORIG_NONE, unit_path("o.tqi")));
	CHECK_OK(tq_index_open(unit_path("o.tqi"), &a));
	CHECK_OK(tq_index_open(unit_path("o.tqi"), &b));
	CHECK_OK(tq_filter_create(a, &id, 1, &f));
	tq_search_params_default(&sp);
	sp.k = 2;
	sp.allow = f;
	CHECK_ST(tq_search(b, x, 1, &sp, ids, sc), TQ_ERR_ARG);
	CHECK_OK(tq_search(a, x, 1, &sp, ids, sc));
	CHECK(ids[0] == 3 && ids[1] == UINT64_MAX);
	tq_filter_free(f);
	tq_index_close(a);
	tq_index_close(b);
	tq_quantizer_free(q);
	free(x);
}

/* ------------------------------------------------------------------------ */

/* Range search with originals equals brute force; results best first. */
static void
test_range_one(enum tq_metric m, unsigned bits, enum tq_originals o)
{
	const uint32_t dim = 32, n = 500, nq = 6;
	struct tq_quantizer *q = fit(dim, bits, m);
	struct tq_index *ix;
	struct tq_search_params sp;
	struct tq_range res;
	float *x = make_data(n, dim), *qs = make_data(nq, dim);
	struct cand c[500];

	CHECK_OK(build(q, x, n, NULL, o, unit_path("r.tqi")));
	CHECK_OK(tq_index_open(unit_path("r.tqi"), &ix));
	tq_search_params_default(&sp);
	sort_metric = m;
	for (size_t i = 0; i < nq; i++) {
		float radius;
		size_t want = 0, got;

		for (uint64_t r = 0; r < n; r++) {
			c[r].s = score(m, qs + i * dim, x + r * dim, dim);
			c[r].id = r;
		}
		qsort(c, n, sizeof(*c), cmp_cand);
		/* Between the 40th and 41st best: no boundary ties. */
		radius = (float)((c[39].s + c[40].s) / 2);
		for (uint64_t r = 0; r < n; r++)
			want += m == TQ_METRIC_L2 ? c[r].s <= radius :
			    c[r].s >= radius;
		sp.threads = (unsigned)(i % 3);
		CHECK_OK(tq_search_range(ix, qs + i * dim, 1, &sp, radius, 0,
		    &res));
		got = res.off[1];
		if (o != TQ_ORIG_NONE) {
			CHECK(got == want);
			for (size_t j = 0; j < got && j < want; j++)
				CHECK(res.ids[j] == c[j].id);
		} else {
			/* Estimates: most of them, nothing far off. */
			CHECK(got + 10 >= want && got <= want + 10);
		}
		for (size_t j = 1; j < got; j++)
			CHECK(m == TQ_METRIC_L2 ?
			    res.scores[j - 1] <= res.scores[j] :
			    res.scores[j - 1] >= res.scores[j]);
		tq_range_free(&res);
		/* A cap keeps the best. */
		CHECK_OK(tq_search_range(ix, qs + i * dim, 1, &sp, radius, 5,
		    &res));
		CHECK(res.off[1] == 5);
		if (o != TQ_ORIG_NONE)
			CHECK(res.ids[0] == c[0].id && res.ids[4] == c[4].id);
		tq_range_free(&res);
	}
	/* Several queries at once: the same as one by one. */
	{
		struct tq_range one;

		CHECK_OK(tq_search_range(ix, qs, nq, &sp, m == TQ_METRIC_L2 ?
		    1e30f : -1e30f, 0, &res));
		CHECK(res.nq == nq && res.off[nq] == nq * (size_t)n);
		CHECK_OK(tq_search_range(ix, qs + 2 * dim, 1, &sp,
		    m == TQ_METRIC_L2 ? 1e30f : -1e30f, 0, &one));
		CHECK(one.off[1] == n && memcmp(one.ids, res.ids + res.off[2],
		    n * sizeof(uint64_t)) == 0);
		tq_range_free(&one);
		tq_range_free(&res);
	}
	CHECK_ST(tq_search_range(ix, qs, 1, &sp, NAN, 0, &res), TQ_ERR_ARG);
	tq_range_free(&res);
	tq_index_close(ix);
	tq_quantizer_free(q);
	free(x);
	free(qs);
}

/*
 * Range search where the rows lie off the origin and the queries near it
 * (l2), or opposite the rows' mean (cosine), so that |q - c| is several
 * times |q| for the point c the rows are encoded about (the fitted centre,
 * or each list's centroid): the margin must scale with |q - c|.  A margin
 * of |q| missed 72 (l2) and 100 (l2, residual) of the 800 rows within
 * the radius; the cosine case passed with it too.  All lists are probed,
 * so the originals make it brute force.
 */
static void
test_range_centred_one(enum tq_metric m, int residual)
{
	const uint32_t dim = 32, n = 600, nq = 8, nl = 4;
	struct tq_fit_params fp;
	struct tq_quantizer *q = NULL;
	struct tq_reader *r;
	struct tq_index *ix;
	struct tq_search_params sp;
	struct tq_range res;
	float *x = make_data(n, dim), qs[8 * 32];
	struct cand c[600];
	uint64_t missed = 0;

	for (size_t i = 0; i < n * dim; i++)
		x[i] += 6.0f;
	for (size_t i = 0; i < nq * dim; i++)
		qs[i] = (m == TQ_METRIC_L2 ? 0.0f : -6.0f) + 0.1f * gauss();
	write_fixture(unit_path("rc.bin"), x, n, dim);
	CHECK_OK(tq_reader_open(unit_path("rc.bin"), NULL, &r));
	tq_fit_params_default(&fp);
	fp.bits = 2;
	fp.metric = m;
	fp.lists = residual ? nl : 0;
	fp.residual = residual;
	CHECK_OK(tq_quantizer_fit(&fp, r, &q));
	tq_reader_close(r);
	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F32, unit_path("rc.tqi")));
	CHECK_OK(tq_index_open(unit_path("rc.tqi"), &ix));
	tq_search_params_default(&sp);
	sp.probes = residual ? nl : 0;
	sort_metric = m;
	for (size_t i = 0; i < nq; i++) {
		float radius;
		size_t want = 100;

		for (uint64_t e = 0; e < n; e++) {
			c[e].s = score(m, qs + i * dim, x + e * dim, dim);
			c[e].id = e;
		}
		qsort(c, n, sizeof(*c), cmp_cand);
		radius = (float)((c[want - 1].s + c[want].s) / 2);
		sp.threads = (unsigned)(i % 3);
		CHECK_OK(tq_search_range(ix, qs + i * dim, 1, &sp, radius, 0,
		    &res));
		if (res.off[1] < want)
			missed += want - res.off[1];
		CHECK(res.off[1] == want);
		for (size_t j = 0; j < res.off[1] && j < want; j++)
			CHECK(res.ids[j] == c[j].id);
		tq_range_free(&res);
	}
	if (missed > 0)
		fprintf(stderr, "range, rows off the origin (%s%s): %llu of "
		    "%llu missed\n", m == TQ_METRIC_L2 ? "l2" : "cosine",
		    residual ? ", residual" : "", (unsigned long long)missed,
		    (unsigned long long)(nq * 100));
	tq_index_close(ix);
	tq_quantizer_free(q);
	free(x);
}

static void
test_range(void)
{
	test_range_centred_one(TQ_METRIC_L2, 0);
	test_range_centred_one(TQ_METRIC_L2, 1);
	test_range_centred_one(TQ_METRIC_COSINE, 0);
	test_range_one(TQ_METRIC_L2, 4, TQ_ORIG_F32);
	test_range_one(TQ_METRIC_L2, 1, TQ_ORIG_F32);
	test_range_one(TQ_METRIC_IP, 2, TQ_ORIG_F32);
	test_range_one(TQ_METRIC_COSINE, 3, TQ_ORIG_F32);
	test_range_one(TQ_METRIC_L2, 4, TQ_ORIG_NONE);
}

/* ------------------------------------------------------------------------ */

static void
test_delete(void)
{
	const uint32_t dim = 16, n = 300;
	struct tq_quantizer *q = fit(dim, 4, TQ_METRIC_L2);
	struct tq_index *ix;
	struct tq_search_params sp;
	struct tq_file_info info;
	float *x = make_data(n, dim), *sc = malloc(n * sizeof(float));
	uint64_t del[120], *ids = malloc(n * sizeof(uint64_t)), nd, hit;
	unsigned char gone[300] = { 0 };
	char b1[4096], b2[4096];
	const char *p = path_of(b1, "d.tqi"), *p2 = path_of(b2, "d2.tqi");

	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F32, p));
	/* Every row of blocks 2 and 3, and scattered others. */
	for (nd = 0; nd < 64; nd++)
		del[nd] = 64 + nd;
	while (nd < 110)
		del[nd++] = rnd() % n;
	del[nd++] = 999999;	/* unknown */
	for (size_t i = 0; i < nd; i++)
		if (del[i] < n)
			gone[del[i]] = 1;
	CHECK_OK(tq_index_delete(p, del, nd, NULL, p2, &hit));
	CHECK_OK(tq_file_verify(p2));
	CHECK_OK(tq_index_open(p2, &ix));
	CHECK(tq_index_count(ix) == n);
	{
		uint64_t live = 0;

		for (size_t r = 0; r < n; r++)
			live += !gone[r];
		CHECK(tq_index_live(ix) == live && hit == n - live);
	}
	tq_search_params_default(&sp);
	sp.k = (uint32_t)tq_index_live(ix);
	sp.oversample = 2;
	for (int rr = 0; rr < 2; rr++) {
		CHECK_OK(tq_search(ix, x, 1, &sp, ids, sc));
		for (uint32_t j = 0; j < sp.k; j++)
			CHECK(ids[j] < n && !gone[ids[j]]);
		sp.oversample = 1;
	}
	{
		struct tq_range res;

		CHECK_OK(tq_search_range(ix, x, 1, &sp, 1e30f, 0, &res));
		CHECK(res.off[1] == tq_index_live(ix));
		for (size_t j = 0; j < res.off[1]; j++)
			CHECK(!gone[res.ids[j]]);
		tq_range_free(&res);
	}
	tq_index_close(ix);
	/* Deleting again counts only new rows; the original is untouched. */
	CHECK_OK(tq_index_delete(p2, del, nd, NULL, p2, &hit));
	CHECK(hit == 0);
	CHECK_OK(tq_file_info(p, &info));
	CHECK(info.live == n && info.nsections == 10);
	/* Everything: refused, the file unchanged. */
	{
		uint64_t all[300];

		for (size_t r = 0; r < n; r++)
			all[r] = r;
		CHECK_OK(tq_file_info(p2, &info));
		CHECK_ST(tq_index_delete(p2, all, n, NULL, p2, &hit),
		    TQ_ERR_EMPTY);
		CHECK_DETAIL("would delete every vector");
		CHECK_OK(tq_index_delete(p2, all, n - 1, NULL, p2, &hit));
		CHECK_OK(tq_index_open(p2, &ix));
		CHECK(tq_index_live(ix) == 1);
		sp.k = 1;
		CHECK_OK(tq_search(ix, x, 1, &sp, ids, sc));
		CHECK(ids[0] == n - 1);
		tq_index_close(ix);
	}
	tq_quantizer_free(q);
	free(x);
	free(sc);
	free(ids);
}

/* Overwrites `len` bytes at `off` of a file. */
static void
poke(const char *path, uint64_t off, const void *p, size_t len)
{
	FILE *fp = fopen(path, "r+b");

	fseek(fp, (long)off, SEEK_SET);
	fwrite(p, 1, len, fp);
	fclose(fp);
}

/* TOMB is validated strictly when an index is opened. */
static void
test_tomb_checks(void)
{
	struct tq_quantizer *q = fit(8, 2, TQ_METRIC_L2);
	float *x = make_data(30, 8);
	struct tq_file_info info;
	struct tq_index *ix;
	uint64_t del = 4, toff = 0;
	char bp[4096];
	const char *p = path_of(bp, "t.tqi");
	uint8_t b;

	CHECK_OK(build(q, x, 30, NULL, TQ_ORIG_NONE, p));
	CHECK_OK(tq_index_delete(p, &del, 1, NULL, p, NULL));
	CHECK_OK(tq_file_info(p, &info));
	for (uint32_t i = 0; i < info.nsections; i++)
		if (strcmp(info.sections[i].tag, "TOMB") == 0) {
			toff = info.sections[i].offset;
			CHECK(info.sections[i].length == 4);
		}
	CHECK(toff > 0 && info.live == 29);
	/* A bit past n = 30. */
	b = 0x40;
	poke(p, toff + 3, &b, 1);
	CHECK_ST(tq_index_open(p, &ix), TQ_ERR_FORMAT);
	CHECK_DETAIL("TOMB");
	/* Every row deleted. */
	b = 0xff;
	poke(p, toff, &b, 1);
	poke(p, toff + 1, &b, 1);
	poke(p, toff + 2, &b, 1);
	b = 0x3f;
	poke(p, toff + 3, &b, 1);
	CHECK_ST(tq_index_open(p, &ix), TQ_ERR_FORMAT);
	CHECK_DETAIL("every vector is deleted");
	/* Mutations verify checksums first. */
	CHECK_ST(tq_index_compact(p, NULL, unit_path("t2.tqi")),
	    TQ_ERR_CHECKSUM);
	tq_quantizer_free(q);
	free(x);
}

/* ------------------------------------------------------------------------ */

/*
 * Do indexes a and b give the same results (ids and scores, every
 * metric's k = 10, with re-rank when they have originals) for the first
 * nq rows of x?
 */
static int
same_results(const char *a, const char *b, const float *x, size_t nq,
    uint32_t dim)
{
	struct tq_index *ia, *ib;
	struct tq_search_params sp;
	uint64_t ida[200], idb[200];
	float sa[200], sb[200];
	int ok = 1;

	(void)dim;
	if (tq_index_open(a, &ia) != TQ_OK || tq_index_open(b, &ib) != TQ_OK)
		return 0;
	for (int os = 0; os < 2 && ok; os++) {
		tq_search_params_default(&sp);
		sp.threads = 2;
		if (os == 1) {
			if (tq_index_originals(ia) == TQ_ORIG_NONE)
				break;
			sp.oversample = 3;
		}
		if (tq_search(ia, x, nq, &sp, ida, sa) != TQ_OK ||
		    tq_search(ib, x, nq, &sp, idb, sb) != TQ_OK)
			ok = 0;
		for (size_t i = 0; ok && i < nq * sp.k; i++)
			ok = ida[i] == idb[i] && (sa[i] == sb[i] ||
			    (isnan(sa[i]) && isnan(sb[i])));
	}
	tq_index_close(ia);
	tq_index_close(ib);
	return ok;
}

static void
test_append_one(enum tq_metric m, unsigned bits, enum tq_originals o,
    uint32_t lists)
{
	const uint32_t dim = 20, na = 150, nb = 77;
	float *x = make_data(na + nb, dim);
	struct tq_quantizer *q = lists ? fit_data(x, na, dim, bits, m, lists) :
	    fit(dim, bits, m);
	struct tq_reader *r;
	struct tq_build_params bp;
	char ba[4096], bu[4096];
	const char *a = path_of(ba, "a.tqi"), *u = path_of(bu, "u.tqi");
	uint64_t del[] = { 0, 7, 31, 32, 100, 149 }, ids[227];
	float *kept = malloc((na + nb) * dim * sizeof(float));
	size_t nk = 0;

	/* Build A, append B == build A u B. */
	CHECK_OK(build(q, x, na, NULL, o, a));
	CHECK_OK(build(q, x, na + nb, NULL, o, u));
	write_fixture(unit_path("b.bin"), x + na * dim, nb, dim);
	CHECK_OK(tq_reader_open(unit_path("b.bin"), NULL, &r));
	tq_build_params_default(&bp);
	bp.threads = 3;
	bp.originals = TQ_ORIG_NONE;	/* ignored */
	CHECK_OK(tq_index_append(a, r, NULL, &bp, a));
	tq_reader_close(r);
	/* A second segment: searched like the one-segment index. */
	CHECK(same_results(a, u, x, 20, dim));
	CHECK_OK(tq_index_compact(a, NULL, unit_path("a1.tqi")));
	CHECK(files_equal(unit_path("a1.tqi"), u));

	/* Delete from A, append B == build (A - deleted) u B with ids. */
	CHECK_OK(build(q, x, na, NULL, o, a));
	CHECK_OK(tq_index_delete(a, del, 6, NULL, a, NULL));
	for (uint64_t i = 0; i < na + nb; i++) {
		int dead = 0;

		for (size_t j = 0; j < 6; j++)
			dead |= del[j] == i;
		if (dead)
			continue;
		memcpy(kept + nk * dim, x + i * dim, dim * sizeof(float));
		ids[nk++] = i;
	}
	write_ids(unit_path("u.ids"), ids, nk);
	CHECK_OK(build(q, kept, nk, unit_path("u.ids"), o, u));
	CHECK_OK(tq_reader_open(unit_path("b.bin"), NULL, &r));
	CHECK_OK(tq_index_append(a, r, NULL, NULL, unit_path("a2.tqi")));
	tq_reader_close(r);
	CHECK(files_equal(unit_path("a2.tqi"), u));

	/* Compact == build of the survivors. */
	write_ids(unit_path("k.ids"), ids, nk - nb);
	CHECK_OK(build(q, kept, nk - nb, unit_path("k.ids"), o, u));
	CHECK_OK(tq_index_compact(a, NULL, unit_path("c.tqi")));
	CHECK(files_equal(unit_path("c.tqi"), u));
	tq_quantizer_free(q);
	free(x);
	free(kept);
}

static void
test_append(void)
{
	test_append_one(TQ_METRIC_L2, 4, TQ_ORIG_F32, 0);
	test_append_one(TQ_METRIC_COSINE, 3, TQ_ORIG_F16, 0);
	test_append_one(TQ_METRIC_IP, 1, TQ_ORIG_NONE, 0);
	test_append_one(TQ_METRIC_L2, 2, TQ_ORIG_F32, 0);
	/* IVF: old rows keep their lists, new ones join theirs. */
	test_append_one(TQ_METRIC_L2, 4, TQ_ORIG_F32, 7);
	test_append_one(TQ_METRIC_COSINE, 2, TQ_ORIG_NONE, 3);
	/* Old lists move a block at a time: every field layout. */
	test_append_one(TQ_METRIC_IP, 1, TQ_ORIG_F16, 5);
	test_append_one(TQ_METRIC_L2, 3, TQ_ORIG_F32, 6);
}

/* The share of the top 10 of a's search that b's also returns. */
static double
overlap10(const char *a, const char *b, const float *x, size_t nq)
{
	struct tq_index *ia, *ib;
	struct tq_search_params sp;
	uint64_t ida[200], idb[200];
	float sa[200], sb[200];
	size_t hit = 0;

	if (tq_index_open(a, &ia) != TQ_OK || tq_index_open(b, &ib) != TQ_OK)
		return -1.0;
	tq_search_params_default(&sp);
	if (tq_search(ia, x, nq, &sp, ida, sa) != TQ_OK ||
	    tq_search(ib, x, nq, &sp, idb, sb) != TQ_OK)
		nq = 0;
	for (size_t i = 0; i < nq; i++)
		for (size_t j = 0; j < 10; j++)
			for (size_t k = 0; k < 10; k++)
				hit += ida[i * 10 + j] == idb[i * 10 + k];
	tq_index_close(ia);
	tq_index_close(ib);
	return nq ? (double)hit / (double)(nq * 10) : -1.0;
}

/* Does segment s of the index at path hold compact factors (FACH)? */
static int
seg_fach(const char *path, uint32_t s)
{
	struct tq_index *ix;
	int r;

	if (tq_index_open(path, &ix) != TQ_OK)
		return -1;
	r = s < ix->nparts ? ix->parts[s].fach != NULL : -1;
	tq_index_close(ix);
	return r;
}

/* Appends rows [r0, r0 + n) of x to the index at a, factors f. */
static enum tq_status
append_rows(const char *a, const float *x, size_t r0, size_t n,
    uint32_t dim, enum tq_factors f, const char *out)
{
	struct tq_build_params bp;
	struct tq_reader *r;
	enum tq_status st;

	write_fixture(unit_path("app.bin"), x + r0 * dim, n, dim);
	TQ_TRY(tq_reader_open(unit_path("app.bin"), NULL, &r));
	tq_build_params_default(&bp);
	bp.threads = 2;
	bp.factors = f;
	st = tq_index_append(a, r, NULL, &bp, out);
	tq_reader_close(r);
	return st;
}

/*
 * The two factor layouts (tq(5) FACT, FACH) in one index: an append
 * keeps the layout of the last segment unless told, a compaction of
 * mixed segments is byte for byte a fresh build of the rows (compact, or
 * f32 when asked for from f32 rows), and the compact index searches
 * like the f32 one up to the factors' rounding (recall against it).
 */
static void
test_factors_one(enum tq_metric m, unsigned bits, uint32_t lists)
{
	const uint32_t dim = 24, na = 100, nb = 45, nc = 70;
	const uint32_t n = na + nb + nc;
	float *x = make_data(n, dim);
	struct tq_quantizer *q = lists ? fit_data(x, na, dim, bits, m, lists) :
	    fit(dim, bits, m);
	char ba[4096], bu[4096], bv[4096];
	const char *a = path_of(ba, "fa.tqi"), *u = path_of(bu, "fu.tqi");
	const char *v = path_of(bv, "fv.tqi");
	struct tq_build_params bp;
	struct tq_file_info fi;

	build_factors = TQ_FACTORS_F32;
	CHECK_OK(build(q, x, na, NULL, TQ_ORIG_F32, a));
	CHECK(seg_fach(a, 0) == 0);
	CHECK_OK(tq_file_info(a, &fi));
	/* Row numbers for ids: 4 bytes each (ID32). */
	CHECK(fi.bytes_per_vector == (4.0 * (double)(tq_block_bytes(q) +
	    384) + 2.0 * na) / na + 4.0);
	/* The append keeps f32; a second one, told f16, makes it mixed. */
	CHECK_OK(append_rows(a, x, na, nb, dim, TQ_FACTORS_DEFAULT, a));
	CHECK(seg_fach(a, 1) == 0);
	CHECK_OK(append_rows(a, x, na + nb, nc, dim, TQ_FACTORS_F16, a));
	CHECK(seg_fach(a, 2) == 1);
	/* An f16 last segment: the next append stays f16. */
	CHECK_OK(append_rows(a, x, 0, 1, dim, TQ_FACTORS_DEFAULT,
	    unit_path("fw.tqi")));
	CHECK(seg_fach(unit_path("fw.tqi"), 0) == 1);
	build_factors = TQ_FACTORS_DEFAULT;
	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F32, u));
	CHECK(seg_fach(u, 0) == 1);
	CHECK_OK(tq_file_info(u, &fi));
	CHECK(fi.bytes_per_vector == (7.0 * (double)(tq_block_bytes(q) +
	    160) + 2.0 * n) / n + 4.0);
	/* Compaction of mixed segments == a fresh (compact) build. */
	CHECK_OK(tq_index_compact(a, NULL, unit_path("fc.tqi")));
	CHECK(files_equal(unit_path("fc.tqi"), u));
	CHECK(same_results(unit_path("fc.tqi"), u, x, 20, dim));
	/* ... and asked for f32, from f32 rows, a fresh f32 build. */
	build_factors = TQ_FACTORS_F32;
	CHECK_OK(build(q, x, na + nb, NULL, TQ_ORIG_F32, v));
	CHECK_OK(build(q, x, na, NULL, TQ_ORIG_F32, a));
	CHECK_OK(append_rows(a, x, na, nb, dim, TQ_FACTORS_DEFAULT, a));
	tq_build_params_default(&bp);
	bp.factors = TQ_FACTORS_F32;
	CHECK_OK(tq_index_compact(a, &bp, unit_path("fd.tqi")));
	CHECK(files_equal(unit_path("fd.tqi"), v));
	/* Compact to f32 and back to f16: the f16 build again. */
	build_factors = TQ_FACTORS_DEFAULT;
	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F32, u));
	CHECK_OK(tq_index_compact(u, &bp, unit_path("fe.tqi")));
	CHECK(seg_fach(unit_path("fe.tqi"), 0) == 0);
	CHECK(overlap10(unit_path("fe.tqi"), u, x, 20) >= 0.9);
	bp.factors = (enum tq_factors)7;
	CHECK(tq_index_compact(u, &bp, unit_path("ff.tqi")) == TQ_ERR_ARG);
	tq_quantizer_free(q);
	free(x);
}

/*
 * The compact rows themselves (tq_fach_canon): s = 0, norms past f16's
 * range (raw pixels' |x|^2, 1e30), tiny ones, NaN and infinities never
 * crash; values come back within the stated rounding; canonical floats
 * pack to bytes that read back to the same floats (what compaction
 * relies on); exponents past -126 .. 127 in a file are clamped.
 */
static void
test_fach_rows(void)
{
	static const double sv[] = { 1.0, 3000.0, 1e30, 1e-30, 0.5, 7e4,
	    2.5e-8, 1e37 };
	double cc = 2.0e7;
	uint8_t blk[TQ_FACH_BLOCK], blk2[TQ_FACH_BLOCK];
	float fb[3 * TQ_BLOCK], f[3], s, t;

	memset(fb, 0, sizeof(fb));
	for (int l2 = 0; l2 < 2; l2++)
		for (size_t i = 0; i < sizeof(sv) / sizeof(sv[0]); i++) {
			double S = sv[i], B = -0.3 * S * S, X = 2.0 * S * S +
			    (l2 ? cc : 0.0), T, st;

			f[0] = (float)S;
			f[1] = (float)B;
			f[2] = (float)X;
			T = l2 ? (2.0 * f[1] - (double)f[2] + cc) / f[0] :
			    (double)f[1] / f[0];
			tq_fach_canon(f, l2, cc);
			CHECK(f[2] >= -126 && f[2] <= 111);
			fb[i] = f[0];
			fb[TQ_BLOCK + i] = f[1];
			fb[2 * TQ_BLOCK + i] = f[2];
			tq_fach_pack(fb, 1, blk);
			tq_fach_decode(blk, (unsigned)i, &s, &t);
			st = (double)s * t;
			if (!isfinite(S * T))
				continue;
			CHECK(fabs(s - S) <= 0x1p-11 * fabs(S));
			CHECK(fabs(st - S * T) <= 0x1p-10 * fabs(S) *
			    (fabs(S) > fabs(T) ? fabs(S) : fabs(T)) + 1e-300);
		}
	/* Canonical floats survive bytes and back exactly. */
	for (unsigned j = 0; j < TQ_BLOCK; j++) {
		tq_fach_row(blk, j, f);
		fb[j] = f[0];
		fb[TQ_BLOCK + j] = f[1];
		fb[2 * TQ_BLOCK + j] = f[2];
	}
	tq_fach_pack(fb, 1, blk2);
	CHECK(memcmp(blk, blk2, sizeof(blk)) == 0);
	/* s = 0 (x = c): t = 0, the key is the centre's. */
	f[0] = 0.0f;
	f[1] = 0.0f;
	f[2] = 5.0f;
	tq_fach_canon(f, 1, 5.0);
	CHECK(f[0] == 0.0f && f[1] == 0.0f && f[2] == 0.0f);
	/* Non-finite: no crash, exponent 0, NaN or infinity kept. */
	f[0] = NAN;
	f[1] = 1.0f;
	f[2] = 1.0f;
	tq_fach_canon(f, 0, 0.0);
	CHECK(isnan(f[0]) && f[2] == 0.0f);
	f[0] = 1.0f;
	f[1] = INFINITY;
	f[2] = 0.0f;
	tq_fach_canon(f, 0, 0.0);
	CHECK(isinf(f[1]) && f[2] == 0.0f);
	/* Hostile exponents in a file: clamped to -126 .. 127. */
	memset(blk, 0, sizeof(blk));
	wr_le16(blk, 0x3c00u);		/* 1.0 */
	wr_le16(blk + 2, 0x3c00u);
	wr_le16(blk + 2 * TQ_BLOCK, 0x7bffu);	/* 65504 */
	blk[4 * TQ_BLOCK] = 0x80;	/* -128 */
	blk[4 * TQ_BLOCK + 1] = 0x7f;	/* 127 */
	tq_fach_decode(blk, 0, &s, &t);
	CHECK(s == 0x1p-126f && t == 65504.0f * 0x1p-126f);
	tq_fach_decode(blk, 1, &s, &t);
	CHECK(s == 0x1p127f && t == 0.0f);
	CHECK(tq_fach_pow2(-1000) == 0x1p-126f && tq_fach_pow2(1000) ==
	    0x1p127f);
}

static void
test_factors(void)
{
	test_factors_one(TQ_METRIC_L2, 4, 0);
	test_factors_one(TQ_METRIC_COSINE, 1, 0);
	test_factors_one(TQ_METRIC_IP, 3, 0);
	test_factors_one(TQ_METRIC_L2, 2, 5);
}

/* Failures leave the index as it was: NaN, wrong dimension, ids. */
static void
test_append_errors(void)
{
	struct tq_quantizer *q = fit(8, 4, TQ_METRIC_L2);
	float *x = make_data(40, 8);
	struct tq_reader *r;
	struct tq_ids_reader *ids;
	char bp[4096];
	const char *p = path_of(bp, "e.tqi");
	struct stat st0, st1;
	uint64_t few[3] = { 101, 102, 103 };

	CHECK_OK(build(q, x, 40, NULL, TQ_ORIG_F32, p));
	CHECK_OK(build(q, x, 40, NULL, TQ_ORIG_F32, unit_path("e0.tqi")));
	stat(p, &st0);
	x[5 * 8 + 3] = NAN;
	write_fixture(unit_path("nan.bin"), x, 10, 8);
	CHECK_OK(tq_reader_open(unit_path("nan.bin"), NULL, &r));
	CHECK_ST(tq_index_append(p, r, NULL, NULL, p), TQ_ERR_NONFINITE);
	tq_reader_close(r);
	write_fixture(unit_path("d4.bin"), x, 10, 4);
	CHECK_OK(tq_reader_open(unit_path("d4.bin"), NULL, &r));
	CHECK_ST(tq_index_append(p, r, NULL, NULL, p), TQ_ERR_MISMATCH);
	tq_reader_close(r);
	write_fixture(unit_path("ok.bin"), x + 10 * 8, 5, 8);
	write_ids(unit_path("few.ids"), few, 3);
	CHECK_OK(tq_reader_open(unit_path("ok.bin"), NULL, &r));
	CHECK_OK(tq_ids_open(unit_path("few.ids"), &ids));
	CHECK_ST(tq_index_append(p, r, ids, NULL, p), TQ_ERR_MISMATCH);
	tq_ids_close(ids);
	tq_reader_close(r);
	stat(p, &st1);
	CHECK(files_equal(p, unit_path("e0.tqi")));
	CHECK(st0.st_ino == st1.st_ino);
	/* Ids that repeat, or that are live already: refused. */
	write_ids(unit_path("rep.ids"), (uint64_t[]){ 90, 91, 92, 91, 77 }, 5);
	CHECK_OK(tq_reader_open(unit_path("ok.bin"), NULL, &r));
	CHECK_OK(tq_ids_open(unit_path("rep.ids"), &ids));
	CHECK_ST(tq_index_append(p, r, ids, NULL, p), TQ_ERR_DUPLICATE);
	CHECK(strcmp(tq_errdetail(), "id 91 repeats: rows 1 and 3 of the "
	    "ids") == 0);
	tq_ids_close(ids);
	tq_reader_close(r);
	write_ids(unit_path("live.ids"), (uint64_t[]){ 90, 91, 92, 7, 77 }, 5);
	CHECK_OK(tq_reader_open(unit_path("ok.bin"), NULL, &r));
	CHECK_OK(tq_ids_open(unit_path("live.ids"), &ids));
	CHECK_ST(tq_index_append(p, r, ids, NULL, p), TQ_ERR_DUPLICATE);
	CHECK(strcmp(tq_errdetail(), "id 7 (row 3 of the ids) is already in "
	    "the index") == 0);
	tq_ids_close(ids);
	tq_reader_close(r);
	CHECK(files_equal(p, unit_path("e0.tqi")));
	/* Ids given: used as they are. */
	CHECK_OK(tq_reader_open(unit_path("ok.bin"), NULL, &r));
	write_ids(unit_path("five.ids"), (uint64_t[]){ 90, 91, 92, 93, 77 }, 5);
	CHECK_OK(tq_ids_open(unit_path("five.ids"), &ids));
	CHECK_OK(tq_index_append(p, r, ids, NULL, p));
	tq_ids_close(ids);
	tq_reader_close(r);
	{
		struct tq_index *ix;

		CHECK_OK(tq_index_open(p, &ix));
		/* The new segment starts on a block boundary: row 64. */
		CHECK(tq_index_count(ix) == 45 && tq_index_id(ix, 68) == 77 &&
		    tq_index_id(ix, 64) == 90);
		tq_index_close(ix);
	}
	/* Default ids continue after the largest (93). */
	CHECK_OK(tq_reader_open(unit_path("ok.bin"), NULL, &r));
	CHECK_OK(tq_index_append(p, r, NULL, NULL, p));
	tq_reader_close(r);
	{
		struct tq_index *ix;

		CHECK_OK(tq_index_open(p, &ix));
		CHECK(tq_index_count(ix) == 50 && tq_index_id(ix, 96) == 94 &&
		    tq_index_id(ix, 100) == 98);
		tq_index_close(ix);
	}
	/* With replace, an upsert: the old row of id 7 goes, the new stays. */
	write_fixture(unit_path("one.bin"), x + 30 * 8, 1, 8);
	write_ids(unit_path("seven.ids"), (uint64_t[]){ 7 }, 1);
	CHECK_OK(tq_reader_open(unit_path("one.bin"), NULL, &r));
	CHECK_OK(tq_ids_open(unit_path("seven.ids"), &ids));
	{
		struct tq_build_params rp;
		struct tq_index *ix;

		tq_build_params_default(&rp);
		rp.replace = 1;
		CHECK_OK(tq_index_append(p, r, ids, &rp, p));
		CHECK_OK(tq_index_open(p, &ix));
		CHECK(tq_index_count(ix) == 51 && tq_index_live(ix) == 50);
		tq_index_close(ix);
	}
	tq_ids_close(ids);
	tq_reader_close(r);
	/*
	 * Default ids never reach 2^64 - 1 (results use it for "none"): after
	 * an id of 2^64 - 2 an append without ids fails, the file as it was.
	 */
	write_ids(unit_path("top.ids"), (uint64_t[]){ UINT64_MAX - 1 }, 1);
	CHECK_OK(tq_reader_open(unit_path("one.bin"), NULL, &r));
	CHECK_OK(tq_ids_open(unit_path("top.ids"), &ids));
	CHECK_OK(tq_index_append(p, r, ids, NULL, p));
	tq_ids_close(ids);
	tq_reader_close(r);
	CHECK_OK(tq_reader_open(unit_path("one.bin"), NULL, &r));
	{
		struct stat sa, sb;

		stat(p, &sa);
		CHECK_ST(tq_index_append(p, r, NULL, NULL, p), TQ_ERR_OVERFLOW);
		stat(p, &sb);
		CHECK(sa.st_size == sb.st_size);
	}
	tq_reader_close(r);
	tq_quantizer_free(q);
	free(x);
}

/* ------------------------------------------------------------------------ */
/* IVF                                                                       */

/*
 * tq_ivf_nearest equals ranking every list by its fixed-order score,
 * ties by the smaller list, for l2, normalised l2 and ip; duplicate
 * centroids tie exactly.
 */
static void
ivf_nearest_case(uint32_t dim, uint32_t nl)
{
	const uint32_t n = 300, p = 5;
	float *c = make_data(nl, dim), *x = make_data(n, dim);
	float *sc = malloc(nl * sizeof(*sc));
	struct tq_ivf v;
	uint32_t *got = malloc(n * p * sizeof(*got));
	uint32_t *got1 = malloc(n * sizeof(*got1));
	uint32_t *early = malloc(70 * p * sizeof(*early));

	memcpy(c + 5 * dim, c + 20 * dim, dim * sizeof(float));	/* tie */
	memcpy(x, c + 20 * dim, dim * sizeof(float));	/* on the tie */
	/*
	 * Near ties, which a filter must leave to the re-check: list 30 is
	 * list 31 one ulp apart in one coordinate, and rows on them.
	 */
	memcpy(c + 30 * dim, c + 31 * dim, dim * sizeof(float));
	c[30 * dim + 3] = nextafterf(c[30 * dim + 3], 1.0f);
	memcpy(x + dim, c + 31 * dim, dim * sizeof(float));
	memcpy(x + 2 * dim, c + 30 * dim, dim * sizeof(float));
	/*
	 * Rows nearly halfway between two lists, nearer one by less than
	 * bf16's rounding moves a score: a filter that trusted its scores
	 * would choose wrong.
	 */
	for (uint32_t i = 3; i < 103; i++) {
		const float *a = c + (i % nl) * dim, *b = c + ((i * 7 + 1) % nl) *
		    dim;
		float t = 1e-5f * (float)((int)(i % 5) - 2);

		for (uint32_t d = 0; d < dim; d++)
			x[i * dim + d] = 0.5f * (a[d] + b[d]) + t * (a[d] - b[d]);
	}
	memset(&v, 0, sizeof(v));
	v.nlist = nl;
	v.cent = c;
	CHECK_OK(tq_ivf_prepare(&v, dim));
	/*
	 * The bf16 centroids are made by the first batch, not before, or
	 * after 64 single rows (ivf.c BF16_SINGLE_AFTER): the rows before
	 * and after are scored in the fixed order and through the filter.
	 */
	CHECK(v.bfc == NULL);
	for (uint32_t i = 0; i < 70; i++)
		CHECK_OK(tq_ivf_nearest(&v, dim, x + i * dim, 1, 0, 0, p,
		    early + i * p, NULL, 0));
	/* AVX512_BF16's filter or, without it, near_fma.c's (the same bf16). */
	CHECK((v.bfc != NULL) == (nl >= 64 && tq_bf16_single_kernel() !=
	    NULL));
	for (int mode = 0; mode < 3; mode++) {
		int norm = mode == 1, ip = mode == 2, bad = 0;

		CHECK_OK(tq_ivf_nearest(&v, dim, x, n, norm, ip, p, got, NULL, 0));
		if (mode == 0)
			CHECK(memcmp(early, got, 70 * p * sizeof(*got)) == 0);
		/* The nearest list alone: the bf16 filter where there is one. */
		CHECK_OK(tq_ivf_nearest(&v, dim, x, n, norm, ip, 1, got1, NULL,
		    0));
		CHECK((v.bfc != NULL) == (nl >= 64 &&
		    tq_bf16_single_kernel() != NULL));
		for (uint32_t i = 0; i < n; i++)
			bad |= got1[i] != got[i * p];
		for (uint32_t i = 0; i < n; i++) {
			float nx = 0, inv = 1;
			uint32_t best[5];

			for (uint32_t d = 0; d < dim; d++)
				nx += x[i * dim + d] * x[i * dim + d];
			if (norm)
				inv = (float)(1.0 / sqrt((double)nx));
			tq_dot_rows(x + i * dim, dim, 1, c, nl, dim, sc, 1);
			for (uint32_t o = 0; o < nl; o++)
				sc[o] = ip ? sc[o] * inv :
				    2.0f * (sc[o] * inv) - v.n2[o];
			for (uint32_t t = 0; t < p; t++) {
				uint32_t b = UINT32_MAX;

				for (uint32_t o = 0; o < nl; o++) {
					int used = 0;

					for (uint32_t u = 0; u < t; u++)
						used |= best[u] == o;
					if (!used && (b == UINT32_MAX ||
					    sc[o] > sc[b]))
						b = o;
				}
				best[t] = b;
				bad |= got[i * p + t] != b;
			}
		}
		CHECK(!bad);
		if (mode == 0)
			CHECK(got[0] == 5 && got[1] == 20);
		/* One row at a time (the one-pass fixed-order path), p and 1. */
		for (uint32_t i = 0; i < n; i++) {
			uint32_t one[5], first;

			CHECK_OK(tq_ivf_nearest(&v, dim, x + i * dim, 1, norm,
			    ip, p, one, NULL, 0));
			CHECK_OK(tq_ivf_nearest(&v, dim, x + i * dim, 1, norm,
			    ip, 1, &first, NULL, 0));
			bad |= memcmp(one, got + i * p, sizeof(one)) != 0 ||
			    first != got[i * p];
		}
		CHECK(!bad);
	}
	/* Centroids so large the scores overflow: still p lists < nlist. */
	for (uint32_t i = 0; i < nl * dim; i++)
		c[i] = i % 2 ? 3e38f : -3e38f;
	CHECK_OK(tq_ivf_prepare(&v, dim));
	CHECK_OK(tq_ivf_nearest(&v, dim, x, n, 0, 0, p, got, NULL, 0));
	{
		int ok = 1;

		for (uint32_t i = 0; i < n * p; i++)
			ok &= got[i] < nl;
		CHECK(ok);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t one[5];

			CHECK_OK(tq_ivf_nearest(&v, dim, x + i * dim, 1, 0, 0,
			    p, one, NULL, 0));
			for (uint32_t t = 0; t < p; t++)
				ok &= one[t] < nl;
		}
		CHECK(ok);
	}
	tq_ivf_release(&v);
	free(c);
	free(x);
	free(sc);
	free(got);
	free(got1);
	free(early);
}

/*
 * Centroids in IVFC's bf16 form (tq_ivf_round; cent NULL, widened by
 * tq_ivf_rows or copied by wide_ready) choose the same lists as the f32
 * values they stand for, on every path: batches (sgemm and the bf16
 * filter), single rows in the fixed order and through the filter, rows
 * and centroids far from 0 (at), where the filter rules out nothing.
 * Each value moves from the f32 centroid by at most half a bf16 step of
 * its offset from the mean (2^-8 of it), and half an f32 step of the
 * offset and of the sum.
 */
static void
ivf_bf16_case(uint32_t dim, uint32_t nl, float at)
{
	const uint32_t n = 300, p = 5;
	float *c = make_data(nl, dim), *c0 = make_data(nl, dim);
	float *x = make_data(n, dim), *base = malloc(dim * sizeof(*base));
	float *w = malloc((size_t)nl * dim * sizeof(*w));
	uint16_t *cb = malloc((size_t)nl * dim * sizeof(*cb));
	uint32_t *a = malloc(n * p * sizeof(*a)), *b = malloc(n * p *
	    sizeof(*b));
	struct tq_ivf v32, vb;
	int bad = 0;

	/* Around at: away from 0, the offsets from the mean are rounded. */
	for (uint32_t i = 0; i < nl * dim; i++)
		c[i] = at + 3.0f * c[i];
	for (uint32_t i = 0; i < n * dim; i++)
		x[i] = at + 3.0f * x[i];
	memcpy(c0, c, (size_t)nl * dim * sizeof(*c));
	tq_ivf_round(c, nl, dim, base, cb);
	for (uint32_t o = 0; o < nl; o++)
		for (uint32_t d = 0; d < dim; d++) {
			double e = fabs((double)c0[o * dim + d] - base[d]);
			double lim = e * (0x1p-8 + 0x1p-23) +
			    fabs((double)c[o * dim + d]) * 0x1p-24;

			bad |= !(fabs((double)c[o * dim + d] -
			    c0[o * dim + d]) <= lim);
		}
	CHECK(!bad);
	memset(&v32, 0, sizeof(v32));
	memset(&vb, 0, sizeof(vb));
	v32.nlist = vb.nlist = nl;
	v32.cent = c;
	vb.cb = cb;
	vb.cbase = base;
	CHECK(tq_ivf_rows(&vb, dim, 0, nl, w) == w);
	CHECK(memcmp(w, c, (size_t)nl * dim * sizeof(*c)) == 0);
	CHECK(tq_ivf_rows(&v32, dim, 2, 1, w) == c + 2 * dim);
	CHECK_OK(tq_ivf_prepare(&v32, dim));
	CHECK_OK(tq_ivf_prepare(&vb, dim));
	CHECK(memcmp(v32.n2, vb.n2, nl * sizeof(*vb.n2)) == 0);
	CHECK(v32.cmax == vb.cmax && v32.n2max == vb.n2max);
	for (uint32_t i = 0; i < 70; i++) {
		CHECK_OK(tq_ivf_nearest(&v32, dim, x + i * dim, 1, 0, 0, p,
		    a + i * p, NULL, 0));
		CHECK_OK(tq_ivf_nearest(&vb, dim, x + i * dim, 1, 0, 0, p,
		    b + i * p, NULL, 0));
	}
	CHECK(memcmp(a, b, 70 * p * sizeof(*a)) == 0);
	/*
	 * Without an f32 copy to read, the filter from the first single row,
	 * reading the offsets where they are: no copy in bf16 either.  At
	 * 1e5 the bound (the rounding of x, the fixed order's error) hides
	 * the differences between lists and leaves them all: then the f32
	 * copy is made, once.
	 */
	CHECK(vb.bfc == NULL && vb.cbn != NULL && v32.cbn == NULL);
	if (nl >= 64 && tq_bf16_single_kernel() != NULL &&
	    (at == 0.0f || at >= 1e5f))
		CHECK((vb.wide != NULL) == (at >= 1e5f));
	for (int mode = 0; mode < 3; mode++) {
		int norm = mode == 1, ip = mode == 2;

		for (uint32_t pp = 1; pp <= p; pp += p - 1) {
			CHECK_OK(tq_ivf_nearest(&v32, dim, x, n, norm, ip, pp,
			    a, NULL, 0));
			CHECK_OK(tq_ivf_nearest(&vb, dim, x, n, norm, ip, pp, b,
			    NULL, 0));
			CHECK(memcmp(a, b, n * pp * sizeof(*a)) == 0);
		}
	}
	tq_ivf_release(&v32);
	tq_ivf_release(&vb);
	free(c);
	free(c0);
	free(x);
	free(base);
	free(w);
	free(cb);
	free(a);
	free(b);
}

/*
 * A fitted quantizer writes its lists in bf16 (encoding 1, half the
 * bytes) and reads back the same fingerprint, borrowed from a map or
 * copied; one with f32 centroids (an older file) keeps encoding 0.  Both
 * choose the same lists.  (Damaged IVFC headers and values:
 * tests/malformed/make-index-cases.)
 */
static void
test_ivf_bf16_file(void)
{
	const uint32_t dim = 24, nl = 9;
	const size_t n = 400;
	float *x = make_data(n, dim);
	struct tq_quantizer *q = fit_data(x, n, dim, 4, TQ_METRIC_L2, nl), *r;
	struct tq_quantizer *r32, *rc;
	uint64_t fp32;
	struct tq_file f;
	uint64_t len;
	uint32_t la[400], lb[400];
	const uint16_t *cb;
	const char *p = unit_path("ivfq.tq"), *p32 = unit_path("ivfq32.tq");

	CHECK(q->ivf.cb != NULL && q->ivf.cent != NULL);
	CHECK_OK(tq_quantizer_save(q, p));
	CHECK_OK(tq_file_map(p, &f));
	CHECK(tq_file_section(&f, TQ_TAG_IVFC, &len) != NULL);
	CHECK(len == TQ_IVFC_HEADER + 4 * dim + 2 * (uint64_t)nl * dim);
	CHECK_OK(tq_quantizer_from_file(&f, 1, &rc));
	CHECK(rc->ivf.cent == NULL && rc->ivf.cb != NULL);
	CHECK(tq_quantizer_fingerprint(rc) == tq_quantizer_fingerprint(q));
	CHECK_OK(tq_ivf_nearest(&rc->ivf, dim, x, n, 0, 0, 1, lb, NULL, 0));
	tq_quantizer_free(rc);
	tq_file_unmap(&f);
	CHECK_OK(tq_ivf_nearest(&q->ivf, dim, x, n, 0, 0, 1, la, NULL, 0));
	CHECK(memcmp(la, lb, sizeof(la)) == 0);
	CHECK_OK(tq_quantizer_load(p, &r));
	CHECK(r->ivf.cent == NULL && r->ivf.cb != NULL);
	CHECK(tq_quantizer_fingerprint(r) == tq_quantizer_fingerprint(q));
	CHECK_OK(tq_ivf_nearest(&q->ivf, dim, x, n, 0, 0, 1, la, NULL, 0));
	CHECK_OK(tq_ivf_nearest(&r->ivf, dim, x, n, 0, 0, 1, lb, NULL, 0));
	CHECK(memcmp(la, lb, sizeof(la)) == 0);
	/* f32 centroids, as an older tq-fit wrote them. */
	cb = q->ivf.cb;
	q->ivf.cb = NULL;
	CHECK_OK(tq_quantizer_save(q, p32));
	fp32 = tq_quantizer_fingerprint(q);
	q->ivf.cb = cb;
	CHECK_OK(tq_quantizer_load(p32, &r32));
	CHECK(r32->ivf.cent != NULL && r32->ivf.cb == NULL);
	CHECK(tq_quantizer_fingerprint(r32) != tq_quantizer_fingerprint(q));
	/* Written back as read: an index built from it keeps its fingerprint. */
	CHECK(tq_quantizer_fingerprint(r32) == fp32);
	CHECK_OK(tq_ivf_nearest(&r32->ivf, dim, x, n, 0, 0, 1, lb, NULL, 0));
	CHECK(memcmp(la, lb, sizeof(la)) == 0);
	tq_quantizer_free(q);
	tq_quantizer_free(r);
	tq_quantizer_free(r32);
	free(x);
}

/*
 * The bf16 filter's products (where the CPU has them) are within the
 * bound ivf.c allows of the fixed-order ones: rows and centroids rounded
 * here independently of ivf.c, laid out as near_bf16.c reads them.
 */
static uint16_t
ref_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)	/* NaN: a quiet NaN */
		return (uint16_t)(u >> 16 | 0x40);
	if ((u & 0x7f800000u) == 0)		/* below 2^-126: zero */
		return (uint16_t)(u >> 16 & 0x8000);
	u += 0x7fffu + (u >> 16 & 1);
	return (uint16_t)(u >> 16);
}

/* m rows of dim, rounded by ref_bf16, ORed into xb (k2 words a row). */
static void
ref_bf16_rows(const float *x, uint32_t m, uint32_t dim, uint32_t *xb)
{
	uint32_t k2 = (dim + 1) / 2;

	for (uint32_t i = 0; i < m; i++)
		for (uint32_t d = 0; d < dim; d++)
			xb[i * k2 + d / 2] |= (uint32_t)ref_bf16(x[i * dim +
			    d]) << (16 * (d % 2));
}

/* nl centroids of dim into gemm's blocks of 16 lists at cb (zeroed). */
static void
ref_bf16_blocks(const float *c, uint32_t nl, uint32_t dim, uint32_t *cb)
{
	uint32_t k2 = (dim + 1) / 2;

	memset(cb, 0, (size_t)nl * k2 * 4);
	for (uint32_t o = 0; o < nl; o++)
		for (uint32_t d = 0; d < dim; d++)
			cb[(o / 16) * k2 * 16 + (d / 2) * 16 + o % 16] |=
			    (uint32_t)ref_bf16(c[o * dim + d]) << (16 * (d % 2));
}

/* The row kernel rounds as ref_bf16, pairs in words, with the norms. */
static void
bf16_row_case(const struct tq_bf16_kernel *g, const float *x, uint32_t dim)
{
	uint32_t out[40], want[40];
	double rn, dn, r2 = 0, d2 = 0;

	memset(want, 0, sizeof(want));
	for (uint32_t d = 0; d < dim; d++) {
		uint16_t h = ref_bf16(x[d]);
		uint32_t w = (uint32_t)h << 16;
		float b;

		memcpy(&b, &w, 4);
		want[d / 2] |= (uint32_t)h << (16 * (d % 2));
		if (isfinite(x[d])) {
			r2 += (double)b * b;
			d2 += ((double)x[d] - b) * ((double)x[d] - b);
		}
	}
	memset(out, 0xa5, sizeof(out));
	g->row(x, dim, out, &rn, &dn);
	CHECK(memcmp(out, want, (dim + 1) / 2 * 4) == 0);
	/* Nothing written past the row's words. */
	CHECK(out[(dim + 1) / 2] == 0xa5a5a5a5u);
	if (isfinite(r2)) {
		CHECK(fabs(rn - sqrt(r2)) <= 1e-12 * sqrt(r2));
		CHECK(fabs(dn - sqrt(d2)) <= 1e-12 * sqrt(r2));
	}
}

static void
test_bf16_filter(void)
{
	const uint32_t dim = 61, k2 = 31, nl = 128, m = 12;
	const struct tq_bf16_kernel *g = tq_bf16_kernel();
	float *c = make_data(nl, dim), *x = make_data(m, dim);
	float *s = malloc(m * nl * sizeof(float)), fx;
	uint32_t *xb = calloc(m * k2, 4), *cb = NULL;
	int ok = 1;

	/* near_fma.c's row rounds as near_bf16.c's. */
	for (int gi = 0; gi < 2; gi++) {
		const struct tq_bf16_kernel *r = gi ? tq_bf16_fma_kernel() : g;

		if (r == NULL)
			continue;
		for (uint32_t i = 0; i < m; i++)
			for (uint32_t d = 1; d <= dim; d += 4)	/* tails */
				bf16_row_case(r, x + i * dim, d);
	}
	if (g == NULL) {
		printf("# no bf16 filter on this CPU (or under TQ_ISA)\n");
		goto done;
	}
	{
		/*
		 * Ties to even both ways, the largest finite, infinities,
		 * NaNs, zeros, the smallest normal and subnormals.
		 */
		const uint32_t bits[] = { 0x3f808000u, 0x3f818000u,
		    0x3f80ffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u,
		    0x7fc00001u, 0x7f800001u, 0x00000000u, 0x80000000u,
		    0x00800000u, 0x007fffffu, 0x80000001u, 0x3f7fffffu };
		float sp[14];

		memcpy(sp, bits, sizeof(sp));
		bf16_row_case(g, sp, 14);
		bf16_row_case(g, sp, 13);
		if (tq_bf16_fma_kernel() != NULL) {
			bf16_row_case(tq_bf16_fma_kernel(), sp, 14);
			bf16_row_case(tq_bf16_fma_kernel(), sp, 13);
		}
	}
	CHECK(posix_memalign((void **)&cb, 64, (size_t)nl * k2 * 4) == 0);
	ref_bf16_rows(x, m, dim, xb);
	ref_bf16_blocks(c, nl, dim, cb);
	g->gemm(xb, m, cb, nl, k2, s, nl);
	for (uint32_t i = 0; i < m; i++)
		for (uint32_t o = 0; o < nl; o++) {
			double nx = 0, nc = 0, rx = 0, dx = 0, dc = 0;

			for (uint32_t d = 0; d < dim; d++) {
				float a = x[i * dim + d], b = c[o * dim + d];
				uint32_t ua = (uint32_t)ref_bf16(a) << 16;
				uint32_t ub = (uint32_t)ref_bf16(b) << 16;
				float ar, br;

				memcpy(&ar, &ua, 4);
				memcpy(&br, &ub, 4);
				nx += (double)a * a;
				nc += (double)b * b;
				rx += (double)ar * ar;
				dx += ((double)a - ar) * ((double)a - ar);
				dc += ((double)b - br) * ((double)b - br);
			}
			tq_dot_rows(x + i * dim, dim, 1, c + o * dim, 1, dim,
			    &fx, 1);
			/*
			 * ivf.c's bound: the residuals' products, and the
			 * float sums (2^-16 is far above d 2^-23 here).
			 */
			ok &= fabs((double)s[i * nl + o] - fx) <= sqrt(rx * dc) +
			    sqrt(dx * nc) + 0x1p-16 * sqrt(nx * nc);
			/* Within the worst case 2^-7 |x| |c| too. */
			ok &= fabs((double)s[i * nl + o] - fx) <=
			    0x1.1p-7 * sqrt(nx * nc);
		}
	CHECK(ok);
	free(cb);
done:
	free(c);
	free(x);
	free(s);
	free(xb);
}

/* The bf16 products s of m rows by nl lists against the exact sums. */
static int
sums_ok(const float *x, const float *c, uint32_t m, uint32_t nl,
    uint32_t dim, const float *s, double gb)
{
	int ok = 1;

	for (uint32_t i = 0; i < m; i++)
		for (uint32_t o = 0; o < nl; o++) {
			double ex = 0, mag = 0;

			for (uint32_t d = 0; d < dim; d++) {
				uint32_t ua = (uint32_t)ref_bf16(x[i * dim +
				    d]) << 16;
				uint32_t ub = (uint32_t)ref_bf16(c[o * dim +
				    d]) << 16;
				float a, b;

				memcpy(&a, &ua, 4);
				memcpy(&b, &ub, 4);
				ex += (double)a * b;
				mag += fabs((double)a * b);
			}
			ok &= fabs(s[i * nl + o] - ex) <= gb * mag +
			    dim * 0x1p-125;
		}
	return ok;
}

/*
 * The bf16 products against a scalar oracle, on awkward dims: the exact
 * sum, in double, of the products of the rounded values, which the
 * kernel may miss only by its float additions (gb of the sum of the
 * magnitudes) and flushed subnormals.  Nothing is written past the rows
 * and lists asked for.
 */
static void
test_bf16_gemm_sizes(void)
{
	static const uint32_t dims[] = { 1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32,
	    33, 64, 65, 100, 385 };
	/*
	 * The chosen filter (AMX-BF16's gemm or AVX512_BF16's, and the
	 * latter's gemv), AVX2 FMA's (gemv), and where the chosen gemm is
	 * AMX's, AVX512_BF16's too.
	 */
	static const struct tq_bf16_kernel avx512 = { tq_bf16_row_avx512,
	    tq_bf16_gemm_avx512, tq_bf16_gemv_avx512,
	    tq_bf16_gemv_rows_avx512, "bf16" };
	const struct tq_bf16_kernel *gs[3] = { tq_bf16_kernel(),
	    tq_bf16_fma_kernel(), NULL };
	int ok = 1;

	if (gs[0] != NULL && gs[0]->gemm != tq_bf16_gemm_avx512)
		gs[2] = &avx512;
	for (int gi = 0; gi < 3; gi++) {
	const struct tq_bf16_kernel *g = gs[gi];

	if (g == NULL)
		continue;
	for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
		for (uint32_t nl = 64; nl <= 192; nl += 128)
			for (uint32_t m = 6; m <= 30; m += 12) {
				uint32_t dim = dims[di], k2 = (dim + 1) / 2;
				uint32_t *xb = calloc((size_t)m * k2, 4), *cb;
				float *s = malloc(((size_t)m * nl + 16) * 4);
				float *x = malloc((size_t)m * dim * 4);
				float *c = malloc((size_t)nl * dim * 4);
				double gb = dim * 0x1p-23 / (1 - dim * 0x1p-23);

				CHECK(posix_memalign((void **)&cb, 64,
				    (size_t)nl * k2 * 4) == 0);
				for (size_t i = 0; i < (size_t)m * dim; i++)
					x[i] = gauss();
				for (size_t i = 0; i < (size_t)nl * dim; i++)
					c[i] = gauss();
				ref_bf16_rows(x, m, dim, xb);
				ref_bf16_blocks(c, nl, dim, cb);
				for (int t = 0; t < 16; t++)
					s[(size_t)m * nl + t] = 12345.0f;
				if (g->gemm != NULL) {
					g->gemm(xb, m, cb, nl, k2, s, nl);
					ok &= sums_ok(x, c, m, nl, dim, s, gb);
				}
				/* The one-row kernel, row by row. */
				for (uint32_t i = 0; i < m; i++)
					g->gemv(xb + (size_t)i * k2, cb, nl, k2,
					    s + (size_t)i * nl);
				ok &= sums_ok(x, c, m, nl, dim, s, gb);
				for (int t = 0; t < 16; t++)
					ok &= s[(size_t)m * nl + t] == 12345.0f;
				/*
				 * The row-major one, from bf16 rows an element
				 * off alignment, on list counts that are not
				 * multiples of its groups: nothing past nl.
				 */
				for (uint32_t nr = m + 1; nr <= nl; nr += 37) {
					uint16_t *cr = malloc(((size_t)nr * dim +
					    1) * 2);

					for (size_t t = 0; t < (size_t)nr * dim;
					    t++)
						cr[t + 1] = ref_bf16(c[t]);
					for (int t = 0; t < 16; t++)
						s[(size_t)m * nr + t] = 12345.0f;
					for (uint32_t i = 0; i < m; i++)
						g->gemv_rows(xb + (size_t)i * k2,
						    cr + 1, nr, dim,
						    s + (size_t)i * nr);
					ok &= sums_ok(x, c, m, nr, dim, s, gb);
					for (int t = 0; t < 16; t++)
						ok &= s[(size_t)m * nr + t] ==
						    12345.0f;
					free(cr);
				}
				free(xb);
				free(cb);
				free(s);
				free(x);
				free(c);
				if (!ok) {
					fprintf(stderr, "  bf16 gemm: dim %u "
					    "lists %u rows %u\n", dim, nl, m);
					break;
				}
			}
	}
	CHECK(ok);
}

/*
 * tq_ivf_nearest equals ranking every list by its fixed-order score, with
 * sgemm's filter (37 lists) and, where the CPU has it, bf16's (150, 64 at
 * a time with padding; an odd dim pads a pair).
 */
static void
test_ivf_nearest(void)
{
	ivf_nearest_case(33, 37);
	ivf_nearest_case(61, 150);
	ivf_bf16_case(33, 37, 40.0f);
	ivf_bf16_case(61, 150, 0.0f);
	ivf_bf16_case(61, 150, 1e5f);
	test_ivf_bf16_file();
}

/* k-means finds well separated clusters and is deterministic. */
static void
test_kmeans(void)
{
	const uint32_t dim = 16, k = 8;
	const size_t n = 800;
	float *x = malloc(n * dim * sizeof(float)), c1[8 * 16], c2[8 * 16];
	uint32_t lab[800], map[8];
	int pure = 1;

	for (size_t i = 0; i < n; i++)
		for (uint32_t d = 0; d < dim; d++)
			x[i * dim + d] = (d == i % k ? 100.0f : 0.0f) +
			    0.1f * gauss();
	CHECK_OK(tq_kmeans(x, n, dim, k, 20, 1, c1));
	CHECK_OK(tq_kmeans(x, n, dim, k, 20, 1, c2));
	CHECK(memcmp(c1, c2, sizeof(c1)) == 0);
	{
		struct tq_ivf v = { .nlist = k, .cent = c1 };

		CHECK_OK(tq_ivf_prepare(&v, dim));
		CHECK_OK(tq_ivf_nearest(&v, dim, x, n, 0, 0, 1, lab, NULL, 0));
		tq_ivf_release(&v);
	}
	for (uint32_t c = 0; c < k; c++)
		map[c] = lab[c];
	for (size_t i = 0; i < n; i++)
		pure &= lab[i] == map[i % k];
	for (uint32_t a = 0; a < k; a++)
		for (uint32_t b = a + 1; b < k; b++)
			pure &= map[a] != map[b];
	CHECK(pure);
	/* Three distinct rows, five lists: empty lists are repaired. */
	for (size_t i = 0; i < 60; i++)
		for (uint32_t d = 0; d < dim; d++)
			x[i * dim + d] = (float)(i % 3) * (float)(d + 1);
	CHECK_OK(tq_kmeans(x, 60, dim, 5, 10, 3, c1));
	for (uint32_t i = 0; i < 5 * dim; i++)
		CHECK(isfinite(c1[i]));
	CHECK_ST(tq_kmeans(x, 4, dim, 5, 10, 3, c1), TQ_ERR_ARG);
	free(x);
}

/*
 * An IVF index: lists hold their rows; probing every list gives the flat
 * index's results; fewer probes give exactly the best rows of the probed
 * lists; builds do not depend on threads or the window size; results do
 * not depend on threads or batching; a bad LIST is refused.
 */
static void
test_ivf_one(enum tq_metric m, unsigned bits)
{
	const uint32_t dim = 24, n = 700, nq = 9, k = 10, nl = 6;
	float *x = make_data(n + nq, dim), *qs = x + (size_t)n * dim;
	struct tq_quantizer *qi = fit_data(x, n, dim, bits, m, nl);
	struct tq_quantizer *qf = fit_data(x, n, dim, bits, m, 0);
	struct tq_index *ix, *fx;
	struct tq_search_params sp;
	struct tq_build_params bp;
	struct tq_reader *r;
	uint64_t ia[90], ib[90];
	float sa[90], sb[90];
	uint32_t *lab = malloc(n * sizeof(*lab)), pr[9 * 2];
	char bi[4096], bf[4096];
	const char *pi = path_of(bi, "ivf.tqi"), *pf = path_of(bf, "flat.tqi");
	int ok = 1;

	CHECK(tq_quantizer_lists(qi) == nl && tq_quantizer_lists(qf) == 0);
	CHECK_OK(build(qi, x, n, NULL, TQ_ORIG_F32, pi));
	CHECK_OK(build(qf, x, n, NULL, TQ_ORIG_F32, pf));
	CHECK_OK(tq_index_open(pi, &ix));
	CHECK_OK(tq_index_open(pf, &fx));
	CHECK(ix->nlist == nl && fx->nlist == 0);

	/* Every row sits in its nearest list, in input order. */
	CHECK_OK(tq_ivf_nearest(&qi->ivf, dim, x, n, m == TQ_METRIC_COSINE,
	    0, 1, lab, NULL, 0));
	for (uint32_t l = 0; l < nl; l++)
		for (uint64_t rr = tq_list_off(&ix->parts[0], l); rr < tq_list_off(&ix->parts[0],
		    l + 1); rr++) {
			ok &= lab[tq_index_id(ix, rr)] == l;
			ok &= rr == tq_list_off(&ix->parts[0], l) ||
			    tq_index_id(ix, rr) > tq_index_id(ix, rr - 1);
		}
	CHECK(ok);

	/* All probes == flat, with and without re-rank. */
	for (int rr = 0; rr < 2; rr++) {
		tq_search_params_default(&sp);
		sp.k = k;
		sp.oversample = rr ? 3.0f : 1.0f;
		sp.probes = nl;
		CHECK_OK(tq_search(ix, qs, nq, &sp, ia, sa));
		CHECK_OK(tq_search(fx, qs, nq, &sp, ib, sb));
		CHECK(memcmp(ia, ib, sizeof(ia)) == 0);
		CHECK(memcmp(sa, sb, sizeof(sa)) == 0);
	}

	/* Two probes, re-rank of every candidate == brute force there. */
	tq_search_params_default(&sp);
	sp.k = k;
	sp.probes = 2;
	sp.oversample = 1000.0f;
	sp.threads = 1;
	CHECK_OK(tq_search(ix, qs, nq, &sp, ia, sa));
	CHECK_OK(tq_ivf_nearest(&qi->ivf, dim, qs, nq, m == TQ_METRIC_COSINE,
	    m == TQ_METRIC_IP, 2, pr, NULL, 0));
	ok = 1;
	for (uint32_t i = 0; i < nq; i++) {
		struct cand c[700];
		size_t nc = 0;

		for (uint32_t t = 0; t < 2; t++)
			for (uint64_t rr = tq_list_off(&ix->parts[0], pr[i * 2 + t]);
			    rr < tq_list_off(&ix->parts[0], pr[i * 2 + t] + 1); rr++) {
				uint64_t id = tq_index_id(ix, rr);

				c[nc].s = score(m, qs + i * dim, x + id * dim,
				    dim);
				c[nc++].id = id;
			}
		sort_metric = m;
		qsort(c, nc, sizeof(*c), cmp_cand);
		for (uint32_t t = 0; t < k && t < nc; t++)
			ok &= ia[i * k + t] == c[t].id;
	}
	CHECK(ok);

	/* Threads and batching change nothing; one query at a time. */
	sp.oversample = 1.0f;
	sp.threads = 1;
	CHECK_OK(tq_search(ix, qs, nq, &sp, ia, sa));
	sp.threads = 3;
	for (uint32_t i = 0; i < nq; i++)
		CHECK_OK(tq_search(ix, qs + i * dim, 1, &sp, ib + i * k,
		    sb + i * k));
	CHECK(memcmp(ia, ib, sizeof(ia)) == 0);
	CHECK(memcmp(sa, sb, sizeof(sa)) == 0);
	tq_index_close(ix);
	tq_index_close(fx);

	/* Threads and a window of one chunk give the same file. */
	tq_build_params_default(&bp);
	bp.threads = 1;
	bp.memory = 1;
	CHECK_OK(tq_reader_open(unit_path("build.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, unit_path("ivf1.tqi")));
	tq_reader_close(r);
	CHECK(files_equal(pi, unit_path("ivf1.tqi")));

	tq_quantizer_free(qi);
	tq_quantizer_free(qf);
	free(x);
	free(lab);
}

static void
test_ivf(void)
{
	test_ivf_one(TQ_METRIC_L2, 4);
	test_ivf_one(TQ_METRIC_COSINE, 3);
	test_ivf_one(TQ_METRIC_IP, 2);
}

/*
 * Copies in several lists: every vector in its 3 nearest lists (ratio
 * large) triples the rows; all probes still give the flat results, each
 * id once; fewer copies with a tight ratio; append keeps the setting and
 * equals a fresh build; copies need lists.
 */
static void
test_ivf_dups(void)
{
	const uint32_t dim = 16, n = 400, nq = 6, k = 8, nl = 5;
	float *x = make_data(n + nq, dim), *qs = x + (size_t)n * dim;
	struct tq_quantizer *qi = fit_data(x, n, dim, 4, TQ_METRIC_L2, nl);
	struct tq_quantizer *qf = fit_data(x, n, dim, 4, TQ_METRIC_L2, 0);
	struct tq_build_params bp;
	struct tq_search_params sp;
	struct tq_reader *r;
	struct tq_index *ix, *fx;
	uint64_t ia[48], ib[48];
	float sa[48], sb[48];
	char b1[4096], b2[4096];
	const char *pd = path_of(b1, "dups.tqi"), *pf = path_of(b2, "df.tqi");

	CHECK_OK(build(qf, x, n, NULL, TQ_ORIG_F32, pf));
	write_fixture(unit_path("d.bin"), x, n, dim);
	tq_build_params_default(&bp);
	bp.dups = 3;
	bp.dup_ratio = 1e6f;
	CHECK_OK(tq_reader_open(unit_path("d.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, pd));
	tq_reader_close(r);
	CHECK_OK(tq_index_open(pd, &ix));
	CHECK_OK(tq_index_open(pf, &fx));
	CHECK(tq_index_count(ix) == 3 * n && ix->dups == 3);
	for (int rr = 0; rr < 2; rr++) {
		tq_search_params_default(&sp);
		sp.k = k;
		sp.probes = nl;
		sp.oversample = rr ? 5.0f : 1.0f;
		CHECK_OK(tq_search(ix, qs, nq, &sp, ia, sa));
		CHECK_OK(tq_search(fx, qs, nq, &sp, ib, sb));
		CHECK(memcmp(ia, ib, sizeof(ia)) == 0);
		CHECK(memcmp(sa, sb, sizeof(sa)) == 0);
	}
	{
		struct tq_range ra, rb;

		tq_search_params_default(&sp);
		sp.probes = nl;
		CHECK_OK(tq_search_range(ix, qs, nq, &sp, sb[k - 1], 0, &ra));
		CHECK_OK(tq_search_range(fx, qs, nq, &sp, sb[k - 1], 0, &rb));
		CHECK(ra.off[nq] == rb.off[nq] && memcmp(ra.ids, rb.ids,
		    rb.off[nq] * sizeof(uint64_t)) == 0);
		tq_range_free(&ra);
		tq_range_free(&rb);
	}
	tq_index_close(ix);
	tq_index_close(fx);

	/* A tighter ratio: between one and three copies. */
	bp.dup_ratio = 4.0f;
	CHECK_OK(tq_reader_open(unit_path("d.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, pd));
	tq_reader_close(r);
	CHECK_OK(tq_index_open(pd, &ix));
	CHECK(tq_index_count(ix) > n && tq_index_count(ix) < 3 * n);
	tq_index_close(ix);

	/* Append keeps the copies setting: equals the fresh build. */
	write_fixture(unit_path("d1.bin"), x, 300, dim);
	write_fixture(unit_path("d2.bin"), x + 300 * dim, n - 300, dim);
	CHECK_OK(tq_reader_open(unit_path("d1.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, unit_path("d12.tqi")));
	tq_reader_close(r);
	CHECK_OK(tq_reader_open(unit_path("d2.bin"), NULL, &r));
	CHECK_OK(tq_index_append(unit_path("d12.tqi"), r, NULL, NULL,
	    unit_path("d12.tqi")));
	tq_reader_close(r);
	CHECK(same_results(pd, unit_path("d12.tqi"), x, 20, dim));
	CHECK_OK(tq_index_compact(unit_path("d12.tqi"), NULL,
	    unit_path("d12c.tqi")));
	CHECK(files_equal(pd, unit_path("d12c.tqi")));

	/* Copies need lists, and at most nlist of them. */
	CHECK_OK(tq_reader_open(unit_path("d.bin"), NULL, &r));
	CHECK_ST(tq_build(qf, r, NULL, &bp, pf), TQ_ERR_ARG);
	bp.dups = nl + 1;
	CHECK_ST(tq_build(qi, r, NULL, &bp, pd), TQ_ERR_ARG);
	tq_reader_close(r);
	tq_quantizer_free(qi);
	tq_quantizer_free(qf);
	free(x);
}

/*
 * IVF with originals: ORIG holds each vector once, in the order it
 * arrived, and OMAP maps every row (each copy) to it; a build with a
 * small --memory writes the same bytes; a compaction after deletes keeps
 * the live originals in that order, each once.
 */
static int
omap_rows_ok(const char *path, const float *x, uint32_t dim, uint64_t m)
{
	struct tq_index *ix;
	int ok = 1;

	if (tq_index_open(path, &ix) != TQ_OK)
		return 0;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];

		ok &= p->omap != NULL && p->norig == m;
		for (uint64_t r = 0; ok && r < p->n; r++) {
			uint64_t id = tq_part_id(p, r);

			ok &= memcmp(tq_part_orig(p, r, 4 * (size_t)dim),
			    x + id * dim, 4 * (size_t)dim) == 0;
		}
	}
	tq_index_close(ix);
	return ok;
}

static void
test_ivf_omap(void)
{
	const uint32_t dim = 16, n = 400, nl = 5;
	float *x = make_data(n, dim);
	struct tq_quantizer *qi = fit_data(x, n, dim, 4, TQ_METRIC_L2, nl);
	struct tq_build_params bp;
	struct tq_reader *r;
	struct tq_index *ix;
	uint64_t del[100], got;
	char b1[4096], b2[4096];
	const char *pa = path_of(b1, "om.tqi"), *pb = path_of(b2, "om1.tqi");

	write_fixture(unit_path("om.bin"), x, n, dim);
	tq_build_params_default(&bp);
	bp.dups = 3;
	bp.dup_ratio = 1e6f;
	bp.originals = TQ_ORIG_F32;
	CHECK_OK(tq_reader_open(unit_path("om.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, pa));
	tq_reader_close(r);
	CHECK(omap_rows_ok(pa, x, dim, n));
	/* Entry j of ORIG is vector j: the arrival order. */
	CHECK_OK(tq_index_open(pa, &ix));
	CHECK(ix->n == 3 * (uint64_t)n);
	CHECK(memcmp(ix->parts[0].orig, x, (size_t)n * dim * 4) == 0);
	tq_index_close(ix);
	bp.memory = 1;		/* many windows of the spill */
	CHECK_OK(tq_reader_open(unit_path("om.bin"), NULL, &r));
	CHECK_OK(tq_build(qi, r, NULL, &bp, pb));
	tq_reader_close(r);
	CHECK(files_equal(pa, pb));

	/* Delete every fourth vector (all its copies), then compact. */
	for (uint64_t i = 0; i < 100; i++)
		del[i] = 4 * i + 1;
	CHECK_OK(tq_index_delete(pa, del, 100, NULL, pa, &got));
	CHECK(got == 300);
	CHECK_OK(tq_index_compact(pa, NULL, pb));
	CHECK(omap_rows_ok(pb, x, dim, n - 100));
	CHECK_OK(tq_index_open(pb, &ix));
	for (uint64_t j = 0, i = 0; j < n; j++)
		if (j % 4 != 1)
			CHECK(memcmp(ix->parts[0].orig + 4 * dim * i++,
			    x + j * dim, 4 * dim) == 0);
	tq_index_close(ix);
	tq_quantizer_free(qi);
	free(x);
}

/* A LIST section out of order, or without lists, is refused. */
static void
test_ivf_checks(void)
{
	const uint32_t dim = 8, n = 100;
	float *x = make_data(n, dim);
	struct tq_quantizer *q = fit_data(x, n, dim, 4, TQ_METRIC_L2, 4);
	struct tq_index *ix;
	struct tq_file_info fi;
	char b[4096];
	const char *p = path_of(b, "lc.tqi");
	FILE *fp;
	uint64_t off = 0;
	uint8_t v[8];

	CHECK_OK(build(q, x, n, NULL, TQ_ORIG_NONE, p));
	CHECK_OK(tq_file_info(p, &fi));
	CHECK(fi.lists == 4);
	for (uint32_t i = 0; i < fi.nsections; i++)
		if (memcmp(fi.sections[i].tag, "LIST", 4) == 0)
			off = fi.sections[i].offset;
	CHECK(off != 0);
	/* off[1] past n. */
	fp = fopen(p, "r+b");
	wr_le64(v, n + 1);
	fseek(fp, (long)off + 8, SEEK_SET);
	fwrite(v, 1, 8, fp);
	fclose(fp);
	CHECK_ST(tq_index_open(p, &ix), TQ_ERR_FORMAT);
	CHECK_DETAIL("section LIST");
	CHECK_ST(tq_file_verify(p), TQ_ERR_CHECKSUM);
	tq_quantizer_free(q);
	free(x);
}

/* What a build reported through tq_build_params.progress. */
struct prog_log {
	uint64_t reads, read_last, read_total, writes, write_last, write_total;
	int bad;		/* an unknown step, or done going backwards */
};

static void
prog_rec(void *arg, const char *step, uint64_t done, uint64_t total)
{
	struct prog_log *l = arg;

	if (strcmp(step, "reading") == 0) {
		l->bad |= done < l->read_last || l->writes > 0;
		l->reads++;
		l->read_last = done;
		l->read_total = total;
	} else if (strcmp(step, "writing lists") == 0) {
		l->bad |= done < l->write_last || done > total;
		l->writes++;
		l->write_last = done;
		l->write_total = total;
	} else
		l->bad = 1;
}

/*
 * A build reports the rows read, chunk by chunk, then (IVF) the rows of
 * the lists written, ending at n of n; a flat build from a file writes
 * as it reads.  The callback changes no byte of the index.
 */
static void
test_build_progress(void)
{
	const uint32_t dim = 16;
	const size_t n = 9000;
	float *x = make_data(n, dim);
	struct tq_quantizer *qi = fit_data(x, n, dim, 4, TQ_METRIC_L2, 8);
	struct tq_quantizer *qf = fit(dim, 4, TQ_METRIC_L2);
	struct tq_build_params bp;
	struct tq_reader *r;
	struct prog_log l;
	char pa[4096];

	for (int ivf = 0; ivf <= 1; ivf++) {
		const struct tq_quantizer *q = ivf ? qi : qf;

		CHECK_OK(build(q, x, n, NULL, TQ_ORIG_F16,
		    path_of(pa, "p0.tqi")));
		memset(&l, 0, sizeof(l));
		tq_build_params_default(&bp);
		bp.originals = TQ_ORIG_F16;
		bp.progress = prog_rec;
		bp.progress_arg = &l;
		bp.memory = 1;	/* windows of one chunk: several calls */
		CHECK_OK(tq_reader_open(unit_path("build.bin"), NULL, &r));
		CHECK_OK(tq_build(q, r, NULL, &bp, unit_path("p1.tqi")));
		tq_reader_close(r);
		CHECK(files_equal(pa, unit_path("p1.tqi")));
		CHECK(!l.bad);
		CHECK(l.reads >= 2);
		CHECK(l.read_last == n && l.read_total == n);
		if (ivf) {
			CHECK(l.writes >= 2);
			CHECK(l.write_last == n && l.write_total == n);
		} else
			CHECK(l.writes == 0);
	}
	tq_quantizer_free(qi);
	tq_quantizer_free(qf);
	free(x);
}

int
main(void)
{
	RUN(test_filter);
	RUN(test_filter_other);
	RUN(test_range);
	RUN(test_delete);
	RUN(test_tomb_checks);
	RUN(test_append);
	RUN(test_append_errors);
	RUN(test_factors);
	RUN(test_fach_rows);
	RUN(test_ivf_nearest);
	RUN(test_bf16_filter);
	RUN(test_bf16_gemm_sizes);
	RUN(test_kmeans);
	RUN(test_ivf);
	RUN(test_ivf_dups);
	RUN(test_ivf_omap);
	RUN(test_ivf_checks);
	RUN(test_build_progress);
	return unit_done();
}
