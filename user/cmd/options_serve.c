/* options_serve.c -- the options of `camlheap serve` and `status`
 * (options_internal.h), which serve.h runs.
 */
#define _GNU_SOURCE
#include "cmd/options_internal.h"

#include <argp.h>
#include <stdbool.h>
#include <stdio.h>

#include "cmd/serve.h"

static const char serve_doc[] =
	"Run as a service: profile every process of the targets named in the configuration file "
	"continuously, each by its own worker (as `camlheap record -p PID`), found within a second of "
	"their exec; write a heap profile (pprof) and a census per process every interval into the "
	"output directory, with retention; serve /debug/pprof/heap, /debug/pprof/allocs, "
	"/debug/memtrace, /targets and /metrics over HTTP (localhost by default) and an optional Unix "
	"socket; hold each process under its overhead budget.  SIGHUP reloads the configuration, "
	"SIGTERM stops cleanly.  Under systemd (Type=notify) it reports readiness and feeds the "
	"watchdog.  The file format: `man 5 camlheap.conf` (dist/camlheap.conf.5), an example in "
	"dist/camlheap.conf.\n"
	"\n"
	"  camlheap serve --config FILE [--interval SECONDS] [--check]";

static const struct argp_option serve_options[] = {
	{ "config", 'c', "FILE", 0, "The configuration file (default /etc/camlheap/camlheap.conf)", 0 },
	{ "check", 'k', NULL, 0, "Only parse the configuration file and say what it asks for", 0 },
	{ "interval", 'i', "SECONDS", 0, "Periodic profiles every SECONDS (overrides the file's `interval`; default 60)",
	  0 },
	{ 0 }
};

struct serve_opts {
	const char *config;
	bool check;
	double interval_s;
};

static error_t serve_parse(int key, char *arg, struct argp_state *state)
{
	struct serve_opts *o = state->input;

	switch (key) {
	case 'c':
		o->config = arg;
		break;
	case 'k':
		o->check = true;
		break;
	case 'i':
		if (parse_double(arg, &o->interval_s) || !(o->interval_s >= 0.1 && o->interval_s <= 86400 * 7))
			argp_error(state, "invalid --interval '%s': seconds, 0.1 .. 604800", arg);
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "serve takes no arguments (the targets are in --config FILE)");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

int serve_command(int argc, char **argv)
{
	struct serve_opts o = { .config = "/etc/camlheap/camlheap.conf" };
	struct argp argp = { serve_options, serve_parse, NULL, serve_doc, NULL, NULL, NULL };

	argv[1] = "camlheap serve";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	if (o.check) {
		struct serve_config c = { 0 };
		char err[2048];

		if (serve_config_load(o.config, &c, err, sizeof(err)) < 0) {
			fprintf(stderr, "camlheap: %s\n", err);
			return 2;
		}
		if (o.interval_s > 0)
			c.interval_s = o.interval_s;
		if (c.warnings)
			fprintf(stderr, "%s", c.warnings);
		printf("%s: %zu target%s; output %s every %g s (keep %u per process, %llu bytes in all); HTTP %s%s%s\n",
		       o.config, c.ntargets, c.ntargets == 1 ? "" : "s", c.output, c.interval_s, c.keep,
		       (unsigned long long)c.keep_bytes, c.listen, c.socket ? ", socket " : "", c.socket ? c.socket : "");
		for (size_t i = 0; i < c.ntargets; i++) {
			struct serve_target *t = &c.targets[i];
			char budget[160];

			/* as effective_budget (serve_worker.c) applies them */
			if (t->budget > 0 && c.host_budget > 0)
				snprintf(budget, sizeof(budget), "budget %g samples/s or its share of host-budget %g, "
					 "whichever is lower", t->budget, c.host_budget);
			else if (t->budget > 0)
				snprintf(budget, sizeof(budget), "budget %g samples/s", t->budget);
			else if (c.host_budget > 0)
				snprintf(budget, sizeof(budget), "budget: its share of host-budget %g samples/s "
					 "(split among the processes followed)", c.host_budget);
			else
				snprintf(budget, sizeof(budget), "no budget (every process sampled at its rate)");
			printf("  %s:%s%s%s%s%s%s%s%s rate %g, %s, stacks up to %u frames%s%s%s\n", t->name,
			       t->exe ? " exe " : "", t->exe ? t->exe : "", t->unit ? " unit " : "", t->unit ? t->unit : "",
			       t->cgroup ? " cgroup " : "", t->cgroup ? t->cgroup : "", t->pidfile ? " pidfile " : "",
			       t->pidfile ? t->pidfile : "", t->rate, budget, t->max_depth, t->malloc ? ", --malloc" : "",
			       t->census_on ? ", a census at " : "", t->census_on ? t->census_on : "");
		}
		serve_config_free(&c);
		return 0;
	}
	return serve_run(o.config, o.interval_s);
}

static const char status_doc[] =
	"Print the targets of a running `camlheap serve` and their figures (samples, sample rate, lambda "
	"in force, overhead, files written), asking it over its Unix socket (default "
	"/run/camlheap/camlheap.sock) or its HTTP address.\n"
	"\n"
	"  camlheap status [--socket PATH | --url http://HOST:PORT] [--json]";

static const struct argp_option status_options[] = {
	{ "socket", 's', "PATH", 0, "The service's Unix socket (its `socket =`; default /run/camlheap/camlheap.sock)", 0 },
	{ "url", 'u', "URL", 0, "The service's HTTP address instead (its `listen =`, e.g. http://127.0.0.1:6061)", 0 },
	{ "json", 'j', NULL, 0, "Print the service's /targets document as it is", 0 },
	{ 0 }
};

struct status_opts {
	const char *socket, *url;
	bool json;
};

static error_t status_parse(int key, char *arg, struct argp_state *state)
{
	struct status_opts *o = state->input;

	switch (key) {
	case 's':
		o->socket = arg;
		break;
	case 'u':
		o->url = arg;
		break;
	case 'j':
		o->json = true;
		break;
	case ARGP_KEY_ARG:
		argp_error(state, "status takes no arguments");
		break;
	default:
		return ARGP_ERR_UNKNOWN;
	}
	return 0;
}

int status_command(int argc, char **argv)
{
	struct status_opts o = { 0 };
	struct argp argp = { status_options, status_parse, NULL, status_doc, NULL, NULL, NULL };

	argv[1] = "camlheap status";
	if (argp_parse(&argp, argc - 1, argv + 1, 0, NULL, &o))
		return 2;
	if (!o.socket && !o.url)
		o.socket = "/run/camlheap/camlheap.sock";
	return serve_status(o.url ? NULL : o.socket, o.url, o.json);
}
