/* resident.h -- where a target's resident memory goes: its resident set
 * (/proc/PID/status) and the OCaml heap's size from the runtime's own
 * counters, read from the running process.
 */
#ifndef CH_RESIDENT_H
#define CH_RESIDENT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "target/ocaml_runtime.h"

struct resident {
	uint64_t rss_kib;     /* VmRSS, KiB (proc(5)) */
	uint64_t hwm_kib;     /* VmHWM, KiB: the peak resident set */
	uint64_t heap_words;  /* the OCaml heap, words: major heap + minor heap(s); 0 if unknown */
	double at_s;          /* when read (CLOCK_MONOTONIC seconds) */
};

/* Read `pid`'s resident set and heap size now.  The heap is, on 4.x,
 * Caml_state->stat_heap_wsz + minor_heap_wsz (runtime/caml/domain_state.tbl;
 * the same figures as Gc.quick_stat's heap_words and minor_heap_size);
 * on 5.x, over the domains, pool_words + large_words of gc_stats.c's
 * sampled_gc_stats (refreshed at every minor collection; Gc.quick_stat's
 * heap_words) plus young_end - young_start of the domain states in
 * `dom_states` (runtime addresses, `ndom` of them: the domains camlheap
 * has seen allocate).  `bias` is the executable's load bias.  Returns 0
 * (heap_words 0 if the counters could not be read), or -errno if the
 * process is gone or /proc cannot be read. */
int resident_read(pid_t pid, const struct ocaml_runtime *rt, uint64_t bias, const uint64_t *dom_states, size_t ndom,
		  struct resident *out);

#endif
