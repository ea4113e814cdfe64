/* diff.c -- see diff.h. */
#define _GNU_SOURCE
#include "output/diff.h"
#include "output/recording.h"
#include "output/report.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "output/outfile.h"
#include "output/report.h"

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
	bool census;        /* live figures present: a site absent from it has 0 live */
};

static bool is_int(JsonObject *o, const char *name, bool nonneg)
{
	JsonNode *n = o ? json_object_get_member(o, name) : NULL;

	return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64 &&
	       (!nonneg || json_node_get_int(n) >= 0);
}

static bool is_str_or_null(JsonObject *o, const char *name)
{
	JsonNode *n = o ? json_object_get_member(o, name) : NULL;

	return !n || JSON_NODE_HOLDS_NULL(n) ||
	       (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING);
}

/* The parts of docs/json.md diff relies on, checked before any is read
 * (json-glib's getters assert on a wrong type). */
static const char *check_doc(JsonObject *root)
{
	JsonNode *n;
	JsonArray *sites, *stacks = NULL, *frames = NULL;
	guint nstacks = 0, nframes = 0;
	static char why[160];

	n = json_object_get_member(root, "run");
	if (!n || !JSON_NODE_HOLDS_OBJECT(n))
		return "no \"run\" object";
	n = json_object_get_member(json_node_get_object(n), "rate");
	if (!n || !JSON_NODE_HOLDS_VALUE(n) ||
	    (json_node_get_value_type(n) != G_TYPE_DOUBLE && json_node_get_value_type(n) != G_TYPE_INT64))
		return "no numeric run.rate";
	n = json_object_get_member(root, "sites");
	if (!n || !JSON_NODE_HOLDS_ARRAY(n))
		return "no \"sites\" array";
	sites = json_node_get_array(n);
	n = json_object_get_member(root, "stacks");
	if (n && !JSON_NODE_HOLDS_ARRAY(n))
		return "\"stacks\" is not an array";
	if (n) {
		stacks = json_node_get_array(n);
		nstacks = json_array_get_length(stacks);
	}
	n = json_object_get_member(root, "frames");
	if (n && !JSON_NODE_HOLDS_ARRAY(n))
		return "\"frames\" is not an array";
	if (n) {
		frames = json_node_get_array(n);
		nframes = json_array_get_length(frames);
	}
	for (guint j = 0; j < nframes; j++) {
		JsonNode *f = json_array_get_element(frames, j);

		if (!JSON_NODE_HOLDS_OBJECT(f) || !is_str_or_null(json_node_get_object(f), "function") ||
		    !is_str_or_null(json_node_get_object(f), "file") ||
		    (json_object_has_member(json_node_get_object(f), "line") &&
		     !is_int(json_node_get_object(f), "line", true))) {
			snprintf(why, sizeof(why), "frame %u is malformed", j);
			return why;
		}
	}
	n = json_object_get_member(root, "census");
	if (n && !JSON_NODE_HOLDS_NULL(n) && !JSON_NODE_HOLDS_OBJECT(n))
		return "\"census\" is neither null nor an object";
	for (guint i = 0; i < nstacks; i++) {
		JsonNode *sn = json_array_get_element(stacks, i);
		JsonNode *fr = JSON_NODE_HOLDS_OBJECT(sn) ? json_object_get_member(json_node_get_object(sn), "frames") : NULL;

		if (!fr || !JSON_NODE_HOLDS_ARRAY(fr)) {
			snprintf(why, sizeof(why), "stack %u has no frames array", i);
			return why;
		}
		for (guint j = 0; j < json_array_get_length(json_node_get_array(fr)); j++) {
			JsonNode *f = json_array_get_element(json_node_get_array(fr), j);

			if (!JSON_NODE_HOLDS_VALUE(f) || json_node_get_value_type(f) != G_TYPE_INT64 ||
			    json_node_get_int(f) < 0 || json_node_get_int(f) >= (gint64)nframes) {
				snprintf(why, sizeof(why), "stack %u frame %u is not an index into frames", i, j);
				return why;
			}
		}
	}
	for (guint i = 0; i < json_array_get_length(sites); i++) {
		JsonNode *sn = json_array_get_element(sites, i);
		JsonObject *s = JSON_NODE_HOLDS_OBJECT(sn) ? json_node_get_object(sn) : NULL;
		JsonNode *st = s ? json_object_get_member(s, "stack") : NULL;
		JsonNode *al = s ? json_object_get_member(s, "allocation") : NULL;
		JsonNode *lv = s ? json_object_get_member(s, "live") : NULL;

		if (!s || !is_int(s, "samples", true) || !is_str_or_null(s, "kind") ||
		    (st && !JSON_NODE_HOLDS_NULL(st) &&
		     !(is_int(s, "stack", true) && json_node_get_int(st) < (gint64)nstacks)) ||
		    (al && (!JSON_NODE_HOLDS_OBJECT(al) || !is_str_or_null(json_node_get_object(al), "function") ||
			    !is_str_or_null(json_node_get_object(al), "file") ||
			    (json_object_has_member(json_node_get_object(al), "line") &&
			     !is_int(json_node_get_object(al), "line", true)))) ||
		    (lv && (!JSON_NODE_HOLDS_OBJECT(lv) || !is_int(json_node_get_object(lv), "samples", true)))) {
			snprintf(why, sizeof(why), "site %u is malformed (samples, stack, allocation or live)", i);
			return why;
		}
	}
	return NULL;
}

