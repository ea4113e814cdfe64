// SPDX-License-Identifier: GPL-2.0
/* alloc.bpf.c -- sample the OCaml 4.13/4.14 runtime's direct major, custom
 * (out-of-heap) and unmarshalled allocations, read-only; the minor heap is
 * sampled by minor.bpf.h, included at the end.
 *
 * Probes (entry uprobes; the first instruction of each is a push, which the
 * kernel emulates, arch/x86/kernel/uprobes.c push_setup_xol_ops: ~1 us a hit
 * instead of ~29 us single-stepped, measured in this kind of VM):
 *   caml_memprof_track_alloc_shr(value block)       4.13.1 runtime/memprof.c:766
 *   caml_memprof_track_custom(value block, mlsize_t bytes)            :775
 *   caml_memprof_track_interned(header_t *block, header_t *blockend)  :975
 * The runtime calls them for every such allocation whether or not Gc.Memprof
 * runs (they return early when lambda == 0), and never for promotions.
 *
 * Sampling is Gc.Memprof's: every word is sampled with probability lambda;
 * a block of len words gets rand_binom(len) samples, computed exactly as
 * memprof.c's rand_binom does with one shared `next_rand_geom` countdown per
 * process.  Geometric draws come from a pool filled by user space (BPF has no
 * floating point), indexed at random; the pool is stratified so that its
 * empirical law matches the geometric law (see user/sampler.c).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "camlheap.h"
#include "unwind.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Ring-buffer bytes pending before the reader is woken: waking per record
 * costs ~13.6 us a hit, batching ~2.4 us (measured on caml_alloc_shr hits
 * with 6-frame stacks); user space also drains on a timer. */
const volatile __u64 wakeup_bytes = 256 * 1024;

/* What the plan fixed for the object's life, set by user space before the
 * load (sampler_open): the runtime family (4 or 5) and whether the census
 * follows blocks (CH_FIXED_ON or CH_FIXED_OFF); 0 leaves it to each
 * process's ch_proc.  A frozen read-only value is a constant to the
 * verifier, which then skips the paths of the other family and of the
 * census off: each sample path is verified for one runtime, not both
 * (the attach's CPU time is mostly verification, see README *Attach*). */
const volatile __u32 fixed_major = 0;
const volatile __u32 fixed_census = 0;

static __always_inline bool proc_ocaml5(const struct ch_proc *p)
{
	return fixed_major ? fixed_major == 5 : p->ocaml5;
}

static __always_inline bool proc_census(const struct ch_proc *p)
{
	return fixed_census ? fixed_census == CH_FIXED_ON && p->census_on : p->census_on;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32); /* tgid */
	__type(value, struct ch_proc);
} procs SEC(".maps");

/* Mappable: user space writes the pool in place (one update a slot costs
 * ~15 ms of the attach for 64 Ki slots). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CH_GEOM_POOL_SIZE);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64); /* geometric draw, words, >= 1 */
} geom_pool SEC(".maps");

/* Stack ids whose frames user space has been sent.  LRU: an evicted id is
 * simply sent again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} stacks_sent SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ch_sample_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CH_CNT__COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024 * 1024);
} events SEC(".maps");

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);

	if (c)
		*c += n;
}

#include "draws.bpf.h"

#include "ocaml4/state.bpf.h"
#include "ocaml5/state.bpf.h"

/* Fill the per-CPU event with the sample's identity and its walked stack
 * (stack id, and whether its frames must be sent).  `lead`: a pseudo frame
 * put before the OCaml ones (--malloc), or 0.  `walk` 0: the thread runs no
 * OCaml code (--malloc from a C thread): the stack is `lead` alone, clean,
 * and only the collection counters are read.  Returns the event, or NULL
 * if the scratch buffer is missing. */
