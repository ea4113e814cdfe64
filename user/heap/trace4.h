/* trace4.h -- what keeps a stopped OCaml 4.x program's major heap alive:
 * every block reachable from the roots, and the blocks each group of roots
 * retains alone (issue 25: retained sizes of root groups).
 *
 * The roots, by group (heap/roots4.c, as 4.14.2 runtime/roots_nat.c
 * caml_do_roots lists them): the global data of each module
 * (`caml_globals`, one group a module, exact; Dynlink'd ones through
 * `caml_dyn_globals`), the C global roots (globroots.c's three skip lists,
 * exact), the finalisers' closures and the values whose finaliser is due
 * (finalise.c, exact), and, scanned conservatively (every word that is a
 * pointer to a live block's first field counts), each thread's registers
 * and stack -- its OCaml frames, its C frames and the local roots they
 * hold -- and the minor heap's allocated part (the young blocks are not
 * traced: what they point to in the major heap counts as held by "the minor
 * heap").  Weak arrays and ephemerons (Abstract_tag in 4.x) hold nothing.
 *
 * The trace labels each block with the group that reached it, or "shared"
 * once a second group reaches it: a group's retained blocks are those only
 * it reaches -- what the GC would free if that group's roots were gone, the
 * dominator tree's answer for a root group (Lengauer and Tarjan 1979 would
 * give it for every block; here it is given for the groups only).  Within a
 * module's group each field pointing into the major heap has a label of
 * its own (trace4_field), so a block goes field -> module -> shared at most:
 * labelled at most three times, its fields read each time.  The fields
 * retaining the most are then described by their shape (heap/shape4.h),
 * the target still stopped.
 */
#ifndef CH_TRACE4_H
#define CH_TRACE4_H

#include <stdbool.h>
#include <stdint.h>

#include "heap/freeze.h"
#include "heap/hindex.h"
#include "heap/walk4.h"
#include "target/target.h"

#define TRACE4_MAX_GROUPS 4096
#define TRACE4_MAX_FIELDS 32768  /* module fields traced apart; further ones count for their module only */
#define TRACE4_SHAPES 64         /* fields described, those retaining the most first */

struct trace4_group {
	char name[96];           /* "global Leak", "stack of thread 1234 (main)", "C global roots", ... */
	bool conservative;       /* its roots were words that looked like pointers */
	uint64_t roots;          /* root values that pointed to a live major block */
	struct walk4_count retained; /* blocks reachable from this group only, words with headers */
};

/* One field of a module's global data pointing into the major heap,
 * traced under a label of its own within its module's group: blocks only
 * it reaches are its retained blocks (and its group's); blocks reached by
 * two fields of the same module are the module's alone (counted in the
 * group only); by two groups, "shared". */
struct trace4_field {
	unsigned group;          /* its group, an index into groups[] */
	uint32_t block;          /* which of the unit's global blocks (caml_globals' list; 0 the module block) */
	uint32_t field;          /* the field of that block (the module's n-th global value, 0-based) */
	uint64_t value;          /* the field's value at the stop: a block's address in the target */
	uint64_t code;           /* the code of the closure its shape names (runtime address), or 0 */
	int shape;               /* its description's index in shapes[], or -1 */
	struct walk4_count retained; /* blocks reachable from this field only, words with headers */
};

struct trace4_result {
	struct trace4_group groups[TRACE4_MAX_GROUPS];
	unsigned ngroups;
	struct trace4_field fields[TRACE4_MAX_FIELDS];
	unsigned nfields;
	uint64_t fields_over;    /* fields into the heap past TRACE4_MAX_FIELDS (counted for their module only) */
	char shapes[TRACE4_SHAPES][176]; /* what a field holds, read at the stop (heap/shape4.h):
					  * "Hashtbl.t (by its shape): 3 bindings in 16 buckets; ..." */
	unsigned nshapes;
	unsigned shapes_skipped; /* fields left undescribed: the describing passed the deadline */
	struct walk4_count reachable, shared;   /* shared: reachable from two groups or more */
	struct walk4_count reach_by_tag[256];
	uint64_t static_blocks;  /* blocks outside the heap (module data, constants) traced through */
	uint64_t rescans;        /* heap rescans after the work list overflowed */
	uint64_t sweeps, line_reads; /* sweeps over the heap in address order, 16 KiB lines read */
	uint64_t bytes_read, index_bytes;
	double trace_s;
	double paths_s;          /* of which the paths to the blocks asked for (trace4_run's paths) */
	char not_read[256];      /* roots that could not be read (symbols missing), "" if none */
};

#define TRACE4_PATH_END 12      /* blocks shown at each end of a path */

/* One block on a path from a root. */
struct trace4_hop {
	uint64_t v;              /* the block: the address of its first field in the target */
	uint32_t wosize;         /* its size in words, header excluded */
	int32_t field;           /* the field of the block before it that holds it; -1 for the root's own value,
				  * or not found among the first 4096 fields */
	uint8_t tag;
};

enum trace4_path_status {
	TRACE4_PATH_REACHED = 0, /* reachable: the path is filled in */
	TRACE4_PATH_UNREACHABLE, /* a live block no root reaches: garbage the GC has not swept yet */
	TRACE4_PATH_NOT_BLOCK,   /* not a live block of the indexed heap at the stop */
	TRACE4_PATH_SKIPPED,     /* not followed: the deadline passed first */
};

/* A path from a root to one block, found by the trace: each block on it
 * was first reached from the one before it (a spanning tree of the trace,
 * in address order, not breadth first: in a tree -- most OCaml data --
 * the only path, with sharing not always the shortest). */
struct trace4_path {
	uint64_t v;              /* given: the block (address of its first field) */
	enum trace4_path_status status;
	uint16_t root_label;     /* the root it starts from: a group's 1..TRACE4_MAX_GROUPS, a field's
				  * TRACE4_MAX_GROUPS + 1 + its index (trace4_label_name) */
	uint16_t label;          /* who retains v: the same kind of label, or TRACE4_LABEL_SHARED */
	bool via_static;         /* the root reached head[0] through a block of the program's static data */
	uint64_t length;         /* blocks on it, the root's value first and v last */
	unsigned nhead, ntail;   /* head[]: the first blocks from the root's value; tail[]: the last, ending
				  * with v; length - nhead - ntail blocks between them not shown */
	struct trace4_hop head[TRACE4_PATH_END], tail[TRACE4_PATH_END];
};

#define TRACE4_LABEL_SHARED 0xFFFF

/* qsort comparator of pointers to struct trace4_field: the field
 * retaining the most words first. */
int trace4_cmp_field_retained(const void *a, const void *b);

/* The name of a label of r: "global Leak field 3", "stack Asmgen.fun",
 * "shared by several root groups". */
void trace4_label_name(const struct trace4_result *r, uint16_t label, char *buf, size_t len);

/* Trace the heap of t, stopped by fz, indexed in hx by walk4_census.  With
 * npaths > 0, also the path from a root to each of paths[0..npaths)'s
 * blocks (their v given; 4 more bytes of camlheap's memory per heap block
 * meanwhile).  Stops early (-ETIME) once CLOCK_MONOTONIC passes
 * `deadline`.  Returns 0, or -errno with err set (-EFAULT memory
 * unreadable, -ENOMEM). */
int trace4_run(const struct target *t, const struct heap_freeze *fz, struct heap_index *hx, double deadline,
	       struct trace4_result *r, struct trace4_path *paths, size_t npaths, char *err, size_t errlen);

#endif
