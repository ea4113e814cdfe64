/* unit_kernel_btf.c -- kernel_btf_cut against bpftool's own cut
 * (`bpftool gen min_core_btf`, bpftool/gen.c) of the running kernel's BTF
 * for the same BPF object: every struct or union either keeps must be in
 * the other with the same size, every member reached by name at the same
 * bit offset, of a type of the same kind and size.  Then the libbpf
 * relocation of a real load with the cut: tests/test_recording.py.
 * argv[1]: the BPF object (build/bpf/alloc.bpf.o); argv[2], optional: a
 * kernel's BTF (raw, or a vmlinux ELF: another kernel's), else the running
 * kernel's.
 * Prints "PASS name" / "FAIL name: why"; exits 1 on any failure. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/btf.h>

#include "collect/kernel_btf.h"

#include "unit_check.h"

static __u32 skip(const struct btf *b, __u32 id)
{
	const struct btf_type *t = btf__type_by_id(b, id);

	while (t && (btf_is_mod(t) || btf_is_typedef(t)))
		t = btf__type_by_id(b, id = t->type);
	return id;
}

/* member `name` of composite id (through anonymous members): its type and bit offset */
static int member(const struct btf *b, __u32 id, const char *name, __u32 *type, __u32 *off)
{
	const struct btf_type *t = btf__type_by_id(b, id);

	for (int i = 0; i < btf_vlen(t); i++) {
		const struct btf_member *m = btf_members(t) + i;
		const char *n = btf__name_by_offset(b, m->name_off);
		__u32 sub = skip(b, m->type);

		if (n && *n && !strcmp(n, name)) {
			*type = m->type;
			*off = btf_member_bit_offset(t, i);
			return 1;
		}
		if ((!n || !*n) && btf_is_composite(btf__type_by_id(b, sub)) && member(b, sub, name, type, off)) {
			*off += btf_member_bit_offset(t, i);
			return 1;
		}
	}
	return 0;
}

/* Every named member of composite a (BTF ba) in composite b (BTF bb) at the
 * same offset (a's members from base bits into the struct b mirrors) with a
 * type of the same kind and size; recursively into member types that are
 * composite.  Returns the mismatches, described in why. */
static int same_members(const struct btf *ba, __u32 a, __u32 base, const struct btf *bb, __u32 b, const char *path,
			char *why, size_t len)
{
	const struct btf_type *t = btf__type_by_id(ba, a);
	int bad = 0;

	for (int i = 0; i < btf_vlen(t); i++) {
		const struct btf_member *m = btf_members(t) + i;
		const char *n = btf__name_by_offset(ba, m->name_off);
		__u32 ta = skip(ba, m->type), tb, off, offa = btf_member_bit_offset(t, i);
		const struct btf_type *xa = btf__type_by_id(ba, ta), *xb;
		char sub[512];

		if (!n || !*n) { /* anonymous: its members are a's */
			if (btf_is_composite(xa))
				bad += same_members(ba, ta, base + offa, bb, b, path, why, len);
			continue;
		}
		snprintf(sub, sizeof(sub), "%s.%s", path, n);
		if (!member(bb, b, n, &tb, &off)) {
			snprintf(why, len, "%s missing", sub);
			bad++;
			continue;
		}
		tb = skip(bb, tb);
		xb = btf__type_by_id(bb, tb);
		if (base + offa != off) {
			snprintf(why, len, "%s at bit %u vs %u", sub, base + offa, off);
			bad++;
		}
		if (btf_kind(xa) != btf_kind(xb) || (!btf_is_ptr(xa) && btf__resolve_size(ba, ta) != btf__resolve_size(bb, tb))) {
			snprintf(why, len, "%s: kind %u size %lld vs kind %u size %lld", sub, btf_kind(xa),
				 btf__resolve_size(ba, ta), btf_kind(xb), btf__resolve_size(bb, tb));
			bad++;
		}
		if (btf_is_composite(xa) && btf_is_composite(xb))
			bad += same_members(ba, ta, 0, bb, tb, sub, why, len);
		if (btf_is_array(xa) && btf_is_array(xb)) {
			__u32 ea = skip(ba, btf_array(xa)->type), eb = skip(bb, btf_array(xb)->type);

			if (btf_is_composite(btf__type_by_id(ba, ea)) && btf_is_composite(btf__type_by_id(bb, eb)))
				bad += same_members(ba, ea, 0, bb, eb, sub, why, len);
		}
	}
	return bad;
}

