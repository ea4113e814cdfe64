/* diff.c -- see diff.h. */
#define _GNU_SOURCE
#include "diff.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "outfile.h"
#include "report.h"

struct side {
	double samples, live;   /* samples, live samples */
	double bytes, live_bytes;
	bool present, has_live;
};

struct row {
	char *key;              /* kind + printed stack */
	char *label;            /* "kind  Function (file:line)" */
	struct side s[2];
	double z_alloc, z_live;
	bool sig_alloc, sig_live;
};

struct doc {
	JsonParser *parser;
	JsonObject *root;
	double rate;
};

double diff_site_z(double k1, double l1, double k2, double l2)
{
	double n = k1 + k2, p = l1 / (l1 + l2);

	if (n <= 0 || p <= 0 || p >= 1)
		return 0.0;
	return (k1 - n * p) / sqrt(n * p * (1 - p));
}

static int load(const char *path, struct doc *d)
{
	GError *err = NULL;
	JsonNode *root;

	d->parser = json_parser_new();
	if (!json_parser_load_from_file(d->parser, path, &err)) {
		fprintf(stderr, "camlheap: cannot read %s: %s\n", path, err ? err->message : "unknown error");
		g_clear_error(&err);
		return -1;
	}
	root = json_parser_get_root(d->parser);
	if (!root || !JSON_NODE_HOLDS_OBJECT(root) ||
	    g_strcmp0(json_object_get_string_member_with_default(json_node_get_object(root), "format", ""),
		      "camlheap-report") ||
	    json_object_get_int_member_with_default(json_node_get_object(root), "version", 0) != 1) {
		fprintf(stderr,
			"camlheap: %s is not a camlheap recording in JSON (write one with camlheap record "
			"--format json -o FILE)\n",
			path);
		return -1;
	}
	d->root = json_node_get_object(root);
	d->rate = json_object_get_double_member_with_default(
		json_object_get_object_member(d->root, "run"), "rate", 0);
	if (!(d->rate > 0 && d->rate <= 1)) {
		fprintf(stderr, "camlheap: %s has no valid run.rate\n", path);
		return -1;
	}
	return 0;
}

/* The key of a site: kind, allocation position, then every frame's
 * function, file and line (addresses differ between runs; source does not). */
static char *site_key(JsonObject *site, JsonArray *stacks, char **label)
{
	GString *k = g_string_new(json_object_get_string_member_with_default(site, "kind", "?"));
	JsonObject *alloc = json_object_get_object_member(site, "allocation");
	const char *fn = alloc ? json_object_get_string_member_with_default(alloc, "function", "?") : "?";
	JsonNode *fnode = alloc ? json_object_get_member(alloc, "file") : NULL;
	const char *file = fnode && JSON_NODE_HOLDS_VALUE(fnode) ? json_node_get_string(fnode) : NULL;
	int64_t line = alloc ? json_object_get_int_member_with_default(alloc, "line", 0) : 0;
	JsonNode *st = json_object_get_member(site, "stack");

	g_string_append_printf(k, "|%s|%s|%" G_GINT64_FORMAT, fn, file ? file : "", line);
	*label = g_strdup_printf("%-9s %s (%s:%" G_GINT64_FORMAT ")",
				 json_object_get_string_member_with_default(site, "kind", "?"), fn,
				 file ? file : "?", line);
	if (st && JSON_NODE_HOLDS_VALUE(st)) {
		int64_t ix = json_node_get_int(st);

		if (ix >= 0 && (guint)ix < json_array_get_length(stacks)) {
			JsonArray *frames =
				json_object_get_array_member(json_array_get_object_element(stacks, (guint)ix), "frames");

			for (guint i = 0; frames && i < json_array_get_length(frames); i++) {
				JsonObject *f = json_array_get_object_element(frames, i);
				JsonNode *fl = json_object_get_member(f, "file");

				g_string_append_printf(k, ";%s|%s|%" G_GINT64_FORMAT,
						       json_object_get_string_member_with_default(f, "function", "?"),
						       fl && JSON_NODE_HOLDS_VALUE(fl) ? json_node_get_string(fl) : "",
						       json_object_get_int_member_with_default(f, "line", 0));
			}
		}
	}
	return g_string_free(k, FALSE);
}

static void add_sites(struct doc *d, int which, GHashTable *rows)
{
	JsonArray *sites = json_object_get_array_member(d->root, "sites");
	JsonArray *stacks = json_object_get_array_member(d->root, "stacks");

	for (guint i = 0; sites && i < json_array_get_length(sites); i++) {
		JsonObject *s = json_array_get_object_element(sites, i);
		char *label;
		char *key = site_key(s, stacks, &label);
		struct row *r = g_hash_table_lookup(rows, key);
		JsonObject *live = json_object_has_member(s, "live") ? json_object_get_object_member(s, "live") : NULL;

		if (!r) {
			r = g_new0(struct row, 1);
			r->key = key;
			r->label = label;
			g_hash_table_insert(rows, key, r);
		} else {
			g_free(key);
			g_free(label);
		}
		/* sites that print alike in one run add up (as in the text report) */
		r->s[which].present = true;
		r->s[which].samples += (double)json_object_get_int_member_with_default(s, "samples", 0);
		if (live) {
			r->s[which].has_live = true;
			r->s[which].live += (double)json_object_get_int_member_with_default(live, "samples", 0);
		}
	}
}

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = *(const struct row *const *)a, *y = *(const struct row *const *)b;
	double dx = fabs(x->s[1].bytes - x->s[0].bytes), dy = fabs(y->s[1].bytes - y->s[0].bytes);

	if (x->sig_alloc != y->sig_alloc)
		return x->sig_alloc ? -1 : 1;
	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Two-sided normal quantile for tail probability q (Acklam's rational
 * approximation is overkill here: bisection on erfc). */
