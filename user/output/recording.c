/* recording.c -- camlheap's recording file over memtrace.h (see recording.h):
 * writing it, event by event while the profile accounts them; its metadata
 * is recording_meta.c's, reading it back recording_load.c's.
 */
#define _GNU_SOURCE
#include "output/recording.h"
#include "output/recording_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "output/memtrace.h"
#include "output/outfile.h"

#define MAX_INLINE 16

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
	uint64_t peak_ns, peak_us;  /* the profile's peak time when last seen to change, and its event's time
				     * as written (after the writer's clamps) */
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

uint64_t *u64_dup(uint64_t v)
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

void recording_profile_as_read(const struct recording *rc, const struct report_meta *m, struct profile *p)
{
	if (m->start_unix_ns <= 0)
		return;
	p->zero_ns = (uint64_t)(m->start_unix_ns / 1000 * 1000 - rc->mono_to_real_ns);
	if (p->peak_ns) /* the time the file gives the peak's event (never before an earlier event) */
		p->peak_ns = (uint64_t)((int64_t)(p->peak_ns == rc->peak_ns && rc->peak_us ? rc->peak_us
										: to_us(rc, p->peak_ns)) *
						1000 -
					rc->mono_to_real_ns);
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
	if (!ret && p->peak_ns != rc->peak_ns) { /* this event raised the peak */
		rc->peak_ns = p->peak_ns;
		rc->peak_us = mt_writer_last_us(rc->w);
	}
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
