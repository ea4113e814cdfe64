/* report.h -- writers for a recorded profile: the text report and
 * collapsed stacks (flamegraph.pl / speedscope input), plus the
 * write-to-temporary-then-rename helper every output file goes through.
 */
#ifndef CH_REPORT_H
#define CH_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "camlheap.h"
#include "profile/profile.h"
#include "target/modules.h"
#include "output/outfile.h"
#include "output/report_names.h"

enum report_format {
	REPORT_TEXT = 0,
	REPORT_COLLAPSED,
	REPORT_PPROF,       /* gzip-compressed profile.proto (pprof.h) */
	REPORT_JSON,        /* docs/json.md */
	REPORT_SVG,         /* interactive flame graph (flamegraph.pl, report.c) */
	REPORT_MEMTRACE,    /* the recording itself: a memtrace trace (recording.h) */
	REPORT_DOT,         /* census --retainers: the paths as a Graphviz graph (report_dot.c; svg: rendered by
			     * cmd/ondemand.h's libgvc) */
};

/* Which quantity a report ranks sites by (and collapsed / svg output sums). */
enum report_value {
	REPORT_VALUE_ALLOC = 0,  /* estimated bytes allocated */
	REPORT_VALUE_LIVE,       /* estimated bytes still alive at the end (census) */
	REPORT_VALUE_PEAK,       /* the most estimated bytes the site had alive at once (census) */
};

#define REPORT_PATH_END 12 /* blocks shown at each end of a path (heap/trace4.h TRACE4_PATH_END) */

/* One block on a path from a root to a sampled block (census --retainers). */
struct report_hop {
	uint32_t wosize;                   /* its size, words (header excluded) */
	int32_t field;                     /* the field of the block before it that holds it, -1: the root's value
					    * or not found */
	uint8_t tag;                       /* its header's tag */
	const struct profile_site *site;   /* a sampled block itself: its site, else NULL */
	int what;                          /* its description, an index into report_retention.strs, or -1 */
};

enum report_path_status {
	REPORT_PATH_REACHED = 0,           /* reachable: root and blocks filled in */
	REPORT_PATH_UNREACHABLE,           /* alive for the census, but no root reaches it: garbage not swept yet */
	REPORT_PATH_YOUNG,                 /* in the minor heap, which was not traced (a thread was in OCaml code) */
	REPORT_PATH_SKIPPED,               /* not followed: --max-pause passed first */
};

/* The path that keeps one live sampled block alive, found at the census's
 * end with the target stopped (heap/trace4.h struct trace4_path). */
struct report_path {
	const struct profile_site *site;   /* the sampled block's */
	uint64_t samples;                  /* the samples it stands for */
	uint8_t status;                    /* enum report_path_status */
	bool via_static;                   /* the root reached the first block through the program's static data */
	int root;                          /* the root's name ("global Leak field 3"), an index into strs */
	int owner;                         /* who alone retains it ("global Leak field 3", "shared by ..."), strs */
	uint64_t length;                   /* blocks on it, the root's value first, the sampled block last */
	uint8_t nhead, ntail;              /* head: the first blocks; tail: the last; length - nhead - ntail between */
	struct report_hop head[REPORT_PATH_END], tail[REPORT_PATH_END];
};

/* census --retainers: what keeps each live sampled block alive, found by
 * a trace from the roots at the end (cmd/census_paths.h). */
struct report_retention {
	char why_not[512];                 /* "" if traced, else why there are no paths */
	double pause_s;                    /* the target stopped, seconds */
	double gap_s;                      /* from the census's end to the stop, seconds (the target ran, sampled no
					    * more with the ptrace executor, its sampled blocks still followed) */
	unsigned stops;                    /* stops tried until one was outside the memory manager */
	double trace_s;                    /* of which the walk and the trace */
	uint64_t heap_words, reachable_words; /* the major heap then, and what the roots reach (words) */
	struct report_path *paths;
	size_t npaths;
	char **strs;                       /* names and descriptions the paths point to */
	size_t nstrs;
};

