/*
 * tq-cat - concatenate, slice, sample, normalise and convert vector files.
 *
 * The rows of the inputs, in order, form one sequence numbered from 0.
 * --rows keeps a range of it (seeking where an input allows), --sample a
 * seeded uniform sample of that range in input order, --normalize scales
 * what is kept, and the writer turns it into the output format.  Memory
 * is one chunk of rows, plus the sample when the count is not known in
 * advance (reservoir sampling).
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

static const char usage_str[] =
    "tq-cat [-f format] [-o output] [--rows a:b] [--sample n [--seed s]]\n"
    "       [--normalize] [--labels] [--dataset name] [input ...]";

/* --help: the usage, then a line for each option. */
static const char options_str[] =
    "      --dataset name    HDF5 dataset of the inputs (default train)\n"
    "  -f, --format fmt      fixture, fvecs, ivecs, bvecs, npy, text, tsv,\n"
    "                        csv, vec or w2v (default: from the -o suffix,\n"
    "                        else fixture)\n"
    "  -h, --help            print this help and exit\n"
    "      --labels          text formats: a label column, the input's labels\n"
    "                        or else the row number (vec, w2v: always)\n"
    "      --normalize       scale each row to unit length\n"
    "  -o output             where to write (default -, standard output)\n"
    "      --rows a:b        rows a (included) to b (excluded); either empty\n"
    "      --sample n        a seeded uniform sample of n rows, in order\n"
    "      --seed s          seed of the sample (default 0)\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_DATASET = 256, OPT_LABELS, OPT_NORMALIZE, OPT_ROWS, OPT_SAMPLE,
    OPT_SEED };

static const struct option longopts[] = {
	{ "dataset",	required_argument,	NULL, OPT_DATASET },
	{ "format",	required_argument,	NULL, 'f' },
	{ "help",	no_argument,		NULL, 'h' },
	{ "labels",	no_argument,		NULL, OPT_LABELS },
	{ "normalize",	no_argument,		NULL, OPT_NORMALIZE },
	{ "rows",	required_argument,	NULL, OPT_ROWS },
	{ "sample",	required_argument,	NULL, OPT_SAMPLE },
	{ "seed",	required_argument,	NULL, OPT_SEED },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};

static const struct {
	const char *name, *suffix;
	enum tq_vecfmt fmt;
} formats[] = {
	{ "fixture",	NULL,		TQ_VEC_FIXTURE },
	{ "fvecs",	".fvecs",	TQ_VEC_FVECS },
	{ "ivecs",	".ivecs",	TQ_VEC_IVECS },
	{ "bvecs",	".bvecs",	TQ_VEC_BVECS },
	{ "npy",	".npy",		TQ_VEC_NPY },
	{ "text",	".txt",		TQ_VEC_TEXT },
	{ "tsv",	".tsv",		TQ_VEC_TSV },
	{ "csv",	".csv",		TQ_VEC_CSV },
	{ "vec",	".vec",		TQ_VEC_VEC },
	{ "w2v",	NULL,		TQ_VEC_W2V },
};
#define NFORMATS (sizeof(formats) / sizeof(formats[0]))

#define NONE UINT64_MAX		/* an open end of --rows; no --sample */
#define CHUNK_BYTES ((size_t)4 << 20)
#define LABEL_MAX 24		/* a row number as a label */

struct opts {
	enum tq_vecfmt fmt;
	const char *out, *dataset;
	uint64_t first, end;	/* --rows: [first, end), end NONE: open */
	uint64_t sample;	/* rows to keep, or NONE */
	uint64_t seed;
	int normalize, labels;
};

