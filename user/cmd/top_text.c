/* top_text.c -- camlheap top's text (see top.h): the figures formatted,
 * the table's rows and header, the four header lines, shared by the screen
 * (top_screen.c) and the batch output (here: a refresh printed to stdout,
 * like top -b).
 */
#define _GNU_SOURCE
#include "cmd/top_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <glib.h>

#define SPARK_W 12        /* sparkline columns */
#define MAX_INDENT 12

static const char *const col_names[TOP_SORT__COUNT] = { "ALLOC/s", "LIVE", "GROWTH/s", "AGE", "SITE" };

/* ---- formatting ------------------------------------------------------ */

/* Bytes in at most 5 characters, binary prefixes: "999B", "12.3K", "1023M". */
const char *top_fmt_b(double b, char *buf, size_t len)
{
	static const char units[] = "BKMGTP";
	int u = 0;
	double a = fabs(b);

	while (a >= 1024.0 && u < 5) {
		a /= 1024.0;
		u++;
	}
	if (b < 0)
		a = -a;
	if (u == 0)
		snprintf(buf, len, "%.0fB", a);
	else
		snprintf(buf, len, fabs(a) < 10 ? "%.2f%c" : fabs(a) < 100 ? "%.1f%c" : "%.0f%c", a, units[u]);
	return buf;
}

static const char *fmt_age(double s, char *buf, size_t len)
{
	if (s < 0)
		snprintf(buf, len, "-");
	else if (s < 1)
		snprintf(buf, len, "%.0fms", s * 1000);
	else if (s < 60)
		snprintf(buf, len, "%.1fs", s);
	else if (s < 3600)
		snprintf(buf, len, "%.1fm", s / 60);
	else if (s < 86400)
		snprintf(buf, len, "%.1fh", s / 3600);
	else
		snprintf(buf, len, "%.1fd", s / 86400);
	return buf;
}

/* The live trend of a row: SPARK_W columns over the trend span, each the
 * live figure at the end of its part, scaled to the largest. */
static void sparkline(const struct top *t, const struct node *n, char *out, size_t len)
{
	static const char *const blocks_u[] = { "\u2581", "\u2582", "\u2583", "\u2584",
						"\u2585", "\u2586", "\u2587", "\u2588" };
	static const char *const blocks_a[] = { "_", ".", ",", "-", "=", "+", "*", "#" };
	const char *const *bl = t->utf8 ? blocks_u : blocks_a;
	double vals[SPARK_W], max = 0;
	long span = t->H - 1, tick = t->tick;
	size_t o = 0;

	for (int c = 0; c < SPARK_W; c++) {
		long at = tick - span + (long)((double)(c + 1) * (double)span / SPARK_W + 0.5);

		if (at > tick)
			at = tick;
		vals[c] = !n->hist || at < n->born || at < 0 ? NAN : n->hist[slot(t, at)];
		if (vals[c] > max)
			max = vals[c];
	}
	out[0] = 0;
	for (int c = 0; c < SPARK_W && o + 4 < len; c++) {
		if (isnan(vals[c]))
			o += (size_t)snprintf(out + o, len - o, " ");
		else
			o += (size_t)snprintf(out + o, len - o, "%s",
					      bl[max > 0 ? (int)lround(vals[c] / max * 7) : 0]);
	}
}

/* The text of a row's name column: tree indentation and marker, name,
 * recursion count. */
static void row_name(const struct top *t, const struct node *n, char *out, size_t len)
{
	if (!t->tree_view) {
		snprintf(out, len, "%s", n->label);
		return;
	}
	unsigned ind = n->depth < MAX_INDENT ? n->depth : MAX_INDENT;
	const char *mark = !n->kids || !n->kids->len ? "  "
			   : top_node_expanded(t, n)     ? (t->utf8 ? "\u25be " : "- ")
						     : (t->utf8 ? "\u25b8 " : "+ ");
	char reps[32] = "";

	if (n->reps > 1)
		snprintf(reps, sizeof(reps), " [x%u]", n->reps);
	snprintf(out, len, "%*s%s%s%s", (int)ind, "", mark, n->label, reps);
}

