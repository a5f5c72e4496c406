/*
 * index.c - building an index file in one streaming pass, and opening one.
 *
 * A build reads the corpus in chunks of whole 32-vector blocks, encodes
 * each chunk on several threads (each thread a contiguous range of blocks,
 * so the bytes never depend on the thread count), and writes the codes,
 * factors, ids and originals straight into their reserved sections of the
 * output.  Memory is a few chunks, whatever the corpus size.  When the
 * reader cannot say how many rows it holds (a pipe), the rows are first
 * spooled to an unlinked temporary file beside the output, because the
 * section sizes must be known before the first byte is placed.
 *
 * With coarse lists (IVF) the encoded rows are not written in input
 * order but spilled, with their list, to an unlinked temporary file; the
 * output is then filled list by list from windows of rows: each window is
 * gathered by one sequential read of the spill (see ivf_emit).
 *
 * An index is never modified in place.  Deleting rows writes a copy with
 * a TOMB bitmap; appending (and compacting) streams the live rows out of
 * their blocks into the same chunk buffers as new rows encoded with the
 * index's quantizer, so the result equals a fresh build of those rows.
 * In an IVF index the live rows of each list move by runs, a block at a
 * time, ahead of the list's new rows (ivf_emit).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

void
tq_build_params_default(struct tq_build_params *p)
{
	memset(p, 0, sizeof(*p));
	p->originals = TQ_ORIG_F32;
	p->threads = 0;
	p->memory = 0;
	p->dups = 1;
	p->dup_ratio = 1.2f;
}

/* ------------------------------------------------------------------------ */
/* The row source: the reader itself, or a spool file of raw float rows.      */

struct source {
	struct tq_reader *r;
	int fd;			/* spool, or -1 */
	uint64_t n;
	uint64_t next;		/* next row to read from the spool */
	uint32_t dim;
};

/*
 * Whole writes and reads of a temporary file ("spool" or "spill" in the
 * message), retried on EINTR and short counts.
 */
static enum tq_status
write_all(int fd, const char *what, const uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return tq_fail(TQ_ERR_IO, "%s write: %s", what,
			    strerror(errno));
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return TQ_OK;
}

static enum tq_status
read_all(int fd, const char *what, uint8_t *p, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t k = pread(fd, p, n, (off_t)off);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return tq_fail(TQ_ERR_IO, "%s read: %s", what,
			    k < 0 ? strerror(errno) : "unexpected end");
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return TQ_OK;
}

static enum tq_status
source_read(struct source *src, float *buf, size_t max, size_t *got)
{
	size_t want, rowbytes = (size_t)src->dim * sizeof(float);

	if (src->fd < 0)
		return tq_reader_read(src->r, buf, max, got);
	want = src->n - src->next < max ? (size_t)(src->n - src->next) : max;
	TQ_TRY(read_all(src->fd, "spool", (uint8_t *)buf, want * rowbytes,
	    src->next * rowbytes));
	src->next += want;
	*got = want;
	return TQ_OK;
}

