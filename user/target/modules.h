/* modules.h -- the OCaml code mapped in a target process: its executable
 * and the Dynlink plugins (.cmxs) it loaded, each with where it is mapped
 * (load bias, address ranges), its frame table and, on demand, its
 * symbolizer.  Turns runtime return addresses into source frames.
 */
#ifndef CH_MODULES_H
#define CH_MODULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target/elf_image.h"
#include "target/frametable.h"
#include "target/symbolize.h"

struct module {
	char *path;                /* as in /proc/PID/maps */
	struct elf_image *img;
	struct frametable *ft;
	struct symbolizer *sym;    /* opened at the first lookup */
	uint64_t bias;             /* runtime address - link-time vaddr */
	uint64_t dev, ino;         /* identity of the mapped file */
	bool is_exe;
};

struct module_range {
	uint64_t start, end;       /* runtime [start, end) */
	size_t module;             /* index into modules.v */
};

struct modules {
	struct module *v;
	size_t n;
	struct module_range *ranges; /* every mapping of every module, sorted by start */
	size_t nranges;
	unsigned unreadable;         /* files the last scan could not open (no fds / memory) */
	bool dbg52;                  /* plugins' debuginfo in OCaml 5.2+'s encoding (their host's runtime) */
	/* A recording read back (recording.h): frames come from its location
	 * records instead of mapped files; modules_lookup calls this. */
	int (*recorded_lookup)(void *ctx, uint64_t pc, unsigned alloc_idx, struct sym_frame *out, int max);
	void *recorded_ctx;
};

/* Register the executable (takes ownership of img and ft) mapped in `pid`
 * with load bias `bias`, recording its mappings.  Returns 0 or -errno. */
int modules_add_exe(struct modules *ms, pid_t pid, struct elf_image *img, struct frametable *ft, uint64_t bias);

/* Read /proc/PID/maps and add every mapped shared object not seen before
 * that carries OCaml frame tables (a .cmxs plugin).  For each new module,
 * calls fn(ctx, module) so the caller can load its descriptors into the
 * unwinder.  Returns the number of new modules; -EAGAIN if a file could not
 * be read for want of descriptors or memory (scan again later: nothing was
 * marked as seen); -ESRCH once the process is gone. */
int modules_scan(struct modules *ms, pid_t pid, void (*fn)(void *ctx, const struct module *m), void *ctx);

/* Module whose mapping contains the runtime address `pc`, or NULL. */
const struct module *modules_find(const struct modules *ms, uint64_t pc);

/* Frames for the runtime return address `pc` (innermost first, as
 * symbolizer_lookup), resolved in the module that maps it; an address in
 * no known module gives one frame "0x<hex>".  Returns the count (>= 1). */
int modules_lookup(struct modules *ms, uint64_t pc, unsigned alloc_idx, struct sym_frame *out, int max);

void modules_free(struct modules *ms);

#endif
