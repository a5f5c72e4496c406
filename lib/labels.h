/*
 * labels.h - the labels of an index (tq(5) LABL), between labels.c and
 * index.c.  Not installed.
 */
#ifndef TQ_LABELS_H
#define TQ_LABELS_H

#include "internal.h"

#define TQ_TAG_LABL TQ_TAG('L', 'A', 'B', 'L')
#define TQ_LABL_HEADER 32u

/* The LABL section of one segment, checked by tq_labels_bind. */
struct tq_labview {
	unsigned w;			/* 4 or 8 */
	uint64_t n, t;			/* rows, label bytes */
	const uint8_t *off;		/* n + 1 integers */
	const uint8_t *bylab;		/* n rows sorted by label */
	const uint8_t *byid;		/* n rows sorted by id */
	const uint8_t *text;		/* t bytes */
};

/*
 * Binds the LABL section of every segment of ix (ix->lab, NULL when the
 * index has none), checking its header, length and offsets.
 */
enum tq_status tq_labels_bind(struct tq_index *ix);

/*
 * The labels of a build, an append or a rewrite: the labels of the new
 * rows (numbered from 0 in input order) and, for a rewrite, those of the
 * old index's rows, placed row by row in the chunk being written (slots
 * numbered like the chunk's rows) and gathered, in output order, into the
 * labels section of the new segment.
 */
struct tq_labbuild;

/*
 * *out = NULL when neither the parameters ask for labels nor `old` (the
 * index appended to or rewritten, or NULL) has them.  A labels file is
 * read whole here.  `beside` names the output, next to which temporary
 * files go; `chunk` is the number of chunk slots.
 */
enum tq_status tq_lab_begin(const struct tq_build_params *p,
    struct tq_reader *corpus, const struct tq_index *old,
    const char *beside, size_t chunk, struct tq_labbuild **out);
void tq_lab_free(struct tq_labbuild *lb);
/* The labels of the `got` rows the corpus reader just gave (auto). */
enum tq_status tq_lab_input(struct tq_labbuild *lb, struct tq_reader *r,
    size_t got);
/* Given labels must number the n rows of the corpus. */
enum tq_status tq_lab_count_check(const struct tq_labbuild *lb, uint64_t n);
/* Slot `at` holds new row k's label. */
void tq_lab_new(struct tq_labbuild *lb, size_t at, uint64_t k);
/* The new row whose label slot `at` holds. */
uint64_t tq_lab_new_of(const struct tq_labbuild *lb, size_t at);
/* Slots at .. at + len - 1 hold local rows r .. r + len - 1 of segment p. */
void tq_lab_old(struct tq_labbuild *lb, const struct tq_part *p, uint64_t r,
    size_t len, size_t at);
/* The first `rows` slots go out, with the ids of those rows (LE u64). */
enum tq_status tq_lab_chunk(struct tq_labbuild *lb, size_t rows,
    const uint8_t *idbuf);
/* Writes the LABL section of the rows that went out, as part `part`. */
enum tq_status tq_lab_write(struct tq_labbuild *lb, struct tq_filewriter *fw,
    uint32_t part);

#endif /* TQ_LABELS_H */
