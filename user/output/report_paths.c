/* report_paths.c -- census --retainers in the census report: under each
 * entry, the paths from the roots that keep its live sampled blocks alive
 * (report_internal.h; the paths: cmd/census_paths.h).
 *
 * Paths are grouped by their root and by who retains their block alone
 * (the same field, root group, or several: "shared"), each group shown by
 * its shortest path, with the number of shapes among its paths.  A path's
 * shape is its root and its blocks' tags, sizes and the fields that lead to
 * them, consecutive blocks of one shape reached through the same field (a
 * list's cells, a chain of records) counted as one run of any length, the
 * blocks between its shown ends as one gap of any length, a field of a
 * block of more than 16 fields (an array, a Hashtbl's bucket array) and the
 * sampled block's own size left out: the 4 000 elements of one list, at
 * any depth, or the bindings of one Hashtbl in any bucket, have one shape.
 * The stdlib's containers are named along the path from what the first
 * blocks' descriptions say (heap/shape4.h) and their layouts. */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "output/jsonw.h"

#define WIDE 16            /* a block of more fields: which one leads on is left out of the shape */
#define GROUPS_SHOWN 3     /* groups (a root and an owner) shown under an entry */
#define SEGS_MAX PATH_SEGS_MAX

static bool same_hop(const struct report_hop *a, const struct report_hop *b, bool wide_field)
{
	return a->tag == b->tag && a->wosize == b->wosize && (wide_field || a->field == b->field);
}

/* Path p as segments into s (SEGS_MAX); returns how many. */
static size_t path_segs(const struct report_path *p, struct path_seg *s)
{
	const struct report_hop *prev = NULL;
	size_t n = 0;

	for (unsigned k = 0; k < (unsigned)p->nhead + p->ntail + 1u; k++) {
		const struct report_hop *h;
		bool wide;

		if (k == p->nhead) {
			uint64_t gap = p->length - p->nhead - p->ntail;

			if (gap)
				s[n++] = (struct path_seg){ .gap = true, .nmin = gap, .nmax = gap };
			if (gap)
				prev = NULL;
			continue;
		}
		h = k < p->nhead ? &p->head[k] : &p->tail[k - p->nhead - 1];
		wide = prev && prev->wosize > WIDE;
		if (n && prev && !s[n - 1].gap && k + 1 < (unsigned)p->nhead + p->ntail + 1u &&
		    same_hop(s[n - 1].rep, h, wide) && !(k == p->nhead + p->ntail)) {
			s[n - 1].nmin++;
			s[n - 1].nmax++;
		} else {
			s[n++] = (struct path_seg){ .rep = h, .nmin = 1, .nmax = 1 };
		}
		prev = h;
	}
	if (n)
		s[n - 1].last = true;
	return n;
}

/* The shape of segments s[0..n) of path p: its root, then each segment's
 * tag, size (not the sampled block's) and the field that leads to it (not
 * out of a wide block), a gap and a repeat of the same left out (a list's
 * cells before and after the blocks not shown are one run). */
static void shape_key(GString *key, const struct report_path *p, const struct path_seg *s, size_t n)
{
	const struct report_hop *prev = NULL;
	GString *one = g_string_new(NULL), *last = g_string_new(NULL);

	g_string_printf(key, "%d/%d", p->root, p->via_static);
	for (size_t i = 0; i < n; i++) {
		if (s[i].gap)
			continue;
		g_string_printf(one, "|%u", s[i].rep->tag);
		if (!s[i].last)
			g_string_append_printf(one, ",%u", s[i].rep->wosize);
		if (!(prev && prev->wosize > WIDE))
			g_string_append_printf(one, ",.%d", s[i].rep->field);
		if (s[i].last)
			g_string_append(one, "!");
		if (strcmp(one->str, last->str))
			g_string_append(key, one->str);
		g_string_assign(last, one->str);
		prev = s[i].rep;
	}
	g_string_free(one, TRUE);
	g_string_free(last, TRUE);
}

