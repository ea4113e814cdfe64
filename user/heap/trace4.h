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
	char not_read[256];      /* roots that could not be read (symbols missing), "" if none */
};

/* Trace the heap of t, stopped by fz, indexed in hx by walk4_census.  Stops
 * early (-ETIME) once CLOCK_MONOTONIC passes `deadline`.  Returns 0, or
 * -errno with err set (-EFAULT memory unreadable, -ENOMEM). */
int trace4_run(const struct target *t, const struct heap_freeze *fz, struct heap_index *hx, double deadline,
	       struct trace4_result *r, char *err, size_t errlen);

#endif
