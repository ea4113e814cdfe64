/* recording_meta.c -- the run's metadata in a recording (recording.h):
 * report_meta and the rest of the report's header as a JSON object in
 * trace_info's context string, written and read back from one list of
 * fields.
 */
#define _GNU_SOURCE
#include "output/recording.h"
#include "output/recording_internal.h"

#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include <glib.h>
#include <json-glib/json-glib.h>

/* ---- metadata (trace_info context) ----------------------------------- */

/* The report_meta fields a recording carries: one list for writing and
 * reading, so the two cannot drift apart. */
enum meta_type { M_STR, M_INT, M_UINT, M_U64, M_I64, M_BOOL, M_DBL };
static const struct {
	const char *name;
	enum meta_type type;
	size_t off;
} meta_fields[] = {
#define F(name, type, field) { name, type, offsetof(struct report_meta, field) }
	F("pid", M_INT, pid),
	F("exe", M_STR, exe),
	F("ocaml_version", M_STR, ocaml_version),
	F("command", M_STR, command),
	F("sampler_mode", M_STR, sampler_mode),
	F("executor", M_STR, executor),
	F("minor_off_why", M_STR, minor_off_why),
	F("minor_source", M_STR, minor_source),
	F("unmarshal_off_why", M_STR, unmarshal_off_why),
	F("end_reason", M_STR, end_reason),
	F("census_off_why", M_STR, census_off_why),
	F("census", M_BOOL, census_on),
	F("malloc_libc", M_STR, malloc_libc),
	F("budget", M_STR, budget),
	F("rss_kib", M_U64, rss_kib),
	F("hwm_kib", M_U64, hwm_kib),
	F("heap_words", M_U64, heap_words),
	F("rss_when", M_STR, rss_when),
	F("rss_live_set", M_BOOL, rss_live_set),
	F("rss_live_bigarray", M_U64, rss_live_bigarray),
	F("rss_live_malloc", M_U64, rss_live_malloc),
	F("rss_live_custom", M_U64, rss_live_custom),
	F("duration_s", M_DBL, duration_s),
	F("attach_s", M_DBL, attach_s),
	F("window_wait_s", M_DBL, window_wait_s),
	F("window_how", M_STR, window_how),
	F("window_minor_late_s", M_DBL, window_minor_late_s),
	F("start_unix_ns", M_I64, start_unix_ns),
	F("max_frames", M_UINT, max_frames),
	F("probes_emulated", M_UINT, probes_emulated),
	F("probes_total", M_UINT, probes_total),
	F("probe_links", M_STR, probe_links),
	F("plugins", M_UINT, plugins),
	F("unreadable_files", M_UINT, unreadable_files),
	F("cpu_s", M_DBL, cpu_s),
	F("max_rss_mib", M_DBL, max_rss_mib),
	F("fates_drained", M_U64, fates_drained),
	F("exec_stops", M_U64, exec_stops),
	F("exec_writes", M_U64, exec_writes),
	F("exec_freezes", M_U64, exec_freezes),
	F("exec_freeze_timeouts", M_U64, exec_freeze_timeouts),
	F("exec_rechecks", M_U64, exec_rechecks),
	F("exec_in_flight", M_U64, exec_in_flight),
	F("exec_reinterrupts", M_U64, exec_reinterrupts),
	F("exec_stale", M_U64, exec_stale),
	F("exec_pending", M_U64, exec_pending),
	F("exec_errors", M_U64, exec_errors),
	F("exec_passed_signals", M_U64, exec_passed_signals),
	F("exec_service_s", M_DBL, exec_service_s),
	F("exec_stopped_s", M_DBL, exec_stopped_s),
	F("overhead_counted", M_BOOL, overhead_counted),
	F("probe_hits", M_U64, probe_hits),
	F("probe_bpf_s", M_DBL, probe_bpf_s),
	F("probe_trap_s", M_DBL, probe_trap_s),
	F("trap_emulated_us", M_DBL, trap_emulated_us),
	F("trap_stepped_us", M_DBL, trap_stepped_us),
	F("trap_return_us", M_DBL, trap_return_us),
#undef F
};

