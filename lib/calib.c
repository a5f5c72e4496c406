/*
 * calib.c - a recall target instead of knobs: the calibration of an
 * index (tq(5) CALB) and the choice of a setting from it.
 *
 * The calibration searches a few hundred queries over a grid of settings
 * (probes x oversample, at k 1, 10 and 100) and stores each setting's
 * mean recall@k, its standard error and the counts of tq_search_stats that
 * set its cost.  Counts, not times: the section, and so the index, is
 * then the same bytes on any machine, and a compaction still equals a
 * fresh build.  The queries are the user's, or rows of the index taken
 * as held-out queries: their own id is left out of their exact
 * neighbours and of their results, so that they are as hard as queries
 * from outside (the row itself would otherwise be a free rank 1).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "calib.h"

/*
 * The grid.  Oversample 1 is "no re-rank" (candidates refined instead).
 * 24 and 32 are for 2-bit codes of hard sets: GloVe-100 at 96 probes
 * took a fixed oversample of 32 to reach recall@10 0.99 (scripts/
 * bench-bound), and 50 000 Gaussian rows by inner product, flat, reached
 * 0.979 at 16, 0.992 at 24.
 */
static const float grid_over[] = { 1, 1.5f, 2, 3, 4, 6, 8, 12, 16, 24, 32 };
#define NOVER (sizeof(grid_over) / sizeof(grid_over[0]))
static const uint32_t grid_k[] = { 1, 10, 100 };
#define NK (sizeof(grid_k) / sizeof(grid_k[0]))
#define KMAX 100u

/* Cost weights: tq.h TQ_RECALL_WREFINE and TQ_RECALL_WORIG. */
#define WREFINE TQ_RECALL_WREFINE
#define WORIG TQ_RECALL_WORIG

/*
 * The probes stop rising at this mean recall: on a large IVF index the
 * last values (all lists) are flat scans, and a mean of exactly 1 may
 * never come.  Targets above it can then go unreached.
 */
#define SATURATED 0.999
/* ... or gains less than this from one probes value to the next, twice. */
#define PLATEAU 0.0005

struct calview {
	unsigned source;
	uint32_t m, nk, np, no;
	uint64_t live, seed;
	const uint8_t *k, *probes, *over, *ent;
};

static const uint8_t *
calb_section(const struct tq_index *ix, uint64_t *len)
{
	return tq_file_section(&ix->file, TQ_TAG_CALB, len);
}

static size_t
calb_length(uint32_t nk, uint32_t np, uint32_t no)
{
	return TQ_CALB_HEADER + 4 * ((size_t)nk + np + no) +
	    TQ_CALB_ENTRY * (size_t)nk * np * no;
}

static enum tq_status
bad(const char *what)
{
	return tq_fail(TQ_ERR_FORMAT, "section CALB: %s", what);
}

/*
 * The header and axes of a CALB section into *v, checked against the
 * index; the entries are checked once, by tq_calib_check at open.
 */
static enum tq_status
calb_view(const struct tq_index *ix, const uint8_t *s, uint64_t len,
    struct calview *v)
{
	uint32_t i, prev = 0;
	float fprev = 0;

	if (len < TQ_CALB_HEADER)
		return bad("shorter than its header");
	if (rd_le32(s) != 1)
		return bad("unknown version");
	v->source = rd_le32(s + 4);
	v->live = rd_le64(s + 8);
	v->seed = rd_le64(s + 16);
	v->m = rd_le32(s + 24);
	v->nk = rd_le32(s + 28);
	v->np = rd_le32(s + 32);
	v->no = rd_le32(s + 36);
	for (i = 40; i < TQ_CALB_HEADER; i++)
		if (s[i] != 0)
			return bad("reserved bytes are not 0");
	if (v->source < 1 || v->source > 2)
		return bad("unknown source of queries");
	if (v->m == 0 || v->m > TQ_CALIB_MAX_QUERIES || v->live == 0)
		return bad("no queries or no rows");
	if (v->nk < 1 || v->nk > TQ_CALB_MAXK || v->np < 1 ||
	    v->np > TQ_CALB_MAXP || v->no < 1 || v->no > TQ_CALB_MAXO)
		return bad("grid size out of range");
	if (len != calb_length(v->nk, v->np, v->no))
		return tq_fail(TQ_ERR_FORMAT, "section CALB: length %llu, "
		    "expected %zu", (unsigned long long)len,
		    calb_length(v->nk, v->np, v->no));
	v->k = s + TQ_CALB_HEADER;
	v->probes = v->k + 4 * (size_t)v->nk;
	v->over = v->probes + 4 * (size_t)v->np;
	v->ent = v->over + 4 * (size_t)v->no;
	for (i = 0; i < v->nk; i++) {
		uint32_t k = rd_le32(v->k + 4 * (size_t)i);

		if (k <= prev || k > 1000000)
			return bad("k not ascending from 1");
		prev = k;
	}
	if (ix->nlist == 0) {
		if (v->np != 1 || rd_le32(v->probes) != 0)
			return bad("probes given for a flat index");
	} else {
		for (prev = 0, i = 0; i < v->np; i++) {
			uint32_t p = rd_le32(v->probes + 4 * (size_t)i);

			if (p <= prev || p > ix->nlist)
				return bad("probes not ascending within the "
				    "lists");
			prev = p;
		}
	}
	for (i = 0; i < v->no; i++) {
		float o = rd_lef32(v->over + 4 * (size_t)i);

		if (!(o >= 1.0f && o <= 1000.0f) || (i > 0 && !(o > fprev)))
			return bad("oversample not ascending from 1");
		if (o > 1.0f && ix->originals == TQ_ORIG_NONE)
			return bad("re-rank calibrated without originals");
		fprev = o;
	}
	return TQ_OK;
}

