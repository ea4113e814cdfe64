/* malloc_probes.h -- where to put the --malloc probes (bpf/malloc.bpf.h):
 * the libc.so.6 a target process uses, the file offsets of its allocator
 * functions, and the runtime functions whose own allocations are left out.
 */
#ifndef CH_MALLOC_PROBES_H
#define CH_MALLOC_PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "camlheap.h"
#include "target/elf_image.h"
#include "target/ocaml_runtime.h"

struct malloc_probe {
	const char *symbol;    /* "malloc", ... */
	uint64_t vaddr;        /* link-time vaddr of the entry probe */
	uint64_t file_offset;  /* in `path`; for an entry probe possibly past the first instructions */
	uint64_t ret_offset;   /* the function's entry (its uretprobe); 0 for free/munmap */
	bool present;
	bool emulated;         /* the entry probe sits on an instruction the kernel emulates */
};

struct malloc_probes {
	char path[4096];       /* the libc file, as camlheap opens it ("/proc/PID/root/...") */
	char shown[4096];      /* its path in the target's file system, for messages */
	struct malloc_probe fn[CH_MFN__COUNT];  /* indexed by enum ch_malloc_fn */
	uint64_t rt_mem_lo[CH_RT_MEM_RANGES];   /* see ch_proc.rt_mem_lo (link-time vaddrs) */
	uint64_t rt_mem_hi[CH_RT_MEM_RANGES];
	const char *rt_mem_names[CH_RT_MEM_RANGES];
	unsigned n_rt_mem;
	uint64_t mmap_vaddr;           /* link-time vaddr of the mmap probe in libc */
	uint64_t libc_text_lo, libc_text_hi; /* libc's executable PT_LOAD, link-time */
};

/* Plan the --malloc probes for process `pid`, whose executable is `exe`
 * (its runtime `rt`).  The libc is the "libc.so.6" (or libc-X.Y.so)
 * mapping in /proc/PID/maps; a process stopped at exec (launch mode) has
 * none yet, so it is then found as its loader will find it: DT_RPATH,
 * LD_LIBRARY_PATH from its environment, DT_RUNPATH ($ORIGIN expanded),
 * then the libc.so.6 beside the real path of the executable's PT_INTERP
 * dynamic loader (Debian's multiarch layout), else
 * the first libc.so.6 in the loader's default directories, if the
 * executable links libc dynamically.  The allocator symbols come from its
 * .dynsym; malloc and free are required, the others optional.  Excluded
 * ranges (allocations the report counts already): caml_ba_alloc (bigarray
 * data, when rt->ba_ops_sym), caml_alloc_for_heap and
 * caml_stat_alloc_aligned_noexc (4.x heap chunks and minor heap),
 * caml_shared_try_alloc (5.x large blocks), caml_plat_mem_map/commit/
 * decommit (5.x pools, minor heaps), and the GC's tables sized after the
 * heaps: caml_alloc_table, caml_alloc_minor_tables, realloc_generic_table
 * (minor remembered sets), 4.x caml_alloc_custom_table,
 * caml_alloc_ephe_table, caml_page_table_initialize/modify.  Returns 0, or -ENOENT (no dynamic
 * libc: a static executable) / -ENOEXEC (no malloc/free in it) with a
 * one-line message in err saying what to do. */
int malloc_probes_plan(pid_t pid, const struct elf_image *exe, const struct ocaml_runtime *rt,
		       struct malloc_probes *mp, char *err, size_t errlen);

/* The libc.so.6 (or libc-X.Y.so) that `pid` maps now, as a path in its
 * file system, into out.  Returns 0, -ENOENT if none, or -errno. */
int malloc_probes_mapped_libc(pid_t pid, char *out, size_t len);

#endif
