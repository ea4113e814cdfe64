/* proc.h -- the target process: existence, executable, load bias, and the
 * launch mode that starts a command stopped at exec (PTRACE_O_TRACEEXEC,
 * ptrace(2)).
 */
#ifndef CH_PROC_H
#define CH_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <sys/types.h>

#include "target/elf_image.h"

/* Resolve /proc/PID/exe into buf.  Returns 0, -ESRCH (no such process, or a
 * zombie / kernel thread without an executable), -EACCES (not allowed to
 * inspect it: needs CAP_SYS_PTRACE over that process). */
int proc_exe_path(pid_t pid, char *buf, size_t len);

/* Read the integer field `name` ("Tgid", "TracerPid", ...) of
 * /proc/PID/status into *value.  Returns 0, or -ENOENT if the process or
 * the field is missing. */
int proc_status_field(pid_t pid, const char *name, long *value);

/* The path of PID's cgroup ("/system.slice/foo.service") in the cgroup v2
 * hierarchy (controller NULL: /proc/PID/cgroup's "0::" line) or in the v1
 * hierarchy of `controller` ("memory": the line whose controller list has
 * it), into out (len bytes).  Returns 0, -ESRCH (no such process) or
 * -ENOENT (no such hierarchy: cgroup(7) "/proc/[pid]/cgroup"). */
int proc_cgroup(pid_t pid, const char *controller, char *out, size_t len);

/* The state letter (field 3: 'R', 'S', 'Z', ...) and the start time (field
 * 22, clock ticks after boot) of /proc/PID/stat (proc(5)); either pointer
 * may be NULL.  Returns 0, -ESRCH (no such process), or another -errno or
 * -EINVAL when the file cannot be read or parsed (e.g. -EMFILE). */
int proc_stat(pid_t pid, char *state, unsigned long long *starttime);

/* True if `pid` names a thread-group leader (a process, not a thread id). */
int proc_is_process(pid_t pid);

/* Load bias (runtime address - link-time vaddr) of the executable `img` as
 * mapped in `pid`, from /proc/PID/maps: the mapping of the same file
 * (device and inode of /proc/PID/exe) whose offset is that of the first
 * PT_LOAD.  0 for a non-PIE.  Returns 0, -ESRCH, -ENOENT (not mapped), or
 * another -errno reading /proc (e.g. -EMFILE). */
int proc_load_bias(pid_t pid, const struct elf_image *img, uint64_t *bias);

/* Start argv[] (PATH lookup as execvp) as a child with the signal mask
 * `child_mask` (camlheap's own before it blocked its stop signals) and the
 * dispositions camlheap inherited, stopped in the PTRACE_EVENT_EXEC stop right after
 * exec: its executable is mapped and not one user instruction has run.
 * The child is PTRACE_SEIZEd (never with PTRACE_O_EXITKILL) before it
 * execs: if camlheap dies at any point, an event stop just ends and the
 * command runs unprofiled.  Returns 0 and the pid, or a negative errno
 * with a message in err (e.g. -ENOENT "cannot run foo: No such file..."),
 * in which case the child has been reaped. */
int proc_launch(char *const argv[], const sigset_t *child_mask, pid_t *pid, char *err, size_t errlen);

/* Let a launched child run: PTRACE_DETACH from the exec stop.  Returns 0 or
 * a negative errno. */
int proc_launch_release(pid_t pid);

/* Open a pidfd (readable when the process exits).  Returns fd or -errno. */
int proc_pidfd(pid_t pid);

/* Read len bytes at address addr of process pid (process_vm_readv, one
 * iovec; nothing is written into it).  Returns 0, or -EFAULT if fewer were
 * read (unmapped, the process gone, or not allowed). */
int proc_read_mem(pid_t pid, uint64_t addr, void *buf, size_t len);

/* argv (NULL-terminated) as one command line a shell would take back:
 * arguments with anything but [A-Za-z0-9_@%+=:,./-] in them, or empty,
 * single-quoted (glib's g_shell_quote); those with bytes that are not
 * UTF-8, or control characters, in bash's $'...' with \xHH escapes (the
 * line is always valid UTF-8).  Returns a malloc'ed string, or NULL on
 * allocation failure. */
char *proc_command_line(char *const argv[]);

/* An attach's CPU time (~0.1 s, most of it the kernel verifying the BPF
 * programs) runs at this nice value: where the CPUs are busy (30 busy
 * processes appearing at once under serve) it would otherwise stretch with
 * the load, for as long as the target waits (launch mode) or goes
 * unprofiled. */
#define PROC_ATTACH_NICE (-10)

/* Set the calling thread's nice value to `nice` if that raises its
 * priority (a nice value is per thread on Linux: setpriority(2), NOTES;
 * threads created meanwhile inherit it).  Needs CAP_SYS_NICE; without it,
 * or if the thread is at `nice` or better already, nothing changes.
 * Returns the value proc_thread_nice_restore puts back, or INT_MIN
 * (nothing to put back). */
int proc_thread_nice_raise(int nice);

/* Put back what proc_thread_nice_raise returned (INT_MIN: nothing).
 * Lowering a priority needs no privilege. */
void proc_thread_nice_restore(int nice0);

#endif
