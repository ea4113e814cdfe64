/* serve_config.c -- `camlheap serve`'s configuration file (serve.h), read
 * with GLib's GKeyFile (the freedesktop.org desktop-entry key file syntax:
 * [groups], key = value, # comments). */
#define _GNU_SOURCE
#include "cmd/serve.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <glib.h>

#include "camlheap.h"
#include "cmd/census_on.h"
#include "cmd/options_internal.h"

static const char *const serve_keys[] = { "output", "interval", "keep", "keep-bytes", "listen", "socket",
					  "rate", "host-budget", "max-processes", "max-depth", NULL };
static const char *const target_keys[] = { "exe", "unit", "cgroup", "pidfile", "rate", "budget", "malloc", "max-depth",
					   "executor", "census-on", NULL };

static bool in_list(const char *const *l, const char *k)
{
	for (; *l; l++)
		if (!strcmp(*l, k))
			return true;
	return false;
}

static int bad(char *err, size_t len, const char *path, const char *group, const char *key, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
static int bad(char *err, size_t len, const char *path, const char *group, const char *key, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, len, "%s: [%s]%s%s: ", path, group, key ? " " : "", key ? key : "");

	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < len)
		vsnprintf(err + n, len - (size_t)n, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int get_double(GKeyFile *kf, const char *path, const char *g, const char *k, double lo, double hi, bool lo_open,
		      double *out, char *err, size_t len)
{
	char *v = g_key_file_get_value(kf, g, k, NULL), *end;
	double d;

	if (!v)
		return 0;
	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || isnan(d) || d > hi || (lo_open ? d <= lo : d < lo)) {
		int r = bad(err, len, path, g, k, "'%s' is not a number in %s%g, %g]", v, lo_open ? "(" : "[", lo, hi);

		g_free(v);
		return r;
	}
	g_free(v);
	*out = d;
	return 0;
}

static bool valid_name(const char *n)
{
	if (!*n || strlen(n) > 64 || !strcmp(n, ".") || !strcmp(n, ".."))
		return false;
	for (; *n; n++)
		if (!g_ascii_isalnum(*n) && *n != '_' && *n != '-' && *n != '.')
			return false;
	return true;
}

static char *get_str(GKeyFile *kf, const char *g, const char *k)
{
	char *v = g_key_file_get_string(kf, g, k, NULL);

	if (v && !*v) {
		g_free(v);
		return NULL;
	}
	return v;
}

void serve_config_free(struct serve_config *c)
{
	for (size_t i = 0; i < c->ntargets; i++) {
		struct serve_target *t = &c->targets[i];

		g_free(t->name);
		g_free(t->exe);
		g_free(t->unit);
		g_free(t->cgroup);
		g_free(t->pidfile);
		g_free(t->executor);
		g_free(t->census_on);
	}
	free(c->targets);
	g_free(c->warnings);
	g_free(c->output);
	g_free(c->listen);
	g_free(c->socket);
	memset(c, 0, sizeof(*c));
}

/* The defaults of the [serve] keys, before the file's. */
static void set_defaults(struct serve_config *c)
{
	c->output = g_strdup("/var/lib/camlheap");
	c->interval_s = 60;
	c->keep = 10;
	c->keep_bytes = 1ull << 30;
	c->listen = g_strdup("127.0.0.1:6061");
	c->rate = 1e-5;
	c->max_processes = 256;
	c->max_depth = CH_DEFAULT_FRAMES;
}

/* Group *g is [serve] or [target:NAME], each of its keys one of that
 * group's, and no value has a comment after it.  Returns 0 or -EINVAL with
 * err set. */
static int check_group(GKeyFile *kf, const char *path, gchar **g, char *err, size_t len)
{
	gchar **keys = g_key_file_get_keys(kf, *g, NULL, NULL);
	bool is_serve = !strcmp(*g, "serve");
	bool is_target = !strncmp(*g, "target:", 7);
	int ret;

	if (!is_serve && !is_target) {
		g_strfreev(keys);
		return bad(err, len, path, *g, NULL,
			   "unknown group (groups are [serve] and [target:NAME])");
	}
	for (gchar **k = keys; k && *k; k++) {
		char *v = g_key_file_get_value(kf, *g, *k, NULL);
		const char *hash = v ? strchr(v, '#') : NULL;

		/* GKeyFile has no inline comments: "60  # every minute" is the value */
		if (hash && hash > v && (hash[-1] == ' ' || hash[-1] == '\t')) {
			ret = bad(err, len, path, *g, *k,
				  "'%s': a comment after a value is part of the value; put comments on lines of "
				  "their own", v);
			g_free(v);
			g_strfreev(keys);
			return ret;
		}
		g_free(v);
		if (!in_list(is_serve ? serve_keys : target_keys, *k)) {
			ret = bad(err, len, path, *g, *k, "unknown key (the keys of this group: %s)",
				  is_serve ? "output, interval, keep, keep-bytes, listen, socket, rate, host-budget, "
					     "max-processes"
					   : "exe, unit, cgroup, pidfile, rate, budget, malloc, executor");
			g_strfreev(keys);
			return ret;
		}
	}
	g_strfreev(keys);
	return 0;
}

