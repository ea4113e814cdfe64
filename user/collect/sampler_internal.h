/* sampler_internal.h -- the sampler's state, shared by sampler.c (load,
 * attach, ring buffer, detach) and sampler_holder.c (the process that
 * holds the uprobe links): not part of sampler.h.
 */
#ifndef CH_SAMPLER_INTERNAL_H
#define CH_SAMPLER_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "collect/sampler.h"

struct alloc_bpf;
struct bpf_link;
struct bpf_program;
struct ring_buffer;

struct sampler {
	struct alloc_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *links[OCAML_PROBE__COUNT];
	/* or, where the kernel has them (uprobe_multi.h), uprobe_multi link
	 * descriptors instead of links[] (-1: none) */
	int ulinks[OCAML_PROBE__COUNT];
	bool multi;
	struct bpf_link *mlinks[2 * CH_MFN__COUNT]; /* --malloc: return probes, then entry probes */
	int umlinks[2 * CH_MFN__COUNT];             /* or their uprobe_multi links (-1: none) */
	bool malloc_on;
	struct malloc_probes mp;
	struct bpf_link *exec_link;
	struct bpf_link *exit_link; /* on_exit: the exit status (sampler_exit_status) */
	struct bpf_link *oom_link;  /* on_oom_victim (sampler_oom_victim_ns), NULL if the kernel has no
				     * oom:mark_victim tracepoint */
	bool oom_watched;           /* oom_link was attached (the holder may hold it now) */
	sampler_event_fn fn;
	void *ctx;
	double rate;
	enum ch_executor executor;
	bool minor_from_memprof;
	bool window_minor;      /* the window waits for the minor heap to be armed */
	bool census;
	int fixed_major;        /* the runtime family the programs were verified for (0: either) */
	uint32_t max_tracked;     /* major_tracked entries (census) */
	struct ch_proc last_proc; /* the process's state when sampling stopped */
	bool last_proc_valid;
	pid_t last_pid;
	int holder_fd;          /* write end of the holder's pipe, or -1 */
	/* the uprobe sites attached, for their cost (probe_cost.c) */
	struct sampler_site {
		int prog_fd;
		uint64_t file_offset; /* in the executable, or in libc (libc) */
		bool retprobe, emulated, libc;
	} sites[OCAML_PROBE__COUNT + 2 * CH_MFN__COUNT];
	unsigned nsites;
};

/* Note an attached site (sampler.c). */
static inline void sampler_add_site(struct sampler *s, int prog_fd, uint64_t file_offset, bool retprobe, bool emulated,
				    bool libc)
{
	if (s->nsites < sizeof(s->sites) / sizeof(s->sites[0]))
		s->sites[s->nsites++] = (struct sampler_site){ prog_fd, file_offset, retprobe, emulated, libc };
}

/* sampler_plan.c.  The program of each runtime probe (NULL: none) into
 * progs[OCAML_PROBE__COUNT], for an OCaml 5 runtime (rt_five) or a 4.x one. */
void sampler_runtime_programs(struct alloc_bpf *skel, bool rt_five, struct bpf_program *progs[OCAML_PROBE__COUNT]);

/* Is runtime probe `i` attached, for a plan that samples the minor heap
 * through traps (minor_on) with the register executor or another
 * (regexec), takes the program's own Gc.Memprof samples (minor_observe),
 * follows blocks (census_on)? */
bool sampler_probe_wanted(int i, const struct ocaml_runtime *rt, bool minor_on, bool regexec, bool minor_observe,
			  bool census_on);

/* sampler_plan.c.  The BPF object opened with the kernel types its CO-RE
 * relocations read (libbpf's btf_custom_path): cfg->kernel_btf's, else a
 * cut made here in a memfd (*kfd, to close after the load; -1 if none),
 * else, the cut refused (said under CAMLHEAP_DEBUG), libbpf reads the
 * kernel's whole BTF.  NULL with errno set if it cannot be opened. */
struct alloc_bpf *sampler_open_object(const struct sampler_config *cfg, int *kfd);

/* Before the load: only the programs of cfg's plan are loaded, as
 * uprobe_multi programs where the kernel has them (s->multi set). */
void sampler_select_programs(struct sampler *s, const struct sampler_config *cfg);

/* Before the load: the maps of what cfg's plan does not do get one entry. */
void sampler_size_maps(struct sampler *s, const struct sampler_config *cfg);

/* Runtime probe i's link descriptor (either form), or -1. */
int sampler_link_fd(const struct sampler *s, int i);

/* Wait up to 0.5 s until the map of young_trigger loans (the BPF map
 * trig_loans of bpf/ocaml5/minor.bpf.h, fd `fd`) is empty: every lent value
 * given back.  Returns the loans still out. */
int sampler_wait_loans_returned(int fd);

#endif
