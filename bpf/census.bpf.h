/* census.bpf.h -- follow every sampled block of an OCaml 4.13/4.14
 * process until the collector frees it (ARCHITECTURE.md §6,
 * ocaml-runtime.md §4).  Included by alloc.bpf.c before minor.bpf.h;
 * OCaml 5's variant is census5.bpf.h, included at its end.
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
 *     to move; an external tracker cannot follow them (ocaml-runtime.md
 *     §4.3): every tracked major block becomes "relocated", alive then,
 *     location unknown.
 * A fate event that finds the ring buffer full is kept in major_tracked
 * (CH_TRK_PEND_*) and sent at a later pass: no death is ever lost, so user
 * space never keeps a dead block live.
 */
#ifndef CH_CENSUS_BPF_H
#define CH_CENSUS_BPF_H

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by user space (young capacity) */
	__type(key, __u32);
	__type(value, struct ch_tracked);
} young_tracked SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* set by user space (--max-tracked) */
	__type(key, __u32);
	__type(value, struct ch_tracked);
} major_tracked SEC(".maps");

/* State of one pass, in a map value (the pre-6.7 verifier judged
 * callback branches from the caller's initial stack state; see
 * minor.bpf.h's attr_state). */
struct census_pass {
	__u64 now_ns;
	__u64 young_start, young_end;
	__u32 minor_gcs, major_gcs;
	__u32 compactions;
	__u32 pad;
	__u32 tgid;
	__u32 cursor;       /* major pass: next entry */
	__u32 n;            /* major pass: entries left in the array */
	__u32 pending;      /* entries still pending after the pass */
	__u32 mode;         /* CENSUS_* */
	__u32 young_n;
	__u64 unmarked;     /* CENSUS_CLEAN5: caml_global_heap_state.UNMARKED (a header's status bits) */
};

#define CENSUS_CLEAN 0   /* colour check + resend */
#define CENSUS_RESEND 1  /* resend pending events only */
#define CENSUS_COMPACT 2 /* every live entry: relocated */
#define CENSUS_CLEAN5 3  /* OCaml 5: status check (UNMARKED is dead) + resend */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct census_pass);
} census_state SEC(".maps");

static __always_inline int emit_fate_note(__u8 kind, __u64 id, __u64 addr, __u64 ns, __u32 minor, __u32 major,
					  __u32 tgid, __u32 tracked, __u32 clean_phases)
{
	struct ch_fate_event *f = bpf_ringbuf_reserve(&events, sizeof(*f), 0);

	if (!f)
		return -1;
	__builtin_memset(f, 0, sizeof(*f));
	f->sample_id = id;
	f->time_ns = ns;
	f->block_addr = addr;
	f->minor_gcs = minor;
	f->major_gcs = major;
	f->tgid = tgid;
	f->tracked = tracked;
	f->clean_phases = clean_phases;
	f->kind = kind;
	bpf_ringbuf_submit(f, BPF_RB_NO_WAKEUP);
	return 0;
}

static __always_inline int emit_fate(__u8 kind, __u64 id, __u64 addr, __u64 ns, __u32 minor, __u32 major,
				     __u32 tgid, __u32 tracked)
{
	return emit_fate_note(kind, id, addr, ns, minor, major, tgid, tracked, 0);
}

/* Follow a sampled block whose sample event was sent.  A full set means
 * it is not followed, which user space learns at once. */
static __always_inline void census5_track(struct ch_proc *p, struct ch_sample_event *ev);

