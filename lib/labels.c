/*
 * labels.c - labels of the rows of an index (tq(5) LABL): the labels file
 * reader, the section's checks on open, the lookups by label and by id,
 * and the gathering of a build's labels into the section.
 *
 * A build sees the labels of new rows in input order (from the corpus
 * reader, or a labels file read first) and writes rows in output order
 * (an IVF build by list; a rewrite mixes old rows in).  So the labels of
 * the new rows go to an unlinked temporary file (a "store": bytes in the
 * file, offsets in memory) as they are read; each chunk slot of the
 * build names where its row's label is (a new row's number, or an old
 * segment's row), and the slots of each chunk written are copied, in
 * output order, to a second store.  At the end that store is sorted
 * twice (by label, by id) and written as the section: memory is the
 * offsets of both stores, the ids, an order and the sort's buffer, about
 * 40 bytes a row, and the stores' bytes are mapped.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "labels.h"
#include "reader_impl.h"

typedef unsigned long long ull;

/* ------------------------------------------------------------------------ */
/* The labels file                                                           */

struct tq_labels_reader {
	struct tq_src src;
	uint64_t line;		/* the next line, from 1 */
	char *buf;		/* the label given last */
	enum tq_status failed;
};

enum tq_status
tq_labels_open(const char *path, struct tq_labels_reader **out)
{
	struct tq_labels_reader *r;
	enum tq_status st;

	*out = NULL;
	if (path == NULL || *path == '\0')
		return tq_fail(TQ_ERR_ARG, "no labels file name");
	if ((r = calloc(1, sizeof(*r))) == NULL ||
	    (r->buf = malloc(TQ_LABEL_MAX + 2)) == NULL) {
		free(r);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	tq_src_init(&r->src);
	r->line = 1;
	st = tq_src_open(&r->src, path);
	if (st == TQ_OK)
		st = tq_src_fill(&r->src, 4);
	if (st == TQ_OK && tq_is_zstd(tq_src_ptr(&r->src),
	    tq_src_avail(&r->src)))
		st = tq_src_start_zstd(&r->src);
	if (st != TQ_OK) {
		tq_labels_close(r);
		return st;
	}
	*out = r;
	return TQ_OK;
}

static enum tq_status
labels_line(struct tq_labels_reader *r, const char **label, size_t *len)
{
	struct tq_src *s = &r->src;
	const uint8_t *p, *nl;
	size_t n, eol;

	*label = NULL;
	*len = 0;
	/* A line is at most the longest label, a CR and the newline. */
	TQ_TRY(tq_src_fill(s, TQ_LABEL_MAX + 2));
	if (tq_src_avail(s) == 0)
		return TQ_OK;
	p = tq_src_ptr(s);
	n = tq_src_avail(s) < TQ_LABEL_MAX + 2 ? tq_src_avail(s) :
	    TQ_LABEL_MAX + 2;
	if ((nl = memchr(p, '\n', n)) != NULL) {
		n = (size_t)(nl - p);
		eol = 1;
	} else if (n == tq_src_avail(s) && n <= TQ_LABEL_MAX + 1)
		eol = 0;	/* the last line, without its newline */
	else
		return tq_fail(TQ_ERR_FORMAT, "line %llu: label longer than "
		    "%u bytes", (ull)r->line, TQ_LABEL_MAX);
	tq_src_consume(s, n + eol);
	if (n > 0 && p[n - 1] == '\r')
		n--;
	if (n == 0)
		return tq_fail(TQ_ERR_FORMAT, "line %llu: empty label",
		    (ull)r->line);
	if (n > TQ_LABEL_MAX)
		return tq_fail(TQ_ERR_FORMAT, "line %llu: label longer than "
		    "%u bytes", (ull)r->line, TQ_LABEL_MAX);
	if (memchr(p, '\0', n) != NULL)
		return tq_fail(TQ_ERR_FORMAT, "line %llu: NUL byte",
		    (ull)r->line);
	memcpy(r->buf, p, n);
	r->buf[n] = '\0';
	r->line++;
	*label = r->buf;
	*len = n;
	return TQ_OK;
}

enum tq_status
tq_labels_read(struct tq_labels_reader *r, const char **label, size_t *len)
{
	enum tq_status st;

	*label = NULL;
	*len = 0;
	if (r->failed != TQ_OK)
		return tq_fail(r->failed, "an earlier read failed");
	if ((st = labels_line(r, label, len)) != TQ_OK) {
		*label = NULL;
		r->failed = st;
	}
	return st;
}

void
tq_labels_close(struct tq_labels_reader *r)
{
	if (r == NULL)
		return;
	tq_src_close(&r->src);
	free(r->buf);
	free(r);
}

/* ------------------------------------------------------------------------ */
/* The section in an open index                                              */

static inline uint64_t
rd_w(const uint8_t *p, unsigned w, uint64_t i)
{
	return w == 4 ? rd_le32(p + 4 * i) : rd_le64(p + 8 * i);
}

static enum tq_status
view_bind(const struct tq_part *p, unsigned seg, const uint8_t *sec,
    uint64_t len, struct tq_labview *v)
{
	uint64_t want, prev;

	if (len < TQ_LABL_HEADER)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: "
		    "length %llu", seg, (ull)len);
	v->w = rd_le32(sec);
	v->n = rd_le64(sec + 8);
	v->t = rd_le64(sec + 16);
	if ((v->w != 4 && v->w != 8) || rd_le32(sec + 4) != 0 ||
	    rd_le64(sec + 24) != 0)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: bad "
		    "header", seg);
	if (v->n != p->n)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: %llu "
		    "labels for %llu rows", seg, (ull)v->n, (ull)p->n);
	if (ck_mul64(v->n, 3, &want) || ck_add64(want, 1, &want) ||
	    ck_mul64(want, v->w, &want) ||
	    ck_add64(want, TQ_LABL_HEADER, &want) ||
	    ck_add64(want, v->t, &want) || want != len)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: "
		    "length %llu does not match its header", seg, (ull)len);
	v->off = sec + TQ_LABL_HEADER;
	v->bylab = v->off + (size_t)(v->n + 1) * v->w;
	v->byid = v->bylab + (size_t)v->n * v->w;
	v->text = v->byid + (size_t)v->n * v->w;
	if (rd_w(v->off, v->w, 0) != 0 || rd_w(v->off, v->w, v->n) != v->t)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: "
		    "offsets do not span the text", seg);
	prev = 0;
	for (uint64_t i = 1; i <= v->n; i++) {
		uint64_t o = rd_w(v->off, v->w, i);

		if (o <= prev || o - prev > TQ_LABEL_MAX)
			return tq_fail(TQ_ERR_FORMAT, "segment %u: section "
			    "LABL: label %llu is %s", seg, (ull)(i - 1),
			    o <= prev ? "empty or out of order" :
			    "longer than 4096 bytes");
		prev = o;
	}
	return TQ_OK;
}

