/* runtime_code.c -- the x86-64 code of the OCaml runtime, read as data
 * (ocaml_runtime.h): instructions the kernel emulates (where a uprobe
 * costs ~1 us instead of a single step), the re-arm points after
 * young_limit's recomputation, the offsets caml_update_young_limit stores
 * to, caml_final_do_calls's call to its to-do list.  Decoding follows the
 * Intel SDM vol. 2 (ModRM/SIB) and the kernel's uprobe emulation
 * (arch/x86/kernel/uprobes.c). */
#include "target/ocaml_runtime.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

long ocaml_runtime_find_rearm(const uint8_t *c, size_t len, uint64_t fn, uint64_t std_sym, uint64_t call_target)
{
	for (size_t i = 0; i + 10 <= len; i++) {
		size_t j;

		/* 8b 05 rel32: mov rel32(%rip),%eax, then 85 c0: test %eax,%eax */
		if (c[i] != 0x8b || c[i + 1] != 0x05 || c[i + 6] != 0x85 || c[i + 7] != 0xc0)
			continue;
		if (fn + i + 6 + (uint64_t)(int64_t)(int32_t)rd32(c + i + 2) != std_sym)
			continue;
		j = i + 8;
		if (c[j] != 0x74 && !(j + 1 < len && c[j] == 0x0f && c[j + 1] == 0x84))
			continue;
		if (!call_target)
			return (long)j;
		/* the call after the store's tail: within the next 32 bytes */
		for (size_t k = j; k + 5 <= len && k < j + 32; k++)
			if (c[k] == 0xe8 && fn + k + 5 + (uint64_t)(int64_t)(int32_t)rd32(c + k + 1) == call_target)
				return (long)k;
		return -1;
	}
	return -1;
}

/* A ModRM operand at c[0..n) (REX bits `rex`): its length, and either the
 * register (*reg_op true, *base the register) or the memory operand (*base
 * the base register, -1 for rip-relative, -2 for one camlheap does not
 * follow (SIB with an index, no base); *disp its displacement).  0 if cut
 * short. */
static size_t modrm_operand(const uint8_t *c, size_t n, uint8_t rex, unsigned *reg, int *base, int64_t *disp,
			    bool *reg_op)
{
	size_t i = 1;
	uint8_t mod, rm;

	if (n < 1)
		return 0;
	mod = c[0] >> 6;
	rm = c[0] & 7;
	*reg = ((c[0] >> 3) & 7) | (rex & 4 ? 8 : 0);
	*disp = 0;
	*reg_op = mod == 3;
	if (mod == 3) {
		*base = rm | (rex & 1 ? 8 : 0);
		return 1;
	}
	if (rm == 4) { /* SIB */
		if (n < 2)
			return 0;
		*base = (c[1] & 7) == 5 && mod == 0 ? -2 : (c[1] & 7) | (rex & 1 ? 8 : 0);
		if (((c[1] >> 3) & 7) != 4 || (rex & 2))
			*base = -2; /* an index register */
		i = 2;
		if ((c[1] & 7) == 5 && mod == 0) {
			i += 4;
			return i <= n ? i : 0;
		}
	} else if (mod == 0 && rm == 5) {
		*base = -1;
		if (n < 5)
			return 0;
		*disp = (int32_t)rd32(c + 1);
		return 5;
	} else {
		*base = rm | (rex & 1 ? 8 : 0);
	}
	if (mod == 1) {
		if (i + 1 > n)
			return 0;
		*disp = (int8_t)c[i];
		i += 1;
	} else if (mod == 2) {
		if (i + 4 > n)
			return 0;
		*disp = (int32_t)rd32(c + i);
		i += 4;
	}
	return i;
}

/* The length of an instruction that the walks below step over without
 * tracking anything it changes: endbr64, ret (code after it is reached by
 * a jump), repz ret, nop, jcc and jmp rel8/rel32 (both ways of a branch are
 * walked in order); 0 for any other. */
