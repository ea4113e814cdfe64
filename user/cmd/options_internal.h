/* options_internal.h -- what the command line's files share: main.c
 * dispatches to the commands of options_record.c, options_report.c and
 * options_serve.c, which parse their options with options.c's helpers.
 * Only for cmd/main.c and cmd/options*.c, and for the parsers of values
 * the configuration file (serve_config.c) and --on (census_on.c) share
 * with the command line.
 */
#ifndef CH_OPTIONS_INTERNAL_H
#define CH_OPTIONS_INTERNAL_H

#include <argp.h>
#include <stdbool.h>
#include <stdint.h>

#include "output/report.h"

/* Long-only option keys: one numbering for the record, census, top and
 * report options that share them (the commands' own start at 0x200). */
enum { OPT_MAX_DEPTH = 0x100, OPT_EXECUTOR, OPT_KEEP_AWAKE, OPT_LIVE, OPT_VALUE, OPT_NO_CENSUS, OPT_MAX_TRACKED, OPT_WAIT_MAJOR,
       OPT_BY_DOMAIN, OPT_MALLOC, OPT_BUDGET, OPT_SERVE_FD, OPT_INTERVAL, OPT_OUTDIR, OPT_BY,
       OPT_BASE_NICE, OPT_TRAP_COST, OPT_KERNEL_BTF, OPT_EXACT, OPT_MAX_PAUSE, OPT_MAX_WAIT, OPT_RETAINERS,
       OPT_ON };

/* ---- options.c: option arguments --------------------------------------- */

/* `s` in whole as a number into *out: strtod (parse_double), or strtol in
 * base 10 (parse_long).  Returns 0, or -1 when `s` is empty, has anything
 * after the number or is out of range. */
int parse_double(const char *s, double *out);
int parse_long(const char *s, long *out);

/* A size in bytes in whole: a number (a fraction allowed), optionally
 * followed by spaces, K, M, G or T (powers of 1024, either case) and B:
 * "1.5G", "100M", "4096".  Returns 0, or -1 (not such a size, negative,
 * above 9e18). */
int parse_size(const char *s, uint64_t *out);

/* --top N: the entries each table of a report shows, 1..1000000, or 0
 * for all (returned as 0); any other argument ends the parse with
 * argp_error. */
int parse_top(struct argp_state *state, const char *arg);

/* --by point|stack for record, census and report: true for stack (whole
 * callstacks ranked), false for point (allocation points, the default);
 * any other argument ends the parse with argp_error. */
bool parse_by(struct argp_state *state, const char *arg);

/* A --format name into *f: text, collapsed, pprof, json, svg, and
 * memtrace and dot only if `memtrace` (record writes a recording, census
 * --retainers a graph, report neither).
 * Returns 0, or -1 for any other name (*f untouched). */
int parse_format(const char *arg, enum report_format *f, bool memtrace);

/* A --value name into *v: alloc, live or peak (REPORT_VALUE_*).  Returns 0,
 * or -1 for any other name (*v untouched). */
int parse_value(const char *arg, int *v);

/* ---- the commands ------------------------------------------------------ */

/* Each parses `camlheap COMMAND ARGS...` (argv[1] is COMMAND, renamed
 * "camlheap COMMAND" for argp's messages), then runs the command, and
 * returns the exit status.  Bad options: 2, or argp itself exits with
 * argp_err_exit_status (main sets it to 2). */

/* options_record.c: `record` (census false), `census` (census true) and
 * `top` share record.h's options and run. */
int record_command(int argc, char **argv, bool census);
int top_command(int argc, char **argv);

/* options_report.c: `report FILE`, `diff A B`. */
int report_command(int argc, char **argv);
int diff_command(int argc, char **argv);

/* options_serve.c: `serve`, `status`. */
int serve_command(int argc, char **argv);
int status_command(int argc, char **argv);

#endif
