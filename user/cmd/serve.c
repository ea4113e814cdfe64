/* serve.c -- `camlheap serve` (serve.h), its service: the state (S, the
 * table of workers), the log, the main loop (signals, discovery events,
 * worker messages, timers), reloads and systemd notifications.  One thread
 * runs it; libmicrohttpd's threads answer HTTP (serve_http.c).  The other
 * files: serve_internal.h. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <glib.h>
#include <systemd/sd-daemon.h>

#include "camlheap.h"
#include "cmd/serve_internal.h"
#include "discover.skel.h"
#include "collect/sampler.h"
#include "target/proc.h"

struct service S;

double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Log a line: to the journal with its priority (sd-daemon.h prefixes),
 * else to stderr prefixed "camlheap serve: ". */
void slog(int prio, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (S.journal)
		fprintf(stderr, "<%d>%s\n", prio, buf);
	else
		fprintf(stderr, "camlheap serve: %s\n", buf);
	fflush(stderr);
}

/* JOURNAL_STREAM=DEV:INODE names stderr when systemd connected it to the
 * journal (systemd.exec(5)). */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	return js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(2, &st) == 0 &&
	       (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

const struct serve_target *find_target(const char *name)
{
	for (size_t i = 0; i < S.cfg.ntargets; i++)
		if (!strcmp(S.cfg.targets[i].name, name))
			return &S.cfg.targets[i];
	return NULL;
}

struct worker *active_worker(pid_t pid)
{
	for (struct worker *w = S.workers; w; w = w->next)
		if (w->pid == pid && (w->state == W_ATTACHING || w->state == W_RECORDING))
			return w;
	return NULL;
}

/* ---- the service ---------------------------------------------------- */

static void notify_status(void)
{
	sd_notifyf(0, "STATUS=%u process%s followed, %zu target%s; %llu workers started, %llu failed", S.active,
		   S.active == 1 ? "" : "es", S.cfg.ntargets, S.cfg.ntargets == 1 ? "" : "s",
		   (unsigned long long)S.started_total, (unsigned long long)S.failed_total);
}

/* The output directory exists (created if need be), is a directory, and
 * this service can create files in it.  Returns 0 or -errno with err set. */
static int check_output(const char *dir, char *err, size_t len)
{
	struct stat st;
	int ret = mkdir_p(dir, 0750);

	if (ret == 0 && (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)))
		ret = -ENOTDIR;
	if (ret == 0 && access(dir, W_OK | X_OK) < 0)
		ret = -errno;
	if (ret < 0)
		snprintf(err, len, "output = %s: cannot use it as the output directory: %s", dir, strerror(-ret));
	return ret;
}

/* Snapshot directories of services that died (kill -9): camlheap-serve.PID.* */
static void remove_stale_tmpdirs(const char *parent)
{
	DIR *d = opendir(parent);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		int pid;
		char path[PATH_MAX];

		if (sscanf(e->d_name, "camlheap-serve.%d.", &pid) != 1 || pid <= 0 || (kill(pid, 0) == 0 || errno != ESRCH))
			continue;
		snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
		{
			DIR *sd = opendir(path);
			struct dirent *f;

			if (!sd)
				continue;
			while ((f = readdir(sd)))
				if (strcmp(f->d_name, ".") && strcmp(f->d_name, ".."))
					unlinkat(dirfd(sd), f->d_name, 0);
			closedir(sd);
		}
		rmdir(path);
	}
	closedir(d);
}

/* What a reload changed for worker w of target t that a running worker
 * cannot take (its command line: rate, malloc, executor, max-depth, census-on,
 * output), in words into buf.  Returns whether anything did. */
