/* unit_parsers.c -- checks of elf_image, frametable and symbolize against
 * real binaries.
 *
 *   unit_parsers [FIXTURE SOURCE.ml]
 *
 * Always: Debian's /usr/bin/ocamlopt.opt (4.13.1, stripped PIE, .dynsym
 * only; override with $CAMLHEAP_OCAMLOPT).  With arguments: FIXTURE is an
 * executable built with `ocamlopt -g` from SOURCE.ml, whose lines marked
 * `(* SITE:<name> *)` state where an allocation site of the function
 * ending in <name> is.
 *
 * Counts are never hard-coded: they are recomputed by a second, deliberately
 * literal walk of the tables (the runtime's own next_frame_descr) and, when
 * ../shared/tools/ocaml_bininfo.py (or $CAMLHEAP_BININFO) is present,
 * compared with that independent pyelftools reader.
 *
 * Prints "PASS <name>" or "FAIL <name>: <reason>" per check; exits 1 if any
 * check failed.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "target/elf_image.h"
#include "target/frametable.h"
#include "target/ocaml_runtime.h"
#include "target/symbolize.h"

#define DEFAULT_OCAMLOPT "/usr/bin/ocamlopt.opt"
#define DEFAULT_BININFO "../shared/tools/ocaml_bininfo.py" /* beside the repository; tests run from its top */
#define MAX_LOCS 32

#include "unit_check.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_marker(const char *name)
{
	return ends_with(name, "__code_begin") || ends_with(name, "__code_end") ||
	       ends_with(name, ".code_begin") || ends_with(name, ".code_end");
}

static bool printable(const char *s)
{
	if (!s || !*s)
		return false;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
			return false;
	return true;
}

/* ---- independent walk --------------------------------------------------- */

struct walk_counts {
	size_t tables, descrs, ret_to_c, allocs, debuginfo;
};

/* The runtime's next_frame_descr (4.13.1 runtime/roots_nat.c:81-100)
 * word for word, reading through elf_image_read only: no 0xFFFF special
 * case (the runtime has none; the padding byte after that descriptor reads
 * as num_allocs = 0), no de-duplication, no validation. */
static int walk_literally(const struct elf_image *img, struct walk_counts *c)
{
	const struct elf_symbol *ft = elf_image_symbol(img, "caml_frametable");

	memset(c, 0, sizeof(*c));
	if (!ft)
		return -ENOENT;
	for (size_t i = 0;; i++) {
		uint64_t tbl, d;
		int64_t num;

		if (elf_image_read_ptr(img, ft->vaddr + 8 * i, &tbl))
			return -EINVAL;
		if (!tbl)
			return 0;
		c->tables++;
		if (elf_image_read(img, tbl, &num, 8))
			return -EINVAL;
		d = tbl + 8;
		for (int64_t k = 0; k < num; k++) {
			uint16_t fs, nl;
			uint8_t na = 0;
			uint64_t p;

			if (elf_image_read(img, d + 8, &fs, 2) || elf_image_read(img, d + 10, &nl, 2))
				return -EINVAL;
			c->descrs++;
			c->ret_to_c += fs == 0xFFFF;
			p = d + 12 + 2 * (uint64_t)nl;
			if (fs & 2) {
				if (elf_image_read(img, p, &na, 1))
					return -EINVAL;
				p += na + 1;
				if (fs != 0xFFFF)
					c->allocs++;
			}
			if (fs & 1) {
				p = (p + 3) & ~3ull;
				p += 4 * (uint64_t)((fs & 2) ? na : 1);
				if (fs != 0xFFFF)
					c->debuginfo++;
			}
			d = (p + 7) & ~7ull;
		}
	}
}

/* Numbers from ocaml_bininfo.py's "frametable :" lines; false if the tool
 * is absent or printed something else. */
static bool bininfo_counts(const char *path, struct walk_counts *c)
{
	const char *tool = getenv("CAMLHEAP_BININFO");
	char *cmd, line[1024];
	bool got1 = false, got2 = false;
	FILE *f;

	if (!tool)
		tool = DEFAULT_BININFO;
	if (access(tool, R_OK) != 0 || access("/usr/bin/python3", X_OK) != 0)
		return false;
	if (asprintf(&cmd, "/usr/bin/python3 '%s' '%s' 2>/dev/null", tool, path) < 0)
		return false;
	f = popen(cmd, "r");
	free(cmd);
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		const char *p;

		if ((p = strstr(line, "frametable          :")) &&
		    sscanf(p, "frametable          : %zu module tables, %zu descriptors (%zu return-to-C)",
			   &c->tables, &c->descrs, &c->ret_to_c) == 3)
			got1 = true;
		if ((p = strstr(line, "alloc-descr=")) &&
		    sscanf(p, "alloc-descr=%zu (alloc sites=%*u), with debuginfo=%zu", &c->allocs,
			   &c->debuginfo) == 2)
			got2 = true;
	}
	pclose(f);
	return got1 && got2;
}

/* ---- instruction check -------------------------------------------------- */

/* Length of an `ff /2` (call r/m64) instruction starting at b[0] == 0xff,
 * or 0 if it is not one. */
static int call_rm_len(const unsigned char *b)
{
	unsigned modrm = b[1], mod = modrm >> 6, rm = modrm & 7;
	int len = 2;

	if (b[0] != 0xff || ((modrm >> 3) & 7) != 2)
		return 0;
	if (mod == 3)
		return len;
	if (rm == 4) {
		len++;
		if (mod == 0 && (b[2] & 7) == 5)
			len += 4;
	} else if (mod == 0 && rm == 5) {
		len += 4; /* rip-relative */
	}
	if (mod == 1)
		len += 1;
	else if (mod == 2)
		len += 4;
	return len;
}

/* A return address follows a call: e8 rel32, or ff /2 with an optional
 * REX prefix.  Checks every decoding that would end exactly at retaddr. */
static bool preceded_by_call(const struct elf_image *img, uint64_t retaddr)
{
	const unsigned char *b = elf_image_data(img, retaddr - 8, 8);

	if (!b)
		return false;
	if (b[3] == 0xe8)
		return true;
	for (int k = 2; k <= 8; k++) {
		const unsigned char *i = b + 8 - k;

		if (call_rm_len(i) == k)
			return true;
		if (k >= 3 && (i[0] & 0xf0) == 0x40 && call_rm_len(i + 1) == k - 1)
			return true;
	}
	return false;
}

/* ---- ocamlopt.opt ------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void test_demangle(void)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "camlStdlib__List__map_236", "Stdlib__List.map" },
		{ "camlFoo__$2b$2b_12", "Foo.++" },
		{ "camlStdlib__$40_123", "Stdlib.@" },
		{ "camlChain__h_271", "Chain.h" },
		{ "caml_alloc_shr", "caml_alloc_shr" },
		{ "camlT2.f_322", "T2.f" },
		{ "camlStdlib__List.map_236", "Stdlib__List.map" },
		{ "camlStdlib__List__code_begin", "Stdlib__List.code_begin" },
		/* a dune library's unit, a name starting with underscores (ocamllex) */
		{ "camlCoccinelle_modules__Lexer_c____ocaml_lex_token_rec_1012",
		  "Coccinelle_modules__Lexer_c.__ocaml_lex_token_rec" },
		/* a name ending in underscores keeps them: no trailing "." */
		{ "camlParse_cocci__dots_or___19700", "Parse_cocci.dots_or__" },
		{ "camlCommon__$2b$3e_3012", "Common.+>" },
		{ "main", "main" },
	};
	char buf[128], small[5];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char name[160];

		symbolize_demangle(cases[i].in, buf, sizeof(buf));
		snprintf(name, sizeof(name), "demangle %s", cases[i].in);
		check(strcmp(buf, cases[i].out) == 0, name, "got \"%s\", want \"%s\"", buf, cases[i].out);
	}
	symbolize_demangle("camlStdlib__List__map_236", small, sizeof(small));
	check(strcmp(small, "Stdl") == 0, "demangle truncates", "got \"%s\"", small);
}