static int cmp_group_samples(const void *a, const void *b)
{
	const struct path_group *x = *(const struct path_group *const *)a, *y = *(const struct path_group *const *)b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return x->rep < y->rep ? -1 : x->rep > y->rep;
}

static void free_group(gpointer p)
{
	struct path_group *g = p;

	g_string_free(g->key, TRUE);
	if (g->shapes)
		g_hash_table_destroy(g->shapes);
	g_free(g);
}

/* Add path i (of rr) to the group of its root and owner in `by_key`. */
static void group_path(GHashTable *by_key, const struct report_retention *rr, size_t i)
{
	const struct report_path *p = &rr->paths[i];
	struct path_seg s[SEGS_MAX];
	size_t n = path_segs(p, s);
	GString *key = g_string_new(NULL), *shape = g_string_new(NULL);
	struct path_group *g;

	g_string_printf(key, "%d/%d/%d", p->root, p->via_static, p->owner);
	shape_key(shape, p, s, n);
	g = g_hash_table_lookup(by_key, key->str);
	if (!g) {
		g = g_new0(struct path_group, 1);
		g->key = key;
		g->rep = i;
		g->len_min = g->len_max = p->length;
		g->shapes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
		memcpy(g->segs, s, n * sizeof(*s));
		g->nsegs = n;
		g_hash_table_insert(by_key, key->str, g);
	} else {
		g_string_free(key, TRUE);
		if (p->length < g->len_min) {
			g->len_min = p->length;
			g->rep = i;
			memcpy(g->segs, s, n * sizeof(*s));
			g->nsegs = n;
		}
		if (p->length > g->len_max)
			g->len_max = p->length;
	}
	g_hash_table_add(g->shapes, g_string_free(shape, FALSE));
	g->blocks++;
	g->samples += p->samples;
}

void report_site_leaf_name(const struct profile_site *s, struct modules *mods, char *buf, size_t len)
{
	struct sym_frame fr[MAX_INLINE];
	int n = s->stack && s->stack->nframes ? modules_lookup(mods, s->stack->frames[0], s->alloc_idx, fr, MAX_INLINE)
					      : 0;

	if (n > 0)
		snprintf(buf, len, "%s (%s:%d)", fr[0].function, fr[0].file ? fr[0].file : "?", fr[0].line);
	else
		snprintf(buf, len, "a site without OCaml frames");
}

static const char *tag_word(uint8_t tag)
{
	static const char *const names[] = { "lazy", "closure", "object", "infix", "forward", "abstract",
					     "string", "float", "float array", "custom" };

	return tag >= 246 ? names[tag - 246] : NULL;
}

/* The stdlib's containers along a path (stdlib/hashtbl.ml, map.ml,
 * set.ml, queue.ml of 4.12.1-4.14.2; their layouts: heap/shape4.h): a
 * block's role from the one before it, whose description (shape4) or
 * role said what it was. */
enum role {
	ROLE_NONE = 0,
	ROLE_REF_HASHTBL, ROLE_HASHTBL, ROLE_BUCKETS, ROLE_BINDING,
	ROLE_REF_MAP, ROLE_MAP, ROLE_REF_SET, ROLE_SET, ROLE_REF_QUEUE, ROLE_QUEUE, ROLE_QCELL,
};

static enum role container_of(const char *what)
{
	static const struct { const char *prefix; enum role r; } known[] = {
		{ "Hashtbl.t", ROLE_HASHTBL }, { "ref or Some of Hashtbl.t", ROLE_REF_HASHTBL },
		{ "Map.t", ROLE_MAP }, { "ref or Some of Map.t", ROLE_REF_MAP },
		{ "Set.t", ROLE_SET }, { "ref or Some of Set.t", ROLE_REF_SET },
		{ "Queue.t", ROLE_QUEUE }, { "ref or Some of Queue.t", ROLE_REF_QUEUE },
	};

	for (size_t i = 0; what && i < sizeof(known) / sizeof(known[0]); i++)
		if (!strncmp(what, known[i].prefix, strlen(known[i].prefix)))
			return known[i].r;
	return ROLE_NONE;
}

