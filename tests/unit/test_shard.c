/* test_shard.c - the shard rule, reader and ids windows, id sequences. */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <zstd.h>

#include "unit.h"

#define DIM 128
#define ROWS 3000	/* 1.5 MiB of floats: more than the reader's buffer */

static float data[ROWS * DIM];

static void
fill(void)
{
	for (size_t i = 0; i < (size_t)ROWS * DIM; i++)
		data[i] = (float)(i % 9973) * 0.25f - (float)(i / DIM);
}

static void
write_file(const char *path, const void *p, size_t len)
{
	FILE *f = fopen(path, "wb");

	CHECK(f != NULL);
	if (f == NULL)
		return;
	CHECK(fwrite(p, 1, len, f) == len);
	CHECK(fclose(f) == 0);
}

static void
write_vec(const char *path, enum tq_vecfmt fmt)
{
	struct tq_writer *w;

	CHECK_OK(tq_writer_open(path, fmt, DIM, ROWS, &w));
	CHECK_OK(tq_writer_write(w, data, ROWS));
	CHECK_OK(tq_writer_commit(w));
}

static void
write_npy(const char *path)
{
	char hdr[128];
	int len = snprintf(hdr, sizeof(hdr), "{'descr': '<f4', "
	    "'fortran_order': False, 'shape': (%d, %d), }", ROWS, DIM);
	FILE *f = fopen(path, "wb");

	CHECK(f != NULL);
	if (f == NULL)
		return;
	/* Pad the header so that the data starts at a multiple of 64. */
	while ((10 + len + 1) % 64 != 0)
		hdr[len++] = ' ';
	hdr[len++] = '\n';
	fwrite("\x93NUMPY\x01\x00", 1, 8, f);
	fputc(len & 0xff, f);
	fputc(len >> 8, f);
	fwrite(hdr, 1, (size_t)len, f);
	CHECK(fwrite(data, sizeof(float), (size_t)ROWS * DIM, f) ==
	    (size_t)ROWS * DIM);
	CHECK(fclose(f) == 0);
}

static void
write_hdf5(const char *path)
{
	hsize_t dims[2] = { ROWS, DIM };
	hid_t f, sp, ds;

	f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	sp = H5Screate_simple(2, dims, NULL);
	ds = H5Dcreate2(f, "train", H5T_IEEE_F32LE, sp, H5P_DEFAULT,
	    H5P_DEFAULT, H5P_DEFAULT);
	CHECK(H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
	    data) >= 0);
	H5Dclose(ds);
	H5Sclose(sp);
	H5Fclose(f);
}

/* Reads the window [first, first + count) of path and compares it. */
static void
window_reads(const char *path, uint64_t first, uint64_t count)
{
	static float got[ROWS * DIM];
	struct tq_reader *r;
	size_t n, total = 0;

	CHECK_OK(tq_reader_open(path, NULL, &r));
	if (r == NULL)
		return;
	CHECK_OK(tq_reader_window(r, first, count));
	CHECK(tq_reader_count(r) == (int64_t)count);
	do {
		/* Odd chunks, so that reads straddle the reader's buffer. */
		CHECK_OK(tq_reader_read(r, got + total * DIM, 777, &n));
		total += n;
	} while (n > 0 && total < ROWS);
	CHECK(total == count);
	CHECK(memcmp(got, data + first * DIM, count * DIM * sizeof(float)) ==
	    0);
	CHECK_OK(tq_reader_read(r, got, 1, &n));
	CHECK(n == 0);
	tq_reader_close(r);
}

static void
test_rule(void)
{
	static const uint64_t rows[] = { 0, 1, 2, 5, 100, 101, 3000,
	    (1ull << 40) + 7, UINT64_MAX };
	static const uint32_t ns[] = { 1, 2, 3, 7, 64, 1000 };
	uint64_t first, count, next;
	size_t a, b;
	uint32_t i;

	for (a = 0; a < sizeof(rows) / sizeof(rows[0]); a++)
		for (b = 0; b < sizeof(ns) / sizeof(ns[0]); b++) {
			next = 0;
			for (i = 0; i < ns[b]; i++) {
				CHECK_OK(tq_shard_rows(rows[a], i, ns[b],
				    &first, &count));
				CHECK(first == next);
				CHECK(count == rows[a] / ns[b] ||
				    count == rows[a] / ns[b] + 1);
				next = first + count;
			}
			CHECK(next == rows[a]);
		}
	/* floor(i * rows / n) exactly, where the product needs 96 bits. */
	CHECK_OK(tq_shard_rows(UINT64_MAX, 999999, 1000000, &first, &count));
	CHECK(first == (uint64_t)((unsigned __int128)UINT64_MAX * 999999 /
	    1000000));
	CHECK_OK(tq_shard_rows(10, 1, 3, &first, &count));
	CHECK(first == 3 && count == 3);
	CHECK_ST(tq_shard_rows(10, 3, 3, &first, &count), TQ_ERR_ARG);
	CHECK_ST(tq_shard_rows(10, 0, 0, &first, &count), TQ_ERR_ARG);
}

static void
test_windows(void)
{
	const char *paths[] = { unit_path("w.bin"), unit_path("w.fvecs"),
	    unit_path("w.npy"), unit_path("w.hdf5") };
	size_t p;

	write_vec(paths[0], TQ_VEC_FIXTURE);
	write_vec(paths[1], TQ_VEC_FVECS);
	write_npy(paths[2]);
	write_hdf5(paths[3]);
	for (p = 0; p < 4; p++) {
		window_reads(paths[p], 0, ROWS);
		window_reads(paths[p], 0, 1);
		window_reads(paths[p], 1, 5);		/* within the buffer */
		window_reads(paths[p], 2500, 500);	/* seeks past it */
		window_reads(paths[p], ROWS - 1, 1);
		window_reads(paths[p], 1000, 0);
	}
}

