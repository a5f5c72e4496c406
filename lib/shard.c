/*
 * shard.c - which rows of a corpus make shard i of n (tq-build --shard).
 *
 * Shards are contiguous ranges so that each is read sequentially from one
 * place in the file, and every shard of every machine computes the same
 * boundaries from the row count alone: no shard needs another.
 */
#include "internal.h"

enum tq_status
tq_shard_rows(uint64_t rows, uint32_t i, uint32_t n, uint64_t *first,
    uint64_t *count)
{
	uint64_t a, b;

	*first = 0;
	*count = 0;
	if (n == 0 || i >= n)
		return tq_fail(TQ_ERR_ARG, "shard %lu of %lu does not exist",
		    (unsigned long)i, (unsigned long)n);
	/*
	 * floor(i * rows / n) without a 96-bit product: i * (rows % n) is
	 * below 2^64 since both factors are below 2^32.
	 */
	a = (uint64_t)i * (rows / n) + (uint64_t)i * (rows % n) / n;
	b = (uint64_t)(i + 1) * (rows / n) + (uint64_t)(i + 1) * (rows % n) / n;
	*first = a;
	*count = b - a;
	return TQ_OK;
}
