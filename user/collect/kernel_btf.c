/* kernel_btf.c -- the kernel types a BPF object's CO-RE relocations read,
 * cut out of the running kernel's BTF (kernel_btf.h).
 */
#define _GNU_SOURCE
#include "collect/kernel_btf.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <linux/bpf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/btf.h>

/* .BTF.ext's header (Documentation/bpf/btf.rst; libbpf 1.1
 * libbpf_internal.h struct btf_ext_header): offsets from its end */
struct ext_header {
	__u16 magic;
	__u8 version;
	__u8 flags;
	__u32 hdr_len;
	__u32 func_info_off, func_info_len;
	__u32 line_info_off, line_info_len;
	__u32 core_relo_off, core_relo_len;
};

#define MAX_SHELLS 64
#define MAX_FIELDS 32
#define MAX_STEPS 16

/* A kernel struct or union kept: the members reached, at their bit offsets
 * from its start (anonymous members flattened). */
struct shell {
	__u32 kid; /* its kernel type id */
	int nfields;
	struct {
		const char *name;
		__u32 kid; /* the member's kernel type */
		__u32 bit_off, bit_sz;
	} f[MAX_FIELDS];
};

struct cut {
	const struct btf *local, *k;
	struct btf *out;
	struct shell sh[MAX_SHELLS];
	int nsh;
	struct {
		__u32 kid, oid;
	} done[4 * MAX_SHELLS]; /* kernel type -> type of out */
	int ndone;
	__u32 index_int; /* out's array index type, 0 until needed */
	struct {
		__u32 lid;
		int kid;
	} roots[MAX_SHELLS]; /* kernel_root's answers: a few roots, hundreds of relocations */
	int nroots;
	char *err;
	size_t errlen;
};

static __u32 skip_mods(const struct btf *b, __u32 id)
{
	const struct btf_type *t = btf__type_by_id(b, id);

	while (t && (btf_is_mod(t) || btf_is_typedef(t))) {
		id = t->type;
		t = btf__type_by_id(b, id);
	}
	return id;
}

/* libbpf bpf_core_essential_name_len: a "___flavor" suffix is not part of it */
static size_t essential_len(const char *name)
{
	size_t n = strlen(name);

	for (size_t i = n; i >= 4; i--)
		if (name[i - 1] == '_' && name[i - 2] == '_' && name[i - 3] == '_')
			return i - 3;
	return n;
}

static struct shell *shell_of(struct cut *c, __u32 kid)
{
	for (int i = 0; i < c->nsh; i++)
		if (c->sh[i].kid == kid)
			return &c->sh[i];
	if (c->nsh == MAX_SHELLS)
		return NULL;
	c->sh[c->nsh].kid = kid;
	c->sh[c->nsh].nfields = 0;
	return &c->sh[c->nsh++];
}

/* Member `name` of composite kid, through anonymous members (libbpf
 * bpf_core_match_member): its type, bit offset from kid's start and
 * bitfield size.  1 if found. */
static int find_member(const struct btf *b, __u32 kid, const char *name, __u32 *type, __u32 *bit_off, __u32 *bit_sz)
{
	const struct btf_type *t = btf__type_by_id(b, kid);
	const struct btf_member *m = btf_members(t);

	for (int i = 0; i < btf_vlen(t); i++) {
		const char *mn = btf__name_by_offset(b, m[i].name_off);
		__u32 sub;

		if (mn && *mn) {
			if (strcmp(mn, name))
				continue;
			*type = m[i].type;
			*bit_off = btf_member_bit_offset(t, i);
			*bit_sz = btf_member_bitfield_size(t, i);
			return 1;
		}
		sub = skip_mods(b, m[i].type);
		if (btf_is_composite(btf__type_by_id(b, sub)) && find_member(b, sub, name, type, bit_off, bit_sz)) {
			*bit_off += btf_member_bit_offset(t, i);
			return 1;
		}
	}
	return 0;
}

/* The kernel's one struct or union of local type lid's kind and essential
 * name: its id, 0 if none, -1 if two (libbpf would weigh both). */
static int kernel_root_search(const struct cut *c, __u32 lid)
{
	const struct btf_type *lt = btf__type_by_id(c->local, lid);
	const char *ln = btf__name_by_offset(c->local, lt->name_off);
	size_t len = essential_len(ln);
	int found = 0;

	for (__u32 id = 1; id < btf__type_cnt(c->k); id++) {
		const struct btf_type *t = btf__type_by_id(c->k, id);
		const char *n;

		if (btf_kind(t) != btf_kind(lt))
			continue;
		n = btf__name_by_offset(c->k, t->name_off);
		if (essential_len(n) != len || strncmp(n, ln, len))
			continue;
		if (found)
			return -1;
		found = (int)id;
	}
	return found;
}

