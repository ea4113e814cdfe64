/* symbolize.c -- return addresses to (function, file, line, inline chain).
 *
 * Three sources, best first (README *How it works*): the OCaml frame table's
 * debuginfo, DWARF through elfutils libdwfl (as heaptrack and perf do), and
 * the ELF symbol demangled.  Everything is keyed by link-time vaddr; the
 * caller subtracts the load bias of the process first.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/symbolize.h"

/* Longest inline chain kept per address (OCaml's are a handful deep). */
#define SYMBOLIZE_MAX_FRAMES 64

struct symbolizer_entry {
	uint64_t retaddr;
	unsigned alloc_idx;
	bool used;
	enum sym_source src;
	int nframes;
	struct sym_frame *frames;
};

struct symbolizer {
	const struct elf_image *img;
	const struct frametable *ft;

	Dwfl *dwfl;          /* NULL when there is no DWARF */
	Dwfl_Module *mod;
	uint64_t dwfl_bias;  /* link-time vaddr + dwfl_bias = libdwfl address */

	struct symbolizer_entry *cache; /* open addressing, power-of-two size */
	size_t cache_mask;
	size_t cache_used;

	char **strings;      /* interned strings, open addressing */
	size_t strings_mask;
	size_t strings_used;
};

static char *symbolize_debuginfo_path;

static const Dwfl_Callbacks symbolizer_callbacks = {
	.find_elf = dwfl_build_id_find_elf,
	/* Also follows .gnu_debuglink and /usr/lib/debug/.build-id, so a
	 * stripped distribution binary gets its -dbgsym package's DWARF. */
	.find_debuginfo = dwfl_standard_find_debuginfo,
	.section_address = dwfl_offline_section_address,
	.debuginfo_path = &symbolize_debuginfo_path,
};

static uint64_t symbolize_str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

/* Intern `s`: the returned copy lives until symbolizer_close. */
static const char *symbolizer_intern(struct symbolizer *s, const char *str)
{
	size_t i;

	if (!str)
		return NULL;
	if (2 * (s->strings_used + 1) > s->strings_mask + 1) {
		size_t ncap = 2 * (s->strings_mask + 1);
		char **n = calloc(ncap, sizeof(*n));

		if (!n)
			return NULL;
		for (size_t j = 0; j <= s->strings_mask; j++) {
			if (!s->strings[j])
				continue;
			for (i = symbolize_str_hash(s->strings[j]) & (ncap - 1); n[i]; i = (i + 1) & (ncap - 1))
				;
			n[i] = s->strings[j];
		}
		free(s->strings);
		s->strings = n;
		s->strings_mask = ncap - 1;
	}
	for (i = symbolize_str_hash(str) & s->strings_mask; s->strings[i]; i = (i + 1) & s->strings_mask)
		if (strcmp(s->strings[i], str) == 0)
			return s->strings[i];
	s->strings[i] = strdup(str);
	if (!s->strings[i])
		return NULL;
	s->strings_used++;
	return s->strings[i];
}

static void symbolizer_open_dwarf(struct symbolizer *s)
{
	const char *path = elf_image_path(s->img);
	Dwarf_Addr dbias;
	GElf_Addr ebias;

	s->dwfl = dwfl_begin(&symbolizer_callbacks);
	if (!s->dwfl)
		return;
	dwfl_report_begin(s->dwfl);
	s->mod = dwfl_report_offline(s->dwfl, path, path, -1);
	if (dwfl_report_end(s->dwfl, NULL, NULL) != 0 || !s->mod)
		goto none;
	/* Offline reporting may place an ET_DYN file away from 0; the ELF
	 * bias converts our link-time vaddrs to libdwfl's addresses. */
	if (!dwfl_module_getelf(s->mod, &ebias))
		goto none;
	/* Finds .debug_* in the file itself or through the debuglink. */
	if (!dwfl_module_getdwarf(s->mod, &dbias))
		goto none;
	s->dwfl_bias = ebias;
	return;
none:
	dwfl_end(s->dwfl);
	s->dwfl = NULL;
	s->mod = NULL;
}

int symbolizer_open(const struct elf_image *img, const struct frametable *ft, struct symbolizer **out)
{
	struct symbolizer *s = calloc(1, sizeof(*s));

	*out = NULL;
	if (!s)
		return -ENOMEM;
	s->img = img;
	s->ft = ft;
	s->cache_mask = 1023;
	s->cache = calloc(s->cache_mask + 1, sizeof(*s->cache));
	s->strings_mask = 1023;
	s->strings = calloc(s->strings_mask + 1, sizeof(*s->strings));
	if (!s->cache || !s->strings) {
		symbolizer_close(s);
		return -ENOMEM;
	}
	symbolizer_open_dwarf(s);
	*out = s;
	return 0;
}

