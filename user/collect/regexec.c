/* regexec.c -- see regexec.h. */
#define _GNU_SOURCE
#include "collect/regexec.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "collect/probe_cost.h"
#include "collect/uprobe_multi.h"

/* struct pt_regs of x86-64 (arch/x86/include/asm/ptrace.h), what a uprobe
 * program's context is: byte offsets of the fields used here. */
enum { PT_AX = 80, PT_DI = 112, PT_IP = 128 };

#define SELFTEST_ADD 0x5eed0000 /* what the program adds to the value it loads */

/* The behavioural check's site, in camlheap's own text: the load form the
 * register executor emulates in the runtime (a 4-byte mov disp8(base),reg). */
__asm__(".pushsection .text\n"
	".p2align 4\n.globl camlheap_regexec_selftest\n.type camlheap_regexec_selftest, @function\n"
	"camlheap_regexec_selftest:\n\tmov 0x20(%rdi), %rax\n\tret\n"
	".size camlheap_regexec_selftest, .-camlheap_regexec_selftest\n"
	".popsection\n");
uint64_t camlheap_regexec_selftest(const uint64_t *words);

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

/* Load `insns` as a uprobe_multi program; fd or -errno. */
static int load(const struct bpf_insn *insns, size_t n)
{
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = CH_BPF_TRACE_UPROBE_MULTI);
	int fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "ch_regexec", "GPL", insns, n, &opts);

	return fd < 0 ? -errno : fd;
}

static int check(char *why, size_t len)
{
	/* 1. A store to pt_regs->ip: refused ("invalid bpf_context access")
	 * where uprobe programs may not write their context. */
	const struct bpf_insn store_ip[] = {
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_1, .off = PT_IP },
		{ .code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_1, .src_reg = BPF_REG_2, .off = PT_IP },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	/* 2. The emulation of `mov 0x20(%rdi),%rax` plus SELFTEST_ADD:
	 *   r6 = ctx; r3 = ctx->di + 0x20; bpf_probe_read_user(r10 - 8, 8, r3)
	 *   if it failed: return 0 (the kernel steps the instruction: the
	 *   check then fails, as it should)
	 *   ctx->ax = *(r10 - 8) + SELFTEST_ADD; ctx->ip += 4; return 0 */
	const struct bpf_insn emulate[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_6, .src_reg = BPF_REG_1 },
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_3, .src_reg = BPF_REG_6, .off = PT_DI },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_3, .imm = 0x20 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_1, .src_reg = BPF_REG_10 },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_1, .imm = -8 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_2, .imm = 8 },
		{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_probe_read_user },
		{ .code = BPF_JMP | BPF_JNE | BPF_K, .dst_reg = BPF_REG_0, .off = 6, .imm = 0 },
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_10, .off = -8 },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = SELFTEST_ADD },
		{ .code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_6, .src_reg = BPF_REG_2, .off = PT_AX },
		{ .code = BPF_LDX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_6, .off = PT_IP },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = 4 },
		{ .code = BPF_STX | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_6, .src_reg = BPF_REG_2, .off = PT_IP },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	uint64_t words[8] = { 0 }, got;
	char path[4096];
	uint64_t off = 0;
	int fd, link, ret;

	if (!uprobe_multi_supported()) {
		snprintf(why, len, "the kernel has no uprobe_multi links (Linux 6.6)");
		return 0;
	}
	fd = load(store_ip, sizeof(store_ip) / sizeof(store_ip[0]));
	if (fd < 0) {
		if (fd == -EPERM)
			return -EPERM;
		snprintf(why, len, "the kernel refuses uprobe programs that write registers");
		return 0;
	}
	close(fd);
	fd = load(emulate, sizeof(emulate) / sizeof(emulate[0]));
	if (fd < 0) {
		snprintf(why, len, "the kernel refuses the emulating program (%s)", strerror(-fd));
		return 0;
	}
	ret = probe_cost_self_site((uintptr_t)camlheap_regexec_selftest, path, sizeof(path), &off);
	if (ret < 0) {
		close(fd);
		snprintf(why, len, "camlheap's own code is not in /proc/self/maps");
		return 0;
	}
	link = uprobe_multi_attach(fd, getpid(), path, off, false);
	if (link < 0) {
		close(fd);
		snprintf(why, len, "the kernel refuses to attach a register-writing uprobe (%s)", strerror(-link));
		return 0;
	}
	words[4] = 0x1234;
	got = camlheap_regexec_selftest(words);
	close(link);
	close(fd);
	if (got != 0x1234 + SELFTEST_ADD) {
		snprintf(why, len,
			 "the kernel took the register write but still ran the probed instruction (got %#llx, "
			 "wanted %#llx)",
			 (unsigned long long)got, (unsigned long long)(0x1234 + SELFTEST_ADD));
		return 0;
	}
	return 1;
}

int regexec_supported(char *why, size_t len)
{
	static int known = -2;
	static char known_why[256];

	if (known == -2) {
		libbpf_print_fn_t old = libbpf_set_print(quiet);

		known_why[0] = 0;
		known = check(known_why, sizeof(known_why));
		libbpf_set_print(old);
	}
	if (why && len)
		snprintf(why, len, "%s", known_why);
	return known;
}
