/*
 * test_calib.c - the calibration for a recall target (tq(5) CALB): what
 * tq_index_calibrate measures and stores, the choice of
 * tq_index_recall_choose against every measured entry, staleness, the
 * same bytes at any thread count, and hostile sections refused on open.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "unit.h"

#define DIM 16
#define N 800

static float data[(N + 200) * DIM];

/* unit_path, but kept: one buffer per name (unit_path reuses four). */
static const char *
fpath(const char *name)
{
	static char buf[32][4096];
	static char names[32][32];
	static int n;

	for (int i = 0; i < n; i++)
		if (strcmp(names[i], name) == 0)
			return buf[i];
	snprintf(names[n], sizeof(names[0]), "%s", name);
	snprintf(buf[n], sizeof(buf[0]), "%s", unit_path(name));
	return buf[n++];
}

/* Clustered rows from a fixed generator. */
static void
make_data(void)
{
	uint64_t g = 12345;
	float ctr[8][DIM];

	for (int c = 0; c < 8; c++)
		for (int d = 0; d < DIM; d++)
			ctr[c][d] = (float)tq_rand_below(&g, 1000) / 100.0f;
	for (int i = 0; i < N + 200; i++)
		for (int d = 0; d < DIM; d++)
			data[i * DIM + d] = ctr[i % 8][d] +
			    ((float)tq_rand_below(&g, 2001) - 1000.0f) / 400.0f;
}

static void
write_fixture(const char *path, const float *x, size_t n)
{
	FILE *fp = fopen(path, "wb");
	uint8_t h[8];

	wr_le32(h, DIM);
	wr_le32(h + 4, (uint32_t)n);
	fwrite(h, 1, 8, fp);
	fwrite(x, sizeof(float), n * DIM, fp);
	fclose(fp);
}

static void
build(const char *path, uint32_t lists, enum tq_originals o)
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *q = NULL;
	struct tq_reader *r;

	write_fixture(fpath("c.bin"), data, N);
	CHECK_OK(tq_reader_open(fpath("c.bin"), NULL, &r));
	tq_fit_params_default(&fp);
	fp.bits = 2;
	fp.lists = lists;
	CHECK_OK(tq_quantizer_fit(&fp, r, &q));
	tq_reader_close(r);
	CHECK_OK(tq_reader_open(fpath("c.bin"), NULL, &r));
	tq_build_params_default(&bp);
	bp.originals = o;
	CHECK_OK(tq_build(q, r, NULL, &bp, path));
	tq_reader_close(r);
	tq_quantizer_free(q);
}

/* The CALB payload of a file (malloc'd), its offset and length. */
static uint8_t *
read_calb(const char *path, uint64_t *off, uint64_t *len)
{
	struct tq_file_info fi;
	uint8_t *b = NULL;
	FILE *fp;

	*len = 0;
	CHECK_OK(tq_file_info(path, &fi));
	for (uint32_t i = 0; i < fi.nsections && i < 32; i++)
		if (strcmp(fi.sections[i].tag, "CALB") == 0) {
			*off = fi.sections[i].offset;
			*len = fi.sections[i].length;
		}
	if (*len == 0)
		return NULL;
	b = malloc(*len);
	fp = fopen(path, "rb");
	fseek(fp, (long)*off, SEEK_SET);
	CHECK(fread(b, 1, *len, fp) == *len);
	fclose(fp);
	return b;
}

/*
 * Every measured entry: the choice is the cheapest that reaches, a
 * measured entry or a point on the line between two probes values.
 * Returns how many choices were such points.
 */
