/* report_json.c -- the JSON report, schema "camlheap-report" (docs/json.md),
 * written with json-glib (report.h). */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "output/jsonw.h"

static void json_interval(JsonBuilder *jb, const struct profile *p, uint64_t samples)
{
	double lo, hi;

	profile_poisson_ci95(samples, &lo, &hi);
	json_builder_begin_object(jb);
	json_builder_set_member_name(jb, "estimate");
	json_builder_add_double_value(jb, report_est_bytes(p, samples));
	json_builder_set_member_name(jb, "ci95");
	json_builder_begin_array(jb);
	json_builder_add_double_value(jb, lo / p->rate * 8.0);
	json_builder_add_double_value(jb, hi / p->rate * 8.0);
	json_builder_end_array(jb);
	json_builder_end_object(jb);
}

/* "run"'s "ptrace": the executor's young_limit writes (docs/json.md). */
static void json_ptrace(JsonBuilder *jb, const struct report_meta *m)
{
	static const struct {
		const char *name;
		size_t off; /* of a uint64_t in struct report_meta */
	} fields[] = {
		{ "stops", offsetof(struct report_meta, exec_stops) },
		{ "writes", offsetof(struct report_meta, exec_writes) },
		{ "stale", offsetof(struct report_meta, exec_stale) },
		{ "pending", offsetof(struct report_meta, exec_pending) },
		{ "errors", offsetof(struct report_meta, exec_errors) },
		{ "rechecks", offsetof(struct report_meta, exec_rechecks) },
		{ "reinterrupts", offsetof(struct report_meta, exec_reinterrupts) },
		{ "in_flight", offsetof(struct report_meta, exec_in_flight) },
		{ "freezes", offsetof(struct report_meta, exec_freezes) },
		{ "freeze_timeouts", offsetof(struct report_meta, exec_freeze_timeouts) },
	};

	json_builder_set_member_name(jb, "ptrace");
	json_builder_begin_object(jb);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		json_member_int(jb, fields[i].name, (int64_t) * (const uint64_t *)((const char *)m + fields[i].off));
	json_member_double(jb, "service_s", m->exec_service_s);
	json_member_double(jb, "stopped_s", m->exec_stopped_s);
	json_builder_end_object(jb);
}

/* "run"'s "overhead": what the target paid (collect/probe_cost.h). */
static void json_overhead(JsonBuilder *jb, const struct report_meta *m)
{
	json_builder_set_member_name(jb, "overhead");
	json_builder_begin_object(jb);
	json_builder_set_member_name(jb, "counted");
	json_builder_add_boolean_value(jb, m->overhead_counted);
	json_member_int(jb, "probe_hits", (int64_t)m->probe_hits);
	json_member_double(jb, "bpf_s", m->probe_bpf_s);
	json_member_double(jb, "trap_s", m->probe_trap_s);
	json_member_double(jb, "stopped_s", m->exec_stopped_s);
	json_member_double(jb, "total_s", m->probe_bpf_s + m->probe_trap_s + m->exec_stopped_s);
	json_builder_set_member_name(jb, "trap_us");
	json_builder_begin_object(jb);
	json_member_double(jb, "emulated", m->trap_emulated_us);
	json_member_double(jb, "single_stepped", m->trap_stepped_us);
	json_member_double(jb, "return", m->trap_return_us);
	json_builder_end_object(jb);
	json_builder_end_object(jb);
}

