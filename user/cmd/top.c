/* top.c -- `camlheap top` (top.h): the live view, interactive (ncurses) or
 * batch (text on stdout, like top -b).
 */
#define _GNU_SOURCE
#define NCURSES_WIDECHAR 1
#include "cmd/top.h"

#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <ncurses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include <glib.h>

#include "output/report.h"
#include "target/symbolize.h"

#define NAGE 48           /* age histogram: bucket 0 is [0, 10 ms), bucket i [10 ms 2^((i-1)/2), 10 ms 2^(i/2)) */
#define SPARK_W 12        /* sparkline columns */
#define MAX_INLINE 16
#define MAX_INDENT 12

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

enum { MODE_MAIN, MODE_DETAIL, MODE_PROMPT };
enum { PROMPT_FILTER, PROMPT_PPROF, PROMPT_MEMTRACE };

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
	int mode, pkind;
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

static const char *const sort_names[TOP_SORT__COUNT] = { "alloc", "live", "growth", "age", "site" };
static const char *const col_names[TOP_SORT__COUNT] = { "ALLOC/s", "LIVE", "GROWTH/s", "AGE", "SITE" };

int top_parse_sort(const char *name, enum top_sort *out)
{
	for (int i = 0; i < TOP_SORT__COUNT; i++)
		if (!strcmp(name, sort_names[i])) {
			*out = (enum top_sort)i;
			return 0;
		}
	return -1;
}

/* ---- formatting ------------------------------------------------------ */

/* Bytes in at most 5 characters, binary prefixes: "999B", "12.3K", "1023M". */
static const char *fmt_b(double b, char *buf, size_t len)
{
	static const char units[] = "BKMGTP";
	int u = 0;
	double a = fabs(b);

	while (a >= 1024.0 && u < 5) {
		a /= 1024.0;
		u++;
	}
	if (b < 0)
		a = -a;
	if (u == 0)
		snprintf(buf, len, "%.0fB", a);
	else
		snprintf(buf, len, fabs(a) < 10 ? "%.2f%c" : fabs(a) < 100 ? "%.1f%c" : "%.0f%c", a, units[u]);
	return buf;
}

static const char *fmt_age(double s, char *buf, size_t len)
{
	if (s < 0)
		snprintf(buf, len, "-");
	else if (s < 1)
		snprintf(buf, len, "%.0fms", s * 1000);
	else if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%.1fm", s / 60);
	else if (s < 86400)
		snprintf(buf, len, "%.1fh", s / 3600);
	else
		snprintf(buf, len, "%.1fd", s / 86400);
	return buf;
}

static unsigned age_bucket(double s)
{
	if (s < 0.01)
		return 0;
	double b = floor(2 * log2(s / 0.01)) + 1;
	return b >= NAGE - 1 ? NAGE - 1 : (unsigned)b;
}

/* The weighted median of a histogram (geometric interpolation within its
 * bucket), seconds; -1 if empty. */
static double age_median(const double *h)
{
	double tot = 0, acc = 0;

	for (int i = 0; i < NAGE; i++)
		tot += h[i];
	if (!(tot > 0))
		return -1;
	for (int i = 0; i < NAGE; i++) {
		if (acc + h[i] >= tot / 2 && h[i] > 0) {
			double f = (tot / 2 - acc) / h[i];
			double lo = i == 0 ? 0.001 : 0.01 * exp2((i - 1) / 2.0), hi = 0.01 * exp2(i / 2.0);

			return lo * pow(hi / lo, f);
		}
		acc += h[i];
	}
	return -1;
}

/* 95 % half-width of a count of `n` samples each weighing 2^shift. */
static double count_bound(double n, unsigned shift)
{
	if (shift == 0) {
		double lo, hi;

		profile_poisson_ci95((uint64_t)llround(n), &lo, &hi);
		return (hi - lo) / 2;
	}
	return 1.96 * sqrt((n > 1 ? n : 1) * ldexp(1, (int)shift));
}

static double to_bytes(const struct top *t, double samples) { return samples / t->src.prof->rate * 8.0; }

/* ---- labels ------------------------------------------------------------ */

static const char *intern(struct top *t, const char *s) { return g_string_chunk_insert_const(t->strs, s); }

static const struct framelabels *frame_labels(struct top *t, uint64_t pc, unsigned alloc_idx)
{
	uint64_t key = pc ^ ((uint64_t)alloc_idx << 56);
	struct framelabels *fl = g_hash_table_lookup(t->flcache, &key);
	struct sym_frame fr[MAX_INLINE];
	int n;

	if (fl)
		return fl;
	n = modules_lookup(t->src.mods, pc, alloc_idx, fr, MAX_INLINE);
	if (n < 1) {
		fr[0] = (struct sym_frame){ .function = "?" };
		n = 1;
	}
	fl = g_new0(struct framelabels, 1);
	fl->n = (unsigned)n;
	fl->shortv = g_new(const char *, n);
	fl->fullv = g_new(const char *, n);
	for (int j = 0; j < n; j++) {
		char *s, *f;

		if (fr[j].file && fr[j].line) {
			const char *base = strrchr(fr[j].file, '/');

			s = g_strdup_printf("%s (%s:%d)", fr[j].function, base ? base + 1 : fr[j].file, fr[j].line);
			f = g_strdup_printf("%s (%s:%d)", fr[j].function, fr[j].file, fr[j].line);
		} else if (fr[j].file) {
			s = g_strdup_printf("%s (%s)", fr[j].function, fr[j].file);
			f = g_strdup(s);
		} else {
			s = g_strdup(fr[j].function);
			f = g_strdup(s);
		}
		fl->shortv[j] = intern(t, s);
		fl->fullv[j] = intern(t, f);
		g_free(s);
		g_free(f);
	}
	g_hash_table_insert(t->flcache, g_memdup2(&key, sizeof(key)), fl);
	return fl;
}

static void framelabels_free(gpointer p)
{
	struct framelabels *fl = p;

	g_free(fl->shortv);
	g_free(fl->fullv);
	g_free(fl);
}

static bool is_pseudo(uint64_t pc) { return pc >= CH_PSEUDO_PC_BASE && pc < CH_PSEUDO_PC_BASE + CH_MFN__COUNT; }

/* A site's row in the flat view: its allocation point (the innermost
 * frame); for --malloc, the libc function and its OCaml caller. */
static void site_label(struct top *t, const struct profile_site *s, const char **shortp, const char **fullp)
{
	if (!s->stack) {
		*shortp = *fullp = "[stack frames lost]";
		return;
	}
	if (s->stack->nframes == 0) {
		*shortp = *fullp = s->stack->term == CH_TERM_CLEAN ? "[no OCaml frames: runtime start or exit]"
								   : "[no OCaml frames: unknown first return address]";
		return;
	}
	const struct framelabels *fl = frame_labels(t, s->stack->frames[0], s->alloc_idx);

	if (is_pseudo(s->stack->frames[0]) && s->stack->nframes > 1) {
		const struct framelabels *c = frame_labels(t, s->stack->frames[1], 0);
		char *a = g_strdup_printf("%s in %s", fl->shortv[0], c->shortv[0]);
		char *b = g_strdup_printf("%s in %s", fl->fullv[0], c->fullv[0]);

		*shortp = intern(t, a);
		*fullp = intern(t, b);
		g_free(a);
		g_free(b);
		return;
	}
	*shortp = fl->shortv[0];
	*fullp = fl->fullv[0];
}

static void siteinfo_free(gpointer p)
{
	struct siteinfo *si = p;

	g_free(si->ring);
	g_free(si);
}

static struct node *node_new(const char *label, const char *full)
{
	struct node *n = g_new0(struct node, 1);

	n->label = label;
	n->full = full;
	n->stamp = -1;
	n->born = -1;
	return n;
}

static void node_free(gpointer p)
{
	struct node *n = p;

	if (n->kids)
		g_ptr_array_free(n->kids, TRUE);
	if (n->kid_by)
		g_hash_table_destroy(n->kid_by);
	g_free(n->hist);
	g_free(n);
}

