/* tq-fit - make a TurboQuant quantizer file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

static const char usage_str[] =
    "tq-fit [-b bits] [-m metric] [-s seed] [--dataset name] [--no-centre]\n"
    "              [--rotation auto|dense|structured] [--sample n] [--scale-search]\n"
    "              (-d dim | -i corpus) -o quantizer";

enum { OPT_DATASET = 256, OPT_NO_CENTRE, OPT_ROTATION, OPT_SAMPLE,
    OPT_SCALE_SEARCH };

static const struct option longopts[] = {
	{ "dataset",		required_argument,	NULL, OPT_DATASET },
	{ "help",		no_argument,		NULL, 'h' },
	{ "no-centre",		no_argument,		NULL, OPT_NO_CENTRE },
	{ "rotation",		required_argument,	NULL, OPT_ROTATION },
	{ "sample",		required_argument,	NULL, OPT_SAMPLE },
	{ "scale-search",	no_argument,		NULL, OPT_SCALE_SEARCH },
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
	int ch, centre = 1;

	cmd_init(argv, usage_str);
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
		case OPT_NO_CENTRE:
			centre = 0;
			break;
		case OPT_ROTATION:
			p.rotation = parse_rotation(optarg);
			break;
		case OPT_SAMPLE:
			p.sample = parse_u64(optarg, 0, UINT64_MAX, "sample");
			break;
		case OPT_SCALE_SEARCH:
			p.scale_search = 1;
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 0)
		usage_error("unexpected argument '%s'", argv[0]);
	if (corpus == NULL && dim == 0)
		usage_error("-d or -i is required");
	if (out == NULL)
		usage_error("-o is required");

	if (corpus != NULL) {
		if ((st = tq_reader_open(corpus, dataset, &r)) != TQ_OK)
			die_status(st, in_name(corpus));
		if (dim != 0 && dim != tq_reader_dim(r))
			die("%s: dimension mismatch", in_name(corpus));
		dim = tq_reader_dim(r);
	}
	p.dim = dim;
	st = tq_quantizer_fit(&p, centre ? r : NULL, &q);
	if (st != TQ_OK)
		die_status(st, r != NULL ? in_name(corpus) : NULL);
	tq_reader_close(r);
	if ((st = tq_quantizer_save(q, out)) != TQ_OK)
		die_status(st, out);
	tq_quantizer_free(q);
	return 0;
}
