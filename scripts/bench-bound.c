/*
 * bench-bound.c - does the per-vector error bound of tq(5) hold on real
 * data?  A measurement, not a test: it prints figures (and, with -j, one
 * JSON line of them on standard output instead).
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Ilib scripts/bench-bound.c \
 *       build/lib/libtq.a -lm -pthread -o /tmp/bench-bound
 *   /tmp/bench-bound [-j] index queries [nq] [ncand]
 *
 * The index needs f32 originals.  For each of the first nq queries (200
 * by default) it estimates <q, x> for every live row from the codes and
 * factors, in double (the estimator of tq(5) without the tables'
 * rounding), computes the exact <q, x> and |q - x| from the originals,
 * and two half-widths of the error of <q, x>, written here from tq(5)
 * "Error bound", not taken from the library, so that the check is
 * independent of search.c and bound.c:
 *
 *     h  = |q - c| |s| rho / sqrt(d - 1)                 (any angle)
 *     hn = min(|q - c|, |q - x|) |s| rho / sqrt(d - 1)   (near neighbours)
 *
 * (the second is the one --oversample auto uses: its interval, solved
 * from the estimate, holds exactly when |error| <= z hn, see tq(5)).
 * It reports, for z = 1, 1.5, 2, 2.5, 3, the share of rows whose exact
 * value falls outside estimate +- z h (and z hn, and z times h with the
 * global rho that an index without WDTH falls back to), beside what a
 * standard normal gives: over all rows, over each query's ncand (100)
 * best rows by estimated score (the candidates a re-rank sees), and, one
 * sided, over each query's true 10 nearest by exact score: the share
 * whose exact score is better than the estimate by more than the width,
 * which is what an error-bounded re-rank can miss.  Last, the mean of
 * hn / h over those sets: how much narrower the near bound is.
 * Scores follow the metric (l2: the squared distance, lower is better).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const double distortion[5] = { 0, 0.3634, 0.1175, 0.03454, 0.009497 };

#define NZ 5
static const double zs[NZ] = { 1, 1.5, 2, 2.5, 3 };
/* A standard normal outside +-z, and above z. */
static const double two[NZ] = { 31.73, 13.36, 4.55, 1.242, 0.27 };
static const double one[NZ] = { 15.87, 6.68, 2.28, 0.621, 0.135 };

/* The widths compared: per-vector rho, near-neighbour, global rho. */
enum { W_RHO, W_NEAR, W_GLOBAL, NW };
static const char *wname[NW] = { "per-vector rho", "near (auto)",
    "global rho" };

struct row {
	double est, err;	/* estimate of <q, x>, exact - estimate */
	double kest, kex;	/* estimated and exact score, higher better */
	double w[NW];		/* half-widths at z = 1 */
};

static int
cmp_ex(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return x->kex > y->kex ? -1 : x->kex < y->kex;
}

