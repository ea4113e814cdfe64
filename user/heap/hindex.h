/* hindex.h -- which words of a stopped program's major heap start a live
 * block, and a byte of state for each such block: the heap's bitmap, not
 * a copy of it (heap/walk4.h fills it, heap/trace4.h labels the blocks).
 *
 * Per chunk, one bit per heap word (set at a live block's header), a
 * running count every 512 words (32 bits), and two bytes per live block:
 * about 1 + 1/16 + 16 / (mean block size in words) bits per heap word
 * (5.5 for ocamlopt's heap of 3.6-word blocks, i.e. heap size / 12).
 */
#ifndef CH_HINDEX_H
#define CH_HINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct hx_chunk {
	uint64_t base, end;    /* [base, end): the chunk's blocks, target addresses */
	uint64_t *starts;      /* bit i: a live block's header at base + 8 i */
	uint32_t *rank;        /* rank[k]: blocks of the chunk before word 512 k */
	uint64_t first_block;  /* the chunk's first block's number in the heap */
};

struct heap_index {
	struct hx_chunk *chunks; /* sorted by address once hx_finish has run */
	size_t nchunks, cap;
	uint64_t nblocks;
	uint16_t *state;         /* two bytes per live block, by number (zeroed by hx_finish) */
	uint64_t lo, hi;         /* the lowest chunk's base, the highest chunk's end */
	uint64_t minor_lo, minor_hi; /* the minor heap's allocated part, indexed as a chunk; 0, 0 if not */
};

/* Add chunk [base, end) (bytes, 8-aligned).  Returns 0 or -ENOMEM. */
int hx_add_chunk(struct heap_index *hx, uint64_t base, uint64_t end);

/* Mark the live block whose header is at `hp` in the chunk added last. */
static inline void hx_set_start(struct heap_index *hx, uint64_t hp)
{
	struct hx_chunk *c = &hx->chunks[hx->nchunks - 1];
	uint64_t i = (hp - c->base) / 8;

	c->starts[i / 64] |= 1ull << (i % 64);
}

/* Sort the chunks, count the blocks, allocate the state bytes.  Returns
 * 0 or -ENOMEM. */
int hx_finish(struct heap_index *hx);

/* The number of the live block whose first field is at `v` (a value
 * pointing to it: its header at v - 8), or -1 if v is not that in the
 * indexed heap.  With chunk (else NULL): its chunk. */
int64_t hx_block(const struct heap_index *hx, uint64_t v, const struct hx_chunk **chunk);

/* The value (address of the first field) of live block number n: the
 * inverse of hx_block.  0 if there is no such block. */
uint64_t hx_address(const struct heap_index *hx, uint64_t n);

/* Is `v` a value pointing to a live block (hx_block(hx, v, chunk) >= 0,
 * without counting its number)? */
bool hx_is_block(const struct heap_index *hx, uint64_t v, const struct hx_chunk **chunk);

/* Is `v` inside a chunk (any word of it)? */
bool hx_in_heap(const struct heap_index *hx, uint64_t v);

/* Bytes of camlheap's memory the index takes. */
uint64_t hx_bytes(const struct heap_index *hx);

void hx_free(struct heap_index *hx);

#endif
