/* report_points.c -- the groupings a report leads with (report_internal.h):
 * allocation points (the sites of one kind whose allocation has one source
 * position, each with its callstacks) and functions with flat and
 * cumulative figures, as `pprof -top` prints them (flat: allocated at the
 * function's own allocation points; cum: allocated while the function was
 * on the stack, counted once per callstack however often it recurs). */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <stdlib.h>
#include <string.h>

#include <glib.h>

uint64_t report_group_value(const struct site_group *g, int by)
{
	return by == REPORT_VALUE_LIVE ? g->live : by == REPORT_VALUE_PEAK ? g->peak : g->samples;
}

/* What a point is told apart by: kind, type (custom operations, bigarray
 * owner, malloc outside OCaml), domain (--by-domain) and the innermost
 * source position of its allocation (Comballoc index applied). */
struct point_key {
	uint64_t subtype;
	uint8_t kind;
	uint32_t domain;
	const char *function; /* owned by the symbolizer, or a static label */
	const char *file;
	int line;
	const char *via;      /* malloc: the libc function the OCaml code at function/file/line called into C for */
};

static guint point_key_hash(gconstpointer p)
{
	const struct point_key *k = p;

	return g_str_hash(k->function) ^ (k->file ? g_str_hash(k->file) * 31u : 0) ^ ((guint)k->line * 0x9e3779b9u) ^
	       (k->via ? g_str_hash(k->via) * 7u : 0) ^
	       k->kind ^ (k->domain << 8) ^ (guint)(k->subtype ^ (k->subtype >> 32));
}

static gboolean point_key_equal(gconstpointer a, gconstpointer b)
{
	const struct point_key *x = a, *y = b;

	return x->kind == y->kind && x->subtype == y->subtype && x->domain == y->domain && x->line == y->line &&
	       !strcmp(x->function, y->function) && !g_strcmp0(x->file, y->file) && !g_strcmp0(x->via, y->via);
}

/* The point of a site: the innermost frame of its allocation, or a label
 * for a site without OCaml frames.  A malloc site's innermost frame is the
 * libc function, the same for every call: its point is the OCaml code that
 * called into C (as `camlheap diff` keys it), via that function. */
static void point_of(const struct profile_site *s, struct modules *mods, struct point_key *k)
{
	struct sym_frame fr[MAX_INLINE];

	memset(k, 0, sizeof(*k));
	k->kind = s->kind;
	k->subtype = s->subtype;
	k->domain = s->domain;
	if (!s->stack) {
		k->function = "[stack frames lost]";
	} else if (!s->stack->nframes) {
		k->function = "[no OCaml frames]";
	} else if (s->kind == CH_KIND_MALLOC && s->stack->nframes > 1 &&
		   modules_lookup(mods, s->stack->frames[1], 0, fr, MAX_INLINE) > 0) {
		k->function = fr[0].function;
		k->file = fr[0].file;
		k->line = fr[0].line;
		if (modules_lookup(mods, s->stack->frames[0], 0, fr, MAX_INLINE) > 0)
			k->via = fr[0].function;
	} else if (modules_lookup(mods, s->stack->frames[0], s->alloc_idx, fr, MAX_INLINE) > 0) {
		k->function = fr[0].function;
		k->file = fr[0].file;
		k->line = fr[0].line;
	} else {
		k->function = "?";
	}
}

/* Add group `src`'s figures to `dst` (census sums as report_group_sites
 * adds a site's; the leak verdict is recomputed from the sums). */
static void group_merge(struct site_group *dst, const struct site_group *src)
{
	dst->samples += src->samples;
	dst->followed += src->followed;
	dst->live += src->live;
	dst->live_blocks += src->live_blocks;
	dst->peak += src->peak; /* a bound from above, as for merged sites */
	dst->promoted += src->promoted;
	dst->dead += src->dead;
	dst->relocated += src->relocated;
	dst->unfollowed += src->unfollowed;
	dst->retained += src->retained;
	if (src->retaining > dst->retaining)
		dst->retaining = src->retaining;
	if (src->cycles > dst->cycles)
		dst->cycles = src->cycles;
	dst->lifetime_s += src->lifetime_s;
	dst->dead_minor_gcs += src->dead_minor_gcs;
	if (src->live > dst->median_from) {
		dst->median_from = src->live;
		dst->median_age = src->median_age;
	}
	dst->grows = dst->grows || src->grows;
}

static int by_value;

