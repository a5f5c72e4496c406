/*
 * bench-bound.c - does the per-vector error bound of tq(5) hold on real
 * data?  A measurement, not a test: it prints figures.
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib scripts/bench-bound.c \
 *       build/lib/libtq.a -lm -pthread -o /tmp/bench-bound
 *   /tmp/bench-bound index queries [nq] [ncand]
 *
 * The index needs f32 originals.  For each of the first nq queries (200
 * by default) it estimates <q, x> for every live row from the codes and
 * factors, in double (the estimator of tq(5) without the tables'
 * rounding), computes the exact <q, x> from the originals and the bound's
 * half-width
 *
 *     h = z |q - c| |s| rho / sqrt(d - 1)
 *
 * written here from tq(5) "Error bound", not taken from the library, so
 * that the check is independent of search.c.  It reports, for z = 1, 2,
 * 3, the fraction of rows whose exact value falls outside estimate +- h,
 * beside what a standard normal gives (31.7%, 4.55%, 0.27%): over all
 * rows, and over each query's ncand (100) best rows by estimate, the
 * candidates a re-rank sees.  The same with the global rho that an index
 * without WDTH falls back to, and the mean of h (z = 1) relative to the
 * spread of the estimates, for scale.  Last, what an error-bounded
 * re-rank depends on: the share of each query's true 10 nearest (by the
 * exact value) whose exact value lies above estimate + z h, one-sided
 * (a normal law: 15.9%, 2.28%, 0.135%).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const double distortion[5] = { 0, 0.3634, 0.1175, 0.03454, 0.009497 };

struct row {
	double est, err, h;	/* estimate, exact - estimate, h at z = 1 */
	double hg;		/* h with the global rho */
};

static int
cmp_ex(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	double ex = x->est + x->err, ey = y->est + y->err;

	return ex > ey ? -1 : ex < ey;
}

static int
cmp_est(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return x->est > y->est ? -1 : x->est < y->est;
}

static void
die(const char *what, enum tq_status st)
{
	fprintf(stderr, "bench-bound: %s: %s: %s\n", what, tq_strerror(st),
	    tq_errdetail());
	exit(1);
}

