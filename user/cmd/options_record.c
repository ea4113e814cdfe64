/* options_record.c -- the options of `camlheap record`, `census` and
 * `top` (options_internal.h), which all end in record_run (record.h).
 */
#define _GNU_SOURCE
#include "cmd/options_internal.h"

#include <argp.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "camlheap.h"
#include "cmd/census_exact.h"
#include "cmd/record.h"

static const char record_doc[] =
	"Sample the allocations of a running native OCaml program (4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4) the way Gc.Memprof does, "
	"from outside the process, and report which call stacks allocate its memory.\n"
	"\n"
	"  camlheap record -p PID [OPTIONS]\n"
	"  camlheap record [OPTIONS] -- COMMAND [ARGS...]\n"
	"\n"
	"Examples:\n"
	"  camlheap record -p 1234 --duration 30 -o heap.txt\n"
	"  camlheap record --rate 1e-4 --format collapsed -o alloc.folded -- ocamlopt.opt -c big.ml\n"
	"\n"
	"Stops on Ctrl-C, SIGTERM, --duration or when the target exits, then writes the report. "
	"In launch mode the command starts stopped at exec, runs once the probes are attached, keeps "
	"its stdin/stdout/stderr, and camlheap exits with its status. "
	"Every allocation is sampled: minor-heap ones by raising the runtime's young_limit so that the "
	"sampled word traps (an executor sees to it: where the kernel lets a uprobe change registers, the "
	"runtime publishes it itself; else the kernel writes it where it allows bpf_probe_write_user, else a "
	"ptrace stop of the allocating thread), direct major-heap, custom (out-of-heap) and unmarshalled ones "
	"through read-only probes. The report's first line names the executor that ran.";


