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

/* The calibration's probe sites, in camlheap's own text: an entry the
 * kernel emulates (push, as most of the runtime's probed instructions
 * are: target/ocaml_runtime.c plan_probe_over) and one it single-steps
 * (sub $imm8,%rsp, as caml_do_pending_actions_exn's entry in 4.14). */
__asm__(".pushsection .text\n"
	".p2align 4\n"
	".globl camlheap_trapcost_emulated\n"
	".type camlheap_trapcost_emulated, @function\n"
	"camlheap_trapcost_emulated:\n"
	"\tpush %rbp\n"
	"\tpop %rbp\n"
	"\tret\n"
	".size camlheap_trapcost_emulated, .-camlheap_trapcost_emulated\n"
	".p2align 4\n"
	".globl camlheap_trapcost_stepped\n"
	".type camlheap_trapcost_stepped, @function\n"
	"camlheap_trapcost_stepped:\n"
	"\tsub $8, %rsp\n"
	"\tadd $8, %rsp\n"
	"\tret\n"
	".size camlheap_trapcost_stepped, .-camlheap_trapcost_stepped\n"
	".popsection\n");
void camlheap_trapcost_emulated(void);
void camlheap_trapcost_stepped(void);

enum { BATCHES = 5, BATCH = 200, WARM = 20 };

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

/* The median time of a call of fn over BATCHES batches, ns. */
static double time_calls(void (*volatile fn)(void))
{
	double per[BATCHES];

	for (int i = 0; i < WARM; i++)
		fn();
	for (int b = 0; b < BATCHES; b++) {
		double t0 = now_ns();

		for (int i = 0; i < BATCH; i++)
			fn();
		per[b] = (now_ns() - t0) / BATCH;
	}
	qsort(per, BATCHES, sizeof(per[0]), cmp_double);
	return per[BATCHES / 2];
}

/* fn's file and offset in it, from /proc/self/maps.  Returns 0 or -ENOENT. */
static int self_site(void (*fn)(void), char *path, size_t pathlen, uint64_t *offset)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[4096 + 128];
	uintptr_t a = (uintptr_t)fn;
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

/* A call of fn with prog attached at its entry (retprobe: as a uretprobe),
 * beyond an unprobed call, the program's own run time left out.  Returns
 * the cost in ns, or a negative errno. */
static double probed_cost(struct bpf_program *prog, bool retprobe, void (*fn)(void), char *err, size_t errlen)
{
	char path[4096];
	uint64_t off = 0;
	double plain, probed, cost;
	struct bpf_link *l;
	int ret = self_site(fn, path, sizeof(path), &off);
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = retprobe);

	if (ret < 0) {
		snprintf(err, errlen, "camlheap's own code is not in a file mapping (/proc/self/maps)");
		return ret;
	}
	plain = time_calls(fn);
	l = bpf_program__attach_uprobe_opts(prog, getpid(), path, off, &opts);
	if (!l) {
		ret = -errno;
		snprintf(err, errlen, "cannot attach a uprobe to camlheap's own %s: %s", path, strerror(errno));
		return ret;
	}
	probed = time_calls(fn);
	bpf_link__destroy(l);
	cost = probed - plain - prog_ns_per_run(prog);
	return cost > 0 ? cost : 0;
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
	struct trapcost_bpf *skel = trapcost_bpf__open_and_load();
	double emulated, stepped, both;

	memset(out, 0, sizeof(*out));
	if (!skel) {
		int e = errno;

		snprintf(err, errlen, "cannot load the calibration's BPF programs: %s", strerror(e));
		return -e;
	}
	emulated = probed_cost(skel->progs.trapcost_entry, false, camlheap_trapcost_emulated, err, errlen);
	stepped = emulated < 0 ? emulated
			       : probed_cost(skel->progs.trapcost_entry, false, camlheap_trapcost_stepped, err, errlen);
	both = stepped < 0 ? stepped
			   : probed_cost(skel->progs.trapcost_return, true, camlheap_trapcost_emulated, err, errlen);
	trapcost_bpf__destroy(skel);
	if (both < 0)
		return (int)both;
	out->emulated_ns = emulated;
	out->stepped_ns = stepped;
	out->return_ns = both > emulated ? both - emulated : 0;
	out->valid = true;
	return 0;
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
