/* report_sites.c -- what the text, census and JSON reports share
 * (report_internal.h): sites merged by printed stack, a site's stack lines,
 * its type line, and where the resident set went. */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

/* Why the minor heap is not (or no longer) sampled, or NULL: the
 * recording's reason, or the live layout check's (CH_CNT_LAYOUT_BAD). */
const char *report_minor_off(const struct report_meta *m)
{
	if (m->minor_off_why)
		return m->minor_off_why;
	if (m->counters[CH_CNT_LAYOUT_BAD])
		return "camlheap stopped at the first sign that the program's domain state does not have its "
		       "release's layout, see the warning";
	return NULL;
}

double report_est_bytes(const struct profile *p, uint64_t samples)
{
	return profile_estimate_words(p, samples) * 8.0;
}

const char *report_plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

/* The site's type, under its header: a custom block's operations, whose
 * data a bigarray holds. */
void report_site_type_line(FILE *out, const struct profile *p, const struct profile_site *s)
{
	if (s->kind == CH_KIND_CUSTOM) {
		const char *n = profile_custom_name(p, s->subtype);

		if (n)
			fprintf(out, "    custom type \"%s\" (out-of-heap memory its blocks declare)\n", n);
	} else if (s->kind == CH_KIND_MALLOC && (s->subtype & CH_MALLOC_OUTSIDE)) {
		fprintf(out, "    no OCaml stack: called from a thread not running OCaml at that moment (a C thread, or a "
			     "thread inside a blocking section)\n");
	} else if (s->kind == CH_KIND_MALLOC && s->stack && s->stack->nframes <= 1) {
		fprintf(out, "    no OCaml frame: called by the runtime's own C code before the OCaml program started "
			     "(start-up: heap, tables, channels) or after it returned\n");
	} else if (s->kind == CH_KIND_BIGARRAY) {
		fprintf(out, "    bigarray data: %s\n",
			s->subtype == CH_BA_OWNED ? "owned (malloc'ed for it by caml_ba_alloc, freed by its finaliser)"
			: s->subtype == CH_BA_VIEW
				? "a view (sub, slice, reshape, or data from C): the memory belongs elsewhere, not counted"
				: "a memory-mapped file (Unix.map_file): file pages, not counted");
	}
}

void report_resident_split(const struct profile *p, const struct report_meta *m, struct resident_split *r)
{
	GHashTableIter it;
	gpointer k, v;
	uint64_t live[CH_KIND__COUNT] = { 0 };

	memset(r, 0, sizeof(*r));
	if (!m->rss_kib)
		return;
	r->known = true;
	r->rss = (double)m->rss_kib * 1024.0;
	r->hwm = (double)m->hwm_kib * 1024.0;
	r->heap = m->heap_words ? (double)m->heap_words * 8.0 : -1;
	r->live_known = m->census_on;
	r->malloc_on = m->malloc_libc != NULL;
	if (m->rss_live_set) {
		/* live when the RSS was read */
		live[CH_KIND_BIGARRAY] = m->rss_live_bigarray;
		live[CH_KIND_MALLOC] = m->rss_live_malloc;
		live[CH_KIND_CUSTOM] = m->rss_live_custom;
	} else {
		g_hash_table_iter_init(&it, p->sites);
		while (g_hash_table_iter_next(&it, &k, &v)) {
			const struct profile_site *s = v;

			if (s->kind == CH_KIND_BIGARRAY && s->subtype != CH_BA_OWNED)
				continue;
			live[s->kind] += s->live_samples;
		}
	}
	for (int i = 0; i < CH_KIND__COUNT; i++)
		r->live[i] = round(report_est_bytes(p, live[i])); /* whole bytes: the JSON's parts add up exactly */
	r->unexplained = r->rss - (r->heap > 0 ? r->heap : 0);
	if (r->live_known)
		r->unexplained -= r->live[CH_KIND_BIGARRAY] + r->live[CH_KIND_MALLOC] +
				  (r->malloc_on ? 0 : r->live[CH_KIND_CUSTOM]);
}