static const struct argp_option record_options[] = {
	{ "pid", 'p', "PID", 0, "Attach to this running process", 0 },
	{ "rate", 'r', "LAMBDA", 0, "Samples per allocated word, 0 < LAMBDA <= 1 (default 1e-5, as Gc.Memprof)", 0 },
	{ "duration", 'd', "SECONDS", 0, "Stop after this many seconds", 0 },
	{ "output", 'o', "FILE", 0,
	  "Write to FILE (via a temporary file and rename; default: the text report on stdout): the "
	  "recording, a memtrace trace that `camlheap report FILE` renders in any format later and "
	  "memtrace_viewer opens, unless --format or the name (.txt .json .svg .pb.gz .pprof .folded "
	  ".collapsed) asks for a report",
	  0 },
	{ "format", 'f', "FORMAT", 0,
	  "text (default without -o), collapsed (flamegraph.pl / speedscope input, bytes), pprof (gzip-compressed "
	  "profile.proto: go tool pprof, Pyroscope, Parca; alloc_* and inuse_* sample types), json "
	  "(docs/json.md), svg (interactive flame graph) or memtrace (the recording, default with -o)",
	  0 },
	{ "top", 'n', "N", 0, "Entries in each table of the text report (default 20; 0: all)", 0 },
	{ "by", OPT_BY, "WHAT", 0,
	  "What the text report ranks: point (default: allocation points, each with its callers and heaviest "
	  "callstacks, then functions flat and cumulative) or stack (whole callstacks)", 0 },
	{ "quiet", 'q', NULL, 0, "Say nothing on stderr but errors (the default in launch mode)", 0 },
	{ "verbose", 'v', NULL, 0,
	  "Launch mode: say what camlheap does on stderr, which the command shares (by default nothing of "
	  "camlheap's reaches the command's stdout or stderr but errors, and the report without -o)", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "executor", OPT_EXECUTOR, "WHICH", 0,
	  "Who raises young_limit for minor-heap sampling: auto (default: register if the kernel allows it, "
	  "else kernel if allowed, else ptrace), register (nothing written: the probe changes the value the "
	  "runtime itself publishes; kernels whose uprobe programs may write registers, lockdown or not), "
	  "kernel (bpf_probe_write_user; refused under kernel lockdown), ptrace (camlheap traces the target's "
	  "threads: gdb/strace cannot attach meanwhile), observe (never write: no minor-heap sampling)",
	  0 },
	{ "keep-cpus-awake", OPT_KEEP_AWAKE, NULL, 0,
	  "ptrace executor: spin an idle-priority thread on every CPU while recording, so that a stopped "
	  "thread and the executor never wait for a halted (virtual) CPU to wake; costs no time to other "
	  "programs but shows the idle CPUs as busy",
	  0 },
	{ "live", OPT_LIVE, NULL, 0,
	  "Text report: per site, the estimated bytes still alive at the end and the peak live estimate "
	  "(sampled blocks are followed to their death by probing the GC)",
	  0 },
	{ "value", OPT_VALUE, "WHAT", 0,
	  "What the report ranks (text) or sums (collapsed, svg): alloc (default: bytes allocated), live (bytes "
	  "alive at the end) or peak (each site's peak live bytes)",
	  0 },
	{ "no-census", OPT_NO_CENSUS, NULL, 0, "Do not follow sampled blocks to their death (no live figures)", 0 },
	{ "by-domain", OPT_BY_DOMAIN, NULL, 0,
	  "OCaml 5: split every site by the domain that allocated (text, json, collapsed and svg roots, a pprof "
	  "label); a recording keeps the domain of every sample either way",
	  0 },
	{ "max-tracked", OPT_MAX_TRACKED, "N", 0,
	  "Sampled blocks followed in the major heap at once (default: those of a 16 GiB heap at the rate, "
	  "16384 to 262144, 32768 at 1e-5; 48 bytes of kernel memory each, allocated up front); beyond it "
	  "blocks are counted live and no longer followed",
	  0 },
	{ "malloc", OPT_MALLOC, NULL, 0,
	  "Also sample the program's own libc malloc/calloc/realloc/posix_memalign/aligned_alloc/memalign and "
	  "anonymous mmap (C stubs, C libraries), per byte at LAMBDA/8, with the OCaml stack that called into C, "
	  "followed to free/munmap; costs ~1-2 us per malloc and free call of the target (make bench measures it)",
	  0 },
	{ "budget", OPT_BUDGET, "SAMPLES_PER_S", 0,
	  "Overhead budget: keep at most this many samples per second; above it, samples are kept with "
	  "probability 2^-k (k raised at once, lowered again when calm), each kept one counting 2^k, so estimates "
	  "stay unbiased; the report says which lambdas were in force and how long",
	  0 },
	/* `camlheap serve`'s workers (serve.h) */
	{ "serve-fd", OPT_SERVE_FD, "FD", OPTION_HIDDEN, "Run as a camlheap serve worker on this socket", 0 },
	{ "interval", OPT_INTERVAL, "SECONDS", OPTION_HIDDEN, "Serve worker: periodic profiles", 0 },
	{ "outdir", OPT_OUTDIR, "DIR", OPTION_HIDDEN, "Serve worker: where periodic profiles go", 0 },
	{ "base-nice", OPT_BASE_NICE, "NICE", OPTION_HIDDEN, "Serve worker: the nice value to return to after the attach",
	  0 },
	{ "trap-cost", OPT_TRAP_COST, "E,S,R", OPTION_HIDDEN,
	  "Serve worker: the service's trap-cost calibration, ns (emulated, stepped, return)", 0 },
	{ "kernel-btf", OPT_KERNEL_BTF, "FILE", OPTION_HIDDEN,
	  "Serve worker: the kernel types the BPF object reads (the service's sampler_kernel_btf)", 0 },
	{ "on", OPT_ON, "TRIGGERS", 0,
	  "At each trigger (as census --on: oom, pressure[=PCT], rss=SIZE) also write a census and heap profile, "
	  "census-STAMP-TRIGGER.txt and heap-STAMP-TRIGGER.pb.gz, beside -o FILE", 0 },
	{ 0 }
};

