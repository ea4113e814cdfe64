/* report_dot.c -- census --retainers as a graph (report_internal.h): the
 * top live entries of the census, each with the shortest paths that keep
 * its sampled blocks alive (report_paths.c), in Graphviz's DOT language
 * (https://graphviz.org/doc/info/lang.html): a root is a node of its own,
 * reached by every path it starts; blocks on the way are nodes shared by
 * the paths that pass them in the same way from the same root (so a
 * Hashtbl's bucket array is one node for its keys and its data); each path
 * ends at its entry's node, the edge saying how many blocks it holds. */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#define ENTRIES_MAX 12 /* entries drawn (the census's first), each with ... */
#define GROUPS_MAX 3   /* ... the paths of its first groups (as the text) */

/* s as a DOT quoted string's contents, into g. */
static void dot_escape(GString *g, const char *s)
{
	for (; *s; s++) {
		if (*s == '\n') { /* a line break, centred */
			g_string_append(g, "\\n");
			continue;
		}
		if (*s == '"' || *s == '\\')
			g_string_append_c(g, '\\');
		g_string_append_c(g, *s);
	}
}

/* A label made to read in a box: each part of a description on a line
 * of its own ("block tag 0, 1 word\nref or Some of ...;\nthe head: ..."),
 * a source file by its base name. */
static void wrap(char *s)
{
	GString *g = g_string_new(NULL);
	const char *p = s;

	while (*p) {
		if ((p[0] == ':' || p[0] == ';') && p[1] == ' ') {
			g_string_append_c(g, p[0] == ';' ? ';' : ' ');
			g_string_append_c(g, '\n');
			p += 2;
		} else if (p[0] == ' ' && p[1] == ' ' && p[2] == '(') {
			g_string_append_c(g, '\n');
			p += 2;
		} else if (p[0] == '(' && strchr(p, '/') && strchr(p, ')') && strchr(p, '/') < strchr(p, ')')) {
			/* "(/a/b/leak.ml:64)" -> "(leak.ml:64)" */
			const char *end = strchr(p, ')'), *base = p + 1;

			for (const char *q = p + 1; q < end; q++)
				if (*q == '/')
					base = q + 1;
			g_string_append_c(g, '(');
			g_string_append_len(g, base, end - base);
			p = end;
		} else {
			g_string_append_c(g, *p++);
		}
	}
	strcpy(s, g->str); /* never longer */
	g_string_free(g, TRUE);
}

/* The node for `key` (made with `label` and `attrs` the first time): its
 * id, "n<k>". */
static unsigned node(FILE *out, GHashTable *nodes, const char *key, const char *label, const char *attrs)
{
	gpointer at;
	unsigned id;
	GString *l;

	if (g_hash_table_lookup_extended(nodes, key, NULL, &at))
		return GPOINTER_TO_UINT(at);
	id = g_hash_table_size(nodes) + 1;
	g_hash_table_insert(nodes, g_strdup(key), GUINT_TO_POINTER(id));
	l = g_string_new(NULL);
	dot_escape(l, label);
	fprintf(out, "  n%u [label=\"%s\"%s%s];\n", id, l->str, attrs ? ", " : "", attrs ? attrs : "");
	g_string_free(l, TRUE);
	return id;
}

/* An edge from a to b once, labelled. */
static void edge(FILE *out, GHashTable *edges, unsigned a, unsigned b, const char *label)
{
	char key[64];

	snprintf(key, sizeof(key), "%u>%u:%s", a, b, label);
	if (!g_hash_table_add(edges, g_strdup(key)))
		return;
	if (*label)
		fprintf(out, "  n%u -> n%u [label=\"%s\"];\n", a, b, label);
	else
		fprintf(out, "  n%u -> n%u;\n", a, b);
}

