/*
 * index.c - building an index file in one streaming pass, and opening one.
 *
 * A build reads the corpus in chunks of whole 32-vector blocks, encodes
 * each chunk on several threads (each thread a contiguous range of blocks,
 * so the bytes never depend on the thread count), and writes the codes,
 * factors, ids and originals straight into their reserved sections of the
 * output.  Memory is a few chunks, whatever the corpus size.  The section
 * sizes must be known before the first byte is placed: a stream whose
 * header gives its row count is laid out for that count (its reader fails
 * if it holds another).  When the reader cannot say how many rows it
 * holds (fvecs or text on a pipe), a flat build writes its encoded chunks,
 * as they will stand in the output, to an unlinked temporary file beside
 * it, and copies them into place at the end (flat_emit).
 *
 * With coarse lists (IVF) the encoded rows are not written in input
 * order but spilled, with their list, to an unlinked temporary file in
 * buckets of consecutive lists; the output is then filled list by list,
 * each bucket read back once (see ivf_emit).  The originals do not go
 * through the spill: they go into the output's ORIG as they arrive, and
 * OMAP maps the rows to them (orig_begin).  A pipe needs no spool.
 *
 * An index is a sequence of segments (format 2, tq(5)).  An append builds
 * its rows as a new segment exactly as a fresh index of them, and commits
 * it onto the file after the old ones (append_onto, commit.c); a delete
 * commits new deletion bitmaps (mut_commit_bitmaps).  A compaction, or a
 * change written elsewhere, streams the live rows of every segment out of
 * their blocks into the same chunk buffers as new rows encoded with the
 * index's quantizer, so the result equals a fresh build of those rows.
 * In an IVF index the live rows of each list move by runs, a block at a
 * time, ahead of the list's new rows (ivf_emit).  Every change runs under
 * the index's lock and checks given ids first (ids_load, mut_kill_ids).
 */
#include <errno.h>
#include <fcntl.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "calib.h"
#include "labels.h"

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
	struct tq_labbuild *lab;	/* takes the reader's labels, or NULL */
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

	if (src->fd < 0) {
		TQ_TRY(tq_reader_read(src->r, buf, max, got));
		return tq_lab_input(src->lab, src->r, *got);
	}
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
		TQ_TRY(tq_lab_input(src->lab, src->r, got));
		TQ_TRY(write_all(src->fd, "spool", (const uint8_t *)buf,
		    got * rowbytes, off));
		off += (uint64_t)got * rowbytes;
		src->n += got;
	}
	return TQ_OK;
}

/*
 * A write to `path` that replaces an existing index takes its lock, so
 * that it is serialised with the other writers of it (commit.c); *fd is
 * -1 when there is nothing there to lock.
 */
static enum tq_status
lock_target(const char *path, const struct tq_build_params *p, int *fd)
{
	struct stat st;

	*fd = -1;
	if (strcmp(path, "-") == 0 || stat(path, &st) != 0 ||
	    !S_ISREG(st.st_mode) || st.st_size == 0)
		return TQ_OK;
	return tq_lock_open(path, p, fd);
}

/* ------------------------------------------------------------------------ */
/* Build                                                                     */

struct spill_chunk {
	uint64_t off;
	size_t len;
};

struct build {
	const struct tq_quantizer *q;
	const struct tq_build_params *p;
	struct tq_ids_reader *ids;
	struct tq_filewriter *fw;
	unsigned s_code, s_fact, s_ids, s_orig;
	unsigned s_wdth;
	size_t chunk;		/* rows per chunk, a multiple of 32 */
	size_t block_bytes;
	float *x;
	float *x2;		/* the chunk read ahead (build_run), or NULL */
	struct tq_ahead ahead;
	uint8_t *codes;		/* chunk * dim unpacked codes */
	float *factors;		/* chunk * 3 */
	uint16_t *rho;		/* chunk f16 rho of the encoded rows */
	uint8_t *wbuf;		/* chunk * 2: WDTH of the chunk's rows, LE */
	/*
	 * The chunk in the file's layout: packed from codes and factors,
	 * or (ivf_emit) filled in place.
	 */
	uint8_t *blocks;	/* chunk / 32 * block_bytes */
	float *fblocks;		/* chunk * 3, per block layout */
	uint8_t *idbuf;		/* chunk * 8 */
	/*
	 * Compact factors (FACH): the rows' three floats are in the compact
	 * form of tq_fach_canon from encoding on, and hbuf holds a chunk's
	 * FACH bytes.  cc = |c|^2.
	 */
	int fach;
	double cc;
	uint8_t *hbuf;		/* chunk / 32 * TQ_FACH_BLOCK */
	/*
	 * The new segment's ids: 8 bytes each (IDS) or 4 (ID32), chosen by
	 * ids_width before its sections are sized; id32 holds a chunk's
	 * when 4.  id_top: the largest id known to go in before the rows
	 * are read (given ids; a rewrite's live rows, when some id of the
	 * index passes 2^32 - 1), else 0.
	 */
	unsigned idw;
	uint8_t *id32;		/* chunk * 4 */
	uint64_t id_top;
	uint8_t *obuf;		/* chunk * dim * 4 */
	/*
	 * IVF with originals: ORIG is written as the vectors arrive, each
	 * once (orig_begin, orig_put), and OMAP gives each row its entry
	 * (mbuf, a chunk's); the spill carries the entry, not the original.
	 * narr: entries written.  orank: a rewrite's old entries (orig_old).
	 */
	int omap;
	unsigned s_omap;
	uint8_t *mbuf;		/* chunk * 4 */
	uint64_t narr;
	struct orank *orank;	/* norank, one per old segment, or NULL */
	uint32_t norank;
	/* IVF only */
	int ivf;
	unsigned s_list;
	int resid;		/* residual codes (TQ_QFLAG_RESIDUAL) */
	float *rcent;		/* ... the lists' rotated centroids */
	uint32_t dups;		/* most lists a row goes to */
	uint32_t *lab;		/* chunk * dups: lists of each buffered row,
				   UINT32_MAX for none */
	float *lsc;		/* chunk * dups: their scores */
	/*
	 * The spill file, in buckets of consecutive lists: bucket k holds
	 * lists [lbeg[k], lbeg[k + 1]) and lies in the chunks schunk[k] of
	 * the file, so that writing the lists reads each record once.
	 */
	int sfd;
	uint32_t nbucket;
	uint32_t *lbeg;		/* nbucket + 1 */
	uint8_t *sbuf;		/* nbucket write buffers of bcap bytes */
	size_t *slen, bcap, scap;
	struct spill_chunk **schunk;
	size_t *nchunk, *capchunk;
	uint64_t soff, srows;
	size_t rec;		/* spill record bytes */
	/*
	 * Flat, from a stream of unknown length: chunk_out writes each
	 * chunk's sections to sfd at soff instead of the output.
	 */
	int fspool;
	uint64_t *count;	/* rows a list */
	/*
	 * An append to (or a compaction of) an IVF index: the live old rows
	 * of list l (ocount[l] of them, in old's rows from ooff[l] on, the
	 * deleted ones skipped) come first in it, read from old when the
	 * list is written instead of going through the spill.
	 */
	const struct tq_index *old;
	uint64_t *ocount;
	/*
	 * The output: a new file (fw opened by open_output), or, for a
	 * commit onto an existing index (in_place), the writer the caller
	 * opened; the rows go to segment `part` - 1.
	 */
	int in_place;
	uint32_t part;
	uint64_t seg_rows, seg_blocks;	/* the new segment's */
	/* Given ids, all read before the rows (ids_load), in input order. */
	uint64_t *allids;
	uint64_t nallids;
	uint64_t next_id;	/* one more than the largest id written */
	uint64_t first_id;	/* without given ids: the first new row's */
	uint64_t rows_done;	/* rows taken from allids so far */
	struct tq_labbuild *lbl;	/* labels (labels.c), or NULL */
};

/*
 * The live originals of an old segment in a rewrite: bit j of bits is
 * set when entry j of its ORIG belongs to a live row; such an entry is
 * entry base + (set bits before it) of the new ORIG.  cum[w]: the set
 * bits of words before w.
 */
struct orank {
	uint64_t base;
	uint64_t *bits, *cum;
};

static void
orank_free(struct build *b)
{
	for (uint32_t s = 0; b->orank != NULL && s < b->norank; s++) {
		free(b->orank[s].bits);
		free(b->orank[s].cum);
	}
	free(b->orank);
	b->orank = NULL;
}

