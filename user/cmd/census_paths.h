/* census_paths.h -- `camlheap census -p PID --retainers` (sampled): at the
 * census's end, the target stopped once more (heap/freeze.h), its heap
 * traced from the roots (heap/trace4.h) and, for every live sampled block
 * the kernel follows, the path from a root that keeps it alive (issue 25:
 * retainer paths of the top live sites).
 */
#ifndef CH_CENSUS_PATHS_H
#define CH_CENSUS_PATHS_H

#include <stdbool.h>
#include <stddef.h>

#include "collect/ptexec.h"
#include "collect/sampler.h"
#include "output/report.h"
#include "profile/profile.h"
#include "target/target.h"

/* Can the heap of t be traced (OCaml 4.12-4.14, a release camlheap
 * knows)?  0, or -ENOTSUP with msg saying why and what to run instead. */
int census_paths_check(const struct target *t, char *msg, size_t len);

/* At the census's end, before the sampler stops sampling (its collection
 * hooks keep the sets of followed blocks exact until the stop): the ptrace
 * executor px (if any) lets go of the target (ptexec_stop; the target is
 * then sampled no more), the target is stopped outside its memory manager
 * (looked for up to max_wait_s), the kernel's last events handed to the
 * profile (sampler_consume), the heap walked and traced from the roots up
 * to max_pause_s of pause, a path found to each followed block, and the
 * target let go.  Fills *out (the paths' sites are prof's: keep prof until
 * out is freed); a failure (the stop, the pause) is said in
 * out->why_not and the census goes on without paths.  Returns 0, or
 * -ENOMEM. */
int census_paths_take(struct target *t, struct sampler *smp, struct ptexec *px, const struct profile *prof,
		      double max_pause_s, double max_wait_s, struct report_retention *out);

void census_paths_free(struct report_retention *rr);

#endif