/*
 * Every entry of a CALB section is checked once, when its index is opened
 * (tq_calib_check); the readers after that parse only the header and the
 * axes (calb_view), so a walk over all the entries stays linear.
 */
enum tq_status
tq_calib_check(const struct tq_index *ix)
{
	struct calview v;
	uint64_t len;
	const uint8_t *s = calb_section(ix, &len);

	if (s == NULL)
		return TQ_OK;
	TQ_TRY(calb_view(ix, s, len, &v));
	for (size_t i = 0; i < (size_t)v.nk * v.np * v.no; i++) {
		const uint8_t *e = v.ent + TQ_CALB_ENTRY * i;
		uint32_t fl = rd_le32(e + 20);

		if (fl > 1)
			return bad("unknown entry flags");
		for (unsigned f = 0; f < 5; f++) {
			float x = rd_lef32(e + 4 * f);

			if (fl == 0 ? x != 0.0f : !(x >= 0.0f &&
			    x <= (f < 2 ? 1.0f : 3.4e38f)))
				return bad("entry out of range");
		}
	}
	return TQ_OK;
}

void
tq_calib_params_default(struct tq_calib_params *p)
{
	memset(p, 0, sizeof(*p));
	p->seed = TQ_CALIB_SEED;
}

enum tq_status
tq_index_calib_info(const struct tq_index *ix, struct tq_calib_info *out)
{
	struct calview v;
	uint64_t len, d;
	const uint8_t *s;

	if (ix == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "calibration info: NULL argument");
	memset(out, 0, sizeof(*out));
	if ((s = calb_section(ix, &len)) == NULL)
		return TQ_OK;
	TQ_TRY(calb_view(ix, s, len, &v));
	out->present = 1;
	out->source = v.source;
	out->queries = v.m;
	out->live = v.live;
	out->seed = v.seed;
	out->nk = v.nk;
	out->nprobes = v.np;
	out->noversample = v.no;
	for (uint32_t i = 0; i < v.nk; i++)
		out->k[i] = rd_le32(v.k + 4 * (size_t)i);
	for (uint32_t i = 0; i < v.nk * v.np * v.no; i++)
		out->measured += rd_le32(v.ent + TQ_CALB_ENTRY * (size_t)i + 20);
	d = ix->live > v.live ? ix->live - v.live : v.live - ix->live;
	out->stale = (double)d * 100.0 > (double)TQ_CALIB_STALE_PCT *
	    (double)v.live;
	return TQ_OK;
}

/* The cost of one query of an entry, in code-byte units (tq(5) CALB). */
static double
entry_cost(const struct tq_index *ix, const uint8_t *e)
{
	double dim = ix->q->dim;

	return (double)rd_lef32(e + 8) * (double)tq_code_bytes(ix->q) +
	    (double)rd_lef32(e + 12) * dim * WREFINE +
	    (double)rd_lef32(e + 16) * dim * WORIG;
}

enum tq_status
tq_index_calib_entry(const struct tq_index *ix, uint32_t ki, uint32_t pi,
    uint32_t oi, struct tq_calib_entry *out)
{
	struct calview v;
	uint64_t len;
	const uint8_t *s, *e;

	if (ix == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "calibration entry: NULL argument");
	memset(out, 0, sizeof(*out));
	if ((s = calb_section(ix, &len)) == NULL)
		return tq_fail(TQ_ERR_EMPTY, "the index has no calibration");
	TQ_TRY(calb_view(ix, s, len, &v));
	if (ki >= v.nk || pi >= v.np || oi >= v.no)
		return tq_fail(TQ_ERR_ARG, "calibration entry (%u, %u, %u) "
		    "out of range (%u, %u, %u)", (unsigned)ki, (unsigned)pi,
		    (unsigned)oi, (unsigned)v.nk, (unsigned)v.np,
		    (unsigned)v.no);
	e = v.ent + TQ_CALB_ENTRY * (((size_t)ki * v.np + pi) * v.no + oi);
	out->k = rd_le32(v.k + 4 * (size_t)ki);
	out->probes = rd_le32(v.probes + 4 * (size_t)pi);
	out->oversample = rd_lef32(v.over + 4 * (size_t)oi);
	out->measured = (int)rd_le32(e + 20);
	if (!out->measured)
		return TQ_OK;
	out->recall = rd_lef32(e);
	out->se = rd_lef32(e + 4);
	out->rows = rd_lef32(e + 8);
	out->refined = rd_lef32(e + 12);
	out->originals = rd_lef32(e + 16);
	out->cost = entry_cost(ix, e);
	return TQ_OK;
}

