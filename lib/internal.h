/*
 * internal.h - shared internals of libtq: error macros, little-endian
 * helpers, checked arithmetic, the file layout constants and the internal
 * interfaces between the library's layers.  Not installed.
 */
#ifndef TQ_INTERNAL_H
#define TQ_INTERNAL_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "tq.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* Records a printf-style detail for tq_errdetail() and returns st. */
enum tq_status tq_fail(enum tq_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the detail. */
void tq_clear_detail(void);

/*
 * The largest squared norm of a row or query of an l2 or ip index (cosine
 * normalises them): |x| below 2^62 (4.6e18), so that squared norms,
 * distances (at most (2 2^62)^2 = 2^126) and products stay finite in
 * float (FLT_MAX is about 2^128).  Rows of 1e19 gave arbitrary results.
 */
#define TQ_MAX_NORM2 0x1p124
/*
 * TQ_OK if x2 = |x|^2 is within TQ_MAX_NORM2 or m is cosine, else
 * TQ_ERR_NONFINITE with "WHAT N: norm V is too large for M (...)"
 * (tq(5), "Limits").
 */
enum tq_status tq_norm_check(enum tq_metric m, double x2, const char *what,
    uint64_t n);
/* tq_check_rows, the rows called `what` ("row", "query") in the detail. */
enum tq_status tq_rows_check(enum tq_metric m, const float *x, size_t n,
    uint32_t dim, const char *what, uint64_t row0);

#define TQ_TRY(expr) do { \
	enum tq_status tq_try_st_ = (expr); \
	if (tq_try_st_ != TQ_OK) \
		return tq_try_st_; \
} while (0)

/* ------------------------------------------------------------------------ */
/* Little-endian fields                                                      */

static inline uint16_t rd_le16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}
static inline uint32_t rd_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	    (uint32_t)p[3] << 24;
}
static inline uint64_t rd_le64(const uint8_t *p)
{
	return (uint64_t)rd_le32(p) | (uint64_t)rd_le32(p + 4) << 32;
}
static inline float rd_lef32(const uint8_t *p)
{
	uint32_t u = rd_le32(p);
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline void wr_le16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static inline void wr_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}
static inline void wr_le64(uint8_t *p, uint64_t v)
{
	wr_le32(p, (uint32_t)v);
	wr_le32(p + 4, (uint32_t)(v >> 32));
}
static inline void wr_lef32(uint8_t *p, float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	wr_le32(p, u);
}

/* IEEE half precision, round to nearest even. */
uint16_t tq_f32_to_f16(float f);

/* A bf16 (the high half of an f32) as the f32 it stands for: exact. */
static inline float tq_bf16_to_f32(uint16_t h)
{
	uint32_t w = (uint32_t)h << 16;
	float f;

	memcpy(&f, &w, sizeof(f));
	return f;
}

/*
 * Half to single, exact for every half (NaN payloads kept): the exponent
 * is rebiased; inf and NaN get the top exponent; a subnormal is rebuilt by
 * one subtraction of normal floats, so DAZ/FTZ modes do not matter.
 */
static inline float tq_f16_to_f32(uint16_t h)
{
	const uint32_t top = 0x7c00u << 13;
	uint32_t u = (uint32_t)(h & 0x7fffu) << 13, e = u & top;
	float f, magic;

	u += (127u - 15u) << 23;
	if (e == top) {
		u += (128u - 16u) << 23;
	} else if (e == 0) {
		u += 1u << 23;
		memcpy(&f, &u, 4);
		u = 113u << 23;
		memcpy(&magic, &u, 4);
		f -= magic;
		memcpy(&u, &f, 4);
	}
	u |= (uint32_t)(h & 0x8000u) << 16;
	memcpy(&f, &u, 4);
	return f;
}

/* ------------------------------------------------------------------------ */
/* Reading ahead on a second thread (ahead.c)                                */

/* Fills buf with at most max rows; *got = the rows read. */
typedef enum tq_status (*tq_fill_fn)(void *arg, void *buf, size_t max,
    size_t *got);
struct tq_ahead {
	pthread_t tid;
	int running, pending;
	tq_fill_fn fill;
	void *arg, *buf;
	size_t max, got;
	enum tq_status rc;
	char detail[512];	/* the filling thread's tq_errdetail() */
};
/* Starts fill(arg, buf, max) on a thread (inline if none can start). */
void tq_ahead_start(struct tq_ahead *a, tq_fill_fn fill, void *arg,
    void *buf, size_t max);
/* Waits for it: its status, with its detail; *got its rows. */
enum tq_status tq_ahead_wait(struct tq_ahead *a, size_t *got);
/* Waits for it and drops its result (the caller failed meanwhile). */
void tq_ahead_cancel(struct tq_ahead *a);

/* ------------------------------------------------------------------------ */
/* Checked arithmetic: return 0 on success, nonzero on overflow.             */

static inline int ck_mul(size_t a, size_t b, size_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}
static inline int ck_add(size_t a, size_t b, size_t *r)
{
	return __builtin_add_overflow(a, b, r);
}
static inline int ck_mul64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r);
}
static inline int ck_add64(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_add_overflow(a, b, r);
}

/* malloc of a*b bytes with overflow check; NULL on failure (errno set). */
void *tq_mallocarray(size_t a, size_t b);
void *tq_callocarray(size_t a, size_t b);

/*
 * Scales x to unit length into out (may alias x); a zero vector stays
 * zero.  Returns |out|^2.  Every cosine path uses this one function.
 */
double tq_normalise(const float *x, uint32_t dim, float *out);

/* Number of online processors (>= 1). */
unsigned tq_ncpu(void);

/* ------------------------------------------------------------------------ */
/* File layout (specified in man/tq.5)                                        */

/*
 * Every tq file (quantizer or index) is a container:
 *
 *   header, 64 bytes at offset 0
 *     0  u8[8]  magic "\x89TQF\r\n\x1a\n"
 *     8  u32    format version (TQ_FORMAT_VERSION)
 *    12  u32    kind (1 quantizer, 2 index)
 *    16  u32    number of sections (1 .. TQ_MAX_SECTIONS)
 *    20  u32    header size (64)
 *    24  u64    file size in bytes
 *    32  u64    offset of the section table (64)
 *    40  u64    XXH64 (seed 0) of the section table
 *    48  u64    reserved, 0
 *    56  u64    XXH64 (seed 0) of header bytes 0..55
 *
 *   section table, nsections entries of 32 bytes
 *     0  u8[4]  tag (four ASCII characters)
 *     4  u32    flags, 0
 *     8  u64    offset of the payload, a multiple of 64
 *    16  u64    length of the payload in bytes
 *    24  u64    XXH64 (seed 0) of the payload
 *
 *   payloads, each starting at a 64-byte aligned offset, zero padding
 *   between.  Sections may come in any order; unknown tags are skipped.
 *   Sections must not overlap each other, the header or the table, and
 *   must end within the file.
 */
#define TQ_MAGIC "\x89TQF\r\n\x1a\n"
#define TQ_FORMAT_VERSION 2u
#define TQ_HEADER_SIZE 64u
#define TQ_SECTION_ENTRY 32u
#define TQ_MAX_SECTIONS 64u
#define TQ_ALIGN 64u

/*
 * Version 2 (index files; commit.c has the invariants).  The first 4096
 * bytes are the superblock:
 *
 *     0  u8[8]  magic          8 u32 version (2)     12 u32 kind (2)
 *    16  u32    0             20 u32 superblock size (4096)
 *    24 .. 55   reserved, 0   56 u64 XXH64 of bytes 0..55
 *
 * and two commit slots of 64 bytes, at 1024 and 2048:
 *
 *     0  u64    sequence number (>= 1; 0: the slot is empty)
 *     8  u64    offset of the section table (a multiple of 64, >= 4096)
 *    16  u32    number of sections (1 .. TQ_MAX_SECTIONS_V2)
 *    20  u32    0
 *    24  u64    XXH64 of the section table
 *    32  u64    committed size: no section or table ends past it
 *    40 .. 55   reserved, 0
 *    56  u64    XXH64 of slot bytes 0..55
 *
 * Commit s is written to slot (s - 1) % 2.  The current commit is the
 * valid slot with the larger sequence number.  Table entries are as in
 * version 1 except that bytes 4..7 hold the part: 0 for a section of the
 * whole index, s + 1 for one of segment s.
 */
#define TQ_FORMAT_V1 1u
#define TQ_SUPER_SIZE 4096u
#define TQ_SLOT_SIZE 64u
#define TQ_SLOT0 1024u
#define TQ_SLOT1 2048u
#define TQ_MAX_SECTIONS_V2 65536u
#define TQ_MAX_SEGMENTS TQ_MAX_SEGMENTS_LIMIT

