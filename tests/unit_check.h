/* unit_check.h -- the unit tests' verdict lines: "PASS name" or
 * "FAIL name: why" (tests/run_tests.py reads them); failures counts the
 * FAILs, for the exit status. */
#ifndef CH_UNIT_CHECK_H
#define CH_UNIT_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int failures;

static void check(int ok, const char *name, const char *fmt, ...)
{
	va_list ap;

	if (ok) {
		printf("PASS %s\n", name);
		return;
	}
	failures++;
	printf("FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#endif
