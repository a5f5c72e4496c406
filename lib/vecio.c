/*
 * vecio.c - vector files in and out: fixture, fvecs/ivecs/bvecs, NumPy .npy,
 * IDX (MNIST) and any of these inside zstd; external id lists; atomic
 * writers.  HDF5 lives in vecio_hdf5.c.
 *
 * Every input is read through a byte source (struct src): a file
 * descriptor, a buffer of at most BUF_SIZE bytes with room for the largest
 * possible row (a small regular file gets a buffer of about its size, grown
 * on demand), and optionally a zstd decompressor in between.  Formats are detected
 * by peeking at the first bytes, so pipes work as well as files.  Nothing
 * is ever allocated from a size a header claims: the buffer is fixed, and
 * headers are checked against the file size when the input is a regular
 * file, or against the bytes that actually arrive when it is a stream.
 *
 * Standard input ("-") has no name, so formats known only by their file
 * name extension (fvecs, ivecs, bvecs) cannot be recognised on it: a
 * stream is npy, IDX, zstd or HDF5 (refused: it needs a seekable file) by
 * its magic, and otherwise a fixture.
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
#include "vecio_impl.h"
#include "vecwrite_fmt.h"

/* The byte source buffer; it must hold the largest row (8-byte values). */
#define BUF_SIZE ((size_t)1 << 20)
#define BUF_MIN ((size_t)4096)
_Static_assert(BUF_SIZE >= 8u * TQ_MAX_DIM + 4u, "the buffer holds a row");

/* Longest .npy header dictionary accepted (NumPy writes < 200 bytes). */
#define NPY_MAX_HEADER 65536u

#define UNKNOWN UINT64_MAX

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define HOST_LE 1
#else
#define HOST_LE 0
#endif

typedef unsigned long long ull;

/* ------------------------------------------------------------------------ */
/* Byte source                                                               */

struct src {
	int fd;
	int own_fd;
	int regular;		/* plain regular file: `size` is exact */
	uint64_t size;		/* bytes from the start position to the end */
	uint8_t *buf;
	size_t cap;		/* bytes at buf, BUF_MIN .. BUF_SIZE */
	size_t pos, len;	/* unread bytes are buf[pos .. len) */
	int eof;
	ZSTD_DStream *zd;	/* non-NULL: buf holds decompressed bytes */
	uint8_t *zbuf;		/* compressed input */
	size_t zcap;		/* bytes at zbuf */
	ZSTD_inBuffer zin;
	int zeof;
	size_t zlast;		/* last ZSTD_decompressStream result */
};

static void
src_init(struct src *s)
{
	memset(s, 0, sizeof(*s));
	s->fd = -1;
}

static enum tq_status
src_open(struct src *s, const char *path)
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
	 * needs no growth; src_fill grows it if more is ever wanted.
	 */
	s->cap = BUF_SIZE;
	if (s->regular && s->size < BUF_SIZE - BUF_MIN)
		s->cap = (size_t)(s->size + BUF_MIN) & ~(BUF_MIN - 1);
	s->buf = malloc(s->cap);
	if (s->buf == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	return TQ_OK;
}

static void
src_close(struct src *s)
{
	if (s->own_fd && s->fd >= 0)
		close(s->fd);
	ZSTD_freeDStream(s->zd);
	free(s->zbuf);
	free(s->buf);
	src_init(s);
}

static enum tq_status
raw_read(int fd, uint8_t *dst, size_t cap, size_t *got)
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
zstd_read(struct src *s, uint8_t *dst, size_t cap, size_t *got)
{
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t k;

	for (;;) {
		size_t before, ret;

		if (s->zin.pos == s->zin.size && !s->zeof) {
			TQ_TRY(raw_read(s->fd, s->zbuf, s->zcap, &k));
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
 * Makes at least `need` (<= BUF_SIZE) unread bytes available, or all that
 * remain at the end of the input.
 */
static enum tq_status
src_fill(struct src *s, size_t need)
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
			cap = cap > BUF_SIZE / 2 ? BUF_SIZE : 2 * cap;
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
			TQ_TRY(raw_read(s->fd, s->buf + s->len,
			    s->cap - s->len, &got));
		if (got == 0)
			s->eof = 1;
		s->len += got;
	}
	return TQ_OK;
}

static size_t
src_avail(const struct src *s)
{
	return s->len - s->pos;
}

static const uint8_t *
src_ptr(const struct src *s)
{
	return s->buf + s->pos;
}

static void
src_consume(struct src *s, size_t n)
{
	s->pos += n;
}

/*
 * Switches to decompression: the bytes already buffered become the start
 * of the compressed input.
 */
static enum tq_status
src_start_zstd(struct src *s)
{
	uint8_t *nb;

	s->zd = ZSTD_createDStream();
	nb = malloc(BUF_SIZE);
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
	s->cap = BUF_SIZE;
	s->pos = s->len = 0;
	s->eof = 0;
	s->regular = 0;
	return TQ_OK;
}

static int
is_zstd(const uint8_t *p, size_t avail)
{
	return avail >= 4 && rd_le32(p) == ZSTD_MAGICNUMBER;
}

/* ------------------------------------------------------------------------ */
/* Names                                                                     */

/* Does `name`, with one ".zst" suffix removed, end in `ext`? */
static int
has_ext(const char *name, const char *ext)
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

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */

enum rkind { RK_FIXTURE, RK_FVECS, RK_IVECS, RK_BVECS, RK_NPY, RK_IDX,
	RK_HDF5 };

static const char *const kind_name[] = {
	"fixture", "fvecs", "ivecs", "bvecs", "npy", "idx", "hdf5"
};

/* Element types of the byte formats. */
enum etype { ET_F32LE, ET_F64LE, ET_I32LE, ET_U8, ET_I8, ET_I16BE, ET_I32BE,
	ET_F32BE, ET_F64BE };

struct tq_reader {
	enum rkind kind;
	uint32_t dim;
	int64_t count;
	uint64_t claimed;	/* rows the header announces, or UNKNOWN */
	uint64_t row;		/* rows delivered so far */
	enum etype et;
	size_t esz;		/* bytes per element */
	size_t prefix;		/* bytes before each row (4 for *vecs) */
	size_t rowbytes;
	int is_integer;
	/*
	 * count is the row count checked against the file size, or -1 when
	 * only a header on a stream says so: a claim the caller must not
	 * size anything by.  `claimed` still ends the rows and catches a
	 * truncated stream.
	 */
	int sized;
	int ended;
	enum tq_status failed;
	struct src src;
	struct tq_h5 *h5;
};

static void
set_layout(struct tq_reader *r, enum etype et, size_t esz, size_t prefix,
    uint32_t dim, int is_integer)
{
	r->et = et;
	r->esz = esz;
	r->prefix = prefix;
	r->dim = dim;
	r->rowbytes = prefix + (size_t)dim * esz;
	r->is_integer = is_integer;
}

static enum tq_status
open_fixture(struct tq_reader *r)
{
	struct src *s = &r->src;
	const uint8_t *p;
	uint32_t dim, n;
	uint64_t want;

	TQ_TRY(src_fill(s, 8));
	if (src_avail(s) < 8)
		return tq_fail(TQ_ERR_FORMAT, "truncated header (%zu bytes)",
		    src_avail(s));
	p = src_ptr(s);
	dim = rd_le32(p);
	n = rd_le32(p + 4);
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT,
		    "not a vector file (unrecognised header)");
	src_consume(s, 8);
	set_layout(r, ET_F32LE, 4, 0, dim, 0);
	want = 8 + (uint64_t)n * dim * 4;	/* < 2^51: no overflow */
	if (s->regular && s->size != want)
		return tq_fail(TQ_ERR_FORMAT, "header claims %lu rows of dim "
		    "%lu (%llu bytes) but the file holds %llu bytes",
		    (unsigned long)n, (unsigned long)dim, (ull)want,
		    (ull)s->size);
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = n;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)n : -1;
	return TQ_OK;
}

