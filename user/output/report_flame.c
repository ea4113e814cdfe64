/* report_flame.c -- collapsed stacks (flamegraph.pl / speedscope input) and
 * the interactive SVG flame graph drawn by flamegraph.pl (report.h). */
#define _GNU_SOURCE
#include "output/report_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/wait.h>
#include <unistd.h>

#include <glib.h>

/* Collapsed line key: the frames root first. */
static char *collapsed_key(const struct profile_site *s, struct modules *mods, bool by_domain)
{
	GString *g = g_string_new(NULL);
	struct sym_frame fr[MAX_INLINE];

	/* split by domain: each domain is a root of its own */
	if (by_domain)
		g_string_append_printf(g, "[domain_%u]", s->domain);
	/* memory outside the OCaml heap is never drawn as heap: a root frame
	 * of its own per kind (custom blocks' declared bytes, bigarray data,
	 * malloc) */
	if (s->kind == CH_KIND_CUSTOM || s->kind == CH_KIND_BIGARRAY || s->kind == CH_KIND_MALLOC)
		g_string_append_printf(g, "%s[outside_the_heap:_%s]", g->len ? ";" : "",
				       s->kind == CH_KIND_CUSTOM ? "custom_blocks_declare"
				       : s->kind == CH_KIND_BIGARRAY ? "bigarray_data"
								     : "malloc");
	/* markers too: a collapsed frame holds no space (the value follows
	 * the last one) */
	if (!s->stack) {
		if (g->len)
			g_string_append_c(g, ';');
		g_string_append(g, "[stack_frames_lost]");
		return g_string_free(g, FALSE);
	}
	if (s->stack->term != CH_TERM_CLEAN) {
		size_t at = g->len;

		if (g->len)
			g_string_append_c(g, ';');
		g_string_append_printf(g, "[truncated:_%s]", report_term_name(s->stack->term));
		for (size_t k = at; k < g->len; k++)
			if (g->str[k] == ' ')
				g->str[k] = '_';
	}
	for (int64_t i = (int64_t)s->stack->nframes - 1; i >= 0; i--) {
		int n = modules_lookup(mods, s->stack->frames[i], i == 0 ? s->alloc_idx : 0, fr, MAX_INLINE);

		/* fr[] is innermost first; root-first order reverses it */
		for (int j = n - 1; j >= 0; j--) {
			if (g->len)
				g_string_append_c(g, ';');
			for (const char *q = fr[j].function; *q; q++)
				g_string_append_c(g, *q == ';' || *q == ' ' ? '_' : *q);
		}
	}
	if (s->stack->nframes == 0 && s->stack->term == CH_TERM_CLEAN) {
		if (g->len)
			g_string_append_c(g, ';');
		g_string_append(g, "[no_OCaml_frames]");
	}
	return g_string_free(g, FALSE);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Write one collapsed line; for flamegraph.pl (`svg`), "<" and ">" as
 * U+2039 and U+203A: it turns them into "(" and ")" (tr/<>/()/), which
 * garbles an operator's name ("Stdlib.(<=)" read "Stdlib.((=)"). */
static void collapsed_line(FILE *out, const char *stack, double bytes, bool svg)
{
	if (!svg) {
		fprintf(out, "%s %.0f\n", stack, bytes);
		return;
	}
	for (const char *c = stack; *c; c++)
		fputs(*c == '<' ? "\u2039" : *c == '>' ? "\u203a" : (char[2]){ *c, 0 }, out);
	fprintf(out, " %.0f\n", bytes);
}

static int write_collapsed(FILE *out, const struct profile *p, struct modules *mods, int value, bool svg);

int report_write_collapsed(FILE *out, const struct profile *p, struct modules *mods, int value)
{
	return write_collapsed(out, p, mods, value, false);
}

static int write_collapsed(FILE *out, const struct profile *p, struct modules *mods, int value, bool svg)
{
	bool live = value != REPORT_VALUE_ALLOC;
	const struct profile_site **sites = NULL;
	size_t nsites = profile_sites_sorted(p, &sites);
	GHashTable *lines = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	GHashTableIter it;
	gpointer k, v;
	char **keys;
	size_t n = 0;

	for (size_t i = 0; i < nsites; i++) {
		char *key;
		uint64_t *samples;

		if (live && !(value == REPORT_VALUE_PEAK ? sites[i]->peak_live_samples : sites[i]->live_samples))
			continue;
		key = collapsed_key(sites[i], mods, p->by_domain);
		samples = g_hash_table_lookup(lines, key);

		if (!samples) {
			samples = g_new0(uint64_t, 1);
			g_hash_table_insert(lines, key, samples);
		} else {
			g_free(key);
		}
		*samples += value == REPORT_VALUE_LIVE   ? sites[i]->live_samples
			    : value == REPORT_VALUE_PEAK ? sites[i]->peak_live_samples
							 : sites[i]->samples;
	}
	keys = calloc(g_hash_table_size(lines) + 1, sizeof(*keys));
	g_hash_table_iter_init(&it, lines);
	while (keys && g_hash_table_iter_next(&it, &k, &v))
		keys[n++] = k;
	qsort(keys, n, sizeof(*keys), str_cmp);
	for (size_t i = 0; i < n; i++) {
		uint64_t *samples = g_hash_table_lookup(lines, keys[i]);

		collapsed_line(out, keys[i], report_est_bytes(p, *samples), svg);
	}
	free(keys);
	g_hash_table_destroy(lines);
	free(sites);
	return ferror(out) ? -(errno ? errno : EIO) : 0; /* EPIPE: the reader went away */
}

/* Copy flamegraph.pl's SVG from `fd` (closed) to `out`, its script's
 * label line fixed: a zoomed frame's label is its title without the first
 * "(...)" in it, meant to be the "(N bytes, P%)" suffix, which took an
 * OCaml name's "(fun)" or operator instead ("Compile.f. (418,080 bytes");
 * only the trailing suffix is dropped now.  Returns 0 or -errno. */
static int svg_copy_fixed(int fd, FILE *out)
{
	static const char from[] = ".replace(/\\([^(]*\\)/,\"\")", to[] = ".replace(/ \\([^()]*\\)$/,\"\")";
	FILE *in = fdopen(fd, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	if (!in) {
		close(fd);
		return -ENOMEM;
	}
	rewind(in);
	while ((n = getline(&line, &cap, in)) > 0) {
		char *at = strstr(line, from);

		if (at) {
			fwrite(line, 1, (size_t)(at - line), out);
			fputs(to, out);
			fputs(at + strlen(from), out);
		} else {
			fwrite(line, 1, (size_t)n, out);
		}
	}
	free(line);
	fclose(in);
	return ferror(out) ? -(errno ? errno : EIO) : 0;
}

/* flamegraph.pl: $CAMLHEAP_FLAMEGRAPH, else on PATH, else the copy Debian
 * ships in libdevel-nytprof-perl.  NULL if none. */
static const char *flamegraph_script(char *buf, size_t len)
{
	static const char *const fixed[] = { "/usr/share/perl5/Devel/NYTProf/flamegraph.pl",
					     "/usr/local/share/perl5/Devel/NYTProf/flamegraph.pl" };
	const char *env = getenv("CAMLHEAP_FLAMEGRAPH"), *path = getenv("PATH");

	if (env && *env)
		return access(env, R_OK) == 0 ? env : NULL;
	while (path && *path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);

		if (n && (size_t)snprintf(buf, len, "%.*s/flamegraph.pl", (int)n, path) < len && access(buf, R_OK) == 0)
			return buf;
		path = colon ? colon + 1 : NULL;
	}
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (access(fixed[i], R_OK) == 0)
			return fixed[i];
	return NULL;
}

/* Interactive flame graph (click to zoom, search) through flamegraph.pl
 * --colors mem, from the collapsed stacks of m->value.  Every stack is
 * given, so widths and percentages are of the true total; frames narrower
 * than a pixel are not drawn (flamegraph.pl --minwidth), which keeps
 * browsers fast on programs with tens of thousands of stacks.  Deep stacks
 * (over 60 frames) are drawn as an icicle, roots at the top, so that the
 * part that matters is where the page opens. */
int report_write_svg(FILE *out, const struct profile *p, const struct report_meta *m, struct modules *mods)
{
	char script_buf[PATH_MAX], tmpl[] = "/tmp/camlheap-svg-XXXXXX", svg_tmpl[] = "/tmp/camlheap-svg-out-XXXXXX",
	     title[768];
	const char *script = flamegraph_script(script_buf, sizeof(script_buf));
	FILE *in;
	int fd, svg_fd, ret = 0, status;
	unsigned depth = 0, nlines = 0;
	pid_t pid;

	if (!script) {
		fprintf(stderr, "camlheap: --format svg needs flamegraph.pl: install Debian's libdevel-nytprof-perl "
				"(it ships one), put flamegraph.pl on PATH, or set CAMLHEAP_FLAMEGRAPH to its path\n");
		return -ENOENT;
	}
	fd = mkstemp(tmpl);
	if (fd < 0)
		return -errno;
	unlink(tmpl);
	in = fdopen(fd, "w+");
	if (!in) {
		close(fd);
		return -ENOMEM;
	}
	ret = write_collapsed(in, p, mods, m->value, true);
	if (ret == 0 && fflush(in) == EOF)
		ret = -EIO;
	if (ret < 0) {
		fclose(in);
		return ret;
	}
	{
		char *line = NULL;
		size_t cap = 0;

		rewind(in);
		while (getline(&line, &cap, in) > 0) {
			unsigned d = 1;

			for (const char *c = line; *c; c++)
				d += *c == ';';
			if (d > depth)
				depth = d;
			nlines++;
		}
		free(line);
	}
	if (!nlines) {
		fclose(in);
		fprintf(stderr, "camlheap: nothing to draw: no %s bytes in this profile%s\n",
			m->value == REPORT_VALUE_ALLOC ? "allocated" : "live",
			m->selection ? " (after the selection)" : "");
		return -ENODATA;
	}
	snprintf(title, sizeof(title), "camlheap: %s, %s (pid %d); memory outside the OCaml heap under [outside the heap] roots%s%s%s",
		 m->value == REPORT_VALUE_LIVE   ? "bytes alive at the end"
		 : m->value == REPORT_VALUE_PEAK ? "each site's own peak live bytes, summed (sites peak at different times)"
						 : "allocated bytes",
		 m->exe ? m->exe : "?", m->pid, m->selection ? " - " : "", m->selection ? m->selection : "",
		 depth > 60 ? " - icicle: roots at the top" : "");
	rewind(in);
	fflush(out);
	svg_fd = mkstemp(svg_tmpl);
	if (svg_fd < 0) {
		ret = -errno;
		fclose(in);
		return ret;
	}
	unlink(svg_tmpl);
	pid = fork();
	if (pid < 0) {
		ret = -errno;
		fclose(in);
		close(svg_fd);
		return ret;
	}
	if (pid == 0) {
		const char *argv[20];
		int a = 0;

		dup2(fileno(in), 0);
		dup2(svg_fd, 1);
		argv[a++] = "perl";
		argv[a++] = script;
		argv[a++] = "--title";
		argv[a++] = title;
		argv[a++] = "--countname";
		argv[a++] = "bytes";
		argv[a++] = "--nametype";
		argv[a++] = "Site:";
		argv[a++] = "--colors";
		argv[a++] = "mem";
		argv[a++] = "--hash";
		argv[a++] = "--minwidth";
		argv[a++] = "1";
		if (depth > 60)
			argv[a++] = "--inverted";
		argv[a] = NULL;
		execvp("perl", (char *const *)argv);
		fprintf(stderr, "camlheap: cannot run perl %s: %s\n", script, strerror(errno));
		_exit(127);
	}
	fclose(in);
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR) {
			close(svg_fd);
			return -errno;
		}
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "camlheap: %s failed (status %d)\n", script, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		close(svg_fd);
		return -EIO;
	}
	return svg_copy_fixed(svg_fd, out);
}
