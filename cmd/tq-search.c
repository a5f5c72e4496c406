/* tq-search - k nearest neighbours of queries in a TurboQuant index. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "labels.h"

static const char usage_str[] =
    "tq-search [-k k] [-i queries | --like-file file] [-o output]\n"
    "                 [--oversample f|auto[-set][:z]] [--threads n]\n"
    "                 [--batch n] [--format tsv|json|ivecs] [--dataset name]\n"
    "                 [--allow ids] [--radius r] [--probes n] [--recall R]\n"
    "                 [--labels] [--include-self] [--stats[=batch]] index\n"
    "       tq-search --like [-k k] [-o output]\n"
    "                 [--oversample f|auto[-set][:z]] [--threads n]\n"
    "                 [--format tsv|json|ivecs] [--allow ids] [--radius r]\n"
    "                 [--probes n] [--recall R] [--include-self]\n"
    "                 [--stats[=batch]] index label ...";

static const char help_str[] =
    "      --allow ids       return only vectors whose id is in this file\n"
    "      --dataset name    HDF5 dataset of the queries (default test)\n"
    "      --format tsv|json|ivecs  the output format (default tsv)\n"
    "  -h, --help            print this help and exit\n"
    "  -i queries            the query vectors (default -: stdin)\n"
    "      --include-self    --like: return the query's own row too\n"
    "  -k k                  results per query (default 10)\n"
    "      --labels          print each result's label too\n"
    "      --like            the queries are the rows of the labels given\n"
    "      --like-file file  the same, the labels one a line in file\n"
    "  -o output             where to write the results (default -: stdout)\n"
    "      --oversample f    re-rank k*f candidates exactly (default 1: none);\n"
    "                        auto[:z]: as few as the error bound allows at\n"
    "                        confidence z (0.5 to 10, default 2);\n"
    "                        auto-set[:z]: the same, results the bound\n"
    "                        settles left unread (estimated, in that order)\n"
    "      --probes n        IVF: lists scanned per query (default lists/16)\n"
    "      --radius r        range search: every vector within r of each query\n"
    "      --recall R        choose --probes and --oversample for recall@k R\n"
    "                        from the index's calibration (0 < R <= 1)\n"
    "      --stats           one JSON line of counts and times on stderr\n"
    "                        of the run (--stats=batch: one per batch)\n"
    "      --threads n       search threads, at most 1024 (default 0: all cores)\n"
    "      --batch n         queries searched at a time, 1 to 65536 (default 4096)\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_ALLOW = 256, OPT_BATCH, OPT_DATASET, OPT_FORMAT, OPT_OVERSAMPLE,
    OPT_PROBES, OPT_RADIUS, OPT_RECALL, OPT_STATS, OPT_THREADS, OPT_INCLUDE_SELF,
    OPT_LABELS, OPT_LIKE, OPT_LIKE_FILE };

static const struct option longopts[] = {
	{ "allow",	required_argument,	NULL, OPT_ALLOW },
	{ "batch",	required_argument,	NULL, OPT_BATCH },
	{ "dataset",	required_argument,	NULL, OPT_DATASET },
	{ "format",	required_argument,	NULL, OPT_FORMAT },
	{ "help",	no_argument,		NULL, 'h' },
	{ "include-self", no_argument,		NULL, OPT_INCLUDE_SELF },
	{ "labels",	no_argument,		NULL, OPT_LABELS },
	{ "like",	no_argument,		NULL, OPT_LIKE },
	{ "like-file",	required_argument,	NULL, OPT_LIKE_FILE },
	{ "oversample",	required_argument,	NULL, OPT_OVERSAMPLE },
	{ "probes",	required_argument,	NULL, OPT_PROBES },
	{ "radius",	required_argument,	NULL, OPT_RADIUS },
	{ "recall",	required_argument,	NULL, OPT_RECALL },
	{ "stats",	optional_argument,	NULL, OPT_STATS },
	{ "threads",	required_argument,	NULL, OPT_THREADS },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};


/*
 * Queries per call of tq_search() by default: enough to keep the threads
 * busy and share each pass over the codes among many queries, few enough
 * that the results of one batch stay within 2^24 slots.  --batch 1 answers
 * each query as soon as it is read (for queries arriving on a pipe).
 */
#define BATCH 4096
#define MAX_SLOTS (1u << 24)

/* --labels, --like: the index whose labels are printed, else NULL. */
static const struct tq_index *label_ix;
static const char *label_path;

/*
 * --like without --include-self: the query's own row (self[i]) leaves
 * its results, which were searched for one more than `k`; at most k stay.
 */
