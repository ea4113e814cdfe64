/* serve_worker.c -- `camlheap serve`'s workers (serve.h): one `camlheap
 * record` a followed process, started with its budget, its messages and
 * stderr read, reaped when it ends, stopped at shutdown; the host budget
 * shared among them, and the files they write trimmed to keep and
 * keep-bytes. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "camlheap.h"
#include "cmd/serve_internal.h"

#define MAX_EXITED 256 /* exited processes kept in /targets */

int mkdir_p(const char *dir, mode_t mode)
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
double effective_budget(const struct serve_target *t)
{
	double b = t && t->budget > 0 ? t->budget : 0;

	if (S.cfg.host_budget > 0) {
		double share = S.cfg.host_budget / (S.active ? S.active : 1);

		b = b > 0 && b < share ? b : share;
	}
	return b;
}

void rebalance_budgets(void)
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

/* posix_spawn of a worker, camlheap itself with argv: its control socket
 * (sv) as descriptor 3, its stderr the pipe ep, stdin and stdout
 * /dev/null.  Returns 0 (its PID in *wpid) or an errno value. */
static int spawn_worker(const char **argv, int sv, int ep, pid_t *wpid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, all;
	int ret;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, sv, 3);
	posix_spawn_file_actions_adddup2(&fa, ep, 2);
	if (S.kbtf_fd >= 0) /* record --kernel-btf /proc/self/fd/4 */
		posix_spawn_file_actions_adddup2(&fa, S.kbtf_fd, 4);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawnattr_init(&at);
	/* the worker starts with the signals it takes (record.c run_check)
	 * blocked: a SIGTERM before it reads them, the one the kernel sends
	 * when the service dies (PR_SET_PDEATHSIG) included, stops it as one
	 * after, cleanly, not by the default action */
	sigemptyset(&none);
	sigaddset(&none, SIGTERM);
	sigaddset(&none, SIGINT);
	sigaddset(&none, SIGHUP);
	sigfillset(&all);
	/* and SIGPIPE ignored, as here: its stderr is a pipe to the service,
	 * which may be gone, and a worker never starts a command */
	sigdelset(&all, SIGPIPE);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &all);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	ret = posix_spawn(wpid, "/proc/self/exe", &fa, &at, (char *const *)argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	return ret;
}

/* Start a worker for process pid of target t (fork_parent: followed as
 * that process's fork child, or 0). */
