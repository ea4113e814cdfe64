/* record_intake.c -- what `record` does while the target runs
 * (record_internal.h): each event into the profile and the recording
 * files, the resident set read every RESIDENT_PERIOD_S, the --budget
 * controller, a service worker's periodic files and commands, the live
 * view's callbacks, and the loop that waits for the end. */
#define _GNU_SOURCE
#include "cmd/record_internal.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "collect/malloc_probes.h"
#include "collect/ptexec.h"
#include "collect/sampler.h"
#include "output/outfile.h"
#include "output/pprof.h"
#include "output/recording.h"
#include "cmd/serve.h"
#include "target/proc.h"

/* Read the target's resident set and heap size; keep the reading if it
 * worked.  A reading without the heap (the runtime's counters unreadable:
 * a program on its way out has freed them) does not replace one with it.
 * Returns 0, -EAGAIN (the last full reading stands) or -errno. */
int record_read_resident(struct intake *in)
{
	uint64_t doms[256];
	size_t nd = in->rt->major == 5 && in->smp ? sampler_domain_states(in->smp, in->pid, doms, 256) : 0;
	struct resident r;
	int ret = resident_read(in->pid, in->rt, in->bias, doms, nd, &r);

	if (ret == 0 && !r.heap_words && in->res_valid && in->res.heap_words)
		return -EAGAIN;
	if (ret == 0 && in->malloc_libc && !in->libc_checked) {
		char mapped[4096];

		if (malloc_probes_mapped_libc(in->pid, mapped, sizeof(mapped)) == 0) {
			in->libc_checked = true;
			if (strcmp(mapped, in->malloc_libc)) {
				snprintf(in->libc_warning, sizeof(in->libc_warning),
					 "--malloc probed %s, but the program loaded %s: its malloc calls were not "
					 "seen; attach with -p PID once it runs (its mapped libc is probed then)",
					 in->malloc_libc, mapped);
				record_say("camlheap: %s\n", in->libc_warning);
			}
		}
	}
	if (ret == 0) {
		in->res = r;
		in->res_valid = true;
		/* what was live then, for a like-for-like split */
		memcpy(in->res_live, in->prof->live_samples_by_kind, sizeof(in->res_live));
	}
	return ret;
}

void record_on_event(void *ctx, const struct ch_sample_event *ev, size_t size)
{
	struct intake *in = ctx;

	if (ev->kind == CH_KIND_CUSTOM && size >= CH_EVENT_HEADER_BYTES && ev->custom_ops && in->smp &&
	    !profile_custom_name_known(in->prof, ev->custom_ops)) {
		char name[64];

		sampler_custom_name(in->smp, ev->custom_ops, name, sizeof(name));
		profile_set_custom_name(in->prof, ev->custom_ops, name);
	}

	/* the recording symbolizes each code when it first appears: a plugin
	 * announced earlier in this batch must be known by then */
	if (in->rec && in->rescan && !in->exec && in->smp && ev->kind < CH_KIND__COUNT)
		in->rescan = modules_scan(in->mods, in->pid, record_on_plugin, in->smp) == -EAGAIN;

	if (ev->kind == CH_NOTE_FRAMETABLE)
		in->rescan = true;
	else if (ev->kind == CH_NOTE_EXEC)
		in->exec = true;
	else if (ev->kind >= CH_FATE_PROMOTE) {
		if (profile_add_fate(in->prof, (const struct ch_fate_event *)ev, size) == 0) {
			recording_add(in->rec, in->prof, in->mods, ev, size);
			recording_add(in->trace, in->prof, in->mods, ev, size);
		}
	} else if (profile_add_event(in->prof, ev, size) == 0) {
		recording_add(in->rec, in->prof, in->mods, ev, size);
		recording_add(in->trace, in->prof, in->mods, ev, size);
	}
}

