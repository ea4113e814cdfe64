/* sampler.c -- see sampler.h. */
#define _GNU_SOURCE
#include "collect/sampler_internal.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "alloc.skel.h"
#include "collect/uprobe_multi.h"

/* splitmix64: seeds and stratum jitter; quality is ample for this. */
static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void sampler_fill_geom_pool(uint64_t *pool, size_t n, double rate, uint64_t seed)
{
	double l1m = log1p(-rate); /* log(1 - lambda) < 0 */

	for (size_t i = 0; i < n; i++) {
		/* u in the i-th stratum of (0,1), never 0 */
		double jitter = ((splitmix64(&seed) >> 11) + 0.5) * 0x1.0p-53;
		double u = ((double)i + jitter) / (double)n;
		double g;

		if (rate >= 1.0) {
			pool[i] = 1;
			continue;
		}
		g = 1.0 + floor(log(u) / l1m);
		if (!(g >= 1.0))
			g = 1.0;
		if (g > 0x1.0p62)
			g = 0x1.0p62;
		pool[i] = (uint64_t)g;
	}
}

static int ring_event(void *ctx, void *data, size_t size)
{
	struct sampler *s = ctx;

	/* sample events and notes, or fate records (struct ch_fate_event,
	 * whose kind sits at the same offset) */
	if (size >= CH_EVENT_HEADER_BYTES ||
	    (size == sizeof(struct ch_fate_event) && ((const struct ch_fate_event *)data)->kind >= CH_FATE_PROMOTE))
		s->fn(s->ctx, data, size);
	return 0;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	if (level == LIBBPF_WARN && getenv("CAMLHEAP_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	if (level == LIBBPF_DEBUG && getenv("CAMLHEAP_DEBUG"))
		return vfprintf(stderr, fmt, ap);
	return 0;
}

static int fill_frametable(int fd, const struct frametable *ft, uint64_t bias)
{
	size_t batch = 4096;
	struct ch_frame_key *keys = calloc(batch, sizeof(*keys));
	struct ch_frame_val *vals = calloc(batch, sizeof(*vals));
	int ret = 0;

	if (!keys || !vals) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < ft->count; i += batch) {
		__u32 n = 0;

		for (size_t j = i; j < ft->count && j < i + batch; j++, n++) {
			keys[n].retaddr = ft->descrs[j].retaddr + bias;
			vals[n].frame_size = ft->descrs[j].frame_size;
		}
		if (bpf_map_update_batch(fd, keys, vals, &n, NULL) < 0) {
			ret = -errno;
			goto out;
		}
	}
out:
	free(keys);
	free(vals);
	return ret;
}

/* Descriptors the load and the attach take: one per map, two per loaded
 * program (it and its link, or its perf event), two per libc probe with
 * --malloc, and some for libbpf's BTF and feature probes and camlheap's
 * own (ring buffer, pidfd, timers).  Too few would not only fail: libbpf takes a feature probe that
 * failed for lack of descriptors (EMFILE) as the kernel lacking the
 * feature, and the load then fails as if the kernel refused the programs
 * (EINVAL).  So they are counted first.  Returns 0, or -EMFILE (err set). */
static int check_fd_headroom(struct sampler *s, char *err, size_t errlen)
{
	struct rlimit rl;
	struct bpf_map *m;
	struct bpf_program *pr;
	unsigned need = (s->malloc_on ? 4 * CH_MFN__COUNT : 0) + 8, open_fds = 0;
	DIR *d;

	bpf_object__for_each_map(m, s->skel->obj)
		need++;
	bpf_object__for_each_program(pr, s->skel->obj)
		need += 2 * bpf_program__autoload(pr);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || !(d = opendir("/proc/self/fd")))
		return 0;
	while (readdir(d))
		open_fds++;
	closedir(d);
	open_fds = open_fds > 3 ? open_fds - 3 : 0; /* ., .. and the directory's own */
	if (open_fds + need <= rl.rlim_cur)
		return 0;
	snprintf(err, errlen,
		 "%s: %u descriptors are open of the limit %llu, and the BPF maps, programs and probes take %u more; "
		 "raise the limit (ulimit -n, LimitNOFILE=)",
		 strerror(EMFILE), open_fds, (unsigned long long)rl.rlim_cur, need);
	return -EMFILE;
}

