/* trace4.c -- reachability and retained sizes of root groups in a stopped
 * 4.x heap (trace4.h). */
#define _GNU_SOURCE
#include "heap/trace4_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "camlheap.h"
#include "heap/shape4.h"
#include "target/proc.h"

#define NO_SCAN_TAG 251        /* runtime/caml/mlvalues.h */
#define INFIX_TAG 249
#define LINE_BYTES 16384       /* the heap is read a line at a time, through a cache of lines */
#define CACHE_SHARE 32         /* the cache: 1/32 of the heap's size ... */
#define CACHE_MIN_LINES 64     /* ... and at least this many lines */
#define WORK_CAP (1u << 20)    /* pending entries (16 MiB); beyond, rescans */
#define NONE UINT32_MAX
#define RANGE_FIELDS 512       /* a larger block's fields are followed this many at a time (work items) */
#define MAX_STATIC_WORDS 65536 /* a larger "static block" is not one */

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int tracer_read(struct tracer *tr, uint64_t addr, void *buf, size_t len)
{
	if (proc_read_mem(tr->pid, addr, buf, len))
		return -EFAULT;
	tr->r->bytes_read += len;
	return 0;
}

unsigned tracer_group(struct tracer *tr, const char *name, bool conservative)
{
	struct trace4_result *r = tr->r;
	struct trace4_group *g;

	if (r->ngroups == TRACE4_MAX_GROUPS) {
		g = &r->groups[TRACE4_MAX_GROUPS - 1];
		snprintf(g->name, sizeof(g->name), "other roots");
		g->conservative |= conservative;
		return TRACE4_MAX_GROUPS;
	}
	g = &r->groups[r->ngroups++];
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->conservative = conservative;
	return r->ngroups;
}

static int visit_static(struct tracer *tr, uint64_t v, uint16_t label);

/* The group label a label counts for: itself, or a field's module. */
static uint16_t owner(const struct trace4_result *r, uint16_t label)
{
	return label > TRACE4_MAX_GROUPS && label != LABEL_SHARED
		       ? (uint16_t)(r->fields[label - TRACE4_MAX_GROUPS - 1].group + 1)
		       : label;
}

/* The label a block gets when reached under `label`, or 0 if nothing
 * changes: two fields of one module make it the module's, two groups
 * "shared". */
static uint16_t relabel(const struct trace4_result *r, uint16_t cur, uint16_t label)
{
	uint16_t o;

	if (cur == 0)
		return label;
	if (cur == label || cur == LABEL_SHARED)
		return 0;
	o = owner(r, cur);
	if (o != owner(r, label))
		return LABEL_SHARED;
	return o == cur ? 0 : o;
}

/* v (a live major block's first field, or with is_static a block in the
 * executable's data) is reached under `label`: into its line's list (a
 * static block is visited at once). */
static void push(struct tracer *tr, uint64_t v, const struct hx_chunk *c, uint16_t label, uint32_t from)
{
	uint64_t line;
	uint32_t i;

	if (!from && !relabel(tr->r, tr->hx->state[hx_block(tr->hx, v, NULL)], label))
		return; /* nothing would change: not queued (a trace makes progress even when it overflows) */
	if (from && tr->pending > WORK_CAP / 2 && tr->ndeferred < tr->deferred_cap) {
		/* a large block's next fields wait until the pending items
		 * drain: they never all wait at once */
		tr->deferred[tr->ndeferred++] = (struct trace_item){ v, label, NONE, from, tr->ctx };
		return;
	}
	line = tr->line0[c - tr->hx->chunks] + (v - 8 - c->base) / LINE_BYTES;
	if (tr->free_item != NONE) {
		i = tr->free_item;
		tr->free_item = tr->work[i].next;
	} else if (tr->nwork < tr->cap) {
		i = (uint32_t)tr->nwork++;
	} else {
		size_t cap = tr->cap ? 2 * tr->cap : 4096;
		struct trace_item *w;

		if (cap > WORK_CAP || !(w = realloc(tr->work, cap * sizeof(*w)))) {
			tr->overflow = true; /* found again by a rescan of the labelled blocks */
			return;
		}
		tr->work = w;
		tr->cap = cap;
		i = (uint32_t)tr->nwork++;
	}
	tr->work[i] = (struct trace_item){ v, label, tr->head[line], from, tr->ctx };
	tr->head[line] = i;
	tr->pending++;
	/* behind the sweep but still in the cache: done before the sweep
	 * moves on, no read needed */
	if (line <= tr->sweep_pos && tr->slot_of_line[line] != NONE && !tr->in_stack[line]) {
		tr->in_stack[line] = 1;
		tr->lstack[tr->nlstack++] = (uint32_t)line;
	}
}

