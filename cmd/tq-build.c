/* tq-build - build a TurboQuant index from a corpus in one streaming pass. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

static const char usage_str[] =
    "tq-build [-q quantizer | [-b bits] [-m metric] [-s seed] [--no-centre]\n"
    "                [--lists n|auto [--residual]]] [--ids file] [--labels file|auto]\n"
    "                [--originals f32|f16|none] [--factors f16|f32]\n"
    "                [--threads n] [--memory MiB] [--dups m] [--dup-ratio r]\n"
    "                [--calibrate queries | --no-calibrate] [--calibrate-sample n]\n"
    "                [--dataset name] [--shard i/n] [-v] -o index corpus\n"
    "       tq-build --append [--ids file [--replace]] [--labels file|auto]\n"
    "                [--factors f16|f32] [--threads n]\n"
    "                [--memory MiB] [--max-segments n] [--no-wait]\n"
    "                [--dataset name] [-v] [-o output] index corpus\n"
    "       tq-build --delete ids [--no-wait] [-v] [-o output] index\n"
    "       tq-build --compact [--factors f16|f32] [--threads n] [--memory MiB]\n"
    "                [--no-wait] [-v] [--calibrate queries | --no-calibrate]\n"
    "                [--calibrate-sample n] [-o output] index\n"
    "       tq-build --recalibrate [--calibrate queries] [--calibrate-sample n]\n"
    "                [--threads n] [--no-wait] [-v] [-o output] index";

static const char help_str[] =
    "      --append          add the vectors of corpus to index\n"
    "  -b bits               bits per coordinate when fitting, 1 to 4 (default 4)\n"
    "      --calibrate queries\n"
    "                        calibrate with these queries, not a sample of rows\n"
    "      --calibrate-sample n\n"
    "                        rows sampled to calibrate (default 500)\n"
    "      --compact         rewrite index without its deleted vectors\n"
    "      --delete ids      mark the vectors with these ids as deleted\n"
    "      --dataset name    HDF5 dataset of the corpus (default train)\n"
    "  -h, --help            print this help and exit\n"
    "      --lists n|auto    when fitting, also fit n lists: an IVF index\n"
    "      --max-segments n  an append past n segments compacts (default 16)\n"
    "      --memory MiB      IVF: encoded vectors reordered at once (default 256)\n"
    "      --dup-ratio r     copies to lists at most r times as far (default 1.2)\n"
    "      --dups m          IVF: store each vector in up to m lists (default 1)\n"
    "      --factors f16|f32 per-vector factors: compact (default) or as older\n"
    "                        tq wrote them\n"
    "      --ids file        external ids, one per corpus row (text or .u64)\n"
    "      --labels file|auto\n"
    "                        keep a label per row: one a line, or the corpus's\n"
    "  -m metric             the metric when fitting: l2, ip or cosine (default l2)\n"
    "      --no-calibrate    write no calibration (default: one with originals)\n"
    "      --no-centre       when fitting, do not centre\n"
    "      --no-wait         fail at once if another writer holds the index\n"
    "  -o index              the index file to write\n"
    "      --originals f32|f16|none\n"
    "                        how to store the originals for re-rank (default f32)\n"
    "  -q quantizer          encode with this quantizer (or an index's)\n"
    "      --recalibrate     measure the calibration of index again\n"
    "      --residual        when fitting lists, encode each vector about its\n"
    "                        list's centroid\n"
    "      --replace         append: replace live rows with the same ids\n"
    "  -s seed               the rotation seed when fitting (default 42)\n"
    "      --shard i/n       build only shard i of n of the corpus; needs -q\n"
    "      --threads n       encoding threads (default 0: all cores)\n"
    "  -V, --version         print the version and exit\n"
    "  -v, --verbose         print a summary on stderr\n";

enum { OPT_APPEND = 256, OPT_CALIBRATE, OPT_CALIBRATE_SAMPLE, OPT_NO_CALIBRATE,
    OPT_RECALIBRATE, OPT_COMPACT, OPT_DATASET, OPT_DELETE, OPT_DUP_RATIO,
    OPT_DUPS, OPT_FACTORS, OPT_IDS, OPT_LABELS, OPT_LISTS, OPT_MAX_SEGMENTS, OPT_MEMORY, OPT_NO_CENTRE, OPT_RESIDUAL,
    OPT_NO_WAIT, OPT_ORIGINALS, OPT_REPLACE, OPT_SHARD, OPT_THREADS };

static const struct option longopts[] = {
	{ "append",	no_argument,		NULL, OPT_APPEND },
	{ "calibrate",	required_argument,	NULL, OPT_CALIBRATE },
	{ "calibrate-sample", required_argument, NULL, OPT_CALIBRATE_SAMPLE },
	{ "compact",	no_argument,		NULL, OPT_COMPACT },
	{ "dataset",	required_argument,	NULL, OPT_DATASET },
	{ "delete",	required_argument,	NULL, OPT_DELETE },
	{ "dup-ratio",	required_argument,	NULL, OPT_DUP_RATIO },
	{ "dups",	required_argument,	NULL, OPT_DUPS },
	{ "factors",	required_argument,	NULL, OPT_FACTORS },
	{ "help",	no_argument,		NULL, 'h' },
	{ "ids",	required_argument,	NULL, OPT_IDS },
	{ "labels",	required_argument,	NULL, OPT_LABELS },
	{ "lists",	required_argument,	NULL, OPT_LISTS },
	{ "max-segments", required_argument,	NULL, OPT_MAX_SEGMENTS },
	{ "memory",	required_argument,	NULL, OPT_MEMORY },
	{ "no-calibrate", no_argument,		NULL, OPT_NO_CALIBRATE },
	{ "no-centre",	no_argument,		NULL, OPT_NO_CENTRE },
	{ "residual",	no_argument,		NULL, OPT_RESIDUAL },
	{ "no-wait",	no_argument,		NULL, OPT_NO_WAIT },
	{ "originals",	required_argument,	NULL, OPT_ORIGINALS },
	{ "recalibrate", no_argument,		NULL, OPT_RECALIBRATE },
	{ "replace",	no_argument,		NULL, OPT_REPLACE },
	{ "shard",	required_argument,	NULL, OPT_SHARD },
	{ "threads",	required_argument,	NULL, OPT_THREADS },
	{ "verbose",	no_argument,		NULL, 'v' },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};

/*
 * Can the file be read twice?  A pipe, a process substitution or standard
 * input can be read only once: its ids are not counted up front (the
 * build still fails naming the ids file when the counts differ), and a
 * corpus there is read once, uncentred.
 */
