/* serve_http.c -- `camlheap serve`'s HTTP endpoint (serve.h), on
 * `listen =` and on the Unix socket `socket =`: profiles and recordings of
 * a process asked of its worker, /targets and /metrics from the table.
 * libmicrohttpd's threads answer, each request under S.lk, waiting on S.cv
 * for its worker's answer. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>
#include <json-glib/json-glib.h>
#include "cmd/ondemand.h"
#include "cmd/serve_internal.h"
#include "output/jsonw.h"

/* in enum wstate's order (serve_internal.h) */
static const struct ondemand_mhd *mhd; /* loaded by start_http */

static const char *const wstate_names[] = { "attaching", "recording", "exited", "failed", "missed", "detached" };

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *type, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned code, const char *type, const char *fmt, ...)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	va_list ap;
	char *s;

	va_start(ap, fmt);
	s = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	r = mhd->MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		g_free(s);
		return MHD_NO;
	}
	/* g_strdup_vprintf's memory is malloc'd: MHD frees it with free() */
	mhd->MHD_add_response_header(r, "Content-Type", type);
	ret = mhd->MHD_queue_response(c, code, r);
	mhd->MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result reply_string(struct MHD_Connection *c, unsigned code, const char *type, GString *s)
{
	struct MHD_Response *r = mhd->MHD_create_response_from_buffer(s->len, s->str, MHD_RESPMEM_MUST_COPY);
	enum MHD_Result ret;

	g_string_free(s, TRUE);
	if (!r)
		return MHD_NO;
	mhd->MHD_add_response_header(r, "Content-Type", type);
	ret = mhd->MHD_queue_response(c, code, r);
	mhd->MHD_destroy_response(r);
	return ret;
}

/* The process a request names: ?pid=N (any process of a configured
 * target, followed now or earlier), or ?target=NAME (its newest process
 * followed now; else its newest).  Under S.lk.  NULL with a message. */
static struct worker *request_worker(struct MHD_Connection *c, char *why, size_t len, unsigned *code)
{
	const char *spid = mhd->MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pid");
	const char *tname = mhd->MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "target");
	struct worker *best = NULL;
	unsigned nactive = 0;

	*code = MHD_HTTP_NOT_FOUND;
	if (spid) {
		char *end;
		long pid;

		errno = 0;
		pid = strtol(spid, &end, 10);
		if (errno || end == spid || *end || pid <= 0 || pid > INT_MAX || !g_ascii_isdigit(spid[0])) {
			*code = MHD_HTTP_BAD_REQUEST;
			snprintf(why, len, "pid=%s is not a process id\n", spid);
			return NULL;
		}
		for (struct worker *w = S.workers; w; w = w->next)
			if (w->pid == pid && (!tname || !strcmp(w->target, tname)) && (!best || w->state == W_RECORDING))
				best = w;
		if (!best)
			snprintf(why, len, "PID %ld is not a process of %s%s (GET /targets lists them)\n", pid,
				 tname ? "target " : "a configured target", tname ? tname : "");
		return best;
	}
	for (struct worker *w = S.workers; w; w = w->next) {
		if (tname && strcmp(w->target, tname))
			continue;
		if (w->state == W_RECORDING) {
			nactive++;
			if (!best || best->state != W_RECORDING)
				best = w;
		} else if (!best) {
			best = w;
		}
	}
	if (!tname && nactive != 1) {
		*code = MHD_HTTP_BAD_REQUEST;
		snprintf(why, len,
			 "%u processes are followed: name one with ?pid=N or ?target=NAME (GET /targets lists them)\n",
			 nactive);
		return NULL;
	}
	if (!best)
		snprintf(why, len, "no process of target %s has been followed (GET /targets lists them)\n", tname);
	return best;
}

/* Ask worker w for a file (under S.lk); wait up to `timeout` s.  Returns
 * an open descriptor of the file (already unlinked), or -errno with why. */