void symbolizer_close(struct symbolizer *s)
{
	if (!s)
		return;
	if (s->dwfl)
		dwfl_end(s->dwfl);
	if (s->cache)
		for (size_t i = 0; i <= s->cache_mask; i++)
			free(s->cache[i].frames);
	free(s->cache);
	if (s->strings)
		for (size_t i = 0; i <= s->strings_mask; i++)
			free(s->strings[i]);
	free(s->strings);
	free(s);
}

/* Copy p[from, to) into buf at *o, "$xx" hex escapes decoded. */
static void demangle_copy(const char *p, size_t from, size_t to, char *buf, size_t buflen, size_t *o)
{
	for (size_t i = from; i < to && *o + 1 < buflen;) {
		if (p[i] == '$' && i + 2 < to && isxdigit((unsigned char)p[i + 1]) && isxdigit((unsigned char)p[i + 2])) {
			char hex[3] = { p[i + 1], p[i + 2], 0 };

			buf[(*o)++] = (char)strtol(hex, NULL, 16);
			i += 3;
		} else {
			buf[(*o)++] = p[i++];
		}
	}
}

void symbolize_demangle(const char *sym, char *buf, size_t buflen)
{
	size_t n, end, k, o = 0, sep = 0;
	const char *p;

	if (!buflen)
		return;
	/* OCaml symbols are "caml" + a capitalised compilation unit
	 * (4.x asmcomp/compilenv.ml make_symbol: unit "__" name "_" stamp,
	 * other characters as "$xx"; 5.1+ middle_end/compilenv.ml:93-99 uses
	 * "." after the unit).  "caml_*" are C runtime functions. */
	if (strncmp(sym, "caml", 4) != 0 || !isupper((unsigned char)sym[4])) {
		snprintf(buf, buflen, "%s", sym);
		return;
	}
	p = sym + 4;
	n = strlen(p);
	/* Drop the "_<stamp>" that makes local names unique. */
	for (k = n; k > 0 && isdigit((unsigned char)p[k - 1]); k--)
		;
	end = (k < n && k > 1 && p[k - 1] == '_') ? k - 1 : n;
	/* 4.x: the unit ends at the last run of two or more underscores with
	 * something on both sides; the unit keeps its own "__" (a dune
	 * library's "Lib__Mod", as the frame table's debuginfo names it) and
	 * the name keeps the underscores beyond the separator's two
	 * ("Lexer____ocaml_lex_main" is Lexer.__ocaml_lex_main).  5.x puts a
	 * "." there itself. */
	if (!memchr(p, '.', end))
		for (size_t i = 1; i + 2 < end; i++)
			if (p[i] == '_' && p[i + 1] == '_' && p[i - 1] != '_') {
				size_t j = i;

				while (j < end && p[j] == '_')
					j++;
				if (j < end)
					sep = i;
				i = j;
			}
	if (sep) {
		demangle_copy(p, 0, sep, buf, buflen, &o);
		if (o + 1 < buflen)
			buf[o++] = '.';
		demangle_copy(p, sep + 2, end, buf, buflen, &o);
	} else {
		demangle_copy(p, 0, end, buf, buflen, &o);
	}
	buf[o] = '\0';
}

