/*
 * fuzz_mutate.c - changes of an index file in place: a delete of ids 1
 * and 2, then an append of three rows.  Whatever the input, a change that
 * reports success must leave a file that opens again, with the rows it
 * says; one that fails must not crash.  The file is a real one (a commit
 * locks, truncates and syncs it), rewritten for every input.
 */
#include <math.h>

#include "fuzz.h"

static void
put_file(const char *path, const void *p, size_t n)
{
	FILE *fp = fopen(path, "wb");

	if (fp == NULL || (n > 0 && fwrite(p, 1, n, fp) != n) ||
	    fclose(fp) != 0)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[320], vpath[320];
	uint64_t del[2] = { 1, 2 }, n0;
	struct tq_index *ix;
	struct tq_reader *r;
	struct tq_file_info fi;
	uint32_t d, cop;
	float *rows;

	if (path[0] == '\0') {
		(void)fuzz_file("", data, 0);	/* makes fuzz_dir */
		snprintf(path, sizeof(path), "%s/m.tqi", fuzz_dir);
		snprintf(vpath, sizeof(vpath), "%s/v.bin", fuzz_dir);
	}
	put_file(path, data, size);
	if (tq_index_delete(path, del, 2, NULL, path, NULL) == TQ_OK) {
		if (tq_index_open(path, &ix) != TQ_OK)
			abort();
		tq_index_close(ix);
	}
	if (tq_index_open(path, &ix) != TQ_OK)
		return 0;
	d = tq_quantizer_dim(tq_index_quantizer(ix));
	n0 = tq_index_live(ix);
	tq_index_close(ix);
	/* With copies (--dups) a vector is 1 to cop rows. */
	if (tq_file_info(path, &fi) != TQ_OK)
		abort();
	cop = fi.dups > 1 ? fi.dups : 1;
	if (d > 4096)
		return 0;
	if ((rows = malloc(8 + 3 * (size_t)d * sizeof(float))) == NULL)
		abort();
	memcpy(rows, &d, 4);
	memcpy((uint8_t *)rows + 4, &(uint32_t){ 3 }, 4);
	for (size_t j = 0; j < 3 * (size_t)d; j++) {
		float v = sinf((float)j);

		memcpy((uint8_t *)rows + 8 + 4 * j, &v, 4);
	}
	put_file(vpath, rows, 8 + 3 * (size_t)d * sizeof(float));
	free(rows);
	if (tq_reader_open(vpath, NULL, &r) != TQ_OK)
		abort();
	if (tq_index_append(path, r, NULL, NULL, path) == TQ_OK) {
		if (tq_index_open(path, &ix) != TQ_OK)
			abort();
		if (tq_index_live(ix) < n0 + 3 ||
		    tq_index_live(ix) > n0 + 3 * (uint64_t)cop)
			abort();
		tq_index_close(ix);
	}
	tq_reader_close(r);
	return 0;
}