/* Copies the whole reader to an unlinked temporary file beside path. */
static enum tq_status
source_spool(struct source *src, const char *path, float *buf, size_t chunk)
{
	char *tmp;
	size_t got, rowbytes = (size_t)src->dim * sizeof(float);
	uint64_t off = 0;

	if ((src->fd = tq_tmpfile_beside(path, &tmp)) == -1)
		return tq_fail(TQ_ERR_IO, "cannot create a spool file beside "
		    "it: %s", strerror(errno));
	unlink(tmp);
	free(tmp);
	src->n = 0;
	for (;;) {
		TQ_TRY(tq_reader_read(src->r, buf, chunk, &got));
		if (got == 0)
			break;
		TQ_TRY(write_all(src->fd, "spool", (const uint8_t *)buf,
		    got * rowbytes, off));
		off += (uint64_t)got * rowbytes;
		src->n += got;
	}
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Build                                                                     */

struct build {
	const struct tq_quantizer *q;
	const struct tq_build_params *p;
	struct tq_ids_reader *ids;
	struct tq_filewriter *fw;
	unsigned s_code, s_fact, s_ids, s_orig;
	size_t chunk;		/* rows per chunk, a multiple of 32 */
	size_t block_bytes;
	float *x;
	uint8_t *codes;		/* chunk * dim unpacked codes */
	float *factors;		/* chunk * 3 */
	/*
	 * The chunk in the file's layout: packed from codes and factors,
	 * or (ivf_emit) filled in place.
	 */
	uint8_t *blocks;	/* chunk / 32 * block_bytes */
	float *fblocks;		/* chunk * 3, per block layout */
	uint8_t *idbuf;		/* chunk * 8 */
	uint64_t *idtmp;
	uint8_t *obuf;		/* chunk * dim * 4 */
	/* IVF only */
	int ivf;
	unsigned s_list;
	uint32_t dups;		/* most lists a row goes to */
	uint32_t *lab;		/* chunk * dups: lists of each buffered row,
				   UINT32_MAX for none */
	float *lsc;		/* chunk * dups: their scores */
	int sfd;		/* spill file */
	uint8_t *sbuf;		/* spill write buffer */
	size_t slen, scap;
	uint64_t soff, srows;
	size_t rec;		/* spill record bytes */
	uint64_t *count;	/* rows a list */
	/*
	 * An append to (or a compaction of) an IVF index: the live old rows
	 * of list l (ocount[l] of them, in old's rows from ooff[l] on, the
	 * deleted ones skipped) come first in it, read from old when the
	 * list is written instead of going through the spill.
	 */
	const struct tq_index *old;
	uint64_t *ocount;
	uint64_t *ooff;
};

static void
build_free(struct build *b)
{
	free(b->x);
	free(b->codes);
	free(b->factors);
	free(b->blocks);
	free(b->fblocks);
	free(b->idbuf);
	free(b->idtmp);
	free(b->obuf);
	free(b->lab);
	free(b->lsc);
	free(b->sbuf);
	free(b->count);
	free(b->ocount);
	free(b->ooff);
	if (b->sfd >= 0)
		close(b->sfd);
}

static enum tq_status
build_alloc(struct build *b)
{
	size_t dim = b->q->dim;

	b->sfd = -1;
	b->block_bytes = tq_block_bytes(b->q);
	/* About 32 MiB of input floats per chunk, 32 .. 4096 rows. */
	b->chunk = ((size_t)8 << 20) / dim / TQ_BLOCK * TQ_BLOCK;
	if (b->chunk < TQ_BLOCK)
		b->chunk = TQ_BLOCK;
	if (b->chunk > 4096)
		b->chunk = 4096;
	b->x = tq_mallocarray(b->chunk, dim * sizeof(float));
	b->codes = tq_mallocarray(b->chunk, dim);
	b->factors = tq_mallocarray(b->chunk, TQ_NFACTORS * sizeof(float));
	b->blocks = tq_mallocarray(b->chunk / TQ_BLOCK, b->block_bytes);
	b->fblocks = tq_mallocarray(b->chunk, TQ_NFACTORS * sizeof(float));
	b->idbuf = tq_mallocarray(b->chunk, 8);
	b->idtmp = tq_mallocarray(b->chunk, sizeof(uint64_t));
	b->obuf = tq_mallocarray(b->chunk, dim * sizeof(float));
	if (!b->x || !b->codes || !b->factors || !b->blocks || !b->fblocks ||
	    !b->idbuf || !b->idtmp || !b->obuf)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	b->ivf = b->q->ivf.nlist > 0;
	if (b->ivf) {
		b->dups = b->p->dups > 1 ? b->p->dups : 1;
		if (b->dups > b->q->ivf.nlist)
			b->dups = b->q->ivf.nlist;
		b->lab = tq_mallocarray(b->chunk, b->dups * sizeof(*b->lab));
		b->lsc = tq_mallocarray(b->chunk, b->dups * sizeof(*b->lsc));
		b->count = tq_callocarray(b->q->ivf.nlist, sizeof(*b->count));
		b->scap = (size_t)4 << 20;
		b->sbuf = malloc(b->scap);
		if (!b->lab || !b->lsc || !b->count || !b->sbuf)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	return TQ_OK;
}

static enum tq_status
write_ipar(struct build *b, uint64_t n, uint64_t nblocks)
{
	uint8_t ip[TQ_IPAR_SIZE];

	memset(ip, 0, sizeof(ip));
	wr_le64(ip, n);
	wr_le64(ip + 8, nblocks);
	wr_le32(ip + 16, TQ_BLOCK);
	wr_le32(ip + 20, (uint32_t)b->block_bytes);
	wr_le32(ip + 24, (uint32_t)b->p->originals);
	wr_le32(ip + 28, TQ_NFACTORS);
	if (b->ivf && b->dups > 1) {
		wr_le32(ip + 32, b->dups);
		wr_lef32(ip + 36, b->p->dup_ratio);
	}
	TQ_TRY(tq_fw_begin(b->fw, TQ_TAG_IPAR));
	TQ_TRY(tq_fw_write(b->fw, ip, sizeof(ip)));
	return tq_fw_end(b->fw);
}

/*
 * Packs `rows` buffered rows (b->codes, b->factors, starting at a block
 * boundary) into b->blocks and b->fblocks.
 */
static void
pack_blocks(struct build *b, size_t rows)
{
	const struct tq_quantizer *q = b->q;
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK;

	memset(b->fblocks, 0, nblk * TQ_BLOCK * TQ_NFACTORS * sizeof(float));
	for (size_t k = 0; k < nblk; k++) {
		size_t r0 = k * TQ_BLOCK;
		size_t nr = rows - r0 < TQ_BLOCK ? rows - r0 : TQ_BLOCK;
		float *fb = b->fblocks + k * TQ_BLOCK * TQ_NFACTORS;

		tq_pack_block(q, b->codes + r0 * q->dim, nr,
		    b->blocks + k * b->block_bytes);
		for (size_t j = 0; j < nr; j++)
			for (unsigned f = 0; f < TQ_NFACTORS; f++)
				fb[f * TQ_BLOCK + j] =
				    b->factors[(r0 + j) * TQ_NFACTORS + f];
	}
}

/*
 * Writes the blocks of `rows` rows (b->blocks, b->fblocks); the factors
 * are made little-endian in place.
 */
static enum tq_status
put_blocks(struct build *b, size_t rows)
{
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK;

	for (size_t i = 0; i < nblk * TQ_BLOCK * TQ_NFACTORS; i++)
		wr_lef32((uint8_t *)&b->fblocks[i], b->fblocks[i]);
	TQ_TRY(tq_fw_put(b->fw, b->s_code, b->blocks, nblk * b->block_bytes));
	return tq_fw_put(b->fw, b->s_fact, b->fblocks,
	    nblk * TQ_BLOCK * TQ_NFACTORS * sizeof(float));
}

/*
 * Converts `rows` input rows x (normalised in place for cosine) to
 * originals in the stored format at dst.
 */
static void
convert_originals(const struct tq_quantizer *q, enum tq_originals o,
    float *x, size_t rows, uint8_t *dst)
{
	size_t cnt = rows * q->dim;

	if (q->metric == TQ_METRIC_COSINE)
		for (size_t i = 0; i < rows; i++)
			(void)tq_normalise(x + i * q->dim, q->dim,
			    x + i * q->dim);
	if (o == TQ_ORIG_F32)
		for (size_t i = 0; i < cnt; i++)
			wr_lef32(dst + 4 * i, x[i]);
	else
		for (size_t i = 0; i < cnt; i++)
			wr_le16(dst + 2 * i, tq_f32_to_f16(x[i]));
}

static enum tq_status rows_out(struct build *b, size_t rows);

/*
 * The lists of `rows` input rows x into b->lab from row `at` on: the
 * nearest, and with dups > 1 up to dups - 1 more whose squared distance
 * is at most dup_ratio times the nearest's (the others UINT32_MAX).
 */
static enum tq_status
assign_rows(struct build *b, const float *x, size_t rows, size_t at)
{
	const struct tq_quantizer *q = b->q;
	uint32_t m = b->dups, *lab = b->lab + at * m;
	float *sc = b->lsc + at * m;
	int cos = q->metric == TQ_METRIC_COSINE;

	TQ_TRY(tq_ivf_nearest(&q->ivf, q->dim, x, rows, cos, 0, m, lab, sc));
	for (size_t i = 0; m > 1 && i < rows; i++) {
		const float *xi = x + i * q->dim;
		float n2;
		double d0;

		tq_dot_rows(xi, q->dim, 1, xi, 1, q->dim, &n2, 1);
		if (cos)
			n2 = n2 > 0.0f ? 1.0f : 0.0f;
		d0 = (double)n2 - (double)sc[i * m];
		if (d0 < 0.0)
			d0 = 0.0;
		for (uint32_t t = 1; t < m; t++) {
			double d = (double)n2 - (double)sc[i * m + t];

			if (d > (double)b->p->dup_ratio * d0)
				lab[i * m + t] = UINT32_MAX;
		}
	}
	return TQ_OK;
}

static enum tq_status
write_chunk(struct build *b, size_t rows, uint64_t row0, unsigned threads)
{
	const struct tq_quantizer *q = b->q;
	size_t got;

	TQ_TRY(tq_encode_unpacked_threads(q, b->x, rows, threads, b->codes,
	    b->factors));
	if (b->ivf)
		TQ_TRY(assign_rows(b, b->x, rows, 0));

	/* External ids. */
	if (b->ids != NULL) {
		TQ_TRY(tq_ids_read(b->ids, b->idtmp, rows, &got));
		if (got < rows)
			return tq_fail(TQ_ERR_MISMATCH, "the ids file has "
			    "%llu ids but the corpus has more rows",
			    (unsigned long long)(row0 + got));
		for (size_t i = 0; i < rows; i++)
			wr_le64(b->idbuf + 8 * i, b->idtmp[i]);
	} else {
		for (size_t i = 0; i < rows; i++)
			wr_le64(b->idbuf + 8 * i, row0 + i);
	}
	if (b->p->originals != TQ_ORIG_NONE)
		convert_originals(q, b->p->originals, b->x, rows, b->obuf);
	return rows_out(b, rows);
}

/* Reserves CODE, FACT, IDS and ORIG for n rows. */
static enum tq_status
reserve_rows(struct build *b, uint64_t n, uint64_t nblocks)
{
	uint64_t len;

	if (ck_mul64(nblocks, b->block_bytes, &len))
		return tq_fail(TQ_ERR_OVERFLOW, "index too large");
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_CODE, len, &b->s_code));
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_FACT,
	    nblocks * TQ_BLOCK * TQ_NFACTORS * sizeof(float), &b->s_fact));
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_IDS, n * 8, &b->s_ids));
	if (b->p->originals != TQ_ORIG_NONE) {
		uint64_t w = b->p->originals == TQ_ORIG_F32 ? 4 : 2;

		if (ck_mul64(n, (uint64_t)b->q->dim * w, &len))
			return tq_fail(TQ_ERR_OVERFLOW, "index too large");
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_ORIG, len, &b->s_orig));
	}
	if (b->ivf)
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_LIST,
		    ((uint64_t)b->q->ivf.nlist + 1) * 8, &b->s_list));
	return TQ_OK;
}

