/* malloc_probes.c -- see malloc_probes.h. */
#include "collect/malloc_probes.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Is `base` a libc file name: libc.so.6 or the older libc-2.NN.so? */
static bool is_libc_name(const char *base)
{
	return !strcmp(base, "libc.so.6") || (!strncmp(base, "libc-", 5) && strstr(base, ".so"));
}

/* The libc mapped by `pid`, as a path in its file system, into out. */
int malloc_probes_mapped_libc(pid_t pid, char *out, size_t len)
{
	char path[64], line[4096 + 128];
	FILE *f;
	int ret = -ENOENT;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		char *file = strchr(line, '/'), *nl, *base;

		if (!file)
			continue;
		nl = strchr(file, '\n');
		if (nl)
			*nl = '\0';
		base = strrchr(file, '/') + 1;
		if (is_libc_name(base)) {
			snprintf(out, len, "%s", file);
			ret = 0;
			break;
		}
	}
	fclose(f);
	return ret;
}

/* The value of `name` in pid's environment, "" if unset. */
static void env_value(pid_t pid, const char *name, char *out, size_t len)
{
	char path[64], buf[65536];
	size_t nl = strlen(name);
	ssize_t n;
	int fd;

	out[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(buf + i) + 1) {
		buf[n] = '\0';
		if (!strncmp(buf + i, name, nl) && buf[i + nl] == '=') {
			snprintf(out, len, "%s", buf + i + nl + 1);
			return;
		}
	}
}

/* libc.so.6 in `dir` (a path inside `root`), its glibc-hwcaps
 * subdirectories first (ld.so(8), glibc 2.33+), into out.  Returns 0 or
 * -ENOENT. */
static int libc_in_dir(const char *root, const char *dir, char *out, size_t len)
{
	static const char *const hw[] = { "glibc-hwcaps/x86-64-v4/", "glibc-hwcaps/x86-64-v3/",
					   "glibc-hwcaps/x86-64-v2/", "" };
	char full[2 * PATH_MAX + 64];

	for (size_t i = 0; i < sizeof(hw) / sizeof(hw[0]); i++) {
		snprintf(out, len, "%s/%slibc.so.6", dir, hw[i]);
		snprintf(full, sizeof(full), "%s%s", root, out);
		if (access(full, R_OK) == 0)
			return 0;
	}
	return -ENOENT;
}

/* The first directory of the ':'-separated `dirs` (with $ORIGIN as
 * `origin`; a relative one from `cwd`) holding a readable libc.so.6 under
 * `root`, as a path inside root into out.  Returns 0 or -ENOENT. */
static int search_path(const char *root, const char *dirs, const char *origin, const char *cwd, char *out,
		       size_t len)
{
	char copy[PATH_MAX], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", dirs);
	for (char *d = strtok_r(copy, ":;", &save); d; d = strtok_r(NULL, ":;", &save)) {
		char dir[PATH_MAX];

		if (!strncmp(d, "$ORIGIN", 7))
			snprintf(dir, sizeof(dir), "%s%s", origin, d + 7);
		else if (!strncmp(d, "${ORIGIN}", 9))
			snprintf(dir, sizeof(dir), "%s%s", origin, d + 9);
		else if (d[0] == '/')
			snprintf(dir, sizeof(dir), "%s", d);
		else if (cwd[0])
			snprintf(dir, sizeof(dir), "%s/%s", cwd, d);
		else
			continue;
		if (libc_in_dir(root, dir, out, len) == 0)
			return 0;
	}
	return -ENOENT;
}

/* Launch mode (stopped at exec, nothing but the executable and its
 * loader mapped): the libc.so.6 beside the loader's real path, if the
 * executable needs libc.so.6. */
