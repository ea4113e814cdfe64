/* census_on.c -- see census_on.h. */
#define _GNU_SOURCE
#include "cmd/census_on.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd/options_internal.h"
#include "collect/sampler.h"
#include "output/report_names.h"
#include "target/proc.h"

#define PSI_WINDOW_US 2000000u /* the PSI trigger's window: 2 s (psi.rst: 0.5 to 10 s; a multiple of 2 s without CAP_SYS_RESOURCE) */
#define RSS_PERIOD_S 0.05

static double mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int bad(char *err, size_t errlen, const char *fmt, const char *arg)
{
	char what[160];

	snprintf(what, sizeof(what), fmt, arg);
	snprintf(err, errlen, "--on: %s (triggers: oom, pressure[=PCT], rss=SIZE, comma-separated, e.g. "
			      "--on oom,rss=2G)", what);
	return -EINVAL;
}

int census_on_parse(const char *spec, struct census_on *on, char *err, size_t errlen)
{
	char buf[sizeof(on->spec)], *save = NULL, *tok;
	bool pressure = false;
	size_t n = 0;

	*on = (struct census_on){ .set = true };
	if (strlen(spec) >= sizeof(buf))
		return bad(err, errlen, "'%.40s...' is too long (at most 127 characters)", spec);
	snprintf(on->spec, sizeof(on->spec), "%s", spec);
	/* blanks around the separators are dropped: "oom, pressure = 20" is
	 * "oom,pressure=20"; one between words stays, and the word is refused
	 * as written ("oom rss=1G": a comma is missing) */
	for (const char *c = spec; *c; c++) {
		const char *next = c;

		if (!isspace((unsigned char)*c)) {
			buf[n++] = *c;
			continue;
		}
		while (isspace((unsigned char)*next))
			next++;
		if (n && buf[n - 1] != ',' && buf[n - 1] != '=' && *next && *next != ',' && *next != '=')
			buf[n++] = ' ';
		c = next - 1;
	}
	buf[n] = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (!strcmp(tok, "oom")) {
			if (on->oom)
				return bad(err, errlen, "'%s' is given twice", tok);
			on->oom = true;
		} else if (!strncmp(tok, "pressure", 8) && (!tok[8] || tok[8] == '=')) {
			double pct = 10.0;

			if (pressure)
				return bad(err, errlen, "'%s': pressure is given twice", tok);
			if (tok[8] && (parse_double(tok + 9, &pct) || !(pct > 0.0 && pct <= 100.0)))
				return bad(err, errlen, "'%s': pressure=PCT takes a percentage, 0 < PCT <= 100", tok);
			on->pressure_pct = pct;
			pressure = true;
		} else if (!strncmp(tok, "rss=", 4)) {
			if (on->rss_bytes)
				return bad(err, errlen, "'%s': rss is given twice", tok);
			if (parse_size(tok + 4, &on->rss_bytes) || on->rss_bytes < 4096)
				return bad(err, errlen, "'%s': rss=SIZE takes a size of at least 4K in bytes, K, M, G or T "
							"(powers of 1024), e.g. 512M or 1.5G", tok);
		} else {
			return bad(err, errlen, "unknown trigger '%s'", tok);
		}
	}
	if (!on->oom && !pressure && !on->rss_bytes)
		return bad(err, errlen, "'%s' names no trigger", spec);
	return 0;
}

/* The mount point of the cgroup v2 hierarchy (controller NULL) or of the
 * v1 hierarchy holding `controller`, and the cgroup mounted there (root:
 * "/" unless only part of the hierarchy is, as in a container), from
 * /proc/self/mountinfo (proc(5): root and mount point are the 4th and 5th
 * fields; after " - ": type, source, options). */
static int cgroup_mount(const char *controller, char *out, size_t len, char *root, size_t rootlen)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, mnt[512], type[32], opts[512], rt[512];
	size_t cap = 0;
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (ret && getline(&line, &cap, f) > 0) {
		char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", rt, mnt) != 2 ||
		    sscanf(dash + 3, "%31s %*s %511s", type, opts) != 2)
			continue;
		if (!controller && !strcmp(type, "cgroup2"))
			ret = 0;
		if (controller && !strcmp(type, "cgroup")) {
			char *save = NULL;

			for (char *k = strtok_r(opts, ",", &save); k && ret; k = strtok_r(NULL, ",", &save))
				ret = strcmp(k, controller) ? ret : 0;
		}
		if (!ret) {
			snprintf(out, len, "%s", mnt);
			snprintf(root, rootlen, "%s", rt);
		}
	}
	free(line);
	fclose(f);
	return ret;
}

/* The file of `name` in pid's cgroup of the v1 hierarchy of `controller`
 * (or v2's, NULL) into out, if it exists.  Returns 0 or -ENOENT. */