/*
 * After n rows: the corpus (when read from a reader) and the ids must
 * both be exhausted, or the input was not what its header said.
 */
static enum tq_status
input_done(struct build *b, struct source *src, uint64_t n)
{
	uint64_t extra;
	size_t got;

	if (src->r != NULL && src->fd < 0) {
		TQ_TRY(tq_reader_read(src->r, b->x, 1, &got));
		if (got != 0)
			return tq_fail(TQ_ERR_FORMAT, "more rows than the "
			    "header says (%llu)", (unsigned long long)n);
	}
	if (b->ids != NULL) {
		TQ_TRY(tq_ids_read(b->ids, &extra, 1, &got));
		if (got != 0)
			return tq_fail(TQ_ERR_MISMATCH, "the ids file has "
			    "more ids than the corpus has rows (%llu)",
			    (unsigned long long)n);
	}
	return TQ_OK;
}

/* Writes `rows` rows of the chunk, its codes already in b->blocks. */
static enum tq_status
chunk_out(struct build *b, size_t rows)
{
	TQ_TRY(put_blocks(b, rows));
	TQ_TRY(tq_fw_put(b->fw, b->s_ids, b->idbuf, rows * 8));
	if (b->p->originals != TQ_ORIG_NONE)
		TQ_TRY(tq_fw_put(b->fw, b->s_orig, b->obuf, rows *
		    b->q->dim * (b->p->originals == TQ_ORIG_F32 ? 4 : 2)));
	return TQ_OK;
}

/* Writes the `rows` buffered rows (codes, factors, ids, originals). */
static enum tq_status
merge_flush(struct build *b, size_t rows)
{
	pack_blocks(b, rows);
	return chunk_out(b, rows);
}

/* ------------------------------------------------------------------------ */
/* IVF: the spill and the list-ordered output                                */

/* Bytes of stored originals per row. */
static size_t
orig_bytes(const struct build *b)
{
	return b->p->originals == TQ_ORIG_F32 ? 4 * (size_t)b->q->dim :
	    b->p->originals == TQ_ORIG_F16 ? 2 * (size_t)b->q->dim : 0;
}

/*
 * A spill record: u32 list, packed codes, the factors (host floats),
 * the id (8 bytes, little-endian) and the stored originals.
 */
static enum tq_status
spill_open(struct build *b, const char *path)
{
	char *tmp;

	b->rec = 4 + tq_code_bytes(b->q) + TQ_NFACTORS * sizeof(float) + 8 +
	    orig_bytes(b);
	if (b->rec > b->scap)
		return tq_fail(TQ_ERR_OVERFLOW, "rows too large to spill");
	if ((b->sfd = tq_tmpfile_beside(path, &tmp)) == -1)
		return tq_fail(TQ_ERR_IO, "cannot create a spill file beside "
		    "it: %s", strerror(errno));
	unlink(tmp);
	free(tmp);
	return TQ_OK;
}

static enum tq_status
spill_rows(struct build *b, size_t rows)
{
	const struct tq_quantizer *q = b->q;
	size_t cb = tq_code_bytes(q), ob = orig_bytes(b);

	for (size_t e = 0; e < rows * b->dups; e++) {
		size_t i = e / b->dups;
		uint8_t *r;

		if (b->lab[e] == UINT32_MAX)
			continue;
		if (b->slen + b->rec > b->scap) {
			TQ_TRY(write_all(b->sfd, "spill", b->sbuf, b->slen,
			    b->soff));
			b->soff += b->slen;
			b->slen = 0;
		}
		r = b->sbuf + b->slen;
		wr_le32(r, b->lab[e]);
		tq_pack_row(q, b->codes + i * q->dim, r + 4);
		memcpy(r + 4 + cb, b->factors + i * TQ_NFACTORS,
		    TQ_NFACTORS * sizeof(float));
		memcpy(r + 4 + cb + TQ_NFACTORS * sizeof(float),
		    b->idbuf + 8 * i, 8);
		if (ob > 0)
			memcpy(r + 4 + cb + TQ_NFACTORS * sizeof(float) + 8,
			    b->obuf + i * ob, ob);
		b->slen += b->rec;
		b->count[b->lab[e]]++;
		b->srows++;
	}
	return TQ_OK;
}

/* The buffered rows go to the output (flat) or to the spill (IVF). */
static enum tq_status
rows_out(struct build *b, size_t rows)
{
	return b->ivf ? spill_rows(b, rows) : merge_flush(b, rows);
}

/* One spill record into row `at` of the chunk's blocks (ivf_emit). */
static void
record_to_chunk(struct build *b, const uint8_t *r, size_t at)
{
	const struct tq_quantizer *q = b->q;
	size_t cb = tq_code_bytes(q), ob = orig_bytes(b);
	float *fb = b->fblocks + at / TQ_BLOCK * TQ_BLOCK * TQ_NFACTORS +
	    at % TQ_BLOCK, f[TQ_NFACTORS];

	tq_block_put_row(q, r + 4, (unsigned)(at % TQ_BLOCK),
	    b->blocks + at / TQ_BLOCK * b->block_bytes);
	memcpy(f, r + 4 + cb, sizeof(f));
	for (unsigned k = 0; k < TQ_NFACTORS; k++)
		fb[k * TQ_BLOCK] = f[k];
	memcpy(b->idbuf + 8 * at, r + 4 + cb + TQ_NFACTORS * sizeof(float), 8);
	if (ob > 0)
		memcpy(b->obuf + at * ob, r + 4 + cb + TQ_NFACTORS *
		    sizeof(float) + 8, ob);
}

