/* ocaml5/census.bpf.h -- follow every sampled block of an OCaml 5.1-5.4 process
 * until the collector frees it (README *OCaml 5*, Census).  Included by
 * alloc.bpf.c after census.bpf.h, whose major-array pass it shares.
 *
 * Several domains run at once, so:
 *   - a young block is an entry of the hash map `young5` (key: its sample
 *     id) with its domain; each domain's minor collection judges only its
 *     own entries and deletes them;
 *   - major_tracked slots are taken with an atomic add on ch_proc.major_n
 *     (samplers of several domains, and the per-domain minor passes, push
 *     at once); the major pass itself runs with the world stopped.
 *
 * Decision points:
 *   caml_final_update_last_minor(d) (5.3 minor_gc.c:807): domain d's
 *     promotion is over and every domain has passed the minor collection's
 *     barrier; d's heap is not reused before it returns.  Header 0 =>
 *     promoted to Field(v, 0), else dead (5.3 minor_gc.c:191-231).
 *   caml_cycle_heap_from_stw_single() (shared_heap.c:1402), once a major
 *     cycle, world stopped, after every domain's marking: a block whose
 *     status is caml_global_heap_state.UNMARKED is dead (memprof.c's own
 *     rule, 1545-1567).  New and promoted blocks are MARKED.
 *   caml_compact_heap (5.3, Gc.compact): small blocks are about to move;
 *     every tracked major block becomes "relocated" (alive then, location
 *     unknown), as on 4.x.
 */
#ifndef CH_OCAML5_CENSUS_BPF_H
#define CH_OCAML5_CENSUS_BPF_H

struct young5_entry {
	struct ch_tracked t;
	__u32 domain;      /* Caml_state->id of the allocating domain */
	__u32 pad;
};

/* Preallocated: an element allocated at the update (BPF_F_NO_PREALLOC)
 * comes from a per-CPU cache refilled later (kernel/bpf/memalloc.c), so a
 * burst of samples on one CPU failed with ENOMEM and the block went
 * unfollowed with the set far from full (4 domains, default minor heaps,
 * 1e-3: about one run in three).  The capacity is sized from the rate
 * (sampler_young_capacity): ~4 200 entries at 1e-5, ~13 k at 1e-3. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* set by user space (young capacity) */
	__type(key, __u64);     /* sample id */
	__type(value, struct young5_entry);
} young5 SEC(".maps");