char *meta_json(const struct recording *rc, const struct report_meta *m, const struct profile *p,
		       const char *build_id)
{
	JsonBuilder *jb = json_builder_new();
	JsonGenerator *gen = json_generator_new();
	JsonNode *root;
	char *s;

	json_builder_begin_object(jb);
	for (size_t i = 0; i < sizeof(meta_fields) / sizeof(meta_fields[0]); i++) {
		const void *f = (const char *)m + meta_fields[i].off;

		if (meta_fields[i].type == M_STR && !*(const char *const *)f)
			continue;
		json_builder_set_member_name(jb, meta_fields[i].name);
		switch (meta_fields[i].type) {
		case M_STR: json_builder_add_string_value(jb, *(const char *const *)f); break;
		case M_INT: json_builder_add_int_value(jb, *(const int *)f); break;
		case M_UINT: json_builder_add_int_value(jb, *(const unsigned *)f); break;
		case M_U64: json_builder_add_int_value(jb, (int64_t)*(const uint64_t *)f); break;
		case M_I64: json_builder_add_int_value(jb, *(const int64_t *)f); break;
		case M_BOOL: json_builder_add_int_value(jb, *(const bool *)f); break;
		case M_DBL: json_builder_add_double_value(jb, *(const double *)f); break;
		}
	}
	if (build_id) {
		json_builder_set_member_name(jb, "build_id");
		json_builder_add_string_value(jb, build_id);
	}
	json_builder_set_member_name(jb, "orphan_fates");
	json_builder_add_int_value(jb, (int64_t)p->orphan_fates);
	{
		GHashTableIter it;
		gpointer k, v;

		json_builder_set_member_name(jb, "custom_names");
		json_builder_begin_object(jb);
		g_hash_table_iter_init(&it, p->custom_names);
		while (g_hash_table_iter_next(&it, &k, &v)) {
			char key[24];

			if (!((const char *)v)[0])
				continue;
			snprintf(key, sizeof(key), "%" PRIu64, (uint64_t)(*(const uint64_t *)k & ANN_PAYLOAD));
			json_builder_set_member_name(jb, key);
			json_builder_add_string_value(jb, v);
		}
		json_builder_end_object(jb);
	}
	json_builder_set_member_name(jb, "counters");
	json_builder_begin_array(jb);
	for (int i = 0; i < CH_CNT__COUNT; i++)
		json_builder_add_int_value(jb, (int64_t)m->counters[i]);
	json_builder_end_array(jb);
	json_builder_end_object(jb);
	root = json_builder_get_root(jb);
	json_generator_set_root(gen, root);
	s = json_generator_to_data(gen, NULL);
	json_node_unref(root);
	g_object_unref(gen);
	g_object_unref(jb);
	return s;
}

static const char *jget_str(struct loaded_priv *lp, JsonObject *o, const char *k)
{
	if (!json_object_has_member(o, k))
		return NULL;
	JsonNode *n = json_object_get_member(o, k);
	if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING)
		return g_string_chunk_insert_const(lp->strings, json_node_get_string(n));
	return NULL;
}

static double jget_num(JsonObject *o, const char *k)
{
	if (!json_object_has_member(o, k))
		return 0;
	JsonNode *n = json_object_get_member(o, k);
	if (!JSON_NODE_HOLDS_VALUE(n))
		return 0;
	GType t = json_node_get_value_type(n);
	if (t == G_TYPE_INT64)
		return (double)json_node_get_int(n);
	if (t == G_TYPE_DOUBLE)
		return json_node_get_double(n);
	return 0;
}

static int64_t jget_int(JsonObject *o, const char *k)
{
	if (!json_object_has_member(o, k))
		return 0;
	JsonNode *n = json_object_get_member(o, k);
	if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64)
		return json_node_get_int(n);
	return (int64_t)jget_num(o, k);
}

/* Fill meta from the context JSON; returns false if it is not camlheap's. */
bool read_meta(struct recording_loaded *out, struct loaded_priv *lp, const char *context,
		      uint64_t *orphans)
{
	JsonParser *jp;
	JsonObject *o;
	struct report_meta *m = &out->meta;
	bool ok = false;

	if (!context || strncmp(context, CONTEXT_MAGIC, strlen(CONTEXT_MAGIC)))
		return false;
	jp = json_parser_new();
	if (json_parser_load_from_data(jp, context + strlen(CONTEXT_MAGIC), -1, NULL) &&
	    JSON_NODE_HOLDS_OBJECT(json_parser_get_root(jp))) {
		o = json_node_get_object(json_parser_get_root(jp));
		for (size_t i = 0; i < sizeof(meta_fields) / sizeof(meta_fields[0]); i++) {
			void *f = (char *)m + meta_fields[i].off;
			const char *k = meta_fields[i].name;

			switch (meta_fields[i].type) {
			case M_STR: *(const char **)f = jget_str(lp, o, k); break;
			case M_INT: *(int *)f = (int)jget_int(o, k); break;
			case M_UINT: *(unsigned *)f = (unsigned)jget_int(o, k); break;
			case M_U64: *(uint64_t *)f = (uint64_t)jget_int(o, k); break;
			case M_I64: *(int64_t *)f = jget_int(o, k); break;
			case M_BOOL: *(bool *)f = jget_int(o, k) != 0; break;
			case M_DBL: *(double *)f = jget_num(o, k); break;
			}
		}
		out->build_id = jget_str(lp, o, "build_id");
		*orphans = (uint64_t)jget_int(o, "orphan_fates");
		if (json_object_has_member(o, "custom_names") &&
		    JSON_NODE_HOLDS_OBJECT(json_object_get_member(o, "custom_names"))) {
			JsonObject *cn = json_object_get_object_member(o, "custom_names");
			GList *names = json_object_get_members(cn);

			for (GList *l = names; l; l = l->next) {
				JsonNode *n = json_object_get_member(cn, l->data);

				if (JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING)
					profile_set_custom_name(out->prof, g_ascii_strtoull(l->data, NULL, 10),
								json_node_get_string(n));
			}
			g_list_free(names);
		}
		if (json_object_has_member(o, "counters")) {
			JsonArray *a = json_object_get_array_member(o, "counters");

			for (guint i = 0; a && i < json_array_get_length(a) && i < CH_CNT__COUNT; i++)
				m->counters[i] = (uint64_t)json_array_get_int_element(a, i);
		}
		ok = true;
	}
	g_object_unref(jp);
	return ok;
}
