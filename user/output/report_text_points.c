/* report_text_points.c -- the part of the text and census reports that
 * ranks allocation points (report_internal.h report_text_points): a table
 * of the top points, a table of functions (flat and cum., as pprof -top),
 * then each point in detail with its heaviest callstacks. */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <string.h>

/* Callstacks printed under each point in detail. */
#define STACKS_PER_POINT 3

static const char *value_name(int by)
{
	return by == REPORT_VALUE_LIVE ? "estimated bytes alive at the end"
	       : by == REPORT_VALUE_PEAK ? "peak estimated live bytes (a point's: at most the sum of its callstacks' own "
					   "peaks, reached at different times)"
					 : "estimated bytes allocated";
}

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* "112 MiB [106 MiB .. 118 MiB]" for `samples`. */
static const char *with_ci(const struct profile *p, uint64_t samples, char *buf, size_t len)
{
	char b1[32], b2[32], b3[32];
	double lo, hi;

	profile_poisson_ci95(samples, &lo, &hi);
	snprintf(buf, len, "%s [%s .. %s]", report_format_bytes(report_est_bytes(p, samples), b1, sizeof(b1)),
		 report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)),
		 report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)));
	return buf;
}

const char *report_point_name(const struct profile *p, const struct point_group *pg, char *buf, size_t len)
{
	const struct profile_site *s = pg->sum.site;
	size_t n;

	if (pg->file && pg->line)
		snprintf(buf, len, "%s (%s:%d)", pg->function, pg->file, pg->line);
	else if (pg->file)
		snprintf(buf, len, "%s (%s)", pg->function, pg->file);
	else
		snprintf(buf, len, "%s", pg->function);
	n = strlen(buf);
	if (pg->via) {
		snprintf(buf + n, len - n, " -> %s", pg->via);
		n = strlen(buf);
	}
	if (s->kind == CH_KIND_CUSTOM && profile_custom_name(p, s->subtype))
		snprintf(buf + n, len - n, "  custom \"%s\"", profile_custom_name(p, s->subtype));
	else if (s->kind == CH_KIND_BIGARRAY)
		snprintf(buf + n, len - n, "  bigarray %s", report_bigarray_owner(s->subtype));
	else if (s->kind == CH_KIND_MALLOC && (s->subtype & CH_MALLOC_OUTSIDE))
		snprintf(buf + n, len - n, "  outside OCaml");
	else if (s->kind == CH_KIND_MALLOC && s->stack && s->stack->nframes <= 1)
		snprintf(buf + n, len - n, "  runtime start-up or exit (no OCaml frame)");
	return buf;
}

static size_t shown(int top, size_t n)
{
	return top <= 0 || (size_t)top >= n ? n : (size_t)top;
}

/* Points with something to show (they come first: sorted by the value). */
static size_t points_with_value(const struct report_groups *r, int by)
{
	size_t n = 0;

	while (n < r->npoints && report_group_value(&r->points[n].sum, by))
		n++;
	return n;
}

static void points_table(FILE *out, const struct profile *p, const struct report_meta *m,
			 const struct report_groups *r, int by)
{
	size_t n = points_with_value(r, by), k = shown(m->top, n);
	uint64_t cum = 0, held = 0;
	char b1[96], b2[32], name[1024];

	for (size_t i = 0; i < k; i++)
		held += report_group_value(&r->points[i].sum, by);
	fprintf(out, "\nAllocation points by %s: %s %zu of %zu hold %.1f%% of %s (whole callstacks: --by stack)\n",
		value_name(by), k == n ? "all" : "the top", k, n, pct(held, r->total),
		report_format_bytes(report_est_bytes(p, r->total), b2, sizeof(b2)));
	if (!k)
		return;
	fprintf(out, "\n  %4s  %-9s %-32s %6s %6s  %s\n", "#", "kind", "estimate [95% CI]", "share", "sum", "allocation point");
	for (size_t i = 0; i < k; i++) {
		const struct point_group *pg = &r->points[i];
		uint64_t v = report_group_value(&pg->sum, by);

		cum += v;
		fprintf(out, "  %4zu  %-9s %-32s %5.1f%% %5.1f%%  %s\n", i + 1, report_kind_name(pg->sum.kind),
			with_ci(p, v, b1, sizeof(b1)), pct(v, r->total), pct(cum, r->total),
			report_point_name(p, pg, name, sizeof(name)));
	}
}