/* Everything between the readers and the writer. */
struct cat {
	const struct opts *o;
	struct tq_writer *w;
	uint32_t dim;
	int ints;		/* int32 rows from integer inputs to ivecs */
	int quiet;		/* the rows go to the terminal: no progress */
	size_t chunk;		/* rows per read */
	void *rows;		/* chunk * dim floats or int32 */
	const char **lab;	/* the chunk's labels, with --labels */
	char (*num)[LABEL_MAX];	/* row numbers as labels */
	uint64_t candidates;	/* rows of the range, for Algorithm S */
	uint64_t seen;		/* rows of the range passed so far */
	uint64_t kept;
	uint64_t rng;
	/* The reservoir (Algorithm R), when the count is unknown. */
	int reservoir;
	void *res;
	char **res_lab;
	uint64_t *res_row;
	size_t res_n, res_cap;
};

static struct tq_writer *writer;	/* guard_writer: aborted at exit */

/*
 * splitmix64 (Steele, Lea and Flood 2014), seeded with the seed itself;
 * rand_below draws uniform integers in [0, b) by rejection, so a seed
 * picks the same rows on every machine.  Specified in tq-cat(1).
 */
static uint64_t
splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t
rand_below(uint64_t *s, uint64_t b)
{
	uint64_t t = -b % b, x;

	do
		x = splitmix64(s);
	while (x < t);
	return x % b;
}

static enum tq_vecfmt
parse_format(const char *s)
{
	size_t i;

	for (i = 0; i < NFORMATS; i++)
		if (strcmp(s, formats[i].name) == 0)
			return formats[i].fmt;
	usage_error("format '%s' is not one of fixture, fvecs, ivecs, bvecs, "
	    "npy, text, tsv, csv, vec, w2v", s);
}

/* The format an output name implies; fixture for any other name. */
static enum tq_vecfmt
suffix_format(const char *path)
{
	size_t i, n = strlen(path), k;

	for (i = 0; i < NFORMATS; i++) {
		if (formats[i].suffix == NULL)
			continue;
		k = strlen(formats[i].suffix);
		if (n > k && strcmp(path + n - k, formats[i].suffix) == 0)
			return formats[i].fmt;
	}
	return TQ_VEC_FIXTURE;
}

/* --rows a:b, either side empty. */
static void
parse_rows(const char *s, uint64_t *first, uint64_t *end)
{
	const char *colon = strchr(s, ':');
	char num[24];

	if (colon == NULL || (size_t)(colon - s) >= sizeof(num))
		usage_error("rows '%s' is not a:b", s);
	memcpy(num, s, (size_t)(colon - s));
	num[colon - s] = '\0';
	*first = num[0] == '\0' ? 0 : parse_u64(num, 0, NONE - 1, "rows start");
	*end = colon[1] == '\0' ? NONE :
	    parse_u64(colon + 1, 0, NONE - 1, "rows end");
	if (*end != NONE && *end < *first)
		usage_error("rows '%s': the end is before the start", s);
}

static void *
row_at(const struct cat *c, void *base, size_t i)
{
	return (char *)base + i * (size_t)c->dim * 4;
}

static void
write_rows(struct cat *c, void *rows, const char **lab, size_t n)
{
	enum tq_status st;

	if (n == 0)
		return;
	if (c->ints)
		st = tq_writer_write_i32(c->w, rows, n);
	else {
		if (c->o->normalize)
			tq_normalize_rows(rows, n, c->dim);
		st = tq_writer_write_labeled(c->w, rows, c->o->labels ? lab :
		    NULL, n);
	}
	if (st != TQ_OK)
		die_status(st, out_name(c->o->out));
	c->kept += n;
	if (c->quiet == 0)
		progress("%" PRIu64 " rows", c->kept);
}

/*
 * Algorithm R: the first n rows fill the reservoir; row t >= n then
 * replaces slot rand_below(t + 1) if that is below n.  The reservoir
 * grows with the rows that arrive, never to more than n.
 */
