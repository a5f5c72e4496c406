/*
 * fuzz_text.c - the vector reader on text: numbers separated by blanks,
 * tabs or commas, with an optional label column and .vec header.  The
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
