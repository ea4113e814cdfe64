/* discover.bpf.c -- `camlheap serve`'s discovery: every successful exec on
 * the host, as the PID that now runs a new program, through a ring buffer.
 * The sched_process_exec tracepoint fires in the exec'ing task once the new
 * image is in place (fs/exec.c exec_binprm), before it runs an instruction
 * of it; user space matches the PID against the configured targets
 * (/proc/PID/exe, cgroup) and starts a worker.  No polling of /proc.  The
 * fork children of the processes followed too (sched_process_fork).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "camlheap.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} execs SEC(".maps");

/* execs lost because the ring was full (user space then rescans /proc) */
__u64 lost;

/* The processes followed (user space keeps it): their fork children,
 * which exec nothing (a pre-forking server's workers), are reported too. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CH_DISC_FOLLOWED_MAX);
	__type(key, __u32);  /* tgid */
	__type(value, __u8);
} followed SEC(".maps");

SEC("tp_btf/sched_process_exec") /* a raw tracepoint: needs no tracefs */
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct ch_exec_event e = { .tgid = bpf_get_current_pid_tgid() >> 32, .kind = CH_DISC_EXEC };
	struct inode *ino = BPF_CORE_READ(bprm, file, f_inode);

	/* the program's identity: a process that has ended by the time user
	 * space looks at it is still known to be a target's (missed) */
	e.dev = BPF_CORE_READ(ino, i_sb, s_dev);
	e.ino = BPF_CORE_READ(ino, i_ino);
	if (bpf_ringbuf_output(&execs, &e, sizeof(e), 0))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}

/* sched_process_fork fires in the parent for every clone (kernel/fork.c
 * kernel_clone, before the child first runs); a new process is a child
 * that leads its own thread group. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = bpf_get_current_pid_tgid() >> 32;
	struct ch_exec_event e = { .kind = CH_DISC_FORK, .parent = ptgid };

	if (BPF_CORE_READ(child, pid) != BPF_CORE_READ(child, tgid) || !bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	e.tgid = BPF_CORE_READ(child, tgid);
	if (bpf_ringbuf_output(&execs, &e, sizeof(e), 0))
		__sync_fetch_and_add(&lost, 1);
	return 0;
}
