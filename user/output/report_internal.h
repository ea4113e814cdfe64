/* report_internal.h -- what the report writers (report_text.c,
 * report_json.c, report_flame.c, report.c) share through report_sites.c:
 * not part of the output API (report.h).
 */
#ifndef CH_REPORT_INTERNAL_H
#define CH_REPORT_INTERNAL_H

#include <stdio.h>

#include <glib.h>

#include "output/report.h"

/* Inlined frames a return address expands to, at most (sym_frame arrays). */
#define MAX_INLINE 16

/* Where the target's resident set went (report_meta.rss_kib from
 * /proc/PID/status; the heap from the runtime's counters; what lives
 * outside the heap from the census of the sampled out-of-heap kinds). */
struct resident_split {
	bool known;          /* a reading exists */
	double rss, hwm, heap; /* bytes; heap < 0: unknown */
	double live[CH_KIND__COUNT]; /* estimated live bytes by kind (bigarray: owned data only) */
	bool live_known;     /* census on */
	bool malloc_on;
	double unexplained;  /* rss - heap - bigarray - malloc (- custom without --malloc) */
};

/* Sites merged by kind and printed stack (report_group_sites): what the
 * text and census reports rank. */
struct site_group {
	uint8_t kind;
	uint64_t samples;
	const struct profile_site *site; /* one of its sites: the stack it prints */
	size_t first;                    /* rank of that site among all sites (a stable tie-break) */
	/* census, summed over the group's sites */
	uint64_t followed, live, live_blocks, peak, promoted, dead, relocated, unfollowed;
	uint64_t retained;               /* live samples born in judged cycles */
	uint32_t retaining, cycles;      /* judged cycles with live births (max over sites), judged cycles */
	double lifetime_s;               /* sum over dead blocks */
	uint64_t dead_minor_gcs;         /* sum over dead blocks of the minor collections they lived through */
	double median_age;               /* of the site with the most live samples */
	uint64_t median_from;            /* its live samples */
	bool grows;
	double score;                    /* bytes per major cycle */
};

/* Why the minor heap is not (or no longer) sampled, or NULL: the
 * recording's reason, or the live layout check's (CH_CNT_LAYOUT_BAD). */
const char *report_minor_off(const struct report_meta *m);

/* Estimated bytes for `samples` samples at the profile's rate
 * (profile_estimate_words * 8). */
double report_est_bytes(const struct profile *p, uint64_t samples);

/* "" for 1, else "s". */
const char *report_plural(uint64_t n);

/* Print a site's type line, under its header: a custom block's operations,
 * whose data a bigarray holds, a malloc call outside OCaml; nothing for
 * other sites. */
void report_site_type_line(FILE *out, const struct profile *p, const struct profile_site *s);

/* Where the target's resident set went, into *r (r->known false if no
 * reading exists). */
void report_resident_split(const struct profile *p, const struct report_meta *m, struct resident_split *r);

/* The lines a site's stack prints as, innermost first (g_free'd strings:
 * unref the array): one per frame, inlined frames expanded, then why the
 * walk ended if not cleanly. */
GPtrArray *report_site_lines(const struct profile_site *s, struct modules *mods);

/* Print a stack's lines, indented; a run of identical lines (recursion)
 * prints once with its count: "Chain.recurse (chain.ml:95) [x699]". */
void report_print_lines(FILE *out, GPtrArray *lines);

/* Sites merged by kind and printed stack, sorted by samples (by live or
 * peak live samples: `by`, an enum report_value), with their census sums
 * and leak scores.  Returns a malloc'ed array of *count groups (free()),
 * NULL on allocation failure with *count 0. */
struct site_group *report_group_sites(const struct profile *p, struct modules *mods, size_t *count, int by);

/* qsort order of site groups by leak score, then live samples. */
int report_group_cmp_score(const void *a, const void *b);

/* A leak suspect: blocks born in at least two thirds of the judged major
 * cycles (and at least three) still alive, and a growing live estimate. */
bool report_is_suspect(const struct site_group *g);

/* The interactive SVG flame graph (report.h's REPORT_SVG) of `m->value`,
 * drawn by flamegraph.pl.  Returns 0 or -errno. */
int report_write_svg(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

#endif
