/* ocaml4/minor.bpf.h -- sample the OCaml 4.12-4.14 minor heap from outside the
 * process: channel A (README *Minor heap*), young_limit the only field
 * written.  Included by alloc.bpf.c after minor.bpf.h, the part both
 * families share.
 *
 * Model (stdlib/gc.mli, Gc.Memprof): every allocated word is sampled with
 * probability lambda, exactly as Gc.Memprof does.  One sample point P per
 * process and minor cycle (the 4.x minor heap is global): P is the address
 * just above the next sampled word.  To make the program trap when it
 * allocates that word, young_limit is raised to P; the allocation that
 * crosses it calls caml_alloc_small_dispatch, whose return probe sees where
 * the (redone) block finally lies and samples it if it covers P, as memprof's
 * own check at the end of dispatch does (4.13.1 runtime/minor_gc.c:508-560).
 *
 * Probes, all on instructions the kernel emulates:
 *   caml_alloc_small_dispatch entry (push %r15): remember the arguments
 *   caml_alloc_small_dispatch return (uretprobe; called from C only):
 *     sample, draw the next P, fix the limit
 *   re-arm points, right after the runtime recomputed young_limit:
 *     caml_update_young_limit at the `je` after the store (+0x24 in 4.13.1)
 *     caml_do_pending_actions_exn at `call caml_process_pending_signals_exn`
 *     (+0x4c: GCC inlined caml_update_young_limit there, signals.c:260)
 *
 * Writes (only ever young_limit, never caml_memprof_young_trigger, whose
 * write kills a 4.x target whose memprof is off: 4.13.1 runtime/memprof.c
 * caml_memprof_track_young checks lambda only in a CAMLassert):
 * the value is max(young_trigger, caml_memprof_young_trigger, P), a value
 * the runtime's own formula could produce with P <= young_ptr, and never
 * while caml_something_to_do is set or young_limit is young_alloc_end (a
 * pending action: the runtime's value wins), except at the return of a
 * dispatch called from C when no action is there to take
 * (minor4_actions_idle: else every allocation of C code would trap until
 * OCaml code runs).  The executor (rodata
 * `executor`) performs them: in the kernel (bpf_probe_write_user, only
 * where the kernel allows it), or through a ptrace stop of the thread
 * (user/collect/ptexec.h), or not at all (observe).
 */
#ifndef CH_OCAML4_MINOR_BPF_H
#define CH_OCAML4_MINOR_BPF_H

static __always_inline int minor_read_view(struct ch_proc *p, struct minor_view *v)
{
	__u64 f[10];

	if (bpf_probe_read_user(&v->cs, 8, (void *)(p->caml_state_sym + p->load_bias)) || !v->cs ||
	    bpf_probe_read_user(f, sizeof(f), (void *)v->cs) ||
	    bpf_probe_read_user(&v->epoch, 8, (void *)(v->cs + CH_OCAML4_STAT_MINOR_COLLECTIONS)) ||
	    bpf_probe_read_user(&v->pending, 4, (void *)(p->something_to_do_sym + p->load_bias)) ||
	    bpf_probe_read_user(&v->memprof_trig, 8, (void *)(p->memprof_trigger_sym + p->load_bias))) {
		count(CH_CNT_BAD_STATE, 1);
		return -1;
	}
	if (p->young_limit_off == CH_OCAML412_YOUNG_LIMIT) {
		v->limit = f[CH_OCAML412_YOUNG_LIMIT / 8];
		v->yp = f[CH_OCAML412_YOUNG_PTR / 8];
	} else {
		v->limit = f[CH_OCAML4_YOUNG_LIMIT / 8];
		v->yp = f[CH_OCAML4_YOUNG_PTR / 8];
	}
	v->start = f[CH_OCAML4_YOUNG_ALLOC_START / 8];
	v->end = f[CH_OCAML4_YOUNG_ALLOC_END / 8];
	v->young_trigger = f[CH_OCAML4_YOUNG_TRIGGER / 8];
	/* young_ptr may sit up to one block (257 words) below the heap in the
	 * middle of an allocation (4.13.1 runtime/minor_gc.c: dispatch is entered
	 * with it decremented; Max_young_whsize, runtime/caml/config.h) */
	if (!(v->start < v->end && v->yp + 257 * 8 >= v->start && v->yp <= v->end && v->young_trigger >= v->start &&
	      v->young_trigger <= v->end)) {
		count(CH_CNT_BAD_STATE, 1);
		return -1;
	}
	return 0;
}

