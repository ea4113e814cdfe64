/* top_term.c -- camlheap top's terminal check (top.h), apart from top.c:
 * <term.h> defines macros (lines, columns, ...) that clash with ordinary
 * names.
 */
#define _GNU_SOURCE
#define NCURSES_WIDECHAR 1
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <ncurses.h>
#include <term.h>

#include "cmd/top.h"

int top_check_terminal(char *msg, size_t len)
{
	int err = 0;
	const char *term = getenv("TERM");

	if (!term || !*term) {
		snprintf(msg, len, "TERM is not set: the terminal's kind is unknown; set it, or use --batch");
		return -ENOTTY;
	}
	if (setupterm(NULL, STDOUT_FILENO, &err) != OK) {
		snprintf(msg, len, "the terminal TERM=%s is not known to this system's terminfo; use --batch", term);
		return -ENOTTY;
	}
	char *cup = tigetstr("cup");
	bool ok = cup && cup != (char *)-1;

	del_curterm(cur_term);
	if (!ok) {
		snprintf(msg, len, "the terminal TERM=%s cannot place the cursor; use --batch", term);
		return -ENOTTY;
	}
	return 0;
}

