/* pprof.c -- see pprof.h.  The message layout comes from protobuf-c's code
 * generated from proto/profile.proto at build time; compression is zlib's
 * gzip format (deflate with windowBits 16 + 15). */
#include "output/pprof.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <zlib.h>

#include "profile.pb-c.h"
#include "output/report_names.h"

#define MAX_INLINE 16
#define PPROF_TYPES 6 /* alloc_objects, alloc_space, inuse_objects, inuse_space, unreclaimed_objects, unreclaimed_space */


struct builder {
	GHashTable *strings;   /* string -> index + 1 */
	GPtrArray *table;      /* index -> string (owned) */
	GHashTable *functions; /* "name\0file" key -> Function * */
	GPtrArray *function_v;
	GHashTable *locations; /* (pc, alloc_idx) -> Location * */
	GPtrArray *location_v;
	GPtrArray *owned;      /* everything else to free */
	struct modules *mods;
};

static int64_t str_ix(struct builder *b, const char *s)
{
	gpointer v;

	if (!s)
		s = "";
	v = g_hash_table_lookup(b->strings, s);
	if (v)
		return GPOINTER_TO_SIZE(v) - 1;
	g_ptr_array_add(b->table, g_strdup(s));
	g_hash_table_insert(b->strings, b->table->pdata[b->table->len - 1], GSIZE_TO_POINTER(b->table->len));
	return b->table->len - 1;
}

static void *own(struct builder *b, void *p)
{
	if (p)
		g_ptr_array_add(b->owned, p);
	return p;
}

/* The name pprof shows for OCaml's `name`.  go tool pprof takes a name
 * equal to its system_name for an undemangled one and, if it looks like
 * C++ (any of "<>[]" or "::"), strips what is in parentheses: "Op.(+>)"
 * would show as "Op.", every operator of a module as one node (pprof
 * internal/symbolizer demangleSingleFunction, looksLikeDemangledCPlusPlus).
 * Such a name is written as OCaml code writes the operator, "Op.( +> )",
 * which differs from the exact system_name and is then shown as is.
 * Returns `name` itself, or a g_malloc'ed string owned by the builder. */
static const char *pprof_name(struct builder *b, const char *name)
{
	GString *g;

	if (!strpbrk(name, "<>[]") && !strstr(name, "::"))
		return name;
	g = g_string_new(NULL);
	for (const char *p = name; *p; p++) {
		if (*p == '(' && p[1] && p[1] != ' ' && strncmp(p, "(fun)", 5)) {
			g_string_append(g, "( ");
		} else if (*p == ')' && p > name && p[-1] != ' ' && !(p - name >= 4 && !strncmp(p - 4, "(fun)", 5))) {
			g_string_append(g, " )");
		} else {
			g_string_append_c(g, *p);
		}
	}
	return own(b, g_string_free(g, FALSE));
}

static uint64_t function_id(struct builder *b, const struct sym_frame *f)
{
	char *key = g_strdup_printf("%s%c%s", f->function ? f->function : "?", 0, f->file ? f->file : "");
	size_t klen = strlen(key) + 1 + strlen(key + strlen(key) + 1);
	GBytes *k = g_bytes_new_take(key, klen);
	Perftools__Profiles__Function *fn = g_hash_table_lookup(b->functions, k);

	if (fn) {
		g_bytes_unref(k);
		if (!fn->start_line && f->start_line > 0)
			fn->start_line = f->start_line;
		return fn->id;
	}
	fn = own(b, calloc(1, sizeof(*fn)));
	if (!fn) {
		g_bytes_unref(k);
		return 0;
	}
	perftools__profiles__function__init(fn);
	fn->id = b->function_v->len + 1;
	fn->name = str_ix(b, pprof_name(b, f->function ? f->function : "?"));
	fn->system_name = str_ix(b, f->function ? f->function : "?");
	fn->filename = str_ix(b, f->file);
	fn->start_line = f->start_line > 0 ? f->start_line : 0;
	g_ptr_array_add(b->function_v, fn);
	g_hash_table_insert(b->functions, k, fn);
	return fn->id;
}