double diff_site_z(double k1, double l1, double k2, double l2)
{
	double n = k1 + k2, p = l1 / (l1 + l2);

	if (n <= 0 || p <= 0 || p >= 1)
		return 0.0;
	return (k1 - n * p) / sqrt(n * p * (1 - p));
}

/* Does the file start as a memtrace trace (its first packet's magic)? */
static bool is_trace(const char *path)
{
	unsigned char m[4];
	FILE *f = fopen(path, "rb");
	bool yes = f && fread(m, 1, 4, f) == 4 && m[0] == 0xc1 && m[1] == 0x1f && m[2] == 0xfc && m[3] == 0xc1;

	if (f)
		fclose(f);
	return yes;
}

static int load(const char *path, struct doc *d, int by_stack)
{
	GError *err = NULL;
	JsonNode *root;

	d->parser = json_parser_new();
	if (is_trace(path)) {
		/* a recording (memtrace trace): its JSON rendering */
		struct recording_loaded rl;
		char msg[1024], *buf = NULL;
		size_t len = 0;
		FILE *mem;
		int ret = recording_load(path, NULL, &rl, msg, sizeof(msg));

		if (ret < 0) {
			fprintf(stderr, "camlheap: %s\n", msg);
			return -1;
		}
		if (rl.meta.census_on)
			profile_census_compute(rl.prof);
		rl.meta.json_no_stacks = !by_stack; /* matched by allocation position: stacks are not read */
		mem = open_memstream(&buf, &len);
		ret = mem ? report_write_json(mem, rl.prof, &rl.meta, &rl.mods) : -ENOMEM;
		if (mem)
			fclose(mem);
		recording_loaded_free(&rl);
		if (ret < 0 || !json_parser_load_from_data(d->parser, buf, (gssize)len, &err)) {
			fprintf(stderr, "camlheap: cannot render %s: %s\n", path, err ? err->message : strerror(-ret));
			g_clear_error(&err);
			free(buf);
			return -1;
		}
		free(buf);
	} else if (!json_parser_load_from_file(d->parser, path, &err)) {
		if (err && err->domain == G_FILE_ERROR)
			fprintf(stderr, "camlheap: cannot read %s: %s\n", path, err->message);
		else
			fprintf(stderr,
				"camlheap: %s is not a camlheap recording: neither a recording file (record -o FILE) nor "
				"its JSON (%s)\n",
				path, err ? err->message : "unreadable");
		g_clear_error(&err);
		return -1;
	}
	root = json_parser_get_root(d->parser);
	if (!root || !JSON_NODE_HOLDS_OBJECT(root) ||
	    g_strcmp0(json_object_get_string_member_with_default(json_node_get_object(root), "format", ""),
		      "camlheap-report") ||
	    json_object_get_int_member_with_default(json_node_get_object(root), "version", 0) != 2) {
		fprintf(stderr,
			"camlheap: %s is not a camlheap recording (write one with camlheap record -o FILE, "
			"or its JSON with --format json)\n",
			path);
		return -1;
	}
	d->root = json_node_get_object(root);
	{
		const char *why = check_doc(d->root);

		if (why) {
			fprintf(stderr, "camlheap: %s is not a valid camlheap recording: %s\n", path, why);
			return -1;
		}
	}
	d->rate = json_node_get_double(json_object_get_member(json_object_get_object_member(d->root, "run"), "rate"));
	d->census = json_object_has_member(d->root, "census") &&
		    JSON_NODE_HOLDS_OBJECT(json_object_get_member(d->root, "census"));
	if (!(d->rate > 0 && d->rate <= 1)) {
		fprintf(stderr, "camlheap: %s has no valid run.rate\n", path);
		return -1;
	}
	return 0;
}

