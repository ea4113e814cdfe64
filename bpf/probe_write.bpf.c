// SPDX-License-Identifier: GPL-2.0
/* probe_write.bpf.c -- a uprobe program that calls bpf_probe_write_user and
 * is never attached: whether the kernel loads it tells whether the kernel
 * executor can run (kernel lockdown refuses the helper: kernel/trace/
 * bpf_trace.c bpf_tracing_func_proto, LOCKDOWN_BPF_WRITE_USER).  Kept apart
 * so that the main object loads on every kernel. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int BPF_KPROBE(probe_write, __u64 addr)
{
	__u64 v = 0;

	bpf_probe_write_user((void *)addr, &v, sizeof(v));
	return 0;
}
