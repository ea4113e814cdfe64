/* freeze.c -- every thread of a 4.x process stopped where its major heap is
 * consistent (freeze.h). */
#include "heap/freeze.h"

#include <dirent.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The 4.x runtime's functions in which the major heap's blocks, colours
 * or chunks may be half-changed, and the entry points that lead into them
 * (a callee may be inlined into them).  Exact names, then prefixes:
 * 4.12.1 and 4.14.2 runtime/major_gc.c (mark_slice, clean_slice,
 * sweep_slice, start_cycle, realloc_mark_stack, redarken_chunk),
 * minor_gc.c (caml_empty_minor_heap, caml_oldify_*), memory.c
 * (caml_alloc_shr*, expand_heap, caml_add_to_heap, caml_shrink_heap),
 * compact.c (do_compaction, invert_*, compact_allocate), freelist.c (the
 * next-fit, first-fit and best-fit policies nf_, ff_, bf_ and caml_fl_*),
 * intern.c (intern_*: unmarshalling carves blocks out of one it allocated),
 * finalise.c, weak.c (ephemerons are cleaned during the major GC),
 * signals_nat.c (caml_garbage_collection, the entry from caml_call_gc). */
static const char *const unsafe_exact[] = {
	"caml_garbage_collection", "caml_alloc_small_dispatch", "caml_gc_dispatch", "caml_minor_collection",
	"caml_empty_minor_heap", "caml_major_collection_slice", "caml_finish_major_cycle", "caml_compact_heap",
	"caml_compact_heap_maybe", "caml_add_to_heap", "caml_shrink_heap", "caml_alloc_for_heap",
	"caml_free_for_heap", "caml_make_free_blocks", "caml_check_urgent_gc", "caml_set_allocation_policy",
	"caml_darken", "caml_darken_all_roots_start", "caml_darken_all_roots_slice", "caml_init_major_heap",
	"mark_slice", "clean_slice", "sweep_slice", "start_cycle", "realloc_mark_stack", "redarken_chunk",
	"mark_stack_push", "mark_stack_prune", "mark_slice_darken", "mark_ephe_aux", "expand_heap",
	"do_compaction", "compact_allocate", "init_compact_allocate", "test_and_compact", "invert_pointer_at",
	"init_sweep_phase", "caml_invert_root", "caml_realloc_ref_table", "caml_realloc_ephe_ref_table",
	"caml_realloc_custom_table", "caml_alloc_custom_gc", "caml_alloc_custom_mem", "caml_alloc_string",
	"caml_alloc", "caml_alloc_tuple", "caml_alloc_float_array", "caml_alloc_array", "caml_copy_string",
};
static const char *const unsafe_prefix[] = {
	"caml_alloc_shr", "caml_oldify_", "caml_fl_", "caml_gc_", "caml_final_", "caml_ephe", "caml_weak_",
	"caml_input_val", "caml_memprof_", "intern_", "nf_", "ff_", "bf_",
};

static bool fn_unsafe(const char *name)
{
	for (size_t i = 0; i < sizeof(unsafe_exact) / sizeof(unsafe_exact[0]); i++)
		if (!strcmp(name, unsafe_exact[i]))
			return true;
	for (size_t i = 0; i < sizeof(unsafe_prefix) / sizeof(unsafe_prefix[0]); i++)
		if (!strncmp(name, unsafe_prefix[i], strlen(unsafe_prefix[i])))
			return true;
	return false;
}

/* ocamlopt's symbols: `camlModule__fn_NNN`, `camlModule`, ... (the
 * runtime's are `caml_*`) */
static bool fn_ocaml(const char *name)
{
	return !strncmp(name, "caml", 4) && name[4] >= 'A' && name[4] <= 'Z';
}

static int tid_add(struct heap_freeze *f, pid_t t)
{
	if (f->ntids == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		pid_t *tids = realloc(f->tids, cap * sizeof(*tids));
		uint64_t *ra;

		if (!tids)
			return -ENOMEM;
		f->tids = tids;
		ra = realloc(f->first_ra, cap * sizeof(*ra));
		if (!ra)
			return -ENOMEM;
		f->first_ra = ra;
		f->cap = cap;
	}
	f->tids[f->ntids] = t;
	f->first_ra[f->ntids++] = 0;
	return 0;
}

/* TracerPid of thread t (/proc/T/status), 0 if none or unknown. */
static pid_t tracer_of(pid_t t)
{
	char path[64], line[256];
	long tracer = 0;
	FILE *s;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)t);
	s = fopen(path, "re");
	if (!s)
		return 0;
	while (fgets(line, sizeof(line), s))
		if (sscanf(line, "TracerPid: %ld", &tracer) == 1)
			break;
	fclose(s);
	return (pid_t)tracer;
}

