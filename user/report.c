/* report.c -- see report.h. */
#define _GNU_SOURCE
#include "report.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <glib.h>

static const char *const kind_names[CH_KIND__COUNT] = {
	[CH_KIND_MINOR] = "minor",
	[CH_KIND_MAJOR] = "major",
	[CH_KIND_CUSTOM] = "custom",
	[CH_KIND_UNMARSHAL] = "unmarshal",
};

static const char *const term_names[CH_TERM__COUNT] = {
	[CH_TERM_CLEAN] = "clean",
	[CH_TERM_UNKNOWN_PC] = "unknown pc",
	[CH_TERM_READ_ERROR] = "read error",
	[CH_TERM_DEPTH] = "depth limit",
};

#define MAX_INLINE 16

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

static void print_frames(FILE *out, const struct profile_stack *st, struct modules *mods)
{
	struct sym_frame fr[MAX_INLINE];

	for (uint32_t i = 0; i < st->nframes; i++) {
		int n = modules_lookup(mods, st->frames[i], 0, fr, MAX_INLINE);

		for (int j = 0; j < n; j++) {
			fprintf(out, "      %s", fr[j].function);
			if (fr[j].file && fr[j].line)
				fprintf(out, " (%s:%d)", fr[j].file, fr[j].line);
			else if (fr[j].file)
				fprintf(out, " (%s)", fr[j].file);
			if (fr[j].inlined)
				fprintf(out, " [inlined]");
			fputc('\n', out);
		}
	}
	if (st->term != CH_TERM_CLEAN)
		fprintf(out, "      [stack walk ended: %s]\n", term_names[st->term]);
}

int report_write_text(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	const uint64_t *c = m->counters;
	char b1[32], b2[32], b3[32], b4[32];
	double total = 0;

	fprintf(out,
		"camlheap: minor-heap allocations are not sampled; this profile covers direct major, custom "
		"(out-of-heap) and unmarshalled allocations only\n");
	fprintf(out, "target      pid %d  %s  (OCaml %s)\n", m->pid, m->exe, m->ocaml_version);
	if (m->command)
		fprintf(out, "command     %s\n", m->command);
	fprintf(out, "rate        %g samples/word (one sample per %.0f words on average)\n", p->rate,
		p->rate > 0 ? 1.0 / p->rate : 0.0);
	fprintf(out, "duration    %.2f s (attach took %.3f s); %s\n", m->duration_s, m->attach_s, m->end_reason);
	fprintf(out, "samples     %" PRIu64 " in %" PRIu64 " sampled blocks; dropped events %" PRIu64 " (%" PRIu64
		     " samples)\n",
		p->samples, p->events, c[CH_CNT_DROPPED], c[CH_CNT_DROPPED_SAMPLES]);
	fprintf(out, "sampler     %s; %u/%u probes on emulated instructions; %u Dynlink plugins\n",
		m->sampler_mode, m->probes_emulated, m->probes_total, m->plugins);
	fprintf(out, "profiler    camlheap used %.2f s of CPU, peak RSS %.1f MiB\n", m->cpu_s, m->max_rss_mib);
	for (int k = CH_KIND_MAJOR; k < CH_KIND__COUNT; k++)
		total += est_bytes(p, p->samples_by_kind[k]);
	fprintf(out, "allocated   estimated %s: major %s, custom %s, unmarshal %s\n",
		report_format_bytes(total, b1, sizeof(b1)),
		report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_MAJOR]), b2, sizeof(b2)),
		report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_CUSTOM]), b3, sizeof(b3)),
		report_format_bytes(est_bytes(p, p->samples_by_kind[CH_KIND_UNMARSHAL]), b4, sizeof(b4)));
	fprintf(out,
		"observed    by the probes (exact, not estimated): major %" PRIu64 " words in %" PRIu64
		" blocks, custom %" PRIu64 " words, unmarshal %" PRIu64 " words\n",
		c[CH_CNT_WORDS_MAJOR], c[CH_CNT_HITS_MAJOR], c[CH_CNT_WORDS_CUSTOM], c[CH_CNT_WORDS_UNMARSHAL]);
	fprintf(out,
		"stacks      %u distinct (max depth %u); walks: clean %" PRIu64 ", unknown pc %" PRIu64
		", read error %" PRIu64 ", depth limit %" PRIu64 "\n",
		g_hash_table_size(p->stacks), m->max_frames, p->walks_by_term[CH_TERM_CLEAN],
		p->walks_by_term[CH_TERM_UNKNOWN_PC], p->walks_by_term[CH_TERM_READ_ERROR],
		p->walks_by_term[CH_TERM_DEPTH]);
	if (m->counters[CH_CNT_BAD_STATE])
		fprintf(out,
			"warning     %" PRIu64 " samples found Caml_state unreadable or inconsistent (young_ptr "
			"outside the minor heap): their stacks were not walked\n",
			m->counters[CH_CNT_BAD_STATE]);
	if (p->events_without_stack)
		fprintf(out, "warning     %" PRIu64 " events refer to stacks whose frames were lost\n",
			p->events_without_stack);

	fprintf(out, "\nTop %d sites by estimated bytes (of %zu sites):\n", m->top, nsites);
	if (!nsites)
		fprintf(out, "\n  (no samples: the program made no sampled allocation at this rate)\n");
	for (size_t i = 0; i < nsites && (int)i < m->top; i++) {
		const struct profile_site *s = sites[i];
		double lo, hi;

		profile_poisson_ci95(s->samples, &lo, &hi);
		fprintf(out, "\n#%zu  %s  %s  [95%% CI %s .. %s]  %" PRIu64 " samples  %.1f%%\n", i + 1,
			kind_names[s->kind], report_format_bytes(est_bytes(p, s->samples), b1, sizeof(b1)),
			report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)),
			report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)), s->samples,
			p->samples ? 100.0 * (double)s->samples / (double)p->samples : 0.0);
		if (!s->stack)
			fprintf(out, "      [stack frames lost]\n");
		else if (s->stack->nframes == 0)
			fprintf(out, "      [no OCaml frames: %s]\n",
				s->stack->term == CH_TERM_UNKNOWN_PC ? "allocated by the runtime before or outside OCaml code"
								     : term_names[s->stack->term]);
		else
			print_frames(out, s->stack, mods);
	}
	free(sites);
	return ferror(out) ? -EIO : 0;
}

