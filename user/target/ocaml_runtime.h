/* ocaml_runtime.h -- recognise a native OCaml executable, its runtime
 * version, and plan where to put the probes (README *How it works*; the
 * runtime function behind each probe is named below).
 */
#ifndef CH_OCAML_RUNTIME_H
#define CH_OCAML_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "target/elf_image.h"

enum ocaml_probe {
	OCAML_PROBE_TRACK_ALLOC_SHR = 0, /* caml_memprof_track_alloc_shr(value block) */
	OCAML_PROBE_TRACK_CUSTOM,        /* caml_memprof_track_custom(value block, mlsize_t bytes) */
	OCAML_PROBE_TRACK_INTERNED,      /* caml_memprof_track_interned(header_t *block, header_t *end) */
	OCAML_PROBE_REGISTER_FRAMETABLE, /* caml_register_frametable(intnat *table): Dynlink (optional) */
	/* Minor heap, channel A (README *Minor heap*).  All four or none:
	 * without them the minor heap is not sampled, and the report says so. */
	OCAML_PROBE_DISPATCH,            /* caml_alloc_small_dispatch entry (wosize, flags, nallocs, lens) */
	OCAML_PROBE_DISPATCH_RET,        /* its return (uretprobe: a C function called from C only) */
	OCAML_PROBE_REARM_UPDATE,        /* caml_update_young_limit, the jcc after the young_limit store */
	OCAML_PROBE_REARM_PENDING,       /* caml_do_pending_actions_exn, the call after its inlined store */
	/* observe: the program's own Gc.Memprof samples a minor block (optional) */
	OCAML_PROBE_TRACK_YOUNG,         /* caml_memprof_track_young(wosize, from_caml, nallocs, lens) */
	/* Census (README *Census*): all three or none; no arguments are
	 * read, so each sits on the first emulated instruction the function
	 * always executes. */
	OCAML_PROBE_MINOR_UPDATE,        /* caml_memprof_minor_update: end of a minor collection */
	OCAML_PROBE_CLEAN_PHASE,         /* caml_memprof_update_clean_phase: a major cycle's marking is over */
	OCAML_PROBE_COMPACTION,          /* caml_memprof_invert_tracked: a compaction is moving blocks */
	/* OCaml 5 (README *OCaml 5*): direct major, custom and
	 * unmarshalled allocations. */
	OCAML_PROBE_SAMPLE_BLOCK,        /* 5.3: caml_memprof_sample_block(block, allocated, sampled, source) */
	OCAML_PROBE_ALLOC_SHR_RET,       /* 5.1: caml_alloc_shr return (uretprobe) */
	OCAML_PROBE_ALLOC_SHR_RESERVED_RET, /* 5.1: caml_alloc_shr_reserved return */
	OCAML_PROBE_ALLOC_SHR_NOEXC_RET, /* 5.1: caml_alloc_shr_noexc return */
	OCAML_PROBE_CUSTOM_MEM,          /* 5.1: caml_alloc_custom_mem(ops, bsz, mem) entry */
	OCAML_PROBE_CUSTOM_MEM_RET,      /* 5.1: its return (the block) */
	/* OCaml 5 minor heaps, channel A with the process frozen per write
	 * (bpf/minor5.bpf.h): all three or none. */
	OCAML_PROBE_DISPATCH5,           /* caml_alloc_small_dispatch(dom_st, wosize, flags, nallocs, lens) entry */
	OCAML_PROBE_DISPATCH5_RET,       /* its return */
	/* the return before the entry: probes attach in this order, and a
	 * young_trigger lent at the entry must always find the return probe
	 * that gives it back (kernel executor, bpf/minor5.bpf.h) */
	OCAML_PROBE_RESET_LIMIT_RET,     /* caml_reset_young_limit return: re-arm (ptrace), give the loan back (kernel) */
	OCAML_PROBE_RESET_LIMIT,         /* its entry (dom_st): which domain (ptrace), lend young_trigger (kernel) */
	OCAML_PROBE_REGISTER_FRAMETABLES, /* 5.x: caml_register_frametables(void **table, int n): Dynlink (optional) */
	OCAML_PROBE_SAMPLE_YOUNG5,       /* 5.3: caml_memprof_sample_young(wosize, from_caml, nallocs, lens): observe (optional) */
	/* OCaml 5 census (bpf/census5.bpf.h): the first two, and the third on 5.3, or none */
	OCAML_PROBE_MINOR5,              /* caml_final_update_last_minor(caml_domain_state *d) */
	OCAML_PROBE_CYCLE5,              /* caml_cycle_heap_from_stw_single(void); 5.1: caml_cycle_heap_stw(void) */
	OCAML_PROBE_COMPACT5,            /* 5.3: caml_compact_heap (Gc.compact) */
	/* Bigarrays, every version, optional (bpf/alloc.bpf.c on_ba_alloc*);
	 * returns before entries, as they attach in this order */
	OCAML_PROBE_BA_ALLOC_RET,        /* caml_ba_alloc return: the block, its data size */
	OCAML_PROBE_BA_ALLOC,            /* caml_ba_alloc(flags, num_dims, data, dim) entry: data given or not */
	OCAML_PROBE_MAPPED_ALLOC_RET,    /* caml_unix_mapped_alloc return (Unix.map_file) */
	OCAML_PROBE_MAPPED_ALLOC,        /* its entry */
	OCAML_PROBE_FATAL_EXN,           /* caml_fatal_uncaught_exception(value exn): the end reason (optional) */
	/* The register executor (collect/regexec.h): the young_trigger load it
	 * performs itself; attached instead of the re-arm (4.x) and reset
	 * (5.x) probes.  Planned where found (rt->regexec_ok). */
	OCAML_PROBE_REG_TRIGGER,         /* 4.x caml_update_young_limit, 5.x caml_reset_young_limit: the load */
	OCAML_PROBE_REG_TRIGGER_PENDING, /* 4.x caml_do_pending_actions_exn: the load of its inlined copy */
	/* the re-check before the load it checks: probes attach in this order */
	OCAML_PROBE_REG_END_RET,         /* 4.x caml_update_young_limit: the ret right after its young_alloc_end store */
	OCAML_PROBE_REG_END,             /* its load of young_alloc_end (both or neither; optional) */
	OCAML_PROBE_REG_URGENT,          /* 4.x caml_check_urgent_gc entry: from a C-side dispatch, recompute (optional) */
	OCAML_PROBE__COUNT
};