static bool tid_known(const struct heap_freeze *f, pid_t t)
{
	for (size_t i = 0; i < f->ntids; i++)
		if (f->tids[i] == t)
			return true;
	return false;
}

/* Wait for thread i's stop after PTRACE_INTERRUPT.  A signal that
 * arrives first is a signal-delivery-stop: the signal is delivered then
 * and there (PTRACE_CONT with it: its handler runs, or its default action
 * happens, as without camlheap; a signal only kept here would be lost to
 * the program, the kernel ignoring it at an interrupt stop, ptrace(2)),
 * and the thread interrupted again.  Returns 0, or -ESRCH if the thread
 * exited (then dropped from the set). */
static int wait_stop(struct heap_freeze *f, size_t i)
{
	for (;;) {
		int st;
		pid_t r = waitpid(f->tids[i], &st, __WALL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || WIFEXITED(st) || WIFSIGNALED(st)) {
			f->tids[i] = f->tids[f->ntids - 1];
			f->first_ra[i] = f->first_ra[f->ntids - 1];
			f->ntids--;
			return -ESRCH;
		}
		if (!WIFSTOPPED(st))
			continue;
		if (st >> 16 == PTRACE_EVENT_STOP)
			return 0;
		if (st >> 16 == 0) { /* a signal for the thread: delivered now, then stop again */
			ptrace(PTRACE_CONT, f->tids[i], 0, (void *)(long)WSTOPSIG(st));
			ptrace(PTRACE_INTERRUPT, f->tids[i], 0, 0);
			continue;
		}
		return 0;
	}
}

/* Stop every thread: those seized at an earlier try, then the others,
 * seized, until /proc/PID/task shows no thread not yet stopped (a running
 * thread may start one until it is stopped). */
static int stop_all(struct heap_freeze *f, char *err, size_t errlen)
{
	char dir[64];
	bool found_new = true;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)f->pid);
	for (size_t i = 0; i < f->ntids; i++) /* seized at an earlier try */
		ptrace(PTRACE_INTERRUPT, f->tids[i], 0, 0);
	for (size_t i = 0; i < f->ntids;)
		if (wait_stop(f, i) == 0)
			i++;
	while (found_new) {
		DIR *d = opendir(dir);
		struct dirent *e;
		size_t first = f->ntids;

		if (!d) {
			snprintf(err, errlen, "PID %d exited", (int)f->pid);
			return -ESRCH;
		}
		found_new = false;
		while ((e = readdir(d))) {
			pid_t t = (pid_t)atoi(e->d_name);

			if (t <= 0 || tid_known(f, t))
				continue;
			if (ptrace(PTRACE_SEIZE, t, 0, 0) < 0) {
				int e2 = errno;

				if (e2 == ESRCH && t != f->pid)
					continue; /* that thread just exited */
				closedir(d);
				if (e2 == ESRCH)
					snprintf(err, errlen, "PID %d exited", (int)f->pid);
				else if (e2 == EPERM && tracer_of(t) > 0)
					snprintf(err, errlen,
						 "PID %d is traced by PID %d (a debugger, strace, or another camlheap "
						 "stopping it): the exact census must be its only tracer; try again once "
						 "that tracer is gone",
						 (int)f->pid, (int)tracer_of(t));
				else
					snprintf(err, errlen,
						 "cannot trace PID %d (thread %d): %s; the exact census stops the "
						 "process with ptrace: it needs CAP_SYS_PTRACE, a Yama ptrace_scope "
						 "below 3, and no other tracer (a debugger, or camlheap's ptrace "
						 "executor)",
						 (int)f->pid, (int)t, strerror(e2));
				return -e2;
			}
			if (tid_add(f, t) < 0) {
				closedir(d);
				return -ENOMEM;
			}
			ptrace(PTRACE_INTERRUPT, t, 0, 0);
			found_new = true;
		}
		closedir(d);
		for (size_t i = first; i < f->ntids;)
			if (wait_stop(f, i) == 0)
				i++;
	}
	return 0;
}

/* Resume every thread (still seized). */
static void cont_all(struct heap_freeze *f)
{
	for (size_t i = 0; i < f->ntids; i++)
		ptrace(PTRACE_CONT, f->tids[i], 0, 0);
}

struct unwind_ctx {
	const struct elf_image *img;
	uint64_t bias;
	const char *unsafe;  /* set: the frame's function that makes the stop unusable */
	bool ocaml;          /* reached an OCaml frame */
	uint64_t first_ra;   /* its return address, if not the innermost frame */
	unsigned frames;
};

