/* ocaml5/minor.bpf.h -- sample the OCaml 5.1-5.4 minor heaps from outside
 * the process: channel A (README *OCaml 5*) per domain, the ptrace
 * executor's young_limit write checked against the domain's interrupt
 * flags.  Included at the end of alloc.bpf.c (it shares the
 * event path, the geometric pool and minor.bpf.h's Comballoc walk).
 *
 * Each domain has its own minor heap and its own sample point P (map
 * `domains`): the address just above the next sampled word of that heap.
 * young_limit is raised to P so that the allocation crossing it traps into
 * caml_alloc_small_dispatch(dom_st, wosize, flags, nallocs, lens) (5.3
 * runtime/minor_gc.c:887); the return probe sees the redone block and
 * samples it if it covers P, as memprof's own check at the end of dispatch
 * does.
 *
 * The write (ptrace executor): on OCaml 5 any thread may store
 * UINTNAT_MAX into a domain's young_limit at any moment (an interrupt:
 * stop-the-world, signal, the systhreads tick; 5.3
 * runtime/caml/domain_state.tbl:17-25), and a read-then-write from outside
 * could erase it and stall every domain.  Every such store follows the
 * setting of a flag (interrupt_pending, requested_external_interrupt,
 * caml_major_slice_epoch, caml_pending_signals), so the executor reads
 * the flags before and after its write, with only the allocating thread
 * stopped, and puts UINTNAT_MAX back if one went up meanwhile
 * (user/collect/ptexec5.c; minor5_interrupt_flags finds them).  A binary
 * without .symtab (no all_domains) falls back on stopping every other
 * thread of the process around the check and the write.  The write is
 * skipped if young_limit changed since the probe or is UINTNAT_MAX
 * (action_pending is no reason: 5.x sets it at every
 * caml_reset_young_limit, and raising young_limit towards young_ptr can
 * only make a trap come earlier).  If camlheap dies, a raised young_limit
 * costs one spurious trap (the domain's next caml_reset_young_limit lowers
 * it).
 *
 * What the trap itself changes: its dispatch clears action_pending
 * (caml_do_pending_actions_res), which gates the pending actions of channel
 * I/O and blocking sections; so the return of a dispatch that camlheap's
 * point alone caused puts it back, in the same stop as the young_limit
 * write (struct ch_write_req restore_*).  And a point in caml_poll_gc_work's
 * margin is never armed (minor5_in_margin).
 *
 * The kernel executor (bpf_probe_write_user, no freeze possible) does not
 * write young_limit at all: it lends the domain's young_trigger to
 * caml_reset_young_limit, which publishes the limit itself (see
 * minor5_lend_trigger).  memprof_young_trigger is never written by either
 * (an armed trigger crashes 5.3 without a Gc.Memprof configuration: 5.3
 * runtime/memprof.c caml_memprof_sample_young only asserts sampling()).
 *
 * Probes (C functions called from C only, so uretprobes are safe):
 *   caml_alloc_small_dispatch entry and return;
 *   caml_reset_young_limit entry (kernel executor: lend young_trigger) and
 *     return (ptrace: the runtime has just published its own young_limit,
 *     every dispatch and every minor collection ends there, 5.3
 *     domain.c:1832 caml_poll_gc_work: raise it to P again; kernel: take
 *     the loan back).
 * A P inside the block a dispatch is about to redo is armed anyway: the
 * redo does not look at young_limit, the return probe samples the block,
 * and the next allocation's (spurious) trap re-arms the next P.
 *
 * A program running Gc.Memprof itself (5.3: memprof_young_trigger above
 * young_start) is never armed (counted): its own trigger drives
 * young_limit then; if it ran Gc.Memprof when camlheap attached, camlheap
 * takes its samples read-only instead (on_sample_young5).
 */
#ifndef CH_OCAML5_MINOR_BPF_H
#define CH_OCAML5_MINOR_BPF_H

#define CH_UINTNAT_MAX 0xffffffffffffffffULL

static __always_inline struct ch_domain *ocaml5_domain_state(__u64 dom)
{
	struct ch_domain_key k = { .dom_state = dom, .tgid = bpf_get_current_pid_tgid() >> 32 };

	if (!ocaml5_countdown(dom)) /* creates the entry */
		return 0;
	return bpf_map_lookup_elem(&domains, &k);
}

/* The domain state's minor-heap fields (struct minor_view's meaning:
 * start/end are young_start/young_end, pending is action_pending). */
