/* report.c -- see report.h. */
#define _GNU_SOURCE
#include "output/report.h"
#include "output/jsonw.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

/* Why the minor heap is not (or no longer) sampled, or NULL: the
 * recording's reason, or the live layout check's (CH_CNT_LAYOUT_BAD). */
static const char *minor_off(const struct report_meta *m)
{
	if (m->minor_off_why)
		return m->minor_off_why;
	if (m->counters[CH_CNT_LAYOUT_BAD])
		return "camlheap stopped at the first sign that the program's domain state does not have its "
		       "release's layout, see the warning";
	return NULL;
}

#include "output/pprof.h"

static const char *const kind_names[CH_KIND__COUNT] = {
	[CH_KIND_MINOR] = "minor",
	[CH_KIND_MAJOR] = "major",
	[CH_KIND_CUSTOM] = "custom",
	[CH_KIND_UNMARSHAL] = "unmarshal",
	[CH_KIND_BIGARRAY] = "bigarray",
	[CH_KIND_MALLOC] = "malloc",
};

static const char *const term_names[CH_TERM__COUNT] = {
	[CH_TERM_CLEAN] = "clean",
	[CH_TERM_UNKNOWN_PC] = "unknown pc",
	[CH_TERM_READ_ERROR] = "read error",
	[CH_TERM_DEPTH] = "depth limit",
};

#define MAX_INLINE 16

const char *report_bigarray_owner(uint64_t ext_flags)
{
	return ext_flags == CH_BA_OWNED ? "owned" : ext_flags == CH_BA_VIEW ? "view" : "mapped";
}

/* The site's type, under its header: a custom block's operations, whose
 * data a bigarray holds. */
static void site_type_line(FILE *out, const struct profile *p, const struct profile_site *s)
{
	if (s->kind == CH_KIND_CUSTOM) {
		const char *n = profile_custom_name(p, s->subtype);

		if (n)
			fprintf(out, "    custom type \"%s\" (out-of-heap memory its blocks declare)\n", n);
	} else if (s->kind == CH_KIND_MALLOC && (s->subtype & CH_MALLOC_OUTSIDE)) {
		fprintf(out, "    no OCaml stack: called from a thread not running OCaml at that moment (a C thread, or a "
			     "thread inside a blocking section)\n");
	} else if (s->kind == CH_KIND_BIGARRAY) {
		fprintf(out, "    bigarray data: %s\n",
			s->subtype == CH_BA_OWNED ? "owned (malloc'ed for it by caml_ba_alloc, freed by its finaliser)"
			: s->subtype == CH_BA_VIEW
				? "a view (sub, slice, reshape, or data from C): the memory belongs elsewhere, not counted"
				: "a memory-mapped file (Unix.map_file): file pages, not counted");
	}
}

const char *report_kind_name(unsigned kind)
{
	return kind < CH_KIND__COUNT ? kind_names[kind] : "?";
}

const char *report_term_name(unsigned term)
{
	return term < CH_TERM__COUNT ? term_names[term] : "?";
}

const char *report_format_bytes(double b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024.0 && u < 4) {
		b /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", b);
	else
		snprintf(buf, len, "%.*f %s", b < 10 ? 2 : b < 100 ? 1 : 0, b, units[u]);
	return buf;
}

static double est_bytes(const struct profile *p, uint64_t samples)
{
	return profile_estimate_words(p, samples) * 8.0;
}

/* The header's --malloc line: calls seen, left out, outside OCaml. */
static void malloc_line(FILE *out, const struct report_meta *m)
{
	const uint64_t *c = m->counters;
	char b1[32];

	if (m->malloc_libc && !m->foreign)
		fprintf(out,
			"malloc      --malloc on %s: %" PRIu64 " allocating calls (%s, exact) and %" PRIu64
			" frees seen; left out: %" PRIu64 " calls of the runtime's own (heap, pools, large blocks, bigarray "
			"data: counted above; the GC's tables) and %" PRIu64 " mmap calls of libc's own (malloc arenas, "
			"thread stacks); %" PRIu64 " samples from threads not running OCaml (no OCaml stack); %" PRIu64
			" sampled blocks seen freed\n",
			m->malloc_libc, c[CH_CNT_HITS_MALLOC], report_format_bytes((double)c[CH_CNT_BYTES_MALLOC], b1, sizeof(b1)),
			c[CH_CNT_HITS_FREE], c[CH_CNT_MALLOC_RUNTIME], c[CH_CNT_MMAP_LIBC], c[CH_CNT_MALLOC_OUTSIDE],
			c[CH_CNT_MALLOC_FREED]);
}

/* Where the target's resident set went (report_meta.rss_kib from
 * /proc/PID/status; the heap from the runtime's counters; what lives
 * outside the heap from the census of the sampled out-of-heap kinds). */
struct resident_split {
	bool known;          /* a reading exists */
	double rss, hwm, heap; /* bytes; heap < 0: unknown */
	double live[CH_KIND__COUNT]; /* estimated live bytes by kind (bigarray: owned data only) */
	bool live_known;     /* census on */
	bool malloc_on;
	double unexplained;  /* rss - heap - bigarray - malloc (- custom without --malloc) */
};

static void resident_split(const struct profile *p, const struct report_meta *m, struct resident_split *r)
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
		r->live[i] = round(est_bytes(p, live[i])); /* whole bytes: the JSON's parts add up exactly */
	r->unexplained = r->rss - (r->heap > 0 ? r->heap : 0);
	if (r->live_known)
		r->unexplained -= r->live[CH_KIND_BIGARRAY] + r->live[CH_KIND_MALLOC] +
				  (r->malloc_on ? 0 : r->live[CH_KIND_CUSTOM]);
}

static void resident_line(FILE *out, const struct profile *p, const struct report_meta *m)
{
	struct resident_split r;
	char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];

	resident_split(p, m, &r);
	if (!r.known)
		return;
	fprintf(out, "resident    RSS %s (peak %s; %s): OCaml heap %s", report_format_bytes(r.rss, b1, sizeof(b1)),
		report_format_bytes(r.hwm, b2, sizeof(b2)), m->rss_when ? m->rss_when : "read at the end",
		r.heap >= 0 ? report_format_bytes(r.heap, b3, sizeof(b3))
			    : "unknown (the runtime had not started, or its symbols are stripped)");
	if (r.heap >= 0)
		fprintf(out, " (runtime counters: major and minor heaps)");
	if (!r.live_known) {
		fprintf(out, "; live memory outside it unknown (--no-census)\n");
		return;
	}
	fprintf(out, "; live outside it, estimated: bigarray %s, malloc %s",
		report_format_bytes(r.live[CH_KIND_BIGARRAY], b4, sizeof(b4)),
		r.malloc_on ? report_format_bytes(r.live[CH_KIND_MALLOC], b5, sizeof(b5)) : "not sampled (--malloc)");
	if (r.malloc_on)
		fprintf(out, ", custom blocks declare %s (not added: C stubs usually malloc it, counted there)",
			report_format_bytes(r.live[CH_KIND_CUSTOM], b6, sizeof(b6)));
	else
		fprintf(out, ", custom blocks declare %s", report_format_bytes(r.live[CH_KIND_CUSTOM], b6, sizeof(b6)));
	fprintf(out, "; unexplained %s%s (%.0f%% of RSS: code and data, stacks, runtime tables, allocator slack, "
		     "memory from before camlheap attached%s%s)\n",
		r.unexplained < 0 ? "-" : "", report_format_bytes(r.unexplained < 0 ? -r.unexplained : r.unexplained, b1,
								  sizeof(b1)),
		r.rss > 0 ? 100.0 * r.unexplained / r.rss : 0.0, r.malloc_on ? "" : ", malloc'ed memory (--malloc)",
		r.unexplained < 0 ? "; negative: heap chunks or mappings counted whole but not all resident" : "");
}

/* The lines a site's stack prints as, innermost first: one per frame,
 * inlined frames expanded, then why the walk ended if not cleanly.  Sites
 * whose stacks differ only in return addresses on the same source lines
 * (three calls of one function on one line) print alike and are merged. */
