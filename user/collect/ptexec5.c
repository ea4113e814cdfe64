/* ptexec5.c -- see ptexec5.h.
 *
 * Who stores into a domain's young_limit on OCaml 5 (5.1-5.4): its own
 * thread (caml_reset_young_limit, the only store of a value other than
 * UINTNAT_MAX: runtime/domain.c, "the only way ... through which
 * [young_limit] can be modified"), and any thread interrupting it, which
 * stores UINTNAT_MAX after setting the flag the interrupt is about:
 *   - interruptor.interrupt_pending of all_domains[id] (caml_send_interrupt:
 *     stop-the-world requests), cleared by the domain's own thread only;
 *   - dom->requested_external_interrupt (the systhreads tick,
 *     caml_thread_tick), cleared by the domain's own thread only;
 *   - caml_major_slice_epoch above dom->major_slice_epoch
 *     (caml_request_major_slice of another domain), the domain's copy
 *     updated by its own thread only;
 *   - a bit of caml_pending_signals (caml_record_signal, in whatever
 *     thread the kernel delivered the signal to, then
 *     caml_interrupt_all_signal_safe), cleared by whichever domain handles
 *     the signal, and left up while the signal is blocked.
 *
 * The domain's own thread is stopped, so the first three flags cannot go
 * down during the write.  The protocol:
 *   (1) read young_limit and the flags: not written if young_limit is not
 *       what the probe saw (UINTNAT_MAX included: the probe skips that),
 *       or if a stop-the-world request or a major slice is flagged with
 *       young_limit below UINTNAT_MAX (caml_reset_young_limit re-checks
 *       both and stores UINTNAT_MAX itself, so flagged at its return means
 *       the store is still to come: writing could erase it);
 *   (2) write P (and action_pending back, struct ch_write_req restore_*);
 *   (3) read the flags again: UINTNAT_MAX is stored if one of those two is
 *       up, or the tick's flag or a signal bit is up now that was not at
 *       (1).
 * An interrupt flagged between (1) and (3) is seen at (3) and its
 * UINTNAT_MAX put back, whether its own store came before (2) (erased,
 * then restored) or after (it won by itself, and the second store changes
 * nothing); one flagged after (3) stores after (2) and wins.  (3) reads
 * only after (2) is visible: each pread of /proc/PID/mem takes the
 * target's mmap_lock (access_remote_vm) with a locked instruction, a full
 * barrier on x86-64.
 *
 * The tick's flag and the signals are judged by change, not by level: the
 * runtime handles both after the reset, in the same call
 * (caml_do_pending_actions_res: caml_handle_gc_interrupt, whose
 * caml_poll_gc_work resets young_limit, then the signals, the callbacks,
 * and the external interrupt last; 5.3 runtime/signals.c:333-365), so at
 * that reset's return their flags are still up, already consumed, and a
 * blocked signal keeps its bit up for as long as it is blocked.  A level
 * rule refused 1874 of 1889 writes of the alloc_minor fixture's `sig` part
 * (670 sample points lost), and writes at the tick's reset with systhreads
 * (a point passed while another thread ran).  The one case the change rule
 * does not see: a flag already up at (1) whose UINTNAT_MAX, stored by
 * another thread (the tick thread, or the thread the kernel delivered a
 * signal to), lands between (1) and (2).  The domain then does not stop at
 * once: it runs the handler or yields at its next poll of action_pending
 * (set at every reset) or its next trap, at P at the latest, and for a
 * signal any other domain interrupted by the same recording may run it
 * first (signals are the process's, not a domain's).  A delay of a signal
 * handler or of a thread switch by less than one sample interval, never a
 * loss, and only within the microseconds of one write.
 */
#define _GNU_SOURCE
#include "collect/ptexec5.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The writes in progress (ptexec5_settle_after_death), one slot per
 * executor thread (serve runs one a target), pid 0 when none.  A
 * MAP_SHARED page made at camlheap's start, so that every process forked
 * from it (the probe holders) sees the executors' stores.  An executor
 * thread beyond the last slot writes unguarded. */
struct write_guard {
	uint64_t pid, addr, value;
};

#define GUARD_SLOTS 128

static struct write_guard *guards;
static unsigned next_slot;
static __thread int my_slot = -1;
static long kill_mid_write = -1; /* CAMLHEAP_TEST_KILL_MID_WRITE=N: die after the N-th write, before its re-check (tests) */