static void functions_table(FILE *out, const struct profile *p, const struct report_meta *m,
			    const struct report_groups *r, int by)
{
	size_t n = 0, k;
	uint64_t sum = 0;
	char b1[96], b2[96];

	for (size_t i = 0; i < r->nfuncs; i++)
		n += r->funcs[i].cum > 0;
	k = shown(m->top, n);
	fprintf(out,
		"\nFunctions by %s: flat, at the function's own allocation points; cum., while it was on the "
		"callstack (once per callstack); %s %zu of %zu\n",
		value_name(by), k == n ? "all" : "the top", k, n);
	if (!k)
		return;
	fprintf(out, "\n  %-32s %6s %6s  %-32s %6s  %s\n", "flat [95% CI]", "flat%", "sum%", "cum. [95% CI]", "cum.%",
		"function");
	for (size_t i = 0; i < k; i++) {
		const struct function_row *f = &r->funcs[i];

		sum += f->flat;
		fprintf(out, "  %-32s %5.1f%% %5.1f%%  %-32s %5.1f%%  %s\n", with_ci(p, f->flat, b1, sizeof(b1)),
			pct(f->flat, r->total), pct(sum, r->total), with_ci(p, f->cum, b2, sizeof(b2)),
			pct(f->cum, r->total), f->function);
	}
}

/* Callers listed under each point in detail. */
#define CALLERS_PER_POINT 5

/* The Stdlib and its Camlinternal* modules (CamlinternalFormat under
 * Printf): a Stdlib point's callers are looked for past them. */
static bool in_stdlib(const char *function)
{
	return (!strncmp(function, "Stdlib", 6) && (function[6] == '.' || function[6] == '_')) ||
	       !strncmp(function, "Camlinternal", 12);
}

/* Code no program wrote: the compiler's application and currying stubs
 * (caml_applyN, caml_curryN, caml_tuplifyN, caml_send*) and the runtime's
 * C functions, never a point's caller. */
static bool is_stub(const char *function)
{
	return !strncmp(function, "caml_", 5);
}

/* The caller a point's callstack is credited to: its first frame (inlined
 * frames expanded) in another function than the point's, past the Stdlib
 * when the point is in it ("Set.Make.bal" is called from Set.Make.add,
 * which is called from the program); written as "function (file:line)"
 * into buf, or "" when the stack has no such frame. */
static void caller_of(const struct site_group *sg, const struct point_group *pg, struct modules *mods, char *buf,
		      size_t len)
{
	const struct profile_site *s = sg->site;
	bool skip_stdlib = in_stdlib(pg->function) || is_stub(pg->function);
	struct sym_frame fr[MAX_INLINE];

	buf[0] = 0;
	/* a malloc point is its OCaml caller already: past the libc frame */
	for (uint32_t i = pg->via ? 1 : 0; s->stack && i < s->stack->nframes; i++) {
		int n = modules_lookup(mods, s->stack->frames[i], i == 0 ? s->alloc_idx : 0, fr, MAX_INLINE);

		for (int j = 0; j < n; j++) {
			if (!strcmp(fr[j].function, pg->function) || is_stub(fr[j].function) ||
			    (skip_stdlib && in_stdlib(fr[j].function)))
				continue;
			if (fr[j].file && fr[j].line)
				snprintf(buf, len, "%s (%s:%d)", fr[j].function, fr[j].file, fr[j].line);
			else
				snprintf(buf, len, "%s", fr[j].function);
			return;
		}
	}
}

struct caller_row {
	char *text;
	uint64_t value;
};

static int caller_cmp(const void *a, const void *b)
{
	const struct caller_row *x = a, *y = b;

	if (x->value != y->value)
		return x->value > y->value ? -1 : 1;
	return strcmp(x->text, y->text);
}

