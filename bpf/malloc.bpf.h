/* malloc.bpf.h -- --malloc: the target's own calls to libc's allocator
 * (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, free)
 * and to mmap/munmap of anonymous memory, sampled per byte and followed to
 * their free.  Included at the end of alloc.bpf.c.
 *
 * Probes (user/malloc_probes.c plans them on the libc.so.6 the process
 * maps): an entry uprobe per allocating function keeps its arguments per
 * thread; a uretprobe on the same function sees the result, draws the
 * samples and sends the event; free/munmap look the pointer up.
 *
 * Sampling: every byte with probability lambda/8, memtrace's convention for
 * external memory: `bytes / 8` words (rounded down) through a Gc.Memprof
 * countdown (rand_binom, alloc.bpf.c).  The countdown is per CPU, not the
 * process's: C threads call malloc without the OCaml runtime lock, and a
 * per-CPU countdown needs no atomics.  Each CPU's countdown is a sequence
 * of independent geometric draws, so every word is still sampled
 * independently with probability lambda.
 *
 * Left out:
 *  - calls nested inside a probed call (glibc's realloc calls malloc, and
 *    malloc calls mmap for large chunks): the outer call is the event; a
 *    nested call is one whose entry stack pointer is below the pending
 *    outer call's on the same thread;
 *  - mmap calls made by libc itself (return address in libc's code): the
 *    arenas glibc creates inside free (which has no return probe to nest
 *    them), thread stacks;
 *  - calls made directly by the runtime functions whose memory the report
 *    counts already (heap chunks, 5.x pools and large blocks, minor heaps,
 *    bigarray data): their return address is in ch_proc.rt_mem_lo/hi.
 *
 * Stacks: the OCaml stack of the call into C that led to the allocation
 * (Caml_state's bottom_of_stack on 4.x, the domain's current fiber on 5.x),
 * after a leaf pseudo frame naming the libc function.  It belongs to the
 * calling thread only if that thread runs the OCaml runtime now: the
 * runtime's stack boundary (4.x bottom_of_stack, 5.x the domain's c_stack
 * link) must lie on the stack this thread runs on, above its stack pointer
 * in the same mapping (malloc_in_ocaml).  Else (a C thread, a thread in a
 * blocking section) the sample has no OCaml frame and says so
 * (CH_MALLOC_OUTSIDE).
 */
#ifndef CH_MALLOC_BPF_H
#define CH_MALLOC_BPF_H

#define CH_MAP_ANONYMOUS 0x20

/* The pending allocating call of a thread (entry -> return). */
struct malloc_call {
	__u64 sp;       /* stack pointer at the entry (the return address is at sp) */
	__u64 bytes;
	__u64 memptr;   /* posix_memalign: where the pointer is stored */
	__u64 old;      /* realloc: the block given */
	__u8 fn;        /* enum ch_malloc_fn */
	__u8 skip;      /* a runtime call left out: kept only so that the calls nested in it are skipped too */
	__u8 pad[6];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tid */
	__type(value, struct malloc_call);
} malloc_inflight SEC(".maps");

/* Sampled allocations still allocated: {tgid, pointer} -> sample id. */
struct malloc_key {
	__u64 ptr;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 18);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct malloc_key);
	__type(value, __u64);
} malloc_live SEC(".maps");

/* The per-CPU countdown: words to the next sampled word; `drawn` 0 until
 * the first draw. */
struct malloc_countdown {
	__s64 next;
	__u64 drawn;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct malloc_countdown);
} malloc_next SEC(".maps");

/* Sample ids of malloc samples: their own space (bit 62), taken atomically
 * (any thread may allocate), apart from the OCaml samples' ids that the
 * runtime lock or the domain orders. */
__u64 malloc_ids = 0;
#define CH_MALLOC_ID_BIT (1ULL << 62)

static __always_inline int in_rt_mem(struct ch_proc *p, __u64 retaddr)
{
	__u64 a = retaddr - p->load_bias;

	for (int i = 0; i < CH_RT_MEM_RANGES; i++)
		if (a >= p->rt_mem_lo[i] && a < p->rt_mem_hi[i])
			return 1;
	return 0;
}

