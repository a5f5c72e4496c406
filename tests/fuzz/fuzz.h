/*
 * fuzz.h - shared by the fuzz targets in tests/fuzz/.
 *
 * The library reads files by name and detects some formats by the name's
 * extension, so each input is handed to it as a file: the bytes go into a
 * memfd (no disk traffic per execution) and a symlink named with the
 * wanted extension points at /proc/<pid>/fd/<n>.  The symlinks live in a
 * private directory under $TMPDIR that is removed at exit.
 */
#ifndef TQ_FUZZ_H
#define TQ_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tq.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_dir[256];

static __attribute__((unused)) void
fuzz_cleanup(void)
{
	char cmd[300];

	if (fuzz_dir[0] != '\0') {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "fuzz: cannot remove %s\n", fuzz_dir);
	}
}

/*
 * Puts data[0..size) behind a file name ending in `ext` ("" for none) and
 * returns the name (static storage, one per distinct ext; at most 8).
 */
static __attribute__((unused)) const char *
fuzz_file(const char *ext, const uint8_t *data, size_t size)
{
	static struct { char ext[16]; int fd; char path[320]; } slot[8];
	static int nslot;
	const char *tmp;
	int i;

	if (fuzz_dir[0] == '\0') {
		tmp = getenv("TMPDIR");
		snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/tqfuzz.XXXXXX",
		    tmp != NULL && *tmp != '\0' ? tmp : "/tmp");
		if (mkdtemp(fuzz_dir) == NULL) {
			perror("fuzz: mkdtemp");
			abort();
		}
		atexit(fuzz_cleanup);
	}
	for (i = 0; i < nslot; i++)
		if (strcmp(slot[i].ext, ext) == 0)
			break;
	if (i == nslot) {
		char target[64];

		if (nslot == 8 || strlen(ext) >= sizeof(slot[0].ext))
			abort();
		slot[i].fd = memfd_create("tqfuzz", MFD_CLOEXEC);
		if (slot[i].fd == -1) {
			perror("fuzz: memfd_create");
			abort();
		}
		snprintf(slot[i].ext, sizeof(slot[i].ext), "%s", ext);
		snprintf(slot[i].path, sizeof(slot[i].path), "%s/in%d%s",
		    fuzz_dir, i, ext);
		snprintf(target, sizeof(target), "/proc/%d/fd/%d",
		    (int)getpid(), slot[i].fd);
		if (symlink(target, slot[i].path) == -1) {
			perror("fuzz: symlink");
			abort();
		}
		nslot++;
	}
	if (ftruncate(slot[i].fd, 0) == -1 ||
	    (size > 0 && pwrite(slot[i].fd, data, size, 0) != (ssize_t)size)) {
		perror("fuzz: write");
		abort();
	}
	return slot[i].path;
}

/*
 * Opens a vector reader on the file and reads it to the end in small
 * chunks, as the programs do, as floats or (when `as_int`) int32.
 */
static __attribute__((unused)) void
fuzz_drain_reader(const char *path, int as_int)
{
	struct tq_reader *r;
	size_t got, chunk = 7;
	void *buf;
	uint32_t dim;
	enum tq_status st;

	if (tq_reader_open(path, NULL, &r) != TQ_OK)
		return;
	dim = tq_reader_dim(r);
	if (dim == 0 || dim > TQ_MAX_DIM)
		abort();	/* the reader promises 1 .. TQ_MAX_DIM */
	(void)tq_reader_count(r);
	(void)tq_reader_format(r);
	as_int = as_int && tq_reader_is_integer(r);
	buf = malloc(chunk * dim * 4);
	if (buf == NULL)
		abort();
	do {
		if (as_int)
			st = tq_reader_read_i32(r, buf, chunk, &got);
		else
			st = tq_reader_read(r, buf, chunk, &got);
		if (got > chunk)
			abort();
	} while (st == TQ_OK && got > 0);
	free(buf);
	tq_reader_close(r);
}

/*
 * Reads every row of the vector file at path in chunks of 5 and walks the
 * labels of each read: a label for every row exactly when the reader says
 * it has labels, none past the rows read, none longer than a line.
 */
static __attribute__((unused)) void
fuzz_drain_labels(const char *path)
{
	struct tq_reader *r;
	size_t got, i, chunk = 5;
	float *buf;
	uint32_t dim;

	if (tq_reader_open(path, NULL, &r) != TQ_OK)
		return;
	dim = tq_reader_dim(r);
	if (dim == 0 || dim > TQ_MAX_DIM)
		abort();
	buf = malloc(chunk * dim * 4);
	if (buf == NULL)
		abort();
	while (tq_reader_read(r, buf, chunk, &got) == TQ_OK && got > 0) {
		if (got > chunk)
			abort();
		for (i = 0; i < got; i++) {
			const char *l = tq_reader_label(r, i);

			if ((l != NULL) != (tq_reader_has_labels(r) != 0))
				abort();
			if (l != NULL && strlen(l) > ((size_t)1 << 20))
				abort();
		}
		if (tq_reader_label(r, got) != NULL)
			abort();
	}
	free(buf);
	tq_reader_close(r);
}

#endif /* TQ_FUZZ_H */