static __always_inline struct ch_sample_event *prepare_event_ext(struct ch_proc *p, __u8 kind, __u64 block,
								 __u64 words, __u32 n, __u64 lead, int walk)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 zero = 0;
	__u8 one = 1;
	struct ch_sample_event *ev = bpf_map_lookup_elem(&scratch, &zero);
	__u64 caml_state = 0;

	if (!ev)
		return NULL;
	ev->time_ns = bpf_ktime_get_ns();
	ev->block_addr = block;
	ev->size_words = words;
	ev->tgid = id >> 32;
	ev->tid = (__u32)id;
	ev->nsamples = n;
	ev->kind = kind;
	ev->alloc_idx = 0;
	ev->nallocs = 1;
	ev->sample_id = 0;
	ev->minor_gcs = ev->major_gcs = ev->compactions = 0;
	ev->clean_phases = p->clean_phases;
	ev->in_minor_heap = 0;
	ev->domain = 0;
	ev->ext_flags = 0;
	ev->custom_ops = 0;
	ev->rate_shift = 0;

	if (!walk) {
		struct ocaml_walk u = { .ev = ev, .hash = 0xcbf29ce484222325ULL, .term = CH_TERM_CLEAN };

		if (proc_ocaml5(p)) {
			counters5(p, ev);
		} else if (!bpf_probe_read_user(&caml_state, sizeof(caml_state),
						(void *)(p->caml_state_sym + p->load_bias)) && caml_state) {
			domain_state_plausible(p, caml_state, ev);
			ev->in_minor_heap = 0;
		}
		unwind_lead(&u, lead);
		unwind_finish(&u);
	} else if (proc_ocaml5(p)) {
		caml_state = ocaml5_dom(p);
		if (!caml_state || !domain5_plausible(p, caml_state, ev)) {
			count(CH_CNT_BAD_STATE, 1);
			ev->nframes = 0;
			ev->term = CH_TERM_READ_ERROR;
			ev->stack_id = CH_TERM_READ_ERROR;
		} else {
			unwind_ocaml5(ev, caml_state, p->load_bias, p->first_frame, lead);
		}
	} else if (bpf_probe_read_user(&caml_state, sizeof(caml_state), (void *)(p->caml_state_sym + p->load_bias)) ||
	    !caml_state || !domain_state_plausible(p, caml_state, ev)) {
		count(CH_CNT_BAD_STATE, 1);
		ev->nframes = 0;
		ev->term = CH_TERM_READ_ERROR;
		ev->stack_id = CH_TERM_READ_ERROR;
	} else {
		unwind_ocaml4(ev, caml_state, p->load_bias, lead);
	}
	ev->has_frames = bpf_map_update_elem(&stacks_sent, &ev->stack_id, &one, BPF_NOEXIST) == 0;
	return ev;
}

static __always_inline struct ch_sample_event *prepare_event(struct ch_proc *p, __u8 kind, __u64 block, __u64 words,
							     __u32 n)
{
	return prepare_event_ext(p, kind, block, words, n, 0, 1);
}

/* Send a prepared event (its frames too if has_frames); count it, or count
 * it lost.  After a successful send the frames are known to user space, so
 * has_frames is cleared for further records of the same stack.  Returns 0
 * if sent. */
static __always_inline int output_event(struct ch_sample_event *ev)
{
	__u64 size, nf, flags;
	__u32 n = ev->nsamples;

	nf = ev->has_frames ? ev->nframes : 0;
	if (nf > CH_MAX_FRAMES)
		nf = CH_MAX_FRAMES;
	size = CH_EVENT_HEADER_BYTES + nf * sizeof(__u64);
	flags = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + size >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
										       : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&events, ev, size, flags)) {
		count(CH_CNT_DROPPED, 1);
		count(CH_CNT_DROPPED_SAMPLES, n);
		if (ev->has_frames) /* user space never saw these frames: send them next time */
			bpf_map_delete_elem(&stacks_sent, &ev->stack_id);
		return -1;
	}
	count(CH_CNT_EVENTS, 1);
	count(CH_CNT_SAMPLES, n);
	if (ev->has_frames)
		count(CH_CNT_NEW_STACKS, 1);
	ev->has_frames = 0;
	return 0;
}

static __always_inline struct ch_proc *current_proc(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	return bpf_map_lookup_elem(&procs, &tgid);
}

/* One window for every kind.  The probes are attached one by one, and the
 * minor heap is sampled only from its first trap or collection after
 * attach (the words already allocated in the current minor heap, and those
 * allocated before the first trap, cannot be placed: young_ptr is known
 * only at a probe).  So nothing is sampled, or counted, until every kind
 * is: user space sets the gate (enum ch_window_gate) once every probe is
 * in and the executor runs; from then on the window is open if the minor
 * heap needs no arming (observed, or off) or has been armed
 * (minor_start_ns); or at once when user space forces it (the minor heap
 * then begins at its first arming, which the report says).  User space
 * derives the window's start from the same three facts. */