static __always_inline void malloc_enter(struct pt_regs *ctx, __u8 fn, __u64 bytes, __u64 memptr, __u64 old)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct malloc_call c = { .sp = PT_REGS_SP(ctx), .bytes = bytes, .memptr = memptr, .old = old, .fn = fn };
	struct malloc_call *m;
	struct ch_proc *p = current_proc();
	__u64 ret = 0;

	if (!p)
		return;
	m = bpf_map_lookup_elem(&malloc_inflight, &tid);
	if (m && m->sp > c.sp)
		return; /* nested in a probed call: that one is the event */
	if (bpf_probe_read_user(&ret, sizeof(ret), (void *)c.sp))
		ret = 0; /* the return address: who called */
	if (fn == CH_MFN_MMAP && p->libc_text_hi && ret) {
		/* libc's load bias from this probe's address (page-aligned; the
		 * ip may be past the breakpoint byte) */
		__u64 base = (PT_REGS_IP(ctx) - p->libc_mmap_vaddr) & ~0xfffULL;

		if (ret - base >= p->libc_text_lo && ret - base < p->libc_text_hi) {
			/* libc's own: a malloc arena made inside free (no
			 * return probe there to nest it), a thread's stack */
			count(CH_CNT_MMAP_LIBC, 1);
			return;
		}
	}
	if (ret && in_rt_mem(p, ret)) {
		/* the runtime's own: glibc's malloc may mmap inside it, and
		 * that mmap is the runtime's too */
		count(CH_CNT_MALLOC_RUNTIME, 1);
		c.skip = 1;
	}
	bpf_map_update_elem(&malloc_inflight, &tid, &c, BPF_ANY);
}

/* The collection counters now (fate events carry them). */
static __always_inline void gc_counters_now(struct ch_proc *p, __u32 *minor, __u32 *major)
{
	__u64 v[2] = {}, caml_state = 0;

	if (proc_ocaml5(p)) {
		bpf_probe_read_user(&v[0], 8, (void *)(p->minor_count_sym + p->load_bias));
		bpf_probe_read_user(&v[1], 8, (void *)(p->major_count_sym + p->load_bias));
	} else if (!bpf_probe_read_user(&caml_state, sizeof(caml_state), (void *)(p->caml_state_sym + p->load_bias)) &&
		   caml_state) {
		bpf_probe_read_user(v, sizeof(v), (void *)(caml_state + CH_OCAML4_STAT_MINOR_COLLECTIONS));
	}
	*minor = (__u32)v[0];
	*major = (__u32)v[1];
}

/* `ptr` was freed (or unmapped, or given to realloc): if it was a
 * followed sample, say so. */
static __always_inline void malloc_forget(struct ch_proc *p, __u64 ptr)
{
	struct malloc_key k = { .ptr = ptr, .tgid = bpf_get_current_pid_tgid() >> 32 };
	__u64 *idp = bpf_map_lookup_elem(&malloc_live, &k), id;
	__u32 minor, major;

	if (!idp)
		return;
	id = *idp;
	bpf_map_delete_elem(&malloc_live, &k);
	count(CH_CNT_MALLOC_FREED, 1);
	gc_counters_now(p, &minor, &major);
	if (emit_fate(CH_FATE_FREED, id, ptr, bpf_ktime_get_ns(), minor, major, k.tgid, 0))
		count(CH_CNT_DROPPED, 1);
}

/* The top of the calling thread's stack: the process's initial stack
 * (mm->start_stack, where argc sits) for its main thread; for a thread
 * glibc created, its thread pointer (%fs base): glibc puts the thread
 * descriptor (TCB) at the top of the block it allocates for the thread's
 * stack, so every frame of the thread lies below it (nptl
 * allocate_stack).  Another thread's stack is never between a thread's
 * stack pointer and this. */
static __always_inline __u64 stack_top(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 id = bpf_get_current_pid_tgid();

	if ((__u32)id == (__u32)(id >> 32))
		return BPF_CORE_READ(task, mm, start_stack) + 1;
	return BPF_CORE_READ(task, thread.fsbase);
}