static __always_inline int minor5_read_view(struct ch_proc *p, __u64 dom, struct minor_view *v)
{
	__u64 f[5]; /* young_limit, young_ptr, young_start, young_end, young_trigger */

	v->cs = dom;
	v->memprof_trig = 0;
	if (!dom || bpf_probe_read_user(f, sizeof(f), (void *)dom) ||
	    bpf_probe_read_user(&v->epoch, 8, (void *)(p->minor_count_sym + p->load_bias)) ||
	    (p->memprof_trig_off &&
	     bpf_probe_read_user(&v->memprof_trig, 8, (void *)(dom + p->memprof_trig_off)))) {
		count(CH_CNT_BAD_STATE, 1);
		return -1;
	}
	v->limit = f[0];
	v->yp = f[1];
	v->start = f[2];
	v->end = f[3];
	v->young_trigger = f[4];
	/* action_pending is not a reason to keep off (unlike 4.x's
	 * caml_something_to_do): 5.x sets it at every caml_reset_young_limit
	 * and handles it at polls; an action that must interrupt the domain
	 * stores UINTNAT_MAX, the one value never overwritten */
	v->pending = 0;
	if (!(v->start < v->end && v->yp + 257 * 8 >= v->start && v->yp <= v->end && v->young_trigger >= v->start &&
	      v->young_trigger <= v->end)) {
		count(CH_CNT_BAD_STATE, 1);
		return -1;
	}
	return 0;
}

/* A new minor cycle of this domain: a fresh first sample point from the
 * top of its emptied heap (from young_ptr on the first sight after
 * attach: earlier words were allocated before camlheap was there).
 * caml_minor_collections_count goes up when a collection is set up (5.3
 * minor_gc.c:777, caml_empty_minor_heap_setup), before the domains empty
 * their heaps; each domain then sets young_ptr = young_end and calls
 * caml_reset_young_limit (:642-645), where on_reset_young_limit_ret sees
 * young_ptr == young_end: only then is the new cycle this domain's.  A
 * sample point outside the heap (resized) is drawn again from young_ptr. */
static __always_inline void minor5_sync_epoch(struct ch_proc *p, struct ch_domain *d, struct minor_view *v)
{
	if (d->minor_armed && d->minor_trig && (d->minor_trig > v->end || d->minor_trig <= v->start)) {
		d->minor_trig = minor_point_below(v, v->yp, geom_draw());
		return;
	}
	if (d->minor_armed && (d->minor_epoch == v->epoch || v->yp != v->end))
		return;
	d->minor_trig = minor_point_below(v, d->minor_armed ? v->end : (v->yp < v->end ? v->yp : v->end), geom_draw());
	d->minor_epoch = v->epoch;
	d->minor_armed = 1;
	window_minor_armed(p);
	count(CH_CNT_EPOCHS, 1);
}

/* caml_poll_gc_work (5.1-5.4 runtime/domain.c; 5.4.1 :1890), run at every
 * trap into caml_alloc_small_dispatch, acts as soon as
 *   young_ptr - Bhsize_wosize(Max_young_wosize) < young_trigger
 * (a minor collection at young_start, a major slice at the half-heap mark),
 * so a trap within that margin above young_trigger brings the GC's work
 * forward by up to 257 words: later collections, finalisers and the
 * program's output shift.  A trap at P never has young_ptr (after the
 * dispatch's undo) below P, so a P at least the margin above young_trigger
 * cannot; one inside it is never armed (nor lent), and is passed at the
 * runtime's own trap, counted apart (CH_CNT_POLL_MARGIN). */
#define CH_POLL_MARGIN_BYTES (257 * 8) /* Bhsize_wosize(Max_young_wosize), 5.x runtime/caml/config.h */

static __always_inline bool minor5_in_margin(__u64 trig, __u64 young_trigger)
{
	return trig < young_trigger + CH_POLL_MARGIN_BYTES;
}

/* A passed P that lay in the margin of either trigger of this minor cycle
 * (young_trigger moves from the half-heap mark to young_start at its
 * crossing: 5.4.1 minor_gc.c:672, domain.c:1904). */
static __always_inline bool minor5_was_in_margin(struct minor_view *v, __u64 trig)
{
	__u64 half = v->start + ((v->end - v->start) / 16) * 8;

	return (trig >= v->start && minor5_in_margin(trig, v->start)) || (trig >= half && minor5_in_margin(trig, half));
}

