/* ocaml_runtime.c -- see ocaml_runtime.h. */
#include "target/ocaml_runtime.h"
#include "target/releases.h"

#include "camlheap.h"

#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const probe_symbols[OCAML_PROBE__COUNT] = {
	[OCAML_PROBE_TRACK_ALLOC_SHR] = "caml_memprof_track_alloc_shr",
	[OCAML_PROBE_TRACK_CUSTOM] = "caml_memprof_track_custom",
	[OCAML_PROBE_TRACK_INTERNED] = "caml_memprof_track_interned",
	[OCAML_PROBE_REGISTER_FRAMETABLE] = "caml_register_frametable",
	[OCAML_PROBE_DISPATCH] = "caml_alloc_small_dispatch",
	[OCAML_PROBE_DISPATCH_RET] = "caml_alloc_small_dispatch",
	[OCAML_PROBE_REARM_UPDATE] = "caml_update_young_limit",
	[OCAML_PROBE_REARM_PENDING] = "caml_do_pending_actions_exn",
	[OCAML_PROBE_TRACK_YOUNG] = "caml_memprof_track_young",
	[OCAML_PROBE_MINOR_UPDATE] = "caml_memprof_minor_update",
	[OCAML_PROBE_CLEAN_PHASE] = "caml_memprof_update_clean_phase",
	[OCAML_PROBE_COMPACTION] = "caml_memprof_invert_tracked",
	[OCAML_PROBE_SAMPLE_BLOCK] = "caml_memprof_sample_block",
	[OCAML_PROBE_ALLOC_SHR_RET] = "caml_alloc_shr",
	[OCAML_PROBE_ALLOC_SHR_RESERVED_RET] = "caml_alloc_shr_reserved",
	[OCAML_PROBE_ALLOC_SHR_NOEXC_RET] = "caml_alloc_shr_noexc",
	[OCAML_PROBE_CUSTOM_MEM] = "caml_alloc_custom_mem",
	[OCAML_PROBE_CUSTOM_MEM_RET] = "caml_alloc_custom_mem",
	[OCAML_PROBE_DISPATCH5] = "caml_alloc_small_dispatch",
	[OCAML_PROBE_DISPATCH5_RET] = "caml_alloc_small_dispatch",
	[OCAML_PROBE_RESET_LIMIT] = "caml_reset_young_limit",
	[OCAML_PROBE_RESET_LIMIT_RET] = "caml_reset_young_limit",
	[OCAML_PROBE_REGISTER_FRAMETABLES] = "caml_register_frametables",
	[OCAML_PROBE_SAMPLE_YOUNG5] = "caml_memprof_sample_young",
	[OCAML_PROBE_MINOR5] = "caml_final_update_last_minor",
	[OCAML_PROBE_CYCLE5] = "caml_cycle_heap_from_stw_single",
	[OCAML_PROBE_COMPACT5] = "caml_compact_heap",
	[OCAML_PROBE_BA_ALLOC_RET] = "caml_ba_alloc",
	[OCAML_PROBE_BA_ALLOC] = "caml_ba_alloc",
	[OCAML_PROBE_MAPPED_ALLOC_RET] = "caml_unix_mapped_alloc",
	[OCAML_PROBE_MAPPED_ALLOC] = "caml_unix_mapped_alloc",
	[OCAML_PROBE_FATAL_EXN] = "caml_fatal_uncaught_exception",
	[OCAML_PROBE_REG_TRIGGER] = "caml_update_young_limit", /* 5.x: caml_reset_young_limit */
	[OCAML_PROBE_REG_TRIGGER_PENDING] = "caml_do_pending_actions_exn",
	[OCAML_PROBE_REG_END] = "caml_update_young_limit",
	[OCAML_PROBE_REG_END_RET] = "caml_update_young_limit",
	[OCAML_PROBE_REG_URGENT] = "caml_check_urgent_gc",
};

/* Without it only plugins' frames are lost (walks end "unknown pc"). */
static const bool probe_optional[OCAML_PROBE__COUNT] = {
	[OCAML_PROBE_REGISTER_FRAMETABLE] = true,
	[OCAML_PROBE_DISPATCH] = true,
	[OCAML_PROBE_DISPATCH_RET] = true,
	[OCAML_PROBE_REARM_UPDATE] = true,
	[OCAML_PROBE_REARM_PENDING] = true,
	[OCAML_PROBE_TRACK_YOUNG] = true,
	[OCAML_PROBE_MINOR_UPDATE] = true,
	[OCAML_PROBE_CLEAN_PHASE] = true,
	[OCAML_PROBE_COMPACTION] = true,
};

/* The register executor's site `which` (index `k` of rt->reg_trigger): the
 * load of young_trigger (`disp`) in function `fn_name`, from the structure
 * of ocaml_runtime_find_field_load (`cs_sym`).  Returns true if found. */