static void
build_free(struct build *b)
{
	tq_ahead_cancel(&b->ahead);
	free(b->x);
	free(b->x2);
	free(b->codes);
	free(b->factors);
	free(b->rho);
	free(b->wbuf);
	free(b->blocks);
	free(b->fblocks);
	free(b->hbuf);
	free(b->idbuf);
	free(b->id32);
	free(b->obuf);
	free(b->mbuf);
	orank_free(b);
	free(b->lab);
	free(b->rcent);
	free(b->lsc);
	free(b->sbuf);
	free(b->slen);
	free(b->lbeg);
	for (uint32_t k = 0; b->schunk != NULL && k < b->nbucket; k++)
		free(b->schunk[k]);
	free(b->schunk);
	free(b->nchunk);
	free(b->capchunk);
	free(b->count);
	free(b->ocount);
	free(b->allids);
	tq_lab_free(b->lbl);
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
	b->rho = tq_mallocarray(b->chunk, sizeof(*b->rho));
	b->wbuf = tq_mallocarray(b->chunk, 2);
	if (!b->rho || !b->wbuf)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	b->blocks = tq_mallocarray(b->chunk / TQ_BLOCK, b->block_bytes);
	b->fblocks = tq_mallocarray(b->chunk, TQ_NFACTORS * sizeof(float));
	b->hbuf = tq_mallocarray(b->chunk / TQ_BLOCK, TQ_FACH_BLOCK);
	b->cc = tq_centre_norm2(b->q);
	b->idbuf = tq_mallocarray(b->chunk, 8);
	b->id32 = tq_mallocarray(b->chunk, 4);
	b->obuf = tq_mallocarray(b->chunk, dim * sizeof(float));
	if (!b->x || !b->codes || !b->factors || !b->blocks || !b->fblocks ||
	    !b->hbuf || !b->idbuf || !b->id32 || !b->obuf)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	b->ivf = b->q->ivf.nlist > 0;
	b->resid = (b->q->flags & TQ_QFLAG_RESIDUAL) != 0;
	if (b->resid)
		TQ_TRY(tq_enc_lists_make(b->q, &b->rcent));
	if (b->ivf) {
		b->dups = b->p->dups > 1 ? b->p->dups : 1;
		if (b->dups > b->q->ivf.nlist)
			b->dups = b->q->ivf.nlist;
		b->lab = tq_mallocarray(b->chunk, b->dups * sizeof(*b->lab));
		b->lsc = tq_mallocarray(b->chunk, b->dups * sizeof(*b->lsc));
		b->count = tq_callocarray(b->q->ivf.nlist, sizeof(*b->count));
		b->scap = (size_t)4 << 20;	/* the largest record */
		if (!b->lab || !b->lsc || !b->count)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		b->omap = b->p->originals != TQ_ORIG_NONE;
		if (b->omap && (b->mbuf = tq_mallocarray(b->chunk, 4)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
	}
	return TQ_OK;
}

/*
 * IPAR of an index of n rows in nblocks blocks and `segments` segments
 * (version 2: also the next id), as a section of fw.
 */
static enum tq_status
ipar_write(struct tq_filewriter *fw, uint64_t n, uint64_t nblocks,
    size_t block_bytes, enum tq_originals o, uint32_t dups, float ratio,
    uint32_t segments, uint64_t next_id)
{
	uint8_t ip[TQ_IPAR_SIZE];

	memset(ip, 0, sizeof(ip));
	wr_le64(ip, n);
	wr_le64(ip + 8, nblocks);
	wr_le32(ip + 16, TQ_BLOCK);
	wr_le32(ip + 20, (uint32_t)block_bytes);
	wr_le32(ip + 24, (uint32_t)o);
	wr_le32(ip + 28, TQ_NFACTORS);
	if (dups > 1) {
		wr_le32(ip + 32, dups);
		wr_lef32(ip + 36, ratio);
	}
	wr_le32(ip + 40, segments);
	wr_le64(ip + 48, next_id);
	tq_fw_set_part(fw, 0);
	TQ_TRY(tq_fw_begin(fw, TQ_TAG_IPAR));
	TQ_TRY(tq_fw_write(fw, ip, sizeof(ip)));
	return tq_fw_end(fw);
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
	for (size_t i = 0; i < rows; i++)
		wr_le16(b->wbuf + 2 * i, b->rho[i]);
}

/*
 * The rows' factors from encoding (n rows at f) in the output's form;
 * lab, for residual codes, the lists whose centroids they are about (NULL:
 * the centre).
 */
static void
canon_rows(const struct build *b, float *f, size_t n, const uint32_t *lab)
{
	int l2 = b->q->metric == TQ_METRIC_L2;

	for (size_t i = 0; b->fach && i < n; i++)
		tq_fach_canon(f + i * TQ_NFACTORS, l2, lab != NULL ?
		    (double)b->q->ivf.n2[lab[i]] : b->cc);
}

/*
 * Row r of segment p's factors, in the output's form (tq_fach_canon):
 * from a compact segment to a compact output, the stored values as they
 * are, so that a compaction copies them bit for bit.
 */
static void
old_factors(const struct build *b, const struct tq_part *p, uint64_t r,
    float f[TQ_NFACTORS])
{
	unsigned j = (unsigned)(r % TQ_BLOCK);
	int l2 = b->q->metric == TQ_METRIC_L2;
	double cc;

	if (p->fach != NULL) {
		tq_fach_row(p->fach + r / TQ_BLOCK * TQ_FACH_BLOCK, j, f);
		if (!b->fach) {
			(void)tq_row_centre(b->q, p, r, b->cc, &cc);
			tq_fach_uncanon(f, l2, cc);
		}
		return;
	}
	for (unsigned k = 0; k < TQ_NFACTORS; k++)
		f[k] = p->factors[r / TQ_BLOCK * TQ_BLOCK * TQ_NFACTORS +
		    k * TQ_BLOCK + j];
	if (b->fach) {
		(void)tq_row_centre(b->q, p, r, b->cc, &cc);
		tq_fach_canon(f, l2, cc);
	}
}

/*
 * The factors of a chunk of nblk blocks as the output's FACT or FACH
 * holds them: with make, packs FACH, or makes FACT little-endian in place
 * (once).
 */
static void *
fact_part(struct build *b, size_t nblk, int make, size_t *len)
{
	if (b->fach) {
		if (make)
			tq_fach_pack(b->fblocks, nblk, b->hbuf);
		*len = nblk * TQ_FACH_BLOCK;
		return b->hbuf;
	}
	*len = nblk * TQ_BLOCK * TQ_NFACTORS * sizeof(float);
	for (size_t i = 0; make && i < *len / sizeof(float); i++)
		wr_lef32((uint8_t *)&b->fblocks[i], b->fblocks[i]);
	return b->fblocks;
}

/*
 * Writes the blocks of `rows` rows (b->blocks, b->fblocks); the factors
 * are packed or made little-endian in place.
 */
static enum tq_status
put_blocks(struct build *b, size_t rows)
{
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK, len;
	void *fp = fact_part(b, nblk, 1, &len);

	TQ_TRY(tq_fw_put(b->fw, b->s_code, b->blocks, nblk * b->block_bytes));
	return tq_fw_put(b->fw, b->s_fact, fp, len);
}

#if defined(__x86_64__)
/*
 * f16 originals with the F16C conversion, round to nearest even: the
 * bits of tq_f32_to_f16 for every finite float, and build rows are
 * finite (the readers check).  The scalar loop was 8% of a 1M x 768 IVF
 * build's CPU time (perf), this one is a fraction of a percent.
 */
__attribute__((target("avx,f16c"))) static void
f16_rows_f16c(const float *x, size_t cnt, uint8_t *dst)
{
	size_t i = 0;

	for (; i + 8 <= cnt; i += 8)
		_mm_storeu_si128((__m128i *)(void *)(dst + 2 * i),
		    _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
		    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
	for (; i < cnt; i++)
		wr_le16(dst + 2 * i, tq_f32_to_f16(x[i]));
}

/* F16C when the CPU has it and TQ_ISA does not ask for scalar code. */
static int
f16c_ok(void)
{
	/* tq's own detection: clang 14's __builtin_cpu_supports has no f16c. */
	const char *f = tq_cpu_features(), *p = f;

	while ((p = strstr(p, "f16c")) != NULL) {
		if ((p == f || p[-1] == ' ') && (p[4] == ' ' || p[4] == '\0'))
			return strcmp(tq_kernels()->name, "scalar") != 0;
		p += 4;
	}
	return 0;
}
#endif

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
#if defined(__x86_64__)
	else if (f16c_ok())
		f16_rows_f16c(x, cnt, dst);
#endif
	else
		for (size_t i = 0; i < cnt; i++)
			wr_le16(dst + 2 * i, tq_f32_to_f16(x[i]));
}

static enum tq_status rows_out(struct build *b, size_t rows);

/*
 * Encodes `rows` rows x into the chunk's row `at` on (codes, factors in
 * the output's form, rho); residual codes about the lists assign_rows
 * chose (a build with residual codes has one copy of each row).
 */
static enum tq_status
encode_chunk(struct build *b, const float *x, size_t rows, size_t at,
    unsigned threads)
{
	const struct tq_quantizer *q = b->q;
	struct tq_enc_lists el = { b->resid ? b->lab + at : NULL, b->rcent };

	TQ_TRY(tq_encode_unpacked_rho(q, x, rows, threads, b->resid ? &el :
	    NULL, b->codes + at * q->dim, b->factors + at * TQ_NFACTORS,
	    b->rho + at));
	canon_rows(b, b->factors + at * TQ_NFACTORS, rows, el.list);
	return TQ_OK;
}

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

	TQ_TRY(tq_ivf_nearest(&q->ivf, q->dim, x, rows, cos, 0, m, lab, sc,
	    0));
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

/* The next id of the output: one more than the largest it holds. */
static inline void
see_id(struct build *b, uint64_t id)
{
	if (id >= b->next_id)
		b->next_id = id == UINT64_MAX ? UINT64_MAX : id + 1;
}

/*
 * The ids of the next `rows` input rows into b->idbuf from row `at` on:
 * the given ones (allids), else first, first + 1, ...
 */
static enum tq_status
ids_out(struct build *b, size_t rows, size_t at, uint64_t first)
{
	uint64_t id;

	for (size_t i = 0; i < rows; i++) {
		if (b->allids != NULL) {
			if (b->rows_done >= b->nallids)
				return tq_fail(TQ_ERR_MISMATCH, "the ids file "
				    "has %llu ids but the corpus has more rows",
				    (unsigned long long)b->nallids);
			id = b->allids[b->rows_done];
		} else {
			/* UINT64_MAX stays free: results use it for "none". */
			if (first + i >= UINT64_MAX - b->first_id)
				return tq_fail(TQ_ERR_OVERFLOW, "the new ids would "
				    "pass 2^64 - 2; give them with an ids file");
			id = b->first_id + first + i;
		}
		b->rows_done++;
		tq_lab_new(b->lbl, at + i, first + i);
		wr_le64(b->idbuf + 8 * (at + i), id);
		see_id(b, id);
	}
	return TQ_OK;
}

static enum tq_status
write_chunk(struct build *b, size_t rows, uint64_t row0, unsigned threads)
{
	const struct tq_quantizer *q = b->q;

	if (b->ivf)
		TQ_TRY(assign_rows(b, b->x, rows, 0));
	TQ_TRY(encode_chunk(b, b->x, rows, 0, threads));

	TQ_TRY(ids_out(b, rows, 0, row0));
	if (b->p->originals != TQ_ORIG_NONE)
		convert_originals(q, b->p->originals, b->x, rows, b->obuf);
	return rows_out(b, rows);
}

/* Reserves CODE, FACT, IDS (or ID32) and ORIG for n rows. */
static enum tq_status
reserve_rows(struct build *b, uint64_t n, uint64_t nblocks)
{
	uint64_t len;

	if (ck_mul64(nblocks, b->block_bytes, &len))
		return tq_fail(TQ_ERR_OVERFLOW, "index too large");
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_CODE, len, &b->s_code));
	if (b->fach)
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_FACH,
		    nblocks * TQ_FACH_BLOCK, &b->s_fact));
	else
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_FACT,
		    nblocks * TQ_BLOCK * TQ_NFACTORS * sizeof(float),
		    &b->s_fact));
	TQ_TRY(tq_fw_reserve(b->fw, b->idw == 4 ? TQ_TAG_ID32 : TQ_TAG_IDS,
	    n * b->idw, &b->s_ids));
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_WDTH, n * 2, &b->s_wdth));
	if (b->omap) {
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_OMAP, n * 4, &b->s_omap));
	} else if (b->p->originals != TQ_ORIG_NONE) {
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
	(void)extra;
	if (b->allids != NULL && b->nallids != n)
		return tq_fail(TQ_ERR_MISMATCH, "the ids file has "
		    "more ids than the corpus has rows (%llu)",
		    (unsigned long long)n);
	return TQ_OK;
}

/*
 * The parts of a chunk of `rows` rows as the output's CODE, FACT, IDS, WDTH and
 * ORIG sections hold them (the factors made little-endian by put_blocks
 * or fspool_chunk): their buffers and lengths; returns how many.
 */
static unsigned
chunk_parts(struct build *b, size_t rows, int make, void *part[5],
    size_t len[5])
{
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK;
	unsigned k = 0;

	part[k] = b->blocks;
	len[k++] = nblk * b->block_bytes;
	part[k] = fact_part(b, nblk, make, &len[k]);
	k++;
	part[k] = b->idbuf;
	len[k++] = rows * 8;
	part[k] = b->wbuf;
	len[k++] = rows * 2;
	if (b->p->originals != TQ_ORIG_NONE) {
		part[k] = b->obuf;
		len[k++] = rows * b->q->dim *
		    (b->p->originals == TQ_ORIG_F32 ? 4 : 2);
	}
	return k;
}

/* A chunk of a flat build from a stream of unknown length to the spool. */
static enum tq_status
fspool_chunk(struct build *b, size_t rows)
{
	void *part[5];
	size_t len[5];
	unsigned np = chunk_parts(b, rows, 1, part, len);

	for (unsigned k = 0; k < np; k++) {
		TQ_TRY(write_all(b->sfd, "spool", part[k], len[k], b->soff));
		b->soff += len[k];
	}
	return TQ_OK;
}

/* The ids of `rows` rows of the chunk (idbuf) out in the segment's width. */
static enum tq_status
ids_put(struct build *b, size_t rows)
{
	if (b->idw == 8)
		return tq_fw_put(b->fw, b->s_ids, b->idbuf, rows * 8);
	for (size_t i = 0; i < rows; i++)
		wr_le32(b->id32 + 4 * i, (uint32_t)rd_le64(b->idbuf + 8 * i));
	return tq_fw_put(b->fw, b->s_ids, b->id32, rows * 4);
}

/* Writes `rows` rows of the chunk, its codes already in b->blocks. */
static enum tq_status
chunk_out(struct build *b, size_t rows)
{
	TQ_TRY(tq_lab_chunk(b->lbl, rows, b->idbuf));
	if (b->fspool)
		return fspool_chunk(b, rows);
	TQ_TRY(put_blocks(b, rows));
	TQ_TRY(ids_put(b, rows));
	TQ_TRY(tq_fw_put(b->fw, b->s_wdth, b->wbuf, rows * 2));
	if (b->omap)
		TQ_TRY(tq_fw_put(b->fw, b->s_omap, b->mbuf, rows * 4));
	else if (b->p->originals != TQ_ORIG_NONE)
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
	return tq_orig_bytes(b->p->originals, b->q->dim);
}

/*
 * Opens the output, unless the caller opened a commit onto an existing
 * index or it is open already; its rows go to segment b->part - 1.
 */
static enum tq_status
open_file(struct build *b, const char *path)
{
	if (b->in_place || b->fw != NULL)
		return TQ_OK;
	TQ_TRY(tq_fw_open(path, TQ_FILE_INDEX, 16, &b->fw));
	TQ_TRY(tq_quantizer_write_sections(b->q, b->fw));
	b->part = 1;
	return TQ_OK;
}

/*
 * IVF with originals: the output's ORIG is open from the start of the
 * input, and each vector's original goes into it as it arrives
 * (orig_put), never through the spill.  ORIG ends when the lists are
 * written (ivf_emit), and OMAP then gives each row its entry.
 */
static enum tq_status
orig_begin(struct build *b, const char *path)
{
	TQ_TRY(open_file(b, path));
	tq_fw_set_part(b->fw, b->part);
	TQ_TRY(tq_fw_begin(b->fw, TQ_TAG_ORIG));
	tq_fw_set_part(b->fw, 0);
	return TQ_OK;
}

/* OMAP entries are u32: the most originals one segment holds. */
#define ORIG_MAX ((uint64_t)UINT32_MAX + 1)

/* n originals of ob bytes at src, the next entries of ORIG. */
static enum tq_status
orig_put(struct build *b, const uint8_t *src, uint64_t n)
{
	if (n > ORIG_MAX - b->narr)
		return tq_fail(TQ_ERR_OVERFLOW, "more than %llu vectors with "
		    "originals in one segment of an IVF index: build it in "
		    "shards or appends", (unsigned long long)ORIG_MAX);
	TQ_TRY(tq_fw_write(b->fw, src, (size_t)n * orig_bytes(b)));
	b->narr += n;
	return TQ_OK;
}