static bool in_data(const struct tracer *tr, uint64_t v)
{
	return v >= tr->data_lo && v < tr->data_hi;
}

/* The block v points to: v itself if it is a live block's value, with
 * `infix` the closure's if v points inside one at a closure of its
 * recursive set (an infix header: runtime/caml/mlvalues.h
 * Infix_offset_hd), else 0.  *c: its chunk. */
static uint64_t block_of(struct tracer *tr, uint64_t v, bool infix, const struct hx_chunk **c)
{
	uint64_t hd;

	if (hx_is_block(tr->hx, v, c))
		return v;
	if (infix && hx_in_heap(tr->hx, v - 8) && tracer_read(tr, v - 8, &hd, 8) == 0 && (hd & 0xff) == INFIX_TAG &&
	    hx_is_block(tr->hx, v - 8 * (hd >> 10), c))
		return v - 8 * (hd >> 10);
	return 0;
}

/* A field (or root) value v under `label`: a live major block, an infix
 * pointer into a closure, or (exact only) a static block. */
static void follow(struct tracer *tr, uint64_t v, uint16_t label, bool exact)
{
	const struct hx_chunk *c;
	uint64_t b;

	if ((v & 7) || v < 4096)
		return;
	if (v >= tr->young_lo && v < tr->young_hi && !tr->hx->minor_lo)
		return; /* the minor heap, not indexed: a root group of its own */
	if ((b = block_of(tr, v, exact, &c)))
		push(tr, b, c, label, 0);
	else if (exact && !hx_in_heap(tr->hx, v - 8) && in_data(tr, v) && visit_static(tr, v, label) < 0)
		tr->overflow = true;
}

void tracer_root(struct tracer *tr, unsigned label, uint64_t v, bool exact)
{
	uint64_t before = tr->pending;

	tr->ctx = PARENT_ROOT | label;
	follow(tr, v, (uint16_t)label, exact);
	if (tr->pending > before)
		tr->r->groups[owner(tr->r, (uint16_t)label) - 1].roots++;
}

unsigned tracer_field(struct tracer *tr, unsigned label, uint32_t block, uint32_t field, uint64_t v)
{
	struct trace4_result *r = tr->r;
	const struct hx_chunk *c;
	struct trace4_field *f;

	if (label > TRACE4_MAX_GROUPS || (v & 7) || v < 4096)
		return label;
	/* a block, or a closure of a recursive set inside its set (as follow) */
	if (!block_of(tr, v, true, &c))
		return label;
	if (r->nfields == TRACE4_MAX_FIELDS) {
		r->fields_over++;
		return label;
	}
	f = &r->fields[r->nfields++];
	f->shape = -1;
	f->group = label - 1;
	f->block = block;
	f->field = field;
	f->value = v;
	return TRACE4_MAX_GROUPS + r->nfields;
}

void trace4_label_name(const struct trace4_result *r, uint16_t label, char *buf, size_t len)
{
	const struct trace4_field *f;

	if (label == LABEL_SHARED || !label || owner(r, label) > r->ngroups) {
		snprintf(buf, len, "%s", label == LABEL_SHARED ? "shared by several root groups" : "?");
	} else if (label <= TRACE4_MAX_GROUPS) {
		snprintf(buf, len, "%s", r->groups[label - 1].name);
	} else {
		f = &r->fields[label - TRACE4_MAX_GROUPS - 1];
		if (f->block)
			snprintf(buf, len, "%s field %u of global block %u", r->groups[f->group].name, f->field, f->block);
		else
			snprintf(buf, len, "%s field %u", r->groups[f->group].name, f->field);
	}
}

/* A block of whsize words counted (+1) or uncounted (-1) under `label`:
 * in "shared", or in its group and (a field's) its field. */
