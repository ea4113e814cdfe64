/* sampler.h -- load the BPF sampler (bpf/alloc.bpf.c), give it the
 * executable's frame table and the geometric-draw pool, attach its uprobes
 * to one process, and hand sample events to a callback.
 */
#ifndef CH_SAMPLER_H
#define CH_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "camlheap.h"
#include "target/frametable.h"
#include "target/ocaml_runtime.h"
#include "collect/malloc_probes.h"

struct sampler_config {
	double rate;            /* lambda: samples per allocated word, 0 < rate <= 1 */
	unsigned max_frames;    /* stack walk depth, 1..CH_MAX_FRAMES */
	size_t ringbuf_bytes;   /* power of two >= 4096 */
	uint32_t stacks_sent_cap; /* stack ids remembered as sent (an evicted one is sent again, its
				   * frames through the ring once more); 0: 65536 (80 bytes each) */
	enum ch_executor executor; /* who writes young_limit for the minor heap (observe: nobody) */
	pid_t tracer_tgid;      /* ptrace executor: camlheap's own PID (the BPF guard checks the tracer) */
	bool minor_from_memprof; /* observe: the program runs Gc.Memprof at `rate`; take its minor samples */
	bool census;            /* follow sampled blocks to their death (fate events) */
	uint32_t max_tracked;   /* census: sampled blocks followed in the major heap at once;
				 * 0: sampler_default_max_tracked(rate) */
	const struct malloc_probes *malloc; /* --malloc: the libc probes to attach too (copied), or NULL */
	const struct ocaml_runtime *runtime; /* the target's: only the programs its probes need are
					      * loaded (NULL: all) */
	uint32_t runtime_frames_cap; /* frame descriptors registered at run time (plugins) the unwinder
				      * can hold; 0: 1 Mi (the kernel zeroes 16 bytes a slot at load) */
	const char *kernel_btf; /* a BTF file of the kernel types the BPF object reads
				 * (sampler_kernel_btf's /proc/PID/fd/N), or NULL: cut at the open */
};

/* The kernel types the sampler's BPF object (bpf/alloc.bpf.c) reads,
 * cut out of the running kernel's BTF (kernel_btf_memfd): a sealed memfd,
 * close-on-exec, that any number of sampler_open's can read through
 * sampler_config.kernel_btf, sparing each the kernel's whole BTF (5.5 MB
 * read and parsed, ~40 ms).  Returns the fd or a negative errno with `err`
 * set (the open then reads the whole BTF). */
int sampler_kernel_btf(char *err, size_t errlen);

/* Entries of the kernel's young set for `rate`: enough for the samples of
 * a minor heap of 8 Mwords (32 times OCaml's default) with ten standard
 * deviations to spare; at most 1 Mi (48 MiB).  A sample beyond it is reported as
 * not followed (CH_CNT_TRACK_FULL). */
uint32_t sampler_young_capacity(double rate);

/* Default entries of the kernel's major set (and of --malloc's live set)
 * for `rate` (samples per word): the sampled blocks of a 16 GiB live major
 * heap (2^31 words) at that rate, rounded up to a power of two, at least
 * 16 Ki and at most 256 Ki (48 bytes of kernel memory an entry, allocated
 * when the maps are loaded): 32 Ki (1.5 MiB) at the default 1e-5, 256 Ki
 * (12 MiB) from 1.3e-4 up.  Beyond it blocks are counted live and no
 * longer followed (the report says how many; --max-tracked sets it). */
uint32_t sampler_default_max_tracked(double rate);

/* Called for each event; `size` bytes are valid (frames only if has_frames).
 * A record whose kind is CH_FATE_* or CH_NOTE_MAJOR_CLEAN is a struct
 * ch_fate_event of sizeof(struct ch_fate_event) bytes. */
typedef void (*sampler_event_fn)(void *ctx, const struct ch_sample_event *ev, size_t size);

struct sampler;

/* Open and load the BPF object, fill the `frametable` map with every
 * descriptor of `ft` (link-time retaddr -> frame size) and the geometric
 * pool for cfg->rate.  Returns 0, or a negative errno with a message in err
 * (-EPERM: missing CAP_BPF/CAP_PERFMON, say so). */
int sampler_open(const struct sampler_config *cfg, const struct frametable *ft, sampler_event_fn fn, void *ctx,
		 struct sampler **out, char *err, size_t errlen);

/* Register `pid` (a tgid) with its load bias (the minor heap is sampled if
 * `rt` has the minor probes and the executor is not observe), then attach
 * every planned probe of `rt` to the executable at `exe` (a path, e.g. "/proc/PID/exe"),
 * and with cfg->malloc the libc probes (bpf/malloc.bpf.h; return probes
 * before entry probes),
 * filtered to that process (`exe_name` is what messages call it), and the exec tracepoint (an exec ends the
 * process's sampling: CH_NOTE_EXEC).  Returns 0, or a negative errno with a
 * message. */
