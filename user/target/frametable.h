/* frametable.h -- parse an OCaml 4.13/4.14 native executable's frame tables
 * (`caml_frametable`) and decode their debuginfo.
 *
 * Format (4.13.1 runtime/caml/stack.h:91-106, runtime/roots_nat.c:81-100,
 * asmcomp/emitaux.ml:217-281, runtime/amd64.S caml_system__frametable):
 *   caml_frametable: NULL-terminated array of pointers to per-module tables;
 *   table: int64 num_descr, then num_descr descriptors, each 8-aligned:
 *     uintnat retaddr; u16 frame_size; u16 num_live; u16 live_ofs[num_live];
 *     if (frame_size & 2) { u8 num_allocs; u8 alloc_len[num_allocs]; }
 *     if (frame_size & 1) { align 4; u32 dbg_rel[(fs & 2) ? num_allocs : 1]; }
 *   frame_size == 0xFFFF: return into C (callback); no allocs, no debuginfo.
 *   Pointers in a PIE come from the .rela.dyn addends (elf_image_read_ptr).
 * Debuginfo (4.x): slot holds a self-relative u32 `rel`, dbg = &slot + rel;
 *   info1 = u32 at dbg, info2 = u32 at dbg+4;  info1 bit 0: another location
 *   follows at dbg+8 (inline chain, innermost first); bit 1: raise;
 *   name record at dbg + (info1 & 0x3FFFFFC): {i32 filename_offs (relative
 *   to the record); char name[]};  line = info2 >> 12,
 *   start_chr = (info2 >> 4) & 0xFF, end_chr = ((info2 & 0xF) << 6) | (info1 >> 26)
 *   (4.13.1 runtime/backtrace_nat.c:242-281).
 */
#ifndef CH_FRAMETABLE_H
#define CH_FRAMETABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "target/elf_image.h"

struct frame_descr {
	uint64_t retaddr;       /* link-time vaddr of the return address */
	uint64_t descr_vaddr;   /* link-time vaddr of the descriptor itself */
	uint16_t frame_size;    /* raw field: size in bytes | flag bits 0-1, or 0xFFFF */
	uint8_t num_allocs;     /* Comballoc count when frame_size & 2, else 0 */
	uint8_t has_debuginfo;  /* frame_size & 1 (and not 0xFFFF) */
	uint64_t alloc_lens_vaddr; /* vaddr of alloc_len[0] (each = wosize - 1), 0 if none */
	uint64_t dbg_slots_vaddr;  /* vaddr of dbg_rel[0], 0 if none */
};

struct frametable {
	struct frame_descr *descrs; /* sorted by retaddr, unique retaddrs */
	size_t count;
	size_t num_tables;          /* per-module tables seen */
	size_t num_return_to_c;     /* 0xFFFF descriptors */
	size_t num_with_allocs;     /* frame_size & 2: allocation points, and poll points (num_allocs 0) */
	size_t num_with_debuginfo;
	const struct elf_image *img; /* borrowed; must outlive the table */
	/* Debuginfo words in OCaml 5.2+'s encoding (fully or partially
	 * packed, 5.3 runtime/backtrace_nat.c caml_debuginfo_location);
	 * otherwise 4.x-5.1's (4.13.1 backtrace_nat.c:242-281).  Set by
	 * frametable_load from the executable's Sys.ocaml_version; a plugin's
	 * table (frametable_load_units) takes its host's: set it by hand. */
	bool dbg52;
};

/* One source location of a frame; an inline chain is several of these. */
struct ocaml_location {
	const char *name;  /* scoped definition name, e.g. "Chain.h" (points into the image) */
	const char *file;  /* file name as recorded by the compiler, e.g. "chain.ml" */
	int line;
	int start_chr;
	int end_chr;
	int is_raise;
};

/* Parse every table reachable from `caml_frametable` in `img`.
 * Returns 0 and a table in *out (free with frametable_free), or a negative
 * errno: -ENOENT (no caml_frametable symbol: not native OCaml), -EINVAL
 * (a table runs outside the file or has an impossible layout), -ENOMEM. */
int frametable_load(const struct elf_image *img, struct frametable **out);
void frametable_free(struct frametable *ft);

/* Parse the per-unit tables of a shared object that has no caml_frametable:
 * a Dynlink plugin (.cmxs), whose every compilation unit exports
 * caml<Unit>__frametable (5.x: caml<Unit>.frametable), the symbols
 * caml_natdynlink_run passes to caml_register_frametable (4.13.1
 * runtime/natdynlink.c).  Same result and errors as frametable_load;
 * -ENOENT when there is no such symbol (not an OCaml plugin). */
int frametable_load_units(const struct elf_image *img, struct frametable **out);

/* Descriptor whose retaddr equals `retaddr` exactly (binary search), or NULL. */
const struct frame_descr *frametable_find(const struct frametable *ft, uint64_t retaddr);

/* Words (header included) of Comballoc sub-allocation `idx`
 * (Whsize of alloc_len[idx] + 1), or 0 if out of range. */
unsigned frametable_alloc_whsize(const struct frametable *ft, const struct frame_descr *d, unsigned idx);

/* Decode the debuginfo of `d` for allocation `alloc_idx` (use 0 for a call
 * site or a single allocation) into `locs`, innermost first, at most `max`
 * entries.  A Comballoc index whose slot is empty or out of range falls
 * back to the first sub-allocation with debuginfo, as runtime backtraces do
 * (4.13.1 backtrace_nat.c:137-143, 190-196).  Returns the number of locations (0 when the descriptor has no
 * debuginfo), or -EINVAL if the encoding points outside the image. */
int frametable_locations(const struct frametable *ft, const struct frame_descr *d, unsigned alloc_idx,
			 struct ocaml_location *locs, int max);

#endif
