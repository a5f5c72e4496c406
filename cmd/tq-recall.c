/*
 * tq-recall - ground truth, recall of search results, and an end-to-end
 * evaluation (build, recall, latency, throughput) on a benchmark dataset.
 */
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "peers.h"
#include "plot.h"

static const char usage_str[] =
    "tq-recall --truth [-k k] [-m metric] [--threads n] [--dataset name] "
    "-o truth corpus queries\n"
    "       tq-recall [--json] results truth\n"
    "       tq-recall (--hdf5 file | --corpus file --queries file) [-b bits] "
    "[-m metric]\n"
    "                 [-s seed] [-k k] [--oversample list] [--threads n] "
    "[--no-centre]\n"
    "                 [--lists n|auto [--residual]] [--probes list] "
    "[--sweep param=list]\n"
    "                 [--recall list] [--queries-limit n] [--json] "
    "[--plot file]\n"
    "                 [--peers file] [--title text]\n"
    "       tq-recall --plot file --peers file [-k k] [--title text]";

static const char help_str[] =
    "  -b bits[,bits]        bits per coordinate of each evaluated index (def. 4)\n"
    "      --corpus file     the corpus of an evaluation\n"
    "      --dataset name    with --truth, HDF5 dataset of corpus (default train)\n"
    "  -h, --help            print this help and exit\n"
    "      --hdf5 file       evaluate on an ann-benchmarks HDF5 file\n"
    "      --json            print one JSON object instead of text\n"
    "  -k k                  neighbours of the truth or of each search (default 100)\n"
    "  -m metric             l2, ip or cosine (default l2, or the HDF5 file's)\n"
    "      --lists n|auto    fit n lists and evaluate an IVF index\n"
    "      --no-centre       evaluate a quantizer without centring\n"
    "  -o truth              the ground-truth file to write\n"
    "      --oversample list  oversampling factors or auto[:z], auto-set[:z]\n"
    "                        in turn (default 1,4)\n"
    "      --peers file      other systems' points to draw (JSON Lines)\n"
    "      --plot file       draw recall against p50 latency as SVG\n"
    "      --probes list     probes values to evaluate; needs --lists\n"
    "      --queries file    the queries of an evaluation\n"
    "      --queries-limit n  use only the first n queries (default all)\n"
    "      --recall list     evaluate tq-search --recall at these targets\n"    "      --residual        with --lists: residual codes (tq-fit --residual)\n"
    "  -s seed               rotation seed of the evaluated quantizer (default 42)\n"
    "      --sweep param=list  evaluate probes=list or oversample=list\n"
    "      --threads n       threads for brute force and searches (default 0: all)\n"
    "      --title text      the title of the plot\n"
    "      --truth           compute ground truth\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_CORPUS = 256, OPT_DATASET, OPT_HDF5, OPT_JSON, OPT_LISTS,
    OPT_NO_CENTRE, OPT_OVERSAMPLE, OPT_PEERS, OPT_PLOT, OPT_PROBES,
    OPT_QUERIES, OPT_QUERIES_LIMIT, OPT_RECALL, OPT_RESIDUAL, OPT_SWEEP,
    OPT_THREADS, OPT_TITLE, OPT_TRUTH };

static const struct option longopts[] = {
	{ "corpus",		required_argument,	NULL, OPT_CORPUS },
	{ "dataset",		required_argument,	NULL, OPT_DATASET },
	{ "hdf5",		required_argument,	NULL, OPT_HDF5 },
	{ "help",		no_argument,		NULL, 'h' },
	{ "json",		no_argument,		NULL, OPT_JSON },
	{ "lists",		required_argument,	NULL, OPT_LISTS },
	{ "no-centre",		no_argument,		NULL, OPT_NO_CENTRE },
	{ "residual",		no_argument,		NULL, OPT_RESIDUAL },
	{ "oversample",		required_argument,	NULL, OPT_OVERSAMPLE },
	{ "peers",		required_argument,	NULL, OPT_PEERS },
	{ "plot",		required_argument,	NULL, OPT_PLOT },
	{ "probes",		required_argument,	NULL, OPT_PROBES },
	{ "queries",		required_argument,	NULL, OPT_QUERIES },
	{ "queries-limit",	required_argument,	NULL, OPT_QUERIES_LIMIT },
	{ "recall",		required_argument,	NULL, OPT_RECALL },
	{ "sweep",		required_argument,	NULL, OPT_SWEEP },
	{ "threads",		required_argument,	NULL, OPT_THREADS },
	{ "title",		required_argument,	NULL, OPT_TITLE },
	{ "truth",		no_argument,		NULL, OPT_TRUTH },
	{ "version",		no_argument,		NULL, 'V' },
	{ NULL,			0,			NULL, 0 }
};

#define MAX_OVERSAMPLE	16
#define MAX_BITS	4
#define NCUT		3
static const uint32_t cutoffs[NCUT] = { 1, 10, 100 };

struct opts {
	const char *hdf5, *corpus, *queries, *dataset, *out;
	const char *plot, *peers, *title;
	const char *set[32];	/* options given, for the mode checks */
	int nset;
	enum tq_metric metric;
	int metric_set, centre, json, residual;
	unsigned bits[MAX_BITS], threads;
	int nbits;
	uint64_t seed, qlimit;
	uint32_t k;
	int k_set;
	float oversample[MAX_OVERSAMPLE];	/* TQ_OVERSAMPLE_AUTO: auto */
	float auto_z[MAX_OVERSAMPLE];		/* its z; 0: the default */
	int noversample;
	uint32_t lists;
	uint32_t probes[MAX_OVERSAMPLE];	/* 0: the library's default */
	int nprobes;
	float target[MAX_OVERSAMPLE];	/* --recall */
	int ntarget;
};

/* Sorted, deduplicated first c entries; returns how many remain. */
static size_t
sorted_set(const int64_t *v, size_t c, int64_t *out)
{
	size_t i, j, n = 0;

	for (i = 0; i < c; i++) {
		if (v[i] < 0)
			continue;	/* a missing result */
		for (j = n; j > 0 && out[j - 1] > v[i]; j--)
			out[j] = out[j - 1];
		out[j] = v[i];
		n++;
	}
	for (i = j = 0; i < n; i++)
		if (j == 0 || out[j - 1] != out[i])
			out[j++] = out[i];
	return j;
}

