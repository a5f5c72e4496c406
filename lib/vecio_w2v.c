/*
 * vecio_w2v.c - word2vec binary files: a text line "n dim", then per row
 * a word, one space and dim little-endian float32, optionally followed by
 * a newline (the original tool writes one).
 *
 * The first line is the same as a fastText .vec header, so the bid looks
 * after the first word of row 1: text has numbers there, word2vec binary
 * floats, which always hold bytes that are not printable ASCII.  Rows are
 * streamed; the count is checked at the end (and against the size of a
 * regular file, which must hold at least n rows of one letter, a space
 * and dim floats).  A word is at most W2V_MAX_WORD bytes, without NUL
 * bytes or newlines.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

#define W2V_MAX_WORD 4096
/* The longest "n dim" line accepted. */
#define W2V_MAX_HEADER 64

/*
 * "n dim\n" at p[0..avail): the numbers and the bytes of the line with its
 * newline.  1 if it is one, 0 if not, -1 if the bytes end before it can
 * tell.
 */
static int
w2v_header(const uint8_t *p, size_t avail, uint64_t *n, uint64_t *dim,
    size_t *used)
{
	uint64_t v[2] = { 0, 0 };
	size_t i = 0, f, k;

	for (f = 0; f < 2; f++) {
		if (f == 1) {
			if (i >= avail)
				return -1;
			if (p[i] != ' ')
				return 0;
			i++;
		}
		for (k = 0; i < avail && p[i] >= '0' && p[i] <= '9'; i++, k++)
			if (k < 19)
				v[f] = 10 * v[f] + (uint64_t)(p[i] - '0');
			else
				return 0;
		if (i >= avail && i < W2V_MAX_HEADER)
			return -1;
		if (k == 0)
			return 0;
	}
	while (i < avail && (p[i] == ' ' || p[i] == '\r'))
		i++;
	if (i >= W2V_MAX_HEADER)
		return 0;
	if (i >= avail)
		return -1;
	if (p[i] != '\n')
		return 0;
	*n = v[0];
	*dim = v[1];
	*used = i + 1;
	return 1;
}

static int
w2v_bid(const struct tq_sniff *sn)
{
	const uint8_t *p = sn->p, *sp;
	uint64_t n, dim;
	size_t used, rest, i, k;
	int h, more = sn->full ? 0 : TQ_BID_MORE;

	h = w2v_header(p, sn->avail, &n, &dim, &used);
	if (h <= 0)
		return h < 0 && !sn->eof ? more : 0;
	/* A bad dimension is word2vec's to report, if the rest is. */
	if (dim < 4)
		dim = 4;
	if (dim > TQ_MAX_DIM)
		dim = TQ_MAX_DIM;
	p += used;
	rest = sn->avail - used;
	k = rest < W2V_MAX_WORD + 1 ? rest : W2V_MAX_WORD + 1;
	sp = memchr(p, ' ', k);
	if (sp == NULL) {
		if (memchr(p, '\n', k) != NULL)
			return 0;
		/* An overlong first word, not a line of text. */
		if (k > W2V_MAX_WORD)
			return 40;
		return sn->eof ? 0 : more;
	}
	if (sp == p || memchr(p, '\n', (size_t)(sp - p)) != NULL)
		return 0;
	/*
	 * The floats of row 0, as far as they were shown: a byte that text
	 * never holds says binary.  (Each float has one with a probability
	 * of about 98%; text has none.)
	 */
	p = sp + 1;
	rest -= (size_t)(p - (sn->p + used));
	k = rest < 4 * dim ? rest : (size_t)(4 * dim);
	for (i = 0; i < k; i++)
		if ((p[i] < 0x20 && p[i] != '\t' && p[i] != '\n' &&
		    p[i] != '\r') || p[i] >= 0x7f)
			return 40;
	return k < 4 * dim && !sn->eof ? more : 0;
}

