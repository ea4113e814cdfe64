/* freeze.h -- stop every thread of an OCaml 4.x process at a point where
 * its major heap is consistent, read it, let it go (issue 25: the exact
 * census and, later, the walk from the roots).
 *
 * Nothing is written into the target: every thread is PTRACE_SEIZEd and
 * PTRACE_INTERRUPTed (no SIGSTOP, so neither its parent nor a kill -9 of
 * camlheap sees a stopped process: the kernel detaches a dead tracer's
 * tracees and they run on); a signal that arrives while camlheap stops a
 * thread is delivered at once, one that arrives while it is stopped stays
 * pending in the kernel and is delivered when it runs again.  A stop is kept only if no thread is inside
 * the runtime's memory manager: each thread's stack is unwound (libdwfl,
 * from the DWARF CFI the runtime, libc and ocamlopt emit) from its PC up to
 * its first OCaml frame, and none of those frames may be a function of the
 * 4.x runtime that changes the major heap's blocks or chunks
 * (runtime/major_gc.c, minor_gc.c, compact.c, freelist.c, memory.c,
 * intern.c, finalise.c, weak.c, gc_ctrl.c of 4.12.1 and 4.14.2).  OCaml code
 * itself only allocates in the minor heap and stores into fields, so a
 * thread stopped there leaves the major heap consistent.  Otherwise the
 * threads run on for 1-4 ms and are stopped again.
 */
#ifndef CH_FREEZE_H
#define CH_FREEZE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target/elf_image.h"

#define FREEZE_IN_OCAML 1

struct heap_freeze {
	pid_t pid;
	pid_t *tids;          /* the seized threads */
	uint64_t *first_ra;   /* per thread, at the kept stop: the return address into its first OCaml
			       * frame above C frames; FREEZE_IN_OCAML if its innermost frame is OCaml
			       * code; 0 if it has no OCaml frame */
	size_t ntids, cap;
	unsigned attempts;    /* stops tried until one was consistent */
	double wait_s;        /* from the first stop to the kept one, seconds (the target ran meanwhile) */
	double stopped_at;    /* CLOCK_MONOTONIC, seconds: when the kept stop began */
	char unsafe_fn[128];  /* the last stop refused: the runtime function a thread was in */
};

/* Seize every thread of `pid` and stop them all at a consistent point (see
 * above), trying for at most `max_wait_s` seconds.  `img` is the target's
 * executable, mapped at load bias `bias` (its .symtab names the runtime's
 * functions).  Returns 0 with every thread stopped (f->stopped_at set), or
 * -errno with the reason in err (errlen bytes) and every thread running:
 * -ESRCH the process exited, -EPERM not allowed to trace it (already
 * traced, or no CAP_SYS_PTRACE), -ETIMEDOUT no consistent stop within
 * max_wait_s (err names the function a thread kept being in). */
int heap_freeze_stop(struct heap_freeze *f, pid_t pid, const struct elf_image *img, uint64_t bias,
		     double max_wait_s, char *err, size_t errlen);

/* Let every thread go (PTRACE_DETACH) and free f's arrays.  Returns the seconds the
 * threads were stopped. */
double heap_freeze_release(struct heap_freeze *f);

/* While the target is stopped, ^Z (or a background read or write) must
 * not stop camlheap: SIGTSTP, SIGTTIN and SIGTTOU blocked, the mask as it
 * was into *old (sigprocmask(SIG_SETMASK, old, NULL) once the target runs
 * again). */
void heap_freeze_hold_job_stops(sigset_t *old);

#endif