static __always_inline void minor5_skip_passed(struct ch_domain *d, struct minor_view *v, __u64 top)
{
	if (d->minor_trig && d->minor_trig > top) {
		/* passed while the program's own Gc.Memprof held the heap (never
		 * armed then), or in caml_poll_gc_work's margin (never armed):
		 * not a lost write, counted apart */
		if (v->memprof_trig > v->start && v->memprof_trig <= v->end)
			count(CH_CNT_MEMPROF_ACTIVE, 1);
		else if (minor5_was_in_margin(v, d->minor_trig))
			count(CH_CNT_POLL_MARGIN, 1);
		else
			count(CH_CNT_MISSED, 1);
		d->minor_trig = minor_point_below(v, top, geom_draw());
	}
}

/* At a caml_reset_young_limit of domain `dom` (entry or return, thread
 * `tid`): the domain's state and view, its sample point brought up to date
 * (a new minor cycle; a point passed untrapped counted and redrawn).
 * Inside a dispatch the block to redo sits just below young_ptr (undone):
 * a P in it is not passed yet, the dispatch's return probe takes it.
 * Returns the domain's state, or NULL (unreadable: nothing to do). */
static __always_inline struct ch_domain *minor5_at_reset(struct ch_proc *p, __u64 dom, __u32 tid,
							 struct minor_view *v)
{
	struct inflight_tid *it;
	struct ch_domain *d = dom ? ocaml5_domain_state(dom) : 0;

	if (!d || minor5_read_view(p, dom, v))
		return 0;
	minor5_sync_epoch(p, d, v);
	it = bpf_map_lookup_elem(&inflight_by_tid, &tid);
	minor5_skip_passed(d, v, v->yp + (it ? it->whsize * 8 : 0));
	return d;
}

/* The addresses of the flags another thread sets before it interrupts
 * domain `dom` (struct ch_write_req recheck), if this binary names them
 * (.symtab) and all_domains[id] is that domain's entry.  Returns false
 * otherwise: the write then freezes the process. */
static __always_inline bool minor5_interrupt_flags(struct ch_proc *p, __u64 dom, struct ch_write_req *req)
{
	__u64 base = p->all_domains_sym + p->load_bias, entry, state = 0;
	__u32 id = 0;

	if (!p->all_domains_sym || !p->slice_epoch_sym || !p->pending_signals_sym || !p->dom_internal_size)
		return false;
	if (p->all_domains_ptr && (bpf_probe_read_user(&base, 8, (void *)base) || !base))
		return false;
	if (bpf_probe_read_user(&id, 4, (void *)(dom + p->dom_id_off)) || id >= 4096)
		return false;
	entry = base + (__u64)id * p->dom_internal_size;
	if (bpf_probe_read_user(&state, 8, (void *)(entry + p->dom_internal_state_off)) || state != dom)
		return false;
	req->intr_addr = entry + p->intr_pending_off;
	req->ext_addr = dom + p->ext_intr_off;
	req->signals_addr = p->pending_signals_sym + p->load_bias;
	req->epoch_addr = dom + p->slice_epoch_off;
	req->gepoch_addr = p->slice_epoch_sym + p->load_bias;
	return true;
}

/* young_limit := max(young_trigger, P), through the ptrace executor:
 * with the interrupt protocol (minor5_interrupt_flags), or with the
 * process frozen. */
