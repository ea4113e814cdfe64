/* roots4.c -- the roots of a stopped 4.x program, by group (trace4.h), as
 * 4.14.2 runtime/roots_nat.c caml_do_roots lists them. */
#define _GNU_SOURCE
#include "heap/trace4_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include "camlheap.h"
#include "target/symbolize.h"

#define MAX_MODULES 100000
/* groups kept for what comes after the modules (threads, frames, minor
 * heap, ephemerons), and after the frames */
#define AFTER_MODULES 48
#define AFTER_FRAMES 4
#define MAX_LIST 10000000   /* cells of a root list followed at most */

static int sym(struct tracer *tr, const char *name, uint64_t *addr)
{
	const struct elf_symbol *s = elf_image_symbol(tr->t->img, name);

	if (!s)
		return -ENOENT;
	*addr = s->vaddr + tr->t->bias;
	return 0;
}

static void say_not_read(struct tracer *tr, const char *what)
{
	size_t n = strlen(tr->r->not_read);

	snprintf(tr->r->not_read + n, sizeof(tr->r->not_read) - n, "%s%s", n ? "; " : "", what);
}

/* The fields of the static block v (a module's global data) as roots;
 * with block >= 0 (the block's place in its unit's list), each field into
 * the major heap under a field label of its own (tracer_field). */
static int block_fields(struct tracer *tr, unsigned label, uint64_t v, int block)
{
	uint64_t hd, f[512];

	if (tracer_read(tr, v - 8, &hd, 8))
		return -EFAULT;
	for (uint64_t i = 0; i < hd >> 10; i += 512) {
		uint64_t n = (hd >> 10) - i < 512 ? (hd >> 10) - i : 512;

		if (tracer_read(tr, v + 8 * i, f, 8 * n))
			return -EFAULT;
		for (uint64_t k = 0; k < n; k++)
			tracer_root(tr, block < 0 ? label : tracer_field(tr, label, (uint32_t)block, (uint32_t)(i + k), f[k]),
				    f[k], true);
	}
	return 0;
}

/* "camlStdlib__Hashtbl__gc_roots" -> "Stdlib.Hashtbl" (4.12 keeps the
 * file's case, "camlStdlib__sys": module names are capitalised) */
static void module_name(const char *symname, char *out, size_t len)
{
	const char *s = symname + 4, *end = strstr(s, "__gc_roots");
	size_t n = 0;
	bool first = true;

	for (; *s && s != end && n + 1 < len; s++) {
		if (s[0] == '_' && s[1] == '_') {
			out[n++] = '.';
			s++;
			first = true;
		} else {
			out[n++] = first && *s >= 'a' && *s <= 'z' ? (char)(*s - 'a' + 'A') : *s;
			first = false;
		}
	}
	out[n] = 0;
}

/* caml_globals: NULL-terminated, each entry a unit's NULL-terminated list
 * of global blocks (its `camlM__gc_roots`); a group a unit, named from
 * that symbol. */
static int module_globals(struct tracer *tr)
{
	uint64_t globals, unit, v, bias = tr->t->bias;
	size_t nsym = elf_image_symbol_count(tr->t->img), nroots = 0;
	const struct elf_symbol **roots;

	if (sym(tr, "caml_globals", &globals)) {
		say_not_read(tr, "module globals (no symbol caml_globals)");
		return 0;
	}
	roots = calloc(nsym + 1, sizeof(*roots));
	if (!roots)
		return -ENOMEM;
	for (size_t k = 0; k < nsym; k++) {
		const struct elf_symbol *s = elf_image_symbol_nth(tr->t->img, k);

		if (strstr(s->name, "__gc_roots"))
			roots[nroots++] = s;
	}
	for (unsigned i = 0; i < MAX_MODULES; i++) {
		char name[96] = "", mod[80];
		unsigned label;

		if (tracer_read(tr, globals + 8 * i, &unit, 8))
			goto fault;
		if (!unit)
			break;
		for (size_t k = 0; k < nroots && !name[0]; k++)
			if (roots[k]->vaddr + bias == unit) {
				module_name(roots[k]->name, mod, sizeof(mod));
				snprintf(name, sizeof(name), "global %s", mod);
			}
		if (!name[0])
			snprintf(name, sizeof(name), "global data of unit %u", i);
		if (tr->r->ngroups < TRACE4_MAX_GROUPS - AFTER_MODULES)
			label = tracer_group(tr, name, false);
		else if (!(label = tr->more_modules))
			label = tr->more_modules = tracer_group(tr, "global data of further modules", false);
		for (unsigned j = 0; j < MAX_MODULES; j++) {
			if (tracer_read(tr, unit + 8 * j, &v, 8))
				goto fault;
			if (!v)
				break;
			if (block_fields(tr, label, v, label == tr->more_modules ? -1 : (int)j))
				goto fault;
		}
	}
	free(roots);
	return 0;
fault:
	free(roots);
	return -EFAULT;
}