static int
check_choices(const char *path)
{
	int interp = 0;
	struct tq_index *ix;
	struct tq_recall_choice ch, prev;
	uint64_t off, len;
	uint8_t *b = read_calb(path, &off, &len);
	double targets[71];
	uint32_t nk, np, no;
	double cb;

	CHECK(b != NULL);
	if (b == NULL)
		return 0;
	CHECK_OK(tq_index_open(path, &ix));
	nk = rd_le32(b + 28);
	np = rd_le32(b + 32);
	no = rd_le32(b + 36);
	CHECK(len == 64 + 4 * (nk + np + no) + 24 * (size_t)nk * np * no);
	cb = (double)tq_code_bytes(tq_index_quantizer(ix));
	/* 0.3 to 1 in steps of 0.01: some fall between two probes values. */
	for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++)
		targets[t] = 0.3 + 0.01 * (double)t;
	memset(&prev, 0, sizeof(prev));
	for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
		int found = 0, any = 0;

		CHECK_OK(tq_index_recall_choose(ix, 10, targets[t], &ch));
		CHECK(ch.k == 10);
		for (uint32_t pi = 0; pi < np; pi++)
			for (uint32_t oi = 0; oi < no; oi++) {
				const uint8_t *e = b + 64 + 4 * (nk + np + no) +
				    24 * ((1 * (size_t)np + pi) * no + oi);
				double r = rd_lef32(e), se = rd_lef32(e + 4);
				double cost = rd_lef32(e + 8) * cb +
				    rd_lef32(e + 12) * TQ_RECALL_WREFINE * DIM +
				    rd_lef32(e + 16) * TQ_RECALL_WORIG * DIM;
				int ok = r - TQ_RECALL_Z * se >= targets[t] -
				    TQ_RECALL_SLACK - 1e-12;

				if (rd_le32(e + 20) == 0)
					continue;
				if (ok) {
					any = 1;
					/* None reaching is cheaper. */
					CHECK(cost >= ch.cost - 1e-6);
				}
				if (rd_le32(b + 64 + 4 * (nk + pi)) ==
				    ch.probes && rd_lef32(b + 64 + 4 * (nk +
				    np + oi)) == ch.oversample) {
					found = 1;
					CHECK(ok == ch.reached);
					CHECK(fabs(cost - ch.cost) < 1e-6);
					CHECK(fabs(r - ch.recall) < 1e-6);
				}
			}
		if (!found) {
			/*
			 * Between two measured probes values at its oversample:
			 * the line between them at ch.probes, reaching.
			 */
			for (uint32_t pi = 1; pi < np && !found; pi++)
				for (uint32_t oi = 0; oi < no; oi++) {
					size_t at = 64 + 4 * (size_t)(nk + np + no);
					const uint8_t *e1 = b + at + 24 * ((1 *
					    (size_t)np + pi) * no + oi);
					const uint8_t *e0 = e1 - 24 * (size_t)no;
					uint32_t p0 = rd_le32(b + 64 + 4 * (nk +
					    pi - 1)), p1 = rd_le32(b + 64 + 4 *
					    (nk + pi));
					double u, r, se;

					if (rd_lef32(b + 64 + 4 * (nk + np +
					    oi)) != ch.oversample || ch.probes <=
					    p0 || ch.probes >= p1)
						continue;
					u = (double)(ch.probes - p0) / (p1 - p0);
					r = rd_lef32(e0) + u * (rd_lef32(e1) -
					    rd_lef32(e0));
					se = rd_lef32(e0 + 4) + u *
					    (rd_lef32(e1 + 4) - rd_lef32(e0 + 4));
					found = 1;
					CHECK(ch.reached);
					CHECK(fabs(r - ch.recall) < 1e-6);
					CHECK(r - TQ_RECALL_Z * se >= targets[t]
					    - TQ_RECALL_SLACK - 1e-9);
					/* The step before it does not reach. */
					u = (double)(ch.probes - 1 - p0) /
					    (p1 - p0);
					CHECK(rd_lef32(e0) + u * (rd_lef32(e1) -
					    rd_lef32(e0)) - TQ_RECALL_Z *
					    (rd_lef32(e0 + 4) + u * (rd_lef32(e1 +
					    4) - rd_lef32(e0 + 4))) < targets[t] -
					    TQ_RECALL_SLACK);
					interp++;
				}
		}
		CHECK(found);
		CHECK(any == ch.reached);
		/* A higher target never costs less while both are reached. */
		if (t > 0 && prev.reached && ch.reached)
			CHECK(ch.cost >= prev.cost);
		prev = ch;
	}
	/* k 5 uses the figures of k 10, k 1000 those of k 100. */
	CHECK_OK(tq_index_recall_choose(ix, 5, 0.9, &ch));
	CHECK(ch.k == 10);
	CHECK_OK(tq_index_recall_choose(ix, 1000, 0.9, &ch));
	CHECK(ch.k == 100);
	CHECK_ST(tq_index_recall_choose(ix, 10, 0, &ch), TQ_ERR_ARG);
	CHECK_ST(tq_index_recall_choose(ix, 10, 1.01, &ch), TQ_ERR_ARG);
	tq_index_close(ix);
	free(b);
	return interp;
}

/*
 * tq_index_calib_entry against the bytes of the section: every entry,
 * and the ends of the ranges refused.
 */
