/* tq-fit - make a TurboQuant quantizer file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char usage_str[] =
    "tq-fit [-b bits] [-m metric] [-s seed] [--dataset name] [--no-centre]\n"
    "              [--rotation auto|dense|structured|hadamard]\n"
    "              [--rotation-block n] [--sample n] [--scale-search]\n"
    "              [--lists n|auto [--residual]] [--train n] [--iterations n]\n"
    "              [--threads n]\n"
    "              (-d dim | -i corpus) -o quantizer";

static const char help_str[] =
    "  -b bits               bits per coordinate, 1 to 4 (default 4)\n"
    "  -d dim                the vector dimension, 1 to 65536\n"
    "      --dataset name    HDF5 dataset of the corpus (default train)\n"
    "  -h, --help            print this help and exit\n"
    "  -i corpus             fit the centre (and lists) to these vectors; - is stdin\n"
    "  -m metric             l2, ip or cosine (default l2)\n"
    "      --iterations n    most k-means iterations, 1 to 1000 (default 12)\n"
    "      --lists n|auto    fit n coarse lists for IVF indexes; needs -i\n"
    "      --no-centre       store a zero centre even with -i\n"
    "  -o quantizer          the file to write\n"
    "      --residual        with --lists: indexes encode each vector about its\n"
    "                        list's centroid instead of the centre\n"
    "      --rotation auto|dense|structured|hadamard\n"
    "                        the kind of rotation (default auto)\n"
    "      --rotation-block n  structured rotation, blocks about n wide (1-256)\n"
    "  -s seed               the seed of the rotation (default 42)\n"
    "      --sample n        read only the first n rows (default 0: all)\n"
    "      --scale-search    encode by an exact search for each vector's scale\n"
    "      --threads n       k-means threads (default 0: all cores)\n"
    "      --train n         k-means sample rows (default 128 a list)\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_DATASET = 256, OPT_ITERATIONS, OPT_LISTS, OPT_NO_CENTRE,
    OPT_ROTATION, OPT_ROTATION_BLOCK, OPT_SAMPLE, OPT_SCALE_SEARCH,
    OPT_THREADS, OPT_TRAIN, OPT_RESIDUAL };

static const struct option longopts[] = {
	{ "dataset",		required_argument,	NULL, OPT_DATASET },
	{ "help",		no_argument,		NULL, 'h' },
	{ "iterations",		required_argument,	NULL, OPT_ITERATIONS },
	{ "lists",		required_argument,	NULL, OPT_LISTS },
	{ "no-centre",		no_argument,		NULL, OPT_NO_CENTRE },
	{ "residual",		no_argument,		NULL, OPT_RESIDUAL },
	{ "rotation",		required_argument,	NULL, OPT_ROTATION },
	{ "rotation-block",	required_argument,	NULL,
	    OPT_ROTATION_BLOCK },
	{ "sample",		required_argument,	NULL, OPT_SAMPLE },
	{ "scale-search",	no_argument,		NULL, OPT_SCALE_SEARCH },
	{ "threads",		required_argument,	NULL, OPT_THREADS },
	{ "train",		required_argument,	NULL, OPT_TRAIN },
	{ "version",		no_argument,		NULL, 'V' },
	{ NULL,			0,			NULL, 0 }
};

int
main(int argc, char *argv[])
{
	struct tq_fit_params p;
	struct tq_quantizer *q;
	struct tq_reader *r = NULL;
	const char *corpus = NULL, *dataset = "train", *out = NULL;
	enum tq_status st;
	uint32_t dim = 0;
	int ch;

	cmd_init(argv, usage_str, help_str);
	tq_fit_params_default(&p);
	while ((ch = getopt_long(argc, argv, "b:d:hi:m:o:s:V", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'b':
			p.bits = parse_u32(optarg, 1, 4, "bits");
			break;
		case 'd':
			dim = parse_u32(optarg, 1, TQ_MAX_DIM, "dim");
			break;
		case 'h':
			usage_help();
		case 'i':
			corpus = optarg;
			break;
		case 'm':
			p.metric = parse_metric(optarg);
			break;
		case 'o':
			out = optarg;
			break;
		case 's':
			p.seed = parse_u64(optarg, 0, UINT64_MAX, "seed");
			break;
		case 'V':
			print_version();
		case OPT_DATASET:
			dataset = optarg;
			break;
		case OPT_ITERATIONS:
			p.iterations = parse_u32(optarg, 1, 1000, "iterations");
			break;
		case OPT_LISTS:
			p.lists = strcmp(optarg, "auto") == 0 ? TQ_LISTS_AUTO :
			    parse_u32(optarg, 1, TQ_MAX_LISTS, "lists");
			break;
		case OPT_NO_CENTRE:
			p.no_centre = 1;
			break;
		case OPT_RESIDUAL:
			p.residual = 1;
			break;
		case OPT_ROTATION:
			p.rotation = parse_rotation(optarg);
			break;
		case OPT_ROTATION_BLOCK:
			p.rotation_block = parse_u32(optarg, 1,
			    TQ_ROT_BLOCK_MAX, "rotation-block");
			break;
		case OPT_SAMPLE:
			p.sample = parse_u64(optarg, 0, UINT64_MAX, "sample");
			break;
		case OPT_SCALE_SEARCH:
			p.scale_search = 1;
			break;
		case OPT_THREADS:
			p.threads = parse_u32(optarg, 0, 1024, "threads");
			break;
		case OPT_TRAIN:
			p.train = parse_u64(optarg, 1, UINT64_MAX, "train");
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	check_output(out);
	if (argc > 0)
		usage_error("unexpected argument '%s'", argv[0]);
	if (corpus == NULL && dim == 0)
		usage_error("-d or -i is required");
	if (out == NULL)
		usage_error("-o is required");
	if (p.lists != 0 && corpus == NULL)
		usage_error("--lists needs -i corpus to fit them");
	if (p.residual && p.lists == 0)
		usage_error("--residual needs --lists");
	if (p.rotation_block != 0 && p.rotation != TQ_ROT_AUTO &&
	    p.rotation != TQ_ROT_STRUCTURED)
		usage_error("--rotation-block needs a structured rotation");

	if (corpus != NULL) {
		if ((st = tq_reader_open(corpus, dataset, &r)) != TQ_OK)
			die_status(st, in_name(corpus));
		if (dim != 0 && dim != tq_reader_dim(r))
			die("%s: dimension mismatch", in_name(corpus));
		dim = tq_reader_dim(r);
	}
	p.dim = dim;
	p.progress = show_progress;
	st = tq_quantizer_fit(&p, r != NULL && (!p.no_centre || p.lists) ?
	    r : NULL, &q);
	if (st != TQ_OK)
		die_status(st, r != NULL ? in_name(corpus) : NULL);
	progress_done();
	warn_offset(q, corpus);
	tq_reader_close(r);
	if ((st = tq_quantizer_save(q, out)) != TQ_OK)
		die_status(st, out);
	tq_quantizer_free(q);
	return 0;
}