volatile __u32 window_gate;

static __always_inline bool window_open(struct ch_proc *p)
{
	__u32 g = window_gate;

	if (g == CH_GATE_FORCED || (g == CH_GATE_ARMED && (!p->window_minor || p->minor_start_ns)))
		return true;
	count(CH_CNT_BEFORE_WINDOW, 1);
	return false;
}

/* The minor heap is armed (a fresh run of sample points from a known
 * young_ptr): the first time, note when. */
static __always_inline void window_minor_armed(struct ch_proc *p)
{
	if (!p->minor_start_ns)
		__sync_val_compare_and_swap(&p->minor_start_ns, 0, bpf_ktime_get_ns());
}

#include "census.bpf.h"
#include "ocaml4/census.bpf.h"
#include "ocaml5/census.bpf.h"

/* Follow a sampled block whose sample event was sent.  A full set means
 * it is not followed, which user space learns at once. */
static __always_inline void census_track(struct ch_proc *p, struct ch_sample_event *ev)
{
	if (!ev->sample_id)
		return;
	if (proc_ocaml5(p))
		census5_track(p, ev);
	else
		census4_track(p, ev);
}

/* Send a sample event for the block at ev->block_addr and, with the
 * census on, give it an id and follow it. */
static __always_inline void output_sample(struct ch_proc *p, struct ch_sample_event *ev)
{
	if (!window_open(p))
		return;
	/* atomic: on OCaml 5 the domains sample at once, and an id given twice
	 * made the second block's young entry fail (BPF_NOEXIST: "set full")
	 * and its fates another's */
	ev->sample_id = proc_census(p) && ev->block_addr ? __sync_add_and_fetch(&p->next_sample_id, 1) : 0;
	if (output_event(ev) == 0)
		census_track(p, ev);
}

static __always_inline void emit_sample(struct ch_proc *p, __u8 kind, __u64 block, __u64 words, __u32 n, __u64 ops,
					__u8 ext_flags, __u32 shift)
{
	struct ch_sample_event *ev = prepare_event(p, kind, block, words, n);

	if (ev) {
		ev->rate_shift = shift;
		ev->custom_ops = ops;
		ev->ext_flags = ext_flags;
		output_sample(p, ev);
	}
}

/* Custom operations seen -> their identifier string (the first field of
 * struct custom_operations, runtime/caml/custom.h), read here, where the
 * target is surely alive; user space names sites from it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct ch_custom_name);
} custom_names SEC(".maps");

/* A sample of custom operations `ops`: name them once. */
static __always_inline void note_custom_name(__u64 ops)
{
	struct ch_custom_name zero = {}, *n;
	__u64 id = 0;

	if (!ops || bpf_map_lookup_elem(&custom_names, &ops))
		return;
	bpf_map_update_elem(&custom_names, &ops, &zero, BPF_NOEXIST);
	n = bpf_map_lookup_elem(&custom_names, &ops);
	if (n && !bpf_probe_read_user(&id, sizeof(id), (void *)ops) && id)
		bpf_probe_read_user_str(n->name, sizeof(n->name), (void *)id);
}

/* `words` allocated at `block` (of kind `kind`): draw its samples from the
 * domain's (4.x: the process's) countdown and emit them.  `ops`: a custom
 * block's operations; `ext_flags`: a bigarray's CH_BA_*. */