static void
check_entries(const char *path)
{
	struct tq_index *ix;
	struct tq_calib_info ci;
	struct tq_calib_entry ce;
	uint64_t off, len;
	uint8_t *b = read_calb(path, &off, &len);
	uint32_t nk, np, no, seen = 0;

	CHECK(b != NULL);
	if (b == NULL)
		return;
	CHECK_OK(tq_index_open(path, &ix));
	CHECK_OK(tq_index_calib_info(ix, &ci));
	nk = rd_le32(b + 28);
	np = rd_le32(b + 32);
	no = rd_le32(b + 36);
	CHECK(ci.nk == nk && ci.nprobes == np && ci.noversample == no);
	for (uint32_t ki = 0; ki < nk; ki++)
		for (uint32_t pi = 0; pi < np; pi++)
			for (uint32_t oi = 0; oi < no; oi++) {
				const uint8_t *e = b + 64 + 4 * (nk + np + no) +
				    24 * (((size_t)ki * np + pi) * no + oi);

				CHECK_OK(tq_index_calib_entry(ix, ki, pi, oi,
				    &ce));
				CHECK(ce.k == rd_le32(b + 64 + 4 * ki));
				CHECK(ce.probes == rd_le32(b + 64 + 4 *
				    (nk + pi)));
				CHECK(ce.oversample == rd_lef32(b + 64 + 4 *
				    (nk + np + oi)));
				CHECK(ce.measured == (int)rd_le32(e + 20));
				CHECK(ce.recall == rd_lef32(e) &&
				    ce.se == rd_lef32(e + 4) &&
				    ce.rows == rd_lef32(e + 8) &&
				    ce.refined == rd_lef32(e + 12) &&
				    ce.originals == rd_lef32(e + 16));
				CHECK(!ce.measured || ce.cost > 0);
				seen += ce.measured != 0;
			}
	CHECK(seen == ci.measured);
	CHECK_ST(tq_index_calib_entry(ix, nk, 0, 0, &ce), TQ_ERR_ARG);
	CHECK_ST(tq_index_calib_entry(ix, 0, np, 0, &ce), TQ_ERR_ARG);
	CHECK_ST(tq_index_calib_entry(ix, 0, 0, no, &ce), TQ_ERR_ARG);
	CHECK_ST(tq_index_calib_entry(ix, 0, 0, 0, NULL), TQ_ERR_ARG);
	tq_index_close(ix);
	free(b);
}

static void
test_flat_and_ivf(void)
{
	const char *paths[2] = { fpath("flat.tqi"), fpath("ivf.tqi") };
	struct tq_calib_info ci;
	struct tq_index *ix;

	for (int v = 0; v < 2; v++) {
		build(paths[v], v ? 16 : 0, TQ_ORIG_F32);
		CHECK_OK(tq_index_open(paths[v], &ix));
		CHECK_OK(tq_index_calib_info(ix, &ci));
		CHECK(!ci.present);
		CHECK_ST(tq_index_recall_choose(ix, 10, 0.9,
		    &(struct tq_recall_choice){ 0 }), TQ_ERR_EMPTY);
		CHECK_ST(tq_index_calib_entry(ix, 0, 0, 0,
		    &(struct tq_calib_entry){ 0 }), TQ_ERR_EMPTY);
		tq_index_close(ix);
		CHECK_OK(tq_index_calibrate(paths[v], NULL, NULL, paths[v]));
		CHECK_OK(tq_index_open(paths[v], &ix));
		CHECK_OK(tq_index_calib_info(ix, &ci));
		CHECK(ci.present && ci.source == 1 && ci.queries == N / 4);
		CHECK(ci.live == N && ci.nk == 3 && ci.k[0] == 1 &&
		    ci.k[1] == 10 && ci.k[2] == 100 && !ci.stale);
		CHECK(ci.nprobes == (v ? 8u : 1u) && ci.measured > 0);
		tq_index_close(ix);
		check_choices(paths[v]);
		check_entries(paths[v]);
	}
}

/*
 * Unclustered rows and 64 lists: recall climbs over many probes, so some
 * targets fall between two measured probes values, and the choice is
 * then a point on the line between them.
 */
static void
test_between(void)
{
	const char *p = fpath("between.tqi");
	uint64_t g = 777;

	for (int i = 0; i < (N + 200) * DIM; i++)
		data[i] = ((float)tq_rand_below(&g, 2001) - 1000.0f) / 400.0f;
	build(p, 64, TQ_ORIG_F32);
	CHECK_OK(tq_index_calibrate(p, NULL, NULL, p));
	CHECK(check_choices(p) > 0);
	make_data();
}

/* Whether any entry of probes value pi of a CALB payload is measured. */
static int
probes_measured(const uint8_t *b, uint32_t pi)
{
	uint32_t nk = rd_le32(b + 28), np = rd_le32(b + 32),
	    no = rd_le32(b + 36);

	for (uint32_t ki = 0; ki < nk; ki++)
		for (uint32_t oi = 0; oi < no; oi++)
			if (rd_le32(b + 64 + 4 * (nk + np + no) + 24 *
			    ((ki * (size_t)np + pi) * no + oi) + 20) != 0)
				return 1;
	return 0;
}