static struct node *group_for(struct top *t, const char *label, const char *full)
{
	struct node *g = g_hash_table_lookup(t->groups, full);

	if (!g) {
		/* a site had no samples before it was seen: its history is 0
		 * since the start */
		g = node_new(label, full);
		g->hist = g_new0(double, t->H);
		g->born = 0;
		g_hash_table_insert(t->groups, (gpointer)full, g);
		g_ptr_array_add(t->group_list, g);
	}
	return g;
}

/* The child of `parent` (NULL: a root) labeled `full`, created if new. */
static struct node *tree_child(struct top *t, struct node *parent, const char *label, const char *full)
{
	GHashTable **by = parent ? &parent->kid_by : &t->root_by;
	struct node *n;

	if (!*by)
		*by = g_hash_table_new(g_str_hash, g_str_equal);
	n = g_hash_table_lookup(*by, full);
	if (n)
		return n;
	n = node_new(label, full);
	n->parent = parent;
	n->depth = parent ? parent->depth + 1 : 0;
	n->reps = 1;
	g_hash_table_insert(*by, (gpointer)full, n);
	if (parent) {
		if (!parent->kids)
			parent->kids = g_ptr_array_new_with_free_func(node_free);
		g_ptr_array_add(parent->kids, n);
	} else {
		g_ptr_array_add(t->roots, n);
	}
	return n;
}

/* The site's path in the call tree, outermost frame first; consecutive
 * identical frames (recursion) make one node counting them. */
static struct node *tree_insert(struct top *t, const struct profile_site *s)
{
	struct node *n = NULL;

	if (!s->stack || s->stack->nframes == 0) {
		const char *l, *f;

		site_label(t, s, &l, &f);
		return tree_child(t, NULL, l, f);
	}
	if (s->stack->term != CH_TERM_CLEAN) {
		char *l = g_strdup_printf("[stack walk ended: %s]", report_term_name(s->stack->term));
		const char *li = intern(t, l);

		g_free(l);
		n = tree_child(t, NULL, li, li);
	}
	for (uint32_t i = s->stack->nframes; i-- > 0;) {
		const struct framelabels *fl = frame_labels(t, s->stack->frames[i], i == 0 ? s->alloc_idx : 0);

		for (unsigned j = fl->n; j-- > 0;) {
			if (n && n->full == fl->fullv[j] && (!n->kids || n->kids->len == 0)) {
				n->reps++; /* recursion: the same frame again, a chain not yet branched */
				continue;
			}
			if (n && n->full == fl->fullv[j])
				continue;
			n = tree_child(t, n, fl->shortv[j], fl->fullv[j]);
		}
	}
	return n;
}

/* ---- refresh --------------------------------------------------------- */

static unsigned slot(const struct top *t, long tick) { return (unsigned)(((tick % (long)t->H) + t->H) % t->H); }

static void touch(struct node *n, long tick)
{
	if (n->stamp != tick) {
		n->stamp = tick;
		n->win = n->alloc = n->live = 0;
		memset(n->ages, 0, sizeof(n->ages));
	}
}

/* A tree node's live history starts when it is first shown. */
static void ensure_hist(struct top *t, struct node *n)
{
	if (n->hist)
		return;
	n->hist = g_new(double, t->H);
	n->born = t->tick;
	n->hist[slot(t, t->tick)] = n->stamp == t->tick ? n->live : 0;
	g_ptr_array_add(t->hist_nodes, n);
}

/* The window's samples of a site (its ring holds the last W+1 refreshes). */
static double site_window(const struct top *t, const struct siteinfo *si)
{
	long tick = t->tick;
	unsigned w = tick < (long)t->W ? (unsigned)tick : t->W, W1 = t->W + 1;

	return si->ring[tick % W1] - si->ring[(tick - w) % W1];
}

/* Now, for ages: the end of the recording once it ended. */
static double age_now_ns(const struct top *t)
{
	struct timespec mono;

	if (t->end_ns > 0)
		return t->end_ns;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	return (double)mono.tv_sec * 1e9 + (double)mono.tv_nsec;
}

/* A site's figures, added to node `n` (a flat row or a tree node). */
static void add_site(const struct top *t, struct node *n, const struct profile_site *s, double win)
{
	touch(n, t->tick);
	n->win += win;
	n->alloc += (double)s->samples;
	n->live += (double)s->live_samples;
}

/* The call tree's site figures at this refresh: each site's added to every
 * node on its path. */
static void tree_add_sites(struct top *t)
{
	GHashTableIter it;
	gpointer k, v;

	g_hash_table_iter_init(&it, t->sinfo);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct siteinfo *si = v;
		double win = site_window(t, si);

		for (struct node *n = si->term; n; n = n->parent)
			add_site(t, n, k, win);
	}
}

/* Each live sampled block's age, into its flat row (`flat`) and into every
 * node on its call-tree path (`tree`): one walk of the blocks for both. */
static void add_block_ages(struct top *t, bool flat, bool tree)
{
	GHashTableIter it;
	gpointer k, v;
	double now_ns = age_now_ns(t);

	g_hash_table_iter_init(&it, t->src.prof->blocks);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_block *b = v;
		struct siteinfo *si = b->site ? g_hash_table_lookup(t->sinfo, b->site) : NULL;
		unsigned a;

		if (!si)
			continue;
		a = age_bucket((now_ns - (double)b->time_ns) * 1e-9);
		if (flat && si->group)
			si->group->ages[a] += (double)b->nsamples;
		if (tree)
			for (struct node *n = si->term; n; n = n->parent)
				n->ages[a] += (double)b->nsamples;
	}
}

/* The live history of the tree nodes shown so far. */
static void tree_hist(struct top *t)
{
	for (guint i = 0; i < t->hist_nodes->len; i++) {
		struct node *n = t->hist_nodes->pdata[i];

		n->hist[slot(t, t->tick)] = n->stamp == t->tick ? n->live : 0;
	}
}

static void build_tree(struct top *t)
{
	GHashTableIter it;
	gpointer k, v;

	if (t->tree_built)
		return;
	t->tree_built = true;
	g_hash_table_iter_init(&it, t->sinfo);
	while (g_hash_table_iter_next(&it, &k, &v))
		((struct siteinfo *)v)->term = tree_insert(t, k);
	if (t->tick > 0) {
		/* the figures of the last refresh */
		tree_add_sites(t);
		add_block_ages(t, false, true);
		tree_hist(t);
	}
}

