/* trapcost.bpf.c -- empty programs for the calibration of what a uprobe
 * hit costs the probed thread on this kernel (user/collect/probe_cost.c):
 * attached to camlheap's own code, at an instruction the kernel emulates,
 * one it single-steps, and as a uretprobe.  They do nothing, so what a
 * call costs beyond an unprobed one is the trap itself (the kernel's
 * breakpoint handling, the uprobe lookup, the emulation or the
 * single-step, the return trampoline), plus their own run time, which the
 * calibration subtracts (bpf_prog_info.run_time_ns).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int trapcost_entry(struct pt_regs *ctx)
{
	return 0;
}

SEC("uretprobe")
int trapcost_return(struct pt_regs *ctx)
{
	return 0;
}