static bool plan_reg_trigger(const struct elf_image *img, struct ocaml_runtime *rt, enum ocaml_probe which, int k,
			     const char *fn_name, uint64_t cs_sym, unsigned disp)
{
	const struct elf_symbol *fn = elf_image_symbol(img, fn_name);
	size_t len = fn && fn->size && fn->size < 4096 ? fn->size : 128;
	const uint8_t *code = fn ? elf_image_data(img, fn->vaddr, len) : NULL;
	struct ocaml_probe_point *pp = &rt->probes[which];

	if (!code || ocaml_runtime_find_field_load(code, len, fn->vaddr, cs_sym, disp, &rt->reg_trigger[k]) < 0)
		return false;
	pp->symbol = fn_name;
	pp->vaddr = fn->vaddr + rt->reg_trigger[k].at;
	pp->skipped = rt->reg_trigger[k].at;
	/* neither emulated nor stepped: the program moves ip past it, which
	 * costs the kernel less than its emulation (priced as emulated) */
	pp->emulated = true;
	pp->retprobe = false;
	if (elf_image_vaddr_to_offset(img, pp->vaddr, &pp->file_offset) < 0)
		return false;
	pp->present = true;
	return true;
}

/* The register executor's answer to the runtime's own storm of C-side
 * traps (README *No trap storms*): caml_update_young_limit's store of
 * young_alloc_end for a pending action (OCAML_PROBE_REG_END, its load) and
 * the ret right after it (OCAML_PROBE_REG_END_RET, the re-check).  Both or
 * neither; without them the register executor still runs, the storms
 * stay. */
static void plan_reg_end(const struct elf_image *img, struct ocaml_runtime *rt)
{
	const struct elf_symbol *fn = elf_image_symbol(img, "caml_update_young_limit");
	size_t len = fn && fn->size && fn->size < 4096 ? fn->size : 128;
	const uint8_t *code = fn ? elf_image_data(img, fn->vaddr, len) : NULL;
	struct ocaml_reg_load *l = &rt->reg_trigger[2];
	struct ocaml_probe_point *e = &rt->probes[OCAML_PROBE_REG_END], *r = &rt->probes[OCAML_PROBE_REG_END_RET];

	if (!code || !rt->signals_pending_sym ||
	    ocaml_runtime_find_end_store(code, len, fn->vaddr, rt->caml_state_sym, CH_OCAML4_YOUNG_ALLOC_END,
					 rt->young_limit_off, l, &rt->reg_end_store_len) < 0)
		return;
	*e = (struct ocaml_probe_point){ .symbol = "caml_update_young_limit", .vaddr = fn->vaddr + l->at,
					 .skipped = l->at, .emulated = true };
	*r = (struct ocaml_probe_point){ .symbol = "caml_update_young_limit",
					 .vaddr = fn->vaddr + l->at + l->len + rt->reg_end_store_len,
					 .skipped = l->at + l->len + rt->reg_end_store_len, .emulated = true };
	if (elf_image_vaddr_to_offset(img, e->vaddr, &e->file_offset) < 0 ||
	    elf_image_vaddr_to_offset(img, r->vaddr, &r->file_offset) < 0)
		return;
	e->present = r->present = true;
}

/* The register executor, 4.x: a trap taken from C arms nothing by itself
 * (its dispatch calls caml_check_urgent_gc, not caml_update_young_limit:
 * 4.14.2 runtime/minor_gc.c caml_alloc_small_dispatch), so a sample point it
 * passed stays in young_limit and every later allocation of C code traps
 * until OCaml code allocates.  The probe on caml_check_urgent_gc's entry
 * (OCAML_PROBE_REG_URGENT) sends such a call, when it has nothing to do, to
 * caml_update_young_limit instead (same stack, no arguments, its result
 * unused).  Planned only on a regexec_ok runtime. */
static void plan_reg_urgent(const struct elf_image *img, struct ocaml_runtime *rt)
{
	const struct elf_symbol *cu = elf_image_symbol(img, "caml_check_urgent_gc");
	const struct elf_symbol *up = elf_image_symbol(img, "caml_update_young_limit");
	const struct elf_symbol *d = elf_image_symbol(img, "caml_alloc_small_dispatch");
	const uint8_t *code = cu ? elf_image_data(img, cu->vaddr, 16) : NULL;
	struct ocaml_probe_point *pp = &rt->probes[OCAML_PROBE_REG_URGENT];

	if (!rt->regexec_ok || !cu || !up || !d || !d->size || !code)
		return;
	*pp = (struct ocaml_probe_point){ .symbol = "caml_check_urgent_gc", .vaddr = cu->vaddr,
					  .emulated = ocaml_runtime_insn_emulated(code, 16) };
	if (elf_image_vaddr_to_offset(img, pp->vaddr, &pp->file_offset) < 0)
		return;
	rt->update_fn = up->vaddr;
	rt->dispatch_lo = d->vaddr;
	rt->dispatch_hi = d->vaddr + d->size;
	pp->present = true;
}

