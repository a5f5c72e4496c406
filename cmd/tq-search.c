/* tq-search - k nearest neighbours of queries in a TurboQuant index. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char usage_str[] =
    "tq-search [-k k] [-i queries] [-o output] [--oversample f] [--threads n]\n"
    "                 [--batch n] [--format tsv|json|ivecs] [--dataset name] index";

enum { OPT_BATCH = 256, OPT_DATASET, OPT_FORMAT, OPT_OVERSAMPLE, OPT_THREADS };

static const struct option longopts[] = {
	{ "batch",	required_argument,	NULL, OPT_BATCH },
	{ "dataset",	required_argument,	NULL, OPT_DATASET },
	{ "format",	required_argument,	NULL, OPT_FORMAT },
	{ "help",	no_argument,		NULL, 'h' },
	{ "oversample",	required_argument,	NULL, OPT_OVERSAMPLE },
	{ "threads",	required_argument,	NULL, OPT_THREADS },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};

enum format { FMT_TSV, FMT_JSON, FMT_IVECS };

/*
 * Queries per call of tq_search() by default: enough to keep the threads
 * busy and share each pass over the codes among many queries, few enough
 * that the results of one batch stay within 2^24 slots.  --batch 1 answers
 * each query as soon as it is read (for queries arriving on a pipe).
 */
#define BATCH 4096
#define MAX_SLOTS (1u << 24)

static void
write_results(struct out *o, enum format fmt, uint64_t q0, size_t nq,
    uint32_t k, const uint64_t *ids, const float *scores, uint8_t *buf)
{
	size_t i, j;

	for (i = 0; i < nq; i++) {
		const uint64_t *id = ids + i * k;
		const float *sc = scores + i * k;

		switch (fmt) {
		case FMT_TSV:
			for (j = 0; j < k; j++)
				out_printf(o, "%llu\t%zu\t%llu\t%.9g\n",
				    (unsigned long long)(q0 + i), j + 1,
				    (unsigned long long)id[j], (double)sc[j]);
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
			out_printf(o, "]}\n");
			break;
		case FMT_IVECS:
			put_le32(buf, k);
			for (j = 0; j < k; j++) {
				if (id[j] > INT32_MAX)
					die("%s: id %llu does not fit in ivecs "
					    "(int32)", out_name(o->path),
					    (unsigned long long)id[j]);
				put_le32(buf + 4 + 4 * j, (uint32_t)id[j]);
			}
			out_write(o, buf, 4 + 4 * (size_t)k);
			break;
		}
	}
}

int
main(int argc, char *argv[])
{
	struct tq_search_params sp;
	struct tq_index *ix;
	struct tq_reader *r;
	struct out o;
	const char *in = "-", *outpath = "-", *dataset = "test", *ixpath;
	enum format fmt = FMT_TSV;
	enum tq_status st;
	uint64_t *ids, nq = 0;
	uint32_t dim;
	size_t batch = BATCH, got;
	float *queries, *scores;
	uint8_t *buf;
	int ch;

	cmd_init(argv, usage_str);
	tq_search_params_default(&sp);
	sp.k = 10;
	sp.oversample = 1;
	while ((ch = getopt_long(argc, argv, "hi:k:o:V", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage_help();
		case 'i':
			in = optarg;
			break;
		case 'k':
			sp.k = parse_u32(optarg, 1, 1000000, "k");
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'V':
			print_version();
		case OPT_BATCH:
			batch = parse_u32(optarg, 1, 65536, "batch");
			break;
		case OPT_DATASET:
			dataset = optarg;
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "tsv") == 0)
				fmt = FMT_TSV;
			else if (strcmp(optarg, "json") == 0)
				fmt = FMT_JSON;
			else if (strcmp(optarg, "ivecs") == 0)
				fmt = FMT_IVECS;
			else
				usage_error("format '%s' is not one of tsv, json, "
				    "ivecs", optarg);
			break;
		case OPT_OVERSAMPLE:
			sp.oversample = parse_float(optarg, 1, 1000,
			    "oversample");
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
	if (argc < 1)
		usage_error("missing index");
	if (argc > 1)
		usage_error("unexpected argument '%s'", argv[1]);
	ixpath = argv[0];

	if ((st = tq_index_open(ixpath, &ix)) != TQ_OK)
		die_status(st, ixpath);
	dim = tq_quantizer_dim(tq_index_quantizer(ix));
	if (sp.k > tq_index_count(ix))
		die("%s: k (%u) exceeds the %llu vectors in the index", ixpath,
		    sp.k, (unsigned long long)tq_index_count(ix));
	if (sp.oversample > 1 && tq_index_originals(ix) == TQ_ORIG_NONE)
		die("%s: --oversample needs originals, and the index has none",
		    ixpath);
	if ((st = tq_reader_open(in, dataset, &r)) != TQ_OK)
		die_status(st, in_name(in));
	if (tq_reader_dim(r) != dim)
		die("%s: dimension %u does not match the index (%u)",
		    in_name(in), tq_reader_dim(r), dim);

	if (batch > MAX_SLOTS / sp.k)
		batch = MAX_SLOTS / sp.k;
	if (batch == 0)
		batch = 1;
	queries = xmallocarray(batch * dim, sizeof(*queries));
	ids = xmallocarray(batch * sp.k, sizeof(*ids));
	scores = xmallocarray(batch * sp.k, sizeof(*scores));
	buf = xmallocarray(4 + 4 * (size_t)sp.k, 1);
	out_open(&o, outpath);
	for (;;) {
		if ((st = tq_reader_read(r, queries, batch, &got)) != TQ_OK)
			die_status(st, in_name(in));
		if (got == 0)
			break;
		if ((st = tq_search(ix, queries, got, &sp, ids, scores)) !=
		    TQ_OK)
			die_status(st, ixpath);
		write_results(&o, fmt, nq, got, sp.k, ids, scores, buf);
		nq += got;
		progress("%llu queries", (unsigned long long)nq);
	}
	progress_done();
	out_commit(&o);
	tq_reader_close(r);
	tq_index_close(ix);
	free(queries);
	free(ids);
	free(scores);
	free(buf);
	return 0;
}