static void
drop_self(uint64_t *ids, float *scores, const size_t *off, size_t *len,
    size_t nq, const uint64_t *self, size_t k)
{
	for (size_t i = 0; i < nq; i++) {
		uint64_t *id = ids + off[i];
		float *sc = scores + off[i];

		for (size_t j = 0; j < len[i]; j++)
			if (id[j] == self[i]) {
				memmove(id + j, id + j + 1,
				    (len[i] - j - 1) * sizeof(*id));
				memmove(sc + j, sc + j + 1,
				    (len[i] - j - 1) * sizeof(*sc));
				len[i]--;
				break;
			}
		if (len[i] > k)
			len[i] = k;
	}
}

/*
 * Writes the results of nq queries: query i has n[i] results at ids +
 * off[i], of which the first len[i] are real (the rest are padding of a
 * filtered search: left out of tsv and json, -1 in ivecs).
 */
static void
write_results(struct out *o, enum result_format fmt, uint64_t q0, size_t nq,
    const size_t *off, const size_t *cnt, const size_t *len,
    const uint64_t *ids, const float *scores, uint8_t **buf, size_t *bufcap)
{
	size_t i, j;

	for (i = 0; i < nq; i++) {
		const uint64_t *id = ids + off[i];
		const float *sc = scores + off[i];
		size_t k = len[i];

		switch (fmt) {
		case FMT_TSV:
			for (j = 0; j < k; j++)
			{
				out_printf(o, "%llu\t%zu\t%llu\t%.9g",
				    (unsigned long long)(q0 + i), j + 1,
				    (unsigned long long)id[j], (double)sc[j]);
				if (label_ix != NULL) {
					out_write(o, "\t", 1);
					label_tsv(o, label_ix, label_path, id[j]);
				}
				out_write(o, "\n", 1);
			}
			break;
		case FMT_JSON:
			out_printf(o, "{\"query\":%llu,\"ids\":[",
			    (unsigned long long)(q0 + i));
			for (j = 0; j < k; j++)
				out_printf(o, "%s%llu", j ? "," : "",
				    (unsigned long long)id[j]);
			out_printf(o, "],\"scores\":[");
			for (j = 0; j < k; j++)
				out_printf(o, "%s%.9g", j ? "," : "",
				    (double)sc[j]);
			if (label_ix != NULL) {
				out_printf(o, "],\"labels\":[");
				for (j = 0; j < k; j++) {
					if (j > 0)
						out_write(o, ",", 1);
					label_json(o, label_ix, label_path,
					    id[j]);
				}
			}
			out_printf(o, "]}\n");
			break;
		case FMT_IVECS:
			k = cnt[i];
			if (4 + 4 * k > *bufcap) {
				free(*buf);
				*bufcap = 4 + 4 * k;
				*buf = xmallocarray(*bufcap, 1);
			}
			if (k > INT32_MAX)
				die("%s: %zu results do not fit in ivecs",
				    out_name(o->path), k);
			put_le32(*buf, (uint32_t)k);
			for (j = 0; j < k; j++) {
				if (j >= len[i]) {
					put_le32(*buf + 4 + 4 * j, UINT32_MAX);
					continue;
				}
				if (id[j] > INT32_MAX)
					die("%s: id %llu does not fit in ivecs "
					    "(int32)", out_name(o->path),
					    (unsigned long long)id[j]);
				put_le32(*buf + 4 + 4 * j, (uint32_t)id[j]);
			}
			out_write(o, *buf, 4 + 4 * k);
			break;
		}
	}
}

/* Adds the stats of one call to a running total. */
static void
stats_add(struct tq_search_stats *a, const struct tq_search_stats *b)
{
	a->queries += b->queries;
	a->lists_probed += b->lists_probed;
	a->rows_scanned += b->rows_scanned;
	a->candidates += b->candidates;
	a->refined += b->refined;
	a->reranked += b->reranked;
	a->originals_read += b->originals_read;
	a->originals_bytes += b->originals_bytes;
	a->results += b->results;
	a->widened += b->widened;
	a->t_prepare += b->t_prepare;
	a->t_tables += b->t_tables;
	a->t_scan += b->t_scan;
	a->t_refine += b->t_refine;
	a->t_rerank += b->t_rerank;
}

/*
 * The --stats line (tq-search(1) documents each field): batch is the
 * batch's number from 0, or -1 for the whole run; wall the seconds spent
 * in the search calls.
 */
/* --recall: the target, and what the calibration chose for it. */
static double recall_target;
static struct tq_recall_choice chosen;
static int calib_stale;