static __always_inline void minor5_apply_limit(struct ch_proc *p, struct ch_domain *d, struct minor_view *v,
					       const struct inflight_tid *restore)
{
	__u64 want = v->young_trigger;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct task_struct *task;
	struct ch_write_req req = {};

	if (executor != CH_EXEC_PTRACE)
		return; /* the kernel executor arms at resets only (minor5_lend_trigger) */
	if (v->memprof_trig > v->start && v->memprof_trig <= v->end) {
		/* the program's own Gc.Memprof samples: never arm */
		count(CH_CNT_MEMPROF_ACTIVE, 1);
		return;
	}
	if (d->minor_trig > want && d->minor_trig <= v->yp && !minor5_in_margin(d->minor_trig, v->young_trigger))
		want = d->minor_trig;
	if (restore && restore->ours) {
		__u64 now = 0;

		/* action_pending put back even when young_limit needs no write
		 * (the reset inside the dispatch left the runtime's own value,
		 * on_reset_young_limit_ret): the trap alone cleared it */
		if (!bpf_probe_read_user(&now, 8, (void *)(v->cs + CH_OCAML5_ACTION_PENDING)) &&
		    now == restore->action_pending)
			restore = 0;
	}
	if (want == v->limit && !(restore && restore->ours))
		return;
	if (v->pending || v->limit == CH_UINTNAT_MAX) {
		count(CH_CNT_WRITE_SKIPPED, 1);
		return;
	}
	task = (struct task_struct *)bpf_get_current_task();
	if (exec_paused || !BPF_CORE_READ(task, ptrace) || BPF_CORE_READ(task, parent, tgid) != tracer_tgid ||
	    (BPF_CORE_READ(task, parent, flags) & CH_PF_EXITING)) {
		count(CH_CNT_WRITE_SKIPPED, 1);
		return;
	}
	if (!sigurg_usable(task))
		return;
	req.addr = v->cs;
	req.expect = v->limit;
	req.value = want;
	req.pending_addr = 0;
	if (minor5_interrupt_flags(p, v->cs, &req))
		req.recheck = 1;
	else
		req.freeze = 1;
	if (restore && restore->ours) {
		req.restore_addr = v->cs + CH_OCAML5_ACTION_PENDING;
		req.restore_value = restore->action_pending;
	}
	req.stamp_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&write_req, &tid, &req, BPF_ANY))
		return;
	if (bpf_send_signal_thread(CH_SIGURG)) {
		bpf_map_delete_elem(&write_req, &tid);
		count(CH_CNT_SIGNAL_FAILED, 1);
		return;
	}
	count(CH_CNT_WRITES_QUEUED, 1);
}

/* caml_alloc_small_dispatch(caml_domain_state *dom_st, intnat wosize, int
 * flags, int nallocs, unsigned char *encoded_alloc_lens) */
SEC("uprobe")
int BPF_KPROBE(on_dispatch5, __u64 dom, __u64 wosize, __u32 flags, __u32 nallocs, __u64 lens)
{
	struct ch_proc *p = current_proc();
	struct ch_inflight_key k = { .sp = PT_REGS_SP(ctx), .tid = (__u32)bpf_get_current_pid_tgid() };
	struct ch_inflight in = { .wosize = wosize, .lens = lens, .flags = flags, .nallocs = nallocs };
	struct inflight_tid it = { .whsize = wosize + 1, .dom = dom };

	if (!p || !p->minor_on)
		return 0;
	count(CH_CNT_DISPATCH, 1);
	if (wosize > 256 || nallocs > 256) /* Max_young_wosize */
		return 0;
	{
		/* young_ptr is the failed allocation's: the words above it plus
		 * the block were allocated without a trap, so a P above them was
		 * passed (lost, or in the poll margin).  Counted here, before a
		 * minor collection in this dispatch begins a new cycle and
		 * drops it unseen. */
		struct ch_domain *d = dom ? ocaml5_domain_state(dom) : 0;
		struct minor_view v;

		if (d && !minor5_read_view(p, dom, &v)) {
			__u64 natural = v.young_trigger > v.memprof_trig ? v.young_trigger : v.memprof_trig;

			/* the runtime's own limit is max(young_trigger, memprof
			 * trigger) or UINTNAT_MAX (an interrupt): above the
			 * first, the trap is camlheap's alone */
			it.ours = v.limit != CH_UINTNAT_MAX && v.limit > natural &&
				  !bpf_probe_read_user(&it.action_pending, 8, (void *)(dom + CH_OCAML5_ACTION_PENDING));
			minor5_sync_epoch(p, d, &v);
			minor5_skip_passed(d, &v, v.yp + (wosize + 1) * 8);
		}
	}
	bpf_map_update_elem(&dispatch_inflight, &k, &in, BPF_ANY);
	bpf_map_update_elem(&inflight_by_tid, &k.tid, &it, BPF_ANY);
	return 0;
}

