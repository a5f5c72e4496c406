/*
 * quantizer.c - parameters, fitting, the QPAR/ROTM/CBOK/CENT sections and
 * the fingerprint.  The byte layouts are specified in internal.h.
 */
#include <math.h>
#include <stdlib.h>

#define XXH_STATIC_LINKING_ONLY	/* XXH64_state_t on the stack */
#include <xxhash.h>

#include "internal.h"

#define FIT_CHUNK 4096u

/* Borrowing f32 arrays straight from a mapping needs a little-endian host. */
static int
host_is_le(void)
{
	const uint32_t one = 1;
	uint8_t b;

	memcpy(&b, &one, 1);
	return b == 1;
}

void
tq_fit_params_default(struct tq_fit_params *p)
{
	memset(p, 0, sizeof(*p));
	p->dim = 0;
	p->bits = 4;
	p->metric = TQ_METRIC_L2;
	p->seed = 42;
	p->rotation = TQ_ROT_AUTO;
	p->scale_search = 0;
	p->sample = 0;
	p->lists = 0;
	p->train = 0;
	p->iterations = 12;
}

void
tq_quantizer_layout(struct tq_quantizer *q)
{
	uint32_t nf;

	if (q->bits == 3) {
		q->field_bits = 6;
		q->coords_per_field = 2;
	} else {
		q->field_bits = 4;
		q->coords_per_field = 4 / q->bits;
	}
	nf = (q->dim + q->coords_per_field - 1) / q->coords_per_field;
	q->nfields = (nf + 3) / 4 * 4;
}

/*
 * q->cellp from q->bounds: the share of the coordinates of a random unit
 * vector in dim dimensions (near N(0, 1 / dim)) that fall in each level.
 * The search's dot form fits its integer grid with them (search.c).
 */
void
tq_quantizer_cells(struct tq_quantizer *q)
{
	double sd = sqrt(2.0 / (double)(q->dim ? q->dim : 1)), lo = 0.0, hi;
	unsigned v;

	memset(q->cellp, 0, sizeof(q->cellp));
	if (q->nlevels < 2 || q->nlevels > 16)
		return;
	for (v = 0; v < q->nlevels; v++) {
		hi = v + 1 < q->nlevels ?
		    0.5 * (1.0 + erf((double)q->bounds[v] / sd)) : 1.0;
		q->cellp[v] = (float)(hi - lo);
		lo = hi;
	}
}

void
tq_quantizer_free(struct tq_quantizer *q)
{
	if (q == NULL)
		return;
	if (q->mem != NULL) {
		free(q->mem);
	} else if (!q->borrowed) {
		free(q->rot);
		free(q->centre);	/* rcentre shares this allocation */
	}
	free(q->ivfmem);
	free(q->ivfbmem);
	tq_ivf_release(&q->ivf);
	free(q);
}

double
tq_quantizer_offset(const struct tq_quantizer *q)
{
	return q->offset;
}

uint32_t
tq_quantizer_dim(const struct tq_quantizer *q)
{
	return q->dim;
}

unsigned
tq_quantizer_bits(const struct tq_quantizer *q)
{
	return q->bits;
}

enum tq_metric
tq_quantizer_metric(const struct tq_quantizer *q)
{
	return q->metric;
}

uint32_t
tq_quantizer_lists(const struct tq_quantizer *q)
{
	return q->ivf.nlist;
}

int
tq_quantizer_centred(const struct tq_quantizer *q)
{
	return (q->flags & TQ_QFLAG_CENTRED) != 0;
}

int
tq_quantizer_residual(const struct tq_quantizer *q)
{
	return (q->flags & TQ_QFLAG_RESIDUAL) != 0;
}

size_t
tq_code_bytes(const struct tq_quantizer *q)
{
	return ((size_t)q->dim * q->bits + 7) / 8;
}

/* ------------------------------------------------------------------------ */
/* Fitting                                                                   */

static enum tq_status
check_params(const struct tq_fit_params *p)
{
	if (p->bits < 1 || p->bits > 4)
		return tq_fail(TQ_ERR_ARG, "bits must be 1, 2, 3 or 4");
	if (p->metric != TQ_METRIC_IP && p->metric != TQ_METRIC_COSINE &&
	    p->metric != TQ_METRIC_L2)
		return tq_fail(TQ_ERR_ARG, "unknown metric %d", (int)p->metric);
	if (p->rotation != TQ_ROT_AUTO && p->rotation != TQ_ROT_DENSE &&
	    p->rotation != TQ_ROT_STRUCTURED && p->rotation != TQ_ROT_HADAMARD)
		return tq_fail(TQ_ERR_ARG, "unknown rotation kind %d",
		    (int)p->rotation);
	if (p->dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, "dimension %u out of range 1..%u",
		    (unsigned)p->dim, (unsigned)TQ_MAX_DIM);
	if (p->rotation_block > TQ_ROT_BLOCK_MAX)
		return tq_fail(TQ_ERR_ARG, "rotation block width %u out of "
		    "range 1..%u", (unsigned)p->rotation_block,
		    (unsigned)TQ_ROT_BLOCK_MAX);
	if (p->rotation_block != 0 && p->rotation != TQ_ROT_AUTO &&
	    p->rotation != TQ_ROT_STRUCTURED)
		return tq_fail(TQ_ERR_ARG, "a rotation block width needs a "
		    "structured rotation");
	return TQ_OK;
}

