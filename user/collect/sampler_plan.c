/* sampler_plan.c -- what a plan loads and attaches of alloc.bpf.c: the
 * program of each runtime probe, which probes it attaches, which programs
 * are loaded (the verifier's time is most of an attach) and how large the
 * maps it does not use are made (see sampler_internal.h). */
#define _GNU_SOURCE
#include "collect/sampler_internal.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "alloc.skel.h"
#include "collect/kernel_btf.h"
#include "collect/uprobe_multi.h"

int sampler_kernel_btf(char *err, size_t errlen)
{
	size_t sz;
	const void *elf = alloc_bpf__elf_bytes(&sz);

	return kernel_btf_memfd(elf, sz, err, errlen);
}

struct alloc_bpf *sampler_open_object(const struct sampler_config *cfg, int *kfd)
{
	char path[64], why[256];
	LIBBPF_OPTS(bpf_object_open_opts, opts);

	*kfd = -1;
	if (cfg->kernel_btf) {
		opts.btf_custom_path = cfg->kernel_btf;
	} else if ((*kfd = sampler_kernel_btf(why, sizeof(why))) >= 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", *kfd);
		opts.btf_custom_path = path; /* read at the load: *kfd open until then */
	} else if (getenv("CAMLHEAP_DEBUG")) { /* libbpf reads the kernel's whole BTF itself */
		fprintf(stderr, "camlheap: the kernel's BTF is read whole: %s\n", why);
	}
	return alloc_bpf__open_opts(&opts);
}

/* The program of each runtime probe (several probes may share one). */
void sampler_runtime_programs(struct alloc_bpf *skel, bool rt_five, struct bpf_program *progs[OCAML_PROBE__COUNT])
{
	struct bpf_program *p[OCAML_PROBE__COUNT] = {
		[OCAML_PROBE_TRACK_ALLOC_SHR] = skel->progs.on_track_alloc_shr,
		[OCAML_PROBE_TRACK_CUSTOM] = skel->progs.on_track_custom,
		[OCAML_PROBE_TRACK_INTERNED] = skel->progs.on_track_interned,
		[OCAML_PROBE_REGISTER_FRAMETABLE] = skel->progs.on_register_frametable,
		[OCAML_PROBE_DISPATCH] = skel->progs.on_dispatch,
		[OCAML_PROBE_DISPATCH_RET] = skel->progs.on_dispatch_ret,
		[OCAML_PROBE_REARM_UPDATE] = skel->progs.on_rearm_update,
		[OCAML_PROBE_REARM_PENDING] = skel->progs.on_rearm_pending,
		[OCAML_PROBE_TRACK_YOUNG] = skel->progs.on_track_young,
		[OCAML_PROBE_MINOR_UPDATE] = skel->progs.on_minor_update,
		[OCAML_PROBE_CLEAN_PHASE] = skel->progs.on_clean_phase,
		[OCAML_PROBE_COMPACTION] = skel->progs.on_compaction,
		[OCAML_PROBE_SAMPLE_BLOCK] = skel->progs.on_sample_block,
		[OCAML_PROBE_ALLOC_SHR_RET] = skel->progs.on_alloc_shr_ret,
		[OCAML_PROBE_ALLOC_SHR_RESERVED_RET] = skel->progs.on_alloc_shr_ret,
		[OCAML_PROBE_ALLOC_SHR_NOEXC_RET] = skel->progs.on_alloc_shr_ret,
		[OCAML_PROBE_CUSTOM_MEM] = skel->progs.on_custom_mem,
		[OCAML_PROBE_CUSTOM_MEM_RET] = skel->progs.on_custom_mem_ret,
		[OCAML_PROBE_BA_ALLOC_RET] = skel->progs.on_ba_alloc_ret,
		[OCAML_PROBE_BA_ALLOC] = skel->progs.on_ba_alloc,
		[OCAML_PROBE_MAPPED_ALLOC_RET] = skel->progs.on_ba_alloc_ret,
		[OCAML_PROBE_MAPPED_ALLOC] = skel->progs.on_mapped_alloc,
		[OCAML_PROBE_FATAL_EXN] = skel->progs.on_fatal_exn,
		[OCAML_PROBE_DISPATCH5] = skel->progs.on_dispatch5,
		[OCAML_PROBE_DISPATCH5_RET] = skel->progs.on_dispatch5_ret,
		[OCAML_PROBE_RESET_LIMIT] = skel->progs.on_reset_young_limit,
		[OCAML_PROBE_RESET_LIMIT_RET] = skel->progs.on_reset_young_limit_ret,
		[OCAML_PROBE_REGISTER_FRAMETABLES] = skel->progs.on_register_frametables,
		[OCAML_PROBE_SAMPLE_YOUNG5] = skel->progs.on_sample_young5,
		[OCAML_PROBE_MINOR5] = skel->progs.on_minor5,
		[OCAML_PROBE_CYCLE5] = skel->progs.on_cycle5,
		[OCAML_PROBE_COMPACT5] = skel->progs.on_compaction5,
		[OCAML_PROBE_REG_TRIGGER] = rt_five ? skel->progs.on_reg_trigger5 : skel->progs.on_reg_trigger4,
		[OCAML_PROBE_REG_TRIGGER_PENDING] = skel->progs.on_reg_trigger4_pending,
		[OCAML_PROBE_REG_END] = skel->progs.on_reg_end4,
		[OCAML_PROBE_REG_END_RET] = skel->progs.on_reg_end_ret4,
		[OCAML_PROBE_REG_URGENT] = skel->progs.on_reg_urgent4,
	};

	memcpy(progs, p, sizeof(p));
}