/* The pool in the map's own memory (BPF_F_MMAPABLE): no update a slot. */
static int fill_geom_pool(struct sampler *s, double rate)
{
	size_t bytes = (size_t)CH_GEOM_POOL_SIZE * sizeof(uint64_t);
	uint64_t *pool = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(s->skel->maps.geom_pool), 0);
	uint64_t seed = 0;

	if (pool == MAP_FAILED)
		return -errno;
	if (getentropy(&seed, sizeof(seed)) < 0)
		seed = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL;
	sampler_fill_geom_pool(pool, CH_GEOM_POOL_SIZE, rate, seed);
	munmap(pool, bytes);
	return 0;
}

uint32_t sampler_young_capacity(double rate)
{
	/* samples in one minor heap of up to 8 Mwords (64 MiB, 32x the
	 * default), plus ten standard deviations; never more than blocks fit
	 * in it (two words each at least) */
	double mean = rate * 8388608.0, cap = mean + 10.0 * sqrt(mean) + 4096.0;

	return cap > 1048576.0 ? 1048576u : (uint32_t)cap;
}

uint32_t sampler_default_max_tracked(double rate)
{
	double want = rate * 2147483648.0;
	uint32_t n = 16384;

	while (n < (1u << 18) && n < want)
		n <<= 1;
	return n;
}

int sampler_open(const struct sampler_config *cfg, const struct frametable *ft, sampler_event_fn fn, void *ctx,
		 struct sampler **out, char *err, size_t errlen)
{
	struct sampler *s = calloc(1, sizeof(*s));
	int ret, kfd = -1;

	if (!s)
		return -ENOMEM;
	s->fn = fn;
	s->ctx = ctx;
	s->holder_fd = -1;
	for (int i = 0; i < OCAML_PROBE__COUNT; i++)
		s->ulinks[i] = -1;
	for (int i = 0; i < 2 * CH_MFN__COUNT; i++)
		s->umlinks[i] = -1;
	s->rate = cfg->rate;
	s->executor = cfg->executor;
	s->minor_from_memprof = cfg->minor_from_memprof;
	s->census = cfg->census;
	if (cfg->malloc) {
		s->malloc_on = true;
		s->mp = *cfg->malloc;
	}
	s->max_tracked = !cfg->census ? 1 : cfg->max_tracked ? cfg->max_tracked : sampler_default_max_tracked(cfg->rate);
	libbpf_set_print(libbpf_quiet);

