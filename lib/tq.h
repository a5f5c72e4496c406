/*
 * tq.h - the public interface of libtq, compressed nearest-neighbour search
 * built on TurboQuant (Zandieh et al., arXiv:2504.19874).
 *
 * This header is the manual.  Every function returns an enum tq_status
 * (TQ_OK on success) unless it is a pure accessor.  On failure, errno is
 * left as the failing system call set it (for TQ_ERR_IO) and
 * tq_errdetail() gives a one-line description of what went wrong in the
 * calling thread ("row 17: value is NaN or infinite", "section CODE: ends
 * past the end of the file").  The library never prints and never exits.
 *
 * Handles are opaque.  Every open/create has a matching close/free that
 * accepts NULL.  Unless stated otherwise a handle may be used by one thread
 * at a time; an open struct tq_index is read-only after tq_index_open() and
 * may be searched from any number of threads at once.
 *
 * All files are little-endian; their layout is specified in tq(5).
 */
#ifndef TQ_H
#define TQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The library is compiled with -fvisibility=hidden: what this header
 * declares is what libtq.so exports, and nothing else (lib/libtq.map).
 */
#ifdef __GNUC__
#pragma GCC visibility push(default)
#endif

#define TQ_VERSION_STRING "0.1.0"

/* Largest supported vector dimension. */
#define TQ_MAX_DIM 65536u

/* Status codes.  The values are pinned: they may be stored or compared. */
enum tq_status {
	TQ_OK = 0,
	TQ_ERR_NOMEM = 1,	/* allocation failed */
	TQ_ERR_IO = 2,		/* a system call failed; errno says why */
	TQ_ERR_FORMAT = 3,	/* input is malformed or truncated */
	TQ_ERR_CHECKSUM = 4,	/* a section's checksum does not match */
	TQ_ERR_VERSION = 5,	/* file version newer than this library */
	TQ_ERR_ARG = 6,		/* invalid argument or parameter */
	TQ_ERR_MISMATCH = 7,	/* dimension, metric or quantizer mismatch */
	TQ_ERR_NONFINITE = 8,	/* input holds NaN or infinity, or a norm
				   whose square overflows (tq_check_rows) */
	TQ_ERR_EMPTY = 9,	/* input holds no vectors */
	TQ_ERR_OVERFLOW = 10,	/* a size computation would overflow */
	TQ_ERR_UNSUPPORTED = 11,/* valid but not supported (format, type) */
	TQ_ERR_NUMERIC = 12,	/* a numerical routine (LAPACK) failed */
	TQ_ERR_NOORIG = 13,	/* re-rank asked of an index without originals */
	TQ_ERR_BUSY = 14,	/* another writer holds the index's lock */
	TQ_ERR_DUPLICATE = 15	/* an id repeats, or is already live */
};

/* A static English string for a status; never NULL. */
const char *tq_strerror(enum tq_status st);

/*
 * Detail of the last failure in the calling thread, as one line without a
 * trailing newline, or "" if none was recorded.  Valid until the next libtq
 * call in this thread.
 */
const char *tq_errdetail(void);

/* ------------------------------------------------------------------------ */
/* Metrics                                                                   */

/*
 * TQ_METRIC_IP:     score = <q, x>, higher is better.
 * TQ_METRIC_COSINE: score = <q/|q|, x/|x|>, higher is better.  Vectors are
 *                   normalised when encoded; a zero vector stays zero.
 * TQ_METRIC_L2:     score = |q - x|^2 (squared Euclidean), lower is better.
 */
enum tq_metric {
	TQ_METRIC_IP = 0,
	TQ_METRIC_COSINE = 1,
	TQ_METRIC_L2 = 2
};

/* "ip", "cosine", "l2". */
const char *tq_metric_name(enum tq_metric m);
/* Parses a metric name (also "dot" for ip, "euclidean" for l2). */
enum tq_status tq_metric_parse(const char *name, enum tq_metric *out);
/*
 * Checks n rows of dim floats as rows or queries of metric m: TQ_OK, or
 * TQ_ERR_NONFINITE naming the first bad row, numbered from row0, with "row
 * R, column C: value is NaN or infinite" or, for l2 and ip, "row R: norm V
 * is too large for M (...)": a norm of 2^62 (4.6e18) or more, whose
 * squares overflow float (cosine normalises rows, so any finite norm
 * goes; man tq.5, "Limits").  Fitting, encoding and searching make the
 * same checks; this one lets a caller name its own file and rows first.
 */
enum tq_status tq_check_rows(enum tq_metric m, const float *x, size_t n,
    uint32_t dim, uint64_t row0);

/* ------------------------------------------------------------------------ */
/* Vector input                                                              */

/*
 * A reader streams rows of float32 vectors from a file, in chunks, without
 * ever holding the whole file.  Every format is shown the first bytes (up
 * to 1 MiB) and the most certain reads them: magic numbers first, then the
 * file name, then the content (man tq.5 gives the rules), so pipes and
 * standard input need no name:
 *
 *   fixture   u32 dim, u32 n, then n*dim float32        (name: anything)
 *   .fvecs    per row: i32 dim, dim float32  (or by the repeating prefix)
 *   .ivecs    per row: i32 dim, dim int32    (converted to float)
 *   .bvecs    per row: i32 dim, dim uint8    (converted to float)
 *   .npy      NumPy v1/v2/v3, 2-D, float32 or float64, C order, little-endian
 *   IDX       idx3-ubyte / idx2 files (MNIST, Fashion-MNIST), big-endian
 *             header, uint8/float data; rows are the flattened images
 *   HDF5      ann-benchmarks files; the dataset is chosen by `dataset`
 *   text      one vector per line, numbers separated by blanks, tabs or
 *             commas, with an optional first column of labels (GloVe
 *             .txt, fastText .vec with its "n dim" first line, a column
 *             of numbers from awk); C-locale numbers; lines of at most
 *             1 MiB; failures name the line and column (from 1)
 *   word2vec  "n dim\n", then per row a word, a space, dim float32 LE and
 *             an optional newline (the words are the labels)
 *   zstd      any of the formats above but HDF5, zstd-compressed (by magic)
 *
 * `path` "-" is standard input (not for HDF5, which needs a seekable file).
 * `dataset` names the HDF5 dataset ("train", "test", ...) and is ignored by
 * the other formats; NULL means "train".
 *
 * Every row read is checked: a NaN or infinite value fails the read with
 * TQ_ERR_NONFINITE and a detail naming the row (or the line and column).
 */
struct tq_reader;

enum tq_status tq_reader_open(const char *path, const char *dataset,
    struct tq_reader **out);
/* Vector dimension (>= 1). */
uint32_t tq_reader_dim(const struct tq_reader *r);
/*
 * Number of rows, or -1 when the stream does not say until its end (a
 * pipe, zstd, text without a .vec header).  A count from a header is
 * given only when the file is large enough to hold it, and is checked as
 * the rows are read.
 */
int64_t tq_reader_count(const struct tq_reader *r);
/*
 * Short name of the detected format: "fixture", "fvecs", "ivecs", "bvecs",
 * "npy", "idx", "hdf5", "text" or "word2vec".
 */
const char *tq_reader_format(const struct tq_reader *r);
/* 1 if the file holds integers (ivecs, integer HDF5 datasets, IDX bytes). */
int tq_reader_is_integer(const struct tq_reader *r);
/* 1 if the rows carry labels (text with a label column, word2vec, .vec). */
int tq_reader_has_labels(const struct tq_reader *r);
/*
 * Label of row i (0 <= i < got) of the last tq_reader_read: NUL-terminated,
 * valid until the next read or close; NULL without labels (or i >= got).
 */
