/* top_model.c -- camlheap top's model (see top.h): the samples merged by
 * source position into the flat rows (one per allocation point) and the
 * call tree's nodes, their figures at each refresh (the rate window's
 * samples, live bytes and their history, the ages of the live blocks, the
 * header's series) and the rows shown, filtered and sorted.
 */
#define _GNU_SOURCE
#include "cmd/top_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#include "output/report.h"
#include "target/symbolize.h"

#define MAX_INLINE 16

/* ---- estimates ---------------------------------------------------------- */

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

/* ---- labels ------------------------------------------------------------ */

static const char *intern(struct top *t, const char *s) { return g_string_chunk_insert_const(t->strs, s); }

const struct framelabels *top_frame_labels(struct top *t, uint64_t pc, unsigned alloc_idx)
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

void top_framelabels_free(gpointer p)
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
	const struct framelabels *fl = top_frame_labels(t, s->stack->frames[0], s->alloc_idx);

	if (is_pseudo(s->stack->frames[0]) && s->stack->nframes > 1) {
		const struct framelabels *c = top_frame_labels(t, s->stack->frames[1], 0);
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

void top_siteinfo_free(gpointer p)
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

void top_node_free(gpointer p)
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
			parent->kids = g_ptr_array_new_with_free_func(top_node_free);
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
		const struct framelabels *fl = top_frame_labels(t, s->stack->frames[i], i == 0 ? s->alloc_idx : 0);

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

void top_build_tree(struct top *t)
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

void top_sample(struct top *t, double now)
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

struct figs top_figures(const struct top *t, const struct node *n)
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

/* ---- rows ---------------------------------------------------------------- */

static const struct top *cmp_top;

static int row_cmp(const void *a, const void *b)
{
	const struct node *x = *(struct node *const *)a, *y = *(struct node *const *)b;
	struct figs fx = top_figures(cmp_top, x), fy = top_figures(cmp_top, y);
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

bool top_node_expanded(const struct top *t, const struct node *n)
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
	if (!n->kids || !top_node_expanded(t, n))
		return;
	struct node **kids = g_memdup2(n->kids->pdata, n->kids->len * sizeof(void *));

	sort_nodes(t, kids, n->kids->len);
	for (guint i = 0; i < n->kids->len; i++)
		add_tree_rows(t, kids[i], anc_match || (t->filter[0] && n->match));
	g_free(kids);
}

void top_build_rows(struct top *t)
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
