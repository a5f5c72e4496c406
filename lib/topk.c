/*
 * topk.c - bounded top-k selection of (key, id) pairs.
 *
 * Higher keys are better; among equal keys the smaller id is better.  This
 * is a strict total order on distinct (key, id) pairs, so the k best of a
 * set do not depend on the order in which the pairs arrive: heaps filled
 * by several threads over parts of a set and then merged give exactly the
 * heap of the whole set.  A NaN key is treated as -infinity.
 *
 * The heap keeps its worst element at the root (index 0), so deciding
 * whether a candidate enters costs one comparison with key[0] once the heap
 * is full; thr and thr_id repeat it, and search.c tests candidates inline
 * against them.
 *
 * A lazy top-k appends instead, to room for k + max(k, 32) entries, and
 * when that is full keeps the k best (select_best), the worst of which
 * becomes thr.  A heap pays a sift of about log2 k levels, each a load
 * its next step waits for, on every entry it takes; the lazy one pays a
 * store, and a selection over about 2k entries for every k taken.  It
 * takes more than a heap would, as its threshold rises only at a
 * selection: about 1.4 times as many (a stream in random order), 455
 * against 333 a 1-bit single query over Fashion-MNIST (k = 40), where
 * the selections cost what the sifts did.  With more candidates it
 * gains: a GloVe-100 query with --oversample auto (k = 160), whose sifts
 * were 11 % of its time, scanned in 696 us instead of 740-754 (flat;
 * IVF at 96 probes 344 instead of 365; --oversample 2, k = 20, 528
 * instead of 555).  Its k best, once settled, are the heap's: the order
 * is strict.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Is (ka, ia) worse than (kb, ib)? */
static inline int
worse(float ka, uint64_t ia, float kb, uint64_t ib)
{
	return ka < kb || (ka == kb && ia > ib);
}

/* A lazy top-k has room for k + max(k, TOPK_SLACK_MIN) entries. */
#define TOPK_SLACK_MIN 32u

static enum tq_status
topk_alloc(struct tq_topk *h, uint32_t k, uint32_t cap)
{
	h->k = k;
	h->cap = cap;
	h->len = 0;
	h->full = 0;
	h->thr = -INFINITY;
	h->thr_id = 0;
	h->key = tq_mallocarray(cap ? cap : 1, sizeof(*h->key));
	h->id = tq_mallocarray(cap ? cap : 1, sizeof(*h->id));
	if (h->key == NULL || h->id == NULL) {
		tq_topk_free(h);
		return tq_fail(TQ_ERR_NOMEM, "top-k of %u entries", cap);
	}
	return TQ_OK;
}

enum tq_status
tq_topk_init(struct tq_topk *h, uint32_t k)
{
	return topk_alloc(h, k, k);
}

enum tq_status
tq_topk_init_lazy(struct tq_topk *h, uint32_t k)
{
	if (k == 0)
		return topk_alloc(h, k, k);
	return topk_alloc(h, k, k + (k > TOPK_SLACK_MIN ? k : TOPK_SLACK_MIN));
}

void
tq_topk_free(struct tq_topk *h)
{
	if (h == NULL)
		return;
	free(h->key);
	free(h->id);
	h->key = NULL;
	h->id = NULL;
	h->k = h->len = h->cap = 0;
	h->full = 0;
}

void
tq_topk_reset(struct tq_topk *h)
{
	h->len = 0;
	h->full = 0;
	h->thr = -INFINITY;
	h->thr_id = 0;
}

/*
 * Restores the heap below position i in a heap of n entries.  Which child
 * is the worse is a coin toss for the branch predictor: chosen by
 * arithmetic instead, the scan of a single GloVe-100 IVF query (96
 * probes) took 317 us instead of 350 with --oversample auto (a heap of
 * 160) and 271 instead of 315 with --oversample 2 (medians of 3000).
 */
static void
sift_down(float *key, uint64_t *id, uint32_t n, uint32_t i)
{
	float k = key[i];
	uint64_t v = id[i];
	uint32_t c;

	while ((c = 2 * i + 1) < n) {
		uint32_t r = c + 1;

		if (r < n)
			c += (uint32_t)((key[r] < key[c]) | ((key[r] ==
			    key[c]) & (id[r] > id[c])));
		if (!worse(key[c], id[c], k, v))
			break;
		key[i] = key[c];
		id[i] = id[c];
		i = c;
	}
	key[i] = k;
	id[i] = v;
}

/*
 * Sorts the heap key/id[0 .. n) best first: the root is the worst, so
 * moving it to the end of the shrinking heap leaves the array best first.
 */
static void
heapsort_best(float *key, uint64_t *id, uint32_t n)
{
	while (n > 1) {
		float k = key[0];
		uint64_t v = id[0];

		n--;
		key[0] = key[n];
		id[0] = id[n];
		key[n] = k;
		id[n] = v;
		sift_down(key, id, n, 0);
	}
}

/* Sorts key/id[0 .. n), in no order before, best first. */
static void
sort_best(float *key, uint64_t *id, uint32_t n)
{
	for (uint32_t i = n / 2; i-- > 0;)
		sift_down(key, id, n, i);
	heapsort_best(key, id, n);
}

static inline void
swap_at(float *key, uint64_t *id, uint32_t a, uint32_t b)
{
	float k = key[a];
	uint64_t v = id[a];

	key[a] = key[b];
	id[a] = id[b];
	key[b] = k;
	id[b] = v;
}

/* 1 if (x, v) is better than (pk, pv), else 0, without a branch. */
static inline uint32_t
better_than(float x, uint64_t v, float pk, uint64_t pv)
{
	return (uint32_t)(x > pk) | ((uint32_t)(x == pk) & (uint32_t)(v < pv));
}