static void count_label(struct trace4_result *r, uint16_t label, uint64_t whsize, int sign)
{
	struct walk4_count *c[2] = { NULL, NULL };

	if (label == LABEL_SHARED) {
		c[0] = &r->shared;
	} else {
		if (label > TRACE4_MAX_GROUPS)
			c[1] = &r->fields[label - TRACE4_MAX_GROUPS - 1].retained;
		c[0] = &r->groups[owner(r, label) - 1].retained;
	}
	for (int k = 0; k < 2; k++)
		if (c[k]) {
			c[k]->blocks += (uint64_t)(int64_t)sign;
			c[k]->words += (uint64_t)((int64_t)sign * (int64_t)whsize);
		}
}

/* The accounts of a block of whsize words and `tag` going from label cur
 * to nw. */
static void account(struct trace4_result *r, uint16_t cur, uint16_t nw, uint64_t whsize, unsigned tag)
{
	if (cur == 0) {
		r->reachable.blocks++;
		r->reachable.words += whsize;
		r->reach_by_tag[tag].blocks++;
		r->reach_by_tag[tag].words += whsize;
	} else {
		count_label(r, cur, whsize, -1);
	}
	count_label(r, nw, whsize, 1);
}

/* Follow fields [from, from + RANGE_FIELDS) of block v of wosize fields
 * (`have` of them from `from` on already in f, the rest read), and queue
 * the rest as a range item of its own: a large array's fields are never
 * all pending at once (runtime/major_gc.c's mark stack does the same
 * with mark_entry ranges). */
static int push_fields_from(struct tracer *tr, uint64_t v, uint64_t wosize, uint64_t from, const uint64_t *f,
			    uint64_t have, uint16_t label)
{
	uint64_t end = wosize - from > RANGE_FIELDS ? from + RANGE_FIELDS : wosize, buf[RANGE_FIELDS];
	const struct hx_chunk *c;

	for (uint64_t i = from; i < from + have && i < end; i++)
		follow(tr, f[i - from], label, true);
	if (from + have < end) {
		if (tracer_read(tr, v + 8 * (from + have), buf, 8 * (end - from - have)))
			return -EFAULT;
		for (uint64_t k = 0; k < end - from - have; k++)
			follow(tr, buf[k], label, true);
	}
	if (end < wosize) {
		if (hx_is_block(tr->hx, v, &c))
			push(tr, v, c, label, (uint32_t)end);
		else /* a static block: no line to queue it in */
			return push_fields_from(tr, v, wosize, end, NULL, 0, label);
	}
	return 0;
}

/* Push the fields of a block (header hd, `have` of its fields already in
 * `f`, the rest read from the target) under `label`. */
static int push_fields(struct tracer *tr, uint64_t v, uint64_t hd, const uint64_t *f, uint64_t have,
		       uint16_t label)
{
	return (hd & 0xff) >= NO_SCAN_TAG ? 0 : push_fields_from(tr, v, hd >> 10, 0, f, have, label);
}

/* A block outside the heap: its label in the static set, then as a heap
 * block.  Returns 0 or -ENOMEM. */
static int visit_static(struct tracer *tr, uint64_t v, uint16_t label)
{
	size_t i;
	uint64_t hd;
	uint16_t nw;
	uint32_t ctx;

	if (2 * (tr->scount + 1) > tr->scap) {
		size_t cap = tr->scap ? 2 * tr->scap : 1024;
		uint64_t *k = calloc(cap, sizeof(*k));
		uint16_t *l = calloc(cap, sizeof(*l));

		if (!k || !l) {
			free(k);
			free(l);
			return -ENOMEM;
		}
		for (size_t j = 0; j < tr->scap; j++)
			if (tr->skeys[j]) {
				size_t h = (tr->skeys[j] >> 3) * 0x9e3779b97f4a7c15ull % cap;

				while (k[h])
					h = (h + 1) % cap;
				k[h] = tr->skeys[j];
				l[h] = tr->slabel[j];
			}
		free(tr->skeys);
		free(tr->slabel);
		tr->skeys = k;
		tr->slabel = l;
		tr->scap = cap;
	}
	for (i = (v >> 3) * 0x9e3779b97f4a7c15ull % tr->scap; tr->skeys[i] && tr->skeys[i] != v; i = (i + 1) % tr->scap)
		;
	if (!tr->skeys[i]) {
		tr->skeys[i] = v;
		tr->scount++;
		tr->r->static_blocks++;
	}
	nw = relabel(tr->r, tr->slabel[i], label);
	if (!nw)
		return 0;
	tr->slabel[i] = nw;
	if (tracer_read(tr, v - 8, &hd, 8) || (hd >> 10) > MAX_STATIC_WORDS)
		return 0; /* not an OCaml block after all */
	/* its fields' parent: reached from a root, that root through static
	 * data; from a heap block, that block (the static hop not shown) */
	ctx = tr->ctx;
	if (ctx & PARENT_ROOT)
		tr->ctx = ctx | PARENT_STATIC;
	push_fields(tr, v, hd, NULL, 0, nw); /* unreadable fields: not a block after all */
	tr->ctx = ctx;
	return 0;
}

