/* memtrace.h -- Jane Street memtrace's trace format, version 3: a writer
 * and a reader in C.
 *
 * Format facts (memtrace's src/trace.ml, buf.ml, location_codec.ml,
 * backtrace_codec.ml, src/memtrace.tsdl; docs/recording.md for its use): a
 * trace is a concatenation of CTF packets (68-byte header: magic
 * 0xC1FC1FC1, size in bits, begin/end timestamps in microseconds since the
 * Unix epoch, version, pid, domain, cache verifier, alloc id range), each
 * at most 32 KiB; the first packet holds only the trace_info event.
 * Events: location (a code's inline chain of file/line/chars/definition,
 * names move-to-front coded), alloc (length in words, samples, source
 * minor/major/external, a backtrace coded against a 16384-bucket cache with
 * predictions, sharing a common prefix with the previous one), promote and
 * collect (object ids relative to the next allocation id).  Everything is
 * little-endian.
 *
 * The writer keeps every rule the reader checks: timestamps never go
 * backwards (a time before the last one is raised to it), a packet spans
 * less than 30 s, fields are clamped to their widths (line 20 bits, start
 * char 8, end char 10), a location with more than 255 entries or over
 * 4 KiB becomes memtrace's single "<unknown>"/"??" entry, packets stay
 * within 32 KiB.  Its backtrace cache and move-to-front tables are only
 * ever referenced where a reader has the same state.
 */
#ifndef CH_MEMTRACE_H
#define CH_MEMTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MT_VERSION 3
#define MT_MAGIC 0xC1FC1FC1u
#define MT_MAX_PACKET_BYTES 32768      /* memtrace's max_packet_size (1 lsl 15), header included */
#define MT_HEADER_BYTES 68             /* version 3 packet header */
#define MT_PACKET_MAX_US 30000000ull   /* memtrace's packet_max_time: a packet spans at most 30 s */
#define MT_CACHE_SIZE 16384            /* backtrace cache buckets */
#define MT_MAX_LOC_BYTES 4096          /* location_codec max_length */
#define MT_MAX_LOCS 255                /* entries of one location (u8) */
/* The longest new backtrace suffix the writer codes in one alloc event:
 * at most 10 bytes a code, so an event always fits in a packet. */
#define MT_MAX_NEW_CODES 3000

enum mt_source { MT_SRC_MINOR = 0, MT_SRC_MAJOR = 1, MT_SRC_EXTERNAL = 2 };

enum mt_event_type {
	MT_EV_TRACE_INFO = 0,
	MT_EV_LOCATION = 1,
	MT_EV_ALLOC = 2,
	MT_EV_PROMOTE = 3,
	MT_EV_COLLECT = 4,
};

/* One entry of a location: a source position (memtrace's Location.t). */
struct mt_location {
	const char *filename;   /* never NULL ("" allowed); no NUL inside */
	const char *defname;    /* definition name, e.g. "Stdlib.List.map" */
	uint32_t line;          /* clamped to 20 bits when written */
	uint32_t start_char;    /* clamped to 8 bits */
	uint32_t end_char;      /* clamped to 10 bits */
};

/* The trace_info event (first packet). */
struct mt_info {
	double sample_rate;           /* lambda, samples per word */
	uint8_t word_size_bits;       /* 64 */
	const char *executable;
	const char *host;
	const char *runtime_params;   /* OCAMLRUNPARAM-style, "" if unknown */
	uint64_t pid;
	uint64_t start_us;            /* microseconds since the Unix epoch */
	const char *context;          /* "" or NULL: none */
	uint16_t domain;              /* the initial domain */
};

/* ---- writer ---------------------------------------------------------- */

struct mt_writer;

/* Start a trace whose events are written, packet by packet, to `body`
 * (an open stdio stream, usually an unlinked temporary file); the
 * trace_info packet comes first in the final file and is written by
 * mt_writer_finish, when its context is known.  `pid` goes in every packet
 * header, `start_us` is the trace start (no event may be earlier: earlier
 * times are raised to it).  Returns 0 or -ENOMEM. */
int mt_writer_new(FILE *body, uint64_t pid, uint64_t start_us, struct mt_writer **out);

/* Define location `code` (any 64-bit value; memtrace readers keep 63 bits,
 * so bit 63 must be 0: -EINVAL) as the inline chain `locs[0..n)`,
 * outermost first, at time `t_us`.  A code must be defined before the
 * first backtrace that uses it, and only once: redefining it with other
 * locations makes memtrace's reader reject the file (the caller keeps
 * track).  Returns 0, -EINVAL, or -EIO (write error). */
int mt_put_location(struct mt_writer *w, uint64_t t_us, uint64_t code, const struct mt_location *locs, size_t n);

