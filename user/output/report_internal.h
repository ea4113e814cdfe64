/* report_internal.h -- what the report writers (report_text.c,
 * report_json.c, report_flame.c, report.c) share through report_sites.c:
 * not part of the output API (report.h).
 */
#ifndef CH_REPORT_INTERNAL_H
#define CH_REPORT_INTERNAL_H

#include <stdio.h>

#include <glib.h>
#include <json-glib/json-glib.h>

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

/* An allocation point: the site groups of one kind (custom type,
 * bigarray owner, domain with --by-domain) whose allocation has one
 * source position, the innermost frame of the allocation with its
 * Comballoc index applied (report_points.c). */
struct point_group {
	struct site_group sum;  /* summed over its stacks; sum.site: its heaviest stack's site */
	const char *function;   /* of the allocation (the symbolizer's, or "[no OCaml frames]") */
	const char *file;       /* NULL when unknown */
	int line;               /* 0 when unknown */
	const char *via;        /* malloc: the libc function that OCaml code called into C for (its
				 * point is the OCaml caller's position); else NULL */
	size_t *stacks;         /* indexes into report_groups.stacks, heaviest first */
	size_t nstacks;
};

/* A function's figures, in samples of the ranking value (allocated, live
 * or peak live): flat, at its own allocation points (it is the innermost
 * frame, inlined frames expanded); cum, on callstacks it is anywhere on,
 * once per callstack (recursion counts once), as pprof -top. */
struct function_row {
	const char *function;
	uint64_t flat, cum;
};

/* Everything a report ranks, by one value (`by`, enum report_value). */
struct report_groups {
	struct site_group *stacks;   /* report_group_sites: by kind and printed stack, sorted */
	size_t nstacks;
	struct point_group *points;  /* sorted by the value, then samples */
	size_t npoints;
	struct function_row *funcs;  /* sorted by flat, then cum, then name */
	size_t nfuncs;
	uint64_t total;              /* the value summed over every stack, samples */
	size_t *stack_ix;            /* storage of the points' stack lists */
	size_t *path_of;             /* census --retainers: per path of m->retention, its point (or with --by stack
				      * its stack group), (size_t)-1 for none; NULL: not made (report_paths_index) */
};

/* The value a group is ranked by: samples, live or peak live samples. */
uint64_t report_group_value(const struct site_group *g, int by);

/* Group `p`'s sites by stack, by allocation point and by function, ranked
 * by `by`.  Returns 0, or -1 on allocation failure (*r empty).  Free with
 * report_groups_free. */
int report_groups_build(const struct profile *p, struct modules *mods, int by, struct report_groups *r);
void report_groups_free(struct report_groups *r);

/* For each of the `n` sites (of the profile `r` was built from), the index
 * in r->points of its allocation point, into out[n] ((size_t)-1 for a
 * site in none, which does not happen for the profile's own sites). */
void report_points_of_sites(const struct report_groups *r, struct modules *mods, const struct profile_site *const *sites,
			    size_t n, size_t *out);

/* The same for r->stacks: the index of each site's stack group (sites
 * merged by kind and printed stack). */
void report_stacks_of_sites(const struct report_groups *r, struct modules *mods, const struct profile_site *const *sites,
			    size_t n, size_t *out);

/* census --retainers, under entry `gi` of r (a point, or with by_stack a
 * stack group): the paths that keep its live sampled blocks alive, grouped
 * by shape (report_paths.c).  Nothing if m->retention is NULL. */
void report_paths_text(FILE *out, const struct report_meta *m, struct modules *mods, const struct report_groups *r,
		       size_t gi);

/* census --retainers: under the tables, each of the first k points'
 * first group (root and owner) and its unreachable share: the answer on
 * the first screen, the paths in the detail. */
void report_paths_summary(FILE *out, const struct profile *p, const struct report_meta *m,
			  const struct report_groups *r, size_t k);

/* census --retainers: r->path_of made (nothing if m->retention has no
 * paths, or no memory). */
void report_paths_index(const struct report_meta *m, struct modules *mods, struct report_groups *r, bool by_stack);

/* "Module.f (file.ml:12)", with its type for custom blocks and bigarrays:
 * an allocation point's name (report_text_points.c).  Returns buf. */
const char *report_point_name(const struct profile *p, const struct point_group *pg, char *buf, size_t len);

