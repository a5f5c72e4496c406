/*
 * reader.c - the reader core: the byte source (buffering, zstd
 * unwrapping, standard input), the row checks, the registry of formats
 * and the content sniffing that picks one, and the public tq_reader_*
 * functions.  Each format lives in its own file (vecio_*.c) behind a
 * struct tq_rformat; the external id lists in ids.c.
 *
 * Every input is read through a byte source (struct tq_src): a file
 * descriptor, a buffer of at most TQ_RD_BUF bytes with room for the
 * largest possible row (a small regular file gets a buffer of about its
 * size, grown on demand), and optionally a zstd decompressor in between.
 * Formats are detected by showing the first bytes to every format and
 * opening the highest bidder, so pipes work as well as files.  Nothing is
 * ever allocated from a size a header claims: the buffer is fixed, and
 * headers are checked against the file size when the input is a regular
 * file, or against the bytes that actually arrive when it is a stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zstd.h>

#include "internal.h"
#include "reader_impl.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

#define UNKNOWN TQ_RD_UNKNOWN

typedef unsigned long long ull;

/*
 * The registry.  Order matters only between equal bids (the first wins);
 * adding a format is one line here and one file.
 */
static const struct tq_rformat *const formats[] = {
	&tq_rformat_hdf5,
	&tq_rformat_npy,
	&tq_rformat_fvecs,
	&tq_rformat_ivecs,
	&tq_rformat_bvecs,
	&tq_rformat_idx,
	&tq_rformat_w2v,
	&tq_rformat_text,
	&tq_rformat_fixture,
};

/* ------------------------------------------------------------------------ */
/* Byte source                                                               */