#define TQ_TAG(a, b, c, d) \
	((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | \
	    (uint32_t)(d) << 24)

/*
 * Quantizer sections (present in quantizer and index files):
 *
 * QPAR, 64 bytes:
 *     0 u32 dim      4 u32 bits     8 u32 metric (0 ip, 1 cosine, 2 l2)
 *    12 u32 flags: bit 0 centred, bit 1 scale search
 *    16 u64 seed    24 u32 rotation kind (1 dense, 2 structured,
 *                   3 Hadamard)
 *    28 u32 number of codebook levels (2^bits)
 *    32 u32 field bits (4 or 6)   36 u32 coordinates per field
 *    40 u32 fields per vector (padded, multiple of 4)
 *    44 .. 63 reserved, 0
 * ROTM  rotation.  Dense: dim*dim f32, row-major R, y = R x.
 *       Structured, Hadamard: see rotation.c (their lengths are checked
 *       against dim).
 * CBOK  codebook: 2^bits f32 centroids ascending, then 2^bits - 1 f32
 *       boundaries (midpoints), for the law of one coordinate of a rotated
 *       unit vector at this dim (values in [-1, 1], not scaled by sqrt(d)).
 * CENT  2*dim f32: the centre c, then R c.  All zero when not centred.
 * IVFC  optional, coarse lists: u32 nlist (1 .. 2^24), u32 dim, u64 0,
 *       then nlist*dim f32 centroids in the input space (for cosine, of
 *       the normalised vectors), all finite.
 *
 * Index sections:
 *
 * IPAR, 64 bytes:
 *     0 u64 n (vectors)   8 u64 number of 32-vector blocks
 *    16 u32 block size (32)   20 u32 bytes per block of codes
 *    24 u32 originals (0 none, 1 f32, 2 f16)   28 u32 factors per vector (3)
 *    32 u32 IVF: most lists a vector was copied to (0: one; else 2 ..
 *       nlist)   36 f32 the distance ratio of the copies (0 with one)
 *    40 .. 63 reserved, 0
 * CODE  nblocks * block_bytes: the codes in the blocked scan layout below.
 * FACT  nblocks * 32 * 3 f32: per block, s[32], b'[32], |x|^2[32].
 *       Padding rows (past n) are zero.
 * IDS   n u64 external ids; or, in its place, ID32: n u32 ids, which a
 *       writer chooses when every id of the segment is below 2^32
 *       (index.c ids_width).  A segment has exactly one of the two.
 * ORIG  n * dim f32 or f16 originals (for cosine: normalised), in row
 *       order; with OMAP, m of them (1 <= m <= n) in the order the vectors
 *       arrived, each once however many lists hold it.
 * OMAP  optional, IVF with originals (every IVF build with originals
 *       writes it; older segments have none): n u32, the entry of ORIG
 *       that holds each row's original.  Absent: row i's is entry i.  Entries are checked where they are used, not
 *       on open: one past m reads as entry m - 1 (tq_part_orig_index), and
 *       verification and rewrites refuse the file.
 * LIST  present iff the quantizer has IVFC: nlist + 1 u64 row offsets,
 *       off[0] = 0 <= off[1] <= ... <= off[nlist] = n.  The rows of list
 *       L are rows off[L] .. off[L+1] - 1, in input order; lists need not
 *       start on a block boundary.
 * TOMB  optional: ceil(n/8) bytes, a bitmap of deleted rows: row i is
 *       bit (i % 8) of byte i / 8, 1 = deleted.  Bits past n are zero and
 *       at least one row is live.  Codes, factors, ids and originals of a
 *       deleted row stay as they were; searches skip it.  Absent: no row
 *       is deleted.
 * WDTH  optional: n u16, each row's rho (encode.c) as an IEEE half, rounded
 *       up; +inf (0x7c00) where unknown.  Values are not checked on open:
 *       a search takes anything but a finite value >= 0 as unknown and
 *       falls back to the global bound (tq(5), "Error bound").
 */
#define TQ_TAG_QPAR TQ_TAG('Q', 'P', 'A', 'R')
#define TQ_TAG_ROTM TQ_TAG('R', 'O', 'T', 'M')
#define TQ_TAG_CBOK TQ_TAG('C', 'B', 'O', 'K')
#define TQ_TAG_CENT TQ_TAG('C', 'E', 'N', 'T')
#define TQ_TAG_IPAR TQ_TAG('I', 'P', 'A', 'R')
#define TQ_TAG_CODE TQ_TAG('C', 'O', 'D', 'E')
#define TQ_TAG_FACT TQ_TAG('F', 'A', 'C', 'T')
#define TQ_TAG_IDS  TQ_TAG('I', 'D', 'S', ' ')
#define TQ_TAG_ORIG TQ_TAG('O', 'R', 'I', 'G')
#define TQ_TAG_TOMB TQ_TAG('T', 'O', 'M', 'B')
#define TQ_TAG_IVFC TQ_TAG('I', 'V', 'F', 'C')
#define TQ_TAG_LIST TQ_TAG('L', 'I', 'S', 'T')
#define TQ_TAG_WDTH TQ_TAG('W', 'D', 'T', 'H')
#define TQ_TAG_OMAP TQ_TAG('O', 'M', 'A', 'P')
#define TQ_TAG_FACH TQ_TAG('F', 'A', 'C', 'H')
#define TQ_TAG_ID32 TQ_TAG('I', 'D', '3', '2')
#define TQ_IVFC_HEADER 16u
/* IVFC encoding (header offset 8) 1: a mean and bf16 offsets; 0: f32. */
#define TQ_IVFC_BF16 1u

#define TQ_QPAR_SIZE 64u
#define TQ_IPAR_SIZE 64u
#define TQ_QFLAG_CENTRED 1u
#define TQ_QFLAG_SCALE_SEARCH 2u
/* Rows are encoded about their list's centroid (tq(5) "Residual codes"). */
#define TQ_QFLAG_RESIDUAL 4u
#define TQ_QFLAGS (TQ_QFLAG_CENTRED | TQ_QFLAG_SCALE_SEARCH | TQ_QFLAG_RESIDUAL)

/*
 * The blocked scan layout.
 *
 * A vector's coordinates (in rotated order, padded with code 0 up to
 * nfields * coords_per_field) are grouped into fields:
 *
 *   bits 4: 1 coordinate per 4-bit field      (16-entry table)
 *   bits 2: 2 coordinates per 4-bit field     (code = c0 | c1 << 2)
 *   bits 1: 4 coordinates per 4-bit field     (code = c0 | c1<<1 | c2<<2 | c3<<3)
 *   bits 3: 2 coordinates per 6-bit field     (code = c0 | c1 << 3; 64 entries)
 *
 * nfields = ceil(dim / coords_per_field) rounded up to a multiple of 4.
 * A padded coordinate's table entries are 0, so it adds nothing.
 *
 * Vectors are stored in blocks of 32.  Within a block, for 4-bit fields,
 * each field f occupies 16 bytes: byte j (0..15) holds the field of vector
 * j in its low nibble and of vector j+16 in its high nibble.  So a block is
 * nfields * 16 bytes, and one pshufb over a 16-byte row looks up 16
 * vectors; an AVX2 register holds two consecutive fields.
 *
 * For 6-bit fields (3 bits), fields go in groups of four (f0..f3), 96 bytes
 * per group: three rows of 32 bytes A, B, C, byte j for vector j:
 *   A[j] = f0 | (f3 & 3) << 6
 *   B[j] = f1 | ((f3 >> 2) & 3) << 6
 *   C[j] = f2 | (f3 >> 4) << 6
 * so a 64-entry byte permute (vpermb) indexes A, B and C directly and f3
 * is three shifts away.  A block is nfields / 4 * 96 bytes.
 *
 * Rows past n in the last block have all codes 0.
 */
#define TQ_BLOCK 32u

/* ------------------------------------------------------------------------ */
/* Quantizer internals                                                       */

/* Coarse lists (IVF): centroids in the input space, see ivf.c. */
struct tq_ivf {
	uint32_t nlist;			/* 0: no lists */
	/*
	 * The centroids, nlist * dim: f32 (cent), or NULL and each value
	 * cbase[j] + cb[o * dim + j] in f32, the offsets in bf16 (IVFC
	 * encoding 1), which tq_ivf_rows widens a few rows at a time so
	 * that a search keeps half the bytes resident.
	 */
	const float *cent;
	const uint16_t *cb;
	const float *cbase;		/* dim */
	/*
	 * With cb: the f32 values, made (ivf.c wide_ready) for the searches
	 * that score every list or most of them one row at a time, where
	 * widening a block per row would cost more than the dot products:
	 * no list filter, or one that rules out few lists.  Guarded like
	 * bfc; widemade 1 once tried.
	 */
	float *wide;
	int widemade;
	float *n2;			/* nlist: |c|^2 in the fixed order */
	double cmax;			/* largest |c| */
	double n2max;			/* largest n2 */
	/*
	 * The centroids in bf16 for the filter (tq_bf16_kernel), blocks of
	 * 16 lists, bfnl lists (nlist padded with zeros to TQ_BF16_LISTS);
	 * NULL: sgemm filters.  A cache, made by the first batch that
	 * chooses lists (bfmade then 1), so that opening an index for a
	 * few queries does not pay for it; ivf.c guards it with a lock.
	 */
	void *bfc;
	uint32_t bfnl;
	double *bfe;			/* per list: |c - bf16(c)|, |c| */
	double bfemax[2];		/* the largest of each */
	int bfmade;
	/*
	 * With cb: per list |e| (its bf16 offset) and |c|, each rounded up,
	 * the largest of each, and |cbase|: the bound of the one-row filter
	 * that reads cb where it lies (ivf.c single_rows).  NULL without.
	 */
	double *cbn;
	double cbnmax[2];
	double basen;
	uint64_t nsingle;		/* single rows scored (ivf.c) */
};

struct tq_quantizer {
	uint32_t dim;
	unsigned bits;
	enum tq_metric metric;
	uint32_t flags;			/* TQ_QFLAG_* */
	uint64_t seed;
	enum tq_rotation rotation;	/* resolved: DENSE, STRUCTURED or
					   HADAMARD */
	unsigned nlevels;		/* 2^bits */
	unsigned field_bits;		/* 4 or 6 */
	unsigned coords_per_field;
	uint32_t nfields;		/* padded to a multiple of 4 */
	float centroids[16];		/* ascending, unit-vector scale */
	/* Each level's probability for a coordinate of a random unit vector
	   (normal approximation; tq_quantizer_cells), or all 0. */
	float cellp[16];
	float bounds[15];		/* midpoints */
	float *rot;			/* rotation payload (ROTM) */
	size_t rot_len;			/* bytes of rot */
	float *centre;			/* dim floats (zero if not centred) */
	float *rcentre;			/* R * centre, dim floats */
	double cc;			/* |centre|^2 (tq_centre_norm2),
					   set with the centre */
	void *mem;			/* if non-NULL, frees rot/centre */
	int borrowed;			/* rot/centre point into a mapping */
	struct tq_ivf ivf;
	float *ivfmem;			/* owned centroids, or NULL */
	double offset;			/* tq_quantizer_offset */
	void *ivfbmem;			/* owns ivf.cbase, ivf.cb, or NULL */
};

/*
 * Rows o to o + n - 1 of v's centroids in f32: a pointer into v->cent,
 * or tmp (n * dim floats) filled from the bf16 form.
 */
const float *tq_ivf_rows(const struct tq_ivf *v, uint32_t dim, uint32_t o,
    uint32_t n, float *tmp);
/*
 * Rounds the n * dim centroids c (f32) to IVFC's bf16 form: base gets the
 * mean of each coordinate, cb each value's offset from it rounded to bf16
 * (to nearest even), and c the values they stand for.
 */
void tq_ivf_round(float *c, size_t n, uint32_t dim, float *base,
    uint16_t *cb);

/* Fills v->n2, v->cmax and v->n2max from v->cent. */
enum tq_status tq_ivf_prepare(struct tq_ivf *v, uint32_t dim);
/* Frees what tq_ivf_prepare allocated (not cent). */
void tq_ivf_release(struct tq_ivf *v);
/*
 * The best p lists (p <= nlist) of each of n rows x, best first, into
 * lists[i * p ..]: the nearest by |x - c|^2 (x scaled to unit length
 * first when `normalise`), or with `ip` the largest <x, c>.  Ties go to
 * the smaller list.  With `scores` != NULL their scores go to the same
 * places: <x, c> for ip, else 2 <x, c> - |c|^2 (= |x|^2 - |x - c|^2).
 * On at most `threads` threads of libtq's own (0: one a CPU; 1 starts
 * none), as a caller asked for that many (a search's --threads).
 * Deterministic, whatever the threads: see ivf.c.
 */
enum tq_status tq_ivf_nearest(const struct tq_ivf *v, uint32_t dim,
    const float *x, size_t n, int normalise, int ip, uint32_t p,
    uint32_t *lists, float *scores, unsigned threads);
/*
 * k-means (k-means++ seeding, Lloyd iterations with empty-list repair)
 * of the m rows x into k centroids cent[k * dim].  Deterministic for a
 * seed.  Needs m >= k.
 */
enum tq_status tq_kmeans(const float *x, size_t m, uint32_t dim, uint32_t k,
    unsigned iters, uint64_t seed, float *cent);
/* BLAS threads (openblas_get_num_threads), 0 if not known. */
int tq_blas_threads(void);
/* The same on up to `threads` threads (0: one a CPU); the same result. */
enum tq_status tq_ivf_nearest_threads(const struct tq_ivf *v, uint32_t dim,
    const float *x, size_t n, int normalise, int ip, uint32_t p,
    uint32_t *lists, float *scores, unsigned threads);
/* How tq_kmeans_run runs: threads (0: one a CPU), progress (may be NULL). */
struct tq_kmeans_params {
	unsigned threads;
	tq_progress_fn progress;
	void *progress_arg;
};
/*
 * tq_kmeans with threads and progress ("seeding": centres chosen of k;
 * "k-means": iterations done of iters).  The same bytes for any threads.
 */
enum tq_status tq_kmeans_run(const float *x, size_t m, uint32_t dim,
    uint32_t k, unsigned iters, uint64_t seed,
    const struct tq_kmeans_params *kp, float *cent);
/* A uniform integer in [0, n) from the splitmix64 state *g. */
uint64_t tq_rand_below(uint64_t *g, uint64_t n);

/* Fills field_bits, coords_per_field, nfields from dim and bits. */
void tq_quantizer_layout(struct tq_quantizer *q);

/* q->cellp from q->bounds (quantizer.c). */
void tq_quantizer_cells(struct tq_quantizer *q);
/* Lloyd-Max codebook for the coordinate law at dim d with 2^bits levels. */
enum tq_status tq_codebook(uint32_t d, unsigned bits, float *centroids,
    float *bounds);

/*
 * Rotation payload: generated from the seed (tq_rotation_make, malloc'd
 * into *payload, *len bytes), validated against dim when loaded
 * (tq_rotation_check), and applied to n row vectors: y = R x
 * (tq_rotate) or x = R^T y (tq_rotate_inv).  x and y are n*dim, distinct.
 * width: a structured rotation's block width, 0 for the default (256).
 */
enum tq_status tq_rotation_make(uint32_t dim, enum tq_rotation kind,
    uint32_t width, uint64_t seed, float **payload, size_t *len);
/* The kind TQ_ROT_AUTO stands for at dim with block width (0: none). */
enum tq_rotation tq_rotation_resolve(uint32_t dim, enum tq_rotation kind,
    uint32_t width);
enum tq_status tq_rotation_check(uint32_t dim, enum tq_rotation kind,
    const void *payload, size_t len);
void tq_rotate(const struct tq_quantizer *q, const float *x, size_t n,
    float *y);
void tq_rotate_inv(const struct tq_quantizer *q, const float *y, size_t n,
    float *x);
/*
 * y[i*ldy + o] = <x row i, a row o> for n rows of x (length k) and the m
 * rows of the row-major m x k matrix a, each a dot product in one fixed
 * order: the same bits on every x86-64 and thread count (rotation.c).
 */
void tq_dot_rows(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy);

/*
 * Encodes n rows into unpacked codes (one byte per coordinate, n*dim) and
 * factors (n*TQ_NFACTORS).  The public tq_encode packs these.
 */
enum tq_status tq_encode_unpacked(const struct tq_quantizer *q,
    const float *x, size_t n, uint8_t *codes, float *factors);
/* The same on up to `threads` threads (0: one a CPU); the same bytes. */
enum tq_status tq_encode_unpacked_threads(const struct tq_quantizer *q,
    const float *x, size_t n, unsigned threads, uint8_t *codes,
    float *factors);

/*
 * Residual codes: row i is encoded about centroid list[i] of the
 * quantizer's lists, whose rotations (R c, nlist * dim floats) are rcent.
 */
struct tq_enc_lists {
	const uint32_t *list;
	const float *rcent;
};

/* The rotated centroids of q's lists for struct tq_enc_lists (free()). */
enum tq_status tq_enc_lists_make(const struct tq_quantizer *q,
    float **rcent);

/*
 * The same, also writing each row's rho (encode.c; tq(5) WDTH) into
 * rho[0 .. n) as f16 bits; el NULL encodes about the centre (refused for
 * a residual quantizer), else about each row's list.
 */
enum tq_status tq_encode_unpacked_rho(const struct tq_quantizer *q,
    const float *x, size_t n, unsigned threads,
    const struct tq_enc_lists *el, uint8_t *codes, float *factors,
    uint16_t *rho);
/* tq_decode about the given centre (a residual row's list centroid). */
enum tq_status tq_decode_about(const struct tq_quantizer *q,
    const uint8_t *codes, const float *factors, size_t n,
    const float *centre, float *out);
/* x (>= 0) as the smallest f16 no smaller than x, as bits. */
uint16_t tq_f16_up(float x);

/*
 * Compact factors (tq(5) FACH): per row an f16 s, an f16 t and an i8
 * exponent E, the row's factors being s 2^E and t 2^E, with the key
 *   ip, cosine: <q, c> + s (dot + t),   t = b' / s
 *   l2:        -|q - c|^2 + s (2 dot + t),   t = (2 b' - |x|^2 + |c|^2) / s
 * (dot = <R q, yhat>).  A block of 32 rows is TQ_FACH_BLOCK bytes: 32 s,
 * then 32 t (f16, little-endian), then 32 E.
 *
 * In a build the three floats of a row (s, b', |x|^2) become, in place,
 * the row's compact form as floats: the f16 values of s and t and E, so
 * that rows copied from a compact segment pass through the same buffers
 * (and spill records) unchanged and a compaction writes the bytes a
 * fresh build would.  cc is |c|^2 (tq_centre_norm2).
 */
#define TQ_FACH_BLOCK 160
void tq_fach_canon(float f[3], int l2, double cc);
/* A compact row's floats (as tq_fach_canon makes them) from block bytes. */
void tq_fach_row(const uint8_t *blk, unsigned j, float f[3]);
/* Compact floats back to (s, b', |x|^2): b' = 0 for l2, |x|^2 = 0 else. */
void tq_fach_uncanon(float f[3], int l2, double cc);
/* Packs nblk blocks of canonical floats (32 s, 32 t, 32 E each) to bytes. */
void tq_fach_pack(const float *fblocks, size_t nblk, uint8_t *out);
/* Row j's decoded s 2^E and t 2^E (E clamped to -126 .. 127). */
void tq_fach_decode(const uint8_t *blk, unsigned j, float *s, float *t);
/* 2^e for e clamped to -126 .. 127, as the kernels make it. */
static inline float tq_fach_pow2(int e)
{
	uint32_t u;
	float f;

	e = e < -126 ? -126 : e > 127 ? 127 : e;
	u = (uint32_t)(e + 127) << 23;
	memcpy(&f, &u, 4);
	return f;
}
/* |c|^2 of the quantizer's centre, in double, in order (0 if none). */
double tq_centre_norm2(const struct tq_quantizer *q);

/* Packs/unpacks one vector's codes for the row (stream) format. */
void tq_pack_row(const struct tq_quantizer *q, const uint8_t *codes,
    uint8_t *packed);
void tq_unpack_row(const struct tq_quantizer *q, const uint8_t *packed,
    uint8_t *codes);

/* Bytes of one 32-vector block of codes. */
size_t tq_block_bytes(const struct tq_quantizer *q);
/*
 * Writes one block from `rows` (<= 32) vectors of unpacked codes
 * (rows*dim bytes); rows past `rows` are zero.
 */
void tq_pack_block(const struct tq_quantizer *q, const uint8_t *codes,
    size_t rows, uint8_t *block);
/* Reads back the unpacked codes of vector j (0..31) of a block. */
void tq_unpack_block_row(const struct tq_quantizer *q, const uint8_t *block,
    unsigned j, uint8_t *codes);
/*
 * Sets vector j (0..31) of a block to one vector's codes in the row
 * layout (tq_pack_row); the block's other vectors keep theirs.
 */
void tq_block_put_row(const struct tq_quantizer *q, const uint8_t *packed,
    unsigned j, uint8_t *block);
/*
 * Copies vectors [s, s + len) of the blocks at src to vectors
 * [d, d + len) of the blocks at dst (vector i is vector i % 32 of block
 * i / 32); dst's other vectors keep their codes.  The result equals
 * unpacking each vector and packing it again.
 */
void tq_block_copy_rows(const struct tq_quantizer *q, const uint8_t *src,
    uint64_t s, uint8_t *dst, uint64_t d, size_t len);

/* Serialises the quantizer sections into the writer of a container. */
struct tq_filewriter;
enum tq_status tq_quantizer_write_sections(const struct tq_quantizer *q,
    struct tq_filewriter *fw);

/* ------------------------------------------------------------------------ */
/* Container files (format.c)                                                */

/*
 * A validated, read-only mapping of a tq file: for version 2, of its
 * current commit (the sections that commit's table lists).
 */
struct tq_file {
	const uint8_t *base;
	size_t size;		/* bytes mapped */
	uint32_t version;
	enum tq_file_kind kind;
	uint32_t nsections;
	struct tq_section_info *sec;	/* nsections, malloc'd */
	uint64_t seq;		/* version 2: the commit's number (v1: 0) */
	uint64_t end;		/* bytes the commit covers (v1: the size) */
	uint64_t table;		/* version 2: offset of the commit's table */
	/*
	 * 1: mincore(2) tells this file's page cache (Linux shows it for
	 * files the process owns or may write, and says "resident" for
	 * others).
	 */
	int residency;
};

/* Maps and validates header, table and section bounds. */
enum tq_status tq_file_map(const char *path, struct tq_file *f);
/* The same on an open descriptor (not closed; the mapping outlives it). */
enum tq_status tq_file_map_fd(int fd, struct tq_file *f);
void tq_file_unmap(struct tq_file *f);
/*
 * Gives the whole pages within [lo, hi) of a read-only file mapping back
 * (MADV_DONTNEED drops them from the process, not from the page cache),
 * so that a pass over a large section does not stay in the resident set.
 */
void tq_map_release(const void *lo, const void *hi);
/*
 * Asks the kernel to start reading the pages of [lo, hi) of a file
 * mapping now (MADV_WILLNEED, asynchronous): one round of large reads
 * instead of a page fault after another, whatever MADV_RANDOM says.
 */
void tq_map_willneed(const void *lo, const void *hi);
/*
 * Whether the pages holding lo and hi - 1 are both in memory (mincore), a
 * range read whole standing for its ends; 0 if mincore fails.  Only where
 * the file's residency is known (struct tq_file).
 */
int tq_map_resident(const void *lo, const void *hi);
/* Every section's checksum against the table's (format.c). */
enum tq_status tq_file_verify_sums(const struct tq_file *f);
/* Finds a section of the whole index (part 0); NULL (and *len = 0) if none. */
const uint8_t *tq_file_section(const struct tq_file *f, uint32_t tag,
    uint64_t *len);
/* Finds section `tag` of part `part` (0 whole index, s + 1 segment s). */
const uint8_t *tq_file_part(const struct tq_file *f, uint32_t part,
    uint32_t tag, uint64_t *len);
/*
 * Builds a quantizer whose arrays point into the mapping (borrowed) after
 * checking QPAR, ROTM, CBOK and CENT.  With copy != 0 the arrays are
 * copied so the file may be unmapped.
 */
enum tq_status tq_quantizer_from_file(const struct tq_file *f, int copy,
    struct tq_quantizer **out);

/*
 * Writing: sections are appended in order with tq_fw_begin / tq_fw_write
 * (any number of times) / tq_fw_end; the payload is hashed as it is
 * written.  The file goes to a temporary name in the destination's
 * directory and is renamed into place by tq_fw_commit after fsync.
 */
enum tq_status tq_fw_open(const char *path, enum tq_file_kind kind,
    unsigned max_sections, struct tq_filewriter **out);
enum tq_status tq_fw_begin(struct tq_filewriter *fw, uint32_t tag);
enum tq_status tq_fw_write(struct tq_filewriter *fw, const void *p,
    size_t n);
enum tq_status tq_fw_end(struct tq_filewriter *fw);
/*
 * Reserves a section of known length at the current end; its payload is
 * then written in order by tq_fw_put calls (several reserved sections may
 * be filled in interleaved order, each sequentially).
 */
enum tq_status tq_fw_reserve(struct tq_filewriter *fw, uint32_t tag,
    uint64_t length, unsigned *slot);
enum tq_status tq_fw_put(struct tq_filewriter *fw, unsigned slot,
    const void *p, size_t n);
enum tq_status tq_fw_commit(struct tq_filewriter *fw);
void tq_fw_abort(struct tq_filewriter *fw);
/*
 * A new index file made complete under its temporary name (table,
 * superblock, fsync) but not renamed: tq_fw_fd's descriptor can then be
 * mapped as an index and committed onto (tq_fw_open_commit) before
 * tq_fw_commit renames it into place.  A kill before that rename leaves
 * the destination as it was.  On failure the caller aborts.
 */
enum tq_status tq_fw_seal(struct tq_filewriter *fw);
int tq_fw_fd(const struct tq_filewriter *fw);
/* Sections begun or reserved from now on belong to `part` (version 2). */
void tq_fw_set_part(struct tq_filewriter *fw, uint32_t part);

/*
 * A commit onto an existing version 2 index (commit.c): new sections are
 * written past cur->end on fd (open for writing, locked by the caller);
 * tq_fw_keep carries an entry of the current table into the new one.
 * tq_fw_commit then writes the table, syncs, and writes the next slot:
 * until that write the current commit stays the current one.  Neither
 * closes fd.  An abort truncates fd back to cur->end.
 */
enum tq_status tq_fw_open_commit(int fd, const struct tq_file *cur,
    struct tq_filewriter **out);
enum tq_status tq_fw_keep(struct tq_filewriter *fw,
    const struct tq_section_info *s);

/*
 * Creates "<dir>/.<base>.tmp.XXXXXX" beside path (mode 0600); returns the
 * descriptor and the malloc'd name, or -1 with errno set.
 */
int tq_tmpfile_beside(const char *path, char **tmpname);
/*
 * The rows a reader will deliver: its count when known, else the count
 * its header announces (a stream that then holds more or fewer rows
 * fails to read), else -1.
 */
int64_t tq_reader_claimed(const struct tq_reader *r);
/*
 * 1 if path exists and is neither a regular file nor a directory (a
 * device such as /dev/null, a FIFO, a socket): such a destination is
 * written in place, never replaced by rename.
 */
int tq_path_is_special(const char *path);

/* ------------------------------------------------------------------------ */
/* Index internals                                                           */

/*
 * One segment of an index: what one build or append wrote.  Its rows are
 * rows row0 .. row0 + n - 1 of the index's row space, and its blocks the
 * blocks block0 .. block0 + nblocks - 1: every segment starts on a block
 * boundary (row0 = 32 block0), so the rows past n in its last block are
 * padding that no scan returns.  Row r of the row space is row r - row0
 * of its segment.
 */
struct tq_part {
	uint64_t row0, block0;
	uint64_t n, nblocks;
	const uint8_t *codes;		/* nblocks * block_bytes */
	const float *factors;		/* nblocks * 32 * 3 (aligned, LE host),
					   or NULL when fach is set */
	const uint8_t *ids;		/* n * idw, little-endian */
	unsigned idw;			/* 8 (IDS) or 4 (ID32) */
	const uint8_t *orig;		/* norig * dim * (4 or 2), or NULL */
	const uint8_t *omap;		/* n u32 entries of orig, or NULL:
					   row r's original is entry r */
	uint64_t norig;			/* originals in orig */
	const uint8_t *tomb;		/* ceil(n/8) bytes, or NULL */
	const uint8_t *list;		/* IVF: nlist + 1 u64 local offsets */
	const uint8_t *wdth;		/* n f16 rho (WDTH), or NULL */
	uint64_t live;			/* rows not deleted */
	const uint8_t *fach;		/* FACH: nblocks * TQ_FACH_BLOCK,
					   or NULL (FACT) */
	/*
	 * The largest |s| and |s| rho of the rows (search.c part_wmax),
	 * found by the first error-bounded search that needs them: 0 not
	 * yet, else bit 63 set, the bits of the two floats below it.
	 */
	_Atomic uint64_t wmax;
};

struct tq_index {
	struct tq_file file;
	struct tq_quantizer *q;		/* borrowed arrays into file */
	uint64_t n;			/* rows of all segments */
	uint64_t nblocks;		/* blocks of all segments: the row
					   space is 32 * nblocks rows */
	size_t block_bytes;
	enum tq_originals originals;
	uint64_t live;			/* rows not deleted */
	uint32_t nlist;			/* 0: flat */
	uint32_t dups;			/* IVF: copies of a vector, 0 = 1 */
	float dup_ratio;
	uint64_t next_id;		/* one more than the largest id stored */
	uint32_t nparts;		/* segments, >= 1 */
	struct tq_part *parts;		/* malloc'd */
	struct tq_labview *lab;		/* labels per segment (labels.c),
					   malloc'd, or NULL */
	int beyond_memory;		/* the file is larger than half the
					   memory this process may use: a
					   search asks for a query's lists
					   and candidates' originals ahead */
	/*
	 * IVF: the live rows of each list over all segments (listlive), and
	 * the same counts sorted ascending and summed (listsum[j]: the j + 1
	 * smallest lists), made by the first search that asks
	 * (tq_index_list_rows, index.c) and guarded there by a lock; NULL
	 * before, or without the memory.  listmade 1 once tried.
	 */
	uint64_t *listlive, *listsum;
	int listmade;
};

/*
 * IVF: the live rows of each of ix's lists, or NULL (no lists, or no
 * memory for them); made once, on the first call.
 */
const uint64_t *tq_index_list_rows(const struct tq_index *ix);
/*
 * IVF: the fewest lists that hold at least `rows` live rows whichever
 * they are (the smallest lists summed); nlist if all of them hold fewer,
 * 0 without the counts (tq_index_list_rows NULL).
 */
uint32_t tq_index_lists_holding(const struct tq_index *ix, uint64_t rows);
/*
 * The same from nl counts sorted ascending and summed (sum[j]: the j + 1
 * smallest): the fewest j + 1 with sum[j] >= rows, or nl.
 */
uint32_t tq_lists_holding(const uint64_t *sum, uint32_t nl, uint64_t rows);

/* The segment that holds row r of the row space (r < 32 nblocks). */
static inline const struct tq_part *
tq_part_of_row(const struct tq_index *ix, uint64_t r)
{
	uint32_t lo = 0, hi = ix->nparts;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (ix->parts[mid].row0 <= r)
			lo = mid;
		else
			hi = mid;
	}
	return &ix->parts[lo];
}

