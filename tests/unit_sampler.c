/* unit_sampler.c -- the geometric pool, the confidence interval, the
 * profile aggregate and the output-file protocol, without BPF.
 * Prints "PASS name" / "FAIL name: why"; exits 1 on any failure. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "target/ocaml_runtime.h"
#include "profile/profile.h"
#include "output/outfile.h"
#include "output/report.h"
#include "collect/sampler.h"
#include "collect/ptexec5.h"

#include "unit_check.h"

/* The pool must be a sample of the geometric law Geom(lambda) on {1,2,...}:
 * mean 1/lambda, P(G > k) = (1-lambda)^k.  Stratification makes the
 * empirical quantiles match to within one stratum (1/n). */
static void test_geom_pool(double rate)
{
	enum { N = CH_GEOM_POOL_SIZE };
	uint64_t *pool = malloc(N * sizeof(*pool));
	double sum = 0, mean, want = 1.0 / rate, worst = 0;
	uint64_t min = UINT64_MAX;
	char name[64];

	sampler_fill_geom_pool(pool, N, rate, 12345);
	for (int i = 0; i < N; i++) {
		sum += (double)pool[i];
		if (pool[i] < min)
			min = pool[i];
	}
	mean = sum / N;
	snprintf(name, sizeof(name), "geom_pool_mean_rate_%g", rate);
	/* truncation of the top stratum bounds the bias by ~(ln(2N)+1)/(2N)
	 * relative; allow 1e-3 */
	check(fabs(mean - want) / want < 1e-3, name, "mean %.3f, want %.3f", mean, want);
	snprintf(name, sizeof(name), "geom_pool_min_rate_%g", rate);
	check(min >= 1, name, "min %llu", (unsigned long long)min);
	/* Kolmogorov distance to the geometric CDF at a grid of k */
	for (double q = 0.01; q < 1.0; q += 0.01) {
		double k = floor(log1p(-q) / log1p(-rate)); /* P(G <= k) ~ q */
		double cdf = 1.0 - pow(1.0 - rate, k);
		size_t below = 0;

		for (int i = 0; i < N; i++)
			below += pool[i] <= (uint64_t)k;
		double d = fabs((double)below / N - cdf);
		if (d > worst)
			worst = d;
	}
	snprintf(name, sizeof(name), "geom_pool_cdf_rate_%g", rate);
	check(worst <= 2.0 / N + (rate > 0.01 ? rate : 0), name, "max |F_pool - F_geom| = %g", worst);
	free(pool);
}

static void test_ci(void)
{
	double lo, hi;

	/* exact Garwood 95 % limits: n=10 -> [4.795, 18.390]; n=100 -> [81.36, 121.63] */
	profile_poisson_ci95(10, &lo, &hi);
	check(fabs(lo - 4.795) < 0.05 && fabs(hi - 18.390) < 0.1, "poisson_ci95_n10", "[%f, %f]", lo, hi);
	profile_poisson_ci95(100, &lo, &hi);
	check(fabs(lo - 81.36) < 0.2 && fabs(hi - 121.63) < 0.2, "poisson_ci95_n100", "[%f, %f]", lo, hi);
	profile_poisson_ci95(0, &lo, &hi);
	check(lo == 0 && fabs(hi - 3.689) < 0.01, "poisson_ci95_n0", "[%f, %f]", lo, hi);
}

