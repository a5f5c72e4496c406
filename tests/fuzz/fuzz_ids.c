/*
 * fuzz_ids.c - the external id reader: text (one decimal per line) when
 * the first byte is even, raw little-endian uint64 (".u64") when odd; the
 * rest of the input is the file.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tq_ids_reader *r;
	uint64_t ids[5];
	size_t got;
	const char *path;

	if (size < 1)
		return 0;
	path = fuzz_file(data[0] & 1 ? ".u64" : ".ids", data + 1, size - 1);
	if (tq_ids_open(path, &r) != TQ_OK)
		return 0;
	while (tq_ids_read(r, ids, 5, &got) == TQ_OK && got > 0)
		if (got > 5)
			abort();
	tq_ids_close(r);
	return 0;
}