/* Line `line` of chunk c, [start, end), from the cache (read into it,
 * the least recently used line evicted, if not there).  NULL if
 * unreadable. */
static const uint64_t *load_line(struct tracer *tr, const struct hx_chunk *c, uint64_t line, uint64_t *start,
				 uint64_t *end)
{
	uint32_t s = tr->slot_of_line[line];

	*start = c->base + (line - tr->line0[c - tr->hx->chunks]) * LINE_BYTES;
	*end = *start + LINE_BYTES < c->end ? *start + LINE_BYTES : c->end;
	if (s == NONE) {
		s = tr->lru_tail; /* the least recently used */
		if (tr->slot_used[s])
			tr->slot_of_line[tr->slot_line[s]] = NONE;
		if (tracer_read(tr, *start, tr->cache + (uint64_t)s * (LINE_BYTES / 8), *end - *start))
			return NULL;
		tr->slot_of_line[line] = s;
		tr->slot_line[s] = line;
		tr->r->line_reads++;
	}
	tr->slot_used[s] = 1;
	if (s != tr->lru_head) { /* to the front of the LRU list */
		if (s == tr->lru_tail)
			tr->lru_tail = tr->lru_prev[s];
		else
			tr->lru_prev[tr->lru_next[s]] = tr->lru_prev[s];
		tr->lru_next[tr->lru_prev[s]] = tr->lru_next[s];
		tr->lru_next[s] = tr->lru_head;
		tr->lru_prev[tr->lru_head] = s;
		tr->lru_head = s;
	}
	return tr->cache + (uint64_t)s * (LINE_BYTES / 8);
}

/* The block whose header is at hp, in the loaded line buf = [start, end):
 * labelled nw (from cur), counted if `acct`, its fields followed. */
static int visit(struct tracer *tr, const uint64_t *buf, uint64_t hp, uint64_t start, uint64_t end, uint16_t cur,
		 uint16_t nw, bool acct)
{
	uint64_t hd = buf[(hp - start) / 8], have = (end - hp) / 8 - 1;

	if (acct && !(hp >= tr->hx->minor_lo && hp < tr->hx->minor_hi)) /* counts: major heap words */
		account(tr->r, cur, nw, (hd >> 10) + 1, hd & 0xff);
	return push_fields(tr, hp + 8, hd, buf + (hp - start) / 8 + 1, have, nw);
}

/* Every block pending in line `line` of chunk c, and those its own blocks
 * add to it meanwhile. */
static int process_line(struct tracer *tr, const struct hx_chunk *c, uint64_t line)
{
	uint64_t start, end;
	const uint64_t *buf = load_line(tr, c, line, &start, &end);

	if (!buf)
		return -EFAULT;
	while (tr->head[line] != NONE) {
		uint32_t i = tr->head[line];
		struct trace_item it = tr->work[i];
		uint64_t b = (uint64_t)hx_block(tr->hx, it.v, NULL);
		uint16_t cur = tr->hx->state[b], nw = relabel(tr->r, cur, it.label);

		tr->head[line] = it.next;
		tr->work[i].next = tr->free_item;
		tr->free_item = i;
		tr->pending--;
		tr->ctx = (uint32_t)b;
		if (it.from) { /* the next fields of a large block, under the label it had then */
			if (push_fields_from(tr, it.v, buf[(it.v - 8 - start) / 8] >> 10, it.from, NULL, 0, it.label))
				return -EFAULT;
			continue;
		}
		if (!nw)
			continue;
		if (!cur && tr->parent)
			tr->parent[b] = it.parent;
		tr->hx->state[b] = nw;
		if (visit(tr, buf, it.v - 8, start, end, cur, nw, true))
			return -EFAULT;
	}
	return 0;
}