/* The live checks of the layout camlheap assumes for young_limit and
 * young_ptr (the two fields 4.12 and 4.13 swap: a young_limit write at
 * young_ptr's offset livelocks the program).  Two invariants of the 4.12,
 * 4.13 and 4.14 runtimes, each broken by the swapped layout:
 *  - at caml_alloc_small_dispatch's entry the allocation has just crossed
 *    the limit: young_ptr < young_limit (the Alloc_small test of
 *    runtime/caml/memory.h, the `cmp young_limit; jb caml_call_gc` of
 *    native code, asmcomp/amd64/emit.mlp);
 *  - at the re-arm points the runtime has just stored young_limit =
 *    max(young_trigger, caml_memprof_young_trigger), or young_alloc_end for
 *    a pending action (runtime/signals.c caml_update_young_limit), and
 *    young_ptr is rarely either.
 * Nothing is written before one of them held (`at_entry`: the first;
 * otherwise the second with young_ptr elsewhere and no action pending:
 * read swapped, the "young_limit" would be young_ptr, equal to that value
 * only if the "young_ptr", the real young_limit, is young_alloc_end, which
 * it is only while an action is pending, caml_set_action_pending); once
 * one breaks, the minor heap is left alone for good.  Returns true if
 * writes are allowed. */
static __always_inline bool minor_layout_check(struct ch_proc *p, struct minor_view *v, bool at_entry)
{
	__u64 formula = v->young_trigger > v->memprof_trig ? v->young_trigger : v->memprof_trig;
	bool broken, holds;

	if (p->layout == CH_LAYOUT_BAD)
		return false;
	if (at_entry) {
		broken = v->yp >= v->limit;
		holds = !broken && v->limit <= v->end;
	} else {
		broken = v->limit != formula && v->limit != v->end;
		holds = v->limit == formula && formula != v->end && v->yp != formula && !v->pending;
	}
	if (broken) {
		p->layout = CH_LAYOUT_BAD;
		p->minor_on = 0;
		count(CH_CNT_LAYOUT_BAD, 1);
		return false;
	}
	if (holds)
		p->layout = CH_LAYOUT_VERIFIED;
	return p->layout == CH_LAYOUT_VERIFIED;
}


/* A new minor cycle: draw its first sample point from the top of the
 * emptied heap (memoryless, and independent of earlier draws: no bias, as
 * 4.13.1 runtime/memprof.c caml_memprof_renew_minor_sample's comment says).
 * On the first hit after attach, draw from young_ptr: earlier words were
 * allocated before camlheap was there. */
static __always_inline void minor_sync_epoch(struct ch_proc *p, struct minor_view *v)
{
	if (p->minor_armed && p->minor_epoch == v->epoch)
		return;
	p->minor_trig = minor_point_below(v, p->minor_armed ? v->end : (v->yp < v->end ? v->yp : v->end), geom_draw());
	p->minor_epoch = v->epoch;
	p->minor_armed = 1;
	window_minor_armed(p);
	count(CH_CNT_EPOCHS, 1);
}

/* The program allocated past P without trapping there (a write lost or
 * late): count the sample as missed and start a fresh run below `top`. */