/* Block h's role after a block of role `prev`, and what to call it (NULL:
 * nothing to say). */
static enum role role_of(enum role prev, const struct report_hop *h, const char *what, const char **name)
{
	enum role r = container_of(what);

	*name = NULL;
	if (r != ROLE_NONE)
		return r;
	switch (prev) {
	case ROLE_REF_HASHTBL: case ROLE_REF_MAP: case ROLE_REF_SET: case ROLE_REF_QUEUE:
		if (h->field == 0)
			return prev + 1; /* the container the ref holds */
		break;
	case ROLE_HASHTBL:
		if (h->field == 1)
			return *name = "the Hashtbl's bucket array", ROLE_BUCKETS;
		break;
	case ROLE_BUCKETS:
		if (h->tag == 0 && h->wosize == 3)
			return *name = "a binding (Cons of key, data, next)", ROLE_BINDING;
		break;
	case ROLE_BINDING:
		if (h->field == 2 && h->tag == 0 && h->wosize == 3)
			return *name = "the next binding of its bucket", ROLE_BINDING;
		*name = h->field == 0 ? "its key" : h->field == 1 ? "its data" : NULL;
		break;
	case ROLE_MAP:
		if ((h->field == 0 || h->field == 3) && h->tag == 0 && h->wosize == 5)
			return *name = h->field ? "its right subtree" : "its left subtree", ROLE_MAP;
		*name = h->field == 1 ? "its key" : h->field == 2 ? "its value" : NULL;
		break;
	case ROLE_SET:
		if ((h->field == 0 || h->field == 2) && h->tag == 0 && h->wosize == 4)
			return *name = h->field ? "its right subtree" : "its left subtree", ROLE_SET;
		*name = h->field == 1 ? "its element" : NULL;
		break;
	case ROLE_QUEUE:
	case ROLE_QCELL:
		if (h->field == 1 && h->tag == 0 && h->wosize == 2)
			return *name = prev == ROLE_QUEUE ? "its first cell (content, next)" : "the next cell", ROLE_QCELL;
		*name = prev == ROLE_QCELL && h->field == 0 ? "its element" : NULL;
		break;
	default:
		break;
	}
	return ROLE_NONE;
}

void report_seg_text(const struct report_retention *rr, const struct path_seg *s, const struct profile_site *own,
		     struct modules *mods, int *role, char *buf, size_t len)
{
	const struct report_hop *h = s->rep;
	const char *what = h && h->what >= 0 ? rr->strs[h->what] : NULL, *called = NULL;
	char name[400], tag[32];
	size_t n;

	if (s->gap) {
		if (s->nmin == s->nmax)
			snprintf(buf, len, "... %" PRIu64 " more block%s ...", s->nmin, report_plural(s->nmin));
		else
			snprintf(buf, len, "... %" PRIu64 "-%" PRIu64 " more blocks ...", s->nmin, s->nmax);
		*role = ROLE_NONE;
		return;
	}
	*role = (int)role_of((enum role)*role, h, what, &called);
	if (tag_word(h->tag))
		snprintf(tag, sizeof(tag), "%s", tag_word(h->tag));
	else
		snprintf(tag, sizeof(tag), "block tag %u", h->tag);
	n = (size_t)snprintf(buf, len, "%s, %u word%s", tag, h->wosize, report_plural(h->wosize));
	if (s->nmax > 1 && n < len)
		n += (size_t)snprintf(buf + n, len - n, s->nmin == s->nmax ? "  x %" PRIu64 : "  x %" PRIu64 "-%" PRIu64,
				      s->nmin, s->nmax);
	if (s->last && n < len)
		n += (size_t)snprintf(buf + n, len - n, "  <- the sampled block");
	else if (h->site && h->site != own && n < len) {
		report_site_leaf_name(h->site, mods, name, sizeof(name));
		n += (size_t)snprintf(buf + n, len - n, "  (itself sampled at %s)", name);
	} else if (h->site && n < len) {
		n += (size_t)snprintf(buf + n, len - n, "  (itself sampled here)");
	}
	/* shape4's own fallback says no more than the tag and size */
	if (what && !s->last && s->nmax == 1 && strncmp(what, "block of tag", 12) && n < len)
		snprintf(buf + n, len - n, ": %s", what);
	else if (called && n < len)
		snprintf(buf + n, len - n, ": %s", called);
}