static void sample(struct top *t, double now)
{
	struct profile *p = t->src.prof;
	GHashTableIter it;
	gpointer k, v;
	long tick = ++t->tick;
	unsigned w = tick < (long)t->W ? (unsigned)tick : t->W, W1 = t->W + 1;
	unsigned sl = slot(t, tick), sl0 = slot(t, tick - (long)w);

	t->times[sl] = now;
	if (t->src.status)
		t->src.status(t->src.ctx, &t->st);
	/* new sites; sites whose frames arrived since */
	g_hash_table_iter_init(&it, p->sites);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		struct profile_site *s = v;
		struct siteinfo *si = g_hash_table_lookup(t->sinfo, s);

		if (!si) {
			si = g_new0(struct siteinfo, 1);
			si->ring = g_new0(double, W1);
			g_hash_table_insert(t->sinfo, s, si);
		}
		if (!si->group || (!si->labeled && s->stack)) {
			const char *l, *f;

			site_label(t, s, &l, &f);
			si->group = group_for(t, l, f);
			si->labeled = s->stack != NULL;
			if (t->tree_built)
				si->term = tree_insert(t, s);
		}
		si->ring[tick % W1] = (double)s->samples;
		add_site(t, si->group, s, site_window(t, si));
	}
	if (t->tree_built)
		tree_add_sites(t);
	/* ages of the live sampled blocks */
	add_block_ages(t, true, t->tree_built);
	for (guint i = 0; i < t->group_list->len; i++) {
		struct node *g = t->group_list->pdata[i];

		g->hist[sl] = g->stamp == tick ? g->live : 0;
	}
	if (t->tree_built)
		tree_hist(t);
	/* the header */
	t->g_alloc[sl] = (double)p->samples;
	t->g_live[sl] = (double)p->live_samples;
	if (t->src.census_on) {
		t->g_minor[sl] = (double)t->st.counters[CH_CNT_MINOR_UPDATES];
		t->g_major[sl] = (double)t->st.counters[CH_CNT_CLEAN_PHASES];
	} else {
		t->g_minor[sl] = (double)p->cur_minor_gcs;
		t->g_major[sl] = (double)p->cur_major_gcs;
	}
	t->g_samples[sl] = (double)(t->st.counters[CH_CNT_SAMPLES] + t->st.counters[CH_CNT_DROPPED_SAMPLES]);
	t->g_heap[sl] = t->st.res_valid ? (double)t->st.heap_words * 8.0 : NAN;
	t->g_rss[sl] = t->st.res_valid ? (double)t->st.rss_kib * 1024.0 : NAN;
	t->drops = t->st.counters[CH_CNT_DROPPED];

	double dt = t->times[sl] - t->times[sl0];
	long tw = tick < (long)(t->H - 1) ? tick : (long)t->H - 1; /* the trend span, refreshes */
	unsigned st0 = slot(t, tick - tw);
	double dtt = t->times[sl] - t->times[st0];

	t->h_dt = dt;
	t->h_rate = dt > 0 ? to_bytes(t, t->g_alloc[sl] - t->g_alloc[sl0]) / dt : 0;
	t->h_pm = dt > 0 ? to_bytes(t, count_bound(t->g_alloc[sl] - t->g_alloc[sl0], t->st.shift)) / dt : 0;
	t->h_live = to_bytes(t, t->g_live[sl]);
	t->h_live_pm = to_bytes(t, count_bound(t->g_live[sl], t->st.shift));
	t->h_live_growth = dtt > 0 ? to_bytes(t, t->g_live[sl] - t->g_live[st0]) / dtt : 0;
	t->h_heap_growth = dtt > 0 ? (t->g_heap[sl] - t->g_heap[st0]) / dtt : NAN;
	t->h_rss_growth = dtt > 0 ? (t->g_rss[sl] - t->g_rss[st0]) / dtt : NAN;
	t->h_minor = dt > 0 ? (t->g_minor[sl] - t->g_minor[sl0]) / dt : 0;
	t->h_major = dt > 0 ? (t->g_major[sl] - t->g_major[sl0]) / dt : 0;
	t->h_sps = dt > 0 ? (t->g_samples[sl] - t->g_samples[sl0]) / dt : 0;
}

/* A row's figures (ALLOC/s, its bound, LIVE, GROWTH/s, AGE). */
struct figs {
	double rate, pm, live, growth, age;
};

static struct figs figures(const struct top *t, const struct node *n)
{
	struct figs f = { 0, 0, 0, 0, -1 };
	long tick = t->tick;
	unsigned w = tick < (long)t->W ? (unsigned)tick : t->W;
	double dt = t->times[slot(t, tick)] - t->times[slot(t, tick - (long)w)];
	bool cur = n->stamp == tick;
	double win = cur ? n->win : 0, live = cur ? n->live : 0;

	f.rate = dt > 0 ? to_bytes(t, win) / dt : 0;
	f.pm = dt > 0 ? to_bytes(t, count_bound(win, t->st.shift)) / dt : 0;
	f.live = to_bytes(t, live);
	f.age = cur ? age_median(n->ages) : -1;
	if (n->hist) {
		long from = tick - ((long)t->H - 1);

		if (from < n->born)
			from = n->born;
		double dtt = t->times[slot(t, tick)] - t->times[slot(t, from)];

		f.growth = dtt > 0 ? to_bytes(t, live - n->hist[slot(t, from)]) / dtt : 0;
	}
	return f;
}

/* The live trend of a row: SPARK_W columns over the trend span, each the
 * live figure at the end of its part, scaled to the largest. */
static void sparkline(const struct top *t, const struct node *n, char *out, size_t len)
{
	static const char *const blocks_u[] = { "\u2581", "\u2582", "\u2583", "\u2584",
						"\u2585", "\u2586", "\u2587", "\u2588" };
	static const char *const blocks_a[] = { "_", ".", ",", "-", "=", "+", "*", "#" };
	const char *const *bl = t->utf8 ? blocks_u : blocks_a;
	double vals[SPARK_W], max = 0;
	long span = t->H - 1, tick = t->tick;
	size_t o = 0;

	for (int c = 0; c < SPARK_W; c++) {
		long at = tick - span + (long)((double)(c + 1) * (double)span / SPARK_W + 0.5);

		if (at > tick)
			at = tick;
		vals[c] = !n->hist || at < n->born || at < 0 ? NAN : n->hist[slot(t, at)];
		if (vals[c] > max)
			max = vals[c];
	}
	out[0] = 0;
	for (int c = 0; c < SPARK_W && o + 4 < len; c++) {
		if (isnan(vals[c]))
			o += (size_t)snprintf(out + o, len - o, " ");
		else
			o += (size_t)snprintf(out + o, len - o, "%s",
					      bl[max > 0 ? (int)lround(vals[c] / max * 7) : 0]);
	}
}

/* ---- rows ---------------------------------------------------------------- */

static const struct top *cmp_top;

static int row_cmp(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;
	struct figs fx = figures(cmp_top, x), fy = figures(cmp_top, y);
	double vx = 0, vy = 0;
	int r;

	switch (cmp_top->sort) {
	case TOP_SORT_ALLOC: vx = fx.rate; vy = fy.rate; break;
	case TOP_SORT_LIVE: vx = fx.live; vy = fy.live; break;
	case TOP_SORT_GROWTH: vx = fx.growth; vy = fy.growth; break;
	case TOP_SORT_AGE: vx = fx.age; vy = fy.age; break;
	default: break;
	}
	if (cmp_top->sort == TOP_SORT_SITE)
		r = strcmp(x->label, y->label);
	else
		r = vx > vy ? -1 : vx < vy ? 1 : 0;
	if (r == 0) /* ties: by allocation since attach, then by name */
		r = x->alloc > y->alloc ? -1 : x->alloc < y->alloc ? 1 : strcmp(x->full, y->full);
	return cmp_top->reverse ? -r : r;
}

static void sort_nodes(const struct top *t, struct node **v, guint n)
{
	cmp_top = t;
	if (n > 1)
		qsort(v, n, sizeof(*v), row_cmp);
}

/* Filter marks: match (its own name), sub_match (a descendant's). */
static bool mark_tree(struct top *t, struct node *n)
{
	bool sub = false;

	n->match = !t->filter[0] || strcasestr(n->full, t->filter);
	for (guint i = 0; n->kids && i < n->kids->len; i++)
		sub |= mark_tree(t, n->kids->pdata[i]);
	n->sub_match = sub;
	return n->match || sub;
}

static bool node_expanded(const struct top *t, const struct node *n)
{
	if (t->filter[0] && n->sub_match && !n->expand_set)
		return true;
	if (n->expand_set)
		return n->expanded;
	if (t->o.batch)
		return true;
	return n->depth == 0 || (n->kids && n->kids->len == 1);
}

static void add_tree_rows(struct top *t, struct node *n, bool anc_match)
{
	bool show = !t->filter[0] || anc_match || n->match || n->sub_match;

	if (!show)
		return;
	ensure_hist(t, n);
	g_ptr_array_add(t->rows, n);
	if (!n->kids || !node_expanded(t, n))
		return;
	struct node **kids = g_memdup2(n->kids->pdata, n->kids->len * sizeof(void *));

	sort_nodes(t, kids, n->kids->len);
	for (guint i = 0; i < n->kids->len; i++)
		add_tree_rows(t, kids[i], anc_match || (t->filter[0] && n->match));
	g_free(kids);
}

