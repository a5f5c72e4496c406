/* tq-encode - vectors to a TurboQuant code stream and back. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char usage_str[] =
    "tq-encode -q quantizer [-i input] [-o output] [--dataset name]\n"
    "          [--threads n]\n"
    "       tq-encode --decode -q quantizer [-i codes] [-o output] "
    "[--format fixture|fvecs]";

static const char help_str[] =
    "      --dataset name    HDF5 dataset of the input (default train)\n"
    "      --decode          decode a code stream instead of encoding vectors\n"
    "      --format fixture|fvecs\n"
    "                        format of the decoded vectors (default fixture)\n"
    "  -h, --help            print this help and exit\n"
    "  -i input              vectors, or with --decode codes (default -: stdin)\n"
    "  -o output             where to write (default -: stdout)\n"
    "  -q quantizer          the quantizer, or an index whose quantizer is used\n"
    "      --threads n       encoding threads (default 0: all cores)\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_DATASET = 256, OPT_DECODE, OPT_FORMAT, OPT_THREADS };

static const struct option longopts[] = {
	{ "dataset",	required_argument,	NULL, OPT_DATASET },
	{ "decode",	no_argument,		NULL, OPT_DECODE },
	{ "format",	required_argument,	NULL, OPT_FORMAT },
	{ "help",	no_argument,		NULL, 'h' },
	{ "threads",	required_argument,	NULL, OPT_THREADS },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};

/* Vectors read at once: 64 blocks, split between the threads. */
#define CHUNK 2048

static struct tq_writer *writer;	/* guard_writer: aborted at exit */

static void
encode(const struct tq_quantizer *q, const char *in, const char *dataset,
    unsigned threads, const char *outpath)
{
	struct tq_reader *r;
	struct out o;
	enum tq_status st;
	uint8_t hdr[TQ_CODES_HEADER], *codes, *rec;
	size_t cb = tq_code_bytes(q), rb = tq_codes_record_bytes(q), got, i, j;
	uint32_t dim = tq_quantizer_dim(q);
	uint64_t n = 0;
	int64_t count;
	float *x, *f;

	if ((st = tq_reader_open(in, dataset, &r)) != TQ_OK)
		die_status(st, in_name(in));
	if (tq_reader_dim(r) != dim)
		die("%s: dimension %u does not match the quantizer (%u)",
		    in_name(in), tq_reader_dim(r), dim);
	if (rb != cb + 4 * TQ_NFACTORS)
		die("unexpected code record size %zu", rb);
	count = tq_reader_count(r);
	x = xmallocarray((size_t)CHUNK * dim, sizeof(*x));
	codes = xmallocarray(CHUNK, cb);
	f = xmallocarray(CHUNK * TQ_NFACTORS, sizeof(*f));
	rec = xmallocarray(CHUNK, rb);

	out_open(&o, outpath);
	tq_codes_header(q, count < 0 ? TQ_COUNT_UNKNOWN : (uint64_t)count, hdr);
	out_write(&o, hdr, sizeof(hdr));
	for (;;) {
		if ((st = tq_reader_read(r, x, CHUNK, &got)) != TQ_OK)
			die_status(st, in_name(in));
		if (got == 0)
			break;
		if ((st = tq_encode_threads(q, x, got, threads, codes, f)) !=
		    TQ_OK)
			die_status(st, in_name(in));
		for (i = 0; i < got; i++) {
			memcpy(rec + i * rb, codes + i * cb, cb);
			for (j = 0; j < TQ_NFACTORS; j++)
				put_lef32(rec + i * rb + cb + 4 * j,
				    f[i * TQ_NFACTORS + j]);
		}
		out_write(&o, rec, got * rb);
		n += got;
		progress("%llu vectors", (unsigned long long)n);
	}
	progress_done();
	if (count >= 0 && (uint64_t)count != n)
		die("%s: header says %lld rows but %llu were read", in_name(in),
		    (long long)count, (unsigned long long)n);
	if (count < 0 && o.tmp != NULL) {
		/* A file can take the count after all. */
		tq_codes_header(q, n, hdr);
		if (fseeko(o.fp, 0, SEEK_SET) == -1)
			die_errno("%s", o.path);
		out_write(&o, hdr, sizeof(hdr));
	}
	out_commit(&o);
	tq_reader_close(r);
	free(x);
	free(codes);
	free(f);
	free(rec);
}

/* Reads up to max whole records; a partial record is an error. */
static size_t
read_records(FILE *fp, const char *name, uint8_t *buf, size_t rb, size_t max)
{
	size_t got = fread(buf, 1, rb * max, fp);

	if (ferror(fp))
		die_errno("%s", name);
	if (got % rb != 0)
		die("%s: truncated code stream", name);
	return got / rb;
}

