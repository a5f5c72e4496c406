/*
 * ids.c - external ids: a text file of one unsigned decimal integer per
 * line, or, when the name ends in ".u64", raw little-endian uint64; either
 * may be zstd-compressed.  Read through the byte source of the reader
 * core, so standard input, pipes and process substitution work; nothing
 * here needs to read a file twice.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

struct tq_ids_reader {
	struct tq_src src;
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
	tq_src_init(&r->src);
	r->line = 1;
	r->left = TQ_RD_UNKNOWN;
	r->raw = strcmp(path, "-") != 0 && tq_has_ext(path, ".u64");
	st = tq_src_open(&r->src, path);
	if (st == TQ_OK)
		st = tq_src_fill(&r->src, 4);
	if (st == TQ_OK && tq_is_zstd(tq_src_ptr(&r->src), tq_src_avail(&r->src)))
		st = tq_src_start_zstd(&r->src);
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
	struct tq_src *s = &r->src;
	size_t done = 0, k, i;

	while (done < max) {
		TQ_TRY(tq_src_fill(s, 8));
		if (tq_src_avail(s) < 8) {
			if (tq_src_avail(s) != 0)
				return tq_fail(TQ_ERR_FORMAT, "truncated: %zu "
				    "trailing bytes (u64 ids)", tq_src_avail(s));
			r->ended = 1;
			break;
		}
		k = tq_src_avail(s) / 8;
		if (k > max - done)
			k = max - done;
		for (i = 0; i < k; i++)
			ids[done + i] = rd_le64(tq_src_ptr(s) + 8 * i);
		tq_src_consume(s, 8 * k);
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
	struct tq_src *s = &r->src;
	size_t done = 0;

	while (done < max) {
		const uint8_t *p, *end;

		TQ_TRY(tq_src_fill(s, 1));
		if (tq_src_avail(s) == 0) {
			/* The last line may lack its newline. */
			if (r->digits > 0 || r->cr)
				TQ_TRY(ids_emit(r, &ids[done++]));
			r->ended = 1;
			break;
		}
		p = tq_src_ptr(s);
		end = p + tq_src_avail(s);
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
		tq_src_consume(s, (size_t)(p - tq_src_ptr(s)));
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
	if (r->left != TQ_RD_UNKNOWN && max > r->left)
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
	} else if (r->left != TQ_RD_UNKNOWN) {
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

	if (r->left != TQ_RD_UNKNOWN)
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
	tq_src_init(&r->src);
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
	tq_src_close(&r->src);
	free(r);
}