/* "run": who, what and how the recording was made. */
static void json_run(JsonBuilder *jb, const struct profile *p, const struct report_meta *m)
{
	const uint64_t *c = m->counters;

	json_builder_set_member_name(jb, "run");
	json_builder_begin_object(jb);
	json_member_int(jb, "pid", m->pid);
	json_member_str(jb, "executable", m->exe);
	json_member_str(jb, "ocaml_version", m->ocaml_version);
	json_member_str(jb, "command", m->command);
	json_member_double(jb, "rate", p->rate);
	json_member_str(jb, "budget", m->budget);
	json_member_str(jb, "executor", m->executor);
	json_member_str(jb, "minor_not_sampled_because", report_minor_off(m));
	json_member_str(jb, "unmarshal_not_sampled_because", m->unmarshal_off_why);
	if (!report_minor_off(m) && !m->foreign) {
		json_builder_set_member_name(jb, "minor");
		json_builder_begin_object(jb);
		json_member_int(jb, "samples", (int64_t)c[CH_CNT_MINOR_SAMPLES]);
		json_member_int(jb, "traps", (int64_t)c[CH_CNT_DISPATCH]);
		json_member_int(jb, "cycles", (int64_t)c[CH_CNT_EPOCHS]);
		json_member_int(jb, "missed", (int64_t)c[CH_CNT_MISSED]);
		json_member_int(jb, "untracked", (int64_t)c[CH_CNT_UNTRACKED]);
		json_member_int(jb, "in_poll_margin", (int64_t)c[CH_CNT_POLL_MARGIN]);
		json_member_int(jb, "arms_at_return", (int64_t)c[CH_CNT_ARM_AT_RETURN]);
		json_member_int(jb, "arms_at_reset", (int64_t)c[CH_CNT_ARM_AT_RESET]);
		json_member_int(jb, "arms_in_register", (int64_t)c[CH_CNT_ARMS_REGISTER]);
		json_member_int(jb, "c_traps_recomputed", (int64_t)c[CH_CNT_URGENT_REDIRECTS]);
		json_member_int(jb, "idle_ends_replaced", (int64_t)c[CH_CNT_IDLE_ENDS]);
		json_member_int(jb, "idle_ends_redone", (int64_t)c[CH_CNT_IDLE_ENDS_REDONE]);
		json_member_int(jb, "not_armed_sigurg_blocked", (int64_t)c[CH_CNT_SIGURG_BLOCKED]);
		json_member_int(jb, "not_armed_sigurg_handled", (int64_t)c[CH_CNT_SIGURG_HANDLED]);
		json_builder_end_object(jb);
	}
	if (!strcmp(m->executor, "ptrace"))
		json_ptrace(jb, m);
	if (!m->foreign)
		json_overhead(jb, m);
	json_member_int(jb, "start_unix_ns", m->start_unix_ns);
	json_member_double(jb, "duration_s", m->duration_s);
	json_member_double(jb, "attach_s", m->attach_s);
	json_member_str(jb, "probe_links", m->probe_links);
	json_member_double(jb, "window_wait_s", m->window_wait_s);
	json_member_str(jb, "window", m->window_how);
	json_member_double(jb, "window_minor_late_s", m->window_minor_late_s);
	json_member_str(jb, "end_reason", m->end_reason);
	if (m->trigger)
		json_member_str(jb, "trigger", m->trigger);
	json_member_int(jb, "max_depth", m->max_frames);
	json_builder_end_object(jb);

}

/* "totals"'s "resident": where the resident set went, if it was read. */
static void json_resident(JsonBuilder *jb, const struct profile *p, const struct report_meta *m)
{
	struct resident_split r;

	report_resident_split(p, m, &r);
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

/* "totals": samples by kind and domain, exact observed words, resident
 * memory, stack walks. */
static void json_totals(JsonBuilder *jb, const struct profile *p, const struct report_meta *m)
{
	const uint64_t *c = m->counters;

	json_builder_set_member_name(jb, "totals");
	json_builder_begin_object(jb);
	json_member_int(jb, "samples", (int64_t)p->samples);
	json_member_int(jb, "sampled_blocks", (int64_t)p->events);
	json_member_int(jb, "dropped_samples", (int64_t)c[CH_CNT_DROPPED_SAMPLES]);
	json_builder_set_member_name(jb, "samples_by_kind");
	json_builder_begin_object(jb);
	for (int k = 0; k < CH_KIND__COUNT; k++)
		json_member_int(jb, report_kind_name(k), (int64_t)p->samples_by_kind[k]);
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
	json_resident(jb, p, m);
	json_builder_set_member_name(jb, "walks");
	json_builder_begin_object(jb);
	for (int t = 0; t < CH_TERM__COUNT; t++)
		json_member_int(jb, report_term_name(t), (int64_t)p->walks_by_term[t]);
	json_builder_end_object(jb);
	json_builder_end_object(jb);
}

/* "census": the fates of the sampled blocks followed, or null. */
static void json_census(JsonBuilder *jb, const struct profile *p, const struct report_meta *m)
{
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
		json_member_double(jb, "peak_live_bytes", report_est_bytes(p, p->peak_live_samples));
		json_builder_end_object(jb);
	}
}