static int libc_beside_interp(pid_t pid, const struct elf_image *exe, char *out, size_t len)
{
	char root[64], interp[PATH_MAX], full[PATH_MAX + 64], real[PATH_MAX];
	char rpath[PATH_MAX] = "", runpath[PATH_MAX] = "", llp[PATH_MAX] = "", origin[PATH_MAX], cwd[PATH_MAX];
	int fd, ret = -ENOENT;
	Elf *e;
	size_t n = 0;
	bool needs_libc = false;

	snprintf(root, sizeof(root), "/proc/%d/root", pid);
	fd = open(elf_image_path(exe), O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	interp[0] = '\0';
	if (e && elf_getphdrnum(e, &n) == 0) {
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_INTERP && ph.p_filesz < sizeof(interp) &&
			    pread(fd, interp, ph.p_filesz, (off_t)ph.p_offset) == (ssize_t)ph.p_filesz) {
				interp[ph.p_filesz] = '\0';
			}
		}
		Elf_Scn *scn = NULL;

		while ((scn = elf_nextscn(e, scn))) {
			GElf_Shdr sh;
			Elf_Data *d;

			if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC || !(d = elf_getdata(scn, NULL)))
				continue;
			for (size_t k = 0; k < sh.sh_size / (sh.sh_entsize ? sh.sh_entsize : 16); k++) {
				GElf_Dyn dyn;
				const char *name;

				if (!gelf_getdyn(d, (int)k, &dyn) || dyn.d_tag != DT_NEEDED)
					continue;
				name = elf_strptr(e, sh.sh_link, dyn.d_un.d_val);
				if (name && is_libc_name(name))
					needs_libc = true;
			}
			for (size_t k = 0; k < sh.sh_size / (sh.sh_entsize ? sh.sh_entsize : 16); k++) {
				GElf_Dyn dyn;
				const char *v;

				if (!gelf_getdyn(d, (int)k, &dyn) || (dyn.d_tag != DT_RPATH && dyn.d_tag != DT_RUNPATH))
					continue;
				v = elf_strptr(e, sh.sh_link, dyn.d_un.d_val);
				if (v)
					snprintf(dyn.d_tag == DT_RPATH ? rpath : runpath, PATH_MAX, "%s", v);
			}
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	if (!interp[0] || !needs_libc)
		return -ENOENT;
	/* the loader's search order (ld.so(8)): DT_RPATH (without DT_RUNPATH),
	 * LD_LIBRARY_PATH, DT_RUNPATH, then its cache and default directories */
	snprintf(origin, sizeof(origin), "%s", elf_image_path(exe));
	{
		char *sl = strrchr(origin, '/');

		if (sl)
			*sl = '\0';
	}
	env_value(pid, "LD_LIBRARY_PATH", llp, sizeof(llp));
	{
		char cwdlink[64];
		ssize_t cn;

		snprintf(cwdlink, sizeof(cwdlink), "/proc/%d/cwd", pid);
		cn = readlink(cwdlink, cwd, sizeof(cwd) - 1);
		cwd[cn > 0 ? cn : 0] = '\0';
	}
	if (!runpath[0] && search_path(root, rpath, origin, cwd, out, len) == 0)
		return 0;
	if (search_path(root, llp, origin, cwd, out, len) == 0)
		return 0;
	if (search_path(root, runpath, origin, cwd, out, len) == 0)
		return 0;
	/* resolve inside the target's root */
	snprintf(full, sizeof(full), "%s%s", root, interp);
	if (!realpath(full, real))
		return -ENOENT;
	if (strncmp(real, root, strlen(root)) == 0) /* /proc/PID/root is "/" for most: realpath drops it */
		memmove(real, real + strlen(root), strlen(real + strlen(root)) + 1);
	char *slash = strrchr(real, '/');

	if (!slash)
		return -ENOENT;
	slash[1] = '\0';
	snprintf(out, len, "%slibc.so.6", real);
	snprintf(full, sizeof(full), "%s%s", root, out);
	if (access(full, R_OK) == 0)
		return 0;
	/* a loader copied rather than linked (an initramfs): the loader's
	 * default directories, in its search order (ld.so(8)) */
	static const char *const dirs[] = { "/lib/x86_64-linux-gnu/", "/usr/lib/x86_64-linux-gnu/", "/lib64/",
					    "/usr/lib64/", "/lib/", "/usr/lib/" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(out, len, "%slibc.so.6", dirs[i]);
		snprintf(full, sizeof(full), "%s%s", root, out);
		if (access(full, R_OK) == 0)
			return 0;
	}
	return ret;
}

/* One instruction the entry probe may be moved past: it changes neither
 * rsp nor the argument registers (rdi, rsi, rdx, rcx) nor control flow.
 * test reg,reg / test $imm32,reg; cmp $imm8, disp32(%rip) (byte or
 * quad); mov reg,reg into a non-argument register; mov $imm32,%eax..  into
 * a non-argument register.  Returns its length or 0. */
