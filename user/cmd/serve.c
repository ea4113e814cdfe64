/* serve.c -- `camlheap serve` and `camlheap status` (serve.h).  One thread
 * runs the service (signals, discovery, workers, retention, budgets,
 * systemd); libmicrohttpd's threads answer HTTP, each request under the
 * table lock, waiting on a condition variable for its worker's answer. */
#define _GNU_SOURCE
#include "cmd/serve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <curl/curl.h>
#include <glib.h>
#include <json-glib/json-glib.h>
#include <microhttpd.h>
#include <systemd/sd-daemon.h>

#include "camlheap.h"
#include "discover.skel.h"
#include "target/proc.h"
#include "output/jsonw.h"

#define MAX_EXITED 256 /* exited processes kept in /targets */

/* W_MISSED: the process ended, or exec'd another program, before its worker could attach */
enum wstate { W_ATTACHING, W_RECORDING, W_EXITED, W_FAILED, W_MISSED, W_DETACHED };
static const char *const wstate_names[] = { "attaching", "recording", "exited", "failed", "missed", "detached" };

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
	/* figures from the last two "stats" messages */
	uint64_t samples, weighted, events, dropped, stops, bpf_ns, exec_ns, cpu_ns, live, rss_kib, heap_words;
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
	bool over_limit;          /* a process was left for max-processes: scan /proc when a worker ends */
	double interval_override; /* serve --interval, or 0 */
	GHashTable *unsupported;  /* exe_key -> why (char *): executables not to try again until SIGHUP */
	size_t nworkers_fds;      /* workers in the table (each holds up to 2 descriptors) */
	double start_unix;
	int stats_fd;             /* BPF run-time statistics kept on while this is open */
	bool stopping;
};

static struct service S;

static double now_real(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Log a line: to the journal with its priority (sd-daemon.h prefixes),
 * else to stderr prefixed "camlheap serve: ". */
static void slog(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void slog(int prio, const char *fmt, ...)
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
#define LOG_ERR 3
#define LOG_WARNING 4
#define LOG_NOTICE 5
#define LOG_INFO 6

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

/* ---- processes ---------------------------------------------------- */

static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return (int)n;
}

static int proc_starttime(pid_t pid, unsigned long long *st)
{
	return proc_stat(pid, NULL, st);
}

/* The cgroup v2 path of PID ("/system.slice/foo.service"), or -errno. */
static int proc_cgroup(pid_t pid, char *out, size_t len)
{
	char path[64], buf[8192], *line, *save = NULL;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
	if (read_file(path, buf, sizeof(buf)) < 0)
		return -ESRCH;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (!strncmp(line, "0::", 3)) {
			snprintf(out, len, "%s", line + 3);
			return 0;
		}
	return -ENOENT;
}

static bool path_under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	while (n > 1 && prefix[n - 1] == '/')
		n--;
	return !strncmp(path, prefix, n) && (path[n] == 0 || path[n] == '/' || n == 1);
}

static bool cgroup_has_unit(const char *cg, const char *unit)
{
	size_t n = strlen(unit);

	for (const char *p = strstr(cg, unit); p; p = strstr(p + 1, unit))
		if (p > cg && p[-1] == '/' && (p[n] == 0 || p[n] == '/'))
			return true;
	return false;
}

/* The PID in a PID file, or -1.  Only a regular file is read, opened
 * without blocking (a FIFO there must not hang the service). */
static long read_pidfile(const char *path)
{
	char buf[64], *end;
	struct stat st;
	ssize_t n;
	long v;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	errno = 0;
	v = strtol(buf, &end, 10);
	while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r')
		end++;
	return !errno && end != buf && !*end && v > 0 && v <= INT_MAX ? v : -1;
}

/* Does process `pid` belong to target t?  Every matcher given must agree. */
static bool target_matches(const struct serve_target *t, pid_t pid)
{
	char buf[PATH_MAX];

	if (pid == getpid())
		return false;
	if (t->exe) {
		char path[64];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/exe", pid);
		n = readlink(path, buf, sizeof(buf) - 1);
		if (n <= 0)
			return false;
		buf[n] = 0;
		/* a binary replaced since (package upgrade) still matches */
		if (n > 10 && !strcmp(buf + n - 10, " (deleted)"))
			buf[n - 10] = 0;
		if (strcmp(buf, t->exe))
			return false;
	}
	if (t->unit || t->cgroup) {
		if (proc_cgroup(pid, buf, sizeof(buf)) < 0)
			return false;
		if (t->unit && !cgroup_has_unit(buf, t->unit))
			return false;
		if (t->cgroup && !path_under(buf, t->cgroup))
			return false;
	}
	if (t->pidfile && read_pidfile(t->pidfile) != pid)
		return false;
	return true;
}