/* The [serve] group's values into c.  Returns 0 or -EINVAL with err set. */
static int load_serve_group(GKeyFile *kf, const char *path, struct serve_config *c, char *err, size_t len)
{
	const char *g = "serve";
	struct stat st;
	char *v;
	double d;
	int ret;

	if ((v = get_str(kf, g, "output"))) {
		g_free(c->output);
		c->output = v;
		if (v[0] != '/')
			return bad(err, len, path, g, "output", "'%s' is not an absolute path", v);
		if (stat(v, &st) == 0 && !S_ISDIR(st.st_mode))
			return bad(err, len, path, g, "output", "'%s' exists and is not a directory", v);
	}
	if (get_double(kf, path, g, "interval", 0.1, 86400 * 7, false, &c->interval_s, err, len) < 0)
		return -EINVAL;
	d = c->keep;
	if (get_double(kf, path, g, "keep", 1, 1e6, false, &d, err, len) < 0)
		return -EINVAL;
	c->keep = (unsigned)d;
	if ((v = g_key_file_get_value(kf, g, "keep-bytes", NULL))) {
		int r = parse_size(v, &c->keep_bytes);

		if (r < 0 || c->keep_bytes < 4096) {
			ret = bad(err, len, path, g, "keep-bytes", "'%s' is not a size of at least 4K (e.g. 500M, 2G)", v);
			g_free(v);
			return ret;
		}
		g_free(v);
	}
	if ((v = get_str(kf, g, "listen"))) {
		g_free(c->listen);
		c->listen = v;
		if (strcmp(v, "none") && (!strrchr(v, ':') || atoi(strrchr(v, ':') + 1) <= 0 ||
					   atoi(strrchr(v, ':') + 1) > 65535))
			return bad(err, len, path, g, "listen", "'%s' is not HOST:PORT (or none)", v);
	}
	c->socket = get_str(kf, g, "socket");
	if (c->socket && (c->socket[0] != '/' || strlen(c->socket) >= 108))
		return bad(err, len, path, g, "socket", "'%s' is not an absolute path under 108 bytes", c->socket);
	if (get_double(kf, path, g, "rate", 0, 1, true, &c->rate, err, len) < 0 ||
	    get_double(kf, path, g, "host-budget", 0, 1e9, false, &c->host_budget, err, len) < 0)
		return -EINVAL;
	d = c->max_processes;
	if (get_double(kf, path, g, "max-processes", 1, 4096, false, &d, err, len) < 0)
		return -EINVAL;
	c->max_processes = (unsigned)d;
	d = c->max_depth;
	if (get_double(kf, path, g, "max-depth", 1, CH_MAX_FRAMES, false, &d, err, len) < 0)
		return -EINVAL;
	if (d != (unsigned)d)
		return bad(err, len, path, g, "max-depth", "not a whole number of frames");
	c->max_depth = (unsigned)d;
	return 0;
}

/* Group *g, "target:NAME", appended to c->targets with its values (the
 * rate defaults to c's, so [serve] is read first).  Returns 0, or -EINVAL
 * or -ENOMEM with err set (what was appended is c's, freed with it). */