static bool reload_changes(const struct worker *w, const struct serve_target *t, char *buf, size_t len)
{
	const char *ex = t->executor ? t->executor : "auto";
	unsigned depth = t->max_depth ? t->max_depth : CH_DEFAULT_FRAMES;
	size_t n = 0;

	buf[0] = 0;
#define SAY(...) (n += (size_t)snprintf(buf + n, n < len ? len - n : 0, __VA_ARGS__))
	if (t->rate != w->rate_asked)
		SAY("%srate %g -> %g", n ? ", " : "", w->rate_asked, t->rate);
	if (t->malloc != w->malloc_asked)
		SAY("%smalloc %s -> %s", n ? ", " : "", w->malloc_asked ? "true" : "false", t->malloc ? "true" : "false");
	if (strcmp(ex, w->executor_asked))
		SAY("%sexecutor %s -> %s", n ? ", " : "", w->executor_asked, ex);
	if (depth != w->depth_asked)
		SAY("%smax-depth %u -> %u", n ? ", " : "", w->depth_asked, depth);
	if (g_strcmp0(t->census_on, w->census_on_asked))
		SAY("%scensus-on %s -> %s", n ? ", " : "", w->census_on_asked ? w->census_on_asked : "(none)",
		    t->census_on ? t->census_on : "(none)");
	if (g_strcmp0(S.cfg.output, w->output_asked))
		SAY("%soutput %s -> %s", n ? ", " : "", w->output_asked, S.cfg.output);
#undef SAY
	return n > 0;
}

/* SIGHUP: the new configuration, or the old one if the file is bad.
 * Workers whose process no longer matches its (renamed or changed) target
 * are stopped; those whose rate, malloc, executor, max-depth, census-on or output
 * changed are restarted (reload_changes); the others get the new interval
 * (the budgets follow in rebalance_budgets, keep and keep-bytes in the
 * next retention pass); processes of new targets are looked for.  listen
 * and socket are kept, with a warning. */
static void reload(void)
{
	struct serve_config nc;
	char err[2048], what[1024];

	sd_notify(0, "RELOADING=1");
	if (serve_config_load(S.config_path, &nc, err, sizeof(err)) < 0) {
		slog(LOG_ERR, "reload: %s; the configuration in force is kept", err);
		sd_notify(0, "READY=1");
		return;
	}
	if (nc.warnings)
		slog(LOG_WARNING, "%s", g_strchomp(nc.warnings));
	if (S.interval_override > 0)
		nc.interval_s = S.interval_override;
	if (check_output(nc.output, err, sizeof(err)) < 0) {
		serve_config_free(&nc);
		slog(LOG_ERR, "reload: %s; the configuration in force is kept", err);
		sd_notify(0, "READY=1");
		return;
	}
	if (strcmp(nc.listen, S.cfg.listen) || g_strcmp0(nc.socket, S.cfg.socket))
		slog(LOG_WARNING, "reload: listen and socket changes take effect at the next start");
	g_free(nc.listen);
	nc.listen = g_strdup(S.cfg.listen);
	g_free(nc.socket);
	nc.socket = g_strdup(S.cfg.socket);
	pthread_mutex_lock(&S.lk);
	serve_config_free(&S.cfg);
	S.cfg = nc;
	pthread_mutex_unlock(&S.lk);
	g_hash_table_remove_all(S.unsupported); /* try every executable again */
	/* fork children after the others: a child is its parent's target's
	 * as long as the parent is (target_has) */
	for (int pass = 0; pass < 2; pass++)
	for (struct worker *w = S.workers; w; w = w->next) {
		const struct serve_target *t;

		if (w->wpid <= 0 || (w->state != W_ATTACHING && w->state != W_RECORDING) || !w->fork_parent != !pass)
			continue;
		t = find_target(w->target);
		/* a fork child whose parent ended (it has another parent now) stays its target's */
		if (!t || !(target_has(t, w->pid) || (w->fork_parent && !forked_from(w->pid)))) {
			slog(LOG_INFO, "reload: PID %d is no longer a process of target %s: stopping its worker", w->pid,
			     w->target);
			w->detached = true;
			kill(w->wpid, SIGTERM);
		} else if (reload_changes(w, t, what, sizeof(what))) {
			slog(LOG_INFO, "reload: target %s, PID %d: %s; its worker is restarted, as a worker's rate, "
				       "probes, executor, stack depth, census-on triggers and output directory are set when it attaches "
				       "(its files so far end with a -final pair in %s)",
			     w->target, w->pid, what, w->dir);
			w->detached = true;
			w->restart = true;
			kill(w->wpid, SIGTERM);
		} else if (S.cfg.interval_s != w->interval_sent) {
			send_msg(w, "interval %.17g", S.cfg.interval_s);
			w->interval_sent = S.cfg.interval_s;
		}
	}
	scan_proc();
	rebalance_budgets();
	slog(LOG_INFO, "reloaded %s: %zu targets", S.config_path, S.cfg.ntargets);
	sd_notify(0, "READY=1");
	notify_status();
}

