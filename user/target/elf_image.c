/* elf_image.c -- symbols, segments, bytes and dynamic relocations of an
 * x86-64 ELF executable, read through libelf from a read-only mapping.
 *
 * Native OCaml executables are linked with -Wl,-E, so every global runtime
 * and OCaml symbol survives `strip` in .dynsym (OCaml's configure.ac
 * oc_ldflags; Debian's /usr/lib/ocaml/Makefile.config OC_LDFLAGS); the
 * frame tables are data and survive too.  In a PIE their pointers are
 * R_X86_64_RELATIVE relocations whose in-place bytes GNU ld fills with the
 * link-time value but lld leaves 0 (its --apply-dynamic-relocs is off by
 * default, ld.lld(1)), so pointers are read through the .rela.dyn addends.
 */
#include <ctype.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "target/elf_image.h"

struct elf_segment {
	uint64_t vaddr;
	uint64_t memsz;
	uint64_t offset;
	uint64_t filesz;
	uint32_t flags; /* PF_* */
};

struct elf_reloc {
	uint64_t vaddr; /* r_offset */
	uint64_t value; /* what ld.so stores there for a zero load bias */
};

struct elf_image {
	char *path;
	const unsigned char *map;
	size_t map_size;
	Elf *elf;
	bool pie;
	bool has_symtab;
	bool has_dwarf;

	struct elf_segment *segs;
	size_t nsegs;
	bool has_tls; /* a PT_TLS segment: */
	uint64_t tls_vaddr, tls_memsz, tls_align;

	/* One entry per distinct name (.symtab first), for lookups by name. */
	struct elf_symbol *syms;
	size_t nsyms;
	uint32_t *name_slots; /* open addressing: index+1 into syms, 0 = empty */
	size_t name_mask;

	/* Every code symbol, sorted by address, best alias first at each
	 * address.  Separate from syms because local functions of different
	 * object files may share a name and still need to be found by address. */
	struct elf_symbol *funcs;
	size_t nfuncs;

	struct elf_reloc *relocs; /* sorted by vaddr */
	size_t nrelocs;
};

static uint64_t elf_image_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

static const struct elf_segment *elf_image_segment(const struct elf_image *img, uint64_t vaddr)
{
	for (size_t i = 0; i < img->nsegs; i++) {
		const struct elf_segment *s = &img->segs[i];

		if (vaddr >= s->vaddr && vaddr - s->vaddr < s->memsz)
			return s;
	}
	return NULL;
}

static int elf_image_load_segments(struct elf_image *img)
{
	size_t phnum;

	if (elf_getphdrnum(img->elf, &phnum) != 0)
		return -ENOEXEC;
	img->segs = calloc(phnum ? phnum : 1, sizeof(*img->segs));
	if (!img->segs)
		return -ENOMEM;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(img->elf, i, &ph) && ph.p_type == PT_TLS) {
			img->tls_vaddr = ph.p_vaddr;
			img->tls_memsz = ph.p_memsz;
			img->tls_align = ph.p_align ? ph.p_align : 1;
			img->has_tls = true;
		}
		if (!gelf_getphdr(img->elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		/* A segment claiming bytes past the end of the file would make
		 * elf_image_data hand out pointers outside the mapping. */
		if (ph.p_filesz > ph.p_memsz || ph.p_offset > img->map_size ||
		    ph.p_filesz > img->map_size - ph.p_offset)
			return -ENOEXEC;
		img->segs[img->nsegs++] = (struct elf_segment){
			.vaddr = ph.p_vaddr,
			.memsz = ph.p_memsz,
			.offset = ph.p_offset,
			.filesz = ph.p_filesz,
			.flags = ph.p_flags,
		};
	}
	return img->nsegs ? 0 : -ENOEXEC;
}

static bool elf_image_is_marker(const char *name)
{
	/* OCaml emits camlX__code_begin / code_end (4.x) and camlX.code_begin
	 * (5.1+) at the first and one past the last function of each unit, so
	 * they alias the first function of a unit and the first function of
	 * the next one (4.13.1 asmcomp/amd64/emit.mlp begin_assembly,
	 * end_assembly). */
	static const char *const suffixes[] = { "__code_begin", "__code_end", ".code_begin", ".code_end" };
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
		size_t m = strlen(suffixes[i]);

		if (n >= m && strcmp(name + n - m, suffixes[i]) == 0)
			return true;
	}
	/* Assembler-local labels that made it into .symtab. */
	return name[0] == '.' || (name[0] == 'L' && isdigit((unsigned char)name[1]));
}