static void test_symbols(const struct elf_image *img)
{
	static const struct {
		const char *name;
		uint8_t type;
		bool code;
	} want[] = {
		{ "caml_alloc_small_dispatch", STT_FUNC, true },
		{ "caml_memprof_track_alloc_shr", STT_FUNC, true },
		{ "caml_start_program", STT_FUNC, true },
		{ "Caml_state", STT_OBJECT, false },
	};
	size_t n = elf_image_symbol_count(img), bad = 0, dyn = 0;

	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const struct elf_symbol *s = elf_image_symbol(img, want[i].name);
		char name[96];

		snprintf(name, sizeof(name), "symbol %s", want[i].name);
		check(s && s->type == want[i].type && elf_image_is_code(img, s->vaddr) == want[i].code &&
			      strcmp(s->name, want[i].name) == 0,
		      name, s ? "type %u at %#lx, code=%d" : "absent", s ? s->type : 0,
		      s ? (unsigned long)s->vaddr : 0, s ? elf_image_is_code(img, s->vaddr) : 0);
	}
	check(!elf_image_symbol(img, "caml_no_such_symbol_xyz"), "symbol absent", "found a symbol that does not exist");

	for (size_t i = 0; i < n; i++) {
		const struct elf_symbol *s = elf_image_symbol_nth(img, i);

		if (!s || elf_image_symbol(img, s->name) != s)
			bad++;
		dyn += s && s->dynamic;
	}
	check(n > 0 && !bad && !elf_image_symbol_nth(img, n), "symbol_nth unique names",
	      "%zu of %zu symbols not found back by name", bad, n);
	if (!elf_image_has_symtab(img))
		check(dyn == n, "stripped: all symbols from .dynsym", "%zu of %zu not dynamic", n - dyn, n);
}

