/*
 * vecio_npy.c - NumPy .npy files, versions 1 to 3: a magic string, a
 * Python literal dict for a header, then the array.  2-D (or 1-D, one row)
 * arrays of <f4, <f2, <f8, <i4 or |u1 in C order.
 *
 * The magic decides; a file named .npy without it is refused as such
 * rather than read as some other format.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "reader_impl.h"

/* Longest .npy header dictionary accepted (NumPy writes < 200 bytes). */
#define NPY_MAX_HEADER 65536u

#define NPY_MAGIC "\x93NUMPY"

typedef unsigned long long ull;

/* A strict parser of the Python literal dict in a .npy header. */
struct npy_parse {
	const char *p, *end;
};

static void
npy_ws(struct npy_parse *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
		ps->p++;
}

static int
npy_char(struct npy_parse *ps, char c)
{
	npy_ws(ps);
	if (ps->p < ps->end && *ps->p == c) {
		ps->p++;
		return 1;
	}
	return 0;
}

/* A quoted string without escapes into out[cap]. */
static int
npy_string(struct npy_parse *ps, char *out, size_t cap)
{
	char q;
	size_t n = 0;

	npy_ws(ps);
	if (ps->p >= ps->end || (*ps->p != '\'' && *ps->p != '"'))
		return 0;
	q = *ps->p++;
	while (ps->p < ps->end && *ps->p != q) {
		if (*ps->p == '\\' || n + 1 >= cap)
			return 0;
		out[n++] = *ps->p++;
	}
	if (ps->p >= ps->end)
		return 0;
	ps->p++;
	out[n] = '\0';
	return 1;
}

static int
npy_word(struct npy_parse *ps, const char *w)
{
	size_t n = strlen(w);

	npy_ws(ps);
	if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) {
		ps->p += n;
		return 1;
	}
	return 0;
}

static int
npy_uint(struct npy_parse *ps, uint64_t *v)
{
	uint64_t x = 0;
	int digits = 0;

	npy_ws(ps);
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
		if (ck_mul64(x, 10, &x) ||
		    ck_add64(x, (uint64_t)(*ps->p - '0'), &x))
			return 0;
		ps->p++;
		digits++;
	}
	if (digits == 0)
		return 0;
	if (ps->p < ps->end && *ps->p == 'L')	/* Python 2 long */
		ps->p++;
	*v = x;
	return 1;
}

/* (a, b, ...) with an optional trailing comma; at most 8 entries kept. */
static int
npy_shape(struct npy_parse *ps, uint64_t *shape, int *ndim)
{
	int n = 0;

	if (!npy_char(ps, '('))
		return 0;
	if (npy_char(ps, ')')) {
		*ndim = 0;
		return 1;
	}
	for (;;) {
		uint64_t v;

		if (!npy_uint(ps, &v))
			return 0;
		if (n < 8)
			shape[n] = v;
		n++;
		/* Python writes a 1-tuple "(d,)": "(d)" is just a number. */
		if (n > 1 && npy_char(ps, ')'))
			break;
		if (!npy_char(ps, ','))
			return 0;
		if (npy_char(ps, ')'))
			break;
	}
	*ndim = n;
	return 1;
}

static enum tq_status
npy_header(struct tq_reader *r, const char *hdr, size_t len, uint64_t *n,
    uint64_t *d)
{
	struct npy_parse ps = { hdr, hdr + len };
	char key[32], descr[32];
	uint64_t shape[8] = { 0 };
	int have_descr = 0, have_fo = 0, have_shape = 0, fortran = 0, ndim = 0;

	if (!npy_char(&ps, '{'))
		goto bad;
	while (!npy_char(&ps, '}')) {
		if (!npy_string(&ps, key, sizeof(key)) || !npy_char(&ps, ':'))
			goto bad;
		if (strcmp(key, "descr") == 0 && !have_descr) {
			if (!npy_string(&ps, descr, sizeof(descr)))
				return tq_fail(TQ_ERR_UNSUPPORTED,
				    "npy structured dtypes are not supported");
			have_descr = 1;
		} else if (strcmp(key, "fortran_order") == 0 && !have_fo) {
			if (npy_word(&ps, "True"))
				fortran = 1;
			else if (!npy_word(&ps, "False"))
				goto bad;
			have_fo = 1;
		} else if (strcmp(key, "shape") == 0 && !have_shape) {
			if (!npy_shape(&ps, shape, &ndim))
				goto bad;
			have_shape = 1;
		} else {
			goto bad;
		}
		if (!npy_char(&ps, ',')) {
			if (!npy_char(&ps, '}'))
				goto bad;
			break;
		}
	}
	while (ps.p < ps.end && (*ps.p == ' ' || *ps.p == '\n'))
		ps.p++;
	if (ps.p != ps.end || !have_descr || !have_fo || !have_shape)
		goto bad;

	if (strcmp(descr, "<f4") == 0)
		tq_reader_layout(r, TQ_ET_F32LE, 4, 0, 0, 0);
	else if (strcmp(descr, "<f2") == 0)
		tq_reader_layout(r, TQ_ET_F16LE, 2, 0, 0, 0);
	else if (strcmp(descr, "<f8") == 0)
		tq_reader_layout(r, TQ_ET_F64LE, 8, 0, 0, 0);
	else if (strcmp(descr, "<i4") == 0)
		tq_reader_layout(r, TQ_ET_I32LE, 4, 0, 0, 1);
	else if (strcmp(descr, "|u1") == 0)
		tq_reader_layout(r, TQ_ET_U8, 1, 0, 0, 1);
	else
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy dtype '%s' is not "
		    "supported (expected <f4, <f2, <f8, <i4 or |u1)", descr);
	if (fortran)
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "npy arrays in Fortran order are not supported");
	if (ndim == 1) {
		*n = 1;
		*d = shape[0];
	} else if (ndim == 2) {
		*n = shape[0];
		*d = shape[1];
	} else {
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy array has %d "
		    "dimensions (expected 1 or 2)", ndim);
	}
	return TQ_OK;