/* Higher is a better name for the code at an address. */
static int elf_image_alias_rank(const struct elf_symbol *s)
{
	int r = 0;

	if (!elf_image_is_marker(s->name))
		r += 8;
	if (s->type == STT_FUNC || s->type == STT_GNU_IFUNC)
		r += 4;
	if (s->bind != STB_LOCAL)
		r += 2;
	if (s->size)
		r += 1;
	return r;
}

static int elf_image_func_cmp(const void *a, const void *b)
{
	const struct elf_symbol *x = a, *y = b;
	int rx, ry;

	if (x->vaddr != y->vaddr)
		return x->vaddr < y->vaddr ? -1 : 1;
	rx = elf_image_alias_rank(x);
	ry = elf_image_alias_rank(y);
	if (rx != ry)
		return ry - rx;
	return strcmp(x->name, y->name);
}

static struct elf_symbol *elf_image_name_find(const struct elf_image *img, const char *name, uint64_t h)
{
	for (size_t i = h & img->name_mask;; i = (i + 1) & img->name_mask) {
		uint32_t slot = img->name_slots[i];

		if (!slot)
			return NULL;
		if (strcmp(img->syms[slot - 1].name, name) == 0)
			return &img->syms[slot - 1];
	}
}

static void elf_image_name_insert(struct elf_image *img, uint64_t h, size_t idx)
{
	size_t i = h & img->name_mask;

	while (img->name_slots[i])
		i = (i + 1) & img->name_mask;
	img->name_slots[i] = idx + 1;
}

/* Index one symbol table.  Called for .symtab before .dynsym, so the first
 * definition of a name wins; within a table a global beats a local of the
 * same name (a static helper shadowing an exported symbol is rarely what a
 * caller asking by name wants). */
static void elf_image_index_symtab(struct elf_image *img, Elf_Scn *scn, const GElf_Shdr *sh, bool dynamic)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 1; i < n; i++) {
		struct elf_symbol sym, *old;
		GElf_Sym gs;
		const char *name;
		uint64_t h;

		if (!gelf_getsym(data, i, &gs) || gs.st_shndx == SHN_UNDEF)
			continue;
		if (GELF_ST_TYPE(gs.st_info) == STT_SECTION || GELF_ST_TYPE(gs.st_info) == STT_FILE)
			continue;
		name = elf_strptr(img->elf, sh->sh_link, gs.st_name);
		if (!name || !*name)
			continue;
		sym = (struct elf_symbol){
			.name = name,
			.vaddr = gs.st_value,
			.size = gs.st_size,
			.type = GELF_ST_TYPE(gs.st_info),
			.bind = GELF_ST_BIND(gs.st_info),
			.dynamic = dynamic,
		};

		if (gs.st_shndx != SHN_ABS &&
		    (sym.type == STT_FUNC || sym.type == STT_GNU_IFUNC || sym.type == STT_NOTYPE) &&
		    elf_image_is_code(img, sym.vaddr))
			img->funcs[img->nfuncs++] = sym;

		h = elf_image_hash(name);
		old = elf_image_name_find(img, name, h);
		if (old) {
			if (old->dynamic == dynamic && old->bind == STB_LOCAL && sym.bind != STB_LOCAL)
				*old = sym;
			continue;
		}
		img->syms[img->nsyms] = sym;
		elf_image_name_insert(img, h, img->nsyms);
		img->nsyms++;
	}
}