static __always_inline void on_words_ext(__u8 kind, __u64 block, __u64 words, __u64 ops, __u8 ext_flags)
{
	struct ch_proc *p = current_proc();
	__u32 n, shift;

	if (!p || !window_open(p)) /* !p: another process mapping the binary, e.g. a fork child */
		return;
	if (kind == CH_KIND_BIGARRAY) {
		count(CH_CNT_HITS_BIGARRAY, 1);
		count(CH_CNT_WORDS_BIGARRAY, words);
	} else {
		count(CH_CNT_HITS_MAJOR + kind - CH_KIND_MAJOR, 1);
		count(CH_CNT_WORDS_MAJOR + kind - CH_KIND_MAJOR, words);
	}
	if (proc_ocaml5(p)) {
		__u64 dom = ocaml5_dom(p);
		__s64 *next = dom ? ocaml5_countdown(dom) : 0;

		if (!next) {
			count(CH_CNT_BAD_STATE, 1);
			return;
		}
		n = sample_words(next, words);
	} else {
		n = sample_words(&p->next_sample_words, words);
	}
	n = thin_samples(n, &shift);
	if (n) {
		if (kind == CH_KIND_CUSTOM)
			note_custom_name(ops);
		emit_sample(p, kind, block, words, n, ops, ext_flags, shift);
	}
}

static __always_inline void on_words(__u8 kind, __u64 block, __u64 words)
{
	on_words_ext(kind, block, words, 0, 0);
}

/* A custom block's out-of-heap `bytes`: its ops are Custom_ops_val(block),
 * the block's first word (runtime/caml/custom.h).  A bigarray's are left to
 * the caml_ba_alloc return probe when it is attached (it knows whose data
 * it is, and sees views and mapped files, which declare none).  The type
 * name is read only for sampled blocks (note_custom_name). */
static __always_inline void on_custom(__u64 block, __u64 bytes, __u64 ops)
{
	struct ch_proc *p = current_proc();

	if (!p)
		return;
	if (!ops && block)
		bpf_probe_read_user(&ops, sizeof(ops), (void *)block);
	if (p->ba_ops_sym && ops == p->ba_ops_sym + p->load_bias)
		return;
	on_words_ext(CH_KIND_CUSTOM, block, bytes / 8, ops, 0);
}

/* Bigarrays: caml_ba_alloc(int flags, int num_dims, void *data, intnat *dim)
 * (runtime/bigarray.c) mallocs the data when `data` is NULL; its return is
 * the block, whose struct caml_ba_array (runtime/caml/bigarray.h: data,
 * num_dims, flags, proxy, dim[]) is filled by then.  The same return probe
 * serves caml_unix_mapped_alloc (otherlibs/unix/mmap_ba.c), same arguments.
 * Both are C functions called from C (caml_ba_create, caml_ba_sub,
 * caml_unix_map_file...), so their uretprobes replace no OCaml return
 * address.  The entry keeps, per thread, whether data was given. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} ba_inflight SEC(".maps");

static __always_inline void ba_entry(__u8 owner)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (current_proc())
		bpf_map_update_elem(&ba_inflight, &tid, &owner, BPF_ANY);
}

SEC("uprobe")
int BPF_KPROBE(on_ba_alloc, __u32 flags, __u32 num_dims, __u64 data)
{
	ba_entry(data ? CH_BA_VIEW : CH_BA_OWNED);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_mapped_alloc)
{
	ba_entry(CH_BA_MAPPED);
	return 0;
}

/* caml_ba_element_size[] (runtime/bigarray.c), by CAML_BA_KIND: float32,
 * float64, sint8, uint8, sint16, uint16, int32, int64, caml_int,
 * nativeint, complex32, complex64, char, float16 (5.2+) */
static __always_inline __u64 ba_elt_size(__u64 kind)
{
	switch (kind) {
	case 2: case 3: case 12: return 1;
	case 4: case 5: case 13: return 2;
	case 0: case 6: return 4;
	case 11: return 16;
	case 1: case 7: case 8: case 9: case 10: return 8;
	default: return 0;
	}
}