bad:
	return tq_fail(TQ_ERR_FORMAT, "malformed npy header");
}

static enum tq_status
npy_open(struct tq_reader *r, const char *path, const char *dataset)
{
	struct tq_src *s = &r->src;
	const uint8_t *p;
	size_t off, hlen;
	uint64_t n = 0, d = 0, bytes, total;

	TQ_TRY(tq_src_fill(s, 12));
	if (tq_src_avail(s) < 6 ||
	    memcmp(tq_src_ptr(s), NPY_MAGIC, 6) != 0)
		return tq_fail(TQ_ERR_FORMAT, "not a .npy file (bad magic)");
	r->trunc = TQ_TRUNC_OF;
	p = tq_src_ptr(s);
	if (tq_src_avail(s) < 10)
		return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
	if (p[6] == 1 && p[7] == 0) {
		off = 10;
		hlen = rd_le16(p + 8);
	} else if ((p[6] == 2 || p[6] == 3) && p[7] == 0) {
		if (tq_src_avail(s) < 12)
			return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
		off = 12;
		hlen = rd_le32(p + 8);
	} else {
		return tq_fail(TQ_ERR_UNSUPPORTED,
		    "npy version %u.%u is not supported", p[6], p[7]);
	}
	if (hlen > NPY_MAX_HEADER)
		return tq_fail(TQ_ERR_FORMAT, "npy header too long (%zu bytes)",
		    hlen);
	TQ_TRY(tq_src_fill(s, off + hlen));
	if (tq_src_avail(s) < off + hlen)
		return tq_fail(TQ_ERR_FORMAT, "truncated npy header");
	TQ_TRY(npy_header(r, (const char *)tq_src_ptr(s) + off, hlen, &n, &d));
	tq_src_consume(s, off + hlen);
	if (d < 1)
		return tq_fail(TQ_ERR_FORMAT, "npy rows have dimension 0");
	if (d > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_UNSUPPORTED, "npy rows have dimension "
		    "%llu (at most %u)", (ull)d, TQ_MAX_DIM);
	tq_reader_layout(r, r->et, r->esz, 0, (uint32_t)d, r->is_integer);
	if (ck_mul64(n, r->rowbytes, &bytes) || n > INT64_MAX ||
	    ck_add64(bytes, off + hlen, &total))
		return tq_fail(TQ_ERR_FORMAT, "npy shape (%llu, %llu) is too "
		    "large", (ull)n, (ull)d);
	if (s->regular && s->size != total)
		return tq_fail(TQ_ERR_FORMAT, "header claims %llu rows of dim "
		    "%llu (%llu bytes) but the file holds %llu bytes", (ull)n,
		    (ull)d, (ull)total, (ull)(s->size));
	if (n == 0)
		return tq_fail(TQ_ERR_EMPTY, "no vectors");
	r->claimed = n;
	r->sized = s->regular;
	r->count = r->sized ? (int64_t)n : -1;
	return TQ_OK;
}

static int
npy_bid(const struct tq_sniff *sn)
{
	if (sn->avail >= 6 && memcmp(sn->p, NPY_MAGIC, 6) == 0)
		return TQ_BID_MAGIC;
	return tq_has_ext(sn->name, ".npy") ? 90 : 0;
}

const struct tq_rformat tq_rformat_npy = {
	.name = "npy",
	.bid = npy_bid,
	.open = npy_open,
	.window = TQ_WIN_BYTES,
};