/*
 * 256 lists: the grid is measured up to 64 probes, and past that (96,
 * 128: half the lists, then 192 and all 256, the last resort) only while
 * the recall is short.  Unclustered rows are still short at 64 probes,
 * so 96 to 192 at least are measured and choices reach there; clustered
 * rows are found in a few lists, and nothing past 64 is measured.
 */
static void
test_extend(void)
{
	const char *p = fpath("extend.tqi");
	static const uint32_t want[] = { 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48,
	    64, 96, 128, 192, 256 };
	struct tq_recall_choice ch;
	struct tq_index *ix;
	uint64_t g = 4242, off, len;
	uint8_t *b;

	for (int v = 0; v < 2; v++) {
		if (v == 0)
			for (int i = 0; i < (N + 200) * DIM; i++)
				data[i] = ((float)tq_rand_below(&g, 2001) -
				    1000.0f) / 400.0f;
		else
			make_data();
		build(p, 256, TQ_ORIG_F32);
		CHECK_OK(tq_index_calibrate(p, NULL, NULL, p));
		b = read_calb(p, &off, &len);
		CHECK(b != NULL);
		if (b == NULL)
			return;
		CHECK(rd_le32(b + 32) == sizeof(want) / sizeof(want[0]));
		for (uint32_t pi = 0; pi < sizeof(want) / sizeof(want[0]);
		    pi++)
			CHECK(rd_le32(b + 64 + 4 * (3 + pi)) == want[pi]);
		CHECK(probes_measured(b, 11));
		CHECK(probes_measured(b, 12) == (v == 0));
		CHECK(probes_measured(b, 13) == (v == 0));
		CHECK(probes_measured(b, 14) == (v == 0));
		/* All lists only if 192 was still short: not asked here. */
		CHECK(v == 0 || !probes_measured(b, 15));
		CHECK_OK(tq_index_open(p, &ix));
		CHECK_OK(tq_index_recall_choose(ix, 100, 0.99, &ch));
		CHECK(v == 1 || ch.probes > 64);
		tq_index_close(ix);
		check_choices(p);
		free(b);
	}
}

/* The same bytes at 1 and 2 threads, and with queries given. */
static void
test_deterministic(void)
{
	struct tq_calib_params cp;
	struct tq_calib_info ci;
	struct tq_index *ix;
	const char *a = fpath("a.tqi"), *b = fpath("b.tqi");
	uint64_t oa, la, ob, lb;
	uint8_t *pa, *pb;

	build(a, 16, TQ_ORIG_F16);
	tq_calib_params_default(&cp);
	cp.threads = 1;
	CHECK_OK(tq_index_calibrate(a, &cp, NULL, b));
	cp.threads = 2;
	CHECK_OK(tq_index_calibrate(a, &cp, NULL, a));
	pa = read_calb(a, &oa, &la);
	pb = read_calb(b, &ob, &lb);
	CHECK(pa != NULL && pb != NULL && la == lb &&
	    memcmp(pa, pb, la) == 0);
	free(pa);
	free(pb);

	/* Given queries: held out, source 2. */
	cp.queries = data + N * DIM;
	cp.nq = 200;
	cp.dim = DIM;
	CHECK_OK(tq_index_calibrate(a, &cp, NULL, a));
	CHECK_OK(tq_index_open(a, &ix));
	CHECK_OK(tq_index_calib_info(ix, &ci));
	CHECK(ci.present && ci.source == 2 && ci.queries == 200);
	tq_index_close(ix);
	check_choices(a);
	cp.dim = DIM - 1;
	CHECK_ST(tq_index_calibrate(a, &cp, NULL, a), TQ_ERR_MISMATCH);
}

