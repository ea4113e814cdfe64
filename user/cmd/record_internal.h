/* record_internal.h -- what record.c (the stages of a recording) and
 * record_intake.c (what runs while the target runs) share: not part of
 * record.h.
 */
#ifndef CH_RECORD_INTERNAL_H
#define CH_RECORD_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "camlheap.h"
#include "cmd/record.h"
#include "cmd/serve.h"
#include "cmd/top.h"
#include "collect/probe_cost.h"
#include "collect/resident.h"
#include "output/report.h"
#include "profile/profile.h"
#include "target/target.h"

struct sampler;
struct ptexec;
struct ocaml_runtime;
struct ptexec_stats;
struct recording;

/* The state of a recording while the target runs. */
struct intake {
	struct profile *prof;
	struct recording *rec;  /* the recording file being written, or NULL */
	struct modules *mods;
	struct sampler *smp;
	pid_t pid;
	bool rescan; /* a plugin registered frame tables: read the mappings again */
	bool exec;   /* the target called exec */
	/* the target's resident memory, read every RESIDENT_PERIOD_S */
	const struct ocaml_runtime *rt;
	uint64_t bias;
	struct resident res;
	uint64_t res_live[CH_KIND__COUNT]; /* the profile's live samples by kind at that reading */
	const char *malloc_libc;  /* --malloc in launch mode: the libc probed, checked once the program maps one */
	bool libc_checked;
	char libc_warning[8400];  /* set if the program loaded another libc */
	bool res_valid;
	bool res_at_trigger;    /* census-on: the reading was taken when the trigger fired (trigger_s) */
	double trigger_s;       /* census-on: now_s() of the last trigger */
	double next_res;
	/* set before the intake loop: what snapshots need */
	struct target *t;
	const struct record_opts *o;
	struct report_meta *meta;
	double t_attached;         /* the window's start once open (record_window_check), before: the attach's end */
	double t_gate;             /* when the window's gate was armed (every probe in, the executor running) */
	bool window_open;
	bool window_forced;        /* opened without waiting for the minor heap (WINDOW_WAIT_S) */
	int timerfd;               /* --duration's, armed when the window opens; -1 without */
	struct ptexec *px;
	/* --budget: samples kept per second at most */
	double budget_sps;
	unsigned shift;            /* in force: samples kept with probability 2^-shift */
	unsigned max_shift;
	double shift_s[CH_MAX_RATE_SHIFT + 1]; /* seconds spent at each shift */
	double shift_since;
	double win_start;
	uint64_t win_samples;      /* kept + dropped samples at win_start */
	int calm_windows;
	char budget_text[1024];
	/* serve worker */
	double interval_s;         /* between periodic pairs: --interval, then the service's `interval` command */
	double next_periodic, next_stats;
	struct recording *trace;   /* an on-demand recording (`trace` command), or NULL */
	uint64_t trace_id;
	double trace_start, trace_end;
	/* the worker's figures as that recording began: its header counts
	 * from there (record_trace_finish) */
	struct report_meta trace_base;
	double trace_shift_base[CH_MAX_RATE_SHIFT + 1];
	int64_t trace_start_unix_ns;
	char trace_path[4096];
	/* census --on: the triggers watched (census_on.h) */
	struct census_watch watch;
	char snapdir[4096];        /* record_write_periodic's directory: serve's --outdir, record --on's -o FILE's */
	/* camlheap top */
	struct top *top;
	char memtrace_off[256];    /* why the view's memtrace key cannot write (in->rec is NULL) */
	bool top_quit;
	int top_refreshes;
	/* what the target pays for the probes: a trap's cost, calibrated once
	 * (record_fill_overhead) */
	struct trap_cost trap;
	bool trap_tried;
};

/* A wait status as an exit status: the command's, or 128 + its signal. */
int record_status_to_exit(int status);

/* A wait status in words ("target exited with status 3"), into buf. */
void record_describe_status(int status, char *buf, size_t len);

/* Append to the end reason in buf (len bytes in all) the uncaught exception
 * that ended `pid` if one did (sampler_exit_status): " after the uncaught
 * exception Not_found". */