/* One table row: "ALLOC/s ±95% LIVE [GROWTH/s] TREND AGE [TOTAL] NAME"
 * (`wide` 1: with GROWTH/s, 2: and TOTAL, the estimated bytes allocated
 * since attach). */
void top_row_text(const struct top *t, const struct node *n, int wide, char *out, size_t len)
{
	struct figs f = top_figures(t, n);
	char a[16], pm[16], l[16], g[24], age[16], sp[64], name[4096], tot[24] = "";
	bool growth = wide >= 1;

	top_fmt_b(f.rate, a, sizeof(a));
	top_fmt_b(f.pm, pm, sizeof(pm));
	top_fmt_b(f.live, l, sizeof(l));
	top_fmt_b(f.growth, g + 1, sizeof(g) - 1);
	g[0] = f.growth > 0 ? '+' : ' ';
	fmt_age(f.age, age, sizeof(age));
	sparkline(t, n, sp, sizeof(sp));
	row_name(t, n, name, sizeof(name));
	if (wide >= 2) {
		char b[16];

		snprintf(tot, sizeof(tot), " %7s", top_fmt_b(to_bytes(t, n->stamp == t->tick ? n->alloc : 0), b, sizeof(b)));
	}
	if (growth)
		snprintf(out, len, "%7s %s%*s %7s %8s %s %5s%s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm,
			 l, g, sp, age, tot, name);
	else if (wide == 0)
		snprintf(out, len, "%7s %s%*s %7s %s %5s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm, l, sp,
			 age, name);
	else if (wide == -1) /* narrow: no TREND */
		snprintf(out, len, "%7s %s%*s %7s %5s  %s", a, t->utf8 ? "\u00b1" : "+-", t->utf8 ? 6 : 5, pm, l, age,
			 name);
	else /* narrower: no bound either */
		snprintf(out, len, "%7s %7s %5s  %s", a, l, age, name);
}

void top_table_header(const struct top *t, int wide, char *out, size_t len)
{
	/* the bound's column is 7 characters wide ("\u00b1" is one, "+-" two) */
	const char *pmh = t->utf8 ? "   \u00b195%" : "  +-95%";

	if (wide >= 0)
		snprintf(out, len, "ALLOC/s %s    LIVE %s%-*s   AGE%s  %s", pmh, wide >= 1 ? "GROWTH/s " : "", SPARK_W,
			 "TREND", wide >= 2 ? "   TOTAL" : "", t->tree_view ? "CALL TREE" : "SITE");
	else if (wide == -1)
		snprintf(out, len, "ALLOC/s %s    LIVE   AGE  %s", pmh, t->tree_view ? "CALL TREE" : "SITE");
	else
		snprintf(out, len, "ALLOC/s    LIVE   AGE  %s", t->tree_view ? "CALL TREE" : "SITE");
}

/* ---- header -------------------------------------------------------------- */