/* roots_nat.c's static `caml_dyn_globals`: a list of {data, next}, each
 * data a NULL-terminated list of global blocks */
static int dyn_globals(struct tracer *tr)
{
	uint64_t head, cell[2], v;
	unsigned label = 0, n = 0;

	if (sym(tr, "caml_dyn_globals", &head)) {
		if (elf_image_symbol(tr->t->img, "caml_natdynlink_run"))
			say_not_read(tr, "Dynlink'd modules' globals (.symtab stripped)");
		return 0;
	}
	if (tracer_read(tr, head, &cell[1], 8))
		return -EFAULT;
	while (cell[1] && n++ < MAX_MODULES) {
		if (tracer_read(tr, cell[1], cell, 16))
			return -EFAULT;
		if (!label)
			label = tracer_group(tr, "global data of Dynlink'd modules", false);
		for (unsigned j = 0; j < MAX_MODULES; j++) {
			if (tracer_read(tr, cell[0] + 8 * j, &v, 8))
				return -EFAULT;
			if (!v)
				break;
			if (block_fields(tr, label, v, -1))
				return -EFAULT;
		}
	}
	return 0;
}

/* globroots.c's skip lists (runtime/caml/skiplist.h: struct skiplist
 * {forward[]; level}, struct skipcell {key, data, forward[]}): each key
 * the address of a registered root */
static int global_roots(struct tracer *tr)
{
	static const char *const lists[] = { "caml_global_roots", "caml_global_roots_young",
					     "caml_global_roots_old" };
	unsigned label = tracer_group(tr, "C global roots (caml_register_global_root)", false);

	for (unsigned l = 0; l < 3; l++) {
		uint64_t list, cell, kd[3], v;
		unsigned n = 0;

		if (sym(tr, lists[l], &list))
			continue;
		if (tracer_read(tr, list, &cell, 8))
			return -EFAULT;
		while (cell && n++ < MAX_LIST) {
			if (tracer_read(tr, cell, kd, 24))
				return -EFAULT;
			if (tracer_read(tr, kd[0], &v, 8) == 0)
				tracer_root(tr, label, v, true);
			cell = kd[2];
		}
	}
	return 0;
}

/* finalise.c: the closures of Gc.finalise (struct finalisable {table,
 * old, young, size}, struct final {fun, val, offset}: the values are not
 * roots until due) and, in the to-do list (struct to_do {next, size,
 * item[]}), the closures and values due */
static int finalisers(struct tracer *tr)
{
	static const char *const tables[] = { "finalisable_first", "finalisable_last" };
	unsigned label = 0;
	uint64_t a, f[4], item[3], todo;
	bool any = false;

	for (unsigned k = 0; k < 2; k++) {
		if (sym(tr, tables[k], &a))
			continue;
		any = true;
		if (tracer_read(tr, a, f, 32))
			return -EFAULT;
		for (uint64_t i = 0; i < f[2] && i < MAX_LIST; i++) {
			if (tracer_read(tr, f[0] + 24 * i, item, 24))
				return -EFAULT;
			if (!label)
				label = tracer_group(tr, "finalisers (Gc.finalise closures)", false);
			tracer_root(tr, label, item[0], true);
		}
	}
	if (!sym(tr, "to_do_hd", &a) && !tracer_read(tr, a, &todo, 8)) {
		for (unsigned n = 0; todo && n < MAX_LIST; n++) {
			uint64_t hd[2];

			if (tracer_read(tr, todo, hd, 16))
				return -EFAULT;
			for (uint64_t i = 0; i < (uint32_t)hd[1]; i++) {
				if (tracer_read(tr, todo + 16 + 24 * i, item, 24))
					return -EFAULT;
				if (!label)
					label = tracer_group(tr, "finalisers (Gc.finalise closures)", false);
				tracer_root(tr, label, item[0], true);
				tracer_root(tr, label, item[1], true);
			}
			todo = hd[0];
		}
	}
	if (!any)
		say_not_read(tr, "finalisers (.symtab stripped)");
	return 0;
}

