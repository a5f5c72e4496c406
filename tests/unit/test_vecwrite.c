/*
 * test_vecwrite.c - the writer formats added for tq-cat: npy (fixed
 * 128-byte header, count patched or spooled), text/tsv/csv ("%.9g" gives
 * every float back; labels), bvecs and ivecs from floats, and
 * tq_normalize_rows.  Each format is read back through the readers where
 * one exists.
 */
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "tq.h"

/* Reads a whole (small) file; caller frees.  NUL-terminated. */
static char *
get_file(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	char *p;
	long len;

	*n = 0;
	if (fp == NULL)
		return NULL;
	fseek(fp, 0, SEEK_END);
	len = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	p = malloc((size_t)len + 1);
	if (p != NULL && fread(p, 1, (size_t)len, fp) == (size_t)len) {
		*n = (size_t)len;
		p[len] = '\0';
	}
	fclose(fp);
	return p;
}

/* Finite floats of every kind: random bit patterns, zeros, extremes. */
static void
awkward(float *x, size_t n, uint64_t seed)
{
	static const float fixed[] = { 0.0f, -0.0f, 1.0f, -1.0f, FLT_MAX,
	    -FLT_MAX, FLT_MIN, 1.4e-45f, -1.4e-45f, 0.1f, 1.0f / 3.0f,
	    16777217.0f, 3.4e38f };
	size_t i, nf = sizeof(fixed) / sizeof(fixed[0]);

	for (i = 0; i < n; i++) {
		uint32_t u;
		float f;

		if (i < nf) {
			x[i] = fixed[i];
			continue;
		}
		do {
			seed = seed * 6364136223846793005ull +
			    1442695040888963407ull;
			u = (uint32_t)(seed >> 32);
			memcpy(&f, &u, 4);
		} while (!isfinite(f));
		x[i] = f;
	}
}

/* Writes rows (n x dim) to path in fmt, count known or not. */
static void
write_rows(const char *path, enum tq_vecfmt fmt, const float *x, size_t n,
    uint32_t dim, int known)
{
	struct tq_writer *w;

	CHECK_OK(tq_writer_open(path, fmt, dim, known ? n : TQ_COUNT_UNKNOWN,
	    &w));
	/* Two writes, to cross a write boundary. */
	CHECK_OK(tq_writer_write(w, x, n / 2));
	CHECK_OK(tq_writer_write(w, x + (n / 2) * dim, n - n / 2));
	CHECK_OK(tq_writer_commit(w));
}

/* Reads path back and compares bit for bit. */
static void
read_back(const char *path, const char *format, const float *x, size_t n,
    uint32_t dim)
{
	struct tq_reader *r;
	float *y = calloc(n * dim + 1, sizeof(*y));
	size_t got;

	CHECK_OK(tq_reader_open(path, NULL, &r));
	CHECK(strcmp(tq_reader_format(r), format) == 0);
	CHECK(tq_reader_dim(r) == dim);
	CHECK(tq_reader_count(r) == (int64_t)n);
	CHECK_OK(tq_reader_read(r, y, n + 1, &got));
	CHECK(got == n);
	CHECK(memcmp(x, y, n * dim * sizeof(*x)) == 0);
	tq_reader_close(r);
	free(y);
}

/* Runs the writer on standard output redirected to the file path. */
static void
write_stdout(const char *path, enum tq_vecfmt fmt, const float *x, size_t n,
    uint32_t dim, int known)
{
	int fd, saved;

	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, STDOUT_FILENO);
	close(fd);
	write_rows("-", fmt, x, n, dim, known);
	dup2(saved, STDOUT_FILENO);
	close(saved);
}

static void
same_file(const char *a, const char *b)
{
	size_t na, nb;
	char *pa = get_file(a, &na), *pb = get_file(b, &nb);

	CHECK(pa != NULL && pb != NULL && na == nb && memcmp(pa, pb, na) == 0);
	free(pa);
	free(pb);
}

static void
test_npy(void)
{
	const uint32_t dim = 7;
	const size_t n = 301;
	float *x = malloc(n * dim * sizeof(*x));
	const char *p = unit_path("a.npy");
	char *got;
	size_t len;

	awkward(x, n * dim, 1);
	write_rows(p, TQ_VEC_NPY, x, n, dim, 1);
	got = get_file(p, &len);
	CHECK(len == 128 + n * dim * 4);
	CHECK(got != NULL && memcmp(got, "\x93NUMPY\x01\x00\x76\x00", 10) == 0);
	CHECK(got != NULL && strncmp(got + 10, "{'descr': '<f4', "
	    "'fortran_order': False, 'shape': (301, 7), }", 60) == 0);
	CHECK(got != NULL && got[127] == '\n' && got[126] == ' ');
	free(got);
	read_back(p, "npy", x, n, dim);

	/* Unknown count: patched in a file, spooled on stdout; same bytes. */
	write_rows(unit_path("b.npy"), TQ_VEC_NPY, x, n, dim, 0);
	same_file(p, unit_path("b.npy"));
	write_stdout(unit_path("c.npy"), TQ_VEC_NPY, x, n, dim, 0);
	same_file(p, unit_path("c.npy"));
	write_stdout(unit_path("d.npy"), TQ_VEC_NPY, x, n, dim, 1);
	same_file(p, unit_path("d.npy"));

	/* A fixture read and written as npy keeps every bit. */
	write_rows(unit_path("e.fix"), TQ_VEC_FIXTURE, x, n, dim, 1);
	read_back(unit_path("e.fix"), "fixture", x, n, dim);
	free(x);
}