struct ocaml_probe_point {
	const char *symbol;
	uint64_t vaddr;        /* link-time address of the probed instruction */
	uint64_t file_offset;  /* what the uprobe takes */
	unsigned skipped;      /* bytes skipped past the entry to reach an emulated instruction */
	bool emulated;         /* the kernel emulates the instruction (push/call/jmp/jcc/nop) */
	bool present;          /* planned; false only for an optional probe whose symbol is absent */
	bool retprobe;         /* a uretprobe on the function (vaddr is its entry) */
};

/* A load of a runtime field into a register, `mov disp(%base),%dst` (REX.W
 * 8b /r, ModRM mod 01 or 10, no SIB): what the register executor performs
 * itself with the sample point folded in (collect/regexec.h). */
struct ocaml_reg_load {
	uint32_t at;   /* bytes from the function's start */
	uint8_t len;   /* the instruction's length, bytes */
	uint8_t dst;   /* destination register (x86 number: 0 rax .. 15 r15) */
	uint8_t base;  /* base register (same numbering) */
	int32_t disp;  /* displacement, bytes */
};

struct ocaml_release; /* releases.h: what camlheap knows of a release line */

struct ocaml_runtime {
	char version[32];      /* "4.13.1" */
	const struct ocaml_release *release; /* its line, NULL if the release is unknown */
	int major, minor;
	uint64_t caml_state_sym; /* link-time vaddr of the global `Caml_state` (4.x) */
	uint64_t something_to_do_sym; /* link-time vaddr of `int caml_something_to_do` (4.x) */
	uint64_t memprof_trigger_sym; /* link-time vaddr of `value *caml_memprof_young_trigger` (4.x) */
	uint64_t final_todo_sym;      /* link-time vaddr of finalise.c's `static struct to_do *to_do_hd`
				       * (finalisers ready to run), 0 if not found */
	uint64_t signals_pending_sym; /* link-time vaddr of signals.c's `static intnat volatile
				       * signals_are_pending` (4.x), 0 if unknown (.symtab stripped) */
	uint64_t memprof_lambda_sym;  /* link-time vaddr of memprof.c's `static double lambda`, 0 if
				       * unknown (.symtab stripped): Gc.Memprof's rate, 0 when stopped */
	/* OCaml 5 only (runtime/caml/domain_state.tbl; runtime/domain.c's TLS caml_state) */
	int64_t tls_state_off;   /* TLS `caml_state` relative to the thread pointer, bytes */
	uint64_t minor_count_sym, major_count_sym, compact_count_sym; /* exported GC counters (0: absent) */
	uint32_t dom_id_off;     /* offsetof(caml_domain_state, id) */
	uint32_t memprof_trig_off; /* offsetof(caml_domain_state, memprof_young_trigger), 0: none (5.1) */
	uint32_t memprof_off;      /* offsetof(caml_domain_state, memprof), 0: no working Gc.Memprof (5.1, 5.2) */
	uint32_t dom_internal_state_off; /* offsetof(struct dom_internal, state), domain.c's private layout (5.3+) */
	uint64_t heap_state_sym;   /* 5.x: `struct global_heap_state caml_global_heap_state` */
	uint64_t ba_ops_sym;       /* link-time vaddr of `caml_ba_ops` if the bigarray probes are planned, else 0 */
	uint64_t all_domains_sym;  /* 5.x: link-time vaddr of domain.c's `static dom_internal *all_domains`
				    * (5.3+; all_domains_ptr) or of the array itself (5.1, 5.2), 0 if unknown
				    * (.symtab stripped): a running Gc.Memprof's rate (5.3+), the interrupt
				    * flags of the ptrace executor */
	bool all_domains_ptr;
	/* 5.x: link-time vaddrs of `caml_major_slice_epoch` and
	 * `caml_pending_signals` (0: unknown), and the release's offsets
	 * (struct ocaml_release) for the ptrace executor's interrupt check */
	uint64_t slice_epoch_sym, pending_signals_sym;
	uint16_t slice_epoch_off, ext_intr_off, dom_internal_size, intr_pending_off;
	uint16_t final_info_off;   /* 5.x: offsetof(caml_domain_state, final_info) */
	bool gc_stats_ptr;         /* 5.x: sampled_gc_stats is a pointer (5.3), else the array itself (5.1, 5.2) */
	uint64_t gc_stats_sym;     /* 5.x: gc_stats.c's `sampled_gc_stats` (5.1: the array; 5.3: a pointer to it),
				    * 0 if unknown (.symtab stripped): the major heap's size */
	uint64_t params_sym;       /* 5.3: `const struct caml_params *const caml_params` (max_domains), 0 if unknown */
	/* 4.x: offsetof(caml_domain_state, young_limit) and (young_ptr), bytes
	 * (CH_OCAML4_* from 4.13, CH_OCAML412_* in 4.12) */
	uint8_t young_limit_off, young_ptr_off;
	bool layout_from_code;   /* 4.x: caml_update_young_limit's own stores confirmed young_limit_off
				  * (ocaml_runtime_limit_layout returned 1, the check not skipped) */
	bool release_known;      /* the version is one camlheap was built and tested for, and the runtime's code
				  * agrees with its layout; false: profiled read-only (minor_ok false, minor_why says why) */
	bool frame_pointers;     /* runtime built with --enable-frame-pointers (caml_c_call starts push %rbp; mov %rsp,%rbp) */
	const char *unmarshal_why; /* unmarshalled blocks are not sampled: why (NULL if they are) */
	bool minor_ok;           /* every minor-heap probe and symbol was found */
	/* The register executor's sites (collect/regexec.h): the young_trigger
	 * loads it performs itself, in 4.x caml_update_young_limit [0] and
	 * caml_do_pending_actions_exn's inlined copy [1], in 5.x
	 * caml_reset_young_limit [0]; regexec_ok if every one was found
	 * (probes OCAML_PROBE_REG_TRIGGER / _REG_TRIGGER_PENDING). */
	bool regexec_ok;
	bool census_ok;          /* the three collection probes were found */
	char census_why[256];    /* if not, why */
	char minor_why[256];     /* if not, why (for the report's first line) */
	struct ocaml_probe_point probes[OCAML_PROBE__COUNT];
	struct ocaml_reg_load reg_trigger[3]; /* the loads of OCAML_PROBE_REG_TRIGGER, _PENDING and _END */
	unsigned reg_end_store_len;           /* the store after OCAML_PROBE_REG_END's load, bytes */
	uint64_t update_fn, dispatch_lo, dispatch_hi; /* OCAML_PROBE_REG_URGENT: link-time vaddrs of
						       * caml_update_young_limit, caml_alloc_small_dispatch's [lo, hi) */
};