static __always_inline void minor_skip_passed(struct ch_proc *p, struct minor_view *v, __u64 top)
{
	if (p->minor_trig && p->minor_trig > top) {
		count(CH_CNT_MISSED, 1);
		p->minor_trig = minor_point_below(v, top, geom_draw());
	}
}

/* Will caml_do_pending_actions_exn run no OCaml code now?  Signals and
 * new finalisers set caml_something_to_do (checked at dispatch entry), but
 * finalisers found while another finaliser runs do not
 * (4.13.1 runtime/finalise.c:81): check the ready list itself; and with
 * Gc.Memprof active its postponed callbacks may run.  Unknown means no. */
static __always_inline bool nothing_to_run(struct ch_proc *p, struct minor_view *v)
{
	__u64 todo = 1;

	if (!p->final_todo_sym ||
	    bpf_probe_read_user(&todo, sizeof(todo), (void *)(p->final_todo_sym + p->load_bias)) || todo)
		return false;
	return v->memprof_trig == v->start || v->memprof_trig == 0;
}

/* Would the trap the runtime arranged for its next allocation do nothing?
 * A dispatch called from C sets caml_something_to_do without raising
 * anything (4.14.2 runtime/minor_gc.c caml_alloc_small_dispatch: "force a
 * query of all callbacks" for C code that polls), and a collection inside
 * it then leaves young_limit at young_alloc_end (caml_update_young_limit),
 * or camlheap's crossed P stays in place: every allocation of C code after
 * that traps until OCaml code runs caml_do_pending_actions_exn (on the way
 * back up a deep recursion of string_of_int, thousands of traps, each a
 * uprobe hit).  That function acts only on what these flags say
 * (signals.c): requested_major_slice and requested_minor_gc
 * (caml_check_urgent_gc), signals_are_pending
 * (caml_process_pending_signals_exn), memprof's postponed callbacks (none
 * while Gc.Memprof is off) and finalise.c's to_do_hd; every other setter
 * of caml_something_to_do raises one of them first (caml_record_signal,
 * caml_request_major_slice / minor_gc, finalise.c alloc_to_do and
 * caml_final_release, memprof.c).  All clear: the trap would only clear
 * caml_something_to_do, so a limit of max(young_trigger, memprof trigger,
 * P) changes nothing the program sees, and caml_something_to_do is left
 * set for C code that polls it.  Unknown (no .symtab): false. */
static __always_inline bool minor4_actions_idle(struct ch_proc *p, struct minor_view *v)
{
	__u64 sig = 1, req[2] = { 1, 1 };

	if (!p->signals_pending_sym || !nothing_to_run(p, v))
		return false;
	if (bpf_probe_read_user(&sig, 8, (void *)(p->signals_pending_sym + p->load_bias)) || sig)
		return false;
	if (bpf_probe_read_user(req, sizeof(req), (void *)(v->cs + CH_OCAML4_REQUESTED_MAJOR_SLICE)) || req[0] ||
	    req[1])
		return false;
	return true;
}

/* Make young_limit max(young_trigger, memprof trigger, P), through the
 * executor.  `inflight_words`: the words of a block this thread is about to
 * redo just below young_ptr (0 if none); a P inside it is left as it is.
 * `idle`: caml_something_to_do is set with nothing to act on
 * (minor4_actions_idle): written even so, and the write's re-check is of
 * signals_are_pending, the only flag another thread can raise meanwhile
 * (caml_record_signal, from a signal handler or the systhreads tick). */