/* IVF: the first row of list L of segment p (L = nlist gives p->n). */
static inline uint64_t tq_list_off(const struct tq_part *p, uint32_t l)
{
	return rd_le64(p->list + 8 * (size_t)l);
}

/*
 * IVF: the list of segment p's local row r (r < p->n): the last list
 * whose first row is at or before r.
 */
static inline uint32_t tq_list_of_row(const struct tq_part *p, uint32_t nlist,
    uint64_t r)
{
	uint32_t lo = 0, hi = nlist;

	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (tq_list_off(p, mid) <= r)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * The centre segment p's local row r was encoded about, and its |c|^2 in
 * *cc: the quantizer's (whose |c|^2 the caller gives, cc_centre), or with
 * residual codes the row's list's centroid (IVFC's, |c|^2 as a search
 * sums it).
 */
const float *tq_row_centre(const struct tq_quantizer *q,
    const struct tq_part *p, uint64_t r, double cc_centre, double *cc);

/* An allow-list: bit j of word b = row 32 b + j allowed (and live). */
struct tq_filter {
	const struct tq_index *ix;
	uint32_t *words;		/* nblocks */
	uint64_t count;
	/*
	 * IVF: the rows it allows in each list (lcount), and the same
	 * sorted ascending and summed (lsum), as struct tq_index's listlive
	 * and listsum for the live rows.
	 */
	uint64_t *lcount, *lsum;
};

/* Bit j of the result: row 32 b + j of segment p (local b) is deleted. */
static inline uint32_t
tq_tomb_word(const struct tq_part *p, uint64_t b)
{
	uint64_t len = (p->n + 7) / 8, at = 4 * b;
	uint32_t w = 0;

	for (unsigned i = 0; i < 4 && at + i < len; i++)
		w |= (uint32_t)p->tomb[at + i] << (8 * i);
	return w;
}

/* The external id of local row r of segment p. */
static inline uint64_t tq_part_id(const struct tq_part *p, uint64_t r)
{
	return p->idw == 4 ? rd_le32(p->ids + 4 * r) : rd_le64(p->ids + 8 * r);
}

/* The external id of row r of the row space (a row, not padding). */
static inline uint64_t tq_index_id(const struct tq_index *ix, uint64_t r)
{
	const struct tq_part *p = tq_part_of_row(ix, r);

	return tq_part_id(p, r - p->row0);
}

/* Is local row r of segment p deleted? */
static inline int tq_part_dead(const struct tq_part *p, uint64_t r)
{
	return p->tomb != NULL && (p->tomb[r / 8] >> (r % 8) & 1);
}

/* Commits (commit.c). */
enum tq_status tq_lock_open(const char *path,
    const struct tq_build_params *p, int *fd);
void tq_lock_close(int fd);
/* A test hook: SIGKILLs the process at `where` if TQ_TEST_CRASH names it. */
enum tq_status tq_fault_point(const char *where);

/* ------------------------------------------------------------------------ */
/* Search internals                                                          */

/*
 * Per-query tables, in one of two forms, and the affine map back to the
 * float inner product <R q, yhat> ~= scale * sum + bias.
 *
 * Lookup form (3 bits: fields of 2 coordinates of 3 bits): for each
 * field f, `entries` (64) u8 values lut[f * entries + v]; the sum adds
 * one entry per field.
 *
 * Dot form (`dot`: 4 bits, 4-bit fields of 1 coordinate; the kernels
 * also take 2 and 4 coordinates of 2 and 1 bits): the query as int8,
 * r8[c] = round(rq[c] * (qmax / max |rq|)), ties to even (0 past dim),
 * and the quantizer's levels as integers in [0, lmax],
 * c7[v] = round((centroid[v] - centroid[0]) / sc) with
 * sc = (centroid[last] - centroid[0]) / lmax; qmax = lmax = 127.
 * The levels the sum stands for are chat[v] = sc' * c7[v] + off, with sc'
 * and off fitted to the centroids (search.c, tq_dot_grid; sc and
 * centroid[0] if the fit fails).  The sum is the exact int32 dot
 * product sum_c r8[c] * c7[code c], so with sq = max |rq| / qmax, scale =
 * sq * sc' and bias = sq * off * sum_c r8[c].  Products of int8
 * and u8 are what VNNI and AMX multiply natively.
 *
 * A field of P coordinates (P = `planes`) is read through P tables of 16
 * levels, lev[t * 16 + v] = c7[coordinate t's code in nibble v], and q8
 * holds r8 in the kernels' order: per four fields f .. f + 3 (f a
 * multiple of 4), P runs of four values, run t holding coordinate t of
 * each field: q8[f * P + 4 * t + i] = r8[(f + i) * P + t].  So every
 * kernel treats plane t of four fields as it treats four 4-bit fields.
 * A row has P * TQ_DOT_PAD-rounded nfields values, zero past the last
 * coordinate.
 *
 * The small form (1 and 2 bits: 4-bit fields of P = 4 coordinates of 1
 * bit or P = 2 of 2 bits) is both at once: the dot form with small
 * integers, lmax = last (the levels on a uniform grid: 0 and 1, or 0 to
 * 3) and qmax = TQ_LUT4_MAX / (P * lmax) (31 at 1 bit, 21 at 2), and
 * exact lookup tables made from them, so that the dot form's tile kernel
 * (AMX) can take batches and the lookup kernels single queries (and
 * batches elsewhere), with the same sums.  Field f's table is
 * lut[f * 16 + v] = o_f + sum over f's coordinates t of r8[t] *
 * lev[t * 16 + v], with o_f = lmax * sum over f's coordinates of
 * max(0, -r8): every entry lies in [0, P * qmax * lmax], within
 * TQ_LUT4_MAX, so two entries added fit a u8 (the AVX-512 lookup kernel
 * adds the entries of fields f and f + 4 before it widens them), and the
 * lookup sum is the dot sum plus dotoff = sum_f o_f.  The lookup sum is
 * the one keys take: a tile kernel's sums get dotoff added.  q8 (the dot
 * form's row) follows the tables in the same buffer; scale = sq * sc',
 * bias = sq * off * sum_c r8[c] - scale * dotoff.  (The
 * query's precision: about 6 and 5.4 bits a coordinate, and at 2 bits
 * the levels (0, 1.05, 1.95, 3) of the Lloyd-Max codebook become 0 to 3.
 * The top candidates are refined with float tables, so recall without
 * re-rank does not move; see tq(5) for what the roundings cost a re-rank.
 * The name r7 in older notes is r8 here.)
 *
 * err bounds |scale * sum + bias - <R q, yhat>| from the rounding alone,
 * for any codes.  rsd is that error's scale as a sum of terms of either
 * sign (the square root of the sum of the per-coordinate or per-field
 * worst cases squared), what the error-bounded re-rank takes z of; in
 * the dot and small forms INFINITY when the grid was not fitted.
 */
/*
 * Fits the dot and small forms' grid, chat[v] = sc * c7[v] + off, to
 * q's centroids over q->cellp (search.c).  Returns 0, and leaves *sc and
 * *off as they were, when it cannot.
 */
int tq_dot_grid(const struct tq_quantizer *q, const uint8_t *c7, float *sc,
    float *off);
/* The largest entry of a table of 4-bit fields (the small form). */
#define TQ_LUT4_MAX 127u

struct tq_lut {
	uint8_t *lut;		/* lookup: nfields * entries; dot: q8 */
	unsigned entries;	/* lookup form: 16 or 64 */
	int dot;		/* the dot form */
	unsigned planes;	/* dot form, small form: coordinates per field */
	float scale;
	float bias;
	float err;		/* the rounding's worst case, summed */
	float rsd;		/* its scale as a sum of independent terms */
	uint8_t lev[4 * 16];	/* dot form, small form: the levels, per plane */
	const int8_t *q8;	/* small form: the dot form's row, else NULL */
	uint32_t dotoff;	/* small form: lookup sum - dot sum */
};

/* The dot form's q8 has this many fields' values per plane, or more. */
#define TQ_DOT_PAD 64u
/*
 * Does quantizer q score through the dot form?  Only at 4 bits.  At 1
 * bit four planes cost a 512-bit kernel four times the lookup form's time
 * for one query (bench-kernels, "1-bit dot"), and at 2 bits two planes
 * cost 1.7 times (hot, "2-bit dot" against "2-bit"), so 1 and 2 bits take
 * the small form, whose lookup tables and dot row give the same sums.
 */
#define TQ_DOT_FORM(q) ((q)->field_bits == 4 && (q)->coords_per_field == 1)
/* Does q score through the small form? */
#define TQ_SMALL_FORM(q) ((q)->field_bits == 4 && (q)->coords_per_field >= 2)
/* Bytes of one query's q8 (dot form, and the small form's row). */
#define TQ_DOT_BYTES(q) (((size_t)(q)->nfields + TQ_DOT_PAD - 1) / \
	TQ_DOT_PAD * TQ_DOT_PAD * (q)->coords_per_field)