struct vma_range {
	__u64 start, end;
};

static long vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_range *r = data;

	r->start = BPF_CORE_READ(vma, vm_start);
	r->end = BPF_CORE_READ(vma, vm_end);
	return 0;
}

/* Does the calling thread run the OCaml runtime now (its OCaml stack is
 * the one Caml_state points to)?  `sp`: its stack pointer.  Returns
 * MALLOC_WALK if so, MALLOC_OUTSIDE if not, MALLOC_NO_OCAML when the main
 * thread finds no boundary at all (4.x bottom_of_stack, 5.x c_stack NULL):
 * the runtime's own start-up or exit, before or after any OCaml code (its
 * domain state may not even be set up yet): no OCaml frame. */
#define MALLOC_OUTSIDE 0
#define MALLOC_WALK 1
#define MALLOC_NO_OCAML 2
static __always_inline int malloc_in_ocaml(struct ch_proc *p, __u64 sp)
{
	__u64 caml_state = 0, edge = 0;

	if (proc_ocaml5(p)) {
		__u64 id = bpf_get_current_pid_tgid();

		caml_state = ocaml5_dom(p);
		/* no domain: a thread outside any, or one in a blocking section
		 * (5.3 caml_release_domain_lock clears its caml_state); on the
		 * main thread also the runtime's start-up and exit */
		if (!caml_state)
			return (__u32)id == (__u32)(id >> 32) ? MALLOC_NO_OCAML : MALLOC_OUTSIDE;
		if (bpf_probe_read_user(&edge, sizeof(edge), (void *)(caml_state + CH_OCAML5_C_STACK)))
			return MALLOC_OUTSIDE;
	} else if (bpf_probe_read_user(&caml_state, sizeof(caml_state), (void *)(p->caml_state_sym + p->load_bias)) ||
		   !caml_state ||
		   bpf_probe_read_user(&edge, sizeof(edge), (void *)(caml_state + CH_OCAML4_BOTTOM_OF_STACK))) {
		return caml_state ? MALLOC_OUTSIDE : MALLOC_NO_OCAML;
	}
	if (!edge) {
		/* no boundary: on the main thread, the runtime's start-up or
		 * exit; on another thread, whatever runs OCaml has not called
		 * into C yet (a thread just switched to), so it is not us */
		__u64 id = bpf_get_current_pid_tgid();

		return (__u32)id == (__u32)(id >> 32) ? MALLOC_NO_OCAML : MALLOC_OUTSIDE;
	}
	/* the boundary must be on the stack the thread runs on now: the
	 * mapping that holds its stack pointer (thread stacks are separate
	 * mappings, split by their guard pages; a coroutine's or a signal
	 * stack is its own too); without it, up to the top of its stack */
	{
		struct vma_range r = {};

		if (bpf_find_vma(bpf_get_current_task_btf(), sp, vma_cb, &r, 0) == 0 && r.end)
			return edge > sp && edge < r.end ? MALLOC_WALK : MALLOC_OUTSIDE;
	}
	return edge > sp && edge < stack_top() ? MALLOC_WALK : MALLOC_OUTSIDE;
}

static __always_inline __u32 malloc_sample_words(__u64 words)
{
	__u32 zero = 0;
	struct malloc_countdown *c = bpf_map_lookup_elem(&malloc_next, &zero);

	if (!c)
		return 0;
	if (!c->drawn) {
		c->next = (__s64)geom_draw() - 1;
		c->drawn = 1;
	}
	return sample_words(&c->next, words);
}