static __always_inline void minor_apply_limit(struct ch_proc *p, struct minor_view *v, __u64 inflight_words,
					      bool idle)
{
	__u64 recheck = idle ? p->signals_pending_sym : p->something_to_do_sym;

	__u64 want = v->young_trigger;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (executor == CH_EXEC_REGISTER)
		return; /* it arms inside the runtime's own recomputations only (reg_trigger4) */
	if (v->memprof_trig > want && v->memprof_trig <= v->end)
		want = v->memprof_trig;
	if (p->minor_trig > want && p->minor_trig <= v->yp) {
		if (inflight_words && p->minor_trig > v->yp - inflight_words * 8)
			return; /* the return probe will sample that block and set the limit */
		want = p->minor_trig;
	}
	if (want == v->limit)
		return;
	if ((!idle && (v->pending || v->limit == v->end)) || p->layout != CH_LAYOUT_VERIFIED) {
		count(CH_CNT_WRITE_SKIPPED, 1);
		return;
	}
	if (executor == CH_EXEC_KERNEL) {
		__u32 pending = 0;

		if (bpf_probe_write_user((void *)(v->cs + p->young_limit_off), &want, sizeof(want)))
			return;
		count(CH_CNT_WRITES_KERNEL, 1);
		/* the runtime's own re-check (signals.c caml_update_young_limit):
		 * a signal recorded meanwhile must still be seen */
		if (!bpf_probe_read_user(&pending, 4, (void *)(recheck + p->load_bias)) && pending)
			bpf_probe_write_user((void *)(v->cs + p->young_limit_off), &v->end, sizeof(v->end));
	} else if (executor == CH_EXEC_PTRACE) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		struct ch_write_req req = {
			.addr = v->cs + p->young_limit_off,
			.expect = v->limit,
			.value = want,
			.pending_addr = recheck + p->load_bias,
		};

		/* Stop only a thread camlheap traces, and never once camlheap
		 * is dying (its links outlive its ptrace, ~0.3 s measured:
		 * kernel/exit.c do_exit runs exit_files before exit_notify). */
		if (exec_paused || !BPF_CORE_READ(task, ptrace) || BPF_CORE_READ(task, parent, tgid) != tracer_tgid ||
		    (BPF_CORE_READ(task, parent, flags) & CH_PF_EXITING)) {
			count(CH_CNT_WRITE_SKIPPED, 1);
			return;
		}
		if (!sigurg_usable(task))
			return;
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
}


