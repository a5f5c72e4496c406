/* labels.h - tq-search's queries given as labels, and labels printed. */
#ifndef CMD_LABELS_H
#define CMD_LABELS_H

#include "common.h"

/*
 * The queries of --like (labels given as arguments) or --like-file (one a
 * line): every label is looked up before any search, so that an unknown
 * one fails the run with no output.
 */
struct like {
	size_t n;
	float *vec;		/* n * dim */
	uint64_t *id;		/* the rows the queries came from */
	size_t next;		/* queries handed out so far */
};

void like_args(struct like *lk, const struct tq_index *ix, const char *ixpath,
    char **labels, int n);
void like_file(struct like *lk, const struct tq_index *ix, const char *ixpath,
    const char *path);
/* Up to max queries into q (max * dim floats); 0 at the end. */
size_t like_next(struct like *lk, uint32_t dim, float *q, size_t max);
void like_free(struct like *lk);

/*
 * The label of id as a tsv field (a tab or carriage return printed as a
 * space) or a JSON string (bytes that are not UTF-8 as U+FFFD).
 */
void label_tsv(struct out *o, const struct tq_index *ix, const char *ixpath,
    uint64_t id);
void label_json(struct out *o, const struct tq_index *ix, const char *ixpath,
    uint64_t id);

#endif /* CMD_LABELS_H */