/* Zeros the chunk's blocks: the codes and factors of absent rows. */
static void
chunk_clear(struct build *b)
{
	memset(b->blocks, 0, b->chunk / TQ_BLOCK * b->block_bytes);
	memset(b->fblocks, 0, b->chunk * TQ_NFACTORS * sizeof(float));
}

/* Opens the output and sizes its sections for n rows. */
static enum tq_status
open_output(struct build *b, const char *path, uint64_t n)
{
	uint64_t nblocks = (n + TQ_BLOCK - 1) / TQ_BLOCK;

	TQ_TRY(tq_fw_open(path, TQ_FILE_INDEX, 12, &b->fw));
	TQ_TRY(tq_quantizer_write_sections(b->q, b->fw));
	TQ_TRY(write_ipar(b, n, nblocks));
	return reserve_rows(b, n, nblocks);
}

/* Row r of old (live) into row `at` of the chunk buffers. */
static void
old_row_to_chunk(struct build *b, const struct tq_index *ix, uint64_t r,
    size_t at)
{
	const struct tq_quantizer *q = ix->q;
	const float *fs = ix->factors + r / TQ_BLOCK * TQ_BLOCK * TQ_NFACTORS;
	unsigned j = (unsigned)(r % TQ_BLOCK);
	size_t ob = orig_bytes(b);

	tq_unpack_block_row(q, ix->codes + r / TQ_BLOCK * ix->block_bytes, j,
	    b->codes + at * q->dim);
	for (unsigned f = 0; f < TQ_NFACTORS; f++)
		b->factors[at * TQ_NFACTORS + f] = fs[f * TQ_BLOCK + j];
	memcpy(b->idbuf + 8 * at, ix->ids + 8 * r, 8);
	if (ob > 0)
		memcpy(b->obuf + at * ob, ix->orig + r * ob, ob);
}

/* Whether row r of ix is deleted (its bit in the TOMB bitmap). */
static int
row_dead(const struct tq_index *ix, uint64_t r)
{
	return ix->tomb != NULL && (ix->tomb[r / 8] >> (r % 8) & 1) != 0;
}

/* The live rows among rows [r0, r1) of ix. */
static uint64_t
live_between(const struct tq_index *ix, uint64_t r0, uint64_t r1)
{
	uint64_t n = r1 - r0;

	for (uint64_t r = r0; ix->tomb != NULL && r < r1; r++)
		n -= (uint64_t)row_dead(ix, r);
	return n;
}

/*
 * Rows [r, r + len) of old (live) into rows [at, at + len) of the chunk's
 * blocks (ivf_emit, and the whole chunks of a flat append).  The codes
 * move a block at a time, shifted to their new offset mod 32, not
 * unpacked and packed again row by row (an eighth of an IVF append was
 * that).
 */
static void
old_rows_to_chunk(struct build *b, const struct tq_index *ix, uint64_t r,
    size_t len, size_t at)
{
	size_t ob = orig_bytes(b);

	tq_block_copy_rows(ix->q, ix->codes, r, b->blocks, at, len);
	for (size_t i = 0; i < len; i++) {
		uint64_t s = r + i;
		size_t d = at + i;
		const float *fs = ix->factors + s / TQ_BLOCK * TQ_BLOCK *
		    TQ_NFACTORS + s % TQ_BLOCK;
		float *fd = b->fblocks + d / TQ_BLOCK * TQ_BLOCK *
		    TQ_NFACTORS + d % TQ_BLOCK;

		for (unsigned f = 0; f < TQ_NFACTORS; f++)
			fd[f * TQ_BLOCK] = fs[f * TQ_BLOCK];
	}
	memcpy(b->idbuf + 8 * at, ix->ids + 8 * r, 8 * len);
	if (ob > 0)
		memcpy(b->obuf + at * ob, ix->orig + r * ob, len * ob);
}

/*
 * Writes the spilled rows list by list.  Output rows [r0, r1) form a
 * window of at most p->memory bytes of records; one sequential read of
 * the spill places every record of the window (its position is its
 * list's offset plus the records of that list seen before it), then the
 * window goes out through the chunk buffers.  Passes: spill / memory.
 * Rows are placed straight into the chunk's blocks, each one setting
 * every bit of its slot; only the last chunk, when partial, is cleared
 * first, for the zeros past n.
 */
static enum tq_status
ivf_emit(struct build *b, const char *path)
{
	uint32_t nl = b->q->ivf.nlist;
	uint64_t *off = NULL, *cur = NULL, n = b->srows, mem, win;
	uint8_t *wbuf = NULL, *rbuf = NULL, *lbuf = NULL;
	size_t rbytes = ((size_t)4 << 20) / b->rec * b->rec;
	uint64_t oc = 0;	/* the next old row of the list being written */
	enum tq_status st = TQ_OK;

	/* Copies in more lists make the row count known only now. */
	TQ_TRY(open_output(b, path, n));
	if (b->slen > 0) {
		TQ_TRY(write_all(b->sfd, "spill", b->sbuf, b->slen,
		    b->soff));
		b->soff += b->slen;
		b->slen = 0;
	}
	mem = b->p->memory ? b->p->memory : TQ_BUILD_MEMORY;
	win = mem / b->rec / b->chunk * b->chunk;
	if (win < b->chunk)
		win = b->chunk;
	if (win > n)
		win = n;
	off = tq_mallocarray((size_t)nl + 1, sizeof(*off));
	cur = tq_mallocarray(nl, sizeof(*cur));
	lbuf = tq_mallocarray((size_t)nl + 1, 8);
	wbuf = tq_mallocarray((size_t)win, b->rec);
	rbuf = malloc(rbytes);
	if (!off || !cur || !lbuf || !wbuf || !rbuf) {
		st = tq_fail(TQ_ERR_NOMEM, "out of memory for a window of %llu "
		    "rows", (unsigned long long)win);
		goto done;
	}
	off[0] = 0;
	for (uint32_t l = 0; l < nl; l++)
		off[l + 1] = off[l] + b->count[l];
	for (uint32_t l = 0; l <= nl; l++)
		wr_le64(lbuf + 8 * (size_t)l, off[l]);
	if ((st = tq_fw_put(b->fw, b->s_list, lbuf, ((size_t)nl + 1) * 8)) !=
	    TQ_OK)
		goto done;

	for (uint64_t r0 = 0; r0 < n; r0 += win) {
		uint64_t r1 = n - r0 < win ? n : r0 + win, so = 0;
		size_t at = 0;

		memcpy(cur, off, nl * sizeof(*cur));
		if (b->old != NULL)
			for (uint32_t l = 0; l < nl; l++)
				cur[l] += b->ocount[l];
		while (so < b->soff) {
			size_t len = b->soff - so < rbytes ?
			    (size_t)(b->soff - so) : rbytes;

			if ((st = read_all(b->sfd, "spill", rbuf, len, so)) != TQ_OK)
				goto done;
			for (size_t e = 0; e < len; e += b->rec) {
				uint32_t l = rd_le32(rbuf + e);
				uint64_t pos;

				if (l >= nl) {
					st = tq_fail(TQ_ERR_IO, "spill file "
					    "damaged");
					goto done;
				}
				pos = cur[l]++;
				if (pos >= r0 && pos < r1)
					memcpy(wbuf + (pos - r0) * b->rec,
					    rbuf + e, b->rec);
			}
			so += len;
		}
		for (uint64_t r = r0, l = 0; r < r1; ) {
			size_t len = 1;

			if (at == 0 && n - r < b->chunk)
				chunk_clear(b);
			while (b->old != NULL && off[l + 1] <= r)
				l++;
			if (b->old != NULL && r - off[l] < b->ocount[l]) {
				/*
				 * A run of live old rows, within the list's,
				 * the window and the chunk.  A list's rows are
				 * visited in order, so oc only moves on.
				 */
				uint64_t e = off[l] + b->ocount[l];

				if (r == off[l])
					oc = b->ooff[l];
				while (row_dead(b->old, oc))
					oc++;
				if (e > r1)
					e = r1;
				if (e - r > b->chunk - at)
					e = r + (b->chunk - at);
				while (len < e - r && !row_dead(b->old, oc + len))
					len++;
				old_rows_to_chunk(b, b->old, oc, len, at);
				oc += len;
			} else
				record_to_chunk(b, wbuf + (r - r0) * b->rec,
				    at);
			r += len;
			if ((at += len) == b->chunk) {
				if ((st = chunk_out(b, at)) != TQ_OK)
					goto done;
				at = 0;
			}
		}
		if (at > 0 && (st = chunk_out(b, at)) != TQ_OK)
			goto done;
	}
done:
	free(off);
	free(cur);
	free(lbuf);
	free(wbuf);
	free(rbuf);
	return st;
}

