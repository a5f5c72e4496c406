/*
 * fuzz_text.c - the vector reader on text: numbers separated by blanks,
 * tabs or commas, with an optional label column and .vec header.  The
 * input is the file (no extension: the content decides, so the other
 * formats' bids are fuzzed too); every label of every read is walked.
 */
#include "fuzz.h"

static void
drain_labels(const char *path)
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("", data, size);

	drain_labels(path);
	return 0;
}