static void
reservoir_add(struct cat *c, const void *row, const char *label,
    uint64_t rowno)
{
	size_t rb = (size_t)c->dim * 4, slot;
	uint64_t t = c->seen;

	if (t < c->o->sample) {
		if (c->res_n == c->res_cap) {
			size_t cap = c->res_cap ? 2 * c->res_cap : 1024;

			if (cap > c->o->sample)
				cap = (size_t)c->o->sample;
			if (cap > SIZE_MAX / rb)
				die("out of memory");
			if ((c->res = realloc(c->res, cap * rb)) == NULL ||
			    (c->res_row = realloc(c->res_row,
			    cap * sizeof(*c->res_row))) == NULL ||
			    (c->res_lab = realloc(c->res_lab,
			    cap * sizeof(*c->res_lab))) == NULL)
				die("out of memory");
			c->res_cap = cap;
		}
		slot = c->res_n++;
	} else {
		uint64_t j = rand_below(&c->rng, t + 1);

		if (j >= c->o->sample)
			return;
		slot = (size_t)j;
		free(c->res_lab[slot]);
	}
	memcpy(row_at(c, c->res, slot), row, rb);
	c->res_row[slot] = rowno;
	c->res_lab[slot] = NULL;
	if (c->o->labels && (c->res_lab[slot] = strdup(label)) == NULL)
		die("out of memory");
}

/* Row numbers of the reservoir's slots, for qsort (they are distinct). */
static const uint64_t *sort_rows;

static int
by_row(const void *a, const void *b)
{
	uint64_t x = sort_rows[*(const size_t *)a];
	uint64_t y = sort_rows[*(const size_t *)b];

	return x < y ? -1 : x > y;
}

/* Writes the reservoir in input order, a chunk at a time. */
static void
reservoir_flush(struct cat *c)
{
	size_t rb = (size_t)c->dim * 4, i, k, n;
	size_t *order = xmallocarray(c->res_n, sizeof(*order));

	for (i = 0; i < c->res_n; i++)
		order[i] = i;
	sort_rows = c->res_row;
	qsort(order, c->res_n, sizeof(*order), by_row);
	for (i = 0; i < c->res_n; i += n) {
		n = c->res_n - i < c->chunk ? c->res_n - i : c->chunk;
		for (k = 0; k < n; k++) {
			memcpy(row_at(c, c->rows, k),
			    row_at(c, c->res, order[i + k]), rb);
			if (c->lab != NULL)
				c->lab[k] = c->res_lab[order[i + k]];
		}
		write_rows(c, c->rows, c->lab, n);
	}
	for (i = 0; i < c->res_n; i++)
		free(c->res_lab[i]);
	free(order);
}

/*
 * The rows rows[0..n) of the range (row numbers rowno0...) go on: all of
 * them, or the sample's.  Without a reservoir the kept rows are moved
 * to the front of the chunk and written at once.
 */
static void
take(struct cat *c, size_t n, uint64_t rowno0)
{
	size_t i, k = 0, rb = (size_t)c->dim * 4;

	if (c->o->sample == NONE) {
		write_rows(c, c->rows, c->lab, n);
		return;
	}
	for (i = 0; i < n; i++, c->seen++) {
		if (c->reservoir) {
			reservoir_add(c, row_at(c, c->rows, i),
			    c->lab != NULL ? c->lab[i] : NULL, rowno0 + i);
			continue;
		}
		/* Algorithm S: keep row t with probability (n - m) / (N - t). */
		if (c->kept + k >= c->o->sample ||
		    rand_below(&c->rng, c->candidates - c->seen) >=
		    c->o->sample - (c->kept + k))
			continue;
		if (k != i) {
			memcpy(row_at(c, c->rows, k), row_at(c, c->rows, i), rb);
			if (c->lab != NULL)
				c->lab[k] = c->lab[i];
		}
		k++;
	}
	if (!c->reservoir)
		write_rows(c, c->rows, c->lab, k);
}

/*
 * The labels of the n rows of the last read from its row `skip` on: the
 * input's own (labelled text, word2vec), or the rows' numbers in the
 * whole sequence.
 */