static int
cmp_est(const void *a, const void *b)
{
	const struct row *x = a, *y = b;

	return x->kest > y->kest ? -1 : x->kest < y->kest;
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
	/* [set: all, top, true 10][width][z] */
	double out[3][NW][NZ] = { { { 0 } } }, cnt[3] = { 0, 0, 0 };
	double ratio[3] = { 0, 0, 0 }, unknown = 0;
	double rg;
	int json = 0;
	enum tq_status st;

	if (argc > 1 && strcmp(argv[1], "-j") == 0) {
		json = 1;
		argc--;
		argv++;
	}
	if (argc < 3) {
		fprintf(stderr, "usage: bench-bound [-j] index queries [nq] "
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
		double qc2 = 0, qc = 0, qn2 = 0, sd = sqrt(dim > 1 ?
		    dim - 1.0 : 1.0);

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

			if (p->factors == NULL) {
				fprintf(stderr, "bench-bound: the index has "
				    "compact factors (FACH): build it with "
				    "tq-build --factors f32\n");
				return 1;
			}

			for (uint64_t r = 0; r < p->n; r++) {
				const float *fs = p->factors + r / TQ_BLOCK *
				    TQ_BLOCK * TQ_NFACTORS + r % TQ_BLOCK;
				const uint8_t *o = tq_part_orig(p, r, dim * 4);
				double dot = 0, ex = 0, dd = 0, sv = fs[0], rho;
				double a;
				struct row *w = &rows[nrows];
				float rv = INFINITY;

				if (tq_part_dead(p, r))
					continue;
				tq_unpack_block_row(q, p->codes + r / TQ_BLOCK *
				    ix->block_bytes, (unsigned)(r % TQ_BLOCK),
				    codes);
				for (uint32_t d = 0; d < dim; d++) {
					double xv = rd_lef32(o + 4 * d);

					dot += (double)rq[d] *
					    q->centroids[codes[d]];
					ex += (double)qv[d] * xv;
					dd += ((double)qv[d] - xv) *
					    ((double)qv[d] - xv);
				}
				if (p->wdth != NULL)
					rv = tq_f16_to_f32(rd_le16(p->wdth +
					    2 * r));
				rho = isfinite(rv) && rv >= 0 ? rv : rg;
				unknown += !(isfinite(rv) && rv >= 0);
				w->est = sv * dot + fs[TQ_BLOCK] + qc;
				w->err = ex - w->est;
				if (q->metric == TQ_METRIC_L2) {
					w->kest = -(qn2 - 2 * w->est +
					    fs[2 * TQ_BLOCK]);
					w->kex = -dd;
				} else {
					w->kest = w->est;
					w->kex = ex;
				}
				a = fabs(sv) / sd;
				w->w[W_RHO] = sqrt(qc2) * a * rho;
				w->w[W_NEAR] = fmin(sqrt(qc2), sqrt(dd)) * a *
				    rho;
				w->w[W_GLOBAL] = sqrt(qc2) * a * rg;
				nrows++;
			}
		}
		qsort(rows, nrows, sizeof(*rows), cmp_est);
		for (size_t e = 0; e < nrows; e++)
			for (int set = 0; set < 2; set++) {
				const struct row *w = &rows[e];

				if (set == 1 && e >= ncand)
					continue;
				cnt[set]++;
				ratio[set] += w->w[W_RHO] > 0 ? w->w[W_NEAR] /
				    w->w[W_RHO] : 1;
				for (int g = 0; g < NW; g++)
					for (int z = 0; z < NZ; z++)
						out[set][g][z] += fabs(w->err) >
						    zs[z] * w->w[g];
			}
		qsort(rows, nrows, sizeof(*rows), cmp_ex);
		for (size_t e = 0; e < nrows && e < 10; e++) {
			const struct row *w = &rows[e];

			cnt[2]++;
			ratio[2] += w->w[W_RHO] > 0 ? w->w[W_NEAR] /
			    w->w[W_RHO] : 1;
			/* Better than estimated: the error in the score's
			   direction (l2: -2 err in -distance, same sign). */
			for (int g = 0; g < NW; g++)
				for (int z = 0; z < NZ; z++)
					out[2][g][z] += w->err > zs[z] *
					    w->w[g];
		}
	}
	if (json) {
		static const char *sname[3] = { "all", "top", "true10_above" };

		printf("{\"index\":\"%s\",\"dim\":%u,\"bits\":%u,"
		    "\"metric\":\"%s\",\"queries\":%zu,\"rows\":%llu,"
		    "\"ncand\":%zu,\"z\":[1,1.5,2,2.5,3]", argv[1], dim,
		    q->bits, tq_metric_name(q->metric), nq,
		    (unsigned long long)ix->live, ncand);
		for (int set = 0; set < 3; set++) {
			printf(",\"%s\":{", sname[set]);
			for (int g = 0; g < NW; g++) {
				printf("%s\"%s\":[", g ? "," : "", g == W_RHO ?
				    "rho" : g == W_NEAR ? "near" : "global");
				for (int z = 0; z < NZ; z++)
					printf("%s%.5f", z ? "," : "",
					    100 * out[set][g][z] / cnt[set]);
				printf("]");
			}
			printf(",\"near_over_rho\":%.4f}",
			    ratio[set] / cnt[set]);
		}
		printf("}\n");
		goto done;
	}
	printf("index %s: dim %u, bits %u, metric %s, %zu queries, %llu "
	    "rows (%.0f without rho)\n", argv[1], dim, q->bits,
	    tq_metric_name(q->metric), nq, (unsigned long long)ix->live,
	    unknown / (double)nq);
	for (int set = 0; set < 3; set++) {
		printf("%-32s", set == 0 ? "all rows, outside est +- z h" :
		    set == 1 ? "best by estimate, outside" :
		    "true 10 nearest, above est + z h");
		for (int z = 0; z < NZ; z++)
			printf("  z=%-5g", zs[z]);
		printf("\n%-32s", "  normal");
		for (int z = 0; z < NZ; z++)
			printf(" %6.3f%%", set == 2 ? one[z] : two[z]);
		printf("\n");
		for (int g = 0; g < NW; g++) {
			printf("  %-30s", wname[g]);
			for (int z = 0; z < NZ; z++)
				printf(" %6.3f%%", 100 * out[set][g][z] /
				    cnt[set]);
			printf("\n");
		}
		printf("  mean hn / h: %.4f\n", ratio[set] / cnt[set]);
	}
done:
	tq_index_close(ix);
	free(qs);
	free(rq);
	free(qv);
	free(codes);
	free(rows);
	return 0;
}
