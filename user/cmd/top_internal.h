/* top_internal.h -- what the files of camlheap top (top.h) share: the
 * view's state (struct top, owned by top.c: top_new makes it, top_free
 * frees it) and the model's nodes, with the functions each file lends the
 * others: top_model.c (the figures, the rows), top_text.c (their text, the
 * batch output), top_screen.c (ncurses).  Not for use outside user/cmd/top*.
 * No ncurses here: <term.h> (top_term.c) defines macros such as `lines`.
 */
#ifndef CH_TOP_INTERNAL_H
#define CH_TOP_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <glib.h>

#include "cmd/top.h"

#define NAGE 48           /* age histogram: bucket 0 is [0, 10 ms), bucket i [10 ms 2^((i-1)/2), 10 ms 2^(i/2)) */

struct node {
	const char *label;        /* short: file base names */
	const char *full;         /* full paths (detail, filter) */
	struct node *parent;
	GPtrArray *kids;          /* tree nodes */
	GHashTable *kid_by;       /* full label -> node */
	unsigned depth, reps;     /* tree: consecutive identical frames merged (recursion) */
	bool expanded, expand_set, match, sub_match;
	double *hist;             /* live samples at each refresh (ring of t->H), or NULL */
	long born;                /* refresh at which hist started */
	/* accumulated at each refresh (valid when stamp == t->tick) */
	long stamp;
	double win, alloc, live;  /* samples: in the rate window, since attach, alive now */
	double ages[NAGE];
};

struct siteinfo {
	struct node *group;
	struct node *term;        /* the tree node its callstack ends at */
	bool labeled;             /* labeled with its frames (not "frames lost") */
	double *ring;             /* cumulative samples at the last W+1 refreshes */
};

struct framelabels {
	unsigned n;               /* inline chain, innermost first */
	const char **shortv, **fullv;
};

struct top {
	struct top_opts o;
	struct top_source src;
	bool tui, utf8;
	long tick;                /* refreshes done; refresh 0 is the start */
	unsigned H, W;            /* history ring length; rate window in refreshes */
	double *times;
	/* header series (ring of H) */
	double *g_alloc, *g_live, *g_minor, *g_major, *g_samples, *g_heap, *g_rss;
	uint64_t drops;
	GHashTable *sinfo;        /* struct profile_site * -> struct siteinfo */
	GHashTable *groups;       /* full label -> node */
	GPtrArray *group_list;
	GPtrArray *roots;         /* call tree */
	GHashTable *root_by;
	bool tree_built;
	GPtrArray *hist_nodes;    /* tree nodes with a live history */
	GHashTable *flcache;      /* (pc, alloc_idx) -> struct framelabels */
	GStringChunk *strs;
	/* view */
	bool tree_view, frozen, reverse;
	enum top_sort sort;
	char filter[256];
	GPtrArray *rows;          /* displayed nodes */
	struct node *selnode;
	long sel, scroll;
	int mode, pkind;          /* MODE_*, PROMPT_* (top_screen.c) */
	char pbuf[1024], pold[256];
	size_t pcur;              /* the prompt's cursor, bytes into pbuf */
	GPtrArray *dlines;
	long dscroll;
	char msg[512];
	double msg_until;
	/* stderr while the screen is ours */
	int saved_err, cap_fd;
	off_t cap_off;
	char cap_last[256];
	/* state */
	bool ended;
	char end_reason[512];
	double t0, next;
	double end_ns;            /* CLOCK_MONOTONIC ns of the end (ages stop there), 0 while recording */
	int out_err;              /* batch: errno of a failed write to stdout */
	struct top_status st;
	/* header figures of the last refresh */
	double h_dt, h_rate, h_pm, h_live, h_live_pm, h_live_growth, h_heap_growth, h_rss_growth, h_minor, h_major,
		h_sps;
};

/* A row's figures (ALLOC/s, its bound, LIVE, GROWTH/s, AGE). */
struct figs {
	double rate, pm, live, growth, age;
};