static void
label_rows(struct cat *c, struct tq_reader *r, size_t skip, size_t n,
    uint64_t rowno0)
{
	size_t i;

	if (c->lab == NULL)
		return;
	if (tq_reader_has_labels(r)) {
		for (i = 0; i < n; i++)
			c->lab[i] = tq_reader_label(r, skip + i);
		return;
	}
	for (i = 0; i < n; i++) {
		snprintf(c->num[i], LABEL_MAX, "%" PRIu64, rowno0 + i);
		c->lab[i] = c->num[i];
	}
}

/*
 * Reads the part of one input that falls in the range.  `off` is the
 * number of its first row in the whole sequence.  Returns the rows it
 * holds, or NONE when it reached the end of the range (the inputs after
 * it are not read).
 */
static uint64_t
cat_input(struct cat *c, const char *path, struct tq_reader *r, uint64_t off)
{
	const struct opts *o = c->o;
	int64_t count = tq_reader_count(r);
	uint64_t lo = 0, row = off, want;
	enum tq_status st;
	size_t got, skip, n;

	if (count >= 0) {
		uint64_t hi = (uint64_t)count;

		if (o->first > off)
			lo = o->first - off < hi ? o->first - off : hi;
		if (o->end != NONE)
			hi = o->end <= off ? 0 : o->end - off < hi ?
			    o->end - off : hi;
		if (hi <= lo)
			return (uint64_t)count;
		/* A file seeks to its rows; a stream reads up to them. */
		if ((lo > 0 || hi < (uint64_t)count) &&
		    tq_reader_window(r, lo, hi - lo) == TQ_OK)
			row = off + lo;
	}
	for (;;) {
		if (o->end != NONE && row >= o->end)
			return NONE;
		want = c->chunk;
		if (o->end != NONE && o->end - row < want)
			want = o->end - row;
		if (c->ints)
			st = tq_reader_read_i32(r, c->rows, (size_t)want, &got);
		else
			st = tq_reader_read(r, c->rows, (size_t)want, &got);
		if (st != TQ_OK)
			die_status(st, in_name(path));
		if (got == 0)
			break;
		/* Rows before the range are read and dropped. */
		skip = row >= o->first ? 0 : o->first - row < got ?
		    (size_t)(o->first - row) : got;
		n = got - skip;
		if (n > 0) {
			if (skip > 0)
				memmove(c->rows, row_at(c, c->rows, skip),
				    n * (size_t)c->dim * 4);
			label_rows(c, r, skip, n, row + skip);
			take(c, n, row + skip);
		}
		row += got;
	}
	return count >= 0 ? (uint64_t)count : row - off;
}