static const char census_doc[] =
	"Take a census of the live sampled heap of a running native OCaml program (4.12, 4.13, 4.14, 5.1, 5.2, 5.3, 5.4): attach, "
	"sample its allocations as `record` does, follow every sampled block until the GC frees it, and "
	"after the next completed major cycle (or --wait-major N cycles, or --duration) print what is still "
	"alive, by allocation site: estimated live bytes with a 95 % interval, live blocks, median age in "
	"major collections, and a leak-suspect score (sites that keep allocating blocks that never die). "
	"Blocks allocated before camlheap attached are not sampled, so not in the census.\n"
	"\n"
	"  camlheap census -p PID [--wait-major N] [--duration SECONDS] [OPTIONS]\n"
	"\n"
	"With --exact (OCaml 4.12 to 4.14), no sampling: the program is stopped at a moment when no thread is in "
	"its runtime's memory manager, every block of its major heap is counted (words and blocks by tag, size and "
	"custom type, equal to Gc.stat's), and it runs on; the pause is reported and bounded by --max-pause. "
	"Nothing is written into the program. --retainers also traces the heap from its roots in that pause: "
	"what is reachable, and what each group of roots (a module's globals, a function's stack frame, the C "
	"global roots, ...) alone keeps alive.\n"
	"\n"
	"With --retainers and no --exact, the sampled census as above, then in the same way a stop at its end "
	"and a trace from the roots: under each site, the paths from the roots that keep its live sampled "
	"blocks alive (the root, the blocks on the way by tag and size, the stdlib's containers by their shape), "
	"grouped by shape.\n"
	"\n"
	"With --on, the census is written at the moment the program's memory runs out: when the kernel's OOM "
	"killer chooses it (oom: the census is that of the kill), when its memory pressure rises (pressure), or "
	"when its RSS reaches a size (rss=SIZE). Attach early: only blocks allocated since are in it. Exit 1, "
	"nothing written, if the program ends (or --duration passes, or Ctrl-C) before a trigger fires.\n"
	"\n"
	"Examples:\n"
	"  camlheap census -p 1234 --rate 1e-4 --wait-major 3 -o census.txt\n"
	"  camlheap census -p 1234 --on oom,rss=2G -o at-oom.txt\n"
	"  camlheap census -p 1234 --exact -o heap.json\n"
	"  camlheap census -p 1234 --exact --retainers --max-pause 5\n"
	"  camlheap census -p 1234 --retainers --wait-major 2 --max-pause 5 -o paths.svg";

static const struct argp_option census_options[] = {
	{ "pid", 'p', "PID", 0, "The running process (required)", 0 },
	{ "rate", 'r', "LAMBDA", 0, "Samples per allocated word, 0 < LAMBDA <= 1 (default 1e-4)", 0 },
	{ "wait-major", OPT_WAIT_MAJOR, "N", OPTION_ARG_OPTIONAL,
	  "Stop once N full major cycles (seen from their start) have ended (default 1; leak scores need 3)", 0 },
	{ "duration", 'd', "SECONDS", 0,
	  "Stop after this many seconds (with --wait-major: whichever comes first; alone: no cycle count)", 0 },
	{ "output", 'o', "FILE", 0, "Write the census to FILE (via a temporary file and rename; default stdout)", 0 },
	{ "top", 'n', "N", 0, "Entries shown (default 20; 0: all)", 0 },
	{ "by", OPT_BY, "WHAT", 0, "As for record: point (default) or stack", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "executor", OPT_EXECUTOR, "WHICH", 0, "As for record: auto, register, kernel, ptrace or observe", 0 },
	{ "max-tracked", OPT_MAX_TRACKED, "N", 0, "As for record (default from the rate, 16384 to 262144)", 0 },
	{ "malloc", OPT_MALLOC, NULL, 0, "As for record: count the program's own malloc and anonymous mmap too", 0 },
	{ "quiet", 'q', NULL, 0, "Say nothing on stderr but errors", 0 },
	{ "on", OPT_ON, "TRIGGERS", 0,
	  "Follow the program until a trigger fires, then write the census as it stands: oom (the kernel's OOM "
	  "killer chose it), pressure[=PCT] (memory pressure: its cgroup's tasks stalled PCT % of 2 s, default 10), rss=SIZE (its RSS "
	  "reaches SIZE: 512M, 2G); comma-separated, the first ends it", 0 },
	{ "exact", OPT_EXACT, NULL, 0,
	  "Count every block of the major heap, the program stopped meanwhile (OCaml 4.12-4.14; no sampling)", 1 },
	{ "retainers", OPT_RETAINERS, NULL, 0,
	  "At the census's end, stop the program and trace its heap from the roots (OCaml 4.12-4.14): under each "
	  "site, the paths from the roots that keep its sampled blocks alive. With --exact: what is reachable and "
	  "what each group of roots retains", 1 },
	{ "max-pause", OPT_MAX_PAUSE, "SECONDS", 0,
	  "--exact, --retainers: stop the walk once the program was stopped this long (default 1; --exact then "
	  "writes nothing and exits 1, a sampled census goes without paths)", 1 },
	{ "max-wait", OPT_MAX_WAIT, "SECONDS", 0,
	  "--exact, --retainers: look this long for a moment outside the memory manager (default 5)", 1 },
	{ "format", 'f', "FORMAT", 0, "text (default) or json (also from -o NAME.json; JSON: docs/json.md)", 1 },
	{ 0 }
};

/* -o FILE without --format: the report its name asks for (.txt, .json,
 * .svg, .pb.gz / .pprof, .folded / .collapsed), else the recording. */