static enum tq_status
open_vecs(struct tq_reader *r, enum rkind kind)
{
	struct src *s = &r->src;
	int32_t d;

	r->kind = kind;
	TQ_TRY(src_fill(s, 4));
	if (src_avail(s) == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (src_avail(s) < 4)
		return tq_fail(TQ_ERR_FORMAT, "truncated at row 0 (%s)",
		    kind_name[kind]);
	d = (int32_t)rd_le32(src_ptr(s));
	if (d < 1 || (uint32_t)d > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT,
		    "row 0 has invalid dimension %ld (%s)", (long)d,
		    kind_name[kind]);
	if (kind == RK_FVECS)
		set_layout(r, ET_F32LE, 4, 4, (uint32_t)d, 0);
	else if (kind == RK_IVECS)
		set_layout(r, ET_I32LE, 4, 4, (uint32_t)d, 1);
	else
		set_layout(r, ET_U8, 1, 4, (uint32_t)d, 1);
	r->claimed = UNKNOWN;
	r->count = -1;
	if (s->regular) {
		if (s->size % r->rowbytes != 0)
			return tq_fail(TQ_ERR_FORMAT, "file size %llu is not a "
			    "multiple of the row size %zu (%s, dim %ld)",
			    (ull)s->size, r->rowbytes, kind_name[kind],
			    (long)d);
		r->count = (int64_t)(s->size / r->rowbytes);
		r->sized = 1;
	}
	return TQ_OK;
}

/* A strict parser of the Python literal dict in a .npy header. */
struct npy_parse {
	const char *p, *end;
};

static void
npy_ws(struct npy_parse *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

static int
npy_char(struct npy_parse *ps, char c)
{
	npy_ws(ps);
	if (ps->p < ps->end && *ps->p == c) {
		ps->p++;
		return 1;
	}
	return 0;
}

/* A quoted string without escapes into out[cap]. */
static int
npy_string(struct npy_parse *ps, char *out, size_t cap)
{
	char q;
	size_t n = 0;

	npy_ws(ps);
	if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
		return 0;
	q = *ps->p++;
	while (ps->p < ps->end && *ps->p != q) {
		if (*ps->p == '\\' || n + 1 >= cap)
			return 0;
		out[n++] = *ps->p++;
	}
	if (ps->p >= ps->end)
		return 0;
	ps->p++;
	out[n] = '\0';
	return 1;
}

static int
npy_word(struct npy_parse *ps, const char *w)
{
	size_t n = strlen(w);

	npy_ws(ps);
	if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
		ps->p += n;
		return 1;
	}
	return 0;
}

static int
npy_uint(struct npy_parse *ps, uint64_t *v)
{
	uint64_t x = 0;
	int digits = 0;

	npy_ws(ps);
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
		if (ck_mul64(x, 10, &x) ||
		    ck_add64(x, (uint64_t)(*ps->p - '0'), &x))
			return 0;
		ps->p++;
		digits++;
	}
	if (digits == 0)
		return 0;
	if (ps->p < ps->end && *ps->p == 'L')	/* Python 2 long */
		ps->p++;
	*v = x;
	return 1;
}

/* (a, b, ...) with an optional trailing comma; at most 8 entries kept. */
static int
npy_shape(struct npy_parse *ps, uint64_t *shape, int *ndim)
{
	int n = 0;

	if (!npy_char(ps, '('))
		return 0;
	if (npy_char(ps, ')')) {
		*ndim = 0;
		return 1;
	}
	for (;;) {
		uint64_t v;

		if (!npy_uint(ps, &v))
			return 0;
		if (n < 8)
			shape[n] = v;
		n++;
		/* Python writes a 1-tuple "(d,)": "(d)" is just a number. */
		if (n > 1 && npy_char(ps, ')'))
			break;
		if (!npy_char(ps, ','))
			return 0;
		if (npy_char(ps, ')'))
			break;
	}
	*ndim = n;
	return 1;
}