/* The identity of PID's executable ("dev:ino:mtime"), or -errno. */
static int exe_key(pid_t pid, char *out, size_t len)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	if (stat(path, &st) < 0)
		return -errno;
	snprintf(out, len, "%llu:%llu:%lld.%09ld", (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
		 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
	return 0;
}

static const struct serve_target *find_target(const char *name)
{
	for (size_t i = 0; i < S.cfg.ntargets; i++)
		if (!strcmp(S.cfg.targets[i].name, name))
			return &S.cfg.targets[i];
	return NULL;
}

static struct worker *active_worker(pid_t pid)
{
	for (struct worker *w = S.workers; w; w = w->next)
		if (w->pid == pid && (w->state == W_ATTACHING || w->state == W_RECORDING))
			return w;
	return NULL;
}

static int mkdir_p(const char *dir, mode_t mode)
{
	char tmp[PATH_MAX];

	snprintf(tmp, sizeof(tmp), "%s", dir);
	for (char *p = tmp + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(tmp, mode) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	if (mkdir(tmp, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* The budget a process gets: its target's, and its share of the host's. */
static double effective_budget(const struct serve_target *t)
{
	double b = t && t->budget > 0 ? t->budget : 0;

	if (S.cfg.host_budget > 0) {
		double share = S.cfg.host_budget / (S.active ? S.active : 1);

		b = b > 0 && b < share ? b : share;
	}
	return b;
}

/* A message to worker w (nothing once its socket is closed). */
#define send_msg(w, ...) ((w)->fd >= 0 ? (void)serve_sendf((w)->fd, __VA_ARGS__) : (void)0)

static void rebalance_budgets(void)
{
	for (struct worker *w = S.workers; w; w = w->next) {
		double b;

		if (w->state != W_RECORDING)
			continue;
		b = effective_budget(find_target(w->target));
		if (b != w->budget_sent) {
			send_msg(w, "budget %.17g", b);
			w->budget_sent = b;
		}
	}
}

/* Start a worker for process pid of target t. */
static void start_worker(const struct serve_target *t, pid_t pid)
{
	char spid[16], srate[32], sint[32], sbudget[32], stamp[32], dir[PATH_MAX];
	unsigned long long st = 0;
	int sv[2] = { -1, -1 }, ep[2] = { -1, -1 };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	struct worker *w;
	const char *argv[24];
	int argc = 0, ret;
	time_t now = time(NULL);
	struct tm tm;
	double b;

	char key[96];

	if (active_worker(pid) || proc_starttime(pid, &st) < 0 || exe_key(pid, key, sizeof(key)) < 0)
		return;
	if (g_hash_table_contains(S.unsupported, key)) {
		/* its executable was found unprofilable: said once already */
		S.skipped_total++;
		return;
	}
	if (S.active >= S.cfg.max_processes) {
		if (!S.over_limit)
			slog(LOG_WARNING, "target %s: PID %d not followed yet: %u processes are followed already "
					  "(max-processes); looked at again when one ends", t->name, pid, S.active);
		S.over_limit = true;
		S.limited_total++;
		return;
	}
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(dir, sizeof(dir), "%s/%s/%d-%s", S.cfg.output, t->name, pid, stamp);
	if ((ret = mkdir_p(dir, 0750)) < 0) {
		slog(LOG_ERR, "target %s: PID %d not followed: cannot create %s: %s", t->name, pid, dir, strerror(-ret));
		return;
	}
	/* the worker's stderr never blocks it (a stalled worker would stall a
	 * target stopped by its ptrace executor): lines beyond a full pipe are lost */
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(ep, O_CLOEXEC | O_NONBLOCK) < 0) {
		slog(LOG_ERR, "target %s: PID %d not followed: %s", t->name, pid, strerror(errno));
		if (sv[0] >= 0) {
			close(sv[0]);
			close(sv[1]);
		}
		return;
	}
	b = effective_budget(t);
	snprintf(spid, sizeof(spid), "%d", pid);
	snprintf(srate, sizeof(srate), "%.17g", t->rate);
	snprintf(sint, sizeof(sint), "%.17g", S.cfg.interval_s);
	snprintf(sbudget, sizeof(sbudget), "%.17g", b);
	argv[argc++] = "camlheap";
	argv[argc++] = "record";
	argv[argc++] = "-p";
	argv[argc++] = spid;
	argv[argc++] = "--rate";
	argv[argc++] = srate;
	argv[argc++] = "--serve-fd";
	argv[argc++] = "3";
	argv[argc++] = "--interval";
	argv[argc++] = sint;
	argv[argc++] = "--outdir";
	argv[argc++] = dir;
	if (b > 0) {
		argv[argc++] = "--budget";
		argv[argc++] = sbudget;
	}
	if (t->malloc)
		argv[argc++] = "--malloc";
	if (t->executor) {
		argv[argc++] = "--executor";
		argv[argc++] = t->executor;
	}
	argv[argc] = NULL;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
	posix_spawn_file_actions_adddup2(&fa, ep[1], 2);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawnattr_init(&at);
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	w = calloc(1, sizeof(*w));
	if (!w) {
		close(sv[0]);
		close(sv[1]);
		close(ep[0]);
		close(ep[1]);
		return;
	}
	ret = posix_spawn(&w->wpid, "/proc/self/exe", &fa, &at, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(sv[1]);
	close(ep[1]);
	if (ret) {
		slog(LOG_ERR, "target %s: PID %d not followed: cannot start a worker: %s", t->name, pid, strerror(ret));
		close(sv[0]);
		close(ep[0]);
		free(w);
		return;
	}
	w->target = g_strdup(t->name);
	w->pid = pid;
	w->starttime = st;
	snprintf(w->exe_key, sizeof(w->exe_key), "%s", key);
	w->fd = sv[0];
	w->errfd = ep[0];
	fcntl(w->errfd, F_SETFL, O_NONBLOCK);
	w->state = W_ATTACHING;
	w->lambda = t->rate;
	w->budget_sent = b;
	w->started = now_real();
	snprintf(w->dir, sizeof(w->dir), "%s", dir);
	pthread_mutex_lock(&S.lk);
	w->next = S.workers;
	S.workers = w;
	S.active++;
	S.started_total++;
	pthread_mutex_unlock(&S.lk);
	slog(LOG_INFO, "target %s: following PID %d (worker %d, profiles in %s)", t->name, pid, w->wpid, dir);
	rebalance_budgets();
}

/* A process to look at (exec'd, found in /proc, named by a PID file). */
static void consider(pid_t pid)
{
	struct worker *w = active_worker(pid);

	if (w) {
		/* it exec'd again: its worker stops by itself (the program is
		 * another); look at the new one then */
		w->reexec = true;
		return;
	}
	for (size_t i = 0; i < S.cfg.ntargets; i++)
		if (target_matches(&S.cfg.targets[i], pid)) {
			start_worker(&S.cfg.targets[i], pid);
			return;
		}
}

static void scan_proc(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);

		if (*end || pid <= 0)
			continue;
		consider((pid_t)pid);
	}
	closedir(d);
}

static void poll_pidfiles(void)
{
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		const struct serve_target *t = &S.cfg.targets[i];
		long pid;

		if (!t->pidfile)
			continue;
		pid = read_pidfile(t->pidfile);
		if (pid > 0 && !active_worker((pid_t)pid)) {
			/* not again for a process already seen (and ended or failed) */
			unsigned long long st;
			bool seen = false;

			if (proc_starttime((pid_t)pid, &st) < 0)
				continue;
			for (struct worker *w = S.workers; w && !seen; w = w->next)
				seen = w->pid == pid && w->starttime == st && !w->reexec;
			if (!seen && target_matches(t, (pid_t)pid))
				start_worker(t, (pid_t)pid);
		}
	}
}

/* The process has exited (a zombie counts: its parent has not reaped it
 * yet), or its PID is another process's now. */
static bool process_gone(pid_t pid, unsigned long long starttime)
{
	unsigned long long st;
	char state;

	return proc_stat(pid, &state, &st) < 0 || st != starttime || state == 'Z' || state == 'X';
}

static int on_exec_event(void *ctx, void *data, size_t size)
{
	const struct ch_exec_event *e = data;

	if (size >= sizeof(*e)) {
		S.execs_seen++;
		consider((pid_t)e->tgid);
	}
	return 0;
}

/* ---- worker messages ------------------------------------------------ */

static struct pending *find_pending(uint64_t id)
{
	for (struct pending *p = S.pending; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static uint64_t kv(const char *msg, const char *key)
{
	char pat[40];
	const char *p;

	snprintf(pat, sizeof(pat), " %s=", key);
	p = strstr(msg, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

static void on_stats(struct worker *w, const char *msg)
{
	double t = now_mono(), dt = w->stats_at > 0 ? t - w->stats_at : 0;
	uint64_t samples = kv(msg, "samples"), stops = kv(msg, "stops");
	uint64_t over = kv(msg, "bpf_ns") + kv(msg, "exec_ns");

	if (dt > 0.2) {
		w->sample_rate = (double)(samples - w->samples) / dt;
		w->stop_rate = (double)(stops - w->stops) / dt;
		w->overhead_ratio = (double)(over - (w->bpf_ns + w->exec_ns)) * 1e-9 / dt;
	}
	w->samples = samples;
	w->stops = stops;
	w->weighted = kv(msg, "weighted");
	w->events = kv(msg, "events");
	w->dropped = kv(msg, "dropped");
	w->shift = (unsigned)kv(msg, "shift");
	w->bpf_ns = kv(msg, "bpf_ns");
	w->exec_ns = kv(msg, "exec_ns");
	w->cpu_ns = kv(msg, "cpu_ns");
	w->live = kv(msg, "live");
	w->rss_kib = kv(msg, "rss_kib");
	w->heap_words = kv(msg, "heap_words");
	w->stats_at = t;
}

static void retention(void);

static void on_worker_msg(struct worker *w)
{
	char buf[8192];
	ssize_t n;

	while ((n = recv(w->fd, buf, sizeof(buf) - 1, MSG_DONTWAIT)) > 0) {
		buf[n] = 0;
		pthread_mutex_lock(&S.lk);
		if (!strncmp(buf, "stats ", 6)) {
			on_stats(w, buf + 5);
		} else if (!strncmp(buf, "attached ", 9)) {
			char ver[32] = "", ex[16] = "";
			double lam = w->lambda;

			sscanf(buf + 9, "%31s %15s %lg", ver, ex, &lam);
			snprintf(w->version, sizeof(w->version), "%s", ver);
			snprintf(w->executor, sizeof(w->executor), "%s", ex);
			w->lambda = lam;
			w->state = W_RECORDING;
		} else if (!strncmp(buf, "wrote ", 6)) {
			w->files++;
			if (strstr(buf + 6, "/heap-"))
				snprintf(w->last_heap, sizeof(w->last_heap), "%s", buf + 6);
			S.next_retention = 0; /* now */
		} else if (!strncmp(buf, "done ", 5)) {
			char *end;
			uint64_t id = strtoull(buf + 5, &end, 10);
			struct pending *p = find_pending(id);

			if (p) {
				p->err = (int)strtol(end, &end, 10);
				snprintf(p->msg, sizeof(p->msg), "%s", *end == ' ' ? end + 1 : "");
				p->done = true;
				pthread_cond_broadcast(&S.cv);
			}
		}
		pthread_mutex_unlock(&S.lk);
	}
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
		pthread_mutex_lock(&S.lk); /* HTTP threads send on it */
		close(w->fd);
		w->fd = -1;
		pthread_mutex_unlock(&S.lk);
	}
}

/* The worker's stderr: to our log, prefixed; its last line kept. */
static void on_worker_err(struct worker *w)
{
	ssize_t n;

	for (;;) {
		n = read(w->errfd, w->errbuf + w->errlen, sizeof(w->errbuf) - 1 - w->errlen);
		if (n <= 0)
			break;
		w->errlen += (size_t)n;
		w->errbuf[w->errlen] = 0;
		char *nl;

		while ((nl = strchr(w->errbuf, '\n')) || w->errlen == sizeof(w->errbuf) - 1) {
			char *line = w->errbuf;
			size_t used;

			if (nl)
				*nl = 0;
			used = nl ? (size_t)(nl - w->errbuf) + 1 : w->errlen;
			if (!strncmp(line, "camlheap: ", 10))
				line += 10;
			if (*line) {
				slog(strstr(line, "cannot") || strstr(line, "error") ? LOG_WARNING : LOG_INFO,
				     "target %s: PID %d: %s", w->target, w->pid, line);
				pthread_mutex_lock(&S.lk);
				snprintf(w->message, sizeof(w->message), "%s", line);
				pthread_mutex_unlock(&S.lk);
			}
			memmove(w->errbuf, w->errbuf + used, w->errlen - used);
			w->errlen -= used;
			w->errbuf[w->errlen] = 0;
		}
	}
	if (n == 0 || (n < 0 && errno != EAGAIN)) {
		close(w->errfd);
		w->errfd = -1;
	}
}

/* Forget the oldest ended workers beyond MAX_EXITED. */
static void prune_workers(void)
{
	unsigned ended = 0;

	for (struct worker **pp = &S.workers; *pp;) {
		struct worker *w = *pp;

		if (w->state >= W_EXITED && w->wpid == 0 && ++ended > MAX_EXITED) {
			bool used = false;

			for (struct pending *p = S.pending; p; p = p->next)
				used |= p->w == w;
			if (!used) {
				*pp = w->next;
				g_free(w->target);
				free(w);
				continue;
			}
		}
		pp = &w->next;
	}
}

static void reap_workers(void)
{
	int status;
	pid_t wp;

	while ((wp = waitpid(-1, &status, WNOHANG)) > 0) {
		for (struct worker *w = S.workers; w; w = w->next) {
			if (w->wpid != wp)
				continue;
			if (w->fd >= 0)
				on_worker_msg(w);
			if (w->errfd >= 0)
				on_worker_err(w);
			pthread_mutex_lock(&S.lk);
			w->wpid = 0;
			w->status = status;
			w->ended = now_real();
			if (w->state == W_ATTACHING || w->state == W_RECORDING)
				S.active--;
			if (WIFSIGNALED(status))
				snprintf(w->message, sizeof(w->message), "its worker was killed by SIG%s",
					 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
			if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && w->version[0]) {
				w->state = w->detached ? W_DETACHED : W_EXITED;
			} else if (!w->version[0] && ((WIFEXITED(status) && WEXITSTATUS(status) == 3) ||
						      process_gone(w->pid, w->starttime) || w->reexec)) {
				w->state = W_MISSED;
				S.missed_total++;
			} else {
				w->state = W_FAILED;
				S.failed_total++;
				if (WIFEXITED(status) && WEXITSTATUS(status) == 4 &&
				    !g_hash_table_contains(S.unsupported, w->exe_key)) {
					g_hash_table_insert(S.unsupported, g_strdup(w->exe_key), g_strdup(w->message));
					slog(LOG_WARNING,
					     "target %s: its other processes running that executable are not tried "
					     "until a reload (SIGHUP): %s", w->target, w->message);
				}
			}
			for (struct pending *p = S.pending; p; p = p->next)
				if (p->w == w && !p->done) {
					p->done = true;
					p->err = ESRCH;
					snprintf(p->msg, sizeof(p->msg), "the process's worker ended: %s", w->message);
				}
			if (w->fd >= 0) {
				close(w->fd);
				w->fd = -1;
			}
			pthread_cond_broadcast(&S.cv);
			pthread_mutex_unlock(&S.lk);
			if (w->errfd >= 0) {
				close(w->errfd);
				w->errfd = -1;
			}
			slog(w->state == W_FAILED ? LOG_WARNING : LOG_INFO, "target %s: PID %d no longer followed (%s%s%s)",
			     w->target, w->pid,
			     w->state == W_FAILED ? "failed" : w->state == W_MISSED ? "it ended before the attach" : "done",
			     w->message[0] ? ": " : "", w->message);
			if (w->reexec && !S.stopping) {
				w->reexec = false;
				consider(w->pid);
			}
			break;
		}
	}
	pthread_mutex_lock(&S.lk);
	prune_workers();
	pthread_mutex_unlock(&S.lk);
	if (S.over_limit && S.active < S.cfg.max_processes && !S.stopping) {
		S.over_limit = false;
		scan_proc();
	}
	rebalance_budgets();
}

/* ---- retention ------------------------------------------------------ */

struct ofile {
	char *path;
	time_t mtime;
	off_t size;
};

static int ofile_cmp_mtime(const void *a, const void *b)
{
	const struct ofile *x = a, *y = b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime ? 1 : strcmp(x->path, y->path);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool dir_is_active(const char *dir)
{
	for (struct worker *w = S.workers; w; w = w->next)
		if ((w->state == W_ATTACHING || w->state == W_RECORDING) && !strcmp(w->dir, dir))
			return true;
	return false;
}

/* In one process directory: keep the newest `keep` files of each type
 * (heap-*, census-*; names sort by time). */
static void keep_newest(const char *dir)
{
	static const char *const prefixes[] = { "heap-", "census-" };
	DIR *d = opendir(dir);
	struct dirent *e;
	GPtrArray *names[2] = { g_ptr_array_new_with_free_func(g_free), g_ptr_array_new_with_free_func(g_free) };

	if (!d)
		goto out;
	while ((e = readdir(d)))
		for (int i = 0; i < 2; i++)
			if (!strncmp(e->d_name, prefixes[i], strlen(prefixes[i])))
				g_ptr_array_add(names[i], g_strdup(e->d_name));
	closedir(d);
	for (int i = 0; i < 2; i++) {
		qsort(names[i]->pdata, names[i]->len, sizeof(char *), str_cmp);
		for (guint j = 0; j + S.cfg.keep < names[i]->len; j++) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/%s", dir, (char *)names[i]->pdata[j]);
			unlink(path);
		}
	}
out:
	g_ptr_array_free(names[0], TRUE);
	g_ptr_array_free(names[1], TRUE);
}

/* Every process directory trimmed to `keep`, then the whole output
 * directory to `keep-bytes`, oldest files first; directories of ended
 * processes left empty are removed. */
static void retention(void)
{
	GArray *files = g_array_new(FALSE, FALSE, sizeof(struct ofile));
	GPtrArray *dirs = g_ptr_array_new_with_free_func(g_free);
	uint64_t total = 0;

	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		char tdir[PATH_MAX];
		DIR *d;
		struct dirent *e;

		snprintf(tdir, sizeof(tdir), "%s/%s", S.cfg.output, S.cfg.targets[i].name);
		d = opendir(tdir);
		if (!d)
			continue;
		while ((e = readdir(d)))
			if (e->d_name[0] != '.')
				g_ptr_array_add(dirs, g_strdup_printf("%s/%s", tdir, e->d_name));
		closedir(d);
	}
	for (guint i = 0; i < dirs->len; i++) {
		const char *dir = dirs->pdata[i];
		DIR *d;
		struct dirent *e;

		keep_newest(dir);
		d = opendir(dir);
		if (!d)
			continue;
		while ((e = readdir(d))) {
			struct ofile f;
			struct stat st;
			char *path;

			if (e->d_name[0] == '.')
				continue; /* a file being written (outfile.h temporary) */
			path = g_strdup_printf("%s/%s", dir, e->d_name);
			if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) {
				g_free(path);
				continue;
			}
			f.path = path;
			f.mtime = st.st_mtime;
			f.size = st.st_size;
			total += (uint64_t)st.st_size;
			g_array_append_val(files, f);
		}
		closedir(d);
	}
	if (total > S.cfg.keep_bytes) {
		g_array_sort(files, ofile_cmp_mtime);
		for (guint i = 0; i < files->len && total > S.cfg.keep_bytes; i++) {
			struct ofile *f = &g_array_index(files, struct ofile, i);

			if (unlink(f->path) == 0)
				total -= (uint64_t)f->size;
		}
	}
	for (guint i = 0; i < dirs->len; i++)
		if (!dir_is_active(dirs->pdata[i]))
			rmdir(dirs->pdata[i]); /* only if empty */
	for (guint i = 0; i < files->len; i++)
		g_free(g_array_index(files, struct ofile, i).path);
	g_array_free(files, TRUE);
	g_ptr_array_free(dirs, TRUE);
}

/* ---- HTTP ----------------------------------------------------------- */

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *type, const char *fmt, ...)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		g_free(s);
		return MHD_NO;
	}
	/* g_strdup_vprintf's memory is malloc'd: MHD frees it with free() */
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_string(struct MHD_Connection *c, unsigned code, const char *type, GString *s)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(s->len, s->str, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	g_string_free(s, TRUE);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

/* The process a request names: ?pid=N (any process of a configured
 * target, followed now or earlier), or ?target=NAME (its newest process
 * followed now; else its newest).  Under S.lk.  NULL with a message. */
static struct worker *request_worker(struct MHD_Connection *c, char *why, size_t len, unsigned *code)
{
	const char *spid = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pid");
	const char *tname = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "target");
	struct worker *best = NULL;
	unsigned nactive = 0;

	*code = MHD_HTTP_NOT_FOUND;
	if (spid) {
		char *end;
		long pid;

		errno = 0;
		pid = strtol(spid, &end, 10);
		if (errno || end == spid || *end || pid <= 0 || pid > INT_MAX || !g_ascii_isdigit(spid[0])) {
			*code = MHD_HTTP_BAD_REQUEST;
			snprintf(why, len, "pid=%s is not a process id\n", spid);
			return NULL;
		}
		for (struct worker *w = S.workers; w; w = w->next)
			if (w->pid == pid && (!tname || !strcmp(w->target, tname)) && (!best || w->state == W_RECORDING))
				best = w;
		if (!best)
			snprintf(why, len, "PID %ld is not a process of %s%s (GET /targets lists them)\n", pid,
				 tname ? "target " : "a configured target", tname ? tname : "");
		return best;
	}
	for (struct worker *w = S.workers; w; w = w->next) {
		if (tname && strcmp(w->target, tname))
			continue;
		if (w->state == W_RECORDING) {
			nactive++;
			if (!best || best->state != W_RECORDING)
				best = w;
		} else if (!best) {
			best = w;
		}
	}
	if (!tname && nactive != 1) {
		*code = MHD_HTTP_BAD_REQUEST;
		snprintf(why, len,
			 "%u processes are followed: name one with ?pid=N or ?target=NAME (GET /targets lists them)\n",
			 nactive);
		return NULL;
	}
	if (!best)
		snprintf(why, len, "no process of target %s has been followed (GET /targets lists them)\n", tname);
	return best;
}

/* Ask worker w for a file (under S.lk); wait up to `timeout` s.  Returns
 * an open descriptor of the file (already unlinked), or -errno with why. */
static int ask_worker(struct worker *w, const char *verb, const char *arg, double timeout, char *why, size_t len)
{
	struct pending p = { .id = ++S.next_id, .w = w };
	char path[PATH_MAX];
	struct timespec dl;
	int fd;

	snprintf(path, sizeof(path), "%s/%llu-%d", S.tmpdir, (unsigned long long)p.id, w->pid);
	p.next = S.pending;
	S.pending = &p;
	send_msg(w, "%s %llu %s %s", verb, (unsigned long long)p.id, arg, path);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)timeout;
	while (!p.done)
		if (pthread_cond_timedwait(&S.cv, &S.lk, &dl) == ETIMEDOUT)
			break;
	for (struct pending **pp = &S.pending; *pp; pp = &(*pp)->next)
		if (*pp == &p) {
			*pp = p.next;
			break;
		}
	if (!p.done) {
		snprintf(why, len, "PID %d's worker did not answer within %.0f s\n", w->pid, timeout);
		unlink(path);
		return -ETIMEDOUT;
	}
	if (p.err) {
		snprintf(why, len, "PID %d: %s\n", w->pid, p.msg);
		unlink(path);
		return -p.err;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	unlink(path);
	if (fd < 0) {
		snprintf(why, len, "PID %d's file vanished: %s\n", w->pid, strerror(errno));
		return -errno;
	}
	return fd;
}

static enum MHD_Result reply_fd(struct MHD_Connection *c, int fd, const char *type, const char *filename)
{
	struct stat st;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char disp[256];

	if (fstat(fd, &st) < 0) {
		close(fd);
		return MHD_NO;
	}
	r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r) {
		close(fd);
		return MHD_NO;
	}
	snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", filename);
	MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Content-Disposition", disp);
	ret = MHD_queue_response(c, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	return ret;
}

/* /debug/pprof/heap, /debug/pprof/allocs: the profile of a process now
 * (Go's net/http/pprof semantics: every sample type, the default one
 * inuse_space for heap and alloc_space for allocs, since the process was
 * first followed); an ended process's last profile. */
static enum MHD_Result serve_pprof(struct MHD_Connection *c, const char *what)
{
	const char *secs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	char why[1024], name[128];
	unsigned code;
	struct worker *w;
	int fd;

	if (secs)
		return reply_text(c, MHD_HTTP_BAD_REQUEST, "text/plain",
				  "seconds=%s: delta profiles are not served; the profile covers the whole time the process "
				  "has been followed (fetch twice and use pprof -diff_base)\n", secs);
	pthread_mutex_lock(&S.lk);
	w = request_worker(c, why, sizeof(why), &code);
	if (!w) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, code, "text/plain", "%s", why);
	}
	snprintf(name, sizeof(name), "%s-%d-%s.pb.gz", w->target, w->pid, what);
	if (w->state == W_ATTACHING) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
				  "PID %d is being attached; try again in a second\n", w->pid);
	}
	if (w->state != W_RECORDING) {
		/* ended: its last heap profile, if one is left */
		fd = w->last_heap[0] ? open(w->last_heap, O_RDONLY | O_CLOEXEC) : -1;
		snprintf(why, sizeof(why), "PID %d is no longer followed (%s) and no profile of it is left%s%s\n", w->pid,
			 wstate_names[w->state], w->message[0] ? ": " : "", w->message);
		pthread_mutex_unlock(&S.lk);
		if (fd < 0)
			return reply_text(c, MHD_HTTP_GONE, "text/plain", "%s", why);
		return reply_fd(c, fd, "application/octet-stream", name);
	}
	fd = ask_worker(w, "snap", what, 60, why, sizeof(why));
	pthread_mutex_unlock(&S.lk);
	if (fd < 0)
		return reply_text(c, fd == -ETIMEDOUT ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "text/plain", "%s", why);
	return reply_fd(c, fd, "application/octet-stream", name);
}