/*
 * A spill record: u32 list, packed codes, the factors (host floats),
 * the id (8 bytes, little-endian), with originals the row's OMAP entry
 * (u32, little-endian: the original itself went to the output as it
 * arrived), rho (f16, 2 bytes, host order) and, in a build with labels,
 * the row's label number (8 bytes, little-endian; labels.c).  10M x 768
 * with f16 originals: the spill peaked at 20.0 GB when the records held
 * the originals (2.09 times the index written in all), at 4.18 GB
 * without (1.23 times).
 */
/*
 * Buckets: up to SPILL_BUCKETS of consecutive lists, each with a write
 * buffer, SPILL_BUFFERS bytes in all.  The lists are written a bucket at a
 * time, reading that bucket's records only: the spill is read once when a
 * bucket fits in --memory (a corpus of up to SPILL_BUCKETS windows), not
 * once per window.  10M x 768 with 76 windows read the 20 GB spill 76
 * times (1.5 TB).
 */
#define SPILL_BUCKETS 256u
#define SPILL_BUFFERS ((size_t)32 << 20)

static enum tq_status
spill_open(struct build *b, const char *path)
{
	uint32_t nl = b->q->ivf.nlist, k;
	char *tmp;

	b->rec = 4 + tq_code_bytes(b->q) + TQ_NFACTORS * sizeof(float) + 8 +
	    (b->omap ? 4 : 0) + 2 + (b->lbl != NULL ? 8 : 0);
	if (b->rec > b->scap)
		return tq_fail(TQ_ERR_OVERFLOW, "rows too large to spill");
	b->nbucket = nl < SPILL_BUCKETS ? nl : SPILL_BUCKETS;
	b->bcap = SPILL_BUFFERS / b->nbucket / b->rec * b->rec;
	if (b->bcap < b->rec)
		b->bcap = b->rec;
	b->sbuf = tq_mallocarray(b->nbucket, b->bcap);
	b->slen = tq_callocarray(b->nbucket, sizeof(*b->slen));
	b->lbeg = tq_callocarray((size_t)b->nbucket + 1, sizeof(*b->lbeg));
	b->schunk = tq_callocarray(b->nbucket, sizeof(*b->schunk));
	b->nchunk = tq_callocarray(b->nbucket, sizeof(*b->nchunk));
	b->capchunk = tq_callocarray(b->nbucket, sizeof(*b->capchunk));
	if (!b->sbuf || !b->slen || !b->lbeg || !b->schunk || !b->nchunk ||
	    !b->capchunk)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	/* Bucket of list l: l * nbucket / nl; lbeg[k], its first list. */
	for (k = 0; k <= b->nbucket; k++)
		b->lbeg[k] = (uint32_t)(((uint64_t)k * nl + b->nbucket - 1) /
		    b->nbucket);
	if ((b->sfd = tq_tmpfile_beside(path, &tmp)) == -1)
		return tq_fail(TQ_ERR_IO, "cannot create a spill file beside "
		    "it: %s", strerror(errno));
	unlink(tmp);
	free(tmp);
	return TQ_OK;
}