static uint64_t location_id(struct builder *b, uint64_t pc, unsigned alloc_idx)
{
	uint64_t key = pc ^ ((uint64_t)alloc_idx << 56);
	Perftools__Profiles__Location *loc = g_hash_table_lookup(b->locations, &key);
	struct sym_frame fr[MAX_INLINE];
	const struct module *m;
	int n;

	if (loc)
		return loc->id;
	loc = own(b, calloc(1, sizeof(*loc)));
	if (!loc)
		return 0;
	perftools__profiles__location__init(loc);
	loc->id = b->location_v->len + 1;
	loc->address = pc;
	m = modules_find(b->mods, pc);
	loc->mapping_id = m ? (uint64_t)(m - b->mods->v) + 1 : b->mods->n ? 0 : 1;
	n = modules_lookup(b->mods, pc, alloc_idx, fr, MAX_INLINE);
	loc->line = own(b, calloc(n > 0 ? n : 1, sizeof(*loc->line)));
	for (int i = 0; loc->line && i < n; i++) {
		Perftools__Profiles__Line *l = own(b, calloc(1, sizeof(*l)));

		if (!l)
			break;
		perftools__profiles__line__init(l);
		l->function_id = function_id(b, &fr[i]); /* fr[0] innermost, as line[0] */
		l->line = fr[i].line;
		l->column = fr[i].column;
		loc->line[loc->n_line++] = l;
	}
	g_ptr_array_add(b->location_v, loc);
	g_hash_table_insert(b->locations, g_memdup2(&key, sizeof(key)), loc);
	return loc->id;
}

/* A location of its own (no address, no mapping) whose one frame is
 * "[stack walk ended: <why>]", one per reason. */
/* A frame that is not code: why a walk ended (term < CH_TERM__COUNT), or
 * MARK_LOST (the stack's frames never arrived), MARK_NONE (no OCaml frame). */
#define MARK_LOST 0x100
#define MARK_NONE 0x101
static uint64_t marker_location(struct builder *b, unsigned term)
{
	uint64_t key = 0xFF00000000000000ULL | term; /* no return address looks like this */
	Perftools__Profiles__Location *loc = g_hash_table_lookup(b->locations, &key);
	Perftools__Profiles__Line *l;
	struct sym_frame f = { 0 };
	char name[64];

	if (loc)
		return loc->id;
	loc = own(b, calloc(1, sizeof(*loc)));
	l = own(b, calloc(1, sizeof(*l)));
	if (!loc || !l)
		return 0;
	perftools__profiles__location__init(loc);
	perftools__profiles__line__init(l);
	loc->line = own(b, calloc(1, sizeof(*loc->line)));
	if (!loc->line)
		return 0;
	if (term == MARK_LOST)
		snprintf(name, sizeof(name), "[stack frames lost]");
	else if (term == MARK_NONE)
		snprintf(name, sizeof(name), "[no OCaml frames]");
	else
		snprintf(name, sizeof(name), "[stack walk ended: %s]", report_term_name(term));
	f.function = name;
	l->function_id = function_id(b, &f);
	loc->id = b->location_v->len + 1;
	loc->line[0] = l;
	loc->n_line = 1;
	g_ptr_array_add(b->location_v, loc);
	g_hash_table_insert(b->locations, g_memdup2(&key, sizeof(key)), loc);
	return loc->id;
}

static guint bytes_hash(gconstpointer k)
{
	return g_bytes_hash(k);
}

static gboolean bytes_equal(gconstpointer a, gconstpointer b)
{
	return g_bytes_equal(a, b);
}

/* round, and never 0 objects for a nonzero byte count */
static int64_t objects(double est, int64_t bytes)
{
	int64_t n = llround(est);

	return bytes > 0 && n < 1 ? 1 : n;
}