static void build_rows(struct top *t)
{
	g_ptr_array_set_size(t->rows, 0);
	if (!t->tree_view) {
		for (guint i = 0; i < t->group_list->len; i++) {
			struct node *g = t->group_list->pdata[i];

			if (g->stamp != t->tick)
				continue; /* no site left in it (they moved once their frames arrived) */
			if (!t->filter[0] || strcasestr(g->full, t->filter))
				g_ptr_array_add(t->rows, g);
		}
		sort_nodes(t, (struct node **)t->rows->pdata, t->rows->len);
	} else {
		struct node **roots = g_memdup2(t->roots->pdata, t->roots->len * sizeof(void *));

		for (guint i = 0; i < t->roots->len; i++)
			mark_tree(t, roots[i]);
		sort_nodes(t, roots, t->roots->len);
		for (guint i = 0; i < t->roots->len; i++)
			add_tree_rows(t, roots[i], false);
		g_free(roots);
	}
	/* keep the selection on the same row */
	t->sel = 0;
	for (guint i = 0; t->selnode && i < t->rows->len; i++)
		if (t->rows->pdata[i] == t->selnode) {
			t->sel = i;
			break;
		}
	if (t->rows->len)
		t->selnode = t->rows->pdata[t->sel];
}

/* The text of a row's name column: tree indentation and marker, name,
 * recursion count. */
static void row_name(const struct top *t, const struct node *n, char *out, size_t len)
{
	if (!t->tree_view) {
		snprintf(out, len, "%s", n->label);
		return;
	}
	unsigned ind = n->depth < MAX_INDENT ? n->depth : MAX_INDENT;
	const char *mark = !n->kids || !n->kids->len ? "  "
			   : node_expanded(t, n)     ? (t->utf8 ? "\u25be " : "- ")
						     : (t->utf8 ? "\u25b8 " : "+ ");
	char reps[32] = "";

	if (n->reps > 1)
		snprintf(reps, sizeof(reps), " [x%u]", n->reps);
	snprintf(out, len, "%*s%s%s%s", (int)ind, "", mark, n->label, reps);
}

/* One table row: "ALLOC/s ±95% LIVE [GROWTH/s] TREND AGE [TOTAL] NAME"
 * (`wide` 1: with GROWTH/s, 2: and TOTAL, the estimated bytes allocated
 * since attach). */
static void row_text(const struct top *t, const struct node *n, int wide, char *out, size_t len)
{
	struct figs f = figures(t, n);
	char a[16], pm[16], l[16], g[24], age[16], sp[64], name[4096], tot[24] = "";
	bool growth = wide >= 1;

	fmt_b(f.rate, a, sizeof(a));
	fmt_b(f.pm, pm, sizeof(pm));
	fmt_b(f.live, l, sizeof(l));
	fmt_b(f.growth, g + 1, sizeof(g) - 1);
	g[0] = f.growth > 0 ? '+' : ' ';
	fmt_age(f.age, age, sizeof(age));
	sparkline(t, n, sp, sizeof(sp));
	row_name(t, n, name, sizeof(name));
	if (wide >= 2) {
		char b[16];

		snprintf(tot, sizeof(tot), " %7s", fmt_b(to_bytes(t, n->stamp == t->tick ? n->alloc : 0), b, sizeof(b)));
	}
	if (growth)
		snprintf(out, len, "%7s %s%*s %7s %8s %s %5s%s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm,
			 l, g, sp, age, tot, name);
	else if (wide == 0)
		snprintf(out, len, "%7s %s%*s %7s %s %5s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm, l, sp,
			 age, name);
	else if (wide == -1) /* narrow: no TREND */
		snprintf(out, len, "%7s %s%*s %7s %5s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm, l, age,
			 name);
	else /* narrower: no bound either */
		snprintf(out, len, "%7s %7s %5s  %s", a, l, age, name);
}

static void table_header(const struct top *t, int wide, char *out, size_t len)
{
	/* the bound's column is 7 characters wide ("\u00b1" is one, "+-" two) */
	const char *pmh = t->utf8 ? "   \u00b195%" : "  +-95%";

	if (wide >= 0)
		snprintf(out, len, "ALLOC/s %s    LIVE %s%-*s   AGE%s  %s", pmh, wide >= 1 ? "GROWTH/s " : "", SPARK_W,
			 "TREND", wide >= 2 ? "   TOTAL" : "", t->tree_view ? "CALL TREE" : "SITE");
	else if (wide == -1)
		snprintf(out, len, "ALLOC/s %s    LIVE   AGE  %s", pmh, t->tree_view ? "CALL TREE" : "SITE");
	else
		snprintf(out, len, "ALLOC/s    LIVE   AGE  %s", t->tree_view ? "CALL TREE" : "SITE");
}

/* ---- header -------------------------------------------------------------- */

static void header_lines(const struct top *t, char lines[4][512])
{
	char b1[16], b2[16], b3[16], b4[16], b5[16], b6[16], b7[16], up[32];
	double uptime = t->times[slot(t, t->tick)] - t->t0;
	const char *exe = t->src.exe ? strrchr(t->src.exe, '/') : NULL;
	char budget[64] = "";

	exe = exe ? exe + 1 : t->src.exe ? t->src.exe : "?";
	snprintf(up, sizeof(up), "%ld:%02ld:%02ld", (long)uptime / 3600, ((long)uptime / 60) % 60, (long)uptime % 60);
	if (t->st.shift)
		snprintf(budget, sizeof(budget), " (budget: kept 2^-%u)", t->st.shift);
	/* the marks first: a narrow terminal cuts the end of the line */
	snprintf(lines[0], 512, "%s%sPID %d %s  OCaml %s  %s %g%s %s  up %s", t->ended ? "[ENDED]  " : "",
		 t->frozen ? "[FROZEN]  " : "", t->src.pid, exe, t->src.ocaml_version ? t->src.ocaml_version : "?",
		 t->utf8 ? "\u03bb" : "rate", t->src.prof->rate, budget, t->src.executor ? t->src.executor : "?", up);
	if (t->st.res_valid)
		snprintf(lines[1], 512, "Heap %s (%s%s/s)  RSS %s (%s%s/s)  Live %s %s%s (%s%s/s)",
			 fmt_b(t->g_heap[slot(t, t->tick)], b1, sizeof(b1)), t->h_heap_growth >= 0 ? "+" : "",
			 fmt_b(isnan(t->h_heap_growth) ? 0 : t->h_heap_growth, b2, sizeof(b2)),
			 fmt_b(t->g_rss[slot(t, t->tick)], b3, sizeof(b3)), t->h_rss_growth >= 0 ? "+" : "",
			 fmt_b(isnan(t->h_rss_growth) ? 0 : t->h_rss_growth, b4, sizeof(b4)),
			 fmt_b(t->h_live, b5, sizeof(b5)), t->utf8 ? "\u00b1" : "+-", fmt_b(t->h_live_pm, b6, sizeof(b6)),
			 t->h_live_growth >= 0 ? "+" : "", fmt_b(t->h_live_growth, b7, sizeof(b7)));
	else
		snprintf(lines[1], 512, "Heap ?  RSS ?  Live %s %s%s (%s%s/s)", fmt_b(t->h_live, b5, sizeof(b5)),
			 t->utf8 ? "\u00b1" : "+-", fmt_b(t->h_live_pm, b6, sizeof(b6)), t->h_live_growth >= 0 ? "+" : "",
			 fmt_b(t->h_live_growth, b7, sizeof(b7)));
	if (!t->src.census_on)
		snprintf(lines[1] + strlen(lines[1]), 512 - strlen(lines[1]), " [no census]");
	snprintf(lines[2], 512, "Alloc %s/s %s%s  GC %.1f minor/s %.2f major/s  Samples %.0f/s  lost %llu",
		 fmt_b(t->h_rate, b1, sizeof(b1)), t->utf8 ? "\u00b1" : "+-", fmt_b(t->h_pm, b2, sizeof(b2)), t->h_minor,
		 t->h_major, t->h_sps, (unsigned long long)t->drops);
	snprintf(lines[3], 512, "%s view, sort %s%s, rates over %.*f s, trend %.0f s%s%s%s",
		 t->tree_view ? "tree" : "flat", col_names[t->sort], t->reverse ? " (reversed)" : "", t->h_dt < 9.95 ? 1 : 0,
		 t->h_dt, t->times[slot(t, t->tick)] - t->t0 < t->o.trend_s ? t->times[slot(t, t->tick)] - t->t0 : t->o.trend_s,
		 t->filter[0] ? ", filter \"" : "", t->filter, t->filter[0] ? "\"" : "");
}

