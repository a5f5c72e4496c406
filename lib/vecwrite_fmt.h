/*
 * vecwrite_fmt.h - the private interface between the writer core
 * (vecio.c: temporary file, spool, fsync, rename) and the per-format
 * encoders of vecwrite_fmt.c.  Not installed.
 *
 * The core owns the bytes' destination; a format only says what its
 * header is and turns rows into bytes through a put callback.
 */
#ifndef TQ_VECWRITE_FMT_H
#define TQ_VECWRITE_FMT_H

#include <stddef.h>
#include <stdint.h>

#include "tq.h"

/* Largest header of any format (the npy header is 128 bytes). */
#define TQ_WFMT_HEADER_MAX 128u

/* 1 if fmt is a format tq_writer_open() accepts. */
int tq_wfmt_known(enum tq_vecfmt fmt);
/* 1 if the header holds the row count (fixture, npy): such a format of
   unknown count is spooled on a pipe and patched in place in a file. */
int tq_wfmt_counted(enum tq_vecfmt fmt);
/* 1 for the text formats (text, tsv, csv, .vec). */
int tq_wfmt_is_text(enum tq_vecfmt fmt);
/* 1 for the formats that take labels: the text ones and word2vec. */
int tq_wfmt_labels(enum tq_vecfmt fmt);
/* 1 for the formats whose rows must have labels (word2vec, .vec). */
int tq_wfmt_needs_labels(enum tq_vecfmt fmt);
/* 1 if the header's length depends on the count ("n dim\n" of word2vec
   and .vec): with the count unknown the rows are always spooled. */
int tq_wfmt_headed(enum tq_vecfmt fmt);
/* Rows at most, or UINT64_MAX: a fixture counts in a u32. */
uint64_t tq_wfmt_max_rows(enum tq_vecfmt fmt);

/*
 * Writes the header for dim and n rows into hdr[TQ_WFMT_HEADER_MAX] and
 * returns its length (0: the format has none).  The length does not
 * depend on n, so a header written with a provisional count can be
 * overwritten in place once the count is known.
 */
size_t tq_wfmt_header(enum tq_vecfmt fmt, uint32_t dim, uint64_t n,
    uint8_t *hdr);

typedef enum tq_status (*tq_wput_fn)(void *ctx, const void *p, size_t n);

/*
 * Checks and encodes n rows of dim floats (row0 is the number of the first,
 * for failure details) for the rows vecio.c does not copy itself: the
 * text formats, bvecs, and ivecs given floats.  `labels` (text formats
 * only) is NULL or n strings.  Everything is checked before the first
 * byte is put, so a failed call writes nothing.
 */
enum tq_status tq_wfmt_rows(enum tq_vecfmt fmt, uint32_t dim,
    const float *rows, const char *const *labels, size_t n, uint64_t row0,
    tq_wput_fn put, void *ctx);

#endif /* TQ_VECWRITE_FMT_H */