/* One segment of a shape, as a line; *role: the block before's, then its. */
static void seg_line(FILE *out, const struct report_retention *rr, const struct path_seg *s, bool first,
		     const struct profile_site *own, struct modules *mods, int *role)
{
	char at[32] = "", text[1024];

	report_seg_text(rr, s, own, mods, role, text, sizeof(text));
	if (s->gap) {
		fprintf(out, "            %s\n", text);
		return;
	}
	if (!first)
		snprintf(at, sizeof(at), s->rep->field >= 0 ? ".%d ->" : ".? ->", s->rep->field);
	fprintf(out, "          %6s %s\n", at, text);
}

void report_paths_index(const struct report_meta *m, struct modules *mods, struct report_groups *r, bool by_stack)
{
	const struct report_retention *rr = m->retention;
	const struct profile_site **sites;

	if (!rr || rr->why_not[0] || !rr->npaths)
		return;
	sites = calloc(rr->npaths, sizeof(*sites));
	r->path_of = calloc(rr->npaths, sizeof(*r->path_of));
	if (!sites || !r->path_of) {
		free(sites);
		free(r->path_of);
		r->path_of = NULL;
		return;
	}
	for (size_t i = 0; i < rr->npaths; i++)
		sites[i] = rr->paths[i].site;
	if (by_stack)
		report_stacks_of_sites(r, mods, sites, rr->npaths, r->path_of);
	else
		report_points_of_sites(r, mods, sites, rr->npaths, r->path_of);
	free(sites);
}

void report_paths_header(FILE *out, const struct report_meta *m)
{
	const struct report_retention *rr = m->retention;
	uint64_t reached = 0;

	if (!rr)
		return;
	if (rr->why_not[0]) {
		fprintf(out, "retainers   none: %s\n", rr->why_not);
		return;
	}
	for (size_t i = 0; i < rr->npaths; i++)
		reached += rr->paths[i].status == REPORT_PATH_REACHED;
	fprintf(out,
		"retainers   the program stopped %.1f ms, %.1f ms after the end (%u stop%s tried; walk and trace %.1f ms "
		"of a %.1f MiB major heap, %.1f MiB reachable); %" PRIu64 " of %zu live sampled blocks reached from a "
		"root%s\n",
		rr->pause_s * 1e3, rr->gap_s * 1e3, rr->stops, report_plural(rr->stops), rr->trace_s * 1e3,
		(double)rr->heap_words * 8 / 1048576.0, (double)rr->reachable_words * 8 / 1048576.0, reached, rr->npaths,
		reached < rr->npaths ? " (the others, under their sites: garbage not swept yet, or not traced)" : "");
}

int report_path_groups(const struct report_meta *m, const struct report_groups *r, size_t gi, struct path_groups *out)
{
	const struct report_retention *rr = m->retention;
	GHashTableIter it;
	gpointer v;

	memset(out, 0, sizeof(*out));
	if (!rr || rr->why_not[0] || !r->path_of)
		return 0;
	out->by_key = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_group);
	for (size_t i = 0; i < rr->npaths; i++) {
		if (r->path_of[i] != gi)
			continue;
		out->blocks++;
		out->count[rr->paths[i].status]++;
		if (rr->paths[i].status == REPORT_PATH_REACHED)
			group_path(out->by_key, rr, i);
	}
	out->g = calloc(g_hash_table_size(out->by_key) + 1, sizeof(*out->g));
	if (!out->g) {
		report_path_groups_free(out);
		return -1;
	}
	g_hash_table_iter_init(&it, out->by_key);
	while (g_hash_table_iter_next(&it, NULL, &v))
		out->g[out->n++] = v;
	qsort(out->g, out->n, sizeof(*out->g), cmp_group_samples);
	return 0;
}