	s->skel = sampler_open_object(cfg, &kfd);
	if (!s->skel) {
		ret = -errno;
		snprintf(err, errlen, "cannot open the BPF object: %s", strerror(-ret));
		goto fail;
	}
	s->skel->rodata->max_frames = cfg->max_frames;
	s->skel->rodata->executor = cfg->executor;
	s->skel->rodata->tracer_tgid = (__u32)cfg->tracer_tgid;
	if (cfg->runtime) { /* the other family's paths and the census's are then not verified */
		s->fixed_major = cfg->runtime->major;
		s->skel->rodata->fixed_major = (__u32)cfg->runtime->major;
		s->skel->rodata->fixed_census = cfg->census && cfg->runtime->census_ok ? CH_FIXED_ON : CH_FIXED_OFF;
	}
	bpf_map__set_max_entries(s->skel->maps.frametable, ft->count ? ft->count : 1);
	if (cfg->runtime_frames_cap)
		bpf_map__set_max_entries(s->skel->maps.frametable_rt, cfg->runtime_frames_cap);
	if (cfg->runtime)
		sampler_size_maps(s, cfg);
	bpf_map__set_max_entries(s->skel->maps.events, cfg->ringbuf_bytes);
	if (cfg->stacks_sent_cap)
		bpf_map__set_max_entries(s->skel->maps.stacks_sent, cfg->stacks_sent_cap);
	/* the young set of the runtime's family only (4.x young_tracked, 5.x young5) */
	bpf_map__set_max_entries(s->skel->maps.young_tracked, cfg->census && !(cfg->runtime && cfg->runtime->major == 5)
					? sampler_young_capacity(cfg->rate) : 1);
	bpf_map__set_max_entries(s->skel->maps.major_tracked, s->max_tracked);
	bpf_map__set_max_entries(s->skel->maps.young5, cfg->census && !(cfg->runtime && cfg->runtime->major != 5)
					? sampler_young_capacity(cfg->rate) : 1);
	bpf_map__set_max_entries(s->skel->maps.malloc_live, cfg->malloc ? s->max_tracked : 1);
	if (cfg->runtime)
		sampler_select_programs(s, cfg);
	ret = check_fd_headroom(s, err, errlen);
	if (ret)
		goto fail;
	ret = alloc_bpf__load(s->skel); /* at PROC_ATTACH_NICE: record raises the whole attach (proc.h) */
	if (kfd >= 0)
		close(kfd); /* libbpf has read it */
	kfd = -1;
	if (ret) {
		ret = ret < 0 ? ret : -errno;
		if (ret == -ENOMEM)
			snprintf(err, errlen,
				 "not enough kernel memory for the BPF maps (%s); --max-tracked N takes 48 bytes "
				 "a block: lower it",
				 strerror(-ret));
		else if (ret == -EPERM)
			snprintf(err, errlen,
				 "the kernel refused to load the BPF programs (%s): camlheap needs CAP_BPF "
				 "and CAP_PERFMON (or root)",
				 strerror(-ret));
		else
			snprintf(err, errlen,
				 "cannot load the BPF programs: %s (the verifier refused them, or the kernel "
				 "is older than 5.17 or lacks BTF; CAMLHEAP_DEBUG=1 prints the verifier log)",
				 strerror(-ret));
		goto fail;
	}
	ret = fill_frametable(bpf_map__fd(s->skel->maps.frametable), ft, 0);
	if (ret) {
		snprintf(err, errlen, "cannot fill the frame-table map (%zu descriptors): %s", ft->count,
			 strerror(-ret));
		goto fail;
	}
	ret = fill_geom_pool(s, cfg->rate);
	if (ret) {
		snprintf(err, errlen, "cannot fill the geometric pool: %s", strerror(-ret));
		goto fail;
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.events), ring_event, s, NULL);
	if (!s->rb) {
		ret = -errno;
		snprintf(err, errlen, "cannot open the ring buffer: %s", strerror(-ret));
		goto fail;
	}
	*out = s;
	return 0;
fail:
	if (kfd >= 0)
		close(kfd);
	sampler_close(s);
	return ret;
}

/* The process's entry in `procs`: where its runtime keeps what the BPF
 * side reads (rt, at load_bias), what it samples, and its first
 * countdown.  Returns 0 or -errno (err set). */
static int sampler_register(struct sampler *s, pid_t pid, uint64_t load_bias, const struct ocaml_runtime *rt,
			    struct ch_proc *proc, char *err, size_t errlen)
{
	__u32 key = pid;
	uint64_t first, seed = 0;