/* "Leak.leak_one (leak.ml:63)": a site by its allocation's innermost frame
 * (report_paths.c). */
void report_site_leaf_name(const struct profile_site *s, struct modules *mods, char *buf, size_t len);

/* census --retainers, grouped (report_paths.c). */
#define PATH_SEGS_MAX (2 * REPORT_PATH_END + 1)

/* Consecutive blocks of one shape on a path, or the gap between its
 * shown ends. */
struct path_seg {
	const struct report_hop *rep; /* the first of them */
	uint64_t nmin, nmax;          /* how many (one path's: nmin == nmax) */
	bool gap;                     /* blocks not shown: nmin..nmax of them */
	bool last;                    /* the sampled block */
};

/* The paths of one root whose blocks one owner retains alone (the same
 * root group or field, or several: "shared"), shown by the shortest. */
struct path_group {
	GString *key;
	size_t rep;                   /* its shortest path (the first of them), an index into the retention's paths */
	uint64_t blocks, samples, len_min, len_max;
	GHashTable *shapes;           /* the distinct shapes of its paths */
	struct path_seg segs[PATH_SEGS_MAX]; /* the shortest path's */
	size_t nsegs;
};

/* The groups of entry gi (as report_paths_text), the most samples first. */
struct path_groups {
	struct path_group **g;
	size_t n;
	uint64_t blocks;              /* the entry's live sampled blocks followed at the stop */
	uint64_t count[4];            /* of which, by enum report_path_status */
	GHashTable *by_key;
};

/* Group the paths of entry gi of r into *out (empty without paths).
 * Returns 0, or -1 on allocation failure (*out empty).  Free with
 * report_path_groups_free. */
int report_path_groups(const struct report_meta *m, const struct report_groups *r, size_t gi, struct path_groups *out);
void report_path_groups_free(struct path_groups *pg);

/* "held by global Leak field 4 alone: paths of 323-23528 blocks" into buf. */
void report_path_group_title(const struct report_retention *rr, const struct path_group *g, char *buf, size_t len);

/* A segment as the text report shows it ("block tag 0, 2 words  x 10: its
 * data"), without the field that leads to it; *role: the block before's
 * role among a stdlib container's parts (0 at a path's start), then its. */
void report_seg_text(const struct report_retention *rr, const struct path_seg *s, const struct profile_site *own,
		     struct modules *mods, int *role, char *buf, size_t len);

/* census --retainers -o FILE.dot: the paths of the top entries as a
 * Graphviz graph (report_dot.c). */
int report_write_census_dot(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

/* census --retainers: JSON member "retainers" (docs/json.md), the paths
 * grouped by shape under each of sites[0..nsites) (the "sites" array's
 * order).  Nothing if m->retention is NULL. */
void report_paths_json(JsonBuilder *jb, const struct report_meta *m, const struct profile_site *const *sites,
		       size_t nsites);

/* census --retainers: the header line (the stop, the pause, or why no
 * paths). */
void report_paths_header(FILE *out, const struct report_meta *m);

/* A ranked group's header in the text report: "#rank  kind  estimate
 * [95% CI]  samples  share of `total`" (of m->value), "at POINT" when `at`
 * is not NULL, its type line, and
 * with --live (or a live ranking) its live figures. */
void report_group_header(FILE *out, const struct profile *p, const struct report_meta *m, const struct site_group *g,
			 size_t rank, uint64_t total, const char *at);

/* The same in the census: live estimate, blocks, median age, leak score. */
void report_census_group_header(FILE *out, const struct profile *p, const struct site_group *g, size_t rank,
				const char *at);

/* The text (census: live) report's ranking by allocation point: a table
 * of the top m->top points (all with m->top <= 0) by `by` with their
 * intervals and shares, the functions table (flat and cum., pprof -top),
 * then each of those points with its heaviest callstacks
 * (report_text_points.c). */
void report_text_points(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
			const struct report_groups *r, int by, bool census);

/* qsort order of site groups by leak score, then live samples. */
int report_group_cmp_score(const void *a, const void *b);

/* A leak suspect: blocks born in at least two thirds of the judged major
 * cycles (and at least three) still alive, and a growing live estimate. */
bool report_is_suspect(const struct site_group *g);

/* The interactive SVG flame graph (report.h's REPORT_SVG) of `m->value`,
 * drawn by flamegraph.pl.  Returns 0 or -errno. */
int report_write_svg(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods);

#endif