static GPtrArray *site_lines(const struct profile_site *s, struct modules *mods)
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
							   : term_names[s->stack->term]));
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
		g_ptr_array_add(v, g_strdup_printf("[stack walk ended: %s]", term_names[s->stack->term]));
	return v;
}

/* Print a stack's lines; a run of identical lines (recursion) prints once
 * with its count: "Chain.recurse (chain.ml:95) [x699]". */
static void print_lines(FILE *out, GPtrArray *lines)
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

struct site_group {
	uint8_t kind;
	uint64_t samples;
	const struct profile_site *site; /* one of its sites: the stack it prints */
	size_t first;                    /* rank of that site among all sites (a stable tie-break) */
	/* census, summed over the group's sites */
	uint64_t followed, live, live_blocks, peak, promoted, dead, relocated, unfollowed;
	uint64_t retained;               /* live samples born in judged cycles */
	uint32_t retaining, cycles;      /* judged cycles with live births (max over sites), judged cycles */
	double lifetime_s;               /* sum over dead blocks */
	uint64_t dead_minor_gcs;         /* sum over dead blocks of the minor collections they lived through */
	double median_age;               /* of the site with the most live samples */
	uint64_t median_from;            /* its live samples */
	bool grows;
	double score;                    /* bytes per major cycle */
};

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

/* Sites merged by kind and printed stack, sorted by samples (by live or
 * peak live samples: `by`, an enum report_value). */
static struct site_group *group_sites(const struct profile *p, struct modules *mods, size_t *count, int by)
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
		struct group_key *k = g_new0(struct group_key, 1);
		gpointer at;

		k->kind = s->kind;
		k->subtype = s->subtype;
		k->domain = s->domain;
		k->term = s->stack ? s->stack->term : 0xff;
		k->n = s->stack ? s->stack->nframes : 0;
		k->ids = g_new(guint, k->n ? k->n : 1);
		for (uint32_t j = 0; j < k->n; j++)
			k->ids[j] = frame_id(&fi, mods, s->stack->frames[j], j == 0 ? s->alloc_idx : 0);
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

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

static int group_cmp_score(const void *a, const void *b)
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
static bool is_suspect(const struct site_group *g)
{
	return g->cycles >= 3 && g->retaining >= 3 && 3 * g->retaining >= 2 * g->cycles && g->grows;
}