static int gzip_write(FILE *out, const uint8_t *buf, size_t len)
{
	z_stream z = { 0 };
	uint8_t chunk[65536];
	int ret, flush = Z_NO_FLUSH;

	if (deflateInit2(&z, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	z.next_in = (Bytef *)buf;
	z.avail_in = (uInt)len;
	do {
		flush = z.avail_in ? Z_NO_FLUSH : Z_FINISH;
		z.next_out = chunk;
		z.avail_out = sizeof(chunk);
		ret = deflate(&z, flush);
		if (ret == Z_STREAM_ERROR) {
			deflateEnd(&z);
			return -EIO;
		}
		if (fwrite(chunk, 1, sizeof(chunk) - z.avail_out, out) != sizeof(chunk) - z.avail_out) {
			deflateEnd(&z);
			return -(errno ? errno : EIO);
		}
	} while (ret != Z_STREAM_END);
	deflateEnd(&z);
	return 0;
}

/* The profile's mappings into `maps` (room for max(mods->n, 1)): one per
 * module, or for a recording read back (no module open) the executable by
 * path and build id.  Returns 0 or -ENOMEM. */
static int pprof_mappings(struct builder *b, Perftools__Profiles__Profile *prof, Perftools__Profiles__Mapping **maps,
			  const struct pprof_meta *m)
{
	struct modules *mods = b->mods;

	/* mappings: one per module, the executable first (modules_add_exe
	 * registers it first) */
	for (size_t i = 0; i < mods->n; i++) {
		Perftools__Profiles__Mapping *mp = own(b, calloc(1, sizeof(*mp)));
		char id[130];

		if (!mp)
			return -ENOMEM;
		perftools__profiles__mapping__init(mp);
		mp->id = i + 1;
		for (size_t r = 0; r < mods->nranges; r++) {
			const struct module_range *rg = &mods->ranges[r];

			if (rg->module != i)
				continue;
			if (!mp->memory_start || rg->start < mp->memory_start)
				mp->memory_start = rg->start;
			if (rg->end > mp->memory_limit)
				mp->memory_limit = rg->end;
		}
		mp->filename = str_ix(b, mods->v[i].is_exe && m->exe_path ? m->exe_path : mods->v[i].path);
		if (mods->v[i].img && elf_image_build_id(mods->v[i].img, id, sizeof(id)) > 0)
			mp->build_id = str_ix(b, id);
		mp->has_functions = mp->has_filenames = mp->has_line_numbers = mp->has_inline_frames = 1;
		maps[i] = mp;
	}
	prof->mapping = maps;
	prof->n_mapping = mods->n;
	if (!mods->n) {
		/* a recording read back: the executable, known by path and build id */
		Perftools__Profiles__Mapping *mp = own(b, calloc(1, sizeof(*mp)));

		if (!mp)
			return -ENOMEM;
		perftools__profiles__mapping__init(mp);
		mp->id = 1;
		mp->filename = str_ix(b, m->exe_path ? m->exe_path : "");
		if (m->build_id)
			mp->build_id = str_ix(b, m->build_id);
		mp->has_functions = mp->has_filenames = mp->has_line_numbers = mp->has_inline_frames = 1;
		maps[0] = mp;
		prof->n_mapping = 1;
	}
	return 0;
}

/* The sample of site `s`: its locations (leaf first, a marker where the
 * walk was cut or no frame is left), `n_value` values (alloc_objects,
 * alloc_space, inuse_objects, inuse_space) and labels (kind, custom type,
 * bigarray data, OCaml stack, domain).  Memory owned by `b`; NULL when out
 * of memory. */
static Perftools__Profiles__Sample *pprof_sample(struct builder *b, const struct profile *p,
						 const struct profile_site *s, const struct profile_inuse *st, size_t n_value)
{
	Perftools__Profiles__Sample *smp = own(b, calloc(1, sizeof(*smp)));
	Perftools__Profiles__Label *kind = own(b, calloc(1, sizeof(*kind)));
	Perftools__Profiles__Label *dom = own(b, calloc(1, sizeof(*dom)));
	Perftools__Profiles__Label *sub = own(b, calloc(1, sizeof(*sub)));
	Perftools__Profiles__Label **labels = own(b, calloc(3, sizeof(*labels)));
	int64_t *v = own(b, calloc(PPROF_TYPES, sizeof(*v)));
	uint32_t nf = s->stack ? s->stack->nframes : 0;
	bool cut = s->stack && s->stack->term != CH_TERM_CLEAN;
	uint64_t *ids = own(b, calloc(nf + 1, sizeof(*ids)));

	if (!smp || !kind || !dom || !sub || !labels || !v || !ids)
		return NULL;
	perftools__profiles__sample__init(smp);
	for (uint32_t j = 0; j < nf; j++) {
		uint64_t id = location_id(b, s->stack->frames[j], j == 0 ? s->alloc_idx : 0);

		if (id)
			ids[smp->n_location_id++] = id;
	}
	if (cut) /* the walk stopped early: say so as the outermost frame, not as a root */
		ids[smp->n_location_id++] = marker_location(b, s->stack->term);
	if (!smp->n_location_id) /* a sample always has a frame, as in collapsed output */
		ids[smp->n_location_id++] = marker_location(b, s->stack ? MARK_NONE : MARK_LOST);
	smp->location_id = ids;
	v[1] = llround(profile_estimate_words(p, s->samples) * 8.0);
	v[0] = objects(s->est_objects, v[1]);
	v[3] = st ? llround(profile_estimate_words(p, st->samples) * 8.0) : 0;
	v[2] = st ? objects(st->est_objects, v[3]) : 0;
	v[5] = llround(profile_estimate_words(p, s->live_samples) * 8.0);
	v[4] = objects(s->live_est_objects, v[5]);
	smp->value = v;
	smp->n_value = n_value;
	perftools__profiles__label__init(kind);
	kind->key = str_ix(b, "kind");
	kind->str = str_ix(b, report_kind_name(s->kind));
	labels[0] = kind;
	smp->label = labels;
	smp->n_label = 1;
	if ((s->kind == CH_KIND_CUSTOM && profile_custom_name(p, s->subtype)) || s->kind == CH_KIND_BIGARRAY ||
	    s->kind == CH_KIND_MALLOC) {
		/* string labels: pprof -tagfocus custom_type=_mpz, bigarray_data=owned,
		 * ocaml_stack=none (--malloc from a thread not running OCaml) */
		perftools__profiles__label__init(sub);
		sub->key = str_ix(b, s->kind == CH_KIND_CUSTOM	  ? "custom_type"
				      : s->kind == CH_KIND_BIGARRAY ? "bigarray_data"
								    : "ocaml_stack");
		sub->str = str_ix(b, s->kind == CH_KIND_CUSTOM	  ? profile_custom_name(p, s->subtype)
				      : s->kind == CH_KIND_BIGARRAY ? report_bigarray_owner(s->subtype)
				      : (s->subtype & CH_MALLOC_OUTSIDE) ? "none"
									  : "yes");
		labels[smp->n_label++] = sub;
	}
	if (p->by_domain) { /* a numeric label: pprof -tagfocus domain=2 */
		perftools__profiles__label__init(dom);
		dom->key = str_ix(b, "domain");
		dom->num = s->domain;
		labels[smp->n_label++] = dom;
	}
	return smp;
}

int pprof_write(FILE *out, const struct profile *p, struct modules *mods, const struct pprof_meta *m)
{
	struct builder b = {
		.strings = g_hash_table_new(g_str_hash, g_str_equal),
		.table = g_ptr_array_new_with_free_func(g_free),
		.functions = g_hash_table_new_full(bytes_hash, bytes_equal, (GDestroyNotify)g_bytes_unref, NULL),
		.function_v = g_ptr_array_new(),
		.locations = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL),
		.location_v = g_ptr_array_new(),
		.owned = g_ptr_array_new_with_free_func(free),
		.mods = mods,
	};
	Perftools__Profiles__Profile prof = PERFTOOLS__PROFILES__PROFILE__INIT;
	static const char *const types[PPROF_TYPES][2] = {
		{ "alloc_objects", "count" }, { "alloc_space", "bytes" },
		{ "inuse_objects", "count" }, { "inuse_space", "bytes" },
		{ "unreclaimed_objects", "count" }, { "unreclaimed_space", "bytes" },
	};
	Perftools__Profiles__ValueType vt[PPROF_TYPES], period_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	Perftools__Profiles__ValueType *vtp[PPROF_TYPES];
	GHashTable *settled = m->census ? profile_inuse_by_site(p) : NULL;
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	Perftools__Profiles__Sample **samples = calloc(nsites ? nsites : 1, sizeof(*samples));
	Perftools__Profiles__Mapping **maps = calloc(mods->n ? mods->n : 1, sizeof(*maps));
	int64_t comment_ix;
	uint8_t *buf = NULL;
	size_t len;
	int ret = 0;

	str_ix(&b, ""); /* string_table[0] = "" */
	if (!samples || !maps || (m->census && !settled)) {
		ret = -ENOMEM;
		goto out;
	}
	for (int i = 0; i < PPROF_TYPES; i++) {
		perftools__profiles__value_type__init(&vt[i]);
		vt[i].type = str_ix(&b, types[i][0]);
		vt[i].unit = str_ix(&b, types[i][1]);
		vtp[i] = &vt[i];
	}
	prof.sample_type = vtp;
	prof.n_sample_type = m->census ? PPROF_TYPES : 2; /* without the census there is no in-use figure */
	period_type.type = str_ix(&b, "space");
	period_type.unit = str_ix(&b, "bytes");
	prof.period_type = &period_type;
	prof.period = llround(8.0 / p->rate);
	prof.default_sample_type = str_ix(&b, m->default_type ? m->default_type : m->census ? "inuse_space" : "alloc_space");
	prof.time_nanos = m->time_nanos;
	prof.duration_nanos = m->duration_nanos;
	if (m->comment) {
		comment_ix = str_ix(&b, m->comment);
		prof.comment = &comment_ix;
		prof.n_comment = 1;
	}

	ret = pprof_mappings(&b, &prof, maps, m);
	if (ret)
		goto out;

	for (size_t i = 0; i < nsites; i++) {
		Perftools__Profiles__Sample *smp = pprof_sample(&b, p, sites[i],
								settled ? g_hash_table_lookup(settled, sites[i]) : NULL,
								prof.n_sample_type);

		if (!smp) {
			ret = -ENOMEM;
			goto out;
		}
		samples[prof.n_sample++] = smp;
	}
	prof.sample = samples;
	prof.location = (Perftools__Profiles__Location **)b.location_v->pdata;
	prof.n_location = b.location_v->len;
	prof.function = (Perftools__Profiles__Function **)b.function_v->pdata;
	prof.n_function = b.function_v->len;
	prof.string_table = (char **)b.table->pdata;
	prof.n_string_table = b.table->len;

	len = perftools__profiles__profile__get_packed_size(&prof);
	buf = malloc(len ? len : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	perftools__profiles__profile__pack(&prof, buf);
	ret = gzip_write(out, buf, len);
	if (!ret && (fflush(out) || ferror(out)))
		ret = -(errno ? errno : EIO);
out:
	if (settled)
		g_hash_table_destroy(settled);
	free(buf);
	free(samples);
	free(maps);
	free(sites);
	g_hash_table_destroy(b.strings);
	g_hash_table_destroy(b.functions);
	g_hash_table_destroy(b.locations);
	g_ptr_array_free(b.function_v, TRUE);
	g_ptr_array_free(b.location_v, TRUE);
	g_ptr_array_free(b.owned, TRUE);
	g_ptr_array_free(b.table, TRUE);
	return ret;
}
