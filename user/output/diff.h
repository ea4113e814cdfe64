/* diff.h -- `camlheap diff A B`: per-site change in allocated and live
 * bytes between two recordings (recording files, recording.h, or their
 * --format json documents, docs/json.md), each flagged significant or
 * not from the sampling variance.
 */
#ifndef CH_DIFF_H
#define CH_DIFF_H

#include <stdio.h>

struct diff_opts {
	const char *a, *b;  /* the two recordings (trace files or JSON documents) */
	const char *output; /* file, or NULL / "-" for stdout */
	int top;            /* sites shown */
	double alpha;       /* family-wise significance level, 0 < alpha < 1 */
	int by_stack;       /* match sites by their whole source stack, not by allocation position */
};

/* The significance test of one site: k1 samples in A at rate l1, k2 in B
 * at rate l2.  Under "same allocated words" the two counts are Poisson
 * with means l1*W and l2*W, so given n = k1 + k2, k1 is Binomial(n,
 * l1/(l1+l2)); returns the z score of k1 (0 when n = 0).  A site is flagged
 * when |z| exceeds the two-sided normal quantile at alpha / m (Bonferroni
 * over the m sites compared). */
double diff_site_z(double k1, double l1, double k2, double l2);

/* Run the command: read and check both documents, match sites by kind and
 * the allocation's own source position (or, with by_stack, also every
 * frame's function, file and line: stacks that differ between runs only
 * below the allocation, as finalisers run from whichever allocation
 * triggered the GC, then count as different sites), write the table.  Returns the process exit status: 0, 2 for
 * unreadable input (message on stderr), 1 if the output could not be
 * written. */
int diff_run(const struct diff_opts *o);

#endif