/* The census lines of a report header (record and census). */
static void census_header(FILE *out, const struct profile *p, const struct report_meta *m)
{
	const uint64_t *c = m->counters;
	char b1[32], b2[32], b3[32], b4[32];
	double lo, hi;

	if (!m->census_on) {
		fprintf(out, "census      off: %s\n", m->census_off_why ? m->census_off_why : "not asked for");
		return;
	}
	if (m->foreign) {
		fprintf(out,
			"census      %" PRIu64 " sampled block%s followed by memtrace (%" PRIu64 " born in the minor heap): %" PRIu64
			" promoted, %" PRIu64 " died in the minor heap, %" PRIu64 " in the major heap\n",
			p->followed_blocks, plural(p->followed_blocks), p->followed_minor_blocks, p->promoted_blocks,
			p->dead_minor_blocks, p->dead_major_blocks);
		goto live;
	}
	fprintf(out,
		"census      %" PRIu64 " sampled block%s followed (%" PRIu64 " born in the minor heap): %" PRIu64 " promoted, %" PRIu64
		" died in the minor heap, %" PRIu64 " in the major heap; %" PRIu64 " minor and %" PRIu64
		" major collections seen (%u reached their clean phase)\n",
		p->followed_blocks, plural(p->followed_blocks), p->followed_minor_blocks, p->promoted_blocks, p->dead_minor_blocks,
		p->dead_major_blocks, c[CH_CNT_MINOR_UPDATES], c[CH_CNT_CLEAN_PHASES], p->clean_phases);
	if (p->freed_blocks)
		fprintf(out, "freed       %" PRIu64 " malloc'ed sampled block%s seen freed (free, realloc, munmap)\n",
			p->freed_blocks, plural(p->freed_blocks));
	fprintf(out,
		"gc hooks    minor collections: %.3f ms for %" PRIu64 " young entries checked; clean phases: %.3f ms "
		"for %" PRIu64 " major entries checked (BPF time in the target)\n",
		(double)c[CH_CNT_CENSUS_MINOR_NS] / 1e6, c[CH_CNT_YOUNG_CHECKED], (double)c[CH_CNT_CENSUS_MAJOR_NS] / 1e6,
		c[CH_CNT_MAJOR_CHECKED]);
	if (c[CH_CNT_FATES_DEFERRED] || m->fates_drained)
		fprintf(out,
			"note        %" PRIu64 " fate event%s found the ring buffer full: sent at a later collection, "
			"and %" PRIu64 " read from the kernel's tracking set at the end (nothing lost)\n",
			c[CH_CNT_FATES_DEFERRED], plural(c[CH_CNT_FATES_DEFERRED]), m->fates_drained);
live:
	profile_poisson_ci95(p->live_samples, &lo, &hi);
	fprintf(out,
		"live        at the end: estimated %s [95%% CI %s .. %s] in %u sampled block%s; peak %s at %.2f s\n",
		report_format_bytes(est_bytes(p, p->live_samples), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		g_hash_table_size(p->blocks), plural(g_hash_table_size(p->blocks)),
		report_format_bytes(est_bytes(p, p->peak_live_samples), b4, sizeof(b4)),
		p->peak_ns > (p->zero_ns ? p->zero_ns : p->first_ns)
			? (double)(p->peak_ns - (p->zero_ns ? p->zero_ns : p->first_ns)) / 1e9
			: 0.0);
	if (p->relocated_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s moved by a compaction (%" PRIu64
			" seen): they were alive then and are counted live since, location unknown, their "
			"deaths no longer seen; %s\n",
			p->relocated_blocks, plural(p->relocated_blocks), c[CH_CNT_COMPACTIONS],
			m->ocaml_version && m->ocaml_version[0] == '5'
				? "on OCaml 5 a compaction runs only at Gc.compact ()"
				: "a compaction runs at Gc.compact () and, automatically, when the heap is fragmented: "
				  "OCAMLRUNPARAM=O=1000000 disables the automatic one");
	if (p->unfollowed_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s could not be followed (tracking set full): "
			"counted live since; raise --max-tracked\n",
			p->unfollowed_blocks, plural(p->unfollowed_blocks));
	if (c[CH_CNT_FATE_STALE])
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s met a collection or compaction that no probe saw "
			"(%s): fate unknown, counted live\n",
			c[CH_CNT_FATE_STALE], plural(c[CH_CNT_FATE_STALE]),
			m->ocaml_version && m->ocaml_version[0] == '5'
				? "camlheap was still attaching, or young blocks of a domain that ended before its next "
				  "minor collection, judged when another domain took its id"
				: "camlheap was still attaching");
	if (p->unknown_fate_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s had an unreadable header at a collection: fate "
			"unknown, counted live\n",
			p->unknown_fate_blocks, plural(p->unknown_fate_blocks));
	if (p->orphan_fates)
		fprintf(out,
			"warning     %" PRIu64 " fate event%s named a block never seen (its allocation event was "
			"lost): counted here, not subtracted\n",
			p->orphan_fates, plural(p->orphan_fates));
}

/* record --live: a site's live figures, under its header line. */
static void site_live_line(FILE *out, const struct profile *p, const struct site_group *g)
{
	char b1[32], b2[32], b3[32], b4[32];
	double lo, hi;
	uint64_t dead = g->dead;

	profile_poisson_ci95(g->live, &lo, &hi);
	fprintf(out, "    live at end %s [95%% CI %s .. %s] %" PRIu64 " sample%s in %" PRIu64 " block%s; peak live %s",
		report_format_bytes(est_bytes(p, g->live), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		g->live, plural(g->live), g->live_blocks, plural(g->live_blocks),
		report_format_bytes(est_bytes(p, g->peak), b4, sizeof(b4)));
	if (g->kind == CH_KIND_MINOR)
		fprintf(out, "; %" PRIu64 " of %" PRIu64 " sampled blocks promoted", g->promoted, g->followed);
	if (g->unfollowed)
		fprintf(out, "; %" PRIu64 " live sample%s no longer followed (counted live)", g->unfollowed,
			plural(g->unfollowed));
	if (g->relocated)
		fprintf(out, "; %" PRIu64 " live sample%s relocated by compaction", g->relocated, plural(g->relocated));
	if (dead)
		fprintf(out, "; %" PRIu64 " died, mean lifetime %.3g s, %.2f minor collections survived", dead,
			g->lifetime_s / (double)dead, (double)g->dead_minor_gcs / (double)dead);
	fprintf(out, "\n");
}

static int ptr_uint_cmp(const void *a, const void *b)
{
	guint x = GPOINTER_TO_UINT(*(gconstpointer const *)a), y = GPOINTER_TO_UINT(*(gconstpointer const *)b);

	return x < y ? -1 : x > y;
}

int report_write_text(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	size_t ngroups = 0;
	struct site_group *groups = group_sites(p, mods, &ngroups, m->value);
	const uint64_t *c = m->counters;
	char b1[32], b2[32], b3[32], b4[32], b5[32];
	uint64_t hits = c[CH_CNT_HITS_MAJOR] + c[CH_CNT_HITS_CUSTOM] + c[CH_CNT_HITS_UNMARSHAL] + 2 * c[CH_CNT_DISPATCH];
	double total = 0;

	if (m->foreign)
		fprintf(out, "camlheap: a memtrace trace written inside the program (Gc.Memprof samples every allocation); "
			     "camlheap's own probe figures do not apply\n");
	else if (!minor_off(m) && !m->unmarshal_off_why)
		fprintf(out,
			"camlheap: executor %s; every allocation is sampled: minor heap (%s), "
			"direct major, custom (out-of-heap) and unmarshalled\n",
			m->executor, m->minor_source ? m->minor_source : "young_limit traps");
	else if (!minor_off(m))
		fprintf(out,
			"camlheap: executor %s; allocations are sampled in the minor heap (%s), direct major and "
			"custom (out-of-heap), but not unmarshalled blocks (%s)\n",
			m->executor, m->minor_source ? m->minor_source : "young_limit traps", m->unmarshal_off_why);
	else if (!m->unmarshal_off_why)
		fprintf(out,
			"camlheap: executor %s; minor-heap allocations are not sampled (%s); this profile covers "
			"direct major, custom (out-of-heap) and unmarshalled allocations only\n",
			m->executor, minor_off(m));
	else
		fprintf(out,
			"camlheap: executor %s; minor-heap allocations are not sampled (%s), nor unmarshalled "
			"blocks (%s); this profile covers direct major and custom (out-of-heap) allocations only\n",
			m->executor, minor_off(m), m->unmarshal_off_why);
	fprintf(out, "target      pid %d  %s  (OCaml %s)\n", m->pid, m->exe, m->ocaml_version);
	if (m->command)
		fprintf(out, "command     %s\n", m->command);
	/* whole words up to 1e12 (readable), %g beyond (--rate 1e-300) */
	if (p->rate >= 1e-12)
		fprintf(out, "rate        %g samples/word (one sample per %.0f word%s on average)\n", p->rate,
			1.0 / p->rate, p->rate == 1.0 ? "" : "s");
	else
		fprintf(out, "rate        %g samples/word (one sample per %.3g words on average)\n", p->rate,
			1.0 / p->rate);
	if (m->budget)
		fprintf(out, "budget      lambda in force: %s; a kept sample stands for 1/(its lambda) words, so estimates stay "
			     "unbiased (intervals assume the base rate: too narrow when samples were thinned)\n", m->budget);
	fprintf(out, "duration    %.2f s (attach took %.3f s); %s\n", m->duration_s, m->attach_s, m->end_reason);
	fprintf(out, "samples     %" PRIu64 " in %" PRIu64 " sampled blocks; dropped events %" PRIu64 " (%" PRIu64
		     " samples)\n",
		p->samples, p->events, c[CH_CNT_DROPPED], c[CH_CNT_DROPPED_SAMPLES]);
	if (!m->foreign) {
	fprintf(out, "sampler     %s; %u/%u probes on emulated instructions; %u Dynlink plugin%s\n",
		m->sampler_mode, m->probes_emulated, m->probes_total, m->plugins, plural(m->plugins));
	fprintf(out,
		"profiler    camlheap used %.2f s of CPU, peak RSS %.1f MiB; the target took %" PRIu64
		" probe hit%s (~1 us each, more for samples with deep stacks)\n",
		m->cpu_s, m->max_rss_mib, hits, plural(hits));
	}
	/* bigarray views and mapped files point to memory counted elsewhere
	 * (or backed by a file): shown, not added up */
	for (int k = CH_KIND_MINOR; k < CH_KIND__COUNT; k++)
		total += est_bytes(p, k == CH_KIND_BIGARRAY ? p->bigarray_samples[CH_BA_OWNED] : p->samples_by_kind[k]);
	fprintf(out, "allocated   estimated %s: minor %s, major %s, custom %s, unmarshal %s",
		report_format_bytes(total, b1, sizeof(b1)),
		minor_off(m) ? "not sampled"
				 : report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_MINOR]), b5, sizeof(b5)),
		report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_MAJOR]), b2, sizeof(b2)),
		report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_CUSTOM]), b3, sizeof(b3)),
		m->unmarshal_off_why ? "not sampled"
				     : report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_UNMARSHAL]), b4, sizeof(b4)));
	fprintf(out, ", bigarray %s", report_format_bytes(est_bytes(p, p->bigarray_samples[CH_BA_OWNED]), b2, sizeof(b2)));
	if (m->malloc_libc || p->samples_by_kind[CH_KIND_MALLOC])
		fprintf(out, ", malloc %s",
			report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_MALLOC]), b5, sizeof(b5)));
	if (p->bigarray_samples[CH_BA_VIEW] || p->bigarray_samples[CH_BA_MAPPED])
		fprintf(out, " (not counted: views of other memory %s, mapped files %s)",
			report_format_bytes(est_bytes(p, p->bigarray_samples[CH_BA_VIEW]), b3, sizeof(b3)),
			report_format_bytes(est_bytes(p, p->bigarray_samples[CH_BA_MAPPED]), b4, sizeof(b4)));
	fputc('\n', out);
	if (!m->foreign)
		fprintf(out,
			"observed    by the probes (exact, not estimated): major %" PRIu64 " words in %" PRIu64
			" blocks, custom %" PRIu64 " words, unmarshal %" PRIu64 " words, bigarray %" PRIu64
			" words in %" PRIu64 " arrays\n",
			c[CH_CNT_WORDS_MAJOR], c[CH_CNT_HITS_MAJOR], c[CH_CNT_WORDS_CUSTOM], c[CH_CNT_WORDS_UNMARSHAL],
			c[CH_CNT_WORDS_BIGARRAY], c[CH_CNT_HITS_BIGARRAY]);
	malloc_line(out, m);
	resident_line(out, p, m);
	if (g_hash_table_size(p->domain_samples) > 1 || p->by_domain ||
	    g_hash_table_lookup(p->domain_samples, GUINT_TO_POINTER(1)) ||
	    (g_hash_table_size(p->domain_samples) == 1 && !g_hash_table_contains(p->domain_samples, GUINT_TO_POINTER(0)))) {
		guint nd = 0;
		gpointer *ids = g_hash_table_get_keys_as_array(p->domain_samples, &nd);

		qsort(ids, nd, sizeof(*ids), ptr_uint_cmp);
		fprintf(out, "domains     samples by domain:");
		for (guint k = 0; k < nd; k++)
			fprintf(out, "%s %u: %zu", k ? "," : "", GPOINTER_TO_UINT(ids[k]),
				GPOINTER_TO_SIZE(g_hash_table_lookup(p->domain_samples, ids[k])));
		fprintf(out, "%s\n", p->by_domain ? "; sites split by domain" : "; --by-domain splits the sites");
		g_free(ids);
	}
	fprintf(out,
		"stacks      %u distinct (max depth %u); walks: clean %" PRIu64 ", unknown pc %" PRIu64
		", read error %" PRIu64 ", depth limit %" PRIu64 "\n",
		g_hash_table_size(p->stacks), m->max_frames, p->walks_by_term[CH_TERM_CLEAN],
		p->walks_by_term[CH_TERM_UNKNOWN_PC], p->walks_by_term[CH_TERM_READ_ERROR],
		p->walks_by_term[CH_TERM_DEPTH]);
	/* also when the layout check stopped it: what was written, if anything */
	if (!m->minor_off_why && !m->foreign) {
		fprintf(out,
			"minor       %" PRIu64 " samples; %" PRIu64 " %s, %" PRIu64
			" minor cycles; sample points missed %" PRIu64 ", in untracked blocks %" PRIu64 "\n",
			c[CH_CNT_MINOR_SAMPLES], c[CH_CNT_DISPATCH],
			!strcmp(m->executor, "observe") ? "blocks Gc.Memprof sampled" : "traps into caml_alloc_small_dispatch",
			c[CH_CNT_EPOCHS], c[CH_CNT_MISSED],
			c[CH_CNT_UNTRACKED]);
		if (!strcmp(m->executor, "observe"))
			fprintf(out, "executor    observe: nothing written\n");
		else if (!strcmp(m->executor, "ptrace"))
			fprintf(out,
				"executor    ptrace: %" PRIu64 " stops (%.1f us of service each), %" PRIu64
				" writes, %" PRIu64 " stale, %" PRIu64 " left to a pending action, %" PRIu64
				" errors; %" PRIu64 " of the program's own signals passed on\n",
				m->exec_stops, m->exec_stops ? m->exec_service_s * 1e6 / (double)m->exec_stops : 0.0,
				m->exec_writes, m->exec_stale, m->exec_pending, m->exec_errors, m->exec_passed_signals);
		else
			fprintf(out, "executor    kernel: %" PRIu64 " writes\n", c[CH_CNT_WRITES_KERNEL]);
		if (!strcmp(m->executor, "ptrace") && (m->exec_freezes || m->exec_freeze_timeouts))
			fprintf(out,
				"            OCaml 5: %" PRIu64 " checks and writes made with every other thread of the "
				"process stopped (no domain's interrupt can be overwritten); %" PRIu64
				" given up (a thread did not stop within 200 ms)\n",
				m->exec_freezes, m->exec_freeze_timeouts);
		if (c[CH_CNT_SIGURG_BLOCKED] || c[CH_CNT_SIGURG_HANDLED])
			fprintf(out,
				"            %" PRIu64 " writes not made for threads that block SIGURG (OCaml 5 backup "
				"threads acting for a blocked domain), %" PRIu64 " because the program handles SIGURG "
				"itself (a signal left queued by a killed camlheap would reach its handler)\n",
				c[CH_CNT_SIGURG_BLOCKED], c[CH_CNT_SIGURG_HANDLED]);
	}
	census_header(out, p, m);
	if (c[CH_CNT_MEMPROF_ACTIVE])
		fprintf(out,
			"warning     the program ran its own Gc.Memprof while recorded: camlheap never arms a minor heap "
			"under it (OCaml 5; %" PRIu64 " arms skipped), so minor-heap allocations made while it sampled "
			"are not in this profile; attach (-p) while it runs to take its own samples instead\n",
			c[CH_CNT_MEMPROF_ACTIVE]);
	if (c[CH_CNT_LAYOUT_BAD])
		fprintf(out,
			"warning     minor-heap sampling stopped: the program's domain state broke an invariant of the "
			"runtime layout camlheap took from its release (young_ptr below young_limit at a trap, "
			"young_limit as caml_update_young_limit computes it), so camlheap wrote nothing more into it; "
			"the minor-heap figures are incomplete (please report the program's OCaml release)\n");
	if (c[CH_CNT_MISSED])
		fprintf(out,
			"warning     %" PRIu64 " minor sample points were passed without a trap (%s): the minor "
			"estimates are low by about %" PRIu64 " samples\n",
			c[CH_CNT_MISSED],
			c[CH_CNT_SIGURG_HANDLED] ? "the program handles SIGURG itself, so camlheap does not stop its "
						   "threads to write young_limit"
			: c[CH_CNT_SIGURG_BLOCKED] ? "a young_limit write lost or late, or not made for a thread "
						     "that blocks SIGURG"
						   : "a young_limit write lost or late",
			c[CH_CNT_MISSED]);
	if (c[CH_CNT_SIGNAL_FAILED])
		fprintf(out, "warning     %" PRIu64 " young_limit writes could not be signalled to their thread\n",
			c[CH_CNT_SIGNAL_FAILED]);
	if (c[CH_CNT_DROPPED_SAMPLES])
		fprintf(out,
			"warning     %" PRIu64 " of %" PRIu64 " samples (%.1f %%) were dropped because camlheap did "
			"not keep up (ring buffer full): every estimate below is low by about that much and its "
			"interval does not account for it; record again at a lower --rate\n",
			c[CH_CNT_DROPPED_SAMPLES], c[CH_CNT_DROPPED_SAMPLES] + p->samples,
			100.0 * (double)c[CH_CNT_DROPPED_SAMPLES] / (double)(c[CH_CNT_DROPPED_SAMPLES] + p->samples));
	if (m->unreadable_files)
		fprintf(out,
			"warning     %u mapped file%s (possibly Dynlink plugins) could not be opened for want of "
			"file descriptors: walks through their code end as unknown pc; raise `ulimit -n`\n",
			m->unreadable_files, plural(m->unreadable_files));
	if (c[CH_CNT_CAPPED])
		fprintf(out,
			"warning     %" PRIu64 " blocks drew more than 2^23 samples each and were capped there: "
			"their sites are underestimated; use a lower --rate\n",
			c[CH_CNT_CAPPED]);
	if (c[CH_CNT_BAD_STATE])
		fprintf(out,
			"warning     %" PRIu64 " samples found Caml_state unreadable or inconsistent (young_ptr "
			"outside the minor heap): their stacks were not walked\n",
			c[CH_CNT_BAD_STATE]);
	if (p->events_without_stack)
		fprintf(out, "warning     %" PRIu64 " events refer to stacks whose frames were lost\n",
			p->events_without_stack);

	if (m->warning)
		fprintf(out, "warning     %s\n", m->warning);
	if (m->selection)
		fprintf(out, "selection   %s\n", m->selection);
	fprintf(out, "\nTop %d site%s by %s (of %zu site%s):\n", m->top, plural(m->top),
		m->value == REPORT_VALUE_LIVE   ? "estimated bytes alive at the end"
		: m->value == REPORT_VALUE_PEAK ? "peak estimated live bytes"
						: "estimated bytes",
		ngroups, plural(ngroups));
	if (!ngroups)
		fprintf(out, "\n  (no samples: %s)\n",
			hits ? "the sampled kinds of allocation were too few for this rate"
			     : minor_off(m) ? "the program made no direct major, custom or unmarshalled allocation while recorded"
						: "the program allocated nothing while recorded");
	for (size_t i = 0; i < ngroups && (int)i < m->top; i++) {
		const struct site_group *g = &groups[i];
		double lo, hi;
		GPtrArray *lines;

		char dom[32] = "";

		if (p->by_domain)
			snprintf(dom, sizeof(dom), "  domain %u", g->site->domain);
		profile_poisson_ci95(g->samples, &lo, &hi);
		fprintf(out, "\n#%zu  %s%s  %s  [95%% CI %s .. %s]  %" PRIu64 " sample%s  %.1f%%\n", i + 1,
			kind_names[g->kind], dom, report_format_bytes(est_bytes(p, g->samples), b1, sizeof(b1)),
			report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)),
			report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)), g->samples, plural(g->samples),
			p->samples > p->uncounted_samples
				? 100.0 * (double)g->samples / (double)(p->samples - p->uncounted_samples)
				: 0.0);
		site_type_line(out, p, g->site);
		if ((m->live || m->value != REPORT_VALUE_ALLOC) && m->census_on)
			site_live_line(out, p, g);
		lines = site_lines(g->site, mods);
		print_lines(out, lines);
		g_ptr_array_unref(lines);
	}
	free(groups);
	return ferror(out) ? -(errno ? errno : EIO) : 0; /* EPIPE: the reader went away */
}