enum tq_status
tq_labels_bind(struct tq_index *ix)
{
	uint32_t with = 0;

	ix->lab = NULL;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		uint64_t len;
		uint32_t part = ix->file.version >= 2 ? s + 1 : 0;

		if (tq_file_part(&ix->file, part, TQ_TAG_LABL, &len) != NULL)
			with++;
	}
	if (with > 0 && with < ix->nparts)
		return tq_fail(TQ_ERR_FORMAT, "section LABL: %u of %u "
		    "segments have labels", with, ix->nparts);
	if (with == 0)
		return TQ_OK;
	if ((ix->lab = calloc(ix->nparts, sizeof(*ix->lab))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	for (uint32_t s = 0; s < ix->nparts; s++) {
		uint64_t len;
		uint32_t part = ix->file.version >= 2 ? s + 1 : 0;
		const uint8_t *sec = tq_file_part(&ix->file, part, TQ_TAG_LABL,
		    &len);

		TQ_TRY(view_bind(&ix->parts[s], s, sec, len, &ix->lab[s]));
	}
	return TQ_OK;
}

int
tq_index_has_labels(const struct tq_index *ix)
{
	return ix->lab != NULL;
}

/* Label of local row r (checked by view_bind). */
static inline const uint8_t *
view_label(const struct tq_labview *v, uint64_t r, size_t *len)
{
	uint64_t o = rd_w(v->off, v->w, r);

	*len = (size_t)(rd_w(v->off, v->w, r + 1) - o);
	return v->text + o;
}

static int
bytes_cmp(const uint8_t *a, size_t na, const uint8_t *b, size_t nb)
{
	int c = memcmp(a, b, na < nb ? na : nb);

	if (c != 0)
		return c;
	return na < nb ? -1 : na > nb;
}

/* Entry i of an order, checked against the rows. */
static enum tq_status
view_row(const struct tq_labview *v, const uint8_t *ord, uint64_t i,
    unsigned seg, uint64_t *r)
{
	*r = rd_w(ord, v->w, i);
	if (*r >= v->n)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section LABL: row "
		    "%llu out of range", seg, (ull)*r);
	return TQ_OK;
}