/* The four minor-heap probes; on failure, say why in rt->minor_why. */
static void plan_minor(const struct elf_image *img, struct ocaml_runtime *rt)
{
	const struct elf_symbol *std = elf_image_symbol(img, "caml_something_to_do");
	const struct elf_symbol *mpt = elf_image_symbol(img, "caml_memprof_young_trigger");
	const struct elf_symbol *pps = elf_image_symbol(img, "caml_process_pending_signals_exn");
	struct {
		enum ocaml_probe which;
		uint64_t call_target;
	} rearms[2] = { { OCAML_PROBE_REARM_UPDATE, 0 }, { OCAML_PROBE_REARM_PENDING, pps ? pps->vaddr : 0 } };

	if (!rt->probes[OCAML_PROBE_DISPATCH].present || !std || !mpt || !pps) {
		snprintf(rt->minor_why, sizeof(rt->minor_why),
			 "the runtime lacks caml_alloc_small_dispatch, caml_something_to_do, "
			 "caml_memprof_young_trigger or caml_process_pending_signals_exn");
		goto off;
	}
	rt->something_to_do_sym = std->vaddr;
	rt->memprof_trigger_sym = mpt->vaddr;
	{
		/* a local of finalise.c: from .symtab, else from the code that tests it */
		const struct elf_symbol *td = elf_image_symbol(img, "to_do_hd");
		const struct elf_symbol *fdc = elf_image_symbol(img, "caml_final_do_calls_exn");
		const uint8_t *code = fdc ? elf_image_data(img, fdc->vaddr, 64) : NULL;

		if (td && td->type == STT_OBJECT && td->size == 8)
			rt->final_todo_sym = td->vaddr;
		else if (code)
			rt->final_todo_sym = ocaml_runtime_find_final_todo(code, 64, fdc->vaddr);
	}
	{
		/* a local of signals.c; only in an unstripped .symtab */
		const struct elf_symbol *sp = elf_image_symbol(img, "signals_are_pending");

		if (sp && sp->type == STT_OBJECT && sp->size == 8)
			rt->signals_pending_sym = sp->vaddr;
	}
	{
		/* a local of memprof.c; only in an unstripped .symtab */
		const struct elf_symbol *l = elf_image_symbol(img, "lambda");

		if (l && l->type == STT_OBJECT && l->size == 8)
			rt->memprof_lambda_sym = l->vaddr;
	}
	rt->probes[OCAML_PROBE_DISPATCH_RET] = rt->probes[OCAML_PROBE_DISPATCH];
	rt->probes[OCAML_PROBE_DISPATCH_RET].retprobe = true;
	if (rt->probes[OCAML_PROBE_DISPATCH].skipped) {
		/* a uretprobe must sit on the entry; it is emulated only if the
		 * entry instruction is */
		const struct elf_symbol *d = elf_image_symbol(img, "caml_alloc_small_dispatch");

		rt->probes[OCAML_PROBE_DISPATCH_RET].vaddr = d->vaddr;
		rt->probes[OCAML_PROBE_DISPATCH_RET].skipped = 0;
		rt->probes[OCAML_PROBE_DISPATCH_RET].emulated = false;
		elf_image_vaddr_to_offset(img, d->vaddr, &rt->probes[OCAML_PROBE_DISPATCH_RET].file_offset);
	}
	for (int i = 0; i < 2; i++) {
		struct ocaml_probe_point *pp = &rt->probes[rearms[i].which];
		const struct elf_symbol *fn = elf_image_symbol(img, probe_symbols[rearms[i].which]);
		size_t len = fn && fn->size && fn->size < 4096 ? fn->size : 256;
		const uint8_t *code = fn ? elf_image_data(img, fn->vaddr, len) : NULL;
		long at = code ? ocaml_runtime_find_rearm(code, len, fn->vaddr, std->vaddr, rearms[i].call_target) : -1;

		pp->present = false;
		if (at < 0) {
			snprintf(rt->minor_why, sizeof(rt->minor_why),
				 "the young_limit re-arm point in %s was not recognised (compiled differently "
				 "from Debian's 4.13/4.14 runtime)",
				 probe_symbols[rearms[i].which]);
			goto off;
		}
		pp->symbol = probe_symbols[rearms[i].which];
		pp->vaddr = fn->vaddr + (uint64_t)at;
		pp->skipped = (unsigned)at;
		pp->emulated = ocaml_runtime_insn_emulated(code + at, len - (size_t)at);
		if (elf_image_vaddr_to_offset(img, pp->vaddr, &pp->file_offset) < 0)
			goto off;
		pp->present = true;
	}
	rt->minor_ok = true;
	rt->regexec_ok = rt->caml_state_sym &&
			 plan_reg_trigger(img, rt, OCAML_PROBE_REG_TRIGGER, 0, "caml_update_young_limit",
					  rt->caml_state_sym, CH_OCAML4_YOUNG_TRIGGER) &&
			 plan_reg_trigger(img, rt, OCAML_PROBE_REG_TRIGGER_PENDING, 1, "caml_do_pending_actions_exn",
					  rt->caml_state_sym, CH_OCAML4_YOUNG_TRIGGER);
	if (!rt->regexec_ok)
		rt->probes[OCAML_PROBE_REG_TRIGGER].present = rt->probes[OCAML_PROBE_REG_TRIGGER_PENDING].present = false;
	else
		plan_reg_end(img, rt);
	plan_reg_urgent(img, rt);
	return;
off:
	for (int i = OCAML_PROBE_DISPATCH; i <= OCAML_PROBE_TRACK_YOUNG; i++)
		rt->probes[i].present = false;
}

/* Put the probe on the entry instruction if the kernel emulates it, else on
 * the first emulated instruction reached through at most `steps`
 * instructions that `step_over` accepts, within `window` bytes (a
 * single-stepped uprobe costs ~29 us in this kind of VM against ~1 us
 * emulated, as measured; the kernel emulates push, call, jmp, jcc and nop,
 * arch/x86/kernel/uprobes.c).  Otherwise on the entry, single-stepped. */