/* Does every named struct/union of ba have its like in bb, same size, same members? */
static int covered(const struct btf *ba, const struct btf *bb, char *why, size_t len)
{
	int bad = 0;

	for (__u32 id = 1; id < btf__type_cnt(ba); id++) {
		const struct btf_type *t = btf__type_by_id(ba, id);
		const char *n = btf__name_by_offset(ba, t->name_off);
		__s32 o;

		if (!btf_is_composite(t) || !n || !*n)
			continue;
		o = btf__find_by_name_kind(bb, n, btf_kind(t));
		if (o <= 0) {
			snprintf(why, len, "struct/union %s missing", n);
			bad++;
			continue;
		}
		if (btf__type_by_id(bb, (__u32)o)->size != t->size) {
			snprintf(why, len, "%s: size %u vs %u", n, t->size, btf__type_by_id(bb, (__u32)o)->size);
			bad++;
		}
		bad += same_members(ba, id, 0, bb, (__u32)o, n, why, len);
	}
	return bad;
}

static void *slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n)
		*size = (size_t)n;
	else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	const char *obj = argc > 1 ? argv[1] : "build/bpf/alloc.bpf.o";
	const char *kpath = argc > 2 ? argv[2] : "/sys/kernel/btf/vmlinux";
	char tmp[] = "/tmp/camlheap-unit-btf-XXXXXX", cmd[1024], why[512] = "", err[256] = "";
	struct btf *k = argc > 2 ? btf__parse(kpath, NULL) : btf__load_vmlinux_btf(), *mine = NULL, *theirs;
	size_t size = 0;
	void *elf = slurp(obj, &size);
	int fd = mkstemp(tmp), n, bad;

	if (!k || !elf || fd < 0) {
		printf("FAIL kernel_btf_setup: kernel BTF %s, %s %s\n", k ? "read" : "unreadable", obj,
		       elf ? "read" : "unreadable");
		return 1;
	}
	close(fd);
	n = kernel_btf_cut(elf, size, k, &mine, err, sizeof(err));
	check(n > 0 && mine, "kernel_btf_cut_follows_the_relocations", "%d: %s", n, err);
	snprintf(cmd, sizeof(cmd), "%s gen min_core_btf %s %s %s", getenv("BPFTOOL") ? getenv("BPFTOOL") : "bpftool", kpath,
		 tmp, obj);
	theirs = system(cmd) == 0 ? btf__parse(tmp, NULL) : NULL;
	unlink(tmp);
	check(theirs != NULL, "bpftool_min_core_btf_runs", "%s failed", cmd);
	if (mine && theirs) {
		bad = covered(theirs, mine, why, sizeof(why));
		check(!bad, "kernel_btf_cut_has_every_type_and_member_bpftool_keeps", "%d mismatches, e.g. %s", bad, why);
		bad = covered(mine, theirs, why, sizeof(why));
		check(!bad, "kernel_btf_cut_keeps_nothing_bpftool_leaves_out", "%d mismatches, e.g. %s", bad, why);
	}
	/* an ELF image without .BTF.ext (this program's own): refused, said */
	{
		size_t self_size = 0;
		void *self = slurp("/proc/self/exe", &self_size);
		struct btf *none = NULL;

		err[0] = '\0';
		n = self ? kernel_btf_cut(self, self_size, k, &none, err, sizeof(err)) : 0;
		check(n == -EINVAL && !none && strstr(err, ".BTF"), "kernel_btf_cut_refuses_an_object_without_btf",
		      "%d, '%s'", n, err);
		free(self);
	}
	btf__free(theirs);
	btf__free(mine);
	btf__free(k);
	free(elf);
	return failures ? 1 : 0;
}