	if (s->fixed_major && s->fixed_major != rt->major) {
		snprintf(err, errlen, "PID %d runs OCaml %d.%d, but the sampler was loaded for OCaml %d", pid,
			 rt->major, rt->minor, s->fixed_major);
		return -EINVAL;
	}
	*proc = (struct ch_proc){
		.load_bias = load_bias,
		.caml_state_sym = rt->caml_state_sym,
		.young_limit_off = rt->young_limit_off,
		.young_ptr_off = rt->young_ptr_off,
		.something_to_do_sym = rt->something_to_do_sym,
		.memprof_trigger_sym = rt->memprof_trigger_sym,
		.final_todo_sym = rt->final_todo_sym,
		.signals_pending_sym = rt->signals_pending_sym,
		.minor_on = rt->minor_ok && s->executor != CH_EXEC_OBSERVE,
		.minor_observe = rt->minor_ok && s->executor == CH_EXEC_OBSERVE && s->minor_from_memprof,
		.census_on = rt->census_ok && s->census,
		.ocaml5 = rt->major == 5,
		.first_frame = rt->frame_pointers ? 16 : 8,
		.tls_state_off = rt->tls_state_off,
		.minor_count_sym = rt->minor_count_sym,
		.major_count_sym = rt->major_count_sym,
		.compact_count_sym = rt->compact_count_sym,
		.dom_id_off = rt->dom_id_off,
		.memprof_trig_off = rt->memprof_trig_off,
		.heap_state_sym = rt->heap_state_sym,
		.major_cap = s->max_tracked,
		.ba_ops_sym = rt->ba_ops_sym,
		.all_domains_sym = rt->all_domains_sym,
		.slice_epoch_sym = rt->slice_epoch_sym,
		.pending_signals_sym = rt->pending_signals_sym,
		.dom_internal_size = rt->dom_internal_size,
		.intr_pending_off = rt->intr_pending_off,
		.dom_internal_state_off = (__u16)rt->dom_internal_state_off,
		.slice_epoch_off = rt->slice_epoch_off,
		.ext_intr_off = rt->ext_intr_off,
		.all_domains_ptr = rt->all_domains_ptr,
		.final_info_off = rt->final_info_off,
		.memprof_off = (__u16)rt->memprof_off,
		.update_fn = rt->update_fn,
		.dispatch_lo = rt->dispatch_lo,
		.dispatch_hi = rt->dispatch_hi,
	};
	for (int k = 0; k < 3; k++)
		proc->reg_load[k] = (struct ch_reg_load){ .dst = rt->reg_trigger[k].dst,
							   .base = rt->reg_trigger[k].base,
							   .len = rt->reg_trigger[k].len,
							   .store_len = k == 2 ? (__u8)rt->reg_end_store_len : 0,
							   .disp = rt->reg_trigger[k].disp };
	/* The register executor makes no write of its own: the runtime stores
	 * into the young_limit its code was seen to store to, so the layout
	 * its code confirmed needs no live check first (4.x; the live checks
	 * at dispatch entries still stop sampling if one breaks). */
	if (s->executor == CH_EXEC_REGISTER && rt->layout_from_code)
		proc->layout = CH_LAYOUT_VERIFIED;
	proc->window_minor = proc->minor_on;
	s->window_minor = proc->minor_on;

