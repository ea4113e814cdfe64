/* census_on.h -- `camlheap census --on TRIGGERS`: the census written at the
 * moment the target's memory runs out, not after a number of cycles.
 *
 * The census of sampled live blocks is camlheap's own (profile/), outside
 * the target, so it can be written when the target is killed for memory:
 * the triggers say when.
 *   oom           the kernel's OOM killer chose the target as its victim
 *                 (tracepoint oom:mark_victim, mm/oom_kill.c: a memory
 *                 cgroup's limit, v1 memory.limit_in_bytes or v2
 *                 memory.max, as systemd's MemoryMax= sets it, or the whole
 *                 system's memory).  It fires once SIGKILL has been sent:
 *                 the target allocates nothing more, and the census is
 *                 written from the samples as they stand at the kill.
 *   pressure[=P]  memory pressure: tasks of the target's cgroup v2 group
 *                 (/proc/PID/cgroup "0::"; where it has no memory.pressure
 *                 or cannot be written, as under systemd's
 *                 ProtectControlGroups=, the whole system's) stalled on memory at least P %
 *                 (default 10) of a 2 s window (without CAP_SYS_RESOURCE
 *                 the kernel takes multiples of 2 s only): a PSI trigger, "some" (Linux
 *                 Documentation/accounting/psi.rst, "Monitoring for
 *                 pressure thresholds"), on its memory.pressure, else on
 *                 /proc/pressure/memory.
 *   rss=SIZE      the target's resident set (/proc/PID/statm, read every
 *                 50 ms) rises from below SIZE to SIZE or more; SIZE in
 *                 bytes, with K, M, G or T (powers of 1024).
 * Several, comma-separated: the first to fire ends the census.
 */
#ifndef CH_CENSUS_ON_H
#define CH_CENSUS_ON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sampler;

struct census_on {
	bool set;               /* --on was given */
	bool oom;
	double pressure_pct;    /* > 0: the PSI threshold, % of 2 s stalled */
	uint64_t rss_bytes;     /* > 0: the resident-set threshold, bytes */
	char spec[128];         /* as given, for messages */
};

/* Parse "oom", "pressure", "pressure=PCT" (0 < PCT <= 100) and
 * "rss=SIZE" (SIZE >= 4K: parse_size's, a number with an optional K, M, G
 * or T and B), comma-separated (blanks around ',' and '=' ignored, one
 * between words kept, so "oom rss=1G" is refused; empty items skipped),
 * each at most once, into *on.
 * Returns 0, or -EINVAL with err set ("unknown trigger 'x': ..."). */
int census_on_parse(const char *spec, struct census_on *on, char *err, size_t errlen);

/* The triggers as they are watched on one target. */
struct census_watch {
	const struct census_on *on; /* set once census_watch_start succeeded */
	pid_t pid;
	int psi_fd;             /* the PSI trigger's file, polled for POLLPRI, or -1 */
	char psi_path[512];     /* its path */
	bool psi_system;        /* it is the whole system's: psi_why says why not the target's group's */
	char psi_why[640];
	char memcg[512];        /* the target's memory cgroup's limit file ("" if none found) */
	bool rss_armed;         /* the RSS was seen below rss_bytes since the start */
	uint64_t rss_bytes;     /* its last reading, bytes */
	double next_rss;        /* CLOCK_MONOTONIC s of the next reading */
	bool fired;
	const char *kind;       /* once fired: "oom", "rss" or "pressure" */
	char what[1024];        /* which trigger fired and the figures then */
	bool oom_done;          /* the OOM kill was reported (census_watch_rearm) */
	double rss_quiet_until, psi_quiet_until; /* CLOCK_MONOTONIC s: rss, pressure fire again from then on
						  * (census_watch_rearm); a crossing before is dropped */
	/* The PSI file's "some total=" (microseconds stalled, cumulative) read
	 * with the RSS, a ring of the last 2 s and more: the stall of the
	 * trigger's window is the difference (avg10 is recomputed every 2 s
	 * only, kernel/sched/psi.c, and reads 0 at a first stall). */
	struct { double at; uint64_t total_us; } psi_seen[64];
	unsigned psi_next;      /* the ring's next slot */
};

/* The shortest time between two censuses of the repeatable triggers (rss,
 * pressure) in camlheap serve, seconds. */
#define CENSUS_ON_MIN_INTERVAL_S 10.0

/* Start watching `pid` (attached: smp has the oom:mark_victim tracepoint
 * when sampler_watches_oom), for camlheap census or (serve: a service
 * worker, record --on) a recording that writes a census at every trigger.
 * Returns 0 with msg (len bytes) saying what is watched ("the census will
 * be written when ...": where pressure is read, whether the RSS is above
 * rss=SIZE already, then a crossing needs it to fall below first), or
 * -errno with msg saying why: oom without the tracepoint, pressure without
 * PSI (a kernel without CONFIG_PSI or booted psi=0), a PSI trigger refused. */
int census_watch_start(struct census_watch *w, const struct census_on *on, pid_t pid, const struct sampler *smp,
		       bool serve, char *msg, size_t len);

/* The fd to poll for POLLPRI (the pressure trigger), or -1. */
int census_watch_fd(const struct census_watch *w);

/* Has a trigger fired?  `psi_revents`: the poll's revents for
 * census_watch_fd.  Once true, w->what says which and the figures at that
 * moment ("the kernel's OOM killer chose the target (oom:mark_victim) at
 * RSS 251.2 MiB, memory cgroup limit 256.0 MiB"), and stays true. */
bool census_watch_check(struct census_watch *w, const struct sampler *smp, short psi_revents);

/* After a census written at w->kind (camlheap serve goes on following the
 * process): watch again, the OOM kill never again, rss once the RSS has
 * fallen below the threshold, the trigger that fired not for
 * CENSUS_ON_MIN_INTERVAL_S (each on its own clock). */
void census_watch_rearm(struct census_watch *w);

/* At the end: if no trigger fired, say so on stderr ("no census written:
 * target exited with status 0 before any trigger (--on oom) fired";
 * `reason` is how the recording ended) and return true (camlheap exits 1,
 * the output untouched); true too, silently, if census_watch_start failed
 * (w->on is then NULL).  Closes the PSI trigger either way. */
bool census_watch_missed(struct census_watch *w, const char *reason);

#endif