static int plan_probe_over(const struct elf_image *img, const char *name, struct ocaml_probe_point *pp,
			   unsigned (*step_over)(const uint8_t *, size_t), int steps, unsigned window)
{
	const struct elf_symbol *sym = elf_image_symbol(img, name);
	const uint8_t *code;
	unsigned off = 0;

	if (!sym || !sym->vaddr)
		return -ENOENT;
	pp->symbol = name;
	pp->skipped = 0;
	pp->emulated = false;
	code = elf_image_data(img, sym->vaddr, window + 16);
	if (code) {
		for (int step = 0; step < steps && off < window; step++) {
			if (ocaml_runtime_insn_emulated(code + off, window + 16 - off)) {
				pp->emulated = true;
				pp->skipped = off;
				break;
			}
			unsigned n = step_over(code + off, window + 16 - off);
			if (!n)
				break;
			off += n;
		}
	}
	pp->vaddr = sym->vaddr + pp->skipped;
	return elf_image_vaddr_to_offset(img, pp->vaddr, &pp->file_offset);
}

/* A probe whose arguments are read: only instructions that keep the
 * argument registers are stepped over (`caml_alloc_shr` starts with
 * `mov %rdi,%rax`). */
static int plan_probe(const struct elf_image *img, const char *name, struct ocaml_probe_point *pp)
{
	return plan_probe_over(img, name, pp, ocaml_runtime_skippable_insn, 4, 24);
}

/* A probe that reads no argument: any plain data instruction is stepped
 * over, so the probe sits on the first emulated instruction the function
 * always executes. */
static int plan_argless_probe(const struct elf_image *img, const char *name, struct ocaml_probe_point *pp)
{
	return plan_probe_over(img, name, pp, ocaml_runtime_plain_insn_len, 16, 80);
}

static bool has_symbol(const struct elf_image *img, const char *name)
{
	return elf_image_symbol(img, name) != NULL;
}

/* A uretprobe: on the function's entry, whatever the instruction. */
static int plan_retprobe(const struct elf_image *img, const char *name, struct ocaml_probe_point *pp)
{
	const struct elf_symbol *sym = elf_image_symbol(img, name);

	if (!sym || !sym->vaddr)
		return -ENOENT;
	pp->symbol = name;
	pp->vaddr = sym->vaddr;
	pp->skipped = 0;
	pp->emulated = false;
	pp->retprobe = true;
	if (elf_image_vaddr_to_offset(img, pp->vaddr, &pp->file_offset) < 0)
		return -ERANGE;
	pp->present = true;
	return 0;
}

/* Bigarrays (optional: a program that never links Bigarray creation has
 * no caml_ba_alloc): the entry and return of caml_ba_alloc, and of
 * caml_unix_mapped_alloc when the Unix library is linked.  rt->ba_ops_sym
 * tells the custom-block probes to leave bigarrays to these. */
static void plan_bigarray(const struct elf_image *img, struct ocaml_runtime *rt)
{
	const struct elf_symbol *ops = elf_image_symbol(img, "caml_ba_ops");

	if (!ops || plan_retprobe(img, probe_symbols[OCAML_PROBE_BA_ALLOC_RET], &rt->probes[OCAML_PROBE_BA_ALLOC_RET]) < 0 ||
	    plan_probe(img, probe_symbols[OCAML_PROBE_BA_ALLOC], &rt->probes[OCAML_PROBE_BA_ALLOC]) < 0) {
		rt->probes[OCAML_PROBE_BA_ALLOC_RET].present = rt->probes[OCAML_PROBE_BA_ALLOC].present = false;
		return;
	}
	rt->probes[OCAML_PROBE_BA_ALLOC].present = true;
	rt->ba_ops_sym = ops->vaddr;
	if (plan_retprobe(img, probe_symbols[OCAML_PROBE_MAPPED_ALLOC_RET], &rt->probes[OCAML_PROBE_MAPPED_ALLOC_RET]) < 0 ||
	    plan_probe(img, probe_symbols[OCAML_PROBE_MAPPED_ALLOC], &rt->probes[OCAML_PROBE_MAPPED_ALLOC]) < 0)
		rt->probes[OCAML_PROBE_MAPPED_ALLOC_RET].present = rt->probes[OCAML_PROBE_MAPPED_ALLOC].present = false;
	else
		rt->probes[OCAML_PROBE_MAPPED_ALLOC].present = true;
}

/* The optional probes beside the heap's: Bigarray data (plan_bigarray) and
 * which uncaught exception ended the program (printexc.c, 4.x and 5.x; a
 * read, never a write; absent: the end reason has only the exit status). */
static void plan_readers(const struct elf_image *img, struct ocaml_runtime *rt)
{
	plan_bigarray(img, rt);
	rt->probes[OCAML_PROBE_FATAL_EXN].present =
		plan_probe(img, probe_symbols[OCAML_PROBE_FATAL_EXN], &rt->probes[OCAML_PROBE_FATAL_EXN]) == 0;
}

/* rt->version read from the executable: accept a supported release, or
 * say why not.  Sets major/minor, the 4.x offsets, and release_known. */
static enum ocaml_detect_result check_release(const char *name, struct ocaml_runtime *rt, char *msg, size_t msglen)
{
	int patch = -1, end = 0;
	const struct ocaml_release *r = NULL;