SEC("uprobe")
int BPF_KPROBE(on_dispatch, __u64 wosize, __u32 flags, __u32 nallocs, __u64 lens)
{
	struct ch_proc *p = current_proc();
	struct ch_inflight_key k = { .sp = PT_REGS_SP(ctx), .tid = (__u32)bpf_get_current_pid_tgid() };
	struct ch_inflight in = { .wosize = wosize, .lens = lens, .flags = flags, .nallocs = nallocs };
	struct inflight_tid it = { .whsize = wosize + 1, .pending = 1 };
	struct minor_view v;

	if (!p || !p->minor_on)
		return 0;
	count(CH_CNT_DISPATCH, 1);
	if (wosize > 256 || nallocs > 256) /* Max_young_wosize; a small block or nothing */
		return 0;
	if (minor_read_view(p, &v))
		return 0;
	minor_layout_check(p, &v, true);
	if (!p->minor_on)
		return 0;
	bpf_map_update_elem(&dispatch_inflight, &k, &in, BPF_ANY);
	it.epoch = v.epoch;
	it.pending = v.pending;
	bpf_map_update_elem(&inflight_by_tid, &k.tid, &it, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_dispatch_ret)
{
	struct ch_proc *p = current_proc();
	/* the return popped the return address: sp is 8 above the entry's */
	struct ch_inflight_key k = { .sp = PT_REGS_SP(ctx) - 8, .tid = (__u32)bpf_get_current_pid_tgid() };
	struct ch_inflight *inp, in;
	struct minor_view v;
	__u64 top;

	if (!p || !p->minor_on)
		return 0;
	inp = bpf_map_lookup_elem(&dispatch_inflight, &k);
	if (!inp)
		return 0;
	in = *inp;
	bpf_map_delete_elem(&dispatch_inflight, &k);
	bpf_map_delete_elem(&inflight_by_tid, &k.tid);
	if (minor_read_view(p, &v))
		return 0;
	minor_sync_epoch(p, &v);
	/* the redone allocation is [young_ptr, young_ptr + whsize) */
	top = v.yp + (in.wosize + 1) * 8;
	minor_skip_passed(p, &v, top);
	if (p->minor_trig && p->minor_trig > v.yp) {
		if (in.flags & CH_DO_TRACK) {
			p->minor_trig = minor_sample_block(p, &v, &in, p->minor_trig);
		} else {
			/* memprof does not sample untracked blocks either
			 * (renew_minor_sample at the end of dispatch) */
			count(CH_CNT_UNTRACKED, 1);
			p->minor_trig = minor_point_below(&v, v.yp, geom_draw());
		}
	}
	/* from C, a pending action with nothing to act on: no trap storm */
	minor_apply_limit(p, &v, 0, !(in.flags & CH_FROM_CAML) && (v.pending || v.limit == v.end) &&
					    minor4_actions_idle(p, &v));
	return 0;
}

/* observe: the program's own Gc.Memprof found a sample point in the block
 * just allocated (dispatch calls caml_memprof_track_young when young_ptr <
 * caml_memprof_young_trigger, 4.13.1 runtime/minor_gc.c:552).  That point
 * is memprof's, so the first sample is exactly the one memprof takes;
 * further samples in the block come from camlheap's own draws at the same
 * rate (the same law), and each Comballoc'd allocation gets its own.
 * Nothing is written. */
SEC("uprobe")
int BPF_KPROBE(on_track_young, __u64 wosize, __u32 from_caml, __u32 nallocs, __u64 lens)
{
	struct ch_proc *p = current_proc();
	struct ch_inflight in = { .wosize = wosize, .flags = CH_DO_TRACK, .nallocs = from_caml ? nallocs : 1,
				  .lens = from_caml ? lens : 0 };
	struct minor_view v;

	if (!p || !p->minor_observe || wosize > 256 || nallocs > 256 || minor_read_view(p, &v))
		return 0;
	count(CH_CNT_DISPATCH, 1);
	if (v.memprof_trig > v.yp && v.memprof_trig <= v.yp + (wosize + 1) * 8)
		minor_sample_block(p, &v, &in, v.memprof_trig);
	return 0;
}

/* After the runtime stored its own young_limit.  `may_defer`: a P inside
 * the block this thread is about to redo may be left to the return probe. */
static __always_inline void rearm(struct pt_regs *ctx, bool may_defer)
{
	struct ch_proc *p = current_proc();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight_tid *it;
	struct minor_view v;
	__u64 defer_words = 0;

	if (!p || !p->minor_on || minor_read_view(p, &v))
		return;
	minor_layout_check(p, &v, false);
	if (!p->minor_on)
		return;
	minor_sync_epoch(p, &v);
	it = bpf_map_lookup_elem(&inflight_by_tid, &tid);
	/* Inside dispatch the block may already be redone just above
	 * young_ptr (memprof's shift_sample and set_suspended recompute the
	 * limit there): a P inside it is pending, not passed; the return probe
	 * takes it. */
	minor_skip_passed(p, &v, v.yp + (it ? it->whsize * 8 : 0));
	if (may_defer && it && !it->pending && it->epoch == v.epoch && nothing_to_run(p, &v))
		defer_words = it->whsize;
	minor_apply_limit(p, &v, defer_words, false);
}

/* caml_update_young_limit: GC paths, and memprof (its set_suspended runs
 * it before memprof's callbacks allocate inside dispatch): never deferred,
 * or those allocations would pass P untrapped (seen: 0.15 % of samples
 * missed while the program ran Gc.Memprof). */
SEC("uprobe")
int on_rearm_update(struct pt_regs *ctx)
{
	rearm(ctx, false);
	return 0;
}

/* caml_do_pending_actions_exn, after its inlined store, before it runs
 * signal handlers, memprof callbacks and finalisers: deferred only if
 * nothing was pending when dispatch was entered (so none of those will
 * run and allocate) and no minor GC happened since. */
SEC("uprobe")
int on_rearm_pending(struct pt_regs *ctx)
{
	rearm(ctx, true);
	return 0;
}

/* Register executor (minor.bpf.h reg_get): the young_trigger load of
 * caml_update_young_limit (site 0) or of caml_do_pending_actions_exn's
 * inlined copy of it (site 1), 4.13.1 runtime/signals.c, performed here.
 * The runtime then stores max(this value, caml_memprof_young_trigger) into
 * young_limit and, if caml_something_to_do is set, young_alloc_end over it:
 * a pending action always wins, a signal recorded meanwhile included (its
 * caml_set_action_pending sets the flag before it stores).  A P inside the
 * block a dispatch is about to redo is armed all the same: the redo does
 * not look at young_limit, the return probe samples the block, and the
 * next allocation's (spurious) trap re-arms the next P at its own
 * recomputation.  Armed only once the layout is verified (at a dispatch
 * entry: minor_layout_check). */
static __always_inline __u64 reg_arm4(struct ch_proc *p, __u64 trig)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct inflight_tid *it;
	struct minor_view v;

	if (p->layout != CH_LAYOUT_VERIFIED || minor_read_view(p, &v))
		return trig;
	minor_sync_epoch(p, &v);
	it = bpf_map_lookup_elem(&inflight_by_tid, &tid);
	minor_skip_passed(p, &v, v.yp + (it ? it->whsize * 8 : 0));
	if (p->minor_trig > trig && p->minor_trig <= v.yp) {
		count(CH_CNT_ARMS_REGISTER, 1);
		return p->minor_trig;
	}
	return trig;
}

