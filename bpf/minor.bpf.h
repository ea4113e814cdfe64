/* minor.bpf.h -- what minor-heap sampling shares between OCaml 4 and 5:
 * the executor's settings and write requests, the dispatch entry arguments
 * in flight, the view of a minor heap, sample points drawn below an
 * address, and the attribution of a trapped (possibly Comballoc-combined)
 * block's samples to its allocations.  The per-family halves are
 * ocaml4/minor.bpf.h (one minor heap, young_limit raised to the sample
 * point) and ocaml5/minor.bpf.h (a minor heap per domain).  Included at
 * the end of alloc.bpf.c, whose maps, pool and event path it uses.
 */
#ifndef CH_MINOR_BPF_H
#define CH_MINOR_BPF_H

#define CH_SIGURG 23
#define CH_PF_EXITING 0x00000004 /* include/linux/sched.h */
#define CH_DO_TRACK 1            /* 4.13.1 runtime/caml/memory.h */
#define CH_FROM_CAML 2           /* 4.x flags: the allocation came from OCaml code, not C (same file) */

const volatile __u32 executor = CH_EXEC_OBSERVE;
const volatile __u32 tracer_tgid = 0;
/* Set by user space (sampler_pause_executor) when the ptrace executor lets
 * go while the probes stay (census --retainers stops the program itself at
 * the end, and its own stop must not take a write request's SIGURG): no
 * write is queued and no thread signalled from then on. */
volatile __u32 exec_paused;

/* May the ptrace executor stop the current thread with SIGURG?  Not if the
 * thread blocks SIGURG (OCaml 5's domain backup threads block every signal:
 * the stop would never come, and the signal would stay pending), nor if the
 * program handles SIGURG itself: a SIGURG still queued when camlheap dies
 * (kill -9) would reach the program's handler.  Counted; the write is not
 * made (a sample point may then pass, counted as missed). */
static __always_inline bool sigurg_usable(struct task_struct *task)
{
	struct sighand_struct *sh = BPF_CORE_READ(task, sighand);
	__u64 handler = 0;

	if (BPF_CORE_READ(task, blocked.sig[0]) & (1ULL << (CH_SIGURG - 1))) {
		count(CH_CNT_SIGURG_BLOCKED, 1);
		return false;
	}
	if (!sh || bpf_core_read(&handler, sizeof(handler), &sh->action[CH_SIGURG - 1].sa.sa_handler) ||
	    handler > 1 /* neither SIG_DFL nor SIG_IGN */) {
		count(CH_CNT_SIGURG_HANDLED, 1);
		return false;
	}
	return true;
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tid */
	__type(value, struct ch_write_req);
} write_req SEC(".maps");

/* Entry arguments by {tid, sp}: nested dispatches (a signal handler that
 * allocates) each have their own; an exception that escapes dispatch
 * leaves an entry behind, which the LRU evicts. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct ch_inflight_key);
	__type(value, struct ch_inflight);
} dispatch_inflight SEC(".maps");

/* The innermost dispatch in flight per thread, for the re-arm points: a P
 * inside the block about to be redone may be left to the return probe
 * (saving a write), but only if no OCaml code can allocate before the redo
 * (see on_rearm_pending). */
struct inflight_tid {
	__u64 whsize;        /* words of the block */
	__u64 epoch;         /* minor cycle at entry */
	__u32 pending;       /* caml_something_to_do at entry */
	__u32 ours;          /* OCaml 5: the trap was camlheap's sample point alone (young_limit above the runtime's) */
	__u64 action_pending;/* OCaml 5: the domain's action_pending at entry (8 bytes as read) */
	__u64 dom;           /* OCaml 5: the dispatch's caml_domain_state * */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct inflight_tid);
} inflight_by_tid SEC(".maps");

/* The part of the domain state channel A reads, at a runtime entry point
 * (where Caml_state->young_ptr is current). */
struct minor_view {
	__u64 cs;            /* Caml_state (runtime address) */
	__u64 limit;         /* young_limit */
	__u64 yp;            /* young_ptr */
	__u64 start;         /* young_alloc_start */
	__u64 end;           /* young_alloc_end */
	__u64 young_trigger; /* young_trigger (young_alloc_mid or _start) */
	__u64 memprof_trig;  /* caml_memprof_young_trigger */
	__u64 epoch;         /* stat_minor_collections */
	__u32 pending;       /* caml_something_to_do */
};