/* An allocation at `t_us`: `length` words (header excluded), `nsamples`
 * samples (>= 1), `source`, backtrace `codes[0..ncodes)` outermost first
 * (main ... allocation site).  Only the part not shared with the previous
 * backtrace is coded; that part must be at most MT_MAX_NEW_CODES codes
 * (-E2BIG otherwise, nothing written).  *id receives the allocation's
 * object id (0, 1, 2, ... in order), which promote/collect name.  Returns
 * 0, -EINVAL, -E2BIG, -ENOMEM or -EIO. */
int mt_put_alloc(struct mt_writer *w, uint64_t t_us, uint64_t length, uint64_t nsamples, enum mt_source source,
		 const uint64_t *codes, size_t ncodes, uint64_t *id);

/* The object `id` (an earlier allocation) was promoted to the major heap /
 * collected, at `t_us`.  Returns 0, -EINVAL (id not yet allocated), -EIO. */
int mt_put_promote(struct mt_writer *w, uint64_t t_us, uint64_t id);
int mt_put_collect(struct mt_writer *w, uint64_t t_us, uint64_t id);

/* Allocation events written so far. */
uint64_t mt_writer_allocs(const struct mt_writer *w);
/* Latest event time written (start_us before any). */
uint64_t mt_writer_last_us(const struct mt_writer *w);

/* Flush the last packet, then write the complete trace to `out`: the
 * trace_info packet from `info` (its start_us and pid must be the
 * writer's), then the body.  `info->context` must fit the first packet
 * (under 32 KiB with the other strings): -E2BIG otherwise.  Returns 0 or
 * -errno.  The writer must still be freed; it may also go on taking
 * events, and a later finish writes them all (a copy while recording). */
int mt_writer_finish(struct mt_writer *w, const struct mt_info *info, FILE *out);
void mt_writer_free(struct mt_writer *w);

/* Log every event the writer puts, as mt_event_print prints what a
 * reader reads (round-trip tests compare the two).  NULL: stop logging. */
void mt_writer_set_log(struct mt_writer *w, FILE *log);

/* ---- reader ---------------------------------------------------------- */

/* One event as read.  Pointers stay valid until the reader is closed
 * (strings and locations) or until the next call (codes). */
struct mt_event {
	enum mt_event_type type;
	uint64_t time_us;          /* absolute, microseconds since the epoch */
	uint16_t domain;
	uint32_t packet;           /* packets read so far, this one included (trace_info is 1) */
	/* MT_EV_LOCATION */
	uint64_t code;
	const struct mt_location *locs;  /* outermost first */
	size_t nlocs;
	/* MT_EV_ALLOC: id; MT_EV_PROMOTE/COLLECT: the object id named */
	uint64_t id;
	/* MT_EV_ALLOC */
	uint64_t length, nsamples;
	enum mt_source source;
	bool is_short;             /* coded as a short alloc event (101..116) */
	size_t common_prefix;      /* codes shared with the previous backtrace */
	size_t nencoded;           /* codewords in the event */
	const uint64_t *codes;     /* the whole backtrace, outermost first */
	size_t ncodes;
};

struct mt_reader;

/* Open a trace file (read in whole, mmap) and read its trace_info
 * packet.  Returns 0, or a negative errno with a message in err (not a
 * trace, unsupported version, malformed first packet). */
int mt_reader_open(const char *path, struct mt_reader **out, char *err, size_t errlen);

/* The trace_info fields (strings owned by the reader). */
const struct mt_info *mt_reader_info(const struct mt_reader *r);

/* Next event.  Returns 1 with *ev filled, 0 at the end of the trace, or
 * -EINVAL for a malformed trace (mt_reader_error says what and where),
 * checking what memtrace's reader checks: magic, version <= 3, packet size
 * and bounds, begin <= end, event times inside the packet and never going
 * backwards within a domain, known event codes, source values, location
 * redefinitions identical, alloc ids in sync with the packet header.
 * Packets of another pid (a forked child) are skipped and counted, as
 * memtrace does; so is a truncated last packet. */
int mt_reader_next(struct mt_reader *r, struct mt_event *ev);
const char *mt_reader_error(const struct mt_reader *r);

/* Packets skipped: another pid, truncated. */
void mt_reader_skipped(const struct mt_reader *r, unsigned *wrong_pid, unsigned *truncated);

/* The locations defined for `code` so far (outermost first), or NULL
 * (*n = 0) if none. */
const struct mt_location *mt_reader_lookup(const struct mt_reader *r, uint64_t code, size_t *n);

void mt_reader_close(struct mt_reader *r);

/* One line for an event's logical content (type, time, ids, sizes, the
 * whole backtrace, a location's entries), the same whatever its encoding
 * (short or long alloc, prefix shared or not, packet boundaries). */
void mt_event_print(FILE *out, const struct mt_event *ev);

/* Read a whole trace from memory (for the fuzzer): as mt_reader_open on
 * a file holding `data[0..len)` (copied). */
int mt_reader_open_mem(const void *data, size_t len, struct mt_reader **out, char *err, size_t errlen);

#endif