int report_write_census(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	size_t ngroups = 0, nsuspects = 0, shown = 0;
	struct site_group *groups = group_sites(p, mods, &ngroups, REPORT_VALUE_LIVE);
	char b1[32], b2[32], b3[32];
	double lo, hi;

	fprintf(out,
		"camlheap census: the live sampled heap of PID %d, by allocation site; only blocks allocated "
		"after camlheap attached are in it (older ones are not sampled)\n",
		m->pid);
	fprintf(out, "target      pid %d  %s  (OCaml %s)\n", m->pid, m->exe, m->ocaml_version);
	fprintf(out, "rate        %g samples/word (one sample per %.0f words on average); executor %s\n", p->rate,
		1.0 / p->rate, m->executor);
	if (m->budget)
		fprintf(out, "budget      lambda in force: %s (kept samples weighted by 1/lambda: unbiased; intervals "
			     "assume the base rate)\n", m->budget);
	fprintf(out, "duration    %.2f s (attach took %.3f s); %s\n", m->duration_s, m->attach_s, m->end_reason);
	fprintf(out, "samples     %" PRIu64 " in %" PRIu64 " sampled blocks; dropped events %" PRIu64 " (%" PRIu64
		     " samples)\n",
		p->samples, p->events, m->counters[CH_CNT_DROPPED], m->counters[CH_CNT_DROPPED_SAMPLES]);
	if (minor_off(m))
		fprintf(out, "warning     minor-heap allocations are not sampled (%s): the census misses them\n",
			minor_off(m));
	if (m->counters[CH_CNT_DROPPED_SAMPLES])
		fprintf(out,
			"warning     %" PRIu64 " samples were dropped (ring buffer full): their blocks are not in the "
			"census; use a lower --rate\n",
			m->counters[CH_CNT_DROPPED_SAMPLES]);
	census_header(out, p, m);
	malloc_line(out, m);
	resident_line(out, p, m);
	fprintf(out, "\nLive sites by estimated live bytes (of %zu site%s; top %d):\n", ngroups, plural(ngroups),
		m->top);
	for (size_t i = 0; i < ngroups; i++)
		if (groups[i].live)
			shown++;
	if (!shown)
		fprintf(out, "\n  (no sampled block is alive: %s)\n",
			p->followed_blocks ? "every block sampled since attach has died"
					   : "nothing was sampled; wait longer (--wait-major N, --duration) or raise --rate");
	for (size_t i = 0, rank = 0; i < ngroups && (int)rank < m->top; i++) {
		const struct site_group *g = &groups[i];
		GPtrArray *lines;

		if (!g->live)
			continue;
		rank++;
		profile_poisson_ci95(g->live, &lo, &hi);
		fprintf(out, "\n#%zu  %s  live %s  [95%% CI %s .. %s]  %" PRIu64 " sample%s in %" PRIu64 " block%s\n",
			rank, kind_names[g->kind], report_format_bytes(est_bytes(p, g->live), b1, sizeof(b1)),
			report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)),
			report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)), g->live, plural(g->live),
			g->live_blocks, plural(g->live_blocks));
		fprintf(out, "    age: median %.1f major GCs", g->median_age);
		if (g->cycles >= 2)
			fprintf(out, "; leak score %s/cycle (live blocks born in %u of %u judged major cycles)%s",
				report_format_bytes(g->score, b1, sizeof(b1)), g->retaining, g->cycles,
				is_suspect(g) ? "  LEAK SUSPECT" : "");
		if (g->relocated)
			fprintf(out, "; %" PRIu64 " sample%s relocated by compaction (alive then, location unknown)",
				g->relocated, plural(g->relocated));
		fprintf(out, "\n");
		site_type_line(out, p, g->site);
		lines = site_lines(g->site, mods);
		print_lines(out, lines);
		g_ptr_array_unref(lines);
	}
	/* leak suspects, by score */
	for (size_t i = 0; i < ngroups; i++)
		nsuspects += groups[i].score > 0;
	if (p->clean_phases < 3) {
		fprintf(out,
			"\nLeak suspects: need at least 3 major cycles seen to end (saw %u); run the census "
			"longer (--wait-major 3)\n",
			p->clean_phases);
	} else {
		struct site_group *by_score = calloc(ngroups ? ngroups : 1, sizeof(*by_score));
		size_t k = 0;

		/* one cycle's survivors say nothing about a trend */
		for (size_t i = 0; by_score && i < ngroups; i++)
			if (groups[i].score > 0 && groups[i].retaining >= 2)
				by_score[k++] = groups[i];
		if (by_score)
			qsort(by_score, k, sizeof(*by_score), group_cmp_score);
		fprintf(out,
			"\nLeak suspects (score: estimated bytes per major cycle still alive from blocks born in "
			"the judged cycles (those that ended long enough ago, and in which anything was sampled), "
			"times the fraction of those cycles that left some; a LEAK SUSPECT retains in at least "
			"two thirds of them and its live estimate grows across cycles):\n");
		uint32_t most = 0;

		for (size_t i = 0; i < ngroups; i++)
			if (groups[i].cycles > most)
				most = groups[i].cycles;
		if (!k && most < 3)
			fprintf(out,
				"  too little to judge: only %u of the major cycles seen had samples and ended long "
				"enough ago (3 needed); run the census longer (--wait-major N, --duration) or at a "
				"higher --rate\n",
				most);
		else if (!k)
			fprintf(out, "  none: no site keeps blocks born in two or more of the judged cycles alive\n");
		for (size_t i = 0; i < k && i < 10; i++) {
			const struct site_group *g = &by_score[i];
			struct sym_frame fr[MAX_INLINE];
			const char *leaf = "?";
			char named[300];
			int n = 0;
			/* a malloc site by the OCaml code that called into C */
			unsigned at = g->kind == CH_KIND_MALLOC && g->site->stack && g->site->stack->nframes > 1 ? 1 : 0;

			if (g->site->stack && g->site->stack->nframes)
				n = modules_lookup(mods, g->site->stack->frames[at], at ? 0 : g->site->alloc_idx, fr,
						   MAX_INLINE);
			if (n > 0)
				leaf = fr[0].function;
			if (at && n > 0) {
				struct sym_frame lf[1];

				if (modules_lookup(mods, g->site->stack->frames[0], 0, lf, 1) > 0) {
					snprintf(named, sizeof(named), "%s <- %s", lf[0].function, fr[0].function);
					leaf = named;
				}
			}
			fprintf(out, "  %zu. %s/cycle  %s  %s (%s:%d)  retained in %u/%u cycles%s\n", i + 1,
				report_format_bytes(g->score, b1, sizeof(b1)), kind_names[g->kind], leaf,
				n > 0 && fr[0].file ? fr[0].file : "?", n > 0 ? fr[0].line : 0, g->retaining,
				g->cycles, is_suspect(g) ? "  LEAK SUSPECT" : "");
		}
		free(by_score);
	}
	free(groups);
	return ferror(out) ? -(errno ? errno : EIO) : 0;
}