int
main(int argc, char **argv)
{
	struct tq_index *ix;
	const struct tq_quantizer *q;
	float *qs, *rq, *qv;
	uint8_t *codes;
	struct row *rows;
	size_t nq = 200, ncand = 100, nrows;
	uint32_t dim, qd;
	double out[2][2][4] = { { { 0 } } };	/* [set][global][z] */
	double cnt[2] = { 0, 0 }, hsum = 0, spread = 0, unknown = 0;
	double above[2][4] = { { 0 } }, ntrue = 0;
	double rg;
	enum tq_status st;

	if (argc < 3) {
		fprintf(stderr, "usage: bench-bound index queries [nq] "
		    "[ncand]\n");
		return 2;
	}
	if (argc > 3)
		nq = strtoul(argv[3], NULL, 10);
	if (argc > 4)
		ncand = strtoul(argv[4], NULL, 10);
	if ((st = tq_index_open(argv[1], &ix)) != TQ_OK)
		die(argv[1], st);
	if (ix->originals != TQ_ORIG_F32) {
		fprintf(stderr, "bench-bound: %s: needs f32 originals\n",
		    argv[1]);
		return 1;
	}
	q = ix->q;
	dim = q->dim;
	{
		size_t n;

		if ((st = tq_read_all(argv[2], NULL, &qs, &qd, &n)) != TQ_OK)
			die(argv[2], st);
		if (qd != dim) {
			fprintf(stderr, "bench-bound: dimension %u, index %u\n",
			    qd, dim);
			return 1;
		}
		if (nq > n)
			nq = n;
	}
	rg = sqrt(distortion[q->bits] / (1 - distortion[q->bits]));
	rq = malloc(sizeof(float) * dim);
	qv = malloc(sizeof(float) * dim);
	codes = malloc(dim);
	rows = malloc(sizeof(*rows) * ix->n);
	for (size_t i = 0; i < nq; i++) {
		double qc2 = 0, qc = 0, qn2 = 0, mean = 0, var = 0;

		memcpy(qv, qs + i * dim, sizeof(float) * dim);
		if (q->metric == TQ_METRIC_COSINE)
			(void)tq_normalise(qv, dim, qv);
		tq_rotate(q, qv, 1, rq);
		for (uint32_t d = 0; d < dim; d++) {
			double e = (double)qv[d] - q->centre[d];

			qc2 += e * e;
			qc += (double)qv[d] * q->centre[d];
			qn2 += (double)qv[d] * qv[d];
		}
		nrows = 0;
		for (uint32_t s = 0; s < ix->nparts; s++) {
			const struct tq_part *p = &ix->parts[s];

			for (uint64_t r = 0; r < p->n; r++) {
				/* FACH rows: s, t (tq(5)); FACT: s, b'. */
				const float *fs = p->factors == NULL ? NULL :
				    p->factors + r / TQ_BLOCK * TQ_BLOCK *
				    TQ_NFACTORS + r % TQ_BLOCK;
				const uint8_t *o = p->orig + r * dim * 4;
				double dot = 0, ex = 0, x2 = 0, sv, rho;
				float rv = INFINITY, hs = 0, ht = 0;

				if (tq_part_dead(p, r))
					continue;
				tq_unpack_block_row(q, p->codes + r / TQ_BLOCK *
				    ix->block_bytes, (unsigned)(r % TQ_BLOCK),
				    codes);
				for (uint32_t d = 0; d < dim; d++) {
					dot += (double)rq[d] *
					    q->centroids[codes[d]];
					ex += (double)qv[d] * rd_lef32(o + 4 * d);
					x2 += (double)rd_lef32(o + 4 * d) *
					    rd_lef32(o + 4 * d);
				}
				if (fs == NULL)
					tq_fach_decode(p->fach + r / TQ_BLOCK *
					    TQ_FACH_BLOCK, (unsigned)(r %
					    TQ_BLOCK), &hs, &ht);
				sv = fs != NULL ? fs[0] : hs;
				if (p->wdth != NULL)
					rv = tq_f16_to_f32(rd_le16(p->wdth +
					    2 * r));
				rho = isfinite(rv) && rv >= 0 ? rv : rg;
				unknown += !(isfinite(rv) && rv >= 0);
				/*
				 * FACH l2 keys estimate |q - x|^2; the <q, x>
				 * they imply, with the true |x|^2.
				 */
				if (fs != NULL)
					rows[nrows].est = sv * dot +
					    fs[TQ_BLOCK] + qc;
				else if (q->metric == TQ_METRIC_L2)
					rows[nrows].est = (qn2 + x2 - (qc2 -
					    sv * (2 * dot + ht))) / 2;
				else
					rows[nrows].est = qc + sv * (dot + ht);
				rows[nrows].err = ex - rows[nrows].est;
				rows[nrows].h = sqrt(qc2) * fabs(sv) * rho /
				    sqrt(dim > 1 ? dim - 1.0 : 1.0);
				rows[nrows].hg = sqrt(qc2) * fabs(sv) * rg /
				    sqrt(dim > 1 ? dim - 1.0 : 1.0);
				mean += rows[nrows].est;
				nrows++;
			}
		}
		mean /= (double)nrows;
		for (size_t e = 0; e < nrows; e++)
			var += (rows[e].est - mean) * (rows[e].est - mean);
		spread += sqrt(var / (double)nrows);
		qsort(rows, nrows, sizeof(*rows), cmp_est);
		for (size_t e = 0; e < nrows; e++) {
			for (int set = 0; set < 2; set++) {
				if (set == 1 && e >= ncand)
					continue;
				cnt[set]++;
				for (int z = 1; z <= 3; z++) {
					out[set][0][z] += fabs(rows[e].err) >
					    z * rows[e].h;
					out[set][1][z] += fabs(rows[e].err) >
					    z * rows[e].hg;
				}
			}
			hsum += rows[e].h;
		}
		qsort(rows, nrows, sizeof(*rows), cmp_ex);
		for (size_t e = 0; e < nrows && e < 10; e++) {
			ntrue++;
			for (int z = 1; z <= 3; z++) {
				above[0][z] += rows[e].err > z * rows[e].h;
				above[1][z] += rows[e].err > z * rows[e].hg;
			}
		}
	}
	printf("index %s: dim %u, bits %u, metric %s, %zu queries, %llu "
	    "rows (%.0f without rho)\n", argv[1], dim, q->bits,
	    tq_metric_name(q->metric), nq, (unsigned long long)ix->live,
	    unknown / (double)nq);
	printf("mean h (z=1) / spread of the estimates: %.4f\n",
	    hsum / cnt[0] / (spread / (double)nq));
	printf("outside est +- z h       z=1      z=2      z=3\n");
	printf("normal                 31.73%%    4.55%%    0.27%%\n");
	for (int set = 0; set < 2; set++)
		for (int g = 0; g < 2; g++)
			printf("%-4s %-17s %6.2f%%  %6.2f%%  %6.3f%%\n",
			    set ? "top" : "all", g ? "global rho" :
			    "per-vector rho", 100 * out[set][g][1] / cnt[set],
			    100 * out[set][g][2] / cnt[set],
			    100 * out[set][g][3] / cnt[set]);
	printf("true 10 nearest, above  z=1      z=2      z=3\n");
	printf("normal                 15.87%%    2.28%%   0.135%%\n");
	for (int g = 0; g < 2; g++)
		printf("     %-17s %6.2f%%  %6.2f%%  %6.3f%%\n",
		    g ? "global rho" : "per-vector rho",
		    100 * above[g][1] / ntrue, 100 * above[g][2] / ntrue,
		    100 * above[g][3] / ntrue);
	tq_index_close(ix);
	free(qs);
	free(rq);
	free(qv);
	free(codes);
	free(rows);
	return 0;
}