/* /debug/memtrace?pid=N&seconds=S: a memtrace recording of the next S seconds. */
static enum MHD_Result serve_memtrace(struct MHD_Connection *c)
{
	const char *secs = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	char why[1024], name[128], arg[32];
	double s = secs ? strtod(secs, NULL) : 10;
	unsigned code;
	struct worker *w;
	int fd;

	if (!(s > 0 && s <= 3600))
		return reply_text(c, MHD_HTTP_BAD_REQUEST, "text/plain", "seconds=%s: give 0 < seconds <= 3600\n", secs);
	pthread_mutex_lock(&S.lk);
	w = request_worker(c, why, sizeof(why), &code);
	if (w && w->state != W_RECORDING) {
		snprintf(why, sizeof(why), "PID %d is no longer followed (%s)\n", w->pid, wstate_names[w->state]);
		code = MHD_HTTP_GONE;
		w = NULL;
	}
	if (!w) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, code, "text/plain", "%s", why);
	}
	snprintf(name, sizeof(name), "%s-%d.ctf", w->target, w->pid);
	snprintf(arg, sizeof(arg), "%.17g", s);
	fd = ask_worker(w, "trace", arg, s + 60, why, sizeof(why));
	pthread_mutex_unlock(&S.lk);
	if (fd < 0)
		return reply_text(c, fd == -ETIMEDOUT ? MHD_HTTP_GATEWAY_TIMEOUT
				     : fd == -EBUSY   ? MHD_HTTP_CONFLICT
						      : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "text/plain", "%s", why);
	return reply_fd(c, fd, "application/octet-stream", name);
}

