/*
 * vecwrite_fmt.c - the per-format part of the vector writers: headers
 * (fixture, npy) and the encoding of rows that are not plain
 * little-endian f32 (text, tsv, csv, bvecs, and ivecs given floats).
 * vecio.c keeps the destination: temporary file, spool, fsync, rename.
 *
 * The npy header is always 128 bytes, whatever the count: the shape is
 * written into a dictionary padded with spaces, so a header written with
 * a provisional count is overwritten in place at commit, and the bytes of
 * a file do not depend on whether the count was known at open.
 *
 * Text rows print each value with "%.9g": nine significant digits
 * identify every float32, so a reader that rounds the decimal to the
 * nearest float gets the bits back.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "vecwrite_fmt.h"

#define NPY_HEADER 128u
#define NPY_PREFIX 10u		/* magic, version, u16 header length */
_Static_assert(NPY_HEADER <= TQ_WFMT_HEADER_MAX, "npy header fits");

/* Text is built here and put a piece at a time. */
#define LINE_BUF 4096u
/* The longest "%.9g" of a float ("-1.17549435e-38") and a separator. */
#define VALUE_MAX 24u

typedef unsigned long long ull;

int
tq_wfmt_known(enum tq_vecfmt fmt)
{
	switch (fmt) {
	case TQ_VEC_FIXTURE:
	case TQ_VEC_FVECS:
	case TQ_VEC_IVECS:
	case TQ_VEC_NPY:
	case TQ_VEC_TEXT:
	case TQ_VEC_TSV:
	case TQ_VEC_CSV:
	case TQ_VEC_BVECS:
	case TQ_VEC_W2V:
	case TQ_VEC_VEC:
		return 1;
	}
	return 0;
}

int
tq_wfmt_counted(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_FIXTURE || fmt == TQ_VEC_NPY;
}

int
tq_wfmt_is_text(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_TEXT || fmt == TQ_VEC_TSV || fmt == TQ_VEC_CSV ||
	    fmt == TQ_VEC_VEC;
}

int
tq_wfmt_labels(enum tq_vecfmt fmt)
{
	return tq_wfmt_is_text(fmt) || fmt == TQ_VEC_W2V;
}

int
tq_wfmt_needs_labels(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_W2V || fmt == TQ_VEC_VEC;
}

int
tq_wfmt_headed(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_W2V || fmt == TQ_VEC_VEC;
}

uint64_t
tq_wfmt_max_rows(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_FIXTURE ? UINT32_MAX : UINT64_MAX;
}

size_t
tq_wfmt_header(enum tq_vecfmt fmt, uint32_t dim, uint64_t n, uint8_t *hdr)
{
	int len;

	switch (fmt) {
	case TQ_VEC_FIXTURE:
		wr_le32(hdr, dim);
		wr_le32(hdr + 4, (uint32_t)n);
		return 8;
	case TQ_VEC_NPY:
		memcpy(hdr, "\x93NUMPY\x01\x00", 8);
		wr_le16(hdr + 8, NPY_HEADER - NPY_PREFIX);
		len = snprintf((char *)hdr + NPY_PREFIX,
		    NPY_HEADER - NPY_PREFIX, "{'descr': '<f4', "
		    "'fortran_order': False, 'shape': (%llu, %lu), }",
		    (ull)n, (unsigned long)dim);
		/* At most 82 bytes with the largest n and dim. */
		memset(hdr + NPY_PREFIX + len, ' ',
		    NPY_HEADER - NPY_PREFIX - (size_t)len);
		hdr[NPY_HEADER - 1] = '\n';
		return NPY_HEADER;
	case TQ_VEC_W2V:
	case TQ_VEC_VEC:
		/* At most 20 + 1 + 5 + 1 bytes. */
		return (size_t)snprintf((char *)hdr, TQ_WFMT_HEADER_MAX,
		    "%llu %lu\n", (ull)n, (unsigned long)dim);
	default:
		return 0;
	}
}

static char
separator(enum tq_vecfmt fmt)
{
	return fmt == TQ_VEC_TSV ? '\t' : fmt == TQ_VEC_CSV ? ',' : ' ';
}

/* A label must not be empty nor hold what would split its field. */
static enum tq_status
check_label(enum tq_vecfmt fmt, const char *s, uint64_t row)
{
	const char *bad, *what;

	switch (fmt) {
	case TQ_VEC_TSV:
		bad = "\t\n\r";
		what = "a tab or a line break";
		break;
	case TQ_VEC_CSV:
		bad = ",\"\n\r";
		what = "a comma, a quote or a line break";
		break;
	default:
		bad = " \t\n\r\v\f";
		what = "a blank or a line break";
		break;
	}
	if (s == NULL || *s == '\0')
		return tq_fail(TQ_ERR_ARG, "row %llu: the label is empty",
		    (ull)row);
	if (tq_wfmt_needs_labels(fmt) && strlen(s) > TQ_LABEL_MAX)
		return tq_fail(TQ_ERR_ARG, "row %llu: the label is longer "
		    "than %u bytes", (ull)row, TQ_LABEL_MAX);
	if (strpbrk(s, bad) != NULL)
		return tq_fail(TQ_ERR_ARG, "row %llu: the label contains %s",
		    (ull)row, what);
	return TQ_OK;
}