static int elf_image_load_symbols(struct elf_image *img)
{
	Elf_Scn *symtab = NULL, *dynsym = NULL, *scn = NULL;
	GElf_Shdr symtab_sh, dynsym_sh;
	size_t total = 0, cap;

	while ((scn = elf_nextscn(img->elf, scn))) {
		GElf_Shdr sh;

		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_SYMTAB && !symtab) {
			symtab = scn;
			symtab_sh = sh;
		} else if (sh.sh_type == SHT_DYNSYM && !dynsym) {
			dynsym = scn;
			dynsym_sh = sh;
		} else {
			continue;
		}
		if (sh.sh_entsize)
			total += sh.sh_size / sh.sh_entsize;
	}
	img->has_symtab = symtab != NULL;

	for (cap = 16; cap < 2 * total + 2; cap <<= 1)
		;
	img->name_slots = calloc(cap, sizeof(*img->name_slots));
	img->syms = calloc(total + 1, sizeof(*img->syms));
	img->funcs = calloc(total + 1, sizeof(*img->funcs));
	if (!img->name_slots || !img->syms || !img->funcs)
		return -ENOMEM;
	img->name_mask = cap - 1;

	if (symtab)
		elf_image_index_symtab(img, symtab, &symtab_sh, false);
	if (dynsym)
		elf_image_index_symtab(img, dynsym, &dynsym_sh, true);

	qsort(img->funcs, img->nfuncs, sizeof(*img->funcs), elf_image_func_cmp);
	/* The same function is usually in both tables; keep one entry per
	 * (address, name). */
	if (img->nfuncs) {
		size_t w = 1;

		for (size_t r = 1; r < img->nfuncs; r++) {
			const struct elf_symbol *p = &img->funcs[w - 1], *c = &img->funcs[r];

			if (c->vaddr == p->vaddr && strcmp(c->name, p->name) == 0)
				continue;
			img->funcs[w++] = *c;
		}
		img->nfuncs = w;
	}
	return 0;
}

static int elf_image_reloc_cmp(const void *a, const void *b)
{
	const struct elf_reloc *x = a, *y = b;

	return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

/* Dynamic relocations (allocated SHT_RELA sections: .rela.dyn; .rela.plt
 * only holds JUMP_SLOTs, which are skipped).  RELR needs nothing: its
 * addends are the in-place bytes. */
static int elf_image_load_relocs(struct elf_image *img)
{
	Elf_Scn *scn = NULL;
	size_t cap = 0;

	while ((scn = elf_nextscn(img->elf, scn))) {
		GElf_Shdr sh, symsh;
		Elf_Data *data, *symdata = NULL;
		Elf_Scn *symscn;
		size_t n;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !(sh.sh_flags & SHF_ALLOC) ||
		    !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		symscn = sh.sh_link ? elf_getscn(img->elf, sh.sh_link) : NULL;
		if (symscn && gelf_getshdr(symscn, &symsh))
			symdata = elf_getdata(symscn, NULL);
		n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Rela r;
			GElf_Sym sym;
			uint64_t value;

			if (!gelf_getrela(data, i, &r))
				continue;
			switch (GELF_R_TYPE(r.r_info)) {
			case R_X86_64_RELATIVE:
				value = r.r_addend;
				break;
			case R_X86_64_64:
			case R_X86_64_GLOB_DAT:
				if (!symdata || !gelf_getsym(symdata, GELF_R_SYM(r.r_info), &sym))
					continue;
				/* An undefined symbol lives in another object; its
				 * value here is unknowable, like ld.so's view of it. */
				if (sym.st_shndx == SHN_UNDEF)
					continue;
				value = sym.st_value + r.r_addend;
				break;
			default:
				continue;
			}
			if (img->nrelocs == cap) {
				size_t ncap = cap ? 2 * cap : 1024;
				struct elf_reloc *p = realloc(img->relocs, ncap * sizeof(*p));

				if (!p)
					return -ENOMEM;
				img->relocs = p;
				cap = ncap;
			}
			img->relocs[img->nrelocs++] = (struct elf_reloc){ r.r_offset, value };
		}
	}
	qsort(img->relocs, img->nrelocs, sizeof(*img->relocs), elf_image_reloc_cmp);
	return 0;
}