/*
 * Bytes tq_lut_build writes at t->lut: q8 (dot form); the tables and,
 * small form, q8 after them (at a multiple of 64 bytes: nfields is a
 * multiple of 4); or the tables alone.
 */
#define TQ_LUT_BYTES(q) (TQ_DOT_FORM(q) ? TQ_DOT_BYTES(q) : \
	((size_t)(q)->nfields << (q)->field_bits) + \
	(TQ_SMALL_FORM(q) ? TQ_DOT_BYTES(q) : 0))

/* Builds quantized tables from a rotated query (dim floats). */
void tq_lut_build(const struct tq_quantizer *q, const float *rq,
    struct tq_lut *t);

/*
 * The scan kernel: for nblocks consecutive blocks, writes 32 u32 sums per
 * block: acc[b*32 + j] = sum over fields f of lut[f*entries + field(b,j,f)].
 * Kernels differ only in speed: every kernel produces identical sums,
 * given 4-bit fields' entries of at most TQ_LUT4_MAX (the AVX-512 kernel
 * adds two of them in a byte).
 */
typedef void (*tq_scan_fn)(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned field_bits,
    const uint8_t *lut, uint32_t *acc);

void tq_scan_scalar(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned field_bits,
    const uint8_t *lut, uint32_t *acc);

