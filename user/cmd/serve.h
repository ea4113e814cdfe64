/* serve.h -- `camlheap serve`: a service that profiles every process of the
 * configured targets continuously (README *Run it as a service*).
 *
 * Layout: one supervisor process (config, discovery of new processes by a
 * BPF program on the sched_process_exec tracepoint, the HTTP endpoint,
 * budgets, file retention, systemd notifications) and one worker per target
 * process: `camlheap record -p PID` in worker mode (record.h: serve,
 * serve_fd, interval_s, outdir), so that a worker's failure stays its own
 * and the target is handled exactly as by `camlheap record`.
 *
 * Worker protocol: one text message per SOCK_SEQPACKET packet, fields
 * separated by single spaces, paths last (they may hold spaces).
 *   service -> worker
 *     "snap ID heap|allocs|census PATH"  write a pprof profile (default sample
 *                                     type inuse_space / alloc_space) or the
 *                                     text census to PATH now
 *     "trace ID SECONDS PATH"         write a memtrace recording of the next
 *                                     SECONDS to PATH
 *     "budget SPS"                    samples kept per second at most (0: none)
 *   worker -> service
 *     "attached VERSION EXECUTOR LAMBDA"   once the probes are in
 *     "stats K=V..."                  every second: samples (kept, total),
 *                                     weighted (samples at lambda they stand
 *                                     for), events, dropped, stops (ptrace
 *                                     executor), shift, bpf_ns (time in BPF
 *                                     programs), trap_ns (in the traps of
 *                                     the probe hits, collect/probe_cost.h),
 *                                     exec_ns (threads stopped for the
 *                                     executor, trap to resumption), cpu_ns
 *                                     (the worker's own)
 *     "wrote PATH"                    a periodic file is complete
 *     "done ID 0" | "done ID ERRNO MESSAGE"  a snap or trace finished
 */
#ifndef CH_SERVE_H
#define CH_SERVE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* One [target:NAME] section of the configuration file. */
struct serve_target {
	char *name;        /* NAME: [A-Za-z0-9_.-]+, the output subdirectory */
	char *exe;         /* exe = PATH: /proc/PID/exe must be this file (realpath), or NULL */
	char *unit;        /* unit = NAME.service: the process's cgroup is that unit's, or NULL */
	char *cgroup;      /* cgroup = /PATH: the process's cgroup (v2) is PATH or below it, or NULL */
	char *pidfile;     /* pidfile = PATH: the PID written there (read every second), or NULL */
	double rate;       /* rate = LAMBDA (default: [serve] rate) */
	double budget;     /* budget = SAMPLES_PER_SECOND per process (0: none) */
	bool malloc;       /* malloc = true: --malloc */
	char *executor;    /* executor = auto|kernel|ptrace|observe (default auto) */
	unsigned max_depth;/* max-depth = FRAMES of a stack walk, 1..CH_MAX_FRAMES (default: [serve] max-depth) */
	char *census_on;   /* census-on = TRIGGERS (census --on's: oom, pressure[=PCT], rss=SIZE), or NULL */
};

/* The configuration file: GLib key file syntax (INI-like; `man camlheap.conf`). */
struct serve_config {
	char *output;      /* [serve] output = DIR (default /var/lib/camlheap) */
	double interval_s; /* interval = SECONDS between periodic profiles (default 60) */
	unsigned keep;     /* keep = N: newest files kept per process and type (default 10) */
	uint64_t keep_bytes; /* keep-bytes = SIZE[K|M|G]: the output directory's cap, bytes (default 1G) */
	char *listen;      /* listen = HOST:PORT of the HTTP endpoint, or "none" (default 127.0.0.1:6061) */
	char *socket;      /* socket = PATH of a Unix socket serving the same endpoint, or NULL */
	double rate;       /* rate = LAMBDA for targets without their own (default 1e-5) */
	double host_budget;/* host-budget = SAMPLES_PER_SECOND over all processes (0: none) */
	unsigned max_processes; /* max-processes = N followed at once (default 256) */
	unsigned max_depth;/* max-depth = FRAMES for targets without their own (default 1024, record's) */
	struct serve_target *targets;
	size_t ntargets;
	char *warnings;    /* lines about things that parse but look wrong (an exe that does not exist, two
			    * targets with the same matchers), or NULL */
};

/* Parse the configuration file `path` into `c` (zeroed by the caller).
 * Unknown groups or keys, bad values, a target without any matcher, or
 * duplicate target names are errors.  Returns 0, or -EINVAL / -errno with
 * a message naming the file, group and key in err. */
int serve_config_load(const char *path, struct serve_config *c, char *err, size_t errlen);
void serve_config_free(struct serve_config *c);

/* Run the service until SIGTERM/SIGINT (SIGHUP reloads the configuration).
 * `interval_s` > 0 overrides the file's interval (seconds), at every load.
 * Returns the exit status: 0 after a clean shutdown, 2 for a bad
 * configuration or missing privileges (message on stderr). */
int serve_run(const char *config_path, double interval_s);

/* `camlheap status`: ask a running service (its Unix socket `socket`, or
 * the HTTP address `url` when socket is NULL) for /targets and print a
 * table.  Returns 0, or 1 with a message if the service cannot be reached. */
int serve_status(const char *socket, const char *url, bool json);

/* Send one protocol message (printf-formatted) on `fd`, a SOCK_SEQPACKET
 * socket, without blocking and without SIGPIPE.  Returns 0, -EMSGSIZE (over
 * 8191 bytes: nothing sent) or -errno (EAGAIN: the peer's queue is full,
 * the message is dropped). */
int serve_sendf(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Worker side (record.c): parse one service command.  Returns 0 and fills
 * the fields, or -EINVAL. */
struct serve_cmd {
	char verb[16];     /* "snap", "trace", "budget", "interval" */
	uint64_t id;
	char what[16];     /* snap: heap, allocs or census */
	double value;      /* trace: seconds; budget: samples per second; interval: seconds */
	char path[4096];
};
int serve_parse_cmd(const char *msg, size_t len, struct serve_cmd *c);

#endif
