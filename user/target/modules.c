/* modules.c -- see modules.h. */
#define _GNU_SOURCE
#include "target/modules.h"
#include "camlheap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

struct maps_line {
	uint64_t start, end, offset, dev, ino;
	char perms[8];
	char path[4096];
};

static int maps_parse(const char *line, struct maps_line *m)
{
	unsigned long long start, end, off, ino;
	unsigned maj, min;
	int n = 0;

	m->path[0] = '\0';
	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, m->perms, &off, &maj, &min, &ino, &n) < 7)
		return -1;
	m->start = start;
	m->end = end;
	m->offset = off;
	m->dev = makedev(maj, min);
	m->ino = ino;
	if (n > 0) {
		snprintf(m->path, sizeof(m->path), "%s", line + n);
		m->path[strcspn(m->path, "\n")] = '\0';
	}
	return 0;
}

static int range_cmp(const void *a, const void *b)
{
	const struct module_range *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static int add_range(struct modules *ms, uint64_t start, uint64_t end, size_t module)
{
	struct module_range *r = realloc(ms->ranges, (ms->nranges + 1) * sizeof(*r));

	if (!r)
		return -ENOMEM;
	ms->ranges = r;
	r[ms->nranges++] = (struct module_range){ .start = start, .end = end, .module = module };
	return 0;
}

static struct module *push_module(struct modules *ms)
{
	struct module *v = realloc(ms->v, (ms->n + 1) * sizeof(*v));

	if (!v)
		return NULL;
	ms->v = v;
	memset(&v[ms->n], 0, sizeof(v[ms->n]));
	return &v[ms->n++];
}

/* Record every mapping of (dev, ino) in `pid` as a range of module `idx`. */
static int add_mappings(struct modules *ms, pid_t pid, size_t idx)
{
	char path[64], line[8192];
	struct maps_line m;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -ESRCH;
	while (fgets(line, sizeof(line), f))
		if (maps_parse(line, &m) == 0 && m.dev == ms->v[idx].dev && m.ino == ms->v[idx].ino)
			add_range(ms, m.start, m.end, idx);
	fclose(f);
	qsort(ms->ranges, ms->nranges, sizeof(*ms->ranges), range_cmp);
	return 0;
}

/* Now, while the process lives: the image may have been opened through
 * /proc/PID/exe or map_files, where libdwfl finds the file (and its DWARF)
 * only as long as the process exists. */
static void open_symbolizer(struct module *m)
{
	if (symbolizer_open(m->img, m->ft, &m->sym) < 0)
		m->sym = NULL;
}

int modules_add_exe(struct modules *ms, pid_t pid, struct elf_image *img, struct frametable *ft, uint64_t bias)
{
	char path[64];
	struct stat st;
	struct module *m;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (stat(path, &st) < 0)
		return -ESRCH;
	m = push_module(ms);
	if (!m)
		return -ENOMEM;
	m->path = strdup(elf_image_path(img));
	m->img = img;
	m->ft = ft;
	m->bias = bias;
	m->dev = st.st_dev;
	m->ino = st.st_ino;
	m->is_exe = true;
	open_symbolizer(m);
	return add_mappings(ms, pid, ms->n - 1);
}

static bool known(const struct modules *ms, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < ms->n; i++)
		if (ms->v[i].dev == dev && ms->v[i].ino == ino)
			return true;
	return false;
}

/* Open the mapped file itself: /proc/PID/map_files works even when the
 * path was deleted or replaced since it was mapped. */
static int open_mapped(pid_t pid, const struct maps_line *m, struct elf_image **img)
{
	char mf[128];

	snprintf(mf, sizeof(mf), "/proc/%d/map_files/%llx-%llx", (int)pid, (unsigned long long)m->start,
		 (unsigned long long)m->end);
	int ret = elf_image_open(mf, img);

	if (ret == 0 || ret == -EMFILE || ret == -ENFILE || ret == -ENOMEM)
		return ret;
	return elf_image_open(m->path, img);
}

