/* profile.h -- the aggregate a recording builds from sample events: the
 * stacks seen (by stack id) and the allocation sites, one per (kind,
 * callstack, Comballoc index), with their sample counts.  Frames are the runtime return
 * addresses the kernel walked; modules.h maps them to source.
 */
#ifndef CH_PROFILE_H
#define CH_PROFILE_H

#include <stdbool.h>
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
	uint32_t domain;       /* the allocating domain (OCaml 5 Domain.self), with profile.by_domain; else 0 */
	uint64_t subtype;      /* CH_KIND_CUSTOM: the custom operations' runtime address (profile_custom_name);
				* CH_KIND_BIGARRAY: whose data (CH_BA_*); CH_KIND_MALLOC: CH_MALLOC_OUTSIDE
				* if its calls came from threads not running OCaml; else 0 */
	uint32_t seq;          /* sites created before this one (ties in sorting follow it) */
	bool hidden;           /* left out of the site lists (report --min-samples); totals count it */
	const struct profile_stack *stack; /* NULL if its frames never arrived */
	uint64_t samples;      /* sum of nsamples */
	uint64_t events;       /* sampled blocks */
	uint64_t sampled_block_words; /* words of the sampled blocks (not an estimate) */
	double est_objects;        /* blocks allocated, estimated: sum over sampled blocks of 1/P(sampled)
				    * = 1/(1-(1-lambda)^words) (see profile_object_weight) */
	double live_est_objects;   /* the same over its blocks alive now */
	/* Census (sampled blocks followed to their death, README *Census*) */
	uint64_t followed_blocks;  /* sampled blocks with a sample id */
	uint64_t live_samples;     /* samples of its blocks alive now (incl. relocated/unfollowed) */
	uint64_t live_blocks;
	uint64_t peak_live_samples;/* the most live_samples ever reached */
	uint64_t promoted_blocks;  /* minor blocks promoted to the major heap */
	uint64_t dead_minor_blocks, dead_major_blocks;
	uint64_t relocated_samples;/* live samples whose blocks a compaction moved (alive, location unknown) */
	uint64_t unfollowed_samples; /* live samples no longer followed (set full, header unreadable) */
	double dead_lifetime_s;    /* sum over dead blocks of their lifetime, seconds */
	uint64_t dead_minor_gcs;   /* sum over dead blocks of the minor collections they lived through */
	/* live_samples at each major clean phase seen since its first (zeros
	 * before it), summed up as profile_site_live_grows needs it: a fixed
	 * size whatever the number of cycles (a service runs for months) */
	uint32_t cycle_count;      /* clean phases in the series */
	bool cycle_dropped;        /* it fell below 2/3 of the previous value once */
	uint64_t cycle_first, cycle_last;
	/* filled by profile_census_compute */
	double median_major_age;
	uint32_t leak_cycles, leak_retaining;
	uint64_t leak_retained_samples;
	double leak_score;         /* estimated bytes per major cycle */
};

/* A sampled block being followed (still alive, as far as camlheap knows). */
struct profile_block {
	struct profile_site *site;
	uint64_t time_ns;          /* allocation time (bpf_ktime_get_ns) */
	uint64_t nsamples;         /* samples at lambda it stands for (kept ones << their rate_shift) */
	uint32_t words;            /* words the sampling decision was made over */
	uint32_t birth_minor_gcs;  /* stat_minor_collections at the allocation */
	uint32_t birth_major_gcs;  /* stat_major_collections at the allocation */
	uint32_t birth_cycle;      /* major clean phases camlheap had seen before the allocation */
	float est_objects;         /* the blocks it stands for (profile_object_weight_at, at the rate_shift it
				    * was sampled under), taken off its site's live estimate at its death */
	uint8_t state;             /* enum profile_block_state */
	bool uncounted;            /* memory counted elsewhere (a bigarray view, a mapped file): left out of
				    * the profile's live totals (its site still shows it) */
	uint8_t promo_cycles;      /* clean phases between its allocation and its promotion (capped at 255):
				    * it entered the major heap at clean phase birth_cycle + promo_cycles */
};