/*
 * Where most queries of --oversample auto would be searched again, the
 * first pass is work thrown away: its candidates were cut short at
 * k * TQ_AUTO_CAP.  The calibration tells where that is so: its fixed
 * re-rank of k * TQ_AUTO_CAP candidates still finds true neighbours
 * that one of half as many misses, by more than AUTO_CAP_GAIN and more
 * than twice the standard error of the smaller setting.  There the
 * search starts with TQ_AUTO_WIDEN times the room (GloVe-100 at 2 bits:
 * recall@10 0.9686 at oversample 8, 0.9936 at 16, and 587 of 1000
 * queries were searched again; Fashion-MNIST, text-384 and GloVe-100 at
 * 4 bits: 1.0000 at both).  The entry is the calibrated k at or below k
 * (else the smallest) and probes at or below the search's (else the
 * fewest); without a calibration, or the two settings in its grid,
 * TQ_AUTO_CAP.  A function of the index file alone, so results still do
 * not depend on threads, kernels or batches.
 */
#define AUTO_CAP_GAIN 0.002

unsigned
tq_calib_auto_cap(const struct tq_index *ix, uint32_t k, uint32_t probes)
{
	struct calview v;
	uint64_t len;
	const uint8_t *s = calb_section(ix, &len), *e0, *e1;
	uint32_t i, ki = 0, pi = 0, o0 = UINT32_MAX, o1 = UINT32_MAX;
	double gain;

	if (s == NULL || calb_view(ix, s, len, &v) != TQ_OK)
		return TQ_AUTO_CAP;
	for (i = 1; i < v.nk; i++)
		if (rd_le32(v.k + 4 * (size_t)i) <= k)
			ki = i;
	for (i = 1; i < v.np; i++)
		if (rd_le32(v.probes + 4 * (size_t)i) <= probes)
			pi = i;
	for (i = 0; i < v.no; i++) {
		float o = rd_lef32(v.over + 4 * (size_t)i);

		if (o == (float)TQ_AUTO_CAP / 2.0f)
			o0 = i;
		if (o == (float)TQ_AUTO_CAP)
			o1 = i;
	}
	if (o0 == UINT32_MAX || o1 == UINT32_MAX)
		return TQ_AUTO_CAP;
	e0 = v.ent + TQ_CALB_ENTRY * (((size_t)ki * v.np + pi) * v.no + o0);
	e1 = v.ent + TQ_CALB_ENTRY * (((size_t)ki * v.np + pi) * v.no + o1);
	if (rd_le32(e0 + 20) == 0 || rd_le32(e1 + 20) == 0)
		return TQ_AUTO_CAP;
	gain = (double)rd_lef32(e1) - (double)rd_lef32(e0);
	return gain > AUTO_CAP_GAIN && gain > 2.0 * (double)rd_lef32(e0 + 4) ?
	    TQ_AUTO_CAP * TQ_AUTO_WIDEN : TQ_AUTO_CAP;
}

/* The choice so far and the rule that keeps or replaces it. */
struct chooser {
	struct tq_recall_choice *out;
	double thr;			/* target - TQ_RECALL_SLACK */
	double best_lb;
	int have;
};

/*
 * Offers the setting (probes, o) of mean recall r, standard error se and
 * cost: reaching (r - Z se >= thr) beats not reaching; among those
 * reaching, less cost; among those not, a higher lower bound.  Settings
 * are offered in ascending probes, then oversample, so ties keep the
 * smaller setting.
 */
static void
offer(struct chooser *c, uint32_t probes, float o, double r, double se,
    double cost)
{
	struct tq_recall_choice *out = c->out;
	double lb = r - TQ_RECALL_Z * se;
	int ok = lb >= c->thr - 1e-12;

	if (c->have && (out->reached ? !ok || cost >= out->cost :
	    !ok && (lb <= c->best_lb || (lb == c->best_lb &&
	    cost >= out->cost))))
		return;
	c->have = 1;
	c->best_lb = lb;
	out->reached = ok;
	out->probes = probes;
	out->oversample = o;
	out->recall = r;
	out->se = se;
	out->cost = cost;
}

/*
 * Between two measured probes values p0 < p1 at one oversample, where p1
 * reaches and p0 does not: the fewest probes in between whose recall,
 * standard error and cost interpolated linearly in probes reach, if
 * fewer than p1.  Lists are probed nearest first, so each further list
 * adds on average no more of the true neighbours than the one before:
 * recall is concave in probes and the line between two measurements
 * lies below it, so the interpolated recall is a lower bound.  Without
 * this the choice could cost up to the grid's step (about sqrt(2)) more
 * than the cheapest setting that reaches.
 */
static void
offer_between(struct chooser *c, uint32_t p0, uint32_t p1, float o,
    const uint8_t *e0, const uint8_t *e1, double c0, double c1)
{
	double r0 = rd_lef32(e0), s0 = rd_lef32(e0 + 4);
	double r1 = rd_lef32(e1), s1 = rd_lef32(e1 + 4);
	double lb0 = r0 - TQ_RECALL_Z * s0, lb1 = r1 - TQ_RECALL_Z * s1;
	double t;
	uint32_t p;

	if (p1 - p0 < 2 || !(lb0 < c->thr && lb1 >= c->thr) || lb1 <= lb0)
		return;
	/* The first probes value at or past the crossing. */
	t = (c->thr - lb0) / (lb1 - lb0);
	p = p0 + (uint32_t)ceil(t * (double)(p1 - p0) - 1e-9);
	if (p <= p0)
		p = p0 + 1;
	if (p >= p1)
		return;
	t = (double)(p - p0) / (double)(p1 - p0);
	offer(c, p, o, r0 + t * (r1 - r0), s0 + t * (s1 - s0),
	    c0 + t * (c1 - c0));
}

