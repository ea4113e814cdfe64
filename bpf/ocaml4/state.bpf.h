/* ocaml4/state.bpf.h -- what an OCaml 4.12-4.14 event reads of the
 * runtime's one domain state, Caml_state (4.14 runtime/caml/domain_state.tbl,
 * at the offsets of include/camlheap.h CH_OCAML4_*; young_ptr's and
 * young_limit's swap in 4.12 comes from ch_proc).  Included by
 * alloc.bpf.c, before its event path.
 */
#ifndef CH_OCAML4_STATE_BPF_H
#define CH_OCAML4_STATE_BPF_H

/* The offsets are per version (domain_state.tbl): check them on the
 * live state, young_alloc_start <= young_ptr <= young_alloc_end (young_ptr is
 * current inside the runtime, where every probe sits).  A failure is
 * counted and the stack is not walked, so a wrong table cannot produce
 * made-up frames. */
static __always_inline int domain_state_plausible(struct ch_proc *p, __u64 caml_state, struct ch_sample_event *ev)
{
	__u64 f[8], gc[5]; /* stat_minor_collections .. stat_compactions */
	__u64 yp;

	if (bpf_probe_read_user(f, sizeof(f), (void *)caml_state) ||
	    bpf_probe_read_user(gc, sizeof(gc), (void *)(caml_state + CH_OCAML4_STAT_MINOR_COLLECTIONS)))
		return 0;
	/* census: a block between young_start and young_end is in the minor
	 * heap (Is_young, 4.13.1 runtime/caml/address_class.h) */
	ev->in_minor_heap = ev->block_addr > f[CH_OCAML4_YOUNG_START / 8] && ev->block_addr < f[CH_OCAML4_YOUNG_END / 8];
	ev->minor_gcs = (__u32)gc[0];
	ev->major_gcs = (__u32)gc[1];
	ev->compactions = (__u32)gc[(CH_OCAML4_STAT_COMPACTIONS - CH_OCAML4_STAT_MINOR_COLLECTIONS) / 8];
	yp = p->young_ptr_off == CH_OCAML412_YOUNG_PTR ? f[CH_OCAML412_YOUNG_PTR / 8] : f[CH_OCAML4_YOUNG_PTR / 8];
	return f[CH_OCAML4_YOUNG_ALLOC_START / 8] <= yp && yp <= f[CH_OCAML4_YOUNG_ALLOC_END / 8] &&
	       f[CH_OCAML4_YOUNG_ALLOC_START / 8] < f[CH_OCAML4_YOUNG_ALLOC_END / 8];
}

#endif
