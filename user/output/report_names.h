/* report_names.h -- the names every output format (text, JSON, pprof,
 * collapsed, SVG) gives allocation kinds, stack-walk ends and bigarray data,
 * and byte counts for people.  Apart from report.h so that pprof.c, which
 * report.c calls, does not include report.h back.
 */
#ifndef CH_REPORT_NAMES_H
#define CH_REPORT_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* "minor", "major", "custom", "unmarshal", "bigarray", "malloc" for an
 * enum ch_alloc_kind; "?" out of range. */
const char *report_kind_name(unsigned kind);

/* "owned", "view" or "mapped": whose data a bigarray site's samples are
 * (profile_site.subtype, CH_BA_* in camlheap.h). */
const char *report_bigarray_owner(uint64_t ext_flags);

/* Why a stack walk ended (enum ch_stack_term): "clean", "unknown pc",
 * "read error", "depth limit"; "?" out of range. */
const char *report_term_name(unsigned term);

/* `bytes` for people, in binary units ("812 B", "1.50 MiB", "23.4 GiB":
 * three significant digits), into buf (len bytes); returns buf. */
const char *report_format_bytes(double bytes, char *buf, size_t len);

#endif