/* /targets (under S.lk) */
static GString *targets_json(void)
{
	JsonBuilder *b = json_builder_new();
	JsonGenerator *g = json_generator_new();
	JsonNode *root;
	char *text;
	GString *s;

	json_builder_begin_object(b);
	json_builder_set_member_name(b, "service");
	json_builder_begin_object(b);
	json_member_int(b, "pid", getpid());
	json_member_str(b, "config", S.config_path);
	json_member_double(b, "started_unix", S.start_unix);
	json_member_str(b, "output", S.cfg.output);
	json_member_double(b, "interval_s", S.cfg.interval_s);
	json_member_double(b, "host_budget", S.cfg.host_budget);
	json_member_int(b, "processes_followed", S.active);
	json_member_int(b, "execs_seen", (int64_t)S.execs_seen);
	json_builder_end_object(b);
	json_builder_set_member_name(b, "targets");
	json_builder_begin_array(b);
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		const struct serve_target *t = &S.cfg.targets[i];

		json_builder_begin_object(b);
		json_member_str(b, "name", t->name);
		json_member_str(b, "exe", t->exe);
		json_member_str(b, "unit", t->unit);
		json_member_str(b, "cgroup", t->cgroup);
		json_member_str(b, "pidfile", t->pidfile);
		json_member_double(b, "rate", t->rate);
		json_member_double(b, "budget", t->budget);
		json_member_double(b, "effective_budget", effective_budget(t));
		json_builder_set_member_name(b, "processes");
		json_builder_begin_array(b);
		for (struct worker *w = S.workers; w; w = w->next) {
			if (strcmp(w->target, t->name))
				continue;
			json_builder_begin_object(b);
			json_member_int(b, "pid", w->pid);
			json_member_str(b, "state", wstate_names[w->state]);
			json_member_str(b, "ocaml_version", w->version[0] ? w->version : NULL);
			json_member_str(b, "executor", w->executor[0] ? w->executor : NULL);
			json_member_double(b, "followed_since_unix", w->started);
			if (w->ended > 0)
				json_member_double(b, "ended_unix", w->ended);
			json_member_double(b, "rate", w->lambda);
			json_member_int(b, "rate_shift", w->shift);
			json_member_double(b, "lambda_in_force", ldexp(w->lambda, -(int)w->shift));
			json_member_int(b, "samples", (int64_t)w->samples);
			json_member_double(b, "samples_per_second", w->sample_rate);
			json_member_int(b, "dropped_events", (int64_t)w->dropped);
			json_member_int(b, "executor_stops", (int64_t)w->stops);
			json_member_double(b, "executor_stops_per_second", w->stop_rate);
			json_member_double(b, "overhead_ratio", w->overhead_ratio);
			json_member_double(b, "worker_cpu_s", (double)w->cpu_ns * 1e-9);
			json_member_double(b, "live_bytes_estimate", w->lambda > 0 ? (double)w->live / w->lambda * 8.0 : 0);
			json_member_int(b, "resident_bytes", (int64_t)w->rss_kib * 1024);
			json_member_int(b, "files_written", (int64_t)w->files);
			json_member_str(b, "directory", w->dir);
			json_member_str(b, "last_heap_profile", w->last_heap[0] ? w->last_heap : NULL);
			json_member_str(b, "message", w->message[0] ? w->message : NULL);
			json_builder_end_object(b);
		}
		json_builder_end_array(b);
		json_builder_end_object(b);
	}
	json_builder_end_array(b);
	json_builder_end_object(b);
	root = json_builder_get_root(b);
	json_generator_set_root(g, root);
	json_generator_set_pretty(g, TRUE);
	text = json_generator_to_data(g, NULL);
	s = g_string_new(text);
	g_string_append_c(s, '\n');
	g_free(text);
	json_node_unref(root);
	g_object_unref(g);
	g_object_unref(b);
	return s;
}

