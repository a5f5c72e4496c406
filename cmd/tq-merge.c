/*
 * tq-merge - the global top-k of the queries from the top-k results of
 * every shard of a corpus (tq-search output, tsv or JSON Lines).
 *
 * The inputs are read in step, one query at a time, so memory holds one
 * query's results of each input whatever the number of queries, and the
 * inputs may be pipes.  Anything that would make the merge a partial or
 * mixed answer stops it: a missing or empty input, different query counts
 * or result counts, results out of rank order for the metric, an id
 * found in two inputs.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char usage_str[] =
    "tq-merge (-m metric | -q quantizer) [-k k] [-o output]\n"
    "                [--format tsv|json|ivecs] result ...";

static const char help_str[] =
    "      --format tsv|json|ivecs  the output format (default tsv)\n"
    "  -h, --help            print this help and exit\n"
    "  -k k                  results per query (default: as many as the inputs have)\n"
    "  -m metric             the metric of the search: l2, ip or cosine\n"
    "  -o output             where to write the merged results (default -: stdout)\n"
    "  -q quantizer          take the metric from this quantizer or index\n"
    "  -V, --version         print the version and exit\n";

enum { OPT_FORMAT = 256 };

static const struct option longopts[] = {
	{ "format",	required_argument,	NULL, OPT_FORMAT },
	{ "help",	no_argument,		NULL, 'h' },
	{ "version",	no_argument,		NULL, 'V' },
	{ NULL,		0,			NULL, 0 }
};


struct hit {
	float score;
	uint64_t id;
	size_t input;
};

struct input {
	const char *name;	/* for messages: the path, "stdin" for "-" */
	FILE *fp;
	char *line;
	size_t cap;
	uint64_t lineno;
	int json;		/* decided by the first line */
	int eof;
	/* tsv: the first line of the next query, already parsed */
	int ahead;
	uint64_t aq;
	struct hit ah;
	/* the current query's results, in rank order */
	struct hit *h;
	size_t n, hcap;
};

/* Every input, so that the exit handler can close them. */
static struct input *inputs;
static size_t ninputs;
static int lower_better;	/* l2: scores ascend down the ranks */

static void
free_inputs(void *arg, int in_signal)
{
	size_t i;

	if (in_signal)
		return;
	for (i = 0; i < ninputs; i++) {
		if (inputs[i].fp != NULL && inputs[i].fp != stdin)
			fclose(inputs[i].fp);
		free(inputs[i].line);
		free(inputs[i].h);
	}
	free(inputs);
	inputs = NULL;
	ninputs = 0;
}

/* a ranks before b: the better score, then the smaller id. */
static int
before(const struct hit *a, const struct hit *b)
{
	if (a->score != b->score)
		return lower_better ? a->score < b->score : a->score > b->score;
	return a->id < b->id;
}

static int
cmp_rank(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;

	if (before(x, y))
		return -1;
	if (before(y, x))
		return 1;
	return 0;
}

