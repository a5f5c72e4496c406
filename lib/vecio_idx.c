/*
 * vecio_idx.c - IDX files (MNIST, Fashion-MNIST): two zero bytes, an
 * element type, the number of dimensions, big-endian u32 sizes, then the
 * data.  A row is everything after the first dimension, flattened.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

static int
idx_type(uint8_t t, enum tq_etype *et, size_t *esz, int *is_int)
{
	switch (t) {
	case 0x08: *et = TQ_ET_U8; *esz = 1; *is_int = 1; return 1;
	case 0x09: *et = TQ_ET_I8; *esz = 1; *is_int = 1; return 1;
	case 0x0B: *et = TQ_ET_I16BE; *esz = 2; *is_int = 1; return 1;
	case 0x0C: *et = TQ_ET_I32BE; *esz = 4; *is_int = 1; return 1;
	case 0x0D: *et = TQ_ET_F32BE; *esz = 4; *is_int = 0; return 1;
	case 0x0E: *et = TQ_ET_F64BE; *esz = 8; *is_int = 0; return 1;
	}
	return 0;
}

static int
idx_bid(const struct tq_sniff *sn)
{
	const uint8_t *p = sn->p;
	size_t avail = sn->avail;
	enum tq_etype et;
	size_t esz;
	int is_int;

	/* Below the name of a *vecs file, which may start the same way. */
	return avail >= 4 && p[0] == 0 && p[1] == 0 &&
	    idx_type(p[2], &et, &esz, &is_int) && p[3] >= 1 && p[3] <= 4 ?
	    70 : 0;
}

static uint32_t
rd_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static enum tq_status
idx_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_src *s = &r->src;
	const uint8_t *p = tq_src_ptr(s);
	enum tq_etype et;
	size_t esz, hdr;
	int is_int;
	unsigned i, nd = p[3];
	uint64_t rows, rowlen = 1, total;

	r->trunc = TQ_TRUNC_OF;
	if (!idx_type(p[2], &et, &esz, &is_int))
		return tq_fail(TQ_ERR_FORMAT, "bad IDX element type");
	hdr = 4 + 4 * (size_t)nd;
	TQ_TRY(tq_src_fill(s, hdr));
	if (tq_src_avail(s) < hdr)
		return tq_fail(TQ_ERR_FORMAT, "truncated IDX header");
	p = tq_src_ptr(s);
	rows = rd_be32(p + 4);
	for (i = 1; i < nd; i++) {
		uint32_t v = rd_be32(p + 4 + 4 * i);

		if (v == 0)
			return tq_fail(TQ_ERR_FORMAT, "IDX dimension %u is 0",
			    i);
		rowlen *= v;
		if (rowlen > TQ_MAX_DIM)
			return tq_fail(TQ_ERR_UNSUPPORTED, "IDX rows have more "
			    "than %u values", TQ_MAX_DIM);
	}
	tq_src_consume(s, hdr);
	tq_reader_layout(r, et, esz, 0, (uint32_t)rowlen, is_int);
	total = hdr + rows * r->rowbytes;	/* < 2^32 * 2^19 */
	if (s->regular && s->size != total)
		return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows of dim "
		    "%llu (%llu bytes) but the file holds %llu bytes",
		    (ull)rows, (ull)rowlen, (ull)total, (ull)(s->size));
	if (rows == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = rows;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)rows : -1;
	return TQ_OK;
}

const struct tq_rformat tq_rformat_idx = {
	.name = "idx",
	.bid = idx_bid,
	.open = idx_open,
	.window = TQ_WIN_BYTES,
};