static int point_cmp(const void *a, const void *b)
{
	const struct point_group *x = a, *y = b;
	uint64_t vx = report_group_value(&x->sum, by_value), vy = report_group_value(&y->sum, by_value);

	if (vx != vy)
		return vx > vy ? -1 : 1;
	if (x->sum.samples != y->sum.samples)
		return x->sum.samples > y->sum.samples ? -1 : 1;
	return x->sum.first < y->sum.first ? -1 : x->sum.first > y->sum.first;
}

static int function_cmp(const void *a, const void *b)
{
	const struct function_row *x = a, *y = b;

	if (x->flat != y->flat)
		return x->flat > y->flat ? -1 : 1;
	if (x->cum != y->cum)
		return x->cum > y->cum ? -1 : 1;
	return strcmp(x->function, y->function);
}

/* Functions: per frame (return address, Comballoc index) the function ids
 * its inline chain expands to, cached; per callstack each function counted
 * once in cum, the innermost one in flat. */
struct function_index {
	GHashTable *by_name;  /* function name -> id + 1 */
	GHashTable *by_pc;    /* (pc, alloc_idx) -> GArray of guint ids, innermost first */
	GArray *rows;         /* struct function_row by id */
	GArray *last_stack;   /* by id: the last stack (index + 1) counted in cum */
};

static guint function_id(struct function_index *fx, const char *name)
{
	gpointer v = g_hash_table_lookup(fx->by_name, name);
	struct function_row row = { .function = name };
	guint zero = 0;

	if (v)
		return GPOINTER_TO_UINT(v) - 1;
	g_array_append_val(fx->rows, row);
	g_array_append_val(fx->last_stack, zero);
	g_hash_table_insert(fx->by_name, (gpointer)name, GUINT_TO_POINTER(fx->rows->len));
	return fx->rows->len - 1;
}

static GArray *frame_functions(struct function_index *fx, struct modules *mods, uint64_t pc, unsigned alloc_idx)
{
	uint64_t key = pc ^ ((uint64_t)alloc_idx << 56);
	GArray *ids = g_hash_table_lookup(fx->by_pc, &key);
	struct sym_frame fr[MAX_INLINE];
	int n;

	if (ids)
		return ids;
	ids = g_array_new(FALSE, FALSE, sizeof(guint));
	n = modules_lookup(mods, pc, alloc_idx, fr, MAX_INLINE);
	for (int j = 0; j < n; j++) {
		guint id = function_id(fx, fr[j].function);

		g_array_append_val(ids, id);
	}
	g_hash_table_insert(fx->by_pc, g_memdup2(&key, sizeof(key)), ids);
	return ids;
}

/* One callstack: flat to the function of its allocation point (`point`:
 * the innermost frame's, a malloc site's OCaml caller, or a label), cum to
 * every function on it once. */
static void functions_add_stack(struct function_index *fx, struct modules *mods, const struct site_group *g,
				size_t stack_ix, const char *point, uint64_t value)
{
	const struct profile_site *s = g->site;
	struct function_row *rows;
	guint *last, id = function_id(fx, point);

	rows = (struct function_row *)fx->rows->data;
	rows[id].flat += value;
	if (!s->stack || !s->stack->nframes) {
		rows[id].cum += value;
		return;
	}
	for (uint32_t i = 0; i < s->stack->nframes; i++) {
		GArray *ids = frame_functions(fx, mods, s->stack->frames[i], i == 0 ? s->alloc_idx : 0);

		rows = (struct function_row *)fx->rows->data;
		last = (guint *)fx->last_stack->data;
		for (guint j = 0; j < ids->len; j++) {
			id = g_array_index(ids, guint, j);
			if (last[id] != stack_ix + 1) {
				last[id] = (guint)(stack_ix + 1);
				rows[id].cum += value;
			}
		}
	}
}

static void free_garray(gpointer p)
{
	g_array_free(p, TRUE);
}

/* The functions table of `r` (its stacks grouped already). */
static void build_functions(struct report_groups *r, struct modules *mods, int by)
{
	struct function_index fx = {
		.by_name = g_hash_table_new(g_str_hash, g_str_equal),
		.by_pc = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, free_garray),
		.rows = g_array_new(FALSE, FALSE, sizeof(struct function_row)),
		.last_stack = g_array_new(FALSE, FALSE, sizeof(guint)),
	};

	for (size_t i = 0; i < r->nstacks; i++) {
		struct point_key k;

		point_of(r->stacks[i].site, mods, &k);
		functions_add_stack(&fx, mods, &r->stacks[i], i, k.function, report_group_value(&r->stacks[i], by));
	}
	r->nfuncs = fx.rows->len;
	r->funcs = (struct function_row *)g_array_free(fx.rows, FALSE);
	qsort(r->funcs, r->nfuncs, sizeof(*r->funcs), function_cmp);
	g_array_free(fx.last_stack, TRUE);
	g_hash_table_destroy(fx.by_pc);
	g_hash_table_destroy(fx.by_name);
}