const char *tq_reader_label(const struct tq_reader *r, size_t i);
/*
 * Reads up to `max` rows into `rows` (max*dim floats).  *got is the number
 * read; 0 means end of input.  A short count before the end never happens:
 * the reader fills the buffer unless the input ends.
 */
enum tq_status tq_reader_read(struct tq_reader *r, float *rows, size_t max,
    size_t *got);
/* Same, for integer data (ground-truth neighbour lists); values as int32. */
enum tq_status tq_reader_read_i32(struct tq_reader *r, int32_t *rows,
    size_t max, size_t *got);
void tq_reader_close(struct tq_reader *r);

/*
 * Reads a whole vector file into a newly malloc'd array (*rows, n*dim).
 * Memory grows with the rows actually read, never with what a header
 * claims.  The caller frees *rows.
 */
enum tq_status tq_read_all(const char *path, const char *dataset,
    float **rows, uint32_t *dim, size_t *n);

/*
 * External ids: a text file of one unsigned decimal integer per line, or,
 * when the name ends in ".u64", raw little-endian uint64.  Streams like a
 * reader.
 */
struct tq_ids_reader;
enum tq_status tq_ids_open(const char *path, struct tq_ids_reader **out);
enum tq_status tq_ids_read(struct tq_ids_reader *r, uint64_t *ids,
    size_t max, size_t *got);
void tq_ids_close(struct tq_ids_reader *r);

/*
 * Labels: a text file of one label per line (LF or CRLF ends; the last
 * line may lack its newline), zstd-compressed or not, from a file, a pipe
 * or standard input ("-").  A label is 1 to TQ_LABEL_MAX bytes with no
 * NUL; a line that breaks this fails the read naming it (TQ_ERR_FORMAT,
 * "line 7: empty label").  tq_labels_read gives the next label in
 * *label (NUL-terminated, valid until the next call) and its length in
 * *len, or *label = NULL at the end.
 */
#define TQ_LABEL_MAX 4096u
struct tq_labels_reader;
enum tq_status tq_labels_open(const char *path,
    struct tq_labels_reader **out);
enum tq_status tq_labels_read(struct tq_labels_reader *r,
    const char **label, size_t *len);
void tq_labels_close(struct tq_labels_reader *r);

/*
 * Sharding: shard i (0 <= i < n) of a corpus of `rows` rows is the
 * contiguous range of rows [floor(i*rows/n), floor((i+1)*rows/n)); the n
 * shards partition the rows in order, and a shard is empty only when
 * rows < n.  tq_shard_rows sets *first and *count (TQ_ERR_ARG if i >= n).
 *
 * tq_reader_window restricts a reader, before its first read, to the
 * rows [first, first + count): it then delivers exactly those and
 * tq_reader_count() returns `count`.  The rows before are seeked over, not
 * read or checked; failure details keep the row numbers of the whole
 * file.  Needs an input whose count is known (tq_reader_count() >= 0:
 * an uncompressed regular file or HDF5), TQ_ERR_UNSUPPORTED otherwise
 * (also for first > 0 in text and word2vec, which cannot seek to a row);
 * TQ_ERR_ARG if the range passes the end or a row was already read.
 *
 * tq_ids_window does the same for an ids reader: it reads and drops the
 * first `first` ids (TQ_ERR_MISMATCH if the file ends among them) and
 * then delivers at most `count`.  tq_ids_sequence makes an ids reader
 * without a file that delivers first, first + 1, ..., first + count - 1:
 * the ids of rows that keep their numbers in the whole corpus.
 */
enum tq_status tq_shard_rows(uint64_t rows, uint32_t i, uint32_t n,
    uint64_t *first, uint64_t *count);
enum tq_status tq_reader_window(struct tq_reader *r, uint64_t first,
    uint64_t count);
enum tq_status tq_ids_window(struct tq_ids_reader *r, uint64_t first,
    uint64_t count);
enum tq_status tq_ids_sequence(uint64_t first, uint64_t count,
    struct tq_ids_reader **out);

/*
 * Copies the string attribute `name` of the root group of an HDF5 file
 * (ann-benchmarks keeps the metric in "distance") into buf[len], NUL-
 * terminated.  TQ_ERR_FORMAT if the file is not HDF5 or has no such string
 * attribute, TQ_ERR_OVERFLOW if it does not fit in len - 1 bytes.
 */
enum tq_status tq_hdf5_attr_string(const char *path, const char *name,
    char *buf, size_t len);

/*
 * Vector output.  A writer to a path writes a temporary file beside it and
 * renames it into place in tq_writer_commit() after fsync: the destination
 * is either untouched or complete.  "-" writes to standard output.
 * `n` is the row count if known, or TQ_COUNT_UNKNOWN (the fixture or npy
 * header is then patched at commit, or for a pipe the rows are spooled
 * first).  The formats (specified in tq(5)):
 *
 *   TQ_VEC_FIXTURE  u32 dim, u32 n, then n*dim f32 (at most 2^32-1 rows)
 *   TQ_VEC_FVECS    per row: i32 dim, dim f32
 *   TQ_VEC_IVECS    per row: i32 dim, dim i32; from tq_writer_write_i32,
 *                   or from floats that are whole and in int32 range
 *   TQ_VEC_NPY      NumPy 1.0, '<f4', shape (n, dim), C order; the header
 *                   is always 128 bytes whatever n
 *   TQ_VEC_TEXT     one row a line, values printed "%.9g" (which gives
 *                   every f32 back exactly) and separated by one space;
 *                   with labels, the label first (GloVe's layout)
 *   TQ_VEC_TSV      the same separated by tabs
 *   TQ_VEC_CSV      the same separated by commas, no header line
 *   TQ_VEC_BVECS    per row: i32 dim, dim u8; values must be whole, 0..255
 *   TQ_VEC_W2V      word2vec binary: "n dim\n", then per row its label, a
 *                   space, dim f32 little-endian and a newline
 *   TQ_VEC_VEC      fastText .vec: "n dim\n", then TQ_VEC_TEXT rows
 *
 * TQ_VEC_W2V and TQ_VEC_VEC rows need labels (tq_writer_write_labeled;
 * TQ_ERR_ARG otherwise), of at most TQ_LABEL_MAX bytes.  Their header's
 * length depends on n: with n unknown the rows are spooled to a
 * temporary file and the header written at commit, to a path too.
 *
 * A value the format cannot hold (a fraction for ivecs or bvecs) fails
 * the write with TQ_ERR_ARG and a detail naming its row and column.
 */
#define TQ_COUNT_UNKNOWN UINT64_MAX

enum tq_vecfmt {
	TQ_VEC_FIXTURE = 0,
	TQ_VEC_FVECS = 1,
	TQ_VEC_IVECS = 2,
	TQ_VEC_NPY = 3,
	TQ_VEC_TEXT = 4,
	TQ_VEC_TSV = 5,
	TQ_VEC_CSV = 6,
	TQ_VEC_BVECS = 7,
	TQ_VEC_W2V = 8,
	TQ_VEC_VEC = 9
};

struct tq_writer;
enum tq_status tq_writer_open(const char *path, enum tq_vecfmt fmt,
    uint32_t dim, uint64_t n, struct tq_writer **out);