void report_path_groups_free(struct path_groups *pg)
{
	free(pg->g);
	if (pg->by_key)
		g_hash_table_destroy(pg->by_key);
	memset(pg, 0, sizeof(*pg));
}

void report_path_group_title(const struct report_retention *rr, const struct path_group *g, char *buf, size_t len)
{
	const struct report_path *p = &rr->paths[g->rep];
	size_t n;

	if (p->root == p->owner)
		n = (size_t)snprintf(buf, len, "held by %s alone", rr->strs[p->root]);
	else if (!strncmp(rr->strs[p->owner], "shared", 6))
		n = (size_t)snprintf(buf, len, "held from %s and from other root groups", rr->strs[p->root]);
	else
		n = (size_t)snprintf(buf, len, "held from %s, retained by %s", rr->strs[p->root], rr->strs[p->owner]);
	if (n < len)
		n += (size_t)snprintf(buf + n, len - n, "%s: paths of %" PRIu64, p->via_static ? " (through the program's static data)" : "", g->len_min);
	if (g->len_max != g->len_min && n < len)
		n += (size_t)snprintf(buf + n, len - n, "-%" PRIu64, g->len_max);
	if (n < len)
		n += (size_t)snprintf(buf + n, len - n, " block%s", g->len_max == 1 ? "" : "s");
	if (g_hash_table_size(g->shapes) > 1 && n < len)
		snprintf(buf + n, len - n, " of %u shapes", g_hash_table_size(g->shapes));
}

void report_paths_summary(FILE *out, const struct profile *p, const struct report_meta *m,
			  const struct report_groups *r, size_t k)
{
	const struct report_retention *rr = m->retention;
	char name[1024], title[1024];
	bool any = false;

	for (size_t i = 0; rr && !rr->why_not[0] && r->path_of && i < k && i < r->npoints; i++) {
		struct path_groups pg;

		if (report_path_groups(m, r, i, &pg) < 0 || !pg.blocks) {
			report_path_groups_free(&pg);
			continue;
		}
		if (!any)
			fprintf(out, "\nWhat keeps the first points' live sampled blocks alive (the first root and owner of "
				     "each; paths in detail below):\n");
		any = true;
		report_point_name(p, &r->points[i], name, sizeof(name));
		fprintf(out, "  #%zu  %s\n", i + 1, name);
		if (pg.n) {
			report_path_group_title(rr, pg.g[0], title, sizeof(title));
			if (strstr(title, ": paths of")) /* their lengths: in the detail */
				*strstr(title, ": paths of") = 0;
			fprintf(out, "        %3.0f%%  %s%s\n", 100.0 * (double)pg.g[0]->blocks / (double)pg.blocks, title,
				pg.n > 1 ? " (and other roots: below)" : "");
		}
		if (pg.count[REPORT_PATH_UNREACHABLE])
			fprintf(out, "        %3.0f%%  unreachable: garbage the GC has not swept yet\n",
				100.0 * (double)pg.count[REPORT_PATH_UNREACHABLE] / (double)pg.blocks);
		report_path_groups_free(&pg);
	}
}