/* A new plugin: its descriptors go to the unwinder's runtime-address map. */
void record_on_plugin(void *ctx, const struct module *m)
{
	struct sampler *smp = ctx;

	if (sampler_add_runtime_frames(smp, m->ft, m->bias) < 0)
		record_say("camlheap: cannot load the frame tables of plugin %s\n", m->path);
	else
		record_say("camlheap: plugin %s: %zu frame descriptors loaded\n", m->path, m->ft->count);
}

/* The resident-memory part of the report's header, from the intake's
 * latest reading (`now_ok`: it was taken just now). */
void record_fill_resident(struct report_meta *meta, struct intake *intake, bool now_ok, const char *moment,
			  double at_s)
{
	static char when[96];

	if (!intake->res_valid)
		return;
	meta->rss_kib = intake->res.rss_kib;
	meta->hwm_kib = intake->res.hwm_kib;
	meta->heap_words = intake->res.heap_words;
	meta->rss_live_set = true;
	meta->rss_live_bigarray = intake->res_live[CH_KIND_BIGARRAY];
	meta->rss_live_malloc = intake->res_live[CH_KIND_MALLOC];
	meta->rss_live_custom = intake->res_live[CH_KIND_CUSTOM];
	if (intake->libc_warning[0])
		meta->warning = intake->libc_warning;
	if (now_ok)
		snprintf(when, sizeof(when), "read at %s", moment);
	else
		snprintf(when, sizeof(when), "last read %.1f s before %s", (at_s ? at_s : now_s()) - intake->res.at_s,
			 moment);
	meta->rss_when = when;
}

double record_self_cpu_s(double *max_rss_mib)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	if (max_rss_mib)
		*max_rss_mib = (double)ru.ru_maxrss / 1024.0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The lambdas in force so far, for the report ("1e-05 for 3.0 s, then ..."). */
void record_budget_seconds(const struct intake *in, double *secs)
{
	double now = now_s();

	for (unsigned k = 0; k <= CH_MAX_RATE_SHIFT; k++)
		secs[k] = in->shift_s[k] + (k == in->shift ? now - in->shift_since : 0);
}

const char *record_budget_describe(struct intake *in, const double *since)
{
	double secs[CH_MAX_RATE_SHIFT + 1];
	size_t n = 0;

	if (!(in->budget_sps > 0))
		return NULL;
	record_budget_seconds(in, secs);
	n += (size_t)snprintf(in->budget_text, sizeof(in->budget_text), "budget %g samples/s: ", in->budget_sps);
	for (unsigned k = 0; k <= in->max_shift && n < sizeof(in->budget_text); k++) {
		double s = secs[k] - (since ? since[k] : 0);

		if (s <= 0)
			continue;
		n += (size_t)snprintf(in->budget_text + n, sizeof(in->budget_text) - n, "%s%g (2^-%u) for %.2f s",
				      n > 30 && in->budget_text[n - 2] != ':' ? ", " : "",
				      ldexp(in->prof->rate, -(int)k), k, s);
	}
	return in->budget_text;
}

/* Overhead budget: the samples taken (kept or dropped) since the window
 * began, looked at every 20 ms.  Once they exceed a quarter second's budget,
 * or after a second, the window's rate decides: over the budget, the shift
 * rises at once by enough to come under it; under a quarter of it for 4
 * windows running, it falls by one (which doubles the rate, still under
 * half the budget). */
static void budget_tick(struct intake *in)
{
	uint64_t c[CH_CNT__COUNT], taken, n;
	double now = now_s(), dt = now - in->win_start, r;
	unsigned k = in->shift;

	if (!(in->budget_sps > 0) || !in->smp || dt < 0.01)
		return;
	sampler_counters(in->smp, c);
	taken = c[CH_CNT_SAMPLES] + c[CH_CNT_DROPPED_SAMPLES];
	n = taken - in->win_samples;
	if ((double)n < in->budget_sps * 0.25 && dt < 1.0)
		return;
	r = (double)n / dt;
	in->win_samples = taken;
	in->win_start = now;
	if (r > in->budget_sps) {
		k += (unsigned)ceil(log2(r / in->budget_sps));
		in->calm_windows = 0;
	} else if (k > 0 && r < in->budget_sps / 4) {
		if (++in->calm_windows >= 4) {
			k--;
			in->calm_windows = 0;
		}
	} else {
		in->calm_windows = 0;
	}
	if (k > CH_MAX_RATE_SHIFT)
		k = CH_MAX_RATE_SHIFT;
	if (k != in->shift && sampler_set_rate_shift(in->smp, k) == 0) {
		in->shift_s[in->shift] += now - in->shift_since;
		in->shift_since = now;
		in->shift = k;
		if (k > in->max_shift)
			in->max_shift = k;
	}
}

