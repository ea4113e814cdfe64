/* top_screen.c -- camlheap top's interactive screen (see top.h): ncurses
 * drawing (the table, the detail and help pages, the bottom line's prompt
 * and messages), the keys, and stderr's last line while the screen is ours.
 */
#define _GNU_SOURCE
#define NCURSES_WIDECHAR 1
#include "cmd/top_internal.h"

#include <errno.h>
#include <ncurses.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#include <glib.h>

#include "output/report.h"

enum { MODE_MAIN, MODE_DETAIL, MODE_PROMPT };
enum { PROMPT_FILTER, PROMPT_PPROF, PROMPT_MEMTRACE };

/* ---- interactive ------------------------------------------------------------- */

void top_sayf(struct top *t, const char *fmt, ...)
{
	va_list ap;
	struct timespec m;

	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_MONOTONIC, &m);
	t->msg_until = (double)m.tv_sec + (double)m.tv_nsec * 1e-9 + 8.0;
}

void top_say(struct top *t, const char *msg)
{
	if (t->tui)
		top_sayf(t, "%s", msg);
}

/* What was written to stderr since the last look: keep its last line. */
void top_read_captured(struct top *t)
{
	char buf[4096];
	ssize_t n;

	if (t->cap_fd < 0)
		return;
	while ((n = pread(t->cap_fd, buf, sizeof(buf) - 1, t->cap_off)) > 0) {
		char *end, *start;

		t->cap_off += n;
		buf[n] = 0;
		end = buf + n;
		while (end > buf && end[-1] == '\n')
			*--end = 0;
		start = strrchr(buf, '\n');
		start = start ? start + 1 : buf;
		if (*start) {
			snprintf(t->cap_last, sizeof(t->cap_last), "%s", start);
			top_sayf(t, "%s", t->cap_last);
		}
	}
}

static void put_line(int y, const char *s, int attr)
{
	if (y >= LINES)
		return;
	move(y, 0);
	clrtoeol();
	if (attr)
		attron(attr);
	/* columns, not bytes: addnstr cuts by bytes, so cut by characters */
	{
		int cols = COLS, used = 0;
		const char *p = s;
		mbstate_t ps = { 0 };

		while (*p && used < cols) {
			wchar_t wc;
			size_t k = mbrtowc(&wc, p, strlen(p), &ps);

			if (k == (size_t)-1 || k == (size_t)-2 || k == 0)
				break;
			p += k;
			used++;
		}
		addnstr(s, (int)(p - s));
		if (attr) {
			for (; used < cols; used++)
				addch(' ');
		}
	}
	if (attr)
		attroff(attr);
}

static void open_help(struct top *t)
{
	static const char *const help[] = {
		"camlheap top - keys",
		"",
		"  q, Ctrl-C     detach and quit (the program runs on, unaffected)",
		"  Up/Down j/k   move; PgUp/PgDn, Home/End",
		"  t             flat sites <-> call tree (top-down)",
		"  Enter         flat: the site's callstacks; tree: expand/collapse",
		"  Right/+ Left/-  tree: expand / collapse (Left on a leaf: to its parent)",
		"  e / c         tree: expand all / collapse all",
		"  a l g o s     sort by ALLOC/s, LIVE, GROWTH/s (the trend), AGE, SITE",
		"  < >           sort by the column left / right;  r  reverse the order",
		"  /             filter: rows whose name contains the text (empty: none;",
		"                Esc cancels the edit); Esc in the table clears the filter",
		"  f  (or z)     freeze the display (sampling goes on); again to thaw",
		"  w             write the profile so far as pprof (.pb.gz)",
		"  m             write the recording so far as a memtrace trace",
		"  h, ?          this help",
		"",
		"ALLOC/s: bytes allocated per second over the rate window, \u00b1 its 95 % bound.",
		"LIVE: bytes of the sampled blocks alive now.  TREND: live bytes over the trend",
		"span, scaled to the row's largest (a tree node's starts when first shown).",
		"GROWTH/s (100 columns and more): its slope.  AGE: median age of the live",
		"bytes.  TOTAL (110 columns and more): bytes allocated since attach.",
		"All are estimates from samples: bytes = samples / lambda * 8; LIVE, TREND",
		"and AGE cover the blocks allocated since camlheap attached.",
		"",
	};

	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	t->dlines = g_ptr_array_new_with_free_func(g_free);
	for (size_t i = 0; i < sizeof(help) / sizeof(help[0]); i++)
		g_ptr_array_add(t->dlines, g_strdup(help[i]));
	t->dscroll = 0;
	t->mode = MODE_DETAIL;
}

