/* releases.h -- what camlheap knows of each OCaml release line: one table
 * (releases.c), read by the runtime's detection (ocaml_runtime.c: which
 * release, and why a line is not supported) and the frame-table reader
 * (frametable.c).  The offsets are include/camlheap.h's CH_OCAML4*_ and
 * CH_OCAML5*_, checked against each release's headers and DWARF by
 * tests/test_versions.py.
 */
#ifndef CH_RELEASES_H
#define CH_RELEASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


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
	uint32_t dom_internal_state_off; /* offsetof(struct dom_internal, state) (runtime/domain.c) */
	/* 5.x, the interrupt flags the ptrace executor reads around a write
	 * (struct ch_write_req recheck): offsetof(caml_domain_state,
	 * major_slice_epoch) and (requested_external_interrupt); struct
	 * dom_internal's size and offsetof(interruptor.interrupt_pending);
	 * all_domains is a pointer (5.3+), else the array itself */
	uint16_t slice_epoch_off, ext_intr_off, dom_internal_size, intr_pending_off;
	uint16_t final_info_off; /* offsetof(caml_domain_state, final_info) */
	bool all_domains_ptr;
	bool sample_block;     /* caml_memprof_sample_block (5.3), else caml_alloc_shr & co. (5.1, 5.2) */
	bool compaction;       /* caml_compact_heap (from 5.2) */
	bool gc_stats_ptr;     /* sampled_gc_stats is a pointer to caml_params->max_domains entries (5.3),
				* else an array of Max_domains (5.1, 5.2; runtime/gc_stats.c) */
	const char *cycle_fn;  /* the single-domain step of a major cycle's end (runtime/shared_heap.c) */
	bool debuginfo52;      /* frame-table debuginfo in 5.2's layout (frametable.h) */
};

/* The supported release lines, "4.12, 4.13, ..." (ocaml_runtime.h declares
 * it too, for messages), and the patch releases the tests run on, "4.12.0,
 * 4.12.1, ...": every other patch release of a 5.x line is profiled
 * read-only, of a 4.x line with its writes checked against its code. */
extern const char ocaml_runtime_supported[];
extern const char ocaml_releases_tested[];

/* The row of release line major.minor, NULL if camlheap does not support
 * it. */
const struct ocaml_release *ocaml_release_find(int major, int minor);

/* Is `version` ("4.14.2") one of r's tested patch releases? */
bool ocaml_release_tested(const struct ocaml_release *r, const char *version);

/* Does release line major.minor write frame-table debuginfo in 5.2's
 * layout (5.2 runtime/backtrace_nat.c; frametable.h)? */
bool ocaml_release_debuginfo52(int major, int minor);

#endif