static void test_profile(void)
{
	struct profile *p = profile_new(1e-3);
	struct ch_sample_event *ev = calloc(1, sizeof(*ev));
	const struct profile_site **sites;
	size_t n;

	ev->stack_id = 42;
	ev->kind = CH_KIND_MAJOR;
	ev->nsamples = 2;
	ev->nframes = 2;
	ev->frames[0] = 0x1500;
	ev->frames[1] = 0x1600;
	ev->has_frames = 1;
	profile_add_event(p, ev, CH_EVENT_HEADER_BYTES + 16);
	ev->has_frames = 0;
	ev->nsamples = 1;
	profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
	ev->stack_id = 7;
	ev->kind = CH_KIND_CUSTOM;
	profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
	n = profile_sites_sorted(p, &sites);
	check(n == 2 && sites[0]->samples == 3 && sites[0]->events == 2 && sites[0]->stack &&
		      sites[0]->stack->frames[0] == 0x1500 && sites[0]->stack->frames[1] == 0x1600,
	      "profile_aggregates_by_stack", "n=%zu", n);
	check(n == 2 && sites[1]->stack == NULL && p->events_without_stack == 1, "profile_counts_lost_stacks",
	      "lost=%llu", (unsigned long long)p->events_without_stack);
	check(profile_estimate_words(p, 3) == 3000.0, "profile_estimate_words", "%f",
	      profile_estimate_words(p, 3));
	ev->nframes = 10;
	ev->has_frames = 1;
	check(profile_add_event(p, ev, CH_EVENT_HEADER_BYTES + 8) == -EINVAL, "profile_rejects_short_event", "");
	free(sites);
	free(ev);
	profile_free(p);
}