/* ---- batch ----------------------------------------------------------------- */

/* Returns 0, or -errno if stdout cannot be written (a closed pipe, a full disk). */
static int print_batch(struct top *t)
{
	char hl[4][512], line[8192];
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	build_rows(t);
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
	header_lines(t, hl);
	printf("camlheap top - %s - refresh %ld - %s\n", stamp, t->tick, hl[0]);
	for (int i = 1; i < 4; i++)
		printf("%s\n", hl[i]);
	if (t->ended)
		printf("Ended: %s\n", t->end_reason);
	table_header(t, 2, line, sizeof(line));
	printf("\n%s\n", line);
	for (guint i = 0; i < t->rows->len && (t->o.rows == 0 || i < (guint)t->o.rows); i++) {
		row_text(t, t->rows->pdata[i], 2, line, sizeof(line));
		printf("%s\n", line);
	}
	printf("\n");
	if (fflush(stdout) == EOF || ferror(stdout)) {
		t->out_err = errno ? errno : EIO;
		return -t->out_err;
	}
	return 0;
}

/* ---- interactive ------------------------------------------------------------- */

static void say(struct top *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct top *t, const char *fmt, ...)
{
	va_list ap;
	struct timespec m;

	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_MONOTONIC, &m);
	t->msg_until = (double)m.tv_sec + (double)m.tv_nsec * 1e-9 + 8.0;
}

void top_say(struct top *t, const char *msg)
{
	if (t->tui)
		say(t, "%s", msg);
}

/* What was written to stderr since the last look: keep its last line. */
static void read_captured(struct top *t)
{
	char buf[4096];
	ssize_t n;

	if (t->cap_fd < 0)
		return;
	while ((n = pread(t->cap_fd, buf, sizeof(buf) - 1, t->cap_off)) > 0) {
		char *end, *start;

		t->cap_off += n;
		buf[n] = 0;
		end = buf + n;
		while (end > buf && end[-1] == '\n')
			*--end = 0;
		start = strrchr(buf, '\n');
		start = start ? start + 1 : buf;
		if (*start) {
			snprintf(t->cap_last, sizeof(t->cap_last), "%s", start);
			say(t, "%s", t->cap_last);
		}
	}
}

static void put_line(int y, const char *s, int attr)
{
	if (y >= LINES)
		return;
	move(y, 0);
	clrtoeol();
	if (attr)
		attron(attr);
	/* columns, not bytes: addnstr cuts by bytes, so cut by characters */
	{
		int cols = COLS, used = 0;
		const char *p = s;
		mbstate_t ps = { 0 };

		while (*p && used < cols) {
			wchar_t wc;
			size_t k = mbrtowc(&wc, p, strlen(p), &ps);

			if (k == (size_t)-1 || k == (size_t)-2 || k == 0)
				break;
			p += k;
			used++;
		}
		addnstr(s, (int)(p - s));
		if (attr) {
			for (; used < cols; used++)
				addch(' ');
		}
	}
	if (attr)
		attroff(attr);
}

static void open_help(struct top *t)
{
	static const char *const help[] = {
		"camlheap top - keys",
		"",
		"  q, Ctrl-C     detach and quit (the program runs on, unaffected)",
		"  Up/Down j/k   move; PgUp/PgDn, Home/End",
		"  t             flat sites <-> call tree (top-down)",
		"  Enter         flat: the site's callstacks; tree: expand/collapse",
		"  Right/+ Left/-  tree: expand / collapse (Left on a leaf: to its parent)",
		"  e / c         tree: expand all / collapse all",
		"  a l g o s     sort by ALLOC/s, LIVE, GROWTH/s (the trend), AGE, SITE",
		"  < >           sort by the column left / right;  r  reverse the order",
		"  /             filter: rows whose name contains the text (empty: none;",
		"                Esc cancels the edit); Esc in the table clears the filter",
		"  f  (or z)     freeze the display (sampling goes on); again to thaw",
		"  w             write the profile so far as pprof (.pb.gz)",
		"  m             write the recording so far as a memtrace trace",
		"  h, ?          this help",
		"",
		"ALLOC/s: bytes allocated per second over the rate window, \u00b1 its 95 % bound.",
		"LIVE: bytes of the sampled blocks alive now.  TREND: live bytes over the trend",
		"span, scaled to the row's largest (a tree node's starts when first shown).",
		"GROWTH/s (100 columns and more): its slope.  AGE: median age of the live",
		"bytes.  TOTAL (110 columns and more): bytes allocated since attach.",
		"All are estimates from samples: bytes = samples / lambda * 8; LIVE, TREND",
		"and AGE cover the blocks allocated since camlheap attached.",
		"",
	};

	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	t->dlines = g_ptr_array_new_with_free_func(g_free);
	for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++)
		g_ptr_array_add(t->dlines, g_strdup(help[i]));
	t->dscroll = 0;
	t->mode = MODE_DETAIL;
}

/* Display width of the first `n` bytes of a UTF-8 string. */
static int text_width(const char *s, size_t n)
{
	mbstate_t ps = { 0 };
	int w = 0;

	for (size_t i = 0; i < n;) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, s + i, n - i, &ps);

		if (k == (size_t)-1 || k == (size_t)-2 || k == 0) {
			memset(&ps, 0, sizeof(ps));
			k = 1;
			wc = '?';
		}
		int cw = wcwidth(wc);

		w += cw > 0 ? cw : 0;
		i += k;
	}
	return w;
}

/* Byte offsets of the UTF-8 characters before and after `pos`. */
static size_t utf8_prev(const char *s, size_t pos)
{
	while (pos > 0 && ((unsigned char)s[--pos] & 0xc0) == 0x80)
		;
	return pos;
}

static size_t utf8_next(const char *s, size_t pos)
{
	if (s[pos])
		pos++;
	while (((unsigned char)s[pos] & 0xc0) == 0x80)
		pos++;
	return pos;
}

/* A header line: fields are separated by two spaces (or ", "); a line too
 * wide for the terminal loses whole fields at its end, never half a
 * number. */
static void put_fields(int y, const char *s, int attr)
{
	size_t n = strlen(s), cut = n;
	char buf[1024];

	if (text_width(s, n) <= COLS) {
		put_line(y, s, attr);
		return;
	}
	for (size_t i = 1; i + 1 < n; i++)
		if (((s[i] == ' ' && s[i + 1] == ' ') || (s[i] == ',' && s[i + 1] == ' ')) && text_width(s, i) <= COLS)
			cut = i;
	if (cut == n) {
		put_line(y, s, attr);
		return;
	}
	snprintf(buf, sizeof(buf), "%.*s", (int)cut, s);
	put_line(y, buf, attr);
}

static void draw_detail(struct top *t)
{
	int y = 0;
	long last = (long)t->dlines->len - (LINES - 1);

	/* no scrolling past the end (also after a resize) */
	if (t->dscroll > last)
		t->dscroll = last;
	if (t->dscroll < 0)
		t->dscroll = 0;
	erase();
	/* long lines (full paths) wrap, continued 6 columns in */
	for (long i = t->dscroll; y < LINES - 1 && i < (long)t->dlines->len; i++) {
		const char *l = t->dlines->pdata[i];
		size_t n = strlen(l), off = 0;
		int attr = i == 0 ? A_BOLD : 0;

		do {
			char part[4096];
			int ind = off ? 6 : 0, room = COLS - ind > 10 ? COLS - ind : 10;

			snprintf(part, sizeof(part), "%*s%.*s", ind, "", room, l + off);
			put_line(y++, part, attr);
			off += (size_t)room;
		} while (off < n && y < LINES - 1);
	}
	put_line(LINES - 1, "Up/Down PgUp/PgDn scroll; any other key: back", A_REVERSE);
	refresh();
}