/* The vector of local row r of segment p: originals, else decoded. */
static enum tq_status
row_vector(const struct tq_index *ix, const struct tq_part *p, uint64_t r,
    float *vec)
{
	const struct tq_quantizer *q = ix->q;
	size_t d = q->dim;
	uint8_t *un, *packed;
	float f[TQ_NFACTORS];
	const float *fs, *centre;
	double cc;
	enum tq_status st;

	if (ix->originals != TQ_ORIG_NONE) {
		tq_orig_row(tq_kernels(), ix->originals, tq_part_orig(p, r,
		    tq_orig_bytes(ix->originals, (uint32_t)d)), (uint32_t)d, vec);
		return TQ_OK;
	}
	un = malloc(d);
	packed = malloc(tq_code_bytes(q));
	if (un == NULL || packed == NULL) {
		free(un);
		free(packed);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	tq_unpack_block_row(q, p->codes + r / TQ_BLOCK * ix->block_bytes,
	    (unsigned)(r % TQ_BLOCK), un);
	tq_pack_row(q, un, packed);
	centre = tq_row_centre(q, p, r, tq_centre_norm2(q), &cc);
	if (p->fach != NULL) {
		tq_fach_row(p->fach + r / TQ_BLOCK * TQ_FACH_BLOCK,
		    (unsigned)(r % TQ_BLOCK), f);
		tq_fach_uncanon(f, q->metric == TQ_METRIC_L2, cc);
	} else {
		fs = p->factors + r / TQ_BLOCK * TQ_BLOCK * TQ_NFACTORS +
		    r % TQ_BLOCK;
		for (unsigned k = 0; k < TQ_NFACTORS; k++)
			f[k] = fs[k * TQ_BLOCK];
	}
	st = tq_decode_about(q, packed, f, 1, centre, vec);
	free(un);
	free(packed);
	return st;
}

enum tq_status
tq_index_like(const struct tq_index *ix, const char *label, size_t len,
    int *found, uint64_t *id, float *vec)
{
	const struct tq_part *best = NULL;
	uint64_t brow = 0, bid = 0;

	*found = 0;
	*id = 0;
	if (ix->lab == NULL)
		return TQ_OK;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_labview *v = &ix->lab[s];
		const struct tq_part *p = &ix->parts[s];
		uint64_t lo = 0, hi = v->n, r;
		const uint8_t *lb;
		size_t ll;

		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;

			TQ_TRY(view_row(v, v->bylab, mid, s, &r));
			lb = view_label(v, r, &ll);
			if (bytes_cmp(lb, ll, (const uint8_t *)label, len) < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < v->n; lo++) {
			uint64_t rid;

			TQ_TRY(view_row(v, v->bylab, lo, s, &r));
			lb = view_label(v, r, &ll);
			if (bytes_cmp(lb, ll, (const uint8_t *)label, len) != 0)
				break;
			if (tq_part_dead(p, r))
				continue;
			rid = tq_part_id(p, r);
			if (best == NULL || rid < bid) {
				best = p;
				brow = r;
				bid = rid;
			}
		}
	}
	if (best == NULL)
		return TQ_OK;
	*found = 1;
	*id = bid;
	return vec != NULL ? row_vector(ix, best, brow, vec) : TQ_OK;
}

enum tq_status
tq_index_label(const struct tq_index *ix, uint64_t id, const char **label,
    size_t *len)
{
	*label = NULL;
	*len = 0;
	if (ix->lab == NULL)
		return TQ_OK;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_labview *v = &ix->lab[s];
		const struct tq_part *p = &ix->parts[s];
		uint64_t lo = 0, hi = v->n, r;

		while (lo < hi) {
			uint64_t mid = lo + (hi - lo) / 2;

			TQ_TRY(view_row(v, v->byid, mid, s, &r));
			if (tq_part_id(p, r) < id)
				lo = mid + 1;
			else
				hi = mid;
		}
		for (; lo < v->n; lo++) {
			const uint8_t *lb;
			size_t ll;

			TQ_TRY(view_row(v, v->byid, lo, s, &r));
			if (tq_part_id(p, r) != id)
				break;
			if (tq_part_dead(p, r))
				continue;
			lb = view_label(v, r, &ll);
			if (memchr(lb, '\0', ll) != NULL ||
			    memchr(lb, '\n', ll) != NULL)
				return tq_fail(TQ_ERR_FORMAT, "segment %u: "
				    "section LABL: label %llu holds a NUL or "
				    "newline byte", s, (ull)r);
			*label = (const char *)lb;
			*len = ll;
			return TQ_OK;
		}
	}
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Stores: label bytes in an unlinked temporary file, offsets in memory      */

