/*
 * test_vecio.c - vector input and output: every format both ways, pipes,
 * awkward chunk sizes, hostile headers, atomic writers, id lists, and the
 * files in tests/malformed/vec (when run from the source tree).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <hdf5.h>
#include <zstd.h>

#include "unit.h"
#include "tq.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

struct bytes {
	uint8_t *p;
	size_t n, cap;
};

static void
b_put(struct bytes *b, const void *p, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		if (b->p == NULL)
			abort();
	}
	memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void
b_u8(struct bytes *b, unsigned v)
{
	uint8_t c = (uint8_t)v;

	b_put(b, &c, 1);
}

static void
b_le32(struct bytes *b, uint32_t v)
{
	uint8_t c[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
	    (uint8_t)(v >> 24) };

	b_put(b, c, 4);
}

static void
b_be32(struct bytes *b, uint32_t v)
{
	uint8_t c[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16),
	    (uint8_t)(v >> 8), (uint8_t)v };

	b_put(b, c, 4);
}

static void
b_f32(struct bytes *b, float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	b_le32(b, u);
}

static void
b_str(struct bytes *b, const char *s)
{
	b_put(b, s, strlen(s));
}

static void
b_free(struct bytes *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}

static void
put_file(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");

	if (fp == NULL || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) {
		perror(path);
		exit(1);
	}
}

static void
put_bytes(const char *path, const struct bytes *b)
{
	put_file(path, b->p, b->n);
}

/* Reads a whole (small) file; caller frees. */
static uint8_t *
get_file(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *p = NULL;
	long len;

	*n = 0;
	if (fp == NULL)
		return NULL;
	fseek(fp, 0, SEEK_END);
	len = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	p = malloc((size_t)len + 1);
	if (p != NULL && fread(p, 1, (size_t)len, fp) == (size_t)len)
		*n = (size_t)len;
	fclose(fp);
	return p;
}

/* Test data: row r, column c. */
static float
val(size_t r, size_t c)
{
	return (float)r * 0.5f - (float)c * 0.25f + 0.125f;
}

static float *
make_rows(size_t n, uint32_t d)
{
	float *x = malloc(n * d * sizeof(float));
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < d; j++)
			x[i * d + j] = val(i, j);
	return x;
}

/*
 * Reads `path` in chunks of `chunk` rows and compares with want[n*d];
 * returns the number of rows read.
 */
static size_t
read_compare(const char *path, const char *ds, const float *want, size_t n,
    uint32_t d, size_t chunk)
{
	struct tq_reader *r;
	float *buf;
	size_t got, total = 0, bad = 0, i;
	enum tq_status st;

	st = tq_reader_open(path, ds, &r);
	CHECK_OK(st);
	if (st != TQ_OK)
		return 0;
	CHECK(tq_reader_dim(r) == d);
	buf = malloc(chunk * d * sizeof(float));
	for (;;) {
		st = tq_reader_read(r, buf, chunk, &got);
		CHECK_OK(st);
		if (st != TQ_OK || got == 0)
			break;
		/* Only the last read may be short. */
		CHECK(got == chunk || total + got == n);
		for (i = 0; i < got * d && total * d + i < n * d; i++)
			if (buf[i] != want[total * d + i])
				bad++;
		total += got;
		if (total > n)
			break;
	}
	CHECK(bad == 0);
	CHECK(total == n);
	free(buf);
	tq_reader_close(r);
	return total;
}

/* Feeds `p` to standard input from a child process; returns the old fd. */
static int
stdin_from(const void *p, size_t n, pid_t *pid)
{
	int fds[2], saved;

	fflush(NULL);
	if (pipe(fds) != 0)
		abort();
	*pid = fork();
	if (*pid < 0)
		abort();
	if (*pid == 0) {
		const uint8_t *q = p;

		close(fds[0]);
		while (n > 0) {
			ssize_t k = write(fds[1], q, n);

			if (k <= 0)
				_exit(1);
			q += k;
			n -= (size_t)k;
		}
		_exit(0);
	}
	close(fds[1]);
	saved = dup(STDIN_FILENO);
	dup2(fds[0], STDIN_FILENO);
	close(fds[0]);
	return saved;
}

static void
stdin_restore(int saved, pid_t pid)
{
	dup2(saved, STDIN_FILENO);
	close(saved);
	waitpid(pid, NULL, 0);
}

static struct bytes
fixture_bytes(const float *x, size_t n, uint32_t d)
{
	struct bytes b = { 0 };
	size_t i;

	b_le32(&b, d);
	b_le32(&b, (uint32_t)n);
	for (i = 0; i < n * d; i++)
		b_f32(&b, x[i]);
	return b;
}

static enum tq_status
open_status(const char *path)
{
	struct tq_reader *r;
	enum tq_status st = tq_reader_open(path, NULL, &r);

	tq_reader_close(r);
	return st;
}

/* Opens and reads everything; returns the first failure. */
static enum tq_status
read_status(const char *path, const char *ds)
{
	struct tq_reader *r;
	enum tq_status st;
	float *buf;
	size_t got;

	st = tq_reader_open(path, ds, &r);
	if (st != TQ_OK)
		return st;
	buf = malloc(7 * (size_t)tq_reader_dim(r) * sizeof(float));
	do
		st = tq_reader_read(r, buf, 7, &got);
	while (st == TQ_OK && got > 0);
	free(buf);
	tq_reader_close(r);
	return st;
}

/* ------------------------------------------------------------------------ */
/* Writers and round trips                                                   */

static void
test_fixture_roundtrip(void)
{
	const uint32_t d = 5;
	const size_t n = 1001;
	float *x = make_rows(n, d);
	struct tq_writer *w;
	struct tq_reader *r;
	const char *p = unit_path("a.fix");
	size_t chunks[] = { 1, 3, 1000, 5000 }, i;

	/* Known n, written in awkward pieces. */
	CHECK_OK(tq_writer_open(p, TQ_VEC_FIXTURE, d, n, &w));
	CHECK_OK(tq_writer_write(w, x, 1));
	CHECK_OK(tq_writer_write(w, x + d, 0));
	CHECK_OK(tq_writer_write(w, x + d, 999));
	CHECK_OK(tq_writer_write(w, x + 1000 * d, 1));
	CHECK_OK(tq_writer_commit(w));
	for (i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++)
		read_compare(p, NULL, x, n, d, chunks[i]);
	CHECK_OK(tq_reader_open(p, NULL, &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "fixture") == 0);
		CHECK(tq_reader_count(r) == (int64_t)n);
		CHECK(tq_reader_is_integer(r) == 0);
		tq_reader_close(r);
	}

	/* Unknown n: the header is patched at commit. */
	p = unit_path("b.fix");
	CHECK_OK(tq_writer_open(p, TQ_VEC_FIXTURE, d, TQ_COUNT_UNKNOWN, &w));
	CHECK_OK(tq_writer_write(w, x, n));
	CHECK_OK(tq_writer_commit(w));
	read_compare(p, NULL, x, n, d, 3);
	free(x);
}

static void
test_vecs_roundtrip(void)
{
	const uint32_t d = 7;
	const size_t n = 300;
	float *x = make_rows(n, d);
	int32_t *iv = malloc(n * d * sizeof(int32_t)), *ib;
	float *fi = malloc(n * d * sizeof(float));
	struct tq_writer *w;
	struct tq_reader *r;
	const char *p;
	size_t i, got;

	for (i = 0; i < n * d; i++) {
		iv[i] = (int32_t)i * (i % 2 ? -3 : 3);
		fi[i] = (float)iv[i];
	}
	p = unit_path("a.fvecs");
	CHECK_OK(tq_writer_open(p, TQ_VEC_FVECS, d, TQ_COUNT_UNKNOWN, &w));
	CHECK_ST(tq_writer_write_i32(w, iv, 1), TQ_ERR_ARG);
	CHECK_OK(tq_writer_write(w, x, 100));
	CHECK_OK(tq_writer_write(w, x + 100 * d, 200));
	CHECK_OK(tq_writer_commit(w));
	read_compare(p, NULL, x, n, d, 1);
	read_compare(p, NULL, x, n, d, 3);
	read_compare(p, NULL, x, n, d, 1000);
	CHECK_OK(tq_reader_open(p, NULL, &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "fvecs") == 0);
		CHECK(tq_reader_count(r) == (int64_t)n);
		CHECK_ST(tq_reader_read_i32(r, iv, 1, &got), TQ_ERR_UNSUPPORTED);
		tq_reader_close(r);
	}

	p = unit_path("a.ivecs");
	CHECK_OK(tq_writer_open(p, TQ_VEC_IVECS, d, n, &w));
	CHECK_ST(tq_writer_write(w, x, 1), TQ_ERR_ARG);
	CHECK_OK(tq_writer_write_i32(w, iv, n));
	CHECK_OK(tq_writer_commit(w));
	read_compare(p, NULL, fi, n, d, 3);
	CHECK_OK(tq_reader_open(p, NULL, &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "ivecs") == 0);
		CHECK(tq_reader_is_integer(r) == 1);
		ib = malloc(n * d * sizeof(int32_t));
		CHECK_OK(tq_reader_read_i32(r, ib, n + 5, &got));
		CHECK(got == n);
		CHECK(memcmp(ib, iv, n * d * sizeof(int32_t)) == 0);
		CHECK_OK(tq_reader_read_i32(r, ib, 1, &got));
		CHECK(got == 0);
		free(ib);
		tq_reader_close(r);
	}
	free(x);
	free(iv);
	free(fi);
}

