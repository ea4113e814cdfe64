/* census.bpf.h -- what the census shares between OCaml 4 and 5: the
 * major set `major_tracked` (an array filled from index 0, ch_proc.major_n,
 * so that a pass costs what is tracked, not the map's capacity), the state
 * of one pass, fate events, and the pass over the major set that judges
 * each block by the family's rule (CENSUS_CLEAN: 4.x colour;
 * CENSUS_CLEAN5: 5.x status), marks every block relocated (CENSUS_COMPACT)
 * or only resends what a full ring buffer held back (CENSUS_RESEND).  The
 * young sets and the probes are per family: ocaml4/census.bpf.h and
 * ocaml5/census.bpf.h.  Included by alloc.bpf.c after its event path.
 *
 * A fate event that finds the ring buffer full is kept in major_tracked
 * (CH_TRK_PEND_*) and sent at a later pass: no death is ever lost, so user
 * space never keeps a dead block live.
 */
#ifndef CH_CENSUS_BPF_H
#define CH_CENSUS_BPF_H

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

#endif