static int frame_cb(Dwfl_Frame *frame, void *arg)
{
	struct unwind_ctx *u = arg;
	Dwarf_Addr pc;
	bool activation;
	const struct elf_symbol *sym;

	if (!dwfl_frame_pc(frame, &pc, &activation))
		return DWARF_CB_ABORT;
	if (!activation)
		pc--; /* a return address: the call is before it */
	u->frames++;
	sym = pc >= u->bias ? elf_image_function_at(u->img, pc - u->bias) : NULL;
	if (sym && sym->vaddr <= pc - u->bias && pc - u->bias < sym->vaddr + (sym->size ? sym->size : 1)) {
		if (fn_ocaml(sym->name)) {
			u->ocaml = true;
			u->first_ra = activation ? FREEZE_IN_OCAML : pc + 1;
			return DWARF_CB_ABORT;
		}
		if (fn_unsafe(sym->name)) {
			u->unsafe = sym->name;
			return DWARF_CB_ABORT;
		}
	}
	return u->frames >= 4096 ? DWARF_CB_ABORT : DWARF_CB_OK;
}

/* Is every stopped thread outside the memory manager?  False with
 * f->unsafe_fn set if one is in it, or could not be unwound to its first
 * OCaml frame nor to its stack's end. */
static bool stop_consistent(struct heap_freeze *f, const struct elf_image *img, uint64_t bias)
{
	static const Dwfl_Callbacks cb = {
		.find_elf = dwfl_linux_proc_find_elf,
		.find_debuginfo = dwfl_standard_find_debuginfo,
	};
	Dwfl *dwfl = dwfl_begin(&cb);
	bool ok = true;

	if (!dwfl)
		return false;
	if (dwfl_linux_proc_report(dwfl, f->pid) != 0 || dwfl_report_end(dwfl, NULL, NULL) != 0 ||
	    dwfl_linux_proc_attach(dwfl, f->pid, true) != 0) {
		snprintf(f->unsafe_fn, sizeof(f->unsafe_fn), "(cannot unwind: %s)", dwfl_errmsg(-1));
		dwfl_end(dwfl);
		return false;
	}
	for (size_t i = 0; ok && i < f->ntids; i++) {
		struct unwind_ctx u = { .img = img, .bias = bias };
		int r = dwfl_getthread_frames(dwfl, f->tids[i], frame_cb, &u);

		f->first_ra[i] = u.first_ra;
		if (u.unsafe) {
			snprintf(f->unsafe_fn, sizeof(f->unsafe_fn), "%s", u.unsafe);
			ok = false;
		} else if (!u.ocaml && r != 0) {
			/* unwound neither to an OCaml frame nor to the stack's
			 * end: a memory-manager frame may lie beyond */
			snprintf(f->unsafe_fn, sizeof(f->unsafe_fn), "thread %d not unwound past frame %u: %s",
				 (int)f->tids[i], u.frames, dwfl_errmsg(-1));
			ok = false;
		}
	}
	dwfl_end(dwfl);
	return ok;
}

int heap_freeze_stop(struct heap_freeze *f, pid_t pid, const struct elf_image *img, uint64_t bias,
		     double max_wait_s, char *err, size_t errlen)
{
	double t0 = mono_s();
	unsigned seed = (unsigned)pid ^ (unsigned)(t0 * 1e6);
	int ret;

	memset(f, 0, sizeof(*f));
	f->pid = pid;
	for (;;) {
		ret = stop_all(f, err, errlen);
		if (ret < 0) {
			heap_freeze_release(f);
			return ret;
		}
		f->attempts++;
		f->stopped_at = mono_s();
		if (stop_consistent(f, img, bias)) {
			f->wait_s = f->stopped_at - t0;
			return 0;
		}
		cont_all(f);
		if (mono_s() - t0 > max_wait_s) {
			snprintf(err, errlen,
				 "PID %d was in its runtime's memory manager (%s) at each of %u stops over %.1f s: "
				 "no consistent moment to read its heap; try again, or give a longer --max-wait",
				 (int)pid, f->unsafe_fn, f->attempts, mono_s() - t0);
			heap_freeze_release(f);
			return -ETIMEDOUT;
		}
		/* 1 to 4 ms of running before the next stop, not in step with
		 * the program's own period */
		usleep(1000 + rand_r(&seed) % 3000);
	}
}

double heap_freeze_release(struct heap_freeze *f)
{
	double stopped = f->stopped_at > 0 ? mono_s() - f->stopped_at : 0;

	for (size_t i = 0; i < f->ntids; i++)
		ptrace(PTRACE_DETACH, f->tids[i], 0, 0);
	free(f->tids);
	free(f->first_ra);
	f->tids = NULL;
	f->first_ra = NULL;
	f->ntids = f->cap = 0;
	return stopped;
}

void heap_freeze_hold_job_stops(sigset_t *old)
{
	sigset_t stops;

	sigemptyset(&stops);
	sigaddset(&stops, SIGTSTP);
	sigaddset(&stops, SIGTTIN);
	sigaddset(&stops, SIGTTOU);
	sigprocmask(SIG_BLOCK, &stops, old);
}