void top_header_lines(const struct top *t, char lines[4][512])
{
	char b1[16], b2[16], b3[16], b4[16], b5[16], b6[16], b7[16], up[32];
	double uptime = t->times[slot(t, t->tick)] - t->t0;
	const char *exe = t->src.exe ? strrchr(t->src.exe, '/') : NULL;
	char budget[64] = "";

	exe = exe ? exe + 1 : t->src.exe ? t->src.exe : "?";
	snprintf(up, sizeof(up), "%ld:%02ld:%02ld", (long)uptime / 3600, ((long)uptime / 60) % 60, (long)uptime % 60);
	if (t->st.shift)
		snprintf(budget, sizeof(budget), " (budget: kept 2^-%u)", t->st.shift);
	/* the marks first: a narrow terminal cuts the end of the line */
	snprintf(lines[0], 512, "%s%sPID %d %s  OCaml %s  %s %g%s %s  up %s", t->ended ? "[ENDED]  " : "",
		 t->frozen ? "[FROZEN]  " : "", t->src.pid, exe, t->src.ocaml_version ? t->src.ocaml_version : "?",
		 t->utf8 ? "\u03bb" : "rate", t->src.prof->rate, budget, t->src.executor ? t->src.executor : "?", up);
	if (t->st.res_valid)
		snprintf(lines[1], 512, "Heap %s (%s%s/s)  RSS %s (%s%s/s)  Live %s %s%s (%s%s/s)",
			 top_fmt_b(t->g_heap[slot(t, t->tick)], b1, sizeof(b1)), t->h_heap_growth >= 0 ? "+" : "",
			 top_fmt_b(isnan(t->h_heap_growth) ? 0 : t->h_heap_growth, b2, sizeof(b2)),
			 top_fmt_b(t->g_rss[slot(t, t->tick)], b3, sizeof(b3)), t->h_rss_growth >= 0 ? "+" : "",
			 top_fmt_b(isnan(t->h_rss_growth) ? 0 : t->h_rss_growth, b4, sizeof(b4)),
			 top_fmt_b(t->h_live, b5, sizeof(b5)), t->utf8 ? "\u00b1" : "+-", top_fmt_b(t->h_live_pm, b6, sizeof(b6)),
			 t->h_live_growth >= 0 ? "+" : "", top_fmt_b(t->h_live_growth, b7, sizeof(b7)));
	else
		snprintf(lines[1], 512, "Heap ?  RSS ?  Live %s %s%s (%s%s/s)", top_fmt_b(t->h_live, b5, sizeof(b5)),
			 t->utf8 ? "\u00b1" : "+-", top_fmt_b(t->h_live_pm, b6, sizeof(b6)), t->h_live_growth >= 0 ? "+" : "",
			 top_fmt_b(t->h_live_growth, b7, sizeof(b7)));
	if (!t->src.census_on)
		snprintf(lines[1] + strlen(lines[1]), 512 - strlen(lines[1]), " [no census]");
	snprintf(lines[2], 512, "Alloc %s/s %s%s  GC %.1f minor/s %.2f major/s  Samples %.0f/s  lost %llu",
		 top_fmt_b(t->h_rate, b1, sizeof(b1)), t->utf8 ? "\u00b1" : "+-", top_fmt_b(t->h_pm, b2, sizeof(b2)), t->h_minor,
		 t->h_major, t->h_sps, (unsigned long long)t->drops);
	snprintf(lines[3], 512, "%s view, sort %s%s, rates over %.*f s, trend %.0f s%s%s%s",
		 t->tree_view ? "tree" : "flat", col_names[t->sort], t->reverse ? " (reversed)" : "", t->h_dt < 9.95 ? 1 : 0,
		 t->h_dt, t->times[slot(t, t->tick)] - t->t0 < t->o.trend_s ? t->times[slot(t, t->tick)] - t->t0 : t->o.trend_s,
		 t->filter[0] ? ", filter \"" : "", t->filter, t->filter[0] ? "\"" : "");
}

/* ---- batch ----------------------------------------------------------------- */

/* Returns 0, or -errno if stdout cannot be written (a closed pipe, a full disk). */
int top_print_batch(struct top *t)
{
	char hl[4][512], line[8192];
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	top_build_rows(t);
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
	top_header_lines(t, hl);
	printf("camlheap top - %s - refresh %ld - %s\n", stamp, t->tick, hl[0]);
	for (int i = 1; i < 4; i++)
		printf("%s\n", hl[i]);
	if (t->ended)
		printf("Ended: %s\n", t->end_reason);
	top_table_header(t, 2, line, sizeof(line));
	printf("\n%s\n", line);
	for (guint i = 0; i < t->rows->len && (t->o.rows == 0 || i < (guint)t->o.rows); i++) {
		top_row_text(t, t->rows->pdata[i], 2, line, sizeof(line));
		printf("%s\n", line);
	}
	printf("\n");
	if (fflush(stdout) == EOF || ferror(stdout)) {
		t->out_err = errno ? errno : EIO;
		return -t->out_err;
	}
	return 0;
}