int report_groups_build(const struct profile *p, struct modules *mods, int by, struct report_groups *r)
{
	GHashTable *index = g_hash_table_new_full(point_key_hash, point_key_equal, g_free, NULL);
	size_t *fill;

	memset(r, 0, sizeof(*r));
	r->stacks = report_group_sites(p, mods, &r->nstacks, by);
	r->points = calloc(r->nstacks ? r->nstacks : 1, sizeof(*r->points));
	if (!r->stacks || !r->points) {
		g_hash_table_destroy(index);
		report_groups_free(r);
		return -1;
	}
	/* stacks come sorted by the ranking value: a point's first stack is
	 * its heaviest, and its representative */
	for (size_t i = 0; i < r->nstacks; i++) {
		struct point_key *k = g_new(struct point_key, 1);
		gpointer at;
		struct point_group *pg;

		if (!(r->stacks[i].kind == CH_KIND_BIGARRAY && r->stacks[i].site->subtype != CH_BA_OWNED))
			r->total += report_group_value(&r->stacks[i], by); /* views, mapped files: memory elsewhere */
		point_of(r->stacks[i].site, mods, k);
		if (g_hash_table_lookup_extended(index, k, NULL, &at)) {
			pg = &r->points[GPOINTER_TO_SIZE(at)];
			group_merge(&pg->sum, &r->stacks[i]);
			pg->nstacks++;
			g_free(k);
			continue;
		}
		pg = &r->points[r->npoints];
		pg->sum = r->stacks[i];
		pg->sum.first = i;
		pg->function = k->function;
		pg->file = k->file;
		pg->line = k->line;
		pg->via = k->via;
		pg->nstacks = 1;
		g_hash_table_insert(index, k, GSIZE_TO_POINTER(r->npoints));
		r->npoints++;
	}
	/* each point's stacks, heaviest first: one array cut in slices */
	r->stack_ix = calloc(r->nstacks ? r->nstacks : 1, sizeof(*r->stack_ix));
	fill = calloc(r->npoints ? r->npoints : 1, sizeof(*fill));
	if (!r->stack_ix || !fill) {
		free(fill);
		g_hash_table_destroy(index);
		report_groups_free(r);
		return -1;
	}
	for (size_t i = 0, at = 0; i < r->npoints; i++) {
		r->points[i].stacks = r->stack_ix + at;
		at += r->points[i].nstacks;
	}
	for (size_t i = 0; i < r->nstacks; i++) {
		struct point_key k;
		struct point_group *pg;

		point_of(r->stacks[i].site, mods, &k);
		pg = &r->points[GPOINTER_TO_SIZE(g_hash_table_lookup(index, &k))];
		pg->stacks[fill[pg - r->points]++] = i;
	}
	free(fill);
	g_hash_table_destroy(index);
	for (size_t i = 0; i < r->npoints; i++) {
		struct site_group *g = &r->points[i].sum;

		g->score = g->cycles >= 2 ? (double)g->retaining / g->cycles *
						    (profile_estimate_words(p, g->retained) * 8.0 / g->cycles)
					  : 0;
	}
	by_value = by;
	qsort(r->points, r->npoints, sizeof(*r->points), point_cmp);
	build_functions(r, mods, by);
	return r->funcs || !r->nstacks ? 0 : -1;
}

void report_groups_free(struct report_groups *r)
{
	free(r->stacks);
	free(r->points);
	free(r->stack_ix);
	free(r->funcs);
	free(r->path_of);
	memset(r, 0, sizeof(*r));
}

void report_points_of_sites(const struct report_groups *r, struct modules *mods, const struct profile_site *const *sites,
			    size_t n, size_t *out)
{
	GHashTable *index = g_hash_table_new_full(point_key_hash, point_key_equal, g_free, NULL);

	for (size_t i = 0; i < r->npoints; i++) {
		struct point_key *k = g_new(struct point_key, 1);

		point_of(r->points[i].sum.site, mods, k);
		g_hash_table_insert(index, k, GSIZE_TO_POINTER(i + 1));
	}
	for (size_t i = 0; i < n; i++) {
		struct point_key k;

		point_of(sites[i], mods, &k);
		out[i] = GPOINTER_TO_SIZE(g_hash_table_lookup(index, &k)) - 1; /* (size_t)-1: not found */
	}
	g_hash_table_destroy(index);
}