static int
rereadable(const char *path)
{
	struct stat sb;

	return strcmp(path, "-") != 0 && stat(path, &sb) == 0 &&
	    S_ISREG(sb.st_mode);
}

/*
 * Counts the ids in a file, so that a wrong count is reported naming the
 * ids file before the corpus is read.
 */
static uint64_t
count_ids(const char *path)
{
	struct tq_ids_reader *r;
	enum tq_status st;
	uint64_t buf[4096], n = 0;
	size_t got;

	if ((st = tq_ids_open(path, &r)) != TQ_OK)
		die_status(st, path);
	do {
		if ((st = tq_ids_read(r, buf, 4096, &got)) != TQ_OK)
			die_status(st, path);
		n += got;
	} while (got > 0);
	tq_ids_close(r);
	return n;
}

/*
 * --labels: "auto" takes the corpus's own labels (it must have some);
 * a file is counted first when it and the corpus can say their sizes,
 * so that a wrong count names it before any work, then opened for the
 * library, which reads it again (a pipe: once, checked at the end).
 */
static void
open_labels(const char *path, struct tq_reader *r, const char *corpus,
    struct tq_build_params *bp)
{
	struct tq_labels_reader *lr;
	enum tq_status st;

	if (path == NULL)
		return;
	if (strcmp(path, "auto") == 0) {
		if (!tq_reader_has_labels(r))
			die("%s: --labels auto: the input has no labels",
			    in_name(corpus));
		bp->labels_auto = 1;
		return;
	}
	if (rereadable(path) && tq_reader_count(r) >= 0) {
		const char *s;
		size_t len;
		uint64_t n = 0;

		if ((st = tq_labels_open(path, &lr)) != TQ_OK)
			die_status(st, path);
		for (;;) {
			if ((st = tq_labels_read(lr, &s, &len)) != TQ_OK)
				die_status(st, path);
			if (s == NULL)
				break;
			n++;
		}
		tq_labels_close(lr);
		if (n != (uint64_t)tq_reader_count(r))
			die("%s: %llu labels for %lld rows", path,
			    (unsigned long long)n,
			    (long long)tq_reader_count(r));
	}
	if ((st = tq_labels_open(path, &lr)) != TQ_OK)
		die_status(st, in_name(path));
	bp->labels = lr;
}