/* Prometheus label values: backslash, quote and newline escaped. */
static void label(GString *s, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			g_string_append_c(s, '\\');
		if (*v == '\n') {
			g_string_append(s, "\\n");
			continue;
		}
		g_string_append_c(s, *v);
	}
}

/* /metrics: Prometheus text exposition format 0.0.4 (under S.lk). */
static GString *metrics_text(void)
{
	static const struct {
		const char *name, *type, *help;
	} per[] = {
		{ "camlheap_samples_total", "counter", "Samples taken (kept after the budget's thinning) in the process." },
		{ "camlheap_samples_per_second", "gauge", "Samples taken per second, over the last second." },
		{ "camlheap_dropped_events_total", "counter", "Sample events lost because the ring buffer was full." },
		{ "camlheap_lambda", "gauge", "Samples per allocated word in force (the rate times 2^-rate_shift)." },
		{ "camlheap_rate_shift", "gauge", "Samples kept with probability 2^-rate_shift to hold the budget." },
		{ "camlheap_executor_stops_total", "counter", "Stops of the process's threads by the ptrace executor." },
		{ "camlheap_executor_stops_per_second", "gauge", "Ptrace executor stops per second, over the last second." },
		{ "camlheap_overhead_seconds_total", "counter",
		  "Time the process spent in camlheap's BPF programs and stopped for its executor, seconds "
		  "(uprobe trap entry not included)." },
		{ "camlheap_overhead_ratio", "gauge", "camlheap_overhead_seconds_total per second, over the last second." },
		{ "camlheap_worker_cpu_seconds_total", "counter", "CPU time of the process's camlheap worker." },
		{ "camlheap_live_bytes_estimate", "gauge", "Estimated bytes of the blocks sampled since attach that are still alive." },
		{ "camlheap_resident_bytes", "gauge", "The process's resident set (VmRSS), bytes." },
	};
	GString *s = g_string_new(NULL);

	g_string_append(s, "# HELP camlheap_processes_followed Processes followed now, by target.\n"
			   "# TYPE camlheap_processes_followed gauge\n");
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		unsigned n = 0;

		for (struct worker *w = S.workers; w; w = w->next)
			n += !strcmp(w->target, S.cfg.targets[i].name) && (w->state == W_ATTACHING || w->state == W_RECORDING);
		g_string_append(s, "camlheap_processes_followed{target=\"");
		label(s, S.cfg.targets[i].name);
		g_string_append_printf(s, "\"} %u\n", n);
	}
	g_string_append_printf(s,
			       "# HELP camlheap_workers_started_total Workers started (one per process followed).\n"
			       "# TYPE camlheap_workers_started_total counter\n"
			       "camlheap_workers_started_total %llu\n"
			       "# HELP camlheap_workers_failed_total Workers that could not follow their process.\n"
			       "# TYPE camlheap_workers_failed_total counter\n"
			       "camlheap_workers_failed_total %llu\n"
			       "# HELP camlheap_processes_missed_total Processes that ended before their worker attached.\n"
			       "# TYPE camlheap_processes_missed_total counter\n"
			       "camlheap_processes_missed_total %llu\n"
			       "# HELP camlheap_processes_skipped_total Processes of an executable found unprofilable before.\n"
			       "# TYPE camlheap_processes_skipped_total counter\n"
			       "camlheap_processes_skipped_total %llu\n"
			       "# HELP camlheap_processes_over_limit_total Times a process was left for max-processes.\n"
			       "# TYPE camlheap_processes_over_limit_total counter\n"
			       "camlheap_processes_over_limit_total %llu\n"
			       "# HELP camlheap_execs_seen_total Execs on the host seen by the discovery program.\n"
			       "# TYPE camlheap_execs_seen_total counter\n"
			       "camlheap_execs_seen_total %llu\n"
,
			       (unsigned long long)S.started_total, (unsigned long long)S.failed_total,
			       (unsigned long long)S.missed_total, (unsigned long long)S.skipped_total,
			       (unsigned long long)S.limited_total, (unsigned long long)S.execs_seen);
	for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
		g_string_append_printf(s, "# HELP %s %s\n# TYPE %s %s\n", per[m].name, per[m].help, per[m].name, per[m].type);
		for (struct worker *w = S.workers; w; w = w->next) {
			double v;

			if (w->state != W_RECORDING)
				continue;
			switch (m) {
			case 0: v = (double)w->samples; break;
			case 1: v = w->sample_rate; break;
			case 2: v = (double)w->dropped; break;
			case 3: v = ldexp(w->lambda, -(int)w->shift); break;
			case 4: v = w->shift; break;
			case 5: v = (double)w->stops; break;
			case 6: v = w->stop_rate; break;
			case 7: v = (double)(w->bpf_ns + w->exec_ns) * 1e-9; break;
			case 8: v = w->overhead_ratio; break;
			case 9: v = (double)w->cpu_ns * 1e-9; break;
			case 10: v = w->lambda > 0 ? (double)w->live / w->lambda * 8.0 : 0; break;
			default: v = (double)w->rss_kib * 1024.0; break;
			}
			g_string_append_printf(s, "%s{target=\"", per[m].name);
			label(s, w->target);
			g_string_append_printf(s, "\",pid=\"%d\"} %.17g\n", w->pid, v);
		}
	}
	return s;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
	GString *s;

	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "only GET\n");
	if (!strcmp(url, "/debug/pprof/heap"))
		return serve_pprof(c, "heap");
	if (!strcmp(url, "/debug/pprof/allocs"))
		return serve_pprof(c, "allocs");
	if (!strcmp(url, "/debug/memtrace")) {
		if (strcmp(method, "GET")) /* a recording takes its seconds: never for a HEAD */
			return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
		return serve_memtrace(c);
	}
	if (!strcmp(url, "/targets")) {
		pthread_mutex_lock(&S.lk);
		s = targets_json();
		pthread_mutex_unlock(&S.lk);
		return reply_string(c, MHD_HTTP_OK, "application/json", s);
	}
	if (!strcmp(url, "/metrics")) {
		pthread_mutex_lock(&S.lk);
		s = metrics_text();
		pthread_mutex_unlock(&S.lk);
		return reply_string(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", s);
	}
	if (!strcmp(url, "/") || !strcmp(url, "/debug/pprof/") || !strcmp(url, "/debug/pprof"))
		return reply_text(c, MHD_HTTP_OK, "text/plain",
				  "camlheap serve: memory profiles of the configured OCaml programs\n"
				  "  /debug/pprof/heap?pid=N|target=NAME    pprof, default sample type inuse_space\n"
				  "  /debug/pprof/allocs?pid=N|target=NAME  pprof, default sample type alloc_space\n"
				  "  /debug/memtrace?pid=N&seconds=S        a memtrace recording of the next S seconds\n"
				  "  /targets                               JSON: targets, processes, figures\n"
				  "  /metrics                               Prometheus text\n");
	return reply_text(c, MHD_HTTP_NOT_FOUND, "text/plain", "no such endpoint: %s (GET / lists them)\n", url);
}