/* The mapping of /proc/PID/maps holding `addr`: its end, and whether the
 * executable (inode) maps it writable; 0 if none. */
static uint64_t mapping_end(pid_t pid, uint64_t addr)
{
	char path[64], line[512];
	uint64_t end = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;

		if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && addr >= lo && addr < hi) {
			end = hi;
			break;
		}
	}
	fclose(f);
	return end;
}

/* The executable's writable mappings and the anonymous one right after
 * them (.bss): where module data and static blocks lie. */
static void data_range(struct tracer *tr)
{
	char path[64], line[512];
	uint64_t prev_end = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)tr->pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off, ino;
		char perms[8];
		unsigned dmaj, dmin;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu", &lo, &hi, perms, &off, &dmaj, &dmin, &ino) != 7)
			continue;
		if (ino == (unsigned long long)tr->t->exe_st.st_ino && perms[1] == 'w') {
			if (!tr->data_lo)
				tr->data_lo = lo;
			tr->data_hi = hi;
			prev_end = hi;
		} else if (ino == 0 && prev_end && lo == prev_end && perms[1] == 'w') {
			tr->data_hi = hi;
			prev_end = 0;
		} else {
			prev_end = 0;
		}
	}
	fclose(f);
}

/* Every word from `lo` to `hi` that points to a live block, as a root of
 * `label` (conservative). */
static int scan_range(struct tracer *tr, unsigned label, uint64_t lo, uint64_t hi)
{
	uint64_t buf[8192];

	lo &= ~7ull;
	while (lo < hi) {
		uint64_t n = (hi - lo) / 8 < 8192 ? (hi - lo) / 8 : 8192;

		if (tracer_read(tr, lo, buf, 8 * n))
			return -EFAULT;
		for (uint64_t k = 0; k < n; k++)
			tracer_root(tr, label, buf[k], false);
		lo += 8 * n;
	}
	return 0;
}

/* The roots in the OCaml frames of a thread stopped in a C call, exactly
 * as 4.14.2 runtime/roots_nat.c caml_do_local_roots_nat walks them: from
 * Caml_state's bottom_of_stack and last_return_address, each frame's live
 * stack slots from its descriptor, up across callbacks (a 0xFFFF
 * descriptor: struct caml_context at sp + 16 gives the next OCaml
 * chunk; the C frames between are scanned conservatively under `cgroup`).
 * A group a function: "stack Module.fn".  Returns 0, -ENOENT if a return
 * address has no descriptor or a live slot is a register (then the caller
 * scans the rest conservatively from *sp), or -EFAULT. */