/* The ring slot of refresh `tick` (any long, also negative) in the
 * history rings of t->H entries. */
static inline unsigned slot(const struct top *t, long tick) { return (unsigned)(((tick % (long)t->H) + t->H) % t->H); }

/* Estimated bytes of `samples` samples at the profile's rate (lambda,
 * samples per word): samples / lambda * 8. */
static inline double to_bytes(const struct top *t, double samples) { return samples / t->src.prof->rate * 8.0; }

/* ---- top_model.c ---------------------------------------------------------- */

/* The labels of the frames at runtime return address `pc` (alloc_idx: the
 * Comballoc sub-allocation of a leaf allocation frame, 0 otherwise): its
 * inline chain, innermost first, short (file base names) and full, the
 * strings interned in t->strs.  Cached in t->flcache; never NULL, at least
 * one frame. */
const struct framelabels *top_frame_labels(struct top *t, uint64_t pc, unsigned alloc_idx);

/* Free functions of t->flcache's values (struct framelabels), t->sinfo's
 * (struct siteinfo) and of the nodes (struct node, with their subtrees). */
void top_framelabels_free(gpointer p);
void top_siteinfo_free(gpointer p);
void top_node_free(gpointer p);

/* Build the call tree from the sites seen so far, with the figures of the
 * last refresh (the tree is built when first shown; a no-op after). */
void top_build_tree(struct top *t);

/* A refresh: t->tick goes on by one; read the recorder's status and the
 * profile at `now` (CLOCK_MONOTONIC seconds) into the rows' and the
 * header's figures. */
void top_sample(struct top *t, double now);

/* Node `n`'s figures at the last refresh, bytes and bytes per second (AGE
 * in seconds, -1 if nothing is live). */
struct figs top_figures(const struct top *t, const struct node *n);

/* Whether tree node `n` shows its children: as the user set it, else
 * open on a filter's match below, in batch mode, at the roots and along
 * single-child chains. */
bool top_node_expanded(const struct top *t, const struct node *n);

/* t->rows: the rows shown (flat or tree view), filtered and sorted, the
 * selection kept on t->selnode's row where it is still shown. */
void top_build_rows(struct top *t);

/* ---- top_text.c ----------------------------------------------------------- */

/* Bytes `b` (may be negative) in at most 5 characters, binary prefixes,
 * into buf[len]; returns buf. */
const char *top_fmt_b(double b, char *buf, size_t len);

/* Row `n`'s line of the table into out[len]; `wide` from 2 (all columns,
 * with GROWTH/s and TOTAL) down to -2 (no TREND, no bound): see
 * table_header for the columns. */
void top_row_text(const struct top *t, const struct node *n, int wide, char *out, size_t len);

/* The table's column header for rows of width `wide` (as row_text) into
 * out[len]. */
void top_table_header(const struct top *t, int wide, char *out, size_t len);

/* The four header lines of the last refresh (process and recording; heap,
 * RSS and live bytes; allocation, GC and sample rates; the view), each
 * NUL-terminated, cut at 512 bytes. */
void top_header_lines(const struct top *t, char hl[4][512]);

/* Print a batch refresh (header, then the table: --rows rows, rebuilt
 * first) to stdout.  Returns 0, or -errno (also kept in t->out_err) if
 * stdout cannot be written. */
int top_print_batch(struct top *t);

/* ---- top_screen.c --------------------------------------------------------- */

/* A message for the bottom line (printf format), shown for 8 seconds. */
void top_sayf(struct top *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Show the last line written to stderr since the last call (stderr goes
 * to t->cap_fd while the screen is ours); a no-op without capture. */
void top_read_captured(struct top *t);

/* Draw the screen: the table, or the detail/help page, and the bottom
 * line (prompt, message or key help).  A no-op in batch mode. */
void top_draw(struct top *t);

#endif
