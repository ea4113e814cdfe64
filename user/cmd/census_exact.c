/* census_exact.c -- `camlheap census -p PID --exact`: the whole major heap
 * of a running 4.x program walked at a consistent stop (heap/freeze.h,
 * heap/walk4.h), reported by tag, size class and custom type, against the
 * runtime's own counters.  Text, or JSON (schema "camlheap-exact-census",
 * docs/json.md). */
#define _GNU_SOURCE
#include "cmd/census_exact.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "heap/freeze.h"
#include "heap/trace4.h"
#include "heap/walk4.h"
#include "output/jsonw.h"
#include "output/outfile.h"
#include "target/modules.h"
#include "target/releases.h"
#include "target/target.h"

struct exact_run {
	struct walk4_census c;
	struct trace4_result *tr;  /* --retainers, else NULL */
	char defined_at[TRACE4_SHAPES][320]; /* a described closure's "FILE:LINE" (by tr->fields[].shape), or "" */
	double pause_s, wait_s;
	unsigned stops;
	size_t threads;
	const struct target *t;
};

/* runtime/caml/mlvalues.h's tags from No_scan_tag's neighbours up */
static const char *tag_name(unsigned tag)
{
	static const char *const names[] = { "Lazy", "Closure", "Object", "Infix", "Forward", "Abstract",
					     "String", "Double", "Double_array", "Custom" };

	return tag >= 246 ? names[tag - 246] : NULL;
}

static double mib(uint64_t words)
{
	return (double)words * 8.0 / 1048576.0;
}

static int cmp_tag_words(const void *a, const void *b, void *arg)
{
	const struct walk4_census *c = arg;
	uint64_t wa = c->by_tag[*(const unsigned *)a].words, wb = c->by_tag[*(const unsigned *)b].words;

	return wa < wb ? 1 : wa > wb ? -1 : 0;
}

static int cmp_custom_words(const void *a, const void *b)
{
	const struct walk4_custom *x = a, *y = b;

	return x->n.words < y->n.words ? 1 : x->n.words > y->n.words ? -1 : 0;
}

static const char *phase_name(int phase)
{
	static const char *const names[] = { "mark", "clean", "sweep", "idle" };

	return phase >= 0 && phase <= 3 ? names[phase] : "?";
}

static void size_bounds(unsigned k, uint64_t *lo, uint64_t *hi)
{
	*lo = k == 0 ? 1 : (1ull << (k - 1)) + 1;
	*hi = k + 1 == WALK4_SIZE_CLASSES ? 0 : 1ull << k;
}

static int cmp_group_retained(const void *a, const void *b)
{
	const struct trace4_group *x = *(const struct trace4_group *const *)a, *y = *(const struct trace4_group *const *)b;

	return x->retained.words < y->retained.words ? 1 : x->retained.words > y->retained.words ? -1 : 0;
}

/* The closures the fields' shapes name, given the source line of their
 * code (DWARF or the symbol: modules.h), the target running again. */
static void closures_located(struct target *t, struct exact_run *x)
{
	const struct trace4_result *r = x->tr;
	struct sym_frame fr[8];

	for (unsigned i = 0; i < r->nfields; i++) {
		const struct trace4_field *f = &r->fields[i];
		int k;

		if (!f->code || f->shape < 0)
			continue;
		/* + 1: the lookup takes a return address */
		if ((k = modules_lookup(&t->mods, f->code + 1, 0, fr, 8) - 1) < 0)
			continue;
		if (fr[k].file && (fr[k].start_line || fr[k].line))
			snprintf(x->defined_at[f->shape], sizeof(x->defined_at[0]), "%s:%d", fr[k].file,
				 fr[k].start_line ? fr[k].start_line : fr[k].line);
	}
}

/* The fields of group `gi` (an index into r->groups) that retain blocks,
 * those retaining the most first, into by (r->nfields entries); their
 * number. */