void report_paths_text(FILE *out, const struct report_meta *m, struct modules *mods, const struct report_groups *r,
		       size_t gi)
{
	const struct report_retention *rr = m->retention;
	struct path_groups pg;
	char title[1024];

	if (report_path_groups(m, r, gi, &pg) < 0 || !pg.blocks) {
		report_path_groups_free(&pg);
		return;
	}
	fprintf(out, "    kept alive by (paths from the roots at the end, %" PRIu64 " live sampled block%s):\n", pg.blocks,
		report_plural(pg.blocks));
	for (size_t k = 0; k < pg.n && k < GROUPS_SHOWN; k++) {
		const struct path_group *g = pg.g[k];
		const struct report_path *p = &rr->paths[g->rep];
		int role = ROLE_NONE;

		report_path_group_title(rr, g, title, sizeof(title));
		fprintf(out, "      %" PRIu64 " block%s (%.0f%%) %s; the shortest:\n        %s\n", g->blocks,
			report_plural(g->blocks), 100.0 * (double)g->blocks / (double)pg.blocks, title, rr->strs[p->root]);
		for (size_t s = 0; s < g->nsegs; s++)
			seg_line(out, rr, &g->segs[s], s == 0, p->site, mods, &role);
	}
	if (pg.n > GROUPS_SHOWN) {
		uint64_t more = 0;

		for (size_t k = GROUPS_SHOWN; k < pg.n; k++)
			more += pg.g[k]->blocks;
		fprintf(out, "      (%zu more roots or owners: %" PRIu64 " block%s; JSON lists every one)\n",
			pg.n - GROUPS_SHOWN, more, report_plural(more));
	}
	if (pg.count[REPORT_PATH_UNREACHABLE])
		fprintf(out, "      %" PRIu64 " block%s unreachable: garbage the GC has not swept yet\n",
			pg.count[REPORT_PATH_UNREACHABLE], report_plural(pg.count[REPORT_PATH_UNREACHABLE]));
	if (pg.count[REPORT_PATH_YOUNG])
		fprintf(out, "      %" PRIu64 " block%s in the minor heap, not traced (a thread was running OCaml code)\n",
			pg.count[REPORT_PATH_YOUNG], report_plural(pg.count[REPORT_PATH_YOUNG]));
	if (pg.count[REPORT_PATH_SKIPPED])
		fprintf(out, "      %" PRIu64 " block%s not followed to a root (--max-pause passed first)\n",
			pg.count[REPORT_PATH_SKIPPED], report_plural(pg.count[REPORT_PATH_SKIPPED]));
	report_path_groups_free(&pg);
}

