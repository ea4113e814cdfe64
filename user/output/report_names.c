/* report_names.c -- the names every output format gives allocation kinds,
 * stack-walk ends and bigarray data, and byte counts for people (see
 * report_names.h). */
#include "output/report_names.h"

#include <stdio.h>

#include "camlheap.h"

static const char *const kind_names[CH_KIND__COUNT] = {
	[CH_KIND_MINOR] = "minor",
	[CH_KIND_MAJOR] = "major",
	[CH_KIND_CUSTOM] = "custom",
	[CH_KIND_UNMARSHAL] = "unmarshal",
	[CH_KIND_BIGARRAY] = "bigarray",
	[CH_KIND_MALLOC] = "malloc",
};

static const char *const term_names[CH_TERM__COUNT] = {
	[CH_TERM_CLEAN] = "clean",
	[CH_TERM_UNKNOWN_PC] = "unknown pc",
	[CH_TERM_READ_ERROR] = "read error",
	[CH_TERM_DEPTH] = "depth limit",
};

const char *report_bigarray_owner(uint64_t ext_flags)
{
	return ext_flags == CH_BA_OWNED ? "owned" : ext_flags == CH_BA_VIEW ? "view" : "mapped";
}

const char *report_kind_name(unsigned kind)
{
	return kind < CH_KIND__COUNT ? kind_names[kind] : "?";
}

const char *report_term_name(unsigned term)
{
	return term < CH_TERM__COUNT ? term_names[term] : "?";
}

const char *report_format_bytes(double b, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;

	while (b >= 1024.0 && u < 4) {
		b /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%.0f B", b);
	else
		snprintf(buf, len, "%.*f %s", b < 10 ? 2 : b < 100 ? 1 : 0, b, units[u]);
	return buf;
}