static int ask_worker(struct worker *w, const char *verb, const char *arg, double timeout, char *why, size_t len)
{
	struct pending p = { .id = ++S.next_id, .w = w };
	char path[PATH_MAX];
	struct timespec dl;
	int fd;

	snprintf(path, sizeof(path), "%s/%llu-%d", S.tmpdir, (unsigned long long)p.id, w->pid);
	p.next = S.pending;
	S.pending = &p;
	send_msg(w, "%s %llu %s %s", verb, (unsigned long long)p.id, arg, path);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += (time_t)timeout;
	while (!p.done)
		if (pthread_cond_timedwait(&S.cv, &S.lk, &dl) == ETIMEDOUT)
			break;
	for (struct pending **pp = &S.pending; *pp; pp = &(*pp)->next)
		if (*pp == &p) {
			*pp = p.next;
			break;
		}
	if (!p.done) {
		snprintf(why, len, "PID %d's worker did not answer within %.0f s\n", w->pid, timeout);
		unlink(path);
		return -ETIMEDOUT;
	}
	if (p.err) {
		snprintf(why, len, "PID %d: %s\n", w->pid, p.msg);
		unlink(path);
		return -p.err;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	unlink(path);
	if (fd < 0) {
		snprintf(why, len, "PID %d's file vanished: %s\n", w->pid, strerror(errno));
		return -errno;
	}
	return fd;
}

static enum MHD_Result reply_fd(struct MHD_Connection *c, int fd, const char *type, const char *filename)
{
	struct stat st;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char disp[256];

	if (fstat(fd, &st) < 0) {
		close(fd);
		return MHD_NO;
	}
	r = mhd->MHD_create_response_from_fd((uint64_t)st.st_size, fd);
	if (!r) {
		close(fd);
		return MHD_NO;
	}
	snprintf(disp, sizeof(disp), "attachment; filename=\"%s\"", filename);
	mhd->MHD_add_response_header(r, "Content-Type", type);
	mhd->MHD_add_response_header(r, "Content-Disposition", disp);
	ret = mhd->MHD_queue_response(c, MHD_HTTP_OK, r);
	mhd->MHD_destroy_response(r);
	return ret;
}

/* /debug/pprof/heap, /debug/pprof/allocs: the profile of a process now
 * (Go's net/http/pprof semantics: every sample type, the default one
 * inuse_space for heap and alloc_space for allocs, since the process was
 * first followed); an ended process's last profile. */
static enum MHD_Result serve_pprof(struct MHD_Connection *c, const char *what)
{
	const char *secs = mhd->MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	char why[1024], name[128];
	unsigned code;
	struct worker *w;
	int fd;

	if (secs)
		return reply_text(c, MHD_HTTP_BAD_REQUEST, "text/plain",
				  "seconds=%s: delta profiles are not served; the profile covers the whole time the process "
				  "has been followed (fetch twice and use pprof -diff_base)\n", secs);
	pthread_mutex_lock(&S.lk);
	w = request_worker(c, why, sizeof(why), &code);
	if (!w) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, code, "text/plain", "%s", why);
	}
	snprintf(name, sizeof(name), "%s-%d-%s.pb.gz", w->target, w->pid, what);
	if (w->state == W_ATTACHING) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, "text/plain",
				  "PID %d is being attached; try again in a second\n", w->pid);
	}
	if (w->state != W_RECORDING) {
		/* ended: its last heap profile, if one is left */
		fd = w->last_heap[0] ? open(w->last_heap, O_RDONLY | O_CLOEXEC) : -1;
		snprintf(why, sizeof(why), "PID %d is no longer followed (%s) and no profile of it is left%s%s\n", w->pid,
			 wstate_names[w->state], w->message[0] ? ": " : "", w->message);
		pthread_mutex_unlock(&S.lk);
		if (fd < 0)
			return reply_text(c, MHD_HTTP_GONE, "text/plain", "%s", why);
		return reply_fd(c, fd, "application/octet-stream", name);
	}
	fd = ask_worker(w, "snap", what, 60, why, sizeof(why));
	pthread_mutex_unlock(&S.lk);
	if (fd < 0)
		return reply_text(c, fd == -ETIMEDOUT ? MHD_HTTP_GATEWAY_TIMEOUT : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "text/plain", "%s", why);
	return reply_fd(c, fd, "application/octet-stream", name);
}