static unsigned group_fields(const struct trace4_result *r, unsigned gi, const struct trace4_field **by)
{
	unsigned n = 0;

	for (unsigned i = 0; i < r->nfields; i++)
		if (r->fields[i].group == gi && r->fields[i].retained.blocks)
			by[n++] = &r->fields[i];
	qsort(by, n, sizeof(*by), trace4_cmp_field_retained);
	return n;
}

static void field_name(const struct trace4_field *fl, char *buf, size_t len)
{
	if (fl->block)
		snprintf(buf, len, "field %u of global block %u", fl->field, fl->block);
	else
		snprintf(buf, len, "field %u", fl->field);
}

/* Under a module's group, the fields retaining the most (at most 3), of
 * those retaining 1 % of the reachable words or more. */
static void render_fields(FILE *f, const struct exact_run *x, const struct trace4_group *g,
			  const struct trace4_field **by)
{
	const struct trace4_result *r = x->tr;
	unsigned n = 100 * g->retained.words >= r->reachable.words ? group_fields(r, (unsigned)(g - r->groups), by) : 0;
	char name[64];

	for (unsigned i = 0; i < n && i < 3 && 100 * by[i]->retained.words >= r->reachable.words; i++) {
		int s = by[i]->shape;

		field_name(by[i], name, sizeof(name));
		fprintf(f, "      %-46.46s %12llu %9.1f %10llu %8s  %s%s%s\n", name,
			(unsigned long long)by[i]->retained.words, mib(by[i]->retained.words),
			(unsigned long long)by[i]->retained.blocks, "", s >= 0 ? r->shapes[s] : "",
			s >= 0 && x->defined_at[s][0] ? ", defined at " : "", s >= 0 ? x->defined_at[s] : "");
	}
}

/* What keeps the heap alive: the root groups by what they alone retain,
 * under a module's group the fields that retain the most alone. */
static void render_retainers(FILE *f, const struct exact_run *x, int top)
{
	const struct trace4_result *r = x->tr;
	const struct trace4_group *g[TRACE4_MAX_GROUPS];
	const struct trace4_field **by = malloc(r->nfields * sizeof(*by) + 1);
	uint64_t live = x->c.live_words, reach = r->reachable.words;
	unsigned n = 0, shown = 0;

	for (unsigned i = 0; i < r->ngroups; i++)
		if (r->groups[i].retained.blocks || r->groups[i].roots)
			g[n++] = &r->groups[i];
	qsort(g, n, sizeof(g[0]), cmp_group_retained);
	fprintf(f, "\nreachable from the roots: %llu words (%.1f MiB) in %llu blocks; not reachable: %llu words "
		   "(%.1f MiB), garbage the GC has not freed yet\n",
		(unsigned long long)reach, mib(reach), (unsigned long long)r->reachable.blocks,
		(unsigned long long)(live > reach ? live - reach : 0), mib(live > reach ? live - reach : 0));
	fprintf(f, "\nretained by root group (what the GC would free without that group's roots; ~ scanned "
		   "conservatively)\n  %-50s %12s %9s %10s %8s\n", "ROOT GROUP", "WORDS", "MiB", "BLOCKS", "ROOTS");
	for (unsigned i = 0; i < n && (!top || (int)shown < top); i++, shown++) {
		fprintf(f, "%s %-50.50s %12llu %9.1f %10llu %8llu\n", g[i]->conservative ? "~" : " ", g[i]->name,
			(unsigned long long)g[i]->retained.words, mib(g[i]->retained.words),
			(unsigned long long)g[i]->retained.blocks, (unsigned long long)g[i]->roots);
		if (by)
			render_fields(f, x, g[i], by);
	}
	free(by);
	if (n > shown) {
		uint64_t w = 0;

		for (unsigned i = shown; i < n; i++)
			w += g[i]->retained.words;
		fprintf(f, "  (%u more groups: %llu words, %.1f MiB)\n", n - shown, (unsigned long long)w, mib(w));
	}
	fprintf(f, "  %-50s %12llu %9.1f %10llu\n", "held by two groups or more", (unsigned long long)r->shared.words,
		mib(r->shared.words), (unsigned long long)r->shared.blocks);
	if (r->not_read[0])
		fprintf(f, "  not read: %s\n", r->not_read);
	if (r->shapes_skipped)
		fprintf(f, "  %u of the fields retaining the most not described: --max-pause came first\n",
			r->shapes_skipped);
	if (r->fields_over)
		fprintf(f, "  %llu module fields past the first %d counted for their module only, not each apart\n",
			(unsigned long long)r->fields_over, TRACE4_MAX_FIELDS);
	{
		/* a small heap: the line cache's floor (64 lines of 16 KiB) outweighs it */
		double share = r->index_bytes ? (double)x->c.heap_words * 8.0 / (double)r->index_bytes : 0.0;
		char how[48];

		if (share >= 2)
			snprintf(how, sizeof(how), "heap / %.0f", share);
		else
			snprintf(how, sizeof(how), "a fixed 1 MiB line cache at least");
		fprintf(f, "  trace %.1f ms, %.1f MiB of camlheap's memory (%s)%s\n", r->trace_s * 1e3,
			(double)r->index_bytes / 1048576.0, how, r->rescans ? ", with rescans" : "");
	}
}

