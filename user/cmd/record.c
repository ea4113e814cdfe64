/* record.c -- see record.h.  Reads in the order things happen: privileges,
 * target, runtime plan, sampler, attach, intake loop, report, wait. */
#define _GNU_SOURCE
#include "cmd/record.h"
#include "output/recording.h"
#include "output/pprof.h"

#include <errno.h>
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

#define RINGBUF_BYTES (16u << 20)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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
	double next_res;
	/* set before the intake loop: what snapshots need */
	struct target *t;
	const struct record_opts *o;
	struct report_meta *meta;
	double t_attached;
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
	double next_periodic, next_stats;
	struct recording *trace;   /* an on-demand recording (`trace` command), or NULL */
	uint64_t trace_id;
	double trace_start, trace_end;
	char trace_path[4096];
	/* camlheap top */
	struct top *top;
	char memtrace_off[256];    /* why the view's memtrace key cannot write (in->rec is NULL) */
	bool top_quit;
	int top_refreshes;
};

#define RESIDENT_PERIOD_S 0.1

/* Read the target's resident set and heap size; keep the reading if it
 * worked.  Returns 0 or -errno. */
static int read_resident(struct intake *in)
{
	uint64_t doms[256];
	size_t nd = in->rt->major == 5 && in->smp ? sampler_domain_states(in->smp, in->pid, doms, 256) : 0;
	struct resident r;
	int ret = resident_read(in->pid, in->rt, in->bias, doms, nd, &r);

	if (ret == 0 && in->malloc_libc && !in->libc_checked) {
		char mapped[4096];

		if (malloc_probes_mapped_libc(in->pid, mapped, sizeof(mapped)) == 0) {
			in->libc_checked = true;
			if (strcmp(mapped, in->malloc_libc)) {
				snprintf(in->libc_warning, sizeof(in->libc_warning),
					 "--malloc probed %s, but the program loaded %s: its malloc calls were not "
					 "seen; attach with -p PID once it runs (its mapped libc is probed then)",
					 in->malloc_libc, mapped);
				fprintf(stderr, "camlheap: %s\n", in->libc_warning);
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

static void on_plugin(void *ctx, const struct module *m);

static void on_event(void *ctx, const struct ch_sample_event *ev, size_t size)
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
		in->rescan = modules_scan(in->mods, in->pid, on_plugin, in->smp) == -EAGAIN;

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
static void on_plugin(void *ctx, const struct module *m)
{
	struct sampler *smp = ctx;

	if (sampler_add_runtime_frames(smp, m->ft, m->bias) < 0)
		fprintf(stderr, "camlheap: cannot load the frame tables of plugin %s\n", m->path);
	else
		fprintf(stderr, "camlheap: plugin %s: %zu frame descriptors loaded\n", m->path, m->ft->count);
}

static char *join_argv(char **argv)
{
	size_t len = 1;
	char *s, *p;

	for (char **a = argv; *a; a++)
		len += strlen(*a) + 1;
	s = p = malloc(len);
	if (!s)
		return NULL;
	for (char **a = argv; *a; a++)
		p += sprintf(p, "%s%s", a == argv ? "" : " ", *a);
	return s;
}

static int status_to_exit(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

static void describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "target exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "target killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else
		snprintf(buf, len, "target ended");
}

struct target {
	pid_t pid;
	bool launched;
	char exe[4096];
	char proc_exe[64];          /* "/proc/self/fd/N": the very file parsed, whatever the target execs */
	char proc_exe_link[64];     /* "/proc/PID/exe": what the target runs now */
	int exe_fd;
	struct elf_image *img;
	struct frametable *ft;
	struct ocaml_runtime rt;
	uint64_t bias;
	struct modules mods;        /* owns img and ft once the target is inspected */
	struct stat exe_st;         /* identity of the executable at attach */
};



static void say_exec_while_attaching(char *msg, size_t len, pid_t pid)
{
	snprintf(msg, len,
		 "PID %d called exec while camlheap was attaching: nothing recorded; attach again to profile "
		 "the new program",
		 (int)pid);
}

/* Everything about the target that can fail before any probe exists. */
static int target_inspect(struct target *t, char *msg, size_t len)
{
	char why[1024];
	int ret;

	if (!t->launched && !proc_is_process(t->pid)) {
		if (kill(t->pid, 0) < 0 && errno == ESRCH)
			snprintf(msg, len, "no process with PID %d", t->pid);
		else
			snprintf(msg, len, "%d is not a process ID (a thread ID, or not visible here): pass the PID "
					   "of the process (its thread-group leader)",
				 t->pid);
		return -ESRCH;
	}
	ret = proc_exe_path(t->pid, t->exe, sizeof(t->exe));
	if (ret == -EACCES) {
		snprintf(msg, len,
			 "not allowed to inspect PID %d (/proc/%d/exe): camlheap needs ptrace access to the target "
			 "(CAP_SYS_PTRACE); %s",
			 t->pid, t->pid,
			 geteuid() == 0 ? "camlheap runs as root, so a security module (Yama, SELinux, AppArmor) or "
					  "a PID namespace forbids it"
					: "run it as root");
		return ret;
	}
	if (ret < 0) {
		snprintf(msg, len, "PID %d has no executable (exited, a zombie or a kernel thread)", t->pid);
		return ret;
	}
	/* Everything (parsing, uprobes, DWARF) goes through one open file:
	 * if the target execs meanwhile, the probes still land in the binary
	 * that was parsed, never at its offsets in another one. */
	snprintf(t->proc_exe_link, sizeof(t->proc_exe_link), "/proc/%d/exe", t->pid);
	t->exe_fd = open(t->proc_exe_link, O_RDONLY | O_CLOEXEC);
	if (t->exe_fd < 0 || fstat(t->exe_fd, &t->exe_st) < 0) {
		snprintf(msg, len, "PID %d has no executable (exited, a zombie or a kernel thread)", t->pid);
		return -ESRCH;
	}
	snprintf(t->proc_exe, sizeof(t->proc_exe), "/proc/self/fd/%d", t->exe_fd);
	ret = elf_image_open(t->proc_exe, &t->img);
	if (ret < 0) {
		snprintf(msg, len, "PID %d runs %s, which %s", t->pid, t->exe,
			 ret == -ENOEXEC ? "is not an x86-64 ELF executable: only native OCaml programs are supported"
					 : "cannot be read");
		return ret;
	}
	if (ocaml_runtime_detect(t->img, t->exe, &t->rt, why, sizeof(why)) != OCAML_OK) {
		snprintf(msg, len, "PID %d: %s", t->pid, why);
		return -ENOTSUP;
	}
	ret = frametable_load(t->img, &t->ft);
	if (ret < 0) {
		snprintf(msg, len, "PID %d: cannot parse the frame tables of %s (%s)", t->pid, t->exe, strerror(-ret));
		return ret;
	}
	t->mods.dbg52 = t->ft->dbg52;
	ret = proc_load_bias(t->pid, t->img, &t->bias);
	if (ret == 0)
		ret = modules_add_exe(&t->mods, t->pid, t->img, t->ft, t->bias);
	if (ret == -ENOENT && !t->launched) {
		struct stat now;

		if (stat(t->proc_exe_link, &now) == 0 &&
		    (now.st_dev != t->exe_st.st_dev || now.st_ino != t->exe_st.st_ino)) {
			say_exec_while_attaching(msg, len, t->pid);
			return -ESTALE;
		}
	}
	if (ret < 0) {
		snprintf(msg, len, "PID %d: cannot find where %s is mapped (/proc/%d/maps): %s", t->pid, t->exe,
			 t->pid, strerror(-ret));
		return ret;
	}
	return 0;
}

/* Gc.Memprof's current rate in the target (memprof.c `lambda`): > 0 while
 * the program samples itself, 0 when it does not, -1 if it cannot be read
 * (no .symtab, or no access). */
static int read_u64(int fd, uint64_t addr, uint64_t *out)
{
	return pread(fd, out, sizeof(*out), (off_t)addr) == sizeof(*out) ? 0 : -1;
}

/* OCaml 5.3 and 5.4: the Gc.Memprof configuration of domain 0 (a profile applies to
 * every domain), through all_domains[0].state->memprof->entries.config, a
 * Gc.Memprof.t block: field 0 its status (Val_int(0): sampling), field 1
 * its rate, a boxed float (5.3 runtime/memprof.c:377-412). */
static double memprof53_rate(const struct target *t, int fd)
{
	uint64_t all = 0, state = 0, mp = 0, config = 0, status = 0, box = 0;
	double lambda = -1;

	if (!t->rt.all_domains_sym || !t->rt.memprof_off || read_u64(fd, t->rt.all_domains_sym + t->bias, &all) || !all ||
	    read_u64(fd, all + t->rt.dom_internal_state_off, &state) || !state ||
	    read_u64(fd, state + t->rt.memprof_off, &mp) || !mp || read_u64(fd, mp + CH_OCAML53_MEMPROF_CONFIG, &config) ||
	    config == 1 /* Val_unit: never started */ || (config & 7) || read_u64(fd, config, &status) ||
	    status != 1 /* Val_int(CONFIG_STATUS_SAMPLING) */ || read_u64(fd, config + 8, &box) ||
	    pread(fd, &lambda, sizeof(lambda), (off_t)box) != sizeof(lambda))
		return -1;
	return lambda;
}

static double target_memprof_rate(const struct target *t)
{
	char path[64];
	double lambda = -1;
	int fd;

	if (!t->rt.memprof_lambda_sym && !t->rt.all_domains_sym)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)t->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (t->rt.major == 5)
		lambda = memprof53_rate(t, fd);
	else if (pread(fd, &lambda, sizeof(lambda), (off_t)(t->rt.memprof_lambda_sym + t->bias)) != sizeof(lambda))
		lambda = -1;
	close(fd);
	return lambda > 0 && lambda <= 1 ? lambda : -1;
}

/* Does the target still run the image that was parsed, at the same place?
 * (An exec before the exec tracepoint was attached is caught here.)
 * Returns 0 if so, -ESTALE if it execed, another -errno if it cannot tell. */
static int target_check_unchanged(struct target *t)
{
	struct stat st;
	uint64_t bias;
	int ret;

	if (stat(t->proc_exe_link, &st) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	if (st.st_dev != t->exe_st.st_dev || st.st_ino != t->exe_st.st_ino)
		return -ESTALE;
	ret = proc_load_bias(t->pid, t->img, &bias);
	if (ret == -ENOENT)
		return -ESTALE; /* the parsed file is no longer mapped */
	if (ret < 0)
		return ret;
	return bias == t->bias ? 0 : -ESTALE;
}

static void target_release(struct target *t)
{
	if (t->exe_fd >= 0)
		close(t->exe_fd);
	t->exe_fd = -1;
	if (t->mods.n) {
		modules_free(&t->mods); /* owns img and ft */
	} else {
		frametable_free(t->ft);
		elf_image_close(t->img);
	}
	t->ft = NULL;
	t->img = NULL;
}

/* Render the report through a temporary file (outfile.h).  Returns 0 or
 * -errno. */
static int write_report(const struct record_opts *o, const struct profile *prof, const struct report_meta *meta,
			struct target *t)
{
	struct outfile out;
	int ret;

	ret = outfile_open(&out, o->output);
	if (ret < 0)
		return ret;
	ret = report_render(out.f, o->format, o->census, prof, meta, &t->mods);
	if (ret < 0)
		outfile_abort(&out);
	else
		ret = outfile_commit(&out);
	return ret;
}

/* The target has exited (a launched child: it is a zombie, not yet reaped). */
static bool target_gone(const struct target *t)
{
	char state = 0;
	int ret;

	if (kill(t->pid, 0) < 0 && errno == ESRCH)
		return true;
	ret = proc_stat(t->pid, &state, NULL);
	if (ret == -ESRCH)
		return true;
	return ret == 0 && (state == 'Z' || state == 'X'); /* not gone for want of descriptors */
}

/* The resident-memory part of the report's header, from the intake's
 * latest reading (`now_ok`: it was taken just now). */
static void fill_resident(struct report_meta *meta, struct intake *intake, bool now_ok)
{
	static char when[64];

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
		snprintf(when, sizeof(when), "read at the end");
	else
		snprintf(when, sizeof(when), "last read %.1f s before the end", now_s() - intake->res.at_s);
	meta->rss_when = when;
}

static double self_cpu_s(double *max_rss_mib)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	if (max_rss_mib)
		*max_rss_mib = (double)ru.ru_maxrss / 1024.0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
	       (double)ru.ru_stime.tv_usec * 1e-6;
}

/* The lambdas in force so far, for the report ("1e-05 for 3.0 s, then ..."). */
static const char *budget_describe(struct intake *in)
{
	double now = now_s();
	size_t n = 0;

	if (!(in->budget_sps > 0))
		return NULL;
	n += (size_t)snprintf(in->budget_text, sizeof(in->budget_text), "budget %g samples/s: ", in->budget_sps);
	for (unsigned k = 0; k <= in->max_shift && n < sizeof(in->budget_text); k++) {
		double secs = in->shift_s[k] + (k == in->shift ? now - in->shift_since : 0);

		if (secs <= 0)
			continue;
		n += (size_t)snprintf(in->budget_text + n, sizeof(in->budget_text) - n, "%s%g (2^-%u) for %.2f s",
				      n > 30 && in->budget_text[n - 2] != ':' ? ", " : "",
				      ldexp(in->prof->rate, -(int)k), k, secs);
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
	*m = *in->meta;
	/* once detached, the recording's time is over: meta holds it */
	if (in->smp)
		m->duration_s = now_s() - in->t_attached;
	m->end_reason = reason;
	if (in->smp)
		sampler_counters(in->smp, m->counters);
	m->cpu_s = self_cpu_s(&m->max_rss_mib);
	m->budget = budget_describe(in);
	fill_resident(m, in, true);
	if (in->px) {
		struct ptexec_stats ps;

		ptexec_stats(in->px, &ps);
		m->exec_stops = ps.stops;
		m->exec_writes = ps.writes;
		m->exec_service_s = ps.service_s;
	}
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

/* A message to the service, if this is a worker (serve.h). */
#define serve_send(in, ...) ((in)->o->serve ? (void)serve_sendf((in)->o->serve_fd, __VA_ARGS__) : (void)0)

/* The periodic pair: OUTDIR/heap-STAMP.pb.gz and census-STAMP.txt. */
static void write_periodic(struct intake *in, const char *tag, const char *reason)
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
		snprintf(path, sizeof(path), "%s/%s-%s.%03ldZ%s%s", in->o->outdir, what[i], stamp, ts.tv_nsec / 1000000,
			 tag, ext[i]);
		ret = write_snapshot(in, what[i], path, reason);
		if (ret < 0)
			fprintf(stderr, "camlheap: PID %d: cannot write %s: %s\n", in->pid, path, strerror(-ret));
		else
			serve_send(in, "wrote %s", path);
	}
}

static void trace_finish(struct intake *in, const char *reason)
{
	struct report_meta m;
	int ret;

	if (!in->trace)
		return;
	snapshot_meta(in, &m, reason);
	m.duration_s = now_s() - in->trace_start; /* the recording's own window */
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
		in->trace_start = now_s();
		in->trace_end = in->trace_start + c.value;
	}
}

/* Figures for the service's /metrics and /targets: every second, and once
 * more at the end (`c`: the BPF counters, `smp`: for the BPF run time). */
static void serve_stats_from(struct intake *in, const uint64_t c[CH_CNT__COUNT], struct sampler *smp, uint64_t stops,
			     double service_s)
{
	serve_send(in,
		   "stats samples=%llu weighted=%llu events=%llu dropped=%llu stops=%llu shift=%u bpf_ns=%llu "
		   "exec_ns=%llu cpu_ns=%llu live=%llu rss_kib=%llu heap_words=%llu",
		   (unsigned long long)(c[CH_CNT_SAMPLES] + c[CH_CNT_DROPPED_SAMPLES]),
		   (unsigned long long)in->prof->samples, (unsigned long long)c[CH_CNT_EVENTS],
		   (unsigned long long)c[CH_CNT_DROPPED], (unsigned long long)stops, in->shift,
		   (unsigned long long)sampler_bpf_run_ns(smp), (unsigned long long)(service_s * 1e9),
		   (unsigned long long)(self_cpu_s(NULL) * 1e9), (unsigned long long)in->prof->live_samples,
		   (unsigned long long)(in->res_valid ? in->res.rss_kib : 0),
		   (unsigned long long)(in->res_valid ? in->res.heap_words : 0));
}

static void serve_stats(struct intake *in)
{
	uint64_t c[CH_CNT__COUNT];
	struct ptexec_stats ps = { 0 };

	sampler_counters(in->smp, c);
	if (in->px)
		ptexec_stats(in->px, &ps);
	serve_stats_from(in, c, in->smp, ps.stops, ps.service_s);
}

/* The service worker's and the budget's part of one turn of the loop. */
static void worker_tick(struct intake *in)
{
	double now = now_s();

	budget_tick(in);
	if (!in->o->serve)
		return;
	if (in->trace && now >= in->trace_end)
		trace_finish(in, "on-demand recording: its time elapsed");
	if (now >= in->next_stats) {
		serve_stats(in);
		in->next_stats = now + 1.0;
	}
	if (in->o->interval_s > 0 && now >= in->next_periodic) {
		write_periodic(in, "", NULL);
		in->next_periodic = now + in->o->interval_s;
	}
}

/* camlheap top: the figures of a refresh (top.h). */
static void top_status_cb(void *ctx, struct top_status *st)
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
static int top_write_cb(void *ctx, bool memtrace, const char *path, char *msg, size_t len)
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
static void record_until_stop(const struct record_opts *o, struct target *t, struct sampler *smp,
			      struct intake *intake, int sigfd, int pidfd, int timerfd, char *reason, size_t len)
{
	double next_progress = now_s() + 10.0;

	/* attached to a running program: one reading at once (a launched one
	 * has not started yet: its first reading is one period in) */
	if (!t->launched)
		read_resident(intake);
	intake->next_res = now_s() + RESIDENT_PERIOD_S;
	for (;;) {
		struct pollfd fds[6] = {
			{ .fd = sigfd, .events = POLLIN },
			{ .fd = pidfd, .events = POLLIN },
			{ .fd = timerfd, .events = POLLIN },
			{ .fd = sampler_ring_fd(smp), .events = POLLIN },
			{ .fd = o->serve ? o->serve_fd : -1, .events = POLLIN },
			{ .fd = intake->top ? top_input_fd(intake->top) : -1, .events = POLLIN },
		};
		int timeout = intake->budget_sps > 0 ? 20 : 100;

		/* Without a pidfd (fd limit, seccomp) exits are seen by polling. */
		if (pidfd < 0 && target_gone(t)) {
			snprintf(reason, len, "target exited");
			break;
		}
		if (intake->top) {
			double due = top_next_refresh(intake->top) - now_s();

			if (due * 1000 < timeout)
				timeout = due > 0 ? (int)(due * 1000) + 1 : 0;
		}
		poll(fds, 6, timeout);
		sampler_consume(smp);
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
			read_resident(intake);
			intake->next_res = now_s() + RESIDENT_PERIOD_S;
		}
		/* after an exec the mappings are the new program's: never scan them */
		if (intake->rescan && !intake->exec)
			intake->rescan = modules_scan(&t->mods, t->pid, on_plugin, smp) == -EAGAIN;
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
			snprintf(reason, len, "target exited");
			break;
		}
		if (fds[2].revents & POLLIN) {
			snprintf(reason, len, "duration elapsed");
			break;
		}
		if (o->wait_major > 0 && now_s() >= next_progress) {
			uint32_t seen = intake->prof->clean_phases;

			fprintf(stderr,
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

/* Launch mode, after the report: the command goes on and camlheap's status
 * will be its own.  A second signal leaves it running and makes camlheap
 * exit 128 + that signal, as a shell would.  Returns true once reaped. */
static bool wait_for_command(pid_t pid, int sigfd, int pidfd, int *status, int *exit_code)
{
	struct pollfd fds[2] = { { .fd = sigfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };

	fprintf(stderr, "camlheap: waiting for PID %d to exit (a second signal leaves it running)\n", pid);
	for (;;) {
		if (waitpid(pid, status, WNOHANG) == pid)
			return true;
		/* without a pidfd, look again every 100 ms */
		if (poll(fds, 2, pidfd < 0 ? 100 : -1) < 0 && errno != EINTR)
			return false;
		if (fds[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sigfd, &si, sizeof(si)) == sizeof(si) && *exit_code == 0)
				*exit_code = 128 + (int)si.ssi_signo;
			fprintf(stderr, "camlheap: PID %d left running\n", pid);
			return false;
		}
	}
}

static const char *const executor_names[] = {
	[CH_EXEC_OBSERVE] = "observe",
	[CH_EXEC_PTRACE] = "ptrace",
	[CH_EXEC_KERNEL] = "kernel",
};

/* --executor auto|kernel|ptrace|observe -> the executor that will run. */
static int choose_executor(enum record_executor want, enum ch_executor *ex, char *msg, size_t len)
{
	int allowed;

	switch (want) {
	case RECORD_EXEC_PTRACE:
		*ex = CH_EXEC_PTRACE;
		return 0;
	case RECORD_EXEC_OBSERVE:
		*ex = CH_EXEC_OBSERVE;
		return 0;
	case RECORD_EXEC_KERNEL:
	case RECORD_EXEC_AUTO:
		allowed = sampler_kernel_write_allowed();
		if (allowed == 1) {
			*ex = CH_EXEC_KERNEL;
			return 0;
		}
		if (want == RECORD_EXEC_AUTO) {
			*ex = CH_EXEC_PTRACE;
			return 0;
		}
		snprintf(msg, len,
			 "--executor kernel: this kernel refuses BPF programs that call bpf_probe_write_user "
			 "(kernel lockdown, the default under Secure Boot)%s; use --executor ptrace (or auto)",
			 allowed == -EPERM ? ", or camlheap lacks the privileges to load BPF" : "");
		return -EPERM;
	}
	return -EINVAL;
}

int record_run(const struct record_opts *o)
{
	struct target t = { .pid = o->pid, .exe_fd = -1 };
	struct sampler_config cfg = { .rate = o->rate,
				      .max_frames = o->max_frames,
				      .ringbuf_bytes = RINGBUF_BYTES,
				      .census = !o->no_census,
				      .max_tracked = o->max_tracked ? o->max_tracked : RECORD_DEFAULT_MAX_TRACKED };
	struct report_meta meta = { .top = o->top, .max_frames = o->max_frames, .live = o->live };
	const char *rb_env = getenv("CAMLHEAP_RINGBUF_BYTES");

	/* a test knob: a small ring makes the overflow paths run */
	if (rb_env) {
		unsigned long v = strtoul(rb_env, NULL, 0);

		if (v >= 4096 && v <= (1ul << 30) && !(v & (v - 1)))
			cfg.ringbuf_bytes = v;
	}
	struct sampler *smp = NULL;
	struct ptexec *px = NULL;
	bool px_untraced = false; /* px only holds the launched command until the attach */
	enum ch_executor ex = CH_EXEC_OBSERVE;
	struct profile *prof = NULL;
	double memprof_rate;
	struct intake intake = { 0 };
	static struct malloc_probes mprobes;
	char msg[8192], reason[8192] = "stopped";
	char *command = NULL;
	double t0 = now_s(), t_attached;
	sigset_t mask, old_mask;
	int sigfd = -1, pidfd = -1, timerfd = -1, status = 0, ret, exit_code = 2;
	bool exe_unsupported = false;
	bool reaped = false;

	if (check_privileges(msg, sizeof(msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", msg);
		return 2;
	}
	/* a service worker stops (and writes its last files) when the
	 * service dies, whatever killed it */
	/* named camlheap, not "exe" (it runs as /proc/self/exe) */
	if (o->serve)
		prctl(PR_SET_NAME, "camlheap");
	if (o->serve && (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() == 1)) {
		fprintf(stderr, "camlheap: the service is gone\n");
		return 2;
	}
	/* Check the output first: a report that cannot be written must not
	 * cost a whole recording (or a run of the command). */
	if (outfile_check(o->output, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", msg);
		return 2;
	}
	if (choose_executor(o->executor, &ex, msg, sizeof(msg)) < 0) {
		fprintf(stderr, "camlheap: %s\n", msg);
		return 2;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	if (o->topo) {
		sigaddset(&mask, SIGWINCH);
		sigaddset(&mask, SIGTSTP);
	}
	sigprocmask(SIG_BLOCK, &mask, &old_mask);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC);

	if (o->argv) {
		/* with the ptrace executor, its thread must be the tracer from
		 * the start */
		if (ex == CH_EXEC_PTRACE)
			ret = ptexec_launch(o->argv, &old_mask, &t.pid, &px, msg, sizeof(msg));
		else
			ret = proc_launch(o->argv, &old_mask, &t.pid, msg, sizeof(msg));
		if (ret < 0) {
			fprintf(stderr, "camlheap: %s\n", msg);
			return ret == -ENOENT ? 127 : ret == -EACCES ? 126 : 2;
		}
		t.launched = true;
		command = join_argv(o->argv);
	}
	/* A closed report pipe is an error to report, not a reason to die and
	 * orphan the command.  Set only now: ignored dispositions survive exec,
	 * and the command must get the caller's. */
	signal(SIGPIPE, SIG_IGN);

	ret = target_inspect(&t, msg, sizeof(msg));
	/* not a native OCaml program, or an unsupported runtime: a property
	 * of the executable, which the service remembers (exit status 4) */
	exe_unsupported = ret == -ENOEXEC || ret == -ENOTSUP;
	if (ret < 0)
		goto fail_target;
	memprof_rate = t.rt.minor_ok ? target_memprof_rate(&t) : -1;
	if (memprof_rate > 0 && (o->executor == RECORD_EXEC_AUTO || o->executor == RECORD_EXEC_OBSERVE)) {
		/* the program samples itself: never arm, take its samples */
		ex = CH_EXEC_OBSERVE;
		cfg.minor_from_memprof = true;
		cfg.rate = memprof_rate;
		meta.minor_source = "read-only, from the program's own Gc.Memprof, at its rate";
		fprintf(stderr,
			"camlheap: PID %d runs Gc.Memprof at rate %g: camlheap takes its minor samples read-only and "
			"samples everything at that rate%s%s\n",
			t.pid, memprof_rate, cfg.rate != o->rate ? " (--rate is not used)" : "",
			t.rt.major == 5 ? "" : "; --executor ptrace samples at your own rate alongside it");
	} else if (!t.rt.minor_ok) {
		meta.minor_off_why = t.rt.minor_why;
		/* nothing to write: the command goes untraced, but only once
		 * the probes are in (ptexec_free detaches and lets it run) */
		px_untraced = px != NULL;
		ex = CH_EXEC_OBSERVE;
	} else if (ex == CH_EXEC_OBSERVE) {
		meta.minor_off_why = "--executor observe: camlheap never writes to the target";
	} else if (ex == CH_EXEC_PTRACE && !px) {
		/* every thread seized before any probe can queue a write */
		ret = ptexec_attach(t.pid, &px, msg, sizeof(msg));
		if (ret < 0)
			goto fail_target;
	}
	if (t.rt.major == 5 && t.rt.minor_ok && ex == CH_EXEC_PTRACE)
		meta.minor_source = "young_limit traps, every other thread stopped around each write";
	if (t.rt.major == 5 && t.rt.minor_ok && ex == CH_EXEC_KERNEL)
		meta.minor_source = "young_limit traps, published by caml_reset_young_limit from a lent young_trigger";
	if (o->keep_cpus_awake && ex != CH_EXEC_PTRACE)
		fprintf(stderr, "camlheap: --keep-cpus-awake is for the ptrace executor; the %s executor runs "
				"without it\n",
			executor_names[ex]);
	if (ex == CH_EXEC_OBSERVE && !cfg.minor_from_memprof && t.launched && t.rt.minor_ok)
		fprintf(stderr, "camlheap: --executor observe in launch mode: the command has not started a "
				"Gc.Memprof of its own yet (it is looked for when camlheap attaches); to take its "
				"samples, attach with -p PID once it runs\n");
	cfg.executor = ex;
	cfg.tracer_tgid = getpid();
	meta.census_on = cfg.census && t.rt.census_ok;
	meta.census_off_why = o->no_census ? "--no-census" : t.rt.census_ok ? NULL : t.rt.census_why;
	if (o->census && !meta.census_on) {
		snprintf(msg, sizeof(msg), "cannot take a census of PID %d: %s", t.pid, meta.census_off_why);
		goto fail_target;
	}
	meta.executor = executor_names[ex];
	if (o->malloc) {
		ret = malloc_probes_plan(t.pid, t.img, &t.rt, &mprobes, msg, sizeof(msg));
		if (ret < 0)
			goto fail_target;
		cfg.malloc = &mprobes;
		meta.malloc_libc = mprobes.shown;
	}

	prof = profile_new(cfg.rate);
	if (prof)
		prof->by_domain = o->by_domain;
	intake.prof = prof;
	intake.mods = &t.mods;
	if (!prof) {
		snprintf(msg, sizeof(msg), "out of memory");
		goto fail_target;
	}
	if (o->format == REPORT_MEMTRACE && !o->census) {
		ret = recording_new(o->output, t.pid, cfg.rate, meta.census_on, &intake.rec);
		if (ret < 0) {
			snprintf(msg, sizeof(msg), "cannot start the recording file %s: %s", o->output ? o->output : "(stdout)",
				 strerror(-ret));
			goto fail_target;
		}
	}
	if (o->topo && o->topo->trace_limit_mib > 0) {
		/* kept for the view's m key: its events in an unlinked file */
		const char *dir = getenv("TMPDIR");
		char path[4096];

		snprintf(path, sizeof(path), "%s/camlheap-top.ctf", dir && *dir ? dir : "/tmp");
		ret = recording_new(path, t.pid, cfg.rate, meta.census_on, &intake.rec);
		if (ret < 0) {
			intake.rec = NULL;
			snprintf(intake.memtrace_off, sizeof(intake.memtrace_off),
				 "cannot keep a recording in %s: %s", path, strerror(-ret));
		}
	} else if (o->topo) {
		snprintf(intake.memtrace_off, sizeof(intake.memtrace_off), "--trace-limit 0: no recording kept");
	}
	ret = sampler_open(&cfg, t.ft, on_event, &intake, &smp, msg, sizeof(msg));
	if (ret < 0)
		goto fail_target;
	ret = sampler_attach(smp, t.pid, t.bias, &t.rt, t.proc_exe, t.exe, msg, sizeof(msg));
	if (ret == 0) {
		ret = target_check_unchanged(&t);
		if (ret < 0)
			snprintf(msg, sizeof(msg), "cannot check PID %d after attaching: %s", t.pid, strerror(-ret));
	}
	if (ret < 0) {
		if (!t.launched && target_gone(&t))
			snprintf(msg, sizeof(msg), "PID %d exited while camlheap was attaching: nothing recorded", t.pid);
		else if (ret == -ESTALE || target_check_unchanged(&t) == -ESTALE)
			say_exec_while_attaching(msg, sizeof(msg), t.pid);
		goto fail_target;
	}
	/* The holder keeps the probes; camlheap's death or exit never waits
	 * for their release (without it, the probes just stay with camlheap). */
	{
		char why[256];

		if (sampler_hand_off_links(smp, why, sizeof(why)) < 0 && getenv("CAMLHEAP_DEBUG"))
			fprintf(stderr, "camlheap: probes stay with camlheap: %s\n", why);
	}
	/* Plugins loaded before the caml_register_frametable probe existed
	 * (attach mode): load them now; later ones arrive as notes. */
	intake.rescan = modules_scan(&t.mods, t.pid, on_plugin, smp) == -EAGAIN;
	intake.smp = smp;
	intake.pid = t.pid;
	intake.rt = &t.rt;
	intake.bias = t.bias;
	intake.malloc_libc = cfg.malloc && t.launched ? mprobes.shown : NULL;
	if (intake.rec && t.mods.n) {
		/* the recording symbolizes from the first event on: open the
		 * executable's debug information now (after the attach, which
		 * must stay short: the target may exec or exit meanwhile) */
		struct sym_frame fr[4];

		modules_lookup(&t.mods, t.mods.ranges ? t.mods.ranges[0].start : 0, 0, fr, 4);
	}
	if (px && px_untraced) {
		ptexec_free(px);
		px = NULL;
	} else if (px)
		ptexec_run(px, sampler_write_req_fd(smp), o->keep_cpus_awake);
	else if (t.launched && proc_launch_release(t.pid) < 0) {
		snprintf(msg, sizeof(msg), "cannot let PID %d run (ptrace detach: %s)", t.pid, strerror(errno));
		goto fail_target;
	}
	t_attached = now_s();
	meta.attach_s = t_attached - t0;
	{
		struct timespec mono;

		clock_gettime(CLOCK_MONOTONIC, &mono); /* bpf_ktime_get_ns's clock */
		prof->zero_ns = (uint64_t)mono.tv_sec * 1000000000 + (uint64_t)mono.tv_nsec;
	}
	{
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		meta.start_unix_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	}
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		meta.probes_emulated += t.rt.probes[i].present && t.rt.probes[i].emulated;
		meta.probes_total += t.rt.probes[i].present;
	}
	for (int f = 0; cfg.malloc && f < CH_MFN__COUNT; f++) {
		/* an entry probe, and a return probe on the same spot */
		unsigned n = mprobes.fn[f].present ? (f < CH_MFN__ALLOCS ? 2 : 1) : 0;

		meta.probes_emulated += mprobes.fn[f].emulated ? n : 0;
		meta.probes_total += n;
	}
	fprintf(stderr, "camlheap: recording PID %d (%s, OCaml %s) at rate %g; %u probes attached in %.3f s%s\n",
		t.pid, t.exe, t.rt.version, cfg.rate, meta.probes_total, meta.attach_s,
		o->duration_s > 0 || o->serve ? "" : "; stop with Ctrl-C");

	pidfd = proc_pidfd(t.pid);
	if (o->duration_s > 0) {
		struct itimerspec its = { 0 };

		its.it_value.tv_sec = (time_t)o->duration_s;
		its.it_value.tv_nsec = (long)((o->duration_s - (double)its.it_value.tv_sec) * 1e9);
		if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
			its.it_value.tv_nsec = 1;
		timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
		timerfd_settime(timerfd, 0, &its, NULL);
	}

	meta.pid = t.pid;
	meta.exe = t.exe;
	meta.ocaml_version = t.rt.version;
	meta.unmarshal_off_why = t.rt.unmarshal_why;
	meta.command = command;
	meta.sampler_mode = meta.minor_off_why && meta.unmarshal_off_why ? "major+custom through read-only uprobes"
			    : meta.minor_off_why     ? "major+custom+unmarshal through read-only uprobes"
			    : cfg.minor_from_memprof ? "minor from Gc.Memprof's own sample points, "
						       "major+custom+unmarshal, all through read-only uprobes"
						     : "minor through young_limit traps; major+custom+unmarshal through "
						       "read-only uprobes";
	intake.t = &t;
	intake.o = o;
	intake.meta = &meta;
	intake.t_attached = t_attached;
	intake.px = px;
	intake.budget_sps = o->budget_sps;
	intake.shift_since = intake.win_start = now_s();
	intake.next_periodic = now_s() + o->interval_s;
	if (o->serve)
		serve_send(&intake, "attached %s %s %g", t.rt.version, executor_names[ex], cfg.rate);
	if (o->topo) {
		struct top_source src = {
			.prof = prof,
			.mods = &t.mods,
			.pid = t.pid,
			.exe = t.exe,
			.ocaml_version = t.rt.version,
			.executor = executor_names[ex],
			.census_on = meta.census_on,
			.ctx = &intake,
			.status = top_status_cb,
			.write_profile = top_write_cb,
		};

		read_resident(&intake);
		ret = top_new(o->topo, &src, now_s(), &intake.top, msg, sizeof(msg));
		if (ret < 0) {
			/* nothing was shown: let go of the target */
			fprintf(stderr, "camlheap: %s\n", msg);
			snprintf(reason, sizeof(reason), "no view");
			exit_code = 2;
		}
	}
	if (!o->topo || intake.top)
		record_until_stop(o, &t, smp, &intake, sigfd, pidfd, timerfd, reason, sizeof(reason));
	/* The window ends now: the probes go inert at once (releasing them
	 * takes the kernel ~1 s, which is not recording time). */
	sampler_stop_sampling(smp, t.pid);
	/* the resident set now if the target still lives, else its last reading */
	fill_resident(&meta, &intake, !intake.exec && read_resident(&intake) == 0);
	meta.budget = budget_describe(&intake);
	meta.duration_s = now_s() - t_attached;
	{
		double t_detach = now_s();

		/* no probe queues a write any more: drain and let go */
		if (px) {
			struct ptexec_stats ps;

			ptexec_stop(px);
			ptexec_stats(px, &ps);
			meta.exec_stops = ps.stops;
			meta.exec_writes = ps.writes;
			meta.exec_stale = ps.stale;
			meta.exec_pending = ps.pending;
			meta.exec_errors = ps.write_errors;
			meta.exec_passed_signals = ps.passed_signals;
			meta.exec_service_s = ps.service_s;
			meta.exec_freezes = ps.freezes;
			meta.exec_freeze_timeouts = ps.freeze_timeouts;
			if (ptexec_exited(px, &status))
				reaped = t.launched;
		}
		sampler_detach(smp);
		if (getenv("CAMLHEAP_DEBUG"))
			fprintf(stderr, "camlheap: detached in %.3f s\n", now_s() - t_detach);
	}
	sampler_consume(smp);
	meta.fates_drained = (uint64_t)sampler_drain_fates(smp);
	sampler_counters(smp, meta.counters);
	for (size_t i = 0; i < t.mods.n; i++)
		meta.plugins += !t.mods.v[i].is_exe && t.mods.v[i].ft;
	meta.unreadable_files = t.mods.unreadable;
	if (t.launched && (reaped || waitpid(t.pid, &status, WNOHANG) == t.pid)) {
		reaped = true;
		if (intake.exec) {
			size_t n = strlen(reason);

			snprintf(reason + n, sizeof(reason) - n, "; then ");
			describe_status(status, reason + strlen(reason), sizeof(reason) - strlen(reason));
		} else {
			describe_status(status, reason, sizeof(reason));
		}
	}

	meta.cpu_s = self_cpu_s(&meta.max_rss_mib);
	meta.end_reason = reason;
	meta.value = o->value;
	if (meta.census_on)
		profile_census_compute(prof);
	if (o->topo) {
		/* the view's last refresh; if the target ended by itself, its
		 * figures stay on screen (browsable, writable) until q */
		intake.px = NULL; /* their figures are in meta now */
		intake.smp = NULL;
		if (intake.top) {
			bool ended = !strncmp(reason, "target", 6);

			top_ended(intake.top, now_s(), reason, ended, sigfd);
			top_free(intake.top);
			intake.top = NULL;
			fprintf(stderr, "camlheap: %s; PID %d watched for %.1f s, %llu sample%s\n", reason, t.pid,
				meta.duration_s, (unsigned long long)prof->samples, prof->samples == 1 ? "" : "s");
			exit_code = intake.top_quit ? 1 : 0; /* stdout failed */
		}
		recording_free(intake.rec);
		intake.rec = NULL;
	} else if (o->serve) {
		/* the last figures, the last pair of files, then the on-demand
		 * recording */
		serve_stats_from(&intake, meta.counters, smp, meta.exec_stops, meta.exec_service_s);
		intake.px = NULL; /* its figures are in meta now */
		intake.smp = NULL;
		intake.meta = &meta;
		intake.t_attached = t_attached;
		{
			char why[8300];

			snprintf(why, sizeof(why), "final: %s", reason);
			write_periodic(&intake, "-final", why);
			fprintf(stderr, "camlheap: %s; %llu samples; last profiles in %s\n", reason,
				(unsigned long long)prof->samples, o->outdir);
			trace_finish(&intake, why);
		}
		exit_code = 0;
	} else if (intake.rec) {
		ret = recording_finish(intake.rec, &meta, prof, &t.mods);
		if (ret < 0) {
			fprintf(stderr, "camlheap: cannot write the recording to %s: %s\n",
				o->output ? o->output : "stdout", strerror(-ret));
			exit_code = 1;
		} else {
			exit_code = 0;
			if (o->output && strcmp(o->output, "-"))
				fprintf(stderr,
					"camlheap: %llu samples in %llu sampled blocks; recording written to %s (memtrace "
					"format: camlheap report %s, or memtrace_viewer)\n",
					(unsigned long long)prof->samples,
					(unsigned long long)recording_allocs(intake.rec), o->output, o->output);
		}
		/* a test knob: the text report of the same run, to compare
		 * with `camlheap report` of the recording */
		const char *also = getenv("CAMLHEAP_ALSO_TEXT");
		FILE *af = also && *also ? fopen(also, "we") : NULL;

		if (af) {
			report_render(af, REPORT_TEXT, false, prof, &meta, &t.mods);
			fclose(af);
		}
		recording_free(intake.rec);
		intake.rec = NULL;
	} else {
		ret = write_report(o, prof, &meta, &t);
		if (ret < 0) {
			fprintf(stderr, "camlheap: cannot write the report to %s: %s\n",
				o->output ? o->output : "stdout", strerror(-ret));
			exit_code = 1;
		} else {
			exit_code = 0;
			if (o->output && strcmp(o->output, "-"))
				fprintf(stderr, "camlheap: %llu samples; report written to %s\n",
					(unsigned long long)prof->samples, o->output);
		}
	}
	sampler_close(smp);
	profile_free(prof);

	if (t.launched && !reaped)
		reaped = wait_for_command(t.pid, sigfd, pidfd, &status, &exit_code);
	if (t.launched && reaped && exit_code == 0)
		exit_code = status_to_exit(status);
	target_release(&t);
	free(command);
	close(sigfd);
	if (pidfd >= 0)
		close(pidfd);
	if (timerfd >= 0)
		close(timerfd);
	return exit_code;

fail_target:
	fprintf(stderr, "camlheap: %s\n", msg);
	recording_free(intake.rec);
	if (px && t.launched)
		kill(t.pid, SIGKILL); /* before the detach: it must not run unprofiled */
	ptexec_free(px);
	sampler_close(smp);
	profile_free(prof);
	target_release(&t);
	if (t.launched) {
		/* The command has not run one instruction of its own yet. */
		fprintf(stderr, "camlheap: the command was not run\n");
		kill(t.pid, SIGKILL);
		waitpid(t.pid, NULL, __WALL);
	}
	free(command);
	if (o->serve) {
		/* tell the service a process that ended before the attach (3)
		 * and an executable that cannot be profiled (4) from another
		 * failure (2) */
		char exe[4096];

		int e = target_gone(&t) ? -ESRCH : proc_exe_path(t.pid, exe, sizeof(exe));

		if (e == -ESRCH || e == -ENOENT)
			return 3;
		if (exe_unsupported)
			return 4;
	}
	return 2;
}