/* /debug/memtrace?pid=N&seconds=S: a memtrace recording of the next S seconds. */
static enum MHD_Result serve_memtrace(struct MHD_Connection *c)
{
	const char *secs = mhd->MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "seconds");
	char why[1024], name[128], arg[32];
	double s = secs ? strtod(secs, NULL) : 10;
	unsigned code;
	struct worker *w;
	int fd;

	if (!(s > 0 && s <= 3600))
		return reply_text(c, MHD_HTTP_BAD_REQUEST, "text/plain", "seconds=%s: give 0 < seconds <= 3600\n", secs);
	pthread_mutex_lock(&S.lk);
	w = request_worker(c, why, sizeof(why), &code);
	if (w && w->state != W_RECORDING) {
		snprintf(why, sizeof(why), "PID %d is no longer followed (%s)\n", w->pid, wstate_names[w->state]);
		code = MHD_HTTP_GONE;
		w = NULL;
	}
	if (!w) {
		pthread_mutex_unlock(&S.lk);
		return reply_text(c, code, "text/plain", "%s", why);
	}
	snprintf(name, sizeof(name), "%s-%d.ctf", w->target, w->pid);
	snprintf(arg, sizeof(arg), "%.17g", s);
	fd = ask_worker(w, "trace", arg, s + 60, why, sizeof(why));
	pthread_mutex_unlock(&S.lk);
	if (fd < 0)
		return reply_text(c, fd == -ETIMEDOUT ? MHD_HTTP_GATEWAY_TIMEOUT
				     : fd == -EBUSY   ? MHD_HTTP_CONFLICT
						      : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  "text/plain", "%s", why);
	return reply_fd(c, fd, "application/octet-stream", name);
}

