/* options_report.c -- the options of `camlheap report` and `diff`
 * (options_internal.h): what to read, select and render.
 */
#define _GNU_SOURCE
#include "cmd/options_internal.h"

#include <argp.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <glib.h>

#include "output/diff.h"
#include "output/outfile.h"
#include "output/recording.h"

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

	switch (key) {
	case 'o':
		o->output = arg;
		break;
	case 'n':
		o->top = parse_top(state, arg);
		break;
	case 'a':
		if (parse_double(arg, &o->alpha) || !(o->alpha > 0 && o->alpha < 1))
			argp_error(state, "invalid --alpha '%s' (0 < A < 1)", arg);
		break;
	case 'b':
		if (!strcmp(arg, "line") || !strcmp(arg, "point"))
			o->by_stack = 0;
		else if (!strcmp(arg, "stack"))
			o->by_stack = 1;
		else
			argp_error(state, "unknown --by '%s' (point, also called line, or stack)", arg);
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

int diff_command(int argc, char **argv)
{
	struct diff_opts o = { .top = 30, .alpha = 0.01 };
	struct argp argp = { diff_options, diff_parse, "A B", diff_doc, NULL, NULL, NULL };

	argv[1] = "camlheap diff";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	return diff_run(&o);
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
	{ "top", 'n', "N", 0, "Entries in each table of the text report (default 20; 0: all)", 0 },
	{ "by", OPT_BY, "WHAT", 0,
	  "What the text report ranks: point (default: allocation points, with callers, callstacks and a "
	  "function table) or stack (whole callstacks)", 0 },
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
	bool by_stack;
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
		o->top = parse_top(state, arg);
		break;
	case OPT_BY:
		o->by_stack = parse_by(state, arg);
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

int report_command(int argc, char **argv)
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
	rl.meta.by_stack = o.by_stack;
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