/* on_dispatch5_ret's view of the minor heap, off its stack: with the
 * sampling path's frames the program's stack was 544 bytes for Linux 6.1's
 * verifier (Debian 12's kernel refused every OCaml 5 target: "combined
 * stack size of 3 calls is 544. Too large", MAX_BPF_STACK 512), which
 * later kernels count differently.  Per CPU: a program of this kind runs
 * with migration disabled, as the other scratch maps here assume. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct minor_view);
} view5 SEC(".maps");

SEC("uretprobe")
int BPF_KRETPROBE(on_dispatch5_ret)
{
	struct ch_proc *p = current_proc();
	struct ch_inflight_key k = { .sp = PT_REGS_SP(ctx) - 8, .tid = (__u32)bpf_get_current_pid_tgid() };
	struct ch_inflight *inp, in;
	struct inflight_tid *itp, it = {};
	struct minor_view *v;
	struct ch_domain *d;
	__u64 top, dom;
	__u32 zero = 0;

	if (!p || !p->minor_on || !(v = bpf_map_lookup_elem(&view5, &zero)))
		return 0;
	inp = bpf_map_lookup_elem(&dispatch_inflight, &k);
	if (!inp)
		return 0;
	in = *inp;
	bpf_map_delete_elem(&dispatch_inflight, &k);
	itp = bpf_map_lookup_elem(&inflight_by_tid, &k.tid);
	if (itp)
		it = *itp;
	bpf_map_delete_elem(&inflight_by_tid, &k.tid);
	dom = ocaml5_dom(p);
	d = dom ? ocaml5_domain_state(dom) : 0;
	if (!d || minor5_read_view(p, dom, v))
		return 0;
	minor5_sync_epoch(p, d, v);
	/* the redone allocation is [young_ptr, young_ptr + whsize) */
	top = v->yp + (in.wosize + 1) * 8;
	minor5_skip_passed(d, v, top);
	if (d->minor_trig && d->minor_trig > v->yp) {
		if (in.flags & CH_DO_TRACK) {
			d->minor_trig = minor_sample_block(p, v, &in, d->minor_trig);
		} else {
			count(CH_CNT_UNTRACKED, 1);
			d->minor_trig = minor_point_below(v, v->yp, geom_draw());
		}
	}
	minor5_apply_limit(p, d, v, &it);
	return 0;
}

/* Kernel executor: young_trigger lent for the length of one
 * caml_reset_young_limit call.
 *
 * bpf_probe_write_user cannot hold other threads still, so it must never
 * store young_limit itself (an interrupt stored meanwhile by another
 * domain would be erased).  Instead, at the entry of
 * caml_reset_young_limit(dom) it raises the domain's young_trigger to P;
 * the function then publishes max(young_trigger, memprof trigger) into
 * young_limit with its own atomic exchange and re-checks every pending
 * interrupt after it (5.3 runtime/domain.c:1765-1793, 5.1 :1524-1540), so
 * nothing another domain stored is lost.  The return probe puts the old
 * young_trigger back.  young_trigger is read and written by the domain's
 * own thread only (poll_gc_work, the minor collection, reset itself), and
 * not between the entry and the return of reset, so the loan is seen by
 * reset alone.
 *
 * Why not write memprof_young_trigger instead (README *OCaml 5*): the
 * runtime reads it again at the end of every dispatch (5.3 minor_gc.c:924)
 * and enters caml_memprof_sample_young, which crashes without a Gc.Memprof
 * configuration (as above).  A P armed at a reset inside a dispatch can be
 * landed on by that dispatch's redone allocation whenever OCaml code runs
 * between the two (signal handlers, finalisers, a systhread switch, in
 * caml_do_pending_actions_res after its caml_handle_gc_interrupt) and
 * moves young_ptr down without trapping: a crash even with camlheap alive.
 * A young_trigger left raised (camlheap killed between the entry and the
 * return probes, a window of one reset call) crashes nothing: the next
 * caml_poll_gc_work takes it for the half-heap mark, requests a major
 * slice early and puts young_trigger to young_start; the next minor
 * collection sets it afresh (5.3 domain.c:1838-1853, minor_gc.c:642).
 *
 * P is armed only at resets, not at the dispatch's return: after a sample
 * young_limit stays at the sampled P, above young_ptr, so the next
 * allocation traps (once, spuriously) and its dispatch's reset arms the
 * next P. */
struct trig_loan {
	__u64 dom;   /* caml_domain_state * */
	__u64 saved; /* young_trigger before the loan */
	__u64 lent;  /* P */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32); /* tid */
	__type(value, struct trig_loan);
} trig_loans SEC(".maps");

#define CH_YOUNG_TRIGGER_OFF 32 /* domain_state.tbl: young_limit, young_ptr, young_start, young_end, young_trigger */