/* |first c of r  intersect  first c of t| */
static size_t
hits(const int64_t *r, const int64_t *t, size_t c)
{
	int64_t a[100], b[100];
	size_t na = sorted_set(r, c, a), nb = sorted_set(t, c, b);
	size_t i = 0, j = 0, h = 0;

	while (i < na && j < nb) {
		if (a[i] < b[j])
			i++;
		else if (a[i] > b[j])
			j++;
		else {
			h++;
			i++;
			j++;
		}
	}
	return h;
}

/* Adds the hits of nq rows to sum[] for each cutoff <= both widths. */
static void
add_recall(const int64_t *r, size_t wr, const int64_t *t, size_t wt,
    size_t nq, double sum[NCUT])
{
	size_t i, c;

	for (i = 0; i < nq; i++)
		for (c = 0; c < NCUT; c++)
			if (cutoffs[c] <= wr && cutoffs[c] <= wt)
				sum[c] += (double)hits(r + i * wr, t + i * wt,
				    cutoffs[c]) / cutoffs[c];
}

/* --truth ---------------------------------------------------------------- */

static struct tq_writer *writer;	/* guard_writer: aborted at exit */

/*
 * Exact top-k of the queries in the corpus, or exit naming the corpus when
 * it holds fewer than k rows.
 */
static void
exact(const char *corpus, const char *dataset, enum tq_metric m,
    const char *qname, const float *q, size_t nq, uint32_t dim, uint32_t k,
    unsigned threads, uint64_t *ids)
{
	struct tq_reader *r;
	enum tq_status st;
	float *scores = xmallocarray(nq * (size_t)k, sizeof(*scores));
	uint32_t j;

	if ((st = tq_reader_open(corpus, dataset, &r)) != TQ_OK)
		die_status(st, in_name(corpus));
	if (tq_reader_dim(r) != dim)
		die("%s: dimension %u does not match the corpus (%u)",
		    in_name(qname), dim, tq_reader_dim(r));
	if (tq_reader_count(r) >= 0 && (uint64_t)tq_reader_count(r) < k)
		die("%s: k (%u) exceeds the %lld vectors in the corpus",
		    in_name(corpus), k, (long long)tq_reader_count(r));
	st = tq_exact_search(r, m, q, nq, dim, k, threads, ids, scores);
	if (st != TQ_OK)
		die_status(st, in_name(corpus));
	for (j = 0; nq > 0 && j < k && ids[j] != UINT64_MAX; j++)
		;
	if (j < k)
		die("%s: k (%u) exceeds the %u vectors in the corpus",
		    in_name(corpus), k, j);
	tq_reader_close(r);
	free(scores);
}

static void
truth_mode(const struct opts *o, const char *corpus, const char *queries)
{
	enum tq_status st;
	uint64_t *ids;
	int32_t *row;
	uint32_t dim;
	size_t nq, i, j;
	float *q;

	if ((st = tq_read_all(queries, "test", &q, &dim, &nq)) != TQ_OK ||
	    (st = tq_check_rows(o->metric, q, nq, dim, 0)) != TQ_OK)
		die_status(st, in_name(queries));
	ids = xmallocarray(nq * (size_t)o->k, sizeof(*ids));
	exact(corpus, o->dataset, o->metric, queries, q, nq, dim, o->k,
	    o->threads, ids);
	row = xmallocarray(o->k, sizeof(*row));
	guard_writer(&writer);
	if ((st = tq_writer_open(o->out, TQ_VEC_IVECS, o->k, nq, &writer)) !=
	    TQ_OK)
		die_status(st, out_name(o->out));
	for (i = 0; i < nq; i++) {
		for (j = 0; j < o->k; j++) {
			if (ids[i * o->k + j] > INT32_MAX)
				die("%s: row %llu does not fit in ivecs (int32)",
				    in_name(corpus),
				    (unsigned long long)ids[i * o->k + j]);
			row[j] = (int32_t)ids[i * o->k + j];
		}
		if ((st = tq_writer_write_i32(writer, row, 1)) != TQ_OK)
			die_status(st, out_name(o->out));
	}
	st = tq_writer_commit(writer);
	writer = NULL;
	if (st != TQ_OK)
		die_status(st, out_name(o->out));
	free(row);
	free(ids);
	free(q);
}

/* Compare ----------------------------------------------------------------- */

#define CHUNK 1024

/* Reads up to CHUNK rows of ints as int64; returns the count. */
static size_t
read_ints(struct tq_reader *r, const char *name, int32_t *tmp, int64_t *out)
{
	enum tq_status st;
	size_t got, i, w = tq_reader_dim(r);

	if ((st = tq_reader_read_i32(r, tmp, CHUNK, &got)) != TQ_OK)
		die_status(st, in_name(name));
	for (i = 0; i < got * w; i++)
		out[i] = tmp[i];
	return got;
}

static void
compare_mode(const struct opts *o, const char *res, const char *tru)
{
	struct tq_reader *rr, *rt;
	enum tq_status st;
	double sum[NCUT] = { 0 };
	size_t wr, wt, gr, gt, c;
	uint64_t nr = 0, nt = 0;
	int32_t *tmp;
	int64_t *br, *bt;

	if ((st = tq_reader_open(res, NULL, &rr)) != TQ_OK)
		die_status(st, in_name(res));
	if ((st = tq_reader_open(tru, NULL, &rt)) != TQ_OK)
		die_status(st, in_name(tru));
	wr = tq_reader_dim(rr);
	wt = tq_reader_dim(rt);
	tmp = xmallocarray(CHUNK * (wr > wt ? wr : wt), sizeof(*tmp));
	br = xmallocarray(CHUNK * wr, sizeof(*br));
	bt = xmallocarray(CHUNK * wt, sizeof(*bt));
	for (;;) {
		gr = read_ints(rr, res, tmp, br);
		gt = read_ints(rt, tru, tmp, bt);
		add_recall(br, wr, bt, wt, gr < gt ? gr : gt, sum);
		nr += gr;
		nt += gt;
		if (gr == 0 || gt == 0)
			break;
	}
	/* Count the rest of the longer file for the message. */
	while (gr > 0)
		nr += (gr = read_ints(rr, res, tmp, br));
	while (gt > 0)
		nt += (gt = read_ints(rt, tru, tmp, bt));
	if (nr != nt)
		die("%s: %llu rows but %s has %llu", in_name(res),
		    (unsigned long long)nr, in_name(tru),
		    (unsigned long long)nt);
	if (nr == 0)
		die("%s: no rows", in_name(res));
	if (o->json) {
		printf("{\"queries\":%llu", (unsigned long long)nr);
		for (c = 0; c < NCUT; c++)
			if (cutoffs[c] <= wr && cutoffs[c] <= wt)
				printf(",\"recall_at_%u\":%.4f", cutoffs[c],
				    sum[c] / (double)nr);
		printf("}\n");
	} else {
		for (c = 0; c < NCUT; c++)
			if (cutoffs[c] <= wr && cutoffs[c] <= wt)
				printf("recall@%u %.4f\n", cutoffs[c],
				    sum[c] / (double)nr);
	}
	tq_reader_close(rr);
	tq_reader_close(rt);
	free(tmp);
	free(br);
	free(bt);
}