/* /targets (under S.lk) */
static GString *targets_json(void)
{
	JsonBuilder *b = json_builder_new();
	JsonGenerator *g = json_generator_new();
	JsonNode *root;
	char *text;
	GString *s;

	json_builder_begin_object(b);
	json_builder_set_member_name(b, "service");
	json_builder_begin_object(b);
	json_member_int(b, "pid", getpid());
	json_member_str(b, "config", S.config_path);
	json_member_double(b, "started_unix", S.start_unix);
	json_member_str(b, "output", S.cfg.output);
	json_member_double(b, "interval_s", S.cfg.interval_s);
	json_member_double(b, "host_budget", S.cfg.host_budget);
	json_member_int(b, "processes_followed", S.active);
	json_member_int(b, "execs_seen", (int64_t)S.execs_seen);
	json_member_int(b, "forks_seen", (int64_t)S.forks_seen);
	json_builder_end_object(b);
	json_builder_set_member_name(b, "targets");
	json_builder_begin_array(b);
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		const struct serve_target *t = &S.cfg.targets[i];

		json_builder_begin_object(b);
		json_member_str(b, "name", t->name);
		json_member_str(b, "exe", t->exe);
		json_member_str(b, "unit", t->unit);
		json_member_str(b, "cgroup", t->cgroup);
		json_member_str(b, "pidfile", t->pidfile);
		json_member_double(b, "rate", t->rate);
		json_member_double(b, "budget", t->budget);
		json_member_double(b, "effective_budget", effective_budget(t));
		json_builder_set_member_name(b, "processes");
		json_builder_begin_array(b);
		for (struct worker *w = S.workers; w; w = w->next) {
			if (strcmp(w->target, t->name))
				continue;
			json_builder_begin_object(b);
			json_member_int(b, "pid", w->pid);
			json_member_str(b, "state", wstate_names[w->state]);
			if (w->wpid > 0)
				json_member_int(b, "worker_pid", w->wpid);
			json_member_str(b, "ocaml_version", w->version[0] ? w->version : NULL);
			json_member_str(b, "executor", w->executor[0] ? w->executor : NULL);
			json_member_double(b, "followed_since_unix", w->started);
			if (w->ended > 0)
				json_member_double(b, "ended_unix", w->ended);
			json_member_double(b, "rate", w->lambda);
			json_member_int(b, "rate_shift", w->shift);
			json_member_double(b, "lambda_in_force", ldexp(w->lambda, -(int)w->shift));
			json_member_int(b, "samples", (int64_t)w->samples);
			json_member_double(b, "samples_per_second", w->sample_rate);
			json_member_int(b, "dropped_events", (int64_t)w->dropped);
			json_member_int(b, "executor_stops", (int64_t)w->stops);
			json_member_double(b, "executor_stops_per_second", w->stop_rate);
			json_member_double(b, "overhead_ratio", w->overhead_ratio);
			json_member_double(b, "worker_cpu_s", (double)w->cpu_ns * 1e-9);
			json_member_double(b, "live_bytes_estimate", w->lambda > 0 ? (double)w->live / w->lambda * 8.0 : 0);
			json_member_int(b, "resident_bytes", (int64_t)w->rss_kib * 1024);
			json_member_int(b, "files_written", (int64_t)w->files);
			json_member_str(b, "directory", w->dir);
			json_member_str(b, "last_heap_profile", w->last_heap[0] ? w->last_heap : NULL);
			json_member_str(b, "message", w->message[0] ? w->message : NULL);
			json_builder_end_object(b);
		}
		json_builder_end_array(b);
		json_builder_end_object(b);
	}
	json_builder_end_array(b);
	json_builder_end_object(b);
	root = json_builder_get_root(b);
	json_generator_set_root(g, root);
	json_generator_set_pretty(g, TRUE);
	text = json_generator_to_data(g, NULL);
	s = g_string_new(text);
	g_string_append_c(s, '\n');
	g_free(text);
	json_node_unref(root);
	g_object_unref(g);
	g_object_unref(b);
	return s;
}

/* Prometheus label values: backslash, quote and newline escaped. */
static void label(GString *s, const char *v)
{
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			g_string_append_c(s, '\\');
		if (*v == '\n') {
			g_string_append(s, "\\n");
			continue;
		}
		g_string_append_c(s, *v);
	}
}