	/* next_sample_words is the 0-based index of the next sampled word, so
	 * it starts at rand_geom() - 1 (memprof.c does the same); a
	 * one-stratum pool is one plain draw. */
	if (getentropy(&seed, sizeof(seed)) < 0)
		seed = (uint64_t)pid;
	sampler_fill_geom_pool(&first, 1, s->rate, seed);
	proc->next_sample_words = (__s64)first - 1;
	if (s->malloc_on) {
		for (unsigned i = 0; i < s->mp.n_rt_mem; i++) {
			proc->rt_mem_lo[i] = s->mp.rt_mem_lo[i];
			proc->rt_mem_hi[i] = s->mp.rt_mem_hi[i];
		}
		if (s->mp.mmap_vaddr) {
			proc->libc_mmap_vaddr = s->mp.mmap_vaddr;
			proc->libc_text_lo = s->mp.libc_text_lo;
			proc->libc_text_hi = s->mp.libc_text_hi;
		}
	}
	if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.procs), &key, proc, BPF_ANY) < 0) {
		snprintf(err, errlen, "cannot register PID %d with the sampler: %s", pid, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The order the runtime's probes are attached in, into order[]; returns
 * their count.  The collection hooks first: a block is followed only once
 * every collection it can meet is seen (a compaction or minor collection
 * missed while attaching would leave its address meaningless). */
static int sampler_probe_order(int order[OCAML_PROBE__COUNT])
{
	int norder = 0;

	for (int i = OCAML_PROBE_MINOR_UPDATE; i <= OCAML_PROBE_COMPACTION; i++)
		order[norder++] = i;
	for (int i = OCAML_PROBE_MINOR5; i <= OCAML_PROBE_COMPACT5; i++)
		order[norder++] = i;
	for (int i = 0; i < OCAML_PROBE__COUNT; i++)
		if ((i < OCAML_PROBE_MINOR_UPDATE || i > OCAML_PROBE_COMPACTION) &&
		    (i < OCAML_PROBE_MINOR5 || i > OCAML_PROBE_COMPACT5))
			order[norder++] = i;
	/* a uretprobe's return half must be in place before its entry half
	 * can fire (CUSTOM_MEM keeps state for CUSTOM_MEM_RET): returns last
	 * is wrong, entries last is right */
	for (int a = 0; a < norder; a++)
		if (order[a] == OCAML_PROBE_CUSTOM_MEM) {
			for (int b = a; b + 1 < norder; b++)
				order[b] = order[b + 1];
			order[norder - 1] = OCAML_PROBE_CUSTOM_MEM;
			break;
		}
	return norder;
}

/* The runtime's uprobes on `exe` (its name for messages: exe_name), in
 * sampler_probe_order's order, those the plan and `proc` call for.
 * Returns 0 or -errno (err set, every link detached). */
static int sampler_attach_runtime(struct sampler *s, pid_t pid, const struct ocaml_runtime *rt,
				  const struct ch_proc *proc, const char *exe, const char *exe_name, char *err,
				  size_t errlen)
{
	struct bpf_program *progs[OCAML_PROBE__COUNT];
	int order[OCAML_PROBE__COUNT], norder = sampler_probe_order(order);

	sampler_runtime_programs(s->skel, rt->major == 5, progs);
	for (int k = 0; k < norder; k++) {
		int i = order[k];
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = rt->probes[i].retprobe);

		if (!sampler_probe_wanted(i, rt, proc->minor_on, s->executor == CH_EXEC_REGISTER, proc->minor_observe,
					  proc->census_on))
			continue;
		if (s->multi) {
			s->ulinks[i] = uprobe_multi_attach(bpf_program__fd(progs[i]), pid, exe, rt->probes[i].file_offset,
							   rt->probes[i].retprobe);
			errno = s->ulinks[i] < 0 ? -s->ulinks[i] : 0;
		} else {
			s->links[i] = bpf_program__attach_uprobe_opts(progs[i], pid, exe, rt->probes[i].file_offset, &opts);
		}
		if (sampler_link_fd(s, i) < 0) {
			int e = errno;

			snprintf(err, errlen, "cannot attach a uprobe to %s (%s at file offset 0x%llx): %s%s",
				 exe_name, rt->probes[i].symbol, (unsigned long long)rt->probes[i].file_offset,
				 strerror(e),
				 e == EPERM || e == EACCES ? " (needs CAP_PERFMON and CAP_SYS_ADMIN or root)" : "");
			sampler_detach(s);
			return -e;
		}
		sampler_add_site(s, bpf_program__fd(progs[i]), rt->probes[i].file_offset, rt->probes[i].retprobe,
				 rt->probes[i].emulated, false);
		/* test knob: a slow attach (a loaded machine) made on purpose */
		if (getenv("CAMLHEAP_ATTACH_DELAY_MS"))
			usleep((useconds_t)atoi(getenv("CAMLHEAP_ATTACH_DELAY_MS")) * 1000);
	}
	return 0;
}

/* --malloc: libc's uprobes.  Returns 0 or -errno (err set, every link
 * detached). */
static int sampler_attach_malloc(struct sampler *s, pid_t pid, char *err, size_t errlen)
{
	struct bpf_program *mprogs[CH_MFN__COUNT] = {
		[CH_MFN_MALLOC] = s->skel->progs.on_malloc,
		[CH_MFN_CALLOC] = s->skel->progs.on_calloc,
		[CH_MFN_REALLOC] = s->skel->progs.on_realloc,
		[CH_MFN_POSIX_MEMALIGN] = s->skel->progs.on_posix_memalign,
		[CH_MFN_ALIGNED_ALLOC] = s->skel->progs.on_aligned_alloc,
		[CH_MFN_MEMALIGN] = s->skel->progs.on_memalign,
		[CH_MFN_MMAP] = s->skel->progs.on_mmap,
		[CH_MFN_FREE] = s->skel->progs.on_free,
		[CH_MFN_MUNMAP] = s->skel->progs.on_free,
	};

	/* --malloc: every return probe before any entry probe, so that a
	 * pending call always meets its return */
	for (unsigned k = 0; s->malloc_on && k < 2 * CH_MFN__COUNT; k++) {
		unsigned f = k % CH_MFN__COUNT;
		bool ret = k < CH_MFN__COUNT;
		const struct malloc_probe *mp = &s->mp.fn[f];
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret);

		if (!mp->present || (ret && f >= CH_MFN__ALLOCS))
			continue;
		struct bpf_program *prog = ret ? s->skel->progs.on_malloc_ret : mprogs[f];
		uint64_t off = ret ? mp->ret_offset : mp->file_offset;

		if (s->multi) {
			s->umlinks[k] = uprobe_multi_attach(bpf_program__fd(prog), pid, s->mp.path, off, ret);
			errno = s->umlinks[k] < 0 ? -s->umlinks[k] : 0;
		} else {
			s->mlinks[k] = bpf_program__attach_uprobe_opts(prog, pid, s->mp.path, off, &opts);
		}
		if (!s->mlinks[k] && s->umlinks[k] < 0) {
			int e = errno;

			snprintf(err, errlen, "--malloc: cannot attach a uprobe to %s (%s at file offset 0x%llx): %s",
				 s->mp.shown, mp->symbol,
				 (unsigned long long)(ret ? mp->ret_offset : mp->file_offset), strerror(e));
			sampler_detach(s);
			return -e;
		}
		sampler_add_site(s, bpf_program__fd(prog), off, ret, mp->emulated, true);
	}
	return 0;
}

