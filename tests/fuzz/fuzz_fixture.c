/*
 * fuzz_fixture.c - the vector reader on a fixture file (u32 dim, u32 n, n*dim f32); the name has no extension.
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