static int cgroup_file(pid_t pid, const char *controller, const char *name, char *out, size_t len)
{
	char mnt[512], root[512], cg[1024], *rel = cg;
	size_t n;

	if (cgroup_mount(controller, mnt, sizeof(mnt), root, sizeof(root)) < 0 ||
	    proc_cgroup(pid, controller, cg, sizeof(cg)) < 0)
		return -ENOENT;
	/* the path is from the hierarchy's root, the mount shows `root` */
	n = strlen(root);
	if (strcmp(root, "/") && !strncmp(cg, root, n) && (cg[n] == '/' || !cg[n]))
		rel = cg + n;
	snprintf(out, len, "%s%s/%s", mnt, strcmp(rel, "/") ? rel : "", name);
	return access(out, R_OK) ? -ENOENT : 0;
}

/* The memory cgroup's limit, bytes, or 0 (none, or not readable): the
 * smallest of its own file's (`path`: DIR/memory.max or
 * DIR/memory.limit_in_bytes) and its ancestors' (a slice's MemoryMax=
 * bounds every unit in it), up to the hierarchy's root. */
static uint64_t memcg_limit(const char *path)
{
	char p[1024], name[64], *slash;
	uint64_t limit = 0;
	FILE *f;

	snprintf(p, sizeof(p), "%s", path);
	if (!*p || !(slash = strrchr(p, '/')))
		return 0;
	snprintf(name, sizeof(name), "%s", slash + 1);
	while ((f = fopen(p, "re"))) {
		char buf[64] = "";
		unsigned long long v;

		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
		/* "max" (v2), or v1's PAGE_COUNTER_MAX pages: no limit */
		if (sscanf(buf, "%llu", &v) == 1 && v < (1ull << 62) && (!limit || v < limit))
			limit = v;
		/* DIR/NAME -> parent of DIR/NAME */
		*strrchr(p, '/') = 0;
		if (!(slash = strrchr(p, '/')) || slash == p)
			break;
		snprintf(slash + 1, sizeof(p) - (size_t)(slash + 1 - p), "%s", name);
	}
	return limit;
}

static int read_rss(pid_t pid, uint64_t *bytes)
{
	char path[64];
	unsigned long long pages;
	FILE *f;
	int n;

	snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
	if (!(f = fopen(path, "re")))
		return -ESRCH;
	n = fscanf(f, "%*u %llu", &pages);
	fclose(f);
	if (n != 1)
		return -ESRCH;
	*bytes = pages * (uint64_t)sysconf(_SC_PAGESIZE);
	return 0;
}

static void psi_note(struct census_watch *w, double now);

static double mib(uint64_t bytes)
{
	return (double)bytes / 1048576.0;
}

/* pressure: a PSI trigger on the target's cgroup's memory.pressure, else
 * the whole system's. */