static __always_inline void minor5_lend_trigger(struct ch_proc *p, __u64 dom, __u32 tid)
{
	struct trig_loan loan = {};
	struct minor_view v;
	struct ch_domain *d = minor5_at_reset(p, dom, tid, &v);

	if (!d)
		return;
	if (v.memprof_trig > v.start && v.memprof_trig <= v.end) {
		count(CH_CNT_MEMPROF_ACTIVE, 1);
		return;
	}
	if (!(d->minor_trig > v.young_trigger && d->minor_trig <= v.yp) || minor5_in_margin(d->minor_trig, v.young_trigger))
		return;
	loan.dom = dom;
	loan.saved = v.young_trigger;
	loan.lent = d->minor_trig;
	if (bpf_map_update_elem(&trig_loans, &tid, &loan, BPF_ANY))
		return;
	if (executor == CH_EXEC_KERNEL) {
		if (bpf_probe_write_user((void *)(dom + CH_YOUNG_TRIGGER_OFF), &loan.lent, sizeof(loan.lent))) {
			bpf_map_delete_elem(&trig_loans, &tid);
			return;
		}
		count(CH_CNT_WRITES_KERNEL, 1);
	}
}

/* The return of the reset that took a loan: give young_trigger back
 * (unless something else wrote it meanwhile, which nothing does). */
static __always_inline void minor5_return_trigger(__u32 tid)
{
	struct trig_loan *loan = bpf_map_lookup_elem(&trig_loans, &tid);
	__u64 now = 0, saved;

	if (!loan)
		return;
	saved = loan->saved;
	if (executor == CH_EXEC_KERNEL && !bpf_probe_read_user(&now, 8, (void *)(loan->dom + CH_YOUNG_TRIGGER_OFF)) &&
	    now == loan->lent)
		bpf_probe_write_user((void *)(loan->dom + CH_YOUNG_TRIGGER_OFF), &saved, sizeof(saved));
	bpf_map_delete_elem(&trig_loans, &tid);
}

/* The domain caml_reset_young_limit works on, per thread: its argument,
 * not the thread's own caml_state (a domain blocked in C has its backup
 * thread take part in stop-the-world collections on its behalf). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} reset_dom SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(on_reset_young_limit, __u64 dom)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ch_proc *p = current_proc();

	if (!p || !p->minor_on)
		return 0;
	if (executor == CH_EXEC_KERNEL)
		minor5_lend_trigger(p, dom, tid);
	else
		bpf_map_update_elem(&reset_dom, &tid, &dom, BPF_ANY);
	return 0;
}

/* Can OCaml code still run in the dispatch of domain `dom` whose
 * caml_reset_young_limit has just returned, before that dispatch redoes
 * its allocation?  Only caml_do_pending_actions_res runs any (5.3
 * runtime/signals.c:333-365: after caml_handle_gc_interrupt, whose
 * caml_poll_gc_work ends in the reset, come signal handlers, memprof
 * callbacks, finalisers and the systhreads' yield; 5.1.0 yields in
 * caml_poll_gc_work before its reset, so at a later reset of the same
 * dispatch loop), and each step runs only what its flag says:
 * caml_pending_signals (one word on Linux: NSIG 65), memprof_domain_s's
 * pending (5.3+), final_info->todo_head, requested_external_interrupt.
 * All clear: the write at this reset would be redone at the dispatch's
 * return before anything reads young_limit, so the return alone writes (one
 * stop a sample instead of two).  Unknown (no .symtab, a read fails):
 * true.  A flag raised by another thread just after this read runs its
 * OCaml code unarmed: a sample point it passes is counted missed
 * (CH_CNT_MISSED), nothing is written wrong. */
static __always_inline bool minor5_dispatch_runs_ocaml(struct ch_proc *p, __u64 dom)
{
	__u64 w = 1, fi = 0, mp = 0;
	__u8 pending = 1;

	if (!p->pending_signals_sym || !p->final_info_off || !p->ext_intr_off)
		return true;
	if (bpf_probe_read_user(&w, 8, (void *)(p->pending_signals_sym + p->load_bias)) || w)
		return true;
	if (bpf_probe_read_user(&w, 8, (void *)(dom + p->ext_intr_off)) || w)
		return true;
	if (bpf_probe_read_user(&fi, 8, (void *)(dom + p->final_info_off)) || !fi ||
	    bpf_probe_read_user(&w, 8, (void *)(fi + CH_OCAML5_FINAL_TODO_HEAD)) || w)
		return true;
	if (p->memprof_off && (bpf_probe_read_user(&mp, 8, (void *)(dom + p->memprof_off)) || !mp ||
			       bpf_probe_read_user(&pending, 1, (void *)(mp + CH_OCAML53_MEMPROF_PENDING)) || pending))
		return true;
	return false;
}