/*
 * The end of a build or an append with status rc: the output committed
 * (renamed into place) or abandoned, the spool closed, the buffers freed.
 */
static enum tq_status
build_end(struct build *b, struct source *src, enum tq_status rc)
{
	if (rc == TQ_OK)
		rc = tq_fw_commit(b->fw);	/* frees fw either way */
	else
		tq_fw_abort(b->fw);
	if (src->fd >= 0)
		close(src->fd);
	build_free(b);
	return rc;
}

static enum tq_status
build_run(struct build *b, struct source *src, const char *path)
{
	uint64_t n, row = 0;
	unsigned threads = b->p->threads ? b->p->threads : tq_ncpu();
	size_t got;

	if (src->fd < 0 && tq_reader_count(src->r) < 0)
		TQ_TRY(source_spool(src, path, b->x, b->chunk));
	n = src->fd >= 0 ? src->n : (uint64_t)tq_reader_count(src->r);
	src->n = n;
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (b->ivf)
		TQ_TRY(spill_open(b, path));
	else
		TQ_TRY(open_output(b, path, n));

	while (row < n) {
		size_t want = n - row < b->chunk ? (size_t)(n - row) : b->chunk;

		TQ_TRY(source_read(src, b->x, want, &got));
		if (got < want)
			return tq_fail(TQ_ERR_FORMAT, "truncated: expected "
			    "%llu rows, got %llu", (unsigned long long)n,
			    (unsigned long long)(row + got));
		TQ_TRY(write_chunk(b, got, row, threads));
		row += got;
	}
	TQ_TRY(input_done(b, src, n));
	return b->ivf ? ivf_emit(b, path) : TQ_OK;
}

enum tq_status
tq_build(const struct tq_quantizer *q, struct tq_reader *corpus,
    struct tq_ids_reader *ids, const struct tq_build_params *p,
    const char *path)
{
	struct tq_build_params def;
	struct build b;
	struct source src = { corpus, -1, 0, 0, 0 };
	enum tq_status rc;

	tq_clear_detail();
	if (p == NULL) {
		tq_build_params_default(&def);
		p = &def;
	}
	if (p->originals > TQ_ORIG_F16)
		return tq_fail(TQ_ERR_ARG, "bad originals format");
	if (p->dups > 1 && q->ivf.nlist == 0)
		return tq_fail(TQ_ERR_ARG, "copies in several lists need a "
		    "quantizer with lists");
	if (p->dups > 1 && (p->dups > q->ivf.nlist ||
	    !(p->dup_ratio >= 1.0f && p->dup_ratio <= 1e6f)))
		return tq_fail(TQ_ERR_ARG, "copies: at most %u lists and a "
		    "ratio from 1 to 1e6", (unsigned)q->ivf.nlist);
	if (tq_reader_dim(corpus) != q->dim)
		return tq_fail(TQ_ERR_MISMATCH, "dimension %u does not match "
		    "the quantizer (%u)", tq_reader_dim(corpus), q->dim);
	src.dim = q->dim;
	memset(&b, 0, sizeof(b));
	b.q = q;
	b.p = p;
	b.ids = ids;
	if ((rc = build_alloc(&b)) == TQ_OK)
		rc = build_run(&b, &src, path);
	return build_end(&b, &src, rc);
}

/* ------------------------------------------------------------------------ */
/* Open                                                                      */