/* The lines in address order, each with blocks pending read and emptied
 * (pushes to a line ahead are done when the sweep gets there; to a line
 * behind still in the cache, at once; to another one behind, at the next
 * sweep), until no line has any. */
static int sweep(struct tracer *tr, double deadline)
{
	unsigned n = 0;
	int ret;

	while (tr->pending) {
		for (size_t k = 0; k < tr->hx->nchunks; k++)
			for (uint64_t l = tr->line0[k]; l < tr->line0[k + 1]; l++) {
				tr->sweep_pos = l;
				if (tr->head[l] == NONE)
					continue;
				if (!(++n & 255) && mono_s() > deadline)
					return -ETIME;
				if ((ret = process_line(tr, &tr->hx->chunks[k], l)))
					return ret;
				while (tr->nlstack) {
					uint32_t b = tr->lstack[--tr->nlstack];

					tr->in_stack[b] = 0;
					if (tr->head[b] != NONE && tr->slot_of_line[b] != NONE &&
					    (ret = process_line(tr, &tr->hx->chunks[tr->chunk_of_line[b]], b)))
						return ret;
				}
			}
		tr->r->sweeps++;
		while (!tr->pending && tr->ndeferred) {
			struct trace_item it = tr->deferred[--tr->ndeferred];
			const struct hx_chunk *c;
			uint64_t hd;

			tr->ctx = (uint32_t)hx_block(tr->hx, it.v, NULL);
			if (!hx_is_block(tr->hx, it.v, &c) || tracer_read(tr, it.v - 8, &hd, 8) ||
			    push_fields_from(tr, it.v, hd >> 10, it.from, NULL, 0, it.label))
				return -EFAULT;
		}
	}
	tr->sweep_pos = 0;
	return 0;
}

/* The pending list overflowed: some fields were dropped.  Follow the
 * fields of every labelled block again, a line at a time, until a pass
 * drops nothing. */
static int rescan(struct tracer *tr, double deadline)
{
	int ret;

	while (tr->overflow) {
		tr->overflow = false;
		tr->r->rescans++;
		for (size_t k = 0; k < tr->hx->nchunks; k++) {
			const struct hx_chunk *c = &tr->hx->chunks[k];

			for (uint64_t l = tr->line0[k]; l < tr->line0[k + 1]; l++) {
				uint64_t start, end;
				const uint64_t *buf;

				if (mono_s() > deadline)
					return -ETIME;
				if (!(buf = load_line(tr, c, l, &start, &end)))
					return -EFAULT;
				for (uint64_t hp = start; hp < end; hp += 8) {
					uint64_t i = (hp - c->base) / 8;
					int64_t b;

					if (!(c->starts[i / 64] & (1ull << (i % 64))))
						continue;
					b = hx_block(tr->hx, hp + 8, NULL);
					tr->ctx = (uint32_t)b;
					if (tr->hx->state[b] && visit(tr, buf, hp, start, end, 0, tr->hx->state[b], false))
						return -EFAULT;
				}
			}
		}
		if ((ret = sweep(tr, deadline)))
			return ret;
	}
	return 0;
}

/* Ephemerons and weak arrays (4.14.2 runtime/caml/weak.h: Abstract_tag
 * blocks chained from `caml_ephe_list_head` through field 0, data in
 * field 1, keys from field 2, `caml_ephe_none` for none) hold nothing;
 * but the GC keeps an ephemeron's data while the ephemeron and all its
 * keys are alive.  Such data is traced as a group of its own, until no
 * ephemeron's data becomes newly alive. */