static void test_offsets(const struct elf_image *img, const char *path)
{
	const struct elf_symbol *fn = elf_image_symbol(img, "caml_alloc_small_dispatch");
	const struct elf_symbol *bss = elf_image_symbol(img, "Caml_state");
	unsigned char file_bytes[16], read_bytes[16];
	const void *mapped;
	uint64_t off = 0, zero;
	int fd, err;

	if (!fn || !bss) {
		check(false, "vaddr_to_offset", "symbols missing");
		return;
	}
	err = elf_image_vaddr_to_offset(img, fn->vaddr, &off);
	fd = open(path, O_RDONLY);
	mapped = elf_image_data(img, fn->vaddr, sizeof(file_bytes));
	check(!err && fd >= 0 && pread(fd, file_bytes, sizeof(file_bytes), off) == sizeof(file_bytes) && mapped &&
		      memcmp(file_bytes, mapped, sizeof(file_bytes)) == 0 &&
		      !elf_image_read(img, fn->vaddr, read_bytes, sizeof(read_bytes)) &&
		      memcmp(file_bytes, read_bytes, sizeof(read_bytes)) == 0,
	      "vaddr_to_offset", "err %d, offset %#lx: file bytes differ from the image's", err, (unsigned long)off);
	if (fd >= 0)
		close(fd);

	/* Caml_state is .bss: mapped, not in the file, reads as zero. */
	zero = 1;
	check(elf_image_vaddr_to_offset(img, bss->vaddr, &off) == -ERANGE && !elf_image_read(img, bss->vaddr, &zero, 8) &&
		      zero == 0 && !elf_image_data(img, bss->vaddr, 8),
	      "bss not file-backed, reads zero", "Caml_state at %#lx", (unsigned long)bss->vaddr);
	check(elf_image_vaddr_to_offset(img, 0xfffffffffff00000ull, &off) == -ERANGE &&
		      elf_image_read(img, 0xfffffffffff00000ull, &zero, 8) == -ERANGE,
	      "unmapped vaddr -ERANGE", "an unmapped address was accepted");
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The minor-heap probe plan, checked against the machine code itself: the
 * update re-arm point is a `je` right after `mov caml_something_to_do(%rip),
 * %eax; test %eax,%eax`, and the inlined store `mov %rax,(%rdx)`
 * (48 89 02, young_limit at offset 0) precedes it in the function; the
 * pending-actions point is a `call caml_process_pending_signals_exn` after
 * the same tail; every probe sits on an instruction the kernel emulates;
 * the uretprobe is on dispatch's entry. */
static void test_minor_plan(const struct elf_image *img, const char *what)
{
	struct ocaml_runtime rt;
	char msg[512] = "", name[128];
	const struct elf_symbol *std = elf_image_symbol(img, "caml_something_to_do");
	const struct elf_symbol *pps = elf_image_symbol(img, "caml_process_pending_signals_exn");
	const struct elf_symbol *disp = elf_image_symbol(img, "caml_alloc_small_dispatch");
	enum ocaml_probe rearms[2] = { OCAML_PROBE_REARM_UPDATE, OCAML_PROBE_REARM_PENDING };
	uint8_t buf[64];

	snprintf(name, sizeof(name), "minor probe plan (%s)", what);
	if (ocaml_runtime_detect(img, what, &rt, msg, sizeof(msg)) != OCAML_OK || !rt.minor_ok || !std || !pps || !disp) {
		check(false, name, "detect: %s; minor: %s", msg, rt.minor_why);
		return;
	}
	for (int i = 0; i < 2; i++) {
		const struct ocaml_probe_point *pp = &rt.probes[rearms[i]];
		const struct elf_symbol *fn = elf_image_symbol(img, pp->symbol);
		const uint8_t *code = fn ? elf_image_data(img, fn->vaddr, pp->skipped + 16) : NULL;
		bool ok = pp->present && pp->emulated && code && pp->skipped >= 10 && fn->vaddr + pp->skipped == pp->vaddr;
		bool store = false;

		for (unsigned k = 0; ok && k + 3 <= pp->skipped; k++)
			store |= code[k] == 0x48 && code[k + 1] == 0x89 && code[k + 2] == 0x02;
		if (ok && rearms[i] == OCAML_PROBE_REARM_UPDATE)
			ok = (code[pp->skipped] == 0x74 || (code[pp->skipped] == 0x0f && code[pp->skipped + 1] == 0x84)) &&
			     code[pp->skipped - 2] == 0x85 && code[pp->skipped - 1] == 0xc0 &&
			     code[pp->skipped - 8] == 0x8b && code[pp->skipped - 7] == 0x05 &&
			     fn->vaddr + pp->skipped - 2 + (uint64_t)(int64_t)(int32_t)le32(code + pp->skipped - 6) == std->vaddr;
		else if (ok)
			ok = code[pp->skipped] == 0xe8 &&
			     fn->vaddr + pp->skipped + 5 + (uint64_t)(int64_t)(int32_t)le32(code + pp->skipped + 1) == pps->vaddr;
		check(ok && store, name, "%s+%#x: not the re-arm point (present %d, emulated %d, store before it %d)",
		      pp->symbol, pp->skipped, pp->present, pp->emulated, store);
		printf("     %s re-arm point at %s+%#x\n", what, pp->symbol, pp->skipped);
	}
	{
		/* to_do_hd: from the code, equal to .symtab's where there is one */
		const struct elf_symbol *fdc = elf_image_symbol(img, "caml_final_do_calls_exn");
		const struct elf_symbol *td = elf_image_symbol(img, "to_do_hd");
		const uint8_t *code = fdc ? elf_image_data(img, fdc->vaddr, 64) : NULL;
		uint64_t found = code ? ocaml_runtime_find_final_todo(code, 64, fdc->vaddr) : 0;

		check(found && found == rt.final_todo_sym && (!td || td->vaddr == found), name,
		      "to_do_hd: code gives %#lx, plan %#lx, .symtab %#lx", (unsigned long)found,
		      (unsigned long)rt.final_todo_sym, td ? (unsigned long)td->vaddr : 0UL);
	}
	/* census: each probe on an emulated instruction the function always
	 * reaches (only plain data instructions before it) */
	check(rt.census_ok, name, "census probes: %s", rt.census_why);
	for (int i = OCAML_PROBE_MINOR_UPDATE; rt.census_ok && i <= OCAML_PROBE_COMPACTION; i++) {
		const struct ocaml_probe_point *pp = &rt.probes[i];
		const struct elf_symbol *fn = elf_image_symbol(img, pp->symbol);
		const uint8_t *code = fn ? elf_image_data(img, fn->vaddr, pp->skipped + 16) : NULL;
		unsigned off = 0, len;

		while (code && off < pp->skipped && (len = ocaml_runtime_plain_insn_len(code + off, 96)) > 0)
			off += len;
		check(pp->present && pp->emulated && code && off == pp->skipped && fn->vaddr + off == pp->vaddr, name,
		      "%s+%#x: not reached through plain instructions (present %d, emulated %d)", pp->symbol,
		      pp->skipped, pp->present, pp->emulated);
		printf("     %s census probe at %s+%#x\n", what, pp->symbol, pp->skipped);
	}
	check(rt.probes[OCAML_PROBE_DISPATCH_RET].retprobe && rt.probes[OCAML_PROBE_DISPATCH_RET].vaddr == disp->vaddr &&
		      rt.probes[OCAML_PROBE_DISPATCH].emulated && rt.probes[OCAML_PROBE_DISPATCH].present,
	      name, "dispatch entry/return probes misplanned");
	/* the pattern is required, not guessed: a wrong something_to_do address finds nothing */
	memset(buf, 0x90, sizeof(buf));
	memcpy(buf + 8, "\x8b\x05\x00\x00\x00\x00\x85\xc0\x74\x02", 10);
	check(ocaml_runtime_find_rearm(buf, sizeof(buf), 0x1000, 0x1000 + 14, 0) == 16 &&
		      ocaml_runtime_find_rearm(buf, sizeof(buf), 0x1000, 0x2000, 0) == -1 &&
		      ocaml_runtime_find_rearm(buf, sizeof(buf), 0x1000, 0x1000 + 14, 0x5000) == -1,
	      "find_rearm pattern", "accepted a foreign pattern or missed a synthetic one");
}

/* caml_update_young_limit as GCC 12 compiles 4.13.1's (Debian's
 * libasmrun.a) at fn = 0x1000, Caml_state at 0x3000, young_limit at
 * `lim`; `tail_ret`: the conditional store placed after a ret, as another
 * compiler may lay it out. */
static size_t update_young_limit_code(uint8_t *c, unsigned lim, bool tail_ret)
{
	size_t n = 0;
	uint32_t rel;

#define PUT(...)                                                     \
	do {                                                         \
		const uint8_t b_[] = { __VA_ARGS__ };                \
		memcpy(c + n, b_, sizeof(b_));                       \
		n += sizeof(b_);                                     \
	} while (0)
#define CS_LOAD(modrm) /* mov Caml_state(%rip),%reg */               \
	do {                                                         \
		PUT(0x48, 0x8b, modrm);                              \
		rel = 0x3000 - (0x1000 + (uint32_t)n + 4);           \
		memcpy(c + n, &rel, 4);                              \
		n += 4;                                              \
	} while (0)
	CS_LOAD(0x15);                                  /* mov Caml_state,%rdx */
	PUT(0x48, 0x8b, 0x0d, 0x10, 0x00, 0x00, 0x00);  /* mov memprof_trigger(%rip),%rcx */
	PUT(0x48, 0x8b, 0x42, 0x48);                    /* mov 0x48(%rdx),%rax: young_trigger */
	PUT(0x48, 0x39, 0xc8);                          /* cmp %rcx,%rax */
	PUT(0x48, 0x0f, 0x42, 0xc1);                    /* cmovb %rcx,%rax */
	PUT(0x48, 0x89, 0x42, (uint8_t)lim);            /* mov %rax,lim(%rdx) */
	PUT(0x8b, 0x05, 0x20, 0x00, 0x00, 0x00);        /* mov something_to_do(%rip),%eax */
	PUT(0x85, 0xc0);                                /* test %eax,%eax */
	PUT(tail_ret ? 0x75 : 0x74, tail_ret ? 0x01 : 0x0e);
	if (tail_ret)
		PUT(0xc3);
	CS_LOAD(0x05);                                  /* mov Caml_state,%rax */
	PUT(0x48, 0x8b, 0x50, 0x38);                    /* mov 0x38(%rax),%rdx: young_alloc_end */
	PUT(0x48, 0x89, 0x50, (uint8_t)lim);            /* mov %rdx,lim(%rax) */
	PUT(0xc3);
#undef CS_LOAD
#undef PUT
	return n;
}

static void test_limit_layout(void)
{
	uint8_t c[128];
	unsigned off = 99;
	size_t n;
	int r13, r12, rtail, rbad, rforeign, rmissing;

	n = update_young_limit_code(c, 0, false);
	r13 = ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 72, 56, &off);
	check(r13 == 1 && off == 0, "limit layout: 4.13 form", "returned %d, offset %u", r13, off);
	n = update_young_limit_code(c, 8, false);
	r12 = ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 72, 56, &off);
	check(r12 == 1 && off == 8, "limit layout: 4.12 form", "returned %d, offset %u", r12, off);
	n = update_young_limit_code(c, 0, true);
	rtail = ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 72, 56, &off);
	check(rtail == 1 && off == 0, "limit layout: store after a ret", "returned %d, offset %u", rtail, off);
	/* the two stores disagree: contradicts any layout */
	n = update_young_limit_code(c, 0, false);
	c[n - 2] = 8;
	rbad = ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 72, 56, &off);
	/* young_trigger read elsewhere than expected */
	n = update_young_limit_code(c, 0, false);
	rmissing = ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 80, 56, &off);
	check(rbad == -1 && rmissing == -1, "limit layout: contradictions", "stores disagreeing %d, trigger elsewhere %d",
	      rbad, rmissing);
	/* Caml_state elsewhere: no store into it is seen; an unknown instruction */
	n = update_young_limit_code(c, 0, false);
	rforeign = ocaml_runtime_limit_layout(c, n, 0x1000, 0x4000, 72, 56, &off);
	c[0] = 0xcc;
	check(rforeign == 0 && ocaml_runtime_limit_layout(c, n, 0x1000, 0x3000, 72, 56, &off) == 0,
	      "limit layout: unrecognised code", "foreign Caml_state gave %d", rforeign);
}

/* The register executor's young_trigger loads (ocaml_runtime_find_field_load),
 * on the code of the real runtimes (objdump of each libasmrun.a, relocations
 * filled in as if Caml_state lay at 0x3000 and the function at 0x1000). */
