/* recording.c -- camlheap's recording file over memtrace.h (see recording.h). */
#define _GNU_SOURCE
#include "output/recording.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>

#include "output/memtrace.h"
#include "output/outfile.h"

#define CONTEXT_MAGIC "camlheap-recording 1 "
#define CODE_ANN (1ull << 62)            /* annotation: a location event only, never in a backtrace */
#define CODE_TERM (1ull << 61)           /* outermost code of a walk that ended early */
#define CODE_FUNC (1ull << 60)           /* a function's start line: a location event only, never in a backtrace */
#define LEAF_IDX_SHIFT 48                /* Comballoc index on the allocation point's code */
#define PC_MASK ((1ull << LEAF_IDX_SHIFT) - 1)
#define ANN_PAYLOAD ((1ull << 56) - 1)
#define TERM_LOST 0xfe                   /* CODE_TERM | TERM_LOST: the stack's frames never arrived */
#define LOST_STACK_ID 0xfeull            /* its stack id when read back (real ones are odd) */
#define ANN(type, payload) (CODE_ANN | (uint64_t)(type) << 56 | ((uint64_t)(payload) & ANN_PAYLOAD))
#define MAX_INLINE 16

enum ann_type {
	ANN_GC = 1,     /* minor collections (bits 0..31), major collections (32..55) at the next events */
	ANN_CYCLE = 2,  /* clean phases seen before the next allocations (their major cycle) */
	ANN_CLEAN = 3,  /* a clean-phase note: its number (0..31), blocks in the major set (32..55) */
	ANN_FATE = 4,   /* a fate memtrace has no event for: CH_FATE_* (48..55), object id (0..47) */
	ANN_ALLOC = 5,  /* the next allocations: kind (0..1, and 4 for its third bit), in the minor heap (2),
			 * followed (3), bigarray data CH_BA_* or the low bits of a malloc's ch_malloc_fn (5..6),
			 * CH_MALLOC_OUTSIDE (7), Comballoc index (8..15), allocations combined (16..31),
			 * domain (32..47) */
	ANN_CUSTOM = 6, /* the next custom allocations' struct custom_operations * in the target (0..55);
			 * their identifiers are in the context's "custom_names" */
};

static uint64_t u24(uint64_t v) { return v > 0xffffff ? 0xffffff : v; }

/* ---- writing --------------------------------------------------------- */

struct recording {
	char *output;
	FILE *body;
	FILE *log;
	struct mt_writer *w;
	int pid;
	double rate;
	bool census_on;
	uint64_t start_us;
	int64_t mono_to_real_ns;
	GHashTable *defined;      /* codes with a location event (uint64 set) */
	GHashTable *stacks_done;  /* stack ids whose codes all have one (uint64 set) */
	GHashTable *ids;          /* kernel sample id -> object id */
	GHashTable *funcs;        /* "function\0file" whose start line was written */
	uint64_t gc, cycle, flags, custom_ops;
	bool gc_set, cycle_set, flags_set, custom_set;
	uint64_t *codes;
	size_t codes_cap;
	int err;
};

static uint64_t *u64_dup(uint64_t v)
{
	uint64_t *p = g_new(uint64_t, 1);
	*p = v;
	return p;
}

int recording_new(const char *output, int pid, double rate, bool census_on, struct recording **out)
{
	struct recording *rc = calloc(1, sizeof(*rc));
	struct timespec real, mono;
	int fd = -1, ret;

	if (!rc)
		return -ENOMEM;
	rc->output = output ? strdup(output) : NULL;
	if (output && strcmp(output, "-")) {
		char *copy = strdup(output), *dir = copy ? dirname(copy) : NULL;

		if (dir)
			fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		free(copy);
	}
	rc->body = fd >= 0 ? fdopen(fd, "w+") : tmpfile();
	if (!rc->body) {
		ret = -errno;
		if (fd >= 0)
			close(fd);
		free(rc->output);
		free(rc);
		return ret;
	}
	clock_gettime(CLOCK_REALTIME, &real);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	rc->mono_to_real_ns = ((int64_t)real.tv_sec - mono.tv_sec) * 1000000000 + (real.tv_nsec - mono.tv_nsec);
	rc->start_us = (uint64_t)real.tv_sec * 1000000 + (uint64_t)real.tv_nsec / 1000;
	rc->pid = pid;
	rc->rate = rate;
	rc->census_on = census_on;
	rc->defined = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	rc->stacks_done = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	rc->ids = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, g_free);
	rc->funcs = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ret = mt_writer_new(rc->body, (uint64_t)pid, rc->start_us, &rc->w);
	if (ret < 0) {
		recording_free(rc);
		return ret;
	}
	const char *log = getenv("CAMLHEAP_TRACE_LOG");
	if (log && *log && (rc->log = fopen(log, "we")))
		mt_writer_set_log(rc->w, rc->log);
	*out = rc;
	return 0;
}

