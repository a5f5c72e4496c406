/*
 * vecio_text.c - vectors as text: one vector per line, numbers separated
 * by blanks (spaces or tabs) or by commas, with an optional leading label
 * column.  This covers GloVe .txt ("word v1 v2 ..."), fastText .vec (the
 * same after a first line "n dim") and a column of numbers from awk or jq.
 *
 * Everything is decided by the first line (the second for a .vec header):
 * a comma anywhere in it makes the file comma-separated; a first field
 * that is not a number makes the first column labels; the number of
 * values is the dimension, and every later line must have as many.  The
 * first line is a .vec header when it is two unsigned integers and the
 * line after it starts with a label.
 *
 * Lines are read one at a time from the byte source and never kept: a
 * line is at most TQ_RD_BUF bytes (1 MiB) with its newline, a label at
 * most TEXT_MAX_LABEL bytes.  CRLF line ends and blank lines at the end
 * are accepted; a blank line followed by more data is not.  Numbers are parsed in the C locale (a '.' decimal
 * point whatever the environment says) and must be finite as float32.
 */
#include <locale.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

/*
 * Longest label, in bytes: the labels of a read are kept until the next
 * one, so they must not grow a read's memory far past its rows.
 */
#define TEXT_MAX_LABEL 4096

/* Longest number accepted, in characters. */
#define NUM_MAX 511

/* Bids: a .vec header with a labelled row after it, or a plain line. */
#define BID_HEADER 45
#define BID_LINE 30
/* A first line that starts with a number but has something else after. */
#define BID_NUMBER 20

struct text {
	char sep;		/* ',' or 0 for blanks */
	int labels;		/* the first column is a label */
	uint64_t line;		/* number of the next line, from 1 */
	uint64_t hdr_n;		/* rows the .vec header claims, or UNKNOWN */
	uint64_t blank;		/* first blank line since the last row */
	char num[NUM_MAX + 1];
};

enum num { NUM_OK, NUM_BAD, NUM_NONFINITE };

static pthread_once_t c_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;

static void
c_init(void)
{
	c_locale = newlocale(LC_NUMERIC_MASK, "C", (locale_t)0);
}

static int
is_blank(int c)
{
	return c == ' ' || c == '\t';
}

static int
ci_eq(const char *s, size_t n, const char *w)
{
	size_t i;

	if (strlen(w) != n)
		return 0;
	for (i = 0; i < n; i++)
		if ((s[i] | 0x20) != w[i])
			return 0;
	return 1;
}

/*
 * Is s[0..n) a decimal number: [+-] digits [. digits] [(e|E) [+-] digits],
 * with a digit before or after the point?  "nan", "inf" and "infinity"
 * (any case, signed) are numbers that are not finite.
 */
static enum num
num_syntax(const char *s, size_t n)
{
	size_t i = 0, digits = 0;

	if (i < n && (s[i] == '+' || s[i] == '-'))
		i++;
	if (ci_eq(s + i, n - i, "nan") || ci_eq(s + i, n - i, "inf") ||
	    ci_eq(s + i, n - i, "infinity"))
		return NUM_NONFINITE;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
		digits++;
	if (i < n && s[i] == '.')
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			digits++;
	if (digits == 0)
		return NUM_BAD;
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		if (i == n || s[i] < '0' || s[i] > '9')
			return NUM_BAD;
		while (i < n && s[i] >= '0' && s[i] <= '9')
			i++;
	}
	return i == n ? NUM_OK : NUM_BAD;
}

/* Parses a number checked by num_syntax into *v (NUM_NONFINITE past FLT_MAX). */
static enum num
num_parse(char *buf, const char *s, size_t n, float *v)
{
	enum num k = num_syntax(s, n);
	char *end;

	if (k != NUM_OK)
		return k;
	if (n > NUM_MAX)
		return NUM_BAD;
	memcpy(buf, s, n);
	buf[n] = '\0';
	pthread_once(&c_once, c_init);
	*v = c_locale != (locale_t)0 ? strtof_l(buf, &end, c_locale) :
	    strtof(buf, &end);
	if (end != buf + n)
		return NUM_BAD;
	{
		uint32_t u;

		memcpy(&u, v, 4);
		if ((u & 0x7f800000u) == 0x7f800000u)
			return NUM_NONFINITE;
	}
	return NUM_OK;
}

/*
 * The next field of the line p[0..len) from *at: *start and *n, with
 * blanks around it dropped.  Returns 0 when the line has no more fields.
 */