/* Is runtime probe `i` attached, for a plan that samples the minor heap
 * through traps (minor_on) with the register executor or not (regexec),
 * takes the program's own Gc.Memprof samples (minor_observe), follows
 * blocks (census_on)? */
bool sampler_probe_wanted(int i, const struct ocaml_runtime *rt, bool minor_on, bool regexec, bool minor_observe,
			  bool census_on)
{
	if (!rt->probes[i].present)
		return false;
	/* the register executor arms inside the runtime's loads instead of
	 * after its stores (4.x re-arm points) or around its reset (5.x) */
	if (i >= OCAML_PROBE_REG_TRIGGER && i <= OCAML_PROBE_REG_URGENT)
		return minor_on && regexec;
	if (regexec && (i == OCAML_PROBE_REARM_UPDATE || i == OCAML_PROBE_REARM_PENDING ||
			i == OCAML_PROBE_RESET_LIMIT || i == OCAML_PROBE_RESET_LIMIT_RET))
		return false;
	if (i >= OCAML_PROBE_DISPATCH && i <= OCAML_PROBE_REARM_PENDING && !minor_on)
		return false;
	if ((i == OCAML_PROBE_TRACK_YOUNG || i == OCAML_PROBE_SAMPLE_YOUNG5) && !minor_observe)
		return false;
	if (i >= OCAML_PROBE_DISPATCH5 && i <= OCAML_PROBE_RESET_LIMIT && !minor_on)
		return false;
	if (((i >= OCAML_PROBE_MINOR_UPDATE && i <= OCAML_PROBE_COMPACTION) ||
	     (i >= OCAML_PROBE_MINOR5 && i <= OCAML_PROBE_COMPACT5)) && !census_on)
		return false;
	return true;
}

/* Load only the programs this plan attaches: the verifier's time is most
 * of a load (measured: 0.33 s for all 48 programs on this VM).  Programs
 * not named by a probe of the plan (the other release family's, --malloc's
 * without it) are not loaded. */