/*
 * A uniform sample of rows for k-means, kept while the data streams by
 * (Algorithm R, seeded): memory grows with the rows kept, up to `cap`.
 */
struct reservoir {
	float *rows;
	size_t cap, len, alloc;
	uint64_t g;
};

static enum tq_status
reservoir_add(struct reservoir *rs, const float *x, uint32_t dim,
    uint64_t seen)
{
	size_t at;

	if (rs->cap == 0)
		return TQ_OK;
	if (rs->len < rs->cap) {
		if (rs->len == rs->alloc) {
			size_t na = rs->alloc ? 2 * rs->alloc : 1024;
			float *nr;

			if (na > rs->cap)
				na = rs->cap;
			/*
			 * realloc, not a new block and a copy: a large block
			 * is moved by remapping its pages, so the old and the
			 * new copy are never both resident (a copy made the
			 * peak twice the sample's size at each doubling).
			 */
			if (na > SIZE_MAX / dim / sizeof(float) ||
			    (nr = realloc(rs->rows, na * dim *
			    sizeof(float))) == NULL)
				return tq_fail(TQ_ERR_NOMEM, "fit: out of memory "
				    "for %zu sample rows", na);
			rs->rows = nr;
			rs->alloc = na;
		}
		at = rs->len++;
	} else {
		uint64_t j = tq_rand_below(&rs->g, seen + 1);

		if (j >= rs->cap)
			return TQ_OK;
		at = (size_t)j;
	}
	memcpy(rs->rows + at * dim, x, dim * sizeof(float));
	return TQ_OK;
}

/*
 * One pass over the data: the mean of the (for cosine, normalised) rows,
 * in double, and the k-means sample.  *seen receives the rows read,
 * *offset the mean's norm over the rows' RMS distance from it
 * (tq_quantizer_offset).
 */
static enum tq_status
data_pass(struct tq_reader *r, uint32_t dim, enum tq_metric metric,
    const struct tq_fit_params *p, float *centre, struct reservoir *rs,
    uint64_t *nseen, double *offset)
{
	uint64_t sample = p->sample;
	int64_t count = tq_reader_count(r);
	uint64_t total = count < 0 ? 0 : sample != 0 &&
	    (uint64_t)count > sample ? sample : (uint64_t)count;
	double *sum, sq = 0.0, c2 = 0.0, v;
	float *buf;
	uint64_t seen = 0;
	size_t got, i, j;
	enum tq_status st = TQ_OK;

	*offset = 0.0;
	sum = tq_callocarray(dim, sizeof(double));
	buf = tq_mallocarray((size_t)FIT_CHUNK * dim, sizeof(float));
	if (sum == NULL || buf == NULL) {
		free(sum);
		free(buf);
		return tq_fail(TQ_ERR_NOMEM, "fit: out of memory");
	}
	while (sample == 0 || seen < sample) {
		size_t want = FIT_CHUNK;

		if (sample != 0 && sample - seen < want)
			want = (size_t)(sample - seen);
		if ((st = tq_reader_read(r, buf, want, &got)) != TQ_OK)
			break;
		if (got == 0)
			break;
		for (i = 0; i < got && st == TQ_OK; i++) {
			float *x = buf + i * dim;
			double scale = 1, rsq = 0;

			if (metric == TQ_METRIC_COSINE) {
				double nn = 0;

				for (j = 0; j < dim; j++)
					nn += (double)x[j] * x[j];
				scale = nn > 0 ? 1 / sqrt(nn) : 0;
			}
			for (j = 0; j < dim; j++) {
				double y = scale * x[j];

				sum[j] += y;
				rsq += y * y;
			}
			sq += rsq;
			if ((st = tq_norm_check(metric, rsq, "row", seen +
			    i)) != TQ_OK)
				break;
			if (rs->cap > 0) {
				if (metric == TQ_METRIC_COSINE)
					(void)tq_normalise(x, dim, x);
				st = reservoir_add(rs, x, dim, seen + i);
			}
		}
		if (st != TQ_OK)
			break;
		seen += got;
		if (p->progress != NULL)
			p->progress(p->progress_arg, "reading", seen, total);
	}
	*nseen = seen;
	if (st == TQ_OK && seen == 0)
		st = tq_fail(TQ_ERR_EMPTY, "fit: the data holds no vectors");
	if (st == TQ_OK) {
		for (j = 0; j < dim; j++) {
			centre[j] = (float)(sum[j] / (double)seen);
			c2 += (sum[j] / (double)seen) * (sum[j] / (double)seen);
		}
		/* E|x - m|^2 = E|x|^2 - |m|^2; rows all alike: 0. */
		v = sq / (double)seen - c2;
		if (v > 1e-12 * c2 && v > 0.0)
			*offset = sqrt(c2 / v);
	}
	free(sum);
	free(buf);
	return st;
}

