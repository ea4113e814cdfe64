/* main.c -- the camlheap command line: parse options, call the command. */
#define _GNU_SOURCE
#include <argp.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

#include "camlheap.h"
#include "cmd/record.h"
#include "output/diff.h"
#include "output/outfile.h"
#include "output/recording.h"
#include "cmd/serve.h"

const char *argp_program_version = "camlheap 0.1";
const char *argp_program_bug_address = "the camlheap issue tracker";

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
	"sampled word traps (an executor writes it: the kernel where it allows bpf_probe_write_user, else a "
	"ptrace stop of the allocating thread), direct major-heap, custom (out-of-heap) and unmarshalled ones "
	"through read-only probes. The report's first line names the executor that ran.";

enum { OPT_MAX_DEPTH = 0x100, OPT_EXECUTOR, OPT_KEEP_AWAKE, OPT_LIVE, OPT_VALUE, OPT_NO_CENSUS, OPT_MAX_TRACKED, OPT_WAIT_MAJOR,
       OPT_BY_DOMAIN, OPT_MALLOC, OPT_BUDGET, OPT_SERVE_FD, OPT_INTERVAL, OPT_OUTDIR };

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
	  "Sampled blocks followed in the major heap at once (default 262144; 48 bytes of kernel memory "
	  "each, allocated up front); beyond it blocks are counted live and no longer followed",
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
	"Example:\n"
	"  camlheap census -p 1234 --rate 1e-4 --wait-major 3 -o census.txt";

static const struct argp_option census_options[] = {
	{ "pid", 'p', "PID", 0, "The running process (required)", 0 },
	{ "rate", 'r', "LAMBDA", 0, "Samples per allocated word, 0 < LAMBDA <= 1 (default 1e-4)", 0 },
	{ "wait-major", OPT_WAIT_MAJOR, "N", OPTION_ARG_OPTIONAL,
	  "Stop once N full major cycles (seen from their start) have ended (default 1; leak scores need 3)", 0 },
	{ "duration", 'd', "SECONDS", 0,
	  "Stop after this many seconds (with --wait-major: whichever comes first; alone: no cycle count)", 0 },
	{ "output", 'o', "FILE", 0, "Write the census to FILE (via a temporary file and rename; default stdout)", 0 },
	{ "top", 'n', "N", 0, "Sites shown (default 20)", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "executor", OPT_EXECUTOR, "WHICH", 0, "As for record: auto, kernel, ptrace or observe", 0 },
	{ "max-tracked", OPT_MAX_TRACKED, "N", 0, "As for record (default 262144)", 0 },
	{ "malloc", OPT_MALLOC, NULL, 0, "As for record: count the program's own malloc and anonymous mmap too", 0 },
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

static int parse_format(const char *arg, enum report_format *f, bool memtrace)
{
	static const struct { const char *name; enum report_format f; } names[] = {
		{ "text", REPORT_TEXT }, { "collapsed", REPORT_COLLAPSED }, { "pprof", REPORT_PPROF },
		{ "json", REPORT_JSON }, { "svg", REPORT_SVG }, { "memtrace", REPORT_MEMTRACE },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(arg, names[i].name) && (memtrace || names[i].f != REPORT_MEMTRACE)) {
			*f = names[i].f;
			return 0;
		}
	return -1;
}

/* -o FILE without --format: the report its name asks for (.txt, .json,
 * .svg, .pb.gz / .pprof, .folded / .collapsed), else the recording. */
static enum report_format format_of_name(const char *path)
{
	static const struct { const char *ext; enum report_format f; } exts[] = {
		{ ".txt", REPORT_TEXT }, { ".json", REPORT_JSON }, { ".svg", REPORT_SVG },
		{ ".pb.gz", REPORT_PPROF }, { ".pprof", REPORT_PPROF }, { ".folded", REPORT_COLLAPSED },
		{ ".collapsed", REPORT_COLLAPSED },
	};
	size_t n = strlen(path);

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t e = strlen(exts[i].ext);

		if (n > e && !strcmp(path + n - e, exts[i].ext))
			return exts[i].f;
	}
	return REPORT_MEMTRACE;
}