static double z_crit(double q)
{
	double lo = 0, hi = 40;

	for (int i = 0; i < 200; i++) {
		double mid = (lo + hi) / 2;

		if (erfc(mid / M_SQRT2) > q)
			lo = mid;
		else
			hi = mid;
	}
	return (lo + hi) / 2;
}

int diff_run(const struct diff_opts *o)
{
	struct doc d[2] = { 0 };
	GHashTable *rows = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, NULL);
	struct row **v = NULL;
	struct outfile out;
	size_t n = 0, m_alloc = 0, m_live = 0, nsig = 0;
	double za, zl;
	char b1[32], b2[32], b3[32];
	int status = 2;
	GHashTableIter it;
	gpointer k, val;

	if (load(o->a, &d[0]) < 0 || load(o->b, &d[1]) < 0)
		goto done;
	add_sites(&d[0], 0, rows);
	add_sites(&d[1], 1, rows);
	v = calloc(g_hash_table_size(rows) + 1, sizeof(*v));
	if (!v)
		goto done;
	g_hash_table_iter_init(&it, rows);
	while (g_hash_table_iter_next(&it, &k, &val)) {
		struct row *r = val;

		for (int i = 0; i < 2; i++) {
			r->s[i].bytes = r->s[i].samples / d[i].rate * 8.0;
			r->s[i].live_bytes = r->s[i].live / d[i].rate * 8.0;
		}
		m_alloc += r->s[0].samples + r->s[1].samples > 0;
		m_live += r->s[0].has_live && r->s[1].has_live && r->s[0].live + r->s[1].live > 0;
		v[n++] = r;
	}
	za = z_crit(o->alpha / (double)(m_alloc ? m_alloc : 1));
	zl = z_crit(o->alpha / (double)(m_live ? m_live : 1));
	for (size_t i = 0; i < n; i++) {
		struct row *r = v[i];

		r->z_alloc = diff_site_z(r->s[1].samples, d[1].rate, r->s[0].samples, d[0].rate);
		r->sig_alloc = fabs(r->z_alloc) > za;
		if (r->s[0].has_live && r->s[1].has_live) {
			r->z_live = diff_site_z(r->s[1].live, d[1].rate, r->s[0].live, d[0].rate);
			r->sig_live = fabs(r->z_live) > zl;
		}
		nsig += r->sig_alloc || r->sig_live;
	}
	qsort(v, n, sizeof(*v), row_cmp);

	if (outfile_open(&out, o->output) < 0) {
		fprintf(stderr, "camlheap: cannot write to %s: %s\n", o->output ? o->output : "stdout", strerror(errno));
		goto done;
	}
	fprintf(out.f, "camlheap diff: A = %s (rate %g), B = %s (rate %g)\n", o->a, d[0].rate, o->b, d[1].rate);
	fprintf(out.f,
		"test        per site, B against A given both runs' samples (binomial on the sample split, "
		"rates accounted for); flagged at a family-wise %g: |z| > %.2f for allocated bytes (%zu "
		"sites), > %.2f for live bytes (%zu sites)\n",
		o->alpha, za, m_alloc, zl, m_live);
	fprintf(out.f, "result      %zu site%s changed significantly\n\n", nsig, nsig == 1 ? "" : "s");
	fprintf(out.f, "%-12s %-12s %-9s %7s  %-12s %-12s %7s  %s\n", "alloc A", "alloc B", "change", "z",
		"live A", "live B", "z", "site");
	for (size_t i = 0; i < n && (int)i < o->top; i++) {
		struct row *r = v[i];
		char ch[32];

		if (r->s[0].bytes > 0)
			snprintf(ch, sizeof(ch), "%+.0f%%", 100.0 * (r->s[1].bytes - r->s[0].bytes) / r->s[0].bytes);
		else
			snprintf(ch, sizeof(ch), "%s", r->s[1].bytes > 0 ? "new" : "-");
		fprintf(out.f, "%-12s %-12s %-9s %7.2f%s", report_format_bytes(r->s[0].bytes, b1, sizeof(b1)),
			report_format_bytes(r->s[1].bytes, b2, sizeof(b2)), ch, r->z_alloc, r->sig_alloc ? "*" : " ");
		if (r->s[0].has_live && r->s[1].has_live)
			fprintf(out.f, " %-12s %-12s %7.2f%s", report_format_bytes(r->s[0].live_bytes, b1, sizeof(b1)),
				report_format_bytes(r->s[1].live_bytes, b3, sizeof(b3)), r->z_live, r->sig_live ? "*" : " ");
		else
			fprintf(out.f, " %-12s %-12s %7s ", "-", "-", "-");
		fprintf(out.f, " %s%s\n", r->label, r->sig_alloc || r->sig_live ? "  SIGNIFICANT" : "");
	}
	if (ferror(out.f)) {
		outfile_abort(&out);
		status = 1;
	} else {
		status = outfile_commit(&out) < 0 ? 1 : 0;
	}
done:
	if (v)
		for (size_t i = 0; i < n; i++) {
			g_free(v[i]->key);
			g_free(v[i]->label);
			g_free(v[i]);
		}
	free(v);
	g_hash_table_destroy(rows);
	for (int i = 0; i < 2; i++)
		if (d[i].parser)
			g_object_unref(d[i].parser);
	return status;
}