static uint64_t to_us(const struct recording *rc, uint64_t mono_ns)
{
	int64_t real = (int64_t)mono_ns + rc->mono_to_real_ns;

	return real > 0 ? (uint64_t)real / 1000 : 0;
}

static void note_err(struct recording *rc, int ret)
{
	if (ret < 0 && !rc->err)
		rc->err = ret;
}

static void annotate(struct recording *rc, uint64_t t, uint64_t code)
{
	/* the same annotation may come again (the same counters after a
	 * change back): an identical empty redefinition, which readers accept */
	note_err(rc, mt_put_location(rc->w, t, code, NULL, 0));
}

static void announce_gc(struct recording *rc, uint64_t t, uint32_t minor, uint32_t major)
{
	uint64_t gc = (uint64_t)minor | u24(major) << 32;

	if (rc->gc_set && rc->gc == gc)
		return;
	rc->gc = gc;
	rc->gc_set = true;
	annotate(rc, t, ANN(ANN_GC, gc));
}

static void define_code(struct recording *rc, struct modules *mods, uint64_t t, uint64_t code)
{
	struct mt_location locs[MAX_INLINE];
	struct sym_frame fr[MAX_INLINE];
	char name[64];
	int n;

	if (g_hash_table_contains(rc->defined, &code))
		return;
	if (code == (CODE_TERM | TERM_LOST)) {
		locs[0] = (struct mt_location){ .filename = "", .defname = "[stack frames lost]" };
		n = 1;
	} else if (code & CODE_TERM) {
		snprintf(name, sizeof(name), "[stack walk ended: %s]", report_term_name((unsigned)(code & 0xff)));
		locs[0] = (struct mt_location){ .filename = "", .defname = name };
		n = 1;
	} else {
		n = modules_lookup(mods, code & PC_MASK, (unsigned)(code >> LEAF_IDX_SHIFT) & 0xff, fr, MAX_INLINE);
		/* symbolizer order is innermost first; memtrace's is outermost first */
		for (int i = 0; i < n; i++) {
			const struct sym_frame *f = &fr[n - 1 - i];

			locs[i] = (struct mt_location){
				.filename = f->file ? f->file : "",
				.defname = f->function ? f->function : "??",
				.line = f->line > 0 ? (uint32_t)f->line : 0,
				.start_char = f->column > 0 ? (uint32_t)f->column : 0,
				.end_char = f->end_column > 0 ? (uint32_t)f->end_column : 0,
			};
		}
	}
	note_err(rc, mt_put_location(rc->w, t, code, locs, (size_t)n));
	g_hash_table_add(rc->defined, u64_dup(code));
	/* the function's start line (pprof's Function.start_line), once */
	if (!(code & CODE_TERM) && n > 0 && fr[n - 1].start_line > 0) {
		char *key = g_strdup_printf("%s|%s", locs[0].defname, locs[0].filename);

		if (g_hash_table_contains(rc->funcs, key)) {
			g_free(key);
		} else {
			struct mt_location fl = { .filename = locs[0].filename, .defname = locs[0].defname,
						  .line = (uint32_t)fr[n - 1].start_line };

			note_err(rc, mt_put_location(rc->w, t, CODE_FUNC | g_hash_table_size(rc->funcs), &fl, 1));
			g_hash_table_add(rc->funcs, key);
		}
	}
}

