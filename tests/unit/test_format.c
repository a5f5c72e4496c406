/*
 * test_format.c - the container: round trip, every header and table byte
 * corrupted, every truncation, checksums, atomic replacement, fp16.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "unit.h"

static char dir[] = "/tmp/tq-test-format.XXXXXX";

static void
path_in(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", dir, name);
}

static uint8_t *
slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	uint8_t *b;
	long n;

	if (fp == NULL)
		return NULL;
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	rewind(fp);
	b = malloc((size_t)n + 1);
	if (b != NULL && fread(b, 1, (size_t)n, fp) != (size_t)n) {
		free(b);
		b = NULL;
	}
	fclose(fp);
	*len = (size_t)n;
	return b;
}

static void
spit(const char *path, const uint8_t *b, size_t len)
{
	FILE *fp = fopen(path, "wb");

	if (fp == NULL)
		return;
	if (len > 0)
		fwrite(b, 1, len, fp);
	fclose(fp);
}

static int
count_entries(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' || (strcmp(e->d_name, ".") != 0 &&
		    strcmp(e->d_name, "..") != 0))
			n++;
	closedir(d);
	return n;
}

/* Writes a file with one streamed and two reserved sections. */
static enum tq_status
write_sample(const char *path, size_t payload)
{
	struct tq_filewriter *fw;
	uint8_t *a = malloc(payload), b[100];
	unsigned s1, s2;

	for (size_t i = 0; i < payload; i++)
		a[i] = (uint8_t)(i * 7 + 3);
	memset(b, 0xab, sizeof(b));
	TQ_TRY(tq_fw_open(path, TQ_FILE_QUANTIZER, 4, &fw));
	TQ_TRY(tq_fw_begin(fw, TQ_TAG('A', 'A', 'A', 'A')));
	TQ_TRY(tq_fw_write(fw, a, payload / 2));
	TQ_TRY(tq_fw_write(fw, a + payload / 2, payload - payload / 2));
	TQ_TRY(tq_fw_end(fw));
	TQ_TRY(tq_fw_reserve(fw, TQ_TAG('B', 'B', 'B', 'B'), 100, &s1));
	TQ_TRY(tq_fw_reserve(fw, TQ_TAG('C', 'C', 'C', 'C'), 7, &s2));
	TQ_TRY(tq_fw_put(fw, s1, b, 50));
	TQ_TRY(tq_fw_put(fw, s2, b, 7));
	TQ_TRY(tq_fw_put(fw, s1, b + 50, 50));
	free(a);
	return tq_fw_commit(fw);
}

static void
test_roundtrip(void)
{
	char p[256];
	struct tq_file f;
	const uint8_t *s;
	uint64_t len;

	path_in(p, sizeof(p), "a.tq");
	CHECK(write_sample(p, 1000) == TQ_OK);
	CHECK(tq_file_map(p, &f) == TQ_OK);
	CHECK(f.nsections == 3);
	CHECK(f.kind == TQ_FILE_QUANTIZER);
	s = tq_file_section(&f, TQ_TAG('A', 'A', 'A', 'A'), &len);
	CHECK(s != NULL && len == 1000);
	if (s != NULL)
		CHECK(s[999] == (uint8_t)(999 * 7 + 3));
	s = tq_file_section(&f, TQ_TAG('B', 'B', 'B', 'B'), &len);
	CHECK(s != NULL && len == 100 && s[99] == 0xab);
	CHECK(((uintptr_t)s % TQ_ALIGN) == 0);
	CHECK(tq_file_section(&f, TQ_TAG('Z', 'Z', 'Z', 'Z'), &len) == NULL);
	tq_file_unmap(&f);
	CHECK(tq_file_verify(p) == TQ_OK);
	CHECK(count_entries() == 1);	/* no temporary left behind */
}