static int parse_value(const char *arg, int *v)
{
	if (!strcmp(arg, "alloc"))
		*v = REPORT_VALUE_ALLOC;
	else if (!strcmp(arg, "live"))
		*v = REPORT_VALUE_LIVE;
	else if (!strcmp(arg, "peak"))
		*v = REPORT_VALUE_PEAK;
	else
		return -1;
	return 0;
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
			argp_error(state, "unknown format '%s' (text, collapsed, pprof, json, svg or memtrace)", arg);
		o->format_given = true;
		break;
	case 'n':
		if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --top '%s' (1..1000000 sites)", arg);
		o->top = (int)v;
		o->top_given = true;
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
	case OPT_OUTDIR:
		o->outdir = arg;
		break;
	case OPT_MAX_TRACKED:
		if (parse_long(arg, &v) || v < 1 || v > (1L << 24))
			argp_error(state, "invalid --max-tracked '%s' (1..16777216 blocks)", arg);
		o->max_tracked = (uint32_t)v;
		break;
	case OPT_WAIT_MAJOR:
		if (!arg)
			v = 1;
		else if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --wait-major '%s' (1..1000000 cycles)", arg);
		o->wait_major = (int)v;
		break;
	case ARGP_KEY_ARG:
		/* `--wait-major N` (argp only takes `--wait-major=N` for an
		 * optional argument) */
		if (o->census && state->next >= 2 && !strcmp(state->argv[state->next - 2], "--wait-major")) {
			if (parse_long(arg, &v) || v < 1 || v > 1000000)
				argp_error(state, "invalid --wait-major '%s' (1..1000000 cycles)", arg);
			o->wait_major = (int)v;
			break;
		}
		/* The command starts at the first non-option; its own options
		 * are not ours. */
		o->argv = &state->argv[state->next - 1];
		state->next = state->argc;
		break;
	case ARGP_KEY_END:
		if (o->census) {
			if (!o->pid || o->argv)
				argp_error(state, "census takes -p PID (a running process), and no command");
			if (o->value || o->live || o->no_census || o->format_given)
				argp_error(state, "--live, --value, --format and --no-census are record options");
			/* default: the next completed major cycle */
			if (!o->wait_major && !(o->duration_s > 0))
				o->wait_major = 1;
			break;
		}
		if (o->wait_major)
			argp_error(state, "--wait-major is a census option");
		if (o->serve && (!o->pid || !o->outdir))
			argp_error(state, "--serve-fd is for camlheap serve's workers (-p PID --outdir DIR)");
		if (!o->format_given && o->output && strcmp(o->output, "-"))
			o->format = format_of_name(o->output);
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
			argp_error(state, "--live and --top shape the text report; the recording keeps everything: use them "
					  "with `camlheap report FILE` (--value live, --top N)");
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

static const char diff_doc[] =
	"Compare two recordings (written with `camlheap record -o FILE`, or their JSON from --format json "
	"or `camlheap report --format json`): per allocation site "
	"(matched by kind and source stack), the allocated and live bytes in each, the change, and "
	"whether it is significant given the sampling variance (a binomial test on how the site's "
	"samples split between the runs, the rates accounted for; Bonferroni over the sites at "
	"--alpha).\n"
	"\n"
	"  camlheap diff A B [-o FILE] [--top N] [--alpha A] [--by line|stack]";

static const struct argp_option diff_options[] = {
	{ "output", 'o', "FILE", 0, "Write the table to FILE (via a temporary file and rename; default stdout)", 0 },
	{ "top", 'n', "N", 0, "Sites shown (default 30)", 0 },
	{ "alpha", 'a', "A", 0, "Family-wise significance level, 0 < A < 1 (default 0.01)", 0 },
	{ "by", 'b', "WHAT", 0,
	  "Match sites by: line (default: kind and the allocation's source position) or stack (the "
	  "whole source stack; finalisers and callbacks then differ run to run)",
	  0 },
	{ 0 }
};

static error_t diff_parse(int key, char *arg, struct argp_state *state)
{
	struct diff_opts *o = state->input;
	long v;

	switch (key) {
	case 'o':
		o->output = arg;
		break;
	case 'n':
		if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --top '%s' (1..1000000 sites)", arg);
		o->top = (int)v;
		break;
	case 'a':
		if (parse_double(arg, &o->alpha) || !(o->alpha > 0 && o->alpha < 1))
			argp_error(state, "invalid --alpha '%s' (0 < A < 1)", arg);
		break;
	case 'b':
		if (!strcmp(arg, "line"))
			o->by_stack = 0;
		else if (!strcmp(arg, "stack"))
			o->by_stack = 1;
		else
			argp_error(state, "unknown --by '%s' (line or stack)", arg);
		break;
	case ARGP_KEY_ARG:
		if (!o->a)
			o->a = arg;
		else if (!o->b)
			o->b = arg;
		else
			argp_error(state, "diff takes two recordings");
		break;
	case ARGP_KEY_END:
		if (!o->b)
			argp_error(state, "diff takes two recordings: camlheap diff A B");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}


static const char report_doc[] =
	"Render a recording written by `camlheap record -o FILE` (or any memtrace trace, e.g. from "
	"Memtrace.trace_if_requested) as a report: text (as `record` prints), collapsed stacks, pprof, "
	"json or an interactive SVG flame graph; optionally over a time window or a subset of the "
	"stacks.\n"
	"\n"
	"  camlheap report FILE [--format F] [--value alloc|live|peak]\n"
	"         [--from S] [--to S] [--focus STR]... [--ignore STR]...\n"
	"         [--min-samples N] [--top N] [-o OUT]      (FILE -: stdin)\n"
	"\n"
	"Examples:\n"
	"  camlheap report run.ctf --value live --top 10\n"
	"  camlheap report run.ctf --format svg --focus typing/ -o typing.svg\n"
	"  camlheap report run.ctf --from 30 --to 60 --format pprof -o window.pb.gz\n"
	"\n"
	"--from/--to keep the allocations made in that window (seconds from the end of the attach, "
	"the zero of the report's duration and peak times); live figures are then those at --to. --focus keeps the allocations with a frame "
	"(function or file) containing one of the strings, --ignore drops them (case-sensitive). --min-samples hides "
	"the sites with fewer samples; the header's totals still count them.";

enum { OPT_FROM = 0x200, OPT_TO, OPT_FOCUS, OPT_IGNORE, OPT_MIN_SAMPLES, OPT_BY_DOMAIN_R };

static const struct argp_option report_options[] = {
	{ "format", 'f', "FORMAT", 0, "text (default), collapsed, pprof, json or svg", 0 },
	{ "value", OPT_VALUE, "WHAT", 0,
	  "What text ranks and collapsed/svg sum: alloc (default), live (alive at the end) or peak (each site's "
	  "peak live bytes); for pprof, the default sample type (alloc_space or inuse_space)",
	  0 },
	{ "output", 'o', "FILE", 0, "Write to FILE (via a temporary file and rename; default stdout)", 0 },
	{ "top", 'n', "N", 0, "Sites shown in the text report (default 20)", 0 },
	{ "from", OPT_FROM, "SECONDS", 0, "Keep allocations from this time on (seconds from the end of the attach)", 0 },
	{ "to", OPT_TO, "SECONDS", 0, "Keep allocations and deaths up to this time", 0 },
	{ "focus", OPT_FOCUS, "STR", 0, "Keep allocations with a frame whose function or file contains STR (repeatable)", 0 },
	{ "ignore", OPT_IGNORE, "STR", 0, "Drop allocations with a frame whose function or file contains STR (repeatable)", 0 },
	{ "min-samples", OPT_MIN_SAMPLES, "N", 0, "Hide sites with fewer than N samples", 0 },
	{ "by-domain", OPT_BY_DOMAIN_R, NULL, 0, "OCaml 5: split every site by the domain that allocated", 0 },
	{ 0 }
};

struct report_cmd {
	const char *input, *output;
	enum report_format format;
	int value, top;
	double from, to;
	long min_samples;
	bool by_domain;
	GPtrArray *focus, *ignore;
};

static error_t report_parse(int key, char *arg, struct argp_state *state)
{
	struct report_cmd *o = state->input;
	long v;

	switch (key) {
	case 'f':
		if (parse_format(arg, &o->format, false) < 0)
			argp_error(state, "unknown format '%s' (text, collapsed, pprof, json or svg)", arg);
		break;
	case OPT_VALUE:
		if (parse_value(arg, &o->value) < 0)
			argp_error(state, "unknown --value '%s' (alloc, live or peak)", arg);
		break;
	case 'o':
		o->output = arg;
		break;
	case 'n':
		if (parse_long(arg, &v) || v < 1 || v > 1000000)
			argp_error(state, "invalid --top '%s' (1..1000000 sites)", arg);
		o->top = (int)v;
		break;
	case OPT_FROM:
		if (parse_double(arg, &o->from) || !(o->from >= 0))
			argp_error(state, "invalid --from '%s': seconds from the start, >= 0", arg);
		break;
	case OPT_TO:
		if (parse_double(arg, &o->to) || !(o->to >= 0))
			argp_error(state, "invalid --to '%s': seconds from the start, >= 0", arg);
		break;
	case OPT_FOCUS:
	case OPT_IGNORE:
		if (!*arg)
			argp_error(state, "--%s takes a non-empty string", key == OPT_FOCUS ? "focus" : "ignore");
		g_ptr_array_add(key == OPT_FOCUS ? o->focus : o->ignore, arg);
		break;
	case OPT_MIN_SAMPLES:
		if (parse_long(arg, &v) || v < 1)
			argp_error(state, "invalid --min-samples '%s' (>= 1)", arg);
		o->min_samples = v;
		break;
	case OPT_BY_DOMAIN_R:
		o->by_domain = true;
		break;
	case ARGP_KEY_ARG:
		if (o->input)
			argp_error(state, "report takes one recording");
		o->input = arg;
		break;
	case ARGP_KEY_END:
		if (!o->input)
			argp_error(state, "which recording? camlheap report FILE");
		if (o->to >= 0 && o->to < o->from)
			argp_error(state, "--to %g is before --from %g", o->to, o->from);
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int report_command(int argc, char **argv)
{
	struct report_cmd o = { .format = REPORT_TEXT, .top = 20, .to = -1 };
	struct argp argp = { report_options, report_parse, "FILE", report_doc, NULL, NULL, NULL };
	struct recording_loaded rl;
	struct recording_filter f;
	struct outfile out;
	char err[1024], sel[1024] = "";
	int ret, status = 0;

	o.focus = g_ptr_array_new();
	o.ignore = g_ptr_array_new();
	argv[1] = "camlheap report";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	if (outfile_check(o.output, err, sizeof(err)) < 0) {
		fprintf(stderr, "camlheap: %s\n", err);
		return 2;
	}
	g_ptr_array_add(o.focus, NULL);
	g_ptr_array_add(o.ignore, NULL);
	f = (struct recording_filter){
		.from_s = o.from,
		.to_s = o.to,
		.focus = o.focus->len > 1 ? (const char *const *)o.focus->pdata : NULL,
		.ignore = o.ignore->len > 1 ? (const char *const *)o.ignore->pdata : NULL,
		.by_domain = o.by_domain,
	};
	ret = recording_load(o.input, &f, &rl, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s\n", err);
		if (ret == -EINVAL)
			fprintf(stderr, "camlheap: %s is not a readable memtrace recording (written by `camlheap record "
					"-o FILE` or memtrace)\n", o.input);
		return 2;
	}
	if (o.value != REPORT_VALUE_ALLOC && !rl.meta.census_on) {
		fprintf(stderr, "camlheap: %s has no live figures (%s): --value %s needs a recording that followed "
				"its blocks\n", o.input, rl.meta.census_off_why ? rl.meta.census_off_why : "no census",
			o.value == REPORT_VALUE_LIVE ? "live" : "peak");
		recording_loaded_free(&rl);
		return 2;
	}
	if (rl.skipped_pid || rl.skipped_truncated)
		fprintf(stderr, "camlheap: %s: skipped %u packet(s) of another process and %u truncated one(s)\n",
			o.input, rl.skipped_pid, rl.skipped_truncated);
	{
		size_t n = 0;

		char to[64] = "the end";

		if (o.to >= 0)
			snprintf(to, sizeof(to), "%.4g s", o.to);
		if (o.from > 0 || o.to >= 0)
			n += snprintf(sel + n, sizeof(sel) - n, "allocations from %.4g s to %s; ", o.from, to);
		for (guint i = 0; i + 1 < o.focus->len && n < sizeof(sel); i++)
			n += snprintf(sel + n, sizeof(sel) - n, "focus '%s'; ", (char *)o.focus->pdata[i]);
		for (guint i = 0; i + 1 < o.ignore->len && n < sizeof(sel); i++)
			n += snprintf(sel + n, sizeof(sel) - n, "ignore '%s'; ", (char *)o.ignore->pdata[i]);
		if (o.min_samples > 1 && n < sizeof(sel))
			n += snprintf(sel + n, sizeof(sel) - n, "sites with >= %ld samples shown; ", o.min_samples);
		if (n && n < sizeof(sel))
			snprintf(sel + n, sizeof(sel) - n, "%llu of %llu sampled blocks kept",
				 (unsigned long long)rl.allocs_kept, (unsigned long long)rl.allocs_read);
	}
	rl.meta.selection = sel[0] ? sel : NULL;
	if (sel[0] && !rl.allocs_kept)
		fprintf(stderr, "camlheap: the selection keeps none of the %llu sampled blocks (times count from the "
				"end of the attach, as the report's duration; --focus/--ignore match function names and "
				"files, case-sensitively)\n", (unsigned long long)rl.allocs_read);
	rl.meta.top = o.top;
	rl.meta.value = o.value;
	rl.meta.build_id = rl.build_id;
	if (o.min_samples > 1)
		profile_drop_small_sites(rl.prof, (uint64_t)o.min_samples);
	if (rl.meta.census_on)
		profile_census_compute(rl.prof);
	ret = outfile_open(&out, o.output);
	if (ret == 0) {
		ret = report_render(out.f, o.format, false, rl.prof, &rl.meta, &rl.mods);
		if (ret < 0)
			outfile_abort(&out);
		else
			ret = outfile_commit(&out);
	}
	if (ret == -ENODATA || ret == -ENOENT) {
		status = 2; /* said already: nothing to draw, or no flamegraph.pl */
	} else if (ret < 0) {
		fprintf(stderr, "camlheap: cannot write the report to %s: %s\n", o.output ? o.output : "stdout",
			strerror(-ret));
		status = 1;
	}
	recording_loaded_free(&rl);
	g_ptr_array_free(o.focus, TRUE);
	g_ptr_array_free(o.ignore, TRUE);
	return status;
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: camlheap COMMAND [OPTIONS]\n"
		   "\n"
		   "Commands:\n"
		   "  record   sample a running (-p PID) or launched (-- CMD ARGS) native OCaml program\n"
		   "  census   what is alive in a running program's heap, by allocation site, and leak suspects\n"
		   "  top      a live view of a running program's allocations (interactive, or --batch)\n"
		   "  report   render a recording (record -o FILE, or a memtrace trace): text, pprof, svg, ...\n"
		   "  diff     compare two recordings, site by site, with a significance flag\n"
		   "  dump-trace  print every event of a recording, one per line\n"
		   "  serve    run as a service: profile the configured programs continuously (systemd unit in dist/)\n"
		   "  status   the targets and figures of a running `camlheap serve`\n"
		   "\n"
		   "'camlheap COMMAND --help' lists a command's options.\n");
}

static const char serve_doc[] =
	"Run as a service: profile every process of the targets named in the configuration file "
	"continuously, each by its own worker (as `camlheap record -p PID`), found within a second of "
	"their exec; write a heap profile (pprof) and a census per process every interval into the "
	"output directory, with retention; serve /debug/pprof/heap, /debug/pprof/allocs, "
	"/debug/memtrace, /targets and /metrics over HTTP (localhost by default) and an optional Unix "
	"socket; hold each process under its overhead budget.  SIGHUP reloads the configuration, "
	"SIGTERM stops cleanly.  Under systemd (Type=notify) it reports readiness and feeds the "
	"watchdog.  The file format: `man 5 camlheap.conf` (dist/camlheap.conf.5), an example in "
	"dist/camlheap.conf.\n"
	"\n"
	"  camlheap serve --config FILE [--interval SECONDS] [--check]";

static const struct argp_option serve_options[] = {
	{ "config", 'c', "FILE", 0, "The configuration file (default /etc/camlheap/camlheap.conf)", 0 },
	{ "check", 'k', NULL, 0, "Only parse the configuration file and say what it asks for", 0 },
	{ "interval", 'i', "SECONDS", 0, "Periodic profiles every SECONDS (overrides the file's `interval`; default 60)",
	  0 },
	{ 0 }
};

struct serve_opts {
	const char *config;
	bool check;
	double interval_s;
};

static error_t serve_parse(int key, char *arg, struct argp_state *state)
{
	struct serve_opts *o = state->input;

	switch (key) {
	case 'c':
		o->config = arg;
		break;
	case 'k':
		o->check = true;
		break;
	case 'i':
		if (parse_double(arg, &o->interval_s) || !(o->interval_s >= 0.1 && o->interval_s <= 86400 * 7))
			argp_error(state, "invalid --interval '%s': seconds, 0.1 .. 604800", arg);
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "serve takes no arguments (the targets are in --config FILE)");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int serve_command(int argc, char **argv)
{
	struct serve_opts o = { .config = "/etc/camlheap/camlheap.conf" };
	struct argp argp = { serve_options, serve_parse, NULL, serve_doc, NULL, NULL, NULL };

	argv[1] = "camlheap serve";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	if (o.check) {
		struct serve_config c = { 0 };
		char err[2048];

		if (serve_config_load(o.config, &c, err, sizeof(err)) < 0) {
			fprintf(stderr, "camlheap: %s\n", err);
			return 2;
		}
		if (o.interval_s > 0)
			c.interval_s = o.interval_s;
		if (c.warnings)
			fprintf(stderr, "%s", c.warnings);
		printf("%s: %zu target%s; output %s every %g s (keep %u per process, %llu bytes in all); HTTP %s%s%s\n",
		       o.config, c.ntargets, c.ntargets == 1 ? "" : "s", c.output, c.interval_s, c.keep,
		       (unsigned long long)c.keep_bytes, c.listen, c.socket ? ", socket " : "", c.socket ? c.socket : "");
		for (size_t i = 0; i < c.ntargets; i++) {
			struct serve_target *t = &c.targets[i];

			printf("  %s:%s%s%s%s%s%s%s%s rate %g, budget %g samples/s%s\n", t->name, t->exe ? " exe " : "",
			       t->exe ? t->exe : "", t->unit ? " unit " : "", t->unit ? t->unit : "",
			       t->cgroup ? " cgroup " : "", t->cgroup ? t->cgroup : "", t->pidfile ? " pidfile " : "",
			       t->pidfile ? t->pidfile : "", t->rate, t->budget, t->malloc ? ", --malloc" : "");
		}
		serve_config_free(&c);
		return 0;
	}
	return serve_run(o.config, o.interval_s);
}

static const char status_doc[] =
	"Print the targets of a running `camlheap serve` and their figures (samples, sample rate, lambda "
	"in force, overhead, files written), asking it over its Unix socket (default "
	"/run/camlheap/camlheap.sock) or its HTTP address.\n"
	"\n"
	"  camlheap status [--socket PATH | --url http://HOST:PORT] [--json]";

static const struct argp_option status_options[] = {
	{ "socket", 's', "PATH", 0, "The service's Unix socket (its `socket =`; default /run/camlheap/camlheap.sock)", 0 },
	{ "url", 'u', "URL", 0, "The service's HTTP address instead (its `listen =`, e.g. http://127.0.0.1:6061)", 0 },
	{ "json", 'j', NULL, 0, "Print the service's /targets document as it is", 0 },
	{ 0 }
};

struct status_opts {
	const char *socket, *url;
	bool json;
};

static error_t status_parse(int key, char *arg, struct argp_state *state)
{
	struct status_opts *o = state->input;

	switch (key) {
	case 's':
		o->socket = arg;
		break;
	case 'u':
		o->url = arg;
		break;
	case 'j':
		o->json = true;
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "status takes no arguments");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

static int status_command(int argc, char **argv)
{
	struct status_opts o = { 0 };
	struct argp argp = { status_options, status_parse, NULL, status_doc, NULL, NULL, NULL };

	argv[1] = "camlheap status";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	if (!o.socket && !o.url)
		o.socket = "/run/camlheap/camlheap.sock";
	return serve_status(o.url ? NULL : o.socket, o.url, o.json);
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
	{ "executor", OPT_EXECUTOR, "WHICH", 0, "As for record: auto, kernel, ptrace or observe", 0 },
	{ "max-depth", OPT_MAX_DEPTH, "FRAMES", 0, "Stack walk depth, 1..2048 (default 1024)", 0 },
	{ "max-tracked", OPT_MAX_TRACKED, "N", 0, "As for record (default 262144)", 0 },
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

static int top_command(int argc, char **argv)
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
static int record_command(int argc, char **argv, bool census)
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
	return record_run(&o);
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
	if (!strcmp(argv[1], "record"))
		return record_command(argc, argv, false);
	if (!strcmp(argv[1], "diff")) {
		struct diff_opts o = { .top = 30, .alpha = 0.01 };
		struct argp argp = { diff_options, diff_parse, "A B", diff_doc, NULL, NULL, NULL };

		argv[1] = "camlheap diff";
		if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
			return 2;
		return diff_run(&o);
	}
	if (!strcmp(argv[1], "census"))
		return record_command(argc, argv, true);
	if (!strcmp(argv[1], "report"))
		return report_command(argc, argv);
	if (!strcmp(argv[1], "top"))
		return top_command(argc, argv);
	if (!strcmp(argv[1], "serve"))
		return serve_command(argc, argv);
	if (!strcmp(argv[1], "status"))
		return status_command(argc, argv);
	if (!strcmp(argv[1], "dump-trace")) {
		if (argc != 3 || argv[2][0] == '-') {
			fprintf(stderr, "usage: camlheap dump-trace FILE\n");
			return 2;
		}
		return recording_dump(argv[2], stdout);
	}
	fprintf(stderr, "camlheap: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