static enum tq_status
npy_header(struct tq_reader *r, const char *hdr, size_t len, uint64_t *n,
    uint64_t *d)
{
	struct npy_parse ps = { hdr, hdr + len };
	char key[32], descr[32];
	uint64_t shape[8] = { 0 };
	int have_descr = 0, have_fo = 0, have_shape = 0, fortran = 0, ndim = 0;

	if (!npy_char(&ps, '{'))
		goto bad;
	while (!npy_char(&ps, '}')) {
		if (!npy_string(&ps, key, sizeof(key)) || !npy_char(&ps, ':'))
			goto bad;
		if (strcmp(key, "descr") == 0 && !have_descr) {
			if (!npy_string(&ps, descr, sizeof(descr)))
				return tq_fail(TQ_ERR_UNSUPPORTED,
				    "npy structured dtypes are not supported");
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0 && !have_fo) {
			if (npy_word(&ps, "True"))
				fortran = 1;
			else if (!npy_word(&ps, "False"))
				goto bad;
			have_fo = 1;
		} else if (strcmp(key, "shape") == 0 && !have_shape) {
			if (!npy_shape(&ps, shape, &ndim))
				goto bad;
			have_shape = 1;
		} else {
			goto bad;
		}
		if (!npy_char(&ps, ',')) {
			if (!npy_char(&ps, '}'))
				goto bad;
			break;
		}
	}
	while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\n'))
		ps.p++;
	if (ps.p != ps.end || !have_descr || !have_fo || !have_shape)
		goto bad;

	if (strcmp(descr, "<f4") == 0)
		set_layout(r, ET_F32LE, 4, 0, 0, 0);
	else if (strcmp(descr, "<f8") == 0)
		set_layout(r, ET_F64LE, 8, 0, 0, 0);
	else if (strcmp(descr, "<i4") == 0)
		set_layout(r, ET_I32LE, 4, 0, 0, 1);
	else if (strcmp(descr, "|u1") == 0)
		set_layout(r, ET_U8, 1, 0, 0, 1);
	else
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy dtype '%s' is not "
		    "supported (expected <f4, <f8, <i4 or |u1)", descr);
	if (fortran)
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "npy arrays in Fortran order are not supported");
	if (ndim == 1) {
		*n = 1;
		*d = shape[0];
	} else if (ndim == 2) {
		*n = shape[0];
		*d = shape[1];
	} else {
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy array has %d "
		    "dimensions (expected 1 or 2)", ndim);
	}
	return TQ_OK;
bad:
	return tq_fail(TQ_ERR_FORMAT, "malformed npy header");
}

static enum tq_status
open_npy(struct tq_reader *r)
{
	struct src *s = &r->src;
	const uint8_t *p;
	size_t off, hlen;
	uint64_t n = 0, d = 0, bytes, total;

	r->kind = RK_NPY;
	TQ_TRY(src_fill(s, 12));
	p = src_ptr(s);
	if (src_avail(s) < 10)
		return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
	if (p[6] == 1 && p[7] == 0) {
		off = 10;
		hlen = rd_le16(p + 8);
	} else if ((p[6] == 2 || p[6] == 3) && p[7] == 0) {
		if (src_avail(s) < 12)
			return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
		off = 12;
		hlen = rd_le32(p + 8);
	} else {
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "npy version %u.%u is not supported", p[6], p[7]);
	}
	if (hlen > NPY_MAX_HEADER)
		return tq_fail(TQ_ERR_FORMAT, "npy header too long (%zu bytes)",
		    hlen);
	TQ_TRY(src_fill(s, off + hlen));
	if (src_avail(s) < off + hlen)
		return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
	TQ_TRY(npy_header(r, (const char *)src_ptr(s) + off, hlen, &n, &d));
	src_consume(s, off + hlen);
	if (d < 1)
		return tq_fail(TQ_ERR_FORMAT, "npy rows have dimension 0");
	if (d > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy rows have dimension "
		    "%llu (at most %u)", (ull)d, TQ_MAX_DIM);
	set_layout(r, r->et, r->esz, 0, (uint32_t)d, r->is_integer);
	if (ck_mul64(n, r->rowbytes, &bytes) || n > INT64_MAX ||
	    ck_add64(bytes, off + hlen, &total))
		return tq_fail(TQ_ERR_FORMAT, "npy shape (%llu, %llu) is too "
		    "large", (ull)n, (ull)d);
	if (s->regular && s->size != total)
		return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows of dim "
		    "%llu (%llu bytes) but the file holds %llu bytes", (ull)n,
		    (ull)d, (ull)total, (ull)(s->size));
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = n;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)n : -1;
	return TQ_OK;
}

static int
idx_type(uint8_t t, enum etype *et, size_t *esz, int *is_int)
{
	switch (t) {
	case 0x08: *et = ET_U8; *esz = 1; *is_int = 1; return 1;
	case 0x09: *et = ET_I8; *esz = 1; *is_int = 1; return 1;
	case 0x0B: *et = ET_I16BE; *esz = 2; *is_int = 1; return 1;
	case 0x0C: *et = ET_I32BE; *esz = 4; *is_int = 1; return 1;
	case 0x0D: *et = ET_F32BE; *esz = 4; *is_int = 0; return 1;
	case 0x0E: *et = ET_F64BE; *esz = 8; *is_int = 0; return 1;
	}
	return 0;
}

static int
is_idx(const uint8_t *p, size_t avail)
{
	enum etype et;
	size_t esz;
	int is_int;

	return avail >= 4 && p[0] == 0 && p[1] == 0 &&
	    idx_type(p[2], &et, &esz, &is_int) && p[3] >= 1 && p[3] <= 4;
}

static uint32_t
rd_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static enum tq_status
open_idx(struct tq_reader *r)
{
	struct src *s = &r->src;
	const uint8_t *p = src_ptr(s);
	enum etype et;
	size_t esz, hdr;
	int is_int;
	unsigned i, nd = p[3];
	uint64_t rows, rowlen = 1, total;

	r->kind = RK_IDX;
	if (!idx_type(p[2], &et, &esz, &is_int))
		return tq_fail(TQ_ERR_FORMAT, "bad IDX element type");
	hdr = 4 + 4 * (size_t)nd;
	TQ_TRY(src_fill(s, hdr));
	if (src_avail(s) < hdr)
		return tq_fail(TQ_ERR_FORMAT, "truncated IDX header");
	p = src_ptr(s);
	rows = rd_be32(p + 4);
	for (i = 1; i < nd; i++) {
		uint32_t v = rd_be32(p + 4 + 4 * i);

		if (v == 0)
			return tq_fail(TQ_ERR_FORMAT, "IDX dimension %u is 0",
			    i);
		rowlen *= v;
		if (rowlen > TQ_MAX_DIM)
			return tq_fail(TQ_ERR_UNSUPPORTED, "IDX rows have more "
			    "than %u values", TQ_MAX_DIM);
	}
	src_consume(s, hdr);
	set_layout(r, et, esz, 0, (uint32_t)rowlen, is_int);
	total = hdr + rows * r->rowbytes;	/* < 2^32 * 2^19 */
	if (s->regular && s->size != total)
		return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows of dim "
		    "%llu (%llu bytes) but the file holds %llu bytes",
		    (ull)rows, (ull)rowlen, (ull)total, (ull)(s->size));
	if (rows == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = rows;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)rows : -1;
	return TQ_OK;
}