/* Collapsed line key: the frames root first. */
static char *collapsed_key(const struct profile_site *s, struct modules *mods, bool by_domain)
{
	GString *g = g_string_new(NULL);
	struct sym_frame fr[MAX_INLINE];

	/* split by domain: each domain is a root of its own */
	if (by_domain)
		g_string_append_printf(g, "[domain_%u]", s->domain);
	/* markers too: a collapsed frame holds no space (the value follows
	 * the last one) */
	if (!s->stack) {
		if (g->len)
			g_string_append_c(g, ';');
		g_string_append(g, "[stack_frames_lost]");
		return g_string_free(g, FALSE);
	}
	if (s->stack->term != CH_TERM_CLEAN) {
		size_t at = g->len;

		if (g->len)
			g_string_append_c(g, ';');
		g_string_append_printf(g, "[truncated:_%s]", term_names[s->stack->term]);
		for (size_t k = at; k < g->len; k++)
			if (g->str[k] == ' ')
				g->str[k] = '_';
	}
	for (int64_t i = (int64_t)s->stack->nframes - 1; i >= 0; i--) {
		int n = modules_lookup(mods, s->stack->frames[i], i == 0 ? s->alloc_idx : 0, fr, MAX_INLINE);

		/* fr[] is innermost first; root-first order reverses it */
		for (int j = n - 1; j >= 0; j--) {
			if (g->len)
				g_string_append_c(g, ';');
			for (const char *q = fr[j].function; *q; q++)
				g_string_append_c(g, *q == ';' || *q == ' ' ? '_' : *q);
		}
	}
	if (!g->len || (by_domain && !strchr(g->str, ';') && s->stack->nframes == 0)) {
		if (g->len)
			g_string_append_c(g, ';');
		g_string_append(g, "[no_OCaml_frames]");
	}
	return g_string_free(g, FALSE);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int report_write_collapsed(FILE *out, const struct profile *p, struct modules *mods, int value)
{
	bool live = value != REPORT_VALUE_ALLOC;
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	GHashTable *lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GHashTableIter it;
	gpointer k, v;
	char **keys;
	size_t n = 0;

	for (size_t i = 0; i < nsites; i++) {
		char *key;
		uint64_t *samples;

		if (live && !(value == REPORT_VALUE_PEAK ? sites[i]->peak_live_samples : sites[i]->live_samples))
			continue;
		key = collapsed_key(sites[i], mods, p->by_domain);
		samples = g_hash_table_lookup(lines, key);

		if (!samples) {
			samples = g_new0(uint64_t, 1);
			g_hash_table_insert(lines, key, samples);
		} else {
			g_free(key);
		}
		*samples += value == REPORT_VALUE_LIVE   ? sites[i]->live_samples
			    : value == REPORT_VALUE_PEAK ? sites[i]->peak_live_samples
							 : sites[i]->samples;
	}
	keys = calloc(g_hash_table_size(lines) + 1, sizeof(*keys));
	g_hash_table_iter_init(&it, lines);
	while (keys && g_hash_table_iter_next(&it, &k, &v))
		keys[n++] = k;
	qsort(keys, n, sizeof(*keys), str_cmp);
	for (size_t i = 0; i < n; i++) {
		uint64_t *samples = g_hash_table_lookup(lines, keys[i]);

		fprintf(out, "%s %.0f\n", keys[i], est_bytes(p, *samples));
	}
	free(keys);
	g_hash_table_destroy(lines);
	free(sites);
	return ferror(out) ? -(errno ? errno : EIO) : 0; /* EPIPE: the reader went away */
}

static void json_interval(JsonBuilder *jb, const struct profile *p, uint64_t samples)
{
	double lo, hi;

	profile_poisson_ci95(samples, &lo, &hi);
	json_builder_begin_object(jb);
	json_builder_set_member_name(jb, "estimate");
	json_builder_add_double_value(jb, est_bytes(p, samples));
	json_builder_set_member_name(jb, "ci95");
	json_builder_begin_array(jb);
	json_builder_add_double_value(jb, lo / p->rate * 8.0);
	json_builder_add_double_value(jb, hi / p->rate * 8.0);
	json_builder_end_array(jb);
	json_builder_end_object(jb);
}

int report_write_json(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	JsonBuilder *jb = json_builder_new();
	JsonGenerator *gen = json_generator_new();
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	GHashTable *stack_ix = g_hash_table_new(g_int64_hash, g_int64_equal);
	GPtrArray *stacks = g_ptr_array_new();
	const uint64_t *c = m->counters;
	JsonNode *root;
	gchar *text;
	int ret = 0;

	/* stacks in first-use order (sites are sorted by samples) */
	for (size_t i = 0; i < nsites && !m->json_no_stacks; i++)
		if (sites[i]->stack && !g_hash_table_contains(stack_ix, &sites[i]->stack->id)) {
			g_hash_table_insert(stack_ix, (gpointer)&sites[i]->stack->id, GUINT_TO_POINTER(stacks->len));
			g_ptr_array_add(stacks, (gpointer)sites[i]);
		}

	json_builder_begin_object(jb);
	json_member_str(jb, "format", "camlheap-report");
	json_member_int(jb, "version", 2);

	json_builder_set_member_name(jb, "run");
	json_builder_begin_object(jb);
	json_member_int(jb, "pid", m->pid);
	json_member_str(jb, "executable", m->exe);
	json_member_str(jb, "ocaml_version", m->ocaml_version);
	json_member_str(jb, "command", m->command);
	json_member_double(jb, "rate", p->rate);
	json_member_str(jb, "budget", m->budget);
	json_member_str(jb, "executor", m->executor);
	json_member_str(jb, "minor_not_sampled_because", minor_off(m));
	json_member_str(jb, "unmarshal_not_sampled_because", m->unmarshal_off_why);
	if (!minor_off(m) && !m->foreign) {
		json_builder_set_member_name(jb, "minor");
		json_builder_begin_object(jb);
		json_member_int(jb, "samples", (int64_t)c[CH_CNT_MINOR_SAMPLES]);
		json_member_int(jb, "traps", (int64_t)c[CH_CNT_DISPATCH]);
		json_member_int(jb, "cycles", (int64_t)c[CH_CNT_EPOCHS]);
		json_member_int(jb, "missed", (int64_t)c[CH_CNT_MISSED]);
		json_member_int(jb, "untracked", (int64_t)c[CH_CNT_UNTRACKED]);
		json_member_int(jb, "not_armed_sigurg_blocked", (int64_t)c[CH_CNT_SIGURG_BLOCKED]);
		json_member_int(jb, "not_armed_sigurg_handled", (int64_t)c[CH_CNT_SIGURG_HANDLED]);
		json_builder_end_object(jb);
	}
	json_member_int(jb, "start_unix_ns", m->start_unix_ns);
	json_member_double(jb, "duration_s", m->duration_s);
	json_member_double(jb, "attach_s", m->attach_s);
	json_member_str(jb, "end_reason", m->end_reason);
	json_member_int(jb, "max_depth", m->max_frames);
	json_builder_end_object(jb);

	json_builder_set_member_name(jb, "totals");
	json_builder_begin_object(jb);
	json_member_int(jb, "samples", (int64_t)p->samples);
	json_member_int(jb, "sampled_blocks", (int64_t)p->events);
	json_member_int(jb, "dropped_samples", (int64_t)c[CH_CNT_DROPPED_SAMPLES]);
	json_builder_set_member_name(jb, "samples_by_kind");
	json_builder_begin_object(jb);
	for (int k = 0; k < CH_KIND__COUNT; k++)
		json_member_int(jb, kind_names[k], (int64_t)p->samples_by_kind[k]);
	json_builder_end_object(jb);
	{
		GHashTableIter it;
		gpointer k, v;

		json_builder_set_member_name(jb, "samples_by_domain");
		json_builder_begin_object(jb);
		g_hash_table_iter_init(&it, p->domain_samples);
		while (g_hash_table_iter_next(&it, &k, &v)) {
			char name[16];

			snprintf(name, sizeof(name), "%u", GPOINTER_TO_UINT(k));
			json_member_int(jb, name, (int64_t)GPOINTER_TO_SIZE(v));
		}
		json_builder_end_object(jb);
	}
	json_builder_set_member_name(jb, "observed_words");
	json_builder_begin_object(jb);
	json_member_int(jb, "major", (int64_t)c[CH_CNT_WORDS_MAJOR]);
	json_member_int(jb, "custom", (int64_t)c[CH_CNT_WORDS_CUSTOM]);
	json_member_int(jb, "unmarshal", (int64_t)c[CH_CNT_WORDS_UNMARSHAL]);
	json_member_int(jb, "bigarray", (int64_t)c[CH_CNT_WORDS_BIGARRAY]);
	json_member_int(jb, "bigarray_arrays", (int64_t)c[CH_CNT_HITS_BIGARRAY]);
	if (m->malloc_libc) {
		json_member_int(jb, "malloc_bytes", (int64_t)c[CH_CNT_BYTES_MALLOC]);
		json_member_int(jb, "malloc_calls", (int64_t)c[CH_CNT_HITS_MALLOC]);
		json_member_int(jb, "free_calls", (int64_t)c[CH_CNT_HITS_FREE]);
		json_member_int(jb, "malloc_runtime_calls", (int64_t)c[CH_CNT_MALLOC_RUNTIME]);
		json_member_int(jb, "mmap_libc_calls", (int64_t)c[CH_CNT_MMAP_LIBC]);
		json_member_int(jb, "malloc_outside_samples", (int64_t)c[CH_CNT_MALLOC_OUTSIDE]);
	}
	json_builder_end_object(jb);
	{
		struct resident_split r;

		resident_split(p, m, &r);
		if (r.known) {
			json_builder_set_member_name(jb, "resident");
			json_builder_begin_object(jb);
			json_member_int(jb, "rss_bytes", (int64_t)r.rss);
			json_member_int(jb, "peak_rss_bytes", (int64_t)r.hwm);
			json_member_str(jb, "when", m->rss_when ? m->rss_when : "read at the end");
			json_builder_set_member_name(jb, "ocaml_heap_bytes");
			if (r.heap >= 0)
				json_builder_add_int_value(jb, (int64_t)r.heap);
			else
				json_builder_add_null_value(jb);
			if (r.live_known) {
				json_builder_set_member_name(jb, "live_bytes_estimate");
				json_builder_begin_object(jb);
				json_member_int(jb, "bigarray", (int64_t)r.live[CH_KIND_BIGARRAY]);
				if (r.malloc_on)
					json_member_int(jb, "malloc", (int64_t)r.live[CH_KIND_MALLOC]);
				json_member_int(jb, "custom_declared", (int64_t)r.live[CH_KIND_CUSTOM]);
				json_builder_end_object(jb);
				json_member_int(jb, "unexplained_bytes", (int64_t)r.unexplained);
			}
			json_builder_end_object(jb);
		}
	}
	json_builder_set_member_name(jb, "walks");
	json_builder_begin_object(jb);
	for (int t = 0; t < CH_TERM__COUNT; t++)
		json_member_int(jb, term_names[t], (int64_t)p->walks_by_term[t]);
	json_builder_end_object(jb);
	json_builder_end_object(jb);

	json_builder_set_member_name(jb, "census");
	if (!m->census_on) {
		json_builder_add_null_value(jb);
	} else {
		json_builder_begin_object(jb);
		json_member_int(jb, "followed_blocks", (int64_t)p->followed_blocks);
		json_member_int(jb, "born_in_minor_heap", (int64_t)p->followed_minor_blocks);
		json_member_int(jb, "promoted", (int64_t)p->promoted_blocks);
		json_member_int(jb, "dead_minor", (int64_t)p->dead_minor_blocks);
		json_member_int(jb, "dead_major", (int64_t)p->dead_major_blocks);
		json_member_int(jb, "freed", (int64_t)p->freed_blocks);
		json_member_int(jb, "relocated", (int64_t)p->relocated_blocks);
		json_member_int(jb, "not_followed", (int64_t)(p->unfollowed_blocks + p->unknown_fate_blocks));
		json_member_int(jb, "orphan_fates", (int64_t)p->orphan_fates);
		json_member_int(jb, "clean_phases", p->clean_phases);
		json_member_int(jb, "live_samples", (int64_t)p->live_samples);
		json_member_int(jb, "live_blocks", g_hash_table_size(p->blocks));
		json_builder_set_member_name(jb, "live_bytes");
		json_interval(jb, p, p->live_samples);
		json_member_double(jb, "peak_live_bytes", est_bytes(p, p->peak_live_samples));
		json_builder_end_object(jb);
	}

	/* frames once each (by return address and place in its inline
	 * chain), stacks as lists of indices: deep stacks share most frames */
	{
		GHashTable *fix = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
		GArray *order = g_array_new(FALSE, FALSE, sizeof(uint64_t));

		json_builder_set_member_name(jb, "stacks");
		json_builder_begin_array(jb);
		for (guint i = 0; i < stacks->len; i++) {
			const struct profile_site *s = stacks->pdata[i];
			struct sym_frame fr[MAX_INLINE];
			char id[32];

			json_builder_begin_object(jb);
			snprintf(id, sizeof(id), "%016" PRIx64, s->stack->id);
			json_member_str(jb, "id", id);
			json_member_str(jb, "walk", term_names[s->stack->term]);
			json_builder_set_member_name(jb, "frames");
			json_builder_begin_array(jb);
			for (uint32_t j = 0; j < s->stack->nframes; j++) {
				/* the leaf is shown for each Comballoc index by its site */
				int n = modules_lookup(mods, s->stack->frames[j], 0, fr, MAX_INLINE);

				for (int k = 0; k < n; k++) {
					uint64_t key = s->stack->frames[j] * MAX_INLINE + (uint64_t)k;
					gpointer v;

					if (!g_hash_table_lookup_extended(fix, &key, NULL, &v)) {
						v = GUINT_TO_POINTER(order->len);
						g_hash_table_insert(fix, g_memdup2(&key, sizeof(key)), v);
						g_array_append_val(order, key);
					}
					json_builder_add_int_value(jb, GPOINTER_TO_UINT(v));
				}
			}
			json_builder_end_array(jb);
			json_builder_end_object(jb);
		}
		json_builder_end_array(jb);
		json_builder_set_member_name(jb, "frames");
		json_builder_begin_array(jb);
		for (guint i = 0; i < order->len; i++) {
			uint64_t key = g_array_index(order, uint64_t, i), pc = key / MAX_INLINE;
			struct sym_frame fr[MAX_INLINE];
			int k = (int)(key % MAX_INLINE), n = modules_lookup(mods, pc, 0, fr, MAX_INLINE);
			char pcs[32];

			json_builder_begin_object(jb);
			if (k < n) {
				json_member_str(jb, "function", fr[k].function);
				json_member_str(jb, "file", fr[k].file);
				json_member_int(jb, "line", fr[k].line);
				json_member_int(jb, "column", fr[k].column);
				json_builder_set_member_name(jb, "inlined");
				json_builder_add_boolean_value(jb, fr[k].inlined);
			}
			snprintf(pcs, sizeof(pcs), "0x%" PRIx64, pc);
			json_member_str(jb, "pc", pcs);
			json_builder_end_object(jb);
		}
		json_builder_end_array(jb);
		g_array_free(order, TRUE);
		g_hash_table_destroy(fix);
	}

	json_builder_set_member_name(jb, "sites");
	json_builder_begin_array(jb);
	for (size_t i = 0; i < nsites; i++) {
		const struct profile_site *s = sites[i];
		struct sym_frame fr[MAX_INLINE];

		json_builder_begin_object(jb);
		json_member_str(jb, "kind", kind_names[s->kind]);
		if (s->kind == CH_KIND_CUSTOM && profile_custom_name(p, s->subtype))
			json_member_str(jb, "custom_type", profile_custom_name(p, s->subtype));
		if (s->kind == CH_KIND_BIGARRAY)
			json_member_str(jb, "bigarray_data", report_bigarray_owner(s->subtype));
		if (s->kind == CH_KIND_MALLOC) {
			json_builder_set_member_name(jb, "outside_ocaml");
			json_builder_add_boolean_value(jb, (s->subtype & CH_MALLOC_OUTSIDE) != 0);
		}
		json_builder_set_member_name(jb, "stack");
		if (s->stack && !m->json_no_stacks)
			json_builder_add_int_value(jb, GPOINTER_TO_UINT(g_hash_table_lookup(stack_ix, &s->stack->id)));
		else
			json_builder_add_null_value(jb);
		json_member_int(jb, "alloc_index", s->alloc_idx);
		if (p->by_domain)
			json_member_int(jb, "domain", s->domain);
		json_builder_set_member_name(jb, "allocation");
		json_builder_begin_object(jb);
		if (s->stack && s->stack->nframes &&
		    modules_lookup(mods, s->stack->frames[0], s->alloc_idx, fr, MAX_INLINE) > 0) {
			json_member_str(jb, "function", fr[0].function);
			json_member_str(jb, "file", fr[0].file);
			json_member_int(jb, "line", fr[0].line);
		}
		json_builder_end_object(jb);
		if (s->kind == CH_KIND_MALLOC && s->stack && s->stack->nframes > 1 &&
		    modules_lookup(mods, s->stack->frames[1], 0, fr, MAX_INLINE) > 0) {
			/* the OCaml code that called into C */
			json_builder_set_member_name(jb, "caller");
			json_builder_begin_object(jb);
			json_member_str(jb, "function", fr[0].function);
			json_member_str(jb, "file", fr[0].file);
			json_member_int(jb, "line", fr[0].line);
			json_builder_end_object(jb);
		}
		json_member_int(jb, "samples", (int64_t)s->samples);
		json_member_int(jb, "sampled_blocks", (int64_t)s->events);
		json_builder_set_member_name(jb, "bytes");
		json_interval(jb, p, s->samples);
		json_member_double(jb, "objects_estimate", s->est_objects);
		if (m->census_on) {
			json_builder_set_member_name(jb, "live");
			json_builder_begin_object(jb);
			json_member_int(jb, "samples", (int64_t)s->live_samples);
			json_member_int(jb, "blocks", (int64_t)s->live_blocks);
			json_builder_set_member_name(jb, "bytes");
			json_interval(jb, p, s->live_samples);
			json_member_double(jb, "peak_bytes", est_bytes(p, s->peak_live_samples));
			json_member_int(jb, "promoted", (int64_t)s->promoted_blocks);
			json_member_int(jb, "died", (int64_t)(s->dead_minor_blocks + s->dead_major_blocks));
			json_member_double(jb, "dead_lifetime_s_sum", s->dead_lifetime_s);
			json_member_int(jb, "relocated_samples", (int64_t)s->relocated_samples);
			json_builder_end_object(jb);
		}
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
	json_builder_end_object(jb);

	root = json_builder_get_root(jb);
	json_generator_set_root(gen, root);
	/* compact: a pretty-printed stack of indices takes a line each */
	json_generator_set_pretty(gen, FALSE);
	text = json_generator_to_data(gen, NULL);
	if (fputs(text, out) == EOF || fputc('\n', out) == EOF)
		ret = -(errno ? errno : EIO);
	g_free(text);
	json_node_unref(root);
	g_object_unref(gen);
	g_object_unref(jb);
	g_hash_table_destroy(stack_ix);
	g_ptr_array_free(stacks, TRUE);
	free(sites);
	if (!ret && ferror(out))
		ret = -(errno ? errno : EIO);
	return ret;
}

/* ---- one dispatch for every format ----------------------------------- */

/* flamegraph.pl: $CAMLHEAP_FLAMEGRAPH, else on PATH, else the copy Debian
 * ships in libdevel-nytprof-perl.  NULL if none. */
static const char *flamegraph_script(char *buf, size_t len)
{
	static const char *const fixed[] = { "/usr/share/perl5/Devel/NYTProf/flamegraph.pl",
					     "/usr/local/share/perl5/Devel/NYTProf/flamegraph.pl" };
	const char *env = getenv("CAMLHEAP_FLAMEGRAPH"), *path = getenv("PATH");

	if (env && *env)
		return access(env, R_OK) == 0 ? env : NULL;
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);

		if (n && (size_t)snprintf(buf, len, "%.*s/flamegraph.pl", (int)n, path) < len && access(buf, R_OK) == 0)
			return buf;
		path = colon ? colon + 1 : NULL;
	}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (access(fixed[i], R_OK) == 0)
			return fixed[i];
	return NULL;
}