/* The point's callers, heaviest first, with their share of it. */
static void point_callers(FILE *out, const struct profile *p, struct modules *mods, const struct report_groups *r,
			  const struct point_group *pg, int by)
{
	GHashTable *ix = g_hash_table_new(g_str_hash, g_str_equal);
	GArray *rows = g_array_new(FALSE, FALSE, sizeof(struct caller_row));
	uint64_t v = report_group_value(&pg->sum, by);
	char text[1024], b1[96];

	for (size_t j = 0; j < pg->nstacks; j++) {
		const struct site_group *sg = &r->stacks[pg->stacks[j]];
		gpointer at;

		caller_of(sg, pg, mods, text, sizeof(text));
		if (!text[0])
			continue;
		if (g_hash_table_lookup_extended(ix, text, NULL, &at)) {
			g_array_index(rows, struct caller_row, GPOINTER_TO_UINT(at)).value += report_group_value(sg, by);
		} else {
			struct caller_row row = { .text = g_strdup(text), .value = report_group_value(sg, by) };

			g_hash_table_insert(ix, row.text, GUINT_TO_POINTER(rows->len));
			g_array_append_val(rows, row);
		}
	}
	g_array_sort(rows, caller_cmp);
	if (rows->len > 1 || pg->nstacks > STACKS_PER_POINT) {
		guint shown_rows = 0;

		for (guint i = 0; i < rows->len; i++)
			shown_rows += g_array_index(rows, struct caller_row, i).value > 0;
		fprintf(out, "    called from (first frame outside %s, the compiler's stubs%s): %u caller%s\n",
			"the function", in_stdlib(pg->function) || is_stub(pg->function) ? " and the Stdlib" : "",
			shown_rows, report_plural(shown_rows));
		for (guint i = 0; i < rows->len && i < CALLERS_PER_POINT; i++) {
			const struct caller_row *c = &g_array_index(rows, struct caller_row, i);

			if (!c->value)
				break; /* sorted: nothing of the ranking value (live) from here on */
			fprintf(out, "      %5.1f%%  %-32s %s\n", pct(c->value, v), with_ci(p, c->value, b1, sizeof(b1)),
				c->text);
		}
	}
	for (guint i = 0; i < rows->len; i++)
		g_free(g_array_index(rows, struct caller_row, i).text);
	g_array_free(rows, TRUE);
	g_hash_table_destroy(ix);
}

/* One point in detail: its header, its type and live figures, its
 * callers, then its heaviest callstacks with their part of it. */
static void point_detail(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
			 const struct report_groups *r, size_t rank, int by, bool census)
{
	const struct point_group *pg = &r->points[rank];
	const struct site_group *g = &pg->sum;
	uint64_t v = report_group_value(g, by), listed = 0;
	size_t ns = pg->nstacks < STACKS_PER_POINT ? pg->nstacks : STACKS_PER_POINT;
	char b1[96], name[1024];

	report_point_name(p, pg, name, sizeof(name));
	if (census)
		report_census_group_header(out, p, g, rank + 1, name);
	else
		report_group_header(out, p, m, g, rank + 1, r->total, name);
	point_callers(out, p, mods, r, pg, by);
	for (size_t j = 0; j < ns; j++) {
		const struct site_group *sg = &r->stacks[pg->stacks[j]];
		uint64_t sv = report_group_value(sg, by);
		GPtrArray *lines = report_site_lines(sg->site, mods);

		listed += sv;
		fprintf(out, "    callstack %zu of %zu: %.1f%% of the point, %s, %" PRIu64 " sample%s\n", j + 1,
			pg->nstacks, pct(sv, v), with_ci(p, sv, b1, sizeof(b1)), sv, report_plural(sv));
		report_print_lines(out, lines);
		g_ptr_array_unref(lines);
	}
	if (pg->nstacks > ns)
		fprintf(out, "    (%zu more callstack%s: %.1f%% of the point; --by stack lists every one)\n",
			pg->nstacks - ns, report_plural(pg->nstacks - ns), pct(v - listed, v));
	if (census)
		report_paths_text(out, m, mods, r, rank);
}

void report_text_points(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
			const struct report_groups *r, int by, bool census)
{
	size_t k = shown(m->top, points_with_value(r, by));

	points_table(out, p, m, r, by);
	functions_table(out, p, m, r, by);
	if (census)
		report_paths_summary(out, p, m, r, k < 10 ? k : 10);
	if (!k)
		return;
	fprintf(out, "\nAllocation points in detail, each with its heaviest callstacks:\n");
	for (size_t i = 0; i < k; i++)
		point_detail(out, p, m, mods, r, i, by, census);
}