static int load_target(GKeyFile *kf, const char *path, gchar **g, struct serve_config *c, char *err, size_t len)
{
	struct serve_target *t, *nt;
	struct stat st;
	GError *be = NULL;
	int ret;

	if (!valid_name(*g + 7))
		return bad(err, len, path, *g, NULL, "a target's name is 1-64 of A-Z a-z 0-9 _ - .");
	for (size_t i = 0; i < c->ntargets; i++)
		if (!strcmp(c->targets[i].name, *g + 7))
			return bad(err, len, path, *g, NULL, "a second target of that name");
	nt = realloc(c->targets, (c->ntargets + 1) * sizeof(*nt));
	if (!nt) {
		snprintf(err, len, "out of memory");
		return -ENOMEM;
	}
	c->targets = nt;
	t = &c->targets[c->ntargets++];
	memset(t, 0, sizeof(*t));
	t->name = g_strdup(*g + 7);
	t->exe = get_str(kf, *g, "exe");
	t->unit = get_str(kf, *g, "unit");
	t->cgroup = get_str(kf, *g, "cgroup");
	t->pidfile = get_str(kf, *g, "pidfile");
	t->executor = get_str(kf, *g, "executor");
	t->census_on = get_str(kf, *g, "census-on");
	t->rate = c->rate;
	t->max_depth = c->max_depth;
	if (!t->exe && !t->unit && !t->cgroup && !t->pidfile)
		return bad(err, len, path, *g, NULL, "no way to find its processes: give exe, unit, cgroup or pidfile");
	if (t->exe && t->exe[0] != '/')
		return bad(err, len, path, *g, "exe", "'%s' is not an absolute path", t->exe);
	if (t->exe) {
		/* matched against /proc/PID/exe, which is the real path */
		char *real = realpath(t->exe, NULL);

		if (real) {
			g_free(t->exe);
			t->exe = g_strdup(real);
			free(real);
		}
	}
	if (t->cgroup && t->cgroup[0] != '/')
		return bad(err, len, path, *g, "cgroup", "'%s' is not a cgroup path such as /system.slice/foo.service",
			   t->cgroup);
	if (t->unit && (strchr(t->unit, '/') || !strchr(t->unit, '.')))
		return bad(err, len, path, *g, "unit", "'%s' is not a unit name such as foo.service", t->unit);
	if (t->pidfile && t->pidfile[0] != '/')
		return bad(err, len, path, *g, "pidfile", "'%s' is not an absolute path", t->pidfile);
	if (t->pidfile && stat(t->pidfile, &st) == 0 && S_ISDIR(st.st_mode))
		return bad(err, len, path, *g, "pidfile", "'%s' is a directory (a pidfile is a file holding one PID)",
			   t->pidfile);
	if (t->executor && strcmp(t->executor, "auto") && strcmp(t->executor, "register") &&
	    strcmp(t->executor, "kernel") && strcmp(t->executor, "ptrace") && strcmp(t->executor, "observe"))
		return bad(err, len, path, *g, "executor", "'%s' is not auto, register, kernel, ptrace or observe",
			   t->executor);
	if (t->census_on) {
		struct census_on on;
		char why[512];

		if (census_on_parse(t->census_on, &on, why, sizeof(why)) < 0)
			return bad(err, len, path, *g, "census-on", "%s", why + strlen("--on: "));
	}
	if (get_double(kf, path, *g, "rate", 0, 1, true, &t->rate, err, len) < 0 ||
	    get_double(kf, path, *g, "budget", 0, 1e9, false, &t->budget, err, len) < 0)
		return -EINVAL;
	{
		double d = t->max_depth;

		if (get_double(kf, path, *g, "max-depth", 1, CH_MAX_FRAMES, false, &d, err, len) < 0)
			return -EINVAL;
		if (d != (unsigned)d)
			return bad(err, len, path, *g, "max-depth", "not a whole number of frames");
		t->max_depth = (unsigned)d;
	}
	if (g_key_file_has_key(kf, *g, "malloc", NULL)) {
		t->malloc = g_key_file_get_boolean(kf, *g, "malloc", &be);
		if (be) {
			ret = bad(err, len, path, *g, "malloc", "not true or false");
			g_error_free(be);
			return ret;
		}
	}
	return 0;
}

/* What GKeyFile accepts silently but is a mistake in this file: a group
 * given twice (GKeyFile merges the two, the later key winning) or a key
 * given twice in one group (the later wins).  The file parsed already, so
 * each line is blank, a # comment, [group] or key=value (GLib's
 * gkeyfile.c g_key_file_parse_line).  Returns 0 or -EINVAL with err set. */
static int scan_duplicates(const char *path, char *err, size_t len)
{
	gchar *text = NULL;
	gchar **lines;
	GHashTable *groups = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	GHashTable *keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	char *group = NULL;
	int ret = 0;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return 0; /* read a moment ago: the load reported what it could */
	lines = g_strsplit(text, "\n", -1);
	for (size_t i = 0; lines[i] && !ret; i++) {
		char *l = g_strstrip(lines[i]), *eq;

		if (!*l || *l == '#')
			continue;
		if (*l == '[') {
			char *end = strrchr(l, ']');

			if (end)
				*end = 0;
			g_free(group);
			group = g_strdup(l + 1);
			if (!g_hash_table_add(groups, g_strdup(group)))
				ret = bad(err, len, path, group, NULL, "given twice (line %zu): GKeyFile would merge the two; "
					  "give each group once", i + 1);
			continue;
		}
		if (!group || !(eq = strchr(l, '=')))
			continue;
		*eq = 0;
		g_strchomp(l);
		{
			char *k = g_strdup_printf("%s\n%s", group, l);

			if (!g_hash_table_add(keys, k))
				ret = bad(err, len, path, group, l, "given twice (line %zu): only the last would count; "
					  "give each key once", i + 1);
		}
	}
	g_free(group);
	g_strfreev(lines);
	g_free(text);
	g_hash_table_destroy(groups);
	g_hash_table_destroy(keys);
	return ret;
}

