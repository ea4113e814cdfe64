/* memtrace_internal.h -- what the memtrace writer (memtrace_write.c) and
 * reader (memtrace_read.c) share besides memtrace.h: the event header's time
 * field and the move-to-front tables of location_codec.ml (memtrace.c),
 * which each side keeps in step with the other's.  Only for
 * output/memtrace*.c.
 */
#ifndef CH_MEMTRACE_INTERNAL_H
#define CH_MEMTRACE_INTERNAL_H

#define MTF_LEN 31
#define MTF_NOT_FOUND 31
#define EV_TIME_BITS 25
#define EV_TIME_MASK 0x1ffffffu

/* ---- move-to-front tables (location_codec.ml Mtf_table) -------------- */

struct mtf_defs {
	char *name[MTF_LEN];          /* NULL = Empty */
};

struct mtf_files {
	char *name[MTF_LEN];
	struct mtf_defs *defs[MTF_LEN];
};

/* Move filename entry `i` (0..MTF_LEN-1, a filled one) and its defname
 * table to the front, the others down by one. */
void mtf_files_swap(struct mtf_files *t, int i);

/* Push `name` and its defname table `defs` (both malloc'd, owned by the
 * table from now on) at the front; the last entry falls off and is freed,
 * its defs too unless they are `defs` itself (the reader reuses them). */
void mtf_files_push(struct mtf_files *t, char *name, struct mtf_defs *defs);

/* The same two for a defname table: `i` as above, `name` malloc'd. */
void mtf_defs_swap(struct mtf_defs *t, int i);
void mtf_defs_push(struct mtf_defs *t, char *name);

/* Free every entry and defname table of `t` and empty it (reusable). */
void mtf_files_clear(struct mtf_files *t);

#endif