static void
cat(const struct opts *o, char **inputs, int ninputs)
{
	struct tq_reader **r = xcalloc((size_t)ninputs, sizeof(*r));
	struct cat c;
	enum tq_status st;
	uint64_t total = 0, off = 0, range, out_n, held;
	int i, known = 1;

	memset(&c, 0, sizeof(c));
	c.o = o;
	for (i = 0; i < ninputs; i++) {
		if ((st = tq_reader_open(inputs[i], o->dataset, &r[i])) != TQ_OK)
			die_status(st, in_name(inputs[i]));
		if (i == 0)
			c.dim = tq_reader_dim(r[0]);
		else if (tq_reader_dim(r[i]) != c.dim)
			die("%s: dimension %u does not match the first input's "
			    "(%u)", in_name(inputs[i]), tq_reader_dim(r[i]),
			    c.dim);
		if (tq_reader_count(r[i]) < 0)
			known = 0;
		else
			total += (uint64_t)tq_reader_count(r[i]);
	}
	/* ivecs to ivecs keeps every int32, past the floats' 2^24. */
	c.ints = o->fmt == TQ_VEC_IVECS && !o->normalize;
	for (i = 0; i < ninputs; i++)
		c.ints &= tq_reader_is_integer(r[i]) != 0;
	c.chunk = CHUNK_BYTES / ((size_t)c.dim * 4);
	if (c.chunk == 0)
		c.chunk = 1;
	c.rows = xmallocarray(c.chunk, (size_t)c.dim * 4);
	if (o->labels) {
		c.lab = xmallocarray(c.chunk, sizeof(*c.lab));
		c.num = xmallocarray(c.chunk, sizeof(*c.num));
	}
	c.rng = o->seed;
	c.quiet = strcmp(o->out, "-") == 0 && isatty(STDOUT_FILENO);

	/* The row count is known in advance when every input's is. */
	out_n = TQ_COUNT_UNKNOWN;
	if (known) {
		range = o->first >= total ? 0 :
		    (o->end == NONE || o->end > total ? total : o->end) -
		    o->first;
		c.candidates = range;
		out_n = o->sample < range ? o->sample : range;
	}
	c.reservoir = !known && o->sample != NONE;

	guard_writer(&writer);
	if ((st = tq_writer_open(o->out, o->fmt, c.dim, out_n, &writer)) !=
	    TQ_OK)
		die_status(st, out_name(o->out));
	c.w = writer;
	for (i = 0; i < ninputs; i++) {
		held = cat_input(&c, inputs[i], r[i], off);
		tq_reader_close(r[i]);
		r[i] = NULL;
		if (held == NONE)
			break;
		off += held;
	}
	if (c.reservoir)
		reservoir_flush(&c);
	progress_done();
	st = tq_writer_commit(writer);
	writer = NULL;
	if (st != TQ_OK)
		die_status(st, out_name(o->out));
	for (; i < ninputs; i++)
		tq_reader_close(r[i]);
	free(r);
	free(c.rows);
	free(c.lab);
	free(c.num);
	free(c.res);
	free(c.res_lab);
	free(c.res_row);
}

int
main(int argc, char *argv[])
{
	static char *stdin_only[] = { "-" };
	struct opts o;
	const char *format = NULL;
	int ch, seeded = 0;

	memset(&o, 0, sizeof(o));
	o.out = "-";
	o.end = NONE;
	o.sample = NONE;
	cmd_init(argv, usage_str, options_str);
	while ((ch = getopt_long(argc, argv, "f:ho:V", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			format = optarg;
			o.fmt = parse_format(optarg);
			break;
		case 'h':
			usage_help();
		case 'o':
			o.out = optarg;
			break;
		case 'V':
			print_version();
		case OPT_DATASET:
			o.dataset = optarg;
			break;
		case OPT_LABELS:
			o.labels = 1;
			break;
		case OPT_NORMALIZE:
			o.normalize = 1;
			break;
		case OPT_ROWS:
			parse_rows(optarg, &o.first, &o.end);
			break;
		case OPT_SAMPLE:
			o.sample = parse_u64(optarg, 1, NONE - 1, "sample");
			break;
		case OPT_SEED:
			o.seed = parse_u64(optarg, 0, UINT64_MAX, "seed");
			seeded = 1;
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	check_output(o.out);
	if (format == NULL)
		o.fmt = strcmp(o.out, "-") == 0 ? TQ_VEC_FIXTURE :
		    suffix_format(o.out);
	if (seeded && o.sample == NONE)
		usage_error("--seed needs --sample");
	/* word2vec and .vec rows always have a word. */
	if (o.fmt == TQ_VEC_VEC || o.fmt == TQ_VEC_W2V)
		o.labels = 1;
	if (o.labels && o.fmt != TQ_VEC_TEXT && o.fmt != TQ_VEC_TSV &&
	    o.fmt != TQ_VEC_CSV && o.fmt != TQ_VEC_VEC && o.fmt != TQ_VEC_W2V)
		usage_error("--labels needs a text output format (text, tsv, "
		    "csv, vec, w2v)");
	if (argc == 0)
		cat(&o, stdin_only, 1);
	else
		cat(&o, argv, argc);
	finish_stdout();
	return 0;
}