static void json_hops(JsonBuilder *jb, const struct report_retention *rr, const struct path_group *g,
		      GHashTable *site_ix)
{
	int role = ROLE_NONE;

	json_builder_set_member_name(jb, "blocks_on_path");
	json_builder_begin_array(jb);
	for (size_t s = 0; s < g->nsegs; s++) {
		const struct path_seg *sg = &g->segs[s];
		const struct report_hop *h = sg->rep;

		const char *called = NULL;

		json_builder_begin_object(jb);
		if (sg->gap) {
			role = ROLE_NONE;
			json_member_int(jb, "not_shown_min", (int64_t)sg->nmin);
			json_member_int(jb, "not_shown_max", (int64_t)sg->nmax);
			json_builder_end_object(jb);
			continue;
		}
		json_member_int(jb, "tag", h->tag);
		json_member_int(jb, "words", h->wosize);
		if (s > 0)
			json_member_int(jb, "field", h->field);
		json_member_int(jb, "count_min", (int64_t)sg->nmin);
		json_member_int(jb, "count_max", (int64_t)sg->nmax);
		role = (int)role_of((enum role)role, h, h->what >= 0 ? rr->strs[h->what] : NULL, &called);
		if (h->what >= 0 && !sg->last && sg->nmax == 1)
			json_member_str(jb, "shape", rr->strs[h->what]);
		if (called)
			json_member_str(jb, "role", called);
		if (h->site && g_hash_table_contains(site_ix, h->site))
			json_member_int(jb, "sampled_site",
					(int64_t)GPOINTER_TO_SIZE(g_hash_table_lookup(site_ix, h->site)) - 1);
		if (sg->last)
			json_member_int(jb, "sampled_block", 1);
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
}

void report_paths_json(JsonBuilder *jb, const struct report_meta *m, const struct profile_site *const *sites,
		       size_t nsites)
{
	const struct report_retention *rr = m->retention;
	GHashTable *site_ix, **by_site;
	static const char *const status[] = { "reached", "unreachable", "young", "skipped" };

	if (!rr)
		return;
	json_builder_set_member_name(jb, "retainers");
	json_builder_begin_object(jb);
	json_member_str(jb, "not_traced", rr->why_not[0] ? rr->why_not : NULL);
	json_member_double(jb, "pause_s", rr->pause_s);
	json_member_double(jb, "after_end_s", rr->gap_s);
	json_member_int(jb, "stops", rr->stops);
	json_member_double(jb, "trace_s", rr->trace_s);
	json_member_int(jb, "heap_words", (int64_t)rr->heap_words);
	json_member_int(jb, "reachable_words", (int64_t)rr->reachable_words);
	site_ix = g_hash_table_new(g_direct_hash, g_direct_equal);
	by_site = calloc(nsites + 1, sizeof(*by_site));
	for (size_t i = 0; i < nsites; i++)
		g_hash_table_insert(site_ix, (gpointer)sites[i], GSIZE_TO_POINTER(i + 1));
	json_builder_set_member_name(jb, "sites");
	json_builder_begin_array(jb);
	for (size_t i = 0; by_site && i < rr->npaths; i++) {
		size_t si = GPOINTER_TO_SIZE(g_hash_table_lookup(site_ix, rr->paths[i].site));

		if (!si)
			continue;
		if (!by_site[si - 1])
			by_site[si - 1] = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, free_group);
		if (rr->paths[i].status == REPORT_PATH_REACHED) {
			group_path(by_site[si - 1], rr, i);
		} else { /* the other statuses counted under a key of their own */
			char key[32];
			struct path_group *g;

			snprintf(key, sizeof(key), "!%s", status[rr->paths[i].status]);
			if (!(g = g_hash_table_lookup(by_site[si - 1], key))) {
				g = g_new0(struct path_group, 1);
				g->key = g_string_new(key);
				g->rep = i;
				g_hash_table_insert(by_site[si - 1], g->key->str, g);
			}
			g->blocks++;
			g->samples += rr->paths[i].samples;
		}
	}
	for (size_t si = 0; by_site && si < nsites; si++) {
		GHashTableIter it;
		gpointer v;
		struct path_group **gs;
		size_t n = 0;

		if (!by_site[si])
			continue;
		gs = calloc(g_hash_table_size(by_site[si]) + 1, sizeof(*gs));
		g_hash_table_iter_init(&it, by_site[si]);
		while (gs && g_hash_table_iter_next(&it, NULL, &v))
			gs[n++] = v;
		if (gs)
			qsort(gs, n, sizeof(*gs), cmp_group_samples);
		json_builder_begin_object(jb);
		json_member_int(jb, "site", (int64_t)si);
		json_builder_set_member_name(jb, "paths");
		json_builder_begin_array(jb);
		for (size_t k = 0; gs && k < n; k++) {
			const struct path_group *g = gs[k];
			const struct report_path *p = &rr->paths[g->rep];

			json_builder_begin_object(jb);
			json_member_str(jb, "status", g->key->str[0] == '!' ? g->key->str + 1 : "reached");
			json_member_int(jb, "blocks", (int64_t)g->blocks);
			json_member_int(jb, "samples", (int64_t)g->samples);
			if (g->key->str[0] != '!') {
				json_member_str(jb, "root", rr->strs[p->root]);
				json_builder_set_member_name(jb, "through_static_data");
				json_builder_add_boolean_value(jb, p->via_static);
				json_member_str(jb, "retained_by", rr->strs[p->owner]);
				json_member_int(jb, "shapes", g_hash_table_size(g->shapes));
				json_member_int(jb, "length_min", (int64_t)g->len_min);
				json_member_int(jb, "length_max", (int64_t)g->len_max);
				json_hops(jb, rr, g, site_ix);
			}
			json_builder_end_object(jb);
		}
		json_builder_end_array(jb);
		json_builder_end_object(jb);
		free(gs);
		g_hash_table_destroy(by_site[si]);
	}
	json_builder_end_array(jb);
	json_builder_end_object(jb);
	free(by_site);
	g_hash_table_destroy(site_ix);
}