/* The report's header as of now, for a file written while recording. */
static void snapshot_meta(struct intake *in, struct report_meta *m, const char *reason)
{
	struct timespec now;

	*m = *in->meta;
	clock_gettime(CLOCK_REALTIME, &now);
	m->taken_unix_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	/* once detached, the recording's time is over: meta holds it */
	if (in->smp)
		m->duration_s = now_s() - in->t_attached;
	m->end_reason = reason;
	if (in->smp)
		sampler_counters(in->smp, m->counters);
	m->cpu_s = record_self_cpu_s(&m->max_rss_mib);
	m->budget = record_budget_describe(in, NULL);
	if (!in->meta->trigger)
		record_fill_resident(m, in, false, "this profile was written", 0);
	else /* record_census_on_fired read it, but at an OOM kill */
		record_fill_resident(m, in, in->res_at_trigger,
				     strcmp(in->watch.kind, "oom") ? "the trigger" : "the OOM kill was seen", in->trigger_s);
	if (in->px) {
		struct ptexec_stats ps;

		ptexec_stats(in->px, &ps);
		record_copy_exec_stats(m, &ps);
	}
	if (in->smp)
		record_fill_overhead(m, in);
}

/* Write a heap profile (pprof, default type inuse_space), an allocation
 * profile (alloc_space) or the census (text) of the profile so far to
 * `path`, through a temporary file.  Returns 0 or -errno. */
static int write_snapshot(struct intake *in, const char *what, const char *path, const char *reason)
{
	struct report_meta m;
	struct outfile out;
	bool census = !strcmp(what, "census");
	int ret;

	if (census && !in->meta->census_on)
		return -ENOTSUP;
	snapshot_meta(in, &m, reason ? reason : "snapshot while recording (camlheap serve)");
	m.value = !strcmp(what, "allocs") ? REPORT_VALUE_ALLOC : REPORT_VALUE_LIVE;
	if (in->meta->census_on)
		profile_census_compute(in->prof);
	ret = outfile_open(&out, path);
	if (ret < 0)
		return ret;
	ret = census ? report_write_census(out.f, in->prof, &m, &in->t->mods)
		     : report_render(out.f, REPORT_PPROF, false, in->prof, &m, &in->t->mods);
	if (ret < 0)
		outfile_abort(&out);
	else
		ret = outfile_commit(&out);
	return ret;
}

/* The periodic pair: OUTDIR/heap-STAMP.pb.gz and census-STAMP.txt. */
void record_write_periodic(struct intake *in, const char *tag, const char *reason)
{
	char stamp[64], path[4096];
	struct timespec ts;
	struct tm tm;
	int ret;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
	for (int i = 0; i < 2; i++) {
		/* the heap profile, then (with the census) the census */
		static const char *const what[] = { "heap", "census" }, *const ext[] = { ".pb.gz", ".txt" };

		if (i == 1 && !in->meta->census_on)
			break;
		snprintf(path, sizeof(path), "%s/%s-%s.%03ldZ%s%s", in->snapdir, what[i], stamp, ts.tv_nsec / 1000000,
			 tag, ext[i]);
		ret = write_snapshot(in, what[i], path, reason);
		if (ret < 0)
			fprintf(stderr, "camlheap: PID %d: cannot write %s: %s\n", in->pid, path, strerror(-ret));
		else if (in->o->serve)
			serve_send(in, "wrote %s", path);
		else
			record_say("camlheap: %s written to %s\n", what[i], path);
	}
}