static enum report_format format_of_name(const char *path)
{
	static const struct { const char *ext; enum report_format f; } exts[] = {
		{ ".txt", REPORT_TEXT }, { ".json", REPORT_JSON }, { ".svg", REPORT_SVG },
		{ ".pb.gz", REPORT_PPROF }, { ".pprof", REPORT_PPROF }, { ".folded", REPORT_COLLAPSED },
		{ ".collapsed", REPORT_COLLAPSED }, { ".dot", REPORT_DOT }, { ".gv", REPORT_DOT },
	};
	size_t n = strlen(path);

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t e = strlen(exts[i].ext);

		if (n > e && !strcmp(path + n - e, exts[i].ext))
			return exts[i].f;
	}
	return REPORT_MEMTRACE;
}

/* ARGP_KEY_ARG: census's `--wait-major N`, else where the command to
 * launch starts. */
static void record_parse_arg(struct record_opts *o, char *arg, struct argp_state *state)
{
	long v;

	/* `--wait-major N` (argp only takes `--wait-major=N` for an
	 * optional argument) */
	if (o->census && state->next >= 2 && !strcmp(state->argv[state->next - 2], "--wait-major")) {
		if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --wait-major '%s' (1..1000000 cycles)", arg);
		o->wait_major = (int)v;
		return;
	}
	/* The command starts at the first non-option; its own options
	 * are not ours. */
	o->argv = &state->argv[state->next - 1];
	state->next = state->argc;
}

/* ARGP_KEY_END: the checks on the options taken together, and the
 * defaults that depend on them. */
static void record_parse_end(struct record_opts *o, struct argp_state *state)
{
	if (o->census) {
		if (!o->pid || o->argv)
			argp_error(state, "census takes -p PID (a running process), and no command");
		if (!o->format_given && o->output && strcmp(o->output, "-")) {
			o->format = format_of_name(o->output);
			if (o->format == REPORT_MEMTRACE) /* no known extension */
				o->format = REPORT_TEXT;
		}
		if (o->format != REPORT_TEXT && o->format != REPORT_JSON &&
		    !((o->format == REPORT_DOT || o->format == REPORT_SVG) && o->retainers && !o->exact))
			argp_error(state, "census writes text or json (-o NAME.txt or NAME.json, or --format); with "
					  "--retainers (not --exact) also the paths as a graph: dot or svg");
		if (o->exact) {
			if (o->wait_major || o->duration_s > 0 || o->malloc || o->by_stack || o->max_tracked ||
			    o->rate_given || o->executor || o->on.set)
				argp_error(state, "--exact takes no --rate, --wait-major, --duration, --malloc, --by, "
						  "--executor, --max-tracked or --on: it samples nothing");
			return;
		}
		if ((o->max_pause_s > 0 || o->max_wait_s > 0) && !o->retainers)
			argp_error(state, "--max-pause and --max-wait are --exact and --retainers options");
		if (o->retainers && o->on.set)
			argp_error(state, "--retainers traces the heap at the census's end: not with --on");
		if (o->retainers && !(o->max_pause_s > 0))
			o->max_pause_s = 1.0;
		if (o->retainers && !(o->max_wait_s > 0))
			o->max_wait_s = 5.0;
		if (o->on.set && o->wait_major)
			argp_error(state, "--on ends the census at its trigger: give no --wait-major (--duration: the "
					  "longest wait)");
		if (o->value || o->live || o->no_census)
			argp_error(state, "--live, --value and --no-census are record options");
		/* default: the next completed major cycle */
		if (!o->wait_major && !(o->duration_s > 0) && !o->on.set)
			o->wait_major = 1;
		return;
	}
	if (o->wait_major)
		argp_error(state, "--wait-major is a census option");
	if (o->quiet && o->verbose)
		argp_error(state, "give -q or --verbose, not both");
	/* the command's streams are its own: camlheap says nothing there
	 * unless asked */
	if (o->argv && !o->verbose)
		o->quiet = true;
	if (o->serve && (!o->pid || !o->outdir))
		argp_error(state, "--serve-fd is for camlheap serve's workers (-p PID --outdir DIR)");
	if (o->on.set && o->no_census)
		argp_error(state, "--on writes censuses: drop --no-census");
	if (!o->format_given && o->output && strcmp(o->output, "-"))
		o->format = format_of_name(o->output);
	if (o->format == REPORT_DOT)
		argp_error(state, "dot is census --retainers' graph of paths; record writes text, collapsed, pprof, json, "
				  "svg or memtrace");
	if (o->value && (o->format == REPORT_PPROF || o->format == REPORT_JSON || o->format == REPORT_MEMTRACE))
		argp_error(state, "--value is for text, collapsed and svg output (pprof, json and the recording carry "
				  "every value: camlheap report FILE --value ...)");
	if (o->no_census && (o->live || o->value))
		argp_error(state, "--no-census gives no live figures: drop --live/--value");
	if (o->format == REPORT_MEMTRACE && (!o->output || !strcmp(o->output, "-")) && isatty(1))
		argp_error(state, "--format memtrace writes a binary file: give -o FILE");
	if (o->argv && o->format != REPORT_TEXT && (!o->output || !strcmp(o->output, "-")))
		argp_error(state, "the command shares camlheap's stdout, so its own output would mix into this "
				  "format: give -o FILE");
	if (o->format == REPORT_MEMTRACE && (o->live || o->top_given))
		argp_error(state, "--live, --top and --by shape the text report; the recording keeps everything: use "
				  "them with `camlheap report FILE` (--value live, --top N, --by stack)");
	if (!o->pid && !o->argv)
		argp_error(state, "nothing to profile: give -p PID or -- COMMAND [ARGS...]");
	if (o->pid && o->argv)
		argp_error(state, "give either -p PID or a command, not both");
}