static void test_find_field_load(void)
{
	/* 4.13.1 caml_update_young_limit */
	uint8_t u413[] = { 0x48, 0x8b, 0x15, 0, 0, 0, 0, 0x48, 0x8b, 0x0d, 0, 0, 0, 0, 0x48, 0x8b, 0x42, 0x48,
			   0x48, 0x39, 0xc8, 0x48, 0x0f, 0x42, 0xc1, 0x48, 0x89, 0x02, 0xc3 };
	/* 4.13.1 caml_do_pending_actions_exn, up to its inlined copy */
	uint8_t p413[] = { 0x48, 0x83, 0xec, 0x08, 0xbf, 0x01, 0, 0, 0, 0xc7, 0x05, 0, 0, 0, 0, 0, 0, 0, 0,
			   0xe8, 0, 0, 0, 0, 0x48, 0x8b, 0x15, 0, 0, 0, 0, 0x48, 0x8b, 0x0d, 0, 0, 0, 0,
			   0x48, 0x8b, 0x42, 0x48, 0x48, 0x39, 0xc8 };
	/* 5.3.0 and 5.1.0 caml_reset_young_limit */
	uint8_t r53[] = { 0x48, 0x8b, 0x87, 0xd8, 0x01, 0, 0, 0x48, 0x8b, 0x57, 0x20, 0x48, 0x39, 0xd0 };
	uint8_t r51[] = { 0x48, 0x8b, 0x47, 0x20, 0x48, 0x87, 0x07 };
	/* rdi overwritten first: its young_trigger is not the argument's */
	uint8_t clobber[] = { 0x48, 0x8b, 0x3f, 0x48, 0x8b, 0x47, 0x20 };
	struct ocaml_reg_load l;
	uint32_t rel;
	int r;

	rel = 0x3000 - (0x1000 + 7); /* mov Caml_state(%rip),%rdx */
	memcpy(u413 + 3, &rel, 4);
	r = ocaml_runtime_find_field_load(u413, sizeof(u413), 0x1000, 0x3000, 72, &l);
	check(r == 0 && l.at == 14 && l.len == 4 && l.dst == 0 && l.base == 2 && l.disp == 72,
	      "field load: 4.13 caml_update_young_limit", "r %d at %u len %u dst %u base %u", r, l.at, l.len, l.dst,
	      l.base);
	check(ocaml_runtime_find_field_load(u413, sizeof(u413), 0x1000, 0x4000, 72, &l) == -1,
	      "field load: a base that is not Caml_state", "accepted");
	rel = 0x3000 - (0x1000 + 31);
	memcpy(p413 + 27, &rel, 4);
	r = ocaml_runtime_find_field_load(p413, sizeof(p413), 0x1000, 0x3000, 72, &l);
	check(r == 0 && l.at == 38 && l.dst == 0 && l.base == 2, "field load: 4.13 inlined copy after a call",
	      "r %d at %u", r, l.at);
	/* the call forgets the caller-saved registers: Caml_state loaded before it does not count */
	{
		uint8_t c[] = { 0x48, 0x8b, 0x15, 0, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0x48, 0x8b, 0x42, 0x48 };

		rel = 0x3000 - (0x1000 + 7);
		memcpy(c + 3, &rel, 4);
		check(ocaml_runtime_find_field_load(c, sizeof(c), 0x1000, 0x3000, 72, &l) == -1,
		      "field load: a register a call clobbered", "accepted");
	}
	r = ocaml_runtime_find_field_load(r53, sizeof(r53), 0x1000, 0, 32, &l);
	check(r == 0 && l.at == 7 && l.len == 4 && l.dst == 2 && l.base == 7 && l.disp == 32,
	      "field load: 5.3 caml_reset_young_limit", "r %d at %u dst %u", r, l.at, l.dst);
	r = ocaml_runtime_find_field_load(r51, sizeof(r51), 0x1000, 0, 32, &l);
	check(r == 0 && l.at == 0 && l.dst == 0 && l.base == 7, "field load: 5.1 caml_reset_young_limit",
	      "r %d at %u", r, l.at);
	check(ocaml_runtime_find_field_load(clobber, sizeof(clobber), 0x1000, 0, 32, &l) == -1,
	      "field load: the argument register overwritten", "accepted");
	/* 4.13.1 caml_update_young_limit whole: its young_alloc_end tail */
	{
		uint8_t c[] = { 0x48, 0x8b, 0x15, 0, 0, 0, 0, 0x48, 0x8b, 0x0d, 0, 0, 0, 0, 0x48, 0x8b, 0x42, 0x48,
				0x48, 0x39, 0xc8, 0x48, 0x0f, 0x42, 0xc1, 0x48, 0x89, 0x02, 0x8b, 0x05, 0, 0, 0, 0,
				0x85, 0xc0, 0x74, 0x0e, 0x48, 0x8b, 0x05, 0, 0, 0, 0, 0x48, 0x8b, 0x50, 0x38, 0x48,
				0x89, 0x10, 0xc3 };
		unsigned store = 0;

		rel = 0x3000 - (0x1000 + 7);
		memcpy(c + 3, &rel, 4);
		rel = 0x3000 - (0x1000 + 45);
		memcpy(c + 41, &rel, 4);
		r = ocaml_runtime_find_end_store(c, sizeof(c), 0x1000, 0x3000, 56, 0, &l, &store);
		check(r == 0 && l.at == 45 && l.dst == 2 && l.base == 0 && store == 3,
		      "end store: 4.13 caml_update_young_limit's tail", "r %d at %u dst %u base %u store %u", r, l.at,
		      l.dst, l.base, store);
		/* 4.12 keeps young_limit at byte 8: a store to 0 contradicts it */
		check(ocaml_runtime_find_end_store(c, sizeof(c), 0x1000, 0x3000, 56, 8, &l, &store) == -1,
		      "end store: a store elsewhere than young_limit", "accepted");
		c[sizeof(c) - 1] = 0x90; /* no ret after the store */
		check(ocaml_runtime_find_end_store(c, sizeof(c), 0x1000, 0x3000, 56, 0, &l, &store) == -1,
		      "end store: no ret after it", "accepted");
	}
	/* an instruction the walk does not know (int3) stops it */
	r51[0] = 0xcc;
	check(ocaml_runtime_find_field_load(r51, sizeof(r51), 0x1000, 0, 32, &l) == -1,
	      "field load: unknown code", "accepted");
}

static void test_version(const struct elf_image *img, const char *path)
{
	char ver[64] = "", cmd[512], out[64] = "";
	FILE *f;
	int err = elf_image_find_ocaml_version(img, ver, sizeof(ver));

	snprintf(cmd, sizeof(cmd), "'%s' -version 2>/dev/null", path);
	f = popen(cmd, "r");
	if (f) {
		if (!fgets(out, sizeof(out), f))
			out[0] = '\0';
		pclose(f);
	}
	out[strcspn(out, "\n")] = '\0';
	check(!err && out[0] && strcmp(ver, out) == 0, "ocaml version string", "image says \"%s\" (err %d), %s -version says \"%s\"",
	      ver, err, path, out);
}

static void test_aliases(const struct elf_image *img)
{
	size_t n = elf_image_symbol_count(img), nreal = 0, markers = 0, bad = 0;
	uint64_t *real = calloc(n + 1, sizeof(*real));
	const char *example = "";

	if (!real) {
		check(false, "function_at prefers real names", "out of memory");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct elf_symbol *s = elf_image_symbol_nth(img, i);

		if (!is_marker(s->name) && elf_image_is_code(img, s->vaddr) &&
		    (s->type == STT_FUNC || s->type == STT_NOTYPE))
			real[nreal++] = s->vaddr;
	}
	qsort(real, nreal, sizeof(*real), cmp_u64);
	for (size_t i = 0; i < n; i++) {
		const struct elf_symbol *s = elf_image_symbol_nth(img, i), *f;

		if (!ends_with(s->name, "code_begin") || !elf_image_is_code(img, s->vaddr))
			continue;
		markers++;
		if (!bsearch(&s->vaddr, real, nreal, sizeof(*real), cmp_u64))
			continue;
		f = elf_image_function_at(img, s->vaddr);
		if (!f || is_marker(f->name)) {
			bad++;
			example = s->name;
		}
	}
	free(real);
	check(markers > 0 && !bad, "function_at prefers real names over code_begin",
	      "%zu of %zu markers returned instead of the function at their address (e.g. %s)", bad, markers, example);
}