static int ephemerons(struct tracer *tr, double deadline)
{
	const struct elf_symbol *h = elf_image_symbol(tr->t->img, "caml_ephe_list_head");
	const struct elf_symbol *z = elf_image_symbol(tr->t->img, "caml_ephe_none");
	uint64_t head, none, e, f[64];
	unsigned label = 0;
	bool changed = true;
	int ret;

	if (!h || !z || tracer_read(tr, h->vaddr + tr->t->bias, &head, 8) ||
	    tracer_read(tr, z->vaddr + tr->t->bias, &none, 8))
		return 0;
	while (changed) {
		changed = false;
		for (unsigned n = 0, e0 = 1; (e = e0 ? head : f[0]) && n < 10000000; n++, e0 = 0) {
			uint64_t hd, nf;
			int64_t b = hx_block(tr->hx, e, NULL), d;
			bool keys_alive = true;

			if (tracer_read(tr, e - 8, &hd, 8))
				return -EFAULT;
			nf = (hd >> 10) < 64 ? hd >> 10 : 64;
			if (nf < 2 || tracer_read(tr, e, f, 8 * nf))
				return -EFAULT;
			if (b < 0 || !tr->hx->state[b] || (d = hx_block(tr->hx, f[1], NULL)) < 0 || tr->hx->state[d])
				continue; /* unreachable ephemeron, or no data in the heap, or traced already */
			for (uint64_t k = 2; k < (hd >> 10) && keys_alive; k++) {
				uint64_t key = k < 64 ? f[k] : 0;
				int64_t kb;

				if (k >= 64 && tracer_read(tr, e + 8 * k, &key, 8))
					return -EFAULT;
				kb = hx_block(tr->hx, key, NULL);
				keys_alive = key == none || kb < 0 || tr->hx->state[kb];
			}
			if (!keys_alive)
				continue;
			if (!label)
				label = tracer_group(tr, "ephemeron data (alive while their keys are)", false);
			tracer_root(tr, label, f[1], true);
			changed = true;
		}
		if (changed && (ret = sweep(tr, deadline)))
			return ret;
	}
	return 0;
}

/* The lines of every chunk: line0[k] the first of chunk k, line0[n] the
 * total. */
static int make_lines(struct tracer *tr)
{
	size_t n = tr->hx->nchunks;
	uint64_t lines, heap = 0;

	tr->line0 = calloc(n + 1, sizeof(*tr->line0));
	if (!tr->line0)
		return -ENOMEM;
	for (size_t k = 0; k < n; k++) {
		heap += tr->hx->chunks[k].end - tr->hx->chunks[k].base;
		tr->line0[k + 1] = tr->line0[k] +
				   (tr->hx->chunks[k].end - tr->hx->chunks[k].base + LINE_BYTES - 1) / LINE_BYTES;
	}
	lines = tr->line0[n] + 1;
	tr->nslots = heap / CACHE_SHARE / LINE_BYTES > CACHE_MIN_LINES ? heap / CACHE_SHARE / LINE_BYTES
									: CACHE_MIN_LINES;
	tr->deferred_cap = 65536;
	tr->deferred = malloc(tr->deferred_cap * sizeof(*tr->deferred));
	tr->head = malloc(lines * sizeof(*tr->head));
	tr->slot_of_line = malloc(lines * sizeof(*tr->slot_of_line));
	tr->chunk_of_line = malloc(lines * sizeof(*tr->chunk_of_line));
	tr->lstack = malloc(lines * sizeof(*tr->lstack));
	tr->in_stack = calloc(lines, 1);
	tr->cache = malloc(tr->nslots * LINE_BYTES);
	tr->slot_used = calloc(tr->nslots, sizeof(*tr->slot_used));
	tr->slot_line = calloc(tr->nslots, sizeof(*tr->slot_line));
	tr->lru_prev = calloc(tr->nslots, sizeof(*tr->lru_prev));
	tr->lru_next = calloc(tr->nslots, sizeof(*tr->lru_next));
	if (!tr->deferred || !tr->head || !tr->slot_of_line || !tr->chunk_of_line || !tr->lstack || !tr->in_stack || !tr->cache ||
	    !tr->slot_used || !tr->slot_line || !tr->lru_prev || !tr->lru_next)
		return -ENOMEM;
	for (uint32_t k = 0; k < tr->nslots; k++) { /* slot 0 the head, the last the tail */
		tr->lru_prev[k] = k ? k - 1 : 0;
		tr->lru_next[k] = k + 1 < tr->nslots ? k + 1 : k;
	}
	tr->lru_head = 0;
	tr->lru_tail = tr->nslots - 1;
	memset(tr->head, 0xff, lines * sizeof(*tr->head));
	memset(tr->slot_of_line, 0xff, lines * sizeof(*tr->slot_of_line));
	for (size_t k = 0; k < n; k++)
		for (uint64_t l = tr->line0[k]; l < tr->line0[k + 1]; l++)
			tr->chunk_of_line[l] = (uint32_t)k;
	tr->free_item = NONE;
	return 0;
}