/* A process-lifecycle tracepoint program (on_exec, on_exit) into *link.
 * Returns 0 or -errno with err set. */
static int attach_tracepoint(struct bpf_program *prog, const char *name, struct bpf_link **link, char *err,
			     size_t errlen)
{
	*link = bpf_program__attach(prog);
	if (!*link) {
		int e = errno;

		snprintf(err, errlen, "cannot attach to the %s tracepoint: %s", name, strerror(e));
		return -e;
	}
	return 0;
}

int sampler_attach(struct sampler *s, pid_t pid, uint64_t load_bias, const struct ocaml_runtime *rt,
		   const char *exe, const char *exe_name, char *err, size_t errlen)
{
	struct ch_proc proc;
	int ret = sampler_register(s, pid, load_bias, rt, &proc, err, errlen);

	if (ret < 0)
		return ret;
	s->nsites = 0;
	if ((ret = attach_tracepoint(s->skel->progs.on_exec, "sched_process_exec", &s->exec_link, err, errlen)) < 0 ||
	    (ret = attach_tracepoint(s->skel->progs.on_exit, "sched_process_exit", &s->exit_link, err, errlen)) < 0)
		return ret;
	/* optional: a kernel without oom:mark_victim only refuses --on oom (census_watch_start) */
	s->oom_link = bpf_program__attach(s->skel->progs.on_oom_victim);
	s->oom_watched = s->oom_link != NULL;
	ret = sampler_attach_runtime(s, pid, rt, &proc, exe, exe_name, err, errlen);
	if (ret < 0)
		return ret;
	return sampler_attach_malloc(s, pid, err, errlen);
}

int sampler_kernel_write_allowed(void)
{
	/* A uprobe program, never attached: *(u64 *)(r10 - 8) = 0;
	 * bpf_probe_write_user(0, r10 - 8, 8); return 0.  Loaded from raw
	 * instructions, not from a BPF object: libbpf would parse the
	 * kernel's BTF first (measured: 0.09 s of a 0.45 s attach), which
	 * this program does not need.  Kernel lockdown refuses the helper (kernel/trace/bpf_trace.c
	 * bpf_tracing_func_proto, LOCKDOWN_BPF_WRITE_USER): EINVAL. */
	struct bpf_insn insns[] = {
		{ .code = BPF_ST | BPF_MEM | BPF_DW, .dst_reg = BPF_REG_10, .off = -8, .imm = 0 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_1, .imm = 0 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_X, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_10 },
		{ .code = BPF_ALU64 | BPF_ADD | BPF_K, .dst_reg = BPF_REG_2, .imm = -8 },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_3, .imm = 8 },
		{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_probe_write_user },
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	int fd;

	libbpf_set_print(libbpf_quiet);
	fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "probe_write", "GPL", insns, sizeof(insns) / sizeof(insns[0]), NULL);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	/* lockdown: "cannot use helper bpf_probe_write_user" (EINVAL) */
	return errno == EPERM ? -EPERM : 0;
}