/* Any change to the header or the table is caught at open. */
static void
test_corrupt_header_table(void)
{
	char p[256], q[256];
	size_t len;
	uint8_t *orig;
	const uint8_t vals[] = { 0x00, 0xff };
	int fails = 0, total = 0;

	path_in(p, sizeof(p), "b.tq");
	path_in(q, sizeof(q), "b-bad.tq");
	CHECK(write_sample(p, 333) == TQ_OK);
	orig = slurp(p, &len);
	CHECK(orig != NULL && len > 64 + 3 * 32);
	if (orig == NULL)
		return;
	for (size_t i = 0; i < 64 + 3 * 32; i++) {
		for (int v = 0; v < 4; v++) {
			uint8_t *b = malloc(len);
			struct tq_file f;
			uint8_t nv = v < 2 ? vals[v] :
			    (uint8_t)(orig[i] + (v == 2 ? 1 : -1));

			if (nv == orig[i]) {
				free(b);
				continue;
			}
			memcpy(b, orig, len);
			b[i] = nv;
			spit(q, b, len);
			total++;
			if (tq_file_map(q, &f) != TQ_OK)
				fails++;
			else
				tq_file_unmap(&f);
			free(b);
		}
	}
	CHECK(fails == total);
	printf("# corrupt header/table: %d of %d variants refused\n", fails,
	    total);
	free(orig);
	unlink(q);
}

static void
test_payload_and_truncation(void)
{
	char p[256], q[256];
	size_t len;
	uint8_t *orig;
	struct tq_file f;
	int bad = 0;

	path_in(p, sizeof(p), "c.tq");
	path_in(q, sizeof(q), "c-bad.tq");
	CHECK(write_sample(p, 5000) == TQ_OK);
	orig = slurp(p, &len);
	if (orig == NULL)
		return;
	/* A flipped payload byte opens, but fails verification. */
	orig[len - 200] ^= 0x10;
	spit(q, orig, len);
	CHECK(tq_file_map(q, &f) == TQ_OK);
	tq_file_unmap(&f);
	CHECK(tq_file_verify(q) == TQ_ERR_CHECKSUM);
	CHECK(strstr(tq_errdetail(), "section") != NULL);
	orig[len - 200] ^= 0x10;
	/* Every truncation is refused. */
	for (size_t n = 0; n < len; n++) {
		spit(q, orig, n);
		if (tq_file_map(q, &f) == TQ_OK) {
			bad++;
			tq_file_unmap(&f);
		}
	}
	CHECK(bad == 0);
	/* So is an extension. */
	orig = realloc(orig, len + 1);
	orig[len] = 0;
	spit(q, orig, len + 1);
	CHECK(tq_file_map(q, &f) == TQ_ERR_FORMAT);
	free(orig);
	unlink(q);
	/* Not a file at all. */
	CHECK(tq_file_map(dir, &f) != TQ_OK);
	path_in(q, sizeof(q), "missing.tq");
	CHECK(tq_file_map(q, &f) == TQ_ERR_IO && errno == ENOENT);
}

/* An aborted write leaves the old file untouched and no temporary. */
static void
test_atomic(void)
{
	char p[256];
	struct tq_filewriter *fw;
	size_t len1, len2;
	uint8_t *before, *after;
	int entries;

	path_in(p, sizeof(p), "d.tq");
	CHECK(write_sample(p, 100) == TQ_OK);
	entries = count_entries();
	before = slurp(p, &len1);
	CHECK(tq_fw_open(p, TQ_FILE_INDEX, 2, &fw) == TQ_OK);
	CHECK(tq_fw_begin(fw, TQ_TAG('X', 'X', 'X', 'X')) == TQ_OK);
	CHECK(tq_fw_write(fw, "hello", 5) == TQ_OK);
	CHECK(count_entries() == entries + 1);
	tq_fw_abort(fw);
	CHECK(count_entries() == entries);
	after = slurp(p, &len2);
	CHECK(before && after && len1 == len2 && memcmp(before, after, len1) == 0);
	free(before);
	free(after);
	/* An incomplete reserved section cannot be committed. */
	CHECK(tq_fw_open(p, TQ_FILE_INDEX, 2, &fw) == TQ_OK);
	{
		unsigned s;

		CHECK(tq_fw_reserve(fw, TQ_TAG('Y', 'Y', 'Y', 'Y'), 10, &s) ==
		    TQ_OK);
		CHECK(tq_fw_put(fw, s, "12345", 5) == TQ_OK);
		CHECK(tq_fw_put(fw, s, "1234567", 7) == TQ_ERR_ARG);
		CHECK(tq_fw_commit(fw) == TQ_ERR_ARG);
	}
	CHECK(count_entries() == entries);
	CHECK(tq_fw_open("-", TQ_FILE_INDEX, 2, &fw) == TQ_ERR_UNSUPPORTED);
}

