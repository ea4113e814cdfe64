/* report_text.c -- the text report of `record` and `report`, and the
 * census report of `camlheap census` (report.h). */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

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

static void resident_line(FILE *out, const struct profile *p, const struct report_meta *m)
{
	struct resident_split r;
	char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];

	report_resident_split(p, m, &r);
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
			p->followed_blocks, report_plural(p->followed_blocks), p->followed_minor_blocks, p->promoted_blocks,
			p->dead_minor_blocks, p->dead_major_blocks);
		goto live;
	}
	fprintf(out,
		"census      %" PRIu64 " sampled block%s followed (%" PRIu64 " born in the minor heap): %" PRIu64 " promoted, %" PRIu64
		" died in the minor heap, %" PRIu64 " in the major heap; %" PRIu64 " minor and %" PRIu64
		" major collections seen (%u reached their clean phase)\n",
		p->followed_blocks, report_plural(p->followed_blocks), p->followed_minor_blocks, p->promoted_blocks, p->dead_minor_blocks,
		p->dead_major_blocks, c[CH_CNT_MINOR_UPDATES], c[CH_CNT_CLEAN_PHASES], p->clean_phases);
	if (p->freed_blocks)
		fprintf(out, "freed       %" PRIu64 " malloc'ed sampled block%s seen freed (free, realloc, munmap)\n",
			p->freed_blocks, report_plural(p->freed_blocks));
	fprintf(out,
		"gc hooks    minor collections: %.3f ms for %" PRIu64 " young entries checked; clean phases: %.3f ms "
		"for %" PRIu64 " major entries checked (BPF time in the target)\n",
		(double)c[CH_CNT_CENSUS_MINOR_NS] / 1e6, c[CH_CNT_YOUNG_CHECKED], (double)c[CH_CNT_CENSUS_MAJOR_NS] / 1e6,
		c[CH_CNT_MAJOR_CHECKED]);
	if (c[CH_CNT_FATES_DEFERRED] || m->fates_drained)
		fprintf(out,
			"note        %" PRIu64 " fate event%s found the ring buffer full: sent at a later collection, "
			"and %" PRIu64 " read from the kernel's tracking set at the end (nothing lost)\n",
			c[CH_CNT_FATES_DEFERRED], report_plural(c[CH_CNT_FATES_DEFERRED]), m->fates_drained);
live:
	profile_poisson_ci95(p->live_samples, &lo, &hi);
	fprintf(out,
		"live        at the end: estimated %s [95%% CI %s .. %s] in %u sampled block%s; peak %s at %.2f s\n",
		report_format_bytes(report_est_bytes(p, p->live_samples), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		g_hash_table_size(p->blocks), report_plural(g_hash_table_size(p->blocks)),
		report_format_bytes(report_est_bytes(p, p->peak_live_samples), b4, sizeof(b4)),
		p->peak_ns > (p->zero_ns ? p->zero_ns : p->first_ns)
			? (double)(p->peak_ns - (p->zero_ns ? p->zero_ns : p->first_ns)) / 1e9
			: 0.0);
	if (p->relocated_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s moved by a compaction (%" PRIu64
			" seen): they were alive then and are counted live since, location unknown, their "
			"deaths no longer seen; %s\n",
			p->relocated_blocks, report_plural(p->relocated_blocks), c[CH_CNT_COMPACTIONS],
			m->ocaml_version && m->ocaml_version[0] == '5'
				? "on OCaml 5 a compaction runs only at Gc.compact ()"
				: "a compaction runs at Gc.compact () and, automatically, when the heap is fragmented: "
				  "OCAMLRUNPARAM=O=1000000 disables the automatic one");
	if (p->unfollowed_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s could not be followed (tracking set full): "
			"counted live since; raise --max-tracked\n",
			p->unfollowed_blocks, report_plural(p->unfollowed_blocks));
	if (c[CH_CNT_FATE_STALE])
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s met a collection or compaction that no probe saw "
			"(%s): fate unknown, counted live\n",
			c[CH_CNT_FATE_STALE], report_plural(c[CH_CNT_FATE_STALE]),
			m->ocaml_version && m->ocaml_version[0] == '5'
				? "camlheap was still attaching, or young blocks of a domain that ended before its next "
				  "minor collection, judged when another domain took its id"
				: "camlheap was still attaching");
	if (p->unknown_fate_blocks)
		fprintf(out,
			"warning     %" PRIu64 " sampled block%s had an unreadable header at a collection: fate "
			"unknown, counted live\n",
			p->unknown_fate_blocks, report_plural(p->unknown_fate_blocks));
	if (p->orphan_fates)
		fprintf(out,
			"warning     %" PRIu64 " fate event%s named a block never seen (its allocation event was "
			"lost): counted here, not subtracted\n",
			p->orphan_fates, report_plural(p->orphan_fates));
}