enum ocaml_detect_result {
	OCAML_OK = 0,
	OCAML_NOT_OCAML,          /* no caml_frametable / caml_start_program */
	OCAML_BYTECODE,           /* the bytecode interpreter (ocamlrun) or a -custom bytecode executable */
	OCAML_UNSUPPORTED_VERSION,
	OCAML_MISSING_SYMBOLS,
};

/* The supported release lines, for messages: "4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4". */
extern const char ocaml_runtime_supported[];

/* Inspect `img`, called `name` in messages (the executable's real path).
 * On OCAML_OK fills *rt.  Otherwise writes a one-line explanation (what is
 * wrong, what to do; without the PID, which the caller prefixes) into msg.
 *
 * Supported, on x86-64: the releases of ocaml_runtime_supported, read from
 * Sys.ocaml_version in the executable (elf_image_find_ocaml_version); 4.x
 * at any patch level, 5.x at the tested ones (5.1.0, 5.2.0, 5.3.0, 5.4.1).  A release
 * with a suffix (5.4.0+dev0, 5.3.0~alpha1: a development or pre-release
 * build), any other line, or a 5.x runtime whose release is unknown is
 * refused (OCAML_UNSUPPORTED_VERSION), as is a 4.x runtime whose code
 * contradicts its release's domain-state layout (caml_update_young_limit's
 * stores, ocaml_runtime_limit_layout).  Read-only (OCAML_OK with
 * rt->release_known false and minor_ok false: nothing is ever written
 * into the process) are a 4.x runtime whose release is unknown (Stdlib.Sys
 * not linked) and an untested 5.x patch release. */