static void test_frametable(const struct elf_image *img, const struct frametable *ft, const char *path)
{
	struct walk_counts lit, py;
	size_t unsorted = 0, not_code = 0, no_call = 0, bad_size = 0, bad_live = 0, bad_alloc = 0;
	size_t bad_dbg = 0, chains = 0, locs_total = 0, not_caml = 0, find_bad = 0, polls = 0;
	const struct frame_descr *ret_to_c = NULL;
	uint64_t first_bad_call = 0;
	const char *bad_dbg_why = "";
	int err;

	err = walk_literally(img, &lit);
	check(!err && lit.tables == ft->num_tables && lit.descrs == ft->count && lit.ret_to_c == ft->num_return_to_c &&
		      lit.allocs == ft->num_with_allocs && lit.debuginfo == ft->num_with_debuginfo,
	      "frametable counts = literal runtime walk",
	      "walk err %d: tables %zu/%zu descrs %zu/%zu ret_to_c %zu/%zu allocs %zu/%zu dbg %zu/%zu", err,
	      ft->num_tables, lit.tables, ft->count, lit.descrs, ft->num_return_to_c, lit.ret_to_c,
	      ft->num_with_allocs, lit.allocs, ft->num_with_debuginfo, lit.debuginfo);
	if (bininfo_counts(path, &py))
		check(py.tables == ft->num_tables && py.descrs == ft->count && py.ret_to_c == ft->num_return_to_c &&
			      py.allocs == ft->num_with_allocs && py.debuginfo == ft->num_with_debuginfo,
		      "frametable counts = ocaml_bininfo.py",
		      "tables %zu/%zu descrs %zu/%zu ret_to_c %zu/%zu allocs %zu/%zu dbg %zu/%zu (ours/python)",
		      ft->num_tables, py.tables, ft->count, py.descrs, ft->num_return_to_c, py.ret_to_c,
		      ft->num_with_allocs, py.allocs, ft->num_with_debuginfo, py.debuginfo);
	else
		fprintf(stderr, "note: %s not available, python cross-check not run\n", DEFAULT_BININFO);
	fprintf(stderr, "note: %s: %zu tables, %zu descriptors, %zu return-to-C, %zu with allocs, %zu with debuginfo\n",
		path, ft->num_tables, ft->count, ft->num_return_to_c, ft->num_with_allocs, ft->num_with_debuginfo);

	for (size_t i = 0; i < ft->count; i++) {
		const struct frame_descr *d = &ft->descrs[i];
		const struct elf_symbol *fn;
		uint16_t fs = d->frame_size;

		if (i && d->retaddr <= ft->descrs[i - 1].retaddr)
			unsorted++;
		if (frametable_find(ft, d->retaddr) != d)
			find_bad++;
		if (!elf_image_is_code(img, d->retaddr)) {
			not_code++;
			continue;
		}
		if (!preceded_by_call(img, d->retaddr) && no_call++ == 0)
			first_bad_call = d->retaddr;
		fn = elf_image_function_at(img, d->retaddr - 1);
		if (!fn || strncmp(fn->name, "caml", 4) != 0 || is_marker(fn->name))
			not_caml++;
		if (fs == 0xFFFF) {
			ret_to_c = d;
			continue;
		}
		if ((fs & 0xFFFC) % 8 != 0 || (fs & 0xFFFC) < 8)
			bad_size++;
		{
			uint16_t nl, live;
			const unsigned char *raw = elf_image_data(img, d->descr_vaddr + 10, 2);

			/* Even live offsets are stack slots inside the frame;
			 * odd ones name registers (stack.h:97, Reg encoding). */
			memcpy(&nl, raw, 2);
			for (unsigned k = 0; k < nl; k++) {
				memcpy(&live, elf_image_data(img, d->descr_vaddr + 12 + 2 * k, 2), 2);
				if (!(live & 1) && live >= (fs & 0xFFFC))
					bad_live++;
			}
		}
		if ((fs & 2) != 0) {
			/* num_allocs 0: a poll point, without lengths. */
			if (frametable_alloc_whsize(ft, d, d->num_allocs) != 0 || (!d->num_allocs && d->alloc_lens_vaddr))
				bad_alloc++;
			polls += !d->num_allocs;
			for (unsigned k = 0; k < d->num_allocs; k++) {
				unsigned w = frametable_alloc_whsize(ft, d, k);

				if (w < 2 || w > 258)
					bad_alloc++;
			}
		} else if (d->num_allocs || frametable_alloc_whsize(ft, d, 0)) {
			bad_alloc++;
		}
		if (d->has_debuginfo) {
			struct ocaml_location locs[MAX_LOCS];
			unsigned nidx = d->num_allocs ? d->num_allocs : 1;

			for (unsigned k = 0; k < nidx; k++) {
				int n = frametable_locations(ft, d, k, locs, MAX_LOCS);

				if (n < 1) {
					bad_dbg++;
					bad_dbg_why = "no location";
					continue;
				}
				locs_total += n;
				chains += n > 1;
				for (int j = 0; j < n; j++) {
					if (!printable(locs[j].name) || !printable(locs[j].file)) {
						bad_dbg++;
						bad_dbg_why = "unprintable name or file";
					} else if (locs[j].start_chr > locs[j].end_chr && locs[j].end_chr != 0) {
						bad_dbg++;
						bad_dbg_why = "start after end";
					}
				}
			}
		} else {
			struct ocaml_location loc;

			if (frametable_locations(ft, d, 0, &loc, 1) != 0) {
				bad_dbg++;
				bad_dbg_why = "locations without debuginfo";
			}
		}
	}
	check(!unsorted && !find_bad, "descriptors sorted, retaddrs unique, findable", "%zu out of order, %zu not found",
	      unsorted, find_bad);
	check(!not_code, "retaddrs in executable segments", "%zu outside", not_code);
	check(!no_call, "retaddrs follow a call instruction", "%zu do not (first at %#lx)", no_call,
	      (unsigned long)first_bad_call);
	check(!bad_size && !bad_live, "frame sizes and live slots",
	      "%zu sizes not a multiple of 8 or < 8, %zu live stack slots outside the frame", bad_size, bad_live);
	check(!bad_alloc, "Comballoc lengths", "%zu bad (whsize outside [2, 258] or flags inconsistent)", bad_alloc);
	check(!bad_dbg && locs_total > 0, "debuginfo decodes", "%zu bad (%s), %zu locations", bad_dbg, bad_dbg_why,
	      locs_total);
	fprintf(stderr, "note: %zu locations decoded, %zu inline chains, %zu poll points\n", locs_total, chains, polls);
	check(!not_caml, "function_at(retaddr) is an OCaml or caml_ symbol", "%zu are not", not_caml);

	{
		const struct elf_symbol *sys = elf_image_symbol(img, "caml_system__frametable");
		const struct elf_symbol *start = elf_image_symbol(img, "caml_start_program");
		const struct elf_symbol *fn = ret_to_c ? elf_image_function_at(img, ret_to_c->retaddr - 1) : NULL;

		check(ft->num_return_to_c == 1 && ret_to_c && sys && ret_to_c->descr_vaddr == sys->vaddr + 8 &&
			      !ret_to_c->num_allocs && !ret_to_c->has_debuginfo && fn && start && fn->vaddr == start->vaddr &&
			      strcmp(fn->name, start->name) == 0,
		      "one 0xFFFF descriptor, in caml_system__frametable, in caml_start_program",
		      "%zu such descriptors; at %#lx in %s", ft->num_return_to_c,
		      ret_to_c ? (unsigned long)ret_to_c->descr_vaddr : 0, fn ? fn->name : "?");
	}
}

