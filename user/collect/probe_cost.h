/* probe_cost.h -- what camlheap's uprobes cost the target: the trap of each
 * hit, calibrated on this kernel, times the hits the kernel counted.
 *
 * A uprobe hit is a breakpoint trap: the kernel's int3 handling, the uprobe
 * lookup, the BPF programs, then the probed instruction emulated (push,
 * call, jmp, jcc, nop) or single-stepped out of line (a second trap), and
 * for a uretprobe, a second trap at the return trampoline
 * (arch/x86/kernel/uprobes.c, kernel/events/uprobes.c).  The BPF programs'
 * own time is bpf_prog_info.run_time_ns; the rest is invisible to them, so
 * it is measured: the same kinds of probes on camlheap's own code, calls
 * timed with and without them.  Both counts need the kernel's BPF run-time
 * statistics on (BPF_ENABLE_STATS, kernel >= 5.8).
 */
#ifndef CAMLHEAP_PROBE_COST_H
#define CAMLHEAP_PROBE_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sampler;

/* Turn the kernel's BPF run-time statistics on (BPF_ENABLE_STATS
 * BPF_STATS_RUN_TIME, kernel >= 5.8), once per process, for as long as it
 * lives: a switch for the whole host, which costs each BPF program run two
 * clock reads.  Returns 0 or a negative errno (then the kernel counts no
 * runs unless kernel.bpf_stats_enabled is set). */
int probe_cost_stats_on(void);

/* The file holding camlheap's own code at address `addr` (a function of
 * camlheap's, to probe), and `addr`'s offset in that file, what a uprobe
 * takes, from /proc/self/maps: `path` gets up to `pathlen` bytes.  Returns 0,
 * -ENOENT (not in a file mapping), or another negative errno. */
int probe_cost_self_site(uintptr_t addr, char *path, size_t pathlen, uint64_t *offset);

/* A hit's cost to the probed thread beyond an unprobed call, ns, its BPF
 * program's run time left out. */
struct trap_cost {
	double emulated_ns; /* an entry probe on an instruction the kernel emulates (push %rbp) */
	double stepped_ns;  /* one it single-steps (sub $8,%rsp) */
	double return_ns;   /* a uretprobe's return trap, on top of the entry trap */
	bool valid;
};

/* Measure *out: empty BPF programs (bpf/trapcost.bpf.c) attached at once
 * to three functions of camlheap's own (an emulated entry, a single-stepped
 * one, a uretprobe) beside a fourth unprobed, timed in 21 rounds of 100
 * calls of each in turn; each cost is the median of the rounds'
 * differences (the uretprobe's return against the emulated entry), so a
 * change of the machine's speed between timings cancels.  Takes ~10 ms
 * where a single-step costs 1 us, ~0.1 s at 30 us (a VM).
 * Returns 0, or a negative errno with a message in err (no BPF, the
 * executable's mapping not found). */
int trap_cost_calibrate(struct trap_cost *out, char *err, size_t errlen);

/* What the target paid for the probes of sampler `s` so far. */
struct probe_cost {
	uint64_t hits;   /* BPF program runs at the target's probes (bpf_prog_info.run_cnt, summed) */
	uint64_t bpf_ns; /* their run time (bpf_prog_info.run_time_ns, summed), ns */
	double trap_s;   /* each program's runs times the trap of the site it sits on, seconds; a
			  * program on sites of different kinds (--malloc's return probes, free and
			  * munmap) counts the dearest; 0 if tc is not valid */
	bool counted;    /* the kernel counted runs (statistics were on): else hits and bpf_ns are 0 */
};

/* Fill *out for the probes sampler `s` attached (the runtime's, --malloc's),
 * with the calibration `tc` (NULL or not valid: trap_s 0). */
void sampler_probe_cost(const struct sampler *s, const struct trap_cost *tc, struct probe_cost *out);

#endif