static void
test_window_errors(void)
{
	const char *bin = unit_path("e.bin"), *zst = unit_path("e.bin.zst");
	struct tq_reader *r;
	float row[DIM];
	size_t n;

	write_vec(bin, TQ_VEC_FIXTURE);
	CHECK_OK(tq_reader_open(bin, NULL, &r));
	CHECK_ST(tq_reader_window(r, 2999, 2), TQ_ERR_ARG);
	CHECK_DETAIL("past the 3000 rows");
	CHECK_ST(tq_reader_window(r, UINT64_MAX, 2), TQ_ERR_ARG);
	CHECK_OK(tq_reader_read(r, row, 1, &n));
	CHECK_ST(tq_reader_window(r, 1, 1), TQ_ERR_ARG);
	CHECK_DETAIL("after a read");
	tq_reader_close(r);

	/* A compressed file's count is not known in advance. */
	{
		FILE *f = fopen(bin, "rb");
		static uint8_t raw[8 + ROWS * DIM * 4];
		size_t len, bound = ZSTD_compressBound(sizeof(raw));
		void *z = malloc(bound);

		CHECK(f != NULL && z != NULL);
		len = fread(raw, 1, sizeof(raw), f);
		fclose(f);
		write_file(zst, z, ZSTD_compress(z, bound, raw, len, 1));
		free(z);
	}
	CHECK_OK(tq_reader_open(zst, NULL, &r));
	CHECK_ST(tq_reader_window(r, 0, 1), TQ_ERR_UNSUPPORTED);
	CHECK_DETAIL("not known in advance");
	tq_reader_close(r);
}

/* A NaN outside the window is never read; inside, it is named by its row. */
static void
test_window_nan(void)
{
	const char *bin = unit_path("nan.bin");
	struct tq_reader *r;
	static float got[ROWS * DIM];
	size_t n;

	/* Written by hand: the library's writer refuses a NaN. */
	{
		FILE *f = fopen(bin, "wb");
		uint32_t hdr[2] = { DIM, ROWS };	/* little-endian host */

		CHECK(f != NULL);
		if (f == NULL)
			return;
		data[2000 * DIM + 3] = NAN;
		fwrite(hdr, sizeof(hdr), 1, f);
		CHECK(fwrite(data, sizeof(float), (size_t)ROWS * DIM, f) ==
		    (size_t)ROWS * DIM);
		CHECK(fclose(f) == 0);
		fill();
	}
	CHECK_OK(tq_reader_open(bin, NULL, &r));
	CHECK_OK(tq_reader_window(r, 0, 2000));
	CHECK_OK(tq_reader_read(r, got, ROWS, &n));
	CHECK(n == 2000);
	tq_reader_close(r);
	CHECK_OK(tq_reader_open(bin, NULL, &r));
	CHECK_OK(tq_reader_window(r, 2001, 999));
	CHECK_OK(tq_reader_read(r, got, ROWS, &n));
	CHECK(n == 999);
	tq_reader_close(r);
	CHECK_OK(tq_reader_open(bin, NULL, &r));
	CHECK_OK(tq_reader_window(r, 1999, 5));
	CHECK_ST(tq_reader_read(r, got, ROWS, &n), TQ_ERR_NONFINITE);
	CHECK_DETAIL("row 2000, column 3");
	tq_reader_close(r);
}

static void
test_ids(void)
{
	const char *txt = unit_path("ids.txt");
	struct tq_ids_reader *r;
	uint64_t ids[16];
	size_t n;

	write_file(txt, "10\n11\n12\n13\n14\n15\n16\n", 21);
	CHECK_OK(tq_ids_open(txt, &r));
	CHECK_OK(tq_ids_window(r, 2, 3));
	CHECK_OK(tq_ids_read(r, ids, 16, &n));
	CHECK(n == 3 && ids[0] == 12 && ids[1] == 13 && ids[2] == 14);
	CHECK_OK(tq_ids_read(r, ids, 16, &n));
	CHECK(n == 0);
	tq_ids_close(r);

	CHECK_OK(tq_ids_open(txt, &r));
	CHECK_ST(tq_ids_window(r, 9, 1), TQ_ERR_MISMATCH);
	tq_ids_close(r);

	CHECK_OK(tq_ids_sequence(1000, 5, &r));
	CHECK_OK(tq_ids_read(r, ids, 2, &n));
	CHECK(n == 2 && ids[0] == 1000 && ids[1] == 1001);
	CHECK_OK(tq_ids_read(r, ids, 16, &n));
	CHECK(n == 3 && ids[0] == 1002 && ids[2] == 1004);
	CHECK_OK(tq_ids_read(r, ids, 16, &n));
	CHECK(n == 0);
	tq_ids_close(r);
	CHECK_ST(tq_ids_sequence(UINT64_MAX, 2, &r), TQ_ERR_OVERFLOW);
	CHECK(r == NULL);
	CHECK_OK(tq_ids_sequence(UINT64_MAX, 1, &r));
	CHECK_OK(tq_ids_read(r, ids, 16, &n));
	CHECK(n == 1 && ids[0] == UINT64_MAX);
	tq_ids_close(r);
}

int
main(void)
{
	fill();
	RUN(test_rule);
	RUN(test_windows);
	RUN(test_window_errors);
	RUN(test_window_nan);
	RUN(test_ids);
	return unit_done();
}