/* Parses the text file back with strtof; checks the separators. */
static void
text_back(const char *path, char sep, const float *x, size_t n,
    uint32_t dim, const char *const *labels)
{
	size_t len, i = 0, j, rows = 0;
	char *text = get_file(path, &len), *s, *end;
	int ok = 1;

	CHECK(text != NULL);
	if (text == NULL)
		return;
	s = text;
	while (*s != '\0' && rows < n) {
		if (labels != NULL) {
			size_t ll = strlen(labels[rows]);

			ok &= strncmp(s, labels[rows], ll) == 0 && s[ll] == sep;
			s += ll + 1;
		}
		for (j = 0; j < dim; j++, i++) {
			float f = strtof(s, &end);

			ok &= end != s && memcmp(&f, &x[i], 4) == 0;
			ok &= *end == (j + 1 < dim ? sep : '\n');
			s = end + 1;
		}
		rows++;
	}
	CHECK(ok);
	CHECK(rows == n && *s == '\0');
	free(text);
}

static void
test_text(void)
{
	const uint32_t dim = 5;
	const size_t n = 2000;
	float *x = malloc(n * dim * sizeof(*x));
	const char *p = unit_path("a.txt");
	struct tq_writer *w;
	const char *labels[3] = { "the", "of", "and" };
	const char *bad[2] = { "ok", "two words" };
	const char *empty[1] = { "" };
	char *got;
	size_t len;

	awkward(x, n * dim, 2);
	write_rows(p, TQ_VEC_TEXT, x, n, dim, 1);
	text_back(p, ' ', x, n, dim, NULL);
	write_rows(unit_path("a.tsv"), TQ_VEC_TSV, x, n, dim, 0);
	text_back(unit_path("a.tsv"), '\t', x, n, dim, NULL);
	write_stdout(unit_path("a.csv"), TQ_VEC_CSV, x, n, dim, 0);
	text_back(unit_path("a.csv"), ',', x, n, dim, NULL);

	/* "%.9g": short where it can be. */
	{
		float y[4] = { 1.0f, -0.0f, 0.5f, 1e-3f };

		CHECK_OK(tq_writer_open(p, TQ_VEC_TEXT, 4, 1, &w));
		CHECK_OK(tq_writer_write(w, y, 1));
		CHECK_OK(tq_writer_commit(w));
		got = get_file(p, &len);
		CHECK(got != NULL && strcmp(got, "1 -0 0.5 0.00100000005\n") == 0);
		free(got);
	}

	/* Labels lead the row. */
	CHECK_OK(tq_writer_open(p, TQ_VEC_TEXT, dim, 3, &w));
	CHECK_OK(tq_writer_write_labeled(w, x, labels, 2));
	/* Every row has a label or none does. */
	CHECK_ST(tq_writer_write(w, x, 1), TQ_ERR_ARG);
	CHECK_DETAIL("rows without labels after labelled rows");
	CHECK_OK(tq_writer_write_labeled(w, x + 2 * dim, labels + 2, 1));
	CHECK_OK(tq_writer_commit(w));
	text_back(p, ' ', x, 3, dim, labels);

	CHECK_OK(tq_writer_open(p, TQ_VEC_TEXT, dim, TQ_COUNT_UNKNOWN, &w));
	CHECK_ST(tq_writer_write_labeled(w, x, bad, 2), TQ_ERR_ARG);
	CHECK_DETAIL("row 1: the label contains a blank or a line break");
	CHECK_ST(tq_writer_write_labeled(w, x, empty, 1), TQ_ERR_ARG);
	CHECK_DETAIL("row 0: the label is empty");
	/* Nothing of a refused write was written; the writer goes on. */
	CHECK_OK(tq_writer_write_labeled(w, x, labels, 1));
	CHECK_OK(tq_writer_commit(w));
	text_back(p, ' ', x, 1, dim, labels);

	/* A blank is fine in a tsv label, a comma is not in csv. */
	CHECK_OK(tq_writer_open(p, TQ_VEC_TSV, dim, 2, &w));
	CHECK_OK(tq_writer_write_labeled(w, x, bad, 2));
	CHECK_OK(tq_writer_commit(w));
	text_back(p, '\t', x, 2, dim, bad);
	bad[1] = "a,b";
	CHECK_OK(tq_writer_open(p, TQ_VEC_CSV, dim, 2, &w));
	CHECK_ST(tq_writer_write_labeled(w, x, bad, 2), TQ_ERR_ARG);
	CHECK_DETAIL("row 1: the label contains a comma, a quote or a line "
	    "break");
	tq_writer_abort(w);

	CHECK_OK(tq_writer_open(p, TQ_VEC_TEXT, dim, 2, &w));
	CHECK_OK(tq_writer_write(w, x, 1));
	CHECK_ST(tq_writer_write_labeled(w, x, labels, 1), TQ_ERR_ARG);
	CHECK_DETAIL("labelled rows after rows without labels");
	tq_writer_abort(w);

	/* Labels only in text. */
	CHECK_OK(tq_writer_open(unit_path("l.npy"), TQ_VEC_NPY, dim, 1, &w));
	CHECK_ST(tq_writer_write_labeled(w, x, labels, 1), TQ_ERR_ARG);
	CHECK_DETAIL("labels need a text writer");
	tq_writer_abort(w);
	free(x);
}

