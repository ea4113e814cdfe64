/* camlheap.h -- the ABI shared by bpf/ and user/: event records, map keys
 * and values, counters, constants.  One source of truth: no struct here is
 * declared anywhere else.  Units are in the field names (_words, _bytes, _ns).
 *
 * Included by BPF code (after vmlinux.h) and by user space, so it only uses
 * the __u8/__u16/__u32/__u64 types that both sides have.
 */
#ifndef CAMLHEAP_H
#define CAMLHEAP_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Stacks are walked with bpf_loop up to this many frames (array size).  The
 * runtime-configurable depth (rodata max_frames) is at most this.  Real
 * ocamlopt.opt stacks reach 376+ frames and exceed 512 on format.ml
 * (measured with Debian's 4.13.1 ocamlopt.opt -c). */
#define CH_MAX_FRAMES 2048
#define CH_DEFAULT_FRAMES 1024

/* Size of the geometric-draw pool that user space fills (BPF has no floating
 * point).  Power of two: indexed with bpf_get_prandom_u32() & mask. */
#define CH_GEOM_POOL_SIZE 65536

/* What a sample was taken from.  The numbering is part of the ABI. */
enum ch_alloc_kind {
	CH_KIND_MINOR = 0,      /* minor heap, sampled through young_limit (channel A); words incl. header */
	CH_KIND_MAJOR = 1,      /* direct major-heap allocation, caml_alloc_shr (words incl. header) */
	CH_KIND_CUSTOM = 2,     /* out-of-heap memory declared by caml_alloc_custom_mem (words = bytes/8) */
	CH_KIND_UNMARSHAL = 3,  /* unmarshalled (interned) region, words incl. headers */
	CH_KIND_BIGARRAY = 4,   /* a bigarray's data (caml_ba_alloc, caml_unix_mapped_alloc): words = bytes/8;
				 * ext_flags says whose data it is (CH_BA_*) */
	CH_KIND_MALLOC = 5,     /* --malloc: the target's libc malloc/calloc/realloc/posix_memalign/
				 * aligned_alloc/memalign or anonymous mmap (words = bytes/8); ext_flags is the
				 * enum ch_malloc_fn, its leaf frame CH_PSEUDO_PC(fn) */
	CH_KIND__COUNT
};

/* Whose data a CH_KIND_BIGARRAY sample is (ch_sample_event.ext_flags):
 * runtime/bigarray.c caml_ba_alloc mallocs the data when given none and
 * marks it CAML_BA_MANAGED; given data, the block only points to memory
 * that belongs to another bigarray (sub, slice, reshape) or to C code;
 * otherlibs/unix/mmap_ba.c caml_unix_mapped_alloc maps a file. */
#define CH_BA_OWNED 0   /* malloc'ed for this bigarray, freed by its finaliser */
#define CH_BA_VIEW 1    /* data given by the caller: a view of memory owned elsewhere */
#define CH_BA_MAPPED 2  /* a memory-mapped file (Unix.map_file) */

/* The libc function a CH_KIND_MALLOC sample comes from (ch_sample_event.ext_flags,
 * low bits); the order is the order of the probes in user/malloc_probes.c. */
enum ch_malloc_fn {
	CH_MFN_MALLOC = 0,
	CH_MFN_CALLOC,          /* calloc(n, size): n * size bytes */
	CH_MFN_REALLOC,         /* realloc(p, size): frees p (if it was followed), allocates size bytes */
	CH_MFN_POSIX_MEMALIGN,  /* posix_memalign(&p, align, size) */
	CH_MFN_ALIGNED_ALLOC,   /* aligned_alloc(align, size) */
	CH_MFN_MEMALIGN,        /* memalign(align, size) */
	CH_MFN_MMAP,            /* mmap(addr, len, prot, MAP_ANONYMOUS|..., ...): len bytes (address space,
				 * not resident pages) */
	CH_MFN__ALLOCS,
	CH_MFN_FREE = CH_MFN__ALLOCS, /* free(p) */
	CH_MFN_MUNMAP,          /* munmap(addr, len): the mapping that starts at addr (a partial unmap counts
				 * as the whole mapping's end) */
	CH_MFN__COUNT
};

#ifndef __bpf__
/* libc's name of each CH_MFN_ function: the symbol user space probes, and
 * the name of its pseudo frame (CH_PSEUDO_PC_BASE + fn) in reports; "?"
 * out of range. */
static inline const char *ch_malloc_fn_name(unsigned fn)
{
	static const char *const names[CH_MFN__COUNT] = {
		[CH_MFN_MALLOC] = "malloc",
		[CH_MFN_CALLOC] = "calloc",
		[CH_MFN_REALLOC] = "realloc",
		[CH_MFN_POSIX_MEMALIGN] = "posix_memalign",
		[CH_MFN_ALIGNED_ALLOC] = "aligned_alloc",
		[CH_MFN_MEMALIGN] = "memalign",
		[CH_MFN_MMAP] = "mmap",
		[CH_MFN_FREE] = "free",
		[CH_MFN_MUNMAP] = "munmap",
	};

	return fn < CH_MFN__COUNT ? names[fn] : "?";
}
#endif
/* ext_flags bit of a CH_KIND_MALLOC sample: the calling thread was not
 * running OCaml code at the time (a C thread, or a thread inside a blocking
 * section while another one holds the runtime): no OCaml stack. */
#define CH_MALLOC_OUTSIDE 0x80

/* The leaf frame of a CH_KIND_MALLOC sample's stack: a pseudo return
 * address that names the probed libc function (modules.c symbolizes it).
 * Above every user-space address (47 bits) and inside memtrace's 48-bit
 * code field (recording.c). */
#define CH_PSEUDO_PC_BASE 0xffffffffff00ULL
#define CH_PSEUDO_PC(fn) (CH_PSEUDO_PC_BASE | (__u64)(fn))

/* Link-time ranges of runtime functions whose own malloc/mmap calls make
 * memory the report already counts (heap chunks, pools, minor heaps,
 * large blocks, bigarray data) or the GC's own tables sized after the
 * heaps (minor remembered sets, the 4.x page table): a --malloc call whose
 * return address lies in one of them is left out (ch_proc.rt_mem_lo/hi). */
#define CH_RT_MEM_RANGES 16

/* Value of the BPF map `custom_names` (key: a struct custom_operations *
 * in the target): its identifier, NUL-terminated ("" if unreadable). */
struct ch_custom_name {
	char name[64];
};

/* Ring-buffer records whose `kind` is this are notes, not samples: the
 * target called caml_register_frametable (Dynlink loaded a plugin), so user
 * space rescans its mappings and loads the new frame descriptors. */
#define CH_NOTE_FRAMETABLE 0x80
/* Note: the target called exec.  The kernel side has already forgotten the
 * process (its new image has another load bias, maybe another runtime), so
 * no sample follows; user space ends the recording. */
#define CH_NOTE_EXEC 0x81

/* Map `exits` of alloc.bpf.c: how a followed process ended, for the end
 * reason of a recording that attached to it (only its parent can wait for
 * it).  on_exit (tracepoint sched_process_exit) stores each exiting
 * thread's task->exit_code, so the last thread leaves the process's wait(2)
 * status; on_fatal_exn (uprobe on caml_fatal_uncaught_exception, 4.x and
 * 5.x runtime/printexc.c, which then exits with status 2 or aborts) the
 * name of the exception that ended it; on_oom_victim (raw tracepoint
 * oom:mark_victim, mm/oom_kill.c mark_oom_victim, called just after the
 * victim was sent SIGKILL) that the kernel's OOM killer chose it. */
#define CH_EXIT_STATUS_SEEN 0x1 /* status is set */
#define CH_EXIT_UNCAUGHT 0x2    /* caml_fatal_uncaught_exception ran; exn names it */
#define CH_EXIT_OOM_VICTIM 0x4  /* the OOM killer chose the process; oom_ns says when */
struct ch_exit {
	__u32 status; /* wait(2) status: exit(n) n << 8; a fatal signal its number, | 0x80 if it dumped core */
	__u32 flags;  /* CH_EXIT_* */
	__u64 oom_ns; /* CH_EXIT_OOM_VICTIM: bpf_ktime_get_ns (CLOCK_MONOTONIC) of mark_oom_victim */
	char exn[64]; /* the exception's constructor, e.g. "Not_found", "Stdlib.Exit"; NUL-terminated, may be cut */
};

/* Fates of tracked sampled blocks (README *Census*): records of type struct
 * ch_fate_event, `kind` at the same offset as in struct ch_sample_event. */
#define CH_FATE_PROMOTE 0x90    /* minor block promoted: block_addr is its major-heap address */
#define CH_FATE_DEAD_MINOR 0x91 /* minor block not promoted at a minor collection: dead */
#define CH_FATE_DEAD_MAJOR 0x92 /* major block white at the start of the clean phase: dead */
#define CH_FATE_RELOCATED 0x93  /* alive at a compaction, which moved it: no longer followed */
#define CH_FATE_UNTRACKED 0x94  /* alive, but no room left in the tracking set: no longer followed */
#define CH_FATE_UNKNOWN 0x95    /* its header could not be read at a collection: fate unknown */
#define CH_FATE_FREED 0x96      /* --malloc: the sampled memory was freed (free, realloc, munmap) */
#define CH_NOTE_MAJOR_CLEAN 0x9f /* a major cycle reached its clean phase (after its deaths) */

/* Why an in-kernel stack walk ended (bpf/unwind.bpf.h, README *How it works*). */
enum ch_stack_term {
	CH_TERM_CLEAN = 0,      /* reached the last callback context (bottom_of_stack == NULL) */
	CH_TERM_UNKNOWN_PC = 1, /* a return address with no frame descriptor */
	CH_TERM_READ_ERROR = 2, /* bpf_probe_read_user failed (stack or Caml_state unreadable) */
	CH_TERM_DEPTH = 3,      /* stopped at max_frames; the leaf side is kept */
	CH_TERM__COUNT
};

/* Global counters, a PERCPU_ARRAY indexed by this enum; user space sums. */
enum ch_counter {
	CH_CNT_HITS_MAJOR = 0,     /* probe hits: caml_memprof_track_alloc_shr */
	CH_CNT_HITS_CUSTOM,        /* probe hits: caml_memprof_track_custom */
	CH_CNT_HITS_UNMARSHAL,     /* probe hits: caml_memprof_track_interned */
	CH_CNT_WORDS_MAJOR,        /* words seen (all hits, sampled or not) */
	CH_CNT_WORDS_CUSTOM,
	CH_CNT_WORDS_UNMARSHAL,
	CH_CNT_SAMPLES,            /* samples drawn (sum of nsamples over events) */
	CH_CNT_EVENTS,             /* sample events emitted */
	CH_CNT_DROPPED,            /* sample events lost: ring buffer full */
	CH_CNT_DROPPED_SAMPLES,    /* samples inside the lost events */
	CH_CNT_NEW_STACKS,         /* events that carried their frames (first sight of a stack) */
	CH_CNT_BAD_STATE,          /* Caml_state unreadable or inconsistent at a hit */
	CH_CNT_CAPPED,             /* blocks whose samples were capped at 2^23 (huge block, huge rate) */
	/* Minor heap, channel A (README *Minor heap*) */
	CH_CNT_DISPATCH,           /* caml_alloc_small_dispatch calls seen (traps into the runtime) */
	CH_CNT_MINOR_SAMPLES,      /* minor samples taken (also counted in CH_CNT_SAMPLES) */
	CH_CNT_MISSED,             /* sample points the program passed without trapping (a lost or late write) */
	CH_CNT_UNTRACKED,          /* sample points inside blocks the runtime allocates untracked (memprof skips them too) */
	CH_CNT_EPOCHS,             /* minor cycles seen (a fresh sample point is drawn at each) */
	CH_CNT_WRITES_QUEUED,      /* young_limit writes handed to the ptrace executor (SIGURG sent) */
	CH_CNT_WRITES_KERNEL,      /* young_limit writes done in the kernel (bpf_probe_write_user) */
	CH_CNT_WRITE_SKIPPED,      /* writes not done: an action was pending, or the thread is not ours to stop */
	CH_CNT_SIGNAL_FAILED,      /* bpf_send_signal_thread failed: the write is lost (costs a missed sample at worst) */
	/* Census: following sampled blocks to their death (README *Census*) */
	CH_CNT_MINOR_UPDATES,      /* caml_memprof_minor_update hits (minor collections seen) */
	CH_CNT_CLEAN_PHASES,       /* caml_memprof_update_clean_phase hits (major cycles reaching clean) */
	CH_CNT_COMPACTIONS,        /* caml_memprof_invert_tracked hits (4.x compactions) */
	CH_CNT_TRACK_FULL,         /* sampled blocks not followed: tracking set full (--max-tracked) */
	CH_CNT_FATES_DEFERRED,     /* fate events that found the ring buffer full and were sent later */
	CH_CNT_FATE_UNREADABLE,    /* tracked blocks whose header could not be read at a collection */
	CH_CNT_FATE_STALE,         /* tracked blocks past a collection or compaction no hook saw: fate unknown */
	CH_CNT_CENSUS_MINOR_NS,    /* time spent in the minor-collection hook, ns */
	CH_CNT_CENSUS_MAJOR_NS,    /* time spent in the clean-phase hook, ns */
	CH_CNT_YOUNG_CHECKED,      /* young entries examined at minor collections */
	CH_CNT_MAJOR_CHECKED,      /* major entries examined at clean phases */
	CH_CNT_MEMPROF_ACTIVE,     /* OCaml 5: arms skipped because the program's own Gc.Memprof was sampling */
	CH_CNT_SIGURG_BLOCKED,     /* writes not made: the thread blocks SIGURG (OCaml 5 backup threads) */
	CH_CNT_SIGURG_HANDLED,     /* writes not made: the program handles SIGURG itself */
	CH_CNT_HITS_BIGARRAY,      /* probe hits: caml_ba_alloc / caml_unix_mapped_alloc returns */
	CH_CNT_WORDS_BIGARRAY,     /* bigarray data seen, words (bytes/8), all hits */
	/* --malloc (bpf/malloc.bpf.h) */
	CH_CNT_HITS_MALLOC,        /* allocating calls seen (malloc..mmap returns, the target's own, not nested) */
	CH_CNT_BYTES_MALLOC,       /* bytes they allocated, all hits */
	CH_CNT_HITS_FREE,          /* free/munmap calls seen (non-NULL) */
	CH_CNT_MALLOC_RUNTIME,     /* calls left out: the runtime's own heap, pools, large blocks, bigarray data */
	CH_CNT_MALLOC_OUTSIDE,     /* malloc samples taken outside OCaml code (C threads, blocking sections) */
	CH_CNT_MALLOC_FREED,       /* sampled allocations seen freed */
	CH_CNT_MMAP_LIBC,          /* mmap calls left out: made by libc itself (arenas, thread stacks) */
	CH_CNT_LAYOUT_BAD,         /* 4.x: the domain state broke an invariant of its layout: minor sampling stopped,
				    * nothing written (bpf/minor.bpf.h minor_layout_check) */
	CH_CNT_BEFORE_WINDOW,      /* allocations seen before the window opened (not sampled, not counted) */
	CH_CNT_POLL_MARGIN,        /* OCaml 5: sample points in caml_poll_gc_work's margin above young_trigger, never
				    * armed (a trap there brings the GC's work forward: bpf/ocaml5/minor.bpf.h) */
	CH_CNT_ARM_AT_RETURN,      /* OCaml 5, ptrace: resets inside a dispatch not followed by a write, the dispatch's
				    * return making the one write (no OCaml code could run in between) */
	CH_CNT_ARM_AT_RESET,       /* OCaml 5, ptrace: resets inside a dispatch that can still run OCaml code (a flag
				    * up: bpf/ocaml5/minor.bpf.h minor5_dispatch_runs_ocaml), written there at once */
	CH_CNT_ARMS_REGISTER,      /* register executor: young_trigger loads performed with the sample point
				    * raised into them (the runtime then published it as young_limit) */
	CH_CNT_IDLE_ENDS,          /* register executor, 4.x: young_alloc_end stores (caml_something_to_do set) given
				    * the runtime's usual limit instead, nothing being there to act on (no storm) */
	CH_CNT_IDLE_ENDS_REDONE,   /* ... of which redone with young_alloc_end: a signal was recorded meanwhile */
	CH_CNT_URGENT_REDIRECTS,   /* register executor, 4.x: C-side traps whose dispatch recomputed the limit
				    * (caml_check_urgent_gc, with nothing to do, sent to caml_update_young_limit) */
	CH_CNT__COUNT
};

/* Per-process state, BPF hash map `procs`, key = tgid.  Written by user space
 * at attach (bias, addresses, first geometric draw), then owned by BPF.  In
 * OCaml 4.x only the thread holding the master lock runs the runtime, so the
 * sampler state needs no atomics. */
/* ch_proc.layout: the 4.x live checks of the young_limit/young_ptr offsets. */
enum ch_layout {
	CH_LAYOUT_UNVERIFIED = 0, /* no invariant seen to hold yet: nothing is written */
	CH_LAYOUT_VERIFIED,       /* an invariant held that a wrong layout breaks: writes allowed */
	CH_LAYOUT_BAD,            /* an invariant broke: minor sampling stopped for good */
};

struct ch_proc {
	__u64 load_bias;            /* runtime vaddr - link-time vaddr of the executable */
	__u64 caml_state_sym;       /* link-time vaddr of the global `Caml_state` pointer (4.x) */
	__u64 something_to_do_sym;  /* link-time vaddr of `int caml_something_to_do` (4.x signals.c) */
	__u64 memprof_trigger_sym;  /* link-time vaddr of `value *caml_memprof_young_trigger` (4.x memprof.c) */
	__u64 final_todo_sym;       /* link-time vaddr of finalise.c's `to_do_hd` (finalisers ready to run), 0 if unknown */
	__u64 signals_pending_sym;  /* 4.x: link-time vaddr of signals.c's `static intnat signals_are_pending`, 0 if
				     * unknown (.symtab stripped) */
	__s64 next_sample_words;    /* memprof's next_rand_geom: 0-based index of the next sampled word */
	/* Channel A: the minor-heap sample point P of the current minor
	 * cycle.  minor_trig is the address just above the next sampled word
	 * (the word [minor_trig - 8, minor_trig) is sampled), or 0 when no
	 * word of this cycle is left to sample.  Valid while Caml_state's
	 * stat_minor_collections equals minor_epoch. */
	__u64 minor_trig;
	__u64 minor_epoch;
	__u8 minor_armed;           /* minor_epoch has been set once */
	__u8 minor_on;              /* sample the minor heap (an executor can write young_limit) */
	__u8 minor_observe;         /* take minor samples from the program's own Gc.Memprof, read-only */
	__u8 census_on;             /* follow sampled blocks (young/major sets, collection hooks) */
	__u8 ocaml5;                /* an OCaml 5 runtime: per-domain state, fibers (the 4.x fields unused) */
	__u8 first_frame;           /* OCaml 5: First_frame(sp) - sp, 8 (16 with frame pointers), runtime/caml/stack.h */
	/* 4.x: offsetof(caml_domain_state, young_limit) and (young_ptr), bytes:
	 * 0 and 8 from 4.13 on, 8 and 0 in 4.12 (runtime/caml/domain_state.tbl) */
	__u8 young_limit_off;
	__u8 young_ptr_off;
	/* 4.x: what the live checks found of that layout (enum ch_layout); no
	 * young_limit write is made before it is CH_LAYOUT_VERIFIED */
	__u8 layout;
	/* The window (bpf/alloc.bpf.c window_open): 1 if it waits for the
	 * minor heap to be armed (minor samples from traps), else 0 */
	__u8 window_minor;
	__u8 pad[2];
	/* Census: sample ids, and the fill of the tracking arrays (entries
	 * 0..young_n-1 of young_tracked, 0..major_n-1 of major_tracked).  Owned
	 * by BPF; 4.x runs the runtime under one lock, so plain updates. */
	__u64 next_sample_id;       /* ids start at 1 */
	__u32 young_n;
	__u32 major_n;
	__u32 pending_n;            /* major_tracked entries with unsent fate events (ring was full) */
	__u32 clean_phases;         /* major clean phases seen since attach (numbers the major cycles) */
	/* OCaml 5 (runtime/caml/domain_state.tbl, runtime/domain.c): where a
	 * thread finds its domain state, the domain id's offset in it, and the
	 * exported GC counters (link-time vaddrs). */
	__s64 tls_state_off;        /* &caml_state (a TLS pointer) - the thread pointer (%fs base), bytes */
	__u64 minor_count_sym;      /* `atomic_uintnat caml_minor_collections_count` (minor_gc.c) */
	__u64 major_count_sym;      /* `atomic_uintnat caml_major_cycles_completed` (major_gc.c) */
	__u64 compact_count_sym;    /* `atomic_uintnat caml_compactions_count` (shared_heap.c), 0 if absent (5.1) */
	__u32 dom_id_off;           /* offsetof(caml_domain_state, id): 280 in 5.1, 288 in 5.3 */
	__u32 memprof_trig_off;     /* offsetof(caml_domain_state, memprof_young_trigger): 472 in 5.3, 0 in 5.1 (none) */
	__u64 heap_state_sym;       /* OCaml 5: `struct global_heap_state caml_global_heap_state` (shared_heap.c) */
	__u32 major_cap;            /* OCaml 5: entries of major_tracked (slots are taken atomically) */
	__u32 pad6;
	__u64 ba_ops_sym;           /* link-time vaddr of `caml_ba_ops` when the bigarray probes are attached
				     * (custom samples with these ops are then left to them), else 0 */
	/* --malloc: [lo, hi) link-time ranges of the runtime functions whose
	 * malloc/mmap calls are left out (CH_RT_MEM_RANGES; unused: 0, 0) */
	__u64 rt_mem_lo[CH_RT_MEM_RANGES];
	__u64 rt_mem_hi[CH_RT_MEM_RANGES];
	/* --malloc: libc's own mmap calls (malloc arenas made inside free,
	 * thread stacks) are left out: the link-time vaddr of the mmap probe in
	 * libc (the probe's ip gives libc's load bias) and libc's code range */
	__u64 libc_mmap_vaddr;
	__u64 libc_text_lo, libc_text_hi;
	/* bpf_ktime_get_ns() when the minor heap was first armed (a run of
	 * sample points drawn from a known young_ptr; OCaml 5: in any domain),
	 * 0 if not yet: where a window that waits for it starts
	 * (bpf/alloc.bpf.c window_open).  Set by BPF only. */
	__u64 minor_start_ns;
	/* OCaml 5, the ptrace executor's interrupt protocol (struct
	 * ch_write_req recheck): link-time vaddrs of domain.c's all_domains
	 * (the array in 5.1 and 5.2, a pointer to it from 5.3: all_domains_ptr),
	 * `atomic_uintnat caml_major_slice_epoch` and `caml_pending_signals`;
	 * 0 if .symtab is stripped (then every write freezes the process), and
	 * the CH_OCAML5x_ offsets of the release. */
	__u64 all_domains_sym;
	__u64 slice_epoch_sym;
	__u64 pending_signals_sym;
	__u16 dom_internal_size;
	__u16 intr_pending_off;
	__u16 dom_internal_state_off;
	__u16 slice_epoch_off;
	__u16 ext_intr_off;
	__u8 all_domains_ptr;
	__u8 pad7;
	/* OCaml 5: offsetof(caml_domain_state, final_info) and (memprof), 0 if
	 * the release has none (memprof: 5.1, 5.2): what says whether a
	 * dispatch can still run OCaml code (minor5_dispatch_runs_ocaml) */
	__u16 final_info_off;
	__u16 memprof_off;
	/* The register executor (CH_EXEC_REGISTER): the young_trigger loads
	 * its probes perform, [0] at OCAML_PROBE_REG_TRIGGER, [1] at
	 * OCAML_PROBE_REG_TRIGGER_PENDING (4.x), [2] at OCAML_PROBE_REG_END
	 * (4.x: young_alloc_end), as found in the runtime's code
	 * (user/target/ocaml_runtime.h struct ocaml_reg_load) */
	struct ch_reg_load {
		__u8 dst;           /* destination register, x86 number (0 rax .. 15 r15) */
		__u8 base;          /* base register, x86 number */
		__u8 len;           /* instruction length, bytes: ip moves past it */
		__u8 store_len;     /* [2] only: the store of the loaded register that follows it, bytes */
		__s32 disp;         /* displacement from the base, bytes */
	} reg_load[3];
	/* The register executor, 4.x: link-time vaddrs of caml_update_young_limit
	 * and of caml_alloc_small_dispatch's code [lo, hi) (OCAML_PROBE_REG_URGENT),
	 * 0 if not planned */
	__u64 update_fn;
	__u64 dispatch_lo, dispatch_hi;
};

/* The window's gate, the `window_gate` global of alloc.bpf.c, set by user
 * space (sampler_open_window): closed while the probes are being
 * attached, then armed (the window opens at the first moment every kind is
 * sampled), or opened by force (the minor heap not armed yet). */
enum ch_window_gate {
	CH_GATE_CLOSED = 0,
	CH_GATE_ARMED = 1,
	CH_GATE_FORCED = 2,
};

/* The BPF object's fixed_census (alloc.bpf.c), set before the load: the
 * census is off for the object's life, or may be on (then each process's
 * ch_proc.census_on says); 0: not fixed. */
enum ch_fixed {
	CH_FIXED_OFF = 1,
	CH_FIXED_ON = 2,
};

/* OCaml 5: per-domain sampler state, map `domains` (the countdown of
 * Gc.Memprof's rand_binom runs per domain, as memprof.c's does in 5.3). */
struct ch_domain_key {
	__u64 dom_state;            /* runtime address of the caml_domain_state */
	__u32 tgid;
	__u32 pad;
};
struct ch_domain {
	__s64 next_sample_words;    /* 0-based index of the next sampled word */
	/* Minor heap, channel A per domain (minor5.bpf.h): the sample point
	 * of this domain's minor heap, as ch_proc.minor_trig on 4.x. */
	__u64 minor_trig;
	__u64 minor_epoch;          /* caml_minor_collections_count when drawn */
	__u8 minor_armed;
	__u8 pad[7];
};

/* An entry of the tracking arrays `young_tracked` (blocks in the minor
 * heap, emptied at every minor collection) and `major_tracked` (blocks in
 * the major heap, and entries whose fate event is still to be sent). */
struct ch_tracked {
	__u64 addr;                 /* the block (value pointer, runtime address) */
	__u64 sample_id;
	__u64 fate_ns;              /* pending: when the fate was seen */
	__u32 minor_gcs;            /* pending: stat_minor_collections then */
	__u32 major_gcs;            /* pending: stat_major_collections then */
	__u32 tgid;
	__u32 state;                /* CH_TRK_* */
	__u32 birth_minor_gcs;      /* young: stat_minor_collections when sampled (a collection not seen shows) */
	__u32 compactions;          /* major: stat_compactions when it entered the set (a compaction not seen shows) */
};
#define CH_TRK_DEAD 1u            /* dead or no longer followed: never checked again */
#define CH_TRK_PEND_PROMOTE 2u    /* its CH_FATE_PROMOTE is still to be sent */
#define CH_TRK_PEND_FATE 4u       /* its final fate (pend_kind) is still to be sent */
/* the final fate to send, in bits 8..15 of state */
#define CH_TRK_FATE_SHIFT 8

/* Ring-buffer record: what happened to a tracked sampled block, with the
 * runtime's collection counters at that moment. */
struct ch_fate_event {
	__u64 sample_id;            /* the sample event's sample_id */
	__u64 time_ns;              /* bpf_ktime_get_ns() when the collector decided */
	__u64 block_addr;           /* PROMOTE: the new (major-heap) address; else the block */
	__u32 minor_gcs;            /* Caml_state->stat_minor_collections (the running one not counted) */
	__u32 major_gcs;            /* Caml_state->stat_major_collections (completed cycles) */
	__u32 tgid;
	__u32 tracked;              /* NOTE_MAJOR_CLEAN: blocks in the major set after the pass */
	__u32 clean_phases;         /* NOTE_MAJOR_CLEAN: ch_proc.clean_phases, this one included */
	__u32 pad[6];               /* `kind` at the offset it has in struct ch_sample_event */
	__u8 kind;                  /* CH_FATE_* or CH_NOTE_MAJOR_CLEAN */
	__u8 pad2[3];
};

/* Which executor performs the young_limit writes (README *Minor heap*). */
enum ch_executor {
	CH_EXEC_OBSERVE = 0,  /* none: never write; minor samples only from the program's own Gc.Memprof */
	CH_EXEC_PTRACE = 1,   /* BPF queues the write per thread and stops the thread with SIGURG */
	CH_EXEC_KERNEL = 2,   /* bpf_probe_write_user in the probe itself */
	CH_EXEC_REGISTER = 3, /* nothing written: the probe performs the runtime's young_trigger load with the
			       * sample point folded in, and the runtime publishes it (user/collect/regexec.h) */
};

/* Map `write_req`, key = tid: the write the ptrace executor must perform in
 * that thread's SIGURG signal-delivery-stop, before the thread runs another
 * instruction.  The executor writes `value` to `addr` only if `addr` still
 * holds `expect` and the int at `pending_addr` (caml_something_to_do) is 0:
 * otherwise the runtime changed the limit meanwhile (a signal, a GC
 * request), and its value wins. */
struct ch_write_req {
	__u64 addr;          /* &Caml_state->young_limit (runtime address) */
	__u64 expect;        /* young_limit as the probe saw it */
	__u64 value;         /* what to store: max(young_trigger, memprof trigger, P) */
	__u64 pending_addr;  /* &caml_something_to_do (runtime address); 0: no such check (OCaml 5) */
	__u32 freeze;        /* OCaml 5 without the flags below (a binary without .symtab): stop every
			      * other thread of the process around the check and the write, so that no
			      * other thread's interrupt (UINTNAT_MAX) can be erased */
	__u32 recheck;       /* OCaml 5: the interrupt protocol below, no other thread stopped */
	/* OCaml 5, at the return of a dispatch that camlheap's own sample
	 * point caused: once `value` is written, also put back the domain's
	 * action_pending (8 bytes at restore_addr, 0: none) as it was before
	 * that trap, whose caml_do_pending_actions_res cleared it (5.4.1
	 * runtime/signals.c:346).  Channel I/O and blocking sections process
	 * pending actions (finalisers, a GC poll) only while it is set
	 * (io.c check_pending, signals.c caml_enter_blocking_section), so a
	 * trap the program would not have taken must leave it as it was. */
	__u64 restore_addr;
	__u64 restore_value;
	/* OCaml 5, `recheck`: the flags another thread sets before it stores
	 * UINTNAT_MAX into this domain's young_limit, as caml_reset_young_limit
	 * re-checks them (5.4.1 runtime/domain.c:1817-1849, 5.1.0 :1524-1540),
	 * plus the signals' (signals.c caml_record_signal).  An interrupt is
	 * in flight when intr, ext or signals is nonzero or *epoch < *gepoch.
	 * The executor writes nothing if one is in flight before the write,
	 * and stores UINTNAT_MAX itself if one is after it: an interrupt
	 * stored between its read and its write is put back
	 * (user/collect/ptexec.c serve_recheck). */
	__u64 intr_addr;     /* &all_domains[id].interruptor.interrupt_pending (caml_send_interrupt) */
	__u64 ext_addr;      /* &dom->requested_external_interrupt (the systhreads tick) */
	__u64 signals_addr;  /* &caml_pending_signals[0] (NSIG_WORDS is 1 on Linux amd64) */
	__u64 epoch_addr;    /* &dom->major_slice_epoch */
	__u64 gepoch_addr;   /* &caml_major_slice_epoch */
	/* bpf_ktime_get_ns() (CLOCK_MONOTONIC) as the probe asked for the
	 * stop: the stop the target pays runs from here, inside its trap, to
	 * the executor's PTRACE_CONT (struct ptexec_stats stopped_s) */
	__u64 stamp_ns;
};

/* Map `dispatch_inflight`, key = {tid, stack pointer at entry}: the
 * arguments of a caml_alloc_small_dispatch call, for its return probe,
 * where the redone allocation's place is known. */
struct ch_inflight_key {
	__u64 sp;
	__u32 tid;
	__u32 pad;
};
struct ch_inflight {
	__u64 wosize;
	__u64 lens;          /* encoded_alloc_lens (unsigned char *), 0 from C */
	__u32 flags;         /* CAML_DO_TRACK 1 | CAML_FROM_CAML 2 (4.13 runtime/caml/memory.h) */
	__u32 nallocs;
};

/* Map `frametable`: key = link-time return address (pc - load_bias) of the
 * executable's descriptors; map `frametable_rt`: key = runtime return
 * address, for the descriptors of plugins (.cmxs), which each have their own
 * bias.  Value: frame size in bytes as stored in the frame descriptor (low
 * two bits are flags; 0xFFFF marks the return into C of a callback). */
struct ch_frame_key {
	__u64 retaddr;
};
struct ch_frame_val {
	__u16 frame_size;
	__u16 pad[3];
};

/* Ring-buffer record: one sample event.  `frames` is present (nframes
 * entries, leaf first, runtime addresses) only when `has_frames` is set:
 * the first time the kernel sees this stack id.  Later events carry the id
 * alone; user space caches stacks by id.  Keep `frames` last. */
/* `camlheap serve`'s discovery (bpf/discover.bpf.c): a process exec'd
 * (tgid: the process), or a followed process forked one (tgid: the child,
 * parent: the followed process). */
enum ch_disc_kind {
	CH_DISC_EXEC = 0,
	CH_DISC_FORK = 1,
};

struct ch_exec_event {
	__u32 tgid;
	__u32 kind;   /* enum ch_disc_kind */
	__u32 parent; /* CH_DISC_FORK: the forking process */
	__u32 dev;    /* CH_DISC_EXEC: the program file's device, the kernel's dev_t (MAJOR << 20 | MINOR,
		       * include/linux/kdev_t.h), 0 if unread ... */
	__u64 ino;    /* ... and its inode: what /proc/PID/exe names, known even once the process is gone */
};

/* Processes the service follows (discover.bpf.c `followed`, tgid -> 1):
 * their forks are reported. */
#define CH_DISC_FOLLOWED_MAX 4096

/* The largest ch_sample_event.rate_shift (samples kept with probability
 * 2^-24 at the most). */
#define CH_MAX_RATE_SHIFT 24

struct ch_sample_event {
	__u64 stack_id;             /* 64-bit hash of the frames and termination reason */
	__u64 time_ns;              /* bpf_ktime_get_ns() */
	__u64 block_addr;           /* the sampled block (an OCaml value pointer), 0 if none */
	__u64 size_words;           /* words the sampling decision was made over */
	__u64 sample_id;            /* census: this sampled block's id (fate events name it), 0 if not followed */
	__u32 minor_gcs;            /* Caml_state->stat_minor_collections at the allocation */
	__u32 major_gcs;            /* Caml_state->stat_major_collections at the allocation */
	__u32 clean_phases;         /* census: ch_proc.clean_phases at the allocation (its major cycle) */
	__u32 compactions;          /* Caml_state->stat_compactions at the allocation */
	__u32 tgid;
	__u32 tid;
	__u32 nsamples;             /* samples in this block (memprof's n_samples) */
	__u8 kind;                  /* enum ch_alloc_kind */
	__u8 term;                  /* enum ch_stack_term */
	__u8 has_frames;
	__u8 alloc_idx;             /* minor: which allocation of a combined (Comballoc) block, 0 = lowest address */
	__u32 nframes;              /* depth of the walked stack */
	__u16 nallocs;              /* minor: allocations combined in the block (1 without Comballoc) */
	__u8 in_minor_heap;         /* the block lies in the minor heap (census: followed to the next minor collection) */
	__u8 ext_flags;             /* CH_KIND_BIGARRAY: CH_BA_*; CH_KIND_MALLOC: enum ch_malloc_fn
				     * | CH_MALLOC_OUTSIDE; else 0 */
	__u32 domain;               /* OCaml 5: Caml_state->id of the allocating domain (0 = main); 4.x: 0 */
	__u32 rate_shift;           /* k: the samples were kept out of lambda's with probability 2^-k (an
				     * overhead budget, `camlheap serve`); each stands for 2^k samples */
	__u64 custom_ops;           /* CH_KIND_CUSTOM: the block's struct custom_operations * (runtime address;
				     * its first field names the type, runtime/caml/custom.h), else 0 */
	__u64 frames[CH_MAX_FRAMES];
};

#define CH_EVENT_HEADER_BYTES ((unsigned long)&((struct ch_sample_event *)0)->frames)

/* OCaml 4.13/4.14 amd64 `caml_domain_state` offsets (bytes), checked with
 * offsetof against the installed headers (Debian's 4.13.1
 * /usr/lib/ocaml/caml/domain_state.{h,tbl}).  4.14 only appends fields. */
#define CH_OCAML4_YOUNG_LIMIT 0
#define CH_OCAML4_YOUNG_PTR 8
/* 4.12 (and 4.10, 4.11) put young_ptr first; every other field read here
 * sits where 4.13 has it (4.12.1 runtime/caml/domain_state.tbl). */
#define CH_OCAML412_YOUNG_LIMIT 8
#define CH_OCAML412_YOUNG_PTR 0
#define CH_OCAML4_YOUNG_START 32
#define CH_OCAML4_YOUNG_END 40
#define CH_OCAML4_YOUNG_ALLOC_START 48
#define CH_OCAML4_YOUNG_ALLOC_END 56
#define CH_OCAML4_YOUNG_TRIGGER 72
#define CH_OCAML4_BOTTOM_OF_STACK 208
#define CH_OCAML4_LAST_RETURN_ADDRESS 216
#define CH_OCAML4_STAT_MINOR_COLLECTIONS 320
#define CH_OCAML4_STAT_MAJOR_COLLECTIONS 328
#define CH_OCAML4_STAT_COMPACTIONS 352
#define CH_OCAML4_STAT_HEAP_WSZ 336
#define CH_OCAML4_STAT_HEAP_CHUNKS 368
/* sizeof(heap_chunk_head), right before each major-heap chunk
 * (runtime/caml/major_gc.h): 4.14 made redarken_first a two-word
 * mark_entry */
#define CH_OCAML4_CHUNK_HEAD 48
#define CH_OCAML414_CHUNK_HEAD 56
/* the GC work caml_check_urgent_gc does (4.14.2 runtime/minor_gc.c) */
#define CH_OCAML4_REQUESTED_MAJOR_SLICE 272
#define CH_OCAML4_REQUESTED_MINOR_GC 280

/* struct caml_context {bottom_of_stack; last_retaddr; gc_regs} sits at
 * sp + 16 in the 0xFFFF callback frame (4.13.1 runtime/caml/stack.h:80-84,
 * amd64.S:484-488). */
#define CH_OCAML4_CALLBACK_LINK 16

/* OCaml 5.1, 5.2, 5.3 and 5.4 amd64 `caml_domain_state` offsets (bytes), checked
 * with offsetof against each release's installed headers by
 * tests/test_versions.py (runtime/caml/domain_state.tbl; 5.3 inserted
 * allocated_words_direct, which moved `id` from 280 to 288). */
#define CH_OCAML5_YOUNG_PTR 8
#define CH_OCAML5_YOUNG_START 16
#define CH_OCAML5_YOUNG_END 24
#define CH_OCAML5_YOUNG_TRIGGER 32
#define CH_OCAML5_CURRENT_STACK 40
#define CH_OCAML5_ACTION_PENDING 56
#define CH_OCAML5_C_STACK 64            /* struct c_stack_link * of the thread running OCaml (fiber.h) */
#define CH_OCAML53_MEMPROF_YOUNG_TRIGGER 472
#define CH_OCAML53_MEMPROF 464          /* Caml_state->memprof (struct memprof_domain_s *) */
/* Private layouts of the 5.3 runtime (runtime/domain.c struct dom_internal,
 * runtime/memprof.c struct memprof_domain_s and entries_s): no header has
 * them, so tests/test_versions.py checks them against the runtime's DWARF
 * (gdb ptype /o).  Used only to read a running Gc.Memprof's rate. */
#define CH_OCAML53_DOM_INTERNAL_STATE 8 /* all_domains[i].state */
#define CH_OCAML54_DOM_INTERNAL_STATE 16 /* 5.4 puts `pthread_t tid` before it */
#define CH_OCAML53_MEMPROF_CONFIG 64    /* memprof_domain_s.entries.config (a Gc.Memprof.t block) */
#define CH_OCAML51_ID 280
#define CH_OCAML52_ID 280               /* 5.2 has memprof_young_trigger, not yet allocated_words_direct */
#define CH_OCAML52_MEMPROF_YOUNG_TRIGGER 464
#define CH_OCAML53_ID 288
/* 5.4 adds allocated_words_suspended, allocated_words_resumed,
 * current_ramp_up_allocated_words_diff and gc_policy before `id` */
#define CH_OCAML54_ID 320
#define CH_OCAML54_MEMPROF 496
#define CH_OCAML54_MEMPROF_YOUNG_TRIGGER 504
/* The flags behind an interrupt of a domain that caml_reset_young_limit
 * re-checks after publishing young_limit (5.1.0 runtime/domain.c:1524-1540,
 * 5.4.1 :1817-1849), read by the ptrace executor around its write
 * (user/collect/ptexec.c): caml_domain_state's major_slice_epoch and
 * requested_external_interrupt (the systhreads tick), per release. */
#define CH_OCAML51_SLICE_EPOCH 144
#define CH_OCAML52_SLICE_EPOCH 144
#define CH_OCAML53_SLICE_EPOCH 152
#define CH_OCAML54_SLICE_EPOCH 184
#define CH_OCAML51_EXT_INTERRUPT 248
#define CH_OCAML52_EXT_INTERRUPT 248
#define CH_OCAML53_EXT_INTERRUPT 256
#define CH_OCAML54_EXT_INTERRUPT 288
/* runtime/domain.c's private struct dom_internal (checked against the
 * runtime's DWARF): its size (the stride of all_domains, an array of
 * Max_domains in 5.1 and 5.2, a pointer to caml_params->max_domains entries
 * from 5.3) and the offset of interruptor.interrupt_pending, the flag
 * caml_send_interrupt sets before it stores UINTNAT_MAX (stop-the-world
 * requests). */
#define CH_OCAML51_DOM_INTERNAL_SIZE 280
#define CH_OCAML51_INTERRUPT_PENDING 136
#define CH_OCAML52_DOM_INTERNAL_SIZE 280
#define CH_OCAML52_INTERRUPT_PENDING 136
#define CH_OCAML53_DOM_INTERNAL_SIZE 264
#define CH_OCAML53_INTERRUPT_PENDING 128
#define CH_OCAML54_DOM_INTERNAL_SIZE 272
#define CH_OCAML54_INTERRUPT_PENDING 136
#define CH_OCAML51_DOM_INTERNAL_STATE 8
#define CH_OCAML52_DOM_INTERNAL_STATE 8
/* What decides whether caml_do_pending_actions_res runs OCaml code after
 * its caml_handle_gc_interrupt (5.3 runtime/signals.c:333-365; 5.1.0
 * :301-336 and 5.2.0 likewise, without memprof callbacks): a bit of
 * caml_pending_signals, requested_external_interrupt (above), the
 * finalisers' to-do list (caml_domain_state's final_info, checked against
 * the headers; struct caml_final_info's todo_head, runtime/caml/finalise.h,
 * the same in 5.1-5.4) and, from 5.3, memprof_domain_s.pending (memprof.c,
 * checked against the runtime's DWARF; the same in 5.4).  Read by
 * bpf/ocaml5/minor.bpf.h minor5_dispatch_runs_ocaml. */
#define CH_OCAML51_FINAL_INFO 168
#define CH_OCAML52_FINAL_INFO 168
#define CH_OCAML53_FINAL_INFO 176
#define CH_OCAML54_FINAL_INFO 208
#define CH_OCAML5_FINAL_TODO_HEAD 80
#define CH_OCAML53_MEMPROF_PENDING 81
/* struct stack_info {sp@0, exception_ptr@8, handler@16, ...} and
 * struct stack_handler {handle_value, handle_exn, handle_effect, parent@24}
 * (5.1/5.3 runtime/caml/fiber.h); a 0xFFFF frame is followed by the
 * Stack_header_size (32) bytes of caml_runstack's or caml_start_program's
 * header (runtime/caml/stack.h). */
#define CH_OCAML5_STACK_SP 0
#define CH_OCAML5_STACK_HANDLER 16
#define CH_OCAML5_HANDLER_PARENT 24
#define CH_OCAML5_STACK_HEADER 32
#define CH_FRAME_RETURN_TO_C 0xFFFF

#endif