static void add_sample(struct recording *rc, const struct profile *p, struct modules *mods,
		       const struct ch_sample_event *ev)
{
	const struct profile_stack *st = g_hash_table_lookup(p->stacks, &ev->stack_id);
	uint64_t t = to_us(rc, ev->time_ns), id;
	size_t n = 0, need;
	uint64_t flags = (uint64_t)(ev->kind & 3) | (uint64_t)(ev->in_minor_heap ? 1 : 0) << 2 |
			 (uint64_t)(ev->sample_id ? 1 : 0) << 3 | (uint64_t)((ev->kind >> 2) & 1) << 4 |
			 (uint64_t)(ev->ext_flags & 3) << 5 | (uint64_t)(ev->ext_flags >> 7) << 7 |
			 (uint64_t)ev->alloc_idx << 8 |
			 (uint64_t)ev->nallocs << 16 | (uint64_t)(ev->domain & 0xffff) << 32 |
			 (uint64_t)(ev->rate_shift > CH_MAX_RATE_SHIFT ? CH_MAX_RATE_SHIFT : ev->rate_shift) << 48;

	if (t < rc->start_us)
		t = rc->start_us;
	announce_gc(rc, t, ev->minor_gcs, ev->major_gcs);
	if (!rc->cycle_set || rc->cycle != ev->clean_phases) {
		rc->cycle = ev->clean_phases;
		rc->cycle_set = true;
		annotate(rc, t, ANN(ANN_CYCLE, ev->clean_phases));
	}
	if (!rc->flags_set || rc->flags != flags) {
		rc->flags = flags;
		rc->flags_set = true;
		annotate(rc, t, ANN(ANN_ALLOC, flags));
	}
	if (ev->kind == CH_KIND_CUSTOM && (!rc->custom_set || rc->custom_ops != ev->custom_ops)) {
		rc->custom_ops = ev->custom_ops;
		rc->custom_set = true;
		annotate(rc, t, ANN(ANN_CUSTOM, ev->custom_ops));
	}
	need = st ? st->nframes + 1 : 1;
	if (need > rc->codes_cap) {
		uint64_t *c = realloc(rc->codes, need * sizeof(*c));

		if (!c) {
			note_err(rc, -ENOMEM);
			return;
		}
		rc->codes = c;
		rc->codes_cap = need;
	}
	if (st) {
		if (st->term != CH_TERM_CLEAN)
			rc->codes[n++] = CODE_TERM | st->term;
		for (uint32_t i = st->nframes; i-- > 0;)
			rc->codes[n++] = (st->frames[i] & PC_MASK) |
					 (i == 0 ? (uint64_t)ev->alloc_idx << LEAF_IDX_SHIFT : 0);
	} else {
		/* the event that carried this stack's frames was lost: say so
		 * (no codes at all is a stack without OCaml frames) */
		rc->codes[n++] = CODE_TERM | TERM_LOST;
	}
	/* once per stack; after that only the allocation point's code can be
	 * new (another Comballoc index) */
	if (st && g_hash_table_contains(rc->stacks_done, &ev->stack_id)) {
		if (n)
			define_code(rc, mods, t, rc->codes[n - 1]);
	} else {
		for (size_t i = 0; i < n; i++)
			define_code(rc, mods, t, rc->codes[i]);
		if (st)
			g_hash_table_add(rc->stacks_done, u64_dup(ev->stack_id));
	}
	/* out-of-heap memory (custom, bigarray data) is memtrace's "external":
	 * its length is the whole size, no header */
	bool external = ev->kind == CH_KIND_CUSTOM || ev->kind == CH_KIND_BIGARRAY || ev->kind == CH_KIND_MALLOC;
	uint64_t length = external ? ev->size_words : ev->size_words ? ev->size_words - 1 : 0;
	enum mt_source src = ev->kind == CH_KIND_MINOR ? MT_SRC_MINOR : external ? MT_SRC_EXTERNAL : MT_SRC_MAJOR;
	int ret = mt_put_alloc(rc->w, t, length, ev->nsamples ? (uint64_t)ev->nsamples << (ev->rate_shift > CH_MAX_RATE_SHIFT ? CH_MAX_RATE_SHIFT : ev->rate_shift) : 1, src, rc->codes, n, &id);

	note_err(rc, ret);
	if (!ret && ev->sample_id)
		g_hash_table_insert(rc->ids, u64_dup(ev->sample_id), u64_dup(id));
}

static void add_fate(struct recording *rc, const struct ch_fate_event *f)
{
	uint64_t t = to_us(rc, f->time_ns), *idp, id;

	if (t < rc->start_us)
		t = rc->start_us;
	if (f->kind == CH_NOTE_MAJOR_CLEAN) {
		announce_gc(rc, t, f->minor_gcs, f->major_gcs);
		annotate(rc, t, ANN(ANN_CLEAN, (uint64_t)f->clean_phases | u24(f->tracked) << 32));
		return;
	}
	idp = g_hash_table_lookup(rc->ids, &f->sample_id);
	if (!idp) /* its sample event was lost: the profile counts it as an orphan */
		return;
	id = *idp;
	announce_gc(rc, t, f->minor_gcs, f->major_gcs);
	switch (f->kind) {
	case CH_FATE_PROMOTE:
		note_err(rc, mt_put_promote(rc->w, t, id));
		return;
	case CH_FATE_DEAD_MINOR:
	case CH_FATE_DEAD_MAJOR:
	case CH_FATE_FREED:
		note_err(rc, mt_put_collect(rc->w, t, id));
		break;
	default:
		annotate(rc, t, ANN(ANN_FATE, (uint64_t)f->kind << 48 | (id & PC_MASK)));
		break;
	}
	g_hash_table_remove(rc->ids, &f->sample_id);
}