static void
test_int_formats(void)
{
	float x[12] = { 0, 1, 2, 255, 128, 7, 9, 10, 11, 12, 13, 14 };
	int32_t iv[12];
	const char *p = unit_path("a.bvecs");
	struct tq_writer *w;
	struct tq_reader *r;
	size_t got, i;

	write_rows(p, TQ_VEC_BVECS, x, 3, 4, 1);
	read_back(p, "bvecs", x, 3, 4);

	CHECK_OK(tq_writer_open(p, TQ_VEC_BVECS, 4, TQ_COUNT_UNKNOWN, &w));
	x[6] = 256;
	CHECK_ST(tq_writer_write(w, x, 3), TQ_ERR_ARG);
	CHECK_DETAIL("row 1, column 2: value 256 is not a byte (0..255)");
	x[6] = 1.5f;
	CHECK_ST(tq_writer_write(w, x, 3), TQ_ERR_ARG);
	CHECK_DETAIL("row 1, column 2: value 1.5 is not a byte (0..255)");
	x[6] = -1;
	CHECK_ST(tq_writer_write(w, x, 3), TQ_ERR_ARG);
	x[6] = 9;
	CHECK_OK(tq_writer_write(w, x, 3));
	CHECK_OK(tq_writer_commit(w));
	read_back(p, "bvecs", x, 3, 4);

	/* ivecs from floats that are whole int32 values. */
	p = unit_path("a.ivecs");
	x[0] = -2147483648.0f;
	x[1] = 2147483520.0f;	/* the largest float below 2^31 */
	x[2] = -5;
	write_rows(p, TQ_VEC_IVECS, x, 3, 4, 0);
	CHECK_OK(tq_reader_open(p, NULL, &r));
	CHECK_OK(tq_reader_read_i32(r, iv, 3, &got));
	CHECK(got == 3 && iv[0] == INT32_MIN && iv[1] == 2147483520 &&
	    iv[2] == -5);
	for (i = 3; i < 12; i++)
		CHECK(iv[i] == (int32_t)x[i]);
	tq_reader_close(r);
	CHECK_OK(tq_writer_open(p, TQ_VEC_IVECS, 4, 3, &w));
	x[5] = 2147483648.0f;
	CHECK_ST(tq_writer_write(w, x, 3), TQ_ERR_ARG);
	CHECK_DETAIL("row 1, column 1: value 2.14748365e+09 is not an int32");
	x[5] = 0.25f;
	CHECK_ST(tq_writer_write(w, x, 3), TQ_ERR_ARG);
	CHECK_DETAIL("row 1, column 1: value 0.25 is not an int32");
	/* int32 rows still go to ivecs only. */
	tq_writer_abort(w);
	CHECK_OK(tq_writer_open(unit_path("x.fvecs"), TQ_VEC_FVECS, 4, 3, &w));
	CHECK_ST(tq_writer_write_i32(w, iv, 3), TQ_ERR_ARG);
	CHECK_DETAIL("integer rows need an ivecs writer");
	tq_writer_abort(w);
}

static void
test_normalize(void)
{
	float x[9] = { 3, 4, 0, 0, 0, 0, -1e-20f, 0, 0 };
	size_t i;

	tq_normalize_rows(x, 3, 3);
	CHECK(fabsf(x[0] - 0.6f) < 1e-7f && fabsf(x[1] - 0.8f) < 1e-7f);
	for (i = 3; i < 6; i++)
		CHECK(x[i] == 0.0f);
	CHECK(fabsf(x[6] + 1.0f) < 1e-6f && x[7] == 0.0f);
}

int
main(void)
{
	RUN(test_npy);
	RUN(test_text);
	RUN(test_int_formats);
	RUN(test_normalize);
	return unit_done();
}