/* The plain form of the conversion, to check the library's against. */
static float
ref_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
	uint32_t exp = (h >> 10) & 0x1f;
	uint32_t mant = h & 0x3ffu;
	uint32_t x;
	float f;

	if (exp == 0) {
		if (mant == 0) {
			x = sign;
		} else {
			exp = 127 - 15 + 1;
			while (!(mant & 0x400u)) {
				mant <<= 1;
				exp--;
			}
			x = sign | exp << 23 | (mant & 0x3ffu) << 13;
		}
	} else if (exp == 0x1f) {
		x = sign | 0x7f800000u | mant << 13;
	} else {
		x = sign | (exp + 127 - 15) << 23 | mant << 13;
	}
	memcpy(&f, &x, 4);
	return f;
}

static void
test_f16(void)
{
	int bad = 0;

	for (uint32_t h = 0; h < 65536; h++) {
		float f = tq_f16_to_f32((uint16_t)h);

		if (isnan(f))
			continue;
		if (tq_f32_to_f16(f) != h)
			bad++;
	}
	CHECK(bad == 0);
	bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float a = tq_f16_to_f32((uint16_t)h);
		float b = ref_f16_to_f32((uint16_t)h);

		if (memcmp(&a, &b, 4) != 0)
			bad++;
	}
	CHECK(bad == 0);	/* every half, NaN payloads included */
	CHECK(tq_f32_to_f16(1.0f) == 0x3c00);
	CHECK(tq_f32_to_f16(65520.0f) == 0x7c00);	/* rounds to inf */
	CHECK(tq_f32_to_f16(1e-8f) == 0);
	CHECK(fabsf(tq_f16_to_f32(tq_f32_to_f16(0.1f)) - 0.1f) < 1e-4f);
}

/*
 * tq_map_resident: a range whose ends are out of the page cache is not in
 * memory, one read whole is.  (Where the file system keeps its pages, as
 * tmpfs does, only the second is checked.)
 */
static void
test_resident(void)
{
	char path[512];
	long pg = sysconf(_SC_PAGESIZE);
	size_t len = 32 * (size_t)pg;
	uint8_t *b = malloc(len), *m;
	unsigned char v[32];
	volatile uint8_t sum = 0;
	int fd, all_out = 1;

	path_in(path, sizeof(path), "resident");
	memset(b, 7, len);
	spit(path, b, len);
	CHECK((fd = open(path, O_RDONLY)) >= 0);
	CHECK(fdatasync(fd) == 0 || errno == EINVAL);
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	CHECK(mincore(m, len, v) == 0);
	for (int i = 0; i < 32; i++)
		all_out &= !(v[i] & 1);
	if (all_out)
		CHECK(!tq_map_resident(m, m + len));
	else
		printf("# the page cache of %s stays: only the read case\n",
		    dir);
	for (size_t i = 0; i < len; i += (size_t)pg)
		sum += m[i];
	CHECK(tq_map_resident(m, m + len));
	CHECK(tq_map_resident(m + 5, m + 6));
	CHECK(!tq_map_resident(m + 6, m + 6));
	CHECK(!tq_map_resident(NULL, m));
	(void)sum;
	munmap(m, len);
	close(fd);
	free(b);
}

int
main(void)
{
	if (mkdtemp(dir) == NULL) {
		perror("mkdtemp");
		return 1;
	}
	test_roundtrip();
	test_corrupt_header_table();
	test_payload_and_truncation();
	test_atomic();
	test_f16();
	test_resident();
	{
		char cmd[300];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return unit_done();
}