/* kernel_root_search, once per local type (a search reads every kernel type) */
static int kernel_root(struct cut *c, __u32 lid)
{
	int kid;

	for (int i = 0; i < c->nroots; i++)
		if (c->roots[i].lid == lid)
			return c->roots[i].kid;
	kid = kernel_root_search(c, lid);
	if (c->nroots < MAX_SHELLS) {
		c->roots[c->nroots].lid = lid;
		c->roots[c->nroots++].kid = kid;
	}
	return kid;
}

static int add_field(struct cut *c, struct shell *s, const char *name, __u32 kid, __u32 bit_off, __u32 bit_sz)
{
	for (int i = 0; i < s->nfields; i++)
		if (!strcmp(s->f[i].name, name))
			return 0;
	if (s->nfields == MAX_FIELDS) {
		snprintf(c->err, c->errlen, "more than %d members of one kernel type read", MAX_FIELDS);
		return -EINVAL;
	}
	s->f[s->nfields].name = name;
	s->f[s->nfields].kid = kid;
	s->f[s->nfields].bit_off = bit_off;
	s->f[s->nfields].bit_sz = bit_sz;
	s->nfields++;
	return 0;
}

/* One field relocation: local root type lid, access string acc ("0:247:6").
 * Its named path (bpf_core_parse_spec) followed in the kernel's types, each
 * struct/union reached kept in a shell with the member taken. */
static int follow(struct cut *c, __u32 lid, const char *acc)
{
	const char *names[MAX_STEPS]; /* a member's name, or NULL: an array index */
	int n = 0, root;
	__u32 id = lid, kid;
	char *end;

	if (!btf_is_composite(btf__type_by_id(c->local, id))) {
		snprintf(c->err, c->errlen, "a field relocation on local type %u, not a struct or union", lid);
		return -EINVAL;
	}
	strtol(acc, &end, 10); /* the root's own index: pointer arithmetic, layout-free */
	while (*end == ':') {
		long a = strtol(end + 1, &end, 10);
		const struct btf_type *t = btf__type_by_id(c->local, id);

		if (n == MAX_STEPS || a < 0) {
			snprintf(c->err, c->errlen, "access string '%s' too long or malformed", acc);
			return -EINVAL;
		}
		if (btf_is_composite(t) && a < btf_vlen(t)) {
			const struct btf_member *m = btf_members(t) + a;
			const char *mn = btf__name_by_offset(c->local, m->name_off);

			if (mn && *mn) { /* an anonymous member is not in the path: matched through */
				names[n++] = mn;
			}
			id = skip_mods(c->local, m->type);
		} else if (btf_is_array(t)) {
			names[n++] = NULL; /* the index: libbpf scales it by the element's size */
			id = skip_mods(c->local, btf_array(t)->type);
		} else {
			snprintf(c->err, c->errlen, "access string '%s' steps into a scalar", acc);
			return -EINVAL;
		}
	}
	if (*end) {
		snprintf(c->err, c->errlen, "malformed access string '%s'", acc);
		return -EINVAL;
	}
	if ((root = kernel_root(c, lid)) < 0) {
		snprintf(c->err, c->errlen, "the kernel has two types named %s",
			 btf__name_by_offset(c->local, btf__type_by_id(c->local, lid)->name_off));
		return -EINVAL;
	}
	if (!root)
		return 0; /* no candidate: libbpf finds none in the kernel's either */
	kid = (__u32)root;
	for (int i = 0; i <= n; i++) {
		const struct btf_type *t = btf__type_by_id(c->k, kid);
		__u32 mt, off, sz;
		struct shell *s = NULL;

		if (btf_is_composite(t) && !(s = shell_of(c, kid))) {
			snprintf(c->err, c->errlen, "more than %d kernel types read", MAX_SHELLS);
			return -EINVAL;
		}
		if (i == n)
			break;
		if (names[i]) {
			if (!btf_is_composite(t) || !find_member(c->k, kid, names[i], &mt, &off, &sz))
				return 0; /* the kernel lacks it: so will the cut */
			int ret = add_field(c, s, names[i], mt, off, sz);

			if (ret < 0)
				return ret;
			kid = skip_mods(c->k, mt);
		} else {
			if (!btf_is_array(t))
				return 0;
			kid = skip_mods(c->k, btf_array(t)->type);
		}
	}
	return 1;
}

static int emit(struct cut *c, __u32 kid);