/* Most entries a partition of select_best moves through its buffer. */
#define SELECT_BUF 512u

/*
 * Leaves the k best of key/id[0 .. n) (k < n) in [0, k), in no order:
 * quickselect on the median of three.  [0, lo) holds entries better
 * than all of [lo, n), and the k-th best lies in [lo, hi).  The
 * partition has no branch on the comparison, which a branch predictor
 * could only guess.  Up to SELECT_BUF entries, each is stored both at
 * the front's boundary and at the end of a buffer of worse ones, and
 * the boundary and the buffer's end move on by the comparison's value;
 * the buffer follows the pivot after.  Swapped in place instead with
 * the first worse one, each entry's load waited on the store of the one
 * before (the same slot, when none was better): on GloVe-100 with
 * --oversample auto (k = 160, selections of 316) the selections were
 * 11.1-11.4 % of the batch's perf samples, and 8.9-9.2 % this way;
 * 1-bit Fashion-MNIST batches, 175 and 210 samples against 108 and
 * 179.  Longer ranges are partitioned in place.  An order that defeats
 * the pivot again and again ends in a sort of what is left, so the cost
 * stays O(n log n).
 */
static void
select_best(float *key, uint64_t *id, uint32_t n, uint32_t k)
{
	float bk[SELECT_BUF];
	uint64_t bi[SELECT_BUF];
	uint32_t lo = 0, hi = n, depth = 0, i, p, m;

	while (hi - lo > 1) {
		float pk;
		uint64_t pv;

		if (++depth > 64) {
			sort_best(key + lo, id + lo, hi - lo);
			return;
		}
		/* The median of lo, m and hi - 1 to hi - 1: the pivot. */
		m = lo + (hi - lo) / 2;
		if (worse(key[lo], id[lo], key[m], id[m]))
			swap_at(key, id, m, lo);
		if (worse(key[lo], id[lo], key[hi - 1], id[hi - 1]))
			swap_at(key, id, hi - 1, lo);
		if (worse(key[hi - 1], id[hi - 1], key[m], id[m]))
			swap_at(key, id, m, hi - 1);
		pk = key[hi - 1];
		pv = id[hi - 1];
		if (hi - 1 - lo <= SELECT_BUF) {
			uint32_t o = 0;

			/*
			 * Every entry is written both to the front, which
			 * keeps it if better, and to the buffer, which
			 * keeps it if worse: no load waits on a store.
			 */
			for (p = lo, i = lo; i < hi - 1; i++) {
				float x = key[i];
				uint64_t v = id[i];
				uint32_t b = better_than(x, v, pk, pv);

				key[p] = x;
				id[p] = v;
				bk[o] = x;
				bi[o] = v;
				p += b;
				o += 1 - b;
			}
			key[p] = pk;
			id[p] = pv;
			memcpy(key + p + 1, bk, o * sizeof(*key));
			memcpy(id + p + 1, bi, o * sizeof(*id));
		} else {
			for (p = lo, i = lo; i < hi - 1; i++) {
				float x = key[i];
				uint64_t v = id[i];
				uint32_t b = better_than(x, v, pk, pv);

				key[i] = key[p];
				id[i] = id[p];
				key[p] = x;
				id[p] = v;
				p += b;
			}
			swap_at(key, id, p, hi - 1);
		}
		/* [lo, p) better than the pivot at p, (p, hi) worse. */
		if (p == k || p + 1 == k)
			return;
		if (p > k)
			hi = p;
		else
			lo = p + 1;
	}
}

/*
 * A lazy top-k of more than k entries keeps its k best; the worst of them
 * becomes thr.
 */
static void
compact(struct tq_topk *h)
{
	uint32_t w = 0;

	select_best(h->key, h->id, h->len, h->k);
	h->len = h->k;
	for (uint32_t e = 1; e < h->len; e++)
		w = worse(h->key[e], h->id[e], h->key[w], h->id[w]) ? e : w;
	h->full = 1;
	h->thr = h->key[w];
	h->thr_id = h->id[w];
}

int
tq_topk_admits(const struct tq_topk *h, float key, uint64_t id)
{
	if (isnan(key))
		key = -INFINITY;
	if (h->k == 0)
		return 0;
	return !h->full || worse(h->thr, h->thr_id, key, id);
}

void
tq_topk_push(struct tq_topk *h, float key, uint64_t id)
{
	uint32_t i;

	if (isnan(key))
		key = -INFINITY;
	if (h->cap > h->k) {
		if (h->full && !worse(h->thr, h->thr_id, key, id))
			return;
		h->key[h->len] = key;
		h->id[h->len] = id;
		if (++h->len == h->cap)
			compact(h);
		return;
	}
	if (h->len < h->k) {
		/* Sift up from the new leaf. */
		i = h->len++;
		while (i > 0) {
			uint32_t p = (i - 1) / 2;

			if (!worse(key, id, h->key[p], h->id[p]))
				break;
			h->key[i] = h->key[p];
			h->id[i] = h->id[p];
			i = p;
		}
		h->key[i] = key;
		h->id[i] = id;
	} else {
		if (h->k == 0 || !worse(h->key[0], h->id[0], key, id))
			return;
		h->key[0] = key;
		h->id[0] = id;
		sift_down(h->key, h->id, h->len, 0);
	}
	if (h->len == h->k) {
		h->full = 1;
		h->thr = h->key[0];
		h->thr_id = h->id[0];
	}
}

void
tq_topk_settle(struct tq_topk *h)
{
	if (h->cap > h->k && h->len > h->k)
		compact(h);
}

void
tq_topk_sort(struct tq_topk *h)
{
	if (h->cap > h->k) {
		tq_topk_settle(h);
		sort_best(h->key, h->id, h->len);
		return;
	}
	heapsort_best(h->key, h->id, h->len);
}