static void draw(struct top *t)
{
	char hl[4][512], line[8192];
	int y, body, growth;
	double now;
	struct timespec m;

	if (!t->tui)
		return;
	if (t->mode == MODE_DETAIL) {
		draw_detail(t);
		return;
	}
	erase();
	if (LINES < 8 || COLS < 40) {
		put_line(0, "camlheap top: too small", 0);
		put_line(1, "(40x8 at least; q quits)", 0);
		refresh();
		return;
	}
	header_lines(t, hl);
	put_fields(0, hl[0], A_BOLD);
	for (y = 1; y < 4; y++)
		put_fields(y, hl[y], 0);
	/* the name column keeps at least ~17 characters: narrower
	 * terminals lose TREND, then the bound */
	growth = COLS >= 110 ? 2 : COLS >= 100 ? 1 : COLS >= 70 ? 0 : COLS >= 55 ? -1 : -2;
	table_header(t, growth, line, sizeof(line));
	put_line(4, line, A_REVERSE);
	body = LINES - 6;
	if (t->sel >= (long)t->rows->len)
		t->sel = t->rows->len ? (long)t->rows->len - 1 : 0;
	if (t->sel < t->scroll)
		t->scroll = t->sel;
	if (t->sel >= t->scroll + body)
		t->scroll = t->sel - body + 1;
	if (t->scroll < 0)
		t->scroll = 0;
	for (y = 0; y < body && t->scroll + y < (long)t->rows->len; y++) {
		row_text(t, t->rows->pdata[t->scroll + y], growth, line, sizeof(line));
		put_line(5 + y, line, t->scroll + y == t->sel ? A_REVERSE : 0);
	}
	if (!t->rows->len)
		put_line(5, t->filter[0] ? "  (no row matches the filter)" : "  (no samples yet)", 0);
	clock_gettime(CLOCK_MONOTONIC, &m);
	now = (double)m.tv_sec + (double)m.tv_nsec * 1e-9;
	if (t->mode == MODE_PROMPT) {
		const char *label = t->pkind == PROMPT_FILTER ? "Filter: "
				    : t->pkind == PROMPT_PPROF ? "Write pprof to: "
							       : "Write memtrace to: ";
		int room = COLS - (int)strlen(label) - 1, col;
		size_t from = 0;

		/* the text scrolls so that the cursor stays in view (widths in
		 * columns: UTF-8 text is edited whole characters at a time) */
		if (room < 1)
			room = 1;
		while (text_width(t->pbuf + from, t->pcur - from) > room)
			from = utf8_next(t->pbuf, from);
		snprintf(line, sizeof(line), "%s%s", label, t->pbuf + from);
		put_line(LINES - 1, line, 0);
		curs_set(1);
		col = (int)strlen(label) + text_width(t->pbuf + from, t->pcur - from);
		move(LINES - 1, col < COLS ? col : COLS - 1);
	} else {
		curs_set(0);
		if (t->msg[0] && now < t->msg_until)
			snprintf(line, sizeof(line), "%s", t->msg);
		else if (t->ended)
			snprintf(line, sizeof(line), "%s - the figures are those at its end; w/m write them, q quits",
				 t->end_reason);
		else
			snprintf(line, sizeof(line), "h help  q quit  t tree  a/l/g/o/s sort  / filter  f freeze  w pprof  m memtrace");
		if ((int)strlen(line) > COLS && LINES >= 10) {
			/* a long message (an error naming a path) on two lines */
			int cut = COLS;

			while (cut > COLS / 2 && line[cut] != ' ')
				cut--;
			if (line[cut] != ' ')
				cut = COLS;
			put_line(LINES - 1, line + cut + (line[cut] == ' '), t->ended ? A_BOLD : 0);
			line[cut] = 0;
			put_line(LINES - 2, line, t->ended ? A_BOLD : 0);
		} else {
			put_line(LINES - 1, line, t->ended ? A_BOLD : 0);
		}
	}
	refresh();
}

/* The detail of a flat row: its callstacks, heaviest first. */
static void open_detail(struct top *t, struct node *g)
{
	GPtrArray *sites = g_ptr_array_new();
	GHashTableIter it;
	gpointer k, v;
	char b1[16], b2[16];

	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	t->dlines = g_ptr_array_new_with_free_func(g_free);
	g_hash_table_iter_init(&it, t->sinfo);
	while (g_hash_table_iter_next(&it, &k, &v))
		if (((struct siteinfo *)v)->group == g)
			g_ptr_array_add(sites, k);
	{
		const struct profile_site **arr = (const struct profile_site **)sites->pdata;

		/* heaviest first */
		for (guint i = 1; i < sites->len; i++)
			for (guint j = i; j > 0 && arr[j]->samples > arr[j - 1]->samples; j--) {
				const struct profile_site *x = arr[j];

				arr[j] = arr[j - 1];
				arr[j - 1] = x;
			}
	}
	g_ptr_array_add(t->dlines, g_strdup_printf("%u callstack%s of %s", sites->len, sites->len == 1 ? "" : "s", g->full));
	for (guint i = 0; i < sites->len; i++) {
		const struct profile_site *s = sites->pdata[i];

		g_ptr_array_add(t->dlines, g_strdup(""));
		g_ptr_array_add(t->dlines,
				g_strdup_printf("#%u  %s heap: %s allocated since attach (%llu samples), %s live", i + 1,
						report_kind_name(s->kind), fmt_b(to_bytes(t, (double)s->samples), b1, sizeof(b1)),
						(unsigned long long)s->samples,
						fmt_b(to_bytes(t, (double)s->live_samples), b2, sizeof(b2))));
		if (!s->stack) {
			g_ptr_array_add(t->dlines, g_strdup("    [stack frames lost]"));
			continue;
		}
		const char *prev = NULL;
		unsigned run = 0;

		for (uint32_t f = 0; f <= s->stack->nframes; f++) {
			const struct framelabels *fl = f < s->stack->nframes
				? frame_labels(t, s->stack->frames[f], f == 0 ? s->alloc_idx : 0) : NULL;

			for (unsigned j = 0; j < (fl ? fl->n : 1); j++) {
				const char *cur = fl ? fl->fullv[j] : NULL;

				if (prev && cur == prev) {
					run++;
					continue;
				}
				if (prev)
					g_ptr_array_add(t->dlines, run > 1 ? g_strdup_printf("    %s [x%u]", prev, run)
									   : g_strdup_printf("    %s", prev));
				prev = cur;
				run = 1;
			}
		}
		if (s->stack->term != CH_TERM_CLEAN)
			g_ptr_array_add(t->dlines,
					g_strdup_printf("    [stack walk ended: %s]", report_term_name(s->stack->term)));
	}
	g_ptr_array_free(sites, TRUE);
	t->dscroll = 0;
	t->mode = MODE_DETAIL;
}

static void set_expand_all(struct node *n, bool on)
{
	if (n->kids && n->kids->len) {
		n->expanded = on;
		n->expand_set = true;
		for (guint i = 0; i < n->kids->len; i++)
			set_expand_all(n->kids->pdata[i], on);
	}
}

static void default_name(struct top *t, bool memtrace, char *out, size_t len)
{
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
	snprintf(out, len, "camlheap-%d-%s.%s", t->src.pid, stamp, memtrace ? "ctf" : "pb.gz");
}

