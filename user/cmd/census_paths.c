/* census_paths.c -- what keeps each live sampled block alive, found at a
 * sampled census's end (census_paths.h). */
#define _GNU_SOURCE
#include "cmd/census_paths.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <glib.h>

#include "heap/freeze.h"
#include "heap/shape4.h"
#include "heap/trace4.h"
#include "heap/walk4.h"
#include "target/proc.h"

#define DESCRIBED_MAX 256 /* distinct blocks described by their shape (each a few reads, the target stopped) */
#define DESCRIBED_HOPS 2  /* the first blocks of a path described (a root's container and what it holds) */

int census_paths_check(const struct target *t, char *msg, size_t len)
{
	if (t->rt.major == 4 && t->rt.release_known)
		return 0;
	snprintf(msg, len,
		 "--retainers traces the heaps of OCaml 4.12, 4.13 and 4.14; PID %d runs OCaml %s, whose heap layout "
		 "it does not read yet: use `camlheap census -p %d` without --retainers",
		 (int)t->pid, t->rt.version, (int)t->pid);
	return -ENOTSUP;
}

/* s into rr->strs: its index, or -1 (no memory). */
static int add_str(struct report_retention *rr, GHashTable *seen, const char *s)
{
	gpointer at;
	char **v;

	if (g_hash_table_lookup_extended(seen, s, NULL, &at))
		return GPOINTER_TO_INT(at);
	v = realloc(rr->strs, (rr->nstrs + 1) * sizeof(*v));
	if (!v)
		return -1;
	rr->strs = v;
	if (!(v[rr->nstrs] = strdup(s)))
		return -1;
	g_hash_table_insert(seen, v[rr->nstrs], GINT_TO_POINTER((int)rr->nstrs));
	return (int)rr->nstrs++;
}

struct take {
	const struct target *t;
	const struct profile *prof;
	struct report_retention *rr;
	GHashTable *seen;       /* strs -> index */
	GHashTable *described;  /* block address -> strs index + 1 (0: not a container worth naming) */
	GHashTable *site_of;    /* followed block address -> its profile_site */
	double deadline;
};

/* A block's description by its shape (heap/shape4.h), the target stopped:
 * an index into strs, or -1. */
static int describe(struct take *k, uint64_t v)
{
	gpointer at;
	char buf[176];
	int i;

	if (g_hash_table_lookup_extended(k->described, &v, NULL, &at))
		return GPOINTER_TO_INT(at) - 1;
	if (g_hash_table_size(k->described) >= DESCRIBED_MAX)
		return -1;
	i = shape4_describe(k->t, v, buf, sizeof(buf), NULL) == 0 ? add_str(k->rr, k->seen, buf) : -1;
	g_hash_table_insert(k->described, g_memdup2(&v, sizeof(v)), GINT_TO_POINTER(i + 1));
	return i;
}

static void hop_of(struct take *k, const struct trace4_hop *h, struct report_hop *o, bool describe_it)
{
	o->wosize = h->wosize;
	o->field = h->field;
	o->tag = h->tag;
	o->site = g_hash_table_lookup(k->site_of, &h->v);
	o->what = describe_it ? describe(k, h->v) : -1;
}

static double mono_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A label's name (trace4_label_name), a group scanned conservatively
 * marked " ~" as --exact marks it. */
static void label_name(const struct trace4_result *r, uint16_t label, char *buf, size_t len)
{
	trace4_label_name(r, label, buf, len);
	if (label >= 1 && label <= TRACE4_MAX_GROUPS && r->groups[label - 1].conservative)
		snprintf(buf + strlen(buf), len - strlen(buf), " ~");
}

/* Path i in the report's terms, the target still stopped (its first blocks
 * described). */