static const char *symbolize_basename(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* Whether the DWARF file `full` is the compiler's recorded file `rec`:
 * same basename, and when `rec` has directories ("utils/misc.ml") they
 * must end `full` too. */
static bool symbolize_same_file(const char *full, const char *rec)
{
	size_t nf = strlen(full), nr = strlen(rec);

	if (strcmp(symbolize_basename(full), symbolize_basename(rec)) != 0)
		return false;
	if (!strchr(rec, '/') || strcmp(full, rec) == 0)
		return true;
	return nf > nr && full[nf - nr - 1] == '/' && strcmp(full + nf - nr, rec) == 0;
}

/* `file` made absolute with the CU's comp_dir when the line table only
 * has a relative name.  libdw already joins a file with its directory
 * entry, which for DWARF 4 directory 0 is comp_dir itself (gas writes what
 * `.file` said, e.g. "chain.ml", under DW_AT_comp_dir); join only what it
 * left relative, and never twice (a relative comp_dir such as OCaml's
 * "./stdlib" comes back already prefixed). */
static const char *symbolizer_full_path(struct symbolizer *s, const char *file, const char *comp_dir)
{
	size_t nc = comp_dir ? strlen(comp_dir) : 0;
	char *joined;
	const char *r;

	if (!file)
		return NULL;
	if (file[0] == '/' || !nc || (strncmp(file, comp_dir, nc) == 0 && file[nc] == '/'))
		return symbolizer_intern(s, file);
	if (asprintf(&joined, "%s/%s", comp_dir, file) < 0)
		return NULL;
	r = symbolizer_intern(s, joined);
	free(joined);
	return r;
}

static const char *symbolize_cu_attr(Dwarf_Die *cudie, unsigned name)
{
	Dwarf_Attribute attr;

	if (!cudie || !dwarf_attr(cudie, name, &attr))
		return NULL;
	return dwarf_formstring(&attr);
}

/* Path for a file of the line table of `cudie` (DWARF-only frames).  An
 * OCaml CU's line table is made by gas from the compiler's `.file`
 * directives, and names code inlined from other units as those units were
 * compiled ("string.ml"), joined to this CU's comp_dir where it is not:
 * such a name is kept as recorded unless the joined path exists.  C
 * compilers record real directories, which are kept as they are. */
static const char *symbolizer_dwarf_path(struct symbolizer *s, Dwarf_Die *cudie, const char *file,
					 const char *comp_dir)
{
	const char *producer = symbolize_cu_attr(cudie, DW_AT_producer);
	const char *cu_name = symbolize_cu_attr(cudie, DW_AT_name);
	const char *full = symbolizer_full_path(s, file, comp_dir);
	size_t nc = comp_dir ? strlen(comp_dir) : 0;

	if (!full || !producer || strncmp(producer, "GNU AS", 6) != 0)
		return full;
	if ((cu_name && symbolize_same_file(full, cu_name)) || access(full, F_OK) == 0)
		return full;
	if (nc && strncmp(full, comp_dir, nc) == 0 && full[nc] == '/')
		return symbolizer_intern(s, full + nc + 1);
	return full;
}

/* Full path for the frame-table file name `rec`: the line table's file at
 * this pc, else any file of the same CU (an inlined function's file).
 * OCaml records the file of code inlined from another unit as that unit
 * saw it ("string.ml" for the stdlib), and gas puts it under this CU's
 * comp_dir, where it usually is not.  So a DWARF path is taken for the
 * CU's own source, or when it exists; otherwise the recorded name stays. */
static const char *symbolizer_ocaml_path(struct symbolizer *s, Dwarf_Die *cudie, const char *line_file,
					 const char *comp_dir, const char *rec, bool *from_dwarf)
{
	const char *cu_name = symbolize_cu_attr(cudie, DW_AT_name);
	const char *cand = NULL, *full;
	Dwarf_Files *files;
	size_t nfiles;

	if (line_file && symbolize_same_file(line_file, rec)) {
		cand = line_file;
	} else if (cudie && dwarf_getsrcfiles(cudie, &files, &nfiles) == 0) {
		for (size_t i = 0; i < nfiles && !cand; i++) {
			const char *f = dwarf_filesrc(files, i, NULL, NULL);

			if (f && symbolize_same_file(f, rec))
				cand = f;
		}
	}
	if (!cand)
		return symbolizer_intern(s, rec);
	full = symbolizer_full_path(s, cand, comp_dir);
	if (full && ((cu_name && symbolize_same_file(cu_name, rec)) || access(full, F_OK) == 0)) {
		*from_dwarf = true;
		return full;
	}
	return symbolizer_intern(s, rec);
}

/* Whether the debuginfo name `name` is of the unit d[0, du) (a demangled
 * symbol's), or of the same unit without a dune library's "Lib__" prefix
 * (coccinelle's debuginfo says "Pattern_c" where its symbols say
 * "Coccinelle_modules__Pattern_c"). */
static bool same_unit(const char *d, size_t du, const char *name)
{
	size_t nu = strcspn(name, ".");

	if (nu == du)
		return !strncmp(name, d, du);
	return du > nu + 2 && !strncmp(d + du - nu, name, nu) && d[du - nu - 1] == '_' && d[du - nu - 2] == '_';
}

/* One name per function: a return address without debuginfo of its own
 * (a frame the compiler recorded none for) in a function that has some
 * elsewhere takes the function's debuginfo name (the outermost location of
 * any of its descriptors: "DoOut.Make.alloc_buff", where the symbol gives
 * "DoOut.alloc_buff"), so that one function never shows under two names.
 * NULL if no descriptor inside `sym` has debuginfo. */
static const char *symbolizer_debuginfo_name(struct symbolizer *s, const struct elf_symbol *sym)
{
	struct ocaml_location locs[SYMBOLIZE_MAX_FRAMES];
	size_t lo = 0, hi, unit;
	char d[512];

	if (!s->ft || !sym->size)
		return NULL;
	/* only debuginfo of the function's own unit: code inlined from
	 * another one (Stdlib.print_string in a function compiled without
	 * -g) carries its own chain, without the function's frame */
	symbolize_demangle(sym->name, d, sizeof(d));
	unit = strcspn(d, ".");
	hi = s->ft->count;
	while (lo < hi) { /* the first descriptor past the symbol's start */
		size_t mid = lo + (hi - lo) / 2;

		if (s->ft->descrs[mid].retaddr <= sym->vaddr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < s->ft->count && s->ft->descrs[i].retaddr <= sym->vaddr + sym->size; i++) {
		const struct frame_descr *fd = &s->ft->descrs[i];
		int n;

		if (!fd->has_debuginfo)
			continue;
		n = frametable_locations(s->ft, fd, 0, locs, SYMBOLIZE_MAX_FRAMES);
		if (n > 0 && locs[n - 1].name && same_unit(d, unit, locs[n - 1].name))
			return symbolizer_intern(s, locs[n - 1].name);
	}
	return NULL;
}

static const char *symbolizer_symbol_name(struct symbolizer *s, uint64_t retaddr)
{
	const struct elf_symbol *sym;
	const char *name;
	char buf[512];

	/* retaddr - 1 is inside the call: a call that never returns (raise,
	 * bound error) can be the last instruction of its function, and its
	 * return address then belongs to the next function. */
	sym = elf_image_function_at(s->img, retaddr ? retaddr - 1 : 0);
	if (!sym)
		return NULL;
	name = symbolizer_debuginfo_name(s, sym);
	if (name)
		return name;
	symbolize_demangle(sym->name, buf, sizeof(buf));
	return symbolizer_intern(s, buf);
}

static const char *symbolize_die_name(Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name = NULL;

	if (dwarf_attr_integrate(die, DW_AT_name, &attr))
		name = dwarf_formstring(&attr);
	if (!name && dwarf_attr_integrate(die, DW_AT_linkage_name, &attr))
		name = dwarf_formstring(&attr);
	return name;
}

/* Frames from the OCaml frame table; 0 when it has no debuginfo here. */
static int symbolizer_from_frametable(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx,
				      Dwarf_Die *cudie, const char *line_file, const char *comp_dir,
				      struct sym_frame *frames, enum sym_source *src)
{
	struct ocaml_location locs[SYMBOLIZE_MAX_FRAMES];
	const struct frame_descr *d;
	bool from_dwarf = false;
	int n;

	if (!s->ft || !(d = frametable_find(s->ft, retaddr)) || !d->has_debuginfo)
		return 0;
	n = frametable_locations(s->ft, d, alloc_idx, locs, SYMBOLIZE_MAX_FRAMES);
	if (n <= 0)
		return 0;
	for (int i = 0; i < n; i++) {
		frames[i] = (struct sym_frame){
			.function = symbolizer_intern(s, locs[i].name),
			.file = symbolizer_ocaml_path(s, cudie, line_file, comp_dir, locs[i].file, &from_dwarf),
			.line = locs[i].line,
			.column = locs[i].start_chr,
			.end_column = locs[i].end_chr,
			.inlined = i + 1 < n,
		};
	}
	*src = from_dwarf ? SYM_SRC_DWARF : SYM_SRC_FRAMETABLE;
	return n;
}

/* Frames from DWARF: the line table for the innermost location, and the
 * DW_TAG_inlined_subroutine scopes (with their call_file/call_line for the
 * caller's location) up to the DW_TAG_subprogram, as eu-addr2line -i does.
 * OCaml 4.x CUs are made by gas from the .file/.loc directives: gas 2.40
 * adds one DW_TAG_subprogram per `.type @function` symbol, named by the
 * mangled symbol (hence the demangling); older ones add none, and the
 * function then comes from the ELF symbol. */
static int symbolizer_from_dwarf(struct symbolizer *s, uint64_t retaddr, Dwarf_Die *cudie, Dwarf_Addr cubias,
				 Dwfl_Line *line, const char *comp_dir, struct sym_frame *frames)
{
	const char *file = NULL;
	int lineno = 0, col = 0, n = 0, nscopes;
	Dwarf_Die *scopes = NULL;
	uint64_t pc = retaddr + s->dwfl_bias - 1;
	Dwarf_Files *files = NULL;
	size_t nfiles = 0;

	if (line) {
		file = dwfl_lineinfo(line, NULL, &lineno, &col, NULL, NULL);
		if (!comp_dir)
			comp_dir = dwfl_line_comp_dir(line);
	}
	if (cudie && dwarf_getsrcfiles(cudie, &files, &nfiles) != 0)
		files = NULL;

	nscopes = cudie ? dwarf_getscopes(cudie, pc - cubias, &scopes) : 0;
	for (int i = 0; i < nscopes && n < SYMBOLIZE_MAX_FRAMES; i++) {
		Dwarf_Die *die = &scopes[i];
		int tag = dwarf_tag(die);
		const char *name;
		char buf[512];
		Dwarf_Attribute attr;
		Dwarf_Word w;

		if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine)
			continue;
		name = symbolize_die_name(die);
		if (name) {
			symbolize_demangle(name, buf, sizeof(buf));
			name = symbolizer_intern(s, buf);
		} else {
			name = symbolizer_symbol_name(s, retaddr);
		}
		frames[n++] = (struct sym_frame){
			.function = name,
			.file = symbolizer_dwarf_path(s, cudie, file, comp_dir),
			.line = lineno,
			.column = col,
			.inlined = tag == DW_TAG_inlined_subroutine,
		};
		if (tag == DW_TAG_subprogram)
			break;
		/* The caller's location is where this body was inlined. */
		file = NULL;
		lineno = col = 0;
		if (files && dwarf_attr(die, DW_AT_call_file, &attr) && dwarf_formudata(&attr, &w) == 0)
			file = dwarf_filesrc(files, w, NULL, NULL);
		if (dwarf_attr(die, DW_AT_call_line, &attr) && dwarf_formudata(&attr, &w) == 0)
			lineno = (int)w;
		if (dwarf_attr(die, DW_AT_call_column, &attr) && dwarf_formudata(&attr, &w) == 0)
			col = (int)w;
	}
	free(scopes);
	if (n && frames[n - 1].inlined) {
		/* Chain without its subprogram (partial DWARF): the real
		 * function is the symbol's. */
		if (n < SYMBOLIZE_MAX_FRAMES)
			frames[n++] = (struct sym_frame){
				.function = symbolizer_symbol_name(s, retaddr),
				.file = symbolizer_dwarf_path(s, cudie, file, comp_dir),
				.line = lineno,
				.column = col,
			};
	}
	if (!n && line)
		frames[n++] = (struct sym_frame){
			.function = symbolizer_symbol_name(s, retaddr),
			.file = symbolizer_dwarf_path(s, cudie, file, comp_dir),
			.line = lineno,
			.column = col,
		};
	return n;
}

/* The line of the function holding `retaddr` at its entry (the line its
 * definition starts on: ocamlopt -g and C compilers put a line-table
 * entry at a function's first instruction), if the line table names the
 * same file as `file`; 0 otherwise. */
static int symbolizer_start_line(struct symbolizer *s, uint64_t retaddr, const char *file)
{
	const struct elf_symbol *sym;
	Dwfl_Line *line;
	const char *lf, *b1, *b2;
	int lineno = 0;

	if (!s->dwfl || !retaddr || !file || !(sym = elf_image_function_at(s->img, retaddr - 1)))
		return 0;
	line = dwfl_module_getsrc(s->mod, sym->vaddr + s->dwfl_bias);
	if (!line || !(lf = dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL)))
		return 0;
	b1 = strrchr(lf, '/');
	b2 = strrchr(file, '/');
	return strcmp(b1 ? b1 + 1 : lf, b2 ? b2 + 1 : file) ? 0 : lineno;
}