SEC("uretprobe")
int BPF_KRETPROBE(on_ba_alloc_ret, __u64 block)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u8 *ownerp = bpf_map_lookup_elem(&ba_inflight, &tid), owner;
	__u64 hdr[4], dim[16], bytes;
	__u32 nd;

	if (!ownerp)
		return 0;
	owner = *ownerp;
	bpf_map_delete_elem(&ba_inflight, &tid);
	/* block + 8: Caml_ba_array_val (after the ops pointer) */
	if (!block || bpf_probe_read_user(hdr, sizeof(hdr), (void *)(block + 8)))
		return 0;
	nd = hdr[1];
	if (nd > 16) /* CAML_BA_MAX_NUM_DIMS */
		return 0;
	if (nd && bpf_probe_read_user(dim, nd * 8 > sizeof(dim) ? sizeof(dim) : nd * 8, (void *)(block + 8 + 32)))
		return 0;
	bytes = ba_elt_size(hdr[2] & 0xff); /* CAML_BA_KIND_MASK */
	for (__u32 i = 0; i < 16; i++) {
		if (i >= nd)
			break;
		bytes *= dim[i];
	}
	on_words_ext(CH_KIND_BIGARRAY, block, bytes / 8, 0, owner);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_track_alloc_shr, __u64 block)
{
	__u64 hd = 0;

	/* Whsize_val(block): the header word precedes the block; wosize is
	 * hd >> 10 (runtime/caml/mlvalues.h). */
	if (bpf_probe_read_user(&hd, sizeof(hd), (void *)(block - 8)))
		return 0;
	on_words(CH_KIND_MAJOR, block, (hd >> 10) + 1);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_track_custom, __u64 block, __u64 bytes)
{
	/* memprof samples Wsize_bsize(bytes) words of out-of-heap memory. */
	on_custom(block, bytes, 0);
	return 0;
}

/* OCaml 5.3: caml_memprof_sample_block(value block, size_t allocated_words,
 * size_t sampled_words, int source) (5.3 runtime/memprof.c:1990), called
 * whether or not Gc.Memprof runs, for every direct major allocation
 * (alloc_shr, memory.c:452: source 0, sampled = Whsize), every custom
 * block's out-of-heap memory (custom.c:117: source 2, mem words), and every
 * unmarshalled object (intern.c:431/444: source 1, its Whsize). */
#define CH_SRC_NORMAL 0
#define CH_SRC_MARSHAL 1
#define CH_SRC_CUSTOM 2
SEC("uprobe")
int BPF_KPROBE(on_sample_block, __u64 block, __u64 allocated_words, __u64 sampled_words, __u32 source)
{
	if (source == CH_SRC_CUSTOM)
		on_custom(block, sampled_words * 8, 0);
	else
		on_words(source == CH_SRC_MARSHAL ? CH_KIND_UNMARSHAL : CH_KIND_MAJOR, block, sampled_words);
	return 0;
}

/* OCaml 5.1 (no memprof code at all): the return of caml_alloc_shr,
 * caml_alloc_shr_reserved and caml_alloc_shr_noexc (5.1 runtime/memory.c;
 * each inlines alloc_shr, none calls another; C functions reached from C or
 * through caml_c_call, so a uretprobe replaces no OCaml return address).
 * The block is the return value; its words are Whsize from its header.
 * Promotion and unmarshalling use caml_shared_try_alloc, not these. */
SEC("uretprobe")
int BPF_KRETPROBE(on_alloc_shr_ret, __u64 block)
{
	__u64 hd = 0;

	if (!block || bpf_probe_read_user(&hd, sizeof(hd), (void *)(block - 8)))
		return 0;
	on_words(CH_KIND_MAJOR, block, (hd >> 10) + 1);
	return 0;
}

/* OCaml 5.1: caml_alloc_custom_mem(ops, bsz, mem) declares `mem` bytes
 * outside the heap (5.1 runtime/custom.c); the block is known at its
 * return.  The entry keeps `mem` per thread. */
struct custom_call {
	__u64 ops, mem;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct custom_call);
} custom_inflight SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(on_custom_mem, __u64 ops, __u64 bsz, __u64 mem)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct custom_call c = { .ops = ops, .mem = mem };

	if (current_proc())
		bpf_map_update_elem(&custom_inflight, &tid, &c, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_custom_mem_ret, __u64 block)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct custom_call *cp = bpf_map_lookup_elem(&custom_inflight, &tid), c;

	if (!cp)
		return 0;
	c = *cp;
	bpf_map_delete_elem(&custom_inflight, &tid);
	if (block && c.mem)
		on_custom(block, c.mem, c.ops);
	return 0;
}

/* Walk state of an unmarshalled region, in a map value (pre-6.7
 * verifier, see minor.bpf.h's attr_state). */