enum tq_status tq_writer_write(struct tq_writer *w, const float *rows,
    size_t n);
/* For TQ_VEC_IVECS. */
enum tq_status tq_writer_write_i32(struct tq_writer *w, const int32_t *rows,
    size_t n);
/*
 * For the text formats, word2vec and .vec: rows with a leading label
 * column, labels[i] that
 * of row i (copied; the caller keeps them).  A label must be non-empty
 * and hold no line break nor the format's separator (for TQ_VEC_TEXT,
 * TQ_VEC_VEC and TQ_VEC_W2V no blank at all; for TQ_VEC_CSV no quote
 * either), else TQ_ERR_ARG.  Every
 * row of a writer has a label or none does: the first write decides.
 */
enum tq_status tq_writer_write_labeled(struct tq_writer *w,
    const float *rows, const char *const *labels, size_t n);
/* Flushes, fsyncs, renames into place and frees w (also on failure). */
enum tq_status tq_writer_commit(struct tq_writer *w);
/* Discards the output (the destination keeps its old content); frees w. */
void tq_writer_abort(struct tq_writer *w);

/*
 * Scales each of the n rows of dim floats to unit Euclidean length, in
 * place; a zero row stays zero.  The normalisation the cosine metric uses.
 */
void tq_normalize_rows(float *rows, size_t n, uint32_t dim);

/* ------------------------------------------------------------------------ */
/* Quantizer                                                                 */

/*
 * A quantizer is everything needed to encode a vector identically in every
 * process: dimension, bits, metric, the random rotation (persisted, never
 * regenerated on load), the Lloyd-Max codebook for the exact law of a
 * rotated unit-vector coordinate at this dimension, and the data mean used
 * for centring (zero when fitted without data).
 */
struct tq_quantizer;

enum tq_rotation {
	TQ_ROT_AUTO = 0,	/* dense below TQ_ROT_NARROW_MIN dimensions,
				   else Hadamard (structured with a
				   rotation_block); quantizers made before
				   keep their rotation: structured with the
				   narrowest blocks from 256 dimensions, and
				   before that dense up to TQ_DENSE_MAX_DIM */
	TQ_ROT_DENSE = 1,	/* Haar-random orthogonal d x d (QR, LAPACK) */
	TQ_ROT_STRUCTURED = 2,	/* rounds of permutation + dense Haar blocks
				   that mix all coordinates: three of ~256
				   wide (about 3 * 256 * d floats), or five
				   of a narrower rotation_block */
	TQ_ROT_HADAMARD = 3	/* four rounds of permutation, random signs
				   and Walsh-Hadamard transforms of the
				   largest power of two p <= d wide over the
				   first and the last p coordinates: about
				   2 p log2 p additions and 12 d bytes a
				   round */
};
#define TQ_DENSE_MAX_DIM 4096u
/* Auto: dense below this dimension, Hadamard from it (the name is from
   when auto chose the narrow structured rotation there). */
#define TQ_ROT_NARROW_MIN 256u
#define TQ_ROT_BLOCK_MAX 256u

/*
 * Progress of a long step, for a program to show (the library never
 * prints).  `step` names it ("reading": rows read, total the rows to read
 * or 0 if not known; "seeding": k-means centres chosen of total;
 * "k-means": Lloyd iterations done of at most total; in a build,
 * "writing lists": rows of an IVF index's lists written of total, and
 * "writing": rows of a flat index read from a stream of unknown length
 * written out of total); called from the thread that called the
 * library, once per chunk of rows for "reading" and the writing steps
 * (the callback decides how often to show it) and once per batch or
 * iteration otherwise.
 */
typedef void (*tq_progress_fn)(void *arg, const char *step, uint64_t done,
    uint64_t total);

struct tq_fit_params {
	uint32_t dim;		/* 1 .. TQ_MAX_DIM; 0 = take it from `data` */
	unsigned bits;		/* 1, 2, 3 or 4 */
	enum tq_metric metric;
	uint64_t seed;		/* rotation seed */
	enum tq_rotation rotation;
	uint32_t rotation_block;	/* structured block width, 1 ..
					   TQ_ROT_BLOCK_MAX, 0 = the maximum;
					   never narrower than about sqrt(dim),
					   the cheapest; with auto rotation,
					   asks for a structured one */
	int scale_search;	/* 1: exact per-vector scale search on encode */
	uint64_t sample;	/* read only the first `sample` rows of `data`
				   (mean and lists); 0 = all */
	uint32_t lists;		/* coarse lists (IVF), 0 = none, or
				   TQ_LISTS_AUTO: round(sqrt(rows read)) */
	uint64_t train;		/* k-means sample: rows drawn uniformly (seeded)
				   from those read; 0 = TQ_TRAIN_PER_LIST
				   a list */
	unsigned iterations;	/* k-means iterations (at most; stops early
				   when no row changes list) */
	int no_centre;		/* 1: centre 0 even with data (which then
				   serves the lists only) */
	unsigned threads;	/* k-means threads, 0 = one a CPU; the
				   result does not depend on it */
	tq_progress_fn progress;	/* NULL = none */
	void *progress_arg;	/* passed to progress */
	int residual;		/* 1: an index encodes each row about its
				   list's centroid instead of the centre
				   (needs lists); tq(5) "Residual codes" */
};
#define TQ_LISTS_AUTO UINT32_MAX
#define TQ_MAX_LISTS (1u << 24)
#define TQ_TRAIN_PER_LIST 128u

/*
 * Default parameters: bits 4, metric l2, seed 42, auto rotation, no
 * lists, 12 k-means iterations.
 */
void tq_fit_params_default(struct tq_fit_params *p);

/*
 * Makes a quantizer.  With `data` != NULL the mean of the (for cosine,
 * normalised) vectors is stored as the centre; with NULL the centre is 0.
 *
 * With p->lists != 0 (which needs `data`), the quantizer also holds that
 * many coarse centroids for IVF indexes, fitted by k-means (k-means++
 * seeding, Lloyd iterations, empty lists repaired by splitting the
 * largest) on a uniform sample of the rows, in the space of the
 * (normalised, for cosine) vectors: the rotation is orthogonal, so this
 * is k-means in the rotated space too.  An index built with such a
 * quantizer keeps each list's rows together and a search scans only the
 * lists nearest the query (tq_search_params.probes).
 *
 * The result depends only on the parameters and the data: the same
 * arguments give the same bytes, whatever the thread count (sgemm is
 * used for speed, but every choice of list is settled in a fixed
 * summation order).  Memory: the sample, rows * dim floats.
 */
enum tq_status tq_quantizer_fit(const struct tq_fit_params *p,
    struct tq_reader *data, struct tq_quantizer **out);
/* Writes a quantizer file atomically (temporary file, fsync, rename). */
enum tq_status tq_quantizer_save(const struct tq_quantizer *q,
    const char *path);
/* Loads a quantizer file, or the quantizer inside an index file. */
enum tq_status tq_quantizer_load(const char *path, struct tq_quantizer **out);
void tq_quantizer_free(struct tq_quantizer *q);