/* A failure of the labels file read by the library names the file. */
static void
labels_failed(enum tq_status st, const char *path)
{
	const char *d = tq_errdetail();

	if (path == NULL || strcmp(path, "auto") == 0)
		return;
	if (strncmp(d, "the labels file: ", 17) == 0)
		die("%s: %s", in_name(path), d + 17);
	if (strncmp(d, "the labels file", 15) == 0)
		die_status(st, in_name(path));
}

/*
 * tq_build() reads two files and writes one; its detail does not say which
 * file failed, so guess from the wording.
 */
static const char *
blame(enum tq_status st, const char *corpus, const char *ids, const char *out)
{
	static const char *outputs[] = { "write", "truncate", "fsync", "close",
	    "rename", "cannot create", "spool", "spill", "open",
	    "index too large" };
	/* The writer's refusals of the destination itself. */
	static const char *dests[] = { "not a regular file",
	    "cannot write a tq file" };
	const char *d = tq_errdetail();
	size_t i;

	if (ids != NULL && (strncmp(d, "the ids file", 12) == 0 ||
	    st == TQ_ERR_DUPLICATE))
		return ids;
	if (st == TQ_ERR_BUSY || strncmp(d, "lock", 4) == 0)
		return out;
	if (st == TQ_ERR_IO || st == TQ_ERR_OVERFLOW)
		for (i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++)
			if (strncmp(d, outputs[i], strlen(outputs[i])) == 0)
				return out;
	if (st == TQ_ERR_UNSUPPORTED)
		for (i = 0; i < sizeof(dests) / sizeof(dests[0]); i++)
			if (strncmp(d, dests[i], strlen(dests[i])) == 0)
				return out;
	return in_name(corpus);
}

/* Prints the size of a written index for -v. */
static void
report(const char *out, double t0, const char *what)
{
	struct tq_file_info info;
	enum tq_status st;

	if ((st = tq_file_info(out, &info)) != TQ_OK)
		die_status(st, out);
	fprintf(stderr, "%s: %s: %s%llu vectors (%llu live), %.1f "
	    "bytes/vector, %.2f s\n", progname(), out, what,
	    (unsigned long long)info.count, (unsigned long long)info.live,
	    info.bytes_per_vector, now_seconds() - t0);
}

/*
 * The calibration for tq-search --recall: --calibrate's queries, or a
 * sample of the index's rows.  A build or a compaction calibrates its new
 * file before renaming it into place (tq_build_params.calibrate), by
 * default when it has originals and at least CALIB_MIN live rows, and
 * always (failing if it cannot) when --calibrate or --calibrate-sample
 * asks; --no-calibrate makes none.  --recalibrate measures an existing
 * index again, as one commit onto it.
 */
#define CALIB_MIN 1000u

struct calib {
	const char *queries;	/* --calibrate */
	uint32_t sample;	/* --calibrate-sample */
	int off;		/* --no-calibrate */
	float *q;		/* --calibrate's rows, read by calib_params */
	struct tq_calib_params cp;
};

/*
 * cal->cp for an index of dimension dim and the given originals, read and
 * checked before any work; NULL when no calibration is to be made.  A
 * calibration asked for (always, --calibrate, --calibrate-sample) must be
 * made; an unasked one only where it can.  where names the index (or
 * output) for the diagnostics.  Called once a run.
 */
static const struct tq_calib_params *
calib_params(struct calib *cal, uint32_t dim, enum tq_metric metric,
    enum tq_originals orig, const struct tq_build_params *bp,
    const char *where, int always)
{
	struct tq_calib_params *cp = &cal->cp;
	int asked = always || cal->queries != NULL || cal->sample != 0;
	enum tq_status st;
	size_t nq;

	if (cal->off || (!asked && orig == TQ_ORIG_NONE))
		return NULL;
	if (orig == TQ_ORIG_NONE)
		die("%s: calibration needs originals, and the index has none",
		    where);
	tq_calib_params_default(cp);
	cp->sample = cal->sample;
	cp->threads = bp->threads;
	cp->min_live = asked ? 0 : CALIB_MIN;
	if (cal->queries != NULL) {
		progress("reading calibration queries");
		if ((st = tq_read_all(cal->queries, "test", &cal->q, &cp->dim,
		    &nq)) != TQ_OK || (st = tq_check_rows(metric, cal->q, nq,
		    cp->dim, 0)) != TQ_OK)
			die_status(st, in_name(cal->queries));
		progress_done();
		if (cp->dim != dim)
			die("%s: calibration queries of dimension %u, the index "
			    "has %u", in_name(cal->queries), cp->dim, dim);
		if (nq == 0)
			die("%s: no calibration queries",
			    in_name(cal->queries));
		cp->queries = cal->q;
		cp->nq = nq;
	}
	return cp;
}