/* Display width of the first `n` bytes of a UTF-8 string. */
static int text_width(const char *s, size_t n)
{
	mbstate_t ps = { 0 };
	int w = 0;

	for (size_t i = 0; i < n;) {
		wchar_t wc;
		size_t k = mbrtowc(&wc, s + i, n - i, &ps);

		if (k == (size_t)-1 || k == (size_t)-2 || k == 0) {
			memset(&ps, 0, sizeof(ps));
			k = 1;
			wc = '?';
		}
		int cw = wcwidth(wc);

		w += cw > 0 ? cw : 0;
		i += k;
	}
	return w;
}

/* Byte offsets of the UTF-8 characters before and after `pos`. */
static size_t utf8_prev(const char *s, size_t pos)
{
	while (pos > 0 && ((unsigned char)s[--pos] & 0xc0) == 0x80)
		;
	return pos;
}

static size_t utf8_next(const char *s, size_t pos)
{
	if (s[pos])
		pos++;
	while (((unsigned char)s[pos] & 0xc0) == 0x80)
		pos++;
	return pos;
}

/* A header line: fields are separated by two spaces (or ", "); a line too
 * wide for the terminal loses whole fields at its end, never half a
 * number. */
static void put_fields(int y, const char *s, int attr)
{
	size_t n = strlen(s), cut = n;
	char buf[1024];

	if (text_width(s, n) <= COLS) {
		put_line(y, s, attr);
		return;
	}
	for (size_t i = 1; i + 1 < n; i++)
		if (((s[i] == ' ' && s[i + 1] == ' ') || (s[i] == ',' && s[i + 1] == ' ')) && text_width(s, i) <= COLS)
			cut = i;
	if (cut == n) {
		put_line(y, s, attr);
		return;
	}
	snprintf(buf, sizeof(buf), "%.*s", (int)cut, s);
	put_line(y, buf, attr);
}

static void draw_detail(struct top *t)
{
	int y = 0;
	long last = (long)t->dlines->len - (LINES - 1);

	/* no scrolling past the end (also after a resize) */
	if (t->dscroll > last)
		t->dscroll = last;
	if (t->dscroll < 0)
		t->dscroll = 0;
	erase();
	/* long lines (full paths) wrap, continued 6 columns in */
	for (long i = t->dscroll; y < LINES - 1 && i < (long)t->dlines->len; i++) {
		const char *l = t->dlines->pdata[i];
		size_t n = strlen(l), off = 0;
		int attr = i == 0 ? A_BOLD : 0;

		do {
			char part[4096];
			int ind = off ? 6 : 0, room = COLS - ind > 10 ? COLS - ind : 10;

			snprintf(part, sizeof(part), "%*s%.*s", ind, "", room, l + off);
			put_line(y++, part, attr);
			off += (size_t)room;
		} while (off < n && y < LINES - 1);
	}
	put_line(LINES - 1, "Up/Down PgUp/PgDn scroll; any other key: back", A_REVERSE);
	refresh();
}