static void prompt_done(struct top *t, bool accept)
{
	char msg[600];
	int ret;

	t->mode = MODE_MAIN;
	if (t->pkind == PROMPT_FILTER) {
		if (!accept)
			snprintf(t->filter, sizeof(t->filter), "%s", t->pold);
		build_rows(t);
		return;
	}
	if (!accept || !t->pbuf[0]) {
		say(t, "nothing written");
		return;
	}
	msg[0] = 0;
	ret = t->src.write_profile ? t->src.write_profile(t->src.ctx, t->pkind == PROMPT_MEMTRACE, t->pbuf, msg, sizeof(msg))
				   : -ENOTSUP;
	if (ret < 0 && msg[0])
		say(t, "%s", msg);
	else if (ret < 0)
		say(t, "cannot write %s: %s", t->pbuf, strerror(-ret));
	else
		say(t, "wrote %s (%s)", t->pbuf,
		    t->pkind == PROMPT_MEMTRACE ? "camlheap report FILE, memtrace_viewer" : "go tool pprof FILE");
}

static void start_prompt(struct top *t, int kind)
{
	t->pkind = kind;
	t->mode = MODE_PROMPT;
	if (kind == PROMPT_FILTER) {
		snprintf(t->pold, sizeof(t->pold), "%s", t->filter);
		snprintf(t->pbuf, sizeof(t->pbuf), "%s", t->filter);
		t->pcur = strlen(t->pbuf);
	} else {
		default_name(t, kind == PROMPT_MEMTRACE, t->pbuf, sizeof(t->pbuf));
		t->pcur = strlen(t->pbuf);
		if (kind == PROMPT_MEMTRACE && t->st.memtrace_off) {
			t->mode = MODE_MAIN;
			say(t, "no memtrace: %s", t->st.memtrace_off);
		}
	}
}

/* A line editor: characters go in at the cursor; Left/Right/Home/End
 * (^A/^E) move it, Backspace and Delete erase, ^U clears, Enter accepts,
 * Esc cancels. */
static void key_prompt(struct top *t, int c)
{
	size_t n = strlen(t->pbuf);

	if (t->pcur > n)
		t->pcur = n;
	if (c == 27) {
		prompt_done(t, false);
		return;
	}
	if (c == '\n' || c == '\r' || c == KEY_ENTER) {
		prompt_done(t, true);
		return;
	}
	if (c == KEY_BACKSPACE || c == 127 || c == 8) {
		if (t->pcur) {
			size_t p = utf8_prev(t->pbuf, t->pcur);

			memmove(t->pbuf + p, t->pbuf + t->pcur, n - t->pcur + 1);
			t->pcur = p;
		}
	} else if (c == KEY_DC) {
		if (t->pcur < n) {
			size_t q = utf8_next(t->pbuf, t->pcur);

			memmove(t->pbuf + t->pcur, t->pbuf + q, n - q + 1);
		}
	} else if (c == KEY_LEFT) {
		t->pcur = utf8_prev(t->pbuf, t->pcur);
	} else if (c == KEY_RIGHT) {
		t->pcur = utf8_next(t->pbuf, t->pcur);
	} else if (c == KEY_HOME || c == 1) { /* ^A */
		t->pcur = 0;
	} else if (c == KEY_END || c == 5) { /* ^E */
		t->pcur = n;
	} else if (c == 21) { /* ^U */
		t->pbuf[0] = 0;
		t->pcur = 0;
	} else if (c >= 32 && c < 256 && c != 127 && n + 1 < sizeof(t->pbuf)) {
		memmove(t->pbuf + t->pcur + 1, t->pbuf + t->pcur, n - t->pcur + 1);
		t->pbuf[t->pcur++] = (char)c;
	}
	if (t->pkind == PROMPT_FILTER) {
		snprintf(t->filter, sizeof(t->filter), "%s", t->pbuf);
		build_rows(t);
	}
}

static void move_sel(struct top *t, long d)
{
	t->sel += d;
	if (t->sel >= (long)t->rows->len)
		t->sel = (long)t->rows->len - 1;
	if (t->sel < 0)
		t->sel = 0;
	t->selnode = t->rows->len ? t->rows->pdata[t->sel] : NULL;
}

/* One key in the main view.  Returns true to quit. */
static bool key_main(struct top *t, int c)
{
	struct node *n = t->selnode;
	long page = LINES > 8 ? LINES - 7 : 1;

	switch (c) {
	case 'q': case 'Q': return true;
	case 'h': case '?': open_help(t); break;
	case KEY_UP: case 'k': move_sel(t, -1); break;
	case KEY_DOWN: case 'j': move_sel(t, 1); break;
	case KEY_PPAGE: move_sel(t, -page); break;
	case KEY_NPAGE: move_sel(t, page); break;
	case KEY_HOME: move_sel(t, -(long)t->rows->len); break;
	case KEY_END: move_sel(t, (long)t->rows->len); break;
	case 't':
		t->tree_view = !t->tree_view;
		build_tree(t);
		t->selnode = NULL;
		break;
	case '\n': case '\r': case KEY_ENTER:
		if (!n)
			break;
		if (!t->tree_view)
			open_detail(t, n);
		else if (n->kids && n->kids->len) {
			n->expanded = !node_expanded(t, n);
			n->expand_set = true;
		}
		break;
	case KEY_RIGHT: case '+':
		if (t->tree_view && n && n->kids && n->kids->len) {
			n->expanded = n->expand_set = true;
		}
		break;
	case KEY_LEFT: case '-':
		if (t->tree_view && n) {
			if (n->kids && n->kids->len && node_expanded(t, n)) {
				n->expanded = false;
				n->expand_set = true;
			} else if (n->parent) {
				t->selnode = n->parent;
			}
		}
		break;
	case 'e': case 'c':
		for (guint i = 0; t->tree_view && i < t->roots->len; i++)
			set_expand_all(t->roots->pdata[i], c == 'e');
		break;
	case 'a': t->sort = TOP_SORT_ALLOC; break;
	case 'l': t->sort = TOP_SORT_LIVE; break;
	case 'g': t->sort = TOP_SORT_GROWTH; break;
	case 'o': t->sort = TOP_SORT_AGE; break;
	case 's': t->sort = TOP_SORT_SITE; break;
	case '<': t->sort = (enum top_sort)((t->sort + TOP_SORT__COUNT - 1) % TOP_SORT__COUNT); break;
	case '>': t->sort = (enum top_sort)((t->sort + 1) % TOP_SORT__COUNT); break;
	case 'r': case 'R': t->reverse = !t->reverse; break;
	case '/': start_prompt(t, PROMPT_FILTER); break;
	case 27: t->filter[0] = 0; break;
	case 'f': case 'z': case 'Z':
		t->frozen = !t->frozen;
		say(t, t->frozen ? "display frozen (sampling goes on): f to thaw" : "display thawed");
		break;
	case 'w': start_prompt(t, PROMPT_PPROF); break;
	case 'm': start_prompt(t, PROMPT_MEMTRACE); break;
	case 3: return true; /* ^C in raw input */
	default: break;
	}
	return false;
}

bool top_keys(struct top *t)
{
	int c;
	bool quit = false;

	if (!t->tui)
		return false;
	while (!quit && (c = getch()) != ERR) {
		if (c == KEY_RESIZE)
			continue;
		if (t->mode == MODE_DETAIL) {
			long page = LINES > 2 ? LINES - 2 : 1;

			if (c == KEY_DOWN || c == 'j')
				t->dscroll++;
			else if (c == KEY_UP || c == 'k')
				t->dscroll--;
			else if (c == KEY_NPAGE || c == ' ')
				t->dscroll += page;
			else if (c == KEY_PPAGE)
				t->dscroll -= page;
			else if (c == KEY_HOME)
				t->dscroll = 0;
			else if (c == KEY_END)
				t->dscroll = (long)t->dlines->len - 1;
			else
				t->mode = MODE_MAIN;
			if (t->dscroll > (long)t->dlines->len - 1)
				t->dscroll = (long)t->dlines->len - 1;
			if (t->dscroll < 0)
				t->dscroll = 0;
		} else if (t->mode == MODE_PROMPT) {
			key_prompt(t, c);
		} else {
			quit = key_main(t, c);
		}
		if (!quit && t->mode == MODE_MAIN)
			build_rows(t);
	}
	if (!quit)
		draw(t);
	return quit;
}