	if (sscanf(rt->version, "%d.%d.%d%n", &rt->major, &rt->minor, &patch, &end) != 3) {
		snprintf(msg, msglen, "%s holds an OCaml version camlheap cannot read (%s)", name, rt->version);
		return OCAML_UNSUPPORTED_VERSION;
	}
	r = ocaml_release_find(rt->major, rt->minor);
	if (r && rt->version[end]) {
		snprintf(msg, msglen,
			 "%s uses OCaml %s, a development or pre-release build (camlheap supports the releases "
			 "%s; tested: %s): its runtime's internal layout may differ from the release's, and camlheap "
			 "never writes into a runtime it has not identified; rebuild with a release compiler",
			 name, rt->version, ocaml_runtime_supported, ocaml_releases_tested);
		return OCAML_UNSUPPORTED_VERSION;
	}
	if (!r) {
		/* why the releases before 4.12 are not (4.10.0, 4.11.0 and
		 * 4.12.1 runtime/caml/memprof.h and domain_state.tbl) */
		const char *why = rt->major < 4 || (rt->major == 4 && rt->minor < 10)
					  ? "its runtime has none of the Gc.Memprof hooks camlheap probes (they came with 4.10)"
				  : rt->major == 4 && rt->minor == 10
					  ? "its runtime has no hook to follow a sampled block to its death (caml_memprof_minor_update "
					    "came with 4.11) nor one per custom block (caml_memprof_track_custom, with 4.12)"
				  : rt->major == 4 && rt->minor == 11
					  ? "its runtime calls no hook per custom block (caml_memprof_track_custom came with 4.12), and "
					    "its domain state lacks 4.12's mark_stack, which moves every field camlheap reads past it"
					  : "the runtime's internal layout changes between releases";

		snprintf(msg, msglen,
			 "%s uses the OCaml %s runtime, which camlheap does not support (supported: %s; tested: %s): %s; "
			 "rebuild with a supported compiler%s",
			 name, rt->version, ocaml_runtime_supported, ocaml_releases_tested, why,
			 rt->major == 5 && rt->minor == 0 ? " (OCaml 5.0 has no Gc.Memprof to profile in-process either)"
			 : rt->major == 4 && rt->minor < 10 ? ""
							 : ", or profile in-process with Gc.Memprof (e.g. memtrace)");
		return OCAML_UNSUPPORTED_VERSION;
	}
	rt->release = r;
	rt->young_limit_off = r->young_limit_off;
	rt->young_ptr_off = r->young_ptr_off;
	rt->release_known = rt->major == 4 || ocaml_release_tested(r, rt->version);
	if (!rt->release_known)
		snprintf(rt->minor_why, sizeof(rt->minor_why),
			 "OCaml %s is not among the %d.%d releases camlheap was tested with (%s), so camlheap "
			 "writes nothing into the program",
			 rt->version, rt->major, rt->minor, r->tested);
	return OCAML_OK;
}

/* OCaml 4.x: the young_limit offset camlheap would write, confirmed from
 * the code of caml_update_young_limit (ocaml_runtime_limit_layout).  A
 * runtime whose code contradicts its release's layout is refused; one
 * whose release is unknown (no Sys.ocaml_version) takes the layout its
 * code shows and is profiled read-only, as is one whose code is not of a
 * recognised form. */
static enum ocaml_detect_result check_layout4(const struct elf_image *img, const char *name, struct ocaml_runtime *rt,
					      char *msg, size_t msglen)
{
	const struct elf_symbol *ul = elf_image_symbol(img, "caml_update_young_limit");
	size_t len = ul && ul->size && ul->size < 4096 ? ul->size : 0;
	const uint8_t *code = len ? elf_image_data(img, ul->vaddr, len) : NULL;
	unsigned store = 0;
	/* CAMLHEAP_TEST_NO_CODE_CHECK=1, for the tests only: leave the live
	 * checks of bpf/minor.bpf.h alone between the program and a write */
	bool skip = getenv("CAMLHEAP_TEST_NO_CODE_CHECK") && !strcmp(getenv("CAMLHEAP_TEST_NO_CODE_CHECK"), "1");
	int r = skip ? 1 : code && rt->caml_state_sym ? ocaml_runtime_limit_layout(code, len, ul->vaddr, rt->caml_state_sym,
									CH_OCAML4_YOUNG_TRIGGER, CH_OCAML4_YOUNG_ALLOC_END,
									&store)
					   : 0;

	if (skip)
		store = rt->young_limit_off;
	if (!rt->version[0]) {
		/* Stdlib.Sys not linked: nothing says which release this is */
		snprintf(rt->version, sizeof(rt->version), "4.x, release unknown");
		rt->major = 4;
		rt->minor = -1;
		rt->release_known = false;
		if (r == 1 && store == CH_OCAML412_YOUNG_LIMIT) {
			rt->young_limit_off = CH_OCAML412_YOUNG_LIMIT;
			rt->young_ptr_off = CH_OCAML412_YOUNG_PTR;
		} else {
			rt->young_limit_off = CH_OCAML4_YOUNG_LIMIT;
			rt->young_ptr_off = CH_OCAML4_YOUNG_PTR;
		}
		snprintf(rt->minor_why, sizeof(rt->minor_why),
			 "the program's OCaml release is unknown (it does not link Stdlib.Sys, where camlheap reads "
			 "Sys.ocaml_version), so camlheap writes nothing into it");
		return OCAML_OK;
	}
	if (r < 0 || (r == 1 && store != rt->young_limit_off)) {
		char what[96];

		if (r == 1)
			snprintf(what, sizeof(what), "stores young_limit at byte %u of Caml_state", store);
		else
			snprintf(what, sizeof(what), "stores to other fields of Caml_state or reads others");
		snprintf(msg, msglen,
			 "%s says it is OCaml %s, but its runtime's code does not match that release's layout "
			 "(caml_update_young_limit %s; OCaml %s keeps young_limit at byte %u): a patched or "
			 "misidentified runtime, into which camlheap writes nothing; profile a program built with an "
			 "unmodified compiler release",
			 name, rt->version, what, rt->version, rt->young_limit_off);
		return OCAML_UNSUPPORTED_VERSION;
	}
	if (r == 0) {
		rt->release_known = false;
		snprintf(rt->minor_why, sizeof(rt->minor_why),
			 "young_limit's place in Caml_state could not be confirmed from the code of "
			 "caml_update_young_limit (compiled differently from the runtimes camlheap was tested with), so "
			 "camlheap writes nothing into the program");
	}
	rt->layout_from_code = r == 1 && !skip;
	return OCAML_OK;
}

