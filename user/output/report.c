/* report.c -- the one dispatch for every output format (report.h): text,
 * census, collapsed, JSON, SVG (report_*.c) and pprof (pprof.c). */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <stdio.h>

#include "output/pprof.h"

int report_render(FILE *out, enum report_format format, bool census, const struct profile *p,
		  const struct report_meta *m, struct modules *mods)
{
	if (census && format == REPORT_DOT)
		return report_write_census_dot(out, p, m, mods);
	if (census && format != REPORT_JSON)
		return report_write_census(out, p, m, mods);
	switch (format) {
	case REPORT_COLLAPSED:
		return report_write_collapsed(out, p, mods, m->value);
	case REPORT_JSON:
		return report_write_json(out, p, m, mods);
	case REPORT_SVG:
		return report_write_svg(out, p, m, mods);
	case REPORT_PPROF: {
		char comment[1536];
		struct pprof_meta pm = {
			.time_nanos = m->taken_unix_ns ? m->taken_unix_ns : m->start_unix_ns,
			.duration_nanos = (int64_t)(m->duration_s * 1e9),
			.census = m->census_on,
			.exe_path = m->exe,
			.build_id = m->build_id,
			.default_type = m->value == REPORT_VALUE_ALLOC && m->census_on ? "alloc_space" : NULL,
			.comment = comment,
		};

		snprintf(comment, sizeof(comment), "camlheap record of PID %d (%s, OCaml %s), rate %g, executor %s%s%s%s%s%s%s",
			 m->pid, m->exe, m->ocaml_version, p->rate, m->executor,
			 report_minor_off(m) ? "; minor heap not sampled: " : "", report_minor_off(m) ? report_minor_off(m) : "",
			 m->selection ? "; " : "", m->selection ? m->selection : "",
			 m->budget ? "; overhead budget, lambda in force: " : "", m->budget ? m->budget : "");
		return pprof_write(out, p, mods, &pm);
	}
	case REPORT_TEXT:
	default:
		return report_write_text(out, p, m, mods);
	}
}