uint32_t tq_quantizer_dim(const struct tq_quantizer *q);
unsigned tq_quantizer_bits(const struct tq_quantizer *q);
enum tq_metric tq_quantizer_metric(const struct tq_quantizer *q);
int tq_quantizer_centred(const struct tq_quantizer *q);
/* 1 if an index encodes rows about their lists' centroids (residual). */
int tq_quantizer_residual(const struct tq_quantizer *q);
/* Number of coarse lists, 0 for none. */
uint32_t tq_quantizer_lists(const struct tq_quantizer *q);
/*
 * For a quantizer just fitted from data: the norm of the rows' mean over
 * their RMS distance from it (for cosine, of the normalised rows); 0 if
 * it was loaded, fitted without data, or the rows are all alike.  The
 * query tables of a search are built from the query itself, not from its
 * offset from the centre, so where the rows lie far from the origin
 * against their spread the tables' rounding swamps the differences
 * between rows: on Fashion-MNIST shifted by a constant, recall@10 at 2
 * bits with oversample 2 was 0.99 at 5, 0.87 at 14 and 0.38 at 41.
 * Programs warn above TQ_OFFSET_WARN.
 */
double tq_quantizer_offset(const struct tq_quantizer *q);
#define TQ_OFFSET_WARN 8.0
/* Bytes of one vector's packed codes in a code stream: ceil(dim*bits/8). */
size_t tq_code_bytes(const struct tq_quantizer *q);

/*
 * Per-vector factors, 3 floats per vector: s, b' (see tq(5)) and |x|^2
 * (the last only meaningful for l2).
 */
#define TQ_NFACTORS 3

/*
 * Encodes n vectors (n*dim floats, finite) into packed codes
 * (n*tq_code_bytes) and factors (n*TQ_NFACTORS).  Uses BLAS for the
 * rotation.  Thread-safe on one quantizer.
 */
enum tq_status tq_encode(const struct tq_quantizer *q, const float *x,
    size_t n, uint8_t *codes, float *factors);
/*
 * tq_encode on up to `threads` threads (0: one a CPU), each a range of
 * whole 32-vector blocks; the same bytes whatever the count.
 */
enum tq_status tq_encode_threads(const struct tq_quantizer *q,
    const float *x, size_t n, unsigned threads, uint8_t *codes,
    float *factors);
/* Reconstructs approximate vectors from packed codes and factors. */
enum tq_status tq_decode(const struct tq_quantizer *q, const uint8_t *codes,
    const float *factors, size_t n, float *out);

/*
 * A 64-bit fingerprint of the quantizer's bytes (parameters, rotation,
 * codebook, centre): equal fingerprints mean identical encodings.
 */
uint64_t tq_quantizer_fingerprint(const struct tq_quantizer *q);

/*
 * Code streams (tq-encode): a 48-byte header, then one record per vector:
 * tq_code_bytes(q) bytes of packed codes (coordinate j of the rotated
 * vector at bits [j*bits, (j+1)*bits) of the little-endian bit string)
 * followed by TQ_NFACTORS little-endian f32 factors.  See tq(5).
 */
#define TQ_CODES_HEADER 48u
/* Record bytes per vector in a code stream. */
size_t tq_codes_record_bytes(const struct tq_quantizer *q);
/* Fills a header for `n` records (TQ_COUNT_UNKNOWN if not known). */
void tq_codes_header(const struct tq_quantizer *q, uint64_t n,
    uint8_t hdr[TQ_CODES_HEADER]);
/*
 * Checks a header against q: magic, version, dim, bits, metric and
 * fingerprint (TQ_ERR_MISMATCH if the codes came from another quantizer).
 * *n receives the count (TQ_COUNT_UNKNOWN: records run to end of file).
 */
enum tq_status tq_codes_check(const struct tq_quantizer *q,
    const uint8_t hdr[TQ_CODES_HEADER], uint64_t *n);

/* ------------------------------------------------------------------------ */
/* Index                                                                     */

enum tq_originals {
	TQ_ORIG_NONE = 0,
	TQ_ORIG_F32 = 1,
	TQ_ORIG_F16 = 2
};

enum tq_factors {
	TQ_FACTORS_DEFAULT = 0,
	TQ_FACTORS_F16 = 1,
	TQ_FACTORS_F32 = 2
};

struct tq_calib_params;

struct tq_build_params {
	enum tq_originals originals;	/* default TQ_ORIG_F32 */
	unsigned threads;		/* 0 = all cores; output never depends on it */
	uint64_t memory;		/* IVF: bytes of rows reordered at once;
					   0 = TQ_BUILD_MEMORY */
	uint32_t dups;			/* IVF: a vector goes to at most this
					   many lists (0, 1: its nearest) */
	float dup_ratio;		/* ... those whose squared distance is at
					   most dup_ratio times the nearest's */
	/*
	 * Mutations (append, delete, compact, a build onto an existing
	 * index) hold an exclusive lock of the index file.  no_wait: fail
	 * with TQ_ERR_BUSY instead of waiting for another writer; on_wait,
	 * if set, is called once (with the path and wait_arg) before a
	 * writer starts to wait.
	 */
	int no_wait;
	void (*on_wait)(const char *path, void *arg);
	void *wait_arg;
	/* Append: live rows whose ids the new rows carry are deleted in the
	   same commit (an upsert) instead of failing with
	   TQ_ERR_DUPLICATE. */
	int replace;
	/* Append: an append that would leave more than this many segments
	   compacts the index instead; 0 = TQ_MAX_SEGMENTS_DEFAULT.  */
	uint32_t max_segments;
	/*
	 * Labels (tq(5) LABL), one per row, kept in the index: from
	 * `labels` (a labels file, read whole before the rows, as given
	 * ids are) or, with labels_auto, from the corpus reader's own
	 * (tq_reader_label; TQ_ERR_ARG if it has none).  An append to an
	 * index with labels needs one of them (TQ_ERR_ARG otherwise), and
	 * an index without labels takes none.  Memory: about 40 bytes a
	 * row (offsets, ids, the sort), and the label bytes go through
	 * unlinked temporary files beside the output, mapped to be
	 * sorted.
	 */
	struct tq_labels_reader *labels;
	int labels_auto;
	tq_progress_fn progress;	/* NULL = none */
	void *progress_arg;	/* passed to progress */
	/*
	 * The per-vector factors of the segment written (tq(5) FACT, FACH):
	 * TQ_FACTORS_F16 compact (7 bytes a vector with WDTH instead of
	 * 14), TQ_FACTORS_F32 the layout older readers know.  Default: a
	 * build or a rewrite (compaction) writes F16; an append onto an
	 * index writes the layout of its last segment.
	 */
	enum tq_factors factors;
	/*
	 * A build, or a rewrite into a new file (a compaction, an append to
	 * another output or past max_segments): with calibrate set, the
	 * new file is calibrated (tq_index_calibrate, CALB) before it is
	 * renamed into place, so the destination is at every instant the
	 * old file or the whole calibrated new one.  A calibration that
	 * fails fails the build, unless calibrate->min_live is set and the
	 * index has fewer live rows or no originals: then it has none.
	 * NULL (the default): no calibration.  An append or a delete
	 * committed onto the index keeps its calibration.
	 */
	const struct tq_calib_params *calibrate;
};
#define TQ_MAX_SEGMENTS_DEFAULT 16u
#define TQ_MAX_SEGMENTS_LIMIT 4096u
#define TQ_BUILD_MEMORY ((uint64_t)256 << 20)
void tq_build_params_default(struct tq_build_params *p);

