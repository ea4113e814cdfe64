/* serve_internal.h -- what the files of `camlheap serve` share (serve.h):
 * the service's state (the table of workers and its lock), the log, and
 * each file's entry points.  Not installed; only serve*.c include it.
 *
 *   serve.c           the service: state, log, main loop, signals, reload
 *   serve_discover.c  which processes are the targets' (exec events, /proc,
 *                     PID files, matchers)
 *   serve_worker.c    the workers: start, messages, reaping, stop, budgets,
 *                     file retention
 *   serve_http.c      the HTTP endpoint (libmicrohttpd)
 *   serve_status.c    `camlheap status`, the endpoint's client
 *   serve_config.c    the configuration file and the worker protocol
 */
#ifndef CH_SERVE_INTERNAL_H
#define CH_SERVE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#include "cmd/serve.h"
#include "collect/probe_cost.h"

struct discover_bpf; /* discover.skel.h, included by serve.c only */
struct ring_buffer;  /* bpf/libbpf.h */
struct MHD_Daemon;   /* microhttpd.h */

/* W_MISSED: the process ended, or exec'd another program, before its worker could attach */
enum wstate { W_ATTACHING, W_RECORDING, W_EXITED, W_FAILED, W_MISSED, W_DETACHED };

struct worker {
	char *target;           /* the target's name */
	pid_t pid;              /* the target process */
	unsigned long long starttime; /* its start, clock ticks after boot (/proc/PID/stat 22) */
	char exe_key[96];       /* its executable: "dev:ino:mtime" (see exe_key) */
	pid_t wpid;             /* the worker, 0 once reaped */
	int fd;                 /* control socket, -1 once closed */
	int errfd;              /* the worker's stderr (a pipe), -1 once closed */
	char errbuf[4096];
	size_t errlen;
	enum wstate state;
	char dir[PATH_MAX];
	char version[32], executor[16];
	double lambda;
	double started, ended;  /* CLOCK_REALTIME seconds */
	bool reexec;            /* the process exec'd again while followed: look at it once the worker ends */
	bool detached;          /* stopped by a reload (no longer a process of its target) */
	double budget_sent;     /* -1: none sent */
	/* what the worker was started with (its command line): a reload that
	 * changes one restarts it (serve.c reload) */
	double rate_asked;
	bool malloc_asked;
	char executor_asked[16];
	unsigned depth_asked;
	char *census_on_asked;  /* census-on (NULL: none) */
	char *output_asked;
	double interval_sent;
	bool restart;           /* stopped by a reload to start again with the new settings */
	pid_t fork_parent;      /* followed as a fork child of that process (its target's), or 0 */
	/* figures from the last two "stats" messages */
	uint64_t samples, weighted, events, dropped, stops, bpf_ns, trap_ns, exec_ns, cpu_ns, live, rss_kib, heap_words;
	unsigned shift;
	double stats_at;
	double sample_rate, stop_rate, overhead_ratio;
	uint64_t files;
	char last_heap[PATH_MAX];
	char message[512];      /* the worker's last line on stderr */
	int status;             /* wait status once reaped */
	struct worker *next;
};

struct pending {
	uint64_t id;
	struct worker *w;
	bool done;
	int err;
	char msg[512];
	struct pending *next;
};

/* A fork child of a followed process, looked at FORK_SETTLE_S after its
 * fork: by then a fork+exec (a command the program runs) has exec'd, and
 * only a child that stays the program (a pre-forking server's worker) is
 * followed as itself.  Attaching at once would race the exec. */
#define FORK_SETTLE_S 0.1
/* What a fork keeps and an exec replaces: the executable and where the
 * kernel placed the program's text, stack, heap and arguments (/proc/PID/
 * stat fields 26, 28, 47, 48, proc(5)); a child equal to its parent in all
 * of them has exec'd nothing since its fork. */
struct mm_ident {
	unsigned long long dev, ino, startcode, startstack, start_brk, arg_start;
};

struct fork_wait {
	pid_t pid, parent;
	double due;            /* now_mono() */
	char *target;          /* the parent's target when the fork was seen (g_malloc'd) */
	struct mm_ident mm;    /* the parent's, then */
};

struct service {
	const char *config_path;
	struct serve_config cfg;
	struct discover_bpf *disc;
	struct ring_buffer *rb;
	struct worker *workers;   /* newest first */
	unsigned active;
	pthread_mutex_t lk;
	pthread_cond_t cv;
	struct pending *pending;
	uint64_t next_id;
	struct MHD_Daemon *http, *unix_http;
	int unix_fd;
	ino_t sock_ino;           /* the socket file this service created */
	char tmpdir[PATH_MAX];    /* snapshots handed to HTTP */
	bool journal;             /* stderr is the journal: sd-daemon priority prefixes */
	uint64_t watchdog_usec;
	double next_watchdog, next_pidfiles, next_retention;
	uint64_t execs_seen, started_total, failed_total, missed_total, skipped_total, limited_total;
	uint64_t gone_total;      /* missed before they were looked at (exe-only targets, on_exec_event) */
	bool over_limit;          /* a process was left for max-processes: scan /proc when a worker ends */
	double interval_override; /* serve --interval, or 0 */
	GHashTable *unsupported;  /* exe_key -> why (char *): executables not to try again until SIGHUP */
	GArray *forks;            /* struct fork_wait: fork children to look at once they settle */
	uint64_t forks_seen;      /* fork children of followed processes reported */
	GHashTable *triggers;     /* target name -> uint64_t[3]: censuses written at census-on's oom, rss,
				   * pressure (kept past the workers: an OOM kill ends its worker) */
	/* the main thread (discovery, workers' starts) runs at PROC_ATTACH_NICE
	 * and the workers start at it; they return to base_nice after their
	 * attach (record --base-nice) */
	bool nice_raised;
	int base_nice;
	struct trap_cost trap;    /* calibrated once for the workers (record --trap-cost) */
	int kbtf_fd;              /* the kernel types the workers' BPF object reads, cut once (sampler_kernel_btf,
				   * record --kernel-btf): -1 if refused (each worker then reads the whole BTF) */
	size_t nworkers_fds;      /* workers in the table (each holds up to 2 descriptors) */
	double start_unix;
	int stats_fd;             /* BPF run-time statistics kept on while this is open */
	bool stopping;
};