enum tq_status
tq_index_recall_choose(const struct tq_index *ix, uint32_t k, double target,
    struct tq_recall_choice *out)
{
	struct calview v;
	struct chooser c;
	uint64_t len;
	const uint8_t *s;
	uint32_t ki, pi, oi;

	tq_clear_detail();
	if (ix == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "recall: NULL argument");
	if (!(target > 0.0 && target <= 1.0))
		return tq_fail(TQ_ERR_ARG, "recall target %g is not in (0, 1]",
		    target);
	memset(out, 0, sizeof(*out));
	if ((s = calb_section(ix, &len)) == NULL)
		return tq_fail(TQ_ERR_EMPTY, "the index has no calibration");
	TQ_TRY(calb_view(ix, s, len, &v));
	for (ki = 0; ki + 1 < v.nk && rd_le32(v.k + 4 * (size_t)ki) < k; ki++)
		;
	out->k = rd_le32(v.k + 4 * (size_t)ki);
	memset(&c, 0, sizeof(c));
	c.out = out;
	c.thr = target - TQ_RECALL_SLACK;
	for (pi = 0; pi < v.np; pi++)
		for (oi = 0; oi < v.no; oi++) {
			const uint8_t *e = v.ent + TQ_CALB_ENTRY *
			    (((size_t)ki * v.np + pi) * v.no + oi);
			const uint8_t *e0 = e - TQ_CALB_ENTRY * (size_t)v.no;
			uint32_t p = rd_le32(v.probes + 4 * (size_t)pi);
			float o = rd_lef32(v.over + 4 * (size_t)oi);
			double cost;

			if (rd_le32(e + 20) == 0)
				continue;
			cost = entry_cost(ix, e);
			if (pi > 0 && rd_le32(e0 + 20) != 0)
				offer_between(&c, rd_le32(v.probes + 4 *
				    (size_t)(pi - 1)), p, o, e0, e,
				    entry_cost(ix, e0), cost);
			offer(&c, p, o, rd_lef32(e), rd_lef32(e + 4), cost);
		}
	if (!c.have)
		return tq_fail(TQ_ERR_FORMAT, "section CALB: no setting was "
		    "measured at k %u", out->k);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Measuring                                                                 */

/*
 * The live rows of ix as a tq_exact_source (ids = row numbers), segment
 * by segment in the order of their originals, so that ORIG is read once
 * from start to end.  A segment with OMAP gives each original once, as
 * its first live row (copies share one original and one id).
 */
struct rowsrc {
	const struct tq_index *ix;
	uint32_t part;
	uint64_t r;			/* entry of part's ORIG */
	uint64_t *rowid;		/* chunk row numbers */
	const uint8_t *lo, *hi;		/* originals read by the last call */
	const uint8_t *ahead;		/* the end of the originals asked for
					   (tq_map_willneed) */
	uint32_t *inv;			/* OMAP: entry -> first live local
					   row of part, UINT32_MAX for none */
};

/* The pages of originals already read go back (tq_map_release). */
static void
release(struct rowsrc *s)
{
	tq_map_release(s->lo, s->hi);
	s->lo = s->hi = NULL;
}

/* inv for segment s->part, which has OMAP. */
static enum tq_status
inv_make(struct rowsrc *s, const struct tq_part *p)
{
	free(s->inv);
	s->inv = NULL;
	if (p->n > UINT32_MAX)
		return tq_fail(TQ_ERR_OVERFLOW, "segment %u: too many rows "
		    "to calibrate", (unsigned)s->part);
	if ((s->inv = tq_mallocarray(p->norig, sizeof(*s->inv))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	memset(s->inv, 0xff, p->norig * sizeof(*s->inv));
	for (uint64_t r = p->n; r-- > 0; )
		if (!tq_part_dead(p, r))
			s->inv[tq_part_orig_index(p, r)] = (uint32_t)r;
	return TQ_OK;
}

static enum tq_status
rows_next(void *arg, float *x, size_t max, size_t *got,
    const uint64_t **rowid)
{
	struct rowsrc *s = arg;
	const struct tq_index *ix = s->ix;
	uint32_t dim = ix->q->dim;
	size_t n = 0;
	size_t rb = tq_orig_bytes(ix->originals, dim);

	if (s->rowid == NULL &&
	    (s->rowid = tq_mallocarray(max, sizeof(*s->rowid))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	release(s);
	while (n < max && s->part < ix->nparts) {
		const struct tq_part *p = &ix->parts[s->part];
		uint64_t row = s->r;

		if (s->r >= (p->omap != NULL ? p->norig : p->n)) {
			release(s);
			s->part++;
			s->r = 0;
			continue;
		}
		if (p->omap != NULL && s->r == 0)	/* a segment begins */
			TQ_TRY(inv_make(s, p));
		if (s->lo == NULL) {
			/*
			 * The originals of this call and the next are asked
			 * for in large reads (ORIG is MADV_RANDOM for the
			 * searches): the next call's arrive during this
			 * one's products.
			 */
			uint64_t e = p->omap != NULL ? p->norig : p->n;
			const uint8_t *to = p->orig + rb * (e - s->r > 2 *
			    (uint64_t)max ? s->r + 2 * (uint64_t)max : e);

			s->lo = p->orig + rb * s->r;
			if (s->ahead < s->lo || s->ahead > to)
				s->ahead = s->lo;
			tq_map_willneed(s->ahead, to);
			s->ahead = to;
		}
		s->hi = p->orig + rb * (s->r + 1);
		if (p->omap != NULL)
			row = s->inv[s->r] == UINT32_MAX ? UINT64_MAX :
			    s->inv[s->r];
		else if (tq_part_dead(p, row))
			row = UINT64_MAX;
		if (row != UINT64_MAX) {
			tq_orig_row(tq_kernels(), ix->originals, p->orig +
			    rb * s->r, dim, x + n * dim);
			s->rowid[n++] = p->row0 + row;
		}
		s->r++;
	}
	*got = n;
	*rowid = s->rowid;
	return TQ_OK;
}

/* Row r (of the row space) as a query vector. */
static void
row_vector(const struct tq_index *ix, uint64_t r, float *o)
{
	const struct tq_part *p = tq_part_of_row(ix, r);
	uint32_t dim = ix->q->dim;

	tq_orig_row(tq_kernels(), ix->originals, tq_part_orig(p, r - p->row0,
	    tq_orig_bytes(ix->originals, dim)), dim, o);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * m distinct positions among the live rows (Floyd's sampling with the
 * seeded generator of ivf.c), turned into rows of the row space, ascending.
 */
static enum tq_status
sample_rows(const struct tq_index *ix, uint32_t m, uint64_t seed,
    uint64_t *rows)
{
	uint64_t L = ix->live, g = seed, j, pos;
	uint32_t n = 0, i, at;

	for (j = L - m; j < L; j++) {
		uint64_t t = tq_rand_below(&g, j + 1);
		int dup = 0;

		for (i = 0; i < n; i++)
			if (rows[i] == t) {
				dup = 1;
				break;
			}
		rows[n++] = dup ? j : t;
	}
	qsort(rows, m, sizeof(*rows), cmp_u64);
	/* Live positions to rows: one walk over the segments. */
	for (pos = 0, at = 0, i = 0; i < ix->nparts && at < m; i++) {
		const struct tq_part *p = &ix->parts[i];

		for (uint64_t r = 0; r < p->n && at < m; r++) {
			if (tq_part_dead(p, r))
				continue;
			while (at < m && rows[at] == pos)
				rows[at++] = p->row0 + r;
			pos++;
		}
	}
	return at == m ? TQ_OK : tq_fail(TQ_ERR_FORMAT, "live rows miscounted");
}

/*
 * The probes grid of an IVF index: about sqrt(2) apart.  Every value up
 * to max(PROBES_MIN, nlist / PROBES_DIV) is measured (*nsoft of them),
 * and all lists when that is all of them: a search of more lists is
 * nearly a flat scan, and at 10M rows and 3162 lists a grid up to all
 * lists cost the calibration more than a quarter of an hour.  Past
 * that, up to nlist / PROBES_HARD_DIV, values are measured only while
 * the recall is still short of ENOUGH and within EXTEND_BUDGET times the
 * probes already measured (tq_index_calibrate): on a hard set the
 * recall a user asks for (0.99 of the true 10) may lie there, and the
 * targets above the calibration's best go unreached.
 *
 * Past half the lists the grid goes on to all lists (*nhard: the values
 * up to half).  These are the last resort, measured when every value
 * before them was and while the recall is still short of ENOUGH,
 * whatever the budget: an IVF search of every list returns the flat
 * index's results, so a target the flat index reaches is reached there,
 * and the recall between two values is interpolated (offer_between).
 * Unstructured rows (50 000 Gaussian ones by inner product, 224 lists)
 * reached 0.72 of the true 10 at 96 probes, where --recall 0.9 had
 * nothing to choose but that and a warning (README, "Rows without
 * structure").  A grid cut short by the budget (many lists) never gets
 * there, so the calibration's cost stays bounded: the last resort's
 * probes add up to about five times half the lists at most (128 + 192 +
 * 224 past 96 of 224 lists), where half the lists was within budget.
 */
#define PROBES_MIN 64u
#define PROBES_DIV 32u
#define PROBES_HARD_DIV 2u
#define ENOUGH 0.995
#define EXTEND_BUDGET 2u
static uint32_t
probes_grid(uint32_t nlist, uint32_t *p, uint32_t *nsoft, uint32_t *nhard)
{
	static const uint32_t a[] = { 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48 };
	uint32_t n = 0, v, soft = nlist / PROBES_DIV;
	uint32_t cap = nlist / PROBES_HARD_DIV;
	size_t i;

	if (nlist == 0) {
		p[0] = 0;
		*nsoft = *nhard = 1;
		return 1;
	}
	if (soft < PROBES_MIN)
		soft = PROBES_MIN;
	if (cap < soft)
		cap = soft;
	for (i = 0; i < sizeof(a) / sizeof(a[0]) && a[i] < nlist; i++)
		p[n++] = a[i];
	for (v = 64; v < nlist && n + 1 < TQ_CALB_MAXP; v *= 2) {
		p[n++] = v;
		if (v + v / 2 < nlist && n + 1 < TQ_CALB_MAXP)
			p[n++] = v + v / 2;
	}
	p[n++] = nlist;		/* n < TQ_CALB_MAXP: the loop leaves room */
	for (*nsoft = 0; *nsoft < n && p[*nsoft] <= soft; (*nsoft)++)
		;
	for (*nhard = *nsoft; *nhard < n && p[*nhard] <= cap; (*nhard)++)
		;
	return n;
}

struct calrun {
	const struct tq_index *ix;
	const float *qv;
	size_t m;
	const uint64_t *self;		/* m ids, or NULL */
	const uint64_t *truth;		/* m * KMAX ids, best first */
	const uint32_t *tlen;		/* m: truth ids per query (<= KMAX) */
	unsigned threads;
	uint64_t *ids;			/* QBATCH * (KCAND + 1) */
	float *scores;
	uint64_t *got;			/* KCAND + 1 (id, position) pairs */
	uint32_t *rank;			/* KMAX */
};

/*
 * Queries searched at a time, and the most candidates a setting takes
 * (k 10 at oversample 32; k 100 up to 3).
 */
#define QBATCH 256u
#define KCAND 320u
/* Candidates a search without re-rank refines: REFINE k (search.c). */
#define REFINE 4u

/* The candidates of a search of k at oversample o (search.c). */
static uint32_t
cands(uint32_t k, float o)
{
	return o > 1.0f ? (uint32_t)tq_k_times(k, o) : k;
}

/*
 * One probes value: every (k, oversample) of the grid from one search
 * without re-rank of the most candidates any setting takes, K = k_max *
 * o_max but at most KCAND (plus the query's own row; settings that
 * would take more are left unmeasured): the scan's best K, re-scored by
 * the float tables (tq_search_refine 1) and ranked by them.  A re-rank of
 * k * o candidates returns, of the true k nearest, exactly those among
 * its candidates (they beat every other candidate), so its recall@k is
 * that of the first k * o results here, and that of a search without
 * re-rank the first k.  The search takes the scan's best k * o by its
 * rounded tables (at 1 and 2 bits: picks them by float tables among
 * 1.5 k * o, PRERANK), and those here come from the scan's best K, so
 * the two can differ at the margin; tq(5) CALB.
 * Entries go to ent[ki * np * no + oi] (the caller's offset for the
 * probes value); *best is the lowest over k of the best recall over
 * oversample.
 */
static enum tq_status
measure(struct calrun *c, const uint32_t *ks, uint32_t nk, uint32_t probes,
    uint8_t *ent, size_t kstride, double *best)
{
	struct tq_search_params sp;
	struct tq_search_stats st;
	uint32_t kmax = ks[nk - 1], K, ki, oi, n, j, t, h;
	double s[NK][NOVER], s2[NK][NOVER], m = (double)c->m, rows = 0;
	int self = c->self != NULL;

	memset(s, 0, sizeof(s));
	memset(s2, 0, sizeof(s2));
	K = cands(kmax, grid_over[NOVER - 1]);
	K = (K > KCAND ? KCAND : K) + self;
	if ((uint64_t)K > c->ix->live)
		K = (uint32_t)c->ix->live;
	tq_search_params_default(&sp);
	sp.k = K;
	sp.oversample = 1;
	sp.probes = probes;
	sp.threads = c->threads;
	sp.stats = &st;
	for (size_t q0 = 0; q0 < c->m; q0 += QBATCH) {
		size_t nb = c->m - q0 < QBATCH ? c->m - q0 : QBATCH;

		TQ_TRY(tq_search_refine(c->ix, c->qv + q0 * c->ix->q->dim, nb,
		    &sp, 1, 0, c->ids, c->scores));
		rows += (double)st.rows_scanned;
		for (size_t i = 0; i < nb; i++) {
			const uint64_t *r = c->ids + i * K;
			const uint64_t *tr = c->truth + (q0 + i) * KMAX;

			/*
			 * The results that are not the query's own row, by
			 * id with their rank, and the rank of each true
			 * neighbour among them (UINT32_MAX: absent).
			 */
			for (n = 0, j = 0; j < K; j++)
				if (r[j] != UINT64_MAX && (!self ||
				    r[j] != c->self[q0 + i])) {
					c->got[2 * n] = r[j];
					c->got[2 * n + 1] = n;
					n++;
				}
			qsort(c->got, n, 2 * sizeof(*c->got), cmp_u64);
			for (t = 0; t < c->tlen[q0 + i]; t++) {
				const uint64_t *f = bsearch(&tr[t], c->got, n,
				    2 * sizeof(*c->got), cmp_u64);

				c->rank[t] = f == NULL ? UINT32_MAX :
				    (uint32_t)f[1];
			}
			for (ki = 0; ki < nk; ki++) {
				uint32_t k = ks[ki], want = c->tlen[q0 + i];

				if (want > k)
					want = k;
				for (oi = 0; oi < NOVER; oi++) {
					uint32_t cn = cands(k, grid_over[oi]);
					double rec;

					for (h = 0, t = 0; t < want; t++)
						h += c->rank[t] < cn;
					rec = want == 0 ? 1.0 :
					    (double)h / want;
					s[ki][oi] += rec;
					s2[ki][oi] += rec * rec;
				}
			}
		}
	}
	*best = 1.0;
	for (ki = 0; ki < nk; ki++) {
		double b = 0;

		for (oi = 0; oi < NOVER; oi++) {
			uint8_t *e = ent + ki * kstride + TQ_CALB_ENTRY * oi;
			double mean = s[ki][oi] / m, var = m > 1 ?
			    (s2[ki][oi] - s[ki][oi] * s[ki][oi] / m) /
			    (m - 1) : 0;
			float o = grid_over[oi];

			/* More candidates than were asked for: not measured. */
			if (cands(ks[ki], o) > K - self)
				continue;
			wr_lef32(e, (float)(mean > 1 ? 1 : mean));
			wr_lef32(e + 4, (float)(var > 0 ? sqrt(var / m) : 0));
			wr_lef32(e + 8, (float)(rows / m));
			wr_lef32(e + 12, o > 1.0f ? 0.0f :
			    (float)(REFINE * ks[ki]));
			wr_lef32(e + 16, o > 1.0f ? (float)cands(ks[ki], o) :
			    0.0f);
			wr_le32(e + 20, 1);
			if (mean > b)
				b = mean;
		}
		if (b < *best)
			*best = b;
	}
	return TQ_OK;
}

/*
 * Exact neighbours: the best KMAX distinct ids other than the query's
 * own, of the live rows' originals; stored sorted by id for the
 * intersections (only the set matters).
 */
static enum tq_status
truth_of(struct calrun *c, uint32_t kt, uint64_t *truth, uint32_t *tlen)
{
	const struct tq_index *ix = c->ix;
	uint32_t cop = ix->dups > 1 ? ix->dups : 1, kx, j, n;
	struct rowsrc src = { ix, 0, 0, NULL, NULL, NULL, NULL, NULL };
	uint64_t *ids;
	float *sc;
	enum tq_status rc;

	kx = (kt + 1) * cop;
	if ((uint64_t)kx > ix->n)
		kx = (uint32_t)ix->n;
	ids = tq_mallocarray(c->m * (size_t)kx, sizeof(*ids));
	sc = tq_mallocarray(c->m * (size_t)kx, sizeof(*sc));
	if (ids == NULL || sc == NULL) {
		free(ids);
		free(sc);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	rc = tq_exact_source(rows_next, &src, ix->q->metric, c->qv, c->m,
	    ix->q->dim, kx, c->threads, ids, sc);
	release(&src);
	free(src.rowid);
	free(src.inv);
	for (size_t i = 0; rc == TQ_OK && i < c->m; i++) {
		uint64_t *t = truth + i * KMAX;

		for (n = 0, j = 0; j < kx && n < kt; j++) {
			uint64_t id;
			uint32_t u;

			if (ids[i * kx + j] == UINT64_MAX)
				break;
			id = tq_index_id(ix, ids[i * kx + j]);
			if (c->self != NULL && id == c->self[i])
				continue;
			for (u = 0; u < n && t[u] != id; u++)
				;
			if (u == n)
				t[n++] = id;
		}
		tlen[i] = n;
	}
	free(ids);
	free(sc);
	return rc;
}

enum tq_status
tq_calib_compute(const struct tq_index *ix, const struct tq_calib_params *cp,
    uint8_t **buf, size_t *len)
{
	struct calrun c;
	uint32_t probes[TQ_CALB_MAXP], np, nsoft, nhard, nk = 0, ks[NK];
	uint32_t ki, pi, oi, m;
	uint32_t dim = ix->q->dim, kt;
	int sat, flat;
	double prev;
	uint64_t sum, extra;
	uint64_t *rows = NULL, *self = NULL, *truth = NULL;
	uint32_t *tlen = NULL;
	float *qv = NULL;
	uint8_t *out = NULL;
	size_t L;
	enum tq_status rc = TQ_OK;

	*buf = NULL;
	*len = 0;
	if (ix->originals == TQ_ORIG_NONE)
		return tq_fail(TQ_ERR_NOORIG, "calibration needs the "
		    "originals, and the index has none");
	memset(&c, 0, sizeof(c));
	if (cp->queries != NULL) {
		if (cp->nq == 0)
			return tq_fail(TQ_ERR_EMPTY, "no calibration queries");
		if (cp->nq > TQ_CALIB_MAX_QUERIES)
			return tq_fail(TQ_ERR_ARG, "%zu calibration queries, "
			    "at most %u", cp->nq, TQ_CALIB_MAX_QUERIES);
		m = (uint32_t)cp->nq;
	} else {
		if (ix->live < TQ_CALIB_MIN_ROWS)
			return tq_fail(TQ_ERR_EMPTY, "%llu live rows, too few "
			    "to calibrate from (at least %u)",
			    (unsigned long long)ix->live, TQ_CALIB_MIN_ROWS);
		m = cp->sample ? cp->sample : TQ_CALIB_SAMPLE;
		if (m > TQ_CALIB_MAX_SAMPLE)
			m = TQ_CALIB_MAX_SAMPLE;
		if ((uint64_t)m > ix->live / 4)
			m = (uint32_t)(ix->live / 4);
	}
	/* k up to the rows a query can be given (its own left out). */
	for (size_t i = 0; i < NK; i++)
		if (grid_k[i] + (cp->queries == NULL) <= ix->live)
			ks[nk++] = grid_k[i];
	kt = ks[nk - 1];
	np = probes_grid(ix->nlist, probes, &nsoft, &nhard);
	L = calb_length(nk, np, NOVER);
	qv = tq_mallocarray((size_t)m * dim, sizeof(*qv));
	truth = tq_callocarray((size_t)m * KMAX, sizeof(*truth));
	tlen = tq_callocarray(m, sizeof(*tlen));
	c.ids = tq_mallocarray((size_t)QBATCH * (KCAND + 1), sizeof(*c.ids));
	c.scores = tq_mallocarray((size_t)QBATCH * (KCAND + 1),
	    sizeof(*c.scores));
	c.got = tq_mallocarray(2 * (KCAND + 1), sizeof(*c.got));
	c.rank = tq_mallocarray(KMAX, sizeof(*c.rank));
	out = tq_callocarray(L, 1);
	if (qv == NULL || truth == NULL || tlen == NULL || c.ids == NULL ||
	    c.scores == NULL || c.got == NULL || c.rank == NULL ||
	    out == NULL) {
		rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
		goto done;
	}
	if (cp->queries != NULL) {
		memcpy(qv, cp->queries, (size_t)m * dim * sizeof(*qv));
	} else {
		rows = tq_mallocarray(m, sizeof(*rows));
		self = tq_mallocarray(m, sizeof(*self));
		if (rows == NULL || self == NULL) {
			rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
			goto done;
		}
		if ((rc = sample_rows(ix, m, cp->seed, rows)) != TQ_OK)
			goto done;
		for (uint32_t i = 0; i < m; i++) {
			row_vector(ix, rows[i], qv + (size_t)i * dim);
			self[i] = tq_index_id(ix, rows[i]);
		}
	}
	c.ix = ix;
	c.qv = qv;
	c.m = m;
	c.self = self;
	c.threads = cp->threads;
	if ((rc = truth_of(&c, kt, truth, tlen)) != TQ_OK)
		goto done;
	c.truth = truth;
	c.tlen = tlen;

	wr_le32(out, 1);
	wr_le32(out + 4, cp->queries != NULL ? 2 : 1);
	wr_le64(out + 8, ix->live);
	wr_le64(out + 16, cp->queries != NULL ? 0 : cp->seed);
	wr_le32(out + 24, m);
	wr_le32(out + 28, nk);
	wr_le32(out + 32, np);
	wr_le32(out + 36, (uint32_t)NOVER);
	for (ki = 0; ki < nk; ki++)
		wr_le32(out + TQ_CALB_HEADER + 4 * ki, ks[ki]);
	for (pi = 0; pi < np; pi++)
		wr_le32(out + TQ_CALB_HEADER + 4 * (nk + pi), probes[pi]);
	for (oi = 0; oi < NOVER; oi++)
		wr_lef32(out + TQ_CALB_HEADER + 4 * (nk + np + oi),
		    grid_over[oi]);
	/*
	 * The probes stop after two values whose every k reached a mean
	 * recall of SATURATED, or that each gained less than PLATEAU on the
	 * value before: more lists would cost more for less.  Past the first
	 * nsoft values, only while the recall is short of ENOUGH and, up to
	 * the first nhard, the probes measured there stay within
	 * EXTEND_BUDGET times those before (past them, the last resort:
	 * probes_grid).
	 */
	for (pi = 0, sat = 0, flat = 0, prev = -1.0, sum = 0, extra = 0;
	    pi < np && sat < 2 && flat < 2; pi++) {
		double best;

		if (pi >= nsoft) {
			extra += probes[pi];
			if (prev >= ENOUGH || (pi < nhard &&
			    extra > EXTEND_BUDGET * sum))
				break;
		} else {
			sum += probes[pi];
		}

		if ((rc = measure(&c, ks, nk, probes[pi], out +
		    TQ_CALB_HEADER + 4 * (nk + np + NOVER) + TQ_CALB_ENTRY *
		    (size_t)pi * NOVER, TQ_CALB_ENTRY * (size_t)np * NOVER,
		    &best)) != TQ_OK)
			goto done;
		sat = best >= SATURATED ? sat + 1 : 0;
		flat = prev >= 0.0 && best - prev < PLATEAU ? flat + 1 : 0;
		prev = best;
	}
	*buf = out;
	*len = L;
	out = NULL;
done:
	free(out);
	free(rows);
	free(self);
	free(truth);
	free(tlen);
	free(qv);
	free(c.ids);
	free(c.scores);
	free(c.got);
	free(c.rank);
	return rc;
}
