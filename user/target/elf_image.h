/* elf_image.h -- read what camlheap needs from an x86-64 ELF executable:
 * symbols (.symtab, else .dynsym), PT_LOAD segments, bytes at link-time
 * virtual addresses, and R_X86_64_RELATIVE relocations for PIE pointers.
 *
 * Addresses called "vaddr" are link-time virtual addresses (as in the ELF
 * headers); the runtime address of a mapped vaddr is vaddr + load bias.
 * Built on libelf (elfutils).  The file is mapped read-only for the life of
 * the image.
 */
#ifndef CH_ELF_IMAGE_H
#define CH_ELF_IMAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct elf_symbol {
	const char *name;  /* owned by the image */
	uint64_t vaddr;    /* st_value */
	uint64_t size;     /* st_size, bytes */
	uint8_t type;      /* STT_* */
	uint8_t bind;      /* STB_* */
	bool dynamic;      /* came from .dynsym */
};

struct elf_image;

/* Open and index `path`.  On success *out owns the image.
 * Returns 0, or a negative errno: -ENOENT/-EACCES (open), -ENOEXEC (not an
 * ELF file, not x86-64, or no PT_LOAD segment), -ENOMEM. */
int elf_image_open(const char *path, struct elf_image **out);
void elf_image_close(struct elf_image *img);

const char *elf_image_path(const struct elf_image *img);
bool elf_image_is_pie(const struct elf_image *img);          /* ET_DYN */
bool elf_image_has_symtab(const struct elf_image *img);      /* .symtab present (not stripped) */
bool elf_image_has_dwarf(const struct elf_image *img);       /* a .debug_info or .debug_line section */
/* Number of symbols indexed (both tables, names de-duplicated). */
size_t elf_image_symbol_count(const struct elf_image *img);

/* Symbol by exact name; .symtab wins over .dynsym.  NULL if absent. */
const struct elf_symbol *elf_image_symbol(const struct elf_image *img, const char *name);

/* The function symbol (STT_FUNC, or STT_NOTYPE in an executable segment)
 * whose [vaddr, vaddr+size) contains `vaddr`, else the nearest one below it
 * in the same executable segment.  Among aliases at one address it prefers
 * a real function name over OCaml's `camlX__code_begin`/`code_end` markers
 * and over local labels.  NULL if none. */
const struct elf_symbol *elf_image_function_at(const struct elf_image *img, uint64_t vaddr);

/* Iterate over all indexed symbols (for tests and the frametable loader).
 * Returns the i-th symbol, NULL when i >= count. */
const struct elf_symbol *elf_image_symbol_nth(const struct elf_image *img, size_t i);

/* File offset of `vaddr` through the PT_LOAD segment that contains it
 * (vaddr - p_vaddr + p_offset).  Uprobes take file offsets, not vaddrs
 * (kernel/events/uprobes.c uprobe_register(inode, offset, ...)).  Returns 0,
 * or -ERANGE if no segment maps it from the file. */
int elf_image_vaddr_to_offset(const struct elf_image *img, uint64_t vaddr, uint64_t *file_off);

/* Page-aligned file offset and vaddr of the first PT_LOAD segment: the
 * mapping of that file offset in /proc/PID/maps starts at vaddr + bias.
 * Returns 0 or -ENOENT. */
int elf_image_first_load(const struct elf_image *img, uint64_t *file_off, uint64_t *vaddr);

/* True if `vaddr` lies in an executable PT_LOAD segment. */
bool elf_image_is_code(const struct elf_image *img, uint64_t vaddr);

/* Copy `len` bytes at `vaddr` out of the file image; bytes past p_filesz
 * (.bss) read as zero.  Relocations are NOT applied.  Returns 0 or -ERANGE. */
int elf_image_read(const struct elf_image *img, uint64_t vaddr, void *buf, size_t len);

/* Pointer-sized value at `vaddr` as the dynamic loader would leave it
 * relative to a zero load bias: the addend of an R_X86_64_RELATIVE (or the
 * symbol value + addend of R_X86_64_64/GLOB_DAT) relocation at that address
 * if there is one (lld leaves the in-place bytes zero), else the bytes in
 * the file.  Returns 0 or -ERANGE. */
int elf_image_read_ptr(const struct elf_image *img, uint64_t vaddr, uint64_t *out);

/* Direct pointer to `len` bytes at `vaddr` inside the mapped file, or NULL
 * if they are not all backed by file bytes in one segment. */
const void *elf_image_data(const struct elf_image *img, uint64_t vaddr, size_t len);

/* The GNU build id (the NT_GNU_BUILD_ID note, ELF gABI / binutils) as
 * lower-case hex into buf.  Returns its length in bytes (>= 1), or
 * -ENOENT if the file has none, -ENOSPC if buf is too small. */
int elf_image_build_id(const struct elf_image *img, char *buf, size_t buflen);

/* Sys.ocaml_version of an OCaml executable: the NUL-delimited "4.13.1"
 * style string ("4.14.2+dev", "5.3.0") in the data of Stdlib__Sys, between
 * camlStdlib__Sys__data_begin and __data_end (5.x: camlStdlib__Sys.data_begin;
 * 4.12 and older: camlStdlib__sys__data_begin).  Copies it into buf.  Returns
 * 0, or -ENOENT when the program does not link Stdlib.Sys (or lacks those
 * symbols): strings elsewhere are never trusted. */
int elf_image_find_ocaml_version(const struct elf_image *img, char *buf, size_t buflen);

/* Where the thread-local variable `name` (an STT_TLS symbol of this
 * executable, e.g. OCaml 5's `caml_state`) lives relative to a thread's
 * thread pointer (%fs base on x86-64): *off bytes, negative.  Static TLS of
 * the main executable, x86-64 variant II (TLS block just below the thread
 * pointer; "ELF Handling For Thread-Local Storage", Drepper, §3.4.6; glibc
 * elf/dl-tls.c _dl_determine_tlsoffset).  Returns 0, or -ENOENT (no PT_TLS
 * segment, or no such TLS symbol). */
int elf_image_tls_offset(const struct elf_image *img, const char *name, int64_t *off);

#endif