/* Writes bucket k's buffer to the end of the spill, as a chunk of it. */
static enum tq_status
spill_flush(struct build *b, uint32_t k)
{
	struct spill_chunk *c;

	if (b->slen[k] == 0)
		return TQ_OK;
	if (b->nchunk[k] == b->capchunk[k]) {
		size_t cap = b->capchunk[k] ? 2 * b->capchunk[k] : 16;

		if ((c = realloc(b->schunk[k], cap * sizeof(*c))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		b->schunk[k] = c;
		b->capchunk[k] = cap;
	}
	TQ_TRY(write_all(b->sfd, "spill", b->sbuf + k * b->bcap, b->slen[k],
	    b->soff));
	b->schunk[k][b->nchunk[k]++] = (struct spill_chunk){ b->soff,
	    b->slen[k] };
	b->soff += b->slen[k];
	b->slen[k] = 0;
	return TQ_OK;
}

static enum tq_status
spill_rows(struct build *b, size_t rows)
{
	const struct tq_quantizer *q = b->q;
	size_t cb = tq_code_bytes(q), ob = b->omap ? 4 : 0;
	uint64_t arr = b->narr;	/* orig_put keeps it below 2^32 */

	if (b->omap)
		TQ_TRY(orig_put(b, b->obuf, rows));
	for (size_t e = 0; e < rows * b->dups; e++) {
		size_t i = e / b->dups;
		uint32_t k;
		uint8_t *r;

		if (b->lab[e] == UINT32_MAX)
			continue;
		k = (uint32_t)((uint64_t)b->lab[e] * b->nbucket /
		    b->q->ivf.nlist);
		if (b->slen[k] + b->rec > b->bcap)
			TQ_TRY(spill_flush(b, k));
		r = b->sbuf + k * b->bcap + b->slen[k];
		wr_le32(r, b->lab[e]);
		tq_pack_row(q, b->codes + i * q->dim, r + 4);
		memcpy(r + 4 + cb, b->factors + i * TQ_NFACTORS,
		    TQ_NFACTORS * sizeof(float));
		memcpy(r + 4 + cb + TQ_NFACTORS * sizeof(float),
		    b->idbuf + 8 * i, 8);
		if (ob > 0)
			wr_le32(r + 4 + cb + TQ_NFACTORS * sizeof(float) + 8,
			    (uint32_t)(arr + i));
		memcpy(r + 4 + cb + TQ_NFACTORS * sizeof(float) + 8 + ob,
		    &b->rho[i], 2);
		if (b->lbl != NULL)	/* the new row's label: its number */
			wr_le64(r + b->rec - 8, tq_lab_new_of(b->lbl, i));
		b->slen[k] += b->rec;
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
	size_t cb = tq_code_bytes(q), ob = b->omap ? 4 : 0;
	float *fb = b->fblocks + at / TQ_BLOCK * TQ_BLOCK * TQ_NFACTORS +
	    at % TQ_BLOCK, f[TQ_NFACTORS];

	tq_block_put_row(q, r + 4, (unsigned)(at % TQ_BLOCK),
	    b->blocks + at / TQ_BLOCK * b->block_bytes);
	memcpy(f, r + 4 + cb, sizeof(f));
	for (unsigned k = 0; k < TQ_NFACTORS; k++)
		fb[k * TQ_BLOCK] = f[k];
	memcpy(b->idbuf + 8 * at, r + 4 + cb + TQ_NFACTORS * sizeof(float), 8);
	if (ob > 0)	/* the OMAP entry, as it will stand */
		memcpy(b->mbuf + 4 * at, r + 4 + cb + TQ_NFACTORS *
		    sizeof(float) + 8, 4);
	memcpy(b->wbuf + 2 * at, r + 4 + cb + TQ_NFACTORS * sizeof(float) + 8 +
	    ob, 2);
	if (b->lbl != NULL)
		tq_lab_new(b->lbl, at, rd_le64(r + b->rec - 8));
}

/* Zeros the chunk's blocks: the codes and factors of absent rows. */
static void
chunk_clear(struct build *b)
{
	memset(b->blocks, 0, b->chunk / TQ_BLOCK * b->block_bytes);
	memset(b->fblocks, 0, b->chunk * TQ_NFACTORS * sizeof(float));
}

/*
 * The width of the new segment's ids (tq(5) ID32): 4 bytes when every id
 * it will hold is below 2^32, else 8.  They are the given ids or, without
 * them, ngen new ones from first_id on, and a rewrite's live rows'; the
 * largest of those known before the rows are read is id_top.  A fresh
 * build of the same rows with the same ids chooses the same.
 */
static void
ids_width(struct build *b, uint64_t ngen)
{
	uint64_t top = b->id_top;

	if (b->allids == NULL && ngen > 0) {
		uint64_t last = ngen - 1 > UINT64_MAX - b->first_id ?
		    UINT64_MAX : b->first_id + (ngen - 1);

		top = last > top ? last : top;
	}
	b->idw = top <= UINT32_MAX ? 4 : 8;
}

/*
 * Opens the output (unless the caller opened a commit onto an existing
 * index) and sizes the sections of its new segment for n rows, ngen of
 * them new rows without given ids; IPAR is written last (build_end),
 * when the ids are known.
 */
static enum tq_status
open_output(struct build *b, const char *path, uint64_t n, uint64_t ngen)
{
	uint64_t nblocks = (n + TQ_BLOCK - 1) / TQ_BLOCK;

	ids_width(b, ngen);
	TQ_TRY(open_file(b, path));
	b->seg_rows = n;
	b->seg_blocks = nblocks;
	tq_fw_set_part(b->fw, b->part);
	TQ_TRY(reserve_rows(b, n, nblocks));
	tq_fw_set_part(b->fw, 0);
	return TQ_OK;
}

/* Local row r of segment p (live) into row `at` of the chunk buffers. */
static void
old_row_to_chunk(struct build *b, const struct tq_part *p, uint64_t r,
    size_t at)
{
	const struct tq_quantizer *q = b->q;
	unsigned j = (unsigned)(r % TQ_BLOCK);
	size_t ob = orig_bytes(b);
	uint64_t id = tq_part_id(p, r);

	tq_unpack_block_row(q, p->codes + r / TQ_BLOCK * b->block_bytes, j,
	    b->codes + at * q->dim);
	old_factors(b, p, r, b->factors + at * TQ_NFACTORS);
	/* A segment written before WDTH: unknown. */
	b->rho[at] = p->wdth != NULL ? rd_le16(p->wdth + 2 * r) : 0x7c00u;
	wr_le64(b->idbuf + 8 * at, id);
	if (ob > 0)
		memcpy(b->obuf + at * ob, tq_part_orig(p, r, ob), ob);
	tq_lab_old(b->lbl, p, r, 1, at);
	see_id(b, id);
}

/* The live rows among local rows [r0, r1) of segment p. */
static uint64_t
live_between(const struct tq_part *p, uint64_t r0, uint64_t r1)
{
	uint64_t n = r1 - r0;

	for (uint64_t r = r0; p->tomb != NULL && r < r1; r++)
		n -= (uint64_t)tq_part_dead(p, r);
	return n;
}

/*
 * Local rows [r, r + len) of segment p (live) into rows [at, at + len)
 * of the chunk's blocks (ivf_emit, and the whole chunks of a flat
 * append).  The codes move a block at a time, shifted to their new
 * offset mod 32, not unpacked and packed again row by row (an eighth of
 * an IVF append was that).
 */
static void
old_rows_to_chunk(struct build *b, const struct tq_part *p, uint64_t r,
    size_t len, size_t at)
{
	size_t ob = orig_bytes(b);

	tq_block_copy_rows(b->q, p->codes, r, b->blocks, at, len);
	for (size_t i = 0; i < len; i++) {
		size_t d = at + i;
		float *fd = b->fblocks + d / TQ_BLOCK * TQ_BLOCK *
		    TQ_NFACTORS + d % TQ_BLOCK, f[TQ_NFACTORS];

		old_factors(b, p, r + i, f);
		for (unsigned k = 0; k < TQ_NFACTORS; k++)
			fd[k * TQ_BLOCK] = f[k];
	}
	for (size_t i = 0; i < len; i++) {
		uint64_t id = tq_part_id(p, r + i);

		wr_le64(b->idbuf + 8 * (at + i), id);
		see_id(b, id);
	}
	if (p->wdth != NULL)
		memcpy(b->wbuf + 2 * at, p->wdth + 2 * r, 2 * len);
	else
		for (size_t i = 0; i < len; i++)
			wr_le16(b->wbuf + 2 * (at + i), 0x7c00u);
	if (b->omap) {
		const struct orank *o = &b->orank[p - b->old->parts];

		for (size_t i = 0; i < len; i++) {
			uint64_t j = tq_part_orig_index(p, r + i);
			uint64_t w = o->bits[j / 64] &
			    ((UINT64_C(1) << (j % 64)) - 1);

			wr_le32(b->mbuf + 4 * (at + i), (uint32_t)(o->base +
			    o->cum[j / 64] + (uint64_t)__builtin_popcountll(w)));
		}
	} else if (ob > 0) {
		/* One large read, not a fault a page (MADV_RANDOM). */
		tq_map_willneed(p->orig + r * ob, p->orig + (r + len) * ob);
		memcpy(b->obuf + at * ob, p->orig + r * ob, len * ob);
	}
	tq_lab_old(b->lbl, p, r, len, at);
}

/*
 * A cursor over the live old rows of one list (IVF) or of the whole
 * index (flat, list UINT32_MAX): segment pi, local rows [r, end).
 */
struct ocur {
	uint32_t pi, list;
	uint64_t r, end;
};

static void
ocur_bounds(const struct tq_index *ix, struct ocur *c)
{
	const struct tq_part *p = &ix->parts[c->pi];

	if (c->list == UINT32_MAX) {
		c->r = 0;
		c->end = p->n;
	} else {
		c->r = tq_list_off(p, c->list);
		c->end = tq_list_off(p, c->list + 1);
	}
}

/* Moves c to the next live row (of a later segment if need be). */
static void
ocur_skip(const struct tq_index *ix, struct ocur *c)
{
	for (;;) {
		const struct tq_part *p = &ix->parts[c->pi];

		while (c->r < c->end && tq_part_dead(p, c->r))
			c->r++;
		if (c->r < c->end || c->pi + 1 >= ix->nparts)
			return;
		c->pi++;
		ocur_bounds(ix, c);
	}
}

static void
ocur_start(const struct tq_index *ix, uint32_t list, struct ocur *c)
{
	c->pi = 0;
	c->list = list;
	ocur_bounds(ix, c);
	ocur_skip(ix, c);
}

/*
 * Moves at most max live rows at c (which has one) into the chunk from
 * row `at` on, a run within one segment; returns how many.
 */
static size_t
ocur_take(struct build *b, const struct tq_index *ix, struct ocur *c,
    size_t max, size_t at)
{
	const struct tq_part *p = &ix->parts[c->pi];
	size_t len = 1;

	while (len < max && c->r + len < c->end &&
	    !tq_part_dead(p, c->r + len))
		len++;
	old_rows_to_chunk(b, p, c->r, len, at);
	c->r += len;
	ocur_skip(ix, c);
	return len;
}

/*
 * Gives the disk blocks of bucket k's spill chunks back once its lists are
 * written, so that the spill shrinks as the index grows: the disk a build
 * needs is about one index, not two.  Best effort (a file system without
 * hole punching keeps them until the spill is closed).
 */
static void
spill_release(struct build *b, uint32_t k)
{
#ifdef FALLOC_FL_PUNCH_HOLE
	for (size_t c = 0; c < b->nchunk[k]; c++)
		if (fallocate(b->sfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
		    (off_t)b->schunk[k][c].off, (off_t)b->schunk[k][c].len) != 0)
			return;
#else
	(void)b;
	(void)k;
#endif
}

/*
 * Writes the spilled rows list by list, a bucket of lists at a time.
 * Output rows [r0, r1) of a bucket form a window of at most p->memory
 * bytes of records; one sequential read of the bucket's chunks places
 * every record of the window (its position is its list's offset plus the
 * records of that list seen before it), then the window goes out through
 * the chunk buffers.  The spill is read once, or once per window of a
 * bucket larger than p->memory.
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
	struct ocur oc = { 0, 0, 0, 0 };	/* the list being written's */
	size_t at = 0;		/* rows in the chunk buffers */
	enum tq_status st = TQ_OK;

	/* Copies in more lists make the row count known only now. */
	if (b->omap)
		TQ_TRY(tq_fw_end(b->fw));
	TQ_TRY(open_output(b, path, n, b->rows_done));
	for (uint32_t k = 0; k < b->nbucket; k++)
		TQ_TRY(spill_flush(b, k));
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

	/*
	 * Bucket by bucket, in windows of at most win rows of its lists; a
	 * window reads its bucket's chunks only.  The chunk buffers fill
	 * across windows (at), so the blocks are those of one pass.
	 */
	for (uint32_t k = 0, l = 0; k < b->nbucket; k++) {
	    uint32_t la = b->lbeg[k], lz = b->lbeg[k + 1];

	    for (uint64_t r0 = off[la]; r0 < off[lz]; r0 += win) {
		uint64_t r1 = off[lz] - r0 < win ? off[lz] : r0 + win;

		for (uint32_t j = la; j < lz; j++)
			cur[j] = off[j] + (b->old != NULL ? b->ocount[j] : 0);
		for (size_t c = 0; c < b->nchunk[k]; c++) {
		    const struct spill_chunk *ck = &b->schunk[k][c];

		    for (size_t so = 0; so < ck->len; ) {
			size_t len = ck->len - so < rbytes ? ck->len - so :
			    rbytes;

			if ((st = read_all(b->sfd, "spill", rbuf, len,
			    ck->off + so)) != TQ_OK)
				goto done;
			for (size_t e = 0; e < len; e += b->rec) {
				uint32_t li = rd_le32(rbuf + e);
				uint64_t pos;

				if (li < la || li >= lz) {
					st = tq_fail(TQ_ERR_IO, "spill file "
					    "damaged");
					goto done;
				}
				pos = cur[li]++;
				if (pos >= r0 && pos < r1)
					memcpy(wbuf + (pos - r0) * b->rec,
					    rbuf + e, b->rec);
			}
			so += len;
		    }
		}
		for (uint64_t r = r0; r < r1; ) {
			size_t len = 1;

			if (at == 0 && n - r < b->chunk)
				chunk_clear(b);
			while (b->old != NULL && off[l + 1] <= r)
				l++;
			if (b->old != NULL && r - off[l] < b->ocount[l]) {
				/*
				 * A run of live old rows, within the list's,
				 * the window, the chunk and one segment.  A
				 * list's rows are visited in order, so oc only
				 * moves on.
				 */
				uint64_t e = off[l] + b->ocount[l];

				if (r == off[l])
					ocur_start(b->old, (uint32_t)l, &oc);
				if (e > r1)
					e = r1;
				if (e - r > b->chunk - at)
					e = r + (b->chunk - at);
				len = ocur_take(b, b->old, &oc, (size_t)(e - r),
				    at);
			} else
				record_to_chunk(b, wbuf + (r - r0) * b->rec,
				    at);
			r += len;
			if ((at += len) == b->chunk) {
				if ((st = chunk_out(b, at)) != TQ_OK)
					goto done;
				at = 0;
				if (b->p->progress != NULL)
					b->p->progress(b->p->progress_arg,
					    "writing lists", r, n);
			}
		}
	    }
	    spill_release(b, k);
	}
	if (at > 0 && (st = chunk_out(b, at)) != TQ_OK)
		goto done;
	if (b->p->progress != NULL)
		b->p->progress(b->p->progress_arg, "writing lists", n, n);
done:
	free(off);
	free(cur);
	free(lbuf);
	free(wbuf);
	free(rbuf);
	return st;
}

static enum tq_status index_open(const char *path, int fd,
    struct tq_index **out);

/* The CALB section of ix by cp (calib.c), the queries checked first. */
static enum tq_status
calib_make(const struct tq_index *ix, const struct tq_calib_params *cp,
    uint8_t **calb, size_t *len)
{
	if (cp->queries != NULL && cp->nq > 0 && cp->dim != ix->q->dim)
		return tq_fail(TQ_ERR_MISMATCH, "calibration queries of "
		    "dimension %u, the index has %u", cp->dim, ix->q->dim);
	return tq_calib_compute(ix, cp, calb, len);
}

/* Appends the CALB section calb to fw. */
static enum tq_status
calb_write(struct tq_filewriter *fw, const uint8_t *calb, size_t len)
{
	TQ_TRY(tq_fw_begin(fw, TQ_TAG_CALB));
	TQ_TRY(tq_fw_write(fw, calb, len));
	return tq_fw_end(fw);
}

/*
 * A build's own calibration, made before its file is renamed into place:
 * the file is sealed under its temporary name, mapped as an index, and
 * its CALB committed onto it (commit 2), all while the destination still
 * holds the old file.
 */
static enum tq_status
calibrate_sealed(struct tq_filewriter *fw, const struct tq_build_params *p)
{
	const struct tq_calib_params *cp = p->calibrate;
	struct tq_filewriter *cw = NULL;
	struct tq_index *ix = NULL;
	uint8_t *calb = NULL;
	size_t len;
	enum tq_status rc;

	if ((rc = tq_fw_seal(fw)) != TQ_OK ||
	    (rc = index_open(NULL, tq_fw_fd(fw), &ix)) != TQ_OK)
		return rc;
	if (cp->min_live > 0 && (ix->originals == TQ_ORIG_NONE ||
	    ix->live < cp->min_live))
		goto done;	/* too small to calibrate unasked */
	if (p->progress != NULL)
		p->progress(p->progress_arg, "calibrating", 0, 0);
	if ((rc = calib_make(ix, cp, &calb, &len)) != TQ_OK ||
	    (rc = tq_fault_point("calibrated")) != TQ_OK ||
	    (rc = tq_fw_open_commit(tq_fw_fd(fw), &ix->file, &cw)) != TQ_OK)
		goto done;
	for (uint32_t i = 0; i < ix->file.nsections; i++)
		if ((rc = tq_fw_keep(cw, &ix->file.sec[i])) != TQ_OK)
			break;
	if (rc != TQ_OK || (rc = calb_write(cw, calb, len)) != TQ_OK) {
		tq_fw_abort(cw);
		goto done;
	}
	rc = tq_fw_commit(cw);	/* frees cw either way */
done:
	free(calb);
	tq_index_close(ix);
	return rc;
}

/*
 * The end of a build or an append with status rc: the output committed
 * (renamed into place) or abandoned, the spool closed, the buffers freed.
 */
static enum tq_status
build_end(struct build *b, struct source *src, enum tq_status rc)
{
	if (rc == TQ_OK && !b->in_place && b->lbl != NULL)
		rc = tq_lab_write(b->lbl, b->fw, b->part);
	if (rc == TQ_OK && !b->in_place)
		rc = ipar_write(b->fw, b->seg_rows, b->seg_blocks,
		    b->block_bytes, b->p->originals, b->ivf && b->dups > 1 ?
		    b->dups : 0, b->p->dup_ratio, 1, b->next_id);
	if (rc == TQ_OK && !b->in_place && b->p->calibrate != NULL)
		rc = calibrate_sealed(b->fw, b->p);
	if (b->in_place)
		;	/* the caller commits */
	else if (rc == TQ_OK)
		rc = tq_fw_commit(b->fw);	/* frees fw either way */
	else
		tq_fw_abort(b->fw);
	if (src->fd >= 0)
		close(src->fd);
	build_free(b);
	return rc;
}

/* Given ids must number the rows: checked before any row is encoded. */
static enum tq_status
ids_count_check(const struct build *b, uint64_t n)
{
	if (b->allids != NULL && b->nallids < n)
		return tq_fail(TQ_ERR_MISMATCH, "the ids file has %llu ids "
		    "but the corpus has %llu rows",
		    (unsigned long long)b->nallids, (unsigned long long)n);
	if (b->allids != NULL && b->nallids > n)
		return tq_fail(TQ_ERR_MISMATCH, "the ids file has more ids "
		    "than the corpus has rows (%llu)", (unsigned long long)n);
	return tq_lab_count_check(b->lbl, n);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The first position of the sorted set[0 .. m) whose id is not below id. */
static size_t
idset_find(const uint64_t *set, size_t m, uint64_t id)
{
	size_t lo = 0, hi = m;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (set[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int
idset_has(const uint64_t *set, size_t m, uint64_t id)
{
	size_t lo = idset_find(set, m, id);

	return lo < m && set[lo] == id;
}

/*
 * Reads every given id (b->ids) into b->allids, in input order, and a
 * sorted copy into *sorted; fails naming the first id that repeats an
 * earlier one.  Memory: 16 bytes a row.
 */
static enum tq_status
ids_load(struct build *b, uint64_t **sorted)
{
	size_t cap = 4096, got;
	uint64_t *set, *dup = NULL, *first = NULL;
	size_t nd = 0;
	enum tq_status rc = TQ_OK;

	*sorted = NULL;
	if (b->ids == NULL)
		return TQ_OK;
	if ((b->allids = tq_mallocarray(cap, 8)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	for (;;) {
		if (b->nallids == cap) {
			uint64_t *n2;

			if (cap > SIZE_MAX / 16 || (n2 = realloc(b->allids,
			    2 * cap * 8)) == NULL)
				return tq_fail(TQ_ERR_NOMEM, "out of memory "
				    "for %zu ids", cap);
			b->allids = n2;
			cap *= 2;
		}
		TQ_TRY(tq_ids_read(b->ids, b->allids + b->nallids,
		    cap - b->nallids, &got));
		if (got == 0)
			break;
		b->nallids += got;
	}
	if ((set = tq_mallocarray(b->nallids + 1, 8)) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	memcpy(set, b->allids, b->nallids * 8);
	qsort(set, b->nallids, 8, cmp_u64);
	if (b->nallids > 0 && set[b->nallids - 1] > b->id_top)
		b->id_top = set[b->nallids - 1];	/* ids_width */
	for (size_t i = 1; i < b->nallids; i++)
		if (set[i] == set[i - 1] && (nd == 0 || dup[nd - 1] != set[i])) {
			uint64_t *d2 = realloc(dup, (nd + 1) * 8);

			if (d2 == NULL) {
				rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
				goto done;
			}
			dup = d2;
			dup[nd++] = set[i];
		}
	if (nd > 0) {
		/* The first row whose id an earlier row has. */
		if ((first = tq_mallocarray(nd, 8)) == NULL) {
			rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
			goto done;
		}
		memset(first, 0xff, nd * 8);
		for (uint64_t r = 0; r < b->nallids; r++) {
			uint64_t id = b->allids[r];
			size_t lo = idset_find(dup, nd, id);

			if (lo == nd || dup[lo] != id)
				continue;
			if (first[lo] != UINT64_MAX) {
				rc = tq_fail(TQ_ERR_DUPLICATE, "id %llu "
				    "repeats: rows %llu and %llu of the ids",
				    (unsigned long long)id,
				    (unsigned long long)first[lo],
				    (unsigned long long)r);
				goto done;
			}
			first[lo] = r;
		}
	}
done:
	free(dup);
	free(first);
	if (rc != TQ_OK)
		free(set);
	else
		*sorted = set;
	return rc;
}

/* The rows of the chunk that starts at row of n. */
static size_t
chunk_rows(const struct build *b, uint64_t n, uint64_t row)
{
	return n - row < b->chunk ? (size_t)(n - row) : b->chunk;
}

/*
 * A flat build from a stream of unknown length: the n rows' chunks, as
 * fspool_chunk wrote them (every chunk but the last whole), into the
 * output's sections.  Bytes written: the index, and its rows once more in
 * the spool; never the float input.
 */
static enum tq_status
flat_emit(struct build *b, const char *path, uint64_t n)
{
	uint64_t off = 0;

	b->fspool = 0;
	TQ_TRY(open_output(b, path, n, n));
	for (uint64_t row = 0; row < n; row += b->chunk) {
		size_t rows = chunk_rows(b, n, row);
		unsigned slot[5] = { b->s_code, b->s_fact, b->s_ids, b->s_wdth,
		    b->s_orig };
		void *part[5];
		size_t len[5];
		unsigned np = chunk_parts(b, rows, 0, part, len);

		for (unsigned k = 0; k < np; k++) {
			TQ_TRY(read_all(b->sfd, "spool", part[k], len[k], off));
			off += len[k];
			if (part[k] == b->idbuf)
				TQ_TRY(ids_put(b, rows));
			else
				TQ_TRY(tq_fw_put(b->fw, slot[k], part[k],
				    len[k]));
		}
		if (b->p->progress != NULL)
			b->p->progress(b->p->progress_arg, "writing",
			    row + rows, n);
	}
	return TQ_OK;
}

/* What fill_chunk reads from. */
struct fill {
	struct source *src;
	int open_end;
};

/*
 * One chunk of up to max rows into buf.  A stream of unknown length is
 * read until the chunk is full or the stream ends, so that every chunk
 * but the last is whole (the spooled blocks are final); a counted one
 * in one read, whose shortfall the caller reports as a truncation.
 */
static enum tq_status
fill_chunk(void *arg, void *buf, size_t max, size_t *got)
{
	const struct fill *f = arg;
	float *x = buf;
	size_t more;

	TQ_TRY(source_read(f->src, x, max, got));
	while (f->open_end && *got > 0 && *got < max) {
		TQ_TRY(source_read(f->src, x + *got * f->src->dim,
		    max - *got, &more));
		if (more == 0)
			break;
		*got += more;
	}
	return TQ_OK;
}

static enum tq_status
build_run(struct build *b, struct source *src, const char *path)
{
	uint64_t n, row = 0;
	unsigned threads = b->p->threads ? b->p->threads : tq_ncpu();
	size_t got, want;
	int64_t claimed = -1;
	int open_end, ahead;
	struct fill fill;

	/*
	 * A flat index's sections are sized before its first row.  A stream
	 * whose header gives its row count is laid out for it (the reader
	 * fails on any other count, and the output is abandoned); one of
	 * unknown length goes encoded to a spool, in the output's form
	 * (fspool_chunk, flat_emit): a 10M x 768 pipe spooled 31 GB of
	 * floats before.  An IVF build spills its encoded rows anyway and
	 * sizes the output only when the lists are written: it reads the
	 * stream to its end.
	 */
	if (src->fd < 0 && !b->ivf)
		claimed = tq_reader_claimed(src->r);
	open_end = src->fd < 0 && tq_reader_count(src->r) < 0 &&
	    claimed < 0;
	n = open_end ? UINT64_MAX : src->fd >= 0 ? src->n : claimed >= 0 ?
	    (uint64_t)claimed : (uint64_t)tq_reader_count(src->r);
	src->n = n;
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (!open_end)
		TQ_TRY(ids_count_check(b, n));
	if (b->ivf) {
		TQ_TRY(spill_open(b, path));
		if (b->omap)
			TQ_TRY(orig_begin(b, path));
	} else if (!open_end)
		TQ_TRY(open_output(b, path, n, n));
	else {
		char *tmp;

		if ((b->sfd = tq_tmpfile_beside(path, &tmp)) == -1)
			return tq_fail(TQ_ERR_IO, "cannot create a spool file "
			    "beside it: %s", strerror(errno));
		unlink(tmp);
		free(tmp);
		b->fspool = 1;
	}

	/*
	 * The next chunk is read on a second thread while this one is
	 * encoded (ahead.c), but for labelled input: its labels are taken
	 * from the reader as each chunk's rows are numbered.
	 */
	fill.src = src;
	fill.open_end = open_end;
	ahead = src->lab == NULL;
	if (ahead && (b->x2 = tq_mallocarray(b->chunk, (size_t)b->q->dim *
	    sizeof(float))) == NULL)
		ahead = 0;
	if (ahead)
		tq_ahead_start(&b->ahead, fill_chunk, &fill, b->x2,
		    chunk_rows(b, n, 0));
	while (row < n) {
		float *t;
		enum tq_status rc;

		want = chunk_rows(b, n, row);
		if (ahead) {
			TQ_TRY(tq_ahead_wait(&b->ahead, &got));
			t = b->x;
			b->x = b->x2;
			b->x2 = t;
		} else {
			TQ_TRY(fill_chunk(&fill, b->x, want, &got));
		}
		if (got == 0 && open_end)
			break;
		if (got < want && !open_end)
			return tq_fail(TQ_ERR_FORMAT, "truncated: expected "
			    "%llu rows, got %llu", (unsigned long long)n,
			    (unsigned long long)(row + got));
		if (ahead && row + got < n)
			tq_ahead_start(&b->ahead, fill_chunk, &fill, b->x2,
			    chunk_rows(b, n, row + got));
		if ((rc = write_chunk(b, got, row, threads)) != TQ_OK) {
			tq_ahead_cancel(&b->ahead);
			return rc;
		}
		row += got;
		if (b->p->progress != NULL)
			b->p->progress(b->p->progress_arg, "reading", row,
			    open_end ? 0 : n);
	}
	if (open_end) {
		n = src->n = row;
		if (n == 0)
			return tq_fail(TQ_ERR_EMPTY, "no vectors");
		TQ_TRY(ids_count_check(b, n));
	}
	TQ_TRY(input_done(b, src, n));
	if (b->fspool)
		return flat_emit(b, path, n);
	return b->ivf ? ivf_emit(b, path) : TQ_OK;
}

enum tq_status
tq_build(const struct tq_quantizer *q, struct tq_reader *corpus,
    struct tq_ids_reader *ids, const struct tq_build_params *p,
    const char *path)
{
	struct tq_build_params def;
	struct build b;
	struct source src = { corpus, -1, 0, 0, 0, NULL };
	uint64_t *sorted = NULL;
	int lfd = -1;
	enum tq_status rc;

	tq_clear_detail();
	if (p == NULL) {
		tq_build_params_default(&def);
		p = &def;
	}
	if (p->originals > TQ_ORIG_F16)
		return tq_fail(TQ_ERR_ARG, "bad originals format");
	if (p->factors > TQ_FACTORS_F32)
		return tq_fail(TQ_ERR_ARG, "bad factors format");
	if (p->dups > 1 && q->ivf.nlist == 0)
		return tq_fail(TQ_ERR_ARG, "copies in several lists need a "
		    "quantizer with lists");
	if (p->dups > 1 && (q->flags & TQ_QFLAG_RESIDUAL))
		return tq_fail(TQ_ERR_ARG, "copies in several lists need "
		    "codes about the centre; the quantizer's are residual");
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
	b.fach = p->factors != TQ_FACTORS_F32;
	if ((rc = build_alloc(&b)) == TQ_OK &&
	    (rc = lock_target(path, p, &lfd)) == TQ_OK &&
	    (rc = ids_load(&b, &sorted)) == TQ_OK &&
	    (rc = tq_lab_begin(p, corpus, NULL, path, b.chunk, &b.lbl)) ==
	    TQ_OK) {
		src.lab = b.lbl;
		rc = build_run(&b, &src, path);
	}
	free(sorted);
	rc = build_end(&b, &src, rc);
	tq_lock_close(lfd);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Open                                                                      */

/*
 * Binds segment `part` - 1 of the file (version 1: part 0 holds the one
 * segment's sections) to p, and checks its sections' lengths, its lists
 * and its deletion bitmap.
 */
static enum tq_status
part_bind(struct tq_index *ix, uint32_t part, struct tq_part *p)
{
	const struct tq_file *f = &ix->file;
	const uint8_t *fp, *i32;
	uint64_t len, hlen = 0, len32 = 0, ml, want, w;
	unsigned seg = part > 0 ? part - 1 : 0;

	p->ids = tq_file_part(f, part, TQ_TAG_IDS, &len);
	p->idw = 8;
	if ((i32 = tq_file_part(f, part, TQ_TAG_ID32, &len32)) != NULL) {
		if (p->ids != NULL)
			return tq_fail(TQ_ERR_FORMAT, "segment %u: both IDS "
			    "and ID32", seg);
		p->ids = i32;
		p->idw = 4;
		len = len32;
	}
	if (p->ids == NULL || len % p->idw != 0 || len == 0)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: section %s: "
		    "missing or wrong length", seg, p->idw == 4 ? "ID32" :
		    "IDS");
	p->n = len / p->idw;
	p->nblocks = (p->n + TQ_BLOCK - 1) / TQ_BLOCK;
	p->codes = tq_file_part(f, part, TQ_TAG_CODE, &len);
	if (p->codes == NULL || ck_mul64(p->nblocks, ix->block_bytes, &want) ||
	    len != want)
		return tq_fail(TQ_ERR_FORMAT, "section CODE: missing or "
		    "wrong length");
	fp = tq_file_part(f, part, TQ_TAG_FACT, &len);
	p->fach = tq_file_part(f, part, TQ_TAG_FACH, &hlen);
	if (fp != NULL && p->fach != NULL)
		return tq_fail(TQ_ERR_FORMAT, "segment %u: both FACT and "
		    "FACH", seg);
	if (p->fach != NULL) {
		if (ck_mul64(p->nblocks, TQ_FACH_BLOCK, &want) ||
		    hlen != want)
			return tq_fail(TQ_ERR_FORMAT, "section FACH: wrong "
			    "length");
	} else if (fp == NULL) {
		return tq_fail(TQ_ERR_FORMAT, "segment %u: no FACT or FACH",
		    seg);
	} else if (ck_mul64(p->nblocks, TQ_BLOCK * TQ_NFACTORS * 4, &want) ||
	    len != want)
		return tq_fail(TQ_ERR_FORMAT, "section FACT: missing or "
		    "wrong length");
	p->factors = (const float *)(const void *)fp;
	p->omap = tq_file_part(f, part, TQ_TAG_OMAP, &ml);
	p->orig = tq_file_part(f, part, TQ_TAG_ORIG, &len);
	if (ix->originals == TQ_ORIG_NONE) {
		if (p->orig != NULL || p->omap != NULL)
			return tq_fail(TQ_ERR_FORMAT, "section %s present "
			    "but IPAR says no originals", p->orig != NULL ?
			    "ORIG" : "OMAP");
	} else {
		w = ix->originals == TQ_ORIG_F32 ? 4 : 2;
		w *= ix->q->dim;
		p->norig = len / w;
		if (p->orig == NULL || len % w != 0 || p->norig == 0 ||
		    (p->omap == NULL ? p->norig != p->n : p->norig > p->n))
			return tq_fail(TQ_ERR_FORMAT, "section ORIG: missing "
			    "or wrong length");
		if (p->omap != NULL && (ix->nlist == 0 || ml != p->n * 4))
			return tq_fail(TQ_ERR_FORMAT, "section OMAP: %s",
			    ix->nlist == 0 ? "in a flat index" :
			    "wrong length");
	}
	p->list = tq_file_part(f, part, TQ_TAG_LIST, &len);
	if (ix->nlist == 0 && p->list != NULL)
		return tq_fail(TQ_ERR_FORMAT, "section LIST present but the "
		    "quantizer has no lists");
	if (ix->nlist > 0) {
		uint64_t prev = 0;

		if (p->list == NULL || len != ((uint64_t)ix->nlist + 1) * 8)
			return tq_fail(TQ_ERR_FORMAT, "section LIST: missing "
			    "or wrong length");
		for (uint32_t l = 0; l <= ix->nlist; l++) {
			uint64_t o = tq_list_off(p, l);

			if ((l == 0 && o != 0) || o < prev || o > p->n ||
			    (l == ix->nlist && o != p->n))
				return tq_fail(TQ_ERR_FORMAT, "section LIST: "
				    "offset %u out of order", (unsigned)l);
			prev = o;
		}
	}
	p->wdth = tq_file_part(f, part, TQ_TAG_WDTH, &len);
	if (p->wdth != NULL && len != p->n * 2)
		return tq_fail(TQ_ERR_FORMAT, "section WDTH: length %llu, "
		    "expected %llu", (unsigned long long)len,
		    (unsigned long long)(p->n * 2));
	p->live = p->n;
	p->tomb = tq_file_part(f, part, TQ_TAG_TOMB, &len);
	if (p->tomb != NULL) {
		uint64_t tb = (p->n + 7) / 8, dead = 0;

		if (len != tb)
			return tq_fail(TQ_ERR_FORMAT, "section TOMB: length "
			    "%llu, expected %llu", (unsigned long long)len,
			    (unsigned long long)tb);
		if (p->n % 8 != 0 && (p->tomb[tb - 1] >> (p->n % 8)) != 0)
			return tq_fail(TQ_ERR_FORMAT, "section TOMB: bits set "
			    "past the last row");
		for (uint64_t i = 0; i < tb; i++)
			dead += (uint64_t)__builtin_popcount(p->tomb[i]);
		p->live = p->n - dead;
	}
	return TQ_OK;
}

static enum tq_status
index_bind(struct tq_index *ix)
{
	const struct tq_file *f = &ix->file;
	const uint8_t *ip;
	uint64_t len, nblocks, n = 0, blocks = 0;
	uint32_t orig, nseg = 1;

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
	if (f->version >= 2) {
		nseg = rd_le32(ip + 40);
		ix->next_id = rd_le64(ip + 48);
		if (nseg == 0 || nseg > TQ_MAX_SEGMENTS)
			return tq_fail(TQ_ERR_FORMAT, "section IPAR: %u "
			    "segments", nseg);
	}
	if (rd_le32(ip + 16) != TQ_BLOCK ||
	    rd_le32(ip + 20) != ix->block_bytes ||
	    rd_le32(ip + 28) != TQ_NFACTORS || orig > TQ_ORIG_F16)
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: inconsistent "
		    "parameters");
	ix->originals = (enum tq_originals)orig;
	ix->dups = rd_le32(ip + 32);
	ix->dup_ratio = rd_lef32(ip + 36);
	if (ix->dups == 1 || (ix->dups == 0 && ix->dup_ratio != 0.0f) ||
	    (ix->dups > 1 && (ix->dups > ix->q->ivf.nlist ||
	    !(ix->dup_ratio >= 1.0f && ix->dup_ratio <= 1e6f))))
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: bad list copies");
	ix->nlist = ix->q->ivf.nlist;
	if ((ix->parts = calloc(nseg, sizeof(*ix->parts))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	ix->nparts = nseg;
	ix->live = 0;
	for (uint32_t s = 0; s < nseg; s++) {
		struct tq_part *p = &ix->parts[s];

		TQ_TRY(part_bind(ix, f->version >= 2 ? s + 1 : 0, p));
		p->row0 = blocks * TQ_BLOCK;
		p->block0 = blocks;
		n += p->n;
		blocks += p->nblocks;
		ix->live += p->live;
	}
	for (uint32_t i = 0; i < f->nsections; i++)
		if (f->sec[i].part > nseg)
			return tq_fail(TQ_ERR_FORMAT, "section %s: segment %u "
			    "of %u", f->sec[i].tag, f->sec[i].part - 1, nseg);
	if (n != ix->n || blocks != nblocks)
		return tq_fail(TQ_ERR_FORMAT, "section IPAR: inconsistent "
		    "parameters");
	ix->nblocks = nblocks;
	if (ix->live == 0)
		return tq_fail(TQ_ERR_FORMAT, "section TOMB: every "
		    "vector is deleted");
	TQ_TRY(tq_calib_check(ix));
	return tq_labels_bind(ix);
}

/*
 * One more than the largest id of any row, deleted ones included: the
 * first id of appended rows without given ids.  Version 1 files do not
 * record it, so it is counted.
 */
static uint64_t
index_next_id(const struct tq_index *ix)
{
	uint64_t mx = 0;

	if (ix->file.version >= 2)
		return ix->next_id;
	for (uint32_t s = 0; s < ix->nparts; s++)
		for (uint64_t r = 0; r < ix->parts[s].n; r++) {
			uint64_t id = tq_part_id(&ix->parts[s], r);

			if (id + 1 > mx)
				mx = id == UINT64_MAX ? UINT64_MAX : id + 1;
		}
	return mx;
}

/* A re-rank reads scattered rows: no read-ahead on the originals. */
static void
advise_originals(const struct tq_index *ix)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];
		uintptr_t a0, a1;

		if (p->orig == NULL)
			continue;
		a0 = (uintptr_t)p->orig & ~(pg - 1);
		a1 = (uintptr_t)p->orig + (uintptr_t)(p->norig *
		    tq_orig_bytes(ix->originals, ix->q->dim));
		(void)madvise((void *)a0, a1 - a0, MADV_RANDOM);
	}
}

/*
 * The limit of a memory cgroup file (cgroup v2 memory.max, v1
 * memory.limit_in_bytes) under root for the process's cgroup named by
 * the /proc/self/cgroup line's path; UINT64_MAX when none is set or it
 * cannot be read.
 */
static uint64_t
cgroup_limit(const char *root, const char *path, const char *file)
{
	char name[4096], buf[64];
	unsigned long long v;
	FILE *f;

	if ((size_t)snprintf(name, sizeof(name), "%s%s/%s", root, path,
	    file) >= sizeof(name) || (f = fopen(name, "re")) == NULL)
		return UINT64_MAX;
	if (fgets(buf, sizeof(buf), f) == NULL ||
	    sscanf(buf, "%llu", &v) != 1)
		v = UINT64_MAX;		/* "max" */
	fclose(f);
	return (uint64_t)v;
}

/*
 * The memory this process may fill: the machine's, or its memory
 * cgroup's limit when that is smaller (a cgroup counts the page cache).
 */
static uint64_t
memory_budget(void)
{
	char line[4096];
	uint64_t m = (uint64_t)sysconf(_SC_PHYS_PAGES) *
	    (uint64_t)sysconf(_SC_PAGESIZE), l;
	FILE *f;

	if ((f = fopen("/proc/self/cgroup", "re")) == NULL)
		return m;
	while (fgets(line, sizeof(line), f) != NULL) {
		char *p = strchr(line, ':'), *q;

		if (p == NULL || (q = strchr(p + 1, ':')) == NULL)
			continue;
		q[strcspn(q, "\n")] = '\0';
		if (strncmp(line, "0::", 3) == 0)
			l = cgroup_limit("/sys/fs/cgroup", q + 1,
			    "memory.max");
		else if (strncmp(p, ":memory:", 8) == 0)
			l = cgroup_limit("/sys/fs/cgroup/memory", q + 1,
			    "memory.limit_in_bytes");
		else
			continue;
		if (l < m)
			m = l;
	}
	fclose(f);
	return m;
}

/* Opens the index on fd (not closed), or on path when fd < 0. */
static enum tq_status
index_open(const char *path, int fd, struct tq_index **out)
{
	struct tq_index *ix;
	enum tq_status rc;

	*out = NULL;
	if ((ix = calloc(1, sizeof(*ix))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	rc = fd >= 0 ? tq_file_map_fd(fd, &ix->file) :
	    tq_file_map(path, &ix->file);
	if (rc != TQ_OK) {
		free(ix);
		return rc;
	}
	if ((rc = index_bind(ix)) != TQ_OK) {
		tq_index_close(ix);
		return rc;
	}
	advise_originals(ix);
	ix->beyond_memory = ix->file.size > memory_budget() / 2;
	*out = ix;
	return TQ_OK;
}

/*
 * The checks that opening an index leaves to its readers: every OMAP
 * entry names one of its segment's originals.
 */
static enum tq_status
maps_check(const struct tq_index *ix)
{
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];

		for (uint64_t r = 0; p->omap != NULL && r < p->n; r++)
			if (rd_le32(p->omap + 4 * r) >= p->norig)
				return tq_fail(TQ_ERR_FORMAT, "section OMAP: "
				    "segment %u: row %llu's entry %u past its "
				    "%llu originals", (unsigned)s,
				    (unsigned long long)r,
				    (unsigned)rd_le32(p->omap + 4 * r),
				    (unsigned long long)p->norig);
	}
	return TQ_OK;
}

enum tq_status
tq_file_verify(const char *path)
{
	struct tq_file f;
	struct tq_index *ix;
	enum tq_status rc;
	int maps = 0;

	TQ_TRY(tq_file_map(path, &f));
	rc = tq_file_verify_sums(&f);
	for (uint32_t i = 0; i < f.nsections; i++)
		maps |= memcmp(f.sec[i].tag, "OMAP", 4) == 0;
	tq_file_unmap(&f);
	if (rc != TQ_OK || !maps)
		return rc;
	TQ_TRY(index_open(path, -1, &ix));
	rc = maps_check(ix);
	tq_index_close(ix);
	return rc;
}

enum tq_status
tq_index_open(const char *path, struct tq_index **out)
{
	tq_clear_detail();
	return index_open(path, -1, out);
}

/* Rows of segment p in [r0, r1) marked deleted. */
static uint64_t
tomb_dead(const struct tq_part *p, uint64_t r0, uint64_t r1)
{
	uint64_t dead = 0;

	if (p->tomb == NULL)
		return 0;
	for (; r0 < r1 && r0 % 8 != 0; r0++)
		dead += p->tomb[r0 / 8] >> (r0 % 8) & 1;
	for (; r0 + 8 <= r1; r0 += 8)
		dead += (uint64_t)__builtin_popcount(p->tomb[r0 / 8]);
	for (; r0 < r1; r0++)
		dead += p->tomb[r0 / 8] >> (r0 % 8) & 1;
	return dead;
}

/* counts (nl) into sum: sorted ascending and summed. */
static void
sorted_sums(const uint64_t *counts, uint32_t nl, uint64_t *sum)
{
	memcpy(sum, counts, nl * sizeof(*sum));
	qsort(sum, nl, sizeof(*sum), cmp_u64);
	for (uint32_t l = 1; l < nl; l++)
		sum[l] += sum[l - 1];
}

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;

const uint64_t *
tq_index_list_rows(const struct tq_index *cix)
{
	struct tq_index *ix = (struct tq_index *)(uintptr_t)cix;
	uint32_t nl = ix->nlist;

	if (nl == 0)
		return NULL;
	if (__atomic_load_n(&ix->listmade, __ATOMIC_ACQUIRE))
		return ix->listlive;
	pthread_mutex_lock(&list_lock);
	if (!ix->listmade) {
		uint64_t *live = tq_callocarray(nl, sizeof(*live));
		uint64_t *sum = tq_mallocarray(nl, sizeof(*sum));

		if (live != NULL && sum != NULL) {
			for (uint32_t e = 0; e < ix->nparts; e++) {
				const struct tq_part *p = &ix->parts[e];

				for (uint32_t l = 0; l < nl; l++) {
					uint64_t r0 = tq_list_off(p, l);
					uint64_t r1 = tq_list_off(p, l + 1);

					live[l] += r1 - r0 - tomb_dead(p, r0,
					    r1);
				}
			}
			sorted_sums(live, nl, sum);
			ix->listlive = live;
			ix->listsum = sum;
		} else {
			free(live);
			free(sum);
		}
		__atomic_store_n(&ix->listmade, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&list_lock);
	return ix->listlive;
}

uint32_t
tq_lists_holding(const uint64_t *sum, uint32_t nl, uint64_t rows)
{
	uint32_t lo = 0, hi = nl - 1;

	if (nl == 0 || sum[hi] < rows)
		return nl;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (sum[mid] >= rows)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo + 1;
}

uint32_t
tq_index_lists_holding(const struct tq_index *ix, uint64_t rows)
{
	if (tq_index_list_rows(ix) == NULL)
		return 0;
	return tq_lists_holding(ix->listsum, ix->nlist, rows);
}

void
tq_index_close(struct tq_index *ix)
{
	if (ix == NULL)
		return;
	free(ix->listlive);
	free(ix->listsum);
	tq_quantizer_free(ix->q);
	tq_file_unmap(&ix->file);
	free(ix->parts);
	free(ix->lab);
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
	out->residual = (q->flags & TQ_QFLAG_RESIDUAL) != 0;
}

enum tq_status
tq_file_info(const char *path, struct tq_file_info *out)
{
	struct tq_file f;
	struct tq_index *ix;
	enum tq_status rc;
	uint64_t wrows = 0;
	double fbytes = 0.0, ibytes = 0.0, obytes = 0.0;

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
	out->segments = ix->nparts;
	out->commit = ix->file.seq;
	out->labels = tq_index_has_labels(ix) ? ix->n : 0;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		if (ix->parts[s].wdth != NULL)
			wrows += ix->parts[s].n;
		fbytes += (double)ix->parts[s].nblocks *
		    (ix->parts[s].fach != NULL ? TQ_FACH_BLOCK :
		    TQ_BLOCK * TQ_NFACTORS * 4.0);
		ibytes += (double)ix->parts[s].idw * (double)ix->parts[s].n;
	}
	out->bytes_per_vector = ((double)ix->nblocks *
	    (double)ix->block_bytes + fbytes + 2.0 * (double)wrows) /
	    (double)ix->n + ibytes / (double)ix->n;
	/* ORIG and OMAP: copies share an original, the map is 4 a row. */
	for (uint32_t s = 0; s < ix->nparts; s++)
		obytes += (double)ix->parts[s].norig * (double)tq_orig_bytes(
		    ix->originals, ix->q->dim) + (ix->parts[s].omap != NULL ?
		    4.0 * (double)ix->parts[s].n : 0.0);
	out->original_bytes_per_vector = obytes / (double)ix->n;
	tq_index_close(ix);
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Sets of ids, filters                                                      */

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
	    NULL || (ix->nlist > 0 && ((f->lcount = tq_callocarray(ix->nlist,
	    sizeof(*f->lcount))) == NULL || (f->lsum = tq_mallocarray(
	    ix->nlist, sizeof(*f->lsum))) == NULL))) {
		rc = tq_fail(TQ_ERR_NOMEM, "out of memory");
		free(set);
		tq_filter_free(f);
		return rc;
	}
	f->ix = ix;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];
		uint32_t l = 0;

		for (uint64_t r = 0; r < p->n; r++) {
			uint64_t g = p->row0 + r;

			if (!tq_part_dead(p, r) &&
			    idset_has(set, m, tq_part_id(p, r))) {
				f->words[g / TQ_BLOCK] |= 1u << (g % TQ_BLOCK);
				f->count++;
				/* IVF: the list of r, the lists in row order. */
				if (f->lcount != NULL) {
					while (tq_list_off(p, l + 1) <= r)
						l++;
					f->lcount[l]++;
				}
			}
		}
	}
	if (f->lsum != NULL)
		sorted_sums(f->lcount, ix->nlist, f->lsum);
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
	free(f->lcount);
	free(f->lsum);
	free(f);
}

/* ------------------------------------------------------------------------ */
/* Mutations                                                                 */

/*
 * An index opened for a mutation: `path` locked (lfd) when it is to be
 * changed or replaced, its current commit mapped from the locked
 * descriptor, and the deletion bitmaps that the mutation changes (tomb[s]
 * malloc'd for segment s, or NULL where unchanged; the parts point at
 * them).
 */
struct mut {
	struct tq_index *ix;
	int lfd;
	int same;		/* out is path: a commit onto it */
	uint8_t **tomb;
	int calb;		/* a new CALB replaces the current one */
};

static void
mut_close(struct mut *m)
{
	if (m->ix != NULL && m->tomb != NULL)
		for (uint32_t s = 0; s < m->ix->nparts; s++)
			free(m->tomb[s]);
	free(m->tomb);
	tq_index_close(m->ix);
	tq_lock_close(m->lfd);
}

/* Same file?  (Both exist; out may not.) */
static int
same_file(const char *a, const char *b)
{
	struct stat x, y;

	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
	    x.st_ino == y.st_ino;
}

static enum tq_status
mut_open(const char *path, const char *out, const struct tq_build_params *p,
    int verify, struct mut *m)
{
	memset(m, 0, sizeof(*m));
	m->lfd = -1;
	m->same = same_file(path, out);
	/* The destination's lock: path's own when they are the same file. */
	TQ_TRY(lock_target(m->same ? path : out, p, &m->lfd));
	if (verify)
		TQ_TRY(tq_file_verify(path));
	TQ_TRY(index_open(path, m->same ? m->lfd : -1, &m->ix));
	if ((m->tomb = calloc(m->ix->nparts, sizeof(*m->tomb))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	return TQ_OK;
}

/* Marks local row r of segment s deleted (copying its bitmap first). */
static enum tq_status
mut_kill(struct mut *m, uint32_t s, uint64_t r)
{
	struct tq_part *p = &m->ix->parts[s];
	size_t tb = (size_t)((p->n + 7) / 8);

	if (m->tomb[s] == NULL) {
		if ((m->tomb[s] = calloc(tb, 1)) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		if (p->tomb != NULL)
			memcpy(m->tomb[s], p->tomb, tb);
		p->tomb = m->tomb[s];
	}
	if (!tq_part_dead(p, r)) {
		m->tomb[s][r / 8] |= (uint8_t)(1u << (r % 8));
		p->live--;
		m->ix->live--;
	}
	return TQ_OK;
}

/*
 * Deletes every live row whose id is in the sorted set[0 .. n).  With
 * fail_input != NULL a row found fails instead, naming the first of
 * fail_input[0 .. ninput) (the appended ids, in input order) that is live.
 */
static enum tq_status
mut_kill_ids(struct mut *m, const uint64_t *set, size_t n,
    const uint64_t *fail_input, uint64_t ninput, uint64_t *hit)
{
	struct tq_index *ix = m->ix;
	uint64_t *live = NULL;
	size_t nl = 0, cap = 0;
	enum tq_status rc = TQ_OK;

	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];

		for (uint64_t r = 0; r < p->n; r++) {
			uint64_t id = tq_part_id(p, r);

			if (tq_part_dead(p, r) || !idset_has(set, n, id))
				continue;
			if (fail_input == NULL) {
				TQ_TRY(mut_kill(m, s, r));
				if (hit != NULL)
					(*hit)++;
				continue;
			}
			if (nl == cap) {
				uint64_t *l2;

				cap = cap ? 2 * cap : 64;
				if ((l2 = realloc(live, cap * 8)) == NULL) {
					free(live);
					return tq_fail(TQ_ERR_NOMEM, "out of "
					    "memory");
				}
				live = l2;
			}
			live[nl++] = id;
		}
	}
	if (nl > 0) {
		qsort(live, nl, 8, cmp_u64);
		for (uint64_t k = 0; k < ninput; k++)
			if (idset_has(live, nl, fail_input[k])) {
				rc = tq_fail(TQ_ERR_DUPLICATE, "id %llu (row "
				    "%llu of the ids) is already in the index",
				    (unsigned long long)fail_input[k],
				    (unsigned long long)k);
				break;
			}
	}
	free(live);
	return rc;
}

/*
 * The sections of the current commit that the next one keeps: all but
 * IPAR (rewritten) and the TOMB of every segment whose bitmap changed,
 * which follow as new sections.  A version 1 file's segment sections
 * become segment 0's.
 */
static enum tq_status
mut_keep(struct mut *m, struct tq_filewriter *fw, int copy)
{
	const struct tq_file *f = &m->ix->file;

	for (uint32_t i = 0; i < f->nsections; i++) {
		struct tq_section_info si = f->sec[i];
		uint32_t tag = TQ_TAG(si.tag[0], si.tag[1], si.tag[2],
		    si.tag[3]);
		int seg = tag == TQ_TAG_CODE || tag == TQ_TAG_FACT ||
		    tag == TQ_TAG_FACH ||
		    tag == TQ_TAG_IDS || tag == TQ_TAG_ID32 ||
		    tag == TQ_TAG_ORIG ||
		    tag == TQ_TAG_LIST || tag == TQ_TAG_TOMB ||
		    tag == TQ_TAG_LABL || tag == TQ_TAG_WDTH;

		if (f->version < 2 && seg)
			si.part = 1;
		if (tag == TQ_TAG_IPAR || (tag == TQ_TAG_TOMB && si.part > 0 &&
		    m->tomb[si.part - 1] != NULL) ||
		    (tag == TQ_TAG_CALB && si.part == 0 && m->calb))
			continue;
		if (!copy) {
			TQ_TRY(tq_fw_keep(fw, &si));
			continue;
		}
		tq_fw_set_part(fw, si.part);
		TQ_TRY(tq_fw_begin(fw, tag));
		TQ_TRY(tq_fw_write(fw, f->base + si.offset,
		    (size_t)si.length));
		TQ_TRY(tq_fw_end(fw));
	}
	for (uint32_t s = 0; s < m->ix->nparts; s++) {
		if (m->tomb[s] == NULL)
			continue;
		tq_fw_set_part(fw, s + 1);
		TQ_TRY(tq_fw_begin(fw, TQ_TAG_TOMB));
		TQ_TRY(tq_fw_write(fw, m->tomb[s],
		    (size_t)((m->ix->parts[s].n + 7) / 8)));
		TQ_TRY(tq_fw_end(fw));
	}
	tq_fw_set_part(fw, 0);
	return TQ_OK;
}

/* IPAR for the index of m with `extra` segments of the given sizes. */
static enum tq_status
mut_ipar(const struct mut *m, struct tq_filewriter *fw, uint64_t rows,
    uint64_t blocks, uint32_t extra, uint64_t next_id)
{
	const struct tq_index *ix = m->ix;
	uint64_t nx = index_next_id(ix);

	return ipar_write(fw, ix->n + rows, ix->nblocks + blocks,
	    ix->block_bytes, ix->originals, ix->dups, ix->dup_ratio,
	    ix->nparts + extra, next_id > nx ? next_id : nx);
}

/*
 * Writes the index of m, its bitmaps changed: onto the file itself (a
 * commit) when out is path and the file is of version 2, else as a copy
 * of every section into a new file at out.
 */
static enum tq_status
mut_commit_bitmaps(struct mut *m, const char *out)
{
	struct tq_filewriter *fw;
	int onto = m->same && m->ix->file.version >= 2;
	enum tq_status rc;

	if (onto)
		TQ_TRY(tq_fw_open_commit(m->lfd, &m->ix->file, &fw));
	else
		TQ_TRY(tq_fw_open(out, TQ_FILE_INDEX, 16, &fw));
	if ((rc = mut_keep(m, fw, !onto)) != TQ_OK ||
	    (rc = mut_ipar(m, fw, 0, 0, 0, 0)) != TQ_OK) {
		tq_fw_abort(fw);
		return rc;
	}
	return tq_fw_commit(fw);	/* frees fw either way */
}

enum tq_status
tq_index_delete(const char *path, const uint64_t *ids, size_t nids,
    const struct tq_build_params *p, const char *out, uint64_t *deleted)
{
	struct mut m;
	uint64_t *set = NULL, hit = 0;
	size_t n;
	enum tq_status rc;

	tq_clear_detail();
	if (deleted != NULL)
		*deleted = 0;
	if (path == NULL || out == NULL || (nids > 0 && ids == NULL))
		return tq_fail(TQ_ERR_ARG, "delete: NULL argument");
	if ((rc = mut_open(path, out, p, 0, &m)) != TQ_OK)
		goto done;
	if ((rc = idset_make(ids, nids, &set, &n)) != TQ_OK ||
	    (rc = mut_kill_ids(&m, set, n, NULL, 0, &hit)) != TQ_OK)
		goto done;
	if (m.ix->live == 0) {
		rc = tq_fail(TQ_ERR_EMPTY, "would delete every vector");
		goto done;
	}
	if (hit == 0 && m.same) {
		/* Nothing changes: no commit, the file stays byte-identical. */
		rc = TQ_OK;
		goto done;
	}
	/* A copy must not launder damage: check what it copies. */
	if (!(m.same && m.ix->file.version >= 2) &&
	    (rc = tq_file_verify(path)) != TQ_OK)
		goto done;
	rc = mut_commit_bitmaps(&m, out);
	if (rc == TQ_OK && deleted != NULL)
		*deleted = hit;
done:
	free(set);
	mut_close(&m);
	return rc;
}

/*
 * A rewrite of an IVF index with originals: ORIG begins with the live
 * originals of ix, segment by segment in the order of each one's ORIG
 * (the order they arrived in), each once, as a fresh build of the live
 * rows in that order would write them; b->orank numbers them for the
 * rows' new OMAP (old_rows_to_chunk).  An OMAP entry past its segment's
 * originals is refused here, so that a rewrite does not launder it.
 */
static enum tq_status
orig_old(struct build *b, const struct tq_index *ix, const char *out)
{
	size_t ob = orig_bytes(b), cap = ((size_t)8 << 20) / ob + 1;

	TQ_TRY(orig_begin(b, out));
	if ((b->orank = tq_callocarray(ix->nparts, sizeof(*b->orank))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	b->norank = ix->nparts;
	for (uint32_t s = 0; s < ix->nparts; s++) {
		const struct tq_part *p = &ix->parts[s];
		struct orank *o = &b->orank[s];
		uint64_t m = p->omap != NULL ? p->norig : p->n;
		uint64_t nw = (m + 63) / 64, c = 0, j, run, ahead;

		o->bits = tq_callocarray(nw, 8);
		o->cum = tq_mallocarray(nw, 8);
		if (o->bits == NULL || o->cum == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		for (uint64_t r = 0; r < p->n; r++) {
			if (tq_part_dead(p, r))
				continue;
			j = p->omap != NULL ? rd_le32(p->omap + 4 * r) : r;
			if (j >= m)
				return tq_fail(TQ_ERR_FORMAT, "segment %u: "
				    "OMAP entry %llu of row %llu past its %llu "
				    "originals", (unsigned)s,
				    (unsigned long long)j,
				    (unsigned long long)r,
				    (unsigned long long)m);
			o->bits[j / 64] |= UINT64_C(1) << (j % 64);
		}
		for (uint64_t w = 0; w < nw; w++) {
			o->cum[w] = c;
			c += (uint64_t)__builtin_popcountll(o->bits[w]);
		}
		o->base = b->narr;
		/*
		 * The live entries, by runs of consecutive ones; ORIG is
		 * asked for a window ahead in large reads (it is
		 * MADV_RANDOM for the searches).
		 */
		for (j = 0, ahead = 0; j < m; j += run) {
			run = 1;
			if (j + cap > ahead && ahead < m) {
				uint64_t to = m - j > 2 * cap ? j + 2 * cap : m;

				if (ahead < j)
					ahead = j;
				tq_map_willneed(p->orig + ahead * ob,
				    p->orig + to * ob);
				ahead = to;
			}
			if (!(o->bits[j / 64] >> (j % 64) & 1))
				continue;
			while (j + run < m && run < cap &&
			    (o->bits[(j + run) / 64] >> ((j + run) % 64) & 1))
				run++;
			TQ_TRY(orig_put(b, p->orig + j * ob, run));
			tq_map_release(p->orig + j * ob, p->orig +
			    (j + run) * ob);
		}
	}
	return TQ_OK;
}

/* The largest id of the live rows of ix. */
static uint64_t
live_id_max(const struct tq_index *ix)
{
	uint64_t mx = 0;

	for (uint32_t s = 0; s < ix->nparts; s++)
		for (uint64_t r = 0; r < ix->parts[s].n; r++)
			if (!tq_part_dead(&ix->parts[s], r) &&
			    tq_part_id(&ix->parts[s], r) > mx)
				mx = tq_part_id(&ix->parts[s], r);
	return mx;
}

/*
 * The live rows of ix, then the rows of src (if any), into a new file,
 * so that the bytes equal a fresh build's.  Old rows move by runs of live
 * rows, a block at a time (old_rows_to_chunk): in an IVF index ahead of
 * each list's new rows when the lists are written (ivf_emit), in a flat
 * one a whole chunk at a time, the last part chunk through the row
 * buffers with the first new rows.  Rows come from every segment in
 * order.
 */
static enum tq_status
append_run(struct build *b, const struct tq_index *ix, struct source *src,
    const char *out)
{
	const struct tq_quantizer *q = ix->q;
	size_t dim = q->dim, ob = orig_bytes(b), at = 0, got;
	uint64_t nnew = 0, total, row;
	unsigned threads = b->p->threads ? b->p->threads : tq_ncpu();
	struct ocur oc;

	if (src->r != NULL) {
		if (tq_reader_count(src->r) < 0)
			TQ_TRY(source_spool(src, out, b->x, b->chunk));
		nnew = src->fd >= 0 ? src->n : (uint64_t)tq_reader_count(src->r);
		src->n = nnew;
		if (nnew == 0)
			return tq_fail(TQ_ERR_EMPTY, "no vectors");
		TQ_TRY(ids_count_check(b, nnew));
	}
	b->first_id = index_next_id(ix);
	if (src->r != NULL && b->allids == NULL &&
	    b->first_id > UINT64_MAX - nnew)
		return tq_fail(TQ_ERR_OVERFLOW, "the new ids would "
		    "pass 2^64 - 2; give them with an ids file");
	/* A rewrite holds only live rows: its next id is theirs. */
	b->next_id = 0;
	total = ix->live + nnew;
	/*
	 * The live rows' largest id (ids_width), read only when some id,
	 * deleted or not, passes 2^32 - 1 (first_id is one more than the
	 * largest): else they all fit already.
	 */
	if (b->first_id - 1 > UINT32_MAX) {
		uint64_t top = live_id_max(ix);

		b->id_top = top > b->id_top ? top : b->id_top;
	}

	if (b->ivf)
		TQ_TRY(spill_open(b, out));
	else
		TQ_TRY(open_output(b, out, total, nnew));
	if (b->omap)
		TQ_TRY(orig_old(b, ix, out));

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
		if (b->ocount == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		for (uint32_t l = 0; l < nl; l++) {
			for (uint32_t s = 0; s < ix->nparts; s++)
				b->ocount[l] += live_between(&ix->parts[s],
				    tq_list_off(&ix->parts[s], l),
				    tq_list_off(&ix->parts[s], l + 1));
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
	ocur_start(ix, UINT32_MAX, &oc);
	for (uint64_t left = b->ivf ? 0 : ix->live; left > 0; ) {
		if (left < b->chunk) {
			old_row_to_chunk(b, &ix->parts[oc.pi], oc.r, at++);
			oc.r++;
			ocur_skip(ix, &oc);
			left--;
			continue;
		}
		while (at < b->chunk)
			at += ocur_take(b, ix, &oc, b->chunk - at, at);
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
		if (b->ivf)
			TQ_TRY(assign_rows(b, b->x + at * dim, got, at));
		TQ_TRY(encode_chunk(b, b->x + at * dim, got, at, threads));
		TQ_TRY(ids_out(b, got, at, row));
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

/*
 * An append as a new segment at the end of the file: the new rows are
 * built exactly as a fresh index of them alone would be (build_run),
 * then the current commit's sections are kept, the changed bitmaps and
 * IPAR written, and the commit made (commit.c).  Bytes written: the new
 * rows, the bitmaps that changed, and a table.
 */
static enum tq_status
append_onto(struct build *b, struct mut *m, struct source *src,
    const char *path)
{
	struct tq_index *ix = m->ix;
	enum tq_status rc;

	TQ_TRY(tq_fw_open_commit(m->lfd, &ix->file, &b->fw));
	b->in_place = 1;
	b->part = ix->nparts + 1;
	b->first_id = index_next_id(ix);
	b->next_id = b->first_id;
	rc = build_run(b, src, path);
	if (rc == TQ_OK && b->lbl != NULL)
		rc = tq_lab_write(b->lbl, b->fw, b->part);
	if (rc == TQ_OK)
		rc = mut_keep(m, b->fw, 0);
	if (rc == TQ_OK)
		rc = mut_ipar(m, b->fw, b->seg_rows, b->seg_blocks, 1,
		    b->next_id);
	if (rc == TQ_OK)
		rc = tq_fw_commit(b->fw);	/* frees fw either way */
	else
		tq_fw_abort(b->fw);
	b->fw = NULL;
	return rc;
}

enum tq_status
tq_index_append(const char *path, struct tq_reader *corpus,
    struct tq_ids_reader *ids, const struct tq_build_params *p,
    const char *out)
{
	struct tq_build_params bp;
	struct tq_index *ix;
	struct build b;
	struct source src = { corpus, -1, 0, 0, 0, NULL };
	struct mut m;
	uint64_t *sorted = NULL;
	uint32_t maxseg;
	enum tq_status rc;
	int onto;

	tq_clear_detail();
	if (path == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "append: NULL argument");
	if (p != NULL)
		bp = *p;
	else
		tq_build_params_default(&bp);
	if (bp.replace && (corpus == NULL || ids == NULL))
		return tq_fail(TQ_ERR_ARG, "replacing rows needs their ids");
	if (bp.factors > TQ_FACTORS_F32)
		return tq_fail(TQ_ERR_ARG, "bad factors format");
	memset(&b, 0, sizeof(b));
	b.sfd = -1;
	if ((rc = mut_open(path, out, &bp, corpus == NULL, &m)) != TQ_OK)
		goto done;
	ix = m.ix;
	if (corpus != NULL && tq_reader_dim(corpus) != ix->q->dim) {
		rc = tq_fail(TQ_ERR_MISMATCH, "dimension %u does not match "
		    "the index (%u)", tq_reader_dim(corpus), ix->q->dim);
		goto done;
	}
	bp.originals = ix->originals;
	bp.dups = ix->dups;
	bp.dup_ratio = ix->dup_ratio;
	src.dim = ix->q->dim;
	b.q = ix->q;
	b.p = &bp;
	b.ids = corpus != NULL ? ids : NULL;
	if ((rc = build_alloc(&b)) != TQ_OK ||
	    (rc = ids_load(&b, &sorted)) != TQ_OK ||
	    (rc = tq_lab_begin(&bp, corpus, ix, out, b.chunk, &b.lbl)) !=
	    TQ_OK)
		goto done;
	src.lab = b.lbl;
	/* Ids already live: an error, or with replace deleted now. */
	if (sorted != NULL && (rc = mut_kill_ids(&m, sorted, b.nallids,
	    bp.replace ? NULL : b.allids, b.nallids, NULL)) != TQ_OK)
		goto done;
	maxseg = bp.max_segments ? bp.max_segments : TQ_MAX_SEGMENTS_DEFAULT;
	if (maxseg > TQ_MAX_SEGMENTS)
		maxseg = TQ_MAX_SEGMENTS;
	onto = m.same && corpus != NULL && ix->file.version >= 2 &&
	    ix->nparts < maxseg;
	/*
	 * A new segment keeps the layout of the last one unless told; a
	 * rewrite is a fresh build of the rows, compact unless told.
	 */
	if (bp.factors != TQ_FACTORS_DEFAULT)
		b.fach = bp.factors == TQ_FACTORS_F16;
	else
		b.fach = !onto || ix->parts[ix->nparts - 1].fach != NULL;
	if (onto) {
		rc = append_onto(&b, &m, &src, path);
	} else if (corpus == NULL || (rc = tq_file_verify(path)) == TQ_OK) {
		/*
		 * A rewrite must not launder damage: checked first (for a
		 * compaction, by mut_open already).
		 */
		rc = append_run(&b, ix, &src, out);
		rc = build_end(&b, &src, rc);
		free(sorted);
		mut_close(&m);
		return rc;
	}
done:
	free(sorted);
	if (b.fw != NULL)
		tq_fw_abort(b.fw);
	b.fw = NULL;
	if (src.fd >= 0)
		close(src.fd);
	build_free(&b);
	mut_close(&m);
	return rc;
}

/*
 * A calibration (calib.c) measured on the locked index and committed as
 * its new CALB section, as a delete commits its bitmaps.
 */
enum tq_status
tq_index_calibrate(const char *path, const struct tq_calib_params *cp,
    const struct tq_build_params *p, const char *out)
{
	struct tq_build_params bp;
	struct tq_calib_params dp;
	struct tq_filewriter *fw;
	struct mut m;
	uint8_t *calb = NULL;
	size_t len;
	int onto;
	enum tq_status rc;

	tq_clear_detail();
	if (path == NULL || out == NULL)
		return tq_fail(TQ_ERR_ARG, "calibrate: NULL argument");
	if (p != NULL)
		bp = *p;
	else
		tq_build_params_default(&bp);
	if (cp == NULL) {
		tq_calib_params_default(&dp);
		cp = &dp;
	}
	if ((rc = mut_open(path, out, &bp, 0, &m)) != TQ_OK ||
	    (rc = calib_make(m.ix, cp, &calb, &len)) != TQ_OK)
		goto done;
	onto = m.same && m.ix->file.version >= 2;
	if (!onto && (rc = tq_file_verify(path)) != TQ_OK)
		goto done;
	m.calb = 1;
	if (onto)
		rc = tq_fw_open_commit(m.lfd, &m.ix->file, &fw);
	else
		rc = tq_fw_open(out, TQ_FILE_INDEX, 16, &fw);
	if (rc != TQ_OK)
		goto done;
	if ((rc = mut_keep(&m, fw, !onto)) != TQ_OK ||
	    (rc = calb_write(fw, calb, len)) != TQ_OK ||
	    (rc = mut_ipar(&m, fw, 0, 0, 0, 0)) != TQ_OK) {
		tq_fw_abort(fw);
		goto done;
	}
	rc = tq_fw_commit(fw);	/* frees fw either way */
done:
	free(calb);
	mut_close(&m);
	return rc;
}

enum tq_status
tq_index_compact(const char *path, const struct tq_build_params *p,
    const char *out)
{
	return tq_index_append(path, NULL, NULL, p, out);
}