static int symbolizer_resolve1(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx, struct sym_frame *frames,
			       enum sym_source *src);

static int symbolizer_resolve(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx, struct sym_frame *frames,
			      enum sym_source *src)
{
	int n = symbolizer_resolve1(s, retaddr, alloc_idx, frames, src);

	/* the outermost frame is the function the code belongs to */
	if (n > 0 && frames[n - 1].line > 0)
		frames[n - 1].start_line = symbolizer_start_line(s, retaddr, frames[n - 1].file);
	return n;
}

static int symbolizer_resolve1(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx, struct sym_frame *frames,
			      enum sym_source *src)
{
	Dwarf_Die *cudie = NULL;
	Dwarf_Addr cubias = 0;
	Dwfl_Line *line = NULL;
	const char *line_file = NULL, *comp_dir = NULL;
	char hex[32];
	int n;

	if (s->dwfl && retaddr) {
		/* Return addresses point after the call; the call itself is
		 * at pc - 1, and may be the last instruction of its line. */
		uint64_t pc = retaddr + s->dwfl_bias - 1;

		cudie = dwfl_module_addrdie(s->mod, pc, &cubias);
		line = dwfl_module_getsrc(s->mod, pc);
		if (line)
			line_file = dwfl_lineinfo(line, NULL, NULL, NULL, NULL, NULL);
		comp_dir = symbolize_cu_attr(cudie, DW_AT_comp_dir);
		if (!comp_dir && line)
			comp_dir = dwfl_line_comp_dir(line);
	}

