/* discover.bpf.c -- `camlheap serve`'s discovery: every successful exec on
 * the host, as the PID that now runs a new program, through a ring buffer.
 * The sched_process_exec tracepoint fires in the exec'ing task once the new
 * image is in place (fs/exec.c exec_binprm), before it runs an instruction
 * of it; user space matches the PID against the configured targets
 * (/proc/PID/exe, cgroup) and starts a worker.  No polling of /proc.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "camlheap.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} execs SEC(".maps");

/* execs lost because the ring was full (user space then rescans /proc) */
__u64 lost;

SEC("tp_btf/sched_process_exec") /* a raw tracepoint: needs no tracefs */
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct ch_exec_event e = { .tgid = bpf_get_current_pid_tgid() >> 32 };

	if (bpf_ringbuf_output(&execs, &e, sizeof(e), 0))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}