/* Compiled with their own -m flags; called only when cpuid allows. */
void tq_scan_avx2(const uint8_t *blocks, size_t nblocks, size_t block_bytes,
    unsigned nfields, unsigned field_bits, const uint8_t *lut, uint32_t *acc);
void tq_scan_avx512(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned field_bits,
    const uint8_t *lut, uint32_t *acc);

/* The kernel chosen for this machine (TQ_ISA overrides). */
tq_scan_fn tq_scan_kernel(void);

/*
 * The dot form's kernel, for nq queries over the same blocks of 4-bit
 * fields of `planes` (1, 2 or 4) coordinates: for j < nq and block b,
 * acc[j * acc_stride + b * 32 + v] = the int32 (as u32 bits) sum over
 * fields f < nfields and planes t < planes of coordinate t's value,
 * q8[j * q8_stride + (f - f % 4) * planes + 4 * t + f % 4] (struct
 * tq_lut's order), times lev[t * 16 + field f of vector v].  Each q8 row
 * holds planes * (nfields rounded up to TQ_DOT_PAD) values, zero past the
 * last coordinate; nq >= 1.  |sum| <= 127 * 127 * 65536 < 2^31.  Every
 * kernel gives the same sums as tq_scand_scalar.
 */
typedef void (*tq_scand_fn)(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned planes, const int8_t *q8,
    size_t q8_stride, unsigned nq, const uint8_t *lev, uint32_t *acc,
    size_t acc_stride);