static __always_inline int reg_trigger4(struct pt_regs *ctx, int k)
{
	struct ch_proc *p = current_proc();
	struct ch_reg_load site;
	__u64 base, val;

	if (!p)
		return 0;
	site = p->reg_load[k];
	if (reg_load_field(ctx, &site, &base, &val))
		return 0;
	if (p->minor_on && executor == CH_EXEC_REGISTER)
		val = reg_arm4(p, val);
	reg_load_done(ctx, &site, val);
	return 0;
}

SEC("uprobe")
int on_reg_trigger4(struct pt_regs *ctx)
{
	return reg_trigger4(ctx, 0);
}

SEC("uprobe")
int on_reg_trigger4_pending(struct pt_regs *ctx)
{
	return reg_trigger4(ctx, 1);
}

/* Register executor, 4.x: no storm of C-side traps.  caml_update_young_limit
 * ends `if (caml_something_to_do) young_limit = young_alloc_end; return`
 * (4.14.2 runtime/signals.c).  Where nothing is there to act on
 * (minor4_actions_idle: the trap that young_alloc_end causes would only
 * clear the flag, and C code allocating until OCaml code runs would trap at
 * every allocation), the probe on that load gives the runtime its usual
 * value instead, max(young_trigger, memprof trigger, P), as the other
 * executors write at a dispatch's return; caml_something_to_do stays set
 * for C code that polls it.  A signal recorded between this load and the
 * store would have its young_alloc_end erased by the store: the probe on
 * the `ret` right after the store re-checks signals_are_pending (the one
 * flag another thread can raise, caml_record_signal, which sets it before
 * it stores) and, if it is up, sends the thread back to the store with
 * young_alloc_end in the register; otherwise it performs the ret itself. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);   /* tid */
	__type(value, __u64); /* young_alloc_end, to store if a signal came */
} reg_end_subst SEC(".maps");

