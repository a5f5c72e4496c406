/*
 * test_labels.c - labels: the labels file reader, the LABL section of an
 * index (lookups by label and by id, the vector of a label, hostile
 * orders and bytes refused on use), and the word2vec and .vec writers.
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>

#include "internal.h"
#include "unit.h"

#define DIM 8
#define N 70

static void
put_file(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");

	CHECK(fp != NULL);
	if (fp == NULL)
		return;
	CHECK(fwrite(p, 1, n, fp) == n);
	fclose(fp);
}

static void
test_labels_reader(void)
{
	const char *path = unit_path("l.txt"), *s;
	struct tq_labels_reader *r;
	char big[TQ_LABEL_MAX + 3];
	size_t len;

	put_file(path, "a\r\nbb\nc d\n\ne", 13);
	CHECK_OK(tq_labels_open(path, &r));
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s != NULL && len == 1 && strcmp(s, "a") == 0);
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s != NULL && len == 2 && strcmp(s, "bb") == 0);
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s != NULL && strcmp(s, "c d") == 0);
	CHECK_ST(tq_labels_read(r, &s, &len), TQ_ERR_FORMAT);
	CHECK_DETAIL("line 4: empty label");
	CHECK(s == NULL);
	tq_labels_close(r);

	/* The last line without its newline; then the end. */
	put_file(path, "x\ny", 3);
	CHECK_OK(tq_labels_open(path, &r));
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s != NULL && strcmp(s, "y") == 0);
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s == NULL);
	tq_labels_close(r);

	/* 4096 bytes are a label, 4097 are not. */
	memset(big, 'z', sizeof(big));
	big[TQ_LABEL_MAX] = '\n';
	put_file(path, big, TQ_LABEL_MAX + 1);
	CHECK_OK(tq_labels_open(path, &r));
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK(s != NULL && len == TQ_LABEL_MAX);
	tq_labels_close(r);
	big[TQ_LABEL_MAX] = 'z';
	big[TQ_LABEL_MAX + 1] = '\n';
	put_file(path, big, TQ_LABEL_MAX + 2);
	CHECK_OK(tq_labels_open(path, &r));
	CHECK_ST(tq_labels_read(r, &s, &len), TQ_ERR_FORMAT);
	CHECK_DETAIL("line 1: label longer than 4096 bytes");
	tq_labels_close(r);

	put_file(path, "ok\nb\0d\n", 7);
	CHECK_OK(tq_labels_open(path, &r));
	CHECK_OK(tq_labels_read(r, &s, &len));
	CHECK_ST(tq_labels_read(r, &s, &len), TQ_ERR_FORMAT);
	CHECK_DETAIL("line 2: NUL byte");
	tq_labels_close(r);
}

/* Rows of N x DIM, and their labels "w0", ... with row 9 labelled "w3". */
static float rows[N * DIM];
static char names[N][16];	/* "w" and any int: no truncation warning */
static const char *labels[N];

static void
make_rows(void)
{
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < DIM; j++)
			rows[i * DIM + j] = sinf((float)(i * DIM + j) * 0.37f) +
			    (float)(i % 5) * 0.25f;
		snprintf(names[i], sizeof(names[i]), "w%d", i == 9 ? 3 : i);
		labels[i] = names[i];
	}
}

/* A text file of the rows with their labels, read back as the corpus. */
static void
write_corpus(const char *path, enum tq_vecfmt fmt, uint64_t n)
{
	struct tq_writer *w;

	CHECK_OK(tq_writer_open(path, fmt, DIM, n, &w));
	CHECK_OK(tq_writer_write_labeled(w, rows, labels, N));
	CHECK_OK(tq_writer_commit(w));
}

static void
build(const char *corpus, const char *ids, enum tq_originals o,
    const char *out)
{
	struct tq_fit_params fp;
	struct tq_build_params bp;
	struct tq_quantizer *q;
	struct tq_reader *r;
	struct tq_ids_reader *ir = NULL;

	tq_fit_params_default(&fp);
	fp.dim = DIM;
	CHECK_OK(tq_quantizer_fit(&fp, NULL, &q));
	CHECK_OK(tq_reader_open(corpus, NULL, &r));
	CHECK(tq_reader_has_labels(r));
	if (ids != NULL)
		CHECK_OK(tq_ids_open(ids, &ir));
	tq_build_params_default(&bp);
	bp.originals = o;
	bp.labels_auto = 1;
	CHECK_OK(tq_build(q, r, ir, &bp, out));
	tq_ids_close(ir);
	tq_reader_close(r);
	tq_quantizer_free(q);
}

