/* path4.c -- the path from a root to a block of a stopped 4.x heap, from
 * the parents the trace recorded (trace4.h's trace4_path): each block's
 * first discoverer, up to the root whose value began it.
 *
 * Many sampled blocks share their path's beginning (the elements of one
 * list, the bindings of one Hashtbl): every block a path passes is marked,
 * and every 256th from its root remembered with its depth and path, so a
 * later path stops at the first remembered block it meets and takes the
 * rest (its length, its root, its first blocks) from that path -- each
 * block is walked about once however many paths pass it. */
#define _GNU_SOURCE
#include "heap/trace4_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#define MEMO_EVERY 256        /* a block remembered every this many from its root */
#define FIELD_SCAN 512        /* fields of the block before searched for the one that holds a block */
#define FIRST_FIELDS 16       /* fields read with the headers */
#define INFIX_TAG 249

struct memo_entry {
	uint32_t block;           /* its number + 1; 0: empty */
	uint32_t path;            /* the path it is on */
	uint64_t depth;           /* its distance from the root's value (0: the root's value) */
};

struct memo {
	struct memo_entry *e;
	size_t cap, n;
	uint64_t *walked;         /* a bit per block: on a path already */
};

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static size_t memo_slot(const struct memo *m, uint32_t block)
{
	size_t i = (size_t)(block * 0x9e3779b97f4a7c15ull % m->cap);

	while (m->e[i].block && m->e[i].block != block + 1)
		i = (i + 1) % m->cap;
	return i;
}

static int memo_put(struct memo *m, uint32_t block, uint32_t path, uint64_t depth)
{
	size_t i;

	if (2 * (m->n + 1) > m->cap) {
		struct memo old = *m;

		m->cap = old.cap ? 2 * old.cap : 1024;
		m->e = calloc(m->cap, sizeof(*m->e));
		if (!m->e) {
			*m = old;
			return -ENOMEM;
		}
		for (size_t j = 0; j < old.cap; j++)
			if (old.e[j].block)
				m->e[memo_slot(m, old.e[j].block - 1)] = old.e[j];
		free(old.e);
	}
	i = memo_slot(m, block);
	if (!m->e[i].block)
		m->n++;
	m->e[i] = (struct memo_entry){ block + 1, path, depth };
	return 0;
}

static const struct memo_entry *memo_get(const struct memo *m, uint32_t block)
{
	size_t i;

	if (!(m->walked[block / 64] & (1ull << (block % 64))) || !m->cap)
		return NULL;
	i = memo_slot(m, block);
	return m->e[i].block ? &m->e[i] : NULL;
}

/* Block number b as a hop whose block before it is block number `prev`
 * (or none: UINT32_MAX): its header read, and the field of prev that holds
 * it (a pointer to it, or into it: a closure of a recursive set), looked
 * for in a block before of FIELD_SCAN fields at most (a larger one's field
 * is no part of a path's shape).  One process_vm_readv for both headers
 * and the first fields: the cost of a path is a few reads a block shown. */
static void fill_hop(struct tracer *tr, uint32_t b, uint32_t prev, struct trace4_hop *h)
{
	uint64_t hd = 0, pv = 0, pf[1 + FIRST_FIELDS], f[FIELD_SCAN], nf;
	struct iovec local[2], remote[2];
	ssize_t got;
	const uint64_t *fields = pf + 1;

	memset(h, 0, sizeof(*h));
	h->v = hx_address(tr->hx, b);
	h->field = -1;
	local[0] = (struct iovec){ &hd, 8 };
	remote[0] = (struct iovec){ (void *)(uintptr_t)(h->v - 8), 8 };
	if (prev != UINT32_MAX && (pv = hx_address(tr->hx, prev))) {
		local[1] = (struct iovec){ pf, sizeof(pf) };
		remote[1] = (struct iovec){ (void *)(uintptr_t)(pv - 8), sizeof(pf) };
	}
	got = process_vm_readv(tr->pid, local, pv ? 2 : 1, remote, pv ? 2 : 1, 0);
	if (got < 8)
		return;
	tr->r->bytes_read += (uint64_t)got;
	h->tag = hd & 0xff;
	h->wosize = (uint32_t)(hd >> 10);
	if (!pv || got < 16)
		return; /* no block before, or its header unread (a read stops at an unmapped page) */
	nf = pf[0] >> 10;
	if (nf > FIELD_SCAN)
		return;
	if (nf > (uint64_t)(got - 16) / 8) { /* more fields than the first read had */
		if (tracer_read(tr, pv, f, 8 * nf))
			return;
		fields = f;
	}
	for (uint64_t k = 0; k < nf; k++)
		if (fields[k] >= h->v && fields[k] < h->v + 8 * (h->wosize ? h->wosize : 1) &&
		    (fields[k] == h->v || h->tag == 247)) {
			h->field = (int32_t)k;
			return;
		}
}