static int
cmp_id(const void *a, const void *b)
{
	const struct hit *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static NORETURN void PRINTFLIKE(2, 3)
bad(const struct input *in, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	die("%s: line %llu: %s", in->name, (unsigned long long)in->lineno,
	    msg);
}

/* A decimal u64 at *p, digits only; advances *p past it. */
static int
get_u64(const char **p, uint64_t *v)
{
	const char *s = *p;
	uint64_t x = 0;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (x > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*v = x;
	return 0;
}

/* A finite score as tq-search prints it (%.9g); advances *p past it. */
static int
get_score(const char **p, float *v)
{
	char *end;

	if (**p == '\0' || strchr("+-.0123456789", **p) == NULL)
		return -1;
	errno = 0;
	*v = strtof(*p, &end);
	/* ERANGE also flags a subnormal score, which is still exact. */
	if (end == *p || !isfinite(*v))
		return -1;
	*p = end;
	return 0;
}

/* Reads the next line without its newline; 0 at the end of the input. */
static int
next_line(struct input *in)
{
	ssize_t len;

	errno = 0;
	len = getline(&in->line, &in->cap, in->fp);
	if (len < 0) {
		if (ferror(in->fp))
			die_errno("%s", in->name);
		return 0;
	}
	in->lineno++;
	if (len == 0 || in->line[len - 1] != '\n')
		bad(in, "no newline at the end (truncated?)");
	in->line[len - 1] = '\0';
	if ((size_t)len - 1 != strlen(in->line))
		bad(in, "holds a NUL byte");
	return 1;
}

static void
push(struct input *in, const struct hit *h)
{
	if (in->n == in->hcap) {
		struct hit *p;

		in->hcap = in->hcap ? 2 * in->hcap : 64;
		if (in->hcap > SIZE_MAX / sizeof(*p) ||
		    (p = realloc(in->h, in->hcap * sizeof(*p))) == NULL)
			die("out of memory");
		in->h = p;
	}
	in->h[in->n++] = *h;
}

/* "query<TAB>rank<TAB>id<TAB>score" into *q, *rank and *h. */
static void
parse_tsv(struct input *in, uint64_t *q, uint64_t *rank, struct hit *h)
{
	const char *p = in->line;

	if (get_u64(&p, q) != 0 || *p++ != '\t' ||
	    get_u64(&p, rank) != 0 || *p++ != '\t' ||
	    get_u64(&p, &h->id) != 0 || *p++ != '\t' ||
	    get_score(&p, &h->score) != 0 || *p != '\0')
		bad(in, "not a tq-search result "
		    "(query<TAB>rank<TAB>id<TAB>score)");
}

static void
skip_ws(const char **p)
{
	while (**p == ' ' || **p == '\t' || **p == '\r')
		(*p)++;
}

static int
expect(const char **p, const char *lit)
{
	size_t n = strlen(lit);

	skip_ws(p);
	if (strncmp(*p, lit, n) != 0)
		return -1;
	*p += n;
	return 0;
}

/*
 * One JSON Lines object as tq-search writes it,
 * {"query":Q,"ids":[...],"scores":[...]}, into *q and in->h.
 */
static void
parse_json(struct input *in, uint64_t *q)
{
	const char *p = in->line, *ids, *sc;
	struct hit h;
	size_t i, nid = 0;

	in->n = 0;
	if (expect(&p, "{") || expect(&p, "\"query\"") || expect(&p, ":"))
		goto fail;
	skip_ws(&p);
	if (get_u64(&p, q) || expect(&p, ",") || expect(&p, "\"ids\"") ||
	    expect(&p, ":") || expect(&p, "["))
		goto fail;
	/* The ids first, then the scores beside them. */
	ids = p;
	skip_ws(&p);
	if (*p != ']')
		for (;;) {
			skip_ws(&p);
			if (get_u64(&p, &h.id))
				goto fail;
			nid++;
			skip_ws(&p);
			if (*p == ']')
				break;
			if (*p++ != ',')
				goto fail;
		}
	p++;
	if (expect(&p, ",") || expect(&p, "\"scores\"") || expect(&p, ":") ||
	    expect(&p, "["))
		goto fail;
	sc = p;
	p = ids;
	for (i = 0; i < nid; i++) {
		skip_ws(&p);
		(void)get_u64(&p, &h.id);
		skip_ws(&p);
		p++;			/* ',' or ']' */
		skip_ws(&sc);
		if (get_score(&sc, &h.score))
			goto fail;
		skip_ws(&sc);
		if (*sc != (i + 1 < nid ? ',' : ']'))
			bad(in, "query %llu: the ids and scores differ in "
			    "number", (unsigned long long)*q);
		sc++;
		h.input = (size_t)(in - inputs);
		push(in, &h);
	}
	if (nid == 0 && (skip_ws(&sc), *sc++ != ']'))
		bad(in, "query %llu: the ids and scores differ in number",
		    (unsigned long long)*q);
	p = sc;
	if (expect(&p, "}"))
		goto fail;
	skip_ws(&p);
	if (*p == '\0')
		return;
fail:
	bad(in, "not a tq-search JSON result "
	    "({\"query\":Q,\"ids\":[...],\"scores\":[...]})");
}

/*
 * Reads query q of an input into in->h.  Returns 0 if the input ended
 * before it (cleanly, after query q - 1), 1 otherwise.
 */
static int
read_query(struct input *in, uint64_t q)
{
	uint64_t qq, rank;
	struct hit h;

	in->n = 0;
	if (in->eof)
		return 0;
	if (q == 0 && !in->ahead) {
		if (!next_line(in)) {
			in->eof = 1;
			return 0;
		}
		in->json = in->line[0] == '{';
		if (!in->json) {
			parse_tsv(in, &in->aq, &rank, &in->ah);
			if (rank != 1)
				bad(in, "query %llu starts at rank %llu",
				    (unsigned long long)in->aq,
				    (unsigned long long)rank);
			in->ahead = 1;
		}
	} else if (in->json && !next_line(in)) {
		in->eof = 1;
		return 0;
	}
	if (in->json) {
		parse_json(in, &qq);
		if (qq != q)
			bad(in, "query %llu where query %llu was expected",
			    (unsigned long long)qq, (unsigned long long)q);
		return 1;
	}
	if (!in->ahead) {
		in->eof = 1;
		return 0;
	}
	if (in->aq != q)
		bad(in, "query %llu where query %llu was expected",
		    (unsigned long long)in->aq, (unsigned long long)q);
	in->ah.input = (size_t)(in - inputs);
	push(in, &in->ah);
	in->ahead = 0;
	while (next_line(in)) {
		parse_tsv(in, &qq, &rank, &h);
		if (qq != q) {
			if (rank != 1)
				bad(in, "query %llu starts at rank %llu",
				    (unsigned long long)qq,
				    (unsigned long long)rank);
			in->aq = qq;
			in->ah = h;
			in->ahead = 1;
			break;
		}
		if (rank != in->n + 1)
			bad(in, "query %llu: rank %llu where %zu was expected",
			    (unsigned long long)q, (unsigned long long)rank,
			    in->n + 1);
		h.input = (size_t)(in - inputs);
		push(in, &h);
	}
	return 1;
}

/* The results of a query must be in rank order for the metric. */
static void
check_order(const struct input *in, uint64_t q)
{
	size_t j;

	for (j = 1; j < in->n; j++) {
		const struct hit *a = &in->h[j - 1], *b = &in->h[j];

		if (before(a, b))
			continue;
		if (a->score != b->score)
			die("%s: query %llu: scores %s at rank %zu, but the "
			    "metric ranks %s scores first", in->name,
			    (unsigned long long)q, lower_better ? "descend" :
			    "ascend", j + 1, lower_better ? "lower" : "higher");
		die("%s: query %llu: equal scores not ordered by id at rank "
		    "%zu", in->name, (unsigned long long)q, j + 1);
	}
}

static void
write_query(struct out *o, enum result_format fmt, uint64_t q, const struct hit *h,
    size_t k, uint8_t *buf)
{
	size_t j;

	switch (fmt) {
	case FMT_TSV:
		for (j = 0; j < k; j++)
			out_printf(o, "%llu\t%zu\t%llu\t%.9g\n",
			    (unsigned long long)q, j + 1,
			    (unsigned long long)h[j].id, (double)h[j].score);
		break;
	case FMT_JSON:
		out_printf(o, "{\"query\":%llu,\"ids\":[", (unsigned long long)q);
		for (j = 0; j < k; j++)
			out_printf(o, "%s%llu", j ? "," : "",
			    (unsigned long long)h[j].id);
		out_printf(o, "],\"scores\":[");
		for (j = 0; j < k; j++)
			out_printf(o, "%s%.9g", j ? "," : "",
			    (double)h[j].score);
		out_printf(o, "]}\n");
		break;
	case FMT_IVECS:
		put_le32(buf, (uint32_t)k);
		for (j = 0; j < k; j++) {
			if (h[j].id > INT32_MAX)
				die("%s: id %llu does not fit in ivecs (int32)",
				    out_name(o->path),
				    (unsigned long long)h[j].id);
			put_le32(buf + 4 + 4 * j, (uint32_t)h[j].id);
		}
		out_write(o, buf, 4 + 4 * k);
		break;
	}
}

/* Copies the spooled output to standard output (see main). */
static void
copy_out(struct out *o)
{
	char chunk[65536];
	size_t len;

	if (fflush(o->fp) == EOF || ferror(o->fp) || fseek(o->fp, 0, SEEK_SET))
		die_errno("temporary file for stdout");
	while ((len = fread(chunk, 1, sizeof(chunk), o->fp)) > 0)
		if (fwrite(chunk, 1, len, stdout) != len) {
			if (errno == EPIPE)
				exit(1);
			die_errno("stdout");
		}
	if (ferror(o->fp))
		die_errno("temporary file for stdout");
	fclose(o->fp);
	o->fp = stdout;
}

static enum tq_metric
metric_of(const char *path)
{
	struct tq_file_info info;
	enum tq_status st;

	if ((st = tq_file_info(path, &info)) != TQ_OK)
		die_status(st, path);
	return info.metric;
}

int
main(int argc, char *argv[])
{
	enum result_format fmt = FMT_TSV;
	enum tq_metric metric = TQ_METRIC_L2;
	const char *outpath = "-", *qpath = NULL;
	struct out o;
	/* Static, so that they stay reachable when a failure exits. */
	static struct hit *all;
	static uint8_t *buf;
	uint64_t q;
	size_t i, k = 0, kin = 0, n;
	int ch, mset = 0, nstdin = 0;

	cmd_init(argv, usage_str, help_str);
	while ((ch = getopt_long(argc, argv, "hk:m:o:q:V", longopts,
	    NULL)) != -1) {
		switch (ch) {
		case 'h':
			usage_help();
		case 'k':
			k = parse_u32(optarg, 1, 1000000, "k");
			break;
		case 'm':
			metric = parse_metric(optarg);
			mset = 1;
			break;
		case 'o':
			outpath = optarg;
			break;
		case 'q':
			qpath = optarg;
			break;
		case 'V':
			print_version();
		case OPT_FORMAT:
			fmt = parse_result_format(optarg);
			break;
		default:
			usage_exit();
		}
	}
	argc -= optind;
	argv += optind;
	check_output(outpath);
	if (mset + (qpath != NULL) != 1)
		usage_error("give the metric with exactly one of -m and -q");
	if (argc < 1)
		usage_error("missing result files");
	for (i = 0; i < (size_t)argc; i++)
		if (strcmp(argv[i], "-") == 0 && ++nstdin > 1)
			usage_error("standard input given twice");
	if (qpath != NULL)
		metric = metric_of(qpath);
	lower_better = metric == TQ_METRIC_L2;

	ninputs = (size_t)argc;
	inputs = xcalloc(ninputs, sizeof(*inputs));
	at_cleanup(free_inputs, NULL);
	for (i = 0; i < ninputs; i++) {
		struct input *in = &inputs[i];

		in->name = in_name(argv[i]);
		if (strcmp(argv[i], "-") == 0)
			in->fp = stdin;
		else if ((in->fp = fopen(argv[i], "r")) == NULL)
			die_errno("%s", argv[i]);
	}

	out_open(&o, outpath);
	/*
	 * Standard output cannot be renamed into place: it is held in a
	 * temporary file and copied out only once every input has been
	 * merged, so a failure never leaves a partial answer on a pipe.
	 */
	if (o.fp == stdout && (o.fp = tmpfile()) == NULL)
		die_errno("temporary file for stdout");
	for (q = 0;; q++) {
		/* The first input decides whether there is a query q. */
		if (!read_query(&inputs[0], q)) {
			if (q == 0)
				die("%s: no results", inputs[0].name);
			for (i = 1; i < ninputs; i++)
				if (read_query(&inputs[i], q))
					die("%s: more queries than %s (%llu)",
					    inputs[i].name, inputs[0].name,
					    (unsigned long long)q);
			break;
		}
		if (q == 0) {
			kin = inputs[0].n;
			if (kin == 0)
				die("%s: query 0 has no results", inputs[0].name);
			if (k == 0)
				k = kin;
			if (k > kin)
				die("%s: k (%zu) exceeds its %zu results per "
				    "query", inputs[0].name, k, kin);
			all = xmallocarray(ninputs, kin * sizeof(*all));
			buf = xmallocarray(k + 1, 4);
		}
		for (i = 0; i < ninputs; i++) {
			struct input *in = &inputs[i];

			if (i > 0 && !read_query(in, q)) {
				if (q == 0)
					die("%s: no results", in->name);
				die("%s: ends after %llu queries, %s has more",
				    in->name, (unsigned long long)q,
				    inputs[0].name);
			}
			if (in->n != kin)
				die("%s: query %llu has %zu results, %s has %zu "
				    "(a different k, or a filtered search)",
				    in->name, (unsigned long long)q, in->n,
				    i > 0 ? inputs[0].name : "query 0", kin);
			check_order(in, q);
			memcpy(all + i * kin, in->h, kin * sizeof(*all));
		}
		n = ninputs * kin;
		/* An id in two inputs: overlapping shards, or one twice. */
		qsort(all, n, sizeof(*all), cmp_id);
		for (i = 1; i < n; i++)
			if (all[i].id == all[i - 1].id)
				die("%s: query %llu: id %llu is also in %s "
				    "(overlapping shards?)",
				    inputs[all[i].input].name,
				    (unsigned long long)q,
				    (unsigned long long)all[i].id,
				    inputs[all[i - 1].input].name);
		qsort(all, n, sizeof(*all), cmp_rank);
		write_query(&o, fmt, q, all, k, buf);
		progress("%llu queries", (unsigned long long)q + 1);
	}
	progress_done();
	if (strcmp(outpath, "-") == 0)
		copy_out(&o);
	out_commit(&o);
	free(all);
	free(buf);
	return 0;
}