void top_draw(struct top *t)
{
	char hl[4][512], line[8192];
	int y, body, growth;
	double now;
	struct timespec m;

	if (!t->tui)
		return;
	if (t->mode == MODE_DETAIL) {
		draw_detail(t);
		return;
	}
	erase();
	if (LINES < 8 || COLS < 40) {
		put_line(0, "camlheap top: too small", 0);
		put_line(1, "(40x8 at least; q quits)", 0);
		refresh();
		return;
	}
	top_header_lines(t, hl);
	put_fields(0, hl[0], A_BOLD);
	for (y = 1; y < 4; y++)
		put_fields(y, hl[y], 0);
	/* the name column keeps at least ~17 characters: narrower
	 * terminals lose TREND, then the bound */
	growth = COLS >= 110 ? 2 : COLS >= 100 ? 1 : COLS >= 70 ? 0 : COLS >= 55 ? -1 : -2;
	top_table_header(t, growth, line, sizeof(line));
	put_line(4, line, A_REVERSE);
	body = LINES - 6;
	if (t->sel >= (long)t->rows->len)
		t->sel = t->rows->len ? (long)t->rows->len - 1 : 0;
	if (t->sel < t->scroll)
		t->scroll = t->sel;
	if (t->sel >= t->scroll + body)
		t->scroll = t->sel - body + 1;
	if (t->scroll < 0)
		t->scroll = 0;
	for (y = 0; y < body && t->scroll + y < (long)t->rows->len; y++) {
		top_row_text(t, t->rows->pdata[t->scroll + y], growth, line, sizeof(line));
		put_line(5 + y, line, t->scroll + y == t->sel ? A_REVERSE : 0);
	}
	if (!t->rows->len)
		put_line(5, t->filter[0] ? "  (no row matches the filter)" : "  (no samples yet)", 0);
	clock_gettime(CLOCK_MONOTONIC, &m);
	now = (double)m.tv_sec + (double)m.tv_nsec * 1e-9;
	if (t->mode == MODE_PROMPT) {
		const char *label = t->pkind == PROMPT_FILTER ? "Filter: "
				    : t->pkind == PROMPT_PPROF ? "Write pprof to: "
							       : "Write memtrace to: ";
		int room = COLS - (int)strlen(label) - 1, col;
		size_t from = 0;

		/* the text scrolls so that the cursor stays in view (widths in
		 * columns: UTF-8 text is edited whole characters at a time) */
		if (room < 1)
			room = 1;
		while (text_width(t->pbuf + from, t->pcur - from) > room)
			from = utf8_next(t->pbuf, from);
		snprintf(line, sizeof(line), "%s%s", label, t->pbuf + from);
		put_line(LINES - 1, line, 0);
		curs_set(1);
		col = (int)strlen(label) + text_width(t->pbuf + from, t->pcur - from);
		move(LINES - 1, col < COLS ? col : COLS - 1);
	} else {
		curs_set(0);
		if (t->msg[0] && now < t->msg_until)
			snprintf(line, sizeof(line), "%s", t->msg);
		else if (t->ended)
			snprintf(line, sizeof(line), "%s - the figures are those at its end; w/m write them, q quits",
				 t->end_reason);
		else
			snprintf(line, sizeof(line), "h help  q quit  t tree  a/l/g/o/s sort  / filter  f freeze  w pprof  m memtrace");
		if ((int)strlen(line) > COLS && LINES >= 10) {
			/* a long message (an error naming a path) on two lines */
			int cut = COLS;

			while (cut > COLS / 2 && line[cut] != ' ')
				cut--;
			if (line[cut] != ' ')
				cut = COLS;
			put_line(LINES - 1, line + cut + (line[cut] == ' '), t->ended ? A_BOLD : 0);
			line[cut] = 0;
			put_line(LINES - 2, line, t->ended ? A_BOLD : 0);
		} else {
			put_line(LINES - 1, line, t->ended ? A_BOLD : 0);
		}
	}
	refresh();
}

