/*
 * vecio_vecs.c - the .fvecs, .ivecs and .bvecs files of the INRIA
 * ANN_SIFT1M collections: per row an int32 dim (little-endian), then dim
 * float32, int32 or uint8 values.
 *
 * A file name with the extension decides.  Without one (standard input, a
 * pipe, an unknown name) the content does: the dim prefix repeats at every
 * row, so the first rows must all start with the same plausible dim at the
 * stride of one of the element sizes (4 for fvecs and ivecs, 1 for bvecs),
 * and float rows must hold finite values of a magnitude that data has;
 * int32 rows read as floats are NaN (negative values) or far below any
 * real value (2^-95 and less for ids below 2^28), which tells ivecs
 * from fvecs.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

/* Rows whose prefixes the sniffing compares. */
#define SNIFF_ROWS 3

enum vkind { V_NONE, V_FVECS, V_IVECS, V_BVECS, V_MORE };

static const char *const ext[] = { NULL, ".fvecs", ".ivecs", ".bvecs",
	NULL };

/*
 * Do the prefixes repeat at `stride` over the bytes shown?  1 yes, 0 no,
 * -1 so far, but there are fewer than SNIFF_ROWS rows yet.
 */
static int
prefixes_repeat(const struct tq_sniff *sn, uint32_t d, size_t stride)
{
	size_t i, k = sn->avail / stride;

	if (sn->regular && sn->size % stride != 0)
		return 0;
	for (i = 0; i < k && i < SNIFF_ROWS; i++)
		if (rd_le32(sn->p + i * stride) != d)
			return 0;
	if (k >= SNIFF_ROWS)
		return 1;
	/* A shorter input must be whole rows. */
	if (sn->eof)
		return k > 0 && sn->avail % stride == 0;
	return sn->full ? 0 : -1;
}

static enum vkind
vecs_sniff(const struct tq_sniff *sn)
{
	uint32_t d, u, e;
	size_t stride, i, j, k, ints = 0, floats = 0;
	int fv, bv;

	if (sn->avail < 4)
		return sn->full ? V_NONE : V_MORE;
	d = rd_le32(sn->p);
	if (d < 1 || d > TQ_MAX_DIM)
		return V_NONE;
	stride = 4 + 4 * (size_t)d;
	fv = prefixes_repeat(sn, d, stride);
	bv = prefixes_repeat(sn, d, 4 + (size_t)d);
	if (fv < 0 || (fv == 0 && bv < 0))
		return V_MORE;
	if (fv > 0) {
		k = sn->avail / stride;
		if (k > SNIFF_ROWS)
			k = SNIFF_ROWS;
		for (i = 0; i < k; i++)
			for (j = 0; j < d; j++) {
				u = rd_le32(sn->p + i * stride + 4 + 4 * j);
				e = (u >> 23) & 0xff;
				if (e == 0xff)
					return V_IVECS;
				if (e < 0x20 && (u & 0x7fffffffu) != 0)
					ints++;
				else if (e >= 0x20)
					floats++;
			}
		return ints > 0 && ints >= floats ? V_IVECS : V_FVECS;
	}
	return bv > 0 ? V_BVECS : V_NONE;
}

static int
vecs_bid(const struct tq_sniff *sn, enum vkind me)
{
	enum vkind k;

	if (tq_has_ext(sn->name, ext[me]))
		return 80;
	k = vecs_sniff(sn);
	return k == V_MORE ? TQ_BID_MORE : k == me ? 50 : 0;
}

static int fvecs_bid(const struct tq_sniff *sn) { return vecs_bid(sn, V_FVECS); }
static int ivecs_bid(const struct tq_sniff *sn) { return vecs_bid(sn, V_IVECS); }
static int bvecs_bid(const struct tq_sniff *sn) { return vecs_bid(sn, V_BVECS); }

static enum tq_status
vecs_open(struct tq_reader *r, enum vkind kind)
{
	struct tq_src *s = &r->src;
	int32_t d;

	TQ_TRY(tq_src_fill(s, 4));
	if (tq_src_avail(s) == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	if (tq_src_avail(s) < 4)
		return tq_fail(TQ_ERR_FORMAT, "truncated at row 0 (%s)",
		    r->kind);
	d = (int32_t)rd_le32(tq_src_ptr(s));
	if (d < 1 || (uint32_t)d > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT,
		    "row 0 has invalid dimension %ld (%s)", (long)d, r->kind);
	if (kind == V_FVECS)
		tq_reader_layout(r, TQ_ET_F32LE, 4, 4, (uint32_t)d, 0);
	else if (kind == V_IVECS)
		tq_reader_layout(r, TQ_ET_I32LE, 4, 4, (uint32_t)d, 1);
	else
		tq_reader_layout(r, TQ_ET_U8, 1, 4, (uint32_t)d, 1);
	r->trunc = TQ_TRUNC_AT;
	r->claimed = TQ_RD_UNKNOWN;
	r->count = -1;
	if (s->regular) {
		if (s->size % r->rowbytes != 0)
			return tq_fail(TQ_ERR_FORMAT, "file size %llu is not a "
			    "multiple of the row size %zu (%s, dim %ld)",
			    (ull)s->size, r->rowbytes, r->kind, (long)d);
		r->count = (int64_t)(s->size / r->rowbytes);
		r->sized = 1;
	}
	return TQ_OK;
}

static enum tq_status
fvecs_open(struct tq_reader *r, const char *path, const char *dataset)
{
	return vecs_open(r, V_FVECS);
}

static enum tq_status
ivecs_open(struct tq_reader *r, const char *path, const char *dataset)
{
	return vecs_open(r, V_IVECS);
}

static enum tq_status
bvecs_open(struct tq_reader *r, const char *path, const char *dataset)
{
	return vecs_open(r, V_BVECS);
}

const struct tq_rformat tq_rformat_fvecs = {
	.name = "fvecs",
	.bid = fvecs_bid,
	.open = fvecs_open,
	.window = TQ_WIN_BYTES,
};

const struct tq_rformat tq_rformat_ivecs = {
	.name = "ivecs",
	.bid = ivecs_bid,
	.open = ivecs_open,
	.window = TQ_WIN_BYTES,
};

const struct tq_rformat tq_rformat_bvecs = {
	.name = "bvecs",
	.bid = bvecs_bid,
	.open = bvecs_open,
	.window = TQ_WIN_BYTES,
};