void start_worker(const struct serve_target *t, pid_t pid, pid_t fork_parent)
{
	char spid[16], srate[32], sint[32], sbudget[32], sdepth[16], stamp[32], dir[PATH_MAX], snice[16], strap[96];
	unsigned long long st = 0;
	int sv[2] = { -1, -1 }, ep[2] = { -1, -1 };
	struct worker *w;
	const char *argv[32];
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
	/* a worker restarted by a reload within the second gets a directory of its own */
	for (int k = 2; access(dir, F_OK) == 0 && k < 100; k++)
		snprintf(dir, sizeof(dir), "%s/%s/%d-%s-%d", S.cfg.output, t->name, pid, stamp, k);
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
	snprintf(sdepth, sizeof(sdepth), "%u", t->max_depth ? t->max_depth : CH_DEFAULT_FRAMES);
	argv[argc++] = "--max-depth";
	argv[argc++] = sdepth;
	if (t->malloc)
		argv[argc++] = "--malloc";
	if (t->executor) {
		argv[argc++] = "--executor";
		argv[argc++] = t->executor;
	}
	if (t->census_on) {
		argv[argc++] = "--on";
		argv[argc++] = t->census_on;
	}
	if (S.nice_raised) {
		snprintf(snice, sizeof(snice), "%d", S.base_nice);
		argv[argc++] = "--base-nice";
		argv[argc++] = snice;
	}
	if (S.trap.valid) {
		snprintf(strap, sizeof(strap), "%.6g,%.6g,%.6g", S.trap.emulated_ns, S.trap.stepped_ns, S.trap.return_ns);
		argv[argc++] = "--trap-cost";
		argv[argc++] = strap;
	}
	if (S.kbtf_fd >= 0) {
		argv[argc++] = "--kernel-btf";
		argv[argc++] = "/proc/self/fd/4";
	}
	argv[argc] = NULL;

	w = calloc(1, sizeof(*w));
	ret = w ? spawn_worker(argv, sv[1], ep[1], &w->wpid) : ENOMEM;
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
	w->fork_parent = fork_parent;
	w->starttime = st;
	snprintf(w->exe_key, sizeof(w->exe_key), "%s", key);
	w->fd = sv[0];
	w->errfd = ep[0];
	fcntl(w->errfd, F_SETFL, O_NONBLOCK);
	w->state = W_ATTACHING;
	w->lambda = t->rate;
	w->budget_sent = b;
	w->rate_asked = t->rate;
	w->malloc_asked = t->malloc;
	snprintf(w->executor_asked, sizeof(w->executor_asked), "%s", t->executor ? t->executor : "auto");
	w->depth_asked = t->max_depth ? t->max_depth : CH_DEFAULT_FRAMES;
	w->census_on_asked = g_strdup(t->census_on);
	w->output_asked = g_strdup(S.cfg.output);
	w->interval_sent = S.cfg.interval_s;
	w->started = now_real();
	snprintf(w->dir, sizeof(w->dir), "%s", dir);
	pthread_mutex_lock(&S.lk);
	w->next = S.workers;
	S.workers = w;
	S.active++;
	S.started_total++;
	pthread_mutex_unlock(&S.lk);
	discovery_follow(pid, true);
	slog(LOG_INFO, "target %s: following PID %d (worker %d, profiles in %s)", t->name, pid, w->wpid, dir);
	rebalance_budgets();
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
	uint64_t over = kv(msg, "bpf_ns") + kv(msg, "trap_ns") + kv(msg, "exec_ns");

	if (dt > 0.2) {
		w->sample_rate = (double)(samples - w->samples) / dt;
		w->stop_rate = (double)(stops - w->stops) / dt;
		w->overhead_ratio = (double)(over - (w->bpf_ns + w->trap_ns + w->exec_ns)) * 1e-9 / dt;
	}
	w->samples = samples;
	w->stops = stops;
	w->weighted = kv(msg, "weighted");
	w->events = kv(msg, "events");
	w->dropped = kv(msg, "dropped");
	w->shift = (unsigned)kv(msg, "shift");
	w->bpf_ns = kv(msg, "bpf_ns");
	w->trap_ns = kv(msg, "trap_ns");
	w->exec_ns = kv(msg, "exec_ns");
	w->cpu_ns = kv(msg, "cpu_ns");
	w->live = kv(msg, "live");
	w->rss_kib = kv(msg, "rss_kib");
	w->heap_words = kv(msg, "heap_words");
	w->stats_at = t;
}

const char *const serve_trigger_kinds[3] = { "oom", "rss", "pressure" };

/* "trigger KIND census|heap WHAT": a census-on trigger fired; the worker
 * wrote its census and heap profile, or (a process whose blocks are not
 * followed) the heap profile alone (its "wrote" lines came first; a
 * failed write is in its log).  S.lk held. */
static void on_trigger(struct worker *w, const char *msg)
{
	size_t n = strcspn(msg, " ");
	const char *files = msg + n + (msg[n] ? 1 : 0), *what = files + strcspn(files, " ");
	bool census = !strncmp(files, "census", 6) && (files[6] == ' ' || !files[6]);
	uint64_t *count;

	if (!S.triggers)
		S.triggers = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	if (!(count = g_hash_table_lookup(S.triggers, w->target))) {
		count = g_new0(uint64_t, 3);
		g_hash_table_insert(S.triggers, g_strdup(w->target), count);
	}
	for (int k = 0; k < 3; k++)
		if (n == strlen(serve_trigger_kinds[k]) && !strncmp(msg, serve_trigger_kinds[k], n))
			count[k]++;
	slog(LOG_WARNING, "target %s: PID %d: census-on %.*s fired, %s into %s: %s", w->target, w->pid, (int)n, msg,
	     census ? "census and heap profile" : "heap profile (no census: its blocks are not followed)", w->dir,
	     *what ? what + 1 : "");
}