void record_describe_exn(const struct sampler *smp, pid_t pid, char *buf, size_t len);

/* How long the window waits for the minor heap to be armed (its first
 * trap or collection after attach) before it opens without it, seconds:
 * a program that allocates no minor heap meanwhile loses this much of its
 * other kinds; one that does loses at most the rest of one minor heap of
 * minor words, which the report then states. */
#define WINDOW_WAIT_S 0.2

/* The window (bpf/alloc.bpf.c window_open), until it is open: is it now?
 * If so: its start (in->t_attached), the --duration timer armed from it,
 * the profile's time zero and the report's start time set; once
 * WINDOW_WAIT_S has passed without a minor-heap arming, it is opened by
 * force.  Returns whether it is open. */
bool record_window_check(struct intake *in);

/* At the end: the report's window figures (meta's window_*, duration_s). */
void record_window_finish(struct intake *in, double t_end);

/* How often the target's resident set is read, seconds. */
#define RESIDENT_PERIOD_S 0.1

/* A line to the service (serve.h's protocol), from a service worker only. */
#define serve_send(in, ...) ((in)->o->serve ? (void)serve_sendf((in)->o->serve_fd, __VA_ARGS__) : (void)0)

/* -q, or launch mode without --verbose (record_opts.quiet): camlheap's
 * messages other than errors are not written.  Set by record_run. */
extern bool record_quiet;

/* A message that is not an error, on stderr unless record_quiet. */
#define record_say(...) (record_quiet ? (void)0 : (void)fprintf(stderr, __VA_ARGS__))

/* CLOCK_MONOTONIC now, seconds. */
static inline double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Read the target's resident set and heap size (resident.h); keep the
 * reading, and the profile's live samples by kind then, if it worked.
 * Returns 0 or -errno. */
int record_read_resident(struct intake *in);

/* The sampler's callback (sampler.h sampler_event_fn; ctx: the intake):
 * one event into the profile and the recording files. */
void record_on_event(void *ctx, const struct ch_sample_event *ev, size_t size);

/* modules_scan's callback (ctx: the sampler): a new plugin's frame
 * descriptors into the unwinder's runtime-address map. */
void record_on_plugin(void *ctx, const struct module *m);

/* The report header's resident-memory figures from the latest reading:
 * "read at MOMENT" if `now_ok` (it was taken then), else "last read N s
 * before MOMENT" (`moment`: "the end", "the trigger", ...; `at_s` its
 * now_s() time, 0: now). */
void record_fill_resident(struct report_meta *meta, struct intake *intake, bool now_ok, const char *moment,
			  double at_s);

/* camlheap's own CPU time (user + system), seconds; its peak RSS in MiB
 * into *max_rss_mib if not NULL. */
double record_self_cpu_s(double *max_rss_mib);

/* --budget: the lambdas in force so far, for the report ("1e-05 for 3.0 s,
 * then ..."), in in->budget_text; NULL without a budget.  `since`
 * (CH_MAX_RATE_SHIFT + 1 doubles, or NULL): seconds at each shift already
 * spent before the span described (record_budget_seconds at its start). */
const char *record_budget_describe(struct intake *in, const double *since);

/* The seconds spent at each rate shift so far, the current one included,
 * into secs[CH_MAX_RATE_SHIFT + 1]. */
void record_budget_seconds(const struct intake *in, double *secs);

/* A pair of files (heap profile and census) into in->snapdir (a service
 * worker's directory, record --on's output's), tagged `tag` ("-final" at
 * the end, "-oom" at census-on's oom), with `reason`. */
void record_write_periodic(struct intake *in, const char *tag, const char *reason);

/* End the on-demand recording (`trace` command), if any, and answer the
 * service. */
void record_trace_finish(struct intake *in, const char *reason);

/* A service worker's figures to the service, from `m`: its counters, the
 * ptrace executor's stops and what the target paid (record_fill_overhead). */
void record_serve_stats_from(struct intake *in, const struct report_meta *m);