/* --recalibrate: the index measured again, one commit onto it. */
static void
recalibrate(struct calib *cal, const char *path, const char *out,
    const struct tq_build_params *bp)
{
	const struct tq_calib_params *cp;
	struct tq_index *ix;
	enum tq_status st;
	uint32_t dim;
	enum tq_metric metric;
	enum tq_originals orig;

	if ((st = tq_index_open(path, &ix)) != TQ_OK)
		die_status(st, path);
	dim = tq_quantizer_dim(tq_index_quantizer(ix));
	metric = tq_quantizer_metric(tq_index_quantizer(ix));
	orig = tq_index_originals(ix);
	tq_index_close(ix);
	cp = calib_params(cal, dim, metric, orig, bp, path, 1);
	progress("calibrating");
	st = tq_index_calibrate(path, cp, bp, out);
	progress_done();
	if (st != TQ_OK)
		die_status(st, st == TQ_ERR_CHECKSUM ? path :
		    blame(st, path, NULL, out));
}

/* --append, --delete, --compact: a new version of an existing index. */
static int
mutate(int mode, const char *delpath, const char *idspath,
    const char *labpath, const char *dataset, struct tq_build_params *bp,
    struct calib *cal, const char *out, int verbose, int argc,
    char **argv)
{
	const char *ixpath = argv[0];
	struct tq_index *ix;
	enum tq_status st;
	enum tq_metric metric;
	enum tq_originals orig;
	double t0 = now_seconds();
	char what[64] = "";
	uint32_t dim;

	if (argc < 1)
		usage_error("missing index");
	if (argc != (mode == OPT_APPEND ? 2 : 1)) {
		if (mode == OPT_APPEND && argc < 2)
			usage_error("missing corpus");
		usage_error("unexpected argument '%s'",
		    argv[mode == OPT_APPEND ? 2 : 1]);
	}
	if (out == NULL)
		out = ixpath;
	check_output(out);
	/*
	 * Open the index once first, so that damage to it is reported naming
	 * it rather than the corpus or the output the library also handles.
	 */
	if ((st = tq_index_open(ixpath, &ix)) != TQ_OK)
		die_status(st, ixpath);
	dim = tq_quantizer_dim(tq_index_quantizer(ix));
	metric = tq_quantizer_metric(tq_index_quantizer(ix));
	orig = tq_index_originals(ix);
	tq_index_close(ix);
	if (mode == OPT_DELETE) {
		uint64_t *ids, deleted;
		size_t n;

		ids = read_all_ids(delpath, &n);
		st = tq_index_delete(ixpath, ids, n, bp, out, &deleted);
		free(ids);
		if (st != TQ_OK)
			die_status(st, st == TQ_ERR_CHECKSUM ? ixpath :
			    blame(st, ixpath, NULL, out));
		snprintf(what, sizeof(what), "%llu deleted, ",
		    (unsigned long long)deleted);
	} else if (mode == OPT_COMPACT) {
		bp->calibrate = calib_params(cal, dim, metric, orig, bp, ixpath,
		    0);
		if ((st = tq_index_compact(ixpath, bp, out)) != TQ_OK)
			die_status(st, st == TQ_ERR_CHECKSUM ? ixpath :
			    blame(st, ixpath, NULL, out));
	} else if (mode == OPT_RECALIBRATE) {
		recalibrate(cal, ixpath, out, bp);
	} else {
		const char *corpus = argv[1];
		struct tq_reader *r;
		struct tq_ids_reader *ids = NULL;

		/* Used when the append rewrites the index (a fresh build). */
		bp->calibrate = calib_params(cal, dim, metric, orig, bp, ixpath,
		    0);
		if ((st = tq_reader_open(corpus, dataset, &r)) != TQ_OK)
			die_status(st, in_name(corpus));
		if (idspath != NULL) {
			if (rereadable(idspath) &&
			    tq_reader_count(r) >= 0) {
				uint64_t nid = count_ids(idspath);

				if (nid != (uint64_t)tq_reader_count(r))
					die("%s: %llu ids for %lld rows",
					    idspath, (unsigned long long)nid,
					    (long long)tq_reader_count(r));
			}
			if ((st = tq_ids_open(idspath, &ids)) != TQ_OK)
				die_status(st, idspath);
		}
		open_labels(labpath, r, corpus, bp);
		if ((st = tq_index_append(ixpath, r, ids, bp, out)) != TQ_OK) {
			const char *d = tq_errdetail();

			labels_failed(st, labpath);
			/* Labels the index has, or lacks, name the index. */
			if (strncmp(d, "the index has", 13) == 0)
				die_status(st, ixpath);

			/* The index's own problems name the index. */
			die_status(st, st == TQ_ERR_CHECKSUM ||
			    strncmp(d, "section", 7) == 0 ? ixpath :
			    blame(st, corpus, idspath, out));
		}
		tq_ids_close(ids);
		tq_labels_close(bp->labels);
		tq_reader_close(r);
	}
	progress_done();
	if (verbose)
		report(out, t0, what);
	return 0;
}