void on_worker_msg(struct worker *w)
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
		} else if (!strncmp(buf, "trigger ", 8)) {
			on_trigger(w, buf + 8);
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
void on_worker_err(struct worker *w)
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
				g_free(w->output_asked);
				g_free(w->census_on_asked);
				free(w);
				continue;
			}
		}
		pp = &w->next;
	}
}

void reap_workers(void)
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
			if (w->state == W_ATTACHING || w->state == W_RECORDING) {
				S.active--;
				discovery_follow(w->pid, false);
			}
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
			if ((w->reexec || w->restart) && !S.stopping) {
				w->reexec = w->restart = false;
				consider(w->pid, false);
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

/* SIGTERM to every worker, then wait for all of them, reading their last
 * messages; one still there after 30 s is killed (kill -9 of a worker never
 * harms its target). */
void stop_workers(int sigfd)
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

/* ---- retention ------------------------------------------------------ */

struct ofile {
	char *path;
	time_t mtime;
	off_t size;
	bool trigger;   /* a census-on file (trigger_file) */
};

/* A file written at a census-on trigger: census-STAMP-KIND.txt or
 * heap-STAMP-KIND.pb.gz, KIND oom, rss or pressure (record_census_on_fired). */
static bool trigger_file(const char *name)
{
	static const char *const kinds[] = { "-oom.", "-rss.", "-pressure." };

	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strstr(name, kinds[i]))
			return true;
	return false;
}

/* keep-bytes' order: the periodic files before the trigger files, each
 * oldest first */
static int ofile_cmp_mtime(const void *a, const void *b)
{
	const struct ofile *x = a, *y = b;

	if (x->trigger != y->trigger)
		return x->trigger ? 1 : -1;
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

/* A process directory trimmed to the newest `keep` files of each type:
 * heap and census profiles, the periodic ones (and the final pair) and
 * those of census-on triggers counted apart, so that a trigger's pair
 * outlives `keep` intervals of periodic ones.  Names sort by time
 * (STAMP). */
static void keep_newest(const char *dir)
{
	static const char *const prefixes[] = { "heap-", "census-" };
	DIR *d = opendir(dir);
	struct dirent *e;
	GPtrArray *names[4];

	for (int i = 0; i < 4; i++)
		names[i] = g_ptr_array_new_with_free_func(g_free);
	if (!d)
		goto out;
	while ((e = readdir(d)))
		for (int i = 0; i < 2; i++)
			if (!strncmp(e->d_name, prefixes[i], strlen(prefixes[i])))
				g_ptr_array_add(names[2 * i + trigger_file(e->d_name)], g_strdup(e->d_name));
	closedir(d);
	for (int i = 0; i < 4; i++) {
		qsort(names[i]->pdata, names[i]->len, sizeof(char *), str_cmp);
		for (guint j = 0; j + S.cfg.keep < names[i]->len; j++) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/%s", dir, (char *)names[i]->pdata[j]);
			unlink(path);
		}
	}
out:
	for (int i = 0; i < 4; i++)
		g_ptr_array_free(names[i], TRUE);
}

/* Every process directory trimmed to `keep`, then the whole output
 * directory to `keep-bytes`, oldest files first (the periodic ones before
 * any census-on trigger's); directories of ended processes left empty are
 * removed. */
void retention(void)
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
			f.trigger = trigger_file(e->d_name);
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
