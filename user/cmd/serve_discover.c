/* serve_discover.c -- which processes `camlheap serve` follows (serve.h):
 * those a target's matchers agree on (exe, unit, cgroup, pidfile), looked
 * at when they exec (the discovery BPF program's events), at start-up and
 * after a reload or lost events (a scan of /proc), and every second for
 * the PID files. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "camlheap.h"
#include "discover.skel.h"
#include "cmd/serve_internal.h"
#include "target/proc.h"

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

int proc_starttime(pid_t pid, unsigned long long *st)
{
	return proc_stat(pid, NULL, st);
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
bool target_matches(const struct serve_target *t, pid_t pid)
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
		if (proc_cgroup(pid, NULL, buf, sizeof(buf)) < 0)
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
int exe_key(pid_t pid, char *out, size_t len)
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

/* The first target whose matchers agree on process `pid`, or NULL. */
static const struct serve_target *target_of(pid_t pid)
{
	for (size_t i = 0; i < S.cfg.ntargets; i++)
		if (target_matches(&S.cfg.targets[i], pid))
			return &S.cfg.targets[i];
	return NULL;
}

/* PID's parent and struct mm_ident.  Returns 0 or -errno (-ESRCH: gone;
 * -EINVAL: no address space, a kernel thread). */
static int read_mm_ident(pid_t pid, pid_t *ppid, struct mm_ident *m)
{
	unsigned long long v[53] = { 0 };
	char path[64], buf[1024], *p, *end;
	struct stat st;
	int field = 3;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (read_file(path, buf, sizeof(buf)) < 0)
		return -ESRCH;
	p = strrchr(buf, ')'); /* comm may hold spaces and parens */
	if (!p || p[1] != ' ')
		return -EINVAL;
	for (p += 3; *p && field < 53; field++) { /* p past the state, at field 4 */
		while (*p == ' ')
			p++;
		v[field + 1] = strtoull(p, &end, 10);
		if (end == p)
			break;
		p = end;
	}
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	if (field < 48 || !v[28] || stat(path, &st) < 0)
		return -EINVAL;
	*ppid = (pid_t)v[4];
	*m = (struct mm_ident){ st.st_dev, st.st_ino, v[26], v[28], v[47], v[48] };
	return 0;
}

pid_t forked_from(pid_t pid)
{
	struct mm_ident a, b;
	pid_t ppid, pp;

	if (read_mm_ident(pid, &ppid, &a) < 0 || ppid <= 1 || read_mm_ident(ppid, &pp, &b) < 0)
		return 0;
	return memcmp(&a, &b, sizeof(a)) ? 0 : ppid;
}

static bool target_has_at(const struct serve_target *t, pid_t pid, int depth)
{
	struct worker *w;
	pid_t parent;

	if (target_matches(t, pid))
		return true;
	if (depth >= 16 || !(parent = forked_from(pid)))
		return false;
	w = active_worker(parent);
	if (w && !w->detached)
		return !strcmp(w->target, t->name);
	return target_has_at(t, parent, depth + 1);
}

bool target_has(const struct serve_target *t, pid_t pid)
{
	return target_has_at(t, pid, 0);
}

/* The target of a process not followed: its parent's if it is a fork
 * child of one of a target's processes (the fork tracepoint's rule, also
 * at start-up and reload, so a pre-forking server's workers are in its
 * group whatever matched it: a PID file, say), else the first whose
 * matchers agree.  *parent: the fork parent it is followed as, or 0. */
static const struct serve_target *group_of(pid_t pid, pid_t *parent, int depth)
{
	pid_t p = depth < 16 ? forked_from(pid) : 0;

	*parent = 0;
	if (p > 0) {
		struct worker *w = active_worker(p);
		const struct serve_target *t;
		pid_t pp;

		t = w && !w->detached ? find_target(w->target) : group_of(p, &pp, depth + 1);
		if (t) {
			*parent = p;
			return t;
		}
	}
	return target_of(pid);
}

void consider(pid_t pid, bool exec)
{
	struct worker *w = active_worker(pid);
	const struct serve_target *t;
	pid_t parent;

	if (w) {
		/* it exec'd again: its worker stops by itself (the program is
		 * another); look at the new one then */
		if (exec)
			w->reexec = true;
		return;
	}
	/* a process that has just exec'd is no fork child of its parent any
	 * more (its struct mm_ident is new): only the matchers; a process found
	 * running may be one */
	parent = 0;
	t = exec ? target_of(pid) : group_of(pid, &parent, 0);
	if (t)
		start_worker(t, pid, parent);
}

void scan_proc(void)
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
		consider((pid_t)pid, false);
	}
	closedir(d);
}

void poll_pidfiles(void)
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
				start_worker(t, (pid_t)pid, 0);
		}
	}
}

/* The process has exited (a zombie counts: its parent has not reaped it
 * yet), or its PID is another process's now. */
bool process_gone(pid_t pid, unsigned long long starttime)
{
	unsigned long long st;
	char state;

	return proc_stat(pid, &state, &st) < 0 || st != starttime || state == 'Z' || state == 'X';
}

