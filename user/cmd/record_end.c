/* record_end.c -- how `record` ends (record_internal.h): a launched
 * command waited for after the report, the report written through a
 * temporary file, and the words and exit status for the way the target
 * ended. */
#define _GNU_SOURCE
#include "cmd/record_internal.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd/ondemand.h"
#include "collect/sampler.h"
#include "output/outfile.h"

/* Launch mode, after the report: the command goes on and camlheap's status
 * will be its own.  A second signal leaves it running and makes camlheap
 * exit 128 + that signal, as a shell would.  Returns true once reaped. */
bool record_wait_for_command(pid_t pid, int sigfd, int pidfd, int *status, int *exit_code)
{
	struct pollfd fds[2] = { { .fd = sigfd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };

	fprintf(stderr, "camlheap: waiting for PID %d to exit (a second signal leaves it running)\n", pid);
	for (;;) {
		if (waitpid(pid, status, WNOHANG) == pid)
			return true;
		/* without a pidfd, look again every 100 ms */
		if (poll(fds, 2, pidfd < 0 ? 100 : -1) < 0 && errno != EINTR)
			return false;
		if (fds[0].revents & POLLIN) {
			struct signalfd_siginfo si;

			if (read(sigfd, &si, sizeof(si)) == sizeof(si) && *exit_code == 0)
				*exit_code = 128 + (int)si.ssi_signo;
			fprintf(stderr, "camlheap: PID %d left running\n", pid);
			return false;
		}
	}
}

/* census --retainers -o FILE.svg: the DOT graph rendered by libgvc into f.
 * Returns 0 or -errno (-ENOTSUP: Graphviz missing or failing, said on
 * stderr). */
static int census_svg(FILE *f, const struct profile *prof, const struct report_meta *meta, struct target *t)
{
	char *dot = NULL, err[512];
	size_t n = 0;
	FILE *m = open_memstream(&dot, &n);
	int ret = m ? report_render(m, REPORT_DOT, true, prof, meta, &t->mods) : -ENOMEM;

	if (m && fclose(m) && !ret)
		ret = -ENOMEM;
	if (!ret && ondemand_dot_to_svg(dot, f, err, sizeof(err)) < 0) {
		fprintf(stderr, "camlheap: the graph as SVG: %s (-o FILE.dot writes it for Graphviz's dot)\n", err);
		ret = -ENOTSUP;
	}
	free(dot);
	return ret;
}

/* Render the report through a temporary file (outfile.h).  Returns 0 or
 * -errno. */
int record_write_report(const struct record_opts *o, const struct profile *prof, const struct report_meta *meta,
			struct target *t)
{
	struct outfile out;
	int ret;

	ret = outfile_open(&out, o->output);
	if (ret < 0)
		return ret;
	if (o->census && o->format == REPORT_SVG) /* the graph of paths, laid out by Graphviz */
		ret = census_svg(out.f, prof, meta, t);
	else
		ret = report_render(out.f, o->format, o->census, prof, meta, &t->mods);
	if (ret < 0)
		outfile_abort(&out);
	else
		ret = outfile_commit(&out);
	return ret;
}

int record_status_to_exit(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

void record_describe_exn(const struct sampler *smp, pid_t pid, char *buf, size_t len)
{
	char exn[80];
	size_t n = strlen(buf);

	sampler_exit_status(smp, pid, exn, sizeof(exn));
	if (exn[0] && n < len)
		snprintf(buf + n, len - n, " after the uncaught exception %s", exn);
}

void record_describe_status(int status, char *buf, size_t len)
{
	if (WIFEXITED(status))
		snprintf(buf, len, "target exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, len, "target killed by signal %d (%s%s)", WTERMSIG(status), strsignal(WTERMSIG(status)),
			 WCOREDUMP(status) ? ", core dumped" : "");
	else
		snprintf(buf, len, "target ended");
}

void record_snapdir(const struct record_opts *o, char *buf, size_t len)
{
	const char *slash = o->output && strcmp(o->output, "-") ? strrchr(o->output, '/') : NULL;

	if (o->serve)
		snprintf(buf, len, "%s", o->outdir);
	else if (slash)
		snprintf(buf, len, "%.*s", slash == o->output ? 1 : (int)(slash - o->output), o->output);
	else
		snprintf(buf, len, ".");
}

int record_watch_start(struct intake *in, const struct record_opts *o, struct sampler *smp, char *msg, size_t len)
{
	int ret = census_watch_start(&in->watch, &o->on, in->pid, smp, !o->census, msg, len);

	if (ret == 0)
		record_say("camlheap: %s\n", msg);
	return ret;
}

void record_census_on_fired(struct intake *in)
{
	char tag[16];

	snprintf(tag, sizeof(tag), "-%s", in->watch.kind);
	/* the resident breakdown of that moment, once for both files (the OOM
	 * reaper empties a process the OOM killer chose: its last reading) */
	in->trigger_s = now_s();
	in->res_at_trigger = strcmp(in->watch.kind, "oom") && record_read_resident(in) == 0;
	in->meta->trigger = in->watch.what; /* the files' header, not the recording's */
	record_write_periodic(in, tag, "snapshot while recording: census-on's trigger fired");
	in->meta->trigger = NULL;
	serve_send(in, "trigger %s %s %s", in->watch.kind, in->meta->census_on ? "census" : "heap", in->watch.what);
	census_watch_rearm(&in->watch);
}

#define RINGBUF_BYTES (16u << 20)
#define RINGBUF_BYTES_SERVE (4u << 20) /* a worker's events are thinned to its budget */

uint32_t record_ringbuf_bytes(bool serve)
{
	const char *rb_env = getenv("CAMLHEAP_RINGBUF_BYTES");

	if (rb_env) {
		unsigned long v = strtoul(rb_env, NULL, 0);

		if (v >= 4096 && v <= (1ul << 30) && !(v & (v - 1)))
			return (uint32_t)v;
	}
	return serve ? RINGBUF_BYTES_SERVE : RINGBUF_BYTES;
}