enum ocaml_detect_result ocaml_runtime_detect(const struct elf_image *img, const char *name, struct ocaml_runtime *rt,
					      char *msg, size_t msglen);

/* Length of the x86-64 instruction at `code` if it is one of the prologue
 * forms camlheap knows how to step over without the argument registers
 * rdi/rsi/rdx/rcx changing (reg-reg mov into another register, a
 * rip-relative load into another register, pxor, sub/add imm to rsp,
 * endbr64); 0 otherwise.  Exposed for the unit tests. */
unsigned ocaml_runtime_skippable_insn(const uint8_t *code, size_t len);

/* Find the re-arm point inside `code` (the bytes of a function at link-time
 * vaddr `fn`, `len` long): the first instruction after the runtime's
 * young_limit recomputation, recognised by its tail `mov
 * caml_something_to_do(%rip),%eax; test %eax,%eax; je ...` (the rip-relative
 * load must address `std_sym`).  With `call_target` nonzero, the point is
 * the `call call_target` that follows that tail (the inlined copy in
 * caml_do_pending_actions_exn); otherwise it is the `je` itself.  Returns
 * the point's offset from `fn`, or -1.  Source: 4.13.1 runtime/signals.c
 * caml_update_young_limit and caml_do_pending_actions_exn, as GCC compiled
 * them in Debian's libasmrun.a (objdump). */
long ocaml_runtime_find_rearm(const uint8_t *code, size_t len, uint64_t fn, uint64_t std_sym, uint64_t call_target);

