/*
 * fuzz_index.c - an index file: tq_index_open, tq_file_info,
 * tq_file_verify, then a search of 2 queries with k = min(3, n), re-ranked
 * (oversample 2, then auto) when the index holds originals; with labels,
 * the label of each result and the row (and vector) that label finds.
 * tq_quantizer_load must also accept or refuse it without harm.
 */
#include <math.h>

#include "fuzz.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(".tqi", data, size);
	struct tq_file_info info;
	struct tq_search_params sp;
	struct tq_quantizer *q;
	struct tq_index *ix;
	uint64_t n, ids[6];
	float *queries, scores[6];
	uint32_t d, j;

	(void)tq_file_info(path, &info);
	(void)tq_file_verify(path);
	if (tq_quantizer_load(path, &q) == TQ_OK)
		tq_quantizer_free(q);
	if (tq_index_open(path, &ix) != TQ_OK)
		return 0;
	d = tq_quantizer_dim(tq_index_quantizer(ix));
	n = tq_index_count(ix);
	if (d == 0 || d > TQ_MAX_DIM)
		abort();
	queries = malloc(2 * (size_t)d * sizeof(float));
	if (queries == NULL)
		abort();
	for (j = 0; j < 2 * d; j++)
		queries[j] = cosf((float)j * 0.7f);
	tq_search_params_default(&sp);
	sp.k = n == 0 ? 1 : n < 3 ? (uint32_t)n : 3;
	sp.oversample = tq_index_originals(ix) != TQ_ORIG_NONE ? 2.0f : 1.0f;
	sp.threads = 1;
	if (tq_search(ix, queries, 2, &sp, ids, scores) == TQ_OK &&
	    tq_index_has_labels(ix)) {
		/* Each result's label, and the row that label finds. */
		for (j = 0; j < 2 * sp.k; j++) {
			const char *lab;
			size_t len;
			uint64_t id;
			int found;

			if (ids[j] == UINT64_MAX || tq_index_label(ix, ids[j],
			    &lab, &len) != TQ_OK || lab == NULL)
				continue;
			(void)tq_index_like(ix, lab, len, &found, &id,
			    queries);
		}
	}
	if (tq_index_has_labels(ix)) {
		uint64_t id;
		int found;

		(void)tq_index_like(ix, "w1", 2, &found, &id, queries);
		(void)tq_index_like(ix, "", 0, &found, &id, NULL);
	}
	/* The error-bounded re-rank reads WDTH, whatever its values. */
	if (tq_index_originals(ix) != TQ_ORIG_NONE) {
		sp.oversample = TQ_OVERSAMPLE_AUTO;
		(void)tq_search(ix, queries, 2, &sp, ids, scores);
	}
	free(queries);
	tq_index_close(ix);
	return 0;
}