/* Appends past 10% of the live rows make it stale. */
static void
test_stale(void)
{
	const char *p = fpath("s.tqi");
	struct tq_build_params bp;
	struct tq_calib_info ci;
	struct tq_index *ix;
	struct tq_reader *r;

	build(p, 0, TQ_ORIG_F32);
	CHECK_OK(tq_index_calibrate(p, NULL, NULL, p));
	tq_build_params_default(&bp);
	write_fixture(fpath("a1.bin"), data + N * DIM, 80);
	CHECK_OK(tq_reader_open(fpath("a1.bin"), NULL, &r));
	CHECK_OK(tq_index_append(p, r, NULL, &bp, p));
	tq_reader_close(r);
	CHECK_OK(tq_index_open(p, &ix));
	CHECK_OK(tq_index_calib_info(ix, &ci));
	CHECK(ci.present && ci.live == N && !ci.stale);	/* 10% */
	tq_index_close(ix);
	write_fixture(fpath("a2.bin"), data + (N + 80) * DIM, 1);
	CHECK_OK(tq_reader_open(fpath("a2.bin"), NULL, &r));
	CHECK_OK(tq_index_append(p, r, NULL, &bp, p));
	tq_reader_close(r);
	CHECK_OK(tq_index_open(p, &ix));
	CHECK_OK(tq_index_calib_info(ix, &ci));
	CHECK(ci.present && ci.stale);
	tq_index_close(ix);
	/* A recalibration in place: fresh again, at 881 rows. */
	CHECK_OK(tq_index_calibrate(p, NULL, NULL, p));
	CHECK_OK(tq_index_open(p, &ix));
	CHECK_OK(tq_index_calib_info(ix, &ci));
	CHECK(ci.present && !ci.stale && ci.live == N + 81);
	tq_index_close(ix);
}

static void
test_refused(void)
{
	const char *p = fpath("n.tqi");

	build(p, 0, TQ_ORIG_NONE);
	CHECK_ST(tq_index_calibrate(p, NULL, NULL, p), TQ_ERR_NOORIG);
	CHECK_DETAIL("calibration needs the originals");
}

/* A copy of `src` with bytes of its CALB changed, refused on open. */
static void
hostile(const char *src, size_t at, const void *bytes, size_t n,
    const char *detail)
{
	const char *p = fpath("h.tqi");
	struct tq_index *ix;
	uint64_t off, len;
	uint8_t *b = read_calb(src, &off, &len), *all;
	FILE *fp = fopen(src, "rb");
	long size;

	fseek(fp, 0, SEEK_END);
	size = ftell(fp);
	rewind(fp);
	all = malloc((size_t)size);
	CHECK(fread(all, 1, (size_t)size, fp) == (size_t)size);
	fclose(fp);
	memcpy(all + off + at, bytes, n);
	fp = fopen(p, "wb");
	fwrite(all, 1, (size_t)size, fp);
	fclose(fp);
	CHECK_ST(tq_index_open(p, &ix), TQ_ERR_FORMAT);
	CHECK_DETAIL(detail);
	free(all);
	free(b);
}

static void
test_hostile(void)
{
	const char *p = fpath("ivf.tqi");	/* test_flat_and_ivf's */
	uint8_t v[4];
	uint64_t off, len;
	uint8_t *b = read_calb(p, &off, &len);
	uint32_t nk, np, no;

	CHECK(b != NULL);
	if (b == NULL)
		return;
	nk = rd_le32(b + 28);
	np = rd_le32(b + 32);
	no = rd_le32(b + 36);
	wr_le32(v, 2);
	hostile(p, 0, v, 4, "section CALB: unknown version");
	wr_le32(v, 3);
	hostile(p, 4, v, 4, "section CALB: unknown source");
	wr_le32(v, 0);
	hostile(p, 24, v, 4, "section CALB: no queries");
	wr_le32(v, nk + 1);
	hostile(p, 28, v, 4, "section CALB: length");
	wr_le32(v, 9);
	hostile(p, 28, v, 4, "section CALB: grid size out of range");
	hostile(p, 40, "\1", 1, "section CALB: reserved bytes");
	wr_le32(v, 10);
	hostile(p, 64, v, 4, "section CALB: k not ascending");
	wr_le32(v, 17);
	hostile(p, 64 + 4 * (nk + np - 1), v, 4,
	    "section CALB: probes not ascending within the lists");
	wr_lef32(v, 0.5f);
	hostile(p, 64 + 4 * (nk + np), v, 4,
	    "section CALB: oversample not ascending");
	wr_lef32(v, 1.5f);
	hostile(p, 64 + 4 * (nk + np + no), v, 4,
	    "section CALB: entry out of range");
	wr_lef32(v, NAN);
	hostile(p, 64 + 4 * (nk + np + no) + 8, v, 4,
	    "section CALB: entry out of range");
	wr_le32(v, 2);
	hostile(p, 64 + 4 * (nk + np + no) + 20, v, 4,
	    "section CALB: unknown entry flags");
	free(b);
}

int
main(void)
{
	unit_tmpdir();
	make_data();
	RUN(test_flat_and_ivf);
	RUN(test_between);
	RUN(test_extend);
	RUN(test_deterministic);
	RUN(test_stale);
	RUN(test_refused);
	RUN(test_hostile);
	return unit_done();
}