void recording_add(struct recording *rc, const struct profile *p, struct modules *mods,
		   const struct ch_sample_event *ev, size_t size)
{
	if (!rc || size < sizeof(struct ch_fate_event))
		return;
	if (ev->kind < CH_KIND__COUNT) {
		if (size >= CH_EVENT_HEADER_BYTES)
			add_sample(rc, p, mods, ev);
	} else if (ev->kind >= CH_FATE_PROMOTE && ev->kind <= CH_NOTE_MAJOR_CLEAN) {
		add_fate(rc, (const struct ch_fate_event *)ev);
	}
}

uint64_t recording_bytes(const struct recording *rc)
{
	off_t o = rc && rc->body ? ftello(rc->body) : 0;

	return o > 0 ? (uint64_t)o : 0;
}

uint64_t recording_allocs(const struct recording *rc) { return rc ? mt_writer_allocs(rc->w) : 0; }

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
	F("start_unix_ns", M_I64, start_unix_ns),
	F("max_frames", M_UINT, max_frames),
	F("probes_emulated", M_UINT, probes_emulated),
	F("probes_total", M_UINT, probes_total),
	F("plugins", M_UINT, plugins),
	F("unreadable_files", M_UINT, unreadable_files),
	F("cpu_s", M_DBL, cpu_s),
	F("max_rss_mib", M_DBL, max_rss_mib),
	F("fates_drained", M_U64, fates_drained),
	F("exec_stops", M_U64, exec_stops),
	F("exec_writes", M_U64, exec_writes),
	F("exec_freezes", M_U64, exec_freezes),
	F("exec_freeze_timeouts", M_U64, exec_freeze_timeouts),
	F("exec_stale", M_U64, exec_stale),
	F("exec_pending", M_U64, exec_pending),
	F("exec_errors", M_U64, exec_errors),
	F("exec_passed_signals", M_U64, exec_passed_signals),
	F("exec_service_s", M_DBL, exec_service_s),
#undef F
};