void tq_scand_scalar(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned planes, const int8_t *q8,
    size_t q8_stride, unsigned nq, const uint8_t *lev, uint32_t *acc,
    size_t acc_stride);
void tq_scand_avx2(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned planes, const int8_t *q8,
    size_t q8_stride, unsigned nq, const uint8_t *lev, uint32_t *acc,
    size_t acc_stride);
void tq_scand_avx512(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned planes, const int8_t *q8,
    size_t q8_stride, unsigned nq, const uint8_t *lev, uint32_t *acc,
    size_t acc_stride);
void tq_scand_amx(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, unsigned planes, const int8_t *q8,
    size_t q8_stride, unsigned nq, const uint8_t *lev, uint32_t *acc,
    size_t acc_stride);
/* The 4-bit kernels' transposition of 64 bytes of codes (scan_scalar.c). */
extern const uint8_t tq_transpose4x16[64];
/* May this process run AMX tile instructions?  Asks the kernel once. */
int tq_amx_usable(void);

/*
 * Several queries over the same 4-bit blocks: for j < nq, writes to
 * acc + j * acc_stride exactly what a tq_scan_fn writes to acc with
 * luts[j].  Only where sharing the code loads pays (AVX-512 takes up to
 * eight queries at a time, AVX2 two); NULL otherwise, and callers scan
 * query by query.  Tables 64-byte aligned scan fastest.
 */
typedef void (*tq_scan4x_fn)(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, const uint8_t *const *luts,
    unsigned nq, uint32_t *acc, size_t acc_stride);
void tq_scan4x_avx2(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, const uint8_t *const *luts,
    unsigned nq, uint32_t *acc, size_t acc_stride);
void tq_scan4x_avx512(const uint8_t *blocks, size_t nblocks,
    size_t block_bytes, unsigned nfields, const uint8_t *const *luts,
    unsigned nq, uint32_t *acc, size_t acc_stride);

/*
 * The estimated keys of a block's 32 rows from the kernel's sums acc and
 * the block's factors fs (TQ_NFACTORS rows of 32), higher better, with
 * a = acc + off (the small form's dotoff after its tile kernel, else 0):
 *   ip = fs0 * (scale * a + bias) + fs1 + qc
 *   key = ip, or for l2 -((qn2 - 2 ip) + fs2),
 * each operation rounded to float in that order (no fused multiply-add),
 * so every kernel gives the same bits.  Returns bit j set for key[j] >=
 * thr (never for a NaN).
 */