static unsigned libc_step_over(const uint8_t *c, size_t len)
{
	unsigned rex = 0, i = 0;

	if (len < 2)
		return 0;
	if ((c[0] & 0xf0) == 0x40) {
		rex = c[0];
		i = 1;
	}
	uint8_t op = c[i], modrm = len > i + 1 ? c[i + 1] : 0;
	unsigned mod = modrm >> 6, reg = ((modrm >> 3) & 7) | ((rex & 4) ? 8 : 0), rm = (modrm & 7) | ((rex & 1) ? 8 : 0);

	if (op == 0x85 && mod == 3) /* test r, r */
		return i + 2;
	if (op == 0xf7 && mod == 3 && ((modrm >> 3) & 7) == 0) /* test $imm32, r */
		return i + 6 <= len ? i + 6 : 0;
	if (op == 0x80 && modrm == 0x3d && ((modrm >> 3) & 7) == 7) /* cmpb $imm8, disp32(%rip) */
		return i + 7 <= len ? i + 7 : 0;
	if (op == 0x83 && modrm == 0x3d) /* cmp $imm8, disp32(%rip) */
		return i + 7 <= len ? i + 7 : 0;
	if (op == 0x89 && mod == 3) { /* mov reg -> rm */
		(void)reg;
		if (rm == 7 || rm == 6 || rm == 2 || rm == 1 || rm == 4)
			return 0;
		return i + 2;
	}
	if (op >= 0xb8 && op <= 0xbf && !(rex & 8)) { /* mov $imm32, r32 */
		unsigned r = (op - 0xb8) | ((rex & 1) ? 8 : 0);

		if (r == 7 || r == 6 || r == 2 || r == 1 || r == 4)
			return 0;
		return i + 5 <= len ? i + 5 : 0;
	}
	return 0;
}

/* The executable PT_LOAD segment of the ELF file at `path` (link-time
 * [lo, hi)); 0, 0 if unreadable. */
static void libc_text(const char *path, uint64_t *lo, uint64_t *hi)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;
	size_t n = 0;

	*lo = *hi = 0;
	if (fd < 0)
		return;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (e && elf_getphdrnum(e, &n) == 0)
		for (size_t i = 0; i < n; i++) {
			GElf_Phdr ph;

			if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && !*hi) {
				*lo = ph.p_vaddr;
				*hi = ph.p_vaddr + ph.p_memsz;
			}
		}
	if (e)
		elf_end(e);
	close(fd);
}

static int plan_fn(const struct elf_image *img, unsigned fn, struct malloc_probe *mp)
{
	const struct elf_symbol *sym = elf_image_symbol(img, ch_malloc_fn_name(fn));
	const uint8_t *code;
	unsigned off = 0;

	memset(mp, 0, sizeof(*mp));
	mp->symbol = ch_malloc_fn_name(fn);
	if (!sym || !sym->vaddr)
		return -ENOENT;
	code = elf_image_data(img, sym->vaddr, 32);
	if (code) {
		for (int step = 0; step < 4 && off < 24; step++) {
			if (ocaml_runtime_insn_emulated(code + off, 32 - off)) {
				mp->emulated = true;
				break;
			}
			unsigned n = libc_step_over(code + off, 32 - off);

			if (!n)
				break;
			off += n;
		}
		if (!mp->emulated)
			off = 0;
	}
	/* nothing skipped touches rsp: the return address is still at
	 * (%rsp), so the uretprobe can share the entry's spot */
	mp->vaddr = sym->vaddr + off;
	if (elf_image_vaddr_to_offset(img, sym->vaddr + off, &mp->file_offset) < 0)
		return -ERANGE;
	if (fn < CH_MFN__ALLOCS)
		mp->ret_offset = mp->file_offset;
	mp->present = true;
	return 0;
}

static void add_range(struct malloc_probes *mp, const struct elf_image *exe, const char *name)
{
	const struct elf_symbol *s = elf_image_symbol(exe, name);

	if (!s || !s->vaddr || !s->size || mp->n_rt_mem >= CH_RT_MEM_RANGES)
		return;
	mp->rt_mem_lo[mp->n_rt_mem] = s->vaddr;
	mp->rt_mem_hi[mp->n_rt_mem] = s->vaddr + s->size;
	mp->rt_mem_names[mp->n_rt_mem] = name;
	mp->n_rt_mem++;
}

/* A stripped executable has no symbol for the runtime's static
 * realloc_generic_table (runtime/minor_gc.c), which first allocates the
 * minor heap's remembered sets: find it as the target of the jump or call
 * in caml_realloc_ref_table (in .dynsym: OCaml executables export their
 * globals), a function no symbol covers; it ends at the next symbol. */