/* The ptrace executor's figures `ps` into m's exec_* fields. */
void record_copy_exec_stats(struct report_meta *m, const struct ptexec_stats *ps);

/* What the target has paid for the probes so far into m (probe_hits,
 * probe_bpf_s, probe_trap_s, trap_*_us, overhead_counted), from in->smp's
 * programs; the trap's cost is calibrated on the first call
 * (trap_cost_calibrate, ~20-200 ms). */
void record_fill_overhead(struct report_meta *m, struct intake *in);

/* camlheap top's callbacks (top.h struct top_source; ctx: the intake). */
void record_top_status_cb(void *ctx, struct top_status *st);
int record_top_write_cb(void *ctx, bool memtrace, const char *path, char *msg, size_t len);

/* The intake loop: events, timers, signals and the target's end, until
 * one ends the recording; why into reason (len bytes). */
void record_until_stop(const struct record_opts *o, struct target *t, struct sampler *smp, struct intake *in,
		       int sigfd, int pidfd, int timerfd, char *reason, size_t len);

/* census --on's triggers in a recording (census_on.h), once attached:
 * watching starts (what is watched said on stderr).  Returns 0, or -errno
 * with msg (len bytes) saying why it cannot (the recording then fails). */
int record_watch_start(struct intake *in, const struct record_opts *o, struct sampler *smp, char *msg, size_t len);

/* serve's worker or record --on: a trigger fired; the census and heap
 * profile into in->snapdir with the trigger in their names
 * (census-STAMP-oom.txt, heap-STAMP-oom.pb.gz: record_write_periodic), the
 * service told ("trigger KIND WHAT"), the watch re-armed: the recording
 * goes on. */
void record_census_on_fired(struct intake *in);

/* The ring buffer's size, bytes: 16 MiB (a service worker's 4 MiB: its
 * events are thinned to its budget), or CAMLHEAP_RINGBUF_BYTES's (a test
 * knob: a small ring makes the overflow paths run; a power of two from
 * 4096 to 1 GiB). */
uint32_t record_ringbuf_bytes(bool serve);

/* The directory of record_write_periodic's files into buf (len bytes): a
 * service worker's --outdir, else that of -o FILE, else ".". */
void record_snapdir(const struct record_opts *o, char *buf, size_t len);

/* After the recording: wait for the launched command to end, passing on
 * Ctrl-C and SIGTERM.  Returns true once reaped (its status in *status);
 * *exit_code is set if camlheap itself must fail. */
bool record_wait_for_command(pid_t pid, int sigfd, int pidfd, int *status, int *exit_code);

/* Render the report to o->output through a temporary file (outfile.h).
 * Returns 0 or -errno. */
int record_write_report(const struct record_opts *o, const struct profile *prof, const struct report_meta *meta,
			struct target *t);

/* record_executor.c.  The executor's name as reports give it ("ptrace"). */
const char *record_executor_name(enum ch_executor ex);

/* --executor `want` -> the executor that will run, into *ex, before the
 * target is known (auto: register where the kernel passes regexec.h's
 * check, else kernel where bpf_probe_write_user is allowed, else ptrace).
 * Returns 0, or -EPERM with a message in msg (`len` bytes) when the one
 * asked for cannot run here. */
int record_choose_executor(enum record_executor want, enum ch_executor *ex, char *msg, size_t len);

/* The register executor was chosen but target `t`'s runtime has none of
 * its sites (rt.regexec_ok false): asked for by name, an error (-ENOTSUP,
 * msg); under auto the kernel executor where allowed, else ptrace attached
 * now (*px; -p mode), else observe with meta->minor_off_why saying why
 * (launch mode: the command is held by this thread).  Says which ran.
 * Returns 0 or a negative errno with msg set. */
int record_register_fallback(const struct record_opts *o, struct target *t, enum ch_executor *ex, struct ptexec **px,
			     struct report_meta *meta, char *msg, size_t len);

/* CAMLHEAP_DEBUG: the register executor's sites found in `rt`, on stderr
 * (tests/test_versions.py compares them with objdump's reading). */
void record_say_register_sites(const struct ocaml_runtime *rt);

#endif