static void
test_bvecs(void)
{
	struct bytes b = { 0 };
	float want[6] = { 0, 255, 7, 1, 2, 3 };
	size_t i;

	for (i = 0; i < 2; i++) {
		b_le32(&b, 3);
		b_u8(&b, (unsigned)want[3 * i]);
		b_u8(&b, (unsigned)want[3 * i + 1]);
		b_u8(&b, (unsigned)want[3 * i + 2]);
	}
	put_bytes(unit_path("x.bvecs"), &b);
	read_compare(unit_path("x.bvecs"), NULL, want, 2, 3, 1);
	b_free(&b);
}

static void
test_read_all(void)
{
	const uint32_t d = 5;	/* 24-byte rows straddle the 1 MiB buffer */
	const size_t n = 200000;
	float *x = make_rows(n, d), *got = NULL;
	struct tq_writer *w;
	uint32_t gd;
	size_t gn;

	CHECK_OK(tq_writer_open(unit_path("big.fvecs"), TQ_VEC_FVECS, d, n,
	    &w));
	CHECK_OK(tq_writer_write(w, x, n));
	CHECK_OK(tq_writer_commit(w));
	CHECK_OK(tq_read_all(unit_path("big.fvecs"), NULL, &got, &gd, &gn));
	CHECK(gd == d && gn == n);
	CHECK(got != NULL && memcmp(got, x, n * d * sizeof(float)) == 0);
	free(got);
	CHECK_ST(tq_read_all(unit_path("missing"), NULL, &got, &gd, &gn),
	    TQ_ERR_IO);
	CHECK(got == NULL && gn == 0);
	free(x);
}

/* ------------------------------------------------------------------------ */
/* NumPy                                                                     */

static struct bytes
npy_bytes(int ver, const char *dict, const void *data, size_t n)
{
	struct bytes b = { 0 };
	size_t pre = ver == 1 ? 10 : 12, hl = strlen(dict) + 1;

	/* Pad the header to 64 bytes as NumPy does. */
	while ((pre + hl) % 64 != 0)
		hl++;
	b_str(&b, "\x93NUMPY");
	b_u8(&b, (unsigned)ver);
	b_u8(&b, 0);
	if (ver == 1) {
		b_u8(&b, hl & 0xff);
		b_u8(&b, (unsigned)(hl >> 8));
	} else {
		b_le32(&b, (uint32_t)hl);
	}
	b_str(&b, dict);
	while (b.n < pre + hl - 1)
		b_u8(&b, ' ');
	b_u8(&b, '\n');
	b_put(&b, data, n);
	return b;
}

static void
npy_case(const char *name, int ver, const char *dict, const void *data,
    size_t n, enum tq_status want, const char *detail)
{
	struct bytes b = npy_bytes(ver, dict, data, n);

	put_bytes(unit_path(name), &b);
	CHECK_ST(read_status(unit_path(name), NULL), want);
	if (detail != NULL)
		CHECK_DETAIL(detail);
	b_free(&b);
}

static void
test_npy(void)
{
	float x[12];
	double xd[12];
	int32_t xi[12];
	uint8_t xu[12];
	float fx[12];
	size_t i;
	struct bytes b;
	struct tq_reader *r;
	int32_t ib[12];
	size_t got;

	for (i = 0; i < 12; i++) {
		x[i] = val(i / 4, i % 4);
		xd[i] = x[i];
		xi[i] = (int32_t)i - 6;
		xu[i] = (uint8_t)(i * 20);
	}
	b = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 4), }", x, sizeof(x));
	put_bytes(unit_path("f4.npy"), &b);
	read_compare(unit_path("f4.npy"), NULL, x, 3, 4, 2);
	/* The name is not needed: content decides. */
	put_bytes(unit_path("f4.data"), &b);
	read_compare(unit_path("f4.data"), NULL, x, 3, 4, 1);
	b_free(&b);

	b = npy_bytes(2, "{'descr': '<f8', 'fortran_order': False, "
	    "'shape': (3, 4), }", xd, sizeof(xd));
	put_bytes(unit_path("f8.npy"), &b);
	read_compare(unit_path("f8.npy"), NULL, x, 3, 4, 3);
	b_free(&b);

	/*
	 * float16: normal, subnormal (2^-24, 2^-14 - 2^-24), the largest,
	 * signed zeros, exact in f32; an infinity fails naming its row and
	 * column.
	 */
	{
		static const uint16_t h[8] = { 0x3c00, 0xc000, 0x0001, 0x03ff,
		    0x7bff, 0x8000, 0x3555, 0x0000 };
		const float hf[8] = { 1.0f, -2.0f, 0x1p-24f, 0x1.ff8p-15f,
		    65504.0f, -0.0f, 0x1.554p-2f, 0.0f };
		uint8_t hb[16];

		for (i = 0; i < 8; i++) {
			hb[2 * i] = (uint8_t)h[i];
			hb[2 * i + 1] = (uint8_t)(h[i] >> 8);
		}
		b = npy_bytes(1, "{'descr': '<f2', 'fortran_order': False, "
		    "'shape': (2, 4), }", hb, sizeof(hb));
		put_bytes(unit_path("f2.npy"), &b);
		read_compare(unit_path("f2.npy"), NULL, hf, 2, 4, 1);
		b_free(&b);
		hb[2 * 6] = 0x00;
		hb[2 * 6 + 1] = 0x7c;	/* row 1, column 2: +inf */
		npy_case("f2inf.npy", 1, "{'descr': '<f2', 'fortran_order': "
		    "False, 'shape': (2, 4), }", hb, sizeof(hb),
		    TQ_ERR_NONFINITE, "row 1, column 2");
	}

	b = npy_bytes(3, "{\"descr\": \"<i4\", \"fortran_order\": False, "
	    "\"shape\": (2, 6)}", xi, sizeof(xi));
	put_bytes(unit_path("i4.npy"), &b);
	for (i = 0; i < 12; i++)
		fx[i] = (float)xi[i];
	read_compare(unit_path("i4.npy"), NULL, fx, 2, 6, 5);
	CHECK_OK(tq_reader_open(unit_path("i4.npy"), NULL, &r));
	if (r != NULL) {
		CHECK(tq_reader_is_integer(r));
		CHECK(tq_reader_count(r) == 2);
		CHECK(strcmp(tq_reader_format(r), "npy") == 0);
		CHECK_OK(tq_reader_read_i32(r, ib, 2, &got));
		CHECK(got == 2 && memcmp(ib, xi, sizeof(xi)) == 0);
		tq_reader_close(r);
	}
	b_free(&b);

	b = npy_bytes(1, "{'descr': '|u1', 'fortran_order': False, "
	    "'shape': (12,), }", xu, sizeof(xu));
	put_bytes(unit_path("u1.npy"), &b);
	for (i = 0; i < 12; i++)
		fx[i] = xu[i];
	read_compare(unit_path("u1.npy"), NULL, fx, 1, 12, 4);
	b_free(&b);

	/* Strictness. */
	npy_case("fo.npy", 1, "{'descr': '<f4', 'fortran_order': True, "
	    "'shape': (3, 4), }", x, sizeof(x), TQ_ERR_UNSUPPORTED, "Fortran");
	npy_case("be.npy", 1, "{'descr': '>f4', 'fortran_order': False, "
	    "'shape': (3, 4), }", x, sizeof(x), TQ_ERR_UNSUPPORTED, ">f4");
	npy_case("3d.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (1, 3, 4), }", x, sizeof(x), TQ_ERR_UNSUPPORTED,
	    "3 dimensions");
	npy_case("0d.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (), }", x, 4, TQ_ERR_UNSUPPORTED, "0 dimensions");
	npy_case("junk.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 4), 'x': 1}", x, sizeof(x), TQ_ERR_FORMAT,
	    "malformed npy header");
	npy_case("dup.npy", 1, "{'descr': '<f4', 'descr': '<f4', "
	    "'fortran_order': False, 'shape': (3, 4)}", x, sizeof(x),
	    TQ_ERR_FORMAT, "malformed npy header");
	npy_case("nokey.npy", 1, "{'descr': '<f4', 'shape': (3, 4)}", x,
	    sizeof(x), TQ_ERR_FORMAT, "malformed npy header");
	npy_case("paren.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (12), }", x, sizeof(x), TQ_ERR_FORMAT,
	    "malformed npy header");
	npy_case("ovf.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (99999999999999999999, 4), }", x, sizeof(x),
	    TQ_ERR_FORMAT, "malformed npy header");
	npy_case("huge.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (4000000000, 4), }", x, sizeof(x), TQ_ERR_FORMAT,
	    "header claims 4000000000 rows of dim 4");
	npy_case("short.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 4), }", x, sizeof(x) - 4, TQ_ERR_FORMAT,
	    "but the file holds");
	npy_case("d0.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 0), }", x, 0, TQ_ERR_FORMAT, "dimension 0");
	npy_case("n0.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (0, 4), }", x, 0, TQ_ERR_EMPTY, "no vectors");
	npy_case("c8.npy", 1, "{'descr': '<c8', 'fortran_order': False, "
	    "'shape': (3, 4), }", x, sizeof(x), TQ_ERR_UNSUPPORTED, "<c8");
	x[6] = NAN;
	npy_case("nan.npy", 1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 4), }", x, sizeof(x), TQ_ERR_NONFINITE,
	    "row 1, column 2: value is NaN or infinite");
	xd[9] = 1e300;
	npy_case("big8.npy", 1, "{'descr': '<f8', 'fortran_order': False, "
	    "'shape': (3, 4), }", xd, sizeof(xd), TQ_ERR_NONFINITE,
	    "row 2, column 1");

	/* A .npy name without the magic. */
	put_file(unit_path("fake.npy"), "hello, world", 12);
	CHECK_ST(open_status(unit_path("fake.npy")), TQ_ERR_FORMAT);
	CHECK_DETAIL("bad magic");
	/* Huge header length. */
	b = (struct bytes){ 0 };
	b_str(&b, "\x93NUMPY");
	b_u8(&b, 2);
	b_u8(&b, 0);
	b_le32(&b, 0xfffffff0u);
	b_str(&b, "{}");
	put_bytes(unit_path("hlen.npy"), &b);
	CHECK_ST(open_status(unit_path("hlen.npy")), TQ_ERR_FORMAT);
	CHECK_DETAIL("header too long");
	b_free(&b);
}

