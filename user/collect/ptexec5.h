/* ptexec5.h -- the ptrace executor's young_limit write on OCaml 5 without
 * stopping any thread but the domain's own (struct ch_write_req recheck;
 * README *OCaml 5*, "The write without a freeze").
 */
#ifndef CH_PTEXEC5_H
#define CH_PTEXEC5_H

#include <stdint.h>
#include <sys/types.h>

#include "camlheap.h"

/* What ptexec5_write did. */
enum ptexec5_outcome {
	PTEXEC5_WRITTEN,     /* P stored; no interrupt flagged meanwhile */
	PTEXEC5_REINTERRUPT, /* P stored, then UINTNAT_MAX: an interrupt was flagged meanwhile */
	PTEXEC5_STALE,       /* not written: young_limit moved since the probe */
	PTEXEC5_IN_FLIGHT,   /* not written: an interrupt's flag was up and its store may still come */
	PTEXEC5_ERROR,       /* target memory could not be read or written (nothing written, or
			      * UINTNAT_MAX after P: the safe side) */
};

/* young_limit and the flags of an interrupt of one domain, as read from
 * the target (8-byte words; the addresses in struct ch_write_req). */
struct ptexec5_words {
	uint64_t limit;   /* young_limit */
	uint64_t intr;    /* all_domains[id].interruptor.interrupt_pending */
	uint64_t ext;     /* requested_external_interrupt */
	uint64_t signals; /* caml_pending_signals[0], bit k-1 for signal k */
	uint64_t epoch;   /* the domain's major_slice_epoch */
	uint64_t gepoch;  /* caml_major_slice_epoch */
};

/* The rule of ptexec5.c, without the target: `before` read before the
 * write of `expect`'s replacement, `after` once it is done (NULL: not
 * yet, the judgement of the first read).  Returns PTEXEC5_STALE or
 * PTEXEC5_IN_FLIGHT (write nothing) or PTEXEC5_WRITTEN (go on) for the
 * first read; PTEXEC5_WRITTEN or PTEXEC5_REINTERRUPT (store UINTNAT_MAX)
 * for the second. */
enum ptexec5_outcome ptexec5_judge(uint64_t expect, const struct ptexec5_words *before,
				   const struct ptexec5_words *after);

/* Perform `req` (req->recheck set: addresses of young_limit and of the
 * interrupt flags, runtime addresses of process `pid`) while the domain's
 * own thread is stopped in its SIGURG signal-delivery-stop and every other
 * thread runs.  `mem_fd` is the process's /proc/PID/mem opened O_RDWR.
 * The protocol and why it loses no interrupt: ptexec5.c.  Source: 5.1.0
 * and 5.4.1 runtime/domain.c (caml_reset_young_limit, caml_send_interrupt,
 * interrupt_domain), runtime/signals.c (caml_record_signal),
 * otherlibs/systhreads/st_pthreads.h (caml_thread_tick).  Returns what was
 * done. */
enum ptexec5_outcome ptexec5_write(pid_t pid, int mem_fd, const struct ch_write_req *req);

/* If camlheap dies (kill -9) between the write of P and the re-check, an
 * interrupt erased in between is never put back, and a domain that then
 * stops allocating would never join the stop-the-world section waiting for
 * it.  So the write in progress is kept in a page shared with the probe
 * holder (sampler_holder.c, forked from camlheap, outliving it), and the
 * holder calls this once camlheap is gone: if a write was in progress and
 * young_limit still holds the P written (the domain has not reset it since;
 * a reset re-checks every flag itself), it stores UINTNAT_MAX there through
 * /proc/PID/mem: at worst one trap with nothing to do.  Every executor
 * thread's write is looked at.  Returns 1 if it stored, 0 if there was
 * nothing to do, -1 if a target could not be read or written (gone). */
int ptexec5_settle_after_death(void);

/* Tests only: this process dies (SIGKILL) right after its n-th write of a
 * P, before the re-check (also set by CAMLHEAP_TEST_KILL_MID_WRITE=n in
 * the environment at start-up). */
void ptexec5_test_kill_after(long n);

#endif
