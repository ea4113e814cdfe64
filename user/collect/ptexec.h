/* ptexec.h -- the ptrace write executor (README *Minor heap*, the executor
 * table; ptrace(2)): where the kernel refuses bpf_probe_write_user
 * (lockdown), the BPF program queues the young_limit write for the thread
 * that hit the probe (map `write_req`, struct ch_write_req) and sends that
 * thread SIGURG; the thread stops in signal-delivery-stop before it runs
 * another instruction, this executor performs the write and resumes it with
 * the signal suppressed.
 *
 * One dedicated thread of camlheap is the tracer of every thread of the
 * target (a tracee's tracer is a thread, and only it may resume it).  Every
 * other signal is passed through, group-stops are kept (PTRACE_LISTEN),
 * clones are followed, exec and exit are handled as a debugger must.  Never
 * PTRACE_O_EXITKILL: if camlheap dies the kernel detaches the threads and
 * the target runs on (at worst one ignored SIGURG, and a raised young_limit
 * that costs one extra trap).
 */
#ifndef CH_PTEXEC_H
#define CH_PTEXEC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct ptexec;

struct ptexec_stats {
	uint64_t stops;          /* SIGURG stops served */
	uint64_t writes;         /* young_limit writes performed */
	uint64_t stale;          /* not written: young_limit changed since the probe (the runtime's value won) */
	uint64_t pending;        /* not written: caml_something_to_do was set (an action is pending) */
	uint64_t write_errors;   /* the read or write of target memory failed */
	uint64_t passed_signals; /* the target's own signals passed through */
	uint64_t group_stops;    /* job-control stops kept (PTRACE_LISTEN) */
	uint64_t threads;        /* threads traced, in all */
	uint64_t freezes;        /* OCaml 5: writes done with every other thread stopped */
	uint64_t freeze_timeouts;/* OCaml 5: not written, a thread did not stop within 200 ms */
	uint64_t rechecks;       /* OCaml 5: writes made with the interrupt flags read around them, no freeze */
	uint64_t in_flight;      /* OCaml 5: not written, an interrupt's flag was up */
	uint64_t reinterrupts;   /* OCaml 5: UINTNAT_MAX stored after a write, a flag went up meanwhile */
	double service_s;        /* time spent between a stop's report and its resumption */
	double stopped_s;        /* the stops as the target paid them: from the probe's request (its
				  * bpf_ktime_get_ns stamp, inside the trap) to the PTRACE_CONT that
				  * resumed the thread, seconds; the thread's wake-up after it is not in it */
};

/* Launch argv[] (as proc_launch, proc.h) with the executor's thread as its
 * tracer: the command is left in its exec stop until ptexec_run.  Returns
 * 0 and the pid, or a negative errno with a message. */
int ptexec_launch(char *const argv[], const sigset_t *child_mask, pid_t *pid, struct ptexec **out, char *err,
		  size_t errlen);

/* Seize every thread of process `pid` (PTRACE_SEIZE with TRACECLONE and
 * TRACEEXEC, repeated over /proc/PID/task until no new thread appears).
 * Returns 0, or a negative errno with a message: -EPERM with the name and
 * PID of the tracer that already holds it (gdb, strace), -ESRCH if it
 * exited. */
int ptexec_attach(pid_t pid, struct ptexec **out, char *err, size_t errlen);

/* Serve writes from the `write_req` map `write_req_fd`; a launched command
 * leaves its exec stop now.  With `keep_cpus_awake`, also spin one
 * SCHED_IDLE thread per CPU until ptexec_stop, so that no vCPU halts
 * between a stop and its resumption (the cross-vCPU wakeup dominates the
 * cost of a stop in a VM).  Returns 0 or a negative errno. */
int ptexec_run(struct ptexec *x, int write_req_fd, bool keep_cpus_awake);

/* Detach from every thread, after the uprobes are gone: each thread is
 * interrupted, a write still queued for it is performed first, and it is
 * detached with its own pending signal (a group-stop survives).  Then the
 * executor thread ends.  Safe to call in any state, and again (then it does
 * nothing). */
void ptexec_stop(struct ptexec *x);

/* True once the target's main thread exited while traced; *status is its
 * wait status (the executor reaped it if it is camlheap's child). */
bool ptexec_exited(const struct ptexec *x, int *status);

/* True if the target called exec while traced. */
bool ptexec_execed(const struct ptexec *x);

void ptexec_stats(const struct ptexec *x, struct ptexec_stats *out);

/* Free (stops first if needed). */
void ptexec_free(struct ptexec *x);

#endif