SEC("uretprobe")
int BPF_KRETPROBE(on_malloc_ret, __u64 ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct malloc_call *m = bpf_map_lookup_elem(&malloc_inflight, &tid), c;
	struct ch_sample_event *ev;
	struct ch_proc *p;
	__u64 ptr = ret, sp = PT_REGS_SP(ctx), words;
	int inside;
	__u32 n, shift;

	/* the return of the pending call itself pops its return address;
	 * a nested call returns with a lower stack pointer */
	if (!m || m->sp + 8 != sp)
		return 0;
	c = *m;
	bpf_map_delete_elem(&malloc_inflight, &tid);
	p = current_proc();
	if (!p || c.skip)
		return 0;
	if (c.fn == CH_MFN_POSIX_MEMALIGN) {
		ptr = 0;
		if ((__u32)ret != 0 || bpf_probe_read_user(&ptr, sizeof(ptr), (void *)c.memptr))
			ptr = 0;
	} else if (c.fn == CH_MFN_MMAP && ret == (__u64)-1) {
		ptr = 0; /* MAP_FAILED */
	} else if (c.fn == CH_MFN_REALLOC && c.old && (ptr || c.bytes == 0)) {
		malloc_forget(p, c.old); /* moved, grown in place, or freed by realloc(p, 0) */
	}
	if (!ptr || !window_open(p))
		return 0;
	count(CH_CNT_HITS_MALLOC, 1);
	count(CH_CNT_BYTES_MALLOC, c.bytes);
	words = c.bytes / 8;
	n = thin_samples(malloc_sample_words(words), &shift);
	if (!n)
		return 0;
	inside = malloc_in_ocaml(p, sp);
	if (inside == MALLOC_OUTSIDE)
		count(CH_CNT_MALLOC_OUTSIDE, n);
	ev = prepare_event_ext(p, CH_KIND_MALLOC, ptr, words, n, CH_PSEUDO_PC(c.fn), inside == MALLOC_WALK);
	if (!ev)
		return 0;
	ev->ext_flags = c.fn | (inside == MALLOC_OUTSIDE ? CH_MALLOC_OUTSIDE : 0);
	ev->rate_shift = shift;
	ev->sample_id = proc_census(p) ? CH_MALLOC_ID_BIT | __sync_add_and_fetch(&malloc_ids, 1) : 0;
	if (output_event(ev) == 0 && ev->sample_id) {
		struct malloc_key k = { .ptr = ptr, .tgid = ev->tgid };

		if (bpf_map_update_elem(&malloc_live, &k, &ev->sample_id, BPF_ANY)) {
			count(CH_CNT_TRACK_FULL, 1);
			emit_fate(CH_FATE_UNTRACKED, ev->sample_id, ptr, ev->time_ns, ev->minor_gcs, ev->major_gcs,
				  ev->tgid, 0);
		}
	}
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_malloc, __u64 size)
{
	malloc_enter(ctx, CH_MFN_MALLOC, size, 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_calloc, __u64 nmemb, __u64 size)
{
	/* an overflowing product fails in calloc: nothing to follow */
	if (nmemb <= 1 || size <= 1 || (nmemb < (1ULL << 32) && size < (1ULL << 32)))
		malloc_enter(ctx, CH_MFN_CALLOC, nmemb * size, 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_realloc, __u64 old, __u64 size)
{
	malloc_enter(ctx, CH_MFN_REALLOC, size, 0, old);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_posix_memalign, __u64 memptr, __u64 align, __u64 size)
{
	malloc_enter(ctx, CH_MFN_POSIX_MEMALIGN, size, memptr, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_aligned_alloc, __u64 align, __u64 size)
{
	malloc_enter(ctx, CH_MFN_ALIGNED_ALLOC, size, 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_memalign, __u64 align, __u64 size)
{
	malloc_enter(ctx, CH_MFN_MEMALIGN, size, 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_mmap, __u64 addr, __u64 len, __u64 prot, __u64 flags)
{
	if (flags & CH_MAP_ANONYMOUS)
		malloc_enter(ctx, CH_MFN_MMAP, len, 0, 0);
	return 0;
}

/* free(ptr), munmap(addr, len): the probe may sit past free's NULL test
 * (user/malloc_probes.c), so ptr is never NULL there; checked anyway. */
SEC("uprobe")
int BPF_KPROBE(on_free, __u64 ptr)
{
	struct ch_proc *p;

	if (!ptr || !(p = current_proc()))
		return 0;
	count(CH_CNT_HITS_FREE, 1);
	malloc_forget(p, ptr);
	return 0;
}

#endif
