/* walk4.h -- the exact census of an OCaml 4.x major heap, read from
 * outside the process while it is stopped (heap/freeze.h).
 *
 * The heap is the runtime's list of chunks from `caml_heap_start`, each
 * preceded by its heap_chunk_head {block, alloc, size (bytes), next, ...;
 * 48 bytes in 4.12 and 4.13, 56 in 4.14}
 * and holding blocks back to back, each a header word (wosize << 10 |
 * colour << 8 | tag) and its fields (4.12.1 and 4.14.2
 * runtime/caml/major_gc.h, mlvalues.h, gc.h).  Blocks are classified
 * exactly as `Gc.stat` does (4.14.2 runtime/gc_ctrl.c heap_stats): blue is
 * free, a white header of wosize 0 a fragment, a white block at or past
 * `caml_gc_sweep_hp` during the sweep phase free (garbage not yet swept),
 * every other block live -- so "live" includes unreachable blocks the
 * collector has not reclaimed yet, as in Gc.stat.  Words here are words of
 * 8 bytes, headers included (Whsize).
 */
#ifndef CH_WALK4_H
#define CH_WALK4_H

#include <stdint.h>
#include <sys/types.h>

#include "heap/hindex.h"
#include "target/target.h"

/* Size classes of live blocks, by words with the header: 1, 2, 3-4, 5-8,
 * ..., 2^(k-1)+1 .. 2^k, the last one open-ended. */
#define WALK4_SIZE_CLASSES 24
#define WALK4_MAX_CUSTOM 64

struct walk4_count {
	uint64_t blocks, words;
};

struct walk4_custom {
	uint64_t ops;          /* struct custom_operations * in the target */
	char identifier[48];   /* its `identifier` string ("_j", "_bigarr02", ...), "?" if unreadable */
	struct walk4_count n;
};

struct walk4_census {
	/* as Gc.stat: words with headers */
	uint64_t heap_words, heap_chunks, live_words, live_blocks, free_words, free_blocks, largest_free,
		fragments;
	uint64_t minor_words;  /* the minor heap's allocated words (young_alloc_end - young_ptr): not walked */
	int gc_phase;          /* caml_gc_phase: 0 mark, 1 clean, 2 sweep, 3 idle */
	/* the runtime's own counters (Caml_state->stat_heap_wsz, ->stat_heap_chunks), words and chunks */
	uint64_t rt_heap_wsz, rt_heap_chunks;
	struct walk4_count by_tag[256];
	struct walk4_count by_size[WALK4_SIZE_CLASSES];
	struct walk4_custom custom[WALK4_MAX_CUSTOM];
	unsigned ncustom;
	uint64_t custom_other_blocks; /* custom blocks of more operations than WALK4_MAX_CUSTOM */
	uint64_t bytes_read;   /* of the target's memory */
	double walk_s;         /* the walk, seconds (the target stopped) */
	int complete;          /* 1: every chunk walked; 0: stopped at the deadline */
};

/* Walk the major heap of the stopped 4.x target t (t->rt.major == 4):
 * counts into c; with hx (else NULL), every live block indexed there
 * (hx_finish done), and with `minor` the minor heap's blocks too, from
 * Caml_state's young_ptr (exact only if no thread runs OCaml code, which
 * keeps young_ptr in r15: hx->minor_lo set if they were indexed).  Stops early (c->complete 0, -ETIME) once CLOCK_MONOTONIC
 * passes `deadline` (seconds).  Reads the target's memory only
 * (process_vm_readv), 256 KiB at a time.  Returns 0, or -errno with err
 * set: -ENOTSUP not a 4.x runtime or the symbols it needs are missing
 * (.symtab stripped), -EFAULT memory unreadable, -EPROTO the heap is not
 * as described above (a block running past its chunk's end, more chunks
 * than the runtime counts). */
int walk4_census(const struct target *t, double deadline, struct heap_index *hx, bool minor, struct walk4_census *c,
		 char *err, size_t errlen);

/* The size class of a block of `whsize` words with its header. */
unsigned walk4_size_class(uint64_t whsize);

#endif