/*
 * Builds an index file from `corpus` in one streaming pass, with memory
 * bounded by a chunk of rows (independent of the corpus size).
 *
 * With a quantizer that has lists, each row is assigned to its nearest
 * list and the index stores the lists one after another, each in input
 * order.  The corpus is still read once: the originals go into the output
 * as they arrive (each vector's once, mapped to its rows by OMAP, tq(5)),
 * and the encoded rows to an unlinked temporary file beside `path` (about
 * the size of the index without its originals), in buckets of consecutive
 * lists, and each bucket is read back once (once
 * per p->memory bytes of its rows when it holds more) to write its lists;
 * its disk blocks are then given back (hole punching, where supported).
 * Peak memory is about p->memory plus a few chunks, whatever the corpus
 * size.  A flat build from a stream that does not say its length first
 * (fvecs or text on a pipe) keeps its encoded rows, in the index's own
 * form, in an unlinked temporary file beside `path` (about the size of
 * the index) and copies them into place at the end; a stream whose header
 * gives its row count (a fixture, .npy, word2vec) is written in place as
 * it is read, and fails as a file would if it holds another count.  `ids`, when
 * not NULL, gives one external id per row (it must hold exactly as many,
 * all distinct: TQ_ERR_DUPLICATE names the first repeat; they are read
 * first, 16 bytes of memory a row); otherwise the ids are the row numbers
 * 0, 1, ...  The output is written to a temporary file and renamed into
 * place: `path` is never left torn.  An existing file at `path` is locked
 * as by the mutations below while the build runs.
 * Fails with TQ_ERR_MISMATCH if the corpus dimension is not the
 * quantizer's, TQ_ERR_EMPTY if the corpus has no rows.
 */
enum tq_status tq_build(const struct tq_quantizer *q,
    struct tq_reader *corpus, struct tq_ids_reader *ids,
    const struct tq_build_params *p, const char *path);

struct tq_index;

/*
 * Maps an index file read-only and validates its header, section table,
 * every section's size and offset and the quantizer parameters before any
 * use.  Checksums are not verified here (see tq_file_verify); the open
 * costs no work proportional to the number of vectors, except that the
 * deleted-row bitmap of an index that has one (n/8 bytes) is counted.
 */
enum tq_status tq_index_open(const char *path, struct tq_index **out);
void tq_index_close(struct tq_index *ix);

const struct tq_quantizer *tq_index_quantizer(const struct tq_index *ix);
/* Rows stored in the index, deleted ones included. */
uint64_t tq_index_count(const struct tq_index *ix);
/* Rows not deleted (>= 1): the vectors a search can return. */
uint64_t tq_index_live(const struct tq_index *ix);
enum tq_originals tq_index_originals(const struct tq_index *ix);

/*
 * Labels of an index (tq(5) LABL; tq_build_params.labels).  Lookups are
 * binary searches over the mapped file: no label is read but those
 * compared, and nothing is built per call.  Labels are bytes, compared
 * as unsigned; `label` need not be NUL-terminated.
 *
 * tq_index_has_labels: 1 if every row has a label (0: none has).
 *
 * tq_index_label gives the label of the live row with external id `id`
 * (not NUL-terminated: *len bytes, pointing into the mapping, valid while
 * ix is open); *label = NULL when no live row has that id or the index
 * has no labels.
 *
 * tq_index_like finds the live rows labelled `label`; when several rows
 * share it, the one with the smallest id wins (so the answer does not
 * change when the index is appended to, compacted or rebuilt with
 * lists).  *found is 0 when no live row has it.  Otherwise *id is that
 * row's id and vec (dim floats, may be NULL) its vector: the stored
 * original (for the cosine metric, normalised as stored), or, in an index
 * without originals, the vector decoded from its codes.
 *
 * Both fail with TQ_ERR_FORMAT if the section holds a row number out of
 * range or a label with a NUL or newline byte.
 */
int tq_index_has_labels(const struct tq_index *ix);
enum tq_status tq_index_label(const struct tq_index *ix, uint64_t id,
    const char **label, size_t *len);
enum tq_status tq_index_like(const struct tq_index *ix, const char *label,
    size_t len, int *found, uint64_t *id, float *vec);

/*
 * Mutating an index (format version 2, tq(5) "Commits").  Each of these
 * takes an exclusive lock of the index (p->no_wait, p->on_wait) for its
 * whole read-modify-write, so overlapping writers run one after another;
 * readers take no lock.  When `out` is `path` the change is a commit onto
 * the file: new sections past the current commit, a new table, a sync,
 * then the new commit's slot and a sync.  A failure or a crash at any
 * point leaves the current commit current and intact, and an open struct
 * tq_index keeps reading the commit it opened.  A change written to
 * another `out`, a compaction, a version 1 index and an append past
 * p->max_segments instead write a whole new file (one segment) beside
 * `out` and rename it into place after fsync, checking every section
 * checksum of `path` first so that damage is not copied into a valid
 * file.
 *
 * tq_index_delete marks the rows whose external id is in ids[0..nids) as
 * deleted: a new TOMB for each segment it touches (nothing is written when
 * no live row has a listed id).  Ids that are not in the index, or whose
 * rows are already deleted, are ignored; *deleted (if not NULL) receives
 * the number of rows newly marked.  Fails with TQ_ERR_EMPTY ("would delete
 * every vector") if no live row would remain: an index holds at least one
 * live vector.
 *
 * tq_index_append adds the rows of `corpus` encoded with the index's own
 * quantizer (no fitting) as a new segment, exactly as tq_build would build
 * them alone; they get originals in the index's format iff it has
 * originals (p->originals is ignored; p->threads is used).  `ids` gives
 * one id per new row, all distinct and none live in the index, else
 * TQ_ERR_DUPLICATE and nothing is written; with p->replace, live rows with
 * those ids are deleted in the same commit (an upsert).  When `ids` is
 * NULL the new ids continue from one more than the largest id of any row
 * (deleted rows included).  Searches return for a segmented index what
 * they return for its compaction.  `corpus` NULL only compacts
 * (tq_index_compact): the live rows into one segment, byte for byte the
 * file tq_build makes from them with the same quantizer and ids.
 * Otherwise an empty corpus fails with TQ_ERR_EMPTY.  Given ids are read
 * first: 16 bytes of memory a row.
 */
enum tq_status tq_index_delete(const char *path, const uint64_t *ids,
    size_t nids, const struct tq_build_params *p, const char *out,
    uint64_t *deleted);
enum tq_status tq_index_append(const char *path, struct tq_reader *corpus,
    struct tq_ids_reader *ids, const struct tq_build_params *p,
    const char *out);
/* tq_index_append with no new rows: drops the deleted rows. */
enum tq_status tq_index_compact(const char *path,
    const struct tq_build_params *p, const char *out);

/*
 * An allow-list for searches: the set of rows of one open index whose
 * external id is in ids[0..n).  Ids not in the index are ignored.  Memory
 * is one bit per row of the index plus a sorted copy of the ids while it
 * is built (O(n log n + rows log n) time).  The filter refers to `ix`,
 * which must stay open while the filter is used, and may be shared by
 * any number of threads.
 */
struct tq_filter;
enum tq_status tq_filter_create(const struct tq_index *ix,
    const uint64_t *ids, size_t n, struct tq_filter **out);
/* Live rows that the filter allows. */
uint64_t tq_filter_count(const struct tq_filter *f);
void tq_filter_free(struct tq_filter *f);