static void add_unnamed_table_range(struct malloc_probes *mp, const struct elf_image *exe)
{
	const struct elf_symbol *f = elf_image_symbol(exe, "caml_realloc_ref_table");
	const uint8_t *code;
	uint64_t n = elf_image_symbol_count(exe);

	if (!f || !f->size || mp->n_rt_mem >= CH_RT_MEM_RANGES || !(code = elf_image_data(exe, f->vaddr, f->size)))
		return;
	for (uint64_t i = 0; i + 5 <= f->size; i++) {
		int32_t rel;
		uint64_t target, end = UINT64_MAX;
		const struct elf_symbol *at;

		if (code[i] != 0xe9 && code[i] != 0xe8)
			continue;
		memcpy(&rel, code + i + 1, 4);
		target = f->vaddr + i + 5 + (int64_t)rel;
		if (!elf_image_is_code(exe, target) || (target >= f->vaddr && target < f->vaddr + f->size))
			continue;
		at = elf_image_function_at(exe, target);
		if (at && (at->vaddr == target || target < at->vaddr + at->size))
			continue; /* a named function (or a false match inside one) */
		for (uint64_t k = 0; k < n; k++) {
			const struct elf_symbol *sy = elf_image_symbol_nth(exe, k);

			if (sy && sy->vaddr > target && sy->vaddr < end)
				end = sy->vaddr;
		}
		if (end == UINT64_MAX || end - target > 4096)
			continue;
		mp->rt_mem_lo[mp->n_rt_mem] = target;
		mp->rt_mem_hi[mp->n_rt_mem] = end;
		mp->rt_mem_names[mp->n_rt_mem] = "realloc_generic_table (unnamed)";
		mp->n_rt_mem++;
		return;
	}
}

int malloc_probes_plan(pid_t pid, const struct elf_image *exe, const struct ocaml_runtime *rt,
		       struct malloc_probes *mp, char *err, size_t errlen)
{
	struct elf_image *img = NULL;
	int ret;

	memset(mp, 0, sizeof(*mp));
	ret = malloc_probes_mapped_libc(pid, mp->shown, sizeof(mp->shown));
	if (ret < 0)
		ret = libc_beside_interp(pid, exe, mp->shown, sizeof(mp->shown));
	if (ret < 0) {
		snprintf(err, errlen,
			 "--malloc: PID %d maps no libc.so.6 and its executable links none dynamically "
			 "(a static executable?): there is no malloc to probe; record without --malloc",
			 pid);
		return -ENOENT;
	}
	snprintf(mp->path, sizeof(mp->path), "/proc/%d/root%s", pid, mp->shown);
	ret = elf_image_open(mp->path, &img);
	if (ret < 0) {
		snprintf(err, errlen, "--malloc: cannot read %s (PID %d's libc): %s", mp->shown, pid, strerror(-ret));
		return ret;
	}
	for (unsigned f = 0; f < CH_MFN__COUNT; f++) {
		plan_fn(img, f, &mp->fn[f]);
		/* an alias of a function already planned (aligned_alloc is
		 * memalign in some glibc builds): one probe per address */
		for (unsigned g = 0; g < f && mp->fn[f].present; g++)
			if (mp->fn[g].present && mp->fn[g].file_offset == mp->fn[f].file_offset)
				mp->fn[f].present = false;
	}
	elf_image_close(img);
	mp->mmap_vaddr = mp->fn[CH_MFN_MMAP].present ? mp->fn[CH_MFN_MMAP].vaddr : 0;
	libc_text(mp->path, &mp->libc_text_lo, &mp->libc_text_hi);
	if (!mp->fn[CH_MFN_MALLOC].present || !mp->fn[CH_MFN_FREE].present) {
		snprintf(err, errlen, "--malloc: %s (PID %d's libc) has no malloc or free symbol: not glibc?", mp->shown,
			 pid);
		return -ENOEXEC;
	}
	if (rt->ba_ops_sym)
		add_range(mp, exe, "caml_ba_alloc");
	/* the GC's tables sized after the minor heap (ref, custom, ephemeron
	 * remembered sets; runtime/minor_gc.c) */
	add_range(mp, exe, "caml_alloc_table");
	add_range(mp, exe, "caml_alloc_minor_tables");
	{
		unsigned before = mp->n_rt_mem;

		add_range(mp, exe, "realloc_generic_table");
		add_range(mp, exe, "realloc_generic_table.constprop.0");
		if (mp->n_rt_mem == before)
			add_unnamed_table_range(mp, exe);
	}
	if (rt->major == 4) {
		add_range(mp, exe, "caml_alloc_for_heap");
		add_range(mp, exe, "caml_stat_alloc_aligned_noexc");
		add_range(mp, exe, "caml_alloc_custom_table");
		add_range(mp, exe, "caml_alloc_ephe_table");
		/* the page table, sized after the major heap (runtime/memory.c) */
		add_range(mp, exe, "caml_page_table_initialize");
		add_range(mp, exe, "caml_page_table_modify");
	} else {
		add_range(mp, exe, "caml_shared_try_alloc");
		add_range(mp, exe, "caml_plat_mem_map");
		add_range(mp, exe, "caml_plat_mem_commit");
		add_range(mp, exe, "caml_plat_mem_decommit");
		add_range(mp, exe, "caml_mem_map");
	}
	return 0;
}