/* m minus what `base` had counted already: the figures of the span since
 * base was taken (every counter but CH_CNT_LAYOUT_BAD, which says whether
 * minor sampling stopped, not how often). */
static void meta_since(struct report_meta *m, const struct report_meta *base)
{
#define SINCE(f) (m->f = m->f > base->f ? m->f - base->f : 0)
	for (int i = 0; i < CH_CNT__COUNT; i++)
		if (i != CH_CNT_LAYOUT_BAD)
			SINCE(counters[i]);
	SINCE(exec_stops);
	SINCE(exec_writes);
	SINCE(exec_stale);
	SINCE(exec_pending);
	SINCE(exec_errors);
	SINCE(exec_passed_signals);
	SINCE(exec_service_s);
	SINCE(exec_stopped_s);
	SINCE(exec_freezes);
	SINCE(exec_freeze_timeouts);
	SINCE(exec_rechecks);
	SINCE(exec_in_flight);
	SINCE(exec_reinterrupts);
	SINCE(probe_hits);
	SINCE(probe_bpf_s);
	SINCE(probe_trap_s);
	SINCE(fates_drained);
	SINCE(cpu_s);
#undef SINCE
}

static void record_trace_begin(struct intake *in)
{
	struct timespec real;

	in->trace_start = now_s();
	clock_gettime(CLOCK_REALTIME, &real);
	in->trace_start_unix_ns = (int64_t)real.tv_sec * 1000000000 + real.tv_nsec;
	snapshot_meta(in, &in->trace_base, NULL);
	record_budget_seconds(in, in->trace_shift_base);
}

void record_trace_finish(struct intake *in, const char *reason)
{
	struct report_meta m;
	int ret;

	if (!in->trace)
		return;
	/* the recording's own window: its times count from its start, its
	 * counters from what the worker had counted then */
	snapshot_meta(in, &m, reason);
	meta_since(&m, &in->trace_base);
	m.budget = record_budget_describe(in, in->trace_shift_base);
	m.duration_s = now_s() - in->trace_start;
	m.start_unix_ns = in->trace_start_unix_ns;
	m.window_wait_s = in->trace_start - in->t_attached;
	m.window_how = "for an on-demand recording (camlheap serve, /debug/memtrace)";
	m.window_minor_late_s = 0;
	ret = recording_finish(in->trace, &m, in->prof, &in->t->mods);
	recording_free(in->trace);
	in->trace = NULL;
	if (ret < 0)
		serve_send(in, "done %llu %d cannot write the recording: %s", (unsigned long long)in->trace_id, -ret,
			   strerror(-ret));
	else
		serve_send(in, "done %llu 0", (unsigned long long)in->trace_id);
}