static enum tq_status
reader_open(struct tq_reader *r, const char *path, const char *dataset)
{
	static const char h5sig[] = TQ_HDF5_SIGNATURE;
	const char *name = strcmp(path, "-") == 0 ? NULL : path;
	struct src *s = &r->src;
	const uint8_t *p;
	size_t avail;
	uint64_t n;

	TQ_TRY(src_open(s, path));
	TQ_TRY(src_fill(s, 16));
	p = src_ptr(s);
	avail = src_avail(s);
	if (avail == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors (empty input)");
	if (avail >= 8 && memcmp(p, h5sig, 8) == 0) {
		if (name == NULL || !s->regular)
			return tq_fail(TQ_ERR_UNSUPPORTED, "HDF5 input must be "
			    "a regular file, not a pipe or standard input");
		src_close(s);
		r->kind = RK_HDF5;
		TQ_TRY(tq_h5_open(path, dataset, &r->h5, &r->dim, &n,
		    &r->is_integer));
		r->claimed = n;
		r->count = (int64_t)n;
		return TQ_OK;
	}
	if (is_zstd(p, avail)) {
		TQ_TRY(src_start_zstd(s));
		TQ_TRY(src_fill(s, 16));
		p = src_ptr(s);
		avail = src_avail(s);
		if (avail == 0)
			return tq_fail(TQ_ERR_EMPTY,
			    "no vectors (empty input)");
		if (avail >= 8 && memcmp(p, h5sig, 8) == 0)
			return tq_fail(TQ_ERR_UNSUPPORTED,
			    "HDF5 inside zstd is not supported");
		if (is_zstd(p, avail))
			return tq_fail(TQ_ERR_UNSUPPORTED,
			    "nested zstd compression is not supported");
	}
	if (avail >= 6 && memcmp(p, "\x93NUMPY", 6) == 0)
		return open_npy(r);
	if (has_ext(name, ".npy"))
		return tq_fail(TQ_ERR_FORMAT, "not a .npy file (bad magic)");
	if (has_ext(name, ".fvecs"))
		return open_vecs(r, RK_FVECS);
	if (has_ext(name, ".ivecs"))
		return open_vecs(r, RK_IVECS);
	if (has_ext(name, ".bvecs"))
		return open_vecs(r, RK_BVECS);
	if (is_idx(p, avail))
		return open_idx(r);
	return open_fixture(r);
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
	src_init(&r->src);
	r->kind = RK_FIXTURE;
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

const char *
tq_reader_format(const struct tq_reader *r)
{
	return kind_name[r->kind];
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
	src_close(&r->src);
	tq_h5_close(r->h5);
	free(r);
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
static enum tq_status
convert(const struct tq_reader *r, const uint8_t *p, size_t n, uint64_t row0,
    float *f, int32_t *iv)
{
	size_t i;

	switch (r->et) {
	case ET_F32LE:
		if (HOST_LE)
			memcpy(f, p, n * 4);
		else
			for (i = 0; i < n; i++)
				f[i] = rd_lef32(p + 4 * i);
		return tq_vec_check_finite(f, n / r->dim, r->dim, row0);
	case ET_F32BE:
		for (i = 0; i < n; i++) {
			uint32_t u = rd_be32(p + 4 * i);

			memcpy(f + i, &u, 4);
		}
		return tq_vec_check_finite(f, n / r->dim, r->dim, row0);
	case ET_F64LE:
	case ET_F64BE:
		for (i = 0; i < n; i++) {
			uint64_t u = r->et == ET_F64LE ? rd_le64(p + 8 * i) :
			    rd_be64(p + 8 * i);
			double v;

			memcpy(&v, &u, 8);
			if (!(v >= -(double)FLT_MAX && v <= (double)FLT_MAX))
				return nonfinite_at(row0, r->dim, i);
			f[i] = (float)v;
		}
		return TQ_OK;
	case ET_I32LE:
		if (f != NULL)
			for (i = 0; i < n; i++)
				f[i] = (float)(int32_t)rd_le32(p + 4 * i);
		else if (HOST_LE)
			memcpy(iv, p, n * 4);
		else
			for (i = 0; i < n; i++)
				iv[i] = (int32_t)rd_le32(p + 4 * i);
		return TQ_OK;
	case ET_I32BE:
		for (i = 0; i < n; i++) {
			int32_t v = (int32_t)rd_be32(p + 4 * i);

			if (f != NULL)
				f[i] = (float)v;
			else
				iv[i] = v;
		}
		return TQ_OK;
	case ET_I16BE:
		for (i = 0; i < n; i++) {
			int16_t v = (int16_t)rd_be16(p + 2 * i);

			if (f != NULL)
				f[i] = v;
			else
				iv[i] = v;
		}
		return TQ_OK;
	case ET_U8:
		if (f != NULL)
			for (i = 0; i < n; i++)
				f[i] = p[i];
		else
			for (i = 0; i < n; i++)
				iv[i] = p[i];
		return TQ_OK;
	case ET_I8:
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

/* k whole rows at p (r->rowbytes each) into the output at row `out`. */
static enum tq_status
convert_rows(const struct tq_reader *r, const uint8_t *p, size_t k,
    size_t out, float *f, int32_t *iv)
{
	size_t j, dim = r->dim;

	if (r->prefix == 0)
		return convert(r, p, k * dim, r->row, f ? f + out * dim : NULL,
		    iv ? iv + out * dim : NULL);
	for (j = 0; j < k; j++, p += r->rowbytes, out++) {
		int32_t d = (int32_t)rd_le32(p);

		if (d != (int32_t)r->dim)
			return tq_fail(TQ_ERR_FORMAT, "row %llu has dimension "
			    "%ld, expected %lu (%s)", (ull)(r->row + j),
			    (long)d, (unsigned long)r->dim,
			    kind_name[r->kind]);
		TQ_TRY(convert(r, p + r->prefix, dim, r->row + j,
		    f ? f + out * dim : NULL, iv ? iv + out * dim : NULL));
	}
	return TQ_OK;
}

static enum tq_status
truncated(const struct tq_reader *r)
{
	switch (r->kind) {
	case RK_FIXTURE:
		return tq_fail(TQ_ERR_FORMAT, "truncated: expected %llu rows, "
		    "got %llu", (ull)r->claimed, (ull)r->row);
	case RK_NPY:
	case RK_IDX:
		return tq_fail(TQ_ERR_FORMAT, "truncated at row %llu of %llu",
		    (ull)r->row, (ull)r->claimed);
	default:
		return tq_fail(TQ_ERR_FORMAT, "truncated at row %llu (%s)",
		    (ull)r->row, kind_name[r->kind]);
	}
}

static enum tq_status
read_bytes(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	struct src *s = &r->src;
	size_t done = 0, k;

	while (done < max && !r->ended) {
		if (r->claimed != UNKNOWN && r->row == r->claimed) {
			/* A stream's size was not checked: no extra bytes. */
			r->ended = 1;
			if (s->regular)
				break;
			TQ_TRY(src_fill(s, 1));
			if (src_avail(s) != 0)
				return tq_fail(TQ_ERR_FORMAT, "trailing data "
				    "after %llu rows", (ull)r->row);
			break;
		}
		TQ_TRY(src_fill(s, r->rowbytes));
		if (src_avail(s) < r->rowbytes) {
			if (src_avail(s) == 0 && r->claimed == UNKNOWN) {
				r->ended = 1;
				break;
			}
			return truncated(r);
		}
		k = src_avail(s) / r->rowbytes;
		if (k > max - done)
			k = max - done;
		if (r->claimed != UNKNOWN && k > r->claimed - r->row)
			k = (size_t)(r->claimed - r->row);
		TQ_TRY(convert_rows(r, src_ptr(s), k, done, f, iv));
		src_consume(s, k * r->rowbytes);
		r->row += k;
		done += k;
	}
	*got = done;
	return TQ_OK;
}

static enum tq_status
read_h5(struct tq_reader *r, float *f, int32_t *iv, size_t max, size_t *got)
{
	size_t k = max;

	if (k > r->claimed - r->row)
		k = (size_t)(r->claimed - r->row);
	if (k > 0)
		TQ_TRY(tq_h5_read(r->h5, r->row, k, f, iv));
	r->row += k;
	*got = k;
	return TQ_OK;
}

static enum tq_status
reader_read(struct tq_reader *r, float *f, int32_t *iv, size_t max,
    size_t *got)
{
	enum tq_status st;
	size_t bytes;

	*got = 0;
	if (r->failed != TQ_OK)
		return tq_fail(r->failed, "an earlier read failed");
	if (max == 0)
		return TQ_OK;
	if (f == NULL && iv == NULL)
		return tq_fail(TQ_ERR_ARG, "no buffer");
	if (iv != NULL && !r->is_integer)
		return tq_fail(TQ_ERR_UNSUPPORTED, "%s input holds floats, not "
		    "integers", kind_name[r->kind]);
	if (ck_mul(max, (size_t)r->dim * 4, &bytes))
		return tq_fail(TQ_ERR_OVERFLOW, "%zu rows of dim %lu "
		    "overflow", max, (unsigned long)r->dim);
	if (r->kind == RK_HDF5)
		st = read_h5(r, f, iv, max, got);
	else
		st = read_bytes(r, f, iv, max, got);
	if (st != TQ_OK) {
		*got = 0;
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
	struct src *s = &r->src;
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
	if (r->kind != RK_HDF5 && first > 0) {
		if (!s->regular || s->zd != NULL)
			return tq_fail(TQ_ERR_UNSUPPORTED, "cannot seek in "
			    "this input");
		if (ck_mul64(first, r->rowbytes, &skip))
			return tq_fail(TQ_ERR_OVERFLOW, "row offset overflows");
		if (skip <= src_avail(s)) {
			src_consume(s, (size_t)skip);
		} else {
			skip -= src_avail(s);
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
	cap = BUF_SIZE / (rowf * 4);
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

/* ------------------------------------------------------------------------ */
/* External ids                                                              */

struct tq_ids_reader {
	struct src src;
	int raw;		/* .u64: little-endian uint64 */
	int ended;
	enum tq_status failed;
	uint64_t line;		/* text: current line, from 1 */
	uint64_t cur;		/* text: value of the line so far */
	int digits, cr;
	uint64_t left;		/* ids still to deliver (tq_ids_window) */
	int seq;		/* tq_ids_sequence: no file, ids from `next` */
	uint64_t next;
};

enum tq_status
tq_ids_open(const char *path, struct tq_ids_reader **out)
{
	struct tq_ids_reader *r;
	enum tq_status st;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return tq_fail(TQ_ERR_ARG, "no ids file name");
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	src_init(&r->src);
	r->line = 1;
	r->left = UNKNOWN;
	r->raw = strcmp(path, "-") != 0 && has_ext(path, ".u64");
	st = src_open(&r->src, path);
	if (st == TQ_OK)
		st = src_fill(&r->src, 4);
	if (st == TQ_OK && is_zstd(src_ptr(&r->src), src_avail(&r->src)))
		st = src_start_zstd(&r->src);
	if (st == TQ_OK && r->raw && r->src.regular && r->src.size % 8 != 0)
		st = tq_fail(TQ_ERR_FORMAT, "file size %llu is not a multiple "
		    "of 8 (u64 ids)", (ull)r->src.size);
	if (st != TQ_OK) {
		tq_ids_close(r);
		return st;
	}
	*out = r;
	return TQ_OK;
}

static enum tq_status
ids_raw(struct tq_ids_reader *r, uint64_t *ids, size_t max, size_t *got)
{
	struct src *s = &r->src;
	size_t done = 0, k, i;

	while (done < max) {
		TQ_TRY(src_fill(s, 8));
		if (src_avail(s) < 8) {
			if (src_avail(s) != 0)
				return tq_fail(TQ_ERR_FORMAT, "truncated: %zu "
				    "trailing bytes (u64 ids)", src_avail(s));
			r->ended = 1;
			break;
		}
		k = src_avail(s) / 8;
		if (k > max - done)
			k = max - done;
		for (i = 0; i < k; i++)
			ids[done + i] = rd_le64(src_ptr(s) + 8 * i);
		src_consume(s, 8 * k);
		done += k;
	}
	*got = done;
	return TQ_OK;
}

static enum tq_status
ids_bad_line(const struct tq_ids_reader *r)
{
	return tq_fail(TQ_ERR_FORMAT, "line %llu: not an unsigned integer",
	    (ull)r->line);
}

/* Ends the current line: it must have held digits only. */
static enum tq_status
ids_emit(struct tq_ids_reader *r, uint64_t *id)
{
	if (r->digits == 0)
		return ids_bad_line(r);
	*id = r->cur;
	r->cur = 0;
	r->digits = 0;
	r->cr = 0;
	r->line++;
	return TQ_OK;
}

static enum tq_status
ids_text(struct tq_ids_reader *r, uint64_t *ids, size_t max, size_t *got)
{
	struct src *s = &r->src;
	size_t done = 0;

	while (done < max) {
		const uint8_t *p, *end;

		TQ_TRY(src_fill(s, 1));
		if (src_avail(s) == 0) {
			/* The last line may lack its newline. */
			if (r->digits > 0 || r->cr)
				TQ_TRY(ids_emit(r, &ids[done++]));
			r->ended = 1;
			break;
		}
		p = src_ptr(s);
		end = p + src_avail(s);
		for (; p < end && done < max; p++) {
			unsigned c = *p;

			if (c == '\n') {
				TQ_TRY(ids_emit(r, &ids[done++]));
			} else if (r->cr) {
				return ids_bad_line(r);
			} else if (c == '\r') {
				r->cr = 1;
			} else if (c >= '0' && c <= '9') {
				if (ck_mul64(r->cur, 10, &r->cur) ||
				    ck_add64(r->cur, c - '0', &r->cur))
					return tq_fail(TQ_ERR_FORMAT, "line "
					    "%llu: value does not fit in 64 "
					    "bits", (ull)r->line);
				r->digits = 1;
			} else {
				return ids_bad_line(r);
			}
		}
		src_consume(s, (size_t)(p - src_ptr(s)));
	}
	*got = done;
	return TQ_OK;
}

enum tq_status
tq_ids_read(struct tq_ids_reader *r, uint64_t *ids, size_t max, size_t *got)
{
	enum tq_status st;

	*got = 0;
	if (r->failed != TQ_OK)
		return tq_fail(r->failed, "an earlier read failed");
	if (r->ended || max == 0)
		return TQ_OK;
	if (r->left != UNKNOWN && max > r->left)
		max = (size_t)r->left;
	if (r->seq) {
		for (size_t i = 0; i < max; i++)
			ids[i] = r->next++;
		*got = max;
		st = TQ_OK;
	} else
		st = r->raw ? ids_raw(r, ids, max, got) :
		    ids_text(r, ids, max, got);
	if (st != TQ_OK) {
		*got = 0;
		r->failed = st;
	} else if (r->left != UNKNOWN) {
		r->left -= *got;
		if (r->left == 0)
			r->ended = 1;
	}
	return st;
}

enum tq_status
tq_ids_window(struct tq_ids_reader *r, uint64_t first, uint64_t count)
{
	uint64_t buf[512];
	size_t got;

	if (r->left != UNKNOWN)
		return tq_fail(TQ_ERR_ARG, "ids window set twice");
	while (first > 0) {
		TQ_TRY(tq_ids_read(r, buf, first < 512 ? (size_t)first : 512,
		    &got));
		if (got == 0)
			return tq_fail(TQ_ERR_MISMATCH, "the ids file ends "
			    "before the window's first id");
		first -= got;
	}
	r->left = count;
	if (count == 0)
		r->ended = 1;
	return TQ_OK;
}

enum tq_status
tq_ids_sequence(uint64_t first, uint64_t count, struct tq_ids_reader **out)
{
	struct tq_ids_reader *r;

	*out = NULL;
	if (count > 0 && first + (count - 1) < first)
		return tq_fail(TQ_ERR_OVERFLOW, "ids past 2^64 - 1");
	if ((r = calloc(1, sizeof(*r))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	src_init(&r->src);
	r->seq = 1;
	r->next = first;
	r->left = count;
	r->ended = count == 0;
	*out = r;
	return TQ_OK;
}

void
tq_ids_close(struct tq_ids_reader *r)
{
	if (r == NULL)
		return;
	src_close(&r->src);
	free(r);
}

/* ------------------------------------------------------------------------ */
/* Writers                                                                   */

struct tq_writer {
	enum tq_vecfmt fmt;
	uint32_t dim;
	uint64_t declared;	/* rows promised at open, or TQ_COUNT_UNKNOWN */
	uint64_t written;
	int fd;			/* temporary file, spool or standard output */
	int to_stdout;		/* a stream: stdout or a device/FIFO */
	int outfd;		/* its descriptor */
	int own_outfd;		/* opened here (a device or FIFO path) */
	int spool;		/* fd is an unlinked spool copied at commit */
	char *dest;		/* final path; NULL for standard output */
	char *tmp;		/* temporary path, unlinked on failure */
	char *dir;		/* directory of dest, fsync'd after rename */
	uint8_t *buf;
	size_t len;
	enum tq_status failed;
	int labeled;		/* rows have labels: 1, none: 0, no row yet: -1 */
};

static enum tq_status
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t k = write(fd, p, n);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			return tq_fail(TQ_ERR_IO, "write: %s", strerror(errno));
		}
		p += k;
		n -= (size_t)k;
	}
	return TQ_OK;
}

static enum tq_status
w_flush(struct tq_writer *w)
{
	enum tq_status st;

	if (w->len == 0)
		return TQ_OK;
	st = write_all(w->fd, w->buf, w->len);
	w->len = 0;
	return st;
}

static enum tq_status
w_put(struct tq_writer *w, const void *data, size_t n)
{
	const uint8_t *p = data;

	while (n > 0) {
		size_t k = BUF_SIZE - w->len;

		if (k > n)
			k = n;
		memcpy(w->buf + w->len, p, k);
		w->len += k;
		p += k;
		n -= k;
		if (w->len == BUF_SIZE)
			TQ_TRY(w_flush(w));
	}
	return TQ_OK;
}

/* The process umask, read without changing it where the kernel allows. */
static mode_t
current_umask(void)
{
	FILE *fp = fopen("/proc/self/status", "re");
	char line[128];
	unsigned mask;
	mode_t m;

	if (fp != NULL) {
		while (fgets(line, sizeof(line), fp) != NULL)
			if (sscanf(line, "Umask: %o", &mask) == 1) {
				fclose(fp);
				return (mode_t)(mask & 0777);
			}
		fclose(fp);
	}
	m = umask(022);
	umask(m);
	return m;
}

/* An unlinked temporary file in $TMPDIR for rows bound for a pipe. */
static enum tq_status
open_spool(int *fd)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	size_t len;

	if (dir == NULL || *dir == '\0')
		dir = "/tmp";
	len = strlen(dir) + sizeof("/tq-spool.XXXXXX");
	if ((path = malloc(len)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	snprintf(path, len, "%s/tq-spool.XXXXXX", dir);
	*fd = mkostemp(path, O_CLOEXEC);
	if (*fd < 0) {
		free(path);
		return tq_fail(TQ_ERR_IO, "spool file: %s", strerror(errno));
	}
	unlink(path);
	free(path);
	return TQ_OK;
}

/* Creates <dir>/.<name>.tmp.XXXXXX beside the destination. */
static enum tq_status
open_temp(struct tq_writer *w, const char *path)
{
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	size_t dlen, len;

	if (*base == '\0')
		return tq_fail(TQ_ERR_ARG, "output path '%s' names a directory",
		    path);
	dlen = slash == NULL ? 1 : slash == path ? 1 : (size_t)(slash - path);
	if ((w->dest = strdup(path)) == NULL ||
	    (w->dir = malloc(dlen + 1)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	memcpy(w->dir, slash == NULL ? "." : path, dlen);
	w->dir[dlen] = '\0';
	len = strlen(w->dir) + strlen(base) + sizeof("/..tmp.XXXXXX");
	if ((w->tmp = malloc(len)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	snprintf(w->tmp, len, "%s/.%s.tmp.XXXXXX", w->dir, base);
	w->fd = mkostemp(w->tmp, O_CLOEXEC);
	if (w->fd < 0) {
		free(w->tmp);
		w->tmp = NULL;
		return tq_fail(TQ_ERR_IO, "create: %s", strerror(errno));
	}
	if (fchmod(w->fd, 0666 & ~current_umask()) != 0)
		return tq_fail(TQ_ERR_IO, "chmod: %s", strerror(errno));
	return TQ_OK;
}

/* Closes and removes what the writer made, and frees it. */
static void
w_free(struct tq_writer *w)
{
	int saved = errno;

	if (w->fd >= 0 && !(w->to_stdout && !w->spool))
		close(w->fd);
	if (w->own_outfd)
		close(w->outfd);
	if (w->tmp != NULL)
		unlink(w->tmp);
	free(w->tmp);
	free(w->dest);
	free(w->dir);
	free(w->buf);
	free(w);
	errno = saved;
}

enum tq_status
tq_writer_open(const char *path, enum tq_vecfmt fmt, uint32_t dim,
    uint64_t n, struct tq_writer **out)
{
	struct tq_writer *w;
	enum tq_status st;
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t hlen;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return tq_fail(TQ_ERR_ARG, "no output file name");
	if (!tq_wfmt_known(fmt))
		return tq_fail(TQ_ERR_ARG, "unknown vector format %d",
		    (int)fmt);
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "dimension %lu is not in 1..%u",
		    (unsigned long)dim, TQ_MAX_DIM);
	if (n != TQ_COUNT_UNKNOWN && n > tq_wfmt_max_rows(fmt))
		return tq_fail(TQ_ERR_OVERFLOW, "a fixture holds at most "
		    "%lu rows", (unsigned long)UINT32_MAX);
	if ((w = calloc(1, sizeof(*w))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	w->fd = -1;
	w->fmt = fmt;
	w->dim = dim;
	w->declared = n;
	w->labeled = -1;
	if ((w->buf = malloc(BUF_SIZE)) == NULL) {
		w_free(w);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	w->outfd = STDOUT_FILENO;
	st = TQ_OK;
	if (strcmp(path, "-") != 0 && tq_path_is_special(path)) {
		/*
		 * A device or FIFO (/dev/null, a named pipe) is written in
		 * place like standard output: renaming a temporary file
		 * over it would replace the device with a regular file.
		 */
		w->outfd = open(path, O_WRONLY | O_CLOEXEC);
		if (w->outfd < 0)
			st = tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
		else
			w->own_outfd = 1;
	}
	if (st != TQ_OK) {
		/* reported below */
	} else if (strcmp(path, "-") == 0 || w->own_outfd) {
		w->to_stdout = 1;
		if (tq_wfmt_counted(fmt) && n == TQ_COUNT_UNKNOWN) {
			w->spool = 1;
			st = open_spool(&w->fd);
		} else {
			w->fd = w->outfd;
			st = TQ_OK;
		}
	} else {
		st = open_temp(w, path);
	}
	/* A header of unknown count gets its count at commit. */
	if (st == TQ_OK && !w->spool) {
		hlen = tq_wfmt_header(fmt, dim, n == TQ_COUNT_UNKNOWN ? 0 : n,
		    hdr);
		st = w_put(w, hdr, hlen);
	}
	if (st != TQ_OK) {
		w_free(w);
		return st;
	}
	*out = w;
	return TQ_OK;
}

/* Checks a write of n rows before any byte of it is written. */
static enum tq_status
w_check(struct tq_writer *w, size_t n, int ints, int labels)
{
	size_t elems;
	uint64_t total;

	if (w->failed != TQ_OK)
		return tq_fail(w->failed, "an earlier write failed");
	if (ints && w->fmt != TQ_VEC_IVECS)
		return tq_fail(TQ_ERR_ARG, "integer rows need an ivecs writer");
	if (labels && !tq_wfmt_is_text(w->fmt))
		return tq_fail(TQ_ERR_ARG, "labels need a text writer");
	if (w->labeled >= 0 && w->labeled != labels)
		return tq_fail(TQ_ERR_ARG, labels ? "labelled rows after rows "
		    "without labels" : "rows without labels after labelled rows");
	if (ck_mul(n, w->dim, &elems) || ck_add64(w->written, n, &total))
		return tq_fail(TQ_ERR_OVERFLOW, "too many rows");
	if (total > tq_wfmt_max_rows(w->fmt))
		return tq_fail(TQ_ERR_OVERFLOW, "a fixture holds at most "
		    "%lu rows", (unsigned long)UINT32_MAX);
	if (w->declared != TQ_COUNT_UNKNOWN && total > w->declared)
		return tq_fail(TQ_ERR_ARG, "more rows than the %llu declared",
		    (ull)w->declared);
	return TQ_OK;
}

static enum tq_status
w_put_cb(void *w, const void *data, size_t n)
{
	return w_put(w, data, n);
}

/*
 * Rows of 4-byte values copied as they are (fixture, npy, fvecs, ivecs
 * from int32 rows) are written here; the others are encoded by
 * tq_wfmt_rows (vecwrite_fmt.c), which checks them all first.
 */
static enum tq_status
w_rows(struct tq_writer *w, const void *rows, const char *const *labels,
    size_t n, int ints)
{
	const uint8_t *p = rows;
	uint8_t pre[4];
	size_t i, j, rowbytes = (size_t)w->dim * 4;
	enum tq_status st = TQ_OK;
	int bare = w->fmt == TQ_VEC_FIXTURE || w->fmt == TQ_VEC_NPY;

	wr_le32(pre, w->dim);
	if (!bare && w->fmt != TQ_VEC_FVECS && !ints) {
		st = tq_wfmt_rows(w->fmt, w->dim, rows, labels, n, w->written,
		    w_put_cb, w);
		/* A refused row leaves nothing half-written behind. */
		if (st == TQ_ERR_ARG)
			return st;
	} else if (bare && HOST_LE) {
		st = w_put(w, p, n * rowbytes);
	} else {
		for (i = 0; i < n && st == TQ_OK; i++, p += rowbytes) {
			if (!bare)
				st = w_put(w, pre, 4);
			if (HOST_LE) {
				if (st == TQ_OK)
					st = w_put(w, p, rowbytes);
				continue;
			}
			for (j = 0; j < w->dim && st == TQ_OK; j++) {
				uint32_t u;
				uint8_t le[4];

				memcpy(&u, p + 4 * j, 4);
				wr_le32(le, u);
				st = w_put(w, le, 4);
			}
		}
	}
	if (st != TQ_OK) {
		w->failed = st;
	} else {
		w->written += n;
		w->labeled = labels != NULL;
	}
	return st;
}

enum tq_status
tq_writer_write(struct tq_writer *w, const float *rows, size_t n)
{
	TQ_TRY(w_check(w, n, 0, 0));
	TQ_TRY(tq_vec_check_finite(rows, n, w->dim, w->written));
	return w_rows(w, rows, NULL, n, 0);
}

enum tq_status
tq_writer_write_i32(struct tq_writer *w, const int32_t *rows, size_t n)
{
	TQ_TRY(w_check(w, n, 1, 0));
	return w_rows(w, rows, NULL, n, 1);
}

enum tq_status
tq_writer_write_labeled(struct tq_writer *w, const float *rows,
    const char *const *labels, size_t n)
{
	TQ_TRY(w_check(w, n, 0, labels != NULL));
	TQ_TRY(tq_vec_check_finite(rows, n, w->dim, w->written));
	return w_rows(w, rows, labels, n, 0);
}

/* Copies the spool to standard output behind the header. */
static enum tq_status
w_unspool(struct tq_writer *w)
{
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t got, hlen;

	hlen = tq_wfmt_header(w->fmt, w->dim, w->written, hdr);
	TQ_TRY(write_all(w->outfd, hdr, hlen));
	if (lseek(w->fd, 0, SEEK_SET) != 0)
		return tq_fail(TQ_ERR_IO, "seek: %s", strerror(errno));
	for (;;) {
		TQ_TRY(raw_read(w->fd, w->buf, BUF_SIZE, &got));
		if (got == 0)
			return TQ_OK;
		TQ_TRY(write_all(w->outfd, w->buf, got));
	}
}

static enum tq_status
fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return tq_fail(TQ_ERR_IO, "open directory: %s",
		    strerror(errno));
	if (fsync(fd) != 0 && errno != EINVAL) {
		int saved = errno;

		close(fd);
		errno = saved;
		return tq_fail(TQ_ERR_IO, "fsync directory: %s",
		    strerror(errno));
	}
	close(fd);
	return TQ_OK;
}

static enum tq_status
w_commit(struct tq_writer *w)
{
	uint8_t hdr[TQ_WFMT_HEADER_MAX];
	size_t hlen;
	int fd;

	if (w->failed != TQ_OK)
		return tq_fail(w->failed, "an earlier write failed");
	TQ_TRY(w_flush(w));
	if (w->declared != TQ_COUNT_UNKNOWN && w->written != w->declared)
		return tq_fail(TQ_ERR_ARG, "wrote %llu rows but %llu were "
		    "declared", (ull)w->written, (ull)w->declared);
	if (w->to_stdout)
		return w->spool ? w_unspool(w) : TQ_OK;
	if (tq_wfmt_counted(w->fmt) && w->declared == TQ_COUNT_UNKNOWN) {
		hlen = tq_wfmt_header(w->fmt, w->dim, w->written, hdr);
		ssize_t k = pwrite(w->fd, hdr, hlen, 0);

		if (k < 0 || (size_t)k != hlen) {
			if (k >= 0)
				errno = EIO;
			return tq_fail(TQ_ERR_IO, "write: %s",
			    strerror(errno));
		}
	}
	if (fsync(w->fd) != 0)
		return tq_fail(TQ_ERR_IO, "fsync: %s", strerror(errno));
	fd = w->fd;
	w->fd = -1;
	if (close(fd) != 0)
		return tq_fail(TQ_ERR_IO, "close: %s", strerror(errno));
	if (rename(w->tmp, w->dest) != 0)
		return tq_fail(TQ_ERR_IO, "rename: %s", strerror(errno));
	free(w->tmp);
	w->tmp = NULL;
	return fsync_dir(w->dir);
}

enum tq_status
tq_writer_commit(struct tq_writer *w)
{
	enum tq_status st;

	if (w == NULL)
		return tq_fail(TQ_ERR_ARG, "no writer");
	st = w_commit(w);
	w_free(w);
	return st;
}

void
tq_writer_abort(struct tq_writer *w)
{
	if (w != NULL)
		w_free(w);
}