static void render_text(FILE *f, const struct exact_run *x, int top)
{
	const struct walk4_census *c = &x->c;
	unsigned order[256], n = 0;
	bool equal = c->heap_words == c->rt_heap_wsz && c->heap_chunks == c->rt_heap_chunks &&
		     c->live_words + c->free_words + c->fragments == c->heap_words;

	fprintf(f, "camlheap census --exact: PID %d (%s, OCaml %s)\n", (int)x->t->pid, x->t->exe, x->t->rt.version);
	fprintf(f, "paused %.1f ms, %zu thread%s stopped", x->pause_s * 1e3, x->threads, x->threads == 1 ? "" : "s");
	if (x->stops > 1)
		fprintf(f, " at the %u%s try (%.3f s: the earlier stops found a thread in the GC or allocator)",
			x->stops, x->stops == 2 ? "nd" : x->stops == 3 ? "rd" : "th", x->wait_s);
	fprintf(f, "; %.1f MiB read\n", (double)c->bytes_read / 1048576.0);
	fprintf(f, "\nmajor heap: %llu words (%.1f MiB) in %llu chunk%s, GC phase %s\n",
		(unsigned long long)c->heap_words, mib(c->heap_words), (unsigned long long)c->heap_chunks,
		c->heap_chunks == 1 ? "" : "s", phase_name(c->gc_phase));
	fprintf(f, "  live       %12llu words %9.1f MiB %10llu blocks  (as Gc.stat: not yet freed, unreachable "
		   "blocks included)\n",
		(unsigned long long)c->live_words, mib(c->live_words), (unsigned long long)c->live_blocks);
	fprintf(f, "  free       %12llu words %9.1f MiB %10llu blocks  (largest %llu words)\n",
		(unsigned long long)c->free_words, mib(c->free_words), (unsigned long long)c->free_blocks,
		(unsigned long long)c->largest_free);
	fprintf(f, "  fragments  %12llu words\n", (unsigned long long)c->fragments);
	fprintf(f, "  the runtime's own count: %llu words in %llu chunk%s: %s\n", (unsigned long long)c->rt_heap_wsz,
		(unsigned long long)c->rt_heap_chunks, c->rt_heap_chunks == 1 ? "" : "s", equal ? "equal" : "DIFFERENT (the walk is not exact)");
	fprintf(f, "minor heap: %llu words allocated (not walked: its blocks are counted when promoted)\n",
		(unsigned long long)c->minor_words);

	if (x->tr)
		render_retainers(f, x, top);
	for (unsigned t = 0; t < 256; t++)
		if (c->by_tag[t].blocks)
			order[n++] = t;
	qsort_r(order, n, sizeof(order[0]), cmp_tag_words, (void *)c);
	fprintf(f, "\nlive by tag%s\n  %-22s %12s %12s %9s %6s%s\n", top && (int)n > top ? " (largest first)" : "",
		"TAG", "BLOCKS", "WORDS", "MiB", "%", x->tr ? "    REACHABLE WORDS" : "");
	for (unsigned i = 0; i < n && (!top || (int)i < top); i++) {
		unsigned t = order[i];
		char name[40];

		if (tag_name(t))
			snprintf(name, sizeof(name), "%u %s", t, tag_name(t));
		else
			snprintf(name, sizeof(name), "%u (block)", t);
		fprintf(f, "  %-22s %12llu %12llu %9.1f %5.1f%%", name, (unsigned long long)c->by_tag[t].blocks,
			(unsigned long long)c->by_tag[t].words, mib(c->by_tag[t].words),
			c->live_words ? 100.0 * (double)c->by_tag[t].words / (double)c->live_words : 0.0);
		if (x->tr)
			fprintf(f, " %18llu", (unsigned long long)x->tr->reach_by_tag[t].words);
		fputc('\n', f);
	}
	fprintf(f, "\nlive by size (words with the header)\n  %-22s %12s %12s %9s %6s\n", "SIZE", "BLOCKS", "WORDS",
		"MiB", "%");
	for (unsigned k = 0; k < WALK4_SIZE_CLASSES; k++) {
		uint64_t lo, hi;
		char name[40];

		if (!c->by_size[k].blocks)
			continue;
		size_bounds(k, &lo, &hi);
		if (!hi)
			snprintf(name, sizeof(name), "%llu and more", (unsigned long long)lo);
		else if (lo == hi)
			snprintf(name, sizeof(name), "%llu", (unsigned long long)lo);
		else
			snprintf(name, sizeof(name), "%llu-%llu", (unsigned long long)lo, (unsigned long long)hi);
		fprintf(f, "  %-22s %12llu %12llu %9.1f %5.1f%%\n", name, (unsigned long long)c->by_size[k].blocks,
			(unsigned long long)c->by_size[k].words, mib(c->by_size[k].words),
			c->live_words ? 100.0 * (double)c->by_size[k].words / (double)c->live_words : 0.0);
	}
	if (c->ncustom) {
		struct walk4_custom cu[WALK4_MAX_CUSTOM];

		memcpy(cu, c->custom, c->ncustom * sizeof(cu[0]));
		qsort(cu, c->ncustom, sizeof(cu[0]), cmp_custom_words);
		fprintf(f, "\nlive custom blocks by type (their out-of-heap data not counted)\n  %-22s %12s %12s %9s\n",
			"IDENTIFIER", "BLOCKS", "WORDS", "MiB");
		for (unsigned i = 0; i < c->ncustom; i++)
			fprintf(f, "  %-22s %12llu %12llu %9.1f\n", cu[i].identifier, (unsigned long long)cu[i].n.blocks,
				(unsigned long long)cu[i].n.words, mib(cu[i].n.words));
		if (c->custom_other_blocks)
			fprintf(f, "  (%llu blocks of further types)\n", (unsigned long long)c->custom_other_blocks);
	}
}

