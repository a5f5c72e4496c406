/*
 * calib.h - the calibration of an index for a recall target (tq(5) CALB),
 * between calib.c and index.c.  Not installed.
 */
#ifndef TQ_CALIB_H
#define TQ_CALIB_H

#include "internal.h"

#define TQ_TAG_CALB TQ_TAG('C', 'A', 'L', 'B')
#define TQ_CALB_HEADER 64u
#define TQ_CALB_ENTRY 24u
#define TQ_CALB_MAXK 8u
#define TQ_CALB_MAXP 64u
#define TQ_CALB_MAXO 32u

/*
 * Checks the CALB section of ix, if it has one, against its layout and
 * the index (the probes against the lists); called by the open.
 */
enum tq_status tq_calib_check(const struct tq_index *ix);

/*
 * Measures the calibration of ix (tq_index_calibrate) into a malloc'd
 * payload *buf of *len bytes, to be committed as CALB.
 */
enum tq_status tq_calib_compute(const struct tq_index *ix,
    const struct tq_calib_params *cp, uint8_t **buf, size_t *len);

/*
 * The room, in candidates per result, that the error-bounded re-rank of
 * ix starts with at k results and the given resolved probes (0 for a
 * flat index): TQ_AUTO_CAP, or TQ_AUTO_WIDEN times it where the
 * calibration shows recall still rising at the cap (tq(5) CALB).
 */
unsigned tq_calib_auto_cap(const struct tq_index *ix, uint32_t k,
    uint32_t probes);

#endif /* TQ_CALIB_H */