/* Entry gi's node and the paths to it. */
static void entry(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
		  const struct report_groups *r, size_t gi, const struct site_group *sg, const char *name, size_t rank,
		  GHashTable *nodes, GHashTable *edges)
{
	const struct report_retention *rr = m->retention;
	struct path_groups pg;
	char label[1400], b1[32], key[64], text[1024], field[32];
	unsigned site;

	if (report_path_groups(m, r, gi, &pg) < 0 || !pg.blocks) {
		report_path_groups_free(&pg);
		return;
	}
	snprintf(label, sizeof(label), "#%zu %s\nlive %s in %" PRIu64 " sampled block%s", rank, name,
		 report_format_bytes(report_est_bytes(p, sg->live), b1, sizeof(b1)), pg.blocks, report_plural(pg.blocks));
	if (pg.count[REPORT_PATH_UNREACHABLE])
		snprintf(label + strlen(label), sizeof(label) - strlen(label), "\n%" PRIu64 " unreachable (garbage)",
			 pg.count[REPORT_PATH_UNREACHABLE]);
	snprintf(key, sizeof(key), "site %zu", gi);
	wrap(label);
	site = node(out, nodes, key, label, "shape=box, style=\"rounded,filled\", fillcolor=\"#cfe2f3\"");
	for (size_t k = 0; k < pg.n && k < GROUPS_MAX; k++) {
		const struct path_group *g = pg.g[k];
		const struct report_path *pp = &rr->paths[g->rep];
		GString *path = g_string_new(rr->strs[pp->root]);
		unsigned prev = node(out, nodes, path->str, rr->strs[pp->root],
				     "shape=box, style=filled, fillcolor=\"#fde9b6\"");
		int role = 0;

		for (size_t s = 0; s < g->nsegs; s++) {
			const struct path_seg *sg2 = &g->segs[s];
			unsigned here;

			report_seg_text(rr, sg2, pp->site, mods, &role, text, sizeof(text));
			wrap(text);
			snprintf(field, sizeof(field), s == 0 || sg2->gap ? "" : sg2->rep->field >= 0 ? ".%d" : ".?",
				 sg2->gap ? 0 : sg2->rep->field);
			if (sg2->last) {
				snprintf(label, sizeof(label), "%s  %" PRIu64 " block%s", field, g->blocks,
					 report_plural(g->blocks));
				edge(out, edges, prev, site, label);
				break;
			}
			g_string_append_printf(path, "|%s%s", field, text);
			here = node(out, nodes, path->str, text, sg2->gap ? "shape=plaintext" : NULL);
			edge(out, edges, prev, here, field);
			prev = here;
		}
		g_string_free(path, TRUE);
	}
	report_path_groups_free(&pg);
}

int report_write_census_dot(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	struct report_groups r;
	GHashTable *nodes = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GHashTable *edges = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GString *title = g_string_new(NULL), *label = g_string_new(NULL);
	size_t shown = 0;
	char name[1024];

	if (report_groups_build(p, mods, REPORT_VALUE_LIVE, &r) < 0)
		return -ENOMEM;
	report_paths_index(m, mods, &r, m->by_stack);
	g_string_printf(title, "camlheap census --retainers of PID %d (%s, OCaml %s): what keeps the live sampled "
			       "blocks of its first sites alive",
			m->pid, m->exe, m->ocaml_version);
	if (m->retention && m->retention->why_not[0])
		g_string_append_printf(title, "\nno paths: %s", m->retention->why_not);
	dot_escape(label, title->str);
	fprintf(out, "digraph retainers {\n  graph [rankdir=LR, labelloc=t, fontname=\"monospace\", label=\"%s\"];\n",
		label->str);
	fprintf(out, "  node [fontname=\"monospace\", fontsize=10, shape=box, style=rounded];\n"
		     "  edge [fontname=\"monospace\", fontsize=9];\n");
	for (size_t i = 0; i < (m->by_stack ? r.nstacks : r.npoints) && shown < ENTRIES_MAX; i++) {
		const struct site_group *sg = m->by_stack ? &r.stacks[i] : &r.points[i].sum;

		if (!sg->live)
			continue;
		if (m->by_stack)
			report_site_leaf_name(sg->site, mods, name, sizeof(name));
		else
			report_point_name(p, &r.points[i], name, sizeof(name));
		entry(out, p, m, mods, &r, i, sg, name, ++shown, nodes, edges);
	}
	fprintf(out, "}\n");
	g_string_free(title, TRUE);
	g_string_free(label, TRUE);
	g_hash_table_destroy(nodes);
	g_hash_table_destroy(edges);
	report_groups_free(&r);
	return ferror(out) ? -(errno ? errno : EIO) : 0;
}