static int emit_shell(struct cut *c, const struct btf_type *t, struct shell *s)
{
	__u32 tid[MAX_FIELDS];
	const char *name = btf__name_by_offset(c->k, t->name_off);
	int id, ret;

	for (int i = 0; s && i < s->nfields; i++) { /* the member types first: a struct's fields follow it */
		if ((ret = emit(c, s->f[i].kid)) < 0)
			return ret;
		tid[i] = (__u32)ret;
	}
	id = btf_is_struct(t) ? btf__add_struct(c->out, name && *name ? name : NULL, t->size)
			      : btf__add_union(c->out, name && *name ? name : NULL, t->size);
	for (int i = 0; id > 0 && s && i < s->nfields; i++)
		if ((ret = btf__add_field(c->out, s->f[i].name, (int)tid[i], s->f[i].bit_off, s->f[i].bit_sz)) < 0)
			return ret;
	return id;
}

static int emit_enum(struct cut *c, const struct btf_type *t)
{
	const char *name = btf__name_by_offset(c->k, t->name_off);
	bool is64 = btf_is_enum64(t);
	int id = is64 ? btf__add_enum64(c->out, *name ? name : NULL, t->size, btf_kflag(t))
		      : btf__add_enum(c->out, *name ? name : NULL, t->size);

	for (int i = 0; id > 0 && i < btf_vlen(t); i++) {
		int ret = is64 ? btf__add_enum64_value(c->out, btf__name_by_offset(c->k, btf_enum64(t)[i].name_off),
						       btf_enum64_value(btf_enum64(t) + i))
			       : btf__add_enum_value(c->out, btf__name_by_offset(c->k, btf_enum(t)[i].name_off),
						     btf_enum(t)[i].val);

		if (ret < 0)
			return ret;
	}
	return id;
}

/* Kernel type kid (modifiers and typedefs skipped) as a type of out, of
 * the same kind and size: returns out's id or a negative errno. */
static int emit(struct cut *c, __u32 kid)
{
	const struct btf_type *t;
	int id = -EINVAL;

	kid = skip_mods(c->k, kid);
	if (!kid)
		return 0;
	for (int i = 0; i < c->ndone; i++)
		if (c->done[i].kid == kid)
			return (int)c->done[i].oid;
	t = btf__type_by_id(c->k, kid);
	switch (btf_kind(t)) {
	case BTF_KIND_INT:
		id = btf__add_int(c->out, btf__name_by_offset(c->k, t->name_off), t->size, btf_int_encoding(t));
		break;
	case BTF_KIND_FLOAT:
		id = btf__add_float(c->out, btf__name_by_offset(c->k, t->name_off), t->size);
		break;
	case BTF_KIND_PTR: /* libbpf bpf_core_fields_are_compat: any pointer matches any */
		id = btf__add_ptr(c->out, 0);
		break;
	case BTF_KIND_ENUM:
	case BTF_KIND_ENUM64:
		id = emit_enum(c, t);
		break;
	case BTF_KIND_ARRAY: {
		int elem = emit(c, btf_array(t)->type);

		if (elem < 0)
			return elem;
		if (!c->index_int && (id = btf__add_int(c->out, "unsigned int", 4, 0)) < 0)
			return id;
		c->index_int = c->index_int ? c->index_int : (__u32)id;
		id = btf__add_array(c->out, (int)c->index_int, elem, btf_array(t)->nelems);
		break;
	}
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION: {
		struct shell *s = NULL;

		for (int i = 0; i < c->nsh; i++)
			if (c->sh[i].kid == kid)
				s = &c->sh[i];
		id = emit_shell(c, t, s); /* not reached through: its size only (a whole struct read) */
		break;
	}
	default:
		snprintf(c->err, c->errlen, "kernel type %u of BTF kind %u read by a relocation", kid, btf_kind(t));
		return -EINVAL;
	}
	if (id > 0 && c->ndone < (int)(sizeof(c->done) / sizeof(c->done[0]))) {
		c->done[c->ndone].kid = kid;
		c->done[c->ndone++].oid = (__u32)id;
	}
	return id;
}