/* Interactive flame graph (click to zoom, search) through flamegraph.pl
 * --colors mem, from the collapsed stacks of m->value.  Every stack is
 * given, so widths and percentages are of the true total; frames narrower
 * than a pixel are not drawn (flamegraph.pl --minwidth), which keeps
 * browsers fast on programs with tens of thousands of stacks.  Deep stacks
 * (over 60 frames) are drawn as an icicle, roots at the top, so that the
 * part that matters is where the page opens. */
static int write_svg(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	char script_buf[PATH_MAX], tmpl[] = "/tmp/camlheap-svg-XXXXXX", title[768];
	const char *script = flamegraph_script(script_buf, sizeof(script_buf));
	FILE *in;
	int fd, ret = 0, status;
	unsigned depth = 0, nlines = 0;
	pid_t pid;

	if (!script) {
		fprintf(stderr, "camlheap: --format svg needs flamegraph.pl: install Debian's libdevel-nytprof-perl "
				"(it ships one), put flamegraph.pl on PATH, or set CAMLHEAP_FLAMEGRAPH to its path\n");
		return -ENOENT;
	}
	fd = mkstemp(tmpl);
	if (fd < 0)
		return -errno;
	unlink(tmpl);
	in = fdopen(fd, "w+");
	if (!in) {
		close(fd);
		return -ENOMEM;
	}
	ret = report_write_collapsed(in, p, mods, m->value);
	if (ret == 0 && fflush(in) == EOF)
		ret = -EIO;
	if (ret < 0) {
		fclose(in);
		return ret;
	}
	{
		char *line = NULL;
		size_t cap = 0;

		rewind(in);
		while (getline(&line, &cap, in) > 0) {
			unsigned d = 1;

			for (const char *c = line; *c; c++)
				d += *c == ';';
			if (d > depth)
				depth = d;
			nlines++;
		}
		free(line);
	}
	if (!nlines) {
		fclose(in);
		fprintf(stderr, "camlheap: nothing to draw: no %s bytes in this profile%s\n",
			m->value == REPORT_VALUE_ALLOC ? "allocated" : "live",
			m->selection ? " (after the selection)" : "");
		return -ENODATA;
	}
	snprintf(title, sizeof(title), "camlheap: %s, %s (pid %d)%s%s%s",
		 m->value == REPORT_VALUE_LIVE   ? "bytes alive at the end"
		 : m->value == REPORT_VALUE_PEAK ? "each site's own peak live bytes, summed (sites peak at different times)"
						 : "allocated bytes",
		 m->exe ? m->exe : "?", m->pid, m->selection ? " - " : "", m->selection ? m->selection : "",
		 depth > 60 ? " - icicle: roots at the top" : "");
	rewind(in);
	fflush(out);
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		fclose(in);
		return ret;
	}
	if (pid == 0) {
		const char *argv[20];
		int a = 0;

		dup2(fileno(in), 0);
		dup2(fileno(out), 1);
		argv[a++] = "perl";
		argv[a++] = script;
		argv[a++] = "--title";
		argv[a++] = title;
		argv[a++] = "--countname";
		argv[a++] = "bytes";
		argv[a++] = "--nametype";
		argv[a++] = "Site:";
		argv[a++] = "--colors";
		argv[a++] = "mem";
		argv[a++] = "--hash";
		argv[a++] = "--minwidth";
		argv[a++] = "1";
		if (depth > 60)
			argv[a++] = "--inverted";
		argv[a] = NULL;
		execvp("perl", (char *const *)argv);
		fprintf(stderr, "camlheap: cannot run perl %s: %s\n", script, strerror(errno));
		_exit(127);
	}
	fclose(in);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "camlheap: %s failed (status %d)\n", script, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -EIO;
	}
	/* the child wrote to the file descriptor: move our stream past it */
	fseeko(out, 0, SEEK_END);
	return 0;
}

