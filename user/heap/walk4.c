/* walk4.c -- the exact census of a 4.x major heap (walk4.h). */
#define _GNU_SOURCE
#include "heap/walk4.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "camlheap.h"
#include "target/proc.h"

/* heap_chunk_head (runtime/caml/major_gc.h), right before the chunk: size
 * (bytes) its third word, next its fourth (include/camlheap.h) */
#define CHUNK_HEAD_BYTES(minor) ((minor) >= 14 ? CH_OCAML414_CHUNK_HEAD : CH_OCAML4_CHUNK_HEAD)
#define PHASE_SWEEP 2
#define CUSTOM_TAG 255
#define WINDOW (256 * 1024)

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct reader {
	pid_t pid;
	uint64_t base, len;    /* the window's span in the target */
	unsigned char *buf;
	uint64_t bytes_read;
};

static int read_mem(struct reader *r, uint64_t addr, void *buf, size_t len)
{
	if (proc_read_mem(r->pid, addr, buf, len))
		return -EFAULT;
	r->bytes_read += len;
	return 0;
}

/* The word at addr, through the window; `limit` bounds what is read
 * ahead (the chunk's end). */
static int read_word(struct reader *r, uint64_t addr, uint64_t limit, uint64_t *w)
{
	if (addr < r->base || addr + 8 > r->base + r->len) {
		uint64_t len = limit - addr < WINDOW ? limit - addr : WINDOW;

		if (len < 8 || read_mem(r, addr, r->buf, len) < 0)
			return -EFAULT;
		r->base = addr;
		r->len = len;
	}
	memcpy(w, r->buf + (addr - r->base), 8);
	return 0;
}

unsigned walk4_size_class(uint64_t whsize)
{
	unsigned k = 0;

	while (k + 1 < WALK4_SIZE_CLASSES && (1ull << k) < whsize)
		k++;
	return k;
}

static void count_custom(struct reader *r, struct walk4_census *c, uint64_t ops, uint64_t whsize)
{
	struct walk4_custom *e = NULL;

	for (unsigned i = 0; i < c->ncustom; i++)
		if (c->custom[i].ops == ops) {
			e = &c->custom[i];
			break;
		}
	if (!e) {
		uint64_t id;

		if (c->ncustom == WALK4_MAX_CUSTOM) {
			c->custom_other_blocks++;
			return;
		}
		e = &c->custom[c->ncustom++];
		e->ops = ops;
		strcpy(e->identifier, "?");
		/* struct custom_operations { char const *identifier; ... }
		 * (runtime/caml/custom.h) */
		if (read_mem(r, ops, &id, sizeof(id)) == 0 &&
		    read_mem(r, id, e->identifier, sizeof(e->identifier) - 1) == 0)
			e->identifier[sizeof(e->identifier) - 1] = 0;
		else
			strcpy(e->identifier, "?");
	}
	e->n.blocks++;
	e->n.words += whsize;
}

static int sym_addr(const struct target *t, const char *name, uint64_t *addr, char *err, size_t errlen)
{
	const struct elf_symbol *s = elf_image_symbol(t->img, name);

	if (!s) {
		snprintf(err, errlen,
			 "the executable has no symbol %s (its .symtab was stripped): the exact census needs it "
			 "to find the heap",
			 name);
		return -ENOTSUP;
	}
	*addr = s->vaddr + t->bias;
	return 0;
}

/* The blocks of one chunk [chunk, end). */
static int walk_chunk(struct reader *r, struct walk4_census *c, struct heap_index *hx, uint64_t chunk, uint64_t end,
		      uint64_t sweep_hp, double deadline, char *err, size_t errlen)
{
	uint64_t hp = chunk, hd, n = 0;

	while (hp < end) {
		uint64_t wosize, whsize;
		unsigned colour, tag;

		if (!(++n & 0xffff) && mono_s() > deadline)
			return -ETIME;
		if (read_word(r, hp, end, &hd) < 0) {
			snprintf(err, errlen, "cannot read the block header at 0x%llx", (unsigned long long)hp);
			return -EFAULT;
		}
		wosize = hd >> 10;
		colour = (hd >> 8) & 3;
		tag = hd & 0xff;
		whsize = wosize + 1;
		if (whsize > (end - hp) / 8) {
			snprintf(err, errlen,
				 "the block at 0x%llx (header 0x%llx, %llu words) runs past its chunk's end 0x%llx",
				 (unsigned long long)hp, (unsigned long long)hd, (unsigned long long)whsize,
				 (unsigned long long)end);
			return -EPROTO;
		}
		if (colour == 2 || (colour == 0 && wosize && c->gc_phase == PHASE_SWEEP && hp >= sweep_hp)) {
			c->free_blocks++;
			c->free_words += whsize;
			if (whsize > c->largest_free)
				c->largest_free = whsize;
		} else if (colour == 0 && !wosize) {
			c->fragments++;
		} else {
			unsigned k = walk4_size_class(whsize);

			if (hx)
				hx_set_start(hx, hp);
			c->live_blocks++;
			c->live_words += whsize;
			c->by_tag[tag].blocks++;
			c->by_tag[tag].words += whsize;
			c->by_size[k].blocks++;
			c->by_size[k].words += whsize;
			if (tag == CUSTOM_TAG && wosize) {
				uint64_t ops;

				if (read_word(r, hp + 8, end, &ops) < 0)
					return -EFAULT;
				count_custom(r, c, ops, whsize);
			}
		}
		hp += whsize * 8;
	}
	return 0;
}