/* /metrics: Prometheus text exposition format 0.0.4 (under S.lk). */
static GString *metrics_text(void)
{
	static const struct {
		const char *name, *type, *help;
	} per[] = {
		{ "camlheap_samples_total", "counter", "Samples taken (kept after the budget's thinning) in the process." },
		{ "camlheap_samples_per_second", "gauge", "Samples taken per second, over the last second." },
		{ "camlheap_dropped_events_total", "counter", "Sample events lost because the ring buffer was full." },
		{ "camlheap_lambda", "gauge", "Samples per allocated word in force (the rate times 2^-rate_shift)." },
		{ "camlheap_rate_shift", "gauge", "Samples kept with probability 2^-rate_shift to hold the budget." },
		{ "camlheap_executor_stops_total", "counter", "Stops of the process's threads by the ptrace executor." },
		{ "camlheap_executor_stops_per_second", "gauge", "Ptrace executor stops per second, over the last second." },
		{ "camlheap_overhead_seconds_total", "counter",
		  "Time the process paid for camlheap, seconds: in its BPF programs, in the traps of its uprobe hits "
		  "(each hit's trap as calibrated on this kernel) and stopped for its executor (trap to resumption)." },
		{ "camlheap_overhead_ratio", "gauge", "camlheap_overhead_seconds_total per second, over the last second." },
		{ "camlheap_worker_cpu_seconds_total", "counter", "CPU time of the process's camlheap worker." },
		{ "camlheap_live_bytes_estimate", "gauge", "Estimated bytes of the blocks sampled since attach that are still alive." },
		{ "camlheap_resident_bytes", "gauge", "The process's resident set (VmRSS), bytes." },
	};
	GString *s = g_string_new(NULL);

	g_string_append(s, "# HELP camlheap_processes_followed Processes followed now, by target.\n"
			   "# TYPE camlheap_processes_followed gauge\n");
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		unsigned n = 0;

		for (struct worker *w = S.workers; w; w = w->next)
			n += !strcmp(w->target, S.cfg.targets[i].name) && (w->state == W_ATTACHING || w->state == W_RECORDING);
		g_string_append(s, "camlheap_processes_followed{target=\"");
		label(s, S.cfg.targets[i].name);
		g_string_append_printf(s, "\"} %u\n", n);
	}
	g_string_append_printf(s,
			       "# HELP camlheap_workers_started_total Workers started (one per process followed).\n"
			       "# TYPE camlheap_workers_started_total counter\n"
			       "camlheap_workers_started_total %llu\n"
			       "# HELP camlheap_workers_failed_total Workers that could not follow their process.\n"
			       "# TYPE camlheap_workers_failed_total counter\n"
			       "camlheap_workers_failed_total %llu\n"
			       "# HELP camlheap_processes_missed_total Processes that ended before their worker attached.\n"
			       "# TYPE camlheap_processes_missed_total counter\n"
			       "camlheap_processes_missed_total %llu\n"
			       "# HELP camlheap_processes_gone_before_seen_total Processes of a target's program (exe alone) that "
			       "ended before the service looked at them (counted in missed too).\n"
			       "# TYPE camlheap_processes_gone_before_seen_total counter\n"
			       "camlheap_processes_gone_before_seen_total %llu\n"
			       "# HELP camlheap_processes_skipped_total Processes of an executable found unprofilable before.\n"
			       "# TYPE camlheap_processes_skipped_total counter\n"
			       "camlheap_processes_skipped_total %llu\n"
			       "# HELP camlheap_processes_over_limit_total Times a process was left for max-processes.\n"
			       "# TYPE camlheap_processes_over_limit_total counter\n"
			       "camlheap_processes_over_limit_total %llu\n"
			       "# HELP camlheap_execs_seen_total Execs on the host seen by the discovery program.\n"
			       "# TYPE camlheap_execs_seen_total counter\n"
			       "camlheap_execs_seen_total %llu\n"
			       "# HELP camlheap_forks_seen_total Fork children of followed processes seen by the discovery program.\n"
			       "# TYPE camlheap_forks_seen_total counter\n"
			       "camlheap_forks_seen_total %llu\n"
,
			       (unsigned long long)S.started_total, (unsigned long long)S.failed_total,
			       (unsigned long long)S.missed_total, (unsigned long long)S.gone_total,
			       (unsigned long long)S.skipped_total,
			       (unsigned long long)S.limited_total, (unsigned long long)S.execs_seen,
			       (unsigned long long)S.forks_seen);
	g_string_append(s, "# HELP camlheap_census_triggers_total Censuses written at a census-on trigger, by target "
			   "and trigger.\n# TYPE camlheap_census_triggers_total counter\n");
	for (size_t i = 0; i < S.cfg.ntargets; i++) {
		const uint64_t *count = S.triggers ? g_hash_table_lookup(S.triggers, S.cfg.targets[i].name) : NULL;

		for (int k = 0; k < 3 && S.cfg.targets[i].census_on; k++) {
			g_string_append(s, "camlheap_census_triggers_total{target=\"");
			label(s, S.cfg.targets[i].name);
			g_string_append_printf(s, "\",trigger=\"%s\"} %llu\n", serve_trigger_kinds[k],
					       (unsigned long long)(count ? count[k] : 0));
		}
	}
	for (size_t m = 0; m < sizeof(per) / sizeof(per[0]); m++) {
		g_string_append_printf(s, "# HELP %s %s\n# TYPE %s %s\n", per[m].name, per[m].help, per[m].name, per[m].type);
		for (struct worker *w = S.workers; w; w = w->next) {
			double v;

			if (w->state != W_RECORDING)
				continue;
			switch (m) {
			case 0: v = (double)w->samples; break;
			case 1: v = w->sample_rate; break;
			case 2: v = (double)w->dropped; break;
			case 3: v = ldexp(w->lambda, -(int)w->shift); break;
			case 4: v = w->shift; break;
			case 5: v = (double)w->stops; break;
			case 6: v = w->stop_rate; break;
			case 7: v = (double)(w->bpf_ns + w->trap_ns + w->exec_ns) * 1e-9; break;
			case 8: v = w->overhead_ratio; break;
			case 9: v = (double)w->cpu_ns * 1e-9; break;
			case 10: v = w->lambda > 0 ? (double)w->live / w->lambda * 8.0 : 0; break;
			default: v = (double)w->rss_kib * 1024.0; break;
			}
			g_string_append_printf(s, "%s{target=\"", per[m].name);
			label(s, w->target);
			g_string_append_printf(s, "\",pid=\"%d\"} %.17g\n", w->pid, v);
		}
	}
	return s;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
	GString *s;

	if (strcmp(method, "GET") && strcmp(method, "HEAD"))
		return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "only GET\n");
	if (!strcmp(url, "/debug/pprof/heap"))
		return serve_pprof(c, "heap");
	if (!strcmp(url, "/debug/pprof/allocs"))
		return serve_pprof(c, "allocs");
	if (!strcmp(url, "/debug/memtrace")) {
		if (strcmp(method, "GET")) /* a recording takes its seconds: never for a HEAD */
			return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", "GET only\n");
		return serve_memtrace(c);
	}
	if (!strcmp(url, "/targets")) {
		pthread_mutex_lock(&S.lk);
		s = targets_json();
		pthread_mutex_unlock(&S.lk);
		return reply_string(c, MHD_HTTP_OK, "application/json", s);
	}
	if (!strcmp(url, "/metrics")) {
		pthread_mutex_lock(&S.lk);
		s = metrics_text();
		pthread_mutex_unlock(&S.lk);
		return reply_string(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", s);
	}
	if (!strcmp(url, "/") || !strcmp(url, "/debug/pprof/") || !strcmp(url, "/debug/pprof"))
		return reply_text(c, MHD_HTTP_OK, "text/plain",
				  "camlheap serve: memory profiles of the configured OCaml programs\n"
				  "  /debug/pprof/heap?pid=N|target=NAME    pprof, default sample type inuse_space\n"
				  "  /debug/pprof/allocs?pid=N|target=NAME  pprof, default sample type alloc_space\n"
				  "  /debug/memtrace?pid=N&seconds=S        a memtrace recording of the next S seconds\n"
				  "  /targets                               JSON: targets, processes, figures\n"
				  "  /metrics                               Prometheus text\n");
	return reply_text(c, MHD_HTTP_NOT_FOUND, "text/plain", "no such endpoint: %s (GET / lists them)\n", url);
}