static enum tq_status
index_bind(struct tq_index *ix)
{
	const struct tq_file *f = &ix->file;
	const uint8_t *ip, *p;
	uint64_t len, want, nblocks, w;
	uint32_t orig;

	if (f->kind != TQ_FILE_INDEX)
		return tq_fail(TQ_ERR_FORMAT, "a quantizer file, not an index");
	TQ_TRY(tq_quantizer_from_file(f, 0, &ix->q));
	if ((ip = tq_file_section(f, TQ_TAG_IPAR, &len)) == NULL)
		return tq_fail(TQ_ERR_FORMAT, "missing section IPAR");
	if (len != TQ_IPAR_SIZE)
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: length %llu, "
		    "expected %u", (unsigned long long)len, TQ_IPAR_SIZE);
	ix->n = rd_le64(ip);
	nblocks = rd_le64(ip + 8);
	orig = rd_le32(ip + 24);
	ix->block_bytes = tq_block_bytes(ix->q);
	if (ix->n == 0)
		return tq_fail(TQ_ERR_FORMAT, "index holds no vectors");
	if (nblocks != (ix->n + TQ_BLOCK - 1) / TQ_BLOCK ||
	    rd_le32(ip + 16) != TQ_BLOCK ||
	    rd_le32(ip + 20) != ix->block_bytes ||
	    rd_le32(ip + 28) != TQ_NFACTORS || orig > TQ_ORIG_F16)
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: inconsistent "
		    "parameters");
	ix->nblocks = nblocks;
	ix->originals = (enum tq_originals)orig;
	ix->dups = rd_le32(ip + 32);
	ix->dup_ratio = rd_lef32(ip + 36);
	if (ix->dups == 1 || (ix->dups == 0 && ix->dup_ratio != 0.0f) ||
	    (ix->dups > 1 && (ix->dups > ix->q->ivf.nlist ||
	    !(ix->dup_ratio >= 1.0f && ix->dup_ratio <= 1e6f))))
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: bad list copies");

	ix->codes = tq_file_section(f, TQ_TAG_CODE, &len);
	if (ix->codes == NULL || ck_mul64(nblocks, ix->block_bytes, &want) ||
	    len != want)
		return tq_fail(TQ_ERR_FORMAT, "section CODE: missing or "
		    "wrong length");
	p = tq_file_section(f, TQ_TAG_FACT, &len);
	if (p == NULL || ck_mul64(nblocks, TQ_BLOCK * TQ_NFACTORS * 4, &want) ||
	    len != want)
		return tq_fail(TQ_ERR_FORMAT, "section FACT: missing or "
		    "wrong length");
	ix->factors = (const float *)(const void *)p;
	ix->ids = tq_file_section(f, TQ_TAG_IDS, &len);
	if (ix->ids == NULL || ck_mul64(ix->n, 8, &want) || len != want)
		return tq_fail(TQ_ERR_FORMAT, "section IDS: missing or wrong "
		    "length");
	ix->orig = tq_file_section(f, TQ_TAG_ORIG, &len);
	if (ix->originals == TQ_ORIG_NONE) {
		if (ix->orig != NULL)
			return tq_fail(TQ_ERR_FORMAT, "section ORIG present "
			    "but IPAR says none");
	} else {
		w = ix->originals == TQ_ORIG_F32 ? 4 : 2;
		if (ix->orig == NULL ||
		    ck_mul64(ix->n, (uint64_t)ix->q->dim * w, &want) ||
		    len != want)
			return tq_fail(TQ_ERR_FORMAT, "section ORIG: missing "
			    "or wrong length");
	}
	ix->nlist = ix->q->ivf.nlist;
	ix->list = tq_file_section(f, TQ_TAG_LIST, &len);
	if (ix->nlist == 0 && ix->list != NULL)
		return tq_fail(TQ_ERR_FORMAT, "section LIST present but the "
		    "quantizer has no lists");
	if (ix->nlist > 0) {
		uint64_t prev = 0;

		if (ix->list == NULL || len != ((uint64_t)ix->nlist + 1) * 8)
			return tq_fail(TQ_ERR_FORMAT, "section LIST: missing "
			    "or wrong length");
		for (uint32_t l = 0; l <= ix->nlist; l++) {
			uint64_t o = tq_list_off(ix, l);

			if ((l == 0 && o != 0) || o < prev || o > ix->n ||
			    (l == ix->nlist && o != ix->n))
				return tq_fail(TQ_ERR_FORMAT, "section LIST: "
				    "offset %u out of order", (unsigned)l);
			prev = o;
		}
	}
	ix->live = ix->n;
	ix->tomb = tq_file_section(f, TQ_TAG_TOMB, &len);
	if (ix->tomb != NULL) {
		uint64_t tb = (ix->n + 7) / 8, dead = 0;

		if (len != tb)
			return tq_fail(TQ_ERR_FORMAT, "section TOMB: length "
			    "%llu, expected %llu", (unsigned long long)len,
			    (unsigned long long)tb);
		if (ix->n % 8 != 0 && (ix->tomb[tb - 1] >> (ix->n % 8)) != 0)
			return tq_fail(TQ_ERR_FORMAT, "section TOMB: bits set "
			    "past the last row");
		for (uint64_t i = 0; i < tb; i++)
			dead += (uint64_t)__builtin_popcount(ix->tomb[i]);
		if (dead >= ix->n)
			return tq_fail(TQ_ERR_FORMAT, "section TOMB: every "
			    "vector is deleted");
		ix->live = ix->n - dead;
	}
	return TQ_OK;
}

