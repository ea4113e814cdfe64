/* recording_internal.h -- what the recording's writer (recording.c), its
 * metadata (recording_meta.c) and its reader (recording_load.c) share: how
 * codes are laid out (recording.h's mapping) and the annotations' types.
 * Only for output/recording*.c.
 */
#ifndef CH_RECORDING_INTERNAL_H
#define CH_RECORDING_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

#include "output/memtrace.h"
#include "output/recording.h"

#define CONTEXT_MAGIC "camlheap-recording 1 "
#define CODE_ANN (1ull << 62)            /* annotation: a location event only, never in a backtrace */
#define CODE_TERM (1ull << 61)           /* outermost code of a walk that ended early */
#define CODE_FUNC (1ull << 60)           /* a function's start line: a location event only, never in a backtrace */
#define LEAF_IDX_SHIFT 48                /* Comballoc index on the allocation point's code */
#define PC_MASK ((1ull << LEAF_IDX_SHIFT) - 1)
#define ANN_PAYLOAD ((1ull << 56) - 1)
#define TERM_LOST 0xfe                   /* CODE_TERM | TERM_LOST: the stack's frames never arrived */
#define LOST_STACK_ID 0xfeull            /* its stack id when read back (real ones are odd) */
#define ANN(type, payload) (CODE_ANN | (uint64_t)(type) << 56 | ((uint64_t)(payload) & ANN_PAYLOAD))

enum ann_type {
	ANN_GC = 1,     /* minor collections (bits 0..31), major collections (32..55) at the next events */
	ANN_CYCLE = 2,  /* clean phases seen before the next allocations (their major cycle) */
	ANN_CLEAN = 3,  /* a clean-phase note: its number (0..31), blocks in the major set (32..55) */
	ANN_FATE = 4,   /* a fate memtrace has no event for: CH_FATE_* (48..55), object id (0..47) */
	ANN_ALLOC = 5,  /* the next allocations: kind (0..1, and 4 for its third bit), in the minor heap (2),
			 * followed (3), bigarray data CH_BA_* or the low bits of a malloc's ch_malloc_fn (5..6),
			 * CH_MALLOC_OUTSIDE (7), Comballoc index (8..15), allocations combined (16..31),
			 * domain (32..47) */
	ANN_CUSTOM = 6, /* the next custom allocations' struct custom_operations * in the target (0..55);
			 * their identifiers are in the context's "custom_names" */
};

/* What a loaded recording keeps for its lifetime (recording_loaded.priv). */
struct loaded_priv {
	struct mt_reader *r;
	GHashTable *start_lines;  /* "function|file" -> start line */
	GStringChunk *strings;
	char rawbuf[32][24];
	unsigned rawnext;
};

/* A g_new'd copy of `v`: a key (or value) of a GHashTable of uint64s,
 * freed with g_free.  Never NULL (GLib aborts when out of memory). */
uint64_t *u64_dup(uint64_t v);

/* The run's metadata as the JSON object of trace_info's context (after
 * CONTEXT_MAGIC): the report_meta fields of `m`, the executable's
 * `build_id` (hex; NULL: none), `p`'s orphan fates and custom block
 * names, `m`'s counters.  `rc` is not used.  Returns a string to g_free. */
char *meta_json(const struct recording *rc, const struct report_meta *m, const struct profile *p,
		const char *build_id);

/* The reverse, from trace_info's `context` (NULL allowed): out->meta (its
 * strings kept in lp->strings), out->build_id, the custom block names into
 * out->prof (which must exist), and *orphans.  Returns false, with nothing
 * set, when the context is not camlheap's JSON (a plain memtrace trace). */
bool read_meta(struct recording_loaded *out, struct loaded_priv *lp, const char *context, uint64_t *orphans);

#endif