int sampler_attach(struct sampler *s, pid_t pid, uint64_t load_bias, const struct ocaml_runtime *rt,
		   const char *exe, const char *exe_name, char *err, size_t errlen);

/* Can this kernel run BPF programs that call bpf_probe_write_user?  Loads
 * a tiny uprobe program that does (eight raw instructions) and unloads it.
 * False under kernel lockdown (Secure Boot), which refuses the helper.
 * Returns 1, 0, or a negative errno if BPF itself cannot be loaded. */
int sampler_kernel_write_allowed(void);

/* fd of the `write_req` map (tid -> struct ch_write_req) that the ptrace
 * executor drains. */
int sampler_write_req_fd(const struct sampler *s);

/* Add the descriptors of a plugin mapped with load bias `bias` to the
 * unwinder's runtime-address map.  Returns 0 or -errno. */
int sampler_add_runtime_frames(struct sampler *s, const struct frametable *ft, uint64_t bias);

/* The window's gate (include/camlheap.h enum ch_window_gate, the BPF side
 * in bpf/alloc.bpf.c window_open): CH_GATE_ARMED once every probe is in
 * and the executor runs, CH_GATE_FORCED to open the window without waiting
 * for the minor heap to be armed.  Nothing is sampled or counted before.
 * Returns 0 or -EINVAL (no sampler). */
int sampler_set_window_gate(struct sampler *s, enum ch_window_gate gate);

/* How the runtime's probes were attached: "uprobe_multi links" or
 * "perf-event uprobes" (uprobe_multi.h). */
const char *sampler_probe_links(const struct sampler *s);

/* Whether `pid`'s window waits for its minor heap to be armed (minor
 * samples from traps; set at sampler_attach). */
bool sampler_window_waits_minor(const struct sampler *s);

/* When `pid`'s minor heap was first armed, CLOCK_MONOTONIC ns
 * (bpf_ktime_get_ns), or 0: not yet, or no such process in the map. */
uint64_t sampler_minor_start_ns(const struct sampler *s, pid_t pid);

/* How `pid`, a process this sampler followed, ended: its wait(2) status
 * (WIFEXITED/WEXITSTATUS, WIFSIGNALED/WTERMSIG, WCOREDUMP apply), as its
 * last thread's task->exit_code at the sched_process_exit tracepoint
 * (kernel/exit.c do_exit), or -ENOENT: no thread of it has exited while
 * followed.  exn (exnlen bytes, may be 0) gets the name of the uncaught
 * exception that ended it (caml_fatal_uncaught_exception ran: "Not_found",
 * "Stdlib.Exit", "(name unreadable)"), or "".  Valid once the process is
 * gone (its pidfd readable); the map outlives sampler_detach. */
int sampler_exit_status(const struct sampler *s, pid_t pid, char *exn, size_t exnlen);

/* Is the oom:mark_victim tracepoint watched (attached by sampler_attach;
 * a kernel without it leaves it out)?  False before the attach. */
bool sampler_watches_oom(const struct sampler *s);

/* When the kernel's OOM killer chose `pid` (a followed tgid) as its victim
 * (mm/oom_kill.c mark_oom_victim, just after sending it SIGKILL; a memory
 * cgroup's limit, v1 or v2, or the whole system's memory), CLOCK_MONOTONIC
 * ns (bpf_ktime_get_ns), or 0: not chosen while followed (or the
 * tracepoint is not watched).  Before Linux 6.8 the tracepoint names the
 * victim thread, which is matched only if it is the process's main thread
 * (the OOM killer picks a thread-group leader unless it has exited). */
uint64_t sampler_oom_victim_ns(const struct sampler *s, pid_t pid);

/* Stop sampling `pid` at once: its entry in the kernel's process map is
 * removed, so every probe that still fires returns at its first
 * instruction (no sample, no write request).  The recording window ends
 * here, not when the uprobes are released, which takes the kernel ~0.1 s a
 * link.  Returns 0 or -errno. */
int sampler_stop_sampling(struct sampler *s, pid_t pid);

/* The ptrace executor is about to let go while the probes stay: the BPF
 * programs queue no more writes for it and signal no thread (SIGURG) from
 * now on (bpf/minor.bpf.h exec_paused); the minor heap is then sampled no
 * more, the sampled blocks are still followed.  For good: nothing resumes
 * it. */
void sampler_pause_executor(struct sampler *s);

