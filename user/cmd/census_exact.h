/* census_exact.h -- `camlheap census -p PID --exact`: every block of a
 * running OCaml 4.x program's major heap counted, the program stopped
 * meanwhile (heap/freeze.h, heap/walk4.h; issue 25's exact census).
 */
#ifndef CH_CENSUS_EXACT_H
#define CH_CENSUS_EXACT_H

#include <stdbool.h>
#include <sys/types.h>

struct census_exact_opts {
	pid_t pid;
	const char *output;    /* file (temporary file and rename), NULL or "-" for stdout */
	bool json;             /* JSON, schema "camlheap-exact-census" (docs/json.md), else text */
	int top;               /* tags shown in the text, 0: all */
	double max_pause_s;    /* the walk stops (nothing written, exit 1) once the target was stopped this long */
	double max_wait_s;     /* stops tried for this long, seconds, to find one outside the memory manager */
	bool retainers;        /* also trace from the roots: reachable, and retained by root group (heap/trace4.h) */
	bool quiet;
};

/* Run it.  Returns camlheap's exit status: 0 written; 1 the walk or the
 * write failed or passed max_pause_s (the target runs on, an existing
 * output file is untouched); 2 a bad target (not OCaml, not 4.12-4.14,
 * .symtab stripped, cannot be traced; message on stderr). */
int census_exact_run(const struct census_exact_opts *o);

#endif