void
tq_src_init(struct tq_src *s)
{
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

enum tq_status
tq_src_open(struct tq_src *s, const char *path)
{
	struct stat sb;

	if (strcmp(path, "-") == 0) {
		s->fd = STDIN_FILENO;
	} else {
		s->fd = open(path, O_RDONLY | O_CLOEXEC);
		if (s->fd < 0)
			return tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
		s->own_fd = 1;
	}
	if (fstat(s->fd, &sb) != 0)
		return tq_fail(TQ_ERR_IO, "stat: %s", strerror(errno));
	if (S_ISDIR(sb.st_mode)) {
		errno = EISDIR;
		return tq_fail(TQ_ERR_IO, "read: %s", strerror(errno));
	}
	if (S_ISREG(sb.st_mode)) {
		/* Standard input may be a file already partly read. */
		off_t off = lseek(s->fd, 0, SEEK_CUR);

		if (off >= 0 && off <= sb.st_size) {
			s->regular = 1;
			s->size = (uint64_t)(sb.st_size - off);
		}
	}
	/*
	 * A regular file smaller than the full buffer gets a page-rounded
	 * buffer one byte larger than itself, so the read that meets the end
	 * needs no growth; tq_src_fill grows it if more is ever wanted.
	 */
	s->cap = TQ_RD_BUF;
	if (s->regular && s->size < TQ_RD_BUF - TQ_RD_BUF_MIN)
		s->cap = (size_t)(s->size + TQ_RD_BUF_MIN) & ~(TQ_RD_BUF_MIN - 1);
	s->buf = malloc(s->cap);
	if (s->buf == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	return TQ_OK;
}

void
tq_src_close(struct tq_src *s)
{
	if (s->own_fd && s->fd >= 0)
		close(s->fd);
	ZSTD_freeDStream(s->zd);
	free(s->zbuf);
	free(s->buf);
	tq_src_init(s);
}

enum tq_status
tq_raw_read(int fd, uint8_t *dst, size_t cap, size_t *got)
{
	ssize_t k;

	do
		k = read(fd, dst, cap);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		return tq_fail(TQ_ERR_IO, "read: %s", strerror(errno));
	*got = (size_t)k;
	return TQ_OK;
}

/* Decompresses into dst; *got == 0 only at the end of the input. */
static enum tq_status
zstd_read(struct tq_src *s, uint8_t *dst, size_t cap, size_t *got)
{
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t k;

	for (;;) {
		size_t before, ret;

		if (s->zin.pos == s->zin.size && !s->zeof) {
			TQ_TRY(tq_raw_read(s->fd, s->zbuf, s->zcap, &k));
			s->zin.src = s->zbuf;
			s->zin.size = k;
			s->zin.pos = 0;
			if (k == 0)
				s->zeof = 1;
		}
		before = s->zin.pos;
		ret = ZSTD_decompressStream(s->zd, &out, &s->zin);
		if (ZSTD_isError(ret))
			return tq_fail(TQ_ERR_FORMAT, "zstd: %s",
			    ZSTD_getErrorName(ret));
		/* 0 once a frame is complete; a call without progress
		 * says nothing about the frame. */
		if (out.pos > 0 || s->zin.pos != before)
			s->zlast = ret;
		if (out.pos > 0)
			break;
		if (s->zeof && s->zin.pos == s->zin.size) {
			if (s->zlast != 0)
				return tq_fail(TQ_ERR_FORMAT,
				    "truncated zstd stream");
			break;
		}
	}
	*got = out.pos;
	return TQ_OK;
}

/*
 * Makes at least `need` (<= TQ_RD_BUF) unread bytes available, or all that
 * remain at the end of the input.
 */
enum tq_status
tq_src_fill(struct tq_src *s, size_t need)
{
	size_t got;

	if (s->len - s->pos >= need)
		return TQ_OK;
	if (s->pos > 0) {
		memmove(s->buf, s->buf + s->pos, s->len - s->pos);
		s->len -= s->pos;
		s->pos = 0;
	}
	if (need > s->cap && !s->eof) {
		size_t cap = s->cap;
		uint8_t *nb;

		while (cap < need)
			cap = cap > TQ_RD_BUF / 2 ? TQ_RD_BUF : 2 * cap;
		if ((nb = realloc(s->buf, cap)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		s->buf = nb;
		s->cap = cap;
	}
	while (s->len < need && !s->eof) {
		if (s->zd != NULL)
			TQ_TRY(zstd_read(s, s->buf + s->len, s->cap - s->len,
			    &got));
		else
			TQ_TRY(tq_raw_read(s->fd, s->buf + s->len,
			    s->cap - s->len, &got));
		if (got == 0)
			s->eof = 1;
		s->len += got;
	}
	return TQ_OK;
}

/*
 * Switches to decompression: the bytes already buffered become the start
 * of the compressed input.
 */
enum tq_status
tq_src_start_zstd(struct tq_src *s)
{
	uint8_t *nb;

	s->zd = ZSTD_createDStream();
	nb = malloc(TQ_RD_BUF);
	if (s->zd == NULL || nb == NULL) {
		free(nb);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	ZSTD_initDStream(s->zd);
	/*
	 * A frame header may ask for a window of up to 2^windowLogMax bytes
	 * whatever its size; keep the library default (128 MiB, enough for
	 * "zstd --long") explicit so it cannot drift.
	 */
	ZSTD_DCtx_setParameter(s->zd, ZSTD_d_windowLogMax, 27);
	s->zbuf = s->buf;
	s->zcap = s->cap;
	s->zin.src = s->zbuf;
	s->zin.size = s->len;
	s->zin.pos = s->pos;
	s->zeof = s->eof;
	s->zlast = 1;		/* no frame seen complete yet */
	s->buf = nb;
	s->cap = TQ_RD_BUF;
	s->pos = s->len = 0;
	s->eof = 0;
	s->regular = 0;
	return TQ_OK;
}

int
tq_is_zstd(const uint8_t *p, size_t avail)
{
	return avail >= 4 && rd_le32(p) == ZSTD_MAGICNUMBER;
}

enum tq_status
tq_src_more(struct tq_src *s, size_t *got)
{
	*got = 0;
	if (s->eof)
		return TQ_OK;
	if (s->pos > 0) {
		memmove(s->buf, s->buf + s->pos, s->len - s->pos);
		s->len -= s->pos;
		s->pos = 0;
	}
	if (s->len == s->cap) {
		size_t cap = s->cap > TQ_RD_BUF / 2 ? TQ_RD_BUF : 2 * s->cap;
		uint8_t *nb;

		if (s->cap >= TQ_RD_BUF)
			return TQ_OK;
		if ((nb = realloc(s->buf, cap)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		s->buf = nb;
		s->cap = cap;
	}
	if (s->zd != NULL)
		TQ_TRY(zstd_read(s, s->buf + s->len, s->cap - s->len, got));
	else
		TQ_TRY(tq_raw_read(s->fd, s->buf + s->len, s->cap - s->len,
		    got));
	if (*got == 0)
		s->eof = 1;
	s->len += *got;
	return TQ_OK;
}

/* Does `name`, with one ".zst" suffix removed, end in `ext`? */
int
tq_has_ext(const char *name, const char *ext)
{
	size_t n, e = strlen(ext);

	if (name == NULL)
		return 0;
	n = strlen(name);
	if (n > 4 && strcasecmp(name + n - 4, ".zst") == 0)
		n -= 4;
	return n > e && strncasecmp(name + n - e, ext, e) == 0;
}

/* ------------------------------------------------------------------------ */
/* Row checks shared with the HDF5 backend                                   */

enum tq_status
tq_vec_check_finite(const float *x, size_t nrows, uint32_t dim, uint64_t row0)
{
	size_t i, n = nrows * dim;
	uint32_t u, bad = 0;

	/* A branch-free pass the compiler can vectorise; locate on failure. */
	for (i = 0; i < n; i++) {
		memcpy(&u, x + i, 4);
		bad |= (u & 0x7f800000u) == 0x7f800000u;
	}
	if (!bad)
		return TQ_OK;
	for (i = 0; i < n; i++) {
		memcpy(&u, x + i, 4);
		if ((u & 0x7f800000u) == 0x7f800000u)
			break;
	}
	return tq_fail(TQ_ERR_NONFINITE,
	    "row %llu, column %llu: value is NaN or infinite",
	    (ull)(row0 + i / dim), (ull)(i % dim));
}

static enum tq_status
nonfinite_at(uint64_t row0, uint32_t dim, size_t i)
{
	return tq_fail(TQ_ERR_NONFINITE,
	    "row %llu, column %llu: value is NaN or infinite",
	    (ull)(row0 + i / dim), (ull)(i % dim));
}

enum tq_status
tq_vec_f64_to_f32(const double *in, size_t nrows, uint32_t dim,
    uint64_t row0, float *out)
{
	size_t i, n = nrows * dim;

	for (i = 0; i < n; i++) {
		double v = in[i];

		if (!(v >= -(double)FLT_MAX && v <= (double)FLT_MAX))
			return nonfinite_at(row0, dim, i);
		out[i] = (float)v;
	}
	return TQ_OK;
}

static enum tq_status
int_range_at(uint64_t row0, uint32_t dim, size_t i, const char *v)
{
	return tq_fail(TQ_ERR_FORMAT,
	    "row %llu, column %llu: value %s does not fit in int32",
	    (ull)(row0 + i / dim), (ull)(i % dim), v);
}

enum tq_status
tq_vec_i64_to_i32(const int64_t *in, size_t nrows, uint32_t dim,
    uint64_t row0, int32_t *out)
{
	size_t i, n = nrows * dim;
	char num[32];

	for (i = 0; i < n; i++) {
		if (in[i] < INT32_MIN || in[i] > INT32_MAX) {
			snprintf(num, sizeof(num), "%lld", (long long)in[i]);
			return int_range_at(row0, dim, i, num);
		}
		out[i] = (int32_t)in[i];
	}
	return TQ_OK;
}

enum tq_status
tq_vec_u64_to_i32(const uint64_t *in, size_t nrows, uint32_t dim,
    uint64_t row0, int32_t *out)
{
	size_t i, n = nrows * dim;
	char num[32];

	for (i = 0; i < n; i++) {
		if (in[i] > INT32_MAX) {
			snprintf(num, sizeof(num), "%llu", (ull)in[i]);
			return int_range_at(row0, dim, i, num);
		}
		out[i] = (int32_t)in[i];
	}
	return TQ_OK;
}

static uint32_t
rd_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static uint16_t
rd_be16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint64_t
rd_be64(const uint8_t *p)
{
	return (uint64_t)rd_be32(p) << 32 | rd_be32(p + 4);
}

/*
 * Converts n contiguous elements of r's type to floats (checked later) or
 * int32.  Each case is a plain loop the compiler can vectorise.
 */
enum tq_status
tq_reader_convert(const struct tq_reader *r, const uint8_t *p, size_t n, uint64_t row0,
    float *f, int32_t *iv)
{
	size_t i;

	switch (r->et) {
	case TQ_ET_F32LE:
		if (HOST_LE)
			memcpy(f, p, n * 4);
		else
			for (i = 0; i < n; i++)
				f[i] = rd_lef32(p + 4 * i);
		return tq_vec_check_finite(f, n / r->dim, r->dim, row0);
	case TQ_ET_F32BE:
		for (i = 0; i < n; i++) {
			uint32_t u = rd_be32(p + 4 * i);

			memcpy(f + i, &u, 4);
		}
		return tq_vec_check_finite(f, n / r->dim, r->dim, row0);
	case TQ_ET_F16LE:
		/* Every f16 is exact in f32; infinities and NaN stay so. */
		for (i = 0; i < n; i++)
			f[i] = tq_f16_to_f32(rd_le16(p + 2 * i));
		return tq_vec_check_finite(f, n / r->dim, r->dim, row0);
	case TQ_ET_F64LE:
	case TQ_ET_F64BE:
		for (i = 0; i < n; i++) {
			uint64_t u = r->et == TQ_ET_F64LE ? rd_le64(p + 8 * i) :
			    rd_be64(p + 8 * i);
			double v;

			memcpy(&v, &u, 8);
			if (!(v >= -(double)FLT_MAX && v <= (double)FLT_MAX))
				return nonfinite_at(row0, r->dim, i);
			f[i] = (float)v;
		}
		return TQ_OK;
	case TQ_ET_I32LE:
		if (f != NULL)
			for (i = 0; i < n; i++)
				f[i] = (float)(int32_t)rd_le32(p + 4 * i);
		else if (HOST_LE)
			memcpy(iv, p, n * 4);
		else
			for (i = 0; i < n; i++)
				iv[i] = (int32_t)rd_le32(p + 4 * i);
		return TQ_OK;
	case TQ_ET_I32BE:
		for (i = 0; i < n; i++) {
			int32_t v = (int32_t)rd_be32(p + 4 * i);

			if (f != NULL)
				f[i] = (float)v;
			else
				iv[i] = v;
		}
		return TQ_OK;
	case TQ_ET_I16BE:
		for (i = 0; i < n; i++) {
			int16_t v = (int16_t)rd_be16(p + 2 * i);

			if (f != NULL)
				f[i] = v;
			else
				iv[i] = v;
		}
		return TQ_OK;
	case TQ_ET_U8:
		if (f != NULL)
			for (i = 0; i < n; i++)
				f[i] = p[i];
		else
			for (i = 0; i < n; i++)
				iv[i] = p[i];
		return TQ_OK;
	case TQ_ET_I8:
		if (f != NULL)
			for (i = 0; i < n; i++)
				f[i] = (int8_t)p[i];
		else
			for (i = 0; i < n; i++)
				iv[i] = (int8_t)p[i];
		return TQ_OK;
	}
	return tq_fail(TQ_ERR_FORMAT, "unknown element type");
}

/* ------------------------------------------------------------------------ */
/* Rows of the byte formats                                                  */

void
tq_reader_layout(struct tq_reader *r, enum tq_etype et, size_t esz,
    size_t prefix, uint32_t dim, int is_integer)
{
	r->et = et;
	r->esz = esz;
	r->prefix = prefix;
	r->dim = dim;
	r->rowbytes = prefix + (size_t)dim * esz;
	r->is_integer = is_integer;
}

/* k whole rows at p (r->rowbytes each) into the output at row `out`. */
static enum tq_status
convert_rows(const struct tq_reader *r, const uint8_t *p, size_t k,
    size_t out, float *f, int32_t *iv)
{
	size_t j, dim = r->dim;

	if (r->prefix == 0)
		return tq_reader_convert(r, p, k * dim, r->row,
		    f ? f + out * dim : NULL, iv ? iv + out * dim : NULL);
	for (j = 0; j < k; j++, p += r->rowbytes, out++) {
		int32_t d = (int32_t)rd_le32(p);

		if (d != (int32_t)r->dim)
			return tq_fail(TQ_ERR_FORMAT, "row %llu has dimension "
			    "%ld, expected %lu (%s)", (ull)(r->row + j),
			    (long)d, (unsigned long)r->dim, r->kind);
		TQ_TRY(tq_reader_convert(r, p + r->prefix, dim, r->row + j,
		    f ? f + out * dim : NULL, iv ? iv + out * dim : NULL));
	}
	return TQ_OK;
}

static enum tq_status
truncated(const struct tq_reader *r)
{
	switch (r->trunc) {
	case TQ_TRUNC_EXPECTED:
		return tq_fail(TQ_ERR_FORMAT, "truncated: expected %llu rows, "
		    "got %llu", (ull)r->claimed, (ull)r->row);
	case TQ_TRUNC_OF:
		return tq_fail(TQ_ERR_FORMAT, "truncated at row %llu of %llu",
		    (ull)r->row, (ull)r->claimed);
	default:
		return tq_fail(TQ_ERR_FORMAT, "truncated at row %llu (%s)",
		    (ull)r->row, r->kind);
	}
}

enum tq_status
tq_read_byte_rows(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	struct tq_src *s = &r->src;
	size_t done = 0, k;

	while (done < max && !r->ended) {
		if (r->claimed != UNKNOWN && r->row == r->claimed) {
			/* A stream's size was not checked: no extra bytes. */
			r->ended = 1;
			if (s->regular)
				break;
			TQ_TRY(tq_src_fill(s, 1));
			if (tq_src_avail(s) != 0)
				return tq_fail(TQ_ERR_FORMAT, "trailing data "
				    "after %llu rows", (ull)r->row);
			break;
		}
		TQ_TRY(tq_src_fill(s, r->rowbytes));
		if (tq_src_avail(s) < r->rowbytes) {
			if (tq_src_avail(s) == 0 && r->claimed == UNKNOWN) {
				r->ended = 1;
				break;
			}
			return truncated(r);
		}
		k = tq_src_avail(s) / r->rowbytes;
		if (k > max - done)
			k = max - done;
		if (r->claimed != UNKNOWN && k > r->claimed - r->row)
			k = (size_t)(r->claimed - r->row);
		TQ_TRY(convert_rows(r, tq_src_ptr(s), k, done, f, iv));
		tq_src_consume(s, k * r->rowbytes);
		r->row += k;
		done += k;
	}
	*got = done;
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Labels                                                                    */

void
tq_reader_labels_clear(struct tq_reader *r)
{
	r->lablen = 0;
	r->nlab = 0;
}

enum tq_status
tq_reader_label_add(struct tq_reader *r, const char *s, size_t len)
{
	size_t need;

	if (ck_add(r->lablen, len + 1, &need))
		return tq_fail(TQ_ERR_OVERFLOW, "labels too long");
	if (need > r->labcap) {
		size_t cap = r->labcap ? r->labcap : 4096;
		char *nl;

		while (cap < need)
			cap *= 2;
		if ((nl = realloc(r->lab, cap)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		r->lab = nl;
		r->labcap = cap;
	}
	if (r->nlab == r->laboffcap) {
		size_t cap = r->laboffcap ? 2 * r->laboffcap : 256;
		size_t *no;

		if (cap > SIZE_MAX / sizeof(*no) ||
		    (no = realloc(r->laboff, cap * sizeof(*no))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		r->laboff = no;
		r->laboffcap = cap;
	}
	memcpy(r->lab + r->lablen, s, len);
	r->lab[r->lablen + len] = '\0';
	r->laboff[r->nlab++] = r->lablen;
	r->lablen = need;
	return TQ_OK;
}

int
tq_reader_has_labels(const struct tq_reader *r)
{
	return r->has_labels;
}

const char *
tq_reader_label(const struct tq_reader *r, size_t i)
{
	if (!r->has_labels || i >= r->nlab)
		return NULL;
	return r->lab + r->laboff[i];
}

/* ------------------------------------------------------------------------ */
/* Opening: sniffing and the bids                                            */

/*
 * The highest bid on the bytes buffered now (the first format on a tie);
 * *more is set when a format needs more bytes to tell.
 */
static const struct tq_rformat *
best_bid(const struct tq_src *s, const char *name, int full, int *bid,
    int *more)
{
	const struct tq_rformat *best = NULL;
	struct tq_sniff sn;
	size_t i;

	sn.p = tq_src_ptr(s);
	sn.avail = tq_src_avail(s);
	sn.eof = s->eof;
	sn.full = full || s->eof || sn.avail >= TQ_RD_BUF;
	sn.name = name;
	sn.regular = s->regular && s->zd == NULL;
	sn.size = s->size;
	*bid = 0;
	*more = 0;
	for (i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
		int b = formats[i]->bid(&sn);

		if (b == TQ_BID_MORE && !sn.full)
			*more = 1;
		if (b > *bid) {
			*bid = b;
			best = formats[i];
		}
	}
	return best;
}

/*
 * Nothing certain in the first bytes: the formats that look at the
 * content see more of it.  A regular file is shown up to a full buffer
 * at once; a stream one read at a time, until every format can tell.
 */
static enum tq_status
sniff_content(struct tq_src *s, const char *name,
    const struct tq_rformat **f, int *bid)
{
	size_t got, want;
	int more;

	if (s->regular && s->zd == NULL) {
		want = s->size < TQ_RD_BUF ? (size_t)s->size : TQ_RD_BUF;
		TQ_TRY(tq_src_fill(s, want));
		*f = best_bid(s, name, 1, bid, &more);
		return TQ_OK;
	}
	for (;;) {
		*f = best_bid(s, name, 0, bid, &more);
		if (!more)
			return TQ_OK;
		TQ_TRY(tq_src_more(s, &got));
	}
}

static enum tq_status
reader_open(struct tq_reader *r, const char *path, const char *dataset)
{
	const char *name = strcmp(path, "-") == 0 ? NULL : path;
	struct tq_src *s = &r->src;
	const struct tq_rformat *f;
	size_t avail;
	int bid, more;

	TQ_TRY(tq_src_open(s, path));
	TQ_TRY(tq_src_fill(s, 16));
	avail = tq_src_avail(s);
	if (avail == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors (empty input)");
	f = best_bid(s, name, 0, &bid, &more);
	/* HDF5 bids on its signature before any unwrapping. */
	if (f != &tq_rformat_hdf5 && tq_is_zstd(tq_src_ptr(s), avail)) {
		TQ_TRY(tq_src_start_zstd(s));
		TQ_TRY(tq_src_fill(s, 16));
		avail = tq_src_avail(s);
		if (avail == 0)
			return tq_fail(TQ_ERR_EMPTY,
			    "no vectors (empty input)");
		if (tq_is_zstd(tq_src_ptr(s), avail))
			return tq_fail(TQ_ERR_UNSUPPORTED,
			    "nested zstd compression is not supported");
		f = best_bid(s, name, 0, &bid, &more);
	}
	if (bid < TQ_BID_SURE)
		TQ_TRY(sniff_content(s, name, &f, &bid));
	if (f == NULL)		/* the fixture always bids */
		return tq_fail(TQ_ERR_FORMAT,
		    "not a vector file (unrecognised header)");
	r->fmt = f;
	r->kind = f->name;
	return f->open(r, path, dataset);
}

enum tq_status
tq_reader_open(const char *path, const char *dataset, struct tq_reader **out)
{
	struct tq_reader *r;
	enum tq_status st;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return tq_fail(TQ_ERR_ARG, "no input file name");
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	tq_src_init(&r->src);
	r->kind = tq_rformat_fixture.name;
	r->claimed = UNKNOWN;
	st = reader_open(r, path, dataset);
	if (st != TQ_OK) {
		tq_reader_close(r);
		return st;
	}
	*out = r;
	return TQ_OK;
}

uint32_t
tq_reader_dim(const struct tq_reader *r)
{
	return r->dim;
}

int64_t
tq_reader_count(const struct tq_reader *r)
{
	return r->count;
}

int64_t
tq_reader_claimed(const struct tq_reader *r)
{
	if (r->count >= 0)
		return r->count;
	return r->claimed == UNKNOWN || r->claimed > INT64_MAX ? -1 :
	    (int64_t)r->claimed;
}

const char *
tq_reader_format(const struct tq_reader *r)
{
	return r->kind;
}

int
tq_reader_is_integer(const struct tq_reader *r)
{
	return r->is_integer;
}

void
tq_reader_close(struct tq_reader *r)
{
	if (r == NULL)
		return;
	if (r->fmt != NULL && r->fmt->close != NULL)
		r->fmt->close(r);
	tq_src_close(&r->src);
	free(r->lab);
	free(r->laboff);
	free(r);
}

/* ------------------------------------------------------------------------ */
/* Reading                                                                   */

static enum tq_status
reader_read(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	enum tq_status st;
	size_t bytes;

	*got = 0;
	tq_reader_labels_clear(r);
	if (r->failed != TQ_OK)
		return tq_fail(r->failed, "an earlier read failed");
	if (max == 0)
		return TQ_OK;
	if (f == NULL && iv == NULL)
		return tq_fail(TQ_ERR_ARG, "no buffer");
	if (iv != NULL && !r->is_integer)
		return tq_fail(TQ_ERR_UNSUPPORTED, "%s input holds floats, not "
		    "integers", r->kind);
	if (ck_mul(max, (size_t)r->dim * 4, &bytes))
		return tq_fail(TQ_ERR_OVERFLOW, "%zu rows of dim %lu "
		    "overflow", max, (unsigned long)r->dim);
	if (r->fmt->read != NULL)
		st = r->fmt->read(r, f, iv, max, got);
	else
		st = tq_read_byte_rows(r, f, iv, max, got);
	if (st != TQ_OK) {
		*got = 0;
		tq_reader_labels_clear(r);
		r->failed = st;
	}
	return st;
}

enum tq_status
tq_reader_read(struct tq_reader *r, float *rows, size_t max, size_t *got)
{
	return reader_read(r, rows, NULL, max, got);
}

enum tq_status
tq_reader_read_i32(struct tq_reader *r, int32_t *rows, size_t max,
    size_t *got)
{
	return reader_read(r, NULL, rows, max, got);
}

/*
 * Row windows (sharding).  The skipped rows are seeked over (byte formats
 * are sized only when they are uncompressed regular files) or, for HDF5,
 * simply not selected: they are never read, converted or checked, so a bad
 * row outside the window does not fail it.  `row` and `claimed` keep the
 * file's numbering, so failure details name the row in the whole file.
 */
enum tq_status
tq_reader_window(struct tq_reader *r, uint64_t first, uint64_t count)
{
	struct tq_src *s = &r->src;
	uint64_t skip, end;

	if (r->count < 0)
		return tq_fail(TQ_ERR_UNSUPPORTED, "the row count is not known "
		    "in advance (a pipe or a compressed file)");
	if (r->row != 0 || r->ended || r->failed != TQ_OK)
		return tq_fail(TQ_ERR_ARG, "window after a read");
	if (ck_add64(first, count, &end) || end > (uint64_t)r->count)
		return tq_fail(TQ_ERR_ARG, "rows %llu..%llu are past the %llu "
		    "rows of the input", (ull)first, (ull)end,
		    (ull)r->count);
	if (r->fmt->window != TQ_WIN_ROWS && first > 0) {
		if (r->fmt->window == TQ_WIN_NONE || !s->regular ||
		    s->zd != NULL)
			return tq_fail(TQ_ERR_UNSUPPORTED, "cannot seek in "
			    "this input");
		if (ck_mul64(first, r->rowbytes, &skip))
			return tq_fail(TQ_ERR_OVERFLOW, "row offset overflows");
		if (skip <= tq_src_avail(s)) {
			tq_src_consume(s, (size_t)skip);
		} else {
			skip -= tq_src_avail(s);
			if (skip > (uint64_t)INT64_MAX ||
			    lseek(s->fd, (off_t)skip, SEEK_CUR) == -1)
				return tq_fail(TQ_ERR_IO, "seek: %s",
				    strerror(errno));
			s->pos = s->len = 0;
		}
	}
	r->row = first;
	r->claimed = end;
	r->count = (int64_t)count;
	if (count == 0)
		r->ended = 1;
	return TQ_OK;
}

enum tq_status
tq_read_all(const char *path, const char *dataset, float **rows,
    uint32_t *dim, size_t *n)
{
	struct tq_reader *r;
	enum tq_status st;
	float *a = NULL, *na, *probe = NULL;
	size_t cap, len = 0, got, bytes, rowf;

	*rows = NULL;
	*dim = 0;
	*n = 0;
	TQ_TRY(tq_reader_open(path, dataset, &r));
	rowf = r->dim;
	/*
	 * Start near 1 MiB and double: memory follows the rows read.  Only
	 * a count already checked against the file size is trusted.  When
	 * the array is full, one row is read aside first, so an input that
	 * ends there costs no doubling.
	 */
	cap = TQ_RD_BUF / (rowf * 4);
	if (cap == 0)
		cap = 1;
	if (r->sized && r->count > 0 && (uint64_t)r->count <= SIZE_MAX / 2)
		cap = (size_t)r->count;
	if ((a = tq_mallocarray(cap, rowf * 4)) == NULL ||
	    (probe = malloc(rowf * 4)) == NULL) {
		st = tq_fail(TQ_ERR_NOMEM, "out of memory");
		goto fail;
	}
	for (;;) {
		if (len == cap) {
			if ((st = tq_reader_read(r, probe, 1, &got)) != TQ_OK)
				goto fail;
			if (got == 0)
				break;
			if (cap > SIZE_MAX / 2 ||
			    ck_mul(cap * 2, rowf * 4, &bytes)) {
				st = tq_fail(TQ_ERR_OVERFLOW, "input too large");
				goto fail;
			}
			if ((na = realloc(a, bytes)) == NULL) {
				st = tq_fail(TQ_ERR_NOMEM, "out of memory "
				    "after %zu rows", len);
				goto fail;
			}
			a = na;
			cap *= 2;
			memcpy(a + len * rowf, probe, rowf * 4);
			len++;
		}
		st = tq_reader_read(r, a + len * rowf, cap - len, &got);
		if (st != TQ_OK)
			goto fail;
		if (got == 0)
			break;
		len += got;
	}
	if (len == 0) {
		st = tq_fail(TQ_ERR_EMPTY, "no vectors");
		goto fail;
	}
	if (len < cap && (na = realloc(a, len * rowf * 4)) != NULL)
		a = na;
	*rows = a;
	*dim = r->dim;
	*n = len;
	free(probe);
	tq_reader_close(r);
	return TQ_OK;
fail:
	free(probe);
	free(a);
	tq_reader_close(r);
	return st;
}