#define HTTP_MAX_CONN 64u

/* libmicrohttpd's error messages (MHD_OPTION_EXTERNAL_LOGGER): while a
 * daemon starts, the last one is kept for camlheap's own error ("Failed to
 * bind to port 6061: Address already in use"), instead of a line of its
 * own on stderr before it; later ones are logged as camlheap's. */
static bool mhd_starting;
static char mhd_last[256];

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	size_t n;

	(void)cls;
	vsnprintf(mhd_last, sizeof(mhd_last), fmt, ap);
	n = strlen(mhd_last);
	while (n && (mhd_last[n - 1] == '\n' || mhd_last[n - 1] == ' '))
		mhd_last[--n] = 0;
	if (!mhd_starting)
		fprintf(stderr, "camlheap: HTTP: %s\n", mhd_last);
}

int start_http(char *err, size_t len)
{
	/* poll, not select (no 1024-descriptor ceiling); a thread per
	 * connection, at most HTTP_MAX_CONN of them per endpoint and 16 per
	 * client address, idle ones closed after 30 s: a flood of half-sent
	 * requests on the TCP port leaves the Unix socket reachable */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
			 MHD_USE_POLL;

	if (!(mhd = ondemand_mhd(err, len)))
		return -ENOENT;

	if (strcmp(S.cfg.listen, "none")) {
		char host[256];
		const char *colon = strrchr(S.cfg.listen, ':');
		struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
		struct addrinfo *ai = NULL;
		int gai;

		snprintf(host, sizeof(host), "%.*s", (int)(colon - S.cfg.listen), S.cfg.listen);
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			memmove(host, host + 1, strlen(host));
			host[strlen(host) - 1] = 0;
		}
		gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai);
		if (gai) {
			snprintf(err, len, "listen = %s: %s", S.cfg.listen, gai_strerror(gai));
			return -EINVAL;
		}
		mhd_starting = true;
		mhd_last[0] = 0;
		S.http = mhd->MHD_start_daemon(flags | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
					  (uint16_t)atoi(colon + 1), NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR,
					  ai->ai_addr, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
					  HTTP_MAX_CONN, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 16u, MHD_OPTION_EXTERNAL_LOGGER,
					  mhd_log, NULL, MHD_OPTION_END);
		mhd_starting = false;
		freeaddrinfo(ai);
		if (!S.http) {
			snprintf(err, len, "cannot listen on %s: %s", S.cfg.listen,
				 mhd_last[0] ? mhd_last : "in use, or not an address of this host");
			return -EADDRINUSE;
		}
	}
	if (S.cfg.socket) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char dir[PATH_MAX], *slash;

		snprintf(dir, sizeof(dir), "%s", S.cfg.socket);
		slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = 0;
			mkdir_p(dir, 0755);
		}
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", S.cfg.socket);
		{
			/* only a stale socket is replaced: never another file, never a
			 * socket another service still answers on */
			struct stat st;

			if (lstat(S.cfg.socket, &st) == 0) {
				int probe;

				if (!S_ISSOCK(st.st_mode)) {
					snprintf(err, len, "socket = %s: a file that is not a socket is there; name another path",
						 S.cfg.socket);
					return -EEXIST;
				}
				probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
				if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
					close(probe);
					snprintf(err, len, "socket = %s: another camlheap serve answers there", S.cfg.socket);
					return -EADDRINUSE;
				}
				if (probe >= 0)
					close(probe);
				unlink(S.cfg.socket);
			}
		}
		S.unix_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (S.unix_fd < 0 || bind(S.unix_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(S.unix_fd, 64) < 0) {
			snprintf(err, len, "socket = %s: %s", S.cfg.socket, strerror(errno));
			return -errno;
		}
		chmod(S.cfg.socket, 0600); /* the profiles are root's business */
		{
			struct stat st;

			if (stat(S.cfg.socket, &st) == 0)
				S.sock_ino = st.st_ino;
		}
		mhd_starting = true;
		mhd_last[0] = 0;
		S.unix_http = mhd->MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET, S.unix_fd,
					       MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT, HTTP_MAX_CONN,
					       MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
		mhd_starting = false;
		if (!S.unix_http) {
			snprintf(err, len, "cannot serve on %s%s%s", S.cfg.socket, mhd_last[0] ? ": " : "", mhd_last);
			return -EIO;
		}
	}
	return 0;
}

void stop_http(void)
{
	if (S.http)
		mhd->MHD_stop_daemon(S.http);
	if (S.unix_http)
		mhd->MHD_stop_daemon(S.unix_http);
	S.http = S.unix_http = NULL;
	if (S.cfg.socket && S.sock_ino) {
		struct stat st;

		/* ours still (not replaced by someone else's) */
		if (lstat(S.cfg.socket, &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == S.sock_ino)
			unlink(S.cfg.socket);
	}
	if (S.unix_fd >= 0)
		close(S.unix_fd);
	S.unix_fd = -1;
}
