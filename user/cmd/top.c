/* top.c -- `camlheap top` (top.h): the live view, interactive (ncurses) or
 * batch (text on stdout, like top -b).  Here its life cycle: start (the
 * terminal, stderr kept aside), the refreshes on time, the end and the
 * lingering view after it, teardown; the figures are top_model.c's, their
 * text top_text.c's, the screen and the keys top_screen.c's.
 */
#define _GNU_SOURCE
#define NCURSES_WIDECHAR 1
#include "cmd/top.h"
#include "cmd/top_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <ncurses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

static const char *const sort_names[TOP_SORT__COUNT] = { "alloc", "live", "growth", "age", "site" };

int top_parse_sort(const char *name, enum top_sort *out)
{
	for (int i = 0; i < TOP_SORT__COUNT; i++)
		if (!strcmp(name, sort_names[i])) {
			*out = (enum top_sort)i;
			return 0;
		}
	return -1;
}

/* ---- life cycle ------------------------------------------------------------------ */

int top_new(const struct top_opts *o, const struct top_source *src, double now, struct top **out, char *msg,
	    size_t len)
{
	struct top *t = g_new0(struct top, 1);
	double delay = o->delay_s > 0 ? o->delay_s : 1.0;

	t->o = *o;
	t->src = *src;
	t->o.delay_s = delay;
	/* memory: W+1 numbers per site, H per row; longer spans than these
	 * caps are cut (the header says the spans in force) */
	t->W = (unsigned)fmin(600, fmax(1, lround((o->window_s > 0 ? o->window_s : 5.0) / delay)));
	t->H = (unsigned)fmin(3600, fmax(t->W, lround((o->trend_s > 0 ? o->trend_s : 120.0) / delay))) + 1;
	t->o.trend_s = (t->H - 1) * delay;
	t->times = g_new0(double, t->H);
	t->g_alloc = g_new0(double, t->H);
	t->g_live = g_new0(double, t->H);
	t->g_minor = g_new0(double, t->H);
	t->g_major = g_new0(double, t->H);
	t->g_samples = g_new0(double, t->H);
	t->g_heap = g_new0(double, t->H);
	t->g_rss = g_new0(double, t->H);
	t->sinfo = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, top_siteinfo_free);
	t->groups = g_hash_table_new(g_str_hash, g_str_equal);
	t->group_list = g_ptr_array_new_with_free_func(top_node_free);
	t->roots = g_ptr_array_new_with_free_func(top_node_free);
	t->hist_nodes = g_ptr_array_new();
	t->flcache = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, top_framelabels_free);
	t->strs = g_string_chunk_new(65536);
	t->rows = g_ptr_array_new();
	t->sort = o->sort;
	t->reverse = o->reverse;
	t->tree_view = o->tree;
	t->cap_fd = t->saved_err = -1;
	if (o->filter)
		snprintf(t->filter, sizeof(t->filter), "%s", o->filter);
	t->t0 = now;
	t->next = now + delay;
	setlocale(LC_CTYPE, "");
	t->utf8 = !strcmp(nl_langinfo(CODESET), "UTF-8");
	if (t->tree_view)
		top_build_tree(t);
	/* refresh 0: the figures at the start, from which the first rates run */
	t->tick = -1;
	top_sample(t, now);
	if (!o->batch) {
		SCREEN *scr;

		fflush(stderr);
		t->cap_fd = open(P_tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
		if (t->cap_fd < 0) {
			FILE *f = tmpfile();

			t->cap_fd = f ? dup(fileno(f)) : -1;
			if (f)
				fclose(f);
		}
		scr = newterm(NULL, stdout, stdin);
		if (!scr) {
			snprintf(msg, len, "cannot drive the terminal (TERM=%s): use --batch", getenv("TERM") ? getenv("TERM") : "");
			if (t->cap_fd >= 0)
				close(t->cap_fd);
			t->cap_fd = -1;
			top_free(t);
			return -ENOTTY;
		}
		t->tui = true;
		cbreak();
		noecho();
		nonl();
		keypad(stdscr, TRUE);
		nodelay(stdscr, TRUE);
		set_escdelay(25);
		/* Home and End as rxvt, PuTTY, tmux and the Linux console send
		 * them, whatever terminfo says */
		define_key("\033[1~", KEY_HOME);
		define_key("\033[4~", KEY_END);
		define_key("\033[7~", KEY_HOME);
		define_key("\033[8~", KEY_END);
		define_key("\033[H", KEY_HOME);
		define_key("\033[F", KEY_END);
		define_key("\033OH", KEY_HOME);
		define_key("\033OF", KEY_END);
		curs_set(0);
		if (t->cap_fd >= 0) {
			t->saved_err = dup(STDERR_FILENO);
			dup2(t->cap_fd, STDERR_FILENO);
		}
		top_draw(t);
	}
	*out = t;
	return 0;
}