/* The key of a site: kind, allocation position, then every frame's
 * function, file and line (addresses differ between runs; source does not). */
static char *site_key(JsonObject *site, JsonArray *stacks, JsonArray *frame_table, char **label, int by_stack)
{
	GString *k = g_string_new(json_object_get_string_member_with_default(site, "kind", "?"));
	JsonObject *alloc = json_object_get_object_member(site, "allocation");
	const char *fn = alloc ? json_object_get_string_member_with_default(alloc, "function", "?") : "?";
	JsonNode *fnode = alloc ? json_object_get_member(alloc, "file") : NULL;
	const char *file = fnode && JSON_NODE_HOLDS_VALUE(fnode) ? json_node_get_string(fnode) : NULL;
	int64_t line = alloc ? json_object_get_int_member_with_default(alloc, "line", 0) : 0;
	JsonNode *st = json_object_get_member(site, "stack");

	const char *libc_fn = NULL;
	JsonObject *caller = json_object_has_member(site, "caller") ? json_object_get_object_member(site, "caller")
								    : NULL;

	/* --malloc: the allocation position is the libc function; the site's
	 * position is the OCaml code that called into C */
	if (caller) {
		JsonNode *cf = json_object_get_member(caller, "file");

		libc_fn = fn;
		fn = json_object_get_string_member_with_default(caller, "function", "?");
		file = cf && JSON_NODE_HOLDS_VALUE(cf) ? json_node_get_string(cf) : NULL;
		line = json_object_get_int_member_with_default(caller, "line", 0);
	}
	g_string_append_printf(k, "|%s|%s|%s|%" G_GINT64_FORMAT, libc_fn ? libc_fn : "", fn, file ? file : "", line);
	if (!libc_fn && file && !strcmp(file, "libc") && json_object_has_member(site, "outside_ocaml") &&
	    json_object_get_boolean_member(site, "outside_ocaml")) {
		g_string_append(k, "|outside");
		*label = g_strdup_printf("%-9s %s (no OCaml stack: a thread not running OCaml)",
					 json_object_get_string_member_with_default(site, "kind", "?"), fn);
	} else if (libc_fn)
		*label = g_strdup_printf("%-9s %s <- %s (%s:%" G_GINT64_FORMAT ")",
					 json_object_get_string_member_with_default(site, "kind", "?"), libc_fn, fn,
					 file ? file : "?", line);
	else
		*label = g_strdup_printf("%-9s %s (%s:%" G_GINT64_FORMAT ")",
					 json_object_get_string_member_with_default(site, "kind", "?"), fn,
					 file ? file : "?", line);
	if (by_stack && st && JSON_NODE_HOLDS_VALUE(st)) {
		char *l2;

		/* the stack distinguishes rows that print alike: show its id */
		if (stacks && json_node_get_int(st) < json_array_get_length(stacks)) {
			l2 = g_strdup_printf("%s [stack %s]", *label,
					     json_object_get_string_member_with_default(
						     json_array_get_object_element(stacks, (guint)json_node_get_int(st)),
						     "id", "?"));
			g_free(*label);
			*label = l2;
		}
		int64_t ix = json_node_get_int(st);

		if (stacks && frame_table && ix >= 0 && (guint)ix < json_array_get_length(stacks)) {
			JsonArray *frames =
				json_object_get_array_member(json_array_get_object_element(stacks, (guint)ix), "frames");

			for (guint i = 0; frames && i < json_array_get_length(frames); i++) {
				JsonObject *f = json_array_get_object_element(
					frame_table, (guint)json_array_get_int_element(frames, i));
				JsonNode *fl = json_object_get_member(f, "file");

				g_string_append_printf(k, ";%s|%s|%" G_GINT64_FORMAT,
						       json_object_get_string_member_with_default(f, "function", "?"),
						       fl && JSON_NODE_HOLDS_VALUE(fl) ? json_node_get_string(fl) : "",
						       json_object_get_int_member_with_default(f, "line", 0));
			}
		}
	} else if (by_stack) {
		g_string_append(k, ";[stack frames lost]");
		{
			char *l2 = g_strdup_printf("%s [stack frames lost]", *label);

			g_free(*label);
			*label = l2;
		}
	}
	return g_string_free(k, FALSE);
}