/* OCaml 5.1 to 5.4 (README *OCaml 5*; each release's runtime/caml/domain_state.tbl). */
static enum ocaml_detect_result detect5(const struct elf_image *img, const char *name, struct ocaml_runtime *rt,
					char *msg, size_t msglen)
{
	const struct ocaml_release *rel = rt->release;
	const struct elf_symbol *minor = elf_image_symbol(img, "caml_minor_collections_count");
	const struct elf_symbol *major = elf_image_symbol(img, "caml_major_cycles_completed");
	const struct elf_symbol *compact = elf_image_symbol(img, "caml_compactions_count");
	const struct elf_symbol *ccall = elf_image_symbol(img, "caml_c_call");
	const uint8_t *code = ccall ? elf_image_data(img, ccall->vaddr, 4) : NULL;
	char missing[256] = "";

	if (elf_image_tls_offset(img, "caml_state", &rt->tls_state_off) < 0)
		strcat(missing, " caml_state(TLS)");
	if (!minor)
		strcat(missing, " caml_minor_collections_count");
	if (!major)
		strcat(missing, " caml_major_cycles_completed");
	if (!code)
		strcat(missing, " caml_c_call");
	rt->minor_count_sym = minor ? minor->vaddr : 0;
	rt->major_count_sym = major ? major->vaddr : 0;
	rt->compact_count_sym = compact ? compact->vaddr : 0;
	rt->dom_id_off = rel->dom_id_off;
	rt->memprof_trig_off = rel->memprof_trig_off;
	rt->memprof_off = rel->memprof_off;
	rt->dom_internal_state_off = rel->dom_internal_state_off;
	/* ENTER_FUNCTION (5.x runtime/amd64.S:94-97): push %rbp; mov %rsp,%rbp */
	rt->frame_pointers = code && code[0] == 0x55 && code[1] == 0x48 && code[2] == 0x89 && code[3] == 0xe5;
	if (rel->sample_block) {
		if (plan_probe(img, probe_symbols[OCAML_PROBE_SAMPLE_BLOCK], &rt->probes[OCAML_PROBE_SAMPLE_BLOCK]) == 0)
			rt->probes[OCAML_PROBE_SAMPLE_BLOCK].present = true;
		else
			strcat(missing, " caml_memprof_sample_block");
	} else {
		for (int i = OCAML_PROBE_ALLOC_SHR_RET; i <= OCAML_PROBE_CUSTOM_MEM_RET; i++) {
			int r = i == OCAML_PROBE_CUSTOM_MEM ? plan_probe(img, probe_symbols[i], &rt->probes[i])
							    : plan_retprobe(img, probe_symbols[i], &rt->probes[i]);

			if (r == 0) {
				rt->probes[i].present = true;
			} else if (i != OCAML_PROBE_CUSTOM_MEM_RET || !missing[0]) {
				strncat(missing, " ", sizeof(missing) - strlen(missing) - 1);
				strncat(missing, probe_symbols[i], sizeof(missing) - strlen(missing) - 1);
			}
		}
		rt->unmarshal_why = rt->minor == 1 ? "OCaml 5.1 calls no hook per unmarshalled block (it reserves them "
						     "with caml_shared_try_alloc, which promotion also uses)"
						   : "OCaml 5.2 calls no hook per unmarshalled block (it reserves them "
						     "with caml_shared_try_alloc, which promotion also uses)";
	}
	{
		/* the heap's size, for the resident-memory breakdown */
		const struct elf_symbol *gs = elf_image_symbol(img, "sampled_gc_stats");
		const struct elf_symbol *cp = elf_image_symbol(img, "caml_params");

		rt->gc_stats_ptr = rel->gc_stats_ptr;
		if (gs && gs->type == STT_OBJECT && (rel->gc_stats_ptr ? gs->size == 8 : gs->size >= 96))
			rt->gc_stats_sym = gs->vaddr;
		if (cp && cp->type == STT_OBJECT && cp->size == 8)
			rt->params_sym = cp->vaddr;
	}
	if (rel->major == 5) {
		/* domain.c's private all_domains: a running Gc.Memprof's rate
		 * (5.3+), and with the two globals the flags of an interrupt
		 * (ptexec.c); each taken only at the size its release gives it */
		const struct elf_symbol *ad = elf_image_symbol(img, "all_domains");
		const struct elf_symbol *ep = elf_image_symbol(img, "caml_major_slice_epoch");
		const struct elf_symbol *ps = elf_image_symbol(img, "caml_pending_signals");

		rt->all_domains_ptr = rel->all_domains_ptr;
		if (ad && ad->type == STT_OBJECT &&
		    (rel->all_domains_ptr ? ad->size == 8
					  : ad->size >= rel->dom_internal_size && ad->size % rel->dom_internal_size == 0))
			rt->all_domains_sym = ad->vaddr;
		if (ep && ep->type == STT_OBJECT && ep->size == 8)
			rt->slice_epoch_sym = ep->vaddr;
		if (ps && ps->type == STT_OBJECT && ps->size == 8)
			rt->pending_signals_sym = ps->vaddr;
		rt->slice_epoch_off = rel->slice_epoch_off;
		rt->ext_intr_off = rel->ext_intr_off;
		rt->dom_internal_size = rel->dom_internal_size;
		rt->intr_pending_off = rel->intr_pending_off;
		rt->final_info_off = rel->final_info_off;
	}
	if (rel->sample_block) {
		if (plan_probe(img, probe_symbols[OCAML_PROBE_SAMPLE_YOUNG5], &rt->probes[OCAML_PROBE_SAMPLE_YOUNG5]) == 0)
			rt->probes[OCAML_PROBE_SAMPLE_YOUNG5].present = true;
	}
	if (plan_probe(img, probe_symbols[OCAML_PROBE_REGISTER_FRAMETABLES], &rt->probes[OCAML_PROBE_REGISTER_FRAMETABLES]) == 0)
		rt->probes[OCAML_PROBE_REGISTER_FRAMETABLES].present = true; /* without it, plugins' frames end walks */
	if (missing[0]) {
		snprintf(msg, msglen,
			 "%s (OCaml %s) lacks runtime symbols camlheap needs:%s; the binary was probably "
			 "stripped of .dynsym or linked without -E: rebuild it with the default ocamlopt flags",
			 name, rt->version, missing);
		return OCAML_MISSING_SYMBOLS;
	}
	{
		/* the dispatch entry reads r8 (lens): only an emulated first
		 * instruction, nothing stepped over */
		struct ocaml_probe_point *e = &rt->probes[OCAML_PROBE_DISPATCH5];
		const struct elf_symbol *d = elf_image_symbol(img, "caml_alloc_small_dispatch");
		const uint8_t *dc = d ? elf_image_data(img, d->vaddr, 16) : NULL;

		if (d && dc && plan_retprobe(img, probe_symbols[OCAML_PROBE_DISPATCH5], e) == 0) {
			e->retprobe = false;
			e->emulated = ocaml_runtime_insn_emulated(dc, 16);
		}
		if (plan_retprobe(img, probe_symbols[OCAML_PROBE_RESET_LIMIT], &rt->probes[OCAML_PROBE_RESET_LIMIT]) == 0)
			rt->probes[OCAML_PROBE_RESET_LIMIT].retprobe = false; /* same entry, reads rdi */
		if (plan_retprobe(img, probe_symbols[OCAML_PROBE_DISPATCH5_RET], &rt->probes[OCAML_PROBE_DISPATCH5_RET]) == 0 &&
		    plan_retprobe(img, probe_symbols[OCAML_PROBE_RESET_LIMIT_RET], &rt->probes[OCAML_PROBE_RESET_LIMIT_RET]) == 0 &&
		    e->present && rt->probes[OCAML_PROBE_RESET_LIMIT].present) {
			rt->minor_ok = true;
			rt->regexec_ok = plan_reg_trigger(img, rt, OCAML_PROBE_REG_TRIGGER, 0, "caml_reset_young_limit", 0,
							  CH_OCAML5_YOUNG_TRIGGER);
			rt->probes[OCAML_PROBE_REG_TRIGGER].symbol = "caml_reset_young_limit";
		} else {
			for (int i = OCAML_PROBE_DISPATCH5; i <= OCAML_PROBE_RESET_LIMIT; i++)
				rt->probes[i].present = false;
			snprintf(rt->minor_why, sizeof(rt->minor_why),
				 "the runtime lacks caml_alloc_small_dispatch or caml_reset_young_limit");
		}
	}
	{
		const struct elf_symbol *hs = elf_image_symbol(img, "caml_global_heap_state");
		bool ok = hs != NULL;

		rt->heap_state_sym = hs ? hs->vaddr : 0;
		ok = ok && plan_probe(img, probe_symbols[OCAML_PROBE_MINOR5], &rt->probes[OCAML_PROBE_MINOR5]) == 0;
		ok = ok && plan_argless_probe(img, rel->cycle_fn, &rt->probes[OCAML_PROBE_CYCLE5]) == 0;
		if (ok && rel->compaction)
			ok = plan_argless_probe(img, probe_symbols[OCAML_PROBE_COMPACT5], &rt->probes[OCAML_PROBE_COMPACT5]) == 0;
		if (ok) {
			rt->census_ok = true;
			rt->probes[OCAML_PROBE_MINOR5].present = true;
			rt->probes[OCAML_PROBE_CYCLE5].present = true;
			rt->probes[OCAML_PROBE_COMPACT5].present = rel->compaction;
		} else {
			snprintf(rt->census_why, sizeof(rt->census_why),
				 "the runtime lacks caml_global_heap_state, caml_final_update_last_minor, "
				 "caml_cycle_heap_from_stw_single (5.1: caml_cycle_heap_stw) or caml_compact_heap, so "
				 "sampled blocks cannot be followed to their death");
		}
	}
	return OCAML_OK;
}