/* ------------------------------------------------------------------------ */
/* IDX                                                                       */

static void
test_idx(void)
{
	struct bytes b = { 0 };
	float want[2 * 6];
	struct tq_reader *r;
	int32_t iv[12];
	size_t i, got;

	/* 2 images of 2x3 unsigned bytes. */
	b_be32(&b, 0x00000803);
	b_be32(&b, 2);
	b_be32(&b, 2);
	b_be32(&b, 3);
	for (i = 0; i < 12; i++) {
		b_u8(&b, (unsigned)(i * 23));
		want[i] = (float)(i * 23);
	}
	put_bytes(unit_path("t-images-idx3-ubyte"), &b);
	read_compare(unit_path("t-images-idx3-ubyte"), NULL, want, 2, 6, 1);
	CHECK_OK(tq_reader_open(unit_path("t-images-idx3-ubyte"), NULL, &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "idx") == 0);
		CHECK(tq_reader_is_integer(r) == 1);
		CHECK(tq_reader_count(r) == 2);
		CHECK_OK(tq_reader_read_i32(r, iv, 2, &got));
		CHECK(got == 2 && iv[11] == 11 * 23);
		tq_reader_close(r);
	}
	/* Truncated and overlong. */
	put_file(unit_path("short-idx3-ubyte"), b.p, b.n - 1);
	CHECK_ST(open_status(unit_path("short-idx3-ubyte")), TQ_ERR_FORMAT);
	CHECK_DETAIL("but the file holds 27 bytes");
	b_free(&b);

	/* float32 big-endian, one dimension: rows of one value. */
	b_be32(&b, 0x00000d01);
	b_be32(&b, 3);
	for (i = 0; i < 3; i++) {
		float f = (float)i - 1.5f;
		uint32_t u;

		memcpy(&u, &f, 4);
		b_be32(&b, u);
		want[i] = f;
	}
	put_bytes(unit_path("f-idx1"), &b);
	read_compare(unit_path("f-idx1"), NULL, want, 3, 1, 2);
	b_free(&b);

	/* int16 big-endian */
	b_be32(&b, 0x00000b02);
	b_be32(&b, 1);
	b_be32(&b, 2);
	b_u8(&b, 0xff);
	b_u8(&b, 0xfe);
	b_u8(&b, 0x01);
	b_u8(&b, 0x00);
	put_bytes(unit_path("s-idx2"), &b);
	want[0] = -2;
	want[1] = 256;
	read_compare(unit_path("s-idx2"), NULL, want, 1, 2, 1);
	b_free(&b);

	/* A zero dimension. */
	b_be32(&b, 0x00000803);
	b_be32(&b, 2);
	b_be32(&b, 0);
	b_be32(&b, 3);
	put_bytes(unit_path("z-idx3"), &b);
	CHECK_ST(open_status(unit_path("z-idx3")), TQ_ERR_FORMAT);
	b_free(&b);
}

/* ------------------------------------------------------------------------ */
/* zstd                                                                      */

static struct bytes
zstd_of(const struct bytes *in)
{
	struct bytes z = { 0 };
	size_t cap = ZSTD_compressBound(in->n), k;

	z.p = malloc(cap);
	k = ZSTD_compress(z.p, cap, in->p, in->n, 3);
	if (ZSTD_isError(k))
		abort();
	z.n = z.cap = k;
	return z;
}