int report_render(FILE *out, enum report_format format, bool census, const struct profile *p,
		  const struct report_meta *m, struct modules *mods)
{
	if (census)
		return report_write_census(out, p, m, mods);
	switch (format) {
	case REPORT_COLLAPSED:
		return report_write_collapsed(out, p, mods, m->value);
	case REPORT_JSON:
		return report_write_json(out, p, m, mods);
	case REPORT_SVG:
		return write_svg(out, p, m, mods);
	case REPORT_PPROF: {
		char comment[1536];
		struct pprof_meta pm = {
			.time_nanos = m->start_unix_ns,
			.duration_nanos = (int64_t)(m->duration_s * 1e9),
			.census = m->census_on,
			.exe_path = m->exe,
			.build_id = m->build_id,
			.default_type = m->value == REPORT_VALUE_ALLOC && m->census_on ? "alloc_space" : NULL,
			.comment = comment,
		};

		snprintf(comment, sizeof(comment), "camlheap record of PID %d (%s, OCaml %s), rate %g, executor %s%s%s%s%s%s%s",
			 m->pid, m->exe, m->ocaml_version, p->rate, m->executor,
			 minor_off(m) ? "; minor heap not sampled: " : "", minor_off(m) ? minor_off(m) : "",
			 m->selection ? "; " : "", m->selection ? m->selection : "",
			 m->budget ? "; overhead budget, lambda in force: " : "", m->budget ? m->budget : "");
		return pprof_write(out, p, mods, &pm);
	}
	case REPORT_TEXT:
	default:
		return report_write_text(out, p, m, mods);
	}
}
