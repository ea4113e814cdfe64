/* unit_sampler.c -- the geometric pool, the confidence interval, the
 * profile aggregate and the output-file protocol, without BPF.
 * Prints "PASS name" / "FAIL name: why"; exits 1 on any failure. */
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ocaml_runtime.h"
#include "profile.h"
#include "outfile.h"
#include "report.h"
#include "sampler.h"

static int failures;

static void check(int ok, const char *name, const char *fmt, ...)
{
	if (ok) {
		printf("PASS %s\n", name);
		return;
	}
	va_list ap;
	printf("FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	failures++;
}

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
	return failures ? 1 : 0;
}