static void test_outfile(void)
{
	char dir[] = "/tmp/camlheap-unit-XXXXXX", path[256], buf[64] = "";
	struct outfile o;
	FILE *f;

	if (!mkdtemp(dir)) {
		check(0, "outfile_tmpdir", "%s", strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/report.txt", dir);
	f = fopen(path, "w");
	fputs("old\n", f);
	fclose(f);
	outfile_open(&o, path);
	fputs("new report\n", o.f);
	/* before the commit the old file is intact */
	f = fopen(path, "r");
	fgets(buf, sizeof(buf), f);
	fclose(f);
	check(!strcmp(buf, "old\n"), "outfile_keeps_old_until_commit", "%s", buf);
	outfile_abort(&o);
	f = fopen(path, "r");
	fgets(buf, sizeof(buf), f);
	fclose(f);
	check(!strcmp(buf, "old\n"), "outfile_abort_keeps_old", "%s", buf);
	outfile_open(&o, path);
	fputs("new report\n", o.f);
	check(outfile_commit(&o) == 0, "outfile_commit", "");
	f = fopen(path, "r");
	fgets(buf, sizeof(buf), f);
	fclose(f);
	check(!strcmp(buf, "new report\n"), "outfile_commit_replaces", "%s", buf);
	unlink(path);
	rmdir(dir);
}

static struct ch_fate_event fate(uint8_t kind, uint64_t id, uint32_t minor, uint32_t major, uint64_t ns)
{
	struct ch_fate_event f;

	memset(&f, 0, sizeof(f));
	f.kind = kind;
	f.sample_id = id;
	f.minor_gcs = minor;
	f.major_gcs = major;
	f.time_ns = ns;
	return f;
}

/* A sampled block's death takes off its site's live object estimate what
 * its birth added, also for a block kept under a budget (rate_shift k:
 * 2^k times rarer, so it stands for more blocks). */
static void test_live_objects_under_budget(void)
{
	struct profile *p = profile_new(1e-3);
	struct ch_sample_event *ev = calloc(1, sizeof(*ev));
	struct ch_fate_event f;
	const struct profile_site **sites;
	double w = profile_object_weight_at(p, 10, 4);
	size_t n;

	ev->stack_id = 7;
	ev->kind = CH_KIND_MAJOR;
	ev->nsamples = 1;
	ev->size_words = 10;
	ev->rate_shift = 4;
	for (uint64_t id = 1; id <= 2; id++) {
		ev->sample_id = id;
		profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
	}
	f = fate(CH_FATE_DEAD_MAJOR, 1, 0, 1, 1000000000ULL);
	profile_add_fate(p, &f, sizeof(f));
	n = profile_sites_sorted(p, &sites);
	check(n == 1 && w > profile_object_weight(p, 10) && fabs(sites[0]->live_est_objects - w) < 1e-3 * w &&
		      fabs(sites[0]->est_objects - 2 * w) < 1e-9 * w,
	      "live_objects_under_budget", "live objects %g after one of two deaths, each standing for %g",
	      n ? sites[0]->live_est_objects : -1.0, w);
	free(sites);
	free(ev);
	profile_free(p);
}

/* Census accounting: births, promotion, deaths, relocation; a fate for an
 * unknown block (its allocation event lost) is counted, never subtracted;
 * a second death of the same block changes nothing; the leak analysis
 * judges only intervals in which anything was sampled. */
static void test_census_accounting(void)
{
	struct profile *p = profile_new(1e-3);
	struct ch_sample_event *ev = calloc(1, sizeof(*ev));
	struct ch_fate_event f;
	const struct profile_site **sites;
	size_t n;

	ev->stack_id = 1;
	ev->kind = CH_KIND_MINOR;
	ev->nsamples = 1;
	ev->in_minor_heap = 1;
	/* ids 1..3 young at t=1 s */
	for (uint64_t id = 1; id <= 3; id++) {
		ev->sample_id = id;
		ev->time_ns = 1000000000ULL;
		ev->minor_gcs = 10;
		profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
	}
	f = fate(CH_FATE_DEAD_MINOR, 9, 11, 0, 0); /* never born: orphan */
	profile_add_fate(p, &f, sizeof(f));
	f = fate(CH_FATE_PROMOTE, 1, 11, 0, 2000000000ULL);
	profile_add_fate(p, &f, sizeof(f));
	f = fate(CH_FATE_DEAD_MINOR, 2, 11, 0, 2000000000ULL);
	profile_add_fate(p, &f, sizeof(f));
	profile_add_fate(p, &f, sizeof(f)); /* again: now an orphan, nothing subtracted */
	f = fate(CH_FATE_RELOCATED, 3, 11, 0, 0); /* young: a compaction does not move it */
	profile_add_fate(p, &f, sizeof(f));
	n = profile_sites_sorted(p, &sites);
	check(n == 1 && p->followed_blocks == 3 && p->followed_minor_blocks == 3 && p->promoted_blocks == 1 &&
		      p->dead_minor_blocks == 1 && p->orphan_fates == 2 && p->live_samples == 2 &&
		      sites[0]->live_samples == 2 && sites[0]->peak_live_samples == 3 && p->relocated_blocks == 0 &&
		      sites[0]->dead_lifetime_s == 1.0 && sites[0]->dead_minor_gcs == 1,
	      "census_accounting", "followed %llu promoted %llu dead %llu orphans %llu live %llu",
	      (unsigned long long)p->followed_blocks, (unsigned long long)p->promoted_blocks,
	      (unsigned long long)p->dead_minor_blocks, (unsigned long long)p->orphan_fates,
	      (unsigned long long)p->live_samples);
	free(sites);
	f = fate(CH_FATE_RELOCATED, 1, 12, 1, 0);
	profile_add_fate(p, &f, sizeof(f));
	f = fate(CH_FATE_DEAD_MAJOR, 1, 12, 1, 0); /* not followed any more in the kernel: ignored */
	profile_add_fate(p, &f, sizeof(f));
	check(p->relocated_blocks == 1 && p->live_samples == 2 && p->dead_major_blocks == 0, "census_relocated_stays_live",
	      "relocated %llu live %llu", (unsigned long long)p->relocated_blocks, (unsigned long long)p->live_samples);
	/* leak analysis: 4 clean phases; a block born in each of intervals
	 * 0..2 stays alive (interval 3 is not judged yet) */
	for (int c = 0; c < 4; c++) {
		ev->sample_id = 100 + c;
		ev->stack_id = 2;
		ev->clean_phases = (uint32_t)c;
		profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
		f = fate(CH_NOTE_MAJOR_CLEAN, 0, 20 + c, 1 + c, 0);
		f.clean_phases = (uint32_t)c + 1;
		if (c != 1) /* the second note is lost (ring full): the third shows the gap */
			profile_add_fate(p, &f, sizeof(f));
	}
	profile_census_compute(p);
	n = profile_sites_sorted(p, &sites);
	{
		const struct profile_site *leak = sites[0]->stack_id == 2 ? sites[0] : sites[1];

		check(n == 2 && p->clean_phases == 4 && p->lost_clean_notes == 1 && leak->leak_cycles == 3 && leak->leak_retaining == 3 &&
			      leak->leak_retained_samples == 3 && leak->leak_score > 0 && profile_site_live_grows(leak),
		      "census_leak_score", "cycles %u retaining %u retained %llu score %g", leak->leak_cycles,
		      leak->leak_retaining, (unsigned long long)leak->leak_retained_samples, leak->leak_score);
	}
	free(sites);
	free(ev);
	profile_free(p);
}

/* A site's live count at each clean phase, summed up (first, last, a fall
 * by more than a third): 3, 6, then 2 (a fall), then 12: more at the last
 * than at the first, but not growing; the same without the fall is. */
static void test_live_grows_summary(void)
{
	for (int fall = 0; fall < 2; fall++) {
		struct profile *p = profile_new(1e-3);
		struct ch_sample_event *ev = calloc(1, sizeof(*ev));
		const struct profile_site **sites;
		struct ch_fate_event f;
		const int born[4] = { 3, 3, 0, 10 };
		uint64_t id = 1;
		size_t n;

		ev->stack_id = 7;
		ev->kind = CH_KIND_MINOR;
		ev->nsamples = 1;
		ev->in_minor_heap = 1;
		for (int c = 0; c < 4; c++) {
			for (int k = 0; k < born[c]; k++) {
				ev->sample_id = id++;
				ev->clean_phases = (uint32_t)c;
				profile_add_event(p, ev, CH_EVENT_HEADER_BYTES);
			}
			if (c == 2 && fall)
				for (uint64_t d = 1; d <= 4; d++) {
					f = fate(CH_FATE_DEAD_MINOR, d, 30, 0, 0);
					profile_add_fate(p, &f, sizeof(f));
				}
			f = fate(CH_NOTE_MAJOR_CLEAN, 0, 30 + c, 1 + c, 0);
			f.clean_phases = (uint32_t)c + 1;
			profile_add_fate(p, &f, sizeof(f));
		}
		n = profile_sites_sorted(p, &sites);
		check(n == 1 && sites[0]->cycle_count == 4 && sites[0]->cycle_first == 3 &&
			      sites[0]->cycle_last == (fall ? 12u : 16u) && profile_site_live_grows(sites[0]) == !fall,
		      fall ? "live_grows_not_after_a_fall" : "live_grows", "count %u first %llu last %llu",
		      n ? sites[0]->cycle_count : 0, n ? (unsigned long long)sites[0]->cycle_first : 0,
		      n ? (unsigned long long)sites[0]->cycle_last : 0);
		free(sites);
		free(ev);
		profile_free(p);
	}
}

static void test_insn_classes(void)
{
	static const uint8_t push_rbp[] = { 0x55 }, push_r15[] = { 0x41, 0x57 }, mov_rdi_rax[] = { 0x48, 0x89, 0xf8 },
			     mov_rax_rdi[] = { 0x48, 0x89, 0xc7 }, sub_rsp[] = { 0x48, 0x83, 0xec, 0x28 };

	check(ocaml_runtime_insn_emulated(push_rbp, 1) && ocaml_runtime_insn_emulated(push_r15, 2) &&
		      !ocaml_runtime_insn_emulated(mov_rdi_rax, 3) && !ocaml_runtime_insn_emulated(sub_rsp, 4),
	      "insn_emulated_classes", "");
	/* mov %rdi,%rax keeps rdi: skippable; mov %rax,%rdi clobbers an argument */
	check(ocaml_runtime_skippable_insn(mov_rdi_rax, 3) == 3 && ocaml_runtime_skippable_insn(mov_rax_rdi, 3) == 0 &&
		      ocaml_runtime_skippable_insn(sub_rsp, 4) == 4,
	      "insn_skippable_keeps_arguments", "");
	{
		/* the prologue of 4.13.1's caml_memprof_minor_update, then its jb */
		static const uint8_t code[] = {
			0x48, 0x83, 0xec, 0x28,                               /* sub $0x28,%rsp */
			0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0,          /* mov %fs:0x28,%rax */
			0x48, 0x89, 0x44, 0x24, 0x18,                         /* mov %rax,0x18(%rsp) */
			0x48, 0x8b, 0x05, 0x87, 0x33, 0x44, 0x00,             /* mov rel(%rip),%rax */
			0x48, 0x3b, 0x05, 0xa0, 0x78, 0x44, 0x00,             /* cmp rel(%rip),%rax */
			0x72, 0x4e,                                           /* jb */
		};
		static const uint8_t movq_imm[] = { 0x48, 0xc7, 0x44, 0x24, 0x08, 0, 0, 0, 0 }, ret[] = { 0xc3 },
				     call_ind[] = { 0xff, 0xd0 };
		unsigned off = 0, steps = 0, len;

		while ((len = ocaml_runtime_plain_insn_len(code + off, sizeof(code) - off)) > 0) {
			off += len;
			steps++;
		}
		check(off == 32 && steps == 5 && ocaml_runtime_insn_emulated(code + off, sizeof(code) - off) &&
			      ocaml_runtime_plain_insn_len(movq_imm, sizeof(movq_imm)) == 9 &&
			      ocaml_runtime_plain_insn_len(ret, 1) == 0 && ocaml_runtime_plain_insn_len(call_ind, 2) == 0 &&
			      ocaml_runtime_plain_insn_len(code, 3) == 0,
		      "insn_plain_lengths", "stopped at %u after %u instructions", off, steps);
	}
}

/* The OCaml 5 write without a freeze (collect/ptexec5.c), on this
 * process's own memory: what is refused, what is written, and which change
 * between the two reads puts UINTNAT_MAX back.  A signal bit up at both
 * reads is the signal being handled (or a blocked one): the write stands
 * (a level rule refused 1874 of 1889 writes of the alloc_minor fixture's
 * `sig` part and lost its sample points). */
static void test_ptexec5(void)
{
	static volatile uint64_t words[8];
	struct ch_write_req req = {
		.addr = (uintptr_t)&words[0], .intr_addr = (uintptr_t)&words[1], .ext_addr = (uintptr_t)&words[2],
		.signals_addr = (uintptr_t)&words[3], .epoch_addr = (uintptr_t)&words[4],
		.gepoch_addr = (uintptr_t)&words[5], .restore_addr = (uintptr_t)&words[6],
		.expect = 0x1000, .value = 0x2000, .restore_value = 1,
	};
	struct ptexec5_words b = { .limit = 0x1000, .signals = 1u << 9, .epoch = 3, .gepoch = 3 }, a = b;
	int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
	enum ptexec5_outcome o;

	if (fd < 0) {
		check(0, "ptexec5_self", "/proc/self/mem: %s", strerror(errno));
		return;
	}
	/* refused at the first read: nothing written */
	words[0] = 0x1008;
	o = ptexec5_write(getpid(), fd, &req);
	check(o == PTEXEC5_STALE && words[0] == 0x1008 && !words[6], "ptexec5_stale", "outcome %d, limit %#llx", o,
	      (unsigned long long)words[0]);
	words[0] = 0x1000;
	words[1] = 1;
	o = ptexec5_write(getpid(), fd, &req);
	check(o == PTEXEC5_IN_FLIGHT && words[0] == 0x1000 && !words[6], "ptexec5_stw_request_in_flight",
	      "outcome %d", o);
	words[1] = 0;
	words[5] = 1; /* another domain asked for a major slice */
	o = ptexec5_write(getpid(), fd, &req);
	check(o == PTEXEC5_IN_FLIGHT && words[0] == 0x1000, "ptexec5_slice_epoch_behind", "outcome %d", o);
	words[4] = 1;
	words[2] = 1; /* the tick's flag, up from before: being handled */
	o = ptexec5_write(getpid(), fd, &req);
	check(o == PTEXEC5_WRITTEN && words[0] == 0x2000, "ptexec5_tick_already_up_writes", "outcome %d", o);
	words[0] = 0x1000;
	words[2] = 0;
	words[6] = 0;
	/* written, a signal bit up all along */
	words[3] = 1u << 9;
	o = ptexec5_write(getpid(), fd, &req);
	check(o == PTEXEC5_WRITTEN && words[0] == 0x2000 && words[6] == 1, "ptexec5_signal_already_up_writes",
	      "outcome %d, limit %#llx, action_pending %llu", o, (unsigned long long)words[0],
	      (unsigned long long)words[6]);
	close(fd);
	/* the second read's judgement */
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_WRITTEN, "ptexec5_judge_nothing_new", "");
	a.signals = b.signals | 1u << 13;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_REINTERRUPT, "ptexec5_judge_new_signal", "");
	a.signals = 1u << 13; /* the old one handled by another domain, a new one recorded */
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_REINTERRUPT, "ptexec5_judge_signal_replaced", "");
	a.signals = 0;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_WRITTEN, "ptexec5_judge_signal_handled", "");
	a = b;
	a.intr = 1;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_REINTERRUPT, "ptexec5_judge_stw_request", "");
	a = b;
	a.gepoch = 4;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_REINTERRUPT, "ptexec5_judge_slice_request", "");
	a = b;
	a.ext = 1;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_REINTERRUPT, "ptexec5_judge_tick", "");
	b.ext = 1;
	check(ptexec5_judge(0x1000, &b, &a) == PTEXEC5_WRITTEN, "ptexec5_judge_tick_already_up", "");
}

