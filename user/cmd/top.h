/* top.h -- `camlheap top`: a live view of a running program's allocations,
 * refreshed every few seconds while `camlheap record`'s intake loop goes on
 * (record.c runs it; this module only reads the profile).
 *
 * What it shows, per allocation site (the source location of the
 * allocation point: the innermost frame of the sampled callstacks, inlined
 * frames expanded) or per node of the call tree (top-down, outermost frame
 * first):
 *  - ALLOC/s: estimated bytes allocated per second over the last --window
 *    seconds: the site's samples in that window / lambda * 8 / seconds, each
 *    sample kept under a budget counting 2^k (profile.h); with its 95 %
 *    bound (Byar's interval of the Poisson sample count, profile.h; under a
 *    budget of 2^-k, the normal bound of a count of samples weighing 2^k);
 *  - LIVE: estimated bytes of its sampled blocks alive now (census);
 *  - GROWTH/s and TREND: the live estimate's change per second over the
 *    last --trend seconds, and its sparkline (each column the live bytes at
 *    the end of its span, scaled to the row's largest);
 *  - AGE: the median age of its live bytes: the median over its live sampled
 *    blocks, weighted by their samples, of the time since their
 *    allocation, from a histogram with half-octave buckets (within ~20 %);
 *  - header: process, OCaml version, lambda and executor, the OCaml heap
 *    and the resident set (and their growth), the live estimate, minor
 *    collections and major cycles per second, samples per second, events
 *    lost, the budget's 2^-k in force.
 */
#ifndef CH_TOP_H
#define CH_TOP_H

#include <stdbool.h>
#include <stdint.h>

#include "camlheap.h"
#include "target/modules.h"
#include "profile/profile.h"

enum top_sort {
	TOP_SORT_ALLOC = 0, /* bytes allocated per second (default) */
	TOP_SORT_LIVE,      /* live bytes */
	TOP_SORT_GROWTH,    /* live bytes' growth per second over the trend span */
	TOP_SORT_AGE,       /* median age of the live bytes */
	TOP_SORT_SITE,      /* the site's name (ascending) */
	TOP_SORT__COUNT,
};

struct top_opts {
	double delay_s;      /* refresh every this many seconds (-d; default 1) */
	double window_s;     /* allocation rates over the last this many seconds (default 5; >= delay) */
	double trend_s;      /* live trend span, seconds (default 120) */
	bool batch;          /* print refreshes as text to stdout (-b; also when stdout is no terminal) */
	long iterations;     /* stop after this many refreshes (-n; 0: until stopped) */
	int rows;            /* --batch: rows per refresh (0: all; default 30) */
	enum top_sort sort;
	bool reverse;        /* sort the other way */
	bool tree;           /* start in (batch: print) the call tree */
	const char *filter;  /* only rows whose name contains this (case-insensitive), or NULL */
	double trace_limit_mib; /* the memtrace kept for the 'm' key stops at this size (0: none kept) */
};

/* What the recorder reports at each refresh. */
struct top_status {
	uint64_t counters[CH_CNT__COUNT]; /* the BPF counters (enum ch_counter) */
	unsigned shift;                   /* budget: samples kept with probability 2^-shift */
	bool res_valid;                   /* rss_kib and heap_words were read */
	uint64_t rss_kib;                 /* VmRSS, KiB */
	uint64_t heap_words;              /* the OCaml heap, words (resident.h) */
	const char *memtrace_off;         /* why the 'm' key cannot write a memtrace, or NULL */
};

/* The recording seen by the view (record.c fills it). */
struct top_source {
	struct profile *prof;
	struct modules *mods;
	int pid;
	const char *exe, *ocaml_version, *executor;
	bool census_on;
	void *ctx;
	void (*status)(void *ctx, struct top_status *st);
	/* Write the profile so far to `path`: pprof (heap profile: every
	 * sample type, default inuse_space with the census, else alloc_space)
	 * or the memtrace recording.  Returns 0, or -errno with msg set. */
	int (*write_profile)(void *ctx, bool memtrace, const char *path, char *msg, size_t len);
};

struct top;

/* Start the view: interactive (ncurses on the terminal; stderr is kept in
 * a temporary file meanwhile and shown in the bottom line, then replayed
 * at top_free) unless o->batch.  `now` is CLOCK_MONOTONIC seconds, the
 * recording's time zero.  Returns 0 or -errno with msg set. */
int top_new(const struct top_opts *o, const struct top_source *src, double now, struct top **out, char *msg,
	    size_t len);

/* The descriptor to poll for keys (stdin), or -1 in batch mode. */
int top_input_fd(const struct top *t);

/* When the next refresh is due (CLOCK_MONOTONIC seconds). */
double top_next_refresh(const struct top *t);

/* Read and act on the keys pressed.  Returns true if the user asked to quit. */
bool top_keys(struct top *t);

/* The terminal changed size (SIGWINCH): redraw at the new size. */
void top_resize(struct top *t);

/* A suspend key (^Z) was refused: say why in the bottom line. */
void top_say(struct top *t, const char *msg);

/* Refresh if due: read the profile, update the figures, draw (or print a
 * batch refresh).  Returns 1 once --iterations refreshes were done, 0
 * otherwise, or -errno if the batch output could not be written (stdout
 * closed or full: stop). */
int top_refresh(struct top *t, double now);

/* Before anything is attached: can this terminal be driven (cursor
 * addressing)?  Returns 0, or -ENOTTY with msg set. */
int top_check_terminal(char *msg, size_t len);

/* The recording ended (`reason`); probes are detached.  A last refresh;
 * then, interactive and `linger` (the target ended by itself), the figures
 * stay on screen, still browsable and writable, until q or a signal on
 * `sigfd` (a signalfd: SIGWINCH redraws, SIGTSTP is ignored, any other
 * ends it). */
void top_ended(struct top *t, double now, const char *reason, bool linger, int sigfd);

/* Restore the terminal, replay what was written to stderr meanwhile, free. */
void top_free(struct top *t);

/* Parse a --sort name (alloc, live, growth, age, site).  Returns 0 or -1. */
int top_parse_sort(const char *name, enum top_sort *out);

#endif
