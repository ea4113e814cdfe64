/* record.h -- `camlheap record`: attach to a process (or launch a command
 * stopped at exec), sample until Ctrl-C / SIGTERM / --duration / target
 * exit, then write the report.
 */
#ifndef CH_RECORD_H
#define CH_RECORD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "output/report.h"
#include "cmd/top.h"
#include "cmd/census_on.h"

/* --executor: who performs the young_limit writes of minor-heap sampling. */
enum record_executor {
	RECORD_EXEC_AUTO = 0,  /* register if this kernel lets uprobes change registers, else kernel if it allows
				* bpf_probe_write_user, else ptrace */
	RECORD_EXEC_KERNEL,
	RECORD_EXEC_PTRACE,
	RECORD_EXEC_OBSERVE,   /* never write: no minor-heap sampling */
	RECORD_EXEC_REGISTER,  /* the probe changes the register the runtime publishes (collect/regexec.h) */
};

struct record_opts {
	pid_t pid;                 /* -p PID, or 0 with argv */
	char **argv;               /* launch mode: NULL-terminated command, or NULL */
	double rate;               /* lambda, samples per word */
	bool rate_given;           /* --rate was given */
	double duration_s;         /* 0: until stopped */
	const char *output;        /* file, or NULL / "-" for stdout */
	enum report_format format; /* REPORT_MEMTRACE: the recording file (recording.h) */
	int top;
	unsigned max_frames;
	enum record_executor executor;
	bool keep_cpus_awake;      /* ptrace executor: SCHED_IDLE spinners keep vCPUs from halting */
	bool quiet;                /* nothing on stderr but errors (-q; launch mode without --verbose) */
	bool verbose;              /* --verbose: camlheap's messages on stderr in launch mode too */
	/* census (README *Census*) */
	bool live;                 /* record --live: per-site live and peak in the text report */
	int value;                 /* enum report_value: what the report ranks / sums */
	bool format_given;         /* --format was given (else -o FILE writes the recording) */
	bool top_given;            /* --top (or --by) was given */
	bool by_stack;             /* --by stack: the text report ranks whole callstacks */
	bool no_census;            /* --no-census: do not follow sampled blocks */
	bool by_domain;            /* --by-domain: sites split by allocating domain (OCaml 5) */
	uint32_t max_tracked;      /* --max-tracked: sampled blocks followed in the major heap at once;
				    * 0: sampler_default_max_tracked(rate) */
	bool census;               /* `camlheap census`: write the census report */
	int wait_major;            /* census: stop once this many full major cycles ended after attach (0: no) */
	struct census_on on;       /* census --on: write it when one of these triggers fires (census_on.h) */
	bool exact;                /* census --exact: walk the whole major heap instead (cmd/census_exact.h) */
	bool retainers;            /* census --retainers: and trace it from the roots */
	double max_pause_s;        /* census --exact, --retainers: the longest stop of the target, seconds */
	double max_wait_s;         /* census --exact, --retainers: how long to look for a consistent stop, seconds */
	bool malloc;               /* --malloc: sample libc malloc/free and anonymous mmap too */
	double budget_sps;         /* --budget: samples kept per second at most (0: no budget) */
	/* `camlheap serve`'s worker (serve.h): one per target process */
	bool serve;                /* a service worker: commands on serve_fd, profiles into outdir */
	int serve_fd;              /* SOCK_SEQPACKET to the service (protocol: serve.h) */
	double interval_s;         /* a heap profile and a census into outdir every this many seconds */
	const char *outdir;        /* the process's directory of periodic profiles */
	bool base_nice_given;      /* --base-nice: the worker starts at PROC_ATTACH_NICE (the service's) ... */
	int base_nice;             /* ... and returns to this nice value after its attach */
	bool trap_given;           /* --trap-cost: the service's calibration (trap_cost_calibrate, once per host) ... */
	double trap_ns[3];         /* ... emulated, stepped, return trap, ns */
	const char *kernel_btf;    /* --kernel-btf: the service's cut of the kernel's BTF (sampler_config) */
	/* `camlheap top` (top.h): the live view instead of a report */
	const struct top_opts *topo;
};

/* Run a recording.  Returns the process exit status for camlheap: in launch
 * mode the command's status (128 + signal if it was killed), otherwise 0 on
 * success; 2 for a bad target or a set-up error (message on stderr), 1 if
 * the report could not be written. */
int record_run(const struct record_opts *o);

#endif