static void
test_zstd(void)
{
	const uint32_t d = 16;
	const size_t n = 20000;	/* several MB: many decompression steps */
	float *x = make_rows(n, d);
	struct bytes b = fixture_bytes(x, n, d), z = zstd_of(&b), v = { 0 };
	size_t i;
	struct tq_reader *r;

	put_bytes(unit_path("a.fix.zst"), &z);
	read_compare(unit_path("a.fix.zst"), NULL, x, n, d, 1000);
	read_compare(unit_path("a.fix.zst"), NULL, x, n, d, 3);
	CHECK_OK(tq_reader_open(unit_path("a.fix.zst"), NULL, &r));
	if (r != NULL) {
		/* The header's count is not checked against anything yet. */
		CHECK(tq_reader_count(r) == -1);
		tq_reader_close(r);
	}

	/* Truncated compressed stream. */
	put_file(unit_path("t.fix.zst"), z.p, z.n - 10);
	CHECK_ST(read_status(unit_path("t.fix.zst"), NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("truncated");
	/* Garbage after the frame magic. */
	put_file(unit_path("g.zst"), "\x28\xb5\x2f\xfd\xff\xff\xff\xff\xff", 9);
	CHECK_ST(read_status(unit_path("g.zst"), NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("zstd");

	/* fvecs inside zstd: the name, without .zst, says fvecs. */
	for (i = 0; i < n; i++) {
		b_le32(&v, d);
		b_put(&v, x + i * d, d * sizeof(float));
	}
	b_free(&z);
	z = zstd_of(&v);
	put_bytes(unit_path("v.fvecs.zst"), &z);
	read_compare(unit_path("v.fvecs.zst"), NULL, x, n, d, 777);
	CHECK_OK(tq_reader_open(unit_path("v.fvecs.zst"), NULL, &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "fvecs") == 0);
		CHECK(tq_reader_count(r) == -1);
		tq_reader_close(r);
	}
	/* Cut in the middle of a row. */
	b_free(&z);
	v.n -= 3;
	z = zstd_of(&v);
	put_bytes(unit_path("cut.fvecs.zst"), &z);
	CHECK_ST(read_status(unit_path("cut.fvecs.zst"), NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("truncated at row 19999 (fvecs)");
	b_free(&v);
	b_free(&z);
	b_free(&b);
	free(x);
}

/* ------------------------------------------------------------------------ */
/* Standard input                                                            */

static void
test_stdin(void)
{
	const uint32_t d = 9;
	const size_t n = 30000;	/* > a pipe buffer */
	float *x = make_rows(n, d);
	struct bytes b = fixture_bytes(x, n, d), z = zstd_of(&b), c = { 0 };
	struct tq_reader *r;
	pid_t pid;
	int saved;
	float *all;
	uint32_t gd;
	size_t gn;

	saved = stdin_from(b.p, b.n, &pid);
	read_compare("-", NULL, x, n, d, 1000);
	stdin_restore(saved, pid);

	saved = stdin_from(b.p, b.n, &pid);
	read_compare("-", NULL, x, n, d, 3);
	stdin_restore(saved, pid);

	saved = stdin_from(z.p, z.n, &pid);
	CHECK_OK(tq_read_all("-", NULL, &all, &gd, &gn));
	CHECK(gd == d && gn == n);
	CHECK(all != NULL && memcmp(all, x, n * d * 4) == 0);
	free(all);
	stdin_restore(saved, pid);

	/* Truncated stream: the count in the header is not all there. */
	saved = stdin_from(b.p, b.n - d * 4 * 2 - 1, &pid);
	CHECK_ST(read_status("-", NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("truncated: expected 30000 rows, got 29997");
	stdin_restore(saved, pid);

	/* Trailing bytes after the announced rows. */
	b_put(&b, "xx", 2);
	saved = stdin_from(b.p, b.n, &pid);
	CHECK_ST(read_status("-", NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("trailing data after 30000 rows");
	stdin_restore(saved, pid);

	/* A header claiming 4e9 rows fails at the end of the data, having
	 * allocated only for the rows that came. */
	b.p[4] = 0x00;
	b.p[5] = 0x28;
	b.p[6] = 0x6b;
	b.p[7] = 0xee;		/* 4000000000 */
	b.n -= 2;
	saved = stdin_from(b.p, b.n, &pid);
	CHECK_OK(tq_reader_open("-", NULL, &r));
	if (r != NULL) {
		CHECK(tq_reader_count(r) == -1);
		tq_reader_close(r);
	}
	stdin_restore(saved, pid);
	saved = stdin_from(b.p, b.n, &pid);
	CHECK_ST(tq_read_all("-", NULL, &all, &gd, &gn), TQ_ERR_FORMAT);
	CHECK_DETAIL("expected 4000000000 rows, got 30000");
	stdin_restore(saved, pid);

	/* IDX and npy on a pipe. */
	b_be32(&c, 0x00000802);
	b_be32(&c, 2);
	b_be32(&c, 2);
	b_u8(&c, 1);
	b_u8(&c, 2);
	b_u8(&c, 3);
	b_u8(&c, 4);
	saved = stdin_from(c.p, c.n, &pid);
	{
		float want[4] = { 1, 2, 3, 4 };

		read_compare("-", NULL, want, 2, 2, 1);
	}
	stdin_restore(saved, pid);
	b_free(&c);
	c = npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, "
	    "'shape': (3, 9), }", x, 27 * 4);
	saved = stdin_from(c.p, c.n, &pid);
	read_compare("-", NULL, x, 3, 9, 2);
	stdin_restore(saved, pid);
	b_free(&c);

	/* HDF5 needs a file. */
	saved = stdin_from("\x89HDF\r\n\x1a\n\0\0\0\0", 12, &pid);
	CHECK_ST(open_status("-"), TQ_ERR_UNSUPPORTED);
	stdin_restore(saved, pid);

	/* Empty stream. */
	saved = stdin_from("", 0, &pid);
	CHECK_ST(open_status("-"), TQ_ERR_EMPTY);
	stdin_restore(saved, pid);

	b_free(&b);
	b_free(&z);
	free(x);
}

/* A named pipe keeps its name: fvecs of unknown length. */
static void
test_fifo(void)
{
	const char *p = unit_path("pipe.fvecs");
	float *x = make_rows(5000, 3);
	struct bytes b = { 0 };
	struct tq_reader *r;
	size_t i;
	pid_t pid;

	for (i = 0; i < 5000; i++) {
		b_le32(&b, 3);
		b_put(&b, x + 3 * i, 12);
	}
	CHECK(mkfifo(p, 0600) == 0);
	fflush(NULL);
	if ((pid = fork()) == 0) {
		int fd = open(p, O_WRONLY);
		const uint8_t *q = b.p;
		size_t n = b.n;

		while (fd >= 0 && n > 0) {
			ssize_t k = write(fd, q, n);

			if (k <= 0)
				_exit(1);
			q += k;
			n -= (size_t)k;
		}
		_exit(0);
	}
	CHECK_OK(tq_reader_open(p, NULL, &r));
	if (r != NULL) {
		float *buf = malloc(5000 * 3 * sizeof(float));
		size_t got, total = 0;

		CHECK(tq_reader_count(r) == -1);
		CHECK(strcmp(tq_reader_format(r), "fvecs") == 0);
		do {
			CHECK_OK(tq_reader_read(r, buf + 3 * total, 1000,
			    &got));
			total += got;
		} while (got > 0 && total < 5000);
		CHECK_OK(tq_reader_read(r, buf, 1, &got));
		CHECK(got == 0);
		CHECK(total == 5000 && memcmp(buf, x, sizeof(float) * 15000)
		    == 0);
		free(buf);
		tq_reader_close(r);
	}
	waitpid(pid, NULL, 0);
	unlink(p);
	b_free(&b);
	free(x);
}

/* ------------------------------------------------------------------------ */
/* Text, word2vec and content sniffing                                       */

/*
 * Opens `path`, checks the format, dim and count, reads everything in
 * chunks of 2 and compares values and labels (NULL: no labels).
 */
static void
check_labelled(const char *path, const char *fmt, const float *want,
    const char *const *labels, size_t n, uint32_t d, int64_t count)
{
	struct tq_reader *r;
	float buf[2 * 16];
	size_t got, total = 0, i;
	enum tq_status st;

	CHECK_OK(st = tq_reader_open(path, NULL, &r));
	if (st != TQ_OK)
		return;
	CHECK(strcmp(tq_reader_format(r), fmt) == 0);
	CHECK(tq_reader_dim(r) == d);
	CHECK(tq_reader_count(r) == count);
	CHECK(tq_reader_has_labels(r) == (labels != NULL));
	for (;;) {
		CHECK_OK(st = tq_reader_read(r, buf, 2, &got));
		if (st != TQ_OK || got == 0)
			break;
		CHECK(total + got <= n);
		if (total + got > n)
			break;
		CHECK(memcmp(buf, want + total * d, got * d * 4) == 0);
		for (i = 0; i < got; i++) {
			const char *l = tq_reader_label(r, i);

			if (labels == NULL)
				CHECK(l == NULL);
			else
				CHECK(l != NULL && strcmp(l, labels[total + i]) == 0);
		}
		CHECK(tq_reader_label(r, got) == NULL);
		total += got;
	}
	CHECK(total == n);
	tq_reader_close(r);
}

/* The failure of reading `text` to the end, from a file and a pipe. */
static void
check_text_error(const char *text, enum tq_status want, const char *detail)
{
	const char *p = unit_path("bad.txt");
	pid_t pid;
	int saved;

	put_file(p, text, strlen(text));
	CHECK_ST(read_status(p, NULL), want);
	CHECK_DETAIL(detail);
	saved = stdin_from(text, strlen(text), &pid);
	CHECK_ST(read_status("-", NULL), want);
	CHECK_DETAIL(detail);
	stdin_restore(saved, pid);
}

static void
test_text(void)
{
	static const float x3[] = { 1, 2, 3, 4.5f, -5e-3f, 6e2f };
	static const char *const lab[] = { "the", ",", "caf\xc3\xa9" };
	static const float g[] = { 0.25f, -1, 0.5f, 2, 3, 4 };
	static const float col[] = { 1, 2, 3, 4, 5 };
	const char *p = unit_path("t.txt");
	struct bytes b = { 0 }, z;
	pid_t pid;
	int saved;

	/* Blanks, tabs, commas; CRLF and a blank last line. */
	put_file(p, "1 2 3\n4.5 -5e-3 6e2\n", 20);
	check_labelled(p, "text", x3, NULL, 2, 3, -1);
	b_str(&b, "  1\t2  3 \r\n+4.5\t-.5e-2\t600.\r\n\r\n");
	put_bytes(p, &b);
	check_labelled(p, "text", x3, NULL, 2, 3, -1);
	b_free(&b);
	put_file(p, "1,2,3\n4.5, -5e-3 ,6e2", 21);
	check_labelled(p, "text", x3, NULL, 2, 3, -1);

	/* GloVe: labels, any bytes but blanks. */
	b_str(&b, "the 0.25 -1\n, 0.5 2\ncaf\xc3\xa9 3 4\n");
	put_bytes(p, &b);
	check_labelled(p, "text", g, lab, 3, 2, -1);
	/* ... on a pipe, zstd-compressed. */
	z = zstd_of(&b);
	saved = stdin_from(z.p, z.n, &pid);
	check_labelled("-", "text", g, lab, 3, 2, -1);
	stdin_restore(saved, pid);
	b_free(&z);
	b_free(&b);

	/* fastText .vec: the header gives the count of a file. */
	b_str(&b, "3 2\nthe 0.25 -1\n, 0.5 2\ncaf\xc3\xa9 3 4\n");
	put_bytes(p, &b);
	check_labelled(p, "text", g, lab, 3, 2, 3);
	saved = stdin_from(b.p, b.n, &pid);
	check_labelled("-", "text", g, lab, 3, 2, -1);
	stdin_restore(saved, pid);
	b_free(&b);
	check_text_error("4 2\nthe 0.25 -1\n, 0.5 2\ncaf\xc3\xa9 3 4\n",
	    TQ_ERR_FORMAT, "truncated: expected 4 rows, got 3");
	check_text_error("2 2\nthe 0.25 -1\n, 0.5 2\ncaf\xc3\xa9 3 4\n",
	    TQ_ERR_FORMAT, "line 4: more rows than the 2 the header claims");
	check_text_error("2 3\nthe 0.25 -1\n, 0.5 2\n", TQ_ERR_FORMAT,
	    "line 2: 2 values, expected 3");
	check_text_error("0 3\nthe 0.25 -1\n", TQ_ERR_EMPTY, "no vectors");

	/* "n dim" without labels after it is a row of two numbers. */
	put_file(p, "2 3\n1 2\n", 8);
	{
		static const float w[] = { 2, 3, 1, 2 };

		check_labelled(p, "text", w, NULL, 2, 2, -1);
	}

	/* A column of numbers from awk or jq, through a pipe. */
	saved = stdin_from("1\n2\n3\n4\n5", 9, &pid);
	check_labelled("-", "text", col, NULL, 5, 1, -1);
	stdin_restore(saved, pid);

	/* Errors name the line and the column. */
	check_text_error("1 2 3\n4 5\n", TQ_ERR_FORMAT,
	    "line 2: 2 values, expected 3");
	check_text_error("1 2 3\n4 5 6 7\n", TQ_ERR_FORMAT,
	    "line 2: 4 values, expected 3");
	check_text_error("1 2 3\n4 x5 6\n", TQ_ERR_FORMAT,
	    "line 2, column 3: not a number: 'x5'");
	check_text_error("1 2 x\n", TQ_ERR_FORMAT,
	    "line 1, column 5: not a number: 'x'");
	check_text_error("1,2,3\n4,,6\n", TQ_ERR_FORMAT,
	    "line 2, column 3: not a number: ''");
	check_text_error("1 2 3\n4 NaN 6\n", TQ_ERR_NONFINITE,
	    "line 2, column 3: value is NaN or infinite");
	check_text_error("1 2 3\n4 5 1e39\n", TQ_ERR_NONFINITE,
	    "line 2, column 5: value is NaN or infinite");
	check_text_error("1 2\n\n3 4\n", TQ_ERR_FORMAT, "line 2: blank line");
	check_text_error("a 1\nb\n", TQ_ERR_FORMAT,
	    "line 2: 0 values, expected 1");
	check_text_error("\n \n", TQ_ERR_EMPTY, "no vectors");
	/* Words are not vectors: the fixture's refusal, as before. */
	check_text_error("hello world!\n", TQ_ERR_FORMAT,
	    "not a vector file (unrecognised header)");
	/* A line of 1 MiB without its newline. */
	b_str(&b, "1 2\n");
	while (b.n < ((size_t)1 << 20) + 100)
		b_str(&b, "1 ");
	b_str(&b, "\n");
	put_bytes(p, &b);
	CHECK_ST(read_status(p, NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("line 2: longer than 1048576 bytes");
	b_free(&b);

	/* A label of more than 4096 bytes. */
	b_str(&b, "a 1\n");
	while (b.n < 5000)
		b_u8(&b, 'b');
	b_str(&b, " 2\n");
	put_bytes(p, &b);
	CHECK_ST(read_status(p, NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("line 2: label longer than 4096 bytes");
	b_free(&b);

	/* The C locale's decimal point whatever LC_NUMERIC says. */
	if (setlocale(LC_NUMERIC, "de_DE.UTF-8") != NULL ||
	    setlocale(LC_NUMERIC, "fr_FR.UTF-8") != NULL) {
		put_file(p, "1 2 3\n4.5 -5e-3 6e2\n", 20);
		check_labelled(p, "text", x3, NULL, 2, 3, -1);
		setlocale(LC_NUMERIC, "C");
	}
}

static struct bytes
w2v_bytes(const char *const *words, size_t n, uint32_t d, const float *x,
    int newline)
{
	struct bytes b = { 0 };
	char hdr[64];
	size_t i, j;

	snprintf(hdr, sizeof(hdr), "%zu %lu\n", n, (unsigned long)d);
	b_str(&b, hdr);
	for (i = 0; i < n; i++) {
		b_str(&b, words[i]);
		b_u8(&b, ' ');
		for (j = 0; j < d; j++)
			b_f32(&b, x[i * d + j]);
		if (newline)
			b_u8(&b, '\n');
	}
	return b;
}

static void
test_w2v(void)
{
	static const char *const w[] = { "the", "</s>", "caf\xc3\xa9" };
	const char *p = unit_path("w.bin");
	float *x = make_rows(3, 5);
	struct bytes b, z;
	pid_t pid;
	int saved, nl;

	for (nl = 0; nl < 2; nl++) {
		b = w2v_bytes(w, 3, 5, x, nl);
		put_bytes(p, &b);
		check_labelled(p, "word2vec", x, w, 3, 5, 3);
		saved = stdin_from(b.p, b.n, &pid);
		check_labelled("-", "word2vec", x, w, 3, 5, -1);
		stdin_restore(saved, pid);
		z = zstd_of(&b);
		saved = stdin_from(z.p, z.n, &pid);
		check_labelled("-", "word2vec", x, w, 3, 5, -1);
		stdin_restore(saved, pid);
		b_free(&z);

		/* Truncated, trailing data, a count the file cannot hold. */
		put_file(p, b.p, b.n - 3);
		CHECK_ST(read_status(p, NULL), TQ_ERR_FORMAT);
		CHECK_DETAIL("truncated at row 2 of 3 (word2vec)");
		b.p[0] = '9';
		put_bytes(p, &b);
		CHECK_ST(read_status(p, NULL), TQ_ERR_FORMAT);
		CHECK_DETAIL("header claims 9 rows of dim 5 but the file holds");
		b.p[0] = '3';
		saved = stdin_from(b.p, b.n - 3, &pid);
		CHECK_ST(read_status("-", NULL), TQ_ERR_FORMAT);
		CHECK_DETAIL("truncated at row 2 of 3 (word2vec)");
		stdin_restore(saved, pid);
		b_str(&b, "xyz");
		saved = stdin_from(b.p, b.n, &pid);
		CHECK_ST(read_status("-", NULL), TQ_ERR_FORMAT);
		CHECK_DETAIL("trailing data after 3 rows");
		stdin_restore(saved, pid);
		b_free(&b);
	}

	/* NaN: the row and column, as in every binary format. */
	x[7] = NAN;
	b = w2v_bytes(w, 3, 5, x, 1);
	put_bytes(p, &b);
	CHECK_ST(read_status(p, NULL), TQ_ERR_NONFINITE);
	CHECK_DETAIL("row 1, column 2: value is NaN or infinite");
	b_free(&b);
	free(x);

	/* An overlong word. */
	b_str(&b, "1 2\n");
	while (b.n < 5000)
		b_u8(&b, 'a');
	b_str(&b, " \x01\x02\x03\x04\x05\x06\x07\x08");
	put_bytes(p, &b);
	CHECK_ST(read_status(p, NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("row 0: word longer than 4096 bytes");
	b_free(&b);
}

/* .fvecs, .ivecs and .bvecs without a name: told apart by their content. */
static void
test_sniff_vecs(void)
{
	const uint32_t d = 6;
	const size_t n = 2000;
	float *x = make_rows(n, d);
	struct bytes f = { 0 }, iv = { 0 }, bv = { 0 };
	struct tq_reader *r;
	size_t i, j;
	pid_t pid;
	int saved, k;

	for (i = 0; i < n; i++) {
		b_le32(&f, d);
		b_le32(&iv, d);
		b_le32(&bv, d);
		for (j = 0; j < d; j++) {
			b_f32(&f, x[i * d + j]);
			b_le32(&iv, (uint32_t)(i * 7 + j));
			b_u8(&bv, (unsigned)(i + j) & 0xff);
		}
	}
	for (k = 0; k < 3; k++) {
		const struct bytes *b = k == 0 ? &f : k == 1 ? &iv : &bv;
		static const char *const fmt[] = { "fvecs", "ivecs", "bvecs" };
		float buf[6];
		size_t got;

		saved = stdin_from(b->p, b->n, &pid);
		CHECK_OK(tq_reader_open("-", NULL, &r));
		if (r != NULL) {
			CHECK(strcmp(tq_reader_format(r), fmt[k]) == 0);
			CHECK(tq_reader_dim(r) == d);
			CHECK(tq_reader_count(r) == -1);
			CHECK_OK(tq_reader_read(r, buf, 1, &got));
			CHECK(got == 1);
			if (k == 0)
				CHECK(memcmp(buf, x, sizeof(buf)) == 0);
			else
				CHECK(buf[5] == 5);
			tq_reader_close(r);
		}
		stdin_restore(saved, pid);
		/* A file without the extension, too. */
		put_bytes(unit_path("noext"), b);
		CHECK_OK(tq_reader_open(unit_path("noext"), NULL, &r));
		if (r != NULL) {
			CHECK(strcmp(tq_reader_format(r), fmt[k]) == 0);
			CHECK(tq_reader_count(r) == (int64_t)n);
			tq_reader_close(r);
		}
	}
	saved = stdin_from(f.p, f.n, &pid);
	read_compare("-", NULL, x, n, d, 333);
	stdin_restore(saved, pid);
	/* One row, the whole input. */
	saved = stdin_from(f.p, 4 + 4 * d, &pid);
	read_compare("-", NULL, x, 1, d, 4);
	stdin_restore(saved, pid);
	b_free(&f);
	b_free(&iv);
	b_free(&bv);
	free(x);
}

/* ------------------------------------------------------------------------ */
/* Hostile headers                                                           */

static void
test_fixture_errors(void)
{
	struct bytes b = { 0 };
	float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct tq_reader *r;
	float buf[8];
	size_t got;
	size_t i;

	/* dim 0 */
	b_le32(&b, 0);
	b_le32(&b, 2);
	put_bytes(unit_path("d0"), &b);
	CHECK_ST(open_status(unit_path("d0")), TQ_ERR_FORMAT);
	CHECK_DETAIL("not a vector file (unrecognised header)");
	b_free(&b);

	/* n 0 */
	b_le32(&b, 4);
	b_le32(&b, 0);
	put_bytes(unit_path("n0"), &b);
	CHECK_ST(open_status(unit_path("n0")), TQ_ERR_EMPTY);
	CHECK_DETAIL("no vectors");
	b_free(&b);

	/* Claims 4e9 rows of dim 784 with 4096 bytes: fails at open. */
	b_le32(&b, 784);
	b_le32(&b, 4000000000u);
	while (b.n < 4096)
		b_u8(&b, 0);
	put_bytes(unit_path("huge"), &b);
	CHECK_ST(open_status(unit_path("huge")), TQ_ERR_FORMAT);
	CHECK_DETAIL("header claims 4000000000 rows of dim 784 "
	    "(12544000000008 bytes) but the file holds 4096 bytes");
	b_free(&b);

	/* Size mismatch (spec example) */
	b_le32(&b, 784);
	b_le32(&b, 1000);
	while (b.n < 4096)
		b_u8(&b, 0);
	put_bytes(unit_path("mis"), &b);
	CHECK_ST(open_status(unit_path("mis")), TQ_ERR_FORMAT);
	CHECK_DETAIL("header claims 1000 rows of dim 784 (3136008 bytes) but "
	    "the file holds 4096 bytes");
	b_free(&b);

	/* Short header, empty file, text. */
	put_file(unit_path("short"), "\x04\0\0\0\x01", 5);
	CHECK_ST(open_status(unit_path("short")), TQ_ERR_FORMAT);
	CHECK_DETAIL("truncated header");
	put_file(unit_path("empty"), "", 0);
	CHECK_ST(open_status(unit_path("empty")), TQ_ERR_EMPTY);
	/* Text that is not numbers (numbers are text vectors now). */
	put_file(unit_path("text"), "one,two,three\n", 14);
	CHECK_ST(open_status(unit_path("text")), TQ_ERR_FORMAT);
	CHECK_DETAIL("not a vector file (unrecognised header)");

	/* NaN and infinity: row and column named. */
	for (i = 0; i < 2; i++) {
		b_le32(&b, 4);
		b_le32(&b, 2);
		x[5] = i == 0 ? NAN : -INFINITY;
		b_put(&b, x, sizeof(x));
		put_bytes(unit_path("nan"), &b);
		CHECK_OK(tq_reader_open(unit_path("nan"), NULL, &r));
		if (r != NULL) {
			CHECK_OK(tq_reader_read(r, buf, 1, &got));
			CHECK(got == 1);
			CHECK_ST(tq_reader_read(r, buf, 1, &got),
			    TQ_ERR_NONFINITE);
			CHECK_DETAIL("row 1, column 1: value is NaN or "
			    "infinite");
			CHECK(got == 0);
			/* The reader stays failed. */
			CHECK_ST(tq_reader_read(r, buf, 1, &got),
			    TQ_ERR_NONFINITE);
			tq_reader_close(r);
		}
		b_free(&b);
	}

	/* A directory. */
	CHECK_ST(open_status(unit_tmpdir()), TQ_ERR_IO);
	CHECK(errno == EISDIR);
	CHECK_ST(open_status(unit_path("does-not-exist")), TQ_ERR_IO);
	CHECK(errno == ENOENT);
	CHECK_DETAIL("open: No such file or directory");
}

static void
test_vecs_errors(void)
{
	struct bytes b = { 0 };
	float row[4] = { 1, 2, 3, 4 };

	/* Row 1 has a different dimension (sizes still line up). */
	b_le32(&b, 4);
	b_put(&b, row, 16);
	b_le32(&b, 5);
	b_put(&b, row, 16);
	put_bytes(unit_path("mis.fvecs"), &b);
	CHECK_ST(read_status(unit_path("mis.fvecs"), NULL), TQ_ERR_FORMAT);
	CHECK_DETAIL("row 1 has dimension 5, expected 4 (fvecs)");
	b_free(&b);

	b_le32(&b, 4);
	b_put(&b, row, 16);
	b_le32(&b, 4);
	b_put(&b, row, 10);
	put_bytes(unit_path("part.fvecs"), &b);
	CHECK_ST(open_status(unit_path("part.fvecs")), TQ_ERR_FORMAT);
	CHECK_DETAIL("not a multiple of the row size 20");
	b_free(&b);

	b_le32(&b, 0xffffffffu);
	b_put(&b, row, 16);
	put_bytes(unit_path("neg.ivecs"), &b);
	CHECK_ST(open_status(unit_path("neg.ivecs")), TQ_ERR_FORMAT);
	CHECK_DETAIL("row 0 has invalid dimension -1 (ivecs)");
	b_free(&b);

	b_le32(&b, 0);
	put_bytes(unit_path("zero.fvecs"), &b);
	CHECK_ST(open_status(unit_path("zero.fvecs")), TQ_ERR_FORMAT);
	b_free(&b);

	put_file(unit_path("empty.fvecs"), "", 0);
	CHECK_ST(open_status(unit_path("empty.fvecs")), TQ_ERR_EMPTY);
}

/* ------------------------------------------------------------------------ */
/* HDF5                                                                      */

static void
h5_put(hid_t f, const char *name, hid_t ftype, hid_t mtype, hsize_t n,
    hsize_t d, const void *buf)
{
	hsize_t dims[2] = { n, d };
	hid_t sp = H5Screate_simple(2, dims, NULL);
	hid_t ds = H5Dcreate2(f, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT,
	    H5P_DEFAULT);

	if (ds < 0 || H5Dwrite(ds, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT,
	    buf) < 0)
		abort();
	H5Dclose(ds);
	H5Sclose(sp);
}

static void
h5_attr(hid_t f, const char *name, const char *value, int variable)
{
	hid_t t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a;

	H5Tset_size(t, variable ? H5T_VARIABLE : strlen(value));
	H5Tset_cset(t, H5T_CSET_UTF8);
	a = H5Acreate2(f, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
	if (variable)
		H5Awrite(a, t, &value);
	else
		H5Awrite(a, t, value);
	H5Aclose(a);
	H5Sclose(sp);
	H5Tclose(t);
}

static void
test_hdf5(void)
{
	const uint32_t d = 6;
	const size_t n = 2500;
	float *x = make_rows(n, d), nb[40];
	double *xd = malloc(n * d * sizeof(double));
	int32_t ni[40], got_i[40];
	int64_t nl[4] = { 1, 2, 3, 5000000000LL };
	const char *p = unit_path("ann.hdf5");
	struct tq_reader *r;
	char buf[64];
	hid_t f;
	size_t i, got;

	for (i = 0; i < n * d; i++)
		xd[i] = x[i];
	for (i = 0; i < 40; i++) {
		ni[i] = (int32_t)(i * 7 % 13);
		nb[i] = (float)ni[i];
	}
	f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	h5_put(f, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, d, x);
	h5_put(f, "test", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, d, xd);
	h5_put(f, "neighbors", H5T_STD_I32LE, H5T_NATIVE_INT32, 4, 10, ni);
	h5_put(f, "big", H5T_STD_I64LE, H5T_NATIVE_INT64, 2, 2, nl);
	h5_put(f, "flat", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 1, 1, x);
	H5Gclose(H5Gcreate2(f, "grp", H5P_DEFAULT, H5P_DEFAULT,
	    H5P_DEFAULT));
	h5_attr(f, "distance", "euclidean", 1);
	h5_attr(f, "point_type", "float", 0);
	H5Fclose(f);

	read_compare(p, NULL, x, n, d, 1);
	read_compare(p, "train", x, n, d, 1000);
	read_compare(p, "test", x, n, d, 3);
	read_compare(p, "neighbors", nb, 4, 10, 3);
	CHECK_OK(tq_reader_open(p, "neighbors", &r));
	if (r != NULL) {
		CHECK(strcmp(tq_reader_format(r), "hdf5") == 0);
		CHECK(tq_reader_is_integer(r) == 1);
		CHECK(tq_reader_count(r) == 4);
		CHECK_OK(tq_reader_read_i32(r, got_i, 3, &got));
		CHECK(got == 3);
		CHECK_OK(tq_reader_read_i32(r, got_i + 30, 3, &got));
		CHECK(got == 1);
		CHECK(memcmp(got_i, ni, sizeof(ni)) == 0);
		CHECK_OK(tq_reader_read_i32(r, got_i, 3, &got));
		CHECK(got == 0);
		tq_reader_close(r);
	}
	CHECK_OK(tq_reader_open(p, "train", &r));
	if (r != NULL) {
		CHECK_ST(tq_reader_read_i32(r, got_i, 1, &got),
		    TQ_ERR_UNSUPPORTED);
		tq_reader_close(r);
	}
	/* int64 out of int32 range */
	CHECK_OK(tq_reader_open(p, "big", &r));
	if (r != NULL) {
		CHECK_OK(tq_reader_read_i32(r, got_i, 1, &got));
		CHECK(got == 1 && got_i[0] == 1 && got_i[1] == 2);
		CHECK_ST(tq_reader_read_i32(r, got_i, 1, &got), TQ_ERR_FORMAT);
		CHECK_DETAIL("row 1, column 1: value 5000000000 does not fit");
		tq_reader_close(r);
	}
	CHECK_ST(open_status(p), TQ_OK);
	CHECK_ST(read_status(p, "xyz"), TQ_ERR_FORMAT);
	CHECK_DETAIL("no dataset 'xyz' (has: big, flat, neighbors, test, "
	    "train)");
	CHECK_ST(read_status(p, "grp"), TQ_ERR_FORMAT);
	CHECK_ST(read_status(p, "grp/x"), TQ_ERR_FORMAT);
	CHECK_ST(read_status(p, ""), TQ_ERR_FORMAT);

	CHECK_OK(tq_hdf5_attr_string(p, "distance", buf, sizeof(buf)));
	CHECK(strcmp(buf, "euclidean") == 0);
	CHECK_OK(tq_hdf5_attr_string(p, "point_type", buf, sizeof(buf)));
	CHECK(strcmp(buf, "float") == 0);
	CHECK_ST(tq_hdf5_attr_string(p, "distance", buf, 5), TQ_ERR_OVERFLOW);
	CHECK_ST(tq_hdf5_attr_string(p, "nope", buf, sizeof(buf)),
	    TQ_ERR_FORMAT);
	CHECK_DETAIL("no attribute 'nope'");
	put_file(unit_path("not.hdf5"), "plain text here", 15);
	CHECK_ST(tq_hdf5_attr_string(unit_path("not.hdf5"), "distance", buf,
	    sizeof(buf)), TQ_ERR_FORMAT);

	/* NaN in float32 and out-of-range float64. */
	x[3 * d + 2] = NAN;
	xd[4 * d + 5] = 1e39;
	f = H5Fcreate(unit_path("nan.hdf5"), H5F_ACC_TRUNC, H5P_DEFAULT,
	    H5P_DEFAULT);
	h5_put(f, "train", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n, d, x);
	h5_put(f, "test", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, n, d, xd);
	H5Fclose(f);
	CHECK_ST(read_status(unit_path("nan.hdf5"), NULL), TQ_ERR_NONFINITE);
	CHECK_DETAIL("row 3, column 2: value is NaN or infinite");
	CHECK_ST(read_status(unit_path("nan.hdf5"), "test"), TQ_ERR_NONFINITE);
	CHECK_DETAIL("row 4, column 5: value is NaN or infinite");

	/* A chunked dataset claiming a million rows with one chunk. */
	{
		hsize_t dims[2] = { 1000000, 4 }, ch[2] = { 2, 4 };
		hsize_t cnt[2] = { 2, 4 }, st0[2] = { 0, 0 };
		hid_t sp, dcpl, ds, ms;
		float one[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

		f = H5Fcreate(unit_path("sparse.hdf5"), H5F_ACC_TRUNC,
		    H5P_DEFAULT, H5P_DEFAULT);
		sp = H5Screate_simple(2, dims, NULL);
		dcpl = H5Pcreate(H5P_DATASET_CREATE);
		H5Pset_chunk(dcpl, 2, ch);
		ds = H5Dcreate2(f, "train", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
		    dcpl, H5P_DEFAULT);
		ms = H5Screate_simple(2, cnt, NULL);
		H5Sselect_hyperslab(sp, H5S_SELECT_SET, st0, NULL, cnt, NULL);
		H5Dwrite(ds, H5T_NATIVE_FLOAT, ms, sp, H5P_DEFAULT, one);
		H5Sclose(ms);
		H5Dclose(ds);
		H5Pclose(dcpl);
		H5Sclose(sp);
		H5Fclose(f);
		CHECK_ST(open_status(unit_path("sparse.hdf5")), TQ_ERR_FORMAT);
		CHECK_DETAIL("incomplete");
	}

	/* An external link would open another file: not followed. */
	f = H5Fcreate(unit_path("ext.hdf5"), H5F_ACC_TRUNC, H5P_DEFAULT,
	    H5P_DEFAULT);
	H5Lcreate_external(p, "train", f, "train", H5P_DEFAULT, H5P_DEFAULT);
	H5Fclose(f);
	CHECK_ST(open_status(unit_path("ext.hdf5")), TQ_ERR_FORMAT);
	CHECK_DETAIL("no dataset 'train'");

	/* A truncated HDF5 file. */
	{
		size_t len;
		uint8_t *all = get_file(p, &len);

		put_file(unit_path("cut.hdf5"), all, len / 2);
		CHECK(read_status(unit_path("cut.hdf5"), NULL) != TQ_OK);
		put_file(unit_path("cut2.hdf5"), all, 100);
		CHECK_ST(read_status(unit_path("cut2.hdf5"), NULL),
		    TQ_ERR_FORMAT);
		free(all);
	}
	free(x);
	free(xd);
}

/* ------------------------------------------------------------------------ */
/* Atomic writers                                                            */

static int
count_temps(void)
{
	DIR *dp = opendir(unit_tmpdir());
	struct dirent *de;
	int n = 0;

	if (dp == NULL)
		return -1;
	while ((de = readdir(dp)) != NULL)
		if (strstr(de->d_name, ".tmp.") != NULL)
			n++;
	closedir(dp);
	return n;
}

static void
test_writer_atomic(void)
{
	const char *p = unit_path("keep.fvecs");
	float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	struct tq_writer *w;
	struct stat sb;
	uint8_t *got;
	size_t len;
	mode_t old;

	put_file(p, "old content", 11);
	CHECK_OK(tq_writer_open(p, TQ_VEC_FVECS, 4, TQ_COUNT_UNKNOWN, &w));
	CHECK_OK(tq_writer_write(w, x, 2));
	CHECK(count_temps() == 1);
	tq_writer_abort(w);
	got = get_file(p, &len);
	CHECK(len == 11 && got != NULL && memcmp(got, "old content", 11) == 0);
	free(got);
	CHECK(count_temps() == 0);

	/* A count mismatch fails the commit and keeps the old file. */
	CHECK_OK(tq_writer_open(p, TQ_VEC_FVECS, 4, 3, &w));
	CHECK_OK(tq_writer_write(w, x, 2));
	CHECK_ST(tq_writer_commit(w), TQ_ERR_ARG);
	CHECK_DETAIL("wrote 2 rows but 3 were declared");
	got = get_file(p, &len);
	CHECK(len == 11);
	free(got);
	CHECK(count_temps() == 0);

	/* More rows than declared are refused at once. */
	CHECK_OK(tq_writer_open(p, TQ_VEC_FIXTURE, 4, 1, &w));
	CHECK_ST(tq_writer_write(w, x, 2), TQ_ERR_ARG);
	CHECK_OK(tq_writer_write(w, x, 1));
	/* NaN refused, nothing written. */
	x[2] = NAN;
	tq_writer_abort(w);
	p = unit_path("keep.fix");
	old = umask(027);
	CHECK_OK(tq_writer_open(p, TQ_VEC_FIXTURE, 4, 2, &w));
	umask(old);
	CHECK_ST(tq_writer_write(w, x, 2), TQ_ERR_NONFINITE);
	CHECK_DETAIL("row 0, column 2");
	x[2] = 3;
	CHECK_OK(tq_writer_write(w, x, 2));
	CHECK_OK(tq_writer_commit(w));
	CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0640);
	CHECK(sb.st_size == 8 + 32);
	CHECK(count_temps() == 0);
	read_compare(p, NULL, x, 2, 4, 2);

	/* Arguments. */
	CHECK_ST(tq_writer_open(p, TQ_VEC_FIXTURE, 0, 1, &w), TQ_ERR_ARG);
	CHECK_ST(tq_writer_open(p, TQ_VEC_FIXTURE, TQ_MAX_DIM + 1, 1, &w),
	    TQ_ERR_ARG);
	CHECK_ST(tq_writer_open(p, TQ_VEC_FIXTURE, 4, 1ull << 32, &w),
	    TQ_ERR_OVERFLOW);
	CHECK_ST(tq_writer_open(p, (enum tq_vecfmt)99, 4, 1, &w), TQ_ERR_ARG);
	CHECK_ST(tq_writer_open(unit_path("no/such/dir/x"), TQ_VEC_FIXTURE, 4,
	    1, &w), TQ_ERR_IO);
	CHECK_ST(tq_writer_open("dir/", TQ_VEC_FIXTURE, 4, 1, &w), TQ_ERR_ARG);
	CHECK(w == NULL);
	/* Renaming over a directory fails and cleans up. */
	mkdir(unit_path("adir"), 0755);
	CHECK_OK(tq_writer_open(unit_path("adir"), TQ_VEC_FIXTURE, 4, 1, &w));
	CHECK_OK(tq_writer_write(w, x, 1));
	CHECK_ST(tq_writer_commit(w), TQ_ERR_IO);
	CHECK(count_temps() == 0);
	tq_writer_abort(NULL);
}

/* Writes to standard output redirected to a file. */
static void
test_writer_stdout(void)
{
	const char *p = unit_path("stdout.fix");
	float x[6] = { 1, 2, 3, 4, 5, 6 };
	struct tq_writer *w;
	int fd, saved;
	uint8_t *got;
	size_t len;

	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, STDOUT_FILENO);
	close(fd);
	/* Unknown count: spooled, header first at commit. */
	CHECK_OK(tq_writer_open("-", TQ_VEC_FIXTURE, 3, TQ_COUNT_UNKNOWN, &w));
	CHECK_OK(tq_writer_write(w, x, 1));
	CHECK_OK(tq_writer_write(w, x + 3, 1));
	CHECK_OK(tq_writer_commit(w));
	dup2(saved, STDOUT_FILENO);
	close(saved);
	got = get_file(p, &len);
	CHECK(len == 8 + 24 && got != NULL && got[0] == 3 && got[4] == 2);
	free(got);
	read_compare(p, NULL, x, 2, 3, 1);

	/* Known count on standard output: fvecs streamed straight out. */
	fflush(stdout);
	saved = dup(STDOUT_FILENO);
	fd = open(unit_path("stdout.fvecs"), O_WRONLY | O_CREAT | O_TRUNC,
	    0644);
	dup2(fd, STDOUT_FILENO);
	close(fd);
	CHECK_OK(tq_writer_open("-", TQ_VEC_FVECS, 3, 2, &w));
	CHECK_OK(tq_writer_write(w, x, 2));
	CHECK_OK(tq_writer_commit(w));
	dup2(saved, STDOUT_FILENO);
	close(saved);
	read_compare(unit_path("stdout.fvecs"), NULL, x, 2, 3, 2);
}

/* ------------------------------------------------------------------------ */
/* Ids                                                                       */

static enum tq_status
ids_all(const char *path, uint64_t *out, size_t cap, size_t chunk,
    size_t *n)
{
	struct tq_ids_reader *r;
	enum tq_status st;
	size_t got;

	*n = 0;
	st = tq_ids_open(path, &r);
	if (st != TQ_OK)
		return st;
	do {
		size_t k = cap - *n < chunk ? cap - *n : chunk;

		st = tq_ids_read(r, out + *n, k, &got);
		*n += got;
	} while (st == TQ_OK && got > 0 && *n < cap);
	tq_ids_close(r);
	return st;
}

static void
ids_case(const char *text, enum tq_status want, const char *detail)
{
	uint64_t ids[16];
	size_t n;

	put_file(unit_path("case.ids"), text, strlen(text));
	CHECK_ST(ids_all(unit_path("case.ids"), ids, 16, 16, &n), want);
	if (detail != NULL)
		CHECK_DETAIL(detail);
}

static void
test_ids(void)
{
	const char *text = "0\n18446744073709551615\r\n42\n00007\n9";
	uint64_t ids[8], want[5] = { 0, UINT64_MAX, 42, 7, 9 };
	struct bytes b = { 0 };
	size_t n, i;
	pid_t pid;
	int saved;

	put_file(unit_path("a.ids"), text, strlen(text));
	CHECK_OK(ids_all(unit_path("a.ids"), ids, 8, 1, &n));
	CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);
	CHECK_OK(ids_all(unit_path("a.ids"), ids, 8, 3, &n));
	CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);

	saved = stdin_from(text, strlen(text), &pid);
	CHECK_OK(ids_all("-", ids, 8, 2, &n));
	CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);
	stdin_restore(saved, pid);

	ids_case("1\n\n2\n", TQ_ERR_FORMAT, "line 2: not an unsigned integer");
	ids_case("1\n2\n\n", TQ_ERR_FORMAT, "line 3: not an unsigned integer");
	ids_case("1\n-2\n", TQ_ERR_FORMAT, "line 2: not an unsigned integer");
	ids_case(" 1\n", TQ_ERR_FORMAT, "line 1: not an unsigned integer");
	ids_case("1 \n", TQ_ERR_FORMAT, "line 1: not an unsigned integer");
	ids_case("1\r2\n", TQ_ERR_FORMAT, "line 1: not an unsigned integer");
	ids_case("0x10\n", TQ_ERR_FORMAT, "line 1: not an unsigned integer");
	ids_case("5\n18446744073709551616\n", TQ_ERR_FORMAT,
	    "line 2: value does not fit in 64 bits");
	ids_case("\r\n", TQ_ERR_FORMAT, "line 1");
	ids_case("", TQ_OK, NULL);
	ids_case("7\r", TQ_OK, NULL);

	for (i = 0; i < 5; i++) {
		uint8_t le[8];
		size_t j;

		for (j = 0; j < 8; j++)
			le[j] = (uint8_t)(want[i] >> (8 * j));
		b_put(&b, le, 8);
	}
	put_bytes(unit_path("a.u64"), &b);
	CHECK_OK(ids_all(unit_path("a.u64"), ids, 8, 2, &n));
	CHECK(n == 5 && memcmp(ids, want, sizeof(want)) == 0);
	put_file(unit_path("b.u64"), b.p, b.n - 1);
	CHECK_ST(ids_all(unit_path("b.u64"), ids, 8, 2, &n), TQ_ERR_FORMAT);
	CHECK_DETAIL("not a multiple of 8");
	{
		struct bytes z;

		b.n -= 3;
		z = zstd_of(&b);
		put_bytes(unit_path("c.u64.zst"), &z);
		CHECK_ST(ids_all(unit_path("c.u64.zst"), ids, 8, 8, &n),
		    TQ_ERR_FORMAT);
		CHECK_DETAIL("5 trailing bytes");
		b_free(&z);
	}
	b_free(&b);
	CHECK_ST(ids_all(unit_path("none.ids"), ids, 8, 2, &n), TQ_ERR_IO);
}

/* ------------------------------------------------------------------------ */
/* tests/malformed/vec: README lines "file  STATUS  detail..."             */

static const struct {
	const char *name;
	enum tq_status st;
} status_names[] = {
	{ "OK", TQ_OK }, { "NOMEM", TQ_ERR_NOMEM }, { "IO", TQ_ERR_IO },
	{ "FORMAT", TQ_ERR_FORMAT }, { "ARG", TQ_ERR_ARG },
	{ "NONFINITE", TQ_ERR_NONFINITE }, { "EMPTY", TQ_ERR_EMPTY },
	{ "OVERFLOW", TQ_ERR_OVERFLOW }, { "UNSUPPORTED", TQ_ERR_UNSUPPORTED },
};

static void
test_malformed_dir(void)
{
	const char *dir = getenv("TQ_MALFORMED_VEC");
	char line[512], path[1024], file[256], stname[32];
	FILE *fp;
	int cases = 0;

	if (dir == NULL)
		dir = "tests/malformed/vec";
	snprintf(path, sizeof(path), "%s/README", dir);
	if ((fp = fopen(path, "r")) == NULL) {
		fprintf(stderr, "note: %s not found, malformed files skipped\n",
		    path);
		return;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *detail, *nl;
		int off = 0;
		size_t i;
		enum tq_status want = TQ_OK, got;
		int known = 0;

		if (line[0] == '#' || line[0] == '\n' || line[0] == ' ')
			continue;
		if (sscanf(line, "%255s %31s %n", file, stname, &off) != 2)
			continue;
		for (i = 0; i < sizeof(status_names) / sizeof(status_names[0]);
		    i++)
			if (strcmp(stname, status_names[i].name) == 0) {
				want = status_names[i].st;
				known = 1;
			}
		if (!known)	/* prose */
			continue;
		detail = line + off;
		if ((nl = strchr(detail, '\n')) != NULL)
			*nl = '\0';
		snprintf(path, sizeof(path), "%s/%s", dir, file);
		if (strstr(file, "ids") != NULL || strstr(file, ".u64")) {
			uint64_t ids[64];
			size_t n;

			got = ids_all(path, ids, 64, 64, &n);
		} else {
			got = read_status(path, NULL);
		}
		if (got != want || strstr(tq_errdetail(), detail) == NULL) {
			unit_failed++;
			fprintf(stderr, "%s: got %s (%s), expected %s (%s)\n",
			    path, tq_strerror(got), tq_errdetail(),
			    tq_strerror(want), detail);
		} else {
			unit_passed++;
		}
		cases++;
	}
	fclose(fp);
	CHECK(cases >= 50);
}

/*
 * tq_check_rows: NaN and infinity for every metric; for l2 and ip a norm
 * of 2^62 or more, whose square overflows f32, named with the row counted
 * from row0; cosine takes any finite norm.
 */
static void
test_check_rows(void)
{
	float x[3 * 4] = { 1, 2, 3, 4, 0, 0, 0, 0, 1, 1, 1, 1 };

	CHECK_OK(tq_check_rows(TQ_METRIC_L2, x, 3, 4, 0));
	CHECK_OK(tq_check_rows(TQ_METRIC_IP, NULL, 0, 4, 0));
	/* Just below 2^62, then at it (2^61 in four values: 2^62). */
	x[4] = 0x1p62f * 0.99f;
	CHECK_OK(tq_check_rows(TQ_METRIC_L2, x, 3, 4, 0));
	x[4] = x[5] = x[6] = x[7] = 0x1p61f;
	CHECK(tq_check_rows(TQ_METRIC_L2, x, 3, 4, 10) == TQ_ERR_NONFINITE);
	CHECK(strcmp(tq_errdetail(), "row 11: norm 4.61e+18 is too large for "
	    "l2 (above 2^62 = 4.6e18, scores overflow float; scale the data "
	    "down)") == 0);
	CHECK(tq_check_rows(TQ_METRIC_IP, x, 3, 4, 0) == TQ_ERR_NONFINITE);
	CHECK_OK(tq_check_rows(TQ_METRIC_COSINE, x, 3, 4, 0));
	/* Values whose squares alone overflow: still a number in double. */
	x[5] = 3e38f;
	CHECK_OK(tq_check_rows(TQ_METRIC_COSINE, x, 3, 4, 0));
	CHECK(tq_check_rows(TQ_METRIC_L2, x, 3, 4, 0) == TQ_ERR_NONFINITE);
	x[9] = NAN;
	CHECK(tq_check_rows(TQ_METRIC_COSINE, x, 3, 4, 0) == TQ_ERR_NONFINITE);
	CHECK(strcmp(tq_errdetail(), "row 2, column 1: value is NaN or "
	    "infinite") == 0);
}

int
main(void)
{
	H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
	signal(SIGPIPE, SIG_IGN);
	RUN(test_fixture_roundtrip);
	RUN(test_vecs_roundtrip);
	RUN(test_bvecs);
	RUN(test_read_all);
	RUN(test_npy);
	RUN(test_idx);
	RUN(test_zstd);
	RUN(test_stdin);
	RUN(test_fifo);
	RUN(test_text);
	RUN(test_w2v);
	RUN(test_sniff_vecs);
	RUN(test_fixture_errors);
	RUN(test_vecs_errors);
	RUN(test_hdf5);
	RUN(test_writer_atomic);
	RUN(test_writer_stdout);
	RUN(test_ids);
	RUN(test_malformed_dir);
	RUN(test_check_rows);
	return unit_done();
}