/* One command from the service (serve.h). */
static void serve_command(struct intake *in)
{
	char buf[8192];
	struct serve_cmd c;
	ssize_t n = recv(in->o->serve_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
	int ret;

	if (n <= 0)
		return;
	buf[n] = 0;
	if (serve_parse_cmd(buf, (size_t)n, &c) < 0) {
		fprintf(stderr, "camlheap: PID %d: bad command from the service: %.80s\n", in->pid, buf);
		return;
	}
	if (!strcmp(c.verb, "budget")) {
		in->budget_sps = c.value;
		if (!(c.value > 0) && in->shift) {
			sampler_set_rate_shift(in->smp, 0);
			in->shift_s[in->shift] += now_s() - in->shift_since;
			in->shift_since = now_s();
			in->shift = 0;
		}
	} else if (!strcmp(c.verb, "interval")) {
		/* a reload's new interval: the next pair comes that long after the last */
		in->next_periodic += c.value - in->interval_s;
		in->interval_s = c.value;
	} else if (!strcmp(c.verb, "snap")) {
		ret = write_snapshot(in, c.what, c.path, NULL);
		if (ret < 0)
			serve_send(in, "done %llu %d %s", (unsigned long long)c.id, -ret,
				   ret == -ENOTSUP ? "no census: blocks are not followed in this process"
						   : strerror(-ret));
		else
			serve_send(in, "done %llu 0", (unsigned long long)c.id);
	} else if (!strcmp(c.verb, "trace")) {
		if (in->trace) {
			serve_send(in, "done %llu %d a recording is already being written", (unsigned long long)c.id, EBUSY);
			return;
		}
		ret = recording_new(c.path, in->pid, in->prof->rate, in->meta->census_on, &in->trace);
		if (ret < 0) {
			in->trace = NULL;
			serve_send(in, "done %llu %d cannot start the recording: %s", (unsigned long long)c.id, -ret,
				   strerror(-ret));
			return;
		}
		in->trace_id = c.id;
		record_trace_begin(in);
		in->trace_end = in->trace_start + c.value;
	}
}

/* Figures for the service's /metrics and /targets: every second, and once
 * more at the end. */
void record_serve_stats_from(struct intake *in, const struct report_meta *m)
{
	const uint64_t *c = m->counters;

	serve_send(in,
		   "stats samples=%llu weighted=%llu events=%llu dropped=%llu stops=%llu shift=%u bpf_ns=%llu "
		   "trap_ns=%llu exec_ns=%llu cpu_ns=%llu live=%llu rss_kib=%llu heap_words=%llu",
		   (unsigned long long)(c[CH_CNT_SAMPLES] + c[CH_CNT_DROPPED_SAMPLES]),
		   (unsigned long long)in->prof->samples, (unsigned long long)c[CH_CNT_EVENTS],
		   (unsigned long long)c[CH_CNT_DROPPED], (unsigned long long)m->exec_stops, in->shift,
		   (unsigned long long)(m->probe_bpf_s * 1e9), (unsigned long long)(m->probe_trap_s * 1e9),
		   (unsigned long long)(m->exec_stopped_s * 1e9),
		   (unsigned long long)(record_self_cpu_s(NULL) * 1e9), (unsigned long long)in->prof->live_samples,
		   (unsigned long long)(in->res_valid ? in->res.rss_kib : 0),
		   (unsigned long long)(in->res_valid ? in->res.heap_words : 0));
}

void record_copy_exec_stats(struct report_meta *m, const struct ptexec_stats *ps)
{
	m->exec_stops = ps->stops;
	m->exec_writes = ps->writes;
	m->exec_stale = ps->stale;
	m->exec_pending = ps->pending;
	m->exec_errors = ps->write_errors;
	m->exec_passed_signals = ps->passed_signals;
	m->exec_service_s = ps->service_s;
	m->exec_stopped_s = ps->stopped_s;
	m->exec_freezes = ps->freezes;
	m->exec_freeze_timeouts = ps->freeze_timeouts;
	m->exec_rechecks = ps->rechecks;
	m->exec_in_flight = ps->in_flight;
	m->exec_reinterrupts = ps->reinterrupts;
}

void record_fill_overhead(struct report_meta *m, struct intake *in)
{
	struct probe_cost pc;

	if (!in->trap_tried) {
		char err[512];

		in->trap_tried = true;
		if (trap_cost_calibrate(&in->trap, err, sizeof(err)) < 0 && getenv("CAMLHEAP_DEBUG"))
			fprintf(stderr, "camlheap: the trap cost is not calibrated: %s\n", err);
	}
	sampler_probe_cost(in->smp, &in->trap, &pc);
	m->overhead_counted = pc.counted;
	m->probe_hits = pc.hits;
	m->probe_bpf_s = (double)pc.bpf_ns * 1e-9;
	m->probe_trap_s = pc.trap_s;
	m->trap_emulated_us = in->trap.valid ? in->trap.emulated_ns * 1e-3 : 0;
	m->trap_stepped_us = in->trap.valid ? in->trap.stepped_ns * 1e-3 : 0;
	m->trap_return_us = in->trap.valid ? in->trap.return_ns * 1e-3 : 0;
}

static void serve_stats(struct intake *in)
{
	struct report_meta m = { 0 };
	struct ptexec_stats ps = { 0 };

	sampler_counters(in->smp, m.counters);
	if (in->px)
		ptexec_stats(in->px, &ps);
	record_copy_exec_stats(&m, &ps);
	record_fill_overhead(&m, in);
	record_serve_stats_from(in, &m);
}

/* The service worker's and the budget's part of one turn of the loop. */
static void worker_tick(struct intake *in)
{
	double now = now_s();

	budget_tick(in);
	if (!in->o->serve)
		return;
	if (in->trace && now >= in->trace_end)
		record_trace_finish(in, "on-demand recording: its time elapsed");
	if (now >= in->next_stats) {
		serve_stats(in);
		in->next_stats = now + 1.0;
	}
	if (in->interval_s > 0 && now >= in->next_periodic) {
		record_write_periodic(in, "", NULL);
		in->next_periodic = now + in->interval_s;
	}
}

/* camlheap top: the figures of a refresh (top.h). */
void record_top_status_cb(void *ctx, struct top_status *st)
{
	struct intake *in = ctx;

	if (in->smp)
		sampler_counters(in->smp, st->counters);
	else
		memcpy(st->counters, in->meta->counters, sizeof(st->counters));
	st->shift = in->shift;
	st->res_valid = in->res_valid;
	st->rss_kib = in->res.rss_kib;
	st->heap_words = in->res.heap_words;
	/* the memtrace kept for the view's m key, within its size limit */
	if (in->rec && in->o->topo->trace_limit_mib > 0 &&
	    (double)recording_bytes(in->rec) > in->o->topo->trace_limit_mib * 1048576.0) {
		recording_free(in->rec);
		in->rec = NULL;
		snprintf(in->memtrace_off, sizeof(in->memtrace_off),
			 "the recording kept for it passed --trace-limit %g MiB after %.0f s and was dropped; w writes "
			 "pprof, and `camlheap record -o FILE` makes long recordings",
			 in->o->topo->trace_limit_mib, now_s() - in->t_attached);
	}
	st->memtrace_off = in->rec ? NULL : in->memtrace_off;
}

/* camlheap top's w and m keys: the profile so far to `path`. */
int record_top_write_cb(void *ctx, bool memtrace, const char *path, char *msg, size_t len)
{
	struct intake *in = ctx;
	struct report_meta m;
	int ret;

	if (outfile_check(path, msg, len) < 0)
		return -EINVAL;
	if (!memtrace) {
		ret = write_snapshot(in, in->meta->census_on ? "heap" : "allocs", path, "written by camlheap top");
	} else if (!in->rec) {
		snprintf(msg, len, "%s", in->memtrace_off);
		return -ENOTSUP;
	} else {
		snapshot_meta(in, &m, "written by camlheap top");
		ret = recording_write(in->rec, path, &m, in->prof, &in->t->mods);
	}
	if (ret < 0)
		snprintf(msg, len, "%s", strerror(-ret));
	return ret;
}

/* Consume samples until a stop condition; describe it in reason. */
bool record_window_check(struct intake *in)
{
	struct report_meta *m = in->meta;
	double now = now_s(), start;
	uint64_t minor_ns;

	if (in->window_open)
		return true;
	if (!sampler_window_waits_minor(in->smp)) {
		start = in->t_gate;
		m->window_how = "at once (no minor heap to arm)";
	} else if ((minor_ns = sampler_minor_start_ns(in->smp, in->pid))) {
		start = (double)minor_ns * 1e-9;
		if (start < in->t_gate)
			start = in->t_gate;
		m->window_how = "at the minor heap's first trap or collection";
	} else if (now - in->t_gate >= WINDOW_WAIT_S) {
		sampler_set_window_gate(in->smp, CH_GATE_FORCED);
		start = now;
		in->window_forced = true;
		m->window_how = "without the minor heap (no trap or minor collection within 0.2 s)";
	} else {
		return false;
	}
	in->window_open = true;
	m->window_wait_s = start - in->t_gate;
	in->t_attached = start;
	{
		/* the profile's time zero and the report's start: the window's */
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		in->prof->zero_ns = (uint64_t)(start * 1e9);
		m->start_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - (int64_t)((now - start) * 1e9);
	}
	if (in->timerfd >= 0 && in->o->duration_s > 0) {
		double left = in->o->duration_s - (now - start);
		struct itimerspec its = { 0 };

		if (left < 1e-9)
			left = 1e-9;
		its.it_value.tv_sec = (time_t)left;
		its.it_value.tv_nsec = (long)((left - (double)its.it_value.tv_sec) * 1e9);
		if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
			its.it_value.tv_nsec = 1;
		timerfd_settime(in->timerfd, 0, &its, NULL);
	}
	in->shift_since = in->win_start = start;
	return true;
}

void record_window_finish(struct intake *in, double t_end)
{
	struct report_meta *m = in->meta;

	if (!in->window_open) {
		m->window_how = NULL;
		m->duration_s = 0;
		return;
	}
	m->duration_s = t_end - in->t_attached;
	if (in->window_forced) {
		uint64_t ns = sampler_minor_start_ns(in->smp, in->pid);
		double late = ns ? (double)ns * 1e-9 - in->t_attached : -1;

		m->window_minor_late_s = ns && late < 1e-6 ? 1e-6 : late;
	}
}

/* The end reason of a target that is gone: its exit status or fatal signal
 * as the kernel saw its last thread go (sampler_exit_status), in
 * record_describe_status's words, else "target exited"; and the uncaught
 * exception that ended it. */
static void describe_gone(const struct sampler *smp, pid_t pid, char *reason, size_t len)
{
	int status = sampler_exit_status(smp, pid, NULL, 0);

	if (status >= 0)
		record_describe_status(status, reason, len);
	else
		snprintf(reason, len, "target exited");
	record_describe_exn(smp, pid, reason, len);
}

void record_until_stop(const struct record_opts *o, struct target *t, struct sampler *smp,
			      struct intake *intake, int sigfd, int pidfd, int timerfd, char *reason, size_t len)
{
	double next_progress = now_s() + 10.0;

	/* attached to a running program: one reading at once (a launched one
	 * has not started yet: its first reading is one period in) */
	if (!t->launched)
		record_read_resident(intake);
	intake->next_res = now_s() + RESIDENT_PERIOD_S;
	for (;;) {
		struct pollfd fds[7] = {
			{ .fd = sigfd, .events = POLLIN },
			{ .fd = pidfd, .events = POLLIN },
			{ .fd = timerfd, .events = POLLIN },
			{ .fd = sampler_ring_fd(smp), .events = POLLIN },
			{ .fd = o->serve ? o->serve_fd : -1, .events = POLLIN },
			{ .fd = intake->top ? top_input_fd(intake->top) : -1, .events = POLLIN },
			{ .fd = o->on.set ? census_watch_fd(&intake->watch) : -1, .events = POLLPRI },
		};
		int timeout = intake->budget_sps > 0 ? 20 : o->on.set ? 50 : 100; /* census_on.c reads the RSS at 50 ms */

		if (intake->top) {
			double due = top_next_refresh(intake->top) - now_s();

			if (due * 1000 < timeout)
				timeout = due > 0 ? (int)(due * 1000) + 1 : 0;
		}
		if (!intake->window_open)
			timeout = 10; /* its start is read from the kernel: soon */
		poll(fds, 7, timeout);
		/* before the events: the window's start is their time zero */
		record_window_check(intake);
		sampler_consume(smp);
		/* before the target's end: an OOM kill is seen first as such */
		if (o->on.set && census_watch_check(&intake->watch, smp, fds[6].revents)) {
			if (!o->census) {
				record_census_on_fired(intake); /* and on: serve and record write one a trigger */
			} else {
				snprintf(reason, len, "census --on: the trigger fired");
				intake->meta->trigger = intake->watch.what;
				break;
			}
		}
		/* Without a pidfd (fd limit, seccomp) exits are seen by polling;
		 * after the triggers, as with a pidfd below */
		if (pidfd < 0 && target_gone(t)) {
			describe_gone(smp, t->pid, reason, len);
			break;
		}
		if (intake->top) {
			if ((fds[5].revents & POLLIN) && top_keys(intake->top)) {
				snprintf(reason, len, "detached at the user's request (q)");
				break;
			}
			if (fds[5].revents & (POLLHUP | POLLERR)) {
				snprintf(reason, len, "the terminal closed");
				break;
			}
			int r = top_refresh(intake->top, now_s());

			if (r < 0) {
				snprintf(reason, len, "cannot write to stdout: %s", strerror(-r));
				intake->top_quit = true;
				break;
			}
			if (r > 0) {
				snprintf(reason, len, "%ld refresh%s done (--iterations)", o->topo->iterations,
					 o->topo->iterations == 1 ? "" : "es");
				break;
			}
		}
		if (fds[4].revents & POLLIN)
			serve_command(intake);
		if (fds[4].revents & (POLLHUP | POLLERR)) {
			snprintf(reason, len, "the service closed its connection");
			break;
		}
		worker_tick(intake);
		if (now_s() >= intake->next_res && !intake->exec) {
			record_read_resident(intake);
			intake->next_res = now_s() + RESIDENT_PERIOD_S;
		}
		/* after an exec the mappings are the new program's: never scan them */
		if (intake->rescan && !intake->exec)
			intake->rescan = modules_scan(&t->mods, t->pid, record_on_plugin, smp) == -EAGAIN;
		if (fds[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sigfd, &si, sizeof(si)) != sizeof(si))
				continue;
			/* camlheap top: the terminal's size changed; ^Z would stop
			 * camlheap (and, with the ptrace executor, the target) */
			if (si.ssi_signo == SIGWINCH) {
				if (intake->top)
					top_resize(intake->top);
				continue;
			}
			if (si.ssi_signo == SIGTSTP) {
				if (intake->top)
					top_say(intake->top, "suspending camlheap top is refused: the target would wait "
							     "for it; q detaches");
				continue;
			}
			snprintf(reason, len, "stopped by SIG%s%s",
				 sigabbrev_np((int)si.ssi_signo) ? sigabbrev_np((int)si.ssi_signo) : "?",
				 si.ssi_signo == SIGINT ? " (Ctrl-C)" : "");
			break;
		}
		if (intake->exec) {
			/* exec replaced the program: the kernel side has forgotten
			 * it, so nothing more can be sampled */
			char now[4096] = "another program";

			proc_exe_path(t->pid, now, sizeof(now));
			snprintf(reason, len, "target called exec (now runs %s); the profile covers the time before",
				 now);
			break;
		}
		if (fds[1].revents & POLLIN) {
			describe_gone(smp, t->pid, reason, len);
			break;
		}
		if (fds[2].revents & POLLIN) {
			snprintf(reason, len, "duration elapsed");
			break;
		}
		if (o->wait_major > 0 && now_s() >= next_progress) {
			uint32_t seen = intake->prof->clean_phases;

			record_say(
				"camlheap: waiting for %d full major cycle%s: %u ended so far (the first one "
				"only ends the cycle under way at attach); Ctrl-C writes the census now\n",
				o->wait_major, o->wait_major == 1 ? "" : "s", seen ? seen - 1 : 0);
			next_progress = now_s() + 10.0;
		}
		/* the first clean phase ends the cycle under way at attach;
		 * each later one ends a full cycle seen from its start */
		if (o->wait_major > 0 && intake->prof->clean_phases >= (uint32_t)o->wait_major + 1) {
			snprintf(reason, len, "%d full major cycle%s ended", o->wait_major, o->wait_major == 1 ? "" : "s");
			break;
		}
	}
}