void top_resize(struct top *t)
{
	struct winsize ws;

	if (!t->tui)
		return;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
		resizeterm(ws.ws_row, ws.ws_col);
	clear();
	draw(t);
}

/* ---- life cycle ------------------------------------------------------------------ */

int top_new(const struct top_opts *o, const struct top_source *src, double now, struct top **out, char *msg,
	    size_t len)
{
	struct top *t = g_new0(struct top, 1);
	double delay = o->delay_s > 0 ? o->delay_s : 1.0;

	t->o = *o;
	t->src = *src;
	t->o.delay_s = delay;
	/* memory: W+1 numbers per site, H per row; longer spans than these
	 * caps are cut (the header says the spans in force) */
	t->W = (unsigned)fmin(600, fmax(1, lround((o->window_s > 0 ? o->window_s : 5.0) / delay)));
	t->H = (unsigned)fmin(3600, fmax(t->W, lround((o->trend_s > 0 ? o->trend_s : 120.0) / delay))) + 1;
	t->o.trend_s = (t->H - 1) * delay;
	t->times = g_new0(double, t->H);
	t->g_alloc = g_new0(double, t->H);
	t->g_live = g_new0(double, t->H);
	t->g_minor = g_new0(double, t->H);
	t->g_major = g_new0(double, t->H);
	t->g_samples = g_new0(double, t->H);
	t->g_heap = g_new0(double, t->H);
	t->g_rss = g_new0(double, t->H);
	t->sinfo = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, siteinfo_free);
	t->groups = g_hash_table_new(g_str_hash, g_str_equal);
	t->group_list = g_ptr_array_new_with_free_func(node_free);
	t->roots = g_ptr_array_new_with_free_func(node_free);
	t->hist_nodes = g_ptr_array_new();
	t->flcache = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, framelabels_free);
	t->strs = g_string_chunk_new(65536);
	t->rows = g_ptr_array_new();
	t->sort = o->sort;
	t->reverse = o->reverse;
	t->tree_view = o->tree;
	t->cap_fd = t->saved_err = -1;
	if (o->filter)
		snprintf(t->filter, sizeof(t->filter), "%s", o->filter);
	t->t0 = now;
	t->next = now + delay;
	setlocale(LC_CTYPE, "");
	t->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	if (t->tree_view)
		build_tree(t);
	/* refresh 0: the figures at the start, from which the first rates run */
	t->tick = -1;
	sample(t, now);
	if (!o->batch) {
		SCREEN *scr;

		fflush(stderr);
		t->cap_fd = open(P_tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (t->cap_fd < 0) {
			FILE *f = tmpfile();

			t->cap_fd = f ? dup(fileno(f)) : -1;
			if (f)
				fclose(f);
		}
		scr = newterm(NULL, stdout, stdin);
		if (!scr) {
			snprintf(msg, len, "cannot drive the terminal (TERM=%s): use --batch", getenv("TERM") ? getenv("TERM") : "");
			if (t->cap_fd >= 0)
				close(t->cap_fd);
			t->cap_fd = -1;
			top_free(t);
			return -ENOTTY;
		}
		t->tui = true;
		cbreak();
		noecho();
		nonl();
		keypad(stdscr, TRUE);
		nodelay(stdscr, TRUE);
		set_escdelay(25);
		/* Home and End as rxvt, PuTTY, tmux and the Linux console send
		 * them, whatever terminfo says */
		define_key("\033[1~", KEY_HOME);
		define_key("\033[4~", KEY_END);
		define_key("\033[7~", KEY_HOME);
		define_key("\033[8~", KEY_END);
		define_key("\033[H", KEY_HOME);
		define_key("\033[F", KEY_END);
		define_key("\033OH", KEY_HOME);
		define_key("\033OF", KEY_END);
		curs_set(0);
		if (t->cap_fd >= 0) {
			t->saved_err = dup(STDERR_FILENO);
			dup2(t->cap_fd, STDERR_FILENO);
		}
		draw(t);
	}
	*out = t;
	return 0;
}

int top_input_fd(const struct top *t) { return t->tui ? STDIN_FILENO : -1; }

double top_next_refresh(const struct top *t) { return t->next; }

int top_refresh(struct top *t, double now)
{
	if (now < t->next)
		return 0;
	/* every delay, not drifting; after a stall, from now */
	t->next += t->o.delay_s;
	if (t->next <= now)
		t->next = now + t->o.delay_s;
	/* frozen: the figures stay (the profile goes on counting; the
	 * first rates after the thaw cover the frozen time) */
	if (!t->frozen || !t->tui)
		sample(t, now);
	read_captured(t);
	if (!t->tui) {
		int ret = print_batch(t);

		if (ret < 0)
			return ret;
	} else {
		if (!t->frozen)
			build_rows(t);
		draw(t);
	}
	return t->o.iterations > 0 && t->tick >= t->o.iterations;
}

void top_ended(struct top *t, double now, const char *reason, bool linger, int sigfd)
{
	/* after --iterations the last refresh printed is the end; else one
	 * more, with what the kernel handed over since (the last events) */
	bool more = !(t->o.iterations > 0 && t->tick >= t->o.iterations);
	struct timespec mono;

	clock_gettime(CLOCK_MONOTONIC, &mono);
	t->end_ns = (double)mono.tv_sec * 1e9 + (double)mono.tv_nsec;
	t->ended = true;
	snprintf(t->end_reason, sizeof(t->end_reason), "%s", reason);
	t->msg_until = 0; /* the end's notice, not an older message */
	if (more && now <= t->times[slot(t, t->tick)])
		now = t->times[slot(t, t->tick)] + 1e-3;
	if (more)
		sample(t, now);
	if (!t->tui) {
		read_captured(t);
		if (more && t->out_err == 0)
			print_batch(t);
		return;
	}
	t->frozen = false;
	build_rows(t);
	draw(t);
	if (!linger)
		return;
	for (;;) {
		struct pollfd fds[2] = { { .fd = STDIN_FILENO, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };

		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (fds[0].revents & (POLLHUP | POLLERR))
			return;
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGWINCH)
					top_resize(t);
				else if (si.ssi_signo != SIGTSTP)
					return;
			}
		}
		if ((fds[0].revents & POLLIN) && top_keys(t))
			return;
	}
}

void top_free(struct top *t)
{
	if (!t)
		return;
	if (t->tui) {
		endwin();
		fflush(stdout);
	}
	if (t->saved_err >= 0) {
		char buf[65536];
		ssize_t n;
		off_t off = 0;

		fflush(stderr);
		dup2(t->saved_err, STDERR_FILENO);
		close(t->saved_err);
		/* what was said meanwhile, now that the screen is the shell's */
		while ((n = pread(t->cap_fd, buf, sizeof(buf), off)) > 0) {
			if (write(STDERR_FILENO, buf, (size_t)n) < 0)
				break;
			off += n;
		}
	}
	if (t->cap_fd >= 0)
		close(t->cap_fd);
	g_hash_table_destroy(t->sinfo);
	g_hash_table_destroy(t->groups);
	g_ptr_array_free(t->group_list, TRUE);
	if (t->root_by)
		g_hash_table_destroy(t->root_by);
	g_ptr_array_free(t->roots, TRUE);
	g_ptr_array_free(t->hist_nodes, TRUE);
	g_hash_table_destroy(t->flcache);
	g_string_chunk_free(t->strs);
	g_ptr_array_free(t->rows, TRUE);
	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	g_free(t->times);
	g_free(t->g_alloc);
	g_free(t->g_live);
	g_free(t->g_minor);
	g_free(t->g_major);
	g_free(t->g_samples);
	g_free(t->g_heap);
	g_free(t->g_rss);
	g_free(t);
}
