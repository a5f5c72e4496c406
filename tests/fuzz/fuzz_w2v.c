/*
 * fuzz_w2v.c - the vector reader on word2vec binary files ("n dim", then
 * per row a word, a space and dim float32, maybe a newline).  The
 * input is the file (no extension: the content decides, so the other
 * formats' bids are fuzzed too); every label of every read is walked.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("", data, size);

	fuzz_drain_labels(path);
	return 0;
}
