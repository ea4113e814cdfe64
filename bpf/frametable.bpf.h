/* frametable.bpf.h -- the frame tables Dynlink registers at run time
 * (4.x caml_register_frametable, 5.x caml_register_frametables), read into
 * the unwinder's map of runtime addresses before the plugin's code runs.
 * Included by alloc.bpf.c after emit_note.
 */
#ifndef CH_FRAMETABLE_BPF_H
#define CH_FRAMETABLE_BPF_H

struct ft_parse {
	__u64 d;     /* runtime address of the next descriptor */
	__s64 left;  /* descriptors still to read */
};

/* One frame descriptor, exactly as frametable.c (and 4.13.1
 * runtime/roots_nat.c next_frame_descr) lays them out: retaddr, frame_size,
 * num_live, live_ofs[num_live]; if frame_size & 2: num_allocs, alloc_len[];
 * if frame_size & 1: align 4, debuginfo slots (one per alloc, or one);
 * align 8.  0xFFFF has neither. */
static long ft_step(__u32 i, void *data)
{
	struct ft_parse *s = data;
	struct {
		__u64 retaddr;
		__u16 frame_size;
		__u16 num_live;
	} h;
	struct ch_frame_key k = {};
	struct ch_frame_val v = {};
	__u64 p;
	__u8 na = 0;

	if (s->left <= 0 || bpf_probe_read_user(&h, 12, (void *)s->d))
		return 1;
	p = s->d + 12 + 2 * (__u64)h.num_live;
	if (h.frame_size != CH_FRAME_RETURN_TO_C) {
		if (h.frame_size & 2) {
			if (bpf_probe_read_user(&na, 1, (void *)p))
				return 1;
			p += 1 + (__u64)na;
		}
		if (h.frame_size & 1)
			p = ((p + 3) & ~3ULL) + 4 * (__u64)((h.frame_size & 2) ? na : 1);
	}
	k.retaddr = h.retaddr;
	v.frame_size = h.frame_size;
	bpf_map_update_elem(&frametable_rt, &k, &v, BPF_ANY);
	s->d = (p + 7) & ~7ULL;
	s->left--;
	return 0;
}

/* caml_register_frametable(intnat *table): Dynlink is loading a plugin whose
 * code runs next (4.13.1 runtime/natdynlink.c).  Its table is in memory,
 * relocated: read its descriptors into the unwinder's runtime-address map
 * now, before any plugin code runs, so that no walk through it is ever cut
 * (~0.3 us a descriptor, once per plugin).  User space is told too, to
 * symbolize the plugin. */
SEC("uprobe")
int BPF_KPROBE(on_register_frametable, __u64 table)
{
	struct ft_parse s = {};

	if (!current_proc())
		return 0;
	if (!bpf_probe_read_user(&s.left, sizeof(s.left), (void *)table) && s.left > 0) {
		s.d = table + 8;
		bpf_loop(1 << 20, ft_step, &s, 0);
	}
	emit_note(CH_NOTE_FRAMETABLE, table);
	return 0;
}

/* OCaml 5: caml_register_frametables(void **table, int ntables) (5.3
 * runtime/frame_descriptors.c:302, called by natdynlink for a plugin's
 * units): the same parse, one table after the other. */
struct ft5_parse {
	struct ft_parse cur;
	__u64 tables;  /* runtime address of the next table pointer */
	__s64 ntables; /* tables still to start */
};

static long ft5_step(__u32 i, void *data)
{
	struct ft5_parse *s = data;
	__u64 tbl = 0;

	if (s->cur.left > 0)
		return ft_step(i, &s->cur);
	/* next table: intnat num_descr, then the descriptors */
	if (s->ntables <= 0 || bpf_probe_read_user(&tbl, sizeof(tbl), (void *)s->tables) || !tbl ||
	    bpf_probe_read_user(&s->cur.left, sizeof(s->cur.left), (void *)tbl))
		return 1;
	s->cur.d = tbl + 8;
	s->tables += 8;
	s->ntables--;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_register_frametables, __u64 table, __s32 ntables)
{
	struct ft5_parse s = { .tables = table, .ntables = ntables };

	if (!current_proc())
		return 0;
	if (ntables > 0 && ntables < 65536)
		bpf_loop(1 << 22, ft5_step, &s, 0);
	emit_note(CH_NOTE_FRAMETABLE, table);
	return 0;
}

#endif