/* Fork child `pid` of followed process `parent` to look at once it
 * settled: with the parent's target and struct mm_ident as they are now
 * (the parent may be gone by then). */
static void queue_fork(pid_t pid, pid_t parent)
{
	struct fork_wait f = { .pid = pid, .parent = parent, .due = now_mono() + FORK_SETTLE_S };
	struct worker *w = active_worker(parent);
	pid_t pp;

	for (guint i = 0; i < S.forks->len; i++)
		if (g_array_index(S.forks, struct fork_wait, i).pid == pid)
			return;
	if (!w || read_mm_ident(parent, &pp, &f.mm) < 0)
		return; /* no longer followed, or gone: its children too are left alone */
	f.target = g_strdup(w->target);
	g_array_append_val(S.forks, f);
}

/* The first target matching by `exe` alone whose file is (dev, ino): dev
 * the kernel's dev_t as struct ch_exec_event gives it.  NULL if none, or
 * if the file cannot be read now. */
static const struct serve_target *exe_target_of_file(uint32_t dev, uint64_t ino)
{
	for (size_t i = 0; i < S.cfg.ntargets && dev; i++) {
		const struct serve_target *t = &S.cfg.targets[i];
		struct stat st;

		if (t->exe && !t->unit && !t->cgroup && !t->pidfile && stat(t->exe, &st) == 0 &&
		    (uint64_t)st.st_ino == ino && major(st.st_dev) == dev >> 20 && minor(st.st_dev) == (dev & 0xfffff))
			return t;
	}
	return NULL;
}

int on_exec_event(void *ctx, void *data, size_t size)
{
	const struct ch_exec_event *e = data;
	unsigned long long st = 0;

	if (size < sizeof(*e))
		return 0;
	if (e->kind == CH_DISC_FORK) {
		S.forks_seen++;
		queue_fork((pid_t)e->tgid, (pid_t)e->parent);
		return 0;
	}
	S.execs_seen++;
	if (proc_starttime((pid_t)e->tgid, &st) < 0 || process_gone((pid_t)e->tgid, st)) {
		/* gone already: an exe-only target whose file this was missed it */
		const struct serve_target *t = exe_target_of_file(e->dev, e->ino);

		if (t) {
			S.missed_total++;
			S.gone_total++;
			slog(LOG_INFO, "target %s: PID %u ended before it was looked at", t->name, e->tgid);
		}
		return 0;
	}
	consider((pid_t)e->tgid, true);
	return 0;
}

double settle_forks(void)
{
	double now = now_mono(), next = -1;

	for (guint i = 0; i < S.forks->len;) {
		struct fork_wait f = g_array_index(S.forks, struct fork_wait, i);
		const struct serve_target *t;
		unsigned long long st;

		if (f.due > now) {
			next = next < 0 || f.due - now < next ? f.due - now : next;
			i++;
			continue;
		}
		g_array_remove_index(S.forks, i);
		if (!active_worker(f.pid) && proc_starttime(f.pid, &st) == 0) {
			/* not followed since its exec, not gone: the parent's target
			 * if it exec'd nothing (its parent may have ended meanwhile),
			 * else whatever wants the program it runs now */
			struct mm_ident m;
			pid_t pp, parent = 0;

			t = NULL;
			if (read_mm_ident(f.pid, &pp, &m) == 0 && !memcmp(&m, &f.mm, sizeof(m)) &&
			    (t = find_target(f.target)))
				parent = f.parent;
			if (!t)
				t = group_of(f.pid, &parent, 0);
			if (t && parent)
				slog(LOG_INFO, "target %s: PID %d is a fork child of followed PID %d", t->name, f.pid,
				     parent);
			if (t)
				start_worker(t, f.pid, parent);
		}
		g_free(f.target);
	}
	return next;
}

/* The children `pid` has already (/proc/PID/task/TID/children, Linux 3.5+
 * with CONFIG_PROC_CHILDREN): forked before it was followed, as a
 * pre-forking server does at once. */
static void queue_children(pid_t pid)
{
	char path[64], buf[4096];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return;
	while ((e = readdir(d))) {
		char *p, *end;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/children", pid, e->d_name);
		if (read_file(path, buf, sizeof(buf)) <= 0)
			continue;
		for (p = buf; *p; p = end) {
			long c = strtol(p, &end, 10);

			if (end == p)
				break;
			if (c > 0)
				queue_fork((pid_t)c, pid);
		}
	}
	closedir(d);
}

void discovery_follow(pid_t pid, bool on)
{
	__u32 key = (__u32)pid;
	__u8 one = 1;

	if (!S.disc)
		return;
	if (!on) {
		bpf_map_delete_elem(bpf_map__fd(S.disc->maps.followed), &key);
		return;
	}
	/* in the map first: a fork from now on is reported, one before is
	 * among the children read next */
	bpf_map_update_elem(bpf_map__fd(S.disc->maps.followed), &key, &one, BPF_ANY);
	queue_children(pid);
}