static int ocaml_frames(struct tracer *tr, unsigned cgroup, uint64_t *sp, uint64_t ra, uint64_t end)
{
	const struct frametable *ft = tr->t->ft;
	uint64_t bias = tr->t->bias, frame[512];

	for (unsigned n = 0; n < 1000000 && *sp < end; n++) {
		const struct frame_descr *d = frametable_find(ft, ra - bias);
		uint16_t nlive, ofs[256];
		uint64_t fs, ctx[2];
		char name[96], fn[80];
		unsigned label;

		if (!d)
			return -ENOENT;
		if (d->frame_size == 0xFFFF) {
			if (tracer_read(tr, *sp + CH_OCAML4_CALLBACK_LINK, ctx, 16))
				return -EFAULT;
			if (!ctx[0])
				return 0;
			if (ctx[0] < *sp || ctx[0] > end)
				return -ENOENT;
			if (scan_range(tr, cgroup, *sp, ctx[0]))
				return -EFAULT;
			*sp = ctx[0];
			ra = ctx[1];
			continue;
		}
		fs = d->frame_size & 0xFFFC;
		if (elf_image_read(tr->t->img, d->descr_vaddr + 10, &nlive, 2) || nlive > 256 || fs > sizeof(frame) ||
		    elf_image_read(tr->t->img, d->descr_vaddr + 12, ofs, 2u * nlive) || tracer_read(tr, *sp, frame, fs))
			return -ENOENT;
		symbolize_demangle(elf_image_function_at(tr->t->img, ra - bias) ?
					   elf_image_function_at(tr->t->img, ra - bias)->name : "?",
				   fn, sizeof(fn));
		snprintf(name, sizeof(name), "stack %s", fn);
		label = 0;
		for (unsigned g = tr->stack_groups0; g < tr->r->ngroups && !label; g++)
			if (!strcmp(tr->r->groups[g].name, name))
				label = g + 1;
		for (unsigned k = 0; k < nlive; k++) {
			if ((ofs[k] & 1) || ofs[k] >= fs)
				return -ENOENT; /* a register: only at a GC entry, never kept */
			if (!label && frame[ofs[k] / 8] && !(frame[ofs[k] / 8] & 1)) {
				if (tr->r->ngroups < TRACE4_MAX_GROUPS - AFTER_FRAMES)
					label = tracer_group(tr, name, false);
				else if (!(label = tr->more_frames))
					label = tr->more_frames = tracer_group(tr, "stack, further functions", false);
			}
			if (label)
				tracer_root(tr, label, frame[ofs[k] / 8], true);
		}
		*sp += fs;
		if (tracer_read(tr, *sp - 8, &ra, 8))
			return -EFAULT;
	}
	return 0;
}

#define MAX_CONTEXTS 4096

/* Where threads' OCaml stacks start: Caml_state's bottom_of_stack and
 * last_return_address (the thread that last entered C), and with
 * systhreads each thread's saved copy (4.12.1 to 4.14.2
 * otherlibs/systhreads/st_stubs.c struct caml_thread_struct: descr,
 * next, prev, top_of_stack, bottom_of_stack, last_retaddr, ...,
 * backtrace_last_exn at 96; `all_threads` a ring through next,
 * `curr_thread` whose copy Caml_state supersedes).  The descriptors and
 * their last exceptions are roots (exact). */
static int stack_contexts(struct tracer *tr, uint64_t state, uint64_t (*ctx)[2], size_t *n)
{
	uint64_t all, cur, th, f[13];
	unsigned label = 0;

	if (tracer_read(tr, state + CH_OCAML4_BOTTOM_OF_STACK, ctx[0], 16))
		return -EFAULT;
	*n = 1;
	if (sym(tr, "all_threads", &all) || sym(tr, "curr_thread", &cur) || tracer_read(tr, all, &all, 8) ||
	    tracer_read(tr, cur, &cur, 8) || !all) {
		if (elf_image_symbol(tr->t->img, "caml_thread_initialize") && tr->fz->ntids > 1)
			say_not_read(tr, "systhreads' saved stacks (.symtab stripped: their stacks scanned whole)");
		return 0;
	}
	th = all;
	do {
		if (tracer_read(tr, th, f, sizeof(f)))
			return -EFAULT;
		if (!label)
			label = tracer_group(tr, "systhreads' descriptors (Thread.t)", false);
		tracer_root(tr, label, f[0], true);
		tracer_root(tr, label, f[12], true);
		if (th != cur && f[4] && *n < MAX_CONTEXTS) {
			ctx[*n][0] = f[4];
			ctx[*n][1] = f[5];
			(*n)++;
		}
		th = f[1];
	} while (th && th != all && *n < MAX_CONTEXTS);
	return 0;
}