/* census's own options (--exact, --retainers, --on, --max-pause,
 * --max-wait, --wait-major); false for any other key. */
static bool census_parse(int key, char *arg, struct record_opts *o, struct argp_state *state)
{
	long v;

	switch (key) {
	case OPT_EXACT:
		o->exact = true;
		break;
	case OPT_RETAINERS:
		o->retainers = true;
		break;
	case OPT_ON: {
		char err[512];

		if (census_on_parse(arg, &o->on, err, sizeof(err)) < 0)
			argp_error(state, "%s", err);
		break;
	}
	case OPT_MAX_PAUSE:
	case OPT_MAX_WAIT: {
		double *d = key == OPT_MAX_PAUSE ? &o->max_pause_s : &o->max_wait_s;

		if (parse_double(arg, d) || !(*d > 0 && *d <= 3600))
			argp_error(state, "invalid %s '%s': seconds, > 0 and <= 3600",
				   key == OPT_MAX_PAUSE ? "--max-pause" : "--max-wait", arg);
		break;
	}
	case OPT_WAIT_MAJOR:
		if (!arg)
			v = 1;
		else if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --wait-major '%s' (1..1000000 cycles)", arg);
		o->wait_major = (int)v;
		break;
	default:
		return false;
	}
	return true;
}

static error_t record_parse(int key, char *arg, struct argp_state *state)
{
	struct record_opts *o = state->input;
	long v;

	switch (key) {
	case 'p':
		if (parse_long(arg, &v) || v <= 0 || v > INT_MAX)
			argp_error(state, "invalid PID '%s'", arg);
		o->pid = (pid_t)v;
		break;
	case 'r':
		if (parse_double(arg, &o->rate) || !(o->rate > 0 && o->rate <= 1))
			argp_error(state, "invalid rate '%s': a number of samples per word in (0, 1], e.g. 1e-4", arg);
		o->rate_given = true;
		break;
	case 'd':
		if (parse_double(arg, &o->duration_s) || !(o->duration_s > 0))
			argp_error(state, "invalid duration '%s': seconds, > 0", arg);
		break;
	case 'o':
		o->output = arg;
		break;
	case 'f':
		if (parse_format(arg, &o->format, true) < 0)
			argp_error(state, "unknown format '%s' (text, collapsed, pprof, json, svg or memtrace; census: text, "
					  "json, and with --retainers dot or svg)", arg);
		o->format_given = true;
		break;
	case 'n':
		o->top = parse_top(state, arg);
		o->top_given = true;
		break;
	case OPT_BY:
		o->by_stack = parse_by(state, arg);
		o->top_given = true; /* shapes the text report, as --top */
		break;
	case OPT_MAX_DEPTH:
		if (parse_long(arg, &v) || v < 1 || v > CH_MAX_FRAMES)
			argp_error(state, "invalid --max-depth '%s' (1..%d)", arg, CH_MAX_FRAMES);
		o->max_frames = (unsigned)v;
		break;
	case OPT_EXECUTOR:
		if (!strcmp(arg, "auto"))
			o->executor = RECORD_EXEC_AUTO;
		else if (!strcmp(arg, "kernel"))
			o->executor = RECORD_EXEC_KERNEL;
		else if (!strcmp(arg, "ptrace"))
			o->executor = RECORD_EXEC_PTRACE;
		else if (!strcmp(arg, "observe"))
			o->executor = RECORD_EXEC_OBSERVE;
		else if (!strcmp(arg, "register"))
			o->executor = RECORD_EXEC_REGISTER;
		else
			argp_error(state, "unknown executor '%s' (auto, register, kernel, ptrace or observe)", arg);
		break;
	case OPT_KEEP_AWAKE:
		o->keep_cpus_awake = true;
		break;
	case OPT_LIVE:
		o->live = true;
		break;
	case OPT_VALUE:
		if (parse_value(arg, &o->value) < 0)
			argp_error(state, "unknown --value '%s' (alloc, live or peak)", arg);
		break;
	case OPT_NO_CENSUS:
		o->no_census = true;
		break;
	case OPT_BY_DOMAIN:
		o->by_domain = true;
		break;
	case OPT_MALLOC:
		o->malloc = true;
		break;
	case OPT_BUDGET:
		if (parse_double(arg, &o->budget_sps) || !(o->budget_sps > 0))
			argp_error(state, "invalid --budget '%s': samples per second, > 0", arg);
		break;
	case OPT_SERVE_FD:
		if (parse_long(arg, &v) || v < 3 || v > INT_MAX)
			argp_error(state, "invalid --serve-fd '%s'", arg);
		o->serve = true;
		o->serve_fd = (int)v;
		break;
	case OPT_INTERVAL:
		if (parse_double(arg, &o->interval_s) || !(o->interval_s > 0))
			argp_error(state, "invalid --interval '%s': seconds, > 0", arg);
		break;
	case OPT_BASE_NICE:
		if (parse_long(arg, &v) || v < -20 || v > 19)
			argp_error(state, "invalid --base-nice '%s'", arg);
		o->base_nice = (int)v;
		o->base_nice_given = true;
		break;
	case OPT_TRAP_COST:
		if (sscanf(arg, "%lg,%lg,%lg", &o->trap_ns[0], &o->trap_ns[1], &o->trap_ns[2]) != 3 ||
		    !(o->trap_ns[0] >= 0 && o->trap_ns[1] >= 0 && o->trap_ns[2] >= 0))
			argp_error(state, "invalid --trap-cost '%s'", arg);
		o->trap_given = true;
		break;
	case OPT_OUTDIR:
		o->outdir = arg;
		break;
	case OPT_KERNEL_BTF:
		o->kernel_btf = arg;
		break;
	case OPT_MAX_TRACKED:
		if (parse_long(arg, &v) || v < 1 || v > (1L << 24))
			argp_error(state, "invalid --max-tracked '%s' (1..16777216 blocks)", arg);
		o->max_tracked = (uint32_t)v;
		break;
	case 'q':
		o->quiet = true;
		break;
	case 'v':
		o->verbose = true;
		break;
	case ARGP_KEY_ARG:
		record_parse_arg(o, arg, state);
		break;
	case ARGP_KEY_END:
		record_parse_end(o, state);
		break;
	default:
		return census_parse(key, arg, o, state) ? 0 : ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static const char top_doc[] =
	"A live view of a running native OCaml program's allocations, refreshed every second: per allocation "
	"site (or call-tree node), bytes allocated per second with a 95 % bound, live bytes, their trend over "
	"the last minutes and median age; the heap, the resident set, the GC's pace.  Keys (h lists them): "
	"sort by a column (a l g o s, < >), t flat sites / call tree, / filter, f freeze, w write pprof, "
	"m write memtrace, q detach.  The program runs on unaffected when camlheap top ends, however it ends.  "
	"When stdout is not a terminal, or with --batch, refreshes are printed as text (like top -b).\n"
	"\n"
	"  camlheap top -p PID [-d SECONDS] [OPTIONS]\n"
	"  camlheap top -p PID --batch -n 10 [--rows N] [--sort WHAT] [--tree] > top.txt";

enum { OPT_TOP_ROWS = 0x200, OPT_TOP_WINDOW, OPT_TOP_TREND, OPT_TOP_SORT, OPT_TOP_REVERSE, OPT_TOP_TREE,
       OPT_TOP_FILTER, OPT_TOP_TRACE_LIMIT, OPT_TOP_DURATION };

static const struct argp_option top_options[] = {
	{ "pid", 'p', "PID", 0, "The running process (required)", 0 },
	{ "delay", 'd', "SECONDS", 0, "Refresh every SECONDS (default 1)", 0 },
	{ "batch", 'b', NULL, 0, "Print refreshes as text on stdout (the default when stdout is not a terminal)", 0 },
	{ "iterations", 'n', "N", 0, "Stop (and detach) after N refreshes", 0 },
	{ "rows", OPT_TOP_ROWS, "N", 0, "Batch: rows per refresh (default 30; 0: all)", 0 },
	{ "window", OPT_TOP_WINDOW, "SECONDS", 0, "Allocation rates over the last SECONDS (default 5; at least the delay, at most 600 refreshes)", 0 },
	{ "trend", OPT_TOP_TREND, "SECONDS", 0, "Live trend (sparkline, growth) over the last SECONDS (default 120; at most 3600 refreshes)", 0 },
	{ "sort", OPT_TOP_SORT, "WHAT", 0, "alloc (default), live, growth, age or site", 0 },
	{ "reverse", OPT_TOP_REVERSE, NULL, 0, "Sort the other way", 0 },
	{ "tree", OPT_TOP_TREE, NULL, 0, "Start with the call tree (batch: print it, fully expanded)", 0 },
	{ "filter", OPT_TOP_FILTER, "TEXT", 0, "Only rows whose name contains TEXT (case-insensitive)", 0 },
	{ "trace-limit", OPT_TOP_TRACE_LIMIT, "MIB", 0,
	  "The recording kept for the m key (a memtrace of everything since attach, in $TMPDIR, unlinked) is "
	  "dropped past MIB mebibytes (default 256; 0: keep none)",
	  0 },
	{ "duration", OPT_TOP_DURATION, "SECONDS", 0, "Stop (and detach) after SECONDS", 0 },
	{ "rate", 'r', "LAMBDA", 0, "Samples per allocated word, 0 < LAMBDA <= 1 (default 1e-5)", 0 },
	{ "executor", OPT_EXECUTOR, "WHICH", 0, "As for record: auto, register, kernel, ptrace or observe", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "max-tracked", OPT_MAX_TRACKED, "N", 0, "As for record (default from the rate, 16384 to 262144)", 0 },
	{ "no-census", OPT_NO_CENSUS, NULL, 0, "Do not follow sampled blocks (no LIVE, TREND, AGE)", 0 },
	{ "malloc", OPT_MALLOC, NULL, 0, "As for record: the program's own malloc and anonymous mmap too", 0 },
	{ "budget", OPT_BUDGET, "SAMPLES_PER_S", 0, "As for record: keep at most this many samples per second", 0 },
	{ 0 }
};

struct top_cli {
	struct record_opts r;
	struct top_opts t;
};

static error_t top_parse(int key, char *arg, struct argp_state *state)
{
	struct top_cli *c = state->input;
	double d;
	long v;

	switch (key) {
	case 'd':
		if (parse_double(arg, &c->t.delay_s) || !(c->t.delay_s >= 0.1 && c->t.delay_s <= 3600))
			argp_error(state, "invalid delay '%s': seconds, 0.1 to 3600", arg);
		break;
	case 'b':
		c->t.batch = true;
		break;
	case 'n':
		if (parse_long(arg, &v) || v < 1)
			argp_error(state, "invalid --iterations '%s': a number of refreshes, >= 1", arg);
		c->t.iterations = v;
		break;
	case OPT_TOP_ROWS:
		if (parse_long(arg, &v) || v < 0 || v > 1000000)
			argp_error(state, "invalid --rows '%s' (0..1000000; 0: all)", arg);
		c->t.rows = (int)v;
		break;
	case OPT_TOP_WINDOW:
		if (parse_double(arg, &c->t.window_s) || !(c->t.window_s > 0 && c->t.window_s <= 86400))
			argp_error(state, "invalid --window '%s': seconds, > 0 and <= 86400", arg);
		break;
	case OPT_TOP_TREND:
		if (parse_double(arg, &c->t.trend_s) || !(c->t.trend_s > 0 && c->t.trend_s <= 86400))
			argp_error(state, "invalid --trend '%s': seconds, > 0 and <= 86400", arg);
		break;
	case OPT_TOP_SORT:
		if (top_parse_sort(arg, &c->t.sort) < 0)
			argp_error(state, "unknown --sort '%s' (alloc, live, growth, age or site)", arg);
		break;
	case OPT_TOP_REVERSE:
		c->t.reverse = true;
		break;
	case OPT_TOP_TREE:
		c->t.tree = true;
		break;
	case OPT_TOP_FILTER:
		c->t.filter = arg;
		break;
	case OPT_TOP_TRACE_LIMIT:
		if (parse_double(arg, &d) || !(d >= 0))
			argp_error(state, "invalid --trace-limit '%s': mebibytes, >= 0", arg);
		c->t.trace_limit_mib = d;
		break;
	case OPT_TOP_DURATION:
		if (parse_double(arg, &c->r.duration_s) || !(c->r.duration_s > 0))
			argp_error(state, "invalid duration '%s': seconds, > 0", arg);
		break;
	case 'p': case 'r': case OPT_EXECUTOR: case OPT_MAX_DEPTH: case OPT_MAX_TRACKED: case OPT_NO_CENSUS:
	case OPT_MALLOC: case OPT_BUDGET: {
		struct argp_state sub = *state;

		sub.input = &c->r;
		return record_parse(key, arg, &sub);
	}
	case ARGP_KEY_ARG:
		argp_error(state, "camlheap top attaches to a running process (-p PID); it runs no command");
		break;
	case ARGP_KEY_END:
		if (!c->r.pid)
			argp_error(state, "give the process to watch: -p PID");
		if (c->t.sort == TOP_SORT_GROWTH || c->t.sort == TOP_SORT_LIVE || c->t.sort == TOP_SORT_AGE) {
			if (c->r.no_census)
				argp_error(state, "--no-census gives no live figures: sort by alloc or site");
		}
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

int top_command(int argc, char **argv)
{
	struct top_cli c = {
		.r = { .rate = 1e-5, .top = 20, .max_frames = CH_DEFAULT_FRAMES, .format = REPORT_TEXT },
		.t = { .delay_s = 1.0, .window_s = 5.0, .trend_s = 120.0, .rows = 30, .trace_limit_mib = 256 },
	};
	struct argp argp = { top_options, top_parse, NULL, top_doc, NULL, NULL, NULL };

	argv[1] = "camlheap top";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &c))
		return 2;
	if (!c.t.batch && (!isatty(STDOUT_FILENO) || !isatty(STDIN_FILENO))) {
		if (isatty(STDOUT_FILENO))
			fprintf(stderr, "camlheap: stdin is not a terminal (no keys can be read): printing refreshes "
					"as text (--batch)\n");
		c.t.batch = true;
	}
	if (c.t.window_s < c.t.delay_s)
		c.t.window_s = c.t.delay_s;
	/* what a site and a row keep: top.c's rings */
	if (c.t.window_s / c.t.delay_s > 600.5) {
		fprintf(stderr, "camlheap top: --window %g s is over 600 refreshes of %g s (-d): at most %g s\n",
			c.t.window_s, c.t.delay_s, 600 * c.t.delay_s);
		return 2;
	}
	if (c.t.trend_s / c.t.delay_s > 3600.5) {
		fprintf(stderr, "camlheap top: --trend %g s is over 3600 refreshes of %g s (-d): at most %g s\n",
			c.t.trend_s, c.t.delay_s, 3600 * c.t.delay_s);
		return 2;
	}
	if (c.t.trend_s < c.t.window_s) {
		fprintf(stderr, "camlheap top: --trend (%g s) is shorter than the rate window (%g s: --window, at least "
				"the delay)\n", c.t.trend_s, c.t.window_s);
		return 2;
	}
	if (!c.t.batch) {
		char msg[512];

		/* before attaching: a terminal that cannot be drawn on */
		if (top_check_terminal(msg, sizeof(msg)) < 0) {
			fprintf(stderr, "camlheap: %s\n", msg);
			return 2;
		}
	}
	c.r.topo = &c.t;
	return record_run(&c.r);
}

/* `record` and `census` share their options and their run. */
int record_command(int argc, char **argv, bool census)
{
	struct record_opts o = {
		.rate = census ? 1e-4 : 1e-5,
		.top = 20,
		.max_frames = CH_DEFAULT_FRAMES,
		.format = REPORT_TEXT,
		.census = census,
	};
	struct argp argp = { census ? census_options : record_options, record_parse, NULL,
			     census ? census_doc : record_doc, NULL, NULL, NULL };

	argv[1] = census ? "camlheap census" : "camlheap record";
	if (argp_parse(&argp, argc - 1, argv + 1, ARGP_IN_ORDER, NULL, &o))
		return 2;
	if (o.exact) {
		struct census_exact_opts e = {
			.pid = o.pid, .output = o.output, .json = o.format == REPORT_JSON, .top = o.top,
			.max_pause_s = o.max_pause_s > 0 ? o.max_pause_s : 1.0,
			.max_wait_s = o.max_wait_s > 0 ? o.max_wait_s : 5.0, .quiet = o.quiet,
			.retainers = o.retainers,
		};

		return census_exact_run(&e);
	}
	return record_run(&o);
}