/* caml_reset_young_limit(dom_st) returned: the runtime's own limit is in
 * place (or UINTNAT_MAX for a pending action, left alone).  Inside a
 * dispatch that can run no more OCaml code, the dispatch's return writes
 * instead (minor5_dispatch_runs_ocaml). */
SEC("uretprobe")
int BPF_KRETPROBE(on_reset_young_limit_ret)
{
	struct ch_proc *p = current_proc();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct minor_view v;
	struct inflight_tid *it;
	struct ch_domain *d;
	__u64 dom, *dp;

	if (executor == CH_EXEC_KERNEL) {
		/* first, and whatever else holds: a loan is always given back */
		minor5_return_trigger(tid);
		return 0;
	}
	if (!p || !p->minor_on)
		return 0;
	dp = bpf_map_lookup_elem(&reset_dom, &tid);
	if (!dp)
		return 0;
	dom = *dp;
	bpf_map_delete_elem(&reset_dom, &tid);
	d = minor5_at_reset(p, dom, tid, &v);
	if (!d)
		return 0;
	it = bpf_map_lookup_elem(&inflight_by_tid, &tid);
	if (it && it->dom == dom) {
		if (!minor5_dispatch_runs_ocaml(p, dom)) {
			count(CH_CNT_ARM_AT_RETURN, 1);
			return 0;
		}
		count(CH_CNT_ARM_AT_RESET, 1);
	}
	minor5_apply_limit(p, d, &v, 0);
	return 0;
}

/* observe (5.3): the program's own Gc.Memprof found a sample point in the
 * block just allocated: dispatch calls caml_memprof_sample_young(wosize,
 * from_caml, allocs, encoded_lens) when young_ptr < memprof_young_trigger
 * (5.3 runtime/minor_gc.c:929).  As on 4.x, the first sample is memprof's
 * own point; further samples in the block come from camlheap's draws at
 * the same rate.  Nothing is written. */
SEC("uprobe")
int BPF_KPROBE(on_sample_young5, __u64 wosize, __u32 from_caml, __u32 nallocs, __u64 lens)
{
	struct ch_proc *p = current_proc();
	struct ch_inflight in = { .wosize = wosize, .flags = CH_DO_TRACK, .nallocs = from_caml ? nallocs : 1,
				  .lens = from_caml ? lens : 0 };
	struct minor_view v;
	__u64 dom;

	if (!p || !p->minor_observe || !proc_ocaml5(p) || wosize > 256 || nallocs > 256)
		return 0;
	dom = ocaml5_dom(p);
	if (!dom || minor5_read_view(p, dom, &v))
		return 0;
	count(CH_CNT_DISPATCH, 1);
	if (v.memprof_trig > v.yp && v.memprof_trig <= v.yp + (wosize + 1) * 8)
		minor_sample_block(p, &v, &in, v.memprof_trig);
	return 0;
}

/* Register executor (minor.bpf.h reg_get): caml_reset_young_limit's load of
 * young_trigger (5.3 runtime/domain.c:1770), performed here with the sample
 * point where the kernel executor would lend it (minor5_lend_trigger: the
 * same conditions); the runtime's atomic exchange then publishes it and its
 * re-check of every pending interrupt follows, as with the loan, but
 * nothing is written and nothing needs giving back. */
SEC("uprobe")
int on_reg_trigger5(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ch_reg_load site;
	struct minor_view v;
	struct ch_domain *d;
	__u64 dom, val;

	if (!p)
		return 0;
	site = p->reg_load[0];
	if (reg_load_field(ctx, &site, &dom, &val))
		return 0;
	if (p->minor_on && executor == CH_EXEC_REGISTER && (d = minor5_at_reset(p, dom, tid, &v))) {
		if (v.memprof_trig > v.start && v.memprof_trig <= v.end) {
			count(CH_CNT_MEMPROF_ACTIVE, 1);
		} else if (d->minor_trig > val && d->minor_trig <= v.yp && !minor5_in_margin(d->minor_trig, val)) {
			val = d->minor_trig;
			count(CH_CNT_ARMS_REGISTER, 1);
		}
	}
	reg_load_done(ctx, &site, val);
	return 0;
}

#endif