#define HTTP_MAX_CONN 64u

static int start_http(char *err, size_t len)
{
	/* poll, not select (no 1024-descriptor ceiling); a thread per
	 * connection, at most HTTP_MAX_CONN of them per endpoint and 16 per
	 * client address, idle ones closed after 30 s: a flood of half-sent
	 * requests on the TCP port leaves the Unix socket reachable */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
			 MHD_USE_POLL;

	if (strcmp(S.cfg.listen, "none")) {
		char host[256];
		const char *colon = strrchr(S.cfg.listen, ':');
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
		struct addrinfo *ai = NULL;
		int gai;

		snprintf(host, sizeof(host), "%.*s", (int)(colon - S.cfg.listen), S.cfg.listen);
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			memmove(host, host + 1, strlen(host));
			host[strlen(host) - 1] = 0;
		}
		gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
		if (gai) {
			snprintf(err, len, "listen = %s: %s", S.cfg.listen, gai_strerror(gai));
			return -EINVAL;
		}
		S.http = MHD_start_daemon(flags | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
					  (uint16_t)atoi(colon + 1), NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
					  ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
					  HTTP_MAX_CONN, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 16u, MHD_OPTION_END);
		freeaddrinfo(ai);
		if (!S.http) {
			snprintf(err, len, "cannot listen on %s (in use, or not an address of this host)", S.cfg.listen);
			return -EADDRINUSE;
		}
	}
	if (S.cfg.socket) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char dir[PATH_MAX], *slash;

		snprintf(dir, sizeof(dir), "%s", S.cfg.socket);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = 0;
			mkdir_p(dir, 0755);
		}
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", S.cfg.socket);
		{
			/* only a stale socket is replaced: never another file, never a
			 * socket another service still answers on */
			struct stat st;

			if (lstat(S.cfg.socket, &st) == 0) {
				int probe;

				if (!S_ISSOCK(st.st_mode)) {
					snprintf(err, len, "socket = %s: a file that is not a socket is there; name another path",
						 S.cfg.socket);
					return -EEXIST;
				}
				probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
				if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
					close(probe);
					snprintf(err, len, "socket = %s: another camlheap serve answers there", S.cfg.socket);
					return -EADDRINUSE;
				}
				if (probe >= 0)
					close(probe);
				unlink(S.cfg.socket);
			}
		}
		S.unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (S.unix_fd < 0 || bind(S.unix_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(S.unix_fd, 64) < 0) {
			snprintf(err, len, "socket = %s: %s", S.cfg.socket, strerror(errno));
			return -errno;
		}
		chmod(S.cfg.socket, 0600); /* the profiles are root's business */
		{
			struct stat st;

			if (stat(S.cfg.socket, &st) == 0)
				S.sock_ino = st.st_ino;
		}
		S.unix_http = MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, S.unix_fd,
					       MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT, HTTP_MAX_CONN,
					       MHD_OPTION_END);
		if (!S.unix_http) {
			snprintf(err, len, "cannot serve on %s", S.cfg.socket);
			return -EIO;
		}
	}
	return 0;
}