/* record --live: a site's live figures, under its header line. */
static void site_live_line(FILE *out, const struct profile *p, const struct site_group *g, bool point)
{
	char b1[32], b2[32], b3[32], b4[32];
	double lo, hi;
	uint64_t dead = g->dead;

	profile_poisson_ci95(g->live, &lo, &hi);
	fprintf(out, "    live at end %s [95%% CI %s .. %s] %" PRIu64 " sample%s in %" PRIu64 " block%s; peak live %s%s",
		report_format_bytes(report_est_bytes(p, g->live), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		g->live, report_plural(g->live), g->live_blocks, report_plural(g->live_blocks),
		point ? "at most " : "", report_format_bytes(report_est_bytes(p, g->peak), b4, sizeof(b4)));
	if (g->kind == CH_KIND_MINOR)
		fprintf(out, "; %" PRIu64 " of %" PRIu64 " sampled blocks promoted", g->promoted, g->followed);
	if (g->unfollowed)
		fprintf(out, "; %" PRIu64 " live sample%s no longer followed (counted live)", g->unfollowed,
			report_plural(g->unfollowed));
	if (g->relocated)
		fprintf(out, "; %" PRIu64 " live sample%s relocated by compaction", g->relocated, report_plural(g->relocated));
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

/* The first line: who wrote young_limit, and which allocations are
 * sampled (and why the others are not). */
static void text_scope_line(FILE *out, const struct report_meta *m)
{
	if (m->foreign)
		fprintf(out, "camlheap: a memtrace trace written inside the program (Gc.Memprof samples every allocation); "
			     "camlheap's own probe figures do not apply\n");
	else if (!report_minor_off(m) && !m->unmarshal_off_why)
		fprintf(out,
			"camlheap: executor %s; every allocation is sampled: minor heap (%s), "
			"direct major, custom (out-of-heap) and unmarshalled\n",
			m->executor, m->minor_source ? m->minor_source : "young_limit traps");
	else if (!report_minor_off(m))
		fprintf(out,
			"camlheap: executor %s; allocations are sampled in the minor heap (%s), direct major and "
			"custom (out-of-heap), but not unmarshalled blocks (%s)\n",
			m->executor, m->minor_source ? m->minor_source : "young_limit traps", m->unmarshal_off_why);
	else if (!m->unmarshal_off_why)
		fprintf(out,
			"camlheap: executor %s; minor-heap allocations are not sampled (%s); this profile covers "
			"direct major, custom (out-of-heap) and unmarshalled allocations only\n",
			m->executor, report_minor_off(m));
	else
		fprintf(out,
			"camlheap: executor %s; minor-heap allocations are not sampled (%s), nor unmarshalled "
			"blocks (%s); this profile covers direct major and custom (out-of-heap) allocations only\n",
			m->executor, report_minor_off(m), m->unmarshal_off_why);
}

/* target, command, rate, budget, duration, samples, sampler, profiler. */
/* The report's "duration" line: the one window every figure covers, how
 * it opened, what the attach cost.  A recording older than the window
 * (no window_how, duration > 0) gets the line it always had. */
static void report_window_line(FILE *out, const struct report_meta *m)
{
	if (!m->window_how && m->duration_s > 0) {
		fprintf(out, "duration    %.2f s (attach took %.3f s); %s\n", m->duration_s, m->attach_s, m->end_reason);
		return;
	}
	if (!m->window_how) {
		fprintf(out, "duration    0 s: the window never opened (the minor heap had no trap or collection "
			     "after the attach), nothing was sampled (attach took %.3f s); %s\n",
			m->attach_s, m->end_reason);
		return;
	}
	fprintf(out, "duration    %.2f s, one window for every kind, opened %.3f s after the attach %s "
		     "(attach took %.3f s); %s\n",
		m->duration_s, m->window_wait_s, m->window_how, m->attach_s, m->end_reason);
	if (m->window_minor_late_s > 0)
		fprintf(out, "warning     minor-heap words were sampled only from %.3f s into the window (its first "
			     "arming): minor estimates miss the words before\n", m->window_minor_late_s);
	else if (m->window_minor_late_s < 0)
		fprintf(out, "warning     the minor heap was never armed in the window: minor-heap words were not "
			     "sampled\n");
}

/* What the target paid: its threads' time in the probes' traps and BPF
 * programs and stopped for the executor (collect/probe_cost.h). */
static void text_overhead_line(FILE *out, const struct report_meta *m, uint64_t hits)
{
	double total = m->probe_bpf_s + m->probe_trap_s + m->exec_stopped_s;

	if (!m->overhead_counted) {
		fprintf(out,
			"overhead    not counted (the kernel's BPF run-time statistics could not be turned on); the "
			"target took %" PRIu64 " probe hit%s at least\n",
			hits, report_plural(hits));
		return;
	}
	fprintf(out, "overhead    the target paid %.2f s", total);
	if (m->duration_s > 0)
		fprintf(out, " (%.1f %% of the %.1f s recorded)", total * 100 / m->duration_s, m->duration_s);
	fprintf(out, ": %" PRIu64 " probe hit%s, ", m->probe_hits, report_plural(m->probe_hits));
	if (m->trap_emulated_us > 0 || m->trap_stepped_us > 0)
		fprintf(out,
			"their traps %.2f s (as calibrated on this kernel: %.1f us emulated, %.1f us single-stepped, "
			"+%.1f us a return), ",
			m->probe_trap_s, m->trap_emulated_us, m->trap_stepped_us, m->trap_return_us);
	else
		fprintf(out, "their traps not calibrated, ");
	fprintf(out, "BPF programs %.2f s", m->probe_bpf_s);
	if (m->exec_stops)
		fprintf(out, "; %" PRIu64 " ptrace stop%s %.2f s (%.0f us each, trap to resumption)", m->exec_stops,
			report_plural(m->exec_stops), m->exec_stopped_s, m->exec_stopped_s * 1e6 / (double)m->exec_stops);
	fputc('\n', out);
}

static void text_run_lines(FILE *out, const struct profile *p, const struct report_meta *m, uint64_t hits)
{
	const uint64_t *c = m->counters;

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
	report_window_line(out, m);
	fprintf(out, "samples     %" PRIu64 " in %" PRIu64 " sampled blocks; dropped events %" PRIu64 " (%" PRIu64
		     " samples)\n",
		p->samples, p->events, c[CH_CNT_DROPPED], c[CH_CNT_DROPPED_SAMPLES]);
	if (!m->foreign) {
	fprintf(out, "sampler     %s; %u/%u probes on emulated instructions%s%s; %u Dynlink plugin%s\n",
		m->sampler_mode, m->probes_emulated, m->probes_total, m->probe_links ? ", as " : "",
		m->probe_links ? m->probe_links : "", m->plugins, report_plural(m->plugins));
	fprintf(out, "profiler    camlheap used %.2f s of CPU, peak RSS %.1f MiB\n", m->cpu_s, m->max_rss_mib);
	text_overhead_line(out, m, hits);
	}
}

/* allocated (estimated, by kind) and observed (exact, by the probes). */
static void text_allocation_lines(FILE *out, const struct profile *p, const struct report_meta *m)
{
	const uint64_t *c = m->counters;
	char b1[32], b2[32], b3[32], b4[32], b5[32];
	double total = 0;

	/* bigarray views and mapped files point to memory counted elsewhere
	 * (or backed by a file): shown, not added up */
	for (int k = CH_KIND_MINOR; k < CH_KIND__COUNT; k++)
		total += report_est_bytes(p, k == CH_KIND_BIGARRAY ? p->bigarray_samples[CH_BA_OWNED] : p->samples_by_kind[k]);
	fprintf(out, "allocated   estimated %s: minor %s, major %s, custom %s, unmarshal %s",
		report_format_bytes(total, b1, sizeof(b1)),
		report_minor_off(m) ? "not sampled"
				 : report_format_bytes(report_est_bytes(p, p->samples_by_kind[CH_KIND_MINOR]), b5, sizeof(b5)),
		report_format_bytes(report_est_bytes(p, p->samples_by_kind[CH_KIND_MAJOR]), b2, sizeof(b2)),
		report_format_bytes(report_est_bytes(p, p->samples_by_kind[CH_KIND_CUSTOM]), b3, sizeof(b3)),
		m->unmarshal_off_why ? "not sampled"
				     : report_format_bytes(report_est_bytes(p, p->samples_by_kind[CH_KIND_UNMARSHAL]), b4, sizeof(b4)));
	fprintf(out, ", bigarray %s", report_format_bytes(report_est_bytes(p, p->bigarray_samples[CH_BA_OWNED]), b2, sizeof(b2)));
	if (m->malloc_libc || p->samples_by_kind[CH_KIND_MALLOC])
		fprintf(out, ", malloc %s",
			report_format_bytes(report_est_bytes(p, p->samples_by_kind[CH_KIND_MALLOC]), b5, sizeof(b5)));
	if (p->bigarray_samples[CH_BA_VIEW] || p->bigarray_samples[CH_BA_MAPPED])
		fprintf(out, " (not counted: views of other memory %s, mapped files %s)",
			report_format_bytes(report_est_bytes(p, p->bigarray_samples[CH_BA_VIEW]), b3, sizeof(b3)),
			report_format_bytes(report_est_bytes(p, p->bigarray_samples[CH_BA_MAPPED]), b4, sizeof(b4)));
	fputc('\n', out);
	if (!m->foreign)
		fprintf(out,
			"observed    by the probes (exact, not estimated): major %" PRIu64 " words in %" PRIu64
			" blocks, custom %" PRIu64 " words, unmarshal %" PRIu64 " words, bigarray %" PRIu64
			" words in %" PRIu64 " arrays\n",
			c[CH_CNT_WORDS_MAJOR], c[CH_CNT_HITS_MAJOR], c[CH_CNT_WORDS_CUSTOM], c[CH_CNT_WORDS_UNMARSHAL],
			c[CH_CNT_WORDS_BIGARRAY], c[CH_CNT_HITS_BIGARRAY]);
}

/* domains (OCaml 5, or split by domain) and stacks. */
static void text_stack_lines(FILE *out, const struct profile *p, const struct report_meta *m)
{
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
}

/* minor and executor: how the minor heap was sampled and written. */
static void text_minor_lines(FILE *out, const struct report_meta *m)
{
	const uint64_t *c = m->counters;

	/* also when the layout check stopped it: what was written, if anything */
	if (!m->minor_off_why && !m->foreign) {
		fprintf(out,
			"minor       %" PRIu64 " samples; %" PRIu64 " %s, %" PRIu64
			" minor cycles; sample points missed %" PRIu64 ", in untracked blocks %" PRIu64 "\n",
			c[CH_CNT_MINOR_SAMPLES], c[CH_CNT_DISPATCH],
			!strcmp(m->executor, "observe") ? "blocks Gc.Memprof sampled" : "traps into caml_alloc_small_dispatch",
			c[CH_CNT_EPOCHS], c[CH_CNT_MISSED],
			c[CH_CNT_UNTRACKED]);
		if (c[CH_CNT_POLL_MARGIN])
			fprintf(out,
				"            %" PRIu64 " sample points not taken: they lay within 257 words above "
				"young_trigger, where a trap would bring the GC's work forward (OCaml 5 "
				"caml_poll_gc_work); the minor estimates are low by as many samples\n",
				c[CH_CNT_POLL_MARGIN]);
		if (!strcmp(m->executor, "observe"))
			fprintf(out, "executor    observe: nothing written\n");
		else if (!strcmp(m->executor, "ptrace"))
			fprintf(out,
				"executor    ptrace: %" PRIu64 " stops (%.1f us of service each), %" PRIu64
				" writes, %" PRIu64 " stale, %" PRIu64 " left to a pending action, %" PRIu64
				" errors; %" PRIu64 " of the program's own signals passed on\n",
				m->exec_stops, m->exec_stops ? m->exec_service_s * 1e6 / (double)m->exec_stops : 0.0,
				m->exec_writes, m->exec_stale, m->exec_pending, m->exec_errors, m->exec_passed_signals);
		else if (!strcmp(m->executor, "register"))
			fprintf(out,
				"executor    register: nothing written; %" PRIu64 " sample points raised into the "
				"runtime's own young_trigger loads; %" PRIu64 " C-side traps made to recompute the "
				"limit, %" PRIu64 " young_alloc_end stores with nothing pending given the usual limit "
				"(%" PRIu64 " redone for a signal)\n",
				c[CH_CNT_ARMS_REGISTER], c[CH_CNT_URGENT_REDIRECTS], c[CH_CNT_IDLE_ENDS],
				c[CH_CNT_IDLE_ENDS_REDONE]);
		else
			fprintf(out, "executor    kernel: %" PRIu64 " writes\n", c[CH_CNT_WRITES_KERNEL]);
		if (!strcmp(m->executor, "ptrace") && (m->exec_rechecks || m->exec_in_flight))
			fprintf(out,
				"            OCaml 5: %" PRIu64 " writes made with the domain's interrupt flags read "
				"before and after (no other thread stopped), %" PRIu64 " of them followed by "
				"an interrupt put back; %" PRIu64 " not made, an interrupt was on its way\n",
				m->exec_rechecks, m->exec_reinterrupts, m->exec_in_flight);
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
}

/* Every warning the recording calls for, then the selection. */
static void text_warnings(FILE *out, const struct profile *p, const struct report_meta *m)
{
	const uint64_t *c = m->counters;

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
			m->unreadable_files, report_plural(m->unreadable_files));
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
}

void report_group_header(FILE *out, const struct profile *p, const struct report_meta *m, const struct site_group *g,
			 size_t rank, uint64_t total, const char *at)
{
	char b1[32], b2[32], b3[32], dom[32] = "";
	double lo, hi;
	uint64_t v = report_group_value(g, m->value);

	if (p->by_domain)
		snprintf(dom, sizeof(dom), "  domain %u", g->site->domain);
	profile_poisson_ci95(v, &lo, &hi);
	fprintf(out, "\n#%zu  %s%s  %s  [95%% CI %s .. %s]  %" PRIu64 " sample%s  %.1f%%\n", rank,
		report_kind_name(g->kind), dom, report_format_bytes(report_est_bytes(p, v), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		v, report_plural(v), total ? 100.0 * (double)v / (double)total : 0.0);
	if (at)
		fprintf(out, "    at %s\n", at);
	report_site_type_line(out, p, g->site);
	if ((m->live || m->value != REPORT_VALUE_ALLOC) && m->census_on)
		site_live_line(out, p, g, at != NULL);
}

/* --by stack: the top m->top site groups, each with its estimate,
 * interval, share, type, live figures and stack. */
static void text_sites(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
		       const struct report_groups *r)
{
	fprintf(out, "\n%s %zu callstack%s by %s (of %zu; by allocation point: --by point):\n",
		m->top <= 0 || (size_t)m->top >= r->nstacks ? "All" : "Top",
		m->top <= 0 || (size_t)m->top >= r->nstacks ? r->nstacks : (size_t)m->top,
		report_plural(m->top <= 0 || (size_t)m->top >= r->nstacks ? r->nstacks : (size_t)m->top),
		m->value == REPORT_VALUE_LIVE   ? "estimated bytes alive at the end"
		: m->value == REPORT_VALUE_PEAK ? "peak estimated live bytes"
						: "estimated bytes",
		r->nstacks);
	for (size_t i = 0; i < r->nstacks && (m->top <= 0 || (int)i < m->top); i++) {
		GPtrArray *lines;

		report_group_header(out, p, m, &r->stacks[i], i + 1, r->total, NULL);
		lines = report_site_lines(r->stacks[i].site, mods);
		report_print_lines(out, lines);
		g_ptr_array_unref(lines);
	}
}

int report_write_text(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	struct report_groups r;
	const uint64_t *c = m->counters;
	uint64_t hits = c[CH_CNT_HITS_MAJOR] + c[CH_CNT_HITS_CUSTOM] + c[CH_CNT_HITS_UNMARSHAL] + 2 * c[CH_CNT_DISPATCH];

	text_scope_line(out, m);
	text_run_lines(out, p, m, hits);
	text_allocation_lines(out, p, m);
	malloc_line(out, m);
	resident_line(out, p, m);
	text_stack_lines(out, p, m);
	text_minor_lines(out, m);
	census_header(out, p, m);
	text_warnings(out, p, m);
	if (report_groups_build(p, mods, m->value, &r) < 0)
		return -ENOMEM;
	if (!r.nstacks)
		fprintf(out, "\nNo allocation point: %s\n",
			hits ? "the sampled kinds of allocation were too few for this rate"
			: report_minor_off(m) ? "the program made no direct major, custom or unmarshalled allocation while recorded"
					     : "the program allocated nothing while recorded");
	else if (m->by_stack)
		text_sites(out, p, m, mods, &r);
	else
		report_text_points(out, p, m, mods, &r, m->value, false);
	report_groups_free(&r);
	return ferror(out) ? -(errno ? errno : EIO) : 0; /* EPIPE: the reader went away */
}

void report_census_group_header(FILE *out, const struct profile *p, const struct site_group *g, size_t rank,
				const char *at)
{
	char b1[32], b2[32], b3[32];
	double lo, hi;

	profile_poisson_ci95(g->live, &lo, &hi);
	fprintf(out, "\n#%zu  %s  live %s  [95%% CI %s .. %s]  %" PRIu64 " sample%s in %" PRIu64 " block%s\n", rank,
		report_kind_name(g->kind), report_format_bytes(report_est_bytes(p, g->live), b1, sizeof(b1)),
		report_format_bytes(lo / p->rate * 8.0, b2, sizeof(b2)), report_format_bytes(hi / p->rate * 8.0, b3, sizeof(b3)),
		g->live, report_plural(g->live), g->live_blocks, report_plural(g->live_blocks));
	if (at)
		fprintf(out, "    at %s\n", at);
	fprintf(out, "    age: median %.1f major GCs", g->median_age);
	if (g->cycles >= 2)
		fprintf(out, "; leak score %s/cycle (live blocks born in %u of %u judged major cycles)%s",
			report_format_bytes(g->score, b1, sizeof(b1)), g->retaining, g->cycles,
			report_is_suspect(g) ? "  LEAK SUSPECT" : "");
	if (g->relocated)
		fprintf(out, "; %" PRIu64 " sample%s relocated by compaction (alive then, location unknown)", g->relocated,
			report_plural(g->relocated));
	fprintf(out, "\n");
	report_site_type_line(out, p, g->site);
}

/* census --by stack: the live callstacks, each with its figures. */
static void census_stacks(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods,
			  const struct report_groups *r)
{
	size_t shown = 0;

	for (size_t i = 0; i < r->nstacks; i++)
		shown += r->stacks[i].live > 0;
	fprintf(out, "\nLive callstacks by estimated live bytes (of %zu; top %d; by allocation point: --by point):\n",
		shown, m->top);
	for (size_t i = 0, rank = 0; i < r->nstacks && (m->top <= 0 || (int)rank < m->top); i++) {
		GPtrArray *lines;

		if (!r->stacks[i].live)
			continue;
		report_census_group_header(out, p, &r->stacks[i], ++rank, NULL);
		lines = report_site_lines(r->stacks[i].site, mods);
		report_print_lines(out, lines);
		g_ptr_array_unref(lines);
		report_paths_text(out, m, mods, r, i);
	}
}

int report_write_census(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	struct report_groups r;
	struct site_group *groups;
	size_t ngroups = 0, nsuspects = 0, live = 0;
	char b1[32];

	if (report_groups_build(p, mods, REPORT_VALUE_LIVE, &r) < 0)
		return -ENOMEM;
	fprintf(out,
		"camlheap census: the live sampled heap of PID %d, by allocation %s; only blocks allocated "
		"after camlheap attached are in it (older ones are not sampled)\n",
		m->pid, m->by_stack ? "callstack" : "point");
	fprintf(out, "target      pid %d  %s  (OCaml %s)\n", m->pid, m->exe, m->ocaml_version);
	if (m->trigger)
		fprintf(out, "written at  %s\n", m->trigger);
	fprintf(out, "rate        %g samples/word (one sample per %.0f words on average); executor %s\n", p->rate,
		1.0 / p->rate, m->executor);
	if (m->budget)
		fprintf(out, "budget      lambda in force: %s (kept samples weighted by 1/lambda: unbiased; intervals "
			     "assume the base rate)\n", m->budget);
	report_window_line(out, m);
	fprintf(out, "samples     %" PRIu64 " in %" PRIu64 " sampled blocks; dropped events %" PRIu64 " (%" PRIu64
		     " samples)\n",
		p->samples, p->events, m->counters[CH_CNT_DROPPED], m->counters[CH_CNT_DROPPED_SAMPLES]);
	if (report_minor_off(m))
		fprintf(out, "warning     minor-heap allocations are not sampled (%s): the census misses them\n",
			report_minor_off(m));
	if (m->counters[CH_CNT_DROPPED_SAMPLES])
		fprintf(out,
			"warning     %" PRIu64 " samples were dropped (ring buffer full): their blocks are not in the "
			"census; use a lower --rate\n",
			m->counters[CH_CNT_DROPPED_SAMPLES]);
	census_header(out, p, m);
	report_paths_header(out, m);
	malloc_line(out, m);
	resident_line(out, p, m);
	report_paths_index(m, mods, &r, m->by_stack);
	for (size_t i = 0; i < r.nstacks; i++)
		live += r.stacks[i].live > 0;
	if (!live)
		fprintf(out, "\n  (no sampled block is alive: %s)\n",
			p->followed_blocks ? "every block sampled since attach has died"
					   : "nothing was sampled; wait longer (--wait-major N, --duration) or raise --rate");
	else if (m->by_stack)
		census_stacks(out, p, m, mods, &r);
	else
		report_text_points(out, p, m, mods, &r, REPORT_VALUE_LIVE, true);
	/* the leak suspects of the same grouping */
	if (m->by_stack) {
		groups = r.stacks;
		ngroups = r.nstacks;
	} else {
		groups = calloc(r.npoints ? r.npoints : 1, sizeof(*groups));
		for (size_t i = 0; groups && i < r.npoints; i++)
			groups[ngroups++] = r.points[i].sum;
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
			qsort(by_score, k, sizeof(*by_score), report_group_cmp_score);
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
				report_format_bytes(g->score, b1, sizeof(b1)), report_kind_name(g->kind), leaf,
				n > 0 && fr[0].file ? fr[0].file : "?", n > 0 ? fr[0].line : 0, g->retaining,
				g->cycles, report_is_suspect(g) ? "  LEAK SUSPECT" : "");
		}
		free(by_score);
	}
	if (groups != r.stacks)
		free(groups);
	report_groups_free(&r);
	return ferror(out) ? -(errno ? errno : EIO) : 0;
}
