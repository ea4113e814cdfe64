/* recording.h -- camlheap's recording file: a memtrace trace (format v3,
 * memtrace.h) that memtrace's own tools and memtrace_viewer open unchanged,
 * carrying everything `camlheap report` needs to render it again.
 *
 * Mapping (docs/recording.md):
 *  - each sampled block is an alloc event: length = its words without the
 *    header (custom: the out-of-heap words), nsamples, source minor
 *    (minor heap), major (major heap, custom, unmarshalled);
 *  - its backtrace, outermost first, is the return addresses the kernel
 *    walked; the allocation point of a combined (Comballoc) block carries
 *    the sub-allocation index in bits 48..55 of its code; a walk that ended
 *    early starts with a code of its own (bit 61 set) whose location is
 *    "[stack walk ended: <why>]";
 *  - every code gets a location event (the inline chain, outermost first:
 *    file, line, start/end characters, definition name) before first use;
 *  - promotions are promote events, deaths collect events;
 *  - what memtrace has no event for (collection counters, the major cycle
 *    an allocation fell in, clean-phase notes, relocation by compaction,
 *    blocks no longer followed, per-block flags) is carried by location
 *    events with no entries whose code (bit 62 set) holds the data: a
 *    memtrace reader stores them and never looks them up, as no backtrace
 *    names them;
 *  - the run's metadata (the text report's header, counters, build id) is a
 *    JSON object in trace_info's context string, "camlheap-recording 1 {...}".
 */
#ifndef CH_RECORDING_H
#define CH_RECORDING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "camlheap.h"
#include "target/modules.h"
#include "profile/profile.h"
#include "output/report.h"

struct recording;

/* Start a recording for target `pid` sampled at `rate` (lambda, per
 * word), whose file will be `output` (the event body goes to an unlinked
 * temporary file in its directory).  The trace starts now (wall clock).
 * `census_on`: sampled blocks are followed.  Returns 0 or -errno. */
int recording_new(const char *output, int pid, double rate, bool census_on, struct recording **out);

/* Append one ring-buffer record after the profile accounted it: a sample
 * (struct ch_sample_event; its stack is looked up in `p`, its frames
 * symbolized through `mods` the first time each code appears) or a fate /
 * clean-phase note (struct ch_fate_event).  Errors are remembered and
 * returned by recording_finish. */
void recording_add(struct recording *rc, const struct profile *p, struct modules *mods,
		   const struct ch_sample_event *ev, size_t size);

/* Write the file: the trace_info packet with the metadata `m` (and the
 * executable's build id from `mods`, its orphan fate count from `p`),
 * then the events, through a temporary file renamed over `output`
 * (outfile.h).  Returns 0 or -errno (the destination is then untouched). */
int recording_finish(struct recording *rc, const struct report_meta *m, const struct profile *p,
		     struct modules *mods);

/* The same file as recording_finish, but to `path` and as of now: the
 * recording goes on, and a later recording_write or recording_finish
 * holds everything since its start (`camlheap top`'s memtrace key).
 * Returns 0 or -errno (`path` is then untouched). */
int recording_write(struct recording *rc, const char *path, const struct report_meta *m, const struct profile *p,
		    struct modules *mods);

/* Move the profile's time zero and peak time (profile.h zero_ns,
 * peak_ns; CLOCK_MONOTONIC ns) to this file's microsecond clock: the zero
 * to m->start_unix_ns floored to us (recording_load's zero), the peak to
 * the us the file gives its event (as written: never before an earlier
 * event's).  The text report of `p` then prints
 * the peak time `camlheap report FILE` prints, to the digit (the run's
 * nanoseconds could round the other way across a 10 ms boundary).  For
 * the CAMLHEAP_ALSO_TEXT comparison; nothing when m->start_unix_ns <= 0. */
void recording_profile_as_read(const struct recording *rc, const struct report_meta *m, struct profile *p);

/* Bytes of events written so far (the body, without the packet being
 * filled). */
uint64_t recording_bytes(const struct recording *rc);

/* Events written, for the closing message. */
uint64_t recording_allocs(const struct recording *rc);
void recording_free(struct recording *rc);

/* What to keep when reading a recording back (`camlheap report`). */
struct recording_filter {
	double from_s, to_s;      /* window in seconds from the trace start; to_s < 0: to the end */
	const char *const *focus; /* keep allocations with a frame whose function or file contains one (NULL-terminated), or NULL */
	const char *const *ignore;/* drop allocations with such a frame, or NULL */
	bool by_domain;           /* split sites by allocating domain (profile.by_domain) */
};

/* A recording read back. */
struct recording_loaded {
	struct profile *prof;
	struct report_meta meta;  /* strings owned by the loaded recording */
	struct modules mods;      /* lookups answered from the location events */
	const char *build_id;     /* hex, or NULL */
	bool camlheap;            /* written by camlheap (else a plain memtrace trace) */
	uint64_t allocs_read, allocs_kept;
	unsigned skipped_pid, skipped_truncated;
	void *priv;
};

/* Read the recording `path` (or any memtrace v1-v3 trace: metadata then
 * comes from trace_info alone), keeping what `f` (may be NULL) selects,
 * into a profile ready for the report writers.  Returns 0, or a negative
 * errno with a message in err. */
int recording_load(const char *path, const struct recording_filter *f, struct recording_loaded *out, char *err,
		   size_t errlen);
void recording_loaded_free(struct recording_loaded *l);

/* `camlheap dump-trace FILE`: every event, one line each (the format
 * memtrace_write.c's writer log uses, CAMLHEAP_TRACE_LOG).  Returns the exit
 * status. */
int recording_dump(const char *path, FILE *out);

#endif