static void elf_image_detect_dwarf(struct elf_image *img)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(img->elf, &shstrndx) != 0)
		return;
	while ((scn = elf_nextscn(img->elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(img->elf, shstrndx, sh.sh_name);
		if (name && (!strcmp(name, ".debug_info") || !strcmp(name, ".debug_line") ||
			     !strcmp(name, ".zdebug_info") || !strcmp(name, ".zdebug_line"))) {
			img->has_dwarf = true;
			return;
		}
	}
}

int elf_image_open(const char *path, struct elf_image **out)
{
	struct elf_image *img;
	struct stat st;
	GElf_Ehdr eh;
	int fd, err;

	*out = NULL;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -ENOEXEC;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
		close(fd);
		return -ENOEXEC;
	}

	img = calloc(1, sizeof(*img));
	if (!img) {
		close(fd);
		return -ENOMEM;
	}
	img->map_size = st.st_size;
	img->map = mmap(NULL, img->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
	err = img->map == MAP_FAILED ? -errno : 0;
	close(fd);
	if (err) {
		img->map = NULL;
		goto fail;
	}
	img->path = strdup(path);
	if (!img->path) {
		err = -ENOMEM;
		goto fail;
	}

	/* libelf only reads through the mapping: the file is native-endian
	 * ELF64, so no section needs converting in place. */
	err = -ENOEXEC;
	img->elf = elf_memory((char *)img->map, img->map_size);
	if (!img->elf || elf_kind(img->elf) != ELF_K_ELF || gelf_getclass(img->elf) != ELFCLASS64)
		goto fail;
	if (!gelf_getehdr(img->elf, &eh) || eh.e_machine != EM_X86_64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || (eh.e_type != ET_EXEC && eh.e_type != ET_DYN))
		goto fail;
	img->pie = eh.e_type == ET_DYN;

	err = elf_image_load_segments(img);
	if (err)
		goto fail;
	err = elf_image_load_symbols(img);
	if (err)
		goto fail;
	err = elf_image_load_relocs(img);
	if (err)
		goto fail;
	elf_image_detect_dwarf(img);
	*out = img;
	return 0;
fail:
	elf_image_close(img);
	return err;
}

void elf_image_close(struct elf_image *img)
{
	if (!img)
		return;
	if (img->elf)
		elf_end(img->elf);
	if (img->map)
		munmap((void *)img->map, img->map_size);
	free(img->segs);
	free(img->syms);
	free(img->name_slots);
	free(img->funcs);
	free(img->relocs);
	free(img->path);
	free(img);
}

const char *elf_image_path(const struct elf_image *img)
{
	return img->path;
}

bool elf_image_is_pie(const struct elf_image *img)
{
	return img->pie;
}

bool elf_image_has_symtab(const struct elf_image *img)
{
	return img->has_symtab;
}

bool elf_image_has_dwarf(const struct elf_image *img)
{
	return img->has_dwarf;
}

size_t elf_image_symbol_count(const struct elf_image *img)
{
	return img->nsyms;
}

const struct elf_symbol *elf_image_symbol(const struct elf_image *img, const char *name)
{
	return elf_image_name_find(img, name, elf_image_hash(name));
}

const struct elf_symbol *elf_image_symbol_nth(const struct elf_image *img, size_t i)
{
	return i < img->nsyms ? &img->syms[i] : NULL;
}

const struct elf_symbol *elf_image_function_at(const struct elf_image *img, uint64_t vaddr)
{
	const struct elf_segment *seg = elf_image_segment(img, vaddr);
	size_t lo = 0, hi = img->nfuncs, first, near;

	if (!seg || !(seg->flags & PF_X))
		return NULL;
	/* Last entry with vaddr <= target. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (img->funcs[mid].vaddr <= vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	near = lo - 1;
	/* Aliases are sorted best first: step back to the first entry at the
	 * nearest address. */
	first = near;
	while (first > 0 && img->funcs[first - 1].vaddr == img->funcs[near].vaddr)
		first--;
	if (img->funcs[first].vaddr < seg->vaddr)
		return NULL;
	for (size_t i = first; i <= near; i++) {
		const struct elf_symbol *s = &img->funcs[i];

		if (vaddr - s->vaddr < s->size)
			return s;
	}
	/* The nearest symbols end before the target (or have no size):
	 * a sized function starting a little lower may still enclose it (a
	 * local label inside a function).  Bounded, since functions do not
	 * nest deeply. */
	for (size_t i = first, k = 0; i > 0 && k < 64; i--, k++) {
		const struct elf_symbol *s = &img->funcs[i - 1];

		if (s->vaddr < seg->vaddr)
			break;
		if (s->size && vaddr - s->vaddr < s->size)
			return s;
	}
	return &img->funcs[first];
}

int elf_image_vaddr_to_offset(const struct elf_image *img, uint64_t vaddr, uint64_t *file_off)
{
	const struct elf_segment *s = elf_image_segment(img, vaddr);

	if (!s || vaddr - s->vaddr >= s->filesz)
		return -ERANGE;
	*file_off = vaddr - s->vaddr + s->offset;
	return 0;
}

bool elf_image_is_code(const struct elf_image *img, uint64_t vaddr)
{
	const struct elf_segment *s = elf_image_segment(img, vaddr);

	return s && (s->flags & PF_X);
}

int elf_image_read(const struct elf_image *img, uint64_t vaddr, void *buf, size_t len)
{
	const struct elf_segment *s = elf_image_segment(img, vaddr);
	uint64_t off, infile;

	if (!s || len > s->memsz - (vaddr - s->vaddr))
		return -ERANGE;
	off = vaddr - s->vaddr;
	infile = off < s->filesz ? s->filesz - off : 0;
	if (infile > len)
		infile = len;
	if (infile)
		memcpy(buf, img->map + s->offset + off, infile);
	memset((char *)buf + infile, 0, len - infile);
	return 0;
}

int elf_image_read_ptr(const struct elf_image *img, uint64_t vaddr, uint64_t *out)
{
	size_t lo = 0, hi = img->nrelocs;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (img->relocs[mid].vaddr < vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < img->nrelocs && img->relocs[lo].vaddr == vaddr) {
		if (!elf_image_segment(img, vaddr))
			return -ERANGE;
		*out = img->relocs[lo].value;
		return 0;
	}
	return elf_image_read(img, vaddr, out, sizeof(*out));
}

const void *elf_image_data(const struct elf_image *img, uint64_t vaddr, size_t len)
{
	const struct elf_segment *s = elf_image_segment(img, vaddr);
	uint64_t off;

	if (!s)
		return NULL;
	off = vaddr - s->vaddr;
	if (off > s->filesz || len > s->filesz - off)
		return NULL;
	return img->map + s->offset + off;
}

/* Length of a version string "M.m.p" or "M.m.p+tag"/"M.m.p~tag" at p (at
 * most n bytes available, a NUL must follow), or 0.  The major is 4 or 5:
 * the only native runtimes camlheap knows, and a looser pattern matches
 * unrelated "1.2.3" strings of C libraries. */
static size_t elf_image_version_len(const unsigned char *p, size_t n)
{
	size_t i = 0, d;

	if (n < 6 || (p[0] != '4' && p[0] != '5') || p[1] != '.')
		return 0;
	i = 2;
	for (int part = 0; part < 2; part++) {
		for (d = 0; i < n && d < 3 && isdigit(p[i]); i++, d++)
			;
		if (d == 0 || d > 2)
			return 0;
		if (part == 0) {
			if (i >= n || p[i] != '.')
				return 0;
			i++;
		}
	}
	if (i < n && (p[i] == '+' || p[i] == '~')) {
		/* p[i] && : strchr also finds the string's own NUL */
		for (i++; i < n && p[i] && (isalnum(p[i]) || strchr("_.+~-", p[i])); i++)
			;
	}
	return i < n && p[i] == '\0' ? i : 0;
}

/* First NUL-delimited version string in p[0..n): 0 and a copy in buf, or
 * -ENOENT. */
static int elf_image_scan_version(const unsigned char *p, size_t n, char *buf, size_t buflen)
{
	for (size_t i = 1; i + 6 < n; i++) {
		const unsigned char *q;
		size_t len;

		q = memchr(p + i, '.', n - i);
		if (!q)
			break;
		/* Candidate start is one before the first '.'. */
		i = q - p;
		if (i < 2 || p[i - 2] != '\0')
			continue;
		len = elf_image_version_len(p + i - 1, n - (i - 1));
		if (!len)
			continue;
		if (buflen) {
			size_t c = len < buflen - 1 ? len : buflen - 1;

			memcpy(buf, p + i - 1, c);
			buf[c] = '\0';
		}
		return 0;
	}
	return -ENOENT;
}

int elf_image_find_ocaml_version(const struct elf_image *img, char *buf, size_t buflen)
{
	/* Sys.ocaml_version is an OCaml string constant in the data of
	 * Stdlib__Sys (stdlib/sys.mlp): the byte before it is the top byte of
	 * its block header (0 for any small block) and a NUL follows it (the
	 * padding of an OCaml string).  OCAML_VERSION_STRING in the runtime is
	 * a plain C string, also NUL-delimited, but not in every binary.  Only
	 * Stdlib__Sys's own data is searched, so that a program's string that
	 * merely looks like a version ("4.05.0") is never taken for the
	 * runtime's. */
	/* The module's symbol prefix: camlStdlib__Sys (4.13, 4.14),
	 * camlStdlib__Sys. (5.x separates with a dot), camlStdlib__sys (4.07 to
	 * 4.12 name the stdlib's files stdlib__sys.ml). */
	static const char *const names[][2] = {
		{ "camlStdlib__Sys__data_begin", "camlStdlib__Sys__data_end" },
		{ "camlStdlib__Sys.data_begin", "camlStdlib__Sys.data_end" },
		{ "camlStdlib__sys__data_begin", "camlStdlib__sys__data_end" },
	};
	const struct elf_symbol *b = NULL, *e = NULL;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !(b && e); i++) {
		b = elf_image_symbol(img, names[i][0]);
		e = elf_image_symbol(img, names[i][1]);
	}

	if (b && e && e->vaddr > b->vaddr) {
		const unsigned char *p = elf_image_data(img, b->vaddr, e->vaddr - b->vaddr);

		if (p && elf_image_scan_version(p, e->vaddr - b->vaddr, buf, buflen) == 0)
			return 0;
	}
	return -ENOENT;
}

