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
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

void
tq_build_params_default(struct tq_build_params *p)
{
	memset(p, 0, sizeof(*p));
	p->originals = TQ_ORIG_F32;
	p->threads = 0;
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

static enum tq_status
source_read(struct source *src, float *buf, size_t max, size_t *got)
{
	size_t want, rowbytes = (size_t)src->dim * sizeof(float);
	uint8_t *p = (uint8_t *)buf;
	size_t left;

	if (src->fd < 0)
		return tq_reader_read(src->r, buf, max, got);
	want = src->n - src->next < max ? (size_t)(src->n - src->next) : max;
	left = want * rowbytes;
	while (left > 0) {
		ssize_t k = pread(src->fd, p, left,
		    (off_t)((src->next * rowbytes) + (size_t)(p - (uint8_t *)buf)));

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return tq_fail(TQ_ERR_IO, "spool read: %s",
			    k < 0 ? strerror(errno) : "unexpected end");
		p += k;
		left -= (size_t)k;
	}
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
		const uint8_t *p = (const uint8_t *)buf;
		size_t left;

		TQ_TRY(tq_reader_read(src->r, buf, chunk, &got));
		if (got == 0)
			break;
		left = got * rowbytes;
		while (left > 0) {
			ssize_t k = pwrite(src->fd, p, left, (off_t)off);

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return tq_fail(TQ_ERR_IO, "spool write: %s",
				    strerror(errno));
			p += k;
			off += (uint64_t)k;
			left -= (size_t)k;
		}
		src->n += got;
	}
	return TQ_OK;
}

/* ------------------------------------------------------------------------ */
/* Parallel encoding of one chunk                                            */

struct encode_job {
	const struct tq_quantizer *q;
	const float *x;
	uint8_t *codes;
	float *factors;
	size_t rows;
	enum tq_status rc;
	char detail[256];
};

static void *
encode_worker(void *arg)
{
	struct encode_job *j = arg;

	j->rc = tq_encode_unpacked(j->q, j->x, j->rows, j->codes, j->factors);
	if (j->rc != TQ_OK)
		snprintf(j->detail, sizeof(j->detail), "%s", tq_errdetail());
	return NULL;
}

/*
 * Encodes `rows` rows, split into at most `threads` ranges of whole
 * blocks.  The split does not change the bytes: encoding is row-wise.
 */
static enum tq_status
encode_chunk(const struct tq_quantizer *q, const float *x, size_t rows,
    unsigned threads, uint8_t *codes, float *factors)
{
	struct encode_job job[64];
	pthread_t tid[64];
	int started[64];
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK, per, at = 0;
	unsigned t, nt = threads;

	if (nt > 64)
		nt = 64;
	if (nt > nblk)
		nt = (unsigned)nblk;
	if (nt <= 1)
		return tq_encode_unpacked(q, x, rows, codes, factors);
	per = (nblk + nt - 1) / nt * TQ_BLOCK;
	for (t = 0; t < nt; t++) {
		size_t len = rows - at < per ? rows - at : per;

		job[t] = (struct encode_job){ q, x + at * q->dim,
		    codes + at * q->dim, factors + at * TQ_NFACTORS, len,
		    TQ_OK, "" };
		at += len;
		started[t] = t > 0 && len > 0 &&
		    pthread_create(&tid[t], NULL, encode_worker, &job[t]) == 0;
	}
	for (t = 0; t < nt; t++)
		if (!started[t] && job[t].rows > 0)
			encode_worker(&job[t]);
	for (t = 0; t < nt; t++)
		if (started[t])
			pthread_join(tid[t], NULL);
	for (t = 0; t < nt; t++)
		if (job[t].rc != TQ_OK)
			return tq_fail(job[t].rc, "%s", job[t].detail);
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
	uint8_t *blocks;	/* chunk / 32 * block_bytes */
	float *fblocks;		/* chunk * 3, per block layout */
	uint8_t *idbuf;		/* chunk * 8 */
	uint64_t *idtmp;
	uint8_t *obuf;		/* chunk * dim * 4 */
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
}

static enum tq_status
build_alloc(struct build *b)
{
	size_t dim = b->q->dim;

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
	TQ_TRY(tq_fw_begin(b->fw, TQ_TAG_IPAR));
	TQ_TRY(tq_fw_write(b->fw, ip, sizeof(ip)));
	return tq_fw_end(b->fw);
}