static void stop_http(void)
{
	if (S.http)
		MHD_stop_daemon(S.http);
	if (S.unix_http)
		MHD_stop_daemon(S.unix_http);
	S.http = S.unix_http = NULL;
	if (S.cfg.socket && S.sock_ino) {
		struct stat st;

		/* ours still (not replaced by someone else's) */
		if (lstat(S.cfg.socket, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == S.sock_ino)
			unlink(S.cfg.socket);
	}
	if (S.unix_fd >= 0)
		close(S.unix_fd);
	S.unix_fd = -1;
}

/* ---- the service ---------------------------------------------------- */

static void notify_status(void)
{
	sd_notifyf(0, "STATUS=%u process%s followed, %zu target%s; %llu workers started, %llu failed", S.active,
		   S.active == 1 ? "" : "es", S.cfg.ntargets, S.cfg.ntargets == 1 ? "" : "s",
		   (unsigned long long)S.started_total, (unsigned long long)S.failed_total);
}

/* SIGHUP: the new configuration, or the old one if the file is bad.
 * Workers whose process no longer matches its (renamed or changed) target
 * are stopped; processes of new targets are looked for. */
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

static void reload(void)
{
	struct serve_config nc;
	char err[2048];

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
	for (struct worker *w = S.workers; w; w = w->next) {
		const struct serve_target *t;

		if (w->wpid <= 0 || (w->state != W_ATTACHING && w->state != W_RECORDING))
			continue;
		t = find_target(w->target);
		if (!t || !target_matches(t, w->pid)) {
			slog(LOG_INFO, "reload: PID %d is no longer a process of target %s: stopping its worker", w->pid,
			     w->target);
			w->detached = true;
			kill(w->wpid, SIGTERM);
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

/* SIGTERM to every worker, then wait for all of them, reading their last
 * messages; one still there after 30 s is killed (kill -9 of a worker never
 * harms its target). */
static void stop_workers(int sigfd)
{
	double kill_at = now_mono() + 30;
	bool killed = false;

	for (struct worker *w = S.workers; w; w = w->next)
		if (w->wpid > 0)
			kill(w->wpid, SIGTERM);
	for (;;) {
		struct pollfd pf = { .fd = sigfd, .events = POLLIN };
		struct signalfd_siginfo si;
		bool left = false;

		if (!killed && now_mono() >= kill_at) {
			for (struct worker *w = S.workers; w; w = w->next)
				if (w->wpid > 0) {
					slog(LOG_WARNING, "target %s: PID %d: its worker did not stop in 30 s: killed",
					     w->target, w->pid);
					kill(w->wpid, SIGKILL);
				}
			killed = true;
		}
		for (struct worker *w = S.workers; w; w = w->next) {
			left |= w->wpid > 0;
			if (w->fd >= 0)
				on_worker_msg(w);
			if (w->errfd >= 0)
				on_worker_err(w);
		}
		if (!left)
			break;
		poll(&pf, 1, 100);
		while (read(sigfd, &si, sizeof(si)) == sizeof(si))
			;
		reap_workers();
	}
}

int serve_run(const char *config_path, double interval_s)
{
	char err[2048];
	sigset_t mask;
	int sigfd, ret, status = 0;
	const char *rt = getenv("RUNTIME_DIRECTORY");

	char *real = realpath(config_path, NULL); /* SIGHUP reads it again from wherever */

	memset(&S, 0, sizeof(S));
	S.unix_fd = -1;
	S.stats_fd = -1;
	S.config_path = real ? real : config_path;
	S.journal = stderr_is_journal();
	S.start_unix = now_real();
	pthread_mutex_init(&S.lk, NULL);
	pthread_cond_init(&S.cv, NULL);
	S.unsupported = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	S.interval_override = interval_s;
	if (serve_config_load(config_path, &S.cfg, err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		return 2;
	}
	if (S.interval_override > 0)
		S.cfg.interval_s = S.interval_override;
	if (geteuid() != 0) {
		/* the workers' check says exactly what is missing; say it once here */
		slog(LOG_ERR, "camlheap serve loads BPF programs and attaches uprobes to other users' processes: run it as "
			      "root (the systemd unit in dist/ does), with CAP_SYS_ADMIN, CAP_BPF, CAP_PERFMON and "
			      "CAP_SYS_PTRACE");
		serve_config_free(&S.cfg);
		return 2;
	}
	if (S.cfg.warnings)
		slog(LOG_WARNING, "%s", g_strchomp(S.cfg.warnings));
	if (check_output(S.cfg.output, err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		serve_config_free(&S.cfg);
		return 2;
	}
	remove_stale_tmpdirs(rt && rt[0] == '/' ? rt : "/tmp");
	snprintf(S.tmpdir, sizeof(S.tmpdir), "%s/camlheap-serve.%d.XXXXXX", rt && rt[0] == '/' ? rt : "/tmp",
		 (int)getpid());
	if (!mkdtemp(S.tmpdir)) {
		slog(LOG_ERR, "cannot create a temporary directory under %s: %s", rt ? rt : "/tmp", strerror(errno));
		serve_config_free(&S.cfg);
		return 2;
	}
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

	{
		/* workers each hold a ring buffer and maps */
		struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

		setrlimit(RLIMIT_MEMLOCK, &rl);
	}
	/* the overhead figures: time in BPF programs (a global switch, on
	 * while this descriptor lives; kernel >= 5.8) */
	S.stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	if (S.stats_fd < 0)
		slog(LOG_WARNING, "cannot turn BPF run-time statistics on (%s): the overhead figures count only the "
				  "ptrace executor's stops", strerror(errno));
	libbpf_set_print(NULL);
	S.disc = discover_bpf__open_and_load();
	if (!S.disc || discover_bpf__attach(S.disc) < 0) {
		slog(LOG_ERR, "cannot load the discovery BPF program (raw tracepoint sched_process_exec): %s",
		     strerror(errno));
		ret = 2;
		goto out;
	}
	S.rb = ring_buffer__new(bpf_map__fd(S.disc->maps.execs), on_exec_event, NULL, NULL);
	if (!S.rb) {
		slog(LOG_ERR, "cannot read the discovery ring buffer: %s", strerror(errno));
		ret = 2;
		goto out;
	}
	if (start_http(err, sizeof(err)) < 0) {
		slog(LOG_ERR, "%s", err);
		ret = 2;
		goto out;
	}
	scan_proc();
	sd_watchdog_enabled(0, &S.watchdog_usec);
	sd_notify(0, "READY=1");
	notify_status();
	slog(LOG_NOTICE, "serving %zu target%s from %s; profiles every %g s into %s; HTTP %s%s%s", S.cfg.ntargets,
	     S.cfg.ntargets == 1 ? "" : "s", config_path, S.cfg.interval_s, S.cfg.output, S.cfg.listen,
	     S.cfg.socket ? ", socket " : "", S.cfg.socket ? S.cfg.socket : "");

	while (!S.stopping) {
		S.nworkers_fds = 0;
		for (struct worker *w = S.workers; w; w = w->next)
			S.nworkers_fds++;
		nfds_t n = 0, cap = 2 + 2 * (nfds_t)S.nworkers_fds;
		struct pollfd *fds = g_new(struct pollfd, cap + 2);
		struct worker **ws = g_new(struct worker *, cap + 2);
		bool sig_ready;
		double now;

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
		poll(fds, n, 250);
		ring_buffer__consume(S.rb);
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
		if (sig_ready) {
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
		now = now_mono();
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

	/* SIGTERM: every worker writes its last files and detaches */
	sd_notify(0, "STOPPING=1");
	stop_workers(sigfd);
	retention();
	slog(LOG_NOTICE, "stopped: every worker detached and wrote its last profile");
	ret = 0;
out:
	stop_http();
	ring_buffer__free(S.rb);
	discover_bpf__destroy(S.disc);
	if (S.stats_fd >= 0)
		close(S.stats_fd);
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
		free(w);
	}
	pthread_mutex_unlock(&S.lk);
	serve_config_free(&S.cfg);
	g_hash_table_destroy(S.unsupported);
	close(sigfd);
	free(real);
	status = ret;
	return status;
}

/* ---- camlheap status ---------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t n, void *ctx)
{
	g_string_append_len(ctx, data, (gssize)(size * n));
	return size * n;
}

static const char *human_bytes(double b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024 && u < 4) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
	return buf;
}

int serve_status(const char *sock, const char *url, bool json)
{
	CURL *c = curl_easy_init();
	GString *body = g_string_new(NULL);
	char full[1024], cerr[CURL_ERROR_SIZE] = "";
	long code = 0;
	CURLcode cr;
	JsonParser *p = NULL;
	int ret = 1;

	if (!c) {
		fprintf(stderr, "camlheap: cannot initialise libcurl\n");
		g_string_free(body, TRUE);
		return 1;
	}
	if (sock) {
		struct stat st;

		if (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode)) {
			fprintf(stderr,
				"camlheap: no camlheap serve socket at %s (%s): is the service running, with `socket = %s` "
				"in its configuration? (or give --url http://HOST:PORT, its `listen =`)\n",
				sock, errno && stat(sock, &st) < 0 ? strerror(errno) : "not a socket", sock);
			curl_easy_cleanup(c);
			g_string_free(body, TRUE);
			return 1;
		}
		if (access(sock, R_OK | W_OK) < 0) {
			fprintf(stderr, "camlheap: %s: %s: the service's socket is root's (mode 0600); run camlheap status "
					"as root\n", sock, strerror(errno));
			curl_easy_cleanup(c);
			g_string_free(body, TRUE);
			return 1;
		}
	}
	snprintf(full, sizeof(full), "%s/targets", url ? url : "http://localhost");
	curl_easy_setopt(c, CURLOPT_URL, full);
	if (sock)
		curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, sock);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	cr = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_cleanup(c);
	if (cr != CURLE_OK || code != 200) {
		fprintf(stderr,
			"camlheap: cannot reach camlheap serve at %s: %s\n"
			"  is it running (systemctl status camlheap)?%s\n",
			sock ? sock : full,
			cr != CURLE_OK ? (sock ? "the socket does not answer (a service that died left it)"
					       : cerr[0] ? cerr : curl_easy_strerror(cr))
				       : "unexpected HTTP status",
			sock ? "" : " is that its `listen =` address?");
		goto out;
	}
	if (json) {
		fputs(body->str, stdout);
		ret = 0;
		goto out;
	}
	p = json_parser_new();
	if (!json_parser_load_from_data(p, body->str, (gssize)body->len, NULL)) {
		fprintf(stderr, "camlheap: the service answered something that is not JSON\n");
		goto out;
	}
	{
		JsonObject *root = json_node_get_object(json_parser_get_root(p));
		JsonObject *svc = json_object_get_object_member(root, "service");
		JsonArray *targets = json_object_get_array_member(root, "targets");
		char b1[32], b2[32];

		printf("camlheap serve (PID %lld), %s; %lld process%s followed; profiles every %g s in %s\n",
		       (long long)json_object_get_int_member(svc, "pid"), json_object_get_string_member(svc, "config"),
		       (long long)json_object_get_int_member(svc, "processes_followed"),
		       json_object_get_int_member(svc, "processes_followed") == 1 ? "" : "es",
		       json_object_get_double_member(svc, "interval_s"), json_object_get_string_member(svc, "output"));
		printf("%-16s %8s %-10s %-7s %9s %10s %9s %10s %10s %6s\n", "TARGET", "PID", "STATE", "OCAML", "SAMPLES/S",
		       "LAMBDA", "OVERHEAD", "LIVE(EST)", "RSS", "FILES");
		for (guint i = 0; i < json_array_get_length(targets); i++) {
			JsonObject *t = json_array_get_object_element(targets, i);
			JsonArray *procs = json_object_get_array_member(t, "processes");
			const char *name = json_object_get_string_member(t, "name");

			if (!json_array_get_length(procs))
				printf("%-16s %8s %-10s\n", name, "-", "none yet");
			for (guint j = 0; j < json_array_get_length(procs); j++) {
				JsonObject *q = json_array_get_object_element(procs, j);
				const char *ver = json_object_get_string_member(q, "ocaml_version");
				const char *msg = json_object_get_string_member(q, "message");
				const char *state = json_object_get_string_member(q, "state");

				printf("%-16s %8lld %-10s %-7s %9.0f %10.3g %8.2f%% %10s %10s %6lld\n", name,
				       (long long)json_object_get_int_member(q, "pid"), state, ver ? ver : "-",
				       json_object_get_double_member(q, "samples_per_second"),
				       json_object_get_double_member(q, "lambda_in_force"),
				       json_object_get_double_member(q, "overhead_ratio") * 100,
				       human_bytes(json_object_get_double_member(q, "live_bytes_estimate"), b1, sizeof(b1)),
				       human_bytes((double)json_object_get_int_member(q, "resident_bytes"), b2, sizeof(b2)),
				       (long long)json_object_get_int_member(q, "files_written"));
				if (msg && strcmp(state, "recording"))
					printf("%-16s %8s   %s\n", "", "", msg);
			}
		}
	}
	ret = 0;
out:
	if (p)
		g_object_unref(p);
	g_string_free(body, TRUE);
	return ret;
}