static void
decode(const struct tq_quantizer *q, const char *in, const char *outpath,
    enum tq_vecfmt fmt)
{
	FILE *fp;
	enum tq_status st;
	uint8_t hdr[TQ_CODES_HEADER], *codes, *rec;
	size_t cb = tq_code_bytes(q), rb = tq_codes_record_bytes(q), got, want;
	size_t i, j;
	uint32_t dim = tq_quantizer_dim(q);
	uint64_t n, done = 0;
	const char *name = in_name(in);
	float *x, *f;

	if (strcmp(in, "-") == 0)
		fp = stdin;
	else if ((fp = fopen(in, "rb")) == NULL)
		die_errno("%s", in);
	got = fread(hdr, 1, sizeof(hdr), fp);
	if (ferror(fp))
		die_errno("%s", name);
	if (got != sizeof(hdr))
		die("%s: truncated code stream", name);
	if ((st = tq_codes_check(q, hdr, &n)) != TQ_OK)
		die_status(st, name);
	if (rb != cb + 4 * TQ_NFACTORS)
		die("unexpected code record size %zu", rb);

	x = xmallocarray((size_t)CHUNK * dim, sizeof(*x));
	codes = xmallocarray(CHUNK, cb);
	f = xmallocarray(CHUNK * TQ_NFACTORS, sizeof(*f));
	rec = xmallocarray(CHUNK, rb);
	guard_writer(&writer);
	if ((st = tq_writer_open(outpath, fmt, dim, n, &writer)) != TQ_OK)
		die_status(st, out_name(outpath));
	for (;;) {
		want = CHUNK;
		if (n != TQ_COUNT_UNKNOWN && n - done < want)
			want = (size_t)(n - done);
		if (want == 0)
			break;
		if ((got = read_records(fp, name, rec, rb, want)) == 0)
			break;
		for (i = 0; i < got; i++) {
			memcpy(codes + i * cb, rec + i * rb, cb);
			for (j = 0; j < TQ_NFACTORS; j++)
				f[i * TQ_NFACTORS + j] =
				    get_lef32(rec + i * rb + cb + 4 * j);
		}
		if ((st = tq_decode(q, codes, f, got, x)) != TQ_OK)
			die_status(st, name);
		if ((st = tq_writer_write(writer, x, got)) != TQ_OK)
			die_status(st, out_name(outpath));
		done += got;
		progress("%llu vectors", (unsigned long long)done);
	}
	progress_done();
	if (n != TQ_COUNT_UNKNOWN) {
		if (done < n)
			die("%s: truncated code stream", name);
		if (fgetc(fp) != EOF)
			die("%s: data after the last of %llu records", name,
			    (unsigned long long)n);
		if (ferror(fp))
			die_errno("%s", name);
	}
	st = tq_writer_commit(writer);
	writer = NULL;
	if (st != TQ_OK)
		die_status(st, out_name(outpath));
	if (fp != stdin)
		fclose(fp);
	free(x);
	free(codes);
	free(f);
	free(rec);
}

int
main(int argc, char *argv[])
{
	struct tq_quantizer *q;
	const char *qpath = NULL, *in = "-", *out = "-", *dataset = "train";
	const char *format = NULL, *dsopt = NULL;
	enum tq_vecfmt fmt = TQ_VEC_FIXTURE;
	enum tq_status st;
	int ch, dec = 0, topt = 0;
	unsigned threads = 0;

	cmd_init(argv, usage_str, help_str);
	while ((ch = getopt_long(argc, argv, "hi:o:q:V", longopts, NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage_help();
		case 'i':
			in = optarg;
			break;
		case 'o':
			out = optarg;
			break;
		case 'q':
			qpath = optarg;
			break;
		case 'V':
			print_version();
		case OPT_DATASET:
			dataset = dsopt = optarg;
			break;
		case OPT_DECODE:
			dec = 1;
			break;
		case OPT_FORMAT:
			format = optarg;
			if (strcmp(optarg, "fixture") == 0)
				fmt = TQ_VEC_FIXTURE;
			else if (strcmp(optarg, "fvecs") == 0)
				fmt = TQ_VEC_FVECS;
			else
				usage_error("format '%s' is not one of fixture, "
				    "fvecs", optarg);
			break;
		case OPT_THREADS:
			threads = parse_u32(optarg, 0, 1024, "threads");
			topt = 1;
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
	if (qpath == NULL)
		usage_error("-q is required");
	if (format != NULL && !dec)
		usage_error("--format needs --decode");
	if (dsopt != NULL && dec)
		usage_error("--dataset does not apply to --decode");
	if (topt && dec)
		usage_error("--threads does not apply to --decode");

	if ((st = tq_quantizer_load(qpath, &q)) != TQ_OK)
		die_status(st, qpath);
	if (tq_quantizer_residual(q))
		die("%s: residual codes (each vector's about its list's "
		    "centroid): only tq-build encodes with this quantizer",
		    qpath);
	if (dec)
		decode(q, in, out, fmt);
	else
		encode(q, in, dataset, threads, out);
	tq_quantizer_free(q);
	finish_stdout();
	return 0;
}
