/* probe_cost.c -- the trap of a uprobe hit, measured on camlheap's own
 * code, and what the target's hits cost (probe_cost.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "collect/probe_cost.h"
#include "collect/sampler_internal.h"
#include "trapcost.skel.h"

/* The calibration's probe sites, in camlheap's own text: the same code
 * (push, as most of the runtime's probed instructions are:
 * target/ocaml_runtime.c plan_probe_over) unprobed, under an entry probe
 * the kernel emulates and under a uretprobe, and an entry it single-steps
 * (sub $imm8,%rsp, as caml_do_pending_actions_exn's entry in 4.14). */
#define TRAPCOST_FN(name, insn, undo)                                                                  \
	".p2align 4\n.globl " name "\n.type " name ", @function\n" name ":\n\t" insn "\n\t" undo       \
	"\n\tret\n.size " name ", .-" name "\n"
__asm__(".pushsection .text\n"
	TRAPCOST_FN("camlheap_trapcost_plain", "push %rbp", "pop %rbp")
	TRAPCOST_FN("camlheap_trapcost_emulated", "push %rbp", "pop %rbp")
	TRAPCOST_FN("camlheap_trapcost_return", "push %rbp", "pop %rbp")
	TRAPCOST_FN("camlheap_trapcost_stepped", "sub $8, %rsp", "add $8, %rsp")
	".popsection\n");
void camlheap_trapcost_plain(void);
void camlheap_trapcost_emulated(void);
void camlheap_trapcost_return(void);
void camlheap_trapcost_stepped(void);

/* Rounds of BATCH calls of each site in turn; the costs are the medians of
 * the rounds' differences, so a drift of the machine's speed between the
 * sites' timings cancels. */
enum { ROUNDS = 21, BATCH = 100, WARM = 20, NSITES = 4 };

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(v[0]), cmp_double);
	return v[n / 2];
}

/* The time of a call of fn, ns, over one batch. */
static double time_batch(void (*volatile fn)(void))
{
	double t0 = now_ns();

	for (int i = 0; i < BATCH; i++)
		fn();
	return (now_ns() - t0) / BATCH;
}

int probe_cost_self_site(uintptr_t a, char *path, size_t pathlen, uint64_t *offset)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4096 + 128];
	int ret = -ENOENT;

	if (!f)
		return -errno;
	while (ret < 0 && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, off;
		char perm[8];
		int n = 0;

		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &lo, &hi, perm, &off, &n) < 4 || !n)
			continue;
		if (a < lo || a >= hi || line[n] != '/')
			continue;
		line[strcspn(line, "\n")] = 0;
		snprintf(path, pathlen, "%s", line + n);
		*offset = a - lo + off;
		ret = 0;
	}
	fclose(f);
	return ret;
}

/* The run time of prog so far per run, ns (0 without statistics). */
static double prog_ns_per_run(const struct bpf_program *prog)
{
	struct bpf_prog_info info;
	__u32 len = sizeof(info);

	memset(&info, 0, sizeof(info));
	if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) || !info.run_cnt)
		return 0;
	return (double)info.run_time_ns / (double)info.run_cnt;
}

/* Attach prog at fn's entry (retprobe: as a uretprobe) into *link.
 * Returns 0, or a negative errno with a message in err. */
static int attach_self(struct bpf_program *prog, bool retprobe, void (*fn)(void), struct bpf_link **link, char *err,
		       size_t errlen)
{
	char path[4096];
	uint64_t off = 0;
	int ret = probe_cost_self_site((uintptr_t)fn, path, sizeof(path), &off);
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe);

	if (ret < 0) {
		snprintf(err, errlen, "camlheap's own code is not in a file mapping (/proc/self/maps)");
		return ret;
	}
	*link = bpf_program__attach_uprobe_opts(prog, getpid(), path, off, &opts);
	if (!*link) {
		ret = -errno;
		snprintf(err, errlen, "cannot attach a uprobe to camlheap's own %s: %s", path, strerror(errno));
		return ret;
	}
	return 0;
}

static double positive(double x)
{
	return x > 0 ? x : 0;
}

int probe_cost_stats_on(void)
{
	static int fd = -1;

	if (fd < 0)
		fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
	return fd < 0 ? -errno : 0;
}