static void
stats_print(const struct tq_search_stats *a, long long batch, double wall)
{
	if (batch >= 0)
		fprintf(stderr, "{\"batch\":%lld,", batch);
	else
		fputc('{', stderr);
	if (recall_target > 0)
		fprintf(stderr, "\"recall_target\":%g,\"recall_k\":%u,"
		    "\"probes\":%u,\"oversample\":%g,"
		    "\"calibrated_recall\":%.4f,\"calibrated_se\":%.4f,"
		    "\"recall_reached\":%s,\"calibration_stale\":%s,",
		    recall_target, (unsigned)chosen.k, (unsigned)chosen.probes,
		    (double)chosen.oversample, chosen.recall, chosen.se,
		    chosen.reached ? "true" : "false",
		    calib_stale ? "true" : "false");
	fprintf(stderr, "\"queries\":%llu,\"lists_probed\":%llu,"
	    "\"rows_scanned\":%llu,\"candidates\":%llu,\"refined\":%llu,"
	    "\"reranked\":%llu,\"originals_read\":%llu,"
	    "\"originals_bytes\":%llu,\"results\":%llu,\"widened\":%llu,"
	    "\"t_prepare\":%.6f,\"t_tables\":%.6f,\"t_scan\":%.6f,"
	    "\"t_refine\":%.6f,\"t_rerank\":%.6f,\"t_wall\":%.6f}\n",
	    (unsigned long long)a->queries,
	    (unsigned long long)a->lists_probed,
	    (unsigned long long)a->rows_scanned,
	    (unsigned long long)a->candidates,
	    (unsigned long long)a->refined,
	    (unsigned long long)a->reranked,
	    (unsigned long long)a->originals_read,
	    (unsigned long long)a->originals_bytes,
	    (unsigned long long)a->results,
	    (unsigned long long)a->widened, a->t_prepare, a->t_tables,
	    a->t_scan, a->t_refine, a->t_rerank, wall);
}

/*
 * --recall: the cheapest calibrated setting that reaches the target
 * (tq_index_recall_choose), or the best one with a warning.
 */
static void
choose_setting(const struct tq_index *ix, const char *path,
    struct tq_search_params *sp)
{
	struct tq_calib_info ci;
	enum tq_status st;

	if ((st = tq_index_calib_info(ix, &ci)) != TQ_OK)
		die_status(st, path);
	if (!ci.present)
		die("%s: no calibration for --recall: make one with tq-build "
		    "--recalibrate (it needs originals)", path);
	if ((st = tq_index_recall_choose(ix, sp->k, recall_target,
	    &chosen)) != TQ_OK)
		die_status(st, path);
	calib_stale = ci.stale;
	if (ci.stale)
		warnmsg("warning: %s: the calibration was made at %llu live rows, the "
		    "index has %llu now: recalibrate with tq-build "
		    "--recalibrate", path, (unsigned long long)ci.live,
		    (unsigned long long)tq_index_live(ix));
	if (!chosen.reached)
		warnmsg("warning: %s: --recall %g: the calibration reaches recall@%u "
		    "%.4f at most; searching with that setting", path,
		    recall_target, (unsigned)chosen.k, chosen.recall);
	sp->probes = chosen.probes;
	sp->oversample = chosen.oversample;
}

/* A radius: a decimal number, negative allowed (ip, cosine). */
static float
parse_radius(const char *s)
{
	if (s[0] == '-')
		return -parse_float(s + 1, 0, 3.4e38f, "radius");
	return parse_float(s, 0, 3.4e38f, "radius");
}