/* The lines a site's stack prints as, innermost first: one per frame,
 * inlined frames expanded, then why the walk ended if not cleanly.  Sites
 * whose stacks differ only in return addresses on the same source lines
 * (three calls of one function on one line) print alike and are merged. */
GPtrArray *report_site_lines(const struct profile_site *s, struct modules *mods)
{
	GPtrArray *v = g_ptr_array_new_with_free_func(g_free);
	struct sym_frame fr[MAX_INLINE];

	if (!s->stack) {
		g_ptr_array_add(v, g_strdup("[stack frames lost]"));
		return v;
	}
	if (s->stack->nframes == 0) {
		g_ptr_array_add(v, g_strdup_printf("[no OCaml frames: %s]",
						   s->stack->term == CH_TERM_CLEAN
							   ? "allocated by the runtime's C code before the OCaml program started or after it returned"
						   : s->stack->term == CH_TERM_UNKNOWN_PC
							   ? "the first return address has no frame descriptor (runtime start-up, or a plugin whose frame tables were not loaded yet)"
							   : report_term_name(s->stack->term)));
		return v;
	}
	for (uint32_t i = 0; i < s->stack->nframes; i++) {
		/* the leaf of a minor sample is the allocation point: its
		 * Comballoc index names the exact sub-allocation */
		int n = modules_lookup(mods, s->stack->frames[i], i == 0 ? s->alloc_idx : 0, fr, MAX_INLINE);

		for (int j = 0; j < n; j++) {
			GString *g = g_string_new(fr[j].function);

			if (fr[j].file && fr[j].line)
				g_string_append_printf(g, " (%s:%d)", fr[j].file, fr[j].line);
			else if (fr[j].file)
				g_string_append_printf(g, " (%s)", fr[j].file);
			if (fr[j].inlined)
				g_string_append(g, " [inlined]");
			g_ptr_array_add(v, g_string_free(g, FALSE));
		}
	}
	if (s->stack->term != CH_TERM_CLEAN)
		g_ptr_array_add(v, g_strdup_printf("[stack walk ended: %s]", report_term_name(s->stack->term)));
	return v;
}

/* Print a stack's lines; a run of identical lines (recursion) prints once
 * with its count: "Chain.recurse (chain.ml:95) [x699]". */
void report_print_lines(FILE *out, GPtrArray *lines)
{
	for (guint i = 0; i < lines->len;) {
		guint j = i + 1;

		while (j < lines->len && !strcmp(lines->pdata[j], lines->pdata[i]))
			j++;
		if (j - i > 1)
			fprintf(out, "      %s [x%u]\n", (char *)lines->pdata[i], j - i);
		else
			fprintf(out, "      %s\n", (char *)lines->pdata[i]);
		i = j;
	}
}

/* Sites merge when their stacks print alike.  Comparing printed text would
 * cost megabytes per deep stack (ocamlopt: 30 000 stacks of up to 1 024
 * frames), so each frame is first reduced to the id of its printed text,
 * interned once per (return address, Comballoc index); a site's key is the
 * array of those ids. */
struct frame_ids {
	GHashTable *by_pc;   /* (retaddr, alloc_idx) -> id + 1 */
	GHashTable *by_text; /* printed text -> id + 1 */
	guint next;
};

static guint frame_id(struct frame_ids *fi, struct modules *mods, uint64_t pc, unsigned alloc_idx)
{
	uint64_t key = pc ^ ((uint64_t)alloc_idx << 56);
	gpointer v = g_hash_table_lookup(fi->by_pc, &key);
	struct sym_frame fr[MAX_INLINE];
	GString *g;
	int n;

	if (v)
		return GPOINTER_TO_UINT(v) - 1;
	g = g_string_new(NULL);
	n = modules_lookup(mods, pc, alloc_idx, fr, MAX_INLINE);
	for (int j = 0; j < n; j++)
		g_string_append_printf(g, "%s|%s|%d|%d\n", fr[j].function, fr[j].file ? fr[j].file : "", fr[j].line,
				       fr[j].inlined);
	v = g_hash_table_lookup(fi->by_text, g->str);
	if (!v) {
		v = GUINT_TO_POINTER(++fi->next);
		g_hash_table_insert(fi->by_text, g_string_free(g, FALSE), v);
	} else {
		g_string_free(g, TRUE);
	}
	g_hash_table_insert(fi->by_pc, g_memdup2(&key, sizeof(key)), v);
	return GPOINTER_TO_UINT(v) - 1;
}