/* What the header of a report states besides the profile itself. */
struct report_meta {
	int pid;
	const char *exe;               /* resolved executable path */
	const char *ocaml_version;     /* "4.13.1" */
	const char *command;           /* launch mode: the command line, else NULL */
	const char *sampler_mode;      /* e.g. "major+custom+unmarshal (read-only uprobes)" */
	const char *executor;          /* who wrote young_limit: "ptrace", "kernel", "observe" */
	const char *minor_off_why;     /* NULL if the minor heap was sampled, else why not */
	const char *minor_source;      /* how it was sampled, NULL: young_limit traps (channel A, 4.x) */
	const char *unmarshal_off_why; /* NULL if unmarshalled blocks were sampled, else why not (OCaml 5.1) */
	/* ptrace executor (all 0 otherwise) */
	uint64_t exec_stops, exec_writes, exec_stale, exec_pending, exec_errors, exec_passed_signals;
	uint64_t exec_freezes;         /* OCaml 5: writes checked and done with every other thread stopped */
	uint64_t exec_freeze_timeouts; /* OCaml 5: writes given up, a thread did not stop in time */
	uint64_t exec_rechecks;        /* OCaml 5: writes made with the interrupt flags read around them */
	uint64_t exec_in_flight;       /* OCaml 5: writes not made, an interrupt's flag was up */
	uint64_t exec_reinterrupts;    /* OCaml 5: interrupts put back (UINTNAT_MAX) after a write */
	double exec_service_s;         /* time the stopped threads waited for the executor, seconds */
	double exec_stopped_s;         /* the stops as the target paid them, trap to resumption, seconds */
	/* What the target's threads paid for the probes (collect/probe_cost.h):
	 * overhead_counted: the kernel counted the programs' runs (BPF
	 * statistics on); trap_*_us: a hit's trap as calibrated on this kernel
	 * (0: not calibrated) */
	bool overhead_counted;
	uint64_t probe_hits;           /* BPF program runs at the target's probes */
	double probe_bpf_s;            /* their run time, seconds */
	double probe_trap_s;           /* the traps of those hits, seconds */
	double trap_emulated_us, trap_stepped_us, trap_return_us;
	const char *end_reason;        /* "target exited with status 0", "duration elapsed", ... */
	const char *trigger;           /* census --on, census-on, record --on: the trigger this census was written
					* at and the figures then ("OOM kill: ..."; cmd/census_on.h), or NULL */
	double duration_s;             /* recording time, seconds */
	double attach_s;               /* from start to probes attached, seconds */
	/* The one window every figure covers (bpf/alloc.bpf.c window_open):
	 * it opened window_wait_s after the attach, as window_how says ("at
	 * once", ...); window_minor_late_s > 0: the minor heap was sampled only
	 * from that many seconds into the window (opened by force); <0: never */
	double window_wait_s;
	const char *window_how;        /* NULL: the window never opened (nothing sampled) */
	double window_minor_late_s;
	unsigned max_frames;
	unsigned probes_emulated;      /* probes on kernel-emulated instructions */
	unsigned plugins;              /* Dynlink plugins whose frame tables were loaded */
	unsigned unreadable_files;     /* mapped files that could not be opened (fd limit) */
	unsigned probes_total;
	const char *probe_links;       /* "uprobe_multi links" or "perf-event uprobes" (the runtime's probes) */
	uint64_t counters[CH_CNT__COUNT]; /* BPF counters (enum ch_counter) */
	double cpu_s;                  /* camlheap's own CPU time (user + system), seconds */
	double max_rss_mib;            /* camlheap's own peak resident set, MiB */
	int top;                       /* entries shown in each table of the text report; <= 0: all */
	bool by_stack;                 /* the text report ranks whole callstacks (--by stack), not allocation points */
	bool census_on;                /* sampled blocks were followed to their death */
	const char *census_off_why;    /* if not, why */
	bool live;                     /* record --live: per-site live and peak figures */
	int64_t start_unix_ns;         /* recording start, ns since the Unix epoch (pprof) */
	int64_t taken_unix_ns;         /* a snapshot's moment (serve's files and endpoints), ns since the
					* epoch, or 0: pprof's time_nanos, as Go's heap profiles (runtime/pprof
					* proto.go: the moment the profile is built); 0: start_unix_ns */
	uint64_t fates_drained;        /* fate events read from the kernel's arrays at the end (ring was full) */
	int value;                     /* enum report_value: how the text report ranks sites */
	const char *selection;         /* `camlheap report`: the window / filters applied, NULL if none */
	const char *build_id;          /* the executable's GNU build id (hex) when no module is open */
	bool foreign;                  /* a memtrace trace written inside the program: no probe figures */
	bool json_no_stacks;           /* JSON without stacks (diff by allocation position needs none) */
	const char *warning;           /* `camlheap report`: a problem with the recording itself, or NULL */
	const char *malloc_libc;       /* --malloc: the libc probed (its path in the target), else NULL */
	const char *budget;            /* --budget: the lambdas in force and for how long ("1e-05 for 3.0 s, then
					* 6.25e-07 (samples kept with probability 2^-4) for 57.0 s"), or NULL */
	/* Resident memory of the target (/proc/PID/status, read at the end of
	 * the recording: the last reading while the process lived), 0 if unknown */
	uint64_t rss_kib;              /* VmRSS */
	uint64_t hwm_kib;              /* VmHWM: its peak */
	uint64_t heap_words;           /* the OCaml heap then (runtime counters: major heap + minor heaps), words */
	const char *rss_when;          /* "read at the end", "last read 0.3 s before the end" */
	bool rss_live_set;             /* the live samples below were taken with the reading (else: at the end) */
	uint64_t rss_live_bigarray, rss_live_malloc, rss_live_custom; /* live samples then, by kind */
	const struct report_retention *retention; /* census --retainers: the paths, else NULL */
};

