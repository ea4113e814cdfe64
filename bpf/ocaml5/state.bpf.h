/* ocaml5/state.bpf.h -- what an OCaml 5 event reads of the allocating
 * domain (5.x runtime/caml/domain_state.tbl, at the offsets of
 * include/camlheap.h CH_OCAML5_* and ch_proc's per-release ones): the
 * domain state from the thread's TLS, its per-domain sampling countdown,
 * and the collection counters.  Included by alloc.bpf.c, before its event
 * path.
 */
#ifndef CH_OCAML5_STATE_BPF_H
#define CH_OCAML5_STATE_BPF_H

/* OCaml 5: the allocating thread's domain state, read from its TLS
 * `caml_state` (5.3 runtime/domain.c): fs base + tls_state_off.  0 if
 * unreadable (a thread outside any domain, or a wrong offset: counted). */
static __always_inline __u64 ocaml5_dom(struct ch_proc *p)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase), dom = 0;

	if (!fsbase || bpf_probe_read_user(&dom, sizeof(dom), (void *)(fsbase + p->tls_state_off)))
		return 0;
	return dom;
}

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct ch_domain_key);
	__type(value, struct ch_domain);
} domains SEC(".maps");

/* OCaml 5: the countdown of domain `dom`, created with a fresh draw and
 * its minor heap not armed yet.  Every field of the new entry is set: a
 * privileged BPF program may read uninitialised stack, and a stale
 * minor_armed with a zero minor_trig left the domain's minor heap never
 * sampled (one launch in ten). */
static __always_inline __s64 *ocaml5_countdown(__u64 dom)
{
	struct ch_domain_key k = { .dom_state = dom, .tgid = bpf_get_current_pid_tgid() >> 32 };
	struct ch_domain *d = bpf_map_lookup_elem(&domains, &k), fresh = {};

	if (d)
		return &d->next_sample_words;
	fresh.next_sample_words = (__s64)geom_draw() - 1;
	bpf_map_update_elem(&domains, &k, &fresh, BPF_NOEXIST);
	d = bpf_map_lookup_elem(&domains, &k);
	return d ? &d->next_sample_words : 0;
}

/* OCaml 5: check the domain state the TLS pointer gave (young_start <=
 * young_ptr <= young_end, give or take a block being allocated) and read
 * the domain id and the exported collection counters. */
static __always_inline int domain5_plausible(struct ch_proc *p, __u64 dom, struct ch_sample_event *ev)
{
	__u64 f[4], minor = 0, major = 0, compactions = 0;
	__u32 id = 0;

	if (bpf_probe_read_user(f, sizeof(f), (void *)dom) ||
	    bpf_probe_read_user(&id, sizeof(id), (void *)(dom + p->dom_id_off)))
		return 0;
	bpf_probe_read_user(&minor, sizeof(minor), (void *)(p->minor_count_sym + p->load_bias));
	bpf_probe_read_user(&major, sizeof(major), (void *)(p->major_count_sym + p->load_bias));
	if (p->compact_count_sym)
		bpf_probe_read_user(&compactions, sizeof(compactions), (void *)(p->compact_count_sym + p->load_bias));
	ev->in_minor_heap = ev->block_addr > f[CH_OCAML5_YOUNG_START / 8] && ev->block_addr < f[CH_OCAML5_YOUNG_END / 8];
	ev->minor_gcs = (__u32)minor;
	ev->major_gcs = (__u32)major;
	ev->compactions = (__u32)compactions;
	ev->domain = id;
	return f[CH_OCAML5_YOUNG_START / 8] < f[CH_OCAML5_YOUNG_END / 8] &&
	       f[CH_OCAML5_YOUNG_PTR / 8] + 257 * 8 >= f[CH_OCAML5_YOUNG_START / 8] &&
	       f[CH_OCAML5_YOUNG_PTR / 8] <= f[CH_OCAML5_YOUNG_END / 8] && id < 65536;
}
/* OCaml 5 counters for an event taken on a thread without a domain: the
 * exported globals only. */
static __always_inline void counters5(struct ch_proc *p, struct ch_sample_event *ev)
{
	__u64 minor = 0, major = 0, compactions = 0;

	bpf_probe_read_user(&minor, sizeof(minor), (void *)(p->minor_count_sym + p->load_bias));
	bpf_probe_read_user(&major, sizeof(major), (void *)(p->major_count_sym + p->load_bias));
	if (p->compact_count_sym)
		bpf_probe_read_user(&compactions, sizeof(compactions), (void *)(p->compact_count_sym + p->load_bias));
	ev->minor_gcs = (__u32)minor;
	ev->major_gcs = (__u32)major;
	ev->compactions = (__u32)compactions;
}

#endif