/*
 * Moves a uniform draw (seeded) of m of the sample's rows to its front:
 * the rows are kept in the order the data gave them while the sample
 * holds them all, and the data's order is often not random (GloVe's
 * words by frequency, a corpus by class or date).  Taking its first m
 * fitted GloVe-100's 576 lists to its 73 728 most frequent words.
 */
static void
sample_front(struct reservoir *rs, uint32_t dim, size_t m, uint64_t seed)
{
	uint64_t g = seed ^ 0x66726f6e74ull;
	float t;

	for (size_t i = 0; i < m && i + 1 < rs->len; i++) {
		size_t j = i + (size_t)tq_rand_below(&g, rs->len - i);
		float *a = rs->rows + i * dim, *b = rs->rows + j * dim;

		if (j == i)
			continue;
		for (uint32_t e = 0; e < dim; e++) {
			t = a[e];
			a[e] = b[e];
			b[e] = t;
		}
	}
}

/*
 * The fitted centroids to IVFC's bf16 form (tq_ivf_round), kept in f32 as
 * well for the build that may follow in this process.  Centroids this
 * large (never from real data) stay f32, so that no offset overflows.
 */
static enum tq_status
round_lists(struct tq_quantizer *q)
{
	size_t cnt = (size_t)q->ivf.nlist * q->dim;
	float *base;

	for (size_t i = 0; i < cnt; i++)
		if (!(fabsf(q->ivfmem[i]) < 0x1p100f))
			return TQ_OK;
	if ((q->ivfbmem = malloc(q->dim * sizeof(float) + cnt *
	    sizeof(uint16_t))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "fit: out of memory for %u lists",
		    (unsigned)q->ivf.nlist);
	base = q->ivfbmem;
	q->ivf.cbase = base;
	q->ivf.cb = (const uint16_t *)(const void *)(base + q->dim);
	tq_ivf_round(q->ivfmem, q->ivf.nlist, q->dim, base,
	    (uint16_t *)(uintptr_t)q->ivf.cb);
	return TQ_OK;
}

/*
 * The coarse lists: k-means on the sample.  TQ_LISTS_AUTO takes the
 * square root of the rows read, and the default sample (a million rows
 * for AUTO) is cut to TQ_TRAIN_PER_LIST rows a list once the count is
 * known.
 */
static enum tq_status
fit_lists(struct tq_quantizer *q, const struct tq_fit_params *p,
    struct reservoir *rs, uint64_t seen)
{
	struct tq_kmeans_params kp;
	uint32_t k = p->lists;
	size_t m = rs->len;

	if (k == TQ_LISTS_AUTO) {
		double r = floor(sqrt((double)seen) + 0.5);

		k = r < 1.0 ? 1 : r > (double)TQ_MAX_LISTS ? TQ_MAX_LISTS :
		    (uint32_t)r;
		if (p->train == 0 && m > (size_t)k * TQ_TRAIN_PER_LIST) {
			m = (size_t)k * TQ_TRAIN_PER_LIST;
			sample_front(rs, q->dim, m, p->seed);
		}
	}
	if (k > TQ_MAX_LISTS)
		return tq_fail(TQ_ERR_ARG, "at most %u lists", TQ_MAX_LISTS);
	if (m < k)
		return tq_fail(TQ_ERR_ARG, "%u lists need at least %u sample "
		    "rows; the data gave %zu", (unsigned)k, (unsigned)k, m);
	if ((q->ivfmem = tq_mallocarray((size_t)k, (size_t)q->dim *
	    sizeof(float))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "fit: out of memory for %u lists",
		    (unsigned)k);
	kp.threads = p->threads;
	kp.progress = p->progress;
	kp.progress_arg = p->progress_arg;
	TQ_TRY(tq_kmeans_run(rs->rows, m, q->dim, k, p->iterations, p->seed,
	    &kp, q->ivfmem));
	q->ivf.nlist = k;
	q->ivf.cent = q->ivfmem;
	TQ_TRY(round_lists(q));
	return tq_ivf_prepare(&q->ivf, q->dim);
}

enum tq_status
tq_quantizer_fit(const struct tq_fit_params *p, struct tq_reader *data,
    struct tq_quantizer **out)
{
	struct tq_quantizer *q;
	struct reservoir rs;
	uint32_t dim = p->dim, lists = p->lists;
	uint64_t seen = 0;
	enum tq_status st;

	*out = NULL;
	TQ_TRY(check_params(p));
	if (lists != 0 && data == NULL)
		return tq_fail(TQ_ERR_ARG, "lists need data to fit them");
	if (p->residual && lists == 0)
		return tq_fail(TQ_ERR_ARG, "residual codes need lists");
	if (data != NULL) {
		uint32_t rd = tq_reader_dim(data);

		if (dim == 0)
			dim = rd;
		else if (dim != rd)
			return tq_fail(TQ_ERR_MISMATCH, "dimension %u given, "
			    "but the data has dimension %u", (unsigned)dim,
			    (unsigned)rd);
	}
	if (dim < 1 || dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_ARG, dim == 0 ? "no dimension given "
		    "and no data to take it from" : "dimension %u out of "
		    "range 1..%u", (unsigned)dim, (unsigned)TQ_MAX_DIM);
	memset(&rs, 0, sizeof(rs));
	rs.g = p->seed ^ 0x73616d706c65ull;
	if (lists != 0) {
		uint64_t cap = p->train;

		if (cap == 0)
			cap = lists == TQ_LISTS_AUTO ? (uint64_t)1 << 20 :
			    (uint64_t)lists * TQ_TRAIN_PER_LIST;
		/* No room for more rows than the input holds: the sample
		   grows by doubling, which would otherwise overshoot. */
		if (tq_reader_count(data) >= 0) {
			uint64_t rows = (uint64_t)tq_reader_count(data);

			if (p->sample != 0 && p->sample < rows)
				rows = p->sample;
			if (rows < cap)
				cap = rows;
		}
		rs.cap = cap > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)cap;
	}
	if ((q = calloc(1, sizeof(*q))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "fit: out of memory");
	q->dim = dim;
	q->bits = p->bits;
	q->metric = p->metric;
	q->seed = p->seed;
	q->rotation = tq_rotation_resolve(dim, p->rotation, p->rotation_block);
	q->nlevels = 1u << p->bits;
	q->flags = (p->scale_search ? TQ_QFLAG_SCALE_SEARCH : 0) |
	    (data != NULL && !p->no_centre ? TQ_QFLAG_CENTRED : 0) |
	    (p->residual ? TQ_QFLAG_RESIDUAL : 0);
	tq_quantizer_layout(q);
	if ((st = tq_codebook(dim, q->bits, q->centroids, q->bounds)) !=
	    TQ_OK)
		goto fail;
	tq_quantizer_cells(q);
	if ((q->centre = tq_callocarray(2 * (size_t)dim, sizeof(float))) ==
	    NULL) {
		st = tq_fail(TQ_ERR_NOMEM, "fit: out of memory");
		goto fail;
	}
	q->rcentre = q->centre + dim;
	if (data != NULL && (st = data_pass(data, dim, p->metric, p,
	    q->centre, &rs, &seen, &q->offset)) != TQ_OK)
		goto fail;
	if (data != NULL && p->no_centre)
		memset(q->centre, 0, dim * sizeof(float));
	if (lists != 0 && (st = fit_lists(q, p, &rs, seen)) != TQ_OK)
		goto fail;
	if ((st = tq_rotation_make(dim, q->rotation, p->rotation_block,
	    p->seed, &q->rot, &q->rot_len)) != TQ_OK)
		goto fail;
	if (data != NULL && !p->no_centre)
		tq_rotate(q, q->centre, 1, q->rcentre);
	q->cc = tq_centre_norm2(q);
	free(rs.rows);
	*out = q;
	return TQ_OK;
fail:
	free(rs.rows);
	tq_quantizer_free(q);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Serialisation                                                             */

/*
 * The sections are produced once, as a sequence of (tag, bytes) pieces,
 * and consumed either by a file writer or by the fingerprint hash.
 */
struct sink {
	struct tq_filewriter *fw;	/* or NULL: hash */
	XXH64_state_t *h;
};

static enum tq_status
sink_begin(struct sink *s, uint32_t tag)
{
	return s->fw ? tq_fw_begin(s->fw, tag) : TQ_OK;
}

static enum tq_status
sink_write(struct sink *s, const void *p, size_t n)
{
	if (s->fw)
		return tq_fw_write(s->fw, p, n);
	XXH64_update(s->h, p, n);
	return TQ_OK;
}

static enum tq_status
sink_end(struct sink *s)
{
	return s->fw ? tq_fw_end(s->fw) : TQ_OK;
}

/*
 * Writes n values little-endian through a bounce buffer: f32 (w 4) or
 * u16 (w 2).
 */
static enum tq_status
sink_le(struct sink *s, const void *v, size_t n, size_t w)
{
	uint8_t buf[4096];
	size_t i, k;

	for (i = 0; i < n; i += k) {
		k = n - i < sizeof(buf) / w ? n - i : sizeof(buf) / w;
		for (size_t j = 0; j < k; j++)
			if (w == 4)
				wr_lef32(buf + 4 * j, ((const float *)v)[i + j]);
			else
				wr_le16(buf + 2 * j,
				    ((const uint16_t *)v)[i + j]);
		TQ_TRY(sink_write(s, buf, w * k));
	}
	return TQ_OK;
}

static enum tq_status
sink_floats(struct sink *s, const float *v, size_t n)
{
	return sink_le(s, v, n, 4);
}

static enum tq_status
serialize(const struct tq_quantizer *q, struct sink *s)
{
	uint8_t qpar[TQ_QPAR_SIZE];

	memset(qpar, 0, sizeof(qpar));
	wr_le32(qpar + 0, q->dim);
	wr_le32(qpar + 4, q->bits);
	wr_le32(qpar + 8, (uint32_t)q->metric);
	wr_le32(qpar + 12, q->flags);
	wr_le64(qpar + 16, q->seed);
	wr_le32(qpar + 24, (uint32_t)q->rotation);
	wr_le32(qpar + 28, q->nlevels);
	wr_le32(qpar + 32, q->field_bits);
	wr_le32(qpar + 36, q->coords_per_field);
	wr_le32(qpar + 40, q->nfields);
	TQ_TRY(sink_begin(s, TQ_TAG_QPAR));
	TQ_TRY(sink_write(s, qpar, sizeof(qpar)));
	TQ_TRY(sink_end(s));

	TQ_TRY(sink_begin(s, TQ_TAG_ROTM));
	TQ_TRY(sink_floats(s, q->rot, q->rot_len / 4));
	TQ_TRY(sink_end(s));

	TQ_TRY(sink_begin(s, TQ_TAG_CBOK));
	TQ_TRY(sink_floats(s, q->centroids, q->nlevels));
	TQ_TRY(sink_floats(s, q->bounds, q->nlevels - 1));
	TQ_TRY(sink_end(s));

	TQ_TRY(sink_begin(s, TQ_TAG_CENT));
	TQ_TRY(sink_floats(s, q->centre, q->dim));
	TQ_TRY(sink_floats(s, q->rcentre, q->dim));
	TQ_TRY(sink_end(s));

	if (q->ivf.nlist > 0) {
		uint8_t hdr[TQ_IVFC_HEADER];

		memset(hdr, 0, sizeof(hdr));
		wr_le32(hdr, q->ivf.nlist);
		wr_le32(hdr + 4, q->dim);
		wr_le32(hdr + 8, q->ivf.cb != NULL ? TQ_IVFC_BF16 : 0);
		TQ_TRY(sink_begin(s, TQ_TAG_IVFC));
		TQ_TRY(sink_write(s, hdr, sizeof(hdr)));
		if (q->ivf.cb != NULL) {
			TQ_TRY(sink_floats(s, q->ivf.cbase, q->dim));
			TQ_TRY(sink_le(s, q->ivf.cb,
			    (size_t)q->ivf.nlist * q->dim, 2));
		} else {
			TQ_TRY(sink_floats(s, q->ivf.cent,
			    (size_t)q->ivf.nlist * q->dim));
		}
		TQ_TRY(sink_end(s));
	}
	return TQ_OK;
}

enum tq_status
tq_quantizer_write_sections(const struct tq_quantizer *q,
    struct tq_filewriter *fw)
{
	struct sink s = { fw, NULL };

	return serialize(q, &s);
}

uint64_t
tq_quantizer_fingerprint(const struct tq_quantizer *q)
{
	XXH64_state_t st;
	struct sink s = { NULL, &st };

	XXH64_reset(&st, 0);
	(void)serialize(q, &s);	/* hashing cannot fail */
	return XXH64_digest(&st);
}

enum tq_status
tq_quantizer_save(const struct tq_quantizer *q, const char *path)
{
	struct tq_filewriter *fw;
	enum tq_status st;

	TQ_TRY(tq_fw_open(path, TQ_FILE_QUANTIZER, 8, &fw));
	if ((st = tq_quantizer_write_sections(q, fw)) != TQ_OK) {
		tq_fw_abort(fw);
		return st;
	}
	return tq_fw_commit(fw);
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                   */

static enum tq_status
need_section(const struct tq_file *f, uint32_t tag, const char *name,
    const uint8_t **p, uint64_t *len)
{
	if ((*p = tq_file_section(f, tag, len)) == NULL)
		return tq_fail(TQ_ERR_FORMAT, "missing section %s", name);
	return TQ_OK;
}

static enum tq_status
parse_qpar(const uint8_t *p, uint64_t len, struct tq_quantizer *q)
{
	struct tq_quantizer want;
	uint32_t rot, metric;
	unsigned i;

	if (len != TQ_QPAR_SIZE)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: length %llu, "
		    "expected %u", (unsigned long long)len, TQ_QPAR_SIZE);
	q->dim = rd_le32(p);
	q->bits = rd_le32(p + 4);
	metric = rd_le32(p + 8);
	q->flags = rd_le32(p + 12);
	q->seed = rd_le64(p + 16);
	rot = rd_le32(p + 24);
	q->nlevels = rd_le32(p + 28);
	if (q->dim < 1 || q->dim > TQ_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: dimension %u out "
		    "of range 1..%u", (unsigned)q->dim, (unsigned)TQ_MAX_DIM);
	if (q->bits < 1 || q->bits > 4)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: bits %u not in "
		    "1..4", q->bits);
	if (metric > TQ_METRIC_L2)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: unknown metric "
		    "%u", (unsigned)metric);
	q->metric = (enum tq_metric)metric;
	if (q->flags & ~TQ_QFLAGS)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: unknown flags "
		    "0x%x", (unsigned)q->flags);
	if (rot != TQ_ROT_DENSE && rot != TQ_ROT_STRUCTURED &&
	    rot != TQ_ROT_HADAMARD)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: unknown rotation "
		    "kind %u", (unsigned)rot);
	if (rot == TQ_ROT_DENSE && q->dim > TQ_DENSE_MAX_DIM)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: dense rotation "
		    "at dimension %u", (unsigned)q->dim);
	q->rotation = (enum tq_rotation)rot;
	if (q->nlevels != 1u << q->bits)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: %u levels for %u "
		    "bits", q->nlevels, q->bits);
	want = *q;
	tq_quantizer_layout(&want);
	if (rd_le32(p + 32) != want.field_bits ||
	    rd_le32(p + 36) != want.coords_per_field ||
	    rd_le32(p + 40) != want.nfields)
		return tq_fail(TQ_ERR_FORMAT, "section QPAR: field layout "
		    "does not match dimension and bits");
	for (i = 44; i < TQ_QPAR_SIZE; i++)
		if (p[i] != 0)
			return tq_fail(TQ_ERR_FORMAT, "section QPAR: reserved "
			    "bytes are not zero");
	q->field_bits = want.field_bits;
	q->coords_per_field = want.coords_per_field;
	q->nfields = want.nfields;
	return TQ_OK;
}