static __always_inline void census_track(struct ch_proc *p, struct ch_sample_event *ev)
{
	struct ch_tracked *e;
	__u32 i;

	if (!ev->sample_id)
		return;
	if (p->ocaml5) {
		census5_track(p, ev);
		return;
	}
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

/* Send an entry's pending events, promotion first.  Returns the bits
 * still pending. */
static __always_inline __u32 census_resend(struct ch_tracked *e)
{
	if (e->state & CH_TRK_PEND_PROMOTE) {
		if (emit_fate(CH_FATE_PROMOTE, e->sample_id, e->addr, e->fate_ns, e->minor_gcs, e->major_gcs, e->tgid,
			      0))
			return e->state & (CH_TRK_PEND_PROMOTE | CH_TRK_PEND_FATE);
		e->state &= ~CH_TRK_PEND_PROMOTE;
		count(CH_CNT_FATES_DEFERRED, 1);
	}
	if (e->state & CH_TRK_PEND_FATE) {
		if (emit_fate((__u8)(e->state >> CH_TRK_FATE_SHIFT), e->sample_id, e->addr, e->fate_ns, e->minor_gcs,
			      e->major_gcs, e->tgid, 0))
			return CH_TRK_PEND_FATE;
		e->state &= ~CH_TRK_PEND_FATE;
		count(CH_CNT_FATES_DEFERRED, 1);
	}
	return 0;
}

/* Record a final fate on an entry (sent now if the ring has room). */
static __always_inline void census_set_fate(struct ch_tracked *e, struct census_pass *s, __u8 kind)
{
	bool promote_pending = e->state & CH_TRK_PEND_PROMOTE;

	e->fate_ns = s->now_ns;
	e->minor_gcs = s->minor_gcs;
	e->major_gcs = s->major_gcs;
	/* sent at once unless the ring is full or its promotion still waits
	 * (which must go first) */
	if (!promote_pending &&
	    !emit_fate(kind, e->sample_id, e->addr, s->now_ns, s->minor_gcs, s->major_gcs, e->tgid, 0)) {
		e->state = CH_TRK_DEAD;
		return;
	}
	e->state = (e->state & CH_TRK_PEND_PROMOTE) | CH_TRK_DEAD | CH_TRK_PEND_FATE |
		   ((__u32)kind << CH_TRK_FATE_SHIFT);
	census_resend(e);
}

/* One step of a pass over major_tracked: the entry at the cursor is kept
 * (cursor advances) or removed (the last entry takes its place). */
static long census_major_step(__u32 i, void *unused)
{
	__u32 zero = 0;
	struct census_pass *s = bpf_map_lookup_elem(&census_state, &zero);
	struct ch_tracked *e, *last;
	__u32 li;

	if (!s || s->cursor >= s->n)
		return 1;
	e = bpf_map_lookup_elem(&major_tracked, &s->cursor);
	if (!e)
		return 1;
	if (e->tgid != s->tgid) {
		s->cursor++;
		return 0;
	}
	if (!(e->state & CH_TRK_DEAD)) {
		if (s->mode == CENSUS_COMPACT) {
			census_set_fate(e, s, CH_FATE_RELOCATED);
		} else if (s->mode == CENSUS_CLEAN || s->mode == CENSUS_CLEAN5) {
			__u64 hd = 0;

			if (e->compactions != s->compactions) {
				/* a compaction ran that no probe saw (while
				 * attaching): the address means nothing now */
				count(CH_CNT_FATE_STALE, 1);
				census_set_fate(e, s, CH_FATE_RELOCATED);
			} else if (bpf_probe_read_user(&hd, sizeof(hd), (void *)(e->addr - 8))) {
				count(CH_CNT_FATE_UNREADABLE, 1);
				census_set_fate(e, s, CH_FATE_UNKNOWN);
			} else if (s->mode == CENSUS_CLEAN ? ((hd >> 8) & 3) == 0 /* Is_white_hd: colour bits 8-9 == 0 */
							   : (hd & 0x300) == s->unmarked /* 5.x shared_heap.h Has_status_hd */) {
				census_set_fate(e, s, CH_FATE_DEAD_MAJOR);
			}
		}
	}
	if (e->state & (CH_TRK_PEND_PROMOTE | CH_TRK_PEND_FATE)) {
		if (census_resend(e)) {
			s->pending++;
			s->cursor++;
			return 0;
		}
	}
	if (!(e->state & CH_TRK_DEAD)) {
		s->cursor++;
		return 0;
	}
	/* remove: the last entry moves here and is looked at next */
	li = s->n - 1;
	if (li != s->cursor) {
		last = bpf_map_lookup_elem(&major_tracked, &li);
		if (!last)
			return 1;
		*e = *last;
	}
	s->n = li;
	return 0;
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

static __always_inline void census_major_pass(struct ch_proc *p, struct census_pass *s, __u32 mode)
{
	s->mode = mode;
	s->cursor = 0;
	/* OCaml 5 takes slots with atomic adds, which can overshoot the
	 * array by the CPUs racing for its last slot */
	s->n = p->major_n < p->major_cap ? p->major_n : p->major_cap;
	s->pending = 0;
	bpf_loop(1 << 23, census_major_step, NULL, 0);
	p->major_n = s->n;
	p->pending_n = s->pending;
}

/* Append a young entry to the major array (filled up to s->n during a
 * minor pass) at address `addr`, with `state`.  NULL if the array is full. */
static __always_inline struct ch_tracked *census_major_push(struct census_pass *s, const struct ch_tracked *e,
							     __u64 addr, __u32 state)
{
	__u32 mi = s->n;
	struct ch_tracked *m = bpf_map_lookup_elem(&major_tracked, &mi);

	if (!m)
		return NULL;
	s->n = mi + 1;
	m->addr = addr;
	m->sample_id = e->sample_id;
	m->tgid = e->tgid;
	m->fate_ns = s->now_ns;
	m->minor_gcs = s->minor_gcs;
	m->major_gcs = s->major_gcs;
	m->state = state;
	m->birth_minor_gcs = e->birth_minor_gcs;
	m->compactions = s->compactions;
	return m;
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

	if (!p || !p->census_on)
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

/* The end of a major cycle's marking (4.x clean phase, 5.x heap cycling):
 * judge the major set by `mode`'s rule, then a numbered note, so that a
 * lost note is seen (user space fills the gap); births after this carry
 * the new number. */
static __always_inline void census_clean_phase(struct ch_proc *p, struct census_pass *s, __u32 mode, __u64 t0)
{
	count(CH_CNT_MAJOR_CHECKED, p->major_n);
	census_major_pass(p, s, mode);
	p->clean_phases++;
	if (emit_fate_note(CH_NOTE_MAJOR_CLEAN, 0, 0, s->now_ns, s->minor_gcs, s->major_gcs, s->tgid, p->major_n,
			   p->clean_phases))
		count(CH_CNT_DROPPED, 1);
	count(CH_CNT_CENSUS_MAJOR_NS, bpf_ktime_get_ns() - t0);
}

/* caml_memprof_update_clean_phase: marking is over, white blocks are dead. */
SEC("uprobe")
int on_clean_phase(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u64 t0, cs;

	if (!p || !p->census_on)
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

	if (!p || !p->census_on)
		return 0;
	count(CH_CNT_COMPACTIONS, 1);
	s = census_begin(p, &cs);
	if (!s)
		return 0;
	census_major_pass(p, s, CENSUS_COMPACT);
	return 0;
}

#include "census5.bpf.h"

#endif
