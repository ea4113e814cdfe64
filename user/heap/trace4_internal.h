/* trace4_internal.h -- the tracer shared by trace4.c (the trace) and
 * roots4.c (the roots it starts from). */
#ifndef CH_TRACE4_INTERNAL_H
#define CH_TRACE4_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "heap/trace4.h"

#define LABEL_SHARED TRACE4_LABEL_SHARED
_Static_assert(TRACE4_MAX_GROUPS + TRACE4_MAX_FIELDS < LABEL_SHARED, "labels fit in uint16_t below LABEL_SHARED");

/* A block reached under a label, pending in its line's list. */
struct trace_item {
	uint64_t v;        /* a value: the address of a block's first field */
	uint16_t label;    /* a group's 1..TRACE4_MAX_GROUPS, a field's TRACE4_MAX_GROUPS + 1 + its index, or
			    * LABEL_SHARED */
	uint32_t next;     /* the next item of its line, or of the free list */
	uint32_t from;     /* 0: a block to visit; else its fields from this one on (a range) */
	uint32_t parent;   /* who reached it: a block's number, or PARENT_ROOT | its root's label (with
			    * PARENT_STATIC: through a block of the program's static data) */
};

#define PARENT_ROOT 0x80000000u
#define PARENT_STATIC 0x40000000u
#define PARENT_LABEL 0xFFFFu

struct tracer {
	const struct target *t;
	const struct heap_freeze *fz;
	struct heap_index *hx;
	struct trace4_result *r;
	pid_t pid;
	struct trace_item *work;     /* the items' pool */
	size_t nwork, cap;
	uint32_t free_item;
	uint64_t pending;            /* items in the lines' lists */
	uint64_t *line0;             /* line0[k]: chunk k's first line; line0[nchunks]: the lines */
	uint32_t *head;              /* per line: its first pending item */
	uint32_t *chunk_of_line, *slot_of_line; /* per line: its chunk, its cache slot (NONE) */
	uint32_t *lstack;            /* lines behind the sweep, in the cache, with items pending */
	uint64_t sweep_pos;          /* the line the sweep is at */
	uint8_t *in_stack;
	size_t nlstack;
	uint64_t *cache;             /* nslots lines */
	uint8_t *slot_used;          /* per slot: 0 empty, 1 holds slot_line[slot] */
	uint64_t *slot_line;
	uint32_t *lru_prev, *lru_next, lru_head, lru_tail; /* the slots, most recently used first */
	uint32_t nslots;
	unsigned stack_groups0;      /* the first group of the threads' stacks */
	unsigned more_modules, more_frames; /* the groups of the modules and frames beyond the limit */
	struct trace_item *deferred; /* ranges of large blocks waiting for the pending items to drain */
	size_t ndeferred, deferred_cap;
	bool overflow;
	uint64_t data_lo, data_hi;   /* the executable's writable segments, target addresses */
	uint64_t young_lo, young_hi; /* the minor heap (young_start, young_end) */
	uint64_t *skeys;             /* static blocks seen: open addressing, 0 empty */
	uint16_t *slabel;
	size_t scap, scount;
	uint32_t ctx;                /* the parent the pushes made now record (struct trace_item's parent) */
	uint32_t *parent;            /* with paths asked for: per block number, who first reached it (as ctx) */
};

/* Read len bytes of the target at addr.  0 or -EFAULT. */
int tracer_read(struct tracer *tr, uint64_t addr, void *buf, size_t len);

/* A new group of roots; its label (the last group takes every further
 * one's roots once TRACE4_MAX_GROUPS are made: "other roots"). */
unsigned tracer_group(struct tracer *tr, const char *name, bool conservative);

/* The label for field `field` of global block `block` of the module
 * whose group is `label`, holding v: a field label of its own if v is a
 * live major block and fewer than TRACE4_MAX_FIELDS were made, else
 * `label`. */
unsigned tracer_field(struct tracer *tr, unsigned label, uint32_t block, uint32_t field, uint64_t v);

/* A root value of group `label`: traced if it points to a live major
 * block (or, exact, to a block in the executable's data). */
void tracer_root(struct tracer *tr, unsigned label, uint64_t v, bool exact);

/* The paths to paths[0..n)'s blocks (path4.c), from tr->parent, the
 * target still stopped; until `deadline`.  Returns 0 or -errno. */
int path4_extract(struct tracer *tr, struct trace4_path *paths, size_t n, double deadline);

/* The roots (roots4.c): every group and its values through tracer_root.
 * Returns 0 or -errno (err set). */
int roots4_collect(struct tracer *tr, char *err, size_t errlen);

#endif