void sampler_select_programs(struct sampler *s, const struct sampler_config *cfg)
{
	const struct ocaml_runtime *rt = cfg->runtime;
	struct bpf_program *progs[OCAML_PROBE__COUNT], *prog;
	bool minor_on = rt->minor_ok && cfg->executor != CH_EXEC_OBSERVE;
	bool minor_observe = rt->minor_ok && cfg->executor == CH_EXEC_OBSERVE && cfg->minor_from_memprof;
	bool census_on = rt->census_ok && cfg->census;

	sampler_runtime_programs(s->skel, rt->major == 5, progs);
	bpf_object__for_each_program(prog, s->skel->obj)
		if (bpf_program__type(prog) == BPF_PROG_TYPE_KPROBE)
			bpf_program__set_autoload(prog, false);
	/* the runtime's probes as uprobe_multi links where the kernel has
	 * them (uprobe_multi.h; CAMLHEAP_NO_UPROBE_MULTI=1: perf events, as
	 * on kernels before 6.6) */
	s->multi = uprobe_multi_supported() && !getenv("CAMLHEAP_NO_UPROBE_MULTI");
	for (int i = 0; i < OCAML_PROBE__COUNT; i++)
		if (progs[i] && sampler_probe_wanted(i, rt, minor_on, cfg->executor == CH_EXEC_REGISTER, minor_observe,
						     census_on)) {
			bpf_program__set_autoload(progs[i], true);
			if (s->multi)
				bpf_program__set_expected_attach_type(progs[i], CH_BPF_TRACE_UPROBE_MULTI);
		}
	if (cfg->malloc) {
		struct bpf_program *m[] = {
			s->skel->progs.on_malloc, s->skel->progs.on_calloc, s->skel->progs.on_realloc,
			s->skel->progs.on_posix_memalign, s->skel->progs.on_aligned_alloc, s->skel->progs.on_memalign,
			s->skel->progs.on_mmap, s->skel->progs.on_free, s->skel->progs.on_malloc_ret,
		};

		for (size_t k = 0; k < sizeof(m) / sizeof(m[0]); k++) {
			bpf_program__set_autoload(m[k], true);
			if (s->multi)
				bpf_program__set_expected_attach_type(m[k], CH_BPF_TRACE_UPROBE_MULTI);
		}
	}
}

/* Entries of a map keyed by thread for what a thread has in flight (an
 * allocation between its entry and return probes, a young_limit write
 * asked for): 1024 threads at once, plus the 128 entries each CPU's LRU
 * free list may hold before an update evicts (kernel/bpf/bpf_lru_list.c
 * LOCAL_FREE_TARGET).  The kernel preallocates every entry at the load:
 * 8192 for each of five maps was ~5 ms of CPU and 3.9 MiB of a 2-CPU
 * host's attach. */
static uint32_t thread_slots(void)
{
	int cpus = libbpf_num_possible_cpus();

	return 1024 + 128 * (uint32_t)(cpus > 0 ? cpus : 64);
}

void sampler_size_maps(struct sampler *s, const struct sampler_config *cfg)
{
	/* the maps of what this plan does not do: one entry (the
	 * kernel preallocates and zeroes the others at load) */
	bool five = cfg->runtime->major == 5;
	uint32_t slots = thread_slots();

	bpf_map__set_max_entries(s->skel->maps.inflight_by_tid, slots);
	bpf_map__set_max_entries(s->skel->maps.dispatch_inflight, slots);
	bpf_map__set_max_entries(s->skel->maps.ba_inflight, slots);
	bpf_map__set_max_entries(s->skel->maps.custom_inflight, slots);
	bpf_map__set_max_entries(s->skel->maps.write_req, slots);

	if (!cfg->malloc)
		bpf_map__set_max_entries(s->skel->maps.malloc_inflight, 1);
	if (cfg->executor != CH_EXEC_PTRACE)
		bpf_map__set_max_entries(s->skel->maps.write_req, 1);
	if (!five || cfg->executor != CH_EXEC_KERNEL)
		bpf_map__set_max_entries(s->skel->maps.trig_loans, 1);
	if (five || cfg->executor != CH_EXEC_REGISTER)
		bpf_map__set_max_entries(s->skel->maps.reg_end_subst, 1);
	if (!five) {
		bpf_map__set_max_entries(s->skel->maps.reset_dom, 1);
		bpf_map__set_max_entries(s->skel->maps.domains, 1);
	}
}