#define STORE_BUF ((size_t)1 << 20)

struct store {
	int fd;
	uint64_t *off;		/* n + 1 */
	uint64_t n, cap;
	uint8_t *buf;		/* bytes not yet written */
	size_t blen;
	uint64_t flushed;	/* bytes in the file */
	const uint8_t *map;
	size_t maplen;
};

static enum tq_status
store_open(struct store *st, const char *beside)
{
	char *tmp;

	memset(st, 0, sizeof(*st));
	st->fd = -1;
	if ((st->off = malloc(1024 * sizeof(*st->off))) == NULL ||
	    (st->buf = malloc(STORE_BUF)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	st->cap = 1024;
	st->off[0] = 0;
	if ((st->fd = tq_tmpfile_beside(beside, &tmp)) == -1)
		return tq_fail(TQ_ERR_IO, "cannot create a labels file beside "
		    "it: %s", strerror(errno));
	unlink(tmp);
	free(tmp);
	return TQ_OK;
}

static void
store_close(struct store *st)
{
	if (st->map != NULL)
		munmap((void *)st->map, st->maplen);
	if (st->fd >= 0)
		close(st->fd);
	free(st->off);
	free(st->buf);
	memset(st, 0, sizeof(*st));
	st->fd = -1;
}

static enum tq_status
store_flush(struct store *st)
{
	size_t done = 0;

	while (done < st->blen) {
		ssize_t k = pwrite(st->fd, st->buf + done, st->blen - done,
		    (off_t)(st->flushed + done));

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return tq_fail(TQ_ERR_IO, "labels write: %s",
			    strerror(errno));
		done += (size_t)k;
	}
	st->flushed += st->blen;
	st->blen = 0;
	return TQ_OK;
}

static enum tq_status
store_add(struct store *st, const void *s, size_t len)
{
	if (st->n + 1 == st->cap) {
		uint64_t *o;

		if (st->cap > SIZE_MAX / 16 ||
		    (o = realloc(st->off, 2 * st->cap * sizeof(*o))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory for %llu "
			    "labels", (ull)st->n);
		st->off = o;
		st->cap *= 2;
	}
	if (st->blen + len > STORE_BUF)
		TQ_TRY(store_flush(st));
	memcpy(st->buf + st->blen, s, len);
	st->blen += len;
	st->off[st->n + 1] = st->off[st->n] + len;
	st->n++;
	return TQ_OK;
}

/* Maps the store so that its first `upto` bytes can be read. */
static enum tq_status
store_map(struct store *st, uint64_t upto)
{
	void *m;

	if (st->map != NULL && upto <= st->maplen)
		return TQ_OK;
	TQ_TRY(store_flush(st));
	if (st->map != NULL)
		munmap((void *)st->map, st->maplen);
	st->map = NULL;
	st->maplen = 0;
	if (st->flushed == 0)
		return TQ_OK;
	m = mmap(NULL, (size_t)st->flushed, PROT_READ, MAP_SHARED, st->fd, 0);
	if (m == MAP_FAILED)
		return tq_fail(TQ_ERR_IO, "labels map: %s", strerror(errno));
	st->map = m;
	st->maplen = (size_t)st->flushed;
	return TQ_OK;
}

static enum tq_status
store_get(struct store *st, uint64_t k, const uint8_t **p, size_t *len)
{
	if (k >= st->n)
		return tq_fail(TQ_ERR_ARG, "label %llu of %llu", (ull)k,
		    (ull)st->n);
	TQ_TRY(store_map(st, st->off[k + 1]));
	*p = st->map + st->off[k];
	*len = (size_t)(st->off[k + 1] - st->off[k]);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* A build's labels                                                          */

struct slot {
	uint64_t a;		/* new row number, or old local row */
	uint32_t seg;		/* old segment, UINT32_MAX for a new row */
};

struct tq_labbuild {
	const struct tq_index *old;
	int file;		/* labels from a labels file */
	struct store in, out;
	struct slot *slot;
	size_t nslot;
	uint64_t *ids;		/* ids of the rows out, in output order */
	uint64_t idcap;
};

void
tq_lab_free(struct tq_labbuild *lb)
{
	if (lb == NULL)
		return;
	store_close(&lb->in);
	store_close(&lb->out);
	free(lb->slot);
	free(lb->ids);
	free(lb);
}

enum tq_status
tq_lab_begin(const struct tq_build_params *p, struct tq_reader *corpus,
    const struct tq_index *old, const char *beside, size_t chunk,
    struct tq_labbuild **out)
{
	struct tq_labbuild *lb;
	int want = p->labels != NULL || p->labels_auto;
	int had = old != NULL && old->lab != NULL;
	enum tq_status st;

	*out = NULL;
	if (old != NULL && want && !had)
		return tq_fail(TQ_ERR_ARG, "the index has no labels to add to");
	if (old != NULL && had && corpus != NULL && !want)
		return tq_fail(TQ_ERR_ARG, "the index has labels: the new rows "
		    "need them too (--labels)");
	if (!want && !had)
		return TQ_OK;
	if (want && corpus == NULL)
		return tq_fail(TQ_ERR_ARG, "labels without rows");
	if (p->labels == NULL && p->labels_auto &&
	    !tq_reader_has_labels(corpus))
		return tq_fail(TQ_ERR_ARG, "--labels auto: the corpus has no "
		    "labels");
	if ((lb = calloc(1, sizeof(*lb))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	lb->old = old;
	lb->file = p->labels != NULL;
	lb->nslot = chunk;
	lb->in.fd = lb->out.fd = -1;
	if ((lb->slot = calloc(chunk, sizeof(*lb->slot))) == NULL) {
		tq_lab_free(lb);
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	if ((st = store_open(&lb->in, beside)) != TQ_OK ||
	    (st = store_open(&lb->out, beside)) != TQ_OK) {
		tq_lab_free(lb);
		return st;
	}
	while (lb->file) {
		const char *s;
		size_t len;

		if ((st = tq_labels_read(p->labels, &s, &len)) != TQ_OK) {
			char d[256];

			/* The detail is rewritten: copy it first. */
			snprintf(d, sizeof(d), "%s", tq_errdetail());
			st = tq_fail(st, "the labels file: %s", d);
			tq_lab_free(lb);
			return st;
		}
		if (s == NULL)
			break;
		if ((st = store_add(&lb->in, s, len)) != TQ_OK) {
			tq_lab_free(lb);
			return st;
		}
	}
	*out = lb;
	return TQ_OK;
}

enum tq_status
tq_lab_input(struct tq_labbuild *lb, struct tq_reader *r, size_t got)
{
	if (lb == NULL || lb->file)
		return TQ_OK;
	for (size_t i = 0; i < got; i++) {
		const char *s = tq_reader_label(r, i);

		if (s == NULL)
			return tq_fail(TQ_ERR_FORMAT, "a row without a label");
		TQ_TRY(store_add(&lb->in, s, strlen(s)));
	}
	return TQ_OK;
}

enum tq_status
tq_lab_count_check(const struct tq_labbuild *lb, uint64_t n)
{
	if (lb == NULL || !lb->file)
		return TQ_OK;
	if (lb->in.n < n)
		return tq_fail(TQ_ERR_MISMATCH, "the labels file has %llu "
		    "labels but the corpus has %llu rows", (ull)lb->in.n,
		    (ull)n);
	if (lb->in.n > n)
		return tq_fail(TQ_ERR_MISMATCH, "the labels file has more "
		    "labels (%llu) than the corpus has rows (%llu)",
		    (ull)lb->in.n, (ull)n);
	return TQ_OK;
}

void
tq_lab_new(struct tq_labbuild *lb, size_t at, uint64_t k)
{
	if (lb != NULL)
		lb->slot[at] = (struct slot){ k, UINT32_MAX };
}

uint64_t
tq_lab_new_of(const struct tq_labbuild *lb, size_t at)
{
	return lb != NULL ? lb->slot[at].a : 0;
}

void
tq_lab_old(struct tq_labbuild *lb, const struct tq_part *p, uint64_t r,
    size_t len, size_t at)
{
	uint32_t seg;

	if (lb == NULL)
		return;
	seg = (uint32_t)(p - lb->old->parts);
	for (size_t i = 0; i < len; i++)
		lb->slot[at + i] = (struct slot){ r + i, seg };
}

enum tq_status
tq_lab_chunk(struct tq_labbuild *lb, size_t rows, const uint8_t *idbuf)
{
	if (lb == NULL)
		return TQ_OK;
	if (lb->out.n + rows > lb->idcap) {
		uint64_t cap = lb->idcap ? lb->idcap : 4096, *n2;

		while (cap < lb->out.n + rows)
			cap *= 2;
		if (cap > SIZE_MAX / 8 ||
		    (n2 = realloc(lb->ids, (size_t)cap * 8)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory for the "
			    "labels' ids");
		lb->ids = n2;
		lb->idcap = cap;
	}
	for (size_t i = 0; i < rows; i++) {
		const struct slot *sl = &lb->slot[i];
		const uint8_t *s = NULL;
		size_t len = 0;

		if (sl->seg == UINT32_MAX) {
			if (lb->file && sl->a >= lb->in.n)
				return tq_fail(TQ_ERR_MISMATCH, "the labels "
				    "file has %llu labels but the corpus has "
				    "more rows", (ull)lb->in.n);
			TQ_TRY(store_get(&lb->in, sl->a, &s, &len));
		} else
			s = view_label(&lb->old->lab[sl->seg], sl->a, &len);
		lb->ids[lb->out.n] = rd_le64(idbuf + 8 * i);
		TQ_TRY(store_add(&lb->out, s, len));
	}
	return TQ_OK;
}

/* The context of the sorts: the labels gathered, mapped, and their ids. */
struct sortctx {
	const struct store *st;
	const uint64_t *ids;
};

static int
by_label(const void *a, const void *b, void *arg)
{
	const struct sortctx *c = arg;
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	const uint64_t *off = c->st->off;
	int r = bytes_cmp(c->st->map + off[x], (size_t)(off[x + 1] - off[x]),
	    c->st->map + off[y], (size_t)(off[y + 1] - off[y]));

	return r != 0 ? r : x < y ? -1 : x > y;
}

static int
by_id(const void *a, const void *b, void *arg)
{
	const struct sortctx *c = arg;
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	if (c->ids[x] != c->ids[y])
		return c->ids[x] < c->ids[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* Writes n integers of width w from v, through a small buffer. */
static enum tq_status
put_ints(struct tq_filewriter *fw, const uint64_t *v, uint64_t n, unsigned w)
{
	uint8_t buf[8192];
	size_t at = 0;

	for (uint64_t i = 0; i < n; i++) {
		if (w == 4)
			wr_le32(buf + at, (uint32_t)v[i]);
		else
			wr_le64(buf + at, v[i]);
		at += w;
		if (at == sizeof(buf)) {
			TQ_TRY(tq_fw_write(fw, buf, at));
			at = 0;
		}
	}
	return at > 0 ? tq_fw_write(fw, buf, at) : TQ_OK;
}

enum tq_status
tq_lab_write(struct tq_labbuild *lb, struct tq_filewriter *fw, uint32_t part)
{
	struct store *st = &lb->out;
	uint64_t n = st->n, t = st->off[n], *ord;
	unsigned w = n < ((uint64_t)1 << 32) && t < ((uint64_t)1 << 32) ? 4 : 8;
	struct sortctx c = { st, lb->ids };
	uint8_t h[TQ_LABL_HEADER];
	enum tq_status rc;

	TQ_TRY(store_map(st, t));
	if ((ord = tq_mallocarray(n > 0 ? n : 1, sizeof(*ord))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory for %llu labels",
		    (ull)n);
	memset(h, 0, sizeof(h));
	wr_le32(h, w);
	wr_le64(h + 8, n);
	wr_le64(h + 16, t);
	tq_fw_set_part(fw, part);
	if ((rc = tq_fw_begin(fw, TQ_TAG_LABL)) != TQ_OK ||
	    (rc = tq_fw_write(fw, h, sizeof(h))) != TQ_OK ||
	    (rc = put_ints(fw, st->off, n + 1, w)) != TQ_OK)
		goto done;
	for (uint64_t i = 0; i < n; i++)
		ord[i] = i;
	qsort_r(ord, (size_t)n, sizeof(*ord), by_label, &c);
	if ((rc = put_ints(fw, ord, n, w)) != TQ_OK)
		goto done;
	for (uint64_t i = 0; i < n; i++)
		ord[i] = i;
	qsort_r(ord, (size_t)n, sizeof(*ord), by_id, &c);
	if ((rc = put_ints(fw, ord, n, w)) != TQ_OK ||
	    (t > 0 && (rc = tq_fw_write(fw, st->map, (size_t)t)) != TQ_OK) ||
	    (rc = tq_fw_end(fw)) != TQ_OK)
		goto done;
done:
	tq_fw_set_part(fw, 0);
	free(ord);
	return rc;
}