static void path_of(struct take *k, const struct trace4_result *r, const struct sampler_block *b,
		    const struct trace4_path *tp)
{
	struct report_retention *rr = k->rr;
	uint64_t id = b->sample_id;
	const struct profile_block *pb = g_hash_table_lookup(k->prof->blocks, &id);
	struct report_path *p;
	char name[160];

	if (!pb || !pb->site)
		return; /* its sample event never reached the profile */
	p = &rr->paths[rr->npaths++];
	p->site = pb->site;
	p->samples = pb->nsamples;
	p->root = p->owner = -1;
	if (tp->status == TRACE4_PATH_UNREACHABLE || (tp->status == TRACE4_PATH_NOT_BLOCK && !b->young)) {
		p->status = REPORT_PATH_UNREACHABLE;
		return;
	}
	if (tp->status == TRACE4_PATH_NOT_BLOCK) { /* a minor heap not indexed */
		p->status = REPORT_PATH_YOUNG;
		return;
	}
	if (tp->status != TRACE4_PATH_REACHED) {
		p->status = REPORT_PATH_SKIPPED;
		return;
	}
	label_name(r, tp->root_label, name, sizeof(name));
	p->root = add_str(rr, k->seen, name);
	label_name(r, tp->label, name, sizeof(name));
	p->owner = add_str(rr, k->seen, name);
	/* no memory for a name: not shown as a path */
	p->status = p->root < 0 || p->owner < 0 ? REPORT_PATH_SKIPPED : REPORT_PATH_REACHED;
	if (p->status != REPORT_PATH_REACHED)
		return;
	p->via_static = tp->via_static;
	p->length = tp->length;
	p->nhead = (uint8_t)tp->nhead;
	p->ntail = (uint8_t)tp->ntail;
	for (unsigned h = 0; h < tp->nhead; h++)
		hop_of(k, &tp->head[h], &p->head[h], h < DESCRIBED_HOPS && mono_now() < k->deadline);
	for (unsigned h = 0; h < tp->ntail; h++)
		hop_of(k, &tp->tail[h], &p->tail[h], tp->nhead + h < DESCRIBED_HOPS && mono_now() < k->deadline);
}

/* The walk and the trace, the target stopped by fz: the paths to the
 * followed blocks b[0..n) into k->rr.  Returns 0 or -errno (msg set). */
static int trace(struct take *k, const struct heap_freeze *fz, const struct sampler_block *b, size_t n,
		 char *msg, size_t len)
{
	struct walk4_census *c = calloc(1, sizeof(*c));
	struct trace4_result *r = calloc(1, sizeof(*r));
	struct trace4_path *tp = calloc(n ? n : 1, sizeof(*tp));
	struct heap_index hx = { 0 };
	bool minor = true; /* Caml_state's young_ptr is exact when no thread runs OCaml code */
	int ret = -ENOMEM;

	k->rr->paths = calloc(n ? n : 1, sizeof(*k->rr->paths));
	if (!c || !r || !tp || !k->rr->paths)
		goto out;
	for (size_t i = 0; i < fz->ntids; i++)
		minor &= fz->first_ra[i] != FREEZE_IN_OCAML;
	for (size_t i = 0; i < n; i++)
		tp[i].v = b[i].addr;
	ret = walk4_census(k->t, k->deadline, &hx, minor, c, msg, len);
	if (!ret)
		ret = trace4_run(k->t, fz, &hx, k->deadline, r, tp, n, msg, len);
	if (ret)
		goto out;
	if (getenv("CAMLHEAP_DEBUG"))
		fprintf(stderr,
			"camlheap: trace: %llu blocks, %llu bytes of index and work, %llu sweeps, %.3f s (paths %.3f s)\n",
			(unsigned long long)hx.nblocks, (unsigned long long)r->index_bytes, (unsigned long long)r->sweeps,
			r->trace_s, r->paths_s);
	k->rr->heap_words = c->heap_words;
	k->rr->reachable_words = r->reachable.words;
	for (size_t i = 0; i < n; i++)
		path_of(k, r, &b[i], &tp[i]);
out:
	hx_free(&hx);
	free(tp);
	free(r);
	free(c);
	return ret;
}

/* Has pid ended (gone, or a zombie not reaped yet: kill(pid, 0) still
 * succeeds, ptrace does not)? */