static void free_lines(struct tracer *tr)
{
	free(tr->deferred);
	free(tr->work);
	free(tr->skeys);
	free(tr->slabel);
	free(tr->line0);
	free(tr->head);
	free(tr->slot_of_line);
	free(tr->chunk_of_line);
	free(tr->lstack);
	free(tr->in_stack);
	free(tr->cache);
	free(tr->slot_used);
	free(tr->slot_line);
	free(tr->lru_prev);
	free(tr->lru_next);
}

int trace4_cmp_field_retained(const void *a, const void *b)
{
	const struct trace4_field *x = *(const struct trace4_field *const *)a, *y = *(const struct trace4_field *const *)b;

	return x->retained.words < y->retained.words ? 1 : x->retained.words > y->retained.words ? -1 : 0;
}

/* The TRACE4_SHAPES fields retaining the most, described while the
 * target is still stopped (until `deadline`: then the rest is not). */
static int describe_fields(struct tracer *tr, double deadline)
{
	struct trace4_result *r = tr->r;
	const struct trace4_field **by = malloc(r->nfields * sizeof(*by) + 1);
	unsigned n = 0;

	if (!by)
		return -ENOMEM;
	for (unsigned i = 0; i < r->nfields; i++)
		if (r->fields[i].retained.words)
			by[n++] = &r->fields[i];
	qsort(by, n, sizeof(*by), trace4_cmp_field_retained);
	for (unsigned i = 0; i < n && i < TRACE4_SHAPES; i++) {
		struct trace4_field *f = &r->fields[by[i] - r->fields];

		if (mono_s() > deadline) {
			r->shapes_skipped++;
			continue;
		}
		f->shape = (int)r->nshapes++;
		shape4_describe(tr->t, f->value, r->shapes[f->shape], sizeof(r->shapes[0]), &f->code);
	}
	free(by);
	return 0;
}

int trace4_run(const struct target *t, const struct heap_freeze *fz, struct heap_index *hx, double deadline,
	       struct trace4_result *r, struct trace4_path *paths, size_t npaths, char *err, size_t errlen)
{
	struct tracer tr = { .t = t, .fz = fz, .hx = hx, .r = r, .pid = t->pid };
	double t0 = mono_s();
	int ret = 0;

	memset(r, 0, sizeof(*r));
	r->index_bytes = hx_bytes(hx);
	/* block numbers and the PARENT_ flags share a parent's 32 bits */
	if (npaths && hx->nblocks < PARENT_STATIC && !(tr.parent = calloc(hx->nblocks + 1, sizeof(*tr.parent))))
		ret = -ENOMEM;
	if (!ret)
		ret = make_lines(&tr);
	if (!ret)
		ret = roots4_collect(&tr, err, errlen);
	if (!ret)
		ret = sweep(&tr, deadline);
	if (!ret)
		ret = rescan(&tr, deadline);
	if (!ret)
		ret = ephemerons(&tr, deadline);
	if (!ret)
		ret = rescan(&tr, deadline);
	if (!ret)
		ret = describe_fields(&tr, deadline);
	if (!ret && npaths) {
		double t1 = mono_s();

		ret = path4_extract(&tr, paths, npaths, deadline);
		r->paths_s = mono_s() - t1;
	}
	if (ret == -EFAULT)
		snprintf(err, errlen, "cannot read the heap of PID %d while tracing it", (int)t->pid);
	else if (ret == -ENOMEM)
		snprintf(err, errlen, "no memory for the trace");
	r->index_bytes += tr.cap * sizeof(*tr.work) + tr.scap * 10 + tr.nslots * (LINE_BYTES + 16) +
			  (tr.line0 ? tr.line0[hx->nchunks] * 17 : 0) + (tr.parent ? hx->nblocks * 4 : 0);
	r->trace_s = mono_s() - t0;
	free(tr.parent);
	free_lines(&tr);
	return ret;
}
