/*
 * vecio_fixture.c - the fixture format of the test suites: u32 dim, u32 n
 * (little-endian), then n rows of dim float32.
 *
 * It has no magic number, so it is the fallback of the sniffing: it bids
 * on anything, a little, and with confidence only when its header agrees
 * with the size of a regular file to the byte.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

typedef unsigned long long ull;

static int
fixture_bid(const struct tq_sniff *sn)
{
	uint32_t dim, n;

	if (sn->avail < 8 || !sn->regular)
		return 1;
	dim = rd_le32(sn->p);
	n = rd_le32(sn->p + 4);
	if (dim >= 1 && dim <= TQ_MAX_DIM &&
	    sn->size == 8 + (uint64_t)n * dim * 4)
		return TQ_BID_SURE;
	return 1;
}

static enum tq_status
fixture_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_src *s = &r->src;
	const uint8_t *p;
	uint32_t dim, n;
	uint64_t want;

	TQ_TRY(tq_src_fill(s, 8));
	if (tq_src_avail(s) < 8)
		return tq_fail(TQ_ERR_FORMAT, "truncated header (%zu bytes)",
		    tq_src_avail(s));
	p = tq_src_ptr(s);
	dim = rd_le32(p);
	n = rd_le32(p + 4);
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT,
		    "not a vector file (unrecognised header)");
	tq_src_consume(s, 8);
	tq_reader_layout(r, TQ_ET_F32LE, 4, 0, dim, 0);
	r->trunc = TQ_TRUNC_EXPECTED;
	want = 8 + (uint64_t)n * dim * 4;	/* < 2^51: no overflow */
	if (s->regular && s->size != want)
		return tq_fail(TQ_ERR_FORMAT, "header claims %lu rows of dim "
		    "%lu (%llu bytes) but the file holds %llu bytes",
		    (unsigned long)n, (unsigned long)dim, (ull)want,
		    (ull)s->size);
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = n;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)n : -1;
	return TQ_OK;
}

const struct tq_rformat tq_rformat_fixture = {
	.name = "fixture",
	.bid = fixture_bid,
	.open = fixture_open,
	.window = TQ_WIN_BYTES,
};
