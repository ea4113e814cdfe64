/* pprof.h -- write a recording as a pprof profile (proto/profile.proto,
 * gzip-compressed), the heap-profile convention `go tool pprof`, Pyroscope,
 * Parca and Grafana read.
 */
#ifndef CH_PPROF_H
#define CH_PPROF_H

#include <stdint.h>
#include <stdio.h>

#include "target/modules.h"
#include "profile/profile.h"

struct pprof_meta {
	int64_t time_nanos;      /* recording start, ns since the Unix epoch */
	int64_t duration_nanos;  /* recording length, ns */
	const char *comment;     /* one free-form line (target, rate, executor), or NULL */
	int census;              /* inuse_* and unreclaimed_* values are meaningful (blocks were followed) */
	const char *exe_path;    /* the executable's real path (its module may be opened through /proc) */
	const char *build_id;    /* hex GNU build id when `mods` has no module open (a recording read back) */
	const char *default_type;/* default_sample_type, NULL: inuse_space with the census, else alloc_space */
};

/* Write `p` as a gzip-compressed pprof Profile to `out`.  Sample types, in
 * order: alloc_objects/count, alloc_space/bytes, and with the census
 * inuse_objects/count, inuse_space/bytes (Go's meaning: as of the last
 * completed major cycle, the blocks that entered the major heap before it
 * began and were not found dead by it; pprof.c settled_by_site) and
 * unreclaimed_objects/count, unreclaimed_space/bytes (every block not yet
 * seen dead now, garbage not yet collected included: the report's "live"),
 * all already scaled (unsampled): bytes = samples /
 * lambda * 8, objects = sum over sampled blocks of 1/(1-(1-lambda)^words)
 * (profile_object_weight); a site with bytes > 0 has at least one object.  One
 * Sample per allocation site (location ids innermost first, a `kind`
 * label; a stack whose walk ended early gets an outermost frame
 * "[stack walk ended: <why>]"), one Location per distinct return address (and Comballoc index at
 * the leaf) with its inline chain as lines, one Function per (name, file),
 * one Mapping per module (executable first) with its GNU build id (a
 * recording read back, whose `mods` has none: one Mapping for the
 * executable with m->build_id).
 * period_type space/bytes, period = 8 / lambda.  Returns 0 or -errno
 * (-ENOMEM, -EIO). */
int pprof_write(FILE *out, const struct profile *p, struct modules *mods, const struct pprof_meta *m);

#endif
