/*
 * fuzz_idx.c - the vector reader on an IDX file (idx3-ubyte, MNIST); the name has no extension.
 * Reads the whole input as float32, then again as int32.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("", data, size);

	fuzz_drain_reader(path, 0);
	fuzz_drain_reader(path, 1);
	return 0;
}