int elf_image_first_load(const struct elf_image *img, uint64_t *file_off, uint64_t *vaddr)
{
	if (!img->nsegs)
		return -ENOENT;
	/* segs[] keeps the PT_LOAD program-header order, ascending by vaddr
	 * (the ELF spec requires it) */
	*file_off = img->segs[0].offset & ~0xfffULL;
	*vaddr = img->segs[0].vaddr & ~0xfffULL;
	return 0;
}

int elf_image_build_id(const struct elf_image *img, char *buf, size_t buflen)
{
	Elf_Scn *scn = NULL;

	while ((scn = elf_nextscn(img->elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *d;
		GElf_Nhdr nh;
		size_t off = 0, noff, doff;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE || !(d = elf_getdata(scn, NULL)))
			continue;
		while ((off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
			const unsigned char *id = (const unsigned char *)d->d_buf + doff;

			if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != 4 ||
			    memcmp((const char *)d->d_buf + noff, "GNU", 4) || !nh.n_descsz)
				continue;
			if (buflen < 2 * (size_t)nh.n_descsz + 1)
				return -ENOSPC;
			for (size_t i = 0; i < nh.n_descsz; i++)
				snprintf(buf + 2 * i, 3, "%02x", id[i]);
			return (int)nh.n_descsz;
		}
	}
	return -ENOENT;
}

int elf_image_tls_offset(const struct elf_image *img, const char *name, int64_t *off)
{
	const struct elf_symbol *sym = elf_image_symbol(img, name);
	uint64_t align, firstbyte, blocksize;

	if (!img->has_tls || !sym || sym->type != STT_TLS)
		return -ENOENT;
	align = img->tls_align;
	if (align & (align - 1))
		return -ENOENT;
	/* glibc elf/dl-tls.c _dl_determine_tlsoffset, TLS_TCB_AT_TP: the
	 * first module's block ends at the thread pointer, aligned */
	firstbyte = (0 - img->tls_vaddr) & (align - 1);
	blocksize = (img->tls_memsz - firstbyte + align - 1) / align * align + firstbyte;
	*off = -(int64_t)blocksize + (int64_t)sym->vaddr;
	return 0;
}