/* c->warnings: what parses but looks wrong (serve.h), or NULL. */
static void find_warnings(struct serve_config *c, const char *path)
{
	GString *w = g_string_new(NULL);

	for (size_t i = 0; i < c->ntargets; i++) {
		struct serve_target *t = &c->targets[i];
		struct stat st;

		if (t->exe && (stat(t->exe, &st) < 0 || !S_ISREG(st.st_mode)))
			g_string_append_printf(w, "%s: [target:%s] exe = %s: no such executable (yet)\n", path,
					       t->name, t->exe);
		for (size_t j = 0; j < i; j++) {
			struct serve_target *u = &c->targets[j];

			if (!g_strcmp0(t->exe, u->exe) && !g_strcmp0(t->unit, u->unit) &&
			    !g_strcmp0(t->cgroup, u->cgroup) && !g_strcmp0(t->pidfile, u->pidfile))
				g_string_append_printf(w, "%s: [target:%s] matches what [target:%s] matches: "
							  "its processes all go to %s\n",
						       path, t->name, u->name, u->name);
		}
	}
	c->warnings = w->len ? g_string_free(w, FALSE) : (g_string_free(w, TRUE), NULL);
}

int serve_config_load(const char *path, struct serve_config *c, char *err, size_t len)
{
	GKeyFile *kf = g_key_file_new();
	GError *ge = NULL;
	gchar **groups = NULL;
	int ret = -EINVAL;

	memset(c, 0, sizeof(*c));
	if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &ge)) {
		ret = ge->domain == G_FILE_ERROR ? -ENOENT : -EINVAL;
		snprintf(err, len, "cannot read the configuration file %s: %s%s", path, ge->message,
			 ge->domain == G_FILE_ERROR ? "" : " (the syntax: man 5 camlheap.conf)");
		g_error_free(ge);
		g_key_file_free(kf);
		return ret;
	}
	set_defaults(c);
	if ((ret = scan_duplicates(path, err, len)) < 0)
		goto out;

	groups = g_key_file_get_groups(kf, NULL);
	for (gchar **g = groups; *g; g++)
		if ((ret = check_group(kf, path, g, err, len)) < 0)
			goto out;
	if (g_key_file_has_group(kf, "serve") && (ret = load_serve_group(kf, path, c, err, len)) < 0)
		goto out;
	for (gchar **g = groups; *g; g++)
		if (!strncmp(*g, "target:", 7) && (ret = load_target(kf, path, g, c, err, len)) < 0)
			goto out;
	if (!c->ntargets) {
		ret = bad(err, len, path, "target:NAME", NULL, "no target: name at least one [target:NAME] group");
		goto out;
	}
	find_warnings(c, path);
	ret = 0;
out:
	g_strfreev(groups);
	g_key_file_free(kf);
	if (ret < 0)
		serve_config_free(c);
	return ret;
}

int serve_sendf(int fd, const char *fmt, ...)
{
	char buf[8192];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n <= 0 || (size_t)n >= sizeof(buf))
		return -EMSGSIZE;
	return send(fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 ? -errno : 0;
}

int serve_parse_cmd(const char *msg, size_t len, struct serve_cmd *c)
{
	char buf[8192];
	char *p, *sp;

	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, msg, len);
	buf[len] = 0;
	memset(c, 0, sizeof(*c));
	sp = strchr(buf, ' ');
	if (!sp || (size_t)(sp - buf) >= sizeof(c->verb))
		return -EINVAL;
	*sp = 0;
	strcpy(c->verb, buf);
	p = sp + 1;
	if (!strcmp(c->verb, "budget") || !strcmp(c->verb, "interval")) {
		char *end;

		c->value = strtod(p, &end);
		if (!strcmp(c->verb, "interval"))
			return end != p && !*end && c->value > 0 ? 0 : -EINVAL;
		return end != p && !*end && c->value >= 0 ? 0 : -EINVAL;
	}
	if (strcmp(c->verb, "snap") && strcmp(c->verb, "trace"))
		return -EINVAL;
	c->id = strtoull(p, &sp, 10);
	if (sp == p || *sp != ' ')
		return -EINVAL;
	p = sp + 1;
	sp = strchr(p, ' ');
	if (!sp)
		return -EINVAL;
	*sp = 0;
	if (!strcmp(c->verb, "snap")) {
		if (strcmp(p, "heap") && strcmp(p, "allocs") && strcmp(p, "census"))
			return -EINVAL;
		strcpy(c->what, p);
	} else {
		char *end;

		c->value = strtod(p, &end);
		if (end == p || *end || !(c->value > 0))
			return -EINVAL;
	}
	p = sp + 1;
	if (p[0] != '/' || strlen(p) >= sizeof(c->path))
		return -EINVAL;
	strcpy(c->path, p);
	return 0;
}