/* The sample point (g - 1) words below `top`: the first sampled word of a
 * fresh geometric run starting at top; 0 if it falls below the heap. */
static __always_inline __u64 minor_point_below(struct minor_view *v, __u64 top, __u64 g)
{
	__u64 room = top > v->start ? (top - v->start) / 8 : 0;

	if (g > room) /* the sampled word would be under young_alloc_start */
		return 0;
	return top - (g - 1) * 8;
}

/* The state of the Comballoc loop lives in a map value, not on the
 * stack: kernels before 6.7 verify a bpf_loop callback once, from the
 * caller's stack state ("bpf: verify callbacks as if they are called
 * unknown number of times" fixed it), and then judged the branches that
 * need a value from an earlier iteration dead.  Seen on Debian 12's 6.1:
 * not one minor sample was emitted.  A map value's contents are unknown to
 * the verifier. */
struct minor_attr {
	__s64 trig_ofs;  /* words from the block start to just above the next sampled word */
	__s64 alloc_ofs; /* words from the block start to the current allocation */
	__s64 idx;       /* current allocation of the combined block */
	__u64 lens;      /* encoded_alloc_lens, or 0 */
	__u64 wosize;
	__u64 yp;
	__u64 cur_whsize;
	__u32 n;
	__u32 started;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct minor_attr);
} attr_state SEC(".maps");

/* One step of memprof's Comballoc loop (4.13.1 runtime/memprof.c
 * caml_memprof_track_young): allocations from the last (highest address)
 * to the first; each gets one sample per sample point inside it; a sampled
 * allocation becomes one event with its index, so each source position of a
 * combined allocation is reported on its own. */
static long minor_attr_step(__u32 i, void *data)
{
	__u32 zero = 0;
	struct minor_attr *a = bpf_map_lookup_elem(&attr_state, &zero);
	struct ch_sample_event *ev;
	struct ch_proc *p;

	if (!a)
		return 1;
	if (!a->started) {
		__u64 wos = a->wosize;

		if (a->idx < 0)
			return 1;
		if (a->lens) {
			__u8 enc = 0;

			if (bpf_probe_read_user(&enc, 1, (void *)(a->lens + a->idx)))
				return 1;
			wos = (__u64)enc + 1; /* Wosize_encoded_alloc_len, runtime/caml/stack.h */
		}
		a->cur_whsize = wos + 1;
		a->alloc_ofs -= (__s64)a->cur_whsize;
		if (a->alloc_ofs < 0) /* lengths inconsistent with wosize: stop */
			return 1;
		a->n = 0;
		a->started = 1;
	}
	if (a->alloc_ofs < a->trig_ofs) {
		a->n++;
		a->trig_ofs -= (__s64)geom_draw();
		return 0;
	}
	if (a->n && (ev = bpf_map_lookup_elem(&scratch, &zero)) && (p = current_proc()) &&
	    (ev->nsamples = thin_samples(a->n, &ev->rate_shift))) {
		ev->alloc_idx = (__u8)a->idx;
		ev->size_words = a->cur_whsize;
		ev->block_addr = a->yp + (__u64)a->alloc_ofs * 8 + 8; /* Val_hp */
		ev->in_minor_heap = 1;
		output_sample(p, ev);
		count(CH_CNT_MINOR_SAMPLES, a->n);
	}
	a->idx--;
	a->started = 0;
	return 0;
}

/* The block [yp, yp + whsize) covers P: walk the stack once, then give
 * each allocation of the block its samples.  Leaves P below the block. */
