/*
 * reader_impl.h - the private interface between the reader core
 * (reader.c) and the vector formats (vecio_fixture.c, vecio_vecs.c,
 * vecio_npy.c, vecio_idx.c, vecio_hdf5.c, vecio_text.c, vecio_w2v.c), and
 * the row checks the writers (vecio.c) share.  Not installed.
 *
 * The core owns the byte source (buffering, zstd, standard input), the
 * row checks and the public tq_reader_* functions.  Each format is one
 * table, struct tq_rformat, listed once in the registry of reader.c:
 * the core shows every format the first bytes of the input and opens
 * the one that bids highest.  A format file never calls another format.
 */
#ifndef TQ_READER_IMPL_H
#define TQ_READER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <zstd.h>

#include "tq.h"

/* The byte source buffer; it must hold the largest row (8-byte values). */
#define TQ_RD_BUF ((size_t)1 << 20)
#define TQ_RD_BUF_MIN ((size_t)4096)
_Static_assert(TQ_RD_BUF >= 8u * TQ_MAX_DIM + 4u, "the buffer holds a row");

/* A row count a header does not give. */
#define TQ_RD_UNKNOWN UINT64_MAX

/* The 8-byte signature of an HDF5 file at offset 0. */
#define TQ_HDF5_SIGNATURE "\x89HDF\r\n\x1a\n"

/* ------------------------------------------------------------------------ */
/* Byte source                                                               */

/*
 * A file descriptor, a buffer of at most TQ_RD_BUF bytes (a small regular
 * file gets a buffer of about its size, grown on demand), and optionally a
 * zstd decompressor in between.  Nothing is allocated from a size a header
 * claims.
 */
struct tq_src {
	int fd;
	int own_fd;
	int regular;		/* plain regular file: `size` is exact */
	uint64_t size;		/* bytes from the start position to the end */
	uint8_t *buf;
	size_t cap;		/* bytes at buf, TQ_RD_BUF_MIN .. TQ_RD_BUF */
	size_t pos, len;	/* unread bytes are buf[pos .. len) */
	int eof;
	ZSTD_DStream *zd;	/* non-NULL: buf holds decompressed bytes */
	uint8_t *zbuf;		/* compressed input */
	size_t zcap;		/* bytes at zbuf */
	ZSTD_inBuffer zin;
	int zeof;
	size_t zlast;		/* last ZSTD_decompressStream result */
};

void tq_src_init(struct tq_src *s);
/* "-" is standard input.  Fails on a directory. */
enum tq_status tq_src_open(struct tq_src *s, const char *path);
void tq_src_close(struct tq_src *s);
/*
 * Makes at least `need` (<= TQ_RD_BUF) unread bytes available, or all that
 * remain at the end of the input.
 */
enum tq_status tq_src_fill(struct tq_src *s, size_t need);
/*
 * One more read (or decompression step) appended to the unread bytes, the
 * buffer grown up to TQ_RD_BUF: for line-oriented input that must not wait
 * for a full buffer.  *got is 0 at the end of the input, or when the
 * unread bytes already fill TQ_RD_BUF.
 */
enum tq_status tq_src_more(struct tq_src *s, size_t *got);
/*
 * Switches to decompression: the bytes already buffered become the start
 * of the compressed input.
 */
enum tq_status tq_src_start_zstd(struct tq_src *s);
int tq_is_zstd(const uint8_t *p, size_t avail);
/* read(2) retried on EINTR. */
enum tq_status tq_raw_read(int fd, uint8_t *dst, size_t cap, size_t *got);

static inline size_t
tq_src_avail(const struct tq_src *s)
{
	return s->len - s->pos;
}

static inline const uint8_t *
tq_src_ptr(const struct tq_src *s)
{
	return s->buf + s->pos;
}

static inline void
tq_src_consume(struct tq_src *s, size_t n)
{
	s->pos += n;
}

/* Does `name` (NULL for standard input), less one ".zst", end in `ext`? */
int tq_has_ext(const char *name, const char *ext);

/* ------------------------------------------------------------------------ */
/* Readers                                                                   */

/* Element types of the byte formats. */
enum tq_etype { TQ_ET_F32LE, TQ_ET_F64LE, TQ_ET_I32LE, TQ_ET_U8, TQ_ET_I8,
	TQ_ET_I16BE, TQ_ET_I32BE, TQ_ET_F32BE, TQ_ET_F64BE, TQ_ET_F16LE };

/* How tq_read_byte_rows words a truncated input. */
enum tq_trunc {
	TQ_TRUNC_AT,		/* "truncated at row R (KIND)" */
	TQ_TRUNC_OF,		/* "truncated at row R of N" */
	TQ_TRUNC_EXPECTED	/* "truncated: expected N rows, got R" */
};

/* What tq_reader_window does with the rows before the window. */
enum tq_winmode {
	TQ_WIN_BYTES,		/* seeks over first * rowbytes bytes */
	TQ_WIN_ROWS,		/* the format reads any row by number */
	TQ_WIN_NONE		/* only first == 0 */
};

/* What a format's bid sees: the first bytes of the (decompressed) input. */
struct tq_sniff {
	const uint8_t *p;
	size_t avail;		/* bytes at p */
	int eof;		/* p holds the whole input */
	int full;		/* the core will show no more bytes:
				   TQ_BID_MORE is not an answer */
	const char *name;	/* file name, NULL for standard input */
	int regular;		/* uncompressed regular file of `size` bytes */
	uint64_t size;
};

