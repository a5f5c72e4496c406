/*
 * fuzz_codes.c - a code stream as tq-encode writes it: tq_codes_check of
 * the 48-byte header against a fixed quantizer (dim 8, 4 bits, l2, seed
 * 42, fitted without data: "tq-fit -d 8 -o q.tq"), then tq_decode of the
 * records that follow, as "tq-encode --decode" does.
 */
#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct tq_quantizer *q;
	struct tq_fit_params p;
	size_t rec, cb, i, avail;
	uint64_t n;
	float f[TQ_NFACTORS], out[8];

	if (q == NULL) {
		tq_fit_params_default(&p);
		p.dim = 8;
		if (tq_quantizer_fit(&p, NULL, &q) != TQ_OK)
			abort();
	}
	if (size < TQ_CODES_HEADER ||
	    tq_codes_check(q, data, &n) != TQ_OK)
		return 0;
	rec = tq_codes_record_bytes(q);
	cb = tq_code_bytes(q);
	avail = (size - TQ_CODES_HEADER) / rec;
	if (n != TQ_COUNT_UNKNOWN && n < avail)
		avail = (size_t)n;
	for (i = 0; i < avail; i++) {
		const uint8_t *r = data + TQ_CODES_HEADER + i * rec;

		memcpy(f, r + cb, sizeof(f));
		(void)tq_decode(q, r, f, 1, out);
	}
	return 0;
}
