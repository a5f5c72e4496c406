/*
 * fuzz_npy.c - the vector reader on a NumPy .npy file.
 * Reads the whole input as float32, then again as int32.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(".npy", data, size);

	fuzz_drain_reader(path, 0);
	fuzz_drain_reader(path, 1);
	return 0;
}