SEC("uprobe")
int on_reg_end4(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct ch_reg_load site;
	struct minor_view v;
	__u64 base, val, want;

	if (!p)
		return 0;
	site = p->reg_load[2];
	if (reg_load_field(ctx, &site, &base, &val))
		return 0;
	if (p->minor_on && executor == CH_EXEC_REGISTER && p->layout == CH_LAYOUT_VERIFIED && !minor_read_view(p, &v) &&
	    val == v.end && minor4_actions_idle(p, &v)) {
		want = v.young_trigger;
		if (v.memprof_trig > want && v.memprof_trig <= v.end)
			want = v.memprof_trig;
		minor_sync_epoch(p, &v);
		if (p->minor_trig > want && p->minor_trig <= v.yp) {
			want = p->minor_trig;
			count(CH_CNT_ARMS_REGISTER, 1);
		}
		if (!bpf_map_update_elem(&reg_end_subst, &tid, &val, BPF_ANY)) {
			val = want;
			count(CH_CNT_IDLE_ENDS, 1);
		}
	}
	reg_load_done(ctx, &site, val);
	return 0;
}

SEC("uprobe")
int on_reg_end_ret4(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *endp, end, sig = 1, ret;
	struct ch_reg_load site;

	if (!p)
		return 0;
	endp = bpf_map_lookup_elem(&reg_end_subst, &tid);
	if (endp) {
		end = *endp;
		bpf_map_delete_elem(&reg_end_subst, &tid);
		site = p->reg_load[2];
		if ((bpf_probe_read_user(&sig, 8, (void *)(p->signals_pending_sym + p->load_bias)) || sig) &&
		    site.store_len && reg_set(ctx, site.dst, end)) {
			/* back to the store, young_alloc_end in its register */
			ctx->ip -= site.store_len;
			count(CH_CNT_IDLE_ENDS_REDONE, 1);
			return 0;
		}
	}
	/* the ret itself (saves the kernel its single step) */
	if (!bpf_probe_read_user(&ret, 8, (void *)ctx->sp)) {
		ctx->ip = ret;
		ctx->sp += 8;
	}
	return 0;
}

/* Register executor, 4.x: caml_check_urgent_gc's entry (4.14.2
 * runtime/minor_gc.c), called by a dispatch from C (its return address in
 * caml_alloc_small_dispatch).  Such a dispatch recomputes no limit, so a
 * sample point the trap passed stays in young_limit and every allocation
 * of C code after it traps until OCaml code allocates (thousands on the way
 * down a recursion of string_of_int).  With requested_major_slice and
 * requested_minor_gc clear the call would do nothing (only this thread,
 * which holds the runtime lock, raises them), so it is sent to
 * caml_update_young_limit instead: same stack, no argument, its result
 * unused, and its young_trigger load arms the next point (reg_trigger4);
 * its ret returns into the dispatch.  Done only where the trap was
 * camlheap's (young_limit above the runtime's own value) or the runtime's
 * young_alloc_end with nothing to act on; otherwise the call runs. */
SEC("uprobe")
int on_reg_urgent4(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct minor_view v;
	__u64 ret = 0, req[2] = { 1, 1 }, natural;

	if (!p || !p->minor_on || executor != CH_EXEC_REGISTER || p->layout != CH_LAYOUT_VERIFIED || !p->update_fn)
		return 0;
	if (bpf_probe_read_user(&ret, 8, (void *)ctx->sp) || ret < p->dispatch_lo + p->load_bias ||
	    ret >= p->dispatch_hi + p->load_bias)
		return 0;
	if (minor_read_view(p, &v) ||
	    bpf_probe_read_user(req, sizeof(req), (void *)(v.cs + CH_OCAML4_REQUESTED_MAJOR_SLICE)) || req[0] || req[1])
		return 0;
	natural = v.young_trigger > v.memprof_trig ? v.young_trigger : v.memprof_trig;
	if (!((v.limit > natural && v.limit != v.end) || (v.limit == v.end && minor4_actions_idle(p, &v))))
		return 0;
	ctx->ip = p->update_fn + p->load_bias;
	count(CH_CNT_URGENT_REDIRECTS, 1);
	return 0;
}

#endif