__attribute__((constructor)) static void guard_init(void)
{
	void *m = mmap(NULL, GUARD_SLOTS * sizeof(struct write_guard), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	const char *k = getenv("CAMLHEAP_TEST_KILL_MID_WRITE");

	guards = m == MAP_FAILED ? NULL : m;
	if (k && *k)
		kill_mid_write = atol(k);
}

static struct write_guard *my_guard(void)
{
	if (my_slot < 0)
		my_slot = (int)__atomic_fetch_add(&next_slot, 1, __ATOMIC_RELAXED);
	return guards && my_slot < GUARD_SLOTS ? &guards[my_slot] : NULL;
}

/* young_limit and the flags now, in as few preads of /proc/PID/mem as
 * their places allow: a word within 512 bytes above the one before it in
 * the list is read with it (young_limit, major_slice_epoch and
 * requested_external_interrupt lie in the domain state's first 300 bytes,
 * in that order; caml_major_slice_epoch may follow caml_pending_signals).
 * Measured here: a pread of /proc/PID/mem ~1 us, one process_vm_readv of
 * the six words ~9 us (it pins each iovec's page apart).  Returns 0, or -1
 * if a word could not be read. */
static int read_words(int mem_fd, const struct ch_write_req *r, struct ptexec5_words *w)
{
	const struct {
		uint64_t addr;
		uint64_t *dst;
	} want[6] = {
		{ r->addr, &w->limit },		  { r->epoch_addr, &w->epoch },	    { r->ext_addr, &w->ext },
		{ r->intr_addr, &w->intr },	  { r->signals_addr, &w->signals }, { r->gepoch_addr, &w->gepoch },
	};
	uint64_t run[64];

	for (int i = 0; i < 6;) {
		uint64_t lo = want[i].addr, hi = lo + 8;
		int j = i + 1;

		while (j < 6 && want[j].addr >= hi && want[j].addr + 8 <= lo + sizeof(run))
			hi = want[j++].addr + 8;
		if (pread(mem_fd, run, hi - lo, (off_t)lo) != (ssize_t)(hi - lo))
			return -1;
		for (; i < j; i++)
			memcpy(want[i].dst, (const char *)run + (want[i].addr - lo), 8);
	}
	return 0;
}

/* A stop-the-world request or a major slice flagged: what
 * caml_reset_young_limit itself answers with UINTNAT_MAX. */
static bool stw_or_slice(const struct ptexec5_words *w)
{
	return w->intr || w->epoch < w->gepoch;
}

enum ptexec5_outcome ptexec5_judge(uint64_t expect, const struct ptexec5_words *before,
				   const struct ptexec5_words *after)
{
	if (!after) {
		if (before->limit != expect)
			return PTEXEC5_STALE;
		return stw_or_slice(before) ? PTEXEC5_IN_FLIGHT : PTEXEC5_WRITTEN;
	}
	return stw_or_slice(after) || (after->ext && !before->ext) || (after->signals & ~before->signals)
		       ? PTEXEC5_REINTERRUPT
		       : PTEXEC5_WRITTEN;
}

enum ptexec5_outcome ptexec5_write(pid_t pid, int mem_fd, const struct ch_write_req *req)
{
	struct ptexec5_words before, after;
	enum ptexec5_outcome o;
	uint64_t max = UINT64_MAX;
	struct write_guard *guard = my_guard();

	if (read_words(mem_fd, req, &before))
		return PTEXEC5_ERROR;
	o = ptexec5_judge(req->expect, &before, NULL);
	if (o != PTEXEC5_WRITTEN)
		return o;
	if (guard) {
		__atomic_store_n(&guard->addr, req->addr, __ATOMIC_RELAXED);
		__atomic_store_n(&guard->value, req->value, __ATOMIC_RELAXED);
		__atomic_store_n(&guard->pid, (uint64_t)pid, __ATOMIC_SEQ_CST);
	}
	if (pwrite(mem_fd, &req->value, sizeof(req->value), (off_t)req->addr) != sizeof(req->value))
		o = PTEXEC5_ERROR;
	else {
		if (req->restore_addr)
			(void)!pwrite(mem_fd, &req->restore_value, sizeof(req->restore_value),
				      (off_t)req->restore_addr);
		if (kill_mid_write > 0 && --kill_mid_write == 0)
			raise(SIGKILL);
		/* unreadable now (it read a moment ago): interrupt, the safe side */
		if (read_words(mem_fd, req, &after) == 0 &&
		    ptexec5_judge(req->expect, &before, &after) == PTEXEC5_WRITTEN)
			o = PTEXEC5_WRITTEN;
		else
			o = pwrite(mem_fd, &max, sizeof(max), (off_t)req->addr) == sizeof(max) ? PTEXEC5_REINTERRUPT
											: PTEXEC5_ERROR;
	}
	if (guard)
		__atomic_store_n(&guard->pid, 0, __ATOMIC_SEQ_CST);
	return o;
}

static int settle(struct write_guard *g)
{
	uint64_t now = 0, max = UINT64_MAX, pid = __atomic_load_n(&g->pid, __ATOMIC_SEQ_CST);
	char path[64];
	int fd, ret = 0;

	if (!pid)
		return 0;
	snprintf(path, sizeof(path), "/proc/%llu/mem", (unsigned long long)pid);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (pread(fd, &now, sizeof(now), (off_t)g->addr) != sizeof(now))
		ret = -1;
	else if (now == g->value)
		ret = pwrite(fd, &max, sizeof(max), (off_t)g->addr) == sizeof(max) ? 1 : -1;
	close(fd);
	return ret;
}

int ptexec5_settle_after_death(void)
{
	int ret = 0;

	for (int i = 0; guards && i < GUARD_SLOTS; i++) {
		int r = settle(&guards[i]);

		if (r && ret >= 0)
			ret = r;
	}
	return ret;
}

void ptexec5_test_kill_after(long n)
{
	kill_mid_write = n;
}