static int
next_field(const char *p, size_t len, char sep, size_t *at, size_t *start,
    size_t *n)
{
	size_t i = *at, e;

	if (sep == 0) {
		while (i < len && is_blank(p[i]))
			i++;
		if (i == len)
			return 0;
		*start = i;
		while (i < len && !is_blank(p[i]))
			i++;
		*n = i - *start;
		*at = i;
		return 1;
	}
	if (i > len)
		return 0;
	while (i < len && is_blank(p[i]))
		i++;
	*start = i;
	while (i < len && p[i] != sep)
		i++;
	e = i;
	while (e > *start && is_blank(p[e - 1]))
		e--;
	*n = e - *start;
	*at = i + 1;		/* past the separator, or len + 1 at the end */
	return 1;
}

static int
line_blank(const char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (!is_blank(p[i]))
			return 0;
	return 1;
}

/* Blanks and line ends only? */
static int
all_space(const char *p, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (!is_blank(p[i]) && p[i] != '\r' && p[i] != '\n')
			return 0;
	return 1;
}

/* The length of the line at p[0..avail) without "\n" or "\r\n". */
static size_t
line_len(const char *p, size_t len)
{
	if (len > 0 && p[len - 1] == '\r')
		len--;
	return len;
}

/*
 * What a first data line says: its separator, whether it starts with a
 * label, and how many values follow.  2 if it is a line of numbers, 1 if
 * it only starts with one (text whose errors are worth a line and column),
 * 0 otherwise.
 */
static int
line_shape(const char *p, size_t len, char *sep, int *labels, size_t *vals)
{
	size_t at = 0, s, n, k = 0, i;
	int first = 1, bad = 0;

	*sep = memchr(p, ',', len) != NULL ? ',' : 0;
	*labels = 0;
	while (next_field(p, len, *sep, &at, &s, &n)) {
		if (num_syntax(p + s, n) != NUM_BAD)
			k++;
		else if (first && n > 0)
			*labels = 1;
		else
			bad = k++ + 1;
		first = 0;
	}
	*vals = k;
	if (!bad && k > 0 && memchr(p, '\0', len) == NULL)
		return 2;
	if (*labels || k == 0)
		return 0;
	for (i = 0; i < len; i++)
		if ((unsigned char)p[i] < 0x20 && p[i] != '\t')
			return 0;
	return 1;
}

/* Is p[0..len) two unsigned integers, n and dim? */
static int
vec_header(const char *p, size_t len, uint64_t *n, uint64_t *dim)
{
	uint64_t v[2] = { 0, 0 };
	size_t at = 0, s, k, i, f = 0;

	while (next_field(p, len, 0, &at, &s, &k)) {
		if (f == 2 || k > 19)
			return 0;
		for (i = 0; i < k; i++) {
			if (p[s + i] < '0' || p[s + i] > '9')
				return 0;
			v[f] = 10 * v[f] + (uint64_t)(p[s + i] - '0');
		}
		f++;
	}
	*n = v[0];
	*dim = v[1];
	return f == 2;
}

/* Does the line after line 1 start with a label and hold only text after? */
static int
labelled_row(const char *p, size_t len)
{
	size_t at = 0, s, n, i;
	char sep = memchr(p, ',', len) != NULL ? ',' : 0;

	if (!next_field(p, len, sep, &at, &s, &n) ||
	    num_syntax(p + s, n) != NUM_BAD)
		return 0;
	for (i = at; i < len; i++)
		if (((unsigned char)p[i] < 0x20 && p[i] != '\t') ||
		    (unsigned char)p[i] >= 0x7f)
			return 0;
	return 1;
}

static int
text_bid(const struct tq_sniff *sn)
{
	const char *p = (const char *)sn->p, *nl, *nl2;
	size_t len, len2;
	uint64_t n, dim;
	size_t vals;
	char sep;
	int labels;

	/* Until the first line is there (a person may be typing it). */
	if (all_space(p, sn->avail))
		return sn->eof ? BID_LINE : sn->full ? 0 : TQ_BID_MORE;
	nl = memchr(p, '\n', sn->avail);
	if (nl == NULL && !sn->eof)
		return sn->full ? 0 : TQ_BID_MORE;
	len = nl != NULL ? (size_t)(nl - p) : sn->avail;
	len = line_len(p, len);
	if (nl != NULL && vec_header(p, len, &n, &dim)) {
		/* A .vec header, if the next line starts with a label. */
		p = nl + 1;
		len2 = sn->avail - (size_t)(p - (const char *)sn->p);
		nl2 = memchr(p, '\n', len2);
		if (nl2 == NULL && !sn->eof && !sn->full)
			return TQ_BID_MORE;
		if (nl2 != NULL)
			len2 = (size_t)(nl2 - p);
		if (labelled_row(p, line_len(p, len2)))
			return BID_HEADER;
		p = (const char *)sn->p;
	}
	switch (line_shape(p, len, &sep, &labels, &vals)) {
	case 2:
		return BID_LINE;
	case 1:
		return BID_NUMBER;
	}
	return 0;
}