struct tq_search_stats;
struct tq_search_params {
	uint32_t k;		/* results per query, >= 1 */
	float oversample;	/* > 1: re-rank k*oversample candidates exactly
				   from the stored originals; 0 .. 1: no
				   re-rank; < 0 (TQ_OVERSAMPLE_AUTO,
				   TQ_OVERSAMPLE_AUTO_SET): the error-bounded
				   re-rank below */
	unsigned threads;	/* 0 = all cores; 1 = no thread of libtq's
				   own, choosing lists too (a BLAS may have
				   its own); results never depend on it */
	const struct tq_filter *allow;	/* NULL: every live row; else only
				   the rows it allows (built for this index) */
	uint32_t probes;	/* IVF index: lists scanned per query, the
				   nearest to it; 0 = TQ_PROBES_AUTO; more
				   than the lists = all.  Where those hold
				   fewer than k live rows (k times the
				   copies of a vector; with allow, rows it
				   allows), the next nearest too until
				   they do, so that k results come back
				   whenever the index holds k such rows.
				   Range search: the probes alone.  Flat:
				   ignored */
	struct tq_search_stats *stats;	/* NULL, or filled by the search
				   (below); the caller owns it */
	float auto_z;		/* error-bounded re-rank: the confidence z
				   of its bound, > 0; 0 = TQ_AUTO_Z */
};
/*
 * What one call of tq_search or tq_search_range did, when
 * p->stats is not NULL: the call sets every field (the counts are
 * not added to what the struct held).  The counts depend only on the
 * index, the queries and the parameters: never on the threads, the scan
 * kernel or how the queries are split into calls (summing the stats of
 * the calls over parts of a query set gives those of one call over the
 * whole).  The times do not: they are thread-seconds, summed over the
 * threads that did the work, from a monotonic clock.
 *
 *   queries          queries searched
 *   lists_probed     IVF: lists scanned, summed over the queries (each
 *                    query scans min(probes, lists), or more to hold k
 *                    rows: tq_search_params.probes); flat: 0
 *   rows_scanned     rows whose estimate the scan computed and offered as
 *                    candidates: live, allowed and in a probed list (a
 *                    flat search without filter: live rows per query); a
 *                    row copied to several probed lists counts per copy
 *   candidates       candidates the scan kept for the next step, summed
 *                    over the queries (at most k * oversample, or
 *                    k * 4 without re-rank, k * TQ_AUTO_CAP or fewer
 *                    with TQ_OVERSAMPLE_AUTO, up to TQ_AUTO_WIDE_MAX for a
 *                    query searched again; for range search those
 *                    within the loosened radius)
 *   refined          candidates re-scored with float tables (no re-rank,
 *                    or a range search without originals)
 *   reranked         candidates scored exactly from their originals
 *   originals_read   rows of originals read for that (= reranked)
 *   originals_bytes  their bytes: rows * dim * 4 (f32) or * 2 (f16)
 *   results          results returned (slots with an id, summed)
 *   widened          TQ_OVERSAMPLE_AUTO: queries searched again with
 *                    more room for candidates (TQ_AUTO_WIDEN), summed
 *                    over the passes; the counts above include theirs
 *   t_prepare        normalising, <q, c>, the rotation and choosing the
 *                    lists, in the calling thread (seconds)
 *   t_tables         building the query tables
 *   t_scan           the scan: kernels, keys and candidate heaps
 *   t_refine         the float-table re-scoring
 *   t_rerank         the exact re-rank (reads of the originals
 *                    included) and the final ordering
 */
struct tq_search_stats {
	uint64_t queries;
	uint64_t lists_probed;
	uint64_t rows_scanned;
	uint64_t candidates;
	uint64_t refined;
	uint64_t reranked;
	uint64_t originals_read;
	uint64_t originals_bytes;
	uint64_t results;
	double t_prepare;
	double t_tables;
	double t_scan;
	double t_refine;
	double t_rerank;
	uint64_t widened;
};
/*
 * Error-bounded re-rank (oversample TQ_OVERSAMPLE_AUTO, needs originals):
 * the scan keeps the best k * TQ_AUTO_CAP candidates by estimate (at most
 * the rows; more for a query searched again, below, and TQ_AUTO_WIDEN
 * times as many from the start where the index's calibration finds recall
 * still rising at that cap: tq-search(1)), less those whose estimate is so
 * far below the k-th best that
 * their upper end, with the widest interval of any row, is below every lower
 * end of the best k (l2 and cosine, k <= 64, vectors stored once, files held
 * in memory; the first such search reads every row's factors once to find
 * that width).  Each gets an interval of scores from its estimate, the bound
 * of tq(5) "Error bound" at confidence z (p->auto_z, default TQ_AUTO_Z) and
 * the rounding of the query's tables (z times its scale as a sum of errors
 * of either sign, at most its worst case): the bound's width shrinks with
 * the candidate's distance to the query, so it is tight exactly for the
 * candidates near the k-th.  The candidates whose interval reaches the k-th
 * best lower end are scored again with unrounded tables (no rounding
 * term).  Then, best upper end first (ties by row), each candidate that fewer
 * than k others could beat is a result without being read; one that could go
 * either way is scored exactly from its original, which may settle others;
 * the first whose upper end is below the k-th best lower end ends it.  The
 * results settled without being read are then read (at most k), so the k
 * results are the best by exact score, ranked by it.  With
 * TQ_OVERSAMPLE_AUTO_SET they are not: the set is decided by the bounds, but
 * the scores of results not read are their unrounded estimates, and their
 * order among the results is that of the estimates (fewer originals read:
 * Fashion-MNIST, 4 bits, k 10: 5.9 a query against 12.4).  A true neighbour
 * among the candidates is missed only when some error exceeds its bound,
 * which for one vector and query has a probability of about that of a normal
 * beyond +-z (z = 2: 4.6%, two-sided; far less for the set, since only
 * errors across the k-th score matter).  Results never depend on threads,
 * kernels or batches.
 */
#define TQ_OVERSAMPLE_AUTO (-1.0f)
#define TQ_OVERSAMPLE_AUTO_SET (-2.0f)
#define TQ_AUTO_Z 2.0
#define TQ_AUTO_CAP 16u
/*
 * A query whose candidates the cap may have cut short (the lowest kept,
 * widened by the mean reach of the candidates above their estimates,
 * reaches the k-th best lower end) is searched again with TQ_AUTO_WIDEN
 * times the room, reading none of the originals already read, while the
 * room stays within TQ_AUTO_WIDE_MAX candidates (stats: widened).
 */
#define TQ_AUTO_WIDEN 4u
#define TQ_AUTO_WIDE_MAX 4096u
/* The default probes: this share of the lists (at least 1). */
#define TQ_PROBES_AUTO_DIV 16u
/*
 * k 10, oversample 1, threads 0, allow NULL, probes 0, stats NULL,
 * auto_z 0.
 */
void tq_search_params_default(struct tq_search_params *p);

/*
 * Searches nq queries (nq*dim floats).  Writes nq*k ids and scores, best
 * first, ties broken by smaller id.  Scores follow the metric (squared
 * distance for l2).  Deleted rows and rows outside p->allow are never
 * returned; blocks of 32 rows with none left are not scanned at all.  If
 * fewer than k rows can be returned, the missing slots get id UINT64_MAX
 * and score NaN.
 */
enum tq_status tq_search(const struct tq_index *ix, const float *queries,
    size_t nq, const struct tq_search_params *p, uint64_t *ids,
    float *scores);