enum profile_block_state {
	PROFILE_BLOCK_YOUNG = 0,   /* in the minor heap */
	PROFILE_BLOCK_MAJOR,       /* in the major heap, followed */
	PROFILE_BLOCK_RELOCATED,   /* moved by a compaction: alive then, location unknown since */
	PROFILE_BLOCK_UNFOLLOWED,  /* alive when camlheap stopped following it (set full, unreadable) */
};

struct profile {
	double rate;           /* lambda, samples per word */
	uint64_t events, samples;
	uint64_t samples_by_kind[CH_KIND__COUNT];
	uint64_t walks_by_term[CH_TERM__COUNT]; /* one per event */
	uint64_t events_without_stack; /* events whose stack frames never arrived */
	uint64_t first_ns, last_ns;
	uint64_t zero_ns;      /* the recording's time zero (end of attach), events' clock; 0: first_ns */
	void *stacks;          /* GHashTable id -> struct profile_stack */
	void *sites;           /* GHashTable (kind, id[, domain]) -> struct profile_site */
	bool by_domain;        /* sites are split by allocating domain (--by-domain); set before adding events */
	void *domain_samples;  /* GHashTable domain id (GUINT_TO_POINTER) -> samples (GSIZE_TO_POINTER) */
	uint64_t bigarray_samples[3]; /* CH_KIND_BIGARRAY samples by CH_BA_* (owned, view, mapped) */
	void *custom_names;    /* GHashTable custom operations address (uint64) -> identifier (char *) */
	/* Census */
	void *blocks;          /* GHashTable sample id -> struct profile_block (live ones) */
	uint64_t live_samples, peak_live_samples; /* bigarray views and mapped files left out */
	uint64_t uncounted_samples; /* samples of bigarray views and mapped files (their memory is elsewhere) */
	uint64_t live_samples_by_kind[CH_KIND__COUNT]; /* live_samples split by kind (same blocks left out) */
	uint64_t peak_ns;      /* when the total peak was reached */
	uint64_t followed_blocks, followed_minor_blocks, promoted_blocks, dead_minor_blocks, dead_major_blocks;
	void *interval_births;  /* GArray of uint64: sampled blocks born between clean phases j and j+1 */
	uint64_t relocated_blocks, unfollowed_blocks, unknown_fate_blocks;
	uint64_t freed_blocks; /* --malloc: sampled blocks seen freed (free, munmap, realloc); not in dead_* */
	uint64_t orphan_fates; /* fate events for an id never seen (counted, never subtracted) */
	uint32_t clean_phases; /* major clean phases seen (from the numbered CH_NOTE_MAJOR_CLEAN) */
	uint32_t lost_clean_notes; /* notes lost (ring full), their snapshots repeated */
	uint32_t cur_minor_gcs, cur_major_gcs; /* latest counters seen in any event */
	uint64_t last_clean_ns;
};

/* Custom block type names: the identifier string a struct
 * custom_operations starts with (runtime/caml/custom.h: "_bigarr02",
 * "_mpz", ...), by the operations' runtime address in the target.  The
 * recorder reads it from the target at the address's first sighting
 * (record.c); `name` NULL or "" records that it could not be read.
 * profile_custom_name returns NULL for an address never named or unreadable. */
bool profile_custom_name_known(const struct profile *p, uint64_t ops);
void profile_set_custom_name(struct profile *p, uint64_t ops, const char *name);
const char *profile_custom_name(const struct profile *p, uint64_t ops);

/* Returns a new empty profile, or NULL on allocation failure. */
struct profile *profile_new(double rate);
void profile_free(struct profile *p);

/* Account one ring-buffer event of `size` bytes (frames are read only if
 * ev->has_frames and size covers them).  Returns 0 or -EINVAL for a
 * malformed event (ignored). */
int profile_add_event(struct profile *p, const struct ch_sample_event *ev, size_t size);

/* Account one fate record (struct ch_fate_event: promotion, death,
 * relocation, or a major clean-phase note).  A fate for a block never seen
 * is counted in orphan_fates and changes nothing else, so live counts
 * never go negative.  Returns 0 or -EINVAL. */