/*
 * Makes the next line available: *p and *len (without its newline),
 * *used the bytes to consume for it.  *len == SIZE_MAX at the end.
 */
static enum tq_status
get_line(struct tq_reader *r, struct text *t, const char **p, size_t *len,
    size_t *used)
{
	struct tq_src *s = &r->src;
	size_t scanned = 0, got;
	const char *nl;

	for (;;) {
		const char *b = (const char *)tq_src_ptr(s);
		size_t avail = tq_src_avail(s);

		nl = memchr(b + scanned, '\n', avail - scanned);
		if (nl != NULL) {
			*p = b;
			*len = (size_t)(nl - b);
			*used = *len + 1;
			return TQ_OK;
		}
		if (s->eof) {
			*p = b;
			*len = avail == 0 ? SIZE_MAX : avail;
			*used = avail;
			return TQ_OK;
		}
		if (avail >= TQ_RD_BUF)
			return tq_fail(TQ_ERR_FORMAT, "line %llu: longer than "
			    "%zu bytes", (ull)t->line, TQ_RD_BUF);
		scanned = avail;
		TQ_TRY(tq_src_more(s, &got));
	}
}

/* Parses one line of values into out[dim] (and its label). */
static enum tq_status
parse_row(struct tq_reader *r, struct text *t, const char *p, size_t len,
    float *out)
{
	size_t at = 0, s, n, vals = 0;
	const char *z;
	int first = 1;

	if ((z = memchr(p, '\0', len)) != NULL)
		return tq_fail(TQ_ERR_FORMAT, "line %llu, column %llu: NUL "
		    "byte", (ull)t->line, (ull)(z - p + 1));
	while (next_field(p, len, t->sep, &at, &s, &n)) {
		float v = 0;
		enum num k;

		if (first && t->labels) {
			first = 0;
			if (n > TEXT_MAX_LABEL)
				return tq_fail(TQ_ERR_FORMAT, "line %llu: label "
				    "longer than %d bytes", (ull)t->line,
				    TEXT_MAX_LABEL);
			TQ_TRY(tq_reader_label_add(r, p + s, n));
			continue;
		}
		first = 0;
		if (vals < r->dim) {
			k = num_parse(t->num, p + s, n, &v);
			if (k == NUM_BAD)
				return tq_fail(TQ_ERR_FORMAT, "line %llu, column "
				    "%llu: not a number: '%.*s'", (ull)t->line,
				    (ull)(s + 1), n > 40 ? 40 : (int)n, p + s);
			if (k == NUM_NONFINITE)
				return tq_fail(TQ_ERR_NONFINITE, "line %llu, "
				    "column %llu: value is NaN or infinite",
				    (ull)t->line, (ull)(s + 1));
			out[vals] = v;
		}
		vals++;
	}
	if (vals != r->dim)
		return tq_fail(TQ_ERR_FORMAT, "line %llu: %zu value%s, expected "
		    "%lu", (ull)t->line, vals, vals == 1 ? "" : "s",
		    (unsigned long)r->dim);
	return TQ_OK;
}

/* After the rows a header claims only blank lines may follow. */
static enum tq_status
check_end(struct tq_reader *r, struct text *t)
{
	const char *p;
	size_t len, used;

	for (;;) {
		TQ_TRY(get_line(r, t, &p, &len, &used));
		if (len == SIZE_MAX)
			return TQ_OK;
		if (!line_blank(p, line_len(p, len)))
			return tq_fail(TQ_ERR_FORMAT, "line %llu: more rows "
			    "than the %llu the header claims", (ull)t->line,
			    (ull)t->hdr_n);
		tq_src_consume(&r->src, used);
		t->line++;
	}
}