/*
 * Range search: every row within `radius` of each query, best first (ties
 * by smaller id).  For l2 the radius is compared with the squared
 * distance, like the scores: score <= radius.  For ip and cosine: score
 * >= radius.  With originals in the index, every row whose estimated
 * score passes the radius loosened by a safety margin (six standard
 * deviations of the estimator's error for this row and query, plus the
 * bound of the table rounding) is checked exactly and kept iff its exact
 * score passes; a true result is missed only if the estimate errs by more
 * than the margin.  Without originals the estimate (float tables) is
 * compared with the radius directly.  p->k and p->oversample are
 * ignored; p->threads and p->allow apply.  `max` > 0 keeps only the best
 * `max` results of each query.
 *
 * The results of query i are ids[off[i] .. off[i+1]) and the same range
 * of scores.  All three arrays are malloc'd by the call into *out and
 * belong to the caller, who releases them with tq_range_free (also after
 * a failure, when they are NULL).
 */
struct tq_range {
	size_t nq;
	size_t *off;		/* nq + 1 offsets, off[0] = 0 */
	uint64_t *ids;
	float *scores;
};
enum tq_status tq_search_range(const struct tq_index *ix,
    const float *queries, size_t nq, const struct tq_search_params *p,
    float radius, size_t max, struct tq_range *out);
void tq_range_free(struct tq_range *r);

/*
 * Calibration for a recall target (tq(5) CALB).  tq_index_calibrate
 * measures, on an index with originals, the recall@k that searches
 * deliver over a grid of settings (probes for an IVF index, oversample)
 * and what each costs (rows scanned, candidates refined, originals read),
 * and commits the figures to the index as its CALB section (replacing
 * any it had), as a change does (tq_index_delete: the lock, a commit
 * onto `out` when it is `path`, else a whole new file).  The queries are
 * cp->queries (nq rows of the index's dimension: representative queries
 * of the user) or, when NULL, a seeded sample of cp->sample live rows of
 * the index itself, each searched as a held-out query: its own row (its
 * id) is left out of its exact neighbours and of its results.  Exact
 * neighbours are those of the stored originals (tq_exact_search's
 * method, sgemm filtering and double keys, streaming the originals in
 * chunks: memory O(queries * 100 + chunk)).  The figures depend only on
 * the index's live rows, their order and ids, and the queries: never on
 * threads, kernels or BLAS.  Fails with TQ_ERR_NOORIG without originals,
 * TQ_ERR_EMPTY if fewer than TQ_CALIB_MIN_ROWS rows are live (a sample)
 * or no query is given, TQ_ERR_MISMATCH for queries of another dimension.
 */
struct tq_calib_params {
	const float *queries;	/* NULL: a sample of the index's rows */
	size_t nq;
	uint32_t dim;		/* the queries' dimension */
	uint32_t sample;	/* rows sampled; 0 = TQ_CALIB_SAMPLE; at most
				   TQ_CALIB_MAX_SAMPLE and a quarter of the
				   live rows are taken */
	uint64_t seed;		/* the sample's seed */
	unsigned threads;	/* 0 = all cores */
	/* A build's own calibration (tq_build_params.calibrate): with
	   min_live > 0, an index with fewer live rows, or without
	   originals, is left uncalibrated instead of failing. */
	uint64_t min_live;
};
#define TQ_CALIB_SAMPLE 500u
#define TQ_CALIB_MIN_ROWS 100u
#define TQ_CALIB_MAX_QUERIES 100000u
#define TQ_CALIB_MAX_SAMPLE 10000u
/* sample 0 (TQ_CALIB_SAMPLE), seed TQ_CALIB_SEED, threads 0. */
#define TQ_CALIB_SEED 20261202u
void tq_calib_params_default(struct tq_calib_params *p);
enum tq_status tq_index_calibrate(const char *path,
    const struct tq_calib_params *cp, const struct tq_build_params *bp,
    const char *out);

/*
 * What an index's calibration says: present 0 when it has none.  stale
 * is 1 when the live rows have changed by more than TQ_CALIB_STALE_PCT
 * percent since (appends, deletes): the figures describe another index.
 */
struct tq_calib_info {
	int present;
	unsigned source;	/* 1: a sample of its rows; 2: given queries */
	uint32_t queries;
	uint64_t live;		/* live rows when it was made */
	uint64_t seed;		/* source 1 */
	uint32_t nk, nprobes, noversample, measured;
	uint32_t k[8];		/* the calibrated k, ascending */
	int stale;
};
#define TQ_CALIB_STALE_PCT 10u
enum tq_status tq_index_calib_info(const struct tq_index *ix,
    struct tq_calib_info *out);

/*
 * Entry (ki, pi, oi) of an index's calibration (ki < nk, pi < nprobes,
 * oi < noversample of tq_index_calib_info): its setting, k, probes (0 for
 * a flat index) and oversample (1: no re-rank), and when measured is 1
 * the mean recall@k of the calibration's queries, the standard error of
 * that mean, the rows scanned, candidates refined and originals read per
 * query, and the cost tq_index_recall_choose weighs (tq(5) CALB).
 * TQ_ERR_EMPTY if the index has no calibration, TQ_ERR_ARG for an entry
 * out of range.
 */
struct tq_calib_entry {
	uint32_t k, probes;
	float oversample;
	int measured;
	double recall, se, rows, refined, originals, cost;
};
enum tq_status tq_index_calib_entry(const struct tq_index *ix, uint32_t ki,
    uint32_t pi, uint32_t oi, struct tq_calib_entry *out);

/*
 * The cheapest calibrated setting whose recall@k reaches `target`
 * (0 < target <= 1): among the measured settings at the calibrated k
 * (the smallest calibrated k >= the k asked, else the largest), those
 * whose mean recall less TQ_RECALL_Z standard errors is at least
 * target - TQ_RECALL_SLACK, the one of least cost (below), ties to
 * fewer probes, then less oversample.  Also weighed: between two measured
 * probes values at one oversample, the larger reaching and the smaller
 * not, the fewest probes in between that reach on the line joining them
 * (recall, standard error and cost interpolated linearly; tq(5) CALB).
 * If none reaches it, the one with the highest such lower bound, and
 * reached is 0.  TQ_ERR_ARG for a target out of range, TQ_ERR_EMPTY if the index
 * has no calibration.  probes is 0 for a flat index; oversample 1 means
 * no re-rank.
 */
struct tq_recall_choice {
	uint32_t k;		/* the calibrated k used */
	uint32_t probes;
	float oversample;
	double recall;		/* its calibrated mean recall@k */
	double se;		/* the standard error of that mean */
	double cost;		/* per query, in the units of tq(5) CALB */
	int reached;
};
#define TQ_RECALL_Z 2.0
#define TQ_RECALL_SLACK 0.005
/*
 * The cost of a query: rows scanned x code bytes of a row, plus
 * WREFINE x dim per candidate refined and WORIG x dim per original read.
 * A refined candidate is about 4 rows scanned of 4-bit codes, an
 * original about 100: its row is read from a random place of the file
 * (a cache miss at best, a page fault or a disk read at worst) and
 * summed in double.  On Fashion-MNIST IVF (scripts/bench-recall, CPU of
 * tq-search --batch 1 processes, a loaded machine) 4 probes without
 * re-rank took 0.54 to 0.60 times the CPU of 3 probes re-ranking 15
 * originals: an original cost about 170 rows scanned there.
 */
#define TQ_RECALL_WREFINE 2.0
#define TQ_RECALL_WORIG 48.0
enum tq_status tq_index_recall_choose(const struct tq_index *ix, uint32_t k,
    double target, struct tq_recall_choice *out);

