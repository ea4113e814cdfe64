/* ocaml4/census.bpf.h -- follow every sampled block of an OCaml 4.12-4.14
 * process until the collector frees it (README *Census*; the runtime's
 * decision points below).  Included by alloc.bpf.c after census.bpf.h
 * (the major pass both families share); OCaml 5's is ocaml5/census.bpf.h.
 *
 * Sets: `young_tracked` holds the sampled blocks of the current minor
 * cycle, `major_tracked` those in the major heap.  Both are arrays filled
 * from index 0 (ch_proc.young_n / major_n), so a pass costs what is
 * tracked, not the map's capacity.  4.x runs the runtime under one lock:
 * no two of these programs run at once for one process.
 *
 * Decision points, the runtime's own (memprof.c applies the same rules to
 * its tracked blocks at the same calls):
 *   caml_memprof_minor_update (4.13.1 minor_gc.c:402): promotion is
 *     complete, forwarding intact: header 0 => promoted to Field(v, 0),
 *     else dead (memprof.c:663-687).
 *   caml_memprof_update_clean_phase (major_gc.c:661): marking is over; a
 *     white block is dead (memprof.c:714-729); blocks allocated or promoted
 *     since are black.
 *   caml_memprof_invert_tracked (compact.c do_compaction): blocks are about
 *     to move; an external tracker cannot follow them (do_compaction
 *     updates only the pointers it inverts: roots, heap fields, finalisers'
 *     and memprof's tables): every tracked major block becomes "relocated",
 *     alive then, location unknown.
 * Fate events a full ring buffer refuses wait in major_tracked
 * (census.bpf.h).
 */
#ifndef CH_OCAML4_CENSUS_BPF_H
#define CH_OCAML4_CENSUS_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by user space (young capacity) */
	__type(key, __u32);
	__type(value, struct ch_tracked);
} young_tracked SEC(".maps");

/* Follow a sampled block whose sample event was sent.  A full set means
 * it is not followed, which user space learns at once. */
static __always_inline void census4_track(struct ch_proc *p, struct ch_sample_event *ev)
{
	struct ch_tracked *e;
	__u32 i;

	if (ev->in_minor_heap) {
		i = p->young_n;
		e = bpf_map_lookup_elem(&young_tracked, &i);
		if (e)
			p->young_n = i + 1;
	} else {
		i = p->major_n;
		e = bpf_map_lookup_elem(&major_tracked, &i);
		if (e)
			p->major_n = i + 1;
	}
	if (!e) {
		count(CH_CNT_TRACK_FULL, 1);
		emit_fate(CH_FATE_UNTRACKED, ev->sample_id, ev->block_addr, ev->time_ns, ev->minor_gcs,
			  ev->major_gcs, ev->tgid, 0);
		return;
	}
	e->addr = ev->block_addr;
	e->sample_id = ev->sample_id;
	e->tgid = ev->tgid;
	e->state = 0;
	e->fate_ns = 0;
	e->minor_gcs = e->major_gcs = 0;
	e->birth_minor_gcs = ev->minor_gcs;
	e->compactions = ev->compactions;
}

static __always_inline struct census_pass *census_begin(struct ch_proc *p, __u64 *cs_out)
{
	__u32 zero = 0;
	struct census_pass *s = bpf_map_lookup_elem(&census_state, &zero);
	__u64 cs = 0, yr[2], gc[5]; /* stat_minor_collections .. stat_compactions */

	if (!s)
		return NULL;
	if (bpf_probe_read_user(&cs, 8, (void *)(p->caml_state_sym + p->load_bias)) || !cs ||
	    bpf_probe_read_user(yr, sizeof(yr), (void *)(cs + CH_OCAML4_YOUNG_START)) ||
	    bpf_probe_read_user(gc, sizeof(gc), (void *)(cs + CH_OCAML4_STAT_MINOR_COLLECTIONS))) {
		count(CH_CNT_BAD_STATE, 1);
		return NULL;
	}
	s->now_ns = bpf_ktime_get_ns();
	s->young_start = yr[0];
	s->young_end = yr[1];
	s->minor_gcs = (__u32)gc[0];
	s->major_gcs = (__u32)gc[1];
	s->compactions = (__u32)gc[(CH_OCAML4_STAT_COMPACTIONS - CH_OCAML4_STAT_MINOR_COLLECTIONS) / 8];
	s->tgid = bpf_get_current_pid_tgid() >> 32;
	s->cursor = 0;
	s->pending = 0;
	*cs_out = cs;
	return s;
}
/* One young entry at a minor collection.  The major array's fill and the
 * pending count live in the pass state (s->n, s->pending) for the whole
 * loop, not in the process entry: no lookup per entry. */