int
main(int argc, char *argv[])
{
	struct tq_search_params sp;
	struct tq_filter *allow = NULL;
	struct tq_index *ix;
	struct tq_reader *r = NULL;
	static struct like lk;	/* static: see the buffers below */
	struct out o;
	const char *in = "-", *outpath = "-", *dataset = "test", *ixpath;
	const char *allowpath = NULL, *likepath = NULL;
	enum result_format fmt = FMT_TSV;
	enum tq_status st;
	uint64_t nq = 0, avail;
	uint32_t dim;
	size_t batch = BATCH, got, i, bufcap;
	float radius = 0;
	/*
	 * Static, so that the buffers stay reachable when a failure exits
	 * from the middle of the loop (no leak reports under LeakSanitizer).
	 */
	static uint64_t *ids;
	static size_t *off, *cnt, *len;
	static float *queries, *scores;
	static uint8_t *buf;
	int ch, kset = 0, range = 0, iset = 0, labels = 0, like = 0;
	int self = 0, stats = 0, knob = 0;
	uint32_t k;
	struct tq_search_stats bst, total;
	double wall = 0, t0;
	long long nbatch = 0;

	cmd_init(argv, usage_str, help_str);
	tq_search_params_default(&sp);
	sp.k = 10;
	sp.oversample = 1;
	while ((ch = getopt_long(argc, argv, "hi:k:o:V", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage_help();
		case 'i':
			in = optarg;
			iset = 1;
			break;
		case 'k':
			sp.k = parse_u32(optarg, 1, 1000000, "k");
			kset = 1;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'V':
			print_version();
		case OPT_ALLOW:
			allowpath = optarg;
			break;
		case OPT_BATCH:
			batch = parse_u32(optarg, 1, 65536, "batch");
			break;
		case OPT_DATASET:
			dataset = optarg;
			break;
		case OPT_FORMAT:
			fmt = parse_result_format(optarg);
			break;
		case OPT_INCLUDE_SELF:
			self = 1;
			break;
		case OPT_LABELS:
			labels = 1;
			break;
		case OPT_LIKE:
			like = 1;
			break;
		case OPT_LIKE_FILE:
			likepath = optarg;
			break;
		case OPT_OVERSAMPLE:
			knob = 1;
			parse_oversample(optarg, &sp.oversample, &sp.auto_z);
			break;
		case OPT_PROBES:
			knob = 1;
			sp.probes = parse_u32(optarg, 1, UINT32_MAX, "probes");
			break;
		case OPT_RADIUS:
			radius = parse_radius(optarg);
			range = 1;
			break;
		case OPT_RECALL:
			recall_target = parse_float(optarg, 0, 1, "recall");
			if (recall_target <= 0)
				usage_error("recall '%s' out of range: 0 < R "
				    "<= 1", optarg);
			break;
		case OPT_STATS:
			if (optarg == NULL)
				stats = 1;
			else if (strcmp(optarg, "batch") == 0)
				stats = 2;
			else
				usage_error("--stats takes no value or =batch, "
				    "not '%s'", optarg);
			break;
		case OPT_THREADS:
			sp.threads = parse_u32(optarg, 0, 1024, "threads");
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	check_output(outpath);
	if (argc < 1)
		usage_error("missing index");
	if (like && likepath != NULL)
		usage_error("--like and --like-file: one or the other");
	if (recall_target > 0 && knob)
		usage_error("--recall chooses --probes and --oversample: give "
		    "one or the other");
	if (recall_target > 0 && range)
		usage_error("--recall goes with k-nearest searches, not "
		    "--radius");
	if ((like || likepath != NULL) && iset)
		usage_error("--like and --like-file take the queries from the "
		    "index: no -i");
	if (self && !like && likepath == NULL)
		usage_error("--include-self goes with --like or --like-file");
	if (like && argc < 2)
		usage_error("--like needs at least one label after the index");
	if (!like && argc > 1)
		usage_error("unexpected argument '%s'", argv[1]);
	ixpath = argv[0];

	if ((st = tq_index_open(ixpath, &ix)) != TQ_OK)
		die_status(st, ixpath);
	dim = tq_quantizer_dim(tq_index_quantizer(ix));
	avail = tq_index_live(ix);
	if (!range && sp.k > avail)
		die("%s: k (%u) exceeds the %llu vectors in the index", ixpath,
		    sp.k, (unsigned long long)avail);
	if (recall_target > 0)
		choose_setting(ix, ixpath, &sp);
	if ((sp.oversample > 1 || sp.oversample < 0) &&
	    tq_index_originals(ix) == TQ_ORIG_NONE)
		die("%s: --oversample needs originals, and the index has none",
		    ixpath);
	if (sp.probes != 0 && tq_quantizer_lists(tq_index_quantizer(ix)) == 0)
		die("%s: --probes needs an index with lists (IVF); this one is "
		    "flat", ixpath);
	if ((labels || like || likepath != NULL) && !tq_index_has_labels(ix))
		die("%s: %s needs an index with labels (tq-build --labels)",
		    ixpath, labels ? "--labels" : like ? "--like" :
		    "--like-file");
	if (labels || like || likepath != NULL) {
		label_ix = ix;
		label_path = ixpath;
	}
	memset(&lk, 0, sizeof(lk));
	if (like)
		like_args(&lk, ix, ixpath, argv + 1, argc - 1);
	else if (likepath != NULL)
		like_file(&lk, ix, ixpath, likepath);
	/* The query's own row is dropped from one result more. */
	k = sp.k;
	if ((like || likepath != NULL) && !self)
		sp.k++;
	if (allowpath != NULL) {
		uint64_t *aids;
		size_t na;

		aids = read_all_ids(allowpath, &na);
		st = tq_filter_create(ix, aids, na, &allow);
		free(aids);
		if (st != TQ_OK)
			die_status(st, ixpath);
		sp.allow = allow;
	}
	if (!like && likepath == NULL) {
		if ((st = tq_reader_open(in, dataset, &r)) != TQ_OK)
			die_status(st, in_name(in));
		if (tq_reader_dim(r) != dim)
			die("%s: dimension %u does not match the index (%u)",
			    in_name(in), tq_reader_dim(r), dim);
	}

	if (range) {
		if (batch > 256)
			batch = 256;
	} else if (batch > MAX_SLOTS / sp.k)
		batch = MAX_SLOTS / sp.k;
	/* At most 256 MiB of queries in memory, whatever the dimension. */
	if (batch > ((size_t)256 << 20) / ((size_t)dim * sizeof(float)))
		batch = ((size_t)256 << 20) / ((size_t)dim * sizeof(float));
	if (batch == 0)
		batch = 1;
	queries = xmallocarray(batch * dim, sizeof(*queries));
	ids = range ? NULL : xmallocarray(batch * sp.k, sizeof(*ids));
	scores = range ? NULL : xmallocarray(batch * sp.k, sizeof(*scores));
	off = xmallocarray(batch + 1, sizeof(*off));
	cnt = xmallocarray(batch, sizeof(*cnt));
	len = xmallocarray(batch, sizeof(*len));
	bufcap = 4 + 4 * (size_t)sp.k;
	buf = xmallocarray(bufcap, 1);
	memset(&total, 0, sizeof(total));
	if (stats)
		sp.stats = &bst;
	out_open(&o, outpath);
	for (;;) {
		if (r == NULL)
			got = like_next(&lk, dim, queries, batch);
		else if ((st = tq_reader_read(r, queries, batch, &got)) !=
		    TQ_OK || (st = tq_check_rows(tq_quantizer_metric(
		    tq_index_quantizer(ix)), queries, got, dim, nq)) != TQ_OK)
			die_status(st, in_name(in));
		if (got == 0)
			break;
		if (range) {
			struct tq_range res;

			t0 = now_seconds();
			if ((st = tq_search_range(ix, queries, got, &sp, radius,
			    kset ? sp.k : 0, &res)) != TQ_OK)
				die_status(st, ixpath);
			t0 = now_seconds() - t0;
			for (i = 0; i < got; i++)
				cnt[i] = len[i] = res.off[i + 1] - res.off[i];
			if (r == NULL && !self) {
				drop_self(res.ids, res.scores, res.off, len,
				    got, lk.id + nq, kset ? k : SIZE_MAX);
				memcpy(cnt, len, got * sizeof(*cnt));
			}
			write_results(&o, fmt, nq, got, res.off, cnt, len,
			    res.ids, res.scores, &buf, &bufcap);
			tq_range_free(&res);
		} else {
			t0 = now_seconds();
			if ((st = tq_search(ix, queries, got, &sp, ids,
			    scores)) != TQ_OK)
				die_status(st, ixpath);
			t0 = now_seconds() - t0;
			for (i = 0; i < got; i++) {
				off[i] = i * sp.k;
				cnt[i] = len[i] = sp.k;
				/* Filtered: the padding has id UINT64_MAX. */
				while (len[i] > 0 &&
				    ids[off[i] + len[i] - 1] == UINT64_MAX &&
				    isnan(scores[off[i] + len[i] - 1]))
					len[i]--;
			}
			if (r == NULL && !self) {
				drop_self(ids, scores, off, len, got,
				    lk.id + nq, k);
				for (i = 0; i < got; i++)
					cnt[i] = k;
			}
			write_results(&o, fmt, nq, got, off, cnt, len, ids,
			    scores, &buf, &bufcap);
		}
		nq += got;
		if (stats) {
			stats_add(&total, &bst);
			wall += t0;
			if (stats == 2)
				stats_print(&bst, nbatch, t0);
			nbatch++;
		}
		progress("%llu queries", (unsigned long long)nq);
	}
	progress_done();
	if (stats == 1)
		stats_print(&total, -1, wall);
	out_commit(&o);
	tq_reader_close(r);
	like_free(&lk);
	tq_filter_free(allow);
	tq_index_close(ix);
	free(queries);
	free(ids);
	free(scores);
	free(off);
	free(cnt);
	free(len);
	free(buf);
	return 0;
}