struct tq_reader;

struct tq_rformat {
	const char *name;
	/*
	 * How sure the format is that the input is its own: 0 "not mine",
	 * up to 100 "a magic number says so".  The core asks first with at
	 * least 16 bytes (or the whole input).  When nobody bid TQ_BID_SURE
	 * or more, it asks again as more bytes arrive, until no format
	 * answers TQ_BID_MORE ("I cannot tell yet") or sn->full.  A stream
	 * is so read only as far as the formats need, and a slow pipe (a
	 * person typing) is answered as soon as its first line is there.
	 */
	int (*bid)(const struct tq_sniff *sn);
	/*
	 * Reads the header from r->src (the sniffed bytes are still
	 * unread) and sets the layout, count and claimed rows.  `path` and
	 * `dataset` are as given to tq_reader_open.
	 */
	enum tq_status (*open)(struct tq_reader *r, const char *path,
	    const char *dataset);
	/*
	 * Reads up to max rows into exactly one of f or iv (the core has
	 * checked the arguments); NULL means tq_read_byte_rows.
	 */
	enum tq_status (*read)(struct tq_reader *r, float *f, int32_t *iv,
	    size_t max, size_t *got);
	/* Frees r->priv; may be NULL. */
	void (*close)(struct tq_reader *r);
	enum tq_winmode window;
};

/* Bids: a magic number; the file name; the content, looked at closely. */
#define TQ_BID_MAGIC 100
#define TQ_BID_SURE 60
#define TQ_BID_MORE (-1)

struct tq_reader {
	const struct tq_rformat *fmt;
	const char *kind;	/* tq_reader_format(), for details too */
	uint32_t dim;
	int64_t count;
	uint64_t claimed;	/* rows the header announces, or UNKNOWN */
	uint64_t row;		/* rows delivered so far */
	enum tq_etype et;
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
	enum tq_trunc trunc;
	enum tq_status failed;
	struct tq_src src;
	void *priv;		/* the format's own state */
	/* Labels of the rows of the last read (tq_reader_label). */
	int has_labels;
	char *lab;		/* NUL-terminated labels, one after another */
	size_t lablen, labcap;
	size_t *laboff;		/* offset of each label in lab */
	size_t nlab, laboffcap;
};

/* Sets the element type, row prefix and dimension of a byte format. */
void tq_reader_layout(struct tq_reader *r, enum tq_etype et, size_t esz,
    size_t prefix, uint32_t dim, int is_integer);
/*
 * The common row reader of the byte formats: whole rows of r->rowbytes
 * (checking the *vecs prefix against r->dim), up to r->claimed rows when a
 * header gave them, converted and checked.
 */
enum tq_status tq_read_byte_rows(struct tq_reader *r, float *f, int32_t *iv,
    size_t max, size_t *got);
/* n contiguous elements of r's type at p to floats (checked) or int32. */
enum tq_status tq_reader_convert(const struct tq_reader *r, const uint8_t *p,
    size_t n, uint64_t row0, float *f, int32_t *iv);
/* Forgets the labels of the last read. */
void tq_reader_labels_clear(struct tq_reader *r);
/* Appends the label of the next row read (len bytes, no NUL among them). */
enum tq_status tq_reader_label_add(struct tq_reader *r, const char *s,
    size_t len);

/* The registered formats (reader.c lists them). */
extern const struct tq_rformat tq_rformat_fixture, tq_rformat_fvecs,
    tq_rformat_ivecs, tq_rformat_bvecs, tq_rformat_npy, tq_rformat_idx,
    tq_rformat_hdf5, tq_rformat_text, tq_rformat_w2v;

/* ------------------------------------------------------------------------ */
/* HDF5 (vecio_hdf5.c)                                                       */

/*
 * An open 2-D dataset of an HDF5 file.  tq_h5_open() validates the shape
 * (2-D, dim 1..TQ_MAX_DIM, at least one row) and the element type (float
 * or integer); *is_integer is 1 for integer datasets.  tq_h5_read() reads
 * rows [row, row + nrows) by hyperslab into exactly one of `f` (floats,
 * checked for NaN and infinity) or `i` (int32, integer datasets only,
 * range-checked); the caller keeps row + nrows <= n.
 */
struct tq_h5;

enum tq_status tq_h5_open(const char *path, const char *dataset,
    struct tq_h5 **out, uint32_t *dim, uint64_t *n, int *is_integer);
enum tq_status tq_h5_read(struct tq_h5 *h, uint64_t row, size_t nrows,
    float *f, int32_t *i);
void tq_h5_close(struct tq_h5 *h);

/* ------------------------------------------------------------------------ */
/* Row checks and conversions (reader.c), shared with HDF5 and the writers   */

/*
 * `row0` is the index of the first row, for the failure detail
 * ("row R, column C: value is NaN or infinite").
 */
enum tq_status tq_vec_check_finite(const float *x, size_t nrows,
    uint32_t dim, uint64_t row0);
enum tq_status tq_vec_f64_to_f32(const double *in, size_t nrows,
    uint32_t dim, uint64_t row0, float *out);
/* int64 to int32 with a range check. */
enum tq_status tq_vec_i64_to_i32(const int64_t *in, size_t nrows,
    uint32_t dim, uint64_t row0, int32_t *out);
enum tq_status tq_vec_u64_to_i32(const uint64_t *in, size_t nrows,
    uint32_t dim, uint64_t row0, int32_t *out);

#endif /* TQ_READER_IMPL_H */