struct intern_walk {
	__u64 hp;         /* header of the current block */
	__u64 end;        /* end of the region */
	__s64 next;       /* words from hp to the next sampled word (the shared countdown) */
	__u64 whsize;     /* current block's words, header included; 0: not read yet */
	__u32 n;          /* samples in the current block */
	__u32 failed;     /* a header could not be read */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct intern_walk);
} intern_state SEC(".maps");

/* One block of the region per step, or one sample inside it: the shared
 * countdown (memprof's rand_binom over the region's words, headers
 * included) placed on the blocks, as memprof's own walk does
 * (4.13.1 runtime/memprof.c:975 caml_memprof_track_interned), so each
 * sampled block is its own event and can be followed. */
static long intern_step(__u32 i, void *unused)
{
	__u32 zero = 0;
	struct intern_walk *w = bpf_map_lookup_elem(&intern_state, &zero);
	struct ch_sample_event *ev;
	struct ch_proc *p;
	__u64 hd;

	if (!w)
		return 1;
	if (!w->whsize) {
		if (w->hp >= w->end || w->next >= (__s64)((w->end - w->hp) / 8))
			return 1; /* no sampled word left in the region */
		if (bpf_probe_read_user(&hd, sizeof(hd), (void *)w->hp)) {
			w->failed = 1;
			return 1;
		}
		w->whsize = (hd >> 10) + 1;
		w->n = 0;
	}
	if (w->next < (__s64)w->whsize) {
		w->n++;
		w->next += geom_draw();
		return 0;
	}
	if (w->n && (ev = bpf_map_lookup_elem(&scratch, &zero)) && (p = current_proc()) &&
	    (ev->nsamples = thin_samples(w->n, &ev->rate_shift))) {
		ev->size_words = w->whsize;
		ev->block_addr = w->hp + 8; /* Val_hp */
		output_sample(p, ev);
	}
	w->next -= (__s64)w->whsize;
	w->hp += w->whsize * 8;
	w->whsize = 0;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_track_interned, __u64 block_hp, __u64 blockend_hp)
{
	struct ch_proc *p = current_proc();
	struct ch_sample_event *ev;
	struct intern_walk *w;
	__u32 zero = 0;
	__u64 words;

	if (!p || blockend_hp <= block_hp)
		return 0;
	words = (blockend_hp - block_hp) / 8;
	count(CH_CNT_HITS_UNMARSHAL, 1);
	count(CH_CNT_WORDS_UNMARSHAL, words);
	if (p->next_sample_words >= (__s64)words) {
		p->next_sample_words -= (__s64)words;
		return 0;
	}
	ev = prepare_event(p, CH_KIND_UNMARSHAL, block_hp + 8, 0, 0);
	w = bpf_map_lookup_elem(&intern_state, &zero);
	if (!ev || !w)
		return 0;
	w->hp = block_hp;
	w->end = blockend_hp;
	w->next = p->next_sample_words;
	w->whsize = 0;
	w->n = 0;
	w->failed = 0;
	bpf_loop(1 << 23, intern_step, NULL, 0);
	if (w->failed || w->hp > w->end || w->whsize ||
	    (w->hp < w->end && w->next < (__s64)((w->end - w->hp) / 8))) {
		/* a bad header, or 2^23 steps were not enough: restart the
		 * countdown after the region */
		count(w->failed || w->hp > w->end ? CH_CNT_BAD_STATE : CH_CNT_CAPPED, 1);
		p->next_sample_words = (__s64)geom_draw() - 1;
	} else {
		__s64 rest = w->next - (__s64)((w->end - w->hp) / 8);

		p->next_sample_words = rest > 0 ? rest : 0;
	}
	/* nothing sent: its frames were not delivered */
	if (ev->has_frames)
		bpf_map_delete_elem(&stacks_sent, &ev->stack_id);
	return 0;
}

/* A note (no stack) for user space, woken at once. */
static __always_inline void emit_note(__u8 kind, __u64 arg)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct ch_sample_event *note = bpf_ringbuf_reserve(&events, CH_EVENT_HEADER_BYTES, 0);

	if (!note) {
		count(CH_CNT_DROPPED, 1);
		return;
	}
	__builtin_memset(note, 0, CH_EVENT_HEADER_BYTES);
	note->kind = kind;
	note->tgid = id >> 32;
	note->tid = (__u32)id;
	note->block_addr = arg;
	note->time_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(note, BPF_RB_FORCE_WAKEUP);
}