/* A sampled block followed. */
struct sampler_block {
	uint64_t addr;     /* the block (value: its first field), runtime address */
	uint64_t sample_id;
	bool young;        /* in the minor heap (young_tracked), else the major heap (major_tracked) */
};

/* Before sampler_stop_sampling, the target stopped (so that the sets do
 * not move): the sampled blocks the kernel follows in pid's heaps as alive
 * (not found dead, no death waiting to be sent), into *out (malloc'd, *n of
 * them, the major heap's first; free it).  Returns 0, -ENOENT (pid not
 * sampled) or -ENOMEM. */
int sampler_followed_blocks(const struct sampler *s, pid_t pid, struct sampler_block **out, size_t *n);

/* After sampler_stop_sampling and sampler_consume: hand the callback the
 * fate events the kernel still held because the ring buffer was full when
 * they happened (promotions and deaths kept in the major tracking array),
 * in the order they would have been sent.  Returns how many. */
int sampler_drain_fates(struct sampler *s);

/* Give the uprobe links to a holder process and drop camlheap's own
 * handles: the holder (camlheap's grandchild, reparented away) keeps the
 * probes attached until camlheap closes its end of a pipe or dies, then
 * exits, and the kernel releases them as it does (~1 s for all).  So
 * neither camlheap's exit nor its death waits for that release, and a
 * camlheap killed with -9 is no longer the target's tracer while the links
 * are being released (its threads would sit in their ptrace stops
 * meanwhile: kernel/exit.c do_exit runs exit_files, which releases the
 * links, before exit_notify's exit_ptrace).  `holder_nice`: the nice value
 * the holder takes (camlheap's before its attach raised it, see
 * proc_thread_nice_raise; INT_MIN: the caller's).  Returns 0, or -errno
 * (the links then stay with camlheap). */
int sampler_hand_off_links(struct sampler *s, int holder_nice, char *err, size_t errlen);

/* Detach every uprobe (the target runs on untouched); events already in the
 * ring buffer can still be consumed.  After sampler_hand_off_links, this
 * lets the holder go: the probes are released shortly after, in the
 * background (call sampler_stop_sampling first).  With the kernel executor
 * on OCaml 5, the caml_reset_young_limit entry probe goes first and its
 * return probe waits (up to 0.5 s) until every young_trigger lent to a
 * running call is given back (bpf/minor5.bpf.h).  Returns the number of
 * loans still out then (threads stopped inside that call; harmless: at
 * worst one early major slice each), 0 normally. */
int sampler_detach(struct sampler *s);

/* The identifier of the custom operations at runtime address `ops` in the
 * target (runtime/caml/custom.h: struct custom_operations starts with it),
 * as the BPF side read it when it first sampled a block of that type; ""
 * if never seen or unreadable.  Writes at most `len` bytes into `name`. */
void sampler_custom_name(const struct sampler *s, uint64_t ops, char *name, size_t len);

/* OCaml 5: the runtime addresses of the domain states of process `pid`
 * that the BPF side has seen allocate (map `domains`), at most `max` into
 * out.  Returns how many. */
size_t sampler_domain_states(const struct sampler *s, pid_t pid, uint64_t *out, size_t max);

/* fd that becomes readable when the ring buffer wakes its reader (epoll fd). */
int sampler_ring_fd(const struct sampler *s);

/* Hand every pending event to the callback.  Returns events consumed or a
 * negative errno. */
int sampler_consume(struct sampler *s);

/* Sum the per-CPU counters into out[CH_CNT__COUNT]. */
void sampler_counters(const struct sampler *s, uint64_t out[CH_CNT__COUNT]);

void sampler_close(struct sampler *s);

/* Overhead budget: from now on keep each sample drawn at lambda with
 * probability 2^-shift (0..CH_MAX_RATE_SHIFT), in the kernel, before its
 * stack is walked; kept ones carry the shift (ch_sample_event.rate_shift)
 * and count 2^shift each (alloc.bpf.c thin_samples).  Returns 0, -EINVAL
 * (no sampler) or -ERANGE. */
int sampler_set_rate_shift(struct sampler *s, unsigned shift);

/* Fill pool[n] with draws from the geometric law of parameter `rate`
 * (support 1, 2, ...; mean 1/rate), as memprof.c's rand_geom, stratified:
 * draw i inverts a uniform taken in the i-th of n equal strata of (0,1), so
 * the pool's empirical law matches the geometric law to O(1/n) in every
 * quantile and a pool entry picked at random is a geometric draw.  `seed`
 * makes it reproducible.  Values are clamped to [1, 2^62]. */
void sampler_fill_geom_pool(uint64_t *pool, size_t n, double rate, uint64_t seed);

#endif