static __always_inline void census5_track(struct ch_proc *p, struct ch_sample_event *ev)
{
	struct ch_tracked *e = 0;
	__u32 i;

	if (ev->in_minor_heap) {
		struct young5_entry y = {
			.t = { .addr = ev->block_addr, .sample_id = ev->sample_id, .tgid = ev->tgid,
			       .birth_minor_gcs = ev->minor_gcs, .compactions = ev->compactions },
			.domain = ev->domain,
		};

		if (!bpf_map_update_elem(&young5, &ev->sample_id, &y, BPF_NOEXIST))
			return;
	} else if (p->major_n < p->major_cap) {
		i = __sync_fetch_and_add(&p->major_n, 1);
		e = bpf_map_lookup_elem(&major_tracked, &i);
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

/* A slot of the major array for a block leaving the young set. */
static __always_inline struct ch_tracked *census5_major_push(struct ch_proc *p, struct census_pass *s,
							      const struct ch_tracked *e, __u64 addr, __u32 state)
{
	struct ch_tracked *m;
	__u32 mi;

	if (p->major_n >= p->major_cap)
		return NULL;
	mi = __sync_fetch_and_add(&p->major_n, 1);
	m = bpf_map_lookup_elem(&major_tracked, &mi);
	if (!m)
		return NULL;
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

/* The pass state for the calling domain (or 0 when `dom` is 0: the major
 * pass, which needs no heap bounds). */
static __always_inline struct census_pass *census5_begin(struct ch_proc *p, __u64 dom, __u32 *id)
{
	__u32 zero = 0;
	struct census_pass *s = bpf_map_lookup_elem(&census_state, &zero);
	__u64 yr[2] = {}, minor = 0, major = 0, compactions = 0;

	if (!s)
		return NULL;
	if ((dom && (bpf_probe_read_user(yr, sizeof(yr), (void *)(dom + CH_OCAML5_YOUNG_START)) ||
		     bpf_probe_read_user(id, sizeof(*id), (void *)(dom + p->dom_id_off)))) ||
	    bpf_probe_read_user(&minor, sizeof(minor), (void *)(p->minor_count_sym + p->load_bias)) ||
	    bpf_probe_read_user(&major, sizeof(major), (void *)(p->major_count_sym + p->load_bias))) {
		count(CH_CNT_BAD_STATE, 1);
		return NULL;
	}
	if (p->compact_count_sym)
		bpf_probe_read_user(&compactions, sizeof(compactions), (void *)(p->compact_count_sym + p->load_bias));
	s->now_ns = bpf_ktime_get_ns();
	s->young_start = yr[0];
	s->young_end = yr[1];
	s->minor_gcs = (__u32)minor;
	s->major_gcs = (__u32)major;
	s->compactions = (__u32)compactions;
	s->tgid = bpf_get_current_pid_tgid() >> 32;
	s->cursor = 0;
	s->pending = 0;
	return s;
}

struct young5_ctx {
	struct ch_proc *p;
	struct census_pass *s;
	__u32 domain;
	__u32 seen;
};

/* One young entry at domain `domain`'s minor collection (the others are
 * left to their own domains' passes). */
static long census5_young_cb(void *map, __u64 *key, struct young5_entry *y, struct young5_ctx *c)
{
	struct census_pass *s = c->s;
	struct ch_tracked *e = &y->t, *m;
	__u64 hd = 1, to = 0;
	__u8 fate = CH_FATE_DEAD_MINOR;

	if (e->tgid != s->tgid || y->domain != c->domain)
		return 0;
	c->seen++;
	/* caml_minor_collections_count goes up when a collection is set up
	 * (5.4.1 minor_gc.c:839 caml_empty_minor_heap_setup), by the domain
	 * that starts it, while the others still run until they join: a block
	 * of this cycle was born one below, or, allocated by a domain in that
	 * gap, at the same count (every domain takes part in every minor
	 * collection, so it is this one that empties its heap) */
	if (e->birth_minor_gcs + 1 != s->minor_gcs && e->birth_minor_gcs != s->minor_gcs) {
		count(CH_CNT_FATE_STALE, 1);
		fate = CH_FATE_UNKNOWN;
	} else if (e->addr <= s->young_start || e->addr >= s->young_end ||
		   bpf_probe_read_user(&hd, sizeof(hd), (void *)(e->addr - 8)) ||
		   (hd == 0 && bpf_probe_read_user(&to, sizeof(to), (void *)e->addr))) {
		count(CH_CNT_FATE_UNREADABLE, 1);
		fate = CH_FATE_UNKNOWN;
	} else if (hd == 0) {
		m = census5_major_push(c->p, s, e, to, 0);
		if (!m) {
			count(CH_CNT_TRACK_FULL, 1);
			fate = CH_FATE_UNTRACKED;
		} else {
			if (emit_fate(CH_FATE_PROMOTE, e->sample_id, to, s->now_ns, s->minor_gcs, s->major_gcs, e->tgid,
				      0)) {
				m->state = CH_TRK_PEND_PROMOTE;
				__sync_fetch_and_add(&c->p->pending_n, 1);
			}
			bpf_map_delete_elem(map, key);
			return 0;
		}
	}
	if (emit_fate(fate, e->sample_id, e->addr, s->now_ns, s->minor_gcs, s->major_gcs, e->tgid, 0)) {
		/* kept, dead, in the major array until the event is sent */
		if (census5_major_push(c->p, s, e, e->addr,
				       CH_TRK_DEAD | CH_TRK_PEND_FATE | ((__u32)fate << CH_TRK_FATE_SHIFT)))
			__sync_fetch_and_add(&c->p->pending_n, 1);
		else
			count(CH_CNT_DROPPED, 1);
	}
	bpf_map_delete_elem(map, key);
	return 0;
}

/* caml_final_update_last_minor(caml_domain_state *d) */
SEC("uprobe")
int BPF_KPROBE(on_minor5, __u64 dom)
{
	struct ch_proc *p = current_proc();
	struct young5_ctx c = {};
	__u64 t0;

	if (!p || !proc_census(p) || !proc_ocaml5(p))
		return 0;
	count(CH_CNT_MINOR_UPDATES, 1);
	t0 = bpf_ktime_get_ns();
	c.p = p;
	c.s = census5_begin(p, dom, &c.domain);
	if (!c.s)
		return 0;
	bpf_for_each_map_elem(&young5, census5_young_cb, &c, 0);
	count(CH_CNT_YOUNG_CHECKED, c.seen);
	count(CH_CNT_CENSUS_MINOR_NS, bpf_ktime_get_ns() - t0);
	return 0;
}

/* caml_cycle_heap_from_stw_single(): marking is over in every domain; an
 * UNMARKED block is dead.  The world is stopped: nothing else touches the
 * sets meanwhile. */
SEC("uprobe")
int on_cycle5(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u32 id = 0;
	__u64 t0;

	if (!p || !proc_census(p) || !proc_ocaml5(p))
		return 0;
	count(CH_CNT_CLEAN_PHASES, 1);
	t0 = bpf_ktime_get_ns();
	s = census5_begin(p, 0, &id);
	if (!s || bpf_probe_read_user(&s->unmarked, sizeof(s->unmarked), (void *)(p->heap_state_sym + p->load_bias + 8)))
		return 0;
	census_clean_phase(p, s, CENSUS_CLEAN5, t0);
	return 0;
}

/* caml_compact_heap (5.3): small blocks are about to move. */
SEC("uprobe")
int on_compaction5(struct pt_regs *ctx)
{
	struct ch_proc *p = current_proc();
	struct census_pass *s;
	__u32 id = 0;

	if (!p || !proc_census(p) || !proc_ocaml5(p))
		return 0;
	count(CH_CNT_COMPACTIONS, 1);
	s = census5_begin(p, 0, &id);
	if (!s)
		return 0;
	census_major_pass(p, s, CENSUS_COMPACT);
	return 0;
}

#endif