static int watch_pressure(struct census_watch *w, double pct, char *err, size_t errlen)
{
	char req[64], dir[512];
	unsigned stall = (unsigned)(pct / 100.0 * PSI_WINDOW_US);
	struct stat here;

	if (cgroup_file(w->pid, NULL, "memory.pressure", w->psi_path, sizeof(w->psi_path)) < 0) {
		snprintf(w->psi_why, sizeof(w->psi_why), "the target is in no cgroup v2 group with a memory.pressure");
	} else {
		/* the hierarchy's root group, whose pressure is every task's
		 * (kernel/cgroup/cgroup.c cgroup_psi: psi_system): kernfs gives
		 * the root directory inode 1 (fs/kernfs/dir.c, the root's id);
		 * a container's top group (cgroup namespace, a bind-mounted
		 * subtree) is mounted there too but has another */
		snprintf(dir, sizeof(dir), "%s", w->psi_path);
		*strrchr(dir, '/') = 0;
		if (stat(dir, &here) == 0 && here.st_ino == 1)
			snprintf(w->psi_why, sizeof(w->psi_why), "the target's cgroup v2 group is the root, %s", dir);
		else if ((w->psi_fd = open(w->psi_path, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0)
			/* read-only (systemd's ProtectControlGroups=), ... */
			snprintf(w->psi_why, sizeof(w->psi_why), "%s cannot be opened for writing: %s", w->psi_path,
				 strerror(errno));
	}
	if (w->psi_fd < 0) {
		w->psi_system = true;
		snprintf(w->psi_path, sizeof(w->psi_path), "/proc/pressure/memory");
		w->psi_fd = open(w->psi_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	}
	if (w->psi_fd < 0) {
		int e = errno;

		snprintf(err, errlen, "--on pressure: cannot open %s: %s%s (tried because %s)", w->psi_path, strerror(e),
			 e == ENOENT ? " (this kernel has no PSI: it needs CONFIG_PSI, and psi=1 where it is "
				       "off by default)" : "", w->psi_why);
		return -e;
	}
	snprintf(req, sizeof(req), "some %u %u", stall ? stall : 1, PSI_WINDOW_US);
	if (write(w->psi_fd, req, strlen(req) + 1) < 0) {
		int e = errno;

		snprintf(err, errlen, "--on pressure: %s refuses the trigger '%s': %s", w->psi_path, req, strerror(e));
		close(w->psi_fd);
		w->psi_fd = -1;
		return -e;
	}
	return 0;
}

int census_watch_start(struct census_watch *w, const struct census_on *on, pid_t pid, const struct sampler *smp,
		       bool serve, char *msg, size_t len)
{
	uint64_t limit;
	char lim[96] = "", sz[32], why[sizeof(w->psi_why) + 8] = "";
	size_t n;

	*w = (struct census_watch){ .pid = pid, .psi_fd = -1 };
	if (on->oom && !sampler_watches_oom(smp)) {
		snprintf(msg, len, "--on oom: this kernel's oom:mark_victim tracepoint cannot be attached");
		return -ENOTSUP;
	}
	if (on->pressure_pct > 0) {
		int ret = watch_pressure(w, on->pressure_pct, msg, len);

		if (ret < 0)
			return ret;
		psi_note(w, mono_now());
		snprintf(why, sizeof(why), ": %s)", w->psi_why);
	}
	if (cgroup_file(pid, "memory", "memory.limit_in_bytes", w->memcg, sizeof(w->memcg)) < 0 &&
	    cgroup_file(pid, NULL, "memory.max", w->memcg, sizeof(w->memcg)) < 0)
		w->memcg[0] = 0;
	if ((limit = memcg_limit(w->memcg)))
		snprintf(lim, sizeof(lim), " (its memory cgroup's limit: %.1f MiB)", mib(limit));
	read_rss(pid, &w->rss_bytes);
	w->rss_armed = w->rss_bytes < on->rss_bytes;
	w->next_rss = mono_now() + RSS_PERIOD_S;
	n = (size_t)snprintf(msg, len, "the census will be written when%s%s%s%s%s%s",
			     on->oom ? " the OOM killer chooses the target" : "", on->oom ? lim : "",
			     on->pressure_pct > 0 && on->oom ? ", or when" : "",
			     on->pressure_pct <= 0 ? "" : w->psi_system ? " the whole system's memory pressure is high (PSI, "
									  : " its memory pressure is high (PSI, ",
			     on->pressure_pct > 0 ? w->psi_path : "", on->pressure_pct <= 0 ? "" : w->psi_system ? why : ")");
	if (on->rss_bytes && n < len)
		n += (size_t)snprintf(msg + n, len - n, "%s its RSS reaches %s (now %.1f MiB%s)",
				      on->oom || on->pressure_pct > 0 ? ", or when" : "",
				      report_format_bytes((double)on->rss_bytes, sz, sizeof(sz)),
				      mib(w->rss_bytes), w->rss_armed ? "" : ": above already, so it must fall below first");
	if (n < len)
		snprintf(msg + n, len - n, "%s", serve ? "; a census at each trigger" : "; Ctrl-C ends it with no census");
	w->on = on;
	return 0;
}

int census_watch_fd(const struct census_watch *w)
{
	return w->psi_fd;
}

/* The PSI file's "some" line: avg10 (%) and total (microseconds); -1 if
 * unreadable.  Format: Linux Documentation/accounting/psi.rst. */
static int psi_some(const char *path, double *avg10, uint64_t *total_us)
{
	char buf[256] = "";
	FILE *f = fopen(path, "re");
	unsigned long long t;
	int ret = -1;

	if (f) {
		if (fgets(buf, sizeof(buf), f) &&
		    sscanf(buf, "some avg10=%lf avg60=%*f avg300=%*f total=%llu", avg10, &t) == 2) {
			*total_us = t;
			ret = 0;
		}
		fclose(f);
	}
	return ret;
}

/* A reading of "some total=" into the ring (census_watch.psi_seen). */
static void psi_note(struct census_watch *w, double now)
{
	double avg10;
	uint64_t total;
	unsigned n = sizeof(w->psi_seen) / sizeof(w->psi_seen[0]);

	if (psi_some(w->psi_path, &avg10, &total) == 0) {
		w->psi_seen[w->psi_next % n].at = now;
		w->psi_seen[w->psi_next % n].total_us = total;
		w->psi_next++;
	}
}

/* "some: stalled S ms of the last T s (P %), avg10=A %" into buf: the stall
 * since the newest reading at least a PSI window old (else the oldest). */
static void psi_stall(struct census_watch *w, double now, char *buf, size_t len)
{
	unsigned n = sizeof(w->psi_seen) / sizeof(w->psi_seen[0]), i, best = n;
	double avg10 = 0, win = PSI_WINDOW_US / 1e6;
	uint64_t total = 0;

	if (psi_some(w->psi_path, &avg10, &total) < 0) {
		snprintf(buf, len, "unreadable");
		return;
	}
	for (i = 0; i < n && i < w->psi_next; i++) {
		unsigned k = (w->psi_next - 1 - i) % n;

		best = k;
		if (now - w->psi_seen[k].at >= win)
			break;
	}
	if (best == n || total < w->psi_seen[best].total_us || now <= w->psi_seen[best].at) {
		snprintf(buf, len, "some avg10=%.2f %%", avg10);
		return;
	}
	snprintf(buf, len, "some: stalled %.0f ms of the last %.2f s (%.0f %%), avg10=%.2f %%",
		 (double)(total - w->psi_seen[best].total_us) / 1e3, now - w->psi_seen[best].at,
		 (double)(total - w->psi_seen[best].total_us) / 1e4 / (now - w->psi_seen[best].at), avg10);
}

bool census_watch_check(struct census_watch *w, const struct sampler *smp, short psi_revents)
{
	const struct census_on *on = w->on;
	double now = mono_now(), read_at = w->next_rss - RSS_PERIOD_S;
	uint64_t limit;
	size_t n;

	if (w->fired)
		return true;
	if (on->oom && !w->oom_done && sampler_oom_victim_ns(smp, w->pid)) {
		w->kind = "oom";
		/* its RSS now is what the OOM reaper left: say the last reading */
		snprintf(w->what, sizeof(w->what), "OOM kill: the kernel's OOM killer chose the target "
						   "(oom:mark_victim); its RSS was %.1f MiB %.0f ms before",
			 mib(w->rss_bytes), (now - read_at) * 1e3);
		w->fired = true;
	}
	if (!w->fired && now >= w->next_rss && read_rss(w->pid, &w->rss_bytes) == 0) {
		w->next_rss = now + RSS_PERIOD_S;
		if (w->psi_fd >= 0)
			psi_note(w, now);
		if (on->rss_bytes && w->rss_bytes >= on->rss_bytes && w->rss_armed && now >= w->rss_quiet_until) {
			char sz[32];

			w->kind = "rss";
			snprintf(w->what, sizeof(w->what), "RSS trigger: the target's RSS reached %.1f MiB (rss=%s)",
				 mib(w->rss_bytes), report_format_bytes((double)on->rss_bytes, sz, sizeof(sz)));
			w->fired = true;
		}
		w->rss_armed = w->rss_armed || w->rss_bytes < on->rss_bytes;
	}
	if (w->psi_fd >= 0 && (psi_revents & (POLLERR | POLLNVAL))) {
		/* its cgroup was removed (kernfs): pressure is no longer watched */
		fprintf(stderr, "camlheap: --on pressure: %s is gone; memory pressure no longer watched\n", w->psi_path);
		close(w->psi_fd);
		w->psi_fd = -1;
	}
	if (!w->fired && w->psi_fd >= 0 && (psi_revents & POLLPRI) && now >= w->psi_quiet_until) {
		char stall[160];

		psi_stall(w, now, stall, sizeof(stall));
		w->kind = "pressure";
		snprintf(w->what, sizeof(w->what), "pressure trigger: tasks of %s stalled on memory %g %% of %u s or "
						   "more (PSI %s: %s); its RSS %.1f MiB",
			 w->psi_system ? "the system" : "the target's cgroup", on->pressure_pct,
			 PSI_WINDOW_US / 1000000, w->psi_path, stall, mib(w->rss_bytes));
		w->fired = true;
	}
	if (!w->fired)
		return false;
	n = strlen(w->what);
	if ((limit = memcg_limit(w->memcg)))
		snprintf(w->what + n, sizeof(w->what) - n, ", memory cgroup limit %.1f MiB", mib(limit));
	return true;
}

void census_watch_rearm(struct census_watch *w)
{
	if (!strcmp(w->kind, "oom"))
		w->oom_done = true;
	if (!strcmp(w->kind, "rss")) {
		w->rss_armed = false;
		w->rss_quiet_until = mono_now() + CENSUS_ON_MIN_INTERVAL_S;
	}
	if (!strcmp(w->kind, "pressure"))
		w->psi_quiet_until = mono_now() + CENSUS_ON_MIN_INTERVAL_S;
	w->fired = false;
}

bool census_watch_missed(struct census_watch *w, const char *reason)
{
	if (w->psi_fd >= 0)
		close(w->psi_fd);
	w->psi_fd = -1;
	if (!w->on) /* not started: said already */
		return true;
	if (w->fired)
		return false;
	fprintf(stderr, "camlheap: no census written: %s before any trigger (--on %s) fired\n", reason, w->on->spec);
	return true;
}