static enum tq_status
w2v_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_src *s = &r->src;
	uint64_t n, dim, *hdr_n;
	size_t used;

	TQ_TRY(tq_src_fill(s, W2V_MAX_HEADER));
	if (w2v_header(tq_src_ptr(s), tq_src_avail(s), &n, &dim, &used) <= 0)
		return tq_fail(TQ_ERR_FORMAT, "malformed word2vec header");
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT, "word2vec dimension %llu is not "
		    "in 1..%u", (ull)dim, TQ_MAX_DIM);
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (s->regular && n > (s->size - used) / (4 * dim + 2))
		return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows of dim "
		    "%llu but the file holds %llu bytes", (ull)n, (ull)dim,
		    (ull)s->size);
	if ((hdr_n = malloc(sizeof(*hdr_n))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	*hdr_n = n;
	r->priv = hdr_n;
	tq_src_consume(s, used);
	tq_reader_layout(r, TQ_ET_F32LE, 4, 0, (uint32_t)dim, 0);
	r->claimed = n;
	r->count = -1;
	if (s->regular) {
		r->count = (int64_t)n;
		r->sized = 1;
	}
	r->has_labels = 1;
	return TQ_OK;
}

static enum tq_status
w2v_truncated(const struct tq_reader *r)
{
	return tq_fail(TQ_ERR_FORMAT, "truncated at row %llu of %llu "
	    "(word2vec)", (ull)r->row, (ull)r->claimed);
}

/* After the last row: one optional newline, then the end. */
static enum tq_status
w2v_end(struct tq_reader *r)
{
	struct tq_src *s = &r->src;

	TQ_TRY(tq_src_fill(s, 2));
	if (tq_src_avail(s) > 0 && *tq_src_ptr(s) == '\n')
		tq_src_consume(s, 1);
	if (tq_src_avail(s) > 0)
		return tq_fail(TQ_ERR_FORMAT, "trailing data after %llu rows",
		    (ull)r->row);
	return TQ_OK;
}

static enum tq_status
w2v_read(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	struct tq_src *s = &r->src;
	size_t done = 0, vbytes = (size_t)r->dim * 4, look, wlen, skip;
	const uint8_t *p, *sp;

	(void)iv;		/* floats only: the core refused int32 */
	while (done < max && !r->ended) {
		if (r->row == r->claimed) {
			r->ended = 1;
			/* Not after a window that ends before the last row. */
			if (r->claimed == *(const uint64_t *)r->priv)
				TQ_TRY(w2v_end(r));
			break;
		}
		TQ_TRY(tq_src_fill(s, 1 + W2V_MAX_WORD + 1 + vbytes));
		p = tq_src_ptr(s);
		skip = r->row > 0 && tq_src_avail(s) > 0 && p[0] == '\n';
		p += skip;
		look = tq_src_avail(s) - skip;
		if (look > W2V_MAX_WORD + 1)
			look = W2V_MAX_WORD + 1;
		sp = memchr(p, ' ', look);
		if (sp == NULL) {
			if (look > W2V_MAX_WORD)
				return tq_fail(TQ_ERR_FORMAT, "row %llu: word "
				    "longer than %d bytes", (ull)r->row,
				    W2V_MAX_WORD);
			return w2v_truncated(r);
		}
		wlen = (size_t)(sp - p);
		if (wlen == 0)
			return tq_fail(TQ_ERR_FORMAT, "row %llu: empty word",
			    (ull)r->row);
		if (memchr(p, '\n', wlen) != NULL || memchr(p, '\0', wlen))
			return tq_fail(TQ_ERR_FORMAT, "row %llu: newline or "
			    "NUL byte in the word", (ull)r->row);
		if (tq_src_avail(s) - skip - wlen - 1 < vbytes)
			return w2v_truncated(r);
		TQ_TRY(tq_reader_convert(r, sp + 1, r->dim, r->row,
		    f + done * (size_t)r->dim, NULL));
		TQ_TRY(tq_reader_label_add(r, (const char *)p, wlen));
		tq_src_consume(s, skip + wlen + 1 + vbytes);
		r->row++;
		done++;
	}
	*got = done;
	return TQ_OK;
}

static void
w2v_close(struct tq_reader *r)
{
	free(r->priv);
	r->priv = NULL;
}

const struct tq_rformat tq_rformat_w2v = {
	.name = "word2vec",
	.bid = w2v_bid,
	.open = w2v_open,
	.read = w2v_read,
	.close = w2v_close,
	.window = TQ_WIN_NONE,
};