int trap_cost_calibrate(struct trap_cost *out, char *err, size_t errlen)
{
	void (*const fn[NSITES])(void) = {camlheap_trapcost_plain, camlheap_trapcost_emulated,
					  camlheap_trapcost_return, camlheap_trapcost_stepped};
	struct trapcost_bpf *skel = trapcost_bpf__open_and_load();
	struct bpf_link *link[NSITES] = {NULL};
	double t[NSITES], emulated[ROUNDS], stepped[ROUNDS], ret_trap[ROUNDS], e_ns, r_ns;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	if (!skel) {
		int e = errno;

		snprintf(err, errlen, "cannot load the calibration's BPF programs: %s", strerror(e));
		return -e;
	}
	ret = attach_self(skel->progs.trapcost_entry, false, fn[1], &link[1], err, errlen);
	if (!ret)
		ret = attach_self(skel->progs.trapcost_return, true, fn[2], &link[2], err, errlen);
	if (!ret)
		ret = attach_self(skel->progs.trapcost_entry, false, fn[3], &link[3], err, errlen);
	for (int r = -1; !ret && r < ROUNDS; r++) {
		for (int i = 0; i < NSITES; i++) {
			if (r < 0) { /* warm the caches and the kernel's uprobe state */
				for (int k = 0; k < WARM; k++)
					fn[i]();
				continue;
			}
			t[i] = time_batch(fn[i]);
		}
		if (r < 0)
			continue;
		emulated[r] = t[1] - t[0];
		ret_trap[r] = t[2] - t[1];
		stepped[r] = t[3] - t[0];
	}
	for (int i = 0; i < NSITES; i++)
		bpf_link__destroy(link[i]);
	if (!ret) {
		/* the programs' own time out: the entry program runs at the emulated and
		 * single-stepped sites, the return program at the uretprobe's return only */
		e_ns = prog_ns_per_run(skel->progs.trapcost_entry);
		r_ns = prog_ns_per_run(skel->progs.trapcost_return);
		out->emulated_ns = positive(median(emulated, ROUNDS) - e_ns);
		out->stepped_ns = positive(median(stepped, ROUNDS) - e_ns);
		out->return_ns = positive(median(ret_trap, ROUNDS) + e_ns - r_ns);
		out->valid = true;
	}
	trapcost_bpf__destroy(skel);
	return ret;
}

/* What a run of the program at site i costs in traps, ns: its entry
 * trap, unless it is a uretprobe whose entry another program's probe at
 * the same place pays, plus the return trap of a uretprobe. */
static double site_trap_ns(const struct sampler *s, unsigned i, const struct trap_cost *tc)
{
	const struct sampler_site *x = &s->sites[i];
	bool entry_paid = false;

	for (unsigned j = 0; x->retprobe && j < s->nsites; j++)
		if (!s->sites[j].retprobe && s->sites[j].libc == x->libc && s->sites[j].file_offset == x->file_offset)
			entry_paid = true;
	return (entry_paid ? 0 : x->emulated ? tc->emulated_ns : tc->stepped_ns) + (x->retprobe ? tc->return_ns : 0);
}

void sampler_probe_cost(const struct sampler *s, const struct trap_cost *tc, struct probe_cost *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	for (unsigned i = 0; i < s->nsites; i++) {
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		double trap = 0;
		bool seen = false;

		for (unsigned j = 0; j < i; j++)
			seen |= s->sites[j].prog_fd == s->sites[i].prog_fd;
		if (seen)
			continue;
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(s->sites[i].prog_fd, &info, &len))
			continue;
		/* the dearest site the program sits on */
		for (unsigned j = i; tc && tc->valid && j < s->nsites; j++) {
			double t = s->sites[j].prog_fd == s->sites[i].prog_fd ? site_trap_ns(s, j, tc) : 0;

			trap = t > trap ? t : trap;
		}
		out->hits += info.run_cnt;
		out->bpf_ns += info.run_time_ns;
		out->trap_s += (double)info.run_cnt * trap * 1e-9;
		out->counted |= info.run_cnt > 0 || info.run_time_ns > 0;
	}
}
