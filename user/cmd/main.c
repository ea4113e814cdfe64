/* main.c -- the camlheap command line: which command, whose options
 * options_*.c parse (options_internal.h) before they call it. */
#define _GNU_SOURCE
#include <argp.h>
#include <stdio.h>
#include <string.h>

#include "cmd/options_internal.h"
#include "output/recording.h"

const char *argp_program_version = "camlheap 0.1";
const char *argp_program_bug_address = "the camlheap issue tracker";

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
	if (!strcmp(argv[1], "diff"))
		return diff_command(argc, argv);
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