int sampler_write_req_fd(const struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.write_req);
}

int sampler_add_runtime_frames(struct sampler *s, const struct frametable *ft, uint64_t bias)
{
	return fill_frametable(bpf_map__fd(s->skel->maps.frametable_rt), ft, bias);
}

int sampler_link_fd(const struct sampler *s, int i)
{
	return s->links[i] ? bpf_link__fd(s->links[i]) : s->ulinks[i];
}

int sampler_set_window_gate(struct sampler *s, enum ch_window_gate gate)
{
	if (!s || !s->skel || !s->skel->bss)
		return -EINVAL;
	__atomic_store_n(&s->skel->bss->window_gate, (__u32)gate, __ATOMIC_RELEASE);
	return 0;
}

void sampler_pause_executor(struct sampler *s)
{
	if (s && s->skel && s->skel->bss)
		__atomic_store_n(&s->skel->bss->exec_paused, 1u, __ATOMIC_RELEASE);
}

const char *sampler_probe_links(const struct sampler *s)
{
	return s->multi ? "uprobe_multi links" : "perf-event uprobes";
}

bool sampler_window_waits_minor(const struct sampler *s)
{
	return s && s->window_minor;
}

int sampler_stop_sampling(struct sampler *s, pid_t pid)
{
	__u32 key = (__u32)pid;
	int fd = bpf_map__fd(s->skel->maps.procs);

	/* its last state (the tracking arrays' fill) for sampler_drain_fates */
	if (bpf_map_lookup_and_delete_elem(fd, &key, &s->last_proc) == 0) {
		s->last_proc_valid = true;
		s->last_pid = pid;
		return 0;
	}
	return bpf_map_delete_elem(fd, &key) < 0 && errno != ENOENT ? -errno : 0;
}

int sampler_drain_fates(struct sampler *s)
{
	int fd = bpf_map__fd(s->skel->maps.major_tracked), n = 0;

	if (!s->last_proc_valid)
		return 0;
	for (__u32 i = 0; i < s->last_proc.major_n; i++) {
		struct ch_tracked e;
		struct ch_fate_event f;

		if (bpf_map_lookup_elem(fd, &i, &e) < 0 || e.tgid != (__u32)s->last_pid)
			continue;
		memset(&f, 0, sizeof(f));
		f.sample_id = e.sample_id;
		f.time_ns = e.fate_ns;
		f.block_addr = e.addr;
		f.minor_gcs = e.minor_gcs;
		f.major_gcs = e.major_gcs;
		f.tgid = e.tgid;
		if (e.state & CH_TRK_PEND_PROMOTE) {
			f.kind = CH_FATE_PROMOTE;
			s->fn(s->ctx, (const struct ch_sample_event *)&f, sizeof(f));
			n++;
		}
		if (e.state & CH_TRK_PEND_FATE) {
			f.kind = (__u8)(e.state >> CH_TRK_FATE_SHIFT);
			s->fn(s->ctx, (const struct ch_sample_event *)&f, sizeof(f));
			n++;
		}
	}
	{
		/* the last clean-phase note may have been lost too */
		struct ch_fate_event f;

		memset(&f, 0, sizeof(f));
		f.kind = CH_NOTE_MAJOR_CLEAN;
		f.tgid = (__u32)s->last_pid;
		f.clean_phases = s->last_proc.clean_phases;
		s->fn(s->ctx, (const struct ch_sample_event *)&f, sizeof(f));
	}
	s->last_proc_valid = false;
	return n;
}