struct tq_keypar {
	float scale, bias, qc, qn2;
	int l2;
	uint32_t off;	/* added to every sum first (mod 2^32) */
	float qk;	/* compact factors: qc, or for l2 -|q - c|^2 */
};
typedef uint32_t (*tq_keys_fn)(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keys_scalar(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keys_avx2(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keys_avx512(const uint32_t *acc, const float *fs,
    const struct tq_keypar *p, float thr, float *key);
/*
 * The same from compact blocks, nblk of them in a row: block b's sums
 * acc + 32 b, its TQ_FACH_BLOCK bytes fh + b * TQ_FACH_BLOCK, its keys
 * into key + 32 b and the mask of those >= thr into above[b].  With
 * s = f16(s_j) * 2^E_j and t = f16(t_j) * 2^E_j (E clamped to -126 ..
 * 127, both products exact), a = acc + off,
 *   d = scale * a + bias, for l2 d = d + d
 *   key = qk + s * (d + t)
 * each operation rounded to float in that order.  A run of blocks per
 * call: one query's scan asks for the keys of each kernel call's blocks
 * at once, not block by block.
 */
typedef void (*tq_keysh_fn)(const uint32_t *acc, const uint8_t *fh,
    size_t nblk, const struct tq_keypar *p, float thr, float *key,
    uint32_t *above);
void tq_keysh_scalar(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above);
void tq_keysh_avx2(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above);
void tq_keysh_avx512(const uint32_t *acc, const uint8_t *fh, size_t nblk,
    const struct tq_keypar *p, float thr, float *key, uint32_t *above);
/*
 * A compact block decoded once for many queries: st[j] = s and
 * st[TQ_BLOCK + j] = t of row j, as tq_keysh_fn decodes them.
 */
typedef void (*tq_fachdec_fn)(const uint8_t *fh, float *st);
void tq_fachdec_scalar(const uint8_t *fh, float *st);
void tq_fachdec_avx2(const uint8_t *fh, float *st);
void tq_fachdec_avx512(const uint8_t *fh, float *st);
/* tq_keysh_fn from a decoded block st: the same keys, bit for bit. */
typedef uint32_t (*tq_keysd_fn)(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keysd_scalar(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keysd_avx2(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key);
uint32_t tq_keysd_avx512(const uint32_t *acc, const float *st,
    const struct tq_keypar *p, float thr, float *key);

/*
 * Fixed-order dot products (lib/kern/dot_scalar.c): y[i*ldy + o] =
 * <x row i, a row o> for n rows of x and the m rows of the row-major
 * m x k matrix a.  Every kernel gives the same bits.
 */
typedef void (*tq_dot_fn)(const float *x, size_t ldx, size_t n,
    const float *a, uint32_t m, uint32_t k, float *y, size_t ldy);
void tq_dot_portable(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy);
void tq_dot_sse2(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy);
void tq_dot_avx2(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy);
void tq_dot_avx512(const float *x, size_t ldx, size_t n, const float *a,
    uint32_t m, uint32_t k, float *y, size_t ldy);
/* The pieces of the order, shared by the kernels. */
float tq_dot_tail(float s, const float *x, const float *a, uint32_t j,
    uint32_t k);
float tq_dot_reduce16(const float *lanes);
/* The dot kernel of the chosen instruction set. */
tq_dot_fn tq_dot_kernel(void);

/*
 * The IVF list filter in bf16 (lib/kern/near_bf16.c).  row: a row of dim
 * floats rounded to bf16 (to nearest even, NaN kept, values below 2^-126
 * to zero), a pair a word, into k2 = ceil(dim / 2) words; *rn = |bf16(x)|,
 * *dn = |x - bf16(x)| (summed in double, in some order).  gemm: for m rows
 * (each k2 words) and nl lists in blocks of 16 (cent: nl / 16 blocks of
 * k2 64-byte vectors, word j of vector k the pair k of list j; 64-byte
 * aligned), s[i * lds + o] = <x_i, c_o> as vdpbf16ps sums it (float
 * lanes, in an order that is not the fixed one: the filter's bound covers
 * any).  m must be a multiple of TQ_BF16_ROWS and nl of TQ_BF16_LISTS.
 * gemv: the same for one row, s[o] = <x, c_o> (another order of the sum,
 * also any); nl a multiple of TQ_BF16_LISTS.  gemv_rows: one row against
 * nl rows of dim bf16 stored one after another (c, any alignment; IVFC's
 * offsets as mapped), s[o] = <x, c_o> in any order, for s[0 .. nl - 1]
 * only.
 */
#define TQ_BF16_ROWS 6
#define TQ_BF16_LISTS 64
/* Rows and centroids of this norm or more keep sgemm (no overflow). */
#define TQ_BF16_MAX_NORM 0x1p60
struct tq_bf16_kernel {
	void (*row)(const float *x, uint32_t dim, uint32_t *out, double *rn,
	    double *dn);
	void (*gemm)(const uint32_t *x, size_t m, const void *cent,
	    uint32_t nl, uint32_t k2, float *s, size_t lds);
	void (*gemv)(const uint32_t *x, const void *cent, uint32_t nl,
	    uint32_t k2, float *s);
	void (*gemv_rows)(const uint32_t *x, const uint16_t *c, uint32_t nl,
	    uint32_t dim, float *s);
	/* What tq-inspect --cpu calls its many-row filter (list-filter). */
	const char *name;
};
void tq_bf16_row_avx512(const float *x, uint32_t dim, uint32_t *out,
    double *rn, double *dn);
void tq_bf16_gemm_avx512(const uint32_t *x, size_t m, const void *cent,
    uint32_t nl, uint32_t k2, float *s, size_t lds);
void tq_bf16_gemm_amx(const uint32_t *x, size_t m, const void *cent,
    uint32_t nl, uint32_t k2, float *s, size_t lds);
void tq_bf16_gemv_avx512(const uint32_t *x, const void *cent, uint32_t nl,
    uint32_t k2, float *s);
void tq_bf16_gemv_rows_avx512(const uint32_t *x, const uint16_t *c,
    uint32_t nl, uint32_t dim, float *s);
/* The same row and one-row products without AVX512_BF16 (near_fma.c). */
void tq_bf16_row_avx2(const float *x, uint32_t dim, uint32_t *out,
    double *rn, double *dn);
void tq_bf16_gemv_avx2(const uint32_t *x, const void *cent, uint32_t nl,
    uint32_t k2, float *s);
void tq_bf16_gemv_rows_avx2(const uint32_t *x, const uint16_t *c,
    uint32_t nl, uint32_t dim, float *s);
/*
 * Puts a row's k2 words (row NULL: zeros) as list o of gemm's blocks of
 * 16 lists (word k at block o / 16, vector k, lane o % 16).
 */
void tq_bf16_place(uint32_t *blocks, uint32_t k2, size_t o,
    const uint32_t *row);
/*
 * The bf16 filter of the chosen instruction set (AVX-512 with BF16), or
 * NULL: the filter is sgemm's.
 */
const struct tq_bf16_kernel *tq_bf16_kernel(void);
/*
 * The filter for one row at a time (gemv and row, gemm possibly NULL):
 * tq_bf16_kernel's, else, at a chosen level of AVX2 or above, the AVX2
 * and FMA products of near_fma.c; NULL under TQ_LIST_FILTER=sgemm or at
 * the scalar level.  TQ_LIST_FILTER=fma asks for near_fma.c's even where
 * there is AVX512_BF16 (for comparisons).
 */
const struct tq_bf16_kernel *tq_bf16_single_kernel(void);
/* near_fma.c's set where the CPU can run it, whatever is chosen; or NULL. */
const struct tq_bf16_kernel *tq_bf16_fma_kernel(void);

/*
 * A row times a block-diagonal matrix (lib/kern/dot_scalar.c): nb square
 * blocks of s x s, row-major and consecutive in a; for block b and column
 * j < s, x[b*s + j] = sum over o < s of y[b*s + o] a[b*s*s + o*s + j],
 * accumulated from +0 in increasing o with a separate multiply and add.
 * Each output is one chain in that order, so any vectorisation across
 * columns or blocks gives the same bits; every kernel does.
 */
typedef void (*tq_rowa_fn)(const float *y, const float *a, uint32_t nb,
    uint32_t s, float *x);
void tq_rowa_portable(const float *y, const float *a, uint32_t nb,
    uint32_t s, float *x);
void tq_rowa_sse2(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x);
void tq_rowa_avx2(const float *y, const float *a, uint32_t nb, uint32_t s,
    float *x);
void tq_rowa_avx512(const float *y, const float *a, uint32_t nb,
    uint32_t s, float *x);
/*
 * One block of rowa for n rows: for row i < n, x + i * ldx gets what
 * tq_rowa_fn gives for y + i * ldy, a, one block of s, bit for bit.
 */
typedef void (*tq_rowa_rows_fn)(const float *y, size_t ldy, const float *a,
    size_t n, uint32_t s, float *x, size_t ldx);
void tq_rowa_rows_avx512(const float *y, size_t ldy, const float *a,
    size_t n, uint32_t s, float *x, size_t ldx);
void tq_rowa_rows_avx2(const float *y, size_t ldy, const float *a,
    size_t n, uint32_t s, float *x, size_t ldx);

/*
 * Half-precision rows to float: dst[i] = the binary16 value of the
 * little-endian src[2i .. 2i + 1], exactly (every binary16 value is a
 * float).  Kernels agree bit for bit except in the payload of a NaN.
 */
typedef void (*tq_f16_fn)(const uint8_t *src, size_t n, float *dst);
void tq_f16_portable(const uint8_t *src, size_t n, float *dst);
void tq_f16_avx2(const uint8_t *src, size_t n, float *dst);
void tq_f16_avx512(const uint8_t *src, size_t n, float *dst);

/*
 * Exact keys against f16 originals: key[t] = tq_exact_key(metric, qv, x_t,
 * dim) for x_t the binary16 row rows[t] (little-endian, as stored),
 * converted on the fly (exactly, as by the f16 kernels) and summed in the
 * same double lanes, so the bits are those of tq_exact_key.  Several rows
 * at once give the adds of several lane chains to overlap.
 */
typedef void (*tq_keyf16_fn)(enum tq_metric metric, const float *qv,
    const uint8_t *const *rows, unsigned n, uint32_t dim, float *key);
void tq_keyf16_avx2(enum tq_metric metric, const float *qv,
    const uint8_t *const *rows, unsigned n, uint32_t dim, float *key);
void tq_keyf16_avx512(enum tq_metric metric, const float *qv,
    const uint8_t *const *rows, unsigned n, uint32_t dim, float *key);

/*
 * Dot products with dequantized rows of 4-bit fields (the refinement of
 * lib/search.c): for t < n, dot[t] = tq_dot_lanes(rq[t], y_t, dim), bit
 * for bit, where y_t[d] = cent[code of coordinate d] for the row at
 * position pos[t] (< TQ_BLOCK) of the block that starts at blk[t], in the
 * blocked layout with 4-bit fields (bits 1, 2 or 4: 4 / bits coordinates
 * a field, coordinate e of a field at bit e * bits of its nibble).  cent
 * holds 16 floats, of which the first 2^bits are read as centroids.  The
 * kernels read only the fields that hold coordinates below dim, and of
 * those only whole aligned 64-byte groups of four fields (a block's
 * fields are padded to a multiple of four).
 */
typedef void (*tq_dotq4_fn)(const float *const *rq,
    const uint8_t *const *blk, const unsigned *pos, unsigned n,
    uint32_t dim, unsigned bits, const float *cent, double *dot);
void tq_dotq4_portable(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot);
void tq_dotq4_avx2(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot);
void tq_dotq4_avx512(const float *const *rq, const uint8_t *const *blk,
    const unsigned *pos, unsigned n, uint32_t dim, unsigned bits,
    const float *cent, double *dot);

/* The kernels of one instruction set, chosen once (TQ_ISA overrides). */
struct tq_kernels {
	const char *name;
	tq_scan_fn scan;
	tq_dot_fn dot;
	tq_f16_fn f16;
	tq_scan4x_fn scan4x;	/* NULL: scan query by query */
	tq_keys_fn keys;
	tq_keysh_fn keysh;	/* the same from compact factors */
	tq_scand_fn scand;	/* the dot form, one query or few */
	/*
	 * The dot form for a tile of up to 16 queries (AMX), or NULL: scand
	 * serves tiles too.
	 */
	tq_scand_fn scand_tile;
	tq_rowa_fn rowa;	/* structured rotations */
	/* Re-rank against f16 originals; NULL: tq_f16_fn and tq_exact_key. */
	tq_keyf16_fn keyf16;
	tq_dotq4_fn dotq4;	/* the refinement's 4-bit rows */
	/* One block of a structured rotation for many rows, or NULL. */
	tq_rowa_rows_fn rowa_rows;
	tq_fachdec_fn fachdec;	/* a compact block decoded for keysd */
	tq_keysd_fn keysd;	/* keysh's keys from a decoded block */
	/*
	 * 1: scand reads codes streamed from memory faster than scan does
	 * (2-bit fields), so single queries scanning that much take it
	 * (search.c, stream_dot).
	 */
	int stream_dot;
};
const struct tq_kernels *tq_kernels(void);

/*
 * k * o rounded up, o as the user wrote it: a float such as 1.1f is a
 * little more than 1.1, and k * 1.1f rounded up would be 12 for k = 10.
 * Whatever lies within a millionth above a whole number is taken for it
 * (a float is within 2^-24 of a decimal that fits it).
 */
static inline double
tq_k_times(uint32_t k, double o)
{
	double x = (double)k * o;

	return ceil(x - x * 0x1p-20);
}

/* Bytes of one stored original of dim coordinates (0 without originals). */
static inline size_t
tq_orig_bytes(enum tq_originals o, uint32_t dim)
{
	return o == TQ_ORIG_F16 ? 2 * (size_t)dim : o == TQ_ORIG_F32 ?
	    4 * (size_t)dim : 0;
}

/*
 * The ORIG entry of local row r of segment p.  An OMAP entry past the
 * segment's originals (only a hostile file has one) reads as the last,
 * so that no read leaves the section; tq_file_verify (maps_check in
 * index.c) and rewrites (orig_old) refuse it.
 */
static inline uint64_t
tq_part_orig_index(const struct tq_part *p, uint64_t r)
{
	uint64_t j;

	if (p->omap == NULL)
		return r;
	j = rd_le32(p->omap + 4 * r);
	return j < p->norig ? j : p->norig - 1;
}

/* The stored original of local row r of segment p, ob bytes. */
static inline const uint8_t *
tq_part_orig(const struct tq_part *p, uint64_t r, size_t ob)
{
	return p->orig + tq_part_orig_index(p, r) * ob;
}

/*
 * A stored original (tq(5) ORIG: dim f32 or f16, little-endian) at src as
 * floats, f16 through the kernels' exact conversion k->f16.
 */
static inline void
tq_orig_row(const struct tq_kernels *k, enum tq_originals o,
    const uint8_t *src, uint32_t dim, float *out)
{
	if (o == TQ_ORIG_F16) {
		k->f16(src, dim, out);
		return;
	}
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	/*
	 * The stored bytes are the floats: one memcpy, not a load a
	 * coordinate (gcc does not vectorise the loop below at -O2).
	 */
	memcpy(out, src, 4 * (size_t)dim);
#else
	for (uint32_t d = 0; d < dim; d++)
		out[d] = rd_lef32(src + 4 * (size_t)d);
#endif
}

/*
 * tq_search with refine * k candidates re-scored by the float tables
 * when there is no re-rank (tq_search takes 4; search.c).  fill 0: an IVF
 * query scans its probes alone, however few rows they hold (the
 * calibration, whose one search of many candidates stands for every k it
 * measures); 1: and the next nearest lists until they hold k rows, as
 * tq_search does (tq_search_params.probes).
 */
enum tq_status tq_search_refine(const struct tq_index *ix,
    const float *queries, size_t nq, const struct tq_search_params *p,
    unsigned refine, int fill, uint64_t *ids, float *scores);

/*
 * The exact key of query vector qv against row x, higher better (l2: minus
 * the squared distance), summed in double: coordinate d in lane d % 8,
 * the eight lanes added pairwise at the end.  Ground truth and re-rank
 * use this one function, so they agree bit for bit.
 */
float tq_exact_key(enum tq_metric m, const float *qv, const float *x,
    uint32_t dim);
/*
 * tq_exact_search over any source of rows: next() fills up to max rows
 * (dim floats each) and sets *got (0 at the end) and *rowid to the ids
 * the rows get in the results (NULL: their numbers in the order given).
 */
typedef enum tq_status (*tq_exact_next_fn)(void *arg, float *x, size_t max,
    size_t *got, const uint64_t **rowid);
enum tq_status tq_exact_source(tq_exact_next_fn next, void *arg,
    enum tq_metric m, const float *queries, size_t nq, uint32_t dim,
    uint32_t k, unsigned threads, uint64_t *ids, float *scores);
/* sum a[d] * b[d] in double, in the lanes of tq_exact_key. */
double tq_dot_lanes(const float *a, const float *b, uint32_t dim);

/*
 * The error-bounded re-rank's interval (lib/bound.c, tq(5) "Error
 * bound"): the squared distances D that an estimate in [dlo, dhi] allows
 * when |estimate - D| <= sqrt((a min(qn, sqrt(D)))^2 + u^2), into
 * [*lo, *hi].
 */
void tq_bound_dist(double dlo, double dhi, double a, double qn, double u,
    double *lo, double *hi);

/*
 * A bounded top-k of (key, id): higher key better, ties smaller id.  A
 * heap (tq_topk_init) holds the k best so far, its worst at index 0.  A
 * lazy one (tq_topk_init_lazy) appends what beats its threshold to room
 * for about 2k and, when that is full, keeps the k best: between those
 * selections it may hold more than k, some no longer among the best, and
 * tq_topk_settle leaves the k best.  Both: once full is set, (thr,
 * thr_id) is the worst entry there is reason to keep, and what is not
 * better than it is not taken.
 */
struct tq_topk {
	uint32_t k, len;
	float *key;
	uint64_t *id;
	uint32_t cap;		/* entries allocated: k, or more (lazy) */
	int full;
	float thr;
	uint64_t thr_id;
};
enum tq_status tq_topk_init(struct tq_topk *h, uint32_t k);
/*
 * A lazy top-k (k >= 1; k = 0 gives a heap).  Its room for about 2k
 * doubles the memory: a worker holds a top-k for each of up to 256
 * queries of a tile, 6 MB at k = 1024 (a heap, 3 MB), so search.c takes
 * it where the tables' count times k is at most TQ_TOPK_LAZY_ROOM.
 */
#define TQ_TOPK_LAZY_ROOM (256u * 1024u)
enum tq_status tq_topk_init_lazy(struct tq_topk *h, uint32_t k);
/* Leaves the k best in [0, len), in no order. */
void tq_topk_settle(struct tq_topk *h);
void tq_topk_free(struct tq_topk *h);
void tq_topk_reset(struct tq_topk *h);
/* Inserts if it belongs in the top k. */
void tq_topk_push(struct tq_topk *h, float key, uint64_t id);
/* Would (key, id) enter the heap? */
int tq_topk_admits(const struct tq_topk *h, float key, uint64_t id);
/* Sorts best first in place (the heap property is lost; lazy: settled). */
void tq_topk_sort(struct tq_topk *h);

#endif /* TQ_INTERNAL_H */
