/*
 * vecio_impl.h - the private interface between the vector readers
 * (vecio.c) and the HDF5 backend (vecio_hdf5.c).  Not installed.
 */
#ifndef TQ_VECIO_IMPL_H
#define TQ_VECIO_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tq.h"

/* The 8-byte signature of an HDF5 file at offset 0. */
#define TQ_HDF5_SIGNATURE "\x89HDF\r\n\x1a\n"

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

/* Reads a string attribute of the root group (also declared in tq.h). */
enum tq_status tq_hdf5_attr_string(const char *path, const char *name,
    char *buf, size_t len);

/*
 * Row checks and conversions shared by the backends (vecio.c).  `row0` is
 * the index of the first row, for the failure detail
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

#endif /* TQ_VECIO_IMPL_H */