	n = symbolizer_from_frametable(s, retaddr, alloc_idx, cudie, line_file, comp_dir, frames, src);
	if (n > 0)
		return n;
	if (cudie || line) {
		n = symbolizer_from_dwarf(s, retaddr, cudie, cubias, line, comp_dir, frames);
		if (n > 0 && frames[0].function) {
			*src = SYM_SRC_DWARF;
			return n;
		}
	}
	frames[0] = (struct sym_frame){ .function = symbolizer_symbol_name(s, retaddr) };
	if (frames[0].function) {
		*src = SYM_SRC_SYMBOL;
		return 1;
	}
	snprintf(hex, sizeof(hex), "0x%" PRIx64, retaddr);
	frames[0].function = symbolizer_intern(s, hex);
	*src = SYM_SRC_NONE;
	return frames[0].function ? 1 : -ENOMEM;
}

static size_t symbolize_key_hash(uint64_t retaddr, unsigned alloc_idx)
{
	uint64_t h = (retaddr ^ ((uint64_t)alloc_idx << 56)) * 0x9E3779B97F4A7C15ULL;

	return (size_t)(h ^ (h >> 29));
}

static int symbolizer_cache_grow(struct symbolizer *s)
{
	size_t ncap = 2 * (s->cache_mask + 1);
	struct symbolizer_entry *n = calloc(ncap, sizeof(*n));

	if (!n)
		return -ENOMEM;
	for (size_t j = 0; j <= s->cache_mask; j++) {
		const struct symbolizer_entry *e = &s->cache[j];
		size_t i;

		if (!e->used)
			continue;
		for (i = symbolize_key_hash(e->retaddr, e->alloc_idx) & (ncap - 1); n[i].used; i = (i + 1) & (ncap - 1))
			;
		n[i] = *e;
	}
	free(s->cache);
	s->cache = n;
	s->cache_mask = ncap - 1;
	return 0;
}