static enum tq_status
check_rows(enum tq_vecfmt fmt, uint32_t dim, const float *rows,
    const char *const *labels, size_t n, uint64_t row0)
{
	size_t i, j;

	if (labels != NULL && !tq_wfmt_labels(fmt))
		return tq_fail(TQ_ERR_ARG, "labels need a text writer");
	if (labels == NULL && tq_wfmt_needs_labels(fmt))
		return tq_fail(TQ_ERR_ARG, "word2vec and .vec rows need labels");
	if (labels != NULL)
		for (i = 0; i < n; i++)
			TQ_TRY(check_label(fmt, labels[i], row0 + i));
	if (fmt != TQ_VEC_BVECS && fmt != TQ_VEC_IVECS)
		return TQ_OK;
	for (i = 0; i < n; i++)
		for (j = 0; j < dim; j++) {
			float v = rows[i * dim + j];

			if (fmt == TQ_VEC_BVECS && !(v >= 0.0f &&
			    v <= 255.0f && v == floorf(v)))
				return tq_fail(TQ_ERR_ARG, "row %llu, column "
				    "%zu: value %.9g is not a byte (0..255)",
				    (ull)(row0 + i), j, (double)v);
			/* 2^31 is a float; every float below it in
			   magnitude that is whole fits an int32. */
			if (fmt == TQ_VEC_IVECS && !(v >= -2147483648.0f &&
			    v < 2147483648.0f && v == floorf(v)))
				return tq_fail(TQ_ERR_ARG, "row %llu, column "
				    "%zu: value %.9g is not an int32",
				    (ull)(row0 + i), j, (double)v);
		}
	return TQ_OK;
}

static enum tq_status
text_rows(enum tq_vecfmt fmt, uint32_t dim, const float *rows,
    const char *const *labels, size_t n, tq_wput_fn put, void *ctx)
{
	char line[LINE_BUF];
	char sep = separator(fmt);
	size_t i, j, len = 0;

	for (i = 0; i < n; i++) {
		if (labels != NULL) {
			size_t ll = strlen(labels[i]);

			TQ_TRY(put(ctx, line, len));
			len = 0;
			TQ_TRY(put(ctx, labels[i], ll));
			line[len++] = sep;
		}
		for (j = 0; j < dim; j++) {
			if (len > LINE_BUF - VALUE_MAX) {
				TQ_TRY(put(ctx, line, len));
				len = 0;
			}
			len += (size_t)snprintf(line + len, VALUE_MAX, "%.9g",
			    (double)rows[i * dim + j]);
			line[len++] = j + 1 < dim ? sep : '\n';
		}
	}
	return put(ctx, line, len);
}

/* word2vec: the label, a space, the floats little-endian, a newline. */
static enum tq_status
w2v_rows(uint32_t dim, const float *rows, const char *const *labels,
    size_t n, tq_wput_fn put, void *ctx)
{
	uint8_t buf[LINE_BUF];
	size_t i, j, len = 0;

	for (i = 0; i < n; i++) {
		TQ_TRY(put(ctx, buf, len));
		len = 0;
		TQ_TRY(put(ctx, labels[i], strlen(labels[i])));
		buf[len++] = ' ';
		for (j = 0; j < dim; j++) {
			/* Room for this value and the newline. */
			if (len + 4 >= LINE_BUF) {
				TQ_TRY(put(ctx, buf, len));
				len = 0;
			}
			wr_lef32(buf + len, rows[i * dim + j]);
			len += 4;
		}
		buf[len++] = '\n';
	}
	return put(ctx, buf, len);
}

static enum tq_status
int_rows(enum tq_vecfmt fmt, uint32_t dim, const float *rows, size_t n,
    tq_wput_fn put, void *ctx)
{
	uint8_t buf[LINE_BUF];
	size_t i, j, len = 0, esz = fmt == TQ_VEC_BVECS ? 1 : 4;

	for (i = 0; i < n; i++) {
		if (len > LINE_BUF - 4) {
			TQ_TRY(put(ctx, buf, len));
			len = 0;
		}
		wr_le32(buf + len, dim);
		len += 4;
		for (j = 0; j < dim; j++) {
			float v = rows[i * dim + j];

			if (len > LINE_BUF - esz) {
				TQ_TRY(put(ctx, buf, len));
				len = 0;
			}
			if (esz == 1)
				buf[len] = (uint8_t)v;
			else
				wr_le32(buf + len, (uint32_t)(int32_t)v);
			len += esz;
		}
	}
	return put(ctx, buf, len);
}

enum tq_status
tq_wfmt_rows(enum tq_vecfmt fmt, uint32_t dim, const float *rows,
    const char *const *labels, size_t n, uint64_t row0, tq_wput_fn put,
    void *ctx)
{
	TQ_TRY(check_rows(fmt, dim, rows, labels, n, row0));
	if (tq_wfmt_is_text(fmt))
		return text_rows(fmt, dim, rows, labels, n, put, ctx);
	if (fmt == TQ_VEC_W2V)
		return w2v_rows(dim, rows, labels, n, put, ctx);
	if (fmt == TQ_VEC_BVECS || fmt == TQ_VEC_IVECS)
		return int_rows(fmt, dim, rows, n, put, ctx);
	return tq_fail(TQ_ERR_ARG, "no row encoder for vector format %d",
	    (int)fmt);
}