int sampler_detach(struct sampler *s)
{
	int left = 0;

	if (s->executor == CH_EXEC_KERNEL && sampler_link_fd(s, OCAML_PROBE_RESET_LIMIT) >= 0) {
		/* no new loan, then every loan given back by the return probe
		 * before it goes (a thread stopped inside the call for longer
		 * than this keeps its loan: harmless, see minor5.bpf.h) */
		bpf_link__destroy(s->links[OCAML_PROBE_RESET_LIMIT]);
		s->links[OCAML_PROBE_RESET_LIMIT] = NULL;
		if (s->ulinks[OCAML_PROBE_RESET_LIMIT] >= 0)
			close(s->ulinks[OCAML_PROBE_RESET_LIMIT]);
		s->ulinks[OCAML_PROBE_RESET_LIMIT] = -1;
		left = sampler_wait_loans_returned(bpf_map__fd(s->skel->maps.trig_loans));
	}
	/* --malloc: entry probes first, so that no call starts that a
	 * return probe would have to end */
	for (int i = 2 * CH_MFN__COUNT; i-- > 0;) {
		bpf_link__destroy(s->mlinks[i]);
		s->mlinks[i] = NULL;
		if (s->umlinks[i] >= 0)
			close(s->umlinks[i]);
		s->umlinks[i] = -1;
	}
	for (int i = 0; i < OCAML_PROBE__COUNT; i++) {
		bpf_link__destroy(s->links[i]);
		s->links[i] = NULL;
		if (s->ulinks[i] >= 0)
			close(s->ulinks[i]);
		s->ulinks[i] = -1;
	}
	bpf_link__destroy(s->exec_link);
	s->exec_link = NULL;
	bpf_link__destroy(s->exit_link);
	s->exit_link = NULL;
	bpf_link__destroy(s->oom_link);
	s->oom_link = NULL;
	if (s->holder_fd >= 0) {
		(void)!write(s->holder_fd, "d", 1); /* a detach, not a death */
		close(s->holder_fd);
		s->holder_fd = -1;
	}
	return left;
}

size_t sampler_domain_states(const struct sampler *s, pid_t pid, uint64_t *out, size_t max)
{
	int fd = bpf_map__fd(s->skel->maps.domains);
	struct ch_domain_key key, next, *prev = NULL;
	size_t n = 0;

	while (n < max && bpf_map_get_next_key(fd, prev, &next) == 0) {
		if (next.tgid == (__u32)pid)
			out[n++] = next.dom_state;
		key = next;
		prev = &key;
	}
	return n;
}

int sampler_ring_fd(const struct sampler *s)
{
	return ring_buffer__epoll_fd(s->rb);
}

int sampler_consume(struct sampler *s)
{
	return ring_buffer__consume(s->rb);
}

void sampler_counters(const struct sampler *s, uint64_t out[CH_CNT__COUNT])
{
	int ncpu = libbpf_num_possible_cpus();
	int fd = bpf_map__fd(s->skel->maps.counters);
	uint64_t *vals;

	memset(out, 0, sizeof(uint64_t) * CH_CNT__COUNT);
	if (ncpu <= 0 || !(vals = calloc(ncpu, sizeof(*vals))))
		return;
	for (__u32 k = 0; k < CH_CNT__COUNT; k++) {
		if (bpf_map_lookup_elem(fd, &k, vals) < 0)
			continue;
		for (int c = 0; c < ncpu; c++)
			out[k] += vals[c];
	}
	free(vals);
}

void sampler_close(struct sampler *s)
{
	if (!s)
		return;
	sampler_detach(s);
	ring_buffer__free(s->rb);
	alloc_bpf__destroy(s->skel);
	free(s);
}

void sampler_custom_name(const struct sampler *s, uint64_t ops, char *name, size_t len)
{
	struct ch_custom_name n;
	__u64 key = ops;

	name[0] = '\0';
	if (len && bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.custom_names), &key, &n) == 0) {
		n.name[sizeof(n.name) - 1] = '\0';
		snprintf(name, len, "%s", n.name);
	}
}

int sampler_set_rate_shift(struct sampler *s, unsigned shift)
{
	if (!s || !s->skel || !s->skel->bss)
		return -EINVAL;
	if (shift > CH_MAX_RATE_SHIFT)
		return -ERANGE;
	__atomic_store_n(&s->skel->bss->rate_shift, shift, __ATOMIC_RELAXED);
	return 0;
}
