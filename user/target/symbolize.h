/* symbolize.h -- return address -> source frames, for one executable.
 *
 * Sources, best first (README *How it works*):
 *   1. the OCaml frame table's own debuginfo (frametable.h), which has the
 *      definition name ("Chain.h"), line, characters and the inline chain;
 *      when DWARF is also present its line table supplies the full path
 *      (comp_dir + file) for the same file name;
 *   2. DWARF through elfutils libdwfl (C code and OCaml code alike: function,
 *      full path, line, inlined frames);
 *   3. the ELF symbol (.symtab, else .dynsym) demangled to Module.function.
 * Results are cached per address for the life of the symbolizer.
 */
#ifndef CH_SYMBOLIZE_H
#define CH_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#include "target/elf_image.h"
#include "target/frametable.h"

struct sym_frame {
	const char *function;  /* "Stdlib.List.map", "caml_make_vect", or "0x1234" (owned by the symbolizer) */
	const char *file;      /* full path when known, else the recorded file name, else NULL */
	int line;              /* 0 when unknown */
	int column;            /* start character, 0 when unknown */
	int end_column;        /* end character (frame-table debuginfo), 0 when unknown */
	int start_line;        /* line of the function's first instruction (DWARF line table; for
				* OCaml 4.x, the first line of its body), outermost frame only;
				* 0 when unknown */
	int inlined;           /* this frame was inlined into the next one */
};

enum sym_source {
	SYM_SRC_NONE = 0,
	SYM_SRC_SYMBOL = 1,     /* ELF symbol only */
	SYM_SRC_FRAMETABLE = 2, /* frame-table debuginfo */
	SYM_SRC_DWARF = 3,      /* DWARF (possibly merged with the frame table) */
};

struct symbolizer;

/* Create a symbolizer for the executable `img` (borrowed, must outlive it)
 * with its parsed frame table `ft` (may be NULL).  Opens DWARF through
 * libdwfl when the file has it (or a debuglink file is installed).
 * Returns 0, or -ENOMEM. */
int symbolizer_open(const struct elf_image *img, const struct frametable *ft, struct symbolizer **out);
void symbolizer_close(struct symbolizer *s);

/* Frames for the link-time return address `retaddr`, innermost first (an
 * inline chain gives several; the last one is the real function).
 * `alloc_idx` selects the Comballoc sub-allocation's debuginfo for a leaf
 * allocation frame (0 otherwise).  Fills at most `max` entries of `out`
 * (pointers stay valid until symbolizer_close) and returns how many (>= 1:
 * an unknown address gives one frame named "0x<hex>").  *src, if not NULL,
 * receives the source used. */
int symbolizer_lookup(struct symbolizer *s, uint64_t retaddr, unsigned alloc_idx, struct sym_frame *out,
		      int max, enum sym_source *src);

/* Demangle an OCaml native symbol into the frame table's debuginfo shape
 * (the compilation unit as named, "." and the definition):
 * "camlStdlib__List__map_236" -> "Stdlib__List.map", a dune library's
 * "camlLib__Lexer____ocaml_lex_main_12" -> "Lib__Lexer.__ocaml_lex_main",
 * "$xx" hex escapes decoded ("camlStdlib__$40_123" -> "Stdlib.@"); 5.x
 * "camlT2.f_322" -> "T2.f".  Source: 4.14 asmcomp/compilenv.ml make_symbol
 * (unit "__" name "_" stamp), 5.1 middle_end/compilenv.ml (unit "." name).
 * Names that are not OCaml symbols are copied unchanged.  Writes a
 * NUL-terminated string into buf (truncated to buflen). */
void symbolize_demangle(const char *sym, char *buf, size_t buflen);

#endif
