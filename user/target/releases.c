/* releases.c -- every OCaml release camlheap knows (releases.h): the one
 * table that says which lines are supported, which patch releases the
 * tests run on, and what differs between them (offsets, hooks, structures).
 * Adding a release is a row here, its offsets in include/camlheap.h, and
 * its tests (tests/toolchains.py, tests/test_versions.py). */
#include "target/releases.h"

#include <stdio.h>
#include <string.h>

#include "camlheap.h"

/* The release lines camlheap supports, the patch releases its tests run
 * on (tests/test_versions.py), and where 4.x keeps young_limit and
 * young_ptr.  4.x is taken at any patch level, its writes being checked
 * against the runtime's own code (check_layout4); 5.x only at the tested
 * ones, anything else of a 5.x line read-only. */

static const struct ocaml_release releases[] = {
	{ .major = 4, .minor = 12, .tested = "4.12.0, 4.12.1",
	  .young_limit_off = CH_OCAML412_YOUNG_LIMIT, .young_ptr_off = CH_OCAML412_YOUNG_PTR },
	{ .major = 4, .minor = 13, .tested = "4.13.1",
	  .young_limit_off = CH_OCAML4_YOUNG_LIMIT, .young_ptr_off = CH_OCAML4_YOUNG_PTR },
	{ .major = 4, .minor = 14, .tested = "4.14.0, 4.14.2",
	  .young_limit_off = CH_OCAML4_YOUNG_LIMIT, .young_ptr_off = CH_OCAML4_YOUNG_PTR },
	/* 5.1.0 shared_heap.c:882 caml_cycle_heap_stw, called by one domain
	 * inside the barrier of cycle_all_domains_callback, major_gc.c:1217 */
	{ .major = 5, .minor = 1, .tested = "5.1.0", .dom_id_off = CH_OCAML51_ID,
	  .dom_internal_state_off = CH_OCAML51_DOM_INTERNAL_STATE, .slice_epoch_off = CH_OCAML51_SLICE_EPOCH,
	  .ext_intr_off = CH_OCAML51_EXT_INTERRUPT, .dom_internal_size = CH_OCAML51_DOM_INTERNAL_SIZE,
	  .intr_pending_off = CH_OCAML51_INTERRUPT_PENDING, .final_info_off = CH_OCAML51_FINAL_INFO,
	  .cycle_fn = "caml_cycle_heap_stw" },
	{ .major = 5, .minor = 2, .tested = "5.2.0", .dom_id_off = CH_OCAML52_ID,
	  .dom_internal_state_off = CH_OCAML52_DOM_INTERNAL_STATE, .slice_epoch_off = CH_OCAML52_SLICE_EPOCH,
	  .ext_intr_off = CH_OCAML52_EXT_INTERRUPT, .dom_internal_size = CH_OCAML52_DOM_INTERNAL_SIZE,
	  .intr_pending_off = CH_OCAML52_INTERRUPT_PENDING, .final_info_off = CH_OCAML52_FINAL_INFO,
	  .memprof_trig_off = CH_OCAML52_MEMPROF_YOUNG_TRIGGER, .compaction = true, .debuginfo52 = true,
	  .cycle_fn = "caml_cycle_heap_from_stw_single" },
	{ .major = 5, .minor = 3, .tested = "5.3.0", .dom_id_off = CH_OCAML53_ID,
	  .memprof_trig_off = CH_OCAML53_MEMPROF_YOUNG_TRIGGER, .memprof_off = CH_OCAML53_MEMPROF,
	  .dom_internal_state_off = CH_OCAML53_DOM_INTERNAL_STATE, .sample_block = true, .compaction = true,
	  .slice_epoch_off = CH_OCAML53_SLICE_EPOCH, .ext_intr_off = CH_OCAML53_EXT_INTERRUPT,
	  .dom_internal_size = CH_OCAML53_DOM_INTERNAL_SIZE, .intr_pending_off = CH_OCAML53_INTERRUPT_PENDING,
	  .final_info_off = CH_OCAML53_FINAL_INFO, .all_domains_ptr = true,
	  .gc_stats_ptr = true, .cycle_fn = "caml_cycle_heap_from_stw_single", .debuginfo52 = true },
	/* 5.4.1: 5.3's hooks and structures (runtime/memprof.c, shared_heap.c,
	 * fiber.h, stack.h unchanged but for comments and TSan), four more
	 * domain-state fields before `id`, a thread id before dom_internal's
	 * state */
	{ .major = 5, .minor = 4, .tested = "5.4.1", .dom_id_off = CH_OCAML54_ID,
	  .memprof_trig_off = CH_OCAML54_MEMPROF_YOUNG_TRIGGER, .memprof_off = CH_OCAML54_MEMPROF,
	  .dom_internal_state_off = CH_OCAML54_DOM_INTERNAL_STATE, .sample_block = true, .compaction = true,
	  .slice_epoch_off = CH_OCAML54_SLICE_EPOCH, .ext_intr_off = CH_OCAML54_EXT_INTERRUPT,
	  .dom_internal_size = CH_OCAML54_DOM_INTERNAL_SIZE, .intr_pending_off = CH_OCAML54_INTERRUPT_PENDING,
	  .final_info_off = CH_OCAML54_FINAL_INFO, .all_domains_ptr = true,
	  .gc_stats_ptr = true, .cycle_fn = "caml_cycle_heap_from_stw_single", .debuginfo52 = true },
};

const char ocaml_runtime_supported[] = "4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4";

const char ocaml_releases_tested[] = "4.12.0, 4.12.1, 4.13.1, 4.14.0, 4.14.2, 5.1.0, 5.2.0, 5.3.0, 5.4.1";

/* Is "4.14.2" among "4.14.0, 4.14.2"? */
static bool in_list(const char *list, const char *version)
{
	size_t n = strlen(version);

	for (const char *p = list; (p = strstr(p, version)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

const struct ocaml_release *ocaml_release_find(int major, int minor)
{
	for (size_t i = 0; i < sizeof(releases) / sizeof(releases[0]); i++)
		if (releases[i].major == major && releases[i].minor == minor)
			return &releases[i];
	return NULL;
}

bool ocaml_release_tested(const struct ocaml_release *r, const char *version)
{
	return in_list(r->tested, version);
}

bool ocaml_release_debuginfo52(int major, int minor)
{
	const struct ocaml_release *r = ocaml_release_find(major, minor);

	if (r)
		return r->debuginfo52;
	/* a line the table does not have (never profiled, but a frame table
	 * may still be read): after 5.2, 5.2's layout */
	return major > 5 || (major == 5 && minor >= 2);
}