static struct tq_quantizer *
fit(struct tq_fit_params *p, const char *corpus, const char *dataset,
    uint32_t dim, int centre)
{
	struct tq_quantizer *q;
	struct tq_reader *data = NULL;
	enum tq_status st;

	/*
	 * Centring and lists read the corpus a first time; stdin cannot be
	 * re-read, so it is built uncentred and lists need a file.
	 */
	if (p->lists != 0 && strcmp(corpus, "-") == 0)
		die("-: --lists needs a corpus file, not standard input "
		    "(or a quantizer fitted by tq-fit, with -q)");
	if (p->lists != 0 && !rereadable(corpus))
		die("%s: --lists needs a corpus file, not a pipe (or a "
		    "quantizer fitted by tq-fit, with -q)", corpus);
	if ((centre || p->lists != 0) && rereadable(corpus) &&
	    (st = tq_reader_open(corpus, dataset, &data)) != TQ_OK)
		die_status(st, corpus);
	p->no_centre = !centre;
	p->dim = dim;
	p->progress = show_progress;
	if ((st = tq_quantizer_fit(p, data, &q)) != TQ_OK)
		die_status(st, in_name(corpus));
	progress_done();
	warn_offset(q, corpus);
	tq_reader_close(data);
	return q;
}

int
main(int argc, char *argv[])
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *q;
	struct tq_reader *r;
	struct tq_ids_reader *ids = NULL;
	const char *qpath = NULL, *idspath = NULL, *out = NULL;
	const char *labpath = NULL;
	const char *delpath = NULL;
	const char *dataset = "train", *corpus;
	enum tq_status st;
	double t0;
	int ch, centre = 1, fitopt = 0, verbose = 0, mode = 0, nmodes = 0;
	int origopt = 0, dupopt = 0;
	uint32_t shard = 0, nshards = 0;
	struct calib cal = { NULL, 0, 0, NULL, { 0 } };

	cmd_init(argv, usage_str, help_str);
	tq_fit_params_default(&fp);
	tq_build_params_default(&bp);
	while ((ch = getopt_long(argc, argv, "b:hm:o:q:s:vV", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'b':
			fp.bits = parse_u32(optarg, 1, 4, "bits");
			fitopt = 1;
			break;
		case 'h':
			usage_help();
		case 'm':
			fp.metric = parse_metric(optarg);
			fitopt = 1;
			break;
		case 'o':
			out = optarg;
			break;
		case 'q':
			qpath = optarg;
			break;
		case 's':
			fp.seed = parse_u64(optarg, 0, UINT64_MAX, "seed");
			fitopt = 1;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'V':
			print_version();
		case OPT_APPEND:
		case OPT_COMPACT:
		case OPT_RECALIBRATE:
			mode = ch;
			nmodes++;
			break;
		case OPT_CALIBRATE:
			cal.queries = optarg;
			break;
		case OPT_CALIBRATE_SAMPLE:
			cal.sample = parse_u32(optarg, 1, TQ_CALIB_MAX_SAMPLE,
			    "calibrate-sample");
			break;
		case OPT_DATASET:
			dataset = optarg;
			break;
		case OPT_DELETE:
			mode = ch;
			nmodes++;
			delpath = optarg;
			break;
		case OPT_DUP_RATIO:
			bp.dup_ratio = parse_float(optarg, 1, 1e6f,
			    "dup-ratio");
			dupopt = 1;
			break;
		case OPT_DUPS:
			bp.dups = parse_u32(optarg, 1, TQ_MAX_LISTS, "dups");
			dupopt = 1;
			break;
		case OPT_FACTORS:
			if (strcmp(optarg, "f16") == 0)
				bp.factors = TQ_FACTORS_F16;
			else if (strcmp(optarg, "f32") == 0)
				bp.factors = TQ_FACTORS_F32;
			else
				usage_error("factors '%s' is not one of f16, "
				    "f32", optarg);
			break;
		case OPT_IDS:
			idspath = optarg;
			break;
		case OPT_LABELS:
			labpath = optarg;
			break;
		case OPT_LISTS:
			fp.lists = strcmp(optarg, "auto") == 0 ? TQ_LISTS_AUTO :
			    parse_u32(optarg, 1, TQ_MAX_LISTS, "lists");
			fitopt = 1;
			break;
		case OPT_MAX_SEGMENTS:
			bp.max_segments = parse_u32(optarg, 1,
			    TQ_MAX_SEGMENTS_LIMIT, "max-segments");
			break;
		case OPT_NO_WAIT:
			bp.no_wait = 1;
			break;
		case OPT_REPLACE:
			bp.replace = 1;
			break;
		case OPT_MEMORY:
			bp.memory = parse_u64(optarg, 1, UINT64_MAX >> 20,
			    "memory") << 20;
			break;
		case OPT_NO_CALIBRATE:
			cal.off = 1;
			break;
		case OPT_NO_CENTRE:
			centre = 0;
			fitopt = 1;
			break;
		case OPT_RESIDUAL:
			fp.residual = 1;
			fitopt = 1;
			break;
		case OPT_ORIGINALS:
			origopt = 1;
			if (strcmp(optarg, "f32") == 0)
				bp.originals = TQ_ORIG_F32;
			else if (strcmp(optarg, "f16") == 0)
				bp.originals = TQ_ORIG_F16;
			else if (strcmp(optarg, "none") == 0)
				bp.originals = TQ_ORIG_NONE;
			else
				usage_error("originals '%s' is not one of f32, "
				    "f16, none", optarg);
			break;
		case OPT_SHARD:
			parse_shard(optarg, &shard, &nshards);
			break;
		case OPT_THREADS:
			bp.threads = parse_u32(optarg, 0, 1024, "threads");
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	wait_politely(&bp);
	bp.progress = show_progress;	/* shown on a terminal only */
	if (bp.replace && (mode != OPT_APPEND || idspath == NULL))
		usage_error("--replace goes with --append and --ids");
	if (bp.max_segments != 0 && mode != OPT_APPEND)
		usage_error("--max-segments goes with --append");
	if (nmodes > 1)
		usage_error("only one of --append, --delete, --compact and "
		    "--recalibrate");
	if (cal.off && (cal.queries != NULL || cal.sample != 0))
		usage_error("--no-calibrate and --calibrate or "
		    "--calibrate-sample: one or the other");
	if ((cal.off || cal.queries != NULL || cal.sample != 0) &&
	    (mode == OPT_APPEND || mode == OPT_DELETE))
		usage_error("--%s keeps the index's calibration: no "
		    "--calibrate, --calibrate-sample or --no-calibrate "
		    "(recalibrate with --recalibrate)",
		    mode == OPT_APPEND ? "append" : "delete");
	if (cal.off && mode == OPT_RECALIBRATE)
		usage_error("--no-calibrate goes with a build or --compact");
	if (cal.queries != NULL && cal.sample != 0)
		usage_error("--calibrate-sample samples the index's rows: not "
		    "with --calibrate");

	if (nshards > 0 && mode != 0)
		usage_error("--shard goes with a new build, not --append, "
		    "--delete or --compact");
	if (nshards > 0 && labpath != NULL && strcmp(labpath, "auto") != 0)
		usage_error("--shard cannot take a labels file (use --labels "
		    "auto with a labelled corpus)");
	if (nshards > 0 && qpath == NULL)
		usage_error("--shard needs -q: every shard must use the same "
		    "quantizer");
	if (mode != 0) {
		int rc;

		if (qpath != NULL || fitopt || origopt || dupopt)
			usage_error("--%s keeps the index's quantizer, "
			    "originals and copies: no -q, -b, -m, -s, "
			    "--no-centre, --lists, --residual, --originals, "
			    "--dups or "
			    "--dup-ratio", mode == OPT_APPEND ? "append" :
			    mode == OPT_DELETE ? "delete" : "compact");
		if (mode != OPT_APPEND && idspath != NULL)
			usage_error("--ids goes with --append");
		if (mode == OPT_DELETE && bp.factors != TQ_FACTORS_DEFAULT)
			usage_error("--factors goes with a build, --append or "
			    "--compact");
		if (mode != OPT_APPEND && labpath != NULL)
			usage_error("--labels goes with a build or --append");
		rc = mutate(mode, delpath, idspath, labpath, dataset, &bp,
		    &cal, out, verbose, argc, argv);
		free(cal.q);
		return rc;
	}
	if (fp.residual && fp.lists == 0)
		usage_error("--residual needs --lists");
	if (qpath != NULL && fitopt)
		usage_error("-q cannot be used with -b, -m, -s, --no-centre, "
		    "--lists or --residual");
	if (out == NULL)
		usage_error("-o is required");
	if (argc < 1)
		usage_error("missing corpus");
	if (argc > 1)
		usage_error("unexpected argument '%s'", argv[1]);
	corpus = argv[0];
	check_output(out);

	t0 = now_seconds();
	if ((st = tq_reader_open(corpus, dataset, &r)) != TQ_OK)
		die_status(st, in_name(corpus));
	if (qpath != NULL) {
		if ((st = tq_quantizer_load(qpath, &q)) != TQ_OK)
			die_status(st, qpath);
		if (tq_quantizer_dim(q) != tq_reader_dim(r))
			die("%s: dimension %u does not match the quantizer (%u)",
			    in_name(corpus), tq_reader_dim(r),
			    tq_quantizer_dim(q));
	} else
		q = fit(&fp, corpus, dataset, tq_reader_dim(r), centre);
	if (bp.dups > 1 && tq_quantizer_lists(q) == 0)
		die("%s: --dups needs a quantizer with lists (tq-fit --lists)",
		    qpath != NULL ? qpath : in_name(corpus));
	if (bp.dups > 1 && tq_quantizer_residual(q))
		die("%s: --dups needs codes about the centre; the quantizer's "
		    "are residual (tq-fit --residual)",
		    qpath != NULL ? qpath : in_name(corpus));
	if (bp.dups > 1 && bp.dups > tq_quantizer_lists(q))
		die("%s: --dups %u is more than the %u lists",
		    qpath != NULL ? qpath : in_name(corpus), (unsigned)bp.dups,
		    (unsigned)tq_quantizer_lists(q));
	if (idspath != NULL) {
		if (rereadable(idspath) && tq_reader_count(r) >= 0) {
			uint64_t nid = count_ids(idspath);
			if (nid != (uint64_t)tq_reader_count(r))
				die("%s: %llu ids for %lld rows", idspath,
				    (unsigned long long)nid,
				    (long long)tq_reader_count(r));
		}
		if ((st = tq_ids_open(idspath, &ids)) != TQ_OK)
			die_status(st, idspath);
	}
	if (nshards > 0)
		shard_select(corpus, r, idspath, &ids, shard, nshards);
	open_labels(labpath, r, corpus, &bp);
	bp.calibrate = calib_params(&cal, tq_quantizer_dim(q),
	    tq_quantizer_metric(q), bp.originals, &bp, out, 0);
	if ((st = tq_build(q, r, ids, &bp, out)) != TQ_OK) {
		labels_failed(st, labpath);
		die_status(st, blame(st, corpus, idspath, out));
	}
	progress_done();
	tq_ids_close(ids);
	tq_labels_close(bp.labels);
	tq_reader_close(r);
	tq_quantizer_free(q);
	free(cal.q);
	if (verbose) {
		struct tq_file_info info;

		if ((st = tq_file_info(out, &info)) != TQ_OK)
			die_status(st, out);
		fprintf(stderr, "%s: %s: %llu vectors, %.1f bytes/vector, "
		    "%.2f s\n", progname(), out,
		    (unsigned long long)info.count, info.bytes_per_vector,
		    now_seconds() - t0);
	}
	return 0;
}
