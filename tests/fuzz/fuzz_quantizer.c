/*
 * fuzz_quantizer.c - tq_quantizer_load on a quantizer file (or an index,
 * which holds one), then encode and decode one vector with it.
 */
#include <math.h>

#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tq_quantizer *q;
	uint8_t *codes;
	float *x, *y, f[TQ_NFACTORS];
	uint32_t d, j;

	if (tq_quantizer_load(fuzz_file(".tq", data, size), &q) != TQ_OK)
		return 0;
	d = tq_quantizer_dim(q);
	if (d == 0 || d > TQ_MAX_DIM || tq_quantizer_bits(q) < 1 ||
	    tq_quantizer_bits(q) > 4)
		abort();	/* load must have refused it */
	(void)tq_quantizer_fingerprint(q);
	x = malloc(d * sizeof(float));
	y = malloc(d * sizeof(float));
	codes = malloc(tq_code_bytes(q));
	if (x == NULL || y == NULL || codes == NULL)
		abort();
	for (j = 0; j < d; j++)
		x[j] = sinf((float)j + 0.5f);
	if (tq_encode(q, x, 1, codes, f) == TQ_OK)
		(void)tq_decode(q, codes, f, 1, y);
	free(codes);
	free(y);
	free(x);
	tq_quantizer_free(q);
	return 0;
}