#include "frametable.bpf.h"

/* exec replaced a profiled process's image: forget the process, so that
 * probes still firing in the new image (the same executable run again keeps
 * its uprobes) sample nothing with the old load bias. */
SEC("raw_tp/sched_process_exec") /* needs no tracefs, and no kernel BTF at the load (kernel_btf.h) */
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!bpf_map_lookup_elem(&procs, &tgid))
		return 0;
	bpf_map_delete_elem(&procs, &tgid);
	emit_note(CH_NOTE_EXEC, 0);
	return 0;
}

/* How a profiled process ended (struct ch_exit; a pidfd's poll says no
 * more than that it is gone).  Read by sampler_exit_status. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256);
	__type(key, __u32); /* tgid */
	__type(value, struct ch_exit);
} exits SEC(".maps");

static __always_inline struct ch_exit *exit_entry(__u32 tgid)
{
	struct ch_exit *e = bpf_map_lookup_elem(&exits, &tgid), zero = {};

	if (e)
		return e;
	bpf_map_update_elem(&exits, &tgid, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&exits, &tgid);
}

/* Each exiting thread of a followed process: its exit code.  do_exit sets
 * task->exit_code before this tracepoint (kernel/exit.c); for exit_group and
 * fatal signals every thread carries the group's code (do_group_exit), and
 * the last thread to go leaves the process's own. */
SEC("raw_tp/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct ch_exit *e;

	if (!bpf_map_lookup_elem(&procs, &tgid) || !(e = exit_entry(tgid)))
		return 0;
	e->status = (__u32)BPF_CORE_READ(p, exit_code);
	e->flags |= CH_EXIT_STATUS_SEEN;
	return 0;
}

/* The kernel's OOM killer chose a task as its victim (mm/oom_kill.c
 * mark_oom_victim, after __oom_kill_process sent it SIGKILL; memory cgroup
 * v1 or v2 limit, or the whole system).  The raw tracepoint's first
 * argument is the victim's task_struct since Linux 6.8 (trace/events/oom.h
 * mark_victim(struct task_struct *task, uid_t uid)), its PID before
 * (mark_victim(int pid)): a value below PID_MAX_LIMIT (2^22) is a PID. */
SEC("raw_tp/mark_victim")
int BPF_PROG(on_oom_victim, __u64 arg0)
{
	__u32 tgid = (__u32)arg0;
	struct ch_exit *e;

	if (arg0 >= (1u << 22))
		tgid = (__u32)BPF_CORE_READ((struct task_struct *)arg0, tgid);
	if (!bpf_map_lookup_elem(&procs, &tgid) || !(e = exit_entry(tgid)))
		return 0;
	e->oom_ns = bpf_ktime_get_ns();
	e->flags |= CH_EXIT_OOM_VICTIM;
	return 0;
}

/* caml_fatal_uncaught_exception(value exn) (runtime/printexc.c, 4.12-5.4):
 * the exception's name as caml_format_exception finds it: a block of tag 0
 * holds its constructor in field 0, a constant exception is the
 * constructor; a constructor's field 0 is its name (a string). */
SEC("uprobe")
int BPF_KPROBE(on_fatal_exn, __u64 exn)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 hd = 0, ctor = exn, name = 0;
	struct ch_exit *e;

	if (!bpf_map_lookup_elem(&procs, &tgid) || !(e = exit_entry(tgid)))
		return 0;
	e->flags |= CH_EXIT_UNCAUGHT;
	if (exn & 1 || bpf_probe_read_user(&hd, sizeof(hd), (void *)(exn - 8)))
		return 0;
	if ((hd & 0xff) == 0 && bpf_probe_read_user(&ctor, sizeof(ctor), (void *)exn))
		return 0;
	if (ctor & 1 || bpf_probe_read_user(&name, sizeof(name), (void *)ctor) || name & 1)
		return 0;
	bpf_probe_read_user_str(e->exn, sizeof(e->exn), (void *)name);
	return 0;
}

#include "minor.bpf.h"
#include "ocaml4/minor.bpf.h"
#include "ocaml5/minor.bpf.h"
#include "malloc.bpf.h"