/* The detail of a flat row: its callstacks, heaviest first. */
static void open_detail(struct top *t, struct node *g)
{
	GPtrArray *sites = g_ptr_array_new();
	GHashTableIter it;
	gpointer k, v;
	char b1[16], b2[16];

	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	t->dlines = g_ptr_array_new_with_free_func(g_free);
	g_hash_table_iter_init(&it, t->sinfo);
	while (g_hash_table_iter_next(&it, &k, &v))
		if (((struct siteinfo *)v)->group == g)
			g_ptr_array_add(sites, k);
	{
		const struct profile_site **arr = (const struct profile_site **)sites->pdata;

		/* heaviest first */
		for (guint i = 1; i < sites->len; i++)
			for (guint j = i; j > 0 && arr[j]->samples > arr[j - 1]->samples; j--) {
				const struct profile_site *x = arr[j];

				arr[j] = arr[j - 1];
				arr[j - 1] = x;
			}
	}
	g_ptr_array_add(t->dlines, g_strdup_printf("%u callstack%s of %s", sites->len, sites->len == 1 ? "" : "s", g->full));
	for (guint i = 0; i < sites->len; i++) {
		const struct profile_site *s = sites->pdata[i];

		g_ptr_array_add(t->dlines, g_strdup(""));
		g_ptr_array_add(t->dlines,
				g_strdup_printf("#%u  %s heap: %s allocated since attach (%llu samples), %s live", i + 1,
						report_kind_name(s->kind), top_fmt_b(to_bytes(t, (double)s->samples), b1, sizeof(b1)),
						(unsigned long long)s->samples,
						top_fmt_b(to_bytes(t, (double)s->live_samples), b2, sizeof(b2))));
		if (!s->stack) {
			g_ptr_array_add(t->dlines, g_strdup("    [stack frames lost]"));
			continue;
		}
		const char *prev = NULL;
		unsigned run = 0;

		for (uint32_t f = 0; f <= s->stack->nframes; f++) {
			const struct framelabels *fl = f < s->stack->nframes
				? top_frame_labels(t, s->stack->frames[f], f == 0 ? s->alloc_idx : 0) : NULL;

			for (unsigned j = 0; j < (fl ? fl->n : 1); j++) {
				const char *cur = fl ? fl->fullv[j] : NULL;

				if (prev && cur == prev) {
					run++;
					continue;
				}
				if (prev)
					g_ptr_array_add(t->dlines, run > 1 ? g_strdup_printf("    %s [x%u]", prev, run)
									   : g_strdup_printf("    %s", prev));
				prev = cur;
				run = 1;
			}
		}
		if (s->stack->term != CH_TERM_CLEAN)
			g_ptr_array_add(t->dlines,
					g_strdup_printf("    [stack walk ended: %s]", report_term_name(s->stack->term)));
	}
	g_ptr_array_free(sites, TRUE);
	t->dscroll = 0;
	t->mode = MODE_DETAIL;
}

static void set_expand_all(struct node *n, bool on)
{
	if (n->kids && n->kids->len) {
		n->expanded = on;
		n->expand_set = true;
		for (guint i = 0; i < n->kids->len; i++)
			set_expand_all(n->kids->pdata[i], on);
	}
}

static void default_name(struct top *t, bool memtrace, char *out, size_t len)
{
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;

	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%S", &tm);
	snprintf(out, len, "camlheap-%d-%s.%s", t->src.pid, stamp, memtrace ? "ctf" : "pb.gz");
}

static void prompt_done(struct top *t, bool accept)
{
	char msg[600];
	int ret;

	t->mode = MODE_MAIN;
	if (t->pkind == PROMPT_FILTER) {
		if (!accept)
			snprintf(t->filter, sizeof(t->filter), "%s", t->pold);
		top_build_rows(t);
		return;
	}
	if (!accept || !t->pbuf[0]) {
		top_sayf(t, "nothing written");
		return;
	}
	msg[0] = 0;
	ret = t->src.write_profile ? t->src.write_profile(t->src.ctx, t->pkind == PROMPT_MEMTRACE, t->pbuf, msg, sizeof(msg))
				   : -ENOTSUP;
	if (ret < 0 && msg[0])
		top_sayf(t, "%s", msg);
	else if (ret < 0)
		top_sayf(t, "cannot write %s: %s", t->pbuf, strerror(-ret));
	else
		top_sayf(t, "wrote %s (%s)", t->pbuf,
		    t->pkind == PROMPT_MEMTRACE ? "camlheap report FILE, memtrace_viewer" : "go tool pprof FILE");
}

