/* main.c -- the camlheap command line: parse options, call the command. */
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camlheap.h"
#include "record.h"

const char *argp_program_version = "camlheap 0.1";
const char *argp_program_bug_address = "the camlheap issue tracker";

static const char record_doc[] =
	"Sample the allocations of a running native OCaml program (4.13/4.14) the way Gc.Memprof does, "
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
	"sampled word traps (an executor writes it: the kernel where it allows bpf_probe_write_user, else a "
	"ptrace stop of the allocating thread), direct major-heap, custom (out-of-heap) and unmarshalled ones "
	"through read-only probes. The report's first line names the executor that ran.";

enum { OPT_MAX_DEPTH = 0x100, OPT_EXECUTOR, OPT_KEEP_AWAKE };

static const struct argp_option record_options[] = {
	{ "pid", 'p', "PID", 0, "Attach to this running process", 0 },
	{ "rate", 'r', "LAMBDA", 0, "Samples per allocated word, 0 < LAMBDA <= 1 (default 1e-5, as Gc.Memprof)", 0 },
	{ "duration", 'd', "SECONDS", 0, "Stop after this many seconds", 0 },
	{ "output", 'o', "FILE", 0, "Write the report to FILE (via a temporary file and rename; default stdout)", 0 },
	{ "format", 'f', "FORMAT", 0, "text (default) or collapsed (flamegraph.pl / speedscope input, bytes)", 0 },
	{ "top", 'n', "N", 0, "Sites shown in the text report (default 20)", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "executor", OPT_EXECUTOR, "WHICH", 0,
	  "Who writes young_limit for minor-heap sampling: auto (default: kernel if allowed, else ptrace), "
	  "kernel (bpf_probe_write_user; refused under kernel lockdown), ptrace (camlheap traces the target's "
	  "threads: gdb/strace cannot attach meanwhile), observe (never write: no minor-heap sampling)",
	  0 },
	{ "keep-cpus-awake", OPT_KEEP_AWAKE, NULL, 0,
	  "ptrace executor: spin an idle-priority thread on every CPU while recording, so that a stopped "
	  "thread and the executor never wait for a halted (virtual) CPU to wake; costs no time to other "
	  "programs but shows the idle CPUs as busy",
	  0 },
	{ 0 }
};

static int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end ? -1 : 0;
}

static int parse_long(const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || end == s || *end ? -1 : 0;
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
			argp_error(state, "invalid rate '%s': a number of samples per word in (0, 1], e.g. 1e-5", arg);
		break;
	case 'd':
		if (parse_double(arg, &o->duration_s) || !(o->duration_s > 0))
			argp_error(state, "invalid duration '%s': seconds, > 0", arg);
		break;
	case 'o':
		o->output = arg;
		break;
	case 'f':
		if (!strcmp(arg, "text"))
			o->format = REPORT_TEXT;
		else if (!strcmp(arg, "collapsed"))
			o->format = REPORT_COLLAPSED;
		else
			argp_error(state, "unknown format '%s' (text or collapsed)", arg);
		break;
	case 'n':
		if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --top '%s' (1..1000000 sites)", arg);
		o->top = (int)v;
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
		else
			argp_error(state, "unknown executor '%s' (auto, kernel, ptrace or observe)", arg);
		break;
	case OPT_KEEP_AWAKE:
		o->keep_cpus_awake = true;
		break;
	case ARGP_KEY_ARG:
		/* The command starts at the first non-option; its own options
		 * are not ours. */
		o->argv = &state->argv[state->next - 1];
		state->next = state->argc;
		break;
	case ARGP_KEY_END:
		if (!o->pid && !o->argv)
			argp_error(state, "nothing to profile: give -p PID or -- COMMAND [ARGS...]");
		if (o->pid && o->argv)
			argp_error(state, "give either -p PID or a command, not both");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: camlheap COMMAND [OPTIONS]\n"
		   "\n"
		   "Commands:\n"
		   "  record   sample a running (-p PID) or launched (-- CMD ARGS) native OCaml program\n"
		   "\n"
		   "'camlheap record --help' lists the options.\n");
}

int main(int argc, char **argv)
{
	argp_err_exit_status = 2;
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("%s\n", argp_program_version);
		return 0;
	}
	if (!strcmp(argv[1], "record")) {
		struct record_opts o = {
			.rate = 1e-5,
			.top = 20,
			.max_frames = CH_DEFAULT_FRAMES,
			.format = REPORT_TEXT,
		};
		struct argp argp = { record_options, record_parse, NULL, record_doc, NULL, NULL, NULL };

		argv[1] = "camlheap record";
		if (argp_parse(&argp, argc - 1, argv + 1, ARGP_IN_ORDER, NULL, &o))
			return 2;
		return record_run(&o);
	}
	fprintf(stderr, "camlheap: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