static void
test_index_labels(void)
{
	const char *corpus = unit_path("c.txt"), *out = unit_path("l.tqi");
	const char *idsf = unit_path("c.ids"), *lab;
	struct tq_index *ix;
	struct tq_file_info fi;
	float v[DIM];
	uint64_t id;
	size_t len;
	int found;
	FILE *fp;

	make_rows();
	write_corpus(corpus, TQ_VEC_TEXT, TQ_COUNT_UNKNOWN);
	/* Ids counting down: row 9 ("w3" again) has a smaller id than row 3. */
	fp = fopen(idsf, "w");
	for (int i = 0; i < N; i++)
		fprintf(fp, "%d\n", 1000 - i);
	fclose(fp);
	build(corpus, idsf, TQ_ORIG_F32, out);
	CHECK_OK(tq_file_info(out, &fi));
	CHECK(fi.labels == N);
	CHECK_OK(tq_index_open(out, &ix));
	CHECK(tq_index_has_labels(ix));
	for (int i = 0; i < N; i++) {
		CHECK_OK(tq_index_label(ix, (uint64_t)(1000 - i), &lab, &len));
		CHECK(lab != NULL && len == strlen(labels[i]) &&
		    memcmp(lab, labels[i], len) == 0);
		if (i == 3)
			continue;
		CHECK_OK(tq_index_like(ix, labels[i], strlen(labels[i]),
		    &found, &id, v));
		CHECK(found && id == (uint64_t)(1000 - (i == 9 ? 9 : i)));
		/* The stored original, bit for bit. */
		CHECK(memcmp(v, rows + (i == 9 ? 9 : i) * DIM,
		    sizeof(v)) == 0);
	}
	CHECK_OK(tq_index_label(ix, 5, &lab, &len));
	CHECK(lab == NULL);
	CHECK_OK(tq_index_like(ix, "w", 1, &found, &id, v));
	CHECK(!found);
	CHECK_OK(tq_index_like(ix, "w3x", 3, &found, &id, NULL));
	CHECK(!found);
	tq_index_close(ix);
}

/* Without originals a label's vector is the decoded codes of its row. */
static void
test_decoded(void)
{
	const char *corpus = unit_path("c.txt"), *out = unit_path("n.tqi");
	struct tq_index *ix;
	const struct tq_quantizer *q;
	uint8_t *codes;
	float f[TQ_NFACTORS], v[DIM], d[DIM];
	uint64_t id;
	int found;

	make_rows();
	write_corpus(corpus, TQ_VEC_TEXT, TQ_COUNT_UNKNOWN);
	build(corpus, NULL, TQ_ORIG_NONE, out);
	CHECK_OK(tq_index_open(out, &ix));
	q = tq_index_quantizer(ix);
	CHECK_OK(tq_index_like(ix, "w12", 3, &found, &id, v));
	CHECK(found && id == 12);
	codes = malloc(tq_code_bytes(q));
	CHECK_OK(tq_encode(q, rows + 12 * DIM, 1, codes, f));
	/* The factors as the index stores them (compact, tq(5) FACH). */
	tq_fach_canon(f, q->metric == TQ_METRIC_L2, tq_centre_norm2(q));
	tq_fach_uncanon(f, q->metric == TQ_METRIC_L2, tq_centre_norm2(q));
	CHECK_OK(tq_decode(q, codes, f, 1, d));
	CHECK(memcmp(v, d, sizeof(v)) == 0);
	free(codes);
	tq_index_close(ix);
}

/* Finds section `tag` of a file: its offset. */
static uint64_t
section_at(const char *path, const char *tag)
{
	struct tq_file_info fi;

	CHECK_OK(tq_file_info(path, &fi));
	for (uint32_t i = 0; i < fi.nsections && i < 32; i++)
		if (strcmp(fi.sections[i].tag, tag) == 0)
			return fi.sections[i].offset;
	CHECK(!"section not found");
	return 0;
}