/* .BTF and .BTF.ext of an ELF image */
static int sections(const void *elf, size_t size, Elf_Data **btf, Elf_Data **ext, Elf **e)
{
	size_t shstrndx;
	Elf_Scn *scn = NULL;

	elf_version(EV_CURRENT);
	*btf = *ext = NULL;
	if (!(*e = elf_memory((char *)elf, size)) || elf_getshdrstrndx(*e, &shstrndx))
		return -EINVAL;
	while ((scn = elf_nextscn(*e, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || !(name = elf_strptr(*e, shstrndx, sh.sh_name)))
			continue;
		if (!strcmp(name, ".BTF"))
			*btf = elf_getdata(scn, NULL);
		else if (!strcmp(name, ".BTF.ext"))
			*ext = elf_getdata(scn, NULL);
	}
	return *btf && *ext ? 0 : -EINVAL;
}

/* Every CO-RE relocation of .BTF.ext `ext` followed; returns how many. */
static int follow_all(struct cut *c, const Elf_Data *ext)
{
	const struct ext_header *h = ext->d_buf;
	const char *base, *p, *lim;
	__u32 rec;
	int n = 0;

	if (ext->d_size < sizeof(*h) || h->magic != 0xeB9F || h->hdr_len < sizeof(*h) ||
	    (size_t)h->hdr_len + h->core_relo_off + h->core_relo_len > ext->d_size || h->core_relo_len < 4) {
		snprintf(c->err, c->errlen, "the object's .BTF.ext has no CO-RE relocations or is malformed");
		return -EINVAL;
	}
	base = (const char *)ext->d_buf + h->hdr_len + h->core_relo_off;
	lim = base + h->core_relo_len;
	memcpy(&rec, base, 4);
	if (rec < sizeof(struct bpf_core_relo)) {
		snprintf(c->err, c->errlen, "CO-RE relocation records of %u bytes", rec);
		return -EINVAL;
	}
	for (p = base + 4; p + 8 <= lim;) {
		__u32 num;

		memcpy(&num, p + 4, 4); /* sec_name_off, num_info */
		p += 8;
		if ((size_t)(lim - p) / rec < num) {
			snprintf(c->err, c->errlen, "the object's .BTF.ext is truncated");
			return -EINVAL;
		}
		for (__u32 i = 0; i < num; i++, p += rec) {
			struct bpf_core_relo r;
			int ret;

			memcpy(&r, p, sizeof(r));
			if (r.kind == BPF_CORE_TYPE_ID_LOCAL)
				continue;
			if (r.kind > BPF_CORE_FIELD_RSHIFT_U64) {
				snprintf(c->err, c->errlen, "a CO-RE relocation of kind %d (not a field's)", r.kind);
				return -EINVAL;
			}
			if ((ret = follow(c, r.type_id, btf__name_by_offset(c->local, r.access_str_off))) < 0)
				return ret;
			n++;
		}
	}
	return n;
}

int kernel_btf_cut(const void *elf, size_t size, const struct btf *vmlinux, struct btf **out, char *err,
		   size_t errlen)
{
	struct cut *c = calloc(1, sizeof(*c));
	Elf_Data *bd, *ed;
	Elf *e = NULL;
	struct btf *local = NULL;
	int n, ret = -ENOMEM;

	*out = NULL;
	if (!c)
		goto done;
	if (sections(elf, size, &bd, &ed, &e) < 0) {
		snprintf(err, errlen, "the BPF object has no .BTF or .BTF.ext section");
		ret = -EINVAL;
		goto done;
	}
	if (!(local = btf__new(bd->d_buf, (__u32)bd->d_size))) {
		ret = -errno;
		snprintf(err, errlen, "the BPF object's .BTF: %s", strerror(-ret));
		goto done;
	}
	c->local = local;
	c->k = vmlinux;
	c->err = err;
	c->errlen = errlen;
	if ((n = follow_all(c, ed)) < 0) {
		ret = n;
		goto done;
	}
	if (!(c->out = btf__new_empty())) {
		ret = -errno;
		goto done;
	}
	for (int i = 0; i < c->nsh; i++)
		if ((ret = emit(c, c->sh[i].kid)) < 0) {
			snprintf(err, errlen, "cannot build the kernel types' BTF: %s", strerror(-ret));
			btf__free(c->out);
			goto done;
		}
	*out = c->out;
	ret = n;
done:
	btf__free(local);
	if (e)
		elf_end(e);
	free(c);
	return ret;
}

int kernel_btf_memfd(const void *elf, size_t size, char *err, size_t errlen)
{
	struct btf *k = btf__load_vmlinux_btf(), *cut = NULL;
	const void *raw;
	__u32 len;
	int fd, ret;

	if (!k) {
		ret = -errno;
		snprintf(err, errlen, "cannot read the kernel's BTF: %s", strerror(-ret));
		return ret;
	}
	ret = kernel_btf_cut(elf, size, k, &cut, err, errlen);
	btf__free(k);
	if (ret < 0)
		return ret;
	raw = btf__raw_data(cut, &len);
	fd = raw ? memfd_create("camlheap-kernel-btf", MFD_CLOEXEC | MFD_ALLOW_SEALING) : -1;
	if (fd < 0 || write(fd, raw, len) != (ssize_t)len ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		ret = raw ? -errno : -ENOMEM;
		snprintf(err, errlen, "cannot keep the kernel types' BTF: %s", strerror(-ret));
		if (fd >= 0)
			close(fd);
		btf__free(cut);
		return ret;
	}
	btf__free(cut);
	return fd;
}
