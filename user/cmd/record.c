/* record.c -- see record.h.  Reads in the order things happen: privileges,
 * target, runtime plan, sampler, attach, intake loop, report, wait. */
#define _GNU_SOURCE
#include "cmd/record_internal.h"
#include "output/recording.h"
#include "output/pprof.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "target/elf_image.h"
#include "target/frametable.h"
#include "target/ocaml_runtime.h"
#include "target/proc.h"
#include "collect/ptexec.h"
#include "profile/profile.h"
#include "collect/sampler.h"
#include "collect/malloc_probes.h"
#include "collect/resident.h"
#include "target/symbolize.h"
#include "output/outfile.h"
#include "cmd/serve.h"
#include "cmd/census_paths.h"

#define STACKS_SENT_SERVE 16384u       /* a worker's sent-stack ids (sampler_config) */


/* BPF programs and uprobes need CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN);
 * reading another user's /proc/PID/exe and maps needs CAP_SYS_PTRACE. */
static int check_privileges(char *msg, size_t len)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[2];
	uint64_t eff;
	bool admin, bpf, perfmon;

	memset(data, 0, sizeof(data));
	if (syscall(SYS_capget, &hdr, data) < 0)
		return 0; /* cannot tell: let the kernel decide */
	eff = (uint64_t)data[0].effective | ((uint64_t)data[1].effective << 32);
	admin = eff & (1ULL << CAP_SYS_ADMIN);
	bpf = eff & (1ULL << CAP_BPF);
	perfmon = eff & (1ULL << CAP_PERFMON);
	/* perf uprobe events need CAP_SYS_ADMIN even next to CAP_PERFMON
	 * (measured: EACCES at attach with CAP_BPF+CAP_PERFMON+CAP_SYS_PTRACE) */
	if (admin)
		return 0;
	snprintf(msg, len,
		 "missing privileges: camlheap loads BPF programs and attaches uprobes, which needs "
		 "CAP_SYS_ADMIN (uprobes; it also covers CAP_BPF and CAP_PERFMON)%s%s; run it as root "
		 "(sudo camlheap ...)",
		 bpf ? "" : " [CAP_BPF missing]", perfmon ? "" : " [CAP_PERFMON missing]");
	return -EPERM;
}

/* One recording, from the checks to the wait: what its stages share. */
struct run {
	const struct record_opts *o;
	struct target t;
	struct sampler_config cfg;
	struct report_meta meta;
	struct sampler *smp;
	struct ptexec *px;
	bool px_untraced;       /* px only holds the launched command until the attach */
	enum ch_executor ex;
	struct profile *prof;
	struct intake intake;
	char msg[8192], reason[8192];
	char *command;          /* launch mode: the command line */
	double t0, t_attached;  /* CLOCK_MONOTONIC, seconds */
	double t_phase;         /* the last phase's end (phase()) */
	int nice0;              /* the nice value to restore after the attach (INT_MIN: none) */
	sigset_t mask, old_mask;
	int sigfd, pidfd, timerfd, status, exit_code;
	bool exe_unsupported;   /* not native OCaml, or an unsupported runtime */
	bool reaped;
	struct report_retention retention; /* census --retainers */
};

/* CAMLHEAP_DEBUG: the time since the last phase, said. */
static void phase(struct run *r, const char *name)
{
	double t = now_s();

	if (getenv("CAMLHEAP_DEBUG"))
		fprintf(stderr, "camlheap: %-8s %.3f s\n", name, t - r->t_phase);
	r->t_phase = t;
}

/* Before anything is started: privileges, a service worker's name and
 * parent, the output file, the executor, the signals camlheap takes.
 * Returns 0, or the exit status after saying why. */