struct group_key {
	uint64_t subtype;     /* profile_site.subtype */
	uint8_t kind;
	uint8_t term;         /* 0xff: stack frames lost */
	uint32_t domain;      /* the site's (0 unless split by domain) */
	uint32_t n;
	guint *ids;
};

static guint group_key_hash(gconstpointer p)
{
	const struct group_key *k = p;
	guint h = 2166136261u ^ k->kind ^ ((guint)k->term << 8) ^ (k->domain * 0x9e3779b9u) ^
		  (guint)(k->subtype ^ (k->subtype >> 32));

	for (uint32_t i = 0; i < k->n; i++)
		h = (h ^ k->ids[i]) * 16777619u;
	return h;
}

static gboolean group_key_equal(gconstpointer a, gconstpointer b)
{
	const struct group_key *x = a, *y = b;

	return x->kind == y->kind && x->term == y->term && x->domain == y->domain && x->n == y->n &&
	       x->subtype == y->subtype &&
	       !memcmp(x->ids, y->ids, x->n * sizeof(*x->ids));
}

static void group_key_free(gpointer p)
{
	struct group_key *k = p;

	g_free(k->ids);
	g_free(k);
}

static int group_cmp(const void *a, const void *b)
{
	const struct site_group *x = a, *y = b;

	if (x->samples != y->samples)
		return x->samples > y->samples ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

static int group_cmp_live(const void *a, const void *b)
{
	const struct site_group *x = a, *y = b;

	if (x->live != y->live)
		return x->live > y->live ? -1 : 1;
	return group_cmp(a, b);
}

static void group_add_census(struct site_group *g, const struct profile_site *s)
{
	g->followed += s->followed_blocks;
	g->live += s->live_samples;
	g->live_blocks += s->live_blocks;
	/* merged sites (same printed stack): the sum of their peaks bounds the
	 * group's peak from above; most groups have one site */
	g->peak += s->peak_live_samples;
	g->promoted += s->promoted_blocks;
	g->dead += s->dead_minor_blocks + s->dead_major_blocks;
	g->relocated += s->relocated_samples;
	g->unfollowed += s->unfollowed_samples;
	g->retained += s->leak_retained_samples;
	if (s->leak_retaining > g->retaining)
		g->retaining = s->leak_retaining;
	if (s->leak_cycles > g->cycles)
		g->cycles = s->leak_cycles;
	g->lifetime_s += s->dead_lifetime_s;
	g->dead_minor_gcs += s->dead_minor_gcs;
	if (s->live_samples > g->median_from || !g->median_from) {
		g->median_from = s->live_samples;
		g->median_age = s->median_major_age;
	}
	g->grows = g->grows || profile_site_live_grows(s);
}

static int group_cmp_peak(const void *a, const void *b)
{
	const struct site_group *x = a, *y = b;

	if (x->peak != y->peak)
		return x->peak > y->peak ? -1 : 1;
	return group_cmp(a, b);
}

/* The key a site is merged by: its kind and printed stack. */
static struct group_key *group_key_of(struct frame_ids *fi, struct modules *mods, const struct profile_site *s)
{
	struct group_key *k = g_new0(struct group_key, 1);

	k->kind = s->kind;
	k->subtype = s->subtype;
	k->domain = s->domain;
	k->term = s->stack ? s->stack->term : 0xff;
	k->n = s->stack ? s->stack->nframes : 0;
	k->ids = g_new(guint, k->n ? k->n : 1);
	for (uint32_t j = 0; j < k->n; j++)
		k->ids[j] = frame_id(fi, mods, s->stack->frames[j], j == 0 ? s->alloc_idx : 0);
	return k;
}

void report_stacks_of_sites(const struct report_groups *r, struct modules *mods, const struct profile_site *const *sites,
			    size_t n, size_t *out)
{
	GHashTable *index = g_hash_table_new_full(group_key_hash, group_key_equal, group_key_free, NULL);
	struct frame_ids fi = {
		.by_pc = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL),
		.by_text = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
	};

	for (size_t i = 0; i < r->nstacks; i++)
		g_hash_table_insert(index, group_key_of(&fi, mods, r->stacks[i].site), GSIZE_TO_POINTER(i + 1));
	for (size_t i = 0; i < n; i++) {
		struct group_key *k = group_key_of(&fi, mods, sites[i]);

		out[i] = GPOINTER_TO_SIZE(g_hash_table_lookup(index, k)) - 1; /* (size_t)-1: not found */
		group_key_free(k);
	}
	g_hash_table_destroy(index);
	g_hash_table_destroy(fi.by_pc);
	g_hash_table_destroy(fi.by_text);
}

