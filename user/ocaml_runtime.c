/* ocaml_runtime.c -- see ocaml_runtime.h. */
#include "ocaml_runtime.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const probe_symbols[OCAML_PROBE__COUNT] = {
	[OCAML_PROBE_TRACK_ALLOC_SHR] = "caml_memprof_track_alloc_shr",
	[OCAML_PROBE_TRACK_CUSTOM] = "caml_memprof_track_custom",
	[OCAML_PROBE_TRACK_INTERNED] = "caml_memprof_track_interned",
	[OCAML_PROBE_REGISTER_FRAMETABLE] = "caml_register_frametable",
};

/* Without it only plugins' frames are lost (walks end "unknown pc"). */
static const bool probe_optional[OCAML_PROBE__COUNT] = {
	[OCAML_PROBE_REGISTER_FRAMETABLE] = true,
};

bool ocaml_runtime_insn_emulated(const uint8_t *c, size_t len)
{
	if (len < 1)
		return false;
	if (c[0] >= 0x50 && c[0] <= 0x57) /* push r64 */
		return true;
	if (len >= 2 && (c[0] == 0x41) && c[1] >= 0x50 && c[1] <= 0x57) /* push r8-r15 */
		return true;
	if (c[0] == 0x90 || c[0] == 0xe8 || c[0] == 0xe9 || c[0] == 0xeb) /* nop, call, jmp */
		return true;
	if (c[0] >= 0x70 && c[0] <= 0x7f) /* jcc rel8 */
		return true;
	if (len >= 2 && c[0] == 0x0f && c[1] >= 0x80 && c[1] <= 0x8f) /* jcc rel32 */
		return true;
	if (len >= 5 && c[0] == 0x0f && c[1] == 0x1f && c[2] == 0x44 && c[3] == 0 && c[4] == 0) /* nop5 */
		return true;
	return false;
}

/* Register numbers (ModRM encoding) of the argument registers we read:
 * rdi 7, rsi 6, rdx 2, rcx 1 (without REX.R/B). */
static bool writes_arg_register(unsigned reg, bool rex_ext)
{
	if (rex_ext)
		return false;
	return reg == 7 || reg == 6 || reg == 2 || reg == 1;
}

unsigned ocaml_runtime_skippable_insn(const uint8_t *c, size_t len)
{
	if (len >= 4 && c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa) /* endbr64 */
		return 4;
	/* mov r64, r64: REX.W 89 /r with mod == 3; the destination is rm. */
	if (len >= 3 && (c[0] & 0xf8) == 0x48 && c[1] == 0x89 && (c[2] >> 6) == 3) {
		bool rex_b = c[0] & 1;
		if (!writes_arg_register(c[2] & 7, rex_b))
			return 3;
		return 0;
	}
	/* pxor xmm, xmm (66 0f ef /r, mod 3): touches no integer register. */
	if (len >= 4 && c[0] == 0x66 && c[1] == 0x0f && c[2] == 0xef && (c[3] >> 6) == 3)
		return 4;
	/* sub/add $imm8, %rsp (48 83 ec/c4 ib) and $imm32 (48 81 ec/c4 id). */
	if (len >= 4 && c[0] == 0x48 && c[1] == 0x83 && (c[2] == 0xec || c[2] == 0xc4))
		return 4;
	if (len >= 7 && c[0] == 0x48 && c[1] == 0x81 && (c[2] == 0xec || c[2] == 0xc4))
		return 7;
	return 0;
}

/* Put the probe on the entry instruction if the kernel emulates it, else on
 * the first emulated instruction within a few skippable ones (a
 * single-stepped uprobe costs ~29 us in this kind of VM against ~1 us,
 * feasibility-4.13.md §2.2; `caml_alloc_shr` starts with `mov %rdi,%rax`). */
static int plan_probe(const struct elf_image *img, const char *name, struct ocaml_probe_point *pp)
{
	const struct elf_symbol *sym = elf_image_symbol(img, name);
	const uint8_t *code;
	uint64_t at;
	unsigned off = 0;

	if (!sym || !sym->vaddr)
		return -ENOENT;
	pp->symbol = name;
	pp->vaddr = sym->vaddr;
	pp->skipped = 0;
	pp->emulated = false;
	code = elf_image_data(img, sym->vaddr, 32);
	if (code) {
		for (int step = 0; step < 4 && off < 24; step++) {
			if (ocaml_runtime_insn_emulated(code + off, 32 - off)) {
				pp->emulated = true;
				pp->skipped = off;
				break;
			}
			unsigned n = ocaml_runtime_skippable_insn(code + off, 32 - off);
			if (!n)
				break;
			off += n;
		}
	}
	at = sym->vaddr + pp->skipped;
	pp->vaddr = at;
	return elf_image_vaddr_to_offset(img, at, &pp->file_offset);
}

static bool has_symbol(const struct elf_image *img, const char *name)
{
	return elf_image_symbol(img, name) != NULL;
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
	if (sscanf(rt->version, "%d.%d", &rt->major, &rt->minor) != 2)
		rt->major = rt->minor = -1;
	if (rt->major >= 0 && (rt->major != 4 || (rt->minor != 13 && rt->minor != 14))) {
		snprintf(msg, msglen,
			 "%s uses the OCaml %s runtime, which camlheap does not support yet "
			 "(supported: 4.13, 4.14); rebuild with a supported compiler or profile in-process "
			 "with Gc.Memprof",
			 name, rt->version);
		return OCAML_UNSUPPORTED_VERSION;
	}

	if (rt->major < 0 && has_symbol(img, "caml_domain_spawn")) {
		snprintf(msg, msglen, "%s uses an OCaml 5 runtime, which camlheap does not support yet "
				      "(supported: 4.13, 4.14)",
			 name);
		return OCAML_UNSUPPORTED_VERSION;
	}
	cs = elf_image_symbol(img, "Caml_state");
	if (!cs)
		strcat(missing, " Caml_state");
	else
		rt->caml_state_sym = cs->vaddr;
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		if (plan_probe(img, probe_symbols[i], &rt->probes[i]) == 0)
			rt->probes[i].present = true;
		else if (!probe_optional[i]) {
			strncat(missing, " ", sizeof(missing) - strlen(missing) - 1);
			strncat(missing, probe_symbols[i], sizeof(missing) - strlen(missing) - 1);
		}
	}
	if (missing[0]) {
		snprintf(msg, msglen,
			 "%s (OCaml %s) lacks runtime symbols camlheap probes:%s; the binary was probably "
			 "stripped of .dynsym or linked without -E: rebuild it with the default ocamlopt flags",
			 name, rt->version[0] ? rt->version : "version unknown", missing);
		return OCAML_MISSING_SYMBOLS;
	}
	if (rt->major < 0) {
		/* No Sys.ocaml_version (Stdlib.Sys not linked): a 4.x runtime
		 * with memprof's hooks and Caml_state, and not 5.x, is taken as
		 * 4.13/4.14-compatible; the domain-state offsets are checked on
		 * the live state at every sample, so a wrong guess is counted
		 * and reported, never turned into made-up stacks. */
		snprintf(rt->version, sizeof(rt->version), "4.13-compatible");
		rt->major = 4;
		rt->minor = 13;
	}
	return OCAML_OK;
}
