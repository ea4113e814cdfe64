/* hindex.c -- the live blocks of a major heap, a bit a word (hindex.h). */
#include "heap/hindex.h"

/* every x86-64 machine with the BPF camlheap needs has POPCNT; without
 * it GCC calls libgcc's __popcountdi2 (measured: 3 % of a trace) */
#pragma GCC target("popcnt")

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define RANK_WORDS 512  /* heap words per running count: 8 bitmap words */

int hx_add_chunk(struct heap_index *hx, uint64_t base, uint64_t end)
{
	struct hx_chunk *c;
	uint64_t words = (end - base) / 8;

	if (hx->nchunks == hx->cap) {
		size_t cap = hx->cap ? 2 * hx->cap : 16;
		struct hx_chunk *n = realloc(hx->chunks, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		hx->chunks = n;
		hx->cap = cap;
	}
	c = &hx->chunks[hx->nchunks];
	memset(c, 0, sizeof(*c));
	c->base = base;
	c->end = end;
	c->starts = calloc(words / 64 + 1, sizeof(uint64_t));
	c->rank = calloc(words / RANK_WORDS + 2, sizeof(uint32_t));
	if (!c->starts || !c->rank) {
		free(c->starts);
		free(c->rank);
		return -ENOMEM;
	}
	hx->nchunks++;
	return 0;
}

static int cmp_chunk(const void *a, const void *b)
{
	const struct hx_chunk *x = a, *y = b;

	return x->base < y->base ? -1 : x->base > y->base;
}

int hx_finish(struct heap_index *hx)
{
	qsort(hx->chunks, hx->nchunks, sizeof(hx->chunks[0]), cmp_chunk);
	hx->nblocks = 0;
	for (size_t k = 0; k < hx->nchunks; k++) {
		struct hx_chunk *c = &hx->chunks[k];
		uint64_t words = (c->end - c->base) / 8, n = 0;

		c->first_block = hx->nblocks;
		for (uint64_t w = 0; w <= words / 64; w++) {
			if (w % (RANK_WORDS / 64) == 0)
				c->rank[w / (RANK_WORDS / 64)] = (uint32_t)n;
			n += (uint64_t)__builtin_popcountll(c->starts[w]);
		}
		hx->nblocks += n;
	}
	if (hx->nchunks) {
		hx->lo = hx->chunks[0].base;
		hx->hi = hx->chunks[hx->nchunks - 1].end;
	}
	hx->state = calloc(hx->nblocks ? hx->nblocks : 1, sizeof(*hx->state));
	return hx->state ? 0 : -ENOMEM;
}

static const struct hx_chunk *chunk_of(const struct heap_index *hx, uint64_t a)
{
	size_t lo = 0, hi = hx->nchunks;

	if (a < hx->lo || a >= hx->hi)
		return NULL;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (a < hx->chunks[mid].base)
			hi = mid;
		else if (a >= hx->chunks[mid].end)
			lo = mid + 1;
		else
			return &hx->chunks[mid];
	}
	return NULL;
}

bool hx_is_block(const struct heap_index *hx, uint64_t v, const struct hx_chunk **chunk)
{
	const struct hx_chunk *c;
	uint64_t i;

	if (v & 7)
		return false;
	c = chunk_of(hx, v - 8);
	if (!c)
		return false;
	i = (v - 8 - c->base) / 8;
	*chunk = c;
	return c->starts[i / 64] & (1ull << (i % 64));
}

bool hx_in_heap(const struct heap_index *hx, uint64_t v)
{
	return chunk_of(hx, v) != NULL;
}

int64_t hx_block(const struct heap_index *hx, uint64_t v, const struct hx_chunk **chunk)
{
	const struct hx_chunk *c;
	uint64_t i, w, n;

	if (v & 7)
		return -1;
	c = chunk_of(hx, v - 8);
	if (!c)
		return -1;
	i = (v - 8 - c->base) / 8;
	w = i / 64;
	if (!(c->starts[w] & (1ull << (i % 64))))
		return -1;
	n = c->rank[i / RANK_WORDS];
	for (uint64_t k = (i / RANK_WORDS) * (RANK_WORDS / 64); k < w; k++)
		n += (uint64_t)__builtin_popcountll(c->starts[k]);
	n += (uint64_t)__builtin_popcountll(c->starts[w] & ((1ull << (i % 64)) - 1));
	if (chunk)
		*chunk = c;
	return (int64_t)(c->first_block + n);
}

uint64_t hx_bytes(const struct heap_index *hx)
{
	uint64_t b = hx->nblocks * sizeof(*hx->state) + hx->cap * sizeof(struct hx_chunk);

	for (size_t k = 0; k < hx->nchunks; k++) {
		uint64_t words = (hx->chunks[k].end - hx->chunks[k].base) / 8;

		b += (words / 64 + 1) * 8 + (words / RANK_WORDS + 2) * 4;
	}
	return b;
}

void hx_free(struct heap_index *hx)
{
	for (size_t k = 0; k < hx->nchunks; k++) {
		free(hx->chunks[k].starts);
		free(hx->chunks[k].rank);
	}
	free(hx->chunks);
	free(hx->state);
	memset(hx, 0, sizeof(*hx));
}

uint64_t hx_address(const struct heap_index *hx, uint64_t n)
{
	size_t lo = 0, hi = hx->nchunks;
	const struct hx_chunk *c;
	uint64_t words, nrank, k, rlo, rhi;

	if (n >= hx->nblocks)
		return 0;
	/* the last chunk whose first block is at most n */
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (hx->chunks[mid].first_block <= n)
			lo = mid;
		else
			hi = mid;
	}
	c = &hx->chunks[lo];
	n -= c->first_block;
	words = (c->end - c->base) / 8;
	nrank = words / RANK_WORDS + 1;
	/* the last running count at most n, then its bitmap words */
	rlo = 0;
	rhi = nrank;
	while (rhi - rlo > 1) {
		uint64_t mid = (rlo + rhi) / 2;

		if (c->rank[mid] <= n)
			rlo = mid;
		else
			rhi = mid;
	}
	n -= c->rank[rlo];
	for (k = rlo * (RANK_WORDS / 64); k <= words / 64; k++) {
		uint64_t bits = c->starts[k], cnt = (uint64_t)__builtin_popcountll(bits);

		if (n < cnt) {
			while (n--)
				bits &= bits - 1;
			return c->base + 8 * (64 * k + (uint64_t)__builtin_ctzll(bits)) + 8;
		}
		n -= cnt;
	}
	return 0;
}
