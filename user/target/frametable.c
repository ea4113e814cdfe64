/* frametable.c -- OCaml frame descriptors (4.13 to 5.3) and their debuginfo,
 * read from the executable file (not from a live process).
 *
 * The walk mirrors next_frame_descr() in 4.13.1 runtime/roots_nat.c:81-100
 * and the decoding mirrors debuginfo_extract()/caml_debuginfo_location() in
 * runtime/backtrace_nat.c:163-281; the emitter is asmcomp/emitaux.ml:
 * 186-281 (emit_frametable).  See frametable.h for the layout.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "target/frametable.h"
#include "target/releases.h"

/* Sanity bounds: a table larger than this is a misparse, not a program. */
#define FRAMETABLE_MAX_TABLES (1u << 20)
#define FRAMETABLE_MAX_DESCRS (1ull << 26)
#define FRAMETABLE_MAX_STRLEN 4096

static uint64_t frametable_align(uint64_t p, uint64_t a)
{
	return (p + a - 1) & ~(a - 1);
}

static int frametable_u32(const struct elf_image *img, uint64_t vaddr, uint32_t *out)
{
	const void *p = elf_image_data(img, vaddr, sizeof(*out));

	if (!p)
		return -EINVAL;
	memcpy(out, p, sizeof(*out));
	return 0;
}

/* NUL-terminated string at vaddr, entirely backed by file bytes. */
static const char *frametable_cstr(const struct elf_image *img, uint64_t vaddr)
{
	const char *s = elf_image_data(img, vaddr, 256);

	if (s && memchr(s, '\0', 256))
		return s;
	s = elf_image_data(img, vaddr, 1);
	if (!s)
		return NULL;
	for (size_t i = 0; i < FRAMETABLE_MAX_STRLEN; i++) {
		const char *c = elf_image_data(img, vaddr + i, 1);

		if (!c)
			return NULL;
		if (!*c)
			return s;
	}
	return NULL;
}