/*
 * Exact top-k by brute force (BLAS sgemm), streaming the corpus from a
 * reader in chunks: memory is O(nq*k + chunk).  Result ids are row numbers
 * of the corpus, ties broken by smaller row.  For ground truth.
 */
enum tq_status tq_exact_search(struct tq_reader *corpus, enum tq_metric m,
    const float *queries, size_t nq, uint32_t dim, uint32_t k,
    unsigned threads, uint64_t *ids, float *scores);

/* ------------------------------------------------------------------------ */
/* Files: inspection and verification                                        */

enum tq_file_kind {
	TQ_FILE_QUANTIZER = 1,
	TQ_FILE_INDEX = 2
};

struct tq_section_info {
	char tag[5];		/* four-character code, NUL-terminated */
	uint64_t offset;
	uint64_t length;
	uint64_t checksum;	/* stored XXH64 of the payload */
	uint32_t part;		/* 0: of the whole file; s + 1: of segment s */
};

struct tq_file_info {
	enum tq_file_kind kind;
	uint32_t version;
	uint64_t file_size;
	uint32_t nsections;
	struct tq_section_info sections[32];	/* the first 32 */
	/* quantizer */
	uint32_t dim;
	unsigned bits;
	enum tq_metric metric;
	uint64_t seed;
	enum tq_rotation rotation;
	uint32_t rotation_blocks;	/* structured: blocks per round */
	uint32_t rotation_rounds;	/* structured: 3, or 5 if narrow */
	int centred;
	int scale_search;
	/* index (zero for a quantizer file) */
	uint32_t lists;			/* coarse lists, 0 = none (flat) */
	uint32_t dups;			/* IVF index: most lists a vector was
					   copied to (1: none copied) */
	float dup_ratio;		/* ... and the distance ratio */
	uint64_t count;
	uint64_t live;			/* rows not deleted */
	enum tq_originals originals;
	double bytes_per_vector;	/* codes + factors + ids + WDTH */
	double original_bytes_per_vector;	/* ORIG and OMAP a row */
	uint32_t segments;		/* index: segments (appends since the
					   last build or compaction, + 1) */
	uint64_t commit;		/* index, version 2: commit number */
	uint64_t labels;		/* index: rows with a label (0 or
					   count) */
	int residual;			/* rows encoded about their lists'
					   centroids */
};

/* Opens and validates a file (as tq_index_open) and describes it. */
enum tq_status tq_file_info(const char *path, struct tq_file_info *out);

/*
 * Checks every section checksum.  On TQ_ERR_CHECKSUM, tq_errdetail()
 * names the first bad section.  For an index, also what opening leaves to
 * the readers: every OMAP entry names one of its segment's originals
 * (TQ_ERR_FORMAT otherwise).
 */
enum tq_status tq_file_verify(const char *path);

/* Name of the scan kernel in use ("scalar", "avx2", "avx512"). */
const char *tq_kernel_name(void);
/*
 * Instruction-set features detected on this machine and usable (the OS
 * saves their registers), space-separated, e.g. "sse4.2 avx avx2 fma f16c
 * bmi2 avx512f avx512dq avx512cd avx512bw avx512vl avx512vbmi avx512vnni";
 * "" if none.  Static.
 */
const char *tq_cpu_features(void);
/*
 * The filter that rules out IVF lists for many rows at once, each row's
 * nearest (building, k-means), before the fixed-order products choose
 * among the rest, and that rules out rows for exact neighbours of 64
 * queries or more: "bf16" (tq's own AVX512_BF16 products, on a CPU that
 * has them at kernel level avx512 or amx) or "sgemm" (the BLAS; also for
 * the probes of a batch of queries).  Either gives the same answer.
 * Static.
 */
const char *tq_list_filter_name(void);
/*
 * The filter that rules out the lists of a single query (a search of one
 * row, after the first 64 such in a process): "bf16" (as above), "bf16-fma"
 * (the same bf16 values multiplied by AVX2 FMA, on a CPU without
 * AVX512_BF16 or under TQ_LIST_FILTER=fma) or "f32" (none: every centroid
 * in the fixed order, at kernel level scalar or under
 * TQ_LIST_FILTER=sgemm).  Each gives the same lists.  Static.
 */
const char *tq_single_filter_name(void);

/* ------------------------------------------------------------------------ */
/* BLAS                                                                      */

/*
 * libtq uses BLAS (sgemm) for the products that dominate fitting lists,
 * assigning rows to them and exact search; results never depend on which
 * BLAS kernels run or on their thread count (every choice is settled in a
 * fixed summation order), only the time does.
 *
 * OpenBLAS built for many CPUs (DYNAMIC_ARCH, as Debian's) picks its
 * kernels when it is loaded, before main(), from a table of CPU models;
 * a CPU newer than its table gets the oldest SSE3 kernels ("Prescott"),
 * several times slower.  The tq programs check this at start and, when
 * OPENBLAS_CORETYPE is unset and the CPU supports wider kernels, run
 * themselves again once with it set.  A program that links libtq cannot
 * be changed from inside: check tq_blas_info() and, when `wider` is set,
 * start the program with OPENBLAS_CORETYPE=<wider> in its environment
 * (it must be set before the process starts; setenv() in main() is too
 * late).  OpenBLAS does not check a forced name against the CPU: use the
 * name tq_blas_info() proposes, not a guess.
 *
 * OpenBLAS's own threads spin for a while after each call; a program that
 * runs libtq's threaded functions (threads != 1) does best with
 * OPENBLAS_NUM_THREADS=1 (or tq_blas_set_threads(1)), as the tq programs
 * do: libtq then runs the products on its own threads.  The threads
 * OpenBLAS starts when it loads also spin (sched_yield, about 0.1 s of a
 * second core); tq_blas_set_threads(1) stops them too (OpenBLAS's
 * blas_thread_shutdown_), as the environment variable set before the
 * process starts does.
 */
struct tq_blas_info {
	const char *library;	/* openblas_get_config(), or "unknown" */
	const char *core;	/* kernel family running (openblas_get_corename,
				   e.g. "Haswell"), NULL if unknown */
	int threads;		/* BLAS threads, 0 if unknown */
	const char *wider;	/* a wider family this CPU runs, for
				   OPENBLAS_CORETYPE; NULL if none is better
				   or the running one is not known */
};

/* Describes the BLAS in use.  The strings are static. */
void tq_blas_info(struct tq_blas_info *out);
/*
 * The widest OpenBLAS kernel family whose instructions all appear in
 * `features` (a tq_cpu_features()-style list): "SkylakeX" (avx512f,
 * avx512bw, avx512vl, avx512dq, avx512cd), "Haswell" (avx2, fma),
 * "Sandybridge" (avx), "Nehalem" (sse4.2); NULL for none of these.
 */
const char *tq_blas_core_for(const char *features);
/*
 * tq_blas_core_for(features) if its family is wider than `current` (an
 * openblas_get_corename() name), else NULL; also NULL when `current` is
 * NULL or a name it does not know.  Pure: no CPU or BLAS is asked.
 */
const char *tq_blas_core_wider(const char *features, const char *current);
/*
 * Sets the BLAS thread count (openblas_set_num_threads, process-wide);
 * with n = 1 also stops the threads OpenBLAS runs.  Call it while no BLAS
 * call is running.  Returns 0 if the BLAS offers no such call or n < 1,
 * else 1.
 */
int tq_blas_set_threads(int n);
#ifdef __GNUC__
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* TQ_H */