static __always_inline __u64 minor_sample_block(struct ch_proc *p, struct minor_view *v, struct ch_inflight *in,
						 __u64 trig)
{
	__u32 zero = 0;
	struct minor_attr *a = bpf_map_lookup_elem(&attr_state, &zero);
	struct ch_sample_event *ev;
	__s64 trig_ofs;
	__u64 t;

	if (!a)
		return 0;
	a->trig_ofs = (__s64)((trig - v->yp) / 8);
	a->alloc_ofs = (__s64)in->wosize + 1;
	a->idx = in->lens && in->nallocs ? (__s64)in->nallocs - 1 : 0;
	a->lens = in->nallocs ? in->lens : 0;
	a->wosize = in->wosize;
	a->yp = v->yp;
	a->cur_whsize = 0;
	a->n = 0;
	a->started = 0;
	ev = prepare_event(p, CH_KIND_MINOR, 0, 0, 0);
	if (ev)
		ev->nallocs = a->lens ? in->nallocs : 1;
	bpf_loop(4096, minor_attr_step, NULL, 0);
	/* nothing sent (a malformed block): its frames were not delivered */
	if (ev && ev->has_frames)
		bpf_map_delete_elem(&stacks_sent, &ev->stack_id);
	/* trig_ofs <= 0 now (or a malformed block was cut short): continue
	 * the run below the block */
	trig_ofs = a->trig_ofs > 0 ? 0 : a->trig_ofs;
	t = v->yp - (__u64)(-trig_ofs) * 8;
	return t >= v->start + 8 && t <= v->yp ? t : 0;
}

/* The register executor (CH_EXEC_REGISTER, user/collect/regexec.h).  The
 * probe sits on the runtime's `mov disp(%base),%dst` that loads
 * young_trigger before the runtime publishes max(young_trigger, ...) as
 * young_limit, and performs that load itself: dst = the field's value, or
 * the sample point where one is to be armed; then ip moves past the
 * instruction, which the kernel then neither emulates nor single-steps
 * (kernel/events/uprobes.c handle_swbp).  The runtime's own store and
 * re-check of pending interrupts follow unchanged: nothing is written into
 * the process, nothing is left behind if camlheap dies.  If the load cannot
 * be done here (the page unreadable), nothing is changed and the kernel
 * steps the original instruction.  pt_regs fields by x86 register number
 * (arch/x86/include/asm/ptrace.h); a context access needs a constant
 * offset, hence the switches. */
static __always_inline __u64 reg_get(struct pt_regs *ctx, __u8 r)
{
	switch (r) {
	case 0: return ctx->ax;
	case 1: return ctx->cx;
	case 2: return ctx->dx;
	case 3: return ctx->bx;
	case 4: return ctx->sp;
	case 5: return ctx->bp;
	case 6: return ctx->si;
	case 7: return ctx->di;
	case 8: return ctx->r8;
	case 9: return ctx->r9;
	case 10: return ctx->r10;
	case 11: return ctx->r11;
	case 12: return ctx->r12;
	case 13: return ctx->r13;
	case 14: return ctx->r14;
	default: return ctx->r15;
	}
}

/* Returns false for a register it does not set (rsp: never a load's
 * destination in these functions; user space does not plan one). */
static __always_inline bool reg_set(struct pt_regs *ctx, __u8 r, __u64 v)
{
	switch (r) {
	case 0: ctx->ax = v; break;
	case 1: ctx->cx = v; break;
	case 2: ctx->dx = v; break;
	case 3: ctx->bx = v; break;
	case 5: ctx->bp = v; break;
	case 6: ctx->si = v; break;
	case 7: ctx->di = v; break;
	case 8: ctx->r8 = v; break;
	case 9: ctx->r9 = v; break;
	case 10: ctx->r10 = v; break;
	case 11: ctx->r11 = v; break;
	case 12: ctx->r12 = v; break;
	case 13: ctx->r13 = v; break;
	case 14: ctx->r14 = v; break;
	case 15: ctx->r15 = v; break;
	default: return false;
	}
	return true;
}

/* The load of site `site` (ch_proc reg_load): its base register's value
 * (*base) and the field's (*val).  Returns 0, or -1 if it cannot be done. */
static __always_inline int reg_load_field(struct pt_regs *ctx, const struct ch_reg_load *site, __u64 *base, __u64 *val)
{
	if (!site->len)
		return -1;
	*base = reg_get(ctx, site->base);
	return bpf_probe_read_user(val, 8, (void *)(*base + (__s64)site->disp)) ? -1 : 0;
}

/* Complete the load: dst = val, ip past the instruction. */
static __always_inline void reg_load_done(struct pt_regs *ctx, const struct ch_reg_load *site, __u64 val)
{
	if (reg_set(ctx, site->dst, val))
		ctx->ip += site->len;
}

#endif