static void json_count(JsonBuilder *jb, const struct walk4_count *n)
{
	json_member_int(jb, "blocks", (int64_t)n->blocks);
	json_member_int(jb, "words", (int64_t)n->words);
}

/* "name": {"blocks": .., "words": ..} */
static void json_count_member(JsonBuilder *jb, const char *name, const struct walk4_count *n)
{
	json_builder_set_member_name(jb, name);
	json_builder_begin_object(jb);
	json_count(jb, n);
	json_builder_end_object(jb);
}

/* A module group's fields retaining blocks alone, the most first. */
/* Fields by their group, then those retaining the most first. */
static int cmp_group_field(const void *a, const void *b)
{
	const struct trace4_field *x = *(const struct trace4_field *const *)a, *y = *(const struct trace4_field *const *)b;

	return x->group != y->group ? (x->group < y->group ? -1 : 1) : trace4_cmp_field_retained(a, b);
}

/* "fields" of a group: by[0..n), its fields that retain blocks. */
static void json_fields(JsonBuilder *jb, const struct exact_run *x, const struct trace4_field *const *by, unsigned n)
{
	const struct trace4_result *r = x->tr;

	if (!n)
		return;
	json_builder_set_member_name(jb, "fields");
	json_builder_begin_array(jb);
	for (unsigned i = 0; i < n; i++) {
		int s = by[i]->shape;

		json_builder_begin_object(jb);
		json_member_int(jb, "block", by[i]->block);
		json_member_int(jb, "field", by[i]->field);
		json_member_str(jb, "shape", s >= 0 ? r->shapes[s] : NULL);
		json_member_str(jb, "defined_at", s >= 0 && x->defined_at[s][0] ? x->defined_at[s] : NULL);
		json_count_member(jb, "retained", &by[i]->retained);
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
}

static void json_retainers(JsonBuilder *jb, const struct exact_run *x)
{
	const struct trace4_result *r = x->tr;
	const struct trace4_field **by = malloc(r->nfields * sizeof(*by) + 1);
	unsigned nby = 0, at = 0;

	/* every group's fields, sorted once */
	for (unsigned i = 0; by && i < r->nfields; i++)
		if (r->fields[i].retained.blocks)
			by[nby++] = &r->fields[i];
	if (by)
		qsort(by, nby, sizeof(*by), cmp_group_field);

	json_builder_set_member_name(jb, "retainers");
	json_builder_begin_object(jb);
	json_count_member(jb, "reachable", &r->reachable);
	json_count_member(jb, "shared", &r->shared);
	json_builder_set_member_name(jb, "groups");
	json_builder_begin_array(jb);
	for (unsigned i = 0; i < r->ngroups; i++) {
		unsigned from = at;

		while (at < nby && by[at]->group == i)
			at++;
		json_builder_begin_object(jb);
		json_member_str(jb, "name", r->groups[i].name);
		json_builder_set_member_name(jb, "conservative");
		json_builder_add_boolean_value(jb, r->groups[i].conservative);
		json_member_int(jb, "roots", (int64_t)r->groups[i].roots);
		json_count_member(jb, "retained", &r->groups[i].retained);
		json_fields(jb, x, by + from, at - from);
		json_builder_end_object(jb);
	}
	free(by);
	json_builder_end_array(jb);
	json_member_int(jb, "fields_over_limit", (int64_t)r->fields_over);
	json_member_int(jb, "shapes_skipped", (int64_t)r->shapes_skipped);
	json_member_int(jb, "static_blocks", (int64_t)r->static_blocks);
	json_member_int(jb, "rescans", (int64_t)r->rescans);
	json_member_int(jb, "sweeps", (int64_t)r->sweeps);
	json_member_int(jb, "line_reads", (int64_t)r->line_reads);
	json_member_int(jb, "bytes_read", (int64_t)r->bytes_read);
	json_member_str(jb, "not_read", r->not_read[0] ? r->not_read : NULL);
	json_member_double(jb, "trace_s", r->trace_s);
	json_member_int(jb, "memory_bytes", (int64_t)r->index_bytes);
	json_builder_end_object(jb);
}

static int render_json(FILE *f, const struct exact_run *x)
{
	const struct walk4_census *c = &x->c;
	JsonBuilder *jb = json_builder_new();
	JsonGenerator *gen = json_generator_new();
	JsonNode *root;
	gchar *text;
	int ret = 0;

	json_builder_begin_object(jb);
	json_member_str(jb, "schema", "camlheap-exact-census");
	json_member_int(jb, "version", 1);
	json_member_int(jb, "pid", x->t->pid);
	json_member_str(jb, "executable", x->t->exe);
	json_member_str(jb, "ocaml", x->t->rt.version);
	json_member_double(jb, "pause_s", x->pause_s);
	json_member_double(jb, "walk_s", c->walk_s);
	json_member_double(jb, "wait_s", x->wait_s);
	json_member_int(jb, "stops", x->stops);
	json_member_int(jb, "threads", (int64_t)x->threads);
	json_member_int(jb, "bytes_read", (int64_t)c->bytes_read);
	json_member_str(jb, "gc_phase", phase_name(c->gc_phase));
	json_builder_set_member_name(jb, "major_heap");
	json_builder_begin_object(jb);
	json_member_int(jb, "heap_words", (int64_t)c->heap_words);
	json_member_int(jb, "heap_chunks", (int64_t)c->heap_chunks);
	json_member_int(jb, "live_words", (int64_t)c->live_words);
	json_member_int(jb, "live_blocks", (int64_t)c->live_blocks);
	json_member_int(jb, "free_words", (int64_t)c->free_words);
	json_member_int(jb, "free_blocks", (int64_t)c->free_blocks);
	json_member_int(jb, "largest_free", (int64_t)c->largest_free);
	json_member_int(jb, "fragments", (int64_t)c->fragments);
	json_member_int(jb, "runtime_heap_words", (int64_t)c->rt_heap_wsz);
	json_member_int(jb, "runtime_heap_chunks", (int64_t)c->rt_heap_chunks);
	json_builder_end_object(jb);
	json_member_int(jb, "minor_words", (int64_t)c->minor_words);
	json_builder_set_member_name(jb, "by_tag");
	json_builder_begin_array(jb);
	for (unsigned t = 0; t < 256; t++)
		if (c->by_tag[t].blocks) {
			json_builder_begin_object(jb);
			json_member_int(jb, "tag", t);
			json_member_str(jb, "name", tag_name(t));
			json_count(jb, &c->by_tag[t]);
			if (x->tr) {
				json_member_int(jb, "reachable_blocks", (int64_t)x->tr->reach_by_tag[t].blocks);
				json_member_int(jb, "reachable_words", (int64_t)x->tr->reach_by_tag[t].words);
			}
			json_builder_end_object(jb);
		}
	json_builder_end_array(jb);
	json_builder_set_member_name(jb, "by_size");
	json_builder_begin_array(jb);
	for (unsigned k = 0; k < WALK4_SIZE_CLASSES; k++)
		if (c->by_size[k].blocks) {
			uint64_t lo, hi;

			size_bounds(k, &lo, &hi);
			json_builder_begin_object(jb);
			json_member_int(jb, "min_words", (int64_t)lo);
			json_builder_set_member_name(jb, "max_words");
			if (hi)
				json_builder_add_int_value(jb, (int64_t)hi);
			else
				json_builder_add_null_value(jb);
			json_count(jb, &c->by_size[k]);
			json_builder_end_object(jb);
		}
	json_builder_end_array(jb);
	json_builder_set_member_name(jb, "custom");
	json_builder_begin_array(jb);
	for (unsigned i = 0; i < c->ncustom; i++) {
		json_builder_begin_object(jb);
		json_member_str(jb, "identifier", c->custom[i].identifier);
		json_count(jb, &c->custom[i].n);
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
	json_member_int(jb, "custom_other_blocks", (int64_t)c->custom_other_blocks);
	if (x->tr)
		json_retainers(jb, x);
	json_builder_end_object(jb);
	root = json_builder_get_root(jb);
	json_generator_set_root(gen, root);
	text = json_generator_to_data(gen, NULL);
	if (fprintf(f, "%s\n", text) < 0)
		ret = -EIO;
	g_free(text);
	json_node_unref(root);
	g_object_unref(gen);
	g_object_unref(jb);
	return ret;
}

static int write_output(const struct census_exact_opts *o, const struct exact_run *x)
{
	struct outfile out;
	int ret = outfile_open(&out, o->output);

	if (ret < 0)
		return ret;
	if (o->json)
		ret = render_json(out.f, x);
	else
		render_text(out.f, x, o->top);
	if (ret < 0 || ferror(out.f)) {
		outfile_abort(&out);
		return ret < 0 ? ret : -EIO;
	}
	return outfile_commit(&out);
}

/* The walk, and with --retainers the trace, while the target is stopped:
 * both within max_pause_s of the stop. */
static int exact_walk(const struct census_exact_opts *o, const struct target *t, const struct heap_freeze *fz,
		      struct exact_run *x, char *msg, size_t len)
{
	double deadline = fz->stopped_at + o->max_pause_s;
	struct heap_index hx = { 0 };
	int ret;

	bool minor = true; /* Caml_state's young_ptr is exact when no thread runs OCaml code */

	if (!o->retainers)
		return walk4_census(t, deadline, NULL, false, &x->c, msg, len);
	x->tr = calloc(1, sizeof(*x->tr));
	if (!x->tr)
		return -ENOMEM;
	for (size_t i = 0; i < fz->ntids; i++)
		minor &= fz->first_ra[i] != FREEZE_IN_OCAML;
	ret = walk4_census(t, deadline, &hx, minor, &x->c, msg, len);
	if (!ret)
		ret = trace4_run(t, fz, &hx, deadline, x->tr, NULL, 0, msg, len);
	hx_free(&hx);
	return ret;
}

int census_exact_run(const struct census_exact_opts *o)
{
	struct target t = { .pid = o->pid, .exe_fd = -1 };
	struct heap_freeze fz;
	struct exact_run x = { .t = &t };
	char msg[1024];
	const char *hold = getenv("CAMLHEAP_TEST_HOLD_MS");
	sigset_t old_mask;
	int ret;

	ret = outfile_check(o->output, msg, sizeof(msg));
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s\n", msg);
		return 2;
	}
	ret = target_inspect(&t, msg, sizeof(msg));
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s\n", msg);
		return 2;
	}
	if (t.rt.major != 4 || !t.rt.release_known) {
		fprintf(stderr,
			"camlheap: --exact walks the heaps of OCaml 4.12, 4.13 and 4.14; PID %d runs OCaml %s, whose "
			"heap layout it does not read yet: use `camlheap census -p %d` (sampled)\n",
			(int)o->pid, t.rt.version, (int)o->pid);
		target_release(&t);
		return 2;
	}
	heap_freeze_hold_job_stops(&old_mask);
	ret = heap_freeze_stop(&fz, o->pid, t.img, t.bias, o->max_wait_s, msg, sizeof(msg));
	if (ret < 0) {
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		fprintf(stderr, "camlheap: %s\n", msg);
		target_release(&t);
		return 2;
	}
	x.stops = fz.attempts;
	x.wait_s = fz.wait_s;
	x.threads = fz.ntids;
	if (hold) /* tests: a long stop, to kill camlheap during it */
		usleep((useconds_t)atoi(hold) * 1000);
	ret = exact_walk(o, &t, &fz, &x, msg, sizeof(msg));
	x.pause_s = heap_freeze_release(&fz);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (ret == -ETIME && x.c.complete)
		fprintf(stderr,
			"camlheap: the trace from the roots passed --max-pause %.3g s (the walk of the %.1f MiB heap "
			"took %.3f s) and was stopped there: PID %d runs on; nothing written (give a larger "
			"--max-pause; README: the trace's cost)\n",
			o->max_pause_s, mib(x.c.heap_words), x.c.walk_s, (int)o->pid);
	else if (ret == -ETIME)
		fprintf(stderr,
			"camlheap: the walk passed --max-pause %.3g s after %llu of %llu chunks (%.1f of %.1f MiB) and "
			"was stopped there: PID %d runs on; nothing written (give a larger --max-pause)\n",
			o->max_pause_s, (unsigned long long)x.c.heap_chunks, (unsigned long long)x.c.rt_heap_chunks,
			mib(x.c.heap_words), mib(x.c.rt_heap_wsz), (int)o->pid);
	if (ret == -ETIME) {
		free(x.tr);
		target_release(&t);
		return 1;
	}
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s; PID %d runs on, nothing written\n", msg, (int)o->pid);
		free(x.tr);
		target_release(&t);
		return 1;
	}
	if (x.tr)
		closures_located(&t, &x);
	ret = write_output(o, &x);
	if (ret < 0)
		fprintf(stderr, "camlheap: cannot write %s: %s\n", o->output ? o->output : "stdout", strerror(-ret));
	else if (!o->quiet)
		fprintf(stderr, "camlheap: PID %d paused %.1f ms for the walk%s of %.1f MiB\n", (int)o->pid,
			x.pause_s * 1e3, x.tr ? " and the trace" : "", mib(x.c.heap_words));
	free(x.tr);
	target_release(&t);
	return ret < 0 ? 1 : 0;
}