static enum tq_status
parse_cbok(const uint8_t *p, uint64_t len, struct tq_quantizer *q)
{
	unsigned n = q->nlevels, k;

	if (len != (uint64_t)(2 * n - 1) * 4)
		return tq_fail(TQ_ERR_FORMAT, "section CBOK: length %llu, "
		    "expected %u", (unsigned long long)len, (2 * n - 1) * 4);
	for (k = 0; k < n; k++)
		q->centroids[k] = rd_lef32(p + 4 * k);
	for (k = 0; k + 1 < n; k++)
		q->bounds[k] = rd_lef32(p + 4 * (n + k));
	for (k = 0; k < n; k++)
		if (!(q->centroids[k] >= -1 && q->centroids[k] <= 1))
			return tq_fail(TQ_ERR_FORMAT, "section CBOK: centroid "
			    "%u is not in [-1, 1]", k);
	for (k = 0; k + 1 < n; k++)
		if (!(q->centroids[k] < q->bounds[k] &&
		    q->bounds[k] < q->centroids[k + 1]))
			return tq_fail(TQ_ERR_FORMAT, "section CBOK: levels "
			    "not ascending or boundary %u not between them", k);
	/* The encoder relies on the symmetry the fitter constructs. */
	for (k = 0; k < n; k++)
		if (q->centroids[k] != -q->centroids[n - 1 - k] ||
		    (k + 1 < n && q->bounds[k] != -q->bounds[n - 2 - k]))
			return tq_fail(TQ_ERR_FORMAT, "section CBOK: codebook "
			    "is not symmetric");
	return TQ_OK;
}