/* Collapsed line key: the frames root first. */
static char *collapsed_key(const struct profile_site *s, struct modules *mods)
{
	GString *g = g_string_new(NULL);
	struct sym_frame fr[MAX_INLINE];

	if (!s->stack) {
		g_string_append(g, "[stack frames lost]");
		return g_string_free(g, FALSE);
	}
	if (s->stack->term != CH_TERM_CLEAN)
		g_string_append_printf(g, "[truncated: %s]", term_names[s->stack->term]);
	for (int64_t i = (int64_t)s->stack->nframes - 1; i >= 0; i--) {
		int n = modules_lookup(mods, s->stack->frames[i], 0, fr, MAX_INLINE);

		/* fr[] is innermost first; root-first order reverses it */
		for (int j = n - 1; j >= 0; j--) {
			if (g->len)
				g_string_append_c(g, ';');
			for (const char *q = fr[j].function; *q; q++)
				g_string_append_c(g, *q == ';' || *q == ' ' ? '_' : *q);
		}
	}
	if (!g->len)
		g_string_append(g, "[no OCaml frames]");
	return g_string_free(g, FALSE);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int report_write_collapsed(FILE *out, const struct profile *p, struct modules *mods)
{
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	GHashTable *lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GHashTableIter it;
	gpointer k, v;
	char **keys;
	size_t n = 0;

	for (size_t i = 0; i < nsites; i++) {
		char *key = collapsed_key(sites[i], mods);
		uint64_t *samples = g_hash_table_lookup(lines, key);

		if (!samples) {
			samples = g_new0(uint64_t, 1);
			g_hash_table_insert(lines, key, samples);
		} else {
			g_free(key);
		}
		*samples += sites[i]->samples;
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
	return ferror(out) ? -EIO : 0;
}