/* Hop d (from the root's value) of q, which is shown there. */
static const struct trace4_hop *shown_hop(const struct trace4_path *q, uint64_t d)
{
	return d < q->nhead ? &q->head[d] : &q->tail[d - (q->length - q->ntail)];
}

/* One path: the chain of parents from its block up to a root or to a
 * remembered block (once the chain holds TRACE4_PATH_END blocks, so that
 * its tail is its own), then the blocks it shows.  Returns 0, -ENOMEM,
 * or -EFAULT (the parents loop: never). */
static int one_path(struct tracer *tr, struct memo *m, struct trace4_path *paths, size_t i, uint32_t **chain,
		    size_t *cap)
{
	struct trace4_path *p = &paths[i];
	const struct memo_entry *me = NULL;
	const struct trace4_path *q = NULL;
	uint64_t from_q = 0; /* the path's first blocks, those of q */
	size_t n = 0;
	uint32_t b = (uint32_t)hx_block(tr->hx, p->v, NULL), par, above;

	for (;;) {
		if (n >= TRACE4_PATH_END && (me = memo_get(m, b)))
			break;
		if (n == *cap) {
			size_t c = *cap ? 2 * *cap : 4096;
			uint32_t *nc = realloc(*chain, c * sizeof(**chain));

			if (!nc)
				return -ENOMEM;
			*chain = nc;
			*cap = c;
		}
		(*chain)[n++] = b;
		par = tr->parent[b];
		if (par & PARENT_ROOT) {
			p->root_label = (uint16_t)(par & PARENT_LABEL);
			p->via_static = par & PARENT_STATIC;
			break;
		}
		if (n > tr->hx->nblocks) /* a block's parent was labelled before it: no loop */
			return -EFAULT;
		b = par;
	}
	if (me) {
		q = &paths[me->path];
		from_q = me->depth + 1;
		p->root_label = q->root_label;
		p->via_static = q->via_static;
	}
	p->length = n + from_q;
	p->ntail = n < TRACE4_PATH_END ? (unsigned)n : TRACE4_PATH_END;
	p->nhead = p->length - p->ntail < TRACE4_PATH_END ? (unsigned)(p->length - p->ntail) : TRACE4_PATH_END;
	/* chain[c] is c blocks from the target, p->length - 1 - c from the root's value */
	above = me ? me->block - 1 : UINT32_MAX;
	for (unsigned d = 0; d < p->nhead; d++) {
		size_t c = p->length - 1 - d;

		if (d < from_q)
			p->head[d] = *shown_hop(q, d);
		else
			fill_hop(tr, (*chain)[c], c + 1 < n ? (*chain)[c + 1] : above, &p->head[d]);
	}
	for (unsigned k = 0; k < p->ntail; k++) {
		size_t c = p->ntail - 1 - k;

		fill_hop(tr, (*chain)[c], c + 1 < n ? (*chain)[c + 1] : above, &p->tail[k]);
	}
	for (size_t c = 0; c < n; c++) {
		uint64_t depth = p->length - 1 - c;

		m->walked[(*chain)[c] / 64] |= 1ull << ((*chain)[c] % 64);
		if (depth % MEMO_EVERY == 0 && memo_put(m, (*chain)[c], (uint32_t)i, depth))
			return -ENOMEM;
	}
	return 0;
}

int path4_extract(struct tracer *tr, struct trace4_path *paths, size_t n, double deadline)
{
	struct memo m = { 0 };
	uint32_t *chain = NULL;
	size_t cap = 0;
	bool late = false;
	int ret = 0;

	m.walked = tr->parent ? calloc(tr->hx->nblocks / 64 + 1, sizeof(*m.walked)) : NULL;
	for (size_t i = 0; i < n; i++) {
		struct trace4_path *p = &paths[i];
		int64_t b = hx_block(tr->hx, p->v, NULL);

		p->status = TRACE4_PATH_REACHED;
		p->length = 0;
		p->nhead = p->ntail = 0;
		if (b < 0) {
			p->status = TRACE4_PATH_NOT_BLOCK;
		} else if (!(p->label = tr->hx->state[b])) {
			p->status = TRACE4_PATH_UNREACHABLE;
		} else if (!m.walked || late || (!(i & 63) && (late = mono_s() > deadline))) {
			p->status = TRACE4_PATH_SKIPPED;
		} else if (ret == 0) {
			ret = one_path(tr, &m, paths, i, &chain, &cap);
		}
		if (ret)
			p->status = TRACE4_PATH_SKIPPED;
	}
	free(chain);
	free(m.e);
	free(m.walked);
	return 0; /* a path not found is said (TRACE4_PATH_SKIPPED), the rest of the trace stands */
}