/* The minor heap's blocks [lo, hi), back to back from young_ptr, into hx
 * as one more chunk (not counted in the census).  Dropped again if a
 * block runs past hi (young_ptr was not where the blocks start). */
static void index_minor(struct reader *r, struct heap_index *hx, uint64_t lo, uint64_t hi)
{
	uint64_t hp = lo, hd;

	if (hi <= lo || hx_add_chunk(hx, lo, hi) < 0)
		return;
	while (hp < hi) {
		if (read_word(r, hp, hi, &hd) < 0 || (hd >> 10) + 1 > (hi - hp) / 8) {
			struct hx_chunk *c = &hx->chunks[--hx->nchunks];

			free(c->starts);
			free(c->rank);
			return;
		}
		hx_set_start(hx, hp);
		hp += 8 * ((hd >> 10) + 1);
	}
	hx->minor_lo = lo;
	hx->minor_hi = hi;
}

int walk4_census(const struct target *t, double deadline, struct heap_index *hx, bool minor, struct walk4_census *c,
		 char *err, size_t errlen)
{
	struct reader r = { .pid = t->pid };
	uint64_t heap_start_sym, phase_sym, sweep_sym, chunk, sweep_hp, state, young[2];
	int32_t phase;
	double t0 = mono_s();
	int ret;

	memset(c, 0, sizeof(*c));
	if (t->rt.major != 4) {
		snprintf(err, errlen, "the exact census reads OCaml 4.12 to 4.14 heaps; PID %d runs OCaml %s",
			 (int)t->pid, t->rt.version);
		return -ENOTSUP;
	}
	if ((ret = sym_addr(t, "caml_heap_start", &heap_start_sym, err, errlen)) ||
	    (ret = sym_addr(t, "caml_gc_phase", &phase_sym, err, errlen)) ||
	    (ret = sym_addr(t, "caml_gc_sweep_hp", &sweep_sym, err, errlen)))
		return ret;
	r.buf = malloc(WINDOW);
	if (!r.buf)
		return -ENOMEM;
	ret = -EFAULT;
	if (read_mem(&r, heap_start_sym, &chunk, 8) || read_mem(&r, phase_sym, &phase, 4) ||
	    read_mem(&r, sweep_sym, &sweep_hp, 8) || read_mem(&r, t->rt.caml_state_sym + t->bias, &state, 8) ||
	    read_mem(&r, state + CH_OCAML4_STAT_HEAP_WSZ, &c->rt_heap_wsz, 8) ||
	    read_mem(&r, state + CH_OCAML4_STAT_HEAP_CHUNKS, &c->rt_heap_chunks, 8) ||
	    read_mem(&r, state + t->rt.young_ptr_off, &young[0], 8) ||
	    read_mem(&r, state + CH_OCAML4_YOUNG_ALLOC_END, &young[1], 8)) {
		snprintf(err, errlen, "cannot read the runtime's heap globals in PID %d", (int)t->pid);
		goto out;
	}
	c->gc_phase = phase;
	c->minor_words = young[1] > young[0] ? (young[1] - young[0]) / 8 : 0;
	c->complete = 1;
	while (chunk) {
		uint64_t head[4];

		if (mono_s() > deadline) {
			c->complete = 0;
			ret = -ETIME;
			goto out;
		}
		if (++c->heap_chunks > c->rt_heap_chunks) {
			snprintf(err, errlen, "the heap has more chunks than the runtime counts (%llu)",
				 (unsigned long long)c->rt_heap_chunks);
			ret = -EPROTO;
			goto out;
		}
		if (read_mem(&r, chunk - CHUNK_HEAD_BYTES(t->rt.minor), head, sizeof(head))) {
			snprintf(err, errlen, "cannot read the heap chunk head at 0x%llx",
				 (unsigned long long)(chunk - CHUNK_HEAD_BYTES(t->rt.minor)));
			goto out;
		}
		c->heap_words += head[2] / 8;
		if (hx && hx_add_chunk(hx, chunk, chunk + head[2]) < 0) {
			ret = -ENOMEM;
			snprintf(err, errlen, "no memory for the heap's index");
			goto out;
		}
		ret = walk_chunk(&r, c, hx, chunk, chunk + head[2], sweep_hp, deadline, err, errlen);
		if (ret) {
			c->complete = 0;
			goto out;
		}
		chunk = head[3];
	}
	if (hx && minor)
		index_minor(&r, hx, young[0], young[1]);
	ret = hx ? hx_finish(hx) : 0;
	if (ret)
		snprintf(err, errlen, "no memory for the heap's index");
out:
	c->bytes_read = r.bytes_read;
	c->walk_s = mono_s() - t0;
	free(r.buf);
	return ret;
}