static int rm_tmpdir(void)
{
	DIR *d = opendir(S.tmpdir);
	struct dirent *e;

	if (d) {
		while ((e = readdir(d)))
			if (e->d_name[0] != '.' || (e->d_name[1] && strcmp(e->d_name, "..")))
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	return rmdir(S.tmpdir);
}

/* S zeroed, then what is known before the configuration is read. */
static void init_service(const char *config_path, const char *real, double interval_s)
{
	memset(&S, 0, sizeof(S));
	S.unix_fd = -1;
	S.stats_fd = -1;
	S.kbtf_fd = -1;
	S.config_path = real ? real : config_path;
	S.journal = stderr_is_journal();
	S.start_unix = now_real();
	pthread_mutex_init(&S.lk, NULL);
	pthread_cond_init(&S.cv, NULL);
	S.unsupported = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	S.forks = g_array_new(FALSE, FALSE, sizeof(struct fork_wait));
	S.interval_override = interval_s;
}

/* The configuration file into S.cfg, with this process's privileges and
 * the output directory checked.  Returns 0, or -1 with the message logged
 * (S.cfg freed). */
static int load_first_config(const char *config_path)
{
	char err[2048];

	if (serve_config_load(config_path, &S.cfg, err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		return -1;
	}
	if (S.interval_override > 0)
		S.cfg.interval_s = S.interval_override;
	if (geteuid() != 0) {
		/* the workers' check says exactly what is missing; say it once here */
		slog(LOG_ERR, "camlheap serve loads BPF programs and attaches uprobes to other users' processes: run it as "
			      "root (the systemd unit in dist/ does), with CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and "
			      "CAP_SYS_PTRACE");
		serve_config_free(&S.cfg);
		return -1;
	}
	if (S.cfg.warnings)
		slog(LOG_WARNING, "%s", g_strchomp(S.cfg.warnings));
	if (check_output(S.cfg.output, err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		serve_config_free(&S.cfg);
		return -1;
	}
	return 0;
}

/* S.tmpdir created under $RUNTIME_DIRECTORY (if absolute) or /tmp, after
 * what dead services left there is removed.  Returns 0, or -1 with the
 * message logged (S.cfg freed). */
static int make_tmpdir(void)
{
	const char *rt = getenv("RUNTIME_DIRECTORY");

	remove_stale_tmpdirs(rt && rt[0] == '/' ? rt : "/tmp");
	snprintf(S.tmpdir, sizeof(S.tmpdir), "%s/camlheap-serve.%d.XXXXXX", rt && rt[0] == '/' ? rt : "/tmp",
		 (int)getpid());
	if (!mkdtemp(S.tmpdir)) {
		slog(LOG_ERR, "cannot create a temporary directory under %s: %s", rt ? rt : "/tmp", strerror(errno));
		serve_config_free(&S.cfg);
		return -1;
	}
	return 0;
}

/* SIGINT, SIGTERM, SIGHUP and SIGCHLD blocked, to be read from the
 * returned signalfd (non-blocking); SIGPIPE ignored. */
static int block_signals(void)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* fd moved to a descriptor >= 10, close-on-exec (fd itself if it cannot be) */
static int dup_high_and_close(int fd)
{
	int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);

	if (hi < 0)
		return fd;
	close(fd);
	return hi;
}

/* Before any BPF object is loaded: the memlock limit lifted, run-time
 * statistics on. */
static void prepare_bpf(void)
{
	/* workers each hold a ring buffer and maps */
	struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

	setrlimit(RLIMIT_MEMLOCK, &rl);
	/* the overhead figures: time in BPF programs (a global switch, on
	 * while this descriptor lives; kernel >= 5.8) */
	S.stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (S.stats_fd < 0)
		slog(LOG_WARNING, "cannot turn BPF run-time statistics on (%s): the overhead figures count only the "
				  "ptrace executor's stops", strerror(errno));
	libbpf_set_print(NULL);
}

/* The discovery BPF program attached, its ring buffer open (S.disc, S.rb).
 * Returns 0, or -1 with the message logged. */
static int start_discovery(void)
{
	S.disc = discover_bpf__open_and_load();
	if (!S.disc || discover_bpf__attach(S.disc) < 0) {
		slog(LOG_ERR, "cannot load the discovery BPF program (raw tracepoint sched_process_exec): %s",
		     strerror(errno));
		return -1;
	}
	S.rb = ring_buffer__new(bpf_map__fd(S.disc->maps.execs), on_exec_event, NULL, NULL);
	if (!S.rb) {
		slog(LOG_ERR, "cannot read the discovery ring buffer: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* One wait of the main loop, 250 ms at most (less if a fork child is
 * due), on sigfd, the discovery ring buffer and the workers' descriptors;
 * exec and fork events and what the workers sent are handled.  Returns
 * whether sigfd has signals to read. */
static bool poll_once(int sigfd)
{
	S.nworkers_fds = 0;
	for (struct worker *w = S.workers; w; w = w->next)
		S.nworkers_fds++;
	nfds_t n = 0, cap = 2 + 2 * (nfds_t)S.nworkers_fds;
	struct pollfd *fds = g_new(struct pollfd, cap + 2);
	struct worker **ws = g_new(struct worker *, cap + 2);
	double fork_due = settle_forks();
	bool sig_ready;

	fds[n++] = (struct pollfd){ .fd = sigfd, .events = POLLIN };
	fds[n++] = (struct pollfd){ .fd = ring_buffer__epoll_fd(S.rb), .events = POLLIN };
	for (struct worker *w = S.workers; w && n + 2 <= cap; w = w->next) {
		if (w->fd >= 0) {
			ws[n - 2] = w;
			fds[n++] = (struct pollfd){ .fd = w->fd, .events = POLLIN };
		}
		if (w->errfd >= 0) {
			ws[n - 2] = w;
			fds[n++] = (struct pollfd){ .fd = w->errfd, .events = POLLIN };
		}
	}
	poll(fds, n, fork_due >= 0 && fork_due < 0.25 ? (int)(fork_due * 1000) + 1 : 250);
	ring_buffer__consume(S.rb);
	settle_forks();
	for (nfds_t i = 2; i < n; i++) {
		if (!fds[i].revents)
			continue;
		if (fds[i].fd == ws[i - 2]->fd)
			on_worker_msg(ws[i - 2]);
		else if (fds[i].fd == ws[i - 2]->errfd)
			on_worker_err(ws[i - 2]);
	}
	sig_ready = fds[0].revents & POLLIN;
	g_free(fds);
	g_free(ws);
	return sig_ready;
}

/* Every signal waiting on sigfd: SIGCHLD reaps workers, SIGHUP reloads,
 * SIGINT and SIGTERM end the main loop. */
static void on_signals(int sigfd)
{
	struct signalfd_siginfo si;

	while (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
		if (si.ssi_signo == SIGCHLD) {
			reap_workers();
			notify_status();
		} else if (si.ssi_signo == SIGHUP) {
			reload();
		} else {
			slog(LOG_NOTICE, "SIG%s: stopping", sigabbrev_np((int)si.ssi_signo));
			S.stopping = true;
		}
	}
}

/* What the main loop does when it is due: the PID files every second,
 * retention every 5 s (or after a worker wrote a file), the systemd
 * watchdog at half its period. */
static void run_timers(void)
{
	double now = now_mono();

	if (now >= S.next_pidfiles) {
		poll_pidfiles();
		if (S.disc->bss->lost) {
			/* execs were lost: look at every process once */
			S.disc->bss->lost = 0;
			scan_proc();
		}
		S.next_pidfiles = now + 1.0;
	}
	if (now >= S.next_retention) {
		retention();
		S.next_retention = now + 5.0;
	}
	if (S.watchdog_usec && now >= S.next_watchdog) {
		sd_notify(0, "WATCHDOG=1");
		S.next_watchdog = now + (double)S.watchdog_usec * 1e-6 / 2;
	}
}

/* What serve_run set up (as far as it got) released; sigfd closed. */
static void teardown(int sigfd)
{
	stop_http();
	ring_buffer__free(S.rb);
	discover_bpf__destroy(S.disc);
	if (S.stats_fd >= 0)
		close(S.stats_fd);
	if (S.kbtf_fd >= 0)
		close(S.kbtf_fd);
	rm_tmpdir();
	pthread_mutex_lock(&S.lk);
	while (S.workers) {
		struct worker *w = S.workers;

		S.workers = w->next;
		if (w->fd >= 0)
			close(w->fd);
		if (w->errfd >= 0)
			close(w->errfd);
		g_free(w->target);
		g_free(w->output_asked);
		g_free(w->census_on_asked);
		free(w);
	}
	pthread_mutex_unlock(&S.lk);
	serve_config_free(&S.cfg);
	g_hash_table_destroy(S.unsupported);
	for (guint i = 0; i < S.forks->len; i++)
		g_free(g_array_index(S.forks, struct fork_wait, i).target);
	g_array_free(S.forks, TRUE);
	close(sigfd);
}

int serve_run(const char *config_path, double interval_s)
{
	char err[2048];
	int sigfd, ret, status = 0;

	char *real = realpath(config_path, NULL); /* SIGHUP reads it again from wherever */

	init_service(config_path, real, interval_s);
	if (load_first_config(config_path) < 0 || make_tmpdir() < 0)
		return 2;
	sigfd = block_signals();
	prepare_bpf();
	if (start_discovery() < 0) {
		ret = 2;
		goto out;
	}
	if (start_http(err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		ret = 2;
		goto out;
	}
	/* once for every worker: each would take ~20-200 ms of CPU for it,
	 * while the others attach */
	if (trap_cost_calibrate(&S.trap, err, sizeof(err)) < 0)
		S.trap.valid = false;
	/* and the kernel's BTF, 5.5 MB each worker would read and parse (~40 ms) */
	if ((S.kbtf_fd = sampler_kernel_btf(err, sizeof(err))) < 0)
		slog(LOG_INFO, "workers read the kernel's whole BTF: %s", err);
	else /* above the descriptors a spawn sets (spawn_worker): no dup2 there clobbers it */
		S.kbtf_fd = dup_high_and_close(S.kbtf_fd);
	/* after the HTTP thread started (it keeps the service's priority):
	 * on a busy host, a new process is seen and its worker started (and
	 * its worker's start-up, before it raises its own) at the attach's
	 * priority, not in the busy processes' time slices */
	errno = 0;
	S.base_nice = getpriority(PRIO_PROCESS, (id_t)gettid());
	S.nice_raised = !errno && proc_thread_nice_raise(PROC_ATTACH_NICE) != INT_MIN;
	scan_proc();
	sd_watchdog_enabled(0, &S.watchdog_usec);
	sd_notify(0, "READY=1");
	notify_status();
	slog(LOG_NOTICE, "serving %zu target%s from %s; profiles every %g s into %s; HTTP %s%s%s", S.cfg.ntargets,
	     S.cfg.ntargets == 1 ? "" : "s", config_path, S.cfg.interval_s, S.cfg.output, S.cfg.listen,
	     S.cfg.socket ? ", socket " : "", S.cfg.socket ? S.cfg.socket : "");

	while (!S.stopping) {
		if (poll_once(sigfd))
			on_signals(sigfd);
		run_timers();
	}

	/* SIGTERM: every worker writes its last files and detaches */
	sd_notify(0, "STOPPING=1");
	stop_workers(sigfd);
	retention();
	slog(LOG_NOTICE, "stopped: every worker detached and wrote its last profile");
	ret = 0;
out:
	teardown(sigfd);
	free(real);
	status = ret;
	return status;
}