enum tq_status
tq_index_open(const char *path, struct tq_index **out)
{
	struct tq_index *ix;
	enum tq_status rc;

	*out = NULL;
	if ((ix = calloc(1, sizeof(*ix))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	if ((rc = tq_file_map(path, &ix->file)) != TQ_OK) {
		free(ix);
		return rc;
	}
	if ((rc = index_bind(ix)) != TQ_OK) {
		tq_index_close(ix);
		return rc;
	}
	if (ix->orig != NULL) {
		/*
		 * A re-rank reads a few scattered rows of the originals:
		 * without read-ahead each costs the pages it spans, so an
		 * index larger than memory keeps only the codes resident.
		 */
		uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
		uintptr_t a0 = (uintptr_t)ix->orig & ~(pg - 1);
		uintptr_t a1 = (uintptr_t)ix->orig + (uintptr_t)(ix->n *
		    ix->q->dim * (ix->originals == TQ_ORIG_F32 ? 4 : 2));

		(void)madvise((void *)a0, a1 - a0, MADV_RANDOM);
	}
	*out = ix;
	return TQ_OK;
}

void
tq_index_close(struct tq_index *ix)
{
	if (ix == NULL)
		return;
	tq_quantizer_free(ix->q);
	tq_file_unmap(&ix->file);
	free(ix);
}

const struct tq_quantizer *
tq_index_quantizer(const struct tq_index *ix)
{
	return ix->q;
}

uint64_t
tq_index_count(const struct tq_index *ix)
{
	return ix->n;
}

uint64_t
tq_index_live(const struct tq_index *ix)
{
	return ix->live;
}

enum tq_originals
tq_index_originals(const struct tq_index *ix)
{
	return ix->originals;
}

/* ------------------------------------------------------------------------ */
/* Description                                                               */

static void
describe_quantizer(const struct tq_quantizer *q, struct tq_file_info *out)
{
	out->lists = q->ivf.nlist;
	out->dim = q->dim;
	out->bits = q->bits;
	out->metric = q->metric;
	out->seed = q->seed;
	out->rotation = q->rotation;
	if (q->rotation == TQ_ROT_STRUCTURED) {	/* the checked header */
		out->rotation_rounds = (uint32_t)q->rot[0];
		out->rotation_blocks = (uint32_t)q->rot[1];
	}
	out->centred = (q->flags & TQ_QFLAG_CENTRED) != 0;
	out->scale_search = (q->flags & TQ_QFLAG_SCALE_SEARCH) != 0;
}

enum tq_status
tq_file_info(const char *path, struct tq_file_info *out)
{
	struct tq_file f;
	struct tq_index *ix;
	enum tq_status rc;

	memset(out, 0, sizeof(*out));
	TQ_TRY(tq_file_map(path, &f));
	out->kind = f.kind;
	out->version = f.version;
	out->file_size = f.size;
	out->nsections = f.nsections;
	for (uint32_t i = 0; i < f.nsections && i < 32; i++)
		out->sections[i] = f.sec[i];
	if (f.kind == TQ_FILE_QUANTIZER) {
		struct tq_quantizer *q;

		rc = tq_quantizer_from_file(&f, 0, &q);
		if (rc == TQ_OK) {
			describe_quantizer(q, out);
			tq_quantizer_free(q);
		}
		tq_file_unmap(&f);
		return rc;
	}
	tq_file_unmap(&f);
	TQ_TRY(tq_index_open(path, &ix));
	describe_quantizer(ix->q, out);
	out->count = ix->n;
	out->live = ix->live;
	out->dups = ix->dups > 1 ? ix->dups : 1;
	out->dup_ratio = ix->dups > 1 ? ix->dup_ratio : 0.0f;
	out->originals = ix->originals;
	out->bytes_per_vector = ((double)ix->nblocks *
	    ((double)ix->block_bytes + TQ_BLOCK * TQ_NFACTORS * 4.0)) /
	    (double)ix->n + 8.0;
	out->original_bytes_per_vector = ix->originals == TQ_ORIG_NONE ? 0 :
	    (double)ix->q->dim * (ix->originals == TQ_ORIG_F32 ? 4 : 2);
	tq_index_close(ix);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Sets of ids, filters                                                      */

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* A sorted copy of ids without duplicates, malloc'd into *set. */
static enum tq_status
idset_make(const uint64_t *ids, size_t n, uint64_t **set, size_t *m)
{
	size_t i, j = 0;

	*set = tq_mallocarray(n > 0 ? n : 1, sizeof(uint64_t));
	if (*set == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	if (n > 0)
		memcpy(*set, ids, n * sizeof(uint64_t));
	qsort(*set, n, sizeof(uint64_t), cmp_u64);
	for (i = 0; i < n; i++)
		if (j == 0 || (*set)[j - 1] != (*set)[i])
			(*set)[j++] = (*set)[i];
	*m = j;
	return TQ_OK;
}

static int
idset_has(const uint64_t *set, size_t m, uint64_t id)
{
	size_t lo = 0, hi = m;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (set[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < m && set[lo] == id;
}

enum tq_status
tq_filter_create(const struct tq_index *ix, const uint64_t *ids, size_t n,
    struct tq_filter **out)
{
	struct tq_filter *f;
	uint64_t *set;
	size_t m;
	enum tq_status rc;

	*out = NULL;
	if (ix == NULL || (n > 0 && ids == NULL))
		return tq_fail(TQ_ERR_ARG, "filter: NULL argument");
	TQ_TRY(idset_make(ids, n, &set, &m));
	if ((f = calloc(1, sizeof(*f))) == NULL ||
	    (f->words = tq_callocarray(ix->nblocks, sizeof(uint32_t))) ==
	    NULL) {
		rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
		free(set);
		tq_filter_free(f);
		return rc;
	}
	f->ix = ix;
	for (uint64_t r = 0; r < ix->n; r++)
		if (!row_dead(ix, r) && idset_has(set, m, tq_index_id(ix, r))) {
			f->words[r / TQ_BLOCK] |= 1u << (r % TQ_BLOCK);
			f->count++;
		}
	free(set);
	*out = f;
	return TQ_OK;
}

uint64_t
tq_filter_count(const struct tq_filter *f)
{
	return f->count;
}

void
tq_filter_free(struct tq_filter *f)
{
	if (f == NULL)
		return;
	free(f->words);
	free(f);
}

/* ------------------------------------------------------------------------ */
/* Delete                                                                    */

/*
 * Copies every section of the index's file in table order, with `tomb`
 * in place of TOMB (or after the others when there was none).
 */
static enum tq_status
delete_write(const struct tq_index *ix, const uint8_t *tomb, size_t tb,
    struct tq_filewriter *fw)
{
	const struct tq_file *f = &ix->file;

	for (uint32_t i = 0; i < f->nsections; i++) {
		const struct tq_section_info *s = &f->sec[i];
		uint32_t tag = TQ_TAG(s->tag[0], s->tag[1], s->tag[2],
		    s->tag[3]);

		TQ_TRY(tq_fw_begin(fw, tag));
		if (tag == TQ_TAG_TOMB)
			TQ_TRY(tq_fw_write(fw, tomb, tb));
		else
			TQ_TRY(tq_fw_write(fw, f->base + s->offset,
			    (size_t)s->length));
		TQ_TRY(tq_fw_end(fw));
	}
	if (ix->tomb == NULL) {
		TQ_TRY(tq_fw_begin(fw, TQ_TAG_TOMB));
		TQ_TRY(tq_fw_write(fw, tomb, tb));
		TQ_TRY(tq_fw_end(fw));
	}
	return TQ_OK;
}

enum tq_status
tq_index_delete(const char *path, const uint64_t *ids, size_t nids,
    const char *out, uint64_t *deleted)
{
	struct tq_index *ix = NULL;
	struct tq_filewriter *fw = NULL;
	uint64_t *set = NULL, hit = 0;
	uint8_t *tomb = NULL;
	size_t m, tb;
	enum tq_status rc;

	tq_clear_detail();
	if (deleted != NULL)
		*deleted = 0;
	if (path == NULL || out == NULL || (nids > 0 && ids == NULL))
		return tq_fail(TQ_ERR_ARG, "delete: NULL argument");
	TQ_TRY(tq_file_verify(path));
	TQ_TRY(tq_index_open(path, &ix));
	tb = (size_t)((ix->n + 7) / 8);
	if ((rc = idset_make(ids, nids, &set, &m)) != TQ_OK)
		goto done;
	if ((tomb = calloc(tb, 1)) == NULL) {
		rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
		goto done;
	}
	if (ix->tomb != NULL)
		memcpy(tomb, ix->tomb, tb);
	for (uint64_t r = 0; r < ix->n; r++)
		if (!row_dead(ix, r) && idset_has(set, m, tq_index_id(ix, r))) {
			tomb[r / 8] |= (uint8_t)(1u << (r % 8));
			hit++;
		}
	if (hit >= ix->live) {
		rc = tq_fail(TQ_ERR_EMPTY, "would delete every vector");
		goto done;
	}
	if ((rc = tq_fw_open(out, TQ_FILE_INDEX, ix->file.nsections +
	    (ix->tomb == NULL), &fw)) != TQ_OK)
		goto done;
	if ((rc = delete_write(ix, tomb, tb, fw)) != TQ_OK)
		tq_fw_abort(fw);
	else
		rc = tq_fw_commit(fw);		/* frees fw either way */
	if (rc == TQ_OK && deleted != NULL)
		*deleted = hit;
done:
	free(set);
	free(tomb);
	tq_index_close(ix);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Append and compact                                                        */


/*
 * The live rows of ix, then the rows of src (if any), so that the bytes
 * equal a fresh build's.  Old rows move by runs of live rows, a block at
 * a time (old_rows_to_chunk): in an IVF index ahead of each list's new
 * rows when the lists are written (ivf_emit), in a flat one a whole chunk
 * at a time, the last part chunk through the row buffers with the first
 * new rows.
 */
static enum tq_status
append_run(struct build *b, const struct tq_index *ix, struct source *src,
    const char *out)
{
	const struct tq_quantizer *q = ix->q;
	size_t dim = q->dim, ob = orig_bytes(b), at = 0, got;
	uint64_t nnew = 0, total, row, next = 0;
	unsigned threads = b->p->threads ? b->p->threads : tq_ncpu();

	if (src->r != NULL) {
		if (tq_reader_count(src->r) < 0)
			TQ_TRY(source_spool(src, out, b->x, b->chunk));
		nnew = src->fd >= 0 ? src->n : (uint64_t)tq_reader_count(src->r);
		src->n = nnew;
		if (nnew == 0)
			return tq_fail(TQ_ERR_EMPTY, "no vectors");
	}
	if (src->r != NULL && b->ids == NULL) {
		uint64_t mx = 0;

		for (uint64_t r = 0; r < ix->n; r++)
			if (tq_index_id(ix, r) > mx)
				mx = tq_index_id(ix, r);
		if (mx > UINT64_MAX - nnew)
			return tq_fail(TQ_ERR_OVERFLOW, "the new ids would "
			    "pass 2^64 - 1; give them with an ids file");
		next = mx + 1;
	}
	total = ix->live + nnew;

	if (b->ivf)
		TQ_TRY(spill_open(b, out));
	else
		TQ_TRY(open_output(b, out, total));

	/*
	 * IVF: the live rows of each old list go out as they are, ahead of
	 * the list's new rows, straight from ix (ivf_emit), not through the
	 * spill, which then holds the new rows alone: the same bytes.  An
	 * append of 10% to 1M x 1024 took 8.6 s through the spill, 6.3 s
	 * this way (building the new rows alone: 4.6 s), and 5.5 s once the
	 * old lists moved a block at a time (old_rows_to_chunk): writing
	 * the lists went from 1.9 s to 1.0 s.
	 */
	if (b->ivf) {
		uint32_t nl = q->ivf.nlist;

		b->ocount = tq_callocarray(nl, sizeof(*b->ocount));
		b->ooff = tq_callocarray(nl, sizeof(*b->ooff));
		if (b->ocount == NULL || b->ooff == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		for (uint32_t l = 0; l < nl; l++) {
			b->ooff[l] = tq_list_off(ix, l);
			b->ocount[l] = live_between(ix, b->ooff[l],
			    tq_list_off(ix, l + 1));
			b->count[l] += b->ocount[l];
		}
		b->srows += ix->live;
		b->old = ix;
	}
	/*
	 * Flat: whole chunks of live rows move by runs, a block at a time
	 * (old_rows_to_chunk); the rest, less than a chunk, goes through the
	 * row buffers with the first new rows.  1M x 1024, appending 10%:
	 * 5.0 s row by row, 3.9 s this way, building the new rows alone
	 * 2.6 s.
	 */
	for (uint64_t r = 0, left = b->ivf ? 0 : ix->live; left > 0; ) {
		if (left < b->chunk) {
			if (!row_dead(ix, r)) {
				old_row_to_chunk(b, ix, r, at++);
				left--;
			}
			r++;
			continue;
		}
		/* A chunk's worth of live rows lie ahead: r + len < ix->n. */
		for (size_t len; at < b->chunk; at += len, r += len) {
			while (row_dead(ix, r))
				r++;
			for (len = 1; at + len < b->chunk &&
			    !row_dead(ix, r + len); len++)
				;
			old_rows_to_chunk(b, ix, r, len, at);
		}
		TQ_TRY(chunk_out(b, at));
		left -= at;
		at = 0;
	}
	for (row = 0; row < nnew; row += got) {
		size_t want = b->chunk - at;

		if (nnew - row < want)
			want = (size_t)(nnew - row);
		TQ_TRY(source_read(src, b->x + at * dim, want, &got));
		if (got < want)
			return tq_fail(TQ_ERR_FORMAT, "truncated: expected "
			    "%llu rows, got %llu", (unsigned long long)nnew,
			    (unsigned long long)(row + got));
		TQ_TRY(tq_encode_unpacked_threads(q, b->x + at * dim, got,
		    threads, b->codes + at * dim,
		    b->factors + at * TQ_NFACTORS));
		if (b->ivf)
			TQ_TRY(assign_rows(b, b->x + at * dim, got, at));
		if (b->ids != NULL) {
			size_t gi;

			TQ_TRY(tq_ids_read(b->ids, b->idtmp, got, &gi));
			if (gi < got)
				return tq_fail(TQ_ERR_MISMATCH, "the ids file "
				    "has %llu ids but the corpus has more rows",
				    (unsigned long long)(row + gi));
			for (size_t i = 0; i < got; i++)
				wr_le64(b->idbuf + 8 * (at + i), b->idtmp[i]);
		} else {
			for (size_t i = 0; i < got; i++)
				wr_le64(b->idbuf + 8 * (at + i), next + row + i);
		}
		if (ob > 0)
			convert_originals(q, ix->originals, b->x + at * dim,
			    got, b->obuf + at * ob);
		at += got;
		if (at == b->chunk) {
			TQ_TRY(rows_out(b, at));
			at = 0;
		}
	}
	if (at > 0)
		TQ_TRY(rows_out(b, at));
	TQ_TRY(input_done(b, src, nnew));
	return b->ivf ? ivf_emit(b, out) : TQ_OK;
}

enum tq_status
tq_index_append(const char *path, struct tq_reader *corpus,
    struct tq_ids_reader *ids, const struct tq_build_params *p,
    const char *out)
{
	struct tq_build_params bp;
	struct tq_index *ix;
	struct build b;
	struct source src = { corpus, -1, 0, 0, 0 };
	enum tq_status rc;

	tq_clear_detail();
	if (path == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "append: NULL argument");
	TQ_TRY(tq_file_verify(path));
	TQ_TRY(tq_index_open(path, &ix));
	if (corpus != NULL && tq_reader_dim(corpus) != ix->q->dim) {
		rc = tq_fail(TQ_ERR_MISMATCH, "dimension %u does not match "
		    "the index (%u)", tq_reader_dim(corpus), ix->q->dim);
		tq_index_close(ix);
		return rc;
	}
	if (p != NULL)
		bp = *p;
	else
		tq_build_params_default(&bp);
	bp.originals = ix->originals;
	bp.dups = ix->dups;
	bp.dup_ratio = ix->dup_ratio;
	src.dim = ix->q->dim;
	memset(&b, 0, sizeof(b));
	b.q = ix->q;
	b.p = &bp;
	b.ids = corpus != NULL ? ids : NULL;
	if ((rc = build_alloc(&b)) == TQ_OK)
		rc = append_run(&b, ix, &src, out);
	rc = build_end(&b, &src, rc);
	tq_index_close(ix);
	return rc;
}

enum tq_status
tq_index_compact(const char *path, const struct tq_build_params *p,
    const char *out)
{
	return tq_index_append(path, NULL, NULL, p, out);
}