/* Each thread's registers and stack, up to the end of its stack's
 * mapping.  A thread stopped in a C call whose OCaml stack a context
 * describes (the context's bottom_of_stack in its stack, its
 * last_return_address the thread's first OCaml return address): its C
 * frames and registers conservatively, from the stack pointer (less the
 * 128-byte red zone) to bottom_of_stack, its OCaml frames exactly
 * (ocaml_frames).  Any other thread (in OCaml code, or undescribed)
 * conservatively whole.  Then the minor heap's allocated part if it was
 * not indexed, from the lowest young_ptr (Caml_state's, or r15 where a
 * thread runs OCaml code: 4.x amd64 keeps young_ptr there) to
 * young_alloc_end. */
static int threads_and_minor(struct tracer *tr, uint64_t state, const uint64_t young[4], uint64_t ylo)
{
	static uint64_t ctx[MAX_CONTEXTS][2];
	size_t nctx;
	int ret;

	if ((ret = stack_contexts(tr, state, ctx, &nctx)))
		return ret;
	tr->stack_groups0 = tr->r->ngroups;
	for (size_t i = 0; i < tr->fz->ntids; i++) {
		struct user_regs_struct regs;
		const uint64_t *c = NULL;
		char name[96];
		unsigned label;
		uint64_t end, sp;

		if (ptrace(PTRACE_GETREGS, tr->fz->tids[i], 0, &regs) < 0)
			continue;
		end = mapping_end(tr->pid, regs.rsp);
		for (size_t k = 0; k < nctx && !c; k++)
			if (tr->fz->first_ra[i] > FREEZE_IN_OCAML && tr->fz->first_ra[i] == ctx[k][1] &&
			    ctx[k][0] > regs.rsp && ctx[k][0] < end)
				c = ctx[k];
		snprintf(name, sizeof(name), "%s of thread %d%s", c ? "C frames and registers" : "stack and registers",
			 (int)tr->fz->tids[i], tr->fz->tids[i] == tr->pid ? " (main)" : "");
		label = tracer_group(tr, name, true);
		for (size_t k = 0; k < sizeof(regs) / 8; k++)
			tracer_root(tr, label, ((uint64_t *)&regs)[k], false);
		sp = regs.rsp > 128 ? regs.rsp - 128 : regs.rsp;
		if (c) {
			if (scan_range(tr, label, sp, c[0]))
				return -EFAULT;
			sp = c[0];
			ret = ocaml_frames(tr, label, &sp, c[1], end);
			if (ret == -EFAULT)
				return ret;
			if (ret) /* the rest of its stack scanned whole */
				snprintf(tr->r->groups[label - 1].name, sizeof(tr->r->groups[0].name),
					 "stack and registers of thread %d%s", (int)tr->fz->tids[i],
					 tr->fz->tids[i] == tr->pid ? " (main)" : "");
			else
				sp = end;
		}
		if (end && sp < end && scan_range(tr, label, sp, end))
			return -EFAULT;
		if (regs.r15 >= young[0] && regs.r15 < ylo)
			ylo = regs.r15;
	}
	if (ylo < young[3] && !tr->hx->minor_lo) { /* else traced block by block */
		unsigned label = tracer_group(tr, "minor heap (young blocks, scanned whole)", true);

		return scan_range(tr, label, ylo, young[3]);
	}
	return 0;
}

int roots4_collect(struct tracer *tr, char *err, size_t errlen)
{
	uint64_t state, young[4], ylo; /* young_start, young_end, young_alloc_start, young_alloc_end */
	int ret;

	data_range(tr);
	if (tracer_read(tr, tr->t->rt.caml_state_sym + tr->t->bias, &state, 8) ||
	    tracer_read(tr, state + CH_OCAML4_YOUNG_START, young, 32) ||
	    tracer_read(tr, state + tr->t->rt.young_ptr_off, &ylo, 8))
		ret = -EFAULT;
	else {
		tr->young_lo = young[0];
		tr->young_hi = young[1];
		if (!(ret = module_globals(tr)) && !(ret = dyn_globals(tr)) && !(ret = global_roots(tr)) &&
		    !(ret = finalisers(tr)))
			ret = threads_and_minor(tr, state, young, ylo);
	}
	if (ret)
		snprintf(err, errlen, "cannot read the roots of PID %d", (int)tr->pid);
	return ret;
}