static void start_prompt(struct top *t, int kind)
{
	t->pkind = kind;
	t->mode = MODE_PROMPT;
	if (kind == PROMPT_FILTER) {
		snprintf(t->pold, sizeof(t->pold), "%s", t->filter);
		snprintf(t->pbuf, sizeof(t->pbuf), "%s", t->filter);
		t->pcur = strlen(t->pbuf);
	} else {
		default_name(t, kind == PROMPT_MEMTRACE, t->pbuf, sizeof(t->pbuf));
		t->pcur = strlen(t->pbuf);
		if (kind == PROMPT_MEMTRACE && t->st.memtrace_off) {
			t->mode = MODE_MAIN;
			top_sayf(t, "no memtrace: %s", t->st.memtrace_off);
		}
	}
}

/* A line editor: characters go in at the cursor; Left/Right/Home/End
 * (^A/^E) move it, Backspace and Delete erase, ^U clears, Enter accepts,
 * Esc cancels. */
static void key_prompt(struct top *t, int c)
{
	size_t n = strlen(t->pbuf);

	if (t->pcur > n)
		t->pcur = n;
	if (c == 27) {
		prompt_done(t, false);
		return;
	}
	if (c == '\n' || c == '\r' || c == KEY_ENTER) {
		prompt_done(t, true);
		return;
	}
	if (c == KEY_BACKSPACE || c == 127 || c == 8) {
		if (t->pcur) {
			size_t p = utf8_prev(t->pbuf, t->pcur);

			memmove(t->pbuf + p, t->pbuf + t->pcur, n - t->pcur + 1);
			t->pcur = p;
		}
	} else if (c == KEY_DC) {
		if (t->pcur < n) {
			size_t q = utf8_next(t->pbuf, t->pcur);

			memmove(t->pbuf + t->pcur, t->pbuf + q, n - q + 1);
		}
	} else if (c == KEY_LEFT) {
		t->pcur = utf8_prev(t->pbuf, t->pcur);
	} else if (c == KEY_RIGHT) {
		t->pcur = utf8_next(t->pbuf, t->pcur);
	} else if (c == KEY_HOME || c == 1) { /* ^A */
		t->pcur = 0;
	} else if (c == KEY_END || c == 5) { /* ^E */
		t->pcur = n;
	} else if (c == 21) { /* ^U */
		t->pbuf[0] = 0;
		t->pcur = 0;
	} else if (c >= 32 && c < 256 && c != 127 && n + 1 < sizeof(t->pbuf)) {
		memmove(t->pbuf + t->pcur + 1, t->pbuf + t->pcur, n - t->pcur + 1);
		t->pbuf[t->pcur++] = (char)c;
	}
	if (t->pkind == PROMPT_FILTER) {
		snprintf(t->filter, sizeof(t->filter), "%s", t->pbuf);
		top_build_rows(t);
	}
}

static void move_sel(struct top *t, long d)
{
	t->sel += d;
	if (t->sel >= (long)t->rows->len)
		t->sel = (long)t->rows->len - 1;
	if (t->sel < 0)
		t->sel = 0;
	t->selnode = t->rows->len ? t->rows->pdata[t->sel] : NULL;
}