/* "stacks" and "frames": `stacks` holds one site per stack, in first-use
 * order. */
static void json_stacks(JsonBuilder *jb, GPtrArray *stacks, struct modules *mods)
{
	/* frames once each (by return address and place in its inline
	 * chain), stacks as lists of indices: deep stacks share most frames */
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
		json_member_str(jb, "walk", report_term_name(s->stack->term));
		json_builder_set_member_name(jb, "frames");
		json_builder_begin_array(jb);
		for (uint32_t j = 0; j < s->stack->nframes; j++) {
			/* the leaf as the stack's first site allocates there (its
			 * Comballoc index: a recording symbolized the leaf with it;
			 * each site's own is its "allocation") */
			unsigned idx = j == 0 ? s->alloc_idx : 0;
			int n = modules_lookup(mods, s->stack->frames[j], idx, fr, MAX_INLINE);

			for (int k = 0; k < n; k++) {
				/* pc * MAX_INLINE < 2^56 (user addresses): the index above */
				uint64_t key = (s->stack->frames[j] * MAX_INLINE + (uint64_t)k) | ((uint64_t)idx << 56);
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
		uint64_t key = g_array_index(order, uint64_t, i), rest = key & ((1ULL << 56) - 1), pc = rest / MAX_INLINE;
		struct sym_frame fr[MAX_INLINE];
		int k = (int)(rest % MAX_INLINE), n = modules_lookup(mods, pc, (unsigned)(key >> 56), fr, MAX_INLINE);
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

/* A site's (or a point's) kind and type members: "kind", and where they
 * apply "custom_type", "bigarray_data", "outside_ocaml". */
static void json_kind(JsonBuilder *jb, const struct profile *p, const struct profile_site *s)
{
	json_member_str(jb, "kind", report_kind_name(s->kind));
	if (s->kind == CH_KIND_CUSTOM && profile_custom_name(p, s->subtype))
		json_member_str(jb, "custom_type", profile_custom_name(p, s->subtype));
	if (s->kind == CH_KIND_BIGARRAY)
		json_member_str(jb, "bigarray_data", report_bigarray_owner(s->subtype));
	if (s->kind == CH_KIND_MALLOC) {
		json_builder_set_member_name(jb, "outside_ocaml");
		json_builder_add_boolean_value(jb, (s->subtype & CH_MALLOC_OUTSIDE) != 0);
	}
}

/* One element of "sites"; `stack_ix`: stack id -> index in "stacks". */
static void json_site(JsonBuilder *jb, const struct profile *p, const struct report_meta *m, struct modules *mods,
		      const struct profile_site *s, GHashTable *stack_ix)
{
	struct sym_frame fr[MAX_INLINE];

	json_builder_begin_object(jb);
	json_kind(jb, p, s);
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
		json_member_double(jb, "peak_bytes", report_est_bytes(p, s->peak_live_samples));
		json_member_int(jb, "promoted", (int64_t)s->promoted_blocks);
		json_member_int(jb, "died", (int64_t)(s->dead_minor_blocks + s->dead_major_blocks));
		json_member_double(jb, "dead_lifetime_s_sum", s->dead_lifetime_s);
		json_member_int(jb, "relocated_samples", (int64_t)s->relocated_samples);
		json_builder_end_object(jb);
	}
	json_builder_end_object(jb);
}

/* "allocation_points": the sites grouped by allocation point (kind, type,
 * domain, source position), by estimated bytes, each with the indices of
 * its sites in "sites"; "functions": flat and cum. (pprof -top), of the
 * allocated bytes and, with the census, of the live ones. */
static void json_points(JsonBuilder *jb, const struct profile *p, const struct report_meta *m, struct modules *mods,
			const struct profile_site **sites, size_t nsites)
{
	struct report_groups r, live = { 0 };
	size_t *of = calloc(nsites ? nsites : 1, sizeof(*of));

	if (!of || report_groups_build(p, mods, REPORT_VALUE_ALLOC, &r) < 0) {
		free(of);
		return;
	}
	if (m->census_on && report_groups_build(p, mods, REPORT_VALUE_LIVE, &live) < 0)
		memset(&live, 0, sizeof(live));
	report_points_of_sites(&r, mods, (const struct profile_site *const *)sites, nsites, of);
	GHashTable *live_ix = g_hash_table_new(g_str_hash, g_str_equal);

	for (size_t i = 0; i < live.nfuncs; i++)
		g_hash_table_insert(live_ix, (gpointer)live.funcs[i].function, GSIZE_TO_POINTER(i + 1));
	json_builder_set_member_name(jb, "allocation_points");
	json_builder_begin_array(jb);
	for (size_t i = 0; i < r.npoints; i++) {
		const struct point_group *pg = &r.points[i];
		const struct profile_site *s = pg->sum.site;

		json_builder_begin_object(jb);
		json_kind(jb, p, s);
		if (p->by_domain)
			json_member_int(jb, "domain", s->domain);
		json_member_str(jb, "function", pg->function);
		json_member_str(jb, "file", pg->file);
		json_member_int(jb, "line", pg->line);
		if (pg->via)
			json_member_str(jb, "via", pg->via);
		json_member_int(jb, "samples", (int64_t)pg->sum.samples);
		json_builder_set_member_name(jb, "bytes");
		json_interval(jb, p, pg->sum.samples);
		if (m->census_on) {
			json_builder_set_member_name(jb, "live");
			json_builder_begin_object(jb);
			json_member_int(jb, "samples", (int64_t)pg->sum.live);
			json_builder_set_member_name(jb, "bytes");
			json_interval(jb, p, pg->sum.live);
			json_builder_end_object(jb);
		}
		json_member_int(jb, "callstacks", (int64_t)pg->nstacks);
		json_builder_set_member_name(jb, "sites");
		json_builder_begin_array(jb);
		for (size_t j = 0; j < nsites; j++)
			if (of[j] == i)
				json_builder_add_int_value(jb, (int64_t)j);
		json_builder_end_array(jb);
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
	json_builder_set_member_name(jb, "functions");
	json_builder_begin_array(jb);
	for (size_t i = 0; i < r.nfuncs; i++) {
		const struct function_row *f = &r.funcs[i];

		json_builder_begin_object(jb);
		json_member_str(jb, "function", f->function);
		json_member_int(jb, "flat_samples", (int64_t)f->flat);
		json_builder_set_member_name(jb, "flat_bytes");
		json_interval(jb, p, f->flat);
		json_member_int(jb, "cum_samples", (int64_t)f->cum);
		json_builder_set_member_name(jb, "cum_bytes");
		json_interval(jb, p, f->cum);
		if (m->census_on) {
			gpointer at = g_hash_table_lookup(live_ix, f->function);
			const struct function_row *l = at ? &live.funcs[GPOINTER_TO_SIZE(at) - 1] : NULL;

			json_member_int(jb, "live_flat_samples", l ? (int64_t)l->flat : 0);
			json_member_int(jb, "live_cum_samples", l ? (int64_t)l->cum : 0);
		}
		json_builder_end_object(jb);
	}
	json_builder_end_array(jb);
	g_hash_table_destroy(live_ix);
	report_groups_free(&live);
	report_groups_free(&r);
	free(of);
}

int report_write_json(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	JsonBuilder *jb = json_builder_new();
	JsonGenerator *gen = json_generator_new();
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	GHashTable *stack_ix = g_hash_table_new(g_int64_hash, g_int64_equal);
	GPtrArray *stacks = g_ptr_array_new();
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

	json_run(jb, p, m);
	json_totals(jb, p, m);
	json_census(jb, p, m);
	json_stacks(jb, stacks, mods);

	json_builder_set_member_name(jb, "sites");
	json_builder_begin_array(jb);
	for (size_t i = 0; i < nsites; i++)
		json_site(jb, p, m, mods, sites[i], stack_ix);
	json_builder_end_array(jb);
	json_points(jb, p, m, mods, sites, nsites);
	report_paths_json(jb, m, (const struct profile_site *const *)sites, nsites);
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