/* What caml_update_young_limit's code (`code`, `len` bytes at link-time
 * vaddr `fn`) does with Caml_state's fields, `cs_sym` being the link-time
 * vaddr of the global `Caml_state` pointer: the byte offsets it stores to
 * (young_limit) and loads from (young_trigger, young_alloc_end), up to its
 * first ret.  Source: 4.12.1-4.14.2 runtime/signals.c
 * caml_update_young_limit (`young_limit = max(caml_memprof_young_trigger,
 * young_trigger); if (caml_something_to_do) young_limit = young_alloc_end`),
 * as GCC compiles it.  Returns 1 and fills *store_off with the one offset
 * stored to if every store went there and both `trigger_off` and
 * `alloc_end_off` were loaded; 0 if the code is not of a form recognised
 * (an instruction outside the small set decoded, no store); -1 if it is and
 * contradicts the layout (a store elsewhere, or a load missing), *store_off
 * then holding the first store's offset. */
int ocaml_runtime_limit_layout(const uint8_t *code, size_t len, uint64_t fn, uint64_t cs_sym, unsigned trigger_off,
			       unsigned alloc_end_off, unsigned *store_off);


/* Find the first load of the 64-bit field at byte offset `disp` of the
 * structure a function works on, walking its code (`code`, `len` bytes at
 * link-time vaddr `fn`) from the start: for OCaml 5 (`cs_sym` 0) the
 * structure is the first argument (caml_reset_young_limit(dom_st): %rdi,
 * until something writes it); for 4.x the one the global `Caml_state`
 * points to (`cs_sym`, its link-time vaddr: a register loaded from it
 * rip-relatively).  The walk follows only the forms these prologues use
 * (mov/cmp/test, cmovcc, mov $imm, sub/add $imm8 on %rsp, movl $imm to
 * memory, call, endbr64; a call forgets the caller-saved registers) and
 * gives up at any other.  Sources: 5.1.0-5.4.1 runtime/domain.c
 * caml_reset_young_limit, 4.12.1-4.14.2 runtime/signals.c
 * caml_update_young_limit and caml_do_pending_actions_exn, as GCC compiles
 * them (objdump of each toolchain's libasmrun.a).  Returns 0 and fills
 * *out, or -1. */
int ocaml_runtime_find_field_load(const uint8_t *code, size_t len, uint64_t fn, uint64_t cs_sym, unsigned disp,
				  struct ocaml_reg_load *out);

/* In 4.x caml_update_young_limit (`code`, `len` bytes at link-time vaddr
 * `fn`; `cs_sym` the global Caml_state's link-time vaddr): the tail that
 * runs when caml_something_to_do is set, `young_limit = young_alloc_end;
 * return` (4.12.1-4.14.2 runtime/signals.c): the load of young_alloc_end
 * (byte `end_off` of Caml_state) into *load, the store of that register
 * into `limit_off` of the same base that follows it at once (its length
 * into *store_len), and the `ret` right after the store.  Returns 0, or -1
 * if the code is not of that form (the register executor then leaves
 * those stores alone). */
int ocaml_runtime_find_end_store(const uint8_t *code, size_t len, uint64_t fn, uint64_t cs_sym, unsigned end_off,
				 unsigned limit_off, struct ocaml_reg_load *load, unsigned *store_len);

/* Find finalise.c's `to_do_hd` from the code of caml_final_do_calls_exn
 * (`code`, `len` bytes at link-time vaddr `fn`): its first `cmpq $0x0,
 * rel32(%rip)` (48 83 3d rel32 00) tests it (4.13.1 runtime/finalise.c:171,
 * `to_do_hd != NULL`).  Returns the variable's link-time vaddr, or 0. */
uint64_t ocaml_runtime_find_final_todo(const uint8_t *code, size_t len, uint64_t fn);

/* Length of the x86-64 instruction at `code` if it is a plain data
 * instruction that cannot change control flow (mov/lea/cmp/test/add/sub/
 * and/or/xor between registers and memory, with or without an immediate,
 * an %fs prefix, REX), 0 otherwise.  Used to reach the first emulated
 * instruction of a function whose arguments are not read: it executes
 * whenever the function is entered. */
unsigned ocaml_runtime_plain_insn_len(const uint8_t *code, size_t len);

/* True if the kernel's uprobe code emulates the instruction at `code`
 * instead of single-stepping it: push reg, nop, call rel32, jmp rel, jcc
 * (arch/x86/kernel/uprobes.c branch_setup_xol_ops / push_setup_xol_ops). */
bool ocaml_runtime_insn_emulated(const uint8_t *code, size_t len);

#endif