int profile_add_fate(struct profile *p, const struct ch_fate_event *f, size_t size);

/* Fill the census figures of every site from the blocks alive now
 * (call before reporting; cheap: one pass over the live blocks):
 *  - median_major_age: median over its live blocks of the major
 *    collections completed since their allocation (stat_major_collections
 *    now minus at birth), -1 if none is alive;
 *  - leak analysis (README *Census*): the major cycles camlheap saw end
 *    are numbered by clean phase; the blocks born between clean phases j
 *    and j+1 have all been through a complete mark once two more clean
 *    phases passed, so with C clean phases seen, births in intervals
 *    0..C-2 are judged (interval 0 starts at attach); an interval in which
 *    nothing at all was sampled (back-to-back cycles of a Gc.full_major,
 *    an idle program) tells nothing and is skipped.  leak_cycles = the
 *    judged intervals left, leak_retaining = those with live blocks of the site,
 *    leak_retained_samples = their live samples, and
 *    leak_score = (retaining / cycles) * retained bytes per cycle
 *    (estimated bytes per major cycle): a site that keeps allocating blocks
 *    that stay alive scores its leak rate; one whose blocks die, or that
 *    allocated only once, scores ~0.  0 with fewer than 2 judged cycles. */
void profile_census_compute(struct profile *p);

/* Does the site's live sample count grow over the clean phases seen
 * (more at the last than at the first, and never falling by more than a
 * third between two)?  False with fewer than 3 clean phases. */
bool profile_site_live_grows(const struct profile_site *site);

/* All sites, sorted by samples (descending), ties by kind then the order
 * the sites first appeared in, for a deterministic order.  Returns the count; *out is a malloc'd array of
 * pointers into the profile (free the array, not the sites). */
size_t profile_sites_sorted(const struct profile *p, const struct profile_site ***out);

/* Hide the sites with fewer than `min_samples` samples from the site
 * lists (profile_sites_sorted), for `camlheap report --min-samples`; the
 * profile's totals (samples, events, by kind, live) still count them.
 * Returns the number of sites hidden. */
size_t profile_drop_small_sites(struct profile *p, uint64_t min_samples);

/* 1 / P(a block of `words` words is sampled at least once) =
 * 1/(1-(1-lambda)^words): the number of blocks a sampled block stands for
 * (>= 1).  Source: Gc.Memprof samples each word, header included, with
 * probability lambda (4.14 stdlib/gc.mli, module Memprof). */
double profile_object_weight(const struct profile *p, uint64_t words);

/* The same for a block sampled while an overhead budget kept samples with
 * probability 2^-shift (struct ch_sample_event.rate_shift): its
 * probability of being kept is 1-(1-lambda 2^-shift)^words. */
double profile_object_weight_at(const struct profile *p, uint64_t words, unsigned shift);

/* Estimated words allocated for `samples` samples: samples / lambda. */
double profile_estimate_words(const struct profile *p, uint64_t samples);

/* 95 % confidence interval for the expected sample count given `n`
 * observed, treating n as Poisson (binomial with tiny lambda): Byar's
 * approximation to the exact (Garwood) interval, accurate to < 1 % for
 * n >= 1 (Breslow & Day 1987, vol. II, §2.2).  Writes lo, hi in samples. */
void profile_poisson_ci95(uint64_t n, double *lo, double *hi);

/* A site's in-use figure as of the last completed major cycle. */
struct profile_inuse {
	uint64_t samples;      /* samples at lambda of its blocks in use then */
	double est_objects;    /* the blocks they stand for */
};

/* In use as Go's heap profile means it, "as of the most recently completed
 * garbage collection": the live sampled blocks that entered the major heap
 * (allocation or promotion) before the last completed major cycle began
 * (birth_cycle + promo_cycles + 2 <= clean_phases), --malloc blocks until
 * freed.  Returns a GHashTable site pointer -> struct profile_inuse (owned
 * by the table; g_hash_table_destroy), sites with none left out, or NULL
 * when out of memory. */
void *profile_inuse_by_site(const struct profile *p);

#endif
