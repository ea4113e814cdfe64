/* regexec.h -- can this kernel run the register executor?
 *
 * The register executor (README *Minor heap*, executor `register`) writes
 * nothing into the target: a uprobe program sits on an instruction of the
 * runtime that loads the value the runtime is about to publish as
 * young_limit (4.x caml_update_young_limit and its inlined copy, 5.x
 * caml_reset_young_limit), performs that load itself with the sample point
 * folded in, puts the result in the instruction's destination register and
 * moves the instruction pointer past it.  The runtime then stores and
 * re-checks the value with its own code.  Two kernel changes make this
 * possible, both from one series of Jiri Olsa's (posted to bpf-next in
 * September 2025): "bpf: Allow uprobe program to change context registers", whose
 * kernel/trace/bpf_trace.c kprobe_prog_is_valid_access accepts a BPF_WRITE
 * and sets prog->aux->kprobe_write_ctx, refused at kprobe attach; and
 * "uprobe: Do not emulate/sstep original instruction when ip is changed",
 * kernel/events/uprobes.c handle_swbp).  Linux 6.18.44 refuses the first,
 * Debian's 7.2.13 has both; camlheap asks the kernel rather than trusting a
 * version.  Neither is refused by kernel lockdown, unlike
 * bpf_probe_write_user.
 */
#ifndef CH_REGEXEC_H
#define CH_REGEXEC_H

#include <stddef.h>

/* Does this kernel let a uprobe program change the probed thread's
 * registers, and skip the probed instruction when the program moved the
 * instruction pointer?  First a load check (a raw program that stores to
 * pt_regs->ip; refused with "invalid bpf_context access" before 6.19),
 * then, if loaded, a behavioural check on camlheap's own code: a
 * uprobe_multi link on `mov 0x20(%rdi),%rax` whose program performs the
 * load itself, adds a constant and moves ip past it; the call must return
 * the loaded value plus the constant (a kernel that single-stepped the
 * original instruction anyway would return the loaded value alone).
 * Answered once per process and remembered.  Returns 1 (usable), 0 (not:
 * `why`, if not NULL, says which check failed, `len` bytes), or -EPERM
 * (BPF cannot be loaded at all: privileges). */
int regexec_supported(char *why, size_t len);

#endif