int top_input_fd(const struct top *t) { return t->tui ? STDIN_FILENO : -1; }

double top_next_refresh(const struct top *t) { return t->next; }

int top_refresh(struct top *t, double now)
{
	if (now < t->next)
		return 0;
	/* every delay, not drifting; after a stall, from now */
	t->next += t->o.delay_s;
	if (t->next <= now)
		t->next = now + t->o.delay_s;
	/* frozen: the figures stay (the profile goes on counting; the
	 * first rates after the thaw cover the frozen time) */
	if (!t->frozen || !t->tui)
		top_sample(t, now);
	top_read_captured(t);
	if (!t->tui) {
		int ret = top_print_batch(t);

		if (ret < 0)
			return ret;
	} else {
		if (!t->frozen)
			top_build_rows(t);
		top_draw(t);
	}
	return t->o.iterations > 0 && t->tick >= t->o.iterations;
}

void top_ended(struct top *t, double now, const char *reason, bool linger, int sigfd)
{
	/* after --iterations the last refresh printed is the end; else one
	 * more, with what the kernel handed over since (the last events) */
	bool more = !(t->o.iterations > 0 && t->tick >= t->o.iterations);
	struct timespec mono;

	clock_gettime(CLOCK_MONOTONIC, &mono);
	t->end_ns = (double)mono.tv_sec * 1e9 + (double)mono.tv_nsec;
	t->ended = true;
	snprintf(t->end_reason, sizeof(t->end_reason), "%s", reason);
	t->msg_until = 0; /* the end's notice, not an older message */
	if (more && now <= t->times[slot(t, t->tick)])
		now = t->times[slot(t, t->tick)] + 1e-3;
	if (more)
		top_sample(t, now);
	if (!t->tui) {
		top_read_captured(t);
		if (more && t->out_err == 0)
			top_print_batch(t);
		return;
	}
	t->frozen = false;
	top_build_rows(t);
	top_draw(t);
	if (!linger)
		return;
	for (;;) {
		struct pollfd fds[2] = { { .fd = STDIN_FILENO, .events = POLLIN }, { .fd = sigfd, .events = POLLIN } };

		if (poll(fds, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (fds[0].revents & (POLLHUP | POLLERR))
			return;
		if (fds[1].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sigfd, &si, sizeof(si)) == sizeof(si)) {
				if (si.ssi_signo == SIGWINCH)
					top_resize(t);
				else if (si.ssi_signo != SIGTSTP)
					return;
			}
		}
		if ((fds[0].revents & POLLIN) && top_keys(t))
			return;
	}
}

void top_free(struct top *t)
{
	if (!t)
		return;
	if (t->tui) {
		endwin();
		fflush(stdout);
	}
	if (t->saved_err >= 0) {
		char buf[65536];
		ssize_t n;
		off_t off = 0;

		fflush(stderr);
		dup2(t->saved_err, STDERR_FILENO);
		close(t->saved_err);
		/* what was said meanwhile, now that the screen is the shell's */
		while ((n = pread(t->cap_fd, buf, sizeof(buf), off)) > 0) {
			if (write(STDERR_FILENO, buf, (size_t)n) < 0)
				break;
			off += n;
		}
	}
	if (t->cap_fd >= 0)
		close(t->cap_fd);
	g_hash_table_destroy(t->sinfo);
	g_hash_table_destroy(t->groups);
	g_ptr_array_free(t->group_list, TRUE);
	if (t->root_by)
		g_hash_table_destroy(t->root_by);
	g_ptr_array_free(t->roots, TRUE);
	g_ptr_array_free(t->hist_nodes, TRUE);
	g_hash_table_destroy(t->flcache);
	g_string_chunk_free(t->strs);
	g_ptr_array_free(t->rows, TRUE);
	if (t->dlines)
		g_ptr_array_free(t->dlines, TRUE);
	g_free(t->times);
	g_free(t->g_alloc);
	g_free(t->g_live);
	g_free(t->g_minor);
	g_free(t->g_major);
	g_free(t->g_samples);
	g_free(t->g_heap);
	g_free(t->g_rss);
	g_free(t);
}
