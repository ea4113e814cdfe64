/* options.c -- the option arguments more than one command takes
 * (options_internal.h): numbers, sizes, --format, --value.  Not in main.c: the
 * unit tests link every user/ object but main.o, options_*.o included.
 */
#define _GNU_SOURCE
#include "cmd/options_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int parse_double(const char *s, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end ? -1 : 0;
}

int parse_long(const char *s, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || end == s || *end ? -1 : 0;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || !(v >= 0))
		return -1;
	while (*end == ' ')
		end++;
	switch (*end) {
	case 'K': case 'k': v *= 1024.0; end++; break;
	case 'M': case 'm': v *= 1048576.0; end++; break;
	case 'G': case 'g': v *= 1073741824.0; end++; break;
	case 'T': case 't': v *= 1099511627776.0; end++; break;
	default: break;
	}
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || v > 9e18)
		return -1;
	*out = (uint64_t)v;
	return 0;
}

int parse_format(const char *arg, enum report_format *f, bool memtrace)
{
	static const struct { const char *name; enum report_format f; } names[] = {
		{ "text", REPORT_TEXT }, { "collapsed", REPORT_COLLAPSED }, { "pprof", REPORT_PPROF },
		{ "json", REPORT_JSON }, { "svg", REPORT_SVG }, { "memtrace", REPORT_MEMTRACE }, { "dot", REPORT_DOT },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(arg, names[i].name) && (memtrace || (names[i].f != REPORT_MEMTRACE && names[i].f != REPORT_DOT))) {
			*f = names[i].f;
			return 0;
		}
	return -1;
}

int parse_value(const char *arg, int *v)
{
	if (!strcmp(arg, "alloc"))
		*v = REPORT_VALUE_ALLOC;
	else if (!strcmp(arg, "live"))
		*v = REPORT_VALUE_LIVE;
	else if (!strcmp(arg, "peak"))
		*v = REPORT_VALUE_PEAK;
	else
		return -1;
	return 0;
}

int parse_top(struct argp_state *state, const char *arg)
{
	long v;

	if (parse_long(arg, &v) || v < 0 || v > 1000000)
		argp_error(state, "invalid --top '%s' (1..1000000 entries, or 0 for all)", arg);
	return (int)v;
}

bool parse_by(struct argp_state *state, const char *arg)
{
	if (!strcmp(arg, "stack"))
		return true;
	if (strcmp(arg, "point"))
		argp_error(state, "unknown --by '%s' (point: allocation points, the default; stack: whole callstacks)", arg);
	return false;
}