static enum tq_status
text_read(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	struct text *t = r->priv;
	size_t done = 0, len, used;
	const char *p;

	(void)iv;		/* text holds floats: the core refused int32 */
	while (done < max && !r->ended) {
		if (r->claimed != TQ_RD_UNKNOWN && r->row == r->claimed) {
			r->ended = 1;
			if (r->claimed == t->hdr_n)
				TQ_TRY(check_end(r, t));
			break;
		}
		TQ_TRY(get_line(r, t, &p, &len, &used));
		if (len == SIZE_MAX) {
			r->ended = 1;
			if (r->claimed != TQ_RD_UNKNOWN)
				return tq_fail(TQ_ERR_FORMAT, "truncated: "
				    "expected %llu rows, got %llu",
				    (ull)r->claimed, (ull)r->row);
			break;
		}
		len = line_len(p, len);
		if (line_blank(p, len)) {
			if (t->blank == 0)
				t->blank = t->line;
		} else {
			if (t->blank != 0)
				return tq_fail(TQ_ERR_FORMAT, "line %llu: "
				    "blank line", (ull)t->blank);
			TQ_TRY(parse_row(r, t, p, len,
			    f + done * (size_t)r->dim));
			r->row++;
			done++;
		}
		tq_src_consume(&r->src, used);
		t->line++;
	}
	*got = done;
	return TQ_OK;
}

static enum tq_status
text_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_src *s = &r->src;
	struct text *t;
	const char *p;
	size_t len, used, vals;
	uint64_t n = 0, dim = 0;
	int header = 0;

	if ((t = calloc(1, sizeof(*t))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	r->priv = t;
	t->line = 1;
	t->hdr_n = TQ_RD_UNKNOWN;
	r->claimed = TQ_RD_UNKNOWN;
	r->count = -1;
	TQ_TRY(get_line(r, t, &p, &len, &used));
	if (len == SIZE_MAX || line_blank(p, line_len(p, len)))
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	len = line_len(p, len);
	if (used > len && vec_header(p, len, &n, &dim)) {
		/* The bid saw these bytes too: decide as it did. */
		const char *q = p + used, *nl;
		size_t rest = tq_src_avail(s) - used, len2;

		nl = memchr(q, '\n', rest);
		len2 = nl != NULL ? (size_t)(nl - q) : rest;
		if (labelled_row(q, line_len(q, len2))) {
			header = 1;
			tq_src_consume(s, used);
			t->line = 2;
			TQ_TRY(get_line(r, t, &p, &len, &used));
			len = line_len(p, len);
		}
	}
	if (header) {
		if (dim < 1 || dim > TQ_MAX_DIM)
			return tq_fail(TQ_ERR_FORMAT, "line 1: the header's "
			    "dimension %llu is not in 1..%u", (ull)dim,
			    TQ_MAX_DIM);
		t->sep = memchr(p, ',', len) != NULL ? ',' : 0;
		t->labels = 1;
		vals = (size_t)dim;
		if (n == 0)
			return tq_fail(TQ_ERR_EMPTY, "no vectors");
		/* Each row takes at least a label and dim numbers with blanks. */
		if (s->regular && s->zd == NULL && n > s->size / (2 * dim + 1))
			return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows "
			    "of dim %llu but the file holds %llu bytes",
			    (ull)n, (ull)dim, (ull)s->size);
		t->hdr_n = n;
		r->claimed = n;
		if (s->regular && s->zd == NULL) {
			r->count = (int64_t)n;
			r->sized = 1;
		}
	} else {
		/* A line the bid took for text with errors fails in a read. */
		(void)line_shape(p, len, &t->sep, &t->labels, &vals);
		if (vals == 0)
			return tq_fail(TQ_ERR_FORMAT, "line 1: no numbers");
		if (vals > TQ_MAX_DIM)
			return tq_fail(TQ_ERR_UNSUPPORTED, "line 1: %zu values "
			    "(at most %u)", vals, TQ_MAX_DIM);
	}
	r->dim = (uint32_t)vals;
	r->is_integer = 0;
	r->has_labels = t->labels;
	return TQ_OK;
}

static void
text_close(struct tq_reader *r)
{
	free(r->priv);
	r->priv = NULL;
}

const struct tq_rformat tq_rformat_text = {
	.name = "text",
	.bid = text_bid,
	.open = text_open,
	.read = text_read,
	.close = text_close,
	.window = TQ_WIN_NONE,
};