/* Write the text report: the first line names the executor and says which
 * allocations are sampled; a header (target, OCaml version, lambda, duration, samples,
 * dropped events, sampler mode, stack-walk terminations); then the `top`
 * sites by estimated bytes, each with samples, a 95 % interval and its full
 * callstack.  Returns 0 or -EIO. */
int report_write_text(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

/* Write a census (`camlheap census`): a header as the text report's, then
 * the sites by estimated live bytes (live sampled blocks / lambda * 8, with
 * a 95 % Poisson interval), each with its live block count, the median age
 * of its live blocks in major collections, its leak-suspect score
 * (profile_census_compute, which the caller runs first) and callstack; then
 * the leak suspects by score.  Returns 0 or -EIO. */
int report_write_census(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

/* Write collapsed stacks: one line per distinct callstack (the heap's
 * kinds summed; custom blocks' declared bytes, bigarray data and malloc
 * each under a root frame "[outside_the_heap:_KIND]" of their own, never
 * mixed into heap bytes), frames root first separated by ';', each
 * "Module.function" (inlined frames expanded), a space, and the estimated allocated bytes as
 * an integer; `value` (enum report_value) live: the estimated bytes still
 * alive at the end instead, peak: each site's peak live bytes (stacks
 * with none are left out).  Returns 0 or -EIO. */
int report_write_collapsed(FILE *out, const struct profile *p, struct modules *mods, int value);

/* Write the recording as one JSON document, schema "camlheap-report"
 * version 1 (docs/json.md): run metadata, totals, census totals, stacks
 * (frames innermost first, inline chains expanded) and sites (kind, stack
 * index, Comballoc index, samples, estimated bytes with a 95 % Poisson
 * interval, estimated objects, live figures).  Estimates: bytes = samples
 * / lambda * 8.  Written with json-glib.  Returns 0 or -EIO. */
int report_write_json(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

/* Render `p` in `format` (text: the record report, ranked by m->value;
 * collapsed and svg: bytes by m->value; pprof; json), or the census report
 * with `census` (in JSON: the json above, its census and live figures
 * included): the one dispatch `record`, `census` and `report` share.
 * Returns 0 or -errno. */
int report_render(FILE *out, enum report_format format, bool census, const struct profile *p,
		  const struct report_meta *m, struct modules *mods);

#endif
