/* releases.h -- what camlheap knows of each OCaml release line: one table
 * (releases.c), read by the runtime's detection (ocaml_runtime.c) and the
 * frame-table reader (frametable.c).  The offsets are include/camlheap.h's
 * CH_OCAML4*_, CH_OCAML5*_, checked against each release's headers and
 * DWARF by tests/test_versions.py.
 */
#ifndef CH_RELEASES_H
#define CH_RELEASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "target/ocaml_runtime.h"

/* One supported release line, M.m. */
struct ocaml_release {
	int major, minor;
	const char *tested;    /* comma-separated patch releases */
	/* 4.x */
	uint8_t young_limit_off, young_ptr_off;
	/* 5.x: offsetof(caml_domain_state, id) and (memprof_young_trigger),
	 * 0: none (runtime/caml/domain_state.tbl) */
	uint32_t dom_id_off, memprof_trig_off;
	uint32_t memprof_off;  /* offsetof(caml_domain_state, memprof), where a running Gc.Memprof is read (5.3+) */
	uint32_t dom_internal_state_off; /* offsetof(struct dom_internal, state) (runtime/domain.c; 5.3+) */
	bool sample_block;     /* caml_memprof_sample_block (5.3), else caml_alloc_shr & co. (5.1, 5.2) */
	bool compaction;       /* caml_compact_heap (from 5.2) */
	bool gc_stats_ptr;     /* sampled_gc_stats is a pointer to caml_params->max_domains entries (5.3),
				* else an array of Max_domains (5.1, 5.2; runtime/gc_stats.c) */
	const char *cycle_fn;  /* the single-domain step of a major cycle's end (runtime/shared_heap.c) */
	bool debuginfo52;      /* frame-table debuginfo in 5.2's layout (frametable.h) */
};

/* rt->version (read from the executable, "M.m.p"): accept a supported
 * release, or say why not in msg (msglen bytes; `name`: the program, for
 * the message).  Sets rt's major, minor, release, the 4.x young_limit and
 * young_ptr offsets and release_known (a tested patch release: 4.x at any
 * patch, its writes checked against the runtime's code; 5.x only the tested
 * ones, else minor_why says why nothing is written).  Returns OCAML_OK, or
 * OCAML_UNSUPPORTED_VERSION for an unreadable version, a development or
 * pre-release build, or a line not in the table (the reason for the lines
 * before 4.12 comes from their runtime sources: 4.10.0, 4.11.0 and 4.12.1
 * runtime/caml/memprof.h and domain_state.tbl). */
enum ocaml_detect_result ocaml_release_check(const char *name, struct ocaml_runtime *rt, char *msg, size_t msglen);

/* Does release line major.minor write frame-table debuginfo in 5.2's
 * layout (5.2 runtime/backtrace_nat.c; frametable.h)? */
bool ocaml_release_debuginfo52(int major, int minor);

#endif