static bool ended(pid_t pid)
{
	char state = 0;

	return proc_stat(pid, &state, NULL) < 0 || state == 'Z' || state == 'X';
}

int census_paths_take(struct target *t, struct sampler *smp, struct ptexec *px, const struct profile *prof,
		      double max_pause_s, double max_wait_s, struct report_retention *out)
{
	struct take k = { .t = t, .prof = prof, .rr = out };
	struct sampler_block *b = NULL;
	struct heap_freeze fz;
	sigset_t old_mask;
	double t0, t_end;
	size_t n = 0;
	int ret;

	memset(out, 0, sizeof(*out));
	t_end = mono_now();
	if (ended(t->pid)) {
		snprintf(out->why_not, sizeof(out->why_not), "PID %d ended first", (int)t->pid);
		return 0;
	}
	/* the ptrace executor and the stop cannot both trace the target: the
	 * probes ask the executor for nothing more (a stop of camlheap's own
	 * would take their SIGURG), the executor lets go, the probes still
	 * follow the sampled blocks */
	if (px) {
		sampler_pause_executor(smp);
		ptexec_stop(px);
	}
	heap_freeze_hold_job_stops(&old_mask);
	/* the executor's thread has ended, but the kernel lets go of the
	 * threads it traced at its exit a moment later (kernel/exit.c: exit_mm,
	 * which wakes pthread_join, comes before exit_notify's exit_ptrace) */
	for (int tries = 0;; tries++) {
		ret = heap_freeze_stop(&fz, t->pid, t->img, t->bias, max_wait_s, out->why_not, sizeof(out->why_not));
		if (ret != -EPERM || !px || tries == 200 || ended(t->pid))
			break;
		usleep(10000);
	}
	if (ret < 0) {
		sigprocmask(SIG_SETMASK, &old_mask, NULL);
		if (ended(t->pid))
			snprintf(out->why_not, sizeof(out->why_not), "PID %d ended first", (int)t->pid);
		return 0;
	}
	t0 = mono_now();
	out->stops = fz.attempts;
	out->gap_s = fz.stopped_at - t_end;
	k.deadline = fz.stopped_at + max_pause_s;
	k.seen = g_hash_table_new(g_str_hash, g_str_equal);
	k.described = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	k.site_of = g_hash_table_new(g_int64_hash, g_int64_equal);
	/* the events up to the stop, then the blocks followed at it */
	sampler_consume(smp);
	ret = sampler_followed_blocks(smp, t->pid, &b, &n);
	for (size_t i = 0; !ret && i < n; i++) {
		uint64_t id = b[i].sample_id;
		const struct profile_block *pb = g_hash_table_lookup(prof->blocks, &id);

		if (pb && pb->site)
			g_hash_table_insert(k.site_of, &b[i].addr, (gpointer)pb->site);
	}
	if (ret)
		snprintf(out->why_not, sizeof(out->why_not), "the followed blocks could not be read: %s",
			 strerror(-ret));
	else if ((ret = trace(&k, &fz, b, n, out->why_not, sizeof(out->why_not))) == -ETIME)
		snprintf(out->why_not, sizeof(out->why_not),
			 "the walk and trace from the roots passed --max-pause %.3g s and were stopped there, the program "
			 "running on (give a larger --max-pause: the trace takes about 4-13 s per GiB of heap; README)",
			 max_pause_s);
	out->trace_s = mono_now() - t0;
	out->pause_s = heap_freeze_release(&fz);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	if (ret) {
		free(out->paths);
		out->paths = NULL;
		out->npaths = 0;
	}
	g_hash_table_destroy(k.seen);
	g_hash_table_destroy(k.described);
	g_hash_table_destroy(k.site_of);
	free(b);
	return ret == -ENOMEM ? -ENOMEM : 0;
}

void census_paths_free(struct report_retention *rr)
{
	for (size_t i = 0; i < rr->nstrs; i++)
		free(rr->strs[i]);
	free(rr->strs);
	free(rr->paths);
	memset(rr, 0, sizeof(*rr));
}