/* The one service of the process: defined in serve.c, set up and torn down
 * by serve_run.  Only the service thread changes the table, and it takes
 * S.lk for what HTTP threads read; libmicrohttpd's threads (serve_http.c)
 * touch S only under S.lk. */
extern struct service S;

/* census-on's triggers, in the order of S.triggers' counts. */
extern const char *const serve_trigger_kinds[3];

/* ---- serve.c -------------------------------------------------------- */

/* Now, in seconds: CLOCK_REALTIME (for people and files), CLOCK_MONOTONIC
 * (for intervals). */
double now_real(void);
double now_mono(void);

/* Log a line (printf format, no newline) at a syslog priority LOG_*. */
void slog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define LOG_ERR 3
#define LOG_WARNING 4
#define LOG_NOTICE 5
#define LOG_INFO 6

/* The target named `name` in S.cfg, or NULL. */
const struct serve_target *find_target(const char *name);

/* The worker attaching to or recording process `pid`, or NULL. */
struct worker *active_worker(pid_t pid);

/* ---- serve_discover.c ----------------------------------------------- */

/* The start time of `pid` in clock ticks after boot (/proc/PID/stat field
 * 22) into *st.  Returns 0 or -errno. */
int proc_starttime(pid_t pid, unsigned long long *st);

/* Whether process `pid` belongs to target t (every matcher it gives). */
bool target_matches(const struct serve_target *t, pid_t pid);

/* The parent of `pid` if pid is its fork child that has exec'd nothing
 * since (struct mm_ident equal), else 0. */
pid_t forked_from(pid_t pid);

/* Whether process `pid` is one of target t's: t's matchers agree, or it
 * is a fork child (no exec since) of one of t's processes (the target of
 * the parent's worker, else by these rules, up to 16 generations). */
bool target_has(const struct serve_target *t, pid_t pid);

/* The identity of pid's executable, "dev:ino:mtime", into out (len bytes).
 * Returns 0 or -errno. */
int exe_key(pid_t pid, char *out, size_t len);

/* Whether `pid` has exited (a zombie too) or is another process than the
 * one started at `starttime` (clock ticks after boot). */
bool process_gone(pid_t pid, unsigned long long starttime);

/* Look at process `pid`, which exec'd (`exec`) or was found: start a
 * worker if a target wants it (its parent's target for a fork child, see
 * target_has; else the first whose matchers agree).  An exec of a process
 * followed already marks its worker to look again once it ends. */
void consider(pid_t pid, bool exec);

/* consider() every process in /proc not followed yet. */
void scan_proc(void);

/* Start workers for the processes the targets' PID files name (called
 * every second). */
void poll_pidfiles(void);

/* The discovery ring buffer's callback (ring_buffer_sample_fn): one
 * struct ch_exec_event (camlheap.h) in data: an exec is looked at now, a
 * fork child queued in S.forks.  Returns 0. */
int on_exec_event(void *ctx, void *data, size_t size);

/* The fork children whose FORK_SETTLE_S has passed looked at (those not
 * gone and not followed already: an exec'd one was looked at at its
 * exec).  Returns the seconds until the next one is due, or -1 if none
 * waits. */
double settle_forks(void);

/* Tell the discovery program whether `pid` is followed (its forks are
 * then reported). */
void discovery_follow(pid_t pid, bool on);

/* ---- serve_worker.c ------------------------------------------------- */

/* A message to worker w (nothing once its socket is closed). */
#define send_msg(w, ...) ((w)->fd >= 0 ? (void)serve_sendf((w)->fd, __VA_ARGS__) : (void)0)

/* mkdir -p with `mode` for each directory created.  Returns 0 or -errno. */
int mkdir_p(const char *dir, mode_t mode);

/* The budget, samples per second, of a process of target t (NULL: none of
 * its own): 0 for none. */
double effective_budget(const struct serve_target *t);

/* Send every recording worker its budget where that has changed. */
void rebalance_budgets(void);

/* Start a worker for process `pid` of target t, unless it is followed
 * already, its executable was found unprofilable, or max-processes are
 * followed; failures are logged.  fork_parent: the process pid is
 * followed as the fork child of (its target's), or 0. */
void start_worker(const struct serve_target *t, pid_t pid, pid_t fork_parent);

/* Read what worker w has sent on its socket (w->fd) or written to its
 * stderr (w->errfd), without blocking; each closes its descriptor at EOF or
 * an error. */
void on_worker_msg(struct worker *w);
void on_worker_err(struct worker *w);

/* Reap the workers that ended (after SIGCHLD), settle their pending
 * requests, and look at the processes left waiting for them. */
void reap_workers(void);

/* Trim the output directory to keep and keep-bytes. */
void retention(void);

/* Stop every worker and wait for them all (30 s, then SIGKILL); sigfd is
 * the service's signalfd (its SIGCHLDs). */
void stop_workers(int sigfd);

/* ---- serve_http.c --------------------------------------------------- */

/* Start the HTTP endpoints S.cfg.listen and S.cfg.socket.  Returns 0, or
 * -errno with a message in err (len bytes); stop_http() then cleans up. */
int start_http(char *err, size_t len);
void stop_http(void);

#endif