/*
 * IVFC in bf16 (encoding 1) at p, L lists: the mean, then the offsets,
 * every value they stand for finite.  Borrowed where the map allows;
 * residual codes read their lists' centroids row by row (tq_row_centre),
 * so they get the f32 values as well (ivfmem, checked there); others are
 * widened a row at a time to be checked.
 */
static enum tq_status
load_ivfc_bf16(const uint8_t *p, uint32_t nl, struct tq_quantizer *q,
    int copy)
{
	size_t cnt = (size_t)nl * q->dim, i;
	const uint8_t *ob = p + 4 * (size_t)q->dim;
	float *base, *c;
	uint16_t *cb;
	int resid;

	for (i = 0; i < q->dim; i++)
		if (!isfinite(rd_lef32(p + 4 * i)))
			return tq_fail(TQ_ERR_FORMAT, "section IVFC: mean %zu "
			    "is NaN or infinite", i);
	if (!copy && host_is_le() && ((uintptr_t)p % 4) == 0) {
		q->ivf.cbase = (const float *)(const void *)p;
		q->ivf.cb = (const uint16_t *)(const void *)ob;
	} else {
		if ((q->ivfbmem = malloc(q->dim * sizeof(float) + cnt *
		    sizeof(uint16_t))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		base = q->ivfbmem;
		cb = (uint16_t *)(void *)(base + q->dim);
		for (i = 0; i < q->dim; i++)
			base[i] = rd_lef32(p + 4 * i);
		for (i = 0; i < cnt; i++)
			cb[i] = (uint16_t)(ob[2 * i] | ob[2 * i + 1] << 8);
		q->ivf.cbase = base;
		q->ivf.cb = cb;
	}
	q->ivf.nlist = nl;
	resid = (q->flags & TQ_QFLAG_RESIDUAL) != 0;
	if ((c = tq_mallocarray(resid ? cnt : q->dim, sizeof(float))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	for (uint32_t o = 0; o < nl; o++) {
		float *r = c + (resid ? (size_t)o * q->dim : 0);

		tq_ivf_rows(&q->ivf, q->dim, o, 1, r);
		for (i = 0; i < q->dim; i++)
			if (!isfinite(r[i])) {
				free(c);
				return tq_fail(TQ_ERR_FORMAT, "section IVFC: "
				    "value %zu is NaN or infinite",
				    (size_t)o * q->dim + i);
			}
	}
	if (resid)
		q->ivf.cent = q->ivfmem = c;
	else
		free(c);
	return tq_ivf_prepare(&q->ivf, q->dim);
}

/* The optional IVFC section: checked, then borrowed or copied. */
static enum tq_status
load_ivfc(const struct tq_file *f, struct tq_quantizer *q, int copy)
{
	const uint8_t *p;
	uint64_t len, want;
	uint32_t nl, enc;
	size_t cnt, i;

	if ((p = tq_file_section(f, TQ_TAG_IVFC, &len)) == NULL)
		return TQ_OK;
	if (len < TQ_IVFC_HEADER)
		return tq_fail(TQ_ERR_FORMAT, "section IVFC: too short");
	nl = rd_le32(p);
	enc = rd_le32(p + 8);
	if (nl < 1 || nl > TQ_MAX_LISTS || rd_le32(p + 4) != q->dim ||
	    rd_le32(p + 12) != 0)
		return tq_fail(TQ_ERR_FORMAT, "section IVFC: bad header");
	if (enc != 0 && enc != TQ_IVFC_BF16)
		return tq_fail(TQ_ERR_FORMAT, "section IVFC: encoding %u "
		    "unknown (a newer tq?)", (unsigned)enc);
	want = TQ_IVFC_HEADER + (enc == TQ_IVFC_BF16 ? 4 * (uint64_t)q->dim +
	    (uint64_t)nl * q->dim * 2 : (uint64_t)nl * q->dim * 4);
	if (len != want)
		return tq_fail(TQ_ERR_FORMAT, "section IVFC: length %llu, "
		    "expected %llu", (unsigned long long)len,
		    (unsigned long long)want);
	cnt = (size_t)nl * q->dim;
	p += TQ_IVFC_HEADER;
	if (enc == TQ_IVFC_BF16)
		return load_ivfc_bf16(p, nl, q, copy);
	for (i = 0; i < cnt; i++)
		if (!isfinite(rd_lef32(p + 4 * i)))
			return tq_fail(TQ_ERR_FORMAT, "section IVFC: value %zu "
			    "is NaN or infinite", i);
	if (!copy && host_is_le() && ((uintptr_t)p % 4) == 0) {
		q->ivf.cent = (const float *)(const void *)p;
	} else {
		if ((q->ivfmem = tq_mallocarray(cnt, sizeof(float))) == NULL)
			return tq_fail(TQ_ERR_NOMEM, "out of memory");
		for (i = 0; i < cnt; i++)
			q->ivfmem[i] = rd_lef32(p + 4 * i);
		q->ivf.cent = q->ivfmem;
	}
	q->ivf.nlist = nl;
	return tq_ivf_prepare(&q->ivf, q->dim);
}

enum tq_status
tq_quantizer_from_file(const struct tq_file *f, int copy,
    struct tq_quantizer **out)
{
	struct tq_quantizer *q;
	const uint8_t *qp, *rp, *cp, *ep;
	uint64_t qlen, rlen, clen, elen;
	size_t i, dim;
	enum tq_status st;

	*out = NULL;
	TQ_TRY(need_section(f, TQ_TAG_QPAR, "QPAR", &qp, &qlen));
	TQ_TRY(need_section(f, TQ_TAG_ROTM, "ROTM", &rp, &rlen));
	TQ_TRY(need_section(f, TQ_TAG_CBOK, "CBOK", &cp, &clen));
	TQ_TRY(need_section(f, TQ_TAG_CENT, "CENT", &ep, &elen));
	if ((q = calloc(1, sizeof(*q))) == NULL)
		return tq_fail(TQ_ERR_NOMEM, "out of memory");
	q->borrowed = 1;	/* nothing to free yet */
	if ((st = parse_qpar(qp, qlen, q)) != TQ_OK ||
	    (st = parse_cbok(cp, clen, q)) != TQ_OK)
		goto fail;
	tq_quantizer_cells(q);
	dim = q->dim;
	if (rlen > SIZE_MAX) {
		st = tq_fail(TQ_ERR_FORMAT, "section ROTM: too long");
		goto fail;
	}
	if ((st = tq_rotation_check(q->dim, q->rotation, rp, (size_t)rlen)) !=
	    TQ_OK)
		goto fail;
	if (elen != 2 * (uint64_t)dim * 4) {
		st = tq_fail(TQ_ERR_FORMAT, "section CENT: length %llu, "
		    "expected %llu", (unsigned long long)elen,
		    (unsigned long long)(2 * (uint64_t)dim * 4));
		goto fail;
	}
	for (i = 0; i < 2 * dim; i++)
		if (!isfinite(rd_lef32(ep + 4 * i))) {
			st = tq_fail(TQ_ERR_FORMAT, "section CENT: value %zu "
			    "is NaN or infinite", i);
			goto fail;
		}
	if ((st = load_ivfc(f, q, copy)) != TQ_OK)
		goto fail;
	if ((q->flags & TQ_QFLAG_RESIDUAL) && q->ivf.nlist == 0) {
		st = tq_fail(TQ_ERR_FORMAT, "section QPAR: residual codes "
		    "without lists (no IVFC)");
		goto fail;
	}
	q->rot_len = (size_t)rlen;
	if (!copy && host_is_le() && ((uintptr_t)rp % 4) == 0 &&
	    ((uintptr_t)ep % 4) == 0) {
		/* The sections are 64-byte aligned in a page-aligned map. */
		q->rot = (float *)(uintptr_t)rp;
		q->centre = (float *)(uintptr_t)ep;
		q->rcentre = q->centre + dim;
		q->cc = tq_centre_norm2(q);
		*out = q;
		return TQ_OK;
	}
	q->borrowed = 0;
	if ((q->mem = tq_mallocarray(q->rot_len / 4 + 2 * dim,
	    sizeof(float))) == NULL) {
		st = tq_fail(TQ_ERR_NOMEM, "out of memory");
		goto fail;
	}
	q->rot = q->mem;
	q->centre = q->rot + q->rot_len / 4;
	q->rcentre = q->centre + dim;
	for (i = 0; i < q->rot_len / 4; i++)
		q->rot[i] = rd_lef32(rp + 4 * i);
	for (i = 0; i < 2 * dim; i++)
		q->centre[i] = rd_lef32(ep + 4 * i);
	q->cc = tq_centre_norm2(q);
	*out = q;
	return TQ_OK;
fail:
	tq_quantizer_free(q);
	return st;
}

enum tq_status
tq_quantizer_load(const char *path, struct tq_quantizer **out)
{
	struct tq_file f;
	enum tq_status st;

	*out = NULL;
	TQ_TRY(tq_file_map(path, &f));
	if (f.kind != TQ_FILE_QUANTIZER && f.kind != TQ_FILE_INDEX)
		st = tq_fail(TQ_ERR_FORMAT, "%s: not a quantizer or index "
		    "file", path);
	else
		st = tq_quantizer_from_file(&f, 1, out);
	tq_file_unmap(&f);
	return st;
}