static size_t flow_insn_len(const uint8_t *p, size_t n)
{
	if (n >= 4 && p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
		return 4;
	if (p[0] == 0xc3 || p[0] == 0x90)
		return 1;
	if (n >= 2 && p[0] == 0xf3 && p[1] == 0xc3)
		return 2;
	if (n >= 2 && ((p[0] >= 0x70 && p[0] <= 0x7f) || p[0] == 0xeb))
		return 2;
	if (n >= 5 && p[0] == 0xe9)
		return 5;
	if (n >= 6 && p[0] == 0x0f && p[1] >= 0x80 && p[1] <= 0x8f)
		return 6;
	return 0;
}

int ocaml_runtime_limit_layout(const uint8_t *c, size_t len, uint64_t fn, uint64_t cs_sym, unsigned trigger_off,
			       unsigned alloc_end_off, unsigned *store_off)
{
	unsigned cs = 0; /* registers holding Caml_state (bit per register number) */
	bool stored = false, bad_store = false, saw_trigger = false, saw_end = false;
	size_t i = 0;

	while (i < len) {
		const uint8_t *p = c + i;
		size_t n = len - i, j = 0, m;
		uint8_t rex = 0, op;
		unsigned reg;
		int base;
		int64_t disp;
		bool reg_op, mem_cs;

		if ((m = flow_insn_len(p, n))) {
			i += m;
			continue;
		}
		if (p[0] >= 0x50 && p[0] <= 0x57) { /* push */
			i += 1;
			continue;
		}
		if ((p[0] & 0xf0) == 0x40)
			rex = p[j++];
		if (j >= n)
			return 0;
		op = p[j++];
		if (op >= 0x58 && op <= 0x5f) { /* pop: the register is no longer known */
			cs &= ~(1u << ((op & 7) | (rex & 1 ? 8 : 0)));
			i += j;
			continue;
		}
		if (op == 0x0f) {
			if (j >= n)
				return 0;
			op = p[j++];
			if (op == 0x1f) { /* nop r/m */
				m = modrm_operand(p + j, n - j, rex, &reg, &base, &disp, &reg_op);
				if (!m)
					return 0;
				i += j + m;
				continue;
			}
			if (op >= 0x80 && op <= 0x8f && n >= j + 4) { /* jcc rel32 */
				i += j + 4;
				continue;
			}
			if (op < 0x40 || op > 0x4f) /* cmovcc r, r/m */
				return 0;
			op = 0x8b; /* as a load: the destination may change */
			rex &= ~8; /* not a Caml_state load */
		} else if (op != 0x8b && op != 0x89 && op != 0x39 && op != 0x3b && op != 0x85) {
			return 0; /* mov, cmp, test only */
		}
		m = modrm_operand(p + j, n - j, rex, &reg, &base, &disp, &reg_op);
		if (!m)
			return 0;
		mem_cs = !reg_op && base >= 0 && (cs & (1u << base));
		if (op == 0x8b) { /* load into reg */
			if (!reg_op && base == -1 && (rex & 8) && fn + i + j + m + (uint64_t)disp == cs_sym)
				cs |= 1u << reg;
			else if (reg_op && (rex & 8) && (cs & (1u << base)))
				cs |= 1u << reg;
			else
				cs &= ~(1u << reg);
			if (mem_cs && (uint64_t)disp == trigger_off)
				saw_trigger = true;
			if (mem_cs && (uint64_t)disp == alloc_end_off)
				saw_end = true;
		} else if (op == 0x89) { /* store reg into r/m */
			if (reg_op) {
				if ((rex & 8) && (cs & (1u << reg)))
					cs |= 1u << base;
				else
					cs &= ~(1u << base);
			} else if (mem_cs) {
				if (!stored)
					*store_off = (unsigned)disp;
				else if ((unsigned)disp != *store_off)
					bad_store = true;
				stored = true;
			}
		}
		i += j + m;
	}
	if (!stored)
		return 0;
	if (bad_store || !saw_trigger || !saw_end)
		return -1;
	return 1;
}

uint64_t ocaml_runtime_find_final_todo(const uint8_t *c, size_t len, uint64_t fn)
{
	for (size_t i = 0; i + 8 <= len && i < 64; i++)
		if (c[i] == 0x48 && c[i + 1] == 0x83 && c[i + 2] == 0x3d && c[i + 7] == 0)
			return fn + i + 8 + (uint64_t)(int64_t)(int32_t)rd32(c + i + 3);
	return 0;
}

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
	/* mov rel32(%rip), r64 (REX.W 8b /r, mod 0, rm 5): a load into a
	 * register that is not an argument (5.3 caml_memprof_sample_block
	 * starts by loading caml_state's TLS offset from the GOT). */
	if (len >= 7 && (c[0] & 0xfb) == 0x48 && c[1] == 0x8b && (c[2] & 0xc7) == 0x05) {
		if (!writes_arg_register((c[2] >> 3) & 7, c[0] & 4))
			return 7;
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

unsigned ocaml_runtime_plain_insn_len(const uint8_t *c, size_t len)
{
	size_t i = 0, n;
	uint8_t op, modrm, mod, rm, rex = 0;
	unsigned imm = 0;

	if (i < len && c[i] == 0x64) /* %fs: */
		i++;
	if (i < len && (c[i] & 0xf0) == 0x40) /* REX */
		rex = c[i++];
	if (i >= len)
		return 0;
	op = c[i++];
	if (op >= 0xb8 && op <= 0xbf) { /* mov $imm32, r32 (imm64 with REX.W) */
		n = i + ((rex & 0x08) ? 8 : 4);
		return n <= len ? (unsigned)n : 0;
	}
	switch (op) {
	case 0x01: case 0x03: case 0x09: case 0x0b: case 0x21: case 0x23: /* add, or, and */
	case 0x29: case 0x2b: case 0x31: case 0x33: case 0x39: case 0x3b: /* sub, xor, cmp */
	case 0x85: case 0x89: case 0x8b: case 0x8d:                       /* test, mov, lea */
		break;
	case 0x83: /* ALU r/m, imm8 */
		imm = 1;
		break;
	case 0x81: case 0xc7: /* ALU r/m, imm32; mov r/m, imm32 */
		imm = 4;
		break;
	default:
		return 0;
	}
	if (i >= len)
		return 0;
	modrm = c[i++];
	mod = modrm >> 6;
	rm = modrm & 7;
	if (op == 0xc7 && ((modrm >> 3) & 7) != 0)
		return 0;
	if (mod != 3 && rm == 4) { /* SIB */
		if (i >= len)
			return 0;
		if (mod == 0 && (c[i] & 7) == 5)
			i += 4;
		i++;
	}
	if (mod == 1)
		i += 1;
	else if (mod == 2 || (mod == 0 && rm == 5))
		i += 4;
	n = i + imm;
	return n <= len ? (unsigned)n : 0;
}

/* Registers a call may change (System V AMD64 ABI: caller-saved). */
#define CALL_CLOBBERS ((1u << 0) | (1u << 1) | (1u << 2) | (1u << 6) | (1u << 7) | (0xfu << 8))

int ocaml_runtime_find_field_load(const uint8_t *c, size_t len, uint64_t fn, uint64_t cs_sym, unsigned disp,
				  struct ocaml_reg_load *out)
{
	unsigned known = cs_sym ? 0 : 1u << 7; /* registers holding the structure's address (rdi: 5.x's argument) */
	size_t i = 0;

	while (i < len) {
		const uint8_t *p = c + i;
		size_t n = len - i, j = 0, m;
		uint8_t rex = 0, op;
		unsigned reg;
		int base;
		int64_t d;
		bool reg_op;

		if ((m = flow_insn_len(p, n))) {
			i += m;
			continue;
		}
		if (p[0] == 0xe8 && n >= 5) { /* call rel32 */
			known &= ~CALL_CLOBBERS;
			i += 5;
			continue;
		}
		if ((p[0] & 0xf0) == 0x40)
			rex = p[j++];
		if (j >= n)
			return -1;
		op = p[j++];
		if (op >= 0xb8 && op <= 0xbf) { /* mov $imm, reg */
			known &= ~(1u << ((op & 7) | (rex & 1 ? 8 : 0)));
			i += j + (rex & 8 ? 8 : 4);
			continue;
		}
		if (op == 0x0f) { /* cmovcc reg, r/m: reg changes */
			if (j >= n || p[j] < 0x40 || p[j] > 0x4f)
				return -1;
			j++;
			m = modrm_operand(p + j, n - j, rex, &reg, &base, &d, &reg_op);
			if (!m)
				return -1;
			known &= ~(1u << reg);
			i += j + m;
			continue;
		}
		if (op != 0x8b && op != 0x89 && op != 0x39 && op != 0x3b && op != 0x85 && op != 0x83 && op != 0xc7)
			return -1; /* a form this walk does not follow */
		m = modrm_operand(p + j, n - j, rex, &reg, &base, &d, &reg_op);
		if (!m)
			return -1;
		if (op == 0x89) { /* mov reg, r/m: a register destination follows its source */
			if (reg_op) {
				if ((rex & 8) && (known & (1u << reg)))
					known |= 1u << base;
				else
					known &= ~(1u << base);
			}
			i += j + m;
			continue;
		}
		if (op == 0x83) { /* ALU $imm8: only on %rsp, or a compare */
			if (!(reg_op && base == 4) && reg != 7)
				return -1;
			i += j + m + 1;
			continue;
		}
		if (op == 0xc7) { /* mov $imm32 to memory */
			if (reg_op || reg != 0)
				return -1;
			i += j + m + 4;
			continue;
		}
		if (op == 0x8b) {
			if ((rex & 8) && !reg_op && base >= 0 && (known & (1u << base)) && (uint64_t)d == disp &&
			    (p[j] >> 6) != 0 && (p[j] & 7) != 4) {
				out->at = (uint32_t)i;
				out->len = (uint8_t)(j + m);
				out->dst = (uint8_t)reg;
				out->base = (uint8_t)base;
				out->disp = (int32_t)d;
				return 0;
			}
			if (cs_sym && (rex & 8) && !reg_op && base == -1 && fn + i + j + m + (uint64_t)d == cs_sym)
				known |= 1u << reg;
			else
				known &= ~(1u << reg);
		}
		i += j + m;
	}
	return -1;
}

int ocaml_runtime_find_end_store(const uint8_t *c, size_t len, uint64_t fn, uint64_t cs_sym, unsigned end_off,
				 unsigned limit_off, struct ocaml_reg_load *load, unsigned *store_len)
{
	const uint8_t *p;
	size_t i, n, m;
	uint8_t rex;
	unsigned reg;
	int base;
	int64_t d;
	bool reg_op;

	if (ocaml_runtime_find_field_load(c, len, fn, cs_sym, end_off, load) < 0)
		return -1;
	/* the store right after it: REX.W 89 /r, the loaded register into
	 * limit_off of the same base */
	i = load->at + load->len;
	if (i + 3 > len)
		return -1;
	p = c + i;
	n = len - i;
	rex = p[0];
	if ((rex & 0xf8) != 0x48 || p[1] != 0x89)
		return -1;
	m = modrm_operand(p + 2, n - 2, rex, &reg, &base, &d, &reg_op);
	if (!m || reg_op || reg != load->dst || base != load->base || (uint64_t)d != limit_off)
		return -1;
	*store_len = (unsigned)(2 + m);
	/* then the function's return */
	if (i + *store_len >= len || c[i + *store_len] != 0xc3)
		return -1;
	return 0;
}