/* Evaluation --------------------------------------------------------------- */

static char tmpdir[PATH_MAX];

/*
 * Removes the temporary directory and what the library left in it.  Uses
 * only system calls (getdents64 rather than readdir) so that it can run
 * in a signal handler.
 */
static void
remove_tmpdir(void *arg, int in_signal)
{
	char buf[4096];
	long n, off;
	int fd;

	if (tmpdir[0] == '\0')
		return;
	if ((fd = open(tmpdir, O_RDONLY | O_DIRECTORY)) != -1) {
		while ((n = syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0)
			for (off = 0; off < n; ) {
				/* struct linux_dirent64: ino, off, reclen,
				   type, name */
				unsigned short reclen;
				const char *name = buf + off + 19;

				memcpy(&reclen, buf + off + 16, 2);
				if (strcmp(name, ".") != 0 &&
				    strcmp(name, "..") != 0)
					unlinkat(fd, name, 0);
				off += reclen;
			}
		close(fd);
	}
	rmdir(tmpdir);
	tmpdir[0] = '\0';
}

static void
make_tmpdir(void)
{
	const char *t = getenv("TMPDIR");

	if (t == NULL || t[0] == '\0')
		t = "/tmp";
	if ((size_t)snprintf(tmpdir, sizeof(tmpdir), "%s/tq-recall.XXXXXX",
	    t) >= sizeof(tmpdir))
		die("%s: TMPDIR too long", t);
	if (mkdtemp(tmpdir) == NULL) {
		tmpdir[0] = '\0';
		die_errno("%s", t);
	}
	at_cleanup(remove_tmpdir, NULL);
}

/*
 * The metric of an ann-benchmarks file: its "distance" attribute, else the
 * conventional file name (NAME-DIM-euclidean.hdf5, -angular, -dot).
 * Returns 0 if neither tells.
 */
static int
hdf5_metric(const char *path, enum tq_metric *m)
{
	char buf[64];
	const char *b = base_name(path);
	enum tq_status st;

	st = tq_hdf5_attr_string(path, "distance", buf, sizeof(buf));
	if (st == TQ_OK) {
		if (strcmp(buf, "angular") == 0)
			*m = TQ_METRIC_COSINE;
		else if (tq_metric_parse(buf, m) != TQ_OK)
			die("%s: distance '%s' is not supported", path, buf);
		return 1;
	}
	if (st != TQ_ERR_FORMAT || strncmp(tq_errdetail(), "no attr", 7) != 0)
		die_status(st, path);
	if (strstr(b, "-euclidean") != NULL)
		*m = TQ_METRIC_L2;
	else if (strstr(b, "-angular") != NULL || strstr(b, "-cosine") != NULL)
		*m = TQ_METRIC_COSINE;
	else if (strstr(b, "-dot") != NULL || strstr(b, "-ip") != NULL)
		*m = TQ_METRIC_IP;
	else
		return 0;
	return 1;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of sorted v[0..n). */
static double
percentile(const double *v, size_t n, double p)
{
	size_t i = (size_t)(p / 100.0 * (double)n + 0.999999);

	if (i < 1)
		i = 1;
	if (i > n)
		i = n;
	return v[i - 1];
}

struct run {
	unsigned bits;
	float oversample, auto_z;	/* as tq_search_params */
	uint32_t probes;
	double target;		/* --recall: the target, else 0 */
	struct tq_recall_choice ch;
	double recall[NCUT];
	double p50, p95, p99, qps;
	double reads;		/* originals read a query (batch) */
	double widened;		/* auto: passes again a query (batch) */
};

/* One oversampling value: batch throughput, recall, single-query latency. */
static void
measure(const struct tq_index *ix, const float *q, size_t nq, uint32_t dim,
    uint32_t k, const int64_t *truth, size_t tw, unsigned threads,
    struct run *run)
{
	struct tq_search_params sp;
	struct tq_search_stats stats;
	enum tq_status st;
	char os[32];
	uint64_t *ids = xmallocarray(nq * (size_t)k, sizeof(*ids));
	float *scores = xmallocarray(nq * (size_t)k, sizeof(*scores));
	int64_t *res = xmallocarray(nq * (size_t)k, sizeof(*res));
	size_t i, nlat = nq < 1000 ? nq : 1000, nwarm = nq < 20 ? nq : 20;
	double t0, *lat = xmallocarray(nlat, sizeof(*lat));

	tq_search_params_default(&sp);
	sp.k = k;
	sp.oversample = run->oversample;
	sp.auto_z = run->auto_z;
	sp.probes = run->probes;
	sp.threads = threads;
	sp.stats = &stats;
	format_oversample(os, sizeof(os), run->oversample, run->auto_z);
	progress("oversample %s, probes %u: batch search", os,
	    (unsigned)run->probes);
	t0 = now_seconds();
	if ((st = tq_search(ix, q, nq, &sp, ids, scores)) != TQ_OK)
		die_status(st, NULL);
	run->qps = (double)nq / (now_seconds() - t0);
	run->reads = (double)stats.originals_read / (double)nq;
	run->widened = (double)stats.widened / (double)nq;
	sp.stats = NULL;
	for (i = 0; i < nq * (size_t)k; i++)
		res[i] = ids[i] > INT64_MAX ? -1 : (int64_t)ids[i];
	memset(run->recall, 0, sizeof(run->recall));
	add_recall(res, k, truth, tw, nq, run->recall);
	for (i = 0; i < NCUT; i++)
		run->recall[i] /= (double)nq;

	progress("oversample %s, probes %u: latency", os,
	    (unsigned)run->probes);
	sp.threads = 1;
	for (i = 0; i < nwarm; i++)
		if ((st = tq_search(ix, q + i * dim, 1, &sp, ids, scores)) !=
		    TQ_OK)
			die_status(st, NULL);
	for (i = 0; i < nlat; i++) {
		t0 = now_seconds();
		if ((st = tq_search(ix, q + i * dim, 1, &sp, ids, scores)) !=
		    TQ_OK)
			die_status(st, NULL);
		lat[i] = (now_seconds() - t0) * 1e3;
	}
	qsort(lat, nlat, sizeof(*lat), cmp_double);
	run->p50 = percentile(lat, nlat, 50);
	run->p95 = percentile(lat, nlat, 95);
	run->p99 = percentile(lat, nlat, 99);
	free(ids);
	free(scores);
	free(res);
	free(lat);
}

/* Ground truth from the HDF5 "neighbors" dataset; NULL if it has none. */
static int64_t *
hdf5_truth(const char *path, size_t nq, size_t *width)
{
	struct tq_reader *r;
	int64_t *t, *buf;
	int32_t *tmp;
	size_t w, got, done = 0;

	if (tq_reader_open(path, "neighbors", &r) != TQ_OK)
		return NULL;
	w = tq_reader_dim(r);
	t = xmallocarray(nq * w, sizeof(*t));
	tmp = xmallocarray(CHUNK * w, sizeof(*tmp));
	buf = xmallocarray(CHUNK * w, sizeof(*buf));
	while (done < nq && (got = read_ints(r, path, tmp, buf)) > 0) {
		if (got > nq - done)
			got = nq - done;
		memcpy(t + done * w, buf, got * w * sizeof(*t));
		done += got;
	}
	if (done < nq)
		die("%s: neighbors has %zu rows for %zu queries", path, done,
		    nq);
	tq_reader_close(r);
	free(tmp);
	free(buf);
	*width = w;
	return t;
}

/* Plots ---------------------------------------------------------------- */

/*
 * The peers' series, one per system in the order of first appearance, in
 * groups 1, 2, ... after tq's group 0.  Appends to ser[*nser]; pts must
 * hold npeers points.
 */
static void
peer_series(const struct peer *pe, size_t npe, struct plot_series *ser,
    size_t *nser, struct plot_point *pts)
{
	size_t i, j, t, m = 0, first = *nser;

	for (i = 0; i < npe; i++) {
		for (j = first; j < *nser && strcmp(ser[j].name,
		    pe[i].system) != 0; j++)
			;
		if (j < *nser)
			continue;
		ser[j].name = pe[i].system;
		ser[j].group = (int)(j - first) + 1;
		ser[j].pts = pts + m;
		ser[j].n = 0;
		for (t = i; t < npe; t++)
			if (strcmp(pe[t].system, pe[i].system) == 0) {
				pts[m].x = pe[t].p50_ms;
				pts[m].y = pe[t].recall;
				pts[m].label = pe[t].setting;
				m++;
				ser[j].n++;
			}
		(*nser)++;
	}
}

/* The recall cutoff a plot of k-nearest searches shows: the largest <= k. */
static size_t
plot_cutoff(uint32_t k)
{
	size_t c = 0;

	while (c + 1 < NCUT && cutoffs[c + 1] <= k)
		c++;
	return c;
}

#define XLABEL "p50 latency per query (ms, log)"

/*
 * The evaluation's plot: a series per bit width and oversampling factor,
 * a point per probes value, then the peers.
 */
static void
eval_plot(const struct opts *o, struct out *out, const char *title,
    const struct run *runs, size_t nruns, int ivf, uint32_t k,
    const struct peer *pe, size_t npe)
{
	struct plot_series *ser = xmallocarray(nruns + npe + 1, sizeof(*ser));
	struct plot_point *pts = xmallocarray(nruns + npe + 1, sizeof(*pts));
	char (*labels)[48] = xmallocarray(nruns + 1, sizeof(*labels));
	char (*names)[48] = xmallocarray(nruns + 1, sizeof(*names));
	char ylabel[32];
	struct plot pl;
	size_t i, j, m = 0, nser = 0, c = plot_cutoff(k);

	for (i = 0; i < nruns; i++) {
		char os[32];

		format_oversample(os, sizeof(os), runs[i].oversample,
		    runs[i].auto_z);
		snprintf(names[i], sizeof(names[i]), "tq %u-bit o%s",
		    runs[i].bits, os);
		if (ivf)
			snprintf(labels[i], sizeof(labels[i]), "p%u o%s",
			    (unsigned)runs[i].probes, os);
		else
			snprintf(labels[i], sizeof(labels[i]), "o%s", os);
	}
	/* One series per name, in the order the names first come. */
	for (i = 0; i < nruns; i++) {
		for (j = 0; j < nser && strcmp(ser[j].name, names[i]) != 0;
		    j++)
			;
		if (j < nser)
			continue;
		ser[nser].name = names[i];
		ser[nser].group = 0;
		ser[nser].pts = pts + m;
		ser[nser].n = 0;
		for (j = i; j < nruns; j++)
			if (strcmp(names[j], names[i]) == 0) {
				pts[m].x = runs[j].p50;
				pts[m].y = runs[j].recall[c];
				pts[m].label = labels[j];
				m++;
				ser[nser].n++;
			}
		nser++;
	}
	peer_series(pe, npe, ser, &nser, pts + m);
	snprintf(ylabel, sizeof(ylabel), "recall@%u", cutoffs[c]);
	pl.title = o->title != NULL ? o->title : title;
	pl.xlabel = XLABEL;
	pl.ylabel = ylabel;
	pl.series = ser;
	pl.nseries = nser;
	plot_svg(out, &pl);
	out_commit(out);
	free(ser);
	free(pts);
	free(labels);
	free(names);
}

/* --plot with --peers alone: the peers' points, no evaluation. */
static void
plot_mode(const struct opts *o)
{
	struct plot_series *ser;
	struct plot_point *pts;
	struct peer *pe;
	struct plot pl;
	struct out out;
	char ylabel[32], title[PATH_MAX + 64];
	size_t npe, nser = 0, i;

	pe = peers_read(o->peers, &npe);
	ser = xmallocarray(npe, sizeof(*ser));
	pts = xmallocarray(npe, sizeof(*pts));
	peer_series(pe, npe, ser, &nser, pts);
	if (o->k_set)
		snprintf(ylabel, sizeof(ylabel), "recall@%u", o->k);
	else
		snprintf(ylabel, sizeof(ylabel), "recall");
	snprintf(title, sizeof(title), "%s: recall vs p50 latency",
	    base_name(o->peers));
	pl.title = o->title != NULL ? o->title : title;
	pl.xlabel = XLABEL;
	pl.ylabel = ylabel;
	pl.series = ser;
	pl.nseries = nser;
	out_open(&out, o->plot);
	plot_svg(&out, &pl);
	out_commit(&out);
	for (i = 0; i < npe; i++)
		peer_free(&pe[i]);
	free(pe);
	free(ser);
	free(pts);
}

/* Fits a quantizer of `bits` on the corpus and builds the index at ixpath. */
static double
build_index(const struct opts *o, const char *corpus, enum tq_metric metric,
    uint32_t dim, unsigned bits, const char *ixpath)
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *qz;
	struct tq_reader *r, *data = NULL;
	enum tq_status st;
	double t0 = now_seconds();

	progress("building %u-bit", bits);
	if ((st = tq_reader_open(corpus, "train", &r)) != TQ_OK)
		die_status(st, corpus);
	if (tq_reader_dim(r) != dim)
		die("%s: dimension %u does not match the corpus (%u)",
		    o->hdf5 ? o->hdf5 : o->queries, dim, tq_reader_dim(r));
	if ((o->centre || o->lists) &&
	    (st = tq_reader_open(corpus, "train", &data)) != TQ_OK)
		die_status(st, corpus);
	tq_fit_params_default(&fp);
	fp.dim = dim;
	fp.lists = o->lists;
	fp.no_centre = !o->centre;
	fp.residual = o->residual;
	fp.bits = bits;
	fp.metric = metric;
	fp.seed = o->seed;
	if ((st = tq_quantizer_fit(&fp, data, &qz)) != TQ_OK)
		die_status(st, corpus);
	warn_offset(qz, corpus);
	tq_reader_close(data);
	tq_build_params_default(&bp);
	bp.originals = TQ_ORIG_F32;
	bp.threads = o->threads;
	if ((st = tq_build(qz, r, NULL, &bp, ixpath)) != TQ_OK)
		die_status(st, corpus);
	tq_reader_close(r);
	tq_quantizer_free(qz);
	/* --recall: the calibration of tq-build --calibrate-sample 500. */
	if (o->ntarget > 0) {
		struct tq_calib_params cp;

		progress("calibrating %u-bit", bits);
		tq_calib_params_default(&cp);
		cp.threads = o->threads;
		if ((st = tq_index_calibrate(ixpath, &cp, NULL, ixpath)) !=
		    TQ_OK)
			die_status(st, corpus);
	}
	return now_seconds() - t0;
}

/* The cut-off of recall@k, k being 1, 10 or 100 (--recall checks it). */
static size_t
target_cut(uint32_t k)
{
	size_t c;

	for (c = 0; c + 1 < NCUT && cutoffs[c] < k; c++)
		;
	return c;
}

/* The figures of one index: a JSON object (one line) or the text table. */
static void
report(const struct opts *o, const char *corpus, enum tq_metric metric,
    uint32_t dim, size_t nq, uint32_t k, const char *truthsrc,
    unsigned bits, double build_s, const struct tq_file_info *fi,
    const struct run *runs, size_t nruns, unsigned threads)
{
	struct rusage ru;
	size_t i, c;

	getrusage(RUSAGE_SELF, &ru);
	if (o->json) {
		printf("{\"dataset\":");
		json_string(stdout, base_name(corpus));
		printf(",\"n\":%llu,\"dim\":%u,\"metric\":\"%s\",\"bits\":%u,"
		    "\"seed\":%llu,\"centred\":%s,\"residual\":%s,"
		    "\"queries\":%zu,\"k\":%u,"
		    "\"truth\":\"%s\",\"build_seconds\":%.3f,"
		    "\"bytes_per_vector\":%.1f,"
		    "\"original_bytes_per_vector\":%.1f,\"lists\":%u,"
		    "\"runs\":[",
		    (unsigned long long)fi->count, dim, tq_metric_name(metric),
		    bits, (unsigned long long)o->seed,
		    o->centre ? "true" : "false",
		    o->residual ? "true" : "false", nq, k, truthsrc, build_s,
		    fi->bytes_per_vector, fi->original_bytes_per_vector,
		    (unsigned)fi->lists);
		for (i = 0; i < nruns; i++) {
			if (runs[i].oversample < 0.0f) {
				char name[16];	/* auto or auto-set */

				format_oversample(name, sizeof(name),
				    runs[i].oversample, 0.0f);
				printf("%s{\"oversample\":\"%s\","
				    "\"auto_z\":%g", i ? "," : "", name,
				    runs[i].auto_z > 0.0f ?
				    (double)runs[i].auto_z : TQ_AUTO_Z);
			} else
				printf("%s{\"oversample\":%g", i ? "," : "",
				    (double)runs[i].oversample);
			printf(",\"probes\":%u", (unsigned)runs[i].probes);
			if (runs[i].target > 0)
				printf(",\"recall_target\":%g,"
				    "\"calibrated_recall\":%.4f,"
				    "\"recall_reached\":%s,"
				    "\"delivered_minus_target\":%.4f",
				    runs[i].target, runs[i].ch.recall,
				    runs[i].ch.reached ? "true" : "false",
				    runs[i].recall[target_cut(k)] -
				    runs[i].target);
			for (c = 0; c < NCUT; c++)
				if (cutoffs[c] <= k)
					printf(",\"recall_at_%u\":%.4f",
					    cutoffs[c], runs[i].recall[c]);
				else
					printf(",\"recall_at_%u\":null",
					    cutoffs[c]);
			printf(",\"originals_read_per_query\":%.2f",
			    runs[i].reads);
			if (runs[i].oversample < 0.0f)
				printf(",\"widened_per_query\":%.4f",
				    runs[i].widened);
			printf(",\"p50_ms\":%.4f,\"p95_ms\":%.4f,"
			    "\"p99_ms\":%.4f,\"qps\":%.1f,\"threads\":%u}",
			    runs[i].p50, runs[i].p95, runs[i].p99, runs[i].qps,
			    threads);
		}
		printf("],\"peak_rss_kb\":%ld,\"kernel\":\"%s\"}\n",
		    ru.ru_maxrss, tq_kernel_name());
		return;
	}
	printf("%s: %llu x %u %s, %zu queries, %u-bit, %s%s\n",
	    base_name(corpus), (unsigned long long)fi->count, dim,
	    tq_metric_name(metric), nq, bits,
	    o->centre ? "centred" : "not centred",
	    o->residual ? ", residual" : "");
	printf("build %.1f s, %.1f bytes/vector (+%.0f originals), "
	    "truth %s, k %u", build_s, fi->bytes_per_vector,
	    fi->original_bytes_per_vector, truthsrc, k);
	if (fi->lists > 0)
		printf(", %u lists", (unsigned)fi->lists);
	printf("\n%s", fi->lists > 0 ? "probes  " : "");
	printf("oversample  recall@1  recall@10  recall@100   reads  p50_ms  "
	    "p95_ms  p99_ms       qps\n");
	for (i = 0; i < nruns; i++) {
		char os[32];

		if (fi->lists > 0)
			printf("%6u  ", (unsigned)runs[i].probes);
		format_oversample(os, sizeof(os), runs[i].oversample,
		    runs[i].auto_z);
		printf("%10s", os);
		for (c = 0; c < NCUT; c++)
			if (cutoffs[c] <= k)
				printf("  %*.4f", c == 0 ? 8 : c == 1 ?
				    9 : 10, runs[i].recall[c]);
			else
				printf("  %*s", c == 0 ? 8 : c == 1 ?
				    9 : 10, "-");
		printf("  %6.1f  %6.3f  %6.3f  %6.3f  %8.0f\n", runs[i].reads,
		    runs[i].p50, runs[i].p95, runs[i].p99, runs[i].qps);
		if (runs[i].target > 0)
			printf("  --recall %g: recall@%u %.4f, calibrated "
			    "%.4f, delivered - target %+.4f%s\n",
			    runs[i].target, k, runs[i].recall[target_cut(k)],
			    runs[i].ch.recall, runs[i].recall[target_cut(k)] -
			    runs[i].target, runs[i].ch.reached ? "" :
			    " (not reached in calibration)");
	}
	printf("peak RSS %ld MB, kernel %s, %u threads\n",
	    ru.ru_maxrss / 1024, tq_kernel_name(), threads);
}

static void
eval_mode(const struct opts *o)
{
	struct tq_file_info fi;
	struct tq_index *ix;
	struct run *runs;
	struct peer *pe = NULL;
	struct out plot;
	size_t nruns, per, npe = 0;
	enum tq_status st;
	const char *corpus = o->hdf5 ? o->hdf5 : o->corpus;
	const char *queries = o->hdf5 ? o->hdf5 : o->queries;
	const char *truthsrc = "exact";
	char ixpath[PATH_MAX + 16], title[PATH_MAX + 128];
	enum tq_metric metric, fmetric;
	unsigned threads = o->threads;
	int known, use_neighbors = 0, b;
	uint32_t dim, k = 0;
	size_t nq, tw = 0, i;
	uint64_t *ids;
	int64_t *truth = NULL;
	double build_s;
	float *q;

	/*
	 * The corpus is read for each build, the centre and the exact truth:
	 * a pipe would be empty the second time.
	 */
	{
		struct stat sb;

		if (strcmp(corpus, "-") == 0 || (stat(corpus, &sb) == 0 &&
		    !S_ISREG(sb.st_mode)))
			die("%s: --corpus is read more than once: it needs a "
			    "file, not a pipe or standard input",
			    in_name(corpus));
	}
	/* The file's neighbours are only the truth for the file's metric. */
	metric = o->metric;
	if (o->hdf5 != NULL) {
		known = hdf5_metric(o->hdf5, &fmetric);
		if (!known && !o->metric_set)
			die("%s: no distance attribute; give -m", o->hdf5);
		if (!o->metric_set)
			metric = fmetric;
		use_neighbors = known && fmetric == metric;
	}
	if (threads == 0) {
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		threads = ncpu > 0 ? (unsigned)ncpu : 1;
	}
	/* The peers and the plot's file first: no hour of work for a typo. */
	if (o->peers != NULL)
		pe = peers_read(o->peers, &npe);
	if (o->plot != NULL)
		out_open(&plot, o->plot);
	progress("reading queries");
	if ((st = tq_read_all(queries, "test", &q, &dim, &nq)) != TQ_OK ||
	    (st = tq_check_rows(metric, q, nq, dim, 0)) != TQ_OK)
		die_status(st, in_name(queries));
	if (o->qlimit > 0 && nq > o->qlimit)
		nq = (size_t)o->qlimit;
	if (nq == 0)
		die("%s: no queries", queries);

	make_tmpdir();
	/* Every bit width, probes value and oversampling value. */
	per = o->ntarget > 0 ? (size_t)o->ntarget :
	    (size_t)o->noversample * (size_t)o->nprobes;
	nruns = per * (size_t)o->nbits;
	runs = xmallocarray(nruns, sizeof(*runs));
	for (b = 0; b < o->nbits; b++) {
		struct run *br = runs + (size_t)b * per;

		snprintf(ixpath, sizeof(ixpath), "%s/index-%d.tq", tmpdir, b);
		build_s = build_index(o, corpus, metric, dim, o->bits[b],
		    ixpath);
		if ((st = tq_file_info(ixpath, &fi)) != TQ_OK ||
		    (st = tq_index_open(ixpath, &ix)) != TQ_OK)
			die_status(st, ixpath);
		if (b == 0) {
			k = o->k;
			if (k > fi.count)
				k = (uint32_t)fi.count;
			if (use_neighbors && (truth = hdf5_truth(o->hdf5, nq,
			    &tw)) != NULL)
				truthsrc = "neighbors";
			if (truth == NULL) {
				progress("ground truth");
				ids = xmallocarray(nq * (size_t)k,
				    sizeof(*ids));
				exact(corpus, "train", metric, queries, q, nq,
				    dim, k, o->threads, ids);
				truth = xmallocarray(nq * (size_t)k,
				    sizeof(*truth));
				for (i = 0; i < nq * (size_t)k; i++)
					truth[i] = (int64_t)ids[i];
				free(ids);
				tw = k;
			}
			if (k > tw)
				k = (uint32_t)tw;
		}
		for (i = 0; i < per; i++) {
			uint32_t pr = o->probes[i / (size_t)o->noversample];

			if (o->ntarget > 0) {
				br[i].bits = o->bits[b];
				br[i].target = o->target[i];
				if ((st = tq_index_recall_choose(ix, k,
				    o->target[i], &br[i].ch)) != TQ_OK)
					die_status(st, ixpath);
				br[i].oversample = br[i].ch.oversample;
				br[i].auto_z = 0.0f;
				br[i].probes = br[i].ch.probes;
				measure(ix, q, nq, dim, k, truth, tw,
				    o->threads, &br[i]);
				continue;
			}
			br[i].target = 0;
			br[i].bits = o->bits[b];
			br[i].oversample =
			    o->oversample[i % (size_t)o->noversample];
			br[i].auto_z = o->auto_z[i % (size_t)o->noversample];
			br[i].probes = fi.lists == 0 ? 0 : pr == 0 ?
			    (fi.lists + TQ_PROBES_AUTO_DIV - 1) /
			    TQ_PROBES_AUTO_DIV : pr > fi.lists ? fi.lists : pr;
			measure(ix, q, nq, dim, k, truth, tw, o->threads,
			    &br[i]);
		}
		progress_done();
		report(o, corpus, metric, dim, nq, k, truthsrc, o->bits[b],
		    build_s, &fi, br, per, threads);
		tq_index_close(ix);
		unlink(ixpath);
	}
	if (o->plot != NULL) {
		snprintf(title, sizeof(title), "%s: %llu x %u %s%s%.0u%s, "
		    "%zu queries, k=%u", base_name(corpus),
		    (unsigned long long)fi.count, dim, tq_metric_name(metric),
		    fi.lists > 0 ? ", IVF " : "", (unsigned)fi.lists,
		    fi.lists > 0 ? " lists" : "", nq, k);
		eval_plot(o, &plot, title, runs, nruns, fi.lists > 0, k, pe,
		    npe);
	}
	for (i = 0; i < npe; i++)
		peer_free(&pe[i]);
	free(pe);
	free(runs);
	free(truth);
	free(q);
}

/* Options -------------------------------------------------------------- */

/* --recall 0.9,0.95,0.99 */
static void
parse_targets(struct opts *o, const char *s)
{
	char buf[64];
	const char *p = s;

	o->ntarget = 0;
	while (*p != '\0') {
		size_t n = strcspn(p, ",");

		if (n == 0 || n >= sizeof(buf) || o->ntarget == MAX_OVERSAMPLE)
			usage_error("recall '%s': a list of at most %d "
			    "targets", s, MAX_OVERSAMPLE);
		memcpy(buf, p, n);
		buf[n] = '\0';
		o->target[o->ntarget] = parse_float(buf, 0, 1, "recall");
		if (o->target[o->ntarget] <= 0)
			usage_error("recall '%s' out of range: 0 < R <= 1",
			    buf);
		o->ntarget++;
		p += n;
		if (*p == ',')
			p++;
	}
}

static void
given(struct opts *o, const char *name)
{
	if (o->nset < 32)
		o->set[o->nset++] = name;
}

static void
parse_over_list(struct opts *o, const char *s)
{
	char buf[256], *p = buf, *tok;

	if (strlen(s) >= sizeof(buf))
		usage_error("oversample list '%s' too long", s);
	strcpy(buf, s);
	o->noversample = 0;
	while ((tok = strsep(&p, ",")) != NULL) {
		if (o->noversample == MAX_OVERSAMPLE)
			usage_error("more than %d oversample values",
			    MAX_OVERSAMPLE);
		parse_oversample(tok, &o->oversample[o->noversample],
		    &o->auto_z[o->noversample]);
		o->noversample++;
	}
}

/* -b: one bit width or a comma-separated list of them. */
static void
parse_bits(struct opts *o, const char *s)
{
	char buf[64], *p = buf, *tok;

	if (strlen(s) >= sizeof(buf))
		usage_error("bits list '%s' too long", s);
	strcpy(buf, s);
	o->nbits = 0;
	while ((tok = strsep(&p, ",")) != NULL) {
		if (o->nbits == MAX_BITS)
			usage_error("more than %d bits values", MAX_BITS);
		o->bits[o->nbits++] = parse_u32(tok, 1, 4, "bits");
	}
}

static void
parse_probes(struct opts *o, const char *s)
{
	char buf[256], *p = buf, *tok;

	if (strlen(s) >= sizeof(buf))
		usage_error("probes list '%s' too long", s);
	strcpy(buf, s);
	o->nprobes = 0;
	while ((tok = strsep(&p, ",")) != NULL) {
		if (o->nprobes == MAX_OVERSAMPLE)
			usage_error("more than %d probes values",
			    MAX_OVERSAMPLE);
		o->probes[o->nprobes++] = parse_u32(tok, 1, UINT32_MAX,
		    "probes");
	}
}

/* --sweep probes=LIST or oversample=LIST. */
static void
parse_sweep(struct opts *o, const char *s)
{
	if (strncmp(s, "probes=", 7) == 0) {
		parse_probes(o, s + 7);
		given(o, "--probes");
	} else if (strncmp(s, "oversample=", 11) == 0) {
		parse_over_list(o, s + 11);
		given(o, "--oversample");
	} else
		usage_error("--sweep takes probes=LIST or oversample=LIST, not "
		    "'%s'", s);
}

/* Was option `name` given? */
static int
has(const struct opts *o, const char *name)
{
	for (int i = 0; i < o->nset; i++)
		if (strcmp(o->set[i], name) == 0)
			return 1;
	return 0;
}

/*
 * Usage error if an option outside `allowed` (names between spaces, with a
 * space at each end) was given.
 */
static void
only(const struct opts *o, const char *allowed, const char *mode)
{
	char word[32];
	int i;

	for (i = 0; i < o->nset; i++) {
		snprintf(word, sizeof(word), " %s ", o->set[i]);
		if (strstr(allowed, word) == NULL)
			usage_error("%s does not apply %s", o->set[i], mode);
	}
}

static void
operands(int argc, char **argv, const char *missing)
{
	if (argc < 2)
		usage_error("%s", missing);
	if (argc > 2)
		usage_error("unexpected argument '%s'", argv[2]);
}



int
main(int argc, char *argv[])
{
	struct opts o;
	int ch, truth = 0;

	cmd_init(argv, usage_str, help_str);
	memset(&o, 0, sizeof(o));
	o.bits[0] = 4;
	o.nbits = 1;
	o.seed = 42;
	o.k = 100;
	o.centre = 1;
	o.metric = TQ_METRIC_L2;
	o.dataset = "train";
	o.oversample[0] = 1;
	o.oversample[1] = 4;
	o.noversample = 2;
	o.nprobes = 1;
	while ((ch = getopt_long(argc, argv, "b:hk:m:o:s:V", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'b':
			parse_bits(&o, optarg);
			given(&o, "-b");
			break;
		case 'h':
			usage_help();
		case 'k':
			o.k = parse_u32(optarg, 1, 1000000, "k");
			o.k_set = 1;
			given(&o, "-k");
			break;
		case 'm':
			o.metric = parse_metric(optarg);
			o.metric_set = 1;
			given(&o, "-m");
			break;
		case 'o':
			o.out = optarg;
			given(&o, "-o");
			break;
		case 's':
			o.seed = parse_u64(optarg, 0, UINT64_MAX, "seed");
			given(&o, "-s");
			break;
		case 'V':
			print_version();
		case OPT_CORPUS:
			o.corpus = optarg;
			given(&o, "--corpus");
			break;
		case OPT_DATASET:
			o.dataset = optarg;
			given(&o, "--dataset");
			break;
		case OPT_HDF5:
			o.hdf5 = optarg;
			given(&o, "--hdf5");
			break;
		case OPT_JSON:
			o.json = 1;
			given(&o, "--json");
			break;
		case OPT_LISTS:
			o.lists = strcmp(optarg, "auto") == 0 ? TQ_LISTS_AUTO :
			    parse_u32(optarg, 1, TQ_MAX_LISTS, "lists");
			given(&o, "--lists");
			break;
		case OPT_NO_CENTRE:
			o.centre = 0;
			given(&o, "--no-centre");
			break;
		case OPT_RESIDUAL:
			o.residual = 1;
			given(&o, "--residual");
			break;
		case OPT_OVERSAMPLE:
			parse_over_list(&o, optarg);
			given(&o, "--oversample");
			break;
		case OPT_PEERS:
			o.peers = optarg;
			given(&o, "--peers");
			break;
		case OPT_PLOT:
			o.plot = optarg;
			given(&o, "--plot");
			break;
		case OPT_PROBES:
			parse_probes(&o, optarg);
			given(&o, "--probes");
			break;
		case OPT_RECALL:
			parse_targets(&o, optarg);
			given(&o, "--recall");
			break;
		case OPT_SWEEP:
			parse_sweep(&o, optarg);
			break;
		case OPT_QUERIES:
			o.queries = optarg;
			given(&o, "--queries");
			break;
		case OPT_QUERIES_LIMIT:
			o.qlimit = parse_u64(optarg, 1, UINT64_MAX,
			    "queries-limit");
			given(&o, "--queries-limit");
			break;
		case OPT_THREADS:
			o.threads = parse_u32(optarg, 0, 1024, "threads");
			given(&o, "--threads");
			break;
		case OPT_TITLE:
			o.title = optarg;
			given(&o, "--title");
			break;
		case OPT_TRUTH:
			truth = 1;
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	check_output(o.out);

	if (truth) {
		only(&o, " -k -m --threads --dataset -o ", "to --truth");
		if (o.out == NULL)
			usage_error("-o is required with --truth");
		operands(argc, argv, "missing corpus or queries");
		truth_mode(&o, argv[0], argv[1]);
	} else if (o.hdf5 != NULL || o.corpus != NULL || o.queries != NULL) {
		only(&o, " -b -m -s -k --oversample --threads --no-centre "
		    "--queries-limit --json --hdf5 --corpus --queries --lists "
		    "--residual --probes --plot --peers --title --recall ",
		    "to an evaluation");
		if (o.ntarget > 0 && (has(&o, "--oversample") ||
		    has(&o, "--probes") || o.plot != NULL))
			usage_error("--recall chooses probes and oversample: "
			    "no --oversample, --probes, --sweep or --plot");
		if (o.ntarget > 0 && o.k != 1 && o.k != 10 && o.k != 100)
			usage_error("--recall needs -k 1, 10 or 100");
		if ((o.peers != NULL || o.title != NULL) && o.plot == NULL)
			usage_error("%s needs --plot", o.peers != NULL ?
			    "--peers" : "--title");
		if (o.nprobes > 0 && o.probes[0] != 0 && o.lists == 0)
			usage_error("--probes needs --lists");
		if (o.residual && o.lists == 0)
			usage_error("--residual needs --lists");
		if (o.hdf5 != NULL && (o.corpus != NULL || o.queries != NULL))
			usage_error("--hdf5 cannot be used with --corpus or "
			    "--queries");
		if (o.hdf5 == NULL && (o.corpus == NULL || o.queries == NULL))
			usage_error("--corpus and --queries go together");
		if (argc > 0)
			usage_error("unexpected argument '%s'", argv[0]);
		eval_mode(&o);
	} else if (o.plot != NULL) {
		only(&o, " --plot --peers --title -k ", "to a plot of peers");
		if (o.peers == NULL)
			usage_error("--plot needs --peers or an evaluation");
		if (argc > 0)
			usage_error("unexpected argument '%s'", argv[0]);
		plot_mode(&o);
	} else {
		only(&o, " --json ", "to a comparison");
		operands(argc, argv, "missing results or truth");
		compare_mode(&o, argv[0], argv[1]);
	}
	finish_stdout();
	return 0;
}