static char *meta_json(const struct recording *rc, const struct report_meta *m, const struct profile *p,
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

int recording_finish(struct recording *rc, const struct report_meta *m, const struct profile *p,
		     struct modules *mods)
{
	return recording_write(rc, rc->output, m, p, mods);
}

int recording_write(struct recording *rc, const char *path, const struct report_meta *m, const struct profile *p,
		    struct modules *mods)
{
	char build_id[128] = "", host[256] = "";
	struct outfile out;
	int ret;

	if (rc->err)
		return rc->err;
	for (size_t i = 0; i < mods->n; i++)
		if (mods->v[i].is_exe && mods->v[i].img)
			if (elf_image_build_id(mods->v[i].img, build_id, sizeof(build_id)) <= 0)
				build_id[0] = 0;
	gethostname(host, sizeof(host) - 1);
	char *json = meta_json(rc, m, p, build_id[0] ? build_id : NULL);
	char *context = g_strconcat(CONTEXT_MAGIC, json, NULL);
	struct mt_info info = {
		.sample_rate = rc->rate,
		.word_size_bits = 64,
		.executable = m->exe ? m->exe : "",
		.host = host,
		.runtime_params = "",
		.pid = (uint64_t)rc->pid,
		.start_us = rc->start_us,
		.context = context,
	};

	g_free(json);
	ret = outfile_open(&out, path);
	if (ret == 0) {
		ret = mt_writer_finish(rc->w, &info, out.f);
		if (ret < 0)
			outfile_abort(&out);
		else
			ret = outfile_commit(&out);
	}
	g_free(context);
	if (rc->log)
		fflush(rc->log);
	return ret;
}

void recording_free(struct recording *rc)
{
	if (!rc)
		return;
	mt_writer_free(rc->w);
	if (rc->body)
		fclose(rc->body);
	if (rc->log)
		fclose(rc->log);
	if (rc->defined)
		g_hash_table_destroy(rc->defined);
	if (rc->stacks_done)
		g_hash_table_destroy(rc->stacks_done);
	if (rc->ids)
		g_hash_table_destroy(rc->ids);
	if (rc->funcs)
		g_hash_table_destroy(rc->funcs);
	free(rc->codes);
	free(rc->output);
	free(rc);
}

/* ---- reading --------------------------------------------------------- */

struct loaded_priv {
	struct mt_reader *r;
	GHashTable *start_lines;  /* "function|file" -> start line */
	GStringChunk *strings;
	char rawbuf[32][24];
	unsigned rawnext;
};

static int recorded_lookup(void *ctx, uint64_t pc, unsigned alloc_idx, struct sym_frame *out, int max)
{
	struct loaded_priv *lp = ctx;
	uint64_t code = (pc & PC_MASK) | (uint64_t)(alloc_idx & 0xff) << LEAF_IDX_SHIFT;
	size_t n;
	const struct mt_location *l = mt_reader_lookup(lp->r, code, &n);

	if (!l && alloc_idx)
		l = mt_reader_lookup(lp->r, pc & PC_MASK, &n);
	if (max < 1)
		return 0;
	if (!l || !n) {
		char *b = lp->rawbuf[lp->rawnext++ % 32];

		snprintf(b, sizeof(lp->rawbuf[0]), "0x%llx", (unsigned long long)pc);
		memset(out, 0, sizeof(*out));
		out->function = b;
		return 1;
	}
	if (n > (size_t)max)
		n = (size_t)max;
	for (size_t i = 0; i < n; i++) {
		const struct mt_location *x = &l[n - 1 - i];

		out[i] = (struct sym_frame){
			.function = x->defname,
			.file = x->filename[0] ? x->filename : NULL,
			.line = (int)x->line,
			.column = (int)x->start_char,
			.end_column = (int)x->end_char,
			.inlined = i + 1 < n,
		};
	}
	if (n) {
		char *key = g_strdup_printf("%s|%s", l[0].defname, l[0].filename);

		out[n - 1].start_line = GPOINTER_TO_INT(g_hash_table_lookup(lp->start_lines, key));
		g_free(key);
	}
	return (int)n;
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
static bool read_meta(struct recording_loaded *out, struct loaded_priv *lp, const char *context,
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

static bool frame_matches(const struct mt_location *l, size_t n, const char *const *subs)
{
	for (size_t i = 0; i < n; i++)
		for (const char *const *s = subs; *s; s++)
			if (strstr(l[i].defname, *s) || strstr(l[i].filename, *s))
				return true;
	return false;
}

static uint64_t fnv1a(const uint64_t *v, size_t n, uint64_t extra)
{
	uint64_t h = 0xcbf29ce484222325ull ^ extra;

	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 64; b += 8) {
			h ^= (v[i] >> b) & 0xff;
			h *= 0x100000001b3ull;
		}
	return h | 1; /* never 0: 0 is "no stack" */
}

struct load_state {
	struct recording_loaded *out;
	struct loaded_priv *lp;
	const struct recording_filter *f;
	uint64_t from_us, to_us;
	uint32_t minor, major, cycle, cycle_base;
	uint64_t flags;
	uint64_t custom_ops;       /* the last ANN_CUSTOM */
	bool camlheap;
	GByteArray *kept;          /* per object id: 1 kept, 2 kept and born in the minor heap, 0 not */
	GHashTable *stack_ok;      /* stack hash -> GINT_TO_POINTER(1 keep, 2 drop) */
	struct ch_sample_event *ev;
	uint32_t clean_before;     /* clean notes before the window */
};

static bool stack_selected(struct load_state *s, const uint64_t *codes, size_t n, uint64_t h)
{
	const struct recording_filter *f = s->f;
	gpointer v;

	if (!f || (!f->focus && !f->ignore))
		return true;
	v = g_hash_table_lookup(s->stack_ok, &h);
	if (v)
		return GPOINTER_TO_INT(v) == 1;
	bool focus_hit = !f->focus, ignore_hit = false;
	for (size_t i = 0; i < n; i++) {
		size_t nl;
		const struct mt_location *l = mt_reader_lookup(s->lp->r, codes[i], &nl);

		if (!l)
			continue;
		if (f->focus && frame_matches(l, nl, f->focus))
			focus_hit = true;
		if (f->ignore && frame_matches(l, nl, f->ignore))
			ignore_hit = true;
	}
	bool ok = focus_hit && !ignore_hit;
	g_hash_table_insert(s->stack_ok, u64_dup(h), GINT_TO_POINTER(ok ? 1 : 2));
	return ok;
}

static void load_alloc(struct load_state *s, const struct mt_event *e)
{
	struct ch_sample_event *ev = s->ev;
	const uint64_t *codes = e->codes;
	size_t n = e->ncodes;
	unsigned kind, term = CH_TERM_CLEAN;
	bool in_window = e->time_us >= s->from_us && e->time_us <= s->to_us;
	uint8_t keep = 0;

	if (s->kept->len <= e->id)
		g_byte_array_set_size(s->kept, (guint)e->id + 1);
	s->out->allocs_read++;
	if (!in_window)
		goto done;
	if (s->camlheap) {
		kind = (unsigned)(s->flags & 3) | (unsigned)((s->flags >> 4) & 1) << 2;
		if (kind >= CH_KIND__COUNT)
			kind = CH_KIND_MAJOR;
	} else {
		kind = e->source == MT_SRC_MINOR ? CH_KIND_MINOR : e->source == MT_SRC_EXTERNAL ? CH_KIND_CUSTOM
											  : CH_KIND_MAJOR;
	}
	bool lost = s->camlheap && n == 1 && codes[0] == (CODE_TERM | TERM_LOST);

	if (!lost && n && (codes[0] & CODE_TERM) && !(codes[0] & CODE_ANN)) {
		term = (unsigned)(codes[0] & 0xff);
		if (term >= CH_TERM__COUNT)
			term = CH_TERM_UNKNOWN_PC;
		codes++;
		n--;
	}
	if (lost)
		n = 0;
	if (n > CH_MAX_FRAMES) {
		/* keep the leaf side, as the kernel does at its depth limit */
		codes += n - CH_MAX_FRAMES;
		n = CH_MAX_FRAMES;
		term = CH_TERM_DEPTH;
	}
	memset(ev, 0, CH_EVENT_HEADER_BYTES);
	for (size_t i = 0; i < n; i++)
		ev->frames[i] = codes[n - 1 - i] & PC_MASK;
	uint64_t h = lost ? LOST_STACK_ID : fnv1a((const uint64_t *)ev->frames, n, term);
	if (!stack_selected(s, codes, n, h))
		goto done;
	ev->stack_id = h;
	ev->time_ns = e->time_us * 1000;
	ev->block_addr = 0;
	ev->size_words = kind == CH_KIND_CUSTOM || kind == CH_KIND_BIGARRAY || kind == CH_KIND_MALLOC ? e->length
													   : e->length + 1;
	if (s->camlheap && kind == CH_KIND_BIGARRAY)
		ev->ext_flags = (uint8_t)((s->flags >> 5) & 3);
	if (s->camlheap && kind == CH_KIND_MALLOC) /* the function is the leaf (pseudo) frame */
		ev->ext_flags = (uint8_t)(((s->flags >> 5) & 3) | (s->flags & 0x80));
	if (s->camlheap && kind == CH_KIND_CUSTOM)
		ev->custom_ops = s->custom_ops;
	ev->minor_gcs = s->minor;
	ev->major_gcs = s->major;
	ev->clean_phases = s->cycle > s->cycle_base ? s->cycle - s->cycle_base : 0;
	/* memtrace's n_samples counts at the trace's rate; under a budget the
	 * event kept n_samples >> shift of them (the profile weighs them back) */
	ev->rate_shift = s->camlheap ? (uint32_t)(s->flags >> 48) & 31 : 0;
	if (ev->rate_shift > CH_MAX_RATE_SHIFT)
		ev->rate_shift = 0;
	ev->nsamples = e->nsamples >> ev->rate_shift > UINT32_MAX ? UINT32_MAX : (uint32_t)(e->nsamples >> ev->rate_shift);
	ev->kind = (uint8_t)kind;
	ev->term = (uint8_t)term;
	ev->nframes = (uint32_t)n;
	ev->has_frames = !lost && !g_hash_table_contains(s->out->prof->stacks, &h);
	if (s->camlheap) {
		ev->in_minor_heap = (s->flags >> 2) & 1;
		ev->sample_id = (s->flags >> 3) & 1 ? e->id + 1 : 0;
		ev->alloc_idx = (uint8_t)(s->flags >> 8);
		ev->nallocs = (uint16_t)(s->flags >> 16);
		ev->domain = (uint32_t)(s->flags >> 32) & 0xffff;
	} else {
		ev->in_minor_heap = e->source == MT_SRC_MINOR;
		ev->sample_id = e->id + 1;
		ev->alloc_idx = (uint8_t)(n ? (codes[n - 1] >> LEAF_IDX_SHIFT) & 0xff : 0);
		ev->nallocs = 1;
	}
	if (!ev->nallocs)
		ev->nallocs = 1;
	profile_add_event(s->out->prof, ev, CH_EVENT_HEADER_BYTES + n * sizeof(uint64_t));
	s->out->allocs_kept++;
	keep = ev->sample_id ? 1 : 0;
done:
	s->kept->data[e->id] = keep;
}

static void load_fate(struct load_state *s, uint64_t t_us, uint64_t id, unsigned kind)
{
	struct ch_fate_event f = { 0 };

	if (t_us > s->to_us || id >= s->kept->len || !s->kept->data[id])
		return;
	f.sample_id = id + 1;
	f.time_ns = t_us * 1000;
	f.minor_gcs = s->minor;
	f.major_gcs = s->major;
	f.kind = (uint8_t)kind;
	if (kind == CH_FATE_DEAD_MINOR) {
		/* a collect: dead in the minor heap if never promoted */
		const struct profile_block *b = g_hash_table_lookup(s->out->prof->blocks, &f.sample_id);

		if (b && b->state != PROFILE_BLOCK_YOUNG)
			f.kind = CH_FATE_DEAD_MAJOR;
	}
	profile_add_fate(s->out->prof, &f, sizeof(f));
}

static void load_annotation(struct load_state *s, uint64_t t_us, uint64_t code)
{
	uint64_t v = code & ANN_PAYLOAD;

	switch ((code >> 56) & 0x3f) {
	case ANN_GC:
		s->minor = (uint32_t)v;
		s->major = (uint32_t)(v >> 32);
		break;
	case ANN_CYCLE:
		s->cycle = (uint32_t)v;
		break;
	case ANN_CLEAN:
		if (t_us < s->from_us) {
			s->clean_before = (uint32_t)v;
			s->cycle_base = s->clean_before;
		} else if (t_us <= s->to_us) {
			struct ch_fate_event f = { 0 };

			f.time_ns = t_us * 1000;
			f.minor_gcs = s->minor;
			f.major_gcs = s->major;
			f.clean_phases = (uint32_t)v - s->cycle_base;
			f.tracked = (uint32_t)(v >> 32);
			f.kind = CH_NOTE_MAJOR_CLEAN;
			profile_add_fate(s->out->prof, &f, sizeof(f));
		}
		break;
	case ANN_FATE:
		load_fate(s, t_us, v & PC_MASK, (unsigned)(v >> 48) & 0xff);
		break;
	case ANN_ALLOC:
		s->flags = v;
		break;
	case ANN_CUSTOM:
		s->custom_ops = v;
		break;
	}
}

int recording_load(const char *path, const struct recording_filter *f, struct recording_loaded *out, char *err,
		   size_t errlen)
{
	struct loaded_priv *lp = calloc(1, sizeof(*lp));
	struct load_state s = { 0 };
	struct mt_event e;
	uint64_t orphans = 0, last_us;
	bool any_fate = false;
	int ret;

	memset(out, 0, sizeof(*out));
	if (!lp)
		return -ENOMEM;
	out->priv = lp;
	lp->strings = g_string_chunk_new(1024);
	lp->start_lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	ret = mt_reader_open(path, &lp->r, err, errlen);
	if (ret < 0) {
		recording_loaded_free(out);
		return ret;
	}
	const struct mt_info *info = mt_reader_info(lp->r);
	out->prof = profile_new(info->sample_rate);
	if (out->prof && f)
		out->prof->by_domain = f->by_domain;
	s.ev = malloc(sizeof(*s.ev));
	if (!out->prof || !s.ev) {
		free(s.ev);
		recording_loaded_free(out);
		return -ENOMEM;
	}
	out->camlheap = read_meta(out, lp, info->context, &orphans);
	if (!out->camlheap) {
		out->meta.pid = (int)info->pid;
		out->meta.exe = g_string_chunk_insert_const(lp->strings, info->executable);
		out->meta.ocaml_version = "?";
		out->meta.executor = "memtrace (in-process)";
		out->meta.sampler_mode = "Gc.Memprof in the program (memtrace)";
		out->meta.end_reason = "trace end";
		out->meta.start_unix_ns = (int64_t)info->start_us * 1000;
		out->meta.foreign = true;
	}
	out->mods.recorded_lookup = recorded_lookup;
	out->mods.recorded_ctx = lp;
	s.out = out;
	s.lp = lp;
	s.f = f;
	s.camlheap = out->camlheap;
	/* times count from the recording's zero, the end of the attach, as
	 * the report's duration and peak time do (a foreign trace: its start) */
	uint64_t zero_us = out->camlheap && out->meta.start_unix_ns > 0 ? (uint64_t)out->meta.start_unix_ns / 1000
									 : info->start_us;
	out->prof->zero_ns = zero_us * 1000;
	s.from_us = f && f->from_s > 0 ? (f->from_s >= 1e9 ? UINT64_MAX : zero_us + (uint64_t)(f->from_s * 1e6))
				       : 0;
	s.to_us = f && f->to_s >= 0 && f->to_s < 1e9 ? zero_us + (uint64_t)(f->to_s * 1e6) : UINT64_MAX;
	s.kept = g_byte_array_new();
	s.stack_ok = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	last_us = info->start_us;
	while ((ret = mt_reader_next(lp->r, &e)) > 0) {
		last_us = e.time_us;
		switch (e.type) {
		case MT_EV_LOCATION:
			if (e.code & CODE_ANN)
				load_annotation(&s, e.time_us, e.code);
			else if ((e.code & CODE_FUNC) && e.nlocs == 1)
				g_hash_table_insert(lp->start_lines,
						    g_strdup_printf("%s|%s", e.locs[0].defname, e.locs[0].filename),
						    GINT_TO_POINTER((int)e.locs[0].line));
			break;
		case MT_EV_ALLOC:
			load_alloc(&s, &e);
			if (!out->camlheap && e.ncodes > out->meta.max_frames)
				out->meta.max_frames = (unsigned)e.ncodes;
			break;
		case MT_EV_PROMOTE:
			any_fate = true;
			load_fate(&s, e.time_us, e.id, CH_FATE_PROMOTE);
			break;
		case MT_EV_COLLECT:
			any_fate = true;
			load_fate(&s, e.time_us, e.id, CH_FATE_DEAD_MINOR);
			break;
		default:
			break;
		}
	}
	mt_reader_skipped(lp->r, &out->skipped_pid, &out->skipped_truncated);
	free(s.ev);
	g_byte_array_free(s.kept, TRUE);
	g_hash_table_destroy(s.stack_ok);
	if (ret < 0) {
		snprintf(err, errlen, "%s: %s", path, mt_reader_error(lp->r));
		recording_loaded_free(out);
		return ret;
	}
	if (!out->camlheap) {
		out->meta.census_on = any_fate;
		if (!any_fate)
			out->meta.census_off_why = "the trace has no promote or collect events";
		out->meta.duration_s = (double)(last_us - info->start_us) / 1e6;
	}
	if (out->skipped_truncated) {
		char *w = g_strdup_printf("the recording is cut short (its last packet is incomplete): events end at %.2f s; "
					  "the header's counters are those of the whole run",
					  last_us > zero_us ? (double)(last_us - zero_us) / 1e6 : 0.0);

		out->meta.warning = g_string_chunk_insert(lp->strings, w);
		g_free(w);
	}
	if (!f || (f->from_s <= 0 && f->to_s < 0 && !f->focus && !f->ignore))
		out->prof->orphan_fates += orphans;
	else {
		double from = f->from_s > 0 ? f->from_s : 0;
		double end = out->camlheap ? out->meta.duration_s : (double)(last_us - zero_us) / 1e6;
		double to = f->to_s >= 0 && f->to_s < end ? f->to_s : end;

		out->meta.duration_s = to > from ? to - from : 0;
	}
	return 0;
}

void recording_loaded_free(struct recording_loaded *l)
{
	struct loaded_priv *lp = l->priv;

	profile_free(l->prof);
	if (lp) {
		mt_reader_close(lp->r);
		if (lp->strings)
			g_string_chunk_free(lp->strings);
		if (lp->start_lines)
			g_hash_table_destroy(lp->start_lines);
		free(lp);
	}
	memset(l, 0, sizeof(*l));
}

int recording_dump(const char *path, FILE *out)
{
	struct mt_reader *r;
	struct mt_event e;
	char err[512];
	int ret = mt_reader_open(path, &r, err, sizeof(err));

	if (ret < 0) {
		fprintf(stderr, "camlheap: %s\n", err);
		return 2;
	}
	const struct mt_info *info = mt_reader_info(r);
	fprintf(out, "trace_info rate %g word_size %u pid %llu start %llu executable %s host %s context %s\n",
		info->sample_rate, info->word_size_bits, (unsigned long long)info->pid,
		(unsigned long long)info->start_us, info->executable, info->host, info->context);
	while ((ret = mt_reader_next(r, &e)) > 0)
		mt_event_print(out, &e);
	if (ret < 0) {
		fprintf(stderr, "camlheap: %s: %s\n", path, mt_reader_error(r));
		mt_reader_close(r);
		return 2;
	}
	unsigned wp, tr;
	mt_reader_skipped(r, &wp, &tr);
	if (wp || tr)
		fprintf(stderr, "camlheap: %s: skipped %u packet(s) of another pid, %u truncated\n", path, wp, tr);
	mt_reader_close(r);
	return 0;
}
