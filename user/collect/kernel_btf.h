/* kernel_btf.h -- the few kernel types a BPF object's CO-RE relocations
 * read, cut out of the running kernel's BTF.
 *
 * libbpf resolves an object's CO-RE relocations against the kernel's whole
 * BTF (/sys/kernel/btf/vmlinux, 5.5 MB on Debian's 6.x kernels), which every
 * load reads and parses: 40 ms of CPU on a VM where a fresh page costs
 * ~10 us, a third of a service worker's attach.  Given a BTF holding only
 * the structs, members and member types the relocations name, at the
 * kernel's offsets and sizes (bpf_object_open_opts.btf_custom_path), it
 * resolves them to the same offsets and never reads the kernel's (libbpf
 * 1.1 src/libbpf.c obj_needs_vmlinux_btf: no program of a BTF-typed kind
 * and a custom path).  `bpftool gen min_core_btf` does the same from files
 * ahead of time; the service does it once at start for all its workers.
 */
#ifndef CH_KERNEL_BTF_H
#define CH_KERNEL_BTF_H

#include <stddef.h>

struct btf;

/* The part of `vmlinux` (the running kernel's BTF, btf__load_vmlinux_btf)
 * that the CO-RE relocations of a BPF object read, into *out (btf__free).
 * `elf`/`size`: the object's ELF image, bytes (a bpftool skeleton's
 * X__elf_bytes): its .BTF and the relocations of its .BTF.ext (format:
 * Linux Documentation/bpf/btf.rst "BTF.ext section", struct bpf_core_relo
 * of <linux/bpf.h>).
 *
 * For every field relocation (BPF_CORE_FIELD_BYTE_OFFSET .. _RSHIFT_U64)
 * the named path of its access string (libbpf relo_core.c
 * bpf_core_parse_spec: anonymous members skipped, array indices kept) is
 * followed in the kernel's types the way libbpf matches it
 * (bpf_core_match_member: by member name, through anonymous members); each
 * struct or union on the way is kept with its name and size and only the
 * members reached, at their bit offsets (through anonymous members:
 * flattened), each of a type of the kernel's kind, size and encoding
 * (pointers as void *, which libbpf's field compatibility accepts).  A
 * path the kernel lacks is left out, as libbpf would find no candidate for
 * it either; a root type with two candidates in the kernel is refused.
 * BPF_CORE_TYPE_ID_LOCAL needs nothing; any other kind is refused.
 *
 * Returns the number of relocations followed (>= 0), or -EINVAL (no .BTF
 * or .BTF.ext, a malformed one, a refused relocation) or -ENOMEM, with
 * `err` set. */
int kernel_btf_cut(const void *elf, size_t size, const struct btf *vmlinux, struct btf **out, char *err,
		   size_t errlen);

/* kernel_btf_cut of the running kernel's BTF for the object `elf`/`size`,
 * written to a sealed memfd (close-on-exec): its path is
 * /proc/self/fd/<fd>, for btf_custom_path.  Returns the fd, or a negative
 * errno with `err` set (the kernel has no BTF, or kernel_btf_cut's). */
int kernel_btf_memfd(const void *elf, size_t size, char *err, size_t errlen);

#endif