static void test_table_pointers(const struct elf_image *img, const struct frametable *ft)
{
	const struct elf_symbol *base = elf_image_symbol(img, "caml_frametable");
	size_t n = elf_image_symbol_count(img), nsyms = 0, matched = 0, tables = 0;
	uint64_t *addrs = calloc(n + 1, sizeof(*addrs));

	if (!base || !addrs) {
		free(addrs);
		check(false, "table pointers are __frametable symbols", "no caml_frametable");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		const struct elf_symbol *s = elf_image_symbol_nth(img, i);

		if (ends_with(s->name, "__frametable") || ends_with(s->name, ".frametable"))
			addrs[nsyms++] = s->vaddr;
	}
	qsort(addrs, nsyms, sizeof(*addrs), cmp_u64);
	for (;; tables++) {
		uint64_t p;

		if (elf_image_read_ptr(img, base->vaddr + 8 * tables, &p) || !p)
			break;
		matched += bsearch(&p, addrs, nsyms, sizeof(*addrs), cmp_u64) != NULL;
	}
	free(addrs);
	check(tables == ft->num_tables && matched == tables && tables > 0,
	      "table pointers (relocated) are __frametable symbols", "%zu of %zu pointers match (%zu tables parsed)",
	      matched, tables, ft->num_tables);
}

static void test_symbolizer(const struct elf_image *img, const struct frametable *ft)
{
	struct symbolizer *s;
	size_t bad = 0, by_src[4] = { 0 }, unified = 0;
	const char *why = "";
	struct sym_frame fr[MAX_LOCS], again[MAX_LOCS];
	enum sym_source src;
	int n;

	if (symbolizer_open(img, ft, &s)) {
		check(false, "symbolizer", "open failed");
		return;
	}
	for (size_t i = 0; i < ft->count; i++) {
		const struct frame_descr *d = &ft->descrs[i];
		struct ocaml_location locs[MAX_LOCS];
		int nl = frametable_locations(ft, d, 0, locs, MAX_LOCS);
		char want[256];

		n = symbolizer_lookup(s, d->retaddr, 0, fr, MAX_LOCS, &src);
		if (n < 1 || !fr[0].function) {
			bad++;
			why = "no frame";
			continue;
		}
		by_src[src]++;
		if (nl > 0) {
			if (n != nl || strcmp(fr[n - 1].function, locs[nl - 1].name) != 0 || fr[0].line != locs[0].line ||
			    (src != SYM_SRC_FRAMETABLE && src != SYM_SRC_DWARF) || fr[n - 1].inlined ||
			    (n > 1 && !fr[0].inlined)) {
				bad++;
				why = "frame-table frames differ from the decoded locations";
			}
		} else if (src == SYM_SRC_SYMBOL) {
			/* the function's debuginfo name from another of its
			 * descriptors (one name per function), else the
			 * demangled symbol */
			const struct elf_symbol *sym = elf_image_function_at(img, d->retaddr - 1);
			bool named = false;

			for (size_t j = i; !named && j-- > 0 && elf_image_function_at(img, ft->descrs[j].retaddr - 1) == sym;) {
				int m = frametable_locations(ft, &ft->descrs[j], 0, locs, MAX_LOCS);

				named = m > 0 && !strcmp(locs[m - 1].name, fr[0].function);
			}
			for (size_t j = i + 1; !named && j < ft->count &&
					       elf_image_function_at(img, ft->descrs[j].retaddr - 1) == sym; j++) {
				int m = frametable_locations(ft, &ft->descrs[j], 0, locs, MAX_LOCS);

				named = m > 0 && !strcmp(locs[m - 1].name, fr[0].function);
			}
			unified += named;
			symbolize_demangle(sym->name, want, sizeof(want));
			if (!named && strcmp(want, fr[0].function) != 0) {
				bad++;
				why = "symbol fallback is neither the function's debuginfo name nor the demangled symbol";
			}
		}
	}
	check(!bad, "symbolizer on every descriptor", "%zu bad: %s", bad, why);
	fprintf(stderr, "note: symbolizer sources: none %zu, symbol %zu (%zu named as their function's debuginfo names it), "
			"frametable %zu, dwarf %zu\n", by_src[0], by_src[1], unified, by_src[2], by_src[3]);

	if (ft->count) {
		uint64_t r = ft->descrs[ft->count / 2].retaddr;
		int n2;

		n = symbolizer_lookup(s, r, 0, fr, MAX_LOCS, NULL);
		n2 = symbolizer_lookup(s, r, 0, again, MAX_LOCS, NULL);
		check(n >= 1 && n == n2 && fr[0].function == again[0].function && fr[0].file == again[0].file,
		      "symbolizer cache returns the same frames", "n %d vs %d", n, n2);
		n = symbolizer_lookup(s, r, 0, fr, 1, NULL);
		check(n == 1, "symbolizer honours max", "returned %d", n);
	}
	n = symbolizer_lookup(s, 1, 0, fr, MAX_LOCS, &src);
	check(n == 1 && src == SYM_SRC_NONE && strcmp(fr[0].function, "0x1") == 0 && !fr[0].file,
	      "symbolizer unknown address", "n %d src %d function %s", n, src, n > 0 ? fr[0].function : "?");
	symbolizer_close(s);
}

static int test_ocamlopt(const char *path)
{
	struct elf_image *img;
	struct frametable *ft;
	int err;

	err = elf_image_open(path, &img);
	check(!err, "elf_image_open ocamlopt.opt", "%s: %s", path, strerror(-err));
	if (err)
		return err;
	check(elf_image_is_pie(img) && !elf_image_has_dwarf(img), "ocamlopt.opt is a PIE without DWARF",
	      "pie %d dwarf %d", elf_image_is_pie(img), elf_image_has_dwarf(img));
	test_symbols(img);
	test_offsets(img, path);
	test_version(img, path);
	test_minor_plan(img, "ocamlopt.opt");
	test_aliases(img);

	err = frametable_load(img, &ft);
	check(!err, "frametable_load ocamlopt.opt", "%s", strerror(-err));
	if (!err) {
		test_frametable(img, ft, path);
		test_table_pointers(img, ft);
		test_symbolizer(img, ft);
		frametable_free(ft);
	}
	elf_image_close(img);
	{
		struct elf_image *bad;

		check(elf_image_open("/nonexistent/x", &bad) == -ENOENT && elf_image_open("/etc/passwd", &bad) == -ENOEXEC,
		      "elf_image_open errors", "wrong errno for a missing file or a non-ELF file");
	}
	return 0;
}

/* ---- fixture ------------------------------------------------------------ */

struct site {
	char name[64];
	int line;
};

static size_t read_sites(const char *src, struct site *sites, size_t max)
{
	FILE *f = fopen(src, "r");
	char line[1024];
	size_t n = 0;
	int lineno = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f) && n < max) {
		const char *m = strstr(line, "(* SITE:");
		size_t len;

		lineno++;
		if (!m)
			continue;
		m += strlen("(* SITE:");
		len = strcspn(m, " *");
		if (!len || len >= sizeof(sites[n].name))
			continue;
		memcpy(sites[n].name, m, len);
		sites[n].name[len] = '\0';
		sites[n].line = lineno;
		n++;
	}
	fclose(f);
	return n;
}

/* `name` is "<name>" or ends with ".<name>". */
static bool defname_matches(const char *defname, const char *name)
{
	size_t n = strlen(defname), m = strlen(name);

	return n >= m && strcmp(defname + n - m, name) == 0 && (n == m || defname[n - m - 1] == '.');
}

