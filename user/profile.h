/* profile.h -- the aggregate a recording builds from sample events: the
 * stacks seen (by stack id) and the allocation sites, one per (kind,
 * callstack, Comballoc index), with their sample counts.  Frames are the runtime return
 * addresses the kernel walked; modules.h maps them to source.
 */
#ifndef CH_PROFILE_H
#define CH_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "camlheap.h"

struct profile_stack {
	uint64_t id;
	uint32_t nframes;
	uint8_t term;          /* enum ch_stack_term */
	uint64_t *frames;      /* runtime return addresses, leaf first */
};

struct profile_site {
	uint8_t kind;          /* enum ch_alloc_kind */
	uint8_t alloc_idx;     /* minor: the allocation of a combined (Comballoc) block, else 0 */
	uint32_t nallocs;      /* minor: allocations combined at that point, else 1 */
	uint64_t stack_id;
	const struct profile_stack *stack; /* NULL if its frames never arrived */
	uint64_t samples;      /* sum of nsamples */
	uint64_t events;       /* sampled blocks */
	uint64_t sampled_block_words; /* words of the sampled blocks (not an estimate) */
};

struct profile {
	double rate;           /* lambda, samples per word */
	uint64_t events, samples;
	uint64_t samples_by_kind[CH_KIND__COUNT];
	uint64_t walks_by_term[CH_TERM__COUNT]; /* one per event */
	uint64_t events_without_stack; /* events whose stack frames never arrived */
	uint64_t first_ns, last_ns;
	void *stacks;          /* GHashTable id -> struct profile_stack */
	void *sites;           /* GHashTable (kind, id) -> struct profile_site */
};

/* Returns a new empty profile, or NULL on allocation failure. */
struct profile *profile_new(double rate);
void profile_free(struct profile *p);

/* Account one ring-buffer event of `size` bytes (frames are read only if
 * ev->has_frames and size covers them).  Returns 0 or -EINVAL for a
 * malformed event (ignored). */
int profile_add_event(struct profile *p, const struct ch_sample_event *ev, size_t size);

/* All sites, sorted by samples (descending), ties by kind then stack id for
 * a deterministic order.  Returns the count; *out is a malloc'd array of
 * pointers into the profile (free the array, not the sites). */
size_t profile_sites_sorted(const struct profile *p, const struct profile_site ***out);

/* Estimated words allocated for `samples` samples: samples / lambda. */
double profile_estimate_words(const struct profile *p, uint64_t samples);

/* 95 % confidence interval for the expected sample count given `n`
 * observed, treating n as Poisson (binomial with tiny lambda): Byar's
 * approximation to the exact (Garwood) interval, accurate to < 1 % for
 * n >= 1 (Breslow & Day 1987, vol. II, §2.2).  Writes lo, hi in samples. */
void profile_poisson_ci95(uint64_t n, double *lo, double *hi);

#endif