static long census_young_step(__u32 i, void *unused)
{
	__u32 zero = 0;
	struct census_pass *s = bpf_map_lookup_elem(&census_state, &zero);
	struct ch_tracked *e, *m;
	__u64 hd = 1, to = 0;
	__u8 fate = CH_FATE_DEAD_MINOR;

	if (!s || i >= s->young_n)
		return 1;
	e = bpf_map_lookup_elem(&young_tracked, &i);
	if (!e)
		return 1;
	if (e->tgid != s->tgid)
		return 0;
	if (e->birth_minor_gcs != s->minor_gcs) {
		/* sampled before a minor collection no probe saw (while
		 * attaching): its address may hold another block by now */
		count(CH_CNT_FATE_STALE, 1);
		fate = CH_FATE_UNKNOWN;
	} else if (e->addr <= s->young_start || e->addr >= s->young_end ||
		   bpf_probe_read_user(&hd, sizeof(hd), (void *)(e->addr - 8)) ||
		   (hd == 0 && bpf_probe_read_user(&to, sizeof(to), (void *)e->addr))) {
		count(CH_CNT_FATE_UNREADABLE, 1);
		fate = CH_FATE_UNKNOWN;
	} else if (hd == 0) {
		/* promoted: the block now lives at Field(v, 0) */
		m = census_major_push(s, e, to, 0);
		if (!m) {
			count(CH_CNT_TRACK_FULL, 1);
			fate = CH_FATE_UNTRACKED;
		} else {
			if (emit_fate(CH_FATE_PROMOTE, e->sample_id, to, s->now_ns, s->minor_gcs, s->major_gcs, e->tgid,
				      0)) {
				m->state = CH_TRK_PEND_PROMOTE;
				s->pending++;
			}
			return 0;
		}
	}
	if (emit_fate(fate, e->sample_id, e->addr, s->now_ns, s->minor_gcs, s->major_gcs, e->tgid, 0)) {
		/* keep it, dead, in the major array until the event is sent */
		if (!census_major_push(s, e, e->addr,
				       CH_TRK_DEAD | CH_TRK_PEND_FATE | ((__u32)fate << CH_TRK_FATE_SHIFT))) {
			count(CH_CNT_DROPPED, 1);
			return 0;
		}
		s->pending++;
	}
	return 0;
}

/* caml_memprof_minor_update: the minor heap has been emptied into the
 * major heap, forwarding pointers still in place. */
SEC("uprobe")
int on_minor_update(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u64 t0, cs;

	if (!p || !proc_census(p))
		return 0;
	count(CH_CNT_MINOR_UPDATES, 1);
	if (!p->young_n && !p->pending_n)
		return 0;
	t0 = bpf_ktime_get_ns();
	s = census_begin(p, &cs);
	if (!s)
		return 0;
	if (p->pending_n) /* first what earlier passes could not send */
		census_major_pass(p, s, CENSUS_RESEND);
	s->young_n = p->young_n;
	if (s->young_n) {
		count(CH_CNT_YOUNG_CHECKED, s->young_n);
		s->n = p->major_n;
		s->pending = p->pending_n;
		bpf_loop(s->young_n, census_young_step, NULL, 0);
		p->major_n = s->n;
		p->pending_n = s->pending;
		p->young_n = 0;
	}
	count(CH_CNT_CENSUS_MINOR_NS, bpf_ktime_get_ns() - t0);
	return 0;
}
/* caml_memprof_update_clean_phase: marking is over, white blocks are dead. */
SEC("uprobe")
int on_clean_phase(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u64 t0, cs;

	if (!p || !proc_census(p))
		return 0;
	count(CH_CNT_CLEAN_PHASES, 1);
	t0 = bpf_ktime_get_ns();
	s = census_begin(p, &cs);
	if (!s)
		return 0;
	census_clean_phase(p, s, CENSUS_CLEAN, t0);
	return 0;
}

/* caml_memprof_invert_tracked, inside do_compaction: blocks are about to
 * move where camlheap cannot follow them. */
SEC("uprobe")
int on_compaction(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u64 cs;

	if (!p || !proc_census(p))
		return 0;
	count(CH_CNT_COMPACTIONS, 1);
	s = census_begin(p, &cs);
	if (!s)
		return 0;
	census_major_pass(p, s, CENSUS_COMPACT);
	return 0;
}

#endif