int symbolizer_lookup(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx, struct sym_frame *out, int max,
		      enum sym_source *src)
{
	struct sym_frame frames[SYMBOLIZE_MAX_FRAMES];
	struct symbolizer_entry *e;
	enum sym_source source = SYM_SRC_NONE;
	size_t i;
	int n;

	if (!out || max < 1)
		return -EINVAL;
	for (i = symbolize_key_hash(retaddr, alloc_idx) & s->cache_mask; s->cache[i].used;
	     i = (i + 1) & s->cache_mask) {
		e = &s->cache[i];
		if (e->retaddr == retaddr && e->alloc_idx == alloc_idx)
			goto found;
	}

	n = symbolizer_resolve(s, retaddr, alloc_idx, frames, &source);
	if (n < 0)
		return n;
	if (2 * (s->cache_used + 1) > s->cache_mask + 1) {
		if (symbolizer_cache_grow(s))
			return -ENOMEM;
		for (i = symbolize_key_hash(retaddr, alloc_idx) & s->cache_mask; s->cache[i].used;
		     i = (i + 1) & s->cache_mask)
			;
	}
	e = &s->cache[i];
	e->frames = malloc(n * sizeof(*e->frames));
	if (!e->frames)
		return -ENOMEM;
	memcpy(e->frames, frames, n * sizeof(*e->frames));
	e->retaddr = retaddr;
	e->alloc_idx = alloc_idx;
	e->nframes = n;
	e->src = source;
	e->used = true;
	s->cache_used++;
found:
	n = e->nframes < max ? e->nframes : max;
	memcpy(out, e->frames, n * sizeof(*out));
	if (src)
		*src = e->src;
	return n;
}