/* camlheap killed between the write of P and the re-check
 * (ptexec5_settle_after_death): a child of this process plays camlheap,
 * writes P into a word of ours and dies before its re-check; the probe
 * holder's settle then finds P there and stores UINTNAT_MAX, and leaves a
 * word the domain has reset since alone. */
static void test_ptexec5_death(void)
{
	uint64_t *w = mmap(NULL, 64, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	for (int moved = 0; moved < 2; moved++) {
		struct ch_write_req req = {
			.addr = (uintptr_t)&w[0], .intr_addr = (uintptr_t)&w[1], .ext_addr = (uintptr_t)&w[2],
			.signals_addr = (uintptr_t)&w[3], .epoch_addr = (uintptr_t)&w[4], .gepoch_addr = (uintptr_t)&w[5],
			.expect = 0x1000, .value = 0x2000,
		};
		pid_t self = getpid(), c;
		int st = 0, r;

		memset(w, 0, 64);
		w[0] = 0x1000;
		c = fork();
		if (c == 0) {
			char path[64];
			int fd;

			snprintf(path, sizeof(path), "/proc/%d/mem", (int)self);
			fd = open(path, O_RDWR | O_CLOEXEC);
			ptexec5_test_kill_after(1);
			ptexec5_write(self, fd, &req);
			_exit(3); /* not reached */
		}
		waitpid(c, &st, 0);
		if (moved)
			w[0] = 0x1008; /* the domain reset young_limit itself since */
		r = ptexec5_settle_after_death();
		if (moved)
			check(WIFSIGNALED(st) && r == 0 && w[0] == 0x1008, "ptexec5_death_after_a_reset_leaves_it",
			      "status %#x, settle %d, limit %#llx", st, r, (unsigned long long)w[0]);
		else
			check(WIFSIGNALED(st) && r == 1 && w[0] == UINT64_MAX, "ptexec5_death_mid_write_interrupts",
			      "status %#x, settle %d, limit %#llx", st, r, (unsigned long long)w[0]);
	}
	munmap(w, 64);
}

int main(void)
{
	test_geom_pool(1e-5);
	test_geom_pool(1e-3);
	test_geom_pool(0.25);
	test_ci();
	test_profile();
	test_outfile();
	test_insn_classes();
	test_census_accounting();
	test_live_grows_summary();
	test_live_objects_under_budget();
	test_ptexec5();
	test_ptexec5_death();
	return failures ? 1 : 0;
}