static void add_sites(struct doc *d, int which, GHashTable *rows, int by_stack)
{
	JsonArray *sites = json_object_get_array_member(d->root, "sites");
	JsonArray *stacks = json_object_has_member(d->root, "stacks") ? json_object_get_array_member(d->root, "stacks") : NULL;
	JsonArray *frame_table =
		json_object_has_member(d->root, "frames") ? json_object_get_array_member(d->root, "frames") : NULL;

	for (guint i = 0; sites && i < json_array_get_length(sites); i++) {
		JsonObject *s = json_array_get_object_element(sites, i);
		char *label;
		char *key = site_key(s, stacks, frame_table, &label, by_stack);
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
		/* sites with one key in one run add up (as in the text report) */
		r->s[which].present = true;
		r->s[which].samples += (double)json_object_get_int_member_with_default(s, "samples", 0);
		if (live)
			r->s[which].live += (double)json_object_get_int_member_with_default(live, "samples", 0);
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

	if (load(o->a, &d[0], o->by_stack) < 0 || load(o->b, &d[1], o->by_stack) < 0)
		goto done;
	add_sites(&d[0], 0, rows, o->by_stack);
	add_sites(&d[1], 1, rows, o->by_stack);
	v = calloc(g_hash_table_size(rows) + 1, sizeof(*v));
	if (!v)
		goto done;
	g_hash_table_iter_init(&it, rows);
	while (g_hash_table_iter_next(&it, &k, &val)) {
		struct row *r = val;

		for (int i = 0; i < 2; i++) {
			/* a run with a census has 0 live at a site it lacks */
			r->s[i].has_live = d[i].census;
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
	{
		JsonObject *r0 = json_object_get_object_member(d[0].root, "run");
		JsonObject *r1 = json_object_get_object_member(d[1].root, "run");
		const char *e0 = json_object_get_string_member_with_default(r0, "executable", NULL);
		const char *e1 = json_object_get_string_member_with_default(r1, "executable", NULL);

		if (e0 && e1 && strcmp(e0, e1))
			fprintf(out.f, "note        A and B profile different executables (%s, %s): sites match by "
				       "source position only\n", e0, e1);
	}
	fprintf(out.f,
		"test        per site, B against A given both runs' samples (binomial on the sample split, "
		"rates accounted for); flagged at a family-wise %g: |z| > %.2f for allocated bytes (%zu "
		"sites), > %.2f for live bytes (%zu sites)\n",
		o->alpha, za, m_alloc, zl, m_live);
	fprintf(out.f, "result      %zu site%s changed significantly\n\n", nsig, nsig == 1 ? "" : "s");
	fprintf(out.f, "%-12s %-12s %-9s %7s  %-12s %-12s %7s  %s\n", "alloc A", "alloc B", "change", "z",
		"live A", "live B", "z", "site");
	for (size_t i = 0; i < n && (o->top <= 0 || (int)i < o->top); i++) {
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
	{
		int e = ferror(out.f) ? (errno ? errno : EIO) : 0;

		if (e) {
			outfile_abort(&out);
		} else {
			int r = outfile_commit(&out);

			e = r < 0 ? -r : 0;
		}
		if (e)
			fprintf(stderr, "camlheap: cannot write the diff to %s: %s\n", o->output ? o->output : "stdout",
				strerror(e));
		status = e ? 1 : 0;
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
