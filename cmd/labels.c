/* labels.c - tq-search's queries given as labels, and labels printed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"

static void
like_add(struct like *lk, const struct tq_index *ix, const char *ixpath,
    const char *label, size_t len, size_t *cap)
{
	uint32_t dim = tq_quantizer_dim(tq_index_quantizer(ix));
	enum tq_status st;
	int found;

	if (lk->n == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		float *v;
		uint64_t *id;

		if ((v = realloc(lk->vec, c * dim * sizeof(*v))) == NULL)
			die("out of memory");
		lk->vec = v;
		if ((id = realloc(lk->id, c * sizeof(*id))) == NULL)
			die("out of memory");
		lk->id = id;
		*cap = c;
	}
	st = tq_index_like(ix, label, len, &found, &lk->id[lk->n],
	    lk->vec + lk->n * dim);
	if (st != TQ_OK)
		die_status(st, ixpath);
	if (!found)
		die("%s: unknown label '%.*s'", ixpath, len > 200 ? 200 :
		    (int)len, label);
	lk->n++;
}

void
like_args(struct like *lk, const struct tq_index *ix, const char *ixpath,
    char **labels, int n)
{
	size_t cap = 0;

	memset(lk, 0, sizeof(*lk));
	for (int i = 0; i < n; i++) {
		if (labels[i][0] == '\0')
			usage_error("an empty label");
		like_add(lk, ix, ixpath, labels[i], strlen(labels[i]), &cap);
	}
}

void
like_file(struct like *lk, const struct tq_index *ix, const char *ixpath,
    const char *path)
{
	struct tq_labels_reader *r;
	enum tq_status st;
	size_t cap = 0, len, n = 0, ncap = 0, i;
	const char *s;
	/*
	 * Static, so that what it holds stays reachable when a failure
	 * exits from the middle (no leak reports under LeakSanitizer).
	 */
	static char **all;

	/* The whole file first: a bad line is named before any lookup. */
	memset(lk, 0, sizeof(*lk));
	if ((st = tq_labels_open(path, &r)) != TQ_OK)
		die_status(st, in_name(path));
	for (;;) {
		if ((st = tq_labels_read(r, &s, &len)) != TQ_OK)
			die_status(st, in_name(path));
		if (s == NULL)
			break;
		if (n == ncap) {
			char **a;

			ncap = ncap ? 2 * ncap : 64;
			if ((a = realloc(all, ncap * sizeof(*a))) == NULL)
				die("out of memory");
			all = a;
		}
		if ((all[n++] = strdup(s)) == NULL)
			die("out of memory");
	}
	tq_labels_close(r);
	if (n == 0)
		die("%s: no labels", in_name(path));
	for (i = 0; i < n; i++)
		like_add(lk, ix, ixpath, all[i], strlen(all[i]), &cap);
	for (i = 0; i < n; i++)
		free(all[i]);
	free(all);
	all = NULL;
}

size_t
like_next(struct like *lk, uint32_t dim, float *q, size_t max)
{
	size_t m = lk->n - lk->next < max ? lk->n - lk->next : max;

	memcpy(q, lk->vec + lk->next * dim, m * dim * sizeof(*q));
	lk->next += m;
	return m;
}

void
like_free(struct like *lk)
{
	free(lk->vec);
	free(lk->id);
}

static const char *
label_of(const struct tq_index *ix, const char *ixpath, uint64_t id,
    size_t *len)
{
	const char *s;
	enum tq_status st;

	if ((st = tq_index_label(ix, id, &s, len)) != TQ_OK)
		die_status(st, ixpath);
	if (s == NULL)
		die("%s: section LABL: no label for id %llu", ixpath,
		    (unsigned long long)id);
	return s;
}

void
label_tsv(struct out *o, const struct tq_index *ix, const char *ixpath,
    uint64_t id)
{
	size_t len, i, j;
	const char *s = label_of(ix, ixpath, id, &len);

	for (i = 0; i < len; i = j + 1) {
		for (j = i; j < len && s[j] != '\t' && s[j] != '\r'; j++)
			;
		out_write(o, s + i, j - i);
		if (j < len)
			out_write(o, " ", 1);
	}
}

void
label_json(struct out *o, const struct tq_index *ix, const char *ixpath,
    uint64_t id)
{
	size_t len, i, k;
	const unsigned char *s = (const unsigned char *)label_of(ix, ixpath,
	    id, &len);

	out_write(o, "\"", 1);
	for (i = 0; i < len; i += k) {
		if ((k = utf8_len(s + i, len - i)) == 0) {
			out_printf(o, "\\ufffd");
			k = 1;
		} else if (s[i] == '"' || s[i] == '\\')
			out_printf(o, "\\%c", s[i]);
		else if (s[i] < 0x20 || s[i] == 0x7f)
			out_printf(o, "\\u%04x", s[i]);
		else
			out_write(o, s + i, k);
	}
	out_write(o, "\"", 1);
}