static void
patch(const char *path, uint64_t off, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY);

	CHECK(fd >= 0);
	CHECK(pwrite(fd, p, n, (off_t)off) == (ssize_t)n);
	close(fd);
}

/*
 * A hostile section: an order naming a row past n, a label holding a
 * newline.  The open checks neither (it reads no order nor label
 * byte); the lookups refuse them, never read outside the section.
 */
static void
test_hostile(void)
{
	const char *corpus = unit_path("c.txt"), *out = unit_path("h.tqi");
	struct tq_index *ix;
	uint64_t at, id;
	uint8_t b[4];
	const char *lab;
	size_t len;
	int found;

	make_rows();
	write_corpus(corpus, TQ_VEC_TEXT, TQ_COUNT_UNKNOWN);
	build(corpus, NULL, TQ_ORIG_F32, out);
	at = section_at(out, "LABL");
	/* Width 4: offsets at 32, by label at 32 + 4 (N + 1). */
	b[0] = N; b[1] = b[2] = b[3] = 0;
	patch(out, at + 32 + 4 * (N + 1) + 4 * (N / 2), b, 4);
	CHECK_OK(tq_index_open(out, &ix));
	CHECK_ST(tq_index_like(ix, "w1", 2, &found, &id, NULL),
	    TQ_ERR_FORMAT);
	CHECK_DETAIL("row 70 out of range");
	tq_index_close(ix);

	build(corpus, NULL, TQ_ORIG_F32, out);
	/* The text starts after the two orders; label 0 is "w0". */
	patch(out, at + 32 + 4 * (3 * N + 1) + 1, "\n", 1);
	CHECK_OK(tq_index_open(out, &ix));
	CHECK_ST(tq_index_label(ix, 0, &lab, &len), TQ_ERR_FORMAT);
	CHECK_DETAIL("NUL or newline");
	CHECK_OK(tq_index_label(ix, 1, &lab, &len));
	CHECK(lab != NULL && len == 2 && memcmp(lab, "w1", 2) == 0);
	tq_index_close(ix);
}

/* word2vec and .vec written, read back: the same rows and labels. */
static void
test_w2v_vec_writers(void)
{
	enum tq_vecfmt fmts[2] = { TQ_VEC_W2V, TQ_VEC_VEC };
	const char *path = unit_path("o.w2v");
	struct tq_writer *w;
	struct tq_reader *r;
	float back[N * DIM];
	size_t got;

	make_rows();
	for (int f = 0; f < 2; f++)
		for (int known = 0; known < 2; known++) {
			write_corpus(path, fmts[f], known ? N :
			    TQ_COUNT_UNKNOWN);
			CHECK_OK(tq_reader_open(path, NULL, &r));
			CHECK(strcmp(tq_reader_format(r), f == 0 ?
			    "word2vec" : "text") == 0);
			CHECK(tq_reader_count(r) == N);
			CHECK_OK(tq_reader_read(r, back, N, &got));
			CHECK(got == N);
			CHECK(memcmp(back, rows, sizeof(back)) == 0);
			for (int i = 0; i < N && got == N; i++)
				CHECK(strcmp(tq_reader_label(r, (size_t)i),
				    labels[i]) == 0);
			tq_reader_close(r);
		}
	CHECK_OK(tq_writer_open(path, TQ_VEC_W2V, DIM, TQ_COUNT_UNKNOWN, &w));
	CHECK_ST(tq_writer_write(w, rows, 1), TQ_ERR_ARG);
	CHECK_DETAIL("need labels");
	tq_writer_abort(w);
	labels[0] = "a b";
	CHECK_OK(tq_writer_open(path, TQ_VEC_W2V, DIM, TQ_COUNT_UNKNOWN, &w));
	CHECK_ST(tq_writer_write_labeled(w, rows, labels, 1), TQ_ERR_ARG);
	CHECK_DETAIL("the label contains a blank");
	tq_writer_abort(w);
}

int
main(void)
{
	unit_tmpdir();
	RUN(test_labels_reader);
	RUN(test_index_labels);
	RUN(test_decoded);
	RUN(test_hostile);
	RUN(test_w2v_vec_writers);
	return unit_done();
}