static int frametable_push(struct frametable *ft, size_t *cap, const struct frame_descr *d)
{
	if (ft->count == *cap) {
		size_t ncap = *cap ? 2 * *cap : 4096;
		struct frame_descr *p = realloc(ft->descrs, ncap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		ft->descrs = p;
		*cap = ncap;
	}
	ft->descrs[ft->count++] = *d;
	return 0;
}

/* Parse one per-module table at `tbl`. */
static int frametable_parse_table(struct frametable *ft, size_t *cap, uint64_t tbl)
{
	const struct elf_image *img = ft->img;
	const int64_t *hdr = elf_image_data(img, tbl, sizeof(int64_t));
	int64_t num;
	uint64_t d;

	if (!hdr)
		return -EINVAL;
	memcpy(&num, hdr, sizeof(num));
	if (num < 0 || (uint64_t)num > FRAMETABLE_MAX_DESCRS)
		return -EINVAL;
	d = tbl + 8;
	for (int64_t i = 0; i < num; i++) {
		const unsigned char *raw = elf_image_data(img, d, 12);
		struct frame_descr fd = { .descr_vaddr = d };
		uint16_t num_live;
		uint64_t p;
		int err;

		if (!raw || (d & 7))
			return -EINVAL;
		err = elf_image_read_ptr(img, d, &fd.retaddr);
		if (err || fd.retaddr == 0 || !elf_image_is_code(img, fd.retaddr))
			return -EINVAL;
		memcpy(&fd.frame_size, raw + 8, 2);
		memcpy(&num_live, raw + 10, 2);
		p = d + 12 + 2 * (uint64_t)num_live;

		/* 0xFFFF marks the return into caml_start_program, i.e. a C
		 * caller (4.13.1 runtime/amd64.S:667-677).  Both flag bits are
		 * set in it, but it carries neither allocation lengths nor
		 * debuginfo (it is the last descriptor of caml_system__frametable,
		 * which is why roots_nat.c never needed the special case). */
		if (fd.frame_size != 0xFFFF) {
			if (fd.frame_size & 2) {
				const unsigned char *na = elf_image_data(img, p, 1);

				/* num_allocs 0 is a poll point (Ipoll, emitted with
				 * Dbg_alloc [], amd64/emit.mlp:615-624), which
				 * caml_garbage_collection treats as such
				 * (signals_nat.c:83-86). */
				if (!na)
					return -EINVAL;
				fd.num_allocs = *na;
				if (fd.num_allocs)
					fd.alloc_lens_vaddr = p + 1;
				p += 1 + (uint64_t)fd.num_allocs;
			}
			if (fd.frame_size & 1) {
				p = frametable_align(p, 4);
				fd.has_debuginfo = 1;
				fd.dbg_slots_vaddr = p;
				p += 4 * (uint64_t)((fd.frame_size & 2) ? fd.num_allocs : 1);
			}
		}
		/* The whole descriptor must be file-backed. */
		if (!elf_image_data(img, d, p - d))
			return -EINVAL;
		err = frametable_push(ft, cap, &fd);
		if (err)
			return err;
		d = frametable_align(p, 8);
	}
	return 0;
}

static int frametable_descr_cmp(const void *a, const void *b)
{
	const struct frame_descr *x = a, *y = b;

	if (x->retaddr != y->retaddr)
		return x->retaddr < y->retaddr ? -1 : 1;
	/* Stable choice among duplicates: the first one in the file. */
	return x->descr_vaddr < y->descr_vaddr ? -1 : x->descr_vaddr > y->descr_vaddr;
}

/* Sort, drop duplicate return addresses and count, once all tables are in. */
static void frametable_finish(struct frametable *ft)
{
	qsort(ft->descrs, ft->count, sizeof(*ft->descrs), frametable_descr_cmp);
	/* The runtime's hash table keeps one descriptor per return address
	 * (roots_nat.c fill_hashtable); so do we. */
	if (ft->count) {
		size_t w = 1;

		for (size_t r = 1; r < ft->count; r++)
			if (ft->descrs[r].retaddr != ft->descrs[w - 1].retaddr)
				ft->descrs[w++] = ft->descrs[r];
		ft->count = w;
	}
	for (size_t i = 0; i < ft->count; i++) {
		const struct frame_descr *d = &ft->descrs[i];

		ft->num_return_to_c += d->frame_size == 0xFFFF;
		ft->num_with_allocs += d->frame_size != 0xFFFF && (d->frame_size & 2);
		ft->num_with_debuginfo += d->has_debuginfo;
	}
}

int frametable_load(const struct elf_image *img, struct frametable **out)
{
	const struct elf_symbol *sym = elf_image_symbol(img, "caml_frametable");
	struct frametable *ft;
	size_t cap = 0;
	int err = 0;

	*out = NULL;
	if (!sym)
		return -ENOENT;
	ft = calloc(1, sizeof(*ft));
	if (!ft)
		return -ENOMEM;
	ft->img = img;
	{
		char v[32];
		int major, minor;

		ft->dbg52 = elf_image_find_ocaml_version(img, v, sizeof(v)) == 0 && sscanf(v, "%d.%d", &major, &minor) == 2 &&
			    ocaml_release_debuginfo52(major, minor);
	}

	/* caml_frametable is a NULL-terminated array of table pointers, built
	 * by the linker's startup file (asmcomp/asmlink.ml make_startup_file). */
	for (size_t i = 0;; i++) {
		uint64_t tbl;

		if (i >= FRAMETABLE_MAX_TABLES || elf_image_read_ptr(img, sym->vaddr + 8 * i, &tbl)) {
			err = -EINVAL;
			goto fail;
		}
		if (!tbl)
			break;
		err = frametable_parse_table(ft, &cap, tbl);
		if (err)
			goto fail;
		ft->num_tables++;
	}

	frametable_finish(ft);
	*out = ft;
	return 0;
fail:
	frametable_free(ft);
	return err;
}

void frametable_free(struct frametable *ft)
{
	if (!ft)
		return;
	free(ft->descrs);
	free(ft);
}

const struct frame_descr *frametable_find(const struct frametable *ft, uint64_t retaddr)
{
	size_t lo = 0, hi = ft->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t r = ft->descrs[mid].retaddr;

		if (r == retaddr)
			return &ft->descrs[mid];
		if (r < retaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

unsigned frametable_alloc_whsize(const struct frametable *ft, const struct frame_descr *d, unsigned idx)
{
	const unsigned char *len;

	if (idx >= d->num_allocs)
		return 0;
	len = elf_image_data(ft->img, d->alloc_lens_vaddr + idx, 1);
	if (!len)
		return 0;
	/* alloc_len = wosize - 1 (emitaux.ml:226, "alloc_words - 2" with the
	 * header counted); Whsize adds the header back (stack.h:106). */
	return (unsigned)*len + 2;
}

/* vaddr of the debuginfo slot to decode for `alloc_idx`, or 0 if none. */
static int frametable_slot(const struct frametable *ft, const struct frame_descr *d, unsigned alloc_idx,
			   uint64_t *slot)
{
	uint32_t rel;
	int err;

	*slot = 0;
	if (!d->has_debuginfo)
		return 0;
	if (!d->num_allocs) {
		*slot = d->dbg_slots_vaddr;
		return 0;
	}
	/* A Comballoc slot is 0 when that sub-allocation has no debuginfo
	 * (emitaux.ml:229-233).  The runtime then reports the frame through
	 * its descriptor (backtrace_nat.c:137-143), which picks the first
	 * slot that has one (:190-196); an out-of-range index gets the same. */
	if (alloc_idx < d->num_allocs) {
		err = frametable_u32(ft->img, d->dbg_slots_vaddr + 4 * (uint64_t)alloc_idx, &rel);
		if (err)
			return err;
		if (rel) {
			*slot = d->dbg_slots_vaddr + 4 * (uint64_t)alloc_idx;
			return 0;
		}
	}
	for (unsigned i = 0; i < d->num_allocs; i++) {
		err = frametable_u32(ft->img, d->dbg_slots_vaddr + 4 * (uint64_t)i, &rel);
		if (err)
			return err;
		if (rel) {
			*slot = d->dbg_slots_vaddr + 4 * (uint64_t)i;
			return 0;
		}
	}
	return 0;
}

int frametable_locations(const struct frametable *ft, const struct frame_descr *d, unsigned alloc_idx,
			 struct ocaml_location *locs, int max)
{
	const struct elf_image *img = ft->img;
	uint64_t slot, dbg;
	uint32_t rel;
	int n = 0, err;

	err = frametable_slot(ft, d, alloc_idx, &slot);
	if (err || !slot)
		return err;
	err = frametable_u32(img, slot, &rel);
	if (err)
		return err;
	if (!rel || (rel & 3))
		return -EINVAL;
	/* Self-relative, 32-bit: the emitter writes `label - .` (efa_label_rel). */
	dbg = slot + rel;

	while (n < max) {
		uint32_t info1, info2;
		int32_t file_ofs;
		uint64_t rec;
		const char *name, *file;

		if (frametable_u32(img, dbg, &info1) || frametable_u32(img, dbg + 4, &info2))
			return -EINVAL;
		/* pack_info (emitaux.ml:248-258): info1 low 32 bits of
		 * `defname - dbg + packed`, the defname label being 4-aligned. */
		rec = dbg + (info1 & 0x3FFFFFC);
		if (frametable_u32(img, rec, (uint32_t *)&file_ofs))
			return -EINVAL;
		name = frametable_cstr(img, rec + 4);
		file = frametable_cstr(img, rec + (int64_t)file_ofs);
		if (!name || !file)
			return -EINVAL;
		if (!ft->dbg52) {
			locs[n++] = (struct ocaml_location){
				.name = name,
				.file = file,
				.line = info2 >> 12,
				.start_chr = (info2 >> 4) & 0xFF,
				.end_chr = ((info2 & 0xF) << 6) | (info1 >> 26),
				.is_raise = (info1 >> 1) & 1,
			};
		} else if (info2 & 0x80000000u) {
			/* partially packed: struct name_and_loc_info {i32
			 * filename_offs; u16 start_chr, end_chr; i32 end_offset;
			 * char name[]} */
			uint16_t chr[2];

			if (elf_image_read(img, rec + 4, chr, sizeof(chr)))
				return -EINVAL;
			name = frametable_cstr(img, rec + 12);
			if (!name)
				return -EINVAL;
			locs[n++] = (struct ocaml_location){
				.name = name,
				.file = file,
				.line = (info2 >> 12) & 0x7FFFF,
				.start_chr = chr[0],
				.end_chr = chr[1],
				.is_raise = (info1 >> 1) & 1,
			};
		} else {
			/* fully packed: line 12 bits, end-line delta 3, start
			 * char 6, end char 7 (relative to the end line) */
			locs[n++] = (struct ocaml_location){
				.name = name,
				.file = file,
				.line = info2 >> 19,
				.start_chr = (info2 >> 10) & 0x3F,
				.end_chr = (info2 >> 3) & 0x7F,
				.is_raise = (info1 >> 1) & 1,
			};
		}
		/* Bit 0: the next (outer) location of an inline chain follows. */
		if (!(info1 & 1))
			break;
		dbg += 8;
	}
	return n;
}

static int frametable_is_unit_table(const char *name)
{
	size_t n = strlen(name);

	if (strncmp(name, "caml", 4) || !strcmp(name, "caml_frametable"))
		return 0;
	return (n > 12 && !strcmp(name + n - 12, "__frametable")) || (n > 11 && !strcmp(name + n - 11, ".frametable"));
}

int frametable_load_units(const struct elf_image *img, struct frametable **out)
{
	struct frametable *ft;
	size_t cap = 0;
	int err = 0;

	*out = NULL;
	ft = calloc(1, sizeof(*ft));
	if (!ft)
		return -ENOMEM;
	ft->img = img;
	for (size_t i = 0;; i++) {
		const struct elf_symbol *sym = elf_image_symbol_nth(img, i);

		if (!sym)
			break;
		if (!sym->vaddr || !frametable_is_unit_table(sym->name))
			continue;
		err = frametable_parse_table(ft, &cap, sym->vaddr);
		if (err)
			goto fail;
		ft->num_tables++;
	}
	if (!ft->num_tables) {
		err = -ENOENT;
		goto fail;
	}
	frametable_finish(ft);
	*out = ft;
	return 0;
fail:
	frametable_free(ft);
	return err;
}