/* One key in the main view.  Returns true to quit. */
static bool key_main(struct top *t, int c)
{
	struct node *n = t->selnode;
	long page = LINES > 8 ? LINES - 7 : 1;

	switch (c) {
	case 'q': case 'Q': return true;
	case 'h': case '?': open_help(t); break;
	case KEY_UP: case 'k': move_sel(t, -1); break;
	case KEY_DOWN: case 'j': move_sel(t, 1); break;
	case KEY_PPAGE: move_sel(t, -page); break;
	case KEY_NPAGE: move_sel(t, page); break;
	case KEY_HOME: move_sel(t, -(long)t->rows->len); break;
	case KEY_END: move_sel(t, (long)t->rows->len); break;
	case 't':
		t->tree_view = !t->tree_view;
		top_build_tree(t);
		t->selnode = NULL;
		break;
	case '\n': case '\r': case KEY_ENTER:
		if (!n)
			break;
		if (!t->tree_view)
			open_detail(t, n);
		else if (n->kids && n->kids->len) {
			n->expanded = !top_node_expanded(t, n);
			n->expand_set = true;
		}
		break;
	case KEY_RIGHT: case '+':
		if (t->tree_view && n && n->kids && n->kids->len) {
			n->expanded = n->expand_set = true;
		}
		break;
	case KEY_LEFT: case '-':
		if (t->tree_view && n) {
			if (n->kids && n->kids->len && top_node_expanded(t, n)) {
				n->expanded = false;
				n->expand_set = true;
			} else if (n->parent) {
				t->selnode = n->parent;
			}
		}
		break;
	case 'e': case 'c':
		for (guint i = 0; t->tree_view && i < t->roots->len; i++)
			set_expand_all(t->roots->pdata[i], c == 'e');
		break;
	case 'a': t->sort = TOP_SORT_ALLOC; break;
	case 'l': t->sort = TOP_SORT_LIVE; break;
	case 'g': t->sort = TOP_SORT_GROWTH; break;
	case 'o': t->sort = TOP_SORT_AGE; break;
	case 's': t->sort = TOP_SORT_SITE; break;
	case '<': t->sort = (enum top_sort)((t->sort + TOP_SORT__COUNT - 1) % TOP_SORT__COUNT); break;
	case '>': t->sort = (enum top_sort)((t->sort + 1) % TOP_SORT__COUNT); break;
	case 'r': case 'R': t->reverse = !t->reverse; break;
	case '/': start_prompt(t, PROMPT_FILTER); break;
	case 27: t->filter[0] = 0; break;
	case 'f': case 'z': case 'Z':
		t->frozen = !t->frozen;
		top_sayf(t, t->frozen ? "display frozen (sampling goes on): f to thaw" : "display thawed");
		break;
	case 'w': start_prompt(t, PROMPT_PPROF); break;
	case 'm': start_prompt(t, PROMPT_MEMTRACE); break;
	case 3: return true; /* ^C in raw input */
	default: break;
	}
	return false;
}

bool top_keys(struct top *t)
{
	int c;
	bool quit = false;

	if (!t->tui)
		return false;
	while (!quit && (c = getch()) != ERR) {
		if (c == KEY_RESIZE)
			continue;
		if (t->mode == MODE_DETAIL) {
			long page = LINES > 2 ? LINES - 2 : 1;

			if (c == KEY_DOWN || c == 'j')
				t->dscroll++;
			else if (c == KEY_UP || c == 'k')
				t->dscroll--;
			else if (c == KEY_NPAGE || c == ' ')
				t->dscroll += page;
			else if (c == KEY_PPAGE)
				t->dscroll -= page;
			else if (c == KEY_HOME)
				t->dscroll = 0;
			else if (c == KEY_END)
				t->dscroll = (long)t->dlines->len - 1;
			else
				t->mode = MODE_MAIN;
			if (t->dscroll > (long)t->dlines->len - 1)
				t->dscroll = (long)t->dlines->len - 1;
			if (t->dscroll < 0)
				t->dscroll = 0;
		} else if (t->mode == MODE_PROMPT) {
			key_prompt(t, c);
		} else {
			quit = key_main(t, c);
		}
		if (!quit && t->mode == MODE_MAIN)
			top_build_rows(t);
	}
	if (!quit)
		top_draw(t);
	return quit;
}

void top_resize(struct top *t)
{
	struct winsize ws;

	if (!t->tui)
		return;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
		resizeterm(ws.ws_row, ws.ws_col);
	clear();
	top_draw(t);
}