static int run_check(struct run *r)
{
	const struct record_opts *o = r->o;

	if (check_privileges(r->msg, sizeof(r->msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", r->msg);
		return 2;
	}
	/* a service worker stops (and writes its last files) when the
	 * service dies, whatever killed it */
	/* named camlheap, not "exe" (it runs as /proc/self/exe) */
	if (o->serve)
		prctl(PR_SET_NAME, "camlheap");
	if (o->serve) {
		/* the service made the socket pair (SO_PEERCRED: its PID, socket(7));
		 * a parent other than it (PID 1, or a subreaper as systemd --user
		 * is) means it died before PR_SET_PDEATHSIG was set */
		struct ucred cr = { 0 };
		socklen_t crlen = sizeof(cr);

		if (getsockopt(o->serve_fd, SOL_SOCKET, SO_PEERCRED, &cr, &crlen) < 0 ||
		    prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != cr.pid) {
			rmdir(o->outdir); /* the service made it; only if empty */
			fprintf(stderr, "camlheap: the service is gone\n");
			return 2;
		}
	}
	/* Check the output first: a report that cannot be written must not
	 * cost a whole recording (or a run of the command). */
	if (outfile_check(o->output, r->msg, sizeof(r->msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", r->msg);
		return 2;
	}
	if (record_choose_executor(o->executor, &r->ex, r->msg, sizeof(r->msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", r->msg);
		return 2;
	}
	sigemptyset(&r->mask);
	sigaddset(&r->mask, SIGINT);
	sigaddset(&r->mask, SIGTERM);
	sigaddset(&r->mask, SIGHUP);
	if (o->topo) {
		sigaddset(&r->mask, SIGWINCH);
		sigaddset(&r->mask, SIGTSTP);
	}
	sigprocmask(SIG_BLOCK, &r->mask, &r->old_mask);
	r->sigfd = signalfd(-1, &r->mask, SFD_CLOEXEC);
	return 0;
}

/* Launch mode: start the command stopped at exec.  Returns 0, or the exit
 * status after saying why (127: not found, 126: not executable). */
static int run_launch(struct run *r)
{
	int ret;

	/* with the ptrace executor, its thread must be the tracer from the
	 * start */
	if (r->ex == CH_EXEC_PTRACE)
		ret = ptexec_launch(r->o->argv, &r->old_mask, &r->t.pid, &r->px, r->msg, sizeof(r->msg));
	else
		ret = proc_launch(r->o->argv, &r->old_mask, &r->t.pid, r->msg, sizeof(r->msg));
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s\n", r->msg);
		return ret == -ENOENT ? 127 : ret == -EACCES ? 126 : 2;
	}
	r->t.launched = true;
	r->command = proc_command_line(r->o->argv);
	return 0;
}

/* The target and what will be done to it: the runtime plan, the executor
 * (the program's own Gc.Memprof decides it), the census, the malloc
 * probes.  Returns 0, or < 0 with r->msg set. */
static int run_plan(struct run *r)
{
	const struct record_opts *o = r->o;
	static struct malloc_probes mprobes;
	struct target *t = &r->t;
	double memprof_rate;
	int ret;

	phase(r, "check");
	ret = target_inspect(t, r->msg, sizeof(r->msg));
	phase(r, "inspect");
	/* not a native OCaml program, or an unsupported runtime: a property
	 * of the executable, which the service remembers (exit status 4) */
	r->exe_unsupported = ret == -ENOEXEC || ret == -ENOTSUP;
	if (ret < 0)
		return ret;
	if (getenv("CAMLHEAP_DEBUG"))
		record_say_register_sites(&t->rt);
	memprof_rate = t->rt.minor_ok ? target_memprof_rate(t) : -1;
	if (memprof_rate > 0 && (o->executor == RECORD_EXEC_AUTO || o->executor == RECORD_EXEC_OBSERVE)) {
		/* the program samples itself: never arm, take its samples */
		r->ex = CH_EXEC_OBSERVE;
		r->cfg.minor_from_memprof = true;
		r->cfg.rate = memprof_rate;
		r->meta.minor_source = "read-only, from the program's own Gc.Memprof, at its rate";
		record_say(
			"camlheap: PID %d runs Gc.Memprof at rate %g: camlheap takes its minor samples read-only and "
			"samples everything at that rate%s%s\n",
			t->pid, memprof_rate, r->cfg.rate != o->rate ? " (--rate is not used)" : "",
			t->rt.major == 5 ? "" : "; --executor ptrace samples at your own rate alongside it");
	} else if (!t->rt.minor_ok) {
		r->meta.minor_off_why = t->rt.minor_why;
		/* nothing to write: the command goes untraced, but only once
		 * the probes are in (ptexec_free detaches and lets it run) */
		r->px_untraced = r->px != NULL;
		r->ex = CH_EXEC_OBSERVE;
	} else if (r->ex == CH_EXEC_REGISTER && !t->rt.regexec_ok) {
		ret = record_register_fallback(o, t, &r->ex, &r->px, &r->meta, r->msg, sizeof(r->msg));
		if (ret < 0)
			return ret;
	} else if (r->ex == CH_EXEC_OBSERVE) {
		r->meta.minor_off_why = "--executor observe: camlheap never writes to the target";
	} else if (r->ex == CH_EXEC_PTRACE && !r->px) {
		/* every thread seized before any probe can queue a write */
		ret = ptexec_attach(t->pid, &r->px, r->msg, sizeof(r->msg));
		if (ret < 0)
			return ret;
	}
	if (t->rt.major == 5 && t->rt.minor_ok && r->ex == CH_EXEC_PTRACE)
		r->meta.minor_source = t->rt.all_domains_sym && t->rt.slice_epoch_sym && t->rt.pending_signals_sym
			? "young_limit traps, the domain's interrupt flags read around each write" /* ptexec5.c */
			: "young_limit traps, every other thread stopped around each write (no .symtab)";
	if (t->rt.minor_ok && r->ex == CH_EXEC_REGISTER)
		r->meta.minor_source = t->rt.major == 5
			? "young_limit traps, published by caml_reset_young_limit from a young_trigger load the probe performs"
			: "young_limit traps, published by caml_update_young_limit from a young_trigger load the probe "
			  "performs";
	if (t->rt.major == 5 && t->rt.minor_ok && r->ex == CH_EXEC_KERNEL)
		r->meta.minor_source = "young_limit traps, published by caml_reset_young_limit from a lent young_trigger";
	if (o->keep_cpus_awake && r->ex != CH_EXEC_PTRACE)
		record_say("camlheap: --keep-cpus-awake is for the ptrace executor; the %s executor runs "
				"without it\n",
			record_executor_name(r->ex));
	if (r->ex == CH_EXEC_OBSERVE && !r->cfg.minor_from_memprof && t->launched && t->rt.minor_ok)
		record_say("camlheap: --executor observe in launch mode: the command has not started a "
				"Gc.Memprof of its own yet (it is looked for when camlheap attaches); to take its "
				"samples, attach with -p PID once it runs\n");
	r->cfg.executor = r->ex;
	r->cfg.tracer_tgid = getpid();
	r->cfg.runtime = &t->rt;
	/* plugins only where Dynlink can load them (natdynlink is linked; a
	 * stripped program may hide it) */
	r->cfg.runtime_frames_cap =
		elf_image_symbol(t->img, "caml_natdynlink_run") || !elf_image_has_symtab(t->img) ? 0 : 4096;
	r->meta.census_on = r->cfg.census && t->rt.census_ok;
	r->meta.census_off_why = o->no_census ? "--no-census" : t->rt.census_ok ? NULL : t->rt.census_why;
	/* a serve worker records on (its triggers then write the heap profile alone) */
	if ((o->census || (o->on.set && !o->serve)) && !r->meta.census_on) {
		snprintf(r->msg, sizeof(r->msg), "cannot take a census of PID %d%s: %s", t->pid,
			 o->on.set ? " (--on)" : "", r->meta.census_off_why);
		return -ENOTSUP;
	}
	if (o->retainers && (ret = census_paths_check(t, r->msg, sizeof(r->msg))) < 0)
		return ret;
	r->meta.executor = record_executor_name(r->ex);
	if (o->malloc) {
		ret = malloc_probes_plan(t->pid, t->img, &t->rt, &mprobes, r->msg, sizeof(r->msg));
		if (ret < 0)
			return ret;
		r->cfg.malloc = &mprobes;
		r->meta.malloc_libc = mprobes.shown;
	}
	return 0;
}

/* The profile, and the recording files: -o's, or the live view's (kept
 * for its m key, in an unlinked file).  Returns 0, or < 0 with r->msg. */
static int run_open_profile(struct run *r)
{
	const struct record_opts *o = r->o;
	struct intake *in = &r->intake;
	int ret;

	r->prof = profile_new(r->cfg.rate);
	if (r->prof)
		r->prof->by_domain = o->by_domain;
	in->prof = r->prof;
	in->mods = &r->t.mods;
	if (!r->prof) {
		snprintf(r->msg, sizeof(r->msg), "out of memory");
		return -ENOMEM;
	}
	if (o->format == REPORT_MEMTRACE && !o->census) {
		ret = recording_new(o->output, r->t.pid, r->cfg.rate, r->meta.census_on, &in->rec);
		if (ret < 0) {
			snprintf(r->msg, sizeof(r->msg), "cannot start the recording file %s: %s",
				 o->output ? o->output : "(stdout)", strerror(-ret));
			return ret;
		}
	}
	if (o->topo && o->topo->trace_limit_mib > 0) {
		/* kept for the view's m key: its events in an unlinked file */
		const char *dir = getenv("TMPDIR");
		char path[4096];

		snprintf(path, sizeof(path), "%s/camlheap-top.ctf", dir && *dir ? dir : "/tmp");
		ret = recording_new(path, r->t.pid, r->cfg.rate, r->meta.census_on, &in->rec);
		if (ret < 0) {
			in->rec = NULL;
			snprintf(in->memtrace_off, sizeof(in->memtrace_off), "cannot keep a recording in %s: %s", path,
				 strerror(-ret));
		}
	} else if (o->topo) {
		snprintf(in->memtrace_off, sizeof(in->memtrace_off), "--trace-limit 0: no recording kept");
	}
	return 0;
}

/* Load the BPF programs, attach them, check that the target still runs
 * what was parsed, hand the probes to the holder, load the plugins mapped
 * already, and let the target run (the executor's thread, or a launched
 * command's release).  Returns 0, or < 0 with r->msg. */
static int run_attach(struct run *r)
{
	struct target *t = &r->t;
	struct intake *in = &r->intake;
	int ret;

	phase(r, "plan");
	probe_cost_stats_on();
	ret = sampler_open(&r->cfg, t->ft, record_on_event, in, &r->smp, r->msg, sizeof(r->msg));
	if (ret < 0)
		return ret;
	phase(r, "load");
	ret = sampler_attach(r->smp, t->pid, t->bias, &t->rt, t->proc_exe, t->exe, r->msg, sizeof(r->msg));
	if (ret == 0) {
		ret = target_check_unchanged(t);
		if (ret < 0)
			snprintf(r->msg, sizeof(r->msg), "cannot check PID %d after attaching: %s", t->pid,
				 strerror(-ret));
	}
	if (ret < 0) {
		if (!t->launched && target_gone(t))
			snprintf(r->msg, sizeof(r->msg), "PID %d exited while camlheap was attaching: nothing recorded",
				 t->pid);
		else if (ret == -ESTALE || target_check_unchanged(t) == -ESTALE)
			target_say_exec_while_attaching(r->msg, sizeof(r->msg), t->pid);
		return ret;
	}
	phase(r, "probes");
	/* The holder keeps the probes; camlheap's death or exit never waits
	 * for their release (without it, the probes just stay with camlheap). */
	{
		char why[256];

		if (sampler_hand_off_links(r->smp, r->nice0, why, sizeof(why)) < 0 && getenv("CAMLHEAP_DEBUG"))
			fprintf(stderr, "camlheap: probes stay with camlheap: %s\n", why);
	}
	/* Plugins loaded before the caml_register_frametable probe existed
	 * (attach mode): load them now; later ones arrive as notes. */
	phase(r, "holder");
	in->rescan = modules_scan(&t->mods, t->pid, record_on_plugin, r->smp) == -EAGAIN;
	phase(r, "plugins");
	in->smp = r->smp;
	in->pid = t->pid;
	in->rt = &t->rt;
	in->bias = t->bias;
	in->malloc_libc = r->cfg.malloc && t->launched ? r->cfg.malloc->shown : NULL;
	if (in->rec && t->mods.n) {
		/* the recording symbolizes from the first event on: open the
		 * executable's debug information now (after the attach, which
		 * must stay short: the target may exec or exit meanwhile) */
		struct sym_frame fr[4];

		modules_lookup(&t->mods, t->mods.ranges ? t->mods.ranges[0].start : 0, 0, fr, 4);
	}
	proc_thread_nice_restore(r->nice0); /* before the executor's helper threads and the window */
	r->nice0 = INT_MIN;
	/* every probe in: the window may open (before the release, so that
	 * a launched command is sampled from its first allocation; a write
	 * queued before the executor runs waits for it in the thread's stop) */
	sampler_set_window_gate(r->smp, CH_GATE_ARMED);
	if (r->px && r->px_untraced) {
		ptexec_free(r->px);
		r->px = NULL;
	} else if (r->px)
		ptexec_run(r->px, sampler_write_req_fd(r->smp), r->o->keep_cpus_awake);
	else if (t->launched && proc_launch_release(t->pid) < 0) {
		snprintf(r->msg, sizeof(r->msg), "cannot let PID %d run (ptrace detach: %s)", t->pid, strerror(errno));
		return -1;
	}
	phase(r, "release");
	return 0;
}

/* The report's figures known at the attach: its times, the probes, the
 * target, the sampler's mode. */
static void run_meta_at_attach(struct run *r)
{
	struct report_meta *m = &r->meta;
	struct target *t = &r->t;
	struct timespec mono, ts;

	r->t_attached = now_s();
	m->attach_s = r->t_attached - r->t0;
	clock_gettime(CLOCK_MONOTONIC, &mono); /* bpf_ktime_get_ns's clock */
	r->prof->zero_ns = (uint64_t)mono.tv_sec * 1000000000 + (uint64_t)mono.tv_nsec;
	clock_gettime(CLOCK_REALTIME, &ts);
	m->start_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		m->probes_emulated += t->rt.probes[i].present && t->rt.probes[i].emulated;
		m->probes_total += t->rt.probes[i].present;
	}
	for (int f = 0; r->cfg.malloc && f < CH_MFN__COUNT; f++) {
		/* an entry probe, and a return probe on the same spot */
		unsigned n = r->cfg.malloc->fn[f].present ? (f < CH_MFN__ALLOCS ? 2 : 1) : 0;

		m->probes_emulated += r->cfg.malloc->fn[f].emulated ? n : 0;
		m->probes_total += n;
	}
	m->probe_links = sampler_probe_links(r->smp);
	m->pid = t->pid;
	m->exe = t->exe;
	m->ocaml_version = t->rt.version;
	m->unmarshal_off_why = t->rt.unmarshal_why;
	m->command = r->command;
	m->sampler_mode = m->minor_off_why && m->unmarshal_off_why ? "major+custom through read-only uprobes"
			  : m->minor_off_why			 ? "major+custom+unmarshal through read-only uprobes"
			  : r->cfg.minor_from_memprof ? "minor from Gc.Memprof's own sample points, "
							"major+custom+unmarshal, all through read-only uprobes"
						      : "minor through young_limit traps; major+custom+unmarshal through "
							"read-only uprobes";
}

/* What the intake loop needs: the target's pidfd, the --duration timer,
 * the intake's context, the service told, the live view opened.  Returns
 * false if the view could not open (said; nothing to record then). */
static bool run_start(struct run *r)
{
	const struct record_opts *o = r->o;
	struct intake *in = &r->intake;
	struct target *t = &r->t;

	record_say("camlheap: recording PID %d (%s, OCaml %s) at rate %g; %u probes attached in %.3f s%s\n",
		t->pid, t->exe, t->rt.version, r->cfg.rate, r->meta.probes_total, r->meta.attach_s,
		o->duration_s > 0 || o->serve ? "" : "; stop with Ctrl-C");
	r->pidfd = proc_pidfd(t->pid);
	/* --duration counts from the window's opening (record_window_check) */
	if (o->duration_s > 0)
		r->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	in->t = t;
	in->o = o;
	in->meta = &r->meta;
	in->t_attached = in->t_gate = r->t_attached;
	in->timerfd = r->timerfd;
	in->px = r->px;
	in->budget_sps = o->budget_sps;
	in->shift_since = in->win_start = now_s();
	in->interval_s = o->interval_s;
	if (o->trap_given) {
		/* the service calibrated this host's traps once for its workers */
		in->trap = (struct trap_cost){ o->trap_ns[0], o->trap_ns[1], o->trap_ns[2], true };
		in->trap_tried = true;
	}
	in->next_periodic = now_s() + o->interval_s;
	record_snapdir(o, in->snapdir, sizeof(in->snapdir));
	record_window_check(in);
	if (o->serve)
		serve_send(in, "attached %s %s %g", t->rt.version, record_executor_name(r->ex), r->cfg.rate);
	if (o->topo) {
		struct top_source src = {
			.prof = r->prof,
			.mods = &t->mods,
			.pid = t->pid,
			.exe = t->exe,
			.ocaml_version = t->rt.version,
			.executor = record_executor_name(r->ex),
			.census_on = r->meta.census_on,
			.ctx = in,
			.status = record_top_status_cb,
			.write_profile = record_top_write_cb,
		};

		record_read_resident(in);
		if (top_new(o->topo, &src, now_s(), &in->top, r->msg, sizeof(r->msg)) < 0) {
			/* nothing was shown: let go of the target */
			fprintf(stderr, "camlheap: %s\n", r->msg);
			snprintf(r->reason, sizeof(r->reason), "no view");
			r->exit_code = 2;
			return false;
		}
	}
	return true;
}

/* The window ends: the probes go inert, the last figures are read, the
 * executor and the probes let go, the kernel's last events are read, and
 * a launched command that ended is described. */
static void run_detach(struct run *r)
{
	struct report_meta *m = &r->meta;
	struct intake *in = &r->intake;
	struct target *t = &r->t;
	double t_detach;

	/* The window ends now: the probes go inert at once (releasing them
	 * takes the kernel ~1 s, which is not recording time). */
	sampler_stop_sampling(r->smp, t->pid);
	/* the resident set now if the target still lives (not killed for memory), else its last reading */
	record_fill_resident(m, in, !in->exec && !(in->watch.kind && !strcmp(in->watch.kind, "oom")) &&
				    record_read_resident(in) == 0, "the end", 0);
	m->budget = record_budget_describe(in, NULL);
	record_window_finish(in, now_s());
	t_detach = now_s();
	/* no probe queues a write any more: drain and let go */
	if (r->px) {
		struct ptexec_stats ps;

		ptexec_stop(r->px);
		ptexec_stats(r->px, &ps);
		record_copy_exec_stats(m, &ps);
		if (ptexec_exited(r->px, &r->status))
			r->reaped = t->launched;
	}
	sampler_detach(r->smp);
	if (getenv("CAMLHEAP_DEBUG"))
		fprintf(stderr, "camlheap: detached in %.3f s\n", now_s() - t_detach);
	sampler_consume(r->smp);
	m->fates_drained = (uint64_t)sampler_drain_fates(r->smp);
	sampler_counters(r->smp, m->counters);
	record_fill_overhead(m, in);
	for (size_t i = 0; i < t->mods.n; i++)
		m->plugins += !t->mods.v[i].is_exe && t->mods.v[i].ft;
	m->unreadable_files = t->mods.unreadable;
	if (t->launched && (r->reaped || waitpid(t->pid, &r->status, WNOHANG) == t->pid)) {
		r->reaped = true;
		if (in->exec) {
			size_t n = strlen(r->reason);

			snprintf(r->reason + n, sizeof(r->reason) - n, "; then ");
			record_describe_status(r->status, r->reason + strlen(r->reason), sizeof(r->reason) - strlen(r->reason));
		} else {
			record_describe_status(r->status, r->reason, sizeof(r->reason));
		}
		record_describe_exn(r->smp, t->pid, r->reason, sizeof(r->reason));
	}
	m->cpu_s = record_self_cpu_s(&m->max_rss_mib);
	m->end_reason = r->reason;
	m->value = r->o->value;
	m->by_stack = r->o->by_stack;
	if (m->census_on)
		profile_census_compute(r->prof);
}

/* camlheap top: the view's last refresh; if the target ended by itself,
 * its figures stay on screen (browsable, writable) until q. */
static void run_finish_top(struct run *r)
{
	struct intake *in = &r->intake;

	in->px = NULL; /* their figures are in meta now */
	in->smp = NULL;
	if (in->top) {
		bool ended = !strncmp(r->reason, "target", 6);

		top_ended(in->top, now_s(), r->reason, ended, r->sigfd);
		top_free(in->top);
		in->top = NULL;
		record_say("camlheap: %s; PID %d watched for %.1f s, %llu sample%s\n", r->reason, r->t.pid,
			r->meta.duration_s, (unsigned long long)r->prof->samples, r->prof->samples == 1 ? "" : "s");
		r->exit_code = in->top_quit ? 1 : 0; /* stdout failed */
	}
	recording_free(in->rec);
	in->rec = NULL;
}

/* A service worker: the last figures, the last pair of files, then the
 * on-demand recording. */
static void run_finish_serve(struct run *r)
{
	struct intake *in = &r->intake;
	char why[8300];

	record_serve_stats_from(in, &r->meta);
	in->px = NULL; /* its figures are in meta now */
	in->smp = NULL;
	in->meta = &r->meta;
	snprintf(why, sizeof(why), "final: %s", r->reason);
	record_write_periodic(in, "-final", why);
	fprintf(stderr, "camlheap: %s; %llu samples; last profiles in %s\n", r->reason,
		(unsigned long long)r->prof->samples, r->o->outdir);
	record_trace_finish(in, why);
	r->exit_code = 0;
}

/* -o FILE without --format: the recording file. */
static void run_finish_recording(struct run *r)
{
	const struct record_opts *o = r->o;
	struct intake *in = &r->intake;
	int ret = recording_finish(in->rec, &r->meta, r->prof, &r->t.mods);

	if (ret < 0) {
		fprintf(stderr, "camlheap: cannot write the recording to %s: %s\n", o->output ? o->output : "stdout",
			strerror(-ret));
		r->exit_code = 1;
	} else {
		r->exit_code = 0;
		if (o->output && strcmp(o->output, "-"))
			record_say(
				"camlheap: %llu samples in %llu sampled blocks; recording written to %s (memtrace "
				"format: camlheap report %s, or memtrace_viewer)\n",
				(unsigned long long)r->prof->samples, (unsigned long long)recording_allocs(in->rec),
				o->output, o->output);
	}
	/* a test knob: the text report of the same run, to compare with
	 * `camlheap report` of the recording */
	const char *also = getenv("CAMLHEAP_ALSO_TEXT");
	FILE *af = also && *also ? fopen(also, "we") : NULL;

	if (af) {
		recording_profile_as_read(in->rec, &r->meta, r->prof);
		report_render(af, REPORT_TEXT, false, r->prof, &r->meta, &r->t.mods);
		fclose(af);
	}
	recording_free(in->rec);
	in->rec = NULL;
}

/* The report, in --format. */
static void run_finish_report(struct run *r)
{
	const struct record_opts *o = r->o;
	int ret = record_write_report(o, r->prof, &r->meta, &r->t);

	if (ret < 0) {
		fprintf(stderr, "camlheap: cannot write the report to %s: %s\n", o->output ? o->output : "stdout",
			strerror(-ret));
		r->exit_code = 1;
	} else {
		r->exit_code = 0;
		if (o->output && strcmp(o->output, "-"))
			record_say("camlheap: %llu samples; %s written to %s%s%s%s\n", (unsigned long long)r->prof->samples,
				   o->census ? "census" : "report", o->output, r->meta.trigger ? " (trigger: " : "",
				   r->meta.trigger ? r->intake.watch.kind : "", r->meta.trigger ? ")" : "");
	}
}

/* After the outputs: free, wait for a launched command, pass its exit
 * status on.  Returns camlheap's exit status. */
static int run_end(struct run *r)
{
	struct target *t = &r->t;

	sampler_close(r->smp);
	census_paths_free(&r->retention);
	profile_free(r->prof);
	if (t->launched && !r->reaped)
		r->reaped = record_wait_for_command(t->pid, r->sigfd, r->pidfd, &r->status, &r->exit_code);
	if (t->launched && r->reaped && r->exit_code == 0)
		r->exit_code = record_status_to_exit(r->status);
	target_release(t);
	free(r->command);
	close(r->sigfd);
	if (r->pidfd >= 0)
		close(r->pidfd);
	if (r->timerfd >= 0)
		close(r->timerfd);
	return r->exit_code;
}

/* Nothing was recorded: say why, undo what was started (a launched command
 * never runs an instruction of its own).  Returns camlheap's exit status:
 * 2, or for a service worker 3 (the process ended before the attach) and
 * 4 (its executable cannot be profiled). */
static int run_fail(struct run *r)
{
	struct target *t = &r->t;

	fprintf(stderr, "camlheap: %s\n", r->msg);
	recording_free(r->intake.rec);
	if (r->px && t->launched)
		kill(t->pid, SIGKILL); /* before the detach: it must not run unprofiled */
	ptexec_free(r->px);
	sampler_close(r->smp);
	census_paths_free(&r->retention);
	profile_free(r->prof);
	target_release(t);
	if (t->launched) {
		/* The command has not run one instruction of its own yet. */
		fprintf(stderr, "camlheap: the command was not run\n");
		kill(t->pid, SIGKILL);
		waitpid(t->pid, NULL, __WALL);
	}
	free(r->command);
	if (r->o->serve) {
		/* nothing was written: no empty directory is left behind (the
		 * service made it; rmdir only removes an empty one) */
		rmdir(r->o->outdir);
		/* tell the service a process that ended before the attach (3)
		 * and an executable that cannot be profiled (4) from another
		 * failure (2) */
		char exe[4096];

		int e = target_gone(t) ? -ESRCH : proc_exe_path(t->pid, exe, sizeof(exe));

		if (e == -ESRCH || e == -ENOENT)
			return 3;
		if (r->exe_unsupported)
			return 4;
	}
	return 2;
}

bool record_quiet;

int record_run(const struct record_opts *o)
{
	static struct run r; /* large (messages, the intake): not on the stack */
	int ret;

	record_quiet = o->quiet;
	r = (struct run){
		.o = o,
		.t = { .pid = o->pid, .exe_fd = -1 },
		.cfg = { .rate = o->rate,
			 .max_frames = o->max_frames,
			 .ringbuf_bytes = record_ringbuf_bytes(o->serve),
			 .stacks_sent_cap = o->serve ? STACKS_SENT_SERVE : 0,
			 .census = !o->no_census,
			 .max_tracked = o->max_tracked,
			 .kernel_btf = o->kernel_btf },
		.meta = { .top = o->top, .max_frames = o->max_frames, .live = o->live },
		.ex = CH_EXEC_OBSERVE,
		.reason = "stopped",
		.t0 = now_s(),
		.t_phase = now_s(),
		.sigfd = -1,
		.pidfd = -1,
		.timerfd = -1,
		.exit_code = 2,
		.nice0 = INT_MIN,
	};
	/* the attach at PROC_ATTACH_NICE; a launched command keeps the caller's priority */
	if (!o->argv)
		r.nice0 = proc_thread_nice_raise(PROC_ATTACH_NICE);
	/* a service worker started at PROC_ATTACH_NICE already (serve_worker.c) */
	if (o->serve && o->base_nice_given && r.nice0 == INT_MIN)
		r.nice0 = o->base_nice;
	ret = run_check(&r);
	if (ret)
		return ret;
	if (o->argv) {
		ret = run_launch(&r);
		if (ret)
			return ret;
		r.nice0 = proc_thread_nice_raise(PROC_ATTACH_NICE);
	}
	/* A closed report pipe is an error to report, not a reason to die and
	 * orphan the command.  Set only now: ignored dispositions survive exec,
	 * and the command must get the caller's. */
	signal(SIGPIPE, SIG_IGN);
	if (run_plan(&r) < 0 || run_open_profile(&r) < 0 || run_attach(&r) < 0 ||
	    (o->on.set && record_watch_start(&r.intake, o, r.smp, r.msg, sizeof(r.msg)) < 0))
		return run_fail(&r);
	run_meta_at_attach(&r);
	if (run_start(&r))
		record_until_stop(o, &r.t, r.smp, &r.intake, r.sigfd, r.pidfd, r.timerfd, r.reason, sizeof(r.reason));
	/* census --retainers: the paths while the probes still follow the blocks, if the target lives */
	if (o->retainers && (r.intake.exec || kill(r.t.pid, 0) < 0))
		snprintf(r.retention.why_not, sizeof(r.retention.why_not), "PID %d ended first", r.t.pid);
	else if (o->retainers && census_paths_take(&r.t, r.smp, r.px, r.prof, o->max_pause_s, o->max_wait_s,
						   &r.retention) < 0)
		snprintf(r.retention.why_not, sizeof(r.retention.why_not), "no memory for the trace");
	r.meta.retention = o->retainers ? &r.retention : NULL;
	run_detach(&r);
	if (o->topo)
		run_finish_top(&r);
	else if (o->serve)
		run_finish_serve(&r);
	else if (r.intake.rec)
		run_finish_recording(&r);
	else if (o->census && o->on.set && census_watch_missed(&r.intake.watch, r.reason))
		r.exit_code = r.intake.watch.on ? 1 : 2; /* nothing written: the output stays as it was */
	else
		run_finish_report(&r);
	return run_end(&r);
}