static enum tq_status
write_chunk(struct build *b, size_t rows, uint64_t row0, unsigned threads)
{
	const struct tq_quantizer *q = b->q;
	size_t nblk = (rows + TQ_BLOCK - 1) / TQ_BLOCK;
	size_t got;

	TQ_TRY(encode_chunk(q, b->x, rows, threads, b->codes, b->factors));

	/* Codes and factors in the blocked layout. */
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
	for (size_t i = 0; i < nblk * TQ_BLOCK * TQ_NFACTORS; i++)
		wr_lef32((uint8_t *)&b->fblocks[i], b->fblocks[i]);
	TQ_TRY(tq_fw_put(b->fw, b->s_code, b->blocks, nblk * b->block_bytes));
	TQ_TRY(tq_fw_put(b->fw, b->s_fact, b->fblocks,
	    nblk * TQ_BLOCK * TQ_NFACTORS * sizeof(float)));

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
	TQ_TRY(tq_fw_put(b->fw, b->s_ids, b->idbuf, rows * 8));

	/* Originals. */
	if (b->p->originals != TQ_ORIG_NONE) {
		size_t cnt = rows * q->dim;

		if (q->metric == TQ_METRIC_COSINE)
			for (size_t i = 0; i < rows; i++)
				(void)tq_normalise(b->x + i * q->dim, q->dim,
				    b->x + i * q->dim);
		if (b->p->originals == TQ_ORIG_F32) {
			for (size_t i = 0; i < cnt; i++)
				wr_lef32(b->obuf + 4 * i, b->x[i]);
			TQ_TRY(tq_fw_put(b->fw, b->s_orig, b->obuf, cnt * 4));
		} else {
			for (size_t i = 0; i < cnt; i++)
				wr_le16(b->obuf + 2 * i,
				    tq_f32_to_f16(b->x[i]));
			TQ_TRY(tq_fw_put(b->fw, b->s_orig, b->obuf, cnt * 2));
		}
	}
	return TQ_OK;
}

static enum tq_status
build_run(struct build *b, struct source *src, const char *path)
{
	const struct tq_quantizer *q = b->q;
	uint64_t n, nblocks, len, row = 0;
	unsigned threads = b->p->threads ? b->p->threads : tq_ncpu();
	size_t got;

	if (src->fd < 0 && tq_reader_count(src->r) < 0)
		TQ_TRY(source_spool(src, path, b->x, b->chunk));
	n = src->fd >= 0 ? src->n : (uint64_t)tq_reader_count(src->r);
	src->n = n;
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	nblocks = (n + TQ_BLOCK - 1) / TQ_BLOCK;

	TQ_TRY(tq_fw_open(path, TQ_FILE_INDEX, 12, &b->fw));
	TQ_TRY(tq_quantizer_write_sections(q, b->fw));
	TQ_TRY(write_ipar(b, n, nblocks));
	if (ck_mul64(nblocks, b->block_bytes, &len))
		return tq_fail(TQ_ERR_OVERFLOW, "index too large");
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_CODE, len, &b->s_code));
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_FACT,
	    nblocks * TQ_BLOCK * TQ_NFACTORS * sizeof(float), &b->s_fact));
	TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_IDS, n * 8, &b->s_ids));
	if (b->p->originals != TQ_ORIG_NONE) {
		uint64_t w = b->p->originals == TQ_ORIG_F32 ? 4 : 2;

		if (ck_mul64(n, (uint64_t)q->dim * w, &len))
			return tq_fail(TQ_ERR_OVERFLOW, "index too large");
		TQ_TRY(tq_fw_reserve(b->fw, TQ_TAG_ORIG, len, &b->s_orig));
	}

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
	if (src->fd < 0) {
		TQ_TRY(tq_reader_read(src->r, b->x, 1, &got));
		if (got != 0)
			return tq_fail(TQ_ERR_FORMAT, "more rows than the "
			    "header says (%llu)", (unsigned long long)n);
	}
	if (b->ids != NULL) {
		uint64_t extra;

		TQ_TRY(tq_ids_read(b->ids, &extra, 1, &got));
		if (got != 0)
			return tq_fail(TQ_ERR_MISMATCH, "the ids file has "
			    "more ids than the corpus has rows (%llu)",
			    (unsigned long long)n);
	}
	return TQ_OK;
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
	if (rc == TQ_OK)
		rc = tq_fw_commit(b.fw);	/* frees fw either way */
	else
		tq_fw_abort(b.fw);
	if (src.fd >= 0)
		close(src.fd);
	build_free(&b);
	return rc;
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
	out->dim = q->dim;
	out->bits = q->bits;
	out->metric = q->metric;
	out->seed = q->seed;
	out->rotation = q->rotation;
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
	out->originals = ix->originals;
	out->bytes_per_vector = ((double)ix->nblocks *
	    ((double)ix->block_bytes + TQ_BLOCK * TQ_NFACTORS * 4.0)) /
	    (double)ix->n + 8.0;
	out->original_bytes_per_vector = ix->originals == TQ_ORIG_NONE ? 0 :
	    (double)ix->q->dim * (ix->originals == TQ_ORIG_F32 ? 4 : 2);
	tq_index_close(ix);
	return TQ_OK;
}