enum ocaml_detect_result ocaml_runtime_detect(const struct elf_image *img, const char *name, struct ocaml_runtime *rt,
					      char *msg, size_t msglen)
{
	const struct elf_symbol *cs;
	char missing[256] = "";

	memset(rt, 0, sizeof(*rt));
	if (!has_symbol(img, "caml_frametable") || !has_symbol(img, "caml_start_program")) {
		if (has_symbol(img, "caml_interprete") || has_symbol(img, "caml_main")) {
			snprintf(msg, msglen,
				 "%s is OCaml bytecode (the ocamlrun interpreter or a -custom executable): "
				 "only native programs built with ocamlopt are supported",
				 name);
			return OCAML_BYTECODE;
		}
		if (elf_image_symbol_count(img) == 0) {
			snprintf(msg, msglen,
				 "%s has no symbol table at all (stripped of .dynsym, or static and stripped): "
				 "camlheap finds the OCaml runtime by its symbols; profile an unstripped build",
				 name);
			return OCAML_MISSING_SYMBOLS;
		}
		snprintf(msg, msglen,
			 "%s is not a native OCaml program (no caml_frametable or caml_start_program symbol); "
			 "point camlheap at an executable built with ocamlopt",
			 name);
		return OCAML_NOT_OCAML;
	}

	if (elf_image_find_ocaml_version(img, rt->version, sizeof(rt->version)) < 0)
		rt->version[0] = '\0';
	if (rt->version[0]) {
		enum ocaml_detect_result r = check_release(name, rt, msg, msglen);

		if (r != OCAML_OK)
			return r;
	} else {
		rt->major = rt->minor = -1;
	}
	if (rt->major < 0 && has_symbol(img, "caml_domain_spawn")) {
		snprintf(msg, msglen, "%s uses an OCaml 5 runtime whose release is unknown (the program does not "
				      "link Stdlib.Sys, where camlheap reads it): camlheap needs the exact 5.x release "
				      "(supported: %s)",
			 name, ocaml_runtime_supported);
		return OCAML_UNSUPPORTED_VERSION;
	}
	if (rt->major == 5) {
		enum ocaml_detect_result r = detect5(img, name, rt, msg, msglen);

		if (r == OCAML_OK && !rt->release_known && rt->minor_ok) {
			/* read-only: minor_why says why (check_release) */
			rt->minor_ok = false;
			rt->regexec_ok = false;
			rt->probes[OCAML_PROBE_REG_TRIGGER].present = false;
			for (int i = OCAML_PROBE_DISPATCH5; i <= OCAML_PROBE_RESET_LIMIT; i++)
				rt->probes[i].present = false;
		}
		if (r == OCAML_OK)
			plan_readers(img, rt);
		return r;
	}
	cs = elf_image_symbol(img, "Caml_state");
	if (!cs)
		strcat(missing, " Caml_state");
	else
		rt->caml_state_sym = cs->vaddr;
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		if (i == OCAML_PROBE_DISPATCH_RET || i == OCAML_PROBE_REARM_UPDATE || i == OCAML_PROBE_REARM_PENDING)
			continue; /* planned by plan_minor */
		if (i >= OCAML_PROBE_MINOR_UPDATE)
			continue; /* below; OCaml 5's in detect5 */
		if (plan_probe(img, probe_symbols[i], &rt->probes[i]) == 0)
			rt->probes[i].present = true;
		else if (!probe_optional[i]) {
			strncat(missing, " ", sizeof(missing) - strlen(missing) - 1);
			strncat(missing, probe_symbols[i], sizeof(missing) - strlen(missing) - 1);
		}
	}
	if (!missing[0]) {
		enum ocaml_detect_result r = check_layout4(img, name, rt, msg, msglen);

		if (r != OCAML_OK)
			return r;
		if (rt->release_known)
			plan_minor(img, rt);
		else
			for (int i = OCAML_PROBE_DISPATCH; i <= OCAML_PROBE_TRACK_YOUNG; i++)
				rt->probes[i].present = false;
	}
	rt->census_ok = true;
	for (int i = OCAML_PROBE_MINOR_UPDATE; i <= OCAML_PROBE_COMPACTION; i++)
		if (plan_argless_probe(img, probe_symbols[i], &rt->probes[i]) == 0) {
			rt->probes[i].present = true;
		} else if (rt->census_ok) {
			rt->census_ok = false;
			snprintf(rt->census_why, sizeof(rt->census_why),
				 "the runtime lacks %s, so sampled blocks cannot be followed to their death",
				 probe_symbols[i]);
		}
	if (!rt->census_ok)
		for (int i = OCAML_PROBE_MINOR_UPDATE; i <= OCAML_PROBE_COMPACTION; i++)
			rt->probes[i].present = false;
	if (missing[0]) {
		snprintf(msg, msglen,
			 "%s (OCaml %s) lacks runtime symbols camlheap probes:%s; the binary was probably "
			 "stripped of .dynsym or linked without -E: rebuild it with the default ocamlopt flags",
			 name, rt->version[0] ? rt->version : "version unknown", missing);
		return OCAML_MISSING_SYMBOLS;
	}
	plan_readers(img, rt);
	return OCAML_OK;
}