static void test_fixture(const char *bin, const char *src)
{
	char *srccopy = strdup(src);
	const char *base = basename(srccopy);
	struct site sites[64];
	size_t nsites = read_sites(src, sites, 64);
	struct elf_image *img;
	struct frametable *ft;
	struct symbolizer *sym;
	int err;

	check(nsites > 0, "fixture has SITE markers", "none in %s", src);
	err = elf_image_open(bin, &img);
	check(!err, "elf_image_open fixture", "%s: %s", bin, strerror(-err));
	if (err)
		goto out;
	err = frametable_load(img, &ft);
	check(!err, "frametable_load fixture", "%s", strerror(-err));
	if (err) {
		elf_image_close(img);
		goto out;
	}
	check(elf_image_has_dwarf(img), "fixture has DWARF (-g)", "no .debug_line/.debug_info");
	test_minor_plan(img, "fixture");
	err = symbolizer_open(img, ft, &sym);
	check(!err, "symbolizer_open fixture", "%s", strerror(-err));
	if (err)
		goto close;

	test_frametable(img, ft, bin);
	for (size_t si = 0; si < nsites; si++) {
		const struct site *site = &sites[si];
		size_t found = 0, sym_ok = 0;
		char name[128], reason[512] = "no descriptor with this location";

		for (size_t i = 0; i < ft->count; i++) {
			const struct frame_descr *d = &ft->descrs[i];
			unsigned nidx = d->num_allocs ? d->num_allocs : 1;

			for (unsigned k = 0; k < nidx; k++) {
				struct ocaml_location locs[MAX_LOCS];
				struct sym_frame fr[MAX_LOCS];
				int n = frametable_locations(ft, d, k, locs, MAX_LOCS);
				int nf, j;

				if (n < 1)
					continue;
				/* The site's own location: the innermost one, or an
				 * outer one when library code was inlined at the site
				 * (custom.ml's Marshal.from_string). */
				for (j = 0; j < n; j++) {
					const char *slash = strrchr(locs[j].file, '/');

					if (locs[j].line == site->line && strcmp(slash ? slash + 1 : locs[j].file, base) == 0)
						break;
				}
				if (j == n)
					continue;
				if (!defname_matches(locs[j].name, site->name)) {
					snprintf(reason, sizeof(reason), "location found in %.200s, not in ...%.60s",
						 locs[j].name, site->name);
					continue;
				}
				found++;
				nf = symbolizer_lookup(sym, d->retaddr, k, fr, MAX_LOCS, NULL);
				if (nf != n || !defname_matches(fr[j].function, site->name) || fr[j].line != site->line ||
				    fr[j].inlined != (j + 1 < n)) {
					snprintf(reason, sizeof(reason), "symbolizer gives %s:%d for %#lx (frame %d of %d)",
						 nf > j ? fr[j].function : "?", nf > j ? fr[j].line : 0,
						 (unsigned long)d->retaddr, j, nf);
					continue;
				}
				/* DWARF supplies the full path: comp_dir + file. */
				if (!fr[j].file || fr[j].file[0] != '/' || !ends_with(fr[j].file, base) ||
				    access(fr[j].file, R_OK) != 0) {
					snprintf(reason, sizeof(reason), "file is %s, not an existing full path",
						 fr[j].file ? fr[j].file : "NULL");
					continue;
				}
				sym_ok++;
				fprintf(stderr, "note: SITE:%s -> %#lx[%u] frame %d/%d: %s %s:%d:%d\n", site->name,
					(unsigned long)d->retaddr, k, j + 1, n, fr[j].function, fr[j].file, fr[j].line,
					fr[j].column);
			}
		}
		snprintf(name, sizeof(name), "site %.40s at %.40s:%d", site->name, base, site->line);
		check(found > 0 && sym_ok > 0, name, "%s", reason);
	}

	/* DWARF without frame-table debuginfo: a descriptor of the fixture's
	 * own module that has none still gets file and line from .debug_line,
	 * and a demangled function name from gas's DW_TAG_subprogram. */
	{
		size_t tried = 0, ok = 0;
		char why[256] = "no candidate descriptor";

		for (size_t i = 0; i < ft->count; i++) {
			const struct frame_descr *d = &ft->descrs[i];
			const struct elf_symbol *fn = elf_image_function_at(img, d->retaddr - 1);
			struct sym_frame fr[MAX_LOCS];
			enum sym_source src;
			char want[256];
			int n;

			/* OCaml functions only: gas names their subprograms
			 * after the (mangled) symbol. */
			if (d->has_debuginfo || d->frame_size == 0xFFFF || !fn || strncmp(fn->name, "caml", 4) ||
			    !isupper((unsigned char)fn->name[4]))
				continue;
			n = symbolizer_lookup(sym, d->retaddr, 0, fr, MAX_LOCS, &src);
			if (src != SYM_SRC_DWARF)
				continue;
			tried++;
			symbolize_demangle(fn->name, want, sizeof(want));
			if (n >= 1 && strcmp(fr[0].function, want) == 0 && fr[0].line > 0 && fr[0].file)
				ok++;
			else
				snprintf(why, sizeof(why), "%#lx: %.60s %.100s:%d, want %.60s", (unsigned long)d->retaddr,
					 fr[0].function, fr[0].file ? fr[0].file : "NULL", fr[0].line, want);
		}
		fprintf(stderr, "note: %zu descriptors without frame-table debuginfo symbolized from DWARF\n", tried);
		check(ok == tried, "DWARF-only frames: demangled function, file and line", "%zu of %zu bad: %s",
		      tried - ok, tried, why);
	}
	symbolizer_close(sym);
close:
	frametable_free(ft);
	elf_image_close(img);
out:
	free(srccopy);
}

/* ---- DWARF inline chain, on this test program itself ------------------ */

/* Built -O2 -g (Makefile CFLAGS): self_inlined is inlined into self_outer,
 * so the return address of the call to self_capture has a
 * DW_TAG_inlined_subroutine scope whose call_line is in self_outer. */
static int self_inner_line, self_outer_line;

static __attribute__((noinline)) uint64_t self_capture(void)
{
	uint64_t r = (uint64_t)(uintptr_t)__builtin_return_address(0);

	__asm__ volatile("" : "+r"(r));
	return r;
}

static inline __attribute__((always_inline)) uint64_t self_inlined(void)
{
	enum { call_line = __LINE__ + 1 };
	uint64_t r = self_capture();

	/* Code after the call sits on later lines, so looking up the
	 * return address itself instead of retaddr - 1 would show. */
	self_inner_line = call_line;
	__asm__ volatile("" : "+r"(r)); /* not a tail call */
	return r;
}

static __attribute__((noinline)) uint64_t self_outer(void)
{
	enum { call_line = __LINE__ + 1 };
	uint64_t r = self_inlined();

	self_outer_line = call_line;
	__asm__ volatile("" : "+r"(r));
	return r;
}

int main(int argc, char **argv);

static void test_self_dwarf(void)
{
	struct elf_image *img;
	const struct elf_symbol *m, *fn;
	struct symbolizer *s;
	struct sym_frame fr[MAX_LOCS];
	enum sym_source src = SYM_SRC_NONE;
	uint64_t ret;
	int n;

	if (elf_image_open("/proc/self/exe", &img)) {
		check(false, "DWARF inline chain (self)", "cannot open /proc/self/exe");
		return;
	}
	m = elf_image_symbol(img, "main");
	if (!elf_image_has_dwarf(img) || !m) {
		fprintf(stderr, "note: this test program has no DWARF (built without -g): C inline check not run\n");
		elf_image_close(img);
		return;
	}
	/* Load bias of this PIE: runtime address of main minus its st_value. */
	ret = self_outer() - ((uint64_t)(uintptr_t)&main - m->vaddr);
	fn = elf_image_function_at(img, ret - 1);
	check(fn && strcmp(fn->name, "self_outer") == 0, "function_at finds a local .symtab function", "got %s",
	      fn ? fn->name : "NULL");
	if (symbolizer_open(img, NULL, &s)) {
		check(false, "DWARF inline chain (self)", "symbolizer_open failed");
		elf_image_close(img);
		return;
	}
	n = symbolizer_lookup(s, ret, 0, fr, MAX_LOCS, &src);
	check(n == 2 && src == SYM_SRC_DWARF && strcmp(fr[0].function, "self_inlined") == 0 && fr[0].inlined &&
		      fr[0].line == self_inner_line && strcmp(fr[1].function, "self_outer") == 0 && !fr[1].inlined &&
		      fr[1].line == self_outer_line && fr[0].file && fr[0].file[0] == '/' &&
		      ends_with(fr[0].file, "/unit_parsers.c") && fr[1].file && strcmp(fr[0].file, fr[1].file) == 0,
	      "DWARF inline chain (self)", "n %d src %d: %s %s:%d%s <- %s:%d, want self_inlined:%d <- self_outer:%d", n,
	      src, n > 0 ? fr[0].function : "?", n > 0 && fr[0].file ? fr[0].file : "NULL", n > 0 ? fr[0].line : 0,
	      n > 0 && fr[0].inlined ? " (inlined)" : "", n > 1 ? fr[1].function : "?", n > 1 ? fr[1].line : 0,
	      self_inner_line, self_outer_line);
	symbolizer_close(s);
	elf_image_close(img);
}