int modules_scan(struct modules *ms, pid_t pid, void (*fn)(void *ctx, const struct module *m), void *ctx)
{
	char path[64], line[8192];
	struct maps_line m;
	int added = 0, transient = 0, lines = 0, ret;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "r");
	if (!f) {
		if (errno == ENOENT)
			return -ESRCH;
		ms->unreadable = ms->unreadable ? ms->unreadable : 1; /* at least the maps */
		return -EAGAIN;
	}
	while (fgets(line, sizeof(line), f)) {
		struct elf_image *img = NULL;
		struct frametable *ft = NULL;
		uint64_t off, vaddr;
		struct module *mod;

		lines++;
		/* a module is discovered at its first mapping (file offset 0);
		 * known files, anonymous and special mappings are skipped */
		if (maps_parse(line, &m) < 0 || m.path[0] != '/' || m.ino == 0 || m.offset != 0 ||
		    known(ms, m.dev, m.ino))
			continue;
		ret = open_mapped(pid, &m, &img);
		if (ret < 0) {
			/* out of fds or memory: not a verdict, try at the next scan */
			if (ret == -EMFILE || ret == -ENFILE || ret == -ENOMEM) {
				transient++;
				continue;
			}
			goto not_ocaml;
		}
		if (frametable_load_units(img, &ft) < 0 || elf_image_first_load(img, &off, &vaddr) < 0 || off != 0)
			goto not_ocaml;
		ft->dbg52 = ms->dbg52;
		mod = push_module(ms);
		if (!mod)
			goto not_ocaml;
		mod->path = strdup(m.path);
		mod->img = img;
		mod->ft = ft;
		mod->bias = m.start - vaddr;
		mod->dev = m.dev;
		mod->ino = m.ino;
		open_symbolizer(mod);
		add_mappings(ms, pid, ms->n - 1);
		added++;
		if (fn)
			fn(ctx, mod);
		continue;
not_ocaml:
		/* remember it (no frame table, no image) so that it is not
		 * opened again at the next scan */
		frametable_free(ft);
		elf_image_close(img);
		mod = push_module(ms);
		if (mod) {
			mod->dev = m.dev;
			mod->ino = m.ino;
		}
	}
	fclose(f);
	if (lines) /* a zombie's maps are empty: that says nothing */
		ms->unreadable = transient;
	return transient ? -EAGAIN : added;
}

const struct module *modules_find(const struct modules *ms, uint64_t pc)
{
	size_t lo = 0, hi = ms->nranges;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ms->ranges[mid].end <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < ms->nranges && ms->ranges[lo].start <= pc && pc < ms->ranges[lo].end)
		return &ms->v[ms->ranges[lo].module];
	return NULL;
}

int modules_lookup(struct modules *ms, uint64_t pc, unsigned alloc_idx, struct sym_frame *out, int max)
{
	struct module *m = (struct module *)modules_find(ms, pc);
	static char buf[32][24];
	static unsigned next;

	if (ms->recorded_lookup)
		return ms->recorded_lookup(ms->recorded_ctx, pc, alloc_idx, out, max);
	if (pc >= CH_PSEUDO_PC_BASE && pc < CH_PSEUDO_PC_BASE + CH_MFN__COUNT && max >= 1) {
		/* --malloc: the probed libc function, the leaf of its samples */
		memset(out, 0, sizeof(*out));
		out->function = ch_malloc_fn_name((unsigned)(pc - CH_PSEUDO_PC_BASE));
		out->file = "libc";
		return 1;
	}
	if (m && m->img) {
		if (m->sym)
			return symbolizer_lookup(m->sym, pc - m->bias, alloc_idx, out, max, NULL);
	}
	if (max < 1)
		return 0;
	/* not in any OCaml module: a raw address (ring of buffers so that a
	 * caller may hold several at once) */
	char *b = buf[next++ % 32];

	snprintf(b, sizeof(buf[0]), "0x%llx", (unsigned long long)pc);
	memset(out, 0, sizeof(*out));
	out->function = b;
	return 1;
}

void modules_free(struct modules *ms)
{
	for (size_t i = 0; i < ms->n; i++) {
		symbolizer_close(ms->v[i].sym);
		frametable_free(ms->v[i].ft);
		elf_image_close(ms->v[i].img);
		free(ms->v[i].path);
	}
	free(ms->v);
	free(ms->ranges);
	memset(ms, 0, sizeof(*ms));
}
