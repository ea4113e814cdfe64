/* recording_load.c -- a recording (or any memtrace trace) read back into a
 * profile for the report writers, and `camlheap dump-trace` (recording.h).
 */
#define _GNU_SOURCE
#include "output/recording.h"
#include "output/recording_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>

#include "output/memtrace.h"

/* ---- reading --------------------------------------------------------- */

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
	bool cycle_seen;           /* a cycle or clean note was read: cycle_base is set */
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
	unsigned ann = (code >> 56) & 0x3f;

	/* A recording that began while the worker ran (serve's
	 * /debug/memtrace) starts in the middle of the count of clean
	 * phases: its major cycles count from the first it names. */
	if (!s->cycle_seen && (ann == ANN_CYCLE || ann == ANN_CLEAN)) {
		uint32_t c = (uint32_t)v;

		s->cycle_seen = true;
		s->cycle_base = ann == ANN_CYCLE ? c : c > 0 ? c - 1 : 0;
		s->clean_before = s->cycle_base;
	}
	switch (ann) {
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