/* Is the unit `u` (length n) one of the image's compilation units, as
 * their caml<Unit>__code_begin (4.x) or caml<Unit>.code_begin (5.x)
 * symbols name them? */
static bool is_unit(const struct elf_image *img, const char *u, size_t n)
{
	char sym[600];

	if (n + 20 > sizeof(sym))
		return false;
	snprintf(sym, sizeof(sym), "caml%.*s__code_begin", (int)n, u);
	if (elf_image_symbol(img, sym))
		return true;
	snprintf(sym, sizeof(sym), "caml%.*s.code_begin", (int)n, u);
	return elf_image_symbol(img, sym) != NULL;
}

/* The demangler on a real program's every function symbol that has a
 * debuginfo'd descriptor: the unit it gives is one of the image's units
 * (checked against their code_begin symbols, not the demangler), never a
 * trailing "." nor ".."; and where the debuginfo is the unit's own (its
 * unit the same, or the same without a dune library's "Lib__" prefix, as
 * coccinelle's is), the definition's name is the debuginfo's last one (an
 * anonymous function's "fun" standing for "(fun)", a unit's __entry for
 * its initialisation code). */
static void test_demangle_binary(const char *path)
{
	struct elf_image *img;
	struct frametable *ft;
	const struct elf_symbol *last = NULL;
	struct ocaml_location locs[MAX_LOCS];
	size_t funcs = 0, unit_ok = 0, ambiguous = 0, named = 0, name_ok = 0, malformed = 0;
	char d[512];
	static char bad_unit[700], bad_name[700];

	bad_unit[0] = bad_name[0] = 0;
	if (access(path, R_OK) || elf_image_open(path, &img)) {
		fprintf(stderr, "note: %s not installed: its demangling not checked\n", path);
		return;
	}
	if (frametable_load(img, &ft)) {
		check(false, "demangle a real program", "%s: no frame table", path);
		elf_image_close(img);
		return;
	}
	for (size_t i = 0; i < ft->count; i++) {
		const struct frame_descr *fd = &ft->descrs[i];
		const struct elf_symbol *sym = elf_image_function_at(img, fd->retaddr - 1);
		const char *n, *dlast, *nlast, *ndot;
		size_t du, nu;
		int m;

		if (!sym || sym == last || !fd->has_debuginfo || strncmp(sym->name, "caml", 4) ||
		    !isupper((unsigned char)sym->name[4]) || strstr(sym->name, "code_begin") || strstr(sym->name, "code_end"))
			continue;
		m = frametable_locations(ft, fd, 0, locs, MAX_LOCS);
		if (m <= 0)
			continue;
		last = sym;
		funcs++;
		symbolize_demangle(sym->name, d, sizeof(d));
		malformed += d[strlen(d) - 1] == '.' || strstr(d, "..") != NULL;
		du = strcspn(d, ".");
		if (is_unit(img, d, du)) {
			unit_ok++;
		} else {
			/* "Emit__mem__imp": a "__" of the name's own, which no
			 * symbol tells apart from the unit's; its unit is a prefix */
			bool pre = false;

			for (size_t k = 1; k < du && !pre; k++)
				pre = d[k] == '_' && d[k + 1] == '_' && is_unit(img, d, k);
			ambiguous += pre;
			if (!pre && strlen(bad_unit) < 400)
				snprintf(bad_unit + strlen(bad_unit), sizeof(bad_unit) - strlen(bad_unit), "%s -> %s; ",
					 sym->name, d);
		}
		n = locs[m - 1].name;
		ndot = strchr(n, '.');
		nu = ndot ? (size_t)(ndot - n) : strlen(n);
		if (!((nu == du && !strncmp(n, d, du)) ||
		      (du > nu + 2 && !strncmp(d + du - nu, n, nu) && d[du - nu - 1] == '_' && d[du - nu - 2] == '_')))
			continue; /* code inlined from another unit: not the function's own debuginfo */
		named++;
		dlast = strrchr(d, '.');
		nlast = ndot ? strrchr(n, '.') + 1 : NULL;
		if (dlast && (nlast ? !strcmp(dlast + 1, nlast) || (!strcmp(dlast + 1, "fun") && !strcmp(nlast, "(fun)"))
				    : !strcmp(dlast + 1, "entry")))
			name_ok++;
		else if (strlen(bad_name) < 400)
			snprintf(bad_name + strlen(bad_name), sizeof(bad_name) - strlen(bad_name), "%s -> %s, debuginfo %s; ",
				 sym->name, d, n);
	}
	fprintf(stderr,
		"note: %s: %zu functions with debuginfo; demangled unit one of its units %zu (+%zu whose name has a "
		"\"__\" of its own); with the unit's own debuginfo %zu, the same name %zu\n",
		path, funcs, unit_ok, ambiguous, named, name_ok);
	check(funcs > 100 && !malformed, "demangled names are well formed", "%s: %zu functions, %zu malformed", path,
	      funcs, malformed);
	check(unit_ok + ambiguous == funcs, "demangled unit is one of the program's units", "%s: %zu of %zu; %s", path,
	      unit_ok + ambiguous, funcs, bad_unit);
	/* a sanity bound, not the point: the rest is code the compiler names
	 * after another definition (a closure after its binding, a functor's
	 * body: "Back.write" is "Back.write.P.filename", an optional
	 * argument's wrapper "valid_inner" is "Exp.valid"), which the
	 * symbolizer's one name per function settles from the debuginfo;
	 * measured 91 % (ocamlopt.opt), 89 % (menhir, coqc), 85 % (spatch),
	 * 83 % (frama-c) */
	check(name_ok * 100 >= named * 75, "demangled name is the debuginfo's", "%s: %zu of %zu; %s", path, name_ok,
	      named, bad_name);
	frametable_free(ft);
	elf_image_close(img);
}

int main(int argc, char **argv)
{
	const char *ocamlopt = getenv("CAMLHEAP_OCAMLOPT");

	if (argc != 1 && argc != 3) {
		fprintf(stderr, "usage: %s [FIXTURE SOURCE.ml]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_demangle();
	/* Debian's native OCaml programs: those make test installs, then
	 * the workloads' and the issue reports' where installed */
	static const char *const programs[] = {
		"/usr/bin/ocamlopt.opt", "/usr/bin/menhir", "/usr/bin/ocamlc.opt", "/usr/bin/ocamldep.opt",
		"/usr/bin/ocamllex.opt", "/usr/bin/coqc", "/usr/bin/why3", "/usr/bin/frama-c", "/usr/bin/haxe",
		"/usr/bin/spatch", "/usr/bin/hevea", "/usr/bin/unison",
	};
	for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++)
		test_demangle_binary(programs[i]);
	test_limit_layout();
	test_find_field_load();
	test_self_dwarf();
	test_ocamlopt(ocamlopt ? ocamlopt : DEFAULT_OCAMLOPT);
	if (argc == 3)
		test_fixture(argv[1], argv[2]);
	return failures ? 1 : 0;
}
