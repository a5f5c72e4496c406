/*
 * fuzz_vecs.c - the vector reader on .fvecs, .ivecs and .bvecs files.
 * The first byte of the input picks the extension (mod 3); the rest is the
 * file.  Also tried with a ".zst" suffix, which must change nothing for
 * plain input.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const ext[] = { ".fvecs", ".ivecs", ".bvecs" };
	static const char *const extz[] = { ".fvecs.zst", ".ivecs.zst",
	    ".bvecs.zst" };
	const char *path;
	unsigned k;

	if (size < 1)
		return 0;
	k = data[0] % 3;
	path = fuzz_file(ext[k], data + 1, size - 1);
	fuzz_drain_reader(path, 0);
	fuzz_drain_reader(path, 1);
	path = fuzz_file(extz[k], data + 1, size - 1);
	fuzz_drain_reader(path, 0);
	return 0;
}