/* Sites merged by kind and printed stack, sorted by samples (by live or
 * peak live samples: `by`, an enum report_value). */
struct site_group *report_group_sites(const struct profile *p, struct modules *mods, size_t *count, int by)
{
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites), n = 0;
	struct site_group *g = calloc(nsites ? nsites : 1, sizeof(*g));
	GHashTable *index = g_hash_table_new_full(group_key_hash, group_key_equal, group_key_free, NULL);
	struct frame_ids fi = {
		.by_pc = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL),
		.by_text = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL),
	};

	for (size_t i = 0; g && i < nsites; i++) {
		const struct profile_site *s = sites[i];
		struct group_key *k = group_key_of(&fi, mods, s);
		gpointer at;

		if (g_hash_table_lookup_extended(index, k, NULL, &at)) {
			g[GPOINTER_TO_SIZE(at)].samples += s->samples;
			group_add_census(&g[GPOINTER_TO_SIZE(at)], s);
			group_key_free(k);
			continue;
		}
		g[n] = (struct site_group){ .kind = s->kind, .samples = s->samples, .site = s, .first = i };
		group_add_census(&g[n], s);
		g_hash_table_insert(index, k, GSIZE_TO_POINTER(n));
		n++;
	}
	for (size_t i = 0; g && i < n; i++)
		if (g[i].cycles >= 2)
			g[i].score = (double)g[i].retaining / g[i].cycles *
				     (profile_estimate_words(p, g[i].retained) * 8.0 / g[i].cycles);
	g_hash_table_destroy(index);
	g_hash_table_destroy(fi.by_pc);
	g_hash_table_destroy(fi.by_text);
	free(sites);
	if (g)
		qsort(g, n, sizeof(*g),
		      by == REPORT_VALUE_LIVE ? group_cmp_live : by == REPORT_VALUE_PEAK ? group_cmp_peak : group_cmp);
	*count = g ? n : 0;
	return g;
}

int report_group_cmp_score(const void *a, const void *b)
{
	const struct site_group *x = a, *y = b;

	if (x->score != y->score)
		return x->score > y->score ? -1 : 1;
	return group_cmp_live(a, b);
}

/* A site whose blocks born in at least two thirds of the judged cycles
 * (and at least three) are still alive, and whose live estimate grows.
 * Not "every cycle": a small site may, by chance, have no sample born in
 * a short cycle; not fewer than three: two cycles' survivors are too thin
 * a trend (a fresh review saw sites of 2-3 samples flagged). */
bool report_is_suspect(const struct site_group *g)
{
	return g->cycles >= 3 && g->retaining >= 3 && 3 * g->retaining >= 2 * g->cycles && g->grows;
}
